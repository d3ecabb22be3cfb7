//! perftest's report: the parameter header, the address lines, the
//! result tables and the statistics behind them (peak and average
//! bandwidth, message rate; minimum, maximum, typical (median), average,
//! standard deviation and percentiles of latency), computed the way
//! perftest computes them.

use std::fmt::Write as _;
use std::io::Write;
use std::time::{Duration, Instant};

use hca_driver::Hca;
use platform::Platform;
use serde::Serialize;

use super::spec::{Spec, Verb};
use crate::error::Result;
use crate::output::json;
use crate::rdma::{Endpoint, PortView};

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// Bandwidth table header (MiB/sec).
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
/// Bandwidth table header with `--report_gbits`.
pub const BW_HEADER_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// Latency table header.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
/// Latency table header of a run with a duration (`-D`).
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// perftest's `LAT_MEASURE_TAIL`: the largest samples left out.
const LAT_MEASURE_TAIL: usize = 2;

/// Above this many (posted work request, completion) pairs the peak is not
/// computed (perftest's peak search is quadratic too).
const PEAK_WORK_LIMIT: usize = 20_000_000;

/// One row of a bandwidth table.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct BwRow {
    /// Message size.
    pub bytes: u64,
    /// Messages completed (all QPs).
    pub iterations: u64,
    /// Peak bandwidth (0 when not computed: with a duration, or too many
    /// messages).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_average: f64,
    /// Average message rate in millions of messages per second.
    pub msg_rate_mpps: f64,
}

impl BwRow {
    /// The row as perftest prints it (`REPORT_FMT`, or `REPORT_FMT_EXT`
    /// for small Gb/sec figures).
    pub fn line(&self, gbits: bool) -> String {
        if gbits && self.bw_average < 0.1 {
            format!(
                " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
                self.bytes, self.iterations, self.bw_peak, self.bw_average, self.msg_rate_mpps
            )
        } else {
            format!(
                " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                self.bytes, self.iterations, self.bw_peak, self.bw_average, self.msg_rate_mpps
            )
        }
    }
}

/// One row of a latency table.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
#[serde(untagged)]
pub enum LatRow {
    /// A run of a number of iterations.
    Iterations {
        /// Message size.
        bytes: u64,
        /// Iterations.
        iterations: u64,
        /// Smallest sample.
        t_min_usec: f64,
        /// Largest sample (the two largest left out).
        t_max_usec: f64,
        /// Median.
        t_typical_usec: f64,
        /// Average.
        t_avg_usec: f64,
        /// Standard deviation.
        t_stdev_usec: f64,
        /// 99th percentile.
        p99_usec: f64,
        /// 99.9th percentile.
        p99_9_usec: f64,
    },
    /// A run of a duration.
    Duration {
        /// Message size.
        bytes: u64,
        /// Iterations done.
        iterations: u64,
        /// Average.
        t_avg_usec: f64,
        /// Transactions per second.
        tps: f64,
    },
}

impl LatRow {
    /// The row as perftest prints it.
    pub fn line(&self) -> String {
        match self {
            LatRow::Iterations {
                bytes,
                iterations,
                t_min_usec,
                t_max_usec,
                t_typical_usec,
                t_avg_usec,
                t_stdev_usec,
                p99_usec,
                p99_9_usec,
            } => format!(
                " {bytes:<7} {iterations}          {t_min_usec:<7.2}        {t_max_usec:<7.2}      {t_typical_usec:<7.2}  \t       {t_avg_usec:<7.2}     \t{t_stdev_usec:<7.2}\t\t{p99_usec:<7.2} \t\t{p99_9_usec:<7.2}"
            ),
            LatRow::Duration {
                bytes,
                iterations,
                t_avg_usec,
                tps,
            } => format!(
                " {bytes:<7}       {iterations}            {t_avg_usec:<7.2}        {tps:<7.2}"
            ),
        }
    }
}

/// A result row of either kind.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Row {
    /// Bandwidth.
    Bw(BwRow),
    /// Latency.
    Lat(LatRow),
}

impl Row {
    /// The row as perftest prints it.
    pub fn line(&self, gbits: bool) -> String {
        match self {
            Row::Bw(r) => r.line(gbits),
            Row::Lat(r) => r.line(),
        }
    }
}

/// What a bandwidth run recorded: when each work request was posted (in
/// posting order over all QPs) and, at each completion, how many work
/// requests were retired in total.
#[derive(Debug, Default)]
pub struct BwSamples {
    /// Posting times (empty when not recorded).
    pub posted: Vec<Instant>,
    /// (work requests retired so far, time) at each completion.
    pub completions: Vec<(u64, Instant)>,
    /// The first post.
    pub start: Option<Instant>,
    /// The last completion.
    pub end: Option<Instant>,
    /// Work requests retired.
    pub done: u64,
}

/// Bytes per unit of the report: MiB, or Gb (125,000,000 bytes).
fn format_factor(gbits: bool) -> f64 {
    if gbits { 125_000_000.0 } else { 1_048_576.0 }
}

/// The bandwidth row of a run: average over the first post to the last
/// completion; peak as perftest's best per-message time over any span
/// from a post to a later completion (not with `no_peak`).
pub fn bw_row(size: u64, s: &BwSamples, gbits: bool, no_peak: bool) -> BwRow {
    let secs = match (s.start, s.end) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    }
    .max(1e-9);
    let f = format_factor(gbits);
    let avg = size as f64 * s.done as f64 / secs / f;
    let rate = s.done as f64 / secs / 1e6;
    let peak = if no_peak {
        0.0
    } else {
        peak_per_message(&s.posted, &s.completions)
            .map(|t| size as f64 / t.max(1e-12) / f)
            .unwrap_or(0.0)
    };
    BwRow {
        bytes: size,
        iterations: s.done,
        bw_peak: peak,
        bw_average: avg,
        msg_rate_mpps: rate,
    }
}

/// The shortest time per message over any span from the post of work
/// request `i` to a completion that retired work requests up to `j >= i`:
/// `(t_completed(j) - t_posted(i)) / (j - i + 1)`.
fn peak_per_message(posted: &[Instant], completions: &[(u64, Instant)]) -> Option<f64> {
    let t0 = *posted.first()?;
    if completions.is_empty() {
        return None;
    }
    let secs = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let posted: Vec<f64> = posted.iter().map(|&t| secs(t)).collect();
    let completions: Vec<(u64, f64)> = completions.iter().map(|&(n, t)| (n, secs(t))).collect();
    let work = posted.len().saturating_mul(completions.len());
    // Beyond the limit, look at every k-th post (the figure is a minimum
    // over spans; a coarser grid finds nearly the same one).
    let step = work.div_ceil(PEAK_WORK_LIMIT).max(1);
    let mut best = f64::INFINITY;
    for i in (0..posted.len()).step_by(step) {
        // Completions that retired work request i: retired count > i.
        let first = completions.partition_point(|&(n, _)| n <= i as u64);
        let tp = posted[i];
        for &(n, t) in &completions[first..] {
            let per = (t - tp) / (n - i as u64) as f64;
            if per < best && per > 0.0 {
                best = per;
            }
        }
    }
    best.is_finite().then_some(best)
}

/// The median of sorted samples, as perftest's `get_median`.
fn median(d: &[f64]) -> f64 {
    let n = d.len();
    if n == 0 {
        return 0.0;
    }
    if (n - 1) % 2 == 1 {
        (d[n / 2] + d[n / 2 - 1]) / 2.0
    } else {
        d[n / 2]
    }
}

/// The latency row of a run of iterations, as perftest's
/// `print_report_lat`: the samples are the intervals between consecutive
/// posts (one round trip each), divided by `rtt_factor` (2 for WRITE and
/// SEND, whose round trip is two messages; 1 for READ and atomics) and
/// sorted; the two largest are left out of the median, average and
/// standard deviation (`LAT_MEASURE_TAIL`), and with `m` the samples kept,
/// `t_max` is sample `m` (the second largest), the percentiles samples
/// `ceil(m * 0.99)` and `ceil(m * 0.999)`.
pub fn lat_row(size: u64, iterations: u64, posted: &[Instant], rtt_factor: f64) -> LatRow {
    let mut d: Vec<f64> = posted
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
        .collect();
    d.sort_by(f64::total_cmp);
    if d.len() <= LAT_MEASURE_TAIL {
        return LatRow::Iterations {
            bytes: size,
            iterations,
            t_min_usec: d.first().copied().unwrap_or(0.0),
            t_max_usec: d.last().copied().unwrap_or(0.0),
            t_typical_usec: median(&d),
            t_avg_usec: if d.is_empty() {
                0.0
            } else {
                d.iter().sum::<f64>() / d.len() as f64
            },
            t_stdev_usec: 0.0,
            p99_usec: d.last().copied().unwrap_or(0.0),
            p99_9_usec: d.last().copied().unwrap_or(0.0),
        };
    }
    let m = d.len() - LAT_MEASURE_TAIL;
    let kept = &d[..m];
    let avg = kept.iter().sum::<f64>() / m as f64;
    let var = kept.iter().map(|x| (avg - x) * (avg - x)).sum::<f64>() / m as f64;
    let at = |p: f64| d[((m as f64 * p).ceil() as usize).min(d.len() - 1)];
    LatRow::Iterations {
        bytes: size,
        iterations,
        t_min_usec: d[0],
        t_max_usec: d[m],
        t_typical_usec: median(kept),
        t_avg_usec: avg,
        t_stdev_usec: var.sqrt(),
        p99_usec: at(0.99),
        p99_9_usec: at(0.999),
    }
}

/// The latency row of a run of a duration: the time over the iterations.
pub fn lat_dur_row(size: u64, iterations: u64, elapsed: Duration, rtt_factor: f64) -> LatRow {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let it = iterations.max(1) as f64;
    LatRow::Duration {
        bytes: size,
        iterations,
        t_avg_usec: secs * 1e6 / rtt_factor / it,
        tps: iterations as f64 / secs,
    }
}

/// C's `%#0Nx`: `0x` and at least N characters in all, zero-padded; a
/// zero value gets no `0x` (perftest prints `LID 0000`, `QPN 0x009b`).
pub fn c_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("0x{v:0w$x}", w = width.saturating_sub(2))
    }
}

/// The address lines of a QP (`local address: ...`, `GID: ...`): with the
/// rkey and buffer address for RDMA tests, the GID on Ethernet.
pub fn address_lines(label: &str, e: &Endpoint, rdma: bool, with_gid: bool) -> String {
    let mut s = format!(
        " {label} address: LID {} QPN {} PSN {}",
        c_hex(u64::from(e.lid), 4),
        c_hex(u64::from(e.qpn), 6),
        c_hex(u64::from(e.psn), 6)
    );
    if rdma {
        let _ = write!(
            s,
            " RKey {} VAddr {}",
            c_hex(u64::from(e.rkey), 8),
            c_hex(e.addr, 16)
        );
    }
    if with_gid {
        s.push_str("\n GID: ");
        let g: Vec<String> = e.gid.iter().map(|b| format!("{b:02}")).collect();
        s.push_str(&g.join(":"));
    }
    s
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
    pub(super) fn new(
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
    pub(super) fn atomics<P: Platform + 'static>(&mut self, spec: &Spec, hca: &Hca<P>) {
        if spec.verb == Verb::Atomic {
            let d = hca_driver::verbs::DeviceAttr::from_info(hca.info());
            self.atomic_byte_order = d
                .atomic_ops
                .then(|| crate::cmd::info::byte_order_name(d.atomic_byte_order));
        }
    }

    /// perftest's parameter header, address lines and table header.
    fn write_head(&self, out: &mut dyn Write) -> Result<()> {
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
                address_lines("local", e, self.rdma, self.with_gid)
            )?;
        }
        for e in &self.remote {
            writeln!(
                out,
                "{}",
                address_lines("remote", e, self.rdma, self.with_gid)
            )?;
        }
        writeln!(out, "{RESULT_LINE}")?;
        let h = match (self.bw, self.gbits, self.duration) {
            (true, false, _) => BW_HEADER,
            (true, true, _) => BW_HEADER_G,
            (false, _, false) => LAT_HEADER,
            (false, _, true) => LAT_DUR_HEADER,
        };
        writeln!(out, "{h}")?;
        Ok(())
    }

    fn write_tail(&self, out: &mut dyn Write) -> Result<()> {
        writeln!(out, "{}", RESULT_LINE)?;
        Ok(())
    }
}

/// Prints as a run goes: the head, each row, the tail (text); the whole
/// report at the end (JSON).
pub(super) struct Printer<'o> {
    pub(super) out: &'o mut dyn Write,
    pub(super) json: bool,
}

impl Printer<'_> {
    pub(super) fn head(&mut self, r: &PerfReport) -> Result<()> {
        if !self.json {
            r.write_head(self.out)?;
            self.out.flush()?;
        }
        Ok(())
    }

    pub(super) fn row(&mut self, r: &mut PerfReport, row: Row) -> Result<()> {
        if !self.json {
            writeln!(self.out, "{}", row.line(r.gbits))?;
            self.out.flush()?;
        }
        r.results.push(row);
        Ok(())
    }

    pub(super) fn tail(&mut self, r: &PerfReport) -> Result<()> {
        if self.json {
            json(self.out, r)
        } else {
            r.write_tail(self.out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_hex_matches_printf() {
        assert_eq!(c_hex(0, 4), "0000");
        assert_eq!(c_hex(6, 4), "0x06");
        assert_eq!(c_hex(0x9b, 6), "0x009b");
        assert_eq!(c_hex(0x57bb8f, 6), "0x57bb8f");
        assert_eq!(c_hex(0x1fd4bc, 8), "0x1fd4bc");
        assert_eq!(c_hex(0x7f0e0c8aa000, 16), "0x007f0e0c8aa000");
        assert_eq!(c_hex(0, 6), "000000");
    }

    #[test]
    fn rows_print_like_perftest() {
        let r = BwRow {
            bytes: 65536,
            iterations: 5000,
            bw_peak: 11030.78,
            bw_average: 11030.45,
            msg_rate_mpps: 0.176487,
        };
        assert_eq!(
            r.line(false),
            " 65536      5000             11030.78            11030.45\t\t   0.176487"
        );
        let l = LatRow::Duration {
            bytes: 2,
            iterations: 10,
            t_avg_usec: 1.5,
            tps: 3.25,
        };
        assert_eq!(
            l.line(),
            " 2             10            1.50           3.25   "
        );
    }

    #[test]
    fn latency_statistics() {
        let t0 = Instant::now();
        // Posts 10 us apart, one 100 us gap: 9 intervals; the largest
        // two (100, 10) are left out, t_max is the second largest.
        let mut posted = vec![t0];
        let mut t = t0;
        for k in 1..10 {
            t += Duration::from_micros(if k == 5 { 100 } else { 10 });
            posted.push(t);
        }
        match lat_row(2, 10, &posted, 2.0) {
            LatRow::Iterations {
                t_min_usec,
                t_max_usec,
                t_typical_usec,
                t_avg_usec,
                t_stdev_usec,
                ..
            } => {
                assert!((t_min_usec - 5.0).abs() < 1e-6);
                assert!((t_max_usec - 5.0).abs() < 1e-6);
                assert!((t_typical_usec - 5.0).abs() < 1e-6);
                assert!((t_avg_usec - 5.0).abs() < 1e-6);
                assert!(t_stdev_usec.abs() < 1e-6);
            }
            other => panic!("{other:?}"),
        }
        // Two gaps of 100 us: the second largest is t_max, the 99.9th
        // percentile (sample ceil(6 * 0.999) = 6) too.
        let mut posted = vec![t0];
        let mut t = t0;
        for k in 1..10 {
            t += Duration::from_micros(if k == 5 || k == 7 { 100 } else { 10 });
            posted.push(t);
        }
        match lat_row(2, 10, &posted, 1.0) {
            LatRow::Iterations {
                t_max_usec,
                p99_9_usec,
                t_typical_usec,
                ..
            } => {
                assert!((t_max_usec - 100.0).abs() < 1e-6);
                assert!((p99_9_usec - 100.0).abs() < 1e-6);
                assert!((t_typical_usec - 10.0).abs() < 1e-6);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bandwidth_average_and_peak() {
        let t0 = Instant::now();
        // 4 messages of 1 MiB: posted at 0, completed (2 at a time) at 1 ms
        // and 3 ms.
        let posted = vec![t0; 4];
        let s = BwSamples {
            posted,
            completions: vec![
                (2, t0 + Duration::from_millis(1)),
                (4, t0 + Duration::from_millis(3)),
            ],
            start: Some(t0),
            end: Some(t0 + Duration::from_millis(3)),
            done: 4,
        };
        let r = bw_row(1 << 20, &s, false, false);
        assert_eq!(r.iterations, 4);
        // 4 MiB in 3 ms.
        assert!((r.bw_average - 4.0 / 0.003).abs() < 1e-6, "{r:?}");
        // Best span: 2 messages in 1 ms.
        assert!((r.bw_peak - 2000.0).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate_mpps - 4.0 / 0.003 / 1e6).abs() < 1e-9);
        assert_eq!(bw_row(1 << 20, &s, false, true).bw_peak, 0.0);
    }
}
