//! # hca-emu: a software ConnectX
//!
//! An emulated ConnectX-4 that behaves like the hardware interface: the
//! driver sees BAR0 (init segment at 0, UAR pages after it) through
//! [`platform::Mmio`] and DMA memory behind a simulated IOMMU through
//! [`platform::Platform`]; the firmware model executes the command queue
//! from DMA memory and validates like firmware; faults can be injected.
//!
//! ```
//! use hca_emu::{EmuConfig, EmuHca};
//! use platform::{Mmio, Platform};
//!
//! let emu = EmuHca::new(EmuConfig::default());
//! let p = emu.platform();
//! let bar = p.map_bar(0).unwrap();
//! // Firmware 14.12.1220, command interface revision 5.
//! assert_eq!(bar.read32(0x000).get(), 0x000c_000e);
//! assert_eq!(bar.read32(0x004).get() >> 16, 5);
//! let mem = p.alloc_dma(4096, 4096).unwrap();
//! p.free_dma(mem);
//! emu.assert_clean();
//! ```
//!
//! - [`EmuHca`]: one emulated PCI function, built from an [`EmuConfig`]
//!   (personality, page counts, ports, clock, execution model, delays).
//! - [`EmuHca::platform`]: the [`EmuPlatform`] handle the driver runs on
//!   (`type Mmio = EmuBar`).
//! - [`connect`]: the virtual wire between ports (RoCE v1/v2 frames);
//!   [`EmuHca::plug_loopback`] for a loopback plug and
//!   [`EmuHca::cable_to`] for a wire to another process or a QEMU guest
//!   (a UDP or Unix datagram socket, one frame per datagram, as QEMU's
//!   `-netdev dgram`: [`WireSpec`]); [`EmuHca::capture`] taps a port's
//!   frames (both directions) for a packet capture.
//! - The transport engine executes posted WQEs and writes CQEs (RC, UC,
//!   UD, raw Ethernet): see [`datapath`] (what executes, CQE fields, deviations), [`Datapath`] for
//!   its counters and drop reasons, [`cqe_syndrome`] for the error
//!   syndromes.
//! - [`EmuHca::faults`]: fault injection ([`Faults`], including packet loss
//!   on the wire with [`Faults::drop_packets`], affiliated QP/SRQ/WQ and
//!   internal error events for a chosen object with [`Faults::qp_event`],
//!   [`Faults::srq_event`], [`Faults::wq_event`] and
//!   [`Faults::internal_error_event`], and failing `alloc_dma` with
//!   [`Faults::fail_dma`]).
//! - Personalities ([`Personality`]): the recorded ConnectX-4 (default),
//!   a ConnectX-5 (15b3:1017, `umem_uid_0`: UMEMs and DevX objects with
//!   uid 0, CQs and QPs on UMEMs; packet pacing) and a ConnectX-6 Dx in
//!   real-time clock mode (15b3:101d); what each changes is in
//!   [`personality`].
//! - Packet pacing (ConnectX-5 / 6 Dx, QoS capabilities type 0xc):
//!   SET_PP_RATE_LIMIT writes the rate-limit table
//!   ([`EmuHca::rate_limits`]), a raw SQ's
//!   `packet_pacing_rate_limit_index` ([`Wq::packet_pacing_rate_limit_index`])
//!   names its entry, and the raw SQ engine sends its frames at that
//!   rate (a token bucket; waits counted in [`Datapath::pace_waits`]).
//!   [`EmuConfig::packet_pacing_cap`] false takes it away from those
//!   personalities; the recorded ConnectX-4 never has it.
//! - InfiniBand ports: MAD_IFC (PortInfo, NodeInfo), a subnet manager that
//!   configures a port [`EmuConfig::sm_delay`] after its link comes up
//!   (LID from [`EmuConfig::lid_base`], port state change event), RC/UC
//!   routed by LID.
//! - Personality options: booting with command interface signatures on
//!   ([`EmuConfig::cmdif_checksum`]) and InfiniBand ports
//!   ([`PortType::InfiniBand`]); every port has a P_Key table
//!   (QUERY_HCA_VPORT_PKEY).
//! - Firmware and platform options: the ISSI support QUERY_ISSI reports
//!   ([`IssiSupport`]), CQE version 0 ([`EmuConfig::cqe_version`]), the
//!   timestamp formats offered
//!   ([`EmuConfig::ts_format_caps`], [`EmuConfig::real_time_clock`] for a
//!   later ConnectX in real-time clock mode, which refuses free-running
//!   `ts_format`); all-ones BAR reads after power-on and reset
//!   ([`EmuConfig::boot_all_ones`]); whether the platform's BAR mapping is
//!   write-combining ([`EmuConfig::uar_write_combining`]; BlueFlame copies
//!   through an uncached one fail [`EmuHca::assert_clean`]).
//! - Reports: [`EmuHca::iommu_faults`], [`EmuHca::leak_report`],
//!   [`EmuHca::assert_clean`], [`EmuHca::command_log`].
//!
//! # Fidelity ledger
//!
//! Every rule the emulator enforces or relaxes is listed, with its source
//! (the real ConnectX-4 trace, the PRM, a reference driver's function) or
//! marked as an assumption, in `docs/fidelity.md` at the repository root;
//! a test fails when a rule (a [`syndrome`]) has no row there.
#![forbid(unsafe_code)]

mod config;
pub mod datapath;
mod device;
mod faults;
pub mod frame;
mod fw;
pub mod ifc;
mod iommu;
pub mod personality;
mod rng;
pub mod syndrome;
mod wire;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use config::{
    Clock, EmuConfig, Execution, IssiSupport, PageCounts, Personality, PortType, TsFormatCaps,
};
pub use datapath::{Datapath, DoorbellWrite, Drops, cqe_syndrome, ib_mlid};
pub use device::CommandRecord;
pub use faults::{DmaFailure, FaultRule, Faults, OutputCorruption, PacketDrop};
pub use fw::{Cq, HcaState, Mkey, ObjKind, Qp, QpState, RateLimit, Srq, Umem, Wq, buf_addr};
pub use iommu::{DmaMapError, FaultKind, GUARD_GAP, IOVA_BASE, IommuFault};
pub use wire::{Direction, FrameTap, SOCKET_MAX_FRAME, WireSpec, WireSpecError};

use device::{BAR_SIZE, Device, Event, Shared};
use platform::{Be32, Be64, DmaRegion, Mmio, Platform};

/// Errors of the emulator's own API (not of the emulated device, which
/// answers with command statuses).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EmuError {
    /// A port number that the HCA does not have.
    #[error("port {port} does not exist (the HCA has {ports} ports)")]
    NoSuchPort {
        /// The port asked for.
        port: u8,
        /// Ports the HCA has.
        ports: u8,
    },
    /// The port is already connected.
    #[error("port {0} is already connected")]
    PortBusy(u8),
    /// A port cannot be connected to itself with [`connect`] (use
    /// [`EmuHca::plug_loopback`]).
    #[error("a port cannot be connected to itself (use a loopback plug)")]
    SelfLoop,
    /// The socket of a socket wire could not be set up.
    #[error("socket wire at {path}: {error}")]
    Socket {
        /// The local socket path or address.
        path: String,
        /// What the OS said.
        error: String,
    },
    /// An event was injected for an object that does not exist.
    #[error("no {kind:?} {number:#x} to raise the event for")]
    NoSuchObject {
        /// The kind of object.
        kind: ObjKind,
        /// Its number.
        number: u32,
    },
    /// An event type that is not an event of that kind of object.
    #[error("event type {event_type:#x} is not an event of {of}")]
    NotAnEvent {
        /// The event type.
        event_type: u8,
        /// What it was raised for ("a QP", "an SRQ", "an SQ or RQ").
        of: &'static str,
    },
}

/// Why a CQE could not be written.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum CqeError {
    /// The CQ does not exist.
    #[error("no such CQ")]
    NoSuchCq,
    /// The CQ is in error (it overran before).
    #[error("CQ is in error")]
    CqInError,
    /// The CQ is full (or an overrun was injected): it is now in error.
    #[error("CQ overrun")]
    Overrun,
    /// The CQ buffer or doorbell record is not mapped.
    #[error("IOMMU fault on the CQ buffer or doorbell record")]
    IommuFault,
}

/// What was left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeakReport {
    /// Firmware pages (IOVAs) the driver never took back: still held, or
    /// lost at DISABLE_HCA / function reset.
    pub firmware_pages: Vec<u64>,
    /// Objects alive now, never destroyed.
    pub objects: Vec<(ObjKind, u32)>,
    /// Objects that were still alive at TEARDOWN_HCA (destroyed by it, not
    /// by the driver).
    pub objects_at_teardown: Vec<(ObjKind, u32)>,
    /// DMA regions never freed, as (IOVA, length).
    pub dma_regions: Vec<(u64, usize)>,
}

impl LeakReport {
    /// Whether nothing leaked.
    pub fn is_clean(&self) -> bool {
        *self == LeakReport::default()
    }
}

/// One emulated PCI function.
pub struct EmuHca {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl EmuHca {
    /// Builds the device. In [`Execution::DeviceThread`] mode a device
    /// thread starts.
    pub fn new(cfg: EmuConfig) -> Self {
        let exec = cfg.execution;
        let shared = Arc::new_cyclic(|me| Shared::new(cfg, me.clone()));
        let thread = (exec == Execution::DeviceThread).then(|| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name("hca-emu device".into())
                .spawn(move || device::device_thread(s))
                .expect("spawn the emulated device thread")
        });
        Self { shared, thread }
    }

    /// The platform handle the driver runs on (cheap to clone).
    pub fn platform(&self) -> EmuPlatform {
        EmuPlatform {
            shared: self.shared.clone(),
            msix: Arc::default(),
        }
    }

    /// Fault injection.
    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }

    /// Stepping mode: runs one queued event or due timer. Returns whether
    /// there was one. (In device-thread mode the thread runs everything;
    /// this returns false.)
    pub fn step(&self) -> bool {
        if self.shared.execution == Execution::Stepping {
            self.shared.run_one(self.shared.lock()).1
        } else {
            false
        }
    }

    /// Runs (or waits for) everything the device can do now.
    pub fn run_until_idle(&self) {
        self.shared.wait_idle();
    }

    /// Number of events waiting for the device.
    pub fn pending_events(&self) -> usize {
        self.shared.lock().events.len()
    }

    /// Number of device timers scheduled (command latency, RC ACK and RNR
    /// timers, the error-state flush poll).
    pub fn pending_timers(&self) -> usize {
        self.shared.lock().timers.len()
    }

    /// Advances virtual time (no effect on a real clock).
    pub fn advance(&self, by: Duration) {
        if self.shared.clock == Clock::Virtual {
            self.shared.delay(by);
        }
    }

    /// Device time.
    pub fn now(&self) -> Duration {
        self.shared.now()
    }

    /// `alloc_dma` calls on this HCA's platform so far, and how many of them
    /// failed because of [`Faults::fail_dma`].
    pub fn dma_allocations(&self) -> (u64, u64) {
        self.shared.lock().dma_allocs
    }

    /// Every IOMMU fault so far.
    pub fn iommu_faults(&self) -> Vec<IommuFault> {
        self.shared.lock().iommu.faults.clone()
    }

    /// What has leaked so far (call after teardown and after the driver
    /// freed its memory).
    pub fn leak_report(&self) -> LeakReport {
        let d = self.shared.lock();
        let mut firmware_pages: Vec<u64> = d.fw.pages.held.iter().copied().collect();
        firmware_pages.extend(d.fw.pages_lost.iter().copied());
        LeakReport {
            firmware_pages,
            objects: d.fw.objs.live(),
            objects_at_teardown: d.fw.leaked_at_teardown.clone(),
            dma_regions: d.iommu.mappings(),
        }
    }

    /// Panics with a readable report unless there was no IOMMU fault, no
    /// internal error, no BlueFlame copy through an uncached BAR mapping
    /// ([`uncached_blueflame_stores`](Self::uncached_blueflame_stores)), no
    /// driver ordering error on the data path (a send doorbell rung before
    /// the doorbell record covered its WQE, [`Datapath::doorbell_mismatches`];
    /// a BlueFlame copy that differs from the WQE in memory or stops short,
    /// [`Datapath::bf_mismatches`]),
    /// and nothing leaked.
    #[track_caller]
    pub fn assert_clean(&self) {
        let faults = self.iommu_faults();
        let errors = self.internal_errors();
        let leaks = self.leak_report();
        let uncached_bf = self.shared.lock().uncached_bf.clone();
        let dp = self.datapath();
        let ordering = dp.doorbell_mismatches != 0 || dp.bf_mismatches != 0;
        if !faults.is_empty()
            || !errors.is_empty()
            || !leaks.is_clean()
            || ordering
            || uncached_bf.0 != 0
        {
            let mut msg = String::from("emulated HCA is not clean:\n");
            if let (n @ 1.., Some(first)) = (uncached_bf.0, &uncached_bf.1) {
                msg += &format!(
                    "  {n} BlueFlame stores through an uncached BAR mapping (first: {first})\n"
                );
            }
            for f in &faults {
                msg += &format!("  {f}\n");
            }
            if dp.doorbell_mismatches != 0 {
                msg += &format!(
                    "  {} send doorbells rung before the doorbell record covered their WQE\n",
                    dp.doorbell_mismatches
                );
            }
            if dp.bf_mismatches != 0 {
                msg += &format!(
                    "  {} BlueFlame copies that differ from the WQE in memory or stop short\n",
                    dp.bf_mismatches
                );
            }
            if ordering {
                for l in dp
                    .log
                    .iter()
                    .filter(|l| l.contains("BlueFlame") || l.contains("doorbell names"))
                {
                    msg += &format!("    {l}\n");
                }
            }
            for e in &errors {
                msg += &format!("  firmware internal error: {e}\n");
            }
            if !leaks.firmware_pages.is_empty() {
                msg += &format!(
                    "  {} firmware pages not returned\n",
                    leaks.firmware_pages.len()
                );
            }
            for o in &leaks.objects {
                msg += &format!("  object never destroyed: {:?} {:#x}\n", o.0, o.1);
            }
            for o in &leaks.objects_at_teardown {
                msg += &format!("  object alive at TEARDOWN_HCA: {:?} {:#x}\n", o.0, o.1);
            }
            for r in &leaks.dma_regions {
                msg += &format!("  DMA region never freed: {:#x} ({} bytes)\n", r.0, r.1);
            }
            panic!("{msg}");
        }
    }

    /// Stores into a BlueFlame register beyond its doorbell word while the
    /// platform's BAR mapping is uncached
    /// ([`EmuConfig::uar_write_combining`] = false): BlueFlame copies a
    /// driver must not make there.
    pub fn uncached_blueflame_stores(&self) -> u64 {
        self.shared.lock().uncached_bf.0
    }

    /// Panics raised inside the device model (reported to the driver as a
    /// firmware internal error, health syndrome 0x1). Empty unless the
    /// emulator has a bug.
    pub fn internal_errors(&self) -> Vec<String> {
        self.shared.lock().internal_errors.clone()
    }

    /// Every command the firmware completed or refused, in order.
    pub fn command_log(&self) -> Vec<CommandRecord> {
        self.shared.lock().cmd_log.clone()
    }

    /// Doorbells the device ignored, with the reason (commands before the
    /// queue was ready, doorbells on the wrong UAR...).
    pub fn ignored_doorbells(&self) -> Vec<String> {
        self.shared.lock().ignored_doorbells.clone()
    }

    /// The firmware state.
    pub fn hca_state(&self) -> HcaState {
        self.shared.lock().fw.state
    }

    /// Pages the firmware holds now.
    pub fn firmware_pages(&self) -> usize {
        self.shared.lock().fw.pages.held.len()
    }

    /// Live objects of one kind.
    pub fn objects(&self, kind: ObjKind) -> Vec<u32> {
        self.shared
            .lock()
            .fw
            .objs
            .of(kind)
            .map(|(n, _)| n)
            .collect()
    }

    /// How many interrupts (EQE written to an armed EQ) MSI-X vector `v`
    /// took.
    pub fn interrupts(&self, v: u8) -> u64 {
        self.shared.lock().interrupts.get(&v).copied().unwrap_or(0)
    }

    /// Data-path counters.
    pub fn datapath(&self) -> Datapath {
        self.shared.lock().datapath.clone()
    }

    /// The QP state, if the QP exists.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.shared.lock().fw.objs.qp(qpn).map(|q| q.state)
    }

    /// A copy of a QP's firmware state.
    pub fn qp(&self, qpn: u32) -> Option<Qp> {
        self.shared.lock().fw.objs.qp(qpn).cloned()
    }

    /// A copy of a CQ's firmware state.
    pub fn cq(&self, cqn: u32) -> Option<Cq> {
        self.shared.lock().fw.objs.cq(cqn).cloned()
    }

    /// A copy of a memory key's firmware state, by `mkey_index`.
    pub fn mkey(&self, index: u32) -> Option<Mkey> {
        self.shared.lock().fw.objs.mkey(index).cloned()
    }

    /// A copy of an SRQ's firmware state.
    pub fn srq(&self, srqn: u32) -> Option<Srq> {
        self.shared.lock().fw.objs.srq(srqn).cloned()
    }

    /// A copy of an SQ's or RQ's firmware state.
    pub fn wq(&self, kind: ObjKind, n: u32) -> Option<Wq> {
        self.shared.lock().fw.objs.wq(kind, n).cloned()
    }

    /// The set entries of the packet pacing rate-limit table
    /// (SET_PP_RATE_LIMIT), by `rate_limit_index`.
    pub fn rate_limits(&self) -> Vec<(u16, RateLimit)> {
        self.shared
            .lock()
            .fw
            .rate_limits
            .iter()
            .map(|(&i, &r)| (i, r))
            .collect()
    }

    /// Writes a CQE into a CQ as the data-path engine will: owner bit,
    /// overrun check, injected corruption, completion event when armed.
    pub fn post_cqe(&self, cqn: u32, cqe: &[u8; 64]) -> Result<(), CqeError> {
        let r = self.shared.lock().write_cqe(cqn, cqe);
        self.shared.cv.notify_all();
        r
    }

    /// Whether a port's link is up.
    pub fn link_up(&self, port: u8) -> bool {
        self.shared.lock().link_up(port)
    }

    /// Number of ports.
    pub fn ports(&self) -> u8 {
        self.shared.lock().fw.ports.len() as u8
    }

    fn set_peer(&self, port: u8, peer: Option<wire::Peer>) {
        let mut d = self.shared.lock();
        let before = d.link_up(port);
        match peer {
            Some(p) => {
                d.peers.insert(port, p);
            }
            None => {
                d.peers.remove(&port);
            }
        }
        let after = d.link_up(port);
        if before != after {
            d.link_changed(port, after);
        }
        drop(d);
        self.shared.cv.notify_all();
    }

    fn check_port(&self, port: u8) -> Result<(), EmuError> {
        let d = self.shared.lock();
        let n = d.fw.ports.len() as u8;
        if port == 0 || port > n {
            return Err(EmuError::NoSuchPort { port, ports: n });
        }
        if d.peers.contains_key(&port) {
            return Err(EmuError::PortBusy(port));
        }
        Ok(())
    }

    /// Unplugs the cable of a port (both ends go down; a socket wire's
    /// far end is in another process and sees its frames dropped).
    pub fn disconnect(&self, port: u8) {
        let peer = self.shared.lock().peers.get(&port).cloned();
        self.set_peer(port, None);
        match peer {
            Some(wire::Peer::Socket(s)) => s.close(),
            Some(p @ wire::Peer::Port { .. }) => {
                if let Some((h, pp)) = p.hca() {
                    let other = EmuHca {
                        shared: h,
                        thread: None,
                    };
                    other.set_peer(pp, None);
                }
            }
            Some(wire::Peer::Loopback) | None => {}
        }
    }

    /// Puts a loopback plug into a port: every frame it sends comes back in
    /// on the same port, and the link comes up (if its PAOS admin status is
    /// up). Two queue pairs of one HCA then talk through the port, addressed
    /// as a remote peer would address them (the port's own LID, MAC or GID).
    pub fn plug_loopback(&self, port: u8) -> Result<(), EmuError> {
        self.check_port(port)?;
        self.set_peer(port, Some(wire::Peer::Loopback));
        Ok(())
    }

    /// Cables a port to a datagram socket wire ([`WireSpec`]): the socket
    /// is bound at the local end (a stale Unix socket file there is
    /// replaced) and every frame the port sends goes, one frame per
    /// datagram, to the peer end: another process's emulated HCA cabled
    /// with [`WireSpec::far_end`], or a QEMU guest's NIC on
    /// `-netdev dgram` (see the `wire` notes in the crate docs). The link
    /// comes up at once (if its PAOS admin status is up); frames sent while
    /// nothing is bound at the peer are lost, as on an unplugged far end.
    /// Meant for [`Clock::Real`].
    pub fn cable_to(&self, port: u8, spec: &WireSpec) -> Result<(), EmuError> {
        self.check_port(port)?;
        let taps = self.shared.lock().taps.clone();
        let w = wire::SocketWire::open(Arc::downgrade(&self.shared), taps, port, spec).map_err(
            |e| EmuError::Socket {
                path: spec.local_name(),
                error: e.to_string(),
            },
        )?;
        self.set_peer(port, Some(wire::Peer::Socket(w)));
        Ok(())
    }

    /// Taps a port: `tap` is called with every frame the port puts on its
    /// cable ([`Direction::Out`]) and every frame that comes in on it
    /// ([`Direction::In`]), whatever the cable (another emulated port, a
    /// socket wire). A frame that never left the port (to its own MAC
    /// address, through a loopback plug, to another port of the same HCA)
    /// is seen once, coming in. Frames an injected fault drops
    /// ([`Faults::drop_packets`]) or a down link never sends are not seen.
    /// Replaces an earlier tap of the port; the tap stays through cable
    /// changes until [`stop_capture`](Self::stop_capture).
    pub fn capture(&self, port: u8, tap: FrameTap) -> Result<(), EmuError> {
        let d = self.shared.lock();
        let n = d.fw.ports.len() as u8;
        if port == 0 || port > n {
            return Err(EmuError::NoSuchPort { port, ports: n });
        }
        d.taps.set(port, Some(tap));
        Ok(())
    }

    /// Removes a port's tap (the [`FrameTap`] is dropped).
    pub fn stop_capture(&self, port: u8) {
        self.shared.lock().taps.set(port, None);
    }

    /// Frames a port's socket wire could not hand to the far end (nothing
    /// bound at the peer path, or its queue full); 0 for other cables.
    pub fn socket_frames_unsent(&self, port: u8) -> u64 {
        match self.shared.lock().peers.get(&port) {
            Some(wire::Peer::Socket(s)) => s.unsent.load(std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        }
    }
}

/// The cookie of the user mappings of [`EmuPlatform::map_user`].
const USER_MAPPING_COOKIE: usize = 0x656d_7573;

/// What [`EmuHca::set_msix_sink`] calls with the MSI-X vector of every
/// interrupt.
pub type MsixSink = Arc<dyn Fn(u16) + Send + Sync>;

/// Foreign DMA memory, MSI-X delivery and BAR geometry: what a front end
/// that presents the emulated function to another program (the emulated
/// VFIO device of `vfio-emu`) needs.
impl EmuHca {
    /// Maps `window` (memory of this process the emulator did not
    /// allocate) into the function's IOMMU at `iova`, as
    /// `VFIO_IOMMU_MAP_DMA` does on Linux. Device accesses inside it go to
    /// that memory; accesses outside every mapping are IOMMU faults as
    /// always.
    ///
    /// # Errors
    ///
    /// [`DmaMapError::Misaligned`] (IOVA or length not a multiple of
    /// 4 KiB), [`DmaMapError::Wraps`], [`DmaMapError::Overlap`] (with
    /// another window or an `alloc_dma` region).
    pub fn map_dma(
        &self,
        iova: u64,
        window: platform::host::HostWindow,
    ) -> Result<(), DmaMapError> {
        self.shared.lock().iommu.map_window(iova, window)
    }

    /// Unmaps the window mapped at `iova` with length `len` and returns
    /// it. Firmware pages (MANAGE_PAGES) or live queue buffers inside it
    /// are recorded as [`FaultKind::FreedWhileHeld`] IOMMU faults, like a
    /// `free_dma` of such memory; the unmap happens anyway.
    ///
    /// # Errors
    ///
    /// [`DmaMapError::NotMapped`]: no window starts at `iova` with that
    /// length.
    pub fn unmap_dma(
        &self,
        iova: u64,
        len: u64,
    ) -> Result<platform::host::HostWindow, DmaMapError> {
        unmap_window_checked(&mut self.shared.lock(), iova, len)
    }

    /// Reads memory behind the IOMMU without it being a device access (no
    /// fault is recorded): what a front end needs to mirror what the
    /// device would see, such as the ownership bits of the command queue.
    /// `false` when `iova .. iova + dst.len()` is not inside one mapping.
    pub fn peek_dma(&self, iova: u64, dst: &mut [u8]) -> bool {
        self.shared.lock().iommu.peek(iova, dst)
    }

    /// The foreign windows mapped now, as (IOVA, length, host address).
    pub fn dma_windows(&self) -> Vec<(u64, usize, usize)> {
        self.shared.lock().iommu.windows()
    }

    /// Calls `sink` with the MSI-X vector of every interrupt the function
    /// raises from now on (an EQE written to an armed EQ, or an EQ armed
    /// with events pending: where [`interrupts`](Self::interrupts)
    /// counts). The sink runs on the device thread with the device locked:
    /// it must not call back into this HCA. `None` removes it.
    pub fn set_msix_sink(&self, sink: Option<MsixSink>) {
        self.shared.lock().msix_sink = sink;
    }

    /// MSI-X vectors the function offers ([`EmuConfig::msix_vectors`]).
    pub fn msix_vectors(&self) -> u8 {
        self.shared.lock().cfg.msix_vectors
    }

    /// Size of BAR0 in bytes.
    pub fn bar_size(&self) -> usize {
        BAR_SIZE
    }

    /// Size of a UAR page in bytes (4 KiB << `log_uar_page_sz` of the
    /// current capabilities): UAR `n` is the BAR0 page at `n * size`.
    pub fn uar_page_size(&self) -> usize {
        self.shared.lock().uar_page_size()
    }

    /// The UARs allocated now (ALLOC_UAR, and the driver's UAR page 0 when
    /// the firmware has it).
    pub fn uars(&self) -> Vec<u32> {
        self.objects(ObjKind::Uar)
    }
}

/// Unmaps a foreign window; firmware pages or live queue buffers inside it
/// are recorded as [`FaultKind::FreedWhileHeld`] faults (the unmap happens
/// anyway).
fn unmap_window_checked(
    d: &mut device::Device,
    iova: u64,
    len: u64,
) -> Result<platform::host::HostWindow, DmaMapError> {
    let w = d.iommu.unmap_window(iova, len)?;
    let end = iova.saturating_add(len);
    let held: Vec<u64> = d.fw.pages.held.range(iova..end).copied().collect();
    if let Some(&first) = held.first() {
        let what = format!("DMA unmap of memory holding {} firmware pages", held.len());
        d.iommu
            .fault(FaultKind::FreedWhileHeld, first, held.len() * 4096, &what);
    }
    let in_use = d.fw.objs.buffers();
    if let Some(&(k, n, a, l)) = in_use.iter().find(|b| b.2 >= iova && b.2 < end) {
        let what = format!("DMA unmap of a buffer of live {k:?} {n:#x}");
        d.iommu.fault(FaultKind::FreedWhileHeld, a, l, &what);
    }
    Ok(w)
}

/// Connects port `pa` of `a` to port `pb` of `b` (which may be the same HCA
/// with another port). Both links come up (if their PAOS admin status is
/// up) and each HCA posts a port state change event.
pub fn connect(a: &EmuHca, pa: u8, b: &EmuHca, pb: u8) -> Result<(), EmuError> {
    if Arc::ptr_eq(&a.shared, &b.shared) && pa == pb {
        return Err(EmuError::SelfLoop);
    }
    a.check_port(pa)?;
    b.check_port(pb)?;
    a.set_peer(
        pa,
        Some(wire::Peer::Port {
            hca: Arc::downgrade(&b.shared),
            port: pb,
        }),
    );
    b.set_peer(
        pb,
        Some(wire::Peer::Port {
            hca: Arc::downgrade(&a.shared),
            port: pa,
        }),
    );
    Ok(())
}

impl Drop for EmuHca {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.shared.lock().shutdown = true;
            self.shared.cv.notify_all();
            let _ = t.join();
        }
    }
}

/// The platform of an emulated HCA: DMA memory behind the simulated IOMMU,
/// BAR0, PCI configuration space, the device's clock, and MSI-X interrupts
/// ([`EmuConfig::msix_vectors`] vectors, counted by the device as in
/// [`EmuHca::interrupts`]).
///
/// Interrupt waits sleep on the device's condition variable in
/// device-thread mode with the real clock; in stepping mode they run the
/// device, and on the virtual clock they let it catch up and advance time
/// as [`Platform::relax`] does, so a wait that times out ends. Each handle
/// [`EmuHca::platform`] returns has its own MSI-X enable (its clones share
/// it), as each process opening a VFIO device sets up its own eventfds.
#[derive(Clone)]
pub struct EmuPlatform {
    shared: Arc<Shared>,
    msix: Arc<std::sync::Mutex<EmuMsix>>,
}

/// The MSI-X vectors a platform handle enabled: the device's interrupt
/// counts at the enable, which its counts start from.
#[derive(Default, Debug)]
struct EmuMsix {
    base: Vec<u64>,
}

impl EmuPlatform {
    fn msix(&self) -> std::sync::MutexGuard<'_, EmuMsix> {
        self.msix.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The base count of an enabled vector.
    fn vector_base(&self, vector: u16) -> Result<u64, platform::Error> {
        let m = self.msix();
        m.base
            .get(usize::from(vector))
            .copied()
            .ok_or(platform::Error::VectorNotEnabled {
                vector,
                enabled: m.base.len() as u16,
            })
    }
}

impl core::fmt::Debug for EmuPlatform {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EmuPlatform(emulated ConnectX-4)")
    }
}

impl Platform for EmuPlatform {
    type Mmio = EmuBar;

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaRegion, platform::Error> {
        let mut d = self.shared.lock();
        d.dma_allocs.0 += 1;
        if let Some(e) = d.faults.dma_fails(len) {
            d.dma_allocs.1 += 1;
            log::debug!("alloc_dma of {len} bytes fails (injected): {e}");
            return Err(e);
        }
        d.iommu.map(len, align)
    }

    fn free_dma(&self, region: DmaRegion) {
        let mut d = self.shared.lock();
        let (iova, len) = (region.iova(), region.len());
        let held: Vec<u64> =
            d.fw.pages
                .held
                .range(iova..iova.saturating_add(len as u64))
                .copied()
                .collect();
        if !held.is_empty() {
            d.iommu.fault(
                FaultKind::FreedWhileHeld,
                held[0],
                held.len() * 4096,
                &format!("free_dma of memory holding {} firmware pages", held.len()),
            );
        }
        let in_use: Vec<_> =
            d.fw.objs
                .buffers()
                .into_iter()
                .filter(|&(_, _, a, _)| a >= iova && a < iova + len as u64)
                .collect();
        if let Some(&(k, n, a, l)) = in_use.first() {
            d.iommu.fault(
                FaultKind::FreedWhileHeld,
                a,
                l,
                &format!("free_dma of a buffer of live {k:?} {n:#x}"),
            );
        }
        d.iommu.unmap(region);
    }

    fn bar_write_combining(&self, bar: u8) -> bool {
        bar == 0 && self.shared.lock().cfg.uar_write_combining
    }

    fn map_bar(&self, bar: u8) -> Result<EmuBar, platform::Error> {
        if bar != 0 {
            return Err(platform::Error::NoSuchBar(bar));
        }
        Ok(EmuBar {
            shared: self.shared.clone(),
        })
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), platform::Error> {
        let d = self.shared.lock();
        let o = usize::from(offset);
        let src = d
            .config_space
            .get(o..o + buf.len())
            .ok_or(platform::Error::InvalidArgument(
                "config space access out of range",
            ))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), platform::Error> {
        let mut d = self.shared.lock();
        let o = usize::from(offset);
        if o + buf.len() > d.config_space.len() {
            return Err(platform::Error::InvalidArgument(
                "config space access out of range",
            ));
        }
        // Only the command register is writable.
        for (i, &b) in buf.iter().enumerate() {
            if o + i == 4 || o + i == 5 {
                d.config_space[o + i] = b;
            }
        }
        Ok(())
    }

    fn now(&self) -> Duration {
        self.shared.now()
    }

    fn delay(&self, d: Duration) {
        self.shared.delay(d)
    }

    fn relax(&self) {
        self.shared.relax()
    }

    fn reset_function(&self) -> Result<(), platform::Error> {
        // A reset function raises no interrupt until it is set up again.
        self.msix().base.clear();
        let mut d = self.shared.lock();
        let held: Vec<u64> = std::mem::take(&mut d.fw.pages.held).into_iter().collect();
        let live = d.fw.objs.live();
        d.fw.pages_lost.extend(held);
        d.fw.leaked_at_teardown.extend(live);
        d.reset();
        Ok(())
    }

    fn describe(&self) -> &str {
        match self.shared.lock().cfg.personality {
            Personality::ConnectX4 => "emulated ConnectX-4 (hca-emu)",
            Personality::ConnectX5 => "emulated ConnectX-5 (hca-emu)",
            Personality::ConnectX6Dx => "emulated ConnectX-6 Dx (hca-emu)",
        }
    }

    /// Maps the page span into the simulated IOMMU (a
    /// [`HostWindow`](platform::host::HostWindow) over the caller's
    /// memory) at an IOVA of the emulator's space: device accesses reach
    /// those very bytes until [`unmap_user`](Platform::unmap_user), and
    /// fault after it like any access outside every mapping.
    fn map_user(
        &self,
        mem: platform::UserMemory,
    ) -> Result<platform::UserMapping, platform::Error> {
        let (host, span) = mem.span();
        #[cfg(target_os = "linux")]
        if !platform::user::is_mapped(host, span) {
            return Err(platform::Error::UserMemoryFault {
                host,
                len: span,
                reason: "a page is not mapped in the process (EFAULT)",
            });
        }
        let window = platform::host::HostWindow::over_user(mem)?;
        let iova = self
            .shared
            .lock()
            .iommu
            .map_window_anywhere(window)
            .map_err(|_| platform::Error::UserMemoryFault {
                host,
                len: span,
                reason: "no room in the emulated IOMMU's IOVA space",
            })?;
        platform::UserMapping::new(host, span, iova, USER_MAPPING_COOKIE)
    }

    fn unmap_user(&self, mapping: platform::UserMapping) -> Result<(), platform::Error> {
        let foreign = platform::Error::ForeignUserMapping {
            host: mapping.host_addr(),
            len: mapping.len(),
        };
        let mut d = self.shared.lock();
        let ours =
            d.iommu
                .windows()
                .contains(&(mapping.iova(), mapping.len(), mapping.host_addr()));
        if mapping.cookie() != USER_MAPPING_COOKIE || !ours {
            return Err(foreign);
        }
        unmap_window_checked(&mut d, mapping.iova(), mapping.len() as u64).map_err(|_| foreign)?;
        Ok(())
    }

    fn msix_vectors(&self) -> u16 {
        u16::from(self.shared.lock().cfg.msix_vectors)
    }

    fn enable_msix(&self, n: u16) -> Result<(), platform::Error> {
        let available = self.msix_vectors();
        if n == 0 || n > available {
            return Err(platform::Error::TooManyVectors {
                requested: n,
                available,
            });
        }
        let base = {
            let d = self.shared.lock();
            (0..n)
                .map(|v| d.interrupts.get(&(v as u8)).copied().unwrap_or(0))
                .collect()
        };
        self.msix().base = base;
        Ok(())
    }

    fn disable_msix(&self) -> Result<(), platform::Error> {
        self.msix().base.clear();
        Ok(())
    }

    /// An eventfd of the emulator's own for the vector, signalled at each
    /// of its interrupts (made at the first call, while the vector is
    /// enabled on this handle).
    #[cfg(target_os = "linux")]
    fn interrupt_fd(&self, vector: u16) -> Option<i32> {
        self.vector_base(vector).ok()?;
        let v = u8::try_from(vector).ok()?;
        let mut d = self.shared.lock();
        if let Some(fd) = d.irq_fds.get(&v) {
            return Some(fd.raw_fd());
        }
        match platform::notify::EventFd::new() {
            Ok(fd) => {
                let raw = fd.raw_fd();
                d.irq_fds.insert(v, Arc::new(fd));
                Some(raw)
            }
            Err(e) => {
                log::warn!("eventfd for MSI-X vector {vector}: {e}");
                None
            }
        }
    }

    fn wait_interrupt(
        &self,
        vector: u16,
        seen: u64,
        timeout: Duration,
    ) -> Result<u64, platform::Error> {
        let base = self.vector_base(vector)?;
        let v = vector as u8;
        let count = |d: &device::Device| {
            d.drain_irq_fd(v);
            d.interrupts
                .get(&v)
                .copied()
                .unwrap_or(0)
                .saturating_sub(base)
        };
        let shared = &self.shared;
        if shared.clock == Clock::Real && shared.execution == Execution::DeviceThread {
            let start = std::time::Instant::now();
            let mut d = shared.lock();
            loop {
                let c = count(&d);
                let left = timeout.saturating_sub(start.elapsed());
                if c > seen || left.is_zero() {
                    return Ok(c);
                }
                d = shared
                    .cv
                    .wait_timeout(d, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        let start = shared.now();
        loop {
            let c = count(&shared.lock());
            if c > seen || shared.now().saturating_sub(start) >= timeout {
                return Ok(c);
            }
            shared.relax();
        }
    }
}

/// BAR0 of an emulated HCA: the init segment at 0, UAR pages after it.
/// Register writes reach the device as events; doorbells are executed on
/// the device's schedule.
#[derive(Clone)]
pub struct EmuBar {
    shared: Arc<Shared>,
}

impl core::fmt::Debug for EmuBar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EmuBar")
    }
}

impl Mmio for EmuBar {
    fn len(&self) -> usize {
        BAR_SIZE
    }

    fn read32(&self, offset: usize) -> Be32 {
        if let Err(e) = self.check(offset, 4) {
            panic!("{e}");
        }
        Be32::new(self.shared.lock().bar_read32(offset))
    }

    fn write32(&self, offset: usize, value: Be32) {
        if let Err(e) = self.check(offset, 4) {
            panic!("{e}");
        }
        self.write(offset, u64::from(value.get()), 4);
    }

    fn write64(&self, offset: usize, value: Be64) {
        if let Err(e) = self.check(offset, 8) {
            panic!("{e}");
        }
        self.write(offset, value.get(), 8);
    }

    /// One write-combined burst: the device sees the whole copy as one
    /// BlueFlame write (see [`datapath`]).
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        let last = offset.saturating_add(8 * src.len().saturating_sub(1));
        if let Err(e) = self.check(offset, 8).and_then(|()| self.check(last, 8)) {
            panic!("{e}");
        }
        let bytes: Vec<u8> = src.iter().flat_map(|w| w.get().to_be_bytes()).collect();
        let mut d = self.shared.lock();
        for i in 0..src.len() {
            note_uncached_blueflame(&mut d, offset + 8 * i, 8);
        }
        d.bar_write_bf(offset, bytes);
        drop(d);
        self.shared.cv.notify_all();
    }
}

/// Counts a store into a BlueFlame register beyond its doorbell word while
/// the platform's BAR mapping is uncached ([`EmuConfig::uar_write_combining`]
/// false). A BlueFlame register (the two 256-byte halves at UAR page offset
/// 0x800) takes the doorbell in its first 8 bytes; a store beyond them is
/// part of a BlueFlame copy, which an uncached mapping cannot deliver as one
/// burst (rdma-core never copies through one: it maps UARs non-cached only
/// with BlueFlame shut off).
fn note_uncached_blueflame(d: &mut Device, offset: usize, width: u8) {
    if d.cfg.uar_write_combining || offset < device::reg::INIT_SEG_SIZE {
        return;
    }
    let o = offset % d.uar_page_size();
    if (0x800..0xa00).contains(&o) && o & 0xff >= 8 {
        d.uncached_bf.0 += 1;
        if d.uncached_bf.1.is_none() {
            d.uncached_bf.1 = Some(format!(
                "{width}-byte store at BAR offset {offset:#x} (UAR page offset {o:#x})"
            ));
        }
    }
}

impl EmuBar {
    fn write(&self, offset: usize, value: u64, width: u8) {
        let mut d: std::sync::MutexGuard<'_, Device> = self.shared.lock();
        note_uncached_blueflame(&mut d, offset, width);
        d.bar_write(offset, value, width);
        drop(d);
        self.shared.cv.notify_all();
    }

    /// Posts a frame to this HCA's port as if it came from the wire.
    #[allow(dead_code)]
    pub(crate) fn post_frame(&self, port: u8, bytes: Vec<u8>) {
        self.shared.post(Event::Frame {
            port,
            bytes,
            flight: None,
        });
    }
}
