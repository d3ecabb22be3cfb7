//! `hca capture` on an emulated HCA cabled to a UDP socket wire: this test
//! is the other end of the wire and writes Ethernet frames into it, as
//! another process (or QEMU's `-netdev dgram`) would. The pcap must hold
//! exactly the frames the selectors match, byte for byte; the counters on
//! stderr must count them, the steering drops the others, and frames
//! larger than a buffer; tshark must read the file without an error.
//!
//! tshark: when it is not installed the tshark checks are left out with a
//! note on stderr, unless `HCA_REQUIRE_PEERS=1` (set by `.ci/run`, which
//! installs it), where its absence fails the test.

mod common;

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{hca, scratch, spawn_until, vfio_preload};
use hca_emu::frame::{Frame, L3, L4};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// A frame: Ethernet (optionally 802.1Q-tagged), then IPv4 or IPv6, then
/// UDP or TCP with 4 bytes of payload (checksums as tshark expects: IPv4
/// header checksum right, L4 checksum 0 for UDP over IPv4, unchecked by
/// default for TCP).
#[derive(Clone)]
struct F {
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    v6: bool,
    tcp: bool,
    sport: u16,
    dport: u16,
    ip_dst: u8,
    pad: usize,
}

impl Default for F {
    fn default() -> Self {
        F {
            dst: MAC_B,
            src: MAC_A,
            vlan: None,
            v6: false,
            tcp: false,
            sport: 1234,
            dport: 4000,
            ip_dst: 2,
            pad: 0,
        }
    }
}

impl F {
    /// Its bytes, through `hca_emu::frame`.
    fn bytes(&self) -> Vec<u8> {
        let payload = vec![0x5a; 4 + self.pad];
        let l3 = if self.v6 {
            let src = "fd00::1".parse::<std::net::Ipv6Addr>().unwrap();
            let dst = format!("fd00::{}", self.ip_dst)
                .parse::<std::net::Ipv6Addr>()
                .unwrap();
            L3::V6(src.octets(), dst.octets())
        } else {
            L3::V4([10, 0, 0, 1], [10, 0, 0, self.ip_dst])
        };
        let l4 = if self.tcp {
            L4::Tcp(self.sport, self.dport)
        } else {
            L4::Udp(self.sport, self.dport)
        };
        let f = Frame::new(self.dst, self.src)
            .vlan(self.vlan)
            .l3(l3)
            .l4(l4)
            .payload(&payload)
            .ip_checksum();
        // UDP over IPv6 needs its checksum.
        if self.v6 && !self.tcp {
            f.l4_checksum().build()
        } else {
            f.build()
        }
    }
}

/// The records of a classic pcap file (nanosecond magic, host order):
/// each frame's time (since the Unix epoch) and bytes.
fn pcap_records(b: &[u8]) -> Vec<(Duration, Vec<u8>)> {
    assert!(b.len() >= 24, "no pcap header");
    let word = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    assert_eq!(word(0), 0xa1b2_3c4d, "nanosecond pcap magic");
    assert_eq!(word(20), 1);
    let mut out = Vec::new();
    let mut o = 24;
    while o < b.len() {
        let (cap, len) = (word(o + 8) as usize, word(o + 12) as usize);
        assert_eq!(cap, len);
        let t = Duration::new(u64::from(word(o)), word(o + 4));
        out.push((t, b[o + 16..o + 16 + cap].to_vec()));
        o += 16 + cap;
    }
    assert_eq!(o, b.len(), "a record cut short");
    out
}

/// The frames of a classic pcap file.
fn pcap_frames(b: &[u8]) -> Vec<Vec<u8>> {
    pcap_records(b).into_iter().map(|(_, f)| f).collect()
}

/// The times and the frames of the pcap file `f`.
fn pcap_file(f: &Path) -> (Vec<Duration>, Vec<Vec<u8>>) {
    pcap_records(&std::fs::read(f).unwrap()).into_iter().unzip()
}

/// `n` UDP frames of the default kind, source ports `sport`, `sport + 1`...
fn udp_frames(n: u16, sport: u16) -> Vec<Vec<u8>> {
    (sport..sport + n)
        .map(|sport| {
            F {
                sport,
                ..F::default()
            }
            .bytes()
        })
        .collect()
}

/// The host's clock (since the Unix epoch).
fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// tshark's frame count of `f` (its exit status must be 0 and its stderr
/// free of errors); `None` when tshark is absent and not required.
fn tshark_count(f: &Path) -> Option<usize> {
    let o = match Command::new("tshark").arg("-r").arg(f).output() {
        Ok(o) => o,
        Err(e) => {
            if std::env::var("HCA_REQUIRE_PEERS").is_ok_and(|v| v == "1") {
                panic!("tshark is required (HCA_REQUIRE_PEERS=1) and cannot run: {e}");
            }
            eprintln!(
                "note: tshark not found ({e}): its check of {} is left out",
                f.display()
            );
            return None;
        }
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tshark -r {}: {err}", f.display());
    let bad: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("Running as user") && !l.trim().is_empty())
        .collect();
    assert!(bad.is_empty(), "tshark -r {}: {bad:?}", f.display());
    Some(String::from_utf8_lossy(&o.stdout).lines().count())
}

/// A running `hca capture` cabled to a UDP wire whose other end is `sock`.
struct Run {
    child: Child,
    rx: mpsc::Receiver<String>,
    /// The line that said the capture started.
    first: String,
    sock: UdpSocket,
    hca_addr: String,
}

fn start(args: &[&str]) -> Run {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mine = sock.local_addr().unwrap();
    // The emulator's end: a free port found by binding and releasing it.
    let hca_addr = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let wire = format!("udp:{hca_addr},{mine}");
    let (child, rx, first) = spawn_until(
        Command::new(env!("CARGO_BIN_EXE_hca"))
            .env_remove("RUST_LOG")
            .env_remove("HCA_EMU_WIRE")
            .arg("capture")
            .args(args)
            .args(["--wire", &wire])
            .stdout(Stdio::piped()),
        "hca capture",
        |l| l.starts_with("hca capture: port"),
    );
    Run {
        child,
        rx,
        first,
        sock,
        hca_addr,
    }
}

impl Run {
    fn send(&self, frames: &[Vec<u8>]) {
        for f in frames {
            self.sock.send_to(f, &self.hca_addr).unwrap();
        }
    }

    /// Waits for the end; (stdout, stderr lines). The capture must succeed.
    fn finish(self) -> (Vec<u8>, Vec<String>) {
        let o = self.child.wait_with_output().unwrap();
        let err: Vec<String> = self.rx.iter().collect();
        assert!(o.status.success(), "hca capture failed: {err:?}");
        (o.stdout, err)
    }
}

/// The last counters line.
fn done_line(err: &[String]) -> String {
    err.iter()
        .rev()
        .find(|l| l.starts_with("hca capture: done:"))
        .unwrap_or_else(|| panic!("no final counters: {err:?}"))
        .clone()
}

/// Sends `all` to a capture with `selectors` and `-c expected.len()`;
/// checks that the pcap holds exactly `expected` (in order), the
/// counters, and tshark's reading.
fn check(tag: &str, selectors: &[&str], all: &[F], expected: &[usize]) {
    let dir = scratch(&format!("capture-{tag}"));
    let file = dir.join("c.pcap");
    let count = expected.len().to_string();
    let mut args = vec!["-w", file.to_str().unwrap(), "-c", &count];
    args.extend_from_slice(selectors);
    let run = start(&args);
    let frames: Vec<Vec<u8>> = all.iter().map(F::bytes).collect();
    run.send(&frames);
    let (_, err) = run.finish();
    let got = pcap_frames(&std::fs::read(&file).unwrap());
    let want: Vec<Vec<u8>> = expected.iter().map(|&i| frames[i].clone()).collect();
    assert_eq!(got.len(), want.len(), "{tag}: frames in the pcap ({err:?})");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{tag}: frame {i} differs");
    }
    let bytes: usize = want.iter().map(Vec::len).sum();
    let line = done_line(&err);
    assert!(
        line.contains(&format!("done: {} frames, {bytes} bytes", want.len())),
        "{tag}: {line}"
    );
    // Every frame sent before the last matching one was steered or
    // dropped by then: the ones the selectors refuse are steering drops.
    let last = *expected.last().unwrap();
    let refused = (0..last).filter(|i| !expected.contains(i)).count();
    let steering: usize = line
        .split("steering ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{tag}: no steering count: {line}"));
    let refused_all = all.len() - expected.len();
    assert!(
        (refused..=refused_all).contains(&steering),
        "{tag}: {refused} frames refused before the last match ({refused_all} in all), steering drops {steering}: {line}"
    );
    assert!(line.contains("out-of-buffer 0"), "{tag}: {line}");
    if let Some(n) = tshark_count(&file) {
        assert_eq!(n, want.len(), "{tag}: tshark's frame count");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn l4_and_ip_selectors_take_exactly_the_frames_they_match() {
    let all = [
        F::default(),
        F {
            dport: 4001,
            ..F::default()
        },
        F {
            tcp: true,
            ..F::default()
        },
        F {
            ip_dst: 3,
            ..F::default()
        },
        F {
            sport: 999,
            ..F::default()
        },
        F {
            dst: MAC_A,
            ..F::default()
        },
    ];
    check(
        "udp",
        &[
            "--proto",
            "udp",
            "--dst-port",
            "4000",
            "--dst-ip",
            "10.0.0.2",
        ],
        &all,
        &[0, 4, 5],
    );
    check(
        "tcp",
        &[
            "--proto",
            "tcp",
            "--dst-port",
            "4000",
            "--src-ip",
            "10.0.0.1",
        ],
        &[F::default(), all[2].clone(), F::default(), all[2].clone()],
        &[1, 3],
    );
}

#[test]
fn l2_selectors_take_exactly_the_frames_they_match() {
    let all = [
        F::default(),
        F {
            vlan: Some(7),
            ..F::default()
        },
        F {
            vlan: Some(8),
            ..F::default()
        },
        F {
            vlan: Some(7),
            src: MAC_B,
            ..F::default()
        },
        F {
            vlan: Some(7),
            v6: true,
            ..F::default()
        },
    ];
    check(
        "vlan",
        &["--eth-src", "02:00:00:00:00:0a", "--vlan", "7"],
        &all,
        &[1, 4],
    );
    check(
        "ethertype",
        &["--ethertype", "0x86dd", "--eth-dst", "02:00:00:00:00:0b"],
        &[
            F::default(),
            F {
                v6: true,
                ..F::default()
            },
            F {
                v6: true,
                dst: MAC_A,
                ..F::default()
            },
            F {
                v6: true,
                tcp: true,
                ..F::default()
            },
        ],
        &[1, 3],
    );
    check(
        "ipv6",
        &["--dst-ip", "fd00::2", "--proto", "udp"],
        &[
            F {
                v6: true,
                ip_dst: 3,
                ..F::default()
            },
            F {
                v6: true,
                ..F::default()
            },
            F::default(),
            F {
                v6: true,
                tcp: true,
                ..F::default()
            },
            F {
                v6: true,
                sport: 7,
                ..F::default()
            },
        ],
        &[1, 4],
    );
}

#[test]
fn sniffer_to_stdout_takes_every_frame_and_counts_frames_larger_than_a_buffer() {
    let dir = scratch("capture-sniffer");
    // 128-byte buffers: a frame with 200 bytes of padding does not fit.
    let run = start(&["-w", "-", "-c", "3", "--sniffer", "--buf-size", "128"]);
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&MAC_A);
        f.extend_from_slice(&0x0806u16.to_be_bytes());
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&MAC_A);
        f.extend_from_slice(&[10, 0, 0, 1]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&[10, 0, 0, 2]);
        f.resize(60, 0);
        f
    };
    let big = F {
        pad: 200,
        ..F::default()
    }
    .bytes();
    let frames = vec![
        arp,
        big,
        F {
            v6: true,
            ..F::default()
        }
        .bytes(),
        F {
            vlan: Some(3),
            ..F::default()
        }
        .bytes(),
    ];
    run.send(&frames);
    let (out, err) = run.finish();
    let got = pcap_frames(&out);
    assert_eq!(
        got,
        vec![frames[0].clone(), frames[2].clone(), frames[3].clone()]
    );
    let line = done_line(&err);
    assert!(line.contains("done: 3 frames"), "{line}");
    assert!(line.contains("1 larger than the buffer"), "{line}");
    assert!(line.contains("steering 0"), "{line}");
    let file = dir.join("stdout.pcap");
    std::fs::write(&file, &out).unwrap();
    if let Some(n) = tshark_count(&file) {
        assert_eq!(n, 3);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_file_each_frame_is_one_line() {
    let run = start(&["-c", "1", "--proto", "udp"]);
    run.send(&[F::default().bytes()]);
    let (out, _) = run.finish();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.trim_end().ends_with(
            "02:00:00:00:00:0a > 02:00:00:00:00:0b, 10.0.0.1.1234 > 10.0.0.2.4000: UDP, length 46"
        ),
        "{out}"
    );
}

#[test]
fn duration_ends_a_capture_that_sees_nothing() {
    let dir = scratch("capture-duration");
    let file = dir.join("empty.pcap");
    let run = start(&["-w", file.to_str().unwrap(), "--duration", "0.5", "-v"]);
    let (_, err) = run.finish();
    assert!(
        done_line(&err).contains("done: 0 frames, 0 bytes"),
        "{err:?}"
    );
    assert!(pcap_frames(&std::fs::read(&file).unwrap()).is_empty());
    if let Some(n) = tshark_count(&file) {
        assert_eq!(n, 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_are_one_clear_error() {
    let e = |args: &[&str]| {
        let o = hca(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(e(&["capture", "--eth-dst", "nope"]).contains("--eth-dst \"nope\": not a MAC address"));
    assert!(e(&["capture", "--vlan", "5000"]).contains("--vlan 5000"));
    assert!(e(&["capture", "--dst-port", "80"]).contains("need --proto"));
    assert!(e(&["capture", "--src-ip", "10.0.0.1", "--dst-ip", "::1"]).contains("IPv4"));
    assert!(e(&["capture", "--ethertype", "0x0800", "--src-ip", "::1"]).contains("contradict"));
    assert!(e(&["capture", "--sniffer", "--proto", "tcp"]).contains("--sniffer"));
    assert!(e(&["capture", "-n", "0"]).contains("-n 0"));
    let dir = scratch("capture-unwritable");
    let bad = dir.join("no/such/dir/x.pcap");
    let msg = e(&["capture", "-w", bad.to_str().unwrap()]);
    assert!(
        msg.contains(bad.to_str().unwrap()) && msg.contains("No such file"),
        "{msg}"
    );
    // The emulated port without a wire is down.
    let msg = e(&["capture", "-c", "1"]);
    assert!(
        msg.contains("not PORT_ACTIVE") && msg.contains("--wire"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pcap's times are the device's CQE timestamps on the host's clock:
/// strictly increasing in the order received, within the run's wall-clock
/// window, spaced as the frames were sent; the start line says so, and
/// `--host-time` says the other.
#[test]
fn pcap_times_come_from_the_device_clock_anchored_to_the_host() {
    let dir = scratch("capture-times");
    let file = dir.join("t.pcap");
    let before = now();
    let run = start(&["-w", file.to_str().unwrap(), "-c", "4", "--proto", "udp"]);
    let frames = udp_frames(4, 100);
    // Two pairs 50 ms apart.
    run.send(&frames[..2]);
    std::thread::sleep(Duration::from_millis(50));
    run.send(&frames[2..]);
    let first = run.first.clone();
    let _ = run.finish();
    let after = now();
    assert!(
        first.contains("timestamps: device clock (CQE timestamps, 275000 kHz"),
        "{first}"
    );
    let (t, got) = pcap_file(&file);
    assert_eq!(got, frames);
    assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    // The anchor is taken once the device is up, and the clock runs at
    // the host's rate: every time falls in the run (a little slack for
    // the anchor's midpoint).
    let slack = Duration::from_millis(20);
    assert!(
        t[0] + slack >= before && t[3] <= after + slack,
        "{before:?} {t:?} {after:?}"
    );
    assert!(t[2] - t[1] >= Duration::from_millis(45), "{t:?}");
    if let Some(n) = tshark_count(&file) {
        assert_eq!(n, 4);
    }
    let run = start(&["-c", "1", "--host-time"]);
    let first = run.first.clone();
    run.send(&[F::default().bytes()]);
    let _ = run.finish();
    assert!(
        first.contains("timestamps: host clock when polled (--host-time)"),
        "{first}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `-c` or `--duration`, SIGINT ends the capture: the frames so
/// far are in the file, whole and in order, the final counters printed,
/// and the exit status is 0.
#[test]
fn sigint_ends_a_capture_with_its_counters_and_a_whole_pcap() {
    let dir = scratch("capture-sigint");
    let file = dir.join("i.pcap");
    let run = start(&["-w", file.to_str().unwrap(), "--proto", "udp", "-v"]);
    let frames = udp_frames(3, 200);
    run.send(&frames);
    // The counters every second (-v) show the frames taken before the
    // signal is sent.
    let mut seen = Vec::new();
    loop {
        let l = run
            .rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("no counters with 3 frames ({e}): {seen:?}"));
        let done = l.starts_with("hca capture: 3 frames");
        seen.push(l);
        if done {
            break;
        }
    }
    // The shell's kill builtin: no unsafe code in the test, no procps.
    let st = Command::new("sh")
        .args(["-c", &format!("kill -INT {}", run.child.id())])
        .status()
        .unwrap();
    assert!(st.success());
    let o = run.child.wait_with_output().unwrap();
    seen.extend(run.rx.iter());
    assert!(o.status.success(), "{:?}: {seen:?}", o.status);
    assert!(
        seen.iter()
            .any(|l| l == "hca capture: interrupted (SIGINT)"),
        "{seen:?}"
    );
    let line = done_line(&seen);
    assert!(line.contains("done: 3 frames"), "{line}");
    assert_eq!(pcap_file(&file).1, frames);
    if let Some(n) = tshark_count(&file) {
        assert_eq!(n, 3);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--pcapng`: the file's section comment says where the timestamps come
/// from (classic pcap has no field for it), the frames are whole in
/// enhanced packet blocks with nanosecond times, and tshark and capinfos
/// read it.
#[test]
fn pcapng_says_where_its_timestamps_come_from() {
    let dir = scratch("capture-pcapng");
    let file = dir.join("c.pcapng");
    let run = start(&["-w", file.to_str().unwrap(), "-c", "2", "--pcapng"]);
    let frames = udp_frames(2, 300);
    run.send(&frames);
    let _ = run.finish();
    let b = std::fs::read(&file).unwrap();
    let word = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    assert_eq!((word(0), word(8)), (0x0a0d_0d0a, 0x1a2b_3c4d));
    let comment = "hca capture: timestamps from the device clock";
    assert!(
        b.windows(comment.len()).any(|w| w == comment.as_bytes()),
        "no comment in the section header"
    );
    // The enhanced packet blocks (type 6): time and frame.
    let (mut o, mut got, mut times) = (0, Vec::new(), Vec::new());
    while o < b.len() {
        let (kind, len) = (word(o), word(o + 4) as usize);
        if kind == 6 {
            times.push(u64::from(word(o + 12)) << 32 | u64::from(word(o + 16)));
            let cap = word(o + 20) as usize;
            got.push(b[o + 28..o + 28 + cap].to_vec());
        }
        o += len;
    }
    assert_eq!(got, frames);
    assert!(times[0] < times[1], "{times:?}");
    if let Some(n) = tshark_count(&file) {
        assert_eq!(n, 2);
        let o = Command::new("capinfos").arg(&file).output().unwrap();
        let info = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{info}");
        assert!(info.contains(comment), "{info}");
        assert!(info.contains("nanoseconds"), "{info}");
    }
    // Only with -w.
    let o = hca(&["capture", "--pcapng", "-c", "1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--pcapng is the format of -w FILE"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under VFIO: `-d <bdf>` of a function of the emulated VFIO device
/// (`LD_PRELOAD` of `hca-vfio-emu`) whose port is on a Unix datagram wire
/// this test writes frames into; the out-of-buffer drops come from the
/// QP's Q counter through the VFIO path too (QUERY_Q_COUNTER). A function with an
/// InfiniBand port is refused by name. Needs the preload library next to
/// the binary: `cargo build -p hca-vfio-emu && cargo test -p hca-tools
/// --test capture -- --ignored vfio_preload`.
#[test]
#[ignore = "needs target/<profile>/libhca_vfio_emu.so: cargo build -p hca-vfio-emu, then run with --ignored"]
fn vfio_preload_capture_through_a_raw_qp_and_an_infiniband_port_refused() {
    use std::os::unix::net::UnixDatagram;
    let (bin, lib) = vfio_preload();
    let dir = scratch("capture-vfio");
    let (hca_end, my_end) = (dir.join("hca.sock"), dir.join("test.sock"));
    let file = dir.join("v.pcap");
    let sock = UnixDatagram::bind(&my_end).unwrap();
    let (mut child, rx, l) = spawn_until(
        Command::new(&bin)
            .args(["-d", "0000:00:13.0", "capture", "-c", "2", "--proto", "udp"])
            .args(["--dst-port", "4000", "-w", file.to_str().unwrap()])
            .env("LD_PRELOAD", &lib)
            .env(
                "HCA_EMU_VFIO",
                format!(
                    "0000:00:13.0=cx4,sock={},peer={}",
                    hca_end.display(),
                    my_end.display()
                ),
            )
            .env_remove("RUST_LOG"),
        "hca capture under the VFIO preload",
        |l| l.starts_with("hca capture: port"),
    );
    assert!(l.contains("vfio 0000:00:13.0"), "{l}");
    let frames = [
        F::default().bytes(),
        F {
            dport: 4001,
            ..F::default()
        }
        .bytes(),
        F {
            v6: true,
            ..F::default()
        }
        .bytes(),
    ];
    for f in &frames {
        sock.send_to(f, &hca_end).unwrap();
    }
    let st = child.wait().unwrap();
    let err: Vec<String> = rx.iter().collect();
    assert!(st.success(), "{err:?}");
    let got = pcap_frames(&std::fs::read(&file).unwrap());
    assert_eq!(got, vec![frames[0].clone(), frames[2].clone()]);
    let line = done_line(&err);
    assert!(line.contains("done: 2 frames"), "{line}");
    assert!(
        line.contains("device drops: out-of-buffer 0 (Q counter)"),
        "{line}"
    );
    // An InfiniBand port: refused by name.
    let o = Command::new(&bin)
        .args(["-d", "0000:00:10.0", "capture", "-c", "1"])
        .env("LD_PRELOAD", &lib)
        .env("HCA_EMU_VFIO", "0000:00:10.0=cx4,ib,loop")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("is an InfiniBand port: raw packet QPs need an Ethernet port"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
