//! BlueFlame only through a write-combining mapping (issue 10, item 7).
//! rdma-core's mlx5 provider copies no WQE through a non-cached UAR
//! mapping (it maps UARs `MLX5_UAR_TYPE_NC` only with BlueFlame shut off,
//! and `post_send` copies only when it is not), and vfio-pci maps BARs
//! uncached. The driver asks the platform
//! (`Platform::bar_write_combining`) and, on an uncached mapping, rings the
//! QP's doorbell only; the emulator, told its mapping is uncached, counts
//! any store beyond a BlueFlame register's doorbell word and fails
//! `assert_clean`.

use hca_driver::verbs::DmaBuf;
use hca_driver::verbs::{Mr, Qp};
use std::sync::Arc;
use std::time::Duration;

use hca_driver::Config;
use hca_driver::verbs::{AccessFlags, QpInitAttr, QpType, SendFlags, SendOp, SendWr};
use hca_emu::{EmuConfig, EmuPlatform};
use hca_tests::Link;
use hca_tests::verbs::{RcParams, connect_pair, poll_ok, post_recv_sge, qp_cap};
use platform::Platform;

/// Sends `count` inline messages over an RC QP created with
/// `blueflame(true)` from side A to side B; returns the send-doorbell
/// stores side A's device saw, as `(page offset, width)`.
fn inline_sends(l: &mut Link<EmuPlatform>, count: usize) -> Vec<(usize, u8)> {
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
                .cap(qp_cap(32, 1, 1, 128))
                .blueflame(true),
        )
        .unwrap();
        let mut qb = Qp::create(
            &pdb,
            &QpInitAttr::new(QpType::Rc, &cqb, &cqb).cap(qp_cap(1, 32, 1, 0)),
        )
        .unwrap();
        connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (mb.addr(), mb.rkey()),
            &RcParams::default(),
        );
        for i in 0..count {
            post_recv_sge(&mut qb, i as u64, mb.sge(256 * i, 256).unwrap());
            let data = vec![i as u8 + 1; 100];
            qa.post_send(
                &SendWr::new(i as u64, SendOp::Send)
                    .inline(&data)
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let wc = poll_ok(&cqb);
            assert_eq!((wc.wr_id, wc.byte_len), (i as u64, 100));
            let mut got = vec![0u8; 100];
            bb.read(256 * i, &mut got).unwrap();
            assert_eq!(got, data);
            poll_ok(&cqa);
        }
    }
    let doorbells = l
        .emu_a()
        .datapath()
        .doorbells
        .iter()
        .map(|d| (d.offset, d.width))
        .collect();
    l.close(h);
    doorbells
}

fn link(write_combining: bool) -> Link<EmuPlatform> {
    let mut c = Config::default();
    c.timeouts.command = Duration::from_secs(3);
    Link::emulated(
        EmuConfig {
            uar_write_combining: write_combining,
            ..EmuConfig::default()
        },
        c,
    )
}

/// Uncached (as under vfio): every post is one 8-byte doorbell at the
/// start of a register half, no BlueFlame data, and the emulator is clean.
#[test]
fn uncached_uar_rings_doorbells_only() {
    let mut l = link(false);
    assert!(!l.emu_a().platform().bar_write_combining(0));
    let db = inline_sends(&mut l, 4);
    assert_eq!(db.len(), 4, "{db:x?}");
    for (offset, width) in &db {
        assert_eq!(offset & 0xff, 0, "{db:x?}");
        assert_eq!(*width, 8);
    }
    assert_eq!(l.emu_a().uncached_blueflame_stores(), 0);
    l.assert_clean();
}

/// Write-combining: the same posts go by BlueFlame (the rest of the WQE
/// follows the doorbell word in the register), so the uncached case above
/// really tests something.
#[test]
fn write_combining_uar_copies_by_blueflame() {
    let mut l = link(true);
    assert!(l.emu_a().platform().bar_write_combining(0));
    let db = inline_sends(&mut l, 4);
    assert!(
        db.iter().any(|(offset, _)| offset & 0xff >= 8),
        "no BlueFlame data stores: {db:x?}"
    );
    l.assert_clean();
}

/// What the old driver did (BlueFlame whatever the mapping), seen by the
/// emulator with an uncached mapping: counted, and `assert_clean` fails.
#[test]
fn blueflame_through_an_uncached_mapping_fails_assert_clean() {
    use platform::Mmio;
    let l = link(false);
    let emu = l.emu_a();
    let bar = emu.platform().map_bar(0).unwrap();
    // The second 8 bytes of the first BlueFlame half of UAR page 1 (16 KiB
    // init segment, then 4 KiB UAR pages): no UAR is allocated, so the
    // device itself ignores it; the mapping rule still sees a copy.
    let page = 0x4000;
    bar.write64(page + 0x800, platform::Be64::new(0));
    assert_eq!(
        emu.uncached_blueflame_stores(),
        0,
        "the doorbell word is fine"
    );
    bar.write_bf(page + 0x808, &[platform::Be64::new(0); 7]);
    assert_eq!(emu.uncached_blueflame_stores(), 7);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| emu.assert_clean()));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(
        msg.contains("BlueFlame stores through an uncached"),
        "{msg}"
    );
}
