//! The syndromes the emulated firmware returns with a failing command
//! status.
//!
//! Real firmware syndromes are opaque 32-bit numbers that identify the exact
//! check that failed; the emulator's are stable and distinct too, one per
//! check, so a test can assert *which* rule refused a command. Checks that
//! apply to every command live at `0xE0_00xx`; a command-specific check is
//! `opcode << 8 | n` (so `0x0004_0003` is the third check of CREATE_CQ 0x400).
//! [`describe`] names any of them.

macro_rules! syndromes {
    ($($(#[$m:meta])* $name:ident = $val:expr, $text:expr;)*) => {
        $($(#[$m])* #[doc = $text] pub const $name: u32 = $val;)*
        /// Every syndrome with its description.
        pub const ALL: &[(u32, &str, &str)] = &[$(($val, stringify!($name), $text)),*];
    };
}

syndromes! {
    // Checks common to every command.
    BAD_OPCODE = 0x00e0_0001, "opcode not supported by this firmware";
    NOT_ENABLED = 0x00e0_0002, "command before ENABLE_HCA";
    NOT_INITIALIZED = 0x00e0_0003, "command needs INIT_HCA first";
    ONLY_BEFORE_INIT = 0x00e0_0004, "command only allowed before INIT_HCA";
    INPUT_TOO_SHORT = 0x00e0_0005, "input length shorter than the command's layout";
    OUTPUT_TOO_SHORT = 0x00e0_0006, "output length shorter than the command's layout";
    RESERVED_NOT_ZERO = 0x00e0_0007, "a reserved field of the command input is not zero";
    BAD_OP_MOD = 0x00e0_0008, "op_mod not valid for this command";
    INJECTED = 0x00e0_0009, "failure injected by the test (fail_opcode without syndrome)";
    TORN_DOWN = 0x00e0_000a, "command after TEARDOWN_HCA";
    BAD_UID = 0x00e0_000b, "uid must be 0 (no user contexts)";
    PAS_TOO_SHORT = 0x00e0_000c, "input too short for the page list the queue size needs";
    PAS_MISALIGNED = 0x00e0_000d, "a page address is not 4 KiB aligned";
    BAD_UAR = 0x00e0_000e, "uar_page is not an allocated UAR";
    BAD_PD = 0x00e0_000f, "pd is not an allocated protection domain";
    BAD_CQN = 0x00e0_0010, "CQ number does not exist";
    DBR_MISALIGNED = 0x00e0_0011, "dbr_addr is not 8-byte aligned";
    NO_SUCH_OBJECT = 0x00e0_0012, "object number does not exist";
    IN_USE = 0x00e0_0013, "object still in use by another object";
    TOO_MANY = 0x00e0_0014, "no more objects of this type (log_max_* reached)";
    BAD_PAGE_SIZE = 0x00e0_0015, "log_page_size out of range";
    BAD_PORT = 0x00e0_0016, "port number out of range";
    BAD_TD = 0x00e0_0017, "transport domain does not exist";
    PAGE_OFFSET = 0x00e0_0018, "page_offset must be 0";

    // ENABLE_HCA / DISABLE_HCA / INIT_HCA / TEARDOWN_HCA.
    ALREADY_ENABLED = 0x0001_0401, "ENABLE_HCA: function already enabled";
    BAD_FUNCTION_ID = 0x0001_0402, "function_id must be 0 (no VFs)";
    DISABLE_WHILE_INIT = 0x0001_0501, "DISABLE_HCA while the HCA is initialized (TEARDOWN_HCA first)";
    INIT_PAGES_MISSING = 0x0001_0201, "INIT_HCA before the boot and init pages asked for were given";
    BAD_TEARDOWN_PROFILE = 0x0001_0301, "TEARDOWN_HCA profile not supported";
    // ISSI.
    ISSI_UNSUPPORTED = 0x0001_0b01, "SET_ISSI with an ISSI the firmware does not support";
    // QUERY_PAGES / MANAGE_PAGES.
    PAGES_OP_MOD = 0x0001_0701, "QUERY_PAGES op_mod must be 1 (boot), 2 (init) or 3 (regular)";
    PAGE_NOT_MAPPED = 0x0001_0801, "MANAGE_PAGES: a page is not mapped DMA memory (IOMMU fault)";
    PAGE_DUPLICATE = 0x0001_0802, "MANAGE_PAGES: a page is given twice or is already held";
    PAGE_MISALIGNED = 0x0001_0803, "MANAGE_PAGES: a page address is not 4 KiB aligned";
    PAGES_LIST_SHORT = 0x0001_0804, "MANAGE_PAGES: input shorter than input_num_entries addresses";
    PAGES_OUT_SHORT = 0x0001_0805, "MANAGE_PAGES take: output too short for the pages returned";
    PAGES_TOO_MANY = 0x0001_0806, "MANAGE_PAGES give: more pages than the firmware can hold";
    // QUERY_HCA_CAP / SET_HCA_CAP.
    CAP_TYPE = 0x0001_0001, "QUERY_HCA_CAP: capability type not supported";
    SET_CAP_TYPE = 0x0001_0901, "SET_HCA_CAP: capability type cannot be set";
    SET_CAP_ABOVE_MAX = 0x0001_0902, "SET_HCA_CAP: a settable field exceeds its maximum";
    SET_CAP_UNSUPPORTED = 0x0001_0903, "SET_HCA_CAP: a mode the maximum caps do not offer";
    // ACCESS_REG.
    REG_UNKNOWN = 0x0008_0501, "ACCESS_REG: register not supported";
    REG_SHORT = 0x0008_0502, "ACCESS_REG: register data shorter than the register";
    REG_BAD_VALUE = 0x0008_0503, "ACCESS_REG: value out of range";
    REG_BEFORE_INIT = 0x0008_0504, "ACCESS_REG: only HOST_ENDIANNESS before INIT_HCA";
    // UAR.
    NO_UAR = 0x0008_0201, "ALLOC_UAR: no UAR pages left in the BAR";
    // MKEY.
    MKEY_ACCESS_MODE = 0x0002_0001, "CREATE_MKEY: access mode not supported (PA and MTT only)";
    MKEY_REMOTE_WITHOUT_LOCAL_WRITE = 0x0002_0002, "CREATE_MKEY: remote write or atomic without local write";
    MKEY_BOUNDS = 0x0002_0003, "CREATE_MKEY: start_addr + len overflows";
    MKEY_MTT_SHORT = 0x0002_0004, "CREATE_MKEY: translations do not cover start_addr..start_addr+len";
    MKEY_MTT_MISALIGNED = 0x0002_0005, "CREATE_MKEY: an MTT entry is not aligned to the page size";
    MKEY_QPN = 0x0002_0006, "CREATE_MKEY: qpn must be 0xffffff";
    MKEY_MTT_OCTOWORDS = 0x0002_0007, "CREATE_MKEY: input shorter than 16 bytes per translations_octword_actual_size";
    // EQ.
    EQ_LOG_SIZE = 0x0003_0101, "CREATE_EQ: log_eq_size above log_max_eq_sz";
    EQ_INTR = 0x0003_0102, "CREATE_EQ: intr beyond the MSI-X vectors";
    EQ_CMD_TWICE = 0x0003_0104, "CREATE_EQ: another EQ already receives command completions";
    // CQ.
    CQ_LOG_SIZE = 0x0004_0001, "CREATE_CQ: log_cq_size above log_max_cq_sz";
    CQ_BAD_EQN = 0x0004_0002, "CREATE_CQ: c_eqn is not an existing EQ";
    CQ_CQE_SIZE = 0x0004_0003, "CREATE_CQ: cqe_sz must be 0 (64 B) or 1 (128 B)";
    // ATTACH_TO_MCG 0x806 / DETACH_FROM_MCG 0x807.
    MCG_NOT_UD = 0x0008_0601, "ATTACH_TO_MCG: the QP is not a UD QP";
    MCG_NOT_MULTICAST = 0x0008_0602, "ATTACH_TO_MCG/DETACH_FROM_MCG: multicast_gid does not start with 0xff";
    MCG_ATTACHED = 0x0008_0603, "ATTACH_TO_MCG: the QP is already attached to the group";
    MCG_NOT_ATTACHED = 0x0008_0701, "DETACH_FROM_MCG: the QP is not attached to the group";
    // MODIFY_CQ 0x403.
    CQ_RESIZE_FIELDS = 0x0004_0301, "MODIFY_CQ resize: resize_field_select lacks log_cq_size (bit 0)";
    CQ_RESIZE_UMEM = 0x0004_0302, "MODIFY_CQ resize: a new buffer on a UMEM (cq_umem_valid) is not emulated";
    CQ_RESIZE_IN_ERROR = 0x0004_0303, "MODIFY_CQ resize: the CQ is in error";
    CQ_RESIZE_TOO_SMALL = 0x0004_0304, "MODIFY_CQ resize: the CQEs not yet consumed do not fit in the new size (or the old ring is full)";
    CQ_RESIZE_DBR = 0x0004_0305, "MODIFY_CQ resize: the doorbell record cannot be read";
    // QP.
    QP_ST = 0x0005_0001, "CREATE_QP: service type not supported (RC, UC, UD)";
    QP_LOG_SIZE = 0x0005_0002, "CREATE_QP: log_rq_size or log_sq_size above log_max_qp_sz";
    QP_RQ_TYPE = 0x0005_0003, "CREATE_QP: rq_type not supported";
    QP_BAD_SRQ = 0x0005_0004, "CREATE_QP: srqn is not an existing SRQ";
    QP_STATE_NOT_RST = 0x0005_0005, "CREATE_QP: initial state must be RST";
    QP_BAD_TRANSITION = 0x0005_0006, "modify QP: not a legal edge from the QP's current state";
    QP_OPT_PARAM = 0x0005_0007, "modify QP: opt_param_mask bit not allowed for this transition";
    QP_PORT = 0x0005_0008, "modify QP: vhca_port_num out of range";
    QP_PKEY_INDEX = 0x0005_0009, "modify QP: pkey_index beyond the P_Key table";
    QP_MTU = 0x0005_000a, "INIT2RTR: mtu must be 1..5 (256..4096)";
    QP_GID_INDEX = 0x0005_000c, "INIT2RTR: src_addr_index is not a valid GID table entry";
    QP_RQ_STRIDE = 0x0005_000d, "CREATE_QP: log_rq_stride gives a receive WQE above max_wqe_sz_rq";
    QP_TOO_MANY_QPS = 0x0005_000e, "CREATE_QP: log_max_qp QPs already exist";
    QP_RMAC = 0x0005_000f, "INIT2RTR: RoCE needs a destination MAC";
    QP_USER_INDEX = 0x0005_0010, "CREATE_QP: user_index set although cqe_version is 0";
    QP_RA_DEPTH = 0x0005_0011, "modify QP: log_sra_max above log_max_ra_req_qp or log_rra_max above log_max_ra_res_qp";
    QP_TS_FORMAT = 0x0005_0020, "CREATE_QP: ts_format not offered by roce_cap.qp_ts_format";
    // RoCE address table.
    ROCE_VHCA_PORT = 0x0007_6101, "SET/QUERY_ROCE_ADDRESS: vhca_port_num set although num_vhca_ports is 0, or out of range";
    ROCE_NOT_ENABLED = 0x0007_6102, "SET/QUERY_ROCE_ADDRESS before roce_en is set in the NIC vport context";
    // SRQ.
    SRQ_LOG_SIZE = 0x0007_0001, "CREATE_SRQ: log_srq_size above log_max_srq_sz";
    SRQ_LWM = 0x0007_0301, "ARM_RQ / MODIFY_RMP: lwm above the SRQ size";
    SRQ_NOT_AT_ISSI_1 = 0x0007_0002, "SRQ commands exist at ISSI 0 only (at ISSI 1 SRQs are RMPs)";
    RMP_NOT_AT_ISSI_0 = 0x0009_0c01, "RMP commands need ISSI 1";
    RMP_STATE = 0x0009_0c02, "CREATE_RMP / MODIFY_RMP: state must be ready (1)";
    RMP_WQ_TYPE = 0x0009_0c03, "CREATE_RMP: wq_type must be linked list (0)";
    RMP_STRIDE = 0x0009_0c04, "CREATE_RMP: log_wq_stride below 16 bytes or above max_wqe_sz_rq";
    RMP_BITMASK = 0x0009_0d01, "MODIFY_RMP: a bitmask bit other than lwm";
    // SQ / RQ / TIS / TIR / RQT / flow tables.
    WQ_LOG_SIZE = 0x0009_0401, "CREATE_SQ/RQ: log_wq_sz above log_max_wq_sz";
    WQ_BAD_TIS = 0x0009_0402, "CREATE_SQ: tis_num_0 is not an existing TIS";
    WQ_STATE = 0x0009_0501, "MODIFY_SQ/RQ: current state does not match or illegal edge";
    WQ_TYPE = 0x0009_0403, "CREATE_SQ/RQ: wq_type must be cyclic (1)";
    WQ_COUNTER_SET_ID = 0x0009_0421, "CREATE_RQ / MODIFY_RQ (modify_bitmask counter_set_id): counter_set_id is neither 0 nor an allocated Q counter";
    WQ_COUNTER_SET_ID_MODIFY = 0x0009_0902, "MODIFY_RQ: modify_bitmask counter_set_id without the modify_rq_counter_set_id capability";
    WQ_PP_INDEX = 0x0009_0430, "CREATE_SQ / MODIFY_SQ (modify_bitmask packet_pacing_rate_limit_index): packet_pacing_rate_limit_index is neither 0 nor a set entry of the rate-limit table";
    WQ_PP_UNSUPPORTED = 0x0009_0431, "CREATE_SQ / MODIFY_SQ: a non-zero packet_pacing_rate_limit_index on a device without packet pacing (qos_cap.packet_pacing)";
    WQ_TS_FORMAT = 0x0009_0420, "CREATE_SQ/RQ: ts_format not offered by sq_ts_format/rq_ts_format";
    TIR_BAD_RQ = 0x0009_0001, "CREATE_TIR: inline_rqn is not an existing RQ";
    TIR_BAD_RQT = 0x0009_0002, "CREATE_TIR: indirect_table is not an existing RQT";
    TIR_DISP_TYPE = 0x0009_0003, "CREATE_TIR: disp_type not supported";
    TIR_HASH_FN = 0x0009_0004, "CREATE_TIR: rx_hash_fn other than none or Toeplitz (inverted XOR8 is not emulated)";
    TIR_HASH_FIELDS = 0x0009_0005, "CREATE_TIR: rx_hash_field_selector_outer selects fields beyond IP addresses and L4 ports (IPsec SPI is not emulated)";
    RQT_SIZE = 0x0009_1601, "CREATE_RQT: rqt_actual_size 0, above rqt_max_size, or rqt_max_size above log_max_rqt_size";
    RQT_SHORT = 0x0009_1602, "CREATE_RQT: input too short for rqt_actual_size entries of rq_num";
    RQT_BAD_RQ = 0x0009_1603, "CREATE_RQT: an rq_num entry is not an existing RQ";
    FT_TYPE = 0x0009_3001, "flow table: table_type must be 0 (NIC RX) or 1 (NIC TX)";
    FT_LOG_SIZE = 0x0009_3002, "CREATE_FLOW_TABLE: log_size above the maximum";
    FT_LEVEL = 0x0009_3003, "CREATE_FLOW_TABLE: level above max_ft_level";
    FT_BAD_MISS = 0x0009_3004, "CREATE_FLOW_TABLE: table_miss_action not 0 or 1, or table_miss_id not a table of the same type at a deeper level";
    FG_RANGE = 0x0009_3302, "CREATE_FLOW_GROUP: start_flow_index above end_flow_index, beyond the table, or overlapping another group";
    FG_CRITERIA = 0x0009_3303, "CREATE_FLOW_GROUP: match criteria outside outer_headers (not emulated)";
    FT_BAD_TABLE = 0x0009_3301, "flow table does not exist";
    FT_BAD_GROUP = 0x0009_3601, "SET_FLOW_TABLE_ENTRY: group_id is not a group of this table";
    FT_INDEX = 0x0009_3602, "SET_FLOW_TABLE_ENTRY: flow_index beyond the table";
    FTE_NOT_IN_GROUP = 0x0009_3603, "SET_FLOW_TABLE_ENTRY: flow_index outside the group's index range";
    FTE_ACTION = 0x0009_3604, "SET_FLOW_TABLE_ENTRY: action other than allow, drop, forward (or drop with forward)";
    FTE_DEST = 0x0009_3605, "SET_FLOW_TABLE_ENTRY: forward without destinations (or destinations without forward), or a destination that is not a TIR or a deeper table of the same type";
    FTE_SHORT = 0x0009_3606, "SET_FLOW_TABLE_ENTRY: input too short for destination_list_size";
    FTE_FLOW_TAG = 0x0009_3607, "SET_FLOW_TABLE_ENTRY: a flow_tag on a table type without the flow_tag capability";
    // SET_PP_RATE_LIMIT 0x780.
    PP_INDEX = 0x0007_8001, "SET_PP_RATE_LIMIT: rate_limit_index 0 or not below packet_pacing_rate_table_size";
    PP_RATE = 0x0007_8002, "SET_PP_RATE_LIMIT: rate_limit outside packet_pacing_min_rate ..= packet_pacing_max_rate";
    PP_IN_USE = 0x0007_8003, "SET_PP_RATE_LIMIT: clearing (rate_limit 0) an entry that an SQ in RDY is paced by";
    // Q counters.
    Q_COUNTER_LIMIT = 0x0007_7101, "ALLOC_Q_COUNTER: max_qp_cnt counter sets are already allocated";
    Q_COUNTER_BAD_ID = 0x0007_7201, "DEALLOC_Q_COUNTER / QUERY_Q_COUNTER: counter_set_id is not an allocated Q counter";
    Q_COUNTER_IN_USE = 0x0007_7202, "DEALLOC_Q_COUNTER: an RQ still counts into the set";
    // Vport / RoCE address.
    VPORT_OTHER = 0x0007_5001, "vport commands: other_vport not supported (no eswitch)";
    GID_INDEX = 0x0007_6001, "SET/QUERY_ROCE_ADDRESS or QUERY_HCA_VPORT_GID: index beyond the table";
    MTU_RANGE = 0x0007_5501, "MODIFY_NIC_VPORT_CONTEXT: mtu above the port's max_mtu";
    PKEY_INDEX = 0x0007_6501, "QUERY_HCA_VPORT_PKEY: pkey_index beyond the P_Key table";
    // MAD_IFC 0x50d.
    MAD_IFC_NOT_IB = 0x0005_0d01, "MAD_IFC on an Ethernet port (no subnet management agent)";
    // CREATE_UMEM 0xa08 / queues on a UMEM.
    UMEM_NUM_MTT = 0x000a_0801, "CREATE_UMEM: num_of_mtt is 0 or above the emulator's bound";
    UMEM_PAGE_OFFSET = 0x000a_0802, "CREATE_UMEM: page_offset not inside the first page";
    UMEM_MTT_SHORT = 0x000a_0803, "CREATE_UMEM: input too short for num_of_mtt entries";
    UMEM_MTT_MISALIGNED = 0x000a_0804, "CREATE_UMEM: an MTT entry is not aligned to the UMEM page size";
    UMEM_MTT_NOT_READABLE = 0x000a_0805, "CREATE_UMEM: an MTT entry without rd_en";
    UMEM_BAD_ID = 0x000a_0806, "a queue names a UMEM (cq_umem_id, wq_umem_id, dbr_umem_id) that does not exist";
    UMEM_RANGE = 0x000a_0807, "a queue buffer or doorbell record reaches beyond its UMEM";
    UMEM_OFFSET_MISALIGNED = 0x000a_0808, "a queue buffer on a UMEM does not start 4 KiB aligned";
    UMEM_NOT_WRITABLE = 0x000a_0809, "a CQ buffer on a UMEM registered without wr_en";
}

/// The name and description of a syndrome the emulator returns.
pub fn describe(syndrome: u32) -> Option<(&'static str, &'static str)> {
    ALL.iter()
        .find(|&&(s, _, _)| s == syndrome)
        .map(|&(_, n, d)| (n, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_are_distinct() {
        let mut v: Vec<u32> = ALL.iter().map(|x| x.0).collect();
        v.sort_unstable();
        let n = v.len();
        v.dedup();
        assert_eq!(v.len(), n, "two checks share a syndrome");
        assert!(describe(CQ_LOG_SIZE).is_some());
    }
}
