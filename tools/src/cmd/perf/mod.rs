//! `hca perf <test>`: perftest's `ib_write_bw`, `ib_write_lat`,
//! `ib_read_bw`, `ib_read_lat`, `ib_send_bw`, `ib_send_lat`,
//! `ib_atomic_bw` and `ib_atomic_lat`, with perftest's options where they
//! apply and its parameter header, address lines and result tables.
//!
//! Where the two sides run:
//!
//! - no server host, no `--server`, no `-p`: both in this process, on one
//!   thread (two emulated HCAs cabled port 1 to port 1; on a real function,
//!   both sides on it: port 1 to port 2 of a two-port card, else port 1
//!   looped back);
//! - `--server` (or `-p PORT` alone): this process is the server, waiting
//!   for a client on the TCP port; `hca perf <test> HOST` is its client.
//!   They exchange the QPs' LID, QPN, PSN, GID, rkey and buffer address
//!   and agree on the MTU over TCP, then synchronise the start and end of
//!   each message size over the same connection. The server takes the
//!   sizes, iterations, QPs and depths from the client;
//! - `--tcp-loopback`: a server and a client on two threads of this
//!   process, each with its own emulated HCA (the two cabled together),
//!   meeting over TCP on 127.0.0.1 exactly as two processes do.
//!
//! On the emulator each `hca` process has its own emulated HCA, whose
//! port is down without a cable: a server and a client in two processes
//! each take `--wire` (or `HCA_EMU_WIRE`) with the two ends swapped; one
//! without a wire says so.
//!
//! Latencies are perftest's: the interval between consecutive posts of
//! the client (one round trip each), halved for WRITE and SEND (a round
//! trip is two messages), whole for READ and atomics; the two largest
//! samples are left out. Bandwidth is the size times the messages
//! completed over the time from the first post to the last completion;
//! the peak is the best per-message time over any span from a post to a
//! later completion.
//!
//! The modules:
//!
//! - `arguments`: the clap arguments and their validation into a spec;
//! - `spec`: the test description both sides agree on;
//! - `protocol`: this tool's exchange between a client and a server;
//!   [`perftest`]: perftest's own TCP exchange and a side run against it;
//! - `side`: setting one side up, and its engine for one size;
//! - `engine`: the test loops, as state machines;
//! - `local`: both sides in this process;
//! - `remote`: one side per process, the server or the client (also the
//!   two threads of `--tcp-loopback`);
//! - [`report`]: perftest's report, and how a run prints it;
//! - `raw`: `raw-bw`, perftest's raw_ethernet_bw on raw packet QPs (its
//!   own small exchange; the report's bandwidth rows).

mod arguments;
mod engine;
mod local;
pub mod perftest;
mod protocol;
mod raw;
mod remote;
pub mod report;
mod side;
mod spec;

use std::io::Write;

use crate::device::{Device, DevicePair, OpenOptions, Selection};
use crate::error::{Result, ToolError};
use crate::peer::{self, Mode};
pub use arguments::PerfArgs;
use remote::Split;
use report::Printer;

/// Runs `hca perf`.
pub fn run(
    a: &PerfArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if a.is_raw() {
        return raw::run(a, sel, open, as_json, out);
    }
    let (spec, local, mode) = a.validate()?;
    match mode {
        Mode::Loopback => {
            let pair = DevicePair::open(sel, open)?;
            let mut printer = Printer { out, json: as_json };
            let r = local::run(&spec, &local, &mut printer, &pair);
            pair.finish(r)
        }
        Mode::Server { port } => {
            // Listen first: a port in use is known before any bring-up.
            let listener = peer::listen(port)?;
            let side = Split {
                spec,
                local,
                mode: Mode::Server { port },
                listener: Some(listener),
                printer: Printer { out, json: as_json },
            };
            let dev = Device::open(sel, open)?;
            let r = remote::run(side, &dev);
            dev.finish(r)
        }
        Mode::Client { .. } => {
            let side = Split {
                spec,
                local,
                mode,
                listener: None,
                printer: Printer { out, json: as_json },
            };
            let dev = Device::open(sel, open)?;
            let r = remote::run(side, &dev);
            dev.finish(r)
        }
        Mode::TcpLoopback { port } => {
            if *sel != Selection::Emulator {
                return Err(ToolError::Usage(
                    "--tcp-loopback runs on the emulator only (on real HCAs run a server and a client)".into(),
                ));
            }
            let (ea, eb, cap) = crate::device::emulated_pair(open)?;
            let mut server_out = Vec::new();
            let mut client_out = Vec::new();
            let server_spec = spec.clone();
            let server_local = local.clone();
            let so = &mut server_out;
            let co = &mut client_out;
            let r = peer::tcp_loopback(
                port,
                move |listener| {
                    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
                    let side = Split {
                        spec: server_spec,
                        local: server_local,
                        mode: Mode::Server { port },
                        listener: Some(listener),
                        printer: Printer {
                            out: so,
                            json: false,
                        },
                    };
                    let dev = Device::open_emulated(&eb, None, open.wait_mode)?;
                    let r = remote::run(side, &dev);
                    dev.finish(r)
                },
                |port| {
                    let side = Split {
                        spec,
                        local,
                        mode: Mode::Client {
                            host: "127.0.0.1".into(),
                            port,
                        },
                        listener: None,
                        printer: Printer {
                            out: co,
                            json: as_json,
                        },
                    };
                    let dev =
                        Device::open_emulated(&ea, open.dump_commands.as_deref(), open.wait_mode)?;
                    let r = remote::run(side, &dev);
                    dev.finish(r)
                },
            );
            crate::device::end_capture(cap, &ea, r)?;
            for l in String::from_utf8_lossy(&server_out).lines() {
                eprintln!("[server] {l}");
            }
            out.write_all(&client_out)?;
            Ok(())
        }
    }
}
