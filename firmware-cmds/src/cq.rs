//! Completion queues: the CQ context (`cqc`) and CREATE_CQ, DESTROY_CQ,
//! QUERY_CQ, MODIFY_CQ.

use crate::prm_struct;

/// `cqc.cqe_sz`: 64-byte CQEs.
pub const CQE_SZ_64: u8 = 0;
/// `cqc.cqe_sz`: 128-byte CQEs.
pub const CQE_SZ_128: u8 = 1;

/// `cqc.st` (arm state): solicited notification request armed.
pub const CQ_STATE_SOLICITED_ARMED: u8 = 0x6;
/// `cqc.st`: notification request armed.
pub const CQ_STATE_ARMED: u8 = 0x9;
/// `cqc.st`: an event was generated, not armed.
pub const CQ_STATE_FIRED: u8 = 0xa;

/// `cqc.status`: OK.
pub const CQ_STATUS_OK: u8 = 0x0;
/// `cqc.status`: CQ overflow.
pub const CQ_STATUS_OVERFLOW: u8 = 0x9;
/// `cqc.status`: write fail.
pub const CQ_STATUS_WRITE_FAIL: u8 = 0xa;

/// MODIFY_CQ op_mod: modify moderation (`cq_period`, `cq_max_count`).
pub const MODIFY_CQ_OP_MOD_MODIFY: u16 = 0;
/// MODIFY_CQ op_mod: resize the CQ.
pub const MODIFY_CQ_OP_MOD_RESIZE: u16 = 1;

/// `modify_field_select` bit: `cq_period`.
pub const MODIFY_CQ_FIELD_SELECT_CQ_PERIOD: u32 = 1 << 0;
/// `modify_field_select` bit: `cq_max_count`.
pub const MODIFY_CQ_FIELD_SELECT_CQ_MAX_COUNT: u32 = 1 << 1;
/// `modify_field_select` bit: `oi`.
pub const MODIFY_CQ_FIELD_SELECT_OI: u32 = 1 << 2;
/// `modify_field_select` bit: `c_eqn`.
pub const MODIFY_CQ_FIELD_SELECT_C_EQN: u32 = 1 << 3;

prm_struct! {
    /// Completion queue context (`cqc`), 64 bytes.
    pub struct Cqc("cqc", 0x40) {
        /// CQ status (OK, overflow, write fail).
        status: u8 = 0x00[31:28],
        /// Notify on the completion of an armed CQ only.
        as_notify: bool = 0x00[27:27],
        /// Initiator source DCT.
        initiator_src_dct: bool = 0x00[26:26],
        /// The doorbell record is in a user memory object.
        dbr_umem_valid: bool = 0x00[25:25],
        /// Extended element.
        ext_element: bool = 0x00[24:24],
        /// CQE size: 0 = 64 bytes, 1 = 128 bytes.
        cqe_sz: u8 = 0x00[23:21],
        /// Collapsed CQ: all CQEs are written to entry 0.
        cc: bool = 0x00[20:20],
        /// Break moderation on a solicited CQE.
        scqe_break_moderation_en: bool = 0x00[18:18],
        /// Overrun ignore: do not move to error on overrun.
        oi: bool = 0x00[17:17],
        /// Moderation period counted from the last EQE (0) or last CQE (1).
        cq_period_mode: u8 = 0x00[16:15],
        /// CQE compression enable.
        cqe_comp_en: bool = 0x00[14:14],
        /// Mini CQE format.
        mini_cqe_res_format: u8 = 0x00[13:12],
        /// Arm state.
        st: u8 = 0x00[11:8],
        /// Always armed.
        always_armed_cq: bool = 0x00[7:7],
        /// Extended element type.
        ext_element_type: u8 = 0x00[6:4],
        /// CQE compression layout.
        cqe_comp_layout: u8 = 0x00[1:0],
        /// User memory object holding the doorbell record.
        dbr_umem_id: u32 = 0x04[31:0],
        /// Offset of the CQ in its first page, in 64-byte units.
        page_offset: u8 = 0x08[11:6],
        /// Extended mini CQE format.
        mini_cqe_res_format_ext: u8 = 0x08[3:2],
        /// Timestamp format.
        cq_timestamp_format: u8 = 0x08[1:0],
        /// log2 of the number of CQEs.
        log_cq_size: u8 = 0x0c[28:24],
        /// UAR page used to arm the CQ.
        uar_page: u32 = 0x0c[23:0],
        /// Event moderation period in microseconds.
        cq_period: u16 = 0x10[27:16],
        /// Event moderation count.
        cq_max_count: u16 = 0x10[15:0],
        /// EQ that receives the completion events.
        c_eqn: u8 = 0x14[7:0],
        /// log2 of the page size in 4 KiB units.
        log_page_size: u8 = 0x18[28:24],
        /// Last notified consumer index.
        last_notified_index: u32 = 0x20[23:0],
        /// Last solicited consumer index.
        last_solicit_index: u32 = 0x24[23:0],
        /// Consumer counter.
        consumer_counter: u32 = 0x28[23:0],
        /// Producer counter.
        producer_counter: u32 = 0x2c[23:0],
        /// Local partition id.
        local_partition_id: u16 = 0x30[31:20],
        /// Process id.
        process_id: u32 = 0x30[19:0],
        /// Bus address of the CQ doorbell record (8-byte aligned).
        dbr_addr: u64 = 0x38[63:0],
    }
}

prm_struct! {
    /// CREATE_CQ input (`create_cq_in`); followed by the page list (`pas`).
    pub struct CreateCqIn("create_cq_in", 0x110): command CREATE_CQ -> CreateCqOut {
        /// Opcode.
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The CQ context.
        cq_context: Cqc = 0x10,
        /// Offset in the user memory object.
        cq_umem_offset: u64 = 0x50[63:0],
        /// User memory object holding the CQ buffer.
        cq_umem_id: u32 = 0x58[31:0],
        /// The CQ buffer is in a user memory object.
        cq_umem_valid: bool = 0x5c[31:31],
        /// Physical address list of the CQ buffer, one 64-bit entry per page.
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// CREATE_CQ output (`create_cq_out`).
    pub struct CreateCqOut("create_cq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The CQ number.
        cqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_CQ input (`destroy_cq_in`).
    pub struct DestroyCqIn("destroy_cq_in", 0x10): command DESTROY_CQ -> DestroyCqOut {
        /// Opcode.
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// CQ to destroy.
        cqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_CQ output (`destroy_cq_out`).
    pub struct DestroyCqOut("destroy_cq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_CQ input (`query_cq_in`).
    pub struct QueryCqIn("query_cq_in", 0x10): command QUERY_CQ -> QueryCqOut {
        /// Opcode.
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// CQ to query.
        cqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// QUERY_CQ output (`query_cq_out`); followed by the page list.
    pub struct QueryCqOut("query_cq_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The CQ context.
        cq_context: Cqc = 0x10,
        /// Physical address list.
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// MODIFY_CQ input (`modify_cq_in`).
    pub struct ModifyCqIn("modify_cq_in", 0x110): command MODIFY_CQ -> ModifyCqOut {
        /// Opcode.
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// [`MODIFY_CQ_OP_MOD_MODIFY`] or [`MODIFY_CQ_OP_MOD_RESIZE`].
        op_mod: u16 = 0x04[15:0],
        /// CQ to modify.
        cqn: u32 = 0x08[23:0],
        /// Which context fields to modify (`MODIFY_CQ_FIELD_SELECT_*`), or for a
        /// resize which fields the resize sets.
        modify_field_select_resize_field_select: u32 = 0x0c[31:0],
        /// The new context values.
        cq_context: Cqc = 0x10,
        /// The new CQ buffer is in a user memory object.
        cq_umem_valid: bool = 0x58[31:31],
        /// Physical address list of the resized buffer.
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// MODIFY_CQ output (`modify_cq_out`).
    pub struct ModifyCqOut("modify_cq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
