//! NIC receive flow steering and receive-side scaling.
//!
//! A frame for the raw Ethernet path is looked up from the NIC RX root
//! table (SET_FLOW_TABLE_ROOT): the entries of a table are tried in
//! `flow_index` order, an entry matching when the frame's
//! `fte_match_set_lyr_2_4` image, masked by its group's
//! `match_criteria.outer_headers`, equals the entry's masked
//! `match_value`. The first match decides: drop, or forward to each
//! destination (a TIR receives a copy; a deeper table is looked up in
//! turn). A table that matches nothing applies its miss action: the
//! `table_miss_id` table, or by default drop. Frames that reach no TIR are
//! counted ([`Drops::steering_miss`](super::Drops::steering_miss) or
//! [`Drops::steering_drop`](super::Drops::steering_drop)).
//!
//! A TIR hands the frame to its `inline_rqn` (direct) or to the RQ of its
//! RQ table at index `hash % rqt_actual_size` (indirect), the hash being
//! the Toeplitz hash (`firmware_cmds::rss`) over the fields its
//! `rx_hash_field_selector_outer` selects.

use firmware_cmds::rss::{self, HashFields, MAX_HASH_INPUT};

use super::packet::{ETH_P_IPV4, ETH_P_IPV6, ETH_P_VLAN};
use crate::device::Device;
use crate::fw::ObjKind;
use crate::fw::objects::{FlowEntry, ObjData};

/// 802.1ad service VLAN tag.
const ETH_P_QINQ: u16 = 0x88a8;

/// What the parser found in a frame.
#[derive(Clone, Debug)]
pub(crate) struct Parsed {
    /// The frame as an `fte_match_set_lyr_2_4` (64 bytes).
    pub(crate) outer: [u8; 64],
    /// IPv6 (else IPv4), source and destination addresses.
    pub(crate) ip: Option<(bool, Vec<u8>, Vec<u8>)>,
    /// IP protocol and L4 ports of an unfragmented TCP or UDP packet.
    pub(crate) l4: Option<(u8, u16, u16)>,
    /// IPv4 header checksum correct (IPv6: there is none, so true).
    pub(crate) l3_csum_ok: bool,
    /// TCP/UDP checksum correct (a UDP/IPv4 checksum of 0 means none).
    pub(crate) l4_csum_ok: bool,
}

fn be16(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o + 2).map(|x| u16::from_be_bytes([x[0], x[1]]))
}

fn sum16(b: &[u8], mut s: u32) -> u32 {
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    s
}

fn folds_to_zero(mut s: u32) -> bool {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

/// Parses the outer L2-L4 headers of a frame into its match image.
pub(crate) fn parse(f: &[u8]) -> Parsed {
    let mut m = [0u8; 64];
    let mut p = Parsed {
        outer: m,
        ip: None,
        l4: None,
        l3_csum_ok: false,
        l4_csum_ok: false,
    };
    if f.len() < 14 {
        return p;
    }
    m[0..6].copy_from_slice(&f[6..12]); // smac
    m[8..14].copy_from_slice(&f[0..6]); // dmac
    let mut et = be16(f, 12).unwrap_or(0);
    let mut o = 14;
    if et == ETH_P_VLAN || et == ETH_P_QINQ {
        let Some(tci) = be16(f, 14) else {
            p.outer = m;
            return p;
        };
        m[14..16].copy_from_slice(&tci.to_be_bytes()); // first_prio/cfi/vid
        m[18] |= if et == ETH_P_VLAN { 0x80 } else { 0x40 }; // cvlan/svlan_tag
        et = be16(f, 16).unwrap_or(0);
        o = 18;
    }
    m[6..8].copy_from_slice(&et.to_be_bytes());
    let (proto, l4_off, l4_len, pseudo) = match et {
        ETH_P_IPV4 => {
            let Some(h) = f.get(o..o + 20) else {
                p.outer = m;
                return p;
            };
            let ihl = usize::from(h[0] & 0xf) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            m[16] = h[9];
            m[17] = h[1];
            m[18] |= 4 << 1;
            let frag = u16::from_be_bytes([h[6], h[7]]) & 0x3fff;
            if frag != 0 {
                m[18] |= 0x20;
            }
            m[26] = (h[0] & 0xf) << 4;
            m[27] = h[8];
            m[44..48].copy_from_slice(&h[12..16]);
            m[60..64].copy_from_slice(&h[16..20]);
            p.ip = Some((false, h[12..16].to_vec(), h[16..20].to_vec()));
            p.l3_csum_ok =
                ihl >= 20 && f.len() >= o + ihl && folds_to_zero(sum16(&f[o..o + ihl], 0));
            if frag != 0 || ihl < 20 || total < ihl || f.len() < o + ihl {
                p.outer = m;
                return p;
            }
            let ps = sum16(&h[12..20], 0) + u32::from(h[9]) + (total - ihl) as u32;
            (h[9], o + ihl, total - ihl, ps)
        }
        ETH_P_IPV6 => {
            let Some(h) = f.get(o..o + 40) else {
                p.outer = m;
                return p;
            };
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            m[16] = h[6];
            m[17] = (h[0] << 4) | (h[1] >> 4);
            m[18] |= 6 << 1;
            m[27] = h[7];
            m[32..48].copy_from_slice(&h[8..24]);
            m[48..64].copy_from_slice(&h[24..40]);
            p.ip = Some((true, h[8..24].to_vec(), h[24..40].to_vec()));
            p.l3_csum_ok = true;
            let ps = sum16(&h[8..40], 0) + u32::from(h[6]) + len as u32;
            (h[6], o + 40, len, ps)
        }
        _ => {
            p.outer = m;
            return p;
        }
    };
    // A frame shorter than its IP header's length still has its L4 header
    // parsed from the bytes that are there (the steering match needs only
    // the ports); its L4 checksum is then not OK.
    let seg = &f[l4_off..f.len().min(l4_off + l4_len)];
    let whole = seg.len() == l4_len;
    match proto {
        6 if seg.len() >= 20 => {
            let (sp, dp) = (be16(seg, 0).unwrap_or(0), be16(seg, 2).unwrap_or(0));
            m[20..22].copy_from_slice(&sp.to_be_bytes());
            m[22..24].copy_from_slice(&dp.to_be_bytes());
            m[18] |= seg[12] & 1; // tcp_flags bit 8 (NS)
            m[19] = seg[13];
            p.l4 = Some((6, sp, dp));
            p.l4_csum_ok = whole && folds_to_zero(sum16(seg, pseudo));
        }
        17 if seg.len() >= 8 => {
            let (sp, dp) = (be16(seg, 0).unwrap_or(0), be16(seg, 2).unwrap_or(0));
            m[28..30].copy_from_slice(&sp.to_be_bytes());
            m[30..32].copy_from_slice(&dp.to_be_bytes());
            p.l4 = Some((17, sp, dp));
            let none = et == ETH_P_IPV4 && seg[6] == 0 && seg[7] == 0;
            p.l4_csum_ok = whole && (none || folds_to_zero(sum16(seg, pseudo)));
        }
        _ => {}
    }
    p.outer = m;
    p
}

/// Whether `image` matches `value` under `mask`, byte by byte.
fn masked_eq(image: &[u8], mask: &[u8], value: &[u8]) -> bool {
    image
        .iter()
        .zip(mask)
        .zip(value)
        .all(|((i, m), v)| i & m == v & m)
}

/// How a lookup ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// An entry matched (its TIRs were collected).
    Matched,
    /// An entry with the drop action matched, or it forwarded nowhere.
    Dropped,
    /// Nothing matched and the miss action is the default (drop).
    Missed,
}

/// RSS result for the CQE: `rx_hash_result` and `rx_hash_type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RssHash {
    pub(crate) result: u32,
    /// Bits 3:2 IP type hashed (1 IPv4, 2 IPv6), 7:6 L4 (1 TCP, 2 UDP).
    pub(crate) htype: u8,
}

impl Device {
    /// The TIRs a received frame is steered to, each with the flow tag its
    /// CQE reports; when there are none the frame is counted as a steering
    /// miss or drop.
    pub(crate) fn steer_rx(&mut self, p: &Parsed) -> Vec<(u32, u32)> {
        let root = self.fw.objs.of(ObjKind::FlowTable).find_map(|(n, o)| {
            matches!(&o.data, ObjData::FlowTable(t) if t.table_type == 0 && t.root).then_some(n)
        });
        let mut tirs = Vec::new();
        let outcome = match root {
            Some(t) => self.lookup(t, p, 0, 0, &mut tirs),
            None => Outcome::Missed,
        };
        if tirs.is_empty() {
            match outcome {
                Outcome::Dropped | Outcome::Matched => self.datapath.drops.steering_drop += 1,
                Outcome::Missed => self.datapath.drops.steering_miss += 1,
            }
        }
        tirs
    }

    /// Looks `p` up in `table`; `tag` is the flow tag of the entry that
    /// forwarded to it (0 at the root).
    fn lookup(
        &self,
        table: u32,
        p: &Parsed,
        depth: u32,
        tag: u32,
        tirs: &mut Vec<(u32, u32)>,
    ) -> Outcome {
        let Some(ObjData::FlowTable(t)) =
            self.fw.objs.get(ObjKind::FlowTable, table).map(|o| &o.data)
        else {
            return Outcome::Missed;
        };
        // Levels strictly increase along forwards and misses, so this
        // only guards against a broken invariant.
        if depth > 64 {
            return Outcome::Missed;
        }
        let mut entries: Vec<&FlowEntry> = self
            .fw
            .objs
            .of(ObjKind::FlowEntry)
            .filter_map(|(_, o)| match &o.data {
                ObjData::FlowEntry(e) if e.table == table => Some(e),
                _ => None,
            })
            .collect();
        entries.sort_by_key(|e| e.index);
        for e in entries {
            let Some(ObjData::FlowGroup(g)) = self
                .fw
                .objs
                .get(ObjKind::FlowGroup, e.group)
                .map(|o| &o.data)
            else {
                continue;
            };
            if !masked_eq(&p.outer, &g.outer, &e.outer) {
                continue;
            }
            if e.action & 4 == 0 {
                return Outcome::Dropped;
            }
            // The entry's flow tag; an entry without one keeps the tag of
            // the entry that forwarded to its table (an assumption, see
            // docs/fidelity.md).
            let tag = if e.flow_tag != 0 { e.flow_tag } else { tag };
            let mut any = false;
            for &(dt, id) in &e.dests {
                match dt {
                    2 => {
                        if !tirs.iter().any(|&(t, _)| t == id) {
                            tirs.push((id, tag));
                        }
                        any = true;
                    }
                    1 if self.lookup(id, p, depth + 1, tag, tirs) == Outcome::Matched => {
                        any = true;
                    }
                    _ => {}
                }
            }
            return if any {
                Outcome::Matched
            } else {
                Outcome::Dropped
            };
        }
        if t.miss_action == 1 {
            return self.lookup(t.miss_table, p, depth + 1, tag, tirs);
        }
        Outcome::Missed
    }

    /// The RQ a TIR hands a frame to, with the RSS hash it computed.
    pub(crate) fn tir_rq(&self, tirn: u32, p: &Parsed) -> Option<(u32, RssHash)> {
        let Some(ObjData::Tir(t)) = self.fw.objs.get(ObjKind::Tir, tirn).map(|o| &o.data) else {
            return None;
        };
        let mut h = RssHash::default();
        if t.hash_fn == 2 {
            let mut input = [0u8; MAX_HASH_INPUT];
            let mut n = 0;
            if let Some((v6, src, dst)) = &p.ip {
                if *v6 == t.l3_ipv6 {
                    let want = if t.l4_udp { 17 } else { 6 };
                    let fields = HashFields {
                        src_ip: src,
                        dst_ip: dst,
                        ports: p.l4.filter(|l| l.0 == want).map(|(_, s, d)| (s, d)),
                    };
                    n = rss::hash_input(&fields, t.fields, &mut input);
                    if t.fields & 0x3 != 0 {
                        h.htype |= if *v6 { 2 << 2 } else { 1 << 2 };
                    }
                    if fields.ports.is_some() && t.fields & 0xc != 0 {
                        h.htype |= if t.l4_udp { 2 << 6 } else { 1 << 6 };
                    }
                }
            }
            h.result = rss::toeplitz(&t.key, &input[..n]);
        }
        let rqn = if t.disp_type == 0 {
            t.inline_rqn
        } else {
            let Some(ObjData::Rqt(rqs)) = self.fw.objs.get(ObjKind::Rqt, t.rqt).map(|o| &o.data)
            else {
                return None;
            };
            *rqs.get(h.result as usize % rqs.len().max(1))?
        };
        Some((rqn, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Frame, L3, L4};

    /// rdma-core's test_flow builds IPv6 frames whose payload length also
    /// counts the 40-byte header: the TCP ports still steer, the checksum
    /// is not OK. The same for IPv4 with a total length beyond the frame.
    #[test]
    fn a_frame_shorter_than_its_ip_length_still_matches_on_its_ports() {
        let (a, b) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
        let mut v6 = Frame::new(b, a)
            .l3(L3::V6([0xfe; 16], [0xfd; 16]))
            .l4(L4::Tcp(4000, 5000))
            .payload(b"twelve bytes")
            .checksums()
            .build();
        let whole = parse(&v6);
        assert_eq!(whole.l4, Some((6, 4000, 5000)));
        assert!(whole.l4_csum_ok);
        let len = u16::from_be_bytes([v6[18], v6[19]]) + 40;
        v6[18..20].copy_from_slice(&len.to_be_bytes());
        let short = parse(&v6);
        assert_eq!(short.l4, Some((6, 4000, 5000)));
        assert!(!short.l4_csum_ok);
        assert_eq!(short.outer, whole.outer, "the same match image");
        let mut v4 = Frame::new(b, a)
            .l3(L3::V4([10, 0, 0, 1], [10, 0, 0, 2]))
            .l4(L4::Udp(1111, 2222))
            .payload(b"x")
            .checksums()
            .build();
        let total = u16::from_be_bytes([v4[16], v4[17]]) + 100;
        v4[16..18].copy_from_slice(&total.to_be_bytes());
        let short = parse(&v4);
        assert_eq!(short.l4, Some((17, 1111, 2222)));
        assert!(!short.l4_csum_ok);
        // A frame cut inside the TCP header has no L4 match.
        let cut = &v6[..14 + 40 + 10];
        assert_eq!(parse(cut).l4, None);
    }

    #[test]
    fn match_image_of_a_vlan_udp_frame() {
        let mut f = vec![0u8; 18 + 20 + 8];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
        f[12..14].copy_from_slice(&ETH_P_VLAN.to_be_bytes());
        f[14..16].copy_from_slice(&0x2005u16.to_be_bytes());
        f[16..18].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        let ip = &mut f[18..38];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&28u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        f[38..40].copy_from_slice(&1111u16.to_be_bytes());
        f[40..42].copy_from_slice(&2222u16.to_be_bytes());
        f[42..44].copy_from_slice(&8u16.to_be_bytes());
        let p = parse(&f);
        let m = p.outer;
        assert_eq!(m[0..6], f[6..12], "smac");
        assert_eq!(m[8..14], f[0..6], "dmac");
        assert_eq!(
            u16::from_be_bytes([m[6], m[7]]),
            ETH_P_IPV4,
            "ethertype after the tag"
        );
        assert_eq!(u16::from_be_bytes([m[14], m[15]]) & 0xfff, 5, "first_vid");
        assert_eq!(m[18] & 0x80, 0x80, "cvlan_tag");
        assert_eq!((m[18] >> 1) & 0xf, 4, "ip_version");
        assert_eq!(m[16], 17, "ip_protocol");
        assert_eq!(m[44..48], [10, 0, 0, 1]);
        assert_eq!(m[60..64], [10, 0, 0, 2]);
        assert_eq!(u16::from_be_bytes([m[28], m[29]]), 1111, "udp_sport");
        assert_eq!(u16::from_be_bytes([m[30], m[31]]), 2222, "udp_dport");
        assert_eq!(p.l4, Some((17, 1111, 2222)));
        assert!(!p.l3_csum_ok, "header checksum left 0");
        assert!(p.l4_csum_ok, "UDP/IPv4 without checksum");
    }
}
