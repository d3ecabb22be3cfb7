//! Completion queues: CQE parsing into work completions, the consumer index
//! and its doorbell record, arming, and resolving a CQE to the queue and
//! `wr_id` it completes.
//!
//! # CQE (64 bytes)
//!
//! `ml_path` 0x11, `slid` 0x16, `flags_rqpn` 0x18, `srqn_uidx` 0x20,
//! `imm_inval_pkey` 0x24, `byte_cnt` 0x2c, `vendor_err_synd` 0x36 and
//! `syndrome` 0x37 (error CQEs), `sop_drop_qpn` 0x38, `wqe_counter` 0x3c,
//! `op_own` 0x3f (opcode 7:4, format 3:2, solicited 1, owner 0). The entry at
//! consumer index `ci` belongs to software when its opcode is not
//! `MLX5_CQE_INVALID` (0xf) and its owner bit equals `(ci >> log_cq_size) &
//! 1`; the rest of it is read only after that check and
//! `udma_from_device_barrier`.
//!
//! # Which queue a CQE completes
//!
//! With CQE version 1 (the HCA capability `cqe_version` set to 1, and the
//! driver's `user_index` in every QPC), `srqn_uidx` carries the QP's user
//! index; with version 0 the QP is found by the QPN in `sop_drop_qpn` and an
//! SRQ by the SRQN in `srqn_uidx`. The CQ asks a [`CqResolver`] — usually a
//! [`CqTable`] — for the [`QpCompletions`] handle registered under that key.
//! Requester CQEs then take `wrid[wqe_counter & (wqe_cnt - 1)]` of the send
//! queue and retire every work request up to it (`tail = wqe_head[idx] +
//! 1`, so a signaled CQE after unsignaled WQEs retires them all); receive
//! CQEs take `wrid[wqe_counter & (wqe_cnt - 1)]` of the receive queue and
//! advance its tail by one; SRQ CQEs take `wrid[wqe_counter]` and return
//! the WQE to the SRQ's free list — all as rdma-core's `mlx5_parse_cqe`.
//!
//! # What is checked
//!
//! Every value taken from a CQE before it is used: the opcode and format;
//! the user index / QPN / SRQN names a registered queue and side; with
//! version 1 the QPN matches the user index's QP; a send `wqe_counter` names
//! the first WQEBB of an outstanding WQE, a receive one an outstanding
//! receive; an SRQ counter is inside the SRQ and names a posted WQE; a
//! receive `byte_cnt` does not exceed what the WQE posted. A bad CQE gives a
//! typed [`Error`](crate::Error) and changes nothing but the consumer index.

use core::sync::atomic::Ordering;

use platform::{Be32, Be64, DmaRegion, Mmio, barrier};

use crate::Error;
use crate::mem::{Ptr, check_region};
use crate::qp::{
    HANDLE_RQ, HANDLE_SQ, META_HANDLES, META_RQ_HEAD, META_RQ_TAIL, META_SQ_HEAD, META_SQ_TAIL,
};
use crate::sizing::CqLayout;
use crate::srq::SrqCompletions;
use crate::uar::{CQ_DOORBELL, check_cq_doorbell};
use crate::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::wqe::Opcode;

/// CQE opcodes (`MLX5_CQE_*`, `op_own` bits 7:4).
pub mod cqe_opcode {
    /// Requester completion.
    pub const REQ: u8 = 0;
    /// Responder: RDMA write with immediate.
    pub const RESP_WR_IMM: u8 = 1;
    /// Responder: send.
    pub const RESP_SEND: u8 = 2;
    /// Responder: send with immediate.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Responder: send with invalidate.
    pub const RESP_SEND_INV: u8 = 4;
    /// CQ resize.
    pub const RESIZE_CQ: u8 = 5;
    /// Requester error.
    pub const REQ_ERR: u8 = 13;
    /// Responder error.
    pub const RESP_ERR: u8 = 14;
    /// Invalid (software-owned slot not yet written).
    pub const INVALID: u8 = 15;
}

/// CQE byte offsets.
pub mod cqe_offset {
    /// `ml_path`.
    pub const ML_PATH: usize = 0x11;
    /// `slid`.
    pub const SLID: usize = 0x16;
    /// `flags_rqpn`.
    pub const FLAGS_RQPN: usize = 0x18;
    /// `srqn_uidx`.
    pub const SRQN_UIDX: usize = 0x20;
    /// `imm_inval_pkey`.
    pub const IMM_INVAL_PKEY: usize = 0x24;
    /// `byte_cnt`.
    pub const BYTE_CNT: usize = 0x2c;
    /// `vendor_err_synd` (error CQE).
    pub const VENDOR_ERR_SYND: usize = 0x36;
    /// `syndrome` (error CQE).
    pub const SYNDROME: usize = 0x37;
    /// `sop_drop_qpn` / `s_wqe_opcode_qpn`.
    pub const SOP_DROP_QPN: usize = 0x38;
    /// `wqe_counter`.
    pub const WQE_COUNTER: usize = 0x3c;
    /// `op_own`.
    pub const OP_OWN: usize = 0x3f;
}

/// The CQ doorbell record's arm word (word 1): `sn(2) << 28 | cmd << 24 |
/// ci(24)`.
#[bitfield_struct::bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CqArmWord {
    #[bits(2)]
    __: u8,
    /// Arm sequence number (incremented per completion event).
    #[bits(2)]
    pub sn: u8,
    /// 0 = next completion (`MLX5_CQ_DB_REQ_NOT`), 1 = solicited only
    /// (`MLX5_CQ_DB_REQ_NOT_SOL`).
    #[bits(4)]
    pub cmd: u8,
    /// Consumer index.
    #[bits(24)]
    pub ci: u32,
}

/// The CQ doorbell record's word 0: the 24-bit consumer index.
#[bitfield_struct::bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CqSetCi {
    #[bits(8)]
    __: u8,
    /// Consumer index.
    #[bits(24)]
    pub ci: u32,
}

/// Which CQE layout version the device writes (HCA capability
/// `cqe_version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeVersion {
    /// `srqn_uidx` is the SRQN; QPs are found by QPN.
    V0,
    /// `srqn_uidx` is the QP's user index.
    V1,
}

/// A CQ's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqConfig {
    /// CQ number (24 bits).
    pub cqn: u32,
    /// Ring and doorbell-record layout.
    pub layout: CqLayout,
    /// CQE version.
    pub version: CqeVersion,
    /// Offset in the register window of the CQ's UAR page (the arm
    /// doorbell is at + 0x20).
    pub uar_page_offset: usize,
}

/// What a CQ gives back when taken apart.
#[derive(Debug)]
pub struct CqParts<M> {
    /// The CQ's DMA region (free it after DESTROY_CQ).
    pub region: DmaRegion,
    /// The register window.
    pub uar: M,
}

/// Finds the queues a CQE names. Implemented by [`CqTable`]; a driver may
/// implement it over its own resource tables.
pub trait CqResolver {
    /// The QP registered under user index `uidx` (CQE version 1).
    fn by_user_index(&self, uidx: u32) -> Option<&QpCompletions>;
    /// The QP with number `qpn` (CQE version 0).
    fn by_qpn(&self, qpn: u32) -> Option<&QpCompletions>;
    /// The SRQ with number `srqn` (CQE version 0).
    fn srq_by_srqn(&self, srqn: u32) -> Option<&SrqCompletions>;
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct SqSide {
    pub(crate) wrid: usize,
    pub(crate) wqe_head: usize,
    pub(crate) mask: u32,
}

#[derive(Debug)]
pub(crate) enum RecvSide {
    None,
    Rq { wrid: usize, len: usize, mask: u32 },
    Srq(SrqCompletions),
}

/// The completion side of one QP for one CQ: everything the CQ needs to turn
/// the QP's CQEs into work completions. `Send + Sync`; it points into the
/// QP's DMA region, which the QP does not give back while the handle lives
/// ([`Qp::into_parts`](crate::Qp::into_parts)).
#[derive(Debug)]
pub struct QpCompletions {
    qpn: u32,
    meta: Ptr,
    flags: u32,
    sq: Option<SqSide>,
    rq: RecvSide,
}

impl QpCompletions {
    pub(crate) fn new(qpn: u32, meta: Ptr, flags: u32, sq: Option<SqSide>, rq: RecvSide) -> Self {
        Self {
            qpn,
            meta,
            flags,
            sq,
            rq,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Whether the handle retires the send queue.
    pub fn serves_send(&self) -> bool {
        self.flags & HANDLE_SQ != 0
    }

    /// Whether the handle retires the receive queue or an SRQ.
    pub fn serves_recv(&self) -> bool {
        !matches!(self.rq, RecvSide::None)
    }

    /// The SRQ handle, if the QP receives through an SRQ.
    pub fn srq(&self) -> Option<&SrqCompletions> {
        match &self.rq {
            RecvSide::Srq(s) => Some(s),
            _ => None,
        }
    }
}

impl Drop for QpCompletions {
    fn drop(&mut self) {
        let _ = HANDLE_RQ;
        self.meta
            .a32(META_HANDLES)
            .fetch_and(!self.flags, Ordering::AcqRel);
    }
}

/// A fixed table of completion handles indexed by user index (0..N), the
/// resolver for CQE version 1 (and, by linear search, version 0).
#[derive(Debug)]
pub struct CqTable<const N: usize> {
    entries: [Option<QpCompletions>; N],
}

impl<const N: usize> Default for CqTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> CqTable<N> {
    /// An empty table.
    pub const fn new() -> Self {
        Self {
            entries: [const { None }; N],
        }
    }

    /// Registers `handle` under user index `uidx` (the `user_index` of the
    /// QP's QPC). Gives the handle back if the index is out of range or
    /// taken.
    pub fn insert(
        &mut self,
        uidx: u32,
        handle: QpCompletions,
    ) -> Result<(), (Error, QpCompletions)> {
        match self.entries.get_mut(uidx as usize) {
            None => Err((Error::Table("user index out of range"), handle)),
            Some(Some(_)) => Err((Error::Table("user index already registered"), handle)),
            Some(e) => {
                *e = Some(handle);
                Ok(())
            }
        }
    }

    /// Unregisters and returns the handle under `uidx`.
    pub fn remove(&mut self, uidx: u32) -> Option<QpCompletions> {
        self.entries.get_mut(uidx as usize)?.take()
    }
}

impl<const N: usize> CqResolver for CqTable<N> {
    #[inline(always)]
    fn by_user_index(&self, uidx: u32) -> Option<&QpCompletions> {
        self.entries.get(uidx as usize)?.as_ref()
    }

    fn by_qpn(&self, qpn: u32) -> Option<&QpCompletions> {
        self.entries.iter().flatten().find(|h| h.qpn == qpn)
    }

    fn srq_by_srqn(&self, srqn: u32) -> Option<&SrqCompletions> {
        self.entries
            .iter()
            .flatten()
            .find_map(|h| h.srq().filter(|s| s.srqn() == srqn))
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq<M: Mmio> {
    buf: Ptr,
    dbr: Ptr,
    region: DmaRegion,
    mmio: M,
    db_offset: usize,
    cqn: u32,
    mask: u32,
    ci: u32,
    arm_sn: u32,
    version: CqeVersion,
}

// Requester CQE: the WQE opcode (sop) to the work completion, as
// rdma-core's `handle_good_req`: bits 2:0 index `WC_OPCODES`, bit 3 "with
// immediate", bits 7:4 where byte_len comes from; 0 = unknown opcode.
const REQ_IMM: u8 = 0x08;
const REQ_LEN_CNT: u8 = 0x10;
const REQ_LEN_8: u8 = 0x20;
const WC_OPCODES: [WcOpcode; 8] = [
    WcOpcode::Send,
    WcOpcode::RdmaWrite,
    WcOpcode::RdmaRead,
    WcOpcode::CompSwap,
    WcOpcode::FetchAdd,
    WcOpcode::Tso,
    WcOpcode::Nop,
    WcOpcode::Send,
];
const REQ_OPCODES: [u8; 256] = {
    let mut t = [0u8; 256];
    t[Opcode::RdmaWrite as usize] = 1;
    t[Opcode::RdmaWriteImm as usize] = 1 | REQ_IMM;
    t[Opcode::Send as usize] = 7;
    t[Opcode::SendInval as usize] = 7;
    t[Opcode::SendImm as usize] = 7 | REQ_IMM;
    t[Opcode::RdmaRead as usize] = 2 | REQ_LEN_CNT;
    t[Opcode::AtomicCs as usize] = 3 | REQ_LEN_8;
    t[Opcode::AtomicFa as usize] = 4 | REQ_LEN_8;
    t[Opcode::Tso as usize] = 5;
    t[Opcode::Nop as usize] = 6;
    t
};

/// What a parsed CQE changes once it is accepted.
enum Commit<'a> {
    SqTail(&'a QpCompletions, u32),
    RqTail(&'a QpCompletions, u32),
    Srq(&'a SrqCompletions, crate::srq::SrqWqe, u16),
}

impl<M: Mmio> Cq<M> {
    /// Takes ownership of the CQ's DMA region (laid out as `cfg.layout`,
    /// 64-byte aligned) and the register window holding its UAR page;
    /// initialises every CQE's `op_own` to 0xf0 and the doorbell record to
    /// zero. Call it before CREATE_CQ.
    pub fn new(region: DmaRegion, uar: M, cfg: &CqConfig) -> Result<Self, (Error, CqParts<M>)> {
        Self::with_consumer_index(region, uar, cfg, 0)
    }

    /// [`new`](Self::new) with the consumer index starting at `ci` (to
    /// reproduce a CQ state; a new CQ starts at 0).
    pub fn with_consumer_index(
        region: DmaRegion,
        uar: M,
        cfg: &CqConfig,
        ci: u32,
    ) -> Result<Self, (Error, CqParts<M>)> {
        let l = cfg.layout;
        let setup = (|| -> Result<_, Error> {
            check_region(&region, l.total_bytes)?;
            if l.log_cq_size > 24
                || l.ring_bytes != 64 << l.log_cq_size
                || l.dbr_offset < l.ring_bytes
            {
                return Err(Error::InvalidGeometry("CQ layout"));
            }
            if cfg.cqn >= 1 << 24 {
                return Err(Error::InvalidGeometry("CQN exceeds 24 bits"));
            }
            let db_offset =
                cfg.uar_page_offset
                    .checked_add(CQ_DOORBELL)
                    .ok_or(Error::UarOutOfRange {
                        offset: cfg.uar_page_offset,
                        width: 8,
                        len: uar.len(),
                    })?;
            check_cq_doorbell(&uar, db_offset)?;
            let buf = Ptr::new(&region, 0, l.ring_bytes)?;
            let dbr = Ptr::new(&region, l.dbr_offset, 8)?;
            Ok((buf, dbr, db_offset))
        })();
        let (buf, dbr, db_offset) = match setup {
            Ok(x) => x,
            Err(e) => return Err((e, CqParts { region, uar })),
        };
        for i in 0..(1usize << l.log_cq_size) {
            buf.w8(64 * i + cqe_offset::OP_OWN, 0xf0);
        }
        dbr.w64(0, 0);
        let mut cq = Self {
            buf,
            dbr,
            region,
            mmio: uar,
            db_offset,
            cqn: cfg.cqn,
            mask: (1u32 << l.log_cq_size) - 1,
            ci,
            arm_sn: 0,
            version: cfg.version,
        };
        cq.update_ci();
        Ok(cq)
    }

    #[inline(always)]
    fn update_ci(&mut self) {
        self.dbr.w32(
            0,
            CqSetCi::new()
                .with_ci(self.ci & 0xff_ffff)
                .into_bits()
                .to_raw(),
        );
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The consumer index (full 32-bit counter; the doorbell record holds
    /// its low 24 bits).
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Number of CQEs.
    pub fn entries(&self) -> u32 {
        self.mask + 1
    }

    /// The DMA region (for the page list and `dbr_addr`).
    pub fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// Requests a completion event for the next completion (or the next
    /// solicited one): stores the arm word in the doorbell record, then the
    /// 64-bit `arm_word << 32 | cqn` at UAR + 0x20 (`mlx5_arm_cq`).
    pub fn arm(&mut self, solicited_only: bool) {
        let w = CqArmWord::new()
            .with_sn((self.arm_sn & 3) as u8)
            .with_cmd(u8::from(solicited_only))
            .with_ci(self.ci & 0xff_ffff)
            .into_bits();
        self.dbr.w32(4, w.to_raw());
        barrier::mmio_wc_start();
        self.mmio.write64(
            self.db_offset,
            Be64::new((u64::from(w.get()) << 32) | u64::from(self.cqn)),
        );
        barrier::mmio_flush_writes();
    }

    /// Records that a completion event arrived for this CQ (rdma-core
    /// `mlx5_cq_event`: the arm sequence number advances).
    pub fn completion_event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// Polls up to `wc.len()` completions (`ibv_poll_cq`), returning how
    /// many were written. The doorbell record is rewritten on every call.
    ///
    /// A corrupt CQE gives an error: if it is the first one of this call it
    /// is consumed and its error returned; otherwise the completions before
    /// it are returned and the next call reports it.
    #[inline]
    pub fn poll<R: CqResolver>(
        &mut self,
        queues: &R,
        wc: &mut [WorkCompletion],
    ) -> Result<usize, Error> {
        let mut n = 0;
        let mut cache: Option<(u32, &QpCompletions)> = None;
        let mut result = Ok(());
        while n < wc.len() {
            let off = ((self.ci & self.mask) as usize) << 6;
            let op_own = self.buf.r8(off + cqe_offset::OP_OWN);
            // Owner bit = bit log_cq_size of the consumer index.
            let sw_owner = u8::from(self.ci & (self.mask + 1) != 0);
            if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != sw_owner {
                break;
            }
            barrier::udma_from_device_barrier();
            let w = &mut wc[n];
            match self.parse(off, op_own, queues, &mut cache, w) {
                Ok(commit) => {
                    match commit {
                        Commit::SqTail(h, t) => {
                            h.meta.a32(META_SQ_TAIL).store(t, Ordering::Release);
                        }
                        Commit::RqTail(h, t) => {
                            h.meta.a32(META_RQ_TAIL).store(t, Ordering::Release);
                        }
                        Commit::Srq(s, wqe, ctr) => match s.retire(&wqe, ctr, self.ci) {
                            Ok(wr_id) => w.wr_id = wr_id,
                            Err(e @ Error::SrqLockTimeout(_)) => {
                                // Not the CQE's fault: leave it for the next poll.
                                if n == 0 {
                                    result = Err(e);
                                }
                                break;
                            }
                            Err(e) => {
                                if n == 0 {
                                    self.ci = self.ci.wrapping_add(1);
                                    result = Err(e);
                                }
                                break;
                            }
                        },
                    }
                    self.ci = self.ci.wrapping_add(1);
                    n += 1;
                }
                Err(e) => {
                    if n == 0 {
                        self.ci = self.ci.wrapping_add(1);
                        result = Err(e);
                    }
                    break;
                }
            }
        }
        self.update_ci();
        result.map(|()| n)
    }

    #[cold]
    #[inline(never)]
    fn resolve_slow<'r, R: CqResolver>(
        &self,
        queues: &'r R,
        cache: &mut Option<(u32, &'r QpCompletions)>,
        key: u32,
    ) -> Result<&'r QpCompletions, Error> {
        let h = match self.version {
            CqeVersion::V1 => queues.by_user_index(key),
            CqeVersion::V0 => queues.by_qpn(key),
        }
        .ok_or(Error::CqeUnknownQueue {
            ci: self.ci,
            what: match self.version {
                CqeVersion::V1 => "user index",
                CqeVersion::V0 => "QPN",
            },
            key,
        })?;
        *cache = Some((key, h));
        Ok(h)
    }

    #[inline(always)]
    fn resolve<'r, R: CqResolver>(
        &self,
        queues: &'r R,
        cache: &mut Option<(u32, &'r QpCompletions)>,
        key: u32,
        qpn: u32,
    ) -> Result<&'r QpCompletions, Error> {
        if let Some((k, h)) = *cache {
            if k == key {
                return self.check_qpn(h, qpn);
            }
        }
        let h = self.resolve_slow(queues, cache, key)?;
        self.check_qpn(h, qpn)
    }

    #[inline(always)]
    fn check_qpn<'r>(&self, h: &'r QpCompletions, qpn: u32) -> Result<&'r QpCompletions, Error> {
        if h.qpn != qpn {
            return Err(Error::CqeQpnMismatch {
                ci: self.ci,
                got: qpn,
                expected: h.qpn,
            });
        }
        Ok(h)
    }

    /// Validates and decodes one CQE; changes nothing.
    #[inline(always)]
    fn parse<'r, R: CqResolver>(
        &self,
        off: usize,
        op_own: u8,
        queues: &'r R,
        cache: &mut Option<(u32, &'r QpCompletions)>,
        out: &mut WorkCompletion,
    ) -> Result<Commit<'r>, Error> {
        let ci = self.ci;
        let opcode = op_own >> 4;
        if op_own & 0x0c != 0 {
            return Err(Error::CqeFormat { ci, op_own });
        }
        // sop_drop_qpn, wqe_counter, signature, op_own.
        let tailw = Be64::from_raw(self.buf.r64(off + cqe_offset::SOP_DROP_QPN)).get();
        let sop_qpn = (tailw >> 32) as u32;
        let qpn = sop_qpn & 0xff_ffff;
        let counter = (tailw >> 16) as u16;
        let srqn_uidx = Be32::from_raw(self.buf.r32(off + cqe_offset::SRQN_UIDX)).get() & 0xff_ffff;
        let key = match self.version {
            CqeVersion::V1 => srqn_uidx,
            CqeVersion::V0 => qpn,
        };
        match opcode {
            cqe_opcode::REQ | cqe_opcode::REQ_ERR => {
                let h = self.resolve(queues, cache, key, qpn)?;
                let sq = h.sq.ok_or(Error::CqeUnknownQueue {
                    ci,
                    what: "send queue of QPN",
                    key: qpn,
                })?;
                let idx = (u32::from(counter) & sq.mask) as usize;
                let wqe_head = h.meta.a32(sq.wqe_head + 4 * idx).load(Ordering::Relaxed);
                let tail = h.meta.a32(META_SQ_TAIL).load(Ordering::Relaxed);
                let head = h.meta.a32(META_SQ_HEAD).load(Ordering::Acquire);
                if wqe_head.wrapping_sub(tail) >= head.wrapping_sub(tail) {
                    return Err(Error::CqeWqeCounter {
                        ci,
                        counter,
                        queue: "send queue",
                    });
                }
                let wr_id = h.meta.a64(sq.wrid + 8 * idx).load(Ordering::Relaxed);
                let sop = (sop_qpn >> 24) as u8;
                if opcode == cqe_opcode::REQ {
                    let m = REQ_OPCODES[usize::from(sop)];
                    if m == 0 {
                        return Err(Error::CqeOpcode { ci, opcode: sop });
                    }
                    let byte_len = match m & 0xf0 {
                        REQ_LEN_CNT => {
                            Be32::from_raw(self.buf.r32(off + cqe_offset::BYTE_CNT)).get()
                        }
                        REQ_LEN_8 => 8,
                        _ => 0,
                    };
                    *out = WorkCompletion {
                        wr_id,
                        byte_len,
                        qp_num: qpn,
                        wc_flags: WcFlags(u32::from(m & REQ_IMM) >> 2),
                        opcode: WC_OPCODES[usize::from(m & 7)],
                        ..WorkCompletion::default()
                    };
                } else {
                    let mut w = WorkCompletion {
                        wr_id,
                        qp_num: qpn,
                        ..WorkCompletion::default()
                    };
                    self.error_fields(off, &mut w);
                    w.opcode = match Opcode::from_u8(sop) {
                        Some(Opcode::RdmaWrite | Opcode::RdmaWriteImm) => WcOpcode::RdmaWrite,
                        Some(Opcode::RdmaRead) => WcOpcode::RdmaRead,
                        Some(Opcode::AtomicCs) => WcOpcode::CompSwap,
                        Some(Opcode::AtomicFa) => WcOpcode::FetchAdd,
                        Some(Opcode::Nop) => WcOpcode::Nop,
                        _ => WcOpcode::Send,
                    };
                    *out = w;
                }
                Ok(Commit::SqTail(h, wqe_head.wrapping_add(1)))
            }
            cqe_opcode::RESP_WR_IMM
            | cqe_opcode::RESP_SEND
            | cqe_opcode::RESP_SEND_IMM
            | cqe_opcode::RESP_SEND_INV
            | cqe_opcode::RESP_ERR => {
                let byte_cnt = Be32::from_raw(self.buf.r32(off + cqe_offset::BYTE_CNT)).get();
                let mut w = WorkCompletion {
                    qp_num: qpn,
                    ..WorkCompletion::default()
                };
                let is_err = opcode == cqe_opcode::RESP_ERR;
                if is_err {
                    self.error_fields(off, &mut w);
                    w.opcode = WcOpcode::Recv;
                } else {
                    self.responder_fields(off, opcode, byte_cnt, &mut w);
                }
                // Receive buffers hold the data of sends only; an RDMA write
                // with immediate consumes a WQE but not its buffer.
                let check_len = !is_err && opcode != cqe_opcode::RESP_WR_IMM;
                // Which receive queue.
                let srq_v0 = match self.version {
                    CqeVersion::V0 if srqn_uidx != 0 => Some(queues.srq_by_srqn(srqn_uidx).ok_or(
                        Error::CqeUnknownQueue {
                            ci,
                            what: "SRQN",
                            key: srqn_uidx,
                        },
                    )?),
                    _ => None,
                };
                let (h, srq) = match srq_v0 {
                    Some(s) => (None, Some(s)),
                    None => {
                        let h = self.resolve(queues, cache, key, qpn)?;
                        (Some(h), h.srq())
                    }
                };
                if let Some(s) = srq {
                    let wqe = s.check(counter, ci)?;
                    if check_len && byte_cnt > wqe.len {
                        return Err(Error::CqeByteCount {
                            ci,
                            byte_cnt,
                            posted: u64::from(wqe.len),
                        });
                    }
                    *out = w;
                    return Ok(Commit::Srq(s, wqe, counter));
                }
                let h = h.expect("resolved above when there is no SRQ");
                let RecvSide::Rq { wrid, len, mask } = h.rq else {
                    return Err(Error::CqeUnknownQueue {
                        ci,
                        what: "receive queue of QPN",
                        key: qpn,
                    });
                };
                let tail = h.meta.a32(META_RQ_TAIL).load(Ordering::Relaxed);
                let head = h.meta.a32(META_RQ_HEAD).load(Ordering::Acquire);
                if u32::from(counter.wrapping_sub(tail as u16)) >= head.wrapping_sub(tail) {
                    return Err(Error::CqeWqeCounter {
                        ci,
                        counter,
                        queue: "receive queue",
                    });
                }
                let idx = (u32::from(counter) & mask) as usize;
                let posted = h.meta.a32(len + 4 * idx).load(Ordering::Relaxed);
                if check_len && byte_cnt > posted {
                    return Err(Error::CqeByteCount {
                        ci,
                        byte_cnt,
                        posted: u64::from(posted),
                    });
                }
                w.wr_id = h.meta.a64(wrid + 8 * idx).load(Ordering::Relaxed);
                *out = w;
                Ok(Commit::RqTail(h, tail.wrapping_add(1)))
            }
            _ => Err(Error::CqeOpcode { ci, opcode }),
        }
    }

    #[inline(always)]
    fn error_fields(&self, off: usize, w: &mut WorkCompletion) {
        let synd = self
            .buf
            .r16(off + cqe_offset::VENDOR_ERR_SYND)
            .to_ne_bytes();
        w.vendor_err = u32::from(synd[0]);
        w.status = WcStatus::from_syndrome(synd[1]);
    }

    #[inline(always)]
    fn responder_fields(&self, off: usize, opcode: u8, byte_cnt: u32, w: &mut WorkCompletion) {
        let imm = Be32::from_raw(self.buf.r32(off + cqe_offset::IMM_INVAL_PKEY)).get();
        let flags_rqpn = Be32::from_raw(self.buf.r32(off + cqe_offset::FLAGS_RQPN)).get();
        let slid = u16::from_be(self.buf.r16(off + cqe_offset::SLID));
        let ml_path = self.buf.r8(off + cqe_offset::ML_PATH);
        let (op, mut flags) = match opcode {
            cqe_opcode::RESP_WR_IMM => (WcOpcode::RecvRdmaWithImm, WcFlags::WITH_IMM),
            cqe_opcode::RESP_SEND_IMM => (WcOpcode::Recv, WcFlags::WITH_IMM),
            cqe_opcode::RESP_SEND_INV => (WcOpcode::Recv, WcFlags::WITH_INV),
            _ => (WcOpcode::Recv, 0),
        };
        if (flags_rqpn >> 28) & 3 != 0 {
            flags |= WcFlags::GRH;
        }
        w.byte_len = byte_cnt;
        w.opcode = op;
        w.wc_flags = WcFlags(flags);
        w.imm_data = if flags & (WcFlags::WITH_IMM | WcFlags::WITH_INV) != 0 {
            imm
        } else {
            0
        };
        w.slid = slid;
        w.sl = ((flags_rqpn >> 24) & 0xf) as u8;
        w.src_qp = flags_rqpn & 0xff_ffff;
        w.dlid_path_bits = ml_path & 0x7f;
        w.pkey_index = imm as u16;
    }

    /// Gives the region and register window back (after DESTROY_CQ).
    pub fn into_parts(self) -> CqParts<M> {
        CqParts {
            region: self.region,
            uar: self.mmio,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_words_match_their_bitfields() {
        for ci in [0u32, 1, 0xff_ffff, 0x12_3456] {
            assert_eq!(CqSetCi::new().with_ci(ci).into_bits().to_raw(), ci.to_be());
        }
        let w = CqArmWord::new().with_sn(2).with_cmd(1).with_ci(0x345);
        assert_eq!(w.into_bits().get(), 2 << 28 | 1 << 24 | 0x345);
    }
}
