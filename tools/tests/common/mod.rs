//! What the end-to-end tests of the `hca` binary share.
// Not every test binary that includes this module uses all of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// Runs the `hca` binary with `args` (no RUST_LOG or RUST_BACKTRACE from
/// the environment).
pub fn hca(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .env_remove("HCA_EMU_WIRE")
        .output()
        .expect("run hca")
}

/// Parses `s` as JSON; panics saying what it was otherwise.
pub fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Bytes (a process's output) as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A local TCP port nobody listens on (bound, then released).
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A local UDP port nobody uses (bound, then released).
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scratch directory of this test process, `name` in its name, created.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hca-tools-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The `hca` binary and the emulated VFIO device's preload library next
/// to it (`cargo build -p hca-vfio-emu`); panics saying so when it is
/// missing.
pub fn vfio_preload() -> (PathBuf, PathBuf) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_hca"));
    let lib = bin.with_file_name("libhca_vfio_emu.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo build -p hca-vfio-emu",
        lib.display()
    );
    (bin, lib)
}

/// Spawns `cmd` with its stderr piped and returns once a line of it
/// satisfies `ready`: the child, a receiver of the stderr lines after
/// that one, and the line. The receiver ends when the child closes its
/// stderr (exits), so after waiting for the child `rx.iter()` has every
/// line. Kills the child and panics with the lines seen when none is
/// ready within 60 seconds (or stderr ends first).
pub fn spawn_until(
    cmd: &mut Command,
    what: &str,
    ready: impl Fn(&str) -> bool,
) -> (Child, mpsc::Receiver<String>, String) {
    let mut child = cmd
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(|l| l.ok()) {
            let _ = tx.send(l);
        }
    });
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if ready(&l) => return (child, rx, l),
            Ok(l) => seen.push(l),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not start ({e}): {seen:?}");
            }
        }
    }
}
