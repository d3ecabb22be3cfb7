//! `hca capture`: tcpdump for a port the driver owns. A raw packet QP
//! with `-n` receive buffers, a NIC RX flow rule built from selector
//! options (`ibv_create_flow`-style: Ethernet dst/src/type/VLAN, IPv4 or
//! IPv6 src/dst, TCP/UDP ports), the repost loop, and the frames into a
//! pcap file (`-w FILE`, `-` for stdout) or as one summary line each.
//!
//! No selector (or `--sniffer`) is a catch-all rule: every frame the NIC
//! RX path sees. The driver has no sniffer flow table (the firmware's
//! `SNIFFER_RX` table type) yet, so frames the device hands to its RoCE
//! engine (UDP port 4791 to a RoCE QP) are not seen; the emulator's
//! `--pcap` tap sees those.
//!
//! Counters (on stderr at the end, and every second with `-v`): frames,
//! bytes, frames/s and Mb/s over the run, frames larger than a buffer
//! (their completion is `IBV_WC_LOC_LEN_ERR`; the buffer is posted again),
//! and the device's own drops: out-of-buffer (frames that found no
//! receive buffer posted), from the QP's own Q counter set (QUERY_Q_COUNTER,
//! so on real hardware under VFIO too), and on the emulator also its
//! steering drops (frames no flow rule took).
//!
//! Timestamps (the line at the start says which): by default the
//! device's, each receive CQE's `timestamp` (free-running ticks of the
//! device clock, `device_frequency_khz`), turned into wall-clock time by
//! an anchor taken at the start, the device's internal timer read between
//! two readings of the host's clock
//! ([`DeviceClock`]); the frames keep
//! the device's spacing and order, whatever the host's polling does. With
//! `--host-time`, the host's clock when the completion is polled. A
//! classic pcap file has no field to record which: the start line says
//! it, and with `--pcapng` the file's section comment
//! ([`pcap_comment`]) does too.
//!
//! SIGINT (Ctrl-C) ends the capture as `-c` and `--duration` do: the
//! frames captured so far are flushed into the file and the final
//! counters printed; a second SIGINT while that is under way exits at
//! once (status 130).

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hca_driver::capture::DeviceClock;
use hca_driver::steering::{FlowMatch, FlowSpec, Masked};
use hca_driver::verbs::{Completion, RxCqe, WcStatus, WorkCompletion};
use hca_emu::EmuHca;
use platform::Platform;

use crate::capture::{PcapWriter, host_time};
use crate::device::{Device, OpenOptions, Selection, WIRE_PORT};
use crate::error::{Result, ToolError};
use crate::raw::{RawQp, RawSpec, with_steering};

/// The L4 protocol of `--proto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Proto {
    /// UDP (IP protocol 17).
    Udp,
    /// TCP (IP protocol 6).
    Tcp,
}

/// The options of `hca capture`.
#[derive(Clone, Debug, Args)]
pub struct CaptureArgs {
    /// Write the frames into FILE, a pcap capture (Ethernet, nanosecond
    /// timestamps); `-` for stdout. Without it, one line per frame.
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Stop after COUNT frames.
    #[arg(short = 'c', long = "count", value_name = "COUNT")]
    pub count: Option<u64>,
    /// Stop after SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Receive buffers posted to the raw packet QP.
    #[arg(short = 'n', long = "buffers", default_value_t = 256, value_name = "N")]
    pub buffers: u32,
    /// Bytes of each receive buffer: larger frames are counted, not
    /// captured.
    #[arg(long = "buf-size", default_value_t = 2048, value_name = "BYTES")]
    pub buf_size: u32,
    /// The port (1-based).
    #[arg(
        long = "ib-port",
        short = 'i',
        default_value_t = 1,
        value_name = "PORT"
    )]
    pub port: u8,
    /// Counters every second on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Every frame (a catch-all rule); no selector may be given with it.
    #[arg(long)]
    pub sniffer: bool,
    /// Destination MAC (aa:bb:cc:dd:ee:ff).
    #[arg(long = "eth-dst", value_name = "MAC")]
    pub eth_dst: Option<String>,
    /// Source MAC.
    #[arg(long = "eth-src", value_name = "MAC")]
    pub eth_src: Option<String>,
    /// Ethertype (0x0800, 2048; after a VLAN tag, that of the payload).
    #[arg(long, value_name = "TYPE")]
    pub ethertype: Option<String>,
    /// 802.1Q VLAN id (0-4095): only frames with this customer VLAN tag.
    #[arg(long, value_name = "ID")]
    pub vlan: Option<u16>,
    /// Source IPv4 or IPv6 address.
    #[arg(long = "src-ip", value_name = "IP")]
    pub src_ip: Option<IpAddr>,
    /// Destination IPv4 or IPv6 address.
    #[arg(long = "dst-ip", value_name = "IP")]
    pub dst_ip: Option<IpAddr>,
    /// Source TCP/UDP port (needs --proto).
    #[arg(long = "src-port", value_name = "PORT")]
    pub src_port: Option<u16>,
    /// Destination TCP/UDP port (needs --proto).
    #[arg(long = "dst-port", value_name = "PORT")]
    pub dst_port: Option<u16>,
    /// The L4 protocol.
    #[arg(long, value_enum)]
    pub proto: Option<Proto>,
    /// Timestamps from the host's clock when each completion is polled,
    /// instead of the device's CQE timestamps.
    #[arg(long = "host-time")]
    pub host_time: bool,
    /// Write pcapng rather than classic pcap (`-w`): its section comment
    /// says where the timestamps come from.
    #[arg(long)]
    pub pcapng: bool,
}

/// `aa:bb:cc:dd:ee:ff` (or with `-`) as six bytes.
pub fn parse_mac(opt: &str, s: &str) -> Result<[u8; 6]> {
    let bad = || {
        ToolError::Usage(format!(
            "{opt} {s:?}: not a MAC address (six hexadecimal bytes separated by ':', e.g. 02:00:00:00:00:0b)"
        ))
    };
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *d = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(m)
}

/// A MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn parse_u16(opt: &str, s: &str) -> Result<u16> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u16::from_str_radix(h, 16),
        None => t.parse::<u16>(),
    };
    v.map_err(|_| {
        ToolError::Usage(format!(
            "{opt} {s:?}: not a 16-bit number (0x86dd or 34525)"
        ))
    })
}

impl CaptureArgs {
    /// The selectors as `ibv_create_flow` specs (empty: every frame).
    pub fn specs(&self) -> Result<Vec<FlowSpec>> {
        let any = self.eth_dst.is_some()
            || self.eth_src.is_some()
            || self.ethertype.is_some()
            || self.vlan.is_some()
            || self.src_ip.is_some()
            || self.dst_ip.is_some()
            || self.src_port.is_some()
            || self.dst_port.is_some()
            || self.proto.is_some();
        if self.sniffer && any {
            return Err(ToolError::Usage(
                "--sniffer takes every frame: give it without selectors, or the selectors without it".into(),
            ));
        }
        let mut specs = Vec::new();
        let dst = self
            .eth_dst
            .as_deref()
            .map(|s| parse_mac("--eth-dst", s))
            .transpose()?;
        let src = self
            .eth_src
            .as_deref()
            .map(|s| parse_mac("--eth-src", s))
            .transpose()?;
        let et = self
            .ethertype
            .as_deref()
            .map(|s| parse_u16("--ethertype", s))
            .transpose()?;
        if let Some(v) = self.vlan {
            if v > 4095 {
                return Err(ToolError::Usage(format!(
                    "--vlan {v}: a VLAN id is 12 bits (0 to 4095)"
                )));
            }
        }
        if dst.is_some() || src.is_some() || et.is_some() || self.vlan.is_some() {
            let m6 =
                |m: Option<[u8; 6]>| m.map(|v| Masked::exact(v, [0xff; 6])).unwrap_or_default();
            specs.push(FlowSpec::Eth {
                dst_mac: m6(dst),
                src_mac: m6(src),
                ether_type: et.map(|v| Masked::exact(v, 0xffff)).unwrap_or_default(),
                vlan_tag: self
                    .vlan
                    .map(|v| Masked::exact(v, 0x0fff))
                    .unwrap_or_default(),
            });
        }
        match (self.src_ip, self.dst_ip) {
            (None, None) => {}
            (Some(IpAddr::V4(_)) | None, Some(IpAddr::V4(_)) | None) => {
                let m = |a: Option<IpAddr>| match a {
                    Some(IpAddr::V4(a)) => Masked::exact(a.octets(), [0xff; 4]),
                    _ => Masked::default(),
                };
                specs.push(FlowSpec::Ipv4 {
                    src_ip: m(self.src_ip),
                    dst_ip: m(self.dst_ip),
                });
            }
            (Some(IpAddr::V6(_)) | None, Some(IpAddr::V6(_)) | None) => {
                let m = |a: Option<IpAddr>| match a {
                    Some(IpAddr::V6(a)) => Masked::exact(a.octets(), [0xff; 16]),
                    _ => Masked::default(),
                };
                specs.push(FlowSpec::Ipv6 {
                    src_ip: m(self.src_ip),
                    dst_ip: m(self.dst_ip),
                });
            }
            (Some(a), Some(b)) => {
                return Err(ToolError::Usage(format!(
                    "--src-ip {a} and --dst-ip {b}: one is IPv4 and the other IPv6"
                )));
            }
        }
        let port = |p: Option<u16>| p.map(|v| Masked::exact(v, 0xffff)).unwrap_or_default();
        match self.proto {
            None if self.src_port.is_some() || self.dst_port.is_some() => {
                return Err(ToolError::Usage(
                    "--src-port/--dst-port need --proto udp or --proto tcp".into(),
                ));
            }
            None => {}
            Some(Proto::Udp) => specs.push(FlowSpec::Udp {
                src_port: port(self.src_port),
                dst_port: port(self.dst_port),
            }),
            Some(Proto::Tcp) => specs.push(FlowSpec::Tcp {
                src_port: port(self.src_port),
                dst_port: port(self.dst_port),
            }),
        }
        Ok(specs)
    }

    /// The flow match of the selectors, checked for contradictions.
    pub fn flow_match(&self) -> Result<FlowMatch> {
        let specs = self.specs()?;
        FlowMatch::from_specs(&specs).map_err(|e| {
            ToolError::Usage(format!(
                "the selectors contradict each other (e.g. --ethertype against the IP version or a VLAN): {e}"
            ))
        })
    }

    fn validate(&self) -> Result<()> {
        if self.buffers == 0 {
            return Err(ToolError::Usage("-n 0: at least one receive buffer".into()));
        }
        if !(64..=65536).contains(&self.buf_size) {
            return Err(ToolError::Usage(format!(
                "--buf-size {}: from 64 to 65536 bytes",
                self.buf_size
            )));
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(ToolError::Usage(format!(
                    "--duration {d}: a positive number of seconds"
                )));
            }
        }
        if self.count == Some(0) {
            return Err(ToolError::Usage("-c 0: at least one frame".into()));
        }
        if self.port == 0 {
            return Err(ToolError::Usage("--ib-port 0: ports count from 1".into()));
        }
        Ok(())
    }
}

/// The emulator's drop counters that concern a capture (the device has
/// no counter of frames no flow rule took).
#[derive(Clone, Copy, Debug, Default)]
struct EmuDrops {
    steering: u64,
}

fn emu_drops(emu: &EmuHca) -> EmuDrops {
    let d = emu.datapath().drops;
    EmuDrops {
        steering: d.steering_miss + d.steering_drop,
    }
}

/// What a capture counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// Frames captured.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames larger than a receive buffer.
    pub oversize: u64,
}

struct Stats<'e> {
    c: Counters,
    start: Instant,
    emu: Option<(&'e EmuHca, EmuDrops)>,
}

impl Stats<'_> {
    /// The counters line; `out_of_buffer` is the QP's Q counter reading.
    fn line(&self, what: &str, out_of_buffer: Result<Option<u32>>) -> String {
        let s = self.start.elapsed().as_secs_f64().max(1e-9);
        let mut dev = match out_of_buffer {
            Ok(Some(n)) => format!("device drops: out-of-buffer {n} (Q counter)"),
            Ok(None) => "device drops: out-of-buffer not available (no Q counter)".to_string(),
            Err(e) => format!("device drops: out-of-buffer unreadable ({e})"),
        };
        if let Some((e, base)) = self.emu {
            let now = emu_drops(e);
            dev.push_str(&format!(
                ", steering {} (frames no flow rule took)",
                now.steering.saturating_sub(base.steering)
            ));
        }
        format!(
            "hca capture: {what}{} frames, {} bytes in {s:.3} s ({:.0} frames/s, {:.3} Mb/s); {} larger than the buffer; {dev}",
            self.c.frames,
            self.c.bytes,
            self.c.frames as f64 / s,
            self.c.bytes as f64 * 8.0 / s / 1e6,
            self.c.oversize,
        )
    }
}

/// One line for a frame, in the spirit of tcpdump's.
pub fn summary(t: Duration, f: &[u8]) -> String {
    let secs = t.as_secs() % 86400;
    let mut s = format!(
        "{:02}:{:02}:{:02}.{:06} ",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        t.subsec_micros()
    );
    if f.len() < 14 {
        s.push_str(&format!("truncated frame, length {}", f.len()));
        return s;
    }
    s.push_str(&format!("{} > {}", mac_text(&f[6..12]), mac_text(&f[0..6])));
    let mut et = u16::from_be_bytes([f[12], f[13]]);
    let mut off = 14;
    if et == 0x8100 && f.len() >= 18 {
        let tci = u16::from_be_bytes([f[14], f[15]]);
        s.push_str(&format!(", vlan {}", tci & 0xfff));
        et = u16::from_be_bytes([f[16], f[17]]);
        off = 18;
    }
    let l3 = &f[off..];
    let (proto, l4, src, dst) = match et {
        0x0800 if l3.len() >= 20 => {
            let ihl = usize::from(l3[0] & 0xf) * 4;
            (
                l3[9],
                l3.get(ihl..).unwrap_or(&[]),
                IpAddr::from([l3[12], l3[13], l3[14], l3[15]]),
                IpAddr::from([l3[16], l3[17], l3[18], l3[19]]),
            )
        }
        0x86dd if l3.len() >= 40 => {
            let a = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&l3[o..o + 16]);
                IpAddr::from(b)
            };
            (l3[6], &l3[40..], a(8), a(24))
        }
        _ => {
            s.push_str(&format!(", ethertype {et:#06x}, length {}", f.len()));
            return s;
        }
    };
    let name = match proto {
        6 => "TCP",
        17 => "UDP",
        _ => "",
    };
    if !name.is_empty() && l4.len() >= 4 {
        let (sp, dp) = (
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        );
        s.push_str(&format!(
            ", {src}.{sp} > {dst}.{dp}: {name}, length {}",
            f.len()
        ));
    } else {
        s.push_str(&format!(
            ", {src} > {dst}: ip-proto-{proto}, length {}",
            f.len()
        ));
    }
    s
}

/// Where the frames go.
enum Sink<'o> {
    Pcap(PcapWriter<Box<dyn Write + 'o>>, String),
    Lines(&'o mut dyn Write),
}

/// Where the frames' timestamps come from.
#[derive(Clone, Copy, Debug)]
pub enum Stamps {
    /// The host's clock when the completion is polled (`--host-time`).
    Host,
    /// The CQE's timestamp on the device clock, anchored to the host's.
    Device(DeviceClock),
}

impl Stamps {
    /// The time of a frame whose CQE carries `cqe_ts`.
    pub fn time(&self, cqe_ts: u64) -> Duration {
        match self {
            Stamps::Host => host_time(),
            Stamps::Device(c) => c.host_time(cqe_ts),
        }
    }

    /// What the start line says of them.
    pub fn describe(&self) -> String {
        match self {
            Stamps::Host => "host clock when polled (--host-time)".into(),
            Stamps::Device(c) => format!(
                "device clock (CQE timestamps, {} kHz, anchored to the host clock at the start)",
                c.khz()
            ),
        }
    }
}

/// The section comment of a `--pcapng` capture: where its timestamps
/// come from.
pub fn pcap_comment(host_time: bool) -> &'static str {
    if host_time {
        "hca capture: timestamps from the host's clock when each completion was polled (--host-time)"
    } else {
        "hca capture: timestamps from the device clock (each receive CQE's timestamp, device clock ticks), anchored to the host's clock when the capture started"
    }
}

/// The pcap (or with `--pcapng` pcapng) writer of `-w`, its header
/// written into `w`.
fn pcap_writer<'o>(
    a: &CaptureArgs,
    w: Box<dyn Write + 'o>,
) -> std::io::Result<PcapWriter<Box<dyn Write + 'o>>> {
    if a.pcapng {
        let d = format!("hca capture, port {}", a.port);
        PcapWriter::new_ng(w, pcap_comment(a.host_time), &d)
    } else {
        PcapWriter::new(w)
    }
}

/// SIGINT as a flag the receive loop looks at, for the time it is
/// installed (a second SIGINT once the flag is set exits at once, with
/// status 130).
struct Interrupt {
    flag: Arc<AtomicBool>,
    ids: Vec<signal_hook::SigId>,
}

impl Interrupt {
    fn install() -> Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        let sig = signal_hook::consts::SIGINT;
        let err = |e| ToolError::Usage(format!("capture: installing the SIGINT handler: {e}"));
        // The exit first: on the first SIGINT the flag is not yet set when
        // it looks.
        let exit = signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone())
            .map_err(err)?;
        let set = signal_hook::flag::register(sig, flag.clone()).map_err(err)?;
        Ok(Self {
            flag,
            ids: vec![exit, set],
        })
    }

    fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Runs `hca capture`.
pub fn run(
    a: &CaptureArgs,
    sel: &Selection,
    open: &OpenOptions,
    out: &mut dyn Write,
) -> Result<Counters> {
    a.validate()?;
    let m = a.flow_match()?;
    let stop = Interrupt::install()?;
    // The output first: a file that cannot be written is known before any
    // bring-up.
    let mut sink = match &a.write {
        Some(p) if p.as_os_str() == "-" => Sink::Pcap(
            pcap_writer(a, Box::new(out)).map_err(ToolError::Output)?,
            "stdout".into(),
        ),
        Some(p) => {
            let file_err = |source| ToolError::File {
                path: p.clone(),
                source,
            };
            let f = std::fs::File::create(p).map_err(file_err)?;
            Sink::Pcap(
                pcap_writer(a, Box::new(std::io::BufWriter::new(f))).map_err(file_err)?,
                p.display().to_string(),
            )
        }
        None if a.pcapng => {
            return Err(ToolError::Usage(
                "--pcapng is the format of -w FILE: give -w too".into(),
            ));
        }
        None => Sink::Lines(out),
    };
    let dev = Device::open(sel, open)?;
    let r = capture(a, &m, &dev, &mut sink, &stop);
    let r = dev.finish(r);
    if let Sink::Pcap(w, name) = &mut sink {
        let flushed = w.flush().map_err(|source| ToolError::File {
            path: PathBuf::from(name.as_str()),
            source,
        });
        let c = r?;
        flushed?;
        return Ok(c);
    }
    r
}

fn capture(
    a: &CaptureArgs,
    m: &FlowMatch,
    dev: &Device,
    sink: &mut Sink<'_>,
    stop: &Interrupt,
) -> Result<Counters> {
    let hca = dev.hca();
    let emu = dev.emulator();
    let hint = if emu.is_some() && a.port == WIRE_PORT {
        " (an emulated HCA's port is up only when it is cabled: give --wire udp:LOCAL,PEER or unix:LOCAL,PEER, or HCA_EMU_WIRE)"
    } else {
        ""
    };
    let spec = RawSpec {
        port: a.port,
        rx: a.buffers,
        tx: 0,
        slot: a.buf_size as usize,
    };
    let (mut rq, mac) = RawQp::open_counted(hca, "capture", spec, hint)?;
    let what = if m.criteria_enable() == 0 {
        "every frame (catch-all rule)".to_string()
    } else {
        "the frames the selectors match".to_string()
    };
    let stamps = if a.host_time {
        Ok(Stamps::Host)
    } else {
        DeviceClock::anchor(hca, host_time)
            .map(Stamps::Device)
            .map_err(|e| {
                ToolError::driver(
                    "capture: the device clock for CQE timestamps (--host-time takes the host's instead)",
                    e,
                )
            })
    };
    let stamps = match stamps {
        Ok(s) => s,
        Err(e) => {
            let _ = rq.close();
            return Err(e);
        }
    };
    let tir = match rq.tir() {
        Ok(t) => t,
        Err(e) => {
            let _ = rq.close();
            return Err(e);
        }
    };
    // The device's drops are counted from here.
    let emu = emu.map(|e| (e, emu_drops(e)));
    // Said once the rule is in place: from here on frames are captured.
    let r = with_steering(hca, m, tir, || {
        eprintln!(
            "hca capture: port {} ({}) of {}: {what}; {} buffers of {} bytes; timestamps: {}",
            a.port,
            mac_text(&mac),
            dev.desc().describe,
            a.buffers,
            a.buf_size,
            stamps.describe()
        );
        receive(a, &mut rq, emu, sink, &stamps, stop)
    });
    let closed = rq.close();
    let c = r?;
    closed?;
    Ok(c)
}

fn receive(
    a: &CaptureArgs,
    rq: &mut RawQp<crate::device::ToolPlatform>,
    emu: Option<(&EmuHca, EmuDrops)>,
    sink: &mut Sink<'_>,
    stamps: &Stamps,
    stop: &Interrupt,
) -> Result<Counters> {
    let hca = rq.raw.ctx.hca().clone();
    let mut st = Stats {
        c: Counters::default(),
        start: Instant::now(),
        emu,
    };
    let deadline = a.duration.map(|d| st.start + Duration::from_secs_f64(d));
    let mut last_report = Instant::now();
    let mut last_service = Instant::now();
    let (mut c, mut cqe) = (Completion::default(), RxCqe::default());
    let mut frame = Vec::with_capacity(a.buf_size as usize);
    let mut idle = 0u32;
    loop {
        if a.count.is_some_and(|c| st.c.frames >= c) {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if stop.raised() {
            eprintln!("hca capture: interrupted (SIGINT)");
            break;
        }
        let mut n = 0;
        while n < 32 {
            let got = rq
                .raw
                .recv_cq
                .poll_one_rx(&mut c, &mut cqe)
                .map_err(|e| ToolError::driver("polling the receive CQ", e))?;
            if !got {
                break;
            }
            n += 1;
            let w = WorkCompletion::from(c);
            match w.status {
                WcStatus::Success => {
                    if a.count.is_some_and(|c| st.c.frames >= c) {
                        // Beyond -c: not captured (the rule is removed next).
                        continue;
                    }
                    rq.read_frame(&w, &mut frame)?;
                    let t = stamps.time(cqe.timestamp());
                    match sink {
                        Sink::Pcap(p, _) => p.frame_at(t, &frame),
                        Sink::Lines(o) => writeln!(o, "{}", summary(t, &frame))?,
                    }
                    st.c.frames += 1;
                    st.c.bytes += frame.len() as u64;
                    rq.repost(w.wr_id)?;
                }
                WcStatus::LocLenErr => {
                    st.c.oversize += 1;
                    rq.repost(w.wr_id)?;
                }
                s => {
                    return Err(ToolError::Usage(format!(
                        "capture: receive buffer {} completed with {s} ({}), vendor error {:#x}",
                        w.wr_id, s as u8, w.vendor_err
                    )));
                }
            }
        }
        if n > 0 {
            idle = 0;
            match sink {
                Sink::Pcap(p, name) => p.flush().map_err(|source| ToolError::File {
                    path: PathBuf::from(name.as_str()),
                    source,
                })?,
                Sink::Lines(o) => o.flush()?,
            }
        } else {
            idle = idle.wrapping_add(1);
            hca.platform().relax();
            if idle > 1024 {
                // Nothing for a while: give the CPU back.
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if last_service.elapsed() >= Duration::from_millis(20) {
            last_service = Instant::now();
            match hca.service() {
                Ok(_) | Err(hca_driver::Error::InvalidEqe { .. }) => {}
                Err(e) => return Err(ToolError::driver("servicing the HCA", e)),
            }
        }
        if a.verbose && last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            eprintln!("{}", st.line("", rq.rx_drops()));
        }
    }
    eprintln!("{}", st.line("done: ", rq.rx_drops()));
    Ok(st.c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: CaptureArgs,
    }

    fn args(v: &[&str]) -> CaptureArgs {
        let mut all = vec!["t"];
        all.extend(v);
        T::try_parse_from(all).unwrap().a
    }

    #[test]
    fn selectors_become_flow_specs() {
        assert!(args(&[]).specs().unwrap().is_empty());
        let s = args(&[
            "--eth-dst",
            "02:00:00:00:00:0b",
            "--vlan",
            "5",
            "--dst-ip",
            "10.0.0.2",
            "--proto",
            "udp",
            "--dst-port",
            "4000",
        ])
        .specs()
        .unwrap();
        assert_eq!(s.len(), 3);
        assert!(matches!(s[0], FlowSpec::Eth { dst_mac, vlan_tag, .. }
            if dst_mac.value == [2, 0, 0, 0, 0, 0xb] && vlan_tag == Masked::exact(5, 0xfff)));
        assert!(matches!(s[1], FlowSpec::Ipv4 { dst_ip, src_ip }
            if dst_ip.value == [10, 0, 0, 2] && src_ip.mask == [0; 4]));
        assert!(matches!(s[2], FlowSpec::Udp { dst_port, .. } if dst_port.value == 4000));
        let s = args(&["--src-ip", "fe80::1"]).specs().unwrap();
        assert!(matches!(s[0], FlowSpec::Ipv6 { .. }));
    }

    #[test]
    fn bad_selectors_are_refused_by_name() {
        let e = |v: &[&str]| args(v).flow_match().unwrap_err().to_string();
        assert!(e(&["--eth-dst", "02:00:00:00:00"]).contains("--eth-dst"));
        assert!(e(&["--eth-src", "zz:00:00:00:00:00"]).contains("not a MAC"));
        assert!(e(&["--ethertype", "ipx"]).contains("--ethertype"));
        assert!(e(&["--vlan", "4096"]).contains("12 bits"));
        assert!(e(&["--src-ip", "10.0.0.1", "--dst-ip", "::1"]).contains("IPv6"));
        assert!(e(&["--dst-port", "1"]).contains("--proto"));
        assert!(e(&["--sniffer", "--vlan", "1"]).contains("--sniffer"));
        assert!(e(&["--ethertype", "0x86dd", "--dst-ip", "10.0.0.1"]).contains("contradict"));
    }

    #[test]
    fn device_stamps_become_the_pcap_record_times() {
        // 275 MHz; tick 5000 read when the host showed 1700000000.999999 s.
        let anchor = Duration::new(1_700_000_000, 999_999_000);
        let s = Stamps::Device(DeviceClock::new(275_000, 5_000, anchor).unwrap());
        let ticks = [5_000u64, 5_275, 5_276, 5_000 + 275_000_000 * 2 + 11, 4_725];
        let mut out = Vec::new();
        let mut w = PcapWriter::new(&mut out).unwrap();
        for (i, &t) in ticks.iter().enumerate() {
            w.frame_at(s.time(t), &[i as u8; 60]);
        }
        w.flush().unwrap();
        drop(w);
        // Each record's seconds and nanoseconds, as the pcap holds them.
        let word = |o: usize| u32::from_ne_bytes(out[o..o + 4].try_into().unwrap());
        let times: Vec<(u32, u32)> = (0..ticks.len())
            .map(|i| 24 + i * (16 + 60))
            .map(|o| (word(o), word(o + 4)))
            .collect();
        assert_eq!(
            times,
            vec![
                (1_700_000_000, 999_999_000),
                // +1 us: over the second.
                (1_700_000_001, 0),
                // +276 ticks: 1003.636... ns, truncated.
                (1_700_000_001, 3),
                // +2 s and 11 ticks (40 ns).
                (1_700_000_002, 999_999_040),
                // 275 ticks before the anchor: 1 us earlier.
                (1_700_000_000, 999_998_000),
            ]
        );
        assert!(
            s.describe()
                .starts_with("device clock (CQE timestamps, 275000 kHz")
        );
        assert!(Stamps::Host.describe().contains("--host-time"));
    }

    #[test]
    fn summary_names_addresses_and_ports() {
        let f = hca_emu::frame::Frame::new([2, 0, 0, 0, 0, 0xb], [2, 0, 0, 0, 0, 0xa])
            .l3(hca_emu::frame::L3::V4([10, 0, 0, 1], [10, 0, 0, 2]))
            .l4(hca_emu::frame::L4::Udp(1234, 4000))
            .build();
        let s = summary(Duration::from_secs(3661), &f);
        assert_eq!(
            s,
            "01:01:01.000000 02:00:00:00:00:0a > 02:00:00:00:00:0b, 10.0.0.1.1234 > 10.0.0.2.4000: UDP, length 42"
        );
        assert!(summary(Duration::ZERO, &[0; 3]).contains("truncated"));
    }
}
