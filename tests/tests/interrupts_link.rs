//! MSI-X interrupts on a link: a completion event wakes the CQ's waiter
//! through the completion EQ's vector, and `poll_wait` sleeps too (also on
//! a real device pair, `HCA_PCI=<bdf1>,<bdf2>`, through the vfio backend's
//! eventfds). The single-device interrupt tests are in `interrupts.rs`.

use hca_driver::InterruptStats;
use hca_driver::verbs::{
    AccessFlags, QpCap, QpInitAttr, QpType, SendOp, SendWr, WcOpcode, WcStatus,
};
use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd, Qp};
use hca_tests::verbs::{RcParams, WAIT, connect_pair, poll_ok, post_recv_sge};
use hca_tests::{Link, TestPlatform, link_scenarios};
use std::sync::Arc;

fn delta(a: InterruptStats, b: InterruptStats) -> (u64, u64, u64) {
    (
        b.wakeups - a.wakeups,
        b.idle_sleeps - a.idle_sleeps,
        b.polls - a.polls,
    )
}

/// A completion event wakes `wait_event` through the completion EQ's
/// vector; `poll_wait` sleeps too.
fn cq_event_wakes_the_waiter<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ha, hb) = (&h.a, h.b());
        let (ca, cb) = (
            Arc::new(Context::open(ha).unwrap()),
            Arc::new(Context::open(hb).unwrap()),
        );
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 8).unwrap()),
            Arc::new(Cq::create(&cb, 8).unwrap()),
        );
        let (bufa, bufb) = (
            Arc::new(DmaBuf::alloc(ha, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(hb, 4096).unwrap()),
        );
        let access = AccessFlags::LOCAL_WRITE;
        let (mra, mrb) = (
            Mr::register(&pda, &bufa, access).unwrap(),
            Mr::register(&pdb, &bufb, access).unwrap(),
        );
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let attr = |cq| {
            QpInitAttr::new(QpType::Rc, cq, cq)
                .cap(cap)
                .sq_sig_all(true)
        };
        let mut qa = Qp::create(&pda, &attr(&cqa)).unwrap();
        let mut qb = Qp::create(&pdb, &attr(&cqb)).unwrap();
        connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (0, hca_driver::Rkey(0)),
            &RcParams::default(),
        );
        let vector = hb.eq_vector(cqb.eqn()).expect("on interrupts");
        assert_eq!(vector, hb.platform().msix_vectors().min(2) - 1);
        // Whether the event is there at the first look depends on the
        // devices' speed: over several rounds, some wait sleeps and an
        // interrupt wakes it.
        let mut woken = 0;
        for round in 0..8u64 {
            post_recv_sge(&mut qb, round, mrb.sge(0, 64).unwrap());
            cqb.req_notify(false);
            let s0 = hb.interrupt_stats();
            qa.post_send(&SendWr::new(round, SendOp::Send).sgl(&[mra.sge(0, 64).unwrap()]))
                .unwrap();
            assert_eq!(cqb.wait_event(WAIT).unwrap(), 1);
            let (wakeups, _, polls) = delta(s0, hb.interrupt_stats());
            assert_eq!(polls, 0, "wait_event polled on interrupts");
            woken += wakeups;
            let wc = poll_ok(&cqb);
            assert_eq!((wc.wr_id, wc.opcode), (round, WcOpcode::Recv));
            // The sender's completion, waited for with poll_wait.
            let wc = poll_ok(&cqa);
            assert_eq!((wc.wr_id, wc.status), (round, WcStatus::Success));
        }
        assert!(
            woken >= 1,
            "no completion event woke its waiter: {}",
            hb.interrupt_stats()
        );
        // A drain waits for the flush completions of the receives still
        // posted by sleeping, not polling.
        for k in 0..3 {
            post_recv_sge(&mut qb, 100 + k, mrb.sge(0, 64).unwrap());
        }
        let s0 = hb.interrupt_stats();
        let mut flushed = 0;
        qb.drain(WAIT, |wc| {
            assert_eq!(wc.status, WcStatus::WrFlushErr, "{wc:?}");
            flushed += 1;
        })
        .unwrap();
        assert_eq!(flushed, 3);
        assert_eq!(delta(s0, hb.interrupt_stats()).2, 0, "the drain polled");
    }
    l.close(h);
}

link_scenarios!(cq_event_wakes_the_waiter);
