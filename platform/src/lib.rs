//! # platform: memory the device can see
//!
//! Everything of the driver that touches memory a ConnectX can read or write
//! lives here, and only here (with the data path in `verbs-core`) is `unsafe`
//! allowed:
//!
//! - [`Platform`]: DMA memory, BAR mapping, PCI configuration space, time,
//!   function reset. Implemented by the [`bare_metal`] backend (no_std, no
//!   heap: the caller hands in a physically contiguous region and the BAR's
//!   virtual address), the `vfio` backend (Linux userspace on a device bound to
//!   `vfio-pci`, feature `vfio`), and by `hca-emu`, the emulated ConnectX.
//! - [`Either`]: one of two platforms chosen at run time (a tool that
//!   opens the emulated ConnectX or a VFIO function holds one concrete
//!   `Hca<Either<..>>`), forwarding every call at the cost of one branch.
//! - [`Mmio`]: aligned, bounds-checked, never-torn 32-bit register reads and
//!   writes, the 64-bit doorbell store and the ordered BlueFlame copy.
//! - [`DmaRegion`]: a block of DMA memory with its host address and IOVA,
//!   accessed only by volatile copies: no `&`/`&mut` into memory the device
//!   can write is ever created.
//! - `host` (feature `std`): heap memory lent out as DMA memory, for the
//!   emulated device, tests and benchmarks.
//! - [`barrier`]: the memory barriers of rdma-core's `util/udma_barrier.h`,
//!   with the right instruction for x86_64 and aarch64.
//!
//! Memory shared with a device is only ever copied in and out, never
//! borrowed:
//!
//! ```
//! # #[cfg(feature = "std")] {
//! use platform::host::HostBlock;
//!
//! // Heap memory standing in for DMA memory (what hca-emu and the benches use).
//! let block = HostBlock::new(4096, 4096)?;
//! let region = block.lend(0x10_0000, 0)?; // the driver's view, at IOVA 0x100000
//! region.write_be32(0x10, 0xcafe_f00d); // one aligned 32-bit store, device byte order
//! assert_eq!(region.iova_at(0x10), 0x10_0010);
//! assert_eq!(block.read32(0x10)?.get(), 0xcafe_f00d); // the device's view
//! block.reclaim(region).expect("the region came from this block");
//! # }
//! # Ok::<(), platform::Error>(())
//! ```
#![no_std]

#[cfg(feature = "std")]
extern crate std;

pub mod bare_metal;
pub mod barrier;
mod dma;
mod either;
mod error;
#[cfg(feature = "std")]
pub mod host;
mod mmio;
#[cfg(all(feature = "std", target_os = "linux"))]
pub mod notify;
mod pages;
pub mod ring;
pub mod slot;
pub mod user;
#[cfg(all(feature = "vfio", target_os = "linux"))]
pub mod vfio;

pub use dma::DmaRegion;
pub use either::Either;
pub use error::Error;
pub use hca_endian::{Be16, Be32, Be64};
pub use mmio::{BlueFlame, Mmio, MmioWindow, Register64};
pub use user::{UserMapping, UserMemory};

use core::time::Duration;

/// The page size of DMA allocations and of firmware pages.
pub const PAGE_SIZE: usize = 4096;

/// How much of a backend's DMA memory is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DmaStats {
    /// Bytes the backend manages (for the vfio backend: bytes currently
    /// pinned and mapped for the device).
    pub total_bytes: usize,
    /// Bytes handed out and not yet freed.
    pub allocated_bytes: usize,
    /// The largest block that can still be allocated without getting more
    /// memory (0 when the backend would get more on demand).
    pub largest_free_block: usize,
}

/// What a driver needs from the machine it runs on.
///
/// All methods take `&self`: a platform is shared by the control plane and
/// the data path. Implementations decide how they synchronise.
pub trait Platform {
    /// The register window type of a mapped BAR.
    type Mmio: Mmio;

    /// Allocates `len` bytes of zeroed DMA memory, contiguous in IOVA space,
    /// whose IOVA and host address are both aligned to `align` (a power of
    /// two, at least 8). `len` is rounded up to the backend's granule.
    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaRegion, Error>;

    /// Returns a region to the backend, which unmaps it from the device.
    ///
    /// The caller must make sure the device no longer accesses the region
    /// (the owning object was destroyed, or the function was disabled or
    /// reset) before freeing it.
    fn free_dma(&self, region: DmaRegion);

    /// Maps BAR `bar` (0 for a ConnectX: the initialization segment and UAR
    /// pages).
    fn map_bar(&self, bar: u8) -> Result<Self::Mmio, Error>;

    /// Whether the mapping of BAR `bar` that [`map_bar`](Self::map_bar)
    /// returns is write-combining, so that a BlueFlame copy (a WQE stored
    /// 64 bits at a time into a UAR's BlueFlame register, between
    /// [`mmio_wc_start`](crate::barrier::mmio_wc_start) and
    /// [`mmio_flush_writes`](crate::barrier::mmio_flush_writes)) can reach
    /// the device as one burst.
    ///
    /// On an uncached mapping a driver rings doorbells only, as rdma-core's
    /// mlx5 provider does: it maps UAR pages non-cached
    /// (`MLX5_UAR_TYPE_NC`, mlx5.c `mlx5_set_context`) only with BlueFlame
    /// shut off, and `post_send` (qp.c) copies a WQE by BlueFlame only
    /// when it is not. The default is `false`, which is always correct
    /// (only slower).
    fn bar_write_combining(&self, bar: u8) -> bool {
        let _ = bar;
        false
    }

    /// Reads `buf.len()` bytes of PCI configuration space at `offset`
    /// (little-endian, as the PCI specification lays it out).
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error>;

    /// Writes PCI configuration space.
    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error>;

    /// Monotonic time since an arbitrary origin.
    fn now(&self) -> Duration;

    /// Waits at least `d`.
    fn delay(&self, d: Duration);

    /// Called in busy-poll loops between two reads of device memory. The
    /// default is a CPU spin hint; an emulated device may use it to make
    /// progress.
    fn relax(&self) {
        core::hint::spin_loop();
    }

    /// Resets the PCI function (FLR or the backend's equivalent).
    ///
    /// Interrupts enabled with [`enable_msix`](Self::enable_msix) are
    /// disabled by a reset: enable them again afterwards.
    fn reset_function(&self) -> Result<(), Error>;

    /// MSI-X vectors the function offers through this platform; 0 when the
    /// platform delivers no interrupts (the default: a driver polls).
    fn msix_vectors(&self) -> u16 {
        0
    }

    /// Enables MSI-X vectors `0..n` (an EQ whose `intr` is one of them
    /// then interrupts through it), replacing any previous enable.
    /// Interrupt counts start at 0.
    ///
    /// # Errors
    ///
    /// [`Error::NotSupported`] when the platform has no interrupts (the
    /// default), [`Error::TooManyVectors`] when `n` is 0 or above
    /// [`msix_vectors`](Self::msix_vectors), or what the backend's system
    /// calls return.
    fn enable_msix(&self, n: u16) -> Result<(), Error> {
        let _ = n;
        Err(Error::NotSupported("MSI-X interrupts"))
    }

    /// Disables the MSI-X vectors enabled by
    /// [`enable_msix`](Self::enable_msix); a platform without interrupts,
    /// or with none enabled, does nothing.
    fn disable_msix(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Waits for an interrupt of MSI-X vector `vector`.
    ///
    /// Each enabled vector counts its interrupts from 0 (at
    /// [`enable_msix`](Self::enable_msix)); the count never goes back.
    /// `seen` is the count the caller observed before it last looked at the
    /// device (returned by an earlier call, or by
    /// [`interrupt_count`](Self::interrupt_count)). The wait returns the
    /// current count as soon as it is above `seen`, and at the latest once
    /// `timeout` has passed on the platform clock (then the count may equal
    /// `seen`). Interrupts are edges: one that fired after the caller read
    /// `seen` and before the wait started ends the wait at once, so the
    /// pattern "read the count, look at the EQ, re-arm it, wait with that
    /// count" loses nothing. Several threads may wait on one vector; each
    /// wakes. A wait may also return early without an interrupt (a
    /// spurious wakeup): callers look at the device again either way.
    ///
    /// # Errors
    ///
    /// [`Error::NotSupported`] without interrupts (the default),
    /// [`Error::VectorNotEnabled`] for a vector not enabled.
    fn wait_interrupt(&self, vector: u16, seen: u64, timeout: Duration) -> Result<u64, Error> {
        let _ = (vector, seen, timeout);
        Err(Error::NotSupported("MSI-X interrupts"))
    }

    /// The interrupt count of `vector` now, without waiting (see
    /// [`wait_interrupt`](Self::wait_interrupt)).
    ///
    /// # Errors
    ///
    /// As [`wait_interrupt`](Self::wait_interrupt).
    fn interrupt_count(&self, vector: u16) -> Result<u64, Error> {
        self.wait_interrupt(vector, u64::MAX, Duration::ZERO)
    }

    /// Maps user memory (the range of `mem`) for the device's DMA, in
    /// place (no copy): the whole 4 KiB pages covering the range,
    /// contiguous in bus address space. What a memory region over user
    /// memory (`ibv_reg_mr`) is built on. The caller's promise that the
    /// memory stays valid until [`unmap_user`](Self::unmap_user) is
    /// [`UserMemory`]'s (made by an `unsafe` constructor).
    ///
    /// - VFIO: `VFIO_IOMMU_MAP_DMA` of the pages at an IOVA of the
    ///   platform's IOVA space; the kernel pins them until the unmap.
    /// - The emulated HCA: the pages enter its simulated IOMMU, so device
    ///   accesses reach those very bytes; after the unmap they fault.
    /// - Bare metal: the bus address of the user-memory window the
    ///   platform was given, when the range lies inside it.
    ///
    /// # Errors
    ///
    /// [`Error::NotSupported`] (the default),
    /// [`Error::UserMemoryFault`] when the backend cannot reach or pin
    /// the pages, [`Error::UserMemoryUnreachable`] when the device cannot
    /// reach them, and what the backend's system calls return.
    fn map_user(&self, mem: UserMemory) -> Result<UserMapping, Error> {
        let _ = mem;
        Err(Error::NotSupported("mapping user memory for DMA"))
    }

    /// Unmaps a mapping of [`map_user`](Self::map_user): from then on the
    /// device cannot reach the pages (its accesses fault in the IOMMU),
    /// and the caller may free them. The device must no longer be meant
    /// to access them (the memory key over them is destroyed).
    ///
    /// # Errors
    ///
    /// [`Error::ForeignUserMapping`] for a mapping this platform did not
    /// make (or unmapped already; always, by default), or what the backend's system calls return; the pages then stay
    /// mapped (and pinned), which is safe for the memory but leaks it.
    fn unmap_user(&self, mapping: UserMapping) -> Result<(), Error> {
        Err(Error::ForeignUserMapping {
            host: mapping.host_addr(),
            len: mapping.len(),
        })
    }

    /// A Linux file descriptor that becomes readable when MSI-X vector
    /// `vector` interrupts (an eventfd the platform signals), for a
    /// program to `poll(2)` on; the platform empties it whenever it counts
    /// the vector's interrupts ([`interrupt_count`](Self::interrupt_count),
    /// [`wait_interrupt`](Self::wait_interrupt)), so readability is a hint
    /// to look at the device, never an event by itself. `None` (the
    /// default) when the platform has none for the vector (no interrupts,
    /// the vector not enabled, not Linux). The descriptor stays owned by
    /// the platform and valid until the vectors are disabled.
    fn interrupt_fd(&self, vector: u16) -> Option<i32> {
        let _ = vector;
        None
    }

    /// A short description of the device for logs and errors
    /// (`vfio 0000:02:00.0`, `emulated ConnectX-4`).
    fn describe(&self) -> &str;
}

/// PCI configuration space offsets and bits used by the driver.
///
/// The table of mlx5 device IDs and product names is the driver's
/// business: `hca_driver::pci`.
pub mod pci {
    /// Vendor ID (16 bits).
    pub const VENDOR_ID: u16 = 0x00;
    /// Device ID (16 bits).
    pub const DEVICE_ID: u16 = 0x02;
    /// Command register (16 bits).
    pub const COMMAND: u16 = 0x04;
    /// Command register: memory space enable.
    pub const COMMAND_MEMORY: u16 = 1 << 1;
    /// Command register: bus master enable.
    pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
    /// Revision ID (8 bits).
    pub const REVISION_ID: u16 = 0x08;
    /// Subsystem vendor ID (16 bits).
    pub const SUBSYSTEM_VENDOR_ID: u16 = 0x2c;
    /// Subsystem ID (16 bits).
    pub const SUBSYSTEM_ID: u16 = 0x2e;
}
