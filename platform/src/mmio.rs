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

    /// Whether DMA memory needs cache maintenance on this system (the
    /// device does not snoop the CPU caches): when `false`, the default,
    /// the data path neither calls [`dma_clean`](Self::dma_clean) and
    /// [`dma_invalidate`](Self::dma_invalidate) nor computes their ranges
    /// (the branches on this constant are removed at compile time). See
    /// [`bare_metal::CacheMaintenance`](crate::bare_metal::CacheMaintenance).
    const DMA_CACHE_MAINTENANCE: bool = false;

    /// Makes the CPU's writes to the DMA memory at host address
    /// `addr .. addr + len` visible to the device (cleans the cache lines):
    /// the data path calls it for the WQEs and the doorbell record before a
    /// doorbell. Called only when
    /// [`DMA_CACHE_MAINTENANCE`](Self::DMA_CACHE_MAINTENANCE) is set; the
    /// default does nothing.
    #[inline(always)]
    fn dma_clean(&self, addr: usize, len: usize) {
        let _ = (addr, len);
    }

    /// Makes the device's writes to the DMA memory at host address
    /// `addr .. addr + len` visible to the CPU (invalidates the cache
    /// lines): the data path calls it for a CQE around its ownership check.
    /// Called only when
    /// [`DMA_CACHE_MAINTENANCE`](Self::DMA_CACHE_MAINTENANCE) is set; the
    /// default does nothing.
    #[inline(always)]
    fn dma_invalidate(&self, addr: usize, len: usize) {
        let _ = (addr, len);
    }

    /// Checks that a `width`-byte access at `offset` is aligned and inside
    /// the window.
    fn check(&self, offset: usize, width: usize) -> Result<(), Error> {
        check_access(self.len(), offset, width)
    }

    /// Writes the 64-bit register at `offset` with one store, like
    /// [`write64`](Self::write64) but without its alignment and bounds
    /// check: for a doorbell whose offset was checked once against this
    /// window. [`Register64`] (from [`register64`](Self::register64)) is the
    /// safe way to use it.
    ///
    /// The default calls [`write64`](Self::write64), which checks anyway;
    /// [`MmioWindow`] overrides it with the plain volatile store.
    ///
    /// # Safety
    ///
    /// `offset` must be a multiple of 8 and `offset + 8 <= self.len()`.
    ///
    /// An implementation that overrides this method without checking relies
    /// on that, so its [`len`](Self::len) must be exact and must not change
    /// while the window exists (a check made once stays true).
    #[inline(always)]
    unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
        self.write64(offset, value)
    }

    /// A handle on the 64-bit register at `offset` (a UAR doorbell): the
    /// offset is checked once here, against [`len`](Self::len), and every
    /// [`Register64::write`] is then a single store without a check.
    ///
    /// Fails with [`Error::MmioOutOfRange`] if `offset` is not 8-byte
    /// aligned or the register is not inside the window.
    #[inline]
    fn register64(&self, offset: usize) -> Result<Register64<'_, Self>, Error> {
        Register64::new(self, offset)
    }
}

/// A 64-bit register of a [`Mmio`] window whose offset was checked once
/// (aligned, inside the window), so that writing it needs no further check:
/// the doorbell a data path rings on every post.
///
/// Made by [`Mmio::register64`] or [`Register64::new`]; it borrows the
/// window, so it cannot outlive it.
pub struct Register64<'a, M: Mmio + ?Sized> {
    mmio: &'a M,
    /// Invariant: a multiple of 8 with `offset + 8 <= mmio.len()`.
    offset: usize,
}

impl<'a, M: Mmio + ?Sized> Register64<'a, M> {
    /// The register at `offset` of `mmio`, after checking that `offset` is
    /// 8-byte aligned and `offset + 8 <= mmio.len()`
    /// ([`Error::MmioOutOfRange`] otherwise).
    #[inline]
    pub fn new(mmio: &'a M, offset: usize) -> Result<Self, Error> {
        // Against `len` itself, not the overridable `check`: this is the
        // precondition of `write64_unchecked`.
        check_access(mmio.len(), offset, 8)?;
        Ok(Self { mmio, offset })
    }

    /// Writes the register with one 64-bit store (no check: done in
    /// [`new`](Self::new)).
    #[inline(always)]
    pub fn write(&self, value: Be64) {
        // SAFETY: `offset` is a multiple of 8 and `offset + 8 <=
        // mmio.len()` (checked in `new`; `len` does not change while the
        // window exists, per the contract of `write64_unchecked`), and the
        // window outlives `'a`.
        unsafe { self.mmio.write64_unchecked(self.offset, value) }
    }

    /// The register's offset in the window.
    #[inline(always)]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The window.
    #[inline(always)]
    pub fn mmio(&self) -> &'a M {
        self.mmio
    }
}

impl<M: Mmio + ?Sized> Clone for Register64<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: Mmio + ?Sized> Copy for Register64<'_, M> {}

impl<M: Mmio + ?Sized> core::fmt::Debug for Register64<'_, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Register64({:#x})", self.offset)
    }
}

/// The BlueFlame register pair of a send queue: the two alternating
/// buffers of `buf_size` bytes at `reg` and `reg + buf_size` of a UAR page
/// (rdma-core's `bf->offset ^= bf->buf_size` after every doorbell).
///
/// The offsets are checked once, in [`new`](Self::new), against the
/// window's [`len`](Mmio::len); afterwards the 8-byte doorbell is one store
/// without a check ([`Mmio::write64_unchecked`]) and the BlueFlame copy is
/// limited to the buffer. Owns the window (or a reference to it: `&W` is a
/// [`Mmio`] too).
#[derive(Debug)]
pub struct BlueFlame<M: Mmio> {
    mmio: M,
    /// Offset of the buffer the next doorbell goes to. Invariant: `reg` or
    /// `reg + buf_size`, a multiple of 8, with `cur + buf_size <= len`.
    cur: u32,
    /// `reg ^ (reg + buf_size)`: one XOR swaps the buffers.
    toggle: u32,
    reg: u32,
    buf_size: u32,
}

impl<M: Mmio> BlueFlame<M> {
    /// The pair at `reg` of `mmio`, buffers of `buf_size` bytes: `buf_size`
    /// a non-zero multiple of 64 of at most 64 KiB, `reg` a multiple of 8,
    /// both buffers inside the window. Gives the window back on failure
    /// ([`Error::MmioOutOfRange`] or [`Error::InvalidArgument`]).
    pub fn new(mmio: M, reg: usize, buf_size: usize) -> Result<Self, (Error, M)> {
        if buf_size % 64 != 0 || buf_size == 0 || buf_size > 1 << 16 {
            return Err((
                Error::InvalidArgument(
                    "BlueFlame buf_size must be a non-zero multiple of 64, at most 64 KiB",
                ),
                mmio,
            ));
        }
        // Against `len` itself, not the overridable `check`: this is the
        // precondition of `write64_unchecked`.
        let len = mmio.len();
        let end = reg.checked_add(2 * buf_size);
        let ok = end.is_some_and(|e| e <= len && e <= u32::MAX as usize) && reg % 8 == 0;
        if !ok {
            return Err((
                Error::MmioOutOfRange {
                    offset: reg,
                    width: 2 * buf_size,
                    len,
                },
                mmio,
            ));
        }
        let (reg, buf_size) = (reg as u32, buf_size as u32);
        Ok(Self {
            mmio,
            cur: reg,
            toggle: reg ^ (reg + buf_size),
            reg,
            buf_size,
        })
    }

    /// Writes the 8-byte doorbell to the current buffer: one store, no
    /// check (done in [`new`](Self::new)).
    #[inline(always)]
    pub fn ring(&self, value: Be64) {
        // SAFETY: `cur` is `reg` or `reg + buf_size`, both multiples of 8
        // (`reg % 8 == 0`, `buf_size % 64 == 0`), and `cur + 8 <= reg + 2 *
        // buf_size <= len` (checked in `new`; `len` does not change while
        // the window exists, per the contract of `write64_unchecked`).
        unsafe { self.mmio.write64_unchecked(self.cur as usize, value) }
    }

    /// Copies 64-byte block `block` of a WQE to the current buffer
    /// (`block * 64` bytes in). Fails, writing nothing, if the block is not
    /// inside the buffer. The caller brackets the copy with
    /// [`mmio_wc_start`](crate::barrier::mmio_wc_start) and
    /// [`mmio_flush_writes`](crate::barrier::mmio_flush_writes).
    #[inline]
    pub fn copy(&self, block: usize, words: &[Be64; 8]) -> Result<(), Error> {
        let inside = block
            .checked_mul(64)
            .is_some_and(|o| o < self.buf_size as usize);
        if !inside {
            return Err(Error::MmioOutOfRange {
                offset: (self.cur as usize).saturating_add(block.saturating_mul(64)),
                width: 64,
                len: self.mmio.len(),
            });
        }
        let base = self.cur as usize + 64 * block;
        for (i, w) in words.iter().enumerate() {
            // SAFETY: `base + 8 i + 8 <= cur + buf_size <= len` (the block
            // is inside the buffer, checked above; the buffer inside the
            // window, checked in `new`), and 8-byte aligned (`cur` and 64
            // are multiples of 8).
            unsafe { self.mmio.write64_unchecked(base + 8 * i, *w) };
        }
        Ok(())
    }

    /// Copies a WQE of `blocks` 64-byte blocks to the current buffer, block
    /// `b` being `block(b)`: one check for the whole copy (fails, writing
    /// nothing, if it does not fit the buffer), then single 64-bit stores.
    /// Bracket it as [`copy`](Self::copy).
    #[inline(always)]
    pub fn copy_blocks(
        &self,
        blocks: usize,
        block: impl Fn(usize) -> [Be64; 8],
    ) -> Result<(), Error> {
        if blocks > self.buf_size as usize / 64 {
            return Err(Error::MmioOutOfRange {
                offset: self.cur as usize,
                width: blocks.saturating_mul(64),
                len: self.mmio.len(),
            });
        }
        for b in 0..blocks {
            let words = block(b);
            let base = self.cur as usize + 64 * b;
            for (i, w) in words.iter().enumerate() {
                // SAFETY: `base + 8 i + 8 <= cur + 64 blocks <= cur +
                // buf_size <= len` (checked above and in `new`), 8-byte
                // aligned.
                unsafe { self.mmio.write64_unchecked(base + 8 * i, *w) };
            }
        }
        Ok(())
    }

    /// Switches to the other buffer.
    #[inline(always)]
    pub fn flip(&mut self) {
        self.cur ^= self.toggle;
    }

    /// Offset in the window of the buffer the next doorbell goes to.
    #[inline(always)]
    pub fn offset(&self) -> usize {
        self.cur as usize
    }

    /// `bf->offset`: 0 or `buf_size`.
    pub fn buffer_offset(&self) -> usize {
        (self.cur - self.reg) as usize
    }

    /// Bytes of one buffer.
    #[inline(always)]
    pub fn buf_size(&self) -> usize {
        self.buf_size as usize
    }

    /// The window.
    pub fn mmio(&self) -> &M {
        &self.mmio
    }

    /// Gives the window back.
    pub fn into_inner(self) -> M {
        self.mmio
    }
}

impl<M: Mmio + ?Sized> Mmio for &M {
    const DMA_CACHE_MAINTENANCE: bool = M::DMA_CACHE_MAINTENANCE;
    #[inline(always)]
    fn dma_clean(&self, addr: usize, len: usize) {
        (**self).dma_clean(addr, len)
    }
    #[inline(always)]
    fn dma_invalidate(&self, addr: usize, len: usize) {
        (**self).dma_invalidate(addr, len)
    }
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
    #[inline(always)]
    unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
        // SAFETY: the caller's guarantee for `self` holds for `**self`,
        // whose `len` `self.len()` returns.
        unsafe { (**self).write64_unchecked(offset, value) }
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

    /// The BlueFlame copy with one check for the whole range (the trait's
    /// default checks every word): `offset` 8-byte aligned and
    /// `offset + 8 * src.len()` inside the window, else it panics like
    /// [`write64`](Mmio::write64).
    #[inline(always)]
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        let width = src.len().saturating_mul(8).max(8);
        let inside = offset.checked_add(width).is_some_and(|end| end <= self.len);
        if !inside || offset % 8 != 0 {
            access_failed(self.len, offset, width)
        }
        for (i, w) in src.iter().enumerate() {
            // SAFETY: `offset` is 8-byte aligned and `offset + 8 * src.len()
            // <= len` (checked above), so every word is aligned and inside
            // the window, which is valid for volatile 64-bit writes.
            unsafe {
                self.base
                    .as_ptr()
                    .add(offset + 8 * i)
                    .cast::<u64>()
                    .write_volatile(w.to_raw())
            }
        }
    }

    #[inline(always)]
    unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
        debug_assert!(
            check_access(self.len, offset, 8).is_ok(),
            "write64_unchecked at {offset:#x} outside the {:#x}-byte window",
            self.len
        );
        // SAFETY: the caller guarantees `offset` is 8-byte aligned and
        // `offset + 8 <= self.len` (`len` never changes), and the window is
        // valid for volatile 64-bit writes (constructor contract).
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
    fn register64_checks_once_and_writes_one_store() {
        let mut mem = vec![0u64; 8];
        // SAFETY: `mem` outlives the window and is only accessed through it.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        let r = w.register64(56).unwrap();
        assert_eq!(r.offset(), 56);
        r.write(Be64::new(0x0102_0304_0506_0708));
        assert_eq!(w.read32(56).get(), 0x0102_0304);
        assert_eq!(w.read32(60).get(), 0x0506_0708);
        // Through a reference to the window (the `&M` impl forwards).
        let rw = &w;
        let r0 = rw.register64(0).unwrap();
        r0.write(Be64::new(7));
        assert_eq!(w.read32(4).get(), 7);
        for bad in [64, 60, 4, 57, usize::MAX - 7, usize::MAX] {
            match w.register64(bad) {
                Err(Error::MmioOutOfRange { offset, width, len }) => {
                    assert_eq!((offset, width, len), (bad, 8, 64));
                }
                other => panic!("offset {bad:#x}: {other:?}"),
            }
        }
        assert!(Register64::new(&w, 8).is_ok());
        // An empty window has no registers.
        // SAFETY: a zero-length window is never accessed.
        let empty = unsafe { MmioWindow::new(NonNull::dangling(), 0) };
        assert!(empty.register64(0).is_err());
        assert_eq!(mem[7].to_ne_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    /// A window that records its writes and relies on the trait's
    /// defaults, as an emulated BAR does.
    struct Recorder {
        writes: core::cell::RefCell<std::vec::Vec<(usize, u64)>>,
    }

    impl Mmio for Recorder {
        fn len(&self) -> usize {
            0x100
        }
        fn read32(&self, _: usize) -> Be32 {
            Be32::ZERO
        }
        fn write32(&self, _: usize, _: Be32) {}
        fn write64(&self, offset: usize, value: Be64) {
            if let Err(e) = self.check(offset, 8) {
                panic!("{e}");
            }
            self.writes.borrow_mut().push((offset, value.get()));
        }
    }

    #[test]
    fn default_unchecked_write_goes_through_write64() {
        let m = Recorder {
            writes: Default::default(),
        };
        let r = m.register64(0xf8).unwrap();
        r.write(Be64::new(0xabcd));
        r.write(Be64::new(0xef));
        // SAFETY: 0x20 is aligned and inside the 0x100-byte window.
        unsafe { m.write64_unchecked(0x20, Be64::new(1)) };
        assert_eq!(
            *m.writes.borrow(),
            [(0xf8, 0xabcd), (0xf8, 0xef), (0x20, 1)]
        );
        assert!(m.register64(0x100).is_err());
        assert!(m.register64(0xfc).is_err());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "write64_unchecked at 0x40 outside the 0x40-byte window")]
    fn unchecked_write_out_of_range_is_caught_in_debug_builds() {
        let mut mem = vec![0u64; 8];
        // SAFETY: as above.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        // SAFETY: not met on purpose: the debug assertion stops it before
        // the store.
        unsafe { w.write64_unchecked(64, Be64::new(1)) };
    }

    #[test]
    #[should_panic(expected = "outside the 0x40-byte window")]
    fn out_of_range_panics() {
        let mut mem = vec![0u64; 8];
        // SAFETY: as above.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        w.read32(64);
    }

    #[test]
    fn blueflame_pair_checks_once_and_alternates() {
        let mut mem = vec![0u64; 512];
        // SAFETY: `mem` outlives the window and is only accessed through it.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 4096) };
        let mut bf = BlueFlame::new(&w, 0x800, 256).unwrap();
        assert_eq!(
            (bf.offset(), bf.buffer_offset(), bf.buf_size()),
            (0x800, 0, 256)
        );
        bf.ring(Be64::new(1));
        bf.flip();
        assert_eq!((bf.offset(), bf.buffer_offset()), (0x900, 256));
        bf.ring(Be64::new(2));
        let words: [Be64; 8] = core::array::from_fn(|i| Be64::new(i as u64 + 10));
        bf.copy(3, &words).unwrap();
        assert!(bf.copy(4, &words).is_err(), "past the buffer");
        assert!(bf.copy(usize::MAX, &words).is_err());
        bf.flip();
        assert_eq!(bf.offset(), 0x800);
        assert_eq!(w.read32(0x804).get(), 1);
        assert_eq!(w.read32(0x904).get(), 2);
        assert_eq!(w.read32(0x900 + 3 * 64 + 60).get(), 17);
        // Nothing past the second buffer.
        assert_eq!(w.read32(0xa00).get(), 0);
        // A whole WQE at once, checked once (at 0x800 now).
        bf.copy_blocks(2, |b| [Be64::new(b as u64 + 20); 8])
            .unwrap();
        assert!(bf.copy_blocks(5, |_| [Be64::ZERO; 8]).is_err());
        assert_eq!(w.read32(0x800 + 64 + 60).get(), 21);
        assert_eq!(w.read32(0x800 + 128).get(), 0);
        for (reg, size) in [
            (0xe08, 256),
            (0x804, 256),
            (0x800, 100),
            (0x800, 0),
            (usize::MAX - 7, 64),
        ] {
            assert!(BlueFlame::new(&w, reg, size).is_err(), "{reg:#x} {size}");
        }
        assert!(BlueFlame::new(&w, 0xc00, 512).is_ok());
        let _ = bf.into_inner();
    }

    #[test]
    fn bf_copy_checks_the_whole_range_once() {
        let mut mem = vec![0u64; 8];
        // SAFETY: as above.
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        let words: [Be64; 8] = core::array::from_fn(|i| Be64::new(i as u64 + 1));
        w.write_bf(0, &words);
        assert_eq!(w.read32(60).get(), 8);
        for (off, n) in [(8, 8), (4, 1), (64, 1), (usize::MAX - 7, 1)] {
            let r = std::panic::catch_unwind(|| w.write_bf(off, &words[..n]));
            assert!(r.is_err(), "write_bf of {n} words at {off:#x} accepted");
        }
        // Nothing of a rejected copy was written.
        assert_eq!(w.read32(60).get(), 8);
    }
}
