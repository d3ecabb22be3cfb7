//! NIC flow steering: flow tables (`flow_table_context`), flow groups, the
//! match parameters (`fte_match_param` with `fte_match_set_lyr_2_4` and
//! `fte_match_set_misc`), flow table entries (`flow_context` with its
//! destination list of `dest_format_struct`), and CREATE/DESTROY_FLOW_TABLE,
//! CREATE/DESTROY_FLOW_GROUP, SET_FLOW_TABLE_ENTRY, DELETE_FLOW_TABLE_ENTRY
//! and SET_FLOW_TABLE_ROOT.
//!
//! # Gaps in the layout facts
//!
//! The layout facts for this area come mostly from DPDK and are partial:
//! `create_flow_group_in` has no fields after `table_id`, `flow_context`
//! has no `match_value`, `modify_header_id` or destination list, and
//! `fte_match_param` lacks its reserved tail. The fields declared here
//! beyond the facts follow Linux's `mlx5_ifc.h` (and are listed as
//! exceptions in the layout test): `create_flow_group_in.start_flow_index`
//! (0x1c), `end_flow_index` (0x24), `match_criteria_enable` (`0x3c[7:0]`) and
//! `match_criteria` (0x40); `flow_context.modify_header_id` (0x1c),
//! `match_value` (0x40) and `destination` (0x300); `fte_match_param` is
//! 0x200 bytes. `flow_table_context`'s union at 0x18 (RTC ids or
//! software-owner ICM roots) is not declared. `misc_parameters_2` to `_5`
//! are kept as bytes.

use crate::prm_struct;

/// `table_type`: NIC receive (`FS_FT_NIC_RX`).
pub const FLOW_TABLE_TYPE_NIC_RX: u8 = 0x0;
/// `table_type`: NIC transmit.
pub const FLOW_TABLE_TYPE_NIC_TX: u8 = 0x1;
/// `table_type`: e-switch egress ACL.
pub const FLOW_TABLE_TYPE_ESW_EGRESS_ACL: u8 = 0x2;
/// `table_type`: e-switch ingress ACL.
pub const FLOW_TABLE_TYPE_ESW_INGRESS_ACL: u8 = 0x3;
/// `table_type`: e-switch FDB.
pub const FLOW_TABLE_TYPE_FDB: u8 = 0x4;
/// `table_type`: receive sniffer.
pub const FLOW_TABLE_TYPE_SNIFFER_RX: u8 = 0x5;
/// `table_type`: transmit sniffer.
pub const FLOW_TABLE_TYPE_SNIFFER_TX: u8 = 0x6;
/// `table_type`: NIC receive RDMA.
pub const FLOW_TABLE_TYPE_NIC_RX_RDMA: u8 = 0x7;
/// `table_type`: NIC transmit RDMA.
pub const FLOW_TABLE_TYPE_NIC_TX_RDMA: u8 = 0x8;

/// `flow_table_context.table_miss_action`: the default miss behaviour.
pub const FLOW_TABLE_MISS_ACTION_DEF: u8 = 0x0;
/// `flow_table_context.table_miss_action`: go to `table_miss_id`.
pub const FLOW_TABLE_MISS_ACTION_FWD: u8 = 0x1;

/// `match_criteria_enable` bit: `outer_headers`.
pub const MATCH_CRITERIA_ENABLE_OUTER_HEADERS: u8 = 1 << 0;
/// `match_criteria_enable` bit: `misc_parameters`.
pub const MATCH_CRITERIA_ENABLE_MISC_PARAMETERS: u8 = 1 << 1;
/// `match_criteria_enable` bit: `inner_headers`.
pub const MATCH_CRITERIA_ENABLE_INNER_HEADERS: u8 = 1 << 2;
/// `match_criteria_enable` bit: `misc_parameters_2`.
pub const MATCH_CRITERIA_ENABLE_MISC_PARAMETERS_2: u8 = 1 << 3;
/// `match_criteria_enable` bit: `misc_parameters_3`.
pub const MATCH_CRITERIA_ENABLE_MISC_PARAMETERS_3: u8 = 1 << 4;

/// `flow_context.action` bit: allow.
pub const FLOW_CONTEXT_ACTION_ALLOW: u16 = 1 << 0;
/// `flow_context.action` bit: drop.
pub const FLOW_CONTEXT_ACTION_DROP: u16 = 1 << 1;
/// `flow_context.action` bit: forward to the destination list.
pub const FLOW_CONTEXT_ACTION_FWD_DEST: u16 = 1 << 2;
/// `flow_context.action` bit: count (flow counters in the list).
pub const FLOW_CONTEXT_ACTION_COUNT: u16 = 1 << 3;
/// `flow_context.action` bit: packet reformat.
pub const FLOW_CONTEXT_ACTION_PACKET_REFORMAT: u16 = 1 << 4;
/// `flow_context.action` bit: decapsulate.
pub const FLOW_CONTEXT_ACTION_DECAP: u16 = 1 << 5;
/// `flow_context.action` bit: modify header.
pub const FLOW_CONTEXT_ACTION_MOD_HDR: u16 = 1 << 6;
/// `flow_context.action` bit: pop VLAN.
pub const FLOW_CONTEXT_ACTION_VLAN_POP: u16 = 1 << 7;
/// `flow_context.action` bit: push VLAN.
pub const FLOW_CONTEXT_ACTION_VLAN_PUSH: u16 = 1 << 8;

/// `dest_format_struct.destination_type`: a vport.
pub const FLOW_DESTINATION_TYPE_VPORT: u8 = 0x0;
/// `dest_format_struct.destination_type`: another flow table.
pub const FLOW_DESTINATION_TYPE_FLOW_TABLE: u8 = 0x1;
/// `dest_format_struct.destination_type`: a TIR.
pub const FLOW_DESTINATION_TYPE_TIR: u8 = 0x2;

/// `set_fte_in.op_mod`: create a new entry.
pub const SET_FTE_OP_MOD_SET: u16 = 0x0;
/// `set_fte_in.op_mod`: modify an entry (`modify_enable_mask`).
pub const SET_FTE_OP_MOD_MODIFY: u16 = 0x1;

prm_struct! {
    /// Flow table context (`flow_table_context`), 0x18 bytes (the union at
    /// 0x18 is not declared, see the module documentation).
    pub struct FlowTableContext("flow_table_context", 0x18) {
        /// Packet reformat enable.
        reformat_en: bool = 0x00[31:31],
        /// Decapsulation enable.
        decap_en: bool = 0x00[30:30],
        /// Software-owned table.
        sw_owner: bool = 0x00[29:29],
        /// Termination table.
        termination_table: bool = 0x00[28:28],
        /// Miss action (`FLOW_TABLE_MISS_ACTION_*`).
        table_miss_action: u8 = 0x00[27:24],
        /// Level of the table (root tables have the lowest).
        level: u8 = 0x00[23:16],
        /// The RTC ids in the union are valid.
        rtc_valid: bool = 0x00[15:15],
        /// log2 of the number of entries.
        log_size: u8 = 0x00[7:0],
        /// Table to go to on a miss.
        table_miss_id: u32 = 0x04[23:0],
        /// LAG master next table.
        lag_master_next_table_id: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// CREATE_FLOW_TABLE input (`create_flow_table_in`).
    pub struct CreateFlowTableIn("create_flow_table_in", 0x30): command CREATE_FLOW_TABLE -> CreateFlowTableOut {
        /// Opcode (CREATE_FLOW_TABLE).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The table belongs to `vport_number`, not to this function.
        other_vport: bool = 0x08[31:31],
        /// Vport (e-switch manager only).
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// The table context.
        flow_table_context: FlowTableContext = 0x18,
    }
}

prm_struct! {
    /// CREATE_FLOW_TABLE output (`create_flow_table_out`).
    pub struct CreateFlowTableOut("create_flow_table_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// ICM address of the table, bits 63:40 (software steering).
        icm_address_63_40: u32 = 0x00[23:0],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// ICM address, bits 39:32.
        icm_address_39_32: u8 = 0x08[31:24],
        /// The table id.
        table_id: u32 = 0x08[23:0],
        /// ICM address, bits 31:0.
        icm_address_31_0: u32 = 0x0c[31:0],
    }
}

prm_struct! {
    /// DESTROY_FLOW_TABLE input (`destroy_flow_table_in`).
    pub struct DestroyFlowTableIn("destroy_flow_table_in", 0x40): command DESTROY_FLOW_TABLE -> DestroyFlowTableOut {
        /// Opcode (DESTROY_FLOW_TABLE).
        opcode: u16 = 0x00[31:16],
        /// The table belongs to `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// Table to destroy.
        table_id: u32 = 0x14[23:0],
    }
}

prm_struct! {
    /// DESTROY_FLOW_TABLE output (`destroy_flow_table_out`).
    pub struct DestroyFlowTableOut("destroy_flow_table_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// Layer 2 to 4 match fields (`fte_match_set_lyr_2_4`): in a match
    /// criteria the bits to compare, in a match value the values.
    pub struct FteMatchSetLyr24("fte_match_set_lyr_2_4", 0x40) {
        /// Source MAC, bits 47:16.
        smac_47_16: u32 = 0x00[31:0],
        /// Source MAC, bits 15:0.
        smac_15_0: u16 = 0x04[31:16],
        /// Ethertype.
        ethertype: u16 = 0x04[15:0],
        /// Destination MAC, bits 47:16.
        dmac_47_16: u32 = 0x08[31:0],
        /// Destination MAC, bits 15:0.
        dmac_15_0: u16 = 0x0c[31:16],
        /// Priority of the first VLAN tag.
        first_prio: u8 = 0x0c[15:13],
        /// CFI of the first VLAN tag.
        first_cfi: bool = 0x0c[12:12],
        /// VLAN id of the first VLAN tag.
        first_vid: u16 = 0x0c[11:0],
        /// IP protocol.
        ip_protocol: u8 = 0x10[31:24],
        /// IP DSCP.
        ip_dscp: u8 = 0x10[23:18],
        /// IP ECN.
        ip_ecn: u8 = 0x10[17:16],
        /// A C-VLAN tag is present.
        cvlan_tag: bool = 0x10[15:15],
        /// An S-VLAN tag is present.
        svlan_tag: bool = 0x10[14:14],
        /// IP fragment.
        frag: bool = 0x10[13:13],
        /// IP version.
        ip_version: u8 = 0x10[12:9],
        /// TCP flags.
        tcp_flags: u16 = 0x10[8:0],
        /// TCP source port.
        tcp_sport: u16 = 0x14[31:16],
        /// TCP destination port.
        tcp_dport: u16 = 0x14[15:0],
        /// IPv4 header length.
        ipv4_ihl: u8 = 0x18[15:12],
        /// L3 OK.
        l3_ok: bool = 0x18[11:11],
        /// L4 OK.
        l4_ok: bool = 0x18[10:10],
        /// IPv4 checksum OK.
        ipv4_checksum_ok: bool = 0x18[9:9],
        /// L4 checksum OK.
        l4_checksum_ok: bool = 0x18[8:8],
        /// IP TTL / hop limit.
        ip_ttl_hoplimit: u8 = 0x18[7:0],
        /// UDP source port.
        udp_sport: u16 = 0x1c[31:16],
        /// UDP destination port.
        udp_dport: u16 = 0x1c[15:0],
        /// Source IPv6 address, or IPv4 in the last 4 bytes.
        src_ipv4_src_ipv6: [u8; 16] = 0x20,
        /// Destination IPv6 address, or IPv4 in the last 4 bytes.
        dst_ipv4_dst_ipv6: [u8; 16] = 0x30,
    }
}

impl FteMatchSetLyr24 {
    /// Sets the source MAC (`smac_47_16`, `smac_15_0`).
    pub fn set_smac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.0[0x00..0x06].copy_from_slice(&mac);
        self
    }

    /// Sets the destination MAC (`dmac_47_16`, `dmac_15_0`).
    pub fn set_dmac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.0[0x08..0x0e].copy_from_slice(&mac);
        self
    }
}

prm_struct! {
    /// Miscellaneous match fields (`fte_match_set_misc`).
    pub struct FteMatchSetMisc("fte_match_set_misc", 0x40) {
        /// GRE C bit present.
        gre_c_present: bool = 0x00[31:31],
        /// GRE K bit present.
        gre_k_present: bool = 0x00[29:29],
        /// GRE S bit present.
        gre_s_present: bool = 0x00[28:28],
        /// Source vHCA port.
        source_vhci_port: u8 = 0x00[27:24],
        /// Source SQ number.
        source_sqn: u32 = 0x00[23:0],
        /// Source (e-switch) port.
        source_port: u16 = 0x04[15:0],
        /// Outer second VLAN priority.
        outer_second_prio: u8 = 0x08[31:29],
        /// Outer second VLAN CFI.
        outer_second_cfi: bool = 0x08[28:28],
        /// Outer second VLAN id.
        outer_second_vid: u16 = 0x08[27:16],
        /// Inner second VLAN priority.
        inner_second_prio: u8 = 0x08[15:13],
        /// Inner second VLAN CFI.
        inner_second_cfi: bool = 0x08[12:12],
        /// Inner second VLAN id.
        inner_second_vid: u16 = 0x08[11:0],
        /// Outer second C-VLAN tag present.
        outer_second_cvlan_tag: bool = 0x0c[31:31],
        /// Inner second C-VLAN tag present.
        inner_second_cvlan_tag: bool = 0x0c[30:30],
        /// Outer second S-VLAN tag present.
        outer_second_svlan_tag: bool = 0x0c[29:29],
        /// Inner second S-VLAN tag present.
        inner_second_svlan_tag: bool = 0x0c[28:28],
        /// GRE protocol.
        gre_protocol: u16 = 0x0c[15:0],
        /// GRE key, bits 31:8.
        gre_key_h: u32 = 0x10[31:8],
        /// GRE key, bits 7:0.
        gre_key_l: u8 = 0x10[7:0],
        /// VXLAN VNI.
        vxlan_vni: u32 = 0x14[31:8],
        /// BTH opcode (RoCE).
        bth_opcode: u8 = 0x14[7:0],
        /// Geneve VNI.
        geneve_vni: u32 = 0x18[31:8],
        /// LAG RX port affinity.
        lag_rx_port_affinity: u8 = 0x18[7:4],
        /// Geneve TLV option 0 exists.
        geneve_tlv_option_0_exist: bool = 0x18[1:1],
        /// Geneve OAM.
        geneve_oam: bool = 0x18[0:0],
        /// Outer IPv6 flow label.
        outer_ipv6_flow_label: u32 = 0x1c[19:0],
        /// Inner IPv6 flow label.
        inner_ipv6_flow_label: u32 = 0x20[19:0],
        /// Geneve option length.
        geneve_opt_len: u8 = 0x24[21:16],
        /// Geneve protocol type.
        geneve_protocol_type: u16 = 0x24[15:0],
        /// BTH destination QP (RoCE).
        bth_dst_qp: u32 = 0x28[23:0],
        /// Inner ESP SPI.
        inner_esp_spi: u32 = 0x2c[31:0],
        /// Outer ESP SPI.
        outer_esp_spi: u32 = 0x30[31:0],
    }
}

prm_struct! {
    /// Match parameters (`fte_match_param`), 0x200 bytes.
    pub struct FteMatchParam("fte_match_param", 0x200) {
        /// Outer headers.
        outer_headers: FteMatchSetLyr24 = 0x000,
        /// Miscellaneous fields.
        misc_parameters: FteMatchSetMisc = 0x040,
        /// Inner (tunnelled) headers.
        inner_headers: FteMatchSetLyr24 = 0x080,
        /// `fte_match_set_misc2` (MPLS, metadata registers), as bytes.
        misc_parameters_2: [u8; 64] = 0x0c0,
        /// `fte_match_set_misc3` (inner TCP seq/ack, VXLAN-GPE, ICMP), as
        /// bytes.
        misc_parameters_3: [u8; 64] = 0x100,
        /// `fte_match_set_misc4` (programmable samples), as bytes.
        misc_parameters_4: [u8; 64] = 0x140,
        /// `fte_match_set_misc5` (MACsec tags, tunnel headers), as bytes.
        misc_parameters_5: [u8; 64] = 0x180,
    }
}

prm_struct! {
    /// CREATE_FLOW_GROUP input (`create_flow_group_in`), 0x400 bytes.
    pub struct CreateFlowGroupIn("create_flow_group_in", 0x400): command CREATE_FLOW_GROUP -> CreateFlowGroupOut {
        /// Opcode (CREATE_FLOW_GROUP).
        opcode: u16 = 0x00[31:16],
        /// The table belongs to `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// The table.
        table_id: u32 = 0x14[23:0],
        /// First entry index of the group.
        start_flow_index: u32 = 0x1c[31:0],
        /// Last entry index of the group.
        end_flow_index: u32 = 0x24[31:0],
        /// Which parts of `match_criteria` apply
        /// (`MATCH_CRITERIA_ENABLE_*`).
        match_criteria_enable: u8 = 0x3c[7:0],
        /// The bits the group's entries match on.
        match_criteria: FteMatchParam = 0x40,
    }
}

prm_struct! {
    /// CREATE_FLOW_GROUP output (`create_flow_group_out`).
    pub struct CreateFlowGroupOut("create_flow_group_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The group id.
        group_id: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_FLOW_GROUP input (`destroy_flow_group_in`).
    pub struct DestroyFlowGroupIn("destroy_flow_group_in", 0x40): command DESTROY_FLOW_GROUP -> DestroyFlowGroupOut {
        /// Opcode (DESTROY_FLOW_GROUP).
        opcode: u16 = 0x00[31:16],
        /// The table belongs to `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// The table.
        table_id: u32 = 0x14[23:0],
        /// Group to destroy.
        group_id: u32 = 0x18[31:0],
    }
}

prm_struct! {
    /// DESTROY_FLOW_GROUP output (`destroy_flow_group_out`).
    pub struct DestroyFlowGroupOut("destroy_flow_group_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// One destination of a flow entry (`dest_format_struct`), 8 bytes; a
    /// flow counter list entry has the same size.
    pub struct DestFormatStruct("dest_format_struct", 0x8) {
        /// Destination type (`FLOW_DESTINATION_TYPE_*`).
        destination_type: u8 = 0x00[31:24],
        /// TIR, flow table or vport number.
        destination_id: u32 = 0x00[23:0],
    }
}

prm_struct! {
    /// One flow counter of a flow entry (`flow_counter_list`), 8 bytes.
    pub struct FlowCounterList("flow_counter_list", 0x8) {
        /// Flow counter id.
        flow_counter_id: u32 = 0x00[31:0],
    }
}

prm_struct! {
    /// Flow entry context (`flow_context`), 0x300 bytes, followed by
    /// `destination_list_size` destinations and `flow_counter_list_size`
    /// counters, 8 bytes each (`destination`).
    pub struct FlowContext("flow_context", 0x300) {
        /// Flow group of the entry.
        group_id: u32 = 0x04[31:0],
        /// Flow tag reported in receive CQEs.
        flow_tag: u32 = 0x08[23:0],
        /// Actions (`FLOW_CONTEXT_ACTION_*`).
        action: u16 = 0x0c[15:0],
        /// Extended destination format.
        extended_destination: bool = 0x10[31:31],
        /// Flow source.
        flow_source: u8 = 0x10[29:28],
        /// Encrypt/decrypt type.
        encrypt_decrypt_type: u8 = 0x10[27:24],
        /// Number of destinations.
        destination_list_size: u32 = 0x10[23:0],
        /// Number of flow counters.
        flow_counter_list_size: u32 = 0x14[23:0],
        /// Packet reformat context.
        packet_reformat_id: u32 = 0x18[31:0],
        /// Modify header context.
        modify_header_id: u32 = 0x1c[31:0],
        /// Encrypt/decrypt object.
        encrypt_decrypt_obj_id: u32 = 0x24[31:0],
        /// The values the entry matches.
        match_value: FteMatchParam = 0x40,
        /// Destinations then flow counters, each the 8-byte image of a
        /// [`DestFormatStruct`] or [`FlowCounterList`].
        destination: [[u8; 8]] = 0x300,
    }
}

prm_struct! {
    /// SET_FLOW_TABLE_ENTRY input (`set_fte_in`), 0x340 bytes, followed by
    /// the destination list (`flow_context.destination`).
    pub struct SetFteIn("set_fte_in", 0x340): command SET_FLOW_TABLE_ENTRY -> SetFteOut {
        /// Opcode (SET_FLOW_TABLE_ENTRY).
        opcode: u16 = 0x00[31:16],
        /// Op mod (`SET_FTE_OP_MOD_*`).
        op_mod: u16 = 0x04[15:0],
        /// The table belongs to `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// The table.
        table_id: u32 = 0x14[23:0],
        /// Forwarding may ignore the table levels.
        ignore_flow_level: bool = 0x18[31:31],
        /// Fields to modify (op_mod modify).
        modify_enable_mask: u8 = 0x18[7:0],
        /// Entry index in the table.
        flow_index: u32 = 0x20[31:0],
        /// The entry.
        flow_context: FlowContext = 0x40,
        /// The destination list (`flow_context.destination`).
        destination: [[u8; 8]] = 0x340,
    }
}

prm_struct! {
    /// SET_FLOW_TABLE_ENTRY output (`set_fte_out`).
    pub struct SetFteOut("set_fte_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// DELETE_FLOW_TABLE_ENTRY input (`delete_fte_in`).
    pub struct DeleteFteIn("delete_fte_in", 0x40): command DELETE_FLOW_TABLE_ENTRY -> DeleteFteOut {
        /// Opcode (DELETE_FLOW_TABLE_ENTRY).
        opcode: u16 = 0x00[31:16],
        /// The table belongs to `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// The table.
        table_id: u32 = 0x14[23:0],
        /// Entry index to delete.
        flow_index: u32 = 0x20[31:0],
    }
}

prm_struct! {
    /// DELETE_FLOW_TABLE_ENTRY output (`delete_fte_out`).
    pub struct DeleteFteOut("delete_fte_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// SET_FLOW_TABLE_ROOT input (`set_flow_table_root_in`).
    pub struct SetFlowTableRootIn("set_flow_table_root_in", 0x40): command SET_FLOW_TABLE_ROOT -> SetFlowTableRootOut {
        /// Opcode (SET_FLOW_TABLE_ROOT).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The table belongs to `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Table type (`FLOW_TABLE_TYPE_*`).
        table_type: u8 = 0x10[31:24],
        /// The new root table.
        table_id: u32 = 0x14[23:0],
        /// Underlay QP (IPoIB).
        underlay_qpn: u32 = 0x18[23:0],
    }
}

prm_struct! {
    /// SET_FLOW_TABLE_ROOT output (`set_flow_table_root_out`).
    pub struct SetFlowTableRootOut("set_flow_table_root_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
