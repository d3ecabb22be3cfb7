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
    Sge, WorkCompletion,
};

use crate::deadline::Deadline;
use crate::error::{Error, Result, Wait};
use crate::events::QueueId;
use crate::hca::DmaUse;
use crate::pas::PAS_PAGE_SIZE;
use crate::resources::Uar;
use crate::types::Qpn;
use crate::verbs::ah::fill_ads;
use crate::verbs::cq::Cq;
use crate::verbs::modify::{
    Command, QpAttr, QpAttrMask, QpState, attr_from_qpc, command, log2_ceil, optpar_of,
    qp_type_name, set_access, transition_masks,
};
use crate::verbs::pd::{AccessFlags, MrEntry, Pd};
use crate::verbs::queue::{create_on_region, destroy_and_free, release_after_destroy, service};
use crate::verbs::srq::Srq;

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
    /// device does with a bad key.
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
            WrError::WrongState { queue, state } => {
                write!(f, "the {queue} takes no work requests in state {state}")
            }
        }
    }
}

/// The last memory region an SGE check found, valid for one generation of
/// the PD's key table.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyCache {
    generation: u32,
    entry: Option<MrEntry>,
}

/// Checks one SGE against the PD's key table.
#[inline]
pub(crate) fn check_sge<P: Platform>(
    pd: &Pd<'_, P>,
    cache: &mut KeyCache,
    i: usize,
    s: &Sge,
    needs: AccessFlags,
) -> core::result::Result<(), WrError> {
    let generation = pd.generation();
    let e = match cache.entry {
        Some(e) if e.lkey == s.lkey && cache.generation == generation => e,
        _ => {
            let e = pd.lookup(s.lkey).ok_or(WrError::UnknownLkey {
                sge: i,
                lkey: s.lkey,
            })?;
            *cache = KeyCache {
                generation,
                entry: Some(e),
            };
            e
        }
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
fn local_needs(op: &SendOp) -> AccessFlags {
    match op {
        SendOp::RdmaRead { .. } | SendOp::AtomicCmpSwp { .. } | SendOp::AtomicFetchAdd { .. } => {
            AccessFlags::LOCAL_WRITE
        }
        _ => AccessFlags::NONE,
    }
}

/// Checks the SGE of a one-SGE work request (an empty one names no
/// memory) when `check` asks for it.
#[inline]
fn check_single_sge<P: Platform>(
    pd: &Pd<'_, P>,
    cache: &mut KeyCache,
    check: SgeCheck,
    sge: &Sge,
    needs: AccessFlags,
) -> core::result::Result<(), WrError> {
    if check == SgeCheck::Full && sge.length != 0 {
        check_sge(pd, cache, 0, sge, needs)
    } else {
        Ok(())
    }
}

/// Checks a send work request's SGEs.
#[inline]
fn check_send_sges<P: Platform>(
    pd: &Pd<'_, P>,
    cache: &mut KeyCache,
    wr: &SendWr<'_>,
) -> core::result::Result<(), WrError> {
    if let Payload::Sgl(sgl) = wr.payload {
        let needs = local_needs(&wr.op);
        for (i, s) in sgl.iter().enumerate() {
            if s.length != 0 {
                check_sge(pd, cache, i, s, needs)?;
            }
        }
    }
    Ok(())
}

/// Checks the SGEs of receive work requests (the device writes them: local
/// write) when `check` asks for it: how many of `wrs` may be posted, and
/// the error naming the first that may not (`Ok` when all may). The ones
/// before a refused request are posted, as libibverbs does.
pub(crate) fn check_recv_list<P: Platform>(
    pd: &Pd<'_, P>,
    cache: &mut KeyCache,
    check: SgeCheck,
    wrs: &[RecvWr<'_>],
) -> (usize, Result<()>) {
    if check == SgeCheck::Full {
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
    }
    (wrs.len(), Ok(()))
}

pub(crate) fn rejected(index: usize, e: verbs_core::Error) -> Error {
    Error::InvalidWorkRequest {
        index,
        reason: WrError::DataPath(e),
    }
}

/// What a QP is created with (`struct ibv_qp_init_attr`).
pub struct QpInitAttr<'a, P: Platform> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// The CQ of send completions.
    pub send_cq: &'a Cq<'a, P>,
    /// The CQ of receive completions (may be `send_cq`).
    pub recv_cq: &'a Cq<'a, P>,
    /// Receive through a shared receive queue (`max_recv_wr` is then 0).
    pub srq: Option<&'a Srq<'a, P>>,
    /// Capabilities asked for.
    pub cap: QpCap,
    /// Every send work request is signaled (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// How posted work requests are checked.
    pub sge_check: SgeCheck,
    /// Give the QP a UAR page of its own and copy single inline sends to
    /// its BlueFlame register; otherwise it rings the context's UAR with
    /// 8-byte doorbells (which QPs can share). The copies are made only
    /// where the platform maps the BAR write-combining
    /// ([`Platform::bar_write_combining`]); through an uncached mapping
    /// (vfio) the QP rings its own UAR's doorbell only.
    pub blueflame: bool,
}

impl<P: Platform> Clone for QpInitAttr<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Platform> Copy for QpInitAttr<'_, P> {}

impl<'a, P: Platform> QpInitAttr<'a, P> {
    /// A QP of `qp_type` on these CQs with room for 16 send and 16 receive
    /// work requests of one SGE, checked SGEs, no inline data.
    pub fn new(qp_type: QpType, send_cq: &'a Cq<'a, P>, recv_cq: &'a Cq<'a, P>) -> Self {
        Self {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            sge_check: SgeCheck::Full,
            blueflame: false,
        }
    }

    /// Sets the capabilities.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Receives through `srq`.
    pub fn srq(mut self, srq: &'a Srq<'a, P>) -> Self {
        self.srq = Some(srq);
        self
    }

    /// Sets `sq_sig_all`.
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }

    /// Sets the SGE checks.
    pub fn sge_check(mut self, c: SgeCheck) -> Self {
        self.sge_check = c;
        self
    }

    /// Asks for a UAR page of its own and BlueFlame.
    pub fn blueflame(mut self, bf: bool) -> Self {
        self.blueflame = bf;
        self
    }
}

/// A queue pair (`ibv_qp`): RC, UC or UD. Borrows its PD, CQs and SRQ;
/// destroyed when dropped. Posting takes `&mut self` (one posting thread
/// per QP); completions come from the CQs.
pub struct Qp<'a, P: Platform> {
    pd: &'a Pd<'a, P>,
    send_cq: &'a Cq<'a, P>,
    recv_cq: &'a Cq<'a, P>,
    srq: Option<&'a Srq<'a, P>>,
    obj: Option<crate::resources::Qp<'a, P>>,
    own_uar: Option<Uar<'a, P>>,
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

impl<P: Platform> fmt::Debug for Qp<'_, P> {
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

impl<'a, P: Platform> Pd<'a, P> {
    /// Creates a queue pair (`ibv_create_qp`) in the RESET state; its
    /// [`cap`](Qp::cap) says what it got.
    pub fn create_qp<'b>(&'b self, init: &QpInitAttr<'b, P>) -> Result<Qp<'b, P>> {
        let ctx = self.context();
        let hca = ctx.hca();
        let dev = *ctx.query_device();
        let t = init.qp_type;
        if !matches!(t, QpType::Rc | QpType::Uc | QpType::Ud) {
            return Err(Error::Unsupported(
                "raw packet QPs (the Ethernet SQ/RQ objects serve raw traffic)",
            ));
        }
        let same = |c: &Cq<'_, P>| core::ptr::eq(c.context(), ctx);
        if !same(init.send_cq) || !same(init.recv_cq) {
            return Err(Error::InvalidArgument {
                arg: "send_cq/recv_cq",
                reason: "the CQs belong to another context",
            });
        }
        if let Some(s) = init.srq {
            if !core::ptr::eq(s.pd().context(), ctx) {
                return Err(Error::InvalidArgument {
                    arg: "srq",
                    reason: "the SRQ belongs to another context",
                });
            }
        }
        let c = &init.cap;
        for (attr, v, max) in [
            ("cap.max_send_wr", c.max_send_wr, dev.max_qp_wr),
            ("cap.max_recv_wr", c.max_recv_wr, dev.max_qp_wr),
            ("cap.max_send_sge", c.max_send_sge, dev.max_send_sge),
            ("cap.max_recv_sge", c.max_recv_sge, dev.max_recv_sge),
        ] {
            if v > max {
                return Err(Error::InvalidAttribute {
                    attr,
                    value: u64::from(v),
                    reason: "above the device's limit",
                });
            }
        }
        let with_srq = init.srq.is_some();
        let caps = QpCaps {
            max_send_wr: c.max_send_wr,
            max_recv_wr: if with_srq { 0 } else { c.max_recv_wr },
            max_send_sge: c.max_send_sge,
            max_recv_sge: if with_srq { 0 } else { c.max_recv_sge },
            max_inline_data: c.max_inline_data,
            send_ops: None,
        };
        let geometry = QpGeometry::new(t, &caps, ctx.limits()).map_err(Error::DataPath)?;
        let layout = geometry.layout;
        let uidx = ctx.alloc_user_index()?;
        let own_uar = if init.blueflame {
            match hca.alloc_uar() {
                Ok(u) => Some(u),
                Err(e) => {
                    ctx.free_user_index(uidx);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let (uar_number, uar_offset) = match &own_uar {
            Some(u) => (u.number(), u.offset()),
            None => (ctx.uar().number(), ctx.uar_offset()),
        };
        let fail = |e: Error, own_uar: Option<Uar<'_, P>>| {
            drop(own_uar);
            ctx.free_user_index(uidx);
            e
        };
        let region = match hca.dma_alloc(
            layout.total_bytes,
            PAS_PAGE_SIZE,
            DmaUse::Queues,
            "allocating a QP",
        ) {
            Ok(r) => r,
            Err(e) => return Err(fail(e, own_uar)),
        };
        // Timestamp format: free-running where the RoCE caps offer it,
        // else the device's default (Linux's get_qp_ts_format); a device in
        // real-time clock mode refuses free-running.
        let ts_format = default_ts_format(
            hca.caps()
                .roce
                .as_ref()
                .map_or(TIMESTAMP_FORMAT_CAP_FREE_RUNNING, |r| {
                    r.cur.get(RoceCap::qp_ts_format)
                }),
        );
        let input = (|| -> Result<CreateQpIn> {
            let mut qpc = Qpc::new();
            qpc.set(
                Qpc::st,
                match t {
                    QpType::Rc => QP_ST_RC,
                    QpType::Uc => QP_ST_UC,
                    _ => QP_ST_UD,
                },
            )?
            .set(Qpc::pm_state, QP_PM_MIGRATED)?
            .set(Qpc::pd, self.number().0)?
            .set(Qpc::uar_page, uar_number.0)?
            // The user index is a field of CQE version 1 only; at version
            // 0 Linux leaves it 0 (CQEs then name the QP by number).
            .set(
                Qpc::user_index,
                if ctx.query_device().cqe_version == 1 {
                    uidx
                } else {
                    0
                },
            )?
            .set(Qpc::log_page_size, 0)?
            .set(Qpc::ts_format, ts_format)?
            .set(Qpc::cqn_snd, init.send_cq.number().0)?
            .set(Qpc::cqn_rcv, init.recv_cq.number().0)?
            .set(Qpc::dbr_addr, region.iova() + layout.dbr_offset as u64)?;
            match &geometry.sq {
                Some(sq) => qpc.set(Qpc::log_sq_size, sq.log_sq_size())?,
                None => qpc.set(Qpc::no_sq, true)?,
            };
            match (&geometry.rq, init.srq) {
                (_, Some(s)) => qpc
                    .set(Qpc::rq_type, RQ_TYPE_SRQ_RQ)?
                    .set(Qpc::srqn_rmpn_xrqn, s.number().0)?,
                (Some(rq), None) => qpc
                    .set(Qpc::rq_type, RQ_TYPE_NON_ZERO_RQ)?
                    .set(Qpc::log_rq_size, rq.log_rq_size())?
                    .set(Qpc::log_rq_stride, rq.log_rq_stride())?,
                (None, None) => qpc.set(Qpc::rq_type, RQ_TYPE_ZERO_LEN_RQ)?,
            };
            if t == QpType::Ud {
                qpc.set(Qpc::mtu, UD_MTU)?
                    .set(Qpc::log_msg_max, UD_LOG_MSG_MAX)?;
            }
            Ok(CreateQpIn::new().with(CreateQpIn::qpc, qpc)?)
        })();
        let (obj, region) =
            match create_on_region(hca, region, layout.ring_bytes, input, |p| hca.create_qp(p)) {
                Ok(o) => o,
                Err(e) => return Err(fail(e, own_uar)),
            };
        let qpn = obj.number();
        let general = hca.caps().general();
        // Two halves of `2^log_bf_reg_size` bytes, inside the UAR page.
        let room = (hca.uar_page_size() - firmware_cmds::uar::UAR_BF_OFFSET) / 2;
        let half = ((1usize << general.get(CmdHcaCap::log_bf_reg_size).min(16)) / 2).min(room);
        let bf = BfConfig {
            reg_offset: uar_offset + firmware_cmds::uar::UAR_BF_OFFSET,
            buf_size: half.max(64),
            // BlueFlame copies only through a write-combining mapping; on
            // an uncached one (vfio) doorbells only, as rdma-core does.
            blueflame: own_uar.is_some()
                && general.get(CmdHcaCap::bf)
                && hca.platform().bar_write_combining(0),
            prefer_bf: false,
        };
        let cfg = QpConfig {
            qp_type: t,
            qpn: qpn.0,
            geometry,
            atomics: t == QpType::Rc && dev.atomic_ops,
            sq_sig_all: init.sq_sig_all,
            eth_min_inline: 0,
        };
        let mmio = match ctx.map_bar() {
            Ok(m) => m,
            Err(e) => return Err(fail(destroy_and_free(hca, obj, region, e), own_uar)),
        };
        let dp = match verbs_core::Qp::new(region, Some((mmio, bf)), &cfg) {
            Ok(d) => d,
            Err((e, parts)) => {
                let e = destroy_and_free(hca, obj, parts.region, Error::DataPath(e));
                return Err(fail(e, own_uar));
            }
        };
        let cap = QpCap {
            max_send_wr: geometry.sq.map_or(0, |s| s.max_post),
            max_recv_wr: geometry.rq.map_or(0, |r| r.max_post),
            max_send_sge: geometry.sq.map_or(0, |s| s.max_gs),
            max_recv_sge: geometry.rq.map_or(0, |r| r.max_gs),
            max_inline_data: geometry.sq.map_or(0, |s| s.max_inline_data),
        };
        let mut qp = Qp {
            pd: self,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            obj: Some(obj),
            own_uar,
            dp: Some(dp),
            orphan: None,
            cfg,
            bf,
            qp_type: t,
            qpn,
            uidx,
            state: QpState::Reset,
            port: 0,
            pkey_index: 0,
            dest_qpn: 0,
            cap,
            sge_check: init.sge_check,
            cache: KeyCache::default(),
        };
        // On failure the drop of `qp` destroys everything.
        qp.attach()?;
        Ok(qp)
    }
}

/// Runs one of the transition commands that carry a QP context, with its
/// own input layout (whose `new()` writes its opcode) and output layout.
macro_rules! transition {
    ($hca:expr, $ty:ty, $qpn:expr, $optpar:expr, $qpc:expr) => {{
        let mut i = <$ty>::new();
        i.set(<$ty>::qpn, $qpn)?
            .set(<$ty>::opt_param_mask, $optpar)?
            .set(<$ty>::qpc, $qpc)?;
        $hca.exec(&i).map(drop)
    }};
}

impl<'a, P: Platform> Qp<'a, P> {
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

    /// The PD.
    pub fn pd(&self) -> &'a Pd<'a, P> {
        self.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &'a Cq<'a, P> {
        self.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &'a Cq<'a, P> {
        self.recv_cq
    }

    /// The SRQ, if it receives through one.
    pub fn srq(&self) -> Option<&'a Srq<'a, P>> {
        self.srq
    }

    fn dp(&mut self) -> core::result::Result<&mut verbs_core::Qp<P::Mmio>, WrError> {
        data_path(&mut self.dp)
    }

    fn same_cq(&self) -> bool {
        core::ptr::eq(self.send_cq, self.recv_cq)
    }

    /// Registers the completion handles with the CQ(s).
    fn attach(&mut self) -> Result<()> {
        let Some(dp) = self.dp.as_ref() else {
            return Ok(());
        };
        let has_sq = self.cfg.geometry.sq.is_some();
        let has_rq = self.cfg.geometry.rq.is_some();
        let srq = self.srq.map(|s| s.completions());
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
        let cqs = [
            Some(self.recv_cq),
            (!self.same_cq()).then_some(self.send_cq),
        ];
        for cq in cqs.into_iter().flatten() {
            if let Some((h, c)) = cq.clean_and_detach(self.uidx) {
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

    // ---- posting ----------------------------------------------------------

    #[inline]
    fn send_state(&self) -> core::result::Result<(), WrError> {
        if self.state.can_post_send() {
            Ok(())
        } else {
            Err(WrError::WrongState {
                queue: "send queue",
                state: self.state,
            })
        }
    }

    #[inline]
    fn check_send(&mut self, wr: &SendWr<'_>) -> core::result::Result<(), WrError> {
        self.send_state()?;
        if self.sge_check == SgeCheck::Full {
            check_send_sges(self.pd, &mut self.cache, wr)?;
        }
        Ok(())
    }

    /// Checks and posts a work request of one SGE through verbs-core's
    /// one-SGE fast path.
    #[inline]
    fn post_sge(&mut self, wr_id: u64, op: SendOp, flags: SendFlags, sge: Sge) -> Result<()> {
        self.send_state()
            .and_then(|()| {
                check_single_sge(
                    self.pd,
                    &mut self.cache,
                    self.sge_check,
                    &sge,
                    local_needs(&op),
                )
            })
            .and_then(|()| {
                self.sq()?
                    .post_send_sge(wr_id, op, flags, sge)
                    .map_err(|e| WrError::DataPath(e.into()))
            })
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })
    }

    #[inline]
    fn sq(&mut self) -> core::result::Result<&mut verbs_core::SendQueue<P::Mmio>, WrError> {
        self.dp()?.sq().map_err(WrError::DataPath)
    }

    /// Posts one send work request (`ibv_post_send`): SEND,
    /// SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), RDMA_READ, the atomics, with a
    /// gather list or inline data, signaled or not, fenced, solicited; UD
    /// with a destination ([`Ah::dest`](crate::verbs::Ah::dest)). Refused
    /// with [`Error::InvalidWorkRequest`] before anything is written when
    /// the state, a key, the queue space or the request's shape is wrong.
    #[inline]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.check_send(wr)
            .and_then(|()| self.sq()?.post_send(wr).map_err(WrError::DataPath))
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })
    }

    /// Posts a list of send work requests with one doorbell. On a
    /// rejected request the ones before it are posted (and rung) and the
    /// error names its index.
    pub fn post_send_list(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut b = self.batch()?;
        for wr in wrs {
            b.push(wr)?;
        }
        b.ring();
        Ok(())
    }

    /// Starts a batch of send work requests rung with one doorbell when the
    /// batch is rung or dropped (the `ibv_wr_start` / `ibv_wr_complete`
    /// pattern).
    pub fn batch(&mut self) -> Result<SendBatch<'_, P>> {
        self.send_state()
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        let pd: &Pd<'_, P> = self.pd;
        let check = self.sge_check;
        let Qp { dp, cache, .. } = self;
        let sq = data_path(dp)
            .and_then(|d| d.sq().map_err(WrError::DataPath))
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        Ok(SendBatch {
            b: sq.batch(),
            pd,
            cache,
            check,
            n: 0,
        })
    }

    /// Posts an RDMA WRITE of one SGE (verbs-core's one-SGE fast path).
    #[inline]
    pub fn post_rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        sge: Sge,
    ) -> Result<()> {
        self.post_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)
    }

    /// Posts an RDMA READ into one SGE (the one-SGE fast path).
    #[inline]
    pub fn post_rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        sge: Sge,
    ) -> Result<()> {
        self.post_sge(wr_id, SendOp::RdmaRead { remote_addr, rkey }, flags, sge)
    }

    /// Posts a SEND of one SGE (the one-SGE fast path; not for UD, which
    /// needs a destination: use [`post_send`](Self::post_send)).
    #[inline]
    pub fn post_send_sge(&mut self, wr_id: u64, flags: SendFlags, sge: Sge) -> Result<()> {
        self.post_sge(wr_id, SendOp::Send, flags, sge)
    }

    /// Posts one receive work request (`ibv_post_recv`).
    #[inline]
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_list(core::slice::from_ref(wr))
    }

    /// Posts receive work requests with one doorbell-record update; on a
    /// rejected request the ones before it are posted.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if !self.state.can_post_recv() {
            return Err(Error::InvalidWorkRequest {
                index: 0,
                reason: WrError::WrongState {
                    queue: "receive queue",
                    state: self.state,
                },
            });
        }
        if self.srq.is_some() {
            return Err(rejected(
                0,
                verbs_core::Error::NoSuchQueue("receive queue (it receives through an SRQ)"),
            ));
        }
        let (n, refused) = check_recv_list(self.pd, &mut self.cache, self.sge_check, wrs);
        let rq = self
            .dp()
            .and_then(|d| d.rq().map_err(WrError::DataPath))
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        if n > 0 {
            rq.post_recv_list(&wrs[..n])
                .map_err(|e| rejected(e.posted, e.error))?;
        }
        refused
    }

    /// Work requests posted and not yet completed: (send, receive). The
    /// receive count is 0 for a QP on an SRQ (see
    /// [`Srq::outstanding`]). An unsignaled request counts until a later
    /// completion retires it.
    pub fn outstanding(&mut self) -> (u32, u32) {
        match self.dp.as_mut() {
            Some(d) => {
                let (sq, rq) = d.queues();
                (
                    sq.map_or(0, |q| q.outstanding()),
                    rq.map_or(0, |q| q.outstanding()),
                )
            }
            None => (0, 0),
        }
    }
}

impl<'a, P: Platform> Qp<'a, P> {
    // ---- state machine ----------------------------------------------------

    /// Modifies the QP (`ibv_modify_qp`): the attributes in `attr.mask`.
    ///
    /// The transition (from the current state, or `cur_qp_state` when
    /// [`QpAttrMask::CUR_STATE`] is set, to `qp_state`, or the current state
    /// without [`QpAttrMask::STATE`]) must exist for the QP type and the
    /// mask must hold exactly its required attributes plus any of its
    /// optional ones ([`transition_masks`](crate::verbs::transition_masks));
    /// otherwise [`Error::InvalidTransition`] or [`Error::QpAttrMask`]
    /// naming the missing and the forbidden attributes. Values are checked
    /// against the device and the port. Then RST2INIT, INIT2INIT,
    /// INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS (with the QP context fields
    /// and the `opt_param_mask` of the attributes given), 2ERR or 2RST.
    ///
    /// To RESET the queues start over empty, and the QP's completions not
    /// yet polled are removed from its CQs (the SRQ WQEs its receive
    /// completions consumed go back to its SRQ), as rdma-core does: other
    /// QPs' completions on the same CQs stay, in order. To see the QP's
    /// own, [`drain`](Self::drain) it first.
    pub fn modify(&mut self, attr: &QpAttr) -> Result<()> {
        let t = self.qp_type;
        let mask = attr.mask;
        let cur = if mask.contains(QpAttrMask::CUR_STATE) {
            attr.cur_qp_state
        } else {
            self.refresh_state()?
        };
        let next = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            cur
        };
        let (req, opt) = transition_masks(cur, next, t).ok_or(Error::InvalidTransition {
            qp_type: t,
            from: cur,
            to: next,
        })?;
        let given = mask.without(QpAttrMask::STATE);
        let missing = req.without(given);
        let forbidden = given.without(req | opt);
        if !missing.is_empty() || !forbidden.is_empty() {
            return Err(Error::QpAttrMask {
                qp_type: t,
                from: cur,
                to: next,
                missing,
                forbidden,
            });
        }
        if given.contains(QpAttrMask::ALT_PATH) {
            return Err(Error::Unsupported(
                "alternate paths (automatic path migration)",
            ));
        }
        let cmd = command(cur, next, t).map_err(Error::Unsupported)?;
        self.check_values(attr, given)?;
        let hca = self.pd.context().hca();
        let qpn = self.qpn.0;
        match cmd {
            Command::ToErr => {
                hca.exec(&Qp2errIn::new().with(Qp2errIn::qpn, qpn)?)?;
            }
            Command::ToReset => {
                hca.exec(&Qp2rstIn::new().with(Qp2rstIn::qpn, qpn)?)?;
                self.state = QpState::Reset;
                self.reset_queues()?;
            }
            Command::WithContext { opcode, optpar } => {
                let qpc = self.build_qpc(attr, given)?;
                let optpar = optpar_of(given) & optpar;
                match opcode {
                    Opcode::RST2INIT_QP => transition!(hca, Rst2initQpIn, qpn, optpar, qpc)?,
                    Opcode::INIT2INIT_QP => transition!(hca, Init2initQpIn, qpn, optpar, qpc)?,
                    Opcode::INIT2RTR_QP => transition!(hca, Init2rtrQpIn, qpn, optpar, qpc)?,
                    Opcode::RTR2RTS_QP => transition!(hca, Rtr2rtsQpIn, qpn, optpar, qpc)?,
                    Opcode::RTS2RTS_QP => transition!(hca, Rts2rtsQpIn, qpn, optpar, qpc)?,
                    Opcode::SQERR2RTS_QP => transition!(hca, Sqerr2rtsQpIn, qpn, optpar, qpc)?,
                    // `command` names only the opcodes above.
                    _ => unreachable!("no transition command {opcode}"),
                }
            }
        }
        self.state = next;
        if given.contains(QpAttrMask::PORT) {
            self.port = attr.port_num;
        } else if given.contains(QpAttrMask::AV) && attr.ah_attr.port_num != 0 {
            self.port = attr.ah_attr.port_num;
        }
        if given.contains(QpAttrMask::PKEY_INDEX) {
            self.pkey_index = attr.pkey_index;
        }
        if given.contains(QpAttrMask::DEST_QPN) {
            self.dest_qpn = attr.dest_qp_num;
        }
        Ok(())
    }

    /// The current state: the cached one, or the device's when the device
    /// may have moved the QP on its own (RTR, RTS, SQD: an error completion
    /// puts it in ERR or SQE).
    fn refresh_state(&mut self) -> Result<QpState> {
        if matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.query()?;
        }
        Ok(self.state)
    }

    fn check_values(&self, a: &QpAttr, given: QpAttrMask) -> Result<()> {
        use QpAttrMask as M;
        let ctx = self.pd.context();
        let dev = ctx.query_device();
        let bad = |attr: &'static str, value: u64, reason: &'static str| {
            Err(Error::InvalidAttribute {
                attr,
                value,
                reason,
            })
        };
        if given.contains(M::PORT) {
            ctx.check_port(a.port_num)?;
        }
        if given.contains(M::PKEY_INDEX) {
            let port = if given.contains(M::PORT) {
                a.port_num
            } else {
                self.port.max(1)
            };
            let len = crate::verbs::attr::PortAttr::from_port(
                ctx.hca().info(),
                ctx.hca()
                    .info()
                    .ports
                    .iter()
                    .find(|p| p.port == port)
                    .ok_or(Error::InvalidAttribute {
                        attr: "port_num",
                        value: u64::from(port),
                        reason: "no such port",
                    })?,
            )
            .pkey_tbl_len;
            if a.pkey_index >= len {
                return bad(
                    "pkey_index",
                    u64::from(a.pkey_index),
                    "beyond the port's P_Key table",
                );
            }
        }
        let psn = |attr, v: u32| {
            if v > 0xff_ffff {
                bad(attr, u64::from(v), "a PSN has 24 bits")
            } else {
                Ok(())
            }
        };
        if given.contains(M::RQ_PSN) {
            psn("rq_psn", a.rq_psn)?;
        }
        if given.contains(M::SQ_PSN) {
            psn("sq_psn", a.sq_psn)?;
        }
        if given.contains(M::DEST_QPN) && a.dest_qp_num > 0xff_ffff {
            return bad(
                "dest_qp_num",
                u64::from(a.dest_qp_num),
                "a QP number has 24 bits",
            );
        }
        for (m, attr, v, max) in [
            (M::TIMEOUT, "timeout", a.timeout, 31),
            (M::RETRY_CNT, "retry_cnt", a.retry_cnt, 7),
            (M::RNR_RETRY, "rnr_retry", a.rnr_retry, 7),
            (M::MIN_RNR_TIMER, "min_rnr_timer", a.min_rnr_timer, 31),
        ] {
            if given.contains(m) && v > max {
                return bad(attr, u64::from(v), "out of range");
            }
        }
        if given.contains(M::MAX_QP_RD_ATOMIC)
            && u32::from(a.max_rd_atomic) > dev.max_qp_init_rd_atom
        {
            return bad(
                "max_rd_atomic",
                u64::from(a.max_rd_atomic),
                "above the device's max_qp_init_rd_atom",
            );
        }
        if given.contains(M::MAX_DEST_RD_ATOMIC)
            && u32::from(a.max_dest_rd_atomic) > dev.max_qp_rd_atom
        {
            return bad(
                "max_dest_rd_atomic",
                u64::from(a.max_dest_rd_atomic),
                "above the device's max_qp_rd_atom",
            );
        }
        if given.contains(M::ACCESS_FLAGS) {
            let f = a.qp_access_flags;
            if f.0 & !AccessFlags::ALL.0 != 0 {
                return bad("qp_access_flags", u64::from(f.0), "unknown access flags");
            }
            if f.contains(AccessFlags::REMOTE_ATOMIC) && !dev.atomic_ops {
                return bad(
                    "qp_access_flags",
                    u64::from(f.0),
                    "the device has no 8-byte atomics",
                );
            }
        }
        Ok(())
    }

    /// The QP context of a transition: the fields of the attributes given
    /// (the port and P_Key index of the primary path always, since the
    /// firmware takes the path as a whole).
    fn build_qpc(&self, a: &QpAttr, given: QpAttrMask) -> Result<Qpc> {
        use QpAttrMask as M;
        let ctx = self.pd.context();
        let t = self.qp_type;
        let mut qpc = Qpc::new();
        // Every transition carries the ACK request frequency Linux's
        // __mlx5_ib_modify_qp sets (MLX5_IB_ACK_REQ_FREQ).
        qpc.set(Qpc::log_ack_req_freq, LOG_ACK_REQ_FREQ)?;
        let port = if given.contains(M::PORT) {
            a.port_num
        } else {
            self.port
        };
        let pkey = if given.contains(M::PKEY_INDEX) {
            a.pkey_index
        } else {
            self.pkey_index
        };
        let mut ads = Ads::new();
        ads.set(Ads::vhca_port_num, port)?
            .set(Ads::pkey_index, pkey)?;
        if given.contains(M::AV) {
            let mut ah = a.ah_attr;
            if ah.port_num == 0 {
                ah.port_num = port;
            }
            let r = ctx.resolve(&ah)?;
            let dest = if given.contains(M::DEST_QPN) {
                a.dest_qp_num
            } else {
                self.dest_qpn
            };
            fill_ads(&mut ads, &ah, r, pkey, self.qpn.0, dest)?;
        }
        if given.contains(M::TIMEOUT) {
            ads.set(Ads::ack_timeout, a.timeout)?;
        }
        qpc.set(Qpc::primary_address_path, ads)?;
        if given.contains(M::ACCESS_FLAGS) {
            set_access(&mut qpc, a.qp_access_flags, t)?;
        }
        if given.contains(M::QKEY) {
            qpc.set(Qpc::q_key, a.qkey)?;
        }
        if t == QpType::Ud {
            qpc.set(Qpc::mtu, UD_MTU)?
                .set(Qpc::log_msg_max, UD_LOG_MSG_MAX)?;
        } else if given.contains(M::PATH_MTU) {
            let log_msg = ctx.hca().caps().general().get(CmdHcaCap::log_max_msg);
            qpc.set(Qpc::mtu, a.path_mtu as u8)?
                .set(Qpc::log_msg_max, log_msg)?;
        }
        if given.contains(M::RETRY_CNT) {
            qpc.set(Qpc::retry_count, a.retry_cnt)?;
        }
        if given.contains(M::RNR_RETRY) {
            qpc.set(Qpc::rnr_retry, a.rnr_retry)?;
        }
        if given.contains(M::RQ_PSN) {
            qpc.set(Qpc::next_rcv_psn, a.rq_psn)?;
        }
        if given.contains(M::SQ_PSN) {
            qpc.set(Qpc::next_send_psn, a.sq_psn)?;
        }
        if given.contains(M::MAX_QP_RD_ATOMIC) {
            qpc.set(Qpc::log_sra_max, log2_ceil(a.max_rd_atomic))?;
        }
        if given.contains(M::MAX_DEST_RD_ATOMIC) {
            qpc.set(Qpc::log_rra_max, log2_ceil(a.max_dest_rd_atomic))?;
        }
        if given.contains(M::MIN_RNR_TIMER) {
            qpc.set(Qpc::min_rnr_nak, a.min_rnr_timer)?;
        }
        if given.contains(M::DEST_QPN) {
            qpc.set(Qpc::remote_qpn, a.dest_qp_num)?;
        }
        if given.contains(M::PATH_MIG_STATE) {
            qpc.set(Qpc::pm_state, a.path_mig_state.to_prm())?;
        }
        Ok(qpc)
    }

    /// Queries the QP (QUERY_QP, `ibv_query_qp`): state and attributes as
    /// the device has them, capabilities as the driver sized them.
    pub fn query(&mut self) -> Result<QpAttr> {
        let hca = self.pd.context().hca();
        let out: QueryQpOut = hca.exec(&QueryQpIn::new().with(QueryQpIn::qpn, self.qpn.0)?)?;
        let qpc: Qpc = out.get(QueryQpOut::qpc);
        let (state, mut a) = attr_from_qpc(&qpc, self.qp_type);
        let state = state.ok_or(Error::InvalidAnswer {
            opcode: Opcode::QUERY_QP,
            op_mod: 0,
            field: "query_qp_out.qpc.state",
            value: u64::from(qpc.get(Qpc::state)),
            reason: "not a QP state",
        })?;
        self.state = state;
        a.cap = self.cap;
        Ok(a)
    }

    /// After 2RST: the queues start over (counters 0, doorbell record 0),
    /// as the device's do.
    fn reset_queues(&mut self) -> Result<()> {
        let Some(dp) = self.dp.take() else {
            return Ok(());
        };
        self.clean_and_detach();
        let parts = match dp.into_parts() {
            Ok(p) => p,
            Err(dp) => {
                // Cannot happen (the handles were just dropped); keep it.
                self.dp = Some(dp);
                return Err(Error::DataPath(verbs_core::Error::HandlesAlive(1)));
            }
        };
        let uar = match parts.uar {
            Some(m) => Some((m, self.bf)),
            None => match self.pd.context().map_bar() {
                Ok(m) => Some((m, self.bf)),
                Err(e) => {
                    self.orphan = Some(parts.region);
                    return Err(e);
                }
            },
        };
        match verbs_core::Qp::new(parts.region, uar, &self.cfg) {
            Ok(d) => self.dp = Some(d),
            Err((e, parts)) => {
                self.orphan = Some(parts.region);
                return Err(Error::DataPath(e));
            }
        }
        self.cache = KeyCache::default();
        self.attach()
    }

    /// Moves the QP to ERR and waits until every outstanding work request
    /// completed (with the flush status), passing each completion polled
    /// from its CQs to `on_wc` (those of other QPs on the same CQs too).
    /// To be sure unsignaled work is retired, a signaled NOP and an empty
    /// receive ([`DRAIN_WR_ID`]) are posted after the transition; their
    /// completions are not passed on. A QP on an SRQ drains its send queue
    /// only. Services the HCA while it waits.
    pub fn drain(
        &mut self,
        timeout: Duration,
        mut on_wc: impl FnMut(&WorkCompletion),
    ) -> Result<()> {
        if self.state == QpState::Reset {
            return Ok(());
        }
        if self.state != QpState::Err {
            self.modify(&QpAttr::new().state(QpState::Err))?;
        }
        let qpn = self.qpn.0;
        let has_sq = self.cfg.geometry.sq.is_some();
        let has_rq = self.cfg.geometry.rq.is_some() && self.srq.is_none();
        if let Some(d) = self.dp.as_mut() {
            let (sq, rq) = d.queues();
            if let Some(sq) = sq {
                let nop = SendWr::new(DRAIN_WR_ID, SendOp::Nop).flags(SendFlags::SIGNALED);
                if let Err(e) = sq.post_send(&nop) {
                    log::debug!("QP {qpn:#x} drain: no NOP marker ({e})");
                }
            }
            if let (Some(rq), true) = (rq, has_rq) {
                let r = RecvWr {
                    wr_id: DRAIN_WR_ID,
                    sgl: &[],
                };
                if let Err(e) = rq.post_recv(&r) {
                    log::debug!("QP {qpn:#x} drain: no receive marker ({e})");
                }
            }
        }
        let hca = self.pd.context().hca();
        let p = hca.platform();
        let deadline = Deadline::start(p, timeout);
        let mut wc = [WorkCompletion::default(); 16];
        let mut spins = 0u32;
        // On interrupts: the interrupt count read (and the CQs armed) before
        // the current look, when both CQs report to one vector.
        let mut armed: Option<(u16, u64)> = None;
        loop {
            let mut got = 0;
            let cqs: [Option<&Cq<'_, P>>; 2] = [
                Some(self.send_cq),
                (!self.same_cq()).then_some(self.recv_cq),
            ];
            for cq in cqs.into_iter().flatten() {
                let n = cq.poll(&mut wc)?;
                got += n;
                for w in &wc[..n] {
                    if !(w.wr_id == DRAIN_WR_ID && w.qp_num == qpn) {
                        on_wc(w);
                    }
                }
            }
            let (s, r) = self.outstanding();
            let (s, r) = (if has_sq { s } else { 0 }, if has_rq { r } else { 0 });
            if s == 0 && r == 0 {
                return Ok(());
            }
            deadline.check(
                p,
                Wait::Drain {
                    qpn: self.qpn,
                    send: s,
                    recv: r,
                },
            )?;
            if got > 0 {
                armed = None;
                continue;
            }
            if let Some(seen) = armed.take() {
                // Nothing since the arm: sleep until a completion's event.
                self.send_cq.sleep(seen, &deadline)?;
                continue;
            }
            let send = self.send_cq.arm_for_sleep();
            let recv = if self.same_cq() {
                send
            } else {
                self.recv_cq.arm_for_sleep()
            };
            if let (Some(s), Some(r)) = (send, recv) {
                if s.0 == r.0 {
                    // Look once more, then sleep.
                    armed = Some(s);
                    continue;
                }
            }
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 {
                service(hca)?;
            }
            hca.note_poll();
            p.relax();
        }
    }

    /// Takes the asynchronous events that arrived for the QP (bit `n` =
    /// `EVENT_TYPE_*` `n` of [`firmware_cmds::eq`]: communication
    /// established, last WQE reached, WQ errors...), servicing the HCA
    /// first.
    pub fn take_events(&self) -> Result<u64> {
        let hca = self.pd.context().hca();
        service(hca)?;
        Ok(hca
            .events()
            .take_queue_events(QueueId::Qp(self.qpn))
            .unwrap_or(0))
    }

    // ---- teardown ---------------------------------------------------------

    /// Destroys the QP (DESTROY_QP), removes its completions not yet
    /// polled from its CQs (as [`modify`](Self::modify) to RESET does),
    /// unregisters it from them and frees its memory.
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(obj) = self.obj.take() else {
            return Ok(());
        };
        let ctx = self.pd.context();
        let hca = ctx.hca();
        let r = obj.destroy();
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
        for reg in regions.into_iter().flatten() {
            release_after_destroy(hca, reg, r.is_ok());
        }
        ctx.free_user_index(self.uidx);
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

impl<P: Platform> Drop for Qp<'_, P> {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::error!("destroying QP {:#x}: {e}", self.qpn.0);
        }
    }
}

/// Send work requests written and not yet rung; see [`Qp::batch`]. Each
/// request is checked like [`Qp::post_send`]; a rejected one writes
/// nothing and the batch stays usable. Rung once, at
/// [`ring`](Self::ring) or when dropped.
pub struct SendBatch<'q, P: Platform> {
    b: verbs_core::SendBatch<'q, P::Mmio>,
    pd: &'q Pd<'q, P>,
    cache: &'q mut KeyCache,
    check: SgeCheck,
    n: usize,
}

impl<P: Platform> fmt::Debug for SendBatch<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendBatch({} pushed)", self.n)
    }
}

impl<'q, P: Platform> SendBatch<'q, P> {
    fn fail(&self, reason: WrError) -> Error {
        Error::InvalidWorkRequest {
            index: self.n,
            reason,
        }
    }

    /// Checks and writes one work request.
    #[inline]
    pub fn push(&mut self, wr: &SendWr<'_>) -> Result<()> {
        if self.check == SgeCheck::Full {
            check_send_sges(self.pd, self.cache, wr).map_err(|r| self.fail(r))?;
        }
        self.b
            .post_send(wr)
            .map_err(|e| self.fail(WrError::DataPath(e)))?;
        self.n += 1;
        Ok(())
    }

    /// Checks and writes a work request of one SGE through verbs-core's
    /// one-SGE fast path.
    #[inline]
    fn push_sge(&mut self, wr_id: u64, op: SendOp, flags: SendFlags, sge: Sge) -> Result<()> {
        check_single_sge(self.pd, self.cache, self.check, &sge, local_needs(&op))
            .map_err(|r| self.fail(r))?;
        self.b
            .post_send_sge(wr_id, op, flags, sge)
            .map_err(|e| self.fail(WrError::DataPath(e.into())))?;
        self.n += 1;
        Ok(())
    }

    /// Checks and writes an RDMA WRITE of one SGE.
    #[inline]
    pub fn post_rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        sge: Sge,
    ) -> Result<()> {
        self.push_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)
    }

    /// Checks and writes an RDMA READ into one SGE.
    #[inline]
    pub fn post_rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
        sge: Sge,
    ) -> Result<()> {
        self.push_sge(wr_id, SendOp::RdmaRead { remote_addr, rkey }, flags, sge)
    }

    /// Checks and writes a SEND of one SGE.
    #[inline]
    pub fn post_send(&mut self, wr_id: u64, flags: SendFlags, sge: Sge) -> Result<()> {
        self.push_sge(wr_id, SendOp::Send, flags, sge)
    }

    /// Work requests in the batch.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Rings the doorbell once for everything pushed.
    pub fn ring(self) {
        self.b.ring();
    }
}
