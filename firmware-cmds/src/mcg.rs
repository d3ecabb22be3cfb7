//! Multicast groups of UD QPs: ATTACH_TO_MCG, DETACH_FROM_MCG.

use crate::prm_struct;

prm_struct! {
    /// ATTACH_TO_MCG input (`attach_to_mcg_in`).
    /// (`mlx5_ifc.h` names the header words of this one reserved; the
    /// opcode is written as for every command.)
    pub struct AttachToMcgIn("attach_to_mcg_in", 0x20): command ATTACH_TO_MCG -> AttachToMcgOut {
        /// The UD QP to attach.
        qpn: u32 = 0x08[23:0],
        /// The multicast GID (MGID) of the group.
        multicast_gid: [u8; 16] = 0x10,
    }
}

prm_struct! {
    /// ATTACH_TO_MCG output (`attach_to_mcg_out`).
    pub struct AttachToMcgOut("attach_to_mcg_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// DETACH_FROM_MCG input (`detach_from_mcg_in`).
    pub struct DetachFromMcgIn("detach_from_mcg_in", 0x20): command DETACH_FROM_MCG -> DetachFromMcgOut {
        /// Opcode (DETACH_FROM_MCG).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// The UD QP to detach.
        qpn: u32 = 0x08[23:0],
        /// The multicast GID (MGID) of the group.
        multicast_gid: [u8; 16] = 0x10,
    }
}

prm_struct! {
    /// DETACH_FROM_MCG output (`detach_from_mcg_out`).
    pub struct DetachFromMcgOut("detach_from_mcg_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
