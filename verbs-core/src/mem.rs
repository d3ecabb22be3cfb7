//! Queue memory helpers. Every access to a queue's DMA region goes through
//! [`platform::ring`]'s views, which are in bounds by construction; this
//! module only holds the layout checks and the bookkeeping header type the
//! queues share.

use core::sync::atomic::AtomicU32;

use platform::DmaRegion;
use platform::ring::{HostTable, QueueMem, SlotRing};

use crate::Error;

/// The bookkeeping header of a send queue or SRQ: sixteen 32-bit counters
/// and flags (64 bytes, the first of the meta area).
pub(crate) type Hdr = [AtomicU32; 16];

/// A QP's own header (receive counters, handle flags): 32 bytes in the
/// host part between the platform's view counter and the meta area.
pub(crate) type QpHdr = [AtomicU32; 8];

/// A send queue's WQEBBs with its header and send table.
pub(crate) type SqRing = SlotRing<crate::qp::SqEntry, Hdr>;

/// The header and send table of an [`SqRing`], borrowed.
pub(crate) type SqCells<'a> = platform::ring::Cells<'a, crate::qp::SqEntry, Hdr>;

/// Word `i` (a constant below the header's length) of a queue's header.
#[inline(always)]
pub(crate) fn hdr<const N: usize>(h: &HostTable<[AtomicU32; N]>, i: usize) -> &AtomicU32
where
    [AtomicU32; N]: platform::ring::HostCell,
{
    &h.first()[i]
}

/// Word `i` (a constant below 16) of a send queue's header.
#[inline(always)]
pub(crate) fn sq_hdr(r: &SqRing, i: usize) -> &AtomicU32 {
    &r.header()[i]
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

/// The region of a queue memory whose views are all gone (the queue that
/// owned it dropped its own, and its completion handles are accounted
/// for). A view still alive here is a broken invariant of this crate.
pub(crate) fn into_region(mem: QueueMem) -> DmaRegion {
    match mem.into_region() {
        Ok(r) => r,
        Err(mem) => panic!(
            "verbs-core: {} views of a queue's memory alive when it is taken apart",
            mem.views()
        ),
    }
}
