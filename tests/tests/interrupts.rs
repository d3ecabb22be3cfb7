//! MSI-X interrupts: the driver's waits sleep on the EQs' vectors and wake
//! on their interrupts, with both emulator clocks and both execution modes;
//! an interrupt raised before a wait is not lost; a wait with nothing to
//! come times out with the timeout error; polling mode still works and
//! never sleeps on an interrupt. The command-wait scenarios also run on a
//! real device (`HCA_PCI=<bdf>`, through the vfio backend's eventfds); the
//! CQ-event scenario on a link is in `interrupts_link.rs`.

use hca_driver::verbs::{Context, Cq};
use std::sync::Arc;
use std::time::Duration;

use hca_driver::{Config, Error, Hca, InterruptStats, Wait, WaitMode};
use hca_emu::{Clock, EmuConfig, EmuHca};
use hca_tests::{Bench, Minimal, TestPlatform, scenarios};
use platform::Platform;

/// Commands each scenario runs.
const COMMANDS: u64 = 16;

/// ALLOC_PD and DEALLOC_PD `COMMANDS / 2` times.
fn run_commands<P: Platform>(hca: &Hca<P>) {
    for _ in 0..COMMANDS / 2 {
        hca.alloc_pd().unwrap().destroy().unwrap();
    }
}

fn delta(a: InterruptStats, b: InterruptStats) -> (u64, u64, u64) {
    (
        b.wakeups - a.wakeups,
        b.idle_sleeps - a.idle_sleeps,
        b.polls - a.polls,
    )
}

/// On interrupts, command waits sleep and interrupts wake them: no polling
/// step, at least one sleep per command.
fn command_waits_sleep_on_interrupts<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    let s0 = hca.interrupt_stats();
    assert_eq!(s0.mode, WaitMode::Interrupts, "{s0}");
    let want = hca.platform().msix_vectors().min(2);
    assert_eq!(s0.vectors, want, "{s0}");
    let (cmd_eq, async_eq) = hca.control_eqns();
    assert_eq!(hca.eq_vector(cmd_eq.unwrap()), Some(0));
    assert_eq!(hca.eq_vector(async_eq.unwrap()), Some(0));
    let comp = hca.comp_eqns().next().unwrap();
    assert_eq!(hca.eq_vector(comp), Some(want - 1));
    run_commands(&hca);
    let (wakeups, idle, polls) = delta(s0, hca.interrupt_stats());
    assert_eq!(polls, 0, "a command wait polled: {}", hca.interrupt_stats());
    // Whether a command is done at the first look depends on the device's
    // speed; the emulated tests below make every command take time.
    assert!(wakeups <= COMMANDS + idle, "{}", hca.interrupt_stats());
    b.close(hca);
}

/// With the polling mode, no vector is enabled and waits poll.
fn polling_mode_polls<P: TestPlatform>(b: &mut Bench<P>) {
    b.config.wait_mode = WaitMode::Polling;
    let hca = b.open();
    let s0 = hca.interrupt_stats();
    assert_eq!((s0.mode, s0.vectors), (WaitMode::Polling, 0), "{s0}");
    assert_eq!(hca.eq_vector(hca.comp_eqns().next().unwrap()), None);
    match hca.platform().interrupt_count(0) {
        Err(platform::Error::VectorNotEnabled { vector: 0, .. }) => {}
        r => panic!("vector 0 is enabled while polling: {r:?}"),
    }
    run_commands(&hca);
    let (wakeups, idle, _) = delta(s0, hca.interrupt_stats());
    assert_eq!((wakeups, idle), (0, 0));
    b.close(hca);
}

scenarios!(command_waits_sleep_on_interrupts, polling_mode_polls);

/// The emulator configurations the clock/execution tests run on: commands
/// take 20 µs of device time, so no command is done at the first look.
fn emu_configs() -> [EmuConfig; 3] {
    let slow = |c: EmuConfig| EmuConfig {
        command_latency: Duration::from_micros(20),
        ..c
    };
    [
        slow(EmuConfig::default()),
        slow(EmuConfig {
            clock: Clock::Real,
            ..EmuConfig::default()
        }),
        slow(EmuConfig::stepping()),
    ]
}

#[test]
fn every_command_wait_sleeps_and_an_interrupt_wakes_it_on_every_clock() {
    for cfg in emu_configs() {
        let what = format!("{:?}/{:?}", cfg.clock, cfg.execution);
        let mut b = Bench::emulated(cfg, Config::default());
        b.with_open(|hca, emu| {
            let i0 = emu.interrupts(0);
            let s0 = hca.interrupt_stats();
            run_commands(hca);
            let (wakeups, idle, polls) = delta(s0, hca.interrupt_stats());
            let irqs = emu.interrupts(0) - i0;
            assert_eq!(polls, 0, "{what}: {}", hca.interrupt_stats());
            assert!(
                wakeups + idle >= COMMANDS,
                "{what}: {}",
                hca.interrupt_stats()
            );
            assert!(wakeups >= 1, "{what}: {}", hca.interrupt_stats());
            // Each wakeup is one of the device's interrupts on vector 0.
            assert!(
                wakeups <= irqs && irqs >= COMMANDS,
                "{what}: {wakeups} wakeups, {irqs} interrupts"
            );
        });
        drop(b);
    }
}

#[test]
fn polling_mode_runs_commands_without_interrupt_waits_on_every_clock() {
    for cfg in emu_configs() {
        let what = format!("{:?}/{:?}", cfg.clock, cfg.execution);
        let config = Config {
            wait_mode: WaitMode::Polling,
            ..Config::default()
        };
        let mut b = Bench::emulated(cfg, config);
        b.with_open(|hca, _| {
            let s0 = hca.interrupt_stats();
            run_commands(hca);
            let (wakeups, idle, polls) = delta(s0, hca.interrupt_stats());
            assert_eq!((wakeups, idle), (0, 0), "{what}");
            assert!(polls >= COMMANDS, "{what}: {}", hca.interrupt_stats());
        });
    }
}

#[test]
fn an_interrupt_raised_before_the_wait_is_not_lost() {
    for cfg in emu_configs() {
        let what = format!("{:?}/{:?}", cfg.clock, cfg.execution);
        let mut b = Bench::emulated(cfg, Config::default());
        b.with_open(|hca, emu| {
            let seen = hca.interrupt_seen(0).expect("on interrupts");
            let i0 = emu.interrupts(0);
            // A page request on the asynchronous EQ (vector 0), delivered
            // and its interrupt raised before anyone waits.
            emu.faults().page_request(4);
            emu.run_until_idle();
            while emu.step() {}
            assert_eq!(emu.interrupts(0), i0 + 1, "{what}");
            let s0 = hca.interrupt_stats();
            // Were it lost, this would run to its (virtual or real) limit
            // and return false.
            assert!(
                hca.wait_interrupt(0, seen, Duration::from_secs(3600))
                    .unwrap(),
                "{what}: the interrupt was lost"
            );
            assert_eq!(delta(s0, hca.interrupt_stats()).0, 1);
            // The driver gives the pages; the EQ is re-armed.
            assert!(hca.poll_events().unwrap() >= 1);
            assert_eq!(hca.pending_page_requests(), 0);
        });
    }
}

#[test]
fn a_cq_wait_with_nothing_to_come_times_out_after_sleeping() {
    for cfg in emu_configs() {
        let what = format!("{:?}/{:?}", cfg.clock, cfg.execution);
        let mut b = Bench::emulated(cfg, Config::default());
        b.with_open(|hca, _| {
            let ctx = Arc::new(Context::open(hca).unwrap());
            let cq = Arc::new(Cq::create(&ctx, 4).unwrap());
            cq.req_notify(false);
            let s0 = hca.interrupt_stats();
            match cq.wait_event(Duration::from_millis(30)) {
                Err(Error::Timeout {
                    what: Wait::CompletionEvent { cqn },
                    after,
                }) => {
                    assert_eq!(cqn, cq.number());
                    assert!(after >= Duration::from_millis(30));
                }
                r => panic!("{what}: expected the completion event timeout, got {r:?}"),
            }
            let (wakeups, idle, polls) = delta(s0, hca.interrupt_stats());
            assert_eq!((wakeups, polls), (0, 0), "{what}");
            assert!(idle >= 1, "{what}: the wait never slept");
            let mut wc = [hca_driver::verbs::Completion::default(); 1];
            match cq.poll_wait(&mut wc, Duration::from_millis(30)) {
                Err(Error::Timeout {
                    what: Wait::Completion { .. },
                    ..
                }) => {}
                r => panic!("{what}: expected the completion timeout, got {r:?}"),
            }
            assert_eq!(
                delta(s0, hca.interrupt_stats()).2,
                0,
                "{what}: poll_wait polled"
            );
            drop(cq);
            drop(ctx);
        });
    }
}

#[test]
fn the_emulated_platform_checks_its_vectors() {
    let emu = EmuHca::new(EmuConfig::default());
    let p = emu.platform();
    assert_eq!(p.msix_vectors(), 64);
    match p.wait_interrupt(0, 0, Duration::ZERO) {
        Err(platform::Error::VectorNotEnabled {
            vector: 0,
            enabled: 0,
        }) => {}
        r => panic!("{r:?}"),
    }
    for n in [0, 65] {
        match p.enable_msix(n) {
            Err(platform::Error::TooManyVectors {
                requested,
                available: 64,
            }) if requested == n => {}
            r => panic!("{n}: {r:?}"),
        }
    }
    p.enable_msix(2).unwrap();
    assert_eq!(p.interrupt_count(1).unwrap(), 0);
    assert!(matches!(
        p.interrupt_count(2),
        Err(platform::Error::VectorNotEnabled {
            vector: 2,
            enabled: 2
        })
    ));
    // Nothing to come: the wait ends at its limit with the count unchanged.
    assert_eq!(p.wait_interrupt(1, 0, Duration::from_millis(5)).unwrap(), 0);
    p.disable_msix().unwrap();
    assert!(p.interrupt_count(0).is_err());
}

#[test]
fn a_platform_without_interrupts_is_polled() {
    let emu = EmuHca::new(EmuConfig {
        command_latency: Duration::from_micros(20),
        ..EmuConfig::default()
    });
    // The trait's default interrupt facility: a platform without interrupts
    // (bare metal without an interrupt hook).
    let p = Minimal(emu.platform(), "emulated ConnectX-4 without interrupts");
    assert_eq!(p.msix_vectors(), 0);
    assert!(matches!(
        p.enable_msix(1),
        Err(platform::Error::NotSupported(_))
    ));
    assert!(matches!(
        p.wait_interrupt(0, 0, Duration::ZERO),
        Err(platform::Error::NotSupported(_))
    ));
    assert!(p.disable_msix().is_ok());
    // Interrupts asked for (the default), none there: the driver polls.
    let hca = Arc::new(Hca::open(p, Config::default()).unwrap());
    let s0 = hca.interrupt_stats();
    assert_eq!((s0.mode, s0.vectors), (WaitMode::Polling, 0), "{s0}");
    run_commands(&hca);
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 4).unwrap());
        assert_eq!(hca.eq_vector(cq.eqn()), None);
        cq.req_notify(false);
        assert!(matches!(
            cq.wait_event(Duration::from_millis(5)),
            Err(Error::Timeout { .. })
        ));
    }
    let s1 = hca.interrupt_stats();
    let (wakeups, idle, polls) = delta(s0, s1);
    assert_eq!((wakeups, idle), (0, 0));
    assert!(polls >= COMMANDS, "{s1}");
    Arc::into_inner(hca)
        .expect("the last handle")
        .close()
        .unwrap();
    emu.assert_clean();
}

#[test]
fn threads_waiting_on_one_vector_all_complete() {
    for cfg in emu_configs().into_iter().take(2) {
        let what = format!("{:?}/{:?}", cfg.clock, cfg.execution);
        let mut b = Bench::emulated(cfg, Config::default());
        b.with_open(|hca, _| {
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for _ in 0..25 {
                            hca.alloc_pd().unwrap().destroy().unwrap();
                        }
                    });
                }
            });
            let st = hca.interrupt_stats();
            assert!(st.wakeups >= 1, "{what}: {st}");
        });
    }
}

#[test]
fn vectors_follow_what_the_platform_offers() {
    // Three completion EQs on 64 vectors: vector 0 for the command and
    // asynchronous EQs, 1, 2, 3 for the completion EQs.
    let config = Config {
        comp_eqs: 3,
        ..Config::default()
    };
    let mut b = Bench::emulated(EmuConfig::default(), config);
    b.with_open(|hca, _| {
        assert_eq!(hca.interrupt_stats().vectors, 4);
        let v: Vec<_> = hca.comp_eqns().map(|e| hca.eq_vector(e)).collect();
        assert_eq!(v, [Some(1), Some(2), Some(3)]);
    });
    // One vector: every EQ shares it, and waits still sleep and wake.
    let mut b = Bench::emulated(
        EmuConfig {
            msix_vectors: 1,
            command_latency: Duration::from_micros(20),
            ..EmuConfig::default()
        },
        config,
    );
    b.with_open(|hca, emu| {
        assert_eq!(hca.interrupt_stats().vectors, 1);
        let v: Vec<_> = hca.comp_eqns().map(|e| hca.eq_vector(e)).collect();
        assert_eq!(v, [Some(0), Some(0), Some(0)]);
        let s0 = hca.interrupt_stats();
        let i0 = emu.interrupts(0);
        run_commands(hca);
        let (wakeups, _, polls) = delta(s0, hca.interrupt_stats());
        assert_eq!(polls, 0);
        assert!(wakeups >= 1 && emu.interrupts(0) - i0 >= COMMANDS);
    });
}
