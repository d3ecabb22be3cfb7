//! Completions of a QP that is reset (2RST) or destroyed while they are
//! still in a CQ it shares with another QP: they are removed (rdma-core's
//! `__mlx5_cq_clean`), the other QP's completions come out of the CQ in
//! order and correct, the reset QP works again after RESET -> INIT -> RTR
//! -> RTS, and the SRQ WQEs a reset QP's receive completions consumed go
//! back to the SRQ.

use hca_driver::verbs::Srq;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use hca_driver::Error;
use hca_driver::verbs::{
    AccessFlags, Cq, DmaBuf, Mr, Pd, Qp, QpAttr, QpInitAttr, QpState, QpType, RecvWr, SendFlags,
    SendOp, SendWr, SrqInitAttr, WcOpcode, WcStatus, WorkCompletion, WrError,
};
use hca_tests::verbs::{
    RcParams, assert_quiet, connect_pair, poll_n, poll_ok, post_recv_sge, qp_cap,
};
use hca_tests::{Link, TestPlatform};
use platform::Platform;

/// How long the devices get to finish what was posted (device time).
const SETTLE: Duration = Duration::from_millis(5);

/// An RC QP on `cq` (both directions) with room for 8 sends and 8
/// receives.
fn rc<P: Platform + 'static>(pd: &Arc<Pd<P>>, cq: &Arc<Cq<P>>) -> Qp<P> {
    Qp::create(
        pd,
        &QpInitAttr::new(QpType::Rc, cq, cq).cap(qp_cap(8, 8, 1, 64)),
    )
    .unwrap()
}

/// Connects `a` (on side A) and `b` (on side B) to each other.
fn pair<P: Platform + 'static>(
    (ca, pa): (&hca_driver::verbs::Context<P>, u8),
    a: &mut Qp<P>,
    (cb, pb): (&hca_driver::verbs::Context<P>, u8),
    b: &mut Qp<P>,
) {
    connect_pair(
        (ca, pa, a),
        (cb, pb, b),
        (0, hca_driver::Rkey(0)),
        &RcParams::default(),
    );
}

/// A signaled inline send of `msg` with `wr_id`.
fn send<P: Platform + 'static>(qp: &mut Qp<P>, wr_id: u64, msg: &[u8]) {
    qp.post_send(
        &SendWr::new(wr_id, SendOp::Send)
            .inline(msg)
            .flags(SendFlags::SIGNALED),
    )
    .unwrap_or_else(|e| panic!("{qp:?}: send {wr_id:#x}: {e}"));
}

/// A receive of 64 bytes at `slot * 64` of `mr`.
fn recv<P: Platform + 'static>(qp: &mut Qp<P>, mr: &Mr<P>, wr_id: u64, slot: usize) {
    post_recv_sge(qp, wr_id, mr.sge(64 * slot, 64).unwrap());
}

/// Checks `wc` are exactly the successful completions of QP `qpn` with
/// the `(wr_id, opcode)` given, in this order.
#[track_caller]
fn expect(wc: &[WorkCompletion], qpn: u32, want: &[(u64, WcOpcode)]) {
    let got: Vec<(u32, u64, WcOpcode, WcStatus)> = wc
        .iter()
        .map(|w| (w.qp_num, w.wr_id, w.opcode, w.status))
        .collect();
    let want: Vec<_> = want
        .iter()
        .map(|&(id, op)| (qpn, id, op, WcStatus::Success))
        .collect();
    assert_eq!(got, want);
}

/// Two QPs of side A share one CQ; each sends 2 messages to its peer and
/// receives 2 from it, interleaved with the other's, and none of it is
/// polled on side A (side B's completions are checked). Side A's CQ then
/// holds 4 completions of each QP ([`left_for`]).
fn traffic_unpolled<P: Platform + 'static>(
    a: [&mut Qp<P>; 2],
    b: [&mut Qp<P>; 2],
    (ma, mb): (&Mr<P>, &Mr<P>),
    cqb: &Arc<Cq<P>>,
    base: u64,
) {
    let [a1, a2] = a;
    let [b1, b2] = b;
    for k in 0..2u64 {
        for (i, (qa, qb)) in [(&mut *a1, &mut *b1), (&mut *a2, &mut *b2)]
            .into_iter()
            .enumerate()
        {
            let tag = base + 0x10 * i as u64 + k;
            recv(qa, ma, 0xa000 + tag, (2 * i) + k as usize);
            recv(qb, mb, 0xb000 + tag, (2 * i) + k as usize);
            send(qb, 0xb100 + tag, format!("to a{} #{k}", i + 1).as_bytes());
            send(qa, 0xa100 + tag, format!("to b{} #{k}", i + 1).as_bytes());
        }
    }
    // Side B: 4 receives and 4 sends, all fine.
    let wc = poll_n(cqb, 8);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    // Side A's CQEs are all written by now (the ACKs of its sends too).
    cqb.context().hca().platform().delay(SETTLE);
}

/// The completions `traffic_unpolled` left on side A for QP number `i`
/// (0 or 1), in the QP's own order.
fn left_for(i: u64, base: u64) -> Vec<(u64, WcOpcode)> {
    let mut v = Vec::new();
    for k in 0..2u64 {
        let tag = base + 0x10 * i + k;
        v.push((0xa000 + tag, WcOpcode::Recv));
        v.push((0xa100 + tag, WcOpcode::Send));
    }
    v
}

/// Polls side A's CQ for the 4 completions of `qpn` and checks they are
/// those `left_for(i, base)` names (each opcode in the QP's order: a
/// receive and a send of the QP complete in either order), then that
/// nothing else is there.
#[track_caller]
fn only_these<P: Platform + 'static>(cq: &Arc<Cq<P>>, qpn: u32, i: u64, base: u64) {
    let wc = poll_n(cq, 4);
    let want = left_for(i, base);
    for op in [WcOpcode::Recv, WcOpcode::Send] {
        let got: Vec<_> = wc.iter().filter(|w| w.opcode == op).copied().collect();
        let w: Vec<_> = want.iter().filter(|w| w.1 == op).copied().collect();
        expect(&got, qpn, &w);
    }
    // "to a2 #k".
    for w in wc.iter().filter(|w| w.opcode == WcOpcode::Recv) {
        assert_eq!(w.byte_len, 8, "{w:?}");
    }
    assert_quiet(cq, SETTLE);
}

/// One exchange on a connected pair: `qa` receives `msg` from `qb` into
/// slot `slot` of `ma`, and sends one back; checks side A's completions and
/// the data.
fn exchange<P: Platform + 'static>(
    (qa, ma, ba, cqa): (&mut Qp<P>, &Mr<P>, &DmaBuf<P>, &Cq<P>),
    (qb, mb, cqb): (&mut Qp<P>, &Mr<P>, &Cq<P>),
    slot: usize,
    msg: &[u8],
) {
    recv(qa, ma, 0xc000, slot);
    recv(qb, mb, 0xd000, slot);
    send(qb, 0xd100, msg);
    let w = poll_ok(cqa);
    assert_eq!(
        (w.qp_num, w.wr_id, w.opcode, w.byte_len as usize),
        (qa.number().0, 0xc000, WcOpcode::Recv, msg.len())
    );
    let mut got = vec![0u8; msg.len()];
    ba.read(64 * slot, &mut got).unwrap();
    assert_eq!(got, msg);
    assert_eq!(poll_ok(cqb).wr_id, 0xd100);
    send(qa, 0xc100, msg);
    let w = poll_ok(cqa);
    assert_eq!(
        (w.qp_num, w.wr_id, w.opcode),
        (qa.number().0, 0xc100, WcOpcode::Send)
    );
    assert_eq!(poll_ok(cqb).wr_id, 0xd000);
    assert_quiet(cqa, SETTLE);
}

fn reset_removes_its_completions_from_a_shared_cq<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let (mut a1, mut a2) = (rc(&pda, &cqa), rc(&pda, &cqa));
        let (mut b1, mut b2) = (rc(&pdb, &cqb), rc(&pdb, &cqb));
        pair((&ca, pa), &mut a1, (&cb, pb), &mut b1);
        pair((&ca, pa), &mut a2, (&cb, pb), &mut b2);
        assert_eq!(cqa.users(), 2);
        for round in 0..2u64 {
            let base = 0x100 * round;
            traffic_unpolled(
                [&mut a1, &mut a2],
                [&mut b1, &mut b2],
                (&ma, &mb),
                &cqb,
                base,
            );
            // a1 goes to RESET with its 4 completions in the CQ.
            a1.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            assert_eq!(a1.state(), QpState::Reset);
            assert_eq!(cqa.users(), 2, "a1 stays registered with its CQ");
            // Only a2's come out, correct and in order.
            only_these(&cqa, a2.number().0, 1, base);
            // a1 (and its peer) start over: RESET -> INIT -> RTR -> RTS.
            b1.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            pair((&ca, pa), &mut a1, (&cb, pb), &mut b1);
            exchange(
                (&mut a1, &ma, &ba, &cqa),
                (&mut b1, &mb, &cqb),
                8,
                b"a1 again",
            );
            exchange(
                (&mut a2, &ma, &ba, &cqa),
                (&mut b2, &mb, &cqb),
                9,
                b"a2 still",
            );
        }
        // A reset with nothing of its own in the CQ removes nothing of the
        // others'.
        recv(&mut b2, &mb, 0x78, 10);
        send(&mut a2, 0x77, b"last");
        assert_eq!(poll_ok(&cqb).opcode, WcOpcode::Recv);
        cqa.context().hca().platform().delay(SETTLE);
        a1.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        let w = poll_ok(&cqa);
        assert_eq!((w.qp_num, w.wr_id), (a2.number().0, 0x77));
        drop((a1, a2, b1, b2));
        assert_eq!(cqa.users(), 0);
    }
    l.close(h);
}

fn destroy_removes_its_completions_from_a_shared_cq<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let (mut a1, mut a2) = (rc(&pda, &cqa), rc(&pda, &cqa));
        let (mut b1, mut b2) = (rc(&pdb, &cqb), rc(&pdb, &cqb));
        pair((&ca, pa), &mut a1, (&cb, pb), &mut b1);
        pair((&ca, pa), &mut a2, (&cb, pb), &mut b2);
        traffic_unpolled([&mut a1, &mut a2], [&mut b1, &mut b2], (&ma, &mb), &cqb, 0);
        // a1 goes with its 4 completions in the CQ.
        a1.destroy().unwrap();
        assert_eq!(cqa.users(), 1);
        only_these(&cqa, a2.number().0, 1, 0);
        // A new QP on the CQ (it may get a1's user index) and a1's peer,
        // reset, make a pair again.
        let mut a3 = rc(&pda, &cqa);
        b1.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        pair((&ca, pa), &mut a3, (&cb, pb), &mut b1);
        exchange(
            (&mut a3, &ma, &ba, &cqa),
            (&mut b1, &mb, &cqb),
            8,
            b"a3 new",
        );
        exchange(
            (&mut a2, &ma, &ba, &cqa),
            (&mut b2, &mb, &cqb),
            9,
            b"a2 still",
        );
        // Destroying a QP in ERR with flushed completions unpolled.
        recv(&mut a3, &ma, 0xe000, 10);
        a3.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        recv(&mut b2, &mb, 0x78, 11);
        send(&mut a2, 0x77, b"last");
        assert_eq!(poll_ok(&cqb).opcode, WcOpcode::Recv);
        cqa.context().hca().platform().delay(SETTLE);
        a3.destroy().unwrap();
        let w = poll_ok(&cqa);
        assert_eq!((w.qp_num, w.wr_id), (a2.number().0, 0x77));
        assert_quiet(&cqa, SETTLE);
    }
    l.close(h);
}

fn srq_qp_reset_returns_its_srq_wqes<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let bb = Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let srq = Arc::new(Srq::create(&pdb, &SrqInitAttr::new(8, 1)).unwrap());
        let depth = srq.attr().max_wr;
        assert!(depth >= 8 && 64 * (depth as usize + 6) <= 8192, "{depth}");
        // Two SRQ QPs of side B share its CQ.
        let srq_qp = || {
            Qp::create(
                &pdb,
                &QpInitAttr::new(QpType::Rc, &cqb, &cqb)
                    .cap(qp_cap(1, 0, 1, 0))
                    .srq(&srq),
            )
            .unwrap()
        };
        let (mut s1, mut s2) = (srq_qp(), srq_qp());
        let sender = || {
            Qp::create(
                &pda,
                &QpInitAttr::new(QpType::Rc, &cqa, &cqa).cap(qp_cap(8, 0, 1, 64)),
            )
            .unwrap()
        };
        let (mut a1, mut a2) = (sender(), sender());
        pair((&ca, pa), &mut a1, (&cb, pb), &mut s1);
        pair((&ca, pa), &mut a2, (&cb, pb), &mut s2);
        // `n` receives of 64 bytes into slots `from..` (wr_id 0x5000 +
        // slot) with one doorbell.
        let fill = |from: u32, n: u32| {
            let sges: Vec<_> = (from..from + n)
                .map(|i| mb.sge(64 * i as usize, 64).unwrap())
                .collect();
            let wrs: Vec<RecvWr<'_>> = sges
                .iter()
                .zip(from..)
                .map(|(s, i)| RecvWr {
                    wr_id: 0x5000 + u64::from(i),
                    sgl: std::slice::from_ref(s),
                })
                .collect();
            srq.post_recv_list(&wrs)
        };
        let full = |r: Result<(), Error>| {
            let e = r.expect_err("the SRQ is full");
            assert!(
                matches!(
                    e,
                    Error::InvalidWorkRequest {
                        index: 0,
                        reason: WrError::DataPath(verbs_core::Error::QueueFull { .. })
                    }
                ),
                "{e}"
            );
        };
        fill(0, depth).unwrap();
        assert_eq!(srq.outstanding(), depth);
        full(fill(depth, 1));
        // 3 messages to s1 and 2 to s2, interleaved; none polled on side B.
        for k in 0..5u8 {
            let q = if k % 2 == 0 { &mut a1 } else { &mut a2 };
            send(q, u64::from(k), &[b'0' + k; 16]);
        }
        let wc = poll_n(&cqa, 5);
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
        cqb.context().hca().platform().delay(SETTLE);
        assert_eq!(srq.outstanding(), depth, "nothing polled yet");
        full(fill(depth, 1));
        // s1 goes to RESET: its 3 receive completions leave the CQ and
        // their WQEs go back to the SRQ.
        s1.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        assert_eq!(srq.outstanding(), depth - 3);
        // s2's 2 are still there, correct and in order.
        let wc = poll_n(&cqb, 2);
        for (w, k) in wc.iter().zip([1u8, 3]) {
            assert_eq!(
                (w.qp_num, w.status, w.opcode, w.byte_len),
                (s2.number().0, WcStatus::Success, WcOpcode::Recv, 16),
                "{w:?}"
            );
            let mut got = [0u8; 16];
            bb.read(64 * (w.wr_id - 0x5000) as usize, &mut got).unwrap();
            assert_eq!(got, [b'0' + k; 16], "{w:?}");
        }
        assert_quiet(&cqb, SETTLE);
        assert_eq!(srq.outstanding(), depth - 5);
        // The SRQ takes 5 again, to its full depth, and no more.
        fill(depth, 5).unwrap_or_else(|e| panic!("refilling 5 of {depth}: {e}"));
        assert_eq!(srq.outstanding(), depth);
        full(fill(depth + 5, 1));
        // s1 works again (its peer reset too), receiving through the SRQ:
        // every WQE of it serves, those given back included.
        a1.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        pair((&ca, pa), &mut a1, (&cb, pb), &mut s1);
        let mut used = BTreeSet::new();
        for k in 0..u64::from(depth) {
            let msg = [b'a' + (k % 26) as u8; 16];
            send(&mut a1, 0x100 + k, &msg);
            assert_eq!(poll_ok(&cqa).wr_id, 0x100 + k);
            let w = poll_ok(&cqb);
            assert_eq!((w.qp_num, w.byte_len), (s1.number().0, 16), "{w:?}");
            assert!(used.insert(w.wr_id), "{w:?}");
            let mut got = [0u8; 16];
            bb.read(64 * (w.wr_id - 0x5000) as usize, &mut got).unwrap();
            assert_eq!(got, msg, "{w:?}");
        }
        assert_eq!(srq.outstanding(), 0);
        drop((s1, s2, a1, a2));
        Srq::try_destroy(srq).unwrap();
    }
    l.close(h);
}

hca_tests::link_scenarios!(
    reset_removes_its_completions_from_a_shared_cq,
    destroy_removes_its_completions_from_a_shared_cq,
    srq_qp_reset_returns_its_srq_wqes,
);
