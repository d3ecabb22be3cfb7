//! File descriptors a program can `poll(2)` on (feature `std`, Linux):
//! what a completion channel's file descriptor is built from.
//!
//! - [`EventFd`]: a non-blocking `eventfd(2)` counter: [`signal`](EventFd::signal)
//!   makes it readable, [`drain`](EventFd::drain) empties it.
//! - [`Epoll`]: an `epoll(7)` set, itself a file descriptor that is
//!   readable while any member is (level-triggered), so one descriptor
//!   can stand for several (an MSI-X vector's eventfd and a channel's own
//!   "events queued" eventfd).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::Error;

fn sys(what: &'static str) -> Error {
    Error::Notify {
        what,
        errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
    }
}

/// A non-blocking, close-on-exec `eventfd(2)`.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with count 0.
    ///
    /// # Errors
    ///
    /// [`Error::Notify`] with the errno of `eventfd(2)`.
    pub fn new() -> Result<Self, Error> {
        // SAFETY: eventfd takes no pointer; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys("eventfd"));
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody
        // else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor.
    pub fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds 1 to the count: the descriptor becomes readable.
    pub fn signal(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one`. A full counter (EAGAIN) is
        // readable already, which is all a signal is for.
        let _ = unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&raw const one).cast::<libc::c_void>(),
                8,
            )
        };
    }

    /// Reads and resets the count (0 when it was not readable).
    pub fn drain(&self) -> u64 {
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into `v`.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&raw mut v).cast::<libc::c_void>(), 8) };
        if n == 8 { v } else { 0 }
    }

    /// Whether the descriptor is readable now (`poll(2)` with no wait).
    pub fn is_readable(&self) -> bool {
        readable(self.raw_fd(), 0)
    }
}

/// Whether `fd` becomes readable within `timeout_ms` milliseconds
/// (`poll(2)`; negative: no limit). `false` on an error of `poll`.
pub fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&raw mut p, 1, timeout_ms) };
    rc > 0 && p.revents & libc::POLLIN != 0
}

/// An `epoll(7)` set (close-on-exec), readable while a member is.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// An empty set.
    ///
    /// # Errors
    ///
    /// [`Error::Notify`] with the errno of `epoll_create1(2)`.
    pub fn new() -> Result<Self, Error> {
        // SAFETY: no pointer; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(sys("epoll_create1"));
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor.
    pub fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds `fd` (level-triggered, readable); adding a member twice is
    /// not an error.
    ///
    /// # Errors
    ///
    /// [`Error::Notify`] with the errno of `epoll_ctl(2)`.
    pub fn add(&self, fd: RawFd) -> Result<(), Error> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: a valid event struct; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(sys("epoll_ctl(EPOLL_CTL_ADD)"));
        }
        Ok(())
    }

    /// Removes `fd`; removing a non-member is not an error.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL.
        let _ = unsafe {
            libc::epoll_ctl(self.raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        miri,
        ignore = "eventfd, epoll and poll are system calls Miri does not run"
    )]
    fn eventfd_in_an_epoll_set() {
        let e = EventFd::new().unwrap();
        let f = EventFd::new().unwrap();
        let set = Epoll::new().unwrap();
        set.add(e.raw_fd()).unwrap();
        set.add(e.raw_fd()).unwrap();
        set.add(f.raw_fd()).unwrap();
        assert!(!readable(set.raw_fd(), 0));
        f.signal();
        f.signal();
        assert!(readable(set.raw_fd(), 0));
        assert_eq!(f.drain(), 2);
        assert!(!readable(set.raw_fd(), 0));
        set.remove(f.raw_fd());
        f.signal();
        assert!(!readable(set.raw_fd(), 10));
        e.signal();
        assert!(e.is_readable() && readable(set.raw_fd(), -1));
        assert_eq!(e.drain(), 1);
        assert_eq!(e.drain(), 0);
    }
}
