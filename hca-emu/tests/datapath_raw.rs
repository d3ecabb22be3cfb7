//! Raw Ethernet send and receive queues, RoCE frames reaching the raw path
//! when RoCE is off, and messages far beyond one frame's 16-bit lengths.

mod common;

use std::time::Duration;

use common::dp::*;
use common::{inp, put64, setf};
use hca_emu::EmuConfig;

/// CREATE_SQ or CREATE_RQ (cyclic WQ of `2^log` entries of `2^log_stride`
/// bytes) in the RST state, then MODIFY to RDY. Returns the queue as a
/// [`Qp`] for the posting helpers.
fn raw_wq(n: &mut Node, sq: bool, cqn: u32, tisn: u32, log: u32, log_stride: u32) -> Qp {
    let bytes = (1usize << (log + log_stride)).next_multiple_of(4096);
    let buf = n.mem(bytes, 0);
    let dbr = n.mem(64, 0);
    let pages = bytes / 4096;
    let mut m = inp(if sq { 0x904 } else { 0x908 }, 0, 0x110 + 8 * pages);
    setf(&mut m, 0x28, 23, 0, u64::from(cqn));
    if sq {
        setf(&mut m, 0x20 + 0x2c, 23, 0, u64::from(tisn));
    }
    setf(&mut m, 0x50, 31, 28, 1);
    setf(&mut m, 0x58, 23, 0, u64::from(n.pd));
    setf(&mut m, 0x5c, 23, 0, u64::from(n.uar));
    put64(&mut m, 0x60, dbr);
    setf(&mut m, 0x70, 19, 16, u64::from(log_stride));
    setf(&mut m, 0x70, 4, 0, u64::from(log));
    for i in 0..pages {
        put64(&mut m, 0x110 + 8 * i, buf + 4096 * i as u64);
    }
    let o = n.r.ok(&m, 16);
    let num = u32::from_be_bytes(o[8..12].try_into().unwrap()) & 0xff_ffff;
    n.keep(if sq { 0x906 } else { 0x90a }, num);
    let mut md = inp(if sq { 0x905 } else { 0x909 }, 0, 0x110);
    setf(&mut md, 8, 23, 0, u64::from(num));
    setf(&mut md, 0x20, 23, 20, 1);
    n.r.ok(&md, 16);
    Qp {
        qpn: num,
        st: 0,
        buf,
        dbr,
        log_rq: log,
        rq_stride: 1 << log_stride,
        log_sq: log,
        srq: true,
        sq_pc: 0,
        rq_pc: 0,
        port: 1,
        bf: false,
        bf_toggle: false,
    }
}

fn transport_domain(n: &mut Node) -> u32 {
    let o = n.r.ok(&inp(0x816, 0, 16), 16);
    let td = u32::from_be_bytes(o[8..12].try_into().unwrap()) & 0xff_ffff;
    n.keep(0x817, td);
    td
}

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
    let tda = transport_domain(&mut a);
    let mut tis = inp(0x912, 0, 0xc0);
    setf(&mut tis, 0x20 + 0x24, 23, 0, u64::from(tda));
    let o = a.r.ok(&tis, 16);
    let tisn = u32::from_be_bytes(o[8..12].try_into().unwrap()) & 0xff_ffff;
    a.keep(0x914, tisn);
    let mut ca = a.cq(6);
    let mut sq = raw_wq(&mut a, true, ca.cqn, tisn, 6, 6);
    let tdb = transport_domain(&mut b);
    let mut cb = b.cq(6);
    let mut rq = raw_wq(&mut b, false, cb.cqn, 0, 5, 6);
    let mut tir = inp(0x900, 0, 0x110);
    setf(&mut tir, 0x20 + 0x1c, 23, 0, u64::from(rq.qpn));
    setf(&mut tir, 0x20 + 0x24, 23, 0, u64::from(tdb));
    let o = b.r.ok(&tir, 16);
    let tirn = u32::from_be_bytes(o[8..12].try_into().unwrap()) & 0xff_ffff;
    b.keep(0x902, tirn);
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
    assert_eq!((r.opcode, r.qpn, r.byte_cnt), (2, rq.qpn, 342));
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
    let w = Wr {
        av: Some(Av {
            qkey: at.qkey,
            dqpn: 0x999,
            rmac: b.mac(1),
            rgid: b.gid(1),
            sgid_index: 0,
            hop_limit: 64,
            tclass: 0,
            flow_label: 0,
        }),
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
        &[{
            let mut w2 = Wr::new(op::SEND).inline(b"lost");
            w2.av = Some(Av {
                qkey: at.qkey,
                dqpn: 0x999,
                rmac: b.mac(1),
                rgid: b.gid(1),
                sgid_index: 0,
                hop_limit: 64,
                tclass: 0,
                flow_label: 0,
            });
            w2
        }],
    );
    a.wait(&mut cu, 1)[0].ok();
    b.quiet(&mut cb, Duration::from_millis(1));
    assert_eq!(b.r.emu.datapath().drops.raw_no_buffer, 1);
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
