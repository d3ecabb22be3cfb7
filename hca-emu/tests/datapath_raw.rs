//! Raw Ethernet send and receive queues, RoCE frames reaching the raw path
//! when RoCE is off, and messages far beyond one frame's 16-bit lengths.

mod common;

use std::time::Duration;

use common::dp::*;
use common::steer::{DEST_TIR, Outer, Steering};
use common::{inp, setf};
use hca_emu::EmuConfig;

fn udp_frame(dst: [u8; 6], src: [u8; 6], payload_len: usize) -> Vec<u8> {
    let mut h = vec![0u8; 42];
    h[0..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    h[14] = 0x45;
    h[16..18].copy_from_slice(&((28 + payload_len) as u16).to_be_bytes());
    h[22] = 64;
    h[23] = 17;
    h[26..30].copy_from_slice(&[192, 168, 0, 1]);
    h[30..34].copy_from_slice(&[192, 168, 0, 2]);
    h[34..36].copy_from_slice(&4000u16.to_be_bytes());
    h[36..38].copy_from_slice(&5000u16.to_be_bytes());
    h[38..40].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    h
}

fn csum(b: &[u8], mut s: u32) -> u16 {
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[test]
fn raw_ethernet_send_and_receive_with_checksum_insertion() {
    let (mut a, mut b) = pair();
    // A: TD, TIS, SQ. B: TD, RQ, TIR pointing at it.
    let tda = a.transport_domain();
    let tisn = a.tis(tda);
    let mut ca = a.cq(6);
    let mut sq = a.raw_wq(true, ca.cqn, tisn, 6, 6);
    let tdb = b.transport_domain();
    let mut cb = b.cq(6);
    let mut rq = b.raw_wq(false, cb.cqn, 0, 5, 6);
    // A direct TIR, and a catch-all NIC RX root rule forwarding to it.
    let mut steer = Steering::default();
    let tirn = steer.tir_direct(&mut b, tdb, rq.qpn);
    let table = steer.table(&mut b, 0, 1, None);
    let group = steer.group(&mut b, table, 0, 0, None);
    steer.fte(
        &mut b,
        table,
        group,
        0,
        &Outer::default(),
        &[(DEST_TIR, tirn)],
    );
    steer.root(&mut b, table);
    let rbuf = b.mr(8192, 0, LW);
    for i in 0..3u64 {
        b.post_recv(&mut rq, &[(rbuf.addr + 2048 * i, 2048, rbuf.key)]);
    }
    // A UDP packet: the headers inline in the Ethernet segment, the
    // payload gathered, checksums inserted by the device.
    let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let src = a.mr(4096, 0, 0);
    a.write(src.addr, &payload);
    let hdr = udp_frame(b.mac(1), a.mac(1), payload.len());
    let w = Wr {
        eth: Some((0xc0, hdr.clone())),
        ..Wr::new(op::SEND).sge(src.addr, 300, src.key)
    };
    a.post_send(&mut sq, &[w]);
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!((c.opcode, c.qpn, c.wqe_opcode), (0, sq.qpn, op::SEND));
    let r = &b.wait(&mut cb, 1)[0];
    r.ok();
    // `sop_drop_qpn` of a raw receive holds the flow tag (0), not the RQ.
    assert_eq!((r.opcode, r.qpn, r.byte_cnt), (2, 0, 342));
    assert_eq!(r.l4_l3, (2 << 4) | (2 << 2), "UDP over IPv4");
    let f = b.read(rbuf.addr, 342);
    assert_eq!(f[..12], hdr[..12]);
    assert_eq!(f[42..], payload[..]);
    assert_eq!(csum(&f[14..34], 0), 0, "IPv4 header checksum inserted");
    let ps = csum(&f[26..34], 17 + 308) ^ 0xffff;
    assert_eq!(csum(&f[34..], u32::from(ps)), 0, "UDP checksum inserted");
    // A frame shorter than 60 bytes is padded like a NIC does.
    let w = Wr {
        eth: Some((0, hdr[..14].to_vec())),
        ..Wr::new(op::SEND).sge(src.addr, 10, src.key)
    };
    a.post_send(&mut sq, &[w]);
    a.wait(&mut ca, 1)[0].ok();
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 60);
    // With RoCE off on B, a RoCE v2 UD packet is an ordinary UDP frame
    // for the raw receive queue.
    let mut mv = inp(0x755, 0, 0x200);
    setf(&mut mv, 0xc, 1, 1, 1);
    b.r.ok(&mv, 16);
    let at = Attrs::default();
    let mut cu = a.cq(4);
    let mut ud = a.qp(&QpSpec::new(2, &cu));
    a.ud_ready(&mut ud, 1, &at);
    let av = Av {
        qkey: at.qkey,
        dqpn: 0x999,
        rmac: b.mac(1),
        rgid: b.gid(1),
        sgid_index: 0,
        hop_limit: 64,
        tclass: 0,
        flow_label: 0,
        rlid: 0,
    };
    let w = Wr {
        av: Some(av.clone()),
        ..Wr::new(op::SEND).inline(b"roce")
    };
    a.post_send(&mut ud, &[w]);
    a.wait(&mut cu, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    assert_eq!(r.l4_l3, (2 << 4) | (2 << 2));
    let f = b.read(rbuf.addr + 2 * 2048, r.byte_cnt as usize);
    assert_eq!(u16::from_be_bytes([f[36], f[37]]), 4791, "RoCE v2 UDP port");
    // No receive WQE left: dropped and counted.
    a.post_send(
        &mut ud,
        &[Wr {
            av: Some(av),
            ..Wr::new(op::SEND).inline(b"lost")
        }],
    );
    a.wait(&mut cu, 1)[0].ok();
    b.quiet(&mut cb, Duration::from_millis(1));
    assert_eq!(b.r.emu.datapath().drops.raw_no_buffer, 1);
    steer.teardown(&mut b);
    a.finish();
    b.finish();
}

#[test]
fn messages_beyond_64_kib_and_1_mib() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let n = 3 << 20;
    let src = a.mr(n, 0, LW);
    let dst = b.mr(n, 0, LW | RW | RR);
    let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    a.write(src.addr, &data);
    a.post_send(
        &mut qa,
        &[Wr::new(op::WRITE)
            .sge(src.addr, n as u32, src.key)
            .remote(dst.addr, dst.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    assert!(b.read(dst.addr, n) == data);
    b.post_recv(&mut qb, &[(dst.addr, 100_000, dst.key)]);
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND).sge(src.addr + 1, 100_000, src.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 100_000);
    assert!(b.read(dst.addr, 100_000) == data[1..100_001]);
    let back = a.mr(n, 0, LW);
    a.post_send(
        &mut qa,
        &[Wr::new(op::READ)
            .sge(back.addr, n as u32, back.key)
            .remote(dst.addr, dst.key)],
    );
    let c = &a.wait(&mut ca, 1)[0];
    assert_eq!(c.byte_cnt, n as u32);
    assert!(a.read(back.addr, 100_000) == data[1..100_001]);
    a.finish();
    b.finish();
}

#[test]
fn a_peer_in_stepping_mode_runs_when_stepped() {
    let mut a = Node::new(1, EmuConfig::default());
    let mut b = Node::new(2, EmuConfig::stepping());
    hca_emu::connect(&a.r.emu, 1, &b.r.emu, 1).unwrap();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(64, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 64, dst.key)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).inline(b"step")]);
    a.r.emu.run_until_idle();
    assert!(
        b.r.emu.pending_events() >= 1,
        "the frame waits in B's queue"
    );
    b.r.emu.run_until_idle();
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 4);
    a.wait(&mut ca, 1)[0].ok();
    a.finish();
    b.finish();
}

#[test]
fn bad_response_and_unsolicited_responses() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut ca = a.cq(6);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    // The path names a QPN B does not have: B drops A's requests, and B's
    // raw SQ answers instead.
    let p = a.path_to(&b, 1, 0xabcde, 1);
    a.connect(&mut qa, &p, &at);
    let (mut sq, _csq) = b.raw_sq();
    let local = a.mr(4096, 0, LW);
    a.post_send(
        &mut qa,
        &[Wr::new(op::READ)
            .sge(local.addr, 16, local.key)
            .remote(0x1000, 0x1234)],
    );
    a.r.emu.run_until_idle();
    assert_eq!(b.r.emu.datapath().drops.no_qp, 1);
    // An ACK for a PSN before anything outstanding, a READ response with a
    // PSN nobody asked for, an atomic ACK for the READ's PSN: stale,
    // ignored.
    let psn = at.sq_psn;
    let aeth = [0x1f, 0, 0, 1];
    for (opcode, p, body) in [
        (0x11u8, psn - 5, aeth.to_vec()),
        (0x10, psn + 7, [aeth.as_slice(), &[0; 16]].concat()),
        (0x12, psn, [aeth.as_slice(), &[0; 8]].concat()),
    ] {
        let f = roce_v2(&b, &a, opcode, qa.qpn, p, &body);
        b.send_frame(&mut sq, &f);
    }
    b.r.emu.run_until_idle();
    a.r.emu.run_until_idle();
    assert_eq!(a.r.emu.datapath().drops.stale, 3);
    assert!(a.poll(&mut ca).is_none());
    // The READ response with the right PSN but 8 bytes instead of 16: bad
    // response, the QP enters the error state.
    let f = roce_v2(
        &b,
        &a,
        0x10,
        qa.qpn,
        psn,
        &[aeth.as_slice(), &[7; 8]].concat(),
    );
    b.send_frame(&mut sq, &f);
    let c = &a.wait(&mut ca, 1)[0];
    c.err(hca_emu::cqe_syndrome::BAD_RESP);
    assert_eq!(c.wqe_opcode, op::READ);
    assert_eq!(a.r.emu.qp_state(qa.qpn), Some(hca_emu::QpState::Err));
    a.finish();
    b.finish();
}
