//! The waits on `initializing` (issue 10, item 4): the driver polls only
//! the bit, as Linux's `wait_fw_init` (main.c) and rdma-core's VFIO
//! provider do. A function that answers every read with all ones for a
//! while after power-on or a reset (Linux waits that out in
//! `mlx5_health_wait_pci_up`, health.c) comes up; one that never answers
//! is declared gone when the wait's timeout passes, with an error naming
//! the wait, not at the first all-ones read, and nothing leaks.

use std::time::Duration;

use firmware_cmds::init_seg::HealthSyndrome;
use hca_driver::{Config, DeadReason, Error, Wait};
use hca_emu::{EmuConfig, EmuPlatform};
use hca_tests::Bench;

fn config() -> Config {
    let mut c = Config::default();
    c.timeouts.command = Duration::from_secs(3);
    c.timeouts.teardown = Duration::from_secs(3);
    c
}

fn off_bus_for(d: Duration) -> Bench<EmuPlatform> {
    Bench::emulated(
        EmuConfig {
            boot_all_ones: d,
            ..EmuConfig::default()
        },
        config(),
    )
}

/// All ones from power-on for 300 ms: the old driver called the device
/// gone at the first read (health `fw_version` all ones); the wait now
/// rides it out and bring-up completes.
#[test]
fn all_ones_reads_at_boot_are_waited_out() {
    let mut b = off_bus_for(Duration::from_millis(300));
    let emu = b.emu().unwrap();
    let t0 = emu.now();
    let hca = b.open();
    let emu = b.emu().unwrap();
    // The device really was silent that long (virtual time).
    assert!(emu.now() - t0 >= Duration::from_millis(300));
    assert!(hca.dead_reason().is_none());
    b.close(hca);
}

/// The same after a function reset: a device that died at runtime is
/// reset by close; the reset function is off the bus for a while, and the
/// next open waits for it.
#[test]
fn all_ones_reads_after_a_reset_are_waited_out() {
    let mut b = off_bus_for(Duration::from_millis(200));
    let hca = b.open();
    b.emu().unwrap().faults().fatal_health(0x8, 0x1);
    assert!(hca.alloc_pd().unwrap_err().is_device_dead());
    // Close resets the function to quiesce the dead firmware.
    assert!(b.try_close(hca).unwrap_err().is_device_dead());
    let hca = b.open();
    let pd = hca.alloc_pd().unwrap();
    drop(pd);
    b.close(hca);
}

/// A window longer than the pre-init timeout: dead, but only when the
/// timeout has passed, and named as such.
#[test]
fn all_ones_until_the_timeout_is_a_dead_device_naming_the_wait() {
    let mut b = off_bus_for(Duration::from_secs(3600));
    b.config.timeouts.fw_pre_init = Duration::from_secs(5);
    let e = b.try_open().err().unwrap();
    match e {
        Error::DeviceDead(DeadReason::NoAnswer {
            what: Wait::FirmwareReady,
            after,
            all_ones_for,
        }) => {
            assert!(after >= Duration::from_secs(5), "{after:?}");
            assert!(all_ones_for >= Duration::from_secs(5), "{all_ones_for:?}");
        }
        e => panic!("expected NoAnswer for the pre-init wait, got {e}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("0xffffffff"), "{msg}");
    assert!(msg.contains("initializing"), "{msg}");
    assert!(e.is_device_dead());
    b.assert_clean();
}

/// Surprise removal before open: the same typed error, no hang (the wait
/// ends at its timeout), nothing leaked.
#[test]
fn a_removed_device_is_gone_after_the_timeout() {
    let mut b = Bench::emulated(EmuConfig::default(), config());
    b.config.timeouts.fw_pre_init = Duration::from_secs(120);
    b.emu().unwrap().faults().surprise_removal();
    let e = b.try_open().err().unwrap();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::NoAnswer { what: Wait::FirmwareReady, after, .. })
                if after >= Duration::from_secs(120) && after < Duration::from_secs(121)
        ),
        "{e}"
    );
    b.assert_clean();
}

/// A health syndrome does not end the wait on `initializing` (Linux does
/// not look at it there); the fatal firmware is found by the first
/// command, named by its syndrome.
#[test]
fn a_health_syndrome_does_not_end_the_initializing_wait() {
    let mut b = Bench::emulated(
        EmuConfig {
            boot_delay: Duration::from_millis(100),
            ..EmuConfig::default()
        },
        config(),
    );
    let emu = b.emu().unwrap();
    emu.faults().fatal_health(0x8, 0x77);
    let t0 = emu.now();
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
    // It waited for `initializing` to clear first.
    assert!(b.emu().unwrap().now() - t0 >= Duration::from_millis(100));
    b.assert_clean();
}

/// The device leaves the bus while the driver waits for it to take the
/// command queue: that wait too ends only at its timeout, with the device
/// declared gone and named by the wait, and the unwinding frees every byte
/// of DMA memory (the command queue page) without an IOMMU fault.
#[test]
fn all_ones_during_the_command_queue_wait_is_dead_and_unwinds() {
    let mut b = Bench::emulated(
        EmuConfig {
            initializing_delay: Duration::from_secs(3600),
            ..EmuConfig::default()
        },
        config(),
    );
    b.config.timeouts.fw_init = Duration::from_secs(60);
    // The card leaves the bus 1 s into the command queue wait (virtual
    // time runs only while the driver waits; the pre-init wait ends after
    // 5 ms).
    b.emu()
        .unwrap()
        .faults()
        .surprise_removal_at(Duration::from_secs(1));
    let e = b.try_open().err().unwrap();
    assert!(
        matches!(
            e,
            Error::DeviceDead(DeadReason::NoAnswer {
                what: Wait::CommandQueueReady,
                after,
                ..
            }) if after >= Duration::from_secs(60)
        ),
        "{e}"
    );
    b.assert_clean();
}
