//! The verbs API's control side on one HCA: device and port attributes,
//! GID and P_Key tables, object sizes as libibverbs rounds them, address
//! handles, and the attribute masks of every QP transition (a wrong mask
//! is refused naming the missing and the forbidden attributes, before
//! anything reaches the device). On a link: every invalid work request is
//! refused before the device sees it.

use hca_driver::verbs::{
    AccessFlags, AhAttr, AtomicByteOrder, AtomicCap, Completion, Cq, DEFAULT_GID_INDEX,
    DEFAULT_PKEY, Gid, GidEntry, MrMode, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, RoceVersion, SendFlags, SendOp, SendWr, Sge, SrqInitAttr, WcOpcode, WcStatus,
    WrError,
};
use hca_driver::verbs::{Ah, Context, DmaBuf, Mr, Srq};
use hca_driver::{Error, IbMtu, LinkLayer};
use hca_tests::verbs::{
    Endpoint, RcParams, connect, path_to, poll_n, poll_ok, post_recv_sge, qp_cap,
};
use hca_tests::{Bench, Link, TestPlatform};
use platform::Platform;
use std::sync::Arc;

/// `r` is refused with [`Error::InvalidAttribute`] naming `attr` and the
/// refused `value`.
#[track_caller]
fn refused_attr<T>(r: Result<T, Error>, attr: &str, value: u64) {
    match r {
        Err(Error::InvalidAttribute {
            attr: a, value: v, ..
        }) if a == attr && v == value => {}
        Err(e) => panic!("expected attribute {attr} = {value:#x} to be refused, got: {e:?}"),
        Ok(_) => panic!("expected attribute {attr} = {value:#x} to be refused, got Ok"),
    }
}

/// `r` is refused with [`Error::InvalidArgument`] naming `arg`.
#[track_caller]
fn refused_arg<T>(r: Result<T, Error>, arg: &str) {
    match r {
        Err(Error::InvalidArgument { arg: a, .. }) if a == arg => {}
        Err(e) => panic!("expected argument `{arg}` to be refused, got: {e:?}"),
        Ok(_) => panic!("expected argument `{arg}` to be refused, got Ok"),
    }
}

fn device_and_port_attributes<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let d = *ctx.query_device();
        let info = hca.info();
        assert_eq!(d.fw_ver, info.fw_version);
        assert_eq!(d.vendor_part_id, u32::from(info.pci.device_id));
        assert_eq!(d.vendor_id, info.ieee_vendor_id);
        assert_eq!(d.node_guid, info.node_guid);
        assert_eq!(d.phys_port_cnt, hca.caps().num_ports());
        assert!(d.max_sge <= d.max_send_sge && d.max_sge <= d.max_recv_sge);
        assert_eq!(d.max_srq_sge, d.max_recv_sge - 1);
        assert!(d.max_qp_wr.is_power_of_two() && d.max_qp.is_power_of_two());
        assert_eq!(
            d.max_res_rd_atom,
            u64::from(d.max_qp_rd_atom) * u64::from(d.max_qp)
        );
        assert_eq!(d.max_mr_size, u64::MAX);
        assert_eq!(d.page_size_cap & 0xfff, 0);
        if b.emu().is_some() {
            // What ibv_devinfo -v says about a ConnectX-4 with this
            // firmware (big-endian atomics: IBV_ATOMIC_NONE).
            assert_eq!(d.fw_ver.unwrap().to_string(), "14.12.1220");
            assert_eq!((d.vendor_id, d.vendor_part_id), (0x02c9, 4115));
            assert_eq!((d.max_qp, d.max_qp_wr), (131_072, 32_768));
            assert_eq!(
                (d.max_sge, d.max_send_sge, d.max_recv_sge, d.max_sge_rd),
                (30, 30, 32, 30)
            );
            assert_eq!((d.max_cq, d.max_cqe), (16_777_216, 4_194_303));
            assert_eq!((d.max_mr, d.max_pd), (16_777_216, 16_777_216));
            assert_eq!((d.max_qp_rd_atom, d.max_qp_init_rd_atom), (16, 16));
            assert_eq!(
                (d.max_srq, d.max_srq_wr, d.max_srq_sge),
                (8_388_608, 32_767, 31)
            );
            assert_eq!(d.max_pkeys, 128);
            assert_eq!(d.page_size_cap, !0xfff);
            assert_eq!(d.max_msg_sz, 1 << 30);
            assert_eq!(d.cqe_version, 1);
            assert!(d.atomic_ops);
            assert_eq!(
                (d.atomic_cap, d.atomic_byte_order),
                (AtomicCap::None, AtomicByteOrder::BigEndian)
            );
        }
        for p in info.ports.iter() {
            let a = ctx.query_port(p.port).unwrap();
            assert_eq!(a.port_num, p.port);
            assert_eq!(a.link_layer, hca.caps().link_layer());
            assert!(a.max_mtu >= a.active_mtu);
            assert_eq!(a.max_msg_sz, d.max_msg_sz);
            if a.link_layer == LinkLayer::Ethernet {
                assert_eq!(a.pkey_tbl_len, 1);
                assert_eq!(ctx.query_pkey(p.port, 0).unwrap(), DEFAULT_PKEY);
                assert!(matches!(
                    ctx.query_pkey(p.port, 1),
                    Err(Error::InvalidAttribute {
                        attr: "pkey_index",
                        ..
                    })
                ));
                assert!(a.gid_tbl_len > 1);
                // GIDs 0 and 1: the link-local GID of the port's MAC, RoCE
                // v1 and RoCE v2, as Linux lays out a port's default GIDs.
                let mac = a.mac.expect("an Ethernet port's MAC");
                let g0 = ctx.query_gid(p.port, 0).unwrap();
                assert_eq!(g0, Gid::link_local_from_mac(mac));
                assert_eq!(g0.mac(), Some(mac));
                assert_eq!(DEFAULT_GID_INDEX, 1);
                for (index, version) in [(0u16, RoceVersion::V1), (1, RoceVersion::V2)] {
                    let e = ctx.query_gid_entry(p.port, index).unwrap().unwrap();
                    assert_eq!(
                        (e.gid, e.mac, e.version, e.ipv6, e.vlan),
                        (g0, mac, version, true, None),
                        "GID {index}"
                    );
                }
                // A RoCE v2 IPv4 GID at index 3, then cleared.
                let v4 = GidEntry {
                    gid: Gid::from_ipv4([192, 168, 7, 1]),
                    mac,
                    vlan: Some(5),
                    version: RoceVersion::V2,
                    ipv6: false,
                };
                ctx.set_gid(p.port, 3, &v4).unwrap();
                assert_eq!(ctx.query_gid_entry(p.port, 3).unwrap(), Some(v4));
                assert_eq!(
                    ctx.query_gid(p.port, 3).unwrap().to_string(),
                    "0000:0000:0000:0000:0000:ffff:c0a8:0701"
                );
                ctx.clear_gid(p.port, 3).unwrap();
                assert_eq!(ctx.query_gid_entry(p.port, 3).unwrap(), None);
                if b.emu().is_some() {
                    // No cable: the port is down.
                    assert_eq!(a.state, hca_driver::PortState::Down);
                    assert_eq!((a.active_width, a.active_speed, a.speed_mbps), (0, 0, None));
                    assert_eq!(a.gid_tbl_len, 256);
                    assert_eq!(a.active_mtu, Some(IbMtu::Mtu1024));
                }
            } else {
                assert!(a.pkey_tbl_len >= 1);
            }
        }
        refused_attr(ctx.query_port(0), "port_num", 0);
        let beyond = hca.caps().num_ports() + 1;
        refused_attr(ctx.query_port(beyond), "port_num", u64::from(beyond));
    }
    b.close(hca);
}

fn object_sizes_and_refusals<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let d = *ctx.query_device();
        // CQs round like libibverbs: 2^n - 1 entries.
        for (ask, got) in [(1, 1), (100, 127), (255, 255), (256, 511)] {
            assert_eq!(
                Arc::new(Cq::create(&ctx, ask).unwrap()).cqe(),
                got,
                "cqe {ask}"
            );
        }
        assert!(matches!(
            Cq::create(&ctx, 0),
            Err(Error::InvalidAttribute { attr: "cqe", .. })
        ));
        refused_attr(
            Cq::create(&ctx, d.max_cqe + 1),
            "cqe",
            u64::from(d.max_cqe + 1),
        );
        let cq = Arc::new(Cq::create(&ctx, 64).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        assert!(hca.dma_usage().queues > 0);
        // QP caps: what rdma-core's mlx5 provider gives for the same
        // request, worked out by hand from its sizing rules (not from
        // verbs_core::QpGeometry, which the driver itself calls):
        // mlx5_calc_send_wqe: the RC overhead with the default operations
        // (LOCAL_INV/BIND_MW: ctrl 16 + UMR ctrl 48 + mkey 64 + 64) is 192;
        // inline 192 + align16(4 + 100) = 304 > 192 + 3 * 16, so the WQE
        // is align64(304) = 320 bytes and max_inline_data = 320 - 192 - 4
        // = 124; mlx5_calc_sq_size: wq_size = roundup_pow2(10 * 320) =
        // 4096, max_post = 4096 / 320 = 12; mlx5_calc_rq_size: the receive
        // WQE is roundup_pow2(3 * 16) = 64 bytes, wq_size =
        // roundup_pow2(20) * 64, max_post = 32, max_gs = 64 / 16 = 4.
        let c = qp_cap(10, 20, 3, 100);
        let qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq).cap(c)).unwrap();
        let got = qp.cap();
        assert_eq!(
            (
                got.max_send_wr,
                got.max_recv_wr,
                got.max_recv_sge,
                got.max_inline_data
            ),
            (12, 32, 4, 124),
            "{got:?}"
        );
        assert_eq!(qp.state(), QpState::Reset);
        for (bad, attr) in [
            (
                QpCap {
                    max_send_wr: d.max_qp_wr + 1,
                    ..c
                },
                "cap.max_send_wr",
            ),
            (
                QpCap {
                    max_send_sge: d.max_send_sge + 1,
                    ..c
                },
                "cap.max_send_sge",
            ),
            (
                QpCap {
                    max_recv_sge: d.max_recv_sge + 1,
                    ..c
                },
                "cap.max_recv_sge",
            ),
        ] {
            match Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq).cap(bad)) {
                Err(Error::InvalidAttribute { attr: a, .. }) => assert_eq!(a, attr),
                r => panic!("{attr}: {:?}", r.map(|q| q.number())),
            }
        }
        // Raw packet QPs exist (tests/raw_qp.rs), on an Ethernet port.
        let raw = Qp::create(&pd, &QpInitAttr::new(QpType::RawPacket, &cq, &cq)).unwrap();
        assert_eq!(raw.qp_type(), QpType::RawPacket);
        raw.destroy().unwrap();
        // An SRQ of 100 holds 127.
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(100, 2)).unwrap());
        // A WQE of 16 + 2 * 16 bytes rounds to 64: room for 3 SGEs.
        assert_eq!(
            (srq.attr().max_wr, srq.attr().max_sge, srq.attr().srq_limit),
            (127, 3, 0)
        );
        refused_attr(Srq::create(&pd, &SrqInitAttr::new(0, 1)), "max_wr", 0);
        refused_attr(srq.arm_limit(128), "srq_limit", 128);
        // Memory regions.
        let buf = Arc::new(DmaBuf::alloc(&hca, 10_000).unwrap());
        assert!(hca.dma_usage().buffers >= 10_000);
        let mr = Mr::register(
            &pd,
            &buf,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
        assert_eq!(mr.lkey().0, mr.rkey().0);
        assert_eq!((mr.addr(), mr.len()), (buf.iova(), 10_000));
        refused_arg(mr.sge(9_990, 11), "offset");
        assert_eq!(mr.sge(9_990, 10).unwrap().addr, buf.iova() + 9_990);
        let pa = Mr::register_range(&pd, &buf, 100, 5000, AccessFlags::NONE, MrMode::Pa).unwrap();
        assert_eq!(pa.addr(), buf.iova() + 100);
        assert_eq!(pd.mr_count(), 2);
        assert!(matches!(
            Mr::register(&pd, &buf, AccessFlags::REMOTE_WRITE),
            Err(Error::InvalidAttribute { attr: "access", .. })
        ));
        assert!(matches!(
            Mr::register(
                &pd,
                &buf,
                AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ
            ),
            Err(Error::InvalidAttribute { attr: "access", .. })
        ));
        refused_arg(
            Mr::register_range(&pd, &buf, 9_000, 1_001, AccessFlags::NONE, MrMode::Mtt),
            "len",
        );
        refused_arg(
            Mr::register_range(&pd, &buf, 0, 0, AccessFlags::NONE, MrMode::Mtt),
            "len",
        );
        pa.destroy().unwrap();
        assert_eq!(pd.mr_count(), 1);
        // Buffers copy in and out, bounds checked.
        buf.write(9_996, b"tail").unwrap();
        refused_arg(buf.write(9_997, b"tail"), "offset");
        let mut t = [0u8; 4];
        buf.read(9_996, &mut t).unwrap();
        assert_eq!(&t, b"tail");
        // Address handles.
        let port = 1;
        if ctx.query_port(port).unwrap().link_layer == LinkLayer::Ethernet {
            assert!(matches!(
                Ah::create(&pd, &AhAttr::new()).map(|_| ()),
                Err(Error::InvalidAttribute {
                    attr: "port_num",
                    ..
                })
            ));
            assert!(matches!(
                Ah::create(&pd, &AhAttr::ib(port, 3)).map(|_| ()),
                Err(Error::AddressHandle(_))
            ));
            let v4 = AhAttr::roce(port, Gid::from_ipv4([10, 0, 0, 2]), DEFAULT_GID_INDEX);
            assert!(matches!(
                Ah::create(&pd, &v4).map(|_| ()),
                Err(Error::InvalidAttribute {
                    attr: "ah_attr.dmac",
                    ..
                })
            ));
            let ah = Ah::create(&pd, &v4.dmac([2, 0, 0, 0, 0, 2])).unwrap();
            assert_eq!(&ah.av().0[20..26], &[2, 0, 0, 0, 0, 2]);
            let mut empty = AhAttr::roce(port, Gid::link_local_from_mac([2, 0, 0, 0, 0, 2]), 77);
            assert!(matches!(
                Ah::create(&pd, &empty).map(|_| ()),
                Err(Error::InvalidAttribute {
                    attr: "ah_attr.grh.sgid_index",
                    ..
                })
            ));
            empty.grh.as_mut().unwrap().sgid_index = 0;
            let ll = Ah::create(&pd, &empty).unwrap();
            assert_eq!(
                &ll.av().0[20..26],
                &[2, 0, 0, 0, 0, 2],
                "the MAC of a link-local GID"
            );
        }
        drop(qp);
        Srq::try_destroy(srq).unwrap();
        mr.destroy().unwrap();
        drop(buf);
        assert_eq!(hca.dma_usage().buffers, 0);
    }
    assert_eq!(hca.dma_usage().queues, 0);
    b.close(hca);
}

/// The transitions a failed modify must not have reached the device with.
fn transition_commands<P: TestPlatform>(b: &Bench<P>) -> Option<usize> {
    b.emu().map(|e| {
        e.command_log()
            .iter()
            .filter(|c| (0x502..=0x50e).contains(&c.opcode) && c.opcode != 0x50b)
            .count()
    })
}

#[track_caller]
fn refused<P: TestPlatform>(b: &Bench<P>, qp: &mut Qp<P>, a: &QpAttr) -> Error {
    let before_state = qp.state();
    let before = transition_commands(b);
    let e = qp.modify(a).expect_err("the modify must be refused");
    assert_eq!(
        transition_commands(b),
        before,
        "{e}: nothing reached the device"
    );
    assert_eq!(qp.query().unwrap().qp_state, before_state, "{e}");
    e
}

fn wrong_attribute_masks<P: TestPlatform>(b: &mut Bench<P>) {
    use QpAttrMask as M;
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let new = |t| Qp::create(&pd, &QpInitAttr::new(t, &cq, &cq)).unwrap();
        let mut rc = new(QpType::Rc);
        let init = QpAttr::new()
            .state(QpState::Init)
            .port(1)
            .pkey_index(0)
            .access(AccessFlags::REMOTE_WRITE);

        // RESET -> INIT without P_Key index and access flags.
        let e = refused(b, &mut rc, &QpAttr::new().state(QpState::Init).port(1));
        match e {
            Error::QpAttrMask {
                missing,
                forbidden,
                from,
                to,
                ..
            } => {
                assert_eq!(missing, M::PKEY_INDEX | M::ACCESS_FLAGS);
                assert!(forbidden.is_empty());
                assert_eq!((from, to), (QpState::Reset, QpState::Init));
            }
            e => panic!("{e}"),
        }
        assert_eq!(
            refused(b, &mut rc, &QpAttr::new().state(QpState::Init).port(1)).to_string(),
            "RC QP RESET -> INIT: missing required IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX"
        );
        // A Q_Key on an RC QP: not allowed.
        assert_eq!(
            refused(b, &mut rc, &init.qkey(5)).to_string(),
            "RC QP RESET -> INIT: not allowed IBV_QP_QKEY"
        );
        assert_eq!(
            refused(b, &mut rc, &QpAttr::new().state(QpState::Init).qkey(5)).to_string(),
            "RC QP RESET -> INIT: missing required IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT; not allowed IBV_QP_QKEY"
        );
        // No such transition.
        assert_eq!(
            refused(b, &mut rc, &QpAttr::new().state(QpState::Rts)).to_string(),
            "RC QP: no transition RESET -> RTS"
        );
        // Values.
        assert!(matches!(
            refused(b, &mut rc, &init.port(9)),
            Error::InvalidAttribute {
                attr: "port_num",
                ..
            }
        ));
        if hca.caps().link_layer() == LinkLayer::Ethernet {
            assert!(matches!(
                refused(b, &mut rc, &init.pkey_index(1)),
                Error::InvalidAttribute {
                    attr: "pkey_index",
                    ..
                }
            ));
        }
        rc.modify(&init).unwrap();
        assert_eq!(rc.state(), QpState::Init);
        // INIT -> INIT with optional attributes (INIT2INIT_QP).
        let before = b.emu().map(|e| e.command_log().len());
        rc.modify(&QpAttr::new().access(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE))
            .unwrap();
        if let (Some(emu), Some(n)) = (b.emu(), before) {
            assert!(
                emu.command_log()[n..].iter().any(|c| c.opcode == 0x50e),
                "INIT2INIT_QP"
            );
        }
        assert_eq!(
            rc.query().unwrap().qp_access_flags,
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE
        );
        // INIT -> RTR: the RC requirements.
        let me = Endpoint::of(&ctx, 1, rc.number().0, 0, hca_driver::Rkey(0));
        let path = path_to(&ctx, 1, &me, 64);
        let rtr = QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(IbMtu::Mtu1024)
            .dest_qp_num(me.qpn)
            .rq_psn(0)
            .ah(path);
        match refused(b, &mut rc, &rtr.sq_psn(3)) {
            Error::QpAttrMask {
                missing, forbidden, ..
            } => {
                assert_eq!(missing, M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER);
                assert_eq!(forbidden, M::SQ_PSN);
            }
            e => panic!("{e}"),
        }
        let rtr = rtr.max_dest_rd_atomic(4).min_rnr_timer(12);
        assert!(matches!(
            refused(b, &mut rc, &rtr.dest_qp_num(1 << 24)),
            Error::InvalidAttribute {
                attr: "dest_qp_num",
                ..
            }
        ));
        assert!(matches!(
            refused(b, &mut rc, &rtr.max_dest_rd_atomic(200)),
            Error::InvalidAttribute {
                attr: "max_dest_rd_atomic",
                ..
            }
        ));
        assert!(matches!(
            refused(b, &mut rc, &rtr.rq_psn(1 << 24)),
            Error::InvalidAttribute { attr: "rq_psn", .. }
        ));
        rc.modify(&rtr).unwrap();
        // RTR -> RTS.
        let rts = QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(0)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(4);
        match refused(b, &mut rc, &QpAttr::new().state(QpState::Rts).sq_psn(0)) {
            Error::QpAttrMask { missing, .. } => {
                assert_eq!(
                    missing,
                    M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
                )
            }
            e => panic!("{e}"),
        }
        assert!(matches!(
            refused(b, &mut rc, &rts.timeout(32)),
            Error::InvalidAttribute {
                attr: "timeout",
                ..
            }
        ));
        assert!(matches!(
            refused(b, &mut rc, &rts.retry_cnt(8)),
            Error::InvalidAttribute {
                attr: "retry_cnt",
                ..
            }
        ));
        rc.modify(&rts).unwrap();
        let q = rc.query().unwrap();
        assert_eq!(
            (q.qp_state, q.sq_psn, q.timeout, q.retry_cnt, q.rnr_retry),
            (QpState::Rts, 0, 14, 7, 7)
        );
        assert_eq!(
            (q.max_rd_atomic, q.max_dest_rd_atomic, q.min_rnr_timer),
            (4, 4, 12)
        );
        assert_eq!(
            (q.dest_qp_num, q.path_mtu, q.port_num),
            (me.qpn, IbMtu::Mtu1024, 1)
        );
        assert_eq!(q.ah_attr.grh.map(|g| g.dgid), path.grh.map(|g| g.dgid));
        // RTS -> RTS: optional attributes only.
        rc.modify(&QpAttr::new().min_rnr_timer(3).cur_state(QpState::Rts))
            .unwrap();
        assert_eq!(rc.query().unwrap().min_rnr_timer, 3);
        assert_eq!(
            refused(b, &mut rc, &QpAttr::new().state(QpState::Rts).ah(path)).to_string(),
            "RC QP RTS -> RTS: not allowed IBV_QP_AV"
        );
        // SQD: mlx5 has no RTS2SQD.
        assert!(matches!(
            refused(b, &mut rc, &QpAttr::new().state(QpState::Sqd)),
            Error::Unsupported(_)
        ));
        // Alternate paths are not supported.
        let mut alt = QpAttr::new();
        alt.mask = M::ALT_PATH;
        assert!(matches!(refused(b, &mut rc, &alt), Error::Unsupported(_)));
        // To ERR, and from ERR only to RESET or ERR.
        rc.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        assert_eq!(rc.query().unwrap().qp_state, QpState::Err);
        assert_eq!(
            refused(b, &mut rc, &QpAttr::new().state(QpState::Rts)).to_string(),
            "RC QP: no transition ERR -> RTS"
        );
        rc.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        assert_eq!(rc.query().unwrap().qp_state, QpState::Reset);

        // UD: a Q_Key instead of access flags; nothing required for RTR.
        let mut ud = new(QpType::Ud);
        match refused(b, &mut ud, &init) {
            Error::QpAttrMask {
                missing, forbidden, ..
            } => {
                assert_eq!((missing, forbidden), (M::QKEY, M::ACCESS_FLAGS));
            }
            e => panic!("{e}"),
        }
        ud.modify(
            &QpAttr::new()
                .state(QpState::Init)
                .port(1)
                .pkey_index(0)
                .qkey(0x11),
        )
        .unwrap();
        ud.modify(&QpAttr::new().state(QpState::Rtr)).unwrap();
        assert_eq!(
            refused(b, &mut ud, &QpAttr::new().state(QpState::Rts)).to_string(),
            "UD QP RTR -> RTS: missing required IBV_QP_SQ_PSN"
        );
        ud.modify(&QpAttr::new().state(QpState::Rts).sq_psn(7).qkey(0x22))
            .unwrap();
        let q = ud.query().unwrap();
        assert_eq!((q.qp_state, q.qkey, q.sq_psn), (QpState::Rts, 0x22, 7));

        // UC: no RDMA READ depth, no RNR timer.
        let mut uc = new(QpType::Uc);
        uc.modify(&init).unwrap();
        let uc_rtr = QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(IbMtu::Mtu1024)
            .dest_qp_num(me.qpn)
            .rq_psn(0)
            .ah(path);
        assert_eq!(
            refused(b, &mut uc, &uc_rtr.max_dest_rd_atomic(1).min_rnr_timer(1)).to_string(),
            "UC QP INIT -> RTR: not allowed IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC"
        );
        uc.modify(&uc_rtr).unwrap();
        uc.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0))
            .unwrap();
        assert_eq!(uc.query().unwrap().qp_state, QpState::Rts);
    }
    b.close(hca);
}

hca_tests::scenarios!(
    device_and_port_attributes,
    object_sizes_and_refusals,
    wrong_attribute_masks
);

/// Counts the send WQEs the emulated device executed.
fn wqes<P: TestPlatform>(l: &Link<P>) -> Option<u64> {
    l.a.emu().map(|e| e.datapath().wqes)
}

#[track_caller]
fn rejected(r: hca_driver::Result<()>) -> (usize, WrError) {
    match r {
        Err(Error::InvalidWorkRequest { index, reason }) => (index, reason),
        r => panic!("expected a rejected work request, got {r:?}"),
    }
}

fn qp_on<P: Platform + 'static>(pd: &Arc<Pd<P>>, cq: &Arc<Cq<P>>, t: QpType) -> Qp<P> {
    Qp::create(pd, &QpInitAttr::new(t, cq, cq).cap(qp_cap(8, 8, 2, 32))).unwrap()
}

fn invalid_work_requests_are_rejected<P: TestPlatform>(l: &mut Link<P>) {
    use verbs_core::Error as Dp;
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
        let other_pd = Arc::new(Pd::alloc(&ca).unwrap());
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 64).unwrap()),
            Arc::new(Cq::create(&cb, 64).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap()),
        );
        let ma =
            Mr::register_range(&pda, &ba, 0, 4096, AccessFlags::LOCAL_WRITE, MrMode::Mtt).unwrap();
        let ro = Mr::register_range(&pda, &ba, 4096, 2048, AccessFlags::NONE, MrMode::Mtt).unwrap();
        let foreign = Mr::register_range(
            &other_pd,
            &ba,
            6144,
            2048,
            AccessFlags::LOCAL_WRITE,
            MrMode::Mtt,
        )
        .unwrap();
        let mb = Mr::register(
            &pdb,
            &bb,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let mut qa = qp_on(&pda, &cqa, QpType::Rc);
        let mut qb = qp_on(&pdb, &cqb, QpType::Rc);
        let good = ma.sge(0, 8).unwrap();
        let w0 = wqes(l);

        // RESET: neither queue takes work requests; INIT: receives only.
        let (i, r) = rejected(qa.post_send(&SendWr::new(1, SendOp::Send).sgl(&[good])));
        assert_eq!(
            (i, r),
            (
                0,
                WrError::WrongState {
                    queue: "send queue",
                    state: QpState::Reset
                }
            )
        );
        let (_, r) = rejected(qa.post_recv(&RecvWr {
            wr_id: 1,
            sgl: &[good],
        }));
        assert_eq!(
            r,
            WrError::WrongState {
                queue: "receive queue",
                state: QpState::Reset
            }
        );
        let ea = Endpoint::of(&ca, pa, qa.number().0, 0, hca_driver::Rkey(0));
        let eb = Endpoint::of(&cb, pb, qb.number().0, mb.addr(), mb.rkey());
        let p = RcParams {
            rnr_retry: 7,
            ..RcParams::default()
        };
        hca_tests::verbs::to_init(&mut qa, pa, p.access);
        let (_, r) = rejected(qa.post_send(&SendWr::new(1, SendOp::Send).sgl(&[good])));
        assert_eq!(
            r,
            WrError::WrongState {
                queue: "send queue",
                state: QpState::Init
            }
        );
        assert_eq!(
            r.to_string(),
            "the send queue takes no work requests in state INIT"
        );
        // The one-SGE path and a batch check the state too.
        for _ in 0..2 {
            let (_, r) =
                rejected(qa.post_rdma_write(1, SendFlags::SIGNALED, 0, hca_driver::Rkey(0), good));
            assert_eq!(
                r,
                WrError::WrongState {
                    queue: "send queue",
                    state: QpState::Init
                }
            );
        }
        assert!(matches!(
            qa.batch(),
            Err(Error::InvalidWorkRequest {
                index: 0,
                reason: WrError::WrongState { .. }
            })
        ));
        hca_tests::verbs::to_rtr(&mut qa, path_to(&ca, pa, &eb, 64), eb.qpn, &p);
        hca_tests::verbs::to_rts(&mut qa, &p);
        connect(&cb, &mut qb, pb, &ea, &p);

        // Keys: unknown, of another PD, outside the region, without local
        // write where the device writes.
        let mut unknown = good;
        unknown.lkey ^= 0x0300_0000;
        let (_, r) = rejected(qa.post_send(&SendWr::new(1, SendOp::Send).sgl(&[good, unknown])));
        assert_eq!(
            r,
            WrError::UnknownLkey {
                sge: 1,
                lkey: unknown.lkey
            }
        );
        let (_, r) = rejected(
            qa.post_send(&SendWr::new(1, SendOp::Send).sgl(&[foreign.sge(0, 8).unwrap()])),
        );
        assert_eq!(
            r,
            WrError::UnknownLkey {
                sge: 0,
                lkey: foreign.lkey().0
            }
        );
        let mut long = good;
        long.length = 4097;
        let (_, r) = rejected(qa.post_send(&SendWr::new(1, SendOp::Send).sgl(&[long])));
        assert!(
            matches!(
                r,
                WrError::OutOfRange {
                    sge: 0,
                    length: 4097,
                    ..
                }
            ),
            "{r}"
        );
        // The one-SGE paths (a single post and a batch) try the QP's cached
        // region first: an SGE of a cached key past the region's end, one
        // byte below its start, or reaching into the next region is still
        // refused (each is tried twice: the first caches the region).
        let mut below = good;
        below.addr -= 1;
        let mut across = good;
        across.addr += 4096 - 4;
        let out_of_range = |bad: Sge| WrError::OutOfRange {
            sge: 0,
            addr: bad.addr,
            length: bad.length,
            lkey: bad.lkey,
        };
        for bad in [long, below, across, long] {
            for _ in 0..2 {
                let (i, r) =
                    rejected(qa.post_rdma_write(1, SendFlags::SIGNALED, eb.addr, eb.rkey, bad));
                assert_eq!((i, r), (0, out_of_range(bad)), "{bad:?}");
            }
        }
        let mut b = qa.batch().unwrap();
        for bad in [long, below, across] {
            for _ in 0..2 {
                let (i, r) =
                    rejected(b.post_rdma_write(1, SendFlags::SIGNALED, eb.addr, eb.rkey, bad));
                assert_eq!((i, r), (0, out_of_range(bad)), "{bad:?}");
            }
        }
        assert!(b.is_empty());
        b.ring();
        let ro_sge = [ro.sge(0, 8).unwrap()];
        let read_into_ro = SendWr::new(
            1,
            SendOp::RdmaRead {
                remote_addr: eb.addr,
                rkey: eb.rkey.0,
            },
        )
        .sgl(&ro_sge);
        let (_, r) = rejected(qa.post_send(&read_into_ro));
        assert_eq!(
            r,
            WrError::Access {
                sge: 0,
                lkey: ro.lkey().0,
                needs: AccessFlags::LOCAL_WRITE
            }
        );
        assert!(
            r.to_string().contains("lacks IBV_ACCESS_LOCAL_WRITE"),
            "{r}"
        );
        let (_, r) = rejected(qa.post_recv(&RecvWr {
            wr_id: 1,
            sgl: &[ro.sge(0, 8).unwrap()],
        }));
        assert!(matches!(r, WrError::Access { .. }));
        let (_, r) = rejected(qa.post_rdma_read(
            1,
            SendFlags::SIGNALED,
            eb.addr,
            eb.rkey,
            ro.sge(0, 8).unwrap(),
        ));
        assert!(matches!(r, WrError::Access { .. }));
        // A SEND from a read-only region is fine (local read is always
        // allowed) -- posted further down.
        // The data path's own refusals.
        let (_, r) = rejected(qa.post_send(&SendWr::new(1, SendOp::Send).sgl(&[good, good, good])));
        assert_eq!(r, WrError::DataPath(Dp::TooManySges { got: 3, max: 2 }));
        let big = vec![0u8; qa.cap().max_inline_data as usize + 1];
        let (_, r) = rejected(qa.post_send(&SendWr::new(1, SendOp::Send).inline(&big)));
        assert!(
            matches!(r, WrError::DataPath(Dp::InlineTooLong { .. })),
            "{r}"
        );
        let (_, r) = rejected(
            qa.post_send(
                &SendWr::new(
                    1,
                    SendOp::AtomicFetchAdd {
                        remote_addr: eb.addr + 4,
                        rkey: eb.rkey.0,
                        add: 1,
                    },
                )
                .sgl(&[good]),
            ),
        );
        assert_eq!(r, WrError::DataPath(Dp::AtomicMisaligned(eb.addr + 4)));
        let e = qa
            .post_send(&SendWr::new(1, SendOp::Send).sgl(&[unknown]))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "work request 0 rejected: SGE 0: lkey {:#x} is no memory region of the QP's PD",
                unknown.lkey
            )
        );
        assert_eq!(wqes(l), w0, "nothing rejected reached the device");

        // A list: the requests before the bad one are posted and rung.
        for i in 0..8 {
            post_recv_sge(&mut qb, i, mb.sge(64 * i as usize, 64).unwrap());
        }
        let r = qa.post_send_list(&[
            SendWr::new(10, SendOp::Send)
                .sgl(&[good])
                .flags(SendFlags::SIGNALED),
            SendWr::new(11, SendOp::Send)
                .sgl(&[ro.sge(0, 8).unwrap()])
                .flags(SendFlags::SIGNALED),
            SendWr::new(12, SendOp::Send)
                .sgl(&[unknown])
                .flags(SendFlags::SIGNALED),
            SendWr::new(13, SendOp::Send)
                .sgl(&[good])
                .flags(SendFlags::SIGNALED),
        ]);
        assert_eq!(rejected(r).0, 2);
        let w = poll_n(&cqa, 2);
        assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![10, 11]);
        poll_n(&cqb, 2);

        // A deregistered region's key is unknown at once.
        let gone =
            Mr::register_range(&pda, &ba, 2048, 64, AccessFlags::LOCAL_WRITE, MrMode::Mtt).unwrap();
        let s = gone.sge(0, 8).unwrap();
        qa.post_send(
            &SendWr::new(20, SendOp::Send)
                .sgl(&[s])
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        // Cq::poll_one writes the caller's Completion: false (and `c`
        // untouched) until the completion is there, then true with it.
        let mut c = Completion::default();
        let mut polls = 0u32;
        while !cqa.poll_one(&mut c).expect("poll_one") {
            assert_eq!(c.wr_id(), 0, "an empty poll wrote the completion");
            polls += 1;
            assert!(polls < 1_000_000, "no completion for wr 20");
            cqa.context().hca().platform().relax();
        }
        assert_eq!(
            (c.wr_id(), c.status(), c.opcode()),
            (20, WcStatus::Success, WcOpcode::Send)
        );
        assert_eq!(c.qp_num(), qa.number().0);
        assert!(!cqa.poll_one(&mut c).expect("poll_one"), "one completion");
        assert_eq!(c.wr_id(), 20, "an empty poll leaves `c` untouched");
        poll_ok(&cqb);
        gone.destroy().unwrap();
        let (_, r) = rejected(qa.post_send(&SendWr::new(21, SendOp::Send).sgl(&[s])));
        assert_eq!(
            r,
            WrError::UnknownLkey {
                sge: 0,
                lkey: s.lkey
            }
        );

        // A full send queue: max_send_wr outstanding until polled.
        let n = qa.cap().max_send_wr;
        let w1 = wqes(l);
        for i in 0..n {
            qa.post_rdma_write(
                100 + u64::from(i),
                SendFlags::SIGNALED,
                eb.addr,
                eb.rkey,
                good,
            )
            .unwrap();
        }
        let (_, r) = rejected(qa.post_rdma_write(999, SendFlags::SIGNALED, eb.addr, eb.rkey, good));
        assert!(matches!(r, WrError::DataPath(Dp::QueueFull { .. })), "{r}");
        poll_n(&cqa, n as usize);
        if let (Some(a), Some(b)) = (w1, wqes(l)) {
            assert_eq!(
                b - a,
                u64::from(n),
                "the refused one never reached the device"
            );
        }
        qa.post_rdma_write(1000, SendFlags::SIGNALED, eb.addr, eb.rkey, good)
            .unwrap();
        poll_ok(&cqa);
        // A full receive queue.
        let m = qa.cap().max_recv_wr;
        for i in 0..m {
            post_recv_sge(&mut qa, u64::from(i), ma.sge(64 * i as usize, 64).unwrap());
        }
        let (_, r) = rejected(qa.post_recv(&RecvWr {
            wr_id: 99,
            sgl: &[good],
        }));
        assert!(matches!(r, WrError::DataPath(Dp::QueueFull { .. })), "{r}");

        // A UD QP: a send needs a destination.
        let mut ud = qp_on(&pda, &cqa, QpType::Ud);
        hca_tests::verbs::ud_ready(&mut ud, pa, 1);
        let (_, r) = rejected(ud.post_send(&SendWr::new(1, SendOp::Send).sgl(&[good])));
        assert!(matches!(r, WrError::DataPath(Dp::UdDestination(_))), "{r}");
        let (_, r) = rejected(ud.post_send(&SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
        )));
        assert!(
            matches!(r, WrError::DataPath(Dp::WrongOpcodeForQpType { .. })),
            "{r}"
        );
    }
    l.close(h);
}

mod link {
    use super::*;
    hca_tests::link_scenarios!(invalid_work_requests_are_rejected);
}
