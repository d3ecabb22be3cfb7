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

use core::sync::atomic::Ordering;

use platform::{Be32, DmaRegion, barrier};

use crate::Error;
use crate::mem::{Ptr, check_region};
use crate::qp::{PostError, RecvWr};
use crate::sizing::{SrqGeometry, SrqLayout};
use crate::wqe;

const META_LOCK: usize = 0;
const META_TAIL: usize = 4;
const META_HANDLES: usize = 8;
const META_COMPLETED: usize = 12;
/// Spins before a contended free-list lock gives up.
const LOCK_SPINS: u32 = 1 << 24;

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    region: DmaRegion,
    buf: Ptr,
    meta: Ptr,
    dbr: Ptr,
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
        let setup = (|| -> Result<_, Error> {
            check_region(&region, layout.total_bytes)?;
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
            let buf = Ptr::new(&region, 0, geometry.bytes())?;
            let meta = Ptr::new(
                &region,
                layout.meta_offset,
                layout.total_bytes - layout.meta_offset,
            )?;
            let dbr = Ptr::new(&region, layout.dbr_offset, 8)?;
            Ok((buf, meta, dbr))
        })();
        let (buf, meta, dbr) = match setup {
            Ok(x) => x,
            Err(e) => return Err((e, region)),
        };
        let n = geometry.wqe_cnt;
        for i in 0..n {
            let next = (i + 1) % n;
            let seg = wqe::srq_next_seg(next as u16);
            let off = (i as usize) << geometry.wqe_shift;
            buf.w64(off, seg[0]);
            buf.w64(off + 8, seg[1]);
            meta.a16(layout.next + 2 * i as usize)
                .store(next as u16, Ordering::Relaxed);
            meta.a8(layout.posted + i as usize)
                .store(0, Ordering::Relaxed);
        }
        meta.a32(META_LOCK).store(0, Ordering::Relaxed);
        meta.a32(META_TAIL).store(n - 1, Ordering::Relaxed);
        meta.a32(META_HANDLES).store(0, Ordering::Relaxed);
        meta.a32(META_COMPLETED).store(0, Ordering::Release);
        dbr.w64(0, 0);
        Ok(Self {
            region,
            buf,
            meta,
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
        let tail = self.meta.a32(META_TAIL).load(Ordering::Acquire);
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
            self.buf.w64(base + 16 * j, seg[0]);
            self.buf.w64(base + 16 * j + 8, seg[1]);
            total += u64::from(sge.length);
            j += 1;
        }
        if j < self.geometry.max_gs as usize {
            let seg = wqe::data_seg_end();
            self.buf.w64(base + 16 * j, seg[0]);
            self.buf.w64(base + 16 * j + 8, seg[1]);
        }
        self.meta
            .a64(self.layout.wrid + 8 * idx)
            .store(wr.wr_id, Ordering::Relaxed);
        self.meta
            .a32(self.layout.len + 4 * idx)
            .store(total.min(u64::from(u32::MAX)) as u32, Ordering::Relaxed);
        self.meta
            .a8(self.layout.posted + idx)
            .store(1, Ordering::Release);
        // Host-only mirror, always < wqe_cnt (written by this module only).
        let next = self
            .meta
            .a16(self.layout.next + 2 * idx)
            .load(Ordering::Relaxed);
        self.head = u32::from(next) & (self.geometry.wqe_cnt - 1);
        self.counter = self.counter.wrapping_add(1);
        self.posted = self.posted.wrapping_add(1);
        Ok(())
    }

    #[inline(always)]
    fn publish(&mut self) {
        barrier::udma_to_device_barrier();
        self.dbr.w32(0, Be32::new(self.counter & 0xffff).to_raw());
    }

    /// Posts one receive work request (`ibv_post_srq_recv`).
    pub fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), Error> {
        self.build(wr)?;
        self.publish();
        Ok(())
    }

    /// Posts a list; on a rejected request the ones before it are posted.
    pub fn post_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let mut n = 0;
        let mut err = None;
        for wr in wrs {
            if let Err(e) = self.build(wr) {
                err = Some(e);
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.publish();
        }
        match err {
            None => Ok(()),
            Some(error) => Err(PostError { posted: n, error }),
        }
    }

    /// Work requests posted and not completed (software view of the SRQ
    /// limit counter).
    pub fn outstanding(&self) -> u32 {
        self.posted
            .wrapping_sub(self.meta.a32(META_COMPLETED).load(Ordering::Acquire))
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
    pub fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// A completion handle, for every QP that uses this SRQ (pass it to
    /// [`Qp::completions`](crate::Qp::completions)).
    pub fn completions(&self) -> SrqCompletions {
        self.meta.a32(META_HANDLES).fetch_add(1, Ordering::AcqRel);
        SrqCompletions {
            srqn: self.srqn,
            buf: self.buf,
            meta: self.meta,
            layout: self.layout,
            wqe_cnt: self.geometry.wqe_cnt,
            wqe_shift: self.geometry.wqe_shift,
        }
    }

    /// Completion handles alive.
    pub fn handles_alive(&self) -> u32 {
        self.meta.a32(META_HANDLES).load(Ordering::Acquire)
    }

    /// Gives the region back after DESTROY_SRQ, or the SRQ while handles are
    /// alive.
    pub fn into_parts(self) -> Result<DmaRegion, Self> {
        if self.handles_alive() != 0 {
            return Err(self);
        }
        Ok(self.region)
    }
}

/// The completion side of an SRQ: resolves a responder CQE's wqe_counter to
/// its `wr_id` and returns the WQE to the free list.
#[derive(Debug)]
pub struct SrqCompletions {
    srqn: u32,
    buf: Ptr,
    meta: Ptr,
    layout: SrqLayout,
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
                .meta
                .a8(self.layout.posted + idx)
                .load(Ordering::Acquire)
                == 0
        {
            return Err(Error::CqeWqeCounter {
                ci,
                counter,
                queue: "SRQ",
            });
        }
        let len = self
            .meta
            .a32(self.layout.len + 4 * idx)
            .load(Ordering::Relaxed);
        Ok(SrqWqe { idx, len })
    }

    /// Takes the `wr_id` of a checked WQE and appends it to the free list
    /// (rdma-core `mlx5_free_srq_wqe`). Fails without changing anything if
    /// the list lock stays contended, or if another CQ retired the WQE
    /// meanwhile.
    #[inline(always)]
    pub(crate) fn retire(&self, w: &SrqWqe, counter: u16, ci: u32) -> Result<u64, Error> {
        let lock = self.meta.a32(META_LOCK);
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
        let posted = self.meta.a8(self.layout.posted + w.idx);
        if posted.swap(0, Ordering::AcqRel) == 0 {
            lock.store(0, Ordering::Release);
            return Err(Error::CqeWqeCounter {
                ci,
                counter,
                queue: "SRQ",
            });
        }
        let wr_id = self
            .meta
            .a64(self.layout.wrid + 8 * w.idx)
            .load(Ordering::Relaxed);
        let tail_a = self.meta.a32(META_TAIL);
        let tail = tail_a.load(Ordering::Relaxed) as usize & (self.wqe_cnt as usize - 1);
        // The device follows the ring's next index; the poster the mirror.
        self.buf
            .w16((tail << self.wqe_shift) + 2, (w.idx as u16).to_be());
        self.meta
            .a16(self.layout.next + 2 * tail)
            .store(w.idx as u16, Ordering::Relaxed);
        tail_a.store(w.idx as u32, Ordering::Release);
        self.meta
            .a32(META_COMPLETED)
            .fetch_add(1, Ordering::Release);
        lock.store(0, Ordering::Release);
        Ok(wr_id)
    }
}

impl Drop for SrqCompletions {
    fn drop(&mut self) {
        self.meta.a32(META_HANDLES).fetch_sub(1, Ordering::AcqRel);
    }
}
