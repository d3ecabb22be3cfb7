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
