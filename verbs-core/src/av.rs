//! The 48-byte UD address vector (`struct mlx5_wqe_av`, the PRM datagram
//! segment) and how `mlx5_create_ah` builds it from address-handle
//! attributes.
//!
//! Layout (big-endian fields): qkey (0), reserved (4), `dqp_dct` (8),
//! `stat_rate_sl` (12), `fl_mlid` (13), `rlid` (14), reserved (16..20),
//! `rmac` (20..26), `tclass` (26), `hop_limit` (27), `grh_gid_fl` (28),
//! `rgid` (32..48). An address handle carries qkey and `dqp_dct` as zero;
//! the send path fills them in per work request.

use crate::wqe::EXTENDED_UD_AV;

/// Size of the address vector / datagram segment.
pub const AV_SIZE: usize = 48;

/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`.
pub const ROCE_UDP_SPORT_MIN: u16 = 0xc000;
/// `IB_GRH_FLOWLABEL_MASK`.
pub const GRH_FLOWLABEL_MASK: u32 = 0x000f_ffff;

/// A 48-byte address vector in device byte order, as an address handle
/// holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct AddressVector(pub [u8; AV_SIZE]);

impl core::fmt::Debug for AddressVector {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "AddressVector(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Global routing attributes (`struct ibv_global_route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// Address-handle attributes (`struct ibv_ah_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// Destination LID (IB).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits (IB).
    pub src_path_bits: u8,
    /// `enum ibv_rate` (0 = port rate).
    pub static_rate: u8,
    /// GRH, required on Ethernet (RoCE) ports.
    pub grh: Option<GlobalRoute>,
    /// Port number (1-based).
    pub port_num: u8,
}

/// What the port and the GID table say about the destination, which
/// `mlx5_create_ah` asks the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortLinkLayer {
    /// InfiniBand port.
    Infiniband,
    /// Ethernet port (RoCE).
    Ethernet {
        /// The source GID is a RoCE v2 GID (UDP encapsulation).
        roce_v2: bool,
        /// Destination MAC address (resolved from the GID by the driver).
        dmac: [u8; 6],
        /// UDP source port to use when the flow label is 0 (rdma-core picks
        /// a random port in 0xc000..=0xffff; a no_std driver supplies its
        /// own). Ignored for RoCE v1 and when the flow label is non-zero.
        sport_if_no_flow_label: u16,
    },
}

/// Why an address handle cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AhError {
    /// Ethernet ports need a GRH (`is_global`).
    #[error("an Ethernet (RoCE) address handle needs a GRH")]
    GrhRequired,
    /// A RoCE v2 UDP source port outside 0xc000..=0xffff.
    #[error("RoCE v2 UDP source port {0:#x} is outside 0xc000..=0xffff")]
    BadSport(u16),
}

/// `ib_to_mlx5_rate_table`: `enum ibv_rate` to the PRM static rate.
const IB_TO_MLX5_RATE: [u8; 23] = [
    0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0,
];

/// The PRM static-rate code for an `enum ibv_rate` value (0 = unlimited).
pub fn mlx5_static_rate(ibv_rate: u8) -> u8 {
    IB_TO_MLX5_RATE
        .get(usize::from(ibv_rate))
        .copied()
        .unwrap_or(0)
}

/// `ibv_flow_label_to_udp_sport`: the RoCE v2 UDP source port derived from a
/// non-zero flow label.
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let fl_low = fl & 0x03fff;
    let fl_high = fl & 0xfc000;
    ((fl_low ^ (fl_high >> 14)) as u16) | ROCE_UDP_SPORT_MIN
}

impl AddressVector {
    /// Builds the address vector exactly as rdma-core's `mlx5_create_ah`
    /// does for `attr` on a port with `link`.
    pub fn from_ah_attr(attr: &AhAttr, link: PortLinkLayer) -> Result<Self, AhError> {
        let mut av = [0u8; AV_SIZE];
        let rate = mlx5_static_rate(attr.static_rate);
        let grh_bit: u32;
        match link {
            PortLinkLayer::Ethernet {
                roce_v2,
                dmac,
                sport_if_no_flow_label,
            } => {
                let Some(grh) = attr.grh else {
                    return Err(AhError::GrhRequired);
                };
                if roce_v2 {
                    let fl = grh.flow_label & GRH_FLOWLABEL_MASK;
                    let sport = if fl != 0 {
                        flow_label_to_udp_sport(fl)
                    } else if sport_if_no_flow_label >= ROCE_UDP_SPORT_MIN {
                        sport_if_no_flow_label
                    } else {
                        return Err(AhError::BadSport(sport_if_no_flow_label));
                    };
                    av[14..16].copy_from_slice(&sport.to_be_bytes());
                }
                // RoCE packets always carry a GRH: the bit is reserved there.
                grh_bit = 0;
                av[12] = (rate << 4) | ((attr.sl & 0x7) << 1);
                av[20..26].copy_from_slice(&dmac);
            }
            PortLinkLayer::Infiniband => {
                av[13] = attr.src_path_bits & 0x7f;
                av[14..16].copy_from_slice(&attr.dlid.to_be_bytes());
                grh_bit = 1;
                av[12] = (rate << 4) | (attr.sl & 0xf);
            }
        }
        if let Some(grh) = attr.grh {
            av[26] = grh.traffic_class;
            av[27] = grh.hop_limit;
            let w = (grh_bit << 30)
                | (u32::from(grh.sgid_index) << 20)
                | (grh.flow_label & GRH_FLOWLABEL_MASK);
            av[28..32].copy_from_slice(&w.to_be_bytes());
            av[32..48].copy_from_slice(&grh.dgid);
        }
        Ok(Self(av))
    }

    /// The datagram segment for one UD work request: this address vector
    /// with the qkey at offset 0 and `remote_qpn | MLX5_EXTENDED_UD_AV` at
    /// offset 8, as six native-endian words whose memory image is the
    /// segment.
    #[inline(always)]
    pub fn datagram_words(&self, remote_qpn: u32, remote_qkey: u32) -> [u64; 6] {
        let mut w = [0u64; 6];
        for (i, x) in w.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.0[8 * i..8 * i + 8]);
            *x = u64::from_ne_bytes(b);
        }
        w[0] = crate::wqe::pair(platform::Be32::new(remote_qkey), platform::Be32::ZERO);
        let mut b1 = w[1].to_ne_bytes();
        b1[0..4].copy_from_slice(&((remote_qpn & 0xff_ffff) | EXTENDED_UD_AV).to_be_bytes());
        w[1] = u64::from_ne_bytes(b1);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_sport_from_flow_label() {
        assert_eq!(flow_label_to_udp_sport(0x5a5a5), 0xe5b3);
    }

    #[test]
    fn ethernet_needs_grh() {
        let attr = AhAttr {
            port_num: 1,
            ..Default::default()
        };
        let link = PortLinkLayer::Ethernet {
            roce_v2: true,
            dmac: [0; 6],
            sport_if_no_flow_label: 0xc000,
        };
        assert_eq!(
            AddressVector::from_ah_attr(&attr, link),
            Err(AhError::GrhRequired)
        );
        let attr = AhAttr {
            grh: Some(GlobalRoute::default()),
            ..attr
        };
        let av = AddressVector::from_ah_attr(&attr, link).unwrap();
        assert_eq!(av.0[14..16], [0xc0, 0]);
        let bad = PortLinkLayer::Ethernet {
            roce_v2: true,
            dmac: [0; 6],
            sport_if_no_flow_label: 5,
        };
        assert_eq!(
            AddressVector::from_ah_attr(&attr, bad),
            Err(AhError::BadSport(5))
        );
    }

    #[test]
    fn static_rate_table() {
        assert_eq!(mlx5_static_rate(0), 0);
        assert_eq!(mlx5_static_rate(3), 8);
        assert_eq!(mlx5_static_rate(200), 0);
    }
}
