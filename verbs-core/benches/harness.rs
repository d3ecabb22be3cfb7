//! Shared setup of the data-path benchmarks (criterion benches and the
//! `datapath_cost` example in `tests/examples/`): an RC QP and a CQ on heap memory standing in
//! for DMA memory, and a heap page standing in for the UAR, so a doorbell is
//! one 64-bit store to plain memory.
//!
//! Completions are produced outside the measured operations: the harness
//! writes CQE images into the CQ ring (what the device would do) and polls
//! them away with [`Harness::retire`].
#![allow(dead_code, missing_docs)]

use platform::MmioWindow;
use platform::host::HostBlock;
use verbs_core::*;

/// The UAR window type the benchmarks use.
pub type Uar = &'static MmioWindow;

/// QPN and user index of the benchmark QP.
pub const QPN: u32 = 0x123;
pub const UIDX: u32 = 5;

pub struct Harness {
    pub qp_mem: &'static HostBlock,
    pub cq_mem: &'static HostBlock,
    pub qp: Qp<Uar>,
    pub cq: Cq<Uar>,
    pub table: CqTable<8>,
    cq_base: *mut u8,
    cq_entries: u32,
    /// CQEs written and not yet polled.
    pending: u32,
}

pub const SGE: [Sge; 1] = [Sge {
    addr: 0x1122_3344_5566_7788,
    length: 4096,
    lkey: 0x00ab_cd01,
}];

pub const REMOTE_ADDR: u64 = 0x0a0b_0c0d_0e0f_1011;
pub const RKEY: u32 = 0x0012_3402;

/// An RDMA write of one SGE, signaled.
pub fn rdma_write(wr_id: u64) -> SendWr<'static> {
    SendWr::new(
        wr_id,
        SendOp::RdmaWrite {
            remote_addr: REMOTE_ADDR,
            rkey: RKEY,
        },
    )
    .sgl(&SGE)
    .flags(SendFlags::SIGNALED)
}

/// What an application keeps per RDMA write it wants to post: the
/// arguments of `post_rdma_write`.
#[derive(Debug, Clone, Copy)]
pub struct Write {
    pub wr_id: u64,
    pub flags: SendFlags,
    pub remote_addr: u64,
    pub rkey: u32,
    pub sge: Sge,
}

/// The same RDMA write as [`rdma_write`], as typed arguments.
pub fn write_args(wr_id: u64) -> Write {
    Write {
        wr_id,
        flags: SendFlags::SIGNALED,
        remote_addr: REMOTE_ADDR,
        rkey: RKEY,
        sge: SGE[0],
    }
}

/// A leaked heap page standing in for a UAR page.
pub fn uar_page() -> Uar {
    let uar_mem: &'static HostBlock = Box::leak(Box::new(HostBlock::new(4096, 4096).unwrap()));
    // SAFETY: the block is leaked, so it outlives the window; it is only
    // accessed through volatile stores.
    let window = unsafe { MmioWindow::new(uar_mem.host_ptr(), 4096) };
    Box::leak(Box::new(window))
}

/// A QP of `qp_type` with `caps` on leaked heap memory lent at DMA address
/// `dma`, ringing its doorbells (BlueFlame register at 0x800) on `uar`.
pub fn make_qp(
    qp_type: QpType,
    qpn: u32,
    caps: QpCaps,
    atomics: bool,
    dma: u64,
    uar: Uar,
) -> (&'static HostBlock, Qp<Uar>) {
    let geometry = QpGeometry::new(qp_type, &caps, &DeviceLimits::default()).unwrap();
    let qp_mem: &'static HostBlock = Box::leak(Box::new(
        HostBlock::new(geometry.layout.total_bytes, 4096).unwrap(),
    ));
    let cfg = QpConfig {
        qp_type,
        qpn,
        geometry,
        atomics,
        sq_sig_all: false,
        eth_min_inline: 0,
    };
    let qp = Qp::new(
        qp_mem.lend(dma, 0).unwrap(),
        Some((uar, BfConfig::new(0))),
        &cfg,
    )
    .map_err(|(e, _)| e)
    .unwrap();
    (qp_mem, qp)
}

/// CQ 7 of 2^log_cq entries, CQE version 1, on leaked heap memory lent at
/// DMA address 0x20_0000, its doorbells on `uar`.
pub fn make_cq(log_cq: u8, uar: Uar) -> (&'static HostBlock, Cq<Uar>) {
    let layout = CqLayout::new(log_cq).unwrap();
    let cq_mem: &'static HostBlock =
        Box::leak(Box::new(HostBlock::new(layout.total_bytes, 4096).unwrap()));
    let cq_cfg = CqConfig {
        cqn: 7,
        layout,
        version: CqeVersion::V1,
        uar_page_offset: 0,
    };
    let cq = Cq::new(cq_mem.lend(0x20_0000, 0).unwrap(), uar, &cq_cfg)
        .map_err(|(e, _)| e)
        .unwrap();
    (cq_mem, cq)
}

/// Writes the CQE image `b` into slot `slot` of the CQ ring at `cq_base`,
/// owner byte last, as the device does.
///
/// # Safety
///
/// `cq_base` must point to a live CQ ring of more than `slot` entries that
/// nothing else accesses concurrently.
pub unsafe fn write_cqe(cq_base: *mut u8, slot: usize, b: &[u8; 64]) {
    // SAFETY: the caller guarantees the 64 bytes at `slot` are inside the
    // ring; the CQ only reads this slot after the owner byte matches.
    unsafe {
        let p = cq_base.add(64 * slot);
        std::ptr::copy_nonoverlapping(b.as_ptr(), p, 63);
        p.add(63).write_volatile(b[63]);
    }
}

impl Harness {
    /// RC QP with room for `max_send_wr` work requests (1 SGE, no inline), a
    /// CQ of 2^log_cq entries, CQE version 1.
    pub fn new(max_send_wr: u32, log_cq: u8) -> Self {
        let uar = uar_page();
        let caps = QpCaps {
            max_send_wr,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 0,
            max_inline_data: 0,
            send_ops: None,
        };
        let (qp_mem, qp) = make_qp(QpType::Rc, QPN, caps, true, 0x10_0000, uar);
        let (cq_mem, cq) = make_cq(log_cq, uar);
        let mut table = CqTable::new();
        table
            .insert(UIDX, qp.completions(true, false, None).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
        Self {
            qp_mem,
            cq_mem,
            qp,
            cq,
            table,
            cq_base: cq_mem.host_ptr().as_ptr(),
            cq_entries: 1 << log_cq,
            pending: 0,
        }
    }

    /// Writes, as the device would, a requester CQE (RDMA write) for the WQE
    /// with WQEBB counter `counter` into the next free CQ slot.
    pub fn device_complete(&mut self, counter: u16) {
        let ci = self.cq.consumer_index().wrapping_add(self.pending);
        let slot = (ci & (self.cq_entries - 1)) as usize;
        let owner = ((ci >> self.cq_entries.trailing_zeros()) & 1) as u8;
        let mut b = [0u8; 64];
        b[0x20..0x24].copy_from_slice(&UIDX.to_be_bytes());
        b[0x38..0x3c].copy_from_slice(&(0x0800_0000 | QPN).to_be_bytes());
        b[0x3c..0x3e].copy_from_slice(&counter.to_be_bytes());
        b[0x3f] = owner;
        // SAFETY: the CQ block is leaked and `slot` < entries; this is the
        // only thread.
        unsafe { write_cqe(self.cq_base, slot, &b) };
        self.pending += 1;
    }

    /// Completes the last posted WQE and polls everything pending, which
    /// retires every outstanding work request.
    pub fn retire(&mut self) {
        let last = self.qp.sq().unwrap().cur_post().wrapping_sub(1) as u16;
        self.device_complete(last);
        let mut wc = [WorkCompletion::default(); 64];
        while self.pending > 0 {
            let n = self.cq.poll(&self.table, &mut wc).unwrap();
            assert!(n > 0, "CQE not found");
            self.pending -= n as u32;
        }
        assert_eq!(self.qp.sq().unwrap().outstanding(), 0);
    }

    /// Marks `n` CQEs as polled by the caller.
    pub fn polled(&mut self, n: u32) {
        self.pending -= n;
    }
}
