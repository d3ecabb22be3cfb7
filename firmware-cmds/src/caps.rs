//! HCA capabilities: QUERY_HCA_CAP, SET_HCA_CAP and the capability blocks
//! (general `cmd_hca_cap`, `per_protocol_networking_offload_caps`,
//! `atomic_caps`, `roce_cap`, `flow_table_nic_cap`).
//!
//! The op_mod of QUERY_HCA_CAP and SET_HCA_CAP is `capability_type << 1 |
//! mode`, mode 0 = maximum (what the device can do) and 1 = current (what is
//! in effect). The 4 KiB capability block at byte 0x10 of the output (and
//! of the SET_HCA_CAP input) is the union `hca_cap_union`; which member it
//! holds depends on the capability type:
//!
//! ```
//! use firmware_cmds::caps::{self, CmdHcaCap, QueryHcaCapIn, QueryHcaCapOut};
//!
//! let q = QueryHcaCapIn::for_cap::<CmdHcaCap>(caps::HCA_CAP_OP_MOD_GET_CUR)?;
//! assert_eq!(q.get(QueryHcaCapIn::op_mod), 0x1);
//! let out = QueryHcaCapOut::new();
//! let general: CmdHcaCap = out.cap();
//! assert_eq!(general.get(CmdHcaCap::log_max_qp), 0);
//! # Ok::<(), firmware_cmds::Error>(())
//! ```

use crate::Error;
use crate::layout::Layout;
use crate::prm_struct;

/// Capability mode in the op_mod low bit: the maximum the device supports
/// (Linux `HCA_CAP_OPMOD_GET_MAX`).
pub const HCA_CAP_OP_MOD_GET_MAX: u16 = 0;
/// Capability mode in the op_mod low bit: the current, in-effect values
/// (Linux `HCA_CAP_OPMOD_GET_CUR`).
pub const HCA_CAP_OP_MOD_GET_CUR: u16 = 1;

/// Capability type `MLX5_CAP_GENERAL`: [`CmdHcaCap`].
pub const CAP_GENERAL: u16 = 0x00;
/// Capability type `MLX5_CAP_ETHERNET_OFFLOADS`:
/// [`PerProtocolNetworkingOffloadCaps`].
pub const CAP_ETHERNET_OFFLOADS: u16 = 0x01;
/// Capability type `MLX5_CAP_ODP` (on-demand paging).
pub const CAP_ODP: u16 = 0x02;
/// Capability type `MLX5_CAP_ATOMIC`: [`AtomicCaps`].
pub const CAP_ATOMIC: u16 = 0x03;
/// Capability type `MLX5_CAP_ROCE`: [`RoceCap`].
pub const CAP_ROCE: u16 = 0x04;
/// Capability type `MLX5_CAP_IPOIB_OFFLOADS`.
pub const CAP_IPOIB_OFFLOADS: u16 = 0x05;
/// Capability type `MLX5_CAP_IPOIB_ENHANCED_OFFLOADS`.
pub const CAP_IPOIB_ENHANCED_OFFLOADS: u16 = 0x06;
/// Capability type `MLX5_CAP_FLOW_TABLE`: [`FlowTableNicCap`].
pub const CAP_FLOW_TABLE: u16 = 0x07;
/// Capability type `MLX5_CAP_ESWITCH_FLOW_TABLE`.
pub const CAP_ESWITCH_FLOW_TABLE: u16 = 0x08;
/// Capability type `MLX5_CAP_ESWITCH`.
pub const CAP_ESWITCH: u16 = 0x09;
/// Capability type `MLX5_CAP_VECTOR_CALC`.
pub const CAP_VECTOR_CALC: u16 = 0x0b;
/// Capability type `MLX5_CAP_QOS`.
pub const CAP_QOS: u16 = 0x0c;
/// Capability type `MLX5_CAP_DEBUG`.
pub const CAP_DEBUG: u16 = 0x0d;
/// Capability type `MLX5_CAP_DEV_MEM` (device memory).
pub const CAP_DEV_MEM: u16 = 0x0f;
/// Capability type `MLX5_CAP_TLS`.
pub const CAP_TLS: u16 = 0x11;
/// Capability type `MLX5_CAP_VDPA_EMULATION`.
pub const CAP_VDPA_EMULATION: u16 = 0x13;
/// Capability type `MLX5_CAP_DEV_EVENT`.
pub const CAP_DEV_EVENT: u16 = 0x14;
/// Capability type `MLX5_CAP_IPSEC`.
pub const CAP_IPSEC: u16 = 0x15;
/// Capability type `MLX5_CAP_CRYPTO`.
pub const CAP_CRYPTO: u16 = 0x1a;
/// Capability type `MLX5_CAP_MACSEC`.
pub const CAP_MACSEC: u16 = 0x1f;
/// Capability type `MLX5_CAP_GENERAL_2` (`cmd_hca_cap_2`).
pub const CAP_GENERAL_2: u16 = 0x20;
/// Capability type `MLX5_CAP_PORT_SELECTION`.
pub const CAP_PORT_SELECTION: u16 = 0x25;
/// Capability type `MLX5_CAP_ADV_VIRTUALIZATION`.
pub const CAP_ADV_VIRTUALIZATION: u16 = 0x26;

/// `(capability type, name)` for the types above, names as in Linux without
/// the `MLX5_CAP_` prefix.
pub const CAP_TYPES: &[(u16, &str)] = &[
    (CAP_GENERAL, "GENERAL"),
    (CAP_ETHERNET_OFFLOADS, "ETHERNET_OFFLOADS"),
    (CAP_ODP, "ODP"),
    (CAP_ATOMIC, "ATOMIC"),
    (CAP_ROCE, "ROCE"),
    (CAP_IPOIB_OFFLOADS, "IPOIB_OFFLOADS"),
    (CAP_IPOIB_ENHANCED_OFFLOADS, "IPOIB_ENHANCED_OFFLOADS"),
    (CAP_FLOW_TABLE, "FLOW_TABLE"),
    (CAP_ESWITCH_FLOW_TABLE, "ESWITCH_FLOW_TABLE"),
    (CAP_ESWITCH, "ESWITCH"),
    (CAP_VECTOR_CALC, "VECTOR_CALC"),
    (CAP_QOS, "QOS"),
    (CAP_DEBUG, "DEBUG"),
    (CAP_DEV_MEM, "DEV_MEM"),
    (CAP_TLS, "TLS"),
    (CAP_VDPA_EMULATION, "VDPA_EMULATION"),
    (CAP_DEV_EVENT, "DEV_EVENT"),
    (CAP_IPSEC, "IPSEC"),
    (CAP_CRYPTO, "CRYPTO"),
    (CAP_MACSEC, "MACSEC"),
    (CAP_GENERAL_2, "GENERAL_2"),
    (CAP_PORT_SELECTION, "PORT_SELECTION"),
    (CAP_ADV_VIRTUALIZATION, "ADV_VIRTUALIZATION"),
];

/// The name of capability type `cap_type` (`GENERAL`, `ROCE`...).
pub fn cap_type_name(cap_type: u16) -> Option<&'static str> {
    CAP_TYPES
        .iter()
        .find(|&&(t, _)| t == cap_type)
        .map(|&(_, n)| n)
}

/// The op_mod of QUERY_HCA_CAP / SET_HCA_CAP for `cap_type` and `mode`
/// (`HCA_CAP_OP_MOD_GET_MAX` or `HCA_CAP_OP_MOD_GET_CUR`).
pub const fn hca_cap_op_mod(cap_type: u16, mode: u16) -> u16 {
    (cap_type << 1) | (mode & 1)
}

/// `cmd_hca_cap.port_type`: InfiniBand.
pub const PORT_TYPE_IB: u8 = 0x0;
/// `cmd_hca_cap.port_type`: Ethernet.
pub const PORT_TYPE_ETH: u8 = 0x1;

/// `cmd_hca_cap.cmdif_checksum`: signatures are not checked (Linux sets this
/// with SET_HCA_CAP).
pub const CMDIF_CHECKSUM_DISABLED: u8 = 0x0;
/// `cmd_hca_cap.cmdif_checksum`: initial state, signatures checked.
pub const CMDIF_CHECKSUM_INITIAL_STATE: u8 = 0x1;
/// `cmd_hca_cap.cmdif_checksum`: signatures are checked.
pub const CMDIF_CHECKSUM_ENABLED: u8 = 0x3;

/// `atomic_caps.atomic_req_8B_endianness_mode`: 8-byte atomic operands and
/// results are big-endian.
pub const ATOMIC_REQ_8B_ENDIANNESS_MODE_BIG_ENDIAN: u8 = 0x0;
/// `atomic_caps.atomic_req_8B_endianness_mode`: 8-byte atomic operands and
/// results are in host byte order (what Linux asks for when supported).
pub const ATOMIC_REQ_8B_ENDIANNESS_MODE_HOST_ENDIANNESS: u8 = 0x1;

/// `atomic_caps.atomic_operations` bit: compare and swap.
pub const ATOMIC_OPS_CMP_SWAP: u16 = 1 << 0;
/// `atomic_caps.atomic_operations` bit: fetch and add.
pub const ATOMIC_OPS_FETCH_ADD: u16 = 1 << 1;
/// `atomic_caps.atomic_operations` bit: masked compare and swap.
pub const ATOMIC_OPS_MASKED_CMP_SWAP: u16 = 1 << 2;
/// `atomic_caps.atomic_operations` bit: masked fetch and add.
pub const ATOMIC_OPS_MASKED_FETCH_ADD: u16 = 1 << 3;

/// `roce_cap.roce_version` bit: RoCE v1.
pub const ROCE_VERSION_1: u8 = 1 << 0;
/// `roce_cap.roce_version` bit: RoCE v1.5.
pub const ROCE_VERSION_1_5: u8 = 1 << 1;
/// `roce_cap.roce_version` bit: RoCE v2 (UDP encapsulation, port
/// `r_roce_dest_udp_port`).
pub const ROCE_VERSION_2: u8 = 1 << 2;

/// `roce_cap.qp_ts_format`, `cmd_hca_cap.sq_ts_format` and `rq_ts_format`:
/// only the free-running timestamp format (also what a device reports
/// that predates the field: it reads 0).
pub const TIMESTAMP_FORMAT_CAP_FREE_RUNNING: u8 = 0x0;
/// Timestamp format capability: only real time.
pub const TIMESTAMP_FORMAT_CAP_REAL_TIME: u8 = 0x1;
/// Timestamp format capability: free running and real time.
pub const TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME: u8 = 0x2;

/// `qpc.ts_format`, `sqc.ts_format`, `rqc.ts_format`: free-running
/// (internal timer) timestamps.
pub const TIMESTAMP_FORMAT_FREE_RUNNING: u8 = 0x0;
/// Timestamp format: the device's default (its configured clock mode).
pub const TIMESTAMP_FORMAT_DEFAULT: u8 = 0x1;
/// Timestamp format: real-time (wall clock) timestamps.
pub const TIMESTAMP_FORMAT_REAL_TIME: u8 = 0x2;

/// Whether timestamp format capability `cap` offers free-running
/// timestamps (Linux `fr_supported`).
pub const fn ts_cap_free_running(cap: u8) -> bool {
    cap == TIMESTAMP_FORMAT_CAP_FREE_RUNNING
        || cap == TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME
}

/// Whether timestamp format capability `cap` offers real-time timestamps
/// (Linux `rt_supported`).
pub const fn ts_cap_real_time(cap: u8) -> bool {
    cap == TIMESTAMP_FORMAT_CAP_REAL_TIME || cap == TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME
}

/// The `ts_format` a QP, SQ or RQ is created with when the consumer asks
/// for no particular timestamps, given the matching capability
/// (`roce_cap.qp_ts_format` for a QP, `sq_ts_format`/`rq_ts_format` for an
/// SQ/RQ): free-running where the device offers it, otherwise the
/// device's default. This is Linux's choice (`get_ts_format` in
/// drivers/infiniband/hw/mlx5/qp.c for a CQ created without timestamp
/// flags): on a device that predates the field (capability 0) the field
/// stays 0, which such firmware requires of it.
pub const fn default_ts_format(cap: u8) -> u8 {
    if ts_cap_free_running(cap) {
        TIMESTAMP_FORMAT_FREE_RUNNING
    } else {
        TIMESTAMP_FORMAT_DEFAULT
    }
}

prm_struct! {
    /// The general device capabilities (`cmd_hca_cap`, capability type
    /// [`CAP_GENERAL`]), 256 bytes. Every field of the layout is declared.
    pub struct CmdHcaCap("cmd_hca_cap", 0x100) {
        /// Can access RoCE of another HCA (vHCA).
        access_other_hca_roce: bool = 0x00[31:31],
        /// Flow counters can be allocated with a PD.
        alloc_flow_counter_pd: bool = 0x00[30:30],
        /// Flow counters can be accessed through ASO.
        flow_counter_access_aso: bool = 0x00[29:29],
        /// QUERY_MATCH_SAMPLE_INFO is supported.
        query_match_sample_info: bool = 0x00[28:28],
        /// ASO op_mod used for flow access.
        flow_access_aso_opc_mod: u8 = 0x00[23:16],
        /// The function is a vHCA resource manager.
        vhca_resource_manager: bool = 0x00[0:0],
        /// `cmd_hca_cap_2` (capability type [`CAP_GENERAL_2`]) exists.
        hca_cap_2: bool = 0x04[31:31],
        /// This function's vHCA id.
        vhca_id: u16 = 0x04[15:0],
        /// log2 of the RegExp scatter/gather size.
        log_regexp_scatter_gather_size: u8 = 0x0c[28:24],
        /// log2 of the largest DMA MMO.
        log_dma_mmo_size: u8 = 0x0c[20:16],
        /// log2 of the largest compress MMO.
        log_compress_mmo_size: u8 = 0x0c[12:8],
        /// LZ4 decompression (data only) v2.
        decompress_lz4_data_only_v2: bool = 0x0c[7:7],
        /// LZ4 decompression without checksum v2.
        decompress_lz4_no_checksum_v2: bool = 0x0c[6:6],
        /// LZ4 decompression with checksum v2.
        decompress_lz4_checksum_v2: bool = 0x0c[5:5],
        /// log2 of the largest decompress MMO.
        log_decompress_mmo_size: u8 = 0x0c[4:0],
        /// log2 of the largest SRQ (WQEs).
        log_max_srq_sz: u8 = 0x10[31:24],
        /// log2 of the largest QP (WQEs).
        log_max_qp_sz: u8 = 0x10[23:16],
        /// The WQE index can be ignored.
        wqe_index_ignore_cap: bool = 0x10[6:6],
        /// QPs can be allocated dynamically.
        dynamic_qp_allocation: bool = 0x10[5:5],
        /// log2 of the number of QPs.
        log_max_qp: u8 = 0x10[4:0],
        /// Number of RegExp engines.
        regexp_num_of_engines: u8 = 0x14[27:24],
        /// reg_c is preserved across loopback.
        reg_c_preserve: bool = 0x14[22:22],
        /// log2 of the number of SRQs.
        log_max_srq: u8 = 0x14[20:16],
        /// FCS scatter with decap can be disabled.
        scatter_fcs_w_decap_disable: bool = 0x14[4:4],
        /// log2 of the largest CQ (CQEs).
        log_max_cq_sz: u8 = 0x18[23:16],
        /// ACCESS_REG is allowed to user contexts.
        access_register_user: bool = 0x18[13:13],
        /// log2 of the number of CQs.
        log_max_cq: u8 = 0x18[4:0],
        /// log2 of the largest EQ (EQEs).
        log_max_eq_sz: u8 = 0x1c[31:24],
        /// Relaxed-ordering writes can be enabled per mkey.
        relaxed_ordering_write: bool = 0x1c[23:23],
        /// Relaxed-ordering reads can be enabled per mkey.
        relaxed_ordering_read: bool = 0x1c[22:22],
        /// log2 of the number of memory keys.
        log_max_mkey: u8 = 0x1c[21:16],
        /// The dump-fill mkey exists (QUERY_SPECIAL_CONTEXTS).
        dump_fill_mkey: bool = 0x1c[7:7],
        /// log2 of the number of EQs.
        log_max_eq: u8 = 0x1c[3:0],
        /// Largest indirection depth of memory keys.
        max_indirection: u8 = 0x20[31:24],
        /// Fixed-buffer-size mkeys are supported.
        fixed_buffer_size: bool = 0x20[23:23],
        /// log2 of the largest memory region or window (bytes).
        log_max_mrw_sz: u8 = 0x20[22:16],
        /// TEARDOWN_HCA force close is supported.
        force_teardown: bool = 0x20[15:15],
        /// log2 of the largest BSF list.
        log_max_bsf_list_size: u8 = 0x20[13:8],
        /// UMR extended translation offset.
        umr_extended_translation_offset: bool = 0x20[7:7],
        /// The null mkey exists (QUERY_SPECIAL_CONTEXTS).
        null_mkey: bool = 0x20[6:6],
        /// log2 of the largest KLM list.
        log_maxklm_list_size: u8 = 0x20[5:0],
        /// Non-wire SQs are supported.
        non_wire_sq: bool = 0x24[31:31],
        /// log2 of the outstanding RDMA read/atomic requests per DC.
        log_max_ra_req_dc: u8 = 0x24[21:16],
        /// log2 of the largest static SQ WQ.
        log_max_static_sq_wq: u8 = 0x24[12:8],
        /// log2 of the RDMA read/atomic responder resources per DC.
        log_max_ra_res_dc: u8 = 0x24[5:0],
        /// log2 of the outstanding RDMA read/atomic requests per QP.
        log_max_ra_req_qp: u8 = 0x28[21:16],
        /// RTR2RTS can set the counter set id.
        rtr2rts_qp_counters_set_id: bool = 0x28[15:15],
        /// RTS2RTS can change the UDP source port.
        rts2rts_udp_sport: bool = 0x28[14:14],
        /// RTS2RTS can change the LAG TX port affinity.
        rts2rts_lag_tx_port_affinity: bool = 0x28[13:13],
        /// DMA MMO on SQs.
        dma_mmo_sq: bool = 0x28[12:12],
        /// Smallest compression block size.
        compress_min_block_size: u8 = 0x28[11:8],
        /// Compress MMO on SQs.
        compress_mmo_sq: bool = 0x28[7:7],
        /// Decompress MMO on SQs.
        decompress_mmo_sq: bool = 0x28[6:6],
        /// log2 of the RDMA read/atomic responder resources per QP.
        log_max_ra_res_qp: u8 = 0x28[5:0],
        /// Scatter-to-CQE end padding is supported.
        end_pad: bool = 0x2c[31:31],
        /// Congestion control parameters can be queried.
        cc_query_allowed: bool = 0x2c[30:30],
        /// Congestion control parameters can be modified.
        cc_modify_allowed: bool = 0x2c[29:29],
        /// Start padding is supported.
        start_pad: bool = 0x2c[28:28],
        /// The cache line is 128 bytes.
        cache_line_128byte: bool = 0x2c[27:27],
        /// The QCAM register exists.
        qcam_reg: bool = 0x2c[16:16],
        /// Number of GID table entries per port.
        gid_table_size: u16 = 0x2c[15:0],
        /// The out-of-sequence counter exists.
        out_of_seq_cnt: bool = 0x30[31:31],
        /// Vport counters exist.
        vport_counters: bool = 0x30[30:30],
        /// Retransmission Q counters exist.
        retransmission_q_counters: bool = 0x30[29:29],
        /// Debug features.
        debug: bool = 0x30[28:28],
        /// MODIFY_RQ can set the counter set id.
        modify_rq_counter_set_id: bool = 0x30[27:27],
        /// RQ delay drop is supported.
        rq_delay_drop: bool = 0x30[26:26],
        /// Number of Q counters.
        max_qp_cnt: u16 = 0x30[25:16],
        /// Number of P_Key table entries per port.
        pkey_table_size: u16 = 0x30[15:0],
        /// The function is the vport group manager.
        vport_group_manager: bool = 0x34[31:31],
        /// The function is the vHCA group manager.
        vhca_group_manager: bool = 0x34[30:30],
        /// InfiniBand virtualization.
        ib_virt: bool = 0x34[29:29],
        /// Ethernet virtualization.
        eth_virt: bool = 0x34[28:28],
        /// vNIC environment queue counters.
        vnic_env_queue_counters: bool = 0x34[27:27],
        /// ETS (enhanced transmission selection).
        ets: bool = 0x34[26:26],
        /// NIC flow tables exist.
        nic_flow_table: bool = 0x34[25:25],
        /// The function is the e-switch manager.
        eswitch_manager: bool = 0x34[24:24],
        /// Device memory (MEMIC).
        device_memory: bool = 0x34[23:23],
        /// The MCAM register exists.
        mcam_reg: bool = 0x34[22:22],
        /// The PCAM register exists.
        pcam_reg: bool = 0x34[21:21],
        /// Local CA ACK delay (IB).
        local_ca_ack_delay: u8 = 0x34[20:16],
        /// Port module events.
        port_module_event: bool = 0x34[15:15],
        /// Enhanced error Q counters.
        enhanced_error_q_counters: bool = 0x34[14:14],
        /// Port checks.
        ports_check: bool = 0x34[13:13],
        /// Link-up can be disabled.
        disable_link_up: bool = 0x34[11:11],
        /// The beacon LED can be controlled.
        beacon_led: bool = 0x34[10:10],
        /// Port type: [`PORT_TYPE_IB`] or [`PORT_TYPE_ETH`].
        port_type: u8 = 0x34[9:8],
        /// Number of physical ports.
        num_ports: u8 = 0x34[7:0],
        /// Pulse-per-second.
        pps: bool = 0x38[30:30],
        /// Pulse-per-second can be modified.
        pps_modify: bool = 0x38[29:29],
        /// log2 of the largest message (bytes).
        log_max_msg: u8 = 0x38[28:24],
        /// Number of traffic classes.
        max_tc: u8 = 0x38[19:16],
        /// Temperature warning events.
        temp_warn_event: bool = 0x38[15:15],
        /// DCBX.
        dcbx: bool = 0x38[14:14],
        /// General notification events.
        general_notification_event: bool = 0x38[13:13],
        /// FPGA present.
        fpga: bool = 0x38[10:10],
        /// Remote-on-LAN: SecureOn password.
        rol_s: bool = 0x38[9:9],
        /// Remote-on-LAN: magic packet.
        rol_g: bool = 0x38[8:8],
        /// Wake-on-LAN: SecureOn password.
        wol_s: bool = 0x38[6:6],
        /// Wake-on-LAN: magic packet.
        wol_g: bool = 0x38[5:5],
        /// Wake-on-LAN: ARP.
        wol_a: bool = 0x38[4:4],
        /// Wake-on-LAN: broadcast.
        wol_b: bool = 0x38[3:3],
        /// Wake-on-LAN: multicast.
        wol_m: bool = 0x38[2:2],
        /// Wake-on-LAN: unicast.
        wol_u: bool = 0x38[1:1],
        /// Wake-on-LAN: PHY activity.
        wol_p: bool = 0x38[0:0],
        /// Supported static rates (bit mask).
        stat_rate_support: u16 = 0x3c[31:16],
        /// WQE-based flow table update.
        wqe_based_flow_table_update_cap: bool = 0x3c[4:4],
        /// CQE version (1 = user index in CQEs).
        cqe_version: u8 = 0x3c[3:0],
        /// Compact (16-byte) address vectors.
        compact_address_vector: bool = 0x40[31:31],
        /// Striding RQs.
        striding_rq: bool = 0x40[30:30],
        /// IPoIB enhanced offloads.
        ipoib_enhanced_offloads: bool = 0x40[28:28],
        /// IPoIB basic offloads.
        ipoib_basic_offloads: bool = 0x40[27:27],
        /// UMR repeated blocks disabled.
        repeated_block_disabled: bool = 0x40[25:25],
        /// UMR modification of the entity size disabled.
        umr_modify_entity_size_disabled: bool = 0x40[24:24],
        /// UMR modification of atomic access disabled.
        umr_modify_atomic_disabled: bool = 0x40[23:23],
        /// UMR indirect mkeys disabled.
        umr_indirect_mkey_disabled: bool = 0x40[22:22],
        /// UMR fence requirement.
        umr_fence: u8 = 0x40[21:20],
        /// Drain on signature error.
        drain_sigerr: bool = 0x40[16:16],
        /// Command interface signatures: one of `CMDIF_CHECKSUM_*`.
        cmdif_checksum: u8 = 0x40[15:14],
        /// Signature error CQEs.
        sigerr_cqe: bool = 0x40[13:13],
        /// WQ signatures.
        wq_signature: bool = 0x40[11:11],
        /// Scatter of data to CQEs.
        sctr_data_cqe: bool = 0x40[10:10],
        /// Signature handover.
        sho: bool = 0x40[8:8],
        /// TLP processing hints.
        tph: bool = 0x40[7:7],
        /// Remote fetch.
        rf: bool = 0x40[6:6],
        /// Dynamically connected transport.
        dct: bool = 0x40[5:5],
        /// QoS.
        qos: bool = 0x40[4:4],
        /// Ethernet offloads ([`CAP_ETHERNET_OFFLOADS`] is valid).
        eth_net_offloads: bool = 0x40[3:3],
        /// RoCE ([`CAP_ROCE`] is valid).
        roce: bool = 0x40[2:2],
        /// Atomic operations ([`CAP_ATOMIC`] is valid).
        atomic: bool = 0x40[1:1],
        /// CQ overrun ignore.
        cq_oi: bool = 0x44[31:31],
        /// CQ resize.
        cq_resize: bool = 0x44[30:30],
        /// CQ event moderation.
        cq_moderation: bool = 0x44[29:29],
        /// CQ to EQ remapping.
        cq_eq_remap: bool = 0x44[25:25],
        /// Page faults (on-demand paging).
        pg: bool = 0x44[24:24],
        /// Block multicast loopback.
        block_lb_mc: bool = 0x44[23:23],
        /// Solicited CQEs break moderation.
        scqe_break_moderation: bool = 0x44[21:21],
        /// CQ moderation period can start from the CQE.
        cq_period_start_from_cqe: bool = 0x44[20:20],
        /// Core-direct.
        cd: bool = 0x44[19:19],
        /// Automatic path migration.
        apm: bool = 0x44[17:17],
        /// Vector calculation offload.
        vector_calc: bool = 0x44[16:16],
        /// UMR pointer with reserved lkey.
        umr_ptr_rlky: bool = 0x44[15:15],
        /// Implicit ODP (IMAICL).
        imaicl: bool = 0x44[14:14],
        /// Q_Key violation counter.
        qkv: bool = 0x44[9:9],
        /// P_Key violation counter.
        pkv: bool = 0x44[8:8],
        /// The DETH source QPN can be set.
        set_deth_sqpn: bool = 0x44[7:7],
        /// XRC transport.
        xrc: bool = 0x44[3:3],
        /// UD transport.
        ud: bool = 0x44[2:2],
        /// UC transport.
        uc: bool = 0x44[1:1],
        /// RC transport.
        rc: bool = 0x44[0:0],
        /// 4 KiB UAR pages can be used.
        uar_4k: bool = 0x48[31:31],
        /// RegExp parameters.
        regexp_params: bool = 0x48[22:22],
        /// log2 of the UAR area size (in pages).
        uar_sz: u8 = 0x48[21:16],
        /// Port selection capabilities exist.
        port_selection_cap: bool = 0x48[15:15],
        /// log2 of the system page size the device uses (12 = 4 KiB).
        log_pg_sz: u8 = 0x48[7:0],
        /// BlueFlame registers.
        bf: bool = 0x4c[31:31],
        /// SET_DRIVER_VERSION is supported.
        driver_version: bool = 0x4c[30:30],
        /// TX Ethernet packets are padded.
        pad_tx_eth_packet: bool = 0x4c[29:29],
        /// log2 of the BlueFlame register size (bytes).
        log_bf_reg_size: u8 = 0x4c[20:16],
        /// The function is the LAG master.
        lag_master: bool = 0x4c[4:4],
        /// Number of LAG ports.
        num_lag_ports: u8 = 0x4c[3:0],
        /// Largest send WQE (bytes).
        max_wqe_sz_sq: u16 = 0x50[15:0],
        /// RegExp MMO on SQs.
        regexp_mmo_sq: bool = 0x54[19:19],
        /// RegExp engine version.
        regexp_version: u8 = 0x54[18:16],
        /// Largest receive WQE (bytes).
        max_wqe_sz_rq: u16 = 0x54[15:0],
        /// Number of flow counters, bits 31:16.
        max_flow_counter_31_16: u16 = 0x58[31:16],
        /// Largest DC send WQE (bytes).
        max_wqe_sz_sq_dc: u16 = 0x58[15:0],
        /// Most QPs attached to one multicast group.
        max_qp_mcg: u32 = 0x5c[24:0],
        /// Flow counters bulk allocation sizes.
        flow_counter_bulk_alloc: u8 = 0x60[15:8],
        /// log2 of the number of multicast groups.
        log_max_mcg: u8 = 0x60[7:0],
        /// log2 of the number of transport domains.
        log_max_transport_domain: u8 = 0x64[28:24],
        /// PCI relaxed-ordered reads.
        pci_relaxed_ordered_read: bool = 0x64[21:21],
        /// log2 of the number of protection domains.
        log_max_pd: u8 = 0x64[20:16],
        /// log2 of the number of XRC domains.
        log_max_xrcd: u8 = 0x64[4:0],
        /// NIC receive steering can discard.
        nic_receive_steering_discard: bool = 0x68[31:31],
        /// Receive discard while the vport is down.
        receive_discard_vport_down: bool = 0x68[30:30],
        /// Transmit discard while the vport is down.
        transmit_discard_vport_down: bool = 0x68[29:29],
        /// log2 of the largest flow counter bulk.
        log_max_flow_counter_bulk: u8 = 0x68[23:16],
        /// Number of flow counters, bits 15:0.
        max_flow_counter_15_0: u16 = 0x68[15:0],
        /// MODIFY_TIS is supported.
        modify_tis: bool = 0x6c[31:31],
        /// Flow counters can be dumped.
        flow_counters_dump: bool = 0x6c[30:30],
        /// log2 of the number of RQs.
        log_max_rq: u8 = 0x6c[28:24],
        /// log2 of the number of SQs.
        log_max_sq: u8 = 0x6c[20:16],
        /// log2 of the number of TIRs.
        log_max_tir: u8 = 0x6c[12:8],
        /// log2 of the number of TISes.
        log_max_tis: u8 = 0x6c[4:0],
        /// Cyclic receive WQEs.
        basic_cyclic_rcv_wqe: bool = 0x70[31:31],
        /// Memory RQ type RMP.
        mem_rq_rmp: bool = 0x70[29:29],
        /// log2 of the number of RMPs.
        log_max_rmp: u8 = 0x70[28:24],
        /// log2 of the number of RQ tables.
        log_max_rqt: u8 = 0x70[20:16],
        /// log2 of the largest RQ table.
        log_max_rqt_size: u8 = 0x70[12:8],
        /// log2 of the TISes per SQ.
        log_max_tis_per_sq: u8 = 0x70[4:0],
        /// Extended stride number range.
        ext_stride_num_range: bool = 0x74[31:31],
        /// log2 of the largest RQ stride (bytes).
        log_max_stride_sz_rq: u8 = 0x74[28:24],
        /// Mkey context can order reads after writes.
        mkc_order_read_after_write: bool = 0x74[23:23],
        /// Mkey context write-after-write ordering for relaxed ordering only.
        mkc_order_write_after_write_ro_only: bool = 0x74[22:22],
        /// log2 of the smallest RQ stride (bytes).
        log_min_stride_sz_rq: u8 = 0x74[20:16],
        /// log2 of the largest SQ stride (bytes).
        log_max_stride_sz_sq: u8 = 0x74[12:8],
        /// log2 of the smallest SQ stride (bytes).
        log_min_stride_sz_sq: u8 = 0x74[4:0],
        /// Hairpin queues.
        hairpin: bool = 0x78[31:31],
        /// log2 of the number of hairpin queues.
        log_max_hairpin_queues: u8 = 0x78[28:24],
        /// log2 of the largest hairpin WQ data size.
        log_max_hairpin_wq_data_sz: u8 = 0x78[20:16],
        /// log2 of the most hairpin packets.
        log_max_hairpin_num_packets: u8 = 0x78[12:8],
        /// log2 of the largest WQ (WQEs).
        log_max_wq_sz: u8 = 0x78[4:0],
        /// NIC vport change events.
        nic_vport_change_event: bool = 0x7c[31:31],
        /// Local unicast loopback can be disabled.
        disable_local_lb_uc: bool = 0x7c[30:30],
        /// Local multicast loopback can be disabled.
        disable_local_lb_mc: bool = 0x7c[29:29],
        /// log2 of the smallest hairpin WQ data size.
        log_min_hairpin_wq_data_sz: u8 = 0x7c[28:24],
        /// log2 of the largest VLAN list.
        log_max_vlan_list: u8 = 0x7c[20:16],
        /// AES-XTS single block little-endian tweak.
        aes_xts_single_block_le_tweak: bool = 0x7c[14:14],
        /// AES-XTS multi block big-endian tweak.
        aes_xts_multi_block_be_tweak: bool = 0x7c[13:13],
        /// log2 of the largest multicast MAC list.
        log_max_current_mc_list: u8 = 0x7c[12:8],
        /// log2 of the largest unicast MAC list.
        log_max_current_uc_list: u8 = 0x7c[4:0],
        /// Supported general object types (bit mask).
        general_obj_types: u64 = 0x80[63:0],
        /// SQ timestamp formats.
        sq_ts_format: u8 = 0x88[31:30],
        /// RQ timestamp formats.
        rq_ts_format: u8 = 0x88[29:28],
        /// Steering format version.
        steering_format_version: u8 = 0x88[27:24],
        /// AES-XTS.
        aes_xts: bool = 0x8c[23:23],
        /// Crypto.
        crypto: bool = 0x8c[22:22],
        /// IPsec offload.
        ipsec_offload: bool = 0x8c[21:21],
        /// Number of EQs (when non-zero, overrides `log_max_eq`).
        max_num_eqs: u16 = 0x8c[15:0],
        /// log2 of the L2 table size.
        log_max_l2_table: u8 = 0x90[28:24],
        /// log2 of the UAR page size in 4 KiB units.
        log_uar_page_sz: u16 = 0x90[15:0],
        /// Device clock frequency, MHz.
        device_frequency_mhz: u32 = 0x98[31:0],
        /// Device clock frequency, kHz.
        device_frequency_khz: u32 = 0x9c[31:0],
        /// Number of UARs per UAR page.
        num_of_uars_per_page: u32 = 0xa4[31:0],
        /// Flex parser protocols (bit mask).
        flex_parser_protocols: u32 = 0xa8[31:0],
        /// Most Geneve TLV options.
        max_geneve_tlv_options: u8 = 0xac[31:24],
        /// Geneve TLV sampling.
        geneve_tlv_sample: bool = 0xac[23:23],
        /// Geneve TLV option offset.
        geneve_tlv_option_offset: bool = 0xac[22:22],
        /// Longest Geneve TLV option data.
        max_geneve_tlv_option_data_len: u8 = 0xac[20:16],
        /// Flex parser header modify.
        flex_parser_header_modify: bool = 0xac[15:15],
        /// log2 of the guaranteed connections.
        log_max_guaranteed_connections: u8 = 0xac[12:8],
        /// SET_DRIVER_VERSION may be sent before INIT_HCA.
        driver_version_before_init_hca: bool = 0xac[7:7],
        /// Advanced virtualization.
        adv_virtualization: bool = 0xac[6:6],
        /// log2 of the DCT connections.
        log_max_dct_connections: u8 = 0xac[4:0],
        /// log2 of the largest QP atomic.
        log_max_atomic_size_qp: u8 = 0xb0[31:24],
        /// log2 of the DCI stream channels.
        log_max_dci_stream_channels: u8 = 0xb0[20:16],
        /// log2 of the DCI errored streams.
        log_max_dci_errored_streams: u8 = 0xb0[12:8],
        /// log2 of the largest DC atomic (the PRM header spells it "dize").
        log_max_atomic_dize_dc: u8 = 0xb0[7:0],
        /// Largest multi-user group.
        max_multi_user_ggroup_size: u16 = 0xb4[31:16],
        /// Enhanced CQE compression.
        enhanced_cqe_compression: bool = 0xb4[15:15],
        /// Crossing-vHCA mkeys.
        crossing_vhca_mkey: bool = 0xb4[13:13],
        /// log2 of the number of DEKs.
        log_max_dek: u8 = 0xb4[12:8],
        /// Mini CQE with L3/L4 tag.
        mini_cqe_resp_l3_l4_tag: bool = 0xb4[6:6],
        /// Mini CQE with flow tag.
        mini_cqe_resp_flow_tag: bool = 0xb4[5:5],
        /// Mini CQE with stride index.
        mini_cqe_resp_stride_index: bool = 0xb4[3:3],
        /// Always 128-byte CQEs.
        cqe_128_always: bool = 0xb4[2:2],
        /// CQE compression with 128-byte CQEs.
        cqe_compression_128: bool = 0xb4[1:1],
        /// CQE compression.
        cqe_compression: bool = 0xb4[0:0],
        /// CQE compression timeout.
        cqe_compression_timeout: u16 = 0xb8[31:16],
        /// Most CQEs compressed in one session.
        cqe_compression_max_num: u16 = 0xb8[15:0],
        /// Flex parser id of GTP-U dword 0.
        flex_parser_id_gtpu_dw_0: u8 = 0xbc[23:20],
        /// Tag matching.
        tag_matching: bool = 0xbc[15:15],
        /// Rendezvous offload on RC.
        rndv_offload_rc: bool = 0xbc[14:14],
        /// Rendezvous offload on DC.
        rndv_offload_dc: bool = 0xbc[13:13],
        /// log2 of the tag matching list size.
        log_tag_matching_list_sz: u8 = 0xbc[12:8],
        /// log2 of the number of XRQs.
        log_max_xrq: u8 = 0xbc[4:0],
        /// NIC vport affiliation criteria.
        affiliate_nic_vport_criteria: u8 = 0xc0[31:24],
        /// Native port number.
        native_port_num: u8 = 0xc0[23:16],
        /// Number of vHCA ports.
        num_vhca_ports: u8 = 0xc0[15:8],
        /// Flex parser id of the GTP-U TEID.
        flex_parser_id_gtpu_teid: u8 = 0xc0[7:4],
        /// Software owner id.
        sw_owner_id: bool = 0xc0[1:1],
        /// Wait on data (WAIT WQE).
        wait_on_data: bool = 0xd0[20:20],
        /// Wait on time (WAIT WQE).
        wait_on_time: bool = 0xd0[19:19],
        /// Flex parser id of Geneve option 0.
        flex_parser_id_geneve_opt_0: u8 = 0xd8[27:24],
        /// Flex parser id of ICMP dword 1.
        flex_parser_id_icmp_dw1: u8 = 0xd8[23:20],
        /// Flex parser id of ICMP dword 0.
        flex_parser_id_icmp_dw0: u8 = 0xd8[19:16],
        /// Flex parser id of ICMPv6 dword 1.
        flex_parser_id_icmpv6_dw1: u8 = 0xd8[15:12],
        /// Flex parser id of ICMPv6 dword 0.
        flex_parser_id_icmpv6_dw0: u8 = 0xd8[11:8],
        /// Flex parser id of the outer first MPLS over GRE.
        flex_parser_id_outer_first_mpls_over_gre: u8 = 0xd8[7:4],
        /// Flex parser id of the outer first MPLS over UDP label.
        flex_parser_id_outer_first_mpls_over_udp_label: u8 = 0xd8[3:0],
        /// Flex parser id of GTP-U dword 2.
        flex_parser_id_gtpu_dw_2: u8 = 0xe0[31:28],
        /// Flex parser id of the GTP-U first extension dword 0.
        flex_parser_id_gtpu_first_ext_dw_0: u8 = 0xe0[27:24],
        /// DMA MMO on QPs.
        dma_mmo_qp: bool = 0xe8[23:23],
        /// RegExp MMO on QPs.
        regexp_mmo_qp: bool = 0xe8[22:22],
        /// Compress MMO on QPs.
        compress_mmo_qp: bool = 0xe8[21:21],
        /// Deflate decompression v1.
        decompress_deflate_v1: bool = 0xe8[20:20],
        /// Deflate decompression v2.
        decompress_deflate_v2: bool = 0xe8[15:15],
        /// log2 of the header modify arguments.
        log_max_num_header_modify_argument: u8 = 0xec[28:24],
        /// Header modify argument granularity offset.
        log_header_modify_argument_granularity_offset: u8 = 0xec[23:20],
        /// log2 of the header modify argument granularity.
        log_header_modify_argument_granularity: u8 = 0xec[19:16],
        /// log2 of the largest header modify argument allocation.
        log_header_modify_argument_max_alloc: u8 = 0xec[12:8],
        /// Supported match definer formats (bit mask).
        match_definer_format_supported: u64 = 0xf8[63:0],
    }
}

prm_struct! {
    /// Ethernet offload capabilities (`per_protocol_networking_offload_caps`,
    /// capability type [`CAP_ETHERNET_OFFLOADS`]).
    pub struct PerProtocolNetworkingOffloadCaps("per_protocol_networking_offload_caps", 0x100) {
        /// Checksum offload.
        csum_cap: bool = 0x00[31:31],
        /// VLAN stripping and insertion.
        vlan_cap: bool = 0x00[30:30],
        /// Large receive offload.
        lro_cap: bool = 0x00[29:29],
        /// LRO with the TCP PSH flag.
        lro_psh_flag: bool = 0x00[28:28],
        /// LRO with TCP timestamps.
        lro_time_stamp: bool = 0x00[27:27],
        /// LRO maximum message size mode.
        lro_max_msg_sz_mode: u8 = 0x00[26:25],
        /// VLAN insertion from the WQE.
        wqe_vlan_insert: bool = 0x00[24:24],
        /// Self loopback enable is modifiable.
        self_lb_en_modifiable: bool = 0x00[23:23],
        /// Multicast self loopback.
        self_lb_mc: bool = 0x00[22:22],
        /// Unicast self loopback.
        self_lb_uc: bool = 0x00[21:21],
        /// log2 of the largest LSO message.
        max_lso_cap: u8 = 0x00[20:16],
        /// Multi-packet send WQEs.
        multi_pkt_send_wqe: u8 = 0x00[15:14],
        /// Inline mode the SQ WQEs need (0 L2, 1 vport context, 2 none).
        wqe_inline_mode: u8 = 0x00[13:12],
        /// log2 of the RSS indirection table size.
        rss_ind_tbl_cap: u8 = 0x00[11:8],
        /// UMR on SQs.
        reg_umr_sq: bool = 0x00[7:7],
        /// FCS scatter.
        scatter_fcs: bool = 0x00[6:6],
        /// Enhanced multi-packet send WQEs.
        enhanced_multi_pkt_send_wqe: bool = 0x00[5:5],
        /// Tunnel LSO with constant outer IP id.
        tunnel_lso_const_out_ip_id: bool = 0x00[4:4],
        /// LRO on GRE tunnels.
        tunnel_lro_gre: bool = 0x00[3:3],
        /// LRO on VXLAN tunnels.
        tunnel_lro_vxlan: bool = 0x00[2:2],
        /// Stateless GRE offloads.
        tunnel_stateless_gre: bool = 0x00[1:1],
        /// Stateless VXLAN offloads.
        tunnel_stateless_vxlan: bool = 0x00[0:0],
        /// Software parser.
        swp: bool = 0x04[31:31],
        /// Software parser checksum.
        swp_csum: bool = 0x04[30:30],
        /// Software parser LSO.
        swp_lso: bool = 0x04[29:29],
        /// Stateless GTP offloads.
        tunnel_stateless_gtp: bool = 0x04[20:20],
        /// Stateless VXLAN-GPE NSH offloads.
        tunnel_stateless_vxlan_gpe_nsh: bool = 0x04[17:17],
        /// Number of VXLAN UDP ports.
        max_vxlan_udp_ports: u8 = 0x04[15:8],
        /// Geneve option length.
        max_geneve_opt_len: bool = 0x04[1:1],
        /// Stateless Geneve RX offloads.
        tunnel_stateless_geneve_rx: bool = 0x04[0:0],
        /// Smallest LRO MSS.
        lro_min_mss_size: u16 = 0x08[15:0],
        /// The four supported LRO timer periods, 32 bits each (µs).
        lro_timer_supported_periods: [u8; 16] = 0x30,
    }
}

prm_struct! {
    /// Atomic capabilities (`atomic_caps`, capability type [`CAP_ATOMIC`]).
    pub struct AtomicCaps("atomic_caps", 0x100) {
        /// Byte order of 8-byte atomics: `ATOMIC_REQ_8B_ENDIANNESS_MODE_*`
        /// (settable with SET_HCA_CAP).
        atomic_req_8B_endianness_mode: u8 = 0x08[31:30],
        /// Host-endian 8-byte atomics are supported (mode 1).
        supported_atomic_req_8B_endianness_mode_1: bool = 0x08[25:25],
        /// Supported operations (`ATOMIC_OPS_*` bits).
        atomic_operations: u16 = 0x10[15:0],
        /// Supported atomic sizes on QPs (bit n: 2^n bytes).
        atomic_size_qp: u16 = 0x14[15:0],
        /// Supported atomic sizes on DC (bit n: 2^n bytes).
        atomic_size_dc: u16 = 0x18[15:0],
        /// PCI atomic fetch-and-add sizes.
        fetch_add_pci_atomic: u16 = 0x50[31:16],
        /// PCI atomic swap sizes.
        swap_pci_atomic: u16 = 0x50[15:0],
        /// PCI atomic compare-and-swap sizes.
        compare_swap_pci_atomic: u16 = 0x54[31:16],
    }
}

prm_struct! {
    /// RoCE capabilities (`roce_cap`, capability type [`CAP_ROCE`]), the
    /// layout Linux reads with `MLX5_CAP_ROCE`.
    ///
    /// The layout facts hold only the first dword of `roce_cap`; the fields
    /// from dword 0x10 on (`l3_type`, `roce_version`,
    /// `r_roce_dest_udp_port`, the source port range,
    /// `roce_address_table_size`) and `roce_apm` are taken from Linux's
    /// `mlx5_ifc_roce_cap_bits` and agree with the DPDK `roce_caps` layout
    /// where both define a field; the real ConnectX-4 answer in the trace
    /// reads 4791 in `r_roce_dest_udp_port`.
    pub struct RoceCap("roce_cap", 0x100) {
        /// Automatic path migration over RoCE.
        roce_apm: bool = 0x00[31:31],
        /// The RoCE v2 UDP source port can be set by software.
        sw_r_roce_src_udp_port: bool = 0x00[27:27],
        /// Force loopback of RC QPs when RoCE is disabled.
        fl_rc_qp_when_roce_disabled: bool = 0x00[26:26],
        /// Force loopback of RC QPs when RoCE is enabled.
        fl_rc_qp_when_roce_enabled: bool = 0x00[25:25],
        /// QP timestamp formats.
        qp_ts_format: u8 = 0x00[1:0],
        /// Supported L3 types (bit 0 IPv4, bit 1 IPv6...).
        l3_type: u8 = 0x10[19:16],
        /// Supported RoCE versions (`ROCE_VERSION_*` bits).
        roce_version: u8 = 0x10[7:0],
        /// UDP destination port of RoCE v2 (4791).
        r_roce_dest_udp_port: u16 = 0x14[15:0],
        /// Highest RoCE v2 UDP source port.
        r_roce_max_src_udp_port: u16 = 0x18[31:16],
        /// Lowest RoCE v2 UDP source port.
        r_roce_min_src_udp_port: u16 = 0x18[15:0],
        /// Number of RoCE address (GID) table entries.
        roce_address_table_size: u16 = 0x1c[15:0],
    }
}

prm_struct! {
    /// The DPDK view of the RoCE capability block (`roce_caps`), a subset of
    /// [`RoceCap`]; it is the RoCE member of `hca_cap_union`.
    pub struct RoceCaps("roce_caps", 0x100) {
        /// QP timestamp formats.
        qp_ts_format: u8 = 0x00[1:0],
        /// Highest RoCE v2 UDP source port.
        r_roce_max_src_udp_port: u16 = 0x18[31:16],
        /// Lowest RoCE v2 UDP source port.
        r_roce_min_src_udp_port: u16 = 0x18[15:0],
    }
}

prm_struct! {
    /// Properties of one flow table type (`flow_table_prop_layout`).
    pub struct FlowTablePropLayout("flow_table_prop_layout", 0x40) {
        /// Flow tables of this type exist.
        ft_support: bool = 0x00[31:31],
        /// Flow tags.
        flow_tag: bool = 0x00[30:30],
        /// Flow counters.
        flow_counter: bool = 0x00[29:29],
        /// Flow entries can be modified.
        flow_modify_en: bool = 0x00[28:28],
        /// The root table can be changed.
        modify_root: bool = 0x00[27:27],
        /// Identified miss table.
        identified_miss_table: bool = 0x00[26:26],
        /// MODIFY_FLOW_TABLE.
        flow_table_modify: bool = 0x00[25:25],
        /// Packet reformat.
        reformat: bool = 0x00[24:24],
        /// Decapsulation.
        decap: bool = 0x00[23:23],
        /// The root can be reset to the default.
        reset_root_to_default: bool = 0x00[22:22],
        /// VLAN pop.
        pop_vlan: bool = 0x00[21:21],
        /// VLAN push.
        push_vlan: bool = 0x00[20:20],
        /// FPGA vendor acceleration.
        fpga_vendor_acceleration: bool = 0x00[19:19],
        /// Second VLAN pop.
        pop_vlan_2: bool = 0x00[18:18],
        /// Second VLAN push.
        push_vlan_2: bool = 0x00[17:17],
        /// Reformat and VLAN action together.
        reformat_and_vlan_action: bool = 0x00[16:16],
        /// Modify header and VLAN action together.
        modify_and_vlan_action: bool = 0x00[15:15],
        /// Software-owned steering.
        sw_owner: bool = 0x00[14:14],
        /// Reformat L3 tunnel to L2.
        reformat_l3_tunnel_to_l2: bool = 0x00[13:13],
        /// Reformat L2 to L3 tunnel.
        reformat_l2_to_l3_tunnel: bool = 0x00[12:12],
        /// Reformat and modify header together.
        reformat_and_modify_action: bool = 0x00[11:11],
        /// Software-owned steering v2.
        sw_owner_v2: bool = 0x00[1:1],
        /// log2 of the largest flow table.
        log_max_ft_size: u8 = 0x04[29:24],
        /// log2 of the modify header contexts.
        log_max_modify_header_context: u8 = 0x04[23:16],
        /// Most modify header actions.
        max_modify_header_actions: u8 = 0x04[15:8],
        /// Deepest flow table level.
        max_ft_level: u8 = 0x04[7:0],
        /// log2 of the flow samplers.
        log_max_ft_sampler_num: u8 = 0x08[23:16],
        /// Width of metadata register B.
        metadata_reg_b_width: u8 = 0x08[15:8],
        /// Width of metadata register A.
        metadata_reg_a_width: u8 = 0x08[7:0],
        /// Reparse.
        reparse: bool = 0x0c[21:21],
        /// Cross-vHCA objects.
        cross_vhca_object: bool = 0x0c[19:19],
        /// Reformat L2 to L3 AUDP tunnel.
        reformat_l2_to_l3_audp_tunnel: bool = 0x0c[18:18],
        /// Reformat L3 AUDP tunnel to L2.
        reformat_l3_audp_tunnel_to_l2: bool = 0x0c[17:17],
        /// Ignore flow level with RTC valid.
        ignore_flow_level_rtc_valid: bool = 0x0c[16:16],
        /// log2 of the number of flow tables.
        log_max_ft_num: u8 = 0x0c[7:0],
        /// log2 of the flow counters.
        log_max_flow_counter: u8 = 0x10[15:8],
        /// log2 of the destinations of one entry.
        log_max_destination: u8 = 0x10[7:0],
        /// log2 of the flow entries.
        log_max_flow: u8 = 0x14[7:0],
    }
}

prm_struct! {
    /// QoS capabilities (`qos_cap`, capability type [`CAP_QOS`]), read when
    /// `cmd_hca_cap.qos` is set (Linux `MLX5_CAP_QOS`): packet pacing
    /// and its rate-limit table (see [`crate::pp`]). Rates are kbit/s.
    pub struct QosCap("qos_cap", 0x100) {
        /// Send queues can be paced (`sqc.packet_pacing_rate_limit_index`).
        packet_pacing: bool = 0x00[31:31],
        /// E-switch scheduling.
        esw_scheduling: bool = 0x00[30:30],
        /// E-switch bandwidth share.
        esw_bw_share: bool = 0x00[29:29],
        /// E-switch rate limit.
        esw_rate_limit: bool = 0x00[28:28],
        /// SET_PP_RATE_LIMIT honours `burst_upper_bound`.
        packet_pacing_burst_bound: bool = 0x00[26:26],
        /// SET_PP_RATE_LIMIT honours `typical_packet_size`.
        packet_pacing_typical_size: bool = 0x00[25:25],
        /// Flow meters (older interface).
        flow_meter_old: bool = 0x00[24:24],
        /// log2 of the flow meters.
        log_max_flow_meter: u8 = 0x00[15:8],
        /// Register a flow meter reports in.
        flow_meter_reg_id: u8 = 0x00[7:0],
        /// Rate in WQEs per second (packet pacing).
        wqe_rate_pp: bool = 0x04[31:31],
        /// Flow meters.
        flow_meter: bool = 0x04[23:23],
        /// Highest rate a table entry takes, kbit/s.
        packet_pacing_max_rate: u32 = 0x08[31:0],
        /// Lowest rate a table entry takes, kbit/s.
        packet_pacing_min_rate: u32 = 0x0c[31:0],
        /// Entries of the rate-limit table (index 0 included).
        packet_pacing_rate_table_size: u16 = 0x10[15:0],
        /// E-switch scheduling element types.
        esw_element_type: u16 = 0x14[31:16],
        /// E-switch TSAR types.
        esw_tsar_type: u16 = 0x14[15:0],
        /// QoS parameters per vport.
        max_qos_para_vport: u16 = 0x18[15:0],
        /// Largest TSAR bandwidth share.
        max_tsar_bw_share: u32 = 0x1c[31:0],
        /// NIC scheduling element types.
        nic_element_type: u16 = 0x20[31:16],
        /// NIC TSAR types.
        nic_tsar_type: u16 = 0x20[15:0],
        /// log2 of the meter ASO granularity.
        log_meter_aso_granularity: u8 = 0x24[28:24],
        /// log2 of the meter ASOs per allocation.
        log_meter_aso_max_alloc: u8 = 0x24[20:16],
        /// log2 of the meter ASOs.
        log_max_num_meter_aso: u8 = 0x24[12:8],
    }
}

prm_struct! {
    /// NIC flow table capabilities (`flow_table_nic_cap`, capability type
    /// [`CAP_FLOW_TABLE`]), 4 KiB. The header-modify field lists
    /// (`ft_fields_support`) are kept as bytes.
    pub struct FlowTableNicCap("flow_table_nic_cap", 0x1000) {
        /// NIC receive tables.
        flow_table_properties_nic_receive: FlowTablePropLayout = 0x040,
        /// NIC receive RDMA tables.
        flow_table_properties_nic_receive_rdma: FlowTablePropLayout = 0x080,
        /// NIC receive sniffer tables.
        flow_table_properties_nic_receive_sniffer: FlowTablePropLayout = 0x0c0,
        /// NIC transmit tables.
        flow_table_properties_nic_transmit: FlowTablePropLayout = 0x100,
        /// NIC transmit RDMA tables.
        flow_table_properties_nic_transmit_rdma: FlowTablePropLayout = 0x140,
        /// NIC transmit sniffer tables.
        flow_table_properties_nic_transmit_sniffer: FlowTablePropLayout = 0x180,
        /// Header fields modifiable on receive (`ft_fields_support`).
        ft_header_modify_nic_receive: [u8; 128] = 0x200,
        /// More receive fields (`ft_fields_support_2`).
        ft_field_support_2_nic_receive: [u8; 16] = 0x280,
        /// More transmit fields (`ft_fields_support_2`).
        ft_field_support_2_nic_transmit: [u8; 16] = 0x2e0,
        /// Header fields modifiable on transmit (`ft_fields_support`).
        ft_header_modify_nic_transmit: [u8; 128] = 0x380,
    }
}

prm_struct! {
    /// The 4 KiB capability block (`hca_cap_union`): one member per
    /// capability type, all at offset 0.
    ///
    /// `atomic_caps` and `roce_cap` are not members of the union in the
    /// layout facts (which come from DPDK) but are what Linux reads for
    /// types [`CAP_ATOMIC`] and [`CAP_ROCE`].
    pub struct HcaCapUnion("hca_cap_union", 0x1000) {
        /// Type [`CAP_GENERAL`].
        cmd_hca_cap: CmdHcaCap = 0x000,
        /// Type [`CAP_ETHERNET_OFFLOADS`].
        per_protocol_networking_offload_caps: PerProtocolNetworkingOffloadCaps = 0x000,
        /// Type [`CAP_ATOMIC`].
        atomic_caps: AtomicCaps = 0x000,
        /// Type [`CAP_ROCE`], Linux's layout.
        roce_cap: RoceCap = 0x000,
        /// Type [`CAP_ROCE`], DPDK's layout.
        roce_caps: RoceCaps = 0x000,
        /// Type [`CAP_FLOW_TABLE`].
        flow_table_nic_cap: FlowTableNicCap = 0x000,
        /// Type [`CAP_QOS`].
        qos_cap: QosCap = 0x000,
    }
}

/// A capability block that QUERY_HCA_CAP returns for one capability type.
pub trait HcaCap: Layout {
    /// The capability type (`MLX5_CAP_*`).
    const CAP_TYPE: u16;
}

impl HcaCap for CmdHcaCap {
    const CAP_TYPE: u16 = CAP_GENERAL;
}
impl HcaCap for PerProtocolNetworkingOffloadCaps {
    const CAP_TYPE: u16 = CAP_ETHERNET_OFFLOADS;
}
impl HcaCap for AtomicCaps {
    const CAP_TYPE: u16 = CAP_ATOMIC;
}
impl HcaCap for RoceCap {
    const CAP_TYPE: u16 = CAP_ROCE;
}
impl HcaCap for FlowTableNicCap {
    const CAP_TYPE: u16 = CAP_FLOW_TABLE;
}
impl HcaCap for QosCap {
    const CAP_TYPE: u16 = CAP_QOS;
}

/// The layout of the capability block of `cap_type`, for the types this
/// crate declares.
pub fn cap_layout(cap_type: u16) -> Option<&'static crate::layout::LayoutInfo> {
    match cap_type {
        CAP_GENERAL => Some(&<CmdHcaCap as Layout>::INFO),
        CAP_ETHERNET_OFFLOADS => Some(&<PerProtocolNetworkingOffloadCaps as Layout>::INFO),
        CAP_ATOMIC => Some(&<AtomicCaps as Layout>::INFO),
        CAP_ROCE => Some(&<RoceCap as Layout>::INFO),
        CAP_FLOW_TABLE => Some(&<FlowTableNicCap as Layout>::INFO),
        CAP_QOS => Some(&<QosCap as Layout>::INFO),
        _ => None,
    }
}

prm_struct! {
    /// QUERY_HCA_CAP input (`query_hca_cap_in`); op_mod =
    /// [`hca_cap_op_mod`]`(type, mode)`.
    pub struct QueryHcaCapIn("query_hca_cap_in", 0x10): command QUERY_HCA_CAP -> QueryHcaCapOut {
        /// Opcode (QUERY_HCA_CAP).
        opcode: u16 = 0x00[31:16],
        /// Capability type << 1 | mode (0 maximum, 1 current).
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// QUERY_HCA_CAP output (`query_hca_cap_out`), 0x1010 bytes.
    pub struct QueryHcaCapOut("query_hca_cap_out", 0x1010) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The capability block of the queried type.
        capability: HcaCapUnion = 0x10,
    }
}

prm_struct! {
    /// SET_HCA_CAP input (`set_hca_cap_in`), 0x1010 bytes: the whole current
    /// capability block of one type with the settable fields changed.
    pub struct SetHcaCapIn("set_hca_cap_in", 0x1010): command SET_HCA_CAP -> SetHcaCapOut {
        /// Opcode (SET_HCA_CAP).
        opcode: u16 = 0x00[31:16],
        /// Op mod: capability type << 1 (mode bit 0).
        op_mod: u16 = 0x04[15:0],
        /// Set the capabilities of `function_id`, not of this function.
        other_function: bool = 0x08[31:31],
        /// Function whose capabilities are set (with `other_function`).
        function_id: u16 = 0x08[15:0],
        /// The capability block to set.
        capability: HcaCapUnion = 0x10,
    }
}

prm_struct! {
    /// SET_HCA_CAP output (`set_hca_cap_out`).
    pub struct SetHcaCapOut("set_hca_cap_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

/// Byte offset of the capability block in QUERY_HCA_CAP's output and
/// SET_HCA_CAP's input.
pub const CAPABILITY_OFFSET: usize = 0x10;

fn read_cap<C: HcaCap>(image: &[u8]) -> C {
    let mut c = C::zeroed();
    let n = C::SIZE;
    c.bytes_mut()
        .copy_from_slice(&image[CAPABILITY_OFFSET..CAPABILITY_OFFSET + n]);
    c
}

impl QueryHcaCapIn {
    /// A query for capability block `C` in `mode` (`HCA_CAP_OP_MOD_GET_*`).
    pub fn for_cap<C: HcaCap>(mode: u16) -> Result<Self, Error> {
        Self::new().with(Self::op_mod, hca_cap_op_mod(C::CAP_TYPE, mode))
    }

    /// The capability type this query asks for (op_mod >> 1).
    pub fn cap_type(&self) -> u16 {
        self.get(Self::op_mod) >> 1
    }
}

impl QueryHcaCapOut {
    /// The capability block read as `C` (the caller knows the type it
    /// queried).
    pub fn cap<C: HcaCap>(&self) -> C {
        read_cap(&self.0)
    }
}

impl SetHcaCapIn {
    /// SET_HCA_CAP of capability block `cap`: op_mod = its type << 1 and the
    /// block at 0x10, the rest of the union zero.
    pub fn for_cap<C: HcaCap>(cap: &C) -> Result<Self, Error> {
        let mut s = Self::new();
        s.set(Self::op_mod, hca_cap_op_mod(C::CAP_TYPE, 0))?;
        s.0[CAPABILITY_OFFSET..CAPABILITY_OFFSET + C::SIZE].copy_from_slice(cap.bytes());
        Ok(s)
    }

    /// The capability block read as `C`.
    pub fn cap<C: HcaCap>(&self) -> C {
        read_cap(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ts_format_follows_linux() {
        // Free-running where offered (0: also every device predating the
        // field; 2: both), the device's default where only real time is.
        assert_eq!(
            default_ts_format(TIMESTAMP_FORMAT_CAP_FREE_RUNNING),
            TIMESTAMP_FORMAT_FREE_RUNNING
        );
        assert_eq!(
            default_ts_format(TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME),
            TIMESTAMP_FORMAT_FREE_RUNNING
        );
        assert_eq!(
            default_ts_format(TIMESTAMP_FORMAT_CAP_REAL_TIME),
            TIMESTAMP_FORMAT_DEFAULT
        );
        assert!(!ts_cap_real_time(0) && ts_cap_real_time(1) && ts_cap_real_time(2));
        assert!(ts_cap_free_running(0) && !ts_cap_free_running(1) && ts_cap_free_running(2));
        assert!(!ts_cap_free_running(3) && !ts_cap_real_time(3));
    }
}
