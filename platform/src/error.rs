//! The crate's error type.

#[cfg(feature = "vfio")]
use std::{string::String, vec::Vec};

/// Everything a platform backend can fail at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No DMA memory left for a request.
    #[error("out of DMA memory: {requested} bytes requested, {available} available")]
    OutOfDmaMemory {
        /// Bytes requested.
        requested: usize,
        /// Largest block still available.
        available: usize,
    },

    /// A caller passed an argument the backend cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),

    /// A register access outside the window or not aligned to its width.
    #[error(
        "MMIO access of {width} bytes at {offset:#x} is misaligned or outside the {len:#x}-byte window"
    )]
    MmioOutOfRange {
        /// Offset of the access.
        offset: usize,
        /// Width in bytes.
        width: usize,
        /// Window size.
        len: usize,
    },

    /// The device has no such BAR, or it is not a memory BAR.
    #[error("BAR {0} does not exist or is not a memory BAR")]
    NoSuchBar(u8),

    /// The backend cannot do this.
    #[error("not supported by this platform: {0}")]
    NotSupported(&'static str),

    /// The device is gone (surprise removal, reads of all-ones).
    #[error("device is gone")]
    DeviceGone,

    /// `free_dma` was given a region this platform did not allocate.
    #[error("DMA region at {iova:#x} ({len:#x} bytes) was not allocated by this platform")]
    ForeignDmaRegion {
        /// Bus address of the region.
        iova: u64,
        /// Its length.
        len: usize,
    },

    /// `free_dma` was given a region of this platform that is not allocated
    /// as such: freed twice, or not matching the allocation at its address.
    #[error(
        "DMA region at {iova:#x} ({len:#x} bytes) is not an allocation of this platform (freed twice?)"
    )]
    DmaRegionNotAllocated {
        /// Bus address of the region.
        iova: u64,
        /// Its length.
        len: usize,
    },

    /// Free memory exists, but no block of it meets the request's alignment
    /// and is contiguous in bus address space.
    #[error(
        "no free DMA block of {requested} bytes is aligned to {align} bytes and contiguous in bus address space"
    )]
    NoContiguousDmaBlock {
        /// Bytes requested.
        requested: usize,
        /// Alignment requested.
        align: usize,
    },

    /// The caller's address translation has no bus address for a host
    /// address of the DMA memory it handed in.
    #[error("address translation gives no bus address for host address {host:#x}")]
    AddressTranslation {
        /// The host (virtual) address.
        host: usize,
    },

    /// More MSI-X vectors asked for than the function offers (or none).
    #[error("cannot enable {requested} MSI-X vectors: the function offers {available}")]
    TooManyVectors {
        /// Vectors asked for.
        requested: u16,
        /// Vectors the function offers.
        available: u16,
    },

    /// An interrupt wait on an MSI-X vector that is not enabled.
    #[error("MSI-X vector {vector} is not enabled ({enabled} vectors are)")]
    VectorNotEnabled {
        /// The vector.
        vector: u16,
        /// How many vectors are enabled.
        enabled: u16,
    },

    /// User memory that cannot be mapped for DMA: some page of the range
    /// is not mapped in the process, or not writable (`EFAULT` of
    /// `VFIO_IOMMU_MAP_DMA`).
    #[error("user memory of {len:#x} bytes at {host:#x} cannot be mapped for DMA: {reason}")]
    UserMemoryFault {
        /// First host address of the page span.
        host: usize,
        /// Its length.
        len: usize,
        /// Why.
        reason: &'static str,
    },

    /// User memory outside what the device can reach (bare metal: not in
    /// the user-memory window the platform was given).
    #[error(
        "user memory of {len:#x} bytes at {host:#x} is outside the memory the device can reach"
    )]
    UserMemoryUnreachable {
        /// First host address.
        host: usize,
        /// Length.
        len: usize,
    },

    /// `unmap_user` of a mapping this platform did not make, or unmapped
    /// already.
    #[error("no user mapping of {len:#x} bytes at host address {host:#x} on this platform")]
    ForeignUserMapping {
        /// Host address of the mapping.
        host: usize,
        /// Its length.
        len: usize,
    },

    /// A system call on a notification descriptor (eventfd, epoll) failed.
    #[error("{what} failed: errno {errno}")]
    Notify {
        /// The call.
        what: &'static str,
        /// Its errno.
        errno: i32,
    },

    /// A PCI address that is not `[dddd:]bb:dd.f`.
    #[cfg(feature = "vfio")]
    #[error("`{0}` is not a PCI address: expected dddd:bb:dd.f, e.g. 0000:02:00.0")]
    InvalidBdf(String),

    /// No such PCI function in sysfs.
    #[cfg(feature = "vfio")]
    #[error("PCI device {bdf} not found under {sysfs}: list devices with `hca list` or `lspci -D`")]
    DeviceNotFound {
        /// The PCI address asked for.
        bdf: String,
        /// The sysfs directory searched.
        sysfs: String,
    },

    /// The function is not bound to vfio-pci.
    #[cfg(feature = "vfio")]
    #[error(
        "{bdf} is {}, not vfio-pci: run `hca bind {bdf}`",
        bound_to(driver.as_deref())
    )]
    NotBoundToVfio {
        /// The PCI address.
        bdf: String,
        /// The driver it is bound to, if any.
        driver: Option<String>,
    },

    /// The function has no IOMMU group: the IOMMU is off.
    #[cfg(feature = "vfio")]
    #[error(
        "{bdf} has no IOMMU group: the IOMMU is off; enable VT-d/AMD-Vi in the firmware setup and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD)"
    )]
    NoIommuGroup {
        /// The PCI address.
        bdf: String,
    },

    /// Another device in the function's IOMMU group is bound to a driver
    /// that owns DMA, so VFIO refuses the group.
    #[cfg(feature = "vfio")]
    #[error(
        "IOMMU group {group} of {bdf} is not viable: {}; every device of the group must be bound to vfio-pci or to no driver (`hca bind <bdf>` for each)",
        blockers_list(blockers)
    )]
    GroupNotViable {
        /// The PCI address.
        bdf: String,
        /// The IOMMU group number.
        group: u32,
        /// The devices in the way and their drivers (empty if only the
        /// kernel's group status said so).
        blockers: Vec<(String, String)>,
    },

    /// A VFIO device node cannot be opened.
    #[cfg(feature = "vfio")]
    #[error("cannot open {path}: {source}: {hint}")]
    VfioDevNode {
        /// The path.
        path: String,
        /// What the kernel said.
        source: std::io::Error,
        /// What to do about it.
        hint: &'static str,
    },

    /// RLIMIT_MEMLOCK is below what the caller plans to pin for DMA.
    #[cfg(feature = "vfio")]
    #[error(
        "RLIMIT_MEMLOCK is {} but {} must be locked for DMA memory: raise it with `ulimit -l unlimited` (or `ulimit -l {}` KiB) in the shell that starts the program, with `<user> hard memlock unlimited` and `<user> soft memlock unlimited` in /etc/security/limits.conf, or LimitMEMLOCK=infinity in its systemd unit; or grant CAP_IPC_LOCK",
        bytes(*limit), bytes(*needed), needed.div_ceil(1024)
    )]
    MemlockTooLow {
        /// The soft limit in bytes.
        limit: u64,
        /// Bytes that would be locked (already locked plus planned).
        needed: u64,
    },

    /// The vfio-pci driver is not loaded.
    #[cfg(feature = "vfio")]
    #[error("the vfio-pci driver is not loaded: run `modprobe vfio-pci`")]
    VfioPciNotLoaded,

    /// Binding to a driver did not take.
    #[cfg(feature = "vfio")]
    #[error("{bdf} did not bind to {wanted}: it is {} after the probe; see the kernel log (dmesg)", bound_to(driver.as_deref()))]
    BindFailed {
        /// The PCI address.
        bdf: String,
        /// The driver asked for.
        wanted: String,
        /// The driver it ended up with.
        driver: Option<String>,
    },

    /// Reading or writing a sysfs file failed.
    #[cfg(feature = "vfio")]
    #[error("{path}: {source} (sysfs writes need root)")]
    Sysfs {
        /// The file.
        path: String,
        /// What the kernel said.
        source: std::io::Error,
    },

    /// A VFIO operation of the vfio-ioctls crate failed.
    #[cfg(feature = "vfio")]
    #[error("VFIO {what}: {source}")]
    Vfio {
        /// What was being done.
        what: &'static str,
        /// The vfio-ioctls error.
        source: vfio_ioctls::VfioError,
    },

    /// A system call failed.
    #[cfg(feature = "vfio")]
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// What the kernel said.
        source: std::io::Error,
    },

    /// No IOVA range is left for a DMA mapping.
    #[cfg(feature = "vfio")]
    #[error(
        "no free IOVA range of {requested:#x} bytes below the DMA mask {dma_mask:#x} inside the ranges the IOMMU allows"
    )]
    IovaExhausted {
        /// Bytes requested.
        requested: u64,
        /// Highest address the device can reach.
        dma_mask: u64,
    },
}

#[cfg(feature = "vfio")]
fn bound_to(driver: Option<&str>) -> String {
    match driver {
        Some(d) => std::format!("bound to {d}"),
        None => String::from("not bound to any driver"),
    }
}

#[cfg(feature = "vfio")]
fn blockers_list(blockers: &[(String, String)]) -> String {
    if blockers.is_empty() {
        return String::from("the kernel reports the group as not viable");
    }
    let parts: Vec<String> = blockers
        .iter()
        .map(|(bdf, driver)| std::format!("{bdf} is bound to {driver}"))
        .collect();
    parts.join(", ")
}

/// `n` bytes in the largest binary unit that divides it.
#[cfg(feature = "vfio")]
pub(crate) fn bytes(n: u64) -> String {
    if n == u64::MAX {
        return String::from("unlimited");
    }
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return std::format!("{} {unit}", n >> shift);
        }
    }
    std::format!("{n} bytes")
}
