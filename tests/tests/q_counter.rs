//! Q counters (issue 15): ALLOC/QUERY/DEALLOC_Q_COUNTER as a typed,
//! self-freeing object; a raw packet QP's receive queue counting into its
//! set (`rqc.counter_set_id`), so that frames steered to it while no
//! receive is posted raise `out_of_buffer` by exactly their number
//! (`RawContext::rx_drops`); bad counter ids refused with typed errors.
//! Two emulated ConnectX-4s cabled port to port: side A sends, side B
//! steers into its raw QPs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firmware_cmds::CmdStatus;
use firmware_cmds::caps::CmdHcaCap;
use firmware_cmds::q_counter::{DeallocQCounterIn, QueryQCounterIn};
use hca_driver::capture::{RawContext, RawContextBuilder};

use hca_driver::verbs::{
    AccessFlags, Cq, DmaBuf, Mr, Qp, QpInitAttr, QpState, QpType, RecvWr, SendFlags, WcStatus,
    WorkCompletion,
};
use hca_driver::{Config, CounterSetId, Error};
use hca_emu::{EmuConfig, EmuPlatform, ObjKind};
use hca_tests::steer::{MAC_B, raw_cap, raw_qp, raw_to_rts, send_frame, udp_dport, udp4_frame};
use hca_tests::{Link, Sides};

type P = EmuPlatform;

const WAIT: Duration = Duration::from_secs(10);
const SLOT: usize = 2048;

/// Side A's sender.
struct Sender {
    qp: Qp<P>,
    cq: Arc<Cq<P>>,
    buf: Arc<DmaBuf<P>>,
    mr: Mr<P>,
}

impl Sender {
    /// Sends `n` frames to UDP port `dport`, each completed.
    fn send(&mut self, dport: u16, n: usize) {
        let f = udp4_frame(MAC_B, 4242, dport, b"counted").build();
        for _ in 0..n {
            send_frame(
                &mut self.qp,
                &self.cq,
                &self.mr,
                &self.buf,
                &f,
                SendFlags::NONE,
            );
        }
    }
}

fn drops(rc: &RawContext<P>) -> u32 {
    rc.rx_drops().unwrap().unwrap()
}

/// Waits until `read` gives `want` (the receiving device works on its
/// own thread), and checks it stays there.
fn settles(what: &str, want: u32, read: impl Fn() -> u32) {
    let t = Instant::now();
    while read() != want {
        assert!(
            t.elapsed() < WAIT,
            "{what}: {} after {WAIT:?}, want {want}",
            read()
        );
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(read(), want, "{what} overshot");
}

#[test]
fn frames_to_a_raw_qp_without_receives_raise_out_of_buffer_by_exactly_their_number() {
    let mut l = Link::<P>::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    {
        let eb = l.emu_b();
        let Sides {
            pda, cqa, pdb, cqb, ..
        } = h.sides(64);
        let hb = h.b();
        let qa = raw_qp(&pda, &cqa, 16, 0);
        let buf = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let mr = Mr::register(&pda, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        let mut tx = Sender {
            qp: qa,
            cq: cqa.clone(),
            buf,
            mr,
        };

        // The capture context with a Q counter set of its own; a second
        // raw QP without one.
        let mut rc = RawContextBuilder::new(1)
            .send_wr(0)
            .recv_wr(8)
            .q_counter(true)
            .build(hb)
            .unwrap();
        let set = rc.q_counter().unwrap().number();
        assert_ne!(set.0, 0);
        assert_eq!(eb.objects(ObjKind::QCounter), vec![u32::from(set.0)]);
        let rqn = rc.qp.rq_number().unwrap();
        let ctx = &eb.wq(ObjKind::Rq, rqn.0).unwrap().ctx;
        assert_eq!(ctx[0x0c], set.0, "rqc.counter_set_id");
        rc.bring_up(QpState::Rtr).unwrap();
        let other = raw_qp(&pdb, &cqb, 1, 4);
        assert_eq!(rc.rx_drops().unwrap(), Some(0));

        let t = hb.create_flow_table(0, 1, None).unwrap();
        let g = t.create_group(0, 1, &udp_dport(0)).unwrap();
        let _r1 = g.add_qp_rule(0, &udp_dport(1000), &[&rc.qp], &[]).unwrap();
        let _r2 = g.add_qp_rule(1, &udp_dport(2000), &[&other], &[]).unwrap();
        t.set_root().unwrap();

        // Five frames, nothing posted: five drops.
        tx.send(1000, 5);
        settles("out_of_buffer", 5, || drops(&rc));
        // Drops at the QP without a set do not count into it.
        tx.send(2000, 3);
        let no_buffer = || eb.datapath().drops.raw_no_buffer as u32;
        settles("raw_no_buffer", 8, no_buffer);
        assert_eq!(drops(&rc), 5);

        // With receives posted, frames are taken, not counted.
        let rb = Arc::new(DmaBuf::alloc(hb, 2 * SLOT).unwrap());
        let mrb = Mr::register(&rc.pd, &rb, AccessFlags::LOCAL_WRITE).unwrap();
        let sges: Vec<_> = (0..2)
            .map(|i| mrb.sge(i * SLOT, SLOT as u32).unwrap())
            .collect();
        let wrs: Vec<RecvWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr {
                wr_id: i as u64,
                sgl: core::slice::from_ref(s),
            })
            .collect();
        rc.post_recv_wrs(&wrs).unwrap();
        tx.send(1000, 2);
        let mut got = 0;
        let t0 = Instant::now();
        while got < 2 {
            let mut wc = [WorkCompletion::default(); 2];
            let n = rc.recv_cq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
            }
            got += n;
            assert!(t0.elapsed() < WAIT, "receives");
        }
        assert_eq!(drops(&rc), 5);
        // The ring is empty again: three more drops.
        tx.send(1000, 3);
        settles("out_of_buffer", 8, || drops(&rc));

        // QUERY_Q_COUNTER with clear: the value, then 0.
        let q = rc.q_counter().unwrap();
        assert_eq!(q.query(true).unwrap().out_of_buffer, 8);
        assert_eq!(q.query(false).unwrap().out_of_buffer, 0);
        assert_eq!(rc.rx_drops().unwrap(), Some(0));

        // A context without a set has no drop count.
        let plain = RawContextBuilder::new(1)
            .send_wr(0)
            .recv_wr(2)
            .build(hb)
            .unwrap();
        assert_eq!(plain.rx_drops().unwrap(), None);
        drop(plain);
        drop(_r1);
        drop(_r2);
        drop(g);
        drop(t);
        drop((rc, other, tx));
        assert!(eb.objects(ObjKind::QCounter).is_empty(), "set freed");
    }
    l.close(h);
}

fn assert_bad_param(e: &Error, op: firmware_cmds::Opcode) {
    match e {
        Error::Command(c) => {
            assert_eq!((c.opcode, c.status), (op, CmdStatus::BAD_PARAM), "{e}");
        }
        _ => panic!("not a firmware refusal: {e}"),
    }
}

#[test]
fn bad_counter_ids_get_typed_errors_and_the_sets_are_limited_by_max_qp_cnt() {
    let mut l = Link::<P>::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    {
        let hca = &h.a;
        let emu = l.emu_a();
        let q = hca.alloc_q_counter().unwrap();
        // SAFETY: only Q counter commands, which name no memory.
        let raw = unsafe { hca.raw() };
        // A set never allocated (the only one is `q`), and set 0.
        let bad = if q.number().0 == 0xee { 0xef } else { 0xee };
        for id in [bad, 0] {
            let e = raw
                .exec(
                    &QueryQCounterIn::new()
                        .with(QueryQCounterIn::counter_set_id, id)
                        .unwrap(),
                )
                .unwrap_err();
            assert_bad_param(&e, firmware_cmds::Opcode::QUERY_Q_COUNTER);
            let e = raw
                .exec(
                    &DeallocQCounterIn::new()
                        .with(DeallocQCounterIn::counter_set_id, id)
                        .unwrap(),
                )
                .unwrap_err();
            assert_bad_param(&e, firmware_cmds::Opcode::DEALLOC_Q_COUNTER);
        }
        // A raw QP naming a set that does not exist: CREATE_RQ refused.
        let Sides { pda, cqa, .. } = h.sides(16);
        let e = Qp::create(
            &pda,
            &QpInitAttr::new(QpType::RawPacket, &cqa, &cqa)
                .cap(raw_cap(0, 4))
                .counter_set(CounterSetId(bad)),
        )
        .unwrap_err();
        assert_bad_param(&e, firmware_cmds::Opcode::CREATE_RQ);
        // Sets on what has no receive queue of its own, or set 0: refused
        // before the device.
        for (attr, what) in [
            (
                QpInitAttr::new(QpType::Rc, &cqa, &cqa).counter_set(q.number()),
                "RC",
            ),
            (
                QpInitAttr::new(QpType::RawPacket, &cqa, &cqa)
                    .cap(raw_cap(4, 0))
                    .counter_set(q.number()),
                "send-only",
            ),
            (
                QpInitAttr::new(QpType::RawPacket, &cqa, &cqa)
                    .cap(raw_cap(0, 4))
                    .counter_set(CounterSetId(0)),
                "set 0",
            ),
        ] {
            let e = Qp::create(&pda, &attr).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidAttribute {
                        attr: "counter_set",
                        ..
                    }
                ),
                "{what}: {e}"
            );
        }
        // A set an RQ counts into cannot be freed while the RQ exists.
        let mut qp = Qp::create(
            &pda,
            &QpInitAttr::new(QpType::RawPacket, &cqa, &cqa)
                .cap(raw_cap(0, 4))
                .counter_set(q.number()),
        )
        .unwrap();
        raw_to_rts(&mut qp);
        let e = raw
            .exec(
                &DeallocQCounterIn::new()
                    .with(DeallocQCounterIn::counter_set_id, q.number().0)
                    .unwrap(),
            )
            .unwrap_err();
        match &e {
            Error::Command(c) => assert_eq!(c.status, CmdStatus::BAD_RES_STATE, "{e}"),
            _ => panic!("{e}"),
        }
        drop(qp);

        // max_qp_cnt sets at the most; the next ALLOC_Q_COUNTER is refused.
        let max = hca.caps().general.cur.get(CmdHcaCap::max_qp_cnt);
        assert_eq!(max, 0xff, "the recorded ConnectX-4");
        let mut sets = vec![q];
        let e = loop {
            match hca.alloc_q_counter() {
                Ok(s) => sets.push(s),
                Err(e) => break e,
            }
            assert!(sets.len() <= usize::from(max), "more sets than max_qp_cnt");
        };
        assert_eq!(sets.len(), usize::from(max));
        match &e {
            Error::Command(c) => assert_eq!(c.status, CmdStatus::LIM_EXCEEDED, "{e}"),
            _ => panic!("{e}"),
        }
        let mut ids: Vec<u8> = sets.iter().map(|s| s.number().0).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), sets.len(), "distinct ids");
        assert!(!ids.contains(&0), "set 0 is never handed out");
        drop(sets);
        assert!(emu.objects(ObjKind::QCounter).is_empty());
        // Freed sets can be allocated again.
        let again = hca.alloc_q_counter().unwrap();
        again.destroy().unwrap();
    }
    l.close(h);
}
