//! Data-path benchmarks against memory standing in for the device: heap
//! memory as DMA memory, a heap page behind an `MmioWindow` as the UAR.
//!
//! Through the fastest safe API for each scenario:
//!
//! - `post/post1`: one RDMA write (1 SGE) with its doorbell
//!   (`SendQueue::post_send_sge`);
//! - `post/post32`: 32 RDMA writes with one doorbell (`SendQueue::batch`,
//!   `SendBatch::post_send_sge`; throughput per WQE);
//! - `poll/poll1`: poll one requester CQE (`Cq::poll_one`);
//! - `poll/poll32`: poll 32 requester CQEs into `Completion`s (throughput
//!   per CQE).
//!
//! The same posts with their error converted to the full `Error` (on the
//! queue and on a batch): `post/post1_error`, `post/post32_error`. And
//! through the general API: `post/post1_wr` (`SendQueue::post_send` of a
//! `SendWr`), `post/post32_wr` (`SendQueue::post_send_list`),
//! `poll/poll32_wc` (`Cq::poll` into `WorkCompletion`s).
//!
//! Setup that stands for the device (writing CQEs, retiring posted work) is
//! done in `iter_custom` outside the timed region.

mod harness;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use harness::{Harness, Uar, Write, rdma_write, write_args};
use verbs_core::{Completion, Cq, CqTable, Error, SendOp, SendQueue, SendWr, WorkCompletion};

/// Times `iters` single posts, in chunks the queue can take.
fn time_post1(h: &mut Harness, iters: u64, mut post: impl FnMut(&mut SendQueue<Uar>)) -> Duration {
    let max = u64::from(h.qp.sq().unwrap().max_post());
    let mut dt = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let chunk = (iters - done).min(max);
        let sq = h.qp.sq().unwrap();
        let t = Instant::now();
        for _ in 0..chunk {
            post(sq);
        }
        dt += t.elapsed();
        done += chunk;
        h.retire();
    }
    dt
}

/// Times `iters` batches of 32 posts.
fn time_post32(h: &mut Harness, iters: u64, mut post: impl FnMut(&mut SendQueue<Uar>)) -> Duration {
    let mut dt = Duration::ZERO;
    for _ in 0..iters {
        let sq = h.qp.sq().unwrap();
        let t = Instant::now();
        post(sq);
        dt += t.elapsed();
        h.retire();
    }
    dt
}

/// Times `iters` polls of `per` requester CQEs each: the device's part
/// (post the work, write the CQEs) is done untimed for 256 CQEs at a time,
/// then the polls that take them are timed together.
fn time_poll(
    h: &mut Harness,
    iters: u64,
    per: u32,
    mut poll: impl FnMut(&mut Cq<Uar>, &CqTable<8>) -> usize,
) -> Duration {
    const CHUNK: u32 = 256;
    let wrs: Vec<SendWr<'static>> = (0..CHUNK).map(|i| rdma_write(u64::from(i))).collect();
    let per_chunk = u64::from(CHUNK / per);
    let mut dt = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let polls = (iters - done).min(per_chunk);
        let cqes = polls as u32 * per;
        let sq = h.qp.sq().unwrap();
        let first = sq.cur_post();
        sq.post_send_list(&wrs[..cqes as usize]).unwrap();
        for i in 0..cqes {
            h.device_complete(first.wrapping_add(i) as u16);
        }
        let t = Instant::now();
        for _ in 0..polls {
            assert_eq!(poll(&mut h.cq, &h.table), per as usize);
        }
        dt += t.elapsed();
        h.polled(cqes);
        done += polls;
    }
    dt
}

/// Times `iters` single polls: the device's part is done untimed for 256
/// CQEs at a time, then `poll(cq, table, k)` takes the `k` CQEs written.
fn time_poll_chunks(
    h: &mut Harness,
    iters: u64,
    mut poll: impl FnMut(&mut Cq<Uar>, &CqTable<8>, u32),
) -> Duration {
    const CHUNK: u32 = 256;
    let wrs: Vec<SendWr<'static>> = (0..CHUNK).map(|i| rdma_write(u64::from(i))).collect();
    let mut dt = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let k = (iters - done).min(u64::from(CHUNK)) as u32;
        let sq = h.qp.sq().unwrap();
        let first = sq.cur_post();
        sq.post_send_list(&wrs[..k as usize]).unwrap();
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

fn post(c: &mut Criterion) {
    let mut g = c.benchmark_group("post");
    g.throughput(Throughput::Elements(1));
    g.bench_function("post1", |b| {
        let mut h = Harness::new(512, 12);
        let w = write_args(1);
        b.iter_custom(|iters| {
            time_post1(&mut h, iters, |sq| {
                let w = black_box(&w);
                sq.post_send_sge(
                    w.wr_id,
                    SendOp::RdmaWrite {
                        remote_addr: w.remote_addr,
                        rkey: w.rkey,
                    },
                    w.flags,
                    w.sge,
                )
                .unwrap()
            })
        });
    });
    g.bench_function("post1_error", |b| {
        let mut h = Harness::new(512, 12);
        let w = write_args(1);
        b.iter_custom(|iters| {
            time_post1(&mut h, iters, |sq| {
                let w = black_box(&w);
                sq.post_send_sge(
                    w.wr_id,
                    SendOp::RdmaWrite {
                        remote_addr: w.remote_addr,
                        rkey: w.rkey,
                    },
                    w.flags,
                    w.sge,
                )
                .map_err(Error::from)
                .unwrap()
            })
        });
    });
    g.bench_function("post1_wr", |b| {
        let mut h = Harness::new(512, 12);
        let wr = rdma_write(1);
        b.iter_custom(|iters| {
            time_post1(&mut h, iters, |sq| sq.post_send(black_box(&wr)).unwrap())
        });
    });
    g.throughput(Throughput::Elements(32));
    g.bench_function("post32", |b| {
        let mut h = Harness::new(512, 12);
        let ws: [Write; 32] = std::array::from_fn(|i| write_args(i as u64));
        b.iter_custom(|iters| {
            time_post32(&mut h, iters, |sq| {
                let mut batch = sq.batch();
                for w in black_box(&ws) {
                    batch
                        .post_send_sge(
                            w.wr_id,
                            SendOp::RdmaWrite {
                                remote_addr: w.remote_addr,
                                rkey: w.rkey,
                            },
                            w.flags,
                            w.sge,
                        )
                        .unwrap();
                }
                batch.ring();
            })
        });
    });
    g.bench_function("post32_error", |b| {
        let mut h = Harness::new(512, 12);
        let ws: [Write; 32] = std::array::from_fn(|i| write_args(i as u64));
        b.iter_custom(|iters| {
            time_post32(&mut h, iters, |sq| {
                let mut batch = sq.batch();
                for w in black_box(&ws) {
                    batch
                        .post_send_sge(
                            w.wr_id,
                            SendOp::RdmaWrite {
                                remote_addr: w.remote_addr,
                                rkey: w.rkey,
                            },
                            w.flags,
                            w.sge,
                        )
                        .map_err(Error::from)
                        .unwrap();
                }
                batch.ring();
            })
        });
    });
    g.bench_function("post32_wr", |b| {
        let mut h = Harness::new(512, 12);
        let wrs: [SendWr<'static>; 32] = std::array::from_fn(|i| rdma_write(i as u64));
        b.iter_custom(|iters| {
            time_post32(&mut h, iters, |sq| {
                sq.post_send_list(black_box(&wrs)).unwrap()
            })
        });
    });
    g.finish();
}

fn poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll");
    g.throughput(Throughput::Elements(1));
    g.bench_function("poll1", |b| {
        let mut h = Harness::new(512, 12);
        let mut c = Completion::default();
        b.iter_custom(|iters| {
            time_poll_chunks(&mut h, iters, |cq, t, k| {
                for _ in 0..k {
                    assert!(cq.poll_one(t, black_box(&mut c)).unwrap());
                }
            })
        });
    });
    g.throughput(Throughput::Elements(32));
    g.bench_function("poll32", |b| {
        let mut h = Harness::new(512, 12);
        let mut wc = [Completion::default(); 32];
        b.iter_custom(|iters| {
            time_poll(&mut h, iters, 32, |cq, t| {
                cq.poll(t, black_box(&mut wc)).unwrap()
            })
        });
    });
    g.bench_function("poll32_wc", |b| {
        let mut h = Harness::new(512, 12);
        let mut wc = [WorkCompletion::default(); 32];
        b.iter_custom(|iters| {
            time_poll(&mut h, iters, 32, |cq, t| {
                cq.poll(t, black_box(&mut wc)).unwrap()
            })
        });
    });
    g.finish();
}

criterion_group!(benches, post, poll);
criterion_main!(benches);
