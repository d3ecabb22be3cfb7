//! Every work completion error the verbs API can see, each from the
//! situation that causes it on a real HCA: local length, local protection,
//! remote access, remote invalid request, remote operation, RNR retry
//! exceeded, WR flushed, transport retry exceeded (emulated packet loss);
//! the error state, the drain helper, SQE recovery and reuse after reset.

use hca_driver::verbs::{Ah, Context, DmaBuf, Mr};
use std::sync::Arc;
use std::time::Duration;

use hca_driver::verbs::{
    AccessFlags, Cq, Pd, Qp, QpAttr, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendOp,
    SendWr, Sge, SgeCheck, WcOpcode, WcStatus, WorkCompletion, WrError,
};
use hca_emu::PacketDrop;
use hca_tests::verbs::{
    Endpoint, RcParams, WAIT, assert_quiet, connect, path_to, poll_n, poll_ok, post_recv_sge,
    qp_cap, ud_ready,
};
use hca_tests::{Link, TestPlatform};
use platform::Platform;

/// An RC or UC QP without SGE checks (the device sees every key).
fn raw_qp<P: Platform + 'static>(pd: &Arc<Pd<P>>, cq: &Arc<Cq<P>>, t: QpType) -> Qp<P> {
    Qp::create(
        pd,
        &QpInitAttr::new(t, cq, cq)
            .cap(qp_cap(16, 16, 2, 32))
            .sge_check(SgeCheck::Off),
    )
    .unwrap()
}

/// Quick timers: ACK timeout 4.2 ms, 3 retries, 2 RNR retries of 60 µs.
fn quick() -> RcParams {
    RcParams {
        access: AccessFlags::ALL,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 2,
        min_rnr_timer: 5,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..RcParams::default()
    }
}

#[track_caller]
fn status(w: &WorkCompletion, s: WcStatus, text: &str) {
    assert_eq!(w.status, s, "{w:?}");
    assert_eq!(w.status.to_string(), text);
}

/// Sets up a connected RC pair and runs `f` with (A's QP, A's CQ, B's QP,
/// B's CQ, A's region, B's regions: plain and read-only).
macro_rules! rc_pair {
    ($l:expr, $h:expr, $params_a:expr, $params_b:expr, |$ca:ident, $qa:ident, $cqa:ident, $qb:ident, $cqb:ident, $ma:ident, $mb:ident, $ro:ident, $bb:ident| $body:block) => {{
        let (pa, pb) = ($l.port_a, $l.port_b);
        let $ca = Arc::new(Context::open(&$h.a).unwrap());
        let cb = Arc::new(Context::open($h.b()).unwrap());
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&$ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let ($cqa, $cqb) = (
            Arc::new(Cq::create(&$ca, 64).unwrap()),
            Arc::new(Cq::create(&cb, 64).unwrap()),
        );
        let (ba, $bb) = (
            Arc::new(DmaBuf::alloc(&$h.a, 8192).unwrap()),
            Arc::new(DmaBuf::alloc($h.b(), 8192).unwrap()),
        );
        let $ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let $mb = Mr::register_range(
            &pdb,
            &$bb,
            0,
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            Default::default(),
        )
        .unwrap();
        let $ro = Mr::register_range(
            &pdb,
            &$bb,
            4096,
            4096,
            AccessFlags::REMOTE_READ,
            Default::default(),
        )
        .unwrap();
        let mut $qa = raw_qp(&pda, &$cqa, QpType::Rc);
        let mut $qb = raw_qp(&pdb, &$cqb, QpType::Rc);
        let ea = Endpoint::of(&$ca, pa, $qa.number().0, 0, hca_driver::Rkey(0));
        let eb = Endpoint::of(&cb, pb, $qb.number().0, $mb.addr(), $mb.rkey());
        connect(&$ca, &mut $qa, pa, &eb, &$params_a);
        connect(&cb, &mut $qb, pb, &ea, &$params_b);
        $body
    }};
}

fn local_length_error<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ca, &ro, &bb);
            post_recv_sge(&mut qb, 1, mb.sge(0, 100).unwrap());
            post_recv_sge(&mut qb, 2, mb.sge(200, 100).unwrap());
            qa.post_send_list(&[
                SendWr::new(10, SendOp::Send)
                    .sgl(&[ma.sge(0, 101).unwrap()])
                    .flags(SendFlags::SIGNALED),
                SendWr::new(11, SendOp::Send)
                    .sgl(&[ma.sge(0, 10).unwrap()])
                    .flags(SendFlags::SIGNALED),
            ])
            .unwrap();
            // Responder: local length error, then its other receive flushed.
            let r = poll_n(&cqb, 2);
            status(&r[0], WcStatus::LocLenErr, "local length error");
            assert_eq!((r[0].wr_id, r[0].opcode), (1, WcOpcode::Recv));
            status(&r[1], WcStatus::WrFlushErr, "Work Request Flushed Error");
            assert_eq!(r[1].wr_id, 2);
            // Requester: remote invalid request, then the next SEND flushed.
            let c = poll_n(&cqa, 2);
            status(
                &c[0],
                WcStatus::RemInvReqErr,
                "remote invalid request error",
            );
            assert_eq!((c[0].wr_id, c[0].opcode), (10, WcOpcode::Send));
            status(&c[1], WcStatus::WrFlushErr, "Work Request Flushed Error");
            assert_eq!(c[1].wr_id, 11);
            assert_eq!(qa.query().unwrap().qp_state, QpState::Err);
            assert_eq!(qb.query().unwrap().qp_state, QpState::Err);
            // The responder's affiliated event (invalid request local WQ error).
            let ev = qb.take_events().unwrap();
            assert_ne!(
                ev & (1 << firmware_cmds::eq::EVENT_TYPE_WQ_INVAL_REQ_ERROR),
                0,
                "{ev:#x}"
            );
        }
    );
    l.close(h);
}

fn local_protection_error_and_flush<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ca, &ro, &bb);
            for i in 0..4 {
                post_recv_sge(&mut qb, 100 + i, mb.sge(64 * i as usize, 64).unwrap());
            }
            // A receive on A, flushed when A's QP enters the error state.
            post_recv_sge(&mut qa, 50, ma.sge(4096, 64).unwrap());
            let good = ma.sge(0, 8).unwrap();
            let mut bad = good;
            bad.lkey ^= 0x0100_0000;
            qa.post_send_list(&[
                SendWr::new(1, SendOp::Send).sgl(&[good]),
                SendWr::new(2, SendOp::Send)
                    .sgl(&[bad])
                    .flags(SendFlags::SIGNALED),
                SendWr::new(3, SendOp::Send).sgl(&[good]),
                SendWr::new(4, SendOp::Send)
                    .sgl(&[good])
                    .flags(SendFlags::SIGNALED),
            ])
            .unwrap();
            // The unsignaled first SEND arrived; the second fails; the rest,
            // signaled or not, and A's receive are flushed.
            let c = poll_n(&cqa, 4);
            status(&c[0], WcStatus::LocProtErr, "local protection error");
            assert_eq!(c[0].wr_id, 2);
            for w in &c[1..] {
                status(w, WcStatus::WrFlushErr, "Work Request Flushed Error");
            }
            let mut ids: Vec<u64> = c[1..].iter().map(|w| w.wr_id).collect();
            ids.sort();
            assert_eq!(ids, vec![3, 4, 50]);
            assert_eq!(poll_ok(&cqb).byte_len, 8, "the first SEND arrived");
            // Posting in the error state is allowed: flushed.
            qa.post_send(
                &SendWr::new(5, SendOp::Send)
                    .sgl(&[good])
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            status(
                &poll_n(&cqa, 1)[0],
                WcStatus::WrFlushErr,
                "Work Request Flushed Error",
            );
            post_recv_sge(&mut qa, 51, ma.sge(4096, 64).unwrap());
            let w = poll_n(&cqa, 1)[0];
            assert_eq!((w.wr_id, w.status), (51, WcStatus::WrFlushErr));
            assert_eq!(qa.outstanding(), (0, 0));
        }
    );
    l.close(h);
}

fn remote_access_error<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = &ca;
            post_recv_sge(&mut qb, 7, mb.sge(0, 64).unwrap());
            // An RDMA WRITE to a read-only region.
            qa.post_send(
                &SendWr::new(
                    1,
                    SendOp::RdmaWrite {
                        remote_addr: ro.addr(),
                        rkey: ro.rkey().0,
                    },
                )
                .sgl(&[ma.sge(0, 8).unwrap()])
                .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let w = poll_n(&cqa, 1)[0];
            status(&w, WcStatus::RemAccessErr, "remote access error");
            assert_eq!(w.opcode, WcOpcode::RdmaWrite);
            assert_eq!(bb.read8(4096).unwrap(), [0; 8], "nothing written");
            // The responder is in error too: its receive flushed, a local
            // access violation event.
            status(
                &poll_n(&cqb, 1)[0],
                WcStatus::WrFlushErr,
                "Work Request Flushed Error",
            );
            assert_eq!(qb.query().unwrap().qp_state, QpState::Err);
            let ev = qb.take_events().unwrap();
            assert_ne!(
                ev & (1 << firmware_cmds::eq::EVENT_TYPE_WQ_ACCESS_ERROR),
                0,
                "{ev:#x}"
            );
        }
    );
    l.close(h);
    // Out of bounds and an unknown rkey, each on a fresh connection.
    for case in 0..2 {
        let h = l.open();
        rc_pair!(
            l,
            h,
            quick(),
            quick(),
            |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
                let _ = (&ca, &qb, &cqb, &ro, &bb);
                let (addr, rkey) = match case {
                    0 => (mb.addr() + 4090, mb.rkey()),
                    _ => (mb.addr(), hca_driver::Rkey(mb.rkey().0 ^ 0x100)),
                };
                qa.post_send(
                    &SendWr::new(
                        2,
                        SendOp::RdmaWrite {
                            remote_addr: addr,
                            rkey: rkey.0,
                        },
                    )
                    .sgl(&[ma.sge(0, 8).unwrap()])
                    .flags(SendFlags::SIGNALED),
                )
                .unwrap();
                status(
                    &poll_n(&cqa, 1)[0],
                    WcStatus::RemAccessErr,
                    "remote access error",
                );
            }
        );
        l.close(h);
    }
}

fn remote_invalid_request<P: TestPlatform>(l: &mut Link<P>) {
    // The responder QP allows no remote access at all.
    let h = l.open();
    let closed = RcParams {
        access: AccessFlags::LOCAL_WRITE,
        ..quick()
    };
    rc_pair!(
        l,
        h,
        quick(),
        closed,
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ca, &qb, &cqb, &ro);
            qa.post_send(
                &SendWr::new(
                    1,
                    SendOp::RdmaWrite {
                        remote_addr: mb.addr(),
                        rkey: mb.rkey().0,
                    },
                )
                .sgl(&[ma.sge(0, 8).unwrap()])
                .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let w = poll_n(&cqa, 1)[0];
            status(&w, WcStatus::RemInvReqErr, "remote invalid request error");
            assert_eq!(bb.read8(0).unwrap(), [0; 8]);
        }
    );
    l.close(h);
}

fn remote_operation_error<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ca, &ro, &bb);
            // B's receive names a key that does not exist (B's checks are off).
            let mut s = mb.sge(0, 64).unwrap();
            s.lkey ^= 0x0200_0000;
            post_recv_sge(&mut qb, 1, s);
            qa.post_send(
                &SendWr::new(2, SendOp::Send)
                    .sgl(&[ma.sge(0, 8).unwrap()])
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            status(
                &poll_n(&cqb, 1)[0],
                WcStatus::LocProtErr,
                "local protection error",
            );
            status(
                &poll_n(&cqa, 1)[0],
                WcStatus::RemOpErr,
                "remote operation error",
            );
        }
    );
    l.close(h);
}

fn rnr_retry_exceeded<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ro, &bb, &mb);
            // No receive posted on B, 2 RNR retries.
            let p = ca.hca().platform();
            let t0 = p.now();
            qa.post_send(
                &SendWr::new(1, SendOp::Send)
                    .sgl(&[ma.sge(0, 8).unwrap()])
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let w = poll_n(&cqa, 1)[0];
            status(&w, WcStatus::RnrRetryExcErr, "RNR retry counter exceeded");
            assert!(p.now() - t0 >= Duration::from_micros(100), "two RNR waits");
            assert_quiet(&cqb, Duration::from_millis(1));
            assert_eq!(
                qb.query().unwrap().qp_state,
                QpState::Rts,
                "the responder is fine"
            );
        }
    );
    l.close(h);
}

fn drain_reset_and_reuse<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ro, &ma);
            for i in 0..5 {
                post_recv_sge(&mut qb, 200 + i, mb.sge(64 * i as usize, 64).unwrap());
            }
            // Unsignaled sends complete silently, then the drain: B's
            // remaining receives are flushed; the drain's own markers are not
            // passed on.
            for i in 0..3 {
                qa.post_send(&SendWr::new(i, SendOp::Send).inline(b"x"))
                    .unwrap();
            }
            let got = poll_n(&cqb, 3);
            assert!(got.iter().all(|w| w.status == WcStatus::Success));
            let mut flushed = Vec::new();
            qa.drain(WAIT, |w| flushed.push(*w)).unwrap();
            assert!(
                flushed.is_empty(),
                "nothing of A's was outstanding: {flushed:?}"
            );
            assert_eq!(qa.state(), QpState::Err);
            assert_eq!(qa.outstanding(), (0, 0));
            let mut flushed = Vec::new();
            qb.drain(WAIT, |w| flushed.push(*w)).unwrap();
            let mut ids: Vec<u64> = flushed.iter().map(|w| w.wr_id).collect();
            ids.sort();
            assert_eq!(ids, vec![203, 204]);
            assert!(flushed.iter().all(|w| w.status == WcStatus::WrFlushErr));
            // Reset and connect again: the QPs work as new.
            qa.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            qb.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            assert_eq!(qa.query().unwrap().qp_state, QpState::Reset);
            let ea = Endpoint::of(&ca, l.port_a, qa.number().0, 0, hca_driver::Rkey(0));
            let cb = qb.pd().context().clone();
            let eb = Endpoint::of(&cb, l.port_b, qb.number().0, 0, hca_driver::Rkey(0));
            let p = RcParams {
                sq_psn: 0x100,
                rq_psn: 0x100,
                ..quick()
            };
            connect(&ca, &mut qa, l.port_a, &eb, &p);
            connect(&cb, &mut qb, l.port_b, &ea, &p);
            post_recv_sge(&mut qb, 300, mb.sge(0, 64).unwrap());
            qa.post_send(
                &SendWr::new(9, SendOp::Send)
                    .inline(b"again")
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            assert_eq!(poll_ok(&cqb).wr_id, 300);
            assert_eq!(poll_ok(&cqa).wr_id, 9);
            let mut got = [0u8; 5];
            bb.read(0, &mut got).unwrap();
            assert_eq!(&got, b"again");
        }
    );
    l.close(h);
}

/// A UD send error puts the QP in SQE (its receive side keeps working);
/// SQE -> RTS recovers it.
fn ud_send_queue_error_and_recovery<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(16).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qa = raw_qp(&pda, &cqa, QpType::Ud);
        let mut qb = raw_qp(&pdb, &cqb, QpType::Ud);
        ud_ready(&mut qa, pa, 7);
        ud_ready(&mut qb, pb, 7);
        let eb = Endpoint::of(&cb, pb, qb.number().0, 0, hca_driver::Rkey(0));
        let ah = Ah::create(&pda, &path_to(&ca, pa, &eb, 64)).unwrap();
        let mut bad = ma.sge(0, 8).unwrap();
        bad.lkey ^= 0x0100_0000;
        qa.post_send(
            &SendWr::new(1, SendOp::Send)
                .sgl(&[bad])
                .flags(SendFlags::SIGNALED)
                .ud(ah.dest(eb.qpn, 7)),
        )
        .unwrap();
        status(
            &poll_n(&cqa, 1)[0],
            WcStatus::LocProtErr,
            "local protection error",
        );
        assert_eq!(qa.query().unwrap().qp_state, QpState::Sqe);
        // SQE -> RTS (SQERR2RTS), then it sends again.
        qa.modify(&QpAttr::new().state(QpState::Rts)).unwrap();
        assert_eq!(qa.query().unwrap().qp_state, QpState::Rts);
        post_recv_sge(&mut qb, 3, mb.sge(0, 128).unwrap());
        qa.post_send(
            &SendWr::new(2, SendOp::Send)
                .inline(b"recovered")
                .flags(SendFlags::SIGNALED)
                .ud(ah.dest(eb.qpn, 7)),
        )
        .unwrap();
        assert_eq!(poll_ok(&cqa).wr_id, 2);
        let w = poll_ok(&cqb);
        assert_eq!((w.wr_id, w.byte_len), (3, 40 + 9));
    }
    l.close(h);
}

/// Without key checks the device's reserved lkey is still refused, on
/// every posting path, before anything reaches the device: with it a
/// work request would reach any physical address.
fn reserved_lkey_refused_without_key_checks<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ro, &bb, &mb);
            let resd = ca.reserved_lkey().unwrap();
            let special = h.a.query_special_contexts().unwrap();
            assert_eq!(special.resd_lkey, resd);
            let mut sge = ma.sge(0, 8).unwrap();
            sge.lkey = resd;
            let is_reserved = |e: hca_driver::Error| {
                assert!(
                    matches!(
                        e,
                        hca_driver::Error::InvalidWorkRequest {
                            index: 0,
                            reason: WrError::ReservedLkey { sge: 0, lkey },
                        } if lkey == resd
                    ),
                    "{e:?}"
                );
                assert!(e.to_string().contains("reserved lkey"), "{e}");
            };
            let sgl = [sge];
            let send = SendWr::new(1, SendOp::Send)
                .sgl(&sgl)
                .flags(SendFlags::SIGNALED);
            is_reserved(qa.post_send(&send).unwrap_err());
            is_reserved(qa.post_send_sge(2, SendFlags::SIGNALED, sge).unwrap_err());
            is_reserved(
                qa.post_rdma_write(3, SendFlags::SIGNALED, 0, hca_driver::Rkey(0), sge)
                    .unwrap_err(),
            );
            let mut b = qa.batch().unwrap();
            is_reserved(b.post_send(&send).unwrap_err());
            is_reserved(b.post_send_sge(4, SendFlags::SIGNALED, sge).unwrap_err());
            b.ring();
            is_reserved(
                qb.post_recv(&RecvWr {
                    wr_id: 5,
                    sgl: &[sge],
                })
                .unwrap_err(),
            );
            // An empty SGE names no memory, whatever its key.
            let empty = Sge { length: 0, ..sge };
            qb.post_recv(&RecvWr {
                wr_id: 6,
                sgl: &[empty],
            })
            .unwrap();
            // Nothing reached the device (the empty receive is B's only
            // outstanding request).
            assert_eq!(qa.outstanding(), (0, 0));
            assert_eq!(qb.outstanding(), (0, 1));
            assert_quiet(&cqa, Duration::from_millis(1));
        }
    );
    l.close(h);
}

hca_tests::link_scenarios!(
    local_length_error,
    local_protection_error_and_flush,
    reserved_lkey_refused_without_key_checks,
    remote_access_error,
    remote_invalid_request,
    remote_operation_error,
    rnr_retry_exceeded,
    drain_reset_and_reuse,
    ud_send_queue_error_and_recovery,
);

/// Transport retry exceeded needs lost packets: the emulator drops every
/// frame side A sends (no hardware variant: a real wire does not lose
/// packets on request).
#[test]
fn emulated_transport_retry_exceeded() {
    let mut l = Link::emulated(hca_emu::EmuConfig::default(), hca_driver::Config::default());
    let h = l.open();
    rc_pair!(
        l,
        h,
        quick(),
        quick(),
        |ca, qa, cqa, qb, cqb, ma, mb, ro, bb| {
            let _ = (&ro, &bb);
            for i in 0..2 {
                post_recv_sge(&mut qb, i, mb.sge(64 * i as usize, 64).unwrap());
            }
            l.emu_a().faults().drop_packets(1, PacketDrop::All);
            let t0 = ca.hca().platform().now();
            qa.post_send_list(&[
                SendWr::new(1, SendOp::Send)
                    .sgl(&[ma.sge(0, 8).unwrap()])
                    .flags(SendFlags::SIGNALED),
                SendWr::new(2, SendOp::Send)
                    .sgl(&[ma.sge(0, 8).unwrap()])
                    .flags(SendFlags::SIGNALED),
            ])
            .unwrap();
            let c = poll_n(&cqa, 2);
            status(
                &c[0],
                WcStatus::RetryExcErr,
                "transport retry counter exceeded",
            );
            status(&c[1], WcStatus::WrFlushErr, "Work Request Flushed Error");
            let dt = ca.hca().platform().now() - t0;
            // The first try and 3 retries, each after an ACK timeout of
            // 4.096 µs × 2^10.
            assert!(dt >= Duration::from_nanos((4 * 4096) << 10), "{dt:?}");
            assert_eq!(l.emu_a().datapath().retransmissions, 3 * 2);
            l.emu_a().faults().drop_packets(1, PacketDrop::None);
            assert_quiet(&cqb, Duration::from_millis(1));
        }
    );
    l.close(h);
    l.assert_clean();
}
