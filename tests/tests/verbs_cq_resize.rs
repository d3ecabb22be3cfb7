//! `Cq::resize` (`ibv_resize_cq`, MODIFY_CQ with op_mod resize): the
//! completions not yet polled survive a resize up or down, in order; the
//! device goes on in the new ring (wrapping it several times); a size
//! below the completions outstanding, 0 or above `max_cqe` is refused
//! with a typed error and changes nothing.

use std::sync::Arc;
use std::time::Duration;

use hca_driver::Error;
use hca_driver::verbs::{
    AccessFlags, Cq, DmaBuf, Mr, Pd, Qp, QpInitAttr, QpType, SendFlags, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use hca_tests::verbs::{RcParams, assert_quiet, connect_pair, poll_n, post_recv_sge, qp_cap};
use hca_tests::{Link, TestPlatform};
use platform::Platform;

/// How long the devices get to finish what was posted (device time).
const SETTLE: Duration = Duration::from_millis(5);

fn rc<P: Platform + 'static>(pd: &Arc<Pd<P>>, cq: &Arc<Cq<P>>) -> Qp<P> {
    Qp::create(
        pd,
        &QpInitAttr::new(QpType::Rc, cq, cq).cap(qp_cap(64, 64, 1, 64)),
    )
    .unwrap()
}

/// `n` signaled sends from `a` to `b` with wr_ids `base..base + n`; side
/// B's receives are polled, side A's send completions are left in `cqa`.
fn sends<P: Platform + 'static>(
    (a, cqa): (&mut Qp<P>, &Cq<P>),
    (b, mb, cqb): (&mut Qp<P>, &Mr<P>, &Cq<P>),
    base: u64,
    n: u64,
) {
    for k in 0..n {
        post_recv_sge(b, 0xb000 + k, mb.sge(0, 64).unwrap());
        a.post_send(
            &SendWr::new(base + k, SendOp::Send)
                .inline(b"resize")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
    }
    let wc = poll_n(cqb, n as usize);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    // Side A's completions (the ACKs) are all written by now.
    cqa.context().hca().platform().delay(SETTLE);
}

/// Polls `n` completions from `cq` and checks they are the successful
/// sends `base..base + n` of `qpn`, in order; then that nothing is left.
#[track_caller]
fn expect_sends<P: Platform + 'static>(cq: &Cq<P>, qpn: u32, base: u64, n: u64) {
    let wc = poll_n(cq, n as usize);
    let got: Vec<_> = wc
        .iter()
        .map(|w| (w.qp_num, w.wr_id, w.opcode, w.status))
        .collect();
    let want: Vec<_> = (0..n)
        .map(|k| (qpn, base + k, WcOpcode::Send, WcStatus::Success))
        .collect();
    assert_eq!(got, want);
    assert_quiet(cq, SETTLE);
}

#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::InvalidAttribute { attr: "cqe", .. }) => {}
        other => panic!("expected InvalidAttribute(cqe), got {other:?}"),
    }
}

fn resize_keeps_unpolled_completions<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(7).split();
        let cqb2 = Arc::new(Cq::create(&cb, 255).unwrap());
        drop(cqb);
        let bb = Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut a = rc(&pda, &cqa);
        let mut b = rc(&pdb, &cqb2);
        connect_pair(
            (&ca, pa, &mut a),
            (&cb, pb, &mut b),
            (0, hca_driver::Rkey(0)),
            &RcParams::default(),
        );
        let qpn = a.number().0;
        assert_eq!(cqa.cqe(), 7);
        let max = ca.query_device().max_cqe;

        // Up, with 5 completions outstanding in the 8-entry ring.
        sends((&mut a, &cqa), (&mut b, &mb, &cqb2), 0x100, 5);
        assert_eq!(cqa.resize(20).unwrap(), 31);
        assert_eq!(cqa.cqe(), 31);
        expect_sends(&cqa, qpn, 0x100, 5);
        // The device goes on in the new ring, around it several times.
        for round in 0..4u64 {
            let base = 0x1000 * (round + 1);
            sends((&mut a, &cqa), (&mut b, &mb, &cqb2), base, 20);
            expect_sends(&cqa, qpn, base, 20);
        }

        // Refused: fewer entries than outstanding, 0, above max_cqe. The
        // CQ is as it was.
        sends((&mut a, &cqa), (&mut b, &mb, &cqb2), 0x200, 5);
        refused(cqa.resize(3));
        refused(cqa.resize(0));
        refused(cqa.resize(max + 1));
        assert_eq!(cqa.cqe(), 31);

        // Down to 7 with the 5 still outstanding (a second resize: the
        // first resize's ring is given back).
        assert_eq!(cqa.resize(7).unwrap(), 7);
        expect_sends(&cqa, qpn, 0x200, 5);
        for round in 0..3u64 {
            let base = 0x10_000 * (round + 1);
            sends((&mut a, &cqa), (&mut b, &mb, &cqb2), base, 6);
            expect_sends(&cqa, qpn, base, 6);
        }

        // Down to 3 with exactly 3 outstanding; the same size again is
        // nothing to do.
        sends((&mut a, &cqa), (&mut b, &mb, &cqb2), 0x300, 3);
        assert_eq!(cqa.resize(3).unwrap(), 3);
        assert_eq!(cqa.resize(2).unwrap(), 3);
        expect_sends(&cqa, qpn, 0x300, 3);
        sends((&mut a, &cqa), (&mut b, &mb, &cqb2), 0x400, 3);
        expect_sends(&cqa, qpn, 0x400, 3);

        // Empty, up again.
        assert_eq!(cqa.resize(100).unwrap(), 127);
        sends((&mut a, &cqa), (&mut b, &mb, &cqb2), 0x500, 50);
        expect_sends(&cqa, qpn, 0x500, 50);
        drop((a, b));
    }
    l.close(h);
}

hca_tests::link_scenarios!(resize_keeps_unpolled_completions);
