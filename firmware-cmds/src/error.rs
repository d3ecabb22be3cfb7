//! The crate's error type.

use crate::status::{CmdError, DeliveryStatus};

/// Everything that can be wrong with a PRM structure, a command-queue entry
/// or a mailbox chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value does not fit the width of its field.
    #[error("value {value:#x} does not fit {layout}.{field} ({width} bits)")]
    FieldOverflow {
        /// `mlx5_ifc` name of the layout.
        layout: &'static str,
        /// Field name.
        field: &'static str,
        /// The value that did not fit.
        value: u64,
        /// Field width in bits.
        width: u32,
    },

    /// An image is shorter than the structure it should hold.
    #[error("{what}: need {need} bytes, got {got}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },

    /// A buffer is too small for what must be written into it.
    #[error("{what}: buffer of {got} bytes, {need} needed")]
    BufferTooSmall {
        /// What was being written.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },

    /// The command-queue entry's type byte is not 0x07 (PCIe command interface).
    #[error("command queue entry type {0:#x}, expected 0x7")]
    BadEntryType(u8),

    /// A mailbox block carries the wrong block number.
    #[error("mailbox block {index}: block_number {found}, expected {index}")]
    BadBlockNumber {
        /// Position of the block in the chain.
        index: u32,
        /// The number the block carries.
        found: u32,
    },

    /// A mailbox block or the entry carries the wrong token.
    #[error("{what}: token {found:#x}, expected {expected:#x}")]
    BadToken {
        /// The entry or block.
        what: &'static str,
        /// Expected token.
        expected: u8,
        /// Token found.
        found: u8,
    },

    /// A signature does not make the covered bytes XOR to 0xff.
    #[error("{what}: bad {which} (covered bytes xor to {xor:#04x}, not 0xff)")]
    BadSignature {
        /// The entry or block.
        what: &'static str,
        /// `signature` or `ctrl_signature`.
        which: &'static str,
        /// XOR of the covered bytes.
        xor: u8,
    },

    /// A mailbox pointer (entry or next-block) does not have the alignment
    /// the PRM requires.
    #[error("{what} {addr:#x} is not aligned to {align} bytes")]
    MisalignedPointer {
        /// Which pointer.
        what: &'static str,
        /// Its value.
        addr: u64,
        /// Alignment required.
        align: u64,
    },

    /// A mailbox chain ends (null next pointer or no more blocks) before the
    /// length the entry announces is covered.
    #[error("mailbox chain too short: {need} blocks needed for {len} bytes, {got} present")]
    ChainTooShort {
        /// Message length the entry announces.
        len: usize,
        /// Blocks needed.
        need: usize,
        /// Blocks present.
        got: usize,
    },

    /// A length announced by the device or a caller contradicts the data.
    #[error("{what}: length {len} is inconsistent ({reason})")]
    BadLength {
        /// Which length.
        what: &'static str,
        /// The length.
        len: usize,
        /// Why it is wrong.
        reason: &'static str,
    },

    /// An opcode that is not in the PRM command list.
    #[error("unknown command opcode {0:#x}")]
    UnknownOpcode(u16),

    /// A command status the PRM does not define.
    #[error("unknown command status {0:#x}")]
    UnknownStatus(u8),

    /// A delivery status the PRM does not define.
    #[error("unknown delivery status {0:#x}")]
    UnknownDeliveryStatus(u8),

    /// The firmware refused the entry itself (bad signature, token, lengths...).
    #[error("command delivery failed: {0}")]
    Delivery(DeliveryStatus),

    /// The firmware executed the command and it failed.
    #[error("{0}")]
    Command(CmdError),

    /// A line of a command dump that cannot be parsed.
    #[error("trace line {line}: {reason}")]
    TraceSyntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Self {
        Error::Command(e)
    }
}
