//! The `hca` binary end to end: every command on the emulated ConnectX-4,
//! the trace decoder on the real ConnectX-4 trace, the command recorder
//! round trip, list/bind/unbind on this machine and on fake sysfs trees,
//! and every error path (one line on stderr, non-zero exit, no panic).

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{hca, json, scratch, vfio_preload};
use platform::vfio::sysfs::fake::{FakeSysfs, temp_dir};
use serde_json::Value;

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str]) -> String {
    let o = hca(args);
    assert!(
        o.status.success(),
        "hca {args:?} failed ({:?}): {}",
        o.status,
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    stdout(&o)
}

/// Runs and expects exactly one error line on stderr, exit code 1, no
/// panic, nothing on stdout; returns the line.
fn fails(args: &[&str]) -> String {
    let o = hca(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "hca {args:?}: {err}");
    assert!(o.stdout.is_empty(), "hca {args:?} printed {}", stdout(&o));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "hca {args:?}: one error line expected: {err}"
    );
    assert!(lines[0].starts_with("hca: error: "), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
    lines[0].to_string()
}

fn trace_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/prm/trace-mlx5_core-cx4.txt")
}

fn trace_path() -> String {
    trace_file().display().to_string()
}

// ---- info ------------------------------------------------------------------

#[test]
fn info_prints_ibv_devinfo_fields_on_the_emulator() {
    let o = hca(&["info"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("emulated ConnectX-4"), "{err}");
    let out = stdout(&o);
    for line in [
        "hca_id:\temu\n",
        "\ttransport:\t\t\tInfiniBand (0)\n",
        "\tfw_ver:\t\t\t\t14.12.1220\n",
        "\tvendor_id:\t\t\t0x02c9\n",
        "\tvendor_part_id:\t\t\t4115\n",
        "\thw_ver:\t\t\t\t0x0\n",
        "\tphys_port_cnt:\t\t\t1\n",
        "\t\tport:\t1\n",
        "\t\t\tmax_mtu:\t\t4096 (5)\n",
        "\t\t\tsm_lid:\t\t\t0\n",
        "\t\t\tport_lid:\t\t0\n",
        "\t\t\tport_lmc:\t\t0x00\n",
        "\t\t\tlink_layer:\t\tEthernet\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    assert!(out.contains("\tnode_guid:\t\t\t"), "{out}");
    assert!(out.contains("\t\t\tstate:\t\t\tPORT_"), "{out}");
    // No verbose fields without -v.
    assert!(!out.contains("max_qp:"), "{out}");
}

#[test]
fn info_verbose_adds_capability_limits() {
    let out = ok(&["info", "-v"]);
    // log_max_qp is 17 after the driver's SET_HCA_CAP (as Linux does).
    for line in [
        "\tmax_qp:\t\t\t\t131072\n",
        "\tmax_sge:\t\t\t30\n",
        "\tmax_cqe:\t\t\t4194303\n",
        "\tatomic_cap:\t\t\tATOMIC_NONE (0)\n",
        "\tmax_pkeys:\t\t\t128\n",
        "\tpage_size_cap:\t\t\t0xfffffffffffff000\n",
        "\t\t\tgid_tbl_len:\t\t256\n",
        "\t\t\tmax_msg_sz:\t\t0x40000000\n",
        "\t\t\tpkey_tbl_len:\t\t1\n",
        "\t\t\tactive_width:\t\tinvalid widthX (0)\n",
        // GIDs 0 and 1: the link-local GID of the port's MAC
        // 7c:fe:90:58:7d:01 as RoCE v1 and v2, programmed by the verbs
        // context.
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:7efe:90ff:fe58:7d01, RoCE v1\n",
        "\t\t\tGID[  1]:\t\tfe80:0000:0000:0000:7efe:90ff:fe58:7d01, RoCE v2\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
}

#[test]
fn info_json_parses() {
    let v = json(&ok(&["info", "--json"]));
    assert_eq!(v["hca_id"], "emu");
    assert_eq!(v["fw_ver"], "14.12.1220");
    assert_eq!(v["vendor_part_id"], 4115);
    assert_eq!(v["vendor_id"], 0x02c9);
    assert_eq!(v["phys_port_cnt"], 1);
    assert_eq!(v["ports"][0]["port"], 1);
    assert_eq!(v["ports"][0]["link_layer"], "Ethernet");
    assert_eq!(v["ports"][0]["max_mtu"], 4096);
    assert!(v.get("attributes").is_none());

    let v = json(&ok(&["info", "-v", "--json"]));
    assert_eq!(v["attributes"]["max_qp"], 131072);
    assert_eq!(v["attributes"]["atomic_cap"], 0);
    assert_eq!(v["ports"][0]["gid_tbl_len"], 256);
    assert_eq!(v["ports"][0]["gids"][0]["index"], 0);
    // JSON writes GIDs in the colon form, as every --json output does.
    assert_eq!(v["ports"][0]["gids"][0]["gid"], "fe80::7efe:90ff:fe58:7d01");
}

#[test]
fn info_explains_atomics_and_a_down_port() {
    // atomic_cap as Linux mlx5_ib's get_atomic_caps computes it from the
    // current atomic caps the same device reports.
    let caps = json(&ok(&["caps", "-t", "atomic", "--json"]));
    let a = &caps["atomic"];
    let ops = a["atomic_operations"].as_u64().unwrap();
    let size = a["atomic_size_qp"].as_u64().unwrap();
    let mode = a["atomic_req_8B_endianness_mode"].as_u64().unwrap();
    let linux = if ops & 3 == 3 && size & 8 != 0 && mode != 0 {
        ("ATOMIC_HCA", 1)
    } else {
        ("ATOMIC_NONE", 0)
    };
    let v = json(&ok(&["info", "-v", "--json"]));
    assert_eq!(v["atomic_cap"], linux.0);
    assert_eq!(v["attributes"]["atomic_cap"], linux.1);
    // The device executes atomics all the same, in the byte order the mode
    // says (0: big-endian).
    assert_eq!(mode, 0);
    assert_eq!(v["atomic_byte_order"], "big-endian");
    let out = ok(&["info"]);
    assert!(
        out.contains("\tatomics:\t\t\t8-byte, operands big-endian (atomic_req_8B_endianness_mode 0), so atomic_cap is ATOMIC_NONE as Linux reports it\n"),
        "{out}"
    );
    let out = ok(&["perf", "atomic-lat", "-n", "10"]);
    assert!(
        out.contains(" Atomic operands : 8 bytes, big-endian byte order\n"),
        "{out}"
    );
    let out = ok(&["perf", "read-lat", "-n", "10"]);
    assert!(!out.contains("Atomic operands"), "{out}");
    // A lone emulated HCA's port is down, and info says why.
    assert_eq!(v["ports"][0]["state"], "PORT_DOWN");
    let why = v["ports"][0]["down_reason"].as_str().unwrap();
    assert!(
        why.starts_with("no link: this emulated HCA's port has no cable"),
        "{why}"
    );
    let out = ok(&["info"]);
    assert!(
        out.contains("\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tdown_reason:\t\tno link: "),
        "{out}"
    );
}

// ---- caps ------------------------------------------------------------------

#[test]
fn caps_lists_every_field_by_prm_name() {
    let out = ok(&["caps"]);
    for head in [
        "GENERAL capabilities (type 0x0, cmd_hca_cap, current):",
        "ETHERNET_OFFLOADS capabilities (type 0x1",
        "ATOMIC capabilities (type 0x3, atomic_caps, current):",
        "ROCE capabilities (type 0x4, roce_cap, current):",
        "FLOW_TABLE capabilities (type 0x7, flow_table_nic_cap, current):",
    ] {
        assert!(out.contains(head), "missing {head:?}");
    }
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("log_max_qp "))
        .expect("log_max_qp listed");
    assert!(line.ends_with("17 (0x11)"), "{line}");
    // Zero fields are listed too, and nested layouts flattened.
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("vhca_resource_manager "))
    );
    assert!(out.contains("flow_table_properties_nic_receive.ft_support"));
}

#[test]
fn caps_json_current_and_max() {
    let cur = json(&ok(&["caps", "--json"]));
    assert_eq!(cur["mode"], "current");
    assert_eq!(cur["general"]["log_max_qp"], 17);
    assert_eq!(cur["roce"]["r_roce_dest_udp_port"], 4791);
    assert_eq!(
        cur["flow_table"]["flow_table_properties_nic_receive"]["ft_support"],
        1
    );
    let max = json(&ok(&["caps", "--max", "--type", "general", "--json"]));
    assert_eq!(max["mode"], "max");
    assert_eq!(max["general"]["log_max_qp"], 23);
    assert!(max.get("roce").is_none());
    let atomic = json(&ok(&["caps", "-t", "atomic", "--json"]));
    assert!(atomic["atomic"]["atomic_operations"].as_u64().unwrap() & 0x3 == 0x3);
    // A type that does not exist is clap's usage error.
    let o = hca(&["caps", "--type", "nonsense"]);
    assert_eq!(o.status.code(), Some(2));
}

// ---- health ----------------------------------------------------------------

#[test]
fn health_reads_the_init_segment() {
    let out = ok(&["health", "--interval", "500"]);
    assert!(
        out.contains("fw_ver:          14.12.1220 (cmdif_rev 5)"),
        "{out}"
    );
    assert!(out.contains("syndrome:        no error(0x0)"), "{out}");
    assert!(out.contains("  synd: 0\n"), "{out}");
    assert!(out.contains("(advancing)"), "{out}");
    assert!(out.contains("verdict:         healthy"), "{out}");

    let v = json(&ok(&["health", "--interval", "500", "--json"]));
    assert_eq!(v["healthy"], true);
    assert_eq!(v["syndrome"], 0);
    assert_eq!(v["fw_ver"], "14.12.1220");
    assert_eq!(v["health_buffer"]["fw_version"], 0x000c_000e);
    let c = v["health_counter"].as_array().unwrap();
    assert_ne!(c[0], c[1]);
    assert_eq!(v["counter_advancing"], true);
}

// ---- trace -----------------------------------------------------------------

/// The 42 commands of the real ConnectX-4 trace, in order.
fn expected_names() -> Vec<&'static str> {
    [
        ("ENABLE_HCA", 1),
        ("QUERY_ISSI", 1),
        ("SET_ISSI", 1),
        ("QUERY_PAGES", 1),
        ("MANAGE_PAGES", 1),
        ("ACCESS_REG", 1),
        ("QUERY_HCA_CAP", 2),
        ("SET_HCA_CAP", 1),
        ("QUERY_PAGES", 1),
        ("MANAGE_PAGES", 1),
        ("INIT_HCA", 1),
        ("QUERY_HCA_CAP", 10),
        ("QUERY_ADAPTER", 1),
        ("ALLOC_UAR", 4),
        ("CREATE_EQ", 15),
    ]
    .iter()
    .flat_map(|&(n, k)| std::iter::repeat_n(n, k))
    .collect()
}

#[test]
fn trace_decodes_every_command_of_the_real_trace() {
    let out = ok(&["trace", &trace_path()]);
    let heads: Vec<&str> = out.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(heads.len(), 42, "{out}");
    for (i, (h, name)) in heads.iter().zip(expected_names()).enumerate() {
        assert!(
            h.starts_with(&format!("#{} {name}(0x", i + 1)),
            "command {}: {h}",
            i + 1
        );
        assert!(h.contains(": status OK(0x0), syndrome 0x0"), "{h}");
    }
    assert!(
        heads[3].contains("QUERY_PAGES(0x107) op_mod(0x1)"),
        "{}",
        heads[3]
    );
    assert!(out.contains("\n42 commands, 0 failed, 0 without an answer\n"));
    // Decoded fields by PRM name, nested capability blocks.
    assert!(out.contains("    capability (cmd_hca_cap):\n"), "{out}");
    assert!(out.contains("      log_max_qp: 23 (0x17)\n"));
    assert!(out.contains("    num_pages: 12868 (0x3244)\n"));
    assert!(out.contains("    capability (roce_cap):\n"));
    assert!(out.contains("      r_roce_dest_udp_port: 4791 (0x12b7)\n"));
    assert!(out.contains("manage_pages_in, 102960 bytes, partly dumped"));
    assert!(out.contains("    pas: [11456 elements] 0x7ab122000, 0x7ab123000,"));
}

#[test]
fn trace_json_lines_have_the_keys_and_known_values() {
    let out = ok(&["trace", &trace_path(), "--json"]);
    let lines: Vec<Value> = out.lines().map(json).collect();
    assert_eq!(lines.len(), 42);
    for (i, (v, name)) in lines.iter().zip(expected_names()).enumerate() {
        for key in [
            "opcode",
            "opcode_name",
            "op_mod",
            "status",
            "syndrome",
            "input",
            "output",
        ] {
            assert!(v.get(key).is_some(), "command {}: no {key}", i + 1);
        }
        assert_eq!(v["opcode_name"], name, "command {}", i + 1);
        assert_eq!(v["status"], 0);
        assert_eq!(v["syndrome"], 0);
        assert!(v["input"].is_object() && v["output"].is_object());
        assert_eq!(v["input"]["opcode"], v["opcode"]);
    }
    assert_eq!(lines[0]["opcode"], 0x104);
    // QUERY_HCA_CAP general: maximum 23, current 14 before Linux's
    // SET_HCA_CAP raised it to 17, and 17 after INIT_HCA.
    assert_eq!(lines[6]["op_mod"], 0);
    assert_eq!(lines[6]["output"]["capability"]["log_max_qp"], 23);
    assert_eq!(lines[7]["op_mod"], 1);
    assert_eq!(lines[7]["output"]["capability"]["log_max_qp"], 14);
    assert_eq!(lines[8]["input"]["capability"]["log_max_qp"], 17);
    assert_eq!(lines[8]["input"]["capability"]["cmdif_checksum"], 0);
    assert_eq!(lines[12]["output"]["capability"]["log_max_qp"], 17);
    // Pages: 6 boot, 12,868 init, the first init page address.
    assert_eq!(lines[3]["output"]["num_pages"], 6);
    assert_eq!(lines[9]["output"]["num_pages"], 12868);
    let m = &lines[10];
    assert_eq!(m["input"]["input_num_entries"], 12868);
    assert_eq!(m["input_complete"], false);
    let pas = m["input"]["pas"].as_array().unwrap();
    assert_eq!(pas.len(), 11456);
    assert_eq!(pas[0], 0x7_ab12_2000u64);
    // RoCE caps (op_mod 0x9: type 4, current).
    assert_eq!(lines[18]["op_mod"], 9);
    assert_eq!(
        lines[18]["output"]["capability"]["r_roce_dest_udp_port"],
        4791
    );
    // ALLOC_UAR and CREATE_EQ answers.
    assert_eq!(lines[23]["output"]["uar"], 16);
    assert_eq!(lines[27]["output"]["eq_number"], 16);
    assert_eq!(lines[41]["output"]["eq_number"], 30);
}

#[test]
fn trace_refuses_what_is_not_a_trace() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let e = fails(&["trace", &manifest.display().to_string()]);
    assert!(e.contains("not a valid mlx5 command trace"), "{e}");
    assert!(e.contains("no command dump found"), "{e}");

    let e = fails(&["trace", "/nonexistent/hca-trace.txt"]);
    assert!(e.contains("/nonexistent/hca-trace.txt"), "{e}");

    let dir = scratch("cli-trace-errors");
    let e = fails(&["trace", &dir.display().to_string()]);
    assert!(e.contains("directory"), "{e}");

    // Binary garbage.
    let bin = dir.join("garbage.bin");
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&bin, garbage).unwrap();
    let e = fails(&["trace", &bin.display().to_string(), "--json"]);
    assert!(e.contains("not a valid mlx5 command trace"), "{e}");

    // Cut in the middle of a mailbox block.
    let text = std::fs::read_to_string(trace_file()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let block = lines
        .iter()
        .position(|l| l.ends_with("command block:"))
        .expect("the trace has mailbox blocks");
    let cut = dir.join("cut-in-block.txt");
    std::fs::write(&cut, lines[..block + 10].join("\n")).unwrap();
    let e = fails(&["trace", &cut.display().to_string()]);
    assert!(e.contains("truncated mailbox block"), "{e}");

    // Cut in the middle of a queue entry.
    let head = lines
        .iter()
        .rposition(|l| l.contains("dump command"))
        .unwrap();
    let cut = dir.join("cut-in-entry.txt");
    std::fs::write(&cut, lines[..head + 3].join("\n")).unwrap();
    let e = fails(&["trace", &cut.display().to_string(), "--json"]);
    assert!(e.contains("truncated command queue entry"), "{e}");

    // A hex line out of sequence.
    let bad = dir.join("out-of-sequence.txt");
    std::fs::write(&bad, text.replacen("010: 01040000", "020: 01040000", 1)).unwrap();
    let e = fails(&["trace", &bad.display().to_string()]);
    assert!(e.contains("out of sequence"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_reads_standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["trace", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read(trace_file()).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &text));
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 42);
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["trace", &trace_path(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.is_empty(), "{err}");
}

// ---- --dump-commands -------------------------------------------------------

#[test]
fn dump_commands_round_trips_through_trace() {
    let dir = scratch("cli-dump");
    let dump = dir.join("info.trace");
    let o = hca(&["--dump-commands", &dump.display().to_string(), "info"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = ok(&["trace", &dump.display().to_string(), "--json"]);
    let cmds: Vec<Value> = out.lines().map(json).collect();
    assert!(cmds.len() > 20, "{} commands", cmds.len());
    let names: Vec<&str> = cmds
        .iter()
        .map(|c| c["opcode_name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "ENABLE_HCA");
    for n in [
        "QUERY_ISSI",
        "SET_HCA_CAP",
        "MANAGE_PAGES",
        "INIT_HCA",
        "CREATE_EQ",
        "TEARDOWN_HCA",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert_eq!(*names.last().unwrap(), "DISABLE_HCA");
    for c in &cmds {
        assert_eq!(c["status"], 0, "{c}");
        assert_eq!(c["input_complete"], true, "{c}");
        assert_eq!(c["output_complete"], true, "{c}");
    }
    // The driver's SET_HCA_CAP asked for log_max_qp 17, and the current
    // general capabilities it queried afterwards say so.
    let set = cmds
        .iter()
        .find(|c| c["opcode_name"] == "SET_HCA_CAP" && c["op_mod"] == 0)
        .unwrap();
    assert_eq!(set["input"]["capability"]["log_max_qp"], 17);
    let cur = cmds
        .iter()
        .rev()
        .find(|c| c["opcode_name"] == "QUERY_HCA_CAP" && c["op_mod"] == 1)
        .unwrap();
    assert_eq!(cur["output"]["capability"]["log_max_qp"], 17);

    // The text form of the same dump, and a recording of another command.
    let text = ok(&["trace", &dump.display().to_string()]);
    assert!(text.contains(&format!(
        "\n{} commands, 0 failed, 0 without an answer\n",
        cmds.len()
    )));
    let caps_dump = dir.join("caps.trace");
    ok(&[
        "--dump-commands",
        &caps_dump.display().to_string(),
        "caps",
        "--type",
        "flow",
    ]);
    let out = ok(&["trace", &caps_dump.display().to_string(), "--json"]);
    assert!(
        out.lines()
            .map(json)
            .any(|c| c["opcode_name"] == "QUERY_HCA_CAP" && c["op_mod"] == 0xf)
    );

    // --check-signatures passes on the tool's own dumps and on the real
    // ConnectX-4 trace (entries signed, blocks not: cmdif_checksum off),
    // and fails on a damaged entry signature.
    for f in [dump.display().to_string(), trace_path()] {
        let o = hca(&["trace", "--check-signatures", &f]);
        let err = stderr(&o);
        assert!(o.status.success(), "{f}: {err}");
        assert!(err.contains("hca: signatures good: "), "{f}: {err}");
        assert!(err.contains("not (cmdif_checksum off)"), "{f}: {err}");
    }
    let real = std::fs::read_to_string(trace_path()).unwrap();
    // ENABLE_HCA's INPUT entry ends `00000010 01fd0001`: token 0x01,
    // signature 0xfd; make it 0xfc.
    assert!(real.contains("00000010 01fd0001"));
    let damaged = dir.join("damaged.trace");
    std::fs::write(
        &damaged,
        real.replacen("00000010 01fd0001", "00000010 01fc0001", 1),
    )
    .unwrap();
    let e = fails(&[
        "trace",
        "--check-signatures",
        &damaged.display().to_string(),
    ]);
    assert!(e.contains("command #1") && e.contains("INPUT entry"), "{e}");
    ok(&["trace", &damaged.display().to_string()]);

    // An unwritable dump file is one error line before anything runs.
    let e = fails(&["--dump-commands", "/nonexistent/dir/x.trace", "info"]);
    assert!(e.contains("/nonexistent/dir/x.trace"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- list, bind, unbind ----------------------------------------------------

/// The mlx5 functions of this machine, read from sysfs here (not through
/// the tool's or platform's code): vendor 0x15b3 and a ConnectX-4-or-later
/// or BlueField device ID (FACTS.md, PCI identity).
fn mlx5_functions_of_this_machine() -> Vec<String> {
    const IDS: [u16; 17] = [
        0x1013, 0x1014, 0x1015, 0x1016, 0x1017, 0x1018, 0x1019, 0x101a, 0x101b, 0x101c, 0x101d,
        0x101e, 0x101f, 0x1021, 0x1023, 0xa2d6, 0xa2dc,
    ];
    let hex = |p: PathBuf| {
        let s = std::fs::read_to_string(p).ok()?;
        u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
    };
    let Ok(dir) = std::fs::read_dir("/sys/bus/pci/devices") else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            hex(e.path().join("vendor")) == Some(0x15b3)
                && hex(e.path().join("device")).is_some_and(|d| IDS.contains(&d))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

#[test]
fn list_on_this_machine() {
    let want = mlx5_functions_of_this_machine();
    let out = ok(&["list"]);
    let v = json(&ok(&["list", "--json"]));
    let mut got: Vec<String> = v
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|e| e["bdf"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    assert_eq!(got, want, "hca list --json against sysfs");
    if want.is_empty() {
        assert!(out.starts_with("No mlx5 device found"), "{out}");
    } else {
        assert!(out.starts_with("BDF "), "{out}");
        for bdf in &want {
            assert!(out.contains(bdf.as_str()), "{bdf} missing from {out}");
        }
    }
}

fn fake_tree(tag: &str) -> FakeSysfs {
    let f = FakeSysfs::new(&temp_dir(tag));
    f.add_device("0000:02:00.0", 0x15b3, 0x1013, Some("mlx5_core"), Some(7));
    f.add_device("0000:03:00.0", 0x15b3, 0x1015, Some("vfio-pci"), Some(8));
    f.add_device("0000:03:00.1", 0x8086, 0x10d3, Some("e1000e"), Some(8));
    f.add_device("0000:00:1f.0", 0x8086, 0xa0c8, None, None);
    f
}

#[test]
fn list_shows_mlx5_functions_with_driver_and_group() {
    let f = fake_tree("list");
    let root = f.root.display().to_string();
    let out = ok(&["--sysfs-root", &root, "list"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("BDF "), "{out}");
    assert!(
        lines[1].starts_with("0000:02:00.0  15b3:1013  ConnectX-4 "),
        "{out}"
    );
    assert!(
        lines[1].contains("mlx5_core") && lines[1].ends_with('7'),
        "{out}"
    );
    assert!(
        lines[2].contains("ConnectX-4 Lx") && lines[2].contains("vfio-pci"),
        "{out}"
    );
    let v = json(&ok(&["list", "--json", "--sysfs-root", &root]));
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["bdf"], "0000:02:00.0");
    assert_eq!(a[0]["device_id"], "1013");
    assert_eq!(a[0]["name"], "ConnectX-4");
    assert_eq!(a[0]["driver"], "mlx5_core");
    assert_eq!(a[0]["vfio"], false);
    assert_eq!(a[0]["iommu_group"], 7);
    assert_eq!(a[1]["vfio"], true);

    let empty = FakeSysfs::new(&temp_dir("list-empty"));
    let out = ok(&["list", "--sysfs-root", &empty.root.display().to_string()]);
    assert!(out.starts_with("No mlx5 device found"), "{out}");
}

#[test]
fn bind_errors_are_clear() {
    // This machine.
    let e = fails(&["bind", "0000:7f:1f.7"]);
    assert!(
        e.contains("0000:7f:1f.7 not found") && e.contains("hca list"),
        "{e}"
    );
    let e = fails(&["bind", "not-a-bdf"]);
    assert!(e.contains("not a PCI address"), "{e}");
    let e = fails(&["unbind", "0000:7f:1f.7"]);
    assert!(e.contains("not found"), "{e}");

    let f = fake_tree("bind");
    let root = f.root.display().to_string();
    // Not an mlx5 device.
    let e = fails(&["--sysfs-root", &root, "bind", "0000:00:1f.0"]);
    assert!(
        e.contains("not an mlx5 device") && e.contains("--force"),
        "{e}"
    );
    // vfio-pci not loaded (the tree has no vfio-pci driver yet... add none:
    // a fresh tree without it).
    let bare = FakeSysfs::new(&temp_dir("bind-bare"));
    bare.add_device("0000:02:00.0", 0x15b3, 0x1013, Some("mlx5_core"), Some(7));
    let e = fails(&[
        "--sysfs-root",
        &bare.root.display().to_string(),
        "bind",
        "02:00.0",
    ]);
    assert!(e.contains("modprobe vfio-pci"), "{e}");
    // No IOMMU group.
    bare.add_driver("vfio-pci");
    bare.add_device("0000:05:00.0", 0x15b3, 0x1017, Some("mlx5_core"), None);
    let e = fails(&[
        "--sysfs-root",
        &bare.root.display().to_string(),
        "bind",
        "0000:05:00.0",
    ]);
    assert!(
        e.contains("no IOMMU group") && e.contains("intel_iommu=on"),
        "{e}"
    );
    // -d does not apply.
    let e = fails(&["-d", "02:00.0", "bind", "02:00.0"]);
    assert!(e.contains("does not apply"), "{e}");
}

#[test]
fn bind_reports_what_blocks_the_group() {
    let f = fake_tree("bind-checks");
    let root = f.root.display().to_string();
    // Already bound to vfio-pci; its group also holds a NIC bound to e1000e.
    let out = ok(&["--sysfs-root", &root, "bind", "0000:03:00.0"]);
    assert!(
        out.starts_with("0000:03:00.0 (ConnectX-4 Lx): stays bound to vfio-pci"),
        "{out}"
    );
    let group = out
        .lines()
        .find(|l| l.contains("IOMMU group 8"))
        .expect("a group line");
    assert!(group.trim_start().starts_with("FIX"), "{group}");
    assert!(group.contains("0000:03:00.1 is bound to e1000e"), "{group}");
    assert!(out.lines().any(|l| l.contains("huge pages")), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("MEMLOCK") || l.contains("CAP_IPC_LOCK")),
        "{out}"
    );
    let v = json(&ok(&["--sysfs-root", &root, "bind", "03:00.0", "--json"]));
    assert_eq!(v["driver_after"], "vfio-pci");
    let checks = v["checks"].as_array().unwrap();
    let g = checks.iter().find(|c| c["check"] == "iommu_group").unwrap();
    assert_eq!(g["ok"], false);
    // Unbinding a function that is not on vfio-pci changes nothing.
    let out = ok(&["--sysfs-root", &root, "unbind", "0000:02:00.0"]);
    assert!(
        out.starts_with("0000:02:00.0 (ConnectX-4): stays bound to mlx5_core"),
        "{out}"
    );
}

// ---- usage -----------------------------------------------------------------

#[test]
fn usage_errors() {
    let e = fails(&["-d", "emu", "trace", &trace_path()]);
    assert!(e.contains("does not apply"), "{e}");
    let e = fails(&["--dump-commands", "/tmp/x", "health"]);
    assert!(e.contains("does not apply"), "{e}");
    let e = fails(&["-d", "12345", "info"]);
    assert!(e.contains("not a PCI address"), "{e}");
    let o = hca(&["no-such-command"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("panicked"));
    let help = ok(&["--help"]);
    for c in ["list", "bind", "unbind", "info", "caps", "health", "trace"] {
        assert!(help.contains(c), "{c} missing from --help");
    }
}

/// The long options a command's `--help` advertises.
fn advertised(command: &str) -> Vec<String> {
    ok(&[command, "--help"])
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            if !l.starts_with('-') {
                return None;
            }
            let long = l.split_whitespace().find(|w| w.starts_with("--"))?;
            Some(long.trim_end_matches(',').to_string())
        })
        .collect()
}

#[test]
fn each_command_shows_only_the_options_it_takes() {
    let takes = |c: &str, o: &str| advertised(c).iter().any(|a| a == o);
    for c in [
        "list", "bind", "unbind", "info", "caps", "health", "trace", "pingpong", "perf",
    ] {
        let device = matches!(c, "info" | "caps" | "health" | "pingpong" | "perf");
        let dump = matches!(c, "info" | "caps" | "pingpong" | "perf");
        assert_eq!(takes(c, "--device"), device, "hca {c} --help: --device");
        assert_eq!(
            takes(c, "--dump-commands"),
            dump,
            "hca {c} --help: --dump-commands"
        );
        assert!(takes(c, "--json"), "hca {c} --help: --json");
        let help = ok(&[c, "--help"]);
        assert_eq!(
            help.contains("one object per command"),
            c == "trace",
            "hca {c} --help: {help}"
        );
        assert!(!help.contains("trace:"), "hca {c} --help: {help}");
    }
    // What a command advertises, it takes (after the command, as well as
    // before it, where the README shows it).
    let dump = std::env::temp_dir().join(format!("hca-opts-{}.trace", std::process::id()));
    let d = dump.display().to_string();
    ok(&["info", "-d", "emu", "--dump-commands", &d, "--json"]);
    ok(&["-d", "emu", "--dump-commands", &d, "info"]);
    ok(&["caps", "-d", "emu", "--dump-commands", &d, "-t", "atomic"]);
    ok(&["health", "-d", "emu", "--json"]);
    ok(&["trace", &d, "--json"]);
    ok(&["list", "--json"]);
    let _ = std::fs::remove_file(&dump);
    // What it does not advertise, it refuses, before or after the command.
    let e = fails(&["-d", "emu", "list"]);
    assert!(e.contains("does not apply to `hca list`"), "{e}");
    let o = hca(&["list", "-d", "emu"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unexpected argument '-d'"));
    let o = hca(&["health", "--dump-commands", &d]);
    assert_eq!(o.status.code(), Some(2));
    // The same option twice with different values.
    let e = fails(&["-d", "emu", "info", "-d", "02:00.0"]);
    assert!(e.contains("-d/--device given twice"), "{e}");
}

#[test]
fn the_emulator_notice_says_what_was_asked() {
    let o = hca(&["info"]);
    let err = stderr(&o);
    assert!(
        err.contains("hca: no device given (-d <bdf>): using the emulated ConnectX-4"),
        "{err}"
    );
    for args in [&["-d", "emu", "info"][..], &["info", "-d", "emu"][..]] {
        let o = hca(args);
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        assert!(!err.contains("no device given"), "{args:?}: {err}");
        assert!(
            err.contains("hca: -d emu: using the emulated ConnectX-4"),
            "{args:?}: {err}"
        );
    }
    let o = hca(&["perf", "write-lat", "-n", "5", "-d", "emu"]);
    let err = stderr(&o);
    assert!(
        err.contains("hca: -d emu: using two emulated ConnectX-4s"),
        "{err}"
    );
}

/// The count of interrupts in a driver's waits line
/// (`... (2 MSI-X vectors): N interrupts raised, ...`).
fn interrupts_raised(waits: &str) -> u64 {
    waits
        .split("vectors): ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .filter(|_| waits.contains(" interrupts raised, "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a waits line on interrupts: {waits}"))
}

/// The driver's waits line (`RUST_LOG=info`): interrupts by default on the
/// emulator, polling with `--poll` (before or after the command).
#[test]
fn poll_flag_switches_the_driver_to_polling() {
    let waits = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_hca"))
            .args(args)
            .env("RUST_LOG", "hca=info")
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run hca");
        assert!(o.status.success(), "hca {args:?}: {}", stderr(&o));
        stderr(&o)
            .lines()
            .find(|l| l.contains("waits: "))
            .unwrap_or_else(|| panic!("hca {args:?}: no waits line: {}", stderr(&o)))
            .to_string()
    };
    let on = waits(&["info"]);
    assert!(on.contains("waits: interrupts (2 MSI-X vectors)"), "{on}");
    // A command wait sleeps only when the completion is not there at its
    // first look, which the emulator's speed decides; the interrupts the
    // armed command EQ raised do not depend on it.
    assert!(interrupts_raised(&on) > 0, "{on}");
    for args in [&["--poll", "info"][..], &["info", "--poll"]] {
        let off = waits(args);
        assert!(off.contains("waits: polling: "), "{args:?}: {off}");
    }
    let e = fails(&["list", "--poll"]);
    assert!(e.contains("--poll does not apply to `hca list`"), "{e}");
    // Both sides of a pingpong with events sleep on interrupts.
    let pp = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["pingpong", "rc", "--tcp-loopback", "-e", "-n", "20"])
        .env("RUST_LOG", "hca=info")
        .output()
        .expect("run hca");
    assert!(pp.status.success(), "{}", stderr(&pp));
    let lines: Vec<String> = stderr(&pp)
        .lines()
        .filter(|l| l.contains("waits: interrupts"))
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 2, "{}", stderr(&pp));
}

/// Under the emulated VFIO device (`LD_PRELOAD` of `hca-vfio-emu`), the
/// project's own VFIO backend gets the EQ interrupts through its MSI-X
/// eventfds: the command waits of `hca info` wake by interrupt. With
/// `--poll` no vector is enabled. Needs the preload library built next to
/// the binary: `cargo build -p hca-vfio-emu && cargo test -p hca-tools
/// --test cli -- --ignored vfio_preload`.
#[test]
#[ignore = "needs target/<profile>/libhca_vfio_emu.so: cargo build -p hca-vfio-emu, then run with --ignored"]
fn vfio_preload_interrupts_reach_the_eventfds() {
    let (bin, lib) = vfio_preload();
    let run = |extra: &[&str]| {
        let mut args = vec!["-d", "0000:00:10.0"];
        args.extend_from_slice(extra);
        args.push("info");
        let o = Command::new(&bin)
            .args(&args)
            .env("LD_PRELOAD", &lib)
            .env("HCA_EMU_VFIO", "0000:00:10.0=cx4")
            .env("RUST_LOG", "hca=info")
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run hca");
        assert!(o.status.success(), "hca {args:?}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("hca_id:\t0000:00:10.0"),
            "{}",
            stdout(&o)
        );
        stderr(&o)
            .lines()
            .find(|l| l.contains("waits: "))
            .unwrap_or_else(|| panic!("no waits line: {}", stderr(&o)))
            .to_string()
    };
    let on = run(&[]);
    assert!(on.contains("vfio 0000:00:10.0"), "{on}");
    assert!(
        interrupts_raised(&on) > 0,
        "no interrupt reached the eventfds: {on}"
    );
    let off = run(&["--poll"]);
    assert!(off.contains("waits: polling: "), "{off}");
}
