//! Event queues: the EQ context (`eqc`), CREATE_EQ, DESTROY_EQ, QUERY_EQ,
//! the 64-byte event queue entry (`eqe`), the event types and sub-types, and
//! the event data layouts.
//!
//! An EQE at consumer index `ci` of an EQ of `2^log_eq_size` entries belongs
//! to software when its `owner` bit equals `(ci >> log_eq_size) & 1`;
//! initialise every entry's owner bit to 1 before CREATE_EQ
//! ([`EQE_OWNER_INIT`]).

use core::fmt;

use crate::Error;
use crate::prm_struct;

/// Size of one EQE.
pub const EQE_SIZE: usize = 64;
/// Byte offset of the owner byte (bit 0) in an EQE.
pub const EQE_OWNER_OFFSET: usize = 0x3f;
/// The owner byte every EQE is initialised with before CREATE_EQ.
pub const EQE_OWNER_INIT: u8 = 0x01;

/// `eqc.st`: armed, an event will be generated on the next EQE.
pub const EQ_STATE_ARMED: u8 = 0x9;
/// `eqc.st`: fired, an event was generated and the EQ is not armed.
pub const EQ_STATE_FIRED: u8 = 0xa;
/// `eqc.st`: always armed.
pub const EQ_STATE_ALWAYS_ARMED: u8 = 0xb;

/// `eqc.status`: OK.
pub const EQ_STATUS_OK: u8 = 0x0;
/// `eqc.status`: EQ write failure.
pub const EQ_STATUS_WRITE_FAILURE: u8 = 0xa;

/// Event type `MLX5_EVENT_TYPE_COMP`: completion on a CQ ([`CompEvent`]).
pub const EVENT_TYPE_COMP: u8 = 0x00;
/// Event type `MLX5_EVENT_TYPE_PATH_MIG`: path migrated ([`QpEvents`]).
pub const EVENT_TYPE_PATH_MIG: u8 = 0x01;
/// Event type `MLX5_EVENT_TYPE_COMM_EST`: communication established
/// ([`QpEvents`]).
pub const EVENT_TYPE_COMM_EST: u8 = 0x02;
/// Event type `MLX5_EVENT_TYPE_SQ_DRAINED`: send queue drained
/// ([`QpEvents`]).
pub const EVENT_TYPE_SQ_DRAINED: u8 = 0x03;
/// Event type `MLX5_EVENT_TYPE_CQ_ERROR`: CQ error ([`CqError`]).
pub const EVENT_TYPE_CQ_ERROR: u8 = 0x04;
/// Event type `MLX5_EVENT_TYPE_WQ_CATAS_ERROR`: work queue catastrophic
/// error ([`QpEvents`]).
pub const EVENT_TYPE_WQ_CATAS_ERROR: u8 = 0x05;
/// Event type `MLX5_EVENT_TYPE_PATH_MIG_FAILED`: path migration failed
/// ([`QpEvents`]).
pub const EVENT_TYPE_PATH_MIG_FAILED: u8 = 0x07;
/// Event type `MLX5_EVENT_TYPE_INTERNAL_ERROR`: internal error (check the
/// health buffer).
pub const EVENT_TYPE_INTERNAL_ERROR: u8 = 0x08;
/// Event type `MLX5_EVENT_TYPE_PORT_CHANGE`: port state change
/// ([`PortStateChangeEvent`], sub-type `PORT_CHANGE_SUBTYPE_*`).
pub const EVENT_TYPE_PORT_CHANGE: u8 = 0x09;
/// Event type `MLX5_EVENT_TYPE_CMD`: command completion
/// ([`CmdInterCompEvent`]).
pub const EVENT_TYPE_CMD: u8 = 0x0a;
/// Event type `MLX5_EVENT_TYPE_PAGE_REQUEST`: the firmware asks for or
/// returns pages ([`PagesReqEvent`]).
pub const EVENT_TYPE_PAGE_REQUEST: u8 = 0x0b;
/// Event type `MLX5_EVENT_TYPE_PAGE_FAULT`: on-demand paging fault.
pub const EVENT_TYPE_PAGE_FAULT: u8 = 0x0c;
/// Event type `MLX5_EVENT_TYPE_NIC_VPORT_CHANGE`: NIC vport context changed.
pub const EVENT_TYPE_NIC_VPORT_CHANGE: u8 = 0x0d;
/// Event type `MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED`.
pub const EVENT_TYPE_ESW_FUNCTIONS_CHANGED: u8 = 0x0e;
/// Event type `MLX5_EVENT_TYPE_VHCA_STATE_CHANGE`.
pub const EVENT_TYPE_VHCA_STATE_CHANGE: u8 = 0x0f;
/// Event type `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`: invalid request local
/// work queue error ([`QpEvents`]).
pub const EVENT_TYPE_WQ_INVAL_REQ_ERROR: u8 = 0x10;
/// Event type `MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`: local access violation work
/// queue error ([`QpEvents`]).
pub const EVENT_TYPE_WQ_ACCESS_ERROR: u8 = 0x11;
/// Event type `MLX5_EVENT_TYPE_SRQ_CATAS_ERROR`: SRQ catastrophic error
/// ([`QpEvents`] with the SRQ number).
pub const EVENT_TYPE_SRQ_CATAS_ERROR: u8 = 0x12;
/// Event type `MLX5_EVENT_TYPE_SRQ_LAST_WQE`: last WQE reached
/// ([`QpEvents`]).
pub const EVENT_TYPE_SRQ_LAST_WQE: u8 = 0x13;
/// Event type `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT`: SRQ limit reached
/// ([`QpEvents`] with the SRQ number).
pub const EVENT_TYPE_SRQ_RQ_LIMIT: u8 = 0x14;
/// Event type `MLX5_EVENT_TYPE_GPIO_EVENT`.
pub const EVENT_TYPE_GPIO_EVENT: u8 = 0x15;
/// Event type `MLX5_EVENT_TYPE_PORT_MODULE_EVENT`: cable module plugged,
/// unplugged or in error.
pub const EVENT_TYPE_PORT_MODULE_EVENT: u8 = 0x16;
/// Event type `MLX5_EVENT_TYPE_TEMP_WARN_EVENT`: temperature warning.
pub const EVENT_TYPE_TEMP_WARN_EVENT: u8 = 0x17;
/// Event type `MLX5_EVENT_TYPE_XRQ_ERROR`.
pub const EVENT_TYPE_XRQ_ERROR: u8 = 0x18;
/// Event type `MLX5_EVENT_TYPE_REMOTE_CONFIG`.
pub const EVENT_TYPE_REMOTE_CONFIG: u8 = 0x19;
/// Event type `MLX5_EVENT_TYPE_DB_BF_CONGESTION`: doorbell/BlueFlame
/// congestion.
pub const EVENT_TYPE_DB_BF_CONGESTION: u8 = 0x1a;
/// Event type `MLX5_EVENT_TYPE_STALL_EVENT`: VL stall.
pub const EVENT_TYPE_STALL_EVENT: u8 = 0x1b;
/// Event type `MLX5_EVENT_TYPE_DCT_DRAINED` ([`DctEvents`]).
pub const EVENT_TYPE_DCT_DRAINED: u8 = 0x1c;
/// Event type `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION` ([`DctEvents`]).
pub const EVENT_TYPE_DCT_KEY_VIOLATION: u8 = 0x1d;
/// Event type `MLX5_EVENT_TYPE_FPGA_ERROR`.
pub const EVENT_TYPE_FPGA_ERROR: u8 = 0x20;
/// Event type `MLX5_EVENT_TYPE_FPGA_QP_ERROR`.
pub const EVENT_TYPE_FPGA_QP_ERROR: u8 = 0x21;
/// Event type `MLX5_EVENT_TYPE_GENERAL_EVENT`.
pub const EVENT_TYPE_GENERAL_EVENT: u8 = 0x22;
/// Event type `MLX5_EVENT_TYPE_MONITOR_COUNTER`.
pub const EVENT_TYPE_MONITOR_COUNTER: u8 = 0x24;
/// Event type `MLX5_EVENT_TYPE_PPS_EVENT`: pulse per second.
pub const EVENT_TYPE_PPS_EVENT: u8 = 0x25;
/// Event type `MLX5_EVENT_TYPE_DEVICE_TRACER`.
pub const EVENT_TYPE_DEVICE_TRACER: u8 = 0x26;
/// Event type `MLX5_EVENT_TYPE_OBJECT_CHANGE`.
pub const EVENT_TYPE_OBJECT_CHANGE: u8 = 0x27;

/// `(event type, name)` for every event type above, names as Linux's
/// `eqe_type_str()` prints them.
pub const EVENT_TYPES: &[(u8, &str)] = &[
    (EVENT_TYPE_COMP, "MLX5_EVENT_TYPE_COMP"),
    (EVENT_TYPE_PATH_MIG, "MLX5_EVENT_TYPE_PATH_MIG"),
    (EVENT_TYPE_COMM_EST, "MLX5_EVENT_TYPE_COMM_EST"),
    (EVENT_TYPE_SQ_DRAINED, "MLX5_EVENT_TYPE_SQ_DRAINED"),
    (EVENT_TYPE_CQ_ERROR, "MLX5_EVENT_TYPE_CQ_ERROR"),
    (EVENT_TYPE_WQ_CATAS_ERROR, "MLX5_EVENT_TYPE_WQ_CATAS_ERROR"),
    (
        EVENT_TYPE_PATH_MIG_FAILED,
        "MLX5_EVENT_TYPE_PATH_MIG_FAILED",
    ),
    (EVENT_TYPE_INTERNAL_ERROR, "MLX5_EVENT_TYPE_INTERNAL_ERROR"),
    (EVENT_TYPE_PORT_CHANGE, "MLX5_EVENT_TYPE_PORT_CHANGE"),
    (EVENT_TYPE_CMD, "MLX5_EVENT_TYPE_CMD"),
    (EVENT_TYPE_PAGE_REQUEST, "MLX5_EVENT_TYPE_PAGE_REQUEST"),
    (EVENT_TYPE_PAGE_FAULT, "MLX5_EVENT_TYPE_PAGE_FAULT"),
    (
        EVENT_TYPE_NIC_VPORT_CHANGE,
        "MLX5_EVENT_TYPE_NIC_VPORT_CHANGE",
    ),
    (
        EVENT_TYPE_ESW_FUNCTIONS_CHANGED,
        "MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED",
    ),
    (
        EVENT_TYPE_VHCA_STATE_CHANGE,
        "MLX5_EVENT_TYPE_VHCA_STATE_CHANGE",
    ),
    (
        EVENT_TYPE_WQ_INVAL_REQ_ERROR,
        "MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR",
    ),
    (
        EVENT_TYPE_WQ_ACCESS_ERROR,
        "MLX5_EVENT_TYPE_WQ_ACCESS_ERROR",
    ),
    (
        EVENT_TYPE_SRQ_CATAS_ERROR,
        "MLX5_EVENT_TYPE_SRQ_CATAS_ERROR",
    ),
    (EVENT_TYPE_SRQ_LAST_WQE, "MLX5_EVENT_TYPE_SRQ_LAST_WQE"),
    (EVENT_TYPE_SRQ_RQ_LIMIT, "MLX5_EVENT_TYPE_SRQ_RQ_LIMIT"),
    (EVENT_TYPE_GPIO_EVENT, "MLX5_EVENT_TYPE_GPIO_EVENT"),
    (
        EVENT_TYPE_PORT_MODULE_EVENT,
        "MLX5_EVENT_TYPE_PORT_MODULE_EVENT",
    ),
    (
        EVENT_TYPE_TEMP_WARN_EVENT,
        "MLX5_EVENT_TYPE_TEMP_WARN_EVENT",
    ),
    (EVENT_TYPE_XRQ_ERROR, "MLX5_EVENT_TYPE_XRQ_ERROR"),
    (EVENT_TYPE_REMOTE_CONFIG, "MLX5_EVENT_TYPE_REMOTE_CONFIG"),
    (
        EVENT_TYPE_DB_BF_CONGESTION,
        "MLX5_EVENT_TYPE_DB_BF_CONGESTION",
    ),
    (EVENT_TYPE_STALL_EVENT, "MLX5_EVENT_TYPE_STALL_EVENT"),
    (EVENT_TYPE_DCT_DRAINED, "MLX5_EVENT_TYPE_DCT_DRAINED"),
    (
        EVENT_TYPE_DCT_KEY_VIOLATION,
        "MLX5_EVENT_TYPE_DCT_KEY_VIOLATION",
    ),
    (EVENT_TYPE_FPGA_ERROR, "MLX5_EVENT_TYPE_FPGA_ERROR"),
    (EVENT_TYPE_FPGA_QP_ERROR, "MLX5_EVENT_TYPE_FPGA_QP_ERROR"),
    (EVENT_TYPE_GENERAL_EVENT, "MLX5_EVENT_TYPE_GENERAL_EVENT"),
    (
        EVENT_TYPE_MONITOR_COUNTER,
        "MLX5_EVENT_TYPE_MONITOR_COUNTER",
    ),
    (EVENT_TYPE_PPS_EVENT, "MLX5_EVENT_TYPE_PPS_EVENT"),
    (EVENT_TYPE_DEVICE_TRACER, "MLX5_EVENT_TYPE_DEVICE_TRACER"),
    (EVENT_TYPE_OBJECT_CHANGE, "MLX5_EVENT_TYPE_OBJECT_CHANGE"),
];

/// The name of event type `t`, or `None` for a type the PRM does not define.
pub fn event_type_name(t: u8) -> Option<&'static str> {
    EVENT_TYPES.iter().find(|&&(v, _)| v == t).map(|&(_, n)| n)
}

/// Port change sub-type: the port went down.
pub const PORT_CHANGE_SUBTYPE_DOWN: u8 = 1;
/// Port change sub-type: the port became active.
pub const PORT_CHANGE_SUBTYPE_ACTIVE: u8 = 4;
/// Port change sub-type: the port was initialized.
pub const PORT_CHANGE_SUBTYPE_INITIALIZED: u8 = 5;
/// Port change sub-type: the LID changed.
pub const PORT_CHANGE_SUBTYPE_LID: u8 = 6;
/// Port change sub-type: the P_Key table changed.
pub const PORT_CHANGE_SUBTYPE_PKEY: u8 = 7;
/// Port change sub-type: the GUID changed.
pub const PORT_CHANGE_SUBTYPE_GUID: u8 = 8;
/// Port change sub-type: client re-register.
pub const PORT_CHANGE_SUBTYPE_CLIENT_REREG: u8 = 9;

/// `(sub-type, name)` of the port change event sub-types.
pub const PORT_CHANGE_SUBTYPES: &[(u8, &str)] = &[
    (PORT_CHANGE_SUBTYPE_DOWN, "DOWN"),
    (PORT_CHANGE_SUBTYPE_ACTIVE, "ACTIVE"),
    (PORT_CHANGE_SUBTYPE_INITIALIZED, "INITIALIZED"),
    (PORT_CHANGE_SUBTYPE_LID, "LID"),
    (PORT_CHANGE_SUBTYPE_PKEY, "PKEY"),
    (PORT_CHANGE_SUBTYPE_GUID, "GUID"),
    (PORT_CHANGE_SUBTYPE_CLIENT_REREG, "CLIENT_REREG"),
];

/// The name of port change sub-type `s`.
pub fn port_change_subtype_name(s: u8) -> Option<&'static str> {
    PORT_CHANGE_SUBTYPES
        .iter()
        .find(|&&(v, _)| v == s)
        .map(|&(_, n)| n)
}

/// `cq_error.syndrome`: CQ overrun.
pub const CQ_ERROR_SYNDROME_CQ_OVERRUN: u8 = 0x1;
/// `cq_error.syndrome`: CQ access violation.
pub const CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR: u8 = 0x2;

/// `qp_events.type`: the resource is a QP (`MLX5_EVENT_QUEUE_TYPE_QP`).
pub const EVENT_QUEUE_TYPE_QP: u8 = 0;
/// `qp_events.type`: the resource is an RQ.
pub const EVENT_QUEUE_TYPE_RQ: u8 = 1;
/// `qp_events.type`: the resource is an SQ.
pub const EVENT_QUEUE_TYPE_SQ: u8 = 2;
/// `qp_events.type`: the resource is a DCT.
pub const EVENT_QUEUE_TYPE_DCT: u8 = 6;

/// The EQ doorbell word: `(consumer_index & 0xffffff) | eqn << 24`, written
/// big-endian to UAR + [`UAR_EQ_DOORBELL_ARM_OFFSET`](crate::uar::UAR_EQ_DOORBELL_ARM_OFFSET)
/// (update and re-arm) or UAR + 0x48 (update only).
pub const fn eq_doorbell_value(eqn: u8, consumer_index: u32) -> u32 {
    (consumer_index & 0x00ff_ffff) | ((eqn as u32) << 24)
}

prm_struct! {
    /// Event queue context (`eqc`), 64 bytes.
    pub struct Eqc("eqc", 0x40) {
        /// EQ status (`EQ_STATUS_*`).
        status: u8 = 0x00[31:28],
        /// Event collapse: all EQEs are written to entry 0.
        ec: bool = 0x00[18:18],
        /// Overrun ignore.
        oi: bool = 0x00[17:17],
        /// Arm state (`EQ_STATE_*`).
        st: u8 = 0x00[11:8],
        /// Offset of the EQ in its first page, in 64-byte units.
        page_offset: u8 = 0x08[11:6],
        /// log2 of the number of EQEs.
        log_eq_size: u8 = 0x0c[28:24],
        /// UAR page whose doorbells drive the EQ.
        uar_page: u32 = 0x0c[23:0],
        /// MSI-X vector the EQ interrupts on.
        intr: u8 = 0x14[7:0],
        /// log2 of the page size in 4 KiB units.
        log_page_size: u8 = 0x18[28:24],
        /// Consumer counter.
        consumer_counter: u32 = 0x28[23:0],
        /// Producer counter.
        producer_counter: u32 = 0x2c[23:0],
    }
}

prm_struct! {
    /// CREATE_EQ input (`create_eq_in`), followed by the page list (`pas`).
    pub struct CreateEqIn("create_eq_in", 0x110): command CREATE_EQ -> CreateEqOut {
        /// Opcode (CREATE_EQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The EQ context.
        eq_context_entry: Eqc = 0x10,
        /// Events routed to this EQ: four 64-bit big-endian words, bit `t %
        /// 64` of word `t / 64` for event type `t` (see
        /// [`CreateEqIn::set_event`]). Older firmware knows only word 0.
        event_bitmask: [u8; 32] = 0x58,
        /// Physical address list of the EQ buffer.
        pas: [u64] = 0x110,
    }
}

impl CreateEqIn {
    /// Word `i` (0..4) of `event_bitmask`.
    pub fn event_bitmask_word(&self, i: usize) -> Option<u64> {
        if i >= 4 {
            return None;
        }
        let start = 0x58 + 8 * i;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[start..start + 8]);
        Some(u64::from_be_bytes(b))
    }

    /// Routes event type `event_type` to this EQ.
    pub fn set_event(&mut self, event_type: u8) -> &mut Self {
        let i = usize::from(event_type / 64);
        let byte = 0x58 + 8 * i + 7 - usize::from(event_type % 64) / 8;
        self.0[byte] |= 1 << (event_type % 8);
        self
    }

    /// Whether event type `event_type` is routed to this EQ.
    pub fn has_event(&self, event_type: u8) -> bool {
        let i = usize::from(event_type / 64);
        self.event_bitmask_word(i)
            .is_some_and(|w| w & (1 << (event_type % 64)) != 0)
    }
}

prm_struct! {
    /// CREATE_EQ output (`create_eq_out`).
    pub struct CreateEqOut("create_eq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The EQ number.
        eq_number: u8 = 0x08[7:0],
    }
}

prm_struct! {
    /// DESTROY_EQ input (`destroy_eq_in`).
    pub struct DestroyEqIn("destroy_eq_in", 0x10): command DESTROY_EQ -> DestroyEqOut {
        /// Opcode (DESTROY_EQ).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// EQ to destroy.
        eq_number: u8 = 0x08[7:0],
    }
}

prm_struct! {
    /// DESTROY_EQ output (`destroy_eq_out`).
    pub struct DestroyEqOut("destroy_eq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_EQ input (`query_eq_in`).
    pub struct QueryEqIn("query_eq_in", 0x10): command QUERY_EQ -> QueryEqOut {
        /// Opcode (QUERY_EQ).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// EQ to query.
        eq_number: u8 = 0x08[7:0],
    }
}

prm_struct! {
    /// QUERY_EQ output (`query_eq_out`), followed by the page list.
    pub struct QueryEqOut("query_eq_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The EQ context.
        eq_context_entry: Eqc = 0x10,
        /// Events routed to the EQ (word 0).
        event_bitmask: u64 = 0x58[63:0],
        /// Physical address list.
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// Event data of a command completion event (`cmd_inter_comp_event`).
    pub struct CmdInterCompEvent("cmd_inter_comp_event", 0x1c) {
        /// Bit n set: command queue slot n completed.
        command_completion_vector: u32 = 0x00[31:0],
    }
}

prm_struct! {
    /// Event data of a page request event (`pages_req_event`).
    pub struct PagesReqEvent("pages_req_event", 0x1c) {
        /// Function the pages are for.
        function_id: u16 = 0x00[15:0],
        /// Pages requested: a signed 32-bit number, positive to give pages,
        /// negative to take pages back (see [`PagesReqEvent::num_pages_signed`]).
        num_pages: u32 = 0x04[31:0],
    }
}

impl PagesReqEvent {
    /// `num_pages` as the signed number the PRM defines.
    pub fn num_pages_signed(&self) -> i32 {
        self.get(Self::num_pages) as i32
    }
}

prm_struct! {
    /// Event data of a port state change event (`port_state_change_event`).
    pub struct PortStateChangeEvent("port_state_change_event", 0x1c) {
        /// The port (1-based).
        port_num: u8 = 0x08[31:28],
    }
}

prm_struct! {
    /// Event data of a completion event (`comp_event`).
    pub struct CompEvent("comp_event", 0x1c) {
        /// The CQ with a new completion.
        cq_number: u32 = 0x18[23:0],
    }
}

prm_struct! {
    /// Event data of a CQ error event (`cq_error`).
    pub struct CqError("cq_error", 0x1c) {
        /// The CQ in error.
        cqn: u32 = 0x00[23:0],
        /// `CQ_ERROR_SYNDROME_*`.
        syndrome: u8 = 0x08[7:0],
    }
}

prm_struct! {
    /// Event data of the QP, SRQ and WQ events (`qp_events`): path
    /// migration, communication established, SQ drained, WQ catastrophic,
    /// invalid request and access errors, SRQ catastrophic error, last WQE
    /// reached and SRQ limit (Linux reads all of them through the same
    /// `qp_srq` layout, the SRQ number in `qpn_rqn_sqn`).
    pub struct QpEvents("qp_events", 0x1c) {
        /// Resource type: `EVENT_QUEUE_TYPE_*`.
        r#type: u8 = 0x14[31:24],
        /// The QP, RQ, SQ or SRQ number.
        qpn_rqn_sqn: u32 = 0x18[23:0],
    }
}

prm_struct! {
    /// Event data of the DCT events (`dct_events`).
    pub struct DctEvents("dct_events", 0x1c) {
        /// The DCT number.
        dct_number: u32 = 0x18[23:0],
    }
}

prm_struct! {
    /// The 28 bytes of event data of an EQE (`event_auto`): a union, one
    /// member per event kind.
    ///
    /// `pages_req_event` is not a member in the layout facts (DPDK's union
    /// omits it); it is the data of [`EVENT_TYPE_PAGE_REQUEST`] in Linux.
    pub struct EventAuto("event_auto", 0x1c) {
        /// [`EVENT_TYPE_COMP`].
        comp_event: CompEvent = 0x00,
        /// DCT events.
        dct_events: DctEvents = 0x00,
        /// QP, SRQ and WQ events.
        qp_events: QpEvents = 0x00,
        /// [`EVENT_TYPE_CQ_ERROR`].
        cq_error: CqError = 0x00,
        /// [`EVENT_TYPE_PORT_CHANGE`].
        port_state_change_event: PortStateChangeEvent = 0x00,
        /// [`EVENT_TYPE_CMD`].
        cmd_inter_comp_event: CmdInterCompEvent = 0x00,
        /// [`EVENT_TYPE_PAGE_REQUEST`].
        pages_req_event: PagesReqEvent = 0x00,
    }
}

prm_struct! {
    /// An event queue entry (`eqe`), 64 bytes.
    pub struct Eqe("eqe", 0x40) {
        /// Event type (`EVENT_TYPE_*`).
        event_type: u8 = 0x00[23:16],
        /// Event sub-type (e.g. `PORT_CHANGE_SUBTYPE_*`).
        event_sub_type: u8 = 0x00[7:0],
        /// Event data, according to `event_type`.
        event_data: EventAuto = 0x20,
        /// Signature.
        signature: u8 = 0x3c[15:8],
        /// Owner bit: the entry is valid when it equals
        /// `(consumer_index >> log_eq_size) & 1`.
        owner: bool = 0x3c[0:0],
    }
}

impl Eqe {
    /// Reads an EQE from exactly 64 bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() != EQE_SIZE {
            return Err(Error::BadLength {
                what: "eqe",
                len: bytes.len(),
                reason: "an EQE is 64 bytes",
            });
        }
        <Self as crate::layout::Layout>::decode(bytes)
    }

    /// Whether this entry belongs to software at `consumer_index` in an EQ
    /// of `2^log_eq_size` entries.
    pub fn is_sw_owned(&self, consumer_index: u32, log_eq_size: u8) -> bool {
        let phase = if log_eq_size >= 32 {
            0
        } else {
            (consumer_index >> log_eq_size) & 1
        };
        u32::from(self.get(Self::owner)) == phase
    }

    /// The event data of this entry.
    pub fn data(&self) -> EventAuto {
        self.get(Self::event_data)
    }
}

/// `MLX5_EVENT_TYPE_PORT_CHANGE(0x9) sub-type ACTIVE(0x4)`.
impl fmt::Display for Eqe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.get(Self::event_type);
        let s = self.get(Self::event_sub_type);
        match event_type_name(t) {
            Some(n) => write!(f, "{n}({t:#x})")?,
            None => write!(f, "unknown event type({t:#x})")?,
        }
        if t == EVENT_TYPE_PORT_CHANGE {
            match port_change_subtype_name(s) {
                Some(n) => write!(f, " sub-type {n}({s:#x})"),
                None => write!(f, " sub-type unknown({s:#x})"),
            }
        } else if s != 0 {
            write!(f, " sub-type {s:#x}")
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn event_bitmask_bits() {
        let mut c = CreateEqIn::new();
        c.set_event(EVENT_TYPE_CMD).set_event(0x45);
        // The trace's command EQ: word 0 = 0x400 at bytes 0x58..0x60.
        assert_eq!(&c.as_bytes()[0x58..0x60], &[0, 0, 0, 0, 0, 0, 0x04, 0]);
        assert_eq!(c.event_bitmask_word(0), Some(0x400));
        assert_eq!(c.event_bitmask_word(1), Some(1 << 5));
        assert!(c.has_event(EVENT_TYPE_CMD) && !c.has_event(EVENT_TYPE_PAGE_REQUEST));
        assert_eq!(c.event_bitmask_word(4), None);
    }

    #[test]
    fn eqe_decodes_a_page_request() {
        let mut b = [0u8; 64];
        b[1] = EVENT_TYPE_PAGE_REQUEST;
        b[0x22..0x24].copy_from_slice(&[0, 0]);
        b[0x24..0x28].copy_from_slice(&(-5i32).to_be_bytes());
        b[0x3f] = 1;
        let e = Eqe::from_slice(&b).unwrap();
        let p = e.data().get(EventAuto::pages_req_event);
        assert_eq!(p.num_pages_signed(), -5);
        assert!(e.is_sw_owned(256, 8) && !e.is_sw_owned(0, 8));
        assert_eq!(format!("{e}"), "MLX5_EVENT_TYPE_PAGE_REQUEST(0xb)");
        assert!(Eqe::from_slice(&b[..63]).is_err());
        let mut pc = b;
        pc[1] = EVENT_TYPE_PORT_CHANGE;
        pc[3] = PORT_CHANGE_SUBTYPE_ACTIVE;
        assert_eq!(
            format!("{}", Eqe::from_slice(&pc).unwrap()),
            "MLX5_EVENT_TYPE_PORT_CHANGE(0x9) sub-type ACTIVE(0x4)"
        );
        assert_eq!(eq_doorbell_value(3, 0x1234567), 0x0323_4567);
    }
}
