//! Bring-up and teardown of the HCA: ENABLE_HCA, DISABLE_HCA, QUERY_ISSI,
//! SET_ISSI, QUERY_PAGES, MANAGE_PAGES, INIT_HCA, TEARDOWN_HCA,
//! SET_DRIVER_VERSION, QUERY_ADAPTER and NOP.
//!
//! The capability commands (QUERY_HCA_CAP, SET_HCA_CAP) live in
//! [`caps`](crate::caps).

use crate::prm_struct;

/// `query_pages_in.op_mod`: pages the firmware needs to boot (before
/// INIT_HCA; Linux `MLX5_BOOT_PAGES`).
pub const QUERY_PAGES_OP_MOD_BOOT_PAGES: u16 = 0x1;
/// `query_pages_in.op_mod`: pages the firmware needs for INIT_HCA (Linux
/// `MLX5_INIT_PAGES`).
pub const QUERY_PAGES_OP_MOD_INIT_PAGES: u16 = 0x2;
/// `query_pages_in.op_mod`: pages the firmware needs after INIT_HCA (Linux
/// `MLX5_POST_INIT_PAGES`).
pub const QUERY_PAGES_OP_MOD_REGULAR_PAGES: u16 = 0x3;

/// `manage_pages_in.op_mod`: the driver could not allocate the pages the
/// firmware asked for (PRM "ALLOCATION_FAIL", Linux `MLX5_PAGES_CANT_GIVE`).
pub const MANAGE_PAGES_OP_MOD_ALLOCATION_FAIL: u16 = 0x0;
/// `manage_pages_in.op_mod`: the driver gives the pages listed in `pas`
/// (PRM "ALLOCATION_SUCCESS", Linux `MLX5_PAGES_GIVE`).
pub const MANAGE_PAGES_OP_MOD_ALLOCATION_SUCCESS: u16 = 0x1;
/// `manage_pages_in.op_mod`: the firmware returns up to `input_num_entries`
/// pages, listed in the output's `pas` (PRM "HCA_RETURN_PAGES", Linux
/// `MLX5_PAGES_TAKE`).
pub const MANAGE_PAGES_OP_MOD_HCA_RETURN_PAGES: u16 = 0x2;

/// Size of a page given to the firmware with MANAGE_PAGES (4 KiB, whatever
/// the host page size).
pub const FW_PAGE_SIZE: usize = 4096;

/// `teardown_hca_in.profile`: graceful close, the firmware flushes and
/// releases everything.
pub const TEARDOWN_HCA_PROFILE_GRACEFUL_CLOSE: u16 = 0x0;
/// `teardown_hca_in.profile`: force close (`force_teardown` capability).
pub const TEARDOWN_HCA_PROFILE_FORCE_CLOSE: u16 = 0x1;
/// `teardown_hca_in.profile`: prepare a fast teardown (`fast_teardown`
/// capability).
pub const TEARDOWN_HCA_PROFILE_PREPARE_FAST_TEARDOWN: u16 = 0x2;

/// `teardown_hca_out.state`: the force close succeeded.
pub const TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS: u8 = 0x0;
/// `teardown_hca_out.state`: the force close failed; fall back to a graceful
/// close.
pub const TEARDOWN_HCA_OUT_FORCE_STATE_FAIL: u8 = 0x1;

prm_struct! {
    /// ENABLE_HCA input (`enable_hca_in`): the first command of bring-up.
    pub struct EnableHcaIn("enable_hca_in", 0x10): command ENABLE_HCA -> EnableHcaOut {
        /// Opcode (ENABLE_HCA).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Function to enable (0 = this function).
        function_id: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// ENABLE_HCA output (`enable_hca_out`); 12 bytes in the PRM, the entry
    /// still carries 16.
    pub struct EnableHcaOut("enable_hca_out", 0x0c) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// DISABLE_HCA input (`disable_hca_in`): the last command of teardown.
    pub struct DisableHcaIn("disable_hca_in", 0x10): command DISABLE_HCA -> DisableHcaOut {
        /// Opcode (DISABLE_HCA).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The function is the embedded CPU's (SmartNIC).
        embedded_cpu_function: bool = 0x08[31:31],
        /// Function to disable (0 = this function).
        function_id: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// DISABLE_HCA output (`disable_hca_out`), 12 bytes.
    pub struct DisableHcaOut("disable_hca_out", 0x0c) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_ISSI input (`query_issi_in`): which interface step sequence ids
    /// the firmware supports.
    pub struct QueryIssiIn("query_issi_in", 0x10): command QUERY_ISSI -> QueryIssiOut {
        /// Opcode (QUERY_ISSI).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// QUERY_ISSI output (`query_issi_out`), 0x70 bytes (a mailbox is needed).
    pub struct QueryIssiOut("query_issi_out", 0x70) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The ISSI currently in effect.
        current_issi: u16 = 0x08[15:0],
        /// Bit n set: ISSI n supported (bits 31:0 of the 640-bit
        /// `supported_issi` array, i.e. ISSIs 0..31).
        supported_issi_dw0: u32 = 0x6c[31:0],
    }
}

impl QueryIssiOut {
    /// Whether ISSI `issi` (0..32) is in `supported_issi_dw0`.
    pub fn supports_issi(&self, issi: u32) -> bool {
        issi < 32 && self.get(Self::supported_issi_dw0) & (1 << issi) != 0
    }
}

prm_struct! {
    /// SET_ISSI input (`set_issi_in`).
    pub struct SetIssiIn("set_issi_in", 0x10): command SET_ISSI -> SetIssiOut {
        /// Opcode (SET_ISSI).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The ISSI to use (1 when supported, else stay at 0).
        current_issi: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// SET_ISSI output (`set_issi_out`).
    pub struct SetIssiOut("set_issi_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_PAGES input (`query_pages_in`); op_mod is one of
    /// `QUERY_PAGES_OP_MOD_*`.
    pub struct QueryPagesIn("query_pages_in", 0x10): command QUERY_PAGES -> QueryPagesOut {
        /// Opcode (QUERY_PAGES).
        opcode: u16 = 0x00[31:16],
        /// Op mod: boot, init or regular pages.
        op_mod: u16 = 0x04[15:0],
        /// Function whose needs are queried (0 = this function).
        function_id: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// QUERY_PAGES output (`query_pages_out`).
    pub struct QueryPagesOut("query_pages_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The function is the embedded CPU's.
        embedded_cpu_function: bool = 0x08[31:31],
        /// Function the answer is for.
        function_id: u16 = 0x08[15:0],
        /// Number of 4 KiB pages needed, a signed 32-bit number (see
        /// [`num_pages_signed`](Self::num_pages_signed)).
        num_pages: u32 = 0x0c[31:0],
    }
}

impl QueryPagesOut {
    /// `num_pages` as the signed number the PRM defines (negative: the
    /// firmware has pages to give back).
    pub fn num_pages_signed(&self) -> i32 {
        self.get(Self::num_pages) as i32
    }
}

prm_struct! {
    /// MANAGE_PAGES input (`manage_pages_in`), followed by
    /// `input_num_entries` 64-bit page addresses when giving pages.
    pub struct ManagePagesIn("manage_pages_in", 0x10): command MANAGE_PAGES -> ManagePagesOut {
        /// Opcode (MANAGE_PAGES).
        opcode: u16 = 0x00[31:16],
        /// Op mod: one of `MANAGE_PAGES_OP_MOD_*`.
        op_mod: u16 = 0x04[15:0],
        /// The function is the embedded CPU's.
        embedded_cpu_function: bool = 0x08[31:31],
        /// Function the pages are for (0 = this function).
        function_id: u16 = 0x08[15:0],
        /// Number of pages given (`pas` entries), or asked back.
        input_num_entries: u32 = 0x0c[31:0],
        /// Physical addresses of 4 KiB pages, 4 KiB aligned.
        pas: [u64] = 0x10,
    }
}

prm_struct! {
    /// MANAGE_PAGES output (`manage_pages_out`), followed by
    /// `output_num_entries` page addresses when the firmware returns pages.
    pub struct ManagePagesOut("manage_pages_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// Number of pages returned in `pas` (never more than asked for).
        output_num_entries: u32 = 0x08[31:0],
        /// Addresses of the returned pages.
        pas: [u64] = 0x10,
    }
}

prm_struct! {
    /// INIT_HCA input (`init_hca_in`).
    pub struct InitHcaIn("init_hca_in", 0x10): command INIT_HCA -> InitHcaOut {
        /// Opcode (INIT_HCA).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// INIT_HCA output (`init_hca_out`).
    pub struct InitHcaOut("init_hca_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// TEARDOWN_HCA input (`teardown_hca_in`).
    pub struct TeardownHcaIn("teardown_hca_in", 0x10): command TEARDOWN_HCA -> TeardownHcaOut {
        /// Opcode (TEARDOWN_HCA).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// One of `TEARDOWN_HCA_PROFILE_*`.
        profile: u16 = 0x08[15:0],
    }
}

prm_struct! {
    /// TEARDOWN_HCA output (`teardown_hca_out`).
    pub struct TeardownHcaOut("teardown_hca_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// For a force close: one of `TEARDOWN_HCA_OUT_FORCE_STATE_*`.
        state: u8 = 0x0c[0:0],
    }
}

prm_struct! {
    /// SET_DRIVER_VERSION input (`set_driver_version_in`), sent when the
    /// `driver_version` capability is set.
    pub struct SetDriverVersionIn("set_driver_version_in", 0x50): command SET_DRIVER_VERSION -> SetDriverVersionOut {
        /// Opcode (SET_DRIVER_VERSION).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Driver name and version, ASCII, NUL padded.
        driver_version: [u8; 64] = 0x10,
    }
}

impl SetDriverVersionIn {
    /// `driver_version` from a string: at most 63 bytes (one NUL at least
    /// stays), the rest zero.
    pub fn with_version_string(mut self, version: &str) -> Result<Self, crate::Error> {
        let b = version.as_bytes();
        if b.len() > 63 {
            return Err(crate::Error::BadLength {
                what: "set_driver_version_in.driver_version",
                len: b.len(),
                reason: "longer than 63 bytes",
            });
        }
        let mut v = [0u8; 64];
        v[..b.len()].copy_from_slice(b);
        self.set(Self::driver_version, v)?;
        Ok(self)
    }
}

prm_struct! {
    /// SET_DRIVER_VERSION output (`set_driver_version_out`).
    pub struct SetDriverVersionOut("set_driver_version_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_ADAPTER input (`query_adapter_in`).
    pub struct QueryAdapterIn("query_adapter_in", 0x10): command QUERY_ADAPTER -> QueryAdapterOut {
        /// Opcode (QUERY_ADAPTER).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// The adapter parameters QUERY_ADAPTER returns
    /// (`query_adapter_param_block`).
    pub struct QueryAdapterParamBlock("query_adapter_param_block", 0x100) {
        /// IEEE vendor id (OUI; 0x0002c9 for Mellanox).
        ieee_vendor_id: u32 = 0x18[23:0],
        /// Vendor of the vendor-specific data (PCI vendor id, 0x15b3).
        vsd_vendor_id: u16 = 0x1c[15:0],
        /// Vendor-specific data.
        vsd: [u8; 208] = 0x20,
        /// Continuation of `vsd`: the board's PSID, ASCII (e.g.
        /// `MT_2430110027`).
        vsd_contd_psid: [u8; 16] = 0xf0,
    }
}

prm_struct! {
    /// QUERY_ADAPTER output (`query_adapter_out`).
    pub struct QueryAdapterOut("query_adapter_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The adapter parameters.
        query_adapter_struct: QueryAdapterParamBlock = 0x10,
    }
}

prm_struct! {
    /// NOP input (`nop_in`): does nothing, checks the command interface.
    pub struct NopIn("nop_in", 0x10): command NOP -> NopOut {
        /// Opcode (NOP).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// NOP output (`nop_out`).
    pub struct NopOut("nop_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
