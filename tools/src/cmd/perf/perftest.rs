//! perftest's out-of-band exchange over TCP (its socket mode, not rdma_cm),
//! as perftest 4.5/6.x (`ib_write_bw` and friends) puts it on the socket.
//!
//! Every step is symmetric: the client (the side given a server name)
//! writes its part first and then reads the peer's; the server reads first
//! and then writes. Each part has a fixed size known to both sides:
//!
//! 1. versions: a 16-byte NUL-padded version string (`"6.06"`);
//! 2. system data (peer version >= 5.32): the cycle buffer, then the cache
//!    line size, each a 4-byte big-endian int; both take the larger;
//! 3. MTU (peer version >= 5.1): the `ibv_mtu` enum value as decimal text,
//!    2 bytes (`"3\0"`) from peer version 5.31 on; both take the smaller;
//! 4. per QP, the destination (`pingpong_dest`): LID, outstanding reads,
//!    QPN, PSN, rkey, vaddr, the GID (when used), the SRQ number as colon-separated
//!    zero-padded hex text with a trailing NUL, 108 bytes with the GID
//!    (always on RoCE), 59 without;
//! 5. a hand shake (one more destination exchange) before the test and
//!    between phases;
//! 6. bandwidth tests: the reports, each field a separate exchange of 8
//!    big-endian bytes (size, iterations, peak, average, message rate);
//! 7. closing: a hand shake, then each side writes `"done\0"` and closes.

use std::io::{Read, Write};

use hca_driver::IbMtu;

use crate::error::{Result, ToolError};
use crate::rdma::Endpoint;

use super::report;

/// The version this side announces (Debian bookworm's perftest).
pub const VERSION: &str = "6.06";
/// Size of the version field (perftest's `MAX_VERSION`).
pub const VERSION_LEN: usize = 16;
/// Size of a destination without a GID (perftest's `KEY_MSG_SIZE`).
pub const KEY_MSG_SIZE: usize = 59;
/// Size of a destination with a GID (perftest's `KEY_MSG_SIZE_GID`).
pub const KEY_MSG_SIZE_GID: usize = 108;
/// The oldest peer version this exchange speaks (8-byte iteration counts
/// in the reports, 2-byte MTU text, system data).
pub const MIN_PEER_VERSION: f64 = 5.33;

/// One QP's destination as perftest exchanges it (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READs / atomics the side accepts.
    pub out_reads: u16,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The first PSN (24 bits).
    pub psn: u32,
    /// The remote key of the side's buffer.
    pub rkey: u32,
    /// The virtual address of the side's buffer.
    pub vaddr: u64,
    /// The GID (`None`: the InfiniBand form without one).
    pub gid: Option<[u8; 16]>,
    /// The SRQ number (XRC/DC; 0 otherwise).
    pub srqn: u32,
}

fn bad(what: impl Into<String>) -> ToolError {
    ToolError::Usage(format!("perftest exchange: {}", what.into()))
}

impl Dest {
    /// The bytes perftest writes for this destination.
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.qpn > 0xff_ffff {
            return Err(bad(format!("QPN {:#x} does not fit 24 bits", self.qpn)));
        }
        if self.psn > 0xff_ffff {
            return Err(bad(format!("PSN {:#x} does not fit 24 bits", self.psn)));
        }
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        let size = match &self.gid {
            Some(g) => {
                for b in g {
                    s.push_str(&format!(":{b:02x}"));
                }
                s.push_str(&format!(":{:08x}:", self.srqn));
                KEY_MSG_SIZE_GID
            }
            None => {
                s.push_str(&format!(":{:08x}", self.srqn));
                KEY_MSG_SIZE
            }
        };
        let mut v = s.into_bytes();
        // The text and its NUL fill the message exactly.
        debug_assert_eq!(v.len() + 1, size);
        v.resize(size, 0);
        Ok(v)
    }

    /// Parses what a perftest peer wrote (`with_gid`: the 108-byte form).
    pub fn decode(msg: &[u8], with_gid: bool) -> Result<Self> {
        let size = if with_gid {
            KEY_MSG_SIZE_GID
        } else {
            KEY_MSG_SIZE
        };
        if msg.len() != size {
            return Err(bad(format!(
                "a destination is {size} bytes, got {}",
                msg.len()
            )));
        }
        let end = msg
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad("the destination is not NUL-terminated"))?;
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| bad("the destination is not ASCII text"))?;
        let text = text.strip_suffix(':').unwrap_or(text);
        let fields: Vec<&str> = text.split(':').collect();
        let want = if with_gid { 23 } else { 7 };
        if fields.len() != want {
            return Err(bad(format!(
                "a destination has {want} fields, got {} in {text:?}",
                fields.len()
            )));
        }
        let hex = |i: usize, name: &str, max: u64| -> Result<u64> {
            let f = fields[i];
            let v = u64::from_str_radix(f, 16)
                .map_err(|_| bad(format!("{name} {f:?} is not hexadecimal")))?;
            if v > max {
                return Err(bad(format!("{name} {v:#x} is out of range (max {max:#x})")));
            }
            Ok(v)
        };
        let gid = if with_gid {
            let mut g = [0u8; 16];
            for (i, b) in g.iter_mut().enumerate() {
                *b = hex(6 + i, "a GID byte", 0xff)? as u8;
            }
            Some(g)
        } else {
            None
        };
        Ok(Dest {
            lid: hex(0, "the LID", 0xffff)? as u16,
            out_reads: hex(1, "out_reads", 0xffff)? as u16,
            qpn: hex(2, "the QPN", 0xff_ffff)? as u32,
            psn: hex(3, "the PSN", 0xff_ffff)? as u32,
            rkey: hex(4, "the rkey", 0xffff_ffff)? as u32,
            vaddr: hex(5, "the vaddr", u64::MAX)?,
            gid,
            srqn: hex(want - 1, "the SRQ number", 0xffff_ffff)? as u32,
        })
    }

    /// The destination perftest sends for one of this tool's QPs (always
    /// with the GID: the emulated port is Ethernet).
    pub fn from_endpoint(e: &Endpoint, out_reads: u8) -> Self {
        Dest {
            lid: e.lid,
            out_reads: out_reads.into(),
            qpn: e.qpn,
            psn: e.psn,
            rkey: e.rkey,
            vaddr: e.addr,
            gid: Some(e.gid),
            srqn: 0,
        }
    }

    /// The peer's QP as this tool connects to it.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            lid: self.lid,
            qpn: self.qpn,
            psn: self.psn,
            gid: self.gid.unwrap_or([0; 16]),
            rkey: self.rkey,
            addr: self.vaddr,
        }
    }

    /// Whether the GID is an IPv4-mapped address (`::ffff:a.b.c.d`).
    fn v4_mapped(&self) -> bool {
        self.gid
            .is_some_and(|g| g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff)
    }
}

/// What a bandwidth side reports to the other (`struct bw_report_data`,
/// the fields perftest exchanges without `--report-per-port`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth (MiB/s or Gb/s).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate (Mpps).
    pub msg_rate: f64,
}

/// The `ibv_mtu` enum value of an MTU.
pub fn mtu_enum(m: IbMtu) -> u8 {
    match m.bytes() {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// The MTU of an `ibv_mtu` enum value.
pub fn mtu_of_enum(v: u8) -> Option<IbMtu> {
    match v {
        1..=5 => IbMtu::fitting(128u32 << v),
        _ => None,
    }
}

/// perftest's `atof`: the leading decimal number of a string.
fn leading_number(s: &str) -> Option<f64> {
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (c == '.' && i > 0)))
        .map_or(s.len(), |(i, _)| i);
    s[..end].parse().ok()
}

/// One side of perftest's socket exchange.
pub struct Exchange<S> {
    s: S,
    client: bool,
}

impl<S: Read + Write> Exchange<S> {
    /// Wraps a connected socket; `client`: this side connected.
    pub fn new(s: S, client: bool) -> Self {
        Exchange { s, client }
    }

    /// The socket.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.s
    }

    fn read(&mut self, n: usize, what: &str) -> Result<Vec<u8>> {
        self.read_serviced(n, what, &mut || Ok(()))
    }

    /// Reads `n` bytes; while the socket's read timeout expires with
    /// nothing, runs `idle` (servicing the HCA) and keeps what came.
    fn read_serviced(
        &mut self,
        n: usize,
        what: &str,
        idle: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.s.read(&mut v[got..]) {
                Ok(0) => {
                    return Err(bad(format!(
                        "the peer closed the connection after {got} of the {n} bytes of its {what} \
                         (is the peer perftest, in socket mode, with the same test and options?)"
                    )));
                }
                Ok(k) => got += k,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    idle()?
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(bad(format!("reading the peer's {what} ({n} bytes): {e}")));
                }
            }
        }
        Ok(v)
    }

    fn write(&mut self, b: &[u8], what: &str) -> Result<()> {
        self.s
            .write_all(b)
            .and_then(|_| self.s.flush())
            .map_err(|e| bad(format!("writing this side's {what}: {e}")))
    }

    /// One symmetric exchange of `mine` for the peer's `n` bytes.
    fn xchg(&mut self, mine: &[u8], n: usize, what: &str) -> Result<Vec<u8>> {
        if self.client {
            self.write(mine, what)?;
            self.read(n, what)
        } else {
            let r = self.read(n, what)?;
            self.write(mine, what)?;
            Ok(r)
        }
    }

    /// Exchanges versions; refuses a peer older than [`MIN_PEER_VERSION`].
    pub fn versions(&mut self) -> Result<String> {
        let mut mine = [0u8; VERSION_LEN];
        mine[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let r = self.xchg(&mine, VERSION_LEN, "version")?;
        let end = r.iter().position(|&b| b == 0).unwrap_or(r.len());
        let v = String::from_utf8_lossy(&r[..end]).into_owned();
        match leading_number(&v) {
            Some(n) if n >= MIN_PEER_VERSION => {}
            Some(_) => {
                return Err(bad(format!(
                    "the peer is perftest {v}; this side speaks {MIN_PEER_VERSION} and later"
                )));
            }
            None => return Err(bad(format!("the peer's version {v:?} is not a number"))),
        }
        Ok(v)
    }

    /// Exchanges the cycle buffer and cache line size; returns the larger
    /// of each.
    pub fn sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32)> {
        let mut out = [0u32; 2];
        for (i, (v, what)) in [
            (cycle_buffer, "cycle buffer"),
            (cache_line, "cache line size"),
        ]
        .into_iter()
        .enumerate()
        {
            let r = self.xchg(&(v as i32).to_be_bytes(), 4, what)?;
            let rem = i32::from_be_bytes([r[0], r[1], r[2], r[3]]);
            if rem <= 0 {
                return Err(bad(format!("the peer's {what} is {rem}")));
            }
            out[i] = v.max(rem as u32);
        }
        Ok((out[0], out[1]))
    }

    /// Exchanges the MTUs; returns the smaller (perftest ignores an
    /// invalid peer value and keeps its own).
    pub fn mtu(&mut self, mine: IbMtu) -> Result<IbMtu> {
        let v = mtu_enum(mine);
        let r = self.xchg(&[b'0' + v, 0], 2, "MTU")?;
        let end = r.iter().position(|&b| b == 0).unwrap_or(r.len());
        let rem = std::str::from_utf8(&r[..end])
            .ok()
            .and_then(|s| s.parse::<u8>().ok())
            .and_then(mtu_of_enum);
        Ok(match rem {
            Some(m) if m.bytes() < mine.bytes() => m,
            _ => mine,
        })
    }

    /// Exchanges one destination (a QP's, or the hand shake).
    pub fn hand_shake(&mut self, mine: &Dest) -> Result<Dest> {
        self.hand_shake_serviced(mine, &mut || Ok(()))
    }

    /// [`Exchange::hand_shake`], running `idle` while the peer's part is
    /// awaited (set a read timeout on the socket for it to run).
    pub fn hand_shake_serviced(
        &mut self,
        mine: &Dest,
        idle: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Dest> {
        let b = mine.encode()?;
        let r = if self.client {
            self.write(&b, "destination")?;
            self.read_serviced(b.len(), "destination", idle)?
        } else {
            let r = self.read_serviced(b.len(), "destination", idle)?;
            self.write(&b, "destination")?;
            r
        };
        let d = Dest::decode(&r, mine.gid.is_some())?;
        if mine.gid.is_some() && mine.v4_mapped() != d.v4_mapped() {
            return Err(bad(
                "one side's GID is IPv4-mapped (RoCE v2 over IPv4), the other's is not: \
                 choose GIDs of the same kind (-x)",
            ));
        }
        Ok(d)
    }

    /// Exchanges the bandwidth reports.
    pub fn bw_report(&mut self, mine: &BwReport) -> Result<BwReport> {
        let size = u64::from_be_bytes(self.field(mine.size.to_be_bytes(), "report size")?);
        let iters = u64::from_be_bytes(self.field(mine.iters.to_be_bytes(), "report iterations")?);
        let f = |me: &mut Self, v: f64, what| -> Result<f64> {
            Ok(f64::from_bits(u64::from_be_bytes(
                me.field(v.to_bits().to_be_bytes(), what)?,
            )))
        };
        let bw_peak = f(self, mine.bw_peak, "peak bandwidth")?;
        let bw_avg = f(self, mine.bw_avg, "average bandwidth")?;
        let msg_rate = f(self, mine.msg_rate, "message rate")?;
        Ok(BwReport {
            size,
            iters,
            bw_peak,
            bw_avg,
            msg_rate,
        })
    }

    fn field(&mut self, b: [u8; 8], what: &str) -> Result<[u8; 8]> {
        let r = self.xchg(&b, 8, what)?;
        let mut o = [0u8; 8];
        o.copy_from_slice(&r);
        Ok(o)
    }

    /// Closes as perftest does: a hand shake (serviced, as in
    /// [`Exchange::hand_shake_serviced`]), then `"done\0"`.
    pub fn close(mut self, mine: &Dest, idle: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.hand_shake_serviced(mine, idle)?;
        self.write(b"done\0", "closing word")
    }
}

// ---- hca perf as a perftest server or client ------------------------------

/// The order of perftest's exchange for a test (perftest 4.5/6.x, one
/// size, half duplex), after the versions, system data and MTU: each side
/// exchanges its QPs, connects, exchanges them again and hand shakes once
/// more before the test (with the receives posted); latency tests other
/// than SEND start with one more hand shake, SEND tests hand shake right
/// after connecting.
struct Plan {
    /// A hand shake before the QPs (write/read/atomic latency).
    one_first: bool,
    /// A hand shake right after connecting (SEND tests).
    one_after_connect: bool,
    /// A hand shake and the bandwidth reports after the test
    /// (write/read/atomic bandwidth).
    reports: bool,
    /// perftest's close (every test but write latency, whose sides just
    /// exit).
    close: bool,
}

impl Plan {
    fn of(verb: super::spec::Verb, bw: bool) -> Self {
        use super::spec::Verb;
        Plan {
            one_first: !bw && verb != Verb::Send,
            one_after_connect: verb == Verb::Send,
            reports: bw && verb != Verb::Send,
            close: bw || verb != Verb::Write,
        }
    }
}

/// How long the serviced waits block on the socket between HCA services.
const SERVICE_TICK: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs one side of a test against perftest (or another `hca perf
/// --perftest`): the exchange as perftest does it, one message size, then
/// the bandwidth reports (bandwidth tests) and perftest's close.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_side<P: platform::Platform + 'static>(
    spec: &super::spec::Spec,
    client: bool,
    stream: std::net::TcpStream,
    hca: &std::sync::Arc<hca_driver::Hca<P>>,
    dev: &crate::device::DeviceDesc,
    port: &crate::rdma::PortView,
    printer: &mut super::report::Printer<'_>,
) -> Result<()> {
    use super::engine::Peer;
    use super::protocol::min_mtu;
    use super::report::PerfReport;
    use super::side::{Engine, connect_all, inline_for, local_endpoints};
    use report::{BwRow, Row};
    let mut spec = spec.clone();
    if spec.sizes.len() != 1 || spec.duration.is_some() {
        return Err(ToolError::Usage(
            "--perftest runs one message size for a number of iterations (no -a, no -D)".into(),
        ));
    }
    let who = if client { "client" } else { "server" };
    let mut x = Exchange::new(stream, client);
    x.versions()?;
    // perftest's cycle buffer is a page; a perftest peer moves its remote
    // address through one of the agreed size (both take the larger) from
    // the address given, so each QP's region here is at least that long.
    let (cycle, _) = x.sys_data(4096, 64)?;
    let mtu = spec.fit(port)?;
    let mtu = x.mtu(mtu)?;
    let mtu = min_mtu(mtu, spec.mtu.max(256));
    spec.mtu = mtu.bytes();
    let my_reads = spec.out_reads(&[&**hca])?;
    let lay = super::engine::Layout {
        slot: spec.layout().slot.max(cycle as usize).next_multiple_of(64),
    };
    let mut sspec = spec.side_spec();
    sspec.buf_len = 2 * spec.qps as usize * lay.slot;
    crate::rdma::with_side(hca, who, &sspec, |s| {
        let me = local_endpoints(s, port, &spec, lay)?;
        let sync = Dest::from_endpoint(&me[0], my_reads);
        let mine: Vec<Dest> = me
            .iter()
            .map(|e| Dest::from_endpoint(e, my_reads))
            .collect();
        let plan = Plan::of(spec.verb, spec.bw);
        // Before connecting: the peer's QPs.
        let mut remote: Vec<Dest> = Vec::with_capacity(me.len());
        if plan.one_first {
            x.hand_shake(&sync)?;
        }
        for d in &mine {
            remote.push(x.hand_shake(d)?);
        }
        let peer_reads = remote.iter().map(|d| d.out_reads).min().unwrap_or(1);
        let out_reads = u16::from(my_reads).min(peer_reads.max(1)) as u8;
        let remote: Vec<Endpoint> = remote.iter().map(Dest::endpoint).collect();
        let conn = spec.conn_params(mtu, out_reads);
        let ahs = connect_all(s, port, &me, &remote, &conn)?;
        // After connecting: (SEND tests: one hand shake, then) the QPs again.
        if plan.one_after_connect {
            x.hand_shake(&sync)?;
        }
        for d in &mine {
            x.hand_shake(d)?;
        }
        x.get_mut()
            .set_read_timeout(Some(SERVICE_TICK))
            .map_err(|e| bad(format!("setting the socket's read timeout: {e}")))?;
        let inline = s.qps[0].cap().max_inline_data.min(spec.inline);
        let mut rep = PerfReport::new(
            &spec,
            who,
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
        let size = spec.sizes[0];
        let inline = inline_for(s, &spec, size);
        // Receives are posted here, before the last hand shake.
        let mut e = Engine::new(
            &spec,
            client,
            size,
            s,
            lay,
            inline,
            std::time::Instant::now(),
        )?;
        let mut service = || {
            hca.service()
                .map(|_| ())
                .map_err(|e| ToolError::driver("servicing the HCA", e))
        };
        x.hand_shake_serviced(&sync, &mut service)?;
        let mut pacer = crate::rdma::Pacer::new(&[hca]);
        while !e.done() && !matches!(e, Engine::Idle { .. }) {
            if e.step(s, &peer)? {
                pacer.progress()?;
                continue;
            }
            pacer.idle(|| {
                format!(
                    "{} {size} B: {who} at {} (is the perftest peer still running?)",
                    spec.test,
                    e.progress().0
                )
            })?;
        }
        let mut service = || {
            hca.service()
                .map(|_| ())
                .map_err(|e| ToolError::driver("servicing the HCA", e))
        };
        if plan.reports {
            // The passive side waits here for the active side's end.
            x.hand_shake_serviced(&sync, &mut service)?;
            let mine = match e.row(&spec, size) {
                Row::Bw(r) => r,
                Row::Lat(_) => BwRow {
                    bytes: size,
                    iterations: 0,
                    bw_peak: 0.0,
                    bw_average: 0.0,
                    msg_rate_mpps: 0.0,
                },
            };
            let theirs = x.bw_report(&BwReport {
                size,
                iters: mine.iterations,
                bw_peak: mine.bw_peak,
                bw_avg: mine.bw_average,
                msg_rate: mine.msg_rate_mpps,
            })?;
            // The side that moved the data reports it.
            let row = if client {
                mine
            } else {
                BwRow {
                    bytes: theirs.size,
                    iterations: theirs.iters,
                    bw_peak: theirs.bw_peak,
                    bw_average: theirs.bw_avg,
                    msg_rate_mpps: theirs.msg_rate,
                }
            };
            printer.row(&mut rep, Row::Bw(row))?;
        } else if client || matches!(e, Engine::BwRecv(_)) {
            // SEND bandwidth: each side its own; latency: the client, which
            // timed it.
            printer.row(&mut rep, e.row(&spec, size))?;
        }
        if plan.close {
            // perftest's close: a hand shake (the passive latency side
            // waits in it), then "done".
            x.close(&sync, &mut service)?;
        }
        printer.tail(&rep)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::thread;

    fn gid() -> [u8; 16] {
        [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ]
    }

    fn dest() -> Dest {
        Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            vaddr: 0x5555_0000_1000,
            gid: Some(gid()),
            srqn: 0,
        }
    }

    /// What perftest's sprintf of `pingpong_dest` produces for [`dest`],
    /// written out by hand.
    const PERFTEST_DEST: &[u8] = b"0000:0010:000011:abcdef:12345678:0000555500001000:\
fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55:00000000:\0";

    #[test]
    fn dest_bytes_are_perftests() {
        let b = dest().encode().unwrap();
        assert_eq!(b.len(), KEY_MSG_SIZE_GID);
        assert_eq!(b, PERFTEST_DEST);
        assert_eq!(Dest::decode(PERFTEST_DEST, true).unwrap(), dest());
        let mut d = dest();
        d.gid = None;
        let b = d.encode().unwrap();
        assert_eq!(b.len(), KEY_MSG_SIZE);
        assert_eq!(
            &b[..],
            &b"0000:0010:000011:abcdef:12345678:0000555500001000:00000000\0"[..]
        );
        assert_eq!(Dest::decode(&b, false).unwrap(), d);
    }

    #[test]
    fn dests_map_to_endpoints() {
        let e = dest().endpoint();
        assert_eq!(
            (e.qpn, e.psn, e.rkey, e.addr),
            (0x11, 0xabcdef, 0x1234_5678, 0x5555_0000_1000)
        );
        assert_eq!(e.gid, gid());
        assert_eq!(Dest::from_endpoint(&e, 16), dest());
    }

    #[test]
    fn bad_dests_are_refused() {
        let mut d = dest();
        d.qpn = 0x100_0000;
        assert!(d.encode().is_err());
        // Wrong size, no NUL, non-hex, too few fields, out of range.
        assert!(Dest::decode(&PERFTEST_DEST[..100], true).is_err());
        let mut b = PERFTEST_DEST.to_vec();
        b[107] = b'0';
        assert!(Dest::decode(&b, true).is_err());
        let mut b = PERFTEST_DEST.to_vec();
        b[0] = b'g';
        let e = Dest::decode(&b, true).unwrap_err().to_string();
        assert!(e.contains("LID"), "{e}");
        let mut b = PERFTEST_DEST.to_vec();
        b[50] = 0;
        assert!(Dest::decode(&b, true).is_err());
        assert!(Dest::decode(PERFTEST_DEST, false).is_err());
    }

    /// A fake perftest server: reads first, writes the bytes perftest
    /// would, and checks what it read.
    fn fake_server(l: TcpListener) -> thread::JoinHandle<Vec<Vec<u8>>> {
        thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut step = |s: &mut TcpStream, n: usize, reply: &[u8]| {
                let mut b = vec![0u8; n];
                s.read_exact(&mut b).unwrap();
                got.push(b);
                s.write_all(reply).unwrap();
            };
            let mut ver = [0u8; 16];
            ver[..4].copy_from_slice(b"6.06");
            step(&mut s, 16, &ver);
            step(&mut s, 4, &4096i32.to_be_bytes());
            step(&mut s, 4, &128i32.to_be_bytes());
            step(&mut s, 2, b"3\0");
            step(&mut s, 108, PERFTEST_DEST);
            step(&mut s, 108, PERFTEST_DEST);
            for v in [
                65536u64,
                5000,
                100.5f64.to_bits(),
                99.25f64.to_bits(),
                1.5f64.to_bits(),
            ] {
                step(&mut s, 8, &v.to_be_bytes());
            }
            step(&mut s, 108, PERFTEST_DEST);
            let mut done = [0u8; 5];
            s.read_exact(&mut done).unwrap();
            got.push(done.to_vec());
            got
        })
    }

    #[test]
    fn client_against_a_perftest_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let srv = fake_server(l);
        let mut x = Exchange::new(TcpStream::connect(addr).unwrap(), true);
        assert_eq!(x.versions().unwrap(), "6.06");
        assert_eq!(x.sys_data(64, 64).unwrap(), (4096, 128));
        assert_eq!(x.mtu(IbMtu::fitting(4096).unwrap()).unwrap().bytes(), 1024);
        let mut me = dest();
        me.qpn = 0x22;
        me.psn = 0x123;
        assert_eq!(x.hand_shake(&me).unwrap(), dest());
        assert_eq!(x.hand_shake(&me).unwrap(), dest());
        let rep = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1.0,
            bw_avg: 2.0,
            msg_rate: 3.0,
        };
        let rem = x.bw_report(&rep).unwrap();
        assert_eq!(rem.size, 65536);
        assert_eq!(rem.iters, 5000);
        assert_eq!(rem.bw_peak, 100.5);
        assert_eq!(rem.bw_avg, 99.25);
        assert_eq!(rem.msg_rate, 1.5);
        x.close(&me, &mut || Ok(())).unwrap();
        let got = srv.join().unwrap();
        assert_eq!(&got[0][..5], b"6.06\0");
        assert_eq!(got[1], 64i32.to_be_bytes());
        assert_eq!(got[3], b"5\0");
        let mine = Dest::decode(&got[4], true).unwrap();
        assert_eq!((mine.qpn, mine.psn), (0x22, 0x123));
        assert_eq!(got[6], 65536u64.to_be_bytes());
        assert_eq!(got[8], 1.0f64.to_bits().to_be_bytes());
        assert_eq!(got.last().unwrap(), b"done\0");
    }

    #[test]
    fn server_reads_first_and_refuses_old_or_mixed_peers() {
        // An old perftest is refused with its version named.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut v = [0u8; 16];
            v[..4].copy_from_slice(b"5.20");
            s.write_all(&v).unwrap();
            let mut r = [0u8; 16];
            s.read_exact(&mut r).unwrap();
            r
        });
        let (s, _) = l.accept().unwrap();
        let mut x = Exchange::new(s, false);
        let e = x.versions().unwrap_err().to_string();
        assert!(e.contains("5.20"), "{e}");
        assert_eq!(&c.join().unwrap()[..5], b"6.06\0");

        // An IPv4-mapped GID against a link-local one is refused.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut d = dest();
            d.gid = Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
            s.write_all(&d.encode().unwrap()).unwrap();
            let mut r = [0u8; 108];
            s.read_exact(&mut r).unwrap();
        });
        let (s, _) = l.accept().unwrap();
        let mut x = Exchange::new(s, false);
        assert!(x.hand_shake(&dest()).is_err());
        c.join().unwrap();
    }

    #[test]
    fn a_peer_that_hangs_up_is_a_clear_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = thread::spawn(move || drop(TcpStream::connect(addr).unwrap()));
        let (s, _) = l.accept().unwrap();
        c.join().unwrap();
        let mut x = Exchange::new(s, false);
        let e = x.versions().unwrap_err().to_string();
        assert!(e.contains("version"), "{e}");
    }

    #[test]
    fn mtu_enum_round_trips() {
        for b in [256u32, 512, 1024, 2048, 4096] {
            let m = IbMtu::fitting(b).unwrap();
            assert_eq!(mtu_of_enum(mtu_enum(m)).unwrap().bytes(), b);
        }
        assert!(mtu_of_enum(0).is_none());
        assert!(mtu_of_enum(6).is_none());
        assert_eq!(leading_number("6.06"), Some(6.06));
        assert_eq!(leading_number("5.70abc"), Some(5.70));
        assert_eq!(leading_number("x"), None);
    }
}
