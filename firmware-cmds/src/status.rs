//! Command return status, delivery status, and the firmware-failure error.

use core::fmt;

use crate::opcode::Opcode;

/// The command return status: byte 0 of every command output.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmdStatus(pub u8);

#[allow(missing_docs)] // Each constant is the PRM status of the same name.
impl CmdStatus {
    pub const OK: CmdStatus = CmdStatus(0x00);
    pub const INTERNAL_ERR: CmdStatus = CmdStatus(0x01);
    pub const BAD_OP: CmdStatus = CmdStatus(0x02);
    pub const BAD_PARAM: CmdStatus = CmdStatus(0x03);
    pub const BAD_SYS_STATE: CmdStatus = CmdStatus(0x04);
    pub const BAD_RES: CmdStatus = CmdStatus(0x05);
    pub const RES_BUSY: CmdStatus = CmdStatus(0x06);
    pub const NOT_READY: CmdStatus = CmdStatus(0x07);
    pub const LIM_EXCEEDED: CmdStatus = CmdStatus(0x08);
    pub const BAD_RES_STATE: CmdStatus = CmdStatus(0x09);
    pub const IX_ERR: CmdStatus = CmdStatus(0x0a);
    pub const NO_RESOURCES: CmdStatus = CmdStatus(0x0f);
    pub const BAD_QP_STATE: CmdStatus = CmdStatus(0x10);
    pub const BAD_PKT: CmdStatus = CmdStatus(0x30);
    pub const BAD_SIZE_OUTS_CQES: CmdStatus = CmdStatus(0x40);
    pub const BAD_INP_LEN: CmdStatus = CmdStatus(0x50);
    pub const BAD_OUTP_LEN: CmdStatus = CmdStatus(0x51);
}

/// `(status, name)` for every status the PRM defines, names as Linux prints
/// them.
pub const CMD_STATUSES: &[(u8, &str)] = &[
    (0x00, "OK"),
    (0x01, "internal error"),
    (0x02, "bad operation"),
    (0x03, "bad parameter"),
    (0x04, "bad system state"),
    (0x05, "bad resource"),
    (0x06, "resource busy"),
    (0x07, "FW not ready"),
    (0x08, "limits exceeded"),
    (0x09, "bad resource state"),
    (0x0a, "bad index"),
    (0x0f, "no resources"),
    (0x10, "bad QP state"),
    (0x30, "bad packet (discarded)"),
    (0x40, "bad size too many outstanding CQEs"),
    (0x50, "bad input length"),
    (0x51, "bad output length"),
];

impl CmdStatus {
    /// The name, or `None` for a status the PRM does not define.
    pub fn name(self) -> Option<&'static str> {
        CMD_STATUSES
            .iter()
            .find(|&&(s, _)| s == self.0)
            .map(|&(_, n)| n)
    }

    /// Whether the PRM defines this status.
    pub fn is_known(self) -> bool {
        self.name().is_some()
    }

    /// Whether the command succeeded.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }
}

/// `bad parameter(0x3)`.
impl fmt::Display for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({:#x})",
            self.name().unwrap_or("unknown status"),
            self.0
        )
    }
}

impl fmt::Debug for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The delivery status: bits 7:1 of the command-queue entry's `status_own`
/// byte, the firmware's verdict on the entry and mailboxes themselves.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryStatus(pub u8);

#[allow(missing_docs)] // Each constant is the PRM delivery status of the same name.
impl DeliveryStatus {
    pub const OK: DeliveryStatus = DeliveryStatus(0x00);
    pub const SIGNATURE_ERR: DeliveryStatus = DeliveryStatus(0x01);
    pub const TOKEN_ERR: DeliveryStatus = DeliveryStatus(0x02);
    pub const BAD_BLOCK_NUMBER: DeliveryStatus = DeliveryStatus(0x03);
    pub const OUTPUT_POINTER_NOT_ALIGNED: DeliveryStatus = DeliveryStatus(0x04);
    pub const INPUT_POINTER_NOT_ALIGNED: DeliveryStatus = DeliveryStatus(0x05);
    pub const FW_INTERNAL_ERR: DeliveryStatus = DeliveryStatus(0x06);
    pub const INPUT_LEN_ERR: DeliveryStatus = DeliveryStatus(0x07);
    pub const OUTPUT_LEN_ERR: DeliveryStatus = DeliveryStatus(0x08);
    pub const RES_FLD_NOT_CLR_ERR: DeliveryStatus = DeliveryStatus(0x09);
    pub const CMD_DESCRIPTOR_TYPE_ERR: DeliveryStatus = DeliveryStatus(0x10);
}

/// `(delivery status, name)`, names as Linux prints them.
pub const DELIVERY_STATUSES: &[(u8, &str)] = &[
    (0x00, "no errors"),
    (0x01, "signature error"),
    (0x02, "token error"),
    (0x03, "bad block number"),
    (0x04, "output pointer not aligned to block size"),
    (0x05, "input pointer not aligned to block size"),
    (0x06, "firmware internal error"),
    (0x07, "command input length error"),
    (0x08, "command output length error"),
    (0x09, "reserved fields not cleared"),
    (0x10, "bad command descriptor type"),
];

impl DeliveryStatus {
    /// The name, or `None` for a value the PRM does not define.
    pub fn name(self) -> Option<&'static str> {
        DELIVERY_STATUSES
            .iter()
            .find(|&&(s, _)| s == self.0)
            .map(|&(_, n)| n)
    }

    /// Whether the PRM defines this value.
    pub fn is_known(self) -> bool {
        self.name().is_some()
    }

    /// Whether the entry was delivered without error.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }
}

/// `token error(0x2)`.
impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({:#x})",
            self.name().unwrap_or("unknown status code"),
            self.0
        )
    }
}

impl fmt::Debug for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A command the firmware executed and failed: what Linux prints as
/// `CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1a2b3c)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmdError {
    /// The command.
    pub opcode: Opcode,
    /// Its op_mod.
    pub op_mod: u16,
    /// The return status (never OK).
    pub status: CmdStatus,
    /// The firmware's syndrome, which identifies the exact check that failed.
    pub syndrome: u32,
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} op_mod({:#x}) failed, status {}, syndrome ({:#x})",
            self.opcode, self.op_mod, self.status, self.syndrome
        )
    }
}

impl core::error::Error for CmdError {}

/// Reads status and syndrome from the first 8 bytes of a command output.
///
/// Returns `Ok(())` for status OK, the [`CmdError`] otherwise.
pub fn check_output(opcode: Opcode, op_mod: u16, out: &[u8; 8]) -> Result<(), CmdError> {
    let status = CmdStatus(out[0]);
    if status.is_ok() {
        return Ok(());
    }
    let syndrome = u32::from_be_bytes([out[4], out[5], out[6], out[7]]);
    Err(CmdError {
        opcode,
        op_mod,
        status,
        syndrome,
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn error_prints_like_linux() {
        let e = CmdError {
            opcode: Opcode::CREATE_QP,
            op_mod: 0,
            status: CmdStatus::BAD_PARAM,
            syndrome: 0x1a2b3c,
        };
        assert_eq!(
            format!("{e}"),
            "CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1a2b3c)"
        );
        let e = CmdError {
            opcode: Opcode::CREATE_CQ,
            op_mod: 0,
            status: CmdStatus(0x8),
            syndrome: 0x62bbc6,
        };
        assert_eq!(
            format!("{e}"),
            "CREATE_CQ(0x400) op_mod(0x0) failed, status limits exceeded(0x8), syndrome (0x62bbc6)"
        );
    }

    #[test]
    fn unknown_values_are_named_as_unknown() {
        assert_eq!(format!("{}", CmdStatus(0x77)), "unknown status(0x77)");
        assert!(!CmdStatus(0x77).is_known());
        assert_eq!(format!("{}", DeliveryStatus(0x2)), "token error(0x2)");
        assert_eq!(
            format!("{}", DeliveryStatus(0x11)),
            "unknown status code(0x11)"
        );
    }

    #[test]
    fn check_output_reads_status_and_syndrome() {
        assert!(check_output(Opcode::NOP, 0, &[0, 0, 0, 0, 0, 0, 0, 0]).is_ok());
        let e = check_output(Opcode::NOP, 1, &[5, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]).unwrap_err();
        assert_eq!(e.status, CmdStatus::BAD_RES);
        assert_eq!(e.syndrome, 0xdead_beef);
        assert_eq!(e.op_mod, 1);
    }
}
