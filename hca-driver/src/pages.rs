//! Bookkeeping of the 4 KiB pages given to the firmware (MANAGE_PAGES).
//!
//! Pages come from DMA chunks of up to 512 pages; each chunk has a bitmap
//! (kept outside DMA memory) of the pages the firmware holds. Every address
//! the firmware returns is checked against it: an address outside every
//! chunk, misaligned, or not held (returned twice) is refused and changes
//! nothing, so a confused or malicious device can never make the driver
//! free memory twice. A chunk whose pages have all come back can be
//! returned to the platform.

use firmware_cmds::command::Encode;
use firmware_cmds::hca::{FW_PAGE_SIZE, ManagePagesIn};
use firmware_cmds::layout::Layout;

use crate::bits;

/// Most pages in one chunk.
pub(crate) const CHUNK_MAX_PAGES: usize = 512;
/// Most DMA chunks of firmware pages (with 512-page chunks: 256 MiB).
pub const MAX_PAGE_CHUNKS: usize = 128;
/// Most runs of consecutive pages in one MANAGE_PAGES give.
pub(crate) const MAX_GIVE_RUNS: usize = 64;

/// Consecutive pages of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageRun {
    pub(crate) chunk: u16,
    pub(crate) first: u16,
    pub(crate) len: u16,
}

/// The pages of one give, in `pas` order.
pub(crate) type PageRuns = heapless::Vec<PageRun, MAX_GIVE_RUNS>;

/// Pages in a list of runs.
pub(crate) fn run_pages(runs: &PageRuns) -> usize {
    runs.iter().map(|r| usize::from(r.len)).sum()
}

#[derive(Clone, Debug)]
struct PageChunk {
    iova: u64,
    pages: usize,
    used: [u64; CHUNK_MAX_PAGES / 64],
    used_count: usize,
}

/// Why a returned page is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReturnedPageError {
    /// Not 4 KiB aligned.
    Misaligned,
    /// In no chunk of the driver.
    Unknown,
    /// In a chunk, but not held by the firmware (returned twice, or never
    /// given).
    NotHeld,
}

impl ReturnedPageError {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            ReturnedPageError::Misaligned => "is not 4 KiB aligned",
            ReturnedPageError::Unknown => "the driver never gave it",
            ReturnedPageError::NotHeld => {
                "the firmware does not hold (returned twice, or never given)"
            }
        }
    }
}

/// The bookkeeping.
#[derive(Debug)]
pub(crate) struct PageBook {
    chunks: [Option<PageChunk>; MAX_PAGE_CHUNKS],
    held: u64,
    uncertain: u64,
}

impl PageBook {
    pub(crate) fn new() -> Self {
        Self {
            chunks: [const { None }; MAX_PAGE_CHUNKS],
            held: 0,
            uncertain: 0,
        }
    }

    /// Pages allocated to the firmware (given, or in a give whose outcome
    /// is unknown).
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// Pages of gives that timed out: the firmware may or may not hold them.
    pub(crate) fn uncertain(&self) -> u64 {
        self.uncertain
    }

    /// Free pages in the chunks.
    pub(crate) fn free_pages(&self) -> usize {
        self.chunks
            .iter()
            .flatten()
            .map(|c| c.pages - c.used_count)
            .sum()
    }

    /// A free chunk slot.
    pub(crate) fn free_slot(&self) -> Option<usize> {
        self.chunks.iter().position(Option::is_none)
    }

    /// Adds a chunk of `pages` pages at `iova` (4 KiB aligned) in slot
    /// `slot` (from [`free_slot`](Self::free_slot)).
    pub(crate) fn add_chunk(&mut self, slot: usize, iova: u64, pages: usize) {
        debug_assert!(self.chunks[slot].is_none() && iova % FW_PAGE_SIZE as u64 == 0);
        self.chunks[slot] = Some(PageChunk {
            iova,
            pages: pages.min(CHUNK_MAX_PAGES),
            used: [0; CHUNK_MAX_PAGES / 64],
            used_count: 0,
        });
    }

    /// Allocates up to `n` pages (fewer when the free pages are scattered
    /// over more than [`MAX_GIVE_RUNS`] runs, or fewer are free).
    pub(crate) fn alloc(&mut self, n: usize) -> PageRuns {
        let mut runs = PageRuns::new();
        let mut need = n;
        for (ci, c) in self.chunks.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            let mut i = 0;
            while need > 0 && !runs.is_full() {
                let Some(start) = bits::first_clear(&c.used, i, c.pages) else {
                    break;
                };
                let len = bits::clear_run(&c.used, start, c.pages, need);
                let _ = runs.push(PageRun {
                    chunk: ci as u16,
                    first: start as u16,
                    len: len as u16,
                });
                bits::put_range(&mut c.used, start, len, true);
                c.used_count += len;
                need -= len;
                i = start + len;
            }
            if need == 0 || runs.is_full() {
                break;
            }
        }
        self.held += (n - need) as u64;
        runs
    }

    /// Takes back pages whose give failed (the firmware refused it).
    pub(crate) fn release_runs(&mut self, runs: &PageRuns) {
        for r in runs {
            if let Some(c) = self.chunks[usize::from(r.chunk)].as_mut() {
                bits::put_range(&mut c.used, usize::from(r.first), usize::from(r.len), false);
                c.used_count -= usize::from(r.len);
                self.held -= u64::from(r.len);
            }
        }
    }

    /// Records that a give of `n` pages has an unknown outcome.
    pub(crate) fn mark_uncertain(&mut self, n: u64) {
        self.uncertain += n;
    }

    /// Address of page `k` of a list of runs.
    pub(crate) fn run_page_addr(&self, runs: &PageRuns, k: usize) -> Option<u64> {
        let mut k = k;
        for r in runs {
            let len = usize::from(r.len);
            if k < len {
                let c = self.chunks[usize::from(r.chunk)].as_ref()?;
                return Some(c.iova + ((usize::from(r.first) + k) * FW_PAGE_SIZE) as u64);
            }
            k -= len;
        }
        None
    }

    /// The firmware returned page `addr`: marks it free.
    pub(crate) fn take_back(&mut self, addr: u64) -> Result<(), ReturnedPageError> {
        if addr % FW_PAGE_SIZE as u64 != 0 {
            return Err(ReturnedPageError::Misaligned);
        }
        let c = self
            .chunks
            .iter_mut()
            .flatten()
            .find(|c| addr >= c.iova && (addr - c.iova) / (FW_PAGE_SIZE as u64) < c.pages as u64)
            .ok_or(ReturnedPageError::Unknown)?;
        let i = ((addr - c.iova) / FW_PAGE_SIZE as u64) as usize;
        if !bits::get(&c.used, i) {
            return Err(ReturnedPageError::NotHeld);
        }
        bits::put(&mut c.used, i, false);
        c.used_count -= 1;
        self.held -= 1;
        if self.uncertain > self.held {
            self.uncertain = self.held;
        }
        Ok(())
    }

    /// Slots of chunks none of whose pages the firmware holds.
    pub(crate) fn idle_chunks(&self) -> impl Iterator<Item = usize> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.as_ref().is_some_and(|c| c.used_count == 0))
            .map(|(i, _)| i)
    }

    /// Forgets the chunk in `slot`; returns whether there was one.
    pub(crate) fn remove_chunk(&mut self, slot: usize) -> bool {
        match self.chunks[slot].take() {
            Some(c) => {
                // Pages still marked held in a chunk that is dropped (after
                // the device was quiesced) are no longer held by anyone.
                self.held -= c.used_count as u64;
                if self.uncertain > self.held {
                    self.uncertain = self.held;
                }
                true
            }
            None => false,
        }
    }
}

/// The input of a MANAGE_PAGES give, encoded piecewise: the header and the
/// addresses of the pages of `runs`.
pub(crate) struct GiveMessage<'a> {
    pub(crate) head: ManagePagesIn,
    pub(crate) runs: &'a PageRuns,
    pub(crate) book: &'a PageBook,
    pub(crate) count: usize,
}

impl Encode for GiveMessage<'_> {
    fn encoded_len(&self) -> usize {
        ManagePagesIn::SIZE + 8 * self.count
    }

    fn encode_range(&self, offset: usize, dst: &mut [u8]) {
        let head = self.head.bytes();
        let mut cached: Option<(usize, [u8; 8])> = None;
        for (i, d) in dst.iter_mut().enumerate() {
            let pos = offset + i;
            *d = if pos < head.len() {
                head[pos]
            } else {
                let k = (pos - head.len()) / 8;
                if k >= self.count {
                    0
                } else {
                    let bytes = match cached {
                        Some((ck, b)) if ck == k => b,
                        _ => {
                            let b = self
                                .book
                                .run_page_addr(self.runs, k)
                                .unwrap_or(0)
                                .to_be_bytes();
                            cached = Some((k, b));
                            b
                        }
                    };
                    bytes[(pos - head.len()) % 8]
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    fn book_with(chunks: &[(u64, usize)]) -> PageBook {
        let mut b = PageBook::new();
        for &(iova, pages) in chunks {
            let s = b.free_slot().unwrap();
            b.add_chunk(s, iova, pages);
        }
        b
    }

    fn addrs(b: &PageBook, runs: &PageRuns) -> Vec<u64> {
        (0..run_pages(runs))
            .map(|k| b.run_page_addr(runs, k).unwrap())
            .collect()
    }

    #[test]
    fn alloc_spans_chunks_and_take_back_frees_exactly_once() {
        let mut b = book_with(&[(0x10_0000, 4), (0x20_0000, 8)]);
        assert_eq!(b.free_pages(), 12);
        let runs = b.alloc(6);
        assert_eq!(run_pages(&runs), 6);
        assert_eq!(b.held(), 6);
        assert_eq!(
            addrs(&b, &runs),
            [
                0x10_0000, 0x10_1000, 0x10_2000, 0x10_3000, 0x20_0000, 0x20_1000
            ]
        );
        b.take_back(0x10_2000).unwrap();
        assert_eq!(b.take_back(0x10_2000), Err(ReturnedPageError::NotHeld));
        assert_eq!(b.take_back(0x10_2800), Err(ReturnedPageError::Misaligned));
        assert_eq!(b.take_back(0x30_0000), Err(ReturnedPageError::Unknown));
        // One past the end of the first chunk is not in it.
        assert_eq!(b.take_back(0x10_4000), Err(ReturnedPageError::Unknown));
        // Never given, inside a chunk.
        assert_eq!(b.take_back(0x20_7000), Err(ReturnedPageError::NotHeld));
        assert_eq!(b.held(), 5);
        // The freed page is reused first.
        let again = b.alloc(1);
        assert_eq!(addrs(&b, &again), [0x10_2000]);
        assert_eq!(b.idle_chunks().count(), 0);
        for a in [0x10_0000, 0x10_1000, 0x10_2000, 0x10_3000] {
            b.take_back(a).unwrap();
        }
        assert_eq!(b.idle_chunks().collect::<Vec<_>>(), [0]);
        assert!(b.remove_chunk(0));
        assert_eq!(b.held(), 2);
        assert_eq!(b.take_back(0x10_0000), Err(ReturnedPageError::Unknown));
    }

    #[test]
    fn failed_give_releases_and_timed_out_give_stays_uncertain() {
        let mut b = book_with(&[(0x4000, 16)]);
        let runs = b.alloc(10);
        b.release_runs(&runs);
        assert_eq!((b.held(), b.free_pages()), (0, 16));
        let runs = b.alloc(10);
        b.mark_uncertain(run_pages(&runs) as u64);
        assert_eq!(b.uncertain(), 10);
        for a in addrs(&b, &runs).into_iter().take(4) {
            b.take_back(a).unwrap();
        }
        assert_eq!((b.held(), b.uncertain()), (6, 6));
        // Dropping the chunk after a quiesce forgets what it held.
        assert!(b.remove_chunk(0));
        assert_eq!((b.held(), b.uncertain()), (0, 0));
    }

    #[test]
    fn allocation_is_limited_by_free_pages_and_runs() {
        let mut b = book_with(&[(0x1000, 3)]);
        assert_eq!(run_pages(&b.alloc(5)), 3);
        assert_eq!(b.held(), 3);
        // A checkerboard of free pages makes one run per page.
        let mut b = book_with(&[(0x100_0000, 512)]);
        let all = b.alloc(512);
        for k in (0..512).step_by(2) {
            b.take_back(b.run_page_addr(&all, k).unwrap()).unwrap();
        }
        let runs = b.alloc(256);
        assert_eq!(runs.len(), MAX_GIVE_RUNS);
        assert_eq!(run_pages(&runs), MAX_GIVE_RUNS);
        assert_eq!(b.held(), 256 + MAX_GIVE_RUNS as u64);
    }

    #[test]
    fn give_message_encodes_header_and_addresses() {
        let mut b = book_with(&[(0x7_ab0e_0000, 2), (0x9000, 1)]);
        let runs = b.alloc(3);
        let head = ManagePagesIn::new()
            .with(ManagePagesIn::op_mod, 1)
            .unwrap()
            .with(ManagePagesIn::input_num_entries, 3)
            .unwrap();
        let m = GiveMessage {
            head,
            runs: &runs,
            book: &b,
            count: 3,
        };
        assert_eq!(m.encoded_len(), 16 + 24);
        let mut all = [0xa5u8; 48];
        m.encode_range(0, &mut all);
        assert_eq!(&all[..2], &[0x01, 0x08]);
        assert_eq!(&all[12..16], &[0, 0, 0, 3]);
        assert_eq!(&all[16..24], &0x7_ab0e_0000u64.to_be_bytes());
        assert_eq!(&all[24..32], &0x7_ab0e_1000u64.to_be_bytes());
        assert_eq!(&all[32..40], &0x9000u64.to_be_bytes());
        assert_eq!(&all[40..], &[0u8; 8]);
        // Any window gives the same bytes.
        let mut part = [0u8; 5];
        m.encode_range(21, &mut part);
        assert_eq!(part, all[21..26]);
    }
}
