//! Virtual ports: QUERY_VPORT_STATE, QUERY_NIC_VPORT_CONTEXT and
//! MODIFY_NIC_VPORT_CONTEXT (`nic_vport_context`), QUERY_HCA_VPORT_CONTEXT
//! (`hca_vport_context`), QUERY_HCA_VPORT_GID and QUERY_HCA_VPORT_PKEY
//! (`pkey`).

use crate::prm_struct;

/// `query_vport_state_in.op_mod`: the vNIC vport.
pub const VPORT_STATE_OP_MOD_VNIC_VPORT: u16 = 0x0;
/// `query_vport_state_in.op_mod`: an e-switch vport.
pub const VPORT_STATE_OP_MOD_ESW_VPORT: u16 = 0x1;
/// `query_vport_state_in.op_mod`: the uplink.
pub const VPORT_STATE_OP_MOD_UPLINK: u16 = 0x2;

/// `query_vport_state_out.state` / `admin_state`: down.
pub const VPORT_STATE_DOWN: u8 = 0x0;
/// `query_vport_state_out.state` / `admin_state`: up.
pub const VPORT_STATE_UP: u8 = 0x1;
/// `query_vport_state_out.admin_state`: follow the physical port.
pub const VPORT_ADMIN_STATE_AUTO: u8 = 0x2;

/// `query_hca_vport_pkey_in.pkey_index` (and `query_hca_vport_gid_in.gid_index`)
/// that asks for the whole table.
pub const VPORT_QUERY_ALL_INDICES: u16 = 0xffff;
/// The default P_Key: full membership of the default partition (entry 0 of
/// every P_Key table).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// `nic_vport_context.allowed_list_type`: unicast MAC list.
pub const NVPRT_LIST_TYPE_UC: u8 = 0x0;
/// `nic_vport_context.allowed_list_type`: multicast MAC list.
pub const NVPRT_LIST_TYPE_MC: u8 = 0x1;
/// `nic_vport_context.allowed_list_type`: VLAN list.
pub const NVPRT_LIST_TYPE_VLAN: u8 = 0x2;

prm_struct! {
    /// QUERY_VPORT_STATE input (`query_vport_state_in`).
    pub struct QueryVportStateIn("query_vport_state_in", 0x10): command QUERY_VPORT_STATE -> QueryVportStateOut {
        /// Opcode (QUERY_VPORT_STATE).
        opcode: u16 = 0x00[31:16],
        /// Op mod (`VPORT_STATE_OP_MOD_*`).
        op_mod: u16 = 0x04[15:0],
        /// Query `vport_number`, not this function's vport.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// QUERY_VPORT_STATE output (`query_vport_state_out`).
    pub struct QueryVportStateOut("query_vport_state_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// Administrative state (`VPORT_STATE_*`, `VPORT_ADMIN_STATE_AUTO`).
        admin_state: u8 = 0x0c[7:4],
        /// Operational state (`VPORT_STATE_*`).
        state: u8 = 0x0c[3:0],
    }
}

prm_struct! {
    /// A MAC address in 8 bytes (`mac_address_layout`): bits 47:0 in the
    /// last 6 bytes.
    pub struct MacAddressLayout("mac_address_layout", 0x8) {
        /// Bits 47:32.
        mac_addr_47_32: u16 = 0x00[15:0],
        /// Bits 31:0.
        mac_addr_31_0: u32 = 0x04[31:0],
    }
}

impl MacAddressLayout {
    /// The address as 6 bytes.
    pub fn mac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.0[2..8]);
        m
    }

    /// From 6 bytes.
    pub fn from_mac(mac: [u8; 6]) -> Self {
        let mut s = Self::new();
        s.0[2..8].copy_from_slice(&mac);
        s
    }
}

prm_struct! {
    /// NIC vport context (`nic_vport_context`), 0x100 bytes.
    pub struct NicVportContext("nic_vport_context", 0x100) {
        /// Multi-priority SQs.
        multi_prio_sq: bool = 0x00[31:31],
        /// Vport to FDB metadata.
        vport_to_fdb_metadata: bool = 0x00[30:30],
        /// FDB to vport metadata.
        fdb_to_vport_metadata: bool = 0x00[29:29],
        /// Headers that must be inline in SQ WQEs (`INLINE_MODE_*` of
        /// [`eth`](crate::eth)).
        min_wqe_inline_mode: u8 = 0x00[26:24],
        /// Disable multicast local loopback.
        disable_mc_local_lb: bool = 0x00[2:2],
        /// Disable unicast local loopback.
        disable_uc_local_lb: bool = 0x00[1:1],
        /// RoCE enabled on the vport.
        roce_en: bool = 0x00[0:0],
        /// Arm the change event.
        arm_change_event: bool = 0x04[31:31],
        /// Event on MTU change.
        event_on_mtu: bool = 0x04[4:4],
        /// Event on promiscuous mode change.
        event_on_promisc_change: bool = 0x04[3:3],
        /// Event on VLAN list change.
        event_on_vlan_change: bool = 0x04[2:2],
        /// Event on multicast address change.
        event_on_mc_address_change: bool = 0x04[1:1],
        /// Event on unicast address change.
        event_on_uc_address_change: bool = 0x04[0:0],
        /// Affiliation criteria.
        affiliation_criteria: u8 = 0x08[19:16],
        /// Affiliated vHCA.
        affiliated_vhca_id: u16 = 0x08[15:0],
        /// MTU (bytes, including the L2 header).
        mtu: u16 = 0x24[15:0],
        /// System image GUID.
        system_image_guid: u64 = 0x28[63:0],
        /// Port GUID.
        port_guid: u64 = 0x30[63:0],
        /// Node GUID.
        node_guid: u64 = 0x38[63:0],
        /// Q_Key violations.
        qkey_violation_counter: u16 = 0x68[31:16],
        /// Promiscuous unicast.
        promisc_uc: bool = 0xf0[31:31],
        /// Promiscuous multicast.
        promisc_mc: bool = 0xf0[30:30],
        /// Promiscuous all.
        promisc_all: bool = 0xf0[29:29],
        /// Type of the address list (`NVPRT_LIST_TYPE_*`).
        allowed_list_type: u8 = 0xf0[26:24],
        /// Entries in the address list.
        allowed_list_size: u16 = 0xf0[11:0],
        /// The vport's permanent MAC address.
        permanent_address: MacAddressLayout = 0xf4,
    }
}

prm_struct! {
    /// QUERY_NIC_VPORT_CONTEXT input (`query_nic_vport_context_in`).
    pub struct QueryNicVportContextIn("query_nic_vport_context_in", 0x10): command QUERY_NIC_VPORT_CONTEXT -> QueryNicVportContextOut {
        /// Opcode (QUERY_NIC_VPORT_CONTEXT).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Query `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Address list to return (`NVPRT_LIST_TYPE_*`).
        allowed_list_type: u8 = 0x0c[26:24],
    }
}

prm_struct! {
    /// QUERY_NIC_VPORT_CONTEXT output (`query_nic_vport_context_out`).
    pub struct QueryNicVportContextOut("query_nic_vport_context_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The context.
        nic_vport_context: NicVportContext = 0x10,
    }
}

prm_struct! {
    /// Which `nic_vport_context` fields MODIFY_NIC_VPORT_CONTEXT changes
    /// (`modify_nic_vport_field_select`).
    pub struct ModifyNicVportFieldSelect("modify_nic_vport_field_select", 0x4) {
        /// Affiliation.
        affiliation: bool = 0x00[13:13],
        /// `disable_uc_local_lb`.
        disable_uc_local_lb: bool = 0x00[11:11],
        /// `disable_mc_local_lb`.
        disable_mc_local_lb: bool = 0x00[10:10],
        /// `node_guid`.
        node_guid: bool = 0x00[9:9],
        /// `port_guid`.
        port_guid: bool = 0x00[8:8],
        /// `min_wqe_inline_mode`.
        min_inline: bool = 0x00[7:7],
        /// `mtu`.
        mtu: bool = 0x00[6:6],
        /// The change event fields.
        change_event: bool = 0x00[5:5],
        /// The promiscuous fields.
        promisc: bool = 0x00[4:4],
        /// `permanent_address`.
        permanent_address: bool = 0x00[3:3],
        /// The address list.
        addresses_list: bool = 0x00[2:2],
        /// `roce_en`.
        roce_en: bool = 0x00[1:1],
    }
}

prm_struct! {
    /// MODIFY_NIC_VPORT_CONTEXT input (`modify_nic_vport_context_in`).
    pub struct ModifyNicVportContextIn("modify_nic_vport_context_in", 0x200): command MODIFY_NIC_VPORT_CONTEXT -> ModifyNicVportContextOut {
        /// Opcode (MODIFY_NIC_VPORT_CONTEXT).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Modify `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// Fields to modify.
        field_select: ModifyNicVportFieldSelect = 0x0c,
        /// The new values.
        nic_vport_context: NicVportContext = 0x100,
    }
}

prm_struct! {
    /// MODIFY_NIC_VPORT_CONTEXT output (`modify_nic_vport_context_out`).
    pub struct ModifyNicVportContextOut("modify_nic_vport_context_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// HCA (InfiniBand) vport context (`hca_vport_context`), 0x200 bytes.
    pub struct HcaVportContext("hca_vport_context", 0x200) {
        /// Fields to modify (MODIFY_HCA_VPORT_CONTEXT).
        field_select: u32 = 0x00[31:0],
        /// Subnet manager virtualization aware.
        sm_virt_aware: bool = 0x20[31:31],
        /// Has a subnet management interface.
        has_smi: bool = 0x20[30:30],
        /// Has raw QPs.
        has_raw: bool = 0x20[29:29],
        /// GRH required.
        grh_required: bool = 0x20[28:28],
        /// Physical port state.
        port_physical_state: u8 = 0x20[15:12],
        /// Vport state policy.
        vport_state_policy: u8 = 0x20[11:8],
        /// Port state (IB: 1 down, 2 init, 3 armed, 4 active).
        port_state: u8 = 0x20[7:4],
        /// Vport state.
        vport_state: u8 = 0x20[3:0],
        /// System image GUID.
        system_image_guid: u64 = 0x28[63:0],
        /// Port GUID.
        port_guid: u64 = 0x30[63:0],
        /// Node GUID.
        node_guid: u64 = 0x38[63:0],
        /// Capability mask 1.
        cap_mask1: u32 = 0x40[31:0],
        /// Bits of `cap_mask1` to modify.
        cap_mask1_field_select: u32 = 0x44[31:0],
        /// Capability mask 2.
        cap_mask2: u32 = 0x48[31:0],
        /// Bits of `cap_mask2` to modify.
        cap_mask2_field_select: u32 = 0x4c[31:0],
        /// LID.
        lid: u16 = 0x60[31:16],
        /// Init type reply.
        init_type_reply: u8 = 0x60[11:8],
        /// LID mask control.
        lmc: u8 = 0x60[7:5],
        /// Subnet timeout.
        subnet_timeout: u8 = 0x60[4:0],
        /// Subnet manager LID.
        sm_lid: u16 = 0x64[31:16],
        /// Subnet manager SL.
        sm_sl: u8 = 0x64[15:12],
        /// Q_Key violations.
        qkey_violation_counter: u16 = 0x68[31:16],
        /// P_Key violations.
        pkey_violation_counter: u16 = 0x68[15:0],
    }
}

prm_struct! {
    /// QUERY_HCA_VPORT_CONTEXT input (`query_hca_vport_context_in`).
    pub struct QueryHcaVportContextIn("query_hca_vport_context_in", 0x10): command QUERY_HCA_VPORT_CONTEXT -> QueryHcaVportContextOut {
        /// Opcode (QUERY_HCA_VPORT_CONTEXT).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Query `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Port (1-based).
        port_num: u8 = 0x08[19:16],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// QUERY_HCA_VPORT_CONTEXT output (`query_hca_vport_context_out`).
    pub struct QueryHcaVportContextOut("query_hca_vport_context_out", 0x210) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The context.
        hca_vport_context: HcaVportContext = 0x10,
    }
}

prm_struct! {
    /// QUERY_HCA_VPORT_GID input (`query_hca_vport_gid_in`).
    pub struct QueryHcaVportGidIn("query_hca_vport_gid_in", 0x10): command QUERY_HCA_VPORT_GID -> QueryHcaVportGidOut {
        /// Opcode (QUERY_HCA_VPORT_GID).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Query `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Port (1-based).
        port_num: u8 = 0x08[19:16],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// GID index (0xffff: the whole table).
        gid_index: u16 = 0x0c[15:0],
    }
}

prm_struct! {
    /// QUERY_HCA_VPORT_GID output (`query_hca_vport_gid_out`), followed by
    /// `gids_num` 16-byte GIDs.
    pub struct QueryHcaVportGidOut("query_hca_vport_gid_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// Number of GIDs returned.
        gids_num: u16 = 0x0c[31:16],
        /// The GIDs.
        gid: [[u8; 16]] = 0x10,
    }
}

prm_struct! {
    /// One P_Key table entry (`pkey`), as QUERY_HCA_VPORT_PKEY returns it.
    pub struct Pkey("pkey", 0x4) {
        /// The P_Key: bit 15 full membership, bits 14:0 the partition.
        pkey: u16 = 0x00[15:0],
    }
}

prm_struct! {
    /// QUERY_HCA_VPORT_PKEY input (`query_hca_vport_pkey_in`).
    pub struct QueryHcaVportPkeyIn("query_hca_vport_pkey_in", 0x10): command QUERY_HCA_VPORT_PKEY -> QueryHcaVportPkeyOut {
        /// Opcode (QUERY_HCA_VPORT_PKEY).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Query `vport_number`.
        other_vport: bool = 0x08[31:31],
        /// Port (1-based).
        port_num: u8 = 0x08[19:16],
        /// Vport.
        vport_number: u16 = 0x08[15:0],
        /// P_Key index ([`VPORT_QUERY_ALL_INDICES`]: the whole table).
        pkey_index: u16 = 0x0c[15:0],
    }
}

prm_struct! {
    /// QUERY_HCA_VPORT_PKEY output (`query_hca_vport_pkey_out`), followed
    /// by one 4-byte [`Pkey`] entry, or the whole table when
    /// `pkey_index` was [`VPORT_QUERY_ALL_INDICES`].
    pub struct QueryHcaVportPkeyOut("query_hca_vport_pkey_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The P_Key entries (`pkey` images).
        pkey: [[u8; 4]] = 0x10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::layout::Layout;
    use crate::opcode::Opcode;

    #[test]
    fn query_hca_vport_pkey_places_its_fields() {
        assert_eq!(QueryHcaVportPkeyIn::OPCODE, Opcode::QUERY_HCA_VPORT_PKEY);
        let q = QueryHcaVportPkeyIn::new()
            .with(QueryHcaVportPkeyIn::port_num, 2)
            .unwrap()
            .with(QueryHcaVportPkeyIn::pkey_index, VPORT_QUERY_ALL_INDICES)
            .unwrap();
        assert_eq!(
            q.as_bytes(),
            &[
                0x07, 0x65, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0xff, 0xff
            ]
        );
        // An answer with two entries: 0xffff and 0x8001.
        let mut out = [0u8; 0x18];
        out[0x12..0x14].copy_from_slice(&[0xff, 0xff]);
        out[0x16..0x18].copy_from_slice(&[0x80, 0x01]);
        let head = QueryHcaVportPkeyOut::decode(&out).unwrap();
        assert_eq!(head.get(QueryHcaVportPkeyOut::status), 0);
        let entries: [u16; 2] = core::array::from_fn(|i| {
            let o = QueryHcaVportPkeyOut::SIZE + 4 * i;
            Pkey::decode(&out[o..o + 4]).unwrap().get(Pkey::pkey)
        });
        assert_eq!(entries, [DEFAULT_PKEY, 0x8001]);
    }
}
