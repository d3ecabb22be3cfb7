//! Management datagrams: MAD_IFC, which hands a 256-byte MAD to the
//! firmware's subnet management agent and returns its answer.

use crate::prm_struct;

/// Size of a MAD.
pub const MAD_SIZE: usize = 256;

prm_struct! {
    /// MAD_IFC input (`mad_ifc_in`).
    pub struct MadIfcIn("mad_ifc_in", 0x110): command MAD_IFC -> MadIfcOut {
        /// Opcode (MAD_IFC).
        opcode: u16 = 0x00[31:16],
        /// Op mod (MAD flags: bit 0 ignore M_Key, bit 1 ignore B_Key).
        op_mod: u16 = 0x04[15:0],
        /// LID of the sender.
        remote_lid: u16 = 0x08[31:16],
        /// Port (1-based).
        port: u8 = 0x08[7:0],
        /// The MAD.
        mad: [u8; 256] = 0x10,
    }
}

prm_struct! {
    /// MAD_IFC output (`mad_ifc_out`).
    pub struct MadIfcOut("mad_ifc_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The response MAD.
        response_mad_packet: [u8; 256] = 0x10,
    }
}
