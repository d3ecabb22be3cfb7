//! Every fault kind, against the raw command interface.

mod common;

use std::time::{Duration, Instant};

use common::{Raw, inp, setf};
use hca_emu::{EmuConfig, EmuHca, FaultKind, OutputCorruption};
use platform::{Mmio, Platform};

const EV_PAGE: u64 = 1 << 0x0b;

fn up() -> Raw {
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    r
}

#[test]
fn a_command_that_never_completes_times_out_in_virtual_time() {
    let mut r = up();
    r.emu.faults().command_never_completes(Some(0x80d), 2);
    r.ok(&inp(0x80d, 0, 16), 16);
    let real = Instant::now();
    let v0 = r.p.now();
    let a = r.cmd_with(&inp(0x80d, 0, 16), 16, 9, |_, _, _| {});
    assert!(a.is_none(), "the second NOP never completes");
    assert!(r.p.now() - v0 >= common::CMD_TIMEOUT);
    assert!(
        real.elapsed() < Duration::from_secs(20),
        "virtual time: {:?}",
        real.elapsed()
    );
    // The entry is still owned by firmware.
    assert_eq!(r.cmdq().read_u8(0x3f) & 1, 1);
}

#[test]
fn a_chosen_opcode_fails_with_a_chosen_status_and_syndrome() {
    let mut r = up();
    r.emu.faults().fail_opcode(0x800, 0x0f, 0x1234_5678);
    let a = r.cmd(&inp(0x800, 0, 16), 16);
    assert_eq!((a.status, a.syndrome), (0x0f, 0x1234_5678));
    assert!(r.emu.objects(hca_emu::ObjKind::Pd).is_empty(), "no effect");
    assert_eq!(r.cmd(&inp(0x800, 0, 16), 16).status, 0x0f, "every time");
    r.emu.faults().clear();
    r.ok(&inp(0x800, 0, 16), 16);
    // Only the 3rd ALLOC_UAR.
    r.emu.faults().fail_opcode_nth(0x802, 3, 0x08, 0);
    r.ok(&inp(0x802, 0, 16), 16);
    r.ok(&inp(0x802, 0, 16), 16);
    let a = r.cmd(&inp(0x802, 0, 16), 16);
    assert_eq!((a.status, a.syndrome), (0x08, hca_emu::syndrome::INJECTED));
    r.ok(&inp(0x802, 0, 16), 16);
}

#[test]
fn initializing_that_never_clears() {
    let emu = EmuHca::new(EmuConfig::default());
    emu.faults().initializing_never_clears();
    let p = emu.platform();
    let bar = p.map_bar(0).unwrap();
    let real = Instant::now();
    let start = p.now();
    while bar.read32(0x1fc).get() >> 31 == 1 && p.now() - start < Duration::from_secs(120) {
        p.delay(Duration::from_millis(2));
    }
    assert_eq!(bar.read32(0x1fc).get() >> 31, 1);
    assert!(real.elapsed() < Duration::from_secs(20));
}

#[test]
fn fatal_health_syndrome_stalls_the_counter_and_the_firmware() {
    let mut r = up();
    let c0 = r.bar.read32(0x1010).get() & 0xff_ffff;
    r.p.delay(Duration::from_secs(1));
    let c1 = r.bar.read32(0x1010).get() & 0xff_ffff;
    assert_ne!(c0, c1, "the health counter advances");
    assert_eq!(r.bar.read32(0x23c).get(), 0);
    r.emu.faults().fatal_health(0x8, 0x1234);
    let c2 = r.bar.read32(0x1010).get() & 0xff_ffff;
    r.p.delay(Duration::from_secs(10));
    assert_eq!(r.bar.read32(0x1010).get() & 0xff_ffff, c2, "stalled");
    let w = r.bar.read32(0x23c).get();
    assert_eq!(
        ((w >> 16) & 0xff, w & 0xffff),
        (0x8, 0x1234),
        "synd, ext_synd"
    );
    assert!(
        r.cmd_with(&inp(0x80d, 0, 16), 16, 3, |_, _, _| {})
            .is_none()
    );
}

#[test]
fn surprise_removal_reads_all_ones() {
    let mut r = up();
    r.emu.faults().surprise_removal();
    for off in [0x0, 0x4, 0x14, 0x1fc, 0x230, 0x1010] {
        assert_eq!(r.bar.read32(off).get(), 0xffff_ffff);
    }
    assert!(
        r.cmd_with(&inp(0x80d, 0, 16), 16, 3, |_, _, _| {})
            .is_none()
    );
}

#[test]
fn page_requests_and_reclaims_at_runtime() {
    let mut r = up();
    let uar = r.alloc_uar();
    let (_, eqbuf) = r.create_eq(4, uar, EV_PAGE);
    r.emu.faults().page_request(5);
    r.emu.run_until_idle();
    let eq = r.region(eqbuf);
    assert_eq!(eq.read_u8(1), 0x0b);
    assert_eq!(eq.read_be32(0x24), 5, "num_pages");
    assert_eq!(r.query_pages(3), 5);
    r.give_pages(5);
    assert_eq!(r.query_pages(3), 0);
    assert_eq!(r.emu.firmware_pages(), 18 + 5);
    r.emu.faults().page_request(-3);
    let eq = r.region(eqbuf);
    assert_eq!(eq.read_u8(64 + 1), 0x0b);
    assert_eq!(eq.read_be32(64 + 0x24) as i32, -3);
    assert_eq!(r.query_pages(3), -3);
    // Only regular pages come back while initialized, never more than
    // asked.
    let got = r.take_pages(3);
    assert_eq!(got.len(), 3);
    assert_eq!(r.take_pages(10).len(), 2);
    assert!(r.take_pages(10).is_empty());
}

/// Runs QUERY_HCA_CAP with output blocks the test keeps; returns the
/// first block's trailer (0x230..0x240).
fn cap_trailer(r: &mut Raw, token: u8) -> [u8; 16] {
    use firmware_cmds::mailbox::{CmdIfBox, blocks_for};
    let keep = r.dma(8 * 1024);
    let blocks = blocks_for(0x1010);
    for i in 0..blocks {
        let mut b = CmdIfBox::new();
        let next = if i + 1 < blocks {
            keep + (i as u64 + 1) * 1024
        } else {
            0
        };
        b.set_next_pointer(next).unwrap();
        b.set(CmdIfBox::block_number, i as u32).unwrap();
        b.set(CmdIfBox::token, token).unwrap();
        r.region(keep).write_bytes(i * 1024, b.as_bytes());
    }
    let inline: [u8; 16] = inp(0x100, 1, 16).try_into().unwrap();
    let e = firmware_cmds::cmdq::CmdQueueEntry::build(&inline, 16, 0, 0x1010, keep, token).unwrap();
    r.post(0, e.as_bytes());
    let done = r.wait(0, common::CMD_TIMEOUT).unwrap();
    assert_eq!(done[0x3f], 0, "delivered, status OK");
    let mut t = [0u8; 16];
    r.region(keep).read_bytes(0x230, &mut t);
    t
}

#[test]
fn corrupted_answers() {
    let mut r = up();
    let clean = cap_trailer(&mut r, 0x44);
    assert_eq!((clean[11], clean[13]), (0, 0x44));
    // Output block numbers, tokens, signatures.
    r.emu
        .faults()
        .corrupt_output(Some(0x100), 1, OutputCorruption::BlockNumber);
    assert_ne!(cap_trailer(&mut r, 0x44)[11], 0, "block_number");
    r.emu
        .faults()
        .corrupt_output(Some(0x100), 1, OutputCorruption::Token);
    assert_ne!(cap_trailer(&mut r, 0x44)[13], 0x44, "token");
    r.emu
        .faults()
        .corrupt_output(Some(0x100), 1, OutputCorruption::Signature);
    let t = cap_trailer(&mut r, 0x44);
    assert_ne!(t[14..16], clean[14..16], "signatures written and wrong");
    // An output byte (QUERY_PAGES num_pages).
    r.emu.faults().corrupt_output(
        Some(0x107),
        1,
        OutputCorruption::OutputByte {
            offset: 0xf,
            xor: 0x80,
        },
    );
    assert_eq!(r.query_pages(1), 0x80);
    // The entry's output length and token.
    r.emu
        .faults()
        .corrupt_output(None, 1, OutputCorruption::EntryOutputLength(0x999));
    let a = r.cmd(&inp(0x80d, 0, 16), 16);
    assert_eq!(
        u32::from_be_bytes(a.entry[0x38..0x3c].try_into().unwrap()),
        0x999
    );
    r.emu
        .faults()
        .corrupt_output(None, 1, OutputCorruption::EntryToken(0x77));
    let a = r.cmd(&inp(0x80d, 0, 16), 16);
    assert_eq!(a.entry[0x3c], 0x77);
}

#[test]
fn corrupted_cqe_and_eqe_fields_and_cq_overrun() {
    let mut r = up();
    let uar = r.alloc_uar();
    let (eqn, eqbuf) = r.create_eq(4, uar, EV_PAGE | 1 << 4);
    let (cqn, cqbuf, _) = r.create_cq(4, uar, eqn);
    r.emu.faults().corrupt_next_cqe(cqn, 0x3c, 0xff);
    let mut cqe = [0u8; 64];
    cqe[0x3c] = 0x12;
    r.emu.post_cqe(cqn, &cqe).unwrap();
    assert_eq!(r.region(cqbuf).read_u8(0x3c), 0x12 ^ 0xff);
    r.emu.post_cqe(cqn, &cqe).unwrap();
    assert_eq!(
        r.region(cqbuf).read_u8(64 + 0x3c),
        0x12,
        "only the next one"
    );
    r.emu.faults().corrupt_next_eqe(eqn, 1, 0x40);
    r.emu.faults().page_request(1);
    assert_eq!(r.region(eqbuf).read_u8(1), 0x0b ^ 0x40);
    // An injected overrun: the CQ is in error, a CQ error event.
    r.emu.faults().cq_overrun(cqn);
    assert_eq!(r.emu.post_cqe(cqn, &cqe), Err(hca_emu::CqeError::Overrun));
    assert_eq!(r.emu.post_cqe(cqn, &cqe), Err(hca_emu::CqeError::CqInError));
    assert_eq!(r.region(eqbuf).read_u8(64 + 1), 0x04);
    assert!(r.emu.cq(cqn).unwrap().error);
}

#[test]
fn iommu_faults_are_recorded() {
    let mut r = up();
    let uar = r.alloc_uar();
    // An EQ whose buffer the driver freed: the device's EQE write faults.
    let (m, buf) = r.eq_input(4, uar, EV_PAGE);
    r.ok(&m, 16);
    let region = r.other.iter().position(|x| x.iova() == buf).unwrap();
    let region = r.other.remove(region);
    r.p.free_dma(region);
    let f = r.emu.iommu_faults();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FaultKind::FreedWhileHeld);
    r.emu.faults().page_request(1);
    let f = r.emu.iommu_faults();
    assert_eq!(f.len(), 2);
    assert_eq!((f[1].kind, f[1].iova), (FaultKind::Write, buf));
    assert!(f[1].what.contains("EQ"), "{}", f[1]);
    // The command queue itself unmapped: the entry read faults.
    let q = r.cmdq.take().unwrap();
    let qa = q.iova();
    r.p.free_dma(q);
    r.bar.write32(0x18, platform::Be32::new(1));
    r.emu.run_until_idle();
    let f = r.emu.iommu_faults();
    assert_eq!((f[2].kind, f[2].iova), (FaultKind::Read, qa));
}

#[test]
fn stepping_mode_runs_events_only_when_stepped() {
    let emu = EmuHca::new(EmuConfig::stepping());
    let p = emu.platform();
    let bar = p.map_bar(0).unwrap();
    p.config_write(4, &6u16.to_le_bytes()).unwrap();
    emu.advance(Duration::from_secs(1));
    let q = p.alloc_dma(4096, 4096).unwrap();
    bar.write32(0x10, platform::Be32::new((q.iova() >> 32) as u32));
    bar.write32(0x14, platform::Be32::new(q.iova() as u32));
    emu.advance(Duration::from_secs(1));
    let e = firmware_cmds::cmdq::CmdQueueEntry::build(
        &inp(0x104, 0, 16).try_into().unwrap(),
        16,
        0,
        16,
        0,
        1,
    )
    .unwrap();
    q.write_bytes(0, e.as_bytes());
    bar.write32(0x18, platform::Be32::new(1));
    assert_eq!(emu.pending_events(), 1);
    assert_eq!(q.read_u8(0x3f) & 1, 1, "not executed before a step");
    assert!(emu.step());
    assert_eq!(q.read_u8(0x3f), 0, "executed by the step");
    assert!(!emu.step());
    assert_eq!(emu.command_log().len(), 1);
    p.free_dma(q);
}

#[test]
fn command_latency_and_real_clock() {
    let cfg = EmuConfig {
        command_latency: Duration::from_millis(500),
        ..EmuConfig::default()
    };
    let mut r = Raw::new(cfg);
    let v0 = r.p.now();
    r.ok(&inp(0x104, 0, 16), 16);
    assert!(
        r.p.now() - v0 >= Duration::from_millis(500),
        "latency in virtual time"
    );
    r.free_all();
    let cfg = EmuConfig {
        clock: hca_emu::Clock::Real,
        boot_delay: Duration::from_millis(1),
        initializing_delay: Duration::from_millis(1),
        ..EmuConfig::default()
    };
    let mut r = Raw::new(cfg);
    r.ok(&inp(0x104, 0, 16), 16);
    let mut s = inp(0x10b, 0, 16);
    setf(&mut s, 8, 15, 0, 1);
    r.ok(&s, 16);
    r.free_all();
}
