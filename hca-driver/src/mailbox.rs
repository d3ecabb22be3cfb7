//! The mailbox pool: DMA memory cut into 1 KiB-aligned slots for the
//! 576-byte command mailbox blocks (`cmd_if_box`), and chains of them.
//!
//! The pool grows by DMA chunks of 16..=256 blocks when a command needs
//! more blocks than are free (MANAGE_PAGES giving 12,868 pages needs 202),
//! and gives idle chunks back on [`MailboxPool::trim`]. Bookkeeping (one
//! bitmap per chunk) lives outside DMA memory. A chain is a short list of
//! runs of consecutive blocks; chunk indices are stable while a chain is
//! out (chunks are only removed when none of their blocks is in use).

use platform::DmaRegion;

use crate::bits;

/// Distance between two blocks (the PRM wants blocks 1 KiB aligned).
pub(crate) const BLOCK_STRIDE: usize = 1024;
/// Most blocks in one chunk.
pub(crate) const CHUNK_MAX_BLOCKS: usize = 256;
/// Fewest blocks in a chunk the pool adds.
pub(crate) const CHUNK_MIN_BLOCKS: usize = 16;
/// Most chunks the pool holds (at most 8,192 blocks: a 4 MiB message).
pub const MAX_MAILBOX_CHUNKS: usize = 32;
/// Most runs of consecutive blocks in one chain.
pub(crate) const MAX_CHAIN_RUNS: usize = 32;

/// Consecutive blocks of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) chunk: u8,
    pub(crate) first: u16,
    pub(crate) len: u16,
}

/// The blocks of one mailbox chain, in chain order.
///
/// Not `Clone`: [`MailboxPool::release`] takes the chain by value, so a
/// chain's blocks go back to the pool at most once.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    runs: heapless::Vec<Run, MAX_CHAIN_RUNS>,
    len: usize,
}

impl Chain {
    /// Number of blocks.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Chunk and block index of block `i` of the chain.
    pub(crate) fn locate(&self, i: usize) -> Option<(usize, usize)> {
        let mut k = i;
        for r in &self.runs {
            let len = usize::from(r.len);
            if k < len {
                return Some((usize::from(r.chunk), usize::from(r.first) + k));
            }
            k -= len;
        }
        None
    }
}

struct PoolChunk {
    region: DmaRegion,
    blocks: usize,
    used: [u64; CHUNK_MAX_BLOCKS / 64],
    used_count: usize,
}

/// Why the pool cannot hand out a chain.
#[derive(Debug)]
pub(crate) enum PoolError<E> {
    /// Growing failed.
    Grow(E),
    /// Every chunk slot is taken.
    TooManyChunks,
    /// The free blocks are too fragmented for one chain.
    TooManyRuns,
}

/// The pool.
pub(crate) struct MailboxPool {
    chunks: [Option<PoolChunk>; MAX_MAILBOX_CHUNKS],
}

impl MailboxPool {
    /// An empty pool.
    pub(crate) fn new() -> Self {
        Self {
            chunks: [const { None }; MAX_MAILBOX_CHUNKS],
        }
    }

    /// Free blocks.
    pub(crate) fn free_blocks(&self) -> usize {
        self.chunks
            .iter()
            .flatten()
            .map(|c| c.blocks - c.used_count)
            .sum()
    }

    /// Allocates a chain of `n` blocks, growing the pool with `grow(bytes)`
    /// (which returns a 4 KiB-aligned DMA region) when needed.
    pub(crate) fn alloc<E>(
        &mut self,
        n: usize,
        grow: &mut dyn FnMut(usize) -> Result<DmaRegion, E>,
    ) -> Result<Chain, PoolError<E>> {
        let mut chain = Chain::default();
        if n == 0 {
            return Ok(chain);
        }
        while self.free_blocks() < n {
            let slot = self
                .chunks
                .iter()
                .position(Option::is_none)
                .ok_or(PoolError::TooManyChunks)?;
            let blocks = (n - self.free_blocks()).clamp(CHUNK_MIN_BLOCKS, CHUNK_MAX_BLOCKS);
            let region = grow(blocks * BLOCK_STRIDE).map_err(PoolError::Grow)?;
            let blocks = (region.len() / BLOCK_STRIDE).min(CHUNK_MAX_BLOCKS);
            self.chunks[slot] = Some(PoolChunk {
                region,
                blocks,
                used: [0; CHUNK_MAX_BLOCKS / 64],
                used_count: 0,
            });
        }
        let mut need = n;
        'chunks: for (ci, c) in self.chunks.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            let mut i = 0;
            while need > 0 {
                let Some(start) = bits::first_clear(&c.used, i, c.blocks) else {
                    continue 'chunks;
                };
                let len = bits::clear_run(&c.used, start, c.blocks, need);
                let run = Run {
                    chunk: ci as u8,
                    first: start as u16,
                    len: len as u16,
                };
                if chain.runs.push(run).is_err() {
                    break 'chunks;
                }
                bits::put_range(&mut c.used, start, len, true);
                c.used_count += len;
                chain.len += len;
                need -= len;
                i = start + len;
            }
            break;
        }
        if need > 0 {
            self.release(chain);
            return Err(PoolError::TooManyRuns);
        }
        Ok(chain)
    }

    /// Blocks handed out in chains and not yet released.
    #[cfg(test)]
    pub(crate) fn used_blocks(&self) -> usize {
        self.chunks.iter().flatten().map(|c| c.used_count).sum()
    }

    /// Returns a chain's blocks.
    pub(crate) fn release(&mut self, chain: Chain) {
        for r in &chain.runs {
            let Some(c) = self.chunks[usize::from(r.chunk)].as_mut() else {
                debug_assert!(false, "chain names a chunk that is gone");
                continue;
            };
            bits::put_range(&mut c.used, usize::from(r.first), usize::from(r.len), false);
            c.used_count -= usize::from(r.len);
        }
    }

    /// The region and byte offset of block `i` of `chain`.
    ///
    /// # Panics
    ///
    /// If `i` is outside the chain (an internal invariant).
    pub(crate) fn block(&self, chain: &Chain, i: usize) -> (&DmaRegion, usize) {
        let (ci, bi) = chain.locate(i).expect("block index inside the chain");
        let c = self.chunks[ci].as_ref().expect("chain chunk present");
        (&c.region, bi * BLOCK_STRIDE)
    }

    /// Bus address of block `i` of `chain`.
    pub(crate) fn iova(&self, chain: &Chain, i: usize) -> u64 {
        let (r, off) = self.block(chain, i);
        r.iova_at(off)
    }

    /// Hands every chunk without a block in use to `free`, keeping the
    /// first `keep` of them.
    pub(crate) fn trim(&mut self, mut keep: usize, free: &mut dyn FnMut(DmaRegion)) {
        for slot in self.chunks.iter_mut() {
            if slot.as_ref().is_some_and(|c| c.used_count == 0) {
                if keep > 0 {
                    keep -= 1;
                    continue;
                }
                if let Some(c) = slot.take() {
                    free(c.region);
                }
            }
        }
    }

    /// Hands every chunk to `free`, in use or not (the device must no
    /// longer be able to touch them).
    pub(crate) fn drain(&mut self, free: &mut dyn FnMut(DmaRegion)) {
        for slot in self.chunks.iter_mut() {
            if let Some(c) = slot.take() {
                free(c.region);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::cell::RefCell;
    use std::vec::Vec;

    use platform::host::HostBlock;

    use super::*;

    fn chain_blocks(c: &Chain) -> Vec<(usize, usize)> {
        (0..c.len()).map(|i| c.locate(i).unwrap()).collect()
    }

    #[test]
    fn runs_locate_blocks_in_order() {
        let mut c = Chain::default();
        c.runs
            .push(Run {
                chunk: 1,
                first: 4,
                len: 2,
            })
            .unwrap();
        c.runs
            .push(Run {
                chunk: 0,
                first: 0,
                len: 1,
            })
            .unwrap();
        c.len = 3;
        assert_eq!(chain_blocks(&c), [(1, 4), (1, 5), (0, 0)]);
        assert_eq!(c.locate(3), None);
    }

    /// Heap memory lent out as DMA regions at made-up bus addresses.
    struct Lender {
        blocks: RefCell<Vec<HostBlock>>,
        next_iova: RefCell<u64>,
        limit: usize,
    }

    impl Lender {
        fn new(limit: usize) -> Self {
            Self {
                blocks: RefCell::new(Vec::new()),
                next_iova: RefCell::new(0x10_0000),
                limit,
            }
        }
        fn grow(&self, bytes: usize) -> Result<DmaRegion, &'static str> {
            if self.blocks.borrow().len() >= self.limit {
                return Err("no more memory");
            }
            let b = HostBlock::new(bytes, 4096).unwrap();
            let mut iova = self.next_iova.borrow_mut();
            let r = b.lend(*iova, 0).unwrap();
            *iova += bytes.next_multiple_of(1 << 20) as u64;
            self.blocks.borrow_mut().push(b);
            Ok(r)
        }
        fn reclaim(&self, r: DmaRegion) {
            let blocks = self.blocks.borrow();
            let mut r = Some(r);
            for b in blocks.iter() {
                match b.reclaim(r.take().unwrap()) {
                    Ok(()) => return,
                    Err(back) => r = Some(back),
                }
            }
            panic!("region of no block");
        }
        fn outstanding(&self) -> usize {
            self.blocks.borrow().iter().filter(|b| b.is_lent()).count()
        }
    }

    #[test]
    fn chains_grow_the_pool_and_blocks_are_1k_aligned_and_distinct() {
        let l = Lender::new(8);
        let mut pool = MailboxPool::new();
        let mut grow = |n| l.grow(n);
        let a = pool.alloc(3, &mut grow).unwrap();
        assert_eq!(pool.free_blocks(), CHUNK_MIN_BLOCKS - 3);
        assert_eq!(pool.used_blocks(), 3);
        // The trace's MANAGE_PAGES: 202 blocks.
        let big = pool.alloc(202, &mut grow).unwrap();
        assert_eq!(big.len(), 202);
        let mut seen = std::collections::BTreeSet::new();
        for c in [&a, &big] {
            for i in 0..c.len() {
                let iova = pool.iova(c, i);
                assert_eq!(iova % MAILBOX_ALIGN_TEST, 0);
                assert!(seen.insert(iova), "block handed out twice");
            }
        }
        pool.release(big);
        pool.release(a);
        assert_eq!(l.outstanding(), 2);
        let mut freed = Vec::new();
        pool.trim(1, &mut |r| freed.push(r));
        assert_eq!(freed.len(), 1);
        for r in freed {
            l.reclaim(r);
        }
        assert_eq!(l.outstanding(), 1);
        pool.drain(&mut |r| l.reclaim(r));
        assert_eq!(l.outstanding(), 0);
    }

    const MAILBOX_ALIGN_TEST: u64 = firmware_cmds::mailbox::MAILBOX_ALIGN;

    #[test]
    fn growth_failure_and_fragmentation_are_errors_without_leaks() {
        let l = Lender::new(1);
        let mut pool = MailboxPool::new();
        let mut grow = |n| l.grow(n);
        // One chunk of 16 blocks, then no more memory.
        let a = pool.alloc(16, &mut grow).unwrap();
        assert!(matches!(
            pool.alloc(1, &mut grow),
            Err(PoolError::Grow("no more memory"))
        ));
        pool.release(a);
        // A checkerboard of single free blocks: a chain needs one run per
        // block.
        let singles: Vec<Chain> = (0..16).map(|_| pool.alloc(1, &mut grow).unwrap()).collect();
        for (i, c) in singles.into_iter().enumerate() {
            if i % 2 == 0 {
                pool.release(c);
            }
        }
        let eight = pool.alloc(8, &mut grow).unwrap();
        assert_eq!(eight.runs.len(), 8);
        pool.release(eight);
        let l2 = Lender::new(64);
        let mut big_pool = MailboxPool::new();
        let mut grow2 = |n| l2.grow(n);
        let all = big_pool.alloc(128, &mut grow2).unwrap();
        assert_eq!(all.runs.len(), 1);
        let per: Vec<Chain> = {
            big_pool.release(all);
            (0..128)
                .map(|_| big_pool.alloc(1, &mut grow2).unwrap())
                .collect()
        };
        for (i, c) in per.into_iter().enumerate() {
            if i % 2 == 0 {
                big_pool.release(c);
            }
        }
        // 64 scattered free blocks cannot form one chain of 40 blocks in
        // 32 runs: refused, and nothing stays allocated.
        let before = big_pool.free_blocks();
        assert!(matches!(
            big_pool.alloc(40, &mut |_| Err("no growth")),
            Err(PoolError::TooManyRuns)
        ));
        assert_eq!(big_pool.free_blocks(), before);
        big_pool.drain(&mut |r| l2.reclaim(r));
        pool.drain(&mut |r| l.reclaim(r));
        assert_eq!(l.outstanding() + l2.outstanding(), 0);
    }
}
