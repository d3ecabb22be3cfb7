//! Every error status of the transport engine, each from the situation
//! that causes it on real hardware, and the error state's flushes.

mod common;

use std::time::Duration;

use common::dp::*;
use hca_emu::cqe_syndrome as syn;
use hca_emu::{PacketDrop, QpState};
use platform::Platform;

fn quick() -> Attrs {
    Attrs {
        ack_timeout: 10, // 4.2 ms
        retry_count: 3,
        rnr_retry: 2,
        min_rnr_nak: 5, // 60 µs
        ..Attrs::default()
    }
}

#[test]
fn local_length_error_on_the_responder() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &quick());
    let src = a.mr(4096, 1, LW);
    let dst = b.mr(4096, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 100, dst.key)]);
    b.post_recv(&mut qb, &[(dst.addr + 200, 100, dst.key)]);
    a.post_send(
        &mut qa,
        &[
            Wr::new(op::SEND).sge(src.addr, 101, src.key),
            Wr::new(op::SEND).sge(src.addr, 10, src.key),
        ],
    );
    // Responder: the receive completes with local length error, the second
    // receive is flushed; requester: remote invalid request, then flush.
    let r = b.wait(&mut cb, 2);
    r[0].err(syn::LOCAL_LENGTH);
    assert_eq!((r[0].opcode, r[0].wqe_counter, r[0].qpn), (14, 0, qb.qpn));
    r[1].err(syn::WR_FLUSH);
    assert_eq!((r[1].wqe_counter, r[1].vendor), (1, 0xf9));
    let c = a.wait(&mut ca, 2);
    c[0].err(syn::REMOTE_INVALID_REQUEST);
    assert_eq!(
        (c[0].opcode, c[0].wqe_opcode, c[0].wqe_counter),
        (13, op::SEND, 0)
    );
    c[1].err(syn::WR_FLUSH);
    assert_eq!(c[1].wqe_counter, 1);
    assert_eq!(a.r.emu.qp_state(qa.qpn), Some(QpState::Err));
    assert_eq!(b.r.emu.qp_state(qb.qpn), Some(QpState::Err));
    // The responder's affiliated event: invalid request local WQ error.
    let ev = b.events();
    assert!(
        ev.iter().any(|e| e.0 == 0x10
            && u32::from_be_bytes(e.1[24..28].try_into().unwrap()) & 0xff_ffff == qb.qpn),
        "{ev:?}"
    );
    a.finish();
    b.finish();
}

#[test]
fn local_protection_error_and_flush_of_everything_behind() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &quick());
    let src = a.mr(4096, 1, LW);
    let other_pd = a.r.alloc_pd();
    a.keep(0x801, other_pd);
    let foreign = a.mem(4096, 0);
    let foreign = a.mkey(other_pd, foreign, 4096, LW);
    let no_write = a.mr(4096, 0, 0);
    let dst = b.mr(4096, 0, LW);
    for i in 0..4 {
        b.post_recv(&mut qb, &[(dst.addr + 64 * i, 64, dst.key)]);
    }
    // A posted receive on A too: flushed when A's QP enters the error
    // state.
    a.post_recv(&mut qa, &[(src.addr, 64, src.key)]);
    a.post_send(
        &mut qa,
        &[
            Wr::new(op::SEND).flags(0).sge(src.addr, 8, src.key),
            Wr::new(op::SEND)
                .flags(0)
                .sge(src.addr, 8, src.key ^ 0x0100_0000),
            Wr::new(op::SEND).flags(0).sge(src.addr, 8, src.key),
            Wr::new(op::WRITE).sge(src.addr, 8, src.key).remote(0, 0),
        ],
    );
    // The unsignaled first WQE succeeded silently; the second, unsignaled
    // too, fails with local protection (unknown lkey) and still completes;
    // the rest are flushed, signaled or not; A's posted receive is
    // flushed.
    let c = a.wait(&mut ca, 4);
    c[0].err(syn::LOCAL_PROT);
    assert_eq!(c[0].wqe_counter, 1);
    c[1].err(syn::WR_FLUSH);
    c[2].err(syn::WR_FLUSH);
    assert_eq!((c[1].wqe_counter, c[2].wqe_counter), (2, 3));
    assert_eq!(c[2].wqe_opcode, op::WRITE);
    c[3].err(syn::WR_FLUSH);
    assert_eq!((c[3].opcode, c[3].qpn), (14, qa.qpn), "A's receive");
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 8, "the first SEND arrived");
    // WQEs posted in the error state are flushed at the doorbell.
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND).flags(0).sge(src.addr, 8, src.key)],
    );
    a.wait(&mut ca, 1)[0].err(syn::WR_FLUSH);
    // ... and receives posted in the error state within 100 µs.
    a.post_recv(&mut qa, &[(src.addr, 64, src.key)]);
    let c = a.wait(&mut ca, 1);
    assert_eq!((c[0].opcode, c[0].syndrome, c[0].wqe_counter), (14, 5, 1));
    // The same for a key of another PD and a key without local write used
    // for an RDMA READ's destination.
    for (bad, opc) in [(foreign, op::SEND), (no_write, op::READ)] {
        let (mut q2, mut c2, _, _) = connected(&mut a, &mut b, 0, &quick());
        let w = if opc == op::READ {
            Wr::new(op::READ)
                .sge(bad.addr, 8, bad.key)
                .remote(dst.addr, 0)
        } else {
            Wr::new(opc).sge(bad.addr, 8, bad.key)
        };
        let remote = b.mr(64, 0, RR | LW);
        let w = if opc == op::READ {
            w.remote(remote.addr, remote.key)
        } else {
            w
        };
        a.post_send(&mut q2, &[w]);
        a.wait(&mut c2, 1)[0].err(syn::LOCAL_PROT);
    }
    a.finish();
    b.finish();
}

#[test]
fn remote_access_error() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, qb, mut cb) = connected(&mut a, &mut b, 0, &quick());
    let src = a.mr(4096, 1, LW);
    let ro = b.mr(4096, 0, LW | RR);
    let dst_recv = b.mr(4096, 0, LW);
    let mut qb = qb;
    b.post_recv(&mut qb, &[(dst_recv.addr, 64, dst_recv.key)]);
    // Write to a key without remote write: NAK remote access.
    a.post_send(
        &mut qa,
        &[Wr::new(op::WRITE)
            .sge(src.addr, 8, src.key)
            .remote(ro.addr, ro.key)],
    );
    let c = &a.wait(&mut ca, 1)[0];
    c.err(syn::REMOTE_ACCESS);
    assert_eq!(c.vendor, 0x88);
    assert_eq!(b.read(ro.addr, 8), vec![0; 8], "nothing written");
    // The responder QP is in error: its receive is flushed, and the event
    // is a local access violation.
    b.wait(&mut cb, 1)[0].err(syn::WR_FLUSH);
    assert_eq!(b.r.emu.qp_state(qb.qpn), Some(QpState::Err));
    assert!(b.events().iter().any(|e| e.0 == 0x11));
    // Out of bounds and unknown rkeys, and an atomic on a key without the
    // atomic right.
    let rw = b.mr(4096, 0, LW | RW);
    for w in [
        Wr::new(op::WRITE)
            .sge(src.addr, 8, src.key)
            .remote(rw.addr + 4090, rw.key),
        Wr::new(op::WRITE)
            .sge(src.addr, 8, src.key)
            .remote(rw.addr, rw.key + 0x100),
        Wr::new(op::READ)
            .sge(src.addr, 8, src.key)
            .remote(rw.addr, rw.key),
        Wr {
            atomic: Some((1, 0)),
            ..Wr::new(op::FA)
                .sge(src.addr, 8, src.key)
                .remote(rw.addr, rw.key)
        },
    ] {
        let (mut q, mut c, _, _) = connected(&mut a, &mut b, 0, &quick());
        a.post_send(&mut q, &[w]);
        a.wait(&mut c, 1)[0].err(syn::REMOTE_ACCESS);
    }
    a.finish();
    b.finish();
}

#[test]
fn remote_invalid_request() {
    let (mut a, mut b) = pair();
    let no_remote = Attrs {
        access: LW,
        ..quick()
    };
    let src = a.mr(4096, 1, LW);
    let target = b.mr(4096, 0, LW | RW | RR | AT);
    // The responder QP does not enable remote write / read / atomics.
    for w in [
        Wr::new(op::WRITE)
            .sge(src.addr, 8, src.key)
            .remote(target.addr, target.key),
        Wr::new(op::READ)
            .sge(src.addr, 8, src.key)
            .remote(target.addr, target.key),
        Wr {
            atomic: Some((1, 0)),
            ..Wr::new(op::FA)
                .sge(src.addr, 8, src.key)
                .remote(target.addr, target.key)
        },
    ] {
        let (mut q, mut c, _, _) = connected(&mut a, &mut b, 0, &no_remote);
        a.post_send(&mut q, &[w]);
        a.wait(&mut c, 1)[0].err(syn::REMOTE_INVALID_REQUEST);
    }
    // An atomic on an address that is not 8-byte aligned.
    let (mut q, mut c, _, _) = connected(&mut a, &mut b, 0, &quick());
    a.post_send(
        &mut q,
        &[Wr {
            atomic: Some((1, 0)),
            ..Wr::new(op::FA)
                .sge(src.addr, 8, src.key)
                .remote(target.addr + 4, target.key)
        }],
    );
    a.wait(&mut c, 1)[0].err(syn::REMOTE_INVALID_REQUEST);
    assert_eq!(b.read(target.addr, 16), vec![0; 16]);
    a.finish();
    b.finish();
}

#[test]
fn remote_operational_error_from_a_bad_receive_wqe() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &quick());
    let src = a.mr(4096, 1, LW);
    let dst = b.mr(4096, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 64, dst.key ^ 0x0200_0000)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 8, src.key)]);
    b.wait(&mut cb, 1)[0].err(syn::LOCAL_PROT);
    a.wait(&mut ca, 1)[0].err(syn::REMOTE_OP);
    a.finish();
    b.finish();
}

#[test]
fn rnr_retry_exceeded_and_rnr_recovery() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &quick());
    let src = a.mr(4096, 1, LW);
    let t0 = a.r.p.now();
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 8, src.key)]);
    let c = &a.wait(&mut ca, 1)[0];
    c.err(syn::RNR_RETRY);
    // rnr_retry 2: the first RNR NAK and two retries, each after the
    // responder's 60 µs timer.
    assert_eq!(b.r.emu.datapath().rnr_naks, 3);
    assert!(a.r.p.now() - t0 >= Duration::from_micros(120));
    b.quiet(&mut cb, Duration::from_millis(1));
    // rnr_retry 7 is infinite: the SEND waits until a receive is posted.
    let inf = Attrs {
        rnr_retry: 7,
        ..quick()
    };
    let (mut q2, mut c2, mut q2b, mut c2b) = connected(&mut a, &mut b, 0, &inf);
    let _ = (&mut qb, &mut cb);
    a.post_send(&mut q2, &[Wr::new(op::SEND).inline(b"patience")]);
    for _ in 0..20 {
        a.quiet(&mut c2, Duration::from_micros(100));
    }
    assert!(b.r.emu.datapath().rnr_naks > 10);
    let dst = b.mr(64, 0, LW);
    b.post_recv(&mut q2b, &[(dst.addr, 64, dst.key)]);
    a.wait(&mut c2, 1)[0].ok();
    assert_eq!(b.wait(&mut c2b, 1)[0].byte_cnt, 8);
    assert_eq!(b.read(dst.addr, 8), b"patience");
    a.finish();
    b.finish();
}

#[test]
fn transport_retry_exceeded_with_dropped_packets() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &quick());
    let src = a.mr(4096, 1, LW);
    let dst = b.mr(4096, 0, LW);
    for i in 0..4 {
        b.post_recv(&mut qb, &[(dst.addr + 64 * i, 64, dst.key)]);
    }
    // Every frame A sends is lost: the first try and retry_count (3)
    // retries time out.
    a.r.emu.faults().drop_packets(1, PacketDrop::All);
    let t0 = a.r.p.now();
    a.post_send(
        &mut qa,
        &[
            Wr::new(op::SEND).sge(src.addr, 8, src.key),
            Wr::new(op::SEND).sge(src.addr, 8, src.key),
        ],
    );
    let c = a.wait(&mut ca, 2);
    c[0].err(syn::TRANSPORT_RETRY);
    assert_eq!(c[0].vendor, 0x81);
    c[1].err(syn::WR_FLUSH);
    let dt = a.r.p.now() - t0;
    assert!(
        dt >= Duration::from_nanos((4 * 4096) << 10),
        "4 ACK timeouts: {dt:?}"
    );
    let dp = a.r.emu.datapath();
    assert_eq!(dp.retransmissions, 3 * 2, "two WQEs sent again 3 times");
    assert_eq!(dp.drops.injected, 8);
    b.quiet(&mut cb, Duration::from_millis(1));
    a.finish();
    b.finish();
}

#[test]
fn lost_packets_and_lost_acks_are_retransmitted_exactly_once() {
    let (mut a, mut b) = pair();
    let at = Attrs {
        retry_count: 7,
        ..quick()
    };
    let mut ca = a.cq(8);
    let mut cb = b.cq(8);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    let mut qb = b.qp(&QpSpec {
        log_rq: 6,
        ..QpSpec::new(0, &cb)
    });
    connect_pair(&mut a, &mut qa, &mut b, &mut qb, &at);
    let src = a.mr(4096, 0, LW);
    let dst = b.mr(64 * 64, 0, LW);
    let target = b.mr(64, 0, LW | AT | RW);
    for i in 0..40u64 {
        b.post_recv(&mut qb, &[(dst.addr + 64 * i, 64, dst.key)]);
    }
    for i in 0..32u8 {
        a.write(src.addr + 16 * u64::from(i), &[i; 16]);
    }
    // A loses a fifth of the frames it sends, B a fifth of its ACKs.
    a.r.emu.faults().drop_packets(1, PacketDrop::Rate(0.2));
    b.r.emu.faults().drop_packets(1, PacketDrop::Rate(0.2));
    let mut wrs: Vec<Wr> = (0..32u64)
        .map(|i| Wr::new(op::SEND).sge(src.addr + 16 * i, 16, src.key))
        .collect();
    // Fetch-and-adds in between: a lost atomic ACK must not apply the add
    // twice (the responder answers the duplicate from its saved result).
    for k in 0..4 {
        wrs.insert(
            8 * k + 4,
            Wr {
                atomic: Some((1, 0)),
                ..Wr::new(op::FA)
                    .sge(src.addr + 2048 + 8 * k as u64, 8, src.key)
                    .remote(target.addr, target.key)
            },
        );
    }
    a.post_send(&mut qa, &wrs);
    let c = a.wait(&mut ca, wrs.len());
    for x in &c {
        x.ok();
    }
    let counters: Vec<u16> = c.iter().map(|x| x.wqe_counter).collect();
    let mut sorted = counters.clone();
    sorted.sort_unstable();
    assert_eq!(counters, sorted, "completions in order");
    let r = b.wait(&mut cb, 32);
    for (i, x) in r.iter().enumerate() {
        x.ok();
        assert_eq!(
            b.read(dst.addr + 64 * i as u64, 16),
            vec![i as u8; 16],
            "in order, once"
        );
    }
    b.quiet(&mut cb, Duration::from_millis(20));
    assert_eq!(b.read(target.addr, 8), 4u64.to_be_bytes(), "each add once");
    let dp = a.r.emu.datapath();
    assert!(dp.retransmissions > 0 && dp.drops.injected > 0);
    a.r.emu.faults().drop_packets(1, PacketDrop::None);
    a.finish();
    b.finish();
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    let (mut a, mut b) = pair();
    let src = a.mr(64, 0, LW);
    // An opcode RC does not execute (UMR 0x25), ds 0, a foreign QPN, a
    // wrong wqe_index.
    for case in 0..4 {
        let (mut qa, mut ca, _, _) = connected(&mut a, &mut b, 0, &quick());
        let mut w = Wr::new(op::SEND)
            .sge(src.addr, 8, src.key)
            .encode(0, qa.qpn);
        match case {
            0 => w[3] = 0x25,
            1 => w[7] = 0,
            2 => w[4..7].copy_from_slice(&[0, 0, 1]),
            _ => w[1..3].copy_from_slice(&[0, 5]),
        }
        w.resize(64, 0);
        a.write(qa.buf + (16 * 64) as u64, &w);
        qa.sq_pc = 1;
        // The doorbell names the QP correctly; the WQE in memory is bad.
        let db = Wr::new(op::SEND)
            .sge(src.addr, 8, src.key)
            .encode(0, qa.qpn);
        a.ring(&mut qa, &db);
        let c = &a.wait(&mut ca, 1)[0];
        c.err(syn::LOCAL_QP_OP);
        assert_eq!(c.wqe_counter, 0);
        assert_eq!(a.r.emu.qp_state(qa.qpn), Some(QpState::Err));
    }
    assert!(a.r.emu.datapath().log.iter().any(|s| s.contains("ds is 0")));
    a.finish();
    b.finish();
}

#[test]
fn error_state_flush_reset_and_reuse() {
    let (mut a, mut b) = pair();
    let at = quick();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
    let dst = b.mr(4096, 0, LW);
    for i in 0..3 {
        b.post_recv(&mut qb, &[(dst.addr + 64 * i, 64, dst.key)]);
    }
    // 2ERR_QP: every posted receive is flushed, in order.
    b.modify(&qb, 0x507);
    let r = b.wait(&mut cb, 3);
    for (i, x) in r.iter().enumerate() {
        x.err(syn::WR_FLUSH);
        assert_eq!(x.wqe_counter, i as u16);
    }
    // A's SEND finds no receiver: the responder in error drops it, A
    // retries and gives up.
    a.post_send(&mut qa, &[Wr::new(op::SEND).inline(b"x")]);
    a.wait(&mut ca, 1)[0].err(syn::TRANSPORT_RETRY);
    // Back to RESET and up again, with fresh counters on both sides.
    a.modify(&qa, 0x50a);
    b.modify(&qb, 0x50a);
    a.write(qa.dbr, &[0; 8]);
    b.write(qb.dbr, &[0; 8]);
    qa.sq_pc = 0;
    qa.rq_pc = 0;
    qb.sq_pc = 0;
    qb.rq_pc = 0;
    connect_pair(&mut a, &mut qa, &mut b, &mut qb, &at);
    b.post_recv(&mut qb, &[(dst.addr, 64, dst.key)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).inline(b"again")]);
    a.wait(&mut ca, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    assert_eq!((r.byte_cnt, r.wqe_counter), (5, 0));
    a.finish();
    b.finish();
}

#[test]
fn a_port_without_a_peer_drops_everything() {
    let mut a = Node::new(1, hca_emu::EmuConfig::default());
    let b = Node::new(2, hca_emu::EmuConfig::default());
    let mut ca = a.cq(6);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    let p = a.path_to(&b, 1, 0x1234, 1);
    a.connect(&mut qa, &p, &quick());
    a.post_send(&mut qa, &[Wr::new(op::SEND).inline(b"void")]);
    a.wait(&mut ca, 1)[0].err(syn::TRANSPORT_RETRY);
    assert_eq!(a.r.emu.datapath().drops.no_link, 4);
    a.finish();
    b.finish();
}
