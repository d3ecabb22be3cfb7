//! The simulated IOMMU: the emulator's own IOVA space.
//!
//! Every `alloc_dma` is heap memory (a [`HostBlock`]) lent out at an IOVA of
//! this space: far from any host address (IOVAs start at 64 GiB and are
//! never identity-mapped), aligned as asked and at least to 4 KiB, with an
//! unmapped guard gap of at least 64 KiB between two mappings. Every access
//! of the device (command entries, mailboxes, queue buffers, doorbell
//! records, firmware pages) goes through [`Iommu::read`]/[`Iommu::write`]; an
//! access that is not entirely inside one mapping is recorded as an
//! [`IommuFault`] and fails, as it would on real hardware.

use std::collections::BTreeMap;
use std::sync::Arc;

use platform::host::HostBlock;
use platform::{DmaRegion, Error as PlatformError};

/// First IOVA handed out.
pub const IOVA_BASE: u64 = 0x10_0000_0000;
/// Unmapped gap left after every mapping.
pub const GUARD_GAP: u64 = 0x1_0000;

/// What kind of device access faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A device read outside every mapping.
    Read,
    /// A device write outside every mapping.
    Write,
    /// The driver freed (unmapped) memory the firmware still held: pages
    /// given with MANAGE_PAGES and not taken back, or a queue buffer of a
    /// live object.
    FreedWhileHeld,
    /// `free_dma` of a region this IOMMU never mapped (or freed twice).
    UnknownRegion,
}

/// One recorded IOMMU fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IommuFault {
    /// Kind of access.
    pub kind: FaultKind,
    /// First IOVA of the access.
    pub iova: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// What the device was doing ("command entry slot 0", "EQ 0x12 entry"...).
    pub what: String,
}

impl core::fmt::Display for IommuFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "IOMMU fault: {:?} of {} bytes at IOVA {:#x} ({})",
            self.kind, self.len, self.iova, self.what
        )
    }
}

#[derive(Debug)]
struct Mapping {
    block: Arc<HostBlock>,
    len: usize,
}

/// The IOVA space and its mappings.
#[derive(Debug)]
pub(crate) struct Iommu {
    maps: BTreeMap<u64, Mapping>,
    next: u64,
    pub(crate) faults: Vec<IommuFault>,
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Iommu {
    pub(crate) fn new(offset_pages: u64) -> Self {
        Self {
            maps: BTreeMap::new(),
            next: IOVA_BASE + offset_pages * 0x1000,
            faults: Vec::new(),
        }
    }

    /// Allocates and maps `len` bytes aligned to `align`.
    pub(crate) fn map(&mut self, len: usize, align: usize) -> Result<DmaRegion, PlatformError> {
        if len == 0 {
            return Err(PlatformError::InvalidArgument("zero-length DMA allocation"));
        }
        if !align.is_power_of_two() {
            return Err(PlatformError::InvalidArgument(
                "DMA alignment must be a power of two",
            ));
        }
        let len = len
            .checked_next_multiple_of(4096)
            .ok_or(PlatformError::InvalidArgument("DMA length too large"))?;
        let align = align.max(4096);
        if align > 1 << 30 {
            return Err(PlatformError::InvalidArgument("DMA alignment above 1 GiB"));
        }
        let block = HostBlock::new(len, align)?;
        let iova = align_up(self.next, align as u64);
        self.next = align_up(iova + len as u64 + GUARD_GAP, 4096);
        let block = Arc::new(block);
        let region = block.lend(iova, iova as usize)?;
        self.maps.insert(iova, Mapping { block, len });
        Ok(region)
    }

    /// Unmaps a region. Returns false (and records a fault) if it was not
    /// one of ours.
    pub(crate) fn unmap(&mut self, region: DmaRegion) -> bool {
        let iova = region.iova();
        match self.maps.get(&iova) {
            Some(m) if m.len == region.len() => {
                let m = self.maps.remove(&iova).expect("mapping present");
                if let Err(r) = m.block.reclaim(region) {
                    // Not the block's own region: keep it mapped, leak it.
                    log::error!("free_dma: region at {iova:#x} does not belong to its mapping");
                    self.maps.insert(iova, m);
                    let _ = r;
                    self.fault(
                        FaultKind::UnknownRegion,
                        iova,
                        0,
                        "free_dma of a foreign region",
                    );
                    return false;
                }
                true
            }
            _ => {
                self.fault(
                    FaultKind::UnknownRegion,
                    iova,
                    region.len(),
                    "free_dma of a region that is not mapped (freed twice?)",
                );
                // Dropping a region never frees memory.
                let _ = region;
                false
            }
        }
    }

    pub(crate) fn fault(&mut self, kind: FaultKind, iova: u64, len: usize, what: &str) {
        log::warn!("IOMMU fault: {kind:?} of {len} bytes at {iova:#x} ({what})");
        self.faults.push(IommuFault {
            kind,
            iova,
            len,
            what: what.to_string(),
        });
    }

    fn find(&self, iova: u64, len: usize) -> Option<(&Mapping, usize)> {
        let (&start, m) = self.maps.range(..=iova).next_back()?;
        let off = iova - start;
        let end = off.checked_add(len as u64)?;
        (end <= m.len as u64).then_some((m, off as usize))
    }

    /// Whether `iova .. iova + len` lies inside one mapping.
    pub(crate) fn is_mapped(&self, iova: u64, len: usize) -> bool {
        self.find(iova, len).is_some()
    }

    /// Device read. On a fault, records it and returns `Err(())`.
    pub(crate) fn read(
        &mut self,
        iova: u64,
        dst: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ()> {
        match self.find(iova, dst.len()) {
            Some((m, off)) if m.block.read(off, dst).is_ok() => Ok(()),
            _ => {
                let w = what();
                self.fault(FaultKind::Read, iova, dst.len(), &w);
                Err(())
            }
        }
    }

    /// Device write. On a fault, records it and returns `Err(())`.
    pub(crate) fn write(
        &mut self,
        iova: u64,
        src: &[u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ()> {
        match self.find(iova, src.len()) {
            Some((m, off)) if m.block.write(off, src).is_ok() => Ok(()),
            _ => {
                let w = what();
                self.fault(FaultKind::Write, iova, src.len(), &w);
                Err(())
            }
        }
    }

    /// Every live mapping as (IOVA, length).
    pub(crate) fn mappings(&self) -> Vec<(u64, usize)> {
        self.maps.iter().map(|(&i, m)| (i, m.len)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iovas_are_not_host_addresses_and_have_guard_gaps() {
        let mut io = Iommu::new(0);
        let a = io.map(100, 8).unwrap();
        let b = io.map(8192, 8192).unwrap();
        assert_ne!(a.iova(), a.host_ptr().as_ptr() as u64);
        assert!(a.iova() >= IOVA_BASE);
        assert_eq!(a.len(), 4096);
        assert_eq!(b.iova() % 8192, 0);
        assert!(b.iova() >= a.iova() + 4096 + GUARD_GAP);
        a.write_be32(0, 0x1234_5678);
        let mut x = [0u8; 4];
        io.read(a.iova(), &mut x, &|| "t".into()).unwrap();
        assert_eq!(x, [0x12, 0x34, 0x56, 0x78]);
        // Straddling the end, in the gap, before the base.
        assert!(io.read(a.iova() + 4094, &mut x, &|| "t".into()).is_err());
        assert!(io.read(a.iova() + 4096, &mut x, &|| "t".into()).is_err());
        assert!(io.write(0, &x, &|| "t".into()).is_err());
        assert_eq!(io.faults.len(), 3);
        let ia = a.iova();
        assert!(io.unmap(a));
        assert!(io.read(ia, &mut x, &|| "t".into()).is_err());
        assert!(io.unmap(b));
        assert!(io.mappings().is_empty());
    }
}
