//! MSI-X interrupts of a VFIO device, delivered through eventfds.
//!
//! [`MsixVectors`] holds one eventfd per enabled vector. Enabling creates
//! the eventfds (`eventfd(2)`, non-blocking, close-on-exec) and hands them
//! to the kernel with `VFIO_DEVICE_SET_IRQS` (`VFIO_IRQ_SET_DATA_EVENTFD |
//! VFIO_IRQ_SET_ACTION_TRIGGER` on `VFIO_PCI_MSIX_IRQ_INDEX`, vectors
//! `0..n`); the kernel adds 1 to a vector's eventfd counter for each
//! interrupt. Disabling sends `VFIO_IRQ_SET_DATA_NONE |
//! VFIO_IRQ_SET_ACTION_TRIGGER` with count 0 and closes the eventfds.
//!
//! A wait reads (and so resets) the eventfd counter into the vector's own
//! running count under a lock, then sleeps in `ppoll(2)` until the eventfd
//! is readable or the time is up. Several threads may wait on one vector:
//! all of them wake when it becomes readable; the one that reads it adds
//! to the running count, which the others then see.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};
use std::vec::Vec;
use std::{format, vec};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_MSIX_IRQ_INDEX,
};

use crate::Error;

/// `_IO(VFIO_TYPE, VFIO_BASE + 10)`.
pub(crate) const VFIO_DEVICE_SET_IRQS: u64 = (59 << 8) | (100 + 10);

/// Size of `struct vfio_irq_set` without its data.
const IRQ_SET_HEADER: usize = 20;

fn sys(what: &str) -> Error {
    Error::Sys {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    }
}

/// The bytes of a `struct vfio_irq_set` for `VFIO_PCI_MSIX_IRQ_INDEX`:
/// with `fds`, `DATA_EVENTFD | ACTION_TRIGGER` for vectors `0..fds.len()`;
/// without, `DATA_NONE | ACTION_TRIGGER` with count 0 (disable every
/// vector).
pub fn msix_irq_set(fds: &[RawFd]) -> Vec<u8> {
    let argsz = IRQ_SET_HEADER + 4 * fds.len();
    let flags = if fds.is_empty() {
        VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER
    } else {
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER
    };
    let mut b = Vec::with_capacity(argsz);
    for w in [
        argsz as u32,
        flags,
        VFIO_PCI_MSIX_IRQ_INDEX,
        0,
        fds.len() as u32,
    ] {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    for fd in fds {
        b.extend_from_slice(&fd.to_ne_bytes());
    }
    b
}

/// Issues `VFIO_DEVICE_SET_IRQS` with the bytes of a `struct
/// vfio_irq_set` on a device file descriptor.
pub(crate) fn set_irqs(device: RawFd, set: &[u8]) -> Result<(), Error> {
    // The kernel reads `argsz` bytes; the buffer is exactly that long. Copy
    // into 4-byte aligned storage, as the struct is.
    let mut words = vec![0u32; set.len().div_ceil(4)];
    for (w, c) in words.iter_mut().zip(set.chunks(4)) {
        let mut a = [0u8; 4];
        a[..c.len()].copy_from_slice(c);
        *w = u32::from_ne_bytes(a);
    }
    // SAFETY: `words` holds a complete `struct vfio_irq_set` whose `argsz`
    // is its length; the kernel only reads it.
    let rc = unsafe { libc::ioctl(device, VFIO_DEVICE_SET_IRQS as _, words.as_ptr()) };
    if rc != 0 {
        return Err(sys("VFIO_DEVICE_SET_IRQS on the MSI-X index"));
    }
    Ok(())
}

/// One enabled vector: its eventfd and its running interrupt count.
///
/// Only one thread at a time (the reader) sleeps in `ppoll(2)` on the
/// eventfd and reads it; other waiters of the vector sleep on a condition
/// variable the reader signals after each read. So no waiter can go to
/// sleep on an eventfd another thread has just emptied.
#[derive(Debug)]
pub struct Vector {
    fd: OwnedFd,
    state: Mutex<VectorState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct VectorState {
    count: u64,
    reading: bool,
}

impl Vector {
    /// A new non-blocking eventfd.
    pub fn new() -> Result<Self, Error> {
        // SAFETY: eventfd takes no pointer; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys("eventfd for an MSI-X vector"));
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody
        // else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            fd,
            state: Mutex::new(VectorState::default()),
            cv: Condvar::new(),
        })
    }

    /// The eventfd (for `VFIO_DEVICE_SET_IRQS`).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn lock(&self) -> MutexGuard<'_, VectorState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds what the eventfd counted to `st.count` (non-blocking read).
    fn fold(&self, st: &mut VectorState) -> Result<(), Error> {
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into `v`.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut v).cast::<libc::c_void>(), 8) };
        if n == 8 {
            st.count = st.count.wrapping_add(v);
        } else if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                return Err(Error::Sys {
                    what: format!(
                        "reading the eventfd of an MSI-X vector (fd {})",
                        self.raw_fd()
                    ),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// The running count, with what the eventfd holds now (unless a reader
    /// is about to take it).
    pub fn count(&self) -> Result<u64, Error> {
        let mut st = self.lock();
        if !st.reading {
            self.fold(&mut st)?;
        }
        Ok(st.count)
    }

    /// Sleeps in `ppoll(2)` until the eventfd is readable or `left` passed.
    fn sleep(&self, left: Duration) -> Result<(), Error> {
        let ts = libc::timespec {
            tv_sec: left.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let rc = unsafe { libc::ppoll(&raw mut pfd, 1, &raw const ts, std::ptr::null()) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::Sys {
                    what: format!(
                        "ppoll on the eventfd of an MSI-X vector (fd {})",
                        self.raw_fd()
                    ),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// The wait of [`Platform::wait_interrupt`](crate::Platform::wait_interrupt)
    /// on this vector.
    pub fn wait(&self, seen: u64, timeout: Duration) -> Result<u64, Error> {
        let start = Instant::now();
        let mut st = self.lock();
        loop {
            if !st.reading {
                self.fold(&mut st)?;
            }
            let left = timeout.saturating_sub(start.elapsed());
            if st.count > seen || left.is_zero() {
                return Ok(st.count);
            }
            if st.reading {
                st = self
                    .cv
                    .wait_timeout(st, left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
                continue;
            }
            st.reading = true;
            drop(st);
            let slept = self.sleep(left);
            st = self.lock();
            st.reading = false;
            let folded = self.fold(&mut st);
            self.cv.notify_all();
            slept?;
            folded?;
        }
    }
}

/// The MSI-X vectors of a device: how many it offers and the enabled ones.
#[derive(Debug)]
pub struct MsixVectors {
    available: u16,
    enabled: RwLock<Vec<Arc<Vector>>>,
}

impl MsixVectors {
    /// A device offering `available` vectors (0: none), none enabled.
    pub fn new(available: u16) -> Self {
        Self {
            available,
            enabled: RwLock::new(Vec::new()),
        }
    }

    /// Vectors the device offers.
    pub fn available(&self) -> u16 {
        self.available
    }

    /// Vectors enabled now.
    pub fn enabled(&self) -> u16 {
        self.read().len() as u16
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Vector>>> {
        self.enabled
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Enables vectors `0..n`: new eventfds, handed to the device with
    /// `set` (the `struct vfio_irq_set` bytes of [`msix_irq_set`]); vectors
    /// enabled before are disabled first. On a failure of the enable the
    /// vectors are left disabled.
    pub fn enable(
        &self,
        n: u16,
        mut set: impl FnMut(&[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if self.available == 0 {
            return Err(Error::NotSupported(
                "the device has no MSI-X vectors VFIO can signal through eventfds",
            ));
        }
        if n == 0 || n > self.available {
            return Err(Error::TooManyVectors {
                requested: n,
                available: self.available,
            });
        }
        let vectors = (0..n)
            .map(|_| Vector::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let fds: Vec<RawFd> = vectors.iter().map(|v| v.raw_fd()).collect();
        let mut enabled = self
            .enabled
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !enabled.is_empty() {
            // vfio-pci does not resize an enabled MSI-X block
            // (VFIO_IRQ_INFO_NORESIZE): disable it first.
            set(&msix_irq_set(&[]))?;
            enabled.clear();
        }
        set(&msix_irq_set(&fds))?;
        *enabled = vectors;
        Ok(())
    }

    /// Disables every vector with `set` (the disabling `struct
    /// vfio_irq_set` of [`msix_irq_set`]) and closes the eventfds (a thread
    /// still waiting keeps its vector until it returns). Nothing enabled:
    /// nothing is done.
    pub fn disable(&self, set: impl FnOnce(&[u8]) -> Result<(), Error>) -> Result<(), Error> {
        let mut enabled = self
            .enabled
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if enabled.is_empty() {
            return Ok(());
        }
        let r = set(&msix_irq_set(&[]));
        enabled.clear();
        r
    }

    /// An enabled vector.
    pub fn vector(&self, vector: u16) -> Result<Arc<Vector>, Error> {
        let enabled = self.read();
        enabled
            .get(usize::from(vector))
            .cloned()
            .ok_or(Error::VectorNotEnabled {
                vector,
                enabled: enabled.len() as u16,
            })
    }

    /// [`Platform::wait_interrupt`](crate::Platform::wait_interrupt).
    pub fn wait(&self, vector: u16, seen: u64, timeout: Duration) -> Result<u64, Error> {
        self.vector(vector)?.wait(seen, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel does for an interrupt: add 1 to the eventfd.
    fn signal(fd: RawFd) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one`.
        let n = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
        assert_eq!(n, 8);
    }

    fn enabled(n: u16) -> (MsixVectors, Vec<u8>) {
        let v = MsixVectors::new(4);
        let mut seen = Vec::new();
        v.enable(n, |b| {
            seen = b.to_vec();
            Ok(())
        })
        .unwrap();
        (v, seen)
    }

    #[test]
    fn irq_set_layout_is_the_kernels() {
        let b = msix_irq_set(&[7, 9]);
        let w: Vec<u32> = b
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w, [28, 4 | 32, 2, 0, 2, 7, 9]);
        let off = msix_irq_set(&[]);
        let w: Vec<u32> = off
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w, [20, 1 | 32, 2, 0, 0]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run eventfd")]
    fn arguments_are_checked() {
        let none = MsixVectors::new(0);
        let e = none.enable(1, |_| Ok(())).unwrap_err();
        assert!(matches!(e, Error::NotSupported(_)), "{e}");
        let v = MsixVectors::new(4);
        for n in [0, 5] {
            let e = v.enable(n, |_| panic!("not called")).unwrap_err();
            assert!(
                matches!(e, Error::TooManyVectors { requested, available: 4 } if requested == n),
                "{e}"
            );
        }
        let e = v.wait(0, 0, Duration::ZERO).unwrap_err();
        assert!(
            matches!(
                e,
                Error::VectorNotEnabled {
                    vector: 0,
                    enabled: 0
                }
            ),
            "{e}"
        );
        // A refused SET_IRQS leaves nothing enabled.
        let e = v
            .enable(2, |_| Err(Error::InvalidArgument("refused")))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument("refused")));
        assert_eq!(v.enabled(), 0);
        let (v, set) = enabled(2);
        assert_eq!(set.len(), 28);
        // Enabling again disables first (no resize of an enabled block).
        let mut calls = Vec::new();
        v.enable(3, |b| {
            calls.push(b.len());
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, [20, 32]);
        v.enable(2, |_| Ok(())).unwrap();
        let e = v.wait(2, 0, Duration::ZERO).unwrap_err();
        assert!(
            matches!(
                e,
                Error::VectorNotEnabled {
                    vector: 2,
                    enabled: 2
                }
            ),
            "{e}"
        );
        v.disable(|b| {
            assert_eq!(b.len(), 20);
            Ok(())
        })
        .unwrap();
        assert_eq!(v.enabled(), 0);
        v.disable(|_| panic!("nothing enabled")).unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run eventfd")]
    fn an_interrupt_before_the_wait_is_not_lost_and_a_quiet_wait_times_out() {
        let (v, _) = enabled(2);
        let seen = v.vector(1).unwrap().count().unwrap();
        assert_eq!(seen, 0);
        // Times out with the count unchanged.
        assert_eq!(v.wait(1, seen, Duration::from_millis(5)).unwrap(), 0);
        // Fired before the wait: the wait returns at once with the count.
        signal(v.vector(1).unwrap().raw_fd());
        signal(v.vector(1).unwrap().raw_fd());
        assert_eq!(v.wait(1, seen, Duration::from_secs(3600)).unwrap(), 2);
        // Vector 0 saw nothing.
        assert_eq!(v.wait(0, 0, Duration::ZERO).unwrap(), 0);
        // Already above `seen`: returns without waiting.
        assert_eq!(v.wait(1, 1, Duration::from_secs(3600)).unwrap(), 2);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run eventfd")]
    fn every_waiter_of_a_vector_wakes() {
        let (v, _) = enabled(1);
        let v = Arc::new(v);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let v = v.clone();
                std::thread::spawn(move || v.wait(0, 0, Duration::from_secs(3600)).unwrap())
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        signal(v.vector(0).unwrap().raw_fd());
        for w in waiters {
            assert_eq!(w.join().unwrap(), 1);
        }
    }
}
