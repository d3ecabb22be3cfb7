//! The four scenarios through hca-driver's public verbs API
//! (`op_api_post1`, `op_api_post32`, `op_api_poll1`, `op_api_poll32`).
//!
//! An [`Hca`] needs a device for its commands, so these run on hca-emu: an
//! emulated ConnectX-4 with a loopback plug on port 1, an RC QP connected
//! to a second QP of the same HCA, the RDMA writes landing in a registered
//! buffer. What is measured is the driver's own work: the emulated BAR
//! takes a lock and wakes the device thread on every store, so the UAR
//! pages here are ordinary memory ([`ShadowBar`]), a doorbell costing a
//! store as on a real BAR; between measured calls the last doorbell is
//! handed to the device, which executes everything posted up to it and
//! writes the completions the poll scenarios consume.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hca_driver::verbs::{
    AccessFlags, AhAttr, Completion, Context, Cq, DEFAULT_GID_INDEX, DmaBuf, Mr, Pd, Qp, QpAttr,
    QpCap, QpInitAttr, QpState, QpType, SendFlags, Sge, WcStatus,
};
use hca_driver::{Config, Hca, IbMtu, Rkey};
use hca_emu::{EmuConfig, EmuHca, EmuPlatform};
use platform::{Be32, Be64, DmaRegion, Mmio, Platform};

/// BAR offsets below this are the initialization segment.
const INIT_SEG_SIZE: usize = 0x1000;
/// A UAR page's BlueFlame registers (two halves of 256 bytes).
const BF_OFFSETS: core::ops::Range<usize> = 0x800..0xa00;
/// The UAR page size of the emulated device.
const UAR_PAGE_SIZE: usize = 4096;
const _: () = assert!(BF_OFFSETS.start % 0x200 == 0 && BF_OFFSETS.end == BF_OFFSETS.start + 0x200);
/// The bit every BlueFlame register offset has and no other UAR offset
/// the driver stores 64 bits to (the CQ arm doorbell at 0x20).
const BF_BIT: usize = 0x800;
const _: () = assert!(
    BF_OFFSETS.start & BF_BIT != 0
        && (BF_OFFSETS.end - 1) & BF_BIT != 0
        && 0x20 & BF_BIT == 0
        && UAR_PAGE_SIZE > BF_OFFSETS.end
);

/// hca-emu's platform with the UAR doorbells and BlueFlame copies of the
/// data path kept in ordinary memory (see the module docs); the init
/// segment, DMA memory and everything else go to the emulated device.
pub struct Shadow {
    emu: EmuPlatform,
    last: Arc<Last>,
}

/// The last doorbell stored: BAR offset and value.
#[derive(Default)]
struct Last {
    offset: AtomicUsize,
    value: AtomicU64,
    /// Where BlueFlame copies beyond their first word go.
    scratch: [AtomicU64; 32],
}

/// BAR0 of [`Shadow`].
#[derive(Clone)]
pub struct ShadowBar {
    real: <EmuPlatform as Platform>::Mmio,
    last: Arc<Last>,
}

impl ShadowBar {
    /// A store that goes to the emulated device (off the data path).
    #[cold]
    #[inline(never)]
    fn device_write64(&self, offset: usize, value: Be64) {
        self.real.write64(offset, value)
    }
}

impl Mmio for ShadowBar {
    fn len(&self) -> usize {
        self.real.len()
    }

    fn read32(&self, offset: usize) -> Be32 {
        self.real.read32(offset)
    }

    fn write32(&self, offset: usize, value: Be32) {
        self.real.write32(offset, value)
    }

    #[inline]
    fn write64(&self, offset: usize, value: Be64) {
        // One bit test, close to the single store of a real BAR: of the
        // offsets the driver stores 64 bits to (the send doorbells at
        // BF_OFFSETS, 0x800..0xa00 of a UAR page, and the CQ arm at 0x20 of
        // one; nothing 64-bit in the initialization segment, asserted in
        // debug builds), only the BlueFlame registers have bit 11 set.
        debug_assert!(offset >= INIT_SEG_SIZE || offset & BF_BIT == 0);
        if offset & BF_BIT == 0 {
            return self.device_write64(offset, value);
        }
        self.last.offset.store(offset, Ordering::Relaxed);
        self.last.value.store(value.to_raw(), Ordering::Relaxed);
    }

    #[inline]
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        // As a BAR's write-combined copy: the words as they are, one store
        // each (the first is the doorbell handed to the device).
        if let Some((first, rest)) = src.split_first() {
            self.write64(offset, *first);
            for (w, s) in rest.iter().zip(&self.last.scratch) {
                s.store(w.to_raw(), Ordering::Relaxed);
            }
        }
    }
}

impl Shadow {
    /// `emu` with its UAR pages' data-path stores kept in memory.
    pub fn new(emu: EmuPlatform) -> Self {
        Self {
            emu,
            last: Arc::default(),
        }
    }

    /// The log of the doorbells the data path stored.
    pub fn doorbells(&self) -> Doorbells {
        Doorbells(self.last.clone())
    }
}

/// The last doorbell the data path stored to a [`Shadow`]'s UAR pages, to
/// be handed to the emulated device between measured calls.
pub struct Doorbells(Arc<Last>);

impl Doorbells {
    /// Hands the last doorbell stored since the previous call to the
    /// device through `bar` (the emulated BAR0); nothing if none was.
    pub fn forward(&self, bar: &impl Mmio) {
        let ring = self.0.offset.swap(0, Ordering::Relaxed);
        if ring != 0 {
            bar.write64(ring, Be64::from_raw(self.0.value.load(Ordering::Relaxed)));
        }
    }
}

impl Platform for Shadow {
    type Mmio = ShadowBar;

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaRegion, platform::Error> {
        self.emu.alloc_dma(len, align)
    }
    fn free_dma(&self, region: DmaRegion) {
        self.emu.free_dma(region)
    }
    fn map_bar(&self, bar: u8) -> Result<ShadowBar, platform::Error> {
        Ok(ShadowBar {
            real: self.emu.map_bar(bar)?,
            last: self.last.clone(),
        })
    }
    fn bar_write_combining(&self, bar: u8) -> bool {
        self.emu.bar_write_combining(bar)
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), platform::Error> {
        self.emu.config_read(offset, buf)
    }
    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), platform::Error> {
        self.emu.config_write(offset, buf)
    }
    fn now(&self) -> Duration {
        self.emu.now()
    }
    fn delay(&self, d: Duration) {
        self.emu.delay(d)
    }
    fn relax(&self) {
        self.emu.relax()
    }
    fn reset_function(&self) -> Result<(), platform::Error> {
        self.emu.reset_function()
    }
    fn describe(&self) -> &str {
        "emulated ConnectX-4, UAR pages in ordinary memory"
    }
}

/// The QP type the scenarios post to.
pub type ApiQp = Qp<Shadow>;
/// The CQ type they poll.
pub type ApiCq = Cq<Shadow>;

/// One RDMA write through [`Qp::post_rdma_write`] (one SGE, signaled, with
/// its doorbell).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn op_api_post1(
    qp: &mut ApiQp,
    wr_id: u64,
    flags: SendFlags,
    remote_addr: u64,
    rkey: Rkey,
    sge: Sge,
) -> hca_driver::Result<()> {
    qp.post_rdma_write(wr_id, flags, remote_addr, rkey, sge)
}

/// One RDMA write of a batch.
#[derive(Clone, Copy, Debug)]
pub struct ApiWrite {
    /// Work request id.
    pub wr_id: u64,
    /// Signaled.
    pub flags: SendFlags,
    /// Where in the peer's region.
    pub remote_addr: u64,
    /// The region's key.
    pub rkey: Rkey,
    /// 64 bytes of the local region.
    pub sge: Sge,
}

/// 32 RDMA writes and one doorbell ([`Qp::batch`]).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn op_api_post32(qp: &mut ApiQp, wrs: &[ApiWrite; 32]) -> hca_driver::Result<()> {
    let mut b = qp.batch()?;
    for w in wrs {
        b.post_rdma_write(w.wr_id, w.flags, w.remote_addr, w.rkey, w.sge)?;
    }
    b.ring();
    Ok(())
}

/// One requester CQE ([`Cq::poll_one`]).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn op_api_poll1(
    cq: &ApiCq,
    out: &mut Completion,
) -> Result<bool, hca_driver::verbs::PollError> {
    cq.poll_one(out)
}

/// 32 requester CQEs ([`Cq::poll`] into [`Completion`]s).
#[inline(never)]
#[unsafe(no_mangle)]
pub fn op_api_poll32(cq: &ApiCq, wc: &mut [Completion; 32]) -> hca_driver::Result<usize> {
    cq.poll(wc)
}

/// An emulated HCA with a loopback plug on port 1, brought up on
/// [`Shadow`] (doorbells kept in memory until [`ShadowHca::forward`]): what
/// the scenarios' rigs start with.
pub struct ShadowHca {
    /// The emulator.
    pub emu: EmuHca,
    bar: <EmuPlatform as Platform>::Mmio,
    bells: Doorbells,
    /// The HCA.
    pub hca: Arc<Hca<Shadow>>,
}

impl ShadowHca {
    /// Brings the HCA up; with a context of it and a PD (unmeasured).
    pub fn open() -> (Self, Arc<Context<Shadow>>, Arc<Pd<Shadow>>) {
        let emu = EmuHca::new(EmuConfig::default());
        emu.plug_loopback(1).expect("loopback plug");
        let shadow = Shadow::new(emu.platform());
        let bells = shadow.doorbells();
        let bar = emu.platform().map_bar(0).expect("BAR0");
        let hca = Arc::new(Hca::open(shadow, Config::default()).expect("bring-up"));
        let ctx = Arc::new(Context::open(&hca).expect("context"));
        let pd = Arc::new(Pd::alloc(&ctx).expect("PD"));
        (
            Self {
                emu,
                bar,
                bells,
                hca,
            },
            ctx,
            pd,
        )
    }

    /// Hands the last doorbell to the device.
    pub fn forward(&self) {
        self.bells.forward(&self.bar);
    }

    /// Checks nothing went wrong and closes the HCA (of which nothing may
    /// be left).
    pub fn close(self) {
        Arc::into_inner(self.hca)
            .expect("the last handle")
            .close()
            .expect("close");
        self.emu.assert_clean();
    }
}

/// An emulated HCA with a connected RC QP whose RDMA writes loop back to a
/// second QP of the same HCA.
pub struct Api {
    dev: ShadowHca,
    /// The QP posted to.
    pub qp: ApiQp,
    /// Its send CQ.
    pub cq: Arc<ApiCq>,
    peer: ApiQp,
    mr: Mr<Shadow>,
    /// Work requests posted and not yet completed.
    outstanding: u32,
    /// Completions the device wrote and nobody polled yet.
    ready: u32,
    /// The send queue's depth.
    pub depth: u32,
    /// CQEs the device has written to the CQ so far.
    cqes: u32,
}

const ACCESS: AccessFlags = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);

impl Api {
    /// Opens the HCA and connects the QPs; `depth` work requests fit the
    /// send queue and the CQ.
    pub fn new(depth: u32) -> Self {
        let (dev, ctx, pd) = ShadowHca::open();
        let cq = Arc::new(Cq::create(&ctx, depth).expect("CQ"));
        let peer_cq = Arc::new(Cq::create(&ctx, 16).expect("CQ"));
        let buf = Arc::new(DmaBuf::alloc(&dev.hca, 1 << 16).expect("buffer"));
        let mr = Mr::register(&pd, &buf, ACCESS).expect("MR");
        let cap = QpCap {
            max_send_wr: depth,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq).cap(cap)).expect("QP");
        let mut peer = Qp::create(
            &pd,
            &QpInitAttr::new(QpType::Rc, &peer_cq, &peer_cq).cap(cap),
        )
        .expect("QP");
        let gid = ctx.query_gid(1, u16::from(DEFAULT_GID_INDEX)).expect("GID");
        let (a, b) = (qp.number().0, peer.number().0);
        for (q, remote) in [(&mut qp, b), (&mut peer, a)] {
            q.modify(
                &QpAttr::new()
                    .state(QpState::Init)
                    .port(1)
                    .pkey_index(0)
                    .access(ACCESS),
            )
            .expect("INIT");
            q.modify(
                &QpAttr::new()
                    .state(QpState::Rtr)
                    .path_mtu(IbMtu::Mtu1024)
                    .dest_qp_num(remote)
                    .rq_psn(0)
                    .max_dest_rd_atomic(1)
                    .min_rnr_timer(12)
                    .ah(AhAttr::roce(1, gid, DEFAULT_GID_INDEX)),
            )
            .expect("RTR");
            q.modify(
                &QpAttr::new()
                    .state(QpState::Rts)
                    .sq_psn(0)
                    .timeout(14)
                    .retry_cnt(7)
                    .rnr_retry(7)
                    .max_rd_atomic(1),
            )
            .expect("RTS");
        }
        Self {
            dev,
            qp,
            cq,
            peer,
            mr,
            outstanding: 0,
            ready: 0,
            depth,
            cqes: 0,
        }
    }

    /// The RDMA write `wr_id` of the scenarios: 64 bytes of the buffer to
    /// another place in it.
    pub fn write(&self, wr_id: u64) -> ApiWrite {
        ApiWrite {
            wr_id,
            flags: SendFlags::SIGNALED,
            remote_addr: self.mr.addr() + 4096 + 64 * (wr_id % 32),
            rkey: self.mr.rkey(),
            sge: self.mr.sge(0, 64).expect("SGE"),
        }
    }

    /// Room left in the send queue.
    pub fn room(&self) -> u32 {
        self.depth - self.outstanding - self.ready
    }

    /// Counts `n` posts.
    pub fn posted(&mut self, n: u32) {
        self.outstanding += n;
    }

    /// Hands the last doorbell to the device and waits until it has
    /// written the completions of everything posted (unmeasured).
    pub fn complete(&mut self) {
        self.dev.forward();
        let cqn = self.cq.number().0;
        let want = self.cqes.wrapping_add(self.outstanding);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pc = self.dev.emu.cq(cqn).expect("CQ").pc;
            if pc == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the device completed {} of {} writes",
                pc.wrapping_sub(self.cqes),
                self.outstanding
            );
            std::thread::yield_now();
        }
        self.cqes = want;
        self.ready += self.outstanding;
        self.outstanding = 0;
    }

    /// Polls (unmeasured) every completion written.
    pub fn drain(&mut self) {
        let mut wc = [Completion::default(); 32];
        while self.ready > 0 {
            let n = self.cq.poll(&mut wc).expect("poll");
            for c in &wc[..n] {
                assert_eq!(c.status(), WcStatus::Success, "{c:?}");
            }
            self.consumed(n as u32);
        }
    }

    /// Counts `n` completions polled.
    pub fn consumed(&mut self, n: u32) {
        assert!(n <= self.ready, "polled more than the device completed");
        self.ready -= n;
    }

    /// Checks nothing went wrong and closes the HCA.
    pub fn finish(self) {
        let Api {
            dev,
            qp,
            cq,
            peer,
            mr,
            ..
        } = self;
        drop((qp, peer, mr, cq));
        dev.close();
    }
}

impl Api {
    /// Posts `k` RDMA writes with one doorbell, outside the measurement.
    pub fn post_writes(&mut self, k: u32) {
        let wrs: Vec<ApiWrite> = (0..k).map(|i| self.write(u64::from(i))).collect();
        let mut b = self.qp.batch().expect("batch");
        for w in wrs {
            b.post_rdma_write(w.wr_id, w.flags, w.remote_addr, w.rkey, w.sge)
                .expect("post");
        }
        b.ring();
        self.posted(k);
    }
}

/// `n` calls of `post` (call `i` of them), each posting `per` work
/// requests: as many as the queue takes between two rounds in which the
/// device completes them and they are polled (untimed).
pub fn run_api_post(
    a: &mut Api,
    n: u64,
    per: u32,
    mut post: impl FnMut(&mut ApiQp, u64),
) -> Duration {
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let calls = (n - done).min(u64::from(a.room() / per));
        let t = Instant::now();
        for i in 0..calls {
            post(&mut a.qp, done + i);
        }
        dt += t.elapsed();
        a.posted(calls as u32 * per);
        done += calls;
        a.complete();
        a.drain();
    }
    dt
}

/// `n` calls of `poll`, each taking `per` CQEs: the device first completes
/// a queue's worth of posted writes (untimed), then the calls take them.
pub fn run_api_poll(
    a: &mut Api,
    n: u64,
    per: u32,
    mut poll: impl FnMut(&ApiCq) -> usize,
) -> Duration {
    let mut dt = Duration::ZERO;
    let mut done = 0u64;
    while done < n {
        let calls = (n - done).min(u64::from(a.room() / per));
        a.post_writes(calls as u32 * per);
        a.complete();
        let t = Instant::now();
        for _ in 0..calls {
            let got = poll(&a.cq);
            assert_eq!(
                got, per as usize,
                "a poll took fewer CQEs than the device wrote"
            );
        }
        dt += t.elapsed();
        a.consumed(calls as u32 * per);
        done += calls;
    }
    dt
}
