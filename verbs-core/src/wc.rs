//! Work completions (`struct ibv_wc`) and their status, opcode and flags,
//! with the libibverbs numbering and strings.

use core::fmt;

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum WcStatus {
    #[default]
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
    TmErr = 22,
    TmRndvIncomplete = 23,
}

impl WcStatus {
    /// The status for an error CQE's syndrome (rdma-core
    /// `mlx5_handle_error_cqe`): unknown syndromes are `IBV_WC_GENERAL_ERR`.
    pub fn from_syndrome(syndrome: u8) -> Self {
        match syndrome {
            0x01 => Self::LocLenErr,
            0x02 => Self::LocQpOpErr,
            0x04 => Self::LocProtErr,
            0x05 => Self::WrFlushErr,
            0x06 => Self::MwBindErr,
            0x10 => Self::BadRespErr,
            0x11 => Self::LocAccessErr,
            0x12 => Self::RemInvReqErr,
            0x13 => Self::RemAccessErr,
            0x14 => Self::RemOpErr,
            0x15 => Self::RetryExcErr,
            0x16 => Self::RnrRetryExcErr,
            0x22 => Self::RemAbortErr,
            _ => Self::GeneralErr,
        }
    }

    /// What `ibv_wc_status_str` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::LocLenErr => "local length error",
            Self::LocQpOpErr => "local QP operation error",
            Self::LocEecOpErr => "local EE context operation error",
            Self::LocProtErr => "local protection error",
            Self::WrFlushErr => "Work Request Flushed Error",
            Self::MwBindErr => "memory management operation error",
            Self::BadRespErr => "bad response error",
            Self::LocAccessErr => "local access error",
            Self::RemInvReqErr => "remote invalid request error",
            Self::RemAccessErr => "remote access error",
            Self::RemOpErr => "remote operation error",
            Self::RetryExcErr => "transport retry counter exceeded",
            Self::RnrRetryExcErr => "RNR retry counter exceeded",
            Self::LocRddViolErr => "local RDD violation error",
            Self::RemInvRdReqErr => "remote invalid RD request",
            Self::RemAbortErr => "aborted error",
            Self::InvEecnErr => "invalid EE context number",
            Self::InvEecStateErr => "invalid EE context state",
            Self::FatalErr => "fatal error",
            Self::RespTimeoutErr => "response timeout error",
            Self::GeneralErr => "general error",
            Self::TmErr => "TM error",
            Self::TmRndvIncomplete => "TM software rendezvous",
        }
    }

    /// The `IBV_WC_*` enumerator name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "IBV_WC_SUCCESS",
            Self::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            Self::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            Self::LocEecOpErr => "IBV_WC_LOC_EEC_OP_ERR",
            Self::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            Self::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            Self::MwBindErr => "IBV_WC_MW_BIND_ERR",
            Self::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            Self::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            Self::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            Self::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            Self::RemOpErr => "IBV_WC_REM_OP_ERR",
            Self::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            Self::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            Self::LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
            Self::RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
            Self::RemAbortErr => "IBV_WC_REM_ABORT_ERR",
            Self::InvEecnErr => "IBV_WC_INV_EECN_ERR",
            Self::InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
            Self::FatalErr => "IBV_WC_FATAL_ERR",
            Self::RespTimeoutErr => "IBV_WC_RESP_TIMEOUT_ERR",
            Self::GeneralErr => "IBV_WC_GENERAL_ERR",
            Self::TmErr => "IBV_WC_TM_ERR",
            Self::TmRndvIncomplete => "IBV_WC_TM_RNDV_INCOMPLETE",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum WcOpcode {
    /// `IBV_WC_SEND`.
    #[default]
    Send = 0,
    /// `IBV_WC_RDMA_WRITE`.
    RdmaWrite = 1,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead = 2,
    /// `IBV_WC_COMP_SWAP`.
    CompSwap = 3,
    /// `IBV_WC_FETCH_ADD`.
    FetchAdd = 4,
    /// `IBV_WC_BIND_MW`.
    BindMw = 5,
    /// `IBV_WC_LOCAL_INV`.
    LocalInv = 6,
    /// `IBV_WC_TSO`.
    Tso = 7,
    /// `IBV_WC_RECV`.
    Recv = 128,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm = 129,
    /// A completed NOP WQE (reported in the `IBV_WC_DRIVER1` slot; libibverbs
    /// has no NOP opcode).
    Nop = 135,
}

/// `ibv_wc_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// `IBV_WC_GRH`: the first 40 bytes of the buffer hold a GRH.
    pub const GRH: u32 = 1 << 0;
    /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
    pub const WITH_IMM: u32 = 1 << 1;
    /// `IBV_WC_IP_CSUM_OK`.
    pub const IP_CSUM_OK: u32 = 1 << 2;
    /// `IBV_WC_WITH_INV`: `imm_data` holds the invalidated rkey.
    pub const WITH_INV: u32 = 1 << 3;

    /// Whether `flag` is set.
    pub fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }
}

/// A work completion (`struct ibv_wc`).
///
/// Unlike C, every field is always initialised; a field libibverbs leaves
/// undefined for a completion (e.g. `byte_len` of an error) is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The `wr_id` of the completed work request.
    pub wr_id: u64,
    /// Byte count: received bytes, RDMA READ length, 8 for atomics.
    pub byte_len: u32,
    /// Immediate data in host order (`ntohl(wc.imm_data)`), or the
    /// invalidated rkey when [`WcFlags::WITH_INV`] is set (the C union).
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (receive completions).
    pub src_qp: u32,
    /// `ibv_wc_flags`.
    pub wc_flags: WcFlags,
    /// Vendor syndrome of an error completion (`vendor_err_synd`).
    pub vendor_err: u32,
    /// P_Key index (receive completions; the low 16 bits of the CQE's
    /// `imm_inval_pkey`, as rdma-core reports it).
    pub pkey_index: u16,
    /// Source LID (receive completions).
    pub slid: u16,
    /// Status.
    pub status: WcStatus,
    /// Operation. For error completions libibverbs leaves it undefined;
    /// here it is the failed WQE's operation (requester) or `Recv`.
    pub opcode: WcOpcode,
    /// Service level (receive completions).
    pub sl: u8,
    /// Destination LID path bits (receive completions).
    pub dlid_path_bits: u8,
}

impl WorkCompletion {
    /// The invalidated rkey, if the completion carries one.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags
            .has(WcFlags::WITH_INV)
            .then_some(self.imm_data)
    }
}

impl WcStatus {
    /// The status with libibverbs number `v` (`IBV_WC_GENERAL_ERR` for a
    /// number that names none).
    #[inline]
    pub fn from_u8(v: u8) -> Self {
        const ALL: [WcStatus; 24] = [
            WcStatus::Success,
            WcStatus::LocLenErr,
            WcStatus::LocQpOpErr,
            WcStatus::LocEecOpErr,
            WcStatus::LocProtErr,
            WcStatus::WrFlushErr,
            WcStatus::MwBindErr,
            WcStatus::BadRespErr,
            WcStatus::LocAccessErr,
            WcStatus::RemInvReqErr,
            WcStatus::RemAccessErr,
            WcStatus::RemOpErr,
            WcStatus::RetryExcErr,
            WcStatus::RnrRetryExcErr,
            WcStatus::LocRddViolErr,
            WcStatus::RemInvRdReqErr,
            WcStatus::RemAbortErr,
            WcStatus::InvEecnErr,
            WcStatus::InvEecStateErr,
            WcStatus::FatalErr,
            WcStatus::RespTimeoutErr,
            WcStatus::GeneralErr,
            WcStatus::TmErr,
            WcStatus::TmRndvIncomplete,
        ];
        ALL.get(usize::from(v))
            .copied()
            .unwrap_or(WcStatus::GeneralErr)
    }
}

impl WcOpcode {
    /// The opcode with libibverbs number `v`, if it is one of these.
    #[inline]
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Send,
            1 => Self::RdmaWrite,
            2 => Self::RdmaRead,
            3 => Self::CompSwap,
            4 => Self::FetchAdd,
            5 => Self::BindMw,
            6 => Self::LocalInv,
            7 => Self::Tso,
            128 => Self::Recv,
            129 => Self::RecvRdmaWithImm,
            135 => Self::Nop,
            _ => return None,
        })
    }
}

/// A work completion in 32 bytes: the form [`Cq::poll`](crate::Cq::poll)
/// and [`Cq::poll_one`](crate::Cq::poll_one) write fastest (three or four
/// 64-bit stores), with every field of `struct ibv_wc` behind an accessor
/// of the same name. Convert it with `WorkCompletion::from(c)` where the
/// plain struct is handier.
///
/// Like [`WorkCompletion`], every field is always defined: what libibverbs
/// leaves undefined for a completion is 0. The fields only receive
/// completions carry (`src_qp`, `sl`, `slid`, `pkey_index`,
/// `dlid_path_bits`) are stored for those only; the accessors give 0 for
/// the others, and equality and hashing ignore what is not stored.
///
/// ```
/// use verbs_core::{Completion, WcOpcode, WcStatus, WorkCompletion};
/// let c = Completion::default();
/// assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Send, 0));
/// assert_eq!(WorkCompletion::from(c), WorkCompletion::default());
/// ```
#[derive(Clone, Copy, Default)]
pub struct Completion {
    /// `wr_id`.
    w0: u64,
    /// `byte_len` (bits 0..32); `dlid_path_bits` (32..40, receive
    /// completions only); the QPN as the CQE's three big-endian bytes
    /// (40..64), so the requester fast path stores the CQE's
    /// `sop_drop_qpn` dword here as it is.
    w1: u64,
    /// `opcode` (0..8) | `wc_flags` (8..16) | `status` (16..24) |
    /// `vendor_err` (24..32) | `imm_data` (32..64).
    w2: u64,
    /// Receive completions only: `src_qp` (0..24) | `sl` (24..32) |
    /// `slid` (32..48) | `pkey_index` (48..64).
    w3: u64,
}

impl Completion {
    /// From the words (crate-internal: the poll fast path). `w3` is not
    /// needed for a requester completion.
    #[inline(always)]
    pub(crate) const fn requester(w0: u64, w1: u64, w2: u64) -> Self {
        Self { w0, w1, w2, w3: 0 }
    }

    /// Sets words 1 and 2 (crate-internal: the poll fast path).
    #[inline(always)]
    pub(crate) fn w1w2(&mut self, w1: u64, w2: u64) {
        self.w1 = w1;
        self.w2 = w2;
    }

    /// Sets word 0, the `wr_id` (crate-internal: the poll fast path).
    #[inline(always)]
    pub(crate) fn w0(&mut self, w0: u64) {
        self.w0 = w0;
    }

    /// `w1` from `byte_len` and the CQE's raw (memory-order)
    /// `sop_drop_qpn` dword: the form of the requester fast path.
    #[inline(always)]
    pub(crate) const fn word1_raw(byte_len: u32, raw_sop_drop_qpn: u32) -> u64 {
        byte_len as u64 | (raw_sop_drop_qpn as u64) << 32
    }

    /// Whether the opcode is a receive one (`IBV_WC_RECV`,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`), whose completions carry the receive
    /// fields.
    #[inline(always)]
    fn is_recv(&self) -> bool {
        is_recv_opcode(self.w2 as u8)
    }

    /// The words with what is not stored for this completion zeroed.
    #[inline]
    fn normalized(&self) -> [u64; 4] {
        if self.is_recv() {
            [self.w0, self.w1, self.w2, self.w3]
        } else {
            let dlid = u64::from(u32::from_ne_bytes([0xff, 0, 0, 0])) << 32;
            [self.w0, self.w1 & !dlid, self.w2, 0]
        }
    }

    /// The `wr_id` of the completed work request.
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.w0
    }

    /// Byte count: received bytes, RDMA READ length, 8 for atomics.
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.w1 as u32
    }

    /// Local QP number.
    #[inline(always)]
    pub fn qp_num(&self) -> u32 {
        u32::from_be((self.w1 >> 32) as u32 & 0x00ff_ffffu32.to_be())
    }

    /// Status.
    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_u8((self.w2 >> 16) as u8)
    }

    /// Whether the status is `IBV_WC_SUCCESS`.
    #[inline(always)]
    pub fn is_success(&self) -> bool {
        (self.w2 >> 16) as u8 == 0
    }

    /// Operation (see [`WorkCompletion::opcode`]).
    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        // Only valid numbers are ever stored.
        WcOpcode::from_u8(self.w2 as u8).unwrap_or_default()
    }

    /// `ibv_wc_flags`.
    #[inline(always)]
    pub fn wc_flags(&self) -> WcFlags {
        WcFlags(u32::from((self.w2 >> 8) as u8))
    }

    /// Vendor syndrome of an error completion.
    #[inline(always)]
    pub fn vendor_err(&self) -> u32 {
        u32::from((self.w2 >> 24) as u8)
    }

    /// Immediate data in host order, or the invalidated rkey (see
    /// [`WorkCompletion::imm_data`]).
    #[inline(always)]
    pub fn imm_data(&self) -> u32 {
        (self.w2 >> 32) as u32
    }

    /// The invalidated rkey, if the completion carries one.
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags()
            .has(WcFlags::WITH_INV)
            .then_some(self.imm_data())
    }

    /// Destination LID path bits (receive completions).
    #[inline(always)]
    pub fn dlid_path_bits(&self) -> u8 {
        if self.is_recv() {
            ((self.w1 >> 32) as u32).to_ne_bytes()[0]
        } else {
            0
        }
    }

    /// Remote QP number (receive completions).
    #[inline(always)]
    pub fn src_qp(&self) -> u32 {
        self.normalized()[3] as u32 & 0xff_ffff
    }

    /// Service level (receive completions).
    #[inline(always)]
    pub fn sl(&self) -> u8 {
        (self.normalized()[3] >> 24) as u8
    }

    /// Source LID (receive completions).
    #[inline(always)]
    pub fn slid(&self) -> u16 {
        (self.normalized()[3] >> 32) as u16
    }

    /// P_Key index (receive completions).
    #[inline(always)]
    pub fn pkey_index(&self) -> u16 {
        (self.normalized()[3] >> 48) as u16
    }
}

impl PartialEq for Completion {
    fn eq(&self, other: &Self) -> bool {
        self.normalized() == other.normalized()
    }
}

impl Eq for Completion {}

impl core::hash::Hash for Completion {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.normalized().hash(state);
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&WorkCompletion::from(*self), f)
    }
}

impl From<Completion> for WorkCompletion {
    #[inline]
    fn from(c: Completion) -> Self {
        Self {
            wr_id: c.wr_id(),
            byte_len: c.byte_len(),
            imm_data: c.imm_data(),
            qp_num: c.qp_num(),
            src_qp: c.src_qp(),
            wc_flags: c.wc_flags(),
            vendor_err: c.vendor_err(),
            pkey_index: c.pkey_index(),
            slid: c.slid(),
            status: c.status(),
            opcode: c.opcode(),
            sl: c.sl(),
            dlid_path_bits: c.dlid_path_bits(),
        }
    }
}

impl From<&WorkCompletion> for Completion {
    /// Packs a work completion. Fields wider than the CQE ever carries are
    /// cut to their CQE width: `qp_num` and `src_qp` to 24 bits,
    /// `vendor_err` and `sl` to 8, `wc_flags` to its low 8 bits; the
    /// receive fields are kept only for receive opcodes.
    #[inline]
    fn from(w: &WorkCompletion) -> Self {
        let recv = is_recv_opcode(w.opcode as u8);
        let dlid = if recv { w.dlid_path_bits } else { 0 };
        // The CQE's dword: byte 0 (the WQE opcode there) carries
        // dlid_path_bits, bytes 1..4 the QPN.
        let qpn_raw = (w.qp_num & 0xff_ffff).to_be() | u32::from_ne_bytes([dlid, 0, 0, 0]);
        Self {
            w0: w.wr_id,
            w1: Self::word1_raw(w.byte_len, qpn_raw),
            w2: w.opcode as u64
                | u64::from(w.wc_flags.0 as u8) << 8
                | (w.status as u64) << 16
                | u64::from(w.vendor_err as u8) << 24
                | u64::from(w.imm_data) << 32,
            w3: if recv {
                u64::from(w.src_qp & 0xff_ffff)
                    | u64::from(w.sl) << 24
                    | u64::from(w.slid) << 32
                    | u64::from(w.pkey_index) << 48
            } else {
                0
            },
        }
    }
}

/// `IBV_WC_RECV` or `IBV_WC_RECV_RDMA_WITH_IMM` (not the NOP opcode,
/// which also has bit 7 set).
#[inline(always)]
const fn is_recv_opcode(op: u8) -> bool {
    op == WcOpcode::Recv as u8 || op == WcOpcode::RecvRdmaWithImm as u8
}

/// Where [`Cq::poll`](crate::Cq::poll) can write completions: a
/// [`Completion`] (fastest) or a [`WorkCompletion`].
pub trait CompletionSlot: sealed::Sealed {
    /// Stores `c`.
    fn set(&mut self, c: Completion);

    /// Stores a requester completion given as its first three words
    /// (crate-internal: the poll fast path).
    #[doc(hidden)]
    #[inline(always)]
    fn set_requester(&mut self, w0: u64, w1: u64, w2: u64) {
        self.set(Completion::requester(w0, w1, w2));
    }
}

impl CompletionSlot for Completion {
    #[inline(always)]
    fn set(&mut self, c: Completion) {
        *self = c;
    }

    /// A requester completion stores no receive fields: the last word is
    /// left as it is (the accessors do not read it).
    #[inline(always)]
    fn set_requester(&mut self, w0: u64, w1: u64, w2: u64) {
        self.w0 = w0;
        self.w1 = w1;
        self.w2 = w2;
    }
}

impl CompletionSlot for WorkCompletion {
    #[inline(always)]
    fn set(&mut self, c: Completion) {
        *self = c.into();
    }

    /// A requester completion's word 2 is its opcode and flags (16 bits;
    /// status success, no immediate): saying so spares the conversion.
    #[inline(always)]
    fn set_requester(&mut self, w0: u64, w1: u64, w2: u64) {
        debug_assert!(w2 <= 0xffff);
        self.set(Completion::requester(w0, w1, w2 & 0xffff));
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Completion {}
    impl Sealed for super::WorkCompletion {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip() {
        for v in 0..=255u8 {
            let s = WcStatus::from_u8(v);
            if v < 24 {
                assert_eq!(s as u8, v);
            } else {
                assert_eq!(s, WcStatus::GeneralErr);
            }
            if let Some(o) = WcOpcode::from_u8(v) {
                assert_eq!(o as u8, v);
            }
        }
    }

    #[test]
    fn completion_round_trips_every_field() {
        let w = WorkCompletion {
            wr_id: 0x0102_0304_0506_0708,
            byte_len: 0xfedc_ba98,
            imm_data: 0x1122_3344,
            qp_num: 0xab_cdef,
            src_qp: 0x12_3456,
            wc_flags: WcFlags(WcFlags::GRH | WcFlags::WITH_IMM),
            vendor_err: 0x99,
            pkey_index: 0xbeef,
            slid: 0xcafe,
            status: WcStatus::RemAbortErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            sl: 0xf,
            dlid_path_bits: 0x7f,
        };
        let c = Completion::from(&w);
        assert_eq!(WorkCompletion::from(c), w);
        assert!(!c.is_success());
        assert_eq!(c.invalidated_rkey(), None);
        let inv = WorkCompletion {
            wc_flags: WcFlags(WcFlags::WITH_INV),
            ..w
        };
        assert_eq!(Completion::from(&inv).invalidated_rkey(), Some(0x1122_3344));
    }

    #[test]
    fn requester_completions_show_no_stale_receive_fields() {
        // A slot that held a receive completion, overwritten by the fast
        // path's three words for requester completions (NOP has bit 7 of
        // its opcode set too).
        let recv = WorkCompletion {
            wr_id: 1,
            src_qp: 0x12_3456,
            sl: 3,
            slid: 0x99,
            pkey_index: 2,
            dlid_path_bits: 5,
            opcode: WcOpcode::Recv,
            ..WorkCompletion::default()
        };
        for op in [WcOpcode::Nop, WcOpcode::RdmaWrite, WcOpcode::Send] {
            let mut c = Completion::from(&recv);
            assert_eq!(c.src_qp(), 0x12_3456);
            let qpn_raw = 0x00ab_cdefu32.to_be() | u32::from_ne_bytes([0x0a, 0, 0, 0]);
            c.set_requester(7, Completion::word1_raw(0, qpn_raw), op as u64);
            let w = WorkCompletion::from(c);
            assert_eq!(
                w,
                WorkCompletion {
                    wr_id: 7,
                    qp_num: 0xab_cdef,
                    opcode: op,
                    ..WorkCompletion::default()
                }
            );
            assert_eq!(c, Completion::from(&w));
        }
    }
}
