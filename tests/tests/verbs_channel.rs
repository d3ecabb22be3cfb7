//! Completion channels driven by interrupts (issue 14): a CQ created on a
//! channel, armed with `req_notify`, makes the channel's file descriptor
//! readable when its completion event arrives (the MSI-X vector's eventfd
//! of the emulated platform in the channel's epoll set); `get_event`
//! names the CQ by its cookie; events are acknowledged; an unarmed CQ
//! raises none; a solicited-only arm ignores unsolicited completions; two
//! CQs share one channel; the destroy rules of libibverbs.

use std::sync::Arc;
use std::time::Duration;

use hca_driver::verbs::{
    AccessFlags, CompChannel, Context, CqEvent, DmaBuf, Mr, Pd, Qp, QpInitAttr, QpType, SendFlags,
    SendOp, SendWr,
};
use hca_driver::{Config, Error};
use hca_emu::{EmuConfig, EmuPlatform};
use hca_tests::Link;
use hca_tests::verbs::{RcParams, WAIT, connect_pair, poll_ok, post_recv_sge, qp_cap};
use platform::notify::readable;

use hca_driver::verbs::Cq;
use hca_tests::TestPlatform;
use platform::Platform;

/// A poll(2) limit for what must happen (real time; the test fails, it
/// does not sleep, when it is reached).
const READABLE_MS: i32 = 10_000;

/// Side A: a context, PD and CQ (no channel). Side B: a context, PD, the
/// channel and a registered page for receives; nothing else on side B's
/// completion EQ, so its vector interrupts only for the channel's CQs.
struct Setup<P: Platform + 'static> {
    hcas: hca_tests::Hcas<P>,
    ca: Arc<Context<P>>,
    cb: Arc<Context<P>>,
    pda: Arc<Pd<P>>,
    pdb: Arc<Pd<P>>,
    cqa: Arc<Cq<P>>,
    ch: Arc<CompChannel<P>>,
    /// Side B's receive buffer (4 KiB, local write).
    mb: Mr<P>,
}

fn setup<P: TestPlatform>(l: &mut Link<P>) -> Setup<P> {
    let hcas = l.open();
    let ca = Arc::new(Context::open(&hcas.a).unwrap());
    let cb = Arc::new(Context::open(hcas.b()).unwrap());
    let pda = Arc::new(Pd::alloc(&ca).unwrap());
    let pdb = Arc::new(Pd::alloc(&cb).unwrap());
    let cqa = Arc::new(Cq::<P>::create(&ca, 32).unwrap());
    let ch = Arc::new(CompChannel::create(&cb).unwrap());
    assert!(
        ch.interrupt_driven(),
        "the emulated platform gives interrupt fds"
    );
    let bb = Arc::new(DmaBuf::alloc(hcas.b(), 4096).unwrap());
    let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
    Setup {
        hcas,
        ca,
        cb,
        pda,
        pdb,
        cqa,
        ch,
        mb,
    }
}

/// An RC pair: A's QP on `cqa`, B's on `cqb` (send and receive), with
/// receives posted on B (into `s.mb`).
fn pair<P: TestPlatform>(l: &Link<P>, s: &Setup<P>, cqb: &Arc<Cq<P>>) -> (Qp<P>, Qp<P>) {
    let mut qa = Qp::create(
        &s.pda,
        &QpInitAttr::new(QpType::Rc, &s.cqa, &s.cqa).cap(qp_cap(8, 1, 1, 32)),
    )
    .unwrap();
    let mut qb = Qp::create(
        &s.pdb,
        &QpInitAttr::new(QpType::Rc, cqb, cqb).cap(qp_cap(1, 8, 1, 0)),
    )
    .unwrap();
    connect_pair(
        (&s.ca, l.port_a, &mut qa),
        (&s.cb, l.port_b, &mut qb),
        (0, hca_driver::Rkey(0)),
        &RcParams::default(),
    );
    for i in 0..8 {
        post_recv_sge(&mut qb, i, s.mb.sge(64 * i as usize, 64).unwrap());
    }
    (qa, qb)
}

fn send<P: Platform + 'static>(qa: &mut Qp<P>, cqa: &Cq<P>, id: u64, solicited: bool) {
    let flags = if solicited {
        SendFlags::SIGNALED | SendFlags::SOLICITED
    } else {
        SendFlags::SIGNALED
    };
    qa.post_send(&SendWr::new(id, SendOp::Send).inline(b"ev").flags(flags))
        .unwrap();
    poll_ok(cqa);
}

fn emulated() -> Link<EmuPlatform> {
    Link::emulated(EmuConfig::default(), Config::default())
}

fn armed_cq_makes_the_fd_readable_and_get_event_names_it<P: TestPlatform>(l: &mut Link<P>) {
    let s = setup(l);
    {
        let cqb = Arc::new(Cq::create_on_channel(&s.cb, 16, 0, &s.ch, 0xb0b).unwrap());
        assert!(cqb.channel().is_some());
        let (mut qa, qb) = pair(l, &s, &cqb);
        let fd = s.ch.fd().expect("a channel has a descriptor on Linux");
        assert!(!readable(fd, 0), "nothing happened yet");

        // Armed: the completion's event makes the descriptor readable.
        cqb.req_notify(false);
        send(&mut qa, &s.cqa, 1, false);
        assert!(
            readable(fd, READABLE_MS),
            "the completion event's interrupt"
        );
        let ev = s.ch.get_event(Duration::ZERO).unwrap();
        assert_eq!(
            ev,
            Some(CqEvent {
                cqn: cqb.number(),
                cookie: 0xb0b
            })
        );
        assert_eq!(cqb.unacked_events(), 1);
        poll_ok(&cqb);
        // Nothing more: the descriptor is quiet and a non-blocking read
        // finds nothing (libibverbs' EAGAIN).
        assert_eq!(s.ch.get_event(Duration::ZERO).unwrap(), None);
        assert!(!readable(fd, 0));

        // Not armed: a completion raises no event.
        send(&mut qa, &s.cqa, 2, false);
        poll_ok(&cqb);
        assert_eq!(s.ch.get_event(Duration::ZERO).unwrap(), None);
        assert!(!readable(fd, 0), "no event, no interrupt");

        // Another thread looks at the EQs first (here: this one, through
        // the HCA) and empties the vector's eventfd: the descriptor is
        // readable all the same (the EQ code signals the channel when it
        // counts the event).
        cqb.req_notify(false);
        send(&mut qa, &s.cqa, 20, false);
        let hb = s.hcas.b();
        let v = hb.eq_vector(cqb.eqn()).expect("on interrupts");
        // (B wrote the EQE before it acknowledged the send A completed.)
        hb.poll_events().unwrap();
        hb.platform().interrupt_count(v).unwrap();
        assert!(readable(fd, 0), "counted by another: still readable");
        let ev = s.ch.get_event(Duration::ZERO).unwrap().expect("the event");
        assert_eq!(ev.cookie, 0xb0b);
        poll_ok(&cqb);
        assert!(!readable(fd, 0));
        cqb.ack_events(1).unwrap();

        // Armed again (after the event: the arm sequence number moved on),
        // a blocking read returns the event.
        cqb.req_notify(false);
        send(&mut qa, &s.cqa, 3, false);
        let ev = s.ch.get_event(WAIT).unwrap().expect("the second event");
        assert_eq!(ev.cookie, 0xb0b);
        poll_ok(&cqb);
        assert_eq!(cqb.unacked_events(), 2);

        // Acknowledging more than was read is refused; then both.
        let e = cqb.ack_events(3).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidAttribute {
                    attr: "nevents",
                    ..
                }
            ),
            "{e}"
        );
        cqb.ack_events(2).unwrap();
        assert_eq!(cqb.unacked_events(), 0);

        // The events of a channel's CQ are the channel's.
        let e = cqb.take_events().unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        drop((qa, qb));
        // The channel cannot go while a CQ is bound (EBUSY).
        let e = CompChannel::try_destroy(s.ch.clone()).unwrap_err();
        assert!(matches!(e, Error::InUse { .. }), "{e}");
        assert_eq!(s.ch.cqs(), 1);
        Cq::<P>::try_destroy(cqb).unwrap();
        assert_eq!(s.ch.cqs(), 0);
    }
    close(l, s);
}

fn solicited_only_arm_ignores_unsolicited_completions<P: TestPlatform>(l: &mut Link<P>) {
    let s = setup(l);
    {
        let cqb = Arc::new(Cq::create_on_channel(&s.cb, 16, 0, &s.ch, 7).unwrap());
        let (mut qa, qb) = pair(l, &s, &cqb);
        let fd = s.ch.fd().unwrap();
        cqb.req_notify(true);
        send(&mut qa, &s.cqa, 1, false);
        poll_ok(&cqb);
        assert_eq!(s.ch.get_event(Duration::ZERO).unwrap(), None);
        assert!(!readable(fd, 0), "an unsolicited completion fires nothing");
        // Still armed: the solicited one fires.
        send(&mut qa, &s.cqa, 2, true);
        assert!(readable(fd, READABLE_MS));
        let ev = s.ch.get_event(Duration::ZERO).unwrap().unwrap();
        assert_eq!((ev.cqn, ev.cookie), (cqb.number(), 7));
        poll_ok(&cqb);
        cqb.ack_events(1).unwrap();
        drop((qa, qb));
    }
    close(l, s);
}

/// The arm rule of issue 14 (perftest's `ib_send_lat -e` loop): an arm
/// whose consumer index is behind the producer raises the event at once
/// only for a CQE no event reported yet. Re-arming after an event, before
/// polling the CQE that raised it, raises nothing until the next CQE; a
/// CQE written while the CQ was not armed (between the last poll and the
/// arm, as in Linux's NAPI loop) raises the event as the arm comes.
fn rearm_fires_only_for_unreported_completions<P: TestPlatform>(l: &mut Link<P>) {
    let s = setup(l);
    {
        let cqb = Arc::new(Cq::create_on_channel(&s.cb, 16, 0, &s.ch, 9).unwrap());
        let (mut qa, qb) = pair(l, &s, &cqb);
        let fd = s.ch.fd().unwrap();
        let hb = s.hcas.b();
        // The event of the first completion; acknowledged and re-armed with
        // that completion still in the CQ (perftest's ctx_notify_events).
        cqb.req_notify(false);
        send(&mut qa, &s.cqa, 1, false);
        let ev = s.ch.get_event(WAIT).unwrap().expect("the first event");
        assert_eq!(ev.cookie, 9);
        cqb.ack_events(1).unwrap();
        cqb.req_notify(false);
        hb.poll_events().unwrap();
        assert_eq!(
            s.ch.get_event(Duration::ZERO).unwrap(),
            None,
            "the unpolled completion was reported already: no second event"
        );
        assert!(!readable(fd, 0));
        poll_ok(&cqb);
        // Still armed: the next completion raises the event.
        send(&mut qa, &s.cqa, 2, false);
        assert!(readable(fd, READABLE_MS), "the next completion's event");
        let ev = s.ch.get_event(Duration::ZERO).unwrap().expect("event 2");
        assert_eq!(ev.cookie, 9);
        cqb.ack_events(1).unwrap();
        poll_ok(&cqb);
        // Not armed: a completion comes and is left in the CQ; the arm
        // that follows finds it unreported and raises the event at once.
        send(&mut qa, &s.cqa, 3, false);
        hb.poll_events().unwrap();
        assert_eq!(s.ch.get_event(Duration::ZERO).unwrap(), None);
        cqb.req_notify(false);
        assert!(readable(fd, READABLE_MS), "the arm's immediate event");
        let ev = s.ch.get_event(Duration::ZERO).unwrap().expect("event 3");
        assert_eq!(ev.cookie, 9);
        cqb.ack_events(1).unwrap();
        poll_ok(&cqb);
        // Re-armed with the CQ empty: quiet.
        cqb.req_notify(false);
        hb.poll_events().unwrap();
        assert_eq!(s.ch.get_event(Duration::ZERO).unwrap(), None);
        drop((qa, qb));
        Cq::<P>::try_destroy(cqb).unwrap();
    }
    close(l, s);
}

fn two_cqs_on_one_channel<P: TestPlatform>(l: &mut Link<P>) {
    let s = setup(l);
    {
        let c1 = Arc::new(Cq::create_on_channel(&s.cb, 16, 0, &s.ch, 1).unwrap());
        let c2 = Arc::new(Cq::create_on_channel(&s.cb, 16, 0, &s.ch, 2).unwrap());
        assert_eq!(s.ch.cqs(), 2);
        let (mut qa1, qb1) = pair(l, &s, &c1);
        let (mut qa2, qb2) = pair(l, &s, &c2);
        let fd = s.ch.fd().unwrap();
        c1.req_notify(false);
        c2.req_notify(false);
        send(&mut qa2, &s.cqa, 1, false);
        send(&mut qa1, &s.cqa, 2, false);
        assert!(readable(fd, READABLE_MS));
        let mut got = Vec::new();
        while let Some(ev) = s.ch.get_event(Duration::ZERO).unwrap() {
            got.push(ev.cookie);
            // Readable while events wait in the channel.
            if got.len() < 2 {
                assert!(readable(fd, 0), "one event still waits");
            }
        }
        got.sort();
        assert_eq!(got, [1, 2], "one event per CQ");
        assert!(!readable(fd, 0));
        poll_ok(&c1);
        poll_ok(&c2);
        c1.ack_events(1).unwrap();
        c2.ack_events(1).unwrap();
        drop((qa1, qb1, qa2, qb2));
        Cq::<P>::try_destroy(c2).unwrap();
        Cq::<P>::try_destroy(c1).unwrap();
    }
    close(l, s);
}

/// `ibv_destroy_cq` waits until the events read are acknowledged; here
/// the destroy is refused (`InUse`) and the CQ given up (not destroyed:
/// the HCA's close reclaims it), so this test does not close the HCA.
#[test]
fn a_cq_with_unacknowledged_events_is_not_destroyed() {
    let mut l = emulated();
    let s = setup(&mut l);
    let cqb = Arc::new(Cq::create_on_channel(&s.cb, 16, 0, &s.ch, 5).unwrap());
    let (mut qa, qb) = pair(&l, &s, &cqb);
    cqb.req_notify(false);
    send(&mut qa, &s.cqa, 1, false);
    assert_eq!(s.ch.get_event(WAIT).unwrap().map(|e| e.cookie), Some(5));
    poll_ok(&cqb);
    drop((qa, qb));
    assert_eq!(cqb.unacked_events(), 1);
    let e = Cq::try_destroy(cqb).unwrap_err();
    assert!(matches!(e, Error::InUse { users: 1, .. }), "{e}");
    // The channel is still held by the CQ that was given up.
    assert_eq!(s.ch.cqs(), 1);
    let e = CompChannel::try_destroy(s.ch.clone()).unwrap_err();
    assert!(matches!(e, Error::InUse { .. }), "{e}");
}

fn close<P: TestPlatform>(l: &mut Link<P>, s: Setup<P>) {
    let Setup {
        hcas,
        ca,
        cb,
        pda,
        pdb,
        cqa,
        ch,
        mb,
    } = s;
    Arc::try_unwrap(ch).unwrap().destroy().unwrap();
    drop((mb, pda, pdb, cqa));
    drop((ca, cb));
    l.close(hcas);
}

hca_tests::link_scenarios!(
    armed_cq_makes_the_fd_readable_and_get_event_names_it,
    solicited_only_arm_ignores_unsolicited_completions,
    rearm_fires_only_for_unreported_completions,
    two_cqs_on_one_channel,
);

/// `ibv_get_async_event` and the context's `async_fd`: an injected QP
/// event makes the descriptor readable and is read with its name.
#[test]
fn async_events_make_the_async_fd_readable() {
    use hca_driver::{AsyncEvent, QueueId};
    use hca_tests::verbs::to_init;
    let mut bench = hca_tests::Bench::emulated(EmuConfig::default(), Config::default());
    bench.with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let fd = ctx.async_fd().unwrap();
        assert_eq!(ctx.async_fd().unwrap(), fd, "one descriptor per context");
        // The port events of bring-up.
        while ctx.get_async_event(Duration::ZERO).unwrap().is_some() {}
        assert!(!readable(fd, 0));
        assert_eq!(ctx.get_async_event(Duration::ZERO).unwrap(), None);

        let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
        to_init(&mut qp, 1, AccessFlags::REMOTE_WRITE);
        while ctx.get_async_event(Duration::ZERO).unwrap().is_some() {}
        let ev = firmware_cmds::eq::EVENT_TYPE_COMM_EST;
        assert_eq!(emu.faults().qp_event(qp.number().0, ev), Ok(true));
        assert!(readable(fd, READABLE_MS), "the event's interrupt");
        assert_eq!(
            ctx.get_async_event(Duration::ZERO).unwrap(),
            Some(AsyncEvent::Queue {
                event_type: ev,
                queue: QueueId::Qp(qp.number()),
            })
        );
        assert_eq!(ctx.get_async_event(Duration::ZERO).unwrap(), None);
        assert!(!readable(fd, 0));

        // Queued by another thread's look at the EQs (which also empties
        // the vector's eventfd): still readable.
        let p = hca.platform();
        let c0 = p.interrupt_count(0).unwrap();
        assert_eq!(emu.faults().qp_event(qp.number().0, ev), Ok(true));
        hca.wait_interrupt(0, c0, WAIT).unwrap();
        hca.poll_events().unwrap();
        p.interrupt_count(0).unwrap();
        assert!(readable(fd, 0), "queued by another: still readable");
        assert!(ctx.get_async_event(Duration::ZERO).unwrap().is_some());
        assert!(!readable(fd, 0));
        qp.destroy().unwrap();
    });
}
