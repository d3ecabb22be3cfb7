//! `hca perf raw-bw`: perftest's `raw_ethernet_bw`. The client (sender)
//! builds UDP/IPv4 frames of `-s` bytes (Ethernet header to the end of
//! the UDP payload, which starts with the frame's 64-bit sequence
//! number), with a valid IPv4 header checksum and the UDP checksum left
//! to the device (`IBV_SEND_IP_CSUM`, the WQE's `cs_flags`) where the
//! device reports `IBV_RAW_PACKET_CAP_IP_CSUM`, else 0 (no checksum, legal
//! over IPv4). It posts them on a raw packet QP, `-t` outstanding, one in
//! `-Q` signalled, the L2 headers inline in the Ethernet segment. The
//! server (receiver) takes them through a NIC RX flow rule on its MAC,
//! the destination IP and the destination UDP port into a raw packet QP
//! with `-r` receive buffers, and reposts them.
//!
//! Reports are perftest's bandwidth table ([`super::report::bw_row`]):
//! the sender's over the first post to the last completion, the
//! receiver's over the first to the last frame received; then the frames
//! sent, received and lost (and received with a wrong length).
//!
//! Where the sides run is as for the other tests: in this process with
//! both on the device (two emulated HCAs cabled together, `-d emu`), or a
//! server and a client meeting over TCP (`--server`, `hca perf raw-bw
//! HOST`; on the emulator each with `--wire`), exchanging the frame size,
//! the count and the server's MAC in this tool's JSON messages.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::steering::{FlowMatch, FlowSpec, Masked};
use hca_driver::verbs::{
    DeviceAttr, RAW_PACKET_CAP_IP_CSUM, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};
use hca_driver::{Hca, RateLimit};
use hca_emu::frame::{Frame, L3, L4};
use platform::Platform;
use serde::{Deserialize, Serialize};

use super::arguments::{PerfArgs, RawOpts};
use super::report::{BW_HEADER, BW_HEADER_G, BwRow, BwSamples, RESULT_LINE, bw_row};
use crate::cmd::capture::mac_text;
use crate::device::{Device, DevicePair, OpenOptions, Selection};
use crate::error::{Result, ToolError};
use crate::output::json;
use crate::peer::{self, Control, EXCHANGE_TIMEOUT, Mode};
use crate::raw::{RawQp, RawSpec, with_steering};

/// The client's (source) IPv4 address in the frames.
pub const CLIENT_IP: [u8; 4] = [192, 168, 50, 1];
/// The server's (destination) IPv4 address, matched by its flow rule.
pub const SERVER_IP: [u8; 4] = [192, 168, 50, 2];
/// The UDP source port.
pub const SRC_PORT: u16 = 50_000;
/// The UDP destination port, matched by the server's flow rule.
pub const DST_PORT: u16 = 50_001;

/// The Ethernet and VLAN header bytes inlined in each send's Ethernet
/// segment (rdma-core's `MLX5_ETH_L2_INLINE_HEADER_SIZE`, the most any
/// `eth_min_inline` mode needs).
const INLINE: usize = hca_driver::verbs::ETH_L2_INLINE_HEADER_SIZE as usize;
/// Where the sequence number is in a frame (the UDP payload).
const SEQ_AT: usize = 14 + 20 + 8;

/// How long the receiver waits for frames still on their way once the
/// sender is done.
const DRAIN: Duration = Duration::from_secs(1);
/// How long a side waits without progress before giving up.
const STALL: Duration = Duration::from_secs(10);

/// The frame of `size` bytes (at least [`SEQ_AT`] + 8) from `src` to
/// `dst`: IPv4 with don't-fragment and its header checksum, UDP with
/// checksum 0, sequence number 0 then the bytes 0, 1, 2... as payload.
pub fn udp_frame(src: [u8; 6], dst: [u8; 6], size: usize) -> Vec<u8> {
    let mut payload = vec![0u8; size - SEQ_AT];
    for (i, b) in payload[8..].iter_mut().enumerate() {
        *b = i as u8;
    }
    Frame::new(dst, src)
        .l3(L3::V4(CLIENT_IP, SERVER_IP))
        .l4(L4::Udp(SRC_PORT, DST_PORT))
        .payload(&payload)
        .dont_fragment()
        .ip_checksum()
        .build()
}

/// The server's flow rule: its MAC, the server IP and the UDP port.
fn server_match(mac: [u8; 6]) -> Result<FlowMatch> {
    FlowMatch::from_specs(&[
        FlowSpec::Eth {
            dst_mac: Masked::exact(mac, [0xff; 6]),
            src_mac: Masked::default(),
            ether_type: Masked::default(),
            vlan_tag: Masked::default(),
        },
        FlowSpec::Ipv4 {
            src_ip: Masked::default(),
            dst_ip: Masked::exact(SERVER_IP, [0xff; 4]),
        },
        FlowSpec::Udp {
            src_port: Masked::default(),
            dst_port: Masked::exact(DST_PORT, 0xffff),
        },
    ])
    .map_err(|e| ToolError::driver("building the server's flow match", e))
}

/// The sending side: posts frames and retires their completions.
struct Sender<P: Platform + 'static> {
    q: RawQp<P>,
    hdr: [u8; INLINE],
    flags: SendFlags,
    o: RawOpts,
    deadline: Option<Instant>,
    posted: u64,
    retired: u64,
    last_posted: bool,
    s: BwSamples,
    last_progress: Instant,
}

impl<P: Platform + 'static> Sender<P> {
    fn new(hca: &Arc<Hca<P>>, o: &RawOpts, hint: &str) -> Result<(Self, [u8; 6])> {
        let spec = RawSpec {
            port: o.ib_port,
            rx: 0,
            tx: o.tx_depth,
            slot: o.size as usize,
        };
        let (mut q, mac) = RawQp::open(hca, "client", spec, hint)?;
        if let Some(k) = o.rate_limit_kbps {
            q.raw.qp.set_rate_limit(RateLimit::kbps(k)).map_err(|e| {
                ToolError::driver(format!("pacing the sender at {k} kbit/s (--rate-limit)"), e)
            })?;
        }
        let csum = DeviceAttr::from_info(hca.info()).has_raw_packet_cap(RAW_PACKET_CAP_IP_CSUM);
        Ok((
            Sender {
                q,
                hdr: [0; INLINE],
                flags: if csum {
                    SendFlags::IP_CSUM
                } else {
                    SendFlags::NONE
                },
                o: o.clone(),
                deadline: None,
                posted: 0,
                retired: 0,
                last_posted: false,
                s: BwSamples::default(),
                last_progress: Instant::now(),
            },
            mac,
        ))
    }

    /// Whether the UDP checksum is the device's.
    fn offload(&self) -> bool {
        self.flags.contains(SendFlags::IP_CSUM)
    }

    /// Writes the frames towards `dst` into the send slots.
    fn prepare(&mut self, src: [u8; 6], dst: [u8; 6]) -> Result<()> {
        let f = udp_frame(src, dst, self.o.size as usize);
        self.hdr.copy_from_slice(&f[..INLINE]);
        for i in 0..u64::from(self.o.tx_depth) {
            self.q
                .slots
                .write(i, 0, &f[INLINE..])
                .map_err(|e| ToolError::driver("writing the frames", e))?;
        }
        Ok(())
    }

    fn start(&mut self) {
        self.deadline = self
            .o
            .duration
            .map(|d| Instant::now() + Duration::from_secs(d));
        self.last_progress = Instant::now();
    }

    fn done(&self) -> bool {
        self.last_posted && self.retired == self.posted
    }

    /// Retires completions and posts what the window allows; whether
    /// anything happened.
    fn step(&mut self) -> Result<bool> {
        let mut wc = [WorkCompletion::default(); 16];
        let n = self
            .q
            .raw
            .send_cq
            .poll(&mut wc)
            .map_err(|e| ToolError::driver("client: polling the send CQ", e))?;
        let now = Instant::now();
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(ToolError::Usage(format!(
                    "client: frame {} completed with {} ({}), vendor error {:#x}",
                    w.wr_id, w.status, w.status as u8, w.vendor_err
                )));
            }
            if w.wr_id >= self.posted {
                return Err(ToolError::Usage(format!(
                    "client: a completion names frame {}, only {} were posted",
                    w.wr_id, self.posted
                )));
            }
            self.retired = self.retired.max(w.wr_id + 1);
            self.s.completions.push((self.retired, now));
            self.s.done = self.retired;
            self.s.end = Some(now);
        }
        let mut posted_any = false;
        let depth = u64::from(self.o.tx_depth);
        while !self.last_posted && self.posted - self.retired < depth {
            let k = self.posted;
            let last = (self.o.duration.is_none() && k + 1 == self.o.iters)
                || self.deadline.is_some_and(|d| Instant::now() >= d);
            let mut flags = self.flags;
            if last || (k + 1) % u64::from(self.o.cq_mod) == 0 {
                flags = flags | SendFlags::SIGNALED;
            }
            let slot = k % depth;
            self.q
                .slots
                .write(slot, SEQ_AT - INLINE, &k.to_be_bytes())
                .map_err(|e| ToolError::driver("writing a sequence number", e))?;
            let sge = self
                .q
                .slots
                .sge(slot, (self.o.size as usize - INLINE) as u32)
                .map_err(|e| ToolError::driver("client: a send scatter entry", e))?;
            let sgl = [sge];
            let wr = SendWr::new(k, SendOp::Send)
                .sgl(&sgl)
                .eth_headers(&self.hdr)
                .flags(flags);
            self.q
                .raw
                .qp
                .post_send(&wr)
                .map_err(|e| ToolError::driver(format!("client: posting frame {k}"), e))?;
            let t = Instant::now();
            if !self.o.no_peak {
                self.s.posted.push(t);
            }
            self.s.start.get_or_insert(t);
            self.posted += 1;
            self.last_posted = last;
            posted_any = true;
        }
        let progress = n > 0 || posted_any;
        if progress {
            self.last_progress = now;
        } else if now.duration_since(self.last_progress) > STALL {
            return Err(ToolError::Usage(format!(
                "client: no send completion for {} s ({} of {} frames retired)",
                STALL.as_secs(),
                self.retired,
                self.posted
            )));
        }
        Ok(progress)
    }

    fn row(&self) -> BwRow {
        bw_row(self.o.size, &self.s, self.o.gbits, self.o.no_peak)
    }
}

/// The receiving side: counts and reposts.
struct Receiver<P: Platform + 'static> {
    q: RawQp<P>,
    size: u64,
    gbits: bool,
    received: u64,
    bad: u64,
    s: BwSamples,
}

impl<P: Platform + 'static> Receiver<P> {
    fn new(hca: &Arc<Hca<P>>, o: &RawOpts, hint: &str) -> Result<(Self, [u8; 6])> {
        let spec = RawSpec {
            port: o.ib_port,
            rx: o.rx_depth,
            tx: 0,
            slot: (o.size as usize).next_multiple_of(64),
        };
        let (q, mac) = RawQp::open(hca, "server", spec, hint)?;
        Ok((
            Receiver {
                q,
                size: o.size,
                gbits: o.gbits,
                received: 0,
                bad: 0,
                s: BwSamples::default(),
            },
            mac,
        ))
    }

    fn step(&mut self) -> Result<bool> {
        let mut wc = [WorkCompletion::default(); 32];
        let n = self
            .q
            .raw
            .recv_cq
            .poll(&mut wc)
            .map_err(|e| ToolError::driver("server: polling the receive CQ", e))?;
        let now = Instant::now();
        for w in &wc[..n] {
            match w.status {
                WcStatus::Success if u64::from(w.byte_len) == self.size => {
                    self.received += 1;
                    self.s.start.get_or_insert(now);
                    self.s.end = Some(now);
                }
                WcStatus::Success | WcStatus::LocLenErr => self.bad += 1,
                s => {
                    return Err(ToolError::Usage(format!(
                        "server: receive buffer {} completed with {s} ({}), vendor error {:#x}",
                        w.wr_id, s as u8, w.vendor_err
                    )));
                }
            }
            self.q.repost(w.wr_id)?;
        }
        Ok(n > 0)
    }

    fn row(&self) -> BwRow {
        let s = BwSamples {
            posted: Vec::new(),
            completions: Vec::new(),
            start: self.s.start,
            end: self.s.end,
            done: self.received,
        };
        bw_row(self.size, &s, self.gbits, true)
    }
}

/// What a raw-bw run reports (`--json`: this).
#[derive(Debug, Serialize)]
pub struct RawReport {
    /// `raw-bw`.
    pub test: &'static str,
    /// `loopback`, `server`, `client`.
    pub role: &'static str,
    /// The device.
    pub device: String,
    /// Frame size in bytes (no FCS).
    pub frame_size: u64,
    /// Sender's and receiver's MAC.
    pub src_mac: String,
    /// The receiver's MAC.
    pub dst_mac: String,
    /// How the sender makes the UDP checksum: `offload` (cs_flags) or
    /// `zero`; empty on the server (the client's choice).
    pub udp_checksum: &'static str,
    /// The sender's packet pacing rate, kbit/s (`--rate-limit`); none on
    /// the server (the client's choice) and for an unpaced sender.
    pub rate_limit_kbps: Option<u32>,
    /// Frames sent.
    pub sent: u64,
    /// Frames received whole.
    pub received: u64,
    /// Sent and not received.
    pub lost: u64,
    /// Received with a length other than the frame size.
    pub bad: u64,
    /// `MiB/sec` or `Gb/sec`.
    pub units: &'static str,
    /// The sender's row (client, loopback).
    pub send: Option<BwRow>,
    /// The receiver's row (server, loopback).
    pub receive: Option<BwRow>,
}

impl RawReport {
    fn print(&self, out: &mut dyn Write, as_json: bool, gbits: bool) -> Result<()> {
        if as_json {
            return json(out, self);
        }
        writeln!(out, "{RESULT_LINE}")?;
        writeln!(out, "                    Raw Ethernet BW Test (UDP/IPv4)")?;
        writeln!(out, " Device         : {}", self.device)?;
        writeln!(out, " Role           : {}", self.role)?;
        writeln!(
            out,
            " Frames         : {} bytes, {} > {}, UDP {}:{} > {}:{}",
            self.frame_size,
            self.src_mac,
            self.dst_mac,
            std::net::Ipv4Addr::from(CLIENT_IP),
            SRC_PORT,
            std::net::Ipv4Addr::from(SERVER_IP),
            DST_PORT
        )?;
        match self.udp_checksum {
            "offload" => writeln!(
                out,
                " Checksums      : IPv4 header in software, UDP by the device (cs_flags)"
            )?,
            "zero" => writeln!(
                out,
                " Checksums      : IPv4 header in software, UDP 0 (the device reports no IP checksum offload)"
            )?,
            _ => {}
        }
        if let Some(k) = self.rate_limit_kbps {
            writeln!(
                out,
                " Paced          : {} Mb/s by the device (packet pacing)",
                f64::from(k) / 1000.0
            )?;
        }
        writeln!(out, "{RESULT_LINE}")?;
        writeln!(out, "{}", if gbits { BW_HEADER_G } else { BW_HEADER })?;
        for (label, r) in [("sent", &self.send), ("received", &self.receive)] {
            if let Some(r) = r {
                writeln!(out, "{}    ({label})", r.line(gbits))?;
            }
        }
        writeln!(out, "{RESULT_LINE}")?;
        writeln!(
            out,
            " frames sent {}, received {}, lost {}, wrong length {}",
            self.sent, self.received, self.lost, self.bad
        )?;
        Ok(())
    }
}

/// Client to server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawClientMsg {
    Hello {
        size: u64,
        rx_depth: u32,
        mac: [u8; 6],
    },
    Done {
        sent: u64,
    },
}

/// Server to client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawServerMsg {
    Ready { mac: [u8; 6] },
    Finished { received: u64, bad: u64 },
}

/// Runs `hca perf raw-bw`.
pub(super) fn run(
    a: &PerfArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let (o, mode) = a.raw()?;
    // A paced sender's rate is device time: on the emulator that must be
    // the host's, for the bandwidth (host time) to show it.
    let paced_open;
    let open = if o.rate_limit_kbps.is_some() {
        paced_open = OpenOptions {
            real_time: true,
            ..open.clone()
        };
        &paced_open
    } else {
        open
    };
    match mode {
        Mode::Loopback => {
            let pair = DevicePair::open(sel, open)?;
            let r = loopback(&o, &pair).and_then(|rep| rep.print(out, as_json, o.gbits));
            pair.finish(r)
        }
        Mode::Server { port } => {
            let listener = peer::listen(port)?;
            let dev = Device::open(sel, open)?;
            let r = server(&o, &dev, listener, sel)
                .and_then(|rep| rep.print(out, as_json, o.gbits));
            dev.finish(r)
        }
        Mode::Client { host, port } => {
            let stream = peer::connect(&host, port)?;
            let dev = Device::open(sel, open)?;
            let r =
                client(&o, &dev, stream, sel).and_then(|rep| rep.print(out, as_json, o.gbits));
            dev.finish(r)
        }
        Mode::TcpLoopback { .. } => Err(ToolError::Usage(
            "--tcp-loopback is not available for raw-bw: run it in one process (-d emu) or as a server and a client".into(),
        )),
    }
}

fn checksum_name(offload: bool) -> &'static str {
    if offload { "offload" } else { "zero" }
}

fn units(gbits: bool) -> &'static str {
    if gbits { "Gb/sec" } else { "MiB/sec" }
}

fn hint(sel: &Selection, mode_hint: &'static str) -> &'static str {
    if *sel == Selection::Emulator {
        mode_hint
    } else {
        ""
    }
}

fn loopback(o: &RawOpts, pair: &DevicePair) -> Result<RawReport> {
    let (mut r, dst) = Receiver::new(pair.b(), o, "")?;
    let (mut s, src) = match Sender::new(pair.a(), o, "") {
        Ok(v) => v,
        Err(e) => {
            let _ = r.q.close();
            return Err(e);
        }
    };
    let m = server_match(dst)?;
    let tir = r.q.tir()?;
    let run = with_steering(pair.b(), &m, tir, || {
        s.prepare(src, dst)?;
        s.start();
        let mut quiet_since: Option<Instant> = None;
        loop {
            let a = s.step()?;
            let b = r.step()?;
            if s.done() {
                if r.received + r.bad >= s.posted {
                    break;
                }
                if b {
                    quiet_since = None;
                }
                let q = *quiet_since.get_or_insert_with(Instant::now);
                if q.elapsed() > DRAIN {
                    break;
                }
            }
            if !a && !b {
                pair.a().platform().relax();
            }
        }
        Ok(())
    });
    let rep = RawReport {
        test: "raw-bw",
        role: "loopback",
        device: pair.desc().a.selection.hca_id().to_string(),
        frame_size: o.size,
        src_mac: mac_text(&src),
        dst_mac: mac_text(&dst),
        udp_checksum: checksum_name(s.offload()),
        rate_limit_kbps: o.rate_limit_kbps,
        sent: s.posted,
        received: r.received,
        lost: s.posted.saturating_sub(r.received + r.bad),
        bad: r.bad,
        units: units(o.gbits),
        send: Some(s.row()),
        receive: Some(r.row()),
    };
    let closed = s.q.close().and(r.q.close());
    run?;
    closed?;
    Ok(rep)
}

fn server(
    o: &RawOpts,
    dev: &Device,
    listener: std::net::TcpListener,
    sel: &Selection,
) -> Result<RawReport> {
    let hint = hint(sel, peer::emulator_down_hint(&Mode::Server { port: 0 }));
    // The port is checked before waiting for a client.
    crate::raw::ethernet_port(
        &hca_driver::verbs::Context::open(dev.hca())
            .map_err(|e| ToolError::driver("server: opening a verbs context", e))?,
        "server",
        o.ib_port,
        hint,
    )?;
    let stream = peer::accept(&listener)?;
    drop(listener);
    let mut ctl = Control::new(stream, "client")?;
    let r = serve(o, dev, hint, &mut ctl);
    if let Err(e) = &r {
        ctl.send_error(e);
    }
    r
}

fn serve(o: &RawOpts, dev: &Device, hint: &str, ctl: &mut Control) -> Result<RawReport> {
    let (size, rx_depth, src) = match ctl.recv::<RawClientMsg>(Some(EXCHANGE_TIMEOUT))? {
        RawClientMsg::Hello {
            size,
            rx_depth,
            mac,
        } => (size, rx_depth, mac),
        other => {
            return Err(ToolError::Usage(format!(
                "the client sent {other:?} instead of its test"
            )));
        }
    };
    // The client's frame size and receive depth rule.
    let o = RawOpts {
        size,
        rx_depth,
        ..o.clone()
    };
    let (mut r, mac) = Receiver::new(dev.hca(), &o, hint)?;
    let m = server_match(mac)?;
    let tir = r.q.tir()?;
    let hca = dev.hca().clone();
    let run = with_steering(dev.hca(), &m, tir, || {
        ctl.send(&RawServerMsg::Ready { mac })?;
        let mut sent = None;
        let mut last = Instant::now();
        loop {
            let got = r.step()?;
            let now = Instant::now();
            if got {
                last = now;
            }
            if sent.is_none() {
                if let Some(msg) = ctl.try_recv::<RawClientMsg>()? {
                    match msg {
                        RawClientMsg::Done { sent: n } => {
                            sent = Some(n);
                            last = now;
                        }
                        other => {
                            return Err(ToolError::Usage(format!(
                                "the client sent {other:?} during the test"
                            )));
                        }
                    }
                }
            }
            match sent {
                Some(n) if r.received + r.bad >= n || now.duration_since(last) > DRAIN => {
                    break Ok(n);
                }
                None if now.duration_since(last) > STALL + EXCHANGE_TIMEOUT => {
                    break Err(ToolError::Usage(
                        "server: neither frames nor the client's end for too long".into(),
                    ));
                }
                _ => {}
            }
            if !got {
                hca.platform().relax();
            }
        }
    });
    let row = r.row();
    let closed = r.q.close();
    let sent = run?;
    closed?;
    ctl.send(&RawServerMsg::Finished {
        received: r.received,
        bad: r.bad,
    })?;
    Ok(RawReport {
        test: "raw-bw",
        role: "server",
        device: dev.desc().selection.hca_id().to_string(),
        frame_size: size,
        src_mac: mac_text(&src),
        dst_mac: mac_text(&mac),
        udp_checksum: "",
        rate_limit_kbps: None,
        sent,
        received: r.received,
        lost: sent.saturating_sub(r.received + r.bad),
        bad: r.bad,
        units: units(o.gbits),
        send: None,
        receive: Some(row),
    })
}

fn client(
    o: &RawOpts,
    dev: &Device,
    stream: std::net::TcpStream,
    sel: &Selection,
) -> Result<RawReport> {
    let hint = hint(
        sel,
        peer::emulator_down_hint(&Mode::Client {
            host: String::new(),
            port: 0,
        }),
    );
    let mut ctl = Control::new(stream, "server")?;
    let r = (|| {
        let (mut s, src) = Sender::new(dev.hca(), o, hint)?;
        let run = (|| {
            ctl.send(&RawClientMsg::Hello {
                size: o.size,
                rx_depth: o.rx_depth,
                mac: src,
            })?;
            let dst = match ctl.recv::<RawServerMsg>(Some(EXCHANGE_TIMEOUT))? {
                RawServerMsg::Ready { mac } => mac,
                other => {
                    return Err(ToolError::Usage(format!(
                        "the server answered {other:?} instead of being ready"
                    )));
                }
            };
            s.prepare(src, dst)?;
            s.start();
            while !s.done() {
                if !s.step()? {
                    dev.hca().platform().relax();
                }
            }
            ctl.send(&RawClientMsg::Done { sent: s.posted })?;
            let (received, bad) = match ctl.recv::<RawServerMsg>(Some(STALL + DRAIN))? {
                RawServerMsg::Finished { received, bad } => (received, bad),
                other => {
                    return Err(ToolError::Usage(format!(
                        "the server answered {other:?} instead of its count"
                    )));
                }
            };
            Ok((dst, received, bad))
        })();
        let (row, offload) = (s.row(), s.offload());
        let closed = s.q.close();
        let (dst, received, bad) = run?;
        closed?;
        Ok(RawReport {
            test: "raw-bw",
            role: "client",
            device: dev.desc().selection.hca_id().to_string(),
            frame_size: o.size,
            src_mac: mac_text(&src),
            dst_mac: mac_text(&dst),
            udp_checksum: checksum_name(offload),
            rate_limit_kbps: o.rate_limit_kbps,
            sent: s.posted,
            received,
            lost: s.posted.saturating_sub(received + bad),
            bad,
            units: units(o.gbits),
            send: Some(row),
            receive: None,
        })
    })();
    if let Err(e) = &r {
        ctl.send_error(e);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use hca_emu::frame::internet_checksum;

    #[test]
    fn frames_have_a_valid_ipv4_header_and_the_udp_lengths() {
        let f = udp_frame([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 100);
        assert_eq!(f.len(), 100);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        // A header with its checksum sums to 0xffff (complement 0).
        assert_eq!(internet_checksum(&f[14..34]), 0);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 86);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 66);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), DST_PORT);
        // Byte for byte as before the frame builder was shared: DF, TTL 64,
        // UDP, the header checksum, checksum 0, the counting payload.
        assert_eq!(&f[20..24], &[0x40, 0, 64, 17]);
        assert_eq!(&f[40..42], &[0, 0]);
        assert_eq!(&f[42..50], &[0; 8]);
        assert!(f[50..].iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
