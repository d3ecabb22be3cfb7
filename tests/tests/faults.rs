//! Every fault the emulated ConnectX-4 can inject, during bring-up,
//! teardown and at runtime: the driver answers with a typed error that
//! names the command or condition, never panics, never waits longer than
//! its configured timeout (on virtual time, so the tests are fast), and
//! leaks no DMA memory and no firmware pages.

use std::sync::Arc;
use std::time::Duration;

use firmware_cmds::Opcode;
use firmware_cmds::caps::{CAPABILITY_OFFSET, CmdHcaCap};
use firmware_cmds::hca::MANAGE_PAGES_OP_MOD_ALLOCATION_FAIL;
use firmware_cmds::init_seg::HealthSyndrome;
use hca_driver::{Config, DeadReason, Error, Wait};
use hca_emu::{CommandRecord, EmuConfig, EmuHca, EmuPlatform, LeakReport, OutputCorruption};
use hca_tests::{Bench, page_request};

/// The command timeout of these tests (virtual time).
const CMD_TIMEOUT: Duration = Duration::from_secs(3);

fn config() -> Config {
    let mut c = Config::default();
    c.timeouts.command = CMD_TIMEOUT;
    c.timeouts.teardown = CMD_TIMEOUT;
    c
}

fn bench() -> Bench<EmuPlatform> {
    Bench::emulated(EmuConfig::default(), config())
}

/// The commands of a clean bring-up and of a clean teardown, as the
/// emulator executed them.
fn clean_run() -> (Vec<CommandRecord>, Vec<CommandRecord>) {
    let mut b = bench();
    let hca = b.open();
    let up = b.emu().unwrap().command_log();
    b.close(hca);
    let all = b.emu().unwrap().command_log();
    b.assert_clean();
    (up.clone(), all[up.len()..].to_vec())
}

/// `(opcode, occurrence)` of each command of a log: the `n`th command with
/// that opcode (1-based), which is what the emulator's one-shot fault
/// rules count.
fn steps(log: &[CommandRecord]) -> Vec<(u16, u16, u32)> {
    let mut out = Vec::new();
    for (i, c) in log.iter().enumerate() {
        let nth = log[..=i].iter().filter(|d| d.opcode == c.opcode).count() as u32;
        out.push((c.opcode, c.op_mod, nth));
    }
    out
}

/// Closes the HCA, checks the emulator is clean (no IOMMU fault, no leak
/// of memory, firmware pages or objects, no ordering error), then opens
/// and closes the device once more and checks it again: the device
/// survived what the test did to it.
#[track_caller]
fn close_clean_and_reopen(b: &mut Bench<EmuPlatform>, hca: Arc<hca_driver::Hca<EmuPlatform>>) {
    b.close(hca);
    b.assert_clean();
    let hca = b.open();
    hca.alloc_pd()
        .expect("a command after the reopen")
        .destroy()
        .unwrap();
    b.close(hca);
    b.assert_clean();
}

/// What the firmware itself still held when the function had to be reset
/// after teardown step `op` failed or timed out (`given`: the pages the
/// firmware had before): objects the driver could not destroy, pages it
/// could not get back. Only the failing step may leave either behind.
#[track_caller]
fn assert_teardown_leftovers(r: &LeakReport, op: Opcode, given: usize) {
    if op == Opcode::TEARDOWN_HCA || op == Opcode::MANAGE_PAGES {
        assert_eq!(r.firmware_pages.len(), given, "{op}");
    } else {
        assert!(r.firmware_pages.is_empty(), "{op}: {:?}", r.firmware_pages);
    }
    if op == Opcode::DESTROY_EQ || op == Opcode::DEALLOC_UAR {
        // The EQ (and the UAR it keeps in use) or the UAR.
        assert!(!r.objects_at_teardown.is_empty(), "{op}");
    } else {
        assert!(
            r.objects_at_teardown.is_empty(),
            "{op}: {:?}",
            r.objects_at_teardown
        );
    }
}

fn assert_no_faults_no_memory(emu: &EmuHca) {
    assert!(emu.iommu_faults().is_empty(), "{:?}", emu.iommu_faults());
    let r = emu.leak_report();
    assert!(
        r.dma_regions.is_empty(),
        "DMA regions left: {:?}",
        r.dma_regions
    );
    assert!(emu.internal_errors().is_empty());
}

#[test]
fn every_bring_up_command_failing_is_named_and_unwound() {
    let (up, _) = clean_run();
    for (i, (opcode, op_mod, nth)) in steps(&up).into_iter().enumerate() {
        let mut b = bench();
        let syndrome = 0x00c0_de00 | i as u32;
        b.emu()
            .unwrap()
            .faults()
            .fail_opcode_nth(opcode, nth, 0x3, syndrome);
        if Opcode(opcode) == Opcode::QUERY_ISSI {
            // Linux's mlx5_core_set_issi: any failing status is firmware
            // without ISSI negotiation, which runs at ISSI 0.
            let hca = b.try_open().expect("a failing QUERY_ISSI means ISSI 0");
            assert_eq!(hca.info().issi, 0);
            b.close(hca);
            b.assert_clean();
            continue;
        }
        let e = match b.try_open() {
            Ok(_) => panic!(
                "bring-up succeeded with {:?} #{nth} failing",
                Opcode(opcode)
            ),
            Err(e) => e,
        };
        match &e {
            Error::Command(c) => {
                assert_eq!(c.opcode, Opcode(opcode), "{e}");
                assert_eq!(c.op_mod, op_mod, "{e}");
                assert_eq!(c.syndrome, syndrome, "{e}");
            }
            other => panic!("{:?} #{nth}: unexpected error {other}", Opcode(opcode)),
        }
        let text = e.to_string();
        assert!(
            text.contains(Opcode(opcode).name().unwrap()) && text.contains("bad parameter(0x3)"),
            "{text}"
        );
        b.assert_clean();
    }
}

#[test]
fn every_bring_up_command_that_never_completes_times_out_and_unwinds() {
    let (up, _) = clean_run();
    for (opcode, op_mod, nth) in steps(&up) {
        let mut b = bench();
        let emu_start = b.emu().unwrap().now();
        b.emu()
            .unwrap()
            .faults()
            .command_never_completes(Some(opcode), nth);
        let e = b.try_open().expect_err("bring-up cannot succeed");
        match e {
            Error::Timeout {
                what:
                    Wait::Command {
                        opcode: o,
                        op_mod: m,
                    },
                after,
            } => {
                assert_eq!((o, m), (Opcode(opcode), op_mod));
                assert!(after >= CMD_TIMEOUT && after < CMD_TIMEOUT + Duration::from_secs(1));
            }
            other => panic!("{:?} #{nth}: unexpected error {other}", Opcode(opcode)),
        }
        // The stuck command forced a function reset; everything was freed
        // and nothing was lost (the firmware never took anything).
        b.assert_clean();
        assert!(b.emu().unwrap().now() - emu_start < Duration::from_secs(30));
    }
}

#[test]
fn every_teardown_command_failing_is_named_and_memory_is_freed() {
    let (_, down) = clean_run();
    assert!(!down.is_empty());
    for (opcode, op_mod, nth) in steps(&down) {
        let mut b = bench();
        let hca = b.open();
        let emu = b.emu().unwrap();
        let given = emu.firmware_pages();
        emu.faults().fail_opcode_nth(opcode, nth, 0x4, 0xdead);
        let e = b.try_close(hca).expect_err("teardown cannot succeed");
        let c = e.command_error().unwrap_or_else(|| panic!("{e}"));
        assert_eq!((c.opcode, c.op_mod), (Opcode(opcode), op_mod), "{e}");
        let emu = b.emu().unwrap();
        assert_no_faults_no_memory(emu);
        let r = emu.leak_report();
        let op = Opcode(opcode);
        assert_teardown_leftovers(&r, op, given);
        assert!(r.objects.is_empty());
        // The device works again afterwards.
        let hca = b.open();
        b.close(hca);
    }
}

#[test]
fn every_teardown_command_that_never_completes_times_out_and_memory_is_freed() {
    let (_, down) = clean_run();
    for (opcode, op_mod, nth) in steps(&down) {
        let mut b = bench();
        let hca = b.open();
        b.emu()
            .unwrap()
            .faults()
            .command_never_completes(Some(opcode), nth);
        let given = b.emu().unwrap().firmware_pages();
        let e = b.try_close(hca).expect_err("teardown cannot succeed");
        assert!(
            matches!(e, Error::Timeout { what: Wait::Command { opcode: o, op_mod: m }, .. } if (o, m) == (Opcode(opcode), op_mod)),
            "{e}"
        );
        let emu = b.emu().unwrap();
        assert_no_faults_no_memory(emu);
        let r = emu.leak_report();
        let op = Opcode(opcode);
        assert_teardown_leftovers(&r, op, given);
        assert!(r.objects.is_empty(), "{op}: {:?}", r.objects);
        // The device works again afterwards, and that run leaks nothing
        // more.
        let hca = b.open();
        hca.alloc_pd().unwrap().destroy().unwrap();
        b.close(hca);
        let emu = b.emu().unwrap();
        assert_no_faults_no_memory(emu);
        assert_eq!(emu.leak_report(), r, "{op}: the reopened run leaked");
    }
}

#[test]
fn firmware_that_stays_initializing_times_out() {
    let mut b = bench();
    b.config.timeouts.fw_pre_init = Duration::from_secs(120);
    b.emu().unwrap().faults().initializing_never_clears();
    let e = b.try_open().err().unwrap();
    assert!(
        matches!(e, Error::Timeout { what: Wait::FirmwareReady, after } if after >= Duration::from_secs(120)),
        "{e}"
    );
    assert!(e.to_string().contains("initializing"), "{e}");
    b.assert_clean();
}

#[test]
fn command_queue_that_never_becomes_ready_times_out() {
    let emu = EmuConfig {
        initializing_delay: Duration::from_secs(10),
        ..EmuConfig::default()
    };
    let mut b = Bench::emulated(emu, config());
    let e = b.try_open().err().unwrap();
    assert!(
        matches!(e, Error::Timeout { what: Wait::CommandQueueReady, after } if after >= Duration::from_secs(2) && after < Duration::from_secs(3)),
        "{e}"
    );
    b.assert_clean();
    // A patient configuration gets through.
    b.config.timeouts.fw_init = Duration::from_secs(20);
    let hca = b.open();
    b.close(hca);
}

#[test]
fn fatal_health_before_bring_up_is_reported_by_syndrome() {
    let mut b = bench();
    b.emu().unwrap().faults().fatal_health(0x8, 0x77);
    let e = b.try_open().err().unwrap();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::Fatal {
                syndrome: HealthSyndrome(0x8),
                ext_synd: 0x77
            })
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("unrecoverable hardware error(0x8)"),
        "{e}"
    );
    b.assert_clean();
}

#[test]
fn fatal_health_at_runtime_fails_every_command_fast() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let given = emu.firmware_pages();
    emu.faults().fatal_health(0xb, 0x1234);
    let t0 = emu.now();
    let e = hca.alloc_pd().err().unwrap();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::Fatal {
                syndrome: HealthSyndrome::HW_FTL_ERR,
                ext_synd: 0x1234
            })
        ),
        "{e}"
    );
    // Noticed by the health check inside the wait, long before the
    // command timeout.
    assert!(emu.now() - t0 <= Duration::from_millis(500));
    // Every later command fails at once, without reaching the device.
    let commands = emu.command_log().len();
    let t1 = emu.now();
    for _ in 0..3 {
        assert!(hca.alloc_pd().unwrap_err().is_device_dead());
    }
    assert!(hca.poll_events().unwrap_err().is_device_dead());
    assert!(hca.check_health().unwrap_err().is_device_dead());
    assert_eq!(emu.now(), t1);
    assert_eq!(emu.command_log().len(), commands);
    assert!(hca.dead_reason().is_some());
    let e = b.try_close(hca).unwrap_err();
    assert!(e.is_device_dead(), "{e}");
    // The dead firmware's pages were lost at the function reset; the
    // driver's memory is all back.
    let emu = b.emu().unwrap();
    assert_no_faults_no_memory(emu);
    assert_eq!(emu.leak_report().firmware_pages.len(), given);
    // The reset device comes up again.
    let hca = b.open();
    b.close(hca);
}

#[test]
fn surprise_removal_is_device_gone() {
    let mut b = bench();
    let hca = b.open();
    b.emu().unwrap().faults().surprise_removal();
    let e = hca.check_health().unwrap_err();
    assert!(matches!(e, Error::DeviceDead(DeadReason::Gone)), "{e}");
    assert!(e.to_string().contains("0xffffffff"), "{e}");
    assert!(matches!(
        hca.alloc_pd().unwrap_err(),
        Error::DeviceDead(DeadReason::Gone)
    ));
    let e = b.try_close(hca).unwrap_err();
    assert!(e.is_device_dead());
    assert_no_faults_no_memory(b.emu().unwrap());
}

#[test]
fn surprise_removal_during_a_command() {
    let mut b = bench();
    // A wait that outlasts the test: only the removal can end it.
    b.config.timeouts.command = Duration::from_secs(3600);
    let hca = b.open();
    let emu = b.emu().unwrap();
    let stall = emu
        .faults()
        .command_never_completes(Some(Opcode::ALLOC_PD.0), 1);
    std::thread::scope(|s| {
        let t = s.spawn(|| hca.alloc_pd().err());
        // The rule's hit count is the hook: it turns 1 when the firmware
        // has taken ALLOC_PD from the queue and sits on it. Only then is
        // the card pulled, so the removal provably happens while the
        // command is outstanding (and a timeout cannot end the wait: it
        // would give Error::Timeout, not Gone).
        while emu.faults().hits(stall) == 0 {
            assert!(
                !t.is_finished(),
                "alloc_pd returned before the firmware took it"
            );
            std::thread::yield_now();
        }
        emu.faults().surprise_removal();
        let e = t.join().unwrap().expect("the command cannot succeed");
        assert!(matches!(e, Error::DeviceDead(DeadReason::Gone)), "{e}");
    });
    assert!(
        emu.command_log()
            .iter()
            .all(|c| c.opcode != Opcode::ALLOC_PD.0),
        "ALLOC_PD was never answered"
    );
    let e = b.try_close(hca).expect_err("the card is gone");
    assert!(matches!(e, Error::DeviceDead(DeadReason::Gone)), "{e}");
    assert_no_faults_no_memory(b.emu().unwrap());
}

#[test]
fn a_stalled_health_counter_is_dead_firmware() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    // A stall without a syndrome: the counter stops, the buffer says
    // nothing.
    emu.faults().fatal_health(0, 0);
    let period = hca.config().timeouts.health_poll;
    hca.check_health().unwrap();
    hca.check_health().unwrap();
    emu.advance(period);
    hca.check_health().unwrap();
    emu.advance(period);
    hca.check_health().unwrap();
    emu.advance(period);
    let e = hca.check_health().unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::HealthCounterStalled { polls: 3, .. })
        ),
        "{e}"
    );
    assert!(hca.alloc_pd().unwrap_err().is_device_dead());
    let _ = b.try_close(hca);
    assert_no_faults_no_memory(b.emu().unwrap());
}

#[test]
fn a_live_health_counter_is_fine() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    for _ in 0..10 {
        emu.advance(hca.config().timeouts.health_poll);
        hca.check_health().unwrap();
    }
    close_clean_and_reopen(&mut b, hca);
}

#[test]
fn runtime_page_requests_give_and_take_pages() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let base = emu.firmware_pages();
    assert_eq!(hca.page_stats().held, base as u64);
    assert!(page_request(emu, &hca, 300).unwrap() >= 1);
    assert_eq!(emu.firmware_pages(), base + 300);
    assert_eq!(hca.page_stats().held, base as u64 + 300);
    page_request(emu, &hca, -120).unwrap();
    assert_eq!(emu.firmware_pages(), base + 180);
    assert_eq!(hca.page_stats().held, base as u64 + 180);
    // More back than the firmware can give while initialized: it returns
    // what it can.
    page_request(emu, &hca, -1000).unwrap();
    assert_eq!(emu.firmware_pages(), base);
    assert_eq!(hca.page_stats().held, base as u64);
    // Many small requests in a row.
    for _ in 0..20 {
        emu.faults().page_request(7);
    }
    emu.run_until_idle();
    hca.poll_events().unwrap();
    assert_eq!(emu.firmware_pages(), base + 140);
    close_clean_and_reopen(&mut b, hca);
}

#[test]
fn a_page_request_beyond_the_budget_is_refused_with_op_mod_0() {
    let mut b = bench();
    b.config.max_firmware_pages = 18 + 50;
    let hca = b.open();
    let emu = b.emu().unwrap();
    let e = page_request(emu, &hca, 100).unwrap_err();
    assert!(matches!(e, Error::CapacityExceeded { .. }), "{e}");
    assert!(e.to_string().contains("max_firmware_pages"), "{e}");
    let refused = emu
        .command_log()
        .into_iter()
        .filter(|c| {
            c.opcode == Opcode::MANAGE_PAGES.0 && c.op_mod == MANAGE_PAGES_OP_MOD_ALLOCATION_FAIL
        })
        .count();
    assert_eq!(refused, 1);
    assert_eq!(hca.page_stats().refused_requests, 1);
    assert_eq!(emu.firmware_pages(), 18);
    // Within the budget it works.
    page_request(emu, &hca, 50).unwrap();
    assert_eq!(emu.firmware_pages(), 68);
    close_clean_and_reopen(&mut b, hca);
}

#[test]
fn a_boot_page_demand_beyond_the_budget_fails_bring_up() {
    let mut b = bench();
    b.config.max_firmware_pages = 10;
    let e = b.try_open().err().unwrap();
    assert!(
        matches!(e, Error::CapacityExceeded { capacity: 10, .. }),
        "{e}"
    );
    b.assert_clean();
}

#[test]
fn page_requests_are_served_while_a_command_waits() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let base = emu.firmware_pages();
    emu.faults().page_request(40);
    // A command the firmware sits on.
    let stall = emu
        .faults()
        .command_never_completes(Some(Opcode::ALLOC_PD.0), 1);
    let e = hca.alloc_pd().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Timeout {
                what: Wait::Command {
                    opcode: Opcode::ALLOC_PD,
                    op_mod: 0
                },
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        emu.faults().hits(stall),
        1,
        "the stalled command was ALLOC_PD"
    );
    // While the driver waited, it gave the pages the firmware asked for.
    assert_eq!(emu.firmware_pages(), base + 40);
    close_clean_and_reopen(&mut b, hca);
}

fn open_with_corruption(
    opcode: Opcode,
    nth: u32,
    how: OutputCorruption,
) -> (Bench<EmuPlatform>, Error) {
    let mut b = bench();
    b.emu()
        .unwrap()
        .faults()
        .corrupt_output(Some(opcode.0), nth, how);
    let e = b
        .try_open()
        .err()
        .unwrap_or_else(|| panic!("{opcode} {how:?} went unnoticed"));
    (b, e)
}

#[test]
fn corrupted_answers_are_named() {
    // Output mailbox blocks with a wrong block number or token.
    let (b, e) = open_with_corruption(Opcode::QUERY_HCA_CAP, 1, OutputCorruption::BlockNumber);
    assert!(
        matches!(
            &e,
            Error::MalformedAnswer {
                opcode: Opcode::QUERY_HCA_CAP,
                error: firmware_cmds::Error::BadBlockNumber { .. },
                ..
            }
        ),
        "{e}"
    );
    b.assert_clean();
    let (b, e) = open_with_corruption(Opcode::QUERY_ISSI, 1, OutputCorruption::Token);
    assert!(
        matches!(
            &e,
            Error::MalformedAnswer {
                opcode: Opcode::QUERY_ISSI,
                error: firmware_cmds::Error::BadToken { .. },
                ..
            }
        ),
        "{e}"
    );
    b.assert_clean();
    // The entry: output length and token rewritten.
    let (b, e) = open_with_corruption(
        Opcode::QUERY_ADAPTER,
        1,
        OutputCorruption::EntryOutputLength(0x20),
    );
    assert!(
        matches!(
            &e,
            Error::InvalidAnswer {
                opcode: Opcode::QUERY_ADAPTER,
                field: "cmd_queue_entry.output_length",
                value: 0x20,
                ..
            }
        ),
        "{e}"
    );
    b.assert_clean();
    let (b, e) = open_with_corruption(Opcode::ENABLE_HCA, 1, OutputCorruption::EntryToken(0x99));
    assert!(
        matches!(
            &e,
            Error::InvalidAnswer {
                opcode: Opcode::ENABLE_HCA,
                field: "cmd_queue_entry.token",
                value: 0x99,
                ..
            }
        ),
        "{e}"
    );
    b.assert_clean();
    // A negative page count.
    let (b, e) = open_with_corruption(
        Opcode::QUERY_PAGES,
        2,
        OutputCorruption::OutputByte {
            offset: 0x0c,
            xor: 0x80,
        },
    );
    assert!(
        matches!(
            &e,
            Error::InvalidAnswer {
                opcode: Opcode::QUERY_PAGES,
                field: "query_pages_out.num_pages",
                ..
            }
        ),
        "{e}"
    );
    b.assert_clean();
    // A UAR outside BAR0.
    let (b, e) = open_with_corruption(
        Opcode::ALLOC_UAR,
        1,
        OutputCorruption::OutputByte {
            offset: 0x09,
            xor: 0x7f,
        },
    );
    assert!(
        matches!(
            &e,
            Error::InvalidAnswer {
                opcode: Opcode::ALLOC_UAR,
                field: "alloc_uar_out.uar",
                ..
            }
        ),
        "{e}"
    );
    // The real UAR was never named to the driver, so it could not free it:
    // the only thing the firmware kept.
    let emu = b.emu().unwrap();
    assert_no_faults_no_memory(emu);
    assert!(emu.leak_report().firmware_pages.is_empty());
}

#[test]
fn a_pkey_table_size_beyond_the_encoding_fails_bring_up() {
    // The current general capabilities queried after INIT_HCA (the last
    // QUERY_HCA_CAP of op_mod 1 of a clean bring-up) say pkey_table_size 6
    // (8192 entries; the encoding ends at 5, 4096).
    let (up, _) = clean_run();
    let nth = steps(&up)
        .into_iter()
        .filter(|&(op, op_mod, _)| op == Opcode::QUERY_HCA_CAP.0 && op_mod == 1)
        .map(|s| s.2)
        .next_back()
        .unwrap();
    let low_byte =
        (CmdHcaCap::pkey_table_size.offset() + CmdHcaCap::pkey_table_size.width()) / 8 - 1;
    let (b, e) = open_with_corruption(
        Opcode::QUERY_HCA_CAP,
        nth,
        OutputCorruption::OutputByte {
            offset: CAPABILITY_OFFSET + low_byte as usize,
            xor: 6,
        },
    );
    assert!(
        matches!(
            &e,
            Error::InvalidAnswer {
                opcode: Opcode::QUERY_HCA_CAP,
                op_mod: 1,
                field: "cmd_hca_cap.pkey_table_size",
                value: 6,
                ..
            }
        ),
        "{e}"
    );
    b.assert_clean();
}

#[test]
fn signatures_are_only_checked_while_cmdif_checksum_is_on() {
    // The recorded ConnectX-4 runs with cmdif_checksum 0: a wrong
    // signature on an output block means nothing and is ignored.
    let mut b = bench();
    let rule = b.emu().unwrap().faults().corrupt_output(
        Some(Opcode::QUERY_HCA_CAP.0),
        1,
        OutputCorruption::Signature,
    );
    let hca = b.open();
    // The wrong signature was really delivered, and ignored.
    assert_eq!(b.emu().unwrap().faults().hits(rule), 1);
    b.close(hca);
    b.assert_clean();
}

#[test]
fn corrupted_page_returns_are_refused_without_double_free() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    page_request(emu, &hca, 8).unwrap();
    // The firmware claims more pages than asked for.
    emu.faults().page_request(-4);
    emu.faults().corrupt_output(
        Some(Opcode::MANAGE_PAGES.0),
        1,
        OutputCorruption::OutputByte {
            offset: 0x0b,
            xor: 0x10,
        },
    );
    emu.run_until_idle();
    let e = hca.poll_events().unwrap_err();
    assert!(
        matches!(
            &e,
            Error::InvalidAnswer {
                opcode: Opcode::MANAGE_PAGES,
                op_mod: 2,
                field: "manage_pages_out.output_num_entries",
                ..
            }
        ),
        "{e}"
    );
    // The firmware returns a page address the driver never gave: flip a
    // high bit of the first returned address.
    emu.faults().page_request(-2);
    emu.faults().corrupt_output(
        Some(Opcode::MANAGE_PAGES.0),
        1,
        OutputCorruption::OutputByte {
            offset: 0x10,
            xor: 0x40,
        },
    );
    emu.run_until_idle();
    let e = hca.poll_events().unwrap_err();
    assert!(
        matches!(&e, Error::BadReturnedPage { reason, .. } if reason.contains("never gave")),
        "{e}"
    );
    // The bookkeeping disagrees with the firmware now (it gave back pages
    // the driver refused): teardown reclaims what it can, then resets the
    // function before freeing anything.
    let _ = b.try_close(hca);
    let emu = b.emu().unwrap();
    assert_no_faults_no_memory(emu);
}

#[test]
fn a_corrupted_command_completion_event_is_reported_and_survived() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let (cmd_eq, _) = hca.control_eqns();
    let cmd_eq = cmd_eq.unwrap();
    // Byte 0x23 holds the low bits of the completion vector.
    let rule = emu
        .faults()
        .corrupt_next_eqe(u32::from(cmd_eq.0), 0x23, 0xff);
    let pd = hca.alloc_pd().expect("accepted once the entry is back");
    let mut saw_invalid = false;
    let mut saw_missed = false;
    while let Some(ev) = hca.events().pop() {
        match ev {
            hca_driver::AsyncEvent::InvalidEqe {
                error: hca_driver::EqeError::BadCommandSlots { .. },
                ..
            } => saw_invalid = true,
            hca_driver::AsyncEvent::MissedCommandCompletion { .. } => saw_missed = true,
            _ => {}
        }
    }
    assert!(saw_invalid && saw_missed);
    assert_eq!(emu.faults().hits(rule), 1);
    pd.destroy().unwrap();
    close_clean_and_reopen(&mut b, hca);
}

#[test]
fn corrupted_async_events_are_typed_errors() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let (_, async_eq) = hca.control_eqns();
    let async_eq = u32::from(async_eq.unwrap().0);
    let base = emu.firmware_pages();
    // An event type nobody subscribed to.
    let first = emu.faults().corrupt_next_eqe(async_eq, 1, 0x30);
    let e = page_request(emu, &hca, 5).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidEqe {
                error: hca_driver::EqeError::UnexpectedEventType { event_type: 0x3b },
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        emu.firmware_pages(),
        base,
        "a skipped request gives nothing"
    );
    assert_eq!(emu.faults().hits(first), 1);
    // A page request for another function.
    let second = emu.faults().corrupt_next_eqe(async_eq, 0x23, 0x05);
    let e = page_request(emu, &hca, 5).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidEqe {
                error: hca_driver::EqeError::BadPageRequest {
                    function_id: 5,
                    num_pages: 5
                },
                ..
            }
        ),
        "{e}"
    );
    // The queue keeps working: a good request goes through.
    page_request(emu, &hca, 5).unwrap();
    assert_eq!(emu.firmware_pages(), base + 5);
    let mut invalid = 0;
    while let Some(ev) = hca.events().pop() {
        if matches!(ev, hca_driver::AsyncEvent::InvalidEqe { .. }) {
            invalid += 1;
        }
    }
    assert_eq!(invalid, 2);
    assert_eq!(emu.faults().hits(second), 1);
    close_clean_and_reopen(&mut b, hca);
}

#[test]
fn many_async_events_keep_the_consumer_index_moving() {
    // More events than the async EQ has entries: without consumer index
    // updates the firmware would overrun it.
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let base = emu.firmware_pages();
    let size = 1usize << hca.config().async_eq_log_size;
    for round in 0..4 {
        for _ in 0..size / 2 {
            emu.faults().page_request(1);
        }
        emu.run_until_idle();
        assert_eq!(hca.poll_events().unwrap(), size / 2, "round {round}");
    }
    assert_eq!(emu.firmware_pages(), base + 2 * size);
    assert!(emu.datapath().eq_overruns.is_empty());
    close_clean_and_reopen(&mut b, hca);
}

#[test]
fn an_internal_error_event_reads_the_health_buffer() {
    let mut b = bench();
    let hca = b.open();
    let emu = b.emu().unwrap();
    let (_, async_eq) = hca.control_eqns();
    let async_eq = u32::from(async_eq.unwrap().0);
    // An internal error event (0x08, made from a page request, 0x0b) on a
    // healthy device: reported, nothing else.
    emu.faults().corrupt_next_eqe(async_eq, 1, 0x03);
    page_request(emu, &hca, 1).unwrap();
    assert_eq!(
        hca.events().pop(),
        Some(hca_driver::AsyncEvent::InternalError)
    );
    // The same with a fatal syndrome in the health buffer: dead.
    emu.faults().fatal_health(0x1, 0x5);
    emu.faults().corrupt_next_eqe(async_eq, 1, 0x03);
    let e = page_request(emu, &hca, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::Fatal {
                syndrome: HealthSyndrome::FW_ERR,
                ext_synd: 5
            })
        ),
        "{e}"
    );
    let _ = b.try_close(hca);
    assert_no_faults_no_memory(b.emu().unwrap());
}
