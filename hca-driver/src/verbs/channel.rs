//! Completion channels (`ibv_comp_channel`): where the completion events
//! of the CQs bound to a channel are read, in arrival order, with the
//! user cookie of their CQ.
//!
//! A completion event is what the PRM calls a completion EQE (event type
//! `COMPLETION_EVENT`, 0x00) on a completion EQ: the device writes one
//! when a CQE arrives on a CQ armed with `req_notify` (the arm doorbell,
//! [`Cq::req_notify`](crate::verbs::Cq::req_notify)). The driver's EQ
//! code counts them per CQ; a channel collects the counts of its CQs and
//! hands them out one event at a time ([`CompChannel::get_event`]), as
//! `ibv_get_cq_event` does. Each event handed out is acknowledged with
//! [`Cq::ack_events`](crate::verbs::Cq::ack_events).
//!
//! On Linux with `std`, a channel has a file descriptor
//! ([`CompChannel::fd`]) to `poll(2)` or `epoll(7)` on, as a program does
//! with `ibv_comp_channel.fd`: an epoll set of
//!
//! - the eventfds of the MSI-X vectors of its CQs' completion EQs
//!   ([`Platform::interrupt_fd`]: under VFIO the eventfd the kernel
//!   signals, on the emulator one of its own), so the descriptor becomes
//!   readable when an interrupt announces a completion event, with no
//!   thread of the driver running; [`CompChannel::get_event`] then looks
//!   at the EQs;
//! - the channel's own eventfd, which the EQ code signals when it counts
//!   a completion event of one of the channel's CQs (whichever thread
//!   looked at the EQ: one waiting for a command, a `poll_wait`, another
//!   channel), and which stays readable while events wait in the
//!   channel.
//!
//! A readable descriptor is a hint: `get_event` with a zero timeout (what
//! `ibv_get_cq_event` does on a descriptor set to `O_NONBLOCK`) may find
//! nothing (an interrupt for another CQ of the same EQ) and then reports
//! `None` (libibverbs' `EAGAIN`); the vector's eventfd is emptied when
//! the driver counts its interrupts.
//!
//! Limits: the interrupt half needs the driver on interrupts
//! ([`WaitMode::Interrupts`](crate::WaitMode)) and a platform with
//! interrupt descriptors ([`CompChannel::interrupt_driven`]); without
//! them the descriptor becomes readable only once some thread has looked
//! at the EQs.

use core::fmt;
use core::time::Duration;

use platform::Platform;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::types::{Cqn, Eqn};
use crate::verbs::capacity::Bounded;
use crate::verbs::context::Context;
use crate::verbs::queue::service;
use crate::verbs::share::{DefaultShare, Handle, Share};

/// Most CQs one channel serves.
pub const MAX_CHANNEL_CQS: usize = 256;

/// A completion event read from a channel (`ibv_get_cq_event`'s CQ and
/// its context pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    /// The CQ the event is for.
    pub cqn: Cqn,
    /// The cookie the CQ was created with (`cq_context`).
    pub cookie: u64,
}

/// A CQ bound to a channel, with its event counts.
#[derive(Clone, Copy, Debug)]
struct Bound {
    cqn: Cqn,
    cookie: u64,
    eqn: Eqn,
    /// Events collected and not yet handed out.
    pending: u64,
    /// Order of the oldest pending event (lower is older).
    since: u64,
    /// Events handed out by `get_event`.
    delivered: u64,
    /// Events acknowledged (`ack_events`).
    acked: u64,
    /// Events whose arm sequence step the CQ has yet to take (at its next
    /// arm).
    arm_owed: u64,
}

struct State {
    cqs: Bounded<Bound, MAX_CHANNEL_CQS>,
    tick: u64,
    /// Events read from CQs destroyed since, not yet acknowledged (see
    /// [`CompChannel::ack_destroyed_events`]).
    destroyed_unacked: u64,
}

/// A completion channel (`ibv_comp_channel`): CQs created on it
/// ([`Cq::create_on_channel`](crate::verbs::Cq::create_on_channel)) report their completion
/// events here rather than through
/// [`Cq::wait_event`](crate::verbs::Cq::wait_event). The CQs hold handles
/// of the channel, so it outlives them:
/// [`try_destroy`](Self::try_destroy) refuses with
/// [`Error::InUse`] while a CQ is bound (libibverbs' `EBUSY`).
pub struct CompChannel<P: Platform + 'static, S: Share = DefaultShare> {
    ctx: S::Ref<Context<P, S>>,
    state: spin::Mutex<State>,
    #[cfg(all(feature = "std", target_os = "linux"))]
    fd: Option<fd::ChannelFd>,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for CompChannel<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompChannel({} CQs)", self.state.lock().cqs.len())
    }
}

impl<P: Platform + 'static, S: Share> CompChannel<P, S> {
    /// Creates a channel (`ibv_create_comp_channel`) in the context behind
    /// `ctx`.
    ///
    /// # Errors
    ///
    /// [`Error::Platform`] when the descriptor cannot be made (Linux,
    /// `std`: `epoll_create1` or `eventfd` failed).
    pub fn create(ctx: &impl Handle<Context<P, S>, Share = S>) -> Result<Self> {
        let ctx: S::Ref<Context<P, S>> = ctx.clone().into_ref();
        let cap = MAX_CHANNEL_CQS;
        Ok(Self {
            ctx,
            state: spin::Mutex::new(State {
                cqs: Bounded::new(cap),
                tick: 1,
                destroyed_unacked: 0,
            }),
            #[cfg(all(feature = "std", target_os = "linux"))]
            fd: Some(fd::ChannelFd::new().map_err(|source| Error::Platform {
                what: "making a completion channel's file descriptor",
                source,
            })?),
        })
    }

    /// The context's handle.
    pub fn context(&self) -> &S::Ref<Context<P, S>> {
        &self.ctx
    }

    /// CQs bound to the channel now.
    pub fn cqs(&self) -> usize {
        self.state.lock().cqs.len()
    }

    /// Destroys the channel (`ibv_destroy_comp_channel`). Refused with
    /// [`Error::InUse`] while CQs are bound (possible only when a CQ was
    /// leaked: they hold handles of the channel).
    pub fn destroy(self) -> Result<()> {
        let n = self.cqs();
        if n > 0 {
            return Err(Error::InUse {
                what: "the completion channel",
                users: n as u32,
            });
        }
        Ok(())
    }

    /// Destroys the channel behind its last handle; while CQs (or other
    /// holders) still hold it, drops this handle and returns
    /// [`Error::InUse`] (libibverbs' `EBUSY`).
    pub fn try_destroy(this: impl Handle<Self, Share = S>) -> Result<()> {
        crate::verbs::share::destroy_last::<S, Self>(
            this.into_ref(),
            "the completion channel",
            Self::destroy,
        )
    }

    /// Binds a CQ (at its creation).
    pub(crate) fn bind(&self, cqn: Cqn, eqn: Eqn, cookie: u64) -> Result<()> {
        {
            let mut st = self.state.lock();
            let capacity = st.cqs.capacity();
            st.cqs
                .push(Bound {
                    cqn,
                    cookie,
                    eqn,
                    pending: 0,
                    since: 0,
                    delivered: 0,
                    acked: 0,
                    arm_owed: 0,
                })
                .map_err(|_| Error::CapacityExceeded {
                    what: "the completion channel's CQs",
                    capacity,
                })?;
        }
        #[cfg(all(feature = "std", target_os = "linux"))]
        if let Some(f) = &self.fd {
            let hca = self.ctx.hca();
            let vector_fd = hca
                .eq_vector(eqn)
                .and_then(|v| hca.platform().interrupt_fd(v));
            if let Some(fd) = vector_fd {
                if let Err(source) = f.add_interrupt(fd) {
                    self.unbind(cqn);
                    return Err(Error::Platform {
                        what: "adding an MSI-X vector's eventfd to a completion channel",
                        source,
                    });
                }
            }
            hca.events().set_cq_notify(cqn, Some(f.pending.clone()));
        }
        Ok(())
    }

    /// Unbinds a CQ (at its destruction); its events not yet read are
    /// dropped, those read and not acknowledged move to the channel's
    /// account ([`destroyed_unacked_events`](Self::destroyed_unacked_events)).
    pub(crate) fn unbind(&self, cqn: Cqn) {
        #[cfg(all(feature = "std", target_os = "linux"))]
        self.ctx.hca().events().set_cq_notify(cqn, None);
        {
            let mut st = self.state.lock();
            if let Some(i) = st.cqs.iter().position(|b| b.cqn == cqn) {
                let b = st.cqs.swap_remove(i);
                st.destroyed_unacked += b.delivered - b.acked;
            }
        }
        self.update_fd();
    }

    /// Moves the completion events the EQ code counted for the channel's
    /// CQs into the channel.
    fn collect(&self) {
        let router = self.ctx.hca().events();
        let mut st = self.state.lock();
        let mut tick = st.tick;
        for b in st.cqs.as_mut_slice() {
            let n = router.take_completion_events(b.cqn).unwrap_or(0);
            if n > 0 {
                if b.pending == 0 {
                    b.since = tick;
                    tick += 1;
                }
                b.pending += n;
                b.arm_owed += n;
            }
        }
        st.tick = tick;
    }

    /// Hands out the oldest event collected, if any.
    fn pop(&self) -> Option<CqEvent> {
        let mut st = self.state.lock();
        let b = st
            .cqs
            .as_mut_slice()
            .iter_mut()
            .filter(|b| b.pending > 0)
            .min_by_key(|b| b.since)?;
        b.pending -= 1;
        b.delivered += 1;
        let ev = CqEvent {
            cqn: b.cqn,
            cookie: b.cookie,
        };
        if b.pending > 0 {
            // Its next event queues behind the others.
            let t = st.tick;
            st.tick += 1;
            if let Some(b) = st.cqs.as_mut_slice().iter_mut().find(|b| b.cqn == ev.cqn) {
                b.since = t;
            }
        }
        Some(ev)
    }

    #[cfg(all(feature = "std", target_os = "linux"))]
    fn has_pending(&self) -> bool {
        self.state.lock().cqs.iter().any(|b| b.pending > 0)
    }

    /// Makes the descriptor's own eventfd readable exactly while events
    /// wait in the channel.
    fn update_fd(&self) {
        #[cfg(all(feature = "std", target_os = "linux"))]
        if let Some(f) = &self.fd {
            // Empty it first: an event counted from now on signals it
            // again (the EQ code signals after counting), one counted
            // before is collected here.
            f.pending.drain();
            self.collect();
            if self.has_pending() {
                f.pending.signal();
            }
        }
    }

    /// The MSI-X vectors of the channel's CQs' EQs (the first, and whether
    /// there are several).
    fn vectors(&self) -> (Option<u16>, bool) {
        let hca = self.ctx.hca();
        let st = self.state.lock();
        let mut first = None;
        let mut several = false;
        for b in st.cqs.iter() {
            match (first, hca.eq_vector(b.eqn)) {
                (_, None) => return (None, false),
                (None, Some(v)) => first = Some(v),
                (Some(f), Some(v)) if f != v => several = true,
                _ => {}
            }
        }
        (first, several)
    }

    /// Reads the next completion event (`ibv_get_cq_event`), waiting for
    /// one at most `timeout` (platform time): `None` when none came. A
    /// zero timeout looks once without waiting (a non-blocking channel
    /// descriptor: libibverbs' `EAGAIN`). Looks at the EQs
    /// ([`Hca::service`](crate::Hca::service)) and, when the driver runs
    /// on interrupts, sleeps on the MSI-X vector of the CQs' completion
    /// EQ between two looks.
    ///
    /// Every event read is to be acknowledged with
    /// [`Cq::ack_events`](crate::verbs::Cq::ack_events) on its CQ; the CQ
    /// is armed again with [`Cq::req_notify`](crate::verbs::Cq::req_notify)
    /// for the next one.
    ///
    /// # Errors
    ///
    /// What servicing the HCA reports (a fatal health syndrome, a failed
    /// interrupt wait).
    pub fn get_event(&self, timeout: Duration) -> Result<Option<CqEvent>> {
        let hca = self.ctx.hca();
        let p = hca.platform();
        let deadline = Deadline::start(p, timeout);
        loop {
            let (vector, several) = self.vectors();
            let seen = vector.and_then(|v| hca.interrupt_seen(v).map(|s| (v, s)));
            service(hca)?;
            self.collect();
            if let Some(ev) = self.pop() {
                self.update_fd();
                return Ok(Some(ev));
            }
            let left = deadline.remaining(p);
            if left.is_zero() {
                self.update_fd();
                return Ok(None);
            }
            match seen {
                Some((v, count)) => {
                    // Several vectors: none may be slept on for long.
                    let cap = if several {
                        Duration::from_millis(1)
                    } else {
                        hca.config().timeouts.health_poll
                    };
                    hca.wait_interrupt(v, count, left.min(cap))?;
                }
                None => {
                    hca.note_poll();
                    p.relax();
                }
            }
        }
    }

    /// The file descriptor (`ibv_comp_channel.fd`), to `poll(2)` on: it
    /// becomes readable when a completion event of one of the channel's
    /// CQs arrives (see the module documentation for when that needs
    /// interrupts). It stays owned by the channel; setting `O_NONBLOCK`
    /// on it changes nothing for the channel (read events with
    /// [`get_event`](Self::get_event) and a zero timeout).
    #[cfg(all(feature = "std", target_os = "linux"))]
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(fd::ChannelFd::raw_fd)
    }

    /// Whether interrupts make the descriptor readable: the driver runs
    /// on interrupts and the platform gave an interrupt descriptor for the
    /// vector of every bound CQ's EQ (true with no CQ bound when the
    /// driver runs on interrupts).
    pub fn interrupt_driven(&self) -> bool {
        let hca = self.ctx.hca();
        if hca.interrupt_stats().vectors == 0 {
            return false;
        }
        let st = self.state.lock();
        st.cqs.iter().all(|b| {
            hca.eq_vector(b.eqn)
                .and_then(|v| hca.platform().interrupt_fd(v))
                .is_some()
        })
    }

    /// Acknowledges `n` events of CQ `cqn` (its [`Cq::ack_events`](crate::verbs::Cq::ack_events)).
    pub(crate) fn ack(&self, cqn: Cqn, n: u64) -> Result<()> {
        let mut st = self.state.lock();
        let b = st
            .cqs
            .as_mut_slice()
            .iter_mut()
            .find(|b| b.cqn == cqn)
            .ok_or(Error::InvalidArgument {
                arg: "cq",
                reason: "the CQ is not bound to this channel",
            })?;
        let unacked = b.delivered - b.acked;
        if n > unacked {
            return Err(Error::InvalidAttribute {
                attr: "nevents",
                value: n,
                reason: "more events acknowledged than were read from the channel",
            });
        }
        b.acked += n;
        Ok(())
    }

    /// Completion events read from CQs of this channel that were destroyed
    /// before the events were acknowledged ([`Cq::destroy`](crate::verbs::Cq::destroy)
    /// destroys such a CQ and leaves its count here), not acknowledged yet.
    pub fn destroyed_unacked_events(&self) -> u64 {
        self.state.lock().destroyed_unacked
    }

    /// Acknowledges `n` completion events read from CQs destroyed since
    /// (`ibv_ack_cq_events` for a CQ whose handle is gone): the program's
    /// code that acknowledges each event it read keeps working when the
    /// CQ was destroyed first.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAttribute`] when `n` is more than
    /// [`destroyed_unacked_events`](Self::destroyed_unacked_events).
    pub fn ack_destroyed_events(&self, n: u32) -> Result<()> {
        let mut st = self.state.lock();
        let n = u64::from(n);
        if n > st.destroyed_unacked {
            return Err(Error::InvalidAttribute {
                attr: "nevents",
                value: n,
                reason: "more events acknowledged than were read from the destroyed CQs",
            });
        }
        st.destroyed_unacked -= n;
        Ok(())
    }

    /// Events of CQ `cqn` read and not acknowledged.
    pub(crate) fn unacked(&self, cqn: Cqn) -> u64 {
        self.state
            .lock()
            .cqs
            .iter()
            .find(|b| b.cqn == cqn)
            .map_or(0, |b| b.delivered - b.acked)
    }

    /// Collects the CQ's events from the EQ code, then takes the arm
    /// sequence steps it owes for the events collected (before it arms).
    pub(crate) fn take_arm_owed(&self, cqn: Cqn) -> u64 {
        self.collect();
        let owed = {
            let mut st = self.state.lock();
            st.cqs
                .as_mut_slice()
                .iter_mut()
                .find(|b| b.cqn == cqn)
                .map_or(0, |b| core::mem::take(&mut b.arm_owed))
        };
        self.update_fd();
        owed
    }
}

#[cfg(all(feature = "std", target_os = "linux"))]
mod fd {
    use platform::notify::{Epoll, EventFd};
    use std::os::fd::RawFd;
    use std::sync::Arc;

    /// An epoll set of the channel's own eventfd ("events are waiting")
    /// and the eventfds of its CQs' interrupt vectors.
    #[derive(Debug)]
    pub(super) struct ChannelFd {
        set: Epoll,
        pub(super) pending: Arc<EventFd>,
    }

    impl ChannelFd {
        pub(super) fn new() -> Result<Self, platform::Error> {
            let set = Epoll::new()?;
            let pending = Arc::new(EventFd::new()?);
            set.add(pending.raw_fd())?;
            Ok(Self { set, pending })
        }

        pub(super) fn raw_fd(&self) -> RawFd {
            self.set.raw_fd()
        }

        pub(super) fn add_interrupt(&self, fd: RawFd) -> Result<(), platform::Error> {
            self.set.add(fd)
        }
    }
}
