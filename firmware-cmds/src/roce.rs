//! RoCE addresses (the GID table of an Ethernet port): SET_ROCE_ADDRESS,
//! QUERY_ROCE_ADDRESS and `roce_addr_layout`.

use crate::prm_struct;

/// `roce_addr_layout.roce_l3_type`: IPv4.
pub const ROCE_L3_TYPE_IPV4: u8 = 0x0;
/// `roce_addr_layout.roce_l3_type`: IPv6.
pub const ROCE_L3_TYPE_IPV6: u8 = 0x1;

/// `roce_addr_layout.roce_version`: RoCE v1.
pub const ROCE_VERSION_V1: u8 = 0x0;
/// `roce_addr_layout.roce_version`: RoCE v2.
pub const ROCE_VERSION_V2: u8 = 0x2;

prm_struct! {
    /// One RoCE address table entry (`roce_addr_layout`).
    pub struct RoceAddrLayout("roce_addr_layout", 0x20) {
        /// The GID: an IPv6 address, or an IPv4-mapped one
        /// (`::ffff:a.b.c.d`).
        source_l3_address: [u8; 16] = 0x00,
        /// `vlan_id` is valid.
        vlan_valid: bool = 0x10[28:28],
        /// VLAN id.
        vlan_id: u16 = 0x10[27:16],
        /// Source MAC, bits 47:32.
        source_mac_47_32: u16 = 0x10[15:0],
        /// Source MAC, bits 31:0.
        source_mac_31_0: u32 = 0x14[31:0],
        /// L3 type (`ROCE_L3_TYPE_*`).
        roce_l3_type: u8 = 0x18[11:8],
        /// RoCE version (`ROCE_VERSION_V*`).
        roce_version: u8 = 0x18[7:0],
    }
}

impl RoceAddrLayout {
    /// Sets the source MAC (`source_mac_47_32`, `source_mac_31_0`).
    pub fn set_source_mac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.0[0x12..0x18].copy_from_slice(&mac);
        self
    }

    /// The source MAC.
    pub fn source_mac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.0[0x12..0x18]);
        m
    }
}

prm_struct! {
    /// SET_ROCE_ADDRESS input (`set_roce_address_in`).
    pub struct SetRoceAddressIn("set_roce_address_in", 0x30): command SET_ROCE_ADDRESS -> SetRoceAddressOut {
        /// Opcode (SET_ROCE_ADDRESS).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Table index (the GID index).
        roce_address_index: u16 = 0x08[31:16],
        /// Port (1-based).
        vhca_port_num: u8 = 0x08[3:0],
        /// The entry.
        roce_address: RoceAddrLayout = 0x10,
    }
}

prm_struct! {
    /// SET_ROCE_ADDRESS output (`set_roce_address_out`).
    pub struct SetRoceAddressOut("set_roce_address_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_ROCE_ADDRESS input (`query_roce_address_in`).
    pub struct QueryRoceAddressIn("query_roce_address_in", 0x10): command QUERY_ROCE_ADDRESS -> QueryRoceAddressOut {
        /// Opcode (QUERY_ROCE_ADDRESS).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Table index.
        roce_address_index: u16 = 0x08[31:16],
        /// Port (1-based).
        vhca_port_num: u8 = 0x08[3:0],
    }
}

prm_struct! {
    /// QUERY_ROCE_ADDRESS output (`query_roce_address_out`).
    pub struct QueryRoceAddressOut("query_roce_address_out", 0x30) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The entry.
        roce_address: RoceAddrLayout = 0x10,
    }
}
