//! Affiliated and internal error events, raised by the emulated firmware
//! for a chosen object, reach their owner through the verbs layer
//! (`Qp::take_events`, `Srq::take_events`) and the HCA's event queue
//! (`hca.events().pop()`), with the data the PRM gives them; the object is
//! in the state the event says.

use firmware_cmds::eq::{
    EVENT_TYPE_COMM_EST, EVENT_TYPE_SRQ_CATAS_ERROR, EVENT_TYPE_SRQ_LAST_WQE,
    EVENT_TYPE_SRQ_RQ_LIMIT, EVENT_TYPE_WQ_ACCESS_ERROR, EVENT_TYPE_WQ_CATAS_ERROR,
    EVENT_TYPE_WQ_INVAL_REQ_ERROR,
};
use firmware_cmds::eth::{CreateRqOut, DestroyRqIn, WQ_STATE_ERR};
use firmware_cmds::init_seg::HealthSyndrome;
use firmware_cmds::{CmdStatus, Opcode};
use hca_driver::verbs::Qp;
use hca_driver::verbs::{AccessFlags, QpInitAttr, QpState, QpType, SrqInitAttr, WcStatus};
use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd, Srq};
use hca_driver::{AsyncEvent, Config, DeadReason, Error, Hca, Qpn, QueueId};
use hca_emu::{EmuConfig, EmuPlatform, ObjKind};
use hca_tests::Bench;
use hca_tests::steer::{create_rq_in, cyclic_wq};
use hca_tests::verbs::{poll_n, post_recv_sge, to_init};
use std::sync::Arc;

fn bench() -> Bench<EmuPlatform> {
    Bench::emulated(EmuConfig::default(), Config::default())
}

/// Empties the HCA's event queue (port and other events of bring-up).
fn drain(hca: &Hca<EmuPlatform>) {
    hca.poll_events().unwrap();
    while hca.events().pop().is_some() {}
}

fn bit(t: u8) -> u64 {
    1 << t
}

#[test]
fn qp_work_queue_errors_reach_the_qp_and_the_event_queue() {
    bench().with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let buf = Arc::new(DmaBuf::alloc(hca, 4096).unwrap());
        let mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        for (i, event) in [
            EVENT_TYPE_WQ_CATAS_ERROR,
            EVENT_TYPE_WQ_INVAL_REQ_ERROR,
            EVENT_TYPE_WQ_ACCESS_ERROR,
        ]
        .into_iter()
        .enumerate()
        {
            let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
            to_init(&mut qp, 1, AccessFlags::REMOTE_WRITE);
            post_recv_sge(&mut qp, 100 + i as u64, mr.sge(0, 64).unwrap());
            drain(hca);
            let qpn = qp.number();
            assert_eq!(emu.faults().qp_event(qpn.0, event), Ok(true));
            // The owner sees it...
            assert_eq!(qp.take_events().unwrap(), bit(event));
            assert_eq!(qp.take_events().unwrap(), 0, "taken once");
            // ...and so does the HCA's queue, with its name.
            let e = hca.events().pop().unwrap();
            assert_eq!(
                e,
                AsyncEvent::Queue {
                    event_type: event,
                    queue: QueueId::Qp(qpn),
                }
            );
            assert!(e.type_name().unwrap().starts_with("MLX5_EVENT_TYPE_WQ_"));
            assert_eq!(hca.events().pop(), None);
            // The QP is in error and its posted receive was flushed.
            qp.query().unwrap();
            assert_eq!(qp.state(), QpState::Err);
            let wc = poll_n(&cq, 1)[0];
            assert_eq!(
                (wc.wr_id, wc.status),
                (100 + i as u64, WcStatus::WrFlushErr)
            );
            qp.destroy().unwrap();
        }
    });
}

#[test]
fn qp_events_that_do_not_change_the_state() {
    bench().with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(16, 1)).unwrap());
        let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq).srq(&srq)).unwrap();
        to_init(&mut qp, 1, AccessFlags::REMOTE_WRITE);
        drain(hca);
        let qpn = qp.number().0;
        emu.faults().qp_event(qpn, EVENT_TYPE_COMM_EST).unwrap();
        emu.faults().qp_event(qpn, EVENT_TYPE_SRQ_LAST_WQE).unwrap();
        assert_eq!(
            qp.take_events().unwrap(),
            bit(EVENT_TYPE_COMM_EST) | bit(EVENT_TYPE_SRQ_LAST_WQE)
        );
        let types: Vec<u8> = std::iter::from_fn(|| hca.events().pop())
            .map(|e| match e {
                AsyncEvent::Queue {
                    event_type,
                    queue: QueueId::Qp(Qpn(n)),
                } if n == qpn => event_type,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(types, vec![EVENT_TYPE_COMM_EST, EVENT_TYPE_SRQ_LAST_WQE]);
        qp.query().unwrap();
        assert_eq!(qp.state(), QpState::Init);
        // The SRQ did not get the QP's events.
        assert_eq!(srq.take_events().unwrap(), 0);
    });
}

#[test]
fn srq_catastrophic_error_and_limit_reach_the_srq() {
    bench().with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(16, 1)).unwrap());
        srq.arm_limit(4).unwrap();
        drain(hca);
        let srqn = srq.number();
        assert_eq!(
            emu.faults().srq_event(srqn.0, EVENT_TYPE_SRQ_CATAS_ERROR),
            Ok(true)
        );
        assert_eq!(
            emu.faults().srq_event(srqn.0, EVENT_TYPE_SRQ_RQ_LIMIT),
            Ok(true)
        );
        hca.poll_events().unwrap();
        // Taking the limit event leaves the catastrophic error for
        // take_events.
        assert!(srq.take_limit_event());
        assert_eq!(srq.attr().srq_limit, 0, "disarmed");
        assert_eq!(srq.take_events().unwrap(), bit(EVENT_TYPE_SRQ_CATAS_ERROR));
        assert_eq!(srq.take_events().unwrap(), 0);
        let events: Vec<AsyncEvent> = std::iter::from_fn(|| hca.events().pop()).collect();
        assert_eq!(
            events,
            vec![
                AsyncEvent::Queue {
                    event_type: EVENT_TYPE_SRQ_CATAS_ERROR,
                    queue: QueueId::Srq(srqn),
                },
                AsyncEvent::Queue {
                    event_type: EVENT_TYPE_SRQ_RQ_LIMIT,
                    queue: QueueId::Srq(srqn),
                },
            ]
        );
        assert_eq!(
            events[0].type_name(),
            Some("MLX5_EVENT_TYPE_SRQ_CATAS_ERROR")
        );
        // The SRQ is an RMP in error now: arming it (MODIFY_RMP from RDY)
        // is refused.
        match srq.arm_limit(2) {
            Err(Error::Command(e)) => {
                assert_eq!(e.opcode, Opcode::MODIFY_RMP);
                assert_eq!(e.status, CmdStatus::BAD_RES_STATE);
            }
            other => panic!("arming an SRQ in error: {other:?}"),
        }
        // take_events also takes a limit event (and disarms).
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(16, 1)).unwrap());
        let srqn = srq.number();
        srq.arm_limit(2).unwrap();
        emu.faults()
            .srq_event(srqn.0, EVENT_TYPE_SRQ_RQ_LIMIT)
            .unwrap();
        assert_eq!(srq.take_events().unwrap(), bit(EVENT_TYPE_SRQ_RQ_LIMIT));
        assert_eq!(srq.attr().srq_limit, 0);
    });
}

#[test]
fn raw_rq_work_queue_error_reaches_the_event_queue() {
    bench().with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let ring = Arc::new(DmaBuf::alloc(hca, 4096).unwrap());
        let dbr = Arc::new(DmaBuf::alloc(hca, 64).unwrap());
        // CREATE_RQ: a cyclic WQ of 64 WQEs of 64 bytes, one page.
        let wq = cyclic_wq(pd.number(), dbr.iova(), 6, 6);
        let create = create_rq_in(cq.number(), false, wq);
        // SAFETY: the RQ's ring and doorbell record (`dbr_addr`) are DMA
        // regions allocated from this HCA's platform, freed only after
        // DESTROY_RQ below.
        let raw = unsafe { hca.raw() };
        let out: CreateRqOut = raw.exec_with_items(&create, &[ring.iova()]).unwrap();
        let rqn = out.get(CreateRqOut::rqn);
        // A control-plane user registers its RQ for events.
        hca.events().register_queue(QueueId::Rq(rqn)).unwrap();
        drain(hca);
        assert_eq!(
            emu.faults()
                .wq_event(ObjKind::Rq, rqn, EVENT_TYPE_WQ_CATAS_ERROR),
            Ok(true)
        );
        hca.poll_events().unwrap();
        assert_eq!(
            hca.events().pop(),
            Some(AsyncEvent::Queue {
                event_type: EVENT_TYPE_WQ_CATAS_ERROR,
                queue: QueueId::Rq(rqn),
            })
        );
        assert_eq!(
            hca.events().take_queue_events(QueueId::Rq(rqn)),
            Some(bit(EVENT_TYPE_WQ_CATAS_ERROR))
        );
        assert_eq!(emu.wq(ObjKind::Rq, rqn).unwrap().state, WQ_STATE_ERR);
        raw.exec(&DestroyRqIn::new().with(DestroyRqIn::rqn, rqn).unwrap())
            .unwrap();
        assert!(hca.events().unregister_queue(QueueId::Rq(rqn)));
    });
}

#[test]
fn internal_error_event_reads_a_clean_health_buffer_then_a_fatal_one() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    drain(&hca);
    assert!(emu.faults().internal_error_event());
    hca.poll_events().unwrap();
    assert_eq!(hca.events().pop(), Some(AsyncEvent::InternalError));
    // The health buffer is clean: the driver goes on.
    hca.vport_up().unwrap();
    // With a fatal syndrome behind it, the device is dead.
    emu.faults().fatal_health(0x8, 0x12);
    assert!(emu.faults().internal_error_event());
    let e = hca.poll_events().unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::Fatal {
                syndrome: HealthSyndrome::HW_UNRECOVERABLE_ERR,
                ext_synd: 0x12
            })
        ),
        "{e}"
    );
    assert!(matches!(hca.vport_up(), Err(Error::DeviceDead(_))));
    let _ = b.try_close(hca);
    let emu = b.emu().unwrap();
    assert!(emu.iommu_faults().is_empty());
    assert!(emu.leak_report().dma_regions.is_empty());
}
