//! I/O virtual addresses: what the IOMMU allows (`VFIO_IOMMU_GET_INFO` and
//! its `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE` capability) and a first-fit
//! allocator of IOVA space inside those ranges and below a device's DMA
//! mask. Pure logic, no system calls.

use std::vec::Vec;

use crate::Error;

/// An inclusive range of IOVAs, as the kernel reports it
/// (`struct vfio_iova_range { start, end }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable IOVA.
    pub start: u64,
    /// Last usable IOVA (inclusive).
    pub last: u64,
}

impl IovaRange {
    /// Bytes in the range (as u128: the full 64-bit space has 2^64).
    pub fn size(&self) -> u128 {
        u128::from(self.last - self.start) + 1
    }
}

/// The highest address a device with an `bits`-bit DMA mask reaches.
pub fn dma_mask(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// What `VFIO_IOMMU_GET_INFO` reports for a type1 container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuInfo {
    /// Bitmap of supported IOMMU page sizes (`iova_pgsizes`; bit n = 2^n
    /// bytes).
    pub page_sizes: u64,
    /// Usable IOVA ranges. Kernels before 5.4 report none; the whole 64-bit
    /// space is assumed then.
    pub ranges: Vec<IovaRange>,
    /// Whether the ranges came from the kernel.
    pub ranges_reported: bool,
    /// How many more DMA mappings the container accepts
    /// (`VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL`), if reported.
    pub dma_avail: Option<u32>,
}

/// `VFIO_IOMMU_INFO_PGSIZES`.
const INFO_PGSIZES: u32 = 1;
/// `VFIO_IOMMU_INFO_CAPS`.
const INFO_CAPS: u32 = 2;
/// `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`.
const CAP_IOVA_RANGE: u16 = 1;
/// `VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL`.
const CAP_DMA_AVAIL: u16 = 3;
/// Size of `struct vfio_iommu_type1_info`.
pub(crate) const INFO_SIZE: usize = 24;

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn malformed(what: &'static str) -> Error {
    Error::Sys {
        what: std::format!("VFIO_IOMMU_GET_INFO answer is malformed: {what}"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
    }
}

/// Parses the buffer `VFIO_IOMMU_GET_INFO` filled (`struct
/// vfio_iommu_type1_info` followed by its capability chain), bounds-checking
/// every offset and count.
pub fn parse_iommu_info(buf: &[u8]) -> Result<IommuInfo, Error> {
    let flags = u32_at(buf, 4).ok_or(malformed("shorter than the header"))?;
    let page_sizes = if flags & INFO_PGSIZES != 0 {
        u64_at(buf, 8).ok_or(malformed("shorter than the header"))?
    } else {
        0
    };
    let mut info = IommuInfo {
        page_sizes,
        ranges: Vec::new(),
        ranges_reported: false,
        dma_avail: None,
    };
    let mut off = if flags & INFO_CAPS != 0 {
        u32_at(buf, 16).ok_or(malformed("shorter than the header"))? as usize
    } else {
        0
    };
    let mut hops = 0;
    while off != 0 {
        hops += 1;
        if hops > 64 || off < INFO_SIZE {
            return Err(malformed(
                "capability chain loops or points into the header",
            ));
        }
        let id = u16_at(buf, off).ok_or(malformed("capability header out of bounds"))?;
        let next = u32_at(buf, off + 4).ok_or(malformed("capability header out of bounds"))?;
        match id {
            CAP_IOVA_RANGE => {
                let n = u32_at(buf, off + 8).ok_or(malformed("IOVA range count out of bounds"))?;
                for i in 0..n as usize {
                    let at = off + 16 + 16 * i;
                    let start = u64_at(buf, at).ok_or(malformed("IOVA range out of bounds"))?;
                    let last = u64_at(buf, at + 8).ok_or(malformed("IOVA range out of bounds"))?;
                    if last < start {
                        return Err(malformed("IOVA range ends before it starts"));
                    }
                    info.ranges.push(IovaRange { start, last });
                }
                info.ranges_reported = true;
            }
            CAP_DMA_AVAIL => {
                info.dma_avail =
                    Some(u32_at(buf, off + 8).ok_or(malformed("DMA avail out of bounds"))?);
            }
            _ => {}
        }
        if next != 0 && (next as usize) <= off {
            return Err(malformed("capability chain goes backwards"));
        }
        off = next as usize;
    }
    if !info.ranges_reported {
        info.ranges.push(IovaRange {
            start: 0,
            last: u64::MAX,
        });
    }
    Ok(info)
}

/// First-fit allocator of IOVA space.
#[derive(Debug, Clone)]
pub struct IovaAllocator {
    /// The usable space (sorted, disjoint).
    space: Vec<IovaRange>,
    /// Free parts of it (sorted, disjoint, never adjacent).
    free: Vec<IovaRange>,
    mask: u64,
}

/// Sorts and merges overlapping or adjacent ranges.
fn normalize(mut r: Vec<IovaRange>) -> Vec<IovaRange> {
    r.sort_by_key(|x| x.start);
    let mut out: Vec<IovaRange> = Vec::with_capacity(r.len());
    for x in r {
        match out.last_mut() {
            Some(l) if l.last == u64::MAX || x.start <= l.last + 1 => l.last = l.last.max(x.last),
            _ => out.push(x),
        }
    }
    out
}

impl IovaAllocator {
    /// Space made of `ranges` (inclusive, as the IOMMU reports them),
    /// clipped to `min ..= mask` (`mask` is the highest address the device
    /// reaches, see [`dma_mask`]; `min` keeps low IOVAs, such as 0, unused).
    ///
    /// # Errors
    ///
    /// [`Error::IovaExhausted`] if nothing is left after clipping.
    pub fn new(ranges: &[IovaRange], min: u64, mask: u64) -> Result<Self, Error> {
        let clipped: Vec<IovaRange> = ranges
            .iter()
            .filter(|r| r.last >= min && r.start <= mask && r.start <= r.last)
            .map(|r| IovaRange {
                start: r.start.max(min),
                last: r.last.min(mask),
            })
            .collect();
        let space = normalize(clipped);
        if space.is_empty() {
            return Err(Error::IovaExhausted {
                requested: 1,
                dma_mask: mask,
            });
        }
        Ok(Self {
            free: space.clone(),
            space,
            mask,
        })
    }

    /// The usable space.
    pub fn space(&self) -> &[IovaRange] {
        &self.space
    }

    /// Free bytes.
    pub fn free_bytes(&self) -> u128 {
        self.free.iter().map(IovaRange::size).sum()
    }

    /// Allocates `len` bytes (non-zero) at an IOVA aligned to `align` (a
    /// power of two), lowest first.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64, Error> {
        if len == 0 || !align.is_power_of_two() {
            return Err(Error::InvalidArgument(
                "IOVA allocation needs a non-zero length and a power-of-two alignment",
            ));
        }
        let exhausted = Error::IovaExhausted {
            requested: len,
            dma_mask: self.mask,
        };
        for i in 0..self.free.len() {
            let r = self.free[i];
            let Some(start) = r.start.checked_add(align - 1).map(|s| s & !(align - 1)) else {
                continue;
            };
            let Some(last) = start.checked_add(len - 1) else {
                continue;
            };
            if start < r.start || last > r.last {
                continue;
            }
            // Carve [start, last] out of r.
            let mut parts = Vec::with_capacity(2);
            if start > r.start {
                parts.push(IovaRange {
                    start: r.start,
                    last: start - 1,
                });
            }
            if last < r.last {
                parts.push(IovaRange {
                    start: last + 1,
                    last: r.last,
                });
            }
            self.free.splice(i..=i, parts);
            return Ok(start);
        }
        Err(exhausted)
    }

    /// Returns `len` bytes at `iova`.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignDmaRegion`] if the range is not inside the space,
    /// [`Error::DmaRegionNotAllocated`] if any of it is already free.
    pub fn free(&mut self, iova: u64, len: u64) -> Result<(), Error> {
        let size = usize::try_from(len).unwrap_or(usize::MAX);
        let last = match (len, iova.checked_add(len.wrapping_sub(1))) {
            (0, _) | (_, None) => return Err(Error::ForeignDmaRegion { iova, len: size }),
            (_, Some(l)) => l,
        };
        if !self.space.iter().any(|r| r.start <= iova && last <= r.last) {
            return Err(Error::ForeignDmaRegion { iova, len: size });
        }
        if self.free.iter().any(|r| r.start <= last && iova <= r.last) {
            return Err(Error::DmaRegionNotAllocated { iova, len: size });
        }
        let at = self.free.partition_point(|r| r.start < iova);
        self.free.insert(at, IovaRange { start: iova, last });
        // Merge with neighbours that touch it (only within one space range:
        // two space ranges are never adjacent after normalisation).
        if at + 1 < self.free.len() && self.free[at].last + 1 == self.free[at + 1].start {
            self.free[at].last = self.free[at + 1].last;
            self.free.remove(at + 1);
        }
        if at > 0 && self.free[at - 1].last + 1 == self.free[at].start {
            self.free[at - 1].last = self.free[at].last;
            self.free.remove(at);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    const MIB: u64 = 1 << 20;

    fn r(start: u64, last: u64) -> IovaRange {
        IovaRange { start, last }
    }

    /// The ranges an Intel IOMMU reports: everything but the MSI window.
    fn intel() -> Vec<IovaRange> {
        vec![r(0, 0xfedf_ffff), r(0xfef0_0000, 0xff_ffff_ffff)]
    }

    #[test]
    fn mask_and_minimum_clip_the_space() {
        let a = IovaAllocator::new(&intel(), 4096, dma_mask(28)).unwrap();
        assert_eq!(a.space(), &[r(4096, 0x0fff_ffff)]);
        let a = IovaAllocator::new(&intel(), 0, dma_mask(64)).unwrap();
        assert_eq!(a.space().len(), 2);
        assert_eq!(dma_mask(32), 0xffff_ffff);
        // Nothing below the mask.
        let e =
            IovaAllocator::new(&[r(0x1_0000_0000, 0x2_0000_0000)], 0, dma_mask(32)).unwrap_err();
        assert!(matches!(e, Error::IovaExhausted { .. }));
    }

    #[test]
    fn allocations_respect_alignment_holes_and_mask() {
        let mut a = IovaAllocator::new(&intel(), 4096, dma_mask(32)).unwrap();
        // 2 MiB-aligned: the first page is reserved, so 2 MiB.
        assert_eq!(a.alloc(2 * MIB, 2 * MIB).unwrap(), 2 * MIB);
        // 4 KiB-aligned fits below it.
        assert_eq!(a.alloc(4096, 4096).unwrap(), 4096);
        // A block that would span the MSI hole goes above it instead.
        let mut b = IovaAllocator::new(
            &[r(0, 0xfedf_ffff), r(0xfef0_0000, 0xffff_ffff)],
            0,
            dma_mask(32),
        )
        .unwrap();
        b.alloc(0xfed0_0000, 4096).unwrap();
        assert_eq!(b.alloc(2 * MIB, 4096).unwrap(), 0xfef0_0000);
        // Every IOVA handed out is below the mask.
        let mut c = IovaAllocator::new(&intel(), 4096, dma_mask(28)).unwrap();
        let mut n = 0;
        while let Ok(iova) = c.alloc(2 * MIB, 2 * MIB) {
            assert!(iova + 2 * MIB - 1 <= dma_mask(28));
            n += 1;
        }
        assert_eq!(n, 127, "256 MiB less the first 2 MiB block");
    }

    #[test]
    fn exhaustion_and_free_with_coalescing() {
        let mut a = IovaAllocator::new(&[r(0x10000, 0x13fff)], 0, u64::MAX).unwrap();
        let x = a.alloc(0x1000, 0x1000).unwrap();
        let y = a.alloc(0x1000, 0x1000).unwrap();
        let z = a.alloc(0x2000, 0x1000).unwrap();
        assert_eq!((x, y, z), (0x10000, 0x11000, 0x12000));
        match a.alloc(0x1000, 0x1000) {
            Err(Error::IovaExhausted { requested, .. }) => assert_eq!(requested, 0x1000),
            other => panic!("expected IovaExhausted, got {other:?}"),
        }
        a.free(y, 0x1000).unwrap();
        // A 0x2000 block does not fit in the one-page hole.
        assert!(a.alloc(0x2000, 0x1000).is_err());
        a.free(x, 0x1000).unwrap();
        assert_eq!(a.alloc(0x2000, 0x1000).unwrap(), 0x10000);
        a.free(0x10000, 0x2000).unwrap();
        a.free(z, 0x2000).unwrap();
        assert_eq!(a.free_bytes(), 0x4000);
        assert_eq!(a.alloc(0x4000, 0x4000).unwrap(), 0x10000);
    }

    #[test]
    fn double_and_foreign_frees_are_refused() {
        let mut a = IovaAllocator::new(&[r(0x10000, 0x1ffff)], 0, u64::MAX).unwrap();
        let x = a.alloc(0x2000, 0x1000).unwrap();
        a.free(x, 0x2000).unwrap();
        assert!(matches!(
            a.free(x, 0x2000),
            Err(Error::DmaRegionNotAllocated { .. })
        ));
        let y = a.alloc(0x2000, 0x1000).unwrap();
        // Partly free.
        assert!(matches!(
            a.free(y, 0x3000),
            Err(Error::DmaRegionNotAllocated { .. })
        ));
        assert!(matches!(
            a.free(0x20000, 0x1000),
            Err(Error::ForeignDmaRegion { .. })
        ));
        assert!(matches!(
            a.free(0xf000, 0x2000),
            Err(Error::ForeignDmaRegion { .. })
        ));
        assert!(matches!(
            a.free(u64::MAX, 2),
            Err(Error::ForeignDmaRegion { .. })
        ));
        assert!(matches!(a.free(y, 0), Err(Error::ForeignDmaRegion { .. })));
        assert!(a.alloc(0, 8).is_err());
        assert!(a.alloc(8, 3).is_err());
        a.free(y, 0x2000).unwrap();
    }

    #[test]
    fn the_top_of_the_address_space_does_not_overflow() {
        let mut a = IovaAllocator::new(&[r(u64::MAX - 0x1fff, u64::MAX)], 0, u64::MAX).unwrap();
        assert_eq!(a.alloc(0x2000, 0x1000).unwrap(), u64::MAX - 0x1fff);
        assert!(a.alloc(0x1000, 0x1000).is_err());
        a.free(u64::MAX - 0x1fff, 0x2000).unwrap();
        let b = IovaAllocator::new(&[r(0, u64::MAX), r(5, 10)], 0, u64::MAX).unwrap();
        assert_eq!(b.space(), &[r(0, u64::MAX)]);
        assert_eq!(b.free_bytes(), 1u128 << 64);
    }

    fn put(buf: &mut Vec<u8>, off: usize, bytes: &[u8]) {
        if buf.len() < off + bytes.len() {
            buf.resize(off + bytes.len(), 0);
        }
        buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// A `vfio_iommu_type1_info` answer as the kernel lays it out.
    fn answer(ranges: &[(u64, u64)], avail: Option<u32>) -> Vec<u8> {
        let mut b = vec![0u8; INFO_SIZE];
        put(&mut b, 4, &(INFO_PGSIZES | INFO_CAPS).to_ne_bytes());
        put(&mut b, 8, &0x4020_1000u64.to_ne_bytes());
        put(&mut b, 16, &(INFO_SIZE as u32).to_ne_bytes());
        let range_cap = INFO_SIZE;
        let avail_cap = range_cap + 16 + 16 * ranges.len();
        put(&mut b, range_cap, &CAP_IOVA_RANGE.to_ne_bytes());
        put(&mut b, range_cap + 2, &1u16.to_ne_bytes());
        let next = if avail.is_some() { avail_cap as u32 } else { 0 };
        put(&mut b, range_cap + 4, &next.to_ne_bytes());
        put(&mut b, range_cap + 8, &(ranges.len() as u32).to_ne_bytes());
        for (i, (s, l)) in ranges.iter().enumerate() {
            put(&mut b, range_cap + 16 + 16 * i, &s.to_ne_bytes());
            put(&mut b, range_cap + 24 + 16 * i, &l.to_ne_bytes());
        }
        if let Some(a) = avail {
            put(&mut b, avail_cap, &CAP_DMA_AVAIL.to_ne_bytes());
            put(&mut b, avail_cap + 8, &a.to_ne_bytes());
        }
        let len = b.len() as u32;
        put(&mut b, 0, &len.to_ne_bytes());
        b
    }

    #[test]
    fn iommu_info_answers_parse() {
        let b = answer(
            &[(0, 0xfedf_ffff), (0xfef0_0000, 0xff_ffff_ffff)],
            Some(65535),
        );
        let info = parse_iommu_info(&b).unwrap();
        assert_eq!(info.page_sizes, 0x4020_1000);
        assert_eq!(info.ranges, intel());
        assert!(info.ranges_reported);
        assert_eq!(info.dma_avail, Some(65535));

        // No capabilities: the whole space is assumed.
        let mut old = vec![0u8; INFO_SIZE];
        put(&mut old, 4, &INFO_PGSIZES.to_ne_bytes());
        let info = parse_iommu_info(&old).unwrap();
        assert_eq!(info.ranges, [r(0, u64::MAX)]);
        assert!(!info.ranges_reported);
    }

    #[test]
    fn malformed_iommu_info_is_an_error() {
        let good = answer(&[(0, 0xffff)], None);
        // Truncated in the middle of the range list.
        assert!(parse_iommu_info(&good[..good.len() - 4]).is_err());
        // A count larger than the buffer.
        let mut b = good.clone();
        put(&mut b, INFO_SIZE + 8, &1000u32.to_ne_bytes());
        assert!(parse_iommu_info(&b).is_err());
        // A chain pointing at itself.
        let mut b = good.clone();
        put(&mut b, INFO_SIZE + 4, &(INFO_SIZE as u32).to_ne_bytes());
        assert!(parse_iommu_info(&b).is_err());
        // A capability offset inside the header.
        let mut b = good.clone();
        put(&mut b, 16, &8u32.to_ne_bytes());
        assert!(parse_iommu_info(&b).is_err());
        // A range whose end precedes its start.
        let b = answer(&[(0x2000, 0x1000)], None);
        assert!(parse_iommu_info(&b).is_err());
        assert!(parse_iommu_info(&[0u8; 4]).is_err());
    }
}
