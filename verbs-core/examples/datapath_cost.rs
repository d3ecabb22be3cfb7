//! Instructions per data-path operation, for callgrind.
//!
//! Each scenario runs in its own `#[inline(never)]` function, so
//!
//! ```text
//! cargo build --release --example datapath_cost -p verbs-core
//! valgrind --tool=callgrind --toggle-collect=op_post1 target/release/examples/datapath_cost post1 10000
//! ```
//!
//! counts exactly the instructions of N calls of that operation (divide the
//! total `Ir` by N, and by 32 for the batched ones). Without valgrind it
//! prints nanoseconds per operation.
//!
//! The four scenarios of the benchmark, each through the fastest safe API
//! for it:
//!
//! - `op_post1`: one RDMA write (1 SGE, signaled) posted with its doorbell
//!   (`SendQueue::wr_rdma_write`, which returns the two-word `SendError`);
//! - `op_post32`: 32 such writes and one doorbell (`SendQueue::batch`,
//!   `SendBatch::wr_rdma_write`, `SendBatch::ring`);
//! - `op_poll1`: one requester CQE through a polling session
//!   (`CqPoller::poll_one_into` into a caller's `Completion`, returning the
//!   two-word `PollError`; the session, `Cq::poller`, is made once per 256
//!   CQEs outside the measured function and remembers the queue and WQE
//!   opcode of the CQE before, which is what a loop polling one CQE at a
//!   time gets);
//! - `op_poll32`: `Cq::poll` of 32 requester CQEs into `Completion`s.
//!
//! `op_post1_inline` and `op_poll1_inline` do N of the single operations
//! in one call (the cost without a call boundary per operation);
//! `op_post1_err` and `op_post32_err` are `op_post1` and `op_post32` with
//! the full `Error` (`post_rdma_write`), whose 32-byte `Result` comes back
//! through memory. Single polls without a session: `op_poll1_into`
//! (`Cq::poll_one_into`, the queue looked up every time) and
//! `op_poll1_one` (`Cq::poll_one`, a 40-byte `Result<Option<Completion>,
//! Error>` through memory).
//!
//! And the same through the general API (`SendWr`, `WorkCompletion`):
//! `op_post1_wr` (`SendQueue::post`), `op_post32_wr`
//! (`SendQueue::post_list`), `op_poll1_slice` (`Cq::poll` with one
//! `Completion` slot), `op_poll1_wc`, `op_poll32_wc` (`Cq::poll` into
//! `WorkCompletion`s).
//!
//! Measured on the development machine (x86_64, 2 cores, release profile
//! with `debug = 1`, N = 10000; instructions per operation = callgrind `Ir`
//! / N, / 32 N for the batches; wall clock from `datapath_cost all 200000`,
//! noisy to about 5%):
//!
//! | operation | fast API | instr. | ns | with `Error` | instr. | general API | instr. | target |
//! |---|---|---|---|---|---|---|---|---|
//! | post 1 RDMA write + doorbell | `wr_rdma_write` | 57 | 6.3 | `post_rdma_write` | 64 | `post(&SendWr)` | 156 | 60 |
//! | post 32, per WQE | `SendBatch::wr_rdma_write` | 40.7 | 3.1 | `SendBatch::post_rdma_write` | 42.9 | `post_list` | 129 | 40 |
//! | poll 1 CQE | `CqPoller::poll_one_into` | 56.5 | 12.8 | `poll_one` | 76 | `poll`, 1 `WorkCompletion` | 138 | 40 |
//! | poll 32, per CQE | `poll` into `Completion`s | 38 | 9.5 | | | `poll` into `WorkCompletion`s | 61 | 40 |
//!
//! The comparison with rdma-core's libmlx5, measured in the same run on
//! the same fixtures, is `bash bench/incumbent/run.sh` (README, "Data-path
//! cost").
//!
//! (`op_poll1`'s 56.5 is 56 for a CQE of the remembered queue plus the
//! session's first CQE, which looks the queue up, spread over 256.)
//! Without a session, `Cq::poll_one_into` takes 66 instructions (14.1 ns);
//! `poll` with a one-element `Completion` slice 103. Inlined into the
//! caller's loop (`op_post1_inline`, `op_poll1_inline`: N operations in
//! one call, each post to other addresses) a post takes 54 instructions
//! (3.8 ns) and a session's poll 55 (11 ns). Before the first optimisation
//! round the four scenarios took 178, 134, 230 and 141 instructions;
//! before the second, 85, 47, 92 and 44; before the third, 57.4, 40.75, 76
//! and 38.
//!
//! What is left: a single post is the WQE's eight stores, the checks
//! (queue space, flags table, non-empty SGE), the bookkeeping, the
//! doorbell record and the doorbell between the two barriers rdma-core
//! also has, plus one register saved. A batched WQE is the same without the
//! doorbell, plus the caller's six loads of its arguments and its loop. A
//! single poll of a session is, beyond the per-CQE work of a run (the
//! owner byte, the read barrier, the key, QPN and WQE-opcode compare, the
//! window check, the tail and completion stores): finding the CQE from the
//! consumer index (12), the consumer index and its doorbell record (8),
//! the 16-byte `Result` written through memory and the return (4), one
//! saved register (2).
//!
//! Outside the measured functions the harness plays the device: it writes
//! the CQEs (for the poll scenarios it first posts the WQEs they complete),
//! and retires posted work so the send queue never fills.

#[path = "../benches/harness.rs"]
mod harness;

use std::hint::black_box;
use std::time::{Duration, Instant};

use harness::{Harness, Uar, Write, rdma_write, write_args};
use verbs_core::{
    Completion, Cq, CqTable, Error, PollError, PostError, SendError, SendOp, SendQueue, SendWr,
    Sge, WorkCompletion,
};

#[inline(never)]
#[unsafe(no_mangle)]
fn op_post1(
    sq: &mut SendQueue<Uar>,
    wr_id: u64,
    flags: verbs_core::SendFlags,
    remote_addr: u64,
    rkey: u32,
    sge: Sge,
) -> Result<(), SendError> {
    sq.post_send_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_post32(sq: &mut SendQueue<Uar>, wrs: &[Write; 32]) -> Result<(), SendError> {
    let mut b = sq.batch();
    for w in wrs {
        b.post_send_sge(
            w.wr_id,
            SendOp::RdmaWrite {
                remote_addr: w.remote_addr,
                rkey: w.rkey,
            },
            w.flags,
            w.sge,
        )?;
    }
    b.ring();
    Ok(())
}

/// `op_post1` returning the full `Error` (`?` converts): the 32-byte
/// `Result` comes back through memory.
#[inline(never)]
#[unsafe(no_mangle)]
fn op_post1_err(
    sq: &mut SendQueue<Uar>,
    wr_id: u64,
    flags: verbs_core::SendFlags,
    remote_addr: u64,
    rkey: u32,
    sge: Sge,
) -> Result<(), Error> {
    Ok(sq.post_send_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)?)
}

/// `op_post32` returning the full `Error` (`?` converts).
#[inline(never)]
#[unsafe(no_mangle)]
fn op_post32_err(sq: &mut SendQueue<Uar>, wrs: &[Write; 32]) -> Result<(), Error> {
    let mut b = sq.batch();
    for w in wrs {
        b.post_send_sge(
            w.wr_id,
            SendOp::RdmaWrite {
                remote_addr: w.remote_addr,
                rkey: w.rkey,
            },
            w.flags,
            w.sge,
        )?;
    }
    b.ring();
    Ok(())
}

/// One CQE through `Cq::poll_one` into a caller's `Completion` (the
/// queue looked up every time).
#[inline(never)]
#[unsafe(no_mangle)]
fn op_poll1(cq: &mut Cq<Uar>, table: &CqTable<8>, out: &mut Completion) -> Result<bool, PollError> {
    cq.poll_one(table, out)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_poll1_slice(
    cq: &mut Cq<Uar>,
    table: &CqTable<8>,
    wc: &mut [Completion; 1],
) -> Result<usize, Error> {
    cq.poll(table, wc)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_poll32(
    cq: &mut Cq<Uar>,
    table: &CqTable<8>,
    wc: &mut [Completion; 32],
) -> Result<usize, Error> {
    cq.poll(table, wc)
}

/// `count` single posts in one call: the cost of a post inlined into the
/// caller's loop (no call boundary per post). Each post writes other
/// addresses, so nothing of the WQE can be computed once for the loop.
#[inline(never)]
#[unsafe(no_mangle)]
fn op_post1_inline(sq: &mut SendQueue<Uar>, w: &Write, count: u64) -> Result<(), SendError> {
    for i in 0..count {
        let sge = Sge {
            addr: w.sge.addr + 64 * i,
            ..w.sge
        };
        sq.post_send_sge(
            w.wr_id + i,
            SendOp::RdmaWrite {
                remote_addr: w.remote_addr + 64 * i,
                rkey: w.rkey,
            },
            w.flags,
            sge,
        )?;
    }
    Ok(())
}

/// `count` single polls in one call (the CQEs are there).
#[inline(never)]
#[unsafe(no_mangle)]
fn op_poll1_inline(cq: &mut Cq<Uar>, table: &CqTable<8>, count: u64) -> Result<u64, PollError> {
    let mut sum = 0;
    let mut c = Completion::default();
    for _ in 0..count {
        if cq.poll_one(table, &mut c)? {
            sum += c.wr_id();
        }
    }
    Ok(sum)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_post1_wr(sq: &mut SendQueue<Uar>, wr: &SendWr<'_>) -> Result<(), Error> {
    sq.post_send(wr)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_post32_wr(sq: &mut SendQueue<Uar>, wrs: &[SendWr<'_>; 32]) -> Result<(), PostError> {
    sq.post_send_list(wrs)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_poll1_wc(
    cq: &mut Cq<Uar>,
    table: &CqTable<8>,
    wc: &mut [WorkCompletion; 1],
) -> Result<usize, Error> {
    cq.poll(table, wc)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn op_poll32_wc(
    cq: &mut Cq<Uar>,
    table: &CqTable<8>,
    wc: &mut [WorkCompletion; 32],
) -> Result<usize, Error> {
    cq.poll(table, wc)
}

/// Runs `n` single posts of `post` in chunks the queue can take, retiring
/// between chunks; returns the time spent in `post`.
fn run_post1(n: u64, mut post: impl FnMut(&mut SendQueue<Uar>, u64)) -> Duration {
    let mut h = Harness::new(512, 12);
    let max = h.qp.sq().unwrap().max_post();
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let chunk = (n - done).min(u64::from(max));
        let sq = h.qp.sq().unwrap();
        let t = Instant::now();
        for i in 0..chunk {
            post(sq, done + i);
        }
        dt += t.elapsed();
        done += chunk;
        h.retire();
    }
    dt
}

/// Runs `n` batches of 32 posts, retiring after each.
fn run_post32(n: u64, mut post: impl FnMut(&mut SendQueue<Uar>)) -> Duration {
    let mut h = Harness::new(512, 12);
    let mut dt = Duration::ZERO;
    for _ in 0..n {
        let sq = h.qp.sq().unwrap();
        let t = Instant::now();
        post(sq);
        dt += t.elapsed();
        h.retire();
    }
    dt
}

/// Runs `n` polls of `per` requester CQEs each. The device's part (post
/// the work, write the CQEs) is done untimed for 256 CQEs at a time, then
/// the polls that take them are timed together.
fn run_poll(
    n: u64,
    per: u32,
    mut poll: impl FnMut(&mut Cq<Uar>, &CqTable<8>) -> usize,
) -> Duration {
    const CHUNK: u32 = 256;
    let mut h = Harness::new(CHUNK, 12);
    let wrs: Vec<SendWr<'static>> = (0..CHUNK).map(|i| rdma_write(u64::from(i))).collect();
    let per_chunk = u64::from(CHUNK / per);
    let mut dt = Duration::ZERO;
    let mut done = 0;
    while done < n {
        let polls = (n - done).min(per_chunk);
        let cqes = polls as u32 * per;
        let sq = h.qp.sq().unwrap();
        let first = sq.cur_post();
        sq.post_send_list(&wrs[..cqes as usize]).expect("post");
        for i in 0..cqes {
            h.device_complete(first.wrapping_add(i) as u16);
        }
        let t = Instant::now();
        for _ in 0..polls {
            let got = poll(&mut h.cq, &h.table);
            assert_eq!(got, per as usize);
        }
        dt += t.elapsed();
        h.polled(cqes);
        done += polls;
    }
    dt
}

/// Runs `n` single polls: the device's part is done untimed for 256 CQEs
/// at a time, then `poll(cq, table, k)` takes the `k` CQEs written, timed.
fn run_poll_chunks(n: u64, mut poll: impl FnMut(&mut Cq<Uar>, &CqTable<8>, u32)) -> Duration {
    const CHUNK: u32 = 256;
    let mut h = Harness::new(CHUNK, 12);
    let wrs: Vec<SendWr<'static>> = (0..CHUNK).map(|i| rdma_write(u64::from(i))).collect();
    let mut dt = Duration::ZERO;
    let mut done = 0;
    while done < n {
        let k = (n - done).min(u64::from(CHUNK)) as u32;
        let sq = h.qp.sq().unwrap();
        let first = sq.cur_post();
        sq.post_send_list(&wrs[..k as usize]).expect("post");
        for i in 0..k {
            h.device_complete(first.wrapping_add(i) as u16);
        }
        let t = Instant::now();
        poll(&mut h.cq, &h.table, k);
        dt += t.elapsed();
        h.polled(k);
        done += u64::from(k);
    }
    dt
}

fn report(name: &str, what: &str, dt: Duration, ops: u64) {
    println!(
        "{name:<13} {:7.2} ns {what}",
        dt.as_nanos() as f64 / ops as f64
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "all".into());
    let n: u64 = args
        .next()
        .map_or(100_000, |s| s.parse().expect("N must be a number"));
    let all = which == "all";
    let run = |name: &str| all || which == name;

    if run("post1") {
        let w = write_args(0);
        let dt = run_post1(n, |sq, i| {
            op_post1(
                sq,
                black_box(i),
                black_box(w.flags),
                black_box(w.remote_addr),
                black_box(w.rkey),
                black_box(w.sge),
            )
            .expect("post")
        });
        report("post1:", "per post (1 WQE + doorbell)", dt, n);
    }
    if run("post1_err") {
        let w = write_args(0);
        let dt = run_post1(n, |sq, i| {
            op_post1_err(
                sq,
                black_box(i),
                black_box(w.flags),
                black_box(w.remote_addr),
                black_box(w.rkey),
                black_box(w.sge),
            )
            .expect("post")
        });
        report("post1_err:", "per post (post_send_sge, into Error)", dt, n);
    }
    if run("post1_inline") {
        let w = write_args(0);
        let mut h = Harness::new(512, 12);
        let max = u64::from(h.qp.sq().unwrap().max_post());
        let mut dt = Duration::ZERO;
        let mut done = 0u64;
        while done < n {
            let chunk = (n - done).min(max);
            let sq = h.qp.sq().unwrap();
            let t = Instant::now();
            op_post1_inline(sq, black_box(&w), black_box(chunk)).expect("post");
            dt += t.elapsed();
            done += chunk;
            h.retire();
        }
        report("post1_inline:", "per post (inlined into a loop)", dt, n);
    }
    if run("post32") {
        let wrs: [Write; 32] = std::array::from_fn(|i| write_args(i as u64));
        let dt = run_post32(n, |sq| op_post32(sq, black_box(&wrs)).expect("post"));
        report("post32:", "per WQE (32 WQEs, one doorbell)", dt, 32 * n);
    }
    if run("post32_err") {
        let wrs: [Write; 32] = std::array::from_fn(|i| write_args(i as u64));
        let dt = run_post32(n, |sq| op_post32_err(sq, black_box(&wrs)).expect("post"));
        report(
            "post32_err:",
            "per WQE (SendBatch::post_send_sge, into Error)",
            dt,
            32 * n,
        );
    }
    if run("poll1") {
        let mut c = Completion::default();
        let dt = run_poll_chunks(n, |cq, t, k| {
            for _ in 0..k {
                assert!(op_poll1(cq, t, black_box(&mut c)).expect("poll"));
            }
        });
        report("poll1:", "per poll of 1 CQE (Cq::poll_one)", dt, n);
    }
    if run("poll1_slice") {
        let mut wc = [Completion::default(); 1];
        let dt = run_poll(n, 1, |cq, t| {
            op_poll1_slice(cq, t, black_box(&mut wc)).expect("poll")
        });
        report("poll1_slice:", "per poll of 1 CQE (poll, 1 slot)", dt, n);
    }
    if run("poll1_inline") {
        // 256 CQEs written (untimed), then taken by 256 single polls in one
        // op call.
        let dt = run_poll_chunks(n, |cq, t, k| {
            black_box(op_poll1_inline(cq, t, black_box(u64::from(k))).expect("poll"));
        });
        report("poll1_inline:", "per poll (inlined into a loop)", dt, n);
    }
    if run("poll32") {
        let mut wc = [Completion::default(); 32];
        let dt = run_poll(n, 32, |cq, t| {
            op_poll32(cq, t, black_box(&mut wc)).expect("poll")
        });
        report("poll32:", "per CQE (poll of 32)", dt, 32 * n);
    }
    if run("post1_wr") {
        let wr = rdma_write(1);
        let dt = run_post1(n, |sq, _| op_post1_wr(sq, black_box(&wr)).expect("post"));
        report("post1_wr:", "per post (SendWr)", dt, n);
    }
    if run("post32_wr") {
        let wrs: [SendWr<'static>; 32] = std::array::from_fn(|i| rdma_write(i as u64));
        let dt = run_post32(n, |sq| op_post32_wr(sq, black_box(&wrs)).expect("post"));
        report("post32_wr:", "per WQE (post_list of 32 SendWr)", dt, 32 * n);
    }
    if run("poll1_wc") {
        let mut wc = [WorkCompletion::default(); 1];
        let dt = run_poll(n, 1, |cq, t| {
            op_poll1_wc(cq, t, black_box(&mut wc)).expect("poll")
        });
        report("poll1_wc:", "per poll of 1 CQE (WorkCompletion)", dt, n);
    }
    if run("poll32_wc") {
        let mut wc = [WorkCompletion::default(); 32];
        let dt = run_poll(n, 32, |cq, t| {
            op_poll32_wc(cq, t, black_box(&mut wc)).expect("poll")
        });
        report(
            "poll32_wc:",
            "per CQE (poll of 32 WorkCompletions)",
            dt,
            32 * n,
        );
    }
}
