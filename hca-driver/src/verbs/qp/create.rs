//! Creating a QP: the init attributes, CREATE_QP over verbs-core's queues.

use super::*;
use crate::verbs::qp::raw::QpCreateFlags;

/// What a QP is created with (`struct ibv_qp_init_attr`).
pub struct QpInitAttr<P: Platform + 'static, S: Share = DefaultShare> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// The CQ of send completions.
    pub send_cq: S::Ref<Cq<P, S>>,
    /// The CQ of receive completions (may be `send_cq`).
    pub recv_cq: S::Ref<Cq<P, S>>,
    /// Receive through a shared receive queue (`max_recv_wr` is then 0).
    pub srq: Option<S::Ref<Srq<P, S>>>,
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
    /// `ibv_qp_create_flags`: blocking multicast loopback (UD), CVLAN
    /// stripping and scatter FCS (raw packet QPs).
    pub create_flags: QpCreateFlags,
    /// Raw packet QPs: the Q counter set the receive queue counts into
    /// (`rqc.counter_set_id`; [`crate::fw::QCounter`]), `None` for the
    /// device's default set. The set must stay allocated while the QP
    /// exists (the device refuses to free a set an RQ counts into).
    pub counter_set: Option<crate::types::CounterSetId>,
}

impl<P: Platform + 'static, S: Share> Clone for QpInitAttr<P, S> {
    fn clone(&self) -> Self {
        Self {
            send_cq: self.send_cq.clone(),
            recv_cq: self.recv_cq.clone(),
            srq: self.srq.clone(),
            ..*self
        }
    }
}

impl<P: Platform + 'static, S: Share> QpInitAttr<P, S> {
    /// A QP of `qp_type` on these CQs with room for 16 send and 16 receive
    /// work requests of one SGE, checked SGEs, no inline data.
    pub fn new(
        qp_type: QpType,
        send_cq: &impl Handle<Cq<P, S>, Share = S>,
        recv_cq: &impl Handle<Cq<P, S>, Share = S>,
    ) -> Self {
        Self {
            qp_type,
            send_cq: send_cq.clone().into_ref(),
            recv_cq: recv_cq.clone().into_ref(),
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
            create_flags: QpCreateFlags::NONE,
            counter_set: None,
        }
    }

    /// Counts the receive queue of a raw packet QP into Q counter set
    /// `set` ([`counter_set`](Self::counter_set)).
    pub fn counter_set(mut self, set: crate::types::CounterSetId) -> Self {
        self.counter_set = Some(set);
        self
    }

    /// Sets the create flags (raw packet QPs).
    pub fn create_flags(mut self, f: QpCreateFlags) -> Self {
        self.create_flags = f;
        self
    }

    /// Sets the capabilities.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Receives through `srq`.
    pub fn srq(mut self, srq: &impl Handle<Srq<P, S>, Share = S>) -> Self {
        self.srq = Some(srq.clone().into_ref());
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

impl<P: Platform + 'static, S: Share> Qp<P, S> {
    /// Creates a queue pair (`ibv_create_qp`) in the PD behind `pd`, in the
    /// RESET state; its [`cap`](Qp::cap) says what it got. The QP holds
    /// handles of its PD, its CQs and its SRQ.
    pub fn create(pd: &impl Handle<Pd<P, S>, Share = S>, init: &QpInitAttr<P, S>) -> Result<Self> {
        let this: &Pd<P, S> = pd;
        let ctx: &Context<P, S> = this.context();
        let hca = ctx.hca();
        let dev = *ctx.query_device();
        if init.sge_check == SgeCheck::Off {
            // Known before the first post, which refuses it.
            ctx.reserved_lkey()?;
        }
        let t = init.qp_type;
        if let Some(set) = init.counter_set {
            let reason = if t != QpType::RawPacket {
                Some("a Q counter set is taken by raw packet QPs only")
            } else if init.cap.max_recv_wr == 0 || init.srq.is_some() {
                Some("a Q counter set needs the QP's own receive queue")
            } else if set.0 == 0 {
                Some("set 0 is the device's default set")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(Error::InvalidAttribute {
                    attr: "counter_set",
                    value: u64::from(set.0),
                    reason,
                });
            }
        }
        if t == QpType::RawPacket {
            return Self::create_raw(pd, init);
        }
        let flags = init.create_flags;
        if flags.0 & !QpCreateFlags::BLOCK_SELF_MCAST_LB.0 != 0 {
            return Err(Error::InvalidAttribute {
                attr: "create_flags",
                value: u64::from(flags.0),
                reason: "CVLAN stripping and scatter FCS are for raw packet QPs",
            });
        }
        let block_lb = flags.contains(QpCreateFlags::BLOCK_SELF_MCAST_LB);
        let same = |c: &Cq<P, S>| core::ptr::eq::<Context<P, S>>(&**c.context(), ctx);
        if !same(&init.send_cq) || !same(&init.recv_cq) {
            return Err(Error::InvalidArgument {
                arg: "send_cq/recv_cq",
                reason: "the CQs belong to another context",
            });
        }
        if let Some(s) = &init.srq {
            if !core::ptr::eq::<Context<P, S>>(&**s.pd().context(), ctx) {
                return Err(Error::InvalidArgument {
                    arg: "srq",
                    reason: "the SRQ belongs to another context",
                });
            }
        }
        if block_lb {
            if t != QpType::Ud {
                return Err(Error::InvalidAttribute {
                    attr: "create_flags",
                    value: u64::from(flags.0),
                    reason: "BLOCK_SELF_MCAST_LB: multicast loopback concerns UD and raw packet QPs only",
                });
            }
            if !hca.caps().general().get(CmdHcaCap::block_lb_mc) {
                return Err(Error::Unsupported(
                    "blocking multicast loopback (capability block_lb_mc is 0)",
                ));
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
                Ok(u) => Some(u.rehome(hca.clone())),
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
        let fail = |e: Error, own_uar: Option<FwObj<P, S, UarObj>>| {
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
            .set(Qpc::block_lb_mc, block_lb)?
            .set(Qpc::pd, this.number().0)?
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
            match (&geometry.rq, &init.srq) {
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
                Ok((o, r)) => (o.rehome(hca.clone()), r),
                Err(e) => return Err(fail(e, own_uar)),
            };
        let qpn = obj.number();
        let bf = bf_config(hca, uar_offset, own_uar.is_some());
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
        Self::assemble(
            pd,
            init,
            Backing::Qp(obj),
            (uidx, uidx),
            own_uar,
            dp,
            cfg,
            bf,
        )
    }

    /// The one constructor of a [`Qp`] value, from what a create made
    /// (the firmware objects, the user indices of its send and receive
    /// completions, its UAR, data path and configuration); then its
    /// completion handles are registered with its CQs. On failure the
    /// value's drop destroys everything.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble(
        pd: &impl Handle<Pd<P, S>, Share = S>,
        init: &QpInitAttr<P, S>,
        backing: Backing<P, S>,
        (uidx, recv_uidx): (u32, u32),
        own_uar: Option<FwObj<P, S, UarObj>>,
        dp: verbs_core::Qp<P::Mmio>,
        cfg: QpConfig,
        bf: BfConfig,
    ) -> Result<Self> {
        let g = &cfg.geometry;
        let cap = QpCap {
            max_send_wr: g.sq.map_or(0, |s| s.max_post),
            max_recv_wr: g.rq.map_or(0, |r| r.max_post),
            max_send_sge: g.sq.map_or(0, |s| s.max_gs),
            max_recv_sge: g.rq.map_or(0, |r| r.max_gs),
            max_inline_data: g.sq.map_or(0, |s| s.max_inline_data),
        };
        let (obj, raw) = match backing {
            Backing::Qp(o) => (Some(o), None),
            Backing::Raw(r) => (None, Some(r)),
        };
        let mut qp = Qp {
            pd: pd.clone().into_ref(),
            send_cq: init.send_cq.clone(),
            recv_cq: init.recv_cq.clone(),
            srq: init.srq.clone(),
            obj,
            raw,
            recv_uidx,
            own_uar,
            dp: Some(dp),
            orphan: None,
            qp_type: cfg.qp_type,
            qpn: Qpn(cfg.qpn),
            cfg,
            bf,
            uidx,
            state: QpState::Reset,
            port: 0,
            pkey_index: 0,
            dest_qpn: 0,
            cap,
            sge_check: init.sge_check,
            cache: KeyCache::default(),
        };
        qp.attach()?;
        Ok(qp)
    }
}

/// The firmware objects a [`Qp`] is: a QP (CREATE_QP), or those of a raw
/// packet QP.
pub(super) enum Backing<P: Platform + 'static, S: Share> {
    /// CREATE_QP's object.
    Qp(FwObj<P, S, QpObj>),
    /// A raw packet QP's transport domain, TIS, SQ, RQ and TIR.
    Raw(raw::RawParts<P, S>),
}

/// The BlueFlame configuration of a QP ringing the UAR page at
/// `uar_offset` (its own when `own_uar`): two halves of
/// `2^log_bf_reg_size` bytes inside the page; copies only through a
/// write-combining mapping of the BAR (on an uncached one, vfio,
/// doorbells only, as rdma-core does) and a UAR of the QP's own.
pub(super) fn bf_config<P: Platform>(
    hca: &crate::hca::Hca<P>,
    uar_offset: usize,
    own_uar: bool,
) -> BfConfig {
    let general = hca.caps().general();
    let room = (hca.uar_page_size() - firmware_cmds::uar::UAR_BF_OFFSET) / 2;
    let half = ((1usize << general.get(CmdHcaCap::log_bf_reg_size).min(16)) / 2).min(room);
    BfConfig {
        reg_offset: uar_offset + firmware_cmds::uar::UAR_BF_OFFSET,
        buf_size: half.max(64),
        blueflame: own_uar && general.get(CmdHcaCap::bf) && hca.platform().bar_write_combining(0),
        prefer_bf: false,
    }
}
