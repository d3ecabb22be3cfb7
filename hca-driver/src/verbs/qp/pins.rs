//! The receive sides of raw packet QPs that flow rules pin.
//!
//! A flow table entry forwarding to a raw packet QP names the QP's direct
//! TIR, and the firmware refuses to destroy a TIR an entry names (and the
//! RQ and transport domain under it, and the CQ and PD the RQ names). The
//! rule must not borrow the QP (which stays postable through `&mut`), so
//! the order is kept at run time: a rule made by
//! [`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule) pins
//! the receive side of each QP it names in the QP's [`Context`]
//! ([`ReceiverPins`], a count per TIR). A QP destroyed while pinned
//! retires at once what no rule needs: its RQ is stopped (MODIFY_RQ to
//! RST, so no frame reaches its buffers or its CQ any more), its SQ and
//! TIS are destroyed and its completion handles leave its CQs; the TIR,
//! the RQ, the transport domain and the queue memory ([`RetiredRecv`]),
//! with handles of the receive CQ and the PD the RQ names, go to the
//! context. When the last rule naming the TIR is deleted, they are
//! destroyed in mlx5_ib's order (TIR, RQ, transport domain) and the
//! memory and handles are released. No destroy command is sent that the
//! firmware would refuse, and nothing outlives the last rule.

use platform::{DmaRegion, Platform};

use super::raw::RecvObjs;
use crate::error::{Error, Result};
use crate::types::Tirn;
use crate::verbs::context::Context;
use crate::verbs::cq::Cq;
use crate::verbs::pd::Pd;
use crate::verbs::queue::release_after_destroy;
use crate::verbs::share::Share;

/// The most raw packet QPs of one context whose receive sides flow rules
/// pin at a time (rules made by
/// [`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule); a
/// QP named by several rules counts once).
pub const MAX_PINNED_RECEIVERS: usize = 32;

/// The receive side of a destroyed raw packet QP that flow rules still
/// name, kept until the last of them is deleted.
pub(crate) struct RetiredRecv<P: Platform + 'static, S: Share> {
    pub(crate) objs: RecvObjs<P, S>,
    /// The queue memory (the RQ's ring and doorbell record are in it).
    pub(crate) regions: [Option<DmaRegion>; 2],
    /// The receive CQ the RQ names (DESTROY_CQ is refused while it does).
    pub(crate) cq: S::Ref<Cq<P, S>>,
    /// The PD the RQ names (and the context, through it).
    pub(crate) pd: S::Ref<Pd<P, S>>,
}

impl<P: Platform + 'static, S: Share> RetiredRecv<P, S> {
    /// Destroys the TIR, the RQ and the transport domain, then releases
    /// the memory (retired, not freed, when a destroy failed) and the
    /// handles.
    pub(crate) fn destroy(mut self) -> Result<()> {
        let r = self.objs.destroy();
        let ctx: &Context<P, S> = self.pd.context();
        for reg in self.regions.iter_mut().filter_map(Option::take) {
            release_after_destroy(ctx.hca(), reg, r.is_ok());
        }
        let RetiredRecv { cq, pd, .. } = self;
        drop(cq);
        drop(pd);
        r
    }
}

struct Pin<P: Platform + 'static, S: Share> {
    tirn: Tirn,
    /// Live rules naming the TIR.
    rules: u32,
    /// The QP is being destroyed (its receive side comes to `retired`).
    retiring: bool,
    retired: Option<RetiredRecv<P, S>>,
}

/// The pins of a context's raw packet QP receive sides (see the module
/// documentation).
pub(crate) struct ReceiverPins<P: Platform + 'static, S: Share> {
    pins: spin::Mutex<heapless::Vec<Pin<P, S>, MAX_PINNED_RECEIVERS>>,
}

impl<P: Platform + 'static, S: Share> ReceiverPins<P, S> {
    pub(crate) fn new() -> Self {
        Self {
            pins: spin::Mutex::new(heapless::Vec::new()),
        }
    }

    /// One more rule names `tirn` (the TIR of a live QP).
    pub(crate) fn pin(&self, tirn: Tirn) -> Result<()> {
        let mut v = self.pins.lock();
        if let Some(p) = v.iter_mut().find(|p| p.tirn == tirn) {
            p.rules = p.rules.saturating_add(1);
            return Ok(());
        }
        v.push(Pin {
            tirn,
            rules: 1,
            retiring: false,
            retired: None,
        })
        .map_err(|_| Error::CapacityExceeded {
            what: "the context's raw packet QP receive sides pinned by flow rules",
            capacity: MAX_PINNED_RECEIVERS,
        })
    }

    /// A rule naming `tirn` is gone: the retired receive side to destroy
    /// when it was the last.
    pub(crate) fn unpin(&self, tirn: Tirn) -> Option<RetiredRecv<P, S>> {
        let mut v = self.pins.lock();
        let i = v.iter().position(|p| p.tirn == tirn)?;
        let p = &mut v[i];
        p.rules = p.rules.saturating_sub(1);
        if p.rules > 0 {
            return None;
        }
        if p.retiring && p.retired.is_none() {
            // The QP is between its two steps: it finds no rule left and
            // destroys the receive side itself.
            return None;
        }
        v.swap_remove(i).retired.take()
    }

    /// Whether rules name `tirn`; if so the QP's destroy has begun and its
    /// receive side must come to [`hand_over`](Self::hand_over).
    pub(crate) fn begin_retire(&self, tirn: Tirn) -> bool {
        let mut v = self.pins.lock();
        match v.iter_mut().find(|p| p.tirn == tirn && p.rules > 0) {
            Some(p) => {
                p.retiring = true;
                true
            }
            None => false,
        }
    }

    /// Keeps a retired receive side until the last rule naming it goes;
    /// gives it back when no rule is left (the caller destroys it).
    pub(crate) fn hand_over(&self, tirn: Tirn, r: RetiredRecv<P, S>) -> Option<RetiredRecv<P, S>> {
        let mut v = self.pins.lock();
        match v.iter().position(|p| p.tirn == tirn) {
            Some(i) if v[i].rules > 0 => {
                v[i].retired = Some(r);
                None
            }
            Some(i) => {
                v.swap_remove(i);
                Some(r)
            }
            None => Some(r),
        }
    }

    /// Receive sides pinned (of live and destroyed QPs), and of those the
    /// ones whose QP is destroyed.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let v = self.pins.lock();
        (v.len(), v.iter().filter(|p| p.retired.is_some()).count())
    }
}
