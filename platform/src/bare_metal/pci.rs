//! PCI on bare metal: configuration space through ECAM (PCI Express
//! Enhanced Configuration Access Mechanism: 4 KiB of configuration space
//! per function, at `base + (bus << 20 | device << 15 | function << 12)`),
//! enumeration by vendor and device ID, BAR sizing and assignment.
//!
//! ```no_run
//! # use core::ptr::NonNull;
//! # use platform::bare_metal::pci::{BarWindow, Ecam, COMMAND_MEMORY, COMMAND_BUS_MASTER};
//! # fn f() -> Result<(), platform::Error> {
//! // QEMU `virt` (aarch64, highmem=off): 16 buses of ECAM at 0x3f00_0000,
//! // the 32-bit MMIO window at 0x1000_0000.
//! // SAFETY: the ECAM window is mapped as device memory and ours alone.
//! let ecam = unsafe { Ecam::new(NonNull::new(0x3f00_0000 as *mut u8).unwrap(), 16 << 20) }?;
//! let f = ecam.find(0x15b3, 0x1013)?;
//! let mut window = BarWindow::new(0x1000_0000, 0x2eff_0000)?;
//! let bar0 = f.assign_bar(0, &mut window)?;
//! f.enable(COMMAND_MEMORY | COMMAND_BUS_MASTER);
//! # let _ = bar0; Ok(()) }
//! ```
//!
//! PCI-to-PCI bridges are not configured: functions are looked for on the
//! buses the ECAM window covers, as firmware (or the platform's root
//! complex) numbered them. A [`PciFunction`] is also the [`PciHooks`] of a
//! [`BareMetal`](super::BareMetal) platform: the driver then reads and
//! writes the function's configuration space itself (its command register).

use core::ptr::NonNull;

use super::PciHooks;
use crate::Error;

/// Vendor ID register.
pub const VENDOR_ID: u16 = 0x00;
/// Command register.
pub const COMMAND: u16 = 0x04;
/// Header type register (bit 7: multi-function device).
pub const HEADER_TYPE: u16 = 0x0e;
/// First base address register.
pub const BAR0: u16 = 0x10;
/// Command register: memory space enable.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus master enable.
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Bytes of configuration space per function (PCI Express).
pub const CONFIG_SIZE: u16 = 4096;

/// A PCI function address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bdf {
    /// Bus.
    pub bus: u8,
    /// Device (0..32).
    pub device: u8,
    /// Function (0..8).
    pub function: u8,
}

impl core::fmt::Display for Bdf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.device, self.function)
    }
}

/// Access to PCI configuration space, dword-aligned offsets. A function
/// that does not exist reads all ones and ignores writes, as a master abort
/// does.
pub trait ConfigSpace {
    /// Reads the dword at `offset` (a multiple of 4 below 4096).
    fn read32(&self, bdf: Bdf, offset: u16) -> u32;
    /// Writes the dword at `offset` (a multiple of 4 below 4096).
    fn write32(&self, bdf: Bdf, offset: u16, value: u32);
    /// Writes the word at `offset` (a multiple of 2). The default is a
    /// read-modify-write of the dword, which writes back the other half
    /// as read: override it where configuration space has sized writes
    /// (ECAM does), because of write-one-to-clear status bits.
    fn write16(&self, bdf: Bdf, offset: u16, value: u16) {
        let shift = u32::from(offset & 2) * 8;
        let d = self.read32(bdf, offset & !3);
        let d = (d & !(0xffff << shift)) | (u32::from(value) << shift);
        self.write32(bdf, offset & !3, d);
    }
    /// Writes the byte at `offset`; the default is a read-modify-write, as
    /// for [`write16`](Self::write16).
    fn write8(&self, bdf: Bdf, offset: u16, value: u8) {
        let shift = u32::from(offset & 3) * 8;
        let d = self.read32(bdf, offset & !3);
        let d = (d & !(0xff << shift)) | (u32::from(value) << shift);
        self.write32(bdf, offset & !3, d);
    }
}

impl<T: ConfigSpace + ?Sized> ConfigSpace for &T {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
        (**self).read32(bdf, offset)
    }
    fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
        (**self).write32(bdf, offset, value);
    }
    fn write16(&self, bdf: Bdf, offset: u16, value: u16) {
        (**self).write16(bdf, offset, value);
    }
    fn write8(&self, bdf: Bdf, offset: u16, value: u8) {
        (**self).write8(bdf, offset, value);
    }
}

/// An ECAM window: configuration space of `buses` buses (1 MiB each)
/// mapped as device memory.
#[derive(Debug, Clone, Copy)]
pub struct Ecam {
    base: NonNull<u8>,
    buses: u16,
}

// SAFETY: a handle on a register window the caller gave for the program's
// whole life (`new`'s contract); every access is a volatile access of
// configuration space, which the hardware serialises.
unsafe impl Send for Ecam {}
// SAFETY: as above.
unsafe impl Sync for Ecam {}

impl Ecam {
    /// The ECAM window of `len` bytes at `base`: `len / 1 MiB` buses from
    /// bus 0.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `base` is not 4 KiB aligned or `len`
    /// is not 1 to 256 MiB in whole MiB.
    ///
    /// # Safety
    ///
    /// `base .. base + len` must be the ECAM window, mapped as device
    /// (uncached) memory for as long as this value or a copy of it exists,
    /// and not reached by anything else as Rust memory.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Result<Self, Error> {
        if base.as_ptr().addr() % 4096 != 0 {
            return Err(Error::InvalidArgument(
                "ECAM base must be a multiple of 4 KiB",
            ));
        }
        if len == 0 || len % (1 << 20) != 0 || len > 256 << 20 {
            return Err(Error::InvalidArgument(
                "ECAM length must be 1 to 256 MiB in whole MiB (one per bus)",
            ));
        }
        if base.as_ptr().addr().checked_add(len).is_none() {
            return Err(Error::InvalidArgument(
                "ECAM window wraps around the address space",
            ));
        }
        Ok(Self {
            base,
            buses: (len >> 20) as u16,
        })
    }

    /// Buses the window covers.
    pub fn buses(&self) -> u16 {
        self.buses
    }

    /// The address of `offset` in `bdf`'s configuration space, if the
    /// window covers it and the access of `width` bytes is aligned.
    fn at(&self, bdf: Bdf, offset: u16, width: u16) -> Option<NonNull<u8>> {
        if u16::from(bdf.bus) >= self.buses
            || bdf.device >= 32
            || bdf.function >= 8
            || offset % width != 0
            || offset >= CONFIG_SIZE
        {
            return None;
        }
        let o = (usize::from(bdf.bus) << 20)
            | (usize::from(bdf.device) << 15)
            | (usize::from(bdf.function) << 12)
            | usize::from(offset);
        // SAFETY: `o < buses << 20 <= len`, inside the window `new` was
        // given.
        Some(unsafe { self.base.add(o) })
    }

    /// The function at `bdf`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if the window does not cover `bdf`.
    pub fn function(self, bdf: Bdf) -> Result<PciFunction<Self>, Error> {
        self.at(bdf, 0, 4).ok_or(Error::InvalidArgument(
            "PCI address outside the ECAM window",
        ))?;
        Ok(PciFunction { cs: self, bdf })
    }

    /// The first function with these IDs on the window's buses.
    ///
    /// # Errors
    ///
    /// [`Error::PciDeviceNotFound`].
    pub fn find(self, vendor: u16, device: u16) -> Result<PciFunction<Self>, Error> {
        let buses = self.buses;
        find(self, buses, vendor, device)
    }
}

impl ConfigSpace for Ecam {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
        match self.at(bdf, offset, 4) {
            // SAFETY: inside the window, aligned; device memory read with
            // a single volatile access (`new`'s contract).
            Some(p) => u32::from_le(unsafe { p.cast::<u32>().as_ptr().read_volatile() }),
            None => u32::MAX,
        }
    }
    fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
        if let Some(p) = self.at(bdf, offset, 4) {
            // SAFETY: as in `read32`.
            unsafe { p.cast::<u32>().as_ptr().write_volatile(value.to_le()) }
        }
    }
    fn write16(&self, bdf: Bdf, offset: u16, value: u16) {
        if let Some(p) = self.at(bdf, offset, 2) {
            // SAFETY: as in `read32`, 2-byte aligned.
            unsafe { p.cast::<u16>().as_ptr().write_volatile(value.to_le()) }
        }
    }
    fn write8(&self, bdf: Bdf, offset: u16, value: u8) {
        if let Some(p) = self.at(bdf, offset, 1) {
            // SAFETY: as in `read32`.
            unsafe { p.as_ptr().write_volatile(value) }
        }
    }
}

/// The first function with `vendor:device` on buses `0..buses` of `cs`
/// (functions 1 to 7 of a device only when function 0 says it is
/// multi-function).
///
/// # Errors
///
/// [`Error::PciDeviceNotFound`].
pub fn find<C: ConfigSpace>(
    cs: C,
    buses: u16,
    vendor: u16,
    device: u16,
) -> Result<PciFunction<C>, Error> {
    let want = u32::from(vendor) | (u32::from(device) << 16);
    for bus in 0..buses.min(256) {
        for dev in 0..32u8 {
            for function in 0..8u8 {
                let bdf = Bdf {
                    bus: bus as u8,
                    device: dev,
                    function,
                };
                let id = cs.read32(bdf, VENDOR_ID);
                if id & 0xffff == 0xffff {
                    if function == 0 {
                        break;
                    }
                    continue;
                }
                if id == want {
                    return Ok(PciFunction { cs, bdf });
                }
                let multi = cs.read32(bdf, HEADER_TYPE & !3) >> 16 & 0x80 != 0;
                if function == 0 && !multi {
                    break;
                }
            }
        }
    }
    Err(Error::PciDeviceNotFound {
        vendor,
        device,
        buses,
    })
}

/// What a BAR is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// 32-bit memory BAR.
    Memory32,
    /// 64-bit memory BAR (takes two BAR registers).
    Memory64,
    /// I/O space BAR.
    Io,
}

/// A sized BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarInfo {
    /// The BAR index (0 to 5).
    pub index: u8,
    /// Its kind.
    pub kind: BarKind,
    /// Prefetchable memory.
    pub prefetchable: bool,
    /// Size in bytes (a power of two).
    pub size: u64,
    /// The address it holds now (bus address).
    pub address: u64,
}

/// A bus address window BARs are placed in, from the bottom up, each at
/// an address aligned to its size (as PCI requires).
#[derive(Debug, Clone, Copy)]
pub struct BarWindow {
    base: u64,
    end: u64,
    next: u64,
}

impl BarWindow {
    /// The window `base .. base + len`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty window or one that wraps.
    pub fn new(base: u64, len: u64) -> Result<Self, Error> {
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(Error::InvalidArgument("BAR window empty or wrapping"))?;
        Ok(Self {
            base,
            end,
            next: base,
        })
    }

    /// Bytes not yet handed out (above the last placement).
    pub fn free(&self) -> u64 {
        self.end - self.next
    }

    /// Places `size` bytes (a power of two) at an address aligned to it,
    /// below `limit` (exclusive).
    fn place(&mut self, size: u64, limit: u64) -> Option<u64> {
        let at = self.next.checked_add(size - 1)? & !(size - 1);
        let end = at.checked_add(size)?;
        if end > self.end || end > limit {
            return None;
        }
        self.next = end;
        Some(at)
    }
}

/// One PCI function on a [`ConfigSpace`].
#[derive(Debug, Clone, Copy)]
pub struct PciFunction<C> {
    cs: C,
    bdf: Bdf,
}

impl<C: ConfigSpace> PciFunction<C> {
    /// The function at `bdf` of `cs` (nothing is checked: a missing
    /// function reads all ones).
    pub fn new(cs: C, bdf: Bdf) -> Self {
        Self { cs, bdf }
    }

    /// Its address.
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    /// Vendor ID.
    pub fn vendor_id(&self) -> u16 {
        self.cs.read32(self.bdf, VENDOR_ID) as u16
    }

    /// Device ID.
    pub fn device_id(&self) -> u16 {
        (self.cs.read32(self.bdf, VENDOR_ID) >> 16) as u16
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.cs.read32(self.bdf, COMMAND) as u16
    }

    /// Sets `bits` in the command register (e.g. [`COMMAND_MEMORY`] |
    /// [`COMMAND_BUS_MASTER`]).
    pub fn enable(&self, bits: u16) {
        let c = self.command();
        self.cs.write16(self.bdf, COMMAND, c | bits);
    }

    /// Sizes BAR `index`: the standard probe (all ones written, the size
    /// read back from the bits that stay zero), with memory and I/O
    /// decoding off meanwhile; the BAR and the command register are
    /// restored.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchBar`] for an index above 5 (or 5 holding the low
    /// half of a 64-bit BAR), [`Error::BarNotImplemented`] for a BAR that
    /// reads back 0.
    pub fn bar(&self, index: u8) -> Result<BarInfo, Error> {
        if index > 5 {
            return Err(Error::NoSuchBar(index));
        }
        let off = BAR0 + 4 * u16::from(index);
        let cmd = self.command();
        self.cs.write16(self.bdf, COMMAND, cmd & !0x3);
        let lo = self.cs.read32(self.bdf, off);
        self.cs.write32(self.bdf, off, u32::MAX);
        let lo_mask = self.cs.read32(self.bdf, off);
        self.cs.write32(self.bdf, off, lo);
        let r = self.decode(index, off, lo, lo_mask);
        self.cs.write16(self.bdf, COMMAND, cmd);
        r
    }

    fn decode(&self, index: u8, off: u16, lo: u32, lo_mask: u32) -> Result<BarInfo, Error> {
        if lo_mask == 0 || lo_mask == u32::MAX {
            // All ones: no function there (or a broken BAR).
            return Err(Error::BarNotImplemented { bar: index });
        }
        if lo & 1 == 1 {
            let mask = lo_mask & !0x3;
            let size = u64::from((!mask).wrapping_add(1) & 0xffff);
            return Ok(BarInfo {
                index,
                kind: BarKind::Io,
                prefetchable: false,
                size,
                address: u64::from(lo & !0x3),
            });
        }
        let prefetchable = lo & 0x8 != 0;
        let (kind, mask, address) = match (lo >> 1) & 0x3 {
            0 => (
                BarKind::Memory32,
                0xffff_ffff_0000_0000 | u64::from(lo_mask & !0xf),
                u64::from(lo & !0xf),
            ),
            2 => {
                if index == 5 {
                    return Err(Error::NoSuchBar(index));
                }
                let hi = self.cs.read32(self.bdf, off + 4);
                self.cs.write32(self.bdf, off + 4, u32::MAX);
                let hi_mask = self.cs.read32(self.bdf, off + 4);
                self.cs.write32(self.bdf, off + 4, hi);
                (
                    BarKind::Memory64,
                    (u64::from(hi_mask) << 32) | u64::from(lo_mask & !0xf),
                    (u64::from(hi) << 32) | u64::from(lo & !0xf),
                )
            }
            _ => return Err(Error::BarNotImplemented { bar: index }),
        };
        let size = (!mask).wrapping_add(1);
        if size == 0 || !size.is_power_of_two() {
            return Err(Error::BarNotImplemented { bar: index });
        }
        Ok(BarInfo {
            index,
            kind,
            prefetchable,
            size,
            address,
        })
    }

    /// Sizes memory BAR `index`, places it in `window` at an address
    /// aligned to its size, programs it and returns what it is now.
    /// Decoding is not enabled (see [`enable`](Self::enable)).
    ///
    /// # Errors
    ///
    /// Those of [`bar`](Self::bar); [`Error::InvalidArgument`] for an I/O
    /// BAR; [`Error::BarDoesNotFit`] if the window has no room for it (a
    /// 32-bit BAR must also end below 4 GiB). The window is unchanged then.
    pub fn assign_bar(&self, index: u8, window: &mut BarWindow) -> Result<BarInfo, Error> {
        let mut b = self.bar(index)?;
        let limit = match b.kind {
            BarKind::Io => {
                return Err(Error::InvalidArgument(
                    "I/O BARs are not assigned (memory BARs only)",
                ));
            }
            BarKind::Memory32 => 1 << 32,
            BarKind::Memory64 => u64::MAX,
        };
        let at = window.place(b.size, limit).ok_or(Error::BarDoesNotFit {
            bar: index,
            size: b.size,
            window_base: window.base,
            window_end: window.end,
            free: window.free(),
        })?;
        let off = BAR0 + 4 * u16::from(index);
        let cmd = self.command();
        self.cs.write16(self.bdf, COMMAND, cmd & !0x3);
        self.cs.write32(self.bdf, off, at as u32);
        if b.kind == BarKind::Memory64 {
            self.cs.write32(self.bdf, off + 4, (at >> 32) as u32);
        }
        self.cs.write16(self.bdf, COMMAND, cmd);
        b.address = at;
        Ok(b)
    }
}

impl<C: ConfigSpace> PciHooks for PciFunction<C> {
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
        check_range(offset, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            let o = offset + i as u16;
            *b = (self.cs.read32(self.bdf, o & !3) >> ((o & 3) * 8)) as u8;
        }
        Ok(())
    }

    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error> {
        check_range(offset, buf.len())?;
        let mut i = 0;
        while i < buf.len() {
            let o = offset + i as u16;
            let left = buf.len() - i;
            if o % 4 == 0 && left >= 4 {
                let v = u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
                self.cs.write32(self.bdf, o, v);
                i += 4;
            } else if o % 2 == 0 && left >= 2 {
                self.cs
                    .write16(self.bdf, o, u16::from_le_bytes([buf[i], buf[i + 1]]));
                i += 2;
            } else {
                self.cs.write8(self.bdf, o, buf[i]);
                i += 1;
            }
        }
        Ok(())
    }
}

fn check_range(offset: u16, len: usize) -> Result<(), Error> {
    if usize::from(offset) + len > usize::from(CONFIG_SIZE) {
        return Err(Error::InvalidArgument(
            "configuration space access beyond 4 KiB",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::RefCell;
    use std::vec::Vec;

    /// A fake configuration space: functions with IDs and BARs that
    /// decode their size like hardware (low bits read as zero, type bits
    /// fixed), counting the writes of each width.
    /// Address, configuration space, BAR sizes.
    type FakeFunction = (Bdf, [u32; 1024], [u64; 6]);

    #[derive(Debug)]
    struct Fake {
        funcs: RefCell<Vec<FakeFunction>>,
        writes: RefCell<[u32; 3]>,
    }

    const MEM64_PREF: u32 = 0b1100;

    impl Fake {
        fn new() -> Self {
            Fake {
                funcs: RefCell::new(Vec::new()),
                writes: RefCell::new([0; 3]),
            }
        }
        /// A function; `bars[i]` is the BAR's size (0: none), `kinds[i]`
        /// its low type bits.
        fn add(&self, bdf: Bdf, id: u32, multi: bool, bars: [u64; 6], kinds: [u32; 6]) {
            let mut cs = [0u32; 1024];
            cs[0] = id;
            cs[3] = if multi { 0x80 << 16 } else { 0 };
            cs[4..10].copy_from_slice(&kinds);
            self.funcs.borrow_mut().push((bdf, cs, bars));
        }
    }

    impl ConfigSpace for Fake {
        fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
            let f = self.funcs.borrow();
            match f.iter().find(|x| x.0 == bdf) {
                Some(x) => x.1[usize::from(offset / 4)],
                None => u32::MAX,
            }
        }
        fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
            self.writes.borrow_mut()[2] += 1;
            let mut f = self.funcs.borrow_mut();
            let Some(x) = f.iter_mut().find(|x| x.0 == bdf) else {
                return;
            };
            let r = usize::from(offset / 4);
            if (4..10).contains(&r) {
                let i = r - 4;
                // The BAR register: its own size, or the high half of the
                // previous 64-bit BAR.
                let (size, high) = if x.2[i] != 0 {
                    (x.2[i], false)
                } else if i > 0 && x.1[4 + i - 1] & 0b110 == 0b100 {
                    (x.2[i - 1], true)
                } else {
                    (0, false)
                };
                if size == 0 {
                    return;
                }
                let mask = !(size - 1);
                x.1[r] = if high {
                    value & (mask >> 32) as u32
                } else {
                    (value & mask as u32 & !0xf) | (x.1[r] & 0xf)
                };
            } else {
                x.1[r] = value;
            }
        }
        fn write16(&self, bdf: Bdf, offset: u16, value: u16) {
            self.writes.borrow_mut()[1] += 1;
            let shift = u32::from(offset & 2) * 8;
            let d = self.read32(bdf, offset & !3);
            let d = (d & !(0xffff << shift)) | (u32::from(value) << shift);
            let mut f = self.funcs.borrow_mut();
            if let Some(x) = f.iter_mut().find(|x| x.0 == bdf) {
                x.1[usize::from(offset / 4)] = d;
            }
        }
    }

    fn bdf(bus: u8, device: u8, function: u8) -> Bdf {
        Bdf {
            bus,
            device,
            function,
        }
    }

    #[test]
    fn enumeration_finds_functions_and_says_when_absent() {
        let fake = Fake::new();
        fake.add(bdf(0, 0, 0), 0x0008_1b36, false, [0; 6], [0; 6]);
        // Function 3 of a multi-function device on bus 1.
        fake.add(bdf(1, 4, 0), 0x1111_1af4, true, [0; 6], [0; 6]);
        fake.add(bdf(1, 4, 3), 0x1013_15b3, false, [0; 6], [0; 6]);
        // Function 2 of a single-function device is not looked at.
        fake.add(bdf(0, 5, 0), 0x0001_1af4, false, [0; 6], [0; 6]);
        fake.add(bdf(0, 5, 2), 0x1017_15b3, false, [0; 6], [0; 6]);
        let f = find(&fake, 2, 0x15b3, 0x1013).unwrap();
        assert_eq!(f.bdf(), bdf(1, 4, 3));
        assert_eq!((f.vendor_id(), f.device_id()), (0x15b3, 0x1013));
        match find(&fake, 2, 0x15b3, 0x1017) {
            Err(Error::PciDeviceNotFound {
                vendor: 0x15b3,
                device: 0x1017,
                buses: 2,
            }) => {}
            other => panic!("{other:?}"),
        }
        // Bus 1 is not scanned with one bus.
        assert!(matches!(
            find(&fake, 1, 0x15b3, 0x1013),
            Err(Error::PciDeviceNotFound { .. })
        ));
    }

    #[test]
    fn bars_are_sized_assigned_aligned_and_refused_when_they_do_not_fit() {
        let fake = Fake::new();
        // BAR0: 256 bytes of 32-bit memory; BAR2/3: 32 MiB of 64-bit
        // prefetchable memory; BAR4 absent.
        fake.add(
            bdf(0, 2, 0),
            0x1110_1af4,
            false,
            [256, 0, 32 << 20, 0, 0, 0],
            [0, 0, MEM64_PREF, 0, 0, 0],
        );
        let f = PciFunction::new(&fake, bdf(0, 2, 0));
        f.enable(COMMAND_MEMORY);
        let b0 = f.bar(0).unwrap();
        assert_eq!(
            (b0.kind, b0.size, b0.prefetchable),
            (BarKind::Memory32, 256, false)
        );
        let b2 = f.bar(2).unwrap();
        assert_eq!(
            (b2.kind, b2.size, b2.prefetchable),
            (BarKind::Memory64, 32 << 20, true)
        );
        // Sizing restores the BAR and the command register.
        assert_eq!(fake.read32(bdf(0, 2, 0), BAR0 + 8), MEM64_PREF);
        assert_eq!(f.command(), COMMAND_MEMORY);
        assert!(matches!(f.bar(4), Err(Error::BarNotImplemented { bar: 4 })));
        assert!(matches!(f.bar(6), Err(Error::NoSuchBar(6))));

        let mut w = BarWindow::new(0x1000_0100, 0x4000_0000).unwrap();
        let b0 = f.assign_bar(0, &mut w).unwrap();
        assert_eq!(b0.address, 0x1000_0100);
        let b2 = f.assign_bar(2, &mut w).unwrap();
        // Aligned to its 32 MiB size.
        assert_eq!(b2.address, 0x1200_0000);
        assert_eq!(f.bar(2).unwrap().address, 0x1200_0000);
        assert_eq!(f.bar(0).unwrap().address, 0x1000_0100);

        // A window too small: typed error, window unchanged.
        let mut small = BarWindow::new(0x2000_0000, 16 << 20).unwrap();
        match f.assign_bar(2, &mut small) {
            Err(Error::BarDoesNotFit {
                bar: 2, size, free, ..
            }) => assert_eq!((size, free), (32 << 20, 16 << 20)),
            other => panic!("{other:?}"),
        }
        assert_eq!(small.free(), 16 << 20);
        // A 32-bit BAR cannot go above 4 GiB; a 64-bit one can.
        let mut high = BarWindow::new(0x1_0000_0000, 1 << 30).unwrap();
        assert!(matches!(
            f.assign_bar(0, &mut high),
            Err(Error::BarDoesNotFit { bar: 0, .. })
        ));
        assert_eq!(f.assign_bar(2, &mut high).unwrap().address, 0x1_0000_0000);
        assert_eq!(f.bar(2).unwrap().address, 0x1_0000_0000);
        assert!(BarWindow::new(u64::MAX, 2).is_err());
        assert!(BarWindow::new(0, 0).is_err());
    }

    #[test]
    fn hooks_read_and_write_config_space_with_sized_writes() {
        let fake = Fake::new();
        fake.add(bdf(0, 1, 0), 0x1013_15b3, false, [0; 6], [0; 6]);
        let f = PciFunction::new(&fake, bdf(0, 1, 0));
        let mut id = [0u8; 4];
        f.config_read(0, &mut id).unwrap();
        assert_eq!(id, [0xb3, 0x15, 0x13, 0x10]);
        let mut b = [0u8; 2];
        f.config_read(2, &mut b).unwrap();
        assert_eq!(u16::from_le_bytes(b), 0x1013);
        // The command register is written as a word, not a dword.
        let before = *fake.writes.borrow();
        f.config_write(COMMAND, &6u16.to_le_bytes()).unwrap();
        let after = *fake.writes.borrow();
        assert_eq!((after[1] - before[1], after[2] - before[2]), (1, 0));
        assert_eq!(f.command(), 6);
        assert!(matches!(
            f.config_read(4095, &mut b),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            f.config_write(4096, &[0]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn ecam_addresses_and_bounds() {
        // Two buses of "ECAM" in ordinary memory.
        let mut mem: Vec<u32> = std::vec![u32::MAX; (2 << 20) / 4 + 1024];
        let p = mem.as_mut_ptr().cast::<u8>();
        let skip = p.align_offset(4096);
        // SAFETY: in bounds (1024 spare dwords cover the alignment).
        let base = NonNull::new(unsafe { p.add(skip) }).unwrap();
        // SAFETY: the memory outlives `ecam` and is not otherwise used
        // while it exists.
        let ecam = unsafe { Ecam::new(base, 2 << 20) }.unwrap();
        assert_eq!(ecam.buses(), 2);
        let b = bdf(1, 3, 0);
        ecam.write32(b, 0, 0x1110_1af4);
        ecam.write16(b, COMMAND, 0x0006);
        ecam.write8(b, 0x3c, 0x2a);
        let off = (1 << 20) | (3 << 15);
        // SAFETY: reads of the memory written through the window.
        unsafe {
            assert_eq!(base.add(off).cast::<u32>().read(), 0x1110_1af4u32.to_le());
            assert_eq!(base.add(off + 4).cast::<u16>().read(), 6u16.to_le());
            assert_eq!(base.add(off + 0x3c).read(), 0x2a);
        }
        assert_eq!(ecam.find(0x1af4, 0x1110).unwrap().bdf(), b);
        // Bus 2 is outside: reads all ones, the function is refused.
        assert_eq!(ecam.read32(bdf(2, 0, 0), 0), u32::MAX);
        assert!(ecam.function(bdf(2, 0, 0)).is_err());
        assert_eq!(ecam.read32(b, 2), u32::MAX, "misaligned dword read");
        // SAFETY: refused before use.
        unsafe {
            assert!(Ecam::new(base, 3 << 19).is_err());
            assert!(Ecam::new(base.add(4), 1 << 20).is_err());
        }
        drop(mem);
    }
}
