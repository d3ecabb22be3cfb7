//! Raw access to queue memory, the one place of the crate that turns
//! offsets into pointers.
//!
//! Every queue checks, once at construction, that its layout fits the
//! [`DmaRegion`] it owns and that the region is 64-byte aligned. Afterwards
//! offsets are derived from ring indices masked with `count - 1`, so every
//! access below stays inside the region; `debug_assert!`s restate that.
//! Device-visible memory is only touched through volatile loads and stores;
//! host-only bookkeeping (wr_id tables, counters) through atomics. No `&` or
//! `&mut` to a plain type in queue memory is ever created.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64};

use platform::DmaRegion;

use crate::Error;

/// A pointer into a queue's DMA region, with the region's length for the
/// debug-mode bounds assertions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ptr {
    base: NonNull<u8>,
    #[cfg(debug_assertions)]
    len: usize,
}

// SAFETY: `Ptr` is an address into a DMA region whose owner outlives every
// `Ptr` copy (queues own the region; completion handles are counted and keep
// the region from being handed back). All accesses are volatile or atomic.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

impl Ptr {
    /// A pointer to `offset .. offset + len` of `region`, after checking that
    /// the range is inside the region and `offset` is 8-byte aligned
    /// (the region base is checked to be 64-byte aligned by the queues).
    pub(crate) fn new(region: &DmaRegion, offset: usize, len: usize) -> Result<Self, Error> {
        let end = offset.checked_add(len).ok_or(Error::RegionTooSmall {
            need: usize::MAX,
            got: region.len(),
        })?;
        if end > region.len() {
            return Err(Error::RegionTooSmall {
                need: end,
                got: region.len(),
            });
        }
        if offset % 8 != 0 {
            return Err(Error::Misaligned {
                what: "queue memory offset",
                align: 8,
            });
        }
        // SAFETY: `offset + len <= region.len()` (checked), so the result is
        // inside (or one past the end of) the region's allocation.
        let base = unsafe { NonNull::new_unchecked(region.host_ptr().as_ptr().add(offset)) };
        Ok(Self {
            base,
            #[cfg(debug_assertions)]
            len,
        })
    }

    /// A pointer to bookkeeping in static memory (atomics only; never
    /// device memory).
    pub(crate) fn from_static(mem: &'static [AtomicU64]) -> Self {
        Self {
            base: NonNull::from(mem).cast(),
            #[cfg(debug_assertions)]
            len: 8 * mem.len(),
        }
    }

    /// The pointer `off` bytes on, to `len` bytes (inside this one: the
    /// caller derives `off` from a masked ring index; restated by a
    /// debug assertion).
    #[inline(always)]
    pub(crate) fn sub(self, off: usize, len: usize) -> Self {
        let base = self.at(off, 1);
        #[cfg(debug_assertions)]
        debug_assert!(off + len <= self.len);
        let _ = len;
        Self {
            // SAFETY: `at` gives a pointer inside the region, never null.
            base: unsafe { NonNull::new_unchecked(base) },
            #[cfg(debug_assertions)]
            len,
        }
    }

    #[inline(always)]
    fn at(self, off: usize, width: usize) -> *mut u8 {
        #[cfg(debug_assertions)]
        debug_assert!(
            off + width <= self.len && off % width == 0,
            "queue memory access of {width} at {off:#x} outside {:#x}",
            self.len
        );
        let _ = width;
        // SAFETY: callers derive `off` from masked ring indices inside the
        // range checked by `Ptr::new` (restated by the assertion above).
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Writes a raw (already device-ordered) u64.
    #[inline(always)]
    pub(crate) fn w64(self, off: usize, raw: u64) {
        let p = self.at(off, 8).cast::<u64>();
        // SAFETY: inside the region and 8-byte aligned (see `at`); the region
        // is valid for volatile writes (DmaRegion contract).
        unsafe { p.write_volatile(raw) }
    }

    /// Writes a raw u32.
    #[inline(always)]
    pub(crate) fn w32(self, off: usize, raw: u32) {
        let p = self.at(off, 4).cast::<u32>();
        // SAFETY: as in `w64`.
        unsafe { p.write_volatile(raw) }
    }

    /// Writes a raw u16.
    #[inline(always)]
    pub(crate) fn w16(self, off: usize, raw: u16) {
        let p = self.at(off, 2).cast::<u16>();
        // SAFETY: as in `w64`.
        unsafe { p.write_volatile(raw) }
    }

    /// Writes one byte.
    #[inline(always)]
    pub(crate) fn w8(self, off: usize, v: u8) {
        let p = self.at(off, 1);
        // SAFETY: as in `w64`.
        unsafe { p.write_volatile(v) }
    }

    /// Reads a raw u64.
    #[inline(always)]
    pub(crate) fn r64(self, off: usize) -> u64 {
        let p = self.at(off, 8).cast::<u64>();
        // SAFETY: as in `w64`, for reads.
        unsafe { p.read_volatile() }
    }

    /// Reads a raw u32.
    #[inline(always)]
    pub(crate) fn r32(self, off: usize) -> u32 {
        let p = self.at(off, 4).cast::<u32>();
        // SAFETY: as in `w64`, for reads.
        unsafe { p.read_volatile() }
    }

    /// Reads a raw u16.
    #[inline(always)]
    pub(crate) fn r16(self, off: usize) -> u16 {
        let p = self.at(off, 2).cast::<u16>();
        // SAFETY: as in `w64`, for reads.
        unsafe { p.read_volatile() }
    }

    /// Reads one byte.
    #[inline(always)]
    pub(crate) fn r8(self, off: usize) -> u8 {
        let p = self.at(off, 1);
        // SAFETY: as in `w64`, for reads.
        unsafe { p.read_volatile() }
    }

    /// The host-only atomic u64 at `off`.
    #[inline(always)]
    pub(crate) fn a64<'a>(self, off: usize) -> &'a AtomicU64 {
        let p = self.at(off, 8).cast::<u64>();
        // SAFETY: inside the region, 8-byte aligned; the location is only ever
        // accessed atomically (host-only bookkeeping the device is never told
        // about), and the region outlives the reference (it lives as long as
        // the queue or a counted completion handle, see module docs).
        unsafe { AtomicU64::from_ptr(p) }
    }

    /// The host-only atomic u32 at `off`.
    #[inline(always)]
    pub(crate) fn a32<'a>(self, off: usize) -> &'a AtomicU32 {
        let p = self.at(off, 4).cast::<u32>();
        // SAFETY: as in `a64`.
        unsafe { AtomicU32::from_ptr(p) }
    }

    /// The host-only atomic u16 at `off`.
    #[inline(always)]
    pub(crate) fn a16<'a>(self, off: usize) -> &'a AtomicU16 {
        let p = self.at(off, 2).cast::<u16>();
        // SAFETY: as in `a64`.
        unsafe { AtomicU16::from_ptr(p) }
    }

    /// The host-only atomic u8 at `off`.
    #[inline(always)]
    pub(crate) fn a8<'a>(self, off: usize) -> &'a AtomicU8 {
        let p = self.at(off, 1);
        // SAFETY: as in `a64`.
        unsafe { AtomicU8::from_ptr(p) }
    }
}

/// Rounds `x` up to a multiple of `a` (a power of two).
#[inline(always)]
pub(crate) const fn align_up(x: usize, a: usize) -> usize {
    (x + a - 1) & !(a - 1)
}

/// Checks the alignment every queue region must have.
pub(crate) fn check_region(region: &DmaRegion, need: usize) -> Result<(), Error> {
    if region.host_ptr().as_ptr() as usize % 64 != 0 {
        return Err(Error::Misaligned {
            what: "queue DMA region (host address)",
            align: 64,
        });
    }
    if region.len() < need {
        return Err(Error::RegionTooSmall {
            need,
            got: region.len(),
        });
    }
    Ok(())
}
