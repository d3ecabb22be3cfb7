//! Prints what bring-up costs: commands and DMA memory, with the scaled and
//! the real page counts of the emulated ConnectX-4.

use hca_driver::Config;
use hca_emu::EmuConfig;
use hca_tests::Bench;

fn report(name: &str, emu: EmuConfig) {
    let mut b = Bench::emulated(emu, Config::default());
    let hca = b.open();
    let r = hca.bring_up_report();
    println!("{name}: {r}");
    println!("{}", hca.info());
    for c in b.emu().unwrap().command_log() {
        println!(
            "  {:?} op_mod {:#x} status {:#x}",
            firmware_cmds::Opcode(c.opcode),
            c.op_mod,
            c.status
        );
    }
    b.close(hca);
    b.assert_clean();
}

#[test]
fn bring_up_cost() {
    report("scaled pages", EmuConfig::default());
    report("real pages", EmuConfig::default().with_real_pages());
}
