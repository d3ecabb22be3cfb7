//! The vfio backend (feature `vfio`, Linux): a PCI function bound to
//! `vfio-pci`, driven from userspace through the VFIO container/group
//! interface with the type1 IOMMU driver, using the `vfio-ioctls` crate
//! (without KVM) and raw ioctls where it lacks something
//! (`VFIO_IOMMU_GET_INFO`, `VFIO_DEVICE_RESET` with its result, BAR mmap,
//! configuration space with errors).
//!
//! ```no_run
//! use platform::{Platform, vfio::{Sysfs, VfioOptions, VfioPlatform}};
//! let sysfs = Sysfs::default();
//! // Mellanox functions; which device IDs are mlx5 is `hca_driver::pci`.
//! for f in sysfs.list_by_id(0x15b3, None)? {
//!     println!("{} {:04x} driver {:?}", f.bdf, f.device, f.driver);
//! }
//! sysfs.bind_vfio("0000:02:00.0")?;
//! let hca = VfioPlatform::open("0000:02:00.0", VfioOptions::default())?;
//! let bar0 = hca.map_bar(0)?;
//! let cmdq = hca.alloc_dma(4096, 4096)?;
//! # Ok::<(), platform::Error>(())
//! ```
//!
//! What [`VfioPlatform::open`] does, in order, each failure a typed error
//! that says how to fix it: the function exists, is bound to vfio-pci, has an
//! IOMMU group, every member of the group is bound to vfio-pci or to no
//! driver (or to pcieport/pci-stub), `/dev/vfio/vfio` and `/dev/vfio/<group>`
//! can be opened, `RLIMIT_MEMLOCK` leaves room for the DMA memory the caller
//! plans to pin ([`VfioOptions::planned_dma_bytes`]); then it opens the
//! container, the group and the device, reads the IOMMU's usable IOVA ranges
//! and enables memory space and bus mastering.
//!
//! DMA memory comes in chunks of 2 MiB (or a multiple, for larger requests):
//! one 2 MiB huge page each when the system has them (`MAP_HUGETLB`),
//! otherwise 4 KiB pages (2 MiB aligned, with transparent huge pages
//! advised). Each chunk is mapped once with `VFIO_IOMMU_MAP_DMA` at an IOVA
//! inside the IOMMU's ranges and below the device's DMA mask
//! ([`VfioOptions::dma_mask_bits`]); allocations are carved out of chunks in
//! 4 KiB pages, and a chunk whose last allocation is freed is unmapped from
//! the IOMMU and returned to the system.
//!
//! Interrupts: the MSI-X vectors VFIO offers (`VFIO_DEVICE_GET_IRQ_INFO` on
//! `VFIO_PCI_MSIX_IRQ_INDEX`) are enabled with one eventfd each
//! ([`Platform::enable_msix`], see [`irq`]), and
//! [`Platform::wait_interrupt`] sleeps on a vector's eventfd. They are
//! disabled by [`Platform::disable_msix`], by a function reset and when the
//! platform is dropped.

pub mod iova;
pub mod irq;
pub mod memlock;
pub mod sysfs;

pub use iova::{IommuInfo, IovaAllocator, IovaRange, dma_mask, parse_iommu_info};
pub use memlock::{
    MemlockStatus, check_memlock, drop_cap_ipc_lock, has_cap_ipc_lock, memlock_limit,
    memlock_status, set_memlock_limit,
};
pub use sysfs::{PciFunction, Sysfs, VFIO_PCI, normalize_bdf, wait_for_path};

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::string::{String, ToString};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use std::vec::Vec;
use std::{format, vec};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError};

use crate::pages::{PageBitmap, words_for};
use crate::user::{UserMapping, UserMemory};
use crate::{Be32, Be64};
use crate::{DmaRegion, DmaStats, Error, Mmio, MmioWindow, PAGE_SIZE, Platform, pci};

/// Size of a huge page and of a DMA chunk.
pub const CHUNK_SIZE: usize = 2 << 20;

/// The lowest IOVA handed out: IOVA 0 (and the first chunk) stays unmapped so
/// that a zeroed address field never reaches memory.
pub const IOVA_MIN: u64 = CHUNK_SIZE as u64;

/// `_IO(VFIO_TYPE, VFIO_BASE + 11)`.
const VFIO_DEVICE_RESET: u64 = (59 << 8) | (100 + 11);
/// `_IO(VFIO_TYPE, VFIO_BASE + 12)`.
const VFIO_IOMMU_GET_INFO: u64 = (59 << 8) | (100 + 12);
/// `_IO(VFIO_TYPE, VFIO_BASE + 3)`.
const VFIO_GROUP_GET_STATUS: u64 = (59 << 8) | (100 + 3);
/// `VFIO_GROUP_FLAGS_VIABLE`.
const VFIO_GROUP_FLAGS_VIABLE: u32 = 1;
/// `MAP_HUGE_2MB`: log2(2 MiB) << `MAP_HUGE_SHIFT`.
const MAP_HUGE_2MB: libc::c_int = 21 << 26;
/// Number of BARs.
const BARS: usize = 6;

/// How to open a device.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VfioOptions {
    /// The sysfs root (`/sys`).
    pub sysfs_root: PathBuf,
    /// Where the VFIO device nodes are (`/dev/vfio`). The container and group
    /// are opened there by vfio-ioctls, which always uses `/dev/vfio`; this
    /// path is what the up-front checks look at.
    pub dev_vfio: PathBuf,
    /// The device's DMA mask in bits: every IOVA handed out is below
    /// `2^dma_mask_bits` (64 for a ConnectX; QEMU's edu device reaches 28).
    pub dma_mask_bits: u8,
    /// Bytes of DMA memory the caller plans to pin, checked against
    /// `RLIMIT_MEMLOCK` when opening (default 64 MiB: a ConnectX-4 asks for
    /// about 50 MiB of firmware pages).
    pub planned_dma_bytes: u64,
    /// Try 2 MiB huge pages before 4 KiB pages.
    pub huge_pages: bool,
    /// Enable memory space and bus mastering when opening.
    pub bus_master: bool,
}

impl Default for VfioOptions {
    fn default() -> Self {
        Self {
            sysfs_root: PathBuf::from("/sys"),
            dev_vfio: PathBuf::from("/dev/vfio"),
            dma_mask_bits: 64,
            planned_dma_bytes: 64 << 20,
            huge_pages: true,
            bus_master: true,
        }
    }
}

impl VfioOptions {
    /// Sets [`dma_mask_bits`](Self::dma_mask_bits).
    pub fn dma_mask_bits(mut self, bits: u8) -> Self {
        self.dma_mask_bits = bits;
        self
    }
    /// Sets [`planned_dma_bytes`](Self::planned_dma_bytes).
    pub fn planned_dma_bytes(mut self, bytes: u64) -> Self {
        self.planned_dma_bytes = bytes;
        self
    }
    /// Sets [`huge_pages`](Self::huge_pages).
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }
    /// Sets [`bus_master`](Self::bus_master).
    pub fn bus_master(mut self, on: bool) -> Self {
        self.bus_master = on;
        self
    }
    /// Sets [`sysfs_root`](Self::sysfs_root).
    pub fn sysfs_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.sysfs_root = root.into();
        self
    }
}

fn sys_err(what: impl Into<String>) -> Error {
    Error::Sys {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    }
}

fn vfio_err(what: &'static str, source: VfioError) -> Error {
    Error::Vfio { what, source }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Opens a VFIO device node read-write and closes it again, turning the
/// failure into advice.
fn check_dev_node(path: &Path) -> Result<(), Error> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(source) => {
            let hint = match source.raw_os_error() {
                Some(libc::ENOENT) => {
                    "it does not exist: load vfio-pci (`modprobe vfio-pci`) and bind the device to it (`hca bind <bdf>`)"
                }
                Some(libc::EACCES | libc::EPERM) => {
                    "permission denied: run as root, or give the user this node (a udev rule setting its owner or mode)"
                }
                Some(libc::EBUSY) => {
                    "the IOMMU group is in use by another process (another driver instance, or a VM)"
                }
                _ => "see the kernel log (dmesg)",
            };
            Err(Error::VfioDevNode {
                path: path.display().to_string(),
                source,
                hint,
            })
        }
    }
}

/// Asks the kernel whether IOMMU group `group` is viable
/// (`VFIO_GROUP_GET_STATUS` on `<dev_vfio>/<group>`), independently of the
/// sysfs check [`Sysfs::check_vfio_ready`] makes. Opening the group node
/// needs the same rights as [`VfioPlatform::open`].
pub fn kernel_group_viable(dev_vfio: &Path, group: u32) -> Result<bool, Error> {
    let path = dev_vfio.join(group.to_string());
    check_dev_node(&path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::Sys {
            what: format!("opening {}", path.display()),
            source: e,
        })?;
    // struct vfio_group_status { u32 argsz; u32 flags; }
    let mut status = [8u32, 0u32];
    // SAFETY: the kernel reads `argsz` and writes `flags` of the two-word
    // struct, which `status` is.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            VFIO_GROUP_GET_STATUS as _,
            status.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(sys_err(format!(
            "VFIO_GROUP_GET_STATUS on {}",
            path.display()
        )));
    }
    Ok(status[1] & VFIO_GROUP_FLAGS_VIABLE != 0)
}

/// Reads the container's IOMMU information (`VFIO_IOMMU_GET_INFO` with its
/// capability chain).
fn query_iommu_info(container: RawFd) -> Result<IommuInfo, Error> {
    let mut argsz = iova::INFO_SIZE as u32;
    for _ in 0..4 {
        let mut words = vec![0u64; (argsz as usize).div_ceil(8)];
        let mut first = [0u8; 8];
        first[..4].copy_from_slice(&argsz.to_ne_bytes());
        words[0] = u64::from_ne_bytes(first);
        // SAFETY: the buffer is 8-byte aligned, `argsz` bytes long (rounded
        // up), and starts with `argsz`: the kernel writes at most `argsz`
        // bytes of `struct vfio_iommu_type1_info` and its capabilities.
        let rc = unsafe { libc::ioctl(container, VFIO_IOMMU_GET_INFO as _, words.as_mut_ptr()) };
        if rc != 0 {
            return Err(sys_err("VFIO_IOMMU_GET_INFO"));
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let needed = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if needed <= argsz {
            return parse_iommu_info(&bytes[..argsz as usize]);
        }
        argsz = needed;
    }
    Err(Error::Sys {
        what: String::from("VFIO_IOMMU_GET_INFO keeps asking for a larger buffer"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
    })
}

/// Memory for one DMA chunk: `(mmap base, mmap length, huge)`.
fn map_memory(size: usize, huge: bool) -> Result<(NonNull<u8>, bool), Error> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    if huge {
        // SAFETY: an anonymous private mapping at an address the kernel
        // chooses; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | MAP_HUGE_2MB,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            if let Some(p) = NonNull::new(p.cast::<u8>()) {
                return Ok((p, true));
            }
        }
        log::debug!(
            "no 2 MiB huge pages for a {size}-byte DMA chunk ({}), using 4 KiB pages",
            std::io::Error::last_os_error()
        );
    }
    // Over-allocate by one chunk to cut out a 2 MiB-aligned piece.
    let total = size + CHUNK_SIZE;
    // SAFETY: as above.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(sys_err(format!("mmap of {size} bytes of DMA memory")));
    }
    let p = p.cast::<u8>();
    let head = p.align_offset(CHUNK_SIZE);
    let tail = total - head - size;
    // SAFETY: `head < CHUNK_SIZE`, so `p + head .. p + head + size` lies in
    // the mapping of `total` bytes.
    let aligned = unsafe { p.add(head) };
    // SAFETY: the head and tail pieces are parts of the mapping just made,
    // used by nobody.
    unsafe {
        if head > 0 {
            libc::munmap(p.cast(), head);
        }
        if tail > 0 {
            libc::munmap(aligned.add(size).cast(), tail);
        }
        // Transparent huge pages, when enabled, cut IOMMU and TLB work; a
        // failure only loses that.
        libc::madvise(aligned.cast(), size, libc::MADV_HUGEPAGE);
    }
    NonNull::new(aligned)
        .map(|a| (a, false))
        .ok_or_else(|| sys_err("mmap returned null"))
}

/// One mapped chunk of DMA memory.
struct Chunk {
    host: NonNull<u8>,
    iova: u64,
    len: usize,
    huge: bool,
    pages: PageBitmap<Vec<u64>>,
}

// SAFETY: a chunk is a handle on an anonymous mapping the platform owns; it is
// only used under the platform's DMA mutex.
unsafe impl Send for Chunk {}

struct DmaState {
    chunks: BTreeMap<u64, Chunk>,
    iova: IovaAllocator,
    allocated: usize,
    /// User memory mapped with `map_user`: IOVA → (host address, length).
    user: BTreeMap<u64, (usize, usize)>,
}

/// An mmap of a BAR; unmapped when the last window over it is dropped.
#[derive(Debug)]
struct BarMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping of device registers; the windows over it do volatile
// accesses from any thread, and the mapping itself is only unmapped on drop.
unsafe impl Send for BarMapping {}
// SAFETY: as above.
unsafe impl Sync for BarMapping {}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map_bar` with this length, and no
        // window over it is left (this is the last reference).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A mapped BAR of a VFIO device: an [`MmioWindow`] that keeps its mapping
/// alive.
#[derive(Debug, Clone)]
pub struct VfioBar {
    mapping: Arc<BarMapping>,
}

impl VfioBar {
    /// The register window.
    pub fn window(&self) -> MmioWindow {
        // SAFETY: the mapping is valid for volatile accesses of `len` bytes
        // (a shared mmap of the BAR, page-aligned) for as long as `self`
        // holds the Arc; the window is used while `self` is borrowed.
        unsafe { MmioWindow::new(self.mapping.ptr, self.mapping.len) }
    }

    fn with<R>(&self, f: impl FnOnce(&MmioWindow) -> R) -> R {
        f(&self.window())
    }
}

impl Mmio for VfioBar {
    fn len(&self) -> usize {
        self.mapping.len
    }
    fn read32(&self, offset: usize) -> Be32 {
        self.with(|w| w.read32(offset))
    }
    fn write32(&self, offset: usize, value: Be32) {
        self.with(|w| w.write32(offset, value))
    }
    fn write64(&self, offset: usize, value: Be64) {
        self.with(|w| w.write64(offset, value))
    }
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        self.with(|w| w.write_bf(offset, src))
    }
    /// The window's plain 64-bit store (the doorbell), without the check
    /// of [`write64`](Mmio::write64).
    #[inline(always)]
    unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
        // SAFETY: the window is over this BAR's mapping with the same
        // length (`self.len()` is the mapping's, fixed while the Arc lives),
        // so the caller's guarantee (`offset` 8-byte aligned, `offset + 8 <=
        // self.len()`) is exactly the window's contract for this call.
        unsafe { self.window().write64_unchecked(offset, value) }
    }
}

/// Where a chunk of DMA memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaChunkInfo {
    /// Its IOVA.
    pub iova: u64,
    /// Its length.
    pub len: usize,
    /// Whether it is a huge page.
    pub huge: bool,
    /// Bytes allocated from it.
    pub allocated: usize,
}

/// The typed error for an errno of `VFIO_IOMMU_MAP_DMA` of user memory
/// (`host`, `len`: the page span), or `None` for one without a meaning of
/// its own (reported as [`Error::Vfio`]).
///
/// `EFAULT`: a page is not mapped (or not writable) in the process;
/// `ENOMEM`: pinning it would exceed `RLIMIT_MEMLOCK` (or the type1
/// IOMMU's DMA mapping limit, `dma_entry_limit`); `EEXIST`: the IOVA range
/// is mapped already.
pub fn user_map_error(errno: Option<i32>, host: usize, len: usize) -> Option<Error> {
    match errno? {
        libc::EFAULT => Some(Error::UserMemoryFault {
            host,
            len,
            reason: "a page is not mapped writable in the process (EFAULT)",
        }),
        libc::ENOMEM => Some(Error::MemlockTooLow {
            limit: memlock_limit().unwrap_or(0),
            needed: memlock::locked_bytes() + len as u64,
        }),
        libc::EEXIST => Some(Error::UserMemoryFault {
            host,
            len,
            reason: "its IOVA range is mapped already (EEXIST)",
        }),
        _ => None,
    }
}

/// A PCI function bound to vfio-pci, as a [`Platform`].
pub struct VfioPlatform {
    function: PciFunction,
    group: u32,
    describe: String,
    iommu: IommuInfo,
    dma_mask: u64,
    dma: Mutex<DmaState>,
    bars: Mutex<[Option<Arc<BarMapping>>; BARS]>,
    options: VfioOptions,
    epoch: Instant,
    tag: usize,
    msix: irq::MsixVectors,
    device: VfioDevice,
    container: Arc<VfioContainer>,
}

impl std::fmt::Debug for VfioPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPlatform")
            .field("function", &self.function)
            .field("group", &self.group)
            .field("iommu", &self.iommu)
            .field("dma_mask", &self.dma_mask)
            .finish_non_exhaustive()
    }
}

impl VfioPlatform {
    /// Opens `bdf` (see the module documentation for every check).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidBdf`], [`Error::DeviceNotFound`],
    /// [`Error::NotBoundToVfio`], [`Error::NoIommuGroup`],
    /// [`Error::GroupNotViable`], [`Error::VfioDevNode`],
    /// [`Error::MemlockTooLow`], [`Error::IovaExhausted`] (nothing usable
    /// below the DMA mask), [`Error::Vfio`] and [`Error::Sys`] for what the
    /// kernel refuses.
    pub fn open(bdf: &str, options: VfioOptions) -> Result<Self, Error> {
        let sysfs = Sysfs::new(&options.sysfs_root);
        let function = sysfs.check_vfio_ready(bdf)?;
        let bdf = function.bdf.clone();
        let group = function
            .iommu_group
            .ok_or_else(|| Error::NoIommuGroup { bdf: bdf.clone() })?;
        check_dev_node(&options.dev_vfio.join("vfio"))?;
        check_dev_node(&options.dev_vfio.join(group.to_string()))?;
        check_memlock(&memlock_status()?, options.planned_dma_bytes)?;

        let container =
            Arc::new(VfioContainer::new(None).map_err(|e| vfio_err("opening the container", e))?);
        let device = VfioDevice::new(&sysfs.device_path(&bdf), container.clone(), false).map_err(
            |e| match e {
                VfioError::GroupViable => Error::GroupNotViable {
                    bdf: bdf.clone(),
                    group,
                    blockers: Vec::new(),
                },
                e => vfio_err("opening the device", e),
            },
        )?;
        let iommu = query_iommu_info(container.as_raw_fd())?;
        let dma_mask = dma_mask(options.dma_mask_bits);
        let iova = IovaAllocator::new(&iommu.ranges, IOVA_MIN, dma_mask)?;
        log::debug!(
            "vfio {bdf}: group {group}, IOVA ranges {:x?}, page sizes {:#x}, DMA mask {dma_mask:#x}",
            iommu.ranges,
            iommu.page_sizes
        );
        let describe = format!(
            "vfio {bdf} ({:04x}:{:04x})",
            function.vendor, function.device
        );
        let msix = match device.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX) {
            Some(i) if i.flags & VFIO_IRQ_INFO_EVENTFD != 0 => {
                u16::try_from(i.count).unwrap_or(u16::MAX)
            }
            _ => 0,
        };
        log::debug!("vfio {bdf}: {msix} MSI-X vectors");
        let platform = Self {
            tag: Arc::as_ptr(&container).addr() ^ 0x7666_696f,
            msix: irq::MsixVectors::new(msix),
            function,
            group,
            describe,
            iommu,
            dma_mask,
            dma: Mutex::new(DmaState {
                chunks: BTreeMap::new(),
                iova,
                allocated: 0,
                user: BTreeMap::new(),
            }),
            bars: Mutex::new([const { None }; BARS]),
            options,
            epoch: Instant::now(),
            device,
            container,
        };
        if platform.options.bus_master {
            platform.set_command(pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER, 0)?;
        }
        Ok(platform)
    }

    /// The PCI function.
    pub fn function(&self) -> &PciFunction {
        &self.function
    }

    /// Its IOMMU group.
    pub fn iommu_group(&self) -> u32 {
        self.group
    }

    /// What the IOMMU reported.
    pub fn iommu_info(&self) -> &IommuInfo {
        &self.iommu
    }

    /// The highest IOVA handed out.
    pub fn dma_mask(&self) -> u64 {
        self.dma_mask
    }

    /// Sets and clears bits of the PCI command register; returns the new
    /// value.
    pub fn set_command(&self, set: u16, clear: u16) -> Result<u16, Error> {
        let mut b = [0u8; 2];
        self.config_read(pci::COMMAND, &mut b)?;
        let cmd = (u16::from_le_bytes(b) | set) & !clear;
        self.config_write(pci::COMMAND, &cmd.to_le_bytes())?;
        self.config_read(pci::COMMAND, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Turns bus mastering (the device's DMA) on or off.
    pub fn set_bus_master(&self, on: bool) -> Result<(), Error> {
        let (set, clear) = if on {
            (pci::COMMAND_BUS_MASTER, 0)
        } else {
            (0, pci::COMMAND_BUS_MASTER)
        };
        self.set_command(set, clear).map(|_| ())
    }

    /// How much DMA memory is pinned and allocated.
    pub fn dma_stats(&self) -> DmaStats {
        let st = lock(&self.dma);
        DmaStats {
            total_bytes: st.chunks.values().map(|c| c.len).sum(),
            allocated_bytes: st.allocated,
            largest_free_block: st
                .chunks
                .values()
                .map(|c| c.pages.largest_free_run() * PAGE_SIZE)
                .max()
                .unwrap_or(0),
        }
    }

    /// The chunks of DMA memory mapped for the device.
    pub fn dma_chunks(&self) -> Vec<DmaChunkInfo> {
        lock(&self.dma)
            .chunks
            .values()
            .map(|c| DmaChunkInfo {
                iova: c.iova,
                len: c.len,
                huge: c.huge,
                allocated: c.pages.allocated() * PAGE_SIZE,
            })
            .collect()
    }

    /// Maps a new chunk of at least `len` bytes; returns its IOVA.
    fn new_chunk(&self, st: &mut DmaState, len: usize) -> Result<u64, Error> {
        let size = len.div_ceil(CHUNK_SIZE) * CHUNK_SIZE;
        let iova = st.iova.alloc(size as u64, CHUNK_SIZE as u64)?;
        let (host, huge) = match map_memory(size, self.options.huge_pages) {
            Ok(m) => m,
            Err(e) => {
                let _ = st.iova.free(iova, size as u64);
                return Err(e);
            }
        };
        // SAFETY: `host .. host + size` is a fresh anonymous mapping owned by
        // this chunk; it is only ever accessed through `DmaRegion`s (volatile
        // copies, no references) and unmapped from the IOMMU before it is
        // unmapped from the process.
        let mapped = unsafe { self.container.vfio_dma_map(iova, size, host.as_ptr()) };
        if let Err(e) = mapped {
            // SAFETY: the mapping was just made, is not in the IOMMU and is
            // used by nobody.
            unsafe { libc::munmap(host.as_ptr().cast(), size) };
            let _ = st.iova.free(iova, size as u64);
            return Err(match &e {
                VfioError::IommuDmaMap(s) if s.errno() == libc::ENOMEM => Error::MemlockTooLow {
                    limit: memlock_limit().unwrap_or(0),
                    needed: memlock::locked_bytes() + size as u64,
                },
                _ => vfio_err("VFIO_IOMMU_MAP_DMA", e),
            });
        }
        let pages = size / PAGE_SIZE;
        st.chunks.insert(
            iova,
            Chunk {
                host,
                iova,
                len: size,
                huge,
                pages: PageBitmap::new(vec![0; words_for(pages)], vec![0; words_for(pages)], pages),
            },
        );
        log::debug!(
            "{}: mapped a {size}-byte DMA chunk at IOVA {iova:#x} ({})",
            self.describe,
            if huge { "huge page" } else { "4 KiB pages" }
        );
        Ok(iova)
    }

    /// Returns a region, saying why when it cannot. A chunk whose last
    /// allocation is freed is unmapped from the IOMMU and from the process.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignDmaRegion`], [`Error::DmaRegionNotAllocated`], or
    /// [`Error::Vfio`] if the IOMMU refused the unmap (the chunk's memory is
    /// then kept, since the device may still reach it).
    pub fn try_free_dma(&self, region: DmaRegion) -> Result<(), Error> {
        let (iova, len) = (region.iova(), region.len());
        let foreign = Error::ForeignDmaRegion { iova, len };
        if region.cookie() != self.tag || len == 0 || len % PAGE_SIZE != 0 {
            return Err(foreign);
        }
        let mut st = lock(&self.dma);
        let Some((&key, chunk)) = st.chunks.range_mut(..=iova).next_back() else {
            return Err(foreign);
        };
        let offset = iova - chunk.iova;
        let inside = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= chunk.len as u64);
        if !inside
            || offset % PAGE_SIZE as u64 != 0
            || region.host_ptr().as_ptr().addr() != chunk.host.as_ptr().addr() + offset as usize
        {
            return Err(foreign);
        }
        chunk
            .pages
            .free(offset as usize / PAGE_SIZE, len / PAGE_SIZE)
            .map_err(|_| Error::DmaRegionNotAllocated { iova, len })?;
        let empty = chunk.pages.is_empty();
        let (host, size) = (chunk.host, chunk.len);
        st.allocated -= len;
        if !empty {
            return Ok(());
        }
        if let Err(e) = self.container.vfio_dma_unmap(key, size) {
            log::error!(
                "{}: VFIO_IOMMU_UNMAP_DMA of IOVA {key:#x} failed ({e}); keeping its memory",
                self.describe
            );
            return Err(vfio_err("VFIO_IOMMU_UNMAP_DMA", e));
        }
        st.chunks.remove(&key);
        let _ = st.iova.free(key, size as u64);
        // SAFETY: the chunk is out of the IOMMU and no region points into it
        // (its bitmap is empty).
        unsafe { libc::munmap(host.as_ptr().cast(), size) };
        log::debug!("{}: unmapped the DMA chunk at IOVA {key:#x}", self.describe);
        Ok(())
    }

    fn config_region(&self) -> (u64, u64) {
        (
            self.device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX),
            self.device.get_region_size(VFIO_PCI_CONFIG_REGION_INDEX),
        )
    }

    fn config_check(&self, offset: u16, len: usize) -> Result<u64, Error> {
        let (base, size) = self.config_region();
        if u64::from(offset) + len as u64 > size {
            return Err(Error::InvalidArgument(
                "configuration space access beyond the end of configuration space",
            ));
        }
        Ok(base + u64::from(offset))
    }
}

impl Drop for VfioPlatform {
    fn drop(&mut self) {
        if let Err(e) = self.disable_msix() {
            log::warn!("{}: disabling MSI-X: {e}", self.describe);
        }
        let st = lock(&self.dma);
        for c in st.chunks.values() {
            // Regions are still out: their memory stays valid for the CPU
            // (leaked), while closing the container takes it away from the
            // device.
            log::warn!(
                "{}: dropped with {} bytes of DMA memory still allocated at IOVA {:#x}; leaking it",
                self.describe,
                c.pages.allocated() * PAGE_SIZE,
                c.iova
            );
        }
    }
}

impl Platform for VfioPlatform {
    type Mmio = VfioBar;

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaRegion, Error> {
        if len == 0 {
            return Err(Error::InvalidArgument("zero-length DMA allocation"));
        }
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(
                "DMA alignment must be a power of two",
            ));
        }
        if align > CHUNK_SIZE {
            return Err(Error::InvalidArgument(
                "the vfio backend aligns DMA memory to at most 2 MiB",
            ));
        }
        let n = len.div_ceil(PAGE_SIZE);
        let align_pages = (align / PAGE_SIZE).max(1);
        let mut st = lock(&self.dma);
        let mut found = None;
        for c in st.chunks.values_mut() {
            if let Ok(p) = c.pages.alloc(n, align_pages, 0, |_| true) {
                found = Some((c.iova, p));
                break;
            }
        }
        let (key, first) = match found {
            Some(f) => f,
            None => {
                let key = self.new_chunk(&mut st, n * PAGE_SIZE)?;
                let c = st.chunks.get_mut(&key).ok_or(Error::DeviceGone)?;
                let p = c
                    .pages
                    .alloc(n, align_pages, 0, |_| true)
                    .expect("a fresh chunk holds the allocation it was made for");
                (key, p)
            }
        };
        st.allocated += n * PAGE_SIZE;
        let c = &st.chunks[&key];
        let offset = first * PAGE_SIZE;
        // SAFETY: `offset + n * PAGE_SIZE <= c.len` (the bitmap covers the
        // chunk), so the pointer stays inside the chunk's mapping.
        let host = unsafe { c.host.add(offset) };
        let words = host.cast::<u64>();
        for i in 0..n * PAGE_SIZE / 8 {
            // SAFETY: the pages were free, so no region points at them; they
            // are inside the mapping and 8-byte aligned.
            unsafe { words.add(i).write_volatile(0) };
        }
        // SAFETY: the pages stay mapped (process and IOMMU) until this region
        // comes back through `free_dma`; access is volatile only.
        Ok(unsafe {
            DmaRegion::from_raw_parts(host, c.iova + offset as u64, n * PAGE_SIZE, self.tag)
        })
    }

    /// `VFIO_IOMMU_MAP_DMA` of the page span at an IOVA of the
    /// platform's IOVA space (4 KiB aligned, below the DMA mask); the
    /// kernel pins the pages (they count against `RLIMIT_MEMLOCK`).
    fn map_user(&self, mem: UserMemory) -> Result<UserMapping, Error> {
        let (host, span) = mem.span();
        let mut st = lock(&self.dma);
        let iova = st.iova.alloc(span as u64, PAGE_SIZE as u64)?;
        // SAFETY: the span stays mapped in the process until `unmap_user`
        // (the promise `mem` carries); the kernel pins it meanwhile.
        let mapped = unsafe {
            self.container
                .vfio_dma_map(iova, span, mem.span_ptr().as_ptr())
        };
        if let Err(e) = mapped {
            let _ = st.iova.free(iova, span as u64);
            let errno = match &e {
                VfioError::IommuDmaMap(s) => Some(s.errno()),
                _ => None,
            };
            return Err(user_map_error(errno, host, span)
                .unwrap_or_else(|| vfio_err("VFIO_IOMMU_MAP_DMA of user memory", e)));
        }
        st.user.insert(iova, (host, span));
        log::debug!(
            "{}: mapped {span:#x} bytes of user memory at {host:#x} to IOVA {iova:#x}",
            self.describe
        );
        UserMapping::new(host, span, iova, self.tag)
    }

    /// `VFIO_IOMMU_UNMAP_DMA` of the mapping (the kernel unpins the
    /// pages). If the kernel refuses, the pages stay mapped and pinned.
    fn unmap_user(&self, mapping: UserMapping) -> Result<(), Error> {
        let (iova, host, len) = (mapping.iova(), mapping.host_addr(), mapping.len());
        let mut st = lock(&self.dma);
        if mapping.cookie() != self.tag || st.user.get(&iova) != Some(&(host, len)) {
            return Err(Error::ForeignUserMapping { host, len });
        }
        self.container
            .vfio_dma_unmap(iova, len)
            .map_err(|e| vfio_err("VFIO_IOMMU_UNMAP_DMA of user memory", e))?;
        st.user.remove(&iova);
        let _ = st.iova.free(iova, len as u64);
        Ok(())
    }

    fn free_dma(&self, region: DmaRegion) {
        if let Err(e) = self.try_free_dma(region) {
            log::error!("{}: free_dma refused: {e}", self.describe);
        }
    }

    /// Always `false`: vfio-pci maps a BAR with `pgprot_noncached`, so
    /// the driver rings doorbells only (as rdma-core's VFIO provider does).
    fn bar_write_combining(&self, _bar: u8) -> bool {
        false
    }

    fn map_bar(&self, bar: u8) -> Result<VfioBar, Error> {
        let index = usize::from(bar);
        if index >= BARS {
            return Err(Error::NoSuchBar(bar));
        }
        let mut bars = lock(&self.bars);
        if let Some(m) = &bars[index] {
            return Ok(VfioBar { mapping: m.clone() });
        }
        let region = u32::from(bar);
        let size = self.device.get_region_size(region);
        let flags = self.device.get_region_flags(region);
        let offset = self.device.get_region_offset(region);
        if size == 0 {
            return Err(Error::NoSuchBar(bar));
        }
        let needed = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        if flags & VFIO_REGION_INFO_FLAG_MMAP == 0 || flags & needed != needed {
            return Err(Error::NotSupported(
                "this BAR cannot be mapped (an I/O port BAR, or the kernel refuses mmap of it)",
            ));
        }
        let len = usize::try_from(size).map_err(|_| Error::NoSuchBar(bar))?;
        let off = libc::off_t::try_from(offset).map_err(|_| Error::NoSuchBar(bar))?;
        // SAFETY: a shared mapping of the device file at the region's
        // offset, at an address the kernel chooses; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.device.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(sys_err(format!("mmap of BAR {bar} ({len} bytes)")));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| sys_err("mmap returned null"))?;
        let mapping = Arc::new(BarMapping { ptr, len });
        bars[index] = Some(mapping.clone());
        Ok(VfioBar { mapping })
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
        let at = self.config_check(offset, buf.len())?;
        // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::pread(
                self.device.as_raw_fd(),
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len(),
                at as libc::off_t,
            )
        };
        if n != buf.len() as isize {
            return Err(sys_err(format!(
                "reading {} bytes of configuration space at {offset:#x}",
                buf.len()
            )));
        }
        Ok(())
    }

    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error> {
        let at = self.config_check(offset, buf.len())?;
        // SAFETY: pwrite reads `buf.len()` bytes from `buf`.
        let n = unsafe {
            libc::pwrite(
                self.device.as_raw_fd(),
                buf.as_ptr().cast::<c_void>(),
                buf.len(),
                at as libc::off_t,
            )
        };
        if n != buf.len() as isize {
            return Err(sys_err(format!(
                "writing {} bytes of configuration space at {offset:#x}",
                buf.len()
            )));
        }
        Ok(())
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn delay(&self, d: Duration) {
        if d >= Duration::from_millis(1) {
            std::thread::sleep(d);
            return;
        }
        let start = Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    fn reset_function(&self) -> Result<(), Error> {
        // SAFETY: VFIO_DEVICE_RESET takes no argument.
        let rc = unsafe { libc::ioctl(self.device.as_raw_fd(), VFIO_DEVICE_RESET as _) };
        if rc != 0 {
            let source = std::io::Error::last_os_error();
            if source.raw_os_error() == Some(libc::EINVAL)
                || source.raw_os_error() == Some(libc::ENOTTY)
            {
                return Err(Error::NotSupported(
                    "the device has no function reset VFIO can use (no FLR, PM or bus reset)",
                ));
            }
            return Err(Error::Sys {
                what: format!("VFIO_DEVICE_RESET of {}", self.function.bdf),
                source,
            });
        }
        // A reset function raises no interrupt until its driver sets it up
        // again: give the vectors back and close their eventfds.
        if let Err(e) = self.disable_msix() {
            log::warn!("{}: disabling MSI-X before the reset: {e}", self.describe);
        }
        // The kernel restores the saved configuration space; make sure the
        // device can still be reached and do DMA.
        if self.options.bus_master {
            self.set_command(pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER, 0)?;
        }
        Ok(())
    }

    fn describe(&self) -> &str {
        &self.describe
    }

    /// The count of `VFIO_DEVICE_GET_IRQ_INFO` on the MSI-X index when it
    /// supports eventfds, read when the device was opened.
    fn msix_vectors(&self) -> u16 {
        self.msix.available()
    }

    fn enable_msix(&self, n: u16) -> Result<(), Error> {
        let fd = self.device.as_raw_fd();
        self.msix.enable(n, |set| irq::set_irqs(fd, set))?;
        log::debug!("{}: {n} MSI-X vectors enabled (eventfds)", self.describe);
        Ok(())
    }

    fn disable_msix(&self) -> Result<(), Error> {
        let fd = self.device.as_raw_fd();
        self.msix.disable(|set| irq::set_irqs(fd, set))
    }

    fn wait_interrupt(&self, vector: u16, seen: u64, timeout: Duration) -> Result<u64, Error> {
        self.msix.wait(vector, seen, timeout)
    }

    /// The vector's eventfd, which the kernel signals (`VFIO_DEVICE_SET_IRQS`).
    fn interrupt_fd(&self, vector: u16) -> Option<i32> {
        self.msix.vector(vector).ok().map(|v| v.raw_fd())
    }

    fn interrupt_count(&self, vector: u16) -> Result<u64, Error> {
        self.msix.vector(vector)?.count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    #[cfg_attr(miri, ignore = "reads RLIMIT_MEMLOCK and /proc, which Miri isolates")]
    fn user_map_errnos_are_typed() {
        let e = user_map_error(Some(libc::EFAULT), 0x1000, 0x2000);
        assert!(
            matches!(
                e,
                Some(Error::UserMemoryFault {
                    host: 0x1000,
                    len: 0x2000,
                    ..
                })
            ),
            "{e:?}"
        );
        let e = user_map_error(Some(libc::ENOMEM), 0x1000, 0x2000);
        assert!(matches!(e, Some(Error::MemlockTooLow { .. })), "{e:?}");
        let e = user_map_error(Some(libc::EEXIST), 0x1000, 0x2000);
        assert!(matches!(e, Some(Error::UserMemoryFault { .. })), "{e:?}");
        assert!(user_map_error(Some(libc::EINVAL), 0, 0).is_none());
        assert!(user_map_error(None, 0, 0).is_none());
    }

    #[test]
    fn handles_can_be_shared_between_threads() {
        send_sync::<VfioPlatform>();
        send_sync::<VfioBar>();
        send_sync::<crate::bare_metal::BareMetal<fn() -> Duration>>();
    }

    /// A `VfioBar` over an anonymous mapping standing in for a BAR.
    fn anon_bar(len: usize) -> VfioBar {
        // SAFETY: a fresh private anonymous mapping; nothing else uses it.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let ptr = NonNull::new(p.cast::<u8>()).unwrap();
        VfioBar {
            mapping: Arc::new(BarMapping { ptr, len }),
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run mmap")]
    fn bar_doorbell_without_check_is_the_windows_store() {
        let bar = anon_bar(4096);
        let v = Be64::new(0x0102_0304_0506_0708);
        // SAFETY: 0x800 and 4088 are 8-byte aligned and inside 4096 bytes.
        unsafe {
            bar.write64_unchecked(0x800, v);
            bar.write64_unchecked(4096 - 8, Be64::new(!0x0102_0304_0506_0708));
        }
        assert_eq!(bar.read32(0x800).get(), 0x0102_0304);
        assert_eq!(bar.read32(0x804).get(), 0x0506_0708);
        assert_eq!(bar.read32(4096 - 8).get(), !0x0102_0304);
        assert_eq!(bar.read32(4096 - 4).get(), !0x0506_0708);
        // The checked paths around it: a Register64 checks once.
        let r = bar.register64(0x900).unwrap();
        r.write(v);
        assert_eq!(bar.read32(0x904).get(), 0x0506_0708);
        assert!(bar.register64(4096).is_err());
        assert!(bar.register64(0x804).is_err());
        // Clones share the mapping.
        let b2 = bar.clone();
        drop(bar);
        assert_eq!(b2.read32(0x800).get(), 0x0102_0304);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run a sysfs tree in a temporary directory")]
    fn opening_checks_come_before_any_device_access() {
        // A fake sysfs: each readiness failure is reported before VFIO is
        // touched (this machine has no VFIO device).
        let dir = sysfs::fake::temp_dir("open");
        let fake = sysfs::fake::FakeSysfs::new(&dir);
        fake.add_device("0000:02:00.0", 0x15b3, 0x1013, Some("mlx5_core"), Some(3));
        fake.add_device("0000:03:00.0", 0x15b3, 0x1017, Some("vfio-pci"), Some(4));
        let opts = || {
            let mut o = VfioOptions::default().sysfs_root(&fake.root);
            o.dev_vfio = fake.root.join("dev-vfio");
            o
        };
        let e = VfioPlatform::open("0000:02:00.0", opts()).unwrap_err();
        assert!(matches!(e, Error::NotBoundToVfio { .. }), "{e}");
        let e = VfioPlatform::open("0000:09:00.0", opts()).unwrap_err();
        assert!(matches!(e, Error::DeviceNotFound { .. }), "{e}");
        // Bound and viable, but no device node.
        let e = VfioPlatform::open("03:00.0", opts()).unwrap_err();
        match &e {
            Error::VfioDevNode { path, hint, .. } => {
                assert!(path.ends_with("dev-vfio/vfio"), "{path}");
                assert!(hint.contains("modprobe vfio-pci"), "{hint}");
            }
            other => panic!("expected VfioDevNode, got {other:?}"),
        }
        let e = kernel_group_viable(&fake.root.join("dev-vfio"), 4).unwrap_err();
        assert!(matches!(e, Error::VfioDevNode { .. }), "{e}");
    }
}
