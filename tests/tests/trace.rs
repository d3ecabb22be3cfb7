//! The command recorder: the driver's own traffic in the hexdump form of
//! Linux's `mlx5_core`, read back by `firmware-cmds`' trace parser, and
//! compared with the real ConnectX-4 trace.

use firmware_cmds::Opcode;
use firmware_cmds::cmdq::CmdQueueEntry;
use firmware_cmds::mailbox::CmdIfBox;
use firmware_cmds::trace::{self, TraceCommand};
use hca_driver::verbs::Qp;
use hca_driver::verbs::{Context, Cq, Pd};
use hca_driver::{CommandRecorder, Config, DumpRecorder, Exchange, Outcome};
use hca_emu::EmuConfig;
use hca_tests::Bench;
use hca_tests::verbs::to_init;
use std::sync::Arc;

/// The bring-up of a real-page-count emulated ConnectX-4, recorded.
fn recorded_bring_up(rec: &'static DumpRecorder<String>) -> (Vec<TraceCommand>, usize) {
    let cfg = Config {
        recorder: Some(rec),
        ..Config::default()
    };
    let mut b = Bench::emulated(EmuConfig::default().with_real_pages(), cfg);
    let hca = b.open();
    let n = b.emu().unwrap().command_log().len();
    b.close(hca);
    b.assert_clean();
    let text = rec.with(|s| s.clone());
    (trace::parse(&text).expect("the driver's dump parses"), n)
}

#[test]
fn the_driver_dump_parses_like_a_linux_trace() {
    static REC: DumpRecorder<String> = DumpRecorder::new(String::new());
    let (cmds, up) = recorded_bring_up(&REC);
    assert_eq!(cmds.len(), REC.commands() as usize);
    for c in &cmds {
        c.result().unwrap_or_else(|e| panic!("{}: {e}", c.opcode));
        let out = c.output.as_ref().unwrap();
        assert!(c.input.is_complete(), "{} input", c.opcode);
        assert!(out.is_complete(), "{} output", c.opcode);
        c.decode().unwrap();
    }
    // The large MANAGE_PAGES: 12,868 pages, 202 input blocks, as in the
    // real trace.
    let mp = cmds
        .iter()
        .filter(|c| c.opcode == Opcode::MANAGE_PAGES && c.op_mod == 1)
        .nth(1)
        .unwrap();
    assert_eq!(mp.input.length, 0x19230);
    assert_eq!(mp.input.blocks.len(), 202);
    assert!(up < cmds.len());
}

/// The driver's order and command shapes against Linux on the real card:
/// the trace's commands up to the first CREATE_EQ (the driver additionally
/// queries the atomic capabilities before INIT_HCA to set host-endian
/// atomics when supported) with the same opcode, op_mod, input and output
/// lengths; ENABLE_HCA byte for byte.
#[test]
fn bring_up_follows_the_real_trace() {
    static REC: DumpRecorder<String> = DumpRecorder::new(String::new());
    let (ours, _) = recorded_bring_up(&REC);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/prm/trace-mlx5_core-cx4.txt"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let linux = trace::parse(&text).unwrap();
    let shape = |c: &TraceCommand| {
        (
            c.opcode,
            c.op_mod,
            c.input.length,
            c.output.as_ref().map(|o| o.length),
        )
    };
    let end = linux
        .iter()
        .position(|c| c.opcode == Opcode::CREATE_EQ)
        .unwrap();
    let init = ours
        .iter()
        .position(|c| c.opcode == Opcode::INIT_HCA)
        .unwrap();
    let ours_shapes: Vec<_> = ours
        .iter()
        .enumerate()
        .filter(|&(i, c)| !(i < init && c.opcode == Opcode::QUERY_HCA_CAP && c.op_mod >> 1 == 3))
        .map(|(_, c)| shape(c))
        .collect();
    let linux_shapes: Vec<_> = linux[..=end].iter().map(shape).collect();
    // Linux queries ten capability blocks after INIT_HCA and allocates
    // four UARs; the driver queries the types it uses and one UAR.
    let dedup = |v: &[(Opcode, u16, usize, Option<usize>)]| {
        let mut out: Vec<Opcode> = v.iter().map(|s| s.0).collect();
        out.dedup();
        out
    };
    let linux_order = dedup(&linux_shapes);
    let ours_order = dedup(&ours_shapes);
    assert_eq!(
        &ours_order[..linux_order.len()],
        &linux_order[..],
        "command order differs from Linux"
    );
    let linux_init = linux_shapes
        .iter()
        .position(|s| s.0 == Opcode::INIT_HCA)
        .unwrap();
    assert_eq!(
        &ours_shapes[..=linux_init],
        &linux_shapes[..=linux_init],
        "commands up to INIT_HCA differ from Linux"
    );
    assert_eq!(
        ours[0].input.entry.as_bytes(),
        linux[0].input.entry.as_bytes(),
        "ENABLE_HCA entry"
    );
}

/// Writes each exchange with `firmware_cmds::trace::write_exchange` from
/// copies of the entries and blocks, and with the driver's streaming
/// writer, and compares them.
struct Compare {
    mismatches: std::sync::Mutex<Vec<String>>,
    seen: std::sync::atomic::AtomicUsize,
}

impl CommandRecorder for Compare {
    fn record(&self, ex: &Exchange<'_>) {
        self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(out) = ex.output_entry else { return };
        let ins: Vec<CmdIfBox> = (0..ex.input_blocks())
            .map(|i| ex.input_block(i).unwrap())
            .collect();
        let outs: Vec<CmdIfBox> = (0..ex.output_blocks())
            .map(|i| ex.output_block(i).unwrap())
            .collect();
        let mut want = String::new();
        trace::write_exchange(&mut want, ex.input_entry, &ins, out, &outs).unwrap();
        let mut got = String::new();
        ex.write_dump(&mut got).unwrap();
        if want != got || ex.to_string() != got {
            self.mismatches
                .lock()
                .unwrap()
                .push(format!("{}", ex.opcode));
        }
        let e: &CmdQueueEntry = out;
        if let Outcome::Answered { delivery, .. } = ex.outcome {
            assert_eq!(delivery, e.delivery_status());
        }
    }
}

#[test]
fn the_streaming_dump_equals_firmware_cmds_write_exchange() {
    static CMP: Compare = Compare {
        mismatches: std::sync::Mutex::new(Vec::new()),
        seen: std::sync::atomic::AtomicUsize::new(0),
    };
    let cfg = Config {
        recorder: Some(&CMP),
        ..Config::default()
    };
    let mut b = Bench::emulated(EmuConfig::default(), cfg);
    let hca = b.open();
    b.close(hca);
    b.assert_clean();
    assert!(CMP.seen.load(std::sync::atomic::Ordering::Relaxed) > 30);
    assert!(
        CMP.mismatches.lock().unwrap().is_empty(),
        "{:?}",
        CMP.mismatches.lock().unwrap()
    );
}

#[test]
fn a_timed_out_command_is_recorded_without_an_answer() {
    static REC: DumpRecorder<String> = DumpRecorder::new(String::new());
    let mut cfg = Config {
        recorder: Some(&REC),
        ..Config::default()
    };
    cfg.timeouts.command = std::time::Duration::from_secs(1);
    let mut b = Bench::emulated(EmuConfig::default(), cfg);
    b.emu()
        .unwrap()
        .faults()
        .command_never_completes(Some(Opcode::INIT_HCA.0), 1);
    assert!(b.try_open().is_err());
    let text = REC.with(|s| s.clone());
    assert!(text.contains("dump command INIT_HCA(0x102) INPUT"));
    assert!(!text.contains("dump command INIT_HCA(0x102) OUTPUT"));
    // The parser sees the INPUT without its OUTPUT.
    let cmds = trace::parse(&text).unwrap();
    let init = cmds.iter().find(|c| c.opcode == Opcode::INIT_HCA).unwrap();
    assert!(init.output.is_none());
    b.assert_clean();
}

#[test]
fn qp_transitions_are_recorded_with_their_own_layouts() {
    use hca_driver::verbs::{AccessFlags, QpAttr, QpInitAttr, QpState, QpType};
    static REC: DumpRecorder<String> = DumpRecorder::new(String::new());
    let cfg = Config {
        recorder: Some(&REC),
        ..Config::default()
    };
    let mut b = Bench::emulated(EmuConfig::default(), cfg);
    let hca = b.open();
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
        let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
        to_init(&mut qp, 1, AccessFlags::REMOTE_WRITE);
        qp.modify(&QpAttr::new().state(QpState::Init).pkey_index(0))
            .unwrap();
        qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    }
    b.close(hca);
    b.assert_clean();
    let text = REC.with(|s| s.clone());
    let cmds = trace::parse(&text).unwrap();
    let layouts: Vec<(&str, &str)> = cmds
        .iter()
        .filter(|c| matches!(c.opcode.0, 0x502 | 0x50e | 0x507))
        .map(|c| {
            let d = c.decode().unwrap();
            (d.input.ifc, d.output.ifc)
        })
        .collect();
    assert_eq!(
        layouts,
        vec![
            ("rst2init_qp_in", "rst2init_qp_out"),
            ("init2init_qp_in", "init2init_qp_out"),
            ("qp_2err_in", "qp_2err_out"),
        ]
    );
    let i2i = cmds
        .iter()
        .find(|c| c.opcode == Opcode::INIT2INIT_QP)
        .unwrap();
    let msg = <firmware_cmds::qp::Init2initQpIn as firmware_cmds::layout::Layout>::decode(
        &i2i.input.message,
    )
    .unwrap();
    assert_eq!(
        msg.get(firmware_cmds::qp::Init2initQpIn::opt_param_mask),
        firmware_cmds::qp::QP_OPTPAR_PKEY_INDEX
    );
    i2i.result().unwrap();
}
