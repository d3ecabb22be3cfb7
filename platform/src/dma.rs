//! DMA memory regions.

use core::ptr::NonNull;

use crate::{Be32, Be64};

/// A block of memory the device can reach by DMA: host address, IOVA (the
/// address the device uses) and length.
///
/// The device may write the memory at any time, so no Rust reference into it
/// is ever handed out: every access is a volatile copy through the methods
/// below, which take `&self` like a register window. Offsets are checked:
/// an access outside the region or a misaligned 32/64-bit access panics,
/// because offsets come from the driver itself (anything the device reports
/// is validated before it is used as an offset).
///
/// A region is released with [`Platform::free_dma`](crate::Platform::free_dma);
/// dropping it without doing so leaks the memory (and its IOMMU mapping) but
/// is not unsound.
#[derive(Debug)]
pub struct DmaRegion {
    host: NonNull<u8>,
    iova: u64,
    len: usize,
    cookie: usize,
}

// SAFETY: a DmaRegion is a handle on memory shared with a device; it holds no
// thread-affine state and every access through it is a volatile copy, so it
// may be sent to and shared with other threads like a register window.
unsafe impl Send for DmaRegion {}
// SAFETY: see `Send` above; `&self` methods only perform volatile accesses.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Wraps memory a backend allocated and mapped for the device.
    ///
    /// `cookie` is the backend's own bookkeeping value, returned by
    /// [`cookie`](Self::cookie).
    ///
    /// # Safety
    ///
    /// `host` must be valid for volatile reads and writes of `len` bytes, and
    /// stay so until the region is passed back to its backend's `free_dma`;
    /// no Rust reference to that memory may exist meanwhile.
    pub unsafe fn from_raw_parts(host: NonNull<u8>, iova: u64, len: usize, cookie: usize) -> Self {
        Self {
            host,
            iova,
            len,
            cookie,
        }
    }

    /// Host address of the first byte.
    pub fn host_ptr(&self) -> NonNull<u8> {
        self.host
    }

    /// Bus address (IOVA) of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Bus address of byte `offset` (which may be `len`, one past the end).
    ///
    /// # Panics
    ///
    /// If `offset > len`.
    pub fn iova_at(&self, offset: usize) -> u64 {
        assert!(
            offset <= self.len,
            "offset {offset:#x} outside DMA region of {:#x} bytes",
            self.len
        );
        self.iova + offset as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The backend's bookkeeping value.
    pub fn cookie(&self) -> usize {
        self.cookie
    }

    /// Whether bus address range `iova .. iova + len` lies inside the region.
    pub fn contains_iova(&self, iova: u64, len: usize) -> bool {
        iova >= self.iova
            && (iova - self.iova)
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len as u64)
    }

    #[track_caller]
    fn ptr_at(&self, offset: usize, size: usize, align: usize) -> *mut u8 {
        let end = offset.checked_add(size);
        assert!(
            end.is_some_and(|e| e <= self.len),
            "access of {size} bytes at {offset:#x} outside DMA region of {:#x} bytes",
            self.len
        );
        assert!(
            offset % align == 0,
            "misaligned {size}-byte DMA access at {offset:#x}"
        );
        // SAFETY: `offset + size <= len` was checked above and the region is
        // valid for `len` bytes (constructor contract), so the result stays
        // inside the same allocation.
        unsafe { self.host.as_ptr().add(offset) }
    }

    /// Reads one byte.
    #[track_caller]
    pub fn read_u8(&self, offset: usize) -> u8 {
        let p = self.ptr_at(offset, 1, 1);
        // SAFETY: `p` is inside the region (checked by `ptr_at`), which is
        // valid for volatile reads.
        unsafe { p.read_volatile() }
    }

    /// Writes one byte.
    #[track_caller]
    pub fn write_u8(&self, offset: usize, value: u8) {
        let p = self.ptr_at(offset, 1, 1);
        // SAFETY: `p` is inside the region, which is valid for volatile writes.
        unsafe { p.write_volatile(value) }
    }

    /// Reads an aligned big-endian dword with one load.
    #[track_caller]
    pub fn read32(&self, offset: usize) -> Be32 {
        let p = self.ptr_at(offset, 4, 4).cast::<u32>();
        // SAFETY: in bounds and 4-byte aligned (checked; the region base is at
        // least 8-byte aligned by the `alloc_dma` contract).
        Be32::from_raw(unsafe { p.read_volatile() })
    }

    /// Writes an aligned big-endian dword with one store.
    #[track_caller]
    pub fn write32(&self, offset: usize, value: Be32) {
        let p = self.ptr_at(offset, 4, 4).cast::<u32>();
        // SAFETY: in bounds and 4-byte aligned, valid for volatile writes.
        unsafe { p.write_volatile(value.to_raw()) }
    }

    /// Reads an aligned big-endian qword with one load.
    #[track_caller]
    pub fn read64(&self, offset: usize) -> Be64 {
        let p = self.ptr_at(offset, 8, 8).cast::<u64>();
        // SAFETY: in bounds and 8-byte aligned, valid for volatile reads.
        Be64::from_raw(unsafe { p.read_volatile() })
    }

    /// Writes an aligned big-endian qword with one store.
    #[track_caller]
    pub fn write64(&self, offset: usize, value: Be64) {
        let p = self.ptr_at(offset, 8, 8).cast::<u64>();
        // SAFETY: in bounds and 8-byte aligned, valid for volatile writes.
        unsafe { p.write_volatile(value.to_raw()) }
    }

    /// Reads the host-order value of the big-endian dword at `offset`.
    #[track_caller]
    pub fn read_be32(&self, offset: usize) -> u32 {
        self.read32(offset).get()
    }

    /// Writes `value` as a big-endian dword at `offset`.
    #[track_caller]
    pub fn write_be32(&self, offset: usize, value: u32) {
        self.write32(offset, Be32::new(value))
    }

    /// Reads the host-order value of the big-endian qword at `offset`.
    #[track_caller]
    pub fn read_be64(&self, offset: usize) -> u64 {
        self.read64(offset).get()
    }

    /// Writes `value` as a big-endian qword at `offset`.
    #[track_caller]
    pub fn write_be64(&self, offset: usize, value: u64) {
        self.write64(offset, Be64::new(value))
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    #[track_caller]
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) {
        let p = self.ptr_at(offset, dst.len(), 1);
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: `p .. p + dst.len()` is inside the region (checked).
            *d = unsafe { p.add(i).read_volatile() };
        }
    }

    /// Copies `src` into the region at `offset`.
    #[track_caller]
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        let p = self.ptr_at(offset, src.len(), 1);
        for (i, &s) in src.iter().enumerate() {
            // SAFETY: `p .. p + src.len()` is inside the region (checked).
            unsafe { p.add(i).write_volatile(s) };
        }
    }

    /// Sets `len` bytes at `offset` to `value`.
    #[track_caller]
    pub fn fill(&self, offset: usize, len: usize, value: u8) {
        let p = self.ptr_at(offset, len, 1);
        for i in 0..len {
            // SAFETY: `p .. p + len` is inside the region (checked).
            unsafe { p.add(i).write_volatile(value) };
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;

    fn region(buf: &mut [u64]) -> DmaRegion {
        let len = buf.len() * 8;
        // SAFETY: `buf` outlives the region in every test and is only
        // accessed through it.
        unsafe {
            DmaRegion::from_raw_parts(
                NonNull::new(buf.as_mut_ptr().cast()).unwrap(),
                0x1000,
                len,
                0,
            )
        }
    }

    #[test]
    fn big_endian_accessors() {
        let mut buf = vec![0u64; 4];
        let r = region(&mut buf);
        r.write_be32(4, 0x0102_0304);
        assert_eq!(r.read_u8(4), 1);
        assert_eq!(r.read_u8(7), 4);
        r.write_be64(8, 0x1122_3344_5566_7788);
        let mut b = [0u8; 8];
        r.read_bytes(8, &mut b);
        assert_eq!(b, [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        r.fill(16, 16, 0xa5);
        assert_eq!(r.read_be32(28), 0xa5a5_a5a5);
        assert_eq!(r.iova_at(16), 0x1010);
        assert!(r.contains_iova(0x1000, 32));
        assert!(!r.contains_iova(0x1001, 32));
        assert!(!r.contains_iova(0xfff, 1));
        assert!(!r.contains_iova(0x1000, usize::MAX));
    }

    #[test]
    #[should_panic(expected = "outside DMA region")]
    fn out_of_bounds_panics() {
        let mut buf = vec![0u64; 1];
        region(&mut buf).read32(8);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn misaligned_panics() {
        let mut buf = vec![0u64; 2];
        region(&mut buf).read64(4);
    }
}
