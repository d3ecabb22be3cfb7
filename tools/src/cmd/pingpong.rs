//! `hca pingpong rc|uc|ud`: rdma-core's `ibv_rc_pingpong`,
//! `ibv_uc_pingpong` and `ibv_ud_pingpong`: the same exchange (each side
//! keeps `-r` receives posted; the client sends, each side sends its next
//! message once its previous send and the peer's message completed), the
//! same options, the same output lines, the same TCP exchange of
//! `LID:QPN:PSN:GID` (wire-compatible with the examples).
//!
//! Without a server host it runs both sides in this process (two emulated
//! HCAs cabled together, or one real function's port(s) looped back) and
//! prints what the client would print; `--server` (or `-p` alone) waits
//! for a client on a TCP port; a host connects to a server there;
//! `--tcp-loopback` runs a server and a client on two threads of this
//! process, each with its own emulated HCA, meeting over TCP.

use hca_driver::verbs::Context;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use clap::Args;
use hca_driver::IbMtu;
use hca_driver::verbs::{
    AccessFlags, Ah, Completion, QpCap, QpType, RecvWr, SendFlags, SendOp, SendWr,
};
use platform::Platform;
use serde::Serialize;

use crate::device::{Device, DevicePair, OpenOptions, Selection};
use crate::error::{Result, ToolError};
use crate::output::json;
use crate::peer::{self, ConnectionArgs, EXCHANGE_TIMEOUT, Mode};
use crate::progress::{self, Progress};
use crate::rdma::{
    ConnParams, Endpoint, Pacer, PortView, Side, SideSpec, failed_completion, gid_ipv6, port_view,
    random_psn, to_init, to_rts, with_side,
};

/// Arguments of `hca pingpong`.
#[derive(Debug, Args)]
pub struct PingpongArgs {
    /// The transport: rc, uc or ud (ibv_rc_pingpong, ibv_uc_pingpong,
    /// ibv_ud_pingpong).
    #[arg(value_name = "rc|uc|ud")]
    transport: String,

    #[command(flatten)]
    conn: ConnectionArgs,

    /// Size of the message to exchange (rc, uc: 4096; ud: 2048, or the
    /// port's active MTU if smaller).
    #[arg(short = 's', long = "size")]
    size: Option<u32>,

    /// Path MTU (rc, uc).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,

    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,

    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,

    /// Service level.
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    sl: u8,

    /// Sleep on CQ events instead of polling.
    #[arg(short = 'e', long = "events")]
    events: bool,

    /// Local port GID index (default: 1, the RoCE v2 link-local GID, on an
    /// Ethernet port, where RoCE needs a GID; 0 is the same GID as RoCE v1,
    /// as on Linux; none on InfiniBand).
    #[arg(short = 'g', long = "gid-idx")]
    gid_index: Option<u8>,

    /// Validate the contents of every message received.
    #[arg(short = 'c', long = "chk")]
    check: bool,
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// Bytes of the GRH area in front of a UD receive.
const GRH: usize = 40;
/// Bytes -c writes or checks at a time.
const CHUNK: usize = 64 * 1024;

/// The resolved parameters.
#[derive(Clone, Debug)]
struct Params {
    qp_type: QpType,
    name: &'static str,
    size: Option<u32>,
    mtu: IbMtu,
    rx_depth: u32,
    iters: u32,
    sl: u8,
    events: bool,
    gid_index: Option<u8>,
    ib_port: u8,
    check: bool,
}

impl Params {
    fn from_args(a: &PingpongArgs) -> Result<Self> {
        let (qp_type, name) = match a.transport.to_ascii_lowercase().as_str() {
            "rc" => (QpType::Rc, "RC"),
            "uc" => (QpType::Uc, "UC"),
            "ud" => (QpType::Ud, "UD"),
            other => {
                return Err(ToolError::Usage(format!(
                    "unknown pingpong transport '{other}' (one of rc, uc, ud)"
                )));
            }
        };
        let mtu = match a.mtu {
            256 => IbMtu::Mtu256,
            512 => IbMtu::Mtu512,
            1024 => IbMtu::Mtu1024,
            2048 => IbMtu::Mtu2048,
            4096 => IbMtu::Mtu4096,
            m => {
                return Err(ToolError::Usage(format!(
                    "-m {m}: the path MTU is one of 256, 512, 1024, 2048, 4096"
                )));
            }
        };
        if a.size == Some(0) {
            return Err(ToolError::Usage(
                "-s 0: a message has at least one byte".into(),
            ));
        }
        if a.iters == 0 {
            return Err(ToolError::Usage("-n 0: at least one exchange".into()));
        }
        if a.rx_depth < 2 {
            return Err(ToolError::Usage(format!(
                "-r {}: at least 2 receives must be posted at a time",
                a.rx_depth
            )));
        }
        if a.conn.ib_port == 0 {
            return Err(ToolError::Usage("-i 0: ports are numbered from 1".into()));
        }
        Ok(Self {
            qp_type,
            name,
            size: a.size,
            mtu,
            rx_depth: a.rx_depth,
            iters: a.iters,
            sl: a.sl,
            events: a.events,
            gid_index: a.gid_index,
            ib_port: a.conn.ib_port,
            check: a.check,
        })
    }

    /// The message size on a port of this active MTU.
    fn size_for(&self, port_mtu: IbMtu) -> Result<u32> {
        match (self.qp_type, self.size) {
            (QpType::Ud, Some(s)) if s > port_mtu.bytes() => Err(ToolError::Usage(format!(
                "-s {s}: requested size larger than port MTU ({}); a UD message fits in one packet",
                port_mtu.bytes()
            ))),
            (QpType::Ud, Some(s)) => Ok(s),
            (QpType::Ud, None) => Ok(2048.min(port_mtu.bytes())),
            (_, Some(s)) => Ok(s),
            (_, None) => Ok(4096),
        }
    }

    fn conn(&self) -> ConnParams {
        // ibv_rc_pingpong's modify_qp values.
        ConnParams {
            mtu: self.mtu,
            rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 1,
            sl: self.sl,
        }
    }

    fn side_spec(&self, size: u32) -> SideSpec {
        // One region for the messages sent and received, as the examples
        // have (a side sends only once the peer's message is in and its
        // own previous one completed), with the GRH in front on UD.
        let region = size as usize + if self.qp_type == QpType::Ud { GRH } else { 0 };
        SideSpec {
            qp_type: self.qp_type,
            qps: 1,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: self.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            cqe: self.rx_depth + 1,
            buf_len: region,
            access: AccessFlags::LOCAL_WRITE,
        }
    }
}

/// One side's address, as the examples print it.
#[derive(Clone, Debug, Serialize)]
pub struct Address {
    /// LID.
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID (`inet_ntop` form; `::` when none is used).
    pub gid: String,
}

impl Address {
    fn of(e: &Endpoint) -> Self {
        Self {
            lid: e.lid,
            qpn: e.qpn,
            psn: e.psn,
            gid: gid_ipv6(&e.gid),
        }
    }

    fn line(&self, label: &str) -> String {
        format!(
            "  {label} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid, self.qpn, self.psn, self.gid
        )
    }
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub struct PingpongReport {
    /// RC, UC or UD.
    pub transport: &'static str,
    /// `loopback`, `server`, `client`.
    pub role: &'static str,
    /// This side's address.
    pub local: Address,
    /// The peer's address.
    pub remote: Address,
    /// Message size.
    pub size: u32,
    /// Exchanges.
    pub iters: u32,
    /// `size * iters * 2`.
    pub bytes: u64,
    /// Elapsed time.
    pub seconds: f64,
    /// `bytes * 8 / usec`.
    pub mbit_per_sec: f64,
    /// `usec / iters`.
    pub usec_per_iter: f64,
    /// Completion events taken (with -e).
    pub cq_events: u64,
    /// Messages whose contents were checked (with -c).
    pub checked: u64,
}

impl PingpongReport {
    fn write(&self, out: &mut dyn Write, as_json: bool) -> Result<()> {
        if as_json {
            return json(out, self);
        }
        writeln!(out, "{}", self.local.line("local address: "))?;
        writeln!(out, "{}", self.remote.line("remote address:"))?;
        self.write_results(out)
    }

    /// What is left to print once the address lines were printed as they
    /// became known: the results (text), or everything (JSON).
    fn write_rest(&self, out: &mut dyn Write, as_json: bool) -> Result<()> {
        if as_json {
            return json(out, self);
        }
        self.write_results(out)
    }

    fn write_results(&self, out: &mut dyn Write) -> Result<()> {
        writeln!(
            out,
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
            self.bytes, self.seconds, self.mbit_per_sec
        )?;
        writeln!(
            out,
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            self.iters, self.seconds, self.usec_per_iter
        )?;
        Ok(())
    }
}

/// One side's exchange in progress (the examples' `scnt`, `rcnt`,
/// `routs`, `pending`).
struct Exchange {
    size: usize,
    iters: u32,
    rx_depth: u32,
    scnt: u32,
    rcnt: u32,
    routs: u32,
    pending: u64,
    inline: bool,
    events: bool,
    cq_events: u64,
    check: bool,
    checked: u64,
    ud: bool,
    /// The message as host bytes, for inline sends only (which are
    /// small): otherwise the message lives only in the buffer.
    msg: Vec<u8>,
    remote_qpn: u32,
    remote_tag: u8,
    my_tag: u8,
    /// The message content of ibv_*_pingpong (across TCP, where the peer
    /// may be one): see [`Exchange::pattern`].
    ibv_content: bool,
}

impl Exchange {
    fn done(&self) -> bool {
        self.scnt >= self.iters && self.rcnt >= self.iters
    }

    fn recv_len(&self) -> usize {
        self.size + if self.ud { GRH } else { 0 }
    }

    /// Where the message sent starts: where a received one lands, behind
    /// the GRH on UD.
    fn send_offset(&self) -> usize {
        if self.ud { GRH } else { 0 }
    }

    /// The byte `i` of message `k` a side with `tag` sends.
    /// Byte `i` of message `k` sent by the side with `tag`.
    fn pattern_of(&self, tag: u8, k: u32, i: usize) -> u8 {
        Self::pattern(self.ibv_content, tag, k, i)
    }

    /// Byte `i` of message `k` sent by the side with `tag`, in the
    /// content of ibv_*_pingpong if `ibv`.
    fn pattern(ibv: bool, tag: u8, k: u32, i: usize) -> u8 {
        if ibv {
            Self::ibv_pattern(i)
        } else {
            (k as u8).wrapping_add(i as u8).wrapping_mul(31) ^ tag
        }
    }

    /// What ibv_rc/uc/ud_pingpong -c puts in a message (rdma-core
    /// libibverbs/examples): its buffer is filled with 0x7b, the client
    /// writes `i / page_size % sizeof(char)`, that is 0, at the start of
    /// every page of the message, and the server checks those bytes (and
    /// echoes the buffer it receives into). A peer over TCP may be one of
    /// those programs, so both sides of a TCP exchange send exactly this
    /// and check every byte of what they receive against it. The page
    /// size is 4096 (x86_64, aarch64 with 4 KiB pages).
    fn ibv_pattern(i: usize) -> u8 {
        if i % 4096 == 0 { 0 } else { 0x7b }
    }

    fn post_recvs<P: Platform + 'static>(&mut self, s: &mut Side<P>, n: u32) -> Result<u32> {
        let sge = [s
            .mr
            .sge(0, self.recv_len() as u32)
            .map_err(|e| ToolError::driver("describing the receive buffer", e))?];
        let wr = RecvWr {
            wr_id: RECV_WRID,
            sgl: &sge,
        };
        for i in 0..n {
            if let Err(e) = s.qps[0].post_recv(&wr) {
                return if i == 0 {
                    Err(ToolError::driver(
                        format!("{}: posting a receive", s.name),
                        e,
                    ))
                } else {
                    Ok(i)
                };
            }
        }
        Ok(n)
    }

    fn post_send<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        ah: Option<&Ah<P>>,
    ) -> Result<()> {
        if self.check {
            let k = self.scnt;
            if self.inline {
                let (ibv, tag) = (self.ibv_content, self.my_tag);
                for (i, b) in self.msg.iter_mut().enumerate() {
                    *b = Self::pattern(ibv, tag, k, i);
                }
            } else {
                // Into the buffer a chunk at a time: no copy of the message.
                let mut chunk = [0u8; CHUNK];
                for at in (0..self.size).step_by(CHUNK) {
                    let n = CHUNK.min(self.size - at);
                    for (j, b) in chunk[..n].iter_mut().enumerate() {
                        *b = self.pattern_of(self.my_tag, k, at + j);
                    }
                    s.buf
                        .write(self.send_offset() + at, &chunk[..n])
                        .map_err(|e| ToolError::driver("writing the message", e))?;
                }
            }
        }
        let sge = [s
            .mr
            .sge(self.send_offset(), self.size as u32)
            .map_err(|e| ToolError::driver("describing the send buffer", e))?];
        let mut wr = SendWr::new(SEND_WRID, SendOp::Send).flags(SendFlags::SIGNALED);
        wr = if self.inline {
            wr.inline(&self.msg)
        } else {
            wr.sgl(&sge)
        };
        if let Some(ah) = ah {
            wr = wr.ud(ah.dest(self.remote_qpn, crate::rdma::QKEY));
        }
        s.qps[0]
            .post_send(&wr)
            .map_err(|e| ToolError::driver(format!("{}: posting a send", s.name), e))
    }

    /// The examples' `parse_single_wc`.
    fn completed<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        ah: Option<&Ah<P>>,
        c: &Completion,
    ) -> Result<()> {
        if !c.is_success() {
            let what = if c.wr_id() == RECV_WRID {
                "a receive"
            } else {
                "a send"
            };
            return Err(failed_completion(s.name, what, c));
        }
        match c.wr_id() {
            SEND_WRID => self.scnt += 1,
            RECV_WRID => {
                if self.check {
                    self.check_message(s, c)?;
                }
                self.routs -= 1;
                if self.routs <= 1 {
                    let want = self.rx_depth - self.routs;
                    self.routs += self.post_recvs(s, want)?;
                    if self.routs < self.rx_depth {
                        return Err(ToolError::Usage(format!(
                            "{}: couldn't post receive ({})",
                            s.name, self.routs
                        )));
                    }
                }
                self.rcnt += 1;
            }
            other => {
                return Err(ToolError::Usage(format!(
                    "{}: completion for unknown wr_id {other}",
                    s.name
                )));
            }
        }
        self.pending &= !c.wr_id();
        if self.scnt < self.iters && self.pending == 0 {
            self.post_send(s, ah)?;
            self.pending = RECV_WRID | SEND_WRID;
        }
        Ok(())
    }

    fn check_message<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        c: &Completion,
    ) -> Result<()> {
        let want_len = self.recv_len() as u32;
        if c.byte_len() != want_len {
            return Err(ToolError::Usage(format!(
                "{}: message {} has {} bytes, expected {want_len}",
                s.name,
                self.rcnt,
                c.byte_len()
            )));
        }
        let base = if self.ud { GRH } else { 0 };
        let k = self.rcnt;
        // A chunk at a time: no copy of the message.
        let mut got = [0u8; CHUNK];
        for at in (0..self.size).step_by(CHUNK) {
            let n = CHUNK.min(self.size - at);
            s.buf
                .read(base + at, &mut got[..n])
                .map_err(|e| ToolError::driver("reading the message", e))?;
            if let Some(j) = (0..n).find(|&j| got[j] != self.pattern_of(self.remote_tag, k, at + j))
            {
                return Err(ToolError::Usage(format!(
                    "{}: message {k} differs at byte {}: {:#04x}, expected {:#04x}",
                    s.name,
                    at + j,
                    got[j],
                    self.pattern_of(self.remote_tag, k, at + j)
                )));
            }
        }
        self.checked += 1;
        Ok(())
    }

    /// Polls (after an event with -e) and handles what completed; returns
    /// whether anything did.
    fn step<P: Platform + 'static>(&mut self, s: &mut Side<P>, ah: Option<&Ah<P>>) -> Result<bool> {
        if self.done() {
            return Ok(false);
        }
        if self.events {
            let n =
                s.cq.take_events()
                    .map_err(|e| ToolError::driver(format!("{}: taking CQ events", s.name), e))?;
            if n == 0 {
                return Ok(false);
            }
            self.cq_events += n;
            s.cq.req_notify(false);
        }
        let mut wc = [Completion::default(); 2];
        let mut any = false;
        loop {
            let n =
                s.cq.poll(&mut wc)
                    .map_err(|e| ToolError::driver(format!("{}: polling the CQ", s.name), e))?;
            for c in &wc[..n] {
                self.completed(s, ah, c)?;
            }
            any |= n > 0;
            if n < wc.len() {
                return Ok(any);
            }
        }
    }
}

/// Prepares one side: its QP to INIT, `rx_depth` receives, its address.
fn prepare<P: Platform + 'static>(
    s: &mut Side<P>,
    p: &Params,
    size: u32,
    port: &PortView,
    client: bool,
    ibv_content: bool,
) -> Result<(Exchange, Endpoint)> {
    to_init(&mut s.qps[0], p.ib_port, AccessFlags::NONE)
        .map_err(|e| ToolError::driver(format!("{}: modifying the QP to INIT", s.name), e))?;
    let inline = s.qps[0].cap().max_inline_data >= size;
    s.buf
        .fill(0, s.buf.len(), 0x7b)
        .map_err(|e| ToolError::driver("filling the buffer", e))?;
    let mut x = Exchange {
        size: size as usize,
        iters: p.iters,
        rx_depth: p.rx_depth,
        scnt: 0,
        rcnt: 0,
        routs: 0,
        pending: RECV_WRID,
        inline,
        events: p.events,
        cq_events: 0,
        check: p.check,
        checked: 0,
        ud: p.qp_type == QpType::Ud,
        msg: if inline {
            vec![0x7b; size as usize]
        } else {
            Vec::new()
        },
        remote_qpn: 0,
        my_tag: if client { 0x5a } else { 0xa5 },
        remote_tag: if client { 0xa5 } else { 0x5a },
        ibv_content,
    };
    x.routs = x.post_recvs(s, p.rx_depth)?;
    if x.routs < p.rx_depth {
        return Err(ToolError::Usage(format!(
            "{}: couldn't post receive ({})",
            s.name, x.routs
        )));
    }
    if p.events {
        s.cq.req_notify(false);
    }
    let me = Endpoint {
        lid: port.lid,
        qpn: s.qps[0].number().0,
        psn: random_psn(),
        gid: port.gid.0,
        rkey: 0,
        addr: 0,
    };
    Ok((x, me))
}

/// Connects one side's QP to `remote` (and makes the UD address handle).
fn connect<P: Platform>(
    s: &mut Side<P>,
    x: &mut Exchange,
    p: &Params,
    port: &PortView,
    me: &Endpoint,
    remote: &Endpoint,
) -> Result<Option<Ah<P>>> {
    let conn = p.conn();
    to_rts(&mut s.qps[0], port, remote, me.psn, &conn)
        .map_err(|e| ToolError::driver(format!("{}: connecting the QP", s.name), e))?;
    x.remote_qpn = remote.qpn;
    if p.qp_type != QpType::Ud {
        return Ok(None);
    }
    let mut attr = crate::rdma::path_to(port, remote, 1);
    attr.sl = p.sl;
    let ah = Ah::create(&s.pd, &attr)
        .map_err(|e| ToolError::driver(format!("{}: creating the address handle", s.name), e))?;
    Ok(Some(ah))
}

fn progress_line(p: &Progress, x: &Exchange, last: &mut Instant) {
    if last.elapsed() >= Duration::from_millis(100) {
        *last = Instant::now();
        progress::set(
            &p.status(),
            format!("pingpong: {} of {} exchanges", x.rcnt, x.iters),
        );
    }
}

fn report(
    p: &Params,
    role: &'static str,
    size: u32,
    me: &Endpoint,
    remote: &Endpoint,
    x: &Exchange,
    elapsed: Duration,
) -> PingpongReport {
    let usec = (elapsed.as_secs_f64() * 1e6).max(f64::MIN_POSITIVE);
    let bytes = u64::from(size) * u64::from(p.iters) * 2;
    PingpongReport {
        transport: p.name,
        role,
        local: Address::of(me),
        remote: Address::of(remote),
        size,
        iters: p.iters,
        bytes,
        seconds: usec / 1e6,
        mbit_per_sec: bytes as f64 * 8.0 / usec,
        usec_per_iter: usec / f64::from(p.iters),
        cq_events: x.cq_events,
        checked: x.checked,
    }
}

/// Both sides in this process, on one thread.
struct Loopback<'o> {
    p: Params,
    /// Where the address lines go as soon as they are known (text
    /// output), as the examples print them.
    early: Option<&'o mut dyn Write>,
}

/// Prints an address line at once (text output).
fn early_line(out: &mut Option<&mut dyn Write>, label: &str, e: &Endpoint) -> Result<()> {
    if let Some(w) = out.as_mut() {
        writeln!(w, "{}", Address::of(e).line(label))?;
        w.flush()?;
    }
    Ok(())
}

/// Runs both sides in this process: side A (the client) on `pair.a()`,
/// side B (the server) on `pair.b()`.
fn run_loopback(mut side: Loopback<'_>, pair: &DevicePair) -> Result<PingpongReport> {
    let (a, b, dev) = (pair.a(), pair.b(), pair.desc());
    let p = &side.p;
    let early = &mut side.early;
    let ctx_probe =
        Context::open(a).map_err(|e| ToolError::driver("client: opening a verbs context", e))?;
    let pa = port_view(&ctx_probe, "client", p.ib_port, p.gid_index, "")?;
    drop(ctx_probe);
    let size = p.size_for(pa.active_mtu)?;
    // Side B: the same port on another HCA, or port 2 of a two-port
    // function, else the same port (looped back).
    let port_b = if dev.two_hcas || a.caps().num_ports() < 2 {
        p.ib_port
    } else if p.ib_port == 1 {
        2
    } else {
        1
    };
    let spec = p.side_spec(size);
    with_side(a, "client", &spec, |sa| {
        with_side(b, "server", &spec, |sb| {
            let pb = port_view(&sb.ctx, "server", port_b, p.gid_index, "")?;
            let (mut xa, ea) = prepare(sa, p, size, &pa, true, false)?;
            let (mut xb, eb) = prepare(sb, p, size, &pb, false, false)?;
            early_line(early, "local address: ", &ea)?;
            early_line(early, "remote address:", &eb)?;
            let aha = connect(sa, &mut xa, p, &pa, &ea, &eb)?;
            let ahb = connect(sb, &mut xb, p, &pb, &eb, &ea)?;
            let progress = Progress::start("pingpong");
            let mut last = Instant::now();
            let mut pacer = Pacer::new(&[a, b]);
            if p.events {
                // Both sides on one HCA (one real function): sleep on
                // the client's completion vector (the CQs share it).
                pacer.sleep_on(sa.cq.eqn());
            }
            let start = Instant::now();
            xa.post_send(sa, aha.as_ref())?;
            xa.pending |= SEND_WRID;
            let mut client_done = None;
            while !(xa.done() && xb.done()) {
                let ga = xa.step(sa, aha.as_ref())?;
                if client_done.is_none() && xa.done() {
                    client_done = Some(start.elapsed());
                }
                let gb = xb.step(sb, ahb.as_ref())?;
                if ga || gb {
                    pacer.progress()?;
                    progress_line(&progress, &xa, &mut last);
                } else {
                    pacer.idle(|| {
                        format!(
                            "pingpong: the client sent {} and received {}, the server sent {} and received {} of {} messages",
                            xa.scnt, xa.rcnt, xb.scnt, xb.rcnt, p.iters
                        )
                    })?;
                }
            }
            let elapsed = client_done.unwrap_or_else(|| start.elapsed());
            drop(progress);
            Ok(report(p, "loopback", size, &ea, &eb, &xa, elapsed))
        })
    })
}

// ---- two processes --------------------------------------------------------

/// `"%04x:%06x:%06x:%s"` with the GID as 32 hexadecimal digits, and the
/// terminating NUL: 52 bytes (the examples' `msg`).
const WIRE_LEN: usize = 52;

fn to_wire(e: &Endpoint) -> [u8; WIRE_LEN] {
    let s = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        e.lid,
        e.qpn,
        e.psn,
        crate::output::hex_bytes(&e.gid)
    );
    let mut m = [0u8; WIRE_LEN];
    m[..s.len()].copy_from_slice(s.as_bytes());
    m
}

fn from_wire(m: &[u8], peer: &str) -> Result<Endpoint> {
    let bad = || {
        ToolError::Usage(format!(
            "the {peer} sent an address that is not LID:QPN:PSN:GID: {:?}",
            String::from_utf8_lossy(m).trim_end_matches('\0')
        ))
    };
    let text = std::str::from_utf8(m).map_err(|_| bad())?;
    let text = text.trim_end_matches('\0');
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 4 {
        return Err(bad());
    }
    let num = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
    let lid = u16::try_from(num(parts[0])?).map_err(|_| bad())?;
    let qpn = num(parts[1])?;
    let psn = num(parts[2])?;
    let gid = crate::rdma::parse_gid_hex(parts[3]).ok_or_else(bad)?;
    if qpn > 0xff_ffff || psn > 0xff_ffff {
        return Err(bad());
    }
    Ok(Endpoint {
        lid,
        qpn,
        psn,
        gid,
        rkey: 0,
        addr: 0,
    })
}

fn read_exact(s: &mut TcpStream, buf: &mut [u8], peer: &str, what: &str) -> Result<()> {
    s.set_read_timeout(Some(EXCHANGE_TIMEOUT))
        .map_err(|e| ToolError::Usage(format!("TCP connection to the {peer}: {e}")))?;
    s.read_exact(buf)
        .map_err(|e| ToolError::Usage(format!("couldn't read {what} from the {peer}: {e}")))
}

/// One side of two processes: the server or the client.
struct Split<'o> {
    p: Params,
    mode: Mode,
    /// The listener (server), bound before the client starts.
    listener: Option<std::net::TcpListener>,
    /// Where the address lines go as soon as they are known (text
    /// output).
    early: Option<&'o mut dyn Write>,
}

/// Runs this process's side on `device`: the client, or the server on its
/// listener.
fn run_split(mut side: Split<'_>, device: &Device) -> Result<PingpongReport> {
    let (hca, dev) = (device.hca(), device.desc());
    let p = &side.p;
    let print_to = &mut side.early;
    let client = matches!(side.mode, Mode::Client { .. });
    let who = if client { "client" } else { "server" };
    let peer_name = if client { "server" } else { "client" };
    let hint = if dev.selection == Selection::Emulator {
        peer::emulator_down_hint(&side.mode)
    } else {
        ""
    };
    // A client reaches its server first (an unreachable server is the
    // first thing to know), then looks at its port.
    let early = match &side.mode {
        Mode::Client { host, port } => Some(peer::connect(host, *port)?),
        _ => None,
    };
    let ctx_probe = Context::open(hca)
        .map_err(|e| ToolError::driver(format!("{who}: opening a verbs context"), e))?;
    let port = port_view(&ctx_probe, who, p.ib_port, p.gid_index, hint)?;
    drop(ctx_probe);
    let size = p.size_for(port.active_mtu)?;
    let spec = p.side_spec(size);
    with_side(hca, who, &spec, |s| {
        let (mut x, me) = prepare(s, p, size, &port, client, true)?;
        early_line(print_to, "local address: ", &me)?;
        // The exchange of the examples: the connection closes after it.
        let (remote, ah) = match early {
            Some(mut st) => {
                st.write_all(&to_wire(&me)).map_err(|e| {
                    ToolError::Usage(format!(
                        "couldn't send the local address to the server: {e}"
                    ))
                })?;
                let mut m = [0u8; WIRE_LEN];
                read_exact(&mut st, &mut m, peer_name, "the remote address")?;
                st.write_all(b"done\0")
                    .map_err(|e| ToolError::Usage(format!("couldn't write to the server: {e}")))?;
                drop(st);
                let remote = from_wire(&m, peer_name)?;
                let ah = connect(s, &mut x, p, &port, &me, &remote)?;
                (remote, ah)
            }
            _ => {
                let l = side
                    .listener
                    .as_ref()
                    .ok_or_else(|| ToolError::Usage("the server has no TCP listener".into()))?;
                let mut st = peer::accept(l)?;
                let mut m = [0u8; WIRE_LEN];
                read_exact(&mut st, &mut m, peer_name, "the remote address")?;
                let remote = from_wire(&m, peer_name)?;
                let ah = connect(s, &mut x, p, &port, &me, &remote)?;
                st.write_all(&to_wire(&me)).map_err(|e| {
                    ToolError::Usage(format!(
                        "couldn't send the local address to the client: {e}"
                    ))
                })?;
                let mut done = [0u8; 5];
                read_exact(&mut st, &mut done, peer_name, "\"done\"")?;
                if &done != b"done\0" {
                    return Err(ToolError::Usage(format!(
                        "the client sent {:?} instead of \"done\"",
                        String::from_utf8_lossy(&done)
                    )));
                }
                (remote, ah)
            }
        };
        early_line(print_to, "remote address:", &remote)?;
        let progress = Progress::start("pingpong");
        let mut last = Instant::now();
        let mut pacer = Pacer::new(&[hca]);
        if p.events {
            pacer.sleep_on(s.cq.eqn());
        }
        if client {
            x.post_send(s, ah.as_ref())?;
            x.pending |= SEND_WRID;
        }
        let start = Instant::now();
        while !x.done() {
            if x.step(s, ah.as_ref())? {
                pacer.progress()?;
                progress_line(&progress, &x, &mut last);
            } else {
                pacer.idle(|| {
                    format!(
                        "pingpong: sent {} and received {} of {} messages (is the {peer_name} still running?)",
                        x.scnt, x.rcnt, p.iters
                    )
                })?;
            }
        }
        let elapsed = start.elapsed();
        drop(progress);
        Ok(report(p, who, size, &me, &remote, &x, elapsed))
    })
}

/// Runs `hca pingpong`.
pub fn run(
    a: &PingpongArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let p = Params::from_args(a)?;
    let mode = a.conn.mode()?;
    // Text: the address lines as soon as they are known, the results at
    // the end; JSON: all at the end.
    match mode {
        Mode::Loopback => {
            let side = Loopback {
                p,
                early: (!as_json).then_some(&mut *out),
            };
            let pair = DevicePair::open(sel, open)?;
            let r = run_loopback(side, &pair);
            let r = pair.finish(r)?;
            r.write_rest(out, as_json)
        }
        Mode::Server { port } => {
            let listener = peer::listen(port)?;
            let side = Split {
                p,
                mode: mode.clone(),
                listener: Some(listener),
                early: (!as_json).then_some(&mut *out),
            };
            let dev = Device::open(sel, open)?;
            let r = run_split(side, &dev);
            let r = dev.finish(r)?;
            r.write_rest(out, as_json)
        }
        Mode::Client { .. } => {
            let side = Split {
                p,
                mode,
                listener: None,
                early: (!as_json).then_some(&mut *out),
            };
            let dev = Device::open(sel, open)?;
            let r = run_split(side, &dev);
            let r = dev.finish(r)?;
            r.write_rest(out, as_json)
        }
        Mode::TcpLoopback { port } => {
            if *sel != Selection::Emulator {
                return Err(ToolError::Usage(
                    "--tcp-loopback runs on the emulator only (on real HCAs run a server and a client)".into(),
                ));
            }
            let (ea, eb, cap) = crate::device::emulated_pair(open)?;
            let r = peer::tcp_loopback(
                port,
                |listener| {
                    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
                    let side = Split {
                        p: p.clone(),
                        mode: Mode::Server { port },
                        listener: Some(listener),
                        early: None,
                    };
                    let dev = Device::open_emulated(&eb, None, open.wait_mode)?;
                    let r = run_split(side, &dev);
                    dev.finish(r)
                },
                |port| {
                    // The client runs on this thread: its address lines go
                    // out as soon as they are known, as in client mode.
                    let side = Split {
                        p: p.clone(),
                        mode: Mode::Client {
                            host: "127.0.0.1".into(),
                            port,
                        },
                        listener: None,
                        early: (!as_json).then_some(&mut *out),
                    };
                    let dev =
                        Device::open_emulated(&ea, open.dump_commands.as_deref(), open.wait_mode)?;
                    let r = run_split(side, &dev);
                    dev.finish(r)
                },
            );
            let (server, client) = crate::device::end_capture(cap, &ea, r)?;
            if !as_json {
                let mut e = Vec::new();
                server.write(&mut e, false)?;
                for l in String::from_utf8_lossy(&e).lines() {
                    eprintln!("[server] {l}");
                }
            }
            client.write_rest(out, as_json)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_exchanges_carry_the_content_of_ibv_pingpong() {
        // 0 at the start of every 4096-byte page, 0x7b elsewhere, whatever
        // the side and the message number.
        for (tag, k) in [(0x5a, 0), (0xa5, 7)] {
            let m: Vec<u8> = (0..9000)
                .map(|i| Exchange::pattern(true, tag, k, i))
                .collect();
            for (i, b) in m.iter().enumerate() {
                assert_eq!(*b, if i % 4096 == 0 { 0 } else { 0x7b }, "byte {i}");
            }
        }
        // In one process the two sides and the messages differ.
        assert_ne!(
            Exchange::pattern(false, 0x5a, 0, 3),
            Exchange::pattern(false, 0xa5, 0, 3)
        );
        assert_ne!(
            Exchange::pattern(false, 0x5a, 0, 3),
            Exchange::pattern(false, 0x5a, 1, 3)
        );
    }

    #[test]
    fn wire_format_is_the_examples() {
        let e = Endpoint {
            lid: 0x12,
            qpn: 0x9b3,
            psn: 0xb4c2fc,
            gid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x7e, 0xfe, 0x90, 0xff, 0xfe, 0x58, 0x7d, 0x01,
            ],
            rkey: 0,
            addr: 0,
        };
        let w = to_wire(&e);
        // sprintf("%04x:%06x:%06x:%s") with the GID's 32 hex digits, NUL.
        assert_eq!(
            &w[..51],
            b"0012:0009b3:b4c2fc:fe800000000000007efe90fffe587d01"
        );
        assert_eq!(w[51], 0);
        assert_eq!(from_wire(&w, "peer").unwrap(), e);
        for bad in [
            &b"0012:0009b3:b4c2fc"[..],
            b"zz12:0009b3:b4c2fc:fe800000000000007efe90fffe587d01",
            b"0012:1009b3ff:b4c2fc:fe800000000000007efe90fffe587d01",
            b"0012:0009b3:b4c2fc:fe80",
            &[0xff; 52][..],
        ] {
            let e = from_wire(bad, "server").unwrap_err().to_string();
            assert!(e.contains("the server sent an address"), "{e}");
        }
    }

    #[test]
    fn modes() {
        use crate::peer::{DEFAULT_PORT, Mode};
        assert_eq!(
            Mode::from_args(None, None, false, false).unwrap(),
            Mode::Loopback
        );
        assert_eq!(
            Mode::from_args(None, None, true, false).unwrap(),
            Mode::Server { port: DEFAULT_PORT }
        );
        assert_eq!(
            Mode::from_args(None, Some(7), false, false).unwrap(),
            Mode::Server { port: 7 }
        );
        assert_eq!(
            Mode::from_args(Some("h"), None, false, false).unwrap(),
            Mode::Client {
                host: "h".into(),
                port: DEFAULT_PORT
            }
        );
        assert_eq!(
            Mode::from_args(None, None, false, true).unwrap(),
            Mode::TcpLoopback { port: 0 }
        );
        assert!(Mode::from_args(Some("h"), None, true, false).is_err());
        assert!(Mode::from_args(Some("h"), None, false, true).is_err());
        assert!(Mode::from_args(None, None, true, true).is_err());
    }
}
