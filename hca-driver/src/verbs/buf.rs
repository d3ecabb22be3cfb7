//! Data buffers in DMA memory: what memory regions are registered over.

use core::fmt;

use platform::{DmaRegion, Platform};

use crate::error::{Error, Result};
use crate::hca::{DmaUse, Hca};
use crate::verbs::share::{DefaultShare, Handle, Share};

/// Alignment of a [`DmaBuf`] (a page, so that any access mode fits).
pub const DMA_BUF_ALIGN: usize = 4096;

/// A buffer of DMA memory the device can reach, owned by the caller and
/// freed when dropped.
///
/// Its bytes are only ever copied in and out (the device may write them at
/// any time, so no reference into them exists). Addresses the device uses
/// (SGEs, RDMA remote addresses) are bus addresses: [`iova`](Self::iova)
/// plus an offset ([`addr`](Self::addr)). A memory region holds a handle
/// of the buffer, so the buffer outlives every key that names it; the
/// buffer holds a handle of its HCA.
pub struct DmaBuf<P: Platform + 'static, S: Share = DefaultShare> {
    hca: S::Ref<Hca<P>>,
    region: Option<DmaRegion>,
    len: usize,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for DmaBuf<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DmaBuf({:#x}, {} bytes)", self.iova(), self.len)
    }
}

impl<P: Platform + 'static, S: Share> DmaBuf<P, S> {
    /// Allocates a zeroed, page-aligned data buffer of `len` bytes on the
    /// HCA behind `hca`.
    pub fn alloc(hca: &impl Handle<Hca<P>, Share = S>, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::InvalidArgument {
                arg: "len",
                reason: "a buffer has at least one byte",
            });
        }
        let region = hca.dma_alloc(
            len,
            DMA_BUF_ALIGN,
            DmaUse::Buffers,
            "allocating a data buffer",
        )?;
        // The backend may round up; the buffer is what was asked for.
        Ok(DmaBuf {
            hca: hca.clone().into_ref(),
            region: Some(region),
            len,
        })
    }

    fn region(&self) -> &DmaRegion {
        self.region
            .as_ref()
            .expect("the region is present until the buffer is dropped")
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: buffers have at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bus address (IOVA) of the first byte.
    pub fn iova(&self) -> u64 {
        self.region().iova()
    }

    /// Bus address of byte `offset` (`offset <= len`).
    pub fn addr(&self, offset: usize) -> Result<u64> {
        self.check(offset, 0)?;
        Ok(self.iova() + offset as u64)
    }

    /// The handle of the HCA the buffer belongs to.
    pub fn hca(&self) -> &S::Ref<Hca<P>> {
        &self.hca
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument {
                arg: "offset",
                reason: "the range is outside the buffer",
            }),
        }
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        self.region().write_bytes(offset, src);
        Ok(())
    }

    /// Copies bytes from `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        self.region().read_bytes(offset, dst);
        Ok(())
    }

    /// Sets `len` bytes from `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check(offset, len)?;
        self.region().fill(offset, len, value);
        Ok(())
    }

    /// The 8 bytes at `offset` (e.g. an atomic target or result; decode
    /// with [`AtomicByteOrder`](crate::verbs::AtomicByteOrder)).
    pub fn read8(&self, offset: usize) -> Result<[u8; 8]> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(b)
    }

    /// Whether `[addr, addr + len)` (bus addresses) lies inside the buffer.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        self.region().contains_iova(addr, len) && addr - self.iova() + len as u64 <= self.len as u64
    }
}

impl<P: Platform + 'static, S: Share> Drop for DmaBuf<P, S> {
    fn drop(&mut self) {
        if let Some(r) = self.region.take() {
            self.hca.dma_free(r, DmaUse::Buffers);
        }
    }
}
