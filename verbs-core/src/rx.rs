//! Raw Ethernet receive CQE fields and VLAN insertion on send.
//!
//! A receive CQE of a raw packet QP (or of an RQ behind a TIR) carries, in
//! the words the RDMA fields do not use, what the device found in the
//! frame: the L3 and L4 header types, whether the L2/L3/L4 checksums were
//! good, the stripped customer VLAN tag, the RSS hash and which fields it
//! covered, and the flow tag of the steering rule that matched. [`RxCqe`]
//! keeps those CQE words as they were read and decodes each field when it
//! is asked for, so a poll pays only for copying the words
//! ([`Cq::poll_one_rx`](crate::Cq::poll_one_rx)).
//!
//! CQE byte offsets (Linux `struct mlx5_cqe64`, rdma-core `mlx5dv.h`):
//! `rss_hash_result` 0x0c (be32), `rss_hash_type` 0x10, `check_sum` 0x14
//! (be16), `hds_ip_ext` 0x1c (bit 0 L2 OK, bit 1 L3 OK, bit 2 L4 OK),
//! `l4_hdr_type_etc` 0x1d (bits 6:4 L4 header type, bits 3:2 L3 header
//! type, bit 0 customer VLAN present), `vlan_info` 0x1e (be16 TCI),
//! `timestamp` 0x30 (be64), `sop_drop_qpn` 0x38 (bits 23:0 the flow tag
//! on a raw receive).
//!
//! rdma-core reports `IBV_WC_IP_CSUM_OK` for a raw packet QP on an
//! Ethernet port whose device has `IBV_DEVICE_RAW_IP_CSUM` when both the
//! L3 and L4 OK bits are set and the L3 header type is IPv4
//! (`get_csum_ok` in providers/mlx5/cq.c); [`RxCqe::ip_csum_ok`] is that
//! rule, and the CQ applies it to the completions of handles marked with
//! [`QpCompletions::set_rx_csum`](crate::QpCompletions::set_rx_csum).

use platform::ring::Block64;

use crate::cq::cqe_offset;

/// `MLX5_CQE_L2_OK` (`hds_ip_ext` bit 0).
pub const CQE_L2_OK: u8 = 1 << 0;
/// `MLX5_CQE_L3_OK` (`hds_ip_ext` bit 1).
pub const CQE_L3_OK: u8 = 1 << 1;
/// `MLX5_CQE_L4_OK` (`hds_ip_ext` bit 2).
pub const CQE_L4_OK: u8 = 1 << 2;
/// `MLX5_FLOW_TAG_MASK`: the flow tag bits of `sop_drop_qpn`.
pub const FLOW_TAG_MASK: u32 = 0x00ff_ffff;

/// The L3 header type of a received frame (`l4_hdr_type_etc` bits 3:2,
/// `MLX5_CQE_L3_HDR_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3HdrType {
    /// `MLX5_CQE_L3_HDR_TYPE_NONE` (0): no IP header.
    None,
    /// `MLX5_CQE_L3_HDR_TYPE_IPV6` (1).
    Ipv6,
    /// `MLX5_CQE_L3_HDR_TYPE_IPV4` (2).
    Ipv4,
    /// The value 3, which the PRM does not define.
    Reserved,
}

/// The L4 header type of a received frame (`l4_hdr_type_etc` bits 6:4,
/// Linux `CQE_L4_HDR_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4HdrType {
    /// 0: no L4 header the device recognises.
    None,
    /// 1: TCP without the ACK flag.
    TcpNoAck,
    /// 2: UDP.
    Udp,
    /// 3: TCP with ACK and no payload.
    TcpAckNoData,
    /// 4: TCP with ACK and payload.
    TcpAckAndData,
    /// 5..7, which the PRM does not define (the raw value).
    Reserved(u8),
}

impl L4HdrType {
    /// Whether the frame is TCP (any of the three TCP kinds).
    pub fn is_tcp(self) -> bool {
        matches!(
            self,
            Self::TcpNoAck | Self::TcpAckNoData | Self::TcpAckAndData
        )
    }
}

/// The raw-Ethernet fields of one receive CQE, kept as the CQE words and
/// decoded on demand (the `ibv_wc_read_*` of rdma-core's extended CQ, and
/// the CQE fields Linux `mlx5e` reads).
///
/// ```
/// use verbs_core::{L3HdrType, L4HdrType, RxCqe};
/// let mut cqe = [0u8; 64];
/// cqe[0x1c] = 0x07; // L2, L3, L4 OK
/// cqe[0x1d] = 0x29; // UDP, IPv4, VLAN present
/// cqe[0x1e..0x20].copy_from_slice(&0x6064u16.to_be_bytes());
/// cqe[0x0c..0x10].copy_from_slice(&0x1234_5678u32.to_be_bytes());
/// cqe[0x38..0x3c].copy_from_slice(&0x0000_0abcu32.to_be_bytes());
/// let rx = RxCqe::from_bytes(&cqe);
/// assert_eq!(rx.l3_hdr_type(), L3HdrType::Ipv4);
/// assert_eq!(rx.l4_hdr_type(), L4HdrType::Udp);
/// assert!(rx.ip_csum_ok() && rx.cvlan_present());
/// assert_eq!((rx.vlan_tci(), rx.vlan_id(), rx.vlan_pcp()), (0x6064, 0x064, 3));
/// assert_eq!((rx.rss_hash(), rx.flow_tag()), (0x1234_5678, 0xabc));
/// cqe[0x30..0x38].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
/// assert_eq!(RxCqe::from_bytes(&cqe).timestamp(), 0x0102_0304_0506_0708);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RxCqe {
    /// CQE bytes 0x0c..0x20 as they are in memory: `rss_hash_result`,
    /// `rss_hash_type`, `ml_path`, reserved, `check_sum`, `slid`,
    /// `flags_rqpn`, `hds_ip_ext`, `l4_hdr_type_etc`, `vlan_info`.
    words: [u8; 20],
    /// `timestamp` as in memory (big-endian).
    timestamp: [u8; 8],
    /// `sop_drop_qpn` as in memory (big-endian).
    sop_drop_qpn: [u8; 4],
}

impl RxCqe {
    /// Offset of the first kept byte in the CQE.
    const BASE: usize = cqe_offset::RSS_HASH_RESULT;

    /// From a 64-byte CQE image (memory order). Bytes past the end of a
    /// shorter slice read as zero.
    pub fn from_bytes(cqe: &[u8]) -> Self {
        let mut s = Self::default();
        for (i, b) in s.words.iter_mut().enumerate() {
            *b = cqe.get(Self::BASE + i).copied().unwrap_or(0);
        }
        for (i, b) in s.timestamp.iter_mut().enumerate() {
            *b = cqe.get(cqe_offset::TIMESTAMP + i).copied().unwrap_or(0);
        }
        for (i, b) in s.sop_drop_qpn.iter_mut().enumerate() {
            *b = cqe.get(cqe_offset::SOP_DROP_QPN + i).copied().unwrap_or(0);
        }
        s
    }

    /// From the CQE in queue memory (the CQ's poll; after the ownership
    /// check and the read barrier).
    #[inline]
    pub(crate) fn read(cqe: Block64<'_>) -> Self {
        let mut s = Self::default();
        for i in 0..5 {
            let w = cqe.r32(Self::BASE + 4 * i).to_ne_bytes();
            s.words[4 * i..4 * i + 4].copy_from_slice(&w);
        }
        s.timestamp[..4].copy_from_slice(&cqe.r32(cqe_offset::TIMESTAMP).to_ne_bytes());
        s.timestamp[4..].copy_from_slice(&cqe.r32(cqe_offset::TIMESTAMP + 4).to_ne_bytes());
        s.sop_drop_qpn = cqe.r32(cqe_offset::SOP_DROP_QPN).to_ne_bytes();
        s
    }

    #[inline(always)]
    fn byte(&self, cqe_off: usize) -> u8 {
        self.words[cqe_off - Self::BASE]
    }

    #[inline(always)]
    fn be16(&self, cqe_off: usize) -> u16 {
        u16::from_be_bytes([self.byte(cqe_off), self.byte(cqe_off + 1)])
    }

    /// `rss_hash_result`: the Toeplitz (or XOR) hash the TIR computed, 0
    /// when the frame was not hashed.
    pub fn rss_hash(&self) -> u32 {
        let b = Self::BASE;
        u32::from_be_bytes([
            self.byte(b),
            self.byte(b + 1),
            self.byte(b + 2),
            self.byte(b + 3),
        ])
    }

    /// `rss_hash_type`: which fields the hash covered (the TIR's
    /// `rx_hash_field_selector`, as the device reports it).
    pub fn rss_hash_type(&self) -> u8 {
        self.byte(cqe_offset::RSS_HASH_TYPE)
    }

    /// `check_sum`: the device's 16-bit ones' complement sum over the
    /// packet (Linux `CHECKSUM_COMPLETE`).
    pub fn check_sum(&self) -> u16 {
        self.be16(cqe_offset::CHECK_SUM)
    }

    /// `hds_ip_ext`: the L2/L3/L4 OK bits ([`CQE_L2_OK`], [`CQE_L3_OK`],
    /// [`CQE_L4_OK`]).
    pub fn hds_ip_ext(&self) -> u8 {
        self.byte(cqe_offset::HDS_IP_EXT)
    }

    /// `l4_hdr_type_etc` as stored.
    pub fn l4_hdr_type_etc(&self) -> u8 {
        self.byte(cqe_offset::L4_HDR_TYPE_ETC)
    }

    /// The L3 header type.
    pub fn l3_hdr_type(&self) -> L3HdrType {
        match (self.l4_hdr_type_etc() >> 2) & 3 {
            0 => L3HdrType::None,
            1 => L3HdrType::Ipv6,
            2 => L3HdrType::Ipv4,
            _ => L3HdrType::Reserved,
        }
    }

    /// The L4 header type.
    pub fn l4_hdr_type(&self) -> L4HdrType {
        match (self.l4_hdr_type_etc() >> 4) & 7 {
            0 => L4HdrType::None,
            1 => L4HdrType::TcpNoAck,
            2 => L4HdrType::Udp,
            3 => L4HdrType::TcpAckNoData,
            4 => L4HdrType::TcpAckAndData,
            v => L4HdrType::Reserved(v),
        }
    }

    /// The L2 OK bit.
    pub fn l2_ok(&self) -> bool {
        self.hds_ip_ext() & CQE_L2_OK != 0
    }

    /// The L3 OK bit (IP header checksum good).
    pub fn l3_ok(&self) -> bool {
        self.hds_ip_ext() & CQE_L3_OK != 0
    }

    /// The L4 OK bit (TCP/UDP checksum good).
    pub fn l4_ok(&self) -> bool {
        self.hds_ip_ext() & CQE_L4_OK != 0
    }

    /// `IBV_WC_IP_CSUM_OK` as rdma-core derives it: L3 and L4 OK and an
    /// IPv4 header.
    pub fn ip_csum_ok(&self) -> bool {
        let both = CQE_L3_OK | CQE_L4_OK;
        self.hds_ip_ext() & both == both && self.l3_hdr_type() == L3HdrType::Ipv4
    }

    /// Whether the device stripped a customer VLAN tag into
    /// [`vlan_tci`](Self::vlan_tci) (`l4_hdr_type_etc` bit 0, Linux
    /// `cqe_has_vlan`).
    pub fn cvlan_present(&self) -> bool {
        self.l4_hdr_type_etc() & 1 != 0
    }

    /// `vlan_info`: the stripped tag's TCI (`ibv_wc_read_cvlan`, which
    /// returns it whether or not [`cvlan_present`](Self::cvlan_present)).
    pub fn vlan_tci(&self) -> u16 {
        self.be16(cqe_offset::VLAN_INFO)
    }

    /// The VLAN ID (the TCI's low 12 bits).
    pub fn vlan_id(&self) -> u16 {
        self.vlan_tci() & 0x0fff
    }

    /// The priority code point (the TCI's top 3 bits).
    pub fn vlan_pcp(&self) -> u8 {
        (self.vlan_tci() >> 13) as u8
    }

    /// The flow tag of the steering rule that delivered the frame
    /// (`ibv_wc_read_flow_tag`: `sop_drop_qpn & MLX5_FLOW_TAG_MASK`).
    pub fn flow_tag(&self) -> u32 {
        u32::from_be_bytes(self.sop_drop_qpn) & FLOW_TAG_MASK
    }

    /// `timestamp`: when the device completed the receive
    /// (`ibv_wc_read_completion_ts`, the CQE's be64 as it is). With the
    /// RQ's `ts_format` free-running (ConnectX-4/5) it counts ticks of the
    /// device clock, `device_frequency_khz` of the HCA caps, the clock the
    /// initialization segment's `internal_timer_h`/`_l` show; with the
    /// real-time format (`ts_format` 1, later ConnectX), seconds in bits
    /// 63:32 and nanoseconds in bits 31:0.
    pub fn timestamp(&self) -> u64 {
        u64::from_be_bytes(self.timestamp)
    }
}

/// VLAN insertion for a raw packet send
/// ([`SendQueue::post_send_vlan`](crate::SendQueue::post_send_vlan)), as
/// Linux `mlx5e` encodes it in the Ethernet segment:
///
/// - with inline headers, the tag is inserted into them after the two MAC
///   addresses (the 4 bytes `tpid`, `tci`), and `inline_hdr_sz` counts
///   them;
/// - without inline headers (vport min inline mode none), the segment's
///   bytes 12..16 become `insert.type` = `MLX5_ETH_WQE_INSERT_VLAN`
///   (0x8000), with `MLX5_ETH_WQE_SVLAN` (0x0001) for an 802.1ad tag, and
///   `insert.vlan_tci`.
///
/// rdma-core's mlx5 provider has no VLAN insertion for raw packet QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanInsert {
    /// Tag control information (PCP, DEI, VLAN ID).
    pub tci: u16,
    /// An 802.1ad service tag (TPID 0x88a8) instead of 802.1Q (0x8100).
    pub svlan: bool,
}

impl VlanInsert {
    /// An 802.1Q customer tag.
    pub const fn cvlan(tci: u16) -> Self {
        Self { tci, svlan: false }
    }

    /// The tag's TPID.
    pub const fn tpid(self) -> u16 {
        if self.svlan { 0x88a8 } else { 0x8100 }
    }

    /// The 4 tag bytes as they go on the wire.
    pub const fn tag_bytes(self) -> [u8; 4] {
        let t = self.tpid().to_be_bytes();
        let c = self.tci.to_be_bytes();
        [t[0], t[1], c[0], c[1]]
    }

    /// `insert.type` of the Ethernet segment (hardware insertion).
    pub const fn insert_type(self) -> u16 {
        ETH_WQE_INSERT_VLAN | if self.svlan { ETH_WQE_SVLAN } else { 0 }
    }
}

/// Where a raw packet send's inline headers end in its gather list, when
/// they are taken from the front of the list as rdma-core's mlx5 provider
/// takes them (`copy_eth_inline_headers`: the first `eth_min_inline_size`
/// bytes, across entries if need be); the rest of the list goes into data
/// segments. A libibverbs layer over verbs-core copies the header bytes
/// from the memory behind the entries into
/// [`SendWr::eth_headers`](crate::SendWr::eth_headers) and posts
/// [`data`](Self::data) as the gather list.
///
/// ```
/// use verbs_core::{EthSplit, Sge};
/// let sgl = [
///     Sge { addr: 0x1000, length: 10, lkey: 1 },
///     Sge { addr: 0x2000, length: 20, lkey: 2 },
/// ];
/// let s = EthSplit::new(&sgl, 18).unwrap();
/// assert_eq!((s.index, s.offset), (1, 8));
/// let mut out = [Sge::default(); 2];
/// assert_eq!(s.data(&sgl, &mut out), &[Sge { addr: 0x2008, length: 12, lkey: 2 }]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthSplit {
    /// Index of the first entry with data left after the headers
    /// (`sgl.len()` when the headers take everything).
    pub index: usize,
    /// Bytes of that entry the headers took.
    pub offset: u32,
}

impl EthSplit {
    /// The split of `sgl` after `n` header bytes. A list with fewer bytes,
    /// or an empty list, is refused with
    /// [`Error::EthSegment`](crate::Error::EthSegment) (the
    /// provider's `EINVAL`).
    pub fn new(sgl: &[crate::Sge], n: usize) -> Result<Self, crate::Error> {
        if sgl.is_empty() {
            return Err(crate::Error::EthSegment(crate::error::ETH_NO_SGE));
        }
        let mut left = n;
        for (index, s) in sgl.iter().enumerate() {
            let len = s.length as usize;
            if left < len {
                return Ok(Self {
                    index,
                    offset: left as u32,
                });
            }
            left -= len;
            if left == 0 {
                return Ok(Self {
                    index: index + 1,
                    offset: 0,
                });
            }
        }
        Err(crate::Error::EthSegment(crate::error::ETH_SHORT))
    }

    /// The data part of `sgl` written into `out` (the entry at
    /// [`index`](Self::index) shortened by [`offset`](Self::offset), then
    /// the rest); gives the filled prefix of `out`, cut at its length.
    pub fn data<'o>(&self, sgl: &[crate::Sge], out: &'o mut [crate::Sge]) -> &'o [crate::Sge] {
        let rest = sgl.get(self.index..).unwrap_or(&[]);
        let n = rest.len().min(out.len());
        for (i, (o, s)) in out.iter_mut().zip(rest).enumerate() {
            *o = *s;
            if i == 0 {
                o.addr = s.addr.wrapping_add(u64::from(self.offset));
                o.length = s.length.saturating_sub(self.offset);
            }
        }
        &out[..n]
    }
}

/// `MLX5_ETH_WQE_INSERT_VLAN`.
pub const ETH_WQE_INSERT_VLAN: u16 = 1 << 15;
/// `MLX5_ETH_WQE_SVLAN`.
pub const ETH_WQE_SVLAN: u16 = 1 << 0;
/// Bytes of the two MAC addresses, after which an inserted tag goes.
pub const ETH_MACS_LEN: usize = 12;
/// Bytes of a VLAN tag.
pub const VLAN_HLEN: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn cqe(ext: u8, types: u8) -> RxCqe {
        let mut b = [0u8; 64];
        b[0x1c] = ext;
        b[0x1d] = types;
        RxCqe::from_bytes(&b)
    }

    #[test]
    fn csum_ok_needs_l3_l4_ok_and_ipv4() {
        for ext in 0..8u8 {
            for l3 in 0..4u8 {
                let c = cqe(ext, l3 << 2);
                let want = ext & 6 == 6 && l3 == 2;
                assert_eq!(c.ip_csum_ok(), want, "ext {ext} l3 {l3}");
            }
        }
    }

    #[test]
    fn header_types_decode_every_value() {
        let l4 = [
            L4HdrType::None,
            L4HdrType::TcpNoAck,
            L4HdrType::Udp,
            L4HdrType::TcpAckNoData,
            L4HdrType::TcpAckAndData,
            L4HdrType::Reserved(5),
            L4HdrType::Reserved(6),
            L4HdrType::Reserved(7),
        ];
        for (v, want) in l4.iter().enumerate() {
            assert_eq!(cqe(0, (v as u8) << 4).l4_hdr_type(), *want);
        }
        assert!(L4HdrType::TcpAckAndData.is_tcp() && !L4HdrType::Udp.is_tcp());
        let l3 = [
            L3HdrType::None,
            L3HdrType::Ipv6,
            L3HdrType::Ipv4,
            L3HdrType::Reserved,
        ];
        for (v, want) in l3.iter().enumerate() {
            assert_eq!(cqe(0, (v as u8) << 2).l3_hdr_type(), *want);
        }
        assert!(cqe(0, 1).cvlan_present() && !cqe(0, 0xfe).cvlan_present());
    }

    #[test]
    fn short_images_read_zero() {
        assert_eq!(RxCqe::from_bytes(&[0xff; 10]), RxCqe::default());
    }

    #[test]
    fn eth_split_takes_the_first_bytes_across_entries() {
        use crate::{Error, Sge};
        let sge = |addr, length| Sge {
            addr,
            length,
            lkey: 7,
        };
        let sgl = [sge(0x100, 10), sge(0x200, 8), sge(0x300, 0), sge(0x400, 30)];
        let at = |n| EthSplit::new(&sgl, n).map(|s| (s.index, s.offset));
        assert_eq!(at(0), Ok((0, 0)));
        assert_eq!(at(4), Ok((0, 4)));
        assert_eq!(at(10), Ok((1, 0)));
        // Exactly the first two: the zero-length entry is next.
        assert_eq!(at(18), Ok((2, 0)));
        assert_eq!(at(20), Ok((3, 2)));
        assert_eq!(at(48), Ok((4, 0)));
        let short = Error::EthSegment("inline headers shorter than the queue's minimum");
        assert_eq!(at(49), Err(short));
        assert_eq!(
            EthSplit::new(&[], 0),
            Err(Error::EthSegment(
                "a raw packet send needs at least one SGE"
            ))
        );
        let mut out = [Sge::default(); 4];
        let s = EthSplit::new(&sgl, 20).unwrap();
        assert_eq!(s.data(&sgl, &mut out), &[sge(0x402, 28)]);
        let s = EthSplit::new(&sgl, 48).unwrap();
        assert!(s.data(&sgl, &mut out).is_empty());
        let mut one = [Sge::default(); 1];
        let s = EthSplit::new(&sgl, 4).unwrap();
        assert_eq!(s.data(&sgl, &mut one), &[sge(0x104, 6)]);
    }

    #[test]
    fn vlan_insert_encodings() {
        let c = VlanInsert::cvlan(0x2064);
        assert_eq!(c.tag_bytes(), [0x81, 0x00, 0x20, 0x64]);
        assert_eq!(c.insert_type(), 0x8000);
        let s = VlanInsert {
            tci: 5,
            svlan: true,
        };
        assert_eq!(s.tag_bytes(), [0x88, 0xa8, 0x00, 0x05]);
        assert_eq!(s.insert_type(), 0x8001);
    }
}
