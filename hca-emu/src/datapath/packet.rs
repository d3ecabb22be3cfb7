//! Frames on the virtual wire: Ethernet II (optionally VLAN tagged) carrying
//! RoCE v1 (ethertype 0x8915, a 40-byte GRH) or RoCE v2 (IPv4 or IPv6, UDP
//! destination port 4791), then the InfiniBand transport headers (BTH and
//! the extended headers of the opcode), the payload padded to 4 bytes, and a
//! 4-byte ICRC.
//!
//! As a ConnectX puts them on the wire:
//!
//! - the **ICRC** ([`icrc`]: IBA 7.8.1, RoCE Annex A16 for v1 and A17 for
//!   v2) is computed on every packet built and checked on every packet
//!   parsed ([`Roce::icrc_ok`]; the engine drops a mismatch and counts it in
//!   [`Drops::icrc`](crate::Drops)); checked against a frame captured on a
//!   ConnectX-4 Lx and against scapy's RoCE layer;
//! - RC/UC messages are **segmented at the path MTU** by the requester and
//!   READ responses by the responder (see the requester and responder), so
//!   a packet carries at most one path MTU (4096 bytes) of payload;
//! - the IP and UDP fields come from the path ([`Route`]): TTL/hop limit,
//!   traffic class (RoCE v2: DSCP and ECN of the address path), flow label,
//!   IPv4 DF and header checksum (identification 0), UDP source port (from
//!   the path, or derived from the flow label or QP numbers as Linux's
//!   `rdma_flow_label_to_udp_sport`), UDP destination port 4791, UDP
//!   checksum 0 (Annex A17 allows it).
//!
//! Deviations: the Ethernet FCS is not carried (the wire is a byte
//! pipe); frames shorter than 60 bytes are padded to 60 like a NIC does;
//! a raw frame longer than 65535 bytes of IP payload (only a raw Ethernet
//! SQ can send one) carries 0 in its 16-bit length fields.
//!
//! Everything here works on bytes that may come from anywhere (a raw
//! Ethernet send queue can put any frame on the wire): parsing never
//! panics and rejects anything inconsistent.

use crate::frame::internet_checksum as ip_checksum;

/// IPv4 ethertype.
pub(crate) const ETH_P_IPV4: u16 = 0x0800;
/// IPv6 ethertype.
pub(crate) const ETH_P_IPV6: u16 = 0x86dd;
/// RoCE v1 ethertype.
pub(crate) const ETH_P_ROCE: u16 = 0x8915;
/// 802.1Q tag.
pub(crate) const ETH_P_VLAN: u16 = 0x8100;
/// RoCE v2 UDP destination port.
pub(crate) const ROCE_V2_UDP_PORT: u16 = 4791;
/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;
/// GRH next header of an IB transport header (RoCE v1).
const GRH_NEXT_HDR_BTH: u8 = 0x1b;
/// Minimum Ethernet frame without FCS.
pub(crate) const ETH_MIN_FRAME: usize = 60;
/// Length of the ICRC.
const ICRC: usize = 4;
/// Length of the base transport header.
pub(crate) const BTH_LEN: usize = 12;

/// InfiniBand transport opcodes (IBA 9.2, table 38): the transport in bits
/// 7:5 (RC 0, UC 1, UD 3), the operation in bits 4:0.
#[allow(dead_code)]
pub(crate) mod op {
    pub const RC: u8 = 0x00;
    pub const UC: u8 = 0x20;
    pub const UD: u8 = 0x60;
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
}

/// AETH syndromes (IBA 9.7.5.1): bits 7:5 ACK (000), RNR NAK (001), NAK
/// (011); bits 4:0 credit count, RNR timer or NAK code.
pub(crate) mod aeth {
    /// ACK with "invalid credit count" (no end-to-end flow control).
    pub const ACK: u8 = 0x1f;
    /// RNR NAK; the timer goes in bits 4:0.
    pub const RNR_NAK: u8 = 0x20;
    /// NAK: PSN sequence error.
    pub const NAK_PSN_SEQ: u8 = 0x60;
    /// NAK: invalid request.
    pub const NAK_INVALID_REQUEST: u8 = 0x61;
    /// NAK: remote access error.
    pub const NAK_REMOTE_ACCESS: u8 = 0x62;
    /// NAK: remote operational error.
    pub const NAK_REMOTE_OP: u8 = 0x63;
}

/// RoCE encapsulation of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RoceVer {
    /// RoCE v1: ethertype 0x8915 and a GRH.
    V1,
    /// RoCE v2 over IPv4.
    V2Ipv4,
    /// RoCE v2 over IPv6.
    V2Ipv6,
}

impl RoceVer {
    /// The CQE's RoCE L3 header type (`flags_rqpn` bits 25:24): 0 GRH, 1
    /// IPv6, 2 IPv4.
    pub(crate) fn cqe_l3_type(self) -> u32 {
        match self {
            RoceVer::V1 => 0,
            RoceVer::V2Ipv6 => 1,
            RoceVer::V2Ipv4 => 2,
        }
    }
}

/// Where an outgoing RoCE packet goes and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) dmac: [u8; 6],
    pub(crate) smac: [u8; 6],
    pub(crate) vlan: Option<u16>,
    pub(crate) ver: RoceVer,
    pub(crate) sgid: [u8; 16],
    pub(crate) dgid: [u8; 16],
    pub(crate) tclass: u8,
    pub(crate) flow_label: u32,
    pub(crate) hop_limit: u8,
    pub(crate) udp_sport: u16,
}

/// The base transport header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bth {
    pub(crate) opcode: u8,
    /// Solicited event.
    pub(crate) se: bool,
    /// Pad count (set by [`build`]).
    pub(crate) pad: u8,
    pub(crate) pkey: u16,
    pub(crate) dqpn: u32,
    /// Acknowledge request.
    pub(crate) ackreq: bool,
    pub(crate) psn: u32,
}

impl Bth {
    fn write(&self, b: &mut [u8]) {
        b[0] = self.opcode;
        b[1] = (u8::from(self.se) << 7) | ((self.pad & 3) << 4);
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4] = 0;
        b[5..8].copy_from_slice(&(self.dqpn & 0xff_ffff).to_be_bytes()[1..]);
        b[8] = u8::from(self.ackreq) << 7;
        b[9..12].copy_from_slice(&(self.psn & 0xff_ffff).to_be_bytes()[1..]);
    }

    fn read(b: &[u8]) -> Bth {
        Bth {
            opcode: b[0],
            se: b[1] & 0x80 != 0,
            pad: (b[1] >> 4) & 3,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            dqpn: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            ackreq: b[8] & 0x80 != 0,
            psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        }
    }
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub(crate) fn gid_ipv4(gid: &[u8; 16]) -> [u8; 4] {
    [gid[12], gid[13], gid[14], gid[15]]
}

/// The IPv4-mapped GID of an IPv4 address.
pub(crate) fn ipv4_gid(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// Builds a RoCE frame: headers, `ext` (extended transport headers), then
/// `payload_len` bytes that `fill` writes, padding and the ICRC. `fill`'s
/// error is returned as is.
pub(crate) fn build<E>(
    route: &Route,
    bth: &Bth,
    ext: &[u8],
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Vec<u8>, E> {
    let pad = (4 - payload_len % 4) % 4;
    let ib_len = BTH_LEN + ext.len() + payload_len + pad + ICRC;
    let l2 = if route.vlan.is_some() { 18 } else { 14 };
    let l3 = match route.ver {
        RoceVer::V1 => 40,
        RoceVer::V2Ipv6 => 48,
        RoceVer::V2Ipv4 => 28,
    };
    let total = (l2 + l3 + ib_len).max(ETH_MIN_FRAME);
    let mut f = vec![0u8; total];
    f[0..6].copy_from_slice(&route.dmac);
    f[6..12].copy_from_slice(&route.smac);
    let ethertype = match route.ver {
        RoceVer::V1 => ETH_P_ROCE,
        RoceVer::V2Ipv4 => ETH_P_IPV4,
        RoceVer::V2Ipv6 => ETH_P_IPV6,
    };
    if let Some(tci) = route.vlan {
        f[12..14].copy_from_slice(&ETH_P_VLAN.to_be_bytes());
        f[14..16].copy_from_slice(&tci.to_be_bytes());
        f[16..18].copy_from_slice(&ethertype.to_be_bytes());
    } else {
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    }
    let mut o = l2;
    // Length fields that do not fit 16 bits (only a raw frame can be that
    // long: RoCE packets carry at most one path MTU) are written as 0, like
    // an IPv6 jumbogram: the frame's end is the packet's end.
    let fit = |n: usize| u16::try_from(n).unwrap_or(0);
    let udp_len = fit(8 + ib_len);
    match route.ver {
        RoceVer::V1 | RoceVer::V2Ipv6 => {
            let w = (6u32 << 28) | (u32::from(route.tclass) << 20) | (route.flow_label & 0xf_ffff);
            f[o..o + 4].copy_from_slice(&w.to_be_bytes());
            let (paylen, next) = if route.ver == RoceVer::V1 {
                (fit(ib_len), GRH_NEXT_HDR_BTH)
            } else {
                (udp_len, IPPROTO_UDP)
            };
            f[o + 4..o + 6].copy_from_slice(&paylen.to_be_bytes());
            f[o + 6] = next;
            f[o + 7] = route.hop_limit;
            f[o + 8..o + 24].copy_from_slice(&route.sgid);
            f[o + 24..o + 40].copy_from_slice(&route.dgid);
            o += 40;
        }
        RoceVer::V2Ipv4 => {
            let h = &mut f[o..o + 20];
            h[0] = 0x45;
            h[1] = route.tclass;
            h[2..4].copy_from_slice(&fit(28 + ib_len).to_be_bytes());
            h[6] = 0x40; // don't fragment
            h[8] = route.hop_limit;
            h[9] = IPPROTO_UDP;
            h[12..16].copy_from_slice(&gid_ipv4(&route.sgid));
            h[16..20].copy_from_slice(&gid_ipv4(&route.dgid));
            let c = ip_checksum(h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            o += 20;
        }
    }
    if route.ver != RoceVer::V1 {
        f[o..o + 2].copy_from_slice(&route.udp_sport.to_be_bytes());
        f[o + 2..o + 4].copy_from_slice(&ROCE_V2_UDP_PORT.to_be_bytes());
        f[o + 4..o + 6].copy_from_slice(&udp_len.to_be_bytes());
        o += 8;
    }
    let mut b = *bth;
    b.pad = pad as u8;
    b.write(&mut f[o..o + BTH_LEN]);
    o += BTH_LEN;
    f[o..o + ext.len()].copy_from_slice(ext);
    o += ext.len();
    fill(&mut f[o..o + payload_len])?;
    let end = o + payload_len + pad;
    let c = icrc(&f, l2, route.ver, end);
    f[end..end + ICRC].copy_from_slice(&c);
    Ok(f)
}

/// CRC-32 (the Ethernet polynomial 0x04c11db7, reflected: 0xedb88320)
/// lookup tables for eight bytes at a time ("slicing by 8"): table 0 is
/// the classic byte table, table `k` advances a byte through `k` more
/// zero bytes.
const CRC_TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut k = 1;
        while k < 8 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            k += 1;
        }
        i += 1;
    }
    t
};

/// The Ethernet FCS of `f` (CRC-32 of IEEE 802.3 clause 3.2.9: reflected,
/// initial all ones, final inversion), in its wire byte order.
pub(crate) fn ethernet_fcs(f: &[u8]) -> [u8; 4] {
    (!crc32_update(!0, f)).to_le_bytes()
}

/// Continues a reflected CRC-32 (no final inversion) over `b`.
fn crc32_update(mut c: u32, b: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let lo = c ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &x in words.remainder() {
        c = t[0][((c ^ u32::from(x)) & 0xff) as usize] ^ (c >> 8);
    }
    c
}

/// The ICRC of the packet whose L3 header (IPv4, IPv6 or the RoCE v1 GRH)
/// starts at `l3` of frame `f` and whose ICRC starts at `end`, as the 4
/// bytes that go on the wire.
///
/// IBA 7.8.1 with RoCE Annex A16 (v1) and A17 (v2): a CRC-32 with the
/// Ethernet polynomial, seeded with ones, over 8 bytes of ones standing for
/// the LRH, the L3 header with its variant fields set to ones (IPv4: type
/// of service, TTL, header checksum; IPv6 and GRH: traffic class, flow
/// label, hop limit), the UDP header with its checksum set to ones (v2),
/// the BTH with its reserved byte (`resv8a`, byte 4) set to ones, then the
/// rest of the transport headers, the payload and the pad. The result is
/// inverted and sent least significant byte first (as the Ethernet FCS;
/// Linux `rxe_icrc.c` computes the same thing with `crc32_le`).
///
/// `f` must hold the headers and `end` (callers check the lengths).
pub(crate) fn icrc(f: &[u8], l3: usize, ver: RoceVer, end: usize) -> [u8; 4] {
    let hdr = match ver {
        RoceVer::V1 => 40,
        RoceVer::V2Ipv6 => 48,
        RoceVer::V2Ipv4 => 28,
    };
    let mut h = [0u8; 48 + BTH_LEN];
    let n = hdr + BTH_LEN;
    h[..n].copy_from_slice(&f[l3..l3 + n]);
    match ver {
        RoceVer::V2Ipv4 => {
            h[1] = 0xff; // type of service
            h[8] = 0xff; // TTL
            h[10] = 0xff; // header checksum
            h[11] = 0xff;
        }
        RoceVer::V1 | RoceVer::V2Ipv6 => {
            h[0] |= 0x0f; // traffic class 7:4
            h[1] = 0xff; // traffic class 3:0, flow label
            h[2] = 0xff;
            h[3] = 0xff;
            h[7] = 0xff; // hop limit
        }
    }
    if ver != RoceVer::V1 {
        h[hdr - 2] = 0xff; // UDP checksum
        h[hdr - 1] = 0xff;
    }
    h[hdr + 4] = 0xff; // BTH resv8a
    let c = crc32_update(!0, &[0xff; 8]);
    let c = crc32_update(c, &h[..n]);
    let c = crc32_update(c, &f[l3 + n..end]);
    (!c).to_le_bytes()
}

/// A parsed RoCE packet.
#[derive(Debug)]
pub(crate) struct Roce<'a> {
    pub(crate) dmac: [u8; 6],
    pub(crate) vlan: Option<u16>,
    pub(crate) ver: RoceVer,
    pub(crate) dgid: [u8; 16],
    /// The 40-byte GRH area a UD receive scatters first: the GRH (RoCE
    /// v1) or IPv6 header, or 20 zero bytes and the IPv4 header.
    pub(crate) grh_area: [u8; 40],
    pub(crate) bth: Bth,
    /// Extended headers and payload: after the BTH, before pad and ICRC.
    pub(crate) body: &'a [u8],
    /// The ICRC matches the packet ([`icrc`]).
    pub(crate) icrc_ok: bool,
}

/// What a frame is.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// A RoCE packet (v1 or v2) with a well-formed header chain.
    Roce(Roce<'a>),
    /// Any other Ethernet frame (for raw Ethernet receive queues), with
    /// its L3/L4 header types as the CQE reports them.
    Other {
        vlan: Option<u16>,
        /// CQE l3_hdr_type: 0 none, 1 IPv6, 2 IPv4.
        l3: u8,
        /// CQE l4_hdr_type: 0 none, 1 TCP, 2 UDP.
        l4: u8,
    },
    /// Not even an Ethernet header, or a RoCE packet whose headers are
    /// inconsistent: dropped.
    Malformed(&'static str),
}

fn be16(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(o)?, *b.get(o + 1)?]))
}

/// Parses a frame.
pub(crate) fn parse(f: &[u8]) -> Frame<'_> {
    if f.len() < 14 {
        return Frame::Malformed("shorter than an Ethernet header");
    }
    let mut dmac = [0u8; 6];
    dmac.copy_from_slice(&f[0..6]);
    let mut et = be16(f, 12).unwrap_or(0);
    let mut o = 14;
    let mut vlan = None;
    if et == ETH_P_VLAN {
        match (be16(f, 14), be16(f, 16)) {
            (Some(tci), Some(t)) => {
                vlan = Some(tci);
                et = t;
                o = 18;
            }
            _ => return Frame::Malformed("truncated VLAN tag"),
        }
    }
    let other = |l3: u8, l4: u8| Frame::Other { vlan, l3, l4 };
    let mut grh_area = [0u8; 40];
    let (ver, _sgid, dgid, ib_start, ib_end) = match et {
        ETH_P_ROCE | ETH_P_IPV6 => {
            let Some(h) = f.get(o..o + 40) else {
                return if et == ETH_P_ROCE {
                    Frame::Malformed("truncated GRH")
                } else {
                    other(1, 0)
                };
            };
            if h[0] >> 4 != 6 {
                return if et == ETH_P_ROCE {
                    Frame::Malformed("GRH version is not 6")
                } else {
                    other(0, 0)
                };
            }
            let paylen = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let next = h[6];
            let mut sgid = [0u8; 16];
            let mut dgid = [0u8; 16];
            sgid.copy_from_slice(&h[8..24]);
            dgid.copy_from_slice(&h[24..40]);
            grh_area.copy_from_slice(h);
            let end = if paylen == 0 {
                f.len()
            } else {
                o + 40 + paylen
            };
            if et == ETH_P_ROCE {
                if next != GRH_NEXT_HDR_BTH {
                    return Frame::Malformed("GRH next header is not BTH");
                }
                if end > f.len() {
                    return Frame::Malformed("GRH payload length beyond the frame");
                }
                (RoceVer::V1, sgid, dgid, o + 40, end)
            } else {
                let l4 = match next {
                    6 => 1,
                    IPPROTO_UDP => 2,
                    _ => 0,
                };
                if next != IPPROTO_UDP || end > f.len() {
                    return other(1, l4);
                }
                match udp_roce(f, o + 40, end) {
                    Some(s) => (RoceVer::V2Ipv6, sgid, dgid, s, end),
                    None => return other(1, 2),
                }
            }
        }
        ETH_P_IPV4 => {
            let Some(h) = f.get(o..o + 20) else {
                return other(2, 0);
            };
            let ihl = usize::from(h[0] & 0xf) * 4;
            if h[0] >> 4 != 4 || ihl < 20 {
                return other(0, 0);
            }
            let proto = h[9];
            let l4 = match proto {
                6 => 1,
                IPPROTO_UDP => 2,
                _ => 0,
            };
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let end = if total == 0 { f.len() } else { o + total };
            if proto != IPPROTO_UDP || ihl != 20 || (total != 0 && total < 20) || end > f.len() {
                return other(2, l4);
            }
            let mut src = [0u8; 4];
            let mut dst = [0u8; 4];
            src.copy_from_slice(&h[12..16]);
            dst.copy_from_slice(&h[16..20]);
            grh_area[20..40].copy_from_slice(h);
            match udp_roce(f, o + 20, end) {
                Some(s) => (RoceVer::V2Ipv4, ipv4_gid(src), ipv4_gid(dst), s, end),
                None => return other(2, 2),
            }
        }
        _ => return other(0, 0),
    };
    let Some(bth) = f.get(ib_start..ib_start + BTH_LEN) else {
        return Frame::Malformed("truncated BTH");
    };
    let bth = Bth::read(bth);
    let body_start = ib_start + BTH_LEN;
    let tail = ICRC + usize::from(bth.pad);
    if ib_end < body_start + tail {
        return Frame::Malformed("transport payload shorter than pad and ICRC");
    }
    let icrc_ok = icrc(f, o, ver, ib_end - ICRC) == f[ib_end - ICRC..ib_end];
    Frame::Roce(Roce {
        dmac,
        vlan,
        ver,
        dgid,
        grh_area,
        bth,
        body: &f[body_start..ib_end - tail],
        icrc_ok,
    })
}

/// Checks the UDP header at `o` (RoCE v2: destination port 4791, length
/// matching the IP payload); returns where the BTH starts.
fn udp_roce(f: &[u8], o: usize, end: usize) -> Option<usize> {
    let dport = be16(f, o + 2)?;
    let len = usize::from(be16(f, o + 4)?);
    let fits = if len == 0 {
        end >= o + 8
    } else {
        o + len == end && len >= 8
    };
    (dport == ROCE_V2_UDP_PORT && fits).then_some(o + 8)
}

/// Big-endian reads from a body that was length-checked by the caller.
pub(crate) fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Big-endian 64-bit read.
pub(crate) fn rd64(b: &[u8], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(x)
}

/// The RETH at the start of a body (length-checked by the caller):
/// virtual address, R_Key, DMA length.
pub(crate) fn reth(b: &[u8]) -> (u64, u32, u32) {
    (rd64(b, 0), rd32(b, 8), rd32(b, 12))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(ver: RoceVer, vlan: Option<u16>) -> Route {
        Route {
            dmac: [2, 0, 0, 0, 0, 1],
            smac: [2, 0, 0, 0, 0, 2],
            vlan,
            ver,
            sgid: ipv4_gid([192, 168, 1, 1]),
            dgid: ipv4_gid([192, 168, 1, 2]),
            tclass: 0x20,
            flow_label: 0x5a5a5,
            hop_limit: 64,
            udp_sport: 0xe5b3,
        }
    }

    #[test]
    fn round_trip_every_encapsulation() {
        for ver in [RoceVer::V1, RoceVer::V2Ipv4, RoceVer::V2Ipv6] {
            for vlan in [None, Some(0x6005)] {
                let r = route(ver, vlan);
                let bth = Bth {
                    opcode: op::RC | op::SEND_ONLY_IMM,
                    se: true,
                    pkey: 0xffff,
                    dqpn: 0x12345,
                    ackreq: true,
                    psn: 0xabcdef,
                    ..Bth::default()
                };
                let f = build(&r, &bth, &[1, 2, 3, 4], 5, |p| {
                    p.copy_from_slice(b"hello");
                    Ok::<(), ()>(())
                })
                .unwrap();
                assert!(f.len() >= ETH_MIN_FRAME);
                let Frame::Roce(p) = parse(&f) else {
                    panic!("{ver:?} not parsed as RoCE")
                };
                assert_eq!(p.ver, ver);
                assert_eq!(p.vlan, vlan);
                assert_eq!(p.dgid, r.dgid);
                assert_eq!(p.bth.psn, 0xabcdef);
                assert_eq!(p.bth.dqpn, 0x12345);
                assert_eq!(p.bth.pad, 3);
                assert!(p.bth.se && p.bth.ackreq);
                assert_eq!(p.body, b"\x01\x02\x03\x04hello");
                if ver == RoceVer::V2Ipv4 {
                    assert_eq!(p.grh_area[..20], [0; 20]);
                    assert_eq!(p.grh_area[20], 0x45);
                    assert_eq!(ip_checksum(&p.grh_area[20..]), 0, "valid IPv4 checksum");
                } else {
                    assert_eq!(p.grh_area[0] >> 4, 6);
                }
            }
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A RoCE v2 CNP (BTH opcode 0x81, BECN set in BTH byte 4, IPv4 TOS
    /// 0xc2, UDP checksum 0) captured on a ConnectX-4 Lx, with the ICRC
    /// that card put on the wire (`82fd002a`). Source: scapy's
    /// `test/contrib/roce.uts`, "RoCE CNP captured on ConnectX-4 Lx".
    const CX4LX_CNP: &str =
        "e41d2dab2bc2 7cfe90643b32 0800 45c2003c718c400040119161 0a001101 0a001201
        000012b700280000 8100ffff40000118 00000000 00000000000000000000000000000000 82fd002a";

    /// A RoCE v2 UC SEND_ONLY (MigReq, pad count 2) with the ICRC scapy's
    /// RoCE layer (`scapy/contrib/roce.py`, `BTH.compute_icrc`, an
    /// implementation independent of this one) computes: `78f353f3`, the
    /// value scapy's `test/contrib/roce.uts` checks ("RoCE layer").
    const SCAPY_UC_SEND: &str = "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007
        c00012b7002caca2 2460ffff000000d300cf1710 4630818be28935d90e9a95505401be885e500000 78f353f3";

    #[test]
    fn icrc_matches_independent_vectors() {
        for (name, v) in [
            ("ConnectX-4 Lx CNP", CX4LX_CNP),
            ("scapy UC", SCAPY_UC_SEND),
        ] {
            let f = hex(v);
            let n = f.len();
            assert_eq!(icrc(&f, 14, RoceVer::V2Ipv4, n - 4), f[n - 4..], "{name}");
            let Frame::Roce(p) = parse(&f) else {
                panic!("{name} not parsed as RoCE")
            };
            assert!(p.icrc_ok, "{name}");
        }
    }

    #[test]
    fn crc32_is_the_ethernet_crc() {
        // The CRC-32 check value ("123456789" -> 0xcbf43926).
        assert_eq!(!crc32_update(!0, b"123456789"), 0xcbf4_3926);
        // Every length and alignment agrees with the bitwise definition.
        let data: Vec<u8> = (0..300u32).map(|i| (i * 31 + 7) as u8).collect();
        for n in 0..data.len() {
            let mut c = !0u32;
            for &b in &data[..n] {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        (c >> 1) ^ 0xedb8_8320
                    } else {
                        c >> 1
                    };
                }
            }
            assert_eq!(crc32_update(!0, &data[..n]), c, "length {n}");
            assert_eq!(
                crc32_update(crc32_update(!0, &data[..n / 3]), &data[n / 3..n]),
                c
            );
        }
    }

    #[test]
    fn icrc_covers_invariant_fields_only() {
        for ver in [RoceVer::V1, RoceVer::V2Ipv4, RoceVer::V2Ipv6] {
            let r = route(ver, Some(5));
            let bth = Bth {
                opcode: op::RC | op::SEND_ONLY,
                dqpn: 0x42,
                psn: 7,
                ..Bth::default()
            };
            let f = build(&r, &bth, &[], 9, |p| {
                p.copy_from_slice(b"123456789");
                Ok::<(), ()>(())
            })
            .unwrap();
            let ok = |f: &[u8]| matches!(parse(f), Frame::Roce(p) if p.icrc_ok);
            assert!(ok(&f), "{ver:?}");
            let l3 = 18;
            // Variant fields: TOS/traffic class, flow label, TTL/hop
            // limit, IPv4 checksum, UDP checksum, BTH byte 4.
            let (variant, l4): (&[usize], usize) = match ver {
                RoceVer::V2Ipv4 => (&[1, 8, 10, 11], 20),
                _ => (&[0, 1, 2, 3, 7], 40),
            };
            let mut bth_at = l3 + l4;
            if ver != RoceVer::V1 {
                bth_at += 8;
            }
            let mut more = variant.iter().map(|&i| l3 + i).collect::<Vec<_>>();
            more.push(bth_at + 4);
            if ver != RoceVer::V1 {
                more.extend([l3 + l4 + 6, l3 + l4 + 7]);
            }
            for i in more {
                let mut g = f.clone();
                g[i] ^= if i == l3 && ver != RoceVer::V2Ipv4 {
                    0x0f
                } else {
                    0xa5
                };
                assert!(ok(&g), "{ver:?}: byte {i} is variant");
            }
            // Everything else from the L3 header on is covered.
            let end = bth_at + BTH_LEN + 9 + 3 + 4;
            for i in l3..end {
                let mut g = f.clone();
                g[i] ^= 0x10;
                let variant_byte = match ver {
                    RoceVer::V2Ipv4 => [1, 8, 10, 11].contains(&(i - l3)),
                    _ => (1..=3).contains(&(i - l3)) || i - l3 == 7,
                } || i == bth_at + 4
                    || (ver != RoceVer::V1 && (i == l3 + l4 + 6 || i == l3 + l4 + 7));
                if variant_byte {
                    continue;
                }
                if let Frame::Roce(p) = parse(&g) {
                    assert!(!p.icrc_ok, "{ver:?}: byte {i} changed, ICRC still matches");
                }
            }
        }
    }

    #[test]
    fn frames_beyond_64_kib() {
        for ver in [RoceVer::V1, RoceVer::V2Ipv4, RoceVer::V2Ipv6] {
            let r = route(ver, None);
            let n = 100_000;
            let f = build(&r, &Bth::default(), &[], n, |p| {
                p[n - 1] = 0x77;
                Ok::<(), ()>(())
            })
            .unwrap();
            let Frame::Roce(p) = parse(&f) else {
                panic!("{ver:?}")
            };
            assert_eq!(p.body.len(), n);
            assert_eq!(p.body[n - 1], 0x77);
        }
    }

    #[test]
    fn other_frames_and_garbage() {
        assert!(matches!(parse(&[0u8; 10]), Frame::Malformed(_)));
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(matches!(parse(&f), Frame::Other { l3: 0, .. }));
        // UDP to another port over IPv4: not RoCE.
        let r = route(RoceVer::V2Ipv4, None);
        let mut f = build(&r, &Bth::default(), &[], 0, |_| Ok::<(), ()>(())).unwrap();
        f[14 + 20 + 2] = 0;
        assert!(matches!(parse(&f), Frame::Other { l3: 2, l4: 2, .. }));
        // Truncated RoCE v1.
        let r = route(RoceVer::V1, None);
        let f = build(&r, &Bth::default(), &[], 100, |_| Ok::<(), ()>(())).unwrap();
        assert!(matches!(parse(&f[..80]), Frame::Malformed(_)));
        for n in 0..f.len() {
            let _ = parse(&f[..n]);
        }
    }
}
