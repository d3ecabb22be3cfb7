//! The Toeplitz hash against the published RSS verification vectors.
//!
//! Facts, not code: the 40-byte default key and the tables of inputs and
//! hashes are Microsoft's "Verifying the RSS Hash Calculation"
//! (learn.microsoft.com, Windows network driver docs, RSS verification
//! suite), also printed in Intel's 82599 datasheet section 7.1.2.8.3 and
//! used by DPDK's `app/test/test_thash.c`. Each row: destination
//! address:port, source address:port, the hash of the IP addresses only,
//! and of the addresses with the TCP ports. The input is source address,
//! destination address, source port, destination port.

use std::net::{Ipv4Addr, Ipv6Addr};

use firmware_cmds::eth::{
    RX_HASH_FIELD_SELECT_DST_IP, RX_HASH_FIELD_SELECT_L4_DPORT, RX_HASH_FIELD_SELECT_L4_SPORT,
    RX_HASH_FIELD_SELECT_SRC_IP,
};
use firmware_cmds::rss::{HashFields, MAX_HASH_INPUT, TOEPLITZ_KEY_LEN, hash_input, toeplitz};

const KEY: [u8; TOEPLITZ_KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

const IP_ONLY: u32 = RX_HASH_FIELD_SELECT_SRC_IP | RX_HASH_FIELD_SELECT_DST_IP;
const WITH_PORTS: u32 = IP_ONLY | RX_HASH_FIELD_SELECT_L4_SPORT | RX_HASH_FIELD_SELECT_L4_DPORT;

fn check(dst: &[u8], dport: u16, src: &[u8], sport: u16, ip_only: u32, with_ports: u32) {
    let f = HashFields {
        src_ip: src,
        dst_ip: dst,
        ports: Some((sport, dport)),
    };
    let mut buf = [0u8; MAX_HASH_INPUT];
    let n = hash_input(&f, IP_ONLY, &mut buf);
    assert_eq!(n, 2 * src.len());
    assert_eq!(
        toeplitz(&KEY, &buf[..n]),
        ip_only,
        "{src:?} -> {dst:?}, addresses"
    );
    let n = hash_input(&f, WITH_PORTS, &mut buf);
    assert_eq!(n, 2 * src.len() + 4);
    assert_eq!(
        toeplitz(&KEY, &buf[..n]),
        with_ports,
        "{src:?}:{sport} -> {dst:?}:{dport}"
    );
}

#[test]
fn ipv4_verification_suite() {
    let rows: [(&str, u16, &str, u16, u32, u32); 5] = [
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];
    for (d, dp, s, sp, h3, h4) in rows {
        let d: Ipv4Addr = d.parse().unwrap();
        let s: Ipv4Addr = s.parse().unwrap();
        check(&d.octets(), dp, &s.octets(), sp, h3, h4);
    }
}

#[test]
fn ipv6_verification_suite() {
    let rows: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc1_8cd5,
            0x4020_7d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c_461c,
            0xdde5_1bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61_e985,
            0x02d1_feef,
        ),
    ];
    for (d, dp, s, sp, h3, h4) in rows {
        let d: Ipv6Addr = d.parse().unwrap();
        let s: Ipv6Addr = s.parse().unwrap();
        check(&d.octets(), dp, &s.octets(), sp, h3, h4);
    }
}

#[test]
fn ports_only_when_present_and_selected() {
    let f = HashFields {
        src_ip: &[1, 2, 3, 4],
        dst_ip: &[5, 6, 7, 8],
        ports: None,
    };
    let mut buf = [0u8; MAX_HASH_INPUT];
    assert_eq!(
        hash_input(&f, WITH_PORTS, &mut buf),
        8,
        "no L4 header: addresses only"
    );
    let f = HashFields {
        ports: Some((0x1234, 0x5678)),
        ..f
    };
    let n = hash_input(&f, RX_HASH_FIELD_SELECT_L4_DPORT, &mut buf);
    assert_eq!(&buf[..n], &[0x56, 0x78]);
    assert_eq!(toeplitz(&KEY, &[]), 0, "empty input hashes to 0");
}
