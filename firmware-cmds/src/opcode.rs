//! Command opcodes (`MLX5_CMD_OP_*`) and their names.

use core::fmt;

/// A firmware command opcode (input bytes 0..2 of every command).
///
/// Any 16-bit value can be carried (the device may echo unknown ones); the
/// known ones are associated constants named as in the PRM, and
/// [`name`](Self::name) gives the name Linux prints.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Opcode(pub u16);

/// `(opcode, name)` for every opcode of the PRM command list, sorted by
/// opcode.
pub const OPCODES: &[(u16, &str)] = &[
    (0x100, "QUERY_HCA_CAP"),
    (0x101, "QUERY_ADAPTER"),
    (0x102, "INIT_HCA"),
    (0x103, "TEARDOWN_HCA"),
    (0x104, "ENABLE_HCA"),
    (0x105, "DISABLE_HCA"),
    (0x107, "QUERY_PAGES"),
    (0x108, "MANAGE_PAGES"),
    (0x109, "SET_HCA_CAP"),
    (0x10a, "QUERY_ISSI"),
    (0x10b, "SET_ISSI"),
    (0x10d, "SET_DRIVER_VERSION"),
    (0x111, "QUERY_SF_PARTITION"),
    (0x113, "ALLOC_SF"),
    (0x114, "DEALLOC_SF"),
    (0x200, "CREATE_MKEY"),
    (0x201, "QUERY_MKEY"),
    (0x202, "DESTROY_MKEY"),
    (0x203, "QUERY_SPECIAL_CONTEXTS"),
    (0x204, "PAGE_FAULT_RESUME"),
    (0x205, "ALLOC_MEMIC"),
    (0x206, "DEALLOC_MEMIC"),
    (0x301, "CREATE_EQ"),
    (0x302, "DESTROY_EQ"),
    (0x303, "QUERY_EQ"),
    (0x304, "GEN_EQE"),
    (0x400, "CREATE_CQ"),
    (0x401, "DESTROY_CQ"),
    (0x402, "QUERY_CQ"),
    (0x403, "MODIFY_CQ"),
    (0x500, "CREATE_QP"),
    (0x501, "DESTROY_QP"),
    (0x502, "RST2INIT_QP"),
    (0x503, "INIT2RTR_QP"),
    (0x504, "RTR2RTS_QP"),
    (0x505, "RTS2RTS_QP"),
    (0x506, "SQERR2RTS_QP"),
    (0x507, "2ERR_QP"),
    (0x50a, "2RST_QP"),
    (0x50b, "QUERY_QP"),
    (0x50c, "SQD_RTS_QP"),
    (0x50d, "MAD_IFC"),
    (0x50e, "INIT2INIT_QP"),
    (0x600, "CREATE_PSV"),
    (0x601, "DESTROY_PSV"),
    (0x700, "CREATE_SRQ"),
    (0x701, "DESTROY_SRQ"),
    (0x702, "QUERY_SRQ"),
    (0x703, "ARM_RQ"),
    (0x705, "CREATE_XRC_SRQ"),
    (0x706, "DESTROY_XRC_SRQ"),
    (0x707, "QUERY_XRC_SRQ"),
    (0x708, "ARM_XRC_SRQ"),
    (0x710, "CREATE_DCT"),
    (0x711, "DESTROY_DCT"),
    (0x712, "DRAIN_DCT"),
    (0x713, "QUERY_DCT"),
    (0x714, "ARM_DCT_FOR_KEY_VIOLATION"),
    (0x717, "CREATE_XRQ"),
    (0x718, "DESTROY_XRQ"),
    (0x719, "QUERY_XRQ"),
    (0x71a, "ARM_XRQ"),
    (0x740, "QUERY_ESW_FUNCTIONS"),
    (0x750, "QUERY_VPORT_STATE"),
    (0x751, "MODIFY_VPORT_STATE"),
    (0x752, "QUERY_ESW_VPORT_CONTEXT"),
    (0x753, "MODIFY_ESW_VPORT_CONTEXT"),
    (0x754, "QUERY_NIC_VPORT_CONTEXT"),
    (0x755, "MODIFY_NIC_VPORT_CONTEXT"),
    (0x760, "QUERY_ROCE_ADDRESS"),
    (0x761, "SET_ROCE_ADDRESS"),
    (0x762, "QUERY_HCA_VPORT_CONTEXT"),
    (0x763, "MODIFY_HCA_VPORT_CONTEXT"),
    (0x764, "QUERY_HCA_VPORT_GID"),
    (0x765, "QUERY_HCA_VPORT_PKEY"),
    (0x76f, "QUERY_VNIC_ENV"),
    (0x770, "QUERY_VPORT_COUNTER"),
    (0x771, "ALLOC_Q_COUNTER"),
    (0x772, "DEALLOC_Q_COUNTER"),
    (0x773, "QUERY_Q_COUNTER"),
    (0x780, "SET_PP_RATE_LIMIT"),
    (0x800, "ALLOC_PD"),
    (0x801, "DEALLOC_PD"),
    (0x802, "ALLOC_UAR"),
    (0x803, "DEALLOC_UAR"),
    (0x804, "CONFIG_INT_MODERATION"),
    (0x805, "ACCESS_REG"),
    (0x806, "ATTACH_TO_MCG"),
    (0x807, "DETACH_FROM_MCG"),
    (0x80a, "GET_DROPPED_PACKET_LOG"),
    (0x80b, "QUERY_MAD_DEMUX"),
    (0x80c, "SET_MAD_DEMUX"),
    (0x80d, "NOP"),
    (0x80e, "ALLOC_XRCD"),
    (0x80f, "DEALLOC_XRCD"),
    (0x816, "ALLOC_TRANSPORT_DOMAIN"),
    (0x817, "DEALLOC_TRANSPORT_DOMAIN"),
    (0x822, "QUERY_CONG_STATUS"),
    (0x823, "MODIFY_CONG_STATUS"),
    (0x824, "QUERY_CONG_PARAMS"),
    (0x825, "MODIFY_CONG_PARAMS"),
    (0x826, "QUERY_CONG_STATISTICS"),
    (0x827, "ADD_VXLAN_UDP_DPORT"),
    (0x828, "DELETE_VXLAN_UDP_DPORT"),
    (0x829, "SET_L2_TABLE_ENTRY"),
    (0x82a, "QUERY_L2_TABLE_ENTRY"),
    (0x82b, "DELETE_L2_TABLE_ENTRY"),
    (0x830, "SET_WOL_ROL"),
    (0x831, "QUERY_WOL_ROL"),
    (0x840, "CREATE_LAG"),
    (0x841, "MODIFY_LAG"),
    (0x842, "QUERY_LAG"),
    (0x843, "DESTROY_LAG"),
    (0x844, "CREATE_VPORT_LAG"),
    (0x845, "DESTROY_VPORT_LAG"),
    (0x900, "CREATE_TIR"),
    (0x901, "MODIFY_TIR"),
    (0x902, "DESTROY_TIR"),
    (0x903, "QUERY_TIR"),
    (0x904, "CREATE_SQ"),
    (0x905, "MODIFY_SQ"),
    (0x906, "DESTROY_SQ"),
    (0x907, "QUERY_SQ"),
    (0x908, "CREATE_RQ"),
    (0x909, "MODIFY_RQ"),
    (0x90a, "DESTROY_RQ"),
    (0x90b, "QUERY_RQ"),
    (0x90c, "CREATE_RMP"),
    (0x90d, "MODIFY_RMP"),
    (0x90e, "DESTROY_RMP"),
    (0x90f, "QUERY_RMP"),
    (0x910, "SET_DELAY_DROP_PARAMS"),
    (0x912, "CREATE_TIS"),
    (0x913, "MODIFY_TIS"),
    (0x914, "DESTROY_TIS"),
    (0x915, "QUERY_TIS"),
    (0x916, "CREATE_RQT"),
    (0x917, "MODIFY_RQT"),
    (0x918, "DESTROY_RQT"),
    (0x919, "QUERY_RQT"),
    (0x92f, "SET_FLOW_TABLE_ROOT"),
    (0x930, "CREATE_FLOW_TABLE"),
    (0x931, "DESTROY_FLOW_TABLE"),
    (0x932, "QUERY_FLOW_TABLE"),
    (0x933, "CREATE_FLOW_GROUP"),
    (0x934, "DESTROY_FLOW_GROUP"),
    (0x935, "QUERY_FLOW_GROUP"),
    (0x936, "SET_FLOW_TABLE_ENTRY"),
    (0x937, "QUERY_FLOW_TABLE_ENTRY"),
    (0x938, "DELETE_FLOW_TABLE_ENTRY"),
    (0x939, "ALLOC_FLOW_COUNTER"),
    (0x93a, "DEALLOC_FLOW_COUNTER"),
    (0x93b, "QUERY_FLOW_COUNTER"),
    (0x93c, "MODIFY_FLOW_TABLE"),
    (0x93d, "ALLOC_PACKET_REFORMAT_CONTEXT"),
    (0x93e, "DEALLOC_PACKET_REFORMAT_CONTEXT"),
    (0x93f, "QUERY_PACKET_REFORMAT_CONTEXT"),
    (0x940, "ALLOC_MODIFY_HEADER_CONTEXT"),
    (0x941, "DEALLOC_MODIFY_HEADER_CONTEXT"),
    (0x942, "QUERY_MODIFY_HEADER_CONTEXT"),
    (0xa00, "CREATE_GENERAL_OBJECT"),
    (0xa01, "MODIFY_GENERAL_OBJECT"),
    (0xa02, "QUERY_GENERAL_OBJECT"),
    (0xa03, "DESTROY_GENERAL_OBJECT"),
    (0xa04, "CREATE_UCTX"),
    (0xa06, "DESTROY_UCTX"),
    (0xa08, "CREATE_UMEM"),
    (0xa0a, "DESTROY_UMEM"),
    (0xb00, "SYNC_STEERING"),
];

#[allow(missing_docs)] // Each constant is the PRM opcode of the same name.
impl Opcode {
    pub const QUERY_HCA_CAP: Opcode = Opcode(0x100);
    pub const QUERY_ADAPTER: Opcode = Opcode(0x101);
    pub const INIT_HCA: Opcode = Opcode(0x102);
    pub const TEARDOWN_HCA: Opcode = Opcode(0x103);
    pub const ENABLE_HCA: Opcode = Opcode(0x104);
    pub const DISABLE_HCA: Opcode = Opcode(0x105);
    pub const QUERY_PAGES: Opcode = Opcode(0x107);
    pub const MANAGE_PAGES: Opcode = Opcode(0x108);
    pub const SET_HCA_CAP: Opcode = Opcode(0x109);
    pub const QUERY_ISSI: Opcode = Opcode(0x10a);
    pub const SET_ISSI: Opcode = Opcode(0x10b);
    pub const SET_DRIVER_VERSION: Opcode = Opcode(0x10d);
    pub const QUERY_SF_PARTITION: Opcode = Opcode(0x111);
    pub const ALLOC_SF: Opcode = Opcode(0x113);
    pub const DEALLOC_SF: Opcode = Opcode(0x114);
    pub const CREATE_MKEY: Opcode = Opcode(0x200);
    pub const QUERY_MKEY: Opcode = Opcode(0x201);
    pub const DESTROY_MKEY: Opcode = Opcode(0x202);
    pub const QUERY_SPECIAL_CONTEXTS: Opcode = Opcode(0x203);
    pub const PAGE_FAULT_RESUME: Opcode = Opcode(0x204);
    pub const ALLOC_MEMIC: Opcode = Opcode(0x205);
    pub const DEALLOC_MEMIC: Opcode = Opcode(0x206);
    pub const CREATE_EQ: Opcode = Opcode(0x301);
    pub const DESTROY_EQ: Opcode = Opcode(0x302);
    pub const QUERY_EQ: Opcode = Opcode(0x303);
    pub const GEN_EQE: Opcode = Opcode(0x304);
    pub const CREATE_CQ: Opcode = Opcode(0x400);
    pub const DESTROY_CQ: Opcode = Opcode(0x401);
    pub const QUERY_CQ: Opcode = Opcode(0x402);
    pub const MODIFY_CQ: Opcode = Opcode(0x403);
    pub const CREATE_QP: Opcode = Opcode(0x500);
    pub const DESTROY_QP: Opcode = Opcode(0x501);
    pub const RST2INIT_QP: Opcode = Opcode(0x502);
    pub const INIT2RTR_QP: Opcode = Opcode(0x503);
    pub const RTR2RTS_QP: Opcode = Opcode(0x504);
    pub const RTS2RTS_QP: Opcode = Opcode(0x505);
    pub const SQERR2RTS_QP: Opcode = Opcode(0x506);
    /// `2ERR_QP` (the PRM spells it with a leading digit).
    pub const QP_2ERR: Opcode = Opcode(0x507);
    /// `2RST_QP` (the PRM spells it with a leading digit).
    pub const QP_2RST: Opcode = Opcode(0x50a);
    pub const QUERY_QP: Opcode = Opcode(0x50b);
    pub const SQD_RTS_QP: Opcode = Opcode(0x50c);
    pub const MAD_IFC: Opcode = Opcode(0x50d);
    pub const INIT2INIT_QP: Opcode = Opcode(0x50e);
    pub const CREATE_PSV: Opcode = Opcode(0x600);
    pub const DESTROY_PSV: Opcode = Opcode(0x601);
    pub const CREATE_SRQ: Opcode = Opcode(0x700);
    pub const DESTROY_SRQ: Opcode = Opcode(0x701);
    pub const QUERY_SRQ: Opcode = Opcode(0x702);
    pub const ARM_RQ: Opcode = Opcode(0x703);
    pub const CREATE_XRC_SRQ: Opcode = Opcode(0x705);
    pub const DESTROY_XRC_SRQ: Opcode = Opcode(0x706);
    pub const QUERY_XRC_SRQ: Opcode = Opcode(0x707);
    pub const ARM_XRC_SRQ: Opcode = Opcode(0x708);
    pub const CREATE_DCT: Opcode = Opcode(0x710);
    pub const DESTROY_DCT: Opcode = Opcode(0x711);
    pub const DRAIN_DCT: Opcode = Opcode(0x712);
    pub const QUERY_DCT: Opcode = Opcode(0x713);
    pub const ARM_DCT_FOR_KEY_VIOLATION: Opcode = Opcode(0x714);
    pub const CREATE_XRQ: Opcode = Opcode(0x717);
    pub const DESTROY_XRQ: Opcode = Opcode(0x718);
    pub const QUERY_XRQ: Opcode = Opcode(0x719);
    pub const ARM_XRQ: Opcode = Opcode(0x71a);
    pub const QUERY_ESW_FUNCTIONS: Opcode = Opcode(0x740);
    pub const QUERY_VPORT_STATE: Opcode = Opcode(0x750);
    pub const MODIFY_VPORT_STATE: Opcode = Opcode(0x751);
    pub const QUERY_ESW_VPORT_CONTEXT: Opcode = Opcode(0x752);
    pub const MODIFY_ESW_VPORT_CONTEXT: Opcode = Opcode(0x753);
    pub const QUERY_NIC_VPORT_CONTEXT: Opcode = Opcode(0x754);
    pub const MODIFY_NIC_VPORT_CONTEXT: Opcode = Opcode(0x755);
    pub const QUERY_ROCE_ADDRESS: Opcode = Opcode(0x760);
    pub const SET_ROCE_ADDRESS: Opcode = Opcode(0x761);
    pub const QUERY_HCA_VPORT_CONTEXT: Opcode = Opcode(0x762);
    pub const MODIFY_HCA_VPORT_CONTEXT: Opcode = Opcode(0x763);
    pub const QUERY_HCA_VPORT_GID: Opcode = Opcode(0x764);
    pub const QUERY_HCA_VPORT_PKEY: Opcode = Opcode(0x765);
    pub const QUERY_VNIC_ENV: Opcode = Opcode(0x76f);
    pub const QUERY_VPORT_COUNTER: Opcode = Opcode(0x770);
    pub const ALLOC_Q_COUNTER: Opcode = Opcode(0x771);
    pub const DEALLOC_Q_COUNTER: Opcode = Opcode(0x772);
    pub const QUERY_Q_COUNTER: Opcode = Opcode(0x773);
    pub const SET_PP_RATE_LIMIT: Opcode = Opcode(0x780);
    pub const ALLOC_PD: Opcode = Opcode(0x800);
    pub const DEALLOC_PD: Opcode = Opcode(0x801);
    pub const ALLOC_UAR: Opcode = Opcode(0x802);
    pub const DEALLOC_UAR: Opcode = Opcode(0x803);
    pub const CONFIG_INT_MODERATION: Opcode = Opcode(0x804);
    pub const ACCESS_REG: Opcode = Opcode(0x805);
    pub const ATTACH_TO_MCG: Opcode = Opcode(0x806);
    pub const DETACH_FROM_MCG: Opcode = Opcode(0x807);
    pub const GET_DROPPED_PACKET_LOG: Opcode = Opcode(0x80a);
    pub const QUERY_MAD_DEMUX: Opcode = Opcode(0x80b);
    pub const SET_MAD_DEMUX: Opcode = Opcode(0x80c);
    pub const NOP: Opcode = Opcode(0x80d);
    pub const ALLOC_XRCD: Opcode = Opcode(0x80e);
    pub const DEALLOC_XRCD: Opcode = Opcode(0x80f);
    pub const ALLOC_TRANSPORT_DOMAIN: Opcode = Opcode(0x816);
    pub const DEALLOC_TRANSPORT_DOMAIN: Opcode = Opcode(0x817);
    pub const QUERY_CONG_STATUS: Opcode = Opcode(0x822);
    pub const MODIFY_CONG_STATUS: Opcode = Opcode(0x823);
    pub const QUERY_CONG_PARAMS: Opcode = Opcode(0x824);
    pub const MODIFY_CONG_PARAMS: Opcode = Opcode(0x825);
    pub const QUERY_CONG_STATISTICS: Opcode = Opcode(0x826);
    pub const ADD_VXLAN_UDP_DPORT: Opcode = Opcode(0x827);
    pub const DELETE_VXLAN_UDP_DPORT: Opcode = Opcode(0x828);
    pub const SET_L2_TABLE_ENTRY: Opcode = Opcode(0x829);
    pub const QUERY_L2_TABLE_ENTRY: Opcode = Opcode(0x82a);
    pub const DELETE_L2_TABLE_ENTRY: Opcode = Opcode(0x82b);
    pub const SET_WOL_ROL: Opcode = Opcode(0x830);
    pub const QUERY_WOL_ROL: Opcode = Opcode(0x831);
    pub const CREATE_LAG: Opcode = Opcode(0x840);
    pub const MODIFY_LAG: Opcode = Opcode(0x841);
    pub const QUERY_LAG: Opcode = Opcode(0x842);
    pub const DESTROY_LAG: Opcode = Opcode(0x843);
    pub const CREATE_VPORT_LAG: Opcode = Opcode(0x844);
    pub const DESTROY_VPORT_LAG: Opcode = Opcode(0x845);
    pub const CREATE_TIR: Opcode = Opcode(0x900);
    pub const MODIFY_TIR: Opcode = Opcode(0x901);
    pub const DESTROY_TIR: Opcode = Opcode(0x902);
    pub const QUERY_TIR: Opcode = Opcode(0x903);
    pub const CREATE_SQ: Opcode = Opcode(0x904);
    pub const MODIFY_SQ: Opcode = Opcode(0x905);
    pub const DESTROY_SQ: Opcode = Opcode(0x906);
    pub const QUERY_SQ: Opcode = Opcode(0x907);
    pub const CREATE_RQ: Opcode = Opcode(0x908);
    pub const MODIFY_RQ: Opcode = Opcode(0x909);
    pub const SET_DELAY_DROP_PARAMS: Opcode = Opcode(0x910);
    pub const DESTROY_RQ: Opcode = Opcode(0x90a);
    pub const QUERY_RQ: Opcode = Opcode(0x90b);
    pub const CREATE_RMP: Opcode = Opcode(0x90c);
    pub const MODIFY_RMP: Opcode = Opcode(0x90d);
    pub const DESTROY_RMP: Opcode = Opcode(0x90e);
    pub const QUERY_RMP: Opcode = Opcode(0x90f);
    pub const CREATE_TIS: Opcode = Opcode(0x912);
    pub const MODIFY_TIS: Opcode = Opcode(0x913);
    pub const DESTROY_TIS: Opcode = Opcode(0x914);
    pub const QUERY_TIS: Opcode = Opcode(0x915);
    pub const CREATE_RQT: Opcode = Opcode(0x916);
    pub const MODIFY_RQT: Opcode = Opcode(0x917);
    pub const DESTROY_RQT: Opcode = Opcode(0x918);
    pub const QUERY_RQT: Opcode = Opcode(0x919);
    pub const SET_FLOW_TABLE_ROOT: Opcode = Opcode(0x92f);
    pub const CREATE_FLOW_TABLE: Opcode = Opcode(0x930);
    pub const DESTROY_FLOW_TABLE: Opcode = Opcode(0x931);
    pub const QUERY_FLOW_TABLE: Opcode = Opcode(0x932);
    pub const CREATE_FLOW_GROUP: Opcode = Opcode(0x933);
    pub const DESTROY_FLOW_GROUP: Opcode = Opcode(0x934);
    pub const QUERY_FLOW_GROUP: Opcode = Opcode(0x935);
    pub const SET_FLOW_TABLE_ENTRY: Opcode = Opcode(0x936);
    pub const QUERY_FLOW_TABLE_ENTRY: Opcode = Opcode(0x937);
    pub const DELETE_FLOW_TABLE_ENTRY: Opcode = Opcode(0x938);
    pub const ALLOC_FLOW_COUNTER: Opcode = Opcode(0x939);
    pub const DEALLOC_FLOW_COUNTER: Opcode = Opcode(0x93a);
    pub const QUERY_FLOW_COUNTER: Opcode = Opcode(0x93b);
    pub const MODIFY_FLOW_TABLE: Opcode = Opcode(0x93c);
    pub const ALLOC_PACKET_REFORMAT_CONTEXT: Opcode = Opcode(0x93d);
    pub const DEALLOC_PACKET_REFORMAT_CONTEXT: Opcode = Opcode(0x93e);
    pub const QUERY_PACKET_REFORMAT_CONTEXT: Opcode = Opcode(0x93f);
    pub const ALLOC_MODIFY_HEADER_CONTEXT: Opcode = Opcode(0x940);
    pub const DEALLOC_MODIFY_HEADER_CONTEXT: Opcode = Opcode(0x941);
    pub const QUERY_MODIFY_HEADER_CONTEXT: Opcode = Opcode(0x942);
    pub const CREATE_GENERAL_OBJECT: Opcode = Opcode(0xa00);
    pub const MODIFY_GENERAL_OBJECT: Opcode = Opcode(0xa01);
    pub const QUERY_GENERAL_OBJECT: Opcode = Opcode(0xa02);
    pub const DESTROY_GENERAL_OBJECT: Opcode = Opcode(0xa03);
    pub const CREATE_UCTX: Opcode = Opcode(0xa04);
    pub const DESTROY_UCTX: Opcode = Opcode(0xa06);
    pub const CREATE_UMEM: Opcode = Opcode(0xa08);
    pub const DESTROY_UMEM: Opcode = Opcode(0xa0a);
    pub const SYNC_STEERING: Opcode = Opcode(0xb00);
}

impl Opcode {
    /// The PRM name (`CREATE_QP`), or `None` for an opcode not in the list.
    pub fn name(self) -> Option<&'static str> {
        OPCODES
            .binary_search_by_key(&self.0, |&(op, _)| op)
            .ok()
            .map(|i| OPCODES[i].1)
    }

    /// Whether the opcode is in the PRM command list.
    pub fn is_known(self) -> bool {
        self.name().is_some()
    }
}

/// `CREATE_QP(0x500)`, or `UNKNOWN(0x1234)`, as Linux prints it.
impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#x})", self.name().unwrap_or("UNKNOWN"), self.0)
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<u16> for Opcode {
    fn from(v: u16) -> Self {
        Opcode(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(OPCODES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn names_print_like_linux() {
        extern crate std;
        use std::format;
        assert_eq!(format!("{}", Opcode::CREATE_QP), "CREATE_QP(0x500)");
        assert_eq!(format!("{}", Opcode::QP_2RST), "2RST_QP(0x50a)");
        assert_eq!(format!("{}", Opcode(0x1234)), "UNKNOWN(0x1234)");
        assert_eq!(Opcode::MAD_IFC.name(), Some("MAD_IFC"));
    }
}
