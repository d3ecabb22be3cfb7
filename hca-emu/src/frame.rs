//! Building Ethernet frames: Ethernet II, an optional 802.1Q tag, IPv4
//! (RFC 791) or IPv6 (RFC 8200) without options or extension headers, UDP
//! (RFC 768) or TCP (RFC 9293), and the Internet checksum (RFC 1071) the
//! emulator's checksum insertion and its receive checks use too.
//!
//! The tests, examples and the `hca` tool's traffic generators build the
//! frames they send through [`Frame`], so there is one writer of these
//! header formats in the workspace:
//!
//! ```
//! use hca_emu::frame::{Frame, L3, L4};
//! let f = Frame::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
//!     .vlan(7)
//!     .l3(L3::V4([10, 0, 0, 1], [10, 0, 0, 2]))
//!     .l4(L4::Udp(1234, 4000))
//!     .payload(b"hello")
//!     .checksums()
//!     .pad_to(60)
//!     .build();
//! assert_eq!(f.len(), 60);
//! assert_eq!(hca_emu::frame::internet_checksum(&f[18..38]), 0);
//! ```

/// EtherType of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// Tag protocol identifier of an 802.1Q VLAN tag.
pub const ETH_P_VLAN: u16 = 0x8100;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number reserved for experimentation (RFC 3692), what a
/// frame with [`L4::None`] names in its IP header.
pub const IPPROTO_EXPERIMENT: u8 = 253;

/// The one's complement sum (RFC 1071) of `b` read as big-endian 16-bit
/// words (an odd last byte padded with zero), added to `s`, not folded.
pub fn ones_sum(b: &[u8], mut s: u32) -> u32 {
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    s
}

/// Folds a [`ones_sum`] to 16 bits and complements it: the checksum field.
pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The Internet checksum of `b` (an IPv4 header with its checksum field
/// 0 gives the field's value; a header with a valid checksum gives 0).
pub fn internet_checksum(b: &[u8]) -> u16 {
    fold(ones_sum(b, 0))
}

/// The network layer of a [`Frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    /// IPv4 from the first address to the second (TTL 64, no options).
    V4([u8; 4], [u8; 4]),
    /// IPv6 from the first address to the second (hop limit 64).
    V6([u8; 16], [u8; 16]),
    /// No IP header: this EtherType, then the L4 header (if any) and the
    /// payload.
    Other(u16),
}

/// The transport layer of a [`Frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// UDP from the first port to the second.
    Udp(u16, u16),
    /// TCP from the first port to the second: sequence number 1, no ACK
    /// number, data offset 5, flags PSH|ACK, window 65535.
    Tcp(u16, u16),
    /// No transport header: the payload follows the IP header.
    None,
}

/// A frame to build: its headers, payload and which checksums to fill
/// in. Checksums not asked for are 0 (legal for UDP over IPv4; what a
/// sender leaves for the device's checksum insertion).
#[derive(Clone, Debug)]
pub struct Frame<'a> {
    dmac: [u8; 6],
    smac: [u8; 6],
    vlan: Option<u16>,
    l3: L3,
    l4: L4,
    payload: &'a [u8],
    ip_checksum: bool,
    l4_checksum: bool,
    dont_fragment: bool,
    min_len: usize,
}

impl<'a> Frame<'a> {
    /// A frame from `smac` to `dmac`, IPv4 with UDP both from address and
    /// port 0 to 0 until [`Frame::l3`] and [`Frame::l4`] say otherwise, no
    /// payload, no checksums, no padding.
    pub fn new(dmac: [u8; 6], smac: [u8; 6]) -> Self {
        Frame {
            dmac,
            smac,
            vlan: None,
            l3: L3::V4([0; 4], [0; 4]),
            l4: L4::Udp(0, 0),
            payload: &[],
            ip_checksum: false,
            l4_checksum: false,
            dont_fragment: false,
            min_len: 0,
        }
    }

    /// An 802.1Q tag with this TCI (priority, DEI and VLAN ID) after the
    /// MAC addresses; `None` for an untagged frame.
    pub fn vlan(mut self, tci: impl Into<Option<u16>>) -> Self {
        self.vlan = tci.into();
        self
    }

    /// The network layer.
    pub fn l3(mut self, l3: L3) -> Self {
        self.l3 = l3;
        self
    }

    /// The transport layer.
    pub fn l4(mut self, l4: L4) -> Self {
        self.l4 = l4;
        self
    }

    /// The bytes after the last header.
    pub fn payload(mut self, payload: &'a [u8]) -> Self {
        self.payload = payload;
        self
    }

    /// Fills in the IPv4 header checksum.
    pub fn ip_checksum(mut self) -> Self {
        self.ip_checksum = true;
        self
    }

    /// Fills in the TCP or UDP checksum (over the IPv4 or IPv6 pseudo
    /// header; a UDP checksum that computes to 0 is sent as 0xffff).
    pub fn l4_checksum(mut self) -> Self {
        self.l4_checksum = true;
        self
    }

    /// Fills in every checksum: [`Frame::ip_checksum`] and
    /// [`Frame::l4_checksum`].
    pub fn checksums(self) -> Self {
        self.ip_checksum().l4_checksum()
    }

    /// Sets the IPv4 don't-fragment flag.
    pub fn dont_fragment(mut self) -> Self {
        self.dont_fragment = true;
        self
    }

    /// Pads the frame with zeros to at least `len` bytes (60: Ethernet's
    /// minimum without the FCS). Padding is not part of the IP datagram.
    pub fn pad_to(mut self, len: usize) -> Self {
        self.min_len = len;
        self
    }

    /// The frame's bytes (without an FCS).
    ///
    /// # Panics
    ///
    /// If the IP payload is longer than 65535 bytes (a test's mistake,
    /// not a frame any link carries).
    pub fn build(&self) -> Vec<u8> {
        let (proto, l4_hdr) = match self.l4 {
            L4::Udp(..) => (IPPROTO_UDP, 8),
            L4::Tcp(..) => (IPPROTO_TCP, 20),
            L4::None => (IPPROTO_EXPERIMENT, 0),
        };
        let l4_len = l4_hdr + self.payload.len();
        let l4_len16 = u16::try_from(l4_len).expect("L4 segment over 65535 bytes");
        let mut seg = Vec::with_capacity(l4_len);
        match self.l4 {
            L4::Udp(s, d) => {
                seg.extend_from_slice(&s.to_be_bytes());
                seg.extend_from_slice(&d.to_be_bytes());
                seg.extend_from_slice(&l4_len16.to_be_bytes());
                seg.extend_from_slice(&[0, 0]);
            }
            L4::Tcp(s, d) => {
                seg.extend_from_slice(&s.to_be_bytes());
                seg.extend_from_slice(&d.to_be_bytes());
                seg.extend_from_slice(&1u32.to_be_bytes()); // sequence number
                seg.extend_from_slice(&0u32.to_be_bytes()); // acknowledgement number
                seg.extend_from_slice(&[5 << 4, 0x18]); // data offset; PSH ACK
                seg.extend_from_slice(&0xffffu16.to_be_bytes()); // window
                seg.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
            }
            L4::None => {}
        }
        seg.extend_from_slice(self.payload);

        let mut f = Vec::with_capacity(18 + 40 + l4_len.max(self.min_len));
        f.extend_from_slice(&self.dmac);
        f.extend_from_slice(&self.smac);
        if let Some(tci) = self.vlan {
            f.extend_from_slice(&ETH_P_VLAN.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        // The pseudo header's sum (RFC 768, RFC 8200 section 8.1).
        let pseudo = match self.l3 {
            L3::V4(s, d) => {
                f.extend_from_slice(&ETH_P_IPV4.to_be_bytes());
                let mut h = [0u8; 20];
                h[0] = 0x45;
                let total = u16::try_from(20 + l4_len).expect("IPv4 datagram over 65535 bytes");
                h[2..4].copy_from_slice(&total.to_be_bytes());
                if self.dont_fragment {
                    h[6] = 0x40;
                }
                h[8] = 64;
                h[9] = proto;
                h[12..16].copy_from_slice(&s);
                h[16..20].copy_from_slice(&d);
                if self.ip_checksum {
                    let c = internet_checksum(&h);
                    h[10..12].copy_from_slice(&c.to_be_bytes());
                }
                f.extend_from_slice(&h);
                Some(ones_sum(&h[12..20], u32::from(proto) + u32::from(l4_len16)))
            }
            L3::V6(s, d) => {
                f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
                let mut h = [0u8; 40];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&l4_len16.to_be_bytes());
                h[6] = proto;
                h[7] = 64;
                h[8..24].copy_from_slice(&s);
                h[24..40].copy_from_slice(&d);
                f.extend_from_slice(&h);
                Some(ones_sum(&h[8..40], u32::from(proto) + u32::from(l4_len16)))
            }
            L3::Other(t) => {
                f.extend_from_slice(&t.to_be_bytes());
                None
            }
        };
        if let (true, Some(p)) = (self.l4_checksum, pseudo) {
            let at = match self.l4 {
                L4::Udp(..) => Some(6),
                L4::Tcp(..) => Some(16),
                L4::None => None,
            };
            if let Some(at) = at {
                let mut c = fold(ones_sum(&seg, p));
                if c == 0 && proto == IPPROTO_UDP {
                    c = 0xffff;
                }
                seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
            }
        }
        f.extend_from_slice(&seg);
        if f.len() < self.min_len {
            f.resize(self.min_len, 0);
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internet_checksum_of_known_inputs() {
        // RFC 1071 section 3's example: the sum of these words is 0xddf2.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        // The IPv4 header of Wikipedia's "IPv4 header checksum" example.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h), 0xb861);
        // An odd length pads with a zero byte.
        assert_eq!(internet_checksum(&[0x12]), !0x1200);
        assert_eq!(internet_checksum(&[]), 0xffff);
    }

    #[test]
    fn udp_over_ipv4_matches_a_frame_written_by_hand() {
        let f = Frame::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .l3(L3::V4([192, 168, 0, 1], [192, 168, 0, 199]))
            .l4(L4::Udp(1234, 4000))
            .payload(b"abcd")
            .checksums()
            .build();
        #[rustfmt::skip]
        let want = [
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00,
            0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0xf8, 0xb4, 192, 168, 0, 1, 192, 168, 0, 199,
            0x04, 0xd2, 0x0f, 0xa0, 0, 12, 0xa4, 0x84, b'a', b'b', b'c', b'd',
        ];
        assert_eq!(f, want);
        // Independently: the checksummed header and segment sum to 0.
        assert_eq!(internet_checksum(&f[14..34]), 0);
        let pseudo = ones_sum(&f[26..34], 17 + 12);
        assert_eq!(fold(ones_sum(&f[34..], pseudo)), 0);
    }

    #[test]
    fn tcp_over_ipv6_tagged_and_padded() {
        let mut s = [0u8; 16];
        s[0] = 0xfd;
        s[15] = 1;
        let mut d = s;
        d[15] = 2;
        let f = Frame::new([2; 6], [4; 6])
            .vlan(0x2007)
            .l3(L3::V6(s, d))
            .l4(L4::Tcp(80, 443))
            .payload(b"xyz")
            .checksums()
            .pad_to(100)
            .build();
        assert_eq!(f.len(), 100);
        assert_eq!(&f[12..18], &[0x81, 0x00, 0x20, 0x07, 0x86, 0xdd]);
        assert_eq!(&f[22..24], &23u16.to_be_bytes(), "payload length");
        assert_eq!((f[24], f[25]), (6, 64));
        let tcp = &f[58..81];
        assert_eq!(&tcp[..4], &[0, 80, 0x01, 0xbb]);
        assert_eq!(&tcp[4..8], &1u32.to_be_bytes());
        assert_eq!((tcp[12], tcp[13]), (0x50, 0x18));
        assert_eq!(&tcp[14..16], &[0xff, 0xff]);
        assert_eq!(&tcp[20..], b"xyz");
        let pseudo = ones_sum(&f[26..58], 6 + 23);
        assert_eq!(fold(ones_sum(tcp, pseudo)), 0, "valid TCP checksum");
        assert!(f[81..].iter().all(|&b| b == 0), "zero padding");
    }

    #[test]
    fn without_checksums_the_fields_are_zero_and_other_ethertypes_carry_the_payload() {
        let f = Frame::new([1; 6], [2; 6])
            .l3(L3::V4([10, 0, 0, 1], [10, 0, 0, 2]))
            .l4(L4::Udp(1, 2))
            .dont_fragment()
            .build();
        assert_eq!(f.len(), 42);
        assert_eq!(f[20], 0x40, "DF");
        assert_eq!(&f[24..26], &[0, 0]);
        assert_eq!(&f[40..42], &[0, 0]);
        let g = Frame::new([1; 6], [2; 6])
            .l3(L3::Other(0x88b5))
            .l4(L4::None)
            .payload(b"p")
            .checksums()
            .pad_to(60)
            .build();
        assert_eq!(&g[12..15], &[0x88, 0xb5, b'p']);
        assert_eq!(g.len(), 60);
    }

    #[test]
    fn a_udp_checksum_of_zero_is_sent_as_all_ones() {
        // Search a payload word that makes the computed checksum 0.
        let base = Frame::new([1; 6], [2; 6])
            .l3(L3::V4([10, 0, 0, 1], [10, 0, 0, 2]))
            .l4(L4::Udp(1, 2))
            .l4_checksum();
        let found = (0..=u16::MAX).find_map(|w| {
            let p = w.to_be_bytes();
            let f = base.clone().payload(&p).build();
            let pseudo = ones_sum(&f[26..34], 17 + 10);
            let mut z = f[34..].to_vec();
            z[6] = 0;
            z[7] = 0;
            (fold(ones_sum(&z, pseudo)) == 0).then(|| f[40..42].to_vec())
        });
        assert_eq!(found.as_deref(), Some(&[0xff, 0xff][..]));
    }
}
