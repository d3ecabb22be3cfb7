//! The command interface with signatures on (`cmdif_checksum` = 3): the
//! emulated firmware checks the signature of every queue entry and input
//! mailbox block (a wrong one is delivery status 0x1) and signs its
//! answers; the driver signs what it posts and, with
//! `Config::cmdif_checksum`, keeps signatures on for the whole session and
//! checks every answer. A corrupted signature from the device is a typed
//! error.

use firmware_cmds::Opcode;
use firmware_cmds::caps::{CMDIF_CHECKSUM_DISABLED, CMDIF_CHECKSUM_ENABLED, CmdHcaCap};
use firmware_cmds::cmdq::xor8;
use firmware_cmds::trace::{ParseOptions, TraceCommand, parse, parse_with};
use hca_driver::verbs::Qp;
use hca_driver::verbs::{AccessFlags, QpInitAttr, QpState, QpType};
use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd};
use hca_driver::{CapMode, Config, DumpRecorder, Error, Hca};
use hca_emu::{EmuConfig, EmuPlatform, OutputCorruption};
use hca_tests::Bench;
use hca_tests::verbs::to_init;
use std::sync::Arc;

fn config(checksum: bool, recorder: Option<&'static DumpRecorder<String>>) -> Config {
    Config {
        cmdif_checksum: checksum,
        recorder: recorder.map(|r| r as &'static dyn hca_driver::CommandRecorder),
        ..Config::default()
    }
}

/// Some work after bring-up: a context, a PD, a buffer, an MR, a CQ, an RC
/// QP taken to INIT (MANAGE_PAGES-sized inputs are not needed: CREATE_CQ
/// and CREATE_QP have input mailboxes, QUERY_QP output ones).
fn workload(hca: &Arc<Hca<EmuPlatform>>) {
    let ctx = Arc::new(Context::open(hca).unwrap());
    let pd = Arc::new(Pd::alloc(&ctx).unwrap());
    let buf = Arc::new(DmaBuf::alloc(hca, 8192).unwrap());
    let _mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
    let cq = Arc::new(Cq::create(&ctx, 64).unwrap());
    let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
    to_init(&mut qp, 1, AccessFlags::REMOTE_WRITE);
    qp.query().unwrap();
    assert_eq!(qp.state(), QpState::Init);
}

fn current_checksum(hca: &Hca<EmuPlatform>) -> u8 {
    hca.query_cap::<CmdHcaCap>(CapMode::Current)
        .unwrap()
        .get(CmdHcaCap::cmdif_checksum)
}

/// Every recorded command was delivered and executed.
fn all_ok(cmds: &[TraceCommand]) {
    for c in cmds {
        c.result()
            .unwrap_or_else(|e| panic!("{} op_mod {:#x}: {e}", c.opcode, c.op_mod));
    }
}

#[test]
fn boot_checksum_is_honoured_then_switched_off_by_default() {
    static TRACE: DumpRecorder<String> = DumpRecorder::new(String::new());
    let mut b = Bench::emulated(
        EmuConfig::default().with_checksum(),
        config(false, Some(&TRACE)),
    );
    // The emulator refuses an unsigned entry or input block while the
    // checksum is on: bring-up only works if the driver signs them.
    let hca = b.open();
    assert_eq!(current_checksum(&hca), CMDIF_CHECKSUM_DISABLED);
    workload(&hca);
    b.close(hca);
    b.assert_clean();
    let emu = b.emu().unwrap();
    assert!(
        emu.command_log().iter().all(|c| c.delivery_status == 0),
        "{:?}",
        emu.command_log()
    );
    let text = TRACE.with(|s| s.clone());
    let cmds = parse(&text).unwrap();
    all_ok(&cmds);
    // Up to SET_HCA_CAP every input is signed (MANAGE_PAGES of the boot
    // pages has an input block), and the firmware signed its answers.
    let set = cmds
        .iter()
        .position(|c| c.opcode == Opcode::SET_HCA_CAP)
        .unwrap();
    let before = &cmds[..=set];
    assert!(before.iter().any(|c| !c.input.blocks.is_empty()));
    let signed = |t: &str| {
        parse_with(
            t,
            ParseOptions {
                check_signatures: true,
            },
        )
    };
    for c in before {
        c.input.entry.check_signature().unwrap();
        for blk in &c.input.blocks {
            blk.check_signatures().unwrap();
        }
        let out = c.output.as_ref().unwrap();
        assert_eq!(xor8(out.entry.as_bytes()), 0xff, "{}", c.opcode);
        for blk in &out.blocks {
            blk.check_signatures().unwrap();
        }
    }
    // After it nothing is signed: the same trace does not pass a signature
    // check (the control for the test below).
    assert!(signed(&text).is_err());
}

#[test]
fn checksum_kept_on_signs_and_checks_every_command() {
    static TRACE: DumpRecorder<String> = DumpRecorder::new(String::new());
    let mut b = Bench::emulated(
        EmuConfig::default().with_checksum(),
        config(true, Some(&TRACE)),
    );
    let hca = b.open();
    assert_eq!(current_checksum(&hca), CMDIF_CHECKSUM_ENABLED);
    workload(&hca);
    b.close(hca);
    b.assert_clean();
    let text = TRACE.with(|s| s.clone());
    // Every entry posted and every block of both directions is signed.
    let cmds = parse_with(
        &text,
        ParseOptions {
            check_signatures: true,
        },
    )
    .unwrap();
    all_ok(&cmds);
    assert!(cmds.len() > 40);
    assert!(cmds.iter().filter(|c| !c.input.blocks.is_empty()).count() > 3);
    assert!(
        cmds.iter()
            .filter(|c| c.output.as_ref().is_some_and(|o| !o.blocks.is_empty()))
            .count()
            > 3
    );
    for c in &cmds {
        let out = c.output.as_ref().unwrap();
        assert_eq!(xor8(out.entry.as_bytes()), 0xff, "{}", c.opcode);
    }
}

#[test]
fn the_driver_turns_checksum_on() {
    // The firmware boots with it off (the recorded card); the driver asks
    // for it with SET_HCA_CAP.
    static TRACE: DumpRecorder<String> = DumpRecorder::new(String::new());
    let mut b = Bench::emulated(EmuConfig::default(), config(true, Some(&TRACE)));
    let hca = b.open();
    assert_eq!(current_checksum(&hca), CMDIF_CHECKSUM_ENABLED);
    workload(&hca);
    b.close(hca);
    b.assert_clean();
    let text = TRACE.with(|s| s.clone());
    let cmds = parse(&text).unwrap();
    all_ok(&cmds);
    let set = cmds
        .iter()
        .position(|c| c.opcode == Opcode::SET_HCA_CAP)
        .unwrap();
    for c in &cmds[set + 1..] {
        c.input.entry.check_signature().unwrap();
        for blk in &c.input.blocks {
            blk.check_signatures().unwrap();
        }
        let out = c.output.as_ref().unwrap();
        assert_eq!(xor8(out.entry.as_bytes()), 0xff, "{}", c.opcode);
        for blk in &out.blocks {
            blk.check_signatures().unwrap();
        }
    }
}

#[test]
fn a_wrong_signature_from_the_device_is_a_typed_error() {
    Bench::emulated(EmuConfig::default().with_checksum(), config(true, None)).with_open(
        |hca, emu| {
            // An output block (QUERY_HCA_CAP's answer is in mailboxes).
            emu.faults().corrupt_output(
                Some(Opcode::QUERY_HCA_CAP.0),
                1,
                OutputCorruption::Signature,
            );
            let e = hca.query_cap::<CmdHcaCap>(CapMode::Current).unwrap_err();
            match &e {
                Error::MalformedAnswer {
                    opcode: Opcode::QUERY_HCA_CAP,
                    op_mod: 1,
                    error: firmware_cmds::Error::BadSignature { .. },
                } => {}
                other => panic!("{other}"),
            }
            assert!(e.to_string().contains("QUERY_HCA_CAP"), "{e}");
            // The entry (QUERY_VPORT_STATE answers inline only).
            emu.faults().corrupt_output(
                Some(Opcode::QUERY_VPORT_STATE.0),
                1,
                OutputCorruption::EntrySignature,
            );
            let e = hca.vport_up().unwrap_err();
            match &e {
                Error::MalformedAnswer {
                    opcode: Opcode::QUERY_VPORT_STATE,
                    error:
                        firmware_cmds::Error::BadSignature {
                            which: "signature", ..
                        },
                    ..
                } => {}
                other => panic!("{other}"),
            }
            // Nothing is stuck: the next commands work.
            hca.vport_up().unwrap();
            assert_eq!(current_checksum(hca), CMDIF_CHECKSUM_ENABLED);
        },
    );
}

#[test]
fn a_wrong_signature_during_bring_up_unwinds() {
    let mut b = Bench::emulated(EmuConfig::default().with_checksum(), config(true, None));
    // QUERY_HCA_CAP #3 is the first one after the driver learned that the
    // firmware signs (the general caps, maximum then current, come first).
    let rule = b.emu().unwrap().faults().corrupt_output(
        Some(Opcode::QUERY_HCA_CAP.0),
        3,
        OutputCorruption::Signature,
    );
    let e = b.try_open().unwrap_err();
    assert_eq!(b.emu().unwrap().faults().hits(rule), 1);
    assert!(
        matches!(
            e,
            Error::MalformedAnswer {
                opcode: Opcode::QUERY_HCA_CAP,
                error: firmware_cmds::Error::BadSignature { .. },
                ..
            }
        ),
        "{e}"
    );
    let emu = b.emu().unwrap();
    assert!(emu.iommu_faults().is_empty());
    assert!(emu.leak_report().is_clean(), "{:?}", emu.leak_report());
    // The device is usable again.
    let hca = b.open();
    b.close(hca);
    b.assert_clean();
}

#[test]
fn without_checksum_a_wrong_entry_signature_is_ignored() {
    // The recorded card: checksum off; the driver checks nothing.
    let mut b = Bench::emulated(EmuConfig::default(), config(false, None));
    let hca = b.open();
    let rule = b.emu().unwrap().faults().corrupt_output(
        Some(Opcode::QUERY_VPORT_STATE.0),
        1,
        OutputCorruption::EntrySignature,
    );
    hca.vport_up().unwrap();
    // The wrong signature was really delivered, and ignored.
    assert_eq!(b.emu().unwrap().faults().hits(rule), 1);
    b.close(hca);
    b.assert_clean();
}
