//! The crate's error type.

use core::fmt;
use core::time::Duration;

use firmware_cmds::init_seg::HealthSyndrome;
use firmware_cmds::{CmdError, DeliveryStatus, Opcode};

use crate::events::QueueId;
use crate::types::{Cqn, Qpn};
use crate::verbs::{QpAttrMask, QpState, WrError, qp_type_name};

/// What a wait was for, in a [`Error::Timeout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The firmware to clear `initializing` after power-on or reset (the
    /// "FW pre-init" wait).
    FirmwareReady,
    /// The firmware to clear `initializing` after the command queue address
    /// was written (the "FW init" wait).
    CommandQueueReady,
    /// A free command queue slot.
    CommandSlot,
    /// A command to complete.
    Command {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
    },
    /// The firmware to give back every page (MANAGE_PAGES take at teardown).
    PageReclaim {
        /// Pages the firmware still held when the wait ended.
        remaining: u64,
    },
    /// A completion event of a CQ (`ibv_get_cq_event`).
    CompletionEvent {
        /// The CQ.
        cqn: Cqn,
    },
    /// An asynchronous event of a QP or SRQ.
    QueueEvent {
        /// The queue.
        queue: QueueId,
        /// `EVENT_TYPE_*` of [`firmware_cmds::eq`].
        event_type: u8,
    },
    /// A work completion on a CQ.
    Completion {
        /// The CQ.
        cqn: Cqn,
    },
    /// The outstanding work requests of a QP in the error state to be
    /// flushed (the drain helper).
    Drain {
        /// The QP.
        qpn: Qpn,
        /// Send work requests still outstanding when the wait ended.
        send: u32,
        /// Receive work requests still outstanding when the wait ended.
        recv: u32,
    },
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::FirmwareReady => {
                f.write_str("the firmware to clear `initializing` (init segment 0x1fc bit 31)")
            }
            Wait::CommandQueueReady => f.write_str(
                "the firmware to clear `initializing` after the command queue address was written",
            ),
            Wait::CommandSlot => f.write_str("a free command queue slot"),
            Wait::Command { opcode, op_mod } => {
                write!(f, "command {opcode} op_mod({op_mod:#x}) to complete")
            }
            Wait::PageReclaim { remaining } => write!(
                f,
                "the firmware to return its pages (MANAGE_PAGES take; {remaining} still held)"
            ),
            Wait::CompletionEvent { cqn } => write!(f, "a completion event of {cqn}"),
            Wait::QueueEvent { queue, event_type } => {
                match firmware_cmds::eq::event_type_name(*event_type) {
                    Some(n) => write!(f, "event {n} of {queue:?}"),
                    None => write!(f, "event {event_type:#x} of {queue:?}"),
                }
            }
            Wait::Completion { cqn } => write!(f, "a work completion on {cqn}"),
            Wait::Drain { qpn, send, recv } => write!(
                f,
                "{qpn} to flush its work requests ({send} send and {recv} receive still outstanding)"
            ),
        }
    }
}

/// Why the device can no longer be used; every command fails fast with
/// this once it is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadReason {
    /// The health buffer's `fw_version` reads all ones: the device does not
    /// answer (surprise removal, PCI error).
    Gone,
    /// The firmware reported a fatal error in the health buffer.
    Fatal {
        /// `health_buffer.synd`.
        syndrome: HealthSyndrome,
        /// `health_buffer.ext_synd`.
        ext_synd: u16,
    },
    /// A wait on the initialization segment (`initializing`) ran out of
    /// time and the register still read all ones: the function never
    /// answered (absent, off the bus, or a reset that never completed).
    NoAnswer {
        /// The wait.
        what: Wait,
        /// How long the wait lasted.
        after: Duration,
        /// How long the reads had been all ones when it ended.
        all_ones_for: Duration,
    },
    /// The health counter stopped changing.
    HealthCounterStalled {
        /// The value it is stuck at.
        counter: u32,
        /// Consecutive polls without a change.
        polls: u32,
    },
}

impl DeadReason {
    /// Whether the device does not answer at all (reads of all ones), as
    /// opposed to firmware that answers and reports a failure: such a
    /// device cannot reach memory either.
    pub fn is_gone(&self) -> bool {
        matches!(self, DeadReason::Gone | DeadReason::NoAnswer { .. })
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadReason::Gone => f.write_str(
                "device is gone: health buffer fw_version reads 0xffffffff (surprise removal or PCI error)",
            ),
            DeadReason::Fatal { syndrome, ext_synd } => write!(
                f,
                "firmware fatal error: health syndrome {syndrome}, ext_synd {ext_synd:#x}"
            ),
            DeadReason::NoAnswer {
                what,
                after,
                all_ones_for,
            } => write!(
                f,
                "device is gone: timed out after {after:?} waiting for {what}, every read returning 0xffffffff for the last {all_ones_for:?} (no device answering at this address, or a reset that never completed)"
            ),
            DeadReason::HealthCounterStalled { counter, polls } => write!(
                f,
                "firmware stopped: health counter stuck at {counter:#x} for {polls} polls"
            ),
        }
    }
}

/// What is wrong with an event queue entry the device wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqeError {
    /// An event type the PRM does not define, or one this EQ was not
    /// subscribed to.
    UnexpectedEventType {
        /// `eqe.event_type`.
        event_type: u8,
    },
    /// A completion or CQ error event for a CQ number nobody registered.
    UnknownCq {
        /// The CQ number in the event.
        cqn: u32,
    },
    /// A QP/RQ/SQ/SRQ event for a number nobody registered.
    UnknownQueue {
        /// `qp_events.type` (0 QP, 1 RQ, 2 SQ) or 0xff for an SRQ event.
        resource_type: u8,
        /// The number in the event.
        number: u32,
    },
    /// A port change event for a port the HCA does not have.
    BadPort {
        /// `port_state_change_event.port_num`.
        port: u8,
    },
    /// A command completion event naming slots that have no command in
    /// flight.
    BadCommandSlots {
        /// The slots named and not in flight.
        vector: u32,
    },
    /// A page request for another function, or for more pages than allowed.
    BadPageRequest {
        /// `pages_req_event.function_id`.
        function_id: u16,
        /// `pages_req_event.num_pages`.
        num_pages: i32,
    },
}

impl fmt::Display for EqeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EqeError::UnexpectedEventType { event_type } => {
                match firmware_cmds::eq::event_type_name(*event_type) {
                    Some(n) => write!(f, "unexpected event type {n}({event_type:#x})"),
                    None => write!(f, "unknown event type {event_type:#x}"),
                }
            }
            EqeError::UnknownCq { cqn } => write!(f, "event for unknown CQ {cqn:#x}"),
            EqeError::UnknownQueue {
                resource_type,
                number,
            } => write!(
                f,
                "event for unknown queue {number:#x} (resource type {resource_type:#x})"
            ),
            EqeError::BadPort { port } => {
                write!(f, "port change event for port {port}, which does not exist")
            }
            EqeError::BadCommandSlots { vector } => write!(
                f,
                "command completion for slots {vector:#x}, which have no command in flight"
            ),
            EqeError::BadPageRequest {
                function_id,
                num_pages,
            } => write!(
                f,
                "page request for function {function_id:#x}, num_pages {num_pages}"
            ),
        }
    }
}

/// Everything the driver can fail at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The firmware executed a command and it failed: prints like Linux,
    /// `CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1a2b3c)`.
    #[error("{0}")]
    Command(CmdError),

    /// The firmware refused the command-queue entry itself (delivery status).
    #[error("{opcode} op_mod({op_mod:#x}) was not delivered: delivery status {status}")]
    Delivery {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
        /// The delivery status the firmware wrote into the entry.
        status: DeliveryStatus,
    },

    /// A wait ran out of time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: Wait,
        /// How long.
        after: Duration,
    },

    /// The device is unusable (gone, fatal health syndrome, stalled
    /// firmware); every command fails fast with this error.
    #[error("{0}")]
    DeviceDead(DeadReason),

    /// A command answer is structurally wrong: mailbox block numbers,
    /// tokens, signatures, chain length.
    #[error("{opcode} op_mod({op_mod:#x}): malformed answer: {error}")]
    MalformedAnswer {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
        /// What is wrong.
        error: firmware_cmds::Error,
    },

    /// A value the device wrote in a command answer is out of range or
    /// contradicts the request.
    #[error("{opcode} op_mod({op_mod:#x}): invalid answer: {field} = {value:#x} ({reason})")]
    InvalidAnswer {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
        /// The field (`layout.field`).
        field: &'static str,
        /// The value found.
        value: u64,
        /// Why it is wrong.
        reason: &'static str,
    },

    /// A register of the initialization segment holds a value the driver
    /// cannot work with.
    #[error("init segment register {register} = {value:#x}: {reason}")]
    InvalidRegister {
        /// The register (`cmdif_rev_fw_sub.cmd_interface_rev`, ...).
        register: &'static str,
        /// Its value.
        value: u32,
        /// Why it is unusable.
        reason: &'static str,
    },

    /// An event queue entry is invalid.
    #[error("EQ {eqn:#x}: invalid event queue entry: {error}")]
    InvalidEqe {
        /// The EQ.
        eqn: u8,
        /// What is wrong with the entry.
        error: EqeError,
    },

    /// The firmware returned a page the driver did not give it, or returned
    /// one twice.
    #[error("MANAGE_PAGES(0x108): the firmware returned page {addr:#x}, which {reason}")]
    BadReturnedPage {
        /// The address returned.
        addr: u64,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The caller passed an argument the driver refuses.
    #[error("invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The argument.
        arg: &'static str,
        /// Why it is refused.
        reason: &'static str,
    },

    /// A fixed-capacity structure of the driver is full.
    #[error("{what} is full ({capacity} entries)")]
    CapacityExceeded {
        /// The structure.
        what: &'static str,
        /// Its capacity.
        capacity: usize,
    },

    /// The platform failed (DMA memory, BAR mapping, configuration space).
    #[error("{what}: {source}")]
    Platform {
        /// What the driver was doing.
        what: &'static str,
        /// The platform's error.
        source: platform::Error,
    },

    /// A PRM layout refused a value (a caller value too wide for its field).
    #[error("{0}")]
    Layout(firmware_cmds::Error),

    /// A work request was refused before anything of it reached the
    /// device. In a list, the ones before `index` were posted (and rung).
    #[error("work request {index} rejected: {reason}")]
    InvalidWorkRequest {
        /// Position of the rejected request in the list (0 for one).
        index: usize,
        /// Why.
        reason: WrError,
    },

    /// The device wrote a completion the data path refuses (an index,
    /// queue number or length out of bounds); it was consumed.
    #[error("invalid completion: {0}")]
    InvalidCompletion(verbs_core::Error),

    /// The data path refused a queue's geometry or memory.
    #[error("data path: {0}")]
    DataPath(verbs_core::Error),

    /// A QP state transition the InfiniBand specification does not have.
    #[error("{} QP: no transition {from} -> {to}", qp_type_name(*qp_type))]
    InvalidTransition {
        /// The QP's transport.
        qp_type: verbs_core::QpType,
        /// The current state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },

    /// The attribute mask of a modify does not match the IB specification's
    /// table of required and optional attributes for the transition.
    #[error(
        "{} QP {from} -> {to}: {}{}{}",
        qp_type_name(*qp_type),
        if missing.is_empty() { "" } else { "missing required " },
        MaskIfAny(*missing),
        ForbiddenPart(*missing, *forbidden)
    )]
    QpAttrMask {
        /// The QP's transport.
        qp_type: verbs_core::QpType,
        /// The current state.
        from: QpState,
        /// The state asked for.
        to: QpState,
        /// Required attributes not in the mask.
        missing: QpAttrMask,
        /// Attributes in the mask the transition does not take.
        forbidden: QpAttrMask,
    },

    /// An attribute value out of range for the device or the port.
    #[error("attribute {attr} = {value:#x}: {reason}")]
    InvalidAttribute {
        /// The attribute (`ibv_qp_attr` / `ibv_ah_attr` field name).
        attr: &'static str,
        /// Its value.
        value: u64,
        /// Why it is refused.
        reason: &'static str,
    },

    /// Something this device (or this driver) cannot do.
    #[error("not supported: {0}")]
    Unsupported(&'static str),

    /// An object cannot be destroyed while others use it.
    #[error("{what} is still used by {users} other object(s)")]
    InUse {
        /// The object.
        what: &'static str,
        /// How many objects use it.
        users: u32,
    },

    /// An address handle cannot be built.
    #[error("address handle: {0}")]
    AddressHandle(verbs_core::av::AhError),
}

/// Prints a mask unless it is empty.
struct MaskIfAny(QpAttrMask);

impl fmt::Display for MaskIfAny {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// The forbidden part of a mask error, after the missing part.
struct ForbiddenPart(QpAttrMask, QpAttrMask);

impl fmt::Display for ForbiddenPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (missing, forbidden) = (self.0, self.1);
        if forbidden.is_empty() {
            return Ok(());
        }
        if !missing.is_empty() {
            f.write_str("; ")?;
        }
        write!(f, "not allowed {forbidden}")
    }
}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Self {
        Error::Command(e)
    }
}

impl From<firmware_cmds::Error> for Error {
    fn from(e: firmware_cmds::Error) -> Self {
        match e {
            firmware_cmds::Error::Command(c) => Error::Command(c),
            e => Error::Layout(e),
        }
    }
}

/// A CQE the data path refused ([`Cq::poll_one`](crate::verbs::Cq::poll_one)'s
/// two-word error): [`Error::InvalidCompletion`] with the full error.
impl From<verbs_core::PollError> for Error {
    fn from(e: verbs_core::PollError) -> Self {
        Error::InvalidCompletion(e.into())
    }
}

impl From<DeadReason> for Error {
    fn from(r: DeadReason) -> Self {
        Error::DeviceDead(r)
    }
}

impl Error {
    /// The firmware failure, if this is one.
    pub fn command_error(&self) -> Option<&CmdError> {
        match self {
            Error::Command(c) => Some(c),
            _ => None,
        }
    }

    /// Whether this error means the device is unusable.
    pub fn is_device_dead(&self) -> bool {
        matches!(self, Error::DeviceDead(_))
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use firmware_cmds::CmdStatus;

    use super::*;

    #[test]
    fn firmware_failures_print_like_linux() {
        let e = Error::from(CmdError {
            opcode: Opcode::CREATE_CQ,
            op_mod: 0,
            status: CmdStatus::LIM_EXCEEDED,
            syndrome: 0x62bbc6,
        });
        assert_eq!(
            format!("{e}"),
            "CREATE_CQ(0x400) op_mod(0x0) failed, status limits exceeded(0x8), syndrome (0x62bbc6)"
        );
    }

    #[test]
    fn delivery_and_timeouts_name_the_command() {
        let e = Error::Delivery {
            opcode: Opcode::MANAGE_PAGES,
            op_mod: 1,
            status: DeliveryStatus::TOKEN_ERR,
        };
        assert_eq!(
            format!("{e}"),
            "MANAGE_PAGES(0x108) op_mod(0x1) was not delivered: delivery status token error(0x2)"
        );
        let e = Error::Timeout {
            what: Wait::Command {
                opcode: Opcode::ENABLE_HCA,
                op_mod: 0,
            },
            after: Duration::from_secs(60),
        };
        assert_eq!(
            format!("{e}"),
            "timed out after 60s waiting for command ENABLE_HCA(0x104) op_mod(0x0) to complete"
        );
        let e = Error::Timeout {
            what: Wait::PageReclaim { remaining: 3 },
            after: Duration::from_secs(5),
        };
        assert!(format!("{e}").contains("3 still held"));
    }

    #[test]
    fn dead_device_names_the_syndrome() {
        let e = Error::from(DeadReason::Fatal {
            syndrome: HealthSyndrome::HW_FTL_ERR,
            ext_synd: 0x1234,
        });
        assert_eq!(
            format!("{e}"),
            "firmware fatal error: health syndrome HW fatal error(0xb), ext_synd 0x1234"
        );
        assert!(e.is_device_dead());
        assert!(format!("{}", Error::from(DeadReason::Gone)).contains("0xffffffff"));
    }

    #[test]
    fn invalid_answers_name_field_and_value() {
        let e = Error::InvalidAnswer {
            opcode: Opcode::MANAGE_PAGES,
            op_mod: 2,
            field: "manage_pages_out.output_num_entries",
            value: 9,
            reason: "more pages than asked for (4)",
        };
        assert_eq!(
            format!("{e}"),
            "MANAGE_PAGES(0x108) op_mod(0x2): invalid answer: manage_pages_out.output_num_entries = 0x9 (more pages than asked for (4))"
        );
        let e = Error::InvalidEqe {
            eqn: 7,
            error: EqeError::UnexpectedEventType { event_type: 0x3f },
        };
        assert_eq!(
            format!("{e}"),
            "EQ 0x7: invalid event queue entry: unknown event type 0x3f"
        );
        let e = Error::InvalidArgument {
            arg: "log_eq_size",
            reason: "above log_max_eq_sz",
        };
        assert_eq!(
            format!("{e}"),
            "invalid argument `log_eq_size`: above log_max_eq_sz"
        );
    }
}
