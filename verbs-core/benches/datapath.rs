//! Data-path benchmarks against memory standing in for the device: heap
//! memory as DMA memory, a heap page behind an `MmioWindow` as the UAR.
//!
//! - `post1`: one RDMA write (1 SGE) with its doorbell;
//! - `post32`: 32 RDMA writes with one doorbell (throughput per WQE);
//! - `poll1`: poll one requester CQE;
//! - `poll32`: poll 32 requester CQEs (throughput per CQE).
//!
//! Setup that stands for the device (writing CQEs, retiring posted work) is
//! done in `iter_custom` outside the timed region.

mod harness;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use harness::{Harness, rdma_write};
use verbs_core::{SendWr, WorkCompletion};

fn post(c: &mut Criterion) {
    let mut g = c.benchmark_group("post");
    g.throughput(Throughput::Elements(1));
    g.bench_function("post1", |b| {
        let mut h = Harness::new(512, 12);
        let wr = rdma_write(1);
        let max = u64::from(h.qp.sq().unwrap().max_post());
        b.iter_custom(|iters| {
            let mut dt = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let chunk = (iters - done).min(max);
                let sq = h.qp.sq().unwrap();
                let t = Instant::now();
                for _ in 0..chunk {
                    sq.post(black_box(&wr)).unwrap();
                }
                dt += t.elapsed();
                done += chunk;
                h.retire();
            }
            dt
        });
    });
    g.throughput(Throughput::Elements(32));
    g.bench_function("post32", |b| {
        let mut h = Harness::new(512, 12);
        let wrs: [SendWr<'static>; 32] = std::array::from_fn(|i| rdma_write(i as u64));
        b.iter_custom(|iters| {
            let mut dt = Duration::ZERO;
            for _ in 0..iters {
                let sq = h.qp.sq().unwrap();
                let t = Instant::now();
                sq.post_list(black_box(&wrs)).unwrap();
                dt += t.elapsed();
                h.retire();
            }
            dt
        });
    });
    g.finish();
}

fn poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll");
    g.throughput(Throughput::Elements(1));
    g.bench_function("poll1", |b| {
        let mut h = Harness::new(512, 12);
        let wr = rdma_write(1);
        let mut wc = [WorkCompletion::default(); 1];
        b.iter_custom(|iters| {
            let mut dt = Duration::ZERO;
            for _ in 0..iters {
                h.qp.sq().unwrap().post(&wr).unwrap();
                let counter = h.qp.sq().unwrap().cur_post().wrapping_sub(1) as u16;
                h.device_complete(counter);
                let t = Instant::now();
                let n = h.cq.poll(&h.table, black_box(&mut wc)).unwrap();
                dt += t.elapsed();
                assert_eq!(n, 1);
                h.polled(1);
            }
            dt
        });
    });
    g.throughput(Throughput::Elements(32));
    g.bench_function("poll32", |b| {
        let mut h = Harness::new(512, 12);
        let wrs: [SendWr<'static>; 32] = std::array::from_fn(|i| rdma_write(i as u64));
        let mut wc = [WorkCompletion::default(); 32];
        b.iter_custom(|iters| {
            let mut dt = Duration::ZERO;
            for _ in 0..iters {
                let sq = h.qp.sq().unwrap();
                let first = sq.cur_post();
                sq.post_list(&wrs).unwrap();
                for i in 0..32 {
                    h.device_complete(first.wrapping_add(i) as u16);
                }
                let t = Instant::now();
                let n = h.cq.poll(&h.table, black_box(&mut wc)).unwrap();
                dt += t.elapsed();
                assert_eq!(n, 32);
                h.polled(32);
            }
            dt
        });
    });
    g.finish();
}

criterion_group!(benches, post, poll);
criterion_main!(benches);
