//! Bare-metal backend: DMA memory from a region the caller hands in,
//! registers at virtual addresses the caller maps, time from the caller's
//! clock. `no_std`, no heap.
//!
//! ```no_run
//! # use core::{ptr::NonNull, time::Duration};
//! # use platform::{Platform, bare_metal::{AddressMap, BareMetal, DmaMemory}};
//! # fn ticks() -> Duration { Duration::ZERO }
//! # fn bring_up(dma_virt: NonNull<u8>, dma_phys: u64, bar_virt: NonNull<u8>) -> Result<(), platform::Error> {
//! // 16 MiB of physically contiguous memory mapped at `dma_virt`, and BAR0
//! // (32 MiB) mapped uncached at `bar_virt`.
//! // SAFETY: both mappings are ours for the platform's whole life.
//! let mem = unsafe { DmaMemory::new(dma_virt, 16 << 20, AddressMap::Offset { phys_base: dma_phys }) }?;
//! let hca = unsafe { BareMetal::<_>::new(mem, ticks)?.with_bar(0, bar_virt, 32 << 20)? };
//! let cmdq = hca.alloc_dma(4096, 4096)?;
//! # hca.free_dma(cmdq);
//! # Ok(())
//! # }
//! ```
//!
//! DMA memory is handed out in 4 KiB pages from a bitmap of `WORDS * 64`
//! pages (256 words by default: up to 64 MiB) kept inside the
//! [`BareMetal`] value, never in the DMA memory itself, so a device writing
//! where it should not cannot corrupt the allocator. Allocation is first fit;
//! freeing makes pages available again at once and adjacent free pages form
//! one block. Every allocation is zeroed.
//!
//! Configuration space and function reset go through optional
//! [`PciHooks`]; without them those calls return [`Error::NotSupported`].
//! [`pci`] gives them for ECAM, with enumeration and BAR assignment.
//!
//! ## DMA coherency
//!
//! By default the platform assumes **DMA is coherent** with the CPU caches:
//! the device's reads see what the CPU wrote, and the CPU's reads see what
//! the device wrote, with only the barriers of [`crate::barrier`] between
//! them. That holds on x86, on Arm servers whose PCIe root complex is
//! I/O-coherent, and wherever the DMA memory is mapped non-cacheable.
//!
//! On a SoC whose PCIe does not snoop the caches, give the platform
//! [`CacheOps`] ([`BareMetal::with_cache`]): clean and invalidate by
//! address range (on Arm, `dc cvac` / `dc ivac` loops over the cache lines
//! followed by `dsb`). They are then called where such a system needs
//! them:
//!
//! - the data path (`verbs-core` built with its `cache-maintenance`
//!   feature, which `hca-driver`'s feature of the same name turns on;
//!   `Hca::open` refuses at compile time a platform with `CacheOps`
//!   without it), through the BAR window, see
//!   [`Mmio::dma_clean`]: the send WQEs posted and the send doorbell
//!   record are cleaned before the send doorbell; receive WQEs (receive
//!   queue and SRQ, the `_synced` posts) are cleaned, then the receive
//!   doorbell record (the receive side's doorbell) is written and
//!   cleaned; a CQE is invalidated before and after its ownership check,
//!   and the CQ's doorbell record cleaned when the consumer index or the
//!   arm word is written; memory made for the device is cleaned before
//!   the device may read it (a new or resized CQ's ring of invalid CQEs,
//!   a QP's and an SRQ's initial doorbell record, an SRQ's linked ring);
//!   CQEs rewritten by compaction after a QP is destroyed (or copied by a
//!   resize) are cleaned after the rewrite, the CQEs read there
//!   invalidated first;
//! - the control plane (`hca-driver`, through
//!   [`Platform::dma_clean`]): a command queue
//!   entry and its input and output mailboxes are cleaned before the
//!   command doorbell; the entry's status word is invalidated before each
//!   ownership poll, and the entry and the output mailboxes before they
//!   are read; an EQ's initial owner bits are cleaned before CREATE_EQ,
//!   and each EQE is invalidated before and after its ownership check.
//!
//! Without `CacheOps` the platform uses [`Coherent`]: the BAR window type
//! is the plain [`MmioWindow`] and the hooks do nothing. Without the
//! feature the data path has no trace of them (its instruction counts
//! under `datapath_cost` are those of a build without this code); with
//! it and a coherent platform, every data-path hook is a branch on
//! [`Mmio::DMA_CACHE_MAINTENANCE`],
//! a `false` constant removed at compile time with the range computation.

pub mod pci;

use core::ptr::NonNull;
use core::time::Duration;

use crate::pages::{AllocFail, FreeFail, PageBitmap};
use crate::user::{UserMapping, UserMemory};
use crate::{Be32, Be64, DmaRegion, DmaStats, Error, Mmio, MmioWindow, PAGE_SIZE, Platform};

/// A monotonic clock supplied by the caller (a timer counter, the TSC scaled
/// to time, a unikernel's clock). Any `Fn() -> Duration`, including a plain
/// `fn() -> Duration`, is a clock.
pub trait Clock {
    /// Time since an arbitrary origin; never goes backwards.
    fn now(&self) -> Duration;
}

impl<F: Fn() -> Duration> Clock for F {
    fn now(&self) -> Duration {
        self()
    }
}

/// PCI configuration space and function reset, when the environment can do
/// them (ECAM access, a hypervisor call). Every method defaults to
/// [`Error::NotSupported`].
pub trait PciHooks {
    /// Reads configuration space at `offset`, little-endian as on the bus.
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
        let _ = (offset, buf);
        Err(Error::NotSupported(
            "PCI configuration space read (no hook given to the bare-metal platform)",
        ))
    }

    /// Writes configuration space at `offset`.
    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error> {
        let _ = (offset, buf);
        Err(Error::NotSupported(
            "PCI configuration space write (no hook given to the bare-metal platform)",
        ))
    }

    /// Resets the function (FLR).
    fn reset_function(&self) -> Result<(), Error> {
        Err(Error::NotSupported(
            "function reset (no hook given to the bare-metal platform)",
        ))
    }
}

/// No configuration space access and no reset.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPciHooks;

impl PciHooks for NoPciHooks {}

/// Cache maintenance by address range, supplied by the integrator of a
/// system whose device does not snoop the CPU caches (see the module's
/// "DMA coherency"). Addresses are host (virtual) addresses of DMA memory.
pub trait CacheOps: Clone {
    /// Writes back the cache lines of `addr .. addr + len` (and waits for
    /// it): the device then reads what the CPU wrote.
    fn clean(&self, addr: usize, len: usize);
    /// Invalidates the cache lines of `addr .. addr + len`: the CPU then
    /// reads what the device wrote.
    fn invalidate(&self, addr: usize, len: usize);
}

/// How the platform keeps DMA memory coherent: [`Coherent`] (nothing to
/// do, the default) or any [`CacheOps`]. Implemented by those two only.
pub trait CacheMaintenance {
    /// The BAR window type: [`MmioWindow`] for [`Coherent`],
    /// [`CachedWindow`] with cache operations.
    type Window: Mmio;
    /// The window over a mapped BAR.
    fn window(&self, w: MmioWindow) -> Self::Window;
    /// See [`CacheOps::clean`].
    fn clean(&self, addr: usize, len: usize);
    /// See [`CacheOps::invalidate`].
    fn invalidate(&self, addr: usize, len: usize);
}

/// Coherent DMA: no cache maintenance (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Coherent;

impl CacheMaintenance for Coherent {
    type Window = MmioWindow;
    #[inline(always)]
    fn window(&self, w: MmioWindow) -> MmioWindow {
        w
    }
    #[inline(always)]
    fn clean(&self, addr: usize, len: usize) {
        let _ = (addr, len);
    }
    #[inline(always)]
    fn invalidate(&self, addr: usize, len: usize) {
        let _ = (addr, len);
    }
}

impl<T: CacheOps> CacheMaintenance for T {
    type Window = CachedWindow<T>;
    fn window(&self, w: MmioWindow) -> CachedWindow<T> {
        CachedWindow {
            window: w,
            cache: self.clone(),
        }
    }
    #[inline(always)]
    fn clean(&self, addr: usize, len: usize) {
        CacheOps::clean(self, addr, len);
    }
    #[inline(always)]
    fn invalidate(&self, addr: usize, len: usize) {
        CacheOps::invalidate(self, addr, len);
    }
}

/// A BAR window of a platform with [`CacheOps`]: the registers of an
/// [`MmioWindow`], and the cache operations the data path calls through
/// [`Mmio::dma_clean`] and [`Mmio::dma_invalidate`].
#[derive(Debug)]
pub struct CachedWindow<T> {
    window: MmioWindow,
    cache: T,
}

impl<T> CachedWindow<T> {
    /// The register window.
    pub fn window(&self) -> &MmioWindow {
        &self.window
    }
}

impl<T: CacheOps> Mmio for CachedWindow<T> {
    const DMA_CACHE_MAINTENANCE: bool = true;
    #[inline(always)]
    fn dma_clean(&self, addr: usize, len: usize) {
        self.cache.clean(addr, len);
    }
    #[inline(always)]
    fn dma_invalidate(&self, addr: usize, len: usize) {
        self.cache.invalidate(addr, len);
    }
    #[inline(always)]
    fn len(&self) -> usize {
        self.window.len()
    }
    #[inline(always)]
    fn read32(&self, offset: usize) -> Be32 {
        self.window.read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: Be32) {
        self.window.write32(offset, value);
    }
    #[inline(always)]
    fn write64(&self, offset: usize, value: Be64) {
        self.window.write64(offset, value);
    }
    #[inline(always)]
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        self.window.write_bf(offset, src);
    }
    #[inline(always)]
    unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
        // SAFETY: forwarded: the caller's guarantee is about this window's
        // length, which is the inner window's.
        unsafe { self.window.write64_unchecked(offset, value) }
    }
}

/// How host addresses of the DMA memory map to the bus addresses the device
/// uses.
#[derive(Debug, Clone, Copy)]
pub enum AddressMap {
    /// The region is physically contiguous: the bus address of host address
    /// `h` is `phys_base + (h - base)`.
    Offset {
        /// Bus (physical) address of the region's first byte.
        phys_base: u64,
    },
    /// A translation function from host (virtual) address to bus address.
    /// The region need not be physically contiguous: an allocation is only
    /// placed where all its pages are contiguous on the bus side.
    Translate(fn(usize) -> Option<u64>),
}

/// The memory the caller hands to the backend for DMA.
#[derive(Debug)]
pub struct DmaMemory {
    base: NonNull<u8>,
    len: usize,
    map: AddressMap,
}

impl DmaMemory {
    /// `len` bytes at `base` (both multiples of 4 KiB), reachable by the
    /// device at the bus addresses `map` gives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `base`, `len` or `phys_base` is not
    /// page-aligned, `len` is zero, or the bus range overflows.
    ///
    /// # Safety
    ///
    /// The memory must be valid for volatile reads and writes for the life
    /// of the platform built from it and of every region it hands out, be
    /// used by nobody else meanwhile (no Rust references into it), and be
    /// reachable by the device at the addresses `map` gives (for
    /// [`AddressMap::Offset`], physically contiguous).
    pub unsafe fn new(base: NonNull<u8>, len: usize, map: AddressMap) -> Result<Self, Error> {
        if base.as_ptr().addr() % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 || len == 0 {
            return Err(Error::InvalidArgument(
                "DMA memory base and length must be non-zero multiples of 4 KiB",
            ));
        }
        if base.as_ptr().addr().checked_add(len).is_none() {
            return Err(Error::InvalidArgument(
                "DMA memory wraps around the address space",
            ));
        }
        if let AddressMap::Offset { phys_base } = map {
            if phys_base % PAGE_SIZE as u64 != 0 {
                return Err(Error::InvalidArgument(
                    "DMA memory physical base must be a multiple of 4 KiB",
                ));
            }
            if phys_base.checked_add(len as u64).is_none() {
                return Err(Error::InvalidArgument(
                    "DMA memory bus range overflows 64 bits",
                ));
            }
        }
        Ok(Self { base, len, map })
    }

    /// Memory whose bus addresses equal its host addresses (identity-mapped
    /// memory without an IOMMU).
    ///
    /// # Safety
    ///
    /// As for [`new`](Self::new).
    pub unsafe fn identity(base: NonNull<u8>, len: usize) -> Result<Self, Error> {
        let phys_base = base.as_ptr().addr() as u64;
        // SAFETY: forwarded to the caller.
        unsafe { Self::new(base, len, AddressMap::Offset { phys_base }) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: `new` refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bus address of page `page` of the region.
    fn bus(&self, page: usize) -> Result<u64, Error> {
        let offset = page * PAGE_SIZE;
        match self.map {
            AddressMap::Offset { phys_base } => Ok(phys_base + offset as u64),
            AddressMap::Translate(f) => {
                let host = self.base.as_ptr().addr() + offset;
                f(host).ok_or(Error::AddressTranslation { host })
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bar {
    base: NonNull<u8>,
    len: usize,
    /// The caller mapped it write-combining.
    write_combining: bool,
}

/// Number of PCI BARs.
const BARS: usize = 6;

/// The bare-metal platform: DMA memory from [`DmaMemory`], BARs at given
/// virtual addresses, time from a [`Clock`], configuration space and reset
/// through [`PciHooks`].
///
/// `WORDS` sizes the page bitmap: the region may hold at most `WORDS * 64`
/// pages of 4 KiB (the default, 256, covers 64 MiB; the bitmaps take
/// `16 * WORDS` bytes inside this value).
pub struct BareMetal<C, H = NoPciHooks, const WORDS: usize = 256, K = Coherent> {
    mem: DmaMemory,
    pages: spin::Mutex<PageBitmap<[u64; WORDS]>>,
    bars: [Option<Bar>; BARS],
    clock: C,
    hooks: H,
    cache: K,
    name: &'static str,
    tag: usize,
    user: Option<UserWindow>,
}

/// Host memory besides the DMA memory that the device can reach, where
/// [`Platform::map_user`] finds bus addresses of user memory.
#[derive(Debug, Clone, Copy)]
struct UserWindow {
    base: usize,
    len: usize,
    map: AddressMap,
}

// SAFETY: the raw pointers are handles on memory and registers that the
// platform owns for its whole life (constructor contracts); the allocator
// state is behind a mutex, and all access to DMA memory and registers is by
// volatile copies through `DmaRegion` and `MmioWindow`, which are themselves
// `Send + Sync`.
unsafe impl<C: Send, H: Send, const WORDS: usize, K: Send> Send for BareMetal<C, H, WORDS, K> {}
// SAFETY: as above; `&self` methods only lock the allocator or copy the
// pointers out.
unsafe impl<C: Sync, H: Sync, const WORDS: usize, K: Sync> Sync for BareMetal<C, H, WORDS, K> {}

impl<C, H, const WORDS: usize, K> core::fmt::Debug for BareMetal<C, H, WORDS, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BareMetal")
            .field("name", &self.name)
            .field("mem", &self.mem)
            .field("bars", &self.bars)
            .finish_non_exhaustive()
    }
}

impl<C: Clock, const WORDS: usize> BareMetal<C, NoPciHooks, WORDS, Coherent> {
    /// A platform allocating DMA memory from `mem`, with time from `clock`,
    /// no BARs yet (see [`with_bar`](Self::with_bar)) and no PCI hooks (see
    /// [`with_hooks`](Self::with_hooks)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `mem` has more pages than the bitmap
    /// (`WORDS * 64`).
    pub fn new(mem: DmaMemory, clock: C) -> Result<Self, Error> {
        let pages = mem.len / PAGE_SIZE;
        if pages > WORDS * 64 {
            return Err(Error::InvalidArgument(
                "DMA memory has more pages than the allocator's bitmap: use a larger WORDS",
            ));
        }
        let tag = mem.base.as_ptr().addr() ^ 0x6d6c_7835;
        Ok(Self {
            pages: spin::Mutex::new(PageBitmap::new([0; WORDS], [0; WORDS], pages)),
            mem,
            bars: [None; BARS],
            clock,
            hooks: NoPciHooks,
            cache: Coherent,
            name: "bare-metal",
            tag,
            user: None,
        })
    }
}

impl<C: Clock, H: PciHooks, const WORDS: usize, K: CacheMaintenance> BareMetal<C, H, WORDS, K> {
    /// Uses `hooks` for configuration space and function reset.
    pub fn with_hooks<H2: PciHooks>(self, hooks: H2) -> BareMetal<C, H2, WORDS, K> {
        BareMetal {
            mem: self.mem,
            pages: self.pages,
            bars: self.bars,
            clock: self.clock,
            hooks,
            cache: self.cache,
            name: self.name,
            tag: self.tag,
            user: self.user,
        }
    }

    /// Declares `len` bytes of host memory at `base` (4 KiB multiples)
    /// reachable by the device at the bus addresses `map` gives (with
    /// [`AddressMap::Offset`], `phys_base` is the bus address of `base`;
    /// identity-mapped memory has `phys_base == base`):
    /// [`map_user`](Platform::map_user) maps user memory inside it, and
    /// refuses memory outside it with [`Error::UserMemoryUnreachable`].
    /// Without this call `map_user` is not supported.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] as for [`DmaMemory::new`].
    ///
    /// # Safety
    ///
    /// The device must reach the memory at the addresses `map` gives.
    pub unsafe fn with_user_memory(
        mut self,
        base: NonNull<u8>,
        len: usize,
        map: AddressMap,
    ) -> Result<Self, Error> {
        // SAFETY: only the checks of `new` are used; the value is dropped
        // without any access to the memory.
        let checked = unsafe { DmaMemory::new(base, len, map) }?;
        self.user = Some(UserWindow {
            base: checked.base.as_ptr().addr(),
            len: checked.len,
            map: checked.map,
        });
        Ok(self)
    }

    /// Uses `cache` to keep DMA memory coherent on a system whose device
    /// does not snoop the CPU caches (see the module's "DMA coherency"):
    /// BARs are then mapped as [`CachedWindow`]s.
    pub fn with_cache<K2: CacheOps>(self, cache: K2) -> BareMetal<C, H, WORDS, K2> {
        BareMetal {
            mem: self.mem,
            pages: self.pages,
            bars: self.bars,
            clock: self.clock,
            hooks: self.hooks,
            cache,
            name: self.name,
            tag: self.tag,
            user: self.user,
        }
    }

    /// The host address of `region[offset .. offset + len]`, clamped to
    /// the region.
    fn host_range(region: &DmaRegion, offset: usize, len: usize) -> (usize, usize) {
        let offset = offset.min(region.len());
        let len = len.min(region.len() - offset);
        (region.host_ptr().as_ptr().addr() + offset, len)
    }

    /// Names the platform in logs and errors ([`Platform::describe`]).
    pub fn with_name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Makes BAR `bar` (0 to 5), mapped at `base` for `len` bytes, available
    /// to [`map_bar`](Platform::map_bar).
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchBar`] for `bar > 5`, [`Error::InvalidArgument`] if
    /// `base` is not 8-byte aligned or `len` is zero.
    ///
    /// # Safety
    ///
    /// `base` must be the BAR mapped as device (uncached) memory, valid for
    /// volatile 32- and 64-bit accesses of `len` bytes for as long as the
    /// platform or any window it maps exists.
    pub unsafe fn with_bar(
        mut self,
        bar: u8,
        base: NonNull<u8>,
        len: usize,
    ) -> Result<Self, Error> {
        let slot = self
            .bars
            .get_mut(usize::from(bar))
            .ok_or(Error::NoSuchBar(bar))?;
        if base.as_ptr().addr() % 8 != 0 || len == 0 {
            return Err(Error::InvalidArgument(
                "BAR mapping must be 8-byte aligned and non-empty",
            ));
        }
        *slot = Some(Bar {
            base,
            len,
            write_combining: false,
        });
        Ok(self)
    }

    /// Says that BAR `bar`, made available with
    /// [`with_bar`](Self::with_bar), is mapped write-combining (as UAR
    /// pages must be for BlueFlame), which
    /// [`bar_write_combining`](Platform::bar_write_combining) then reports.
    /// Without this call a BAR counts as uncached and the driver rings
    /// doorbells only.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchBar`] if the BAR was not given.
    pub fn with_write_combining(mut self, bar: u8, write_combining: bool) -> Result<Self, Error> {
        let b = self
            .bars
            .get_mut(usize::from(bar))
            .and_then(Option::as_mut)
            .ok_or(Error::NoSuchBar(bar))?;
        b.write_combining = write_combining;
        Ok(self)
    }

    /// How much of the DMA memory is in use.
    pub fn dma_stats(&self) -> DmaStats {
        let pages = self.pages.lock();
        DmaStats {
            total_bytes: pages.pages() * PAGE_SIZE,
            allocated_bytes: pages.allocated() * PAGE_SIZE,
            largest_free_block: pages.largest_free_run() * PAGE_SIZE,
        }
    }

    /// Checks that the `n` pages at `first` are contiguous on the bus and
    /// that the first one is aligned to `align`; returns the bus address.
    fn placement(&self, first: usize, n: usize, align: usize) -> Result<Option<u64>, Error> {
        let iova = self.mem.bus(first)?;
        if iova % align as u64 != 0 {
            return Ok(None);
        }
        if let AddressMap::Translate(_) = self.mem.map {
            for i in 1..n {
                if self.mem.bus(first + i)? != iova + (i * PAGE_SIZE) as u64 {
                    return Ok(None);
                }
            }
        }
        Ok(Some(iova))
    }

    /// Returns a region to the allocator, saying why when it cannot.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignDmaRegion`] if the region does not come from this
    /// platform, [`Error::DmaRegionNotAllocated`] if it is not (or no longer)
    /// allocated as such. The allocator is unchanged in both cases.
    pub fn try_free_dma(&self, region: DmaRegion) -> Result<(), Error> {
        let (iova, len) = (region.iova(), region.len());
        let foreign = Error::ForeignDmaRegion { iova, len };
        let base = self.mem.base.as_ptr().addr();
        let host = region.host_ptr().as_ptr().addr();
        if region.cookie() != self.tag || host < base || host - base >= self.mem.len {
            return Err(foreign);
        }
        let offset = host - base;
        if offset % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 || len == 0 {
            return Err(foreign);
        }
        let first = offset / PAGE_SIZE;
        if self.mem.bus(first).ok() != Some(iova) {
            return Err(foreign);
        }
        match self.pages.lock().free(first, len / PAGE_SIZE) {
            Ok(()) => Ok(()),
            Err(FreeFail::NotAllocated | FreeFail::LengthMismatch { .. }) => {
                Err(Error::DmaRegionNotAllocated { iova, len })
            }
        }
    }
}

impl<C: Clock, H: PciHooks, const WORDS: usize, K: CacheMaintenance> Platform
    for BareMetal<C, H, WORDS, K>
{
    type Mmio = K::Window;

    #[inline(always)]
    fn dma_clean(&self, region: &DmaRegion, offset: usize, len: usize) {
        let (addr, len) = Self::host_range(region, offset, len);
        self.cache.clean(addr, len);
    }

    #[inline(always)]
    fn dma_invalidate(&self, region: &DmaRegion, offset: usize, len: usize) {
        let (addr, len) = Self::host_range(region, offset, len);
        self.cache.invalidate(addr, len);
    }

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaRegion, Error> {
        if len == 0 {
            return Err(Error::InvalidArgument("zero-length DMA allocation"));
        }
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(
                "DMA alignment must be a power of two",
            ));
        }
        let n = len.div_ceil(PAGE_SIZE);
        let align_pages = (align / PAGE_SIZE).max(1);
        let align = align.max(PAGE_SIZE);
        let base = self.mem.base.as_ptr().addr();
        if let AddressMap::Offset { phys_base } = self.mem.map {
            if (phys_base as usize).wrapping_sub(base) % align != 0 {
                return Err(Error::InvalidArgument(
                    "DMA alignment cannot be met: host and bus addresses of the region differ modulo it",
                ));
            }
        }
        // Host page index `p` is aligned when (base / PAGE_SIZE + p) is a
        // multiple of `align_pages`.
        let phase = (base / PAGE_SIZE) % align_pages;
        let mut pages = self.pages.lock();
        let mut failure = None;
        let result = pages.alloc(n, align_pages, phase, |p| {
            if failure.is_some() {
                return false;
            }
            match self.placement(p, n, align) {
                Ok(placed) => placed.is_some(),
                Err(e) => {
                    failure = Some(e);
                    false
                }
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let first = match result {
            Ok(first) => first,
            Err(AllocFail::NoSpace) => {
                return Err(Error::OutOfDmaMemory {
                    requested: n * PAGE_SIZE,
                    available: pages.largest_free_run() * PAGE_SIZE,
                });
            }
            Err(AllocFail::Rejected) => {
                return Err(Error::NoContiguousDmaBlock {
                    requested: n * PAGE_SIZE,
                    align,
                });
            }
        };
        drop(pages);
        let iova = self.mem.bus(first)?;
        // SAFETY: `first + n <= pages`, so the offset is inside the region
        // handed in.
        let host = unsafe { self.mem.base.add(first * PAGE_SIZE) };
        let words = host.cast::<u64>();
        for i in 0..n * PAGE_SIZE / 8 {
            // SAFETY: the pages were free, so nothing else uses them; they lie
            // inside the region, which is valid for volatile writes, and are
            // 8-byte aligned (page-aligned base).
            unsafe { words.add(i).write_volatile(0) };
        }
        // SAFETY: the pages are valid for volatile access (DmaMemory
        // contract) and are not handed out again until `free_dma` gets this
        // region back.
        Ok(unsafe { DmaRegion::from_raw_parts(host, iova, n * PAGE_SIZE, self.tag) })
    }

    fn free_dma(&self, region: DmaRegion) {
        if let Err(e) = self.try_free_dma(region) {
            log::error!("{}: free_dma refused: {e}", self.name);
        }
    }

    fn bar_write_combining(&self, bar: u8) -> bool {
        self.bars
            .get(usize::from(bar))
            .and_then(|b| b.as_ref())
            .is_some_and(|b| b.write_combining)
    }

    fn map_bar(&self, bar: u8) -> Result<K::Window, Error> {
        let b = self
            .bars
            .get(usize::from(bar))
            .copied()
            .flatten()
            .ok_or(Error::NoSuchBar(bar))?;
        // SAFETY: `with_bar`'s contract: the BAR is mapped, aligned and valid
        // for volatile accesses of `len` bytes for the platform's life and
        // every window it maps.
        Ok(self.cache.window(unsafe { MmioWindow::new(b.base, b.len) }))
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
        self.hooks.config_read(offset, buf)
    }

    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error> {
        self.hooks.config_write(offset, buf)
    }

    fn now(&self) -> Duration {
        self.clock.now()
    }

    fn delay(&self, d: Duration) {
        let start = self.clock.now();
        while self.clock.now().saturating_sub(start) < d {
            core::hint::spin_loop();
        }
    }

    fn reset_function(&self) -> Result<(), Error> {
        self.hooks.reset_function()
    }

    fn map_user(&self, mem: UserMemory) -> Result<UserMapping, Error> {
        let (host, span) = mem.span();
        let w = self.user.ok_or(Error::NotSupported(
            "mapping user memory: no user-memory window given (BareMetal::with_user_memory)",
        ))?;
        let inside = host >= w.base
            && (host - w.base)
                .checked_add(span)
                .is_some_and(|e| e <= w.len);
        if !inside {
            return Err(Error::UserMemoryUnreachable { host, len: span });
        }
        let bus = |h: usize| -> Result<u64, Error> {
            match w.map {
                AddressMap::Offset { phys_base } => Ok(phys_base + (h - w.base) as u64),
                AddressMap::Translate(f) => f(h).ok_or(Error::AddressTranslation { host: h }),
            }
        };
        let iova = bus(host)?;
        // One bus range: every page must follow the first.
        for i in 1..span / PAGE_SIZE {
            if bus(host + i * PAGE_SIZE)? != iova + (i * PAGE_SIZE) as u64 {
                return Err(Error::UserMemoryFault {
                    host,
                    len: span,
                    reason: "its pages are not contiguous in bus address space",
                });
            }
        }
        UserMapping::new(host, span, iova, self.tag ^ 0x7573_6572)
    }

    fn unmap_user(&self, mapping: UserMapping) -> Result<(), Error> {
        // Nothing was pinned or mapped: the window is always reachable.
        if mapping.cookie() != self.tag ^ 0x7573_6572 {
            return Err(Error::ForeignUserMapping {
                host: mapping.host_addr(),
                len: mapping.len(),
            });
        }
        Ok(())
    }

    fn describe(&self) -> &str {
        self.name
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::Mmio;

    const MIB: usize = 1 << 20;

    /// Memory standing in for the caller's region, aligned to `ALIGN` so
    /// that its host addresses agree with the round bus addresses the tests
    /// use in their low bits.
    struct Backing(Vec<u64>);

    const ALIGN: usize = 64 * PAGE_SIZE;

    impl Backing {
        fn new(bytes: usize) -> Self {
            Self(vec![0u64; (bytes + ALIGN) / 8])
        }
        /// The first `ALIGN`-aligned address.
        fn region(&mut self) -> NonNull<u8> {
            let p = self.0.as_mut_ptr().cast::<u8>();
            let skip = p.align_offset(ALIGN);
            // SAFETY: `skip < ALIGN` and the vector has `bytes + ALIGN` bytes.
            NonNull::new(unsafe { p.add(skip) }).unwrap()
        }
    }

    fn zero() -> Duration {
        Duration::ZERO
    }

    fn platform(b: &mut Backing, pages: usize) -> BareMetal<fn() -> Duration, NoPciHooks, 4> {
        let base = b.region();
        // SAFETY: `b` outlives the platform in every test and is not used
        // otherwise.
        let mem = unsafe {
            DmaMemory::new(
                base,
                pages * PAGE_SIZE,
                AddressMap::Offset {
                    phys_base: 0x8000_0000,
                },
            )
        }
        .unwrap();
        BareMetal::new(mem, zero as fn() -> Duration).unwrap()
    }

    #[test]
    fn allocations_are_zeroed_aligned_and_at_the_right_bus_address() {
        let mut b = Backing::new(64 * PAGE_SIZE);
        let p = platform(&mut b, 64);
        let a = p.alloc_dma(100, 8).unwrap();
        assert_eq!((a.iova(), a.len()), (0x8000_0000, PAGE_SIZE));
        a.fill(0, PAGE_SIZE, 0xa5);
        let c = p.alloc_dma(3 * PAGE_SIZE, 4 * PAGE_SIZE).unwrap();
        assert_eq!(c.iova() % (4 * PAGE_SIZE) as u64, 0);
        assert_eq!(c.host_ptr().as_ptr().addr() % (4 * PAGE_SIZE), 0);
        assert_eq!(c.iova(), 0x8000_0000 + 4 * PAGE_SIZE as u64);
        let offset = c.host_ptr().as_ptr().addr() - a.host_ptr().as_ptr().addr();
        assert_eq!(
            c.iova() - a.iova(),
            offset as u64,
            "host and bus offsets agree"
        );
        p.free_dma(a);
        // The page comes back zeroed even though it was dirtied.
        let a = p.alloc_dma(PAGE_SIZE, PAGE_SIZE).unwrap();
        assert_eq!(a.iova(), 0x8000_0000);
        for off in (0..PAGE_SIZE).step_by(8) {
            assert_eq!(a.read_be64(off), 0);
        }
        p.try_free_dma(a).unwrap();
        p.try_free_dma(c).unwrap();
        assert_eq!(p.dma_stats().allocated_bytes, 0);
    }

    #[test]
    fn user_memory_maps_inside_the_window_only() {
        let mut b = Backing::new(8 * PAGE_SIZE);
        let mut u = Backing::new(4 * PAGE_SIZE);
        let p = platform(&mut b, 8);
        let ubase = u.region();
        // SAFETY: nothing of `u` is accessed through the mappings.
        let user = |p: NonNull<u8>, len| unsafe { UserMemory::new(p, len) }.unwrap();
        let none = p.map_user(user(ubase, 16));
        assert!(matches!(none, Err(Error::NotSupported(_))), "{none:?}");
        // SAFETY: `u` outlives the platform; only addresses are computed.
        let p = unsafe {
            p.with_user_memory(
                ubase,
                4 * PAGE_SIZE,
                AddressMap::Offset {
                    phys_base: 0x4000_0000,
                },
            )
        }
        .unwrap();
        let inner = NonNull::new(ubase.as_ptr().wrapping_add(PAGE_SIZE + 0x10)).unwrap();
        let m = p.map_user(user(inner, PAGE_SIZE)).unwrap();
        assert_eq!((m.iova(), m.len()), (0x4000_1000, 2 * PAGE_SIZE));
        assert_eq!(m.iova_of(inner.as_ptr().addr()), Some(0x4000_1010));
        p.unmap_user(m).unwrap();
        let outside = NonNull::new(ubase.as_ptr().wrapping_add(3 * PAGE_SIZE)).unwrap();
        let e = p.map_user(user(outside, 2 * PAGE_SIZE));
        assert!(
            matches!(e, Err(Error::UserMemoryUnreachable { .. })),
            "{e:?}"
        );
        let foreign = UserMapping::new(0x1000, PAGE_SIZE, 0, 0).unwrap();
        assert!(matches!(
            p.unmap_user(foreign),
            Err(Error::ForeignUserMapping { .. })
        ));
    }

    #[test]
    fn exhaustion_is_a_typed_error_and_freeing_recovers() {
        let mut b = Backing::new(8 * PAGE_SIZE);
        let p = platform(&mut b, 8);
        let all: Vec<_> = (0..8).map(|_| p.alloc_dma(PAGE_SIZE, 8).unwrap()).collect();
        match p.alloc_dma(1, 8) {
            Err(Error::OutOfDmaMemory {
                requested,
                available,
            }) => assert_eq!((requested, available), (PAGE_SIZE, 0)),
            other => panic!("expected OutOfDmaMemory, got {other:?}"),
        }
        assert!(matches!(
            p.alloc_dma(9 * PAGE_SIZE, 8),
            Err(Error::OutOfDmaMemory { .. })
        ));
        for r in all {
            p.try_free_dma(r).unwrap();
        }
        let whole = p.alloc_dma(8 * PAGE_SIZE, 8).unwrap();
        assert_eq!(p.dma_stats().largest_free_block, 0);
        p.try_free_dma(whole).unwrap();
        assert_eq!(p.dma_stats().largest_free_block, 8 * PAGE_SIZE);
    }

    #[test]
    fn fragmentation_uses_holes_and_freeing_coalesces() {
        let mut b = Backing::new(8 * PAGE_SIZE);
        let p = platform(&mut b, 8);
        let mut r: Vec<_> = (0..8)
            .map(|_| Some(p.alloc_dma(PAGE_SIZE, 8).unwrap()))
            .collect();
        // Free every other page: 4 free pages, none adjacent.
        for i in (0..8).step_by(2) {
            p.try_free_dma(r[i].take().unwrap()).unwrap();
        }
        let s = p.dma_stats();
        assert_eq!(
            (s.allocated_bytes, s.largest_free_block),
            (4 * PAGE_SIZE, PAGE_SIZE)
        );
        match p.alloc_dma(2 * PAGE_SIZE, 8) {
            Err(Error::OutOfDmaMemory { available, .. }) => assert_eq!(available, PAGE_SIZE),
            other => panic!("expected OutOfDmaMemory, got {other:?}"),
        }
        // A one-page request fits a hole: the lowest one.
        let hole = p.alloc_dma(PAGE_SIZE, 8).unwrap();
        assert_eq!(hole.iova(), 0x8000_0000);
        p.try_free_dma(hole).unwrap();
        // Freeing pages 1 and 3 joins pages 0..5 into one block.
        p.try_free_dma(r[1].take().unwrap()).unwrap();
        p.try_free_dma(r[3].take().unwrap()).unwrap();
        assert_eq!(p.dma_stats().largest_free_block, 5 * PAGE_SIZE);
        let four = p.alloc_dma(4 * PAGE_SIZE, 8).unwrap();
        assert_eq!(four.iova(), 0x8000_0000);
        p.try_free_dma(four).unwrap();
        for x in r.into_iter().flatten() {
            p.try_free_dma(x).unwrap();
        }
        assert_eq!(p.dma_stats().largest_free_block, 8 * PAGE_SIZE);
    }

    #[test]
    fn alignment_larger_than_a_page() {
        let mut b = Backing::new(32 * PAGE_SIZE);
        let p = platform(&mut b, 32);
        let one = p.alloc_dma(PAGE_SIZE, 8).unwrap();
        let big = p.alloc_dma(PAGE_SIZE, 16 * PAGE_SIZE).unwrap();
        assert_eq!(big.iova() % (16 * PAGE_SIZE) as u64, 0);
        assert_eq!(big.host_ptr().as_ptr().addr() % (16 * PAGE_SIZE), 0);
        assert!(matches!(
            p.alloc_dma(PAGE_SIZE, 64 * PAGE_SIZE),
            Err(Error::OutOfDmaMemory { .. })
        ));
        assert!(matches!(
            p.alloc_dma(PAGE_SIZE, 3),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(p.alloc_dma(0, 8), Err(Error::InvalidArgument(_))));
        p.try_free_dma(one).unwrap();
        p.try_free_dma(big).unwrap();
    }

    #[test]
    fn alignment_that_host_and_bus_cannot_share_is_refused() {
        let mut b = Backing::new(16 * PAGE_SIZE);
        let base = b.region();
        // Bus base one page off the host base modulo 8 KiB.
        let phys_base = ((base.as_ptr().addr() + PAGE_SIZE) as u64) & !0xfff;
        // SAFETY: as in `platform`.
        let mem = unsafe { DmaMemory::new(base, 16 * PAGE_SIZE, AddressMap::Offset { phys_base }) }
            .unwrap();
        let p = BareMetal::<_, NoPciHooks, 1>::new(mem, zero).unwrap();
        assert!(p.alloc_dma(PAGE_SIZE, PAGE_SIZE).is_ok());
        assert!(matches!(
            p.alloc_dma(PAGE_SIZE, 2 * PAGE_SIZE),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn double_free_and_foreign_regions_are_rejected() {
        let mut b = Backing::new(8 * PAGE_SIZE);
        let p = platform(&mut b, 8);
        let mut b2 = Backing::new(8 * PAGE_SIZE);
        let other = platform(&mut b2, 8);

        let r = p.alloc_dma(2 * PAGE_SIZE, 8).unwrap();
        let (host, iova, len, cookie) = (r.host_ptr(), r.iova(), r.len(), r.cookie());
        p.try_free_dma(r).unwrap();
        // SAFETY: a copy of a freed region's parts, only handed to free.
        let again = unsafe { DmaRegion::from_raw_parts(host, iova, len, cookie) };
        assert!(matches!(
            p.try_free_dma(again),
            Err(Error::DmaRegionNotAllocated { .. })
        ));

        // A region of another platform, even at the same bus address.
        let o = other.alloc_dma(PAGE_SIZE, 8).unwrap();
        assert_eq!(o.iova(), 0x8000_0000);
        let (oh, oi, ol, oc) = (o.host_ptr(), o.iova(), o.len(), o.cookie());
        // SAFETY: as above.
        let forged = unsafe { DmaRegion::from_raw_parts(oh, oi, ol, oc) };
        assert!(matches!(
            p.try_free_dma(forged),
            Err(Error::ForeignDmaRegion { .. })
        ));
        other.try_free_dma(o).unwrap();

        // Right pointer, wrong length; middle of an allocation; wrong IOVA.
        let r = p.alloc_dma(3 * PAGE_SIZE, 8).unwrap();
        let (host, iova, cookie) = (r.host_ptr(), r.iova(), r.cookie());
        // SAFETY: as above; none of these is accepted, so none aliases.
        unsafe {
            let short = DmaRegion::from_raw_parts(host, iova, PAGE_SIZE, cookie);
            assert!(matches!(
                p.try_free_dma(short),
                Err(Error::DmaRegionNotAllocated { .. })
            ));
            let middle = DmaRegion::from_raw_parts(
                host.add(PAGE_SIZE),
                iova + PAGE_SIZE as u64,
                PAGE_SIZE,
                cookie,
            );
            assert!(matches!(
                p.try_free_dma(middle),
                Err(Error::DmaRegionNotAllocated { .. })
            ));
            let moved = DmaRegion::from_raw_parts(host, iova + 0x10_0000, 3 * PAGE_SIZE, cookie);
            assert!(matches!(
                p.try_free_dma(moved),
                Err(Error::ForeignDmaRegion { .. })
            ));
        }
        // The refusals changed nothing: the real region frees once.
        assert_eq!(p.dma_stats().allocated_bytes, 3 * PAGE_SIZE);
        p.try_free_dma(r).unwrap();
        assert_eq!(p.dma_stats().allocated_bytes, 0);

        // A heap block lent out as a region is foreign too.
        let mut heap = vec![0u64; 512];
        // SAFETY: `heap` outlives the region, which is only handed to free.
        let h = unsafe {
            DmaRegion::from_raw_parts(
                NonNull::new(heap.as_mut_ptr().cast()).unwrap(),
                0x8000_0000,
                PAGE_SIZE,
                0,
            )
        };
        assert!(matches!(
            p.try_free_dma(h),
            Err(Error::ForeignDmaRegion { .. })
        ));
    }

    /// A translation that maps the region's pages in reverse order: no two
    /// neighbouring pages are contiguous on the bus.
    fn reversed(host: usize) -> Option<u64> {
        let base = REV_BASE.load(Ordering::Relaxed) as usize;
        let page = host.checked_sub(base)? / PAGE_SIZE;
        (page < 4).then(|| 0x1_0000_0000 + ((3 - page) * PAGE_SIZE) as u64)
    }
    static REV_BASE: AtomicU64 = AtomicU64::new(0);

    #[test]
    fn translation_function_places_only_contiguous_blocks() {
        let mut b = Backing::new(4 * PAGE_SIZE);
        let base = b.region();
        REV_BASE.store(base.as_ptr().addr() as u64, Ordering::Relaxed);
        // SAFETY: as in `platform`.
        let mem = unsafe { DmaMemory::new(base, 4 * PAGE_SIZE, AddressMap::Translate(reversed)) }
            .unwrap();
        let p = BareMetal::<_, NoPciHooks, 1>::new(mem, zero).unwrap();
        let one = p.alloc_dma(PAGE_SIZE, 8).unwrap();
        assert_eq!(one.iova(), 0x1_0000_0000 + 3 * PAGE_SIZE as u64);
        assert!(matches!(
            p.alloc_dma(2 * PAGE_SIZE, 8),
            Err(Error::NoContiguousDmaBlock { .. })
        ));
        p.try_free_dma(one).unwrap();
    }

    #[test]
    fn translation_failure_is_reported() {
        fn none(host: usize) -> Option<u64> {
            let _ = host;
            None
        }
        let mut b = Backing::new(2 * PAGE_SIZE);
        let base = b.region();
        // SAFETY: as in `platform`.
        let mem =
            unsafe { DmaMemory::new(base, 2 * PAGE_SIZE, AddressMap::Translate(none)) }.unwrap();
        let p = BareMetal::<_, NoPciHooks, 1>::new(mem, zero).unwrap();
        assert!(matches!(
            p.alloc_dma(PAGE_SIZE, 8),
            Err(Error::AddressTranslation { .. })
        ));
    }

    #[test]
    fn construction_checks() {
        let mut b = Backing::new(130 * PAGE_SIZE);
        let base = b.region();
        let off = |phys_base| AddressMap::Offset { phys_base };
        // SAFETY: none of these platforms allocates.
        unsafe {
            assert!(DmaMemory::new(base, 100, off(0)).is_err());
            assert!(DmaMemory::new(base, 0, off(0)).is_err());
            assert!(DmaMemory::new(base, PAGE_SIZE, off(0x123)).is_err());
            assert!(DmaMemory::new(base, PAGE_SIZE, off(!0xfff)).is_err());
            assert!(DmaMemory::new(base.add(8), PAGE_SIZE, off(0)).is_err());
            let mem = DmaMemory::new(base, 130 * PAGE_SIZE, off(0)).unwrap();
            // 2 words = 128 pages: too small.
            assert!(matches!(
                BareMetal::<_, NoPciHooks, 2>::new(mem, zero),
                Err(Error::InvalidArgument(_))
            ));
            let mem = DmaMemory::identity(base, PAGE_SIZE).unwrap();
            let p = BareMetal::<_, NoPciHooks, 1>::new(mem, zero).unwrap();
            let r = p.alloc_dma(8, 8).unwrap();
            assert_eq!(r.iova(), base.as_ptr().addr() as u64);
            p.try_free_dma(r).unwrap();
        }
    }

    #[test]
    fn bars_hooks_clock_and_delay() {
        struct Hooks;
        impl PciHooks for Hooks {
            fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
                buf.fill(offset as u8);
                Ok(())
            }
        }
        static TICKS: AtomicU64 = AtomicU64::new(0);
        fn ticking() -> Duration {
            Duration::from_micros(TICKS.fetch_add(10, Ordering::Relaxed))
        }

        let mut regs = vec![0u64; 8];
        let mut b = Backing::new(MIB / 256);
        let base = b.region();
        // SAFETY: `b` and `regs` outlive the platform and its windows.
        let p = unsafe {
            let mem = DmaMemory::identity(base, PAGE_SIZE).unwrap();
            BareMetal::<_, NoPciHooks, 1>::new(mem, ticking)
                .unwrap()
                .with_bar(0, NonNull::new(regs.as_mut_ptr().cast()).unwrap(), 64)
                .unwrap()
        };
        assert!(matches!(
            p.config_read(0, &mut [0; 2]),
            Err(Error::NotSupported(_))
        ));
        assert!(matches!(p.reset_function(), Err(Error::NotSupported(_))));
        assert!(matches!(p.map_bar(1), Err(Error::NoSuchBar(1))));
        assert!(matches!(p.map_bar(6), Err(Error::NoSuchBar(6))));
        let w = p.map_bar(0).unwrap();
        w.write32(4, crate::Be32::new(0x1234_5678));
        assert_eq!(w.len(), 64);
        assert_eq!(p.map_bar(0).unwrap().read32(4).get(), 0x1234_5678);
        // Uncached unless the caller says otherwise; only for a given BAR.
        assert!(!p.bar_write_combining(0));
        assert!(matches!(
            p.with_write_combining(1, true),
            Err(Error::NoSuchBar(1))
        ));
        // SAFETY: as above.
        let p = unsafe {
            let mem = DmaMemory::identity(base, PAGE_SIZE).unwrap();
            BareMetal::<_, NoPciHooks, 1>::new(mem, ticking)
                .unwrap()
                .with_bar(0, NonNull::new(regs.as_mut_ptr().cast()).unwrap(), 64)
                .unwrap()
        };
        let p = p.with_write_combining(0, true).unwrap();
        assert!(p.bar_write_combining(0));
        assert!(!p.bar_write_combining(1));
        assert!(!p.bar_write_combining(9));

        let p = p.with_hooks(Hooks).with_name("board");
        let mut buf = [0u8; 2];
        p.config_read(4, &mut buf).unwrap();
        assert_eq!(buf, [4, 4]);
        assert!(matches!(
            p.config_write(4, &buf),
            Err(Error::NotSupported(_))
        ));
        assert_eq!(p.describe(), "board");

        let t0 = p.now();
        p.delay(Duration::from_micros(100));
        assert!(p.now() - t0 >= Duration::from_micros(100));
        let refused = {
            // SAFETY: refused before the pointer is stored (bad BAR index).
            unsafe { p.with_bar(7, NonNull::dangling(), 8) }
        };
        assert!(matches!(refused, Err(Error::NoSuchBar(7))));
    }
}
