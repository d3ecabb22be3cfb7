//! The flow of `RDMA_RC_example.c` from the "RDMA Aware Networks
//! Programming User Manual", through the verbs API, between the two sides
//! of a [`Link`]: resources created on both sides (buffer, PD, CQ, memory
//! region, RC QP), the QP attributes exchanged, RESET -> INIT -> RTR ->
//! RTS, the server SENDs its message, the client RDMA READs the server's
//! buffer and RDMA WRITEs into it; each step verified byte for byte.

use hca_driver::verbs::Qp;
use hca_driver::verbs::{
    AccessFlags, QpCap, QpInitAttr, QpState, QpType, SendOp, SendWr, WcOpcode, WcStatus,
};
use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd};
use hca_tests::verbs::{
    Endpoint, RcParams, path_to, poll_ok, post_recv_sge, to_init, to_rtr, to_rts,
};
use hca_tests::{Link, TestPlatform};
use std::sync::Arc;

/// The example's messages.
const MSG: &str = "SEND operation ";
const RDMAMSGR: &str = "RDMA read operation ";
const RDMAMSGW: &str = "RDMA write operation";
/// The example's buffer size.
const MSG_SIZE: usize = 64;

/// The buffer as a C string, as the example prints it.
fn c_string(b: &[u8]) -> &str {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    std::str::from_utf8(&b[..end]).unwrap()
}

fn with_nul(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn rdma_rc_example<P: TestPlatform>(l: &mut Link<P>) {
    let (port_s, port_c) = (l.port_a, l.port_b);
    let h = l.open();
    {
        // Side A is the server, side B the client.
        let (hs, hc) = (&h.a, h.b());
        // resources_create: contexts, buffers, PDs, CQs of one entry,
        // memory regions, RC QPs of one work request each way.
        let sctx = Arc::new(Context::open(hs).unwrap());
        let cctx = Arc::new(Context::open(hc).unwrap());
        let sbuf = Arc::new(DmaBuf::alloc(hs, MSG_SIZE).unwrap());
        let cbuf = Arc::new(DmaBuf::alloc(hc, MSG_SIZE).unwrap());
        sbuf.write(0, &with_nul(MSG)).unwrap();
        let spd = Arc::new(Pd::alloc(&sctx).unwrap());
        let cpd = Arc::new(Pd::alloc(&cctx).unwrap());
        let scq = Arc::new(Cq::create(&sctx, 1).unwrap());
        let ccq = Arc::new(Cq::create(&cctx, 1).unwrap());
        assert_eq!(scq.cqe(), 1);
        let mr_flags =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let smr = Mr::register(&spd, &sbuf, mr_flags).unwrap();
        let cmr = Mr::register(&cpd, &cbuf, mr_flags).unwrap();
        let cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut sqp = Qp::create(
            &spd,
            &QpInitAttr::new(QpType::Rc, &scq, &scq)
                .cap(cap)
                .sq_sig_all(true),
        )
        .unwrap();
        let mut cqp = Qp::create(
            &cpd,
            &QpInitAttr::new(QpType::Rc, &ccq, &ccq)
                .cap(cap)
                .sq_sig_all(true),
        )
        .unwrap();
        assert!(sqp.cap().max_send_wr >= 1 && sqp.cap().max_recv_wr >= 1);
        assert_eq!(sqp.state(), QpState::Reset);

        // connect_qp: exchange address, rkey, QP number, LID, GID.
        let s_ep = Endpoint::of(&sctx, port_s, sqp.number().0, smr.addr(), smr.rkey());
        let c_ep = Endpoint::of(&cctx, port_c, cqp.number().0, cmr.addr(), cmr.rkey());
        let p = RcParams::default();
        to_init(&mut sqp, port_s, p.access);
        to_init(&mut cqp, port_c, p.access);
        // The client posts its receive before RTR.
        post_recv_sge(&mut cqp, 0x0c11, cmr.sge(0, MSG_SIZE as u32).unwrap());
        to_rtr(
            &mut sqp,
            path_to(&sctx, port_s, &c_ep, p.hop_limit),
            c_ep.qpn,
            &p,
        );
        to_rtr(
            &mut cqp,
            path_to(&cctx, port_c, &s_ep, p.hop_limit),
            s_ep.qpn,
            &p,
        );
        to_rts(&mut sqp, &p);
        to_rts(&mut cqp, &p);
        for qp in [&mut sqp, &mut cqp] {
            let a = qp.query().unwrap();
            assert_eq!(a.qp_state, QpState::Rts);
            assert_eq!(a.timeout, p.timeout);
            assert_eq!(a.path_mtu, p.mtu);
        }

        // The server SENDs its buffer; the client receives the message.
        let sge = smr.sge(0, MSG_SIZE as u32).unwrap();
        sqp.post_send(&SendWr::new(0x5e0d, SendOp::Send).sgl(&[sge]))
            .unwrap();
        let wc = poll_ok(&scq);
        assert_eq!((wc.wr_id, wc.opcode), (0x5e0d, WcOpcode::Send));
        let wc = poll_ok(&ccq);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len, wc.qp_num),
            (0x0c11, WcOpcode::Recv, MSG_SIZE as u32, c_ep.qpn)
        );
        let mut got = [0u8; MSG_SIZE];
        cbuf.read(0, &mut got).unwrap();
        let mut want = [0u8; MSG_SIZE];
        sbuf.read(0, &mut want).unwrap();
        assert_eq!(got, want, "the message arrived byte for byte");
        assert_eq!(c_string(&got), MSG);

        // The server puts the READ message in its buffer; the client RDMA
        // READs the server's buffer.
        sbuf.write(0, &with_nul(RDMAMSGR)).unwrap();
        let csge = cmr.sge(0, MSG_SIZE as u32).unwrap();
        cqp.post_send(
            &SendWr::new(
                0x4ead,
                SendOp::RdmaRead {
                    remote_addr: s_ep.addr,
                    rkey: s_ep.rkey.0,
                },
            )
            .sgl(&[csge]),
        )
        .unwrap();
        let wc = poll_ok(&ccq);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (0x4ead, WcOpcode::RdmaRead, MSG_SIZE as u32)
        );
        cbuf.read(0, &mut got).unwrap();
        sbuf.read(0, &mut want).unwrap();
        assert_eq!(
            got, want,
            "the READ brought the server's buffer byte for byte"
        );
        assert_eq!(c_string(&got), RDMAMSGR);

        // The client replaces the server's buffer with its message.
        cbuf.write(0, &with_nul(RDMAMSGW)).unwrap();
        cqp.post_send(
            &SendWr::new(
                0x3717e,
                SendOp::RdmaWrite {
                    remote_addr: s_ep.addr,
                    rkey: s_ep.rkey.0,
                },
            )
            .sgl(&[csge]),
        )
        .unwrap();
        let wc = poll_ok(&ccq);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status),
            (0x3717e, WcOpcode::RdmaWrite, WcStatus::Success)
        );
        sbuf.read(0, &mut got).unwrap();
        cbuf.read(0, &mut want).unwrap();
        assert_eq!(got, want, "the WRITE put the client's buffer byte for byte");
        assert_eq!(c_string(&got), RDMAMSGW);

        // resources_destroy, in the example's order.
        sqp.destroy().unwrap();
        cqp.destroy().unwrap();
        smr.destroy().unwrap();
        cmr.destroy().unwrap();
        drop((sbuf, cbuf));
        // The QPs and regions are gone, so these are the last handles.
        Cq::try_destroy(scq).unwrap();
        Cq::try_destroy(ccq).unwrap();
        Arc::into_inner(spd)
            .expect("the last handle")
            .destroy()
            .unwrap();
        Arc::into_inner(cpd)
            .expect("the last handle")
            .destroy()
            .unwrap();
    }
    l.close(h);
}

hca_tests::link_scenarios!(rdma_rc_example);
