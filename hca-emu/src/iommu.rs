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

use platform::host::{HostBlock, HostWindow};
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

/// Why a foreign window could not be mapped or unmapped
/// ([`EmuHca::map_dma`](crate::EmuHca::map_dma),
/// [`EmuHca::unmap_dma`](crate::EmuHca::unmap_dma)).
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DmaMapError {
    /// The IOVA or the length is not a multiple of the 4 KiB IOMMU page,
    /// or the length is zero.
    #[error("DMA map of {len:#x} bytes at IOVA {iova:#x} is not 4 KiB-page aligned or is empty")]
    Misaligned {
        /// The IOVA asked for.
        iova: u64,
        /// The length asked for.
        len: u64,
    },
    /// The range wraps around the 64-bit IOVA space.
    #[error("DMA map of {len:#x} bytes at IOVA {iova:#x} wraps around the IOVA space")]
    Wraps {
        /// The IOVA asked for.
        iova: u64,
        /// The length asked for.
        len: u64,
    },
    /// The range overlaps a mapping that exists.
    #[error("DMA map of {len:#x} bytes at IOVA {iova:#x} overlaps the mapping at {existing:#x}")]
    Overlap {
        /// The IOVA asked for.
        iova: u64,
        /// The length asked for.
        len: u64,
        /// First IOVA of the mapping it overlaps.
        existing: u64,
    },
    /// No foreign window starts at `iova` with length `len`.
    #[error("no DMA window of {len:#x} bytes is mapped at IOVA {iova:#x}")]
    NotMapped {
        /// The IOVA asked for.
        iova: u64,
        /// The length asked for.
        len: u64,
    },
}

#[derive(Debug)]
enum Backing {
    /// Heap memory of `alloc_dma`, lent to the driver.
    Block(Arc<HostBlock>),
    /// Memory of its owner (a program's `VFIO_IOMMU_MAP_DMA`).
    Window(HostWindow),
}

#[derive(Debug)]
struct Mapping {
    backing: Backing,
    len: usize,
}

impl Mapping {
    fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), PlatformError> {
        match &self.backing {
            Backing::Block(b) => b.read(off, dst),
            Backing::Window(w) => w.read(off, dst),
        }
    }

    fn write(&self, off: usize, src: &[u8]) -> Result<(), PlatformError> {
        match &self.backing {
            Backing::Block(b) => b.write(off, src),
            Backing::Window(w) => w.write(off, src),
        }
    }
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
        let mut iova = align_up(self.next, align as u64);
        // Step over foreign windows mapped where the allocator would go.
        while let Some(existing) = self.overlapping(iova, len as u64) {
            let end = existing + self.maps[&existing].len as u64;
            iova = align_up(end + GUARD_GAP, align as u64);
        }
        self.next = align_up(iova + len as u64 + GUARD_GAP, 4096);
        let block = Arc::new(block);
        let region = block.lend(iova, iova as usize)?;
        self.maps.insert(
            iova,
            Mapping {
                backing: Backing::Block(block),
                len,
            },
        );
        Ok(region)
    }

    /// First IOVA of a mapping that overlaps `iova .. iova + len`.
    fn overlapping(&self, iova: u64, len: u64) -> Option<u64> {
        let end = iova.saturating_add(len);
        if let Some((&s, m)) = self.maps.range(..=iova).next_back() {
            if s + m.len as u64 > iova {
                return Some(s);
            }
        }
        self.maps.range(iova..end).next().map(|(&s, _)| s)
    }

    /// Maps a foreign window at `iova`.
    pub(crate) fn map_window(&mut self, iova: u64, window: HostWindow) -> Result<(), DmaMapError> {
        let len = window.len() as u64;
        if iova % 4096 != 0 || len % 4096 != 0 || len == 0 {
            return Err(DmaMapError::Misaligned { iova, len });
        }
        if iova.checked_add(len).is_none() {
            return Err(DmaMapError::Wraps { iova, len });
        }
        if let Some(existing) = self.overlapping(iova, len) {
            return Err(DmaMapError::Overlap {
                iova,
                len,
                existing,
            });
        }
        self.maps.insert(
            iova,
            Mapping {
                backing: Backing::Window(window),
                len: len as usize,
            },
        );
        Ok(())
    }

    /// Maps a foreign window at an IOVA of this space the allocator
    /// chooses (after its allocations, with the guard gap), congruent to
    /// the window's host address modulo 2 MiB so that a memory key over
    /// it may use pages up to that size; returns the IOVA.
    pub(crate) fn map_window_anywhere(&mut self, window: HostWindow) -> Result<u64, DmaMapError> {
        const CONGRUENCE: u64 = 2 << 20;
        let len = window.len() as u64;
        let phase = window.host_addr() as u64 % CONGRUENCE;
        let place = |from: u64| align_up(from, CONGRUENCE) + phase;
        let mut iova = place(self.next);
        while let Some(existing) = self.overlapping(iova, len) {
            let end = existing + self.maps[&existing].len as u64;
            iova = place(end + GUARD_GAP);
        }
        self.map_window(iova, window)?;
        self.next = align_up(iova + len + GUARD_GAP, 4096);
        Ok(iova)
    }

    /// Unmaps the foreign window mapped at `iova` with length `len`.
    pub(crate) fn unmap_window(&mut self, iova: u64, len: u64) -> Result<HostWindow, DmaMapError> {
        match self.maps.get(&iova) {
            Some(m) if m.len as u64 == len && matches!(m.backing, Backing::Window(_)) => {
                match self.maps.remove(&iova).map(|m| m.backing) {
                    Some(Backing::Window(w)) => Ok(w),
                    _ => Err(DmaMapError::NotMapped { iova, len }),
                }
            }
            _ => Err(DmaMapError::NotMapped { iova, len }),
        }
    }

    /// Every foreign window as (IOVA, length, host address).
    pub(crate) fn windows(&self) -> Vec<(u64, usize, usize)> {
        self.maps
            .iter()
            .filter_map(|(&i, m)| match &m.backing {
                Backing::Window(w) => Some((i, m.len, w.host_addr())),
                Backing::Block(_) => None,
            })
            .collect()
    }

    /// Unmaps a region. Returns false (and records a fault) if it was not
    /// one of ours.
    pub(crate) fn unmap(&mut self, region: DmaRegion) -> bool {
        let iova = region.iova();
        match self.maps.get(&iova) {
            Some(Mapping {
                backing: Backing::Block(_),
                len,
            }) if *len == region.len() => {
                let m = self.maps.remove(&iova).expect("mapping present");
                let Backing::Block(block) = &m.backing else {
                    unreachable!("matched a block above")
                };
                if let Err(r) = block.reclaim(region) {
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

    /// A read that is not a device access: nothing is recorded, `false`
    /// when the range is not inside one mapping.
    pub(crate) fn peek(&self, iova: u64, dst: &mut [u8]) -> bool {
        self.find(iova, dst.len())
            .is_some_and(|(m, off)| m.read(off, dst).is_ok())
    }

    /// Device read. On a fault, records it and returns `Err(())`.
    pub(crate) fn read(
        &mut self,
        iova: u64,
        dst: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ()> {
        match self.find(iova, dst.len()) {
            Some((m, off)) if m.read(off, dst).is_ok() => Ok(()),
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
            Some((m, off)) if m.write(off, src).is_ok() => Ok(()),
            _ => {
                let w = what();
                self.fault(FaultKind::Write, iova, src.len(), &w);
                Err(())
            }
        }
    }

    /// Every live `alloc_dma` mapping as (IOVA, length) (foreign windows
    /// are their owner's: see [`windows`](Self::windows)).
    pub(crate) fn mappings(&self) -> Vec<(u64, usize)> {
        self.maps
            .iter()
            .filter(|(_, m)| matches!(m.backing, Backing::Block(_)))
            .map(|(&i, m)| (i, m.len))
            .collect()
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

    #[test]
    fn foreign_windows_are_checked_mapped_and_unmapped() {
        let win = |len: usize| {
            let block = Arc::new(HostBlock::new(len, 4096).unwrap());
            (HostWindow::over_block(block.clone()), block)
        };
        let mut io = Iommu::new(0);
        let (w, first) = win(8192);
        io.map_window(0x20_0000, w).unwrap();
        assert_eq!(
            io.map_window(0x20_1000, win(4096).0),
            Err(DmaMapError::Overlap {
                iova: 0x20_1000,
                len: 4096,
                existing: 0x20_0000
            })
        );
        assert_eq!(
            io.map_window(0x1f_f000, win(8192).0),
            Err(DmaMapError::Overlap {
                iova: 0x1f_f000,
                len: 8192,
                existing: 0x20_0000
            })
        );
        assert!(matches!(
            io.map_window(0x30_0800, win(4096).0),
            Err(DmaMapError::Misaligned { .. })
        ));
        assert!(matches!(
            io.map_window(u64::MAX - 0xfff, win(8192).0),
            Err(DmaMapError::Wraps { .. })
        ));
        io.write(0x20_1000, &[5, 6], &|| "t".into()).unwrap();
        let mut x = [0u8; 2];
        io.read(0x20_1000, &mut x, &|| "t".into()).unwrap();
        assert_eq!(x, [5, 6]);
        // Not counted as an alloc_dma region.
        assert!(io.mappings().is_empty());
        assert_eq!(io.windows().len(), 1);
        assert!(io.unmap_window(0x20_0000, 4096).is_err());
        io.unmap_window(0x20_0000, 8192).unwrap();
        assert!(io.read(0x20_1000, &mut x, &|| "t".into()).is_err());
        first.read(4096, &mut x).unwrap();
        assert_eq!(x, [5, 6]);
        // alloc_dma steps over a window where it would have gone.
        let mut io = Iommu::new(0);
        io.map_window(IOVA_BASE, win(4096).0).unwrap();
        let r = io.map(4096, 4096).unwrap();
        assert!(r.iova() >= IOVA_BASE + 4096 + GUARD_GAP);
        assert!(io.unmap(r));
    }
}
