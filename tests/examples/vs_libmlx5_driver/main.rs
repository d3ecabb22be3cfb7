//! The `hca_driver::verbs` column of the side-by-side benchmark against
//! rdma-core's libmlx5 (`bash bench/incumbent/run.sh`, whose other two
//! columns are `bench/incumbent/libmlx5_bench.c` and
//! `verbs-core/examples/vs_libmlx5.rs`).
//!
//! Every scenario of that benchmark, through hca-driver's public verbs
//! API, on the memory-backed setup of `datapath_cost`'s `op_api_*`
//! scenarios (`../datapath_cost/api.rs`): an emulated ConnectX-4 whose
//! UAR pages are ordinary memory, so a doorbell is a store to memory as
//! on the other two sides; between measured calls the last doorbell is
//! handed to the emulated device, which executes the work (for real, over
//! a loopback plug) and writes the completions. Each measured operation
//! is one `#[inline(never)]` function, so
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect=drv_inline64 \
//!     target/release/examples/vs_libmlx5_driver 10000 inline64
//! ```
//!
//! counts exactly its instructions; without valgrind the program prints
//! nanoseconds per operation. Output, command line and scenario names are
//! those of `vs_libmlx5`: `ops <fn> <count>` and `ns <fn> <ns per op>`
//! lines (per WQE or CQE for the batches).
//!
//! - `post1`, `post32`, `poll1`, `poll32`: `op_api_post1`,
//!   `op_api_post32`, `op_api_poll1`, `op_api_poll32` of `datapath_cost`
//!   (`Qp::post_rdma_write`; `Qp::batch`, 32 `SendBatch::post_rdma_write`
//!   and `ring`; `Cq::poll_one`; `Cq::poll` of 32 into `Completion`s);
//! - `post1_db`, `post32_db`: the same followed by the doorbell-cost
//!   model (`drv_post1_db`, `drv_post32_db`);
//! - `inline64`: a signaled SEND of 64 bytes inline (`Qp::post_send`,
//!   BlueFlame copy included), received by a connected RC QP;
//! - `ud`: a signaled UD SEND of one SGE (256 bytes) with an address
//!   handle's destination (`Qp::post_send` with `Ah::dest`), received by
//!   a second UD QP;
//! - `recv`: one receive WQE of one SGE (`Qp::post_recv`), consumed
//!   afterwards by SENDs of the connected QP.
//!
//! The driver checks what verbs-core does not: the QP's state, and that
//! each SGE's lkey is a region of the QP's PD that holds it (the SGEs
//! here are such regions, as they must be for the device).

#[path = "../datapath_cost/api.rs"]
#[allow(dead_code)]
mod api;
#[path = "../../../verbs-core/benches/doorbell_model.rs"]
mod doorbell_model;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::{Api, ApiCq, ApiQp, ApiWrite, Shadow, ShadowHca};
use doorbell_model::{doorbell_cost, doorbell_model_init};
use hca_driver::verbs::{
    AccessFlags, Ah, Completion, Cq, DmaBuf, Mr, Qp, QpInitAttr, QpType, RecvWr, SendFlags, SendOp,
    SendWr, Sge, UdDest, WcStatus, WorkCompletion,
};
use hca_driver::{IbMtu, Rkey};
use hca_tests::verbs::{Endpoint, RcParams, connect_pair, path_to, qp_cap, ud_ready};

// ---- measured operations ---------------------------------------------------

/// `op_api_post1` followed by the doorbell-cost model.
#[inline(never)]
#[unsafe(no_mangle)]
fn drv_post1_db(
    qp: &mut ApiQp,
    wr_id: u64,
    flags: SendFlags,
    remote_addr: u64,
    rkey: Rkey,
    sge: Sge,
) -> hca_driver::Result<()> {
    let r = qp.post_rdma_write(wr_id, flags, remote_addr, rkey, sge);
    doorbell_cost();
    r
}

/// `op_api_post32` followed by the doorbell-cost model.
#[inline(never)]
#[unsafe(no_mangle)]
fn drv_post32_db(qp: &mut ApiQp, wrs: &[ApiWrite; 32]) -> hca_driver::Result<()> {
    let mut b = qp.batch()?;
    for w in wrs {
        b.post_rdma_write(w.wr_id, w.flags, w.remote_addr, w.rkey, w.sge)?;
    }
    b.ring();
    doorbell_cost();
    Ok(())
}

/// A signaled SEND of `data` inline. The length is a run-time value (a
/// slice), as it is for the library and for `vs_libmlx5`.
#[inline(never)]
#[unsafe(no_mangle)]
fn drv_inline64(qp: &mut ApiQp, wr_id: u64, data: &[u8]) -> hca_driver::Result<()> {
    qp.post_send(
        &SendWr::new(wr_id, SendOp::Send)
            .inline(data)
            .flags(SendFlags::SIGNALED),
    )
}

/// A signaled UD SEND of the gather list `sgl` (one SGE) to `dest`.
#[inline(never)]
#[unsafe(no_mangle)]
fn drv_ud(qp: &mut ApiQp, wr_id: u64, dest: &UdDest<'_>, sgl: &[Sge]) -> hca_driver::Result<()> {
    qp.post_send(
        &SendWr::new(wr_id, SendOp::Send)
            .sgl(sgl)
            .flags(SendFlags::SIGNALED)
            .ud(*dest),
    )
}

/// One receive work request.
#[inline(never)]
#[unsafe(no_mangle)]
fn drv_recv(qp: &mut ApiQp, wr: &RecvWr<'_>) -> hca_driver::Result<()> {
    qp.post_recv(wr)
}

// ---- the setup of the SEND and receive scenarios (unmeasured) --------------

/// Work requests per round of the SEND and receive scenarios (the queues
/// and CQs take them all).
const ROUND: u32 = 64;
const QKEY: u32 = 0x1111_1111;
const ACCESS: AccessFlags = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);

/// An emulated HCA (UAR pages in memory, as [`Api`]) with two connected RC
/// QPs `a` -> `b` and two UD QPs `ua` -> `ub` over a loopback plug.
struct Rig {
    dev: ShadowHca,
    /// Send completions of `a` and `ua`.
    cq_a: Arc<ApiCq>,
    /// Receive completions of `b` and `ub`.
    cq_b: Arc<ApiCq>,
    a: ApiQp,
    b: ApiQp,
    ua: ApiQp,
    ub: ApiQp,
    ah: Ah<Shadow>,
    mr: Mr<Shadow>,
    ub_qpn: u32,
}

impl Rig {
    fn new() -> Self {
        let (dev, ctx, pd) = ShadowHca::open();
        let cq_a = Arc::new(Cq::create(&ctx, 2 * ROUND).expect("CQ"));
        let cq_b = Arc::new(Cq::create(&ctx, 2 * ROUND).expect("CQ"));
        let buf = Arc::new(DmaBuf::alloc(&dev.hca, 1 << 16).expect("buffer"));
        let mr = Mr::register(&pd, &buf, ACCESS).expect("MR");
        let cap = qp_cap(ROUND, ROUND, 1, 64);
        let qp = |t, send: &Arc<ApiCq>, recv: &Arc<ApiCq>| {
            Qp::create(&pd, &QpInitAttr::new(t, send, recv).cap(cap)).expect("QP")
        };
        let mut a = qp(QpType::Rc, &cq_a, &cq_b);
        let mut b = qp(QpType::Rc, &cq_a, &cq_b);
        let mut ua = qp(QpType::Ud, &cq_a, &cq_b);
        let mut ub = qp(QpType::Ud, &cq_a, &cq_b);
        assert!(a.cap().max_inline_data >= 64, "64 bytes inline");
        let p = RcParams {
            mtu: IbMtu::Mtu1024,
            rnr_retry: 7,
            ..RcParams::default()
        };
        connect_pair((&ctx, 1, &mut a), (&ctx, 1, &mut b), (0, Rkey(0)), &p);
        ud_ready(&mut ua, 1, QKEY);
        ud_ready(&mut ub, 1, QKEY);
        let ub_qpn = ub.number().0;
        let eb = Endpoint::of(&ctx, 1, ub_qpn, 0, Rkey(0));
        let ah = Ah::create(&pd, &path_to(&ctx, 1, &eb, 64)).expect("AH");
        Self {
            dev,
            cq_a,
            cq_b,
            a,
            b,
            ua,
            ub,
            ah,
            mr,
            ub_qpn,
        }
    }

    /// Posts `n` receives of 512 bytes on `ub` (or `b`), unmeasured.
    fn recvs(&mut self, on_ud: bool, n: u32) {
        let sge = [self.mr.sge(8192, 512).expect("SGE")];
        let qp = if on_ud { &mut self.ub } else { &mut self.b };
        for i in 0..n {
            qp.post_recv(&RecvWr {
                wr_id: u64::from(i),
                sgl: &sge,
            })
            .expect("post_recv");
        }
    }

    /// Hands the last doorbell to the device and takes `sends` completions
    /// from `cq_a` and `recvs` from `cq_b`, all successful (unmeasured).
    fn settle(&mut self, sends: u32, recvs: u32) {
        self.dev.forward();
        for (cq, n) in [(&self.cq_a, sends), (&self.cq_b, recvs)] {
            let mut wc = [WorkCompletion::default(); 16];
            let mut got = 0u32;
            let deadline = Instant::now() + Duration::from_secs(30);
            while got < n {
                let want = ((n - got) as usize).min(wc.len());
                let k = cq.poll(&mut wc[..want]).expect("poll");
                for c in &wc[..k] {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                }
                got += k as u32;
                assert!(
                    Instant::now() < deadline,
                    "the device completed {got} of {n} work requests on {cq:?}"
                );
                if k == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Checks nothing went wrong and closes the HCA.
    fn finish(self) {
        let Rig {
            dev,
            cq_a,
            cq_b,
            a,
            b,
            ua,
            ub,
            ah,
            mr,
            ..
        } = self;
        drop((a, b, ua, ub, ah, mr, cq_a, cq_b));
        dev.close();
    }
}

// ---- the scenarios -----------------------------------------------------------

fn report(name: &str, dt: Duration, ops: u64) {
    println!("ops {name} {ops}");
    println!("ns {name} {:.3}", dt.as_nanos() as f64 / ops as f64);
}

fn single_post(name: &str, n: u64, db: bool) {
    let mut a = Api::new(512);
    let w = a.write(0);
    let dt = api::run_api_post(&mut a, n, 1, |qp, i| {
        let (id, f, ra, rk, s) = (
            black_box(i),
            black_box(w.flags),
            black_box(w.remote_addr),
            black_box(w.rkey),
            black_box(w.sge),
        );
        if db {
            drv_post1_db(qp, id, f, ra, rk, s)
        } else {
            api::op_api_post1(qp, id, f, ra, rk, s)
        }
        .expect("post")
    });
    a.finish();
    report(name, dt, n);
}

fn batch_post(name: &str, n: u64, db: bool) {
    let mut a = Api::new(512);
    let wrs: [ApiWrite; 32] = std::array::from_fn(|i| a.write(i as u64));
    let dt = api::run_api_post(&mut a, n, 32, |qp, _| {
        if db {
            drv_post32_db(qp, black_box(&wrs))
        } else {
            api::op_api_post32(qp, black_box(&wrs))
        }
        .expect("post")
    });
    a.finish();
    report(name, dt, 32 * n);
}

fn poll(name: &str, n: u64, per: u32) {
    let mut a = Api::new(256);
    let mut c = Completion::default();
    let mut wc = [Completion::default(); 32];
    let dt = api::run_api_poll(&mut a, n, per, |cq| {
        if per == 1 {
            usize::from(api::op_api_poll1(cq, black_box(&mut c)).expect("poll"))
        } else {
            api::op_api_poll32(cq, black_box(&mut wc)).expect("poll")
        }
    });
    a.finish();
    report(name, dt, u64::from(per) * n);
}

/// `n` posts of `post` on `a` (inline SENDs to `b`) or `ua` (UD SENDs to
/// `ub`), in rounds whose receives are posted first and whose
/// completions are taken after (unmeasured).
fn sends(rig: &mut Rig, name: &str, on_ud: bool, n: u64, mut post: impl FnMut(&mut Rig, u64)) {
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let k = (n - done).min(u64::from(ROUND)) as u32;
        rig.recvs(on_ud, k);
        let t = Instant::now();
        for i in 0..u64::from(k) {
            post(rig, done + i);
        }
        dt += t.elapsed();
        rig.settle(k, k);
        done += u64::from(k);
    }
    report(name, dt, n);
}

/// `n` receives posted on `b`, in rounds consumed by SENDs of `a`
/// (unmeasured).
fn recvs(rig: &mut Rig, n: u64) {
    let sgl = [rig.mr.sge(8192, 4096).expect("SGE")];
    let wr = RecvWr {
        wr_id: 7,
        sgl: &sgl,
    };
    let send_sge = [rig.mr.sge(0, 64).expect("SGE")];
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let k = (n - done).min(u64::from(ROUND)) as u32;
        let t = Instant::now();
        for _ in 0..k {
            drv_recv(&mut rig.b, black_box(&wr)).expect("post recv");
        }
        dt += t.elapsed();
        for i in 0..k {
            rig.a
                .post_send(
                    &SendWr::new(u64::from(i), SendOp::Send)
                        .sgl(&send_sge)
                        .flags(SendFlags::SIGNALED),
                )
                .expect("send");
        }
        rig.settle(k, k);
        done += u64::from(k);
    }
    report("drv_recv", dt, n);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(100_000, |s| s.parse().expect("N must be a number"));
    let which: Vec<String> = args.collect();
    let run = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    doorbell_model_init();

    if run("post1") {
        single_post("op_api_post1", n, false);
    }
    if run("post32") {
        batch_post("op_api_post32", n, false);
    }
    if run("post1_db") {
        single_post("drv_post1_db", n, true);
    }
    if run("post32_db") {
        batch_post("drv_post32_db", n, true);
    }
    if run("poll1") {
        poll("op_api_poll1", n, 1);
    }
    if run("poll32") {
        poll("op_api_poll32", n, 32);
    }
    if run("inline64") || run("ud") || run("recv") {
        let mut rig = Rig::new();
        if run("inline64") {
            let data: [u8; 64] = std::array::from_fn(|i| i as u8);
            sends(&mut rig, "drv_inline64", false, n, |r, _| {
                drv_inline64(&mut r.a, black_box(7), black_box(&data[..])).expect("post inline")
            });
        }
        if run("ud") {
            let sgl = [rig.mr.sge(0, 256).expect("SGE")];
            let qpn = rig.ub_qpn;
            sends(&mut rig, "drv_ud", true, n, |r, _| {
                let dest = r.ah.dest(qpn, QKEY);
                drv_ud(
                    &mut r.ua,
                    black_box(7),
                    black_box(&dest),
                    black_box(&sgl[..]),
                )
                .expect("post ud")
            });
        }
        if run("recv") {
            recvs(&mut rig, n);
        }
        rig.finish();
    }
}
