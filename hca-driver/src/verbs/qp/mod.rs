//! Queue pairs: CREATE_QP over verbs-core's queues, posting with the
//! checks libibverbs users expect before anything reaches the device,
//! modify (the IB state machine mapped onto the mlx5 transition
//! commands), query, drain and destroy.

use core::fmt;
use core::time::Duration;

use firmware_cmds::Opcode;
use firmware_cmds::caps::{
    CmdHcaCap, RoceCap, TIMESTAMP_FORMAT_CAP_FREE_RUNNING, default_ts_format,
};
use firmware_cmds::qp::{
    Ads, CreateQpIn, Init2initQpIn, Init2rtrQpIn, QP_PM_MIGRATED, QP_ST_RC, QP_ST_UC, QP_ST_UD,
    Qp2errIn, Qp2rstIn, Qpc, QueryQpIn, QueryQpOut, RQ_TYPE_NON_ZERO_RQ, RQ_TYPE_SRQ_RQ,
    RQ_TYPE_ZERO_LEN_RQ, Rst2initQpIn, Rtr2rtsQpIn, Rts2rtsQpIn, Sqerr2rtsQpIn,
};
use platform::{DmaRegion, Platform};
use verbs_core::{
    BfConfig, Payload, QpCaps, QpConfig, QpGeometry, QpType, RecvWr, SendFlags, SendOp, SendWr,
    Sge, WcOpcode, WorkCompletion,
};

use crate::deadline::Deadline;
use crate::error::{Error, Result, Wait};
use crate::events::QueueId;
use crate::fw::{QpObj, UarObj};
use crate::hca::DmaUse;
use crate::pas::PAS_PAGE_SIZE;
use crate::types::Qpn;
use crate::verbs::ah::fill_ads;
use crate::verbs::context::{Context, FwObj};
use crate::verbs::cq::Cq;
use crate::verbs::modify::{
    Command, QpAttr, QpAttrMask, QpState, attr_from_qpc, command, log2_ceil, optpar_of,
    qp_type_name, set_access, transition_masks,
};
use crate::verbs::pd::{AccessFlags, Pd};
use crate::verbs::queue::{create_on_region, destroy_and_free, release_after_destroy, service};
use crate::verbs::share::{DefaultShare, Handle, Share};
use crate::verbs::srq::Srq;

mod create;
mod mcast;
mod pins;
mod post;
mod raw;
mod state;

pub use create::QpInitAttr;
pub use pins::MAX_PINNED_RECEIVERS;
pub(crate) use pins::ReceiverPins;
pub use post::SendBatch;
pub use raw::{ETH_L2_INLINE_HEADER_SIZE, QpCreateFlags};

/// `qpc.log_ack_req_freq` of every QP transition: the requester asks for an
/// ACK at least every 2^8 packets, Linux's `MLX5_IB_ACK_REQ_FREQ`.
const LOG_ACK_REQ_FREQ: u8 = 8;

/// `qpc.mtu` Linux gives UD QPs (4096 bytes).
const UD_MTU: u8 = firmware_cmds::qp::IB_MTU_4096;
/// `qpc.log_msg_max` Linux gives UD QPs (4096 bytes).
const UD_LOG_MSG_MAX: u8 = 12;
/// The `wr_id` of the work requests [`Qp::drain`] posts.
pub const DRAIN_WR_ID: u64 = u64::MAX;

/// A QP's capabilities (`struct ibv_qp_cap`): asked for at creation,
/// reported back as the queues were sized (rdma-core's rules).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests (0 with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Inline bytes per send work request.
    pub max_inline_data: u32,
}

impl QpCap {
    /// All zero.
    pub const fn new() -> Self {
        Self {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        }
    }
}

/// How work requests are checked against the QP's PD before posting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SgeCheck {
    /// Every SGE's lkey is a memory region of the PD (a per-PD table, with
    /// the last key cached), the range lies inside it, and the region
    /// allows local write where the device writes (receives, RDMA READ
    /// and atomic results).
    #[default]
    Full,
    /// No key checks (the device checks and completes a bad SGE with a
    /// local protection error): for measuring, and for seeing what the
    /// device does with a bad key. The device's reserved lkey is still
    /// refused ([`WrError::ReservedLkey`]): the device checks nothing for
    /// it, so it would let a work request aim DMA at any address. Creating
    /// a QP or SRQ with `Off` asks the device for that key
    /// (QUERY_SPECIAL_CONTEXTS) once per context.
    Off,
}

/// Why a work request was refused before it reached the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrError {
    /// The data path refused it: queue full, too many SGEs, inline data
    /// too long, an operation the QP type does not have, a missing UD
    /// destination, a misaligned atomic...
    DataPath(verbs_core::Error),
    /// An SGE names an lkey that is no memory region of the QP's PD.
    UnknownLkey {
        /// Index of the SGE.
        sge: usize,
        /// The lkey.
        lkey: u32,
    },
    /// An SGE's range is outside its memory region.
    OutOfRange {
        /// Index of the SGE.
        sge: usize,
        /// Its address.
        addr: u64,
        /// Its length.
        length: u32,
        /// The lkey.
        lkey: u32,
    },
    /// The memory region lacks an access right the operation needs.
    Access {
        /// Index of the SGE.
        sge: usize,
        /// The lkey.
        lkey: u32,
        /// What is missing.
        needs: AccessFlags,
    },
    /// An SGE names the device's reserved lkey (QUERY_SPECIAL_CONTEXTS
    /// `resd_lkey`: physical addresses, no PD, no range), which a QP
    /// that leaves key checks to the device ([`SgeCheck::Off`]) still
    /// refuses: with it the device's DMA could reach any address.
    ReservedLkey {
        /// Index of the SGE.
        sge: usize,
        /// The lkey.
        lkey: u32,
    },
    /// The queue does not take work requests in the QP's state.
    WrongState {
        /// "send queue" or "receive queue".
        queue: &'static str,
        /// The state.
        state: QpState,
    },
}

impl fmt::Display for WrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WrError::DataPath(e) => write!(f, "{e}"),
            WrError::UnknownLkey { sge, lkey } => {
                write!(
                    f,
                    "SGE {sge}: lkey {lkey:#x} is no memory region of the QP's PD"
                )
            }
            WrError::OutOfRange {
                sge,
                addr,
                length,
                lkey,
            } => write!(
                f,
                "SGE {sge}: {length} bytes at {addr:#x} are outside the memory region of lkey {lkey:#x}"
            ),
            WrError::Access { sge, lkey, needs } => write!(
                f,
                "SGE {sge}: the memory region of lkey {lkey:#x} lacks {needs}"
            ),
            WrError::ReservedLkey { sge, lkey } => write!(
                f,
                "SGE {sge}: lkey {lkey:#x} is the device's reserved lkey (physical addresses), \
                 refused even without key checks"
            ),
            WrError::WrongState { queue, state } => {
                write!(f, "the {queue} takes no work requests in state {state}")
            }
        }
    }
}

/// The last memory region an SGE check found, valid for one generation of
/// the PD's key table. The fast path is one compare of `tag` (generation
/// and lkey) and the precomputed bounds; anything else (a miss, an SGE
/// outside the cached region, a missing right) goes to the full lookup,
/// which names the error.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyCache {
    /// `generation << 32 | lkey` of the cached region.
    tag: u64,
    /// The region's first byte.
    start: u64,
    /// The region's length (`start + len` cannot overflow: it was
    /// registered). An empty cache has `start = u64::MAX` and `len = 0`,
    /// which no SGE of a nonzero length fits.
    len: u64,
    /// The region's access rights.
    access: AccessFlags,
}

impl Default for KeyCache {
    fn default() -> Self {
        Self {
            tag: 0,
            start: u64::MAX,
            len: 0,
            access: AccessFlags::NONE,
        }
    }
}

impl KeyCache {
    #[inline(always)]
    fn tag(generation: u32, lkey: u32) -> u64 {
        u64::from(generation) << 32 | u64::from(lkey)
    }

    /// Whether the cached region is `s.lkey`'s in `generation`, holds the
    /// SGE and has `needs`.
    #[inline(always)]
    pub(super) fn hit(&self, generation: u32, s: Sge, needs: AccessFlags) -> bool {
        // `off` wraps for an address below the region; then either it
        // stays above `len` or adding the length carries (one add, tested
        // for the carry, and one compare).
        let off = s.addr.wrapping_sub(self.start);
        self.tag == Self::tag(generation, s.lkey)
            && off
                .checked_add(u64::from(s.length))
                .is_some_and(|end| end <= self.len)
            && self.access.contains(needs)
    }
}

/// Checks one SGE of a nonzero length against the PD's key table: the
/// cached region first (one tag compare and the bounds), then the table.
#[inline(always)]
pub(crate) fn check_sge<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    cache: &mut KeyCache,
    i: usize,
    s: &Sge,
    needs: AccessFlags,
) -> core::result::Result<(), WrError> {
    if cache.hit(pd.generation(), *s, needs) {
        Ok(())
    } else {
        check_sge_slow(pd, cache, i, s, needs)
    }
}

/// [`check_sge`] past the cache: looks the key up in the PD's table
/// (caching what it finds) and names what is wrong.
#[cold]
#[inline(never)]
fn check_sge_slow<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    cache: &mut KeyCache,
    i: usize,
    s: &Sge,
    needs: AccessFlags,
) -> core::result::Result<(), WrError> {
    let generation = pd.generation();
    let e = pd.lookup(s.lkey).ok_or(WrError::UnknownLkey {
        sge: i,
        lkey: s.lkey,
    })?;
    *cache = KeyCache {
        tag: KeyCache::tag(generation, e.lkey),
        start: e.start,
        len: e.len,
        access: e.access,
    };
    if !e.covers(s.addr, s.length) {
        return Err(WrError::OutOfRange {
            sge: i,
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        });
    }
    if !e.access.contains(needs) {
        return Err(WrError::Access {
            sge: i,
            lkey: s.lkey,
            needs,
        });
    }
    Ok(())
}

/// The access the local SGEs of an operation need.
#[inline]
pub(super) fn local_needs(op: &SendOp) -> AccessFlags {
    match op {
        SendOp::RdmaRead { .. } | SendOp::AtomicCmpSwp { .. } | SendOp::AtomicFetchAdd { .. } => {
            AccessFlags::LOCAL_WRITE
        }
        _ => AccessFlags::NONE,
    }
}

/// Checks the SGE of a one-SGE work request (an empty one names no
/// memory) when `check` asks for it.
///
/// The cached region is tried first whatever `check` and the length say:
/// an SGE it holds passes either way, and only a miss looks at them (an
/// empty SGE or [`SgeCheck::Off`] then passes, anything else goes to the
/// PD's table), which keeps the posting path to one tag compare and the
/// bounds.
#[inline(always)]
fn check_single_sge<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    cache: &mut KeyCache,
    check: SgeCheck,
    sge: Sge,
    needs: AccessFlags,
) -> core::result::Result<(), WrError> {
    if cache.hit(pd.generation(), sge, needs) {
        Ok(())
    } else {
        check_single_slow(pd, cache, check, sge, needs)
    }
}

/// [`check_single_sge`] past the cache.
#[cold]
#[inline(never)]
fn check_single_slow<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    cache: &mut KeyCache,
    check: SgeCheck,
    sge: Sge,
    needs: AccessFlags,
) -> core::result::Result<(), WrError> {
    match check {
        _ if sge.length == 0 => Ok(()),
        SgeCheck::Full => check_sge_slow(pd, cache, 0, &sge, needs),
        SgeCheck::Off => not_reserved(pd, 0, &sge),
    }
}

/// The one check of [`SgeCheck::Off`]: SGE `i` does not name memory with
/// the device's reserved lkey. (The key is known: creating the QP or SRQ
/// asked for it. Were the device to fail the question now, every SGE is
/// refused.)
#[cold]
#[inline(never)]
fn not_reserved<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    i: usize,
    s: &Sge,
) -> core::result::Result<(), WrError> {
    match pd.context().reserved_lkey() {
        _ if s.length == 0 => Ok(()),
        Ok(reserved) if reserved != s.lkey => Ok(()),
        _ => Err(WrError::ReservedLkey {
            sge: i,
            lkey: s.lkey,
        }),
    }
}

/// Checks a send work request's SGEs.
#[inline]
fn check_send_sges<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    cache: &mut KeyCache,
    check: SgeCheck,
    wr: &SendWr<'_>,
) -> core::result::Result<(), WrError> {
    if check == SgeCheck::Full {
        if let Payload::Sgl(sgl) = wr.payload {
            let needs = local_needs(&wr.op);
            for (i, s) in sgl.iter().enumerate() {
                if s.length != 0 {
                    check_sge(pd, cache, i, s, needs)?;
                }
            }
        }
        Ok(())
    } else {
        check_send_off(pd, wr)
    }
}

/// [`check_send_sges`] of [`SgeCheck::Off`], out of the posting paths:
/// [`not_reserved`] for each SGE.
#[cold]
#[inline(never)]
fn check_send_off<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    wr: &SendWr<'_>,
) -> core::result::Result<(), WrError> {
    if let Payload::Sgl(sgl) = wr.payload {
        for (i, s) in sgl.iter().enumerate() {
            not_reserved(pd, i, s)?;
        }
    }
    Ok(())
}

/// Checks the SGEs of receive work requests (the device writes them: local
/// write) when `check` asks for it: how many of `wrs` may be posted, and
/// the error naming the first that may not (`Ok` when all may). The ones
/// before a refused request are posted, as libibverbs does.
pub(crate) fn check_recv_list<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    cache: &mut KeyCache,
    check: SgeCheck,
    wrs: &[RecvWr<'_>],
) -> (usize, Result<()>) {
    if check == SgeCheck::Off {
        return check_recv_off(pd, wrs);
    }
    for (index, wr) in wrs.iter().enumerate() {
        for (k, s) in wr.sgl.iter().enumerate() {
            if s.length == 0 {
                continue;
            }
            if let Err(reason) = check_sge(pd, cache, k, s, AccessFlags::LOCAL_WRITE) {
                return (index, Err(Error::InvalidWorkRequest { index, reason }));
            }
        }
    }
    (wrs.len(), Ok(()))
}

/// [`check_recv_list`] of [`SgeCheck::Off`], out of the posting paths:
/// [`not_reserved`] for each SGE.
#[cold]
#[inline(never)]
fn check_recv_off<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    wrs: &[RecvWr<'_>],
) -> (usize, Result<()>) {
    for (index, wr) in wrs.iter().enumerate() {
        for (k, s) in wr.sgl.iter().enumerate() {
            if let Err(reason) = not_reserved(pd, k, s) {
                return (index, Err(Error::InvalidWorkRequest { index, reason }));
            }
        }
    }
    (wrs.len(), Ok(()))
}

pub(crate) fn rejected(index: usize, e: verbs_core::Error) -> Error {
    Error::InvalidWorkRequest {
        index,
        reason: WrError::DataPath(e),
    }
}

/// A queue pair (`ibv_qp`): RC, UC or UD. Holds handles of its PD, CQs
/// and SRQ, so they live while it does; destroyed when dropped. Posting
/// takes `&mut self` (one posting thread per QP, which may be another
/// thread than its CQs' poller); completions come from the CQs.
pub struct Qp<P: Platform + 'static, S: Share = DefaultShare> {
    pd: S::Ref<Pd<P, S>>,
    send_cq: S::Ref<Cq<P, S>>,
    recv_cq: S::Ref<Cq<P, S>>,
    srq: Option<S::Ref<Srq<P, S>>>,
    obj: Option<FwObj<P, S, QpObj>>,
    /// A raw packet QP's firmware objects (it has no `obj`).
    raw: Option<raw::RawParts<P, S>>,
    /// The user index of the receive queue's completions: `uidx` but for
    /// a raw packet QP with both queues.
    recv_uidx: u32,
    own_uar: Option<FwObj<P, S, UarObj>>,
    dp: Option<verbs_core::Qp<P::Mmio>>,
    orphan: Option<DmaRegion>,
    cfg: QpConfig,
    bf: BfConfig,
    qp_type: QpType,
    qpn: Qpn,
    uidx: u32,
    state: QpState,
    port: u8,
    pkey_index: u16,
    dest_qpn: u32,
    cap: QpCap,
    sge_check: SgeCheck,
    cache: KeyCache,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Qp<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} QP {:#x} ({})",
            qp_type_name(self.qp_type),
            self.qpn.0,
            self.state
        )
    }
}

impl<P: Platform + 'static, S: Share> Qp<P, S> {
    /// The QP number.
    pub fn number(&self) -> Qpn {
        self.qpn
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The state as the driver last set or saw it (the device moves a QP
    /// to ERR or SQE on its own; [`query`](Self::query) asks it).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The capabilities the QP got.
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The port set by the last transition with [`QpAttrMask::PORT`].
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The user index its CQEs carry (`qpc.user_index`).
    pub fn user_index(&self) -> u32 {
        self.uidx
    }

    /// The PD's handle.
    pub fn pd(&self) -> &S::Ref<Pd<P, S>> {
        &self.pd
    }

    /// The send CQ's handle.
    pub fn send_cq(&self) -> &S::Ref<Cq<P, S>> {
        &self.send_cq
    }

    /// The receive CQ's handle.
    pub fn recv_cq(&self) -> &S::Ref<Cq<P, S>> {
        &self.recv_cq
    }

    /// The SRQ's handle, if it receives through one.
    pub fn srq(&self) -> Option<&S::Ref<Srq<P, S>>> {
        self.srq.as_ref()
    }

    fn dp(&mut self) -> core::result::Result<&mut verbs_core::Qp<P::Mmio>, WrError> {
        data_path(&mut self.dp)
    }

    fn same_cq(&self) -> bool {
        core::ptr::eq::<Cq<P, S>>(&*self.send_cq, &*self.recv_cq)
    }

    /// Registers the completion handles with the CQ(s).
    fn attach(&mut self) -> Result<()> {
        if self.raw.is_some() {
            return self.attach_raw();
        }
        let Some(dp) = self.dp.as_ref() else {
            return Ok(());
        };
        let has_sq = self.cfg.geometry.sq.is_some();
        let has_rq = self.cfg.geometry.rq.is_some();
        let srq = self.srq.as_ref().map(|s| s.completions());
        let has_recv = has_rq || srq.is_some();
        if self.same_cq() {
            if has_sq || has_recv {
                let h = dp
                    .completions(has_sq, has_rq, srq)
                    .map_err(Error::DataPath)?;
                self.send_cq.attach(self.uidx, h)?;
            }
        } else {
            if has_sq {
                let h = dp.completions(true, false, None).map_err(Error::DataPath)?;
                self.send_cq.attach(self.uidx, h)?;
            }
            if has_recv {
                let h = dp
                    .completions(false, has_rq, srq)
                    .map_err(Error::DataPath)?;
                self.recv_cq.attach(self.uidx, h)?;
            }
        }
        Ok(())
    }

    /// Once the QP produces no more completions (after 2RST or
    /// DESTROY_QP): removes its CQEs not yet polled from its receive and
    /// send CQs (both, when they differ), the SRQ WQEs of its receive CQEs
    /// going back to the SRQ, as rdma-core's `mlx5_modify_qp` and
    /// `mlx5_destroy_qp` do; then unregisters its completion handles.
    fn clean_and_detach(&self) {
        let cqs: [Option<(&Cq<P, S>, u32)>; 2] = [
            Some((&self.recv_cq, self.recv_uidx)),
            (!self.same_cq() || self.recv_uidx != self.uidx).then_some((&self.send_cq, self.uidx)),
        ];
        for (cq, uidx) in cqs.into_iter().flatten() {
            if let Some((h, c)) = cq.clean_and_detach(uidx) {
                if c.removed > 0 {
                    log::debug!(
                        "QP {:#x}: {} completions not polled removed from {cq:?} ({} SRQ WQEs returned)",
                        self.qpn.0,
                        c.removed,
                        c.srq_freed
                    );
                }
                if c.srq_skipped > 0 {
                    log::warn!(
                        "QP {:#x}: {} receive completions removed from {cq:?} gave no SRQ WQE back (no posted WQE of that counter, or the SRQ's free list busy)",
                        self.qpn.0,
                        c.srq_skipped
                    );
                }
                drop(h);
            }
        }
    }

    // ---- teardown ---------------------------------------------------------

    /// Destroys the QP (DESTROY_QP), removes its completions not yet
    /// polled from its CQs (as [`modify`](Self::modify) to RESET does),
    /// unregisters it from them and frees its memory. The QP then drops
    /// its handles of the PD, CQs and SRQ.
    ///
    /// A raw packet QP that flow rules made by
    /// [`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule)
    /// still name goes as far as they allow: its RQ is stopped (RST), its
    /// SQ and TIS are destroyed, its completions leave its CQs; its TIR,
    /// RQ and transport domain, its memory and handles of its receive CQ
    /// and PD stay with its context until the last of those rules is
    /// deleted. That is not an error.
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let ctx: &Context<P, S> = self.pd.context();
        // A raw packet QP whose TIR flow rules still name keeps its
        // receive side for them (see `pins`).
        let mut retired = None;
        let r = match (self.obj.take(), self.raw.take()) {
            (Some(obj), _) => obj.destroy(),
            (None, Some(mut raw)) => match raw.tir_number() {
                Some(t) if ctx.receiver_pins().begin_retire(t) => {
                    let (r, stopped, objs) = raw.retire_send_side();
                    retired = Some((t, stopped, objs));
                    r
                }
                _ => raw.destroy(),
            },
            (None, None) => return Ok(()),
        };
        let hca = ctx.hca();
        self.clean_and_detach();
        let mut regions: [Option<DmaRegion>; 2] = [self.orphan.take(), None];
        if let Some(dp) = self.dp.take() {
            match dp.into_parts() {
                Ok(parts) => regions[1] = Some(parts.region),
                Err(dp) => {
                    log::error!(
                        "QP {:#x}: completion handles alive; memory leaked",
                        self.qpn.0
                    );
                    core::mem::forget(dp);
                }
            }
        }
        // A receive queue that did not stop may still complete under its
        // user index: then the index is not given out again.
        let mut free_recv_uidx = true;
        let mut rr = Ok(());
        match retired {
            Some((tirn, stopped, objs)) => {
                free_recv_uidx = stopped;
                let keep = pins::RetiredRecv {
                    objs,
                    regions,
                    cq: self.recv_cq.clone(),
                    pd: self.pd.clone(),
                };
                if let Some(k) = ctx.receiver_pins().hand_over(tirn, keep) {
                    // The last rule went meanwhile.
                    rr = k.destroy();
                }
            }
            None => {
                for reg in regions.into_iter().flatten() {
                    release_after_destroy(hca, reg, r.is_ok());
                }
            }
        }
        if self.recv_uidx != self.uidx {
            ctx.free_user_index(self.uidx);
            if free_recv_uidx {
                ctx.free_user_index(self.recv_uidx);
            }
        } else if free_recv_uidx {
            ctx.free_user_index(self.uidx);
        }
        let r = r.and(rr);
        let u = match self.own_uar.take() {
            Some(u) if r.is_ok() => u.destroy(),
            Some(u) => {
                // The QP may still exist and ring it: keep the UAR.
                core::mem::forget(u);
                Ok(())
            }
            None => Ok(()),
        };
        r.and(u)
    }
}

/// A QP's data path, which a failed reset can lose.
#[inline]
fn data_path<M: platform::Mmio>(
    dp: &mut Option<verbs_core::Qp<M>>,
) -> core::result::Result<&mut verbs_core::Qp<M>, WrError> {
    dp.as_mut()
        .ok_or(WrError::DataPath(verbs_core::Error::NoSuchQueue(
            "data path (lost in a failed reset)",
        )))
}

impl<P: Platform + 'static, S: Share> Drop for Qp<P, S> {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::error!("destroying QP {:#x}: {e}", self.qpn.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(generation: u32, lkey: u32, start: u64, len: u64, access: AccessFlags) -> KeyCache {
        KeyCache {
            tag: KeyCache::tag(generation, lkey),
            start,
            len,
            access,
        }
    }

    fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    #[test]
    fn an_empty_cache_holds_no_sge() {
        let c = KeyCache::default();
        for addr in [0, 1, 0x1000, u64::MAX - 1, u64::MAX] {
            assert!(!c.hit(0, sge(addr, 1, 0), AccessFlags::NONE), "{addr:#x}");
        }
    }

    #[test]
    fn a_hit_needs_the_key_the_generation_the_bounds_and_the_rights() {
        let c = cached(3, 0x42, 0x1000, 0x100, AccessFlags::LOCAL_WRITE);
        let n = AccessFlags::NONE;
        assert!(c.hit(3, sge(0x1000, 0x100, 0x42), n));
        assert!(c.hit(3, sge(0x10ff, 1, 0x42), n));
        assert!(c.hit(3, sge(0x1080, 0x80, 0x42), AccessFlags::LOCAL_WRITE));
        // Another key, a later generation.
        assert!(!c.hit(3, sge(0x1000, 8, 0x43), n));
        assert!(!c.hit(4, sge(0x1000, 8, 0x42), n));
        // Below the start (the offset wraps), past the end, crossing it.
        assert!(!c.hit(3, sge(0xfff, 1, 0x42), n));
        assert!(!c.hit(3, sge(0, 8, 0x42), n));
        assert!(!c.hit(3, sge(0x1100, 1, 0x42), n));
        assert!(!c.hit(3, sge(0x10ff, 2, 0x42), n));
        assert!(!c.hit(3, sge(0x1000, 0x101, 0x42), n));
        assert!(!c.hit(3, sge(u64::MAX, u32::MAX, 0x42), n));
        // A right the region lacks.
        assert!(!c.hit(3, sge(0x1000, 8, 0x42), AccessFlags::REMOTE_WRITE));
    }

    #[test]
    fn a_region_at_the_top_of_the_address_space_is_bounded() {
        let c = cached(0, 7, u64::MAX - 0xff, 0x100, AccessFlags::NONE);
        assert!(c.hit(0, sge(u64::MAX - 0xff, 0x100, 7), AccessFlags::NONE));
        assert!(c.hit(0, sge(u64::MAX, 1, 7), AccessFlags::NONE));
        assert!(!c.hit(0, sge(u64::MAX, 2, 7), AccessFlags::NONE));
        assert!(!c.hit(0, sge(0, 1, 7), AccessFlags::NONE));
    }
}
