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

mod engine;
pub mod perftest;
pub mod report;

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use hca_driver::verbs::{AccessFlags, Ah, QpCap, QpType};
use hca_driver::{Hca, IbMtu};
use platform::Platform;
use serde::{Deserialize, Serialize};

use crate::device::{
    DeviceDesc, HcaTask, OpenOptions, PairDesc, PairTask, Selection, run_hca, run_pair,
    with_emulated,
};
use crate::error::{Result, ToolError};
use crate::output::json;
use crate::peer::{self, ConnectionArgs, Control, EXCHANGE_TIMEOUT, Mode};
use crate::progress::{self, Progress};
use crate::rdma::{
    ConnParams, Endpoint, Pacer, PortView, Side, SideSpec, path_to, port_view, random_psn, to_init,
    to_rts, with_side,
};
use engine::{BwReceiver, BwSender, GRH, Layout, Peer, PingPong, ReqLat, SendLat, Until, WriteLat};
use report::{BwRow, Row};

/// perftest's largest message (`MAX_SIZE`, 2^23).
const MAX_SIZE: u64 = 8_388_608;
/// perftest's fewest iterations (`MIN_ITER`).
const MIN_ITER: u64 = 5;
/// perftest's most iterations (`MAX_ITER`).
const MAX_ITER: u64 = 100_000_000;
/// Most QPs (one CQ per side serves them all).
const MAX_QPS: u32 = hca_driver::verbs::MAX_QPS_PER_CQ as u32;
/// perftest's `MAX_OUT_READ_HERMON`.
const MAX_OUT_READS: u32 = 16;
/// The version of the control protocol (2: GIDs in colon form).
const PROTOCOL: u32 = 2;

/// Arguments of `hca perf`.
#[derive(Debug, Args)]
pub struct PerfArgs {
    /// The test: write-bw, write-lat, read-bw, read-lat, send-bw,
    /// send-lat, atomic-bw or atomic-lat.
    #[arg(value_name = "TEST")]
    test: String,

    #[command(flatten)]
    conn: ConnectionArgs,

    /// Message size in bytes (bandwidth 65536, latency 2, atomics 8).
    #[arg(short = 's', long = "size", conflicts_with = "all")]
    size: Option<u64>,

    /// Iterations per QP (write-bw 5000, the others 1000; at least 5).
    #[arg(short = 'n', long = "iters", conflicts_with = "duration")]
    iters: Option<u64>,

    /// Run every size from 2 to 2^23 bytes (UD: up to the MTU).
    #[arg(short = 'a', long = "all")]
    all: bool,

    /// With -a: the largest size (an extension of this tool, to keep a
    /// run short).
    #[arg(long = "max-size", requires = "all")]
    max_size: Option<u64>,

    /// Number of QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,

    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration", conflicts_with = "all")]
    duration: Option<u64>,

    /// Report bandwidth in Gb/sec instead of MiB/sec.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,

    /// Connection type: RC, UC or UD (UC: write and send; UD: send).
    #[arg(short = 'c', long = "connection")]
    connection: Option<String>,

    /// Outstanding work requests per QP (bandwidth 128, latency 1).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,

    /// Receives posted per QP (send tests; 512).
    #[arg(short = 'r', long = "rx-depth")]
    rx_depth: Option<u32>,

    /// Signal one work request in this many (bandwidth; 100).
    #[arg(short = 'Q', long = "cq-mod")]
    cq_mod: Option<u32>,

    /// Path MTU: 256, 512, 1024, 2048, 4096 (default: the port's active
    /// MTU).
    #[arg(short = 'm', long = "mtu")]
    mtu: Option<u32>,

    /// Local port GID index (default: 1, the RoCE v2 link-local GID, on an
    /// Ethernet port, where RoCE needs a GID; 0 is the same GID as RoCE v1,
    /// as on Linux; none on InfiniBand).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<u8>,

    /// Largest message sent inline (latency: write 220, send 236, UD 188;
    /// bandwidth 0).
    #[arg(short = 'I', long = "inline_size", alias = "inline-size")]
    inline_size: Option<u32>,

    /// Outstanding RDMA READs / atomics per QP (read and atomic tests;
    /// default: the device's, at most 16).
    #[arg(short = 'o', long = "outs")]
    outs: Option<u32>,

    /// Atomic operation: FETCH_AND_ADD (default) or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", alias = "atomic-type")]
    atomic_type: Option<String>,

    /// Do not compute the peak bandwidth (report 0).
    #[arg(short = 'N', long = "noPeak", alias = "no-peak")]
    no_peak: bool,

    /// Speak perftest's own TCP exchange (its socket mode, not rdma_cm)
    /// instead of this tool's, so that the peer can be perftest
    /// (`ib_write_bw` ...) with the same test and options; one size (-s),
    /// no -a or -D. With --server, --client or --tcp-loopback.
    #[arg(long = "perftest")]
    perftest: bool,
}

/// The operation a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verb {
    /// SEND / receive.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomics.
    Atomic,
}

impl Verb {
    /// perftest's `testsStr`.
    fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }

    /// The work request, for messages.
    pub fn wr_name(self) -> &'static str {
        match self {
            Verb::Send => "a SEND",
            Verb::Write => "an RDMA WRITE",
            Verb::Read => "an RDMA READ",
            Verb::Atomic => "an atomic",
        }
    }
}

/// The atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AtomicKind {
    /// `FETCH_AND_ADD`.
    FetchAndAdd,
    /// `CMP_AND_SWAP`.
    CmpAndSwap,
}

impl AtomicKind {
    fn name(self) -> &'static str {
        match self {
            AtomicKind::FetchAndAdd => "FETCH_AND_ADD",
            AtomicKind::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

/// Connection types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Conn {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl Conn {
    fn name(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
        }
    }

    fn qp_type(self) -> QpType {
        match self {
            Conn::Rc => QpType::Rc,
            Conn::Uc => QpType::Uc,
            Conn::Ud => QpType::Ud,
        }
    }
}

/// What a test is: everything both sides must agree on. The client sends
/// it to the server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    /// The test's name (`write-bw`...).
    pub test: String,
    /// The operation.
    pub verb: Verb,
    /// Bandwidth (true) or latency.
    pub bw: bool,
    /// Connection type.
    pub conn: Conn,
    /// Message sizes (one, or -a's).
    pub sizes: Vec<u64>,
    /// Whether -a was given (the sizes are then limited by the MTU on UD).
    pub all: bool,
    /// Whether the size is the default (no -s): on UD it then becomes the
    /// MTU when larger, as perftest does.
    #[serde(default)]
    pub default_size: bool,
    /// Iterations per QP (when no duration).
    pub iters: u64,
    /// Duration in seconds.
    pub duration: Option<u64>,
    /// QPs.
    pub qps: u32,
    /// Outstanding work requests per QP.
    pub tx_depth: u32,
    /// Receives per QP (send tests).
    pub rx_depth: u32,
    /// Signal every this many.
    pub cq_mod: u32,
    /// Path MTU in bytes (0: the port's active MTU).
    pub mtu: u32,
    /// Inline bytes asked for.
    pub inline: u32,
    /// Outstanding READs / atomics (0: the device's, at most 16).
    pub outs: u32,
    /// The atomic operation.
    pub atomic: AtomicKind,
    /// Report in Gb/sec.
    pub gbits: bool,
    /// No peak.
    pub no_peak: bool,
}

impl Spec {
    fn from_args(a: &PerfArgs) -> Result<Self> {
        let (verb, bw) = match a.test.to_ascii_lowercase().as_str() {
            "write-bw" => (Verb::Write, true),
            "write-lat" => (Verb::Write, false),
            "read-bw" => (Verb::Read, true),
            "read-lat" => (Verb::Read, false),
            "send-bw" => (Verb::Send, true),
            "send-lat" => (Verb::Send, false),
            "atomic-bw" => (Verb::Atomic, true),
            "atomic-lat" => (Verb::Atomic, false),
            other => {
                return Err(ToolError::Usage(format!(
                    "unknown perf test '{other}' (one of write-bw, write-lat, read-bw, read-lat, send-bw, send-lat, atomic-bw, atomic-lat)"
                )));
            }
        };
        let test = a.test.to_ascii_lowercase();
        let conn = match a
            .connection
            .as_deref()
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("RC") => Conn::Rc,
            Some("UC") => Conn::Uc,
            Some("UD") => Conn::Ud,
            Some(other) => {
                return Err(ToolError::Usage(format!(
                    "-c {other}: the connection type is RC, UC or UD"
                )));
            }
        };
        match (verb, conn) {
            (Verb::Write, Conn::Ud) => {
                return Err(ToolError::Usage(
                    "-c UD: RDMA WRITE needs a connected QP (RC or UC); UD is for send tests"
                        .into(),
                ));
            }
            (Verb::Read | Verb::Atomic, Conn::Uc | Conn::Ud) => {
                return Err(ToolError::Usage(format!(
                    "-c {}: {} tests run on RC only",
                    conn.name(),
                    if verb == Verb::Read {
                        "RDMA READ"
                    } else {
                        "atomic"
                    }
                )));
            }
            _ => {}
        }
        let atomic = match a
            .atomic_type
            .as_deref()
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("FETCH_AND_ADD") => AtomicKind::FetchAndAdd,
            Some("CMP_AND_SWAP") => AtomicKind::CmpAndSwap,
            Some(other) => {
                return Err(ToolError::Usage(format!(
                    "-A {other}: the atomic type is FETCH_AND_ADD or CMP_AND_SWAP"
                )));
            }
        };
        if a.atomic_type.is_some() && verb != Verb::Atomic {
            return Err(ToolError::Usage(
                "-A applies to the atomic tests only".into(),
            ));
        }
        let sizes = if verb == Verb::Atomic {
            if a.all {
                return Err(ToolError::Usage(
                    "-a: atomic operations have one size, 8 bytes".into(),
                ));
            }
            match a.size {
                None | Some(8) => vec![8],
                Some(s) => {
                    return Err(ToolError::Usage(format!(
                        "-s {s}: atomic operations are 8 bytes"
                    )));
                }
            }
        } else if a.all {
            let max = a.max_size.unwrap_or(MAX_SIZE);
            if !(2..=MAX_SIZE).contains(&max) {
                return Err(ToolError::Usage(format!(
                    "--max-size {max}: between 2 and {MAX_SIZE} bytes"
                )));
            }
            (1..=23).map(|k| 1u64 << k).filter(|&s| s <= max).collect()
        } else {
            let s = a.size.unwrap_or(if bw { 65536 } else { 2 });
            if !(1..=MAX_SIZE).contains(&s) {
                return Err(ToolError::Usage(format!(
                    "-s {s}: the message size must be between 1 and {MAX_SIZE} bytes"
                )));
            }
            vec![s]
        };
        let iters = a.iters.unwrap_or(if verb == Verb::Write && bw {
            5000
        } else {
            1000
        });
        if !(MIN_ITER..=MAX_ITER).contains(&iters) {
            return Err(ToolError::Usage(format!(
                "-n {iters}: the iterations must be between {MIN_ITER} and {MAX_ITER}"
            )));
        }
        if a.duration == Some(0) {
            return Err(ToolError::Usage("-D 0: run for at least a second".into()));
        }
        if !(1..=MAX_QPS).contains(&a.qps) {
            return Err(ToolError::Usage(format!(
                "-q {}: between 1 and {MAX_QPS} QPs",
                a.qps
            )));
        }
        if !bw && a.qps != 1 {
            return Err(ToolError::Usage(format!(
                "-q {}: latency tests run on one QP",
                a.qps
            )));
        }
        let tx_depth = a.tx_depth.unwrap_or(if bw { 128 } else { 1 });
        if !(1..=15000).contains(&tx_depth) {
            return Err(ToolError::Usage(format!(
                "-t {tx_depth}: the TX depth must be between 1 and 15000"
            )));
        }
        // perftest: no more outstanding than there are iterations.
        let tx_depth = if a.duration.is_none() {
            tx_depth.min(iters as u32)
        } else {
            tx_depth
        };
        let rx_depth = a.rx_depth.unwrap_or(512);
        if !(1..=16384).contains(&rx_depth) {
            return Err(ToolError::Usage(format!(
                "-r {rx_depth}: the RX depth must be between 1 and 16384"
            )));
        }
        if a.rx_depth.is_some() && verb != Verb::Send {
            return Err(ToolError::Usage("-r applies to the send tests only".into()));
        }
        let cq_mod = a.cq_mod.unwrap_or(100);
        if !(1..=1024).contains(&cq_mod) {
            return Err(ToolError::Usage(format!(
                "-Q {cq_mod}: the CQ moderation must be between 1 and 1024"
            )));
        }
        let cq_mod = if bw { cq_mod.min(tx_depth) } else { 1 };
        let mtu = match a.mtu {
            None => 0,
            Some(m @ (256 | 512 | 1024 | 2048 | 4096)) => m,
            Some(m) => {
                return Err(ToolError::Usage(format!(
                    "-m {m}: the MTU is one of 256, 512, 1024, 2048, 4096"
                )));
            }
        };
        let inline = match (verb, a.inline_size) {
            (Verb::Read | Verb::Atomic, Some(_)) => {
                return Err(ToolError::Usage(
                    "-I: RDMA READs and atomics carry no inline data".into(),
                ));
            }
            (_, Some(i)) if i > 912 => {
                return Err(ToolError::Usage(format!(
                    "-I {i}: at most 912 inline bytes"
                )));
            }
            (_, Some(i)) => i,
            (Verb::Write, None) if !bw => 220,
            (Verb::Send, None) if !bw && conn == Conn::Ud => 188,
            (Verb::Send, None) if !bw => 236,
            _ => 0,
        };
        match a.outs {
            Some(_) if !matches!(verb, Verb::Read | Verb::Atomic) => {
                return Err(ToolError::Usage(
                    "-o applies to the read and atomic tests only (outstanding READs / atomics)"
                        .into(),
                ));
            }
            Some(0) => {
                return Err(ToolError::Usage(format!(
                    "-o 0: at least 1 outstanding {} per QP",
                    if verb == Verb::Read { "READ" } else { "atomic" }
                )));
            }
            _ => {}
        }
        Ok(Spec {
            test,
            verb,
            bw,
            conn,
            sizes,
            all: a.all,
            default_size: a.size.is_none() && !a.all,
            iters,
            duration: a.duration,
            qps: a.qps,
            tx_depth,
            rx_depth: if a.duration.is_none() {
                rx_depth.min(iters as u32)
            } else {
                rx_depth
            },
            cq_mod,
            mtu,
            inline,
            outs: a.outs.unwrap_or(0),
            atomic,
            gbits: a.report_gbits,
            no_peak: a.no_peak || a.duration.is_some(),
        })
    }

    fn title(&self) -> String {
        let mut t = format!("{} ", self.verb.title());
        if self.verb == Verb::Atomic {
            t.push_str(self.atomic.name());
            t.push(' ');
        }
        t.push_str(if self.bw { "BW " } else { "Latency " });
        t.push_str("Test");
        t
    }

    fn access(&self) -> AccessFlags {
        AccessFlags::LOCAL_WRITE
            | match self.verb {
                Verb::Write => AccessFlags::REMOTE_WRITE,
                Verb::Read => AccessFlags::REMOTE_READ,
                Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
                Verb::Send => AccessFlags::NONE,
            }
    }

    /// Fits the spec to the port: the path MTU (the port's active one, or
    /// -m if not larger), and on UD the sizes to the MTU.
    fn fit(&mut self, port: &PortView) -> Result<IbMtu> {
        let mtu = match self.mtu {
            0 => port.active_mtu,
            m if m > port.active_mtu.bytes() => {
                return Err(ToolError::Usage(format!(
                    "-m {m}: above the port's active MTU ({})",
                    port.active_mtu.bytes()
                )));
            }
            m => IbMtu::fitting(m).unwrap_or(port.active_mtu),
        };
        self.mtu = mtu.bytes();
        // The size is settled from here on (a server takes it as given).
        let default_size = std::mem::take(&mut self.default_size);
        if self.conn == Conn::Ud {
            let m = u64::from(mtu.bytes());
            if self.all {
                if self.sizes.iter().any(|&s| s > m) {
                    eprintln!("hca: max msg size in UD is the MTU ({m} bytes): -a stops there");
                }
                self.sizes.retain(|&s| s <= m);
            } else if default_size && self.sizes.iter().any(|&s| s > m) {
                // perftest: with no -s, a UD test uses the MTU.
                eprintln!("hca: max msg size in UD is the MTU ({m} bytes): using it");
                self.sizes = vec![m];
            } else if let Some(&s) = self.sizes.iter().find(|&&s| s > m) {
                return Err(ToolError::Usage(format!(
                    "-s {s}: a UD message must fit in one packet, at most the MTU ({m} bytes)"
                )));
            }
        }
        Ok(mtu)
    }

    /// The outstanding READ / atomic depth on these devices.
    fn out_reads<P: Platform>(&self, hcas: &[&Hca<P>]) -> Result<u8> {
        if !matches!(self.verb, Verb::Read | Verb::Atomic) {
            return Ok(1);
        }
        let mut dev = MAX_OUT_READS;
        for h in hcas {
            let a = hca_driver::verbs::DeviceAttr::from_info(h.info());
            dev = dev.min(a.max_qp_init_rd_atom).min(a.max_qp_rd_atom);
            if self.verb == Verb::Atomic && !a.atomic_ops {
                return Err(ToolError::Usage(format!(
                    "{} executes no 8-byte atomics",
                    h.platform().describe()
                )));
            }
        }
        let o = if self.outs == 0 { dev } else { self.outs };
        if o > dev {
            return Err(ToolError::Usage(format!(
                "-o {o}: the device allows {dev} outstanding READs / atomics per QP"
            )));
        }
        Ok(o.max(1) as u8)
    }

    fn layout(&self) -> Layout {
        let max = self.sizes.iter().copied().max().unwrap_or(8) as usize;
        Layout {
            slot: (max + GRH).next_multiple_of(64),
        }
    }

    fn side_spec(&self) -> SideSpec {
        let send = self.verb == Verb::Send;
        let qps = self.qps as usize;
        let rx = if send { self.rx_depth } else { 0 };
        SideSpec {
            qp_type: self.conn.qp_type(),
            qps,
            cap: QpCap {
                max_send_wr: self.tx_depth,
                max_recv_wr: rx,
                max_send_sge: 1,
                max_recv_sge: if send { 1 } else { 0 },
                max_inline_data: self.inline,
            },
            cqe: (self.qps * (self.tx_depth + rx) + 16).min(1 << 20),
            buf_len: 2 * qps * self.layout().slot,
            access: self.access(),
        }
    }

    fn conn_params(&self, mtu: IbMtu, out_reads: u8) -> ConnParams {
        // perftest's values (timeout 14, 7 retries, RNR retry 7).
        ConnParams {
            mtu,
            rd_atomic: out_reads,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 64,
            sl: 0,
        }
    }

    /// 2 for WRITE and SEND (a round trip is two messages), else 1.
    fn rtt_factor(&self) -> f64 {
        match self.verb {
            Verb::Read | Verb::Atomic => 1.0,
            _ => 2.0,
        }
    }

    /// The units of the results: bandwidth's, or microseconds for latency.
    fn units(&self) -> &'static str {
        match (self.bw, self.gbits) {
            (false, _) => "usec",
            (true, true) => "Gb/sec",
            (true, false) => "MiB/sec",
        }
    }
}

/// What a perf run reports (text: perftest's layout; `--json`: this).
#[derive(Debug, Serialize)]
pub struct PerfReport {
    /// The test (`write-bw`...).
    pub test: String,
    /// perftest's title (`RDMA_Write BW Test`).
    pub title: String,
    /// `loopback`, `server`, `client`.
    pub role: &'static str,
    /// The device (`emu`, or a PCI address).
    pub device: String,
    /// How the sides reach each other.
    pub link: String,
    /// RC, UC, UD.
    pub connection: &'static str,
    /// QPs.
    pub qps: u32,
    /// Outstanding work requests per QP.
    pub tx_depth: u32,
    /// Receives per QP (send tests).
    pub rx_depth: Option<u32>,
    /// CQ moderation (bandwidth tests).
    pub cq_moderation: Option<u32>,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// `Ethernet` or `IB`.
    pub link_type: &'static str,
    /// Local GID index, when a GID is used.
    pub gid_index: Option<u8>,
    /// Inline bytes (write and send tests).
    pub max_inline: Option<u32>,
    /// Outstanding READs / atomics (read and atomic tests).
    pub outstanding_reads: Option<u8>,
    /// Atomic tests: the byte order of the 8-byte operands the device
    /// applies (`host` or `big-endian`).
    pub atomic_byte_order: Option<&'static str>,
    /// This side's QPs.
    pub local: Vec<Endpoint>,
    /// The peer's QPs.
    pub remote: Vec<Endpoint>,
    /// Units of the results: `MiB/sec` or `Gb/sec` (bandwidth tests),
    /// `usec` (latency tests).
    pub units: &'static str,
    /// One row per message size.
    pub results: Vec<Row>,
    #[serde(skip)]
    gbits: bool,
    #[serde(skip)]
    rdma: bool,
    #[serde(skip)]
    with_gid: bool,
    #[serde(skip)]
    bw: bool,
    #[serde(skip)]
    duration: bool,
}

impl PerfReport {
    fn new(
        spec: &Spec,
        role: &'static str,
        device: &str,
        link: String,
        port: &PortView,
        out_reads: u8,
        inline: u32,
    ) -> Self {
        let send = spec.verb == Verb::Send;
        let rw = matches!(spec.verb, Verb::Read | Verb::Atomic);
        Self {
            test: spec.test.clone(),
            title: spec.title(),
            role,
            device: device.to_string(),
            link,
            connection: spec.conn.name(),
            qps: spec.qps,
            tx_depth: spec.tx_depth,
            rx_depth: send.then_some(spec.rx_depth),
            cq_moderation: spec.bw.then_some(spec.cq_mod),
            mtu: spec.mtu,
            link_type: port.link_name(),
            gid_index: port.gid_index,
            max_inline: (!rw).then_some(inline),
            outstanding_reads: rw.then_some(out_reads),
            atomic_byte_order: None,
            local: Vec::new(),
            remote: Vec::new(),
            units: spec.units(),
            results: Vec::new(),
            gbits: spec.gbits,
            rdma: spec.verb != Verb::Send,
            with_gid: port.gid_index.is_some(),
            bw: spec.bw,
            duration: spec.duration.is_some(),
        }
    }

    /// Atomic tests: notes the byte order `hca` applies to atomics.
    fn atomics<P: Platform>(&mut self, spec: &Spec, hca: &Hca<P>) {
        if spec.verb == Verb::Atomic {
            let d = hca_driver::verbs::DeviceAttr::from_info(hca.info());
            self.atomic_byte_order = d
                .atomic_ops
                .then(|| crate::cmd::info::byte_order_name(d.atomic_byte_order));
        }
    }

    /// perftest's parameter header, address lines and table header.
    fn write_head(&self, out: &mut dyn Write) -> Result<()> {
        use report::RESULT_LINE;
        writeln!(out, "{RESULT_LINE}")?;
        writeln!(out, "                    {}", self.title)?;
        writeln!(
            out,
            " Dual-port       : OFF\t\tDevice         : {}",
            self.device
        )?;
        writeln!(
            out,
            " Number of qps   : {}\t\tTransport type : IB",
            self.qps
        )?;
        writeln!(
            out,
            " Connection type : {}\t\tUsing SRQ      : OFF",
            self.connection
        )?;
        if self.role != "server" {
            writeln!(out, " TX depth        : {}", self.tx_depth)?;
        }
        if let (Some(r), true) = (self.rx_depth, self.role != "client") {
            writeln!(out, " RX depth        : {r}")?;
        }
        if let Some(m) = self.cq_moderation {
            writeln!(out, " CQ Moderation   : {m}")?;
        }
        writeln!(out, " Mtu             : {}[B]", self.mtu)?;
        writeln!(out, " Link type       : {}", self.link_type)?;
        if let Some(g) = self.gid_index {
            writeln!(out, " GID index       : {g}")?;
        }
        match (self.max_inline, self.outstanding_reads) {
            (Some(i), _) => writeln!(out, " Max inline data : {i}[B]")?,
            (None, Some(o)) => writeln!(out, " Outstand reads  : {o}")?,
            _ => {}
        }
        if let Some(o) = self.atomic_byte_order {
            writeln!(out, " Atomic operands : 8 bytes, {o} byte order")?;
        }
        writeln!(out, " rdma_cm QPs\t : OFF")?;
        writeln!(out, " Data ex. method : {}", self.link)?;
        writeln!(out, "{RESULT_LINE}")?;
        for e in &self.local {
            writeln!(
                out,
                "{}",
                report::address_lines("local", e, self.rdma, self.with_gid)
            )?;
        }
        for e in &self.remote {
            writeln!(
                out,
                "{}",
                report::address_lines("remote", e, self.rdma, self.with_gid)
            )?;
        }
        writeln!(out, "{RESULT_LINE}")?;
        let h = match (self.bw, self.gbits, self.duration) {
            (true, false, _) => report::BW_HEADER,
            (true, true, _) => report::BW_HEADER_G,
            (false, _, false) => report::LAT_HEADER,
            (false, _, true) => report::LAT_DUR_HEADER,
        };
        writeln!(out, "{h}")?;
        Ok(())
    }

    fn write_tail(&self, out: &mut dyn Write) -> Result<()> {
        writeln!(out, "{}", report::RESULT_LINE)?;
        Ok(())
    }
}

/// Prints as a run goes: the head, each row, the tail (text); the whole
/// report at the end (JSON).
struct Printer<'o> {
    out: &'o mut dyn Write,
    json: bool,
}

impl Printer<'_> {
    fn head(&mut self, r: &PerfReport) -> Result<()> {
        if !self.json {
            r.write_head(self.out)?;
            self.out.flush()?;
        }
        Ok(())
    }

    fn row(&mut self, r: &mut PerfReport, row: Row) -> Result<()> {
        if !self.json {
            writeln!(self.out, "{}", row.line(r.gbits))?;
            self.out.flush()?;
        }
        r.results.push(row);
        Ok(())
    }

    fn tail(&mut self, r: &PerfReport) -> Result<()> {
        if self.json {
            json(self.out, r)
        } else {
            r.write_tail(self.out)
        }
    }
}

// ---- the control protocol (client <-> server) -----------------------------

/// Client to server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ClientMsg {
    /// The test and the client's QPs.
    Hello {
        version: u32,
        spec: Box<Spec>,
        endpoints: Vec<Endpoint>,
    },
    /// Start the next size.
    Start { size: u64 },
    /// The client is done with the size: what it sent on each QP.
    Done { size: u64, sent: Vec<u64> },
    /// The client's result row for the size.
    Result { row: Row },
    /// The end.
    Bye,
}

/// Server to client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ServerMsg {
    /// The server's QPs (connected to the client's) and the path MTU.
    Accept {
        endpoints: Vec<Endpoint>,
        mtu: u32,
        out_reads: u8,
    },
    /// Ready for the size.
    Ready { size: u64 },
    /// The server saw the size through (SEND: what it received).
    Finished { size: u64, received: u64 },
}

// ---- one side's part, for one size -----------------------------------------

/// A side's engine for one size.
enum Engine {
    BwSend(BwSender),
    BwRecv(BwReceiver),
    Write(WriteLat),
    Send(SendLat),
    Req(ReqLat),
    /// The passive side: done once the client is.
    Idle {
        done: bool,
    },
}

impl Engine {
    fn new<P: Platform>(
        spec: &Spec,
        client: bool,
        size: u64,
        s: &mut Side<'_, P>,
        lay: Layout,
        inline: bool,
        start: Instant,
    ) -> Result<Self> {
        let size_us = size as usize;
        let iters = spec.duration.is_none().then_some(spec.iters);
        let deadline = spec.duration.map(|d| start + Duration::from_secs(d));
        let until = match iters {
            Some(n) => Until::Iters(n),
            None => Until::Deadline(if client { deadline } else { None }),
        };
        let ud = spec.conn == Conn::Ud;
        Ok(match (spec.bw, spec.verb, client) {
            (true, _, true) => Engine::BwSend(BwSender::new(
                spec.verb,
                spec.atomic,
                size_us,
                spec.qps as usize,
                iters,
                deadline,
                spec.tx_depth,
                spec.cq_mod,
                inline,
            )),
            (true, Verb::Send, false) => Engine::BwRecv(BwReceiver::new(
                size_us,
                ud,
                spec.qps as usize,
                spec.rx_depth,
                iters,
            )),
            (false, Verb::Write, _) => {
                let w = WriteLat::new(client, size_us, until, spec.tx_depth, inline);
                w.prepare(s, lay)?;
                Engine::Write(w)
            }
            (false, Verb::Send, _) => {
                let mut x = SendLat::new(
                    client,
                    size_us,
                    ud,
                    until,
                    spec.tx_depth,
                    spec.rx_depth,
                    inline,
                );
                x.prepare(s, lay)?;
                Engine::Send(x)
            }
            (false, _, true) => Engine::Req(ReqLat::new(spec.verb, spec.atomic, size_us, until)),
            _ => Engine::Idle { done: false },
        })
    }

    fn step<P: Platform>(&mut self, s: &mut Side<'_, P>, peer: &Peer<'_, '_, P>) -> Result<bool> {
        match self {
            Engine::BwSend(e) => e.step(s, peer),
            Engine::BwRecv(e) => e.step(s, peer),
            Engine::Write(e) => e.step(s, peer),
            Engine::Send(e) => e.step(s, peer),
            Engine::Req(e) => e.step(s, peer),
            Engine::Idle { .. } => Ok(false),
        }
    }

    fn done(&self) -> bool {
        match self {
            Engine::BwSend(e) => e.done(),
            Engine::BwRecv(e) => e.done(),
            Engine::Write(e) => e.done(),
            Engine::Send(e) => e.done(),
            Engine::Req(e) => e.done(),
            Engine::Idle { done } => *done,
        }
    }

    /// What the client sent on each QP (to tell the server).
    fn sent(&self, qps: usize) -> Vec<u64> {
        match self {
            Engine::BwSend(e) => e.per_qp_posted(),
            Engine::Write(e) => vec![e.pp.iterations()],
            Engine::Send(e) => vec![e.pp.iterations()],
            Engine::Req(e) => vec![e.pp.iterations()],
            _ => vec![0; qps],
        }
    }

    /// Moves the end of a run with a duration (the client's).
    fn restart_deadline(&mut self, d: Instant) {
        match self {
            Engine::BwSend(e) => e.set_deadline(d),
            Engine::Write(e) => e.pp.set_deadline(d),
            Engine::Send(e) => e.pp.set_deadline(d),
            Engine::Req(e) => e.pp.set_deadline(d),
            _ => {}
        }
    }

    /// The server learns what the client sent.
    fn peer_sent(&mut self, sent: &[u64]) {
        match self {
            Engine::BwRecv(e) => e.set_target(sent),
            Engine::Write(e) => e.pp.set_target(sent.first().copied().unwrap_or(0)),
            Engine::Send(e) => e.pp.set_target(sent.first().copied().unwrap_or(0)),
            Engine::Idle { done } => *done = true,
            _ => {}
        }
    }

    fn received(&self) -> u64 {
        match self {
            Engine::BwRecv(e) => e.received(),
            _ => 0,
        }
    }

    fn progress(&self) -> (u64, Option<u64>) {
        match self {
            Engine::BwSend(e) => (e.completed(), None),
            Engine::BwRecv(e) => (e.received(), None),
            Engine::Write(e) => (e.pp.iterations(), None),
            Engine::Send(e) => (e.pp.iterations(), None),
            Engine::Req(e) => (e.pp.iterations(), None),
            Engine::Idle { .. } => (0, None),
        }
    }

    /// The client's result row.
    fn row(&self, spec: &Spec, size: u64) -> Row {
        let lat = |pp: &PingPong| {
            let (posted, start, end) = pp.samples();
            let it = pp.iterations();
            Row::Lat(match spec.duration {
                Some(_) => report::lat_dur_row(
                    size,
                    it,
                    match (start, end) {
                        (Some(a), Some(b)) => b.saturating_duration_since(a),
                        _ => Duration::ZERO,
                    },
                    spec.rtt_factor(),
                ),
                None => report::lat_row(size, it, posted, spec.rtt_factor()),
            })
        };
        match self {
            Engine::BwSend(e) => {
                Row::Bw(report::bw_row(size, &e.samples, spec.gbits, spec.no_peak))
            }
            Engine::BwRecv(e) => Row::Bw(report::bw_row(size, &e.samples, spec.gbits, true)),
            Engine::Write(e) => lat(&e.pp),
            Engine::Send(e) => lat(&e.pp),
            Engine::Req(e) => lat(&e.pp),
            Engine::Idle { .. } => Row::Bw(BwRow {
                bytes: size,
                iterations: 0,
                bw_peak: 0.0,
                bw_average: 0.0,
                msg_rate_mpps: 0.0,
            }),
        }
    }
}

fn progress_text(spec: &Spec, size: u64, e: &Engine) -> String {
    let (n, _) = e.progress();
    match spec.duration {
        Some(d) => format!("{} {size} B: {n} done ({d} s)", spec.test),
        None => format!(
            "{} {size} B: {n} of {}",
            spec.test,
            spec.iters * u64::from(if spec.bw { spec.qps } else { 1 })
        ),
    }
}

// ---- setting a side up -----------------------------------------------------

/// Moves the QPs to INIT and describes them.
fn local_endpoints<P: Platform>(
    s: &mut Side<'_, P>,
    port: &PortView,
    spec: &Spec,
    lay: Layout,
) -> Result<Vec<Endpoint>> {
    let access = spec.access();
    let mut eps = Vec::with_capacity(s.qps.len());
    for i in 0..s.qps.len() {
        to_init(&mut s.qps[i], port.port, access)
            .map_err(|e| ToolError::driver(format!("{}: modifying a QP to INIT", s.name), e))?;
        eps.push(Endpoint {
            lid: port.lid,
            qpn: s.qps[i].number().0,
            psn: random_psn(),
            gid: port.gid.0,
            rkey: s.mr.rkey().0,
            addr: s.mr.addr() + lay.target(i) as u64,
        });
    }
    Ok(eps)
}

/// Connects the QPs to the peer's and makes the UD address handles.
fn connect_all<'a, P: Platform>(
    s: &mut Side<'a, P>,
    port: &PortView,
    me: &[Endpoint],
    remote: &[Endpoint],
    p: &ConnParams,
) -> Result<Vec<Ah<'a, P>>> {
    if remote.len() != s.qps.len() {
        return Err(ToolError::Usage(format!(
            "{}: the peer has {} QPs, this side {}",
            s.name,
            remote.len(),
            s.qps.len()
        )));
    }
    let mut ahs = Vec::new();
    for i in 0..s.qps.len() {
        to_rts(&mut s.qps[i], port, &remote[i], me[i].psn, p)
            .map_err(|e| ToolError::driver(format!("{}: connecting QP {i}", s.name), e))?;
        if s.qps[i].qp_type() == QpType::Ud {
            let ah =
                s.pd.create_ah(&path_to(port, &remote[i], p.hop_limit))
                    .map_err(|e| {
                        ToolError::driver(format!("{}: creating an address handle", s.name), e)
                    })?;
            ahs.push(ah);
        }
    }
    Ok(ahs)
}

/// Whether sends on these QPs go inline at this size.
fn inline_for<P: Platform>(s: &Side<'_, P>, spec: &Spec, size: u64) -> bool {
    matches!(spec.verb, Verb::Write | Verb::Send)
        && spec.inline > 0
        && size <= u64::from(spec.inline)
        && s.qps
            .iter()
            .all(|q| u64::from(q.cap().max_inline_data) >= size)
}

fn probe_port<P: Platform>(
    hca: &Hca<P>,
    who: &str,
    port: u8,
    gid: Option<u8>,
    hint: &str,
) -> Result<PortView> {
    let ctx = hca
        .open_context()
        .map_err(|e| ToolError::driver(format!("{who}: opening a verbs context"), e))?;
    port_view(&ctx, who, port, gid, hint)
}

/// The options that are not part of the spec.
#[derive(Clone, Debug)]
struct Local {
    ib_port: u8,
    gid_index: Option<u8>,
    /// Speak perftest's exchange (`--perftest`).
    perftest: bool,
}

// ---- both sides in this process ----------------------------------------------

struct Loopback<'o> {
    spec: Spec,
    local: Local,
    printer: Printer<'o>,
}

impl PairTask for Loopback<'_> {
    type Output = ();

    fn run<P: Platform>(mut self, a: &Hca<P>, b: &Hca<P>, dev: &PairDesc) -> Result<()> {
        let l = &self.local;
        let pa = probe_port(a, "client", l.ib_port, l.gid_index, "")?;
        let port_b = if dev.two_hcas || a.caps().num_ports() < 2 {
            l.ib_port
        } else if l.ib_port == 1 {
            2
        } else {
            1
        };
        let pb = probe_port(b, "server", port_b, l.gid_index, "")?;
        let mut spec = self.spec.clone();
        let mtu = spec.fit(&pa)?;
        if pb.active_mtu.bytes() < mtu.bytes() {
            spec.mtu = pb.active_mtu.bytes();
        }
        let mtu = IbMtu::fitting(spec.mtu).unwrap_or(mtu);
        let out_reads = spec.out_reads(&[a, b])?;
        let conn = spec.conn_params(mtu, out_reads);
        let lay = spec.layout();
        let sspec = spec.side_spec();
        let printer = &mut self.printer;
        with_side(a, "client", &sspec, |sa| {
            with_side(b, "server", &sspec, |sb| {
                let ea = local_endpoints(sa, &pa, &spec, lay)?;
                let eb = local_endpoints(sb, &pb, &spec, lay)?;
                let aha = connect_all(sa, &pa, &ea, &eb, &conn)?;
                let ahb = connect_all(sb, &pb, &eb, &ea, &conn)?;
                let inline = sa.qps[0].cap().max_inline_data.min(spec.inline);
                let mut rep = PerfReport::new(
                    &spec,
                    "loopback",
                    dev.a.selection.hca_id(),
                    format!("loopback in one process ({})", dev.link),
                    &pa,
                    out_reads,
                    inline,
                );
                rep.local = ea.clone();
                rep.remote = eb.clone();
                rep.atomics(&spec, a);
                printer.head(&rep)?;
                let peer_a = Peer {
                    remote: &eb,
                    ahs: &aha,
                    layout: lay,
                };
                let peer_b = Peer {
                    remote: &ea,
                    ahs: &ahb,
                    layout: lay,
                };
                for &size in &spec.sizes {
                    let row = loopback_size(&spec, size, sa, sb, &peer_a, &peer_b, &[a, b])?;
                    printer.row(&mut rep, row)?;
                }
                printer.tail(&rep)
            })
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn loopback_size<P: Platform>(
    spec: &Spec,
    size: u64,
    sa: &mut Side<'_, P>,
    sb: &mut Side<'_, P>,
    peer_a: &Peer<'_, '_, P>,
    peer_b: &Peer<'_, '_, P>,
    hcas: &[&Hca<P>],
) -> Result<Row> {
    let inline = inline_for(sa, spec, size);
    let now = Instant::now();
    let mut server = Engine::new(spec, false, size, sb, peer_b.layout, inline, now)?;
    let mut client = Engine::new(spec, true, size, sa, peer_a.layout, inline, now)?;
    let progress = Progress::start(&spec.test);
    let status = progress.status();
    let mut last = Instant::now();
    let mut pacer = Pacer::new(hcas);
    let mut told = false;
    while !(client.done() && server.done()) {
        // SEND bandwidth: never more in flight than the server has
        // receives for (UC and UD would drop the rest).
        if let (Engine::BwSend(c), Engine::BwRecv(r)) = (&mut client, &server) {
            c.set_credit(r.posted());
        }
        let gb = server.step(sb, peer_b)?;
        let ga = client.step(sa, peer_a)?;
        if client.done() && !told {
            told = true;
            let sent = client.sent(spec.qps as usize);
            server.peer_sent(&sent);
        }
        if ga || gb {
            pacer.progress()?;
            if last.elapsed() >= Duration::from_millis(100) {
                last = Instant::now();
                progress::set(&status, progress_text(spec, size, &client));
            }
        } else {
            pacer.idle(|| {
                format!(
                    "{} {size} B: client at {}, server at {}",
                    spec.test,
                    client.progress().0,
                    server.progress().0
                )
            })?;
        }
    }
    drop(progress);
    Ok(client.row(spec, size))
}

// ---- two processes -----------------------------------------------------------

struct Split<'o> {
    /// This process's spec (the server runs the client's).
    spec: Spec,
    local: Local,
    mode: Mode,
    listener: Option<std::net::TcpListener>,
    printer: Printer<'o>,
}

impl HcaTask for Split<'_> {
    type Output = ();

    fn run<P: Platform>(self, hca: &Hca<P>, dev: &DeviceDesc) -> Result<()> {
        let Split {
            spec,
            local,
            mode,
            listener,
            mut printer,
        } = self;
        let hint = if dev.selection == Selection::Emulator {
            peer::emulator_down_hint(&mode)
        } else {
            ""
        };
        match &mode {
            Mode::Client { host, port } => {
                // An unreachable server is the first thing to know.
                let stream = peer::connect(host, *port)?;
                if local.perftest {
                    let port = probe_port(hca, "client", local.ib_port, local.gid_index, hint)?;
                    return perftest::run_side(&spec, true, stream, hca, dev, &port, &mut printer);
                }
                let mut ctl = Control::new(stream, "server")?;
                let r = run_client(spec, &local, hca, dev, hint, &mut ctl, &mut printer);
                if let Err(e) = &r {
                    ctl.send_error(e);
                }
                r
            }
            _ => {
                let port = probe_port(hca, "server", local.ib_port, local.gid_index, hint)?;
                let listener = listener
                    .ok_or_else(|| ToolError::Usage("the server has no TCP listener".into()))?;
                let stream = peer::accept(&listener)?;
                drop(listener);
                if local.perftest {
                    return perftest::run_side(&spec, false, stream, hca, dev, &port, &mut printer);
                }
                let mut ctl = Control::new(stream, "client")?;
                let r = run_server(&spec, hca, dev, &port, &mut ctl, &mut printer);
                if let Err(e) = &r {
                    ctl.send_error(e);
                }
                r
            }
        }
    }
}

/// The smaller of two MTUs.
fn min_mtu(a: IbMtu, b: u32) -> IbMtu {
    if b < a.bytes() {
        IbMtu::fitting(b).unwrap_or(a)
    } else {
        a
    }
}

fn run_client<P: Platform>(
    mut spec: Spec,
    l: &Local,
    hca: &Hca<P>,
    dev: &DeviceDesc,
    hint: &str,
    ctl: &mut Control,
    printer: &mut Printer<'_>,
) -> Result<()> {
    let port = probe_port(hca, "client", l.ib_port, l.gid_index, hint)?;
    let mtu = spec.fit(&port)?;
    let my_reads = spec.out_reads(&[hca])?;
    let lay = spec.layout();
    let sspec = spec.side_spec();
    with_side(hca, "client", &sspec, |s| {
        let me = local_endpoints(s, &port, &spec, lay)?;
        ctl.send(&ClientMsg::Hello {
            version: PROTOCOL,
            spec: Box::new(spec.clone()),
            endpoints: me.clone(),
        })?;
        let (remote, agreed, server_reads) = match ctl.recv::<ServerMsg>(Some(EXCHANGE_TIMEOUT))? {
            ServerMsg::Accept {
                endpoints,
                mtu,
                out_reads,
            } => (endpoints, mtu, out_reads),
            other => {
                return Err(ToolError::Usage(format!(
                    "the server answered {other:?} instead of accepting the test"
                )));
            }
        };
        let mtu = min_mtu(mtu, agreed);
        spec.mtu = mtu.bytes();
        let out_reads = my_reads.min(server_reads.max(1));
        let conn = spec.conn_params(mtu, out_reads);
        let ahs = connect_all(s, &port, &me, &remote, &conn)?;
        let inline = s.qps[0].cap().max_inline_data.min(spec.inline);
        let mut rep = PerfReport::new(
            &spec,
            "client",
            dev.selection.hca_id(),
            "Ethernet".to_string(),
            &port,
            out_reads,
            inline,
        );
        rep.local = me.clone();
        rep.remote = remote.clone();
        rep.atomics(&spec, hca);
        printer.head(&rep)?;
        let peer = Peer {
            remote: &remote,
            ahs: &ahs,
            layout: lay,
        };
        for &size in &spec.sizes {
            let inline = inline_for(s, &spec, size);
            // Receives and cleared buffers before the server may send.
            let mut e = Engine::new(&spec, true, size, s, lay, inline, Instant::now())?;
            ctl.send(&ClientMsg::Start { size })?;
            match ctl.recv::<ServerMsg>(Some(EXCHANGE_TIMEOUT))? {
                ServerMsg::Ready { size: z } if z == size => {}
                other => {
                    return Err(ToolError::Usage(format!(
                        "the server answered {other:?} instead of being ready for {size} bytes"
                    )));
                }
            }
            if let Some(d) = spec.duration {
                // The clock starts now.
                e.restart_deadline(Instant::now() + Duration::from_secs(d));
            }
            drive(&spec, size, s, &peer, &mut e, hca, ctl, true)?;
            ctl.send(&ClientMsg::Done {
                size,
                sent: e.sent(spec.qps as usize),
            })?;
            match ctl.recv::<ServerMsg>(None)? {
                ServerMsg::Finished { size: z, .. } if z == size => {}
                other => {
                    return Err(ToolError::Usage(format!(
                        "the server answered {other:?} instead of finishing {size} bytes"
                    )));
                }
            }
            let row = e.row(&spec, size);
            ctl.send(&ClientMsg::Result { row: row.clone() })?;
            printer.row(&mut rep, row)?;
        }
        ctl.send(&ClientMsg::Bye)?;
        printer.tail(&rep)
    })
}

fn run_server<P: Platform>(
    own: &Spec,
    hca: &Hca<P>,
    dev: &DeviceDesc,
    port: &PortView,
    ctl: &mut Control,
    printer: &mut Printer<'_>,
) -> Result<()> {
    let (mut spec, remote) = match ctl.recv::<ClientMsg>(Some(EXCHANGE_TIMEOUT))? {
        ClientMsg::Hello {
            version,
            spec,
            endpoints,
        } => {
            if version != PROTOCOL {
                return Err(ToolError::Usage(format!(
                    "the client speaks version {version} of the control protocol, this server {PROTOCOL}"
                )));
            }
            (*spec, endpoints)
        }
        other => {
            return Err(ToolError::Usage(format!(
                "the client sent {other:?} instead of its test"
            )));
        }
    };
    if spec.test != own.test || spec.conn != own.conn {
        return Err(ToolError::Usage(format!(
            "the client runs {} ({}), this server {} ({})",
            spec.test,
            spec.conn.name(),
            own.test,
            own.conn.name()
        )));
    }
    // The path MTU: the smaller of the client's and this port's.
    let client_mtu = spec.mtu;
    spec.mtu = 0;
    let mtu = spec.fit(port)?;
    let mtu = min_mtu(mtu, client_mtu);
    spec.mtu = mtu.bytes();
    let out_reads = spec.out_reads(&[hca])?;
    let conn = spec.conn_params(mtu, out_reads);
    let lay = spec.layout();
    let sspec = spec.side_spec();
    with_side(hca, "server", &sspec, |s| {
        let me = local_endpoints(s, port, &spec, lay)?;
        let ahs = connect_all(s, port, &me, &remote, &conn)?;
        ctl.send(&ServerMsg::Accept {
            endpoints: me.clone(),
            mtu: mtu.bytes(),
            out_reads,
        })?;
        let inline = s.qps[0].cap().max_inline_data.min(spec.inline);
        let mut rep = PerfReport::new(
            &spec,
            "server",
            dev.selection.hca_id(),
            "Ethernet".to_string(),
            port,
            out_reads,
            inline,
        );
        rep.local = me.clone();
        rep.remote = remote.clone();
        rep.atomics(&spec, hca);
        printer.head(&rep)?;
        let peer = Peer {
            remote: &remote,
            ahs: &ahs,
            layout: lay,
        };
        loop {
            let size = match ctl.recv::<ClientMsg>(None)? {
                ClientMsg::Start { size } if spec.sizes.contains(&size) => size,
                ClientMsg::Bye => break,
                other => {
                    return Err(ToolError::Usage(format!(
                        "the client sent {other:?} instead of the next size"
                    )));
                }
            };
            let inline = inline_for(s, &spec, size);
            let mut e = Engine::new(&spec, false, size, s, lay, inline, Instant::now())?;
            ctl.send(&ServerMsg::Ready { size })?;
            if !drive(&spec, size, s, &peer, &mut e, hca, ctl, false)? {
                // Done before the client said so: take its word now.
                match ctl.recv::<ClientMsg>(Some(EXCHANGE_TIMEOUT))? {
                    ClientMsg::Done { size: z, .. } if z == size => {}
                    other => {
                        return Err(ToolError::Usage(format!(
                            "the client sent {other:?} instead of finishing {size} bytes"
                        )));
                    }
                }
            }
            ctl.send(&ServerMsg::Finished {
                size,
                received: e.received(),
            })?;
            let row = match ctl.recv::<ClientMsg>(Some(EXCHANGE_TIMEOUT))? {
                ClientMsg::Result { row } => row,
                other => {
                    return Err(ToolError::Usage(format!(
                        "the client sent {other:?} instead of its result"
                    )));
                }
            };
            // SEND bandwidth: what this side received; otherwise the
            // client's figures.
            let row = match &e {
                Engine::BwRecv(_) => e.row(&spec, size),
                _ => row,
            };
            printer.row(&mut rep, row)?;
        }
        printer.tail(&rep)
    })
}

/// How long a SEND bandwidth server of UC or UD waits for messages that
/// may have been dropped once the client is done.
const DROP_GRACE: Duration = Duration::from_millis(500);

/// Steps one side's engine until it is done. The client watches the
/// control channel for a failure of the server; the server for the
/// client's `done` (what it sent), which ends a passive side's part.
/// Returns whether the peer's `done` was taken.
#[allow(clippy::too_many_arguments)]
fn drive<P: Platform>(
    spec: &Spec,
    size: u64,
    s: &mut Side<'_, P>,
    peer: &Peer<'_, '_, P>,
    e: &mut Engine,
    hca: &Hca<P>,
    ctl: &mut Control,
    client: bool,
) -> Result<bool> {
    let progress = client.then(|| Progress::start(&spec.test));
    let mut last = Instant::now();
    let mut pacer = Pacer::new(&[hca]);
    let mut idle_steps = 0u32;
    let mut peer_done: Option<Instant> = None;
    while !e.done() {
        if matches!(e, Engine::Idle { .. }) {
            // Nothing to poll: wait for the client, servicing the HCA.
            match ctl.poll_recv::<ClientMsg>(Some(Duration::from_millis(50)))? {
                Some(ClientMsg::Done { size: z, sent }) if z == size => {
                    e.peer_sent(&sent);
                    peer_done = Some(Instant::now());
                }
                Some(other) => {
                    return Err(ToolError::Usage(format!(
                        "the client sent {other:?} during the test"
                    )));
                }
                None => {
                    hca.service()
                        .map_err(|e| ToolError::driver("servicing the HCA", e))?;
                }
            }
            continue;
        }
        if e.step(s, peer)? {
            idle_steps = 0;
            pacer.progress()?;
            if let Some(p) = &progress {
                if last.elapsed() >= Duration::from_millis(100) {
                    last = Instant::now();
                    progress::set(&p.status(), progress_text(spec, size, e));
                }
            }
            continue;
        }
        idle_steps += 1;
        if idle_steps % 256 == 1 {
            if client {
                // Only a failure report can come now.
                let _ = ctl.try_recv::<ServerMsg>()?;
            } else if peer_done.is_none() {
                match ctl.try_recv::<ClientMsg>()? {
                    Some(ClientMsg::Done { size: z, sent }) if z == size => {
                        e.peer_sent(&sent);
                        peer_done = Some(Instant::now());
                    }
                    Some(other) => {
                        return Err(ToolError::Usage(format!(
                            "the client sent {other:?} during the test"
                        )));
                    }
                    None => {}
                }
            }
        }
        if let (Some(t), Engine::BwRecv(_)) = (peer_done, &*e) {
            // UC and UD drop what finds no receive: take what came.
            if spec.conn != Conn::Rc && t.elapsed() > DROP_GRACE {
                break;
            }
        }
        pacer.idle(|| {
            format!(
                "{} {size} B: {} at {} (is the {} still running?)",
                spec.test,
                s.name,
                e.progress().0,
                if client { "server" } else { "client" }
            )
        })?;
    }
    Ok(peer_done.is_some())
}

/// Runs `hca perf`.
pub fn run(
    a: &PerfArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let spec = Spec::from_args(a)?;
    let local = Local {
        ib_port: a.conn.ib_port,
        gid_index: a.gid_index,
        perftest: a.perftest,
    };
    if a.conn.ib_port == 0 {
        return Err(ToolError::Usage("-i 0: ports are numbered from 1".into()));
    }
    let mode = a.conn.mode()?;
    if a.perftest && matches!(mode, Mode::Loopback) {
        return Err(ToolError::Usage(
            "--perftest is the exchange with a peer: give --server, --client or --tcp-loopback"
                .into(),
        ));
    }
    match mode {
        Mode::Loopback => run_pair(
            sel,
            open,
            Loopback {
                spec,
                local,
                printer: Printer { out, json: as_json },
            },
        ),
        Mode::Server { port } => {
            // Listen first: a port in use is known before any bring-up.
            let listener = peer::listen(port)?;
            run_hca(
                sel,
                open,
                Split {
                    spec,
                    local,
                    mode: Mode::Server { port },
                    listener: Some(listener),
                    printer: Printer { out, json: as_json },
                },
            )
        }
        Mode::Client { .. } => run_hca(
            sel,
            open,
            Split {
                spec,
                local,
                mode,
                listener: None,
                printer: Printer { out, json: as_json },
            },
        ),
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
                    with_emulated(&eb, None, open.wait_mode, |h, d| {
                        Split {
                            spec: server_spec,
                            local: server_local,
                            mode: Mode::Server { port },
                            listener: Some(listener),
                            printer: Printer {
                                out: so,
                                json: false,
                            },
                        }
                        .run(h, d)
                    })
                },
                |port| {
                    with_emulated(
                        &ea,
                        open.dump_commands.as_deref(),
                        open.wait_mode,
                        |h, d| {
                            Split {
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
                            }
                            .run(h, d)
                        },
                    )
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
