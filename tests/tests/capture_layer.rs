//! The capture layer's helpers (`hca_driver::capture`) on two emulated
//! ConnectX-4s cabled port to port: [`RawSlots`] as receive and send
//! buffers, [`RawContext::steered`] / [`with_steering`] steering exactly
//! the frames a match selects for as long as a closure runs, the CQE
//! timestamps on the device clock the internal timer shows, and
//! [`DeviceClock`] anchoring them to the host.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::capture::{DeviceClock, RawContext, RawContextBuilder, RawSlots, with_steering};
use hca_driver::steering::{FlowMatch, FlowSpec, Masked};
use hca_driver::verbs::{
    Completion, Context, QpState, RxCqe, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};
use hca_driver::{Config, Error, Hca};
use hca_emu::frame::{Frame, L3, L4};
use hca_emu::{EmuConfig, EmuPlatform};
use hca_tests::Link;

const PORT: u16 = 4660;
/// Bytes of the L2 headers inlined in each send.
const HDR: usize = 18;

fn udp(dst: [u8; 6], src: [u8; 6], dport: u16, seq: u8) -> Vec<u8> {
    Frame::new(dst, src)
        .l3(L3::V4([192, 168, 0, 1], [192, 168, 0, 2]))
        .l4(L4::Udp(1000, dport))
        .payload(&[seq; 40])
        .build()
}

fn udp_match(port: u16) -> FlowMatch {
    FlowMatch::from_specs(&[FlowSpec::Udp {
        src_port: Masked::default(),
        dst_port: Masked::exact(port, 0xffff),
    }])
    .unwrap()
}

/// Sends `f` from `tx` through send slot 0 and waits for its completion.
fn send(tx: &mut RawContext<EmuPlatform>, slots: &RawSlots<EmuPlatform>, f: &[u8]) {
    slots.write(0, 0, &f[HDR..]).unwrap();
    let sge = slots.sge(0, (f.len() - HDR) as u32).unwrap();
    tx.post_send_wrs(&[SendWr::new(1, SendOp::Send)
        .eth_headers(&f[..HDR])
        .sgl(&[sge])
        .flags(SendFlags::SIGNALED)])
        .unwrap();
    let wc = tx.wait_send(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(wc.status, WcStatus::Success);
}

/// The next receive completion within `wait` of real time.
fn next_rx(rx: &RawContext<EmuPlatform>, wait: Duration) -> Option<(WorkCompletion, RxCqe)> {
    let (mut c, mut cqe) = (Completion::default(), RxCqe::default());
    let end = Instant::now() + wait;
    while Instant::now() < end {
        if rx.recv_cq.poll_one_rx(&mut c, &mut cqe).unwrap() {
            return Some((WorkCompletion::from(c), cqe));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// A raw context on port 1 of `h` with `send` and `recv` work requests.
fn raw(h: &Arc<Hca<EmuPlatform>>, send: u32, recv: u32) -> RawContext<EmuPlatform> {
    RawContextBuilder::new(1)
        .send_wr(send)
        .recv_wr(recv)
        .build(h)
        .unwrap()
}

fn macs(ha: &Arc<Hca<EmuPlatform>>, hb: &Arc<Hca<EmuPlatform>>) -> ([u8; 6], [u8; 6]) {
    let m = |h: &Arc<Hca<EmuPlatform>>| h.info().ports[0].mac.unwrap();
    (m(ha), m(hb))
}

#[test]
fn steered_slots_take_the_matching_frames_with_device_clock_timestamps() {
    // Real time: the device clock advances between the frames.
    let mut l = Link::emulated_real_time(Config::default());
    let h = l.open();
    {
        let (ha, hb) = (h.a.clone(), h.b().clone());
        let (mac_a, mac_b) = macs(&ha, &hb);
        let mut rx = raw(&hb, 0, 4);
        let rslots = RawSlots::new(&rx, 4, 256).unwrap();
        for i in 0..4 {
            rx.post_recv_slot(&rslots, i).unwrap();
        }
        assert_eq!(rx.qp.state(), QpState::Rtr, "posting moved it to RTR");
        let mut tx = raw(&ha, 4, 0);
        let tslots = RawSlots::new(&tx, 1, 256).unwrap();
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| udp(mac_b, mac_a, if i == 1 { PORT + 1 } else { PORT }, i))
            .collect();

        let before_drops = l.emu_b().datapath().drops.steering_miss;
        let (got, t0, t1) = rx
            .steered(&udp_match(PORT), |rx| {
                let t0 = hb.internal_timer()?;
                for f in &frames {
                    send(&mut tx, &tslots, f);
                }
                let mut got = Vec::new();
                while let Some((wc, cqe)) = next_rx(rx, Duration::from_secs(2)) {
                    assert_eq!(wc.status, WcStatus::Success);
                    let mut b = Vec::new();
                    rslots.read_frame(&wc, &mut b)?;
                    got.push((b, cqe.timestamp()));
                    if got.len() == 2 {
                        break;
                    }
                }
                let t1 = hb.internal_timer()?;
                Ok((got, t0, t1))
            })
            .unwrap();
        // Exactly frames 0 and 2 (port 4661 is not the rule's), whole.
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, frames[0]);
        assert_eq!(got[1].0, frames[2]);
        // The CQE timestamps are the clock the internal timer shows,
        // strictly increasing between frames sent one after the other.
        let (a, b) = (got[0].1, got[1].1);
        assert!(t0 <= a && a < b && b <= t1, "{t0} {a} {b} {t1}");
        // The rule is gone: a matching frame now misses (no root table).
        send(&mut tx, &tslots, &frames[0]);
        assert!(next_rx(&rx, Duration::from_millis(200)).is_none());
        let drops = l.emu_b().datapath().drops.steering_miss - before_drops;
        assert!(drops >= 1, "steering misses {drops}");

        // The clock anchored now maps the internal timer's ticks to host
        // time at its rate (275 MHz recorded): a tick read a moment later
        // lands a moment after the anchor.
        assert_eq!(hb.device_clock_khz(), 275_000);
        let c = DeviceClock::anchor(&hb, || Duration::from_secs(1000)).unwrap();
        assert_eq!(c.at_host(), Duration::from_secs(1000));
        let later = hb.internal_timer().unwrap();
        let dt = c.host_time(later) - Duration::from_secs(1000);
        assert!(dt < Duration::from_secs(5), "{dt:?}");
        rx.close().unwrap();
        drop(tx);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn steering_helpers_and_slots_refuse_bad_input_and_clean_up_after_errors() {
    let mut l = Link::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    {
        let hb = h.b().clone();
        // A send-only context has no TIR to steer to.
        let mut tx = raw(&hb, 4, 0);
        assert!(matches!(tx.tir(), Err(Error::InvalidArgument { .. })));
        assert!(matches!(
            tx.steered(&FlowMatch::default(), |_| Ok(())),
            Err(Error::InvalidArgument { .. })
        ));
        drop(tx);
        // In a verbs context of the caller's: the same context, the port
        // checked.
        let ctx = Arc::new(Context::open(&hb).unwrap());
        let c = RawContextBuilder::new(1)
            .send_wr(1)
            .recv_wr(0)
            .build_in(&ctx)
            .unwrap();
        assert!(Arc::ptr_eq(&c.ctx, &ctx));
        drop(c);
        assert!(matches!(
            RawContextBuilder::new(9).build_in(&ctx),
            Err(Error::InvalidAttribute { .. })
        ));
        let mut rx = raw(&hb, 0, 4);
        // Slots: none, or past the end.
        assert!(matches!(
            RawSlots::new(&rx, 0, 64),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            RawSlots::new(&rx, 4, 0),
            Err(Error::InvalidArgument { .. })
        ));
        let s = RawSlots::new(&rx, 4, 64).unwrap();
        assert_eq!((s.count(), s.slot_size()), (4, 64));
        assert!(s.sge(4, 1).is_err() && s.sge(0, 65).is_err() && s.sge(3, 64).is_ok());
        assert!(s.write(0, 60, &[0; 5]).is_err() && s.write(3, 0, &[1; 64]).is_ok());
        assert!(rx.post_recv_slot(&s, 4).is_err());
        // A completion the device could not have made is refused.
        let mut out = Vec::new();
        let wc = |wr_id, byte_len| WorkCompletion {
            wr_id,
            byte_len,
            ..WorkCompletion::default()
        };
        assert!(s.read_frame(&wc(4, 10), &mut out).is_err());
        assert!(s.read_frame(&wc(0, 65), &mut out).is_err());
        s.read_frame(&wc(3, 64), &mut out).unwrap();
        assert_eq!(out, vec![1; 64]);
        // The closure's error is the inner result; the rule, group and
        // table are removed after it (a second steering can take the
        // root and entry again).
        let tir = rx.tir().unwrap();
        let r: Result<(), &str> = with_steering(&hb, &FlowMatch::default(), tir, || Err("no"))
            .expect("the steering itself worked");
        assert_eq!(r, Err("no"));
        let n = rx.steered(&udp_match(PORT), |rx| Ok(rx.port())).unwrap();
        assert_eq!(n, 1);
        rx.close().unwrap();
    }
    l.close(h);
    l.assert_clean();
}
