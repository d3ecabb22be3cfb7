//! CQ resize (`Cq::prepare_resize` / `Cq::finish_resize`, rdma-core's
//! `mlx5_cq_resize_copy_cqes`): the CQEs not yet polled, up to the
//! device's RESIZE_CQ CQE, move to the new ring one place on, across both
//! rings' wraps; the device's next CQE is found in the new ring; a missing
//! RESIZE_CQ CQE or a ring too small changes nothing.

mod common;

use common::*;
use platform::host::HostBlock;
use verbs_core::*;

const SGE: [Sge; 1] = [Sge {
    addr: 0x1000,
    length: 64,
    lkey: 0x11,
}];

/// A small RC QP numbered 0x41.
fn rc() -> QpConfig {
    qp_cfg(QpType::Rc, 0x41, &caps(16, 16, 1, 1))
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

/// Writes `b` as the CQE the device produces at counter `pc` of a ring of
/// `entries` in `mem` (owner bit of that pass).
fn put(mem: &HostBlock, entries: u32, pc: u32, mut b: [u8; 64]) {
    b[63] = (b[63] & !1) | ((pc / entries) & 1) as u8;
    mem.write(64 * (pc % entries) as usize, &b).unwrap();
}

fn cqe(qpn: u32, counter: u16) -> [u8; 64] {
    CqeImage::new(0, 0)
        .qpn(0x08, qpn)
        .uidx(1)
        .counter(counter)
        .0
}

fn resize_case(log: u8, ci: u32, n: u32, new_log: u8) {
    let uar = UarPage::new();
    let entries = 1u32 << log;
    let layout = CqLayout::new(log).unwrap();
    let mem = HostBlock::new(layout.total_bytes, 4096).unwrap();
    let cfg = CqConfig {
        cqn: 7,
        layout,
        version: CqeVersion::V1,
        uar_page_offset: 0,
    };
    let mut cq = Cq::with_consumer_index(mem.lend(0x200_0000, 0).unwrap(), &uar.window, &cfg, ci)
        .map_err(|(e, _)| e)
        .unwrap();
    let mut a = make_qp_cfg(&rc(), &uar, 0, 0);
    let qpn = a.qp.qpn();
    let mut table = cq_table::<4>([(1, a.qp.completions(true, true, None).unwrap())]);
    // n completions not polled, then the device's RESIZE_CQ CQE.
    let mut ids = Vec::new();
    for k in 0..n {
        let sq = a.qp.sq().unwrap();
        let counter = sq.cur_post() as u16;
        sq.post_send(&write(0x100 + u64::from(k))).unwrap();
        ids.push(0x100 + u64::from(k));
        put(&mem, entries, ci.wrapping_add(k), cqe(qpn, counter));
    }
    assert_eq!(cq.pending(), n);

    // Without the RESIZE_CQ CQE: refused, nothing changed.
    let nb = HostBlock::new(resize_region_bytes(new_log), 4096).unwrap();
    let ring = cq
        .prepare_resize(nb.lend(0x300_0000, 0).unwrap(), new_log)
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(ring.log_cq_size(), new_log);
    let (e, ring) = cq.finish_resize(ring).unwrap_err();
    assert!(matches!(e, Error::InvalidGeometry(_)), "{e:?}");
    assert_eq!((cq.entries(), cq.consumer_index()), (entries, ci));

    put(
        &mem,
        entries,
        ci.wrapping_add(n),
        CqeImage::new(verbs_core::cq::cqe_opcode::RESIZE_CQ, 0).0,
    );
    let old = cq.finish_resize(ring);
    if n >= 1 << new_log {
        // Too many for the new ring: refused, nothing changed.
        let (e, ring) = old.unwrap_err();
        assert!(matches!(e, Error::InvalidGeometry(_)), "{e:?}");
        assert_eq!((cq.entries(), cq.consumer_index()), (entries, ci));
        nb.reclaim(ring.into_region()).unwrap();
        let parts = cq.into_parts();
        mem.reclaim(parts.region).unwrap();
        assert!(parts.resized.is_none());
        drop(table.remove(1));
        a.reclaim();
        return;
    }
    assert!(old.map_err(|(e, _)| e).unwrap().is_none());
    let new_entries = 1u32 << new_log;
    assert_eq!(cq.entries(), new_entries);
    assert_eq!(cq.consumer_index(), ci.wrapping_add(1));
    // The doorbell record (in the first region) has the new index.
    let mut dbr = [0u8; 4];
    mem.read(64 * entries as usize, &mut dbr).unwrap();
    assert_eq!(dbr, (ci.wrapping_add(1) & 0xff_ffff).to_be_bytes());
    // The device goes on in the new ring after the RESIZE_CQ CQE.
    let sq = a.qp.sq().unwrap();
    let counter = sq.cur_post() as u16;
    sq.post_send(&write(0x999)).unwrap();
    ids.push(0x999);
    let pc = ci.wrapping_add(n + 1);
    let mut b = cqe(qpn, counter);
    b[63] = (b[63] & !1) | ((pc >> new_log) & 1) as u8;
    nb.write(64 * (pc & (new_entries - 1)) as usize, &b)
        .unwrap();
    // All of them, in order.
    let mut wc = [WorkCompletion::default(); 64];
    let got = cq.poll(&table, &mut wc).unwrap();
    let got: Vec<u64> = wc[..got].iter().map(|w| w.wr_id).collect();
    assert_eq!(got, ids);
    assert_eq!(cq.poll(&table, &mut wc), Ok(0));
    assert_eq!(cq.pending(), 0);
    drop(table.remove(1));
    let parts = cq.into_parts();
    mem.reclaim(parts.region).unwrap();
    nb.reclaim(parts.resized.unwrap()).unwrap();
    a.reclaim();
}

#[test]
fn resize_up_across_the_wrap() {
    resize_case(3, 6, 4, 5);
}

#[test]
fn resize_down_with_completions_outstanding() {
    resize_case(4, 0xff_fffe, 5, 3);
}

#[test]
fn resize_empty() {
    resize_case(3, 3, 0, 2);
}

#[test]
fn resize_too_small_is_refused() {
    resize_case(4, 9, 4, 2);
}
