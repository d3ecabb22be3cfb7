//! A page allocator over a bitmap: the bookkeeping of the bare-metal backend
//! (one region) and of the vfio backend (one per DMA chunk).
//!
//! Two bits per page, kept outside the memory being managed (a device cannot
//! corrupt them): `used` marks allocated pages and `start` marks the first
//! page of each allocation, so the extent of every allocation is known and a
//! free of the wrong length, of a page in the middle of an allocation, or of
//! something already freed is refused. Freeing clears the bits, so adjacent
//! free runs coalesce by construction. Allocation is first fit over the
//! candidate start pages, which makes any fitting hole in a fragmented
//! region usable.

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllocFail {
    /// No free run of the requested length starts at an aligned page.
    NoSpace,
    /// Free runs exist, but the caller's `accept` refused every one.
    Rejected,
}

/// Why a free was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FreeFail {
    /// No allocation starts at this page (freed twice, never allocated, or a
    /// page in the middle of an allocation).
    NotAllocated,
    /// An allocation starts here but has another length.
    LengthMismatch {
        /// Pages of the allocation that starts there.
        allocated: usize,
    },
}

const BITS: usize = u64::BITS as usize;

/// Number of `u64` words needed for `pages` bits.
#[cfg_attr(not(feature = "vfio"), allow(dead_code))]
pub(crate) const fn words_for(pages: usize) -> usize {
    pages.div_ceil(BITS)
}

/// The bitmap of a run of `pages` pages.
#[derive(Debug)]
pub(crate) struct PageBitmap<S> {
    used: S,
    start: S,
    pages: usize,
    allocated: usize,
}

fn get(bits: &[u64], i: usize) -> bool {
    bits[i / BITS] >> (i % BITS) & 1 == 1
}

/// Sets (or clears) bits `from .. from + n`.
fn set_range(bits: &mut [u64], from: usize, n: usize, value: bool) {
    let mut i = from;
    let end = from + n;
    while i < end {
        let bit = i % BITS;
        let take = (BITS - bit).min(end - i);
        let mask = if take == BITS {
            u64::MAX
        } else {
            ((1u64 << take) - 1) << bit
        };
        if value {
            bits[i / BITS] |= mask;
        } else {
            bits[i / BITS] &= !mask;
        }
        i += take;
    }
}

/// The first set bit in `from .. to`, if any.
fn first_set(bits: &[u64], from: usize, to: usize) -> Option<usize> {
    let mut i = from;
    while i < to {
        let bit = i % BITS;
        let word = bits[i / BITS] >> bit;
        if word != 0 {
            let found = i + word.trailing_zeros() as usize;
            return (found < to).then_some(found);
        }
        i += BITS - bit;
    }
    None
}

/// The first clear bit in `from .. to`, if any.
fn first_clear(bits: &[u64], from: usize, to: usize) -> Option<usize> {
    let mut i = from;
    while i < to {
        let bit = i % BITS;
        let word = !bits[i / BITS] >> bit;
        if word != 0 {
            let found = i + word.trailing_zeros() as usize;
            return (found < to).then_some(found);
        }
        i += BITS - bit;
    }
    None
}

impl<S: AsRef<[u64]> + AsMut<[u64]>> PageBitmap<S> {
    /// A bitmap of `pages` free pages over the given storage (zeroed here).
    ///
    /// # Panics
    ///
    /// If the storage holds fewer than `pages` bits (an internal invariant:
    /// the backends size it).
    pub(crate) fn new(mut used: S, mut start: S, pages: usize) -> Self {
        assert!(used.as_ref().len() * BITS >= pages && start.as_ref().len() * BITS >= pages);
        used.as_mut().fill(0);
        start.as_mut().fill(0);
        Self {
            used,
            start,
            pages,
            allocated: 0,
        }
    }

    /// Pages managed.
    pub(crate) fn pages(&self) -> usize {
        self.pages
    }

    /// Pages allocated.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }

    /// Whether nothing is allocated.
    #[cfg_attr(not(feature = "vfio"), allow(dead_code))]
    pub(crate) fn is_empty(&self) -> bool {
        self.allocated == 0
    }

    /// The longest run of free pages.
    pub(crate) fn largest_free_run(&self) -> usize {
        let used = self.used.as_ref();
        let mut best = 0;
        let mut i = 0;
        while let Some(free) = first_clear(used, i, self.pages) {
            let end = first_set(used, free, self.pages).unwrap_or(self.pages);
            best = best.max(end - free);
            i = end;
        }
        best
    }

    /// Allocates `n` pages starting at a page `p` with
    /// `(p + phase) % align == 0` (`align` a power of two, in pages) and
    /// `accept(p)`, lowest such page first.
    pub(crate) fn alloc(
        &mut self,
        n: usize,
        align: usize,
        phase: usize,
        mut accept: impl FnMut(usize) -> bool,
    ) -> Result<usize, AllocFail> {
        debug_assert!(align.is_power_of_two());
        if n == 0 || n > self.pages {
            return Err(AllocFail::NoSpace);
        }
        let mask = align - 1;
        // The first candidate at or after `i`.
        let next = |i: usize| i + ((align - ((i + phase) & mask)) & mask);
        let mut rejected = false;
        let mut p = next(0);
        while p.checked_add(n).is_some_and(|end| end <= self.pages) {
            match first_set(self.used.as_ref(), p, p + n) {
                Some(q) => p = next(q + 1),
                None if accept(p) => {
                    set_range(self.used.as_mut(), p, n, true);
                    set_range(self.start.as_mut(), p, 1, true);
                    self.allocated += n;
                    return Ok(p);
                }
                None => {
                    rejected = true;
                    p += align;
                }
            }
        }
        Err(if rejected {
            AllocFail::Rejected
        } else {
            AllocFail::NoSpace
        })
    }

    /// Pages of the allocation starting at `first`, if one starts there.
    pub(crate) fn extent(&self, first: usize) -> Option<usize> {
        if first >= self.pages || !get(self.start.as_ref(), first) {
            return None;
        }
        let used = self.used.as_ref();
        let start = self.start.as_ref();
        let mut end = first + 1;
        while end < self.pages && get(used, end) && !get(start, end) {
            end += 1;
        }
        Some(end - first)
    }

    /// Frees the allocation of `n` pages starting at `first`.
    pub(crate) fn free(&mut self, first: usize, n: usize) -> Result<(), FreeFail> {
        let allocated = self.extent(first).ok_or(FreeFail::NotAllocated)?;
        if allocated != n {
            return Err(FreeFail::LengthMismatch { allocated });
        }
        set_range(self.used.as_mut(), first, n, false);
        set_range(self.start.as_mut(), first, 1, false);
        self.allocated -= n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitmap(pages: usize) -> PageBitmap<[u64; 4]> {
        PageBitmap::new([0; 4], [0; 4], pages)
    }

    #[test]
    fn bit_helpers_cross_word_boundaries() {
        let mut b = [0u64; 3];
        set_range(&mut b, 60, 70, true);
        assert_eq!(first_set(&b, 0, 192), Some(60));
        assert_eq!(first_clear(&b, 60, 192), Some(130));
        assert_eq!(first_set(&b, 130, 192), None);
        assert_eq!(first_set(&b, 0, 60), None);
        set_range(&mut b, 64, 64, false);
        assert_eq!(b[1], 0);
        assert_eq!(first_set(&b, 61, 192), Some(61));
        assert_eq!(first_set(&b, 64, 192), Some(128));
        assert_eq!(first_clear(&[u64::MAX; 2], 0, 128), None);
    }

    #[test]
    fn first_fit_alignment_and_phase() {
        let mut m = bitmap(200);
        assert_eq!(m.alloc(3, 1, 0, |_| true), Ok(0));
        assert_eq!(m.alloc(1, 4, 0, |_| true), Ok(4));
        // Phase 1: candidates are pages 3, 7, 11...
        assert_eq!(m.alloc(2, 4, 1, |_| true), Ok(7));
        assert_eq!(m.alloc(1, 1, 0, |_| true), Ok(3));
        assert_eq!(m.allocated(), 7);
        assert_eq!(m.extent(7), Some(2));
        assert_eq!(m.extent(8), None);
    }

    #[test]
    fn rejection_is_reported_apart_from_exhaustion() {
        let mut m = bitmap(16);
        assert_eq!(m.alloc(2, 1, 0, |_| false), Err(AllocFail::Rejected));
        assert_eq!(m.alloc(17, 1, 0, |_| true), Err(AllocFail::NoSpace));
        assert_eq!(m.alloc(0, 1, 0, |_| true), Err(AllocFail::NoSpace));
        assert_eq!(m.alloc(2, 1, 0, |p| p >= 5), Ok(5));
    }

    #[test]
    fn free_checks_start_and_length_then_coalesces() {
        let mut m = bitmap(8);
        let a = m.alloc(3, 1, 0, |_| true).unwrap();
        let b = m.alloc(3, 1, 0, |_| true).unwrap();
        let c = m.alloc(2, 1, 0, |_| true).unwrap();
        assert_eq!((a, b, c), (0, 3, 6));
        assert_eq!(m.largest_free_run(), 0);
        assert_eq!(m.free(4, 1), Err(FreeFail::NotAllocated));
        assert_eq!(m.free(3, 2), Err(FreeFail::LengthMismatch { allocated: 3 }));
        m.free(b, 3).unwrap();
        assert_eq!(m.free(b, 3), Err(FreeFail::NotAllocated));
        assert_eq!(m.largest_free_run(), 3);
        m.free(a, 3).unwrap();
        assert_eq!(m.largest_free_run(), 6);
        assert_eq!(m.alloc(6, 1, 0, |_| true), Ok(0));
        m.free(0, 6).unwrap();
        m.free(c, 2).unwrap();
        assert!(m.is_empty());
        assert_eq!(m.largest_free_run(), 8);
    }
}
