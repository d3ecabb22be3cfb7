//! Event queues: creation and destruction, the consumer side (owner bit,
//! consumer index, doorbell updates at least every 128 entries and re-arm),
//! and the dispatch of every event type the driver subscribes to.
//!
//! Three kinds of EQ: the command EQ (command completions, event 0x0a), the
//! asynchronous EQ (page requests, port changes, CQ, QP, WQ and SRQ errors,
//! internal errors) and the completion EQs (event 0x00). EQs are consumed
//! by [`Hca::poll_events`] (and the command EQ by command waits); each has
//! an MSI-X vector (`intr`, see the `irq` module) on which waits sleep when
//! the driver runs on interrupts.

use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use firmware_cmds::caps::CmdHcaCap;
use firmware_cmds::eq::{
    self as feq, CmdInterCompEvent, CompEvent, CqError, CreateEqIn, CreateEqOut, DestroyEqIn,
    EQE_OWNER_INIT, EQE_OWNER_OFFSET, EQE_SIZE, Eqc, Eqe, EventAuto, PagesReqEvent,
    PortStateChangeEvent, QpEvents, eq_doorbell_value,
};
use firmware_cmds::uar::{UAR_EQ_DOORBELL_ARM_OFFSET, UAR_EQ_DOORBELL_UPDATE_OFFSET};
use platform::barrier::udma_from_device_barrier;
use platform::{Be32, DmaRegion, Mmio, Platform};

use crate::cmd::CmdState;
use crate::error::{EqeError, Error, Result};
use crate::events::{AsyncEvent, EventRouter, QueueId};
use crate::hca::{DmaUse, Hca, MAX_COMP_EQS};
use crate::info::PortState;
use crate::pas::{PAS_PAGE_SIZE, PageList};
use crate::types::{Eqn, Qpn, Srqn};

/// The consumer index must reach the device at least this often (the
/// firmware reports an overrun otherwise).
pub const EQ_UPDATE_EVERY: u32 = 128;

/// The events of the asynchronous EQ.
pub const ASYNC_EVENTS: &[u8] = &[
    feq::EVENT_TYPE_PATH_MIG,
    feq::EVENT_TYPE_COMM_EST,
    feq::EVENT_TYPE_SQ_DRAINED,
    feq::EVENT_TYPE_CQ_ERROR,
    feq::EVENT_TYPE_WQ_CATAS_ERROR,
    feq::EVENT_TYPE_PATH_MIG_FAILED,
    feq::EVENT_TYPE_INTERNAL_ERROR,
    feq::EVENT_TYPE_PORT_CHANGE,
    feq::EVENT_TYPE_PAGE_REQUEST,
    feq::EVENT_TYPE_WQ_INVAL_REQ_ERROR,
    feq::EVENT_TYPE_WQ_ACCESS_ERROR,
    feq::EVENT_TYPE_SRQ_CATAS_ERROR,
    feq::EVENT_TYPE_SRQ_LAST_WQE,
    feq::EVENT_TYPE_SRQ_RQ_LIMIT,
];

/// What an EQ is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqKind {
    /// Command completions.
    Command,
    /// Asynchronous events and page requests.
    Async,
    /// Completion events (the index of the completion EQ).
    Completion(u8),
}

impl EqKind {
    /// The event types routed to it.
    pub fn events(self) -> &'static [u8] {
        match self {
            EqKind::Command => &[feq::EVENT_TYPE_CMD],
            EqKind::Async => ASYNC_EVENTS,
            EqKind::Completion(_) => &[feq::EVENT_TYPE_COMP],
        }
    }
}

/// The consumer side of an EQ ring: which entry is next and whether it
/// belongs to software.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EqRing {
    log_size: u8,
    ci: u32,
}

impl EqRing {
    pub(crate) fn new(log_size: u8) -> Self {
        Self { log_size, ci: 0 }
    }

    /// Index of the next entry.
    pub(crate) fn index(&self) -> usize {
        (self.ci & ((1 << self.log_size) - 1)) as usize
    }

    /// Whether an entry with this owner byte at the consumer index is
    /// valid: `owner == (ci >> log_size) & 1`.
    pub(crate) fn is_sw_owned(&self, owner_byte: u8) -> bool {
        u32::from(owner_byte & 1) == (self.ci >> self.log_size) & 1
    }

    /// Consumes one entry; returns whether the consumer index must be told
    /// to the device now.
    pub(crate) fn advance(&mut self) -> bool {
        self.ci = self.ci.wrapping_add(1);
        let every = EQ_UPDATE_EVERY.min((1u32 << self.log_size) / 2).max(1);
        self.ci % every == 0
    }

    /// The consumer index (24 bits reach the device).
    pub(crate) fn ci(&self) -> u32 {
        self.ci
    }
}

/// One EQ.
pub(crate) struct Eq {
    pub(crate) eqn: u8,
    pub(crate) kind: EqKind,
    pub(crate) buf: DmaRegion,
    pub(crate) log_size: u8,
    /// The MSI-X vector (`eqc.intr`).
    pub(crate) vector: u16,
    ring: spin::Mutex<EqRing>,
}

/// The driver's EQs.
#[derive(Default)]
pub(crate) struct Eqs {
    pub(crate) cmd: Option<Eq>,
    pub(crate) async_eq: Option<Eq>,
    pub(crate) comp: heapless::Vec<Eq, MAX_COMP_EQS>,
}

impl Eqs {
    fn iter(&self) -> impl Iterator<Item = &Eq> {
        self.cmd
            .iter()
            .chain(self.async_eq.iter())
            .chain(self.comp.iter())
    }

    /// The EQ numbered `eqn`.
    pub(crate) fn find(&self, eqn: u8) -> Option<&Eq> {
        self.iter().find(|e| e.eqn == eqn)
    }
}

impl<P: Platform> Hca<P> {
    fn eq_doorbell(&self, eq: &Eq, ci: u32, arm: bool) {
        let Some(uar) = self.uar else { return };
        let off = uar.0 as usize * self.uar_page_size
            + if arm {
                UAR_EQ_DOORBELL_ARM_OFFSET
            } else {
                UAR_EQ_DOORBELL_UPDATE_OFFSET
            };
        self.bar
            .write32(off, Be32::new(eq_doorbell_value(eq.eqn, ci)));
    }

    /// CREATE_EQ: a buffer of `2^log_size` entries (owner bits 1), the
    /// driver's UAR, the events of `kind`.
    pub(crate) fn create_eq(&self, kind: EqKind, log_size: u8) -> Result<Eq> {
        let max = self.info.caps.general().get(CmdHcaCap::log_max_eq_sz);
        if log_size > max {
            return Err(Error::InvalidArgument {
                arg: "Config EQ log size",
                reason: "above the device's log_max_eq_sz",
            });
        }
        let uar = self.uar.ok_or(Error::InvalidArgument {
            arg: "uar",
            reason: "EQs need the driver's UAR first",
        })?;
        let entries = 1usize << log_size;
        let bytes = (entries * EQE_SIZE).next_multiple_of(PAS_PAGE_SIZE);
        let buf = self.dma_alloc(bytes, PAS_PAGE_SIZE, DmaUse::Eqs, "allocating an EQ buffer")?;
        for i in 0..entries {
            buf.write_u8(i * EQE_SIZE + EQE_OWNER_OFFSET, EQE_OWNER_INIT);
        }
        // Without coherent DMA: the initial owner bits reach memory (and
        // no dirty line is left to overwrite an EQE) before CREATE_EQ.
        self.p().dma_clean(&buf, 0, entries * EQE_SIZE);
        let vector = self.vector_for(kind);
        let mut eqc = Eqc::new();
        eqc.set(Eqc::log_eq_size, log_size)?
            .set(Eqc::uar_page, uar.0)?
            .set(Eqc::intr, vector as u8)?
            .set(Eqc::log_page_size, 0)?;
        let mut input = CreateEqIn::new();
        input.set(CreateEqIn::eq_context_entry, eqc)?;
        for &t in kind.events() {
            input.set_event(t);
        }
        let msg = PageList::of_region(&input, &buf);
        let out: CreateEqOut = match self.exec_encoded(&msg) {
            Ok(o) => o,
            Err(
                e @ (Error::Command(_) | Error::Delivery { .. } | Error::InvalidArgument { .. }),
            ) => {
                self.dma_free(buf, DmaUse::Eqs);
                return Err(e);
            }
            Err(e) => {
                self.retire(buf, DmaUse::Eqs);
                return Err(e);
            }
        };
        let eqn = out.get(CreateEqOut::eq_number);
        if self.eqs.iter().any(|e| e.eqn == eqn) {
            self.retire(buf, DmaUse::Eqs);
            return Err(Error::InvalidAnswer {
                opcode: firmware_cmds::Opcode::CREATE_EQ,
                op_mod: 0,
                field: "create_eq_out.eq_number",
                value: u64::from(eqn),
                reason: "already the number of another EQ of this driver",
            });
        }
        let eq = Eq {
            eqn,
            kind,
            buf,
            log_size,
            vector,
            ring: spin::Mutex::new(EqRing::new(log_size)),
        };
        self.eq_doorbell(&eq, 0, true);
        log::debug!("EQ {eqn:#x} ({kind:?}, {entries} entries, MSI-X vector {vector}) created");
        Ok(eq)
    }

    /// DESTROY_EQ; the buffer is freed once the firmware let go of it.
    pub(crate) fn destroy_eq(&self, eq: Eq) -> Result<()> {
        let input = DestroyEqIn::new().with(DestroyEqIn::eq_number, eq.eqn)?;
        match self.exec(&input) {
            Ok(_) => {
                self.dma_free(eq.buf, DmaUse::Eqs);
                Ok(())
            }
            Err(e) => {
                self.retire(eq.buf, DmaUse::Eqs);
                Err(e)
            }
        }
    }

    /// Consumes every valid entry of one EQ. Another thread polling the
    /// same EQ makes this a no-op. Invalid entries are skipped, queued as
    /// [`AsyncEvent::InvalidEqe`], and the first is returned as
    /// [`Error::InvalidEqe`] after the whole batch.
    pub(crate) fn poll_eq(&self, eq: &Eq) -> Result<usize> {
        self.try_poll_eq(eq).unwrap_or(Ok(0))
    }

    /// [`poll_eq`](Self::poll_eq), or `None` when another thread is
    /// consuming the EQ right now (it will re-arm it).
    pub(crate) fn try_poll_eq(&self, eq: &Eq) -> Option<Result<usize>> {
        let mut ring = eq.ring.try_lock()?;
        let size = 1usize << eq.log_size;
        let mut first: Option<EqeError> = None;
        let mut n = 0;
        // Bounded: a device writing without pause cannot keep us here.
        while n < 2 * size {
            let base = ring.index() * EQE_SIZE;
            // Without coherent DMA: the entry from memory, before and
            // after its ownership check (nothing otherwise).
            self.p().dma_invalidate(&eq.buf, base, EQE_SIZE);
            if !ring.is_sw_owned(eq.buf.read_u8(base + EQE_OWNER_OFFSET)) {
                break;
            }
            udma_from_device_barrier();
            self.p().dma_invalidate(&eq.buf, base, EQE_SIZE);
            let mut b = [0u8; EQE_SIZE];
            eq.buf.read_bytes(base, &mut b);
            let eqe = Eqe::from_array(b);
            if let Err(error) = self.dispatch(eq, &eqe) {
                log::warn!("EQ {:#x} entry {}: {error} ({eqe})", eq.eqn, ring.index());
                self.events
                    .push(AsyncEvent::InvalidEqe { eqn: eq.eqn, error });
                first.get_or_insert(error);
            }
            n += 1;
            if ring.advance() {
                self.eq_doorbell(eq, ring.ci(), false);
            }
        }
        if n > 0 {
            self.eq_doorbell(eq, ring.ci(), true);
        }
        drop(ring);
        Some(match first {
            Some(error) => Err(Error::InvalidEqe { eqn: eq.eqn, error }),
            None => Ok(n),
        })
    }

    fn dispatch(&self, eq: &Eq, e: &Eqe) -> core::result::Result<(), EqeError> {
        let ctx = EqeContext {
            cmd: &self.cmd,
            events: &self.events,
            num_ports: self.info.caps.num_ports(),
            pending_pages: &self.pending_pages,
            internal_error_seen: &self.internal_error_seen,
        };
        dispatch_eqe(&ctx, eq.kind, e)
    }
}

/// What handling an EQE touches: the driver state an event updates.
pub(crate) struct EqeContext<'a> {
    pub(crate) cmd: &'a CmdState,
    pub(crate) events: &'a EventRouter,
    pub(crate) num_ports: u8,
    pub(crate) pending_pages: &'a AtomicI64,
    pub(crate) internal_error_seen: &'a AtomicBool,
}

/// Checks and routes one valid EQE of an EQ of `kind`: every number in it
/// (command slots, CQN, QPN/SRQN, port, page count, function id) is checked
/// against what the driver knows before anything is updated.
pub(crate) fn dispatch_eqe(
    ctx: &EqeContext<'_>,
    kind: EqKind,
    e: &Eqe,
) -> core::result::Result<(), EqeError> {
    let t = e.get(Eqe::event_type);
    let d = e.data();
    let unexpected = Err(EqeError::UnexpectedEventType { event_type: t });
    match kind {
        EqKind::Command => {
            if t != feq::EVENT_TYPE_CMD {
                return unexpected;
            }
            let v = d
                .get(EventAuto::cmd_inter_comp_event)
                .get(CmdInterCompEvent::command_completion_vector);
            let all = if ctx.cmd.slots >= 32 {
                u32::MAX
            } else {
                (1 << ctx.cmd.slots) - 1
            };
            let bad = ctx.cmd.complete_by_event(v & all) | (v & !all);
            if bad != 0 {
                return Err(EqeError::BadCommandSlots { vector: bad });
            }
            Ok(())
        }
        EqKind::Completion(_) => {
            if t != feq::EVENT_TYPE_COMP {
                return unexpected;
            }
            let cqn = d.get(EventAuto::comp_event).get(CompEvent::cq_number);
            ctx.events.completion(cqn)
        }
        EqKind::Async => dispatch_async(ctx, t, e.get(Eqe::event_sub_type), &d),
    }
}

fn dispatch_async(
    ctx: &EqeContext<'_>,
    t: u8,
    sub: u8,
    d: &EventAuto,
) -> core::result::Result<(), EqeError> {
    match t {
        feq::EVENT_TYPE_PAGE_REQUEST => {
            let p = d.get(EventAuto::pages_req_event);
            let fid = p.get(PagesReqEvent::function_id);
            let num = p.num_pages_signed();
            if fid != 0 || num.unsigned_abs() > crate::fwpages::MAX_PAGE_REQUEST {
                return Err(EqeError::BadPageRequest {
                    function_id: fid,
                    num_pages: num,
                });
            }
            log::debug!("page request: {num} pages");
            ctx.pending_pages
                .fetch_add(i64::from(num), Ordering::AcqRel);
            Ok(())
        }
        feq::EVENT_TYPE_PORT_CHANGE => {
            let port = d
                .get(EventAuto::port_state_change_event)
                .get(PortStateChangeEvent::port_num);
            if port == 0 || port > ctx.num_ports {
                return Err(EqeError::BadPort { port });
            }
            let state = match sub {
                feq::PORT_CHANGE_SUBTYPE_DOWN => PortState::Down,
                feq::PORT_CHANGE_SUBTYPE_ACTIVE => PortState::Active,
                feq::PORT_CHANGE_SUBTYPE_INITIALIZED => PortState::Init,
                _ => ctx.events.port_state(port).unwrap_or(PortState::Nop),
            };
            ctx.events.set_port_state(port, state);
            ctx.events.push(AsyncEvent::PortChange {
                port,
                sub_type: sub,
                state,
            });
            Ok(())
        }
        feq::EVENT_TYPE_CQ_ERROR => {
            let c = d.get(EventAuto::cq_error);
            ctx.events
                .cq_error(c.get(CqError::cqn), c.get(CqError::syndrome))
        }
        feq::EVENT_TYPE_INTERNAL_ERROR => {
            log::error!("the firmware reports an internal error");
            ctx.events.push(AsyncEvent::InternalError);
            ctx.internal_error_seen.store(true, Ordering::Release);
            Ok(())
        }
        feq::EVENT_TYPE_SRQ_CATAS_ERROR | feq::EVENT_TYPE_SRQ_RQ_LIMIT => {
            let n = d.get(EventAuto::qp_events).get(QpEvents::qpn_rqn_sqn);
            ctx.events.queue_event(t, QueueId::Srq(Srqn(n)))
        }
        feq::EVENT_TYPE_PATH_MIG
        | feq::EVENT_TYPE_COMM_EST
        | feq::EVENT_TYPE_SQ_DRAINED
        | feq::EVENT_TYPE_WQ_CATAS_ERROR
        | feq::EVENT_TYPE_PATH_MIG_FAILED
        | feq::EVENT_TYPE_WQ_INVAL_REQ_ERROR
        | feq::EVENT_TYPE_WQ_ACCESS_ERROR
        | feq::EVENT_TYPE_SRQ_LAST_WQE => {
            let q = d.get(EventAuto::qp_events);
            let ty = q.get(QpEvents::r#type);
            let n = q.get(QpEvents::qpn_rqn_sqn);
            let id = match ty {
                feq::EVENT_QUEUE_TYPE_QP => QueueId::Qp(Qpn(n)),
                feq::EVENT_QUEUE_TYPE_RQ => QueueId::Rq(n),
                feq::EVENT_QUEUE_TYPE_SQ => QueueId::Sq(n),
                feq::EVENT_QUEUE_TYPE_DCT => QueueId::Dct(n),
                _ => {
                    return Err(EqeError::UnknownQueue {
                        resource_type: ty,
                        number: n,
                    });
                }
            };
            ctx.events.queue_event(t, id)
        }
        _ => Err(EqeError::UnexpectedEventType { event_type: t }),
    }
}

impl<P: Platform> Hca<P> {
    /// Polls every EQ (asynchronous, completion, and the command EQ), then
    /// answers page requests. Returns the entries handled; the first
    /// invalid entry (all are also queued as events) or page-work failure
    /// is the error.
    pub fn poll_events(&self) -> Result<usize> {
        self.check_alive()?;
        let mut n = 0;
        let mut first: Option<Error> = None;
        for eq in self.eqs.iter() {
            match self.poll_eq(eq) {
                Ok(k) => n += k,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if self.internal_error_seen.swap(false, Ordering::AcqRel) {
            // The health buffer says what happened (and whether it is fatal).
            self.probe_health()?;
        }
        if let Err(e) = self.service_pages() {
            first.get_or_insert(e);
        }
        match first {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// The completion EQs, for CREATE_CQ's `c_eqn`.
    pub fn comp_eqns(&self) -> impl Iterator<Item = Eqn> + '_ {
        self.eqs.comp.iter().map(|e| Eqn(e.eqn))
    }

    /// The command EQ and the asynchronous EQ.
    pub fn control_eqns(&self) -> (Option<Eqn>, Option<Eqn>) {
        (
            self.eqs.cmd.as_ref().map(|e| Eqn(e.eqn)),
            self.eqs.async_eq.as_ref().map(|e| Eqn(e.eqn)),
        )
    }

    /// Page requests received and not yet answered (positive: pages to
    /// give; negative: pages to take back).
    pub fn pending_page_requests(&self) -> i64 {
        self.pending_pages.load(Ordering::Acquire)
    }

    /// Polls the asynchronous EQ and answers page requests: called by
    /// command waits that last, so that a command the firmware holds until
    /// it gets pages can finish.
    pub(crate) fn service_while_waiting(&self) {
        if let Some(a) = self.eqs.async_eq.as_ref() {
            let _ = self.poll_eq(a);
        }
        if let Err(e) = self.service_pages() {
            log::warn!("page request during a command wait: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_bit_follows_the_wrap() {
        let mut r = EqRing::new(2);
        // First pass: the device writes owner 0; entries start as 1.
        assert!(!r.is_sw_owned(EQE_OWNER_INIT));
        assert!(r.is_sw_owned(0));
        for _ in 0..4 {
            r.advance();
        }
        assert_eq!(r.index(), 0);
        // Second pass: owner 1 is valid, a stale 0 is not.
        assert!(r.is_sw_owned(1) && !r.is_sw_owned(0));
        assert_eq!(r.ci(), 4);
    }

    #[test]
    fn doorbell_updates_at_least_every_128_or_half_the_ring() {
        let mut big = EqRing::new(10);
        let updates = (0..1024).filter(|_| big.advance()).count();
        assert_eq!(updates, 1024 / 128);
        let mut small = EqRing::new(5);
        let updates = (0..64).filter(|_| small.advance()).count();
        assert_eq!(updates, 64 / 16);
        let mut tiny = EqRing::new(1);
        assert!(tiny.advance() && tiny.advance());
    }
}
