//! Flow tags (issue 15): a NIC RX flow rule with a `flow_tag` tags the
//! receive CQE of every frame it forwards (`sop_drop_qpn` bits 23:0, read
//! by `RxCqe::flow_tag` as rdma-core's `ibv_wc_read_flow_tag` reads it);
//! an untagged rule's frames report 0. Two emulated ConnectX-4s cabled
//! port to port: side A's raw QP sends, side B's rules steer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::flow::{FlowDest, MAX_FLOW_TAG};
use hca_driver::steering::FlowMatch;
use hca_driver::verbs::{
    AccessFlags, Completion, Cq, DmaBuf, Mr, Qp, RecvWr, RxCqe, SendFlags, WcStatus, WorkCompletion,
};
use hca_driver::{Config, Error};
use hca_emu::{EmuConfig, EmuPlatform};
use hca_tests::steer::{MAC_B, raw_qp, send_frame, udp_dport, udp4_frame};
use hca_tests::{Link, Sides};

type P = EmuPlatform;

const SLOT: usize = 2048;
const WAIT: Duration = Duration::from_secs(10);

fn frame(dport: u16) -> Vec<u8> {
    udp4_frame(MAC_B, 4242, dport, b"tagged or not").build()
}

fn recv_rx(cq: &Cq<P>) -> (WorkCompletion, RxCqe) {
    let mut c = Completion::default();
    let mut rx = RxCqe::default();
    let t = Instant::now();
    while t.elapsed() < WAIT {
        if cq.poll_one_rx(&mut c, &mut rx).unwrap() {
            return (WorkCompletion::from(c), rx);
        }
        std::thread::yield_now();
    }
    panic!("no receive completion in {WAIT:?}");
}

/// Posts receive slot `slot` of `mr` (`SLOT` bytes, `wr_id` `slot`).
fn post_slot(q: &mut Qp<P>, mr: &Mr<P>, slot: usize) {
    let sge = mr.sge(slot * SLOT, SLOT as u32).unwrap();
    q.post_recv(&RecvWr {
        wr_id: slot as u64,
        sgl: &[sge],
    })
    .unwrap();
}

#[test]
fn a_tagged_rule_tags_its_cqes_and_an_untagged_one_reports_zero() {
    let mut l = Link::<P>::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    {
        let Sides {
            pda, pdb, cqa, cqb, ..
        } = h.sides(64);
        let mut qa = raw_qp(&pda, &cqa, 16, 0);
        let mut tagged = raw_qp(&pdb, &cqb, 1, 16);
        let mut plain = raw_qp(&pdb, &cqb, 1, 16);
        let hb = h.b();
        let caps = hb.caps().nic_receive_flow.as_ref().unwrap();
        assert!(
            caps.cur
                .get(firmware_cmds::caps::FlowTablePropLayout::flow_tag),
            "the recorded ConnectX-4 offers flow tags on NIC RX tables"
        );
        let bufs = Arc::new(DmaBuf::alloc(hb, 8 * SLOT).unwrap());
        let mrb = Mr::register(&pdb, &bufs, AccessFlags::LOCAL_WRITE).unwrap();
        for (i, q) in [&mut tagged, &mut plain].into_iter().enumerate() {
            for k in 0..2 {
                post_slot(q, &mrb, 2 * i + k);
            }
        }
        let t = hb.create_flow_table(0, 2, None).unwrap();
        let g = t.create_group(0, 3, &udp_dport(0)).unwrap();
        const TAG: u32 = 0x00ab_cdef;
        let r1 = g
            .add_tagged_qp_rule(0, &udp_dport(1000), &[&tagged], &[], TAG)
            .unwrap();
        let r2 = g.add_qp_rule(1, &udp_dport(2000), &[&plain], &[]).unwrap();
        // The largest tag is accepted too.
        let r3 = g
            .add_tagged_qp_rule(2, &udp_dport(3000), &[&plain], &[], MAX_FLOW_TAG)
            .unwrap();
        t.set_root().unwrap();

        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();

        for (dport, want_tag, want_wr) in [(1000, TAG, 0), (2000, 0, 2), (3000, MAX_FLOW_TAG, 3)] {
            let f = frame(dport);
            send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
            let (wc, rx) = recv_rx(&cqb);
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.wr_id, want_wr, "the rule's QP received it");
            assert_eq!(wc.byte_len as usize, f.len().max(60), "padded to 60 bytes");
            assert_eq!(rx.flow_tag(), want_tag, "flow tag of dport {dport}");
            // As in rdma-core, the receive completion's qp_num is the
            // CQE's sop_drop_qpn field: the tag.
            assert_eq!(wc.qp_num, want_tag);
        }
        // The tag goes with the rule: a rule re-set without one reports 0.
        r1.destroy().unwrap();
        let r1 = g.add_qp_rule(0, &udp_dport(1000), &[&tagged], &[]).unwrap();
        send_frame(&mut qa, &cqa, &ma, &sa, &frame(1000), SendFlags::NONE);
        let (wc, rx) = recv_rx(&cqb);
        assert_eq!((wc.wr_id, rx.flow_tag()), (1, 0));

        drop((r1, r2, r3));
        drop(g);
        drop(t);
        drop((tagged, plain, qa));
    }
    l.close(h);
}

#[test]
fn bad_flow_tags_are_refused_with_typed_errors() {
    let mut l = Link::<P>::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    {
        let Sides { pdb, cqb, .. } = h.sides(16);
        let qb = raw_qp(&pdb, &cqb, 1, 4);
        let hb = h.b();
        let t = hb.create_flow_table(0, 1, None).unwrap();
        let g = t.create_group(0, 1, &udp_dport(0)).unwrap();
        for tag in [0, MAX_FLOW_TAG + 1, u32::MAX] {
            let e = g
                .add_tagged_qp_rule(0, &udp_dport(1), &[&qb], &[], tag)
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        arg: "flow_tag",
                        ..
                    }
                ),
                "{tag:#x}: {e}"
            );
        }
        let e = g
            .add_tagged_rule(0, &udp_dport(1), FlowDest::Drop, 5)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "flow_tag",
                    ..
                }
            ),
            "{e}"
        );
        // The refusals left the entry free.
        g.add_tagged_qp_rule(0, &udp_dport(1), &[&qb], &[], 5)
            .unwrap();
    }
    l.close(h);
}

#[test]
fn a_device_without_the_flow_tag_capability_refuses_tags() {
    let emu = EmuConfig {
        nic_rx_flow_tag_cap: false,
        ..EmuConfig::default()
    };
    let mut l = Link::<P>::emulated(emu, Config::default());
    let h = l.open();
    {
        let Sides { pdb, cqb, .. } = h.sides(16);
        let qb = raw_qp(&pdb, &cqb, 1, 4);
        let hb = h.b();
        let t = hb.create_flow_table(0, 1, None).unwrap();
        let g = t.create_group(0, 1, &udp_dport(0)).unwrap();
        let e = g
            .add_tagged_qp_rule(0, &udp_dport(1), &[&qb], &[], 5)
            .unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        // The device itself refuses a tag it does not offer (the driver's
        // check bypassed).
        use firmware_cmds::flow::{
            DestFormatStruct, FLOW_CONTEXT_ACTION_FWD_DEST, FLOW_DESTINATION_TYPE_TIR,
            FLOW_TABLE_TYPE_NIC_RX, FlowContext, SetFteIn,
        };
        let ctx = FlowContext::new()
            .with(FlowContext::group_id, g.id().0)
            .unwrap()
            .with(FlowContext::flow_tag, 5)
            .unwrap()
            .with(FlowContext::action, FLOW_CONTEXT_ACTION_FWD_DEST)
            .unwrap()
            .with(FlowContext::destination_list_size, 1)
            .unwrap();
        let input = SetFteIn::new()
            .with(SetFteIn::table_type, FLOW_TABLE_TYPE_NIC_RX)
            .unwrap()
            .with(SetFteIn::table_id, t.id().0)
            .unwrap()
            .with(SetFteIn::flow_index, 1)
            .unwrap()
            .with(SetFteIn::flow_context, ctx)
            .unwrap();
        let dest = *DestFormatStruct::new()
            .with(
                DestFormatStruct::destination_type,
                FLOW_DESTINATION_TYPE_TIR,
            )
            .unwrap()
            .with(DestFormatStruct::destination_id, qb.tir().unwrap().0)
            .unwrap()
            .as_bytes();
        // SAFETY: SET_FLOW_TABLE_ENTRY names no memory.
        let raw = unsafe { hb.raw() };
        let e = raw.exec_with_items(&input, &[dest]).unwrap_err();
        match &e {
            Error::Command(c) => {
                assert_eq!(c.status, firmware_cmds::CmdStatus::BAD_PARAM, "{e}")
            }
            _ => panic!("{e}"),
        }
        // Untagged rules still work.
        g.add_qp_rule(0, &udp_dport(1), &[&qb], &[]).unwrap();
    }
    l.close(h);
}

/// A rule forwarding to a deeper table: the tag of the rule that reaches
/// the TIR, or, when that one has none, of the rule that forwarded to its
/// table (the emulator's assumption, recorded in docs/fidelity.md).
#[test]
fn a_tag_set_before_a_forward_to_another_table_reaches_the_cqe() {
    let mut l = Link::<P>::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    {
        let Sides {
            pda, pdb, cqa, cqb, ..
        } = h.sides(64);
        let mut qa = raw_qp(&pda, &cqa, 16, 0);
        let mut qb = raw_qp(&pdb, &cqb, 1, 16);
        let hb = h.b();
        let bufs = Arc::new(DmaBuf::alloc(hb, 4 * SLOT).unwrap());
        let mrb = Mr::register(&pdb, &bufs, AccessFlags::LOCAL_WRITE).unwrap();
        for slot in 0..4 {
            post_slot(&mut qb, &mrb, slot);
        }
        let t1 = hb.create_flow_table(1, 2, None).unwrap();
        let t0 = hb.create_flow_table(0, 2, None).unwrap();
        let all = FlowMatch::default();
        // Table 1: port 1000 with its own tag, anything else untagged.
        let g1 = t1.create_group(0, 0, &udp_dport(0)).unwrap();
        let _own = g1
            .add_tagged_qp_rule(0, &udp_dport(1000), &[&qb], &[], 0x111)
            .unwrap();
        let g1b = t1.create_group(1, 1, &all).unwrap();
        let _plain = g1b.add_qp_rule(1, &all, &[&qb], &[]).unwrap();
        // Table 0: everything to table 1, tagged 0x222.
        let g0 = t0.create_group(0, 0, &all).unwrap();
        let _fwd = g0
            .add_tagged_rule(0, &all, FlowDest::Table(&t1), 0x222)
            .unwrap();
        t0.set_root().unwrap();
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();
        for (dport, want) in [(1000, 0x111), (2000, 0x222)] {
            send_frame(&mut qa, &cqa, &ma, &sa, &frame(dport), SendFlags::NONE);
            let (wc, rx) = recv_rx(&cqb);
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(rx.flow_tag(), want, "dport {dport}");
        }
    }
    l.close(h);
}
