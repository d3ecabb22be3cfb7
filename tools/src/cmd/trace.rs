//! `hca trace <file>`: decode a command dump in the Linux mlx5_core debug
//! form (`dump command NAME(0xop) INPUT|OUTPUT` followed by hex lines, as
//! `dyndbg="module mlx5_core +p"` prints it, or as `--dump-commands`
//! records it) command by command: opcode name, op_mod, status, syndrome,
//! and every input and output field by PRM name.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use firmware_cmds::registry::{self, CommandDecode};
use firmware_cmds::trace::{Dump, ParseOptions, TraceCommand, parse_with};
use firmware_cmds::{CmdStatus, DeliveryStatus};
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
    /// Check the signatures of the entries and mailbox blocks (as firmware
    /// does while cmdif_checksum is on).
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

/// Reads and parses a trace file.
pub fn load(path: &Path, check_signatures: bool) -> Result<Vec<TraceCommand>> {
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
    parse_with(&text, ParseOptions { check_signatures }).map_err(|source| ToolError::Trace {
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
    let commands = load(&a.file, a.check_signatures)?;
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
    use firmware_cmds::trace::{parse, write_exchange};

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
