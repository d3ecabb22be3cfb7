//! End-to-end message rate and latency through the emulator: RDMA WRITE,
//! SEND and RDMA READ between two emulated ConnectX-4s cabled port 1 to
//! port 1, through the verbs API of `hca-driver` (RC QPs).
//!
//! ```text
//! cargo run --release -p hca-tools --example emu_e2e -- [MESSAGES] [SIZE]
//! ```
//!
//! MESSAGES (default 200000) per rate measurement and a tenth of that per
//! latency measurement, SIZE bytes (default 64). Prints, per operation:
//!
//! - the message rate in Mpps: 128 work requests kept outstanding, posted
//!   in batches with one doorbell, one in 32 signaled, completions polled
//!   32 at a time (SEND: the receiver keeps 512 receives posted and the
//!   sender never has more in flight than the receiver has receives);
//! - the latency in usec: one message at a time, the median and the mean
//!   of the round trips (WRITE: each side polls the last byte of its
//!   buffer for the peer's counter and writes back; SEND: each side
//!   answers a receive with a send; READ: one READ after another), with
//!   the one-way figure perftest reports (half the round trip for WRITE
//!   and SEND, the whole round trip for READ).
//!
//! **This measures the emulator plus the driver, not hardware.** The
//! emulated device runs on threads of this machine and moves every byte
//! through a simulated IOMMU; its figures say how fast the software stack
//! and the emulator go together (useful to see regressions in either),
//! nothing about a ConnectX. On a machine with few cores the emulator's
//! device threads and the posting thread compete for them. `hca perf`
//! measures the same way with perftest's options and tables.

use hca_driver::verbs::{Context, Pd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::verbs::{
    AccessFlags, AhAttr, Completion, Cq, DmaBuf, Mr, Qp, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendOp, SendWr,
};
use hca_driver::{Config, Hca, IbMtu, Rkey};
use hca_emu::{EmuConfig, EmuHca, EmuPlatform};
use platform::Platform;

type P = EmuPlatform;
type BoxError = Box<dyn std::error::Error>;

const WINDOW: u64 = 128;
const SIGNAL_EVERY: u64 = 32;
const RX_DEPTH: u64 = 512;
/// A measurement that makes no progress for this long has failed.
const STALL: Duration = Duration::from_secs(10);

/// One side: a QP, its CQ, a buffer of two regions (target, source).
struct End<'a> {
    qp: Qp<P>,
    cq: &'a Cq<P>,
    buf: &'a DmaBuf<P>,
    mr: &'a Mr<P>,
    slot: usize,
}

#[derive(Clone, Copy)]
enum Op {
    Write,
    Send,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "RDMA WRITE",
            Op::Send => "SEND",
            Op::Read => "RDMA READ",
        }
    }
}

fn connect(qp: &mut Qp<P>, remote_qpn: u32, dgid: [u8; 16]) -> Result<(), BoxError> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qp.modify(
        &QpAttr::new()
            .state(QpState::Init)
            .port(1)
            .pkey_index(0)
            .access(access),
    )?;
    qp.modify(
        &QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(IbMtu::Mtu1024)
            .dest_qp_num(remote_qpn)
            .rq_psn(0)
            .max_dest_rd_atomic(16)
            .min_rnr_timer(12)
            .ah(AhAttr::roce(1, hca_driver::verbs::Gid(dgid), 0)),
    )?;
    qp.modify(
        &QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(0)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(16),
    )?;
    Ok(())
}

fn poll(cq: &Cq<P>, wc: &mut [Completion]) -> Result<usize, BoxError> {
    let n = cq.poll(wc)?;
    for c in &wc[..n] {
        if !c.is_success() {
            return Err(format!(
                "work request {:#x} completed with {}",
                c.wr_id(),
                c.status()
            )
            .into());
        }
    }
    Ok(n)
}

/// Relaxes the device when nothing happened; fails after [`STALL`].
fn idle(hca: &Hca<P>, last: Instant, what: &str) -> Result<(), BoxError> {
    if last.elapsed() > STALL {
        return Err(format!("{what}: no progress for {STALL:?}").into());
    }
    hca.platform().relax();
    Ok(())
}

/// Messages per second of `op` from `a` to `b`, `n` messages.
fn rate(
    op: Op,
    a: &mut End<'_>,
    b: &mut End<'_>,
    ha: &Hca<P>,
    n: u64,
    size: usize,
) -> Result<f64, BoxError> {
    let rb = b.mr.addr();
    let rkey = b.mr.rkey();
    let src = a.mr.sge(a.slot, size as u32)?;
    let (mut posted, mut done, mut rposted, mut received) = (0u64, 0u64, 0u64, 0u64);
    let recv_sge = [b.mr.sge(0, size as u32)?];
    let mut wc = [Completion::default(); 32];
    let start = Instant::now();
    let mut last = start;
    while done < n || (matches!(op, Op::Send) && received < n) {
        let mut progressed = false;
        if matches!(op, Op::Send) {
            let want = (RX_DEPTH - (rposted - received)).min(n - rposted);
            if want >= RX_DEPTH / 4 || (want > 0 && rposted + want == n) {
                let wrs: Vec<RecvWr<'_>> = (0..want)
                    .map(|k| RecvWr {
                        wr_id: rposted + k,
                        sgl: &recv_sge,
                    })
                    .collect();
                b.qp.post_recv_list(&wrs)?;
                rposted += want;
                progressed = true;
            }
            received += poll(b.cq, &mut wc)? as u64;
        }
        let mut room = (WINDOW - (posted - done)).min(n - posted);
        if matches!(op, Op::Send) {
            room = room.min(rposted - posted);
        }
        if room > 0 {
            let mut batch = a.qp.batch()?;
            for k in posted..posted + room {
                let flags = if (k + 1) % SIGNAL_EVERY == 0 || k + 1 == n {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::NONE
                };
                match op {
                    Op::Write => batch.post_rdma_write(k, flags, rb, rkey, src)?,
                    Op::Read => batch.post_rdma_read(k, flags, rb, rkey, src)?,
                    Op::Send => batch.post_send_sge(k, flags, src)?,
                }
            }
            batch.ring();
            posted += room;
            progressed = true;
        }
        let m = poll(a.cq, &mut wc)?;
        for c in &wc[..m] {
            done = c.wr_id() + 1;
        }
        if progressed || m > 0 {
            last = Instant::now();
        } else {
            idle(ha, last, op.name())?;
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Round trips of `op` between `a` (starts) and `b`: (median, mean) in
/// microseconds.
fn latency<'a>(
    op: Op,
    a: &mut End<'a>,
    b: &mut End<'a>,
    ha: &Hca<P>,
    n: u64,
    size: usize,
) -> Result<(f64, f64), BoxError> {
    let mut rtt = Vec::with_capacity(n as usize);
    let mut wc = [Completion::default(); 4];
    // Receives for SEND; cleared target regions for WRITE.
    for e in [&mut *a, &mut *b] {
        e.buf.fill(0, 2 * e.slot, 0)?;
        if matches!(op, Op::Send) {
            let sge = [e.mr.sge(0, size as u32)?];
            let wrs: Vec<RecvWr<'_>> = (0..16)
                .map(|k| RecvWr {
                    wr_id: k,
                    sgl: &sge,
                })
                .collect();
            e.qp.post_recv_list(&wrs)?;
        }
    }
    // Waits until `e` has the message of round trip `k`; returns whether
    // a receive completion was consumed.
    fn arrived(
        op: Op,
        e: &mut End<'_>,
        size: usize,
        k: u64,
        wc: &mut [Completion],
    ) -> Result<bool, BoxError> {
        match op {
            Op::Write => {
                let mut b = [0u8];
                e.buf.read(size - 1, &mut b)?;
                Ok(b[0] == (k + 1) as u8)
            }
            Op::Send => {
                let n = poll(e.cq, wc)?;
                let mut got = false;
                for c in &wc[..n] {
                    if c.opcode() == hca_driver::verbs::WcOpcode::Recv {
                        got = true;
                        let sge = [e.mr.sge(0, size as u32)?];
                        e.qp.post_recv(&RecvWr {
                            wr_id: k,
                            sgl: &sge,
                        })?;
                    }
                }
                Ok(got)
            }
            Op::Read => Ok(poll(e.cq, wc)? > 0),
        }
    }
    fn send(
        op: Op,
        from: &mut End<'_>,
        to_addr: u64,
        rkey: Rkey,
        size: usize,
        k: u64,
    ) -> Result<(), BoxError> {
        let src = from.mr.sge(from.slot, size as u32)?;
        match op {
            Op::Write => {
                from.buf.write(from.slot + size - 1, &[(k + 1) as u8])?;
                from.qp
                    .post_rdma_write(k, SendFlags::SIGNALED, to_addr, rkey, src)?
            }
            Op::Send => from.qp.post_send(
                &SendWr::new(k, SendOp::Send)
                    .sgl(&[src])
                    .flags(SendFlags::SIGNALED),
            )?,
            Op::Read => from
                .qp
                .post_rdma_read(k, SendFlags::SIGNALED, to_addr, rkey, src)?,
        }
        Ok(())
    }
    let (ab, akey) = (a.mr.addr(), a.mr.rkey());
    let (bb, bkey) = (b.mr.addr(), b.mr.rkey());
    for k in 0..n {
        let t = Instant::now();
        let mut last = t;
        send(op, a, bb, bkey, size, k)?;
        if !matches!(op, Op::Read) {
            // The peer answers.
            while !arrived(op, b, size, k, &mut wc)? {
                idle(ha, last, op.name())?;
            }
            last = Instant::now();
            send(op, b, ab, akey, size, k)?;
        }
        while !arrived(op, a, size, k, &mut wc)? {
            idle(ha, last, op.name())?;
        }
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
        // Retire the send completions of the ping-pong (signaled WRITEs).
        if matches!(op, Op::Write) {
            let mut got = 0;
            while got < 2 {
                got += poll(a.cq, &mut wc)? + poll(b.cq, &mut wc)?;
                if got < 2 {
                    idle(ha, last, op.name())?;
                }
            }
        } else if matches!(op, Op::Send) {
            // Both sends' completions come with the receives or after.
            let _ = poll(b.cq, &mut wc)?;
        }
    }
    // Drain what is left (send completions of SEND).
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(20) {
        let _ = poll(a.cq, &mut wc)? + poll(b.cq, &mut wc)?;
        ha.platform().relax();
    }
    rtt.sort_by(f64::total_cmp);
    let median = rtt[rtt.len() / 2];
    let mean = rtt.iter().sum::<f64>() / rtt.len() as f64;
    Ok((median, mean))
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200_000);
    let size: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(64);
    if n < 10 || !(1..=1 << 20).contains(&size) {
        return Err("usage: emu_e2e [MESSAGES >= 10] [SIZE 1..=1048576]".into());
    }
    let ea = EmuHca::new(EmuConfig::default());
    let eb = EmuHca::new(EmuConfig {
        seed: 2,
        ..EmuConfig::default()
    });
    hca_emu::connect(&ea, 1, &eb, 1)?;
    let ha = Arc::new(Hca::open(ea.platform(), Config::default()).map_err(|f| f.error)?);
    let hb = Arc::new(Hca::open(eb.platform(), Config::default()).map_err(|f| f.error)?);
    {
        let (ca, cb) = (Arc::new(Context::open(&ha)?), Arc::new(Context::open(&hb)?));
        let (pa, pb) = (Arc::new(Pd::alloc(&ca)?), Arc::new(Pd::alloc(&cb)?));
        let (qa, qb) = (
            Arc::new(Cq::create(&ca, 1024)?),
            Arc::new(Cq::create(&cb, 1024)?),
        );
        let slot = (size + 63) & !63;
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&ha, 2 * slot)?),
            Arc::new(DmaBuf::alloc(&hb, 2 * slot)?),
        );
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let (ma, mb) = (
            Mr::register(&pa, &ba, access)?,
            Mr::register(&pb, &bb, access)?,
        );
        let cap = QpCap {
            max_send_wr: WINDOW as u32,
            max_recv_wr: RX_DEPTH as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qpa = Qp::create(&pa, &QpInitAttr::new(QpType::Rc, &qa, &qa).cap(cap))?;
        let qpb = Qp::create(&pb, &QpInitAttr::new(QpType::Rc, &qb, &qb).cap(cap))?;
        let mut a = End {
            qp: qpa,
            cq: &qa,
            buf: &ba,
            mr: &ma,
            slot,
        };
        let mut b = End {
            qp: qpb,
            cq: &qb,
            buf: &bb,
            mr: &mb,
            slot,
        };
        let (na, nb) = (a.qp.number().0, b.qp.number().0);
        let (ga, gb) = (ca.query_gid(1, 0)?, cb.query_gid(1, 0)?);
        connect(&mut a.qp, nb, gb.0)?;
        connect(&mut b.qp, na, ga.0)?;

        println!(
            "hca-emu end to end: two emulated ConnectX-4s, port 1 cabled to port 1, RC, {size}-byte messages"
        );
        println!("(this measures the emulator plus the driver, not hardware)");
        println!();
        println!(
            "{:<12} {:>14} {:>18} {:>18} {:>18}",
            "operation", "rate [Mpps]", "RTT median [usec]", "RTT mean [usec]", "perftest [usec]"
        );
        for op in [Op::Write, Op::Send, Op::Read] {
            // Warm up, then measure.
            rate(op, &mut a, &mut b, &ha, n / 20, size)?;
            let r = rate(op, &mut a, &mut b, &ha, n, size)?;
            let (median, mean) = latency(op, &mut a, &mut b, &ha, (n / 10).max(10), size)?;
            let one_way = match op {
                Op::Read => median,
                _ => median / 2.0,
            };
            println!(
                "{:<12} {:>14.3} {:>18.2} {:>18.2} {:>18.2}",
                op.name(),
                r / 1e6,
                median,
                mean,
                one_way
            );
        }
    }
    for h in [ha, hb] {
        let h = Arc::into_inner(h).ok_or("the HCA is still shared")?;
        h.close().map_err(|f| f.error)?;
    }
    Ok(())
}
