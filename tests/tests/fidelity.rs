//! Where the driver must do what Linux does on a real ConnectX, against an
//! emulator that behaves as the real firmware does: shared receive queues by
//! ISSI (SRQ commands at ISSI 0, RMP commands at ISSI 1) and the QUERY_ISSI
//! rules of Linux's `mlx5_core_set_issi`.

use firmware_cmds::Opcode;
use hca_driver::Config;
use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd, Qp, Srq};
use hca_driver::verbs::{RecvWr, SrqInitAttr};
use hca_emu::{EmuConfig, IssiSupport};
use hca_tests::Bench;
use std::sync::Arc;

/// Opens an HCA whose firmware answers QUERY_ISSI as `issi` says, creates,
/// posts to, arms and destroys an SRQ; returns the ISSI in effect and the
/// opcodes of the SRQ's commands in order.
fn srq_commands(issi: IssiSupport) -> (u16, Vec<Opcode>) {
    let mut b = Bench::emulated(EmuConfig::default().with_issi(issi), Config::default());
    b.with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let buf = Arc::new(DmaBuf::alloc(hca, 4096).unwrap());
        let mr = Mr::register(&pd, &buf, hca_driver::verbs::AccessFlags::LOCAL_WRITE).unwrap();
        let before = emu.command_log().len();
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(16, 1)).unwrap());
        srq.post_recv(&RecvWr {
            wr_id: 7,
            sgl: &[mr.sge(0, 64).unwrap()],
        })
        .unwrap();
        srq.arm_limit(4).unwrap();
        assert_eq!(emu.srq(srq.number().0).unwrap().lwm, 4);
        assert_eq!(srq.outstanding(), 1);
        Srq::try_destroy(srq).unwrap();
        let ops = emu.command_log()[before..]
            .iter()
            .map(|c| Opcode(c.opcode))
            .collect();
        (hca.info().issi, ops)
    })
}

#[test]
fn at_issi_1_an_srq_is_an_rmp() {
    let (issi, ops) = srq_commands(IssiSupport::Recorded);
    assert_eq!(issi, 1);
    assert_eq!(
        ops,
        vec![Opcode::CREATE_RMP, Opcode::MODIFY_RMP, Opcode::DESTROY_RMP]
    );
}

#[test]
fn at_issi_0_an_srq_is_an_srq() {
    for support in [
        IssiSupport::Only0,
        IssiSupport::ZeroMask,
        IssiSupport::NoQueryIssi,
    ] {
        let (issi, ops) = srq_commands(support);
        assert_eq!(issi, 0, "{support:?}");
        assert_eq!(
            ops,
            vec![Opcode::CREATE_SRQ, Opcode::ARM_RQ, Opcode::DESTROY_SRQ],
            "{support:?}"
        );
    }
}

#[test]
fn set_issi_is_sent_only_when_issi_1_is_offered() {
    for (support, set) in [
        (IssiSupport::Recorded, true),
        (IssiSupport::Only0, false),
        (IssiSupport::ZeroMask, false),
        (IssiSupport::NoQueryIssi, false),
    ] {
        let mut b = Bench::emulated(EmuConfig::default().with_issi(support), Config::default());
        b.with_open(|_, emu| {
            let sent = emu
                .command_log()
                .iter()
                .any(|c| Opcode(c.opcode) == Opcode::SET_ISSI);
            assert_eq!(sent, set, "{support:?}");
        });
    }
}

/// CQE version 0 (CQEs name the QP by number, no user index): the QP's
/// `user_index` stays 0 as Linux leaves it, and completions still reach
/// the right QP. The emulator refuses a user index at version 0.
#[test]
fn at_cqe_version_0_qps_have_no_user_index() {
    use hca_driver::verbs::{AccessFlags, QpInitAttr, QpType, SendFlags, SendOp, SendWr, WcOpcode};
    use hca_tests::Link;
    use hca_tests::verbs::{Endpoint, RcParams, connect, poll_ok, post_recv_sge, qp_cap};

    let mut l = Link::emulated(EmuConfig::default().with_cqe_version(0), Config::default());
    let h = l.open();
    {
        let (ca, cb) = (
            Arc::new(Context::open(&h.a).unwrap()),
            Arc::new(Context::open(h.b()).unwrap()),
        );
        assert_eq!(ca.query_device().cqe_version, 0);
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 16).unwrap()),
            Arc::new(Cq::create(&cb, 16).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let attr = |cq| QpInitAttr::new(QpType::Rc, cq, cq).cap(qp_cap(4, 4, 1, 0));
        let mut qa = Qp::create(&pda, &attr(&cqa)).unwrap();
        let mut qb = Qp::create(&pdb, &attr(&cqb)).unwrap();
        for (emu, qp) in [(l.emu_a(), qa.number().0), (l.emu_b(), qb.number().0)] {
            let ctx = &emu.qp(qp).unwrap().ctx;
            // qpc.user_index: bits 23:0 of the context's dword 0x10.
            assert_eq!(&ctx[0x11..0x14], &[0, 0, 0], "user_index of {qp:#x}");
        }
        let ea = Endpoint::of(&ca, 1, qa.number().0, 0, hca_driver::Rkey(0));
        let eb = Endpoint::of(&cb, 1, qb.number().0, 0, hca_driver::Rkey(0));
        let p = RcParams::default();
        connect(&ca, &mut qa, 1, &eb, &p);
        connect(&cb, &mut qb, 1, &ea, &p);
        post_recv_sge(&mut qb, 0xb0, mb.sge(0, 64).unwrap());
        ba.write(0, b"cqe version 0").unwrap();
        let sge = [ma.sge(0, 13).unwrap()];
        qa.post_send(
            &SendWr::new(0xa0, SendOp::Send)
                .sgl(&sge)
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&cqa);
        assert_eq!((wc.wr_id, wc.qp_num), (0xa0, qa.number().0));
        let wc = poll_ok(&cqb);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (0xb0, WcOpcode::Recv, 13)
        );
        assert_eq!(wc.qp_num, qb.number().0);
        let mut got = [0u8; 13];
        bb.read(0, &mut got).unwrap();
        assert_eq!(&got, b"cqe version 0");
    }
    l.close(h);
    l.assert_clean();
}
