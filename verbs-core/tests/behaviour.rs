//! Wrap-around, queue full, every rejection path, SRQ free list, raw
//! Ethernet segments, arming, corrupt CQEs, and a poster/poller pair on two
//! threads.

mod common;

use common::*;
use platform::host::HostBlock;
use verbs_core::*;

const SGE: [Sge; 1] = [Sge {
    addr: 0x1000,
    length: 64,
    lkey: 0x11,
}];

fn write(id: u64) -> SendWr<'static> {
    SendWr::new(
        id,
        SendOp::RdmaWrite {
            remote_addr: 0x2000,
            rkey: 0x22,
        },
    )
    .sgl(&SGE)
}

fn small_rc() -> QpConfig {
    let caps = QpCaps {
        max_inline_data: 32,
        send_ops: Some(0x7f),
        ..caps(4, 4, 2, 2)
    };
    QpConfig {
        atomics: true,
        ..qp_cfg(QpType::Rc, 0x42, &caps)
    }
}

/// Completes the send WQE whose control segment starts at WQEBB counter
/// `counter` with a requester CQE in the next CQ slot.
fn complete_send(cq: &mut CqEnv<'_>, table: &CqTable<4>, qpn: u32, counter: u16) -> WorkCompletion {
    let ci = cq.cq().consumer_index();
    let owner = ((ci >> cq.cq().entries().trailing_zeros()) & 1) as u8;
    let slot = (ci & (cq.cq().entries() - 1)) as usize;
    cq.write_cqe(
        slot,
        &CqeImage::new(0, owner)
            .qpn(0x08, qpn)
            .uidx(0)
            .counter(counter)
            .0,
    );
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq.cq().poll(table, &mut wc), Ok(1));
    wc[0]
}

#[test]
fn queue_full_unsignaled_retire_and_wrap() {
    let uar = UarPage::new();
    let cfg = small_rc();
    let sq_g = cfg.geometry.sq.unwrap();
    // 4 WRs of 128-byte WQEs: 8 WQEBBs, max_post 4.
    assert_eq!((sq_g.wqe_cnt, sq_g.max_post), (8, 4));
    let mut env = make_qp_cfg(&cfg, &uar, 0, 0);
    let mut cq = make_cq(&uar, 2, 0);
    let table = cq_table::<4>([(0, env.qp.completions(true, true, None).unwrap())]);
    let sq = env.qp.sq().unwrap();
    for round in 0..20u64 {
        // Three unsignaled, one signaled: the signaled CQE retires all four.
        let wrs = [
            write(4 * round),
            write(4 * round + 1),
            write(4 * round + 2),
            write(4 * round + 3).flags(SendFlags::SIGNALED),
        ];
        sq.post_send_list(&wrs).unwrap();
        assert_eq!(sq.outstanding(), 4);
        let e = sq.post_send(&write(99)).unwrap_err();
        assert_eq!(
            e,
            Error::QueueFull {
                outstanding: 4,
                max_post: 4
            }
        );
        let last_counter = (sq.cur_post() - 1) as u16;
        let wc = complete_send(&mut cq, &table, 0x42, last_counter);
        assert_eq!(wc.wr_id, 4 * round + 3);
        assert_eq!(sq.outstanding(), 0);
    }
    // The ring wrapped 10 times and the 16-bit counter kept counting.
    assert_eq!(sq.cur_post(), 80);
    drop(table);
    env.reclaim();
}

#[test]
fn counter_wraps_at_0xffff_and_list_error_posts_prefix() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&small_rc(), &uar, 0xfffe, 0xffff);
    let sq = env.qp.sq().unwrap();
    let bad_sgl = [SGE[0]; 3];
    let wrs = [write(1), write(2), write(3).sgl(&bad_sgl)];
    let e = sq.post_send_list(&wrs).unwrap_err();
    assert_eq!(e.posted, 2);
    assert_eq!(e.error, Error::TooManySges { got: 3, max: 2 });
    assert_eq!(sq.cur_post(), 0x1_0000);
    assert_eq!(env.dbr()[4..8], [0, 0, 0, 0]);
    // Second WQE's control segment carries wqe_index 0xffff.
    let slot = (0xffffu32 & 7) as usize;
    assert_eq!(env.sq_slot(slot)[1..3], [0xff, 0xff]);

    let rq = env.qp.rq().unwrap();
    rq.post_recv(&RecvWr {
        wr_id: 1,
        sgl: &SGE,
    })
    .unwrap();
    assert_eq!(env.dbr()[0..4], [0, 0, 0, 0]);
    env.reclaim();
}

#[test]
fn every_rejection_writes_nothing() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&small_rc(), &uar, 0, 0);
    env.fill_rings(SENTINEL_Q);
    uar.fill(SENTINEL_UAR);
    let rings = env.read(0, env.qp.layout().ring_bytes);
    let dbr = env.dbr();
    let big = [0u8; 200];
    let long_sgl = [SGE[0]; 3];
    let av = AddressVector([0; 48]);
    let cases: Vec<(SendWr<'_>, Error)> = vec![
        (
            write(1).sgl(&long_sgl),
            Error::TooManySges { got: 3, max: 2 },
        ),
        (
            SendWr::new(1, SendOp::Send).inline(&big),
            Error::InlineTooLong { got: 200, max: 76 },
        ),
        (
            SendWr::new(
                1,
                SendOp::AtomicFetchAdd {
                    remote_addr: 8,
                    rkey: 1,
                    add: 1,
                },
            ),
            Error::AtomicLength { sges: 0, len: 0 },
        ),
        (
            SendWr::new(
                1,
                SendOp::AtomicFetchAdd {
                    remote_addr: 8,
                    rkey: 1,
                    add: 1,
                },
            )
            .sgl(&[Sge {
                addr: 0,
                length: 0,
                lkey: 1,
            }]),
            Error::AtomicLength { sges: 1, len: 0 },
        ),
        (
            SendWr::new(
                1,
                SendOp::AtomicCmpSwp {
                    remote_addr: 9,
                    rkey: 1,
                    compare: 0,
                    swap: 0,
                },
            )
            .sgl(&SGE),
            Error::AtomicMisaligned(9),
        ),
        (
            SendWr::new(1, SendOp::Send).ud(UdDest {
                av: &av,
                remote_qpn: 1,
                remote_qkey: 1,
            }),
            Error::UdDestination("given on a non-UD QP or a NOP"),
        ),
        (
            SendWr::new(1, SendOp::Send).eth_headers(&big[..18]),
            Error::EthSegment("Ethernet headers or checksum offload on a non-raw QP"),
        ),
        (
            SendWr::new(1, SendOp::Nop).sgl(&SGE),
            Error::TooManySges { got: 1, max: 0 },
        ),
    ];
    let sq = env.qp.sq().unwrap();
    for (wr, err) in &cases {
        assert_eq!(sq.post_send(wr), Err(*err));
    }
    assert_eq!(sq.cur_post(), 0);
    assert_eq!(env.read(0, env.qp.layout().ring_bytes), rings);
    assert_eq!(env.dbr(), dbr);
    assert!(uar.bytes().iter().all(|&b| b == SENTINEL_UAR));
    let rq = env.qp.rq().unwrap();
    assert_eq!(
        rq.post_recv(&RecvWr {
            wr_id: 1,
            sgl: &long_sgl
        }),
        Err(Error::TooManySges { got: 3, max: 2 })
    );
    for i in 0..4 {
        rq.post_recv(&RecvWr {
            wr_id: i,
            sgl: &SGE,
        })
        .unwrap();
    }
    assert_eq!(
        rq.post_recv(&RecvWr {
            wr_id: 9,
            sgl: &SGE
        }),
        Err(Error::QueueFull {
            outstanding: 4,
            max_post: 4
        })
    );
    env.reclaim();
}

#[test]
fn wrong_opcode_for_qp_type_and_disabled_atomics() {
    let uar = UarPage::new();
    let mut cfg = small_rc();
    cfg.atomics = false;
    let fa = SendWr::new(
        1,
        SendOp::AtomicFetchAdd {
            remote_addr: 8,
            rkey: 1,
            add: 1,
        },
    )
    .sgl(&SGE);
    let read = SendWr::new(
        1,
        SendOp::RdmaRead {
            remote_addr: 8,
            rkey: 1,
        },
    )
    .sgl(&SGE);
    let mut env = make_qp_cfg(&cfg, &uar, 0, 0);
    assert_eq!(
        env.qp.sq().unwrap().post_send(&fa),
        Err(Error::AtomicsDisabled)
    );
    env.reclaim();

    for (qp_type, bad) in [(QpType::Uc, read), (QpType::Uc, fa), (QpType::Ud, write(1))] {
        let mut cfg = small_rc();
        cfg.qp_type = qp_type;
        cfg.geometry = QpGeometry::new(
            qp_type,
            &QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
                send_ops: None,
            },
            &DeviceLimits::default(),
        )
        .unwrap();
        let mut env = make_qp_cfg(&cfg, &uar, 0, 0);
        assert!(matches!(
            env.qp.sq().unwrap().post_send(&bad),
            Err(Error::WrongOpcodeForQpType { qp_type: t, .. }) if t == qp_type
        ));
        if qp_type == QpType::Ud {
            assert_eq!(
                env.qp
                    .sq()
                    .unwrap()
                    .post_send(&SendWr::new(1, SendOp::Send).sgl(&SGE)),
                Err(Error::UdDestination("missing on a UD QP"))
            );
        }
        env.reclaim();
    }
}

#[test]
fn raw_ethernet_segment_with_inline_headers_and_csum() {
    let uar = UarPage::new();
    let cfg = QpConfig {
        sq_sig_all: true,
        eth_min_inline: 18,
        ..qp_cfg(QpType::RawPacket, 0x99, &caps(8, 0, 1, 0))
    };
    let mut env = make_qp_cfg(&cfg, &uar, 0, 0);
    assert!(env.qp.rq().is_err());
    let hdr: Vec<u8> = (0..18).collect();
    let sq = env.qp.sq().unwrap();
    assert_eq!(
        sq.post_send(
            &SendWr::new(1, SendOp::Send)
                .sgl(&SGE)
                .eth_headers(&hdr[..14])
        ),
        Err(Error::EthSegment(
            "inline headers shorter than the queue's minimum"
        ))
    );
    sq.post_send(
        &SendWr::new(1, SendOp::Send)
            .sgl(&SGE)
            .eth_headers(&hdr)
            .flags(SendFlags::IP_CSUM),
    )
    .unwrap();
    let w = env.sq_slot(0);
    // ctrl: SEND, ds = 1 + 2 (eth) + 1 (data), CQ update from sq_sig_all.
    assert_eq!(
        w[0..16],
        [0, 0, 0, 0x0a, 0, 0, 0x99, 4, 0, 0, 0, 0x08, 0, 0, 0, 0]
    );
    // Ethernet segment: cs_flags 0xc0, inline_hdr_sz 18, headers from byte 14.
    assert_eq!(w[16..30], [0, 0, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 18]);
    assert_eq!(w[30..48], hdr[..]);
    assert_eq!(w[48..52], [0, 0, 0, 64]);
    env.reclaim();
}

#[test]
fn inline_data_wraps_and_bf_copy_wraps() {
    let uar = UarPage::new();
    let cfg = small_rc();
    let mut env = make_qp_cfg(&cfg, &uar, 7, 0); // last WQEBB of 8
    uar.fill(0);
    let data: Vec<u8> = (0..76).collect();
    let sq = env.qp.sq().unwrap();
    sq.post_send(&SendWr::new(5, SendOp::Send).inline(&data))
        .unwrap();
    let a = env.sq_slot(7);
    let b = env.sq_slot(0);
    assert_eq!(a[16..20], [0x80, 0, 0, 76]);
    assert_eq!(a[20..64], data[..44]);
    assert_eq!(b[0..32], data[44..]);
    let page = uar.bytes();
    assert_eq!(page[0x800..0x840], a[..]);
    assert_eq!(page[0x840..0x880], b[..]);
    env.reclaim();
}

/// Inline data of every length up to the queue's limit, in a WQE that ends
/// before the end of the ring and in one that wraps: the header, exactly
/// the data bytes after it, and nothing else of the WQEBBs (pre-filled
/// with 0xa5) written. The copy goes by 4-, 8-, 2- and 1-byte stores
/// depending on the length and alignment, so every remainder is covered,
/// with and without wrapping at the end of the ring.
#[test]
fn inline_data_every_length_every_tail() {
    let uar = UarPage::new();
    let g = qp_config("rc_qp").geometry.sq.unwrap();
    let max = g.max_inline_data as usize;
    let cnt = g.wqe_cnt as usize;
    let data: Vec<u8> = (0..max).map(|i| (i as u8).wrapping_mul(7) ^ 0x3c).collect();
    // Miri is slow (each case sets up and sentinel-fills a whole queue):
    // under it, a few lengths that cover the header merge, an odd tail,
    // one and several WQEBBs, and only the wrapping start.
    let (lens, starts): (Vec<usize>, Vec<usize>) = if cfg!(miri) {
        (vec![0, 1, 5, 12, max], vec![cnt - 1])
    } else {
        ((0..=max).collect(), vec![0, cnt - 1])
    };
    for start in starts {
        for &len in &lens {
            let mut env = make_qp("rc_qp", &uar, start as u32, 0);
            env.fill_rings(0xa5);
            let sq = env.qp.sq().unwrap();
            sq.post_send(
                &SendWr::new(9, SendOp::Send)
                    .inline(&data[..len])
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let units = if len == 0 {
                1
            } else {
                1 + (4 + len).div_ceil(16)
            };
            let wqebbs = units.div_ceil(4);
            // The WQE's WQEBBs in posting order (wrapping), then the one
            // after it and the one before it.
            let wqe: Vec<u8> = (0..wqebbs)
                .flat_map(|i| env.sq_slot((start + i) % cnt))
                .collect();
            if len > 0 {
                assert_eq!(
                    wqe[16..20],
                    (0x8000_0000u32 | len as u32).to_be_bytes(),
                    "len {len}"
                );
            }
            assert_eq!(wqe[20..20 + len], data[..len], "len {len} start {start}");
            // Padding after the data is not written, as rdma-core does.
            let pad_from = if len == 0 { 16 } else { 20 + len };
            assert!(
                wqe[pad_from..].iter().all(|b| *b == 0xa5),
                "len {len} start {start}: padding written"
            );
            for slot in [(start + wqebbs) % cnt, (start + cnt - 1) % cnt] {
                assert!(
                    env.sq_slot(slot).iter().all(|b| *b == 0xa5),
                    "len {len} start {start}: WQEBB {slot} written"
                );
            }
            env.reclaim();
        }
    }
}

#[test]
fn srq_free_list_post_complete_and_full() {
    let uar = UarPage::new();
    let g = SrqGeometry::new(3, 1, &DeviceLimits::default()).unwrap();
    assert_eq!((g.wqe_cnt, g.max_wr), (4, 3));
    let l = SrqLayout::new(&g);
    let mem = HostBlock::new(l.total_bytes, 4096).unwrap();
    let mut srq = Srq::new(mem.lend(0, 0).unwrap(), 0x77, g)
        .map_err(|(e, _)| e)
        .unwrap();
    // A QP without RQ that receives through the SRQ.
    let cfg = qp_cfg(QpType::Rc, 0x50, &caps(4, 0, 1, 0));
    let env = make_qp_cfg(&cfg, &uar, 0, 0);
    let mut cq = make_cq(&uar, 3, 0);
    let mut table = CqTable::<4>::new();
    table
        .insert(
            3,
            env.qp
                .completions(false, false, Some(srq.completions()))
                .unwrap(),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(srq.handles_alive(), 1);

    let mut wr_ids = std::collections::HashMap::new();
    let mut model: std::collections::VecDeque<u16> = (0..4).collect();
    let mut ci_slot = 0usize;
    for round in 0..10u64 {
        // Post until full.
        let mut n = 0;
        while srq
            .post_recv(&RecvWr {
                wr_id: 100 * round + n,
                sgl: &SGE,
            })
            .is_ok()
        {
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(srq.available(), 0);
        assert!(matches!(
            srq.post_recv(&RecvWr {
                wr_id: 0,
                sgl: &SGE
            }),
            Err(Error::QueueFull { .. })
        ));
        // The free list as rdma-core keeps it: posts take from the head,
        // completions append at the tail, one WQE always stays behind.
        let idx: Vec<u16> = model.drain(..3).collect();
        for &i in idx.iter().rev() {
            let owner = ((ci_slot >> 3) & 1) as u8;
            cq.write_cqe(
                ci_slot & 7,
                &CqeImage::new(2, owner)
                    .qpn(0, 0x50)
                    .uidx(3)
                    .counter(i)
                    .byte_cnt(64)
                    .0,
            );
            ci_slot += 1;
            let mut wc = [WorkCompletion::default(); 1];
            assert_eq!(cq.cq().poll(&table, &mut wc), Ok(1));
            assert!(
                wr_ids.insert(wc[0].wr_id, ()).is_none(),
                "wr_id completed twice"
            );
            model.push_back(i);
            // Completing the same WQE again is caught.
            let owner = ((ci_slot >> 3) & 1) as u8;
            cq.write_cqe(
                ci_slot & 7,
                &CqeImage::new(2, owner)
                    .qpn(0, 0x50)
                    .uidx(3)
                    .counter(i)
                    .byte_cnt(64)
                    .0,
            );
            ci_slot += 1;
            assert!(matches!(
                cq.cq().poll(&table, &mut wc),
                Err(Error::CqeWqeCounter { queue: "SRQ", .. })
            ));
        }
        assert_eq!(srq.outstanding(), 0);
    }
    assert_eq!(wr_ids.len(), 30);
    drop(table);
    assert_eq!(srq.handles_alive(), 0);
    mem.reclaim(srq.into_parts().unwrap()).unwrap();
    env.reclaim();
}

#[test]
fn arm_writes_record_and_doorbell() {
    let uar = UarPage::new();
    let mut cq = make_cq(&uar, 4, 0x12345);
    cq.cq().arm(true);
    let page = uar.bytes();
    assert_eq!(cq.dbr()[4..8], [0x01, 0x01, 0x23, 0x45]);
    assert_eq!(page[0x20..0x28], [0x01, 0x01, 0x23, 0x45, 0, 0, 0, 7]);
    cq.cq().completion_event();
    cq.cq().arm(false);
    assert_eq!(uar.bytes()[0x20..0x24], [0x10, 0x01, 0x23, 0x45]);
}

#[test]
fn handles_are_exclusive_and_block_teardown() {
    let uar = UarPage::new();
    let env = make_qp_cfg(&small_rc(), &uar, 0, 0);
    let h = env.qp.completions(true, false, None).unwrap();
    assert_eq!(
        env.qp.completions(true, true, None).unwrap_err(),
        Error::HandleOutstanding("send queue")
    );
    let r = env.qp.completions(false, true, None).unwrap();
    assert_eq!(env.qp.handles_alive(), 3);
    let QpEnv { mem, qp } = env;
    let qp = qp.into_parts().unwrap_err();
    drop(h);
    drop(r);
    let parts = qp.into_parts().unwrap();
    mem.reclaim(parts.region).unwrap();
}

#[test]
fn corrupt_cqes_give_typed_errors() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&small_rc(), &uar, 0, 0);
    let mut cq = make_cq(&uar, 4, 0);
    let table = cq_table::<4>([(1, env.qp.completions(true, true, None).unwrap())]);
    env.qp.sq().unwrap().post_send(&write(1)).unwrap();
    env.qp
        .rq()
        .unwrap()
        .post_recv(&RecvWr {
            wr_id: 2,
            sgl: &SGE,
        })
        .unwrap();
    let cases = [
        (
            CqeImage::new(0, 0).qpn(8, 0x42).uidx(3).counter(0),
            "unknown uidx",
        ),
        (
            CqeImage::new(0, 0).qpn(8, 0x43).uidx(1).counter(0),
            "qpn mismatch",
        ),
        (
            CqeImage::new(0, 0).qpn(8, 0x42).uidx(1).counter(1),
            "not outstanding",
        ),
        (
            CqeImage::new(0, 0).qpn(0x7e, 0x42).uidx(1).counter(0),
            "bad sop",
        ),
        (
            CqeImage::new(2, 0).qpn(0, 0x42).uidx(1).counter(1),
            "rq counter",
        ),
        (
            CqeImage::new(2, 0)
                .qpn(0, 0x42)
                .uidx(1)
                .counter(0)
                .byte_cnt(65),
            "byte count",
        ),
        (CqeImage::new(9, 0), "opcode"),
        (CqeImage::new(5, 0), "resize"),
    ];
    let mut wc = [WorkCompletion::default(); 2];
    for (i, (img, what)) in cases.iter().enumerate() {
        cq.write_cqe(i, &img.0);
        let e = cq.cq().poll(&table, &mut wc);
        assert!(e.is_err(), "{what}: {e:?}");
        assert_eq!(cq.cq().consumer_index(), i as u32 + 1, "{what}: consumed");
    }
    let mut fmt = CqeImage::new(0, 0).qpn(8, 0x42).uidx(1).counter(0);
    fmt.0[63] |= 0x04;
    cq.write_cqe(8, &fmt.0);
    assert!(matches!(
        cq.cq().poll(&table, &mut wc),
        Err(Error::CqeFormat { .. })
    ));
    // Nothing was retired by the bad CQEs; good ones still work, and a bad
    // one after a good one is left for the next poll.
    cq.write_cqe(9, &CqeImage::new(0, 0).qpn(8, 0x42).uidx(1).counter(0).0);
    cq.write_cqe(10, &CqeImage::new(9, 0).0);
    assert_eq!(cq.cq().poll(&table, &mut wc), Ok(1));
    assert_eq!(wc[0].wr_id, 1);
    assert_eq!(cq.cq().consumer_index(), 10);
    assert!(cq.cq().poll(&table, &mut wc).is_err());
    assert_eq!(cq.cq().consumer_index(), 11);
    drop(table);
    env.reclaim();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 512 },
        failure_persistence: None,
        ..Default::default()
    })]

    /// Random bytes in valid-looking CQEs: typed errors or completions of
    /// work that was really posted, never a panic.
    #[test]
    fn random_cqes_never_panic(cqes in proptest::collection::vec(proptest::array::uniform32(proptest::prelude::any::<u16>()), 1..6)) {
        let uar = UarPage::new();
        let mut env = make_qp_cfg(&small_rc(), &uar, 0, 0);
        let mut cq = make_cq(&uar, 2, 0);
        let table = cq_table::<4>([(1, env.qp.completions(true, true, None).unwrap())]);
        env.qp.sq().unwrap().post_send(&write(7)).unwrap();
        env.qp.rq().unwrap().post_recv(&RecvWr { wr_id: 8, sgl: &SGE }).unwrap();
        // The same through `poll` with one slot (env1) and `poll_one`
        // (env2): the same completions and errors.
        let mut envs = [1, 2].map(|_| make_qp_cfg(&small_rc(), &uar, 0, 0));
        let mut cqs = [1, 2].map(|_| make_cq(&uar, 2, 0));
        let mut tables = [CqTable::<4>::new(), CqTable::<4>::new()];
        for (e, t) in envs.iter_mut().zip(&mut tables) {
            t.insert(1, e.qp.completions(true, true, None).unwrap()).map_err(|(e, _)| e).unwrap();
            e.qp.sq().unwrap().post_send(&write(7)).unwrap();
            e.qp.rq().unwrap().post_recv(&RecvWr { wr_id: 8, sgl: &SGE }).unwrap();
        }
        for (i, words) in cqes.iter().enumerate() {
            let mut b = [0u8; 64];
            for (j, w) in words.iter().enumerate() {
                b[2 * j..2 * j + 2].copy_from_slice(&w.to_be_bytes());
            }
            // Make it software-owned for this pass so it gets parsed.
            b[63] = (b[63] & !1) | (((i >> 2) & 1) as u8);
            cq.write_cqe(i & 3, &b);
            let mut wc = [WorkCompletion::default(); 4];
            if let Ok(n) = cq.cq().poll(&table, &mut wc) {
                for w in &wc[..n] {
                    proptest::prop_assert!(w.wr_id == 7 || w.wr_id == 8);
                }
            }
            for c in &cqs {
                c.write_cqe(i & 3, &b);
            }
            // Until both have taken everything there is.
            loop {
                let mut one = [Completion::default(); 1];
                let r1 = cqs[0].cq().poll(&tables[0], &mut one);
                let mut c = Completion::default();
                let r2 = cqs[1].cq().poll_one(&tables[1], &mut c);
                let r2 = r2.map(usize::from).map_err(Error::from);
                proptest::prop_assert_eq!(r1, r2);
                if r1 == Ok(1) {
                    proptest::prop_assert_eq!(one[0], c);
                }
                proptest::prop_assert_eq!(cqs[0].cq().consumer_index(), cqs[1].cq().consumer_index());
                proptest::prop_assert_eq!(cqs[0].dbr(), cqs[1].dbr());
                if r1 == Ok(0) {
                    break;
                }
            }
        }
        drop(tables);
        for e in envs {
            e.reclaim();
        }
        drop(table);
        env.reclaim();
    }
}

/// The poster of the two-thread tests: `total` signaled RDMA writes through
/// the general path, the typed single post and a batch of one, in turn,
/// retrying while the queue is full; sends each WQE's counter to the poller.
fn post_mixed<M: platform::Mmio>(
    sq: &mut SendQueue<M>,
    total: u64,
    tx: std::sync::mpsc::Sender<u16>,
) {
    let mut posted = 0u64;
    while posted < total {
        let r = match posted % 3 {
            0 => sq.post_send(&write(posted).flags(SendFlags::SIGNALED)),
            1 => sq
                .post_send_sge(
                    posted,
                    SendOp::RdmaWrite {
                        remote_addr: 0x2000,
                        rkey: 0x22,
                    },
                    SendFlags::SIGNALED,
                    SGE[0],
                )
                .map_err(Error::from),
            _ => {
                let mut b = sq.batch();
                let r = b.post_send_sge(
                    posted,
                    SendOp::RdmaWrite {
                        remote_addr: 0x2000,
                        rkey: 0x22,
                    },
                    SendFlags::SIGNALED,
                    SGE[0],
                );
                b.ring();
                r.map_err(Error::from)
            }
        };
        match r {
            Ok(()) => {
                tx.send((sq.cur_post() - 1) as u16).unwrap();
                posted += 1;
            }
            Err(Error::QueueFull { .. }) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn poster_and_poller_on_two_threads() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&small_rc(), &uar, 0, 0);
    let mut cq = make_cq(&uar, 3, 0);
    let handle = env.qp.completions(true, false, None).unwrap();
    let table = cq_table::<4>([(0, handle)]);
    let total = if cfg!(miri) { 40u64 } else { 20_000 };
    let (tx, rx) = std::sync::mpsc::channel::<u16>();
    std::thread::scope(|s| {
        let sq = env.qp.sq().unwrap();
        s.spawn(move || post_mixed(sq, total, tx));
        // The "device" + poller: one CQE per posted WQE, in order.
        let mut expect = 0u64;
        for counter in rx.iter() {
            let wc = complete_send(&mut cq, &table, 0x42, counter);
            assert_eq!(wc.wr_id, expect);
            expect += 1;
        }
        assert_eq!(expect, total);
    });
    drop(table);
    env.reclaim();
}

/// The poller side on its own thread's partner: `Cq::poll_one` for every
/// CQE (it reads the head the poster publishes); the poster mixes general,
/// typed and batched posts.
#[test]
fn poster_and_single_poller_on_two_threads() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&small_rc(), &uar, 0, 0);
    let mut cq = make_cq(&uar, 3, 0);
    let handle = env.qp.completions(true, false, None).unwrap();
    let table = cq_table::<4>([(0, handle)]);
    let total = if cfg!(miri) { 40u64 } else { 20_000 };
    let (tx, rx) = std::sync::mpsc::channel::<u16>();
    std::thread::scope(|s| {
        let sq = env.qp.sq().unwrap();
        s.spawn(move || post_mixed(sq, total, tx));
        let (mem, q) = cq.split();
        let entries = q.entries();
        let mut expect = 0u64;
        let mut c = Completion::default();
        for counter in rx.iter() {
            let ci = q.consumer_index();
            let img = CqeImage::new(0, ((ci / entries) & 1) as u8)
                .qpn(0x08, 0x42)
                .uidx(0)
                .counter(counter);
            mem.write(64 * (ci % entries) as usize, &img.0).unwrap();
            assert_eq!(q.poll_one(&table, &mut c), Ok(true));
            assert_eq!(c.wr_id(), expect);
            assert_eq!(q.poll_one(&table, &mut c), Ok(false));
            expect += 1;
        }
        assert_eq!(expect, total);
    });
    drop(table);
    env.reclaim();
}

/// A QP configuration for the typed-vs-general comparison.
fn cmp_config(kind: u8) -> QpConfig {
    let caps = |sge: u32| QpCaps {
        max_inline_data: 16,
        ..caps(4, 4, sge, 1)
    };
    let (qp_type, caps, atomics, sig_all, eth_min_inline) = match kind {
        0 => (QpType::Rc, caps(2), true, false, 0),
        1 => (QpType::Rc, caps(1), false, true, 0),
        2 => (QpType::Uc, caps(1), false, false, 0),
        3 => (QpType::Rc, caps(0), true, false, 0),
        4 => (QpType::Ud, caps(1), false, false, 0),
        5 => (QpType::RawPacket, caps(1), false, false, 18),
        _ => (QpType::RawPacket, caps(1), false, true, 0),
    };
    QpConfig {
        atomics,
        sq_sig_all: sig_all,
        eth_min_inline,
        ..qp_cfg(qp_type, 0x4711, &caps)
    }
}

fn cmp_op(k: u8, a: u64, b: u32, c: u64) -> SendOp {
    match k % 9 {
        0 => SendOp::Send,
        1 => SendOp::SendWithImm(b),
        2 => SendOp::SendWithInv(b),
        3 => SendOp::RdmaWrite {
            remote_addr: a,
            rkey: b,
        },
        4 => SendOp::RdmaWriteWithImm {
            remote_addr: a,
            rkey: b,
            imm: c as u32,
        },
        5 => SendOp::RdmaRead {
            remote_addr: a,
            rkey: b,
        },
        6 => SendOp::AtomicCmpSwp {
            remote_addr: a,
            rkey: b,
            compare: c,
            swap: !c,
        },
        7 => SendOp::AtomicFetchAdd {
            remote_addr: a,
            rkey: b,
            add: c,
        },
        _ => SendOp::Nop,
    }
}

type CmpWr = (u8, u64, u32, u64, u8, u32, u32, u64);

/// A compact error as the full one, after checking that it prints like it
/// and that its kind converts to the same error.
fn compact_error(e: SendError) -> Error {
    let full = Error::from(e);
    assert_eq!(Error::from(e.kind()), full);
    assert_eq!(e.to_string(), full.to_string());
    assert_eq!(SendError::from(e.kind()), e);
    full
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        failure_persistence: None,
        ..Default::default()
    })]

    /// The single-SGE entry point (`post_send_sge`, on the queue and on a
    /// batch, returning `SendError`, converted with `Error::from`) does
    /// exactly what `post_send` does with the same work request: same result or
    /// error, same bytes in the rings, doorbell record, bookkeeping and UAR
    /// page, same counters — for every QP type, operation, flag byte and
    /// SGE (empty ones too), including a full queue.
    #[test]
    fn typed_entry_points_equal_general(
        kind in 0u8..7,
        batch in proptest::prelude::any::<bool>(),
        prefer_bf in proptest::prelude::any::<bool>(),
        start in proptest::prop_oneof![proptest::strategy::Just(0u32), proptest::prelude::any::<u32>()],
        wrs in proptest::collection::vec(
            (0u8..9, proptest::prelude::any::<u64>(), proptest::prelude::any::<u32>(),
             proptest::prelude::any::<u64>(), proptest::prelude::any::<u8>(),
             proptest::prop_oneof![proptest::strategy::Just(0u32), 1u32..5000],
             proptest::prelude::any::<u32>(), proptest::prelude::any::<u64>()),
            1..8),
    ) {
        let cfg = cmp_config(kind);
        let (ua, ub) = (UarPage::new(), UarPage::new());
        let bf = BfConfig { prefer_bf, ..BfConfig::new(0) };
        let mut ga = make_qp_bf(&cfg, &ua, bf, start, 0);
        let mut gb = make_qp_bf(&cfg, &ub, bf, start, 0);
        for (env, uar) in [(&ga, &ua), (&gb, &ub)] {
            env.fill_rings(SENTINEL_Q);
            uar.fill(SENTINEL_UAR);
        }
        let total = cfg.geometry.layout.total_bytes;
        let check = |ga: &mut QpEnv<'_>, gb: &mut QpEnv<'_>| {
            assert_eq!(ga.read(0, total), gb.read(0, total), "region");
            assert_eq!(ua.bytes(), ub.bytes(), "UAR page");
            let (a, b) = (ga.qp.sq().unwrap(), gb.qp.sq().unwrap());
            assert_eq!((a.cur_post(), a.head(), a.bf_offset()), (b.cur_post(), b.head(), b.bf_offset()));
        };
        let one = |w: &CmpWr| {
            let &(k, a, b, c, flags, len, lkey, addr) = w;
            (
                (k as u64) << 56 | a >> 8,
                cmp_op(k, a, b, c),
                SendFlags(flags),
                Sge { addr, length: len, lkey },
            )
        };
        if batch {
            let (sa, sb) = (ga.qp.sq().unwrap(), gb.qp.sq().unwrap());
            let (mut ba, mut bb) = (sa.batch(), sb.batch());
            for w in &wrs {
                let (wr_id, op, flags, sge) = one(w);
                let sgl = [sge];
                let ra = ba.post_send(&SendWr::new(wr_id, op).sgl(&sgl).flags(flags));
                let rb = bb.post_send_sge(wr_id, op, flags, sge).map_err(compact_error);
                assert_eq!(ra, rb, "{op:?} {flags:?} {sge:?}");
                assert_eq!(ba.len(), bb.len());
            }
            drop((ba, bb));
            check(&mut ga, &mut gb);
        } else {
            for w in &wrs {
                let (wr_id, op, flags, sge) = one(w);
                let sgl = [sge];
                let ra = ga.qp.sq().unwrap().post_send(&SendWr::new(wr_id, op).sgl(&sgl).flags(flags));
                let sq = gb.qp.sq().unwrap();
                let rb = sq.post_send_sge(wr_id, op, flags, sge).map_err(compact_error);
                assert_eq!(ra, rb, "{op:?} {flags:?} {sge:?}");
                check(&mut ga, &mut gb);
            }
        }
        ga.reclaim();
        gb.reclaim();
    }
}

/// A batch rings for what it holds when it is dropped early: by a `?` on a
/// rejected push, or by a panic in the caller's loop (the batch's drop is
/// its only way out).
#[test]
fn batch_rings_when_dropped_by_an_error_or_a_panic() {
    let uar = UarPage::new();
    let mut env = make_qp_cfg(&small_rc(), &uar, 0, 0);
    let ctrl = |env: &QpEnv<'_>, wqebb: usize| {
        let off = env.qp.layout().sq_offset + 64 * wqebb;
        env.read(off, 8)
    };
    // `?` on the fifth push (the queue takes four) leaves with the four
    // before it written and rung.
    let sq = env.qp.sq().unwrap();
    let r = (|| -> Result<(), Error> {
        let mut b = sq.batch();
        for i in 0..5 {
            b.post_send_sge(
                i,
                SendOp::RdmaWrite {
                    remote_addr: 0x2000,
                    rkey: 0x22,
                },
                SendFlags::SIGNALED,
                SGE[0],
            )?;
        }
        b.ring();
        Ok(())
    })();
    assert!(matches!(
        r,
        Err(Error::QueueFull {
            outstanding: 4,
            max_post: 4
        })
    ));
    let sq = env.qp.sq().unwrap();
    assert_eq!((sq.head(), sq.cur_post(), sq.outstanding()), (4, 4, 4));
    assert_eq!(env.dbr()[4..8], [0, 0, 0, 4]);
    // The doorbell: the last WQE's first 8 bytes, at 0x800.
    assert_eq!(uar.bytes()[0x800..0x808], ctrl(&env, 3)[..]);

    // Retire them, then panic after two pushes: unwinding drops the batch,
    // which rings the two (now at the other BlueFlame half).
    let mut cq = make_cq(&uar, 3, 0);
    let table = cq_table::<4>([(0, env.qp.completions(true, false, None).unwrap())]);
    assert_eq!(complete_send(&mut cq, &table, 0x42, 3).wr_id, 3);
    let sq = env.qp.sq().unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut b = sq.batch();
        for i in 10..12 {
            b.post_send_sge(
                i,
                SendOp::RdmaWrite {
                    remote_addr: 0x2000,
                    rkey: 0x22,
                },
                SendFlags::SIGNALED,
                SGE[0],
            )
            .unwrap();
        }
        panic!("the caller's loop fails");
    }));
    assert!(caught.is_err());
    let sq = env.qp.sq().unwrap();
    assert_eq!((sq.head(), sq.cur_post(), sq.outstanding()), (6, 6, 2));
    assert_eq!(env.dbr()[4..8], [0, 0, 0, 6]);
    assert_eq!(uar.bytes()[0x900..0x908], ctrl(&env, 5)[..]);
    assert_eq!(complete_send(&mut cq, &table, 0x42, 5).wr_id, 11);
    drop(table);
    drop(cq);
    env.reclaim();
}
