//! Queue pairs: the send queue (WQEBB ring, doorbells, BlueFlame) and the
//! receive queue, in one DMA region laid out by [`QpLayout`].

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use platform::{Be32, Be64, DmaRegion, Mmio, barrier};

use crate::av::AddressVector;
use crate::cq::RecvSide;
use crate::error::{
    ETH_LONG, ETH_NO_CSUM, ETH_NON_RAW, ETH_SHORT, ETH_TSO_HEADER, ETH_TSO_INLINE, ETH_TSO_LONG,
    ETH_TSO_NON_RAW, ETH_VLAN_NON_RAW, ETH_VLAN_SHORT, UD_MISSING, UD_NOT_ALLOWED,
};
use crate::mem::{Hdr, QpHdr, SqRing, check_region, hdr, sq_hdr};
use crate::rx::{ETH_MACS_LEN, VLAN_HLEN, VlanInsert};
use crate::sizing::{QpGeometry, QpLayout, RqGeometry, SqGeometry};
use crate::uar::{BfConfig, SqDoorbell};
use crate::wqe::{self, Opcode, fm_ce_se};
use crate::{Error, QpCompletions, SendError, SrqCompletions};
use platform::ring::{DoorbellRecord, HostTable, QueueMem, RegionInfo, Ring, WrCell};

/// Transport type of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc,
    /// Unreliable connected (`IBV_QPT_UC`).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
    /// Raw Ethernet packet QP / SQ (`IBV_QPT_RAW_PACKET`).
    RawPacket,
}

/// A scatter/gather entry (`struct ibv_sge`): a bus address (IOVA) inside a
/// registered memory region, its length and the region's lkey.
///
/// The fields are laid out (`repr(C)`) with the lkey before the length:
/// read as one little-endian 8-byte word, the pair is then `length << 32 |
/// lkey`, which one byte swap turns into the data segment's first 8 bytes
/// (be32 `byte_count`, be32 `lkey`). `struct ibv_sge`'s order (length
/// first) would need a rotate as well, on every posted SGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Sge {
    /// Bus address of the first byte.
    pub addr: u64,
    /// Local key of the memory region.
    pub lkey: u32,
    /// Length in bytes. Zero-length entries are skipped, as rdma-core does
    /// (a data segment byte count of 0 would mean 2 GiB to the device).
    pub length: u32,
}

// The layout the posts rely on: the lkey and the length as one 8-byte
// word, lkey in the low half.
const _: () = assert!(
    core::mem::offset_of!(Sge, lkey) == 8
        && core::mem::offset_of!(Sge, length) == 12
        && core::mem::size_of::<Sge>() == 16
);

/// `send_flags` of a work request (`IBV_SEND_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags(pub u8);

impl SendFlags {
    /// No flags: unsignaled, unfenced.
    pub const NONE: Self = Self(0);
    /// `IBV_SEND_FENCE`: wait for prior RDMA reads and atomics.
    pub const FENCE: Self = Self(1);
    /// `IBV_SEND_SIGNALED`: generate a completion.
    pub const SIGNALED: Self = Self(2);
    /// `IBV_SEND_SOLICITED`: solicited event at the responder.
    pub const SOLICITED: Self = Self(4);
    /// Initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`, which
    /// rdma-core applies after local invalidation).
    pub const SMALL_FENCE: Self = Self(8);
    /// `IBV_SEND_IP_CSUM` (raw packet QPs): L3 and L4 checksum offload.
    pub const IP_CSUM: Self = Self(16);

    /// Whether all flags of `other` are set.
    #[inline(always)]
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = Self;
    #[inline(always)]
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// The operation of a send work request (`ibv_wr_opcode` with its
/// operation-specific fields). Immediates are host-order values; they are
/// written big-endian (the bytes the responder's `imm_data` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm(u32),
    /// `IBV_WR_SEND_WITH_INV`: invalidate `rkey` at the responder (RC only).
    SendWithInv(u32),
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite {
        /// Remote bus address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm {
        /// Remote bus address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ` (RC only).
    RdmaRead {
        /// Remote bus address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` (RC only; 8-byte aligned remote address).
    AtomicCmpSwp {
        /// Remote bus address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value compared with the remote 8 bytes.
        compare: u64,
        /// Value stored when they are equal.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (RC only; 8-byte aligned remote address).
    AtomicFetchAdd {
        /// Remote bus address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
    /// `MLX5_OPCODE_NOP`: a WQE with only a control segment (completes like
    /// any other when signaled; useful to retire unsignaled work).
    Nop,
}

impl SendOp {
    /// The MLX5 opcode the operation is written with.
    pub(crate) fn opcode(&self) -> Opcode {
        match self {
            Self::Send => Opcode::Send,
            Self::SendWithImm(_) => Opcode::SendImm,
            Self::SendWithInv(_) => Opcode::SendInval,
            Self::RdmaWrite { .. } => Opcode::RdmaWrite,
            Self::RdmaWriteWithImm { .. } => Opcode::RdmaWriteImm,
            Self::RdmaRead { .. } => Opcode::RdmaRead,
            Self::AtomicCmpSwp { .. } => Opcode::AtomicCs,
            Self::AtomicFetchAdd { .. } => Opcode::AtomicFa,
            Self::Nop => Opcode::Nop,
        }
    }

    fn name(&self) -> &'static str {
        crate::error::op_name(self.opcode())
    }
}

/// Where the data of a send comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A gather list (data segments).
    Sgl(&'a [Sge]),
    /// Data copied into the WQE (`IBV_SEND_INLINE`); host bytes, since an
    /// SGE's address is a bus address here.
    Inline(&'a [u8]),
}

/// UD destination (`wr.ud`): address vector, remote QPN and Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest<'a> {
    /// The address handle's address vector.
    pub av: &'a AddressVector,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// `IBV_SEND_*` flags (inline is expressed by [`Payload::Inline`]).
    pub flags: SendFlags,
    /// Gather list or inline data.
    pub payload: Payload<'a>,
    /// UD only: the destination.
    pub ud: Option<UdDest<'a>>,
    /// Raw packet only: the headers copied into the Ethernet segment
    /// (at least the queue's minimum inline header size, 18 bytes on a
    /// ConnectX-4); the payload describes the rest of the frame.
    pub eth_headers: &'a [u8],
}

impl<'a> SendWr<'a> {
    /// A work request with an empty payload and no flags.
    pub const fn new(wr_id: u64, op: SendOp) -> Self {
        Self {
            wr_id,
            op,
            flags: SendFlags::NONE,
            payload: Payload::Sgl(&[]),
            ud: None,
            eth_headers: &[],
        }
    }

    /// Sets the gather list.
    pub const fn sgl(mut self, sgl: &'a [Sge]) -> Self {
        self.payload = Payload::Sgl(sgl);
        self
    }

    /// Sets inline data.
    pub const fn inline(mut self, data: &'a [u8]) -> Self {
        self.payload = Payload::Inline(data);
        self
    }

    /// Sets the flags.
    pub const fn flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Sets the UD destination.
    pub const fn ud(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }

    /// Sets the raw-packet inline headers.
    pub const fn eth_headers(mut self, headers: &'a [u8]) -> Self {
        self.eth_headers = headers;
        self
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// Scatter list (zero-length entries are skipped).
    pub sgl: &'a [Sge],
}

/// A batch of work requests that failed part way: the first `posted` were
/// posted (and rung), the one at index `posted` was rejected with `error`
/// before anything of it was written (rdma-core's `bad_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {posted} rejected ({posted} before it posted): {error}")]
pub struct PostError {
    /// Work requests posted before the bad one.
    pub posted: usize,
    /// Why the work request at index `posted` was rejected.
    pub error: Error,
}

impl PostError {
    /// Builds the work requests of a list on `queue` in order with `build`
    /// (its last argument is how many were built before it) until one is
    /// refused; `publish` then makes the built ones the device's (when
    /// there are any), and the refusal, if any, names how many that was.
    #[inline(always)]
    pub(crate) fn post_list<Q, W>(
        queue: &mut Q,
        wrs: &[W],
        mut build: impl FnMut(&mut Q, &W, u32) -> Result<(), Error>,
        publish: impl FnOnce(&mut Q, u32),
    ) -> Result<(), PostError> {
        let mut n = 0u32;
        let mut refused = None;
        for wr in wrs {
            if let Err(error) = build(queue, wr, n) {
                refused = Some(error);
                break;
            }
            n += 1;
        }
        if n > 0 {
            publish(queue, n);
        }
        match refused {
            None => Ok(()),
            Some(error) => Err(PostError {
                posted: n as usize,
                error,
            }),
        }
    }
}

/// Fixed configuration of a QP's data path, known once CREATE_QP succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Transport.
    pub qp_type: QpType,
    /// QP number (or SQ number of a raw-packet SQ), 24 bits.
    pub qpn: u32,
    /// Geometry from [`QpGeometry::new`] (the same the QPC was built from).
    pub geometry: QpGeometry,
    /// Atomic operations allowed (rdma-core `atomics_enabled`).
    pub atomics: bool,
    /// `sq_sig_all`: every WQE requests a CQE.
    pub sq_sig_all: bool,
    /// Raw packet QPs: minimum inline header bytes (`eth_min_inline_size`:
    /// 18 on a ConnectX-4, 0 when the vport's min inline mode is none).
    pub eth_min_inline: u16,
}

/// What a QP gives back when taken apart.
#[derive(Debug)]
pub struct QpParts<M> {
    /// The QP's DMA region (free it after DESTROY_QP).
    pub region: DmaRegion,
    /// The doorbell register window, if the QP had a send queue.
    pub uar: Option<M>,
}

impl<M> QpParts<M> {
    /// The parts of a QP whose views are all gone.
    fn give_back(mem: QueueMem, uar: Option<M>) -> Self {
        Self {
            region: crate::mem::into_region(mem),
            uar,
        }
    }
}

// Send queue header words (the first 64 bytes of the meta area, the
// header of the send queue's `SqRing`).
pub(crate) const META_SQ_TAIL: usize = 0;
pub(crate) const META_SQ_HEAD: usize = 1;
// QP header words (`QpHdr`, at `QP_HDR` from the doorbell record).
pub(crate) const META_RQ_TAIL: usize = 0;
pub(crate) const META_RQ_HEAD: usize = 1;
pub(crate) const META_HANDLES: usize = 2;
/// Where the QP header sits, from the doorbell record (the platform's view
/// counter is at + 8).
const QP_HDR: usize = 32;
pub(crate) const HANDLE_SQ: u32 = 1;
pub(crate) const HANDLE_RQ: u32 = 2;
/// The send queue's table, right after the header: one entry per WQEBB
/// slot, its `wr_id` and its `wqe_head` (the number of the work request
/// whose WQE starts in the slot, rdma-core's `sq.wqe_head`), so posting and
/// polling reach both through one address.
pub(crate) const META_SQ_TABLE: usize = crate::sizing::META_HDR;
// The send ring's header is exactly what the layout puts before the table.
const _: () = assert!(core::mem::size_of::<Hdr>() == META_SQ_TABLE);
/// One send-table entry: `wr_id`, `wqe_head`.
pub(crate) type SqEntry = WrCell;

/// Doorbell record words (`MLX5_RCV_DBR` 0, `MLX5_SND_DBR` 1).
const DBR_RCV: usize = 0;
const DBR_SND: usize = 1;
/// The bookkeeping starts 64 bytes after the doorbell record (checked when
/// a QP is made); the platform's view counter sits in between.
const CTL_META: usize = 64;

/// A send queue: builds WQEs into the ring and rings the doorbell.
///
/// Posting takes `&mut self`: one thread posts. Completions are retired by
/// the CQ through a [`QpCompletions`] handle, which may live on another
/// thread.
///
/// One send path, all validating the same way (rdma-core's
/// `mlx5_post_send` checks: queue space, QP type and opcode, SGE count,
/// inline length, WQE size, atomics, UD destination, Ethernet headers):
///
/// - [`post_send`](Self::post_send): a [`SendWr`] (`ibv_post_send`;
///   [`post_send_list`](Self::post_send_list) for a list);
/// - [`post_send_sge`](Self::post_send_sge): one work request with one
///   SGE, the arguments in registers and the two-word [`SendError`]; the
///   fast path is a handful of stores;
/// - [`batch`](Self::batch): a [`SendBatch`] with the same two methods,
///   rung once (the `ibv_wr_start` / `ibv_wr_*` / `ibv_wr_complete`
///   pattern).
#[derive(Debug)]
pub struct SendQueue<M: Mmio> {
    /// The WQEBBs and, per WQEBB slot, the send table entry (`wr_id`,
    /// `wqe_head`).
    buf: SqRing,
    dbr: DoorbellRecord,
    /// WQEBB producer counter (rdma-core `sq.cur_post`).
    cur_post: u32,
    /// WQEBBs up to this counter have been cleaned for the device (only
    /// used without coherent DMA, `M::DMA_CACHE_MAINTENANCE`).
    #[cfg(feature = "cache-maintenance")]
    cleaned: u32,
    /// The last tail read from the completion side plus `max_post`: the
    /// queue is full when the work-request counter reaches it (the counter
    /// never passes it, so equality is rdma-core's `mlx5_wq_overflow`).
    full_at: u32,
    /// WQEBBs - 1.
    mask: u32,
    /// `mask * 8`: the fast path keeps the slot times 8, which addresses
    /// both the WQE (64 bytes) and its bookkeeping entry (16 bytes) with
    /// an index scale.
    mask8: usize,
    /// `qpn << 8`, the control segment's `qpn_ds` without `ds`.
    qpn8: u32,
    /// By MLX5 opcode (those of [`sgl_op`]): the control segment's first 8
    /// bytes as one host-order word without the WQE index: the opcode
    /// (`opmod` 0) and `qpn_ds` with the `ds` of the fast path's WQE (3
    /// with a remote address, 2 without). The fast paths OR the index in
    /// and swap the word once (see [`ctrl0_image`]).
    ctrl_op: [u64; 17],
    /// Bit `opcode` set for every opcode the gather-list fast path may
    /// write: the opcodes this QP type allows when it is connected (no
    /// datagram or Ethernet segment) and has room for a data segment;
    /// 0 otherwise (everything goes through the general path).
    fast_ops: u32,
    /// `fm_ce_se` for the low four [`SendFlags`] bits, with `sq_sig_all`
    /// folded in.
    fm: [u8; 16],
    /// For the gather-list fast path, by [`SendFlags`] byte (one of the
    /// [`FM_TABLES`]): the memory image of the control segment's second 8
    /// bytes (signature, stream id, `fm_ce_se`, no immediate), or
    /// `FM_SLOW` where the fast path does not apply: `IBV_SEND_IP_CSUM`,
    /// and everything when the QP is not connected or has no room for a
    /// data segment.
    fm_batch: &'static [u64; 256],
    /// `fm_batch` for single posts rung on their own; all `FM_SLOW` when
    /// the queue copies single posts by BlueFlame (`prefer_bf`), so the
    /// fast single post never needs to ask.
    fm_single: &'static [u64; 256],
    /// 16-byte units in the ring - 1.
    unit_mask: usize,
    /// Ring bytes - 1.
    byte_mask: usize,
    max_post: u32,
    max_gs: u32,
    max_inline: u32,
    max_units: u32,
    qp_type: QpType,
    atomics: bool,
    eth_min_inline: u16,
    /// `IBV_SEND_IP_CSUM` allowed (rdma-core `MLX5_CSUM_SUPPORT_RAW_OVER_ETH`).
    ip_csum: bool,
    /// TSO: the largest header (`max_tso_header`; 0: no TSO) and payload
    /// (`max_tso`).
    tso: (u16, u32),
    db: SqDoorbell<M>,
}

/// Ethernet segment options of a raw packet send beyond the plain one
/// ([`SendQueue::post_send_vlan`], [`SendQueue::post_send_tso`]).
#[derive(Clone, Copy, Default)]
struct EthOpts {
    vlan: Option<VlanInsert>,
    /// TSO with this MSS.
    mss: Option<u16>,
}

/// What building one WQE left for the doorbell.
#[derive(Clone, Copy, Default)]
struct Built {
    /// First 8 bytes of the control segment (memory image).
    ctrl0: u64,
    /// Ring byte offset of the WQE.
    start: u32,
    /// Size in 16-byte units (at most 63).
    ds: u8,
    inline: bool,
}

impl core::fmt::Debug for Built {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "WQE at {:#x}, {} units", self.start, self.ds)
    }
}

/// A remote address segment's address and rkey, if the WQE has one.
type RemoteAddr = Option<(u64, u32)>;

/// The MLX5 opcode, immediate and remote address of the operations the
/// gather-list fast path writes; `None` for the others.
#[inline(always)]
fn sgl_op(op: SendOp) -> Option<(Opcode, u32, RemoteAddr)> {
    Some(match op {
        SendOp::Send => (Opcode::Send, 0, None),
        SendOp::SendWithImm(imm) => (Opcode::SendImm, imm, None),
        SendOp::SendWithInv(rkey) => (Opcode::SendInval, rkey, None),
        SendOp::RdmaWrite { remote_addr, rkey } => {
            (Opcode::RdmaWrite, 0, Some((remote_addr, rkey)))
        }
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (Opcode::RdmaWriteImm, imm, Some((remote_addr, rkey))),
        SendOp::RdmaRead { remote_addr, rkey } => (Opcode::RdmaRead, 0, Some((remote_addr, rkey))),
        _ => return None,
    })
}

/// The ring state the gather-list fast path needs, copied out of a
/// [`SendQueue`]: `cur` is the queue's `cur_post` until written back. A
/// [`SendBatch`] keeps it in registers while work requests are pushed
/// (the queue's fields would be read again after every store to the ring:
/// the compiler cannot tell the ring's memory from the queue's).
#[derive(Clone, Copy, Debug)]
struct Cursor {
    /// The queue's `fm_batch` and `fast_ops` (what [`SendQueue::sge_check`]
    /// reads).
    fm: &'static [u64; 256],
    fast_ops: u32,
    /// The queue's `ctrl_op` (a batch keeps the words its operations use
    /// on its own stack: no register, no pointer to the queue).
    ctrl_op: [u64; 17],
    /// `(WQEBBs - 1) * 8` (see [`SendQueue::mask8`]).
    mask8: usize,
    /// The queue's `cur_post`, widened: only its low 32 bits count (it is
    /// written back truncated, which is the `u32` counter's wrapping). A
    /// register-wide counter scales into an address with one `lea`.
    cur: usize,
}

impl Cursor {
    /// Writes the fast path's WQE (one WQEBB: control, remote address if
    /// any, one data segment) as work request `wr_num`. Everything is
    /// checked: [`SendQueue::sge_fast`] took it, the queue has room, and
    /// one data segment fits (the fast path is off when `max_gs` is 0).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn write_sge(
        &mut self,
        buf: &SqRing,
        wr_num: u32,
        wr_id: u64,
        opcode: Opcode,
        imm: u32,
        raddr: RemoteAddr,
        fm: u64,
        sge: Sge,
    ) -> Built {
        // The slot times 8 (the ring masks it), derived from `cur` where
        // it is used: a second counter kept along would take a register
        // of the batch loop.
        let cur = self.cur;
        let idx8 = cur << 3;
        let start = (idx8 & self.mask8) * 8;
        let ds = if raddr.is_some() { 3 } else { 2 };
        self.cur = cur.wrapping_add(1);
        // (Masked by the ring: the slot times 8 addresses the WQE and its
        // bookkeeping entry with one register.)
        // Bookkeeping and segments first, the control segment last: the
        // arguments are consumed early (fewer live registers); the device
        // reads nothing before the doorbell.
        let (wqe, e) = buf.slot8(idx8);
        e.wr_id.store(wr_id, Ordering::Relaxed);
        e.head.store(wr_num, Ordering::Relaxed);
        if let Some((remote_addr, rkey)) = raddr {
            let r = wqe::raddr_seg(remote_addr, rkey);
            wqe.w64(16, r[0]);
            wqe.w64(24, r[1]);
        }
        let data = wqe::data_seg(sge.length, sge.lkey, sge.addr);
        let d = 16 * (ds as usize - 1);
        wqe.w64(d, data[0]);
        wqe.w64(d + 8, data[1]);
        // The words of `wqe::ctrl_seg` (tested against it) from the
        // opcode's precomputed word (`ds` included).
        let ctrl0 = ctrl0_image(cur as u32, self.ctrl_op[opcode as usize]);
        wqe.w64(0, ctrl0);
        wqe.w64(8, fm | u64::from(imm).to_be());
        Built {
            ctrl0,
            start: start as u32,
            ds: ds as u8,
            inline: false,
        }
    }
}

/// The memory image of a control segment's first 8 bytes
/// (`opmod_idx_opcode` with `opmod` 0, then `qpn_ds`; the words of
/// `wqe::ctrl_seg`, tested against it) for WQEBB counter `cur`, from
/// `op_qpn_ds` = `opcode << 32 | qpn_ds` (`SendQueue::ctrl_op`): one
/// host-order word, swapped once.
#[inline(always)]
fn ctrl0_image(cur: u32, op_qpn_ds: u64) -> u64 {
    (u64::from(cur as u16) << 40 | op_qpn_ds).to_be()
}

/// The arguments of a gather-list fast-path operation other than `wr_id`
/// and the SGE, packed into three words so a cold call takes them in
/// registers: `[remote_addr, rkey | imm << 32, flags | opcode << 8 |
/// wr_num << 32]`.
#[inline(always)]
fn pack_sgl(
    wr_num: u32,
    opcode: Opcode,
    imm: u32,
    raddr: RemoteAddr,
    flags: SendFlags,
) -> [u64; 3] {
    let (ra, rkey) = raddr.unwrap_or((0, 0));
    [
        ra,
        u64::from(rkey) | u64::from(imm) << 32,
        u64::from(flags.0) | u64::from(opcode as u8) << 8 | u64::from(wr_num) << 32,
    ]
}

/// The work request [`pack_sgl`] packed: its number, operation and flags.
fn unpack_sgl(w: [u64; 3]) -> (u32, SendOp, SendFlags) {
    let (remote_addr, rkey, imm) = (w[0], w[1] as u32, (w[1] >> 32) as u32);
    let op = match Opcode::from_u8((w[2] >> 8) as u8) {
        Some(Opcode::SendImm) => SendOp::SendWithImm(imm),
        Some(Opcode::SendInval) => SendOp::SendWithInv(imm),
        Some(Opcode::RdmaWrite) => SendOp::RdmaWrite { remote_addr, rkey },
        Some(Opcode::RdmaWriteImm) => SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        },
        Some(Opcode::RdmaRead) => SendOp::RdmaRead { remote_addr, rkey },
        // Only `sgl_op` opcodes are packed.
        _ => SendOp::Send,
    };
    ((w[2] >> 32) as u32, op, SendFlags(w[2] as u8))
}

/// Whether the gather-list fast path takes operation `opcode` (one of
/// [`sgl_op`]'s) with `flags` and one SGE of `len` bytes, on a queue with
/// the `fm` table (`fm_batch` or `fm_single`) and `fast_ops`; gives the
/// control segment's second half without the immediate.
#[inline(always)]
fn sge_check_in(
    fm: &[u64; 256],
    fast_ops: u32,
    opcode: Opcode,
    flags: SendFlags,
    len: u32,
) -> Option<u64> {
    // Bits 5..7 of the flags mean nothing here, as on the general path
    // (the tables repeat every 32 entries).
    let fm = fm[usize::from(flags.0)];
    if fm == FM_SLOW || len == 0 {
        return None;
    }
    // What a connected QP may not post (RDMA READ and SEND_INV on UC).
    if matches!(opcode, Opcode::RdmaRead | Opcode::SendInval) && fast_ops >> (opcode as u8) & 1 == 0
    {
        return None;
    }
    Some(fm)
}

impl<M: Mmio> SendQueue<M> {
    /// Whether `op` may be posted on this QP type.
    #[inline(always)]
    fn op_allowed(&self, op: &SendOp) -> Result<(), Error> {
        let ok = match self.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                op,
                SendOp::Send
                    | SendOp::SendWithImm(_)
                    | SendOp::RdmaWrite { .. }
                    | SendOp::RdmaWriteWithImm { .. }
                    | SendOp::Nop
            ),
            QpType::Ud => matches!(op, SendOp::Send | SendOp::SendWithImm(_) | SendOp::Nop),
            QpType::RawPacket => matches!(op, SendOp::Send | SendOp::Nop),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::WrongOpcodeForQpType {
                op: op.name(),
                qp_type: self.qp_type,
            })
        }
    }

    /// Ring byte offset of 16-byte unit `k` of the WQE starting at byte
    /// `start` (wraps at the end of the ring).
    #[inline(always)]
    fn unit(&self, start: usize, k: usize) -> usize {
        if k < 4 {
            // The first WQEBB never wraps: a WQE starts on a WQEBB.
            start + 16 * k
        } else {
            (((start >> 4) + k) & self.unit_mask) << 4
        }
    }

    #[inline(always)]
    fn put(&self, start: usize, k: usize, seg: [u64; 2]) {
        if k < 4 {
            // The first WQEBB (a WQE starts on one): its block.
            let b = self.buf.block((start >> 6) as u32);
            b.w64(16 * k, seg[0]);
            b.w64(16 * k + 8, seg[1]);
        } else {
            let off = self.unit(start, k);
            self.buf.w64(off, seg[0]);
            self.buf.w64(off + 8, seg[1]);
        }
    }

    /// Copies `data` to the WQE at byte `pos` from its start, wrapping at the
    /// end of the ring; writes exactly `data.len()` bytes.
    ///
    /// Bytes up to the next 8-byte boundary go as one 4-byte store when
    /// they are 4 (inline data starts 4 bytes into a unit) and byte by byte
    /// otherwise; then whole 8-byte words; then the rest as 4-, 2- and
    /// 1-byte stores. No store straddles the end of the ring (it is a
    /// multiple of 64 bytes and every store is aligned to its size).
    #[inline(always)]
    fn copy_in(&self, start: usize, pos: usize, data: &[u8]) {
        if !self.buf.write_bytes(start + pos, data) {
            // Reaches the end of the ring: byte offsets, masked.
            let base = (start + pos) & self.byte_mask;
            self.copy_at(data, |i| (base + i) & self.byte_mask);
        }
    }

    /// [`copy_in`](Self::copy_in) with `at(i)` the ring offset of byte `i`.
    #[inline(always)]
    fn copy_at(&self, data: &[u8], at: impl Fn(usize) -> usize) {
        let mut i = 0;
        let mis = at(0) % 8;
        if mis != 0 {
            let head = (8 - mis).min(data.len());
            if head == 4 && mis == 4 {
                self.buf.w32(
                    at(0),
                    u32::from_ne_bytes([data[0], data[1], data[2], data[3]]),
                );
            } else {
                for (j, b) in data[..head].iter().enumerate() {
                    self.buf.w8(at(j), *b);
                }
            }
            i = head;
        }
        while let Some(w) = data.get(i..i + 8) {
            let w: [u8; 8] = match w.try_into() {
                Ok(w) => w,
                Err(_) => break,
            };
            self.buf.w64(at(i), u64::from_ne_bytes(w));
            i += 8;
        }
        let mut r = &data[i..];
        if r.len() >= 4 {
            self.buf
                .w32(at(i), u32::from_ne_bytes([r[0], r[1], r[2], r[3]]));
            i += 4;
            r = &r[4..];
        }
        if r.len() >= 2 {
            self.buf.w16(at(i), u16::from_ne_bytes([r[0], r[1]]));
            i += 2;
            r = &r[2..];
        }
        if let [b] = r {
            self.buf.w8(at(i), *b);
        }
    }

    /// Checks that work request number `wr` (the value `head` will have
    /// when the ones before it are rung) fits the queue.
    #[inline(always)]
    fn room(&mut self, wr: u32) -> Result<(), Error> {
        if wr == self.full_at {
            return self.refresh_tail(wr);
        }
        Ok(())
    }

    /// Re-reads the completion side's tail when the queue looks full.
    #[cold]
    #[inline(never)]
    fn refresh_tail(&mut self, wr: u32) -> Result<(), Error> {
        let tail = sq_hdr(&self.buf, META_SQ_TAIL).load(Ordering::Acquire);
        self.full_at = tail.wrapping_add(self.max_post);
        let outstanding = wr.wrapping_sub(tail);
        if outstanding >= self.max_post {
            return Err(Error::QueueFull {
                outstanding,
                max_post: self.max_post,
            });
        }
        Ok(())
    }

    /// Validates `wr` and writes its WQE as work request number `wr_num`.
    /// Nothing is written when it fails.
    ///
    /// The fast path covers connected QPs posting sends and RDMA with a
    /// gather list; everything else (UD, raw Ethernet, atomics, inline, NOP)
    /// goes through [`build_general`](Self::build_general). Both validate
    /// the same way.
    #[inline(always)]
    fn build(&mut self, wr: &SendWr<'_>, wr_num: u32) -> Result<Built, Error> {
        if let (QpType::Ud, Some(ud)) = (self.qp_type, &wr.ud) {
            return self.build_ud(wr, wr_num, ud);
        }
        let Some((opcode, imm, raddr)) = sgl_op(wr.op) else {
            return self.build_general(wr, wr_num);
        };
        if self.fast_ops >> (opcode as u8) & 1 == 0
            || wr.ud.is_some()
            || !wr.eth_headers.is_empty()
            || wr.flags.0 & !0xf != 0
        {
            return self.build_general(wr, wr_num);
        }
        let sgl = match wr.payload {
            Payload::Sgl(sgl) => sgl,
            Payload::Inline(data) => {
                return self.build_inline(wr, wr_num, opcode, imm, raddr, data);
            }
        };
        self.room(wr_num)?;
        if sgl.len() > self.max_gs as usize {
            return Err(too_many_sges(sgl.len(), self.max_gs));
        }
        // Sizing guarantees ctrl + raddr + max_gs data segments fit the
        // largest WQE, so no size check is needed here.
        let idx = self.cur_post & self.mask;
        let start = (idx as usize) << 6;
        let mut k = 1usize;
        if let Some((remote_addr, rkey)) = raddr {
            self.put(start, 1, wqe::raddr_seg(remote_addr, rkey));
            k = 2;
        }
        for sge in sgl {
            if sge.length != 0 {
                self.put(start, k, wqe::data_seg(sge.length, sge.lkey, sge.addr));
                k += 1;
            }
        }
        let fm = self.fm[usize::from(wr.flags.0 & 0xf)];
        Ok(self.finish(
            wr.wr_id, wr_num, idx, start, opcode, k as u32, fm, imm, false,
        ))
    }

    /// The fast path of a UD SEND (with or without immediate) with a
    /// gather list. Anything else (other operations, flags beyond the
    /// four of the control segment, Ethernet headers, inline data, too many
    /// SGEs) goes to [`build_general`](Self::build_general), which reports
    /// it; what it writes is exactly what `build_general` writes.
    #[inline(always)]
    fn build_ud(&mut self, wr: &SendWr<'_>, wr_num: u32, ud: &UdDest<'_>) -> Result<Built, Error> {
        let (opcode, imm) = match wr.op {
            SendOp::Send => (Opcode::Send, 0),
            SendOp::SendWithImm(imm) => (Opcode::SendImm, imm),
            _ => return self.build_general(wr, wr_num),
        };
        let Payload::Sgl(sgl) = wr.payload else {
            return self.build_general(wr, wr_num);
        };
        // Control segment, datagram segment (3 units), the data segments.
        if wr.flags.0 & !0xf != 0
            || !wr.eth_headers.is_empty()
            || sgl.len() > self.max_gs as usize
            || 4 + sgl.len() > self.max_units as usize
        {
            return self.build_general(wr, wr_num);
        }
        self.room(wr_num)?;
        let idx = self.cur_post & self.mask;
        let start = (idx as usize) << 6;
        let w = ud.av.datagram_words(ud.remote_qpn, ud.remote_qkey);
        // Units 1..4 of the first WQEBB: never wraps.
        for (i, x) in w.iter().enumerate() {
            self.buf.w64(start + 16 + 8 * i, *x);
        }
        let mut k = 4usize;
        for sge in sgl {
            if sge.length != 0 {
                self.put(start, k, wqe::data_seg(sge.length, sge.lkey, sge.addr));
                k += 1;
            }
        }
        let fm = self.fm[usize::from(wr.flags.0 & 0xf)];
        Ok(self.finish(
            wr.wr_id, wr_num, idx, start, opcode, k as u32, fm, imm, false,
        ))
    }

    /// The fast path of an inline send or RDMA write on a connected QP
    /// ([`build`](Self::build) checked the operation, the flags and that
    /// there is no UD or Ethernet part). Anything it does not take (RDMA
    /// READ, data longer than the queue's inline limit or than the largest
    /// WQE) goes to [`build_general`](Self::build_general), which reports
    /// it; what it writes is exactly what `build_general` writes.
    #[inline(always)]
    fn build_inline(
        &mut self,
        wr: &SendWr<'_>,
        wr_num: u32,
        opcode: Opcode,
        imm: u32,
        raddr: RemoteAddr,
        data: &[u8],
    ) -> Result<Built, Error> {
        let k0 = 1 + usize::from(raddr.is_some());
        if opcode == Opcode::RdmaRead
            || data.len() > self.max_inline as usize
            || k0 + wqe::inline_seg_units(data.len()) > self.max_units as usize
        {
            return self.build_general(wr, wr_num);
        }
        self.room(wr_num)?;
        let idx = self.cur_post & self.mask;
        let start = (idx as usize) << 6;
        if let Some((remote_addr, rkey)) = raddr {
            self.put(start, 1, wqe::raddr_seg(remote_addr, rkey));
        }
        let mut k = k0;
        let inline = !data.is_empty();
        if inline {
            let off = self.unit(start, k);
            let hdr = wqe::inline_header(data.len() as u32).to_raw().to_ne_bytes();
            if let [d0, d1, d2, d3, rest @ ..] = data {
                // The header and the first four bytes as one 8-byte store;
                // the rest starts 8-byte aligned.
                let w = [hdr[0], hdr[1], hdr[2], hdr[3], *d0, *d1, *d2, *d3];
                self.buf.w64(off, u64::from_ne_bytes(w));
                self.copy_in(start, 16 * k + 8, rest);
            } else {
                self.buf.w32(off, u32::from_ne_bytes(hdr));
                self.copy_in(start, 16 * k + 4, data);
            }
            k += wqe::inline_seg_units(data.len());
        }
        let fm = self.fm[usize::from(wr.flags.0 & 0xf)];
        Ok(self.finish(
            wr.wr_id, wr_num, idx, start, opcode, k as u32, fm, imm, inline,
        ))
    }

    /// Whether the gather-list fast path takes `op` with `flags` and one
    /// SGE of `len` bytes: a send or RDMA operation this connected QP
    /// allows, no checksum flag, a non-empty SGE. Gives the MLX5 opcode,
    /// the immediate, the remote address and the control segment's second
    /// half without the immediate.
    #[inline(always)]
    fn sge_fast(
        &self,
        op: SendOp,
        flags: SendFlags,
        len: u32,
    ) -> Option<(Opcode, u32, RemoteAddr, u64)> {
        let (opcode, imm, raddr) = sgl_op(op)?;
        let fm = self.sge_check(opcode, flags, len)?;
        Some((opcode, imm, raddr, fm))
    }

    /// [`sge_fast`](Self::sge_fast) for an operation of [`sgl_op`].
    #[inline(always)]
    fn sge_check(&self, opcode: Opcode, flags: SendFlags, len: u32) -> Option<u64> {
        sge_check_in(self.fm_batch, self.fast_ops, opcode, flags, len)
    }

    /// [`sge_check`](Self::sge_check) of a single post rung on its own
    /// (its table also sends every post of a queue that copies single
    /// posts by BlueFlame to the general path).
    #[inline(always)]
    fn sge_check_single(&self, opcode: Opcode, flags: SendFlags, len: u32) -> Option<u64> {
        sge_check_in(self.fm_single, self.fast_ops, opcode, flags, len)
    }

    /// The ring state the fast path needs, copied out of the queue.
    #[inline(always)]
    fn cursor(&self) -> Cursor {
        Cursor {
            fm: self.fm_batch,
            fast_ops: self.fast_ops,
            ctrl_op: self.ctrl_op,
            mask8: self.mask8,
            cur: self.cur_post as usize,
        }
    }

    /// [`Cursor::write_sge`] on the queue's own state.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn write_sge(
        &mut self,
        wr_num: u32,
        wr_id: u64,
        opcode: Opcode,
        imm: u32,
        raddr: RemoteAddr,
        fm: u64,
        sge: Sge,
    ) -> Built {
        let mut c = self.cursor();
        let b = c.write_sge(&self.buf, wr_num, wr_id, opcode, imm, raddr, fm, sge);
        self.cur_post = c.cur as u32;
        b
    }

    /// Validates and writes one work request with one SGE as work request
    /// `wr_num`: the fast path when it applies, else the general one with
    /// the same arguments (so every check and error is the same as for
    /// [`post`](Self::post)).
    fn build_sge(
        &mut self,
        wr_num: u32,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<Built, Error> {
        if let Some((opcode, imm, raddr, fm)) = self.sge_fast(op, flags, sge.length) {
            self.room(wr_num)?;
            return Ok(self.write_sge(wr_num, wr_id, opcode, imm, raddr, fm, sge));
        }
        let sgl = [sge];
        let wr = SendWr::new(wr_id, op).sgl(&sgl).flags(flags);
        self.build_general(&wr, wr_num)
    }

    /// [`build_sge`](Self::build_sge) with the compact error.
    #[inline(always)]
    fn build_sge_c(
        &mut self,
        wr_num: u32,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<Built, SendError> {
        self.build_sge(wr_num, wr_id, op, flags, sge)
            .map_err(SendError::from_sge_path)
    }

    /// [`build_sge`](Self::build_sge) of a gather-list operation the fast
    /// path did not take (or a full-looking queue), from [`pack_sgl`]'s
    /// words. The WQE is written at `cur_post` as it was before the call
    /// (a one-SGE WQE is never inline).
    ///
    /// `extern "C"`: it cannot unwind (a panic aborts), so a batch calling
    /// it needs no landing pad and stays in registers.
    #[cold]
    #[inline(never)]
    #[allow(improper_ctypes_definitions)]
    extern "C" fn build_sgl_cold(
        &mut self,
        wr_id: u64,
        w: [u64; 3],
        sge_addr: u64,
        sge_len_lkey: u64,
    ) -> Result<(), SendError> {
        let (wr_num, op, flags) = unpack_sgl(w);
        let sge = Sge {
            addr: sge_addr,
            length: sge_len_lkey as u32,
            lkey: (sge_len_lkey >> 32) as u32,
        };
        self.build_sge_c(wr_num, wr_id, op, flags, sge)?;
        Ok(())
    }

    /// [`build_sgl_cold`](Self::build_sgl_cold) when the queue looks full
    /// (a separate function, so the fast path's checks stay branches).
    #[cold]
    #[inline(never)]
    #[allow(improper_ctypes_definitions)]
    extern "C" fn build_sgl_full(
        &mut self,
        wr_id: u64,
        w: [u64; 3],
        sge_addr: u64,
        sge_len_lkey: u64,
    ) -> Result<(), SendError> {
        self.build_sgl_cold(wr_id, w, sge_addr, sge_len_lkey)
    }

    /// [`build_sge`](Self::build_sge) of an operation without a fast path
    /// (atomics, NOP) in a batch, as work request `wr_num`; written at
    /// `cur_post` as it was before the call, like
    /// [`build_sgl_cold`](Self::build_sgl_cold).
    #[cold]
    #[inline(never)]
    #[allow(improper_ctypes_definitions)]
    extern "C" fn build_op_cold(
        &mut self,
        wr_num: u32,
        wr_id: u64,
        op: &SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<(), SendError> {
        self.build_sge_c(wr_num, wr_id, *op, flags, sge)?;
        Ok(())
    }

    /// [`post_send_sge`](Self::post_send_sge) of a gather-list operation its fast path
    /// did not take: builds (general path, same checks) and rings, by
    /// BlueFlame where the queue wants it. The arguments fit registers, so
    /// the fast path leaves with a tail call (`extern "C"`, the caller's
    /// calling convention, which a sibling call needs; it cannot unwind, a
    /// panic aborts).
    #[cold]
    #[inline(never)]
    #[allow(improper_ctypes_definitions)]
    extern "C" fn post_sgl_cold(
        &mut self,
        wr_id: u64,
        w0: u64,
        w1: u64,
        w2: u64,
        sge: &Sge,
    ) -> Result<(), SendError> {
        let (wr_num, op, flags) = unpack_sgl([w0, w1, w2]);
        let b = self.build_sge_c(wr_num, wr_id, op, flags, *sge)?;
        self.ring(1, b);
        Ok(())
    }

    /// [`post_sgl_cold`](Self::post_sgl_cold) when the queue looks full
    /// (a separate function, so the fast path's checks stay branches).
    #[cold]
    #[inline(never)]
    #[allow(improper_ctypes_definitions)]
    extern "C" fn post_sgl_full(
        &mut self,
        wr_id: u64,
        w0: u64,
        w1: u64,
        w2: u64,
        sge: &Sge,
    ) -> Result<(), SendError> {
        self.post_sgl_cold(wr_id, w0, w1, w2, sge)
    }

    /// [`post_send_sge`](Self::post_send_sge) of an operation without a fast path
    /// (atomics, NOP).
    #[cold]
    #[inline(never)]
    fn post_sge_slow(
        &mut self,
        wr_id: u64,
        op: &SendOp,
        flags: SendFlags,
        sge: &Sge,
    ) -> Result<(), SendError> {
        let b = self.build_sge_c(self.head(), wr_id, *op, flags, *sge)?;
        self.ring(1, b);
        Ok(())
    }

    /// The end of a [`SendBatch`] (see its `Drop`): takes the cursor `cur`
    /// back and rings the doorbell for the work requests before `next`, if
    /// any, the last of which is the one the cold path wrote last when
    /// `cur` is still `cold_end` (at ring offset `cold_last`), else the
    /// fast path's single WQEBB before `cur`.
    ///
    /// `extern "C"`: it cannot unwind (a panic aborts), so a batch needs
    /// no landing pad.
    #[inline(never)]
    extern "C" fn end_batch(&mut self, cur: u32, next: u32, cold_end: u32, cold_last: u32) {
        self.cur_post = cur;
        let head = self.head();
        let n = next.wrapping_sub(head);
        if n == 0 {
            return;
        }
        let last = if cur == cold_end {
            cold_last
        } else {
            (((cur.wrapping_sub(1) & self.mask) as usize) << 6) as u32
        };
        if n == 1 {
            // Perhaps by BlueFlame.
            return self.ring_batch(1, last);
        }
        // Several: an 8-byte doorbell with the last WQE's first control
        // word, read back from the ring.
        let start = (last & 0x7fff_ffff) as usize & self.byte_mask;
        let b = Built {
            ctrl0: self.buf.r64(start),
            start: start as u32,
            ds: 0,
            inline: false,
        };
        self.publish(head.wrapping_add(n), cur, b, false);
    }

    /// [`ring`](Self::ring) of a batch's doorbell.
    ///
    /// `last` is the last WQE's ring offset with bit 31 set if it carries
    /// inline data; its first control word and size are read back from the
    /// ring.
    #[cold]
    #[inline(never)]
    fn ring_batch(&mut self, n: u32, last: u32) {
        let start = (last & 0x7fff_ffff) as usize & self.byte_mask;
        let ctrl0 = self.buf.r64(start);
        // `ds` is the low 6 bits of byte 7 of the control segment.
        let ds = ctrl0.to_ne_bytes()[7] & 0x3f;
        let b = Built {
            ctrl0,
            start: start as u32,
            ds,
            inline: last >> 31 != 0,
        };
        self.ring(n, b);
    }

    /// Writes the control segment and the bookkeeping of a built WQE.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn finish(
        &mut self,
        wr_id: u64,
        wr_num: u32,
        idx: u32,
        start: usize,
        opcode: Opcode,
        ds: u32,
        fm: u8,
        imm: u32,
        inline: bool,
    ) -> Built {
        // Same words as `wqe::ctrl_seg` (tested), with qpn << 8 precomputed.
        let w0 = ((u64::from(self.cur_post & 0xffff) << 8 | u64::from(opcode as u8)) << 32)
            | u64::from(self.qpn8 | ds);
        let ctrl0 = w0.to_be();
        let ctrl1 = (u64::from(fm) << 32 | u64::from(imm)).to_be();
        let (wqe, e) = self.buf.slot(idx);
        wqe.w64(0, ctrl0);
        wqe.w64(8, ctrl1);
        e.wr_id.store(wr_id, Ordering::Relaxed);
        e.head.store(wr_num, Ordering::Relaxed);
        self.cur_post = self.cur_post.wrapping_add(ds.div_ceil(4));
        Built {
            ctrl0,
            start: start as u32,
            ds: ds as u8,
            inline,
        }
    }

    /// Everything the fast path does not handle.
    #[inline(never)]
    fn build_general(&mut self, wr: &SendWr<'_>, wr_num: u32) -> Result<Built, Error> {
        self.build_general_with(wr, wr_num, EthOpts::default())
    }

    /// [`build_general`](Self::build_general), with the Ethernet segment
    /// options `eo`: VLAN insertion (see [`VlanInsert`]) and TSO.
    #[inline(always)]
    fn build_general_with(
        &mut self,
        wr: &SendWr<'_>,
        wr_num: u32,
        eo: EthOpts,
    ) -> Result<Built, Error> {
        let vlan = eo.vlan;
        self.op_allowed(&wr.op)?;
        if eo.mss.is_some() {
            self.tso_check(wr)?;
        }

        // Queue space (rdma-core `mlx5_wq_overflow`).
        self.room(wr_num)?;

        // Transport segments: (units, which).
        let (mut units, imm, opcode) = match wr.op {
            SendOp::Send => (0, 0, Opcode::Send),
            SendOp::SendWithImm(imm) => (0, imm, Opcode::SendImm),
            SendOp::SendWithInv(rkey) => (0, rkey, Opcode::SendInval),
            SendOp::RdmaWrite { .. } => (1, 0, Opcode::RdmaWrite),
            SendOp::RdmaWriteWithImm { imm, .. } => (1, imm, Opcode::RdmaWriteImm),
            SendOp::RdmaRead { .. } => (1, 0, Opcode::RdmaRead),
            SendOp::AtomicCmpSwp { .. } => (2, 0, Opcode::AtomicCs),
            SendOp::AtomicFetchAdd { .. } => (2, 0, Opcode::AtomicFa),
            SendOp::Nop => (0, 0, Opcode::Nop),
        };
        let is_atomic = matches!(
            wr.op,
            SendOp::AtomicCmpSwp { .. } | SendOp::AtomicFetchAdd { .. }
        );
        if is_atomic {
            if !self.atomics {
                return Err(Error::AtomicsDisabled);
            }
            let (SendOp::AtomicCmpSwp { remote_addr, .. }
            | SendOp::AtomicFetchAdd { remote_addr, .. }) = wr.op
            else {
                unreachable!()
            };
            if remote_addr % 8 != 0 {
                return Err(Error::AtomicMisaligned(remote_addr));
            }
            match wr.payload {
                Payload::Sgl([sge]) if sge.length >= 8 => {}
                Payload::Sgl(s) => {
                    return Err(Error::AtomicLength {
                        sges: s.len(),
                        len: s.first().map_or(0, |s| s.length),
                    });
                }
                Payload::Inline(d) => {
                    return Err(Error::AtomicLength {
                        sges: 0,
                        len: d.len() as u32,
                    });
                }
            }
        }
        let nop = matches!(wr.op, SendOp::Nop);
        match (self.qp_type, &wr.ud) {
            (QpType::Ud, None) if !nop => {
                return Err(Error::UdDestination(UD_MISSING));
            }
            (QpType::Ud, Some(_)) if !nop => units += 3,
            (_, Some(_)) => return Err(Error::UdDestination(UD_NOT_ALLOWED)),
            _ => {}
        }
        let mut cs = 0;
        let eth = self.qp_type == QpType::RawPacket && !nop;
        // Inline header bytes: the caller's, plus an inserted VLAN tag.
        let mut inl = wr.eth_headers.len();
        if vlan.is_some() {
            if !eth {
                return Err(Error::EthSegment(ETH_VLAN_NON_RAW));
            }
            if inl > 0 {
                if inl < wqe::ETH_L2_MIN_HEADER_SIZE {
                    return Err(Error::EthSegment(ETH_VLAN_SHORT));
                }
                inl += VLAN_HLEN;
            }
        }
        if eth {
            // (TSO headers were checked against their own bounds.)
            if inl < self.eth_min_inline as usize && eo.mss.is_none() {
                return Err(Error::EthSegment(ETH_SHORT));
            }
            if inl > u16::MAX as usize {
                return Err(Error::EthSegment(ETH_LONG));
            }
            units += wqe::eth_seg_units(inl) as u32;
            if wr.flags.contains(SendFlags::IP_CSUM) {
                if !self.ip_csum {
                    return Err(Error::EthSegment(ETH_NO_CSUM));
                }
                cs = wqe::cs_flags::L3_CSUM | wqe::cs_flags::L4_CSUM;
            }
        } else if !wr.eth_headers.is_empty() || wr.flags.contains(SendFlags::IP_CSUM) {
            return Err(Error::EthSegment(ETH_NON_RAW));
        }
        if matches!(wr.op, SendOp::Nop) && !matches!(wr.payload, Payload::Sgl([])) {
            return Err(Error::TooManySges { got: 1, max: 0 });
        }
        // Payload bound (upper bound: every SGE present).
        let payload_units = match wr.payload {
            Payload::Sgl(s) => {
                if s.len() > self.max_gs as usize {
                    return Err(Error::TooManySges {
                        got: s.len(),
                        max: self.max_gs as usize,
                    });
                }
                s.len() as u32
            }
            Payload::Inline(d) => {
                if d.len() > self.max_inline as usize {
                    return Err(Error::InlineTooLong {
                        got: d.len(),
                        max: self.max_inline as usize,
                    });
                }
                wqe::inline_seg_units(d.len()) as u32
            }
        };
        if 1 + units + payload_units > self.max_units {
            return Err(Error::WqeTooLarge {
                wqebbs: (1 + units + payload_units).div_ceil(4),
                max: self.max_units / 4,
            });
        }

        // ---- everything checked: write ----
        let idx = self.cur_post & self.mask;
        let start = (idx as usize) << 6;
        let mut k = 1usize;
        match wr.op {
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            }
            | SendOp::RdmaRead { remote_addr, rkey } => {
                self.put(start, 1, wqe::raddr_seg(remote_addr, rkey));
                k = 2;
            }
            SendOp::AtomicCmpSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                self.put(start, 1, wqe::raddr_seg(remote_addr, rkey));
                self.put(start, 2, wqe::atomic_seg(swap, compare));
                k = 3;
            }
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                self.put(start, 1, wqe::raddr_seg(remote_addr, rkey));
                // rdma-core leaves the compare field of fetch-and-add alone.
                self.buf.w64(self.unit(start, 2), Be64::new(add).to_raw());
                k = 3;
            }
            _ => {}
        }
        if let Some(ud) = &wr.ud {
            let w = ud.av.datagram_words(ud.remote_qpn, ud.remote_qkey);
            // Units 1..4 of the first WQEBB: never wraps.
            for (i, x) in w.iter().enumerate() {
                self.buf.w64(start + 16 + 8 * i, *x);
            }
            k = 4;
        }
        if eth {
            let n = wr.eth_headers.len();
            let head = wqe::eth_seg_head(cs, eo.mss.unwrap_or(0), inl as u16);
            // Bytes 0..14 of the Ethernet segment (unit k, never wraps
            // mid-unit), then the headers from byte 14.
            let off = self.unit(start, k);
            let mut w0 = [0u8; 8];
            w0.copy_from_slice(&head[0..8]);
            self.buf.w64(off, u64::from_ne_bytes(w0));
            self.buf.w32(off + 8, 0);
            match vlan {
                // Hardware insertion: bytes 12..16 are `insert.type` and
                // `insert.vlan_tci` (no inline headers).
                Some(v) if n == 0 => {
                    self.buf.w16(off + 12, v.insert_type().to_be());
                    self.buf.w16(off + 14, v.tci.to_be());
                }
                // The tag goes into the inline headers after the MACs.
                Some(v) => {
                    self.buf
                        .w16(off + 12, u16::from_ne_bytes([head[12], head[13]]));
                    let (macs, rest) = wr.eth_headers.split_at(ETH_MACS_LEN);
                    self.copy_in(start, 16 * k + 14, macs);
                    self.copy_in(start, 16 * k + 14 + ETH_MACS_LEN, &v.tag_bytes());
                    self.copy_in(start, 16 * k + 14 + ETH_MACS_LEN + VLAN_HLEN, rest);
                }
                None => {
                    self.buf
                        .w16(off + 12, u16::from_ne_bytes([head[12], head[13]]));
                    if n < 2 {
                        // The two inline_hdr_start bytes are part of the segment.
                        self.buf.w16(off + 14, 0);
                    }
                    self.copy_in(start, 16 * k + 14, wr.eth_headers);
                }
            }
            // rdma-core clears the 32 bytes of `struct mlx5_wqe_eth_seg`
            // first: the padding after fewer than 18 inline header bytes
            // is zero.
            // (Bytes 14..16 hold the TCI of a hardware VLAN insertion.)
            let used = if vlan.is_some() && n == 0 {
                16
            } else {
                14 + inl
            };
            let end = 16 * wqe::eth_seg_units(inl);
            if used < end && end <= 32 {
                const ZERO: [u8; 16] = [0; 16];
                self.copy_in(start, 16 * k + used, &ZERO[..end - used]);
            }
            k += wqe::eth_seg_units(inl);
        }
        let mut inline = false;
        match wr.payload {
            Payload::Sgl(sgl) => {
                for sge in sgl {
                    if sge.length == 0 {
                        continue;
                    }
                    let len = if is_atomic {
                        wqe::ATOMIC_SIZE
                    } else {
                        sge.length
                    };
                    self.put(start, k, wqe::data_seg(len, sge.lkey, sge.addr));
                    k += 1;
                }
            }
            Payload::Inline(data) => {
                if !data.is_empty() {
                    let off = self.unit(start, k);
                    self.buf
                        .w32(off, wqe::inline_header(data.len() as u32).to_raw());
                    self.copy_in(start, 16 * k + 4, data);
                    k += wqe::inline_seg_units(data.len());
                    inline = true;
                }
            }
        }
        let fm = self.fm[usize::from(wr.flags.0 & 0xf)];
        let opcode = if eo.mss.is_some() {
            Opcode::Tso
        } else {
            opcode
        };
        Ok(self.finish(
            wr.wr_id, wr_num, idx, start, opcode, k as u32, fm, imm, inline,
        ))
    }

    /// What a TSO send must be (rdma-core `set_tso_eth_seg` and the data
    /// loop of `mlx5_post_send` for `IBV_WR_TSO`): a raw packet SEND with
    /// a gather list, headers of 14 bytes up to the queue's largest TSO
    /// header, a payload of at most the largest TSO payload.
    #[cold]
    fn tso_check(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        if self.qp_type != QpType::RawPacket || !matches!(wr.op, SendOp::Send) {
            return Err(Error::EthSegment(ETH_TSO_NON_RAW));
        }
        let (max_hdr, max_payload) = self.tso;
        let n = wr.eth_headers.len();
        if n < wqe::ETH_L2_MIN_HEADER_SIZE || n > usize::from(max_hdr) {
            return Err(Error::EthSegment(ETH_TSO_HEADER));
        }
        let Payload::Sgl(sgl) = wr.payload else {
            return Err(Error::EthSegment(ETH_TSO_INLINE));
        };
        let total: u64 = sgl.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(max_payload) {
            return Err(Error::EthSegment(ETH_TSO_LONG));
        }
        Ok(())
    }

    /// Publishes `n` work requests and rings the doorbell for the last
    /// WQE (rdma-core `post_send_db`).
    #[inline(always)]
    fn ring(&mut self, n: u32, last: Built) {
        let bf = n == 1
            && (self.db.bf_always || (last.inline && self.db.blueflame))
            && last.ds > 1
            && u32::from(last.ds) <= self.db.buf_size() / 16;
        let head = self.head().wrapping_add(n);
        self.publish(head, self.cur_post, last, bf);
    }

    /// Makes `head` the published work-request counter and `cur_post` the
    /// doorbell record, then rings: an 8-byte doorbell with `last`'s first
    /// control word, or a BlueFlame copy of `last` when `bf`.
    ///
    /// Takes the queue's fields as arguments so a caller can read them
    /// before its WQE stores: the compiler reads a field again after an
    /// atomic store (the bookkeeping's) or a barrier (a memory clobber).
    #[inline(always)]
    fn publish(&mut self, head: u32, cur_post: u32, last: Built, bf: bool) {
        sq_hdr(&self.buf, META_SQ_HEAD).store(head, Ordering::Release);
        #[cfg(feature = "cache-maintenance")]
        self.clean_wqes(cur_post);
        // WQEs before the doorbell record.
        barrier::udma_to_device_barrier();
        self.dbr
            .write32(DBR_SND, Be32::new(cur_post & 0xffff).to_raw());
        #[cfg(feature = "cache-maintenance")]
        self.clean_dbr();
        // Doorbell record before the (write-combined) doorbell.
        barrier::mmio_wc_start();
        if bf {
            self.bf_copy(last.start as usize, u32::from(last.ds));
        } else {
            self.db.ring(last.ctrl0);
        }
        barrier::mmio_flush_writes();
        self.db.flip();
    }

    /// Without coherent DMA (`M::DMA_CACHE_MAINTENANCE`; otherwise this is
    /// nothing at all): cleans the WQEBBs written since the last doorbell,
    /// up to `cur_post`, before the doorbell record.
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn clean_wqes(&mut self, cur_post: u32) {
        if M::DMA_CACHE_MAINTENANCE {
            let count = self.mask + 1;
            let n = cur_post.wrapping_sub(self.cleaned).min(count);
            let first = cur_post.wrapping_sub(n) & self.mask;
            let to_end = (count - first).min(n);
            let base = self.buf.host_addr();
            let mmio = self.db.bf.mmio();
            if to_end > 0 {
                mmio.dma_clean(base + first as usize * 64, to_end as usize * 64);
            }
            if n > to_end {
                mmio.dma_clean(base, (n - to_end) as usize * 64);
            }
            self.cleaned = cur_post;
        }
    }

    /// Without coherent DMA: cleans the doorbell record before the
    /// doorbell (nothing at all otherwise).
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn clean_dbr(&self) {
        if M::DMA_CACHE_MAINTENANCE {
            self.db.bf.mmio().dma_clean(self.dbr.host_addr(), 8);
        }
    }

    /// Copies the WQE to the BlueFlame register, 64 bytes at a time, wrapping
    /// at the end of the ring.
    #[inline(always)]
    fn bf_copy(&self, start: usize, ds: u32) {
        let blocks = (ds as usize).div_ceil(4);
        // `ring` only copies WQEs of at most `buf_size` bytes: never
        // refused.
        let _ = self.db.bf.copy_blocks(blocks, |b| {
            let src = self.buf.block(((start >> 6) + b) as u32);
            core::array::from_fn(|i| Be64::from_raw(src.r64(8 * i)))
        });
    }

    /// Posts one work request and rings the doorbell (`ibv_post_send` with a
    /// one-element list). A rejected request writes nothing.
    #[inline(always)]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), Error> {
        let b = self.build(wr, self.head())?;
        self.ring(1, b);
        Ok(())
    }

    /// Whether a raw packet send may ask for checksum offload
    /// (`IBV_SEND_IP_CSUM`). On by default; the driver turns it off for a
    /// device without `IBV_DEVICE_RAW_IP_CSUM` or a port that is not
    /// Ethernet, and such sends are then refused with
    /// [`Error::EthSegment`] (rdma-core's `EINVAL` when the QP lacks
    /// `MLX5_CSUM_SUPPORT_RAW_OVER_ETH`).
    pub fn set_ip_csum_offload(&mut self, on: bool) {
        self.ip_csum = on;
    }

    /// [`post_send`](Self::post_send) of a raw packet send with VLAN
    /// insertion: the tag goes into the inline headers after the MAC
    /// addresses, or, when `wr` has no inline headers (min inline mode
    /// none), the device inserts it (see [`VlanInsert`]). Refused with
    /// [`Error::EthSegment`] on other QPs, for a NOP, and when the inline
    /// headers are shorter than an Ethernet header. (rdma-core's mlx5
    /// provider has no VLAN insertion; this is Linux `mlx5e`'s encoding.)
    pub fn post_send_vlan(&mut self, wr: &SendWr<'_>, vlan: VlanInsert) -> Result<(), Error> {
        let eo = EthOpts {
            vlan: Some(vlan),
            mss: None,
        };
        let b = self.build_general_with(wr, self.head(), eo)?;
        self.ring(1, b);
        Ok(())
    }

    /// The TSO limits of a raw packet send queue: the largest header
    /// (`max_tso_header` of the QP's creation, which the geometry must
    /// have room for) and the largest payload (the device's `max_tso`).
    /// Both 0 (the default): TSO refused.
    pub fn set_tso(&mut self, max_header: u16, max_payload: u32) {
        self.tso = (max_header, max_payload);
    }

    /// A TSO send (`IBV_WR_TSO`): `wr.eth_headers` is the header the
    /// device replicates in front of each segment of `mss` payload bytes
    /// (opcode `MLX5_OPCODE_TSO`, the Ethernet segment's `mss`, the
    /// header inline there, wrapping at the queue's end), the gather list
    /// the payload. Refused with [`Error::EthSegment`] on other QPs, for
    /// other operations, an inline payload, a header shorter than 14 bytes
    /// or longer than [`set_tso`](Self::set_tso)'s, or a payload longer
    /// than its limit.
    pub fn post_send_tso(&mut self, wr: &SendWr<'_>, mss: u16) -> Result<(), Error> {
        let eo = EthOpts {
            vlan: None,
            mss: Some(mss),
        };
        let b = self.build_general_with(wr, self.head(), eo)?;
        self.ring(1, b);
        Ok(())
    }

    /// Posts one work request with exactly one SGE and rings the doorbell:
    /// `post_send(&SendWr::new(wr_id, op).sgl(&[sge]).flags(flags))` with
    /// the arguments in registers. Sends and RDMA operations on connected
    /// QPs take the fast path; any other operation, QP type or a
    /// zero-length SGE is handled (and validated) exactly as
    /// [`post_send`](Self::post_send) does.
    ///
    /// The error is the compact [`SendError`] (16 bytes: a `Result<(),
    /// SendError>` is returned in registers, which matters when the
    /// caller's own function returns it); `Error::from` of it is the error
    /// `post_send` returns for the same work request, and `?` converts it.
    #[inline(always)]
    pub fn post_send_sge(
        &mut self,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<(), SendError> {
        self.sge_post(wr_id, op, flags, sge)
    }

    /// [`post_send_sge`](Self::post_send_sge) with the error converted on
    /// the cold path that returns it (see `SendBatch::sge_push`).
    #[inline(always)]
    fn sge_post<E: From<SendError>>(
        &mut self,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<(), E> {
        let Some((opcode, imm, raddr)) = sgl_op(op) else {
            return Ok(self.post_sge_slow(wr_id, &op, flags, &sge)?);
        };
        let head = self.head();
        // Each check leaves to its own cold call (its arguments fit
        // registers), which keeps them plain branches.
        if head == self.full_at {
            let [w0, w1, w2] = pack_sgl(head, opcode, imm, raddr, flags);
            return Ok(self.post_sgl_full(wr_id, w0, w1, w2, &sge)?);
        }
        let Some(fm) = self.sge_check_single(opcode, flags, sge.length) else {
            let [w0, w1, w2] = pack_sgl(head, opcode, imm, raddr, flags);
            return Ok(self.post_sgl_cold(wr_id, w0, w1, w2, &sge)?);
        };
        self.post_fast(wr_id, opcode, imm, raddr, fm, sge);
        Ok(())
    }

    /// The single post's fast path after its checks: writes the WQE of
    /// [`Cursor::write_sge`] and its bookkeeping, publishes it and rings
    /// an 8-byte doorbell (`fm_single` sends every post of a queue that
    /// wants BlueFlame copies to the general path).
    ///
    /// The order is chosen for register pressure: the bookkeeping and the
    /// head first (the head's register is then free), then each argument
    /// is stored as soon as it can be; the doorbell record is written from
    /// the queue's fields read again after the barrier.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn post_fast(
        &mut self,
        wr_id: u64,
        opcode: Opcode,
        imm: u32,
        raddr: RemoteAddr,
        fm: u64,
        sge: Sge,
    ) {
        let cur = self.cur_post;
        let (wqe, e) = self.buf.slot(cur);
        e.wr_id.store(wr_id, Ordering::Relaxed);
        // (Read again, not passed from the caller's full check: a value
        // live across the checks costs `post_send_sge` + `?` into the full
        // `Error` a register and 3 instructions, for 1 saved here.)
        let head_a = sq_hdr(&self.buf, META_SQ_HEAD);
        let head = head_a.load(Ordering::Relaxed);
        e.head.store(head, Ordering::Relaxed);
        // The completion side may retire the work request from here on
        // (release: after its bookkeeping). No CQE can name it before the
        // doorbell; publishing it before its WQE is written frees the
        // register.
        head_a.store(head.wrapping_add(1), Ordering::Release);
        wqe.w64(8, fm | u64::from(imm).to_be());
        let ds = if let Some((remote_addr, rkey)) = raddr {
            let r = wqe::raddr_seg(remote_addr, rkey);
            wqe.w64(16, r[0]);
            wqe.w64(24, r[1]);
            3
        } else {
            2
        };
        let data = wqe::data_seg(sge.length, sge.lkey, sge.addr);
        wqe.w64(16 * (ds - 1), data[0]);
        wqe.w64(16 * (ds - 1) + 8, data[1]);
        // As in `Cursor::write_sge`.
        let ctrl0 = ctrl0_image(cur, self.ctrl_op[opcode as usize]);
        wqe.w64(0, ctrl0);
        let cur_post = cur.wrapping_add(1);
        self.cur_post = cur_post;
        #[cfg(feature = "cache-maintenance")]
        self.clean_wqes(cur_post);
        // `publish` without the head (done) and BlueFlame.
        barrier::udma_to_device_barrier();
        // (The queue's fields are read again after the barrier, a memory
        // clobber: no register holds them across it.)
        self.dbr
            .write32(DBR_SND, Be32::new(self.cur_post & 0xffff).to_raw());
        #[cfg(feature = "cache-maintenance")]
        self.clean_dbr();
        barrier::mmio_wc_start();
        self.db.ring(ctrl0);
        barrier::mmio_flush_writes();
        self.db.flip();
    }

    /// Posts a list of work requests with one doorbell (`ibv_post_send`).
    /// On a rejected request, the ones before it are posted and rung and the
    /// error names its index.
    pub fn post_send_list(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let head = self.head();
        let mut last = None;
        let mut n = 0u32;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            match self.build(wr, head.wrapping_add(n)) {
                Ok(b) => {
                    last = Some(b);
                    n += 1;
                }
                Err(error) => {
                    result = Err(PostError { posted: i, error });
                    break;
                }
            }
        }
        if let Some(b) = last {
            self.ring(n, b);
        }
        result
    }

    /// Starts a batch: work requests pushed into it are written at once and
    /// rung with one doorbell when the batch is rung or dropped (the
    /// `ibv_wr_start` / `ibv_wr_complete` pattern).
    #[inline(always)]
    pub fn batch(&mut self) -> SendBatch<'_, M> {
        let c = self.cursor();
        SendBatch {
            c,
            next: self.head(),
            full_at: self.full_at,
            ring: self.buf.clone(),
            sq: self,
            cold_end: c.cur as u32,
            cold_last: 0,
        }
    }

    /// Work requests posted and not yet retired by a completion.
    pub fn outstanding(&self) -> u32 {
        let tail = sq_hdr(&self.buf, META_SQ_TAIL).load(Ordering::Acquire);
        self.head().wrapping_sub(tail)
    }

    /// The WQEBB producer counter (`sq.cur_post`; its low 16 bits are the
    /// doorbell record value and the next WQE's `wqe_index`).
    pub fn cur_post(&self) -> u32 {
        self.cur_post
    }

    /// Work requests posted so far (`sq.head`).
    ///
    /// Kept only in the bookkeeping, where the completion side reads it
    /// (this thread is its only writer).
    #[inline(always)]
    pub fn head(&self) -> u32 {
        sq_hdr(&self.buf, META_SQ_HEAD).load(Ordering::Relaxed)
    }

    /// The BlueFlame half the next doorbell goes to (0 or `buf_size`).
    pub fn bf_offset(&self) -> usize {
        self.db.bf.buffer_offset()
    }

    /// The queue's `max_post`.
    pub fn max_post(&self) -> u32 {
        self.max_post
    }

    /// The queue's `max_inline_data`.
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline
    }

    /// The queue's `max_gs`.
    pub fn max_gs(&self) -> u32 {
        self.max_gs
    }
}

/// `TooManySges`, built out of line.
#[cold]
#[inline(never)]
fn too_many_sges(got: usize, max: u32) -> Error {
    Error::TooManySges {
        got,
        max: max as usize,
    }
}

/// Work requests written but not yet rung; see [`SendQueue::batch`].
///
/// Every method validates like the queue's and writes nothing for a
/// rejected request; the batch stays usable. The doorbell rings once, for
/// everything pushed, at [`ring`](Self::ring) or when the batch is dropped
/// (so `?` on a push error still rings the requests before it).
#[derive(Debug)]
pub struct SendBatch<'q, M: Mmio> {
    sq: &'q mut SendQueue<M>,
    /// The queue's ring, a counted view of its own: the batch's fast path
    /// keeps its base addresses and mask in registers (reached through
    /// `sq`, they would be read again after every store to the ring).
    ring: SqRing,
    /// The queue's ring state while pushing; `c.cur` is the queue's
    /// `cur_post` (written back before anything else uses the queue).
    c: Cursor,
    /// The number the next work request gets (`sq.head` + pushed).
    next: u32,
    /// The queue's `full_at`.
    full_at: u32,
    /// `c.cur` after the last WQE a cold path wrote (the batch's start
    /// while there is none), and that WQE's ring byte offset with bit 31
    /// set if it carries inline data. When the batch is rung and `c.cur`
    /// is still `cold_end`, that WQE is the last one; otherwise the fast
    /// path wrote the last one, a single WQEBB just before `c.cur`. (A
    /// batch cannot move `c.cur` by 2^32.) The doorbell reads the last
    /// WQE's first control word and size back from the ring; the fast path
    /// records nothing.
    cold_end: u32,
    cold_last: u32,
}

impl<M: Mmio> SendBatch<'_, M> {
    /// Runs `f` on the queue with the cursor written back, and takes the
    /// cursor again afterwards (a general push or a tail refresh may have
    /// moved it).
    #[inline(always)]
    fn with_sq<T>(&mut self, f: impl FnOnce(&mut SendQueue<M>, u32) -> T) -> T {
        self.sq.cur_post = self.c.cur as u32;
        let r = f(self.sq, self.next);
        self.c.cur = self.sq.cur_post as usize;
        self.full_at = self.sq.full_at;
        r
    }

    /// Records a WQE written by a general path (`b`).
    #[inline(always)]
    fn pushed(&mut self, b: Built) {
        self.next = self.next.wrapping_add(1);
        self.cold_end = self.c.cur as u32;
        self.cold_last = b.start | u32::from(b.inline) << 31;
    }

    /// Runs a cold build of a one-SGE work request, which writes its WQE
    /// at the queue's `cur_post` (never inline), and records it.
    #[inline(always)]
    fn pushed_cold(
        &mut self,
        f: impl FnOnce(&mut SendQueue<M>, u32) -> Result<(), SendError>,
    ) -> Result<(), SendError> {
        let start = ((self.c.cur << 3) & self.c.mask8) as u32 * 8;
        self.with_sq(f)?;
        self.next = self.next.wrapping_add(1);
        self.cold_end = self.c.cur as u32;
        self.cold_last = start;
        Ok(())
    }

    /// Validates and writes one work request (see
    /// [`SendQueue::post_send`]).
    #[inline(always)]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), Error> {
        let b = self.with_sq(|sq, next| sq.build(wr, next))?;
        self.pushed(b);
        Ok(())
    }

    /// Validates and writes one work request with exactly one SGE (see
    /// [`SendQueue::post_send_sge`]; the `ibv_wr_*` + `ibv_wr_set_sge`
    /// pattern).
    #[inline(always)]
    pub fn post_send_sge(
        &mut self,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<(), SendError> {
        self.sge_push(wr_id, op, flags, sge)
    }

    /// [`post_send_sge`](Self::post_send_sge) with the error converted where it arises
    /// (on a cold path), not after the paths join: the compiler then sees
    /// that the fast path always succeeds, whatever the error type.
    #[inline(always)]
    fn sge_push<E: From<SendError>>(
        &mut self,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        sge: Sge,
    ) -> Result<(), E> {
        // Each check leaves to its own cold call, which keeps them plain
        // branches. The arguments go by value (a reference would keep the
        // SGE in memory on the fast path too). A cold call's error leaves
        // at once, its success joins the fast path's: the compiler then
        // sees that the fast path always succeeds.
        'cold: {
            let Some((opcode, imm, raddr)) = sgl_op(op) else {
                self.pushed_cold(|sq, next| sq.build_op_cold(next, wr_id, &op, flags, sge))?;
                break 'cold;
            };
            let wr = self.next;
            if wr == self.full_at {
                let len_lkey = u64::from(sge.length) | u64::from(sge.lkey) << 32;
                let w = pack_sgl(wr, opcode, imm, raddr, flags);
                self.pushed_cold(|sq, _| sq.build_sgl_full(wr_id, w, sge.addr, len_lkey))?;
                break 'cold;
            }
            let Some(fm) = sge_check_in(self.c.fm, self.c.fast_ops, opcode, flags, sge.length)
            else {
                let len_lkey = u64::from(sge.length) | u64::from(sge.lkey) << 32;
                let w = pack_sgl(wr, opcode, imm, raddr, flags);
                self.pushed_cold(|sq, _| sq.build_sgl_cold(wr_id, w, sge.addr, len_lkey))?;
                break 'cold;
            };
            self.c
                .write_sge(&self.ring, wr, wr_id, opcode, imm, raddr, fm, sge);
            self.next = wr.wrapping_add(1);
        }
        Ok(())
    }

    /// Work requests in the batch.
    pub fn len(&self) -> usize {
        self.next.wrapping_sub(self.sq.head()) as usize
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.next == self.sq.head()
    }

    /// Rings the doorbell for everything pushed (nothing if empty).
    #[inline(always)]
    pub fn ring(self) {
        // Dropping rings.
    }
}

impl<M: Mmio> Drop for SendBatch<'_, M> {
    /// Writes the cursor back and rings for everything pushed.
    ///
    /// One call with the batch's state by value: the drop stays small
    /// enough to be inlined everywhere, on a caller's unwinding path too
    /// (a `?` or an `unwrap` in the caller's loop), so the batch never
    /// needs to live in memory and its fields stay in registers while work
    /// requests are pushed.
    #[inline(always)]
    fn drop(&mut self) {
        self.sq
            .end_batch(self.c.cur as u32, self.next, self.cold_end, self.cold_last);
    }
}

/// A receive queue: data-segment WQEs in a ring of `wqe_cnt` strides; the
/// doorbell record word 0 carries the 16-bit producer counter.
#[derive(Debug)]
pub struct RecvQueue {
    buf: Ring,
    hdr: HostTable<QpHdr>,
    dbr: DoorbellRecord,
    /// `wr_id` per WQE.
    wrid: HostTable<AtomicU64>,
    /// Bytes posted per WQE.
    len: HostTable<AtomicU32>,
    mask: u32,
    shift: u8,
    max_gs: u32,
    /// `16 * max_gs`: the bytes of a WQE's data segments (a field of its
    /// own, read after the segment loop: a value kept from before it
    /// would hold a register through the loop).
    seg_bytes: usize,
    max_post: u32,
    head: u32,
    tail_cache: u32,
    dbr_enabled: bool,
}

impl RecvQueue {
    #[inline(always)]
    fn build(&mut self, wr: &RecvWr<'_>, nreq: u32) -> Result<(), Error> {
        let outstanding = self.head.wrapping_add(nreq).wrapping_sub(self.tail_cache);
        if outstanding >= self.max_post {
            self.tail_cache = hdr(&self.hdr, META_RQ_TAIL).load(Ordering::Acquire);
            let outstanding = self.head.wrapping_add(nreq).wrapping_sub(self.tail_cache);
            if outstanding >= self.max_post {
                return Err(Error::QueueFull {
                    outstanding,
                    max_post: self.max_post,
                });
            }
        }
        if wr.sgl.len() > self.max_gs as usize {
            return Err(Error::TooManySges {
                got: wr.sgl.len(),
                max: self.max_gs as usize,
            });
        }
        let idx = self.head.wrapping_add(nreq) & self.mask;
        let base = (idx as usize) << self.shift;
        // The next segment's offset (one value live in the loop, not a
        // count and the base).
        let mut off = base;
        let mut total: u64 = 0;
        for sge in wr.sgl {
            if sge.length == 0 {
                continue;
            }
            let seg = wqe::data_seg(sge.length, sge.lkey, sge.addr);
            self.buf.w64(off, seg[0]);
            self.buf.w64(off + 8, seg[1]);
            total += u64::from(sge.length);
            off += 16;
        }
        if off - base < self.seg_bytes {
            let seg = wqe::data_seg_end();
            self.buf.w64(off, seg[0]);
            self.buf.w64(off + 8, seg[1]);
        }
        self.wrid.get(idx).store(wr.wr_id, Ordering::Relaxed);
        self.len
            .get(idx)
            .store(total.min(u64::from(u32::MAX)) as u32, Ordering::Relaxed);
        Ok(())
    }

    #[inline(always)]
    fn publish(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        hdr(&self.hdr, META_RQ_HEAD).store(self.head, Ordering::Release);
        barrier::udma_to_device_barrier();
        if self.dbr_enabled {
            self.dbr
                .write32(DBR_RCV, Be32::new(self.head & 0xffff).to_raw());
        }
    }

    /// Posts one receive work request and updates the doorbell record
    /// (`ibv_post_recv` with a one-element list).
    #[inline(always)]
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), Error> {
        self.build(wr, 0)?;
        self.publish(1);
        Ok(())
    }

    /// Posts a list with one doorbell-record update (`ibv_post_recv`); on a
    /// rejected request, the ones before it are posted.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        PostError::post_list(self, wrs, |q, wr, n| q.build(wr, n), |q, n| q.publish(n))
    }

    /// [`post_recv`](Self::post_recv) for a system without coherent DMA
    /// (`C::DMA_CACHE_MAINTENANCE`; otherwise the same as `post_recv`):
    /// cleans the WQE through `mmio`'s [`dma_clean`](Mmio::dma_clean), then
    /// writes the doorbell record (the RQ's doorbell) and cleans it, so
    /// the device cannot see the record before the WQE.
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    pub fn post_recv_synced<C: Mmio>(&mut self, wr: &RecvWr<'_>, mmio: &C) -> Result<(), Error> {
        self.build(wr, 0)?;
        self.publish_synced(1, mmio);
        Ok(())
    }

    /// [`post_recv_list`](Self::post_recv_list) for a system without
    /// coherent DMA: the posted WQEs are cleaned (one range, two at the
    /// ring's wrap), then the doorbell record is written and cleaned.
    #[cfg(feature = "cache-maintenance")]
    pub fn post_recv_list_synced<C: Mmio>(
        &mut self,
        wrs: &[RecvWr<'_>],
        mmio: &C,
    ) -> Result<(), PostError> {
        PostError::post_list(
            self,
            wrs,
            |q, wr, n| q.build(wr, n),
            |q, n| q.publish_synced(n, mmio),
        )
    }

    /// `publish` with the cleans: the `n` WQEs from `head`, then the record.
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn publish_synced<C: Mmio>(&mut self, n: u32, mmio: &C) {
        if C::DMA_CACHE_MAINTENANCE {
            let count = self.mask + 1;
            let n = n.min(count);
            let first = self.head & self.mask;
            let to_end = (count - first).min(n);
            let stride = 1usize << self.shift;
            let base = self.buf.host_addr();
            mmio.dma_clean(base + first as usize * stride, to_end as usize * stride);
            if n > to_end {
                mmio.dma_clean(base, (n - to_end) as usize * stride);
            }
        }
        self.publish(n);
        if self.dbr_enabled {
            self.clean_dbr(mmio);
        }
    }

    /// Without coherent DMA: cleans the doorbell record (nothing at all
    /// otherwise).
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn clean_dbr<C: Mmio>(&self, mmio: &C) {
        if C::DMA_CACHE_MAINTENANCE {
            mmio.dma_clean(self.dbr.host_addr(), 8);
        }
    }

    /// [`set_doorbell_record_enabled`](Self::set_doorbell_record_enabled)
    /// for a system without coherent DMA: enabling writes the record and
    /// cleans it.
    #[cfg(feature = "cache-maintenance")]
    pub fn set_doorbell_record_enabled_synced<C: Mmio>(&mut self, enabled: bool, mmio: &C) {
        self.set_doorbell_record_enabled(enabled);
        if enabled {
            self.clean_dbr(mmio);
        }
    }

    /// Raw packet QPs must not update the receive doorbell record before the
    /// QP reaches RTR (rdma-core `mlx5_post_recv`). The driver disables it at
    /// creation and enables it after INIT2RTR, which writes the current
    /// counter.
    pub fn set_doorbell_record_enabled(&mut self, enabled: bool) {
        self.dbr_enabled = enabled;
        if enabled {
            barrier::udma_to_device_barrier();
            self.dbr
                .write32(DBR_RCV, Be32::new(self.head & 0xffff).to_raw());
        }
    }

    /// Work requests posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        let tail = hdr(&self.hdr, META_RQ_TAIL).load(Ordering::Acquire);
        self.head.wrapping_sub(tail)
    }

    /// Work requests posted so far (`rq.head`).
    pub fn head(&self) -> u32 {
        self.head
    }

    /// The queue's `max_gs`.
    pub fn max_gs(&self) -> u32 {
        self.max_gs
    }
}

/// A queue pair's data path: its DMA region (rings, doorbell record,
/// bookkeeping), send queue and receive queue.
#[derive(Debug)]
pub struct Qp<M: Mmio> {
    mem: QueueMem,
    hdr: HostTable<QpHdr>,
    /// The send ring and table, shared with the send side's completion
    /// handle.
    sq_table: Option<SqRing>,
    layout: QpLayout,
    qpn: u32,
    /// The transport (a raw packet QP's completion handles know it).
    qp_type: QpType,
    sq: Option<SendQueue<M>>,
    rq: Option<RecvQueue>,
    /// The doorbell register window of a QP without a send queue, kept
    /// for the receive side's cache maintenance ([`rq_synced`](Self::rq_synced)).
    #[cfg(feature = "cache-maintenance")]
    spare_uar: Option<M>,
}

impl<M: Mmio> Qp<M> {
    /// Takes ownership of the QP's DMA region (laid out as
    /// `cfg.geometry.layout`, 64-byte aligned, the rings zeroed or stale)
    /// and of the doorbell register window `uar` with its BlueFlame
    /// configuration (required when the QP has a send queue).
    ///
    /// `start_counters` sets the initial producer counters (`sq.cur_post` =
    /// `sq.head`, `rq.head`) — 0 for a new QP; other values reproduce a
    /// queue state (tests, golden vectors).
    ///
    /// On error, everything is handed back.
    pub fn new(
        region: DmaRegion,
        uar: Option<(M, BfConfig)>,
        cfg: &QpConfig,
    ) -> Result<Self, (Error, QpParts<M>)> {
        Self::with_counters(region, uar, cfg, 0, 0)
    }

    /// [`new`](Self::new) with the send (WQEBB and WR) counter starting at
    /// `sq_start` and the receive counter at `rq_start`.
    pub fn with_counters(
        region: DmaRegion,
        uar: Option<(M, BfConfig)>,
        cfg: &QpConfig,
        sq_start: u32,
        rq_start: u32,
    ) -> Result<Self, (Error, QpParts<M>)> {
        let layout = cfg.geometry.layout;
        if let Err(e) = check_region(&region, layout.total_bytes) {
            return Err((
                e,
                QpParts {
                    region,
                    uar: uar.map(|u| u.0),
                },
            ));
        }
        let (uar, bf) = match uar {
            Some((m, b)) => (Some(m), Some(b)),
            None => (None, None),
        };
        if layout.meta_offset != layout.dbr_offset + CTL_META {
            return Err((
                Error::InvalidGeometry(
                    "QP layout: the bookkeeping must start 64 bytes after the doorbell record",
                ),
                QpParts { region, uar },
            ));
        }
        if cfg.qpn >= 1 << 24 {
            return Err((
                Error::InvalidGeometry("QPN exceeds 24 bits"),
                QpParts { region, uar },
            ));
        }
        // Device part: the rings and the doorbell record; the platform's
        // view counter right after the record; the bookkeeping from
        // `meta_offset` on.
        let mut mem = match QueueMem::new(region, layout.dbr_offset + 8) {
            Ok(m) => m,
            Err((e, region)) => return Err((e.into(), QpParts { region, uar })),
        };
        let views = (|| -> Result<_, Error> {
            let hdr = mem.table::<QpHdr>(layout.dbr_offset + QP_HDR, 1)?;
            let dbr = mem.doorbell_record(layout.dbr_offset)?;
            let sq_table = match &cfg.geometry.sq {
                Some(g) => Some(mem.slot_ring::<SqEntry, Hdr>(
                    layout.sq_offset,
                    // The header, then the send table at META_SQ_TABLE.
                    layout.meta_offset,
                    g.wqe_cnt as usize,
                )?),
                None => None,
            };
            // Fresh bookkeeping: counters equal, no handles.
            if let Some(t) = &sq_table {
                let h = t.header();
                h[META_SQ_TAIL].store(sq_start, Ordering::Relaxed);
                h[META_SQ_HEAD].store(sq_start, Ordering::Relaxed);
            }
            let h = hdr.first();
            h[META_RQ_TAIL].store(rq_start, Ordering::Relaxed);
            h[META_RQ_HEAD].store(rq_start, Ordering::Relaxed);
            h[META_HANDLES].store(0, Ordering::Release);
            let rq = match &cfg.geometry.rq {
                Some(g) => Some(new_rq(&mut mem, &layout, g, &hdr, &dbr, rq_start, cfg)?),
                None => None,
            };
            Ok((hdr, dbr, sq_table, rq))
        })();
        let (hdr, dbr, sq_table, rq) = match views {
            Ok(x) => x,
            Err(e) => return Err((e, QpParts::give_back(mem, uar))),
        };
        #[cfg(feature = "cache-maintenance")]
        let mut spare_uar = None;
        let sq = match (&cfg.geometry.sq, uar, &sq_table) {
            (Some(g), Some(mmio), Some(table)) => {
                let db = match SqDoorbell::new(mmio, bf.expect("bf config comes with the uar")) {
                    Ok(d) => d,
                    Err((e, mmio)) => {
                        drop((hdr, dbr, sq_table, rq));
                        return Err((e, QpParts::give_back(mem, Some(mmio))));
                    }
                };
                match new_sq(g, table, dbr, sq_start, cfg, db) {
                    Ok(sq) => Some(sq),
                    Err((e, db)) => {
                        drop((hdr, sq_table, rq));
                        return Err((e, QpParts::give_back(mem, Some(db.bf.into_inner()))));
                    }
                }
            }
            (Some(_), None, _) => {
                drop((hdr, dbr, sq_table, rq));
                return Err((
                    Error::InvalidGeometry("a send queue needs a UAR"),
                    QpParts::give_back(mem, None),
                ));
            }
            (_, uar, _) => {
                // No send queue: the window is only needed for the
                // receive side's cache maintenance.
                #[cfg(feature = "cache-maintenance")]
                {
                    spare_uar = uar;
                }
                #[cfg(not(feature = "cache-maintenance"))]
                drop(uar);
                drop(dbr);
                None
            }
        };
        let qp = Self {
            mem,
            hdr,
            sq_table,
            layout,
            qpn: cfg.qpn,
            qp_type: cfg.qp_type,
            sq,
            rq,
            #[cfg(feature = "cache-maintenance")]
            spare_uar,
        };
        #[cfg(feature = "cache-maintenance")]
        qp.clean_initialised();
        Ok(qp)
    }

    /// The send queue.
    pub fn sq(&mut self) -> Result<&mut SendQueue<M>, Error> {
        self.sq.as_mut().ok_or(Error::NoSuchQueue("send queue"))
    }

    /// The receive queue.
    pub fn rq(&mut self) -> Result<&mut RecvQueue, Error> {
        self.rq.as_mut().ok_or(Error::NoSuchQueue("receive queue"))
    }

    /// The receive queue with the register window whose
    /// [`dma_clean`](Mmio::dma_clean) its `_synced` posts go through (the
    /// send queue's, or the one given to a QP without a send queue);
    /// [`Error::NoSuchQueue`] without a receive queue or a window.
    #[cfg(feature = "cache-maintenance")]
    pub fn rq_synced(&mut self) -> Result<(&mut RecvQueue, &M), Error> {
        let rq = self
            .rq
            .as_mut()
            .ok_or(Error::NoSuchQueue("receive queue"))?;
        let mmio = match (&self.sq, &self.spare_uar) {
            (Some(sq), _) => sq.db.bf.mmio(),
            (None, Some(m)) => m,
            (None, None) => {
                return Err(Error::NoSuchQueue(
                    "register window for the receive queue's cache maintenance",
                ));
            }
        };
        Ok((rq, mmio))
    }

    /// Without coherent DMA (`M::DMA_CACHE_MAINTENANCE`; otherwise nothing
    /// at all): cleans the doorbell record `new` wrote (the only QP memory
    /// it initialises for the device; the rings are the device's to read
    /// only after a doorbell), so CREATE_QP finds the initial counters.
    #[cfg(feature = "cache-maintenance")]
    fn clean_initialised(&self) {
        if !M::DMA_CACHE_MAINTENANCE {
            return;
        }
        let mmio = match (&self.sq, &self.spare_uar) {
            (Some(sq), _) => sq.db.bf.mmio(),
            (None, Some(m)) => m,
            (None, None) => return,
        };
        let dbr = match (&self.sq, &self.rq) {
            (Some(sq), _) => &sq.dbr,
            (None, Some(rq)) => &rq.dbr,
            (None, None) => return,
        };
        mmio.dma_clean(dbr.host_addr(), 8);
    }

    /// Both queues at once (e.g. to post sends and receives from two
    /// threads in a scope).
    pub fn queues(&mut self) -> (Option<&mut SendQueue<M>>, Option<&mut RecvQueue>) {
        (self.sq.as_mut(), self.rq.as_mut())
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The layout of the DMA region.
    pub fn layout(&self) -> &QpLayout {
        &self.layout
    }

    /// The DMA region (for its IOVA: page list and `dbr_addr`).
    pub fn region(&self) -> RegionInfo {
        self.mem.region()
    }

    /// A completion handle for a CQ: `send` if the CQ is this QP's send CQ,
    /// `recv` if it is its receive CQ (a QP with an SRQ passes `srq`
    /// instead). Each side can have only one handle at a time, so only one
    /// CQ retires it.
    pub fn completions(
        &self,
        send: bool,
        recv: bool,
        srq: Option<SrqCompletions>,
    ) -> Result<QpCompletions, Error> {
        let mut want = 0;
        if send {
            if self.sq.is_none() {
                return Err(Error::NoSuchQueue("send queue"));
            }
            want |= HANDLE_SQ;
        }
        if recv {
            if self.rq.is_none() {
                return Err(Error::NoSuchQueue("receive queue"));
            }
            if srq.is_some() {
                return Err(Error::InvalidGeometry("a QP has an RQ or an SRQ, not both"));
            }
            want |= HANDLE_RQ;
        }
        let flags = &self.hdr.first()[META_HANDLES];
        let prev = flags.fetch_or(want, Ordering::AcqRel);
        if prev & want != 0 {
            // Undo only the bits this call set.
            flags.fetch_and(!(want & !prev), Ordering::AcqRel);
            return Err(Error::HandleOutstanding(if prev & want & HANDLE_SQ != 0 {
                "send queue"
            } else {
                "receive queue"
            }));
        }
        let sq = match (&self.sq_table, send) {
            (Some(t), true) => Some(t.clone()),
            _ => None,
        };
        let rq = match (&self.rq, recv, srq) {
            (Some(r), true, _) => RecvSide::Rq {
                wrid: r.wrid.clone(),
                len: r.len.clone(),
            },
            (_, _, Some(s)) => RecvSide::Srq(s),
            _ => RecvSide::None,
        };
        let mut h = QpCompletions::new(self.qpn, self.hdr.clone(), want, sq, rq);
        if self.qp_type == QpType::RawPacket {
            h.set_raw();
        }
        Ok(h)
    }

    /// Completion handles still alive for this QP (bit 0 send, bit 1
    /// receive).
    pub fn handles_alive(&self) -> u32 {
        self.hdr.first()[META_HANDLES].load(Ordering::Acquire)
    }

    /// Gives the region and UAR back (after DESTROY_QP), or the QP itself
    /// while a completion handle is still alive (drop or unregister it
    /// first: it points into the region).
    pub fn into_parts(self) -> Result<QpParts<M>, Self> {
        if self.handles_alive() != 0 {
            return Err(self);
        }
        // The QP's own views go; a handle (the only views that leave the
        // QP) clears its flag when dropped, so none is left.
        let Self {
            mem,
            hdr,
            sq_table,
            sq,
            rq,
            #[cfg(feature = "cache-maintenance")]
            spare_uar,
            ..
        } = self;
        drop((hdr, sq_table, rq));
        let uar = sq.map(|s| s.db.bf.into_inner());
        #[cfg(feature = "cache-maintenance")]
        let uar = uar.or(spare_uar);
        Ok(QpParts::give_back(mem, uar))
    }
}

fn new_rq(
    mem: &mut QueueMem,
    layout: &QpLayout,
    g: &RqGeometry,
    hdr: &HostTable<QpHdr>,
    dbr: &DoorbellRecord,
    start: u32,
    cfg: &QpConfig,
) -> Result<RecvQueue, Error> {
    if !g.wqe_cnt.is_power_of_two() || !(4..=12).contains(&g.wqe_shift) || g.max_gs == 0 {
        return Err(Error::InvalidGeometry("receive queue"));
    }
    if g.max_gs as usize * 16 > 1 << g.wqe_shift || g.max_post > g.wqe_cnt {
        return Err(Error::InvalidGeometry("receive queue max_gs / max_post"));
    }
    // (A ring view is at least 64 bytes: a smaller receive ring's view
    // reaches into the send ring, which its offsets, masked with the
    // queue's own mask first, never do.)
    let buf = mem.ring(layout.rq_offset, g.bytes().max(64))?;
    let n = g.wqe_cnt as usize;
    let wrid = mem.table::<AtomicU64>(layout.meta_offset + layout.rq_wrid, n)?;
    let len = mem.table::<AtomicU32>(layout.meta_offset + layout.rq_len, n)?;
    dbr.write32(DBR_RCV, Be32::new(start & 0xffff).to_raw());
    Ok(RecvQueue {
        buf,
        hdr: hdr.clone(),
        dbr: dbr.clone(),
        wrid,
        len,
        mask: g.wqe_cnt - 1,
        shift: g.wqe_shift,
        max_gs: g.max_gs,
        seg_bytes: 16 * g.max_gs as usize,
        max_post: g.max_post,
        head: start,
        tail_cache: start,
        dbr_enabled: cfg.qp_type != QpType::RawPacket,
    })
}

/// The MLX5 opcodes a QP type may post, as a bit set.
fn allowed_opcodes(t: QpType) -> u32 {
    let bits = |ops: &[Opcode]| ops.iter().fold(0u32, |a, o| a | 1 << (*o as u8));
    match t {
        QpType::Rc => bits(&[
            Opcode::Nop,
            Opcode::Send,
            Opcode::SendImm,
            Opcode::SendInval,
            Opcode::RdmaWrite,
            Opcode::RdmaWriteImm,
            Opcode::RdmaRead,
            Opcode::AtomicCs,
            Opcode::AtomicFa,
        ]),
        QpType::Uc => bits(&[
            Opcode::Nop,
            Opcode::Send,
            Opcode::SendImm,
            Opcode::RdmaWrite,
            Opcode::RdmaWriteImm,
        ]),
        QpType::Ud => bits(&[Opcode::Nop, Opcode::Send, Opcode::SendImm]),
        QpType::RawPacket => bits(&[Opcode::Nop, Opcode::Send]),
    }
}

/// A `SendQueue::fm_batch` entry that sends a work request to the general
/// path (no control segment has all bits of its second half set: the
/// signature byte is 0).
const FM_SLOW: u64 = u64::MAX;

/// The tables of `SendQueue::fm_batch` / `fm_single`, by flags byte: every
/// entry `FM_SLOW` (queues without the fast path), and the fast path's
/// control-segment words without and with `sq_sig_all`.
static FM_TABLES: [[u64; 256]; 3] = {
    let mut t = [[FM_SLOW; 256]; 3];
    let mut i = 0;
    while i < 256 {
        // Bits 5..7 mean nothing; IBV_SEND_IP_CSUM (bit 4) is the general
        // path's to refuse.
        if i & 0x10 == 0 {
            let f = FM_CE_SE[i & 0xf];
            t[1][i] = ((f as u64) << 32).to_be();
            t[2][i] = (((f | fm_ce_se::CQ_UPDATE) as u64) << 32).to_be();
        }
        i += 1;
    }
    t
};

/// `fm_ce_se` for the low four `SendFlags` bits (FENCE, SIGNALED,
/// SOLICITED, SMALL_FENCE); a strong fence wins over a small one.
const FM_CE_SE: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        let mut v = 0;
        if i & 1 != 0 {
            v |= fm_ce_se::FENCE;
        } else if i & 8 != 0 {
            v |= fm_ce_se::SMALL_FENCE;
        }
        if i & 2 != 0 {
            v |= fm_ce_se::CQ_UPDATE;
        }
        if i & 4 != 0 {
            v |= fm_ce_se::SOLICITED;
        }
        t[i] = v;
        i += 1;
    }
    t
};

#[allow(clippy::too_many_arguments)]
fn new_sq<M: Mmio>(
    g: &SqGeometry,
    table: &SqRing,
    dbr: DoorbellRecord,
    start: u32,
    cfg: &QpConfig,
    db: SqDoorbell<M>,
) -> Result<SendQueue<M>, (Error, SqDoorbell<M>)> {
    let bad = |what| Err((Error::InvalidGeometry(what), ()));
    let check = (|| {
        if !g.wqe_cnt.is_power_of_two() || g.wqe_cnt < 1 {
            return bad("send queue size must be a power of two");
        }
        if g.max_wqe_size % 64 != 0 || g.max_wqe_size == 0 || g.max_wqe_size > 64 * 16 {
            return bad("send WQE size");
        }
        if g.max_post as u64 * (g.max_wqe_size as u64 / 64) > g.wqe_cnt as u64 {
            return bad("max_post WQEs of the largest size do not fit the ring");
        }
        Ok(())
    })();
    if let Err((e, ())) = check {
        return Err((e, db));
    }
    dbr.write32(DBR_SND, Be32::new(start & 0xffff).to_raw());
    // No slot starts an outstanding WQE yet: mark every slot as the work
    // request just before the tail, outside the outstanding window.
    for i in 0..g.wqe_cnt {
        let e = table.entry(i);
        e.wr_id.store(0, Ordering::Relaxed);
        e.head.store(start.wrapping_sub(1), Ordering::Relaxed);
    }
    let sig_bits = if cfg.sq_sig_all {
        fm_ce_se::CQ_UPDATE
    } else {
        0
    };
    let connected = matches!(cfg.qp_type, QpType::Rc | QpType::Uc);
    let fast_table = match (connected && g.max_gs >= 1, cfg.sq_sig_all) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    };
    Ok(SendQueue {
        buf: table.clone(),
        dbr,
        cur_post: start,
        #[cfg(feature = "cache-maintenance")]
        cleaned: start,
        full_at: start.wrapping_add(g.max_post),
        mask: g.wqe_cnt - 1,
        mask8: (g.wqe_cnt as usize - 1) * 8,
        qpn8: cfg.qpn << 8,
        fast_ops: if connected && g.max_gs >= 1 {
            allowed_opcodes(cfg.qp_type)
        } else {
            0
        },
        fm: FM_CE_SE.map(|f| f | sig_bits),
        fm_batch: &FM_TABLES[fast_table],
        fm_single: &FM_TABLES[if db.bf_always { 0 } else { fast_table }],
        ctrl_op: core::array::from_fn(|op| {
            let rdma = [Opcode::RdmaWrite, Opcode::RdmaWriteImm, Opcode::RdmaRead]
                .iter()
                .any(|o| *o as usize == op);
            (op as u64) << 32 | u64::from(cfg.qpn << 8) | if rdma { 3 } else { 2 }
        }),
        unit_mask: g.wqe_cnt as usize * 4 - 1,
        byte_mask: g.bytes() - 1,
        max_post: g.max_post,
        max_gs: g.max_gs,
        max_inline: g.max_inline_data,
        max_units: g.max_wqe_size / 16,
        qp_type: cfg.qp_type,
        atomics: cfg.atomics,
        eth_min_inline: cfg.eth_min_inline,
        ip_csum: true,
        tso: (0, 0),
        db,
    })
}
