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
//! names (bound to vfio-pci), skipped with a message saying so when
//! `HCA_PCI` is not set. Both end with [`Bench::assert_clean`]: on the
//! emulator no IOMMU fault and nothing leaked (pages, objects, DMA
//! regions), on hardware every byte of DMA memory freed. Hardware
//! scenarios run one at a time (one process can open a VFIO group once).

use std::sync::Mutex;

pub use hca_driver;
pub use hca_emu;
pub use platform;

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
pub trait TestPlatform: Platform + Sized {
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

    /// Opens the HCA with [`config`](Self::config); panics on failure.
    #[track_caller]
    pub fn open(&mut self) -> Hca<P> {
        match self.try_open() {
            Ok(h) => h,
            Err(e) => panic!("bring-up failed: {e}"),
        }
    }

    /// Opens the HCA; on failure the platform comes back to the bench.
    pub fn try_open(&mut self) -> Result<Hca<P>, Error> {
        let p = self
            .platform
            .take()
            .expect("the platform is with the bench (the HCA is closed)");
        match Hca::open(p, self.config) {
            Ok(h) => Ok(h),
            Err(f) => {
                self.platform = Some(f.platform);
                Err(f.error)
            }
        }
    }

    /// Closes the HCA; panics on failure.
    #[track_caller]
    pub fn close(&mut self, hca: Hca<P>) {
        if let Err(e) = self.try_close(hca) {
            panic!("teardown failed: {e}");
        }
    }

    /// Closes the HCA; the platform comes back to the bench either way.
    pub fn try_close(&mut self, hca: Hca<P>) -> Result<(), Error> {
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

/// Runs a scenario on a fresh emulated ConnectX-4 with the default
/// configurations, then checks it is clean.
pub fn run_emulated(scenario: fn(&mut Bench<EmuPlatform>)) {
    let mut b = Bench::emulated(EmuConfig::default(), Config::default());
    scenario(&mut b);
    b.assert_clean();
}

static HARDWARE: Mutex<()> = Mutex::new(());

/// Runs a scenario on the ConnectX `HCA_PCI` names, or prints why it is
/// skipped.
pub fn run_hardware(name: &str, scenario: fn(&mut Bench<VfioPlatform>)) {
    let Some(bdf) = hardware_bdf() else {
        eprintln!(
            "skipped hardware::{name}: {HCA_PCI} is not set (set {HCA_PCI}=<bdf> of a ConnectX bound to vfio-pci to run it on a real card)"
        );
        return;
    };
    let _one_at_a_time = HARDWARE.lock().unwrap_or_else(|e| e.into_inner());
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
