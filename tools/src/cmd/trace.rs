//! `hca trace <file>`: decode a command dump in the Linux mlx5_core debug
//! form (`dump command NAME(0xop) INPUT|OUTPUT` followed by hex lines, as
//! `dyndbg="module mlx5_core +p"` prints it, or as `--dump-commands`
//! records it) command by command: opcode name, op_mod, status, syndrome,
//! and every input and output field by PRM name.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use firmware_cmds::caps::{self, CmdHcaCap};
use firmware_cmds::layout::Layout;
use firmware_cmds::registry::{self, CommandDecode};
use firmware_cmds::trace::{Dump, ParseOptions, TraceCommand, parse_with};
use firmware_cmds::{CmdStatus, DeliveryStatus, Opcode};
use serde::{Serialize, Serializer};

use crate::decode::{self, Fields, Node, TextStyle, Value};
use crate::error::{Result, ToolError};
use crate::output::json_line;

/// The largest trace read (the real ConnectX-4 bring-up is 1.4 MB).
const MAX_TRACE_BYTES: u64 = 1 << 30;

/// Arguments of `hca trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The dump (a kernel log with mlx5_core command dumps, or a file
    /// written with --dump-commands); `-` reads standard input.
    file: PathBuf,
    /// Also print fields that are zero (text output; JSON has every field).
    #[arg(long)]
    zeros: bool,
    /// Check the signatures: every INPUT entry's (Linux and this driver
    /// always sign it), and the mailbox blocks' while the trace's
    /// cmdif_checksum is on (as firmware does; it is off from reset on a
    /// ConnectX-4, and Linux keeps it off, so its blocks carry none).
    #[arg(long)]
    check_signatures: bool,
}

fn ser_fields<S: Serializer>(nodes: &[Node], s: S) -> std::result::Result<S::Ok, S::Error> {
    Fields(nodes).serialize(s)
}

fn ser_opt_fields<S: Serializer>(
    nodes: &Option<Vec<Node>>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match nodes {
        Some(n) => Fields(n).serialize(s),
        None => s.serialize_none(),
    }
}

/// One decoded command: the JSON object of `hca trace --json`.
#[derive(Debug, Serialize)]
pub struct Decoded {
    /// 1-based position in the trace.
    pub index: usize,
    /// Line of the INPUT dump header.
    pub line: usize,
    /// The opcode.
    pub opcode: u16,
    /// Its PRM name (`null` if unknown).
    pub opcode_name: Option<&'static str>,
    /// The op_mod.
    pub op_mod: u16,
    /// Command status (output byte 0; `null` without an OUTPUT dump).
    pub status: Option<u8>,
    /// The status' name.
    pub status_name: Option<&'static str>,
    /// Syndrome (output bytes 4..8).
    pub syndrome: Option<u32>,
    /// Delivery status of the answered entry.
    pub delivery_status: Option<u8>,
    /// The input layout's `mlx5_ifc` name (`null` if not declared).
    pub input_layout: Option<&'static str>,
    /// The output layout's `mlx5_ifc` name.
    pub output_layout: Option<&'static str>,
    /// Input length the entry announces.
    pub input_length: usize,
    /// Output length the entry announces.
    pub output_length: Option<usize>,
    /// Whether the dump shows the whole input (Linux does not always dump
    /// every mailbox block).
    pub input_complete: bool,
    /// Whether the dump shows the whole output.
    pub output_complete: Option<bool>,
    /// The input's fields.
    #[serde(serialize_with = "ser_fields")]
    pub input: Vec<Node>,
    /// The output's fields (`null` without an OUTPUT dump).
    #[serde(serialize_with = "ser_opt_fields")]
    pub output: Option<Vec<Node>>,
}

/// The command header of an input the registry does not know: opcode,
/// op_mod and the rest as bytes.
fn raw_input(m: &[u8]) -> Vec<Node> {
    let be16 = |o: usize| {
        m.get(o..o + 2)
            .map(|b| u64::from(u16::from_be_bytes([b[0], b[1]])))
    };
    let mut v = Vec::new();
    if let Some(op) = be16(0) {
        v.push(Node {
            name: "opcode",
            value: Value::Uint(op),
        });
    }
    if let Some(om) = be16(6) {
        v.push(Node {
            name: "op_mod",
            value: Value::Uint(om),
        });
    }
    if m.len() > 8 {
        v.push(Node {
            name: "data",
            value: Value::Bytes(m[8..].to_vec()),
        });
    }
    v
}

/// Status, syndrome and the rest as bytes, for an unknown command's output.
fn raw_output(m: &[u8]) -> Vec<Node> {
    let mut v = Vec::new();
    if let Some(&s) = m.first() {
        v.push(Node {
            name: "status",
            value: Value::Uint(u64::from(s)),
        });
    }
    if let Some(b) = m.get(4..8) {
        v.push(Node {
            name: "syndrome",
            value: Value::Uint(u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))),
        });
    }
    if m.len() > 8 {
        v.push(Node {
            name: "data",
            value: Value::Bytes(m[8..].to_vec()),
        });
    }
    v
}

/// Decodes one command of a parsed trace.
pub fn decode_command(index: usize, c: &TraceCommand) -> Decoded {
    let layouts: Option<CommandDecode> = registry::lookup(&c.input.message).ok();
    let input = match &layouts {
        Some(d) => decode::decode(d.input, &c.input.message, d.input_payload),
        None => raw_input(&c.input.message),
    };
    let out: Option<&Dump> = c.output.as_ref();
    let output = out.map(|o| match &layouts {
        Some(d) => decode::decode(d.output, &o.message, d.output_payload),
        None => raw_output(&o.message),
    });
    let status = out.and_then(|o| o.message.first().copied());
    let syndrome = out.and_then(|o| {
        o.message
            .get(4..8)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    });
    Decoded {
        index,
        line: c.input.line,
        opcode: c.opcode.0,
        opcode_name: c.opcode.name(),
        op_mod: c.op_mod,
        status,
        status_name: status.and_then(|s| CmdStatus(s).name()),
        syndrome,
        delivery_status: c.delivery_status().map(|d| d.0),
        input_layout: layouts.as_ref().map(|d| d.input.ifc),
        output_layout: layouts.as_ref().map(|d| d.output.ifc),
        input_length: c.input.length,
        output_length: out.map(|o| o.length),
        input_complete: c.input.is_complete(),
        output_complete: out.map(Dump::is_complete),
        input,
        output,
    }
}

/// What `--check-signatures` checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignatureCount {
    /// Entries whose signature was checked (every INPUT, and the OUTPUT
    /// ones while cmdif_checksum is on).
    pub entries: usize,
    /// Mailbox blocks checked (cmdif_checksum on).
    pub blocks: usize,
    /// Blocks not checked: cmdif_checksum off.
    pub blocks_off: usize,
    /// Blocks not checked: the trace does not show whether cmdif_checksum
    /// was on (no QUERY_HCA_CAP of the current general capabilities and no
    /// SET_HCA_CAP before them).
    pub blocks_unknown: usize,
}

/// `cmd_hca_cap.cmdif_checksum` of the capability at byte 0x10 of a
/// QUERY_HCA_CAP output or SET_HCA_CAP input, if the dump shows it.
fn cmdif_checksum(message: &[u8]) -> Option<u8> {
    // The dword of cmdif_checksum (0x40) must be in the dump.
    let cap = message.get(0x10..).filter(|c| c.len() >= 0x44)?;
    let mut image = vec![0u8; CmdHcaCap::SIZE];
    let n = cap.len().min(image.len());
    image[..n].copy_from_slice(&cap[..n]);
    Some(
        CmdHcaCap::decode(&image)
            .ok()?
            .get(CmdHcaCap::cmdif_checksum),
    )
}

/// What a command says about the firmware's signature checking from the
/// next command on: a SET_HCA_CAP of the general capabilities sets it, a
/// QUERY_HCA_CAP of the current ones reports it (if they succeeded).
fn checksum_state_after(c: &TraceCommand) -> Option<bool> {
    let ok = c.result().is_ok();
    let general_cur = op_mod(caps::CAP_GENERAL, caps::HCA_CAP_OP_MOD_GET_CUR);
    let value = if c.opcode == Opcode::SET_HCA_CAP && c.op_mod == caps::CAP_GENERAL << 1 && ok {
        cmdif_checksum(&c.input.message)
    } else if c.opcode == Opcode::QUERY_HCA_CAP && c.op_mod == general_cur && ok {
        cmdif_checksum(&c.output.as_ref()?.message)
    } else {
        return None;
    };
    Some(value? != caps::CMDIF_CHECKSUM_DISABLED)
}

fn op_mod(cap_type: u16, mode: u16) -> u16 {
    (cap_type << 1) | (mode & 1)
}

/// Checks the signatures of a parsed trace the way the two ends of the
/// command interface do (Linux mlx5_core's `set_signature` and
/// `verify_signature`, the PRM): every INPUT entry's signature makes its
/// 64 bytes XOR to 0xff; while `cmdif_checksum` is on, each mailbox block's
/// `ctrl_signature` makes bytes 0x200..0x23e XOR to 0xff and its
/// `signature` the whole block, and the firmware signs its answer's entry
/// too. Before the trace shows the state, it is
/// the one the first QUERY_HCA_CAP of the current general capabilities
/// reports (nothing but SET_HCA_CAP changes it).
pub fn check_signatures(path: &Path, cmds: &[TraceCommand]) -> Result<SignatureCount> {
    let fail =
        |i: usize, c: &TraceCommand, what: String, e: firmware_cmds::Error| ToolError::Signature {
            path: path.to_path_buf(),
            index: i + 1,
            line: c.input.line,
            opcode: c.opcode,
            what,
            source: e,
        };
    // The state at the start: what the first report before any change says.
    let mut on = None;
    for c in cmds {
        if let Some(v) = checksum_state_after(c) {
            if c.opcode == Opcode::QUERY_HCA_CAP {
                on = Some(v);
            }
            break;
        }
    }
    let mut n = SignatureCount::default();
    for (i, c) in cmds.iter().enumerate() {
        c.input
            .entry
            .check_signature()
            .map_err(|e| fail(i, c, "INPUT entry".into(), e))?;
        n.entries += 1;
        // Firmware signs its answer's entry while the checksum is on.
        if let (Some(true), Some(out)) = (on, &c.output) {
            out.entry
                .check_signature()
                .map_err(|e| fail(i, c, "OUTPUT entry".into(), e))?;
            n.entries += 1;
        }
        let sides = [("INPUT", Some(&c.input)), ("OUTPUT", c.output.as_ref())];
        for (side, dump) in sides {
            let Some(d) = dump else { continue };
            for (b, block) in d.blocks.iter().enumerate() {
                match on {
                    Some(true) => {
                        block
                            .check_signatures()
                            .map_err(|e| fail(i, c, format!("{side} block {b}"), e))?;
                        n.blocks += 1;
                    }
                    Some(false) => n.blocks_off += 1,
                    None => n.blocks_unknown += 1,
                }
            }
        }
        if let Some(v) = checksum_state_after(c) {
            on = Some(v);
        }
    }
    Ok(n)
}

/// Reads and parses a trace file.
pub fn load(path: &Path) -> Result<Vec<TraceCommand>> {
    let file_err = |source| ToolError::File {
        path: path.to_path_buf(),
        source,
    };
    let reader: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(path).map_err(file_err)?;
        if f.metadata().map_err(file_err)?.is_dir() {
            return Err(file_err(std::io::Error::other(
                "is a directory, not a trace file",
            )));
        }
        Box::new(f)
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_TRACE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(file_err)?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(file_err(std::io::Error::other(format!(
            "larger than {} MiB; cut the part to decode out of it",
            MAX_TRACE_BYTES >> 20
        ))));
    }
    // Kernel logs may hold stray bytes outside the dumps; those lines are
    // skipped like any other text.
    let text = String::from_utf8_lossy(&bytes);
    parse_with(&text, ParseOptions::default()).map_err(|source| ToolError::Trace {
        path: path.to_path_buf(),
        source,
    })
}

fn write_text(d: &Decoded, style: TextStyle, out: &mut dyn Write) -> Result<()> {
    let name = d.opcode_name.unwrap_or("UNKNOWN");
    let outcome = match (d.status, d.delivery_status) {
        (_, Some(ds)) if ds != 0 => format!("delivery failed: {}", DeliveryStatus(ds)),
        (Some(s), _) => format!(
            "status {}, syndrome {:#x}",
            CmdStatus(s),
            d.syndrome.unwrap_or(0)
        ),
        (None, _) => "no OUTPUT (the trace ends before the firmware answered)".to_string(),
    };
    writeln!(
        out,
        "#{} {name}({:#x}) op_mod({:#x}): {outcome}  [line {}]",
        d.index, d.opcode, d.op_mod, d.line
    )?;
    let shown = |complete: bool, len: usize| {
        if complete {
            format!("{len} bytes")
        } else {
            format!("{len} bytes, partly dumped")
        }
    };
    writeln!(
        out,
        "  input ({}, {}):",
        d.input_layout.unwrap_or("undeclared layout"),
        shown(d.input_complete, d.input_length)
    )?;
    decode::write_text(out, &d.input, 4, style)?;
    if let (Some(o), Some(len)) = (&d.output, d.output_length) {
        writeln!(
            out,
            "  output ({}, {}):",
            d.output_layout.unwrap_or("undeclared layout"),
            shown(d.output_complete.unwrap_or(true), len)
        )?;
        decode::write_text(out, o, 4, style)?;
    }
    Ok(())
}

/// `hca trace`.
pub fn run(a: &TraceArgs, as_json: bool, out: &mut dyn Write) -> Result<ExitCode> {
    let commands = load(&a.file)?;
    if a.check_signatures {
        let n = check_signatures(&a.file, &commands)?;
        eprintln!(
            "hca: signatures good: {} entries; {} mailbox blocks checked (cmdif_checksum on), {} not (cmdif_checksum off){}",
            n.entries,
            n.blocks,
            n.blocks_off,
            if n.blocks_unknown > 0 {
                format!(
                    ", {} not (the trace does not show the cmdif_checksum state before them)",
                    n.blocks_unknown
                )
            } else {
                String::new()
            }
        );
    }
    let style = TextStyle {
        zeros: a.zeros,
        max_elements: 4,
    };
    let mut failed = 0usize;
    for (i, c) in commands.iter().enumerate() {
        let d = decode_command(i + 1, c);
        if d.status.is_some_and(|s| s != 0) || d.delivery_status.is_some_and(|s| s != 0) {
            failed += 1;
        }
        if as_json {
            json_line(out, &d)?;
        } else {
            if i > 0 {
                writeln!(out)?;
            }
            write_text(&d, style, out)?;
        }
    }
    if !as_json {
        let unanswered = commands.iter().filter(|c| c.output.is_none()).count();
        writeln!(
            out,
            "\n{} commands, {} failed, {} without an answer",
            commands.len(),
            failed,
            unanswered
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmware_cmds::cmdq::CmdQueueEntry;
    use firmware_cmds::mailbox::CmdIfBox;
    use firmware_cmds::trace::{parse, write_exchange};
    use hca_driver::verbs::{Context, Cq};
    use std::sync::Arc;

    /// A CREATE_QP that failed with bad parameter, and a command the
    /// registry does not declare.
    fn trace() -> String {
        let mut s = String::new();
        for (op, token) in [(0x0500u16, 1u8), (0x0a00, 2)] {
            let mut inline = [0u8; 16];
            inline[..2].copy_from_slice(&op.to_be_bytes());
            let e = CmdQueueEntry::build(&inline, 16, 0, 16, 0, token).unwrap();
            let mut out = e.clone();
            let mut answer = [0u8; 16];
            answer[0] = 0x03;
            answer[4..8].copy_from_slice(&0x0012_3456u32.to_be_bytes());
            out.set(CmdQueueEntry::command_output_inline_data, answer)
                .unwrap()
                .set(CmdQueueEntry::ownership, false)
                .unwrap();
            write_exchange(&mut s, &e, &[], &out, &[]).unwrap();
        }
        s
    }

    /// The command dump of a bring-up and teardown of an emulated
    /// ConnectX-4 whose firmware starts with signatures on; the driver
    /// keeps them on or turns them off.
    fn recorded(keep_checksum: bool) -> Vec<TraceCommand> {
        use hca_driver::{CommandRecorder, Config, DumpRecorder, Hca};
        use hca_emu::{EmuConfig, EmuHca};
        let rec: &'static DumpRecorder<String> =
            Box::leak(Box::new(DumpRecorder::new(String::new())));
        let emu = EmuHca::new(EmuConfig::default().with_checksum());
        let cfg = Config {
            cmdif_checksum: keep_checksum,
            recorder: Some(rec as &'static dyn CommandRecorder),
            ..Config::default()
        };
        let hca = Arc::new(Hca::open(emu.platform(), cfg).map_err(|f| f.error).unwrap());
        let ctx = Arc::new(Context::open(&hca).unwrap());
        // CREATE_CQ has an input mailbox block.
        drop(Cq::create(&ctx, 64).unwrap());
        drop(ctx);
        let hca = Arc::into_inner(hca).expect("the last handle");
        hca.close().map_err(|f| f.error).unwrap();
        parse(&rec.with(|s| s.clone())).unwrap()
    }

    #[test]
    fn signatures_are_checked_while_the_trace_has_them_on() {
        let path = Path::new("t");
        // The real ConnectX-4 trace: checksum off from reset (QUERY_HCA_CAP
        // current reports 0), Linux signs every entry and no block.
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/prm/trace-mlx5_core-cx4.txt"
        ))
        .unwrap();
        let real = parse(&text).unwrap();
        let n = check_signatures(path, &real).unwrap();
        assert_eq!((n.entries, n.blocks, n.blocks_unknown), (42, 0, 0));
        assert!(n.blocks_off > 0);
        // A wrong entry signature is named.
        let mut bad = real.clone();
        let sig = bad[3].input.entry.get(CmdQueueEntry::signature);
        bad[3]
            .input
            .entry
            .set(CmdQueueEntry::signature, sig ^ 0x10)
            .unwrap();
        let e = check_signatures(path, &bad).unwrap_err().to_string();
        assert!(e.contains("command #4") && e.contains("INPUT entry"), "{e}");

        // Signatures on from reset, turned off by SET_HCA_CAP: the blocks
        // before it are checked (and good), those after are not.
        let off = recorded(false);
        let n = check_signatures(path, &off).unwrap();
        assert!(n.blocks > 0 && n.blocks_off > 0, "{n:?}");
        assert_eq!(n.blocks_unknown, 0);
        // Kept on: every block and every answer's entry is checked.
        let on = recorded(true);
        let n = check_signatures(path, &on).unwrap();
        assert_eq!(n.blocks_off + n.blocks_unknown, 0, "{n:?}");
        assert_eq!(n.entries, 2 * on.len());
        let total: usize = on
            .iter()
            .map(|c| c.input.blocks.len() + c.output.as_ref().map_or(0, |o| o.blocks.len()))
            .sum();
        assert_eq!(n.blocks, total);
        // A wrong block signature is named, input side and output side.
        let last = on.len() - 1;
        let (i, side) = on
            .iter()
            .enumerate()
            .find_map(|(i, c)| (!c.input.blocks.is_empty() && i > 20).then_some((i, "INPUT")))
            .unwrap();
        let mut bad = on.clone();
        let s = bad[i].input.blocks[0].get(CmdIfBox::signature);
        bad[i].input.blocks[0]
            .set(CmdIfBox::signature, s ^ 1)
            .unwrap();
        let e = check_signatures(path, &bad).unwrap_err().to_string();
        assert!(
            e.contains(&format!("command #{}", i + 1)) && e.contains(&format!("{side} block 0")),
            "{e}"
        );
        let mut bad = on.clone();
        let out = bad[last].output.as_mut().unwrap();
        let s = out.entry.get(CmdQueueEntry::signature);
        out.entry.set(CmdQueueEntry::signature, s ^ 1).unwrap();
        let e = check_signatures(path, &bad).unwrap_err().to_string();
        assert!(e.contains("OUTPUT entry"), "{e}");
        // The same damage in the trace with signatures off goes unnoticed
        // for blocks (the firmware would not look), not for entries.
        let (j, _) = off
            .iter()
            .enumerate()
            .rev()
            .find(|(_, c)| !c.input.blocks.is_empty())
            .unwrap();
        let mut quiet = off.clone();
        let s = quiet[j].input.blocks[0].get(CmdIfBox::signature);
        quiet[j].input.blocks[0]
            .set(CmdIfBox::signature, s ^ 1)
            .unwrap();
        check_signatures(path, &quiet).unwrap();
    }

    #[test]
    fn failures_and_undeclared_commands_decode() {
        let cmds = parse(&trace()).unwrap();
        let d = decode_command(1, &cmds[0]);
        assert_eq!(d.opcode_name, Some("CREATE_QP"));
        assert_eq!((d.status, d.syndrome), (Some(3), Some(0x12_3456)));
        assert_eq!(d.status_name, Some("bad parameter"));
        assert_eq!(d.input_layout, Some("create_qp_in"));
        assert!(d.input_complete);
        let mut text = Vec::new();
        let style = TextStyle {
            zeros: false,
            max_elements: 4,
        };
        write_text(&d, style, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with(
                "#1 CREATE_QP(0x500) op_mod(0x0): status bad parameter(0x3), syndrome 0x123456"
            ),
            "{text}"
        );
        assert!(
            text.contains("  input (create_qp_in, 16 bytes):\n"),
            "{text}"
        );
        assert!(
            text.contains("    syndrome: 1193046 (0x123456)\n"),
            "{text}"
        );

        let u = decode_command(2, &cmds[1]);
        assert_eq!(u.input_layout, None);
        assert_eq!(u.status, Some(3));
        let v = serde_json::to_value(&u).unwrap();
        assert_eq!(v["input"]["opcode"], 0xa00);
        assert_eq!(v["output"]["syndrome"], 0x12_3456);
    }
}
