//! Verbs objects as owned values: kept in one struct and moved across
//! threads, destroy order enforced by the handles they hold, a context's
//! user-index table at capacity (a typed error, no panic) and reuse of a
//! freed index, and one CQ serving more QPs than the old fixed table of 64
//! with every completion dispatched to its own QP.

use std::sync::Arc;
use std::time::Duration;

use hca_driver::verbs::{
    AccessFlags, Ah, Context, Cq, DmaBuf, Mr, Pd, Qp, QpAttr, QpInitAttr, QpState, QpType, RecvWr,
    SendFlags, SendOp, SendWr, Srq, SrqInitAttr, WcStatus, WorkCompletion,
};
use hca_driver::{Error, Hca};
use hca_tests::verbs::{RcParams, connect_pair, poll_n, poll_ok, post_recv_sge, qp_cap};
use hca_tests::{Bench, Link, TestPlatform};

/// Every verbs object is `Send + Sync` when the platform is (checked at
/// compile time for the emulated platform).
#[test]
fn verbs_objects_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    type E = hca_emu::EmuPlatform;
    both::<Hca<E>>();
    both::<Context<E>>();
    both::<Pd<E>>();
    both::<Cq<E>>();
    both::<Qp<E>>();
    both::<Srq<E>>();
    both::<Mr<E>>();
    both::<DmaBuf<E>>();
    both::<Ah<E>>();
}

/// One side of a connection, kept in one struct: the HCA, a context, a
/// PD, a CQ, a buffer, its region and a QP (the QP holds the PD and the
/// CQ; the region the PD and the buffer).
struct Side<P: TestPlatform> {
    hca: Arc<Hca<P>>,
    ctx: Arc<Context<P>>,
    cq: Arc<Cq<P>>,
    buf: Arc<DmaBuf<P>>,
    mr: Mr<P>,
    qp: Qp<P>,
}

impl<P: TestPlatform> Side<P> {
    fn new(hca: &Arc<Hca<P>>) -> Self {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 64).unwrap());
        let buf = Arc::new(DmaBuf::alloc(hca, 4096).unwrap());
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = Mr::register(&pd, &buf, access).unwrap();
        let qp = Qp::create(
            &pd,
            &QpInitAttr::new(QpType::Rc, &cq, &cq).cap(qp_cap(16, 16, 1, 0)),
        )
        .unwrap();
        // `pd` goes out of scope here: the QP and the region keep it.
        Side {
            hca: hca.clone(),
            ctx,
            cq,
            buf,
            mr,
            qp,
        }
    }
}

fn objects_in_a_struct_and_across_threads<P: TestPlatform + Send + Sync>(l: &mut Link<P>)
where
    P::Mmio: Send + Sync,
{
    let h = l.open();
    {
        let mut a = Side::new(&h.a);
        let mut b = Side::new(h.b());
        let params = RcParams {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            ..RcParams::default()
        };
        connect_pair(
            (&a.ctx, l.port_a, &mut a.qp),
            (&b.ctx, l.port_b, &mut b.qp),
            (b.mr.addr(), b.mr.rkey()),
            &params,
        );
        post_recv_sge(&mut b.qp, 7, b.mr.sge(0, 64).unwrap());
        a.buf.write(0, b"owned").unwrap();
        let (sge, remote, rkey) = (a.mr.sge(0, 5).unwrap(), b.mr.addr() + 128, b.mr.rkey());
        // The whole side A (HCA handle, context, CQ, QP...) moves to
        // another thread, posts there and comes back.
        let a = std::thread::spawn(move || {
            a.qp.post_send(
                &SendWr::new(1, SendOp::Send)
                    .sgl(&[sge])
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            a.qp.post_rdma_write(2, SendFlags::SIGNALED, remote, rkey, sge)
                .unwrap();
            a
        })
        .join()
        .unwrap();
        let got = poll_n(&a.cq, 2);
        assert_eq!(
            got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        let w = poll_ok(&b.cq);
        assert_eq!((w.wr_id, w.byte_len), (7, 5));
        let mut back = [0u8; 5];
        b.buf.read(128, &mut back).unwrap();
        assert_eq!(&back, b"owned");
        // A CQ can be polled from another thread than the QP's poster.
        let cq = b.cq.clone();
        let n = std::thread::spawn(move || {
            let mut wc = [WorkCompletion::default(); 4];
            cq.poll(&mut wc).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(n, 0);
        assert!(Arc::ptr_eq(&a.hca, &h.a));
    }
    l.close(h);
}

fn destroy_order_is_enforced<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(16, 1)).unwrap());
        let buf = Arc::new(DmaBuf::alloc(&hca, 4096).unwrap());
        let mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq).srq(&srq)).unwrap();
        // While the QP holds them, the CQ and the SRQ are not destroyed.
        assert!(matches!(
            Cq::try_destroy(cq.clone()),
            Err(Error::InUse { what: "the CQ", .. })
        ));
        assert!(matches!(
            Srq::try_destroy(srq.clone()),
            Err(Error::InUse {
                what: "the SRQ",
                ..
            })
        ));
        assert!(matches!(
            Pd::try_destroy(pd.clone()),
            Err(Error::InUse { what: "the PD", .. })
        ));
        assert!(matches!(
            Context::try_destroy(ctx.clone()),
            Err(Error::InUse {
                what: "the context",
                ..
            })
        ));
        // The PD, the CQ and the context stay alive without the user's
        // handles: the QP (and the region) hold them.
        let pdn = pd.number();
        drop((pd, ctx));
        assert_eq!(qp.pd().number(), pdn);
        qp.modify(
            &QpAttr::new()
                .state(QpState::Init)
                .port(1)
                .pkey_index(0)
                .access(AccessFlags::LOCAL_WRITE),
        )
        .unwrap();
        srq.post_recv(&RecvWr {
            wr_id: 1,
            sgl: &[mr.sge(0, 64).unwrap()],
        })
        .unwrap();
        // The buffer lives while the region does.
        drop(buf);
        assert_eq!(mr.buf().map(|b| b.len()), Some(4096));
        // The HCA is held by everything: closing it needs the last handle.
        assert!(Arc::strong_count(&hca) > 1);
        drop(qp);
        drop(mr);
        // Now the handles are the last ones.
        Srq::try_destroy(srq).unwrap();
        Cq::try_destroy(cq).unwrap();
    }
    assert_eq!(Arc::strong_count(&hca), 1, "every object let go of the HCA");
    b.close(hca);
}

fn user_indices_at_capacity_and_reused<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 4).unwrap());
        let cap = ctx.capacities().qps;
        assert!(cap >= 64, "{:?}", ctx.capacities());
        let attr = QpInitAttr::new(QpType::Ud, &cq, &cq).cap(qp_cap(1, 1, 1, 0));
        let mut qps: Vec<Qp<P>> = (0..cap).map(|_| Qp::create(&pd, &attr).unwrap()).collect();
        // Dense indices 0..cap.
        let mut idx: Vec<u32> = qps.iter().map(|q| q.user_index()).collect();
        idx.sort_unstable();
        assert_eq!(idx, (0..cap as u32).collect::<Vec<_>>());
        assert_eq!(cq.users(), cap);
        // One more: a typed error naming the table, nothing created.
        match Qp::create(&pd, &attr) {
            Err(Error::CapacityExceeded { what, capacity }) => {
                assert_eq!((what, capacity), ("the context's QP user indices", cap));
            }
            r => panic!("expected CapacityExceeded, got {:?}", r.map(|q| q.number())),
        }
        // A freed index is given out again.
        let freed = qps.swap_remove(17).user_index();
        let again = Qp::create(&pd, &attr).unwrap();
        assert_eq!(again.user_index(), freed);
        assert_eq!(cq.users(), cap);
        drop(again);
        drop(qps);
        assert_eq!(cq.users(), 0);
    }
    b.close(hca);
}

fn one_cq_dispatches_many_qps<P: TestPlatform>(b: &mut Bench<P>) {
    const QPS: usize = 100;
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 512).unwrap());
        let buf = Arc::new(DmaBuf::alloc(&hca, 4096).unwrap());
        let mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qps: Vec<Qp<P>> = (0..QPS)
            .map(|_| {
                Qp::create(
                    &pd,
                    &QpInitAttr::new(QpType::Rc, &cq, &cq).cap(qp_cap(2, 2, 1, 0)),
                )
                .unwrap()
            })
            .collect();
        assert_eq!(cq.users(), QPS);
        // Two receives on each QP, tagged with the QP's number, then ERR:
        // every receive completes flushed, through its own QP's queue.
        for qp in &mut qps {
            qp.modify(
                &QpAttr::new()
                    .state(QpState::Init)
                    .port(1)
                    .pkey_index(0)
                    .access(AccessFlags::LOCAL_WRITE),
            )
            .unwrap();
            let tag = u64::from(qp.number().0) << 8;
            for k in 0..2 {
                post_recv_sge(qp, tag | k, mr.sge(0, 16).unwrap());
            }
        }
        // Destroying some QPs first leaves holes in the CQ's table.
        let gone: Vec<Qp<P>> = qps.drain(..QPS / 4).collect();
        drop(gone);
        assert_eq!(cq.users(), QPS - QPS / 4);
        for qp in &mut qps {
            qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        }
        let got = poll_n(&cq, 2 * qps.len());
        for w in &got {
            assert_eq!(w.status, WcStatus::WrFlushErr, "{w:?}");
            assert_eq!(
                w.wr_id >> 8,
                u64::from(w.qp_num),
                "completion of QP {:#x} carries another QP's wr_id {:#x}",
                w.qp_num,
                w.wr_id
            );
        }
        let mut per_qp: Vec<(u32, u64)> = got.iter().map(|w| (w.qp_num, w.wr_id & 0xff)).collect();
        per_qp.sort_unstable();
        let mut want: Vec<(u32, u64)> = qps
            .iter()
            .flat_map(|q| [(q.number().0, 0), (q.number().0, 1)])
            .collect();
        want.sort_unstable();
        assert_eq!(per_qp, want);
        let mut wc = [WorkCompletion::default(); 4];
        assert!(
            cq.poll_wait(&mut wc, Duration::from_millis(5)).is_err(),
            "nothing more"
        );
    }
    b.close(hca);
}

/// The bare-metal family: parents held by `&'static` handles (here leaked
/// boxes stand for the caller's statics). The objects work the same; a
/// static object is never destroyed, which `try_destroy` says.
#[test]
fn static_handles() {
    use hca_driver::verbs::StaticShare;
    type E = hca_emu::EmuPlatform;
    let emu: &'static hca_emu::EmuHca =
        Box::leak(Box::new(hca_emu::EmuHca::new(Default::default())));
    let hca: &'static Hca<E> = Box::leak(Box::new(
        Hca::open(emu.platform(), Default::default())
            .map_err(|f| f.error)
            .unwrap(),
    ));
    let ctx: &'static Context<E, StaticShare> = Box::leak(Box::new(Context::open(&hca).unwrap()));
    let pd: &'static Pd<E, StaticShare> = Box::leak(Box::new(Pd::alloc(&ctx).unwrap()));
    let cq: &'static Cq<E, StaticShare> = Box::leak(Box::new(Cq::create(&ctx, 16).unwrap()));
    let buf: &'static DmaBuf<E, StaticShare> =
        Box::leak(Box::new(DmaBuf::alloc(&hca, 4096).unwrap()));
    let mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = rc_qp_with_one_flushed_receive(&pd, &cq, &mr, 5);
    // A QP is owned outright: destroyed explicitly.
    qp.destroy().unwrap();
    assert!(matches!(Cq::try_destroy(cq), Err(Error::Unsupported(_))));
    assert_eq!(cq.users(), 0);
}

/// The bare-metal form without a heap: every parent in a static slot of
/// the caller's, counted like `Arc`, so the program tears everything down
/// (destroy commands, pages back) and closes the HCA at the end.
#[test]
fn slot_handles_tear_down_to_a_clean_device() {
    use hca_driver::verbs::SlotShare;
    use platform::slot::{Slot, SlotRef};
    type E = hca_emu::EmuPlatform;
    static HCA: Slot<Hca<E>> = Slot::new();
    static CTX: Slot<Context<E, SlotShare>> = Slot::new();
    static PD: Slot<Pd<E, SlotShare>> = Slot::new();
    static CQ: Slot<Cq<E, SlotShare>> = Slot::new();
    static BUF: Slot<DmaBuf<E, SlotShare>> = Slot::new();
    let emu = hca_emu::EmuHca::new(Default::default());
    let hca = HCA
        .put(
            Hca::open(emu.platform(), Default::default())
                .map_err(|f| f.error)
                .unwrap(),
        )
        .map_err(|_| "HCA slot taken")
        .unwrap();
    let ctx = CTX
        .put(Context::open(&hca).unwrap())
        .map_err(|_| "slot")
        .unwrap();
    let pd = PD
        .put(Pd::alloc(&ctx).unwrap())
        .map_err(|_| "slot")
        .unwrap();
    let cq = CQ
        .put(Cq::create(&ctx, 16).unwrap())
        .map_err(|_| "slot")
        .unwrap();
    let buf = BUF
        .put(DmaBuf::alloc(&hca, 4096).unwrap())
        .map_err(|_| "slot")
        .unwrap();
    let mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = rc_qp_with_one_flushed_receive(&pd, &cq, &mr, 9);
    // The QP holds the CQ (as its send and its receive CQ): refused, with
    // the other handles counted (ours and the QP's two); the CQ lives on.
    match Cq::try_destroy(cq.clone()) {
        Err(Error::InUse { users, .. }) => assert_eq!(users, 3),
        other => panic!("destroying a CQ a QP holds: {other:?}"),
    }
    qp.destroy().unwrap();
    mr.destroy().unwrap();
    // Now the last handles: DESTROY_CQ, the buffer freed, DEALLOC_PD,
    // the context closed; each slot is empty again.
    Cq::try_destroy(cq).unwrap();
    assert!(!CQ.is_occupied());
    drop(buf);
    assert!(!BUF.is_occupied());
    Pd::try_destroy(pd).unwrap();
    Context::try_destroy(ctx).unwrap();
    assert!(!CTX.is_occupied() && !PD.is_occupied());
    let hca = SlotRef::try_unwrap(hca)
        .map_err(|_| "other handles")
        .unwrap();
    hca.close().unwrap();
    assert!(!HCA.is_occupied());
    emu.assert_clean();
}

/// An RC QP on `cq`, moved to INIT with one receive of `wr_id` posted
/// into `mr`, then to ERR: the receive comes back flushed (checked).
fn rc_qp_with_one_flushed_receive<S: hca_driver::verbs::Share>(
    pd: &impl hca_driver::verbs::Handle<Pd<hca_emu::EmuPlatform, S>, Share = S>,
    cq: &impl hca_driver::verbs::Handle<Cq<hca_emu::EmuPlatform, S>, Share = S>,
    mr: &Mr<hca_emu::EmuPlatform, S>,
    wr_id: u64,
) -> Qp<hca_emu::EmuPlatform, S> {
    let mut qp = Qp::create(pd, &QpInitAttr::new(QpType::Rc, cq, cq)).unwrap();
    qp.modify(
        &QpAttr::new()
            .state(QpState::Init)
            .port(1)
            .pkey_index(0)
            .access(AccessFlags::LOCAL_WRITE),
    )
    .unwrap();
    qp.post_recv(&RecvWr {
        wr_id,
        sgl: &[mr.sge(0, 16).unwrap()],
    })
    .unwrap();
    qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    let w = poll_ok_or_flush(&**cq);
    assert_eq!((w.wr_id, w.status), (wr_id, WcStatus::WrFlushErr));
    qp
}

/// One completion, whatever its status.
fn poll_ok_or_flush<P: TestPlatform, S: hca_driver::verbs::Share>(cq: &Cq<P, S>) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let n = cq.poll_wait(&mut wc, Duration::from_secs(5)).unwrap();
    assert_eq!(n, 1);
    wc[0]
}

hca_tests::scenarios!(
    destroy_order_is_enforced,
    user_indices_at_capacity_and_reused,
    one_cq_dispatches_many_qps
);

mod link {
    use super::*;
    hca_tests::link_scenarios!(objects_in_a_struct_and_across_threads);
}
