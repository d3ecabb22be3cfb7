//! Raw packet QPs through the verbs API (issue 15): two emulated
//! ConnectX-4s cabled port to port; side A's raw QP sends Ethernet frames
//! that side B's flow rules steer into side B's raw QPs, completing on
//! ordinary verbs CQs. The QP is built as mlx5_ib builds it (transport
//! domain, TIS + SQ, RQ + direct TIR), moves through RST/INIT/RTR/RTS as
//! MODIFY_RQ/MODIFY_SQ, and its destroy gives every object and page back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firmware_cmds::caps::{CAP_ETHERNET_OFFLOADS, CAP_GENERAL};
use firmware_cmds::eth::{WQ_STATE_ERR, WQ_STATE_RDY, WQ_STATE_RST};
use hca_driver::CapMode;
use hca_driver::Error;
use hca_driver::flow::TirDest;
use hca_driver::steering::{FlowMatch, FlowSpec, Masked};
use hca_driver::verbs::ETH_L2_INLINE_HEADER_SIZE;
use hca_driver::verbs::{
    AccessFlags, Cq, DEVICE_MANAGED_FLOW_STEERING, DEVICE_RAW_IP_CSUM, DEVICE_RAW_SCATTER_FCS,
    DmaBuf, L3HdrType, L4HdrType, Mr, Pd, Qp, QpAttr, QpCap, QpCreateFlags, QpInitAttr, QpState,
    QpType, RAW_PACKET_CAP_CVLAN_STRIPPING, RAW_PACKET_CAP_DELAY_DROP, RAW_PACKET_CAP_IP_CSUM,
    RAW_PACKET_CAP_SCATTER_FCS, RecvWr, RxCqe, SendFlags, SendOp, SendWr, VlanInsert, WcFlags,
    WcOpcode, WcStatus, WorkCompletion,
};
use hca_driver::{Config, Hca};
use hca_emu::frame::{L3, L4};
use hca_emu::{EmuConfig, EmuHca, EmuPlatform, ObjKind, Personality, PortType};
use hca_tests::steer::{
    MAC_A, MAC_B, MCAST, OTHER_SMAC, V4A, V4B, V6A, V6B, marked_frame, matches_of,
    one_entry_groups, raw_attr, raw_cap, raw_to_rts, selector_specs, send_frame, udp4_frame,
    udp4_rss, udp4_rss_hash,
};
use hca_tests::{Link, Sides};

type P = EmuPlatform;

const SLOT: usize = 2048;

/// A raw QP's receive buffers: `n` slots of [`SLOT`] bytes.
struct Bufs {
    buf: Arc<DmaBuf<P>>,
    mr: Mr<P>,
}

impl Bufs {
    fn new(hca: &Arc<Hca<P>>, pd: &Arc<Pd<P>>, n: usize) -> Self {
        let buf = Arc::new(DmaBuf::alloc(hca, n * SLOT).unwrap());
        let mr = Mr::register(pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        Self { buf, mr }
    }

    fn post(&self, qp: &mut Qp<P>, slot: usize) {
        let sge = self.mr.sge(slot * SLOT, SLOT as u32).unwrap();
        qp.post_recv(&RecvWr {
            wr_id: slot as u64,
            sgl: &[sge],
        })
        .unwrap();
    }

    fn read(&self, slot: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.buf.read(slot * SLOT, &mut b).unwrap();
        b
    }
}

/// The QP of `attr` on `pd`, at RTS.
fn rts_qp(pd: &Arc<Pd<P>>, attr: QpInitAttr<P>) -> Qp<P> {
    let mut q = Qp::create(pd, &attr).unwrap();
    raw_to_rts(&mut q);
    q
}

/// Asserts that `e` is the typed refusal of a QP's create flags.
fn assert_create_flags_refused(e: &Error) {
    assert!(
        matches!(
            e,
            Error::InvalidAttribute {
                attr: "create_flags",
                ..
            }
        ),
        "{e}"
    );
}

/// A link of two emulated HCAs made as `emu` says.
fn link_with(emu: EmuConfig) -> Link<P> {
    Link::emulated(emu, Config::default())
}

/// How long a completion may take: the emulated devices run on their own
/// threads, which a loaded machine may not schedule for a while.
const WAIT: Duration = Duration::from_secs(10);

/// Polls `cq` until one completion arrives ([`WAIT`] at the most).
fn poll_one(cq: &Cq<P>) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let t = Instant::now();
    while t.elapsed() < WAIT {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        std::thread::yield_now();
    }
    panic!("no completion on {cq:?} in {WAIT:?}");
}

fn poll_none(cq: &Cq<P>) {
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "{:?}", wc[0]);
}

/// An Ethernet + IPv4 + UDP frame from side A with `payload` (checksums
/// zero).
fn udp4(dst: [u8; 6], src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
    udp4_frame(dst, src_port, dst_port, payload).build()
}

fn link() -> Link<P> {
    link_with(EmuConfig::default())
}

#[test]
fn raw_qp_sends_and_receives_through_a_flow_rule_and_destroy_releases_everything() {
    let mut l = link();
    let h = l.open();
    {
        let (ea, eb) = (l.emu_a(), l.emu_b());
        let Sides {
            pda, pdb, cqa, cqb, ..
        } = h.sides(64);
        let kinds = [
            ObjKind::Sq,
            ObjKind::Rq,
            ObjKind::Tis,
            ObjKind::Tir,
            ObjKind::TransportDomain,
        ];
        let counts = |e: &EmuHca| kinds.map(|k| e.objects(k).len());
        let (start_a, start_b) = (counts(ea), counts(eb));
        let pages_b = eb.firmware_pages();

        let mut qa = Qp::create(&pda, &raw_attr(&cqa, 16, 0)).unwrap();
        let mut qb = Qp::create(&pdb, &raw_attr(&cqb, 16, 16)).unwrap();
        assert_eq!(qa.qp_type(), QpType::RawPacket);
        assert_eq!(qa.number().0, qa.sq_number().unwrap().0);
        assert!(qa.rq_number().is_none() && qa.tir().is_none());
        let rqn = qb.rq_number().unwrap();
        // mlx5_ib's objects: TD, TIS + SQ, RQ + TIR.
        assert_eq!(
            counts(eb),
            [
                start_b[0] + 1,
                start_b[1] + 1,
                start_b[2] + 1,
                start_b[3] + 1,
                start_b[4] + 1
            ]
        );
        assert_eq!(
            counts(ea)[..3],
            [start_a[0] + 1, start_a[1], start_a[2] + 1]
        );
        let wq = |e: &EmuHca, k, n| e.wq(k, n).unwrap();
        assert_eq!(wq(eb, ObjKind::Rq, rqn.0).state, WQ_STATE_RST);
        // Without CVLAN stripping the RQ is created with vsd = 1.
        let ctx = &wq(eb, ObjKind::Rq, rqn.0).ctx;
        assert_eq!(ctx[0] & 0x10, 0x10, "rqc.vsd");

        // Raw QP transitions: only the port at RESET to INIT.
        let e = qb.modify(&QpAttr::new().state(QpState::Init)).unwrap_err();
        assert!(matches!(e, Error::QpAttrMask { .. }), "{e}");
        let e = qb
            .modify(&QpAttr::new().state(QpState::Init).port(1).pkey_index(0))
            .unwrap_err();
        assert!(matches!(e, Error::QpAttrMask { .. }), "{e}");
        let e = qb.modify(&QpAttr::new().state(QpState::Rtr)).unwrap_err();
        assert!(matches!(e, Error::InvalidTransition { .. }), "{e}");
        let e = qb
            .modify(&QpAttr::new().state(QpState::Init).port(9))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidAttribute {
                    attr: "port_num",
                    ..
                }
            ),
            "{e}"
        );
        qb.modify(&QpAttr::new().state(QpState::Init).port(1))
            .unwrap();
        assert_eq!(wq(eb, ObjKind::Rq, rqn.0).state, WQ_STATE_RDY);
        assert_eq!(
            wq(eb, ObjKind::Sq, qb.sq_number().unwrap().0).state,
            WQ_STATE_RDY
        );
        qb.modify(&QpAttr::new().state(QpState::Rtr)).unwrap();
        qb.modify(&QpAttr::new().state(QpState::Rts)).unwrap();
        assert_eq!(qb.query().unwrap().qp_state, QpState::Rts);
        raw_to_rts(&mut qa);

        // Side B: a flow rule on its MAC into qb.
        let hb = h.b();
        let t = hb.create_flow_table(0, 2, None).unwrap();
        let m = FlowMatch::from_specs(&[FlowSpec::Eth {
            dst_mac: Masked::exact(MAC_B, [0xff; 6]),
            src_mac: Masked::default(),
            ether_type: Masked::default(),
            vlan_tag: Masked::default(),
        }])
        .unwrap();
        let g = t.create_group(0, 0, &m).unwrap();
        let rule = g.add_qp_rule(0, &m, &[&qb], &[]).unwrap();
        // A QP without a receive queue is no destination.
        assert!(matches!(
            g.add_qp_rule(0, &m, &[&qa], &[]),
            Err(Error::InvalidArgument { arg: "qps", .. })
        ));
        t.set_root().unwrap();

        let rb = Bufs::new(hb, &pdb, 16);
        for i in 0..4 {
            rb.post(&mut qb, i);
        }
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();

        // Too short an inline header: refused before the device.
        // The emulated ConnectX-4 asks for the L2 headers inline.
        assert_eq!(qa.eth_min_inline(), ETH_L2_INLINE_HEADER_SIZE);
        {
            let f = udp4(MAC_B, 1, 2, b"x");
            let e = qa
                .post_send(
                    &SendWr::new(1, SendOp::Send)
                        .eth_headers(&f[..(qa.eth_min_inline() - 1) as usize])
                        .sgl(&[ma.sge(0, 8).unwrap()]),
                )
                .unwrap_err();
            assert!(matches!(e, Error::InvalidWorkRequest { .. }), "{e}");
        }

        let f = udp4(MAC_B, 1234, 5678, b"hello raw world, from side A");
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let wc = poll_one(&cqb);
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.wr_id, 0);
        assert_eq!(wc.byte_len as usize, f.len());
        assert_eq!(
            wc.qp_num, 0,
            "receive completions carry the (default) flow tag"
        );
        assert_eq!(rb.read(0, f.len()), f);
        // A frame for another MAC matches nothing: dropped.
        let f2 = udp4([0x02, 9, 9, 9, 9, 9], 1, 2, b"nobody's");
        send_frame(&mut qa, &cqa, &ma, &sa, &f2, SendFlags::NONE);
        poll_none(&cqb);

        // Drain to ERR: the posted receives come back flushed.
        let mut flushed = 0;
        qb.drain(std::time::Duration::from_secs(5), |w| {
            assert_eq!(w.status, WcStatus::WrFlushErr);
            flushed += 1;
        })
        .unwrap();
        assert_eq!(flushed, 3);
        assert_eq!(wq(eb, ObjKind::Rq, rqn.0).state, WQ_STATE_ERR);
        // Back to RESET and up again.
        qb.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        assert_eq!(wq(eb, ObjKind::Rq, rqn.0).state, WQ_STATE_RST);
        raw_to_rts(&mut qb);
        rb.post(&mut qb, 5);
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let wc = poll_one(&cqb);
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 5));
        assert_eq!(rb.read(5, f.len()), f);

        // The rule does not borrow qb (see the tests at the end for the
        // other order).
        drop(rule);
        drop(g);
        drop(t);
        qb.destroy().unwrap();
        qa.destroy().unwrap();
        assert_eq!(counts(ea), start_a);
        assert_eq!(counts(eb), start_b);
        assert_eq!(eb.firmware_pages(), pages_b);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn raw_qp_bad_input_gets_typed_errors() {
    let mut l = link();
    let h = l.open();
    {
        let Sides { pda, cqa, .. } = h.sides(16);
        let qp = |a: QpInitAttr<P>| Qp::create(&pda, &a);
        // No queue at all.
        let e = qp(raw_attr(&cqa, 0, 0)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "cap", .. }),
            "{e}"
        );
        // Create flags on an RC QP; unknown flags on a raw one.
        let e =
            qp(QpInitAttr::new(QpType::Rc, &cqa, &cqa)
                .create_flags(QpCreateFlags::CVLAN_STRIPPING))
            .unwrap_err();
        assert_create_flags_refused(&e);
        let e =
            qp(QpInitAttr::new(QpType::RawPacket, &cqa, &cqa).create_flags(QpCreateFlags(1 << 12)))
                .unwrap_err();
        assert_create_flags_refused(&e);
        // Operations a raw QP does not have.
        let mut q = qp(raw_attr(&cqa, 4, 4)).unwrap();
        raw_to_rts(&mut q);
        let buf = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let mr = Mr::register(&pda, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        let hdr = [0u8; 18];
        for op in [
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            SendOp::SendWithImm(1),
        ] {
            let e = q
                .post_send(
                    &SendWr::new(1, op)
                        .eth_headers(&hdr)
                        .sgl(&[mr.sge(0, 8).unwrap()]),
                )
                .unwrap_err();
            assert!(matches!(e, Error::InvalidWorkRequest { .. }), "{e}");
        }
        // Ethernet headers on an RC QP.
        let mut rc = qp(QpInitAttr::new(QpType::Rc, &cqa, &cqa)).unwrap();
        let _ = &mut rc;
        poll_none(&cqa);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn raw_qp_with_cqe_version_0_is_refused() {
    let mut l = link_with(EmuConfig::default().with_cqe_version(0));
    let h = l.open();
    {
        let Sides { pda, cqa, .. } = h.sides(16);
        let e = Qp::create(&pda, &raw_attr(&cqa, 4, 4)).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn raw_qp_on_an_infiniband_port_is_refused() {
    let mut l = link_with(EmuConfig {
        port_type: PortType::InfiniBand,
        ..EmuConfig::default()
    });
    let h = l.open();
    {
        let Sides { pda, cqa, .. } = h.sides(16);
        let e = Qp::create(&pda, &raw_attr(&cqa, 4, 4)).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("InfiniBand"), "{e}");
    }
    l.close(h);
    l.assert_clean();
}

/// The Ethernet FCS computed bit by bit (IEEE 802.3 CRC-32: reflected
/// polynomial 0xEDB88320, initial and final inversion), least significant
/// byte first on the wire.
fn fcs(f: &[u8]) -> [u8; 4] {
    let mut c = !0u32;
    for &b in f {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    (!c).to_le_bytes()
}

/// A raw receive on side B, its completion and the CQE's raw fields.
fn recv_rx(cq: &Cq<P>) -> (hca_driver::verbs::Completion, RxCqe) {
    let mut c = hca_driver::verbs::Completion::default();
    let mut rx = RxCqe::default();
    let t = Instant::now();
    while t.elapsed() < WAIT {
        if cq.poll_one_rx(&mut c, &mut rx).unwrap() {
            return (c, rx);
        }
        std::thread::yield_now();
    }
    panic!("no completion on {cq:?} in {WAIT:?}");
}

#[test]
fn receive_cqe_fields_checksum_vlan_stripping_connectx4() {
    cqe_fields(Personality::ConnectX4);
}

#[test]
fn receive_cqe_fields_checksum_vlan_stripping_scatter_fcs_connectx5() {
    cqe_fields(Personality::ConnectX5);
}

fn cqe_fields(personality: Personality) {
    let mut l = link_with(EmuConfig {
        personality,
        ..EmuConfig::default()
    });
    let h = l.open();
    {
        let (_, cb, pda, pdb, cqa, cqb) = h.sides(64).split();
        let dev = *cb.query_device();
        assert!(dev.has_raw_packet_cap(RAW_PACKET_CAP_CVLAN_STRIPPING | RAW_PACKET_CAP_IP_CSUM));
        // Room for the inline headers with an inserted tag.
        let mut qa = rts_qp(
            &pda,
            raw_attr(&cqa, 0, 0).cap(QpCap {
                max_inline_data: 64,
                ..raw_cap(16, 0)
            }),
        );
        // qs strips VLAN tags; qf keeps them and (where the device can)
        // the FCS; qn is plain.
        let new = |flags| rts_qp(&pdb, raw_attr(&cqb, 0, 16).create_flags(flags));
        let fcs_ok = dev.has_raw_packet_cap(RAW_PACKET_CAP_SCATTER_FCS);
        assert_eq!(fcs_ok, personality != Personality::ConnectX4);
        if !fcs_ok {
            let e = Qp::create(
                &pdb,
                &raw_attr(&cqb, 0, 16).create_flags(QpCreateFlags::SCATTER_FCS),
            )
            .unwrap_err();
            assert_create_flags_refused(&e);
        }
        let mut qs = new(QpCreateFlags::CVLAN_STRIPPING);
        let mut qf = new(if fcs_ok {
            QpCreateFlags::SCATTER_FCS
        } else {
            QpCreateFlags::NONE
        });
        let mut qn = new(QpCreateFlags::NONE);
        let hb = h.b();
        // UDP port 1 -> qs, 2 -> qf, 3 -> qn.
        let t = hb.create_flow_table(0, 2, None).unwrap();
        let spec = |p| {
            FlowMatch::from_specs(&[FlowSpec::Udp {
                src_port: Masked::default(),
                dst_port: Masked::exact(p, 0xffff),
            }])
            .unwrap()
        };
        let g = t.create_group(0, 2, &spec(1)).unwrap();
        let rules: Vec<_> = [&qs, &qf, &qn]
            .iter()
            .enumerate()
            .map(|(i, q)| {
                g.add_qp_rule(i as u32, &spec(i as u16 + 1), &[*q], &[])
                    .unwrap()
            })
            .collect();
        t.set_root().unwrap();
        let bufs: Vec<Bufs> = (0..3).map(|_| Bufs::new(hb, &pdb, 8)).collect();
        for (q, b) in [&mut qs, &mut qf, &mut qn].into_iter().zip(&bufs) {
            for i in 0..4 {
                b.post(q, i);
            }
        }
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();

        // 1. A tagged UDP frame, checksums inserted by the device
        //    (IP_CSUM), into the stripping QP: the tag leaves the data for
        //    the CQE, both checksums verify.
        let plain = udp4_frame(MAC_B, 7, 1, b"checksummed and tagged");
        let tci = 0x6000 | 100;
        let f = plain.clone().vlan(tci).build();
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::IP_CSUM);
        let (c, rx) = recv_rx(&cqb);
        let w = WorkCompletion::from(c);
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(w.wr_id, 0);
        let expect = plain.clone().checksums().build();
        assert_eq!(w.byte_len as usize, expect.len(), "the tag is stripped");
        assert_eq!(bufs[0].read(0, expect.len()), expect);
        assert!(rx.cvlan_present());
        assert_eq!((rx.vlan_tci(), rx.vlan_id(), rx.vlan_pcp()), (tci, 100, 3));
        assert_eq!(rx.l3_hdr_type(), L3HdrType::Ipv4);
        assert_eq!(rx.l4_hdr_type(), L4HdrType::Udp);
        assert!(rx.l3_ok() && rx.l4_ok() && rx.ip_csum_ok());
        assert!(w.wc_flags.has(WcFlags::IP_CSUM_OK), "{:?}", w.wc_flags);

        // 2. The same without IP_CSUM: zero checksums do not verify (a UDP
        //    checksum of 0 means none; the IPv4 header's does not).
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let (c, rx) = recv_rx(&cqb);
        assert!(!rx.l3_ok() && !rx.ip_csum_ok());
        assert!(!WorkCompletion::from(c).wc_flags.has(WcFlags::IP_CSUM_OK));
        // A corrupted UDP checksum: L3 fine, L4 not.
        let mut bad = udp4_frame(MAC_B, 7, 1, b"corrupted checksum")
            .checksums()
            .vlan(tci)
            .build();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        send_frame(&mut qa, &cqa, &ma, &sa, &bad, SendFlags::NONE);
        let (c, rx) = recv_rx(&cqb);
        assert!(rx.l3_ok() && !rx.l4_ok() && !rx.ip_csum_ok());
        assert!(!WorkCompletion::from(c).wc_flags.has(WcFlags::IP_CSUM_OK));

        // 3. Tagged into the QP that keeps tags (vsd 1): the frame as sent,
        //    no VLAN in the CQE, and its FCS after it with scatter FCS.
        let f = udp4_frame(
            MAC_B,
            7,
            2,
            b"kept with its tag and its frame check sequence",
        )
        .checksums()
        .vlan(tci)
        .build();
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let (c, rx) = recv_rx(&cqb);
        let w = WorkCompletion::from(c);
        assert!(!rx.cvlan_present());
        let mut want = f.clone();
        if fcs_ok {
            want.extend_from_slice(&fcs(&f));
        }
        assert_eq!(w.byte_len as usize, want.len());
        assert_eq!(bufs[1].read(0, want.len()), want);
        assert!(rx.ip_csum_ok());

        // 4. VLAN insertion on send (qa): an untagged frame goes out with
        //    the tag, which the stripping QP takes off again.
        let hdr = 18usize.max(usize::from(qa.eth_min_inline()));
        let u = udp4_frame(MAC_B, 7, 1, b"vlan inserted on send")
            .checksums()
            .build();
        sa.write(0, &u[hdr..]).unwrap();
        qa.post_send_vlan(
            &SendWr::new(9, SendOp::Send)
                .eth_headers(&u[..hdr])
                .sgl(&[ma.sge(0, (u.len() - hdr) as u32).unwrap()])
                .flags(SendFlags::SIGNALED),
            VlanInsert::cvlan(0x0123),
        )
        .unwrap();
        assert_eq!(poll_one(&cqa).status, WcStatus::Success);
        let (c, rx) = recv_rx(&cqb);
        assert_eq!(WorkCompletion::from(c).byte_len as usize, u.len());
        assert_eq!(WorkCompletion::from(c).wr_id, 3);
        assert_eq!(bufs[0].read(3, u.len()), u);
        assert!(rx.cvlan_present());
        assert_eq!(rx.vlan_tci(), 0x0123);
        // Not on the receive-only QPs' neighbours: an RC QP refuses it.
        let mut rc = Qp::create(&pda, &QpInitAttr::new(QpType::Rc, &cqa, &cqa)).unwrap();
        assert!(matches!(
            rc.post_send_vlan(&SendWr::new(1, SendOp::Send), VlanInsert::cvlan(1)),
            Err(Error::InvalidWorkRequest { .. })
        ));
        drop(rc);
        let _ = &mut qn;
        drop(rules);
        drop(g);
        drop(t);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn device_attr_raw_caps_follow_the_hca_caps() {
    for port_type in [PortType::Ethernet, PortType::InfiniBand] {
        let mut b = hca_tests::Bench::<P>::emulated(
            EmuConfig {
                port_type,
                ..EmuConfig::default()
            },
            Config::default(),
        );
        let hca = b.open();
        {
            let ctx = hca_driver::verbs::Context::open(&hca).unwrap();
            let d = ctx.query_device();
            let caps = hca.caps();
            // Read back by PRM name, the other way into the same caps.
            let eth = |n: &str| {
                caps.get(CAP_ETHERNET_OFFLOADS, n, CapMode::Current)
                    .unwrap_or(0)
                    == 1
            };
            let gen_ = |n: &str| caps.get(CAP_GENERAL, n, CapMode::Current).unwrap_or(0) == 1;
            let e = port_type == PortType::Ethernet && gen_("eth_net_offloads");
            eprintln!(
                "{port_type:?}: device_cap_flags {:#x} raw_packet_caps {:#x} (csum {} vlan {} fcs {} wqe_inline_mode {:?})",
                d.device_cap_flags,
                d.raw_packet_caps,
                eth("csum_cap"),
                eth("vlan_cap"),
                eth("scatter_fcs"),
                caps.get(CAP_ETHERNET_OFFLOADS, "wqe_inline_mode", CapMode::Current)
            );
            assert_eq!(d.has_device_cap(DEVICE_RAW_IP_CSUM), e && eth("csum_cap"));
            assert_eq!(
                d.has_raw_packet_cap(RAW_PACKET_CAP_IP_CSUM),
                e && eth("csum_cap")
            );
            assert_eq!(
                d.has_raw_packet_cap(RAW_PACKET_CAP_CVLAN_STRIPPING),
                e && eth("vlan_cap")
            );
            assert_eq!(
                d.has_device_cap(DEVICE_RAW_SCATTER_FCS),
                e && eth("scatter_fcs")
            );
            assert_eq!(
                d.has_raw_packet_cap(RAW_PACKET_CAP_SCATTER_FCS),
                e && eth("scatter_fcs")
            );
            assert_eq!(
                d.has_raw_packet_cap(RAW_PACKET_CAP_DELAY_DROP),
                port_type == PortType::Ethernet
                    && gen_("rq_delay_drop")
                    && gen_("general_notification_event")
            );
            assert_eq!(
                d.has_device_cap(DEVICE_MANAGED_FLOW_STEERING),
                port_type == PortType::Ethernet && gen_("nic_flow_table")
            );
            if port_type == PortType::Ethernet {
                // The recorded ConnectX-4 offers checksums and VLAN
                // stripping.
                assert!(
                    d.has_raw_packet_cap(RAW_PACKET_CAP_IP_CSUM | RAW_PACKET_CAP_CVLAN_STRIPPING)
                );
            } else {
                assert_eq!((d.device_cap_flags, d.raw_packet_caps), (0, 0));
            }
        }
        b.close(hca);
        b.assert_clean();
    }
}

/// A frame with `tag_byte` first in its 32-byte payload
/// ([`marked_frame`]).
fn frame(dmac: [u8; 6], smac: [u8; 6], vid: Option<u16>, l3: L3, l4: L4, tag_byte: u8) -> Vec<u8> {
    marked_frame(
        dmac,
        smac,
        vid,
        l3,
        l4,
        b"a payload of thirty-two bytes!!!",
        tag_byte,
    )
}

/// Completions polled from `cq` until `n` arrived (and a little after,
/// to see that no more come), as (QP index, slot, completion, CQE).
fn collect(cq: &Cq<P>, n: usize) -> Vec<(usize, usize, WorkCompletion, RxCqe)> {
    let mut got = Vec::new();
    let mut idle = 0;
    let t = Instant::now();
    while idle < 200 {
        assert!(
            t.elapsed() < WAIT,
            "{} of {n} completions on {cq:?} in {WAIT:?}",
            got.len()
        );
        let mut c = hca_driver::verbs::Completion::default();
        let mut rx = RxCqe::default();
        if cq.poll_one_rx(&mut c, &mut rx).unwrap() {
            let w = WorkCompletion::from(c);
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            got.push(((w.wr_id / 1000) as usize, (w.wr_id % 1000) as usize, w, rx));
            idle = 0;
        } else {
            idle += if got.len() >= n { 1 } else { 0 };
            std::thread::yield_now();
        }
    }
    assert_eq!(got.len(), n, "completions");
    got
}

#[test]
fn flow_rules_of_each_selector_kind_sniffer_miss_and_rss_into_raw_qps() {
    let mut l = link();
    let h = l.open();
    {
        let eb = l.emu_b();
        let Sides {
            pda, pdb, cqa, cqb, ..
        } = h.sides(256);
        let hb = h.b();
        let kinds = [ObjKind::Rq, ObjKind::Tir, ObjKind::Rqt, ObjKind::FlowEntry];
        let counts = || kinds.map(|k| eb.objects(k).len());
        let start = counts();
        let pages = eb.firmware_pages();

        let mut qa = rts_qp(&pda, raw_attr(&cqa, 64, 0));
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();
        // Side B: 0..8 one per selector kind, 8 the catch-all, 9 the
        // sniffer, 10..14 the RSS QPs; receive only.
        let mut qs: Vec<Qp<P>> = (0..14)
            .map(|_| rts_qp(&pdb, raw_attr(&cqb, 0, 64)))
            .collect();
        let bufs: Vec<Bufs> = (0..14).map(|_| Bufs::new(hb, &pdb, 64)).collect();
        for (i, (q, b)) in qs.iter_mut().zip(&bufs).enumerate() {
            for k in 0..64 {
                let sge = b.mr.sge(k * SLOT, SLOT as u32).unwrap();
                q.post_recv(&RecvWr {
                    wr_id: (i * 1000 + k) as u64,
                    sgl: &[sge],
                })
                .unwrap();
            }
        }
        let me = MAC_B;
        let peer = MAC_A;
        let mut specs = selector_specs().to_vec();
        specs.push(
            // The RSS rule: UDP to port 4000.
            FlowSpec::Udp {
                src_port: Masked::default(),
                dst_port: Masked::exact(4000, 0xffff),
            },
        );
        let matches = matches_of(&specs);
        // RSS: an RQ table over the RSS QPs' RQs, an indirect TIR hashing
        // IPv4 addresses and UDP ports.
        let td = hb.alloc_transport_domain().unwrap();
        let rss_rqs: Vec<_> = qs[10..14].iter().map(|q| q.rq_number().unwrap()).collect();
        let rqt = hb.create_rqt(&rss_rqs).unwrap();
        let conf = udp4_rss();
        let rss_tir = rqt.create_tir(&td, &conf).unwrap();

        // Level 1: the catch-all (default miss of level 0), copied to the
        // sniffer.
        let t1 = hb.create_flow_table(1, 2, None).unwrap();
        let all = FlowMatch::default();
        let g_all = t1.create_group(0, 0, &all).unwrap();
        let catch_all = g_all.add_qp_rule(0, &all, &[&qs[8], &qs[9]], &[]).unwrap();
        let t0 = hb.create_flow_table(0, 4, Some(&t1)).unwrap();
        let groups = one_entry_groups(&t0, &matches);
        // Every rule copies to the sniffer (QP 9) as well.
        let rules: Vec<_> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                if i < 8 {
                    g.add_qp_rule(i as u32, &matches[i], &[&qs[i], &qs[9]], &[])
                } else {
                    let rss: [&dyn TirDest; 1] = [&rss_tir];
                    g.add_qp_rule(i as u32, &matches[i], &[&qs[9]], &rss)
                }
                .unwrap()
            })
            .collect();
        t0.set_root().unwrap();

        let udp = |d| L4::Udp(1234, d);
        let cases: Vec<(Vec<u8>, usize)> = vec![
            (frame(MCAST, peer, None, L3::V4(V4B, V4B), udp(1), 0), 0),
            (frame(me, OTHER_SMAC, None, L3::V4(V4B, V4B), udp(1), 1), 1),
            (frame(me, peer, None, L3::Other(0x88b5), L4::None, 2), 2),
            (frame(me, peer, Some(100), L3::V4(V4B, V4B), udp(1), 3), 3),
            (frame(me, peer, None, L3::V4(V4B, V4A), udp(1), 4), 4),
            (frame(me, peer, None, L3::V6(V6A, V6B), udp(1), 5), 5),
            (
                frame(me, peer, None, L3::V4(V4B, V4B), L4::Tcp(5, 80), 6),
                6,
            ),
            (
                frame(me, peer, None, L3::V6(V6B, V6B), L4::Tcp(5, 80), 7),
                6,
            ),
            (frame(me, peer, None, L3::V4(V4B, V4B), udp(9000), 8), 7),
            // Rules 4 and 7 both match: the lower index (priority) wins.
            (frame(me, peer, None, L3::V4(V4B, V4A), udp(9000), 9), 4),
            // Nothing matches at level 0: the default miss to level 1.
            (frame(me, peer, None, L3::V4(V4B, V4B), udp(2), 10), 8),
            (frame(me, peer, Some(7), L3::Other(0x1234), L4::None, 11), 8),
        ];
        for (f, want) in &cases {
            send_frame(&mut qa, &cqa, &ma, &sa, f, SendFlags::NONE);
            let got = collect(&cqb, 2);
            let mut who: Vec<usize> = got.iter().map(|g| g.0).collect();
            who.sort_unstable();
            assert_eq!(who, vec![*want, 9], "frame {}", f[f.len() - 32]);
            for (q, slot, w, _) in &got {
                assert_eq!(w.byte_len as usize, f.len());
                assert_eq!(&bufs[*q].read(*slot, f.len()), f, "QP {q}");
            }
        }

        // RSS: UDP flows to port 4000 land in the RSS QP the Toeplitz
        // hash names (entry hash % 4 of the RQ table), and the CQE
        // carries the hash.
        let mut seen = [0u32; 4];
        for sport in 1000..1032u16 {
            // (To 10.2.2.2: rule 4 takes 10.1.1.1.)
            let f = frame(me, peer, None, L3::V4(V4A, V4B), L4::Udp(sport, 4000), 0x40);
            send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::IP_CSUM);
            let hash = udp4_rss_hash(V4A, V4B, sport, 4000);
            let want = 10 + (hash % 4) as usize;
            let got = collect(&cqb, 2);
            let (q, _, _, rx) = got.iter().find(|g| g.0 != 9).copied().unwrap();
            assert_eq!(q, want, "sport {sport}: hash {hash:#x}");
            assert_eq!(rx.rss_hash(), hash);
            assert_ne!(rx.rss_hash_type(), 0);
            assert!(rx.ip_csum_ok());
            seen[q - 10] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "spread {seen:?}");

        // Without the catch-all a frame matching nothing is dropped and
        // counted, and reaches no QP.
        catch_all.destroy().unwrap();
        let miss = eb.datapath().drops.steering_miss;
        send_frame(
            &mut qa,
            &cqa,
            &ma,
            &sa,
            &frame(me, peer, None, L3::V4(V4B, V4B), udp(3), 12),
            SendFlags::NONE,
        );
        // The receiving device works on its own thread: wait for its
        // count, then no completion may have come of the frame.
        let t = Instant::now();
        while eb.datapath().drops.steering_miss == miss {
            assert!(t.elapsed() < WAIT, "no steering miss counted in {WAIT:?}");
            std::thread::yield_now();
        }
        collect(&cqb, 0);
        assert_eq!(eb.datapath().drops.steering_miss, miss + 1);

        // Rules first (the firmware refuses to destroy a TIR a rule
        // names), then everything goes.
        drop(rules);
        drop(groups);
        drop(t0);
        drop(g_all);
        drop(t1);
        drop(rss_tir);
        drop(rqt);
        drop(td);
        for q in qs {
            q.destroy().unwrap();
        }
        qa.destroy().unwrap();
        assert_eq!(counts(), start);
        assert_eq!(eb.firmware_pages(), pages);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn a_device_without_checksum_offload_refuses_ip_csum_and_reports_no_verdict() {
    let mut l = link_with(EmuConfig {
        eth_csum_cap: false,
        ..EmuConfig::default()
    });
    let h = l.open();
    {
        let (ca, _, pda, pdb, cqa, cqb) = h.sides(16).split();
        let dev = ca.query_device();
        assert!(!dev.has_device_cap(DEVICE_RAW_IP_CSUM));
        assert!(!dev.has_raw_packet_cap(RAW_PACKET_CAP_IP_CSUM));
        let mut qa = rts_qp(&pda, raw_attr(&cqa, 4, 0));
        let mut qb = rts_qp(&pdb, raw_attr(&cqb, 0, 4));
        let hb = h.b();
        let t = hb.create_flow_table(0, 1, None).unwrap();
        let all = FlowMatch::default();
        let g = t.create_group(0, 0, &all).unwrap();
        let rule = g.add_qp_rule(0, &all, &[&qb], &[]).unwrap();
        t.set_root().unwrap();
        let rb = Bufs::new(hb, &pdb, 4);
        rb.post(&mut qb, 0);
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();
        let f = udp4_frame(MAC_B, 1, 2, b"checksums computed by the sender")
            .checksums()
            .build();
        // IBV_SEND_IP_CSUM: refused before the device, as rdma-core does.
        let e = qa
            .post_send(
                &SendWr::new(1, SendOp::Send)
                    .eth_headers(&f[..18])
                    .sgl(&[ma.sge(0, 8).unwrap()])
                    .flags(SendFlags::IP_CSUM),
            )
            .unwrap_err();
        assert!(matches!(e, Error::InvalidWorkRequest { .. }), "{e}");
        // Without it the frame goes; its good checksums earn no
        // IBV_WC_IP_CSUM_OK from a device that does not check them.
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let (c, _) = recv_rx(&cqb);
        let w = WorkCompletion::from(c);
        assert_eq!(w.status, WcStatus::Success);
        assert!(!w.wc_flags.has(WcFlags::IP_CSUM_OK));
        assert_eq!(rb.read(0, f.len()), f);
        drop(rule);
        drop(g);
        drop(t);
    }
    l.close(h);
    l.assert_clean();
}

/// The firmware objects a raw packet QP, its flow rules and its CQ and PD
/// are made of, on one emulated HCA.
const RAW_KINDS: [ObjKind; 9] = [
    ObjKind::Sq,
    ObjKind::Rq,
    ObjKind::Tis,
    ObjKind::Tir,
    ObjKind::TransportDomain,
    ObjKind::Cq,
    ObjKind::Pd,
    ObjKind::Mkey,
    ObjKind::FlowEntry,
];

fn raw_counts(e: &EmuHca) -> [usize; 9] {
    RAW_KINDS.map(|k| e.objects(k).len())
}

/// Commands the emulated firmware refused since the `from`th.
fn refused_since(e: &EmuHca, from: usize) -> Vec<String> {
    e.command_log()
        .iter()
        .skip(from)
        .filter(|c| c.status != 0 || c.delivery_status != 0)
        .map(|c| {
            format!(
                "{:#x} status {:#x} syndrome {:#x}",
                c.opcode, c.status, c.syndrome
            )
        })
        .collect()
}

#[test]
fn raw_qp_destroyed_before_its_flow_rules_keeps_its_receive_side_until_the_last_rule_goes() {
    let mut l = link();
    let h = l.open();
    {
        let (ea, eb) = (l.emu_a(), l.emu_b());
        let Sides { pda, cb, cqa, .. } = h.sides(64);
        let hb = h.b();
        let start = raw_counts(eb);
        let pages = eb.firmware_pages();
        let log_start = eb.command_log().len();

        // Side B: its own PD and receive CQ, a raw QP with both queues,
        // and two rules naming it (its MAC; a multicast address).
        let pdb = Arc::new(Pd::alloc(&cb).unwrap());
        let cqs = Arc::new(Cq::create(&cb, 16).unwrap());
        let cqr = Arc::new(Cq::create(&cb, 16).unwrap());
        let mut qb = rts_qp(
            &pdb,
            QpInitAttr::new(QpType::RawPacket, &cqs, &cqr).cap(raw_cap(4, 8)),
        );
        let rqn = qb.rq_number().unwrap();
        let t = hb.create_flow_table(0, 2, None).unwrap();
        let eth = |mac| {
            FlowMatch::from_specs(&[FlowSpec::Eth {
                dst_mac: Masked::exact(mac, [0xff; 6]),
                src_mac: Masked::default(),
                ether_type: Masked::default(),
                vlan_tag: Masked::default(),
            }])
            .unwrap()
        };
        let g = t.create_group(0, 1, &eth(MAC_B)).unwrap();
        let r0 = g.add_qp_rule(0, &eth(MAC_B), &[&qb], &[]).unwrap();
        let r1 = g.add_qp_rule(1, &eth(MCAST), &[&qb], &[]).unwrap();
        t.set_root().unwrap();
        assert_eq!(cb.pinned_receivers(), (1, 0));
        let rb = Bufs::new(hb, &pdb, 8);
        for i in 0..4 {
            rb.post(&mut qb, i);
        }

        // Side A's sender; a frame reaches qb.
        let mut qa = rts_qp(&pda, raw_attr(&cqa, 8, 0));
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();
        let f = udp4(MAC_B, 1, 2, b"before the QP goes");
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let wc = poll_one(&cqr);
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 0));

        // The QP goes first, three receives still posted: destroy
        // succeeds; the send side is gone, the receive side stays, its RQ
        // stopped.
        let with_qp = raw_counts(eb);
        qb.destroy().unwrap();
        assert_eq!(cb.pinned_receivers(), (1, 1));
        let now = raw_counts(eb);
        assert_eq!(now[0], start[0], "the SQ is destroyed");
        assert_eq!(now[2], start[2], "the TIS is destroyed");
        assert_eq!(now[1..2], with_qp[1..2], "the RQ stays");
        assert_eq!(
            now[3..5],
            with_qp[3..5],
            "the TIR and transport domain stay"
        );
        assert_eq!(eb.wq(ObjKind::Rq, rqn.0).unwrap().state, WQ_STATE_RST);
        // The user lets go of the CQs, the PD and the buffers: the receive
        // CQ and the PD live on (the RQ names them).
        drop(rb);
        drop((cqs, cqr, pdb));
        assert_eq!(raw_counts(eb)[5], start[5] + 1, "the receive CQ is kept");
        assert_eq!(raw_counts(eb)[6], start[6] + 1, "the PD is kept");
        // Frames the rules still steer to the stopped RQ are dropped.
        let before = eb.datapath().drops.raw_no_buffer;
        send_frame(&mut qa, &cqa, &ma, &sa, &f, SendFlags::NONE);
        let t0 = Instant::now();
        while eb.datapath().drops.raw_no_buffer == before && t0.elapsed() < WAIT {
            std::thread::yield_now();
        }
        assert_eq!(eb.datapath().drops.raw_no_buffer, before + 1);

        // One rule left: everything stays; the last one: all goes, in
        // mlx5_ib's order, and no command was refused.
        drop(r0);
        assert_eq!(cb.pinned_receivers(), (1, 1));
        assert_eq!(raw_counts(eb)[3], with_qp[3]);
        r1.destroy().unwrap();
        assert_eq!(cb.pinned_receivers(), (0, 0));
        drop(g);
        drop(t);
        assert_eq!(raw_counts(eb), start);
        assert_eq!(eb.firmware_pages(), pages);
        assert_eq!(refused_since(eb, log_start), Vec::<String>::new());
        qa.destroy().unwrap();
        drop(ma);
        assert!(ea.objects(ObjKind::Sq).is_empty());
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn raw_qp_its_flow_rule_its_cq_and_pd_drop_in_any_order_without_leaks() {
    let mut l = link();
    let h = l.open();
    {
        let eb = l.emu_b();
        let Sides { cb, .. } = h.sides(16);
        let hb = h.b();
        let t = hb.create_flow_table(0, 1, None).unwrap();
        let all = FlowMatch::default();
        let g = t.create_group(0, 0, &all).unwrap();
        t.set_root().unwrap();
        let start = raw_counts(eb);
        let pages = eb.firmware_pages();
        let log_start = eb.command_log().len();
        // Every order of the four: 0 the rule, 1 the QP, 2 the CQ, 3 the
        // PD (the QP destroyed explicitly in odd rounds, dropped in even
        // ones).
        let mut orders = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..4 {
                    for d in 0..4 {
                        let o = [a, b, c, d];
                        if (0..4).all(|x| o.contains(&x)) {
                            orders.push(o);
                        }
                    }
                }
            }
        }
        assert_eq!(orders.len(), 24);
        for (round, order) in orders.iter().enumerate() {
            let pd = Arc::new(Pd::alloc(&cb).unwrap());
            let cq = Arc::new(Cq::create(&cb, 16).unwrap());
            let mut qp = Some(rts_qp(&pd, raw_attr(&cq, 2, 4)));
            let rb = Bufs::new(hb, &pd, 4);
            rb.post(qp.as_mut().unwrap(), 0);
            let mut rule = Some(
                g.add_qp_rule(0, &all, &[qp.as_ref().unwrap()], &[])
                    .unwrap(),
            );
            drop(rb);
            let (mut cq, mut pd) = (Some(cq), Some(pd));
            for step in order {
                match step {
                    0 => drop(rule.take()),
                    1 => {
                        let q = qp.take().unwrap();
                        if round % 2 == 1 {
                            q.destroy().unwrap();
                        } else {
                            drop(q);
                        }
                    }
                    2 => drop(cq.take()),
                    _ => drop(pd.take()),
                }
            }
            assert_eq!(cb.pinned_receivers(), (0, 0), "order {order:?}");
            assert_eq!(raw_counts(eb), start, "order {order:?}");
            assert_eq!(eb.firmware_pages(), pages, "order {order:?}");
        }
        assert_eq!(refused_since(eb, log_start), Vec::<String>::new());
        drop(g);
        drop(t);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn raw_qp_with_block_self_mcast_lb_does_not_receive_its_own_multicast_frames() {
    let mut l = link();
    let h = l.open();
    {
        let Sides { ca, pda, .. } = h.sides(16);
        let cq = || Arc::new(Cq::create(&ca, 16).unwrap());
        let (sb, rb_cq, sp, rp_cq) = (cq(), cq(), cq(), cq());
        // Two raw QPs of one HCA, each with its own transport domain: one
        // blocking its own multicast loopback, one not.
        let attr = |s: &Arc<Cq<P>>, r: &Arc<Cq<P>>| {
            QpInitAttr::new(QpType::RawPacket, s, r).cap(raw_cap(4, 4))
        };
        let mut qblock = rts_qp(
            &pda,
            attr(&sb, &rb_cq).create_flags(QpCreateFlags::BLOCK_SELF_MCAST_LB),
        );
        let mut qplain = rts_qp(&pda, attr(&sp, &rp_cq));
        assert_eq!(qblock.create_flags(), QpCreateFlags::BLOCK_SELF_MCAST_LB);
        let bufs = [Bufs::new(&h.a, &pda, 4), Bufs::new(&h.a, &pda, 4)];
        for i in 0..4 {
            bufs[0].post(&mut qblock, i);
            bufs[1].post(&mut qplain, i);
        }
        // Side A's own steering: multicast and unicast to its MAC, to both.
        let t = h.a.create_flow_table(0, 1, None).unwrap();
        let all = FlowMatch::default();
        let g = t.create_group(0, 0, &all).unwrap();
        let rule = g.add_qp_rule(0, &all, &[&qblock, &qplain], &[]).unwrap();
        t.set_root().unwrap();
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();

        // qblock's multicast frame: looped back to qplain only (the local
        // copy is delivered before the send completes).
        let f = udp4(MCAST, 1, 2, b"multicast from the blocking QP");
        send_frame(&mut qblock, &sb, &ma, &sa, &f, SendFlags::NONE);
        let wc = poll_one(&rp_cq);
        assert_eq!(
            (wc.status, wc.byte_len as usize),
            (WcStatus::Success, f.len())
        );
        assert_eq!(bufs[1].read(wc.wr_id as usize, f.len()), f);
        poll_none(&rb_cq);

        // qplain's multicast frame: both get it, qplain its own too (no
        // flag), qblock as a frame of another transport domain.
        let f2 = udp4(MCAST, 3, 4, b"multicast from the plain QP");
        send_frame(&mut qplain, &sp, &ma, &sa, &f2, SendFlags::NONE);
        for (c, b) in [(&rb_cq, &bufs[0]), (&rp_cq, &bufs[1])] {
            let wc = poll_one(c);
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(b.read(wc.wr_id as usize, f2.len()), f2);
        }
        poll_none(&rb_cq);
        poll_none(&rp_cq);

        // Unicast frames are not blocked by the multicast bit: qblock's
        // frame to side A's own MAC reaches both.
        let mac = h.a.info().ports[0].mac.unwrap();
        let f3 = udp4(mac, 5, 6, b"unicast to the port's own address");
        send_frame(&mut qblock, &sb, &ma, &sa, &f3, SendFlags::NONE);
        for (c, b) in [(&rb_cq, &bufs[0]), (&rp_cq, &bufs[1])] {
            let wc = poll_one(c);
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(b.read(wc.wr_id as usize, f3.len()), f3);
        }
        drop(rule);
        drop(g);
        drop(t);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn add_qp_rule_bad_input_gets_typed_errors_and_leaks_nothing() {
    use hca_driver::verbs::{DefaultShare, MAX_PINNED_RECEIVERS};
    let mut l = link();
    let h = l.open();
    {
        let eb = l.emu_b();
        let Sides {
            pda,
            cqa,
            cb,
            pdb,
            cqb,
            ..
        } = h.sides(16);
        let hb = h.b();
        let start = raw_counts(eb);
        let t = hb.create_flow_table(0, 6, None).unwrap();
        let all = FlowMatch::default();
        let g = t.create_group(0, 63, &all).unwrap();
        // A QP of another HCA; no QP; nine destinations.
        let qa = Qp::create(&pda, &raw_attr(&cqa, 0, 2)).unwrap();
        let e = g.add_qp_rule(0, &all, &[&qa], &[]).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "qps", .. }),
            "{e}"
        );
        let e = g
            .add_qp_rule::<DefaultShare>(0, &all, &[], &[])
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "qps", .. }),
            "{e}"
        );
        let qs: Vec<Qp<P>> = (0..=MAX_PINNED_RECEIVERS)
            .map(|_| Qp::create(&pdb, &raw_attr(&cqb, 0, 2)).unwrap())
            .collect();
        let nine: Vec<&Qp<P>> = qs.iter().take(9).collect();
        let e = g.add_qp_rule(0, &all, &nine, &[]).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "qps", .. }),
            "{e}"
        );
        assert_eq!(cb.pinned_receivers(), (0, 0));
        // One context pins at most MAX_PINNED_RECEIVERS receive sides: the
        // next rule is refused, and nothing of it stays.
        let mut rules = Vec::new();
        for (i, q) in qs.iter().enumerate().take(MAX_PINNED_RECEIVERS) {
            rules.push(g.add_qp_rule(i as u32, &all, &[q], &[]).unwrap());
        }
        let entries = eb.objects(ObjKind::FlowEntry).len();
        let e = g
            .add_qp_rule(63, &all, &[&qs[MAX_PINNED_RECEIVERS]], &[])
            .unwrap_err();
        assert!(
            matches!(e, Error::CapacityExceeded { capacity, .. } if capacity == MAX_PINNED_RECEIVERS),
            "{e}"
        );
        assert_eq!(eb.objects(ObjKind::FlowEntry).len(), entries);
        assert_eq!(cb.pinned_receivers(), (MAX_PINNED_RECEIVERS, 0));
        // A refused entry index unpins what it pinned.
        let e = g.add_qp_rule(0, &all, &[&qs[0]], &[]).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "index", .. }),
            "{e}"
        );
        assert_eq!(cb.pinned_receivers(), (MAX_PINNED_RECEIVERS, 0));
        // The QPs go first, then the rules.
        drop(qs);
        assert_eq!(
            cb.pinned_receivers(),
            (MAX_PINNED_RECEIVERS, MAX_PINNED_RECEIVERS)
        );
        drop(rules);
        assert_eq!(cb.pinned_receivers(), (0, 0));
        drop(g);
        drop(t);
        drop(qa);
        assert_eq!(raw_counts(eb), start);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn vport_disable_mc_local_lb_stops_the_local_multicast_copy_not_the_wire() {
    use firmware_cmds::vport::{
        ModifyNicVportContextIn, ModifyNicVportFieldSelect, NicVportContext,
    };
    let mut l = link();
    let h = l.open();
    {
        let Sides {
            ca, pda, pdb, cqb, ..
        } = h.sides(16);
        let (scq, rcq) = (
            Arc::new(Cq::create(&ca, 16).unwrap()),
            Arc::new(Cq::create(&ca, 16).unwrap()),
        );
        let mut qa = rts_qp(
            &pda,
            QpInitAttr::new(QpType::RawPacket, &scq, &rcq).cap(raw_cap(4, 4)),
        );
        let mut qb = rts_qp(&pdb, raw_attr(&cqb, 0, 4));
        let (ba, bb) = (Bufs::new(&h.a, &pda, 4), Bufs::new(h.b(), &pdb, 4));
        for i in 0..4 {
            ba.post(&mut qa, i);
            bb.post(&mut qb, i);
        }
        let all = FlowMatch::default();
        let (ta, tb) = (
            h.a.create_flow_table(0, 1, None).unwrap(),
            h.b().create_flow_table(0, 1, None).unwrap(),
        );
        let (ga, gb) = (
            ta.create_group(0, 0, &all).unwrap(),
            tb.create_group(0, 0, &all).unwrap(),
        );
        let ra = ga.add_qp_rule(0, &all, &[&qa], &[]).unwrap();
        let rb = gb.add_qp_rule(0, &all, &[&qb], &[]).unwrap();
        ta.set_root().unwrap();
        tb.set_root().unwrap();
        let sa = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&pda, &sa, AccessFlags::LOCAL_WRITE).unwrap();
        let f = udp4(MCAST, 1, 2, b"to the group");

        // Local loopback on (after boot): the sender's own copy and the
        // wire's.
        assert!(
            !h.a.nic_vport_context()
                .unwrap()
                .get(NicVportContext::disable_mc_local_lb)
        );
        send_frame(&mut qa, &scq, &ma, &sa, &f, SendFlags::NONE);
        assert_eq!(poll_one(&rcq).status, WcStatus::Success);
        assert_eq!(poll_one(&cqb).status, WcStatus::Success);

        // disable_mc_local_lb: the wire's copy only.
        let sel = ModifyNicVportFieldSelect::new()
            .with(ModifyNicVportFieldSelect::disable_mc_local_lb, true)
            .unwrap();
        let vc = NicVportContext::new()
            .with(NicVportContext::disable_mc_local_lb, true)
            .unwrap();
        let m = ModifyNicVportContextIn::new()
            .with(ModifyNicVportContextIn::field_select, sel)
            .unwrap()
            .with(ModifyNicVportContextIn::nic_vport_context, vc)
            .unwrap();
        // SAFETY: MODIFY_NIC_VPORT_CONTEXT names no memory and changes no
        // object the driver keeps books on.
        let raw = unsafe { h.a.raw() };
        raw.exec(&m).unwrap();
        assert!(
            h.a.nic_vport_context()
                .unwrap()
                .get(NicVportContext::disable_mc_local_lb)
        );
        send_frame(&mut qa, &scq, &ma, &sa, &f, SendFlags::NONE);
        assert_eq!(poll_one(&cqb).status, WcStatus::Success);
        poll_none(&rcq);
        drop((ra, rb));
    }
    l.close(h);
    l.assert_clean();
}
