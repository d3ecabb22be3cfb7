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
#[derive(Clone, Debug, Default)]
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
            self.release(&chain);
            return Err(PoolError::TooManyRuns);
        }
        Ok(chain)
    }

    /// Returns a chain's blocks.
    pub(crate) fn release(&mut self, chain: &Chain) {
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
    use std::vec::Vec;

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
}
