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
//! typed [`Error`] and changes nothing but the consumer index.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use platform::{Be32, Be64, DmaRegion, Mmio, barrier};

use platform::ring::{Block64, DoorbellRecord, HostTable, QueueMem, RegionInfo, Ring};

use crate::mem::{QpHdr, SqCells, SqRing, check_region, hdr, sq_hdr};
use crate::qp::{HANDLE_SQ, META_HANDLES, META_RQ_HEAD, META_RQ_TAIL, META_SQ_HEAD, META_SQ_TAIL};
use crate::rx::RxCqe;
use crate::sizing::CqLayout;
use crate::srq::SrqCompletions;
use crate::uar::{CQ_DOORBELL, check_cq_doorbell};
use crate::wc::{Completion, CompletionSlot, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::wqe::Opcode;
use crate::{Error, PollError};

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
    /// `timestamp` (be64, device clock ticks of the HCA caps'
    /// `device_frequency_khz` in free-running mode).
    pub const TIMESTAMP: usize = 0x30;
    /// `vendor_err_synd` (error CQE).
    pub const VENDOR_ERR_SYND: usize = 0x36;
    /// `syndrome` (error CQE).
    pub const SYNDROME: usize = 0x37;
    /// `sop_drop_qpn` / `s_wqe_opcode_qpn`.
    pub const SOP_DROP_QPN: usize = 0x38;
    /// `wqe_counter`.
    pub const WQE_COUNTER: usize = 0x3c;
    /// `signature`.
    pub const SIGNATURE: usize = 0x3e;
    /// `op_own`.
    pub const OP_OWN: usize = 0x3f;
    /// `rss_hash_result` (be32, raw Ethernet receive).
    pub const RSS_HASH_RESULT: usize = 0x0c;
    /// `rss_hash_type` (raw Ethernet receive).
    pub const RSS_HASH_TYPE: usize = 0x10;
    /// `check_sum` (be16, raw Ethernet receive).
    pub const CHECK_SUM: usize = 0x14;
    /// `hds_ip_ext`: L2/L3/L4 OK bits (raw Ethernet receive).
    pub const HDS_IP_EXT: usize = 0x1c;
    /// `l4_hdr_type_etc`: L4 type 6:4, L3 type 3:2, VLAN present 0.
    pub const L4_HDR_TYPE_ETC: usize = 0x1d;
    /// `vlan_info` (be16 TCI of a stripped VLAN tag).
    pub const VLAN_INFO: usize = 0x1e;
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

/// What [`Cq::clean`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqClean {
    /// CQEs of the QP removed (the consumer index advanced by this many).
    pub removed: u32,
    /// SRQ WQEs returned to the SRQ's free list.
    pub srq_freed: u32,
    /// Removed receive CQEs whose SRQ WQE was not returned: the
    /// `wqe_counter` named no posted WQE of the SRQ (or, CQE version 0,
    /// the SRQN was not the SRQ's), or its free list stayed locked.
    pub srq_skipped: u32,
}

/// What a CQ gives back when taken apart.
#[derive(Debug)]
pub struct CqParts<M> {
    /// The CQ's DMA region (free it after DESTROY_CQ).
    pub region: DmaRegion,
    /// The register window.
    pub uar: M,
    /// The ring region of the last resize ([`Cq::finish_resize`]), if the
    /// CQ was resized (free it after DESTROY_CQ too).
    pub resized: Option<DmaRegion>,
}

/// A new CQE ring for a CQ being resized (MODIFY_CQ, op_mod resize), made
/// by [`Cq::prepare_resize`] before the command and installed by
/// [`Cq::finish_resize`] after it.
#[derive(Debug)]
pub struct CqResizeRing {
    mem: QueueMem,
    buf: Ring,
    log_cq_size: u8,
}

impl CqResizeRing {
    /// The ring's region (for the command's page list).
    pub fn region(&self) -> RegionInfo {
        self.mem.region()
    }

    /// log2 of its number of CQEs (the command's `log_cq_size`).
    pub fn log_cq_size(&self) -> u8 {
        self.log_cq_size
    }

    /// Gives the region back (the resize was not done).
    pub fn into_region(self) -> DmaRegion {
        let Self { mem, buf, .. } = self;
        drop(buf);
        crate::mem::into_region(mem)
    }
}

/// The bytes of the region [`Cq::prepare_resize`] needs for a ring of
/// `2^log_cq_size` CQEs: the ring and the platform's view counter.
pub const fn resize_region_bytes(log_cq_size: u8) -> usize {
    (64usize << log_cq_size) + 64
}

/// Finds the queues a CQE names. Implemented by [`CqTable`]; a driver may
/// implement it over its own resource tables.
///
pub trait CqResolver {
    /// The QP registered under user index `uidx` (CQE version 1).
    fn by_user_index(&self, uidx: u32) -> Option<&QpCompletions>;
    /// The QP with number `qpn` (CQE version 0).
    fn by_qpn(&self, qpn: u32) -> Option<&QpCompletions>;
    /// The SRQ with number `srqn` (CQE version 0).
    fn srq_by_srqn(&self, srqn: u32) -> Option<&SrqCompletions>;
}

#[derive(Debug)]
pub(crate) enum RecvSide {
    None,
    Rq {
        /// `wr_id` per receive WQE.
        wrid: HostTable<AtomicU64>,
        /// Bytes posted per receive WQE.
        len: HostTable<AtomicU32>,
    },
    Srq(SrqCompletions),
}

/// The completion side of one QP for one CQ: everything the CQ needs to turn
/// the QP's CQEs into work completions. `Send + Sync`; it holds counted
/// views of the QP's bookkeeping ([`platform::ring`]), so the memory it
/// uses stays valid as long as it lives, and the QP does not give its
/// region back while it lives ([`Qp::into_parts`](crate::Qp::into_parts)).
#[derive(Debug)]
pub struct QpCompletions {
    qpn: u32,
    /// `HANDLE_SQ` and/or `HANDLE_RQ`: the sides this handle retires.
    flags: u32,
    /// The QP's bookkeeping header (head and tail counters, handle flags).
    hdr: HostTable<QpHdr>,
    /// For the requester fast path: the CQE's `sop_drop_qpn` dword as it
    /// sits in memory, masked with [`KEY24`], that names this QP, if the
    /// handle retires the send queue; `u32::MAX` (no masked dword is)
    /// otherwise. One compare checks both.
    sq_key: u32,
    /// The send table, if the handle retires the send queue.
    sq: Option<SqRing>,
    rq: RecvSide,
    /// A raw packet QP: its receive CQEs carry the flow tag, not the QPN,
    /// in `sop_drop_qpn` bits 23:0, so the QPN is not checked against it.
    raw: bool,
    /// Receive completions get `IBV_WC_IP_CSUM_OK` from the CQE's
    /// checksum bits (rdma-core `MLX5_RX_CSUM_VALID`).
    rx_csum: bool,
}

impl QpCompletions {
    pub(crate) fn new(
        qpn: u32,
        hdr: HostTable<QpHdr>,
        flags: u32,
        sq: Option<SqRing>,
        rq: RecvSide,
    ) -> Self {
        debug_assert_eq!(sq.is_some(), flags & HANDLE_SQ != 0);
        Self {
            qpn,
            hdr,
            flags,
            sq_key: match sq {
                Some(_) => qpn.to_be() & KEY24,
                None => u32::MAX,
            },
            sq,
            rq,
            raw: false,
            rx_csum: false,
        }
    }

    /// Marks the handle as a raw packet QP's (set by
    /// [`Qp::completions`](crate::Qp::completions) for
    /// [`QpType::RawPacket`](crate::QpType::RawPacket)), which also turns
    /// on [`set_rx_csum`](Self::set_rx_csum).
    pub(crate) fn set_raw(&mut self) {
        self.raw = true;
        self.rx_csum = true;
    }

    /// Whether receive completions report `IBV_WC_IP_CSUM_OK` from the
    /// CQE (rdma-core sets it for raw packet QPs on an Ethernet port of a
    /// device with `IBV_DEVICE_RAW_IP_CSUM`: a raw packet handle starts
    /// with it on; turn it off for a device without that capability).
    pub fn set_rx_csum(&mut self, on: bool) {
        self.rx_csum = on;
    }

    /// Whether receive completions report `IBV_WC_IP_CSUM_OK`.
    pub fn rx_csum(&self) -> bool {
        self.rx_csum
    }

    /// Whether the handle is a raw packet QP's.
    pub fn is_raw(&self) -> bool {
        self.raw
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The handle for CQEs that name the queue by `qpn` rather than the
    /// QP's number: a raw packet QP's receive queue is a firmware object of
    /// its own (CREATE_RQ), whose CQEs carry the RQ number. `None` (the
    /// handle dropped) for a handle that retires the send queue, whose
    /// CQEs carry the send queue's number.
    pub fn for_queue_number(mut self, qpn: u32) -> Option<Self> {
        if self.serves_send() {
            return None;
        }
        self.qpn = qpn & 0xff_ffff;
        Some(self)
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

    /// The send table, if the handle retires the send queue and the CQE's
    /// masked `sop_drop_qpn` dword `kq` names this QP.
    #[inline(always)]
    fn send_table(&self, kq: u32) -> Option<&SqRing> {
        if self.sq_key != kq {
            return None;
        }
        self.sq.as_ref()
    }
}

impl Drop for QpCompletions {
    fn drop(&mut self) {
        hdr(&self.hdr, META_HANDLES).fetch_and(!self.flags, Ordering::AcqRel);
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
    buf: Ring,
    dbr: DoorbellRecord,
    mem: QueueMem,
    mmio: M,
    db_offset: usize,
    cqn: u32,
    mask: u32,
    /// `mask + 1`, the consumer index's owner bit.
    size: u32,
    ci: u32,
    arm_sn: u32,
    version: CqeVersion,
    /// The ring's memory after a resize (`buf` is then in it; `mem` keeps
    /// the doorbell record, which a resize does not move).
    resized: Option<QueueMem>,
}

// Requester CQE: the WQE opcode (`sop`) to the completion, as rdma-core's
// `handle_good_req`. An entry is the completion's word 2 (opcode | flags
// << 8) plus, from bit 16, where `byte_len` comes from; `REQ_BAD` marks an
// opcode that is not a send WQE opcode.
const REQ_LEN_CNT: u32 = 1 << 16;
const REQ_LEN_8: u32 = 1 << 17;
const REQ_BAD: u32 = 1 << 18;
const fn req(op: WcOpcode, flags: u32) -> u32 {
    op as u32 | flags << 8
}
const REQ_TABLE: [u32; 256] = {
    let w = req;
    let mut t = [REQ_BAD; 256];
    t[Opcode::RdmaWrite as usize] = w(WcOpcode::RdmaWrite, 0);
    t[Opcode::RdmaWriteImm as usize] = w(WcOpcode::RdmaWrite, WcFlags::WITH_IMM);
    t[Opcode::Send as usize] = w(WcOpcode::Send, 0);
    t[Opcode::SendInval as usize] = w(WcOpcode::Send, 0);
    t[Opcode::SendImm as usize] = w(WcOpcode::Send, WcFlags::WITH_IMM);
    t[Opcode::RdmaRead as usize] = w(WcOpcode::RdmaRead, 0) | REQ_LEN_CNT;
    t[Opcode::AtomicCs as usize] = w(WcOpcode::CompSwap, 0) | REQ_LEN_8;
    t[Opcode::AtomicFa as usize] = w(WcOpcode::FetchAdd, 0) | REQ_LEN_8;
    t[Opcode::Tso as usize] = w(WcOpcode::Tso, 0);
    t[Opcode::Nop as usize] = w(WcOpcode::Nop, 0);
    t
};

/// [`REQ_TABLE`] for the fast path, by `sop`: the completion's word 2 when
/// that is all there is to it (`byte_len` 0), else bit 63 set with the
/// `REQ_TABLE` entry in the low half.
static REQ_FAST: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let e = REQ_TABLE[i];
        t[i] = if e > 0xffff {
            1 << 63 | e as u64
        } else {
            e as u64
        };
        i += 1;
    }
    t
};

/// A CQE's `wqe_counter` times 8 plus three bits below it, from its last
/// 8 bytes `t` as they sit in memory (`wqe_counter` is bits 31:16 of the
/// big-endian word): the index [`Cells::entry8`] masks, one shift.
///
/// [`Cells::entry8`]: platform::ring::Cells::entry8
#[inline(always)]
fn wqe_counter8(t: u64) -> usize {
    ((u64::from_be(t) as u32) >> 13) as usize
}

/// The send queue a run of requester CQEs retires, in locals.
///
/// The outstanding window [tail, head) is kept as `last = head - 1` and
/// `room = head - tail`: a CQE's `wqe_head` is inside it when
/// `u = last - wqe_head < room` (all wrapping), and retiring up to it
/// (tail = wqe_head + 1) leaves `room = u`.
struct Run<'a> {
    table: SqCells<'a>,
    last: u32,
    room: u32,
}

impl Run<'_> {
    /// The completion (its words for [`Completion::requester`]) for the
    /// requester CQE `cqe`, whose last 8 bytes (raw) are `t`, with the
    /// queue's tail advanced past its WQE; `None` (nothing changed) if the
    /// WQE opcode is not a send WQE opcode or the WQE is not outstanding
    /// as the head was last read.
    #[inline(always)]
    fn take(&mut self, cqe: Block64<'_>, t: u64) -> Option<[u64; 3]> {
        // (The order of the checks does not matter: a CQE that fails one
        // goes to the general path, which reports the error.)
        // wqe_counter is bits 31:16 of the big-endian 8 bytes; the table
        // masks it.
        let e = self.table.entry8(wqe_counter8(t));
        let wqe_head = e.head.load(Ordering::Relaxed);
        let u = self.last.wrapping_sub(wqe_head);
        if u >= self.room {
            return None;
        }
        let sop = (u32::from_be(raw_sop_qpn(t)) >> 24) as usize;
        let fast = REQ_FAST[sop];
        // The QPN is checked: word 1 takes the CQE's dword as it is.
        let mut w1 = Completion::word1_raw(0, raw_sop_qpn(t));
        // Word 2 is at most 16 bits (`WorkCompletion::set_requester`
        // relies on it).
        let mut w2 = fast;
        if (fast as i64) < 0 {
            let ent = fast as u32;
            if ent & REQ_BAD != 0 {
                return None;
            }
            w1 |= if ent & REQ_LEN_8 != 0 {
                8
            } else {
                u64::from(u32::from_be(cqe.r32(cqe_offset::BYTE_CNT)))
            };
            w2 = u64::from(ent & 0xffff);
        }
        let wr_id = e.wr_id.load(Ordering::Relaxed);
        self.room = u;
        Some([wr_id, w1, w2])
    }

    /// [`take`](Self::take) of a CQE whose WQE opcode is the run's first
    /// one, already known to complete with its table entry alone (so the
    /// completion's words 1 and 2 need nothing from the table): the
    /// `wr_id`, with the queue's tail advanced past its WQE, or `None`
    /// (nothing changed) if the WQE is not outstanding.
    #[inline(always)]
    fn take_same_op(&mut self, t: u64) -> Option<u64> {
        let e = self.table.entry8(wqe_counter8(t));
        let wqe_head = e.head.load(Ordering::Relaxed);
        let u = self.last.wrapping_sub(wqe_head);
        if u >= self.room {
            return None;
        }
        let wr_id = e.wr_id.load(Ordering::Relaxed);
        self.room = u;
        Some(wr_id)
    }

    /// Stores the queue's tail (release: the poster may reuse the slots).
    #[inline(always)]
    fn store_tail(&self) {
        self.table.header()[META_SQ_TAIL].store(
            self.last.wrapping_add(1).wrapping_sub(self.room),
            Ordering::Release,
        );
    }
}

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
        if let Err(e) = check_region(&region, l.total_bytes) {
            return Err((
                e,
                CqParts {
                    region,
                    uar,
                    resized: None,
                },
            ));
        }
        if l.dbr_offset % 8 != 0 || l.dbr_offset + 16 > l.total_bytes {
            return Err((
                Error::InvalidGeometry("CQ layout"),
                CqParts {
                    region,
                    uar,
                    resized: None,
                },
            ));
        }
        // Device part: the CQEs and the doorbell record; the platform's
        // view counter right after the record.
        let mut mem = match QueueMem::new(region, l.dbr_offset + 8) {
            Ok(m) => m,
            Err((e, region)) => {
                return Err((
                    e.into(),
                    CqParts {
                        region,
                        uar,
                        resized: None,
                    },
                ));
            }
        };
        let setup = (|| -> Result<_, Error> {
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
            let buf = mem.ring(0, l.ring_bytes)?;
            let dbr = mem.doorbell_record(l.dbr_offset)?;
            Ok((buf, dbr, db_offset))
        })();
        let (buf, dbr, db_offset) = match setup {
            Ok(x) => x,
            Err(e) => {
                return Err((
                    e,
                    CqParts {
                        region: crate::mem::into_region(mem),
                        uar,
                        resized: None,
                    },
                ));
            }
        };
        for i in 0..(1usize << l.log_cq_size) {
            buf.w8(64 * i + cqe_offset::OP_OWN, 0xf0);
        }
        // Without coherent DMA the device must see the invalid CQEs (and
        // no dirty line may later overwrite what it writes) before
        // CREATE_CQ; the doorbell record is cleaned by `update_ci` below.
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE {
            uar.dma_clean(buf.host_addr(), l.ring_bytes);
        }
        dbr.write64(0);
        let mut cq = Self {
            buf,
            dbr,
            mem,
            mmio: uar,
            db_offset,
            cqn: cfg.cqn,
            mask: (1u32 << l.log_cq_size) - 1,
            size: 1u32 << l.log_cq_size,
            ci,
            arm_sn: 0,
            version: cfg.version,
            resized: None,
        };
        cq.update_ci();
        Ok(cq)
    }

    #[inline(always)]
    fn update_ci(&mut self) {
        // `CqSetCi` with `ci` (tested to be the same word).
        self.dbr.write32(0, (self.ci & 0xff_ffff).to_be());
        #[cfg(feature = "cache-maintenance")]
        self.clean_dbr();
    }

    /// Without coherent DMA (`M::DMA_CACHE_MAINTENANCE`; otherwise this is
    /// nothing at all): cleans (`clean`) or invalidates the `n` CQEs from
    /// index `from`, as at most two ranges (the ring wraps).
    #[cfg(feature = "cache-maintenance")]
    fn cqe_cache_op(&self, from: u32, n: u32, clean: bool) {
        if !M::DMA_CACHE_MAINTENANCE || n == 0 {
            return;
        }
        let n = n.min(self.size);
        let first = from & self.mask;
        let to_end = (self.size - first).min(n);
        let base = self.buf.host_addr();
        let op = |addr: usize, len: usize| {
            if clean {
                self.mmio.dma_clean(addr, len);
            } else {
                self.mmio.dma_invalidate(addr, len);
            }
        };
        op(base + ((first as usize) << 6), (to_end as usize) << 6);
        if n > to_end {
            op(base, ((n - to_end) as usize) << 6);
        }
    }

    /// Without coherent DMA (`M::DMA_CACHE_MAINTENANCE`; otherwise this is
    /// nothing at all): cleans the doorbell record the device reads.
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn clean_dbr(&self) {
        if M::DMA_CACHE_MAINTENANCE {
            self.mmio.dma_clean(self.dbr.host_addr(), 8);
        }
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Sets the CQ number: for a driver that makes the CQ (which
    /// initialises the CQEs and the doorbell record) before CREATE_CQ,
    /// with any number in [`CqConfig::cqn`], and learns the number from
    /// CREATE_CQ's answer. Only [`arm`](Self::arm) uses it. A number wider
    /// than 24 bits is refused and changes nothing.
    pub fn set_cqn(&mut self, cqn: u32) -> Result<(), Error> {
        if cqn >= 1 << 24 {
            return Err(Error::InvalidGeometry("CQN exceeds 24 bits"));
        }
        self.cqn = cqn;
        Ok(())
    }

    /// Removes the CQEs of one QP that have not been polled (rdma-core's
    /// `__mlx5_cq_clean`), before the QP is reset (2RST) or destroyed, so
    /// they do not surface later as completions of a queue that no longer
    /// has that work (an error, or worse, a completion of new work).
    ///
    /// `key` names the QP as its CQEs do: its user index on a CQE-version-1
    /// CQ, its QPN on a version-0 CQ. With `srq` (the SRQ the QP receives
    /// through), the WQE each of its removed receive (responder) CQEs
    /// names is returned to the SRQ's free list, as polling it would have
    /// done. Call it after the QP stopped producing completions (in
    /// RESET or ERR with everything flushed): CQEs the device writes
    /// meanwhile are not looked at.
    ///
    /// The software-owned CQEs from the consumer index on are swept from
    /// the newest to the oldest; the QP's are dropped and the others moved
    /// up over them, keeping their order (each slot keeps its owner bit),
    /// and the consumer index advances by the number dropped (doorbell
    /// record updated after a store barrier). The SQ/RQ bookkeeping of the
    /// QP is not touched: it starts over when the queue is made again.
    ///
    /// Nothing read from the CQEs is trusted: an SRQ `wqe_counter` that
    /// names no posted WQE (or, on version 0, an SRQN that is not `srq`'s)
    /// frees nothing and is counted in [`CqClean::srq_skipped`]; the CQE is
    /// dropped all the same.
    pub fn clean(&mut self, key: u32, srq: Option<&SrqCompletions>) -> CqClean {
        let mut report = CqClean::default();
        let (ci, mask) = (self.ci, self.mask);
        let buf = &self.buf;
        // The CQEs software owns now (at most a ring's worth).
        let mut n = 0u32;
        while n <= mask {
            let i = ci.wrapping_add(n);
            #[cfg(feature = "cache-maintenance")]
            self.cqe_cache_op(i, 1, false);
            let op_own = buf.r8((((i & mask) as usize) << 6) + cqe_offset::OP_OWN);
            if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != u8::from(i & self.size != 0) {
                break;
            }
            n += 1;
        }
        if n == 0 {
            return report;
        }
        barrier::udma_from_device_barrier();
        // (Again after the barrier, as `poll_synced` does: a line fetched
        // early may hold the CQE from before the owner bit.)
        #[cfg(feature = "cache-maintenance")]
        self.cqe_cache_op(ci, n, false);
        let key = key & 0xff_ffff;
        let mut dropped = 0u32;
        for k in (0..n).rev() {
            let i = ci.wrapping_add(k);
            let off = ((i & mask) as usize) << 6;
            let op_own = buf.r8(off + cqe_offset::OP_OWN);
            let srqn_uidx = Be32::from_raw(buf.r32(off + cqe_offset::SRQN_UIDX)).get() & 0xff_ffff;
            let qpn = Be32::from_raw(buf.r32(off + cqe_offset::SOP_DROP_QPN)).get() & 0xff_ffff;
            let mine = match self.version {
                CqeVersion::V1 => srqn_uidx == key,
                CqeVersion::V0 => qpn == key,
            };
            if mine {
                dropped += 1;
                let responder = matches!(
                    op_own >> 4,
                    cqe_opcode::RESP_WR_IMM
                        | cqe_opcode::RESP_SEND
                        | cqe_opcode::RESP_SEND_IMM
                        | cqe_opcode::RESP_SEND_INV
                        | cqe_opcode::RESP_ERR
                );
                if let (Some(s), true) = (srq, responder) {
                    let counter = u16::from_be(buf.r16(off + cqe_offset::WQE_COUNTER));
                    // (Version 0 names the SRQ in the CQE: it must be this
                    // one.)
                    let ok = (self.version == CqeVersion::V1 || srqn_uidx == s.srqn())
                        && s.check(counter, i)
                            .and_then(|w| s.retire(&w, counter, i))
                            .is_ok();
                    if ok {
                        report.srq_freed += 1;
                    } else {
                        report.srq_skipped += 1;
                    }
                }
            } else if dropped > 0 {
                // Move it up over the dropped ones; the slot keeps its
                // owner bit (it is software's in this pass either way).
                let dst = ((i.wrapping_add(dropped) & mask) as usize) << 6;
                for w in 0..7 {
                    buf.w64(dst + 8 * w, buf.r64(off + 8 * w));
                }
                buf.w32(dst + 56, buf.r32(off + 56));
                buf.w16(
                    dst + cqe_offset::WQE_COUNTER,
                    buf.r16(off + cqe_offset::WQE_COUNTER),
                );
                buf.w8(
                    dst + cqe_offset::SIGNATURE,
                    buf.r8(off + cqe_offset::SIGNATURE),
                );
                let owner = buf.r8(dst + cqe_offset::OP_OWN) & 1;
                buf.w8(dst + cqe_offset::OP_OWN, (op_own & !1) | owner);
            }
        }
        report.removed = dropped;
        if dropped > 0 {
            // Without coherent DMA: the rewritten slots (from `ci +
            // dropped` to `ci + n`) are written back now, so no dirty line
            // overwrites a CQE the device writes there after the wrap.
            #[cfg(feature = "cache-maintenance")]
            self.cqe_cache_op(ci.wrapping_add(dropped), n - dropped, true);
            self.ci = ci.wrapping_add(dropped);
            // The moved CQEs before the consumer index.
            barrier::udma_to_device_barrier();
            self.update_ci();
        }
        report
    }

    /// [`clean`](Self::clean) of the QP whose completion handle `qp` is
    /// registered under user index `uidx`: the key is `uidx` on a
    /// CQE-version-1 CQ and the handle's QPN on a version-0 CQ, and the
    /// SRQ is the handle's, if the QP receives through one. Call it while
    /// the handle is still registered (before taking it out of the
    /// resolver).
    pub fn clean_qp(&mut self, uidx: u32, qp: &QpCompletions) -> CqClean {
        let key = match self.version {
            CqeVersion::V1 => uidx,
            CqeVersion::V0 => qp.qpn,
        };
        self.clean(key, qp.srq())
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
    pub fn region(&self) -> RegionInfo {
        self.mem.region()
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
        self.dbr.write32(1, w.to_raw());
        #[cfg(feature = "cache-maintenance")]
        self.clean_dbr();
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

    /// Polls up to `wc.len()` completions (`ibv_poll_cq`) into
    /// [`Completion`]s (the fastest) or [`WorkCompletion`]s, returning how
    /// many were written. The doorbell record is written once per call.
    ///
    /// A corrupt CQE gives an error: if it is the first one of this call it
    /// is consumed and its error returned; otherwise the completions before
    /// it are returned and the next call reports it.
    ///
    /// Successful requester CQEs take a fast path: a run of them that name
    /// the same send queue is resolved once, checked CQE by CQE (owner bit,
    /// opcode and format, user index and QPN, WQE opcode, `wqe_counter`
    /// inside the outstanding window) and the queue's tail is stored once
    /// at the end of the run. A CQE that fails any of these checks, and
    /// every other kind of CQE, is decoded out of line by the general path,
    /// which checks everything again and reports what is wrong.
    #[inline]
    pub fn poll<R: CqResolver, W: CompletionSlot>(
        &mut self,
        queues: &R,
        wc: &mut [W],
    ) -> Result<usize, Error> {
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE {
            return self.poll_synced(queues, wc);
        }
        if let [w] = wc {
            // One slot: `poll_one` is the same without the run machinery
            // (the doorbell record already holds the consumer index when
            // nothing is consumed).
            return self.poll_one_slot(queues, w);
        }
        let mut n = 0;
        let mut result = Ok(());
        while n < wc.len() {
            let ci = self.ci;
            let off = ((ci & self.mask) as usize) << 6;
            let op_own = self.buf.r8(off + cqe_offset::OP_OWN);
            // Owner bit = bit log_cq_size of the consumer index.
            let sw_owner = u8::from(ci & self.size != 0);
            if op_own == sw_owner {
                // Software-owned, opcode REQ (0), format 0, not solicited
                // (a requester CQE with the solicited bit goes to the
                // general path, which takes any).
                barrier::udma_from_device_barrier();
                let k = match self.version {
                    CqeVersion::V1 => self.requester_run::<{ cqe_offset::SRQN_UIDX }, _, _>(
                        queues,
                        off,
                        sw_owner,
                        &mut wc[n..],
                    ),
                    CqeVersion::V0 => self.requester_run::<{ cqe_offset::SOP_DROP_QPN }, _, _>(
                        queues,
                        off,
                        sw_owner,
                        &mut wc[n..],
                    ),
                };
                if k > 0 {
                    n += k;
                    continue;
                }
                // The first CQE failed a check: the general path says why.
            } else if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != sw_owner {
                break;
            }
            barrier::udma_from_device_barrier();
            match self.general_step(ci, off, op_own, queues, &mut wc[n], n == 0) {
                Ok(true) => n += 1,
                Ok(false) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.update_ci();
        result.map(|()| n)
    }

    /// One CQE of a batch poll ([`poll`](Self::poll) and its
    /// cache-maintenance twin) through the general path: the owned CQE at
    /// `off` (consumer index `ci`) decoded into `slot` and consumed
    /// (`Ok(true)`). A CQE the general path refuses ends the batch: the
    /// batch's first (`first`) is consumed and its error returned, except
    /// that a contended SRQ lock, not the CQE's fault, leaves it for the
    /// next poll; a later one is left for the next poll to report
    /// (`Ok(false)`).
    #[inline(always)]
    fn general_step<R: CqResolver, W: CompletionSlot>(
        &mut self,
        ci: u32,
        off: usize,
        op_own: u8,
        queues: &R,
        slot: &mut W,
        first: bool,
    ) -> Result<bool, Error> {
        match self.general(off, op_own, queues) {
            Ok(c) => {
                slot.set(c);
                self.ci = ci.wrapping_add(1);
                Ok(true)
            }
            Err(e) if first => {
                if !matches!(e, Error::SrqLockTimeout(_)) {
                    self.ci = ci.wrapping_add(1);
                }
                Err(e)
            }
            Err(_) => Ok(false),
        }
    }

    /// [`poll`](Self::poll) into one slot: the single-CQE path, out of
    /// line (so that `poll` stays small enough to inline).
    #[inline(never)]
    fn poll_one_slot<R: CqResolver, W: CompletionSlot>(
        &mut self,
        queues: &R,
        w: &mut W,
    ) -> Result<usize, Error> {
        Ok(match self.poll_one_full(queues)? {
            Some(c) => {
                w.set(c);
                1
            }
            None => 0,
        })
    }

    /// One CQE, with the full [`Error`]: `Ok(None)` when no CQE is there.
    /// The same checks and error rules as [`poll`](Self::poll) (a corrupt
    /// CQE is consumed and its error returned), without the loop. The
    /// doorbell record is written when a CQE was consumed.
    #[inline]
    fn poll_one_full<R: CqResolver>(&mut self, queues: &R) -> Result<Option<Completion>, Error> {
        match self.version {
            CqeVersion::V1 => self.poll_one_at::<{ cqe_offset::SRQN_UIDX }, R>(queues),
            CqeVersion::V0 => self.poll_one_v0(queues),
        }
    }

    /// Polls one completion into `out` (`ibv_poll_cq` with one entry):
    /// `Ok(true)` when a CQE was taken and `out` holds its completion,
    /// `Ok(false)` when none is there (`out` untouched). The same checks
    /// and error rules as [`poll`](Self::poll) (a corrupt CQE is consumed
    /// and its error returned), with the two-word [`PollError`]
    /// (`Error::from` gives the full error, field for field; `?` converts
    /// it). After an error `out` holds nothing meaningful. The doorbell
    /// record is written when a CQE was consumed.
    ///
    /// A successful requester CQE is retired inline when its user index
    /// names a handle with its QPN (owner bit, opcode and format, user
    /// index and QPN, WQE opcode, `wqe_counter` inside the outstanding
    /// window, all checked);
    /// everything else goes out of line to the general path, which checks
    /// everything again and says what is wrong.
    #[inline(always)]
    pub fn poll_one<R: CqResolver>(
        &mut self,
        queues: &R,
        out: &mut Completion,
    ) -> Result<bool, PollError> {
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE {
            return self
                .poll_synced(queues, core::slice::from_mut(out))
                .map(|n| n == 1)
                .map_err(PollError::from_poll_path);
        }
        let ci = self.ci;
        let p = self.buf.block64((ci as usize) << 6);
        let op_own = p.r8(cqe_offset::OP_OWN);
        // Owner bit = bit log_cq_size of the consumer index.
        if op_own == u8::from(ci & self.size != 0) {
            // Software-owned, opcode REQ (0), format 0, not solicited (as
            // in `poll`). (Whatever the CQE version: the handle must also
            // have the CQE's QPN, which names one QP, so a version-0 CQE
            // whose reserved user-index field finds a handle is retired on
            // the right queue; one that finds none goes the general way.
            // No version test on the fast path.)
            barrier::udma_from_device_barrier();
            // (Each field is read once, after the barrier, when it is
            // needed: fewer values live at a time.)
            let t = p.r64(cqe_offset::SOP_DROP_QPN);
            // A WQE opcode whose completion is its table entry alone (the
            // others go the general way).
            let w2 = REQ_FAST[(u32::from_be(raw_sop_qpn(t)) >> 24) as usize];
            let uidx = u32::from_be(p.r32(cqe_offset::SRQN_UIDX) & KEY24);
            if let Some(h) = queues.by_user_index(uidx) {
                // It retires the send queue and the QPN matches.
                if let Some(table) = h.send_table(raw_sop_qpn(t) & KEY24)
                    && (w2 as i64) >= 0
                {
                    let e = table.entry8(wqe_counter8(t));
                    out.w1w2(Completion::word1_raw(0, raw_sop_qpn(t)), w2);
                    let tail_a = sq_hdr(table, META_SQ_TAIL);
                    let tail = tail_a.load(Ordering::Relaxed);
                    let head = sq_hdr(table, META_SQ_HEAD).load(Ordering::Acquire);
                    let wqe_head = e.head.load(Ordering::Relaxed);
                    // The WQE is outstanding.
                    if wqe_head.wrapping_sub(tail) < head.wrapping_sub(tail) {
                        tail_a.store(wqe_head.wrapping_add(1), Ordering::Release);
                        out.w0(e.wr_id.load(Ordering::Relaxed));
                        self.ci = self.ci.wrapping_add(1);
                        self.update_ci();
                        return Ok(true);
                    }
                }
            }
            // It failed a check: the general path says why.
        } else if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != u8::from(ci & self.size != 0)
        {
            return Ok(false);
        }
        self.poll_one_slow(queues, out)
    }

    /// [`poll_one`](Self::poll_one) with the raw Ethernet fields of the
    /// CQE: when a CQE was taken (`Ok(true)`), `out` holds its completion
    /// and `rx` the CQE's L3/L4 header types, checksum bits, VLAN, RSS hash
    /// and flow tag ([`RxCqe`], decoded on demand; for a requester CQE they
    /// mean nothing). `IBV_WC_IP_CSUM_OK` is in the completion's flags as
    /// for every poll (see [`QpCompletions::set_rx_csum`]). The same checks
    /// and error rules as [`poll`](Self::poll). This is rdma-core's
    /// extended CQ (`ibv_start_poll` and `ibv_wc_read_*`) for one CQE; the
    /// plain polls do not copy these words.
    pub fn poll_one_rx<R: CqResolver>(
        &mut self,
        queues: &R,
        out: &mut Completion,
        rx: &mut RxCqe,
    ) -> Result<bool, Error> {
        let ci = self.ci;
        let off = ((ci & self.mask) as usize) << 6;
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE {
            self.mmio.dma_invalidate(self.buf.host_addr() + off, 64);
        }
        let op_own = self.buf.r8(off + cqe_offset::OP_OWN);
        if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != u8::from(ci & self.size != 0) {
            return Ok(false);
        }
        barrier::udma_from_device_barrier();
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE {
            self.mmio.dma_invalidate(self.buf.host_addr() + off, 64);
        }
        // Copied before the CQE is consumed (after that the device may
        // write the slot again).
        let fields = RxCqe::read(self.buf.block64(off));
        match self.poll_one_full(queues)? {
            Some(c) => {
                *out = c;
                *rx = fields;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`poll`](Self::poll) without coherent DMA (`M::DMA_CACHE_MAINTENANCE`):
    /// each CQE is invalidated before its ownership check and again after
    /// it (before its fields are read), and decoded by the general path;
    /// the same results and error rules as `poll`.
    #[cfg(feature = "cache-maintenance")]
    #[inline(never)]
    fn poll_synced<R: CqResolver, W: CompletionSlot>(
        &mut self,
        queues: &R,
        wc: &mut [W],
    ) -> Result<usize, Error> {
        let mut n = 0;
        let mut result = Ok(());
        while n < wc.len() {
            let ci = self.ci;
            let off = ((ci & self.mask) as usize) << 6;
            let addr = self.buf.host_addr() + off;
            self.mmio.dma_invalidate(addr, 64);
            let op_own = self.buf.r8(off + cqe_offset::OP_OWN);
            let sw_owner = u8::from(ci & self.size != 0);
            if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != sw_owner {
                break;
            }
            barrier::udma_from_device_barrier();
            self.mmio.dma_invalidate(addr, 64);
            match self.general_step(ci, off, op_own, queues, &mut wc[n], n == 0) {
                Ok(true) => n += 1,
                Ok(false) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.update_ci();
        result.map(|()| n)
    }

    /// [`poll_one`](Self::poll_one) of everything but a good requester CQE
    /// whose user index and QPN name its queue.
    #[cold]
    #[inline(never)]
    fn poll_one_slow<R: CqResolver>(
        &mut self,
        queues: &R,
        out: &mut Completion,
    ) -> Result<bool, PollError> {
        match self.poll_one_full(queues) {
            Ok(Some(c)) => {
                *out = c;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(PollError::from_poll_path(e)),
        }
    }

    /// [`poll_one_full`](Self::poll_one_full) of a CQ with CQE version 0
    /// (QPs found by QPN, a search), out of line.
    #[inline(never)]
    fn poll_one_v0<R: CqResolver>(&mut self, queues: &R) -> Result<Option<Completion>, Error> {
        self.poll_one_at::<{ cqe_offset::SOP_DROP_QPN }, R>(queues)
    }

    /// [`poll_one_full`](Self::poll_one_full) with the queue key at `KEY`
    /// (see [`requester_run`](Self::requester_run)).
    #[inline(always)]
    fn poll_one_at<const KEY: usize, R: CqResolver>(
        &mut self,
        queues: &R,
    ) -> Result<Option<Completion>, Error> {
        let ci = self.ci;
        let off = ((ci & self.mask) as usize) << 6;
        let cqe = self.buf.block64(off);
        let op_own = cqe.r8(cqe_offset::OP_OWN);
        // Owner bit = bit log_cq_size of the consumer index.
        let sw_owner = u8::from(ci & self.size != 0);
        if op_own == sw_owner {
            // Software-owned, opcode REQ (0), format 0, not solicited (as
            // in `poll`).
            barrier::udma_from_device_barrier();
            let c = Self::requester_one::<KEY, R>(cqe, queues);
            if let Some(c) = c {
                self.ci = ci.wrapping_add(1);
                self.update_ci();
                return Ok(Some(c));
            }
            // It failed a check: the general path says why.
        } else if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != sw_owner {
            return Ok(None);
        }
        self.poll_one_general(queues, off, op_own)
    }

    /// [`poll_one_full`](Self::poll_one_full) of a CQE the fast path did
    /// not take.
    #[inline(never)]
    fn poll_one_general<R: CqResolver>(
        &mut self,
        queues: &R,
        off: usize,
        op_own: u8,
    ) -> Result<Option<Completion>, Error> {
        barrier::udma_from_device_barrier();
        let r = self.general(off, op_own, queues);
        // A contended SRQ lock is not the CQE's fault: leave it.
        if !matches!(r, Err(Error::SrqLockTimeout(_))) {
            self.ci = self.ci.wrapping_add(1);
            self.update_ci();
        }
        r.map(Some)
    }

    /// The send queue of a requester CQE `cqe` whose key dword is at `KEY`
    /// (see [`requester_run`](Self::requester_run)), if the key is
    /// registered, the QPN matches and the handle retires the send queue.
    /// Gives the raw masked key and QPN words and the queue's state.
    #[inline(always)]
    fn requester_queue<'r, const KEY: usize, R: CqResolver>(
        cqe: Block64<'_>,
        queues: &'r R,
        t: u64,
    ) -> Option<(u32, u32, Run<'r>)> {
        let kk = cqe.r32(KEY) & KEY24;
        let kq = raw_sop_qpn(t) & KEY24;
        // The key dword is the QPN's (version 0) or the user index's
        // (version 1, `KEY` is `srqn_uidx`).
        let h = if KEY == cqe_offset::SRQN_UIDX {
            queues.by_user_index(u32::from_be(kk))
        } else {
            queues.by_qpn(u32::from_be(kk))
        }?;
        // It retires the send queue and the QPN matches.
        let table = h.send_table(kq)?;
        let tail = sq_hdr(table, META_SQ_TAIL).load(Ordering::Relaxed);
        let head = sq_hdr(table, META_SQ_HEAD).load(Ordering::Acquire);
        Some((
            kk,
            kq,
            Run {
                table: table.cells(),
                last: head.wrapping_sub(1),
                room: head.wrapping_sub(tail),
            },
        ))
    }

    /// [`poll_one_full`](Self::poll_one_full) of a software-owned requester
    /// CQE of format 0 (read barrier done): the completion, and the
    /// queue's tail advanced, if it passes every check. Does not move the
    /// consumer index.
    #[inline(always)]
    fn requester_one<const KEY: usize, R: CqResolver>(
        cqe: Block64<'_>,
        queues: &R,
    ) -> Option<Completion> {
        let t = cqe.r64(cqe_offset::SOP_DROP_QPN);
        let (_, _, mut run) = Self::requester_queue::<KEY, R>(cqe, queues, t)?;
        let [w0, w1, w2] = run.take(cqe, t)?;
        run.store_tail();
        Some(Completion::requester(w0, w1, w2))
    }

    /// Retires a run of successful requester CQEs of one send queue: the
    /// CQE at the consumer index (at byte `off`, already seen to be
    /// software-owned with opcode REQ and format 0, read barrier done) and
    /// the ones after it that name the same queue, up to `out.len()` and
    /// the end of the ring. Returns how many were written; a CQE that fails
    /// a check ends the run (0 if it is the first) and is left to the
    /// general path.
    ///
    /// `KEY` is where the CQE carries its queue's key (`srqn_uidx` for
    /// CQE version 1, `sop_drop_qpn` for version 0). The loop keeps what it
    /// needs in locals: the barriers are memory clobbers, after which
    /// fields of `self` would be read again. Out of line, so the loop has
    /// the registers to itself.
    #[inline(never)]
    fn requester_run<const KEY: usize, R: CqResolver, W: CompletionSlot>(
        &mut self,
        queues: &R,
        off: usize,
        sw_owner: u8,
        out: &mut [W],
    ) -> usize {
        let ci = self.ci;
        let buf = &self.buf;
        // CQEs before the ring wraps (the owner bit flips there).
        let limit = out.len().min((self.mask - (ci & self.mask)) as usize + 1);
        let Some((first, rest)) = out[..limit].split_first_mut() else {
            return 0;
        };
        let cqe = buf.block64(off);
        let t = cqe.r64(cqe_offset::SOP_DROP_QPN);
        let Some((kk, kq, mut run)) = Self::requester_queue::<KEY, R>(cqe, queues, t) else {
            return 0;
        };
        let Some([w0, w1, w2]) = run.take(cqe, t) else {
            return 0;
        };
        first.set_requester(w0, w1, w2);
        // The owner bit is the same for the whole run (it stops at the end
        // of the ring): a loop for each value, comparing with a constant.
        // When the first CQE's WQE opcode completes with its table entry
        // alone (RDMA WRITE, SEND...), the run goes on while the CQEs carry
        // the same WQE opcode and QPN (the first's `sop_drop_qpn` dword,
        // compared whole), whose completion words 1 and 2 need no lookup;
        // a CQE with another opcode ends the run and starts the next.
        let sq_word = raw_sop_qpn(t);
        let k = if (REQ_FAST[(u32::from_be(sq_word) >> 24) as usize] as i64) >= 0 {
            if sw_owner == 0 {
                Self::run_same_op::<KEY, W, 0>(buf, off + 64, kk, sq_word, w2, &mut run, rest)
            } else {
                Self::run_same_op::<KEY, W, 1>(buf, off + 64, kk, sq_word, w2, &mut run, rest)
            }
        } else if sw_owner == 0 {
            Self::run_rest::<KEY, W, 0>(buf, off + 64, kk, kq, &mut run, rest)
        } else {
            Self::run_rest::<KEY, W, 1>(buf, off + 64, kk, kq, &mut run, rest)
        };
        run.store_tail();
        let i = k + 1;
        self.ci = ci.wrapping_add(i as u32);
        i
    }

    /// The loop of [`requester_run`](Self::requester_run) after its first
    /// CQE: retires the CQEs from byte `p` on into `out` while they are
    /// software's (owner bit `SW`), plain requester CQEs whose key and QPN
    /// dwords (masked) are `kk` and `kq`, and pass [`Run::take`]; gives how
    /// many it retired. `out` is no longer than the CQEs left before the
    /// end of the ring.
    #[inline(always)]
    fn run_rest<const KEY: usize, W: CompletionSlot, const SW: u8>(
        buf: &Ring,
        p: usize,
        kk: u32,
        kq: u32,
        run: &mut Run<'_>,
        out: &mut [W],
    ) -> usize {
        // (One walk over the CQEs and `out`, bounded once by the ring.)
        buf.zip_blocks(p, out, |cqe, w| {
            // The next CQE, if it is the device's turn over, a plain
            // requester CQE, names the same queue and passes the checks.
            if cqe.r8(cqe_offset::OP_OWN) != SW {
                return false;
            }
            barrier::udma_from_device_barrier();
            let t = cqe.r64(cqe_offset::SOP_DROP_QPN);
            // The key and QPN dwords, compared raw (no constant or key
            // needs a register of its own).
            if ((cqe.r32(KEY) ^ kk) | (raw_sop_qpn(t) ^ kq)) & KEY24 != 0 {
                return false;
            }
            let Some([w0, w1, w2]) = run.take(cqe, t) else {
                return false;
            };
            w.set_requester(w0, w1, w2);
            true
        })
    }

    /// [`run_rest`](Self::run_rest) of a run whose first CQE's WQE opcode
    /// completes with its table entry alone: retires the CQEs from byte
    /// `p` on while they are software's (owner bit `SW`), plain requester
    /// CQEs whose key dword (masked) is `kk` and whose `sop_drop_qpn` dword
    /// is `sq_word` (the same WQE opcode and QPN as the first; compared
    /// whole), and whose WQE is outstanding; their completions' word 2 is
    /// the first's, `w2`.
    #[inline(always)]
    fn run_same_op<const KEY: usize, W: CompletionSlot, const SW: u8>(
        buf: &Ring,
        p: usize,
        kk: u32,
        sq_word: u32,
        w2: u64,
        run: &mut Run<'_>,
        out: &mut [W],
    ) -> usize {
        buf.zip_blocks(p, out, |cqe, w| {
            if cqe.r8(cqe_offset::OP_OWN) != SW {
                return false;
            }
            barrier::udma_from_device_barrier();
            let t = cqe.r64(cqe_offset::SOP_DROP_QPN);
            if (cqe.r32(KEY) ^ kk) & KEY24 != 0 || raw_sop_qpn(t) != sq_word {
                return false;
            }
            let Some(w0) = run.take_same_op(t) else {
                return false;
            };
            // `byte_len` 0: word 1 is the CQE's dword (see `Run::take`).
            w.set_requester(w0, Completion::word1_raw(0, sq_word), w2);
            true
        })
    }

    /// `byte_len` of a requester completion (CQE at byte `p`, the one at
    /// the consumer index) whose table entry says it is not 0, or the error
    /// for a WQE opcode that is not one.
    fn req_byte_len(&self, ent: u32, p: usize, sop: u8) -> Result<u32, Error> {
        if ent & REQ_BAD != 0 {
            return Err(Error::CqeOpcode {
                ci: self.ci,
                opcode: sop,
            });
        }
        if ent & REQ_LEN_8 != 0 {
            return Ok(8);
        }
        Ok(Be32::from_raw(self.buf.r32(p + cqe_offset::BYTE_CNT)).get())
    }

    /// [`poll`](Self::poll) without the requester fast path: every CQE
    /// through [`general`](Self::general), as the crate did before the fast
    /// path existed. The tests hold the two to the same results.
    #[cfg(test)]
    fn poll_reference<R: CqResolver>(
        &mut self,
        queues: &R,
        wc: &mut [Completion],
    ) -> Result<usize, Error> {
        // (No one-slot shortcut: `poll` and `poll_one` are held to this.)
        let mut n = 0;
        let mut result = Ok(());
        while n < wc.len() {
            let ci = self.ci;
            let off = ((ci & self.mask) as usize) << 6;
            let op_own = self.buf.r8(off + cqe_offset::OP_OWN);
            let sw_owner = u8::from(ci & self.size != 0);
            if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != sw_owner {
                break;
            }
            barrier::udma_from_device_barrier();
            match self.general(off, op_own, queues) {
                Ok(c) => {
                    wc[n] = c;
                    self.ci = ci.wrapping_add(1);
                    n += 1;
                }
                Err(e) => {
                    if n == 0 {
                        if !matches!(e, Error::SrqLockTimeout(_)) {
                            self.ci = ci.wrapping_add(1);
                        }
                        result = Err(e);
                    }
                    break;
                }
            }
        }
        self.update_ci();
        result.map(|()| n)
    }

    /// Decodes a CQE the fast path does not take and applies it.
    #[inline(never)]
    fn general<R: CqResolver>(
        &self,
        off: usize,
        op_own: u8,
        queues: &R,
    ) -> Result<Completion, Error> {
        let mut w = WorkCompletion::default();
        match self.parse(off, op_own, queues, &mut w)? {
            Commit::SqTail(h, t) => {
                if let Some(sq) = &h.sq {
                    sq_hdr(sq, META_SQ_TAIL).store(t, Ordering::Release);
                }
            }
            Commit::RqTail(h, t) => {
                hdr(&h.hdr, META_RQ_TAIL).store(t, Ordering::Release);
            }
            Commit::Srq(s, wqe, ctr) => {
                w.wr_id = s.retire(&wqe, ctr, self.ci)?;
            }
        }
        Ok(Completion::from(&w))
    }

    #[inline(always)]
    fn resolve<'r, R: CqResolver>(
        &self,
        queues: &'r R,
        key: u32,
        qpn: u32,
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
        if h.qpn != qpn {
            return Err(Error::CqeQpnMismatch {
                ci: self.ci,
                got: qpn,
                expected: h.qpn,
            });
        }
        Ok(h)
    }

    /// [`resolve`](Self::resolve) for a receive CQE: a raw packet QP's
    /// carries the flow tag where the QPN would be, so only the key
    /// (version 1: the user index) names its queue.
    #[inline(always)]
    fn resolve_recv<'r, R: CqResolver>(
        &self,
        queues: &'r R,
        key: u32,
        qpn: u32,
    ) -> Result<&'r QpCompletions, Error> {
        if self.version == CqeVersion::V1
            && let Some(h) = queues.by_user_index(key)
            && h.raw
        {
            return Ok(h);
        }
        self.resolve(queues, key, qpn)
    }

    /// rdma-core `get_csum_ok` of the CQE at `off`.
    #[inline(always)]
    fn csum_ok(&self, off: usize) -> bool {
        let b = self.buf.r16(off + cqe_offset::HDS_IP_EXT).to_ne_bytes();
        let both = crate::rx::CQE_L3_OK | crate::rx::CQE_L4_OK;
        b[0] & both == both && (b[1] >> 2) & 3 == 2
    }

    /// Validates and decodes one CQE; changes nothing.
    #[inline(always)]
    fn parse<'r, R: CqResolver>(
        &self,
        off: usize,
        op_own: u8,
        queues: &'r R,
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
                let h = self.resolve(queues, key, qpn)?;
                let sq = h.sq.as_ref().ok_or(Error::CqeUnknownQueue {
                    ci,
                    what: "send queue of QPN",
                    key: qpn,
                })?;
                let sop = (sop_qpn >> 24) as u8;
                let ent = REQ_TABLE[usize::from(sop)];
                // The WQE opcode first, then the WQE (as the fast path).
                let byte_len = if opcode == cqe_opcode::REQ && ent > 0xffff {
                    self.req_byte_len(ent, off, sop)?
                } else {
                    0
                };
                let e = sq.entry(u32::from(counter));
                let wqe_head = e.head.load(Ordering::Relaxed);
                let tail = sq_hdr(sq, META_SQ_TAIL).load(Ordering::Relaxed);
                let head = sq_hdr(sq, META_SQ_HEAD).load(Ordering::Acquire);
                if wqe_head.wrapping_sub(tail) >= head.wrapping_sub(tail) {
                    return Err(Error::CqeWqeCounter {
                        ci,
                        counter,
                        queue: "send queue",
                    });
                }
                let wr_id = e.wr_id.load(Ordering::Relaxed);
                if opcode == cqe_opcode::REQ {
                    *out = WorkCompletion {
                        wr_id,
                        byte_len,
                        qp_num: qpn,
                        wc_flags: WcFlags((ent >> 8) & 0xff),
                        opcode: WcOpcode::from_u8(ent as u8).unwrap_or_default(),
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
                        let h = self.resolve_recv(queues, key, qpn)?;
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
                let RecvSide::Rq { wrid, len } = &h.rq else {
                    return Err(Error::CqeUnknownQueue {
                        ci,
                        what: "receive queue of QPN",
                        key: qpn,
                    });
                };
                let tail = hdr(&h.hdr, META_RQ_TAIL).load(Ordering::Relaxed);
                let head = hdr(&h.hdr, META_RQ_HEAD).load(Ordering::Acquire);
                if u32::from(counter.wrapping_sub(tail as u16)) >= head.wrapping_sub(tail) {
                    return Err(Error::CqeWqeCounter {
                        ci,
                        counter,
                        queue: "receive queue",
                    });
                }
                let posted = len.get(u32::from(counter)).load(Ordering::Relaxed);
                if check_len && byte_cnt > posted {
                    return Err(Error::CqeByteCount {
                        ci,
                        byte_cnt,
                        posted: u64::from(posted),
                    });
                }
                w.wr_id = wrid.get(u32::from(counter)).load(Ordering::Relaxed);
                if h.rx_csum && !is_err && self.csum_ok(off) {
                    w.wc_flags.0 |= WcFlags::IP_CSUM_OK;
                }
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
        let Self {
            mem,
            buf,
            dbr,
            mmio,
            resized,
            ..
        } = self;
        drop((buf, dbr));
        CqParts {
            region: crate::mem::into_region(mem),
            uar: mmio,
            resized: resized.map(crate::mem::into_region),
        }
    }

    /// The CQEs software owns now and has not polled (from the consumer
    /// index on, at most a ring's worth).
    pub fn pending(&self) -> u32 {
        let (ci, mask) = (self.ci, self.mask);
        let mut n = 0u32;
        while n <= mask {
            let i = ci.wrapping_add(n);
            let op_own = self
                .buf
                .r8((((i & mask) as usize) << 6) + cqe_offset::OP_OWN);
            if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != u8::from(i & self.size != 0) {
                break;
            }
            n += 1;
        }
        n
    }

    /// Makes the new ring of a resize to `2^log_cq_size` CQEs in `region`
    /// (at least [`resize_region_bytes`], 64-byte aligned): every CQE
    /// invalid (`op_own` 0xf0). Send MODIFY_CQ (op_mod resize) with its
    /// page list next, then [`finish_resize`](Self::finish_resize).
    pub fn prepare_resize(
        &self,
        region: DmaRegion,
        log_cq_size: u8,
    ) -> Result<CqResizeRing, (Error, DmaRegion)> {
        if log_cq_size > 24 {
            return Err((Error::InvalidGeometry("CQ layout"), region));
        }
        let bytes = 64usize << log_cq_size;
        if let Err(e) = check_region(&region, resize_region_bytes(log_cq_size)) {
            return Err((e, region));
        }
        let mut mem = match QueueMem::new(region, bytes) {
            Ok(m) => m,
            Err((e, region)) => return Err((e.into(), region)),
        };
        let buf = match mem.ring(0, bytes) {
            Ok(b) => b,
            Err(e) => return Err((e.into(), crate::mem::into_region(mem))),
        };
        for i in 0..(1usize << log_cq_size) {
            buf.w8(64 * i + cqe_offset::OP_OWN, 0xf0);
        }
        // Without coherent DMA: the invalid CQEs reach memory before
        // MODIFY_CQ hands the ring to the device.
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE {
            self.mmio.dma_clean(buf.host_addr(), bytes);
        }
        Ok(CqResizeRing {
            mem,
            buf,
            log_cq_size,
        })
    }

    /// Completes a resize after MODIFY_CQ succeeded (rdma-core's
    /// `mlx5_cq_resize_copy_cqes`): the CQEs not yet polled, up to the
    /// RESIZE_CQ CQE the device wrote in the old ring, are copied into
    /// `new` one place on (CQE `i` to index `i + 1`, owner bit of the new
    /// ring), the consumer index steps over the RESIZE_CQ CQE and polling
    /// goes on in `new`. Returns the region of the ring of a previous
    /// resize, now unused (the first ring stays: it holds the doorbell
    /// record).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGeometry`] when no
    /// RESIZE_CQ CQE follows the unpolled CQEs or they do not fit in `new`;
    /// the CQ is then left as it was and `new` comes back.
    pub fn finish_resize(
        &mut self,
        new: CqResizeRing,
    ) -> Result<Option<DmaRegion>, (Error, CqResizeRing)> {
        barrier::udma_from_device_barrier();
        let (ci, mask) = (self.ci, self.mask);
        let nsize = 1u32 << new.log_cq_size;
        let nmask = nsize - 1;
        let mut n = 0u32;
        let found = loop {
            if n > mask {
                break false;
            }
            let i = ci.wrapping_add(n);
            let off = ((i & mask) as usize) << 6;
            // Without coherent DMA: the CQE as the device wrote it.
            #[cfg(feature = "cache-maintenance")]
            self.cqe_cache_op(i, 1, false);
            let op_own = self.buf.r8(off + cqe_offset::OP_OWN);
            if op_own >> 4 == cqe_opcode::INVALID || op_own & 1 != u8::from(i & self.size != 0) {
                break false;
            }
            if op_own >> 4 == cqe_opcode::RESIZE_CQ {
                break true;
            }
            n += 1;
        };
        if !found {
            return Err((
                Error::InvalidGeometry("resize: no RESIZE_CQ CQE after the unpolled CQEs"),
                new,
            ));
        }
        if n >= nsize {
            return Err((
                Error::InvalidGeometry("resize: the unpolled CQEs do not fit in the new ring"),
                new,
            ));
        }
        for k in 0..n {
            let i = ci.wrapping_add(k);
            let src = ((i & mask) as usize) << 6;
            // Without coherent DMA: the old CQE as the device wrote it.
            #[cfg(feature = "cache-maintenance")]
            self.cqe_cache_op(i, 1, false);
            let j = i.wrapping_add(1);
            let dst = ((j & nmask) as usize) << 6;
            for w in 0..7 {
                new.buf.w64(dst + 8 * w, self.buf.r64(src + 8 * w));
            }
            new.buf.w32(dst + 56, self.buf.r32(src + 56));
            new.buf.w16(
                dst + cqe_offset::WQE_COUNTER,
                self.buf.r16(src + cqe_offset::WQE_COUNTER),
            );
            new.buf.w8(
                dst + cqe_offset::SIGNATURE,
                self.buf.r8(src + cqe_offset::SIGNATURE),
            );
            let op_own = self.buf.r8(src + cqe_offset::OP_OWN);
            new.buf.w8(
                dst + cqe_offset::OP_OWN,
                (op_own & !1) | u8::from(j & nsize != 0),
            );
        }
        // Without coherent DMA: the copies are written back before the
        // device writes after them (and no dirty line is left over a slot
        // it writes later).
        #[cfg(feature = "cache-maintenance")]
        if M::DMA_CACHE_MAINTENANCE && n > 0 {
            let first = (ci.wrapping_add(1) & nmask) as usize;
            let to_end = (nsize as usize - first).min(n as usize);
            self.mmio
                .dma_clean(new.buf.host_addr() + (first << 6), to_end << 6);
            if n as usize > to_end {
                self.mmio
                    .dma_clean(new.buf.host_addr(), (n as usize - to_end) << 6);
            }
        }
        let CqResizeRing {
            mem,
            buf,
            log_cq_size,
        } = new;
        self.buf = buf;
        self.mask = nmask;
        self.size = nsize;
        debug_assert_eq!(nsize, 1 << log_cq_size);
        let old = self.resized.replace(mem).map(crate::mem::into_region);
        self.ci = ci.wrapping_add(1);
        barrier::udma_to_device_barrier();
        self.update_ci();
        Ok(old)
    }
}

/// The raw (native-order) `sop_drop_qpn` dword out of the raw 8 bytes at
/// `sop_drop_qpn` (`sop_drop_qpn`, `wqe_counter`, signature, `op_own`).
#[inline(always)]
fn raw_sop_qpn(t: u64) -> u32 {
    if cfg!(target_endian = "little") {
        t as u32
    } else {
        (t >> 32) as u32
    }
}

/// The 24-bit fields of a CQE (QPN, user index, SRQN) as they are in
/// memory: the low 24 bits of a big-endian dword are its last three bytes,
/// so a raw (native-order) load masked with this compares them without
/// byte swapping.
const KEY24: u32 = 0x00ff_ffffu32.to_be();

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use platform::host::{HostBlock, HostMmio};
    use proptest::prelude::*;

    use super::*;
    use crate::{
        BfConfig, DeviceLimits, Qp, QpCaps, QpConfig, QpGeometry, QpType, SendFlags, SendOp,
        SendWr, Sge,
    };

    /// A UAR page on the heap.
    struct Uar {
        win: HostMmio,
    }

    impl Uar {
        fn new() -> Self {
            Self {
                win: HostMmio::new(4096).unwrap(),
            }
        }
    }

    /// Two RC QPs (user indices 1 and 2) with RDMA writes of 1 to 4 SGEs
    /// (so 1 or 2 WQEBBs) posted, and a CQ of `1 << log` entries serving
    /// their send queues.
    struct Setup<'u> {
        mems: Vec<HostBlock>,
        cq_mem: HostBlock,
        qps: Vec<Qp<&'u HostMmio>>,
        cq: Option<Cq<&'u HostMmio>>,
        table: CqTable<4>,
        /// The WQE start counters of each QP's posts.
        starts: [Vec<u16>; 2],
    }

    impl<'u> Setup<'u> {
        fn new(uar: &'u Uar, log: u8, sq_start: u32, ci: u32, sges: &[u8], v0: bool) -> Self {
            let w = &uar.win;
            let caps = QpCaps {
                max_send_wr: 64,
                max_recv_wr: 0,
                max_send_sge: 4,
                max_recv_sge: 0,
                max_inline_data: 0,
                send_ops: None,
            };
            let geometry = QpGeometry::new(QpType::Rc, &caps, &DeviceLimits::default()).unwrap();
            let mut mems = Vec::new();
            let mut qps = Vec::new();
            let mut table = CqTable::new();
            let mut starts = [Vec::new(), Vec::new()];
            for (i, qpn) in [0x111u32, 0x222].into_iter().enumerate() {
                let mem = HostBlock::new(geometry.layout.total_bytes, 4096).unwrap();
                let cfg = QpConfig {
                    qp_type: QpType::Rc,
                    qpn,
                    geometry,
                    atomics: true,
                    sq_sig_all: false,
                    eth_min_inline: 0,
                };
                let mut qp = Qp::with_counters(
                    mem.lend(0x10_0000 * (i as u64 + 1), 0).unwrap(),
                    Some((w, BfConfig::new(0))),
                    &cfg,
                    sq_start,
                    0,
                )
                .map_err(|(e, _)| e)
                .unwrap();
                let sgl = [Sge {
                    addr: 0x1000,
                    length: 8,
                    lkey: 1,
                }; 4];
                for (k, &n) in sges.iter().enumerate() {
                    let sq = qp.sq().unwrap();
                    starts[i].push(sq.cur_post() as u16);
                    let op = SendOp::RdmaWrite {
                        remote_addr: 0x2000,
                        rkey: 2,
                    };
                    let wr = SendWr::new((i as u64) << 32 | k as u64, op)
                        .sgl(&sgl[..usize::from(n % 4) + 1])
                        .flags(SendFlags::SIGNALED);
                    sq.post_send(&wr).unwrap();
                }
                table
                    .insert(i as u32 + 1, qp.completions(true, false, None).unwrap())
                    .map_err(|(e, _)| e)
                    .unwrap();
                mems.push(mem);
                qps.push(qp);
            }
            let layout = crate::CqLayout::new(log).unwrap();
            let cq_mem = HostBlock::new(layout.total_bytes, 4096).unwrap();
            let cfg = CqConfig {
                cqn: 7,
                layout,
                version: if v0 { CqeVersion::V0 } else { CqeVersion::V1 },
                uar_page_offset: 0,
            };
            let cq = Cq::with_consumer_index(cq_mem.lend(0x90_0000, 0).unwrap(), w, &cfg, ci)
                .map_err(|(e, _)| e)
                .unwrap();
            Self {
                mems,
                cq_mem,
                qps,
                cq: Some(cq),
                table,
                starts,
            }
        }

        fn cq(&mut self) -> &mut Cq<&'u HostMmio> {
            self.cq.as_mut().unwrap()
        }

        /// Writes CQE image `b` at consumer index `ci`.
        fn write_cqe(&self, ci: u32, b: &[u8; 64]) {
            let entries = self.cq.as_ref().unwrap().entries();
            let slot = (ci & (entries - 1)) as usize;
            self.cq_mem.write(64 * slot, b).unwrap();
        }

        /// Offset of the CQ's doorbell record.
        fn dbr_off(&self) -> usize {
            crate::CqLayout::new(self.cq.as_ref().unwrap().entries().trailing_zeros() as u8)
                .unwrap()
                .dbr_offset
        }

        /// Work requests retired per QP.
        fn tails(&mut self) -> [u32; 2] {
            tails_of(&mut self.qps)
        }
    }

    /// Work requests retired per QP of `qps`.
    fn tails_of(qps: &mut [Qp<&HostMmio>]) -> [u32; 2] {
        let mut t = [0; 2];
        for (i, qp) in qps.iter_mut().enumerate() {
            let sq = qp.sq().unwrap();
            t[i] = sq.head().wrapping_sub(sq.outstanding());
        }
        t
    }

    impl Drop for Setup<'_> {
        fn drop(&mut self) {
            for k in [1, 2] {
                drop(self.table.remove(k));
            }
            for (qp, mem) in self.qps.drain(..).zip(&self.mems) {
                let parts = qp.into_parts().map_err(|_| ()).unwrap();
                mem.reclaim(parts.region).unwrap();
            }
            if let Some(cq) = self.cq.take() {
                self.cq_mem.reclaim(cq.into_parts().region).unwrap();
            }
        }
    }

    /// One CQE of the random sequences: switch QP (when `.0 % 8 == 0`),
    /// WQEs to skip (retired unsignaled), a corruption (0 = none) and its
    /// random value.
    type CqeSpec = (u8, u8, u8, u16);

    /// Generates CQE images: in order per QP, mostly valid.
    struct Gen {
        q: usize,
        cursor: [usize; 2],
    }

    impl Gen {
        /// The CQE image for `spec` at consumer index `ci`.
        fn cqe(&mut self, s: &Setup<'_>, ci: u32, entries: u32, spec: CqeSpec) -> [u8; 64] {
            let (switch, skip, corrupt, r) = spec;
            if switch % 8 == 0 {
                self.q ^= 1;
            }
            let q = self.q;
            let starts = &s.starts[q];
            self.cursor[q] += usize::from(skip % 4 / 3);
            let mut counter = starts[self.cursor[q] % starts.len()];
            self.cursor[q] += 1;
            let owner = u8::from(ci & entries != 0);
            let mut b = [0u8; 64];
            let mut uidx = q as u32 + 1;
            let mut qpn = [0x111u32, 0x222][q];
            let mut sop = 0x08u8;
            let mut op_own = owner;
            match corrupt % 16 {
                1 => uidx = u32::from(r) & 3,
                2 => qpn ^= (u32::from(r) << 4) | 1,
                3 => sop = r as u8,
                4 => counter = r,
                5 => counter = counter.wrapping_add(1),
                6 => op_own |= (r as u8 % 3 + 1) << 2,
                7 => op_own |= 0xd0,              // requester error
                8 => sop = 0x10,                  // RDMA read: byte_cnt
                9 => sop = 0x12,                  // atomic: 8 bytes
                10 => op_own ^= 1,                // not ours yet
                11 => uidx |= u32::from(r) << 24, // bits above the index
                12 => qpn |= u32::from(r) << 24,  // sop bits, not the QPN
                13 => op_own |= 2,                // solicited (general path)
                14 => sop = [0xff, 0x7f, 0x01, 0x0e][usize::from(r % 4)], // bad or rare
                15 => sop = [0x00, 0x09, 0x0a, 0x0b, 0x11][usize::from(r % 5)], // other ops
                _ => {}
            }
            b[0x20..0x24].copy_from_slice(&uidx.to_be_bytes());
            b[0x2c..0x30].copy_from_slice(&(u32::from(r) * 3).to_be_bytes());
            b[0x36] = r as u8;
            b[0x37] = (r >> 8) as u8;
            b[0x38..0x3c].copy_from_slice(&((u32::from(sop) << 24) ^ qpn).to_be_bytes());
            b[0x3c..0x3e].copy_from_slice(&counter.to_be_bytes());
            b[0x3f] = op_own;
            b
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 6 } else { 400 },
            failure_persistence: None,
            ..Default::default()
        })]

        /// The requester fast path of `poll` (and of `poll_one` and the
        /// full-error single path)
        /// gives exactly what decoding every CQE through the general path
        /// gives: the same completions, errors, consumer index, doorbell
        /// record and retired work, for runs across QPs, ring wraps, batch
        /// sizes, both CQE versions and every kind of corrupt CQE.
        #[test]
        fn poll_fast_path_equals_general_path(
            log in 2u8..5,
            sq_start in prop_oneof![Just(0u32), any::<u32>()],
            ci in prop_oneof![Just(0u32), any::<u32>()],
            sges in proptest::collection::vec(any::<u8>(), 1..40),
            cqes in proptest::collection::vec((any::<u8>(), any::<u8>(), prop_oneof![6 => Just(0u8), 1 => any::<u8>()], any::<u16>()), 1..60),
            polls in proptest::collection::vec(1usize..9, 1..40),
            v0 in any::<bool>(),
        ) {
            let (ua, ub, uc, ud) = (Uar::new(), Uar::new(), Uar::new(), Uar::new());
            let mut a = Setup::new(&ua, log, sq_start, ci, &sges, v0);
            let mut b = Setup::new(&ub, log, sq_start, ci, &sges, v0);
            // The full-error single path (`poll`'s one-slot path) on c,
            // the general path one CQE at a time on d.
            let mut c = Setup::new(&uc, log, sq_start, ci, &sges, v0);
            let mut d = Setup::new(&ud, log, sq_start, ci, &sges, v0);
            // `Cq::poll_one` on e.
            let ue = Uar::new();
            let mut e = Setup::new(&ue, log, sq_start, ci, &sges, v0);
            let entries = 1u32 << log;
            let dbr_off = crate::CqLayout::new(log).unwrap().dbr_offset;
            let mut written = ci;
            let mut next = cqes.iter();
            let mut cqegen = Gen { q: 0, cursor: [0; 2] };
            let mut we = Completion::default();
            for &want in &polls {
                // Keep the ring filled with CQEs the poll has not consumed.
                while written.wrapping_sub(a.cq().consumer_index()) < entries {
                    let Some(&spec) = next.next() else { break };
                    let img = cqegen.cqe(&a, written, entries, spec);
                    for s in [&a, &b, &c, &d, &e] {
                        s.write_cqe(written, &img);
                    }
                    written = written.wrapping_add(1);
                }
                let mut wa = [Completion::default(); 8];
                let mut wb = [Completion::default(); 8];
                let ra = a.cq.as_mut().unwrap().poll(&a.table, &mut wa[..want]);
                let rb = b.cq.as_mut().unwrap().poll_reference(&b.table, &mut wb[..want]);
                prop_assert_eq!(ra, rb);
                if let Ok(n) = ra {
                    prop_assert_eq!(&wa[..n], &wb[..n]);
                }
                prop_assert_eq!(a.cq().consumer_index(), b.cq().consumer_index());
                prop_assert_eq!(a.tails(), b.tails());
                for _ in 0..want {
                    let rc = c.cq.as_mut().unwrap().poll_one_full(&c.table);
                    let mut wd = [Completion::default(); 1];
                    let rd = d.cq.as_mut().unwrap().poll_reference(&d.table, &mut wd);
                    prop_assert_eq!(rc, rd.map(|n| (n == 1).then_some(wd[0])));
                    prop_assert_eq!(c.cq().consumer_index(), d.cq().consumer_index());
                    prop_assert_eq!(c.tails(), d.tails());
                    prop_assert_eq!(c.cq_mem.read64(c.dbr_off()).unwrap(), d.cq_mem.read64(d.dbr_off()).unwrap());
                    // The public single-CQE path.
                    let want_c = rd.map(|n| (n == 1).then_some(wd[0]));
                    let got = match e.cq.as_mut().unwrap().poll_one(&e.table, &mut we) {
                        Ok(true) => Ok(Some(we)),
                        Ok(false) => Ok(None),
                        Err(x) => Err(Error::from(x)),
                    };
                    prop_assert_eq!(got, want_c);
                    prop_assert_eq!(e.cq().consumer_index(), d.cq().consumer_index());
                    prop_assert_eq!(e.tails(), d.tails());
                    let dd = d.cq_mem.read64(dbr_off).unwrap();
                    prop_assert_eq!(e.cq_mem.read64(dbr_off).unwrap(), dd);
                }
            }
        }
    }

    #[test]
    fn doorbell_words_match_their_bitfields() {
        for ci in [0u32, 1, 0xff_ffff, 0x12_3456] {
            assert_eq!(CqSetCi::new().with_ci(ci).into_bits().to_raw(), ci.to_be());
        }
        let w = CqArmWord::new().with_sn(2).with_cmd(1).with_ci(0x345);
        assert_eq!(w.into_bits().get(), 2 << 28 | 1 << 24 | 0x345);
    }
}
