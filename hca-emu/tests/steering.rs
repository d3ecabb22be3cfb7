//! NIC RX flow steering and RSS on the emulator: frames sent by another
//! emulated HCA through a raw SQ are matched by flow rules of each selector
//! kind (Ethernet dst/src/type/VLAN, IPv4/IPv6 src/dst, TCP/UDP ports)
//! into the right RQs, by priority, through a miss table to a catch-all,
//! dropped and counted when nothing matches, and spread across RQs by the
//! Toeplitz hash of an indirect TIR (the expected RQ computed here).

mod common;

use std::time::Duration;

use common::dp::*;
use common::steer::{DEST_TABLE, DEST_TIR, Outer, Steering, mask_of};
use firmware_cmds::eth::{
    RX_HASH_FIELD_SELECT_DST_IP, RX_HASH_FIELD_SELECT_L4_DPORT, RX_HASH_FIELD_SELECT_L4_SPORT,
    RX_HASH_FIELD_SELECT_SRC_IP,
};
use firmware_cmds::rss::{HashFields, MAX_HASH_INPUT, hash_input, toeplitz};
use hca_emu::frame::{Frame, L3, L4};

/// A frame (`hca_emu::frame`) with 16 bytes of payload, checksums left
/// for the sender's `cs_flags`.
fn frame(dmac: [u8; 6], smac: [u8; 6], vid: Option<u16>, l3: L3, l4: L4) -> Vec<u8> {
    Frame::new(dmac, smac)
        .vlan(vid)
        .l3(l3)
        .l4(l4)
        .payload(b"sixteen byte pay")
        .build()
}

/// Sends `f` from A's raw SQ with IPv4 and TCP/UDP checksum insertion.
fn send(a: &mut Node, sq: &mut Qp, f: &[u8]) {
    let w = Wr {
        eth: Some((0xc0, f.to_vec())),
        ..Wr::new(op::SEND).flags(0)
    };
    a.post_send(sq, &[w]);
}

const V4A: [u8; 4] = [10, 1, 1, 1];
const V4B: [u8; 4] = [10, 2, 2, 2];
const V6A: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
const V6B: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6];
const MCAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];
const OTHER_SMAC: [u8; 6] = [0x02, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa];

/// Receive side: `n` RQs on one CQ, each with 16 receive WQEs of 2 KiB.
fn rqs(b: &mut Node, n: usize) -> (Vec<Qp>, Cq) {
    let cq = b.cq(8);
    let mut v = Vec::new();
    for i in 0..n {
        // User index i + 1: receive CQEs name their RQ by it.
        let mut rq = b.raw_wq_uidx(false, cq.cqn, 0, 4, 6, i as u32 + 1);
        let buf = b.mr(16 * 2048, 0, LW);
        for i in 0..16u64 {
            b.post_recv(&mut rq, &[(buf.addr + 2048 * i, 2048, buf.key)]);
        }
        v.push(rq);
    }
    (v, cq)
}

#[test]
fn flow_rules_of_each_selector_kind_priorities_miss_and_catch_all() {
    let (mut a, mut b) = pair();
    let (mut sq, _) = a.raw_sq();
    let td = b.transport_domain();
    let (rq, mut cq) = rqs(&mut b, 9);
    let mut s = Steering::default();
    let tirs: Vec<u32> = rq.iter().map(|r| s.tir_direct(&mut b, td, r.qpn)).collect();
    let me = b.mac(1);
    let peer = a.mac(1);
    // Level 1: a catch-all, reached by level 0's miss.
    let t1 = s.table(&mut b, 1, 2, None);
    let g_all = s.group(&mut b, t1, 0, 0, None);
    s.fte(
        &mut b,
        t1,
        g_all,
        0,
        &Outer::default(),
        &[(DEST_TIR, tirs[8])],
    );
    let t0 = s.table(&mut b, 0, 4, Some(t1));
    // One group (and rule) per selector kind, in priority order.
    let rules: [Outer; 8] = [
        Outer::default().dmac(MCAST),
        Outer::default().smac(OTHER_SMAC),
        Outer::default().ethertype(0x88b5),
        Outer::default().vid(100, true),
        Outer::default().ethertype(0x0800).dst_ipv4(V4A),
        Outer::default().ethertype(0x86dd).src_ipv6(V6A),
        Outer::default().ip_protocol(6).tcp_dport(80),
        Outer::default().ip_protocol(17).udp_dport(9000),
    ];
    for (i, r) in rules.iter().enumerate() {
        let g = s.group(&mut b, t0, i as u32, i as u32, Some(mask_of(r)));
        s.fte(&mut b, t0, g, i as u32, r, &[(DEST_TIR, tirs[i])]);
    }
    s.root(&mut b, t0);
    let udp = |d| L4::Udp(1234, d);
    let cases: [(Vec<u8>, usize); 10] = [
        (frame(MCAST, peer, None, L3::V4(V4B, V4B), udp(1)), 0),
        (frame(me, OTHER_SMAC, None, L3::V4(V4B, V4B), udp(1)), 1),
        (frame(me, peer, None, L3::Other(0x88b5), L4::None), 2),
        (frame(me, peer, Some(100), L3::V4(V4B, V4B), udp(1)), 3),
        (frame(me, peer, Some(101), L3::V4(V4B, V4B), udp(1)), 8),
        (frame(me, peer, None, L3::V4(V4B, V4A), udp(1)), 4),
        (frame(me, peer, None, L3::V6(V6A, V6B), udp(1)), 5),
        (frame(me, peer, None, L3::V6(V6B, V6A), L4::Tcp(5, 80)), 6),
        (frame(me, peer, None, L3::V4(V4B, V4B), udp(9000)), 7),
        // Matches rules 4 and 7: the lower flow index wins.
        (frame(me, peer, None, L3::V4(V4B, V4A), udp(9000)), 4),
    ];
    for (i, (f, want)) in cases.iter().enumerate() {
        send(&mut a, &mut sq, f);
        let c = &b.wait(&mut cq, 1)[0];
        c.ok();
        assert_eq!(
            c.srqn_uidx,
            *want as u32 + 1,
            "case {i}: frame to RQ {want}"
        );
        assert_eq!(c.byte_cnt as usize, f.len().max(60), "case {i}");
    }
    let dp = b.r.emu.datapath();
    assert_eq!((dp.drops.steering_miss, dp.drops.steering_drop), (0, 0));
    // The catch-all removed: a frame matching nothing is dropped and
    // counted.
    s.delete(&mut b, t1, 0);
    send(&mut a, &mut sq, &cases[4].0);
    b.quiet(&mut cq, Duration::from_millis(2));
    assert_eq!(b.r.emu.datapath().drops.steering_miss, 1);
    // A drop rule: dropped and counted as such.
    s.fte(&mut b, t1, g_all, 0, &Outer::default(), &[]);
    send(&mut a, &mut sq, &cases[4].0);
    b.quiet(&mut cq, Duration::from_millis(2));
    assert_eq!(b.r.emu.datapath().drops.steering_drop, 1);
    s.teardown(&mut b);
    a.finish();
    b.finish();
}

#[test]
fn one_frame_to_two_tirs_and_through_a_forward_to_a_deeper_table() {
    let (mut a, mut b) = pair();
    let (mut sq, _) = a.raw_sq();
    let td = b.transport_domain();
    let (rq, mut cq) = rqs(&mut b, 3);
    let mut s = Steering::default();
    let tirs: Vec<u32> = rq.iter().map(|r| s.tir_direct(&mut b, td, r.qpn)).collect();
    let t1 = s.table(&mut b, 1, 1, None);
    let g1 = s.group(&mut b, t1, 0, 0, None);
    s.fte(&mut b, t1, g1, 0, &Outer::default(), &[(DEST_TIR, tirs[2])]);
    let t0 = s.table(&mut b, 0, 1, None);
    let sel = Outer::default().ip_protocol(17).udp_dport(7);
    let g0 = s.group(&mut b, t0, 0, 0, Some(mask_of(&sel)));
    // A sniffer-like rule: the frame to RQ 0 and RQ 1, and through the
    // deeper table to RQ 2.
    s.fte(
        &mut b,
        t0,
        g0,
        0,
        &sel,
        &[(DEST_TIR, tirs[0]), (DEST_TIR, tirs[1]), (DEST_TABLE, t1)],
    );
    s.root(&mut b, t0);
    let f = frame(b.mac(1), a.mac(1), None, L3::V4(V4A, V4B), L4::Udp(3, 7));
    send(&mut a, &mut sq, &f);
    let mut got: Vec<u32> = b
        .wait(&mut cq, 3)
        .iter()
        .map(|c| rq[c.ok().srqn_uidx as usize - 1].qpn)
        .collect();
    got.sort_unstable();
    let mut want: Vec<u32> = rq.iter().map(|r| r.qpn).collect();
    want.sort_unstable();
    assert_eq!(got, want);
    // Another port: t0 misses with the default action.
    let f = frame(b.mac(1), a.mac(1), None, L3::V4(V4A, V4B), L4::Udp(3, 8));
    send(&mut a, &mut sq, &f);
    b.quiet(&mut cq, Duration::from_millis(2));
    assert_eq!(b.r.emu.datapath().drops.steering_miss, 1);
    s.teardown(&mut b);
    a.finish();
    b.finish();
}

/// The default key of Microsoft's RSS verification suite.
const KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

#[test]
fn rss_spreads_udp_flows_across_rqs_by_the_toeplitz_hash() {
    let (mut a, mut b) = pair();
    let (mut sq, _) = a.raw_sq();
    let td = b.transport_domain();
    let (rq, mut cq) = rqs(&mut b, 4);
    let mut s = Steering::default();
    let rqns: Vec<u32> = rq.iter().map(|r| r.qpn).collect();
    let rqt = s.rqt(&mut b, &rqns);
    let all = RX_HASH_FIELD_SELECT_SRC_IP
        | RX_HASH_FIELD_SELECT_DST_IP
        | RX_HASH_FIELD_SELECT_L4_SPORT
        | RX_HASH_FIELD_SELECT_L4_DPORT;
    let tir = s.tir_rss(&mut b, td, rqt, &KEY, (false, true, all));
    let t0 = s.table(&mut b, 0, 1, None);
    let sel = Outer::default().ethertype(0x0800).ip_protocol(17);
    let g = s.group(&mut b, t0, 0, 0, Some(mask_of(&sel)));
    s.fte(&mut b, t0, g, 0, &sel, &[(DEST_TIR, tir)]);
    s.root(&mut b, t0);
    let mut per_rq = [0usize; 4];
    for sport in 0..40u16 {
        let sport = 1000 + 37 * sport;
        let f = frame(
            b.mac(1),
            a.mac(1),
            None,
            L3::V4(V4A, V4B),
            L4::Udp(sport, 4000),
        );
        send(&mut a, &mut sq, &f);
        let fields = HashFields {
            src_ip: &V4A,
            dst_ip: &V4B,
            ports: Some((sport, 4000)),
        };
        let mut input = [0u8; MAX_HASH_INPUT];
        let n = hash_input(&fields, all, &mut input);
        let hash = toeplitz(&KEY, &input[..n]);
        let want = (hash % 4) as usize;
        let c = &b.wait(&mut cq, 1)[0];
        c.ok();
        assert_eq!(
            rq[c.srqn_uidx as usize - 1].qpn,
            rqns[want],
            "sport {sport}: hash {hash:#x}"
        );
        let raw = &c.raw;
        assert_eq!(
            u32::from_be_bytes(raw[0x0c..0x10].try_into().unwrap()),
            hash,
            "rx_hash_result"
        );
        assert_eq!(raw[0x10], (1 << 2) | (2 << 6), "rx_hash_type: IPv4, UDP");
        assert_eq!(
            raw[0x1c] & 0x6,
            0x6,
            "L3_OK and L4_OK (checksums inserted by the sender)"
        );
        assert_eq!(c.l4_l3, (2 << 4) | (2 << 2), "UDP over IPv4");
        per_rq[want] += 1;
    }
    assert!(
        per_rq.iter().all(|&n| n > 0),
        "every RQ receives: {per_rq:?}"
    );
    s.teardown(&mut b);
    a.finish();
    b.finish();
}

#[test]
fn malformed_steering_commands_are_refused() {
    let (_a, mut b) = pair();
    let td = b.transport_domain();
    let (rq, _cq) = rqs(&mut b, 1);
    let mut s = Steering::default();
    let tir = s.tir_direct(&mut b, td, rq[0].qpn);
    let t0 = s.table(&mut b, 1, 2, None);
    // A miss table must be deeper.
    let mut m = common::inp(0x930, 0, 0x30);
    common::setf(&mut m, 0x18, 23, 16, 1);
    common::setf(&mut m, 0x18, 27, 24, 1);
    common::setf(&mut m, 0x1c, 23, 0, u64::from(t0));
    assert_eq!(b.r.fails(&m, 16, 0x3), hca_emu::syndrome::FT_BAD_MISS);
    let g = s.group(&mut b, t0, 0, 1, None);
    // Overlapping groups.
    let mut m = common::inp(0x933, 0, 0x400);
    common::setf(&mut m, 0x14, 23, 0, u64::from(t0));
    common::setf(&mut m, 0x1c, 31, 0, 1);
    common::setf(&mut m, 0x24, 31, 0, 2);
    assert_eq!(b.r.fails(&m, 16, 0x3), hca_emu::syndrome::FG_RANGE);
    // Criteria in misc_parameters are not executed: refused.
    common::setf(&mut m, 0x1c, 31, 0, 2);
    common::setf(&mut m, 0x3c, 7, 0, 2);
    m[0x80] = 0xff;
    assert_eq!(b.r.fails(&m, 16, 0x3), hca_emu::syndrome::FG_CRITERIA);
    // Entry outside its group, destination not a TIR, forward to a
    // shallower table.
    let v = Outer::default();
    let e = Steering::fte_input(t0, g, 2, &v, &[(DEST_TIR, tir)]);
    assert_eq!(b.r.fails(&e, 16, 0x3), hca_emu::syndrome::FTE_NOT_IN_GROUP);
    let e = Steering::fte_input(t0, g, 0, &v, &[(DEST_TIR, tir + 1000)]);
    assert_eq!(b.r.fails(&e, 16, 0x3), hca_emu::syndrome::FTE_DEST);
    let e = Steering::fte_input(t0, g, 0, &v, &[(DEST_TABLE, t0)]);
    assert_eq!(b.r.fails(&e, 16, 0x3), hca_emu::syndrome::FTE_DEST);
    // A destination list longer than the input.
    let mut e = Steering::fte_input(t0, g, 0, &v, &[(DEST_TIR, tir)]);
    common::setf(&mut e, 0x50, 23, 0, 2);
    assert_eq!(b.r.fails(&e, 16, 0x50), hca_emu::syndrome::FTE_SHORT);
    // A TIR in use by a rule is not destroyed.
    s.fte(&mut b, t0, g, 0, &v, &[(DEST_TIR, tir)]);
    let mut d = common::inp(0x902, 0, 16);
    common::setf(&mut d, 8, 23, 0, u64::from(tir));
    b.r.fails(&d, 16, 0x9);
    // RQT entries must be RQs; an inverted-XOR8 TIR is refused.
    let mut m = common::inp(0x916, 0, 0x114);
    common::setf(&mut m, 0x34, 15, 0, 1);
    common::setf(&mut m, 0x38, 15, 0, 1);
    common::setf(&mut m, 0x110, 23, 0, 0xfff);
    assert_eq!(b.r.fails(&m, 16, 0x5), hca_emu::syndrome::RQT_BAD_RQ);
    let rqt = s.rqt(&mut b, &[rq[0].qpn]);
    let mut m = common::inp(0x900, 0, 0x110);
    common::setf(&mut m, 0x24, 31, 28, 1);
    common::setf(&mut m, 0x40, 23, 0, u64::from(rqt));
    common::setf(&mut m, 0x44, 31, 28, 1);
    common::setf(&mut m, 0x44, 23, 0, u64::from(td));
    assert_eq!(b.r.fails(&m, 16, 0x3), hca_emu::syndrome::TIR_HASH_FN);
    s.teardown(&mut b);
    b.finish();
}

#[test]
fn rss_hash_in_the_cqe_is_the_published_toeplitz_value() {
    // Rows of Microsoft's RSS verification suite (see
    // firmware-cmds/tests/toeplitz.rs), sent as TCP frames: the CQE's
    // rx_hash_result is the published hash with ports; a UDP frame to the
    // TCP TIR is hashed over its addresses only.
    let (mut a, mut b) = pair();
    let (mut sq, _) = a.raw_sq();
    let td = b.transport_domain();
    let (rq, mut cq) = rqs(&mut b, 2);
    let mut s = Steering::default();
    let rqns: Vec<u32> = rq.iter().map(|r| r.qpn).collect();
    let rqt = s.rqt(&mut b, &rqns);
    let all = RX_HASH_FIELD_SELECT_SRC_IP
        | RX_HASH_FIELD_SELECT_DST_IP
        | RX_HASH_FIELD_SELECT_L4_SPORT
        | RX_HASH_FIELD_SELECT_L4_DPORT;
    let tir4 = s.tir_rss(&mut b, td, rqt, &KEY, (false, false, all));
    let tir6 = s.tir_rss(&mut b, td, rqt, &KEY, (true, false, all));
    let t0 = s.table(&mut b, 0, 1, None);
    let v4 = Outer::default().ethertype(0x0800);
    let v6 = Outer::default().ethertype(0x86dd);
    let g4 = s.group(&mut b, t0, 0, 0, Some(mask_of(&v4)));
    let g6 = s.group(&mut b, t0, 1, 1, Some(mask_of(&v6)));
    s.fte(&mut b, t0, g4, 0, &v4, &[(DEST_TIR, tir4)]);
    s.fte(&mut b, t0, g6, 1, &v6, &[(DEST_TIR, tir6)]);
    s.root(&mut b, t0);
    let v6a = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
    let cases = [
        (
            L3::V4([66, 9, 149, 187], [161, 142, 100, 80]),
            L4::Tcp(2794, 1766),
            0x51cc_c178u32,
            (1 << 2) | (1 << 6),
        ),
        (
            L3::V6(v6a("3ffe:2501:200:1fff::7"), v6a("3ffe:2501:200:3::1")),
            L4::Tcp(2794, 1766),
            0x4020_7d3d,
            (2 << 2) | (1 << 6),
        ),
        (
            L3::V4([199, 92, 111, 2], [65, 69, 140, 83]),
            L4::Udp(14230, 4739),
            0xd718_262a,
            1 << 2,
        ),
    ];
    for (l3, l4, hash, htype) in cases {
        let f = frame(b.mac(1), a.mac(1), None, l3, l4);
        send(&mut a, &mut sq, &f);
        let c = &b.wait(&mut cq, 1)[0];
        c.ok();
        let raw = &c.raw;
        assert_eq!(
            u32::from_be_bytes(raw[0x0c..0x10].try_into().unwrap()),
            hash
        );
        assert_eq!(raw[0x10], htype, "rx_hash_type");
        assert_eq!(rq[c.srqn_uidx as usize - 1].qpn, rqns[(hash % 2) as usize]);
    }
    s.teardown(&mut b);
    a.finish();
    b.finish();
}
