//! # hca-vfio-emu: emulated ConnectX functions behind the real VFIO API
//!
//! A library to preload (`LD_PRELOAD=libhca_vfio_emu.so`) into an
//! unmodified program — rdma-core's `mlx5_vfio` provider under Python,
//! this project's `platform::vfio` backend in the `hca` tool — so that the
//! program finds, at the PCI addresses named in `HCA_EMU_VFIO`, ConnectX
//! functions bound to vfio-pci, and drives them through the VFIO API;
//! behind them run [`hca_emu`] devices inside the process (one
//! [`hca_emu::EmuHca`] per function, real clock, device thread, created on
//! first use). Everything else the process does goes to libc untouched.
//!
//! ```text
//! LD_PRELOAD=target/debug/libhca_vfio_emu.so \
//! HCA_EMU_VFIO='0000:00:10.0=cx4' target/debug/hca -d 0000:00:10.0 info
//! ```
//!
//! See [`config`] for the variable (`<bdf>=<model>[,<opt>...][;...]`) and
//! `HCA_EMU_VFIO_REPORT=<file>` (the command log, IOMMU faults, internal
//! errors and leaks of each function, appended when its device fd closes
//! and at exit). A malformed variable is reported on stderr and presents
//! nothing. `HCA_EMU_VFIO_TRACE=1` prints on stderr every VFIO ioctl, every
//! store the bridge delivers, every MSI-X interrupt and, each second, each
//! function's state.
//!
//! ## What the program sees
//!
//! - **sysfs** ([`sysfs`]): a fake tree in a private temporary directory
//!   (vendor, device, subsystem IDs, class, the `iommu_group` and `driver`
//!   links, the group's `devices` directory, the vfio-pci driver
//!   directory); paths naming them are rewritten in `open`, `stat`,
//!   `readlink`, `opendir`... The PCI device list shows the real
//!   functions too.
//! - **`/dev/vfio/vfio` and `/dev/vfio/<group>`**: opens return real
//!   descriptors (of `/dev/null`) recorded in a table; `close` releases
//!   the object. A group can be open once at a time (`EBUSY`), like
//!   Linux's.
//! - **ioctls** ([`vfio`]): container (API version, extensions TYPE1 and
//!   TYPE1v2, SET_IOMMU, IOMMU_GET_INFO with the page sizes and the IOVA
//!   range and DMA-available capabilities as the kernel formats them,
//!   MAP_DMA, UNMAP_DMA), group (status, set and unset container,
//!   GET_DEVICE_FD by name), device (info, region info: BAR0 readable,
//!   writable, mappable; config space; the other regions of size 0; IRQ
//!   info, SET_IRQS for MSI-X eventfds with partial updates, triggers and
//!   disable; RESET). Unknown requests fail with `ENOTTY`, bad arguments
//!   with the kernel's errno. Opening a device and closing its last fd
//!   reset the function, as vfio-pci does.
//! - **Config space**: `pread`/`pwrite` at the config region offset go to
//!   the emulator's configuration space.
//! - **DMA**: `VFIO_IOMMU_MAP_DMA` maps the process's own memory into the
//!   emulator's IOMMU at the IOVA given ([`hca_emu::EmuHca::map_dma`]);
//!   device accesses outside every mapping are IOMMU faults as always.
//!   An `munmap` of memory still DMA-mapped takes it out of the device
//!   first and is reported (the kernel would keep it pinned).
//! - **MSI-X**: each interrupt of the emulator (an EQE on an armed EQ) adds
//!   1 to the eventfd of its vector.
//! - **BAR0**: `mmap` of the device fd maps a shared memory file that a
//!   bridge thread watches ([`bridge`]: doorbells, the command doorbell
//!   vector, register publishing, doorbells lost to coalescing, latency). `pread`/`pwrite` of BAR0
//!   reach the emulator's registers directly.
//!
//! ## Limits
//!
//! - `dup`, `fcntl(F_DUPFD)` and `fork` of VFIO descriptors are not
//!   followed (the duplicate is a plain `/dev/null` descriptor).
//! - Relative paths and `*at` calls relative to a directory descriptor
//!   are not rewritten (only absolute paths are).
//! - A real VFIO group cannot join an emulated container.
//!
//! ## Unsafe code
//!
//! The libc entry points, the real functions they forward to and the raw
//! system calls are in [`sys`]; the atomics over the shared BAR memory in
//! [`shm`]. Everything else is safe code.

pub use hca_shm_bridge::bridge;
pub mod config;
mod report;
pub use hca_shm_bridge::shm;
pub mod sys;
pub mod sysfs;
pub mod vfio;
