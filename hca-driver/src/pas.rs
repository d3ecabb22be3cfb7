//! Physical address lists (`pas`): the page list after the fixed part of
//! CREATE_EQ, CREATE_CQ, CREATE_QP, CREATE_SRQ and the MTT of CREATE_MKEY,
//! encoded piecewise (no list is built in memory).

use firmware_cmds::command::Encode;
use firmware_cmds::layout::Layout;
use platform::DmaRegion;

/// Size of the pages a [`PageList`] describes when built from a region
/// (`log_page_size` 0 in the contexts).
pub const PAS_PAGE_SIZE: usize = 4096;

#[derive(Clone, Copy, Debug)]
enum Pages<'a> {
    Contiguous { iova: u64, count: usize, size: u64 },
    List(&'a [u64]),
}

/// A command input head followed by 64-bit page addresses.
///
/// ```
/// use firmware_cmds::command::Encode;
/// use firmware_cmds::eq::CreateEqIn;
/// use hca_driver::PageList;
///
/// let head = CreateEqIn::new();
/// let m = PageList::contiguous(&head, 0x10_0000, 4096, 2);
/// assert_eq!(m.encoded_len(), 0x110 + 16);
/// let mut b = [0u8; 8];
/// m.encode_range(0x118, &mut b);
/// assert_eq!(u64::from_be_bytes(b), 0x10_1000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PageList<'a, H> {
    head: &'a H,
    pages: Pages<'a>,
    flags: u64,
    /// Entries sent: `count()` rounded up to a multiple of this (the MTT
    /// goes in 16-byte octowords of two entries).
    multiple: usize,
}

impl<'a, H: Layout> PageList<'a, H> {
    /// `count` pages of `page_size` bytes, consecutive from `iova`.
    pub fn contiguous(head: &'a H, iova: u64, page_size: usize, count: usize) -> Self {
        Self {
            head,
            pages: Pages::Contiguous {
                iova,
                count,
                size: page_size as u64,
            },
            flags: 0,
            multiple: 1,
        }
    }

    /// The 4 KiB pages of a DMA region (contiguous in bus address space).
    pub fn of_region(head: &'a H, region: &DmaRegion) -> Self {
        Self::contiguous(
            head,
            region.iova(),
            PAS_PAGE_SIZE,
            region.len().div_ceil(PAS_PAGE_SIZE),
        )
    }

    /// An explicit list of page addresses.
    pub fn list(head: &'a H, pages: &'a [u64]) -> Self {
        Self {
            head,
            pages: Pages::List(pages),
            flags: 0,
            multiple: 1,
        }
    }

    /// ORs `flags` into every entry: the low bits of an MTT entry
    /// (`MLX5_IB_MTT_READ` 1, `MLX5_IB_MTT_WRITE` 2) that page addresses,
    /// being page aligned, leave free.
    pub fn with_flags(mut self, flags: u64) -> Self {
        self.flags = flags;
        self
    }

    /// Sends the list as whole octowords (16 bytes, two entries), the last
    /// one padded with a zero entry when the page count is odd: what
    /// CREATE_MKEY's `translations_octword_actual_size` counts, and what
    /// Linux (`mlx5_ib` mr.c, `reg_create`) and rdma-core
    /// (`mlx5_vfio_reg_mr`) send.
    pub fn in_octowords(mut self) -> Self {
        self.multiple = 2;
        self
    }

    /// Entries sent, padding included.
    pub fn entries(&self) -> usize {
        self.count().next_multiple_of(self.multiple)
    }

    /// Number of pages.
    pub fn count(&self) -> usize {
        match self.pages {
            Pages::Contiguous { count, .. } => count,
            Pages::List(l) => l.len(),
        }
    }

    fn page(&self, k: usize) -> u64 {
        match self.pages {
            Pages::Contiguous { iova, size, .. } => iova + k as u64 * size,
            Pages::List(l) => l[k],
        }
    }
}

impl<H: Layout> Encode for PageList<'_, H> {
    fn encoded_len(&self) -> usize {
        H::SIZE + 8 * self.entries()
    }

    fn encode_range(&self, offset: usize, dst: &mut [u8]) {
        let head = self.head.bytes();
        let n = self.count();
        for (i, d) in dst.iter_mut().enumerate() {
            let pos = offset + i;
            *d = if pos < head.len() {
                head[pos]
            } else {
                let k = (pos - head.len()) / 8;
                if k < n {
                    (self.page(k) | self.flags).to_be_bytes()[(pos - head.len()) % 8]
                } else {
                    0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use firmware_cmds::cq::CreateCqIn;

    use super::*;

    #[test]
    fn list_and_contiguous_encode_alike() {
        let head = CreateCqIn::new();
        let addrs = [0x2000u64, 0x3000, 0x4000];
        let a = PageList::list(&head, &addrs);
        let b = PageList::contiguous(&head, 0x2000, 4096, 3);
        let mut x = [0xa5u8; 0x110 + 32];
        let mut y = [0x5au8; 0x110 + 32];
        a.encode_range(0, &mut x);
        b.encode_range(0, &mut y);
        assert_eq!(x, y);
        assert_eq!(&x[0x110..0x118], &0x2000u64.to_be_bytes());
        assert_eq!(&x[0x128..], &[0u8; 8]);
        assert_eq!(&x[..2], &[0x04, 0x00]);
        let c = b.with_flags(3);
        c.encode_range(0x110, &mut y[..8]);
        assert_eq!(&y[..8], &0x2003u64.to_be_bytes());
    }

    #[test]
    fn octowords_pad_an_odd_list_with_a_zero_entry() {
        let head = CreateCqIn::new();
        for (pages, sent) in [(1usize, 2usize), (2, 2), (3, 4), (0, 0)] {
            let l = PageList::contiguous(&head, 0x2000, 4096, pages)
                .with_flags(1)
                .in_octowords();
            assert_eq!(l.entries(), sent, "{pages} pages");
            assert_eq!(l.encoded_len(), 0x110 + 8 * sent);
            let mut b = [0xa5u8; 0x110 + 32];
            let b = &mut b[..l.encoded_len()];
            l.encode_range(0, b);
            if sent > pages {
                // The padding entry is zero, flags included.
                assert_eq!(&b[b.len() - 8..], &[0u8; 8]);
            }
        }
    }
}
