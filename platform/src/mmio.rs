//! Register windows (a mapped BAR).

use core::ptr::NonNull;

use crate::{Be32, Be64, Error};

/// A window of device registers: BAR0 of a ConnectX holds the
/// initialization segment at offset 0 and the UAR pages after it.
///
/// Accesses are single, aligned and never torn: a 32-bit register is read
/// with one 32-bit load, a doorbell written with one 64-bit store. Values are
/// in device byte order ([`Be32`]/[`Be64`]), the same bytes that travel on
/// the bus.
///
/// Offsets must be aligned to the access width and inside the window;
/// otherwise the access panics. Offsets derived from what the device reports
/// (a UAR index, for example) must be checked with [`check`](Self::check)
/// first.
pub trait Mmio {
    /// Size of the window in bytes.
    fn len(&self) -> usize;

    /// Whether the window is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: usize) -> Be32;

    /// Writes the 32-bit register at `offset`.
    fn write32(&self, offset: usize, value: Be32);

    /// Writes the 64-bit register at `offset` with one store (a UAR doorbell).
    fn write64(&self, offset: usize, value: Be64);

    /// Copies `src` to the write-combining BlueFlame buffer at `offset`, in
    /// order, 64 bits at a time. The caller brackets it with
    /// [`mmio_wc_start`](crate::barrier::mmio_wc_start) and
    /// [`mmio_flush_writes`](crate::barrier::mmio_flush_writes).
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        for (i, w) in src.iter().enumerate() {
            self.write64(offset + 8 * i, *w);
        }
    }

    /// Checks that a `width`-byte access at `offset` is aligned and inside
    /// the window.
    fn check(&self, offset: usize, width: usize) -> Result<(), Error> {
        check_access(self.len(), offset, width)
    }
}

impl<M: Mmio + ?Sized> Mmio for &M {
    #[inline(always)]
    fn len(&self) -> usize {
        (**self).len()
    }
    #[inline(always)]
    fn read32(&self, offset: usize) -> Be32 {
        (**self).read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: Be32) {
        (**self).write32(offset, value)
    }
    #[inline(always)]
    fn write64(&self, offset: usize, value: Be64) {
        (**self).write64(offset, value)
    }
    #[inline(always)]
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        (**self).write_bf(offset, src)
    }
}

/// Checks an access of `width` bytes at `offset` in a window of `len` bytes.
pub(crate) fn check_access(len: usize, offset: usize, width: usize) -> Result<(), Error> {
    let inside = offset.checked_add(width).is_some_and(|end| end <= len);
    if !inside || offset % width != 0 {
        return Err(Error::MmioOutOfRange { offset, width, len });
    }
    Ok(())
}

#[track_caller]
#[inline(always)]
fn assert_access(len: usize, offset: usize, width: usize) {
    if check_access(len, offset, width).is_err() {
        access_failed(len, offset, width)
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn access_failed(len: usize, offset: usize, width: usize) -> ! {
    panic!(
        "MMIO access of {width} bytes at {offset:#x} is misaligned or outside the {len:#x}-byte window"
    )
}

/// A register window at a virtual address: a BAR mapped by the vfio backend
/// or handed in by bare-metal code. Accesses are volatile loads and stores.
#[derive(Debug)]
pub struct MmioWindow {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the window is a handle on device registers; volatile accesses from
// any thread are how device registers are used.
unsafe impl Send for MmioWindow {}
// SAFETY: as above; all methods take `&self` and perform single volatile
// accesses.
unsafe impl Sync for MmioWindow {}

impl MmioWindow {
    /// A window of `len` bytes at `base`.
    ///
    /// # Safety
    ///
    /// `base` must be 8-byte aligned and valid for volatile 32- and 64-bit
    /// reads and writes of `len` bytes (a device BAR mapping, or memory
    /// standing in for one) for as long as the window exists.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        Self { base, len }
    }

    /// The base address.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }
}

impl Mmio for MmioWindow {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read32(&self, offset: usize) -> Be32 {
        assert_access(self.len, offset, 4);
        // SAFETY: aligned and inside the window (checked), which is valid for
        // volatile 32-bit reads (constructor contract).
        Be32::from_raw(unsafe { self.base.as_ptr().add(offset).cast::<u32>().read_volatile() })
    }

    #[inline(always)]
    fn write32(&self, offset: usize, value: Be32) {
        assert_access(self.len, offset, 4);
        // SAFETY: aligned and inside the window (checked), valid for volatile
        // 32-bit writes.
        unsafe {
            self.base
                .as_ptr()
                .add(offset)
                .cast::<u32>()
                .write_volatile(value.to_raw())
        }
    }

    #[inline(always)]
    fn write64(&self, offset: usize, value: Be64) {
        assert_access(self.len, offset, 8);
        // SAFETY: aligned and inside the window (checked), valid for volatile
        // 64-bit writes; on 64-bit targets this is a single store.
        unsafe {
            self.base
                .as_ptr()
                .add(offset)
                .cast::<u64>()
                .write_volatile(value.to_raw())
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;

    #[test]
    fn window_reads_and_writes_big_endian_words() {
        let mut mem = vec![0u64; 8];
        // SAFETY: `mem` outlives the window and is only accessed through it.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        w.write32(4, Be32::new(0xdead_beef));
        assert_eq!(w.read32(4).get(), 0xdead_beef);
        w.write64(8, Be64::new(0x0102_0304_0506_0708));
        assert_eq!(w.read32(8).get(), 0x0102_0304);
        assert_eq!(w.read32(12).get(), 0x0506_0708);
        w.write_bf(16, &[Be64::new(1), Be64::new(2)]);
        assert_eq!(w.read32(28).get(), 2);
        assert!(w.check(60, 4).is_ok());
        assert!(w.check(60, 8).is_err());
        assert!(w.check(2, 4).is_err());
        assert!(w.check(usize::MAX - 1, 4).is_err());
        assert_eq!(mem[0].to_ne_bytes()[4..], [0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    #[should_panic(expected = "outside the 0x40-byte window")]
    fn out_of_range_panics() {
        let mut mem = vec![0u64; 8];
        // SAFETY: as above.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        w.read32(64);
    }
}
