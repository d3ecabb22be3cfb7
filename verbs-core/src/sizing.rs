//! Queue sizing, the rules of rdma-core's `mlx5_calc_sq_size`,
//! `mlx5_calc_rq_size` and `mlx5_alloc_srq_buf`, and the layout of a
//! queue's DMA region.
//!
//! # Send queue
//!
//! - *overhead* (`_sq_overhead`): the largest fixed part of a WQE for the
//!   operations the QP may post: control segment (16); RDMA ops: + remote
//!   address (32 total); atomics: + atomic segment (48 total); `LOCAL_INV` /
//!   `BIND_MW`: UMR control + mkey context + 64 (192 total); plus per
//!   transport: UD datagram segment +48, raw packet Ethernet segment +32.
//! - *WQE size* (`mlx5_calc_send_wqe`): `max(overhead + 16 * max_send_sge,
//!   overhead + align16(4 + max_inline_data))`, rounded up to 64.
//! - `max_inline_data = wqe_size - overhead - 4` (what the QP reports back).
//! - `wq_size = roundup_pow2(max_send_wr * wqe_size)`; `wqe_cnt = wq_size /
//!   64` WQEBBs; `max_post = wq_size / wqe_size` outstanding work requests.
//!
//! The golden fixture `rc_qp` (RC, all ten operations, 128 WR, 4 SGE, 128
//! inline) comes out as overhead 192, WQE 384 bytes, `max_inline_data`
//! 188, 1024 WQEBBs, `max_post` 170; `ud_qp` (UD, SEND and SEND_WITH_IMM, 64
//! WR, 2 SGE, 64 inline) as overhead 64, WQE 192, inline 124, 256 WQEBBs,
//! `max_post` 85.
//!
//! # Receive queue
//!
//! WQE = `roundup_pow2(16 * max(max_recv_sge, 1))` bytes (the stride,
//! `log_rq_stride = log2(stride) - 4` in the QPC), `wqe_cnt =
//! max(roundup_pow2(max_recv_wr) * stride, 64) / stride`, `max_post =
//! wqe_cnt`, `max_gs = stride / 16`. `rc_qp`: 64 WQEs of 64 bytes, 4 SGEs;
//! `ud_qp`: 64 of 16 bytes, 1 SGE.
//!
//! # Shared receive queue
//!
//! WQE = `roundup_pow2(max(32, 16 + 16 * max_sge))`, `max_gs = (WQE - 16) /
//! 16`; `wqe_cnt = roundup_pow2(max_wr + 1)` (one WQE stays in the free list
//! as its tail), so `max_wr = wqe_cnt - 1`.
//!
//! # QP buffer layout
//!
//! `[RQ ring | SQ ring]` (RQ at 0, SQ at the RQ's size, as rdma-core; this
//! part is what CREATE_QP's page list describes), then at a 64-byte boundary
//! the 8-byte doorbell record (`dbr_addr`), then at the next 64-byte
//! boundary host-only bookkeeping the device is never told about: counters,
//! the `wr_id` tables, the send queue's `wqe_head` table and the receive
//! queue's posted lengths.

use crate::mem::align_up;
use crate::qp::QpType;
use crate::wqe::SEND_WQE_BB;
use crate::{Error, av::AV_SIZE};

/// `IBV_QP_EX_WITH_*`: the operations a QP may post, which decide the send
/// WQE overhead.
pub mod send_ops {
    /// `IBV_QP_EX_WITH_RDMA_WRITE`.
    pub const RDMA_WRITE: u64 = 1 << 0;
    /// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `IBV_QP_EX_WITH_SEND`.
    pub const SEND: u64 = 1 << 2;
    /// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    /// `IBV_QP_EX_WITH_RDMA_READ`.
    pub const RDMA_READ: u64 = 1 << 4;
    /// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// `IBV_QP_EX_WITH_LOCAL_INV`.
    pub const LOCAL_INV: u64 = 1 << 7;
    /// `IBV_QP_EX_WITH_BIND_MW`.
    pub const BIND_MW: u64 = 1 << 8;
    /// `IBV_QP_EX_WITH_SEND_WITH_INV`.
    pub const SEND_WITH_INV: u64 = 1 << 9;
    /// `IBV_QP_EX_WITH_TSO`.
    pub const TSO: u64 = 1 << 10;
}

/// Device limits the sizing needs (from the HCA capabilities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest send WQE in bytes (`max_wqe_sz_sq`).
    pub max_sq_desc_sz: u32,
    /// Largest receive WQE in bytes (`max_wqe_sz_rq`).
    pub max_rq_desc_sz: u32,
    /// Most WQEBBs in a send queue (`1 << log_max_qp_sz`).
    pub max_send_wqebb: u32,
    /// Most receive work requests (`1 << log_max_qp_sz`).
    pub max_recv_wr: u32,
}

impl Default for DeviceLimits {
    /// ConnectX-4 values: 1024-byte send WQEs, 512-byte receive WQEs, 2^15
    /// entries per queue.
    fn default() -> Self {
        Self {
            max_sq_desc_sz: 1024,
            max_rq_desc_sz: 512,
            max_send_wqebb: 1 << 15,
            max_recv_wr: 1 << 15,
        }
    }
}

/// What the caller asks a QP for (`struct ibv_qp_cap` plus the send
/// operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests (0 with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Inline bytes per send work request.
    pub max_inline_data: u32,
    /// `IBV_QP_EX_WITH_*` operations; `None` = rdma-core's defaults for the
    /// QP type (RC/UC: the ten RC operations; UD: SEND, SEND_WITH_IMM, TSO;
    /// raw packet: SEND, TSO).
    pub send_ops: Option<u64>,
}

/// Send queue geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqGeometry {
    /// WQEBBs in the ring (a power of two; `log_sq_size` = log2).
    pub wqe_cnt: u32,
    /// Outstanding work requests allowed.
    pub max_post: u32,
    /// SGEs per work request.
    pub max_gs: u32,
    /// Inline bytes per work request.
    pub max_inline_data: u32,
    /// Largest WQE in bytes (a multiple of 64).
    pub max_wqe_size: u32,
    /// The fixed WQE overhead the size was computed from.
    pub overhead: u32,
}

impl SqGeometry {
    /// `log_sq_size` for the QPC.
    pub fn log_sq_size(&self) -> u8 {
        self.wqe_cnt.trailing_zeros() as u8
    }
    /// Ring size in bytes.
    pub fn bytes(&self) -> usize {
        self.wqe_cnt as usize * SEND_WQE_BB
    }
}

/// Receive queue geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RqGeometry {
    /// WQEs in the ring (a power of two).
    pub wqe_cnt: u32,
    /// log2 of the WQE stride in bytes (`wqe_shift`).
    pub wqe_shift: u8,
    /// Outstanding work requests allowed.
    pub max_post: u32,
    /// SGEs per work request.
    pub max_gs: u32,
}

impl RqGeometry {
    /// `log_rq_size` for the QPC.
    pub fn log_rq_size(&self) -> u8 {
        self.wqe_cnt.trailing_zeros() as u8
    }
    /// `log_rq_stride` for the QPC (stride = 16 << log_rq_stride).
    pub fn log_rq_stride(&self) -> u8 {
        self.wqe_shift - 4
    }
    /// Ring size in bytes.
    pub fn bytes(&self) -> usize {
        (self.wqe_cnt as usize) << self.wqe_shift
    }
}

/// Default `IBV_QP_EX_WITH_*` set of a QP type (rdma-core `sq_overhead`).
pub fn default_send_ops(qp_type: QpType) -> u64 {
    use send_ops::*;
    match qp_type {
        QpType::Rc | QpType::Uc => {
            SEND | SEND_WITH_INV
                | SEND_WITH_IMM
                | RDMA_WRITE
                | RDMA_WRITE_WITH_IMM
                | RDMA_READ
                | ATOMIC_CMP_AND_SWP
                | ATOMIC_FETCH_AND_ADD
                | LOCAL_INV
                | BIND_MW
        }
        QpType::Ud => SEND | SEND_WITH_IMM | TSO,
        QpType::RawPacket => SEND | TSO,
    }
}

/// `_sq_overhead`: the fixed part of the largest send WQE.
pub fn sq_overhead(qp_type: QpType, ops: u64) -> u32 {
    use send_ops::*;
    let ctrl = 16;
    let mut size = ctrl;
    if ops & (RDMA_WRITE | RDMA_WRITE_WITH_IMM | RDMA_READ) != 0 {
        size = size.max(ctrl + 16);
    }
    if ops & (ATOMIC_CMP_AND_SWP | ATOMIC_FETCH_AND_ADD) != 0 {
        size = size.max(ctrl + 16 + 16);
    }
    if ops & (BIND_MW | LOCAL_INV) != 0 {
        // UMR control (48) + mkey context (64) + max(KLM 16, 64).
        size = size.max(ctrl + 48 + 64 + 64);
    }
    size + match qp_type {
        QpType::Ud => AV_SIZE as u32,
        QpType::RawPacket => 32,
        QpType::Rc | QpType::Uc => 0,
    }
}

/// `mlx5_calc_sq_size`. `Ok(None)` when `max_send_wr` is 0.
pub fn sq_geometry(
    qp_type: QpType,
    caps: &QpCaps,
    lim: &DeviceLimits,
) -> Result<Option<SqGeometry>, Error> {
    if caps.max_send_wr == 0 {
        return Ok(None);
    }
    let ops = caps.send_ops.unwrap_or_else(|| default_send_ops(qp_type));
    let overhead = sq_overhead(qp_type, ops);
    let inl_size = if caps.max_inline_data != 0 {
        overhead as u64 + align_up(4 + caps.max_inline_data as usize, 16) as u64
    } else {
        0
    };
    let max_gather = lim.max_sq_desc_sz.saturating_sub(overhead) / 16;
    if caps.max_send_sge > max_gather {
        return Err(Error::InvalidGeometry(
            "max_send_sge exceeds the largest send WQE",
        ));
    }
    let size = overhead as u64 + 16 * caps.max_send_sge as u64;
    let tot = size.max(inl_size);
    if tot > lim.max_sq_desc_sz as u64 {
        return Err(Error::InvalidGeometry("send WQE exceeds max_sq_desc_sz"));
    }
    let wqe_size = align_up(tot as usize, SEND_WQE_BB) as u64;
    let max_inline_data = (wqe_size - overhead as u64 - 4) as u32;
    if caps.max_send_wr as u64 > 0x7fff_ffff / lim.max_sq_desc_sz.max(1) as u64 {
        return Err(Error::InvalidGeometry("max_send_wr too large"));
    }
    let wq_size = (caps.max_send_wr as u64 * wqe_size).next_power_of_two();
    let wqe_cnt = wq_size / SEND_WQE_BB as u64;
    if wqe_cnt > lim.max_send_wqebb as u64 {
        return Err(Error::InvalidGeometry("send queue exceeds max_send_wqebb"));
    }
    Ok(Some(SqGeometry {
        wqe_cnt: wqe_cnt as u32,
        max_post: (wq_size / wqe_size) as u32,
        max_gs: caps.max_send_sge,
        max_inline_data,
        max_wqe_size: wqe_size as u32,
        overhead,
    }))
}

/// `mlx5_calc_rq_size`. `Ok(None)` when `max_recv_wr` is 0 (no RQ, e.g. an
/// SRQ is used).
pub fn rq_geometry(caps: &QpCaps, lim: &DeviceLimits) -> Result<Option<RqGeometry>, Error> {
    if caps.max_recv_wr == 0 {
        return Ok(None);
    }
    if caps.max_recv_wr > lim.max_recv_wr {
        return Err(Error::InvalidGeometry(
            "max_recv_wr exceeds the device limit",
        ));
    }
    let size = 16 * caps.max_recv_sge.max(1) as u64;
    if size > lim.max_rq_desc_sz as u64 {
        return Err(Error::InvalidGeometry("receive WQE exceeds max_rq_desc_sz"));
    }
    let wqe_size = size.next_power_of_two();
    if wqe_size > lim.max_rq_desc_sz as u64 {
        return Err(Error::InvalidGeometry("receive WQE exceeds max_rq_desc_sz"));
    }
    let wq_size = ((caps.max_recv_wr as u64).next_power_of_two() * wqe_size).max(64);
    let wqe_cnt = (wq_size / wqe_size) as u32;
    Ok(Some(RqGeometry {
        wqe_cnt,
        wqe_shift: wqe_size.trailing_zeros() as u8,
        max_post: wqe_cnt,
        max_gs: (wqe_size / 16) as u32,
    }))
}

/// SRQ geometry (`mlx5_alloc_srq_buf` without the wait queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqGeometry {
    /// WQEs in the ring (a power of two; `log_srq_size` = log2).
    pub wqe_cnt: u32,
    /// log2 of the WQE stride (`log_rq_stride` = this - 4).
    pub wqe_shift: u8,
    /// SGEs per work request.
    pub max_gs: u32,
    /// Work requests that can be outstanding (`wqe_cnt - 1`).
    pub max_wr: u32,
}

impl SrqGeometry {
    /// Computes the geometry for `max_wr` outstanding work requests of
    /// `max_sge` SGEs.
    pub fn new(max_wr: u32, max_sge: u32, lim: &DeviceLimits) -> Result<Self, Error> {
        if max_wr == 0 || max_wr >= lim.max_recv_wr {
            return Err(Error::InvalidGeometry(
                "SRQ max_wr is 0 or exceeds the device limit",
            ));
        }
        let size = (16 + 16 * max_sge as u64).max(32).next_power_of_two();
        if size > lim.max_rq_desc_sz as u64 {
            return Err(Error::InvalidGeometry("SRQ WQE exceeds max_rq_desc_sz"));
        }
        let wqe_cnt = (max_wr as u64 + 1).next_power_of_two() as u32;
        Ok(Self {
            wqe_cnt,
            wqe_shift: size.trailing_zeros() as u8,
            max_gs: ((size - 16) / 16) as u32,
            max_wr: wqe_cnt - 1,
        })
    }

    /// Ring size in bytes.
    pub fn bytes(&self) -> usize {
        (self.wqe_cnt as usize) << self.wqe_shift
    }
}

/// Where everything of a QP lives in its DMA region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpLayout {
    /// Offset of the receive ring (0).
    pub rq_offset: usize,
    /// Offset of the send ring (the receive ring's size).
    pub sq_offset: usize,
    /// Bytes of the work-queue buffer the device is given (RQ + SQ); the
    /// page list of CREATE_QP covers `0 .. ring_bytes` rounded up to pages.
    pub ring_bytes: usize,
    /// Offset of the 8-byte doorbell record (`dbr_addr` = region IOVA +
    /// this).
    pub dbr_offset: usize,
    /// Offset of the host-only bookkeeping.
    pub meta_offset: usize,
    /// Total bytes the region must have.
    pub total_bytes: usize,
    pub(crate) rq_wrid: usize,
    pub(crate) rq_len: usize,
}

/// Size of the bookkeeping header (counters, handle flags).
pub(crate) const META_HDR: usize = 64;

impl QpLayout {
    /// The layout for the given queues.
    pub fn new(sq: Option<&SqGeometry>, rq: Option<&RqGeometry>) -> Self {
        let rq_bytes = rq.map_or(0, |r| r.bytes());
        let sq_bytes = sq.map_or(0, |s| s.bytes());
        let ring_bytes = rq_bytes + sq_bytes;
        let dbr_offset = align_up(ring_bytes, 64);
        let meta_offset = dbr_offset + 64;
        let sq_cnt = sq.map_or(0, |s| s.wqe_cnt as usize);
        let rq_cnt = rq.map_or(0, |r| r.wqe_cnt as usize);
        // The send table: 16 bytes per WQEBB slot (wr_id, wqe_head).
        let sq_table = META_HDR;
        let rq_wrid = sq_table + 16 * sq_cnt;
        let rq_len = rq_wrid + 8 * rq_cnt;
        let meta_len = align_up(rq_len + 4 * rq_cnt, 64);
        Self {
            rq_offset: 0,
            sq_offset: rq_bytes,
            ring_bytes,
            dbr_offset,
            meta_offset,
            total_bytes: meta_offset + meta_len,
            rq_wrid,
            rq_len,
        }
    }
}

/// A QP's computed geometry and layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpGeometry {
    /// The send queue, if `max_send_wr > 0`.
    pub sq: Option<SqGeometry>,
    /// The receive queue, if `max_recv_wr > 0`.
    pub rq: Option<RqGeometry>,
    /// Where everything lives in the QP's DMA region.
    pub layout: QpLayout,
}

impl QpGeometry {
    /// Sizes both queues of a QP of `qp_type` for `caps` (rdma-core's
    /// `mlx5_calc_wq_size`).
    pub fn new(qp_type: QpType, caps: &QpCaps, lim: &DeviceLimits) -> Result<Self, Error> {
        let sq = sq_geometry(qp_type, caps, lim)?;
        let rq = rq_geometry(caps, lim)?;
        Ok(Self {
            sq,
            rq,
            layout: QpLayout::new(sq.as_ref(), rq.as_ref()),
        })
    }
}

/// Where everything of an SRQ lives in its DMA region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqLayout {
    /// Bytes of the ring (offset 0) the device is given.
    pub ring_bytes: usize,
    /// Offset of the doorbell record.
    pub dbr_offset: usize,
    /// Offset of the host-only bookkeeping.
    pub meta_offset: usize,
    /// Total bytes the region must have.
    pub total_bytes: usize,
    pub(crate) wrid: usize,
    pub(crate) len: usize,
    pub(crate) next: usize,
    pub(crate) posted: usize,
}

impl SrqLayout {
    /// The layout of an SRQ of geometry `g`.
    pub fn new(g: &SrqGeometry) -> Self {
        let ring_bytes = g.bytes();
        let dbr_offset = align_up(ring_bytes, 64);
        let meta_offset = dbr_offset + 64;
        let n = g.wqe_cnt as usize;
        let wrid = META_HDR;
        let len = wrid + 8 * n;
        let next = len + 4 * n;
        let posted = next + 2 * n;
        let meta_len = align_up(posted + n, 64);
        Self {
            ring_bytes,
            dbr_offset,
            meta_offset,
            total_bytes: meta_offset + meta_len,
            wrid,
            len,
            next,
            posted,
        }
    }
}

/// CQ geometry and layout: 2^log_cq_size 64-byte CQEs, then the doorbell
/// record at the next 64-byte boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqLayout {
    /// log2 of the number of CQEs.
    pub log_cq_size: u8,
    /// Bytes of the CQE ring (offset 0).
    pub ring_bytes: usize,
    /// Offset of the doorbell record.
    pub dbr_offset: usize,
    /// Total bytes.
    pub total_bytes: usize,
}

impl CqLayout {
    /// A CQ that holds at least `cqe` completions (rdma-core: `ibv_cq.cqe` =
    /// `roundup_pow2(cqe + 1) - 1`).
    pub fn for_entries(cqe: u32) -> Result<Self, Error> {
        if cqe == 0 || cqe >= 1 << 24 {
            return Err(Error::InvalidGeometry("CQ size must be 1 .. 2^24 - 1"));
        }
        Self::new((cqe as u64 + 1).next_power_of_two().trailing_zeros() as u8)
    }

    /// A CQ of exactly 2^log_cq_size CQEs.
    pub fn new(log_cq_size: u8) -> Result<Self, Error> {
        if log_cq_size > 24 {
            return Err(Error::InvalidGeometry("log_cq_size exceeds 24"));
        }
        let ring_bytes = 64usize << log_cq_size;
        Ok(Self {
            log_cq_size,
            ring_bytes,
            dbr_offset: ring_bytes,
            total_bytes: ring_bytes + 64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_fixture_geometry() {
        let lim = DeviceLimits::default();
        let rc = QpCaps {
            max_send_wr: 128,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 128,
            send_ops: Some(0x3ff),
        };
        let g = QpGeometry::new(QpType::Rc, &rc, &lim).unwrap();
        let sq = g.sq.unwrap();
        assert_eq!(sq.overhead, 192);
        assert_eq!(sq.max_wqe_size, 384);
        assert_eq!(sq.max_inline_data, 188);
        assert_eq!(sq.wqe_cnt, 1024);
        assert_eq!(sq.max_post, 170);
        assert_eq!(sq.max_gs, 4);
        let rq = g.rq.unwrap();
        assert_eq!(
            (rq.wqe_cnt, rq.wqe_shift, rq.max_post, rq.max_gs),
            (64, 6, 64, 4)
        );
        assert_eq!(g.layout.sq_offset, 0x1000);
        assert_eq!(g.layout.ring_bytes, 69632);

        let ud = QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 64,
            send_ops: Some(0xc),
        };
        let g = QpGeometry::new(QpType::Ud, &ud, &lim).unwrap();
        let sq = g.sq.unwrap();
        assert_eq!(
            (
                sq.overhead,
                sq.max_wqe_size,
                sq.max_inline_data,
                sq.wqe_cnt,
                sq.max_post
            ),
            (64, 192, 124, 256, 85)
        );
        let rq = g.rq.unwrap();
        assert_eq!(
            (rq.wqe_cnt, rq.wqe_shift, rq.max_post, rq.max_gs),
            (64, 4, 64, 1)
        );
        assert_eq!(g.layout.sq_offset, 0x400);
        assert_eq!(g.layout.ring_bytes, 17408);
    }

    #[test]
    fn limits_are_enforced() {
        let lim = DeviceLimits::default();
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: 0,
            max_send_sge: 100,
            max_recv_sge: 0,
            max_inline_data: 0,
            send_ops: None,
        };
        assert!(sq_geometry(QpType::Rc, &caps, &lim).is_err());
        let caps = QpCaps {
            max_send_sge: 1,
            max_send_wr: 1 << 24,
            ..caps
        };
        assert!(sq_geometry(QpType::Rc, &caps, &lim).is_err());
        let caps = QpCaps {
            max_send_wr: 0,
            max_recv_wr: 1 << 20,
            ..caps
        };
        assert!(rq_geometry(&caps, &lim).is_err());
        assert_eq!(
            rq_geometry(
                &QpCaps {
                    max_recv_wr: 0,
                    ..caps
                },
                &lim
            ),
            Ok(None)
        );
    }

    #[test]
    fn srq_and_cq_geometry() {
        let g = SrqGeometry::new(100, 1, &DeviceLimits::default()).unwrap();
        assert_eq!(
            (g.wqe_cnt, g.wqe_shift, g.max_gs, g.max_wr),
            (128, 5, 1, 127)
        );
        let g = SrqGeometry::new(127, 3, &DeviceLimits::default()).unwrap();
        assert_eq!((g.wqe_cnt, g.wqe_shift, g.max_gs), (128, 6, 3));
        assert_eq!(CqLayout::for_entries(255).unwrap().log_cq_size, 8);
        assert_eq!(CqLayout::for_entries(256).unwrap().log_cq_size, 9);
        assert!(CqLayout::for_entries(0).is_err());
    }
}
