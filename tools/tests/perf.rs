//! `hca pingpong` and `hca perf` end to end on the emulator: the lines of
//! ibv_*_pingpong and the tables of perftest, parsed and checked for sane
//! numbers; -a, -D, --json; the server and the client meeting over TCP
//! (two threads of one process with --tcp-loopback; two processes without
//! a wire, which say so; two processes on a socket wire are in
//! tests/wire.rs);
//! and every bad argument (one error line, non-zero exit, no panic).

mod common;

use std::net::TcpListener;

use common::{hca, json};

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8")
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str]) -> String {
    let o = hca(args);
    let err = text(&o.stderr);
    assert!(
        o.status.success(),
        "hca {args:?} failed ({:?}): {err}",
        o.status
    );
    assert!(
        !err.contains("panicked") && !err.contains("error"),
        "hca {args:?}: {err}"
    );
    text(&o.stdout)
}

/// Runs and expects failure with exactly one error line (informational
/// lines such as "using the emulated ConnectX-4" may precede it), nothing
/// on stdout, no panic; returns the error line.
fn fails(args: &[&str]) -> String {
    let o = hca(args);
    let err = text(&o.stderr);
    assert!(
        !o.status.success(),
        "hca {args:?} succeeded: {}",
        text(&o.stdout)
    );
    assert!(
        o.stdout.is_empty(),
        "hca {args:?} printed {}",
        text(&o.stdout)
    );
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("hca: error: "))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "hca {args:?}: one error line expected: {err}"
    );
    let last = err.lines().last().unwrap_or_default();
    assert_eq!(last, errors[0], "the error is the last line: {err}");
    errors[0].to_string()
}

/// A TCP port nobody listens on (bound, then released).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

// ---- pingpong ----------------------------------------------------------------

/// `  local address:  LID 0x0000, QPN 0x000123, PSN 0x4a5b6c, GID fe80::...`
fn address(line: &str, label: &str) -> (u32, u32, u32, String) {
    let rest = line
        .strip_prefix(&format!("  {label} LID 0x"))
        .unwrap_or_else(|| panic!("not a {label:?} line: {line:?}"));
    let (lid, rest) = rest.split_once(", QPN 0x").expect("QPN");
    let (qpn, rest) = rest.split_once(", PSN 0x").expect("PSN");
    let (psn, gid) = rest.split_once(", GID ").expect("GID");
    assert_eq!(lid.len(), 4, "{line}");
    assert_eq!(qpn.len(), 6, "{line}");
    assert_eq!(psn.len(), 6, "{line}");
    let h = |s: &str| u32::from_str_radix(s, 16).unwrap();
    gid.parse::<std::net::Ipv6Addr>()
        .unwrap_or_else(|e| panic!("GID {gid:?} ({e})"));
    (h(lid), h(qpn), h(psn), gid.to_string())
}

struct Pp {
    local_qpn: u32,
    remote_qpn: u32,
    bytes: u64,
    seconds: f64,
    mbit: f64,
    iters: u64,
    usec_per_iter: f64,
}

/// Parses and checks the four lines of ibv_*_pingpong.
fn pingpong_lines(out: &str) -> Pp {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let (_, lq, lpsn, lgid) = address(lines[0], "local address: ");
    let (_, rq, rpsn, rgid) = address(lines[1], "remote address:");
    assert!(lpsn <= 0xff_ffff && rpsn <= 0xff_ffff);
    assert_ne!(lq, rq, "two QPs");
    // RoCE on the emulator: link-local GIDs of the two ports' MACs.
    assert!(
        lgid.starts_with("fe80::") && rgid.starts_with("fe80::"),
        "{out}"
    );
    assert_ne!(lgid, rgid);
    // "8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec"
    let (bytes, rest) = lines[2].split_once(" bytes in ").expect("bytes line");
    let (secs, rest) = rest.split_once(" seconds = ").expect("seconds");
    let mbit = rest.strip_suffix(" Mbit/sec").expect("Mbit/sec");
    // "1000 iters in 0.05 seconds = 50.00 usec/iter"
    let (iters, rest) = lines[3].split_once(" iters in ").expect("iters line");
    let (secs2, rest) = rest.split_once(" seconds = ").expect("seconds");
    let upi = rest.strip_suffix(" usec/iter").expect("usec/iter");
    assert_eq!(secs, secs2);
    for s in [secs, mbit, upi] {
        let (_, frac) = s.split_once('.').expect("two decimals");
        assert_eq!(frac.len(), 2, "{s}");
    }
    let p = Pp {
        local_qpn: lq,
        remote_qpn: rq,
        bytes: bytes.parse().unwrap(),
        seconds: secs.parse().unwrap(),
        mbit: mbit.parse().unwrap(),
        iters: iters.parse().unwrap(),
        usec_per_iter: upi.parse().unwrap(),
    };
    assert!(p.mbit > 0.0 && p.usec_per_iter > 0.0, "{out}");
    // The figures agree: usec/iter * iters is the time; Mbit/sec is
    // bytes * 8 over it.
    let usec = p.usec_per_iter * p.iters as f64;
    assert!((usec / 1e6 - p.seconds).abs() <= 0.006, "{out}");
    let mbit = p.bytes as f64 * 8.0 / usec;
    assert!((mbit - p.mbit).abs() <= 0.02 * p.mbit + 0.02, "{out}");
    p
}

#[test]
fn pingpong_rc_uc_ud_print_the_ibv_lines() {
    for (t, size) in [("rc", 4096u64), ("uc", 4096), ("ud", 1024)] {
        let out = ok(&["pingpong", t, "-n", "200"]);
        let p = pingpong_lines(&out);
        assert_eq!(p.iters, 200);
        // ibv_*_pingpong count both directions: size * iters * 2 (UD:
        // 2048 or the port's MTU, 1024 on the emulator).
        assert_eq!(p.bytes, size * 200 * 2, "{t}: {out}");
    }
    let p = pingpong_lines(&ok(&["pingpong", "rc", "-s", "100", "-n", "50"]));
    assert_eq!(p.bytes, 100 * 50 * 2);
}

#[test]
fn pingpong_events_and_checked_contents() {
    for t in ["rc", "uc", "ud"] {
        let out = ok(&[
            "pingpong", t, "-e", "-c", "-s", "333", "-n", "40", "-r", "8",
        ]);
        let p = pingpong_lines(&out);
        assert_eq!(p.bytes, 333 * 40 * 2);
        let j = json(&ok(&[
            "pingpong", t, "-e", "-c", "-s", "333", "-n", "40", "--json",
        ]));
        assert_eq!(j["transport"], t.to_uppercase());
        assert_eq!(j["checked"], 40, "every message checked: {j}");
        assert!(j["cq_events"].as_u64().unwrap() > 0, "{j}");
        assert_eq!(j["bytes"], 333 * 40 * 2);
        assert!(j["usec_per_iter"].as_f64().unwrap() > 0.0);
        assert_ne!(j["local"]["qpn"], j["remote"]["qpn"]);
    }
}

#[test]
fn pingpong_server_and_client_over_tcp() {
    // Two threads, each with its own emulated HCA, the two cabled
    // together, exchanging LID:QPN:PSN:GID over TCP like two processes.
    let o = hca(&["pingpong", "rc", "--tcp-loopback", "-n", "100", "-c"]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let client = pingpong_lines(&text(&o.stdout));
    let server: String = err
        .lines()
        .filter_map(|l| l.strip_prefix("[server] "))
        .map(|l| format!("{l}\n"))
        .collect();
    let server = pingpong_lines(&server);
    // Each side's remote address is the other's local one.
    assert_eq!(client.local_qpn, server.remote_qpn);
    assert_eq!(client.remote_qpn, server.local_qpn);
    assert_eq!(server.bytes, 4096 * 100 * 2);
    assert!(
        err.contains("waiting for a client to connect on TCP port"),
        "{err}"
    );
    let j = json(&ok(&[
        "pingpong",
        "ud",
        "--tcp-loopback",
        "-n",
        "30",
        "--json",
    ]));
    assert_eq!(j["role"], "client");
}

// ---- perf ----------------------------------------------------------------------

/// The rows of a perftest table: the numbers of each line between the
/// table header and the closing dashes.
fn table(out: &str, header: &str) -> Vec<Vec<f64>> {
    let lines: Vec<&str> = out.lines().collect();
    let h = lines
        .iter()
        .position(|l| *l == header)
        .unwrap_or_else(|| panic!("no table header {header:?} in\n{out}"));
    assert_eq!(lines.last().copied(), Some(DASHES), "{out}");
    lines[h + 1..lines.len() - 1]
        .iter()
        .map(|l| {
            assert!(l.starts_with(' '), "{l:?}");
            l.split_whitespace()
                .map(|w| {
                    w.parse::<f64>()
                        .unwrap_or_else(|_| panic!("{w:?} in {l:?}"))
                })
                .collect()
        })
        .collect()
}

const DASHES: &str =
    "---------------------------------------------------------------------------------------";
const BW: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const BW_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
const LAT_DUR: &str = " #bytes        #iterations       t_avg[usec]    tps average";

fn check_bw_row(r: &[f64], bytes: f64, iters: f64) {
    assert_eq!(r.len(), 5, "{r:?}");
    assert_eq!(r[0], bytes, "{r:?}");
    assert_eq!(r[1], iters, "{r:?}");
    assert!(r[2] >= 0.0 && r[3] > 0.0 && r[4] > 0.0, "{r:?}");
    // MsgRate and BW agree: BW = size * rate (MiB/sec).
    let bw = bytes * r[4] * 1e6 / 1_048_576.0;
    assert!((bw - r[3]).abs() <= 0.01 * r[3] + 0.02, "{r:?}");
}

fn check_lat_row(r: &[f64], bytes: f64, iters: f64) {
    assert_eq!(r.len(), 9, "{r:?}");
    assert_eq!(r[0], bytes, "{r:?}");
    assert_eq!(r[1], iters, "{r:?}");
    let (min, max, typ, avg, stdev, p99, p999) = (r[2], r[3], r[4], r[5], r[6], r[7], r[8]);
    assert!(min > 0.0, "{r:?}");
    assert!(min <= typ && typ <= max, "{r:?}");
    assert!(min <= avg && avg <= max, "{r:?}");
    assert!(stdev >= 0.0 && stdev <= max - min + 0.01, "{r:?}");
    assert!(typ <= p99 && p99 <= p999 && p999 <= max, "{r:?}");
}

#[test]
fn perf_every_test_prints_a_perftest_table() {
    for (test, title, bytes) in [
        ("write-bw", "RDMA_Write BW Test", 4096.0),
        ("read-bw", "RDMA_Read BW Test", 4096.0),
        ("send-bw", "Send BW Test", 4096.0),
        ("atomic-bw", "Atomic FETCH_AND_ADD BW Test", 8.0),
    ] {
        let mut args = vec!["perf", test, "-n", "200", "-t", "32", "-Q", "8"];
        if bytes != 8.0 {
            args.extend(["-s", "4096"]);
        }
        let out = ok(&args);
        assert!(out.starts_with(DASHES), "{out}");
        assert_eq!(
            out.lines().nth(1),
            Some(format!("                    {title}").as_str())
        );
        for l in [
            " Dual-port       : OFF\t\tDevice         : emu",
            " Number of qps   : 1\t\tTransport type : IB",
            " Connection type : RC\t\tUsing SRQ      : OFF",
            " TX depth        : 32",
            " CQ Moderation   : 8",
            " Mtu             : 1024[B]",
            " Link type       : Ethernet",
            " GID index       : 1",
        ] {
            assert!(out.lines().any(|x| x == l), "{test}: no {l:?} in\n{out}");
        }
        assert!(out.contains(" local address: LID 0000 QPN 0x"), "{out}");
        assert!(out.contains(" remote address: LID 0000 QPN 0x"), "{out}");
        assert!(out.contains(" GID: 254:128:00:00:00:00:00:00:"), "{out}");
        let rows = table(&out, BW);
        assert_eq!(rows.len(), 1, "{out}");
        check_bw_row(&rows[0], bytes, 200.0);
        // With 8-in-1 signaling there are 25 completions: a peak exists.
        assert!(rows[0][2] > 0.0, "{out}");
    }
    for (test, title, bytes) in [
        ("write-lat", "RDMA_Write Latency Test", 2.0),
        ("read-lat", "RDMA_Read Latency Test", 2.0),
        ("send-lat", "Send Latency Test", 2.0),
        ("atomic-lat", "Atomic FETCH_AND_ADD Latency Test", 8.0),
    ] {
        let out = ok(&["perf", test, "-n", "100"]);
        assert_eq!(
            out.lines().nth(1),
            Some(format!("                    {title}").as_str())
        );
        assert!(out.contains(" TX depth        : 1\n"), "{out}");
        let rows = table(&out, LAT);
        assert_eq!(rows.len(), 1, "{out}");
        check_lat_row(&rows[0], bytes, 100.0);
    }
}

#[test]
fn perf_transports_sizes_and_qps() {
    // UC and UD where the test allows them, several QPs, a size that is no
    // power of two, Gb/sec.
    let out = ok(&[
        "perf", "write-bw", "-c", "UC", "-q", "3", "-n", "50", "-s", "1000",
    ]);
    assert!(out.contains(" Connection type : UC"), "{out}");
    assert_eq!(out.matches(" local address:").count(), 3, "{out}");
    check_bw_row(&table(&out, BW)[0], 1000.0, 150.0);
    let out = ok(&[
        "perf", "send-bw", "-c", "ud", "-s", "512", "-n", "60", "-q", "2",
    ]);
    assert!(out.contains(" Connection type : UD"), "{out}");
    assert!(!out.contains("RKey"), "SEND tests exchange no rkey: {out}");
    check_bw_row(&table(&out, BW)[0], 512.0, 120.0);
    let out = ok(&["perf", "send-bw", "-c", "UC", "-n", "60", "--report_gbits"]);
    let r = &table(&out, BW_G)[0];
    assert_eq!((r[0], r[1]), (65536.0, 60.0));
    assert!(r[3] > 0.0 && r[4] > 0.0, "{r:?}");
    let out = ok(&["perf", "send-lat", "-c", "UD", "-s", "700", "-n", "30"]);
    check_lat_row(&table(&out, LAT)[0], 700.0, 30.0);
    let out = ok(&["perf", "write-lat", "-c", "UC", "-s", "300", "-n", "30"]);
    assert!(out.contains(" Max inline data : 220[B]"), "{out}");
    check_lat_row(&table(&out, LAT)[0], 300.0, 30.0);
    let out = ok(&["perf", "atomic-lat", "-A", "CMP_AND_SWAP", "-n", "20"]);
    assert!(out.contains("Atomic CMP_AND_SWAP Latency Test"), "{out}");
    check_lat_row(&table(&out, LAT)[0], 8.0, 20.0);
}

#[test]
fn perf_all_sizes() {
    let out = ok(&["perf", "write-bw", "-a", "--max-size", "256", "-n", "20"]);
    let rows = table(&out, BW);
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(sizes, [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]);
    for r in &rows {
        check_bw_row(r, r[0], 20.0);
    }
    let out = ok(&["perf", "read-lat", "-a", "--max-size", "64", "-n", "10"]);
    let rows = table(&out, LAT);
    assert_eq!(rows.len(), 6, "{out}");
    for r in &rows {
        check_lat_row(r, r[0], 10.0);
    }
    // UD: up to the MTU, saying so.
    let o = hca(&["perf", "send-bw", "-c", "UD", "-a", "-n", "10"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("max msg size in UD is the MTU (1024 bytes)"));
    let rows = table(&text(&o.stdout), BW);
    assert_eq!(rows.last().unwrap()[0], 1024.0);
    assert_eq!(rows.len(), 10);
}

#[test]
fn perf_ud_without_a_size_uses_the_mtu() {
    // perftest: with UD and no -s, the message is the MTU (1024 bytes on
    // the emulated port), said on stderr; no complaint about a -s that was
    // never given.
    for test in ["send-bw", "send-lat"] {
        let o = hca(&["perf", test, "-c", "UD", "-n", "20"]);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{test}: {err}");
        assert!(!err.contains("-s "), "{test}: {err}");
        let rows = table(&text(&o.stdout), if test == "send-bw" { BW } else { LAT });
        assert_eq!(rows[0][0], if test == "send-bw" { 1024.0 } else { 2.0 });
        if test == "send-bw" {
            assert!(
                err.contains("max msg size in UD is the MTU (1024 bytes): using it"),
                "{err}"
            );
        }
    }
    // The same through a server and a client over TCP.
    let o = hca(&["perf", "send-bw", "-c", "UD", "-n", "20", "--tcp-loopback"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(table(&text(&o.stdout), BW)[0][0], 1024.0);
}

#[test]
fn perf_duration() {
    let out = ok(&["perf", "write-bw", "-D", "1", "-s", "64"]);
    let r = &table(&out, BW)[0];
    assert_eq!(r[0], 64.0);
    assert!(r[1] > 0.0 && r[3] > 0.0, "{r:?}");
    assert_eq!(r[2], 0.0, "no peak with a duration, as perftest: {r:?}");
    let out = ok(&["perf", "send-lat", "-D", "1"]);
    let r = &table(&out, LAT_DUR)[0];
    assert_eq!(r.len(), 4);
    assert_eq!(r[0], 2.0);
    // t_avg (half a round trip) and transactions per second agree.
    assert!(r[1] > 0.0 && r[2] > 0.0 && r[3] > 0.0, "{r:?}");
    assert!(
        (1e6 / r[3] / 2.0 - r[2]).abs() <= 0.05 * r[2] + 0.01,
        "{r:?}"
    );
}

#[test]
fn perf_json() {
    let j = json(&ok(&[
        "perf", "read-bw", "-n", "50", "-s", "2048", "--json",
    ]));
    assert_eq!(j["test"], "read-bw");
    assert_eq!(j["title"], "RDMA_Read BW Test");
    assert_eq!(j["role"], "loopback");
    assert_eq!(j["units"], "MiB/sec");
    assert_eq!(j["outstanding_reads"], 16);
    assert_eq!(j["local"].as_array().unwrap().len(), 1);
    let r = &j["results"][0];
    assert_eq!(r["bytes"], 2048);
    assert_eq!(r["iterations"], 50);
    assert!(r["bw_average"].as_f64().unwrap() > 0.0);
    assert!(r["msg_rate_mpps"].as_f64().unwrap() > 0.0);
    let j = json(&ok(&[
        "perf",
        "send-lat",
        "-n",
        "20",
        "--json",
        "-a",
        "--max-size",
        "8",
    ]));
    let rs = j["results"].as_array().unwrap();
    assert_eq!(rs.len(), 3);
    for r in rs {
        let min = r["t_min_usec"].as_f64().unwrap();
        assert!(
            min > 0.0 && min <= r["t_typical_usec"].as_f64().unwrap(),
            "{r}"
        );
        assert!(r["p99_9_usec"].as_f64().unwrap() <= r["t_max_usec"].as_f64().unwrap());
    }
    let j = json(&ok(&["perf", "atomic-lat", "-D", "1", "--json"]));
    assert!(j["results"][0]["tps"].as_f64().unwrap() > 0.0, "{j}");
}

#[test]
fn perf_server_and_client_over_tcp() {
    for (test, extra) in [
        ("write-bw", &["-n", "100", "-s", "1024", "-q", "2"][..]),
        ("send-bw", &["-n", "100", "-s", "1024"][..]),
        ("send-bw", &["-n", "100", "-s", "256", "-c", "UD"][..]),
        ("write-lat", &["-n", "50"][..]),
        ("send-lat", &["-n", "50", "-a", "--max-size", "16"][..]),
        ("read-lat", &["-n", "50"][..]),
        ("atomic-bw", &["-n", "100"][..]),
    ] {
        let mut args = vec!["perf", test, "--tcp-loopback"];
        args.extend_from_slice(extra);
        let o = hca(&args);
        let err = text(&o.stderr);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(out.contains(" Data ex. method : Ethernet"), "{out}");
        // The server printed its side too: its header and a table.
        let server: String = err
            .lines()
            .filter_map(|l| l.strip_prefix("[server] "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            server.contains(" RX depth") || !test.starts_with("send"),
            "{server}"
        );
        let (h, n) = if test.ends_with("bw") {
            (BW, 5)
        } else {
            (LAT, 9)
        };
        let rows = table(&out, h);
        let srows = table(&server, h);
        assert_eq!(rows.len(), srows.len(), "{out}\n{server}");
        for (r, s) in rows.iter().zip(&srows) {
            assert_eq!(r.len(), n);
            assert_eq!(r[..2], s[..2], "same sizes and iterations on both sides");
        }
        // Each side's remote QPs are the other's local ones.
        let qpns = |s: &str, label: &str| -> Vec<String> {
            s.lines()
                .filter(|l| l.starts_with(&format!(" {label} address:")))
                .map(|l| l.split_whitespace().nth(5).unwrap().to_string())
                .collect()
        };
        assert_eq!(
            qpns(&out, "local"),
            qpns(&server, "remote"),
            "{out}\n{server}"
        );
        assert_eq!(qpns(&out, "remote"), qpns(&server, "local"));
    }
    let j = json(&ok(&[
        "perf",
        "read-bw",
        "--tcp-loopback",
        "-n",
        "40",
        "--json",
    ]));
    assert_eq!(j["role"], "client");
    assert_eq!(j["results"][0]["iterations"], 40);
}

#[test]
fn perf_and_pingpong_between_two_emulator_processes_without_a_wire_say_so() {
    // Each process has its own emulated HCA, whose port is down without a
    // wire: the server says so (and how to cable it) before it listens.
    let port = free_port().to_string();
    for args in [
        vec!["perf", "write-bw", "--server", "-p", &port],
        vec!["pingpong", "rc", "--server", "-p", &port],
    ] {
        let e = fails(&args);
        assert!(e.contains("PORT_DOWN"), "{e}");
        assert!(e.contains("--wire udp:"), "{e}");
        assert!(e.contains("HCA_EMU_WIRE"), "{e}");
        assert!(e.contains("--tcp-loopback"), "{e}");
    }
}

#[test]
fn bad_arguments_are_one_clear_line() {
    let e = fails(&["perf", "write-bandwidth"]);
    assert!(e.contains("unknown perf test 'write-bandwidth'"), "{e}");
    assert!(e.contains("write-bw"), "{e}");
    let e = fails(&["pingpong", "xrc"]);
    assert!(e.contains("unknown pingpong transport 'xrc'"), "{e}");
    let e = fails(&["perf", "write-bw", "-s", "0"]);
    assert!(
        e.contains("-s 0") && e.contains("between 1 and 8388608"),
        "{e}"
    );
    let e = fails(&["perf", "send-bw", "-s", "9000000"]);
    assert!(e.contains("between 1 and 8388608"), "{e}");
    let e = fails(&["pingpong", "rc", "-s", "0"]);
    assert!(e.contains("-s 0"), "{e}");
    // UD above the MTU (1024 bytes on the emulated port).
    let e = fails(&["perf", "send-bw", "-c", "UD", "-s", "2048", "-n", "10"]);
    assert!(e.contains("UD") && e.contains("1024"), "{e}");
    let e = fails(&["pingpong", "ud", "-s", "4096"]);
    assert!(e.contains("larger than port MTU (1024)"), "{e}");
    // Connection types a test does not have.
    let e = fails(&["perf", "write-bw", "-c", "UD"]);
    assert!(e.contains("RC or UC"), "{e}");
    let e = fails(&["perf", "read-lat", "-c", "UC"]);
    assert!(e.contains("RC only"), "{e}");
    let e = fails(&["perf", "send-bw", "-c", "XRC"]);
    assert!(e.contains("RC, UC or UD"), "{e}");
    let e = fails(&["perf", "atomic-bw", "-s", "16"]);
    assert!(e.contains("8 bytes"), "{e}");
    let e = fails(&["perf", "write-bw", "-n", "3"]);
    assert!(e.contains("between 5 and"), "{e}");
    let e = fails(&["perf", "write-lat", "-q", "2"]);
    assert!(e.contains("one QP"), "{e}");
    let e = fails(&["perf", "write-bw", "-m", "1000"]);
    assert!(e.contains("-m 1000"), "{e}");
    // -o: 0 is too few (said as such), and only READ and atomic tests
    // take it.
    let e = fails(&["perf", "read-bw", "-o", "0"]);
    assert!(e.contains("-o 0: at least 1 outstanding READ"), "{e}");
    let e = fails(&["perf", "atomic-lat", "-o", "0"]);
    assert!(e.contains("-o 0: at least 1 outstanding atomic"), "{e}");
    let e = fails(&["perf", "write-bw", "-o", "4"]);
    assert!(
        e.contains("-o applies to the read and atomic tests only"),
        "{e}"
    );
    // An unreachable server.
    let port = free_port().to_string();
    let e = fails(&["perf", "write-bw", "127.0.0.1", "-p", &port]);
    assert!(
        e.contains(&format!("cannot connect to server 127.0.0.1:{port}")),
        "{e}"
    );
    let e = fails(&["pingpong", "rc", "127.0.0.1", "-p", &port]);
    assert!(e.contains("cannot connect to server"), "{e}");
    let e = fails(&["perf", "write-bw", "no-such-host.invalid"]);
    assert!(e.contains("no-such-host.invalid"), "{e}");
    // A port in use.
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let busy = l.local_addr().unwrap().port().to_string();
    let e = fails(&["perf", "send-lat", "--server", "-p", &busy]);
    assert!(
        e.contains(&format!("cannot listen on TCP port {busy}")),
        "{e}"
    );
    let e = fails(&["perf", "send-lat", "--tcp-loopback", "-p", &busy]);
    assert!(e.contains("cannot listen"), "{e}");
    let e = fails(&["pingpong", "uc", "-p", &busy]);
    assert!(e.contains("cannot listen"), "{e}");
    drop(l);
    // Contradictory modes.
    let e = fails(&["perf", "write-bw", "somehost", "--server"]);
    assert!(e.contains("--server"), "{e}");
    // clap's usage errors are one line too, with exit code 2.
    let o = hca(&["perf", "write-bw", "-s", "lots"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("hca: error: invalid value 'lots'"), "{err}");
    let o = hca(&["perf", "write-bw", "-a", "-s", "8"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(text(&o.stderr).lines().count(), 1);
}

/// Runs `hca pingpong rc -s SIZE -n 1`, reading its stdout as it comes:
/// returns the lines, whether the two address lines came on their own
/// while the process was still running, and its peak resident memory in bytes
/// (VmHWM, polled while it runs).
fn pingpong_watched(size: u64, extra: &[&str]) -> (Vec<String>, bool, u64) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let size = size.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["pingpong", "rc", "-s", &size, "-n", "1"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let hwm = move || -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
        l.split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kb| kb * 1024)
    };
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(h) = hwm() {
                    peak.fetch_max(h, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let mut lines = Vec::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut running_after_addresses = false;
    loop {
        let mut l = String::new();
        if reader.read_line(&mut l).unwrap() == 0 {
            break;
        }
        lines.push(l.trim_end().to_string());
        if lines.len() == 2 {
            // Printed and flushed on their own: nothing behind them yet
            // (printed with the results, all four lines come in one
            // write), and the process still at work.
            running_after_addresses =
                reader.buffer().is_empty() && child.try_wait().unwrap().is_none();
        }
    }
    let status = child.wait().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
    assert!(status.success(), "{lines:?}");
    (
        lines,
        running_after_addresses,
        peak.load(std::sync::atomic::Ordering::Relaxed),
    )
}

#[test]
fn pingpong_prints_addresses_first_and_holds_no_copy_of_a_large_message() {
    // A small run for the process's own footprint, then 16 MiB each way.
    let (_, _, base) = pingpong_watched(4096, &[]);
    let size: u64 = 16 << 20;
    let (lines, running, peak) = pingpong_watched(size, &[]);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[0].starts_with("  local address:  LID"), "{lines:?}");
    assert!(lines[1].starts_with("  remote address: LID"), "{lines:?}");
    assert!(
        lines[2].starts_with(&format!("{} bytes in", 2 * size)),
        "{lines:?}"
    );
    // The address lines came out before the exchange (32 MiB through the
    // emulator), as ibv_rc_pingpong prints them, not with the results.
    assert!(running, "the address lines came only at the end");
    // Memory: the two sides' buffers (one of the message's size each, as
    // the examples have) and the emulator's one frame of the message in
    // flight; the tool's former extra send region and message copies
    // (7x the message in all) are gone.
    let extra = peak.saturating_sub(base);
    assert!(
        extra < 4 * size,
        "peak {peak} bytes, {extra} above a 4 KiB run: {:.1}x the message",
        extra as f64 / size as f64
    );
    assert!(
        extra >= 2 * size,
        "peak {peak}: the buffers were not measured"
    );
}

#[test]
fn pingpong_over_tcp_loopback_prints_addresses_first() {
    // The client of --tcp-loopback prints its address lines as soon as
    // they are known too (the server's report goes to stderr).
    let size: u64 = 16 << 20;
    let (lines, running, _) = pingpong_watched(size, &["--tcp-loopback"]);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[0].starts_with("  local address:  LID"), "{lines:?}");
    assert!(lines[1].starts_with("  remote address: LID"), "{lines:?}");
    assert!(running, "the address lines came only at the end");
}

#[test]
fn perf_perftest_exchange_refuses_what_it_cannot_do() {
    // No peer to talk to.
    let e = fails(&["perf", "write-bw", "--perftest"]);
    assert!(e.contains("--perftest"), "{e}");
    // One size per run, as perftest's default.
    let e = fails(&["perf", "write-bw", "--perftest", "--tcp-loopback", "-a"]);
    assert!(e.contains("-a"), "{e}");
    // And --tcp-loopback runs it end to end.
    let out = ok(&[
        "perf",
        "read-bw",
        "--perftest",
        "--tcp-loopback",
        "-n",
        "20",
        "-s",
        "4096",
    ]);
    let rows = table(&out, BW);
    assert_eq!(rows.len(), 1, "{out}");
    check_bw_row(&rows[0], 4096.0, 20.0);
}
