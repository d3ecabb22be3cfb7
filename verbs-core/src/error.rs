//! The crate's error type.

use crate::qp::QpType;

/// Everything the data path can refuse or detect.
///
/// Work-request errors are returned *before* anything of the rejected work
/// request is written to the queue; CQE errors name the field of the
/// completion that was out of bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- construction ----------------------------------------------------
    /// A queue geometry or capability request that the sizing rules refuse.
    #[error("invalid queue geometry: {0}")]
    InvalidGeometry(&'static str),

    /// The DMA region handed to a queue is too small for its layout.
    #[error("DMA region of {got:#x} bytes is too small, the layout needs {need:#x}")]
    RegionTooSmall {
        /// Bytes the layout needs.
        need: usize,
        /// Bytes the region has.
        got: usize,
    },

    /// A region or offset is not aligned as the layout requires.
    #[error("{what} is not aligned to {align} bytes")]
    Misaligned {
        /// What was misaligned.
        what: &'static str,
        /// Required alignment.
        align: usize,
    },

    /// A UAR offset is outside the register window or misaligned.
    #[error("UAR register at {offset:#x} ({width} bytes) is outside the {len:#x}-byte window")]
    UarOutOfRange {
        /// Offset of the register.
        offset: usize,
        /// Access width.
        width: usize,
        /// Window length.
        len: usize,
    },

    // ---- work requests -----------------------------------------------------
    /// The send or receive queue has no room for the work request
    /// (`max_post` outstanding work requests, as rdma-core's
    /// `mlx5_wq_overflow`).
    #[error("work queue full: {outstanding} outstanding of at most {max_post}")]
    QueueFull {
        /// Work requests posted and not yet completed.
        outstanding: u32,
        /// The queue's `max_post`.
        max_post: u32,
    },

    /// More scatter/gather entries than the queue was created for.
    #[error("too many SGEs: {got}, the queue takes at most {max}")]
    TooManySges {
        /// SGEs in the work request.
        got: usize,
        /// The queue's `max_gs`.
        max: usize,
    },

    /// Inline data longer than the queue's `max_inline_data`.
    #[error("inline data of {got} bytes exceeds max_inline_data {max}")]
    InlineTooLong {
        /// Bytes requested inline.
        got: usize,
        /// The queue's `max_inline_data`.
        max: usize,
    },

    /// An atomic operation whose local buffer is not one SGE of at least 8
    /// bytes (a zero-length or short atomic target).
    #[error(
        "atomic operations need exactly one local SGE of at least 8 bytes (got {sges} SGEs, first {len} bytes)"
    )]
    AtomicLength {
        /// Number of SGEs given.
        sges: usize,
        /// Length of the first SGE (0 if none).
        len: u32,
    },

    /// A remote atomic address that is not 8-byte aligned.
    #[error("remote atomic address {0:#x} is not 8-byte aligned")]
    AtomicMisaligned(u64),

    /// The operation is not valid on this QP type (e.g. RDMA READ on UC,
    /// RDMA on UD, a send without address on UD).
    #[error("{op} is not valid on a {qp_type:?} QP")]
    WrongOpcodeForQpType {
        /// The operation's verbs name.
        op: &'static str,
        /// The QP's type.
        qp_type: QpType,
    },

    /// Atomic operations were not enabled for this QP.
    #[error("atomic operations are not enabled on this QP")]
    AtomicsDisabled,

    /// A UD send without a destination, or an RC/UC send with one.
    #[error("UD destination {0}")]
    UdDestination(&'static str),

    /// Raw Ethernet send: the inline headers are shorter than the minimum
    /// the queue requires, or a checksum offload that the queue refuses.
    #[error("Ethernet segment: {0}")]
    EthSegment(&'static str),

    /// A work request that would be larger than the queue's largest WQE.
    #[error("WQE of {wqebbs} WQEBBs exceeds the queue's largest WQE of {max} WQEBBs")]
    WqeTooLarge {
        /// WQEBBs the work request needs.
        wqebbs: u32,
        /// The queue's largest WQE.
        max: u32,
    },

    /// The queue is not present (a QP created without RQ or SQ).
    #[error("the QP has no {0}")]
    NoSuchQueue(&'static str),

    /// A spin lock on a shared receive queue's free list stayed contended
    /// for too long.
    #[error("shared receive queue free list stayed locked for {0} spins")]
    SrqLockTimeout(u32),

    // ---- completion handles ------------------------------------------------
    /// The queue side already has a completion handle: only one CQ may
    /// retire a send or receive queue.
    #[error("the {0} already has a completion handle registered with a CQ")]
    HandleOutstanding(&'static str),

    /// `into_parts` with completion handles still alive.
    #[error(
        "{0} completion handle(s) still alive; drop or return them before taking the queue apart"
    )]
    HandlesAlive(u32),

    /// A completion table has no free entry / the key is out of range.
    #[error("completion table: {0}")]
    Table(&'static str),

    // ---- completions -------------------------------------------------------
    /// A CQE opcode this driver does not know or does not expect.
    #[error("CQE {ci:#x}: unknown or unexpected opcode {opcode:#x}")]
    CqeOpcode {
        /// Consumer index of the CQE.
        ci: u32,
        /// The opcode (op_own bits 7:4).
        opcode: u8,
    },

    /// A CQE names a QP (by user index or QPN) that this CQ does not serve,
    /// or a queue side (send/receive) that is not registered.
    #[error("CQE {ci:#x}: {what} {key:#x} is not served by this CQ")]
    CqeUnknownQueue {
        /// Consumer index of the CQE.
        ci: u32,
        /// "user index", "QPN" or "SRQN".
        what: &'static str,
        /// The value from the CQE.
        key: u32,
    },

    /// The CQE's QPN disagrees with the QP its user index names.
    #[error("CQE {ci:#x}: QPN {got:#x} but the user index names QP {expected:#x}")]
    CqeQpnMismatch {
        /// Consumer index of the CQE.
        ci: u32,
        /// QPN in the CQE.
        got: u32,
        /// QPN registered for the user index.
        expected: u32,
    },

    /// A wqe_counter that does not name an outstanding WQE.
    #[error("CQE {ci:#x}: wqe_counter {counter:#x} names no outstanding WQE of the {queue}")]
    CqeWqeCounter {
        /// Consumer index of the CQE.
        ci: u32,
        /// The wqe_counter from the CQE.
        counter: u16,
        /// "send queue", "receive queue" or "SRQ".
        queue: &'static str,
    },

    /// A receive completion whose byte count exceeds what the WQE could hold.
    #[error("CQE {ci:#x}: byte_cnt {byte_cnt:#x} exceeds the posted length {posted:#x}")]
    CqeByteCount {
        /// Consumer index of the CQE.
        ci: u32,
        /// byte_cnt from the CQE.
        byte_cnt: u32,
        /// Total length posted in the receive WQE.
        posted: u64,
    },

    /// A CQE format this driver never enables (inline scatter to CQE,
    /// compressed CQEs).
    #[error("CQE {ci:#x}: unsupported CQE format/scatter bits {op_own:#04x}")]
    CqeFormat {
        /// Consumer index of the CQE.
        ci: u32,
        /// The op_own byte.
        op_own: u8,
    },
}
