//! Bring-up and teardown, on the emulator and on hardware.

use hca_tests::{Bench, TestPlatform};
use platform::{Platform, pci};

fn pci_command<P: Platform>(p: &P) -> Option<u16> {
    let mut b = [0u8; 2];
    p.config_read(pci::COMMAND, &mut b)
        .ok()
        .map(|()| u16::from_le_bytes(b))
}

fn open_close_repeatedly<P: TestPlatform>(b: &mut Bench<P>) {
    for round in 0..3 {
        let hca = b.open();
        assert!(hca.dead_reason().is_none());
        let r = hca.bring_up_report();
        assert!(r.commands > 20, "round {round}: {r}");
        assert_eq!(
            hca.page_stats().held,
            u64::from(r.boot_pages + r.init_pages)
        );
        assert_eq!(hca.page_stats().uncertain, 0);
        if let Some(c) = pci_command(hca.platform()) {
            let want = pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER;
            assert_eq!(c & want, want, "memory space and bus master on");
        }
        hca.check_health().unwrap();
        assert_eq!(hca.poll_events().unwrap(), 0);
        b.close(hca);
        assert_eq!(b.dma_allocated(), 0, "round {round}");
        b.assert_clean();
    }
}

fn a_failed_bring_up_leaves_the_device_usable<P: TestPlatform>(b: &mut Bench<P>) {
    // A configuration the device cannot meet: more pages than the budget.
    b.config.max_firmware_pages = 1;
    let e = b.try_open().expect_err("a one-page budget is too small");
    assert!(
        matches!(e, hca_driver::Error::CapacityExceeded { .. }),
        "{e}"
    );
    assert_eq!(b.dma_allocated(), 0);
    b.config.max_firmware_pages = hca_driver::Config::default().max_firmware_pages;
    let hca = b.open();
    b.close(hca);
}

hca_tests::scenarios!(
    open_close_repeatedly,
    a_failed_bring_up_leaves_the_device_usable
);

#[test]
fn bus_master_is_off_after_close() {
    let mut b = Bench::emulated(hca_emu::EmuConfig::default(), hca_driver::Config::default());
    let hca = b.open();
    let p = hca.platform().clone();
    b.close(hca);
    let c = pci_command(&p).unwrap();
    assert_eq!(c & pci::COMMAND_BUS_MASTER, 0);
    b.assert_clean();
}

/// The hardware variants are ignored (not passed) unless `HCA_PCI` was set
/// at build time: this test binary, listed and run again, says so.
#[test]
fn hardware_variants_are_ignored_without_hca_pci() {
    if cfg!(hca_hardware) {
        assert!(
            hca_tests::hardware_bdf().is_some(),
            "built with HCA_PCI set but run without it: the hardware tests will fail, rebuild"
        );
        return;
    }
    let me = std::env::current_exe().unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(&me)
            .args(args)
            .env_remove("HCA_PCI")
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // Listed as ignored: both hardware variants, no emulated one.
    let ignored = run(&["--list", "--ignored"]);
    let ignored: Vec<&str> = ignored.lines().filter(|l| l.ends_with(": test")).collect();
    assert_eq!(ignored.len(), 2, "{ignored:?}");
    assert!(
        ignored.iter().all(|l| l.starts_with("hardware::")),
        "{ignored:?}"
    );
    // Run: counted as ignored, none passed.
    let out = run(&["hardware::"]);
    assert!(out.contains("0 passed; 0 failed; 2 ignored"), "{out}");
    // Asked for anyway, they fail, saying why.
    let out = run(&["hardware::", "--include-ignored"]);
    assert!(out.contains("0 passed; 2 failed"), "{out}");
}
