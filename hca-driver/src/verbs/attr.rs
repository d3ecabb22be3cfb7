//! Device and port attributes as libibverbs reports them
//! (`ibv_query_device`, `ibv_query_port`, `ibv_query_gid`,
//! `ibv_query_pkey`), computed from the capability blocks the way
//! Linux's `mlx5_ib_query_device` and `mlx5_query_port_roce` do.

use core::fmt;

use firmware_cmds::caps::{
    ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD, ATOMIC_REQ_8B_ENDIANNESS_MODE_HOST_ENDIANNESS,
    AtomicCaps, CmdHcaCap, PerProtocolNetworkingOffloadCaps, RoceCap,
};
use firmware_cmds::init_seg::FwVersion;

use crate::info::{DeviceInfo, IbMtu, LinkLayer, PortInfo, PortState};
use crate::pacing::PacketPacingCaps;

/// Bytes of a data segment (`struct mlx5_wqe_data_seg`).
const DATA_SEG: u32 = 16;
/// Control + remote address segment: the fixed part of an RDMA send WQE.
const CTRL_RADDR: u32 = 32;
/// The send WQE size Linux bases `max_send_sge` on (`min(max_wqe_sz_sq,
/// 512)`).
const MAX_SQ_DESC: u32 = 512;
/// `atomic_size_qp` bit of 8-byte atomics.
const ATOMIC_SIZE_QP_8BYTES: u16 = 1 << 3;

/// `atomic_cap` from the atomic capabilities exactly as Linux mlx5_ib's
/// `get_atomic_caps` computes it: `IBV_ATOMIC_HCA` when the device does both
/// CMP_AND_SWAP and FETCH_AND_ADD, on 8 bytes, with a non-zero
/// `atomic_req_8B_endianness_mode` (host byte order); `IBV_ATOMIC_NONE`
/// otherwise (whatever the host's byte order).
pub fn linux_atomic_cap(
    atomic_operations: u16,
    atomic_size_qp: u16,
    endianness_mode: u8,
) -> AtomicCap {
    let both = ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD;
    if atomic_operations & both == both
        && atomic_size_qp & ATOMIC_SIZE_QP_8BYTES != 0
        && endianness_mode != 0
    {
        AtomicCap::Hca
    } else {
        AtomicCap::None
    }
}

/// `enum ibv_atomic_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`: no atomics with the IB semantics. A ConnectX in
    /// big-endian atomic mode still executes them, on big-endian values
    /// (see [`DeviceAttr::atomic_byte_order`]).
    None,
    /// `IBV_ATOMIC_HCA`: atomic among the QPs of this HCA.
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic with every access (never on mlx5).
    Glob,
}

/// In which byte order 8-byte atomics read and write memory
/// (`atomic_req_8B_endianness_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicByteOrder {
    /// Mode 0: the remote 8 bytes and the value returned to the requester
    /// are big-endian.
    BigEndian,
    /// Mode 1: host byte order (what libibverbs users expect).
    Host,
}

impl AtomicByteOrder {
    /// The value of 8 bytes an atomic operation wrote or returned.
    pub fn decode(self, b: [u8; 8]) -> u64 {
        match self {
            AtomicByteOrder::BigEndian => u64::from_be_bytes(b),
            AtomicByteOrder::Host => u64::from_ne_bytes(b),
        }
    }

    /// The 8 bytes an atomic target holds for `v`.
    pub fn encode(self, v: u64) -> [u8; 8] {
        match self {
            AtomicByteOrder::BigEndian => v.to_be_bytes(),
            AtomicByteOrder::Host => v.to_ne_bytes(),
        }
    }
}

/// `struct ibv_device_attr`: what the capabilities allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version (`fw_ver`).
    pub fw_ver: Option<FwVersion>,
    /// Node GUID (`node_guid`).
    pub node_guid: u64,
    /// System image GUID (`sys_image_guid`).
    pub sys_image_guid: u64,
    /// Largest memory region (`max_mr_size`): unlimited (`~0`).
    pub max_mr_size: u64,
    /// Supported page sizes (`page_size_cap`): every multiple of
    /// `2^log_pg_sz`.
    pub page_size_cap: u64,
    /// IEEE vendor id (`vendor_id`, 0x02c9).
    pub vendor_id: u32,
    /// PCI device id (`vendor_part_id`, 4115 for a ConnectX-4).
    pub vendor_part_id: u32,
    /// PCI revision (`hw_ver`).
    pub hw_ver: u32,
    /// `1 << log_max_qp`.
    pub max_qp: u32,
    /// `1 << log_max_qp_sz`.
    pub max_qp_wr: u32,
    /// `min(max_send_sge, max_recv_sge)`.
    pub max_sge: u32,
    /// SGEs of a send WQE: `(min(max_wqe_sz_sq, 512) - 32) / 16`.
    pub max_send_sge: u32,
    /// SGEs of a receive WQE: `max_wqe_sz_rq / 16`.
    pub max_recv_sge: u32,
    /// SGEs of an RDMA READ (`max_sge_rd`).
    pub max_sge_rd: u32,
    /// `1 << log_max_cq`.
    pub max_cq: u32,
    /// `(1 << log_max_cq_sz) - 1`.
    pub max_cqe: u32,
    /// `1 << log_max_mkey`.
    pub max_mr: u32,
    /// `1 << log_max_pd`.
    pub max_pd: u32,
    /// Incoming RDMA READ / atomic requests per QP
    /// (`1 << log_max_ra_res_qp`).
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READ / atomic requests a QP initiates
    /// (`1 << log_max_ra_req_qp`).
    pub max_qp_init_rd_atom: u32,
    /// `max_qp_rd_atom * max_qp`.
    pub max_res_rd_atom: u64,
    /// Atomic capability.
    pub atomic_cap: AtomicCap,
    /// The device executes 8-byte compare-and-swap and fetch-and-add on
    /// QPs (whatever [`atomic_cap`](Self::atomic_cap) says).
    pub atomic_ops: bool,
    /// Byte order of 8-byte atomics.
    pub atomic_byte_order: AtomicByteOrder,
    /// `1 << log_max_srq`.
    pub max_srq: u32,
    /// `(1 << log_max_srq_sz) - 1`.
    pub max_srq_wr: u32,
    /// `max_recv_sge - 1` (the next segment takes one).
    pub max_srq_sge: u32,
    /// P_Key table entries (`128 << pkey_table_size`,
    /// [`Caps::pkey_table_len`](crate::Caps::pkey_table_len); 0 for a
    /// value beyond the encoding, which bring-up refuses).
    pub max_pkeys: u16,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// Physical ports (`phys_port_cnt`).
    pub phys_port_cnt: u8,
    /// Largest message (`1 << log_max_msg`).
    pub max_msg_sz: u64,
    /// CQEs carry the QP's user index (`cqe_version` 1).
    pub cqe_version: u8,
    /// The `ibv_device_cap_flags` (and `device_cap_flags_ex`) bits of raw
    /// Ethernet and flow steering, as Linux mlx5_ib's
    /// `mlx5_ib_query_device` derives them: [`DEVICE_RAW_IP_CSUM`],
    /// [`DEVICE_MANAGED_FLOW_STEERING`], [`DEVICE_RAW_SCATTER_FCS`]. (The
    /// other bits are not derived here: 0.)
    pub device_cap_flags: u64,
    /// `ibv_raw_packet_caps` ([`RAW_PACKET_CAP_CVLAN_STRIPPING`],
    /// [`RAW_PACKET_CAP_SCATTER_FCS`], [`RAW_PACKET_CAP_IP_CSUM`],
    /// [`RAW_PACKET_CAP_DELAY_DROP`]); 0 on an InfiniBand device or one
    /// without Ethernet offloads.
    pub raw_packet_caps: u32,
    /// Packet pacing of raw packet QPs (`packet_pacing_caps`:
    /// `qp_rate_limit_min`/`max` are the rates' range, kbit/s); `None`
    /// when the device does not pace or is not Ethernet (mlx5_ib reports
    /// it for raw packet QPs only).
    pub packet_pacing: Option<PacketPacingCaps>,
}

/// `IBV_DEVICE_RAW_IP_CSUM`: raw packet QPs offload IP/TCP/UDP checksums
/// (`csum_cap`).
pub const DEVICE_RAW_IP_CSUM: u64 = 1 << 26;
/// `IBV_DEVICE_MANAGED_FLOW_STEERING`: flow rules (`ibv_create_flow`) on
/// raw packet QPs (NIC RX flow tables, `nic_flow_table`).
pub const DEVICE_MANAGED_FLOW_STEERING: u64 = 1 << 29;
/// `IBV_DEVICE_RAW_SCATTER_FCS` (a `device_cap_flags_ex` bit): raw packet
/// QPs can keep the FCS (`scatter_fcs`).
pub const DEVICE_RAW_SCATTER_FCS: u64 = 1 << 34;
/// `IBV_RAW_PACKET_CAP_CVLAN_STRIPPING` (`vlan_cap`).
pub const RAW_PACKET_CAP_CVLAN_STRIPPING: u32 = 1 << 0;
/// `IBV_RAW_PACKET_CAP_SCATTER_FCS` (`scatter_fcs`).
pub const RAW_PACKET_CAP_SCATTER_FCS: u32 = 1 << 1;
/// `IBV_RAW_PACKET_CAP_IP_CSUM` (`csum_cap`).
pub const RAW_PACKET_CAP_IP_CSUM: u32 = 1 << 2;
/// `IBV_RAW_PACKET_CAP_DELAY_DROP` (`rq_delay_drop` and
/// `general_notification_event`).
pub const RAW_PACKET_CAP_DELAY_DROP: u32 = 1 << 3;

impl DeviceAttr {
    /// Whether every bit of `flags` (`DEVICE_*`) is in
    /// [`device_cap_flags`](Self::device_cap_flags) (InfinibandVerbs.jl's
    /// `hascapability` for `ibv_device_cap_flags`).
    pub fn has_device_cap(&self, flags: u64) -> bool {
        self.device_cap_flags & flags == flags
    }

    /// Whether every bit of `caps` (`RAW_PACKET_CAP_*`) is in
    /// [`raw_packet_caps`](Self::raw_packet_caps).
    pub fn has_raw_packet_cap(&self, caps: u32) -> bool {
        self.raw_packet_caps & caps == caps
    }
}

/// The raw Ethernet bits of [`DeviceAttr`]: `(device_cap_flags,
/// raw_packet_caps)` from the general and Ethernet offload capabilities
/// of an Ethernet device (mlx5_ib `mlx5_ib_query_device`).
fn raw_caps(info: &DeviceInfo) -> (u64, u32) {
    let g = info.caps.general();
    if info.caps.link_layer() != LinkLayer::Ethernet {
        return (0, 0);
    }
    let mut flags = 0;
    let mut raw = 0;
    if g.get(CmdHcaCap::nic_flow_table) {
        flags |= DEVICE_MANAGED_FLOW_STEERING;
    }
    if let (true, Some(e)) = (g.get(CmdHcaCap::eth_net_offloads), &info.caps.ethernet) {
        let e = &e.cur;
        if e.get(PerProtocolNetworkingOffloadCaps::csum_cap) {
            flags |= DEVICE_RAW_IP_CSUM;
            raw |= RAW_PACKET_CAP_IP_CSUM;
        }
        if e.get(PerProtocolNetworkingOffloadCaps::vlan_cap) {
            raw |= RAW_PACKET_CAP_CVLAN_STRIPPING;
        }
        if e.get(PerProtocolNetworkingOffloadCaps::scatter_fcs) {
            flags |= DEVICE_RAW_SCATTER_FCS;
            raw |= RAW_PACKET_CAP_SCATTER_FCS;
        }
    }
    if g.get(CmdHcaCap::rq_delay_drop) && g.get(CmdHcaCap::general_notification_event) {
        raw |= RAW_PACKET_CAP_DELAY_DROP;
    }
    (flags, raw)
}

fn pow2(log: u8) -> u32 {
    1u32.checked_shl(u32::from(log)).unwrap_or(u32::MAX)
}

impl DeviceAttr {
    /// The attributes of a device from what bring-up learned.
    pub fn from_info(info: &DeviceInfo) -> Self {
        let g = info.caps.general();
        let max_recv_sge = u32::from(g.get(CmdHcaCap::max_wqe_sz_rq)) / DATA_SEG;
        let sq_desc = u32::from(g.get(CmdHcaCap::max_wqe_sz_sq)).min(MAX_SQ_DESC);
        let max_send_sge = sq_desc.saturating_sub(CTRL_RADDR) / DATA_SEG;
        let max_qp = pow2(g.get(CmdHcaCap::log_max_qp));
        let max_qp_rd_atom = pow2(g.get(CmdHcaCap::log_max_ra_res_qp));
        let (atomic_ops, atomic_byte_order) = match (&info.caps.atomic, g.get(CmdHcaCap::atomic)) {
            (Some(a), true) => {
                let ops = a.cur.get(AtomicCaps::atomic_operations);
                let both = ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD;
                let eight = a.cur.get(AtomicCaps::atomic_size_qp) & ATOMIC_SIZE_QP_8BYTES != 0;
                let host = a.cur.get(AtomicCaps::atomic_req_8B_endianness_mode)
                    == ATOMIC_REQ_8B_ENDIANNESS_MODE_HOST_ENDIANNESS;
                (
                    ops & both == both && eight,
                    if host || cfg!(target_endian = "big") {
                        AtomicByteOrder::Host
                    } else {
                        AtomicByteOrder::BigEndian
                    },
                )
            }
            _ => (false, AtomicByteOrder::BigEndian),
        };
        let atomic_cap = match (&info.caps.atomic, g.get(CmdHcaCap::atomic)) {
            (Some(a), true) => linux_atomic_cap(
                a.cur.get(AtomicCaps::atomic_operations),
                a.cur.get(AtomicCaps::atomic_size_qp),
                a.cur.get(AtomicCaps::atomic_req_8B_endianness_mode),
            ),
            _ => AtomicCap::None,
        };
        let raw = raw_caps(info);
        DeviceAttr {
            fw_ver: info.fw_version,
            node_guid: info.node_guid,
            sys_image_guid: info.sys_image_guid,
            max_mr_size: u64::MAX,
            page_size_cap: !((1u64 << g.get(CmdHcaCap::log_pg_sz).min(63)) - 1),
            vendor_id: info.ieee_vendor_id,
            vendor_part_id: u32::from(info.pci.device_id),
            hw_ver: u32::from(info.pci.revision),
            max_qp,
            max_qp_wr: pow2(g.get(CmdHcaCap::log_max_qp_sz)),
            max_sge: max_send_sge.min(max_recv_sge),
            max_send_sge,
            max_recv_sge,
            max_sge_rd: (MAX_SQ_DESC - CTRL_RADDR) / DATA_SEG,
            max_cq: pow2(g.get(CmdHcaCap::log_max_cq)),
            max_cqe: pow2(g.get(CmdHcaCap::log_max_cq_sz)).saturating_sub(1),
            max_mr: pow2(g.get(CmdHcaCap::log_max_mkey)),
            max_pd: pow2(g.get(CmdHcaCap::log_max_pd)),
            max_qp_rd_atom,
            max_qp_init_rd_atom: pow2(g.get(CmdHcaCap::log_max_ra_req_qp)),
            max_res_rd_atom: u64::from(max_qp_rd_atom) * u64::from(max_qp),
            atomic_cap,
            atomic_ops,
            atomic_byte_order,
            max_srq: pow2(g.get(CmdHcaCap::log_max_srq)),
            max_srq_wr: pow2(g.get(CmdHcaCap::log_max_srq_sz)).saturating_sub(1),
            max_srq_sge: max_recv_sge.saturating_sub(1),
            max_pkeys: pkey_table_len(info),
            local_ca_ack_delay: g.get(CmdHcaCap::local_ca_ack_delay),
            phys_port_cnt: g.get(CmdHcaCap::num_ports),
            max_msg_sz: 1u64 << g.get(CmdHcaCap::log_max_msg).min(63),
            cqe_version: g.get(CmdHcaCap::cqe_version),
            device_cap_flags: raw.0,
            raw_packet_caps: raw.1,
            packet_pacing: if info.caps.link_layer() == LinkLayer::Ethernet {
                PacketPacingCaps::from_caps(&info.caps)
            } else {
                None
            },
        }
    }
}

/// P_Key table entries ([`Caps::pkey_table_len`](crate::Caps::pkey_table_len));
/// 0 for a `pkey_table_size` beyond the encoding, which bring-up refuses
/// (mlx5_ib reports 0 then).
fn pkey_table_len(info: &DeviceInfo) -> u16 {
    info.caps.pkey_table_len().unwrap_or(0)
}

/// `enum ibv_width` codes (`active_width`).
pub mod width {
    /// `IBV_WIDTH_1X`.
    pub const X1: u8 = 1;
    /// `IBV_WIDTH_2X`.
    pub const X2: u8 = 16;
    /// `IBV_WIDTH_4X`.
    pub const X4: u8 = 2;
    /// `IBV_WIDTH_8X`.
    pub const X8: u8 = 4;
    /// `IBV_WIDTH_12X`.
    pub const X12: u8 = 8;
}

/// `enum ibv_speed` codes (`active_speed`).
pub mod speed {
    /// `IBV_SPEED_SDR` (2.5 Gb/s per lane).
    pub const SDR: u8 = 1;
    /// `IBV_SPEED_DDR` (5 Gb/s).
    pub const DDR: u8 = 2;
    /// `IBV_SPEED_QDR` (10 Gb/s).
    pub const QDR: u8 = 4;
    /// `IBV_SPEED_FDR10`.
    pub const FDR10: u8 = 8;
    /// `IBV_SPEED_FDR` (14 Gb/s).
    pub const FDR: u8 = 16;
    /// `IBV_SPEED_EDR` (25 Gb/s).
    pub const EDR: u8 = 32;
    /// `IBV_SPEED_HDR` (50 Gb/s).
    pub const HDR: u8 = 64;
}

/// The IB width and speed libibverbs reports for an Ethernet protocol bit
/// (`eth_proto_oper`), as Linux's `translate_eth_legacy_proto_oper` maps
/// them: 100BASE-TX and the 1G protocols 1X SDR; the 10G protocols
/// (10GBASE-T, -CX4, -KX4, -KR, -CR, -SR, -ER) 1X QDR; 25G 1X EDR; 40G 4X
/// QDR; 50G (-CR2, -KR2, -SR2) 1X HDR; 56GBASE-R4 4X FDR; 100G 4X EDR.
/// `None` for bits Linux has no entry for (20GBASE-KR2, the unused bits).
pub fn eth_width_speed(proto_bit: u8) -> Option<(u8, u8)> {
    Some(match proto_bit {
        0 | 1 | 24 | 25 => (width::X1, speed::SDR),
        2 | 3 | 4 | 12 | 13 | 14 | 26 => (width::X1, speed::QDR),
        27..=29 => (width::X1, speed::EDR),
        6 | 7 | 15 | 16 => (width::X4, speed::QDR),
        18 | 30 | 31 => (width::X1, speed::HDR),
        8 => (width::X4, speed::FDR),
        20..=23 => (width::X4, speed::EDR),
        _ => return None,
    })
}

/// What an Ethernet port with operational protocols `eth_proto_oper`
/// reports, as Linux's `mlx5_query_port_roce`: the width and speed of the
/// protocol when exactly one known protocol bit is set
/// ([`eth_width_speed`]), otherwise Linux's defaults, 4X QDR.
pub fn eth_oper_width_speed(eth_proto_oper: u32) -> (u8, u8) {
    if eth_proto_oper.count_ones() == 1 {
        if let Some(ws) = eth_width_speed(eth_proto_oper.trailing_zeros() as u8) {
            return ws;
        }
    }
    (width::X4, speed::QDR)
}

/// The `enum ibv_width` code of a PTYS `ib_link_width_oper` mask, as Linux's
/// `translate_active_width`: the narrowest width set (bit 0 1X, bit 1 2X,
/// bit 2 4X, bit 3 8X, bit 4 12X), 4X when none is.
pub fn ib_width_from_ptys(ib_link_width_oper: u16) -> u8 {
    const WIDTHS: [u8; 5] = [width::X1, width::X2, width::X4, width::X8, width::X12];
    WIDTHS
        .iter()
        .enumerate()
        .find(|&(bit, _)| ib_link_width_oper & (1 << bit) != 0)
        .map_or(width::X4, |(_, &w)| w)
}

/// `struct ibv_port_attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// The port (1-based).
    pub port_num: u8,
    /// Logical state.
    pub state: PortState,
    /// Largest MTU.
    pub max_mtu: Option<IbMtu>,
    /// Active MTU (the path MTU to use).
    pub active_mtu: Option<IbMtu>,
    /// GID table entries (`gid_tbl_len`).
    pub gid_tbl_len: u32,
    /// P_Key table entries (`pkey_tbl_len`): 1 on Ethernet, else as
    /// [`DeviceAttr::max_pkeys`].
    pub pkey_tbl_len: u16,
    /// Largest message (`max_msg_sz`).
    pub max_msg_sz: u64,
    /// LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// `enum ibv_width` code ([`width`]): from PTYS as Linux's `mlx5_ib`
    /// reports it ([`eth_oper_width_speed`], [`ib_width_from_ptys`]); 0
    /// while an Ethernet port is down.
    pub active_width: u8,
    /// `enum ibv_speed` code ([`speed`]), likewise; 0 while an Ethernet port
    /// is down.
    pub active_speed: u8,
    /// Speed in Mb/s when the link is up.
    pub speed_mbps: Option<u32>,
    /// The port's MAC address (Ethernet, when known).
    pub mac: Option<[u8; 6]>,
}

impl PortAttr {
    /// The attributes of one port from its [`PortInfo`] and the
    /// capabilities.
    pub fn from_port(info: &DeviceInfo, p: &PortInfo) -> Self {
        let g = info.caps.general();
        let (gid_tbl_len, pkey_tbl_len) = match p.link_layer {
            LinkLayer::Ethernet => (
                info.caps.roce.as_ref().map_or(0, |r| {
                    u32::from(r.cur.get(RoceCap::roce_address_table_size))
                }),
                1,
            ),
            // `gid_table_size` encodes 8 << n entries.
            LinkLayer::InfiniBand => (
                8u32.checked_shl(u32::from(g.get(CmdHcaCap::gid_table_size)))
                    .unwrap_or(0),
                pkey_table_len(info),
            ),
        };
        let (active_width, active_speed) = match (p.link_layer, p.state) {
            (LinkLayer::Ethernet, PortState::Active) => eth_oper_width_speed(p.proto_oper),
            // PTYS `ib_proto_oper` bits are the `enum ibv_speed` codes
            // (SDR 1 .. NDR 0x80); the width mask needs translating.
            (LinkLayer::InfiniBand, _) => {
                (ib_width_from_ptys(p.ib_link_width_oper), p.proto_oper as u8)
            }
            _ => (0, 0),
        };
        PortAttr {
            port_num: p.port,
            state: p.state,
            max_mtu: p.max_mtu,
            active_mtu: p.active_mtu,
            gid_tbl_len,
            pkey_tbl_len,
            max_msg_sz: 1u64 << g.get(CmdHcaCap::log_max_msg).min(63),
            lid: p.lid,
            link_layer: p.link_layer,
            active_width,
            active_speed,
            speed_mbps: p.speed_mbps,
            mac: p.mac,
        }
    }
}

/// A GID (`union ibv_gid`), printed like `ibv_devinfo`:
/// `fe80:0000:0000:0000:7efe:90ff:fe12:3401`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The link-local GID of a MAC address (`fe80::/64` with the modified
    /// EUI-64 interface id: `ff:fe` in the middle, the universal/local bit
    /// flipped), as RoCE's default GID.
    pub fn link_local_from_mac(mac: [u8; 6]) -> Self {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8] = mac[0] ^ 0x02;
        g[9] = mac[1];
        g[10] = mac[2];
        g[11] = 0xff;
        g[12] = 0xfe;
        g[13] = mac[3];
        g[14] = mac[4];
        g[15] = mac[5];
        Gid(g)
    }

    /// An IPv4-mapped GID (`::ffff:a.b.c.d`), the RoCE v2 GID of an IPv4
    /// address.
    pub fn from_ipv4(ip: [u8; 4]) -> Self {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        Gid(g)
    }

    /// Whether the GID is all zero (an empty table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The MAC address a link-local (EUI-64) or multicast GID maps to
    /// (Linux `rdma_get_ll_mac` / `ipv6_eth_mc_map`); `None` when it takes
    /// neighbour resolution (IPv4-mapped and routable GIDs).
    pub fn mac(&self) -> Option<[u8; 6]> {
        let g = &self.0;
        if g[0] == 0xff {
            return Some([0x33, 0x33, g[12], g[13], g[14], g[15]]);
        }
        let link_local = g[0] == 0xfe && g[1] & 0xc0 == 0x80 && g[2..8] == [0; 6];
        if link_local && g[11] == 0xff && g[12] == 0xfe {
            return Some([g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]]);
        }
        None
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The RoCE version of a GID table entry (`roce_addr_layout.roce_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoceVersion {
    /// RoCE v1 (`ROCE_VERSION_V1`): Ethernet type 0x8915.
    V1,
    /// RoCE v2 (`ROCE_VERSION_V2`): UDP port 4791.
    V2,
}

/// One entry of an Ethernet port's RoCE address (GID) table
/// (`roce_addr_layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID (`source_l3_address`).
    pub gid: Gid,
    /// Source MAC of packets sent with it.
    pub mac: [u8; 6],
    /// VLAN id, when tagged.
    pub vlan: Option<u16>,
    /// RoCE version.
    pub version: RoceVersion,
    /// IPv6 (`true`, `ROCE_L3_TYPE_IPV6`) or IPv4 (`false`) for RoCE v2.
    pub ipv6: bool,
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn max_pkeys_and_pkey_tbl_len_are_one_formula() {
        let mut info = DeviceInfo::default();
        let mut port = PortInfo {
            port: 1,
            link_layer: LinkLayer::InfiniBand,
            state: PortState::Active,
            max_mtu_bytes: 4096,
            oper_mtu_bytes: 4096,
            max_mtu: None,
            active_mtu: None,
            proto_oper: 0,
            speed_mbps: None,
            ib_link_width_oper: 0,
            lid: 1,
            mac: None,
            port_guid: 0,
            gid0: None,
        };
        let both = |info: &DeviceInfo, port: &PortInfo| {
            (
                DeviceAttr::from_info(info).max_pkeys,
                PortAttr::from_port(info, port).pkey_tbl_len,
            )
        };
        for (v, n) in [(0, 128), (3, 1024), (5, 4096)] {
            info.caps
                .general
                .cur
                .set(CmdHcaCap::pkey_table_size, v)
                .unwrap();
            assert_eq!(both(&info, &port), (n, n));
            assert_eq!(info.caps.pkey_table_len().unwrap(), n);
        }
        // Beyond the encoding (refused at bring-up): no table, the same in
        // both, never a wrapped or saturated count.
        for v in [6, 16, 0xffff] {
            info.caps
                .general
                .cur
                .set(CmdHcaCap::pkey_table_size, v)
                .unwrap();
            assert!(info.caps.pkey_table_len().is_err());
            assert_eq!(both(&info, &port), (0, 0), "pkey_table_size {v}");
        }
        // An Ethernet port has the one default P_Key.
        port.link_layer = LinkLayer::Ethernet;
        assert_eq!(both(&info, &port).1, 1);
    }

    #[test]
    fn link_local_gids_round_trip_their_mac() {
        let mac = [0x7c, 0xfe, 0x90, 0x12, 0x34, 0x01];
        let g = Gid::link_local_from_mac(mac);
        assert_eq!(format!("{g}"), "fe80:0000:0000:0000:7efe:90ff:fe12:3401");
        assert_eq!(g.mac(), Some(mac));
        assert_eq!(Gid::from_ipv4([10, 0, 0, 1]).mac(), None);
        let mut mc = [0u8; 16];
        mc[0] = 0xff;
        mc[12..].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(Gid(mc).mac(), Some([0x33, 0x33, 1, 2, 3, 4]));
        assert!(Gid::default().is_zero());
    }

    #[test]
    fn ethernet_speeds_as_ib_width_and_speed() {
        // Every bit against Linux's translate_eth_legacy_proto_oper (bit
        // numbers of enum mlx5e_link_mode).
        let x1 = |s| Some((width::X1, s));
        let x4 = |s| Some((width::X4, s));
        let want = |bit: u8| match bit {
            0 => x1(speed::SDR),       // 1000BASE-CX-SGMII
            1 => x1(speed::SDR),       // 1000BASE-KX
            2 => x1(speed::QDR),       // 10GBASE-CX4
            3 => x1(speed::QDR),       // 10GBASE-KX4
            4 => x1(speed::QDR),       // 10GBASE-KR
            6 | 7 => x4(speed::QDR),   // 40GBASE-CR4, -KR4
            8 => x4(speed::FDR),       // 56GBASE-R4
            12..=14 => x1(speed::QDR), // 10GBASE-CR, -SR, -ER
            15 | 16 => x4(speed::QDR), // 40GBASE-SR4, -LR4
            18 => x1(speed::HDR),      // 50GBASE-SR2
            20..=23 => x4(speed::EDR), // 100GBASE-CR4, -SR4, -KR4, -LR4
            24 | 25 => x1(speed::SDR), // 100BASE-TX, 1000BASE-T
            26 => x1(speed::QDR),      // 10GBASE-T
            27..=29 => x1(speed::EDR), // 25GBASE-CR, -KR, -SR
            30 | 31 => x1(speed::HDR), // 50GBASE-CR2, -KR2
            _ => None,                 // 20GBASE-KR2 (5) and unused bits
        };
        for bit in 0..32u8 {
            assert_eq!(eth_width_speed(bit), want(bit), "bit {bit}");
        }
        // Every bit Linux knows has a speed in ETH_PROTOCOLS.
        for bit in (0..32u8).filter(|&b| want(b).is_some()) {
            assert!(
                crate::info::ETH_PROTOCOLS.iter().any(|p| p.0 == bit),
                "bit {bit}"
            );
        }
        // What a port reports: one known bit -> its entry; none, an unknown
        // one or several -> Linux's defaults 4X QDR.
        assert_eq!(eth_oper_width_speed(1 << 20), (width::X4, speed::EDR));
        assert_eq!(eth_oper_width_speed(1 << 30), (width::X1, speed::HDR));
        assert_eq!(eth_oper_width_speed(1 << 2), (width::X1, speed::QDR));
        for mask in [0, 1 << 5, 1 << 11, (1 << 20) | (1 << 27)] {
            assert_eq!(eth_oper_width_speed(mask), (width::X4, speed::QDR));
        }
    }

    #[test]
    fn infiniband_ptys_widths_as_ibv_width() {
        // PTYS width bits (MLX5_PTYS_WIDTH_*) -> enum ibv_width codes.
        assert_eq!(ib_width_from_ptys(1 << 0), width::X1);
        assert_eq!(ib_width_from_ptys(1 << 1), width::X2);
        assert_eq!(ib_width_from_ptys(1 << 2), width::X4);
        assert_eq!(ib_width_from_ptys(1 << 3), width::X8);
        assert_eq!(ib_width_from_ptys(1 << 4), width::X12);
        // The narrowest set bit wins; none: 4X (Linux's default).
        assert_eq!(ib_width_from_ptys(0b10100), width::X4);
        assert_eq!(ib_width_from_ptys(0), width::X4);
        assert_eq!(ib_width_from_ptys(1 << 9), width::X4);
        // The codes themselves (enum ibv_width): 1X 1, 4X 2, 8X 4, 12X 8, 2X 16.
        assert_eq!(
            [width::X1, width::X4, width::X8, width::X12, width::X2],
            [1, 2, 4, 8, 16]
        );
    }

    #[test]
    fn atomic_cap_is_linuxs() {
        // CMP_AND_SWAP 0x1, FETCH_AND_ADD 0x2, 8 bytes = atomic_size_qp bit 3.
        let hca = AtomicCap::Hca;
        let none = AtomicCap::None;
        for (ops, size, mode, want) in [
            (0xf, 0x3c, 1, hca),
            (0x3, 0x08, 1, hca),
            (0x3, 0x08, 2, hca),
            // The recorded ConnectX-4 (firmware 14.12.1220): big-endian mode.
            (0xf, 0x3c, 0, none),
            (0x1, 0x08, 1, none),
            (0x2, 0x08, 1, none),
            (0x3, 0x34, 1, none),
            (0x0, 0x00, 0, none),
        ] {
            assert_eq!(
                linux_atomic_cap(ops, size, mode),
                want,
                "{ops:#x} {size:#x} {mode}"
            );
        }
    }

    #[test]
    fn atomic_byte_orders() {
        let v = 0x0102_0304_0506_0708u64;
        for o in [AtomicByteOrder::BigEndian, AtomicByteOrder::Host] {
            assert_eq!(o.decode(o.encode(v)), v);
        }
        assert_eq!(AtomicByteOrder::BigEndian.encode(v)[0], 1);
    }
}
