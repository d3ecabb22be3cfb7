//! Queue memory: the rings a device reads and writes, their doorbell record
//! and the host-only bookkeeping after them, in one [`DmaRegion`], with
//! every access in bounds by construction.
//!
//! A data path (work queues, completion queues, shared receive queues)
//! turns ring indices and offsets into addresses millions of times per
//! second, some of them derived from what the device wrote (a CQE's
//! `wqe_counter`). [`QueueMem`] makes that safe code:
//!
//! - It owns the region and splits it once, at construction, into a
//!   **device part** `0 .. host_offset` (rings and the doorbell record:
//!   volatile accesses only, never a reference) and a **host part**
//!   `host_offset .. len` (bookkeeping the device is never told about:
//!   atomics only, handed out as `&AtomicU*` tied to `&self`). The first 8
//!   bytes of the host part are the platform's own view counter.
//! - Views are made by checked constructors ([`QueueMem::ring`],
//!   [`QueueMem::table`], [`QueueMem::doorbell_record`]): offset aligned,
//!   inside the right part, a power-of-two size. After that no access needs
//!   a check: a [`Ring`] masks every byte offset with `bytes - 1` (and the
//!   access width's alignment), a [`HostTable`] masks every index with
//!   `count - 1`, a [`Block64`] masks every in-block offset with a
//!   constant (free for constant offsets). No safe call sequence can reach
//!   outside the region or make a misaligned access, whatever the
//!   arguments; a wrong offset lands on the wrong (in-bounds) byte.
//!
//! # Why views are counted
//!
//! A queue's bookkeeping is shared: the completion side (a CQ's handle on a
//! QP, which may live on another thread) reads and advances counters the
//! posting side writes. Borrowing (`&'a QueueMem`) would force every handle
//! to borrow its queue, which is exactly the borrow chain drivers cannot
//! store in a struct. So every view is a *counted* handle instead, like an
//! `Arc` without a heap: making or cloning a view increments a counter that
//! lives in the region itself (the first 8 bytes of the host part),
//! dropping it decrements, and [`QueueMem::into_region`] — the only way to
//! get the region back and free it — refuses while any view is alive. If
//! the `QueueMem` is dropped instead, the region is leaked (a dropped
//! [`DmaRegion`] is never freed), so a view that outlives it still points
//! at valid memory, counter included. Forgetting a view leaks the region
//! the same way. Nothing a caller can do with safe code frees the memory
//! under a view; the cost is paid at view creation and drop, never per
//! access. For the same reason the region itself is not handed out while
//! it is a `QueueMem` ([`QueueMem::region`] gives its bus addresses only):
//! its volatile copies could write the host part behind the views' back.
//!
//! What this cannot cover: the device. The host part is in the same DMA
//! mapping as the rings (one region per queue); the driver never gives the
//! device its addresses, but a device that writes there anyway (a
//! firmware bug, a malicious function without an IOMMU) can corrupt the
//! bookkeeping and the view counter, as it could any host-only state kept
//! in DMA memory before this module existed.
//!
//! ```
//! # #[cfg(feature = "std")] {
//! use core::sync::atomic::{AtomicU64, Ordering};
//! use platform::host::HostBlock;
//! use platform::ring::QueueMem;
//!
//! let block = HostBlock::new(4096, 4096)?;
//! // A 1 KiB ring at 0, its doorbell record at 1024, bookkeeping from 1088.
//! let mut mem = QueueMem::new(block.lend(0x10_0000, 0)?, 1088).map_err(|(e, _)| e)?;
//! let ring = mem.ring(0, 1024)?;
//! let dbr = mem.doorbell_record(1024)?;
//! let wr_ids = mem.table::<AtomicU64>(1152, 16)?;
//! ring.w64(64 * 17 + 8, 7u64.to_be()); // masked: slot 1 of 16 (1 KiB ring)
//! assert_eq!(u64::from_be(ring.block64(64).r64(8)), 7);
//! wr_ids.get(3).store(42, Ordering::Relaxed);
//! assert_eq!(wr_ids.get(16 + 3).load(Ordering::Relaxed), 42); // masked index
//! dbr.write32(0, 5u32.to_be());
//! // While views live the region cannot be taken back.
//! let mem = mem.into_region().unwrap_err();
//! drop((ring, dbr, wr_ids));
//! block.reclaim(mem.into_region().map_err(|_| "views alive")?).unwrap();
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::{DmaRegion, Error};

/// Bytes at the start of the host part the platform keeps for its view
/// counter.
pub const COUNTER_BYTES: usize = 8;

/// A queue's DMA region, split into a device part and a host part, from
/// which bounds-safe views are made (see the [module docs](self)).
pub struct QueueMem {
    region: DmaRegion,
    host_offset: usize,
    counter: Counter,
    /// The byte ranges of the host tables made so far: a new one may not
    /// overlap them (two tables of different cell sizes over the same bytes
    /// would make racing mixed-size atomic accesses possible).
    tables: [(usize, usize); MAX_TABLES],
    n_tables: usize,
}

/// How many host tables one [`QueueMem`] can hand out.
pub const MAX_TABLES: usize = 8;

/// The view counter in the region (8 bytes at the start of the host part).
struct Counter(NonNull<AtomicUsize>);

// SAFETY: the counter is an atomic in memory that stays valid as long as any
// holder exists (see the module docs); atomics may be used from any thread.
unsafe impl Send for Counter {}
// SAFETY: as above.
unsafe impl Sync for Counter {}

impl Counter {
    #[inline(always)]
    fn get(&self) -> &AtomicUsize {
        // SAFETY: the pointer is 8-byte aligned, inside the host part of a
        // region that is only freed through `QueueMem::into_region`, which
        // refuses while any view (holder of a `Counter` copy) lives, and the
        // location is only ever accessed atomically.
        unsafe { self.0.as_ref() }
    }

    /// A new holder: increments the count.
    #[inline]
    fn acquire(&self) -> Counter {
        let old = self.get().fetch_add(1, Ordering::Relaxed);
        // Like `Arc`: the count cannot be allowed to wrap (a wrapped count
        // would let the region go while views live).
        if old >= usize::MAX / 2 {
            overflow(self.get());
        }
        Counter(self.0)
    }
}

impl fmt::Debug for QueueMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueMem")
            .field("region", &self.region)
            .field("host_offset", &self.host_offset)
            .field("views", &self.views())
            .finish()
    }
}

/// The view count overflowed (a caller forgot views by the billion): undo
/// and stop.
#[cold]
#[inline(never)]
fn overflow(c: &AtomicUsize) -> ! {
    c.fetch_sub(1, Ordering::Relaxed);
    panic!("queue memory view count overflow");
}

/// Releases one view.
struct ViewRef(Counter);

impl Drop for ViewRef {
    #[inline]
    fn drop(&mut self) {
        // Release: everything this view did happens before the region is
        // handed back (`into_region` loads with acquire).
        self.0.get().fetch_sub(1, Ordering::Release);
    }
}

impl ViewRef {
    #[inline]
    fn clone_ref(&self) -> Self {
        ViewRef(self.0.acquire())
    }
}

fn bad(what: &'static str) -> Error {
    Error::InvalidArgument(what)
}

impl QueueMem {
    /// Takes ownership of `region`: bytes `0 .. host_offset` are the device
    /// part, `host_offset .. len` the host part, whose first
    /// [`COUNTER_BYTES`] hold the view counter (set to 0 here).
    ///
    /// Fails (and gives the region back) unless the region's host address
    /// is 64-byte aligned, `host_offset` is a multiple of 8 and
    /// `host_offset + COUNTER_BYTES <= len`.
    pub fn new(region: DmaRegion, host_offset: usize) -> Result<Self, (Error, DmaRegion)> {
        if region.host_ptr().as_ptr() as usize % 64 != 0 {
            return Err((bad("queue memory must be 64-byte aligned"), region));
        }
        let fits = host_offset
            .checked_add(COUNTER_BYTES)
            .is_some_and(|e| e <= region.len());
        if host_offset % 8 != 0 || !fits {
            return Err((
                bad("queue memory host part must be 8-byte aligned with room for its counter"),
                region,
            ));
        }
        // SAFETY: `host_offset + 8 <= len` (checked), inside the region.
        let p = unsafe { region.host_ptr().as_ptr().add(host_offset) };
        // SAFETY: `p` is 8-byte aligned (base 64-aligned, offset multiple of
        // 8) and valid for 8 bytes; the region's memory is valid for writes
        // and nobody else uses these bytes (views never cover them).
        unsafe { p.cast::<AtomicUsize>().write(AtomicUsize::new(0)) };
        // SAFETY: derived from the region's non-null pointer plus an
        // in-bounds offset.
        let counter = Counter(unsafe { NonNull::new_unchecked(p.cast()) });
        Ok(Self {
            region,
            host_offset,
            counter,
            tables: [(0, 0); MAX_TABLES],
            n_tables: 0,
        })
    }

    /// The region's bus addresses (for the page list and `dbr_addr`).
    /// Not the region itself: its volatile copies could write the host
    /// part (atomics, the view counter) behind the views' back.
    pub fn region(&self) -> RegionInfo {
        RegionInfo {
            iova: self.region.iova(),
            len: self.region.len(),
        }
    }

    /// The region, for this module's tests.
    #[cfg(test)]
    fn raw_region(&self) -> &DmaRegion {
        &self.region
    }

    /// Where the host part starts.
    pub fn host_offset(&self) -> usize {
        self.host_offset
    }

    /// Views alive (rings, tables, doorbell records, their clones).
    pub fn views(&self) -> usize {
        self.counter.get().load(Ordering::Acquire)
    }

    /// Gives the region back, if no view is alive (else `Err(self)`).
    #[allow(clippy::result_large_err)] // no heap to box it into
    pub fn into_region(self) -> Result<DmaRegion, Self> {
        if self.views() != 0 {
            return Err(self);
        }
        Ok(self.region)
    }

    /// Checks that `offset .. offset + bytes` lies in the device part
    /// (`host == false`) or in the host part after the counter.
    fn check(&self, offset: usize, bytes: usize, host: bool) -> Result<NonNull<u8>, Error> {
        let end = offset.checked_add(bytes).ok_or(bad("view overflows"))?;
        let ok = if host {
            offset >= self.host_offset + COUNTER_BYTES && end <= self.region.len()
        } else {
            end <= self.host_offset
        };
        if !ok {
            return Err(bad(if host {
                "host table outside the host part of queue memory"
            } else {
                "ring or doorbell record outside the device part of queue memory"
            }));
        }
        // SAFETY: `offset + bytes <= len` (checked), inside the allocation;
        // the result is derived from a non-null pointer.
        Ok(unsafe { NonNull::new_unchecked(self.region.host_ptr().as_ptr().add(offset)) })
    }

    /// A ring of `bytes` bytes at `offset` of the device part: `bytes` a
    /// power of two of at least 64, `offset` a multiple of 8.
    pub fn ring(&mut self, offset: usize, bytes: usize) -> Result<Ring, Error> {
        if !bytes.is_power_of_two() || bytes < 64 || offset % 8 != 0 {
            return Err(bad(
                "ring size must be a power of two of at least 64 bytes, 8-byte aligned",
            ));
        }
        let base = self.check(offset, bytes, false)?;
        Ok(Ring {
            base,
            mask: bytes - 1,
            mask8: (bytes - 1) & !7,
            _ref: ViewRef(self.counter.acquire()),
        })
    }

    /// A ring of `count` (a power of two, at most 2^26) 64-byte slots at
    /// `ring_offset` (a multiple of 8) of the device part, with a header of
    /// type `H` at `host_offset` of the host part followed by a table of
    /// `count` cells of type `T` (both aligned; together, like a
    /// [`table`](Self::table), not overlapping another table).
    pub fn slot_ring<T: HostCell, H: HostCell>(
        &mut self,
        ring_offset: usize,
        host_offset: usize,
        count: usize,
    ) -> Result<SlotRing<T, H>, Error> {
        let hsize = core::mem::size_of::<H>();
        if !count.is_power_of_two()
            || count > 1 << 26
            || ring_offset % 8 != 0
            || host_offset % H::ALIGN != 0
            || hsize % T::ALIGN != 0
        {
            return Err(bad(
                "slot ring count must be a power of two of at most 2^26, its parts aligned",
            ));
        }
        let ring = self.check(ring_offset, count << 6, false)?;
        let bytes = count * core::mem::size_of::<T>() + hsize;
        let base = self.register(host_offset, bytes)?;
        // SAFETY: `hsize < bytes`, inside the range just checked.
        let cells = unsafe { NonNull::new_unchecked(base.as_ptr().add(hsize)) };
        let mask = (count - 1) as u32;
        Ok(SlotRing {
            ring,
            host: cells.cast(),
            _h: PhantomData,
            mask,
            mask8: (mask as usize) << 3,
            bmask: (count << 6) - 1,
            bmask8: ((count << 6) - 1) & !7,
            _ref: ViewRef(self.counter.acquire()),
        })
    }

    /// The 8-byte doorbell record at `offset` (a multiple of 8) of the
    /// device part.
    pub fn doorbell_record(&mut self, offset: usize) -> Result<DoorbellRecord, Error> {
        if offset % 8 != 0 {
            return Err(bad("doorbell record must be 8-byte aligned"));
        }
        let base = self.check(offset, 8, false)?;
        Ok(DoorbellRecord {
            base,
            _ref: ViewRef(self.counter.acquire()),
        })
    }

    /// A table of `count` (a power of two) host-only cells of type `T` at
    /// `offset` (aligned to `T`) of the host part, not overlapping a table
    /// made before (at most [`MAX_TABLES`]). The cells hold whatever the
    /// memory held (any bit pattern is a valid atomic): initialise them.
    pub fn table<T: HostCell>(
        &mut self,
        offset: usize,
        count: usize,
    ) -> Result<HostTable<T>, Error> {
        if !count.is_power_of_two() || offset % T::ALIGN != 0 || count > u32::MAX as usize {
            return Err(bad(
                "host table count must be a power of two and its offset aligned",
            ));
        }
        let bytes = count
            .checked_mul(core::mem::size_of::<T>())
            .ok_or(bad("host table overflows"))?;
        let base = self.register(offset, bytes)?;
        Ok(HostTable {
            base: base.cast(),
            mask: (count - 1) as u32,
            _ref: ViewRef(self.counter.acquire()),
        })
    }

    /// Checks that `offset .. offset + bytes` lies in the host part after
    /// the counter and overlaps no table made before, and records it.
    fn register(&mut self, offset: usize, bytes: usize) -> Result<NonNull<u8>, Error> {
        let base = self.check(offset, bytes, true)?;
        let end = offset + bytes;
        if self.tables[..self.n_tables]
            .iter()
            .any(|&(s, e)| offset < e && s < end)
        {
            return Err(bad("host table overlaps another"));
        }
        let Some(slot) = self.tables.get_mut(self.n_tables) else {
            return Err(bad("too many host tables in one queue memory"));
        };
        *slot = (offset, end);
        self.n_tables += 1;
        Ok(base)
    }
}

/// Where a [`QueueMem`]'s region is in bus address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    iova: u64,
    len: usize,
}

impl RegionInfo {
    /// Bus address (IOVA) of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Bus address of byte `offset`, if `offset <= len`.
    pub fn iova_at(&self, offset: usize) -> Option<u64> {
        (offset <= self.len).then(|| self.iova + offset as u64)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether bus address range `iova .. iova + len` lies inside the
    /// region.
    pub fn contains_iova(&self, iova: u64, len: usize) -> bool {
        iova >= self.iova
            && (iova - self.iova)
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len as u64)
    }
}

/// A ring in the device part: `bytes` (a power of two, at least 64) of
/// device-visible memory, read and written with single volatile accesses.
///
/// Every byte offset is masked with `bytes - 1` and aligned down to the
/// access width, so every access is inside the ring and aligned. A counted
/// view (see the [module docs](self)); `Clone` makes another.
pub struct Ring {
    base: NonNull<u8>,
    /// `bytes - 1`.
    mask: usize,
    /// `mask & !7`, for 8-byte accesses (one AND).
    mask8: usize,
    _ref: ViewRef,
}

// SAFETY: a ring is a handle on device-visible memory that is only accessed
// by single volatile loads and stores, like a register window; the memory
// outlives the view (counted, see the module docs).
unsafe impl Send for Ring {}
// SAFETY: as above; `&self` methods only perform volatile accesses.
unsafe impl Sync for Ring {}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ring({:#x} bytes)", self.mask + 1)
    }
}

impl Clone for Ring {
    fn clone(&self) -> Self {
        Self {
            base: self.base,
            mask: self.mask,
            mask8: self.mask8,
            _ref: self._ref.clone_ref(),
        }
    }
}

macro_rules! volatile_rw {
    ($(#[$rd:meta])* $r:ident, $(#[$wd:meta])* $w:ident, $t:ty) => {
        $(#[$rd])*
        #[inline(always)]
        pub fn $r(&self, off: usize) -> $t {
            let p = self.at(off, core::mem::size_of::<$t>()).cast::<$t>();
            // SAFETY: `at` gives an address inside the view, aligned to the
            // width; the memory is valid for volatile reads while the view
            // lives (counted view, module docs).
            unsafe { p.read_volatile() }
        }
        $(#[$wd])*
        #[inline(always)]
        pub fn $w(&self, off: usize, v: $t) {
            let p = self.at(off, core::mem::size_of::<$t>()).cast::<$t>();
            // SAFETY: as for the read: in bounds, aligned, valid for
            // volatile writes while the view lives.
            unsafe { p.write_volatile(v) }
        }
    };
}

impl Ring {
    /// The host address of the ring's first byte ([`bytes`](Self::bytes)
    /// from there), for cache maintenance
    /// ([`Mmio::dma_invalidate`](crate::Mmio::dma_invalidate)); nothing is
    /// accessed.
    #[inline(always)]
    pub fn host_addr(&self) -> usize {
        self.base.as_ptr().addr()
    }

    #[inline(always)]
    fn at(&self, off: usize, width: usize) -> *mut u8 {
        let o = if width == 8 {
            off & self.mask8
        } else {
            off & self.mask & !(width - 1)
        };
        // SAFETY: `o <= mask < bytes`: inside the ring.
        unsafe { self.base.as_ptr().add(o) }
    }

    /// Ring size in bytes.
    #[inline(always)]
    pub fn bytes(&self) -> usize {
        self.mask + 1
    }

    /// The 64-byte block holding byte `off` (masked into the ring): a CQE,
    /// a WQEBB.
    #[inline(always)]
    pub fn block64(&self, off: usize) -> Block64<'_> {
        let o = off & self.mask & !63;
        Block64 {
            // SAFETY: `o + 64 <= bytes` (`bytes` is a power of two of at
            // least 64 and `o` a multiple of 64 below it).
            p: unsafe { self.base.as_ptr().add(o) },
            _l: PhantomData,
        }
    }

    /// The 64-byte blocks from the one holding byte `off` (masked) to the
    /// end of the ring, in order (a run of CQEs): bounded once, here, so
    /// the loop over them needs no mask.
    #[inline(always)]
    pub fn blocks(&self, off: usize) -> Blocks<'_> {
        let o = off & self.mask & !63;
        // SAFETY: `o < bytes` and `bytes` is the ring's size: both inside
        // (or one past the end of) the ring.
        unsafe {
            Blocks {
                p: self.base.as_ptr().add(o),
                end: self.base.as_ptr().add(self.mask + 1),
                _l: PhantomData,
            }
        }
    }

    /// Walks the 64-byte blocks from the one holding byte `off` (masked)
    /// towards the end of the ring together with the elements of `out`,
    /// calling `f` on each pair while it returns `true`; returns how many
    /// pairs it returned `true` for. It stops at the end of `out` or of the
    /// ring, whichever comes first (bounded once, here: the loop has one
    /// end to test, not one per sequence as a zip of [`blocks`](Self::blocks)
    /// with `out` has).
    #[inline(always)]
    pub fn zip_blocks<T>(
        &self,
        off: usize,
        out: &mut [T],
        mut f: impl FnMut(Block64<'_>, &mut T) -> bool,
    ) -> usize {
        let o = off & self.mask & !63;
        // Blocks from `o` to the end of the ring (at least 1).
        let left = (self.mask + 1 - o) >> 6;
        let n = out.len().min(left);
        let mut slots = out[..n].iter_mut();
        // The block of the next slot: `o + 64 i` for slot `i`. (Two
        // pointers walk; the count is the slots' iterator's.)
        let mut p = self.base.as_ptr().wrapping_add(o);
        while let Some(w) = slots.next() {
            // For slot `i < n <= left`, `p` is `base + o + 64 i` and
            // `o + 64 i + 64 <= bytes`: the block is inside the ring.
            let b = Block64 { p, _l: PhantomData };
            if !f(b, w) {
                return n - slots.len() - 1;
            }
            p = p.wrapping_add(64);
        }
        n
    }

    volatile_rw!(
        /// Reads the byte at `off` (masked).
        r8,
        /// Writes the byte at `off` (masked).
        w8,
        u8
    );
    volatile_rw!(
        /// Reads the raw (memory-order) u16 at `off` (masked, aligned down).
        r16,
        /// Writes a raw u16 at `off` (masked, aligned down).
        w16,
        u16
    );
    volatile_rw!(
        /// Reads the raw u32 at `off` (masked, aligned down).
        r32,
        /// Writes a raw u32 at `off` (masked, aligned down).
        w32,
        u32
    );
    volatile_rw!(
        /// Reads the raw u64 at `off` (masked, aligned down).
        r64,
        /// Writes a raw u64 at `off` (masked, aligned down): one store.
        w64,
        u64
    );
}

/// A ring of `count` 64-byte slots in the device part (a send queue's
/// WQEBBs) and, in the host part, a header of type `H` (the queue's
/// counters) followed by a table of `count` host-only cells of type `T`
/// that parallels the ring (each slot's `wr_id` and bookkeeping): one
/// index, masked once with `count - 1`, addresses both
/// ([`slot`](Self::slot)), and the header is at a constant offset from the
/// cells. A counted view (see the [module docs](self)); `Clone` makes
/// another.
pub struct SlotRing<T: HostCell, H: HostCell> {
    ring: NonNull<u8>,
    /// The first cell; the header is the `size_of::<H>()` bytes before it.
    host: NonNull<T>,
    _h: PhantomData<H>,
    /// `count - 1`.
    mask: u32,
    /// `(count - 1) * 8`: the slot times 8 scales to both the block (x 8)
    /// and, for cells of 8 or 16 bytes, the cell (x 1, x 2) in one
    /// addressing mode each.
    mask8: usize,
    /// `count * 64 - 1`, for byte offsets into the ring.
    bmask: usize,
    /// `bmask & !7`, for 8-byte accesses (one AND).
    bmask8: usize,
    _ref: ViewRef,
}

// SAFETY: the ring part is only accessed by volatile loads and stores, the
// host part holds atomics (`HostCell` is sealed to atomic types); the
// memory outlives the view (counted, module docs).
unsafe impl<T: HostCell, H: HostCell> Send for SlotRing<T, H> {}
// SAFETY: as above.
unsafe impl<T: HostCell, H: HostCell> Sync for SlotRing<T, H> {}

impl<T: HostCell, H: HostCell> fmt::Debug for SlotRing<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotRing({} slots)", self.mask as u64 + 1)
    }
}

impl<T: HostCell, H: HostCell> Clone for SlotRing<T, H> {
    fn clone(&self) -> Self {
        Self {
            ring: self.ring,
            host: self.host,
            _h: PhantomData,
            mask: self.mask,
            mask8: self.mask8,
            bmask: self.bmask,
            bmask8: self.bmask8,
            _ref: self._ref.clone_ref(),
        }
    }
}

impl<T: HostCell, H: HostCell> SlotRing<T, H> {
    /// The host address of the ring part's first byte (the blocks, `count
    /// * 64` bytes from there), for cache maintenance
    /// ([`Mmio::dma_clean`](crate::Mmio::dma_clean)); nothing is accessed.
    #[inline(always)]
    pub fn host_addr(&self) -> usize {
        self.ring.as_ptr().addr()
    }

    /// Slot `i` (masked with `count - 1`): its 64-byte block and its host
    /// cell.
    #[inline(always)]
    pub fn slot(&self, i: u32) -> (Block64<'_>, &T) {
        self.slot8((i as usize) << 3)
    }

    /// Slot `i8 / 8` (masked): [`slot`](Self::slot) for a caller that
    /// keeps the index times 8 (`i8 += 8` per slot), which the addressing
    /// scales to the block and the cell without a shift.
    #[inline(always)]
    pub fn slot8(&self, i8: usize) -> (Block64<'_>, &T) {
        // The slot times 8, masked: `m8 = 8 m` with `m < count`.
        let m8 = i8 & self.mask8;
        // SAFETY: `m < count`: the block `ring + 64 m .. + 64` is inside the
        // ring (`count * 64` bytes, checked when made), the cell at byte
        // `m * size_of::<T>()` of the table inside it (`count` cells,
        // aligned, atomics only, accessed only with this cell type: tables
        // do not overlap); both live as long as the view.
        unsafe {
            (
                Block64 {
                    p: self.ring.as_ptr().add(m8 * 8),
                    _l: PhantomData,
                },
                &*self
                    .host
                    .as_ptr()
                    .cast::<u8>()
                    .add(cell_offset::<T>(m8))
                    .cast::<T>(),
            )
        }
    }

    /// The host part (header and cells), borrowed as a `Copy` value that
    /// a loop can keep in registers.
    #[inline(always)]
    pub fn cells(&self) -> Cells<'_, T, H> {
        Cells {
            host: self.host,
            mask8: self.mask8,
            _l: PhantomData,
        }
    }

    /// The header.
    #[inline(always)]
    pub fn header(&self) -> &H {
        // SAFETY: the header is the `size_of::<H>()` bytes before the first
        // cell, inside the table's range (checked when made), aligned to
        // `H` (checked), atomics only, accessed only as `H`.
        unsafe {
            &*self
                .host
                .as_ptr()
                .cast::<u8>()
                .sub(core::mem::size_of::<H>())
                .cast::<H>()
        }
    }

    /// The 64-byte block of slot `i` (masked).
    #[inline(always)]
    pub fn block(&self, i: u32) -> Block64<'_> {
        self.slot(i).0
    }

    /// The host cell of slot `i` (masked).
    #[inline(always)]
    pub fn entry(&self, i: u32) -> &T {
        self.slot(i).1
    }

    /// The host cell of slot `i8 / 8` (masked): [`entry`](Self::entry) for
    /// a caller holding the index times 8 with any bits below bit 3 (the
    /// mask, `(count - 1) * 8`, clears them). A device field that sits at
    /// bit 16 of a word is then found with one right shift by 13, without
    /// a second AND for the low bits.
    #[inline(always)]
    pub fn entry8(&self, i8: usize) -> &T {
        self.slot8(i8).1
    }

    /// Number of slots.
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    /// `count - 1`.
    #[inline(always)]
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Ring size in bytes (`count * 64`).
    #[inline(always)]
    pub fn bytes(&self) -> usize {
        (self.mask as usize + 1) << 6
    }

    /// Copies `data` into the ring from byte `off` (masked) on, if it fits
    /// before the end of the ring (`false`, nothing written, otherwise):
    /// the bounds are checked once, then bytes up to the next 8-byte
    /// boundary go as one 4-byte store when they are 4 and byte by byte
    /// otherwise, then whole 8-byte words, then the rest as 4-, 2- and
    /// 1-byte stores (inline data).
    #[inline(always)]
    pub fn write_bytes(&self, off: usize, data: &[u8]) -> bool {
        let o = off & self.bmask;
        if data.len() > self.bmask + 1 - o {
            return false;
        }
        // SAFETY: `o + data.len() <= bytes`: inside the ring, whose base is
        // 8-byte aligned.
        unsafe { copy_aligned(self.ring.as_ptr().add(o), data) };
        true
    }

    #[inline(always)]
    fn at(&self, off: usize, width: usize) -> *mut u8 {
        let o = if width == 8 {
            off & self.bmask8
        } else {
            off & self.bmask & !(width - 1)
        };
        // SAFETY: `o < count * 64`: inside the ring.
        unsafe { self.ring.as_ptr().add(o) }
    }

    volatile_rw!(
        /// Reads the ring byte at `off` (masked to the ring).
        r8,
        /// Writes the ring byte at `off` (masked to the ring).
        w8,
        u8
    );
    volatile_rw!(
        /// Reads the raw u16 at ring byte `off` (masked, aligned down).
        r16,
        /// Writes a raw u16 at ring byte `off` (masked, aligned down).
        w16,
        u16
    );
    volatile_rw!(
        /// Reads the raw u32 at ring byte `off` (masked, aligned down).
        r32,
        /// Writes a raw u32 at ring byte `off` (masked, aligned down).
        w32,
        u32
    );
    volatile_rw!(
        /// Reads the raw u64 at ring byte `off` (masked, aligned down).
        r64,
        /// Writes a raw u64 at ring byte `off` (masked, aligned down).
        w64,
        u64
    );
}

/// The 64-byte blocks of a [`Ring`] from one of them to its end
/// ([`Ring::blocks`]).
pub struct Blocks<'a> {
    /// The next block; `p <= end`, `end - p` a multiple of 64.
    p: *mut u8,
    end: *mut u8,
    _l: PhantomData<&'a Ring>,
}

impl fmt::Debug for Blocks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Blocks")
    }
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Block64<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<Block64<'a>> {
        if self.p == self.end {
            return None;
        }
        let b = Block64 {
            p: self.p,
            _l: PhantomData,
        };
        // SAFETY: `p < end` and `end - p` is a multiple of 64: the block is
        // inside the ring and `p + 64 <= end`.
        self.p = unsafe { self.p.add(64) };
        Some(b)
    }
}

/// The host part of a [`SlotRing`] (its header and cells), borrowed from
/// it: the same accessors, as a `Copy` value.
pub struct Cells<'a, T: HostCell, H: HostCell> {
    host: NonNull<T>,
    mask8: usize,
    _l: PhantomData<&'a SlotRing<T, H>>,
}

impl<T: HostCell, H: HostCell> Clone for Cells<'_, T, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: HostCell, H: HostCell> Copy for Cells<'_, T, H> {}

impl<T: HostCell, H: HostCell> fmt::Debug for Cells<'_, T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cells({} slots)", (self.mask8 >> 3) + 1)
    }
}

impl<'a, T: HostCell, H: HostCell> Cells<'a, T, H> {
    /// The cell of slot `i` (masked), as [`SlotRing::entry`].
    #[inline(always)]
    pub fn entry(self, i: u32) -> &'a T {
        let m8 = ((i as usize) << 3) & self.mask8;
        // SAFETY: as in `SlotRing::slot` (the same table, borrowed for 'a).
        unsafe {
            &*self
                .host
                .as_ptr()
                .cast::<u8>()
                .add(cell_offset::<T>(m8))
                .cast::<T>()
        }
    }

    /// The cell of slot `i8 / 8` (masked), as [`SlotRing::entry8`]: bits
    /// 0..3 of `i8` are ignored.
    #[inline(always)]
    pub fn entry8(self, i8: usize) -> &'a T {
        let m8 = i8 & self.mask8;
        // SAFETY: as in `SlotRing::slot` (the same table, borrowed for 'a;
        // `m8 = 8 m` with `m < count` whatever `i8` is).
        unsafe {
            &*self
                .host
                .as_ptr()
                .cast::<u8>()
                .add(cell_offset::<T>(m8))
                .cast::<T>()
        }
    }

    /// The header, as [`SlotRing::header`].
    #[inline(always)]
    pub fn header(self) -> &'a H {
        // SAFETY: as in `SlotRing::header`.
        unsafe {
            &*self
                .host
                .as_ptr()
                .cast::<u8>()
                .sub(core::mem::size_of::<H>())
                .cast::<H>()
        }
    }
}

/// One 64-byte block of a [`Ring`] (a CQE, a WQEBB), borrowed from it.
/// In-block offsets are masked with a constant (63, aligned down to the
/// width): free for constant offsets.
#[derive(Clone, Copy)]
pub struct Block64<'a> {
    p: *mut u8,
    _l: PhantomData<&'a Ring>,
}

impl fmt::Debug for Block64<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Block64")
    }
}

impl Block64<'_> {
    #[inline(always)]
    fn at(&self, off: usize, width: usize) -> *mut u8 {
        // SAFETY: `off & 63 < 64`: inside the block, which is inside the
        // ring (see `Ring::block64`).
        unsafe { self.p.add(off & 63 & !(width - 1)) }
    }

    volatile_rw!(
        /// Reads the byte at `off` (masked to the block).
        r8,
        /// Writes the byte at `off` (masked to the block).
        w8,
        u8
    );
    volatile_rw!(
        /// Reads the raw u16 at `off` (masked, aligned down).
        r16,
        /// Writes a raw u16 at `off` (masked, aligned down).
        w16,
        u16
    );
    volatile_rw!(
        /// Reads the raw u32 at `off` (masked, aligned down).
        r32,
        /// Writes a raw u32 at `off` (masked, aligned down).
        w32,
        u32
    );
    volatile_rw!(
        /// Reads the raw u64 at `off` (masked, aligned down).
        r64,
        /// Writes a raw u64 at `off` (masked, aligned down).
        w64,
        u64
    );
}

/// The 8-byte doorbell record of a queue (the device reads it): two
/// big-endian words (a QP's receive and send counters, a CQ's consumer
/// index and arm word), written with single volatile stores. A counted
/// view (see the [module docs](self)); `Clone` makes another.
pub struct DoorbellRecord {
    base: NonNull<u8>,
    _ref: ViewRef,
}

// SAFETY: as for `Ring`.
unsafe impl Send for DoorbellRecord {}
// SAFETY: as for `Ring`.
unsafe impl Sync for DoorbellRecord {}

impl fmt::Debug for DoorbellRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DoorbellRecord")
    }
}

impl Clone for DoorbellRecord {
    fn clone(&self) -> Self {
        Self {
            base: self.base,
            _ref: self._ref.clone_ref(),
        }
    }
}

impl DoorbellRecord {
    /// The record's host address (8 bytes there), for cache maintenance
    /// ([`Mmio::dma_clean`](crate::Mmio::dma_clean)); nothing is accessed.
    #[inline(always)]
    pub fn host_addr(&self) -> usize {
        self.base.as_ptr().addr()
    }

    #[inline(always)]
    fn word(&self, word: usize) -> *mut u32 {
        // SAFETY: `(word & 1) * 4` is 0 or 4: inside the 8-byte record and
        // 4-byte aligned (the record is 8-byte aligned).
        unsafe { self.base.as_ptr().add((word & 1) * 4).cast() }
    }

    /// Writes word `word` (0 or 1; masked) as the raw (memory-order) `v`.
    #[inline(always)]
    pub fn write32(&self, word: usize, v: u32) {
        // SAFETY: in bounds and aligned (see `word`), valid for volatile
        // writes while the view lives.
        unsafe { self.word(word).write_volatile(v) }
    }

    /// Reads word `word` (0 or 1; masked), raw.
    #[inline(always)]
    pub fn read32(&self, word: usize) -> u32 {
        // SAFETY: as in `write32`, for reads.
        unsafe { self.word(word).read_volatile() }
    }

    /// Writes both words with one store (raw).
    #[inline(always)]
    pub fn write64(&self, v: u64) {
        // SAFETY: the record is 8 bytes, 8-byte aligned (checked when made).
        unsafe { self.base.as_ptr().cast::<u64>().write_volatile(v) }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A host-only cell type a [`HostTable`] can hold: atomics (any bit pattern
/// is a valid value, every access is atomic) and arrays of them.
pub trait HostCell: sealed::Sealed + Sync {
    /// Alignment the table's offset must have.
    const ALIGN: usize;
}

macro_rules! host_cell {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl HostCell for $t {
            const ALIGN: usize = core::mem::align_of::<$t>();
        }
    )*};
}
/// Copies `data` to `dst` with volatile stores of up to 8 bytes, each
/// aligned to its size (see [`SlotRing::write_bytes`]).
///
/// # Safety
///
/// `dst .. dst + data.len()` must be device memory of a view.
#[inline(always)]
unsafe fn copy_aligned(dst: *mut u8, data: &[u8]) {
    let mut i = 0;
    let mis = dst as usize % 8;
    if mis != 0 {
        let head = (8 - mis).min(data.len());
        if head == 4 && mis == 4 {
            let w = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]);
            // SAFETY: 4 bytes inside the range (caller), 4-byte aligned.
            unsafe { dst.cast::<u32>().write_volatile(w) };
        } else {
            for (j, b) in data[..head].iter().enumerate() {
                // SAFETY: `j < data.len()`: inside the range.
                unsafe { dst.add(j).write_volatile(*b) };
            }
        }
        i = head;
    }
    while let Some(w) = data.get(i..i + 8) {
        let w: [u8; 8] = match w.try_into() {
            Ok(w) => w,
            Err(_) => break,
        };
        // SAFETY: `i + 8 <= data.len()`: inside the range; `dst + i` is
        // 8-byte aligned (the head reached the boundary).
        unsafe {
            dst.add(i)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(w))
        };
        i += 8;
    }
    let mut r = &data[i..];
    if r.len() >= 4 {
        let w = u32::from_ne_bytes([r[0], r[1], r[2], r[3]]);
        // SAFETY: inside the range, 4-byte aligned.
        unsafe { dst.add(i).cast::<u32>().write_volatile(w) };
        i += 4;
        r = &r[4..];
    }
    if r.len() >= 2 {
        let w = u16::from_ne_bytes([r[0], r[1]]);
        // SAFETY: inside the range, 2-byte aligned.
        unsafe { dst.add(i).cast::<u16>().write_volatile(w) };
        i += 2;
        r = &r[2..];
    }
    if let [b] = r {
        // SAFETY: the last byte of the range.
        unsafe { dst.add(i).write_volatile(*b) };
    }
}

/// Byte offset of cell `m8 / 8` (`m8` a multiple of 8) of a table of `T`,
/// without a division the compiler cannot fold.
#[inline(always)]
const fn cell_offset<T>(m8: usize) -> usize {
    let size = core::mem::size_of::<T>();
    if size % 8 == 0 {
        m8 * (size / 8)
    } else {
        (m8 >> 3) * size
    }
}

/// A work-request slot's bookkeeping: its `wr_id` and a 32-bit counter
/// (a send queue's `wqe_head`), 16 bytes.
#[derive(Debug)]
#[repr(C, align(16))]
pub struct WrCell {
    /// The work request's `wr_id`.
    pub wr_id: AtomicU64,
    /// A counter of the slot's (a send queue: the number of the work
    /// request whose WQE starts in it).
    pub head: AtomicU32,
    /// Spare.
    pub aux: AtomicU32,
}

host_cell!(
    WrCell,
    AtomicU8,
    AtomicU16,
    AtomicU32,
    AtomicU64,
    [AtomicU32; 8],
    [AtomicU32; 16],
    [AtomicU64; 2]
);

/// A table of `count` (a power of two) host-only cells in the host part of
/// a [`QueueMem`]: `wr_id`s, posted lengths, counters. The device is never
/// given its address. Indices are masked with `count - 1`; the cells are
/// handed out as references tied to `&self`. A counted view (see the
/// [module docs](self)); `Clone` makes another.
pub struct HostTable<T: HostCell> {
    base: NonNull<T>,
    mask: u32,
    _ref: ViewRef,
}

// SAFETY: the cells are atomics (`HostCell` is sealed to atomic types), so
// shared access from any thread is sound; the memory outlives the view
// (counted, module docs).
unsafe impl<T: HostCell> Send for HostTable<T> {}
// SAFETY: as above.
unsafe impl<T: HostCell> Sync for HostTable<T> {}

impl<T: HostCell> fmt::Debug for HostTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HostTable<{}>({} cells)",
            core::any::type_name::<T>(),
            self.mask as u64 + 1
        )
    }
}

impl<T: HostCell> Clone for HostTable<T> {
    fn clone(&self) -> Self {
        Self {
            base: self.base,
            mask: self.mask,
            _ref: self._ref.clone_ref(),
        }
    }
}

impl<T: HostCell> HostTable<T> {
    /// Cell `idx` (masked with `count - 1`).
    #[inline(always)]
    pub fn get(&self, idx: u32) -> &T {
        // SAFETY: `idx & mask < count`: inside the table, aligned (the
        // table's offset is aligned to `T`, the region base to 64); the
        // cells are atomics (valid for any initialised bytes, and DMA memory
        // is initialised: `DmaRegion` reads any byte), only ever accessed
        // atomically and with this cell size (tables do not overlap, rings
        // are in the device part); the reference lives no longer than
        // `&self`, and the memory outlives the view.
        unsafe { &*self.base.as_ptr().add((idx & self.mask) as usize) }
    }

    /// Cell 0 (a table of one cell holds a header).
    #[inline(always)]
    pub fn first(&self) -> &T {
        // SAFETY: as in `get`, for index 0 (a table has at least one cell).
        unsafe { self.base.as_ref() }
    }

    /// Number of cells.
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    /// `count - 1`.
    #[inline(always)]
    pub fn mask(&self) -> u32 {
        self.mask
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;

    /// A 64-byte aligned buffer of `n` 64-byte blocks, and a region on it.
    #[repr(align(64))]
    #[derive(Clone, Copy)]
    struct Blk(#[allow(dead_code)] [u8; 64]);

    fn region(buf: &mut [Blk]) -> DmaRegion {
        let len = buf.len() * 64;
        // SAFETY: `buf` outlives the region in every test (reclaimed by
        // `into_region` or leaked) and is only accessed through it.
        unsafe {
            DmaRegion::from_raw_parts(NonNull::new(buf.as_mut_ptr().cast()).unwrap(), 0, len, 0)
        }
    }

    #[test]
    fn views_are_checked_once_and_masked_after() {
        let mut buf = vec![Blk([0; 64]); 8];
        let mut mem = QueueMem::new(region(&mut buf), 256 + 64).unwrap();
        let ring = mem.ring(0, 256).unwrap();
        let dbr = mem.doorbell_record(256).unwrap();
        let t = mem.table::<AtomicU32>(384, 16).unwrap();
        let hdr = mem.table::<[AtomicU32; 16]>(448, 1).unwrap();
        assert_eq!(mem.views(), 4);
        // Byte offsets wrap at the ring size and align down.
        ring.w64(256 + 8, 0x1122_3344_5566_7788);
        assert_eq!(ring.r64(8), 0x1122_3344_5566_7788);
        ring.w32(13, 7);
        assert_eq!(ring.r32(12), 7);
        ring.w16(usize::MAX, 9);
        assert_eq!(ring.r16(254), 9);
        ring.w8(usize::MAX, 3);
        assert_eq!(ring.r8(255), 3);
        // A run of blocks to the end of the ring.
        let mut run = ring.blocks(64 * 3 + 9);
        assert_eq!(run.next().unwrap().r64(8), ring.r64(3 * 64 + 8));
        assert!(run.next().is_none());
        assert_eq!(ring.blocks(usize::MAX).count(), 1);
        assert_eq!(ring.blocks(256).count(), 4);
        // The same run beside a slice: bounded by the shorter, stopped by
        // the callback.
        let mut seen = [0u64; 8];
        let n = ring.zip_blocks(64 * 2 + 5, &mut seen, |b, s| {
            *s = b.r64(8);
            true
        });
        assert_eq!(n, 2);
        assert_eq!(seen[..3], [ring.r64(2 * 64 + 8), ring.r64(3 * 64 + 8), 0]);
        assert_eq!(ring.zip_blocks(0, &mut seen[..3], |_, _| true), 3);
        assert_eq!(ring.zip_blocks(usize::MAX, &mut seen, |_, _| true), 1);
        assert_eq!(ring.zip_blocks(0, &mut seen, |b, _| b.r8(0x3f) != 3), 3);
        assert_eq!(ring.zip_blocks(0, &mut [0u8; 0], |_, _| true), 0);
        // Blocks: masked to 64 bytes inside the ring.
        let b = ring.block64(64 + 5);
        b.w64(64 + 16, 42);
        assert_eq!(ring.r64(64 + 16), 42);
        assert_eq!(b.r64(16), 42);
        b.w8(0x3f, 0xf0);
        assert_eq!(ring.block64(256 + 64).r8(0x3f), 0xf0);
        // The doorbell record: two words.
        dbr.write32(1, 0xabcd);
        dbr.write32(2, 0x1234); // word 0
        assert_eq!((dbr.read32(0), dbr.read32(1)), (0x1234, 0xabcd));
        dbr.write64(0);
        assert_eq!(dbr.read32(1), 0);
        // Tables: masked indices.
        assert_eq!(t.get(5).load(Ordering::Relaxed), 0);
        t.get(16 + 5).store(11, Ordering::Relaxed);
        assert_eq!(t.get(5).load(Ordering::Relaxed), 11);
        assert_eq!((t.count(), t.mask()), (16, 15));
        hdr.first()[15].store(1, Ordering::Relaxed);
        assert_eq!(hdr.get(7)[15].load(Ordering::Relaxed), 1);
        // Nothing wrote the counter or outside the views.
        assert_eq!(mem.views(), 4);
        assert!(buf_untouched_outside(&mem));
        let mem = mem.into_region().unwrap_err();
        let t2 = t.clone();
        drop((ring, dbr, t, hdr));
        assert_eq!(mem.views(), 1);
        let mem = mem.into_region().unwrap_err();
        assert_eq!(t2.get(5).load(Ordering::Relaxed), 11);
        drop(t2);
        mem.into_region().unwrap();
    }

    fn buf_untouched_outside(mem: &QueueMem) -> bool {
        // Bytes 264..320 (after the doorbell record, before the host part)
        // and 320+8..384 (after the counter) were never written.
        let r = mem.raw_region();
        (264..320).chain(328..384).all(|i| r.read_u8(i) == 0)
    }

    #[test]
    fn slot_rings_share_one_masked_index() {
        let mut buf = vec![Blk([0; 64]); 8];
        let mut mem = QueueMem::new(region(&mut buf), 256).unwrap();
        let s = mem
            .slot_ring::<[AtomicU64; 2], [AtomicU32; 16]>(0, 264, 4)
            .unwrap();
        s.header()[15].store(3, Ordering::Relaxed);
        assert_eq!(mem.raw_region().read_u8(264 + 60), 3);
        let (b, e) = s.slot(4 + 2);
        b.w64(8, 5);
        assert_eq!(s.slot8(8 * 6).0.r64(8), 5);
        e[1].store(9, Ordering::Relaxed);
        assert_eq!(s.r64(2 * 64 + 8), 5);
        assert_eq!(mem.raw_region().read_u8(264 + 64 + 2 * 16 + 8), 9);
        assert_eq!(s.r64(6 * 64 + 8), 5, "byte offsets wrap at the ring");
        assert_eq!(s.entry(2)[1].load(Ordering::Relaxed), 9);
        // Bytes: every alignment, refused past the end of the ring.
        let data: std::vec::Vec<u8> = (1..=255).collect();
        for (off, len, fits) in [
            (4, 60, true),
            (250, 9, false),
            (3, 13, true),
            (255, 1, true),
            (1, 255, true),
            (17, 0, true),
        ] {
            let before: std::vec::Vec<u8> = (0..256).map(|i| s.r8(i)).collect();
            let mut want = before.clone();
            if fits {
                want[off..off + len].copy_from_slice(&data[..len]);
            }
            assert_eq!(s.write_bytes(off + 256, &data[..len]), fits);
            let got: std::vec::Vec<u8> = (0..256).map(|i| s.r8(i)).collect();
            assert_eq!(got, want, "{off} {len}");
            // Put back what the other checks read.
            for (i, b) in before.iter().enumerate() {
                s.w8(i, *b);
            }
        }
        let c = s.cells();
        assert_eq!(c.entry(6)[1].load(Ordering::Relaxed), 9);
        // The index times 8: bits 0..3 ignored, the slot masked.
        for i8 in [2 * 8, 2 * 8 + 7, 6 * 8 + 5, usize::MAX - 8 * 5 - 7 + 3] {
            assert_eq!(c.entry8(i8)[1].load(Ordering::Relaxed), 9, "{i8:#x}");
            assert_eq!(s.entry8(i8)[1].load(Ordering::Relaxed), 9, "{i8:#x}");
        }
        assert_eq!(s.entry8(usize::MAX)[1].load(Ordering::Relaxed), 0);
        assert_eq!(c.header()[15].load(Ordering::Relaxed), 3);
        assert_eq!(s.block(u32::MAX - 1).r64(8), 5);
        assert_eq!((s.count(), s.mask(), s.bytes()), (4, 3, 256));
        // The table is a table: nothing may overlap it.
        assert!(mem.table::<AtomicU8>(264, 1).is_err());
        assert!(mem.table::<AtomicU8>(264 + 127, 1).is_err());
        assert!(mem.table::<AtomicU8>(264 + 128, 1).is_ok());
        assert!(mem.slot_ring::<AtomicU64, AtomicU64>(0, 400, 3).is_err());
        assert!(
            mem.slot_ring::<AtomicU64, AtomicU64>(64, 400, 4).is_err(),
            "ring into the host part"
        );
        assert!(
            mem.slot_ring::<AtomicU64, AtomicU8>(0, 400, 4).is_err(),
            "misaligned cells"
        );
        assert!(
            mem.slot_ring::<AtomicU64, AtomicU64>(0, 480, 4).is_err(),
            "past the end"
        );
        let s2 = s.clone();
        assert_eq!(mem.views(), 2);
        drop((s, s2));
        mem.into_region().unwrap();
    }

    #[test]
    fn bad_views_are_refused() {
        let mut buf = vec![Blk([0; 64]); 8];
        let mut mem = QueueMem::new(region(&mut buf), 256).unwrap();
        // Not a power of two, too small, misaligned, into the host part.
        assert!(mem.ring(0, 192).is_err());
        assert!(mem.ring(0, 32).is_err());
        assert!(mem.ring(4, 64).is_err());
        assert!(mem.ring(128, 256).is_err());
        assert!(mem.ring(usize::MAX - 63, 64).is_err());
        assert!(mem.doorbell_record(256).is_err());
        assert!(mem.doorbell_record(4).is_err());
        // Tables: over the counter, past the end, misaligned, odd count.
        assert!(mem.table::<AtomicU64>(256, 1).is_err());
        assert!(mem.table::<AtomicU64>(264, 32).is_err());
        assert!(mem.table::<AtomicU64>(268, 1).is_err());
        assert!(mem.table::<AtomicU64>(264, 3).is_err());
        assert!(mem.table::<AtomicU64>(usize::MAX - 7, 1).is_err());
        assert!(mem.table::<AtomicU16>(264, 1 << 31).is_err());
        let t = mem.table::<AtomicU8>(511, 1).unwrap();
        // Overlapping tables are refused, whatever their cell type.
        assert!(mem.table::<AtomicU64>(504, 2).is_err());
        assert!(mem.table::<AtomicU8>(511, 1).is_err());
        let more: std::vec::Vec<_> = (0..7)
            .map(|i| mem.table::<AtomicU64>(264 + 8 * i, 1).unwrap())
            .collect();
        assert!(mem.table::<AtomicU64>(400, 1).is_err(), "a ninth table");
        assert_eq!(mem.views(), 8);
        drop((t, more));
    }

    #[test]
    fn bad_regions_are_refused() {
        let mut buf = vec![Blk([0; 64]); 2];
        let r = region(&mut buf);
        let (_, r) = QueueMem::new(r, 124).unwrap_err();
        let (_, r) = QueueMem::new(r, 121).unwrap_err();
        let mem = QueueMem::new(r, 120).unwrap();
        let r = mem.into_region().unwrap();
        // A misaligned base.
        // SAFETY: inside `buf`, which outlives the region.
        let off = unsafe {
            DmaRegion::from_raw_parts(
                NonNull::new(r.host_ptr().as_ptr().add(8)).unwrap(),
                0,
                64,
                0,
            )
        };
        assert!(QueueMem::new(off, 0).is_err());
    }

    #[test]
    fn views_outlive_a_dropped_queue_memory() {
        // Dropping the QueueMem leaks the region: the view stays valid.
        // (The buffer outlives the views, as a leaked region would.)
        let mut buf = vec![Blk([0; 64]); 4];
        let mut mem = QueueMem::new(region(&mut buf), 128).unwrap();
        let t = mem.table::<AtomicU64>(136, 1).unwrap();
        let ring = mem.ring(0, 128).unwrap();
        #[allow(clippy::drop_non_drop)]
        drop(mem);
        t.first().store(5, Ordering::Relaxed);
        ring.w64(0, 1);
        assert_eq!(t.first().load(Ordering::Relaxed), 5);
        assert_eq!(ring.clone().r64(0), 1);
    }

    #[test]
    fn views_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SlotRing<[AtomicU64; 2], [AtomicU32; 16]>>();
        check::<QueueMem>();
        check::<Ring>();
        check::<DoorbellRecord>();
        check::<HostTable<AtomicU64>>();
    }
}
