//! User memory mapped for DMA: memory of the program (a `Vec`, a buffer a
//! C caller hands to `ibv_reg_mr`) that a device reaches in place, without
//! a copy, once [`Platform::map_user`](crate::Platform::map_user) has
//! mapped (and, on Linux, pinned) its pages.
//!
//! A [`UserMapping`] records what the backend mapped: the span of whole
//! 4 KiB pages that covers the caller's range, and the bus address (IOVA)
//! at which the device reaches the span's first byte. The span is
//! contiguous in bus address space in every backend, so the bus address of
//! any byte of it is [`UserMapping::iova_of`].

use core::ptr::NonNull;

use crate::PAGE_SIZE;

/// The pages a platform mapped for a device's access to user memory
/// ([`Platform::map_user`](crate::Platform::map_user)); give it back with
/// [`Platform::unmap_user`](crate::Platform::unmap_user).
///
/// It only records addresses: holding one gives no access to the memory.
/// It is deliberately not `Clone`, so that a mapping is unmapped once.
#[derive(Debug, PartialEq, Eq)]
pub struct UserMapping {
    host: usize,
    len: usize,
    iova: u64,
    cookie: usize,
}

impl UserMapping {
    /// A record of `len` bytes of host memory at `host` reachable by the
    /// device at `iova` (what a backend returns from `map_user`).
    /// `cookie` is the backend's own (to recognise its mappings).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
    /// `host`, `len` or `iova` is not a multiple of 4 KiB, `len` is zero,
    /// or a range wraps around.
    pub fn new(host: usize, len: usize, iova: u64, cookie: usize) -> Result<Self, crate::Error> {
        if host % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 || iova % PAGE_SIZE as u64 != 0 {
            return Err(crate::Error::InvalidArgument(
                "a user mapping covers whole 4 KiB pages",
            ));
        }
        if len == 0 {
            return Err(crate::Error::InvalidArgument("zero-length user mapping"));
        }
        if host.checked_add(len).is_none() || iova.checked_add(len as u64).is_none() {
            return Err(crate::Error::InvalidArgument(
                "user mapping wraps around the address space",
            ));
        }
        Ok(Self {
            host,
            len,
            iova,
            cookie,
        })
    }

    /// Host address of the first mapped byte (page aligned).
    pub fn host_addr(&self) -> usize {
        self.host
    }

    /// Bytes mapped (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: empty mappings are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bus address of the first mapped byte (page aligned).
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The backend's cookie.
    pub fn cookie(&self) -> usize {
        self.cookie
    }

    /// Bus address of host address `host`, if the mapping covers it.
    pub fn iova_of(&self, host: usize) -> Option<u64> {
        let off = host.checked_sub(self.host)?;
        (off < self.len).then(|| self.iova + off as u64)
    }

    /// Whether `len` bytes at host address `host` lie inside the mapping.
    pub fn covers(&self, host: usize, len: usize) -> bool {
        host >= self.host
            && (host - self.host)
                .checked_add(len)
                .is_some_and(|end| end <= self.len)
    }
}

/// The caller's promise about a range of its memory, which
/// [`Platform::map_user`](crate::Platform::map_user) maps for DMA.
///
/// Made only by the `unsafe` [`UserMemory::new`]; the promise lasts until
/// the mapping made from it is unmapped.
#[derive(Debug)]
pub struct UserMemory {
    addr: NonNull<u8>,
    len: usize,
    span: (usize, usize),
}

// SAFETY: the value is the promise and the addresses; nothing is accessed
// through it except by a platform's device, which the promise covers.
unsafe impl Send for UserMemory {}
// SAFETY: as above.
unsafe impl Sync for UserMemory {}

impl UserMemory {
    /// `len` bytes of the caller's memory at `addr`.
    ///
    /// # Safety
    ///
    /// The whole 4 KiB pages covering the range ([`span`](Self::span))
    /// must stay mapped, readable and writable in this process until the
    /// [`UserMapping`] a platform makes from this value is given back to
    /// [`Platform::unmap_user`](crate::Platform::unmap_user) (or until
    /// `map_user` fails), and meanwhile be reached only through raw
    /// pointers (no Rust reference into memory the device may write), as
    /// any DMA memory.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// zero length or a range that wraps around the address space.
    pub unsafe fn new(addr: NonNull<u8>, len: usize) -> Result<Self, crate::Error> {
        let span = page_span(addr.as_ptr().addr(), len)?;
        Ok(Self { addr, len, span })
    }

    /// The first byte.
    pub fn addr(&self) -> NonNull<u8> {
        self.addr
    }

    /// Bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether empty (never: refused by `new`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole pages covering the range: first host address and length.
    pub fn span(&self) -> (usize, usize) {
        self.span
    }

    /// A pointer to the first byte of the span, with the range's
    /// provenance.
    pub fn span_ptr(&self) -> NonNull<u8> {
        let back = self.addr.as_ptr().addr() - self.span.0;
        // `back` < 4 KiB and the span starts at or before `addr`; the
        // result is not null (the span's start is a page address above 0,
        // or `addr` itself would have been in page 0, below `back`).
        NonNull::new(self.addr.as_ptr().wrapping_sub(back)).unwrap_or(self.addr)
    }
}

/// The span of whole 4 KiB pages that covers `len` bytes at `addr`: its
/// first host address and its length.
///
/// # Errors
///
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero
/// length or a range that wraps around the address space.
pub fn page_span(addr: usize, len: usize) -> Result<(usize, usize), crate::Error> {
    if len == 0 {
        return Err(crate::Error::InvalidArgument(
            "zero-length user memory range",
        ));
    }
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(PAGE_SIZE))
        .ok_or(crate::Error::InvalidArgument(
            "user memory range wraps around the address space",
        ))?;
    let start = addr & !(PAGE_SIZE - 1);
    Ok((start, end - start))
}

/// Whether every page of `len` bytes at host address `host` is mapped in
/// this process (`mincore(2)`; std, Linux): what `VFIO_IOMMU_MAP_DMA`
/// would refuse with `EFAULT` otherwise, for backends that do not pin
/// pages through the kernel (the emulated device). Only inspects the page
/// tables; never touches the memory.
#[cfg(all(feature = "std", target_os = "linux"))]
pub fn is_mapped(host: usize, len: usize) -> bool {
    let Ok((start, span)) = page_span(host, len) else {
        return false;
    };
    let mut pages = std::vec![0u8; span / PAGE_SIZE];
    // SAFETY: mincore only reads the process's page tables for the range
    // (an unmapped page is ENOMEM) and writes one byte per page into
    // `pages`, which has one per page.
    let rc = unsafe {
        libc::mincore(
            core::ptr::without_provenance_mut(start),
            span,
            pages.as_mut_ptr(),
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_covers_whole_pages() {
        assert_eq!(page_span(0x1234, 10).unwrap(), (0x1000, 0x1000));
        assert_eq!(page_span(0x1ff0, 0x20).unwrap(), (0x1000, 0x2000));
        assert_eq!(page_span(0x2000, 0x1000).unwrap(), (0x2000, 0x1000));
        assert!(page_span(0x1000, 0).is_err());
        assert!(page_span(usize::MAX - 4, 10).is_err());
    }

    #[test]
    #[cfg(all(feature = "std", target_os = "linux"))]
    #[cfg_attr(miri, ignore = "mincore is a system call Miri does not run")]
    fn mapped_pages_are_told_from_unmapped_ones() {
        let v = std::vec![1u8; 3 * PAGE_SIZE];
        assert!(is_mapped(v.as_ptr().addr() + 10, 2 * PAGE_SIZE));
        assert!(!is_mapped(0x1000, PAGE_SIZE), "below mmap_min_addr");
        assert!(!is_mapped(0x1000, 0));
    }

    #[test]
    fn mapping_translates_inside_only() {
        let m = UserMapping::new(0x7000, 0x2000, 0x10_0000, 1).unwrap();
        assert_eq!(m.iova_of(0x7010), Some(0x10_0010));
        assert_eq!(m.iova_of(0x9000), None);
        assert_eq!(m.iova_of(0x6fff), None);
        assert!(m.covers(0x7000, 0x2000) && !m.covers(0x7001, 0x2000));
        assert!(UserMapping::new(0x7001, 0x1000, 0, 0).is_err());
        assert!(UserMapping::new(0x7000, 0, 0, 0).is_err());
        assert!(UserMapping::new(0x7000, 0x1000, 0x10, 0).is_err());
    }
}
