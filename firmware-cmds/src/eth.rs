//! Ethernet transport objects: work queues (`wq`), send queues (`sqc`),
//! receive queues (`rqc`), transport interface send (`tisc`) and receive
//! (`tirc`) objects, RQ tables (`rqtc`), and their CREATE, MODIFY and
//! DESTROY commands.
//!
//! The page list of an SQ or RQ buffer (`wq.pas`) and the RQ list of an RQ
//! table (`rqtc.rq_num`) are flexible arrays at the end of their context,
//! which is at the end of the command: they follow the command's fixed part
//! (`pas` / `rq_num` of the `Create*In` layouts, send them with
//! [`WithArray`](crate::command::WithArray)).

use crate::prm_struct;

/// `wq.wq_type`: linked list.
pub const WQ_TYPE_LINKED_LIST: u8 = 0x0;
/// `wq.wq_type`: cyclic.
pub const WQ_TYPE_CYCLIC: u8 = 0x1;
/// `wq.wq_type`: linked list of striding RQ WQEs.
pub const WQ_TYPE_LINKED_LIST_STRIDING_RQ: u8 = 0x2;
/// `wq.wq_type`: cyclic striding RQ.
pub const WQ_TYPE_CYCLIC_STRIDING_RQ: u8 = 0x3;

/// `wq.end_padding_mode`: no padding.
pub const WQ_END_PAD_MODE_NONE: u8 = 0x0;
/// `wq.end_padding_mode`: pad to the cache line.
pub const WQ_END_PAD_MODE_ALIGN: u8 = 0x1;

/// `sqc.state` / `rqc.state`: reset.
pub const WQ_STATE_RST: u8 = 0x0;
/// `sqc.state` / `rqc.state`: ready.
pub const WQ_STATE_RDY: u8 = 0x1;
/// `sqc.state` / `rqc.state`: error.
pub const WQ_STATE_ERR: u8 = 0x3;

/// `sqc.min_wqe_inline_mode`: no inline headers needed.
pub const INLINE_MODE_NONE: u8 = 0x0;
/// `sqc.min_wqe_inline_mode`: the L2 header must be inline.
pub const INLINE_MODE_L2: u8 = 0x1;
/// `sqc.min_wqe_inline_mode`: headers up to IP must be inline.
pub const INLINE_MODE_IP: u8 = 0x2;
/// `sqc.min_wqe_inline_mode`: headers up to TCP/UDP must be inline.
pub const INLINE_MODE_TCP_UDP: u8 = 0x3;

/// `rqc.mem_rq_type`: the RQ has its own buffer.
pub const RQC_MEM_RQ_TYPE_MEMORY_RQ_INLINE: u8 = 0x0;
/// `rqc.mem_rq_type`: the RQ takes buffers from an RMP.
pub const RQC_MEM_RQ_TYPE_MEMORY_RQ_RMP: u8 = 0x1;

/// `modify_sq_in.modify_bitmask`: `packet_pacing_rate_limit_index`.
pub const MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX: u64 = 1 << 0;
/// `modify_rq_in.modify_bitmask`: `vsd` (VLAN stripping disable).
pub const MODIFY_RQ_BITMASK_VSD: u64 = 1 << 1;
/// `modify_rq_in.modify_bitmask`: `scatter_fcs`.
pub const MODIFY_RQ_BITMASK_SCATTER_FCS: u64 = 1 << 2;
/// `modify_rq_in.modify_bitmask`: `counter_set_id`.
pub const MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID: u64 = 1 << 3;

/// `tirc.disp_type`: deliver to one RQ (`inline_rqn`).
pub const TIRC_DISP_TYPE_DIRECT: u8 = 0x0;
/// `tirc.disp_type`: spread over an RQ table (`indirect_table`) by hash.
pub const TIRC_DISP_TYPE_INDIRECT: u8 = 0x1;

/// `tirc.rx_hash_fn`: no hash.
pub const RX_HASH_FN_NONE: u8 = 0x0;
/// `tirc.rx_hash_fn`: inverted XOR8.
pub const RX_HASH_FN_INVERTED_XOR8: u8 = 0x1;
/// `tirc.rx_hash_fn`: Toeplitz with `rx_hash_toeplitz_key`.
pub const RX_HASH_FN_TOEPLITZ: u8 = 0x2;

/// `tirc.lro_enable_mask` bit: LRO on IPv4.
pub const TIRC_LRO_ENABLE_MASK_IPV4_LRO: u8 = 1 << 0;
/// `tirc.lro_enable_mask` bit: LRO on IPv6.
pub const TIRC_LRO_ENABLE_MASK_IPV6_LRO: u8 = 1 << 1;

/// `tirc.self_lb_block` bit: block unicast self loopback.
pub const TIRC_SELF_LB_BLOCK_BLOCK_UNICAST: u8 = 1 << 0;
/// `tirc.self_lb_block` bit: block multicast self loopback.
pub const TIRC_SELF_LB_BLOCK_BLOCK_MULTICAST: u8 = 1 << 1;

/// `rx_hash_field_select.l3_prot_type`: IPv4.
pub const RX_HASH_L3_PROT_TYPE_IPV4: bool = false;
/// `rx_hash_field_select.l3_prot_type`: IPv6.
pub const RX_HASH_L3_PROT_TYPE_IPV6: bool = true;
/// `rx_hash_field_select.l4_prot_type`: TCP.
pub const RX_HASH_L4_PROT_TYPE_TCP: bool = false;
/// `rx_hash_field_select.l4_prot_type`: UDP.
pub const RX_HASH_L4_PROT_TYPE_UDP: bool = true;
/// `rx_hash_field_select.selected_fields` bit: source IP.
pub const RX_HASH_FIELD_SELECT_SRC_IP: u32 = 1 << 0;
/// `rx_hash_field_select.selected_fields` bit: destination IP.
pub const RX_HASH_FIELD_SELECT_DST_IP: u32 = 1 << 1;
/// `rx_hash_field_select.selected_fields` bit: L4 source port.
pub const RX_HASH_FIELD_SELECT_L4_SPORT: u32 = 1 << 2;
/// `rx_hash_field_select.selected_fields` bit: L4 destination port.
pub const RX_HASH_FIELD_SELECT_L4_DPORT: u32 = 1 << 3;
/// `rx_hash_field_select.selected_fields` bit: IPsec SPI.
pub const RX_HASH_FIELD_SELECT_IPSEC_SPI: u32 = 1 << 4;

prm_struct! {
    /// Work queue (`wq`), the buffer part shared by SQs and RQs, 0xc0 bytes;
    /// the page list (`pas`, 64-bit addresses) follows it.
    pub struct Wq("wq", 0xc0) {
        /// WQ type (`WQ_TYPE_*`).
        wq_type: u8 = 0x00[31:28],
        /// WQE signatures.
        wq_signature: bool = 0x00[27:27],
        /// End padding mode (`WQ_END_PAD_MODE_*`).
        end_padding_mode: u8 = 0x00[26:25],
        /// Core-direct slave.
        cd_slave: bool = 0x00[24:24],
        /// Header-data split: skip the first SGE.
        hds_skip_first_sge: bool = 0x04[31:31],
        /// log2 of the header-data split buffer size.
        log2_hds_buf_size: u8 = 0x04[30:28],
        /// Offset of the WQ in its first page, in 64-byte units.
        page_offset: u8 = 0x04[20:16],
        /// Limit water mark.
        lwm: u16 = 0x04[15:0],
        /// Protection domain.
        pd: u32 = 0x08[23:0],
        /// UAR page of the doorbells.
        uar_page: u32 = 0x0c[23:0],
        /// Bus address of the doorbell record.
        dbr_addr: u64 = 0x10[63:0],
        /// Hardware counter.
        hw_counter: u32 = 0x18[31:0],
        /// Software counter.
        sw_counter: u32 = 0x1c[31:0],
        /// log2 of the WQE stride (bytes).
        log_wq_stride: u8 = 0x20[19:16],
        /// log2 of the page size in 4 KiB units.
        log_wq_pg_sz: u8 = 0x20[12:8],
        /// log2 of the number of WQEs.
        log_wq_sz: u8 = 0x20[4:0],
        /// The doorbell record is in a user memory object.
        dbr_umem_valid: bool = 0x24[31:31],
        /// The buffer is in a user memory object.
        wq_umem_valid: bool = 0x24[30:30],
        /// log2 of the hairpin packets.
        log_hairpin_num_packets: u8 = 0x24[28:24],
        /// log2 of the hairpin data size.
        log_hairpin_data_sz: u8 = 0x24[20:16],
        /// log2 of the strides of one striding RQ WQE.
        single_wqe_log_num_of_strides: u8 = 0x24[11:8],
        /// Two-byte shift (IP header alignment).
        two_byte_shift_en: bool = 0x24[7:7],
        /// log2 of the stride size (bytes) of a striding RQ.
        single_stride_log_num_of_bytes: u8 = 0x24[2:0],
        /// User memory object of the doorbell record.
        dbr_umem_id: u32 = 0x28[31:0],
        /// User memory object of the buffer.
        wq_umem_id: u32 = 0x2c[31:0],
        /// Offset in the buffer's user memory object.
        wq_umem_offset: u64 = 0x30[63:0],
        /// Physical address list of the buffer.
        pas: [u64] = 0xc0,
    }
}

prm_struct! {
    /// Send queue context (`sqc`), 0xf0 bytes.
    pub struct Sqc("sqc", 0xf0) {
        /// The reserved lkey may be used.
        rlky: bool = 0x00[31:31],
        /// Core-direct master.
        cd_master: bool = 0x00[30:30],
        /// Fast registration enable.
        fre: bool = 0x00[29:29],
        /// Flush WQEs when in error.
        flush_in_error_en: bool = 0x00[28:28],
        /// Multi-packet send WQEs allowed.
        allow_multi_pkt_send_wqe: bool = 0x00[27:27],
        /// Headers that must be inline (`INLINE_MODE_*`).
        min_wqe_inline_mode: u8 = 0x00[26:24],
        /// SQ state (`WQ_STATE_*`).
        state: u8 = 0x00[23:20],
        /// UMR allowed.
        reg_umr: bool = 0x00[19:19],
        /// Software parser allowed.
        allow_swp: bool = 0x00[18:18],
        /// Hairpin SQ.
        hairpin: bool = 0x00[17:17],
        /// Non-wire SQ.
        non_wire: bool = 0x00[16:16],
        /// Static SQ WQ.
        static_sq_wq: bool = 0x00[15:15],
        /// Hairpin WQ buffer type.
        hairpin_wq_buffer_type: u8 = 0x00[10:8],
        /// Timestamp format.
        ts_format: u8 = 0x00[5:4],
        /// User index reported in CQEs.
        user_index: u32 = 0x04[23:0],
        /// Completion queue.
        cqn: u32 = 0x08[23:0],
        /// Hairpin peer RQ.
        hairpin_peer_rq: u32 = 0x0c[23:0],
        /// Hairpin peer vHCA.
        hairpin_peer_vhca: u16 = 0x10[15:0],
        /// Packet pacing rate limit index.
        packet_pacing_rate_limit_index: u16 = 0x1c[15:0],
        /// Number of TISes (1).
        tis_lst_sz: u16 = 0x20[31:16],
        /// The TIS the SQ sends through.
        tis_num_0: u32 = 0x2c[23:0],
        /// The work queue.
        wq: Wq = 0x30,
    }
}

prm_struct! {
    /// Receive queue context (`rqc`), 0xf0 bytes.
    pub struct Rqc("rqc", 0xf0) {
        /// The reserved lkey may be used.
        rlky: bool = 0x00[31:31],
        /// Delay drop.
        delay_drop_en: bool = 0x00[30:30],
        /// Scatter the FCS.
        scatter_fcs: bool = 0x00[29:29],
        /// VLAN stripping disable.
        vsd: bool = 0x00[28:28],
        /// Memory RQ type (`RQC_MEM_RQ_TYPE_*`).
        mem_rq_type: u8 = 0x00[27:24],
        /// RQ state (`WQ_STATE_*`).
        state: u8 = 0x00[23:20],
        /// Flush WQEs when in error.
        flush_in_error_en: bool = 0x00[18:18],
        /// Hairpin RQ.
        hairpin: bool = 0x00[17:17],
        /// Hairpin data buffer type.
        hairpin_data_buffer_type: u8 = 0x00[10:8],
        /// Timestamp format.
        ts_format: u8 = 0x00[5:4],
        /// User index reported in CQEs.
        user_index: u32 = 0x04[23:0],
        /// Completion queue.
        cqn: u32 = 0x08[23:0],
        /// Counter set id.
        counter_set_id: u8 = 0x0c[31:24],
        /// RMP (when `mem_rq_type` is RMP).
        rmpn: u32 = 0x10[23:0],
        /// Hairpin peer SQ.
        hairpin_peer_sq: u32 = 0x14[23:0],
        /// Hairpin peer vHCA.
        hairpin_peer_vhca: u16 = 0x18[15:0],
        /// The work queue.
        wq: Wq = 0x30,
    }
}

prm_struct! {
    /// CREATE_SQ input (`create_sq_in`), followed by the page list.
    pub struct CreateSqIn("create_sq_in", 0x110): command CREATE_SQ -> CreateSqOut {
        /// Opcode (CREATE_SQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The SQ context.
        ctx: Sqc = 0x20,
        /// Physical address list of the SQ buffer (`ctx.wq.pas`).
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// CREATE_SQ output (`create_sq_out`).
    pub struct CreateSqOut("create_sq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The SQ number.
        sqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// MODIFY_SQ input (`modify_sq_in`).
    pub struct ModifySqIn("modify_sq_in", 0x110): command MODIFY_SQ -> ModifySqOut {
        /// Opcode (MODIFY_SQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Current state (`WQ_STATE_*`); the new one is `ctx.state`.
        sq_state: u8 = 0x08[31:28],
        /// The SQ.
        sqn: u32 = 0x08[23:0],
        /// Fields of `ctx` to modify besides the state
        /// (`MODIFY_SQ_BITMASK_*`).
        modify_bitmask: u64 = 0x10[63:0],
        /// The new context values.
        ctx: Sqc = 0x20,
    }
}

prm_struct! {
    /// MODIFY_SQ output (`modify_sq_out`).
    pub struct ModifySqOut("modify_sq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// DESTROY_SQ input (`destroy_sq_in`).
    pub struct DestroySqIn("destroy_sq_in", 0x10): command DESTROY_SQ -> DestroySqOut {
        /// Opcode (DESTROY_SQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// SQ to destroy.
        sqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_SQ output (`destroy_sq_out`).
    pub struct DestroySqOut("destroy_sq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// CREATE_RQ input (`create_rq_in`), followed by the page list.
    pub struct CreateRqIn("create_rq_in", 0x110): command CREATE_RQ -> CreateRqOut {
        /// Opcode (CREATE_RQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The RQ context.
        ctx: Rqc = 0x20,
        /// Physical address list of the RQ buffer (`ctx.wq.pas`).
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// CREATE_RQ output (`create_rq_out`).
    pub struct CreateRqOut("create_rq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The RQ number.
        rqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// MODIFY_RQ input (`modify_rq_in`).
    pub struct ModifyRqIn("modify_rq_in", 0x110): command MODIFY_RQ -> ModifyRqOut {
        /// Opcode (MODIFY_RQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Current state (`WQ_STATE_*`); the new one is `ctx.state`.
        rq_state: u8 = 0x08[31:28],
        /// The RQ.
        rqn: u32 = 0x08[23:0],
        /// Fields of `ctx` to modify besides the state
        /// (`MODIFY_RQ_BITMASK_*`).
        modify_bitmask: u64 = 0x10[63:0],
        /// The new context values.
        ctx: Rqc = 0x20,
    }
}

prm_struct! {
    /// MODIFY_RQ output (`modify_rq_out`).
    pub struct ModifyRqOut("modify_rq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// DESTROY_RQ input (`destroy_rq_in`).
    pub struct DestroyRqIn("destroy_rq_in", 0x10): command DESTROY_RQ -> DestroyRqOut {
        /// Opcode (DESTROY_RQ).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// RQ to destroy.
        rqn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_RQ output (`destroy_rq_out`).
    pub struct DestroyRqOut("destroy_rq_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// Transport interface send context (`tisc`), 0xa0 bytes.
    pub struct Tisc("tisc", 0xa0) {
        /// Strict LAG TX port affinity.
        strict_lag_tx_port_affinity: bool = 0x00[31:31],
        /// LAG TX port affinity.
        lag_tx_port_affinity: u8 = 0x00[27:24],
        /// Priority.
        prio: u8 = 0x00[19:16],
        /// Transport domain.
        transport_domain: u32 = 0x24[23:0],
        /// Underlay QP (IPoIB).
        underlay_qpn: u32 = 0x28[23:0],
    }
}

prm_struct! {
    /// RX hash field selection (`rx_hash_field_select`).
    pub struct RxHashFieldSelect("rx_hash_field_select", 0x4) {
        /// L3 protocol: `RX_HASH_L3_PROT_TYPE_*`.
        l3_prot_type: bool = 0x00[31:31],
        /// L4 protocol: `RX_HASH_L4_PROT_TYPE_*`.
        l4_prot_type: bool = 0x00[30:30],
        /// Hashed fields (`RX_HASH_FIELD_SELECT_*`).
        selected_fields: u32 = 0x00[29:0],
    }
}

prm_struct! {
    /// Transport interface receive context (`tirc`), 0xf0 bytes.
    pub struct Tirc("tirc", 0xf0) {
        /// Dispatch type (`TIRC_DISP_TYPE_*`).
        disp_type: u8 = 0x04[31:28],
        /// LRO timeout (µs).
        lro_timeout_period_usecs: u16 = 0x10[27:12],
        /// LRO enable (`TIRC_LRO_ENABLE_MASK_*`).
        lro_enable_mask: u8 = 0x10[11:8],
        /// Largest LRO message in 256-byte units.
        lro_max_msg_sz: u8 = 0x10[7:0],
        /// The RQ of a direct TIR.
        inline_rqn: u32 = 0x1c[23:0],
        /// Symmetric hash.
        rx_hash_symmetric: bool = 0x20[31:31],
        /// Offloads apply to the inner headers of tunnels.
        tunneled_offload_en: bool = 0x20[29:29],
        /// The RQ table of an indirect TIR.
        indirect_table: u32 = 0x20[23:0],
        /// Hash function (`RX_HASH_FN_*`).
        rx_hash_fn: u8 = 0x24[31:28],
        /// Self loopback blocking (`TIRC_SELF_LB_BLOCK_*`).
        self_lb_block: u8 = 0x24[25:24],
        /// Transport domain.
        transport_domain: u32 = 0x24[23:0],
        /// Toeplitz hash key (40 bytes).
        rx_hash_toeplitz_key: [u8; 40] = 0x28,
        /// Hashed fields of the outer headers.
        rx_hash_field_selector_outer: RxHashFieldSelect = 0x50,
        /// Hashed fields of the inner headers.
        rx_hash_field_selector_inner: RxHashFieldSelect = 0x54,
    }
}

prm_struct! {
    /// One entry of an RQ table's list (`rq_num`).
    pub struct RqNum("rq_num", 0x4) {
        /// RQ number.
        rq_num: u32 = 0x00[23:0],
    }
}

prm_struct! {
    /// RQ table context (`rqtc`), 0xf0 bytes, followed by `rqt_actual_size`
    /// RQ numbers (`rq_num`, 32 bits each, low 24 bits used).
    pub struct Rqtc("rqtc", 0xf0) {
        /// Type of the listed queues.
        list_q_type: u8 = 0x14[26:24],
        /// Largest size of the table.
        rqt_max_size: u16 = 0x14[15:0],
        /// Entries in the list.
        rqt_actual_size: u16 = 0x18[15:0],
        /// The RQ list.
        rq_num: [u32] = 0xf0,
    }
}

prm_struct! {
    /// CREATE_TIS input (`create_tis_in`).
    pub struct CreateTisIn("create_tis_in", 0xc0): command CREATE_TIS -> CreateTisOut {
        /// Opcode (CREATE_TIS).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The TIS context.
        ctx: Tisc = 0x20,
    }
}

prm_struct! {
    /// CREATE_TIS output (`create_tis_out`).
    pub struct CreateTisOut("create_tis_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The TIS number.
        tisn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_TIS input (`destroy_tis_in`).
    pub struct DestroyTisIn("destroy_tis_in", 0x10): command DESTROY_TIS -> DestroyTisOut {
        /// Opcode (DESTROY_TIS).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// TIS to destroy.
        tisn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_TIS output (`destroy_tis_out`).
    pub struct DestroyTisOut("destroy_tis_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// CREATE_TIR input (`create_tir_in`).
    pub struct CreateTirIn("create_tir_in", 0x110): command CREATE_TIR -> CreateTirOut {
        /// Opcode (CREATE_TIR).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The TIR context.
        ctx: Tirc = 0x20,
    }
}

prm_struct! {
    /// CREATE_TIR output (`create_tir_out`).
    pub struct CreateTirOut("create_tir_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The TIR number.
        tirn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_TIR input (`destroy_tir_in`).
    pub struct DestroyTirIn("destroy_tir_in", 0x10): command DESTROY_TIR -> DestroyTirOut {
        /// Opcode (DESTROY_TIR).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// TIR to destroy.
        tirn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_TIR output (`destroy_tir_out`).
    pub struct DestroyTirOut("destroy_tir_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// CREATE_RQT input (`create_rqt_in`), followed by the RQ list.
    pub struct CreateRqtIn("create_rqt_in", 0x110): command CREATE_RQT -> CreateRqtOut {
        /// Opcode (CREATE_RQT).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The RQ table context.
        rqt_context: Rqtc = 0x20,
        /// The RQ list (`rqt_context.rq_num`).
        rq_num: [u32] = 0x110,
    }
}

prm_struct! {
    /// CREATE_RQT output (`create_rqt_out`).
    pub struct CreateRqtOut("create_rqt_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The RQ table number.
        rqtn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_RQT input (`destroy_rqt_in`).
    pub struct DestroyRqtIn("destroy_rqt_in", 0x10): command DESTROY_RQT -> DestroyRqtOut {
        /// Opcode (DESTROY_RQT).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// RQ table to destroy.
        rqtn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_RQT output (`destroy_rqt_out`).
    pub struct DestroyRqtOut("destroy_rqt_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
