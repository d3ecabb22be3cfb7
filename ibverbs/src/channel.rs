//! Completion channels (`ibv_create_comp_channel`, `ibv_get_cq_event`,
//! `ibv_ack_cq_events`) over the driver's completion events.
//!
//! A channel is an eventfd (semaphore mode: one count per event) and a
//! queue of the CQs whose events are waiting. The device's service thread
//! ([`service_loop`]) sleeps on the MSI-X interrupt of the completion EQ
//! (the emulator's or VFIO's eventfd behind `Hca::wait_interrupt`), then
//! consumes the EQs (`Hca::service`) and moves each bound CQ's completion
//! events (`Cq::take_events`, counted per CQ by the driver's event router
//! when an armed CQ completes) into its channel, which makes the channel's
//! fd readable. `ibv_get_cq_event` reads one count (blocking, or `EAGAIN`
//! when the program made the fd non-blocking) and returns the CQ.

use core::ffi::{c_int, c_void};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use hca_driver::Hca;
use hca_driver::verbs::Cq;

use crate::P;

/// How long the service thread sleeps at most between two looks at the
/// device (health poll and page requests included).
pub const SERVICE_PERIOD: Duration = Duration::from_millis(20);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A CQ bound to a channel.
struct Bound {
    /// The CQ's C address (what `ibv_get_cq_event` returns).
    cq_c: usize,
    cq: Weak<Cq<P>>,
}

/// What a channel shares with the service thread.
pub struct ChanShared {
    efd: OwnedFd,
    bound: Mutex<Vec<Bound>>,
    pending: Mutex<VecDeque<usize>>,
}

impl ChanShared {
    /// A channel with a new eventfd.
    pub fn new() -> std::io::Result<Arc<Self>> {
        // SAFETY: eventfd with valid flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Arc::new(ChanShared {
            efd,
            bound: Mutex::new(Vec::new()),
            pending: Mutex::new(VecDeque::new()),
        }))
    }

    /// The fd programs poll.
    pub fn fd(&self) -> c_int {
        self.efd.as_raw_fd()
    }

    /// Binds a CQ (created on this channel).
    pub fn bind(&self, cq_c: usize, cq: &Arc<Cq<P>>) {
        lock(&self.bound).push(Bound {
            cq_c,
            cq: Arc::downgrade(cq),
        });
    }

    /// Unbinds a CQ (before it is destroyed) and drops its waiting events.
    pub fn unbind(&self, cq_c: usize) {
        lock(&self.bound).retain(|b| b.cq_c != cq_c);
        lock(&self.pending).retain(|&c| c != cq_c);
    }

    /// CQs bound.
    pub fn bound_count(&self) -> usize {
        lock(&self.bound).len()
    }

    /// Moves the completion events of the bound CQs into the queue;
    /// returns whether a CQ is bound, and the vector of the first bound
    /// CQ's completion EQ.
    fn collect(&self, hca: &Hca<P>) -> (bool, Option<u16>) {
        // The bound list stays locked while its CQs are upgraded, so that
        // once `unbind` returns no handle of the CQ is held here.
        let bound = lock(&self.bound);
        let mut vector = None;
        for b in bound.iter() {
            let Some(cq) = b.cq.upgrade() else {
                continue;
            };
            vector = vector.or_else(|| hca.eq_vector(cq.eqn()));
            match cq.take_events() {
                Ok(0) => {}
                Ok(n) => {
                    {
                        let mut p = lock(&self.pending);
                        for _ in 0..n {
                            p.push_back(b.cq_c);
                        }
                    }
                    let v = n;
                    // SAFETY: writing 8 bytes from a u64 to our eventfd.
                    let r = unsafe {
                        libc::write(
                            self.fd(),
                            core::ptr::addr_of!(v).cast::<c_void>(),
                            size_of::<u64>(),
                        )
                    };
                    if r != 8 {
                        log::error!(
                            "completion channel: eventfd write: {}",
                            std::io::Error::last_os_error()
                        );
                    }
                }
                Err(e) => log::warn!("completion channel: {e}"),
            }
        }
        (!bound.is_empty(), vector)
    }

    /// Waits for one event (`ibv_get_cq_event`): the CQ's C address, or
    /// the errno (`EAGAIN` on a non-blocking fd).
    pub fn get_event(&self) -> Result<usize, c_int> {
        loop {
            let mut v = 0u64;
            // SAFETY: reading 8 bytes into a u64 from our eventfd.
            let r = unsafe {
                libc::read(
                    self.fd(),
                    core::ptr::addr_of_mut!(v).cast::<c_void>(),
                    size_of::<u64>(),
                )
            };
            if r != 8 {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if e == libc::EINTR {
                    continue;
                }
                return Err(e);
            }
            // A count whose CQ was destroyed meanwhile has no entry: wait
            // for the next.
            if let Some(c) = lock(&self.pending).pop_front() {
                return Ok(c);
            }
        }
    }
}

/// The channels of a device, which its service thread feeds.
#[derive(Default)]
pub struct Channels {
    list: Mutex<Vec<Arc<ChanShared>>>,
}

impl Channels {
    /// Adds a channel.
    pub fn add(&self, c: &Arc<ChanShared>) {
        lock(&self.list).push(c.clone());
    }

    /// Removes a channel.
    pub fn remove(&self, c: &Arc<ChanShared>) {
        lock(&self.list).retain(|x| !Arc::ptr_eq(x, c));
    }
}

/// The service thread's loop: services the HCA (health, events, page
/// requests), feeds the channels, then sleeps on the completion EQ's
/// interrupt (or [`SERVICE_PERIOD`]).
pub fn service_loop(hca: &Hca<P>, chans: &Channels, stop: &AtomicBool) {
    let mut vector: Option<u16> = None;
    while !stop.load(Ordering::Acquire) {
        let seen = vector.and_then(|v| hca.interrupt_seen(v).map(|s| (v, s)));
        if let Err(e) = hca.service() {
            log::warn!("service: {e}");
        }
        let list: Vec<Arc<ChanShared>> = lock(&chans.list).clone();
        let mut any = false;
        for c in &list {
            let (bound, v) = c.collect(hca);
            any |= bound;
            vector = vector.or(v);
        }
        match seen {
            Some((v, s)) if any => {
                if let Err(e) = hca.wait_interrupt(v, s, SERVICE_PERIOD) {
                    log::warn!("service: {e}");
                    std::thread::sleep(SERVICE_PERIOD);
                }
            }
            _ => std::thread::sleep(if any {
                Duration::from_millis(1)
            } else {
                SERVICE_PERIOD
            }),
        }
    }
}
