//! Our side of the side-by-side benchmark against rdma-core's libmlx5
//! (`bash bench/incumbent/run.sh`, which also builds and runs the C twin
//! `bench/incumbent/libmlx5_bench.c`).
//!
//! Both programs set up the golden vectors' fixtures (`rc_qp`: qpn 0x123,
//! user index 5; `ud_qp`: qpn 0x124, user index 6; one CQ of 256 CQEs,
//! cqn 7, CQE version 1; each QP with its own UAR page, BlueFlame register
//! at 0x800) on ordinary memory standing in for DMA memory and the UAR,
//! and do the same work per scenario. Every measured operation is one
//! `#[inline(never)]` function named `ours_*` (the C side: `lib_*`), so
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect=ours_post1 \
//!     target/release/examples/vs_libmlx5 10000 post1
//! ```
//!
//! counts exactly their instructions; without valgrind the program prints
//! nanoseconds per operation. Output: `ops <fn> <count>` and
//! `ns <fn> <ns per op>` lines (per WQE or CQE for the batches).
//!
//! Scenarios (the API each uses):
//!
//! - `post1`: one RDMA write (1 SGE, signaled) + doorbell
//!   (`SendQueue::post_send_sge`);
//! - `post32`: 32 RDMA writes and one doorbell (`SendQueue::batch`,
//!   `SendBatch::post_send_sge`, `SendBatch::ring`);
//! - `post1_db`, `post32_db`: the same followed by the doorbell-cost model
//!   (once per doorbell, exactly as the C side does it);
//! - `poll1`: one requester CQE (`Cq::poll_one`, the queue looked up for
//!   every CQE, as `ibv_poll_cq` does);
//! - `poll32`: 32 requester CQEs (`Cq::poll` into `Completion`s);
//! - `inline64`: a SEND of 64 bytes inline (`SendQueue::post_send` of a
//!   `SendWr` with `Payload::Inline`), BlueFlame copy included;
//! - `ud`: a UD SEND of 1 SGE with an address vector, remote QPN and Q_Key
//!   (`SendQueue::post_send` of a `SendWr` with a `UdDest`);
//! - `recv`: one receive WQE of 1 SGE (`RecvQueue::post_recv`).
//!
//! The doorbell-cost model (environment variable `DOORBELL_MODEL`, the
//! same as the C side's `doorbell_model.h`): `nt` (default) a non-temporal
//! 8-byte store to a page of its own plus `sfence`, `spin:N` N pause
//! instructions, `none` nothing.
//!
//! Outside the measured functions the program plays the device: it writes
//! CQEs and polls them so posted work is retired and the queues never fill.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../benches/doorbell_model.rs"]
mod doorbell_model;
#[path = "../benches/harness.rs"]
mod harness;

use std::hint::black_box;
use std::time::{Duration, Instant};

use verbs_core::*;

use doorbell_model::{doorbell_cost, doorbell_model_init};
use harness::Uar;

const RC_QPN: u32 = 0x123;
const RC_UIDX: u32 = 5;
const UD_QPN: u32 = 0x124;
const UD_UIDX: u32 = 6;
const LOG_CQ: u8 = 8;
const CQ_ENTRIES: u32 = 1 << LOG_CQ;

const SGE: Sge = Sge {
    addr: 0x1122_3344_5566_7788,
    length: 4096,
    lkey: 0x00ab_cd01,
};
const UD_SGE: Sge = Sge {
    addr: 0x1122_3344_5566_7788,
    length: 256,
    lkey: 0x00ab_cd01,
};

// ---- measured operations ---------------------------------------------------

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_post1(
    sq: &mut SendQueue<Uar>,
    wr_id: u64,
    flags: SendFlags,
    remote_addr: u64,
    rkey: u32,
    sge: Sge,
) -> Result<(), SendError> {
    sq.post_send_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_post32(sq: &mut SendQueue<Uar>, wrs: &[harness::Write; 32]) -> Result<(), SendError> {
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

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_post1_db(
    sq: &mut SendQueue<Uar>,
    wr_id: u64,
    flags: SendFlags,
    remote_addr: u64,
    rkey: u32,
    sge: Sge,
) -> Result<(), SendError> {
    let r = sq.post_send_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge);
    doorbell_cost();
    r
}

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_post32_db(sq: &mut SendQueue<Uar>, wrs: &[harness::Write; 32]) -> Result<(), SendError> {
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
    doorbell_cost();
    Ok(())
}

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_poll1(
    cq: &mut Cq<Uar>,
    table: &CqTable<8>,
    out: &mut Completion,
) -> Result<bool, PollError> {
    cq.poll_one(table, out)
}

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_poll32(
    cq: &mut Cq<Uar>,
    table: &CqTable<8>,
    wc: &mut [Completion; 32],
) -> Result<usize, Error> {
    cq.poll(table, wc)
}

/// A signaled SEND of `data` inline (`ibv_wr_send` +
/// `ibv_wr_set_inline_data` on the C side). The length is a run-time value
/// (a slice), as it is for the library: a constant length would let the
/// compiler specialise the copy for it.
#[inline(never)]
#[unsafe(no_mangle)]
fn ours_inline64(sq: &mut SendQueue<Uar>, wr_id: u64, data: &[u8]) -> Result<(), Error> {
    sq.post_send(
        &SendWr::new(wr_id, SendOp::Send)
            .inline(data)
            .flags(SendFlags::SIGNALED),
    )
}

/// A signaled UD SEND of the gather list `sgl` (one SGE) to `dest`
/// (`ibv_post_send` with `num_sge` 1, or `ibv_wr_send` +
/// `ibv_wr_set_ud_addr` + `ibv_wr_set_sge` on the C side). The list's
/// length is a run-time value, as `num_sge` is for the library.
#[inline(never)]
#[unsafe(no_mangle)]
fn ours_ud(
    sq: &mut SendQueue<Uar>,
    wr_id: u64,
    dest: &UdDest<'_>,
    sgl: &[Sge],
) -> Result<(), Error> {
    sq.post_send(
        &SendWr::new(wr_id, SendOp::Send)
            .sgl(sgl)
            .flags(SendFlags::SIGNALED)
            .ud(*dest),
    )
}

#[inline(never)]
#[unsafe(no_mangle)]
fn ours_recv(rq: &mut RecvQueue, wr: &RecvWr<'_>) -> Result<(), Error> {
    rq.post_recv(wr)
}

// ---- the fixtures and the device's part (unmeasured) -----------------------

struct Bench {
    rc: Qp<Uar>,
    ud: Qp<Uar>,
    cq: Cq<Uar>,
    table: CqTable<8>,
    cq_base: *mut u8,
    /// CQEs written and not yet polled.
    pending: u32,
}

impl Bench {
    /// The golden vectors' `rc_qp`, `ud_qp` and `cq0`.
    fn new() -> Self {
        let (_, rc) = harness::make_qp(
            QpType::Rc,
            RC_QPN,
            common::rc_caps(),
            true,
            0x10_0000 * u64::from(RC_QPN),
            harness::uar_page(),
        );
        let (_, ud) = harness::make_qp(
            QpType::Ud,
            UD_QPN,
            common::ud_caps(),
            false,
            0x10_0000 * u64::from(UD_QPN),
            harness::uar_page(),
        );
        let (cq_mem, cq) = harness::make_cq(LOG_CQ, harness::uar_page());
        let mut table = CqTable::new();
        table
            .insert(RC_UIDX, rc.completions(true, true, None).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
        table
            .insert(UD_UIDX, ud.completions(true, true, None).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
        Self {
            rc,
            ud,
            cq,
            table,
            cq_base: cq_mem.host_addr() as *mut u8,
            pending: 0,
        }
    }

    /// Writes, as the device would, a CQE into the next free CQ slot:
    /// requester (opcode 0, WQE opcode `wqe_op`) or responder SEND
    /// (opcode 2, 64 bytes received).
    fn device_cqe(&mut self, requester: bool, qpn: u32, uidx: u32, counter: u16) {
        let ci = self.cq.consumer_index().wrapping_add(self.pending);
        let slot = (ci & (CQ_ENTRIES - 1)) as usize;
        let owner = ((ci >> LOG_CQ) & 1) as u8;
        let mut b = [0u8; 64];
        b[0x20..0x24].copy_from_slice(&uidx.to_be_bytes());
        if requester {
            // RDMA write (0x08) or SEND (0x0a): the scenarios' WQE opcode
            // only selects the completion's opcode.
            let op: u32 = if qpn == RC_QPN { 0x08 } else { 0x0a };
            b[0x38..0x3c].copy_from_slice(&((op << 24) | qpn).to_be_bytes());
        } else {
            b[0x2c..0x30].copy_from_slice(&64u32.to_be_bytes());
            b[0x38..0x3c].copy_from_slice(&qpn.to_be_bytes());
        }
        b[0x3c..0x3e].copy_from_slice(&counter.to_be_bytes());
        b[0x3f] = if requester { 0 } else { 0x20 } | owner;
        // SAFETY: the CQ block is leaked and `slot` < entries; this is the
        // only thread.
        unsafe { harness::write_cqe(self.cq_base, slot, &b) };
        self.pending += 1;
    }

    /// Polls every pending CQE.
    fn drain(&mut self) {
        let mut wc = [WorkCompletion::default(); 64];
        while self.pending > 0 {
            let n = self.cq.poll(&self.table, &mut wc).unwrap();
            assert!(n > 0, "CQE not found");
            assert!(wc[..n].iter().all(|w| w.status == WcStatus::Success));
            self.pending -= n as u32;
        }
    }

    /// Completes everything posted on the send queue of `rc` (or `ud`),
    /// whose WQEs are `wqebbs` WQEBBs each.
    fn retire_sq(&mut self, on_ud: bool, wqebbs: u32) {
        let (qpn, uidx) = if on_ud {
            (UD_QPN, UD_UIDX)
        } else {
            (RC_QPN, RC_UIDX)
        };
        let qp = if on_ud { &mut self.ud } else { &mut self.rc };
        let sq = qp.sq().unwrap();
        if sq.outstanding() == 0 {
            return;
        }
        let last = sq.cur_post().wrapping_sub(wqebbs) as u16;
        self.device_cqe(true, qpn, uidx, last);
        self.drain();
        let qp = if on_ud { &mut self.ud } else { &mut self.rc };
        assert_eq!(qp.sq().unwrap().outstanding(), 0);
    }

    /// Completes every receive posted on `rc`.
    fn retire_rq(&mut self) {
        let rq = self.rc.rq().unwrap();
        let n = rq.outstanding();
        let tail = rq.head().wrapping_sub(n);
        for i in 0..n {
            self.device_cqe(false, RC_QPN, RC_UIDX, tail.wrapping_add(i) as u16);
            if self.pending == CQ_ENTRIES / 2 {
                self.drain();
            }
        }
        self.drain();
        assert_eq!(self.rc.rq().unwrap().outstanding(), 0);
    }
}

fn report(name: &str, dt: Duration, ops: u64) {
    println!("ops {name} {ops}");
    println!("ns {name} {:.3}", dt.as_nanos() as f64 / ops as f64);
}

/// `n` single posts of `post` on the RC (or UD) send queue, in chunks the
/// queue takes, retiring between chunks.
fn run_single(
    b: &mut Bench,
    name: &str,
    on_ud: bool,
    n: u64,
    mut post: impl FnMut(&mut SendQueue<Uar>, u64),
) {
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let qp = if on_ud { &mut b.ud } else { &mut b.rc };
        let sq = qp.sq().unwrap();
        let max = u64::from(sq.max_post() - 1);
        let chunk = (n - done).min(max);
        let before = sq.cur_post();
        let t = Instant::now();
        for i in 0..chunk {
            post(sq, done + i);
        }
        dt += t.elapsed();
        let wqebbs = sq.cur_post().wrapping_sub(before) / chunk as u32;
        done += chunk;
        b.retire_sq(on_ud, wqebbs);
    }
    report(name, dt, n);
}

fn run_batch(
    b: &mut Bench,
    name: &str,
    n: u64,
    mut post: impl FnMut(&mut SendQueue<Uar>) -> Result<(), SendError>,
) {
    let mut dt = Duration::ZERO;
    for _ in 0..n {
        let sq = b.rc.sq().unwrap();
        let t = Instant::now();
        post(sq).expect(name);
        dt += t.elapsed();
        b.retire_sq(false, 1);
    }
    report(name, dt, 32 * n);
}

/// `n` polls of `per` requester CQEs of `rc`: the device's part (post the
/// work, write the CQEs) untimed for 256 CQEs at a time, then the polls
/// that take them, timed together.
fn run_poll(b: &mut Bench, name: &str, per: u32, n: u64) {
    let mut dt = Duration::ZERO;
    let mut done = 0;
    let mut c = Completion::default();
    let mut wc = [Completion::default(); 32];
    let w = harness::write_args(1);
    while done < n {
        // As many CQEs as the send queue can have outstanding (at most
        // the CQ's 256), a whole number of polls.
        let sq = b.rc.sq().unwrap();
        let cap = (sq.max_post() - 1).min(CQ_ENTRIES) / per;
        let polls = (n - done).min(u64::from(cap));
        let written = polls as u32 * per;
        let first = sq.cur_post();
        for _ in 0..written {
            sq.post_send_sge(
                w.wr_id,
                SendOp::RdmaWrite {
                    remote_addr: w.remote_addr,
                    rkey: w.rkey,
                },
                w.flags,
                w.sge,
            )
            .expect("post");
        }
        for i in 0..written {
            b.device_cqe(true, RC_QPN, RC_UIDX, first.wrapping_add(i) as u16);
        }
        let t = Instant::now();
        if per == 1 {
            for _ in 0..polls {
                assert!(ours_poll1(&mut b.cq, &b.table, black_box(&mut c)).expect("poll"));
            }
        } else {
            for _ in 0..polls {
                let got = ours_poll32(&mut b.cq, &b.table, black_box(&mut wc)).expect("poll");
                assert_eq!(got, 32);
            }
        }
        dt += t.elapsed();
        b.pending -= written;
        assert_eq!(b.rc.sq().unwrap().outstanding(), 0);
        done += polls;
    }
    report(name, dt, n * u64::from(per));
}

fn run_recv(b: &mut Bench, n: u64) {
    let sgl = [SGE];
    let wr = RecvWr {
        wr_id: 7,
        sgl: &sgl,
    };
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let rq = b.rc.rq().unwrap();
        let chunk = (n - done).min(63);
        let t = Instant::now();
        for _ in 0..chunk {
            ours_recv(rq, black_box(&wr)).expect("post recv");
        }
        dt += t.elapsed();
        done += chunk;
        b.retire_rq();
    }
    report("ours_recv", dt, n);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(100_000, |s| s.parse().expect("N must be a number"));
    let which: Vec<String> = args.collect();
    let run = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    doorbell_model_init();
    let mut b = Bench::new();
    let w = harness::write_args(7);
    let wrs: [harness::Write; 32] = std::array::from_fn(|i| harness::write_args(i as u64));

    if run("post1") {
        run_single(&mut b, "ours_post1", false, n, |sq, i| {
            ours_post1(
                sq,
                black_box(i),
                black_box(w.flags),
                black_box(w.remote_addr),
                black_box(w.rkey),
                black_box(w.sge),
            )
            .expect("post")
        });
    }
    if run("post32") {
        run_batch(&mut b, "ours_post32", n, |sq| {
            ours_post32(sq, black_box(&wrs))
        });
    }
    if run("post1_db") {
        run_single(&mut b, "ours_post1_db", false, n, |sq, i| {
            ours_post1_db(
                sq,
                black_box(i),
                black_box(w.flags),
                black_box(w.remote_addr),
                black_box(w.rkey),
                black_box(w.sge),
            )
            .expect("post")
        });
    }
    if run("post32_db") {
        run_batch(&mut b, "ours_post32_db", n, |sq| {
            ours_post32_db(sq, black_box(&wrs))
        });
    }
    if run("poll1") {
        run_poll(&mut b, "ours_poll1", 1, n);
    }
    if run("poll32") {
        run_poll(&mut b, "ours_poll32", 32, n);
    }
    if run("inline64") {
        let data: [u8; 64] = std::array::from_fn(|i| i as u8);
        run_single(&mut b, "ours_inline64", false, n, |sq, _| {
            ours_inline64(sq, black_box(7), black_box(&data[..])).expect("post inline")
        });
    }
    if run("ud") {
        let attr = AhAttr {
            dlid: 0x17,
            sl: 3,
            src_path_bits: 0,
            static_rate: 0,
            grh: None,
            port_num: 1,
        };
        let av = AddressVector::from_ah_attr(&attr, PortLinkLayer::Infiniband).unwrap();
        let sgl = [UD_SGE];
        let dest = UdDest {
            av: &av,
            remote_qpn: 0x456,
            remote_qkey: 0x1111_1111,
        };
        run_single(&mut b, "ours_ud", true, n, |sq, _| {
            ours_ud(sq, black_box(7), black_box(&dest), black_box(&sgl[..])).expect("post ud")
        });
    }
    if run("recv") {
        run_recv(&mut b, n);
    }
}
