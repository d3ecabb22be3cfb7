//! Asynchronous events (`ibv_get_async_event`, `ibv_ack_async_event`,
//! the context's `async_fd`).
//!
//! The device's service thread takes the driver's asynchronous events
//! (`EventRouter::pop`: port changes, CQ errors, QP and SRQ events, the
//! firmware's internal error) and gives each to the contexts it concerns:
//! an event of a QP, CQ or SRQ to the context that created it, a port or
//! device event to every context of the device. A context's queue has an
//! eventfd (semaphore mode), which is its `async_fd`: readable while events
//! wait; `ibv_get_async_event` reads one (blocking, or `EAGAIN` when the
//! program made the fd non-blocking).

use core::ffi::c_int;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use firmware_cmds::eq as feq;
use hca_driver::{AsyncEvent, PortState, QueueId};

/// `enum ibv_event_type` values.
pub mod ty {
    #![allow(missing_docs)]
    use core::ffi::c_int;
    pub const CQ_ERR: c_int = 0;
    pub const QP_FATAL: c_int = 1;
    pub const QP_REQ_ERR: c_int = 2;
    pub const QP_ACCESS_ERR: c_int = 3;
    pub const COMM_EST: c_int = 4;
    pub const SQ_DRAINED: c_int = 5;
    pub const PATH_MIG: c_int = 6;
    pub const PATH_MIG_ERR: c_int = 7;
    pub const DEVICE_FATAL: c_int = 8;
    pub const PORT_ACTIVE: c_int = 9;
    pub const PORT_ERR: c_int = 10;
    pub const LID_CHANGE: c_int = 11;
    pub const PKEY_CHANGE: c_int = 12;
    pub const SRQ_ERR: c_int = 14;
    pub const SRQ_LIMIT_REACHED: c_int = 15;
    pub const QP_LAST_WQE_REACHED: c_int = 16;
    pub const CLIENT_REREGISTER: c_int = 17;
    pub const GID_CHANGE: c_int = 18;
}

/// What an event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// A QP by number.
    Qp(u32),
    /// A CQ by number.
    Cq(u32),
    /// An SRQ by number.
    Srq(u32),
    /// A port.
    Port(u8),
    /// The device.
    Device,
}

/// An event in libibverbs terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// `enum ibv_event_type`.
    pub event_type: c_int,
    /// What it is about.
    pub element: Element,
}

/// The libibverbs form of a driver event (`None` for events libibverbs
/// has no type for).
pub fn translate(e: &AsyncEvent) -> Option<Event> {
    let (event_type, element) = match *e {
        AsyncEvent::PortChange {
            port,
            sub_type,
            state,
        } => {
            let t = match sub_type {
                feq::PORT_CHANGE_SUBTYPE_ACTIVE => ty::PORT_ACTIVE,
                feq::PORT_CHANGE_SUBTYPE_DOWN => ty::PORT_ERR,
                feq::PORT_CHANGE_SUBTYPE_LID => ty::LID_CHANGE,
                feq::PORT_CHANGE_SUBTYPE_PKEY => ty::PKEY_CHANGE,
                feq::PORT_CHANGE_SUBTYPE_GUID => ty::GID_CHANGE,
                feq::PORT_CHANGE_SUBTYPE_CLIENT_REREG => ty::CLIENT_REREGISTER,
                _ if state == PortState::Active => ty::PORT_ACTIVE,
                _ => ty::PORT_ERR,
            };
            (t, Element::Port(port))
        }
        AsyncEvent::CqError { cqn, .. } => (ty::CQ_ERR, Element::Cq(cqn.0)),
        AsyncEvent::Queue { event_type, queue } => {
            let t = match event_type {
                feq::EVENT_TYPE_PATH_MIG => ty::PATH_MIG,
                feq::EVENT_TYPE_COMM_EST => ty::COMM_EST,
                feq::EVENT_TYPE_SQ_DRAINED => ty::SQ_DRAINED,
                feq::EVENT_TYPE_WQ_CATAS_ERROR => ty::QP_FATAL,
                feq::EVENT_TYPE_PATH_MIG_FAILED => ty::PATH_MIG_ERR,
                feq::EVENT_TYPE_WQ_INVAL_REQ_ERROR => ty::QP_REQ_ERR,
                feq::EVENT_TYPE_WQ_ACCESS_ERROR => ty::QP_ACCESS_ERR,
                feq::EVENT_TYPE_SRQ_CATAS_ERROR => ty::SRQ_ERR,
                feq::EVENT_TYPE_SRQ_LAST_WQE => ty::QP_LAST_WQE_REACHED,
                feq::EVENT_TYPE_SRQ_RQ_LIMIT => ty::SRQ_LIMIT_REACHED,
                _ => return None,
            };
            let el = match queue {
                QueueId::Qp(q) => Element::Qp(q.0),
                QueueId::Srq(s) => Element::Srq(s.0),
                _ => return None,
            };
            (t, el)
        }
        AsyncEvent::InternalError => (ty::DEVICE_FATAL, Element::Device),
        _ => return None,
    };
    Some(Event {
        event_type,
        element,
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A context's events and the numbers of its objects.
pub struct ContextEvents {
    efd: OwnedFd,
    queue: Mutex<VecDeque<Event>>,
    /// (element, C object address) of the context's QPs, CQs and SRQs.
    objects: Mutex<Vec<(Element, usize)>>,
}

impl ContextEvents {
    /// A queue with a new eventfd.
    pub fn new() -> std::io::Result<Arc<Self>> {
        // SAFETY: eventfd with valid flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(ContextEvents {
            // SAFETY: a new descriptor that nothing else owns.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            queue: Mutex::new(VecDeque::new()),
            objects: Mutex::new(Vec::new()),
        }))
    }

    /// The `async_fd`.
    pub fn fd(&self) -> c_int {
        self.efd.as_raw_fd()
    }

    /// Records an object of the context.
    pub fn add_object(&self, el: Element, c: usize) {
        lock(&self.objects).push((el, c));
    }

    /// Forgets an object (destroyed).
    pub fn remove_object(&self, c: usize) {
        lock(&self.objects).retain(|&(_, x)| x != c);
    }

    /// The C object an element names, if the context has it.
    pub fn object(&self, el: Element) -> Option<usize> {
        lock(&self.objects)
            .iter()
            .find(|&&(e, _)| e == el)
            .map(|&(_, c)| c)
    }

    fn concerns(&self, el: Element) -> bool {
        match el {
            Element::Port(_) | Element::Device => true,
            other => self.object(other).is_some(),
        }
    }

    /// Queues an event if it concerns this context.
    pub fn offer(&self, ev: Event) {
        if !self.concerns(ev.element) {
            return;
        }
        lock(&self.queue).push_back(ev);
        let one = 1u64;
        // SAFETY: writing 8 bytes from a u64 to our eventfd.
        let r =
            unsafe { libc::write(self.fd(), core::ptr::addr_of!(one).cast(), size_of::<u64>()) };
        if r != 8 {
            log::error!(
                "async events: eventfd write: {}",
                std::io::Error::last_os_error()
            );
        }
    }

    /// Waits for the next event (blocking unless the fd was made
    /// non-blocking: then `EAGAIN`).
    pub fn next(&self) -> Result<Event, c_int> {
        loop {
            let mut v = 0u64;
            // SAFETY: reading 8 bytes into a u64 from our eventfd.
            let r = unsafe {
                libc::read(
                    self.fd(),
                    core::ptr::addr_of_mut!(v).cast(),
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
            if let Some(ev) = lock(&self.queue).pop_front() {
                return Ok(ev);
            }
        }
    }
}

/// The contexts of a device, which its service thread gives events to.
#[derive(Default)]
pub struct Subscribers {
    list: Mutex<Vec<Arc<ContextEvents>>>,
}

impl Subscribers {
    /// Adds a context.
    pub fn add(&self, c: &Arc<ContextEvents>) {
        lock(&self.list).push(c.clone());
    }

    /// Removes a context.
    pub fn remove(&self, c: &Arc<ContextEvents>) {
        lock(&self.list).retain(|x| !Arc::ptr_eq(x, c));
    }

    /// Gives every event the driver has queued to the contexts.
    pub fn dispatch(&self, hca: &hca_driver::Hca<crate::P>) {
        while let Some(e) = hca.events().pop() {
            log::debug!("async event: {e:?}");
            if let Some(ev) = translate(&e) {
                for c in lock(&self.list).iter() {
                    c.offer(ev);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hca_driver::{Cqn, Qpn, Srqn};

    #[test]
    fn driver_events_translate_to_libibverbs_types() {
        let port = AsyncEvent::PortChange {
            port: 1,
            sub_type: feq::PORT_CHANGE_SUBTYPE_DOWN,
            state: PortState::Down,
        };
        assert_eq!(
            translate(&port),
            Some(Event {
                event_type: ty::PORT_ERR,
                element: Element::Port(1)
            })
        );
        let lim = AsyncEvent::Queue {
            event_type: feq::EVENT_TYPE_SRQ_RQ_LIMIT,
            queue: QueueId::Srq(Srqn(7)),
        };
        assert_eq!(
            translate(&lim).map(|e| (e.event_type, e.element)),
            Some((ty::SRQ_LIMIT_REACHED, Element::Srq(7)))
        );
        let est = AsyncEvent::Queue {
            event_type: feq::EVENT_TYPE_COMM_EST,
            queue: QueueId::Qp(Qpn(9)),
        };
        assert_eq!(translate(&est).map(|e| e.event_type), Some(ty::COMM_EST));
        let cq = AsyncEvent::CqError {
            cqn: Cqn(3),
            syndrome: 1,
        };
        assert_eq!(translate(&cq).map(|e| e.element), Some(Element::Cq(3)));
        assert_eq!(
            translate(&AsyncEvent::MissedCommandCompletion { slot: 0 }),
            None
        );
    }

    #[test]
    fn events_go_to_the_context_of_their_object() {
        let a = ContextEvents::new().unwrap();
        let b = ContextEvents::new().unwrap();
        a.add_object(Element::Qp(5), 0x1000);
        let ev = Event {
            event_type: ty::COMM_EST,
            element: Element::Qp(5),
        };
        a.offer(ev);
        b.offer(ev);
        let port = Event {
            event_type: ty::PORT_ACTIVE,
            element: Element::Port(1),
        };
        a.offer(port);
        b.offer(port);
        assert_eq!(a.next(), Ok(ev));
        assert_eq!(a.next(), Ok(port));
        assert_eq!(b.next(), Ok(port));
        // Nothing left: a non-blocking fd says EAGAIN.
        // SAFETY: fcntl on our own eventfd.
        unsafe { libc::fcntl(b.fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(b.next(), Err(libc::EAGAIN));
    }
}
