//! Packet pacing (issue 15, for perftest's `raw_ethernet_burst_lat`): a
//! raw packet QP's send rate limited by the device (`IBV_QP_RATE_LIMIT`,
//! `ibv_modify_qp_rate_limit`), through the QoS capabilities, the
//! rate-limit table (SET_PP_RATE_LIMIT) and MODIFY_SQ's
//! `packet_pacing_rate_limit_index`, as mlx5_ib does it. The recorded
//! ConnectX-4 has no packet pacing (`cmd_hca_cap.qos` 0); the emulated
//! ConnectX-5 has.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firmware_cmds::Opcode;
use firmware_cmds::status::CmdStatus;
use hca_driver::verbs::{
    AccessFlags, DmaBuf, Mr, Qp, QpAttr, QpAttrMask, QpInitAttr, QpState, QpType, RateLimit,
    SendFlags,
};
use hca_driver::{Config, Error, MAX_RATE_ENTRIES};
use hca_emu::{Clock, EmuConfig, EmuHca, EmuPlatform, Personality};
use hca_tests::steer::{MAC_B, raw_attr, raw_qp, send_frame, udp4_frame};
use hca_tests::{Link, Sides};

type P = EmuPlatform;

fn link(personality: Personality) -> Link<P> {
    Link::emulated(
        EmuConfig {
            personality,
            ..EmuConfig::default()
        },
        Config::default(),
    )
}

/// Two ConnectX-5s on the real-time clock: the device's pacing waits end
/// as host time passes, while the test polls (on the virtual clock they
/// end only when the test advances time).
fn real_time_cx5() -> Link<P> {
    Link::emulated(
        EmuConfig {
            personality: Personality::ConnectX5,
            clock: Clock::Real,
            ..EmuConfig::default()
        },
        Config::default(),
    )
}

/// SET_PP_RATE_LIMIT commands the device completed.
fn pp_writes(e: &EmuHca) -> usize {
    e.command_log()
        .iter()
        .filter(|c| c.opcode == Opcode::SET_PP_RATE_LIMIT.0 && c.status == 0)
        .count()
}

#[test]
fn connectx4_has_no_packet_pacing_and_refuses_a_rate_with_a_typed_error() {
    let mut l = link(Personality::ConnectX4);
    let h = l.open();
    {
        let Sides { ca, pda, cqa, .. } = h.sides(16);
        assert_eq!(h.a.packet_pacing(), None);
        assert_eq!(ca.query_device().packet_pacing, None);
        let mut q = raw_qp(&pda, &cqa, 4, 0);
        let e = q
            .modify(&QpAttr::new().state(QpState::Rts).rate_limit(10_000))
            .unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        let e = q.set_rate_limit(RateLimit::kbps(10_000)).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        // No pacing asked for is no command.
        q.modify(&QpAttr::new().state(QpState::Rts).rate_limit(0))
            .unwrap();
        assert_eq!(q.rate_limit(), RateLimit::default());
        assert_eq!(pp_writes(l.emu_a()), 0);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn connectx5_reports_its_packet_pacing_caps() {
    let mut l = link(Personality::ConnectX5);
    let h = l.open();
    {
        let Sides { ca, .. } = h.sides(16);
        let pp = h.a.packet_pacing().expect("a ConnectX-5 paces");
        assert!(pp.max_rate_kbps > pp.min_rate_kbps, "{pp:?}");
        assert!(pp.table_size > 1, "{pp:?}");
        assert_eq!(ca.query_device().packet_pacing, Some(pp));
        assert!(h.a.rate_table().is_empty());
    }
    l.close(h);
    l.assert_clean();
}

/// Sends `n` frames of `len` bytes from `q` (its CQ `cq`), one at a time,
/// each completed; returns the time from the first post to the last
/// completion.
fn send_frames(
    q: &mut Qp<P>,
    cq: &hca_driver::verbs::Cq<P>,
    mr: &Mr<P>,
    buf: &DmaBuf<P>,
    n: usize,
    len: usize,
) -> Duration {
    let payload = vec![0x5a; len - 42];
    let f = udp4_frame(MAC_B, 1, 2, &payload).build();
    assert_eq!(f.len(), len);
    let t = Instant::now();
    for _ in 0..n {
        send_frame(q, cq, mr, buf, &f, SendFlags::NONE);
    }
    t.elapsed()
}

#[test]
fn a_paced_raw_qp_sends_no_faster_than_its_rate_and_gives_its_entry_back() {
    let mut l = real_time_cx5();
    let h = l.open();
    {
        let ea = l.emu_a();
        let Sides { pda, cqa, .. } = h.sides(64);
        let buf = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let mr = Mr::register(&pda, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        let mut q = Qp::create(&pda, &raw_attr(&cqa, 8, 0)).unwrap();
        q.modify(&QpAttr::new().state(QpState::Init).port(1))
            .unwrap();
        q.modify(&QpAttr::new().state(QpState::Rtr)).unwrap();
        // 8000 kbit/s, frames of 1000 bytes: one frame per millisecond
        // at the most, so 21 frames take at least 20 ms whatever the
        // machine (a lower bound: the device may be slower, never
        // faster).
        q.modify(&QpAttr::new().state(QpState::Rts).rate_limit(8_000))
            .unwrap();
        assert_eq!(q.rate_limit(), RateLimit::kbps(8_000));
        assert_eq!(q.query().unwrap().rate_limit, 8_000);
        assert_eq!(
            h.a.rate_table().as_slice(),
            &[(1, RateLimit::kbps(8_000), 1)]
        );
        assert_eq!(pp_writes(ea), 1);
        let took = send_frames(&mut q, &cqa, &mr, &buf, 21, 1000);
        assert!(
            took >= Duration::from_millis(20),
            "21 frames of 1000 bytes at 8 Mb/s in {took:?}"
        );

        // Unpaced again: MODIFY_SQ to index 0, the entry cleared.
        q.set_rate_limit(RateLimit::default()).unwrap();
        assert_eq!(q.rate_limit(), RateLimit::default());
        assert!(h.a.rate_table().is_empty());
        assert_eq!(pp_writes(ea), 2, "the entry is cleared");
        send_frames(&mut q, &cqa, &mr, &buf, 4, 1000);

        // Paced again, then destroyed while paced: the entry goes with
        // the SQ.
        q.set_rate_limit(RateLimit {
            rate_kbps: 50_000,
            max_burst_bytes: 4096,
            typical_packet_bytes: 1000,
        })
        .unwrap();
        assert_eq!(h.a.rate_table().len(), 1);
        q.destroy().unwrap();
        assert!(h.a.rate_table().is_empty());
        assert_eq!(pp_writes(ea), 4);
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn qps_at_one_rate_share_its_entry_and_the_last_user_clears_it() {
    let mut l = link(Personality::ConnectX5);
    let h = l.open();
    {
        let ea = l.emu_a();
        let Sides { pda, cqa, .. } = h.sides(64);
        let mut a = raw_qp(&pda, &cqa, 4, 0);
        let mut b = raw_qp(&pda, &cqa, 4, 0);
        a.set_rate_limit(RateLimit::kbps(100_000)).unwrap();
        b.set_rate_limit(RateLimit::kbps(100_000)).unwrap();
        assert_eq!(
            h.a.rate_table().as_slice(),
            &[(1, RateLimit::kbps(100_000), 2)]
        );
        assert_eq!(pp_writes(ea), 1, "one entry for both");
        // A different burst is a different entry.
        b.set_rate_limit(RateLimit {
            max_burst_bytes: 3000,
            ..RateLimit::kbps(100_000)
        })
        .unwrap();
        assert_eq!(h.a.rate_table().len(), 2);
        drop(a);
        assert_eq!(h.a.rate_table().len(), 1);
        // The same rate on the same QP is no command.
        let n = pp_writes(ea);
        b.set_rate_limit(b.rate_limit()).unwrap();
        assert_eq!(pp_writes(ea), n);
        drop(b);
        assert!(h.a.rate_table().is_empty());
        assert_eq!(pp_writes(ea), 4, "two writes, two clears");
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn bad_rates_and_wrong_qps_get_typed_errors_and_keep_the_old_rate() {
    let mut l = link(Personality::ConnectX5);
    let h = l.open();
    {
        let ea = l.emu_a();
        let Sides { pda, cqa, .. } = h.sides(64);
        let pp = h.a.packet_pacing().unwrap();
        let mut q = raw_qp(&pda, &cqa, 4, 0);
        q.set_rate_limit(RateLimit::kbps(20_000)).unwrap();
        let writes = pp_writes(ea);

        // Above the device's range.
        let e = q
            .set_rate_limit(RateLimit::kbps(pp.max_rate_kbps + 1))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidAttribute {
                    attr: "rate_limit",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(q.rate_limit(), RateLimit::kbps(20_000));
        assert_eq!(pp_writes(ea), writes, "refused before any command");

        // Not at RTR to RTS or RTS to RTS: the transition table refuses.
        let mut fresh = Qp::create(&pda, &raw_attr(&cqa, 4, 0)).unwrap();
        let e = fresh
            .modify(&QpAttr::new().state(QpState::Init).port(1).rate_limit(1000))
            .unwrap_err();
        assert!(
            matches!(e, Error::QpAttrMask { forbidden, .. } if forbidden == QpAttrMask::RATE_LIMIT),
            "{e}"
        );
        let e = fresh.set_rate_limit(RateLimit::kbps(1000)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidAttribute {
                    attr: "rate_limit",
                    ..
                }
            ),
            "{e}"
        );
        // Not a raw packet QP.
        let mut ud = Qp::create(&pda, &QpInitAttr::new(QpType::Ud, &cqa, &cqa)).unwrap();
        let e = ud.set_rate_limit(RateLimit::kbps(1000)).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        // A raw packet QP without a send queue.
        let mut rx = raw_qp(&pda, &cqa, 0, 4);
        let e = rx.set_rate_limit(RateLimit::kbps(1000)).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");

        // The device refuses the MODIFY_SQ: the new entry is given back,
        // the old rate stays.
        let rule =
            ea.faults()
                .fail_opcode_nth(Opcode::MODIFY_SQ.0, 1, CmdStatus::BAD_PARAM.0, 0x1234);
        let e = q.set_rate_limit(RateLimit::kbps(30_000)).unwrap_err();
        assert!(matches!(e, Error::Command { .. }), "{e}");
        assert_eq!(ea.faults().hits(rule), 1);
        assert_eq!(q.rate_limit(), RateLimit::kbps(20_000));
        assert_eq!(
            h.a.rate_table().as_slice(),
            &[(1, RateLimit::kbps(20_000), 1)]
        );
        // The device refuses the SET_PP_RATE_LIMIT: nothing changes.
        let rule = ea.faults().fail_opcode_nth(
            Opcode::SET_PP_RATE_LIMIT.0,
            1,
            CmdStatus::BAD_PARAM.0,
            0x1234,
        );
        let e = q.set_rate_limit(RateLimit::kbps(30_000)).unwrap_err();
        assert!(matches!(e, Error::Command { .. }), "{e}");
        assert_eq!(ea.faults().hits(rule), 1);
        assert_eq!(
            h.a.rate_table().as_slice(),
            &[(1, RateLimit::kbps(20_000), 1)]
        );
        q.set_rate_limit(RateLimit::kbps(30_000)).unwrap();
        assert_eq!(
            h.a.rate_table().as_slice(),
            &[(2, RateLimit::kbps(30_000), 1)]
        );
    }
    l.close(h);
    l.assert_clean();
}

#[test]
fn a_full_rate_table_is_a_typed_error() {
    let mut l = link(Personality::ConnectX5);
    let h = l.open();
    {
        let Sides { pda, cqa, .. } = h.sides(16);
        let pp = h.a.packet_pacing().unwrap();
        let n = pp.usable_entries();
        assert!(n <= MAX_RATE_ENTRIES);
        let mut qps: Vec<Qp<P>> = (0..=n).map(|_| raw_qp(&pda, &cqa, 1, 0)).collect();
        for (i, q) in qps.iter_mut().take(n).enumerate() {
            q.set_rate_limit(RateLimit::kbps(1000 + i as u32)).unwrap();
        }
        assert_eq!(h.a.rate_table().len(), n);
        let e = qps[n].set_rate_limit(RateLimit::kbps(999)).unwrap_err();
        assert!(
            matches!(e, Error::CapacityExceeded { capacity, .. } if capacity == n),
            "{e}"
        );
        // A rate already in the table still fits.
        qps[n].set_rate_limit(RateLimit::kbps(1000)).unwrap();
        drop(qps);
        assert!(h.a.rate_table().is_empty());
    }
    l.close(h);
    l.assert_clean();
}
