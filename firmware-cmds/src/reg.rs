//! Access registers: ACCESS_REG and the port registers PAOS (administrative
//! and operational status), PTYS (protocol types and speeds), PMTU (MTU),
//! plus the host endianness register Linux writes at bring-up.
//!
//! The register image follows the 16-byte command header, in the input
//! (for a write, and the register's index fields for a read) and in the
//! output (the register as the firmware holds it).

use crate::layout::{Layout, LayoutInfo};
use crate::prm_struct;

/// `access_register_in.op_mod`: write the register.
pub const ACCESS_REG_OP_MOD_WRITE: u16 = 0x0;
/// `access_register_in.op_mod`: read the register.
pub const ACCESS_REG_OP_MOD_READ: u16 = 0x1;

/// Register id `MLX5_REG_PCAP`: port capabilities.
pub const REG_PCAP: u16 = 0x5001;
/// Register id `MLX5_REG_PMLP`: port module to local port.
pub const REG_PMLP: u16 = 0x5002;
/// Register id `MLX5_REG_PMTU`: port MTU ([`PmtuReg`]).
pub const REG_PMTU: u16 = 0x5003;
/// Register id `MLX5_REG_PTYS`: port type and speed ([`PtysReg`]).
pub const REG_PTYS: u16 = 0x5004;
/// Register id `MLX5_REG_PAOS`: port administrative and operational status
/// ([`PaosReg`]).
pub const REG_PAOS: u16 = 0x5006;
/// Register id `MLX5_REG_PFCC`: port flow control.
pub const REG_PFCC: u16 = 0x5007;
/// Register id `MLX5_REG_PPCNT`: port counters.
pub const REG_PPCNT: u16 = 0x5008;
/// Register id `MLX5_REG_PUDE`: port up/down events.
pub const REG_PUDE: u16 = 0x5009;
/// Register id `MLX5_REG_PMPE`: port module plug events.
pub const REG_PMPE: u16 = 0x5010;
/// Register id `MLX5_REG_PMAOS`: port module status.
pub const REG_PMAOS: u16 = 0x5012;
/// Register id `MLX5_REG_PPLM`: port phy link mode.
pub const REG_PPLM: u16 = 0x5023;
/// Register id `MLX5_REG_PCAM`: port capabilities mask.
pub const REG_PCAM: u16 = 0x507f;
/// Register id `MLX5_REG_NODE_DESC`: node description.
pub const REG_NODE_DESC: u16 = 0x6001;
/// Register id `MLX5_REG_HOST_ENDIANNESS`: host byte order
/// ([`RegisterHostEndianness`]).
pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
/// Register id `MLX5_REG_MCIA`: module cable info access.
pub const REG_MCIA: u16 = 0x9014;
/// Register id `MLX5_REG_MCAM`: management capabilities mask.
pub const REG_MCAM: u16 = 0x907f;

/// `(register id, name)` of the registers above.
pub const REGISTERS: &[(u16, &str)] = &[
    (REG_PCAP, "PCAP"),
    (REG_PMLP, "PMLP"),
    (REG_PMTU, "PMTU"),
    (REG_PTYS, "PTYS"),
    (REG_PAOS, "PAOS"),
    (REG_PFCC, "PFCC"),
    (REG_PPCNT, "PPCNT"),
    (REG_PUDE, "PUDE"),
    (REG_PMPE, "PMPE"),
    (REG_PMAOS, "PMAOS"),
    (REG_PPLM, "PPLM"),
    (REG_PCAM, "PCAM"),
    (REG_NODE_DESC, "NODE_DESC"),
    (REG_HOST_ENDIANNESS, "HOST_ENDIANNESS"),
    (REG_MCIA, "MCIA"),
    (REG_MCAM, "MCAM"),
];

/// The name of register `id`.
pub fn register_name(id: u16) -> Option<&'static str> {
    REGISTERS.iter().find(|&&(r, _)| r == id).map(|&(_, n)| n)
}

/// The layout of register `id`, for the registers this crate declares.
pub fn register_layout(id: u16) -> Option<&'static LayoutInfo> {
    match id {
        REG_PAOS => Some(&<PaosReg as Layout>::INFO),
        REG_PTYS => Some(&<PtysReg as Layout>::INFO),
        REG_PMTU => Some(&<PmtuReg as Layout>::INFO),
        REG_HOST_ENDIANNESS => Some(&<RegisterHostEndianness as Layout>::INFO),
        _ => None,
    }
}

/// Byte offset of the register data in ACCESS_REG's input and output.
pub const REGISTER_DATA_OFFSET: usize = 0x10;

/// `paos_reg.admin_status` / `oper_status`: up.
pub const PORT_STATUS_UP: u8 = 1;
/// `paos_reg.admin_status` / `oper_status`: down.
pub const PORT_STATUS_DOWN: u8 = 2;
/// `paos_reg.admin_status`: up once (until the next link down).
pub const PORT_STATUS_UP_ONCE: u8 = 3;
/// `paos_reg.oper_status`: down by port failure.
pub const PORT_STATUS_DOWN_BY_FAILURE: u8 = 4;

/// `ptys_reg.proto_mask` bit: InfiniBand.
pub const PTYS_IB: u8 = 1 << 0;
/// `ptys_reg.proto_mask` bit: Ethernet.
pub const PTYS_EN: u8 = 1 << 2;

prm_struct! {
    /// ACCESS_REG input (`access_register_in`), followed by the register
    /// image (`register_data`).
    pub struct AccessRegisterIn("access_register_in", 0x10): command ACCESS_REG -> AccessRegisterOut {
        /// Opcode (ACCESS_REG).
        opcode: u16 = 0x00[31:16],
        /// `ACCESS_REG_OP_MOD_WRITE` or `ACCESS_REG_OP_MOD_READ`.
        op_mod: u16 = 0x04[15:0],
        /// Register id (`REG_*`).
        register_id: u16 = 0x08[15:0],
        /// Register-specific argument.
        argument: u32 = 0x0c[31:0],
        /// The register image, big-endian 32-bit words.
        register_data: [u32] = 0x10,
    }
}

prm_struct! {
    /// ACCESS_REG output (`access_register_out`), followed by the register
    /// image.
    pub struct AccessRegisterOut("access_register_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The register image.
        register_data: [u32] = 0x10,
    }
}

prm_struct! {
    /// Port administrative and operational status register (`paos_reg`).
    pub struct PaosReg("paos_reg", 0x10) {
        /// Switch partition id.
        swid: u8 = 0x00[31:24],
        /// Local port (1-based).
        local_port: u8 = 0x00[23:16],
        /// Administrative status (`PORT_STATUS_*`).
        admin_status: u8 = 0x00[11:8],
        /// Operational status (`PORT_STATUS_*`), read-only.
        oper_status: u8 = 0x00[3:0],
        /// Admin status update enable: apply `admin_status` on write.
        ase: bool = 0x04[31:31],
        /// Event update enable: apply `e` on write.
        ee: bool = 0x04[30:30],
        /// Event generation (0 none, 1 on change, 2 once).
        e: u8 = 0x04[1:0],
    }
}

prm_struct! {
    /// Port type and speed register (`ptys_reg`).
    pub struct PtysReg("ptys_reg", 0x40) {
        /// Disable autonegotiation (admin).
        an_disable_admin: bool = 0x00[30:30],
        /// Autonegotiation can be disabled.
        an_disable_cap: bool = 0x00[29:29],
        /// Local port (1-based).
        local_port: u8 = 0x00[23:16],
        /// Protocol (`PTYS_IB`, `PTYS_EN`).
        proto_mask: u8 = 0x00[2:0],
        /// Autonegotiation status.
        an_status: u8 = 0x04[31:28],
        /// Extended Ethernet speeds supported.
        ext_eth_proto_capability: u32 = 0x08[31:0],
        /// Ethernet speeds supported.
        eth_proto_capability: u32 = 0x0c[31:0],
        /// IB link widths supported.
        ib_link_width_capability: u16 = 0x10[31:16],
        /// IB speeds supported.
        ib_proto_capability: u16 = 0x10[15:0],
        /// Extended Ethernet speeds enabled.
        ext_eth_proto_admin: u32 = 0x14[31:0],
        /// Ethernet speeds enabled.
        eth_proto_admin: u32 = 0x18[31:0],
        /// IB link widths enabled.
        ib_link_width_admin: u16 = 0x1c[31:16],
        /// IB speeds enabled.
        ib_proto_admin: u16 = 0x1c[15:0],
        /// Extended Ethernet speed in operation.
        ext_eth_proto_oper: u32 = 0x20[31:0],
        /// Ethernet speed in operation.
        eth_proto_oper: u32 = 0x24[31:0],
        /// IB link width in operation.
        ib_link_width_oper: u16 = 0x28[31:16],
        /// IB speed in operation.
        ib_proto_oper: u16 = 0x28[15:0],
        /// Connector type.
        connector_type: u8 = 0x2c[3:0],
        /// Ethernet speeds the link partner advertises.
        eth_proto_lp_advertise: u32 = 0x30[31:0],
    }
}

prm_struct! {
    /// Port MTU register (`pmtu_reg`); MTUs in bytes.
    pub struct PmtuReg("pmtu_reg", 0x10) {
        /// Local port (1-based).
        local_port: u8 = 0x00[23:16],
        /// Largest MTU the port supports.
        max_mtu: u16 = 0x04[31:16],
        /// MTU set by software.
        admin_mtu: u16 = 0x08[31:16],
        /// MTU in operation.
        oper_mtu: u16 = 0x0c[31:16],
    }
}

prm_struct! {
    /// Host endianness register (`register_host_endianness`).
    pub struct RegisterHostEndianness("register_host_endianness", 0x10) {
        /// Host endianness: 0 little-endian, 1 big-endian (Linux writes 0 on
        /// little-endian hosts).
        he: bool = 0x00[31:31],
    }
}
