//! What bring-up costs: commands and DMA memory, with the scaled page counts
//! of the default emulator and with the real ConnectX-4's (run with
//! `--nocapture` to see the numbers).

use hca_driver::Config;
use hca_emu::EmuConfig;
use hca_tests::Bench;

fn report(name: &str, emu: EmuConfig) -> hca_driver::BringUpReport {
    let mut b = Bench::emulated(emu, Config::default());
    let hca = b.open();
    let r = hca.bring_up_report();
    let log = b.emu().unwrap().command_log();
    println!("{name}: {r}");
    println!("{}", hca.info());
    for c in &log {
        println!(
            "  {} op_mod {:#x} in {:#x} out {:#x}",
            firmware_cmds::Opcode(c.opcode),
            c.op_mod,
            c.input_length,
            c.output_length
        );
    }
    assert_eq!(r.commands as usize, log.len());
    assert_eq!(hca.dma_usage().total(), r.dma.total());
    let pages = u64::from(r.boot_pages + r.init_pages);
    assert_eq!(hca.page_stats().held, pages);
    assert!(r.dma.firmware_pages as u64 >= pages * 4096);
    assert!(r.dma.peak >= r.dma.total());
    b.close(hca);
    b.assert_clean();
    r
}

#[test]
fn bring_up_cost() {
    let scaled = report("scaled pages", EmuConfig::default());
    let real = report("real pages", EmuConfig::default().with_real_pages());
    assert_eq!((real.boot_pages, real.init_pages), (6, 12_868));
    assert_eq!(scaled.commands, real.commands);
    // The mailboxes of the 202-block MANAGE_PAGES chain are in the peak,
    // not in the steady state (the pool is trimmed to one 16-block chunk).
    assert_eq!(real.dma.mailboxes, 16 * 1024);
    assert!(real.dma.peak - real.dma.total() >= (202 - 16 - 28) * 1024);
}
