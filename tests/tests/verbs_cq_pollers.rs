//! One CQ polled by two threads at once while a third posts: the CQ's
//! lock is contended (its out-of-line path runs) and every completion is
//! taken exactly once, each thread seeing its share in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hca_driver::verbs::{AccessFlags, Completion, DmaBuf, Mr, SendFlags};
use hca_tests::verbs::{RcParams, qp_cap};
use hca_tests::{Link, TestPlatform};

/// Completions the scenario produces.
const N: u64 = 2000;

fn two_pollers_share_one_cq<P: TestPlatform + Send + Sync>(l: &mut Link<P>)
where
    P::Mmio: Send + Sync,
{
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let sides = h.sides_cqe(256, 8);
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 1 << 16).unwrap()),
        );
        let ma = Mr::register(&sides.pda, &ba, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = Mr::register(
            &sides.pdb,
            &bb,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        let (mut qa, qb, _, eb) = sides.rc_pair(
            (pa, pb),
            (qp_cap(64, 1, 1, 0), qp_cap(1, 1, 1, 0)),
            (mb.addr(), mb.rkey()),
            &RcParams::default(),
        );
        let taken = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let (one, many) = std::thread::scope(|s| {
            // Real time: the emulated device idles until the poster posts.
            let deadline = Instant::now() + Duration::from_secs(120);
            let poller = |single: bool| {
                let (cq, taken, stop) = (&sides.cqa, &taken, &stop);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    let mut c = Completion::default();
                    let mut wc = [Completion::default(); 4];
                    while taken.load(Ordering::Acquire) < N && !stop.load(Ordering::Acquire) {
                        let got = if single {
                            if cq.poll_one(&mut c).unwrap() {
                                wc[0] = c;
                                1
                            } else {
                                0
                            }
                        } else {
                            cq.poll(&mut wc).unwrap()
                        };
                        for c in &wc[..got] {
                            assert!(c.is_success(), "{c:?}");
                            seen.push(c.wr_id());
                        }
                        taken.fetch_add(got as u64, Ordering::AcqRel);
                        if got == 0 {
                            assert!(Instant::now() < deadline, "{taken:?} of {N} completions");
                            std::thread::yield_now();
                        }
                    }
                    seen
                })
            };
            let (one, many) = (poller(true), poller(false));
            let mut i = 0u64;
            while i < N {
                match qa.post_rdma_write(
                    i,
                    SendFlags::SIGNALED,
                    eb.addr + 64 * (i % 1024),
                    eb.rkey,
                    ma.sge(64 * (i % 64) as usize, 64).unwrap(),
                ) {
                    Ok(()) => i += 1,
                    Err(hca_driver::Error::InvalidWorkRequest {
                        reason:
                            hca_driver::verbs::WrError::DataPath(verbs_core::Error::QueueFull {
                                ..
                            }),
                        ..
                    }) => std::thread::yield_now(),
                    Err(e) => {
                        stop.store(true, Ordering::Release);
                        panic!("{e}");
                    }
                }
            }
            (one.join().unwrap(), many.join().unwrap())
        });
        // Each thread took its completions in order, and together every
        // one exactly once.
        for seen in [&one, &many] {
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order");
        }
        let mut all: Vec<u64> = one.iter().chain(&many).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
        drop((qa, qb, ma, mb));
    }
    l.close(h);
}

hca_tests::link_scenarios!(two_pollers_share_one_cq);
