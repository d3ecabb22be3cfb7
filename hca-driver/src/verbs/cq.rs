//! Completion queues: CREATE_CQ over verbs-core's CQ, polling into work
//! completions, arming, completion events through the EQ.

use core::fmt;
use core::time::Duration;

use core::sync::atomic::{AtomicU32, Ordering};

use firmware_cmds::cq::{
    CQE_SZ_64, Cqc, CreateCqIn, MODIFY_CQ_OP_MOD_RESIZE, ModifyCqIn, ModifyCqOut,
};
use platform::Platform;
use verbs_core::{
    Completion, CompletionSlot, CqClean, CqConfig, CqLayout, CqResolver, CqeVersion, QpCompletions,
    SrqCompletions,
};

use crate::deadline::Deadline;
use crate::error::{Error, Result, Wait};
use crate::fw::CqObj;
use crate::hca::DmaUse;
use crate::pas::{PAS_PAGE_SIZE, PageList};
use crate::types::{Cqn, Eqn};
#[cfg(not(feature = "alloc"))]
use crate::verbs::capacity::Bounded;
use crate::verbs::capacity::MAX_CONTEXT_QPS;
use crate::verbs::channel::CompChannel;
use crate::verbs::context::{Context, FwObj};
use crate::verbs::queue::{
    create_at, destroy_and_free, release_after_destroy, release_after_failure, service,
};
use crate::verbs::share::{DefaultShare, Handle, Share};

/// No QP under this user index (in [`Resolver::slot`]).
#[cfg(not(feature = "alloc"))]
const NO_SLOT: u16 = u16::MAX;
#[cfg(not(feature = "alloc"))]
const _: () = assert!(MAX_CONTEXT_QPS < NO_SLOT as usize);

/// The completion handles of the QPs a CQ serves, found by user index in
/// O(1): user indices are allocated densely by the context (below its
/// [`Capacities::qps`](crate::verbs::Capacities::qps)), and `slot[uidx]`
/// is the position of the QP's handle in `entries`.
///
/// The CQE-version-0 path ([`CqResolver::by_qpn`], CQEs naming the QP by
/// number) and the SRQ path ([`CqResolver::srq_by_srqn`], receive CQEs of a
/// QP whose handle is gone) scan `entries`: O(QPs on the CQ).
#[cfg(not(feature = "alloc"))]
#[derive(Debug)]
pub(crate) struct Resolver {
    slot: [u16; MAX_CONTEXT_QPS],
    /// (user index, handle).
    entries: Bounded<(u32, QpCompletions), MAX_CONTEXT_QPS>,
}

#[cfg(not(feature = "alloc"))]
impl Resolver {
    /// A resolver for user indices below `cap`.
    fn new(cap: usize) -> Self {
        let cap = cap.min(MAX_CONTEXT_QPS);
        Self {
            slot: [NO_SLOT; MAX_CONTEXT_QPS],
            entries: Bounded::new(cap),
        }
    }

    #[inline(always)]
    fn position(&self, uidx: u32) -> Option<usize> {
        match self.slot.get(uidx as usize) {
            Some(&p) if p != NO_SLOT => Some(usize::from(p)),
            _ => None,
        }
    }

    /// The handle under `uidx` (the data path's lookup): `slot[uidx]`,
    /// then `entries[slot]`. [`NO_SLOT`] needs no test of its own: it is
    /// past the end of `entries`, whose capacity is at most
    /// [`MAX_CONTEXT_QPS`], below it.
    #[inline(always)]
    fn lookup(&self, uidx: u32) -> Option<&QpCompletions> {
        let p = *self.slot.get(uidx as usize)?;
        self.entries.as_slice().get(usize::from(p)).map(|(_, h)| h)
    }

    /// Registers `h` under `uidx`.
    fn insert(&mut self, uidx: u32, h: QpCompletions) -> Result<()> {
        let capacity = self.entries.capacity();
        if uidx as usize >= capacity {
            return Err(Error::CapacityExceeded {
                what: "the CQ's table of QPs (user index)",
                capacity,
            });
        }
        if self.position(uidx).is_some() {
            return Err(Error::InvalidArgument {
                arg: "user_index",
                reason: "already registered with this CQ",
            });
        }
        let pos = self.entries.len();
        self.entries
            .push((uidx, h))
            .map_err(|_| Error::CapacityExceeded {
                what: "the CQ's table of QPs",
                capacity,
            })?;
        // `pos < capacity <= MAX_CONTEXT_QPS <= u16::MAX`.
        self.slot[uidx as usize] = pos as u16;
        Ok(())
    }

    /// Unregisters the handle under `uidx`.
    fn remove(&mut self, uidx: u32) -> Option<QpCompletions> {
        let pos = self.position(uidx)?;
        self.slot[uidx as usize] = NO_SLOT;
        let (_, h) = self.entries.swap_remove(pos);
        if let Some(&(moved, _)) = self.entries.as_slice().get(pos) {
            self.slot[moved as usize] = pos as u16;
        }
        Some(h)
    }

    #[inline(always)]
    fn get(&self, uidx: u32) -> Option<&QpCompletions> {
        self.position(uidx)
            .and_then(|p| self.entries.as_slice().get(p))
            .map(|(_, h)| h)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(not(feature = "alloc"))]
impl CqResolver for Resolver {
    #[inline(always)]
    fn by_user_index(&self, uidx: u32) -> Option<&QpCompletions> {
        self.lookup(uidx)
    }

    fn by_qpn(&self, qpn: u32) -> Option<&QpCompletions> {
        self.entries
            .iter()
            .find(|(_, h)| h.qpn() == qpn)
            .map(|(_, h)| h)
    }

    fn srq_by_srqn(&self, srqn: u32) -> Option<&SrqCompletions> {
        self.entries
            .iter()
            .find_map(|(_, h)| h.srq().filter(|s| s.srqn() == srqn))
    }
}

/// The completion handles of the QPs a CQ serves, found by user index in
/// O(1) with one bounds check: with the `alloc` feature, `slots[uidx]`
/// holds the handle itself. User indices are allocated densely by the
/// context (below its [`Capacities::qps`](crate::verbs::Capacities::qps)),
/// and the table grows to the highest one registered (a handle is a few
/// hundred bytes), so the data path's lookup is the index, its bounds
/// check and the handle's presence, as verbs-core's `CqTable`.
///
/// The CQE-version-0 path ([`CqResolver::by_qpn`], CQEs naming the QP by
/// number) and the SRQ path ([`CqResolver::srq_by_srqn`], receive CQEs of a
/// QP whose handle is gone) scan the table: O(highest user index).
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub(crate) struct Resolver {
    slots: alloc::vec::Vec<Option<QpCompletions>>,
    /// User indices must be below this.
    cap: usize,
    /// Handles registered.
    len: usize,
}

#[cfg(feature = "alloc")]
impl Resolver {
    /// A resolver for user indices below `cap`.
    fn new(cap: usize) -> Self {
        Self {
            slots: alloc::vec::Vec::new(),
            cap: cap.min(MAX_CONTEXT_QPS),
            len: 0,
        }
    }

    /// Registers `h` under `uidx`.
    fn insert(&mut self, uidx: u32, h: QpCompletions) -> Result<()> {
        let i = uidx as usize;
        if i >= self.cap {
            return Err(Error::CapacityExceeded {
                what: "the CQ's table of QPs (user index)",
                capacity: self.cap,
            });
        }
        if self.get(uidx).is_some() {
            return Err(Error::InvalidArgument {
                arg: "user_index",
                reason: "already registered with this CQ",
            });
        }
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(h);
        self.len += 1;
        Ok(())
    }

    /// Unregisters the handle under `uidx`.
    fn remove(&mut self, uidx: u32) -> Option<QpCompletions> {
        let h = self.slots.get_mut(uidx as usize)?.take()?;
        self.len -= 1;
        // Give back the tail of unused slots.
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        Some(h)
    }

    #[inline(always)]
    fn get(&self, uidx: u32) -> Option<&QpCompletions> {
        self.slots.get(uidx as usize)?.as_ref()
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(feature = "alloc")]
impl CqResolver for Resolver {
    #[inline(always)]
    fn by_user_index(&self, uidx: u32) -> Option<&QpCompletions> {
        self.get(uidx)
    }

    fn by_qpn(&self, qpn: u32) -> Option<&QpCompletions> {
        self.slots.iter().flatten().find(|h| h.qpn() == qpn)
    }

    fn srq_by_srqn(&self, srqn: u32) -> Option<&SrqCompletions> {
        self.slots
            .iter()
            .flatten()
            .find_map(|h| h.srq().filter(|s| s.srqn() == srqn))
    }
}

struct Inner<M: platform::Mmio> {
    cq: verbs_core::Cq<M>,
    table: Resolver,
    arm: ArmState,
}

/// Who armed the CQ for its next completion event.
#[derive(Clone, Copy, Debug, Default)]
struct ArmState {
    /// The user ([`Cq::req_notify`]), with `solicited_only`; cleared when
    /// an event is handed to the user.
    user: Option<bool>,
    /// [`Cq::poll_wait`], to sleep until a completion: the event of this
    /// arm is the driver's own and is not handed to the user.
    internal: bool,
    /// The `internal` arm's event is sure to come: `poll_wait` took a
    /// completion written after it armed (the device raises the event of
    /// an arm with an unreported completion past its consumer index, at
    /// once or when the completion is written).
    internal_fires: bool,
}

/// How long [`Cq::req_notify`] waits for the event of `poll_wait`'s own arm
/// that is sure to come, so as not to hand it to the user as the event
/// of the user's arm (events arrive within microseconds; this bounds a
/// device that loses one).
const INTERNAL_EVENT_WAIT: Duration = Duration::from_millis(100);

/// A completion queue (`ibv_cq`). QPs hold handles of the CQs they
/// complete to, so a CQ outlives them. Polling takes `&self` (a spin lock
/// guards the consumer side), so one CQ may be polled from any thread.
/// It serves up to [`Capacities::qps`](crate::verbs::Capacities::qps) QPs
/// (every QP of its context) and finds a completion's QP by its user
/// index in O(1).
pub struct Cq<P: Platform + 'static, S: Share = DefaultShare> {
    ctx: S::Ref<Context<P, S>>,
    obj: Option<FwObj<P, S, CqObj>>,
    inner: spin::Mutex<Option<Inner<P::Mmio>>>,
    cqn: Cqn,
    eqn: Eqn,
    /// Entries (changed by [`Cq::resize`]).
    cqe: AtomicU32,
    /// The completion channel the CQ reports its events to, if any.
    channel: Option<S::Ref<CompChannel<P, S>>>,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Cq<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} entries)", self.cqn, self.cqe())
    }
}

impl<P: Platform + 'static, S: Share> Cq<P, S> {
    /// Creates a CQ of at least `cqe` entries on completion vector 0
    /// (`ibv_create_cq`) in the context behind `ctx`; [`Cq::cqe`] tells how
    /// many it has (rounded like libibverbs: `2^n - 1`).
    pub fn create(ctx: &impl Handle<Context<P, S>, Share = S>, cqe: u32) -> Result<Self> {
        Self::create_on(ctx, cqe, 0)
    }

    /// Creates a CQ whose completion events go to completion EQ
    /// `comp_vector` (modulo the number of completion EQs).
    pub fn create_on(
        ctx: &impl Handle<Context<P, S>, Share = S>,
        cqe: u32,
        comp_vector: u32,
    ) -> Result<Self> {
        let ctx: S::Ref<Context<P, S>> = ctx.clone().into_ref();
        let this: &Context<P, S> = &ctx;
        let hca = this.hca();
        if cqe == 0 || cqe > this.query_device().max_cqe {
            return Err(Error::InvalidAttribute {
                attr: "cqe",
                value: u64::from(cqe),
                reason: "a CQ has 1 ..= max_cqe entries",
            });
        }
        let layout = CqLayout::for_entries(cqe).map_err(Error::DataPath)?;
        let neqs = hca.comp_eqns().count();
        let eqn = hca
            .comp_eqns()
            .nth(comp_vector as usize % neqs.max(1))
            .ok_or(Error::Unsupported("no completion EQ"))?;
        let region = hca.dma_alloc(
            layout.total_bytes,
            PAS_PAGE_SIZE,
            DmaUse::Queues,
            "allocating a CQ",
        )?;
        let mmio = match this.map_bar() {
            Ok(m) => m,
            Err(e) => {
                hca.dma_free(region, DmaUse::Queues);
                return Err(e);
            }
        };
        let version = if this.query_device().cqe_version == 1 {
            CqeVersion::V1
        } else {
            CqeVersion::V0
        };
        // The data path first: it makes every CQE invalid and owned by
        // hardware and zeroes the doorbell record before the device may
        // look at them. The CQ number comes with CREATE_CQ's answer.
        let cfg = CqConfig {
            cqn: 0,
            layout,
            version,
            uar_page_offset: this.uar_offset(),
        };
        let mut cq = match verbs_core::Cq::new(region, mmio, &cfg) {
            Ok(c) => c,
            Err((e, parts)) => {
                hca.dma_free(parts.region, DmaUse::Queues);
                return Err(Error::DataPath(e));
            }
        };
        let iova = cq.region().iova();
        let input = (|| -> Result<CreateCqIn> {
            let cqc = Cqc::new()
                .with(Cqc::cqe_sz, CQE_SZ_64)?
                .with(Cqc::log_cq_size, layout.log_cq_size)?
                .with(Cqc::uar_page, this.uar().number().0)?
                .with(Cqc::c_eqn, eqn.0)?
                .with(Cqc::log_page_size, 0)?
                .with(Cqc::dbr_addr, iova + layout.dbr_offset as u64)?;
            Ok(CreateCqIn::new().with(CreateCqIn::cq_context, cqc)?)
        })();
        let input = match input {
            Ok(i) => i,
            Err(e) => {
                hca.dma_free(cq.into_parts().region, DmaUse::Queues);
                return Err(e);
            }
        };
        let obj = match create_at(iova, layout.ring_bytes, &input, |p| hca.create_cq(p)) {
            Ok(o) => o.rehome(hca.clone()),
            Err(e) => {
                release_after_failure(hca, cq.into_parts().region, &e);
                return Err(e);
            }
        };
        let cqn = obj.number();
        if let Err(e) = cq.set_cqn(cqn.0) {
            return Err(destroy_and_free(
                hca,
                obj,
                cq.into_parts().region,
                Error::DataPath(e),
            ));
        }
        let qps = this.capacities().qps;
        Ok(Cq {
            obj: Some(obj),
            inner: spin::Mutex::new(Some(Inner {
                cq,
                table: Resolver::new(qps),
                arm: ArmState::default(),
            })),
            cqn,
            eqn,
            cqe: AtomicU32::new((1u32 << layout.log_cq_size) - 1),
            ctx,
            channel: None,
        })
    }

    /// Creates a CQ (`ibv_create_cq` with a `channel`) whose completion
    /// events go to `channel`, as [`create_on`](Self::create_on) does
    /// otherwise; `cookie` comes back with each of its events
    /// ([`CqEvent::cookie`](crate::verbs::CqEvent), libibverbs'
    /// `cq_context`). Its events are read with
    /// [`CompChannel::get_event`] (not [`wait_event`](Self::wait_event) or
    /// [`take_events`](Self::take_events)) and acknowledged with
    /// [`ack_events`](Self::ack_events). The CQ holds a handle of the
    /// channel.
    ///
    /// # Errors
    ///
    /// As [`create_on`](Self::create_on); [`Error::InvalidArgument`] for
    /// a channel of another context; [`Error::CapacityExceeded`] when
    /// the channel serves [`MAX_CHANNEL_CQS`](crate::verbs::MAX_CHANNEL_CQS)
    /// CQs.
    pub fn create_on_channel(
        ctx: &impl Handle<Context<P, S>, Share = S>,
        cqe: u32,
        comp_vector: u32,
        channel: &impl Handle<CompChannel<P, S>, Share = S>,
        cookie: u64,
    ) -> Result<Self> {
        if !core::ptr::eq::<Context<P, S>>(&**channel.context(), &**ctx) {
            return Err(Error::InvalidArgument {
                arg: "channel",
                reason: "the completion channel belongs to another context",
            });
        }
        let mut cq = Self::create_on(ctx, cqe, comp_vector)?;
        // A failure drops the CQ, which destroys it.
        channel.bind(cq.cqn, cq.eqn, cookie)?;
        cq.channel = Some(channel.clone().into_ref());
        Ok(cq)
    }

    /// The completion channel of the CQ, if it was created on one.
    pub fn channel(&self) -> Option<&S::Ref<CompChannel<P, S>>> {
        self.channel.as_ref()
    }

    /// Acknowledges `n` completion events read from the CQ's channel
    /// (`ibv_ack_cq_events`). A CQ without a channel has nothing to
    /// acknowledge (its events are acknowledged as
    /// [`take_events`](Self::take_events) takes them): `Ok`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAttribute`] when `n` is more than the events read
    /// and not acknowledged.
    pub fn ack_events(&self, n: u32) -> Result<()> {
        match &self.channel {
            Some(ch) => ch.ack(self.cqn, u64::from(n)),
            None => Ok(()),
        }
    }

    /// Completion events read from the CQ's channel and not yet
    /// acknowledged (0 without a channel). [`destroy`](Self::destroy)
    /// hands those still owed to the channel.
    pub fn unacked_events(&self) -> u64 {
        self.channel.as_ref().map_or(0, |ch| ch.unacked(self.cqn))
    }

    /// The CQ number.
    pub fn number(&self) -> Cqn {
        self.cqn
    }

    /// Entries (`ibv_cq.cqe`: the ring holds this many plus one).
    pub fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }

    /// Resizes the CQ to at least `cqe` entries (`ibv_resize_cq`: MODIFY_CQ
    /// with op_mod resize) and returns the entries it now has (rounded as
    /// at creation, `2^n - 1`). Completions not yet polled are kept: they
    /// are copied into the new ring (rdma-core's
    /// `mlx5_cq_resize_copy_cqes`) and polled next, in order. The size
    /// asked for being the current one, nothing is done. Polling waits on
    /// the CQ's lock meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAttribute`] (`cqe`) for 0, more than `max_cqe`, or
    /// fewer entries than the completions not yet polled;
    /// [`Error::Command`] when the device refuses (the CQ stays as it
    /// was); [`Error::DataPath`] when the device did not move to the new
    /// ring as the PRM says (the CQ is then unusable).
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        let this: &Context<P, S> = &self.ctx;
        let hca = this.hca();
        if cqe == 0 || cqe > this.query_device().max_cqe {
            return Err(Error::InvalidAttribute {
                attr: "cqe",
                value: u64::from(cqe),
                reason: "a CQ has 1 ..= max_cqe entries",
            });
        }
        let layout = CqLayout::for_entries(cqe).map_err(Error::DataPath)?;
        let log = layout.log_cq_size;
        let mut g = self.inner.lock();
        let Some(inner) = g.as_mut() else {
            return Err(Error::InvalidArgument {
                arg: "cq",
                reason: "the CQ is destroyed",
            });
        };
        if inner.cq.entries() == 1 << log {
            return Ok(self.cqe());
        }
        let pending = inner.cq.pending();
        if pending > (1u32 << log) - 1 {
            return Err(Error::InvalidAttribute {
                attr: "cqe",
                value: u64::from(cqe),
                reason: "fewer entries than the completions not yet polled",
            });
        }
        let region = hca.dma_alloc(
            verbs_core::resize_region_bytes(log),
            PAS_PAGE_SIZE,
            DmaUse::Queues,
            "resizing a CQ",
        )?;
        let ring = inner.cq.prepare_resize(region, log).map_err(|(e, r)| {
            hca.dma_free(r, DmaUse::Queues);
            Error::DataPath(e)
        })?;
        let iova = ring.region().iova();
        let input = (|| -> Result<ModifyCqIn> {
            let cqc = Cqc::new()
                .with(Cqc::log_cq_size, log)?
                .with(Cqc::log_page_size, 0)?;
            Ok(ModifyCqIn::new()
                .with(ModifyCqIn::op_mod, MODIFY_CQ_OP_MOD_RESIZE)?
                .with(ModifyCqIn::cqn, self.cqn.0)?
                // log_cq_size, page_offset, log_page_size.
                .with(ModifyCqIn::modify_field_select_resize_field_select, 0b111)?
                .with(ModifyCqIn::cq_context, cqc)?)
        })();
        let input = match input {
            Ok(i) => i,
            Err(e) => {
                hca.dma_free(ring.into_region(), DmaUse::Queues);
                return Err(e);
            }
        };
        let pages = (64usize << log).div_ceil(PAS_PAGE_SIZE);
        let sent: Result<ModifyCqOut> =
            hca.exec_encoded(&PageList::contiguous(&input, iova, PAS_PAGE_SIZE, pages));
        if let Err(e) = sent {
            release_after_failure(hca, ring.into_region(), &e);
            return Err(e);
        }
        match inner.cq.finish_resize(ring) {
            // The device writes the new ring only: the ring of a previous
            // resize is free.
            Ok(old) => {
                if let Some(r) = old {
                    hca.dma_free(r, DmaUse::Queues);
                }
            }
            Err((e, ring)) => {
                hca.retire(ring.into_region(), DmaUse::Queues);
                return Err(Error::DataPath(e));
            }
        }
        let n = (1u32 << log) - 1;
        self.cqe.store(n, Ordering::Relaxed);
        Ok(n)
    }

    /// The context's handle.
    pub fn context(&self) -> &S::Ref<Context<P, S>> {
        &self.ctx
    }

    /// Runs `f` on the data path under the lock: one attempt inline, the
    /// spinning out of line (the lock is contended only when threads poll
    /// one CQ at once).
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut Inner<P::Mmio>) -> R) -> R {
        let mut g = match self.inner.try_lock() {
            Some(g) => g,
            None => return self.with_contended(f),
        };
        f(g.as_mut()
            .expect("the CQ's data path lives until it is destroyed"))
    }

    /// [`with`](Self::with) when the first attempt at the lock failed:
    /// the whole call out of line (the inline path then calls nothing
    /// before its work).
    #[cold]
    #[inline(never)]
    fn with_contended<R>(&self, f: impl FnOnce(&mut Inner<P::Mmio>) -> R) -> R {
        let mut g = self.inner.lock();
        f(g.as_mut()
            .expect("the CQ's data path lives until it is destroyed"))
    }

    /// Polls up to `wc.len()` completions (`ibv_poll_cq`) into
    /// [`WorkCompletion`](verbs_core::WorkCompletion)s or the compact
    /// [`Completion`]s; returns how many. A completion the device got wrong
    /// is consumed and reported as [`Error::InvalidCompletion`].
    #[inline]
    pub fn poll<W: CompletionSlot>(&self, wc: &mut [W]) -> Result<usize> {
        self.with(|i| i.cq.poll(&i.table, wc))
            .map_err(Error::InvalidCompletion)
    }

    /// Polls one completion into `out` (`ibv_poll_cq` with one entry, as
    /// verbs-core's [`Cq::poll_one`](verbs_core::Cq::poll_one)): `Ok(true)`
    /// when one was taken and `out` holds it, `Ok(false)` when the CQ is
    /// empty (`out` untouched). The caller's `out` is written in place: no
    /// completion is built and copied per call.
    ///
    /// A completion the device got wrong is consumed and refused with the
    /// two-word [`PollError`](verbs_core::PollError), returned in
    /// registers (`out` then holds nothing meaningful); `?` in a function
    /// returning [`Result`] converts it to [`Error::InvalidCompletion`],
    /// the error [`poll`](Self::poll) gives for the same CQE.
    #[inline]
    pub fn poll_one(
        &self,
        out: &mut Completion,
    ) -> core::result::Result<bool, verbs_core::PollError> {
        self.with(|i| i.cq.poll_one(&i.table, out))
    }

    /// [`poll_one`](Self::poll_one) with the raw Ethernet fields of the
    /// CQE (verbs-core's [`Cq::poll_one_rx`](verbs_core::Cq::poll_one_rx),
    /// rdma-core's extended CQ): on `Ok(true)` `rx` holds the L3/L4 header
    /// types, the checksum bits, the stripped VLAN, the RSS hash and type
    /// and the flow tag of a raw packet QP's receive.
    pub fn poll_one_rx(&self, out: &mut Completion, rx: &mut verbs_core::RxCqe) -> Result<bool> {
        self.with(|i| i.cq.poll_one_rx(&i.table, out, rx))
            .map_err(Error::InvalidCompletion)
    }

    /// Requests a completion event for the next completion, or the next
    /// solicited one (`ibv_req_notify_cq`).
    pub fn req_notify(&self, solicited_only: bool) {
        if let Some(ch) = &self.channel {
            // The arm sequence number advances once per event (2 bits):
            // for the events the channel collected since the last arm.
            let owed = ch.take_arm_owed(self.cqn);
            self.with(|i| {
                for _ in 0..owed % 4 {
                    i.cq.completion_event();
                }
                i.arm.user = Some(solicited_only);
                i.cq.arm(solicited_only);
            });
            return;
        }
        if self.with(|i| i.arm.internal) {
            // An arm of poll_wait is outstanding: its event, if it came,
            // is not the user's. When it is sure to come, it is waited
            // for: arriving after the user's arm it would pass for the
            // user's event (for a solicited-only arm, an event the
            // completions do not call for).
            let hca = self.ctx.hca();
            let p = hca.platform();
            let deadline = Deadline::start(p, INTERNAL_EVENT_WAIT);
            loop {
                if let Err(e) = service(hca) {
                    log::debug!("{}: servicing before the arm: {e}", self.cqn);
                    break;
                }
                self.take_raw();
                if !self.with(|i| i.arm.internal && i.arm.internal_fires) {
                    break;
                }
                let waited = deadline
                    .check(p, Wait::CompletionEvent { cqn: self.cqn })
                    .and_then(|()| self.idle(None, &deadline));
                if let Err(e) = waited {
                    log::warn!(
                        "{}: the event of poll_wait's arm did not come: {e}",
                        self.cqn
                    );
                    break;
                }
            }
        }
        self.with(|i| {
            i.arm = ArmState {
                user: Some(solicited_only),
                internal: false,
                internal_fires: false,
            };
            i.cq.arm(solicited_only);
        });
    }

    /// Takes the completion events that arrived for this CQ since the last
    /// call without waiting (runs [`Hca::poll_events`](crate::Hca::poll_events) first); acknowledges
    /// them (`ibv_ack_cq_events`).
    pub fn take_events(&self) -> Result<u64> {
        self.no_channel()?;
        service(self.ctx.hca())?;
        Ok(self.take_raw())
    }

    /// Takes the events counted for this CQ, advances the arm sequence
    /// number for them, and returns those that are the user's (the event of
    /// poll_wait's own arm is not).
    fn take_raw(&self) -> u64 {
        let n = self
            .ctx
            .hca()
            .events()
            .take_completion_events(self.cqn)
            .unwrap_or(0);
        if n == 0 {
            return 0;
        }
        // The arm sequence number advances once per event (2 bits).
        self.with(|i| {
            for _ in 0..n % 4 {
                i.cq.completion_event();
            }
            let mine = u64::from(core::mem::take(&mut i.arm.internal));
            i.arm.internal_fires = false;
            i.arm.user = None;
            n - mine.min(n)
        })
    }

    /// Refuses the event calls of a CQ without a channel.
    fn no_channel(&self) -> Result<()> {
        match self.channel {
            Some(_) => Err(Error::Unsupported(
                "the completion events of a CQ on a completion channel are read with CompChannel::get_event",
            )),
            None => Ok(()),
        }
    }

    /// The completion EQ this CQ reports to (`cqc.c_eqn`).
    pub fn eqn(&self) -> Eqn {
        self.eqn
    }

    /// Waits for a completion event (`ibv_get_cq_event`), servicing the HCA
    /// ([`Hca::service`](crate::Hca::service)) while it waits; returns how many arrived. Arm
    /// with [`req_notify`](Self::req_notify) first.
    ///
    /// When the driver runs on interrupts ([`WaitMode`](crate::WaitMode))
    /// the wait sleeps on the MSI-X vector of the CQ's completion EQ between
    /// two looks at the EQs; otherwise it polls.
    pub fn wait_event(&self, timeout: Duration) -> Result<u64> {
        self.no_channel()?;
        let hca = self.ctx.hca();
        let p = hca.platform();
        let deadline = Deadline::start(p, timeout);
        let vector = hca.eq_vector(self.eqn);
        loop {
            let seen = vector.and_then(|v| hca.interrupt_seen(v).map(|s| (v, s)));
            let n = self.take_events()?;
            if n > 0 {
                return Ok(n);
            }
            deadline.check(p, Wait::CompletionEvent { cqn: self.cqn })?;
            self.idle(seen, &deadline)?;
        }
    }

    /// Prepares a sleep until this CQ's next completion, when the driver
    /// runs on interrupts: reads the interrupt count of the completion EQ's
    /// vector and makes sure a completion raises an event, with the user's
    /// arm for any completion (whose event stays the user's) or, without a
    /// user's arm, an arm of the driver's own (whose event
    /// [`take_events`](Self::take_events) does not count). `None` while
    /// polling, or under the user's solicited-only arm (which a completion
    /// may not fire). The caller polls once more before it sleeps with
    /// [`sleep`](Self::sleep).
    pub(crate) fn arm_for_sleep(&self) -> Option<(u16, u64)> {
        if self.channel.is_some() {
            // An event of the driver's own would reach the channel.
            return None;
        }
        let hca = self.ctx.hca();
        let v = hca.eq_vector(self.eqn)?;
        let user = self.with(|i| i.arm.user);
        if user == Some(true) {
            return None;
        }
        let seen = hca.interrupt_seen(v)?;
        if user.is_none() {
            self.with(|i| {
                i.arm.internal = true;
                i.cq.arm(false);
            });
        }
        Some((v, seen))
    }

    /// Sleeps on the interrupt of [`arm_for_sleep`](Self::arm_for_sleep)
    /// until the deadline or the next health poll, then services the HCA
    /// (consuming the EQs and re-arming them; the event stays counted for
    /// [`take_events`](Self::take_events)).
    pub(crate) fn sleep(&self, seen: (u16, u64), deadline: &Deadline) -> Result<()> {
        self.idle(Some(seen), deadline)?;
        service(self.ctx.hca())
    }

    /// Between two looks at the device: sleeps on the interrupt `seen`
    /// (vector, count) until the deadline or the next health poll, or takes
    /// one polling step.
    fn idle(&self, seen: Option<(u16, u64)>, deadline: &Deadline) -> Result<()> {
        let hca = self.ctx.hca();
        match seen {
            Some((vector, count)) => {
                let slice = deadline
                    .remaining(hca.platform())
                    .min(hca.config().timeouts.health_poll);
                hca.wait_interrupt(vector, count, slice)?;
            }
            None => {
                hca.note_poll();
                hca.platform().relax();
            }
        }
        Ok(())
    }

    /// Polls until at least one completion is there or `timeout` passed,
    /// servicing the HCA meanwhile; returns how many were written.
    ///
    /// When the driver runs on interrupts ([`WaitMode`](crate::WaitMode)),
    /// a poll that finds nothing sleeps on the completion EQ's MSI-X vector
    /// until the completion's event: with the user's arm for any
    /// completion ([`req_notify`](Self::req_notify)`(false)`) that event
    /// stays the user's; without a user's arm the CQ is armed here, and
    /// that event is the driver's own ([`take_events`](Self::take_events)
    /// and [`wait_event`](Self::wait_event) do not count it). With a
    /// solicited-only arm of the user, and when the driver polls, the wait
    /// polls.
    ///
    /// The timeout is platform time: on the emulator's virtual clock, time
    /// runs on while its device is idle, so a wait for work that another
    /// thread has yet to post can end early there (poll with
    /// [`poll`](Self::poll) and a deadline of your own in that case).
    pub fn poll_wait<W: CompletionSlot>(&self, wc: &mut [W], timeout: Duration) -> Result<usize> {
        let hca = self.ctx.hca();
        let p = hca.platform();
        let deadline = Deadline::start(p, timeout);
        let mut spins = 0u32;
        loop {
            let n = self.poll(wc)?;
            if n > 0 || wc.is_empty() {
                return Ok(n);
            }
            deadline.check(p, Wait::Completion { cqn: self.cqn })?;
            if let Some(seen) = self.arm_for_sleep() {
                // Look again: a completion written before the arm is
                // polled here, one after it raises the event.
                let n = self.poll(wc)?;
                if n > 0 {
                    // Not there before the arm: an own arm's event will come.
                    self.with(|i| i.arm.internal_fires |= i.arm.internal);
                    return Ok(n);
                }
                self.sleep(seen, &deadline)?;
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 {
                service(hca)?;
            }
            self.idle(None, &deadline)?;
        }
    }

    /// Registers a QP's completion handle under its user index (a refused
    /// handle is dropped, which releases it).
    pub(crate) fn attach(&self, uidx: u32, h: QpCompletions) -> Result<()> {
        self.with(|i| i.table.insert(uidx, h))
    }

    /// Removes the CQEs of the QP registered under user index `uidx` that
    /// were not polled (rdma-core's `__mlx5_cq_clean`; with the handle's
    /// SRQ, the SRQ WQEs its receive CQEs consumed go back to the SRQ),
    /// then unregisters its handle. For a QP that produces no more
    /// completions: after 2RST or DESTROY_QP. `None` when nothing is
    /// registered under `uidx`.
    pub(crate) fn clean_and_detach(&self, uidx: u32) -> Option<(QpCompletions, CqClean)> {
        self.with(|i| {
            let report = i.cq.clean_qp(uidx, i.table.get(uidx)?);
            Some((i.table.remove(uidx)?, report))
        })
    }

    /// QPs the CQ serves now.
    pub fn users(&self) -> usize {
        self.with(|i| i.table.len())
    }

    /// Destroys the CQ behind its last handle (see [`destroy`](Self::destroy));
    /// while QPs (or other holders) still hold handles of it, drops this
    /// handle and returns [`Error::InUse`]: the CQ is then destroyed when
    /// the last handle drops.
    pub fn try_destroy(this: impl Handle<Self, Share = S>) -> Result<()> {
        crate::verbs::share::destroy_last::<S, Self>(this.into_ref(), "the CQ", Self::destroy)
    }

    /// Destroys the CQ (DESTROY_CQ) and frees its memory. Refused while a
    /// QP still completes to it (possible only if a QP was leaked).
    ///
    /// Completion events read from its channel and not acknowledged do not
    /// stop it: `ibv_destroy_cq` waits for their acknowledgements, but no
    /// other handle of this CQ is left to acknowledge them through, so the
    /// CQ is destroyed (device object, memory, channel binding) and its
    /// outstanding count moves to the channel, where
    /// [`CompChannel::ack_destroyed_events`](crate::verbs::CompChannel::ack_destroyed_events) acknowledges them
    /// ([`CompChannel::destroyed_unacked_events`](crate::verbs::CompChannel::destroyed_unacked_events)).
    pub fn destroy(mut self) -> Result<()> {
        let unacked = self.unacked_events();
        if unacked > 0 {
            log::warn!(
                "destroying {} with {unacked} completion events not acknowledged; \
                 they are now counted by its channel",
                self.cqn
            );
        }
        let users = self.users();
        if users > 0 {
            let e = Error::InUse {
                what: "the CQ",
                users: users as u32,
            };
            // Keep it (and its memory): the device may still write it.
            core::mem::forget(self);
            return Err(e);
        }
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(obj) = self.obj.take() else {
            return Ok(());
        };
        let hca = self.ctx.hca();
        let r = obj.destroy();
        if let Some(ch) = self.channel.take() {
            ch.unbind(self.cqn);
        }
        if let Some(inner) = self.inner.lock().take() {
            // The table is empty (QPs detach before they go).
            drop(inner.table);
            let parts = inner.cq.into_parts();
            if let Some(ring) = parts.resized {
                release_after_destroy(hca, ring, r.is_ok());
            }
            release_after_destroy(hca, parts.region, r.is_ok());
        }
        r
    }
}

impl<P: Platform + 'static, S: Share> Drop for Cq<P, S> {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::error!("destroying {}: {e}", self.cqn);
        }
    }
}
