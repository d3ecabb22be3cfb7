//! Two `hca` processes on the emulator, each with its own emulated HCA,
//! cabled to each other through a socket wire (`--wire`, `HCA_EMU_WIRE`):
//! RC, UC and UD pingpong and a perf test over UDP and Unix datagram
//! sockets, with the contents checked (-c) on both sides; `--pcap` of the
//! frames; and the wire options' errors.

mod common;

use std::net::UdpSocket;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{free_tcp_port, free_udp_port, hca, scratch, spawn_until, text};

/// The two ends of a wire: (server's spec, client's spec).
fn udp_wire() -> (String, String) {
    let (a, b) = (free_udp_port(), free_udp_port());
    (
        format!("udp:127.0.0.1:{a},127.0.0.1:{b}"),
        format!("udp:127.0.0.1:{b},127.0.0.1:{a}"),
    )
}

fn unix_wire(tag: &str) -> (String, String) {
    let d = scratch(tag);
    let (a, b) = (d.join("server.sock"), d.join("client.sock"));
    (
        format!("unix:{},{}", a.display(), b.display()),
        format!("unix:{},{}", b.display(), a.display()),
    )
}

/// How a process is given its wire.
#[derive(Clone, Copy)]
enum Via {
    Option,
    Env,
}

fn command(args: &[&str], wire: &str, via: Via) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hca"));
    c.env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .env_remove("HCA_EMU_WIRE")
        .args(args);
    match via {
        Via::Option => {
            c.args(["--wire", wire]);
        }
        Via::Env => {
            c.env("HCA_EMU_WIRE", wire);
        }
    }
    c
}

/// Starts the server and returns once it listens (its stderr says so).
fn start_server(args: &[&str], wire: &str, via: Via) -> (Child, mpsc::Receiver<String>) {
    let (child, rx, _) = spawn_until(
        command(args, wire, via).stdout(Stdio::piped()),
        "the hca server",
        |l| l.contains("waiting for a client"),
    );
    (child, rx)
}

/// Runs a server and a client of `args` (the client with `127.0.0.1`),
/// each cabled to its end of the wire; both must succeed. Returns their
/// outputs and the server's remaining stderr.
fn pair(args: &[&str], wires: &(String, String), via: Via) -> (Output, Output, String) {
    let port = free_tcp_port().to_string();
    let mut s_args = args.to_vec();
    s_args.extend(["--server", "-p", &port]);
    let (server, rx) = start_server(&s_args, &wires.0, via);
    let mut c_args = args.to_vec();
    c_args.extend(["127.0.0.1", "-p", &port]);
    let client = command(&c_args, &wires.1, via)
        .output()
        .expect("run the hca client");
    let s = server.wait_with_output().expect("the server ends");
    let s_err: String = rx.iter().collect::<Vec<_>>().join("\n");
    assert!(
        client.status.success(),
        "client {c_args:?} failed: {}\nserver: {s_err}",
        text(&client.stderr)
    );
    assert!(
        s.status.success(),
        "server {s_args:?} failed: {s_err}\nclient: {}",
        text(&client.stderr)
    );
    (s, client, s_err)
}

/// The QPN of an address line of ibv_*_pingpong.
fn qpn(out: &str, label: &str) -> String {
    out.lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.split("QPN ").nth(1))
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no {label} line: {out}"))
        .to_string()
}

fn pingpong_both_ways(transport: &str, wires: &(String, String), via: Via) {
    let (s, c, s_err) = pair(&["pingpong", transport, "-n", "100", "-c"], wires, via);
    let (so, co) = (text(&s.stdout), text(&c.stdout));
    // Each side talked to the other's QP.
    assert_eq!(qpn(&so, "local"), qpn(&co, "remote"), "{so}\n{co}");
    assert_eq!(qpn(&so, "remote"), qpn(&co, "local"), "{so}\n{co}");
    for out in [&so, &co] {
        assert!(out.contains("100 iters in"), "{out}");
    }
    assert!(s_err.is_empty() || !s_err.contains("error"), "{s_err}");
}

#[test]
fn pingpong_rc_uc_ud_between_two_processes_over_udp() {
    for t in ["rc", "uc", "ud"] {
        pingpong_both_ways(t, &udp_wire(), Via::Option);
    }
}

#[test]
fn pingpong_rc_uc_ud_between_two_processes_over_unix_sockets() {
    for t in ["rc", "uc", "ud"] {
        pingpong_both_ways(t, &unix_wire(t), Via::Option);
    }
}

#[test]
fn the_wire_may_come_from_the_environment() {
    pingpong_both_ways("rc", &udp_wire(), Via::Env);
}

#[test]
fn perf_between_two_processes_over_a_wire() {
    // Messages many MTUs long (segmented on the wire), on both kinds of
    // wire.
    for (test, size, wires) in [
        ("write-bw", "65536", unix_wire("perf-write")),
        ("read-lat", "8192", udp_wire()),
        ("send-bw", "8192", unix_wire("perf-send")),
        ("atomic-bw", "8", udp_wire()),
    ] {
        let (_, c, _) = pair(&["perf", test, "-n", "20", "-s", size], &wires, Via::Option);
        let out = text(&c.stdout);
        assert!(out.contains("#bytes"), "{test}: {out}");
    }
}

#[test]
fn pcap_holds_every_frame_of_the_wire() {
    let d = scratch("wire-pcap");
    let (sp, cp) = (d.join("server.pcap"), d.join("client.pcap"));
    let wires = udp_wire();
    let port = free_tcp_port().to_string();
    let (server, rx) = start_server(
        &[
            "pingpong",
            "ud",
            "-n",
            "10",
            "--server",
            "-p",
            &port,
            "--pcap",
            sp.to_str().unwrap(),
        ],
        &wires.0,
        Via::Option,
    );
    let client = command(
        &[
            "pingpong",
            "ud",
            "-n",
            "10",
            "127.0.0.1",
            "-p",
            &port,
            "--pcap",
            cp.to_str().unwrap(),
        ],
        &wires.1,
        Via::Option,
    )
    .output()
    .unwrap();
    assert!(client.status.success(), "{}", text(&client.stderr));
    assert!(server.wait_with_output().unwrap().status.success());
    let s_err: String = rx.iter().collect::<Vec<_>>().join("\n");
    // UD: ten messages each way, nothing else; each side sees all twenty.
    assert!(s_err.contains("server.pcap: 20 frames"), "{s_err}");
    assert!(
        text(&client.stderr).contains("client.pcap: 20 frames"),
        "{}",
        text(&client.stderr)
    );
    for f in [&sp, &cp] {
        let b = std::fs::read(f).unwrap();
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()),
            0xa1b2_3c4d,
            "nanosecond pcap"
        );
        assert_eq!(
            u32::from_ne_bytes(b[20..24].try_into().unwrap()),
            1,
            "Ethernet"
        );
        // Walk the records: twenty frames, each a RoCE v2 frame (IPv6,
        // UDP to 4791) ending at the file's end.
        let (mut at, mut n) = (24, 0);
        while at < b.len() {
            let caplen = u32::from_ne_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
            let len = u32::from_ne_bytes(b[at + 12..at + 16].try_into().unwrap()) as usize;
            assert_eq!(caplen, len, "whole frames");
            let fr = &b[at + 16..at + 16 + caplen];
            assert_eq!(
                &fr[12..14],
                &[0x86, 0xdd],
                "IPv6 (the RoCE v2 link-local GID)"
            );
            assert_eq!(fr[14 + 6], 17, "UDP");
            assert_eq!(u16::from_be_bytes([fr[56], fr[57]]), 4791, "RoCE v2 port");
            at += 16 + caplen;
            n += 1;
        }
        assert_eq!((at, n), (b.len(), 20));
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn pcap_in_one_process_and_with_tcp_loopback() {
    let d = scratch("wire-pcap1");
    let f = d.join("a.pcap");
    for mode in [None, Some("--tcp-loopback")] {
        let mut args = vec![
            "pingpong",
            "rc",
            "-n",
            "5",
            "-s",
            "4096",
            "-m",
            "1024",
            "--pcap",
            f.to_str().unwrap(),
        ];
        args.extend(mode);
        let o = hca(&args);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{err}");
        // The count said on stderr is the count in the file.
        let said: usize = err
            .lines()
            .find_map(|l| l.split("a.pcap: ").nth(1))
            .and_then(|r| r.strip_suffix(" frames"))
            .unwrap_or_else(|| panic!("{mode:?}: no count: {err}"))
            .parse()
            .unwrap();
        let b = std::fs::read(&f).unwrap();
        let (mut at, mut n, mut data) = (24, 0, 0);
        while at < b.len() {
            let caplen = u32::from_ne_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
            // RoCE v2 over IPv6: the BTH opcode behind 14 + 40 + 8 bytes;
            // RC SEND FIRST/MIDDLE/LAST are 0x00..0x02.
            if b[at + 16 + 62] <= 0x02 {
                data += 1;
            }
            at += 16 + caplen;
            n += 1;
        }
        assert_eq!(at, b.len());
        assert_eq!(n, said, "{mode:?}");
        // Five 4096-byte messages each way at MTU 1024: 40 data packets,
        // and acknowledgements besides.
        assert_eq!(data, 40, "{mode:?}");
        assert!(n > data, "{mode:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

fn one_error(o: &Output) -> String {
    assert!(!o.status.success(), "succeeded: {}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
    let e: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("hca: error: "))
        .collect();
    assert_eq!(e.len(), 1, "{err}");
    e[0].to_string()
}

#[test]
fn bad_wires_are_one_clear_line() {
    let e = one_error(&hca(&["info", "--wire", "tcp:1.2.3.4:5,1.2.3.4:6"]));
    assert!(e.contains("udp:") && e.contains("unix:"), "{e}");
    let e = one_error(&hca(&["info", "--wire", "udp:127.0.0.1:5000"]));
    assert!(e.contains("LOCAL,PEER"), "{e}");
    let e = one_error(&hca(&["info", "--wire", "udp:localhost:1,127.0.0.1:2"]));
    assert!(e.contains("'localhost:1' is not an IP address"), "{e}");
    let e = one_error(&hca(&[
        "info",
        "--wire",
        "unix:/nonexistent-dir/a,/nonexistent-dir/b",
    ]));
    assert!(e.contains("/nonexistent-dir/a"), "{e}");
    // A UDP port in use.
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let w = format!("udp:{},127.0.0.1:9", busy.local_addr().unwrap());
    let e = one_error(&hca(&["info", "--wire", &w]));
    assert!(e.contains("socket wire at 127.0.0.1:"), "{e}");
    // Both sides in this process: the wire is for one side per process.
    let e = one_error(&hca(&[
        "pingpong",
        "rc",
        "--wire",
        "udp:127.0.0.1:5000,127.0.0.1:5001",
    ]));
    assert!(e.contains("one side per process"), "{e}");
    // Not for real devices, nor for commands without a device.
    let e = one_error(&hca(&["info", "-d", "02:00.0", "--pcap", "/tmp/x.pcap"]));
    assert!(e.contains("--pcap"), "{e}");
    let e = one_error(&hca(&["--wire", "unix:/a,/b", "list"]));
    assert!(e.contains("do not apply to `hca list`"), "{e}");
    // An unwritable capture file.
    let e = one_error(&hca(&["info", "--pcap", "/nonexistent-dir/x.pcap"]));
    assert!(e.contains("/nonexistent-dir/x.pcap"), "{e}");
}

#[test]
fn a_cabled_port_is_up_on_its_own() {
    // The link of a cabled port comes up whether or not the far end is
    // there (frames to an absent peer are lost).
    let (w, _) = udp_wire();
    let o = hca(&["info", "--json", "--wire", &w]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = common::json(&text(&o.stdout));
    assert_eq!(v["ports"][0]["state"], "PORT_ACTIVE", "{v}");
}

/// The numbers of the result row (the line after the `#bytes` header).
fn result_row(out: &str) -> Vec<f64> {
    let mut lines = out.lines();
    lines
        .find(|l| l.trim_start().starts_with("#bytes"))
        .unwrap_or_else(|| panic!("no result table: {out}"));
    lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(|f| f.parse().unwrap_or_else(|_| panic!("row {f:?}: {out}")))
        .collect()
}

#[test]
fn perf_with_perftests_exchange_between_two_processes_over_a_wire() {
    // Sizes many MTUs long (-m 1024), every kind of test.
    for (test, size) in [
        ("write-bw", "8192"),
        ("read-lat", "8192"),
        ("send-bw", "8192"),
        ("atomic-bw", "8"),
    ] {
        let args = [
            "perf",
            test,
            "--perftest",
            "-n",
            "20",
            "-s",
            size,
            "-m",
            "1024",
        ];
        let (s, c, _) = pair(&args, &udp_wire(), Via::Option);
        let (so, co) = (text(&s.stdout), text(&c.stdout));
        let r = result_row(&co);
        assert_eq!(r[0], size.parse::<f64>().unwrap(), "{co}");
        assert_eq!(r[1], 20.0, "{co}");
        assert!(r[2..].iter().all(|v| *v > 0.0), "{co}");
        if test.ends_with("bw") {
            // The server prints the client's report (the SEND receiver its
            // own): same size and iterations.
            let sr = result_row(&so);
            assert_eq!(sr[..2], r[..2], "{so}\n{co}");
        }
    }
}

/// A perftest destination as perftest's sprintf writes it.
fn perftest_dest(qpn: u32) -> Vec<u8> {
    let mut m = format!(
        "0000:0010:{qpn:06x}:00abcd:00001234:00007f0000001000:\
         fe:80:00:00:00:00:00:00:02:00:00:ff:fe:00:00:02:00000000:"
    )
    .into_bytes();
    m.push(0);
    assert_eq!(m.len(), 108);
    m
}

/// Checks that `b` is a destination as perftest parses it: 23 hex fields
/// of perftest's widths, a trailing colon and NUL. Returns the QPN.
fn parse_dest(b: &[u8]) -> u32 {
    assert_eq!(b.len(), 108);
    assert_eq!(&b[106..], b":\0", "{}", text(b));
    let t = std::str::from_utf8(&b[..106]).unwrap();
    let f: Vec<&str> = t.split(':').collect();
    let widths = [4, 4, 6, 6, 8, 16];
    assert_eq!(f.len(), 23, "{t}");
    for (i, x) in f.iter().enumerate() {
        let w = widths
            .get(i)
            .copied()
            .unwrap_or(if i == 22 { 8 } else { 2 });
        assert_eq!(x.len(), w, "field {i} of {t}");
        assert!(
            x.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{t}"
        );
    }
    // RoCE: a GID is there (fe80:: link-local on the emulated port).
    assert_eq!(&f[6..8], ["fe", "80"], "{t}");
    u32::from_str_radix(f[2], 16).unwrap()
}

#[test]
fn perf_server_talks_to_a_client_that_speaks_perftests_bytes() {
    use std::io::{Read, Write};
    let wires = udp_wire();
    let port = free_tcp_port().to_string();
    let (server, rx) = start_server(
        &[
            "perf",
            "write-bw",
            "--perftest",
            "-s",
            "4096",
            "-n",
            "10",
            "--server",
            "-p",
            &port,
        ],
        &wires.0,
        Via::Option,
    );
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // perftest's client writes first, then reads the same size.
    let mut xchg = |mine: &[u8], n: usize| -> Vec<u8> {
        s.write_all(mine).unwrap();
        let mut b = vec![0u8; n];
        s.read_exact(&mut b).unwrap();
        b
    };
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(b"6.06");
    let rv = xchg(&v, 16);
    assert_eq!(&rv[..5], b"6.06\0");
    assert_eq!(xchg(&4096i32.to_be_bytes(), 4), 4096i32.to_be_bytes());
    assert_eq!(
        i32::from_be_bytes(xchg(&64i32.to_be_bytes(), 4).try_into().unwrap()),
        64
    );
    // MTU 1024 (ibv_mtu 3): the server takes the smaller.
    let m = xchg(b"3\0", 2);
    assert!(
        m[0].is_ascii_digit() && (b'1'..=b'5').contains(&m[0]) && m[1] == 0,
        "{m:?}"
    );
    // The QPs before connecting and again after; the hand shake after
    // RTR; the client's end of the test.
    let qpn = parse_dest(&xchg(&perftest_dest(0xabc), 108));
    for _ in 0..3 {
        assert_eq!(parse_dest(&xchg(&perftest_dest(0xabc), 108)), qpn);
    }
    // The reports: size, iterations, peak, average, message rate.
    let mut theirs = Vec::new();
    for v in [
        4096u64,
        10,
        123.5f64.to_bits(),
        120.25f64.to_bits(),
        0.5f64.to_bits(),
    ] {
        theirs.push(u64::from_be_bytes(
            xchg(&v.to_be_bytes(), 8).try_into().unwrap(),
        ));
    }
    assert_eq!(theirs[0], 4096);
    // The close: a hand shake, then "done".
    parse_dest(&xchg(&perftest_dest(0xabc), 108));
    s.write_all(b"done\0").unwrap();
    let mut done = [0u8; 5];
    s.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done\0");
    let o = server.wait_with_output().unwrap();
    let err: String = rx.iter().collect::<Vec<_>>().join("\n");
    assert!(o.status.success(), "{err}");
    let out = text(&o.stdout);
    // The server shows the fake client's QP and prints its report.
    assert!(
        out.contains("remote address: LID 0000 QPN 0x0abc PSN 0xabcd"),
        "{out}"
    );
    let r = result_row(&out);
    assert_eq!(r, vec![4096.0, 10.0, 123.5, 120.25, 0.5], "{out}");
}
