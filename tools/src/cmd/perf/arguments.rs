//! The arguments of `hca perf`: clap's structure, and their validation
//! into the [`Spec`] both sides run and the options that are this side's
//! alone ([`Local`]).

use clap::Args;

use super::spec::{AtomicKind, Conn, Spec, Verb};
use crate::error::{Result, ToolError};
use crate::peer::{ConnectionArgs, Mode};

/// perftest's largest message (`MAX_SIZE`, 2^23).
const MAX_SIZE: u64 = 8_388_608;
/// perftest's fewest iterations (`MIN_ITER`).
const MIN_ITER: u64 = 5;
/// perftest's most iterations (`MAX_ITER`).
const MAX_ITER: u64 = 100_000_000;
/// Most QPs (one CQ per side serves them all).
const MAX_QPS: u32 = hca_driver::verbs::MAX_CONTEXT_QPS as u32;

/// Arguments of `hca perf`.
#[derive(Debug, Args)]
pub struct PerfArgs {
    /// The test: write-bw, write-lat, read-bw, read-lat, send-bw,
    /// send-lat, atomic-bw, atomic-lat, or raw-bw (UDP/IPv4 frames on raw
    /// packet QPs, as perftest's raw_ethernet_bw; -s is the frame size,
    /// default 1024).
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

    /// raw-bw: pace the sending raw packet QP at this many Mb/s with the
    /// device's packet pacing (IBV_QP_RATE_LIMIT; perftest's
    /// --rate_limit_type=PP). ConnectX-5 and later (on the emulator:
    /// --emu-model cx5).
    #[arg(long = "rate-limit", value_name = "MBIT/S")]
    rate_limit: Option<f64>,

    /// Speak perftest's own TCP exchange (its socket mode, not rdma_cm)
    /// instead of this tool's, so that the peer can be perftest
    /// (`ib_write_bw` ...) with the same test and options; one size (-s),
    /// no -a or -D. With --server, --client or --tcp-loopback.
    #[arg(long = "perftest")]
    perftest: bool,
}

impl PerfArgs {
    /// Validates the arguments: the spec, this side's own options and
    /// where the sides run.
    pub(super) fn validate(&self) -> Result<(Spec, Local, Mode)> {
        if self.rate_limit.is_some() {
            return Err(ToolError::Usage(format!(
                "--rate-limit does not apply to {}: it paces raw-bw's raw packet QP",
                self.test
            )));
        }
        let spec = Spec::from_args(self)?;
        let local = Local {
            ib_port: self.conn.ib_port,
            gid_index: self.gid_index,
            perftest: self.perftest,
        };
        if self.conn.ib_port == 0 {
            return Err(ToolError::Usage("-i 0: ports are numbered from 1".into()));
        }
        let mode = self.conn.mode()?;
        if self.perftest && matches!(mode, Mode::Loopback) {
            return Err(ToolError::Usage(
                "--perftest is the exchange with a peer: give --server, --client or --tcp-loopback"
                    .into(),
            ));
        }
        Ok((spec, local, mode))
    }
}

impl Spec {
    pub(super) fn from_args(a: &PerfArgs) -> Result<Self> {
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
                    "unknown perf test '{other}' (one of write-bw, write-lat, read-bw, read-lat, send-bw, send-lat, atomic-bw, atomic-lat, raw-bw)"
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
}

/// What `hca perf raw-bw` takes from the arguments.
#[derive(Clone, Debug)]
pub(super) struct RawOpts {
    /// Frame size in bytes (Ethernet header to the end of the UDP
    /// payload, no FCS).
    pub(super) size: u64,
    /// Frames to send (when no duration).
    pub(super) iters: u64,
    /// Seconds to send for instead.
    pub(super) duration: Option<u64>,
    /// Sends outstanding.
    pub(super) tx_depth: u32,
    /// Receive buffers posted.
    pub(super) rx_depth: u32,
    /// Signal one send in this many.
    pub(super) cq_mod: u32,
    /// Report in Gb/sec.
    pub(super) gbits: bool,
    /// No peak.
    pub(super) no_peak: bool,
    /// The port.
    pub(super) ib_port: u8,
    /// The sender's packet pacing rate, kbit/s (`--rate-limit`).
    pub(super) rate_limit_kbps: Option<u32>,
}

/// The smallest raw-bw frame: Ethernet, IPv4 and UDP headers and 8 bytes
/// of payload (the frame's sequence number).
pub(super) const RAW_MIN_SIZE: u64 = 14 + 20 + 8 + 8;
/// The largest raw-bw frame: a 9000-byte jumbo IP packet in an Ethernet
/// frame.
pub(super) const RAW_MAX_SIZE: u64 = 9014;

impl PerfArgs {
    /// Whether the test is `raw-bw` (which has its own options).
    pub(super) fn is_raw(&self) -> bool {
        self.test.eq_ignore_ascii_case("raw-bw")
    }

    /// Validates the arguments of `raw-bw`: the options of the RDMA tests
    /// that have no meaning for raw Ethernet frames are refused by name.
    pub(super) fn raw(&self) -> Result<(RawOpts, Mode)> {
        let refuse = |given: bool, opt: &str, why: &str| {
            if given {
                Err(ToolError::Usage(format!(
                    "{opt} does not apply to raw-bw: {why}"
                )))
            } else {
                Ok(())
            }
        };
        refuse(self.all, "-a", "one frame size per run (-s)")?;
        refuse(
            self.qps != 1,
            "-q",
            "raw-bw runs on one raw packet QP per side",
        )?;
        refuse(
            self.connection.is_some(),
            "-c",
            "the QPs are raw packet QPs",
        )?;
        refuse(self.mtu.is_some(), "-m", "-s is the whole frame")?;
        refuse(self.gid_index.is_some(), "-x", "raw frames use no GID")?;
        refuse(
            self.inline_size.is_some(),
            "-I",
            "the L2 headers are inlined as the device requires",
        )?;
        refuse(self.outs.is_some(), "-o", "no RDMA READs")?;
        refuse(self.atomic_type.is_some(), "-A", "no atomics")?;
        refuse(
            self.perftest,
            "--perftest",
            "perftest's raw_ethernet_bw exchange is not spoken",
        )?;
        let size = self.size.unwrap_or(1024);
        if !(RAW_MIN_SIZE..=RAW_MAX_SIZE).contains(&size) {
            return Err(ToolError::Usage(format!(
                "-s {size}: a raw-bw frame is {RAW_MIN_SIZE} to {RAW_MAX_SIZE} bytes (Ethernet + IPv4 + UDP headers and an 8-byte sequence number at least)"
            )));
        }
        let iters = self.iters.unwrap_or(5000);
        if !(MIN_ITER..=MAX_ITER).contains(&iters) {
            return Err(ToolError::Usage(format!(
                "-n {iters}: the iterations must be between {MIN_ITER} and {MAX_ITER}"
            )));
        }
        if self.duration == Some(0) {
            return Err(ToolError::Usage("-D 0: run for at least a second".into()));
        }
        let tx_depth = self.tx_depth.unwrap_or(128);
        if !(1..=15000).contains(&tx_depth) {
            return Err(ToolError::Usage(format!(
                "-t {tx_depth}: the TX depth must be between 1 and 15000"
            )));
        }
        let rx_depth = self.rx_depth.unwrap_or(512);
        if !(1..=16384).contains(&rx_depth) {
            return Err(ToolError::Usage(format!(
                "-r {rx_depth}: the RX depth must be between 1 and 16384"
            )));
        }
        let cq_mod = self.cq_mod.unwrap_or(100);
        if !(1..=1024).contains(&cq_mod) {
            return Err(ToolError::Usage(format!(
                "-Q {cq_mod}: the CQ moderation must be between 1 and 1024"
            )));
        }
        if self.conn.ib_port == 0 {
            return Err(ToolError::Usage("-i 0: ports are numbered from 1".into()));
        }
        let rate_limit_kbps = match self.rate_limit {
            None => None,
            Some(r) if r.is_finite() && (0.001..=4_294_967.0).contains(&r) => {
                Some((r * 1000.0).round() as u32)
            }
            Some(r) => {
                return Err(ToolError::Usage(format!(
                    "--rate-limit {r}: a rate from 0.001 to 4294967 Mb/s"
                )));
            }
        };
        let mode = self.conn.mode()?;
        Ok((
            RawOpts {
                size,
                iters,
                duration: self.duration,
                tx_depth,
                rx_depth,
                cq_mod: cq_mod.min(tx_depth),
                gbits: self.report_gbits,
                no_peak: self.no_peak || self.duration.is_some(),
                ib_port: self.conn.ib_port,
                rate_limit_kbps,
            },
            mode,
        ))
    }
}

/// The options that are not part of the spec.
#[derive(Clone, Debug)]
pub(super) struct Local {
    pub(super) ib_port: u8,
    pub(super) gid_index: Option<u8>,
    /// Speak perftest's exchange (`--perftest`).
    pub(super) perftest: bool,
}
