//! Runs the `raw_capture` example (tests/examples/raw_capture.rs): the
//! capture convenience layer (`hca_driver::capture`) on two emulated
//! HCAs, every frame sent captured in order through the repost loop, the
//! loop's figures right, and a loop with no traffic ending on its timeout.

#[path = "../examples/raw_capture.rs"]
mod example;

#[test]
fn the_raw_capture_example_captures_every_frame_in_order() {
    // More frames than receive buffers: the loop reposts.
    let (stats, seen) = example::run(100).unwrap();
    assert_eq!(seen, (0..100).collect::<Vec<u32>>());
    assert_eq!(stats.frames, 100);
    assert_eq!(stats.errors, 0);
    assert!(!stats.timed_out);
    assert!(stats.bytes >= 100 * 60);
}

#[test]
fn a_loop_without_traffic_ends_on_its_timeout() {
    let (stats, seen) = example::run(0).unwrap();
    assert!(seen.is_empty());
    assert_eq!(stats.frames, 0);
    assert!(stats.timed_out);
}

/// The repost loop asleep on its completion channel, woken by frames a
/// sender thread puts on the wire while it waits (real time).
#[test]
fn the_repost_loop_sleeps_on_its_channel_and_wakes_for_frames() {
    use std::sync::Arc;
    use std::time::Duration;

    use hca_driver::Config;
    use hca_driver::capture::{Flow, RawContextBuilder, RawSlots};
    use hca_driver::steering::FlowMatch;
    use hca_driver::verbs::{AccessFlags, DmaBuf, Mr, QpState, SendFlags, SendOp, SendWr};
    use hca_tests::Link;

    let mut l = Link::emulated_real_time(Config::default());
    let h = l.open();
    {
        let (ha, hb) = (h.a.clone(), h.b().clone());
        let mac_a = ha.info().ports[0].mac.unwrap();
        let mac_b = hb.info().ports[0].mac.unwrap();
        let mut rx = RawContextBuilder::new(1)
            .send_wr(0)
            .recv_wr(8)
            .build(&hb)
            .unwrap();
        let slots = RawSlots::new(&rx, 8, 2048).unwrap();
        let wrs = slots.recv_wrs();
        let t = hb.create_flow_table(0, 1, None).unwrap();
        let all = FlowMatch::default();
        let g = t.create_group(0, 0, &all).unwrap();
        let rule = g.add_qp_rule(0, &all, &[&rx.qp], &[]).unwrap();
        t.set_root().unwrap();
        rx.post_recv_wrs(&wrs).unwrap();
        let before = rx.recv_channel.cqs();
        assert_eq!(before, 1);

        let sender = std::thread::spawn(move || {
            let mut tx = RawContextBuilder::new(1)
                .send_wr(8)
                .recv_wr(0)
                .build(&ha)
                .unwrap();
            tx.bring_up(QpState::Rts).unwrap();
            let sbuf = Arc::new(DmaBuf::alloc(&ha, 4096).unwrap());
            let smr = Mr::register(&tx.pd, &sbuf, AccessFlags::LOCAL_WRITE).unwrap();
            for seq in 0..20u32 {
                // The receiver is asleep by now.
                std::thread::sleep(Duration::from_millis(5));
                let f = example::udp_frame(mac_b, mac_a, seq);
                sbuf.write(0, &f[18..]).unwrap();
                let sge = smr.sge(0, (f.len() - 18) as u32).unwrap();
                tx.post_send_wrs(&[SendWr::new(u64::from(seq), SendOp::Send)
                    .eth_headers(&f[..18])
                    .sgl(&[sge])
                    .flags(SendFlags::SIGNALED)])
                    .unwrap();
                tx.wait_send(Duration::from_secs(5)).unwrap().unwrap();
            }
        });
        let mut n = 0;
        let stats = rx
            .repost_loop_posted(&wrs, Duration::from_secs(5), |_, _| {
                n += 1;
                if n == 20 { Flow::Stop } else { Flow::Continue }
            })
            .unwrap();
        sender.join().unwrap();
        assert_eq!(stats.frames, 20);
        assert!(!stats.timed_out);
        drop(rule);
        drop(g);
        drop(t);
    }
    l.close(h);
    l.assert_clean();
}
