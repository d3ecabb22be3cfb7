//! The crate's error type.

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
}
