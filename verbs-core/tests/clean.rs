//! `Cq::clean` (rdma-core's `__mlx5_cq_clean`): the not-yet-polled CQEs of
//! one QP leave a CQ it shares with others, across the ring's wrap, with
//! the SRQ WQEs of its receive CQEs returned; and `Cq::set_cqn`.

mod common;

use common::*;
use platform::host::HostBlock;
use proptest::prelude::*;
use verbs_core::*;

const SGE: [Sge; 1] = [Sge {
    addr: 0x1000,
    length: 64,
    lkey: 0x11,
}];

/// A small RC QP numbered `qpn`, with a receive queue unless it receives
/// through an SRQ.
fn rc(qpn: u32, rq: bool) -> QpConfig {
    let (recv_wr, recv_sge) = if rq { (16, 1) } else { (0, 0) };
    qp_cfg(QpType::Rc, qpn, &caps(16, recv_wr, 1, recv_sge))
}

fn write(id: u64) -> SendWr<'static> {
    SendWr::new(
        id,
        SendOp::RdmaWrite {
            remote_addr: 0x2000,
            rkey: 0x22,
        },
    )
    .sgl(&SGE)
    .flags(SendFlags::SIGNALED)
}

/// Writes `img` as the CQE at consumer index `ci` of a CQ of `entries`,
/// with the owner bit of that pass.
fn put(cq: &CqEnv<'_>, entries: u32, ci: u32, img: CqeImage) {
    let mut b = img.0;
    b[63] = (b[63] & !1) | ((ci / entries) & 1) as u8;
    b[0x3e] = 0x5a; // a signature, to see it move with the CQE
    cq.write_cqe((ci % entries) as usize, &b);
}

/// Two QPs on one CQ, their requester CQEs interleaved as `owners` says
/// (`true` = QP A, user index 1, QPN 0x41; `false` = QP B, user index 2,
/// QPN 0x42), starting at consumer index `ci`; QP A's are cleaned. B's
/// come out of polls in order, the consumer index and doorbell record
/// count A's as consumed, and the CQ goes on working.
fn shared_cq_clean(log: u8, ci: u32, owners: &[bool], version: CqeVersion) {
    let uar = UarPage::new();
    let entries = 1u32 << log;
    let mut a = make_qp_cfg(&rc(0x41, true), &uar, 0, 0);
    let mut b = make_qp_cfg(&rc(0x42, true), &uar, 0, 0);
    let mut cq = make_cq_version(&uar, log, ci, version);
    let mut table = cq_table::<4>([
        (1, a.qp.completions(true, true, None).unwrap()),
        (2, b.qp.completions(true, true, None).unwrap()),
    ]);
    let mut b_ids = Vec::new();
    let (mut na, mut nb) = (0u64, 0u64);
    for (k, &is_a) in owners.iter().enumerate() {
        let (env, uidx, qpn, n) = if is_a {
            (&mut a, 1, 0x41, &mut na)
        } else {
            (&mut b, 2, 0x42, &mut nb)
        };
        let sq = env.qp.sq().unwrap();
        let counter = sq.cur_post() as u16;
        let id = u64::from(uidx) << 32 | *n;
        sq.post_send(&write(id)).unwrap();
        *n += 1;
        if !is_a {
            b_ids.push(id);
        }
        put(
            &cq,
            entries,
            ci.wrapping_add(k as u32),
            CqeImage::new(0, 0)
                .qpn(0x08, qpn)
                .uidx(uidx)
                .counter(counter),
        );
    }
    let key = match version {
        CqeVersion::V1 => 1,
        CqeVersion::V0 => 0x41,
    };
    let h = table.remove(1).unwrap();
    let report = cq.cq().clean_qp(1, &h);
    drop(h);
    assert_eq!(
        report,
        CqClean {
            removed: na as u32,
            srq_freed: 0,
            srq_skipped: 0
        }
    );
    let after = ci.wrapping_add(na as u32);
    assert_eq!(cq.cq().consumer_index(), after);
    assert_eq!(cq.dbr()[..4], (after & 0xff_ffff).to_be_bytes());
    assert_eq!(cq.dbr()[4..], [0; 4], "arm word untouched");
    // Cleaning again finds nothing of A's.
    assert_eq!(cq.cq().clean(key, None), CqClean::default());
    // B's completions, in order, one at a time and as a batch.
    let mut got = Vec::new();
    let mut c = Completion::default();
    if let Some(&first) = b_ids.first() {
        assert_eq!(cq.cq().poll_one(&table, &mut c), Ok(true));
        assert_eq!(c.wr_id(), first);
        assert_eq!(c.qp_num(), 0x42);
        got.push(first);
    }
    let mut wc = [WorkCompletion::default(); 64];
    let n = cq.cq().poll(&table, &mut wc).unwrap();
    got.extend(wc[..n].iter().map(|w| w.wr_id));
    assert_eq!(got, b_ids);
    assert_eq!(cq.cq().poll(&table, &mut wc), Ok(0));
    let end = ci.wrapping_add(owners.len() as u32);
    assert_eq!(cq.cq().consumer_index(), end);
    assert_eq!(b.qp.sq().unwrap().outstanding(), 0);
    // A's work is as it was (its queue starts over when it is made again).
    assert_eq!(a.qp.sq().unwrap().outstanding(), na as u32);
    // The CQ goes on: a new CQE of B in the next slot.
    let sq = b.qp.sq().unwrap();
    let counter = sq.cur_post() as u16;
    sq.post_send(&write(0xb0b)).unwrap();
    put(
        &cq,
        entries,
        end,
        CqeImage::new(0, 0).qpn(0x08, 0x42).uidx(2).counter(counter),
    );
    assert_eq!(cq.cq().poll(&table, &mut wc), Ok(1));
    assert_eq!(wc[0].wr_id, 0xb0b);
    drop(table);
    a.reclaim();
    b.reclaim();
}

#[test]
fn clean_one_qp_of_a_shared_cq_across_the_wrap() {
    // 8 entries, consumer index 5: the 7 CQEs take slots 5, 6, 7, 0, 1, 2,
    // 3, the owner bit flipping after slot 7.
    let owners = [true, false, true, true, false, false, true];
    shared_cq_clean(3, 5, &owners, CqeVersion::V1);
    shared_cq_clean(3, 5, &owners, CqeVersion::V0);
    // The 24-bit doorbell record wraps too.
    shared_cq_clean(3, 0xff_fffd, &owners, CqeVersion::V1);
    // Only A's, only B's, a full ring.
    shared_cq_clean(2, 3, &[true; 4], CqeVersion::V1);
    shared_cq_clean(2, 3, &[false; 4], CqeVersion::V1);
    shared_cq_clean(2, 0, &[true, false, false, true], CqeVersion::V1);
    // Nothing there.
    shared_cq_clean(2, 9, &[], CqeVersion::V1);
}

#[test]
fn clean_moves_whole_cqes_and_keeps_each_slots_owner_bit() {
    let uar = UarPage::new();
    let mut cq = make_cq(&uar, 2, 2);
    // Slots 2, 3 (pass 0), 0, 1 (pass 1): X(uidx 1), Y, X, Z with distinct
    // bytes; cleaning uidx 1 leaves Y, Z in slots 0, 1.
    let img = |uidx: u32, fill: u8| {
        let mut i = CqeImage::new(0, 0).uidx(uidx).qpn(0x08, 0x40 + uidx);
        for (j, b) in i.0[..0x20].iter_mut().enumerate() {
            *b = fill ^ j as u8;
        }
        i
    };
    let (y, z) = (img(2, 0x30), img(3, 0x70));
    put(&cq, 4, 2, img(1, 0x10));
    put(&cq, 4, 3, y);
    put(&cq, 4, 4, img(1, 0x50));
    put(&cq, 4, 5, z);
    assert_eq!(cq.cq().clean(1, None).removed, 2);
    assert_eq!(cq.cq().consumer_index(), 4);
    let slot = |i: usize| {
        let mut b = [0u8; 64];
        cq.mem.read(64 * i, &mut b).unwrap();
        b
    };
    for (s, want) in [(0, y), (1, z)] {
        let got = slot(s);
        assert_eq!(got[..0x3e], want.0[..0x3e], "slot {s}");
        assert_eq!(got[0x3e], 0x5a);
        // Opcode and format moved, owner bit of pass 1.
        assert_eq!(got[63], (want.0[63] & !1) | 1, "slot {s}");
    }
    // Slots 2, 3 are behind the consumer index now: stale, of pass 0, so
    // the device owns them on the next pass.
    assert_eq!(slot(2)[63] & 1, 0);
    assert_eq!(slot(3)[63] & 1, 0);
}

/// A QP receiving through an SRQ (user index 1, QPN 0x51) shares the CQ
/// with an RC QP (user index 2); cleaning the first returns the SRQ WQEs
/// of its receive CQEs (one more names a WQE that is not posted and is
/// skipped), leaves the other QP's CQEs, and the SRQ can take the freed
/// WQEs again.
fn srq_clean(version: CqeVersion) {
    let uar = UarPage::new();
    let g = SrqGeometry::new(7, 1, &DeviceLimits::default()).unwrap();
    assert_eq!((g.wqe_cnt, g.max_wr), (8, 7));
    let l = SrqLayout::new(&g);
    let mem = HostBlock::new(l.total_bytes, 4096).unwrap();
    let mut srq = Srq::new(mem.lend(0, 0).unwrap(), 0x77, g)
        .map_err(|(e, _)| e)
        .unwrap();
    let mut a = make_qp_cfg(&rc(0x51, false), &uar, 0, 0);
    let mut b = make_qp_cfg(&rc(0x52, true), &uar, 0, 0);
    let mut cq = make_cq_version(&uar, 3, 6, version);
    let mut table = CqTable::<4>::new();
    table
        .insert(
            1,
            a.qp.completions(true, false, Some(srq.completions()))
                .unwrap(),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    table
        .insert(2, b.qp.completions(true, true, None).unwrap())
        .map_err(|(e, _)| e)
        .unwrap();
    for i in 0..7 {
        srq.post_recv(&RecvWr {
            wr_id: 0x500 + i,
            sgl: &SGE,
        })
        .unwrap();
    }
    assert_eq!(srq.available(), 0);
    for i in 0..3 {
        b.qp.rq()
            .unwrap()
            .post_recv(&RecvWr {
                wr_id: 0x600 + i,
                sgl: &SGE,
            })
            .unwrap();
    }
    // `srqn_uidx`: the user index (version 1) or the SRQN (version 0, 0
    // for a CQE that is not an SRQ's).
    let v1 = version == CqeVersion::V1;
    let srqn = if v1 { 1 } else { 0x77 };
    let (a_req, b_rq) = if v1 { (1, 2) } else { (0, 0) };
    // A: receives into SRQ WQEs 4, 0, 2 and a requester CQE; B: receives
    // 0, 1, 2 of its RQ; and one of A's naming SRQ WQE 7, never posted.
    let cqes = [
        CqeImage::new(2, 0)
            .qpn(0, 0x51)
            .uidx(srqn)
            .counter(4)
            .byte_cnt(8),
        CqeImage::new(2, 0)
            .qpn(0, 0x52)
            .uidx(b_rq)
            .counter(0)
            .byte_cnt(8),
        CqeImage::new(14, 0)
            .qpn(0, 0x51)
            .uidx(srqn)
            .counter(0)
            .syndrome(0, 5),
        CqeImage::new(2, 0)
            .qpn(0, 0x52)
            .uidx(b_rq)
            .counter(1)
            .byte_cnt(8),
        CqeImage::new(0, 0).qpn(0x08, 0x51).uidx(a_req).counter(0),
        CqeImage::new(2, 0)
            .qpn(0, 0x51)
            .uidx(srqn)
            .counter(2)
            .byte_cnt(8),
        CqeImage::new(2, 0)
            .qpn(0, 0x52)
            .uidx(b_rq)
            .counter(2)
            .byte_cnt(8),
        CqeImage::new(3, 0)
            .qpn(0, 0x51)
            .uidx(srqn)
            .counter(7)
            .byte_cnt(8),
    ];
    a.qp.sq().unwrap().post_send(&write(1)).unwrap();
    for (k, img) in cqes.iter().enumerate() {
        put(&cq, 8, 6 + k as u32, *img);
    }
    let h = table.remove(1).unwrap();
    let key = match version {
        CqeVersion::V1 => 1,
        CqeVersion::V0 => 0x51,
    };
    let r = if version == CqeVersion::V1 {
        cq.cq().clean_qp(1, &h)
    } else {
        cq.cq().clean(key, h.srq())
    };
    assert_eq!(
        r,
        CqClean {
            removed: 5,
            srq_freed: 3,
            srq_skipped: 1
        },
        "{version:?}"
    );
    drop(h);
    assert_eq!(srq.outstanding(), 4);
    assert_eq!(srq.available(), 3);
    // The freed WQEs take new work.
    for i in 0..3 {
        srq.post_recv(&RecvWr {
            wr_id: 0x700 + i,
            sgl: &SGE,
        })
        .unwrap();
    }
    assert_eq!(srq.available(), 0);
    // B's three receives, in order.
    let mut wc = [WorkCompletion::default(); 8];
    assert_eq!(cq.cq().poll(&table, &mut wc), Ok(3));
    let ids: Vec<u64> = wc[..3].iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [0x600, 0x601, 0x602]);
    assert_eq!(cq.cq().consumer_index(), 14);
    drop(table);
    drop(cq);
    a.reclaim();
    b.reclaim();
    mem.reclaim(srq.into_parts().unwrap()).unwrap();
}

#[test]
fn clean_returns_the_srq_wqes_of_the_cleaned_qp() {
    srq_clean(CqeVersion::V1);
    srq_clean(CqeVersion::V0);
}

#[test]
fn set_cqn_is_what_arm_rings() {
    let uar = UarPage::new();
    let mut cq = make_cq(&uar, 2, 0);
    assert_eq!(cq.cq().cqn(), 7);
    assert!(matches!(
        cq.cq().set_cqn(1 << 24),
        Err(Error::InvalidGeometry(_))
    ));
    assert_eq!(cq.cq().cqn(), 7);
    cq.cq().set_cqn(0xab_cdef).unwrap();
    assert_eq!(cq.cq().cqn(), 0xab_cdef);
    cq.cq().arm(false);
    let page = uar.bytes();
    // The 64-bit doorbell at UAR + 0x20: arm word, then the CQN.
    assert_eq!(page[0x24..0x28], 0x00ab_cdefu32.to_be_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        failure_persistence: None,
        ..Default::default()
    })]

    /// Any interleaving of two QPs' CQEs, any fill of the ring, any
    /// consumer index, both CQE versions.
    #[test]
    fn clean_leaves_exactly_the_other_qps_cqes_in_order(
        log in 1u8..5,
        ci in prop_oneof![Just(0u32), any::<u32>()],
        owners in proptest::collection::vec(any::<bool>(), 0..16),
        v0 in any::<bool>(),
    ) {
        let n = owners.len().min(1 << log);
        let version = if v0 { CqeVersion::V0 } else { CqeVersion::V1 };
        shared_cq_clean(log, ci, &owners[..n], version);
    }
}
