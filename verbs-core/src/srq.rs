//! Shared receive queues: WQEs linked through their next segments into a
//! free list, as rdma-core's `srq.c` keeps them.
//!
//! The list starts as 0 → 1 → … → n-1 with `head` = 0 and `tail` = n-1.
//! Posting takes the WQE at `head` and follows its next index; a completion
//! appends the completed WQE at `tail` (writing the old tail's
//! `next_wqe_index` in the ring, which the device follows). The list is
//! full when `head == tail`: one WQE always stays behind as the tail, so an
//! SRQ of `n` WQEs holds `n - 1` work requests.
//!
//! Posting is single-threaded (`&mut self`); completions come from any
//! number of CQs through [`SrqCompletions`] handles. The poster reads the
//! tail with acquire ordering, completions append under a short spin lock
//! and publish the tail with release ordering. The next indices are
//! mirrored in host-only memory, so the poster never follows an index read
//! back from device-visible memory.
//!
//! Limit ("watermark") events: the driver arms them with ARM_RQ
//! (`lwm`) and receives SRQ_LIMIT events; [`Srq::outstanding`] and
//! [`Srq::available`] give the software view of the same count.

use core::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

#[cfg(feature = "cache-maintenance")]
use platform::Mmio;
use platform::ring::{DoorbellRecord, HostTable, QueueMem, RegionInfo, Ring};
use platform::{Be32, DmaRegion, barrier};

use crate::Error;
use crate::mem::{Hdr, check_region, hdr};
use crate::qp::{PostError, RecvWr};
use crate::sizing::{SrqGeometry, SrqLayout};
use crate::wqe;

// Header words.
const META_LOCK: usize = 0;
const META_TAIL: usize = 1;
const META_HANDLES: usize = 2;
const META_COMPLETED: usize = 3;

/// The views an SRQ and its completion handles share.
#[derive(Debug, Clone)]
struct SrqViews {
    /// The ring (the completion side writes next indices into it).
    buf: Ring,
    /// Lock, tail, handles, completed.
    hdr: HostTable<Hdr>,
    wrid: HostTable<AtomicU64>,
    /// Bytes posted per WQE.
    len: HostTable<AtomicU32>,
    /// Host mirror of the next indices.
    next: HostTable<AtomicU16>,
    /// 1 while a WQE is posted.
    posted: HostTable<AtomicU8>,
}
/// Spins before a contended free-list lock gives up.
const LOCK_SPINS: u32 = 1 << 24;

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    mem: QueueMem,
    v: SrqViews,
    dbr: DoorbellRecord,
    layout: SrqLayout,
    geometry: SrqGeometry,
    srqn: u32,
    head: u32,
    counter: u32,
    posted: u32,
}

impl Srq {
    /// Takes ownership of the SRQ's DMA region (laid out as
    /// [`SrqLayout::new`]`(geometry)`, 64-byte aligned) and initialises the
    /// free list and the doorbell record. Call it before CREATE_SRQ.
    pub fn new(
        region: DmaRegion,
        srqn: u32,
        geometry: SrqGeometry,
    ) -> Result<Self, (Error, DmaRegion)> {
        let layout = SrqLayout::new(&geometry);
        if let Err(e) = check_region(&region, layout.total_bytes) {
            return Err((e, region));
        }
        // Device part: ring and doorbell record; the platform's view
        // counter right after the record; the bookkeeping from
        // `meta_offset` on.
        let mut mem = match QueueMem::new(region, layout.dbr_offset + 8) {
            Ok(m) => m,
            Err((e, region)) => return Err((e.into(), region)),
        };
        let setup = (|| -> Result<_, Error> {
            if !geometry.wqe_cnt.is_power_of_two()
                || geometry.wqe_cnt < 2
                || geometry.wqe_cnt > 1 << 16
                || !(5..=12).contains(&geometry.wqe_shift)
                || geometry.max_gs as usize * 16 + 16 > 1 << geometry.wqe_shift
            {
                return Err(Error::InvalidGeometry("shared receive queue"));
            }
            if srqn >= 1 << 24 {
                return Err(Error::InvalidGeometry("SRQN exceeds 24 bits"));
            }
            let n = geometry.wqe_cnt as usize;
            let m = layout.meta_offset;
            let v = SrqViews {
                buf: mem.ring(0, geometry.bytes())?,
                hdr: mem.table(m, 1)?,
                wrid: mem.table(m + layout.wrid, n)?,
                len: mem.table(m + layout.len, n)?,
                next: mem.table(m + layout.next, n)?,
                posted: mem.table(m + layout.posted, n)?,
            };
            let dbr = mem.doorbell_record(layout.dbr_offset)?;
            Ok((v, dbr))
        })();
        let (v, dbr) = match setup {
            Ok(x) => x,
            Err(e) => return Err((e, crate::mem::into_region(mem))),
        };
        let n = geometry.wqe_cnt;
        for i in 0..n {
            let next = (i + 1) % n;
            let seg = wqe::srq_next_seg(next as u16);
            let off = (i as usize) << geometry.wqe_shift;
            v.buf.w64(off, seg[0]);
            v.buf.w64(off + 8, seg[1]);
            v.next.get(i).store(next as u16, Ordering::Relaxed);
            v.posted.get(i).store(0, Ordering::Relaxed);
        }
        let h = v.hdr.first();
        h[META_LOCK].store(0, Ordering::Relaxed);
        h[META_TAIL].store(n - 1, Ordering::Relaxed);
        h[META_HANDLES].store(0, Ordering::Relaxed);
        h[META_COMPLETED].store(0, Ordering::Release);
        dbr.write64(0);
        Ok(Self {
            mem,
            v,
            dbr,
            layout,
            geometry,
            srqn,
            head: 0,
            counter: 0,
            posted: 0,
        })
    }

    #[inline(always)]
    fn build(&mut self, wr: &RecvWr<'_>) -> Result<(), Error> {
        if wr.sgl.len() > self.geometry.max_gs as usize {
            return Err(Error::TooManySges {
                got: wr.sgl.len(),
                max: self.geometry.max_gs as usize,
            });
        }
        let tail = hdr(&self.v.hdr, META_TAIL).load(Ordering::Acquire);
        if self.head == tail {
            return Err(Error::QueueFull {
                outstanding: self.outstanding(),
                max_post: self.geometry.max_wr,
            });
        }
        let idx = self.head as usize;
        let base = (idx << self.geometry.wqe_shift) + 16;
        let mut j = 0usize;
        let mut total: u64 = 0;
        for sge in wr.sgl {
            if sge.length == 0 {
                continue;
            }
            let seg = wqe::data_seg(sge.length, sge.lkey, sge.addr);
            self.v.buf.w64(base + 16 * j, seg[0]);
            self.v.buf.w64(base + 16 * j + 8, seg[1]);
            total += u64::from(sge.length);
            j += 1;
        }
        if j < self.geometry.max_gs as usize {
            let seg = wqe::data_seg_end();
            self.v.buf.w64(base + 16 * j, seg[0]);
            self.v.buf.w64(base + 16 * j + 8, seg[1]);
        }
        let i = idx as u32;
        self.v.wrid.get(i).store(wr.wr_id, Ordering::Relaxed);
        self.v
            .len
            .get(i)
            .store(total.min(u64::from(u32::MAX)) as u32, Ordering::Relaxed);
        self.v.posted.get(i).store(1, Ordering::Release);
        // Host-only mirror, always < wqe_cnt (written by this module only).
        let next = self.v.next.get(i).load(Ordering::Relaxed);
        self.head = u32::from(next) & (self.geometry.wqe_cnt - 1);
        self.counter = self.counter.wrapping_add(1);
        self.posted = self.posted.wrapping_add(1);
        Ok(())
    }

    #[inline(always)]
    fn publish(&mut self) {
        barrier::udma_to_device_barrier();
        self.dbr
            .write32(0, Be32::new(self.counter & 0xffff).to_raw());
    }

    /// Posts one receive work request (`ibv_post_srq_recv`).
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), Error> {
        self.build(wr)?;
        self.publish();
        Ok(())
    }

    /// Posts a list; on a rejected request the ones before it are posted.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        PostError::post_list(self, wrs, |q, wr, _| q.build(wr), |q, _| q.publish())
    }

    /// [`post_recv`](Self::post_recv) for a system without coherent DMA
    /// (`C::DMA_CACHE_MAINTENANCE`; otherwise the same as `post_recv`):
    /// cleans the WQE through `mmio`'s [`dma_clean`](Mmio::dma_clean), then
    /// writes the doorbell record (the SRQ's doorbell) and cleans it.
    #[cfg(feature = "cache-maintenance")]
    pub fn post_recv_synced<C: Mmio>(&mut self, wr: &RecvWr<'_>, mmio: &C) -> Result<(), Error> {
        self.build_synced(wr, mmio)?;
        self.publish_synced(mmio);
        Ok(())
    }

    /// [`post_recv_list`](Self::post_recv_list) for a system without
    /// coherent DMA: each posted WQE is cleaned (they follow the free list,
    /// not the ring order), then the doorbell record is written and
    /// cleaned.
    #[cfg(feature = "cache-maintenance")]
    pub fn post_recv_list_synced<C: Mmio>(
        &mut self,
        wrs: &[RecvWr<'_>],
        mmio: &C,
    ) -> Result<(), PostError> {
        PostError::post_list(
            self,
            wrs,
            |q, wr, _| q.build_synced(wr, mmio),
            |q, _| q.publish_synced(mmio),
        )
    }

    /// `build`, then the clean of the WQE it wrote (the one at the free
    /// list's head before it).
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn build_synced<C: Mmio>(&mut self, wr: &RecvWr<'_>, mmio: &C) -> Result<(), Error> {
        let idx = self.head as usize;
        self.build(wr)?;
        if C::DMA_CACHE_MAINTENANCE {
            let stride = 1usize << self.geometry.wqe_shift;
            mmio.dma_clean(self.v.buf.host_addr() + idx * stride, stride);
        }
        Ok(())
    }

    /// `publish`, then the clean of the doorbell record.
    #[cfg(feature = "cache-maintenance")]
    #[inline(always)]
    fn publish_synced<C: Mmio>(&mut self, mmio: &C) {
        self.publish();
        if C::DMA_CACHE_MAINTENANCE {
            mmio.dma_clean(self.dbr.host_addr(), 8);
        }
    }

    /// Cleans the memory [`new`](Self::new) initialised for the device
    /// (the ring with its next-WQE links, and the doorbell record) on a
    /// system without coherent DMA (nothing at all otherwise): call it
    /// before CREATE_SRQ.
    #[cfg(feature = "cache-maintenance")]
    pub fn clean_initialised<C: Mmio>(&self, mmio: &C) {
        if C::DMA_CACHE_MAINTENANCE {
            mmio.dma_clean(self.v.buf.host_addr(), self.geometry.bytes());
            mmio.dma_clean(self.dbr.host_addr(), 8);
        }
    }

    /// Work requests posted and not completed (software view of the SRQ
    /// limit counter).
    pub fn outstanding(&self) -> u32 {
        self.posted
            .wrapping_sub(hdr(&self.v.hdr, META_COMPLETED).load(Ordering::Acquire))
    }

    /// Work requests that can still be posted.
    pub fn available(&self) -> u32 {
        self.geometry.max_wr - self.outstanding().min(self.geometry.max_wr)
    }

    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// The geometry.
    pub fn geometry(&self) -> &SrqGeometry {
        &self.geometry
    }

    /// The layout of the region.
    pub fn layout(&self) -> &SrqLayout {
        &self.layout
    }

    /// The DMA region (for the page list and `dbr_addr`).
    pub fn region(&self) -> RegionInfo {
        self.mem.region()
    }

    /// A completion handle, for every QP that uses this SRQ (pass it to
    /// [`Qp::completions`](crate::Qp::completions)).
    pub fn completions(&self) -> SrqCompletions {
        hdr(&self.v.hdr, META_HANDLES).fetch_add(1, Ordering::AcqRel);
        SrqCompletions {
            srqn: self.srqn,
            v: self.v.clone(),
            wqe_cnt: self.geometry.wqe_cnt,
            wqe_shift: self.geometry.wqe_shift,
        }
    }

    /// Completion handles alive.
    pub fn handles_alive(&self) -> u32 {
        hdr(&self.v.hdr, META_HANDLES).load(Ordering::Acquire)
    }

    /// Gives the region back after DESTROY_SRQ, or the SRQ while handles are
    /// alive.
    pub fn into_parts(self) -> Result<DmaRegion, Self> {
        if self.handles_alive() != 0 {
            return Err(self);
        }
        let Self { mem, v, dbr, .. } = self;
        drop((v, dbr));
        Ok(crate::mem::into_region(mem))
    }
}

/// The completion side of an SRQ: resolves a responder CQE's wqe_counter to
/// its `wr_id` and returns the WQE to the free list.
#[derive(Debug)]
pub struct SrqCompletions {
    srqn: u32,
    v: SrqViews,
    wqe_cnt: u32,
    wqe_shift: u8,
}

/// What a validated SRQ completion yields.
pub(crate) struct SrqWqe {
    pub(crate) idx: usize,
    pub(crate) len: u32,
}

impl SrqCompletions {
    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Checks that `counter` names a posted WQE; nothing is changed.
    #[inline(always)]
    pub(crate) fn check(&self, counter: u16, ci: u32) -> Result<SrqWqe, Error> {
        let idx = usize::from(counter);
        if idx >= self.wqe_cnt as usize
            || self
                .v
                .posted
                .get(u32::from(counter))
                .load(Ordering::Acquire)
                == 0
        {
            return Err(Error::CqeWqeCounter {
                ci,
                counter,
                queue: "SRQ",
            });
        }
        let len = self.v.len.get(u32::from(counter)).load(Ordering::Relaxed);
        Ok(SrqWqe { idx, len })
    }

    /// Takes the `wr_id` of a checked WQE and appends it to the free list
    /// (rdma-core `mlx5_free_srq_wqe`). Fails without changing anything if
    /// the list lock stays contended, or if another CQ retired the WQE
    /// meanwhile.
    #[inline(always)]
    pub(crate) fn retire(&self, w: &SrqWqe, counter: u16, ci: u32) -> Result<u64, Error> {
        let lock = hdr(&self.v.hdr, META_LOCK);
        let mut spins = 0u32;
        while lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins >= LOCK_SPINS {
                return Err(Error::SrqLockTimeout(spins));
            }
            core::hint::spin_loop();
        }
        let posted = self.v.posted.get(w.idx as u32);
        if posted.swap(0, Ordering::AcqRel) == 0 {
            lock.store(0, Ordering::Release);
            return Err(Error::CqeWqeCounter {
                ci,
                counter,
                queue: "SRQ",
            });
        }
        let wr_id = self.v.wrid.get(w.idx as u32).load(Ordering::Relaxed);
        let tail_a = hdr(&self.v.hdr, META_TAIL);
        let tail = tail_a.load(Ordering::Relaxed) as usize & (self.wqe_cnt as usize - 1);
        // The device follows the ring's next index; the poster the mirror.
        self.v
            .buf
            .w16((tail << self.wqe_shift) + 2, (w.idx as u16).to_be());
        self.v
            .next
            .get(tail as u32)
            .store(w.idx as u16, Ordering::Relaxed);
        tail_a.store(w.idx as u32, Ordering::Release);
        hdr(&self.v.hdr, META_COMPLETED).fetch_add(1, Ordering::Release);
        lock.store(0, Ordering::Release);
        Ok(wr_id)
    }
}

impl Drop for SrqCompletions {
    fn drop(&mut self) {
        hdr(&self.v.hdr, META_HANDLES).fetch_sub(1, Ordering::AcqRel);
    }
}
