//! UD multicast (`Qp::attach_mcast` / `Qp::detach_mcast`, ATTACH_TO_MCG /
//! DETACH_FROM_MCG) over RoCE: one UD send to a group (DQPN 0xffffff,
//! the MGID as destination GID, its 33:33 MAC) is received by each QP
//! attached to it and by no other; a detached QP no longer receives; the
//! refusals are typed errors. On InfiniBand ports: a UD send to the
//! group's MLID with the MGID in its GRH reaches the attached QPs of every
//! member port, the sender's own QP unless it blocks multicast loopback.

use std::sync::Arc;
use std::time::Duration;

use hca_driver::Error;
use hca_driver::verbs::{
    AccessFlags, Ah, AhAttr, Cq, DEFAULT_GID_INDEX, DmaBuf, Gid, Mr, Pd, Qp, QpCap, QpCreateFlags,
    QpInitAttr, QpType, SendFlags, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use hca_tests::verbs::{Endpoint, assert_quiet, poll_n, poll_ok, post_recv_sge, qp_cap, ud_ready};
use hca_tests::{Link, TestPlatform};

type P = hca_emu::EmuPlatform;
use platform::Platform;

const QKEY: u32 = 0x1111_2222;
const MGID: [u8; 16] = [
    0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78,
];

fn qp<P: Platform + 'static>(pd: &Arc<Pd<P>>, cq: &Arc<Cq<P>>, t: QpType, c: QpCap) -> Qp<P> {
    Qp::create(pd, &QpInitAttr::new(t, cq, cq).cap(c)).unwrap()
}

/// Sends `msg` inline from UD QP `q` to the multicast QPN through `ah`
/// (signalled, work request `id`) and waits for its completion on `cq`.
#[track_caller]
fn send_to_group<P: Platform + 'static>(
    q: &mut Qp<P>,
    cq: &Cq<P>,
    ah: &Ah<P>,
    id: u64,
    msg: &[u8],
) {
    q.post_send(
        &SendWr::new(id, SendOp::Send)
            .inline(msg)
            .flags(SendFlags::SIGNALED)
            .ud(ah.dest(0xff_ffff, QKEY)),
    )
    .unwrap();
    assert_eq!(poll_ok(cq).wr_id, id);
}

/// The receive completions on `cq` of the two group members `rx` (whose
/// receives are `0xb00 + i`), each of a message from `tx`, in the
/// members' order.
#[track_caller]
fn member_recvs<P: Platform + 'static>(
    cq: &Cq<P>,
    rx: &[Qp<P>],
    tx: &Qp<P>,
) -> Vec<WorkCompletion> {
    let mut wc = poll_n(cq, 2);
    wc.sort_by_key(|w| w.wr_id);
    for (w, (i, q)) in wc.iter().zip(rx.iter().enumerate()) {
        assert_eq!(
            (w.status, w.opcode, w.qp_num, w.wr_id, w.src_qp),
            (
                WcStatus::Success,
                WcOpcode::Recv,
                q.number().0,
                0xb00 + i as u64,
                tx.number().0
            ),
            "{w:?}"
        );
    }
    wc
}

#[track_caller]
fn command_refused(r: Result<(), Error>) {
    assert!(matches!(r, Err(Error::Command(_))), "{r:?}");
}

fn multicast_reaches_the_attached_qps<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, _, pda, pdb, cqa, cqb) = h.sides(64).split();
        let ea = Endpoint::of(&ca, pa, 0, 0, hca_driver::Rkey(0));
        if ea.gid.is_zero() {
            // InfiniBand hardware: the group needs an MLID from the
            // subnet manager (SA join), which this test cannot make; the
            // emulated IB case is infiniband_multicast_reaches_the_members_by_mlid.
            eprintln!("multicast test skipped: InfiniBand ports");
            l.close(h);
            return;
        }
        let bb = Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut tx = qp(&pda, &cqa, QpType::Ud, qp_cap(16, 16, 1, 64));
        let mut rx: Vec<Qp<P>> = (0..3)
            .map(|_| qp(&pdb, &cqb, QpType::Ud, qp_cap(16, 16, 1, 64)))
            .collect();
        ud_ready(&mut tx, pa, QKEY);
        for q in &mut rx {
            ud_ready(q, pb, QKEY);
        }
        let mgid = Gid(MGID);
        rx[0].attach_mcast(&mgid, 0).unwrap();
        rx[1].attach_mcast(&mgid, 0).unwrap();
        // Refusals: twice, not attached, not UD, not an MGID, bad LID.
        command_refused(rx[0].attach_mcast(&mgid, 0));
        command_refused(rx[2].detach_mcast(&mgid, 0));
        let rc = qp(&pdb, &cqb, QpType::Rc, qp_cap(4, 4, 1, 0));
        assert!(matches!(
            rc.attach_mcast(&mgid, 0),
            Err(Error::InvalidArgument { arg: "qp", .. })
        ));
        let mut unicast = MGID;
        unicast[0] = 0xfe;
        assert!(matches!(
            rx[2].attach_mcast(&Gid(unicast), 0),
            Err(Error::InvalidAttribute { attr: "gid", .. })
        ));
        assert!(matches!(
            rx[2].attach_mcast(&mgid, 0x10),
            Err(Error::InvalidAttribute { attr: "lid", .. })
        ));
        drop(rc);

        let ah = Ah::create(&pda, &AhAttr::roce(pa, mgid, DEFAULT_GID_INDEX)).unwrap();
        let send = |tx: &mut Qp<P>, id: u64, msg: &[u8]| send_to_group(tx, &cqa, &ah, id, msg);
        for (i, q) in rx.iter_mut().enumerate() {
            post_recv_sge(q, 0xb00 + i as u64, mb.sge(1024 * i, 256).unwrap());
        }
        send(&mut tx, 1, b"to the group");
        for (w, i) in member_recvs(&cqb, &rx, &tx).iter().zip(0..2usize) {
            assert_eq!(w.byte_len, 40 + 12);
            let mut got = [0u8; 52];
            bb.read(1024 * i, &mut got).unwrap();
            assert_eq!(&got[40..], b"to the group");
            // The IPv6 header's destination is the MGID.
            assert_eq!(&got[24..40], &MGID);
        }
        // The QP that is not attached got nothing.
        assert_quiet(&cqb, Duration::from_millis(5));

        // rx[0] leaves: only rx[1] receives the next one.
        rx[0].detach_mcast(&mgid, 0).unwrap();
        command_refused(rx[0].detach_mcast(&mgid, 0));
        post_recv_sge(&mut rx[1], 0xc01, mb.sge(1024, 256).unwrap());
        send(&mut tx, 2, b"second");
        let w = poll_ok(&cqb);
        assert_eq!((w.qp_num, w.wr_id), (rx[1].number().0, 0xc01));
        assert_quiet(&cqb, Duration::from_millis(5));
        // A destroyed QP leaves its groups: rx[1] goes with one attached.
        let (q0, q1, q2) = {
            let mut it = rx.into_iter();
            (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
        };
        drop(q1);
        send(&mut tx, 3, b"nobody");
        assert_quiet(&cqb, Duration::from_millis(5));
        drop((q0, q2, tx, ah));
    }
    l.close(h);
}

hca_tests::link_scenarios!(multicast_reaches_the_attached_qps);

fn qp2<P: Platform + 'static>(
    pd: &Arc<Pd<P>>,
    scq: &Arc<Cq<P>>,
    rcq: &Arc<Cq<P>>,
    block: bool,
) -> Qp<P> {
    let init = QpInitAttr::new(QpType::Ud, scq, rcq)
        .cap(qp_cap(16, 16, 1, 64))
        .create_flags(if block {
            QpCreateFlags::BLOCK_SELF_MCAST_LB
        } else {
            QpCreateFlags::NONE
        });
    Qp::create(pd, &init).unwrap()
}

/// InfiniBand: two emulated HCAs on IB ports (the modelled subnet
/// manager gives LIDs, and the MLID `hca_emu::ib_mlid` of the MGID). A UD
/// send to the MLID with the MGID as the GRH's DGID reaches each QP
/// attached to the group on the other HCA (GRH scattered, CQE with GRH),
/// a QP attached on the sender's own port, the sender itself when it
/// does not block multicast loopback and not when it does
/// (`block_lb_mc`); not a QP that is not or no longer attached; not a
/// port when the DLID is not the group's MLID; a multicast DLID without
/// a GRH is a local QP operation error.
#[test]
fn infiniband_multicast_reaches_the_members_by_mlid() {
    let mut l: Link<hca_emu::EmuPlatform> = Link::emulated(
        hca_emu::EmuConfig::default().infiniband(),
        hca_driver::Config::default(),
    );
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        assert_eq!(
            ca.hca().caps().link_layer(),
            hca_driver::LinkLayer::InfiniBand
        );
        assert_ne!(ca.query_port(pa).unwrap().lid, 0, "the SM gave a LID");
        assert_ne!(cb.query_port(pb).unwrap().lid, 0, "the SM gave a LID");
        let cqa_rx = Arc::new(Cq::create(&ca, 64).unwrap());
        let ba = Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap());
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let bb = Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        // Side A: a sender that takes its own multicast back, one that
        // blocks it, and a plain member; side B: two members, one not.
        let mut tx = qp2(&pda, &cqa, &cqa_rx, false);
        let mut txb = qp2(&pda, &cqa, &cqa_rx, true);
        let mut amem = qp2(&pda, &cqa, &cqa_rx, false);
        let mut rx: Vec<Qp<P>> = (0..3).map(|_| qp2(&pdb, &cqb, &cqb, false)).collect();
        for q in [&mut tx, &mut txb, &mut amem] {
            ud_ready(q, pa, QKEY);
        }
        for q in &mut rx {
            ud_ready(q, pb, QKEY);
        }
        // The blocking flag is for UD QPs only.
        let rc = QpInitAttr::new(QpType::Rc, &cqa, &cqa)
            .create_flags(QpCreateFlags::BLOCK_SELF_MCAST_LB);
        assert!(matches!(
            Qp::create(&pda, &rc),
            Err(Error::InvalidAttribute {
                attr: "create_flags",
                ..
            })
        ));
        let mgid = Gid(MGID);
        let mlid = hca_emu::ib_mlid(&MGID);
        assert!((0xc000..=0xfffe).contains(&mlid));
        for q in [&tx, &txb, &amem, &rx[0], &rx[1]] {
            q.attach_mcast(&mgid, mlid).unwrap();
        }
        let grh = verbs_core::av::GlobalRoute {
            dgid: MGID,
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 1,
            traffic_class: 0,
        };
        let mut to_group = AhAttr::ib(pa, mlid);
        to_group.grh = Some(grh);
        let ah = Ah::create(&pda, &to_group).unwrap();
        let mut wrong = AhAttr::ib(pa, if mlid == 0xc000 { 0xc001 } else { 0xc000 });
        wrong.grh = Some(grh);
        let ah_wrong = Ah::create(&pda, &wrong).unwrap();
        let send =
            |q: &mut Qp<P>, ah: &Ah<P>, id: u64, msg: &[u8]| send_to_group(q, &cqa, ah, id, msg);
        let post_all = |tx: &mut Qp<P>, txb: &mut Qp<P>, amem: &mut Qp<P>, rx: &mut [Qp<P>]| {
            post_recv_sge(tx, 0xa00, ma.sge(0, 256).unwrap());
            post_recv_sge(txb, 0xa01, ma.sge(1024, 256).unwrap());
            post_recv_sge(amem, 0xa02, ma.sge(2048, 256).unwrap());
            for (i, q) in rx.iter_mut().enumerate() {
                post_recv_sge(q, 0xb00 + i as u64, mb.sge(1024 * i, 256).unwrap());
            }
        };
        post_all(&mut tx, &mut txb, &mut amem, &mut rx);
        let msg = b"to the IB group";
        send(&mut tx, &ah, 1, msg);
        // Side B: rx[0] and rx[1], with the GRH (DGID the MGID).
        for (w, i) in member_recvs(&cqb, &rx, &tx).iter().zip(0..2usize) {
            assert!(w.wc_flags.has(hca_driver::verbs::WcFlags::GRH), "{w:?}");
            assert_eq!(w.byte_len as usize, 40 + msg.len());
            let mut got = [0u8; 40 + 15];
            bb.read(1024 * i, &mut got).unwrap();
            assert_eq!(&got[40..], msg);
            assert_eq!(&got[24..40], &MGID);
        }
        assert_quiet(&cqb, Duration::from_millis(5));
        // Side A: the member and the sender itself (loopback allowed), not
        // the other sender (it did not send this one, and is attached: it
        // gets it too).
        let mut wa = poll_n(&cqa_rx, 3);
        wa.sort_by_key(|w| w.wr_id);
        let got: Vec<_> = wa.iter().map(|w| (w.status, w.qp_num, w.src_qp)).collect();
        assert_eq!(
            got,
            [
                (WcStatus::Success, tx.number().0, tx.number().0),
                (WcStatus::Success, txb.number().0, tx.number().0),
                (WcStatus::Success, amem.number().0, tx.number().0),
            ]
        );
        assert_quiet(&cqa_rx, Duration::from_millis(5));

        // The sender that blocks multicast loopback: everyone but itself
        // (a receive WQE waits on it, unused).
        post_recv_sge(&mut txb, 0xa01, ma.sge(1024, 256).unwrap());
        post_recv_sge(&mut tx, 0xa00, ma.sge(0, 256).unwrap());
        post_recv_sge(&mut amem, 0xa02, ma.sge(2048, 256).unwrap());
        for (i, q) in rx.iter_mut().enumerate().take(2) {
            post_recv_sge(q, 0xb00 + i as u64, mb.sge(1024 * i, 256).unwrap());
        }
        send(&mut txb, &ah, 2, b"blocked");
        let mut wa = poll_n(&cqa_rx, 2);
        wa.sort_by_key(|w| w.wr_id);
        let got: Vec<_> = wa.iter().map(|w| (w.qp_num, w.src_qp)).collect();
        assert_eq!(
            got,
            [
                (tx.number().0, txb.number().0),
                (amem.number().0, txb.number().0)
            ]
        );
        assert_quiet(&cqa_rx, Duration::from_millis(5));
        assert_eq!(poll_n(&cqb, 2).len(), 2);
        assert_quiet(&cqb, Duration::from_millis(5));

        // rx[0] leaves: only rx[1] on side B (rx[0] and rx[2] have WQEs).
        rx[0].detach_mcast(&mgid, mlid).unwrap();
        post_recv_sge(&mut rx[0], 0xb00, mb.sge(0, 256).unwrap());
        post_recv_sge(&mut rx[1], 0xb01, mb.sge(1024, 256).unwrap());
        post_recv_sge(&mut tx, 0xa00, ma.sge(0, 256).unwrap());
        post_recv_sge(&mut amem, 0xa02, ma.sge(2048, 256).unwrap());
        send(&mut txb, &ah, 3, b"second");
        let w = poll_ok(&cqb);
        assert_eq!(w.qp_num, rx[1].number().0);
        assert_quiet(&cqb, Duration::from_millis(5));
        let wa = poll_n(&cqa_rx, 2);
        assert_eq!(wa.len(), 2);

        // A DLID that is not the group's MLID reaches no member port.
        post_recv_sge(&mut rx[1], 0xb01, mb.sge(1024, 256).unwrap());
        post_recv_sge(&mut tx, 0xa00, ma.sge(0, 256).unwrap());
        send(&mut txb, &ah_wrong, 4, b"wrong MLID");
        assert_quiet(&cqb, Duration::from_millis(5));
        assert_quiet(&cqa_rx, Duration::from_millis(5));

        // A multicast DLID without a GRH: local QP operation error.
        let no_grh = Ah::create(&pda, &AhAttr::ib(pa, mlid)).unwrap();
        amem.post_send(
            &SendWr::new(5, SendOp::Send)
                .inline(b"x")
                .flags(SendFlags::SIGNALED)
                .ud(no_grh.dest(0xff_ffff, QKEY)),
        )
        .unwrap();
        let w = poll_n(&cqa, 1)[0];
        assert_eq!((w.wr_id, w.status), (5, WcStatus::LocQpOpErr), "{w:?}");
        assert_quiet(&cqb, Duration::from_millis(5));
        drop((
            tx, txb, amem, rx, ah, ah_wrong, no_grh, ma, mb, cqa_rx, ca, cb,
        ));
    }
    l.close(h);
    l.assert_clean();
}
