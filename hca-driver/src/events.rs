//! Asynchronous events: who owns which CQ and queue number, completion
//! event counts per CQ, and the queue of events for their owners.
//!
//! The EQ code checks every number an event carries against what is
//! registered here; the verbs layer registers its CQs, QPs, RQs, SQs and
//! SRQs (the creation helpers of [`Hca`](crate::Hca) do it for them) and
//! drains [`AsyncEvent`]s with [`EventRouter::pop`].

use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use firmware_cmds::eq;
use heapless::Deque;
use heapless::index_map::FnvIndexMap;

use crate::error::{EqeError, Error, Result};
use crate::info::PortState;
use crate::types::{Cqn, Qpn, Srqn};

/// Most CQs the router tracks.
pub const MAX_CQS: usize = 256;
/// Most QP/RQ/SQ/SRQ numbers the router tracks: at least a verbs
/// context's QPs ([`MAX_CONTEXT_QPS`](crate::verbs::MAX_CONTEXT_QPS)).
pub const MAX_QUEUES: usize = 512;
/// Most undelivered asynchronous events; older events are kept, newer ones
/// counted in [`EventRouter::dropped`].
pub const EVENT_QUEUE_LEN: usize = 64;
/// Most ports.
pub const MAX_PORTS: usize = 4;

/// Which kind of queue an event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueId {
    /// A QP (`qp_events.type` 0).
    Qp(Qpn),
    /// An RQ (`qp_events.type` 1).
    Rq(u32),
    /// An SQ (`qp_events.type` 2).
    Sq(u32),
    /// A DCT (`qp_events.type` 6).
    Dct(u32),
    /// An SRQ (SRQ events).
    Srq(Srqn),
}

impl QueueId {
    fn key(self) -> u64 {
        let (t, n) = match self {
            QueueId::Qp(q) => (0u64, q.0),
            QueueId::Rq(n) => (1, n),
            QueueId::Sq(n) => (2, n),
            QueueId::Dct(n) => (6, n),
            QueueId::Srq(s) => (0xff, s.0),
        };
        (t << 32) | u64::from(n)
    }
}

/// An event for an owner to handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A port changed state (`MLX5_EVENT_TYPE_PORT_CHANGE`).
    PortChange {
        /// The port (1-based).
        port: u8,
        /// `PORT_CHANGE_SUBTYPE_*`.
        sub_type: u8,
        /// The state the port is now in.
        state: PortState,
    },
    /// A CQ is in error (`MLX5_EVENT_TYPE_CQ_ERROR`).
    CqError {
        /// The CQ.
        cqn: Cqn,
        /// `CQ_ERROR_SYNDROME_*` (1 overrun, 2 access violation).
        syndrome: u8,
    },
    /// A QP, RQ, SQ or SRQ event: path migration, communication
    /// established, SQ drained, WQ catastrophic / invalid request / access
    /// error, SRQ catastrophic error, last WQE reached, SRQ limit.
    Queue {
        /// `EVENT_TYPE_*` of [`firmware_cmds::eq`].
        event_type: u8,
        /// The queue.
        queue: QueueId,
    },
    /// The firmware reports an internal error (check the health buffer).
    InternalError,
    /// An event queue entry was invalid and was skipped.
    InvalidEqe {
        /// The EQ.
        eqn: u8,
        /// What was wrong.
        error: EqeError,
    },
    /// A command's entry came back without its completion event (event
    /// mode); the driver accepted the answer.
    MissedCommandCompletion {
        /// The command queue slot.
        slot: u8,
    },
}

impl AsyncEvent {
    /// The PRM name of the event type, where there is one.
    pub fn type_name(&self) -> Option<&'static str> {
        match self {
            AsyncEvent::PortChange { .. } => eq::event_type_name(eq::EVENT_TYPE_PORT_CHANGE),
            AsyncEvent::CqError { .. } => eq::event_type_name(eq::EVENT_TYPE_CQ_ERROR),
            AsyncEvent::Queue { event_type, .. } => eq::event_type_name(*event_type),
            AsyncEvent::InternalError => eq::event_type_name(eq::EVENT_TYPE_INTERNAL_ERROR),
            _ => None,
        }
    }
}

/// Completion and error counts of one CQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqEventCounts {
    /// Completion events (EQE type 0) not yet taken.
    pub completions: u64,
    /// CQ error events.
    pub errors: u64,
}

/// The registry and the event queue.
pub struct EventRouter {
    cqs: spin::Mutex<FnvIndexMap<u32, CqEventCounts, MAX_CQS>>,
    /// Registered queues with the event types seen and not yet taken
    /// (bit `n` = event type `n`).
    queues: spin::Mutex<FnvIndexMap<u64, u64, MAX_QUEUES>>,
    pending: spin::Mutex<Deque<AsyncEvent, EVENT_QUEUE_LEN>>,
    dropped: AtomicU64,
    ports: [AtomicU8; MAX_PORTS],
    num_ports: AtomicU8,
    #[cfg(all(feature = "std", target_os = "linux"))]
    notify: spin::Mutex<Notify>,
}

/// Who to wake (std, Linux): an eventfd readable while asynchronous
/// events are queued, and the eventfds of completion channels, signalled
/// when a completion event of one of their CQs is counted, whichever
/// thread looked at the EQ.
#[cfg(all(feature = "std", target_os = "linux"))]
#[derive(Default)]
struct Notify {
    queued: Option<std::sync::Arc<platform::notify::EventFd>>,
    cqs: std::vec::Vec<(u32, std::sync::Arc<platform::notify::EventFd>)>,
}

impl core::fmt::Debug for EventRouter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EventRouter")
            .field("cqs", &self.cqs.lock().len())
            .field("queues", &self.queues.lock().len())
            .field("pending", &self.pending.lock().len())
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for EventRouter {
    fn default() -> Self {
        Self::new()
    }
}

impl EventRouter {
    /// An empty router.
    pub fn new() -> Self {
        Self {
            cqs: spin::Mutex::new(FnvIndexMap::new()),
            queues: spin::Mutex::new(FnvIndexMap::new()),
            pending: spin::Mutex::new(Deque::new()),
            dropped: AtomicU64::new(0),
            ports: [const { AtomicU8::new(0) }; MAX_PORTS],
            num_ports: AtomicU8::new(0),
            #[cfg(all(feature = "std", target_os = "linux"))]
            notify: spin::Mutex::new(Notify::default()),
        }
    }

    /// Registers a CQ so that its events are accepted and counted.
    pub fn register_cq(&self, cqn: Cqn) -> Result<()> {
        let mut m = self.cqs.lock();
        if m.contains_key(&cqn.0) {
            return Err(Error::InvalidArgument {
                arg: "cqn",
                reason: "already registered",
            });
        }
        m.insert(cqn.0, CqEventCounts::default())
            .map_err(|_| Error::CapacityExceeded {
                what: "the CQ event registry",
                capacity: MAX_CQS,
            })?;
        Ok(())
    }

    /// Forgets a CQ; its later events are invalid.
    pub fn unregister_cq(&self, cqn: Cqn) -> bool {
        self.cqs.lock().remove(&cqn.0).is_some()
    }

    /// The counts of a registered CQ.
    pub fn cq_counts(&self, cqn: Cqn) -> Option<CqEventCounts> {
        self.cqs.lock().get(&cqn.0).copied()
    }

    /// Takes the completion events counted for a CQ since the last call
    /// (what a completion channel delivers): `None` for an unknown CQ.
    pub fn take_completion_events(&self, cqn: Cqn) -> Option<u64> {
        self.cqs
            .lock()
            .get_mut(&cqn.0)
            .map(|c| core::mem::take(&mut c.completions))
    }

    /// Registers a QP, RQ, SQ, DCT or SRQ number.
    pub fn register_queue(&self, q: QueueId) -> Result<()> {
        let mut m = self.queues.lock();
        if m.contains_key(&q.key()) {
            return Err(Error::InvalidArgument {
                arg: "queue",
                reason: "already registered",
            });
        }
        m.insert(q.key(), 0).map_err(|_| Error::CapacityExceeded {
            what: "the queue event registry",
            capacity: MAX_QUEUES,
        })?;
        Ok(())
    }

    /// Forgets a queue number.
    pub fn unregister_queue(&self, q: QueueId) -> bool {
        self.queues.lock().remove(&q.key()).is_some()
    }

    /// Whether a queue number is registered.
    pub fn has_queue(&self, q: QueueId) -> bool {
        self.queues.lock().contains_key(&q.key())
    }

    /// Takes the event types seen for a registered queue since the last
    /// call, as a bit set (bit `n` = `EVENT_TYPE_*` `n` of
    /// [`firmware_cmds::eq`]); `None` for an unknown queue. The events also
    /// stay in the queue of [`pop`](Self::pop).
    pub fn take_queue_events(&self, q: QueueId) -> Option<u64> {
        self.queues.lock().get_mut(&q.key()).map(core::mem::take)
    }

    /// The oldest undelivered event.
    pub fn pop(&self) -> Option<AsyncEvent> {
        let mut q = self.pending.lock();
        let e = q.pop_front();
        #[cfg(all(feature = "std", target_os = "linux"))]
        if q.is_empty() {
            if let Some(fd) = &self.notify.lock().queued {
                fd.drain();
            }
        }
        e
    }

    /// An eventfd readable while events are queued for
    /// [`pop`](Self::pop) (made at the first call; std, Linux).
    ///
    /// # Errors
    ///
    /// [`platform::Error::Notify`] when `eventfd(2)` fails.
    #[cfg(all(feature = "std", target_os = "linux"))]
    pub fn queued_fd(
        &self,
    ) -> core::result::Result<std::sync::Arc<platform::notify::EventFd>, platform::Error> {
        let q = self.pending.lock();
        let mut n = self.notify.lock();
        if let Some(fd) = &n.queued {
            return Ok(fd.clone());
        }
        let fd = std::sync::Arc::new(platform::notify::EventFd::new()?);
        if !q.is_empty() {
            fd.signal();
        }
        n.queued = Some(fd.clone());
        Ok(fd)
    }

    /// Signals `fd` at every completion event counted for `cqn` from now
    /// on (`None`: no more).
    #[cfg(all(feature = "std", target_os = "linux"))]
    pub(crate) fn set_cq_notify(
        &self,
        cqn: Cqn,
        fd: Option<std::sync::Arc<platform::notify::EventFd>>,
    ) {
        let mut n = self.notify.lock();
        n.cqs.retain(|(c, _)| *c != cqn.0);
        if let Some(fd) = fd {
            n.cqs.push((cqn.0, fd));
        }
    }

    /// Events lost because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The state of a port as the last event (or query) left it.
    pub fn port_state(&self, port: u8) -> Option<PortState> {
        let n = self.num_ports.load(Ordering::Relaxed);
        if port == 0 || port > n {
            return None;
        }
        Some(PortState::from_raw(
            self.ports[usize::from(port - 1)].load(Ordering::Relaxed),
        ))
    }

    pub(crate) fn set_num_ports(&self, n: u8) {
        self.num_ports
            .store(n.min(MAX_PORTS as u8), Ordering::Relaxed);
    }

    pub(crate) fn set_port_state(&self, port: u8, s: PortState) {
        if port >= 1 && usize::from(port) <= MAX_PORTS {
            self.ports[usize::from(port - 1)].store(s as u8, Ordering::Relaxed);
        }
    }

    pub(crate) fn push(&self, e: AsyncEvent) {
        let mut q = self.pending.lock();
        if q.push_back(e).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        #[cfg(all(feature = "std", target_os = "linux"))]
        if let Some(fd) = &self.notify.lock().queued {
            fd.signal();
        }
        drop(q);
    }

    /// A completion event for `cqn`.
    pub(crate) fn completion(&self, cqn: u32) -> Result<(), EqeError> {
        match self.cqs.lock().get_mut(&cqn) {
            Some(c) => {
                c.completions += 1;
                #[cfg(all(feature = "std", target_os = "linux"))]
                for (_, fd) in self.notify.lock().cqs.iter().filter(|(c, _)| *c == cqn) {
                    fd.signal();
                }
                Ok(())
            }
            None => Err(EqeError::UnknownCq { cqn }),
        }
    }

    /// A CQ error event for `cqn`.
    pub(crate) fn cq_error(&self, cqn: u32, syndrome: u8) -> Result<(), EqeError> {
        match self.cqs.lock().get_mut(&cqn) {
            Some(c) => c.errors += 1,
            None => return Err(EqeError::UnknownCq { cqn }),
        }
        self.push(AsyncEvent::CqError {
            cqn: Cqn(cqn),
            syndrome,
        });
        Ok(())
    }

    /// A queue event.
    pub(crate) fn queue_event(&self, event_type: u8, q: QueueId) -> Result<(), EqeError> {
        match self.queues.lock().get_mut(&q.key()) {
            Some(bits) => *bits |= 1u64.checked_shl(u32::from(event_type)).unwrap_or(0),
            None => {
                let (t, n) = ((q.key() >> 32) as u8, q.key() as u32);
                return Err(EqeError::UnknownQueue {
                    resource_type: t,
                    number: n,
                });
            }
        }
        self.push(AsyncEvent::Queue {
            event_type,
            queue: q,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_registry_counts_and_refuses_unknown() {
        let r = EventRouter::new();
        r.register_cq(Cqn(0x40)).unwrap();
        assert!(r.register_cq(Cqn(0x40)).is_err());
        r.completion(0x40).unwrap();
        r.completion(0x40).unwrap();
        assert_eq!(r.completion(0x41), Err(EqeError::UnknownCq { cqn: 0x41 }));
        assert_eq!(r.take_completion_events(Cqn(0x40)), Some(2));
        assert_eq!(r.take_completion_events(Cqn(0x40)), Some(0));
        r.cq_error(0x40, 1).unwrap();
        assert_eq!(
            r.pop(),
            Some(AsyncEvent::CqError {
                cqn: Cqn(0x40),
                syndrome: 1
            })
        );
        assert!(r.unregister_cq(Cqn(0x40)));
        assert!(r.cq_error(0x40, 1).is_err());
    }

    #[test]
    fn queues_are_told_apart_by_type() {
        let r = EventRouter::new();
        r.register_queue(QueueId::Qp(Qpn(7))).unwrap();
        assert!(
            r.queue_event(eq::EVENT_TYPE_COMM_EST, QueueId::Qp(Qpn(7)))
                .is_ok()
        );
        assert_eq!(
            r.queue_event(eq::EVENT_TYPE_SRQ_RQ_LIMIT, QueueId::Srq(Srqn(7))),
            Err(EqeError::UnknownQueue {
                resource_type: 0xff,
                number: 7
            })
        );
        assert_eq!(
            r.pop().unwrap().type_name(),
            Some("MLX5_EVENT_TYPE_COMM_EST")
        );
        assert_eq!(
            r.take_queue_events(QueueId::Qp(Qpn(7))),
            Some(1 << eq::EVENT_TYPE_COMM_EST)
        );
        assert_eq!(r.take_queue_events(QueueId::Qp(Qpn(7))), Some(0));
        assert_eq!(r.take_queue_events(QueueId::Srq(Srqn(7))), None);
    }

    #[test]
    fn full_queue_counts_drops() {
        let r = EventRouter::new();
        for _ in 0..EVENT_QUEUE_LEN + 3 {
            r.push(AsyncEvent::InternalError);
        }
        assert_eq!(r.dropped(), 3);
        let mut n = 0;
        while r.pop().is_some() {
            n += 1;
        }
        assert_eq!(n, EVENT_QUEUE_LEN);
    }

    #[test]
    fn port_states() {
        let r = EventRouter::new();
        r.set_num_ports(1);
        r.set_port_state(1, PortState::Active);
        assert_eq!(r.port_state(1), Some(PortState::Active));
        assert_eq!(r.port_state(2), None);
        assert_eq!(r.port_state(0), None);
    }
}
