//! RoCE as a ConnectX puts it on the wire: the ICRC (checked against a
//! test-side implementation written from RoCE Annex A17), corrupted frames
//! dropped and counted, messages segmented at the path MTU and reassembled,
//! ACK coalescing, go-back-N recovery of a lost packet, and the Ethernet/IP
//! fields set from the path. Frames are observed with
//! [`Faults::tap_frames`](hca_emu::Faults::tap_frames).

mod common;

use std::sync::{Arc, Mutex};

use common::dp::*;

/// Frames a port transmitted, as the tap saw them.
type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// Records every frame `port` of `n` transmits.
fn record(n: &Node, port: u8) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    n.r.emu.faults().tap_frames(port, move |f| {
        s.lock().unwrap().push(f.clone());
        true
    });
    seen
}

#[test]
fn corrupted_frames_are_dropped_and_counted() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut ca = a.cq(6);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    // A's QP is connected to a QPN B does not have: B's raw SQ plays the
    // requester.
    let p = a.path_to(&b, 1, 0xabcde, 1);
    a.connect(&mut qa, &p, &at);
    let (mut sq, _csq) = b.raw_sq();
    let dst = a.mr(4096, 0, LW);
    a.post_recv(&mut qa, &[(dst.addr, 4096, dst.key)]);
    let good = roce_v2(&b, &a, 0x04, qa.qpn, at.rq_psn, b"hello, world");
    // One bit of the payload flipped: the ICRC no longer matches.
    let mut bad = good.clone();
    bad[14 + 20 + 8 + 12] ^= 0x01;
    // A variant field changed (TTL, as a router does): still valid.
    let mut routed = good.clone();
    routed[14 + 8] -= 1;
    b.send_frame(&mut sq, &bad);
    b.r.emu.run_until_idle();
    a.r.emu.run_until_idle();
    assert_eq!(a.r.emu.datapath().drops.icrc, 1);
    assert!(a.poll(&mut ca).is_none(), "a corrupted SEND was taken");
    b.send_frame(&mut sq, &routed);
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!(c.byte_cnt, 12);
    assert_eq!(a.read(dst.addr, 12), b"hello, world");
    assert_eq!(a.r.emu.datapath().drops.icrc, 1);
    a.finish();
    b.finish();
}

#[test]
fn every_frame_carries_the_icrc_of_annex_a17() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
    let seen_a = record(&a, 1);
    let seen_b = record(&b, 1);
    let src = a.mr(8192, 0x5a, LW);
    let dst = b.mr(8192, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 8192, dst.key)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 3001, src.key)]);
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    let frames: Vec<Vec<u8>> = [seen_a, seen_b]
        .iter()
        .flat_map(|s| s.lock().unwrap().clone())
        .collect();
    assert!(frames.len() >= 2);
    for f in &frames {
        assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x0800);
        let ip_len = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let pkt = &f[14..14 + ip_len];
        let n = pkt.len();
        assert_eq!(
            icrc_v2_ipv4(&pkt[..n - 4]),
            pkt[n - 4..],
            "ICRC of {:02x?}",
            &pkt[..40]
        );
    }
    a.finish();
    b.finish();
}

/// The path MTU of [`Attrs::default`] (`mtu` 3).
const MTU: usize = 1024;

/// A RoCE v2/IPv4 packet as a test reads it from the wire, from the RoCE
/// v2 and IBA layouts.
#[derive(Debug)]
struct Pkt {
    op: u8,
    se: bool,
    ackreq: bool,
    dqpn: u32,
    psn: u32,
    /// Extended headers and payload (before pad and ICRC).
    body: Vec<u8>,
}

fn pkt(f: &[u8]) -> Pkt {
    assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x0800, "IPv4 frame");
    let ip_len = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let b = &f[42..];
    let pad = usize::from((b[1] >> 4) & 3);
    let end = 14 + ip_len - 4 - pad;
    Pkt {
        op: b[0],
        se: b[1] & 0x80 != 0,
        ackreq: b[8] & 0x80 != 0,
        dqpn: u32::from_be_bytes([0, b[5], b[6], b[7]]),
        psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        body: f[42 + 12..end].to_vec(),
    }
}

/// Extended header bytes of an RC request or response opcode (IBA 9.2).
fn ext_len(op: u8) -> usize {
    match op & 0x1f {
        0x03 | 0x05 | 0x09 => 4,
        0x06 | 0x0a | 0x0c => 16,
        0x0b => 20,
        0x0d | 0x0f | 0x10 | 0x11 => 4,
        _ => 0,
    }
}

/// The opcodes of an `n`-packet message (FIRST, MIDDLE..., LAST, or
/// ONLY), from the opcodes of FIRST, MIDDLE, LAST and ONLY.
fn expected_ops(n: usize, [first, middle, last, only]: [u8; 4]) -> Vec<u8> {
    if n == 1 {
        return vec![only];
    }
    let mut v = vec![first];
    v.extend(std::iter::repeat_n(middle, n - 2));
    v.push(last);
    v
}

/// What a message of `len` bytes looks like on the wire and at the far
/// end, for SEND with immediate, RDMA WRITE with immediate and RDMA READ.
fn segmented(kind: u8, len: usize) {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
    let seen_a = record(&a, 1);
    let seen_b = record(&b, 1);
    let msg: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let src = a.mr(16 * MTU, 0, LW);
    let dst = b.mr(16 * MTU, 0xee, LW | RW | RR);
    let n = len.div_ceil(MTU).max(1);
    match kind {
        op::SEND_IMM => {
            a.write(src.addr, &msg);
            b.post_recv(&mut qb, &[(dst.addr, (16 * MTU) as u32, dst.key)]);
            a.post_send(
                &mut qa,
                &[Wr::new(op::SEND_IMM)
                    .sge(src.addr, len as u32, src.key)
                    .imm(0xabcd_0123)
                    .flags(SIGNALED | SOLICITED)],
            );
        }
        op::WRITE_IMM => {
            a.write(src.addr, &msg);
            b.post_recv(&mut qb, &[(dst.addr, 0, dst.key)]);
            a.post_send(
                &mut qa,
                &[Wr::new(op::WRITE_IMM)
                    .sge(src.addr, len as u32, src.key)
                    .remote(dst.addr + 8, dst.key)
                    .imm(0xabcd_0123)
                    .flags(SIGNALED | SOLICITED)],
            );
        }
        _ => {
            b.write(dst.addr + 8, &msg);
            a.post_send(
                &mut qa,
                &[Wr::new(op::READ)
                    .sge(src.addr, len as u32, src.key)
                    .remote(dst.addr + 8, dst.key)],
            );
        }
    }
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    let reqs: Vec<Pkt> = seen_a.lock().unwrap().iter().map(|f| pkt(f)).collect();
    let resps: Vec<Pkt> = seen_b.lock().unwrap().iter().map(|f| pkt(f)).collect();
    let ctx = format!("{kind:#x} of {len} bytes");
    let (data_pkts, ops) = match kind {
        op::SEND_IMM => (&reqs, expected_ops(n, [0x00, 0x01, 0x03, 0x05])),
        op::WRITE_IMM => (&reqs, expected_ops(n, [0x06, 0x07, 0x09, 0x0b])),
        _ => (&resps, expected_ops(n, [0x0d, 0x0e, 0x0f, 0x10])),
    };
    assert_eq!(
        data_pkts.iter().map(|p| p.op).collect::<Vec<_>>(),
        ops,
        "{ctx}: opcodes"
    );
    let mut data = Vec::new();
    for (k, p) in data_pkts.iter().enumerate() {
        assert_eq!(p.psn, at.sq_psn + k as u32, "{ctx}: PSN of packet {k}");
        let e = ext_len(p.op);
        let payload = &p.body[e..];
        let want = if k + 1 < n { MTU } else { len - (n - 1) * MTU };
        assert_eq!(payload.len(), want, "{ctx}: payload of packet {k}");
        data.extend_from_slice(payload);
        let last = k + 1 == n;
        match kind {
            op::SEND_IMM | op::WRITE_IMM => {
                assert_eq!(p.dqpn, qb.qpn);
                // AckReq (log_ack_req_freq 0: every packet) and SE on the
                // last only.
                assert!(p.ackreq, "{ctx}: AckReq on packet {k}");
                assert_eq!(p.se, last, "{ctx}: SE on packet {k}");
                if last {
                    assert_eq!(
                        &p.body[e - 4..e],
                        &0xabcd_0123u32.to_be_bytes(),
                        "{ctx}: ImmDt"
                    );
                }
                if kind == op::WRITE_IMM && k == 0 {
                    let reth = &p.body[..16];
                    assert_eq!(reth[..8], (dst.addr + 8).to_be_bytes(), "{ctx}: RETH va");
                    assert_eq!(reth[8..12], dst.key.to_be_bytes(), "{ctx}: RETH rkey");
                    assert_eq!(reth[12..16], (len as u32).to_be_bytes(), "{ctx}: RETH len");
                }
            }
            _ => {
                assert_eq!(p.dqpn, qa.qpn);
                if e == 4 {
                    assert_eq!(p.body[0], 0x1f, "{ctx}: AETH ACK on packet {k}");
                }
            }
        }
    }
    assert_eq!(data, msg, "{ctx}: data on the wire");
    match kind {
        op::SEND_IMM | op::WRITE_IMM => {
            // One ACK per packet asked for, each for that packet's PSN.
            let acks: Vec<u32> = resps
                .iter()
                .filter(|p| p.op == 0x11)
                .map(|p| p.psn)
                .collect();
            assert_eq!(
                acks,
                (0..n as u32).map(|k| at.sq_psn + k).collect::<Vec<_>>(),
                "{ctx}: ACKs"
            );
            let r = &b.wait(&mut cb, 1)[0];
            r.ok();
            assert_eq!(r.imm, 0xabcd_0123);
            assert_eq!(r.byte_cnt as usize, len, "{ctx}: byte_cnt");
            assert!(r.se, "{ctx}: solicited");
            let at_dst = if kind == op::SEND_IMM { 0 } else { 8 };
            assert_eq!(b.read(dst.addr + at_dst, len), msg, "{ctx}: data received");
            assert_eq!(b.read(dst.addr + at_dst + len as u64, 1), [0xee]);
        }
        _ => {
            assert_eq!(reqs.len(), 1, "{ctx}: one READ request");
            assert_eq!(reqs[0].op, 0x0c);
            assert_eq!(c.byte_cnt as usize, len);
            assert_eq!(a.read(src.addr, len), msg, "{ctx}: data read");
        }
    }
    a.finish();
    b.finish();
}

#[test]
fn messages_are_segmented_at_the_path_mtu() {
    for kind in [op::SEND_IMM, op::WRITE_IMM, op::READ] {
        for len in [1, MTU - 1, MTU, MTU + 1, 10 * MTU] {
            segmented(kind, len);
        }
    }
}

/// Drops the first frame `port` of `n` transmits whose BTH PSN is `psn`
/// and opcode is `op`; records every frame it lets through.
fn lose_once(n: &Node, port: u8, op: u8, psn: u32) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let mut lost = false;
    n.r.emu.faults().tap_frames(port, move |f| {
        let p = pkt(f);
        if !lost && p.op == op && p.psn == psn {
            lost = true;
            return false;
        }
        s.lock().unwrap().push(f.clone());
        true
    });
    seen
}

#[test]
fn acks_are_coalesced_as_the_requester_asks() {
    let (mut a, mut b) = pair();
    let at = Attrs {
        log_ack_req_freq: 2,
        ..Attrs::default()
    };
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
    let seen_a = record(&a, 1);
    let seen_b = record(&b, 1);
    let src = a.mr(16 * MTU, 0x11, LW);
    let dst = b.mr(16 * MTU, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, (16 * MTU) as u32, dst.key)]);
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND).sge(src.addr, (10 * MTU) as u32, src.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    // AckReq every 2^2 = 4 packets and on the last: packets 3, 7 and 9.
    let asks: Vec<usize> = seen_a
        .lock()
        .unwrap()
        .iter()
        .map(|f| pkt(f))
        .enumerate()
        .filter(|(_, p)| p.ackreq)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(asks, [3, 7, 9]);
    let acks: Vec<u32> = seen_b
        .lock()
        .unwrap()
        .iter()
        .map(|f| pkt(f))
        .filter(|p| p.op == 0x11)
        .map(|p| p.psn - at.sq_psn)
        .collect();
    assert_eq!(acks, [3, 7, 9], "one ACK per AckReq");
    assert_eq!(b.read(dst.addr, 10 * MTU), vec![0x11; 10 * MTU]);
    a.finish();
    b.finish();
}

#[test]
fn a_lost_middle_packet_is_sent_again_from_the_naked_psn() {
    for kind in [op::SEND, op::WRITE] {
        let (mut a, mut b) = pair();
        let at = Attrs::default();
        let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
        let msg: Vec<u8> = (0..10 * MTU).map(|i| (i % 253) as u8).collect();
        let src = a.mr(16 * MTU, 0, LW);
        let dst = b.mr(16 * MTU, 0, LW | RW);
        a.write(src.addr, &msg);
        let middle = if kind == op::SEND { 0x01 } else { 0x07 };
        let seen_a = lose_once(&a, 1, middle, at.sq_psn + 4);
        let seen_b = record(&b, 1);
        let wr = if kind == op::SEND {
            b.post_recv(&mut qb, &[(dst.addr, (16 * MTU) as u32, dst.key)]);
            Wr::new(op::SEND).sge(src.addr, msg.len() as u32, src.key)
        } else {
            Wr::new(op::WRITE)
                .sge(src.addr, msg.len() as u32, src.key)
                .remote(dst.addr, dst.key)
        };
        a.post_send(&mut qa, &[wr]);
        a.wait(&mut ca, 1)[0].ok();
        if kind == op::SEND {
            let r = &b.wait(&mut cb, 1)[0];
            r.ok();
            assert_eq!(r.byte_cnt as usize, msg.len());
        }
        assert_eq!(b.read(dst.addr, msg.len()), msg, "{kind:#x}: data");
        // B NAKed the packet after the hole with a sequence error for PSN
        // +4, once; A sent packets +4..+9 again, nothing before.
        let naks: Vec<(u8, u32)> = seen_b
            .lock()
            .unwrap()
            .iter()
            .map(|f| pkt(f))
            .filter(|p| p.op == 0x11 && p.body[0] != 0x1f)
            .map(|p| (p.body[0], p.psn - at.sq_psn))
            .collect();
        assert_eq!(naks, [(0x60, 4)], "{kind:#x}: one PSN sequence error NAK");
        let psns: Vec<u32> = seen_a
            .lock()
            .unwrap()
            .iter()
            .map(|f| pkt(f).psn - at.sq_psn)
            .collect();
        assert_eq!(
            psns,
            [0, 1, 2, 3, 5, 6, 7, 8, 9, 4, 5, 6, 7, 8, 9],
            "{kind:#x}"
        );
        let dp = a.r.emu.datapath();
        assert_eq!(dp.retransmissions, 1, "{kind:#x}: one message sent again");
        assert_eq!(b.r.emu.datapath().seq_naks, 1);
        a.finish();
        b.finish();
    }
}

#[test]
fn a_lost_read_response_is_asked_again_for_the_rest() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let (mut qa, mut ca, _qb, _cb) = connected(&mut a, &mut b, 0, &at);
    let msg: Vec<u8> = (0..10 * MTU - 3).map(|i| (i % 249) as u8).collect();
    let local = a.mr(16 * MTU, 0, LW);
    let remote = b.mr(16 * MTU, 0, RR);
    b.write(remote.addr, &msg);
    let seen_a = record(&a, 1);
    let seen_b = lose_once(&b, 1, 0x0e, at.sq_psn + 4);
    a.post_send(
        &mut qa,
        &[Wr::new(op::READ)
            .sge(local.addr, msg.len() as u32, local.key)
            .remote(remote.addr, remote.key)],
    );
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!(c.byte_cnt as usize, msg.len());
    assert_eq!(a.read(local.addr, msg.len()), msg);
    // The second request asks for the rest: PSN +4, from byte 4 MTUs on.
    let reqs: Vec<Pkt> = seen_a.lock().unwrap().iter().map(|f| pkt(f)).collect();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[1].op, 0x0c);
    assert_eq!(reqs[1].psn, at.sq_psn + 4);
    let reth = &reqs[1].body[..16];
    assert_eq!(reth[..8], (remote.addr + 4 * MTU as u64).to_be_bytes());
    assert_eq!(reth[12..16], ((msg.len() - 4 * MTU) as u32).to_be_bytes());
    // Its responses: FIRST at +4, MIDDLE..., LAST at +9.
    let resps: Vec<(u8, u32)> = seen_b
        .lock()
        .unwrap()
        .iter()
        .map(|f| pkt(f))
        .map(|p| (p.op, p.psn - at.sq_psn))
        .collect();
    assert_eq!(
        resps[9..],
        [
            (0x0d, 4),
            (0x0e, 5),
            (0x0e, 6),
            (0x0e, 7),
            (0x0e, 8),
            (0x0f, 9)
        ]
    );
    a.finish();
    b.finish();
}

#[test]
fn uc_drops_a_message_with_a_lost_packet_and_takes_the_next() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 1, &at);
    let src = a.mr(16 * MTU, 0x21, LW);
    let dst = b.mr(16 * MTU, 0, LW);
    lose_once(&a, 1, 0x21, at.sq_psn + 1);
    b.post_recv(&mut qb, &[(dst.addr, (16 * MTU) as u32, dst.key)]);
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND).sge(src.addr, (3 * MTU) as u32, src.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    a.r.emu.run_until_idle();
    b.r.emu.run_until_idle();
    assert!(b.poll(&mut cb).is_none(), "a UC SEND with a hole completed");
    // The next message uses the same receive WQE.
    a.write(src.addr, &[0x42; 2 * MTU]);
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND).sge(src.addr, (2 * MTU) as u32, src.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    r.ok();
    assert_eq!((r.wqe_counter, r.byte_cnt as usize), (0, 2 * MTU));
    assert_eq!(b.read(dst.addr, 2 * MTU), vec![0x42; 2 * MTU]);
    a.finish();
    b.finish();
}

/// Linux `rdma_calc_flow_label` then `rdma_flow_label_to_udp_sport`,
/// written here from their description.
fn linux_sport(fl: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if fl == 0 {
        let mut v = u64::from(lqpn) * u64::from(rqpn);
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xfffff) as u32
    } else {
        fl
    };
    (((fl & 0x3fff) ^ (fl >> 14)) | 0xc000) as u16
}

#[test]
fn ip_and_udp_fields_come_from_the_path() {
    for (udp_sport, flow_label) in [(0, 0), (0, 0x5a5a5), (0xd00d, 0)] {
        let (mut a, mut b) = pair();
        let at = Attrs {
            hop_limit: 17,
            tclass: 0x11,
            dscp: 26,
            ecn: 2,
            udp_sport,
            flow_label,
            ..Attrs::default()
        };
        let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
        let seen_a = record(&a, 1);
        let seen_b = record(&b, 1);
        let src = a.mr(4096, 1, LW);
        let dst = b.mr(4096, 0, LW);
        b.post_recv(&mut qb, &[(dst.addr, 4096, dst.key)]);
        a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 100, src.key)]);
        a.wait(&mut ca, 1)[0].ok();
        b.wait(&mut cb, 1)[0].ok();
        for (seen, l, r) in [(seen_a, qa.qpn, qb.qpn), (seen_b, qb.qpn, qa.qpn)] {
            for f in seen.lock().unwrap().iter() {
                let ip = &f[14..34];
                assert_eq!(ip[0], 0x45);
                assert_eq!(ip[1], (26 << 2) | 2, "TOS: DSCP 26, ECN 2");
                assert_eq!(ip[6] & 0xe0, 0x40, "DF");
                assert_eq!(ip[8], 17, "TTL");
                // The header checksum: the ones' complement sum is 0xffff.
                let sum: u32 = ip
                    .chunks(2)
                    .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                    .sum();
                let folded = (sum & 0xffff) + (sum >> 16);
                assert_eq!(folded, 0xffff, "IPv4 header checksum");
                let sport = u16::from_be_bytes([f[34], f[35]]);
                let want = if udp_sport != 0 {
                    udp_sport
                } else {
                    linux_sport(flow_label, l, r)
                };
                assert_eq!(sport, want, "UDP source port");
                assert_eq!(u16::from_be_bytes([f[36], f[37]]), 4791);
            }
        }
        a.finish();
        b.finish();
    }
}

/// The ICRC of a RoCE v2/IPv6 (`udp`) or RoCE v1 packet, `pkt` running
/// from the IPv6 header or GRH to the end of the pad (Annexes A16/A17:
/// traffic class, flow label, hop limit, UDP checksum, BTH byte 4 masked).
fn icrc_ipv6_or_grh(pkt: &[u8], udp: bool) -> [u8; 4] {
    let mut m = pkt.to_vec();
    m[0] |= 0x0f;
    for i in [1, 2, 3, 7] {
        m[i] = 0xff;
    }
    let bth = if udp {
        m[46] = 0xff;
        m[47] = 0xff;
        48
    } else {
        40
    };
    m[bth + 4] = 0xff;
    let mut all = vec![0xffu8; 8];
    all.extend_from_slice(&m);
    (!crc32_bitwise(!0, &all)).to_le_bytes()
}

#[test]
fn rc_over_roce_v2_ipv6_and_roce_v1_on_the_wire() {
    for (version, l3) in [(2u32, 1u32), (0, 1)] {
        let (mut a, mut b) = pair();
        let g6 = |n: &Node| {
            let mut g = [0u8; 16];
            g[0] = 0xfe;
            g[1] = 0x80;
            g[15] = n.id;
            g
        };
        let (ga, gb) = (g6(&a), g6(&b));
        let (ma, mb) = (a.mac(1), b.mac(1));
        a.set_gid(1, 1, ga, ma, version, l3);
        b.set_gid(1, 1, gb, mb, version, l3);
        let at = Attrs {
            hop_limit: 5,
            tclass: 0x48,
            flow_label: 0xabcde,
            dscp: 10,
            ecn: 1,
            ..Attrs::default()
        };
        let mut ca = a.cq(6);
        let mut cb = b.cq(6);
        let mut qa = a.qp(&QpSpec::new(0, &ca));
        let mut qb = b.qp(&QpSpec::new(0, &cb));
        let mut pa = a.path_to(&b, 1, qb.qpn, 1);
        let mut pb = b.path_to(&a, 1, qa.qpn, 1);
        pa.sgid_index = 1;
        pa.rgid = gb;
        pb.sgid_index = 1;
        pb.rgid = ga;
        a.connect(&mut qa, &pa, &at);
        b.connect(&mut qb, &pb, &at);
        let seen_a = record(&a, 1);
        let msg: Vec<u8> = (0..3000u32).map(|i| (i % 241) as u8).collect();
        let src = a.mr(4096, 0, LW);
        let dst = b.mr(4096, 0, LW);
        a.write(src.addr, &msg);
        b.post_recv(&mut qb, &[(dst.addr, 4096, dst.key)]);
        a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 3000, src.key)]);
        a.wait(&mut ca, 1)[0].ok();
        b.wait(&mut cb, 1)[0].ok();
        assert_eq!(b.read(dst.addr, 3000), msg);
        let frames = seen_a.lock().unwrap().clone();
        assert_eq!(frames.len(), 3, "3000 bytes in 1024-byte packets");
        let udp = version == 2;
        for f in &frames {
            let et = u16::from_be_bytes([f[12], f[13]]);
            assert_eq!(et, if udp { 0x86dd } else { 0x8915 });
            let h = &f[14..54];
            let w = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let tc = (w >> 20) as u8;
            // RoCE v2: DSCP and ECN of the path; RoCE v1: its tclass.
            assert_eq!(tc, if udp { (10 << 2) | 1 } else { 0x48 });
            assert_eq!(w & 0xf_ffff, 0xabcde, "flow label");
            assert_eq!(h[7], 5, "hop limit");
            assert_eq!(h[6], if udp { 17 } else { 0x1b }, "next header");
            let paylen = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let pkt = &f[14..54 + paylen];
            let n = pkt.len();
            assert_eq!(icrc_ipv6_or_grh(&pkt[..n - 4], udp), pkt[n - 4..]);
            if udp {
                let sport = u16::from_be_bytes([f[54], f[55]]);
                assert_eq!(sport, linux_sport(0xabcde, qa.qpn, qb.qpn));
            }
        }
        a.finish();
        b.finish();
    }
}
