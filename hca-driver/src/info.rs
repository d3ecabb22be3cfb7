//! Device information as named, typed values: what `ibv_devinfo -v` shows
//! (firmware version, PCI ids, board id, GUIDs, ports) and the capability
//! blocks, readable as typed layouts or by PRM field name.

use core::fmt;

use firmware_cmds::Opcode;
use firmware_cmds::caps::{
    AtomicCaps, CAP_ATOMIC, CAP_ETHERNET_OFFLOADS, CAP_GENERAL, CAP_QOS, CAP_ROCE, CmdHcaCap,
    FlowTablePropLayout, HCA_CAP_OP_MOD_GET_CUR, PerProtocolNetworkingOffloadCaps, QosCap, RoceCap,
};
use firmware_cmds::init_seg::FwVersion;
use firmware_cmds::layout::{FieldReading, Layout};

use crate::error::{Error, Result};
use crate::events::MAX_PORTS;

/// PCI identity, from configuration space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PciIds {
    /// Vendor ID (0x15b3).
    pub vendor_id: u16,
    /// Device ID (`vendor_part_id` in libibverbs; 0x1013 = 4115 for a
    /// ConnectX-4).
    pub device_id: u16,
    /// Revision ID (`hw_ver`).
    pub revision: u8,
    /// Subsystem vendor ID.
    pub subsystem_vendor_id: u16,
    /// Subsystem ID.
    pub subsystem_id: u16,
}

impl PciIds {
    /// The product name of the device ID (`ConnectX-4`...).
    pub fn product(&self) -> Option<&'static str> {
        crate::pci::mlx5_device_name(self.device_id)
    }
}

/// What a port's link layer is (`cmd_hca_cap.port_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        })
    }
}

/// Logical port state, as libibverbs names it (`IBV_PORT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PortState {
    /// Not known yet.
    Nop = 0,
    /// `PORT_DOWN`.
    Down = 1,
    /// `PORT_INIT`.
    Init = 2,
    /// `PORT_ARMED`.
    Armed = 3,
    /// `PORT_ACTIVE`.
    Active = 4,
}

impl PortState {
    /// From the IB port state encoding (1 down .. 4 active); anything else
    /// is `Nop`.
    pub fn from_raw(v: u8) -> Self {
        match v {
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            _ => PortState::Nop,
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
        })
    }
}

/// An IB MTU (`IBV_MTU_*`), the path MTU unit of RC/UC/UD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IbMtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl IbMtu {
    /// Bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest IB MTU that fits `bytes`.
    pub fn fitting(bytes: u32) -> Option<Self> {
        [
            IbMtu::Mtu4096,
            IbMtu::Mtu2048,
            IbMtu::Mtu1024,
            IbMtu::Mtu512,
            IbMtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() <= bytes)
    }

    /// The IB MTU RoCE offers over an Ethernet MTU (`mtu` bytes of IP
    /// payload, as a netdev MTU): what fits after the GRH, UDP, BTH,
    /// extended transport headers and ICRC (Linux `iboe_get_mtu`).
    pub fn for_roce(eth_mtu: u32) -> Option<Self> {
        const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 4 + 28 + 4;
        IbMtu::fitting(eth_mtu.saturating_sub(ROCE_OVERHEAD))
    }
}

impl fmt::Display for IbMtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.bytes(), *self as u8)
    }
}

/// Bytes of Ethernet framing between the port MTU (PMTU, which counts the
/// L2 header, a VLAN tag and the FCS) and the IP MTU: 14 + 4 + 4.
pub const ETH_FRAMING: u16 = 22;

/// Ethernet protocols of the PTYS register (`eth_proto_*` bits, the
/// legacy protocol set: Linux's `enum mlx5e_link_mode`) and their speed in
/// Mb/s (Linux's `mlx5e_link_speed` table).
pub const ETH_PROTOCOLS: &[(u8, &str, u32)] = &[
    (0, "1000BASE-CX-SGMII", 1_000),
    (1, "1000BASE-KX", 1_000),
    (2, "10GBASE-CX4", 10_000),
    (3, "10GBASE-KX4", 10_000),
    (4, "10GBASE-KR", 10_000),
    (5, "20GBASE-KR2", 20_000),
    (6, "40GBASE-CR4", 40_000),
    (7, "40GBASE-KR4", 40_000),
    (8, "56GBASE-R4", 56_000),
    (12, "10GBASE-CR", 10_000),
    (13, "10GBASE-SR", 10_000),
    (14, "10GBASE-ER", 10_000),
    (15, "40GBASE-SR4", 40_000),
    (16, "40GBASE-LR4", 40_000),
    (18, "50GBASE-SR2", 50_000),
    (20, "100GBASE-CR4", 100_000),
    (21, "100GBASE-SR4", 100_000),
    (22, "100GBASE-KR4", 100_000),
    (23, "100GBASE-LR4", 100_000),
    (24, "100BASE-TX", 100),
    (25, "1000BASE-T", 1_000),
    (26, "10GBASE-T", 10_000),
    (27, "25GBASE-CR", 25_000),
    (28, "25GBASE-KR", 25_000),
    (29, "25GBASE-SR", 25_000),
    (30, "50GBASE-CR2", 50_000),
    (31, "50GBASE-KR2", 50_000),
];

/// The fastest protocol of an `eth_proto_*` bit mask: (name, Mb/s).
pub fn eth_speed(mask: u32) -> Option<(&'static str, u32)> {
    ETH_PROTOCOLS
        .iter()
        .filter(|(bit, _, _)| mask & (1 << bit) != 0)
        .max_by_key(|(_, _, s)| *s)
        .map(|&(_, n, s)| (n, s))
}

/// One port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The port (1-based).
    pub port: u8,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Logical state.
    pub state: PortState,
    /// Largest port MTU in bytes (PMTU `max_mtu`; Ethernet: L2 frame).
    pub max_mtu_bytes: u16,
    /// Operational port MTU in bytes (PMTU `oper_mtu`).
    pub oper_mtu_bytes: u16,
    /// Largest IB MTU (`max_mtu`).
    pub max_mtu: Option<IbMtu>,
    /// Active IB MTU (`active_mtu`).
    pub active_mtu: Option<IbMtu>,
    /// Operational protocol mask (PTYS `eth_proto_oper`, or
    /// `ib_proto_oper` for InfiniBand).
    pub proto_oper: u32,
    /// Speed in Mb/s, when the link is up.
    pub speed_mbps: Option<u32>,
    /// IB link width in operation (PTYS `ib_link_width_oper`; 0 on
    /// Ethernet).
    pub ib_link_width_oper: u16,
    /// LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// MAC address (Ethernet).
    pub mac: Option<[u8; 6]>,
    /// Port GUID.
    pub port_guid: u64,
    /// GID 0 of an InfiniBand port (QUERY_HCA_VPORT_GID). `None` on
    /// Ethernet: the RoCE address table is the driver's to program once
    /// RoCE is enabled ([`Context`](crate::verbs::Context) does), and like
    /// Linux the driver does not read it during bring-up.
    pub gid0: Option<[u8; 16]>,
}

/// A capability block, maximum and current.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapPair<C> {
    /// What the device supports (`HCA_CAP_OP_MOD_GET_MAX`).
    pub max: C,
    /// What is in effect (`HCA_CAP_OP_MOD_GET_CUR`).
    pub cur: C,
}

/// Which of a [`CapPair`] to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapMode {
    /// Maximum.
    Max,
    /// Current.
    Current,
}

/// The capability blocks the driver queried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// General (`cmd_hca_cap`, type 0).
    pub general: CapPair<CmdHcaCap>,
    /// Ethernet offloads (type 1), when `eth_net_offloads`.
    pub ethernet: Option<CapPair<PerProtocolNetworkingOffloadCaps>>,
    /// Atomics (type 3), when `atomic`.
    pub atomic: Option<CapPair<AtomicCaps>>,
    /// RoCE (type 4), when `roce`.
    pub roce: Option<CapPair<RoceCap>>,
    /// The NIC receive flow table properties
    /// (`flow_table_nic_cap.flow_table_properties_nic_receive`, type 7),
    /// when `nic_flow_table`.
    pub nic_receive_flow: Option<CapPair<FlowTablePropLayout>>,
    /// QoS (`qos_cap`, type 0xc: packet pacing), when `qos`.
    pub qos: Option<CapPair<QosCap>>,
}

fn pick<C>(p: &CapPair<C>, mode: CapMode) -> &C {
    match mode {
        CapMode::Max => &p.max,
        CapMode::Current => &p.cur,
    }
}

impl Caps {
    /// An integer or flag capability by PRM name (`log_max_qp`,
    /// `atomic_operations`, `roce_version`...), of capability type
    /// `cap_type` (`CAP_*` of [`firmware_cmds::caps`]). `None` for a type
    /// not queried or a field that is not an integer.
    pub fn get(&self, cap_type: u16, name: &str, mode: CapMode) -> Option<u64> {
        fn read<C: Layout>(c: &C, name: &str) -> Option<u64> {
            let f = C::INFO.field(name)?;
            match C::INFO.read(c.bytes(), f).ok()? {
                FieldReading::Uint(v) => Some(v),
                _ => None,
            }
        }
        match cap_type {
            CAP_GENERAL => read(pick(&self.general, mode), name),
            CAP_ETHERNET_OFFLOADS => read(pick(self.ethernet.as_ref()?, mode), name),
            CAP_ATOMIC => read(pick(self.atomic.as_ref()?, mode), name),
            CAP_ROCE => read(pick(self.roce.as_ref()?, mode), name),
            CAP_QOS => read(pick(self.qos.as_ref()?, mode), name),
            _ => None,
        }
    }

    /// The current general capabilities.
    pub fn general(&self) -> &CmdHcaCap {
        &self.general.cur
    }

    /// Link layer of the ports.
    pub fn link_layer(&self) -> LinkLayer {
        if self.general().get(CmdHcaCap::port_type) == firmware_cmds::caps::PORT_TYPE_ETH {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        }
    }

    /// Number of ports.
    pub fn num_ports(&self) -> u8 {
        self.general().get(CmdHcaCap::num_ports)
    }

    /// Entries of each port's P_Key table: [`MIN_PKEY_TABLE_SIZE`] `<<
    /// pkey_table_size` of the current general capabilities (what
    /// QUERY_HCA_VPORT_PKEY answers, `max_pkeys` and `pkey_tbl_len` in
    /// libibverbs). The one place the encoding is read.
    ///
    /// A `pkey_table_size` above [`MAX_LOG_PKEY_TABLE`] encodes no table
    /// (mlx5_core's `mlx5_to_sw_pkey_sz` makes it 0 entries): an
    /// [`Error::InvalidAnswer`] of QUERY_HCA_CAP naming
    /// `cmd_hca_cap.pkey_table_size` and the value. Bring-up refuses such
    /// a device, so the capabilities of an open [`Hca`](crate::Hca) never
    /// give it.
    pub fn pkey_table_len(&self) -> Result<u16> {
        let v = self.general().get(CmdHcaCap::pkey_table_size);
        if v > MAX_LOG_PKEY_TABLE {
            return Err(Error::InvalidAnswer {
                opcode: Opcode::QUERY_HCA_CAP,
                op_mod: (CAP_GENERAL << 1) | HCA_CAP_OP_MOD_GET_CUR,
                field: "cmd_hca_cap.pkey_table_size",
                value: u64::from(v),
                reason: "encodes 128 << 0..=5 P_Key table entries (MLX5_MAX_LOG_PKEY_TABLE 5)",
            });
        }
        Ok(MIN_PKEY_TABLE_SIZE << v)
    }
}

/// P_Key table entries that `pkey_table_size` 0 encodes
/// (`MLX5_MIN_PKEY_TABLE_SIZE`); `n` encodes `128 << n`.
pub const MIN_PKEY_TABLE_SIZE: u16 = 128;

/// The largest `pkey_table_size` (`MLX5_MAX_LOG_PKEY_TABLE`: 4096
/// entries).
pub const MAX_LOG_PKEY_TABLE: u16 = 5;

impl Default for Caps {
    fn default() -> Self {
        Self {
            general: CapPair {
                max: CmdHcaCap::new(),
                cur: CmdHcaCap::new(),
            },
            ethernet: None,
            atomic: None,
            roce: None,
            nic_receive_flow: None,
            qos: None,
        }
    }
}

/// Everything the driver learned about the device during bring-up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Firmware version (`fw_ver`).
    pub fw_version: Option<FwVersion>,
    /// Command interface revision (5).
    pub cmdif_rev: u16,
    /// PCI identity.
    pub pci: PciIds,
    /// The ISSI in effect.
    pub issi: u16,
    /// Board id / PSID (`vsd_contd_psid` of QUERY_ADAPTER), NUL padded.
    pub psid: [u8; 16],
    /// IEEE vendor id (`vendor_id` in libibverbs: 0x02c9).
    pub ieee_vendor_id: u32,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Capabilities.
    pub caps: Caps,
    /// Ports.
    pub ports: heapless::Vec<PortInfo, MAX_PORTS>,
}

impl DeviceInfo {
    /// The board id as text (`board_id`), up to the first NUL.
    pub fn board_id(&self) -> &str {
        let end = self.psid.iter().position(|&b| b == 0).unwrap_or(16);
        core::str::from_utf8(&self.psid[..end]).unwrap_or("")
    }
}

/// A GUID as libibverbs prints it: `7cfe:9003:00ab:cd00`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (g >> 48) as u16,
            (g >> 32) as u16,
            (g >> 16) as u16,
            g as u16
        )
    }
}

/// `ibv_devinfo -v`-style text.
impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.caps.general();
        if let Some(v) = self.fw_version {
            writeln!(f, "fw_ver:\t\t\t\t{v}")?;
        }
        writeln!(f, "node_guid:\t\t\t{}", Guid(self.node_guid))?;
        writeln!(f, "sys_image_guid:\t\t\t{}", Guid(self.sys_image_guid))?;
        writeln!(f, "vendor_id:\t\t\t{:#06x}", self.ieee_vendor_id)?;
        writeln!(f, "vendor_part_id:\t\t\t{}", self.pci.device_id)?;
        writeln!(f, "hw_ver:\t\t\t\t{:#x}", self.pci.revision)?;
        writeln!(f, "board_id:\t\t\t{}", self.board_id())?;
        writeln!(f, "phys_port_cnt:\t\t\t{}", self.caps.num_ports())?;
        writeln!(f, "max_qp:\t\t\t\t{}", 1u64 << g.get(CmdHcaCap::log_max_qp))?;
        writeln!(
            f,
            "max_qp_wr:\t\t\t{}",
            1u64 << g.get(CmdHcaCap::log_max_qp_sz)
        )?;
        writeln!(f, "max_cq:\t\t\t\t{}", 1u64 << g.get(CmdHcaCap::log_max_cq))?;
        writeln!(
            f,
            "max_cqe:\t\t\t{}",
            (1u64 << g.get(CmdHcaCap::log_max_cq_sz)) - 1
        )?;
        writeln!(
            f,
            "max_mr:\t\t\t\t{}",
            1u64 << g.get(CmdHcaCap::log_max_mkey)
        )?;
        writeln!(f, "max_pd:\t\t\t\t{}", 1u64 << g.get(CmdHcaCap::log_max_pd))?;
        writeln!(f, "max_srq:\t\t\t{}", 1u64 << g.get(CmdHcaCap::log_max_srq))?;
        match self.caps.pkey_table_len() {
            Ok(n) => writeln!(f, "max_pkeys:\t\t\t{n}")?,
            Err(_) => writeln!(
                f,
                "max_pkeys:\t\t\tinvalid (pkey_table_size {})",
                g.get(CmdHcaCap::pkey_table_size)
            )?,
        }
        for p in &self.ports {
            writeln!(f, "\tport:\t{}", p.port)?;
            writeln!(f, "\t\tstate:\t\t\t{} ({})", p.state, p.state as u8)?;
            if let Some(m) = p.max_mtu {
                writeln!(f, "\t\tmax_mtu:\t\t{m}")?;
            }
            if let Some(m) = p.active_mtu {
                writeln!(f, "\t\tactive_mtu:\t\t{m}")?;
            }
            writeln!(f, "\t\tport_lid:\t\t{}", p.lid)?;
            if let Some(s) = p.speed_mbps {
                writeln!(f, "\t\tspeed:\t\t\t{} Gb/s", s / 1000)?;
            }
            writeln!(f, "\t\tlink_layer:\t\t{}", p.link_layer)?;
            if let Some(gid0) = p.gid0 {
                write!(f, "\t\t\tGID[  0]:\t\t")?;
                for (i, pair) in gid0.chunks(2).enumerate() {
                    if i > 0 {
                        f.write_str(":")?;
                    }
                    write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn mtus_and_speeds() {
        assert_eq!(IbMtu::Mtu1024.bytes(), 1024);
        assert_eq!(IbMtu::for_roce(1500), Some(IbMtu::Mtu1024));
        assert_eq!(IbMtu::for_roce(9000 - 22 + 22), Some(IbMtu::Mtu4096));
        assert_eq!(IbMtu::for_roce(300), None);
        assert_eq!(eth_speed(1 << 20), Some(("100GBASE-CR4", 100_000)));
        assert_eq!(
            eth_speed((1 << 12) | (1 << 27)),
            Some(("25GBASE-CR", 25_000))
        );
        assert_eq!(eth_speed(0), None);
        assert_eq!(
            format!("{}", Guid(0x7cfe_9003_00ab_cd00)),
            "7cfe:9003:00ab:cd00"
        );
    }

    #[test]
    fn eth_protocol_speeds_are_linux_mlx5e_link_speed() {
        // (bit, Mb/s) of every entry of Linux's mlx5e_link_speed table.
        const LINUX: &[(u8, u32)] = &[
            (0, 1_000),
            (1, 1_000),
            (2, 10_000),
            (3, 10_000),
            (4, 10_000),
            (5, 20_000),
            (6, 40_000),
            (7, 40_000),
            (8, 56_000),
            (12, 10_000),
            (13, 10_000),
            (14, 10_000),
            (15, 40_000),
            (16, 40_000),
            (18, 50_000),
            (20, 100_000),
            (21, 100_000),
            (22, 100_000),
            (23, 100_000),
            (24, 100),
            (25, 1_000),
            (26, 10_000),
            (27, 25_000),
            (28, 25_000),
            (29, 25_000),
            (30, 50_000),
            (31, 50_000),
        ];
        let ours: std::vec::Vec<(u8, u32)> = ETH_PROTOCOLS.iter().map(|p| (p.0, p.2)).collect();
        assert_eq!(ours, LINUX);
        for &(bit, mbps) in LINUX {
            assert_eq!(eth_speed(1 << bit).map(|s| s.1), Some(mbps), "bit {bit}");
        }
        for bit in [9, 10, 11, 17, 19] {
            assert_eq!(eth_speed(1 << bit), None, "bit {bit} is unused");
        }
    }

    #[test]
    fn pkey_table_size_encodes_128_shl_n_up_to_5() {
        let mut c = Caps::default();
        for (v, n) in [
            (0, 128),
            (1, 256),
            (2, 512),
            (3, 1024),
            (4, 2048),
            (5, 4096),
        ] {
            c.general.cur.set(CmdHcaCap::pkey_table_size, v).unwrap();
            assert_eq!(c.pkey_table_len().unwrap(), n, "pkey_table_size {v}");
        }
        // Only the current capabilities count.
        c.general.max.set(CmdHcaCap::pkey_table_size, 9).unwrap();
        assert_eq!(c.pkey_table_len().unwrap(), 4096);
        // Beyond the encoding (6 would be 8192; 9 no longer fits a u16,
        // 16 and up wrapped to 0 before): an invalid answer naming the
        // field and the value.
        for v in [6u16, 9, 16, 0xffff] {
            c.general.cur.set(CmdHcaCap::pkey_table_size, v).unwrap();
            let e = c.pkey_table_len().unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidAnswer {
                        opcode: Opcode::QUERY_HCA_CAP,
                        op_mod: 1,
                        field: "cmd_hca_cap.pkey_table_size",
                        value,
                        ..
                    } if value == u64::from(v)
                ),
                "{e}"
            );
            assert!(
                format!("{e}").starts_with(&format!(
                    "QUERY_HCA_CAP(0x100) op_mod(0x1): invalid answer: cmd_hca_cap.pkey_table_size = {v:#x} ("
                )),
                "{e}"
            );
        }
        let mut info = DeviceInfo::default();
        info.caps
            .general
            .cur
            .set(CmdHcaCap::pkey_table_size, 6)
            .unwrap();
        assert!(format!("{info}").contains("max_pkeys:\t\t\tinvalid (pkey_table_size 6)"));
        info.caps
            .general
            .cur
            .set(CmdHcaCap::pkey_table_size, 2)
            .unwrap();
        assert!(format!("{info}").contains("max_pkeys:\t\t\t512\n"));
    }

    #[test]
    fn caps_by_prm_name() {
        let mut c = Caps::default();
        c.general.cur.set(CmdHcaCap::log_max_qp, 17).unwrap();
        c.general.max.set(CmdHcaCap::log_max_qp, 23).unwrap();
        assert_eq!(c.get(CAP_GENERAL, "log_max_qp", CapMode::Current), Some(17));
        assert_eq!(c.get(CAP_GENERAL, "log_max_qp", CapMode::Max), Some(23));
        assert_eq!(c.get(CAP_GENERAL, "no_such_field", CapMode::Max), None);
        assert_eq!(c.get(CAP_ATOMIC, "atomic_operations", CapMode::Max), None);
    }
}
