//! What the flow steering and raw packet QP tests share: the addresses
//! their frames carry, the RSS key, frames with a marker byte, and one
//! flow spec of each selector kind the rules of those tests match on.

use hca_driver::flow::{
    RX_HASH_DST_IPV4, RX_HASH_DST_PORT_UDP, RX_HASH_SRC_IPV4, RX_HASH_SRC_PORT_UDP, RxHashConf,
};
use hca_driver::steering::{FlowSpec, Masked};
use hca_emu::frame::{Frame, L3, L4};

/// An IPv4 address the selector rules name.
pub const V4A: [u8; 4] = [10, 1, 1, 1];
/// An IPv4 address no rule names.
pub const V4B: [u8; 4] = [10, 2, 2, 2];
/// An IPv6 address the selector rules name.
pub const V6A: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
/// An IPv6 address no rule names.
pub const V6B: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6];
/// An IPv4 multicast MAC (224.0.0.1's).
pub const MCAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];
/// A source MAC a rule selects.
pub const OTHER_SMAC: [u8; 6] = [0x02, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa];
/// The Toeplitz key of Microsoft's RSS verification suite (the one
/// `firmware-cmds/tests/toeplitz.rs` checks the hash with).
pub const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// RSS over the IPv4 addresses and UDP ports with [`RSS_KEY`].
pub fn udp4_rss() -> RxHashConf {
    RxHashConf {
        key: RSS_KEY,
        fields_mask: RX_HASH_SRC_IPV4
            | RX_HASH_DST_IPV4
            | RX_HASH_SRC_PORT_UDP
            | RX_HASH_DST_PORT_UDP,
    }
}

/// A frame (`hca_emu::frame`, checksums zero: steering does not check
/// them) with `payload` whose first byte is replaced by `tag`, so that a
/// test can tell where each frame landed; padded to 60 bytes.
pub fn marked_frame(
    dmac: [u8; 6],
    smac: [u8; 6],
    vid: Option<u16>,
    l3: L3,
    l4: L4,
    payload: &[u8],
    tag: u8,
) -> Vec<u8> {
    let mut pay = payload.to_vec();
    if let Some(b) = pay.first_mut() {
        *b = tag;
    }
    Frame::new(dmac, smac)
        .vlan(vid)
        .l3(l3)
        .l4(l4)
        .payload(&pay)
        .pad_to(60)
        .build()
}

/// An Ethernet flow spec: each of destination MAC, source MAC, EtherType
/// and VLAN ID matched exactly where given, ignored where `None`.
pub fn eth_spec(
    dst: Option<[u8; 6]>,
    src: Option<[u8; 6]>,
    ty: Option<u16>,
    vid: Option<u16>,
) -> FlowSpec {
    let mac = |m: Option<[u8; 6]>| m.map_or(Masked::default(), |m| Masked::exact(m, [0xff; 6]));
    FlowSpec::Eth {
        dst_mac: mac(dst),
        src_mac: mac(src),
        ether_type: ty.map_or(Masked::default(), |t| Masked::exact(t, 0xffff)),
        vlan_tag: vid.map_or(Masked::default(), |v| Masked::exact(v, 0x0fff)),
    }
}

/// One flow spec of each selector kind, in the tests' priority order:
/// destination MAC [`MCAST`], source MAC [`OTHER_SMAC`], EtherType
/// 0x88b5, VLAN 100, IPv4 destination [`V4A`], IPv6 source [`V6A`], TCP
/// destination port 80, UDP destination port 9000.
pub fn selector_specs() -> [FlowSpec; 8] {
    [
        eth_spec(Some(MCAST), None, None, None),
        eth_spec(None, Some(OTHER_SMAC), None, None),
        eth_spec(None, None, Some(0x88b5), None),
        eth_spec(None, None, None, Some(100)),
        FlowSpec::Ipv4 {
            src_ip: Masked::default(),
            dst_ip: Masked::exact(V4A, [0xff; 4]),
        },
        FlowSpec::Ipv6 {
            src_ip: Masked::exact(V6A, [0xff; 16]),
            dst_ip: Masked::default(),
        },
        FlowSpec::Tcp {
            src_port: Masked::default(),
            dst_port: Masked::exact(80, 0xffff),
        },
        FlowSpec::Udp {
            src_port: Masked::default(),
            dst_port: Masked::exact(9000, 0xffff),
        },
    ]
}
