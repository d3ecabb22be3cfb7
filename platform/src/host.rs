//! Heap memory standing in for DMA memory (feature `std`): what an emulated
//! device, a test or a benchmark lends to a driver as a [`DmaRegion`].
//!
//! A [`HostBlock`] owns a zeroed, aligned heap allocation and can access it
//! (volatile copies, like [`DmaRegion`]) from the "device" side while the
//! driver holds the [`DmaRegion`] it lent out. The allocation is freed only
//! when the block is dropped *and* the region was handed back with
//! [`HostBlock::reclaim`]; a block dropped while its region is still out
//! leaks its memory instead, so a region can never dangle.

extern crate alloc;

use alloc::alloc::{Layout, alloc_zeroed, dealloc};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::{Be32, Be64, DmaRegion, Error};

/// A zeroed, aligned heap allocation that can be lent out as a [`DmaRegion`].
#[derive(Debug)]
pub struct HostBlock {
    ptr: NonNull<u8>,
    layout: Layout,
    lent: AtomicBool,
}

// SAFETY: the block owns its allocation; all access through `&self` is by
// volatile copies, like device memory, so it can be shared between the
// driver's threads and an emulated device's thread.
unsafe impl Send for HostBlock {}
// SAFETY: as above.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two).
    pub fn new(len: usize, align: usize) -> Result<Self, Error> {
        if len == 0 {
            return Err(Error::InvalidArgument("zero-length DMA block"));
        }
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(
                "DMA alignment must be a power of two",
            ));
        }
        let align = align.max(8);
        let layout = Layout::from_size_align(len, align)
            .map_err(|_| Error::InvalidArgument("DMA alignment must be a power of two"))?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::OutOfDmaMemory {
            requested: len,
            available: 0,
        })?;
        Ok(Self {
            ptr,
            layout,
            lent: AtomicBool::new(false),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Whether the block is empty (never: zero-length blocks are refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Host address of the first byte.
    pub fn host_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Pointer to the first byte, with the allocation's provenance (for an
    /// [`MmioWindow`](crate::MmioWindow) over the block; unlike casting
    /// [`host_addr`](Self::host_addr) back to a pointer, this is clean under
    /// strict provenance).
    pub fn host_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Lends the whole block out as a [`DmaRegion`] at bus address `iova`.
    ///
    /// Fails if the block is already lent out.
    pub fn lend(&self, iova: u64, cookie: usize) -> Result<DmaRegion, Error> {
        if self.lent.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument("DMA block is already lent out"));
        }
        // SAFETY: the allocation is valid for `len` bytes and, now that `lent`
        // is set, is not freed until the region comes back through
        // `reclaim` (Drop leaks it otherwise). Nobody holds a reference into
        // it: the block itself only performs volatile copies.
        Ok(unsafe { DmaRegion::from_raw_parts(self.ptr, iova, self.len(), cookie) })
    }

    /// Takes back the region [`lend`](Self::lend) gave out. Fails (and hands
    /// the region back) if it is not this block's.
    pub fn reclaim(&self, region: DmaRegion) -> Result<(), DmaRegion> {
        if region.host_ptr() != self.ptr
            || region.len() != self.len()
            || !self.lent.load(Ordering::Acquire)
        {
            return Err(region);
        }
        let _ = region;
        self.lent.store(false, Ordering::Release);
        Ok(())
    }

    /// Whether the block's region is lent out.
    pub fn is_lent(&self) -> bool {
        self.lent.load(Ordering::Acquire)
    }

    fn check(&self, offset: usize, len: usize) -> Result<*mut u8, Error> {
        range_ptr(
            self.ptr,
            self.len(),
            offset,
            len,
            "access outside the DMA block",
        )
    }

    /// Copies bytes out of the block (the device reading memory).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        let p = self.check(offset, dst.len())?;
        // SAFETY: `p .. p + dst.len()` is inside the allocation (checked).
        unsafe { copy_out(p, dst) };
        Ok(())
    }

    /// Copies bytes into the block (the device writing memory).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), Error> {
        let p = self.check(offset, src.len())?;
        // SAFETY: `p .. p + src.len()` is inside the allocation (checked).
        unsafe { copy_in(p, src) };
        Ok(())
    }

    /// Reads an aligned big-endian dword with one load.
    pub fn read32(&self, offset: usize) -> Result<Be32, Error> {
        if offset % 4 != 0 {
            return Err(Error::InvalidArgument("misaligned 32-bit DMA access"));
        }
        let p = self.check(offset, 4)?;
        // SAFETY: in bounds (checked) and 4-byte aligned (the allocation is at
        // least 8-byte aligned and `offset` is a multiple of 4).
        Ok(Be32::from_raw(unsafe { p.cast::<u32>().read_volatile() }))
    }

    /// Writes an aligned big-endian dword with one store.
    pub fn write32(&self, offset: usize, value: Be32) -> Result<(), Error> {
        if offset % 4 != 0 {
            return Err(Error::InvalidArgument("misaligned 32-bit DMA access"));
        }
        let p = self.check(offset, 4)?;
        // SAFETY: in bounds and aligned, as in `read32`.
        unsafe { p.cast::<u32>().write_volatile(value.to_raw()) };
        Ok(())
    }

    /// Reads an aligned big-endian qword with one load.
    pub fn read64(&self, offset: usize) -> Result<Be64, Error> {
        if offset % 8 != 0 {
            return Err(Error::InvalidArgument("misaligned 64-bit DMA access"));
        }
        let p = self.check(offset, 8)?;
        // SAFETY: in bounds (checked) and 8-byte aligned (allocation alignment
        // is at least 8).
        Ok(Be64::from_raw(unsafe { p.cast::<u64>().read_volatile() }))
    }

    /// Writes an aligned big-endian qword with one store.
    pub fn write64(&self, offset: usize, value: Be64) -> Result<(), Error> {
        if offset % 8 != 0 {
            return Err(Error::InvalidArgument("misaligned 64-bit DMA access"));
        }
        let p = self.check(offset, 8)?;
        // SAFETY: in bounds and aligned, as in `read64`.
        unsafe { p.cast::<u64>().write_volatile(value.to_raw()) };
        Ok(())
    }
}

/// Heap memory standing in for a register window (a UAR page in tests,
/// examples and benchmarks): a [`HostBlock`] behind the [`Mmio`](crate::Mmio)
/// trait. Safe to make, unlike [`MmioWindow`](crate::MmioWindow) over
/// foreign memory; every access is checked by the block and, like a
/// window's, panics when misaligned or out of range.
#[derive(Debug)]
pub struct HostMmio(HostBlock);

impl HostMmio {
    /// A zeroed window of `len` bytes (64-byte aligned).
    pub fn new(len: usize) -> Result<Self, Error> {
        Ok(Self(HostBlock::new(len, 64)?))
    }

    /// The memory behind it (to read what was written, as the device).
    pub fn block(&self) -> &HostBlock {
        &self.0
    }
}

impl crate::Mmio for HostMmio {
    fn len(&self) -> usize {
        self.0.len()
    }

    #[track_caller]
    fn read32(&self, offset: usize) -> Be32 {
        match self.0.read32(offset) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    #[track_caller]
    fn write32(&self, offset: usize, value: Be32) {
        if let Err(e) = self.0.write32(offset, value) {
            panic!("{e}")
        }
    }

    #[track_caller]
    fn write64(&self, offset: usize, value: Be64) {
        if let Err(e) = self.0.write64(offset, value) {
            panic!("{e}")
        }
    }
}

/// Memory the emulator did not allocate, lent to a device by its owner: the
/// `len` bytes at a host address of the current process, for example a
/// buffer a program handed to `VFIO_IOMMU_MAP_DMA`. Accesses are volatile
/// copies, like [`HostBlock`]'s; the window never frees the memory.
#[derive(Debug)]
pub struct HostWindow {
    ptr: NonNull<u8>,
    len: usize,
    /// The block a window made by [`HostWindow::over_block`] keeps alive.
    _keep: Option<alloc::sync::Arc<HostBlock>>,
}

// SAFETY: the window only performs volatile copies into memory that the
// creator of the window promised stays valid (see `HostWindow::new`); such
// copies are as thread-safe as a device's DMA.
unsafe impl Send for HostWindow {}
// SAFETY: as above.
unsafe impl Sync for HostWindow {}

impl HostWindow {
    /// A window over `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + len` must be mapped, readable and writable memory of
    /// this process for as long as the window exists, and nothing may hold
    /// a Rust reference into it (the program reaches it only through raw
    /// pointers or foreign code, as memory a device can write).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero length or a range that wraps
    /// around the address space.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize) -> Result<Self, Error> {
        if len == 0 {
            return Err(Error::InvalidArgument("zero-length host window"));
        }
        if (ptr.as_ptr() as usize).checked_add(len).is_none() {
            return Err(Error::InvalidArgument(
                "host window wraps around the address space",
            ));
        }
        Ok(Self {
            ptr,
            len,
            _keep: None,
        })
    }

    /// A window over the page span of user memory
    /// ([`UserMemory::span`](crate::user::UserMemory::span)): safe, since
    /// the [`UserMemory`](crate::user::UserMemory) carries the caller's
    /// promise that the span stays valid until the mapping made from it is
    /// unmapped (an emulated device drops the window then).
    pub fn over_user(mem: crate::user::UserMemory) -> Result<Self, Error> {
        let (_, span) = mem.span();
        // SAFETY: the promise of `UserMemory::new`: the span is mapped,
        // readable and writable, and reached only through raw pointers,
        // until the mapping made from `mem` is unmapped, which drops this
        // window.
        unsafe { Self::new(mem.span_ptr(), span) }
    }

    /// A window over a whole [`HostBlock`], which it keeps alive (safe: the
    /// block's memory lives as long as the window, and the block itself is
    /// only reached through volatile copies too).
    pub fn over_block(block: alloc::sync::Arc<HostBlock>) -> Self {
        Self {
            ptr: block.ptr,
            len: block.len(),
            _keep: Some(block),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty (never: zero-length windows are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Host address of the first byte.
    pub fn host_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    fn check(&self, offset: usize, len: usize) -> Result<*mut u8, Error> {
        range_ptr(
            self.ptr,
            self.len,
            offset,
            len,
            "access outside the host window",
        )
    }

    /// Copies bytes out of the window (the device reading memory).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        let p = self.check(offset, dst.len())?;
        // SAFETY: `p .. p + dst.len()` is inside the window (checked),
        // which is valid memory by the contract of `new`.
        unsafe { copy_out(p, dst) };
        Ok(())
    }

    /// Copies bytes into the window (the device writing memory).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), Error> {
        let p = self.check(offset, src.len())?;
        // SAFETY: `p .. p + src.len()` is inside the window (checked),
        // which is valid memory by the contract of `new`.
        unsafe { copy_in(p, src) };
        Ok(())
    }
}

/// The address of `offset .. offset + len` in memory of `size` bytes at
/// `base`, or `outside` when the range does not fit.
fn range_ptr(
    base: NonNull<u8>,
    size: usize,
    offset: usize,
    len: usize,
    outside: &'static str,
) -> Result<*mut u8, Error> {
    match offset.checked_add(len) {
        // In bounds, so the wrapping add does not wrap.
        Some(end) if end <= size => Ok(base.as_ptr().wrapping_add(offset)),
        _ => Err(Error::InvalidArgument(outside)),
    }
}

/// Copies `dst.len()` bytes from `p` with byte-wise volatile loads (the
/// device may write the memory at any time).
///
/// # Safety
///
/// `p .. p + dst.len()` must be valid for reads.
unsafe fn copy_out(p: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: `p + i` is inside the range the caller vouches for.
        *d = unsafe { p.add(i).read_volatile() };
    }
}

/// Copies `src` to `p` with byte-wise volatile stores.
///
/// # Safety
///
/// `p .. p + src.len()` must be valid for writes.
unsafe fn copy_in(p: *mut u8, src: &[u8]) {
    for (i, &s) in src.iter().enumerate() {
        // SAFETY: `p + i` is inside the range the caller vouches for.
        unsafe { p.add(i).write_volatile(s) };
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if self.lent.load(Ordering::Acquire) {
            // The region is still out there: leak rather than let it dangle.
            log::warn!(
                "DMA block of {} bytes dropped while lent out; leaking it",
                self.len()
            );
            return;
        }
        // SAFETY: allocated in `new` with this layout and not lent out, so no
        // DmaRegion points into it.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lend_access_and_reclaim() {
        let b = HostBlock::new(4096, 4096).unwrap();
        assert_eq!(b.host_addr() % 4096, 0);
        let r = b.lend(0x10_0000, 7).unwrap();
        assert!(b.lend(0, 0).is_err(), "lent twice");
        r.write_be32(8, 0xcafe_f00d);
        assert_eq!(b.read32(8).unwrap().get(), 0xcafe_f00d);
        b.write(100, &[1, 2, 3]).unwrap();
        let mut x = [0u8; 3];
        r.read_bytes(100, &mut x);
        assert_eq!(x, [1, 2, 3]);
        assert!(b.read(4095, &mut [0u8; 2]).is_err());
        assert!(b.read32(2).is_err());
        assert_eq!((r.iova(), r.cookie()), (0x10_0000, 7));

        let other = HostBlock::new(64, 8).unwrap();
        let r = other.reclaim(r).unwrap_err();
        b.reclaim(r).unwrap();
        assert!(!b.is_lent());
    }

    #[test]
    fn host_mmio_is_a_checked_window() {
        use crate::Mmio;
        let w = HostMmio::new(64).unwrap();
        w.write64(8, Be64::new(0x0102_0304_0506_0708));
        assert_eq!(w.read32(12).get(), 0x0506_0708);
        w.write32(60, Be32::new(7));
        assert_eq!(w.block().read32(60).unwrap().get(), 7);
        assert!(w.register64(56).is_ok() && w.register64(60).is_err());
        assert!(std::panic::catch_unwind(|| w.write64(64, Be64::ZERO)).is_err());
        assert!(std::panic::catch_unwind(|| w.read32(2)).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "the leak is what the test checks; Miri reports it")]
    fn dropping_a_lent_block_leaks_instead_of_dangling() {
        let b = HostBlock::new(64, 8).unwrap();
        let r = b.lend(0, 0).unwrap();
        drop(b);
        // Still valid memory.
        r.write_be32(0, 1);
        assert_eq!(r.read_be32(0), 1);
    }

    #[test]
    fn window_reads_and_writes_foreign_memory() {
        let mut buf = [0u8; 16];
        let p = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: `buf` outlives the window and is reached only through it
        // while the window exists.
        let w = unsafe { HostWindow::new(p, 16) }.unwrap();
        w.write(4, &[9, 8, 7]).unwrap();
        let mut x = [0u8; 3];
        w.read(4, &mut x).unwrap();
        assert_eq!(x, [9, 8, 7]);
        assert!(w.read(15, &mut [0u8; 2]).is_err());
        assert!(w.write(usize::MAX, &[1]).is_err());
        drop(w);
        let block = alloc::sync::Arc::new(HostBlock::new(4096, 4096).unwrap());
        let over = HostWindow::over_block(block.clone());
        over.write(8, &[1, 2]).unwrap();
        assert_eq!(block.read32(8).unwrap().get(), 0x0102_0000);
        assert_eq!(over.host_addr(), block.host_addr());
        assert_eq!(buf[4..7], [9, 8, 7]);
        // SAFETY: a zero-length window is refused before any use.
        assert!(unsafe { HostWindow::new(p, 0) }.is_err());
    }

    #[test]
    fn zero_length_and_bad_alignment_are_refused() {
        assert!(HostBlock::new(0, 8).is_err());
        assert!(HostBlock::new(64, 3).is_err());
    }
}
