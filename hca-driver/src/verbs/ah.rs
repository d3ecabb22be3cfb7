//! Addressing: address-handle attributes for connected QPs' paths and UD
//! address handles, over InfiniBand (LID) and RoCE (GID, destination MAC).

use core::fmt;

use firmware_cmds::qp::Ads;
use platform::Platform;
use verbs_core::av::{flow_label_to_udp_sport, mlx5_static_rate};
use verbs_core::{AddressVector, GlobalRoute, PortLinkLayer, UdDest};

use crate::error::{Error, Result};
use crate::info::LinkLayer;
use crate::verbs::attr::{Gid, RoceVersion};
use crate::verbs::context::Context;
use crate::verbs::pd::Pd;
use crate::verbs::share::{DefaultShare, Handle, Share};

/// Address attributes (`struct ibv_ah_attr`), plus the destination MAC of
/// a RoCE path when it cannot be derived from the destination GID.
///
/// On Ethernet (RoCE) a GRH is required; the destination MAC is `dmac`
/// when given, else the one a link-local (EUI-64) or multicast destination
/// GID maps to; an IPv4-mapped or routable GID needs `dmac` (this driver
/// does no neighbour resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level (RoCE: the Ethernet priority, 0..=7).
    pub sl: u8,
    /// Source path bits (InfiniBand).
    pub src_path_bits: u8,
    /// `enum ibv_rate` (0 = port rate).
    pub static_rate: u8,
    /// Global route (GRH): destination GID, source GID index, hop limit,
    /// traffic class, flow label.
    pub grh: Option<GlobalRoute>,
    /// Port (1-based).
    pub port_num: u8,
    /// Destination MAC (RoCE).
    pub dmac: Option<[u8; 6]>,
}

impl Default for AhAttr {
    fn default() -> Self {
        Self::new()
    }
}

impl AhAttr {
    /// Everything zero, no GRH.
    pub const fn new() -> Self {
        Self {
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            grh: None,
            port_num: 0,
            dmac: None,
        }
    }

    /// A RoCE path from `port` to `dgid`, sent with source GID
    /// `sgid_index`, hop limit 64.
    pub const fn roce(port: u8, dgid: Gid, sgid_index: u8) -> Self {
        let mut a = Self::new();
        a.port_num = port;
        a.grh = Some(GlobalRoute {
            dgid: dgid.0,
            flow_label: 0,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
        });
        a
    }

    /// An InfiniBand path from `port` to `dlid`.
    pub const fn ib(port: u8, dlid: u16) -> Self {
        let mut a = Self::new();
        a.port_num = port;
        a.dlid = dlid;
        a
    }

    /// Sets the destination MAC.
    pub const fn dmac(mut self, mac: [u8; 6]) -> Self {
        self.dmac = Some(mac);
        self
    }

    /// The attributes an address path (`ads`) describes.
    ///
    /// A RoCE path (one with a remote MAC) always has a global route,
    /// whatever its `grh` bit says (Linux's `to_rdma_ah_attr`).
    pub(crate) fn from_ads(p: &Ads) -> Self {
        let mac = p.rmac();
        let roce = mac != [0; 6];
        let grh = (p.get(Ads::grh) || roce).then(|| GlobalRoute {
            dgid: p.get(Ads::rgid_rip),
            flow_label: p.get(Ads::flow_label),
            sgid_index: p.get(Ads::src_addr_index),
            hop_limit: p.get(Ads::hop_limit),
            traffic_class: p.get(Ads::tclass),
        });
        AhAttr {
            dlid: p.get(Ads::rlid),
            sl: if roce {
                p.get(Ads::eth_prio)
            } else {
                p.get(Ads::sl)
            },
            src_path_bits: p.get(Ads::mlid),
            static_rate: 0,
            grh,
            port_num: p.get(Ads::vhca_port_num),
            dmac: roce.then_some(mac),
        }
    }
}

/// What a path needs from the port: RoCE version and destination MAC.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Resolved {
    /// An InfiniBand port.
    Ib,
    /// An Ethernet port.
    Roce {
        /// The source GID entry is RoCE v2.
        v2: bool,
        /// Destination MAC.
        dmac: [u8; 6],
    },
}

impl<P: Platform + 'static, S: Share> Context<P, S> {
    /// Checks an address against the port and resolves what RoCE needs.
    pub(crate) fn resolve(&self, a: &AhAttr) -> Result<Resolved> {
        self.check_port(a.port_num)?;
        if a.sl > 15 {
            return Err(Error::InvalidAttribute {
                attr: "ah_attr.sl",
                value: u64::from(a.sl),
                reason: "a service level is 0..=15",
            });
        }
        match self.hca().caps().link_layer() {
            LinkLayer::InfiniBand => Ok(Resolved::Ib),
            LinkLayer::Ethernet => {
                let grh = a
                    .grh
                    .ok_or(Error::AddressHandle(verbs_core::av::AhError::GrhRequired))?;
                let e = self
                    .query_gid_entry(a.port_num, u16::from(grh.sgid_index))?
                    .ok_or(Error::InvalidAttribute {
                        attr: "ah_attr.grh.sgid_index",
                        value: u64::from(grh.sgid_index),
                        reason: "the port's GID table entry is empty",
                    })?;
                let dmac = match a.dmac.or_else(|| Gid(grh.dgid).mac()) {
                    Some(m) => m,
                    None => {
                        return Err(Error::InvalidAttribute {
                            attr: "ah_attr.dmac",
                            value: 0,
                            reason: "the destination GID maps to no MAC address (IPv4-mapped or routable): give dmac",
                        });
                    }
                };
                Ok(Resolved::Roce {
                    v2: e.version == RoceVersion::V2,
                    dmac,
                })
            }
        }
    }
}

/// `rdma_calc_flow_label`: a flow label from the two QP numbers, for the
/// RoCE v2 UDP source port of a connection without one.
pub(crate) fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & u64::from(verbs_core::av::GRH_FLOWLABEL_MASK)) as u32
}

/// Fills a QP's primary address path from `a` (the whole path: port and
/// P_Key index too, since the firmware takes the path as one), as Linux's
/// `mlx5_set_path` does: the `grh` bit on InfiniBand only (a RoCE path
/// always carries its GRH fields, and the bit stays 0), and on RoCE v2
/// the DSCP from the traffic class.
pub(crate) fn fill_ads(
    ads: &mut Ads,
    a: &AhAttr,
    r: Resolved,
    pkey_index: u16,
    lqpn: u32,
    rqpn: u32,
) -> Result<()> {
    ads.set(Ads::vhca_port_num, a.port_num)?
        .set(Ads::pkey_index, pkey_index)?
        .set(Ads::stat_rate, mlx5_static_rate(a.static_rate))?;
    if let Some(g) = a.grh {
        if g.flow_label > verbs_core::av::GRH_FLOWLABEL_MASK {
            return Err(Error::InvalidAttribute {
                attr: "ah_attr.grh.flow_label",
                value: u64::from(g.flow_label),
                reason: "a flow label has 20 bits",
            });
        }
        ads.set(Ads::grh, matches!(r, Resolved::Ib))?
            .set(Ads::src_addr_index, g.sgid_index)?
            .set(Ads::hop_limit, g.hop_limit)?
            .set(Ads::tclass, g.traffic_class)?
            .set(Ads::flow_label, g.flow_label)?
            .set(Ads::rgid_rip, g.dgid)?;
    }
    match r {
        Resolved::Ib => {
            ads.set(Ads::rlid, a.dlid)?
                .set(Ads::mlid, a.src_path_bits & 0x7f)?
                .set(Ads::sl, a.sl & 0xf)?;
        }
        Resolved::Roce { v2, dmac } => {
            ads.set_rmac(dmac);
            ads.set(Ads::eth_prio, a.sl & 0x7)?;
            if v2 {
                ads.set(Ads::dscp, a.grh.map_or(0, |g| g.traffic_class >> 2))?;
                let fl = match a.grh.map_or(0, |g| g.flow_label) {
                    0 => calc_flow_label(lqpn, rqpn),
                    f => f,
                };
                ads.set(Ads::udp_sport, flow_label_to_udp_sport(fl))?;
            }
        }
    }
    Ok(())
}

/// An address handle (`ibv_ah`) for UD sends: the 48-byte address vector
/// rdma-core's `mlx5_create_ah` builds. Holds a handle of its PD.
pub struct Ah<P: Platform + 'static, S: Share = DefaultShare> {
    pd: S::Ref<Pd<P, S>>,
    av: AddressVector,
    attr: AhAttr,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Ah<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AH {:?} ({:?})", self.attr, self.av)
    }
}

impl<P: Platform + 'static, S: Share> Ah<P, S> {
    /// Creates an address handle (`ibv_create_ah`) in the PD behind `pd`.
    pub fn create(pd: &impl Handle<Pd<P, S>, Share = S>, attr: &AhAttr) -> Result<Self> {
        let ctx = pd.context();
        let r = ctx.resolve(attr)?;
        let link = match r {
            Resolved::Ib => PortLinkLayer::Infiniband,
            Resolved::Roce { v2, dmac } => PortLinkLayer::Ethernet {
                roce_v2: v2,
                dmac,
                sport_if_no_flow_label: ctx.next_sport(),
            },
        };
        let va = verbs_core::AhAttr {
            dlid: attr.dlid,
            sl: attr.sl,
            src_path_bits: attr.src_path_bits,
            static_rate: attr.static_rate,
            grh: attr.grh,
            port_num: attr.port_num,
        };
        let av = AddressVector::from_ah_attr(&va, link).map_err(Error::AddressHandle)?;
        Ok(Ah {
            pd: pd.clone().into_ref(),
            av,
            attr: *attr,
        })
    }

    /// The address vector.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The attributes it was made from.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The PD's handle.
    pub fn pd(&self) -> &S::Ref<Pd<P, S>> {
        &self.pd
    }

    /// A UD destination through this handle (`wr.ud`).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest<'_> {
        UdDest {
            av: &self.av,
            remote_qpn,
            remote_qkey,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values worked out by hand from Linux's
    /// `rdma_calc_flow_label` (v = lqpn * rqpn; v ^= v >> 20; v ^= v >> 40;
    /// low 20 bits) and `rdma_flow_label_to_udp_sport` (low 14 bits XOR
    /// bits 19:14, OR 0xc000), not by calling the code under test twice.
    #[test]
    fn flow_label_from_qpns() {
        assert_eq!(calc_flow_label(0, 5), 0);
        // 0x1234 * 0x5678 = 0x626_0060; ^ (>> 20 = 0x62) = 0x626_0002.
        assert_eq!(calc_flow_label(0x1234, 0x5678), 0x6_0002);
        assert_eq!(calc_flow_label(0x5678, 0x1234), 0x6_0002);
        // 0xffffff^2 = 0xffff_fe00_0001: both shifts matter.
        assert_eq!(calc_flow_label(0xff_ffff, 0xff_ffff), 0xf_ff1e);
        // 0x0002 ^ (0x6_0000 >> 14 = 0x18) = 0x1a.
        assert_eq!(flow_label_to_udp_sport(0x6_0002), 0xc01a);
        assert_eq!(flow_label_to_udp_sport(0xf_ff1e), 0xff21);
    }

    #[test]
    fn infiniband_paths_name_the_lid() {
        let mut ads = Ads::new();
        let a = AhAttr {
            sl: 5,
            src_path_bits: 3,
            static_rate: 3,
            ..AhAttr::ib(2, 0x1234)
        };
        fill_ads(&mut ads, &a, Resolved::Ib, 7, 1, 2).unwrap();
        // The image at the PRM's offsets: pkey_index at 0x02, mlid at
        // byte 0x05 bits 6:0, rlid at 0x06, stat_rate at byte 0x0a bits
        // 3:0 (IB_RATE_10_GBPS = 3 is 3 + MLX5_STAT_RATE_OFFSET 5 = 8 in
        // Linux's ib_rate_to_mlx5), sl at byte 0x24 bits 3:0,
        // vhca_port_num at 0x25.
        let img = firmware_cmds::layout::Layout::bytes(&ads);
        assert_eq!(img[0x02..0x04], [0, 7]);
        assert_eq!(img[0x05], 3);
        assert_eq!(img[0x06..0x08], [0x12, 0x34]);
        assert_eq!(img[0x0a] & 0x0f, 8);
        assert_eq!(img[0x24] & 0x0f, 5);
        assert_eq!(img[0x25], 2);
        assert_eq!(ads.get(Ads::rlid), 0x1234);
        assert_eq!((ads.get(Ads::sl), ads.get(Ads::mlid)), (5, 3));
        assert_eq!(ads.get(Ads::stat_rate), 8);
        assert_eq!(
            (ads.get(Ads::vhca_port_num), ads.get(Ads::pkey_index)),
            (2, 7)
        );
        assert!(!ads.get(Ads::grh));
        assert_eq!(ads.rmac(), [0; 6]);
        let b = AhAttr::from_ads(&ads);
        assert_eq!(
            (b.dlid, b.sl, b.src_path_bits, b.port_num, b.dmac),
            (0x1234, 5, 3, 2, None)
        );
        let bad = AhAttr {
            grh: Some(GlobalRoute {
                flow_label: 1 << 20,
                ..GlobalRoute::default()
            }),
            ..a
        };
        assert!(fill_ads(&mut ads, &bad, Resolved::Ib, 0, 1, 2).is_err());
    }

    #[test]
    fn paths_round_trip_through_ads() {
        let mut ads = Ads::new();
        let a = AhAttr::roce(
            1,
            Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 1, 2, 0xff, 0xfe, 3, 4, 5]),
            0,
        );
        let r = Resolved::Roce {
            v2: true,
            dmac: [0, 1, 2, 3, 4, 5],
        };
        fill_ads(&mut ads, &a, r, 0, 0x10, 0x20).unwrap();
        // The image at the PRM's ads offsets (mlx5_ifc_ads_bits), not
        // through the decoder: grh is bit 23 of the dword at 0x04 and stays
        // 0 on RoCE (Linux's mlx5_set_path sets it for InfiniBand only),
        // rgid_rip at 0x10, udp_sport at 0x22, vhca_port_num at 0x25, rmac
        // at 0x26.
        let img = firmware_cmds::layout::Layout::bytes(&ads);
        assert_eq!(img[0x05] & 0x80, 0, "grh");
        assert_eq!(img[0x10..0x20], a.grh.unwrap().dgid, "rgid_rip");
        // No flow label: rdma_calc_flow_label(0x10, 0x20) = 0x200, so the
        // UDP source port is 0xc200.
        assert_eq!(img[0x22..0x24], [0xc2, 0x00], "udp_sport");
        assert_eq!(img[0x25], 1, "vhca_port_num");
        assert_eq!(img[0x26..0x2c], [0, 1, 2, 3, 4, 5], "rmac");
        // And the decoder reads the same image back, the GRH included.
        let b = AhAttr::from_ads(&ads);
        assert_eq!(b.grh, a.grh);
        assert_eq!(b.port_num, 1);
        assert_eq!(b.dmac, Some([0, 1, 2, 3, 4, 5]));
    }
}
