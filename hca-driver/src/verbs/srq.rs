//! Shared receive queues over verbs-core's SRQ: the firmware object, posting,
//! and the limit event (`MLX5_EVENT_TYPE_SRQ_RQ_LIMIT`).
//!
//! As Linux's `srq_cmd.c` does, the firmware object depends on the ISSI in
//! effect: at ISSI 0 an SRQ (CREATE_SRQ, armed with ARM_RQ), at ISSI 1 — what
//! every ConnectX-4 firmware offers — a receive memory pool (CREATE_RMP,
//! armed with MODIFY_RMP of `wq.lwm`). The WQEs, the doorbell record and
//! the events are the same for both.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use firmware_cmds::eq::EVENT_TYPE_SRQ_RQ_LIMIT;
use firmware_cmds::eth::{WQ_TYPE_LINKED_LIST, Wq};
use firmware_cmds::rmp::{CreateRmpIn, ModifyRmpIn, RMPC_STATE_RDY, RmpBitmask, Rmpc};
use firmware_cmds::srq::{ARM_RQ_OP_MOD_SRQ, ArmRqIn, CreateSrqIn, Srqc};
use platform::Platform;
use verbs_core::{RecvWr, SrqCompletions, SrqGeometry, SrqLayout};

use crate::deadline::Deadline;
use crate::error::{Error, Result, Wait};
use crate::events::QueueId;
use crate::fw::SrqObj;
use crate::hca::DmaUse;
use crate::pas::PAS_PAGE_SIZE;
use crate::types::Srqn;
use crate::verbs::context::FwObj;
use crate::verbs::cq::Cq;
use crate::verbs::pd::Pd;
use crate::verbs::qp::{KeyCache, SgeCheck, check_recv_list, rejected};
use crate::verbs::queue::{create_on_region, destroy_and_free, release_after_destroy, service};
use crate::verbs::share::{DefaultShare, Handle, Share};

/// What an SRQ is created with (`struct ibv_srq_init_attr`).
pub struct SrqInitAttr<P: Platform + 'static, S: Share = DefaultShare> {
    /// Outstanding receive work requests.
    pub max_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// Limit event threshold (0: not armed); see [`Srq::arm_limit`].
    pub srq_limit: u32,
    /// A CQ named in the SRQ context (`srqc.cqn`; completions go to each
    /// QP's receive CQ regardless); the SRQ holds it. Linux names a CQ of
    /// its own here; `None` leaves the field 0.
    pub cq: Option<S::Ref<Cq<P, S>>>,
    /// How posted work requests are checked.
    pub sge_check: SgeCheck,
}

impl<P: Platform + 'static, S: Share> Clone for SrqInitAttr<P, S> {
    fn clone(&self) -> Self {
        Self {
            cq: self.cq.clone(),
            ..*self
        }
    }
}

impl<P: Platform + 'static, S: Share> SrqInitAttr<P, S> {
    /// `max_wr` work requests of `max_sge` SGEs, no limit, checked SGEs.
    pub fn new(max_wr: u32, max_sge: u32) -> Self {
        Self {
            max_wr,
            max_sge,
            srq_limit: 0,
            cq: None,
            sge_check: SgeCheck::Full,
        }
    }

    /// Names `cq` in the SRQ context.
    pub fn cq(mut self, cq: &impl Handle<Cq<P, S>, Share = S>) -> Self {
        self.cq = Some(cq.clone().into_ref());
        self
    }
}

/// An SRQ's attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqAttr {
    /// Work requests it holds (`wqe_cnt - 1`).
    pub max_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// The armed limit (0 when not armed or after the event fired).
    pub srq_limit: u32,
}

struct Checked {
    srq: verbs_core::Srq,
    cache: KeyCache,
}

/// A shared receive queue (`ibv_srq`). QPs using it hold handles of it;
/// posting takes `&self` (a spin lock serializes posters).
pub struct Srq<P: Platform + 'static, S: Share = DefaultShare> {
    pd: S::Ref<Pd<P, S>>,
    obj: Option<FwObj<P, S, SrqObj>>,
    dp: spin::Mutex<Option<Checked>>,
    srqn: Srqn,
    attr: spin::Mutex<SrqAttr>,
    sge_check: SgeCheck,
    /// Event types taken from the router and not yet handed out (bit `n` =
    /// event type `n`).
    events: AtomicU64,
    /// The CQ named in the SRQ context, kept alive while the SRQ is.
    _cq: Option<S::Ref<Cq<P, S>>>,
    /// The register window whose cache-maintenance hooks the posts call
    /// (`cache-maintenance` builds only).
    #[cfg(feature = "cache-maintenance")]
    mmio: P::Mmio,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Srq<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.srqn)
    }
}

impl<P: Platform + 'static, S: Share> Srq<P, S> {
    /// Creates a shared receive queue (`ibv_create_srq`) in the PD behind
    /// `pd`; arms the limit when `srq_limit` is not 0.
    pub fn create(pd: &impl Handle<Pd<P, S>, Share = S>, init: &SrqInitAttr<P, S>) -> Result<Self> {
        let pd: S::Ref<Pd<P, S>> = pd.clone().into_ref();
        let ctx = pd.context();
        let hca = ctx.hca();
        let dev = ctx.query_device();
        if init.sge_check == SgeCheck::Off {
            // Known before the first post, which refuses it.
            ctx.reserved_lkey()?;
        }
        if init.max_wr == 0 || init.max_wr > dev.max_srq_wr {
            return Err(Error::InvalidAttribute {
                attr: "max_wr",
                value: u64::from(init.max_wr),
                reason: "an SRQ holds 1 ..= max_srq_wr work requests",
            });
        }
        if init.max_sge > dev.max_srq_sge {
            return Err(Error::InvalidAttribute {
                attr: "max_sge",
                value: u64::from(init.max_sge),
                reason: "above the device's max_srq_sge",
            });
        }
        let g = SrqGeometry::new(init.max_wr, init.max_sge.max(1), ctx.limits())
            .map_err(Error::DataPath)?;
        if init.srq_limit > g.max_wr {
            return Err(Error::InvalidAttribute {
                attr: "srq_limit",
                value: u64::from(init.srq_limit),
                reason: "above the SRQ's max_wr",
            });
        }
        let layout = SrqLayout::new(&g);
        // Mapped before anything is made, so a failure leaves nothing.
        #[cfg(feature = "cache-maintenance")]
        let mmio = ctx.map_bar()?;
        let region = hca.dma_alloc(
            layout.total_bytes,
            PAS_PAGE_SIZE,
            DmaUse::Queues,
            "allocating an SRQ",
        )?;
        let log_size = g.wqe_cnt.trailing_zeros() as u8;
        let dbr_addr = region.iova() + layout.dbr_offset as u64;
        let (obj, region) = if hca.uses_rmp() {
            // Linux create_rmp_cmd: state RDY, the buffer as a linked-list
            // work queue (`wq_type` 0) with its stride in bytes.
            let input = (|| -> Result<CreateRmpIn> {
                let wq = Wq::new()
                    .with(Wq::wq_type, WQ_TYPE_LINKED_LIST)?
                    .with(Wq::pd, pd.number().0)?
                    .with(Wq::dbr_addr, dbr_addr)?
                    .with(Wq::log_wq_stride, g.wqe_shift)?
                    .with(Wq::log_wq_pg_sz, 0)?
                    .with(Wq::log_wq_sz, log_size)?;
                let rmpc = Rmpc::new()
                    .with(Rmpc::state, RMPC_STATE_RDY)?
                    .with(Rmpc::wq, wq)?;
                Ok(CreateRmpIn::new().with(CreateRmpIn::ctx, rmpc)?)
            })();
            let (o, r) =
                create_on_region(hca, region, layout.ring_bytes, input, |p| hca.create_rmp(p))?;
            (o.rehome(hca.clone()), r)
        } else {
            let input = (|| -> Result<CreateSrqIn> {
                let srqc = Srqc::new()
                    .with(Srqc::log_srq_size, log_size)?
                    .with(Srqc::log_rq_stride, g.wqe_shift - 4)?
                    .with(Srqc::pd, pd.number().0)?
                    .with(Srqc::cqn, init.cq.as_ref().map_or(0, |c| c.number().0))?
                    .with(Srqc::log_page_size, 0)?
                    .with(Srqc::dbr_addr, dbr_addr)?;
                Ok(CreateSrqIn::new().with(CreateSrqIn::srq_context_entry, srqc)?)
            })();
            let (o, r) =
                create_on_region(hca, region, layout.ring_bytes, input, |p| hca.create_srq(p))?;
            (o.rehome(hca.clone()), r)
        };
        let srqn = obj.number();
        // The device reads nothing before the doorbell record counts a
        // posted WQE: the free list is linked now.
        let srq = match verbs_core::Srq::new(region, srqn.0, g) {
            Ok(s) => s,
            Err((e, region)) => return Err(destroy_and_free(hca, obj, region, Error::DataPath(e))),
        };
        // Without coherent DMA: the linked ring and the doorbell record
        // reach memory before the first post can make them the device's.
        #[cfg(feature = "cache-maintenance")]
        srq.clean_initialised(&mmio);
        let s = Srq {
            obj: Some(obj),
            dp: spin::Mutex::new(Some(Checked {
                srq,
                cache: KeyCache::default(),
            })),
            srqn,
            attr: spin::Mutex::new(SrqAttr {
                max_wr: g.max_wr,
                max_sge: g.max_gs,
                srq_limit: 0,
            }),
            sge_check: init.sge_check,
            events: AtomicU64::new(0),
            pd,
            _cq: init.cq.clone(),
            #[cfg(feature = "cache-maintenance")]
            mmio,
        };
        if init.srq_limit > 0 {
            s.arm_limit(init.srq_limit)?;
        }
        Ok(s)
    }

    /// The SRQ number.
    pub fn number(&self) -> Srqn {
        self.srqn
    }

    /// The PD's handle.
    pub fn pd(&self) -> &S::Ref<Pd<P, S>> {
        &self.pd
    }

    /// The attributes (`ibv_query_srq`, from the driver's view: the limit is
    /// 0 once its event was taken).
    pub fn attr(&self) -> SrqAttr {
        *self.attr.lock()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Checked) -> R) -> R {
        let mut g = self.dp.lock();
        f(g.as_mut()
            .expect("the SRQ's data path lives until it is destroyed"))
    }

    /// Posts one receive work request (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_list(core::slice::from_ref(wr))
    }

    /// Posts a list with one doorbell-record update; on a rejected request
    /// the ones before it are posted and the error names its index.
    pub fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let pd: &Pd<P, S> = &self.pd;
        let check = self.sge_check;
        self.with(|c| {
            let (n, refused) = check_recv_list(pd, &mut c.cache, check, wrs);
            #[cfg(not(feature = "cache-maintenance"))]
            let posted = c.srq.post_recv_list(&wrs[..n]);
            #[cfg(feature = "cache-maintenance")]
            let posted = c.srq.post_recv_list_synced(&wrs[..n], &self.mmio);
            posted.map_err(|e| rejected(e.posted, e.error))?;
            refused
        })
    }

    /// Work requests posted and not completed.
    pub fn outstanding(&self) -> u32 {
        self.with(|c| c.srq.outstanding())
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`; ARM_RQ
    /// at ISSI 0, MODIFY_RMP of `wq.lwm` at ISSI 1 as Linux's `arm_rmp_cmd`):
    /// once fewer than `limit` work requests remain, the device raises
    /// `SRQ_RQ_LIMIT` once.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let max = self.attr.lock().max_wr;
        let lwm =
            u16::try_from(limit)
                .ok()
                .filter(|_| limit <= max)
                .ok_or(Error::InvalidAttribute {
                    attr: "srq_limit",
                    value: u64::from(limit),
                    reason: "above the SRQ's max_wr",
                })?;
        // Events of an earlier arming are stale now.
        let _ = self.take_limit_event();
        let hca = self.pd.context().hca();
        if hca.uses_rmp() {
            let ctx = Rmpc::new()
                .with(Rmpc::state, RMPC_STATE_RDY)?
                .with(Rmpc::wq, Wq::new().with(Wq::lwm, lwm)?)?;
            let m = ModifyRmpIn::new()
                .with(ModifyRmpIn::rmp_state, RMPC_STATE_RDY)?
                .with(ModifyRmpIn::rmpn, self.srqn.0)?
                .with(
                    ModifyRmpIn::bitmask,
                    RmpBitmask::new().with(RmpBitmask::lwm, true)?,
                )?
                .with(ModifyRmpIn::ctx, ctx)?;
            hca.exec(&m)?;
        } else {
            let a = ArmRqIn::new()
                .with(ArmRqIn::op_mod, ARM_RQ_OP_MOD_SRQ)?
                .with(ArmRqIn::srq_number, self.srqn.0)?
                .with(ArmRqIn::lwm, lwm)?;
            hca.exec(&a)?;
        }
        self.attr.lock().srq_limit = limit;
        Ok(())
    }

    /// Moves the event types the router holds for the SRQ into its own set
    /// and returns the set.
    fn collect_events(&self) -> u64 {
        let bits = self
            .pd
            .context()
            .hca()
            .events()
            .take_queue_events(QueueId::Srq(self.srqn))
            .unwrap_or(0);
        self.events.fetch_or(bits, Ordering::AcqRel) | bits
    }

    /// Whether the limit event arrived (without waiting; the event is
    /// consumed and the limit disarmed, as the device disarms it). Other
    /// events of the SRQ stay for [`take_events`](Self::take_events).
    pub fn take_limit_event(&self) -> bool {
        const LIMIT: u64 = 1 << EVENT_TYPE_SRQ_RQ_LIMIT;
        let hit = self.collect_events() & LIMIT != 0;
        if hit {
            self.events.fetch_and(!LIMIT, Ordering::AcqRel);
            self.attr.lock().srq_limit = 0;
        }
        hit
    }

    /// Takes the asynchronous events that arrived for the SRQ (bit `n` =
    /// `EVENT_TYPE_*` `n` of [`firmware_cmds::eq`]: SRQ catastrophic error
    /// 0x12, SRQ limit reached 0x14), servicing the HCA first
    /// (`IBV_EVENT_SRQ_ERR`, `IBV_EVENT_SRQ_LIMIT_REACHED`). A limit event
    /// taken here disarms the limit, as [`take_limit_event`](Self::take_limit_event)
    /// does. The events also went to [`EventRouter::pop`](crate::EventRouter::pop).
    pub fn take_events(&self) -> Result<u64> {
        service(self.pd.context().hca())?;
        self.collect_events();
        let bits = self.events.swap(0, Ordering::AcqRel);
        if bits & (1 << EVENT_TYPE_SRQ_RQ_LIMIT) != 0 {
            self.attr.lock().srq_limit = 0;
        }
        Ok(bits)
    }

    /// Waits for the limit event, servicing the HCA. On interrupts
    /// ([`WaitMode`](crate::WaitMode)) it sleeps on the asynchronous EQ's
    /// MSI-X vector between two looks; otherwise it polls.
    pub fn wait_limit_event(&self, timeout: Duration) -> Result<()> {
        let hca = self.pd.context().hca();
        let p = hca.platform();
        let deadline = Deadline::start(p, timeout);
        let vector = hca.control_eqns().1.and_then(|e| hca.eq_vector(e));
        loop {
            let seen = vector.and_then(|v| hca.interrupt_seen(v).map(|s| (v, s)));
            service(hca)?;
            if self.take_limit_event() {
                return Ok(());
            }
            deadline.check(
                p,
                Wait::QueueEvent {
                    queue: QueueId::Srq(self.srqn),
                    event_type: EVENT_TYPE_SRQ_RQ_LIMIT,
                },
            )?;
            match seen {
                Some((v, s)) => {
                    let slice = deadline.remaining(p).min(hca.config().timeouts.health_poll);
                    hca.wait_interrupt(v, s, slice)?;
                }
                None => {
                    hca.note_poll();
                    p.relax();
                }
            }
        }
    }

    /// A completion handle for a QP using the SRQ.
    pub(crate) fn completions(&self) -> SrqCompletions {
        self.with(|c| c.srq.completions())
    }

    /// Destroys the SRQ behind its last handle; while QPs (or other
    /// holders) still hold handles of it, drops this handle and returns
    /// [`Error::InUse`] (it is destroyed when the last handle drops).
    pub fn try_destroy(this: impl Handle<Self, Share = S>) -> Result<()> {
        crate::verbs::share::destroy_last::<S, Self>(this.into_ref(), "the SRQ", Self::destroy)
    }

    /// Destroys the SRQ (DESTROY_SRQ, or DESTROY_RMP at ISSI 1) and frees
    /// its memory.
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(obj) = self.obj.take() else {
            return Ok(());
        };
        let hca = self.pd.context().hca();
        let r = obj.destroy();
        if let Some(c) = self.dp.lock().take() {
            match c.srq.into_parts() {
                Ok(region) => release_after_destroy(hca, region, r.is_ok()),
                Err(_srq) => {
                    // A QP's handle still points into it: dropping the SRQ
                    // without its region leaks the memory (a region has no
                    // destructor), which is what must happen.
                    log::error!(
                        "{}: completion handles alive at destroy; its memory is leaked",
                        self.srqn
                    );
                }
            }
        }
        r
    }
}

impl<P: Platform + 'static, S: Share> Drop for Srq<P, S> {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::error!("destroying {}: {e}", self.srqn);
        }
    }
}
