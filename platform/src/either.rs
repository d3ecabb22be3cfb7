//! [`Either`]: one of two platforms (and one of their register windows),
//! chosen at run time.

use core::time::Duration;

use crate::{Be32, Be64, DmaRegion, Error, Mmio, Platform};

/// One of two platforms, or one of two register windows, chosen at run
/// time.
///
/// A program that picks its platform at run time (the emulated ConnectX or
/// a PCI function under VFIO, for example) opens either kind of device
/// into one concrete type, `Hca<Either<A, B>>`, and keeps it in ordinary
/// structs and locals, instead of being generic over the platform (or
/// passing a callback generic over it) everywhere. Both variants implement
/// [`Platform`] and [`Mmio`] by forwarding every method, the provided ones
/// included, to the value inside, so each behaves exactly as the platform
/// it holds; [`Platform::Mmio`] is `Either<L::Mmio, R::Mmio>`, and a BAR
/// mapped from a `Left` platform is a `Left` window.
///
/// # Cost
///
/// Every call branches on the variant first, including each doorbell rung
/// through [`Register64::write`](crate::Register64::write) and each
/// BlueFlame copy. A program talks to one kind of device, so the branch is
/// well predicted, but it is a branch that code generic over one platform
/// does not pay: a data path whose instructions per operation matter is
/// instantiated with the platform itself (the data-path benchmarks are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Either<L, R> {
    /// The first kind.
    Left(L),
    /// The second kind.
    Right(R),
}

impl<L, R> Either<L, R> {
    /// The value if it is a `Left`.
    pub fn left(&self) -> Option<&L> {
        match self {
            Either::Left(l) => Some(l),
            Either::Right(_) => None,
        }
    }

    /// The value if it is a `Right`.
    pub fn right(&self) -> Option<&R> {
        match self {
            Either::Left(_) => None,
            Either::Right(r) => Some(r),
        }
    }
}

/// Forwards a call to the value inside, whichever variant it is.
macro_rules! forward {
    ($self:expr, $v:ident => $call:expr) => {
        match $self {
            Either::Left($v) => $call,
            Either::Right($v) => $call,
        }
    };
}

impl<L: Mmio, R: Mmio> Mmio for Either<L, R> {
    #[inline(always)]
    fn len(&self) -> usize {
        forward!(self, m => m.len())
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        forward!(self, m => m.is_empty())
    }

    #[inline(always)]
    fn read32(&self, offset: usize) -> Be32 {
        forward!(self, m => m.read32(offset))
    }

    #[inline(always)]
    fn write32(&self, offset: usize, value: Be32) {
        forward!(self, m => m.write32(offset, value))
    }

    #[inline(always)]
    fn write64(&self, offset: usize, value: Be64) {
        forward!(self, m => m.write64(offset, value))
    }

    #[inline(always)]
    fn write_bf(&self, offset: usize, src: &[Be64]) {
        forward!(self, m => m.write_bf(offset, src))
    }

    #[inline(always)]
    fn check(&self, offset: usize, width: usize) -> Result<(), Error> {
        forward!(self, m => m.check(offset, width))
    }

    /// The unchecked store of the window inside.
    #[inline(always)]
    unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
        match self {
            // SAFETY: `self.len()` is the inner window's `len` (forwarded
            // above, and a value never changes variant behind `&self`), so
            // the caller's guarantee (`offset` 8-byte aligned, `offset + 8
            // <= self.len()`, a length that does not change while the
            // window exists) is exactly the inner window's contract.
            Either::Left(m) => unsafe { m.write64_unchecked(offset, value) },
            // SAFETY: as for `Left`.
            Either::Right(m) => unsafe { m.write64_unchecked(offset, value) },
        }
    }
}

impl<L: Platform, R: Platform> Platform for Either<L, R> {
    type Mmio = Either<L::Mmio, R::Mmio>;

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaRegion, Error> {
        forward!(self, p => p.alloc_dma(len, align))
    }

    fn free_dma(&self, region: DmaRegion) {
        forward!(self, p => p.free_dma(region))
    }

    fn map_bar(&self, bar: u8) -> Result<Self::Mmio, Error> {
        match self {
            Either::Left(p) => p.map_bar(bar).map(Either::Left),
            Either::Right(p) => p.map_bar(bar).map(Either::Right),
        }
    }

    fn bar_write_combining(&self, bar: u8) -> bool {
        forward!(self, p => p.bar_write_combining(bar))
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
        forward!(self, p => p.config_read(offset, buf))
    }

    fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error> {
        forward!(self, p => p.config_write(offset, buf))
    }

    fn now(&self) -> Duration {
        forward!(self, p => p.now())
    }

    fn delay(&self, d: Duration) {
        forward!(self, p => p.delay(d))
    }

    #[inline(always)]
    fn relax(&self) {
        forward!(self, p => p.relax())
    }

    fn reset_function(&self) -> Result<(), Error> {
        forward!(self, p => p.reset_function())
    }

    fn msix_vectors(&self) -> u16 {
        forward!(self, p => p.msix_vectors())
    }

    fn enable_msix(&self, n: u16) -> Result<(), Error> {
        forward!(self, p => p.enable_msix(n))
    }

    fn disable_msix(&self) -> Result<(), Error> {
        forward!(self, p => p.disable_msix())
    }

    fn wait_interrupt(&self, vector: u16, seen: u64, timeout: Duration) -> Result<u64, Error> {
        forward!(self, p => p.wait_interrupt(vector, seen, timeout))
    }

    fn interrupt_count(&self, vector: u16) -> Result<u64, Error> {
        forward!(self, p => p.interrupt_count(vector))
    }

    fn map_user(&self, mem: crate::user::UserMemory) -> Result<crate::UserMapping, Error> {
        forward!(self, p => p.map_user(mem))
    }

    fn interrupt_fd(&self, vector: u16) -> Option<i32> {
        forward!(self, p => p.interrupt_fd(vector))
    }

    fn unmap_user(&self, mapping: crate::UserMapping) -> Result<(), Error> {
        forward!(self, p => p.unmap_user(mapping))
    }

    fn describe(&self) -> &str {
        forward!(self, p => p.describe())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use core::cell::{Cell, RefCell};
    use core::ptr::NonNull;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::MmioWindow;

    /// A window that records what reached it, by which method.
    struct Log {
        len: usize,
        calls: RefCell<Vec<(&'static str, usize, u64)>>,
    }

    impl Log {
        fn new(len: usize) -> Self {
            Self {
                len,
                calls: RefCell::default(),
            }
        }
    }

    impl Mmio for Log {
        fn len(&self) -> usize {
            self.len
        }
        fn read32(&self, offset: usize) -> Be32 {
            self.calls.borrow_mut().push(("read32", offset, 0));
            Be32::new(offset as u32 | 0x8000_0000)
        }
        fn write32(&self, offset: usize, value: Be32) {
            self.calls
                .borrow_mut()
                .push(("write32", offset, u64::from(value.get())));
        }
        fn write64(&self, offset: usize, value: Be64) {
            self.calls
                .borrow_mut()
                .push(("write64", offset, value.get()));
        }
        fn write_bf(&self, offset: usize, src: &[Be64]) {
            self.calls
                .borrow_mut()
                .push(("write_bf", offset, src.len() as u64));
        }
        fn check(&self, offset: usize, width: usize) -> Result<(), Error> {
            self.calls
                .borrow_mut()
                .push(("check", offset, width as u64));
            crate::mmio::check_access(self.len, offset, width)
        }
        unsafe fn write64_unchecked(&self, offset: usize, value: Be64) {
            self.calls
                .borrow_mut()
                .push(("write64_unchecked", offset, value.get()));
        }
    }

    #[test]
    fn windows_forward_to_the_variant_inside() {
        let l: Either<Log, Log> = Either::Left(Log::new(0x100));
        let r: Either<Log, Log> = Either::Right(Log::new(0x40));
        assert_eq!((l.len(), r.len()), (0x100, 0x40));
        assert!(!l.is_empty());
        assert_eq!(l.read32(0x10).get(), 0x8000_0010);
        l.write32(0x14, Be32::new(7));
        l.write64(0x18, Be64::new(8));
        l.write_bf(0x80, &[Be64::ZERO; 4]);
        assert!(l.check(0x100, 4).is_err());
        r.write64(0x38, Be64::new(9));
        let calls = |e: &Either<Log, Log>| match e {
            Either::Left(m) | Either::Right(m) => m.calls.take(),
        };
        assert_eq!(
            calls(&l),
            [
                ("read32", 0x10, 0),
                ("write32", 0x14, 7),
                ("write64", 0x18, 8),
                ("write_bf", 0x80, 4),
                ("check", 0x100, 4),
            ]
        );
        assert_eq!(calls(&r), [("write64", 0x38, 9)]);
    }

    #[test]
    fn doorbells_take_the_inner_unchecked_store_after_one_check() {
        let r: Either<Log, Log> = Either::Right(Log::new(0x40));
        let db = r.register64(0x38).unwrap();
        db.write(Be64::new(1));
        db.write(Be64::new(2));
        assert_eq!(
            r.right().unwrap().calls.take(),
            [
                ("write64_unchecked", 0x38, 1),
                ("write64_unchecked", 0x38, 2)
            ]
        );
        // Checked against the inner window's length.
        assert!(r.register64(0x40).is_err());
        assert!(r.register64(0x3c).is_err());
        assert!(
            Either::<Log, Log>::Left(Log::new(0x48))
                .register64(0x40)
                .is_ok()
        );
    }

    #[test]
    fn a_real_window_inside_stores_through() {
        let mut mem = vec![0u64; 8];
        // SAFETY: `mem` is 8-byte aligned and valid for 64 bytes of
        // volatile accesses while `w` exists (dropped before `mem`).
        let w = unsafe { MmioWindow::new(NonNull::new(mem.as_mut_ptr().cast()).unwrap(), 64) };
        let e: Either<Log, MmioWindow> = Either::Right(w);
        e.register64(56)
            .unwrap()
            .write(Be64::new(0x1122_3344_5566_7788));
        e.write_bf(0, &[Be64::new(1), Be64::new(2)]);
        e.write32(16, Be32::new(0xabcd));
        assert_eq!(e.read32(60).get(), 0x5566_7788);
        assert_eq!(e.read32(12).get(), 2);
        assert_eq!(e.read32(16).get(), 0xabcd);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.read32(64)));
        assert!(
            r.is_err(),
            "an access outside the inner window went through"
        );
        drop(e);
        assert_eq!(mem[7], Be64::new(0x1122_3344_5566_7788).to_raw());
    }

    /// A platform that names itself and counts what it was asked.
    struct Fake {
        name: &'static str,
        vectors: u16,
        interrupts: Cell<u64>,
        delays: Cell<u32>,
        config_writes: RefCell<Vec<(u16, Vec<u8>)>>,
    }

    impl Fake {
        fn new(name: &'static str, vectors: u16) -> Self {
            Self {
                name,
                vectors,
                interrupts: Cell::new(0),
                delays: Cell::new(0),
                config_writes: RefCell::default(),
            }
        }
    }

    impl Platform for Fake {
        type Mmio = Log;
        fn alloc_dma(&self, _: usize, _: usize) -> Result<DmaRegion, Error> {
            Err(Error::InvalidArgument(self.name))
        }
        fn free_dma(&self, _: DmaRegion) {}
        fn map_bar(&self, bar: u8) -> Result<Log, Error> {
            match bar {
                0 => Ok(Log::new(usize::from(self.vectors) * 0x100)),
                b => Err(Error::NoSuchBar(b)),
            }
        }
        fn bar_write_combining(&self, bar: u8) -> bool {
            bar == 0 && self.vectors > 1
        }
        fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), Error> {
            buf.fill(offset as u8 ^ self.vectors as u8);
            Ok(())
        }
        fn config_write(&self, offset: u16, buf: &[u8]) -> Result<(), Error> {
            self.config_writes.borrow_mut().push((offset, buf.to_vec()));
            Ok(())
        }
        fn now(&self) -> Duration {
            Duration::from_secs(u64::from(self.vectors))
        }
        fn delay(&self, _: Duration) {
            self.delays.set(self.delays.get() + 1);
        }
        fn reset_function(&self) -> Result<(), Error> {
            Err(Error::DeviceGone)
        }
        fn msix_vectors(&self) -> u16 {
            self.vectors
        }
        fn enable_msix(&self, n: u16) -> Result<(), Error> {
            if n > self.vectors {
                return Err(Error::TooManyVectors {
                    requested: n,
                    available: self.vectors,
                });
            }
            Ok(())
        }
        fn wait_interrupt(&self, _: u16, seen: u64, _: Duration) -> Result<u64, Error> {
            // Records the count the caller had seen.
            self.interrupts.set(seen);
            Ok(7)
        }
        fn describe(&self) -> &str {
            self.name
        }
    }

    #[test]
    fn platforms_forward_to_the_variant_inside() {
        let a: Either<Fake, Fake> = Either::Left(Fake::new("left", 2));
        let b: Either<Fake, Fake> = Either::Right(Fake::new("right", 1));
        assert_eq!((a.describe(), b.describe()), ("left", "right"));
        assert_eq!((a.msix_vectors(), b.msix_vectors()), (2, 1));
        assert_eq!(
            (a.now(), b.now()),
            (Duration::from_secs(2), Duration::from_secs(1))
        );
        assert!(a.bar_write_combining(0) && !b.bar_write_combining(0));
        // A BAR of a Left platform is a Left window.
        assert!(matches!(a.map_bar(0), Ok(Either::Left(m)) if m.len() == 0x200));
        assert!(matches!(b.map_bar(0), Ok(Either::Right(m)) if m.len() == 0x100));
        assert!(matches!(b.map_bar(2), Err(Error::NoSuchBar(2))));
        assert!(matches!(
            a.alloc_dma(4096, 4096),
            Err(Error::InvalidArgument("left"))
        ));
        assert!(matches!(b.reset_function(), Err(Error::DeviceGone)));
        assert!(matches!(
            b.enable_msix(2),
            Err(Error::TooManyVectors {
                requested: 2,
                available: 1
            })
        ));
        assert!(a.enable_msix(2).is_ok());
        assert!(a.disable_msix().is_ok());
        // The provided `interrupt_count` of the platform inside.
        assert_eq!(b.interrupt_count(0).unwrap(), 7);
        assert_eq!(a.wait_interrupt(0, 41, Duration::ZERO).unwrap(), 7);
        a.delay(Duration::from_millis(1));
        a.relax();
        let mut buf = [0u8; 2];
        b.config_read(0x10, &mut buf).unwrap();
        assert_eq!(buf, [0x11; 2]);
        b.config_write(4, &[6, 0]).unwrap();
        let (Either::Left(fa), Either::Right(fb)) = (&a, &b) else {
            unreachable!()
        };
        assert_eq!((fa.delays.get(), fb.delays.get()), (1, 0));
        // `interrupt_count` asks with `seen` at its maximum.
        assert_eq!((fa.interrupts.get(), fb.interrupts.get()), (41, u64::MAX));
        assert_eq!(*fb.config_writes.borrow(), [(4, vec![6, 0])]);
        assert!(fa.config_writes.borrow().is_empty());
        assert!(a.left().is_some() && a.right().is_none() && b.right().is_some());
    }
}
