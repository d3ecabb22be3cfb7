//! Flow selectors in the style of `ibv_create_flow`'s specs (Ethernet,
//! IPv4, IPv6, TCP, UDP, each a value with a mask) encoded as the match
//! criteria and match value of a NIC flow group and flow table entry
//! (`fte_match_param.outer_headers`, an `fte_match_set_lyr_2_4`).
//!
//! The encoding follows what Linux mlx5_ib does for the same specs
//! (`fs.c`, `parse_flow_attr`, read for facts): a value is stored masked;
//! an IPv4 or IPv6 spec also matches the `ethertype` (0x0800, 0x86dd), a
//! TCP or UDP spec the `ip_protocol` (6, 17); an Ethernet `vlan_tag` mask
//! also matches `cvlan_tag` and splits into `first_prio`, `first_cfi` and
//! `first_vid`. Two specs that constrain the same bits differently (IPv4
//! with IPv6, TCP with UDP, an explicit ethertype that contradicts the L3
//! spec) are refused. No spec at all is a catch-all (`match_criteria_enable`
//! 0).
//!
//! This is the selector part of flow steering; creating the tables,
//! groups and entries with it is done with the firmware commands of
//! [`firmware_cmds::flow`].

use firmware_cmds::flow::{FteMatchSetLyr24 as L24, MATCH_CRITERIA_ENABLE_OUTER_HEADERS};

use crate::error::{Error, Result};

/// A value and the mask of its bits that must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Masked<T> {
    /// The value (bits outside the mask are ignored).
    pub value: T,
    /// The bits to compare.
    pub mask: T,
}

impl<T: Copy> Masked<T> {
    /// An exact match on `value` with the mask `full`.
    pub fn exact(value: T, full: T) -> Self {
        Self { value, mask: full }
    }
}

/// One selector of a flow (`ibv_flow_spec_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowSpec {
    /// `ibv_flow_spec_eth`: destination and source MAC, ethertype, VLAN
    /// tag (priority 15:13, CFI 12, VLAN id 11:0).
    Eth {
        /// Destination MAC.
        dst_mac: Masked<[u8; 6]>,
        /// Source MAC.
        src_mac: Masked<[u8; 6]>,
        /// Ethertype (of the payload after a VLAN tag).
        ether_type: Masked<u16>,
        /// 802.1Q tag control information.
        vlan_tag: Masked<u16>,
    },
    /// `ibv_flow_spec_ipv4`: source and destination addresses.
    Ipv4 {
        /// Source address.
        src_ip: Masked<[u8; 4]>,
        /// Destination address.
        dst_ip: Masked<[u8; 4]>,
    },
    /// `ibv_flow_spec_ipv6`: source and destination addresses.
    Ipv6 {
        /// Source address.
        src_ip: Masked<[u8; 16]>,
        /// Destination address.
        dst_ip: Masked<[u8; 16]>,
    },
    /// `ibv_flow_spec_tcp_udp` with `IBV_FLOW_SPEC_TCP`.
    Tcp {
        /// Source port.
        src_port: Masked<u16>,
        /// Destination port.
        dst_port: Masked<u16>,
    },
    /// `ibv_flow_spec_tcp_udp` with `IBV_FLOW_SPEC_UDP`.
    Udp {
        /// Source port.
        src_port: Masked<u16>,
        /// Destination port.
        dst_port: Masked<u16>,
    },
}

/// The match criteria (for the flow group) and match value (for the
/// entry) of a list of selectors.
#[derive(Clone, Debug, Default)]
pub struct FlowMatch {
    /// `match_criteria.outer_headers`.
    pub criteria: L24,
    /// `match_value.outer_headers`.
    pub value: L24,
}

const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

fn conflict() -> Error {
    Error::InvalidArgument {
        arg: "specs",
        reason: "two selectors constrain the same header field differently",
    }
}

fn prm(e: firmware_cmds::Error) -> Error {
    Error::from(e)
}

impl FlowMatch {
    /// Encodes `specs` (empty: match everything).
    pub fn from_specs(specs: &[FlowSpec]) -> Result<Self> {
        let mut m = Self::default();
        for s in specs {
            m.add(s)?;
        }
        Ok(m)
    }

    /// `match_criteria_enable`: the outer headers when anything is
    /// matched, else 0 (a catch-all group).
    pub fn criteria_enable(&self) -> u8 {
        if self.criteria.as_bytes().iter().any(|&b| b != 0) {
            MATCH_CRITERIA_ENABLE_OUTER_HEADERS
        } else {
            0
        }
    }

    /// Whether a frame whose outer headers are `image` matches.
    pub fn matches(&self, image: &L24) -> bool {
        let (c, v, i) = (
            self.criteria.as_bytes(),
            self.value.as_bytes(),
            image.as_bytes(),
        );
        (0..c.len()).all(|k| i[k] & c[k] == v[k] & c[k])
    }

    /// Merges one selector; fails if it contradicts what is already there.
    fn merge(&mut self, mask: &L24, value: &L24) -> Result<()> {
        let (c, v) = (self.criteria.as_bytes(), self.value.as_bytes());
        let (nm, nv) = (mask.as_bytes(), value.as_bytes());
        if (0..c.len()).any(|k| (v[k] ^ nv[k]) & c[k] & nm[k] != 0) {
            return Err(conflict());
        }
        let mut c2 = *c;
        let mut v2 = *v;
        for k in 0..c2.len() {
            c2[k] |= nm[k];
            v2[k] |= nv[k] & nm[k];
        }
        self.criteria = L24::from_array(c2);
        self.value = L24::from_array(v2);
        Ok(())
    }

    fn add(&mut self, s: &FlowSpec) -> Result<()> {
        let mut m = L24::new();
        let mut v = L24::new();
        match *s {
            FlowSpec::Eth {
                dst_mac,
                src_mac,
                ether_type,
                vlan_tag,
            } => {
                m.set_dmac(dst_mac.mask).set_smac(src_mac.mask);
                v.set_dmac(dst_mac.value).set_smac(src_mac.value);
                m.set(L24::ethertype, ether_type.mask).map_err(prm)?;
                v.set(L24::ethertype, ether_type.value).map_err(prm)?;
                if vlan_tag.mask != 0 {
                    m.set(L24::cvlan_tag, true).map_err(prm)?;
                    v.set(L24::cvlan_tag, true).map_err(prm)?;
                    let (tm, tv) = (vlan_tag.mask, vlan_tag.value);
                    m.set(L24::first_prio, (tm >> 13) as u8).map_err(prm)?;
                    v.set(L24::first_prio, (tv >> 13) as u8).map_err(prm)?;
                    m.set(L24::first_cfi, tm & 0x1000 != 0).map_err(prm)?;
                    v.set(L24::first_cfi, tv & 0x1000 != 0).map_err(prm)?;
                    m.set(L24::first_vid, tm & 0xfff).map_err(prm)?;
                    v.set(L24::first_vid, tv & 0xfff).map_err(prm)?;
                }
            }
            FlowSpec::Ipv4 { src_ip, dst_ip } => {
                m.set(L24::ethertype, 0xffff).map_err(prm)?;
                v.set(L24::ethertype, ETH_P_IPV4).map_err(prm)?;
                let mut a = [0u8; 16];
                a[12..].copy_from_slice(&src_ip.mask);
                m.set(L24::src_ipv4_src_ipv6, a).map_err(prm)?;
                a[12..].copy_from_slice(&src_ip.value);
                v.set(L24::src_ipv4_src_ipv6, a).map_err(prm)?;
                a[12..].copy_from_slice(&dst_ip.mask);
                m.set(L24::dst_ipv4_dst_ipv6, a).map_err(prm)?;
                a[12..].copy_from_slice(&dst_ip.value);
                v.set(L24::dst_ipv4_dst_ipv6, a).map_err(prm)?;
            }
            FlowSpec::Ipv6 { src_ip, dst_ip } => {
                m.set(L24::ethertype, 0xffff).map_err(prm)?;
                v.set(L24::ethertype, ETH_P_IPV6).map_err(prm)?;
                m.set(L24::src_ipv4_src_ipv6, src_ip.mask).map_err(prm)?;
                v.set(L24::src_ipv4_src_ipv6, src_ip.value).map_err(prm)?;
                m.set(L24::dst_ipv4_dst_ipv6, dst_ip.mask).map_err(prm)?;
                v.set(L24::dst_ipv4_dst_ipv6, dst_ip.value).map_err(prm)?;
            }
            FlowSpec::Tcp { src_port, dst_port } => {
                m.set(L24::ip_protocol, 0xff).map_err(prm)?;
                v.set(L24::ip_protocol, IPPROTO_TCP).map_err(prm)?;
                m.set(L24::tcp_sport, src_port.mask).map_err(prm)?;
                v.set(L24::tcp_sport, src_port.value).map_err(prm)?;
                m.set(L24::tcp_dport, dst_port.mask).map_err(prm)?;
                v.set(L24::tcp_dport, dst_port.value).map_err(prm)?;
            }
            FlowSpec::Udp { src_port, dst_port } => {
                m.set(L24::ip_protocol, 0xff).map_err(prm)?;
                v.set(L24::ip_protocol, IPPROTO_UDP).map_err(prm)?;
                m.set(L24::udp_sport, src_port.mask).map_err(prm)?;
                v.set(L24::udp_sport, src_port.value).map_err(prm)?;
                m.set(L24::udp_dport, dst_port.mask).map_err(prm)?;
                v.set(L24::udp_dport, dst_port.value).map_err(prm)?;
            }
        }
        self.merge(&m, &v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads bytes of an image at PRM byte offsets (Linux `mlx5_ifc.h`
    /// `fte_match_set_lyr_2_4`), independently of the typed fields.
    fn at(l: &L24, a: usize, b: usize) -> &[u8] {
        &l.as_bytes()[a..b]
    }

    #[test]
    fn a_udp_over_ipv4_selector_with_a_vlan() {
        let specs = [
            FlowSpec::Eth {
                dst_mac: Masked::exact([2, 0, 0, 0, 0, 1], [0xff; 6]),
                src_mac: Masked::default(),
                ether_type: Masked::default(),
                vlan_tag: Masked::exact(0x2064, 0x0fff),
            },
            FlowSpec::Ipv4 {
                src_ip: Masked::default(),
                dst_ip: Masked::exact([10, 0, 0, 9], [255, 255, 255, 0]),
            },
            FlowSpec::Udp {
                src_port: Masked::default(),
                dst_port: Masked::exact(4791, 0xffff),
            },
        ];
        let m = FlowMatch::from_specs(&specs).unwrap();
        let (c, v) = (&m.criteria, &m.value);
        assert_eq!(at(c, 8, 14), [0xff; 6], "dmac criteria");
        assert_eq!(at(v, 8, 14), [2, 0, 0, 0, 0, 1]);
        assert_eq!(at(c, 0, 6), [0; 6], "smac not matched");
        assert_eq!(at(c, 6, 8), [0xff, 0xff], "ethertype implied by IPv4");
        assert_eq!(at(v, 6, 8), [0x08, 0x00]);
        assert_eq!(
            at(c, 14, 16),
            [0x0f, 0xff],
            "first_vid only (prio/cfi masked out)"
        );
        assert_eq!(at(v, 14, 16), [0x00, 0x64]);
        assert_eq!(c.as_bytes()[18] & 0x80, 0x80, "cvlan_tag");
        assert_eq!(v.as_bytes()[18] & 0x80, 0x80);
        assert_eq!(
            (c.as_bytes()[16], v.as_bytes()[16]),
            (0xff, 17),
            "ip_protocol"
        );
        assert_eq!(at(c, 30, 32), [0xff, 0xff], "udp_dport");
        assert_eq!(at(v, 30, 32), 4791u16.to_be_bytes());
        assert_eq!(
            at(c, 60, 64),
            [255, 255, 255, 0],
            "IPv4 in the last 4 bytes"
        );
        assert_eq!(at(v, 60, 64), [10, 0, 0, 0], "value stored masked");
        assert_eq!(m.criteria_enable(), MATCH_CRITERIA_ENABLE_OUTER_HEADERS);
    }

    #[test]
    fn an_ipv6_tcp_selector_and_its_matching() {
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = 5;
        let m = FlowMatch::from_specs(&[
            FlowSpec::Ipv6 {
                src_ip: Masked::exact(src, [0xff; 16]),
                dst_ip: Masked::default(),
            },
            FlowSpec::Tcp {
                src_port: Masked::default(),
                dst_port: Masked::exact(80, 0xffff),
            },
        ])
        .unwrap();
        assert_eq!(at(&m.value, 6, 8), [0x86, 0xdd]);
        assert_eq!(at(&m.value, 32, 48), src);
        assert_eq!(at(&m.value, 22, 24), 80u16.to_be_bytes(), "tcp_dport");
        // A frame image: matches; another port does not.
        let mut img = L24::new();
        img.set(L24::ethertype, ETH_P_IPV6).unwrap();
        img.set(L24::src_ipv4_src_ipv6, src).unwrap();
        img.set(L24::ip_protocol, IPPROTO_TCP).unwrap();
        img.set(L24::tcp_dport, 80).unwrap();
        img.set(L24::tcp_sport, 1234).unwrap();
        assert!(m.matches(&img));
        img.set(L24::tcp_dport, 81).unwrap();
        assert!(!m.matches(&img));
    }

    #[test]
    fn contradictions_are_refused_and_no_spec_is_a_catch_all() {
        let tcp = FlowSpec::Tcp {
            src_port: Masked::default(),
            dst_port: Masked::default(),
        };
        let udp = FlowSpec::Udp {
            src_port: Masked::default(),
            dst_port: Masked::default(),
        };
        let v4 = FlowSpec::Ipv4 {
            src_ip: Masked::default(),
            dst_ip: Masked::default(),
        };
        let v6 = FlowSpec::Ipv6 {
            src_ip: Masked::default(),
            dst_ip: Masked::default(),
        };
        let arp = FlowSpec::Eth {
            dst_mac: Masked::default(),
            src_mac: Masked::default(),
            ether_type: Masked::exact(0x0806, 0xffff),
            vlan_tag: Masked::default(),
        };
        for bad in [[tcp, udp], [v4, v6], [arp, v4]] {
            assert!(
                matches!(
                    FlowMatch::from_specs(&bad),
                    Err(Error::InvalidArgument { arg: "specs", .. })
                ),
                "{bad:?}"
            );
        }
        // The same constraint twice is not a contradiction.
        assert!(FlowMatch::from_specs(&[v4, v4, tcp]).is_ok());
        let all = FlowMatch::from_specs(&[]).unwrap();
        assert_eq!(all.criteria_enable(), 0);
        assert!(all.matches(&L24::new()));
    }
}
