//! User access regions (UARs): ALLOC_UAR and DEALLOC_UAR.
//!
//! A UAR is a page of BAR0 (after the initialization segment) holding the
//! doorbell registers of the queues bound to it: the EQ doorbells at 0x40 and
//! 0x48, the CQ arm doorbell at 0x20 and the BlueFlame registers at 0x800.

use crate::prm_struct;

/// Offset of the CQ arm doorbell (`MLX5_CQ_DOORBELL`) in a UAR page.
pub const UAR_CQ_DOORBELL_OFFSET: usize = 0x20;
/// Offset of the EQ doorbell that updates the consumer index and re-arms
/// (`MLX5_EQ_DOORBEL_OFFSET`).
pub const UAR_EQ_DOORBELL_ARM_OFFSET: usize = 0x40;
/// Offset of the EQ doorbell that only updates the consumer index.
pub const UAR_EQ_DOORBELL_UPDATE_OFFSET: usize = 0x48;
/// Offset of the first BlueFlame register (`MLX5_BF_OFFSET`); the second is
/// at 0x900.
pub const UAR_BF_OFFSET: usize = 0x800;
/// Size of one UAR page when `uar_4k` is in effect.
pub const UAR_PAGE_SIZE_4K: usize = 4096;

prm_struct! {
    /// ALLOC_UAR input (`alloc_uar_in`).
    pub struct AllocUarIn("alloc_uar_in", 0x10): command ALLOC_UAR -> AllocUarOut {
        /// Opcode (ALLOC_UAR).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// ALLOC_UAR output (`alloc_uar_out`).
    pub struct AllocUarOut("alloc_uar_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The UAR index: its page in BAR0 (in UAR page units, counted from
        /// the start of BAR0).
        uar: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DEALLOC_UAR input (`dealloc_uar_in`).
    pub struct DeallocUarIn("dealloc_uar_in", 0x10): command DEALLOC_UAR -> DeallocUarOut {
        /// Opcode (DEALLOC_UAR).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// UAR to free.
        uar: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DEALLOC_UAR output (`dealloc_uar_out`).
    pub struct DeallocUarOut("dealloc_uar_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
