//! The crate's error type.

use crate::qp::QpType;
use core::num::NonZeroU64;

use crate::wqe::Opcode;

impl From<platform::Error> for Error {
    fn from(e: platform::Error) -> Self {
        match e {
            platform::Error::InvalidArgument(what) => Self::QueueMemory(what),
            platform::Error::MmioOutOfRange { offset, width, len } => {
                Self::UarOutOfRange { offset, width, len }
            }
            _ => Self::QueueMemory("platform error"),
        }
    }
}

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

    /// The platform refused a view of the queue's memory (a ring, table or
    /// doorbell record outside its part of the region, misaligned, or not
    /// a power of two in size).
    #[error("queue memory: {0}")]
    QueueMemory(&'static str),

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

/// Why a one-SGE send was refused, in two words: the compact form of the
/// [`Error`]s that [`SendQueue::post_send`](crate::SendQueue::post_send)
/// returns for the same work request. A `Result<(), SendError>` is a pair of
/// integers, returned in registers instead of through memory.
///
/// Returned by `post_send_sge` of [`SendQueue`](crate::SendQueue) and
/// [`SendBatch`](crate::SendBatch). [`kind`](Self::kind) says what was
/// wrong, with the numbers; [`Error::from`] (or `?` into a function
/// returning [`Error`]) gives the same error `post_send` returns for the
/// same work request, field for field. It prints like that error.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendError {
    /// Bits 0..8: the kind's index + 1 (never 0); 8..16: an MLX5 opcode;
    /// 16..24: a QP type; 32..64: the first 32-bit value.
    code: NonZeroU64,
    /// The second value (32 or 64 bits).
    arg: u64,
}

/// What a [`SendError`] says, field for field as the [`Error`] it stands
/// for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// [`Error::QueueFull`].
    QueueFull {
        /// Work requests posted and not yet completed.
        outstanding: u32,
        /// The queue's `max_post`.
        max_post: u32,
    },
    /// [`Error::TooManySges`].
    TooManySges {
        /// SGEs in the work request.
        got: u32,
        /// The queue's `max_gs`.
        max: u32,
    },
    /// [`Error::WrongOpcodeForQpType`]: `op` is the MLX5 opcode of the
    /// operation (its verbs name is what [`Error`] shows).
    WrongOpcodeForQpType {
        /// The operation.
        op: Opcode,
        /// The QP's type.
        qp_type: QpType,
    },
    /// [`Error::AtomicsDisabled`].
    AtomicsDisabled,
    /// [`Error::AtomicMisaligned`].
    AtomicMisaligned(u64),
    /// [`Error::AtomicLength`].
    AtomicLength {
        /// Number of SGEs given.
        sges: u32,
        /// Length of the first SGE (0 if none).
        len: u32,
    },
    /// [`Error::UdDestination`]: a UD send without a destination (the
    /// typed methods take none).
    UdDestinationMissing,
    /// [`Error::EthSegment`]: a raw packet send without the inline headers
    /// the queue requires (the typed methods take none).
    EthHeadersTooShort,
    /// [`Error::EthSegment`]: checksum offload (`IBV_SEND_IP_CSUM`) on a
    /// QP that is not a raw packet QP.
    EthOnNonRawQp,
    /// [`Error::EthSegment`]: checksum offload on a raw packet QP whose
    /// device or port does not offer it
    /// ([`SendQueue::set_ip_csum_offload`](crate::SendQueue::set_ip_csum_offload)).
    EthCsumUnsupported,
    /// [`Error::WqeTooLarge`].
    WqeTooLarge {
        /// WQEBBs the work request needs.
        wqebbs: u32,
        /// The queue's largest WQE.
        max: u32,
    },
}

const QP_TYPES: [QpType; 4] = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::RawPacket];

impl From<SendErrorKind> for SendError {
    fn from(k: SendErrorKind) -> Self {
        use SendErrorKind as K;
        // (index, opcode, QP type, first value, second value)
        let (i, op, t, a, b): (u64, u8, u8, u32, u64) = match k {
            K::QueueFull {
                outstanding,
                max_post,
            } => (0, 0, 0, outstanding, u64::from(max_post)),
            K::TooManySges { got, max } => (1, 0, 0, got, u64::from(max)),
            K::WrongOpcodeForQpType { op, qp_type } => {
                let t = QP_TYPES.iter().position(|q| *q == qp_type).unwrap_or(0);
                (2, op as u8, t as u8, 0, 0)
            }
            K::AtomicsDisabled => (3, 0, 0, 0, 0),
            K::AtomicMisaligned(addr) => (4, 0, 0, 0, addr),
            K::AtomicLength { sges, len } => (5, 0, 0, sges, u64::from(len)),
            K::UdDestinationMissing => (6, 0, 0, 0, 0),
            K::EthHeadersTooShort => (7, 0, 0, 0, 0),
            K::EthOnNonRawQp => (8, 0, 0, 0, 0),
            K::WqeTooLarge { wqebbs, max } => (9, 0, 0, wqebbs, u64::from(max)),
            K::EthCsumUnsupported => (10, 0, 0, 0, 0),
        };
        let code = (i + 1) | u64::from(op) << 8 | u64::from(t) << 16 | u64::from(a) << 32;
        Self {
            code: NonZeroU64::new(code).unwrap_or(NonZeroU64::MIN),
            arg: b,
        }
    }
}

impl SendError {
    /// What was wrong, with the numbers.
    pub fn kind(self) -> SendErrorKind {
        use SendErrorKind as K;
        let c = self.code.get();
        let a = (c >> 32) as u32;
        let b32 = self.arg as u32;
        match c & 0xff {
            1 => K::QueueFull {
                outstanding: a,
                max_post: b32,
            },
            2 => K::TooManySges { got: a, max: b32 },
            3 => K::WrongOpcodeForQpType {
                op: Opcode::from_u8((c >> 8) as u8).unwrap_or(Opcode::Nop),
                qp_type: QP_TYPES[((c >> 16) & 3) as usize],
            },
            4 => K::AtomicsDisabled,
            5 => K::AtomicMisaligned(self.arg),
            6 => K::AtomicLength { sges: a, len: b32 },
            7 => K::UdDestinationMissing,
            8 => K::EthHeadersTooShort,
            9 => K::EthOnNonRawQp,
            11 => K::EthCsumUnsupported,
            // 10: the only other code `from` makes.
            _ => K::WqeTooLarge {
                wqebbs: a,
                max: b32,
            },
        }
    }
}

impl core::fmt::Debug for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SendError({:?})", self.kind())
    }
}

/// The verbs name of the operation an MLX5 send opcode stands for (as
/// [`SendOp`](crate::SendOp) names it).
pub(crate) fn op_name(op: Opcode) -> &'static str {
    match op {
        Opcode::Send => "IBV_WR_SEND",
        Opcode::SendImm => "IBV_WR_SEND_WITH_IMM",
        Opcode::SendInval => "IBV_WR_SEND_WITH_INV",
        Opcode::RdmaWrite => "IBV_WR_RDMA_WRITE",
        Opcode::RdmaWriteImm => "IBV_WR_RDMA_WRITE_WITH_IMM",
        Opcode::RdmaRead => "IBV_WR_RDMA_READ",
        Opcode::AtomicCs => "IBV_WR_ATOMIC_CMP_AND_SWP",
        Opcode::AtomicFa => "IBV_WR_ATOMIC_FETCH_AND_ADD",
        Opcode::Nop => "NOP",
        Opcode::Tso => "MLX5_OPCODE_TSO",
        Opcode::AtomicMaskedCs => "MLX5_OPCODE_ATOMIC_MASKED_CS",
        Opcode::AtomicMaskedFa => "MLX5_OPCODE_ATOMIC_MASKED_FA",
        Opcode::LocalInval => "MLX5_OPCODE_LOCAL_INVAL",
        Opcode::Umr => "MLX5_OPCODE_UMR",
    }
}

/// `Error::UdDestination`: a UD send without a destination.
pub(crate) const UD_MISSING: &str = "missing on a UD QP";
/// `Error::UdDestination`: a destination where none is allowed.
pub(crate) const UD_NOT_ALLOWED: &str = "given on a non-UD QP or a NOP";
/// `Error::EthSegment`: headers shorter than the queue's minimum.
pub(crate) const ETH_SHORT: &str = "inline headers shorter than the queue's minimum";
/// `Error::EthSegment`: headers longer than the segment can say.
pub(crate) const ETH_LONG: &str = "inline headers longer than 65535 bytes";
/// `Error::EthSegment`: Ethernet options on a QP that is not raw.
pub(crate) const ETH_NON_RAW: &str = "Ethernet headers or checksum offload on a non-raw QP";
/// `Error::EthSegment`: checksum offload on a queue without it.
pub(crate) const ETH_NO_CSUM: &str =
    "checksum offload (IBV_SEND_IP_CSUM) not supported by the device or port";
/// `Error::EthSegment`: a raw packet send without a gather list to take
/// its inline headers from.
pub(crate) const ETH_NO_SGE: &str = "a raw packet send needs at least one SGE";
/// `Error::EthSegment`: VLAN insertion on a non-raw QP or a NOP.
pub(crate) const ETH_VLAN_NON_RAW: &str = "VLAN insertion on a non-raw QP or a NOP";
/// `Error::EthSegment`: VLAN insertion into inline headers that do not
/// hold a whole Ethernet header.
pub(crate) const ETH_VLAN_SHORT: &str =
    "VLAN insertion into inline headers shorter than an Ethernet header (14 bytes)";

impl From<SendError> for Error {
    #[inline(always)]
    fn from(e: SendError) -> Self {
        send_error_to_error(e)
    }
}

/// `Error::from(SendError)` out of line. `extern "C"`: it cannot unwind (a
/// panic would abort; there is none), so a caller converting on its error
/// path needs no landing pad, and a `SendBatch` it posts through stays in
/// registers.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn send_error_to_error(e: SendError) -> Error {
    Error::from(e.kind())
}

impl From<SendErrorKind> for Error {
    #[cold]
    fn from(e: SendErrorKind) -> Self {
        match e {
            SendErrorKind::QueueFull {
                outstanding,
                max_post,
            } => Error::QueueFull {
                outstanding,
                max_post,
            },
            SendErrorKind::TooManySges { got, max } => Error::TooManySges {
                got: got as usize,
                max: max as usize,
            },
            SendErrorKind::WrongOpcodeForQpType { op, qp_type } => Error::WrongOpcodeForQpType {
                op: op_name(op),
                qp_type,
            },
            SendErrorKind::AtomicsDisabled => Error::AtomicsDisabled,
            SendErrorKind::AtomicMisaligned(a) => Error::AtomicMisaligned(a),
            SendErrorKind::AtomicLength { sges, len } => Error::AtomicLength {
                sges: sges as usize,
                len,
            },
            SendErrorKind::UdDestinationMissing => Error::UdDestination(UD_MISSING),
            SendErrorKind::EthHeadersTooShort => Error::EthSegment(ETH_SHORT),
            SendErrorKind::EthOnNonRawQp => Error::EthSegment(ETH_NON_RAW),
            SendErrorKind::EthCsumUnsupported => Error::EthSegment(ETH_NO_CSUM),
            SendErrorKind::WqeTooLarge { wqebbs, max } => Error::WqeTooLarge { wqebbs, max },
        }
    }
}

impl SendError {
    /// The compact form of an error of the one-SGE send path (the general
    /// path's checks of a work request with one SGE, no UD destination and
    /// no Ethernet headers). Every such error has one; anything else is a
    /// broken invariant of this crate.
    #[cold]
    #[inline(never)]
    pub(crate) fn from_sge_path(e: Error) -> Self {
        let small = |v: usize| u32::try_from(v).ok();
        let r = match e {
            Error::QueueFull {
                outstanding,
                max_post,
            } => Some(SendErrorKind::QueueFull {
                outstanding,
                max_post,
            }),
            Error::TooManySges { got, max } => small(got)
                .zip(small(max))
                .map(|(got, max)| SendErrorKind::TooManySges { got, max }),
            Error::WrongOpcodeForQpType { op, qp_type } => [
                Opcode::Send,
                Opcode::SendImm,
                Opcode::SendInval,
                Opcode::RdmaWrite,
                Opcode::RdmaWriteImm,
                Opcode::RdmaRead,
                Opcode::AtomicCs,
                Opcode::AtomicFa,
                Opcode::Nop,
            ]
            .into_iter()
            .find(|o| op_name(*o) == op)
            .map(|op| SendErrorKind::WrongOpcodeForQpType { op, qp_type }),
            Error::AtomicsDisabled => Some(SendErrorKind::AtomicsDisabled),
            Error::AtomicMisaligned(a) => Some(SendErrorKind::AtomicMisaligned(a)),
            Error::AtomicLength { sges, len } => {
                small(sges).map(|sges| SendErrorKind::AtomicLength { sges, len })
            }
            Error::UdDestination(m) if m == UD_MISSING => Some(SendErrorKind::UdDestinationMissing),
            Error::EthSegment(m) if m == ETH_SHORT => Some(SendErrorKind::EthHeadersTooShort),
            Error::EthSegment(m) if m == ETH_NON_RAW => Some(SendErrorKind::EthOnNonRawQp),
            Error::EthSegment(m) if m == ETH_NO_CSUM => Some(SendErrorKind::EthCsumUnsupported),
            Error::WqeTooLarge { wqebbs, max } => Some(SendErrorKind::WqeTooLarge { wqebbs, max }),
            _ => None,
        };
        match r {
            Some(k) => k.into(),
            None => unreachable!("the one-SGE send path returned {e:?}, which has no SendError"),
        }
    }
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&Error::from(*self), f)
    }
}

impl core::error::Error for SendError {}

/// The names a [`PollError`] can give for `Error::CqeUnknownQueue`'s
/// `what` (by index + 1) and `Error::CqeWqeCounter`'s `queue` (by index
/// + 1): the strings the completion path uses.
const POLL_WHAT: [&str; 5] = [
    "user index",
    "QPN",
    "SRQN",
    "send queue of QPN",
    "receive queue of QPN",
];
const POLL_QUEUE: [&str; 3] = ["send queue", "receive queue", "SRQ"];

/// Why a poll failed, in two words: the compact form of the [`Error`]s a
/// CQ's polling can return (a corrupt or unexpected CQE, or a contended
/// SRQ free list). A `Result<_, PollError>` is returned in registers or
/// two stores where a `Result<_, Error>` needs five.
///
/// Returned by [`Cq::poll_one`](crate::Cq::poll_one).
/// [`kind`](Self::kind) says what was wrong, with the numbers;
/// [`Error::from`] (or `?` into a function returning [`Error`]) gives the
/// error [`Cq::poll`](crate::Cq::poll) returns for the same CQE, field for
/// field. It prints like that error.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PollError {
    /// Bits 0..8: the kind's index + 1 (never 0); 8..16: the index + 1 of
    /// a name; 16..32: an opcode, `op_own` or `wqe_counter`; 32..64: the
    /// consumer index.
    code: NonZeroU64,
    /// Two 32-bit values.
    arg: u64,
}

/// What a [`PollError`] says: the [`Error`] variant it stands for, with the
/// same fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PollErrorKind {
    /// [`Error::CqeOpcode`].
    CqeOpcode {
        /// Consumer index of the CQE.
        ci: u32,
        /// The opcode (`op_own` bits 7:4).
        opcode: u8,
    },
    /// [`Error::CqeUnknownQueue`].
    CqeUnknownQueue {
        /// Consumer index of the CQE.
        ci: u32,
        /// "user index", "QPN", "SRQN", "send queue of QPN" or "receive
        /// queue of QPN".
        what: &'static str,
        /// The value from the CQE.
        key: u32,
    },
    /// [`Error::CqeQpnMismatch`].
    CqeQpnMismatch {
        /// Consumer index of the CQE.
        ci: u32,
        /// QPN in the CQE.
        got: u32,
        /// QPN registered for the user index.
        expected: u32,
    },
    /// [`Error::CqeWqeCounter`].
    CqeWqeCounter {
        /// Consumer index of the CQE.
        ci: u32,
        /// The `wqe_counter` from the CQE.
        counter: u16,
        /// "send queue", "receive queue" or "SRQ".
        queue: &'static str,
    },
    /// [`Error::CqeByteCount`] (the posted length of a receive WQE is at
    /// most 32 bits).
    CqeByteCount {
        /// Consumer index of the CQE.
        ci: u32,
        /// `byte_cnt` from the CQE.
        byte_cnt: u32,
        /// Total length posted in the receive WQE.
        posted: u32,
    },
    /// [`Error::CqeFormat`].
    CqeFormat {
        /// Consumer index of the CQE.
        ci: u32,
        /// The `op_own` byte.
        op_own: u8,
    },
    /// [`Error::SrqLockTimeout`].
    SrqLockTimeout(u32),
}

impl PollErrorKind {
    /// The compact form, if the kind has one (its names are the
    /// completion path's, `posted` fits 32 bits).
    fn pack(self) -> Option<PollError> {
        use PollErrorKind as K;
        let name = |t: &[&str], s: &str| t.iter().position(|x| *x == s).map(|i| i as u64 + 1);
        // (index, name, small, ci, a, b)
        let (i, n, small, ci, a, b): (u64, u64, u16, u32, u32, u32) = match self {
            K::CqeOpcode { ci, opcode } => (0, 0, u16::from(opcode), ci, 0, 0),
            K::CqeUnknownQueue { ci, what, key } => (1, name(&POLL_WHAT, what)?, 0, ci, key, 0),
            K::CqeQpnMismatch { ci, got, expected } => (2, 0, 0, ci, got, expected),
            K::CqeWqeCounter { ci, counter, queue } => {
                (3, name(&POLL_QUEUE, queue)?, counter, ci, 0, 0)
            }
            K::CqeByteCount {
                ci,
                byte_cnt,
                posted,
            } => (4, 0, 0, ci, byte_cnt, posted),
            K::CqeFormat { ci, op_own } => (5, 0, u16::from(op_own), ci, 0, 0),
            K::SrqLockTimeout(spins) => (6, 0, 0, 0, spins, 0),
        };
        let code = (i + 1) | n << 8 | u64::from(small) << 16 | u64::from(ci) << 32;
        Some(PollError {
            code: NonZeroU64::new(code)?,
            arg: u64::from(a) | u64::from(b) << 32,
        })
    }
}

impl PollError {
    /// What was wrong, with the numbers.
    pub fn kind(self) -> PollErrorKind {
        use PollErrorKind as K;
        let c = self.code.get();
        let n = ((c >> 8) as u8 as usize).wrapping_sub(1);
        let small = (c >> 16) as u16;
        let ci = (c >> 32) as u32;
        let (a, b) = (self.arg as u32, (self.arg >> 32) as u32);
        match c & 0xff {
            1 => K::CqeOpcode {
                ci,
                opcode: small as u8,
            },
            2 => K::CqeUnknownQueue {
                ci,
                what: POLL_WHAT.get(n).copied().unwrap_or(POLL_WHAT[0]),
                key: a,
            },
            3 => K::CqeQpnMismatch {
                ci,
                got: a,
                expected: b,
            },
            4 => K::CqeWqeCounter {
                ci,
                counter: small,
                queue: POLL_QUEUE.get(n).copied().unwrap_or(POLL_QUEUE[0]),
            },
            5 => K::CqeByteCount {
                ci,
                byte_cnt: a,
                posted: b,
            },
            6 => K::CqeFormat {
                ci,
                op_own: small as u8,
            },
            // 7: the only other code `pack` makes.
            _ => K::SrqLockTimeout(a),
        }
    }

    /// The compact form of an error of the completion path (the errors
    /// [`Cq::poll`](crate::Cq::poll) returns). Every such error has one;
    /// anything else is a broken invariant of this crate.
    #[cold]
    #[inline(never)]
    pub(crate) fn from_poll_path(e: Error) -> Self {
        use PollErrorKind as K;
        let k = match e {
            Error::CqeOpcode { ci, opcode } => Some(K::CqeOpcode { ci, opcode }),
            Error::CqeUnknownQueue { ci, what, key } => Some(K::CqeUnknownQueue { ci, what, key }),
            Error::CqeQpnMismatch { ci, got, expected } => {
                Some(K::CqeQpnMismatch { ci, got, expected })
            }
            Error::CqeWqeCounter { ci, counter, queue } => {
                Some(K::CqeWqeCounter { ci, counter, queue })
            }
            Error::CqeByteCount {
                ci,
                byte_cnt,
                posted,
            } => u32::try_from(posted).ok().map(|posted| K::CqeByteCount {
                ci,
                byte_cnt,
                posted,
            }),
            Error::CqeFormat { ci, op_own } => Some(K::CqeFormat { ci, op_own }),
            Error::SrqLockTimeout(s) => Some(K::SrqLockTimeout(s)),
            _ => None,
        };
        match k.and_then(PollErrorKind::pack) {
            Some(p) => p,
            None => unreachable!("the completion path returned {e:?}, which has no PollError"),
        }
    }
}

impl From<PollErrorKind> for Error {
    #[cold]
    fn from(k: PollErrorKind) -> Self {
        use PollErrorKind as K;
        match k {
            K::CqeOpcode { ci, opcode } => Error::CqeOpcode { ci, opcode },
            K::CqeUnknownQueue { ci, what, key } => Error::CqeUnknownQueue { ci, what, key },
            K::CqeQpnMismatch { ci, got, expected } => Error::CqeQpnMismatch { ci, got, expected },
            K::CqeWqeCounter { ci, counter, queue } => Error::CqeWqeCounter { ci, counter, queue },
            K::CqeByteCount {
                ci,
                byte_cnt,
                posted,
            } => Error::CqeByteCount {
                ci,
                byte_cnt,
                posted: u64::from(posted),
            },
            K::CqeFormat { ci, op_own } => Error::CqeFormat { ci, op_own },
            K::SrqLockTimeout(s) => Error::SrqLockTimeout(s),
        }
    }
}

impl From<PollError> for Error {
    #[inline(always)]
    fn from(e: PollError) -> Self {
        poll_error_to_error(e)
    }
}

/// `Error::from(PollError)` out of line; `extern "C"` (cannot unwind), as
/// [`send_error_to_error`].
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn poll_error_to_error(e: PollError) -> Error {
    Error::from(e.kind())
}

impl core::fmt::Debug for PollError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PollError({:?})", self.kind())
    }
}

impl core::fmt::Display for PollError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&Error::from(*self), f)
    }
}

impl core::error::Error for PollError {}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn send_error_is_two_words_and_round_trips_every_kind() {
        // Two words, the `Ok` in the niche: returned in registers.
        assert_eq!(core::mem::size_of::<Result<(), SendError>>(), 16);
        use SendErrorKind as K;
        let mut kinds = std::vec![
            K::AtomicsDisabled,
            K::UdDestinationMissing,
            K::EthHeadersTooShort,
            K::EthOnNonRawQp,
            K::EthCsumUnsupported,
        ];
        for (a, b) in [(0, 0), (1, u32::MAX), (u32::MAX, 1), (u32::MAX, u32::MAX)] {
            kinds.push(K::QueueFull {
                outstanding: a,
                max_post: b,
            });
            kinds.push(K::TooManySges { got: a, max: b });
            kinds.push(K::AtomicLength { sges: a, len: b });
            kinds.push(K::WqeTooLarge { wqebbs: a, max: b });
        }
        for addr in [0, 1, 0x8000_0000_0000_0007, u64::MAX] {
            kinds.push(K::AtomicMisaligned(addr));
        }
        for op in [
            Opcode::Send,
            Opcode::SendImm,
            Opcode::SendInval,
            Opcode::RdmaWrite,
            Opcode::RdmaWriteImm,
            Opcode::RdmaRead,
            Opcode::AtomicCs,
            Opcode::AtomicFa,
            Opcode::Nop,
        ] {
            for qp_type in QP_TYPES {
                kinds.push(K::WrongOpcodeForQpType { op, qp_type });
            }
        }
        for k in kinds {
            let e = SendError::from(k);
            assert_eq!(e.kind(), k);
            let full = Error::from(e);
            assert_eq!(full, Error::from(k));
            assert_eq!(SendError::from_sge_path(full), e, "{k:?}");
            assert_eq!(e.to_string(), full.to_string());
        }
        assert_eq!(
            Error::from(SendError::from(K::WrongOpcodeForQpType {
                op: Opcode::RdmaRead,
                qp_type: QpType::Uc
            }))
            .to_string(),
            "IBV_WR_RDMA_READ is not valid on a Uc QP"
        );
    }

    #[test]
    fn poll_error_is_two_words_and_round_trips_every_kind() {
        assert_eq!(core::mem::size_of::<PollError>(), 16);
        assert_eq!(core::mem::size_of::<Result<bool, PollError>>(), 16);
        use PollErrorKind as K;
        let mut kinds = std::vec::Vec::new();
        for (ci, a, b) in [
            (0, 0, 0),
            (1, u32::MAX, 1),
            (u32::MAX, 1, u32::MAX),
            (0x12_3456, 0xab_cdef, 0x42),
        ] {
            kinds.push(K::CqeOpcode {
                ci,
                opcode: a as u8,
            });
            for what in POLL_WHAT {
                kinds.push(K::CqeUnknownQueue { ci, what, key: a });
            }
            kinds.push(K::CqeQpnMismatch {
                ci,
                got: a,
                expected: b,
            });
            for queue in POLL_QUEUE {
                kinds.push(K::CqeWqeCounter {
                    ci,
                    counter: b as u16,
                    queue,
                });
            }
            kinds.push(K::CqeByteCount {
                ci,
                byte_cnt: a,
                posted: b,
            });
            kinds.push(K::CqeFormat {
                ci,
                op_own: b as u8,
            });
            kinds.push(K::SrqLockTimeout(a));
        }
        for k in kinds {
            let e = k.pack().unwrap();
            assert_eq!(e.kind(), k);
            let full = Error::from(e);
            assert_eq!(full, Error::from(k));
            assert_eq!(PollError::from_poll_path(full), e, "{k:?}");
            assert_eq!(e.to_string(), full.to_string());
        }
        // Names are the completion path's own strings.
        assert!(
            K::CqeUnknownQueue {
                ci: 0,
                what: "something else",
                key: 0
            }
            .pack()
            .is_none()
        );
        assert_eq!(
            Error::from(
                K::CqeWqeCounter {
                    ci: 3,
                    counter: 9,
                    queue: "SRQ"
                }
                .pack()
                .unwrap()
            )
            .to_string(),
            "CQE 0x3: wqe_counter 0x9 names no outstanding WQE of the SRQ"
        );
    }
}
