//! Shared receive queues: the SRQ context (`srqc`), CREATE_SRQ, DESTROY_SRQ,
//! QUERY_SRQ and ARM_RQ (arming the SRQ limit event).

use crate::prm_struct;

/// `srqc.state`: good.
pub const SRQ_STATE_GOOD: u8 = 0x0;
/// `srqc.state`: error.
pub const SRQ_STATE_ERROR: u8 = 0x1;

/// `arm_rq_in.op_mod`: the object is an SRQ (`MLX5_ARM_RQ_IN_OP_MOD_SRQ`).
pub const ARM_RQ_OP_MOD_SRQ: u16 = 0x1;

prm_struct! {
    /// SRQ context (`srqc`), 64 bytes.
    pub struct Srqc("srqc", 0x40) {
        /// SRQ state (`SRQ_STATE_*`).
        state: u8 = 0x00[31:28],
        /// log2 of the number of WQEs.
        log_srq_size: u8 = 0x00[27:24],
        /// WQE signatures.
        wq_signature: bool = 0x04[31:31],
        /// Contiguous SRQ (no linked list).
        cont_srq: bool = 0x04[30:30],
        /// The reserved lkey may be used.
        rlky: bool = 0x04[28:28],
        /// log2 of the WQE stride in 16-byte units.
        log_rq_stride: u8 = 0x04[26:24],
        /// XRC domain.
        xrcd: u32 = 0x04[23:0],
        /// Offset of the SRQ in its first page, in 64-byte units.
        page_offset: u8 = 0x08[31:26],
        /// CQ (XRC SRQs).
        cqn: u32 = 0x08[23:0],
        /// log2 of the page size in 4 KiB units.
        log_page_size: u8 = 0x10[29:24],
        /// Protection domain.
        pd: u32 = 0x18[23:0],
        /// Limit water mark: the SRQ limit event fires below it.
        lwm: u16 = 0x1c[31:16],
        /// WQE counter.
        wqe_cnt: u16 = 0x1c[15:0],
        /// Bus address of the doorbell record.
        dbr_addr: u64 = 0x28[63:0],
    }
}

prm_struct! {
    /// CREATE_SRQ input (`create_srq_in`), followed by the page list.
    pub struct CreateSrqIn("create_srq_in", 0x110): command CREATE_SRQ -> CreateSrqOut {
        /// Opcode (CREATE_SRQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The SRQ context.
        srq_context_entry: Srqc = 0x10,
        /// Physical address list of the SRQ buffer.
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// CREATE_SRQ output (`create_srq_out`).
    ///
    /// The layout facts leave the first 8 bytes reserved; they carry status
    /// and syndrome like every command output.
    pub struct CreateSrqOut("create_srq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The SRQ number.
        srqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_SRQ input (`destroy_srq_in`).
    pub struct DestroySrqIn("destroy_srq_in", 0x10): command DESTROY_SRQ -> DestroySrqOut {
        /// Opcode (DESTROY_SRQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// SRQ to destroy.
        srqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_SRQ output (`destroy_srq_out`).
    pub struct DestroySrqOut("destroy_srq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_SRQ input (`query_srq_in`).
    pub struct QuerySrqIn("query_srq_in", 0x10): command QUERY_SRQ -> QuerySrqOut {
        /// Opcode (QUERY_SRQ).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// SRQ to query.
        srqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// QUERY_SRQ output (`query_srq_out`), followed by the page list.
    pub struct QuerySrqOut("query_srq_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The SRQ context.
        srq_context_entry: Srqc = 0x10,
        /// Physical address list.
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// ARM_RQ input (`arm_rq_in`): arms the limit event of an SRQ.
    pub struct ArmRqIn("arm_rq_in", 0x10): command ARM_RQ -> ArmRqOut {
        /// Opcode (ARM_RQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod ([`ARM_RQ_OP_MOD_SRQ`]).
        op_mod: u16 = 0x04[15:0],
        /// The SRQ.
        srq_number: u32 = 0x08[23:0],
        /// Limit water mark.
        lwm: u16 = 0x0c[15:0],
    }
}

prm_struct! {
    /// ARM_RQ output (`arm_rq_out`).
    pub struct ArmRqOut("arm_rq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
