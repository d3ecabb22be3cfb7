//! The verbs data path between the two sides of a [`Link`]: UD ping-pong,
//! RC with immediate data, atomics, an SRQ shared by several QPs with its
//! limit event, inline sends, unsignaled batches on one doorbell,
//! completion events, UC, scatter/gather and fences.

use hca_driver::verbs::{Ah, Context, DmaBuf, Mr, Srq};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use hca_driver::verbs::{
    AccessFlags, Cq, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge,
    SrqInitAttr, WcFlags, WcOpcode, WcStatus,
};
use hca_tests::verbs::{
    Endpoint, RcParams, WAIT, assert_quiet, connect, connect_pair, path_to, poll_n, poll_ok,
    post_recv_sge, qp_cap, ud_ready,
};
use hca_tests::{Link, TestPlatform};
use platform::Platform;

const QKEY: u32 = 0x1111_1111;

/// A QP of `t` on `cq` with `c`.
fn qp<P: Platform + 'static>(pd: &Arc<Pd<P>>, cq: &Arc<Cq<P>>, t: QpType, c: QpCap) -> Qp<P> {
    Qp::create(pd, &QpInitAttr::new(t, cq, cq).cap(c)).unwrap()
}

fn ud_ping_pong<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qa = qp(&pda, &cqa, QpType::Ud, qp_cap(16, 16, 1, 64));
        let mut qb = qp(&pdb, &cqb, QpType::Ud, qp_cap(16, 16, 1, 64));
        assert!(qa.cap().max_inline_data >= 64);
        ud_ready(&mut qa, pa, QKEY);
        ud_ready(&mut qb, pb, QKEY);
        let ea = Endpoint::of(&ca, pa, qa.number().0, 0, hca_driver::Rkey(0));
        let eb = Endpoint::of(&cb, pb, qb.number().0, 0, hca_driver::Rkey(0));
        let to_b = Ah::create(&pda, &path_to(&ca, pa, &eb, 64)).unwrap();
        let to_a = Ah::create(&pdb, &path_to(&cb, pb, &ea, 64)).unwrap();
        for round in 0..20u32 {
            let ping = format!("ping {round:03}");
            let pong = format!("pong {round:03} from {:#x}", qb.number().0);
            // Receives first: 40 bytes of GRH, then the message.
            post_recv_sge(
                &mut qa,
                0xa000 + u64::from(round),
                ma.sge(4096, 256).unwrap(),
            );
            post_recv_sge(
                &mut qb,
                0xb000 + u64::from(round),
                mb.sge(4096, 256).unwrap(),
            );
            ba.write(0, ping.as_bytes()).unwrap();
            let sge = [ma.sge(0, ping.len() as u32).unwrap()];
            let wr = SendWr::new(u64::from(round), SendOp::Send)
                .sgl(&sge)
                .flags(SendFlags::SIGNALED)
                .ud(to_b.dest(eb.qpn, QKEY));
            qa.post_send(&wr).unwrap();
            let wc = poll_ok(&cqb);
            assert_eq!(wc.opcode, WcOpcode::Recv);
            assert_eq!(wc.wr_id, 0xb000 + u64::from(round));
            assert_eq!(wc.byte_len, 40 + ping.len() as u32, "GRH + message");
            assert!(wc.wc_flags.has(WcFlags::GRH));
            assert_eq!(wc.src_qp, ea.qpn);
            let mut got = vec![0u8; 40 + ping.len()];
            bb.read(4096, &mut got).unwrap();
            assert_eq!(&got[40..], ping.as_bytes());
            if !ea.gid.is_zero() {
                // RoCE v2 over IPv6: the IPv6 header's source and
                // destination addresses are the GIDs.
                assert_eq!(got[0] >> 4, 6, "IPv6 header");
                assert_eq!(&got[8..24], &ea.gid.0);
                assert_eq!(&got[24..40], &eb.gid.0);
            }
            assert_eq!(poll_ok(&cqa).wr_id, u64::from(round));
            // The pong goes inline.
            qb.post_send(
                &SendWr::new(0x9000 + u64::from(round), SendOp::Send)
                    .inline(pong.as_bytes())
                    .flags(SendFlags::SIGNALED)
                    .ud(to_a.dest(ea.qpn, QKEY)),
            )
            .unwrap();
            let wc = poll_ok(&cqa);
            assert_eq!((wc.wr_id, wc.src_qp), (0xa000 + u64::from(round), eb.qpn));
            let mut got = vec![0u8; pong.len()];
            ba.read(4096 + 40, &mut got).unwrap();
            assert_eq!(got, pong.as_bytes());
            assert_eq!(poll_ok(&cqb).wr_id, 0x9000 + u64::from(round));
        }
        // A wrong Q_Key is dropped by the responder: no receive completes.
        post_recv_sge(&mut qb, 1, mb.sge(0, 256).unwrap());
        qa.post_send(
            &SendWr::new(2, SendOp::Send)
                .inline(b"bad qkey")
                .flags(SendFlags::SIGNALED)
                .ud(to_b.dest(eb.qpn, QKEY ^ 1)),
        )
        .unwrap();
        // UD completes at transmission.
        assert_eq!(poll_ok(&cqa).wr_id, 2);
        assert_quiet(&cqb, Duration::from_millis(5));
        let mut flushed = Vec::new();
        qb.drain(WAIT, |w| flushed.push(*w)).unwrap();
        assert_eq!(flushed.len(), 1);
        assert_eq!(
            (flushed[0].wr_id, flushed[0].status),
            (1, WcStatus::WrFlushErr)
        );
    }
    l.close(h);
}

fn rc_with_immediate_data<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(16).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::ALL).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::ALL).unwrap();
        let mut qa = qp(&pda, &cqa, QpType::Rc, qp_cap(16, 16, 2, 0));
        let mut qb = qp(&pdb, &cqb, QpType::Rc, qp_cap(16, 16, 2, 0));
        let ea = Endpoint::of(&ca, pa, qa.number().0, ma.addr(), ma.rkey());
        let eb = Endpoint::of(&cb, pb, qb.number().0, mb.addr(), mb.rkey());
        let p = RcParams {
            access: AccessFlags::ALL,
            ..RcParams::default()
        };
        connect(&ca, &mut qa, pa, &eb, &p);
        connect(&cb, &mut qb, pb, &ea, &p);
        for i in 0..2 {
            post_recv_sge(&mut qb, 100 + i, mb.sge(0, 1024).unwrap());
        }
        ba.write(0, b"with an immediate").unwrap();
        qa.post_send(
            &SendWr::new(1, SendOp::SendWithImm(0xdead_beef))
                .sgl(&[ma.sge(0, 17).unwrap()])
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&cqb);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len, wc.imm_data),
            (100, WcOpcode::Recv, 17, 0xdead_beef)
        );
        assert!(wc.wc_flags.has(WcFlags::WITH_IMM));
        let mut got = [0u8; 17];
        bb.read(0, &mut got).unwrap();
        assert_eq!(&got, b"with an immediate");
        let wc = poll_ok(&cqa);
        assert_eq!((wc.wr_id, wc.opcode), (1, WcOpcode::Send));
        assert!(wc.wc_flags.has(WcFlags::WITH_IMM));
        // RDMA WRITE with immediate: the data lands at the remote address,
        // a receive WQE is consumed for the immediate.
        ba.write(100, b"written with imm").unwrap();
        qa.post_send(
            &SendWr::new(
                2,
                SendOp::RdmaWriteWithImm {
                    remote_addr: eb.addr + 2048,
                    rkey: eb.rkey.0,
                    imm: 0x0102_0304,
                },
            )
            .sgl(&[ma.sge(100, 16).unwrap()])
            .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&cqb);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.imm_data, wc.byte_len),
            (101, WcOpcode::RecvRdmaWithImm, 0x0102_0304, 16)
        );
        let mut got = [0u8; 16];
        bb.read(2048, &mut got).unwrap();
        assert_eq!(&got, b"written with imm");
        assert_eq!(poll_ok(&cqa).opcode, WcOpcode::RdmaWrite);
    }
    l.close(h);
}

fn atomics<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb) = (
            Arc::new(Context::open(&h.a).unwrap()),
            Arc::new(Context::open(h.b()).unwrap()),
        );
        let dev = *ca.query_device();
        if !dev.atomic_ops {
            eprintln!("skipped: the device has no 8-byte atomics");
            return;
        }
        let order = cb.query_device().atomic_byte_order;
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 256).unwrap()),
            Arc::new(Cq::create(&cb, 16).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::ALL).unwrap();
        let p = RcParams {
            access: AccessFlags::ALL,
            max_rd_atomic: dev.max_qp_init_rd_atom.min(16) as u8,
            max_dest_rd_atomic: dev.max_qp_rd_atom.min(16) as u8,
            ..RcParams::default()
        };
        // Two QPs on A, each connected to its own QP on B, hammer one
        // counter on B.
        let mut qas = [
            qp(&pda, &cqa, QpType::Rc, qp_cap(64, 1, 1, 0)),
            qp(&pda, &cqa, QpType::Rc, qp_cap(64, 1, 1, 0)),
        ];
        let mut qbs = [
            qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 1, 1, 0)),
            qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 1, 1, 0)),
        ];
        for (qa, qb) in qas.iter_mut().zip(qbs.iter_mut()) {
            let ea = Endpoint::of(&ca, pa, qa.number().0, 0, hca_driver::Rkey(0));
            let eb = Endpoint::of(&cb, pb, qb.number().0, mb.addr(), mb.rkey());
            connect(&ca, qa, pa, &eb, &p);
            connect(&cb, qb, pb, &ea, &p);
        }
        let start = 1_000_000u64;
        bb.write(0, &order.encode(start)).unwrap();
        let counter = mb.addr();
        let rkey = mb.rkey();
        let n = 50u64;
        let mut sum = 0;
        let mut slot = 0usize;
        for round in 0..2 {
            for (k, qa) in qas.iter_mut().enumerate() {
                let mut b = qa.batch().unwrap();
                for i in 0..n / 2 {
                    let add = 1 + i + 100 * k as u64 + 1000 * round;
                    sum += add;
                    b.post_send(
                        &SendWr::new(
                            slot as u64,
                            SendOp::AtomicFetchAdd {
                                remote_addr: counter,
                                rkey: rkey.0,
                                add,
                            },
                        )
                        .sgl(&[ma.sge(8 * slot, 8).unwrap()])
                        .flags(SendFlags::SIGNALED),
                    )
                    .unwrap();
                    slot += 1;
                }
                b.ring();
            }
        }
        let wcs = poll_n(&cqa, slot);
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success
                && w.opcode == WcOpcode::FetchAdd
                && w.byte_len == 8),
            "{wcs:?}"
        );
        let fin = order.decode(bb.read8(0).unwrap());
        assert_eq!(fin, start + sum, "every fetch-and-add counted once");
        // Each returned the value before it: all distinct, all between the
        // start and the end.
        let olds: BTreeSet<u64> = (0..slot)
            .map(|i| order.decode(ba.read8(8 * i).unwrap()))
            .collect();
        assert_eq!(olds.len(), slot, "no two fetch-and-adds saw the same value");
        assert!(olds.iter().all(|&v| (start..start + sum).contains(&v)));
        assert_eq!(*olds.first().unwrap(), start);
        // Compare-and-swap: equal swaps and returns the old value, unequal
        // leaves it and returns the current value.
        let qa = &mut qas[0];
        for (i, (compare, swap, expect_after)) in [
            (fin, 7, 7u64),
            (fin, 9, 7),
            (7, 0x5555_aaaa_5555_aaaa, 0x5555_aaaa_5555_aaaa),
        ]
        .into_iter()
        .enumerate()
        {
            let before = order.decode(bb.read8(0).unwrap());
            qa.post_send(
                &SendWr::new(
                    900 + i as u64,
                    SendOp::AtomicCmpSwp {
                        remote_addr: counter,
                        rkey: rkey.0,
                        compare,
                        swap,
                    },
                )
                .sgl(&[ma.sge(4096, 8).unwrap()])
                .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let wc = poll_ok(&cqa);
            assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::CompSwap, 8));
            assert_eq!(
                order.decode(ba.read8(4096).unwrap()),
                before,
                "CAS returns the old value"
            );
            assert_eq!(order.decode(bb.read8(0).unwrap()), expect_after);
        }
    }
    l.close(h);
}

fn srq_shared_by_several_qps<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let bb = Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let srq = Arc::new(Srq::create(&pdb, &SrqInitAttr::new(16, 1)).unwrap());
        assert!(srq.attr().max_wr >= 16);
        let mut qas: Vec<_> = (0..3)
            .map(|_| qp(&pda, &cqa, QpType::Rc, qp_cap(8, 0, 1, 32)))
            .collect();
        let mut qbs: Vec<_> = (0..3)
            .map(|_| {
                Qp::create(
                    &pdb,
                    &QpInitAttr::new(QpType::Rc, &cqb, &cqb)
                        .cap(qp_cap(1, 0, 1, 0))
                        .srq(&srq),
                )
                .unwrap()
            })
            .collect();
        assert!(
            qbs.iter()
                .all(|q| q.srq().is_some() && q.cap().max_recv_wr == 0)
        );
        let p = RcParams {
            rnr_retry: 7,
            ..RcParams::default()
        };
        for (qa, qb) in qas.iter_mut().zip(qbs.iter_mut()) {
            let ea = Endpoint::of(&ca, pa, qa.number().0, 0, hca_driver::Rkey(0));
            let eb = Endpoint::of(&cb, pb, qb.number().0, 0, hca_driver::Rkey(0));
            connect(&ca, qa, pa, &eb, &p);
            connect(&cb, qb, pb, &ea, &p);
        }
        // 12 receives of 256 bytes; the limit armed at 4.
        let wrs: Vec<Sge> = (0..12).map(|i| mb.sge(256 * i, 256).unwrap()).collect();
        let recvs: Vec<RecvWr<'_>> = wrs
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr {
                wr_id: 0x5000 + i as u64,
                sgl: std::slice::from_ref(s),
            })
            .collect();
        srq.post_recv_list(&recvs).unwrap();
        assert_eq!(srq.outstanding(), 12);
        srq.arm_limit(4).unwrap();
        assert_eq!(srq.attr().srq_limit, 4);
        // 7 sends leave 5: no limit event yet.
        let send = |qa: &mut Qp<P>, tag: u8, id: u64| {
            qa.post_send(
                &SendWr::new(id, SendOp::Send)
                    .inline(&[tag; 24])
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
        };
        for i in 0..7u64 {
            let k = (i % 3) as usize;
            send(&mut qas[k], b'a' + k as u8, i);
        }
        let mut got = poll_n(&cqb, 7);
        poll_n(&cqa, 7);
        hca_driver::verbs::Cq::take_events(&cqb).unwrap();
        assert!(!srq.take_limit_event(), "5 left of a limit of 4");
        // Two more: 3 left, below the limit: the event, once.
        send(&mut qas[0], b'a', 7);
        send(&mut qas[1], b'b', 8);
        got.extend(poll_n(&cqb, 2));
        poll_n(&cqa, 2);
        srq.wait_limit_event(WAIT).unwrap();
        assert_eq!(srq.attr().srq_limit, 0, "the event disarms the limit");
        assert_eq!(srq.outstanding(), 3);
        let qpns: BTreeSet<u32> = qbs.iter().map(|q| q.number().0).collect();
        let mut ids = BTreeSet::new();
        for w in &got {
            assert_eq!(
                (w.status, w.opcode, w.byte_len),
                (WcStatus::Success, WcOpcode::Recv, 24)
            );
            assert!(qpns.contains(&w.qp_num), "{w:?}");
            assert!(ids.insert(w.wr_id), "each receive used once");
            let k = qbs.iter().position(|q| q.number().0 == w.qp_num).unwrap();
            let i = (w.wr_id - 0x5000) as usize;
            assert_eq!(bb.read8(256 * i).unwrap(), [b'a' + k as u8; 8]);
        }
        assert_eq!(ids.len(), 9);
        // The remaining receives serve more sends, from any QP.
        send(&mut qas[2], b'c', 9);
        assert_eq!(poll_ok(&cqb).qp_num, qbs[2].number().0);
        poll_ok(&cqa);
        drop(qbs);
        Srq::try_destroy(srq).unwrap();
    }
    l.close(h);
}

fn inline_sends<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let bb = Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap());
        let mb = Mr::register(
            &pdb,
            &bb,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let mut qa = Qp::create(
            &pda,
            &QpInitAttr::new(QpType::Rc, &cqa, &cqa)
                .cap(qp_cap(32, 1, 1, 200))
                .blueflame(true),
        )
        .unwrap();
        let mut qb = qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 32, 1, 0));
        let max = qa.cap().max_inline_data;
        assert!(max >= 200, "{:?}", qa.cap());
        let (_, eb) = connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (mb.addr(), mb.rkey()),
            &RcParams::default(),
        );
        let sizes = [1usize, 12, 16, 28, 44, 60, 64, 100, max as usize];
        for (i, &n) in sizes.iter().enumerate() {
            post_recv_sge(&mut qb, i as u64, mb.sge(512 * i, 512).unwrap());
            let data: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
            qa.post_send(
                &SendWr::new(i as u64, SendOp::Send)
                    .inline(&data)
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let wc = poll_ok(&cqb);
            assert_eq!((wc.wr_id, wc.byte_len), (i as u64, n as u32));
            let mut got = vec![0u8; n];
            bb.read(512 * i, &mut got).unwrap();
            assert_eq!(got, data, "{n} bytes inline");
            poll_ok(&cqa);
        }
        // RDMA WRITE inline.
        qa.post_send(
            &SendWr::new(
                77,
                SendOp::RdmaWrite {
                    remote_addr: eb.addr + 6000,
                    rkey: eb.rkey.0,
                },
            )
            .inline(b"inline write")
            .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        assert_eq!(poll_ok(&cqa).wr_id, 77);
        let mut got = [0u8; 12];
        bb.read(6000, &mut got).unwrap();
        assert_eq!(&got, b"inline write");
        // Single inline sends went by BlueFlame (the QP has a UAR of its
        // own): the emulator saw the copies and they matched the WQEs.
        if let Some(emu) = l.a.emu() {
            let dp = emu.datapath();
            assert_eq!(dp.bf_mismatches, 0);
            assert!(
                dp.doorbells.iter().any(|d| d.offset & 0xff != 0),
                "BlueFlame copies: {:?}",
                dp.doorbells
            );
        }
    }
    l.close(h);
}

fn unsignaled_batches<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb) = (
            Arc::new(Context::open(&h.a).unwrap()),
            Arc::new(Context::open(h.b()).unwrap()),
        );
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 64).unwrap()),
            Arc::new(Cq::create(&cb, 8).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 16384).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 16384).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(
            &pdb,
            &bb,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let mut qa = qp(&pda, &cqa, QpType::Rc, qp_cap(64, 1, 1, 0));
        let mut qb = qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 1, 1, 0));
        let (_, eb) = connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (mb.addr(), mb.rkey()),
            &RcParams::default(),
        );
        for i in 0..16384 / 64 {
            ba.write(64 * i, &[i as u8; 64]).unwrap();
        }
        // 32 RDMA WRITEs in one batch, every 8th signaled: 4 completions,
        // each retiring the unsignaled ones before it.
        let mut b = qa.batch().unwrap();
        for i in 0..32u64 {
            let flags = if i % 8 == 7 {
                SendFlags::SIGNALED
            } else {
                SendFlags::NONE
            };
            b.post_rdma_write(
                i,
                flags,
                eb.addr + 64 * i,
                eb.rkey,
                ma.sge(64 * i as usize, 64).unwrap(),
            )
            .unwrap();
        }
        assert_eq!(b.len(), 32);
        let doorbells = || l.a.emu().map(|e| e.datapath().doorbells.len());
        let before = doorbells();
        b.ring();
        let wcs = poll_n(&cqa, 4);
        if let (Some(x), Some(y)) = (before, doorbells()) {
            assert_eq!(y - x, 1, "one doorbell for the batch of 32");
        }
        assert_eq!(
            wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![7, 15, 23, 31]
        );
        assert_quiet(&cqa, Duration::from_millis(1));
        assert_eq!(qa.outstanding(), (0, 0), "everything retired");
        let mut got = vec![0u8; 32 * 64];
        bb.read(0, &mut got).unwrap();
        let mut want = vec![0u8; 32 * 64];
        ba.read(0, &mut want).unwrap();
        assert_eq!(got, want);
        // A list of work requests: one doorbell too; the fast paths.
        let sges: Vec<Sge> = (32..48).map(|i| ma.sge(64 * i, 64).unwrap()).collect();
        let wrs: Vec<SendWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(k, s)| {
                SendWr::new(
                    100 + k as u64,
                    SendOp::RdmaWrite {
                        remote_addr: eb.addr + 64 * (32 + k as u64),
                        rkey: eb.rkey.0,
                    },
                )
                .sgl(std::slice::from_ref(s))
                .flags(if k == 15 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::NONE
                })
            })
            .collect();
        let before = doorbells();
        qa.post_send_list(&wrs).unwrap();
        assert_eq!(poll_ok(&cqa).wr_id, 115);
        if let (Some(x), Some(y)) = (before, doorbells()) {
            assert_eq!(y - x, 1, "one doorbell for the list of 16");
        }
        qa.post_rdma_write(
            200,
            SendFlags::SIGNALED,
            eb.addr + 64 * 48,
            eb.rkey,
            ma.sge(64 * 48, 64).unwrap(),
        )
        .unwrap();
        assert_eq!(poll_ok(&cqa).wr_id, 200);
        let mut got = vec![0u8; 17 * 64];
        bb.read(32 * 64, &mut got).unwrap();
        let mut want = vec![0u8; 17 * 64];
        ba.read(32 * 64, &mut want).unwrap();
        assert_eq!(got, want);
    }
    l.close(h);
}

fn completion_events<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(16).split();
        let bb = Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qa = qp(&pda, &cqa, QpType::Rc, qp_cap(8, 1, 1, 32));
        let mut qb = qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 8, 1, 0));
        connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (0, hca_driver::Rkey(0)),
            &RcParams::default(),
        );
        for i in 0..4 {
            post_recv_sge(&mut qb, i, mb.sge(64 * i as usize, 64).unwrap());
        }
        // Armed for any completion: an event.
        cqb.req_notify(false);
        qa.post_send(
            &SendWr::new(1, SendOp::Send)
                .inline(b"one")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        assert_eq!(cqb.wait_event(WAIT).unwrap(), 1);
        poll_ok(&cqb);
        poll_ok(&cqa);
        // Not armed: no event.
        qa.post_send(
            &SendWr::new(2, SendOp::Send)
                .inline(b"two")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        poll_ok(&cqb);
        poll_ok(&cqa);
        assert_eq!(cqb.take_events().unwrap(), 0);
        // Armed for solicited completions: an unsolicited one does not
        // fire, a solicited one does.
        cqb.req_notify(true);
        qa.post_send(
            &SendWr::new(3, SendOp::Send)
                .inline(b"three")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        poll_ok(&cqa);
        poll_ok(&cqb);
        assert!(cqb.wait_event(Duration::from_millis(2)).is_err());
        qa.post_send(
            &SendWr::new(4, SendOp::Send)
                .inline(b"four")
                .flags(SendFlags::SIGNALED | SendFlags::SOLICITED),
        )
        .unwrap();
        assert_eq!(cqb.wait_event(WAIT).unwrap(), 1);
        let wc = poll_ok(&cqb);
        assert_eq!(wc.wr_id, 3);
        // The send CQ's event too.
        cqa.req_notify(false);
        assert_eq!(cqa.wait_event(WAIT).unwrap(), 1);
        assert_eq!(poll_ok(&cqa).wr_id, 4);
    }
    l.close(h);
}

fn uc_writes_and_sends<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(16).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(
            &pdb,
            &bb,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let mut qa = qp(&pda, &cqa, QpType::Uc, qp_cap(8, 8, 1, 0));
        let mut qb = qp(&pdb, &cqb, QpType::Uc, qp_cap(8, 8, 1, 0));
        let ea = Endpoint::of(&ca, pa, qa.number().0, 0, hca_driver::Rkey(0));
        let eb = Endpoint::of(&cb, pb, qb.number().0, mb.addr(), mb.rkey());
        let p = RcParams {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            ..RcParams::default()
        };
        connect(&ca, &mut qa, pa, &eb, &p);
        connect(&cb, &mut qb, pb, &ea, &p);
        ba.write(0, &[0x42; 600]).unwrap();
        qa.post_send(
            &SendWr::new(
                1,
                SendOp::RdmaWrite {
                    remote_addr: eb.addr + 1000,
                    rkey: eb.rkey.0,
                },
            )
            .sgl(&[ma.sge(0, 600).unwrap()])
            .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        assert_eq!(poll_ok(&cqa).opcode, WcOpcode::RdmaWrite);
        // UC completes at transmission; wait for the data.
        let hb = cb.hca();
        let t0 = hb.platform().now();
        while bb.read8(1000 + 592).unwrap() != [0x42; 8] {
            assert!(hb.platform().now() - t0 < WAIT, "UC write never landed");
            hb.platform().relax();
        }
        let mut got = vec![0u8; 600];
        bb.read(1000, &mut got).unwrap();
        assert_eq!(got, vec![0x42; 600]);
        post_recv_sge(&mut qb, 9, mb.sge(2048, 64).unwrap());
        qa.post_send(
            &SendWr::new(2, SendOp::Send)
                .sgl(&[ma.sge(0, 33).unwrap()])
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&cqb);
        assert_eq!((wc.wr_id, wc.byte_len), (9, 33));
        poll_ok(&cqa);
        // UC has no RDMA READ: refused before the device.
        let e = qa
            .post_send(
                &SendWr::new(
                    3,
                    SendOp::RdmaRead {
                        remote_addr: eb.addr,
                        rkey: eb.rkey.0,
                    },
                )
                .sgl(&[ma.sge(0, 8).unwrap()]),
            )
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("IBV_WR_RDMA_READ is not valid on a Uc QP"),
            "{e}"
        );
    }
    l.close(h);
}

fn scatter_gather_and_fences<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(16).split();
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        // Two regions on B: receives scatter across both.
        let mb1 = Mr::register_range(
            &pdb,
            &bb,
            0,
            4096,
            AccessFlags::ALL,
            hca_driver::verbs::MrMode::Mtt,
        )
        .unwrap();
        let mb2 = Mr::register_range(
            &pdb,
            &bb,
            4096,
            4096,
            AccessFlags::ALL,
            hca_driver::verbs::MrMode::Pa,
        )
        .unwrap();
        assert_ne!(mb1.lkey(), mb2.lkey());
        let mut qa = qp(&pda, &cqa, QpType::Rc, qp_cap(8, 1, 4, 0));
        let mut qb = qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 8, 4, 0));
        assert!(qa.cap().max_send_sge >= 4 && qb.cap().max_recv_sge >= 4);
        let ea = Endpoint::of(&ca, pa, qa.number().0, 0, hca_driver::Rkey(0));
        let eb = Endpoint::of(&cb, pb, qb.number().0, mb2.addr(), mb2.rkey());
        let p = RcParams {
            access: AccessFlags::ALL,
            ..RcParams::default()
        };
        connect(&ca, &mut qa, pa, &eb, &p);
        connect(&cb, &mut qb, pb, &ea, &p);
        for (i, chunk) in [b"gather ".as_slice(), b"three ", b"pieces"]
            .iter()
            .enumerate()
        {
            ba.write(1000 * i, chunk).unwrap();
        }
        qb.post_recv(&RecvWr {
            wr_id: 5,
            sgl: &[mb1.sge(4000, 10).unwrap(), mb2.sge(100, 100).unwrap()],
        })
        .unwrap();
        qa.post_send(
            &SendWr::new(1, SendOp::Send)
                .sgl(&[
                    ma.sge(0, 7).unwrap(),
                    ma.sge(1000, 6).unwrap(),
                    ma.sge(2000, 6).unwrap(),
                ])
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&cqb);
        assert_eq!(wc.byte_len, 19);
        let mut a = [0u8; 10];
        bb.read(4000, &mut a).unwrap();
        let mut b = [0u8; 9];
        bb.read(4096 + 100, &mut b).unwrap();
        assert_eq!([&a[..], &b[..]].concat(), b"gather three pieces");
        poll_ok(&cqa);
        // A READ, then a fenced WRITE of what it read: the fence makes the
        // WRITE wait for the READ's data.
        bb.write(4096 + 2000, b"fetched and sent back").unwrap();
        qa.post_send_list(&[
            SendWr::new(
                10,
                SendOp::RdmaRead {
                    remote_addr: eb.addr + 2000,
                    rkey: eb.rkey.0,
                },
            )
            .sgl(&[ma.sge(4096, 21).unwrap()]),
            SendWr::new(
                11,
                SendOp::RdmaWrite {
                    remote_addr: eb.addr + 3000,
                    rkey: eb.rkey.0,
                },
            )
            .sgl(&[ma.sge(4096, 21).unwrap()])
            .flags(SendFlags::SIGNALED | SendFlags::FENCE),
        ])
        .unwrap();
        assert_eq!(poll_ok(&cqa).wr_id, 11);
        let mut got = [0u8; 21];
        bb.read(4096 + 3000, &mut got).unwrap();
        assert_eq!(&got, b"fetched and sent back");
    }
    l.close(h);
}

/// One thread posts, another polls the CQ: a QP is `Send`, a CQ `Sync`.
fn posting_and_polling_on_two_threads<P: TestPlatform + Send + Sync>(l: &mut Link<P>)
where
    P::Mmio: Send + Sync,
{
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb) = (
            Arc::new(Context::open(&h.a).unwrap()),
            Arc::new(Context::open(h.b()).unwrap()),
        );
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 256).unwrap()),
            Arc::new(Cq::create(&cb, 8).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 1 << 16).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(
            &pdb,
            &bb,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let mut qa = qp(&pda, &cqa, QpType::Rc, qp_cap(32, 1, 1, 0));
        let mut qb = qp(&pdb, &cqb, QpType::Rc, qp_cap(1, 1, 1, 0));
        let (_, eb) = connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (mb.addr(), mb.rkey()),
            &RcParams::default(),
        );
        const N: u64 = 1000;
        for i in 0..64 {
            ba.write(64 * i, &[i as u8; 64]).unwrap();
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let poller = s.spawn(|| {
                // Tell the poster to stop if this thread fails.
                struct Flag<'f>(&'f std::sync::atomic::AtomicBool);
                impl Drop for Flag<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, std::sync::atomic::Ordering::Release);
                    }
                }
                let _flag = Flag(&stop);
                let mut seen = 0u64;
                let mut wc = [hca_driver::verbs::Completion::default(); 32];
                // Real time here: the emulator's clock runs on while its
                // device is idle, and it is idle until the other thread
                // posts, so a device-time wait could end early.
                let start = std::time::Instant::now();
                while seen < N {
                    let n = cqa.poll(&mut wc).unwrap();
                    if n == 0 {
                        assert!(
                            start.elapsed() < std::time::Duration::from_secs(120),
                            "{seen} of {N} completions"
                        );
                        std::thread::yield_now();
                    }
                    for c in &wc[..n] {
                        assert!(c.is_success(), "{c:?}");
                        assert_eq!(c.wr_id(), seen, "completions in order");
                        seen += 1;
                    }
                }
                seen
            });
            let qa = &mut qa;
            let stop = &stop;
            s.spawn(move || {
                let mut i = 0u64;
                while i < N && !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let k = (i % 64) as usize;
                    match qa.post_rdma_write(
                        i,
                        SendFlags::SIGNALED,
                        eb.addr + 64 * (i % 1024),
                        eb.rkey,
                        ma.sge(64 * k, 64).unwrap(),
                    ) {
                        Ok(()) => i += 1,
                        Err(hca_driver::Error::InvalidWorkRequest {
                            reason:
                                hca_driver::verbs::WrError::DataPath(verbs_core::Error::QueueFull {
                                    ..
                                }),
                            ..
                        }) => std::thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            assert_eq!(poller.join().unwrap(), N);
        });
        let mut got = [0u8; 64];
        bb.read(64 * 999, &mut got).unwrap();
        assert_eq!(got, [(999 % 64) as u8; 64]);
    }
    l.close(h);
}

/// Separate send and receive CQs, over RoCE v2 IPv4 GIDs (which map to
/// no MAC: the destination MAC is given).
fn separate_cqs_and_ipv4_gids<P: TestPlatform>(l: &mut Link<P>) {
    use hca_driver::verbs::{AhAttr, Gid, GidEntry, RoceVersion};
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb) = (
            Arc::new(Context::open(&h.a).unwrap()),
            Arc::new(Context::open(h.b()).unwrap()),
        );
        let (porta, portb) = (ca.query_port(pa).unwrap(), cb.query_port(pb).unwrap());
        if porta.link_layer != hca_driver::LinkLayer::Ethernet {
            eprintln!("skipped: RoCE only");
            return;
        }
        // GID 1 on A, 2 on B (one table when the sides share a port).
        let (maca, macb) = (porta.mac.unwrap(), portb.mac.unwrap());
        let (ga, gb) = (Gid::from_ipv4([10, 9, 0, 1]), Gid::from_ipv4([10, 9, 0, 2]));
        let entry = |gid, mac| GidEntry {
            gid,
            mac,
            vlan: None,
            version: RoceVersion::V2,
            ipv6: false,
        };
        ca.set_gid(pa, 1, &entry(ga, maca)).unwrap();
        cb.set_gid(pb, 2, &entry(gb, macb)).unwrap();
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (sa, ra) = (
            Arc::new(Cq::create(&ca, 8).unwrap()),
            Arc::new(Cq::create(&ca, 8).unwrap()),
        );
        let (sb, rb) = (
            Arc::new(Cq::create(&cb, 8).unwrap()),
            Arc::new(Cq::create(&cb, 8).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qa = Qp::create(
            &pda,
            &QpInitAttr::new(QpType::Rc, &sa, &ra).cap(qp_cap(4, 4, 1, 16)),
        )
        .unwrap();
        let mut qb = Qp::create(
            &pdb,
            &QpInitAttr::new(QpType::Rc, &sb, &rb).cap(qp_cap(4, 4, 1, 16)),
        )
        .unwrap();
        let p = RcParams::default();
        let path = |port, dgid, sgid_index, dmac| {
            let mut a = AhAttr::roce(port, dgid, sgid_index).dmac(dmac);
            a.grh.as_mut().unwrap().hop_limit = 64;
            a
        };
        hca_tests::verbs::to_init(&mut qa, pa, p.access);
        hca_tests::verbs::to_init(&mut qb, pb, p.access);
        hca_tests::verbs::to_rtr(&mut qa, path(pa, gb, 1, macb), qb.number().0, &p);
        hca_tests::verbs::to_rtr(&mut qb, path(pb, ga, 2, maca), qa.number().0, &p);
        hca_tests::verbs::to_rts(&mut qa, &p);
        hca_tests::verbs::to_rts(&mut qb, &p);
        let q = qa.query().unwrap();
        assert_eq!(q.ah_attr.dmac, Some(macb));
        assert_eq!(q.ah_attr.grh.unwrap().dgid, gb.0);
        assert_eq!(q.ah_attr.grh.unwrap().sgid_index, 1);
        for (qp, mr, id) in [(&mut qa, &ma, 1u64), (&mut qb, &mb, 2)] {
            post_recv_sge(qp, id, mr.sge(0, 64).unwrap());
        }
        qa.post_send(
            &SendWr::new(10, SendOp::Send)
                .inline(b"over IPv4")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        qb.post_send(
            &SendWr::new(20, SendOp::Send)
                .inline(b"and back")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        // Send completions on the send CQs, receives on the receive CQs.
        assert_eq!(poll_ok(&sa).wr_id, 10);
        assert_eq!(poll_ok(&sb).wr_id, 20);
        let (wa, wb) = (poll_ok(&ra), poll_ok(&rb));
        assert_eq!((wa.wr_id, wa.byte_len, wa.opcode), (1, 8, WcOpcode::Recv));
        assert_eq!((wb.wr_id, wb.byte_len, wb.opcode), (2, 9, WcOpcode::Recv));
        assert_quiet(&sa, Duration::from_millis(1));
        assert_quiet(&ra, Duration::ZERO);
        let mut got = [0u8; 9];
        bb.read(0, &mut got).unwrap();
        assert_eq!(&got, b"over IPv4");
        drop((qa, qb));
        ca.clear_gid(pa, 1).unwrap();
        cb.clear_gid(pb, 2).unwrap();
    }
    l.close(h);
}

hca_tests::link_scenarios!(
    separate_cqs_and_ipv4_gids,
    posting_and_polling_on_two_threads,
    ud_ping_pong,
    rc_with_immediate_data,
    atomics,
    srq_shared_by_several_qps,
    inline_sends,
    unsignaled_batches,
    completion_events,
    uc_writes_and_sends,
    scatter_gather_and_fences,
);

/// The ConnectX-5 personality offers host-endian 8-byte atomics: the
/// driver asks for them (SET_HCA_CAP of the atomic caps), reports
/// `IBV_ATOMIC_HCA` as Linux does, and the atomics of the scenario above
/// read and write host-order counters.
#[test]
fn host_endian_atomics_on_a_connectx5() {
    use hca_driver::verbs::{AtomicByteOrder, AtomicCap};
    let emu = hca_emu::EmuConfig::default().with_personality(hca_emu::Personality::ConnectX5);
    let mut l = Link::emulated(emu, hca_driver::Config::default());
    let h = l.open();
    {
        let ctx = Context::open(&h.a).unwrap();
        let d = *ctx.query_device();
        assert!(d.atomic_ops);
        assert_eq!(
            (d.atomic_cap, d.atomic_byte_order),
            (AtomicCap::Hca, AtomicByteOrder::Host)
        );
    }
    l.close(h);
    atomics(&mut l);
    l.assert_clean();
}
