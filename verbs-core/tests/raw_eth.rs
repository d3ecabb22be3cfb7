//! Raw Ethernet data path: VLAN insertion in the Ethernet segment and the
//! raw receive CQE fields (header types, checksum OK, VLAN, RSS hash, flow
//! tag), from the PRM / Linux `mlx5e` / rdma-core `cq.c` facts.

mod common;

use common::*;
use verbs_core::*;

const SGE: [Sge; 1] = [Sge {
    addr: 0x1000,
    length: 64,
    lkey: 0x77,
}];

fn raw_cfg(min_inline: u16, recv: bool) -> QpConfig {
    let caps = caps(8, if recv { 8 } else { 0 }, 2, u32::from(recv));
    QpConfig {
        sq_sig_all: true,
        eth_min_inline: min_inline,
        ..qp_cfg(QpType::RawPacket, 0x99, &caps)
    }
}

#[test]
fn vlan_inserted_into_inline_headers_after_the_macs() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&raw_cfg(18, false), &uar, 0, 0);
    env.fill_rings(SENTINEL_Q);
    let hdr: Vec<u8> = (0x10..0x10 + 18).collect();
    let sq = env.qp.sq().unwrap();
    sq.post_send_vlan(
        &SendWr::new(1, SendOp::Send).sgl(&SGE).eth_headers(&hdr),
        VlanInsert::cvlan(0x6064),
    )
    .unwrap();
    let w = env.sq_slot(0);
    // ds = 1 ctrl + 3 eth (14 + 22 bytes) + 1 data.
    assert_eq!(w[4..8], [0, 0, 0x99, 5]);
    assert_eq!(w[16..30], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 22]);
    let mut want = hdr[..12].to_vec();
    want.extend_from_slice(&[0x81, 0x00, 0x60, 0x64]);
    want.extend_from_slice(&hdr[12..]);
    assert_eq!(w[30..52], want[..]);
    // The rest of the third unit is padding (not written), then the data
    // segment.
    assert!(w[52..64].iter().all(|&b| b == SENTINEL_Q));
    let w1 = env.sq_slot(1);
    assert_eq!(w1[0..8], [0, 0, 0, 64, 0, 0, 0, 0x77]);
    env.reclaim();
}

#[test]
fn vlan_inserted_by_the_device_without_inline_headers() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&raw_cfg(0, false), &uar, 0, 0);
    env.fill_rings(SENTINEL_Q);
    let sq = env.qp.sq().unwrap();
    sq.post_send_vlan(
        &SendWr::new(1, SendOp::Send)
            .sgl(&SGE)
            .flags(SendFlags::IP_CSUM),
        VlanInsert {
            tci: 0x0123,
            svlan: true,
        },
    )
    .unwrap();
    let w = env.sq_slot(0);
    assert_eq!(w[4..8], [0, 0, 0x99, 3]);
    // insert.type = INSERT_VLAN | SVLAN, insert.vlan_tci.
    assert_eq!(
        w[16..32],
        [
            0, 0, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x01, 0x01, 0x23
        ]
    );
    assert_eq!(w[32..36], [0, 0, 0, 64]);
    env.reclaim();
}

#[test]
fn vlan_insertion_refused_where_it_cannot_go() {
    let uar = UarPage::new();
    let mut raw = make_qp_cfg(&raw_cfg(0, false), &uar, 0, 0);
    let hdr = [0u8; 13];
    let sq = raw.qp.sq().unwrap();
    assert_eq!(
        sq.post_send_vlan(
            &SendWr::new(1, SendOp::Send).sgl(&SGE).eth_headers(&hdr),
            VlanInsert::cvlan(1)
        ),
        Err(Error::EthSegment(
            "VLAN insertion into inline headers shorter than an Ethernet header (14 bytes)"
        ))
    );
    assert_eq!(
        sq.post_send_vlan(&SendWr::new(1, SendOp::Nop), VlanInsert::cvlan(1)),
        Err(Error::EthSegment("VLAN insertion on a non-raw QP or a NOP"))
    );
    assert_eq!(sq.cur_post(), 0);
    raw.reclaim();
    // With min inline L2 (18 bytes), no headers is too short even with a
    // tag to insert.
    let mut l2 = make_qp_cfg(&raw_cfg(18, false), &uar, 0, 0);
    assert_eq!(
        l2.qp.sq().unwrap().post_send_vlan(
            &SendWr::new(1, SendOp::Send).sgl(&SGE),
            VlanInsert::cvlan(1)
        ),
        Err(Error::EthSegment(
            "inline headers shorter than the queue's minimum"
        ))
    );
    l2.reclaim();
    let mut rc = make_qp("rc_qp", &uar, 0, 0);
    assert_eq!(
        rc.qp.sq().unwrap().post_send_vlan(
            &SendWr::new(1, SendOp::Send).sgl(&SGE),
            VlanInsert::cvlan(1)
        ),
        Err(Error::EthSegment("VLAN insertion on a non-raw QP or a NOP"))
    );
    rc.reclaim();
}

/// A raw receive CQE on user index 0 for receive WQE `counter`.
fn raw_recv_cqe(counter: u16, flow_tag: u32, ext: u8, types: u8) -> [u8; 64] {
    let mut c = CqeImage::new(2, 0)
        .qpn(0, flow_tag)
        .uidx(0)
        .counter(counter)
        .byte_cnt(60)
        .0;
    c[0x0c..0x10].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    c[0x10] = 0x2c;
    c[0x1c] = ext;
    c[0x1d] = types;
    c[0x1e..0x20].copy_from_slice(&0xa00bu16.to_be_bytes());
    // The timestamp: distinct high and low words, counter in the low byte.
    let ts = 0x0123_4567_89ab_cd00u64 | u64::from(counter);
    c[0x30..0x38].copy_from_slice(&ts.to_be_bytes());
    c
}

#[test]
fn raw_receive_cqes_carry_flow_tag_csum_vlan_hash_and_timestamp() {
    let uar = UarPage::new();
    let mut qp = make_qp_cfg(&raw_cfg(18, true), &uar, 0, 0);
    let mut cq = make_cq(&uar, 8, 0);
    for i in 0..4 {
        qp.qp
            .rq()
            .unwrap()
            .post_recv(&RecvWr {
                wr_id: 0x100 + i,
                sgl: &SGE,
            })
            .unwrap();
    }
    let h = qp.qp.completions(false, true, None).unwrap();
    assert!(h.is_raw() && h.rx_csum());
    let table = cq_table::<4>([(0, h)]);
    // 0: IPv4 UDP, L3+L4 OK, VLAN, flow tag 0xabc (not the QPN).
    cq.write_cqe(0, &raw_recv_cqe(0, 0xabc, 0x07, 0x29));
    // 1: IPv6 TCP, OK bits set: no IP_CSUM_OK (IPv4 only).
    cq.write_cqe(1, &raw_recv_cqe(1, 0x99, 0x06, 0x14));
    // 2: IPv4 with L4 not OK.
    cq.write_cqe(2, &raw_recv_cqe(2, 0, 0x03, 0x28));
    let (mut c, mut rx) = (Completion::default(), RxCqe::default());
    assert!(cq.cq().poll_one_rx(&table, &mut c, &mut rx).unwrap());
    assert_eq!(c.wr_id(), 0x100);
    assert_eq!(
        c.qp_num(),
        0xabc,
        "rdma-core reports sop_drop_qpn & 0xffffff"
    );
    assert_eq!(c.wc_flags(), WcFlags(WcFlags::IP_CSUM_OK));
    assert_eq!(rx.flow_tag(), 0xabc);
    assert_eq!(rx.l3_hdr_type(), L3HdrType::Ipv4);
    assert_eq!(rx.l4_hdr_type(), L4HdrType::Udp);
    assert!(rx.cvlan_present() && rx.l2_ok() && rx.ip_csum_ok());
    assert_eq!(
        (rx.vlan_tci(), rx.vlan_id(), rx.vlan_pcp()),
        (0xa00b, 0x00b, 5)
    );
    assert_eq!((rx.rss_hash(), rx.rss_hash_type()), (0xdead_beef, 0x2c));
    assert_eq!(
        rx.timestamp(),
        0x0123_4567_89ab_cd00,
        "CQE bytes 0x30..0x38"
    );
    // The plain poll gives the same completions (IP_CSUM_OK included).
    let mut wc = [Completion::default(); 4];
    assert_eq!(cq.cq().poll(&table, &mut wc).unwrap(), 2);
    assert_eq!(wc[0].wc_flags(), WcFlags(0));
    assert_eq!(wc[1].wc_flags(), WcFlags(0));
    assert_eq!((wc[0].wr_id(), wc[1].wr_id()), (0x101, 0x102));
    assert!(!cq.cq().poll_one_rx(&table, &mut c, &mut rx).unwrap());
    drop(table);
    qp.reclaim();
}

#[test]
fn rx_csum_off_reports_no_csum_ok_and_non_raw_qpn_still_checked() {
    let uar = UarPage::new();
    let mut qp = make_qp_cfg(&raw_cfg(18, true), &uar, 0, 0);
    let mut cq = make_cq(&uar, 8, 0);
    qp.qp
        .rq()
        .unwrap()
        .post_recv(&RecvWr {
            wr_id: 5,
            sgl: &SGE,
        })
        .unwrap();
    let mut h = qp.qp.completions(false, true, None).unwrap();
    h.set_rx_csum(false);
    let table = cq_table::<4>([(0, h)]);
    cq.write_cqe(0, &raw_recv_cqe(0, 0xabc, 0x07, 0x28));
    let mut c = Completion::default();
    assert!(cq.cq().poll_one(&table, &mut c).unwrap());
    assert_eq!((c.wr_id(), c.wc_flags()), (5, WcFlags(0)));
    drop(table);
    qp.reclaim();

    // An RC QP's receive CQE must name its QPN.
    let mut rc = make_qp("rc_qp", &uar, 0, 0);
    rc.qp
        .rq()
        .unwrap()
        .post_recv(&RecvWr {
            wr_id: 6,
            sgl: &SGE,
        })
        .unwrap();
    let h = rc.qp.completions(false, true, None).unwrap();
    assert!(!h.is_raw() && !h.rx_csum());
    let table = cq_table::<8>([(0, h)]);
    cq.write_cqe(1, &raw_recv_cqe(0, 0xabc, 0x07, 0x28));
    let (mut c, mut rx) = (Completion::default(), RxCqe::default());
    assert!(matches!(
        cq.cq().poll_one_rx(&table, &mut c, &mut rx),
        Err(Error::CqeQpnMismatch {
            got: 0xabc,
            expected: 0x123,
            ..
        })
    ));
    drop(table);
    rc.reclaim();
}

#[test]
fn vlan_tag_in_long_inline_headers_wraps_with_them() {
    let uar = UarPage::new();
    let cfg = raw_cfg(18, false);
    let last = cfg.geometry.sq.unwrap().wqe_cnt - 1;
    let mut env = make_qp_cfg(&cfg, &uar, last, 0);
    env.fill_rings(SENTINEL_Q);
    // 60 header bytes (Ethernet, IPv4, TCP with options) + the tag: 64
    // inline bytes, units 1..6 of a WQE that starts in the last WQEBB.
    let hdr: Vec<u8> = (0..60).collect();
    let sq = env.qp.sq().unwrap();
    sq.post_send_vlan(
        &SendWr::new(1, SendOp::Send).sgl(&SGE).eth_headers(&hdr),
        VlanInsert::cvlan(0x0fff),
    )
    .unwrap();
    assert_eq!(sq.cur_post(), last + 2);
    let mut w = env.sq_slot(last as usize);
    w.extend(env.sq_slot(0));
    // ds = 1 + 5 (14 + 64 bytes) + 1.
    assert_eq!(w[4..8], [0, 0, 0x99, 7]);
    assert_eq!(w[28..30], [0, 64]);
    let mut inl = hdr[..12].to_vec();
    inl.extend_from_slice(&[0x81, 0x00, 0x0f, 0xff]);
    inl.extend_from_slice(&hdr[12..]);
    assert_eq!(w[30..94], inl[..]);
    assert!(w[94..96].iter().all(|&b| b == SENTINEL_Q));
    assert_eq!(
        w[96..112],
        [0, 0, 0, 64, 0, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0x10, 0]
    );
    env.reclaim();
}

#[test]
fn ip_csum_refused_where_the_device_does_not_offer_it() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&raw_cfg(0, false), &uar, 0, 0);
    env.fill_rings(SENTINEL_Q);
    let sq = env.qp.sq().unwrap();
    sq.set_ip_csum_offload(false);
    let err = Error::EthSegment(
        "checksum offload (IBV_SEND_IP_CSUM) not supported by the device or port",
    );
    let wr = SendWr::new(1, SendOp::Send)
        .sgl(&SGE)
        .flags(SendFlags::IP_CSUM);
    assert_eq!(sq.post_send(&wr), Err(err));
    // The one-SGE entry point says the same in its compact form.
    let e = sq
        .post_send_sge(1, SendOp::Send, SendFlags::IP_CSUM, SGE[0])
        .unwrap_err();
    assert_eq!(e.kind(), SendErrorKind::EthCsumUnsupported);
    assert_eq!(Error::from(e), err);
    assert_eq!(sq.post_send_vlan(&wr, VlanInsert::cvlan(1)), Err(err));
    assert_eq!(sq.cur_post(), 0);
    assert!(env.sq_slot(0).iter().all(|&b| b == SENTINEL_Q));
    // Without the flag, and with the offload back on, it posts.
    let sq = env.qp.sq().unwrap();
    sq.post_send(&SendWr::new(2, SendOp::Send).sgl(&SGE))
        .unwrap();
    sq.set_ip_csum_offload(true);
    sq.post_send(&wr).unwrap();
    assert_eq!(sq.cur_post(), 2);
    env.reclaim();
}

#[test]
fn tso_puts_mss_and_the_header_in_the_ethernet_segment() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&raw_cfg(18, false), &uar, 0, 0);
    env.fill_rings(SENTINEL_Q);
    let hdr: Vec<u8> = (0..54).collect();
    let wr = SendWr::new(3, SendOp::Send)
        .sgl(&SGE)
        .eth_headers(&hdr)
        .flags(SendFlags::IP_CSUM);
    let sq = env.qp.sq().unwrap();
    let refused = |e| Err(Error::EthSegment(e));
    // No TSO limits set: refused.
    assert_eq!(
        sq.post_send_tso(&wr, 1448),
        refused("TSO header shorter than 14 bytes or longer than the queue's largest")
    );
    sq.set_tso(64, 64);
    assert_eq!(
        sq.post_send_tso(&wr.eth_headers(&hdr[..13]), 1448),
        refused("TSO header shorter than 14 bytes or longer than the queue's largest")
    );
    assert_eq!(
        sq.post_send_tso(
            &SendWr::new(3, SendOp::Send).inline(&hdr).eth_headers(&hdr),
            1448
        ),
        refused("TSO with an inline payload")
    );
    assert_eq!(
        sq.post_send_tso(&SendWr::new(3, SendOp::Nop), 1448),
        refused("TSO on a non-raw QP or for an operation other than SEND")
    );
    sq.set_tso(64, 63);
    assert_eq!(
        sq.post_send_tso(&wr, 1448),
        refused("TSO payload longer than the device's largest")
    );
    sq.set_tso(64, 64);
    assert_eq!(sq.cur_post(), 0);
    sq.post_send_tso(&wr, 1448).unwrap();
    let w = env.sq_slot(0);
    // TSO opcode 0x0e; ds = 1 + 5 (14 + 54 bytes) + 1.
    assert_eq!(w[0..8], [0, 0, 0, 0x0e, 0, 0, 0x99, 7]);
    assert_eq!(
        w[16..30],
        [0, 0, 0, 0, 0xc0, 0, 0x05, 0xa8, 0, 0, 0, 0, 0, 54]
    );
    let mut all = w.clone();
    all.extend(env.sq_slot(1));
    assert_eq!(all[30..84], hdr[..]);
    assert_eq!(all[96..100], [0, 0, 0, 64]);
    env.reclaim();
    let mut rc = make_qp("rc_qp", &uar, 0, 0);
    assert_eq!(
        rc.qp.sq().unwrap().post_send_tso(&wr, 1448),
        refused("TSO on a non-raw QP or for an operation other than SEND")
    );
    rc.reclaim();
}
