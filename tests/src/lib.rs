//! # hca-tests: integration tests of the mlx5 driver
//!
//! The scenarios in `tests/` run against `hca-emu` by default and against a
//! real ConnectX through the vfio backend when `HCA_PCI=<bdf>` is set: this
//! suite is what a hardware bring-up engineer runs on a new card.
//!
//! A scenario is a function generic over the platform, taking a [`Bench`]:
//!
//! ```ignore
//! fn open_close<P: TestPlatform>(b: &mut Bench<P>) {
//!     let hca = b.open();
//!     b.close(hca);
//! }
//! hca_tests::scenarios!(open_close);
//! ```
//!
//! [`scenarios!`] makes two tests of each: `emulated::<name>` on a fresh
//! emulated ConnectX-4, and `hardware::<name>` on the device `HCA_PCI`
//! names (bound to vfio-pci). The hardware tests are `#[ignore]`d unless
//! `HCA_PCI` was set when they were built (the build script sets
//! `cfg(hca_hardware)` and cargo rebuilds when the variable changes), so
//! `cargo test` counts them as ignored, never as passed; run them with
//!
//! ```text
//! HCA_PCI=0000:02:00.0 cargo test -p hca-tests
//! HCA_PCI=0000:02:00.0,0000:02:00.1 cargo test -p hca-tests   # two functions cabled together
//! ```
//!
//! A hardware test run without `HCA_PCI` (`-- --include-ignored`) fails,
//! saying so. Both variants end with [`Bench::assert_clean`]: on the
//! emulator no IOMMU fault and nothing leaked (pages, objects, DMA
//! regions), on hardware every byte of DMA memory freed. Hardware
//! scenarios run one at a time (one process can open a VFIO group once).

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};

pub use hca_driver;
pub use hca_emu;
pub use platform;

pub mod steer;
pub mod verbs;

use hca_driver::verbs::{Qp, QpCap, QpInitAttr, QpType};
use hca_driver::{Config, Error, Hca};
use hca_emu::{EmuConfig, EmuHca, EmuPlatform};
use platform::Platform;
use platform::vfio::{VfioOptions, VfioPlatform};

/// The environment variable naming the PCI function of a real ConnectX.
pub const HCA_PCI: &str = "HCA_PCI";

/// The device `HCA_PCI` names, if set (and not empty).
pub fn hardware_bdf() -> Option<String> {
    std::env::var(HCA_PCI).ok().filter(|s| !s.trim().is_empty())
}

/// Installs `env_logger` once (`RUST_LOG=hca_driver=trace` shows every
/// command).
pub fn init_logging() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// A platform the scenarios run on.
pub trait TestPlatform: Platform + 'static + Sized {
    /// Panics with a readable report unless the device and the memory are
    /// clean after the HCA was closed.
    fn assert_clean(bench: &Bench<Self>);
    /// Bytes of DMA memory still allocated from the platform.
    fn dma_allocated(bench: &Bench<Self>) -> usize;
}

impl TestPlatform for EmuPlatform {
    fn assert_clean(bench: &Bench<Self>) {
        bench
            .emu()
            .expect("an emulated bench has its emulator")
            .assert_clean();
    }
    fn dma_allocated(bench: &Bench<Self>) -> usize {
        bench
            .emu()
            .expect("an emulated bench has its emulator")
            .leak_report()
            .dma_regions
            .iter()
            .map(|r| r.1)
            .sum()
    }
}

impl TestPlatform for VfioPlatform {
    fn assert_clean(bench: &Bench<Self>) {
        let n = Self::dma_allocated(bench);
        assert_eq!(n, 0, "{n} bytes of DMA memory still allocated after close");
    }
    fn dma_allocated(bench: &Bench<Self>) -> usize {
        bench
            .platform
            .as_ref()
            .map_or(0, |p| p.dma_stats().allocated_bytes)
    }
}

/// A device under test: its platform (lent to an [`Hca`] while open), the
/// driver configuration, and the emulator behind it when emulated.
pub struct Bench<P: TestPlatform> {
    platform: Option<P>,
    /// The driver configuration [`open`](Self::open) uses.
    pub config: Config,
    emu: Option<EmuHca>,
}

impl Bench<EmuPlatform> {
    /// A fresh emulated ConnectX-4.
    pub fn emulated(emu: EmuConfig, config: Config) -> Self {
        init_logging();
        let emu = EmuHca::new(emu);
        Self {
            platform: Some(emu.platform()),
            config,
            emu: Some(emu),
        }
    }
}

impl Bench<EmuPlatform> {
    /// Opens the HCA, runs `f` with it and the emulator, then closes the
    /// HCA and checks the bench is clean ([`assert_clean`](Self::assert_clean));
    /// panics on any failure. Returns what `f` returned.
    #[track_caller]
    pub fn with_open<R>(&mut self, f: impl FnOnce(&Arc<Hca<EmuPlatform>>, &EmuHca) -> R) -> R {
        let hca = self.open();
        let r = f(&hca, self.emu().expect("emulated"));
        self.close(hca);
        self.assert_clean();
        r
    }
}

impl Bench<VfioPlatform> {
    /// The ConnectX at `bdf` (bound to vfio-pci).
    pub fn hardware(bdf: &str, config: Config) -> Result<Self, platform::Error> {
        init_logging();
        let p = VfioPlatform::open(bdf, VfioOptions::default())?;
        Ok(Self {
            platform: Some(p),
            config,
            emu: None,
        })
    }
}

impl<P: TestPlatform> Bench<P> {
    /// The emulator (fault injection, reports), when emulated.
    pub fn emu(&self) -> Option<&EmuHca> {
        self.emu.as_ref()
    }

    /// Whether the bench is a real device.
    pub fn is_hardware(&self) -> bool {
        self.emu.is_none()
    }

    /// Opens the HCA with [`config`](Self::config), shared (verbs objects
    /// hold handles of it); panics on failure.
    #[track_caller]
    pub fn open(&mut self) -> Arc<Hca<P>> {
        match self.try_open() {
            Ok(h) => h,
            Err(e) => panic!("bring-up failed: {e}"),
        }
    }

    /// Opens the HCA; on failure the platform comes back to the bench.
    pub fn try_open(&mut self) -> Result<Arc<Hca<P>>, Error> {
        let p = self
            .platform
            .take()
            .expect("the platform is with the bench (the HCA is closed)");
        match Hca::open(p, self.config) {
            Ok(h) => Ok(Arc::new(h)),
            Err(f) => {
                self.platform = Some(f.platform);
                Err(f.error)
            }
        }
    }

    /// Closes the HCA; panics on failure.
    #[track_caller]
    pub fn close(&mut self, hca: Arc<Hca<P>>) {
        if let Err(e) = self.try_close(hca) {
            panic!("teardown failed: {e}");
        }
    }

    /// Closes the HCA (its last handle: every verbs object is gone); the
    /// platform comes back to the bench either way.
    pub fn try_close(&mut self, hca: Arc<Hca<P>>) -> Result<(), Error> {
        let hca = match Arc::try_unwrap(hca) {
            Ok(h) => h,
            Err(h) => {
                return Err(Error::InUse {
                    what: "the HCA",
                    users: (Arc::strong_count(&h) - 1) as u32,
                });
            }
        };
        match hca.close() {
            Ok(p) => {
                self.platform = Some(p);
                Ok(())
            }
            Err(f) => {
                self.platform = Some(f.platform);
                Err(f.error)
            }
        }
    }

    /// See [`TestPlatform::assert_clean`].
    #[track_caller]
    pub fn assert_clean(&self) {
        P::assert_clean(self)
    }

    /// See [`TestPlatform::dma_allocated`].
    pub fn dma_allocated(&self) -> usize {
        P::dma_allocated(self)
    }
}

/// The emulated firmware asks for `n` pages (negative: gives `-n` back),
/// the emulator runs, and the driver answers: what
/// [`Hca::poll_events`] returns.
pub fn page_request(emu: &EmuHca, hca: &Hca<EmuPlatform>, n: i32) -> Result<usize, Error> {
    emu.faults().page_request(n);
    emu.run_until_idle();
    hca.poll_events()
}

/// Runs a scenario on a fresh emulated ConnectX-4 with the default
/// configurations, then checks it is clean.
pub fn run_emulated(scenario: fn(&mut Bench<EmuPlatform>)) {
    let mut b = Bench::emulated(EmuConfig::default(), Config::default());
    scenario(&mut b);
    b.assert_clean();
}

static HARDWARE: Mutex<()> = Mutex::new(());

/// Runs a scenario on the ConnectX `HCA_PCI` names; fails, saying why,
/// when it is not set (the test was then run with `--include-ignored`: a
/// test that cannot run must not read as passed).
pub fn run_hardware(name: &str, scenario: fn(&mut Bench<VfioPlatform>)) {
    let Some(bdf) = hardware_bdf() else {
        panic!(
            "hardware::{name} cannot run: {HCA_PCI} is not set (set {HCA_PCI}=<bdf> of a ConnectX bound to vfio-pci to run it on a real card)"
        );
    };
    let _one_at_a_time = HARDWARE.lock().unwrap_or_else(|e| e.into_inner());
    // `HCA_PCI=<bdf1>,<bdf2>` (for link scenarios): the first one here.
    let bdf = bdf.split(',').next().unwrap_or_default().trim().to_string();
    let mut b = match Bench::hardware(&bdf, Config::default()) {
        Ok(b) => b,
        Err(e) => panic!("cannot open {bdf} through vfio: {e}"),
    };
    eprintln!("hardware::{name} on {bdf}");
    scenario(&mut b);
    b.assert_clean();
}

/// Declares scenarios: for each generic function `name<P: TestPlatform>(&mut
/// Bench<P>)`, a test `emulated::name` and a test `hardware::name`.
#[macro_export]
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod emulated {
            $(
                #[test]
                fn $name() {
                    $crate::run_emulated(super::$name::<$crate::hca_emu::EmuPlatform>);
                }
            )*
        }
        mod hardware {
            $(
                #[test]
                #[cfg_attr(not(hca_hardware), ignore = "needs a real ConnectX: HCA_PCI=<bdf> cargo test -p hca-tests")]
                fn $name() {
                    $crate::run_hardware(
                        stringify!($name),
                        super::$name::<$crate::platform::vfio::VfioPlatform>,
                    );
                }
            )*
        }
    };
}

/// The two HCAs of a [`Link`] while open: `b` is `None` when both sides
/// share one HCA (hardware with one function).
pub struct Hcas<P: Platform> {
    /// Side A.
    pub a: Arc<Hca<P>>,
    /// Side B, when it is another HCA.
    pub b: Option<Arc<Hca<P>>>,
}

impl<P: Platform> Hcas<P> {
    /// Side B's HCA (side A's when they share one).
    pub fn b(&self) -> &Arc<Hca<P>> {
        self.b.as_ref().unwrap_or(&self.a)
    }

    /// What most two-sided tests start with: a verbs context, a PD and a
    /// CQ of `cqe` entries on each side.
    #[track_caller]
    pub fn sides(&self, cqe: u32) -> Sides<P> {
        self.sides_cqe(cqe, cqe)
    }

    /// [`Hcas::sides`] with a CQ of `cqe_a` entries on side A and one of
    /// `cqe_b` on side B.
    #[track_caller]
    pub fn sides_cqe(&self, cqe_a: u32, cqe_b: u32) -> Sides<P> {
        use hca_driver::verbs::{Context, Cq, Pd};
        let ca = Arc::new(Context::open(&self.a).expect("side A's context"));
        let cb = Arc::new(Context::open(self.b()).expect("side B's context"));
        let pda = Arc::new(Pd::alloc(&ca).expect("side A's PD"));
        let pdb = Arc::new(Pd::alloc(&cb).expect("side B's PD"));
        let cqa = Arc::new(Cq::create(&ca, cqe_a).expect("side A's CQ"));
        let cqb = Arc::new(Cq::create(&cb, cqe_b).expect("side B's CQ"));
        Sides {
            ca,
            cb,
            pda,
            pdb,
            cqa,
            cqb,
        }
    }
}

/// A context, a PD and a CQ on each side of [`Hcas`] ([`Hcas::sides`]).
pub struct Sides<P: Platform + 'static> {
    /// Side A's context.
    pub ca: Arc<hca_driver::verbs::Context<P>>,
    /// Side B's context.
    pub cb: Arc<hca_driver::verbs::Context<P>>,
    /// Side A's PD.
    pub pda: Arc<hca_driver::verbs::Pd<P>>,
    /// Side B's PD.
    pub pdb: Arc<hca_driver::verbs::Pd<P>>,
    /// Side A's CQ.
    pub cqa: Arc<hca_driver::verbs::Cq<P>>,
    /// Side B's CQ.
    pub cqb: Arc<hca_driver::verbs::Cq<P>>,
}

impl<P: Platform + 'static> Sides<P> {
    /// The six handles as one tuple, `(ca, cb, pda, pdb, cqa, cqb)`, for
    /// a test that binds them all.
    #[allow(clippy::type_complexity)]
    pub fn split(
        self,
    ) -> (
        Arc<hca_driver::verbs::Context<P>>,
        Arc<hca_driver::verbs::Context<P>>,
        Arc<hca_driver::verbs::Pd<P>>,
        Arc<hca_driver::verbs::Pd<P>>,
        Arc<hca_driver::verbs::Cq<P>>,
        Arc<hca_driver::verbs::Cq<P>>,
    ) {
        (self.ca, self.cb, self.pda, self.pdb, self.cqa, self.cqb)
    }

    /// An RC QP on each side, sending and receiving on that side's CQ, of
    /// capacities `caps` (side A's, side B's), connected to each other
    /// through `ports` with `p` by [`verbs::connect_pair`] (`remote`: side
    /// B's buffer address and rkey). Returns the QPs and their endpoints.
    #[track_caller]
    pub fn rc_pair(
        &self,
        ports: (u8, u8),
        caps: (QpCap, QpCap),
        remote: (u64, hca_driver::Rkey),
        p: &verbs::RcParams,
    ) -> RcPair<P> {
        let qp = |pd, cq, cap| {
            Qp::create(pd, &QpInitAttr::new(QpType::Rc, cq, cq).cap(cap)).expect("an RC QP")
        };
        let mut qa = qp(&self.pda, &self.cqa, caps.0);
        let mut qb = qp(&self.pdb, &self.cqb, caps.1);
        let (ea, eb) = verbs::connect_pair(
            (&self.ca, ports.0, &mut qa),
            (&self.cb, ports.1, &mut qb),
            remote,
            p,
        );
        (qa, qb, ea, eb)
    }
}

/// What [`Sides::rc_pair`] makes: side A's QP, side B's, and their
/// endpoints.
pub type RcPair<P> = (Qp<P>, Qp<P>, verbs::Endpoint, verbs::Endpoint);

/// The platform `P` reduced to the [`Platform`] trait's required calls
/// (and `bar_write_combining`), each forwarded: every optional facility
/// (interrupts, user-memory mappings...) is the trait's default, absent.
/// The second field is what it describes itself as.
pub struct Minimal<P>(pub P, pub &'static str);

impl<P: Platform> Platform for Minimal<P> {
    type Mmio = P::Mmio;
    fn alloc_dma(&self, len: usize, align: usize) -> Result<platform::DmaRegion, platform::Error> {
        self.0.alloc_dma(len, align)
    }
    fn free_dma(&self, region: platform::DmaRegion) {
        self.0.free_dma(region)
    }
    fn map_bar(&self, bar: u8) -> Result<Self::Mmio, platform::Error> {
        self.0.map_bar(bar)
    }
    fn bar_write_combining(&self, bar: u8) -> bool {
        self.0.bar_write_combining(bar)
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), platform::Error> {
        self.0.config_read(offset, buf)
    }
    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), platform::Error> {
        self.0.config_write(offset, buf)
    }
    fn now(&self) -> std::time::Duration {
        self.0.now()
    }
    fn delay(&self, d: std::time::Duration) {
        self.0.delay(d)
    }
    fn relax(&self) {
        self.0.relax()
    }
    fn reset_function(&self) -> Result<(), platform::Error> {
        self.0.reset_function()
    }
    fn describe(&self) -> &str {
        self.1
    }
}

/// Two sides of a wire for data-path scenarios.
pub struct Link<P: TestPlatform> {
    /// Side A's device.
    pub a: Bench<P>,
    /// Side B's device, when it is another one.
    pub b: Option<Bench<P>>,
    /// Side A's port.
    pub port_a: u8,
    /// Side B's port.
    pub port_b: u8,
}

impl Link<EmuPlatform> {
    /// Two emulated ConnectX-4s (`emu` with seeds of their own), port 1
    /// to port 1.
    pub fn emulated(emu: EmuConfig, config: Config) -> Self {
        let a = Bench::emulated(emu.clone(), config);
        let b = Bench::emulated(
            EmuConfig {
                seed: emu.seed ^ 0xb0b,
                ..emu
            },
            config,
        );
        hca_emu::connect(a.emu().expect("emulated"), 1, b.emu().expect("emulated"), 1)
            .expect("connecting two fresh emulated HCAs");
        Self {
            a,
            b: Some(b),
            port_a: 1,
            port_b: 1,
        }
    }

    /// [`emulated`](Self::emulated) on the real-time clock
    /// ([`hca_emu::Clock::Real`]): for tests whose threads sleep while the
    /// device works, or that need the device clock to advance between
    /// events.
    pub fn emulated_real_time(config: Config) -> Self {
        Self::emulated(
            EmuConfig {
                clock: hca_emu::Clock::Real,
                ..EmuConfig::default()
            },
            config,
        )
    }

    /// Side A's emulator.
    pub fn emu_a(&self) -> &EmuHca {
        self.a.emu().expect("emulated")
    }

    /// Side B's emulator.
    pub fn emu_b(&self) -> &EmuHca {
        self.b
            .as_ref()
            .and_then(|b| b.emu())
            .expect("an emulated link has two emulators")
    }
}

impl<P: TestPlatform> Link<P> {
    /// Whether the sides are real devices.
    pub fn is_hardware(&self) -> bool {
        self.a.is_hardware()
    }

    /// Opens both HCAs; panics on failure.
    #[track_caller]
    pub fn open(&mut self) -> Hcas<P> {
        let a = self.a.open();
        let b = self.b.as_mut().map(|b| b.open());
        Hcas { a, b }
    }

    /// Closes both HCAs; panics on failure.
    #[track_caller]
    pub fn close(&mut self, h: Hcas<P>) {
        if let (Some(hb), Some(bb)) = (h.b, self.b.as_mut()) {
            bb.close(hb);
        }
        self.a.close(h.a);
    }

    /// [`Bench::assert_clean`] on every device.
    #[track_caller]
    pub fn assert_clean(&self) {
        self.a.assert_clean();
        if let Some(b) = &self.b {
            b.assert_clean();
        }
    }
}

/// Runs a link scenario on two fresh emulated ConnectX-4s, then checks
/// both are clean.
pub fn run_emulated_link(scenario: fn(&mut Link<EmuPlatform>)) {
    let mut l = Link::emulated(EmuConfig::default(), Config::default());
    scenario(&mut l);
    l.assert_clean();
}

/// Runs a link scenario on the hardware `HCA_PCI` names (one function,
/// looped back, or two); fails, saying why, when it is not set.
pub fn run_hardware_link(name: &str, scenario: fn(&mut Link<VfioPlatform>)) {
    let Some(spec) = hardware_bdf() else {
        panic!(
            "hardware::{name} cannot run: {HCA_PCI} is not set (set {HCA_PCI}=<bdf> of a ConnectX bound to vfio-pci with its port looped back, or {HCA_PCI}=<bdf1>,<bdf2> of two functions cabled together)"
        );
    };
    let _one_at_a_time = HARDWARE.lock().unwrap_or_else(|e| e.into_inner());
    let bdfs: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let open = |bdf: &str| match Bench::hardware(bdf, Config::default()) {
        Ok(b) => b,
        Err(e) => panic!("cannot open {bdf} through vfio: {e}"),
    };
    let mut l = Link {
        a: open(bdfs[0]),
        b: bdfs.get(1).map(|b| open(b)),
        port_a: 1,
        port_b: 1,
    };
    eprintln!("hardware::{name} on {spec}");
    scenario(&mut l);
    l.assert_clean();
}

/// Declares link scenarios: for each generic function `name<P:
/// TestPlatform>(&mut Link<P>)`, a test `emulated::name` and a test
/// `hardware::name`.
#[macro_export]
macro_rules! link_scenarios {
    ($($name:ident),* $(,)?) => {
        mod emulated {
            $(
                #[test]
                fn $name() {
                    $crate::run_emulated_link(super::$name::<$crate::hca_emu::EmuPlatform>);
                }
            )*
        }
        mod hardware {
            $(
                #[test]
                #[cfg_attr(not(hca_hardware), ignore = "needs a real ConnectX: HCA_PCI=<bdf> cargo test -p hca-tests")]
                fn $name() {
                    $crate::run_hardware_link(
                        stringify!($name),
                        super::$name::<$crate::platform::vfio::VfioPlatform>,
                    );
                }
            )*
        }
    };
}
