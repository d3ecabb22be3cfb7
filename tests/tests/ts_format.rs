//! The timestamp format of the QPs the driver creates (issue 10, item 6).
//! Linux chooses `qpc.ts_format` from `roce_cap.qp_ts_format`
//! (drivers/infiniband/hw/mlx5/qp.c `get_qp_ts_format`: free-running where
//! offered, otherwise the device's default); the driver does the same. The
//! recorded ConnectX-4 offers free-running only (0 in its caps), so its QPs
//! carry 0 as before; a device in real-time clock mode
//! (`EmuConfig::real_time_clock`, capability 1) refuses free-running, and
//! the driver's QPs carry 1 (default) there and work end to end.

use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd, Qp};
use std::sync::Arc;
use std::time::Duration;

use firmware_cmds::caps::{CAP_ROCE, TIMESTAMP_FORMAT_DEFAULT, TIMESTAMP_FORMAT_FREE_RUNNING};
use hca_driver::verbs::{AccessFlags, QpInitAttr, QpType, SendFlags, SendOp, SendWr};
use hca_driver::{CapMode, Config};
use hca_emu::{EmuConfig, EmuHca, EmuPlatform};
use hca_tests::verbs::{RcParams, connect_pair, poll_ok, post_recv_sge, qp_cap};
use hca_tests::{Bench, Link};

fn config() -> Config {
    let mut c = Config::default();
    c.timeouts.command = Duration::from_secs(3);
    c
}

/// `qpc.ts_format` of QP `qpn` as the emulated firmware holds it.
fn ts_format(emu: &EmuHca, qpn: u32) -> u8 {
    (emu.qp(qpn).expect("the QP exists").ctx[11] >> 6) & 3
}

fn qp_ts_on(emu: EmuConfig) -> (u64, u8) {
    let mut b = Bench::<EmuPlatform>::emulated(emu, config());
    b.with_open(|hca, emu| {
        let cap = hca
            .caps()
            .get(CAP_ROCE, "qp_ts_format", CapMode::Current)
            .unwrap();
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let mut got = Vec::new();
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            let qp = Qp::create(&pd, &QpInitAttr::new(t, &cq, &cq)).unwrap();
            got.push(ts_format(emu, qp.number().0));
        }
        assert!(got.windows(2).all(|w| w[0] == w[1]), "{got:?}");
        (cap, got[0])
    })
}

#[test]
fn the_recorded_card_gets_free_running() {
    assert_eq!(
        qp_ts_on(EmuConfig::default()),
        (0, TIMESTAMP_FORMAT_FREE_RUNNING)
    );
}

/// On a real-time-clock device the QP carries the device's default (1),
/// as Linux sends; free-running (0), which the driver used to send
/// whatever the caps said, is refused by the firmware (bad parameter,
/// syndrome `QP_TS_FORMAT`), so the old driver could create no QP there.
#[test]
fn a_real_time_clock_device_gets_the_default_format() {
    assert_eq!(
        qp_ts_on(EmuConfig::default().real_time_clock()),
        (1, TIMESTAMP_FORMAT_DEFAULT)
    );
}

/// End to end on two real-time-clock devices: RC send with the QPs the
/// driver now creates there.
#[test]
fn rc_traffic_on_real_time_clock_devices() {
    let mut l = Link::emulated(EmuConfig::default().real_time_clock(), config());
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb, pda, pdb, cqa, cqb) = h.sides(16).split();
        let bb = Arc::new(DmaBuf::alloc(h.b(), 4096).unwrap());
        let mb = Mr::register(&pdb, &bb, AccessFlags::LOCAL_WRITE).unwrap();
        let mut qa = Qp::create(
            &pda,
            &QpInitAttr::new(QpType::Rc, &cqa, &cqa).cap(qp_cap(4, 1, 1, 64)),
        )
        .unwrap();
        let mut qb = Qp::create(
            &pdb,
            &QpInitAttr::new(QpType::Rc, &cqb, &cqb).cap(qp_cap(1, 4, 1, 0)),
        )
        .unwrap();
        assert_eq!(
            ts_format(l.emu_a(), qa.number().0),
            TIMESTAMP_FORMAT_DEFAULT
        );
        connect_pair(
            (&ca, pa, &mut qa),
            (&cb, pb, &mut qb),
            (mb.addr(), mb.rkey()),
            &RcParams::default(),
        );
        post_recv_sge(&mut qb, 7, mb.sge(0, 64).unwrap());
        qa.post_send(
            &SendWr::new(1, SendOp::Send)
                .inline(b"real time")
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&cqb);
        assert_eq!((wc.wr_id, wc.byte_len), (7, 9));
        poll_ok(&cqa);
    }
    l.close(h);
}
