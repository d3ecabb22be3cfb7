//! The data path: where the transport engine plugs in (issue 5).
//!
//! What exists now:
//! - Send doorbells (UAR offset 0x800..0x9ff, 64-bit stores and BlueFlame
//!   copies) arrive at [`send_doorbell`] with the UAR page, offset and value
//!   (the first 8 bytes of the WQE's control segment: `qpn << 8 | ds` in the
//!   low word). They are counted and kept in [`Datapath::doorbells`]; nothing
//!   is executed yet.
//! - CQ arm doorbells (UAR offset 0x20) are handled by the firmware model:
//!   the CQ records `armed` (solicited only or not) and its `arm_sn`; a
//!   completion event goes to the CQ's EQ at the next CQE (or at once if
//!   CQEs are pending).
//! - [`Device::write_cqe`](crate::device::Device) (reachable from tests as
//!   [`EmuHca::post_cqe`](crate::EmuHca::post_cqe)) writes a CQE with the
//!   owner bit, checks overrun against the consumer index in the CQ's
//!   doorbell record, applies injected CQE corruption and overruns, and
//!   raises the completion event when the CQ is armed.
//! - Frames from the virtual wire arrive at `receive_frame` (counted, then
//!   dropped).
//!
//! What the engine has to do: on a send doorbell, look the QP (or SQ) up in
//! `dev.fw.objs` (`qp(qpn)`: state, type, PD, CQs, buffer pages
//! `pas`/`log_page_size`, `dbr_addr`, the context image `ctx` with the
//! address path, PSNs, Q_Key...), read the doorbell record and the WQEs
//! through `dev.iommu` (`read`/`write` record IOMMU faults), translate
//! lkeys/rkeys with the MKEY table (`ObjKind::Mkey`: `Mkey` has PD, access
//! rights, start/len, PA or MTT translation), move data (same HCA, or the
//! peer over `dev.peers` with `Shared::post(Event::Frame ..)` to its
//! queue; never lock the peer while holding this device's lock), and write
//! CQEs with `write_cqe`. The receive side consumes RQ or SRQ WQEs the same
//! way. Everything the engine needs is `pub(crate)` on `Device`.

use crate::device::Device;

/// One doorbell write the data path received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoorbellWrite {
    /// UAR page.
    pub uar: u32,
    /// Offset in the page (0x800 or 0x900 for the send doorbell/BlueFlame).
    pub offset: usize,
    /// Value written (device byte order, as a host integer of the bytes).
    pub value: u64,
    /// Access width in bytes.
    pub width: u8,
}

/// Data-path state and counters.
#[derive(Clone, Debug, Default)]
pub struct Datapath {
    /// Send doorbell writes received (most recent last, at most 4096 kept).
    pub doorbells: Vec<DoorbellWrite>,
    /// CQ arm doorbells handled.
    pub cq_arms: u64,
    /// CQs that overran.
    pub cq_overruns: Vec<u32>,
    /// EQs that overran.
    pub eq_overruns: Vec<u32>,
    /// Frames received from the wire and dropped (no engine yet).
    pub frames_dropped: u64,
}

/// A send doorbell or BlueFlame write.
pub(crate) fn send_doorbell(dev: &mut Device, uar: u32, offset: usize, value: u64, width: u8) {
    let d = &mut dev.datapath;
    if d.doorbells.len() >= 4096 {
        d.doorbells.remove(0);
    }
    d.doorbells.push(DoorbellWrite {
        uar,
        offset,
        value,
        width,
    });
}

impl Device {
    /// A frame from the wire.
    pub(crate) fn receive_frame(&mut self, port: u8, bytes: Vec<u8>) {
        log::trace!(
            "port {port}: frame of {} bytes dropped (no data-path engine)",
            bytes.len()
        );
        self.datapath.frames_dropped += 1;
    }
}
