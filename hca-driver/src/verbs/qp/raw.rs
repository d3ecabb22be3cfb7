//! Raw packet QPs (`IBV_QPT_RAW_PACKET`) built the way Linux mlx5_ib builds
//! them (`create_raw_packet_qp` in drivers/infiniband/hw/mlx5/qp.c, read
//! for facts): no CREATE_QP, but a transport domain, a TIS and an SQ
//! (CREATE_TIS, CREATE_SQ) for the send side, an RQ and a direct TIR
//! (CREATE_RQ, CREATE_TIR) for the receive side, under one verbs [`Qp`].
//!
//! - The queues live in one DMA region, as verbs-core lays a QP out: the
//!   receive ring at offset 0, the send ring after it (here moved up to the
//!   next 4 KiB page, so each work queue's page list starts on a page: the
//!   `wq.page_offset` Linux would give a send ring inside a page is 0
//!   here), one doorbell record (receive counter at +0, send counter at +4)
//!   that both work queues name in `wq.dbr_addr`.
//! - The QP number is the SQ's (the RQ's without a send queue), as
//!   mlx5_ib's `qp->trans_qp.base.mqp.qpn`; send completions carry the SQ
//!   number, receive completions the flow tag ([`Qp::rq_number`]).
//! - Completions reach the ordinary verbs CQs by user index: the SQ and the
//!   RQ each carry one (`sqc.user_index`, `rqc.user_index`). mlx5_ib gives
//!   both the QP's; here the RQ gets a second one when the QP has both
//!   queues, so that each queue's completion handle stands alone on its CQ
//!   (the send handle checks the SQ number CQEs carry, the receive handle
//!   is a raw one that takes the flow tag instead).
//! - State transitions become work queue transitions as mlx5_ib's
//!   `modify_raw_packet_qp` makes them: RESET to INIT moves the RQ and the
//!   SQ from RST to RDY (MODIFY_RQ, MODIFY_SQ); INIT to INIT, INIT to RTR,
//!   RTR to RTS and RTS to RTS change no object (INIT to RTR turns on the
//!   receive doorbell record, as rdma-core's `mlx5_modify_qp` writes it
//!   then); to ERR both go to ERR; to RESET both go to RST and the queues
//!   start over.
//! - Destroy runs in mlx5_ib's order (`destroy_raw_packet_qp`): TIR, RQ,
//!   SQ, TIS, then the transport domain.
//! - The receive side is a flow-rule destination, as `ibv_create_flow`
//!   on a raw QP: [`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule).
//!   The rule does not borrow the QP (which must stay postable); it pins
//!   the QP's receive side in its context instead. The QP may be
//!   destroyed before its rules: its send side goes at once, its RQ is
//!   stopped, and the TIR, RQ and transport domain go when the last rule
//!   naming them is deleted (the module `pins`).
//! - CQE version 1 only: raw receive CQEs carry the flow tag where a
//!   version 0 CQE names its queue.

use firmware_cmds::caps::{CmdHcaCap, PerProtocolNetworkingOffloadCaps};
use firmware_cmds::eth::{
    CreateRqIn, CreateSqIn, INLINE_MODE_NONE, RQC_MEM_RQ_TYPE_MEMORY_RQ_INLINE, Rqc, Sqc,
    TIRC_DISP_TYPE_DIRECT, TIRC_SELF_LB_BLOCK_BLOCK_MULTICAST, Tirc, WQ_STATE_ERR, WQ_STATE_RDY,
    WQ_STATE_RST, WQ_TYPE_CYCLIC, Wq,
};

use super::*;
use crate::fw::{RqObj, SqObj, TdObj, TirObj, TisObj};
use crate::info::LinkLayer;
use crate::pacing::RateLimit;
use crate::types::{Rqn, Sqn, Tirn};
use crate::verbs::queue;

/// `MLX5_ETH_L2_INLINE_HEADER_SIZE`: the Ethernet and VLAN header bytes
/// rdma-core inlines in a raw packet send when the device asks for any
/// inline headers (`eth_min_inline_size`).
pub const ETH_L2_INLINE_HEADER_SIZE: u16 = 18;

/// `ibv_qp_create_flags`: [`BLOCK_SELF_MCAST_LB`](Self::BLOCK_SELF_MCAST_LB)
/// for UD QPs, the others for raw packet QPs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCreateFlags(pub u32);

impl QpCreateFlags {
    /// None.
    pub const NONE: Self = Self(0);
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: multicast packets the QP
    /// sends are not looped back to it (needs the `block_lb_mc`
    /// capability). A UD QP: the QPC's `block_lb_mc`. A raw packet QP:
    /// its TIR's `self_lb_block` multicast bit, which keeps the frames
    /// sent through a TIS of the QP's transport domain (its own SQ's) from
    /// its receive queue, as mlx5_ib's `create_raw_packet_qp_tir` sets it.
    pub const BLOCK_SELF_MCAST_LB: Self = Self(1 << 1);
    /// `IBV_QP_CREATE_SCATTER_FCS`: received frames keep their 4-byte FCS
    /// (`rqc.scatter_fcs`).
    pub const SCATTER_FCS: Self = Self(1 << 8);
    /// `IBV_QP_CREATE_CVLAN_STRIPPING`: the device strips the customer
    /// VLAN tag of received frames and reports it in the CQE (`rqc.vsd`
    /// 0; without the flag `vsd` is 1, as mlx5_ib sets it).
    pub const CVLAN_STRIPPING: Self = Self(1 << 9);

    /// Whether every bit of `f` is set.
    pub const fn contains(self, f: Self) -> bool {
        self.0 & f.0 == f.0
    }
}

impl core::ops::BitOr for QpCreateFlags {
    type Output = Self;
    fn bitor(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
}

/// The firmware objects of a raw packet QP, destroyed in mlx5_ib's order.
pub(crate) struct RawParts<P: Platform + 'static, S: Share> {
    tir: Option<FwObj<P, S, TirObj>>,
    rq: Option<FwObj<P, S, RqObj>>,
    sq: Option<FwObj<P, S, SqObj>>,
    tis: Option<FwObj<P, S, TisObj>>,
    td: Option<FwObj<P, S, TdObj>>,
    /// The state both work queues are in (`WQ_STATE_*`).
    wq_state: u8,
    /// The create flags.
    pub(crate) flags: QpCreateFlags,
    /// The SQ's packet pacing: its rate-limit table index and the rate
    /// that entry holds (module `pacing`); `None`: not paced.
    rate: Option<(u16, RateLimit)>,
}

impl<P: Platform + 'static, S: Share> RawParts<P, S> {
    /// Destroys TIR, RQ, SQ, TIS and transport domain, in that order; the
    /// first failure is returned. An object whose user failed to go is
    /// kept (forgotten) rather than destroyed under it.
    pub(crate) fn destroy(&mut self) -> Result<()> {
        let mut r = Ok(());
        let mut keep = false;
        let step = |res: Result<()>, r: &mut Result<()>, keep: &mut bool| {
            if let Err(e) = res {
                *keep = true;
                if r.is_ok() {
                    *r = Err(e);
                }
            }
        };
        if let Some(t) = self.tir.take() {
            step(t.destroy(), &mut r, &mut keep);
        }
        if let Some(q) = self.rq.take() {
            if keep {
                core::mem::forget(q);
            } else {
                step(q.destroy(), &mut r, &mut keep);
            }
        }
        if let Some(q) = self.sq.take() {
            let hca = q.hca().clone();
            let gone = q.destroy();
            if gone.is_ok() {
                if let Some((index, _)) = self.rate.take() {
                    hca.release_rate(index);
                }
            }
            step(gone, &mut r, &mut keep);
        }
        if let Some(t) = self.tis.take() {
            if keep {
                core::mem::forget(t);
            } else {
                step(t.destroy(), &mut r, &mut keep);
            }
        }
        if let Some(td) = self.td.take() {
            if keep {
                core::mem::forget(td);
            } else {
                step(td.destroy(), &mut r, &mut keep);
            }
        }
        r
    }

    /// The direct TIR's number (a QP with a receive queue).
    pub(crate) fn tir_number(&self) -> Option<Tirn> {
        self.tir.as_ref().map(|t| t.number())
    }

    /// Retires the send side while flow rules still name the TIR: the RQ
    /// is stopped (MODIFY_RQ to RST: no frame reaches its buffers or its
    /// CQ from here on), then the SQ and the TIS are destroyed. The TIR,
    /// the RQ and the transport domain (which the TIR names) are handed
    /// back, to be destroyed in mlx5_ib's order once the last rule goes.
    /// The result is the first failure, and whether the RQ stopped.
    pub(crate) fn retire_send_side(&mut self) -> (Result<()>, bool, RecvObjs<P, S>) {
        let mut r = Ok(());
        let mut stopped = true;
        if let Some(rq) = &self.rq {
            if self.wq_state != WQ_STATE_RST {
                if let Err(e) = rq.modify_state(self.wq_state, WQ_STATE_RST) {
                    stopped = false;
                    r = Err(e);
                }
            }
        }
        if let Some(q) = self.sq.take() {
            let hca = q.hca().clone();
            match q.destroy() {
                Ok(()) => {
                    if let Some((index, _)) = self.rate.take() {
                        hca.release_rate(index);
                    }
                    if let Some(t) = self.tis.take() {
                        if let Err(e) = t.destroy() {
                            if r.is_ok() {
                                r = Err(e);
                            }
                        }
                    }
                }
                Err(e) => {
                    // The SQ may still exist: its TIS stays.
                    if let Some(t) = self.tis.take() {
                        core::mem::forget(t);
                    }
                    if r.is_ok() {
                        r = Err(e);
                    }
                }
            }
        }
        let objs = RecvObjs {
            tir: self.tir.take(),
            rq: self.rq.take(),
            td: self.td.take(),
        };
        (r, stopped, objs)
    }

    /// The SQ's rate (`RateLimit::default()`, rate 0, when not paced).
    pub(crate) fn rate(&self) -> RateLimit {
        self.rate.map(|(_, rl)| rl).unwrap_or_default()
    }

    /// Paces the SQ at `rl` (rate 0: no pacing), as mlx5_ib's
    /// `modify_raw_packet_qp_sq` does: the new rate's table entry first
    /// (shared with SQs at the same rate), MODIFY_SQ naming it, then the
    /// old entry given back. The SQ must be ready; a refused MODIFY_SQ
    /// leaves the old rate in place.
    pub(crate) fn set_rate(&mut self, rl: RateLimit) -> Result<()> {
        let Some(sq) = &self.sq else {
            return Err(Error::Unsupported(
                "a rate limit on a QP without a send queue",
            ));
        };
        if rl.rate_kbps == 0 && (rl.max_burst_bytes != 0 || rl.typical_packet_bytes != 0) {
            return Err(Error::InvalidAttribute {
                attr: "max_burst_sz",
                value: u64::from(rl.max_burst_bytes),
                reason: "a burst bound or typical packet size needs a rate",
            });
        }
        if self.rate() == rl {
            return Ok(());
        }
        if self.wq_state != WQ_STATE_RDY {
            return Err(Error::InvalidAttribute {
                attr: "rate_limit",
                value: u64::from(rl.rate_kbps),
                reason: "the send queue is not ready (the QP is not in RTR or RTS)",
            });
        }
        let hca = sq.hca();
        let index = if rl.rate_kbps == 0 {
            0
        } else {
            hca.acquire_rate(rl)?
        };
        if let Err(e) = sq.modify_rate_index(index) {
            if index != 0 {
                hca.release_rate(index);
            }
            return Err(e);
        }
        if let Some((old, _)) = self.rate.take() {
            hca.release_rate(old);
        }
        if index != 0 {
            self.rate = Some((index, rl));
        }
        Ok(())
    }

    /// MODIFY_RQ and MODIFY_SQ from the state both are in to `to`
    /// (nothing when they are there).
    fn move_wqs(&mut self, to: u8) -> Result<()> {
        let from = self.wq_state;
        if from == to {
            return Ok(());
        }
        if let Some(rq) = &self.rq {
            rq.modify_state(from, to)?;
        }
        if let Some(sq) = &self.sq {
            if let Err(e) = sq.modify_state(from, to) {
                // The RQ moved and the SQ did not: both are taken to ERR
                // (any state goes there) so that they agree again.
                if let Some(rq) = &self.rq {
                    let _ = rq.modify_state(to, WQ_STATE_ERR);
                }
                let _ = sq.modify_state(from, WQ_STATE_ERR);
                self.wq_state = WQ_STATE_ERR;
                return Err(e);
            }
        }
        self.wq_state = to;
        Ok(())
    }
}

/// A raw packet QP's receive side objects: its direct TIR, its RQ and the
/// transport domain they belong to.
pub(crate) struct RecvObjs<P: Platform + 'static, S: Share> {
    pub(crate) tir: Option<FwObj<P, S, TirObj>>,
    pub(crate) rq: Option<FwObj<P, S, RqObj>>,
    pub(crate) td: Option<FwObj<P, S, TdObj>>,
}

impl<P: Platform + 'static, S: Share> RecvObjs<P, S> {
    /// Destroys the TIR, the RQ and the transport domain, in that order
    /// (mlx5_ib's); an object whose user failed to go is kept (forgotten).
    pub(crate) fn destroy(&mut self) -> Result<()> {
        if let Some(t) = self.tir.take() {
            if let Err(e) = t.destroy() {
                core::mem::forget(self.rq.take());
                core::mem::forget(self.td.take());
                return Err(e);
            }
        }
        if let Some(q) = self.rq.take() {
            if let Err(e) = q.destroy() {
                core::mem::forget(self.td.take());
                return Err(e);
            }
        }
        match self.td.take() {
            Some(td) => td.destroy(),
            None => Ok(()),
        }
    }
}

impl<P: Platform + 'static, S: Share> Drop for RawParts<P, S> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            log::error!("destroying a raw packet QP's objects: {e}");
        }
    }
}

/// The smallest inline header a raw packet send must carry on this device,
/// as rdma-core's `eth_min_inline_size`: 0 when the Ethernet capabilities
/// say no inline is required (`wqe_inline_mode` 2) or the NIC vport
/// context's `min_wqe_inline_mode` is none (`wqe_inline_mode` 1), else
/// [`ETH_L2_INLINE_HEADER_SIZE`] (Linux reports the mode, rdma-core
/// inlines L2 headers for any mode but none).
pub(crate) fn eth_min_inline<P: Platform>(hca: &crate::hca::Hca<P>) -> Result<u16> {
    let Some(eth) = hca.caps().ethernet.as_ref() else {
        return Ok(ETH_L2_INLINE_HEADER_SIZE);
    };
    let mode = match eth
        .cur
        .get(PerProtocolNetworkingOffloadCaps::wqe_inline_mode)
    {
        // MLX5_CAP_INLINE_MODE_L2.
        0 => return Ok(ETH_L2_INLINE_HEADER_SIZE),
        // MLX5_CAP_INLINE_MODE_VPORT_CONTEXT.
        1 => hca
            .nic_vport_context()?
            .get(firmware_cmds::vport::NicVportContext::min_wqe_inline_mode),
        // MLX5_CAP_INLINE_MODE_NOT_REQUIRED.
        _ => INLINE_MODE_NONE,
    };
    Ok(if mode == INLINE_MODE_NONE {
        0
    } else {
        ETH_L2_INLINE_HEADER_SIZE
    })
}

impl<P: Platform + 'static, S: Share> Qp<P, S> {
    /// Creates a raw packet QP (see the module documentation).
    pub(super) fn create_raw(
        pd: &impl Handle<Pd<P, S>, Share = S>,
        init: &QpInitAttr<P, S>,
    ) -> Result<Self> {
        let this: &Pd<P, S> = pd;
        let ctx: &Context<P, S> = this.context();
        let hca = ctx.hca();
        let dev = *ctx.query_device();
        let caps = hca.caps();
        if caps.link_layer() != LinkLayer::Ethernet {
            return Err(Error::Unsupported(
                "raw packet QPs on an InfiniBand port (raw packet QPs need an Ethernet port)",
            ));
        }
        let Some(eth) = caps.ethernet.as_ref().map(|e| e.cur.clone()) else {
            return Err(Error::Unsupported(
                "raw packet QPs: the device has no Ethernet offloads (eth_net_offloads 0)",
            ));
        };
        if dev.cqe_version != 1 {
            // Their receive CQEs carry the flow tag where a CQE of version
            // 0 names the queue: only the user index can route them.
            return Err(Error::Unsupported(
                "raw packet QPs with CQE version 0 (their receive CQEs name no queue)",
            ));
        }
        if init.srq.is_some() {
            return Err(Error::InvalidArgument {
                arg: "srq",
                reason: "a raw packet QP receives through its own RQ, not an SRQ",
            });
        }
        let flags = init.create_flags;
        let known = QpCreateFlags::SCATTER_FCS
            | QpCreateFlags::CVLAN_STRIPPING
            | QpCreateFlags::BLOCK_SELF_MCAST_LB;
        if flags.0 & !known.0 != 0 {
            return Err(Error::InvalidAttribute {
                attr: "create_flags",
                value: u64::from(flags.0),
                reason: "unknown or unsupported create flags for a raw packet QP",
            });
        }
        if flags.contains(QpCreateFlags::BLOCK_SELF_MCAST_LB)
            && !caps.general().get(CmdHcaCap::block_lb_mc)
        {
            return Err(Error::Unsupported(
                "blocking multicast loopback (capability block_lb_mc is 0)",
            ));
        }
        if flags.contains(QpCreateFlags::CVLAN_STRIPPING)
            && !eth.get(PerProtocolNetworkingOffloadCaps::vlan_cap)
        {
            return Err(Error::InvalidAttribute {
                attr: "create_flags",
                value: u64::from(flags.0),
                reason: "CVLAN stripping without the device's vlan_cap",
            });
        }
        if flags.contains(QpCreateFlags::SCATTER_FCS)
            && !eth.get(PerProtocolNetworkingOffloadCaps::scatter_fcs)
        {
            return Err(Error::InvalidAttribute {
                attr: "create_flags",
                value: u64::from(flags.0),
                reason: "scatter FCS without the device's scatter_fcs capability",
            });
        }
        let same = |c: &Cq<P, S>| core::ptr::eq::<Context<P, S>>(&**c.context(), ctx);
        if !same(&init.send_cq) || !same(&init.recv_cq) {
            return Err(Error::InvalidArgument {
                arg: "send_cq/recv_cq",
                reason: "the CQs belong to another context",
            });
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
        let qcaps = QpCaps {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
            send_ops: None,
        };
        let mut geometry =
            QpGeometry::new(QpType::RawPacket, &qcaps, ctx.limits()).map_err(Error::DataPath)?;
        if geometry.sq.is_none() && geometry.rq.is_none() {
            return Err(Error::InvalidArgument {
                arg: "cap",
                reason: "a raw packet QP needs a send or a receive queue",
            });
        }
        // The send ring moved to the next page boundary (see the module
        // documentation).
        let mut layout = geometry.layout;
        if let (Some(_), Some(rq)) = (&geometry.sq, &geometry.rq) {
            let pad = rq.bytes().next_multiple_of(PAS_PAGE_SIZE) - rq.bytes();
            let meta_len = layout.total_bytes - layout.meta_offset;
            layout.sq_offset += pad;
            layout.ring_bytes += pad;
            layout.dbr_offset = layout.ring_bytes.next_multiple_of(64);
            layout.meta_offset = layout.dbr_offset + 64;
            layout.total_bytes = layout.meta_offset + meta_len;
        }
        geometry.layout = layout;
        let eth_min = eth_min_inline(hca)?;
        let ts = |f| default_ts_format(hca.caps().general().get(f));
        let (sq_ts, rq_ts) = (ts(CmdHcaCap::sq_ts_format), ts(CmdHcaCap::rq_ts_format));

        // User indices: the SQ's (the QP's), and the RQ's.
        let uidx = ctx.alloc_user_index()?;
        let recv_uidx = if geometry.sq.is_some() && geometry.rq.is_some() {
            match ctx.alloc_user_index() {
                Ok(u) => u,
                Err(e) => {
                    ctx.free_user_index(uidx);
                    return Err(e);
                }
            }
        } else {
            uidx
        };
        let free_uidx = || {
            ctx.free_user_index(uidx);
            if recv_uidx != uidx {
                ctx.free_user_index(recv_uidx);
            }
        };
        let cqe_v1 = dev.cqe_version == 1;
        let own_uar = if init.blueflame {
            match hca.alloc_uar() {
                Ok(u) => Some(u.rehome(hca.clone())),
                Err(e) => {
                    free_uidx();
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
        let region = match hca.dma_alloc(
            layout.total_bytes,
            PAS_PAGE_SIZE,
            DmaUse::Queues,
            "allocating a raw packet QP",
        ) {
            Ok(r) => r,
            Err(e) => {
                drop(own_uar);
                free_uidx();
                return Err(e);
            }
        };
        let mut parts = RawParts {
            tir: None,
            rq: None,
            sq: None,
            tis: None,
            td: None,
            wq_state: WQ_STATE_RST,
            flags,
            rate: None,
        };
        let dbr = region.iova() + layout.dbr_offset as u64;
        let iova = region.iova();
        let built = (|| -> Result<()> {
            let td = hca.alloc_transport_domain()?.rehome(hca.clone());
            let tdn = td.number();
            parts.td = Some(td);
            if let Some(sq) = &geometry.sq {
                let tis = hca.create_tis(tdn)?.rehome(hca.clone());
                let tisn = tis.number();
                parts.tis = Some(tis);
                let wq = Wq::new()
                    .with(Wq::wq_type, WQ_TYPE_CYCLIC)?
                    .with(Wq::pd, this.number().0)?
                    .with(Wq::uar_page, uar_number.0)?
                    .with(Wq::dbr_addr, dbr)?
                    .with(Wq::log_wq_stride, 6)?
                    .with(Wq::log_wq_pg_sz, 0)?
                    .with(Wq::log_wq_sz, sq.log_sq_size())?;
                let sqc = Sqc::new()
                    .with(Sqc::flush_in_error_en, true)?
                    .with(Sqc::state, WQ_STATE_RST)?
                    .with(Sqc::ts_format, sq_ts)?
                    .with(Sqc::user_index, if cqe_v1 { uidx } else { 0 })?
                    .with(Sqc::cqn, init.send_cq.number().0)?
                    .with(Sqc::tis_lst_sz, 1)?
                    .with(Sqc::tis_num_0, tisn.0)?
                    .with(Sqc::wq, wq)?;
                let input = CreateSqIn::new().with(CreateSqIn::ctx, sqc)?;
                let o =
                    queue::create_at(iova + layout.sq_offset as u64, sq.bytes(), &input, |p| {
                        hca.create_sq(p)
                    })?;
                parts.sq = Some(o.rehome(hca.clone()));
            }
            if let Some(rq) = &geometry.rq {
                let wq = Wq::new()
                    .with(Wq::wq_type, WQ_TYPE_CYCLIC)?
                    .with(Wq::pd, this.number().0)?
                    .with(Wq::dbr_addr, dbr)?
                    .with(Wq::log_wq_stride, rq.log_rq_stride() + 4)?
                    .with(Wq::log_wq_pg_sz, 0)?
                    .with(Wq::log_wq_sz, rq.log_rq_size())?;
                let rqc = Rqc::new()
                    .with(Rqc::vsd, !flags.contains(QpCreateFlags::CVLAN_STRIPPING))?
                    .with(Rqc::scatter_fcs, flags.contains(QpCreateFlags::SCATTER_FCS))?
                    .with(Rqc::mem_rq_type, RQC_MEM_RQ_TYPE_MEMORY_RQ_INLINE)?
                    .with(Rqc::state, WQ_STATE_RST)?
                    .with(Rqc::flush_in_error_en, true)?
                    .with(Rqc::ts_format, rq_ts)?
                    .with(Rqc::user_index, if cqe_v1 { recv_uidx } else { 0 })?
                    .with(Rqc::cqn, init.recv_cq.number().0)?
                    .with(Rqc::counter_set_id, init.counter_set.map_or(0, |c| c.0))?
                    .with(Rqc::wq, wq)?;
                let input = CreateRqIn::new().with(CreateRqIn::ctx, rqc)?;
                let o =
                    queue::create_at(iova + layout.rq_offset as u64, rq.bytes(), &input, |p| {
                        hca.create_rq(p)
                    })?;
                let rqn = o.number();
                parts.rq = Some(o.rehome(hca.clone()));
                let tirc = Tirc::new()
                    .with(Tirc::disp_type, TIRC_DISP_TYPE_DIRECT)?
                    .with(Tirc::inline_rqn, rqn.0)?
                    .with(Tirc::transport_domain, tdn.0)?
                    .with(
                        Tirc::self_lb_block,
                        if flags.contains(QpCreateFlags::BLOCK_SELF_MCAST_LB) {
                            TIRC_SELF_LB_BLOCK_BLOCK_MULTICAST
                        } else {
                            0
                        },
                    )?;
                parts.tir = Some(hca.create_tir_object(tirc)?.rehome(hca.clone()));
            }
            Ok(())
        })();
        if let Err(e) = built {
            let destroyed = parts.destroy();
            queue::release_after_destroy(hca, region, destroyed.is_ok());
            drop(own_uar);
            free_uidx();
            return Err(e);
        }
        let sqn = parts.sq.as_ref().map(|s| s.number());
        let rqn = parts.rq.as_ref().map(|r| r.number());
        let qpn = Qpn(match (sqn, rqn) {
            (Some(s), _) => s.0,
            (None, Some(r)) => r.0,
            // A queue exists (checked above).
            (None, None) => 0,
        });
        let bf = super::create::bf_config(hca, uar_offset, own_uar.is_some());
        let cfg = QpConfig {
            qp_type: QpType::RawPacket,
            qpn: qpn.0,
            geometry,
            atomics: false,
            sq_sig_all: init.sq_sig_all,
            eth_min_inline: eth_min,
        };
        let fail = |e: Error, mut parts: RawParts<P, S>, region: DmaRegion| {
            let destroyed = parts.destroy();
            queue::release_after_destroy(hca, region, destroyed.is_ok());
            free_uidx();
            e
        };
        let mmio = match ctx.map_bar() {
            Ok(m) => m,
            Err(e) => return Err(fail(e, parts, region)),
        };
        let dp = match verbs_core::Qp::new(region, Some((mmio, bf)), &cfg) {
            Ok(d) => d,
            Err((e, p)) => return Err(fail(Error::DataPath(e), parts, p.region)),
        };
        Self::assemble(
            pd,
            init,
            super::create::Backing::Raw(parts),
            (uidx, recv_uidx),
            own_uar,
            dp,
            cfg,
            bf,
        )
    }

    /// Registers a raw packet QP's completion handles: the send queue's
    /// under the QP's user index on the send CQ, the receive queue's (which
    /// the device's CQEs name by the RQ number) under the receive user
    /// index on the receive CQ.
    pub(super) fn attach_raw(&mut self) -> Result<()> {
        let csum = self
            .pd
            .context()
            .query_device()
            .has_device_cap(crate::verbs::attr::DEVICE_RAW_IP_CSUM);
        // IBV_SEND_IP_CSUM refused where the device has no checksum
        // offload (rdma-core's MLX5_CSUM_SUPPORT_RAW_OVER_ETH); set again
        // for the queues a reset starts over.
        if let Some(sq) = self.dp.as_mut().and_then(|d| d.sq().ok()) {
            sq.set_ip_csum_offload(csum);
        }
        let Some(dp) = self.dp.as_ref() else {
            return Ok(());
        };
        if self.cfg.geometry.sq.is_some() {
            let h = dp.completions(true, false, None).map_err(Error::DataPath)?;
            self.send_cq.attach(self.uidx, h)?;
        }
        if let Some(rqn) = self.rq_number() {
            let mut h = dp
                .completions(false, true, None)
                .map_err(Error::DataPath)?
                .for_queue_number(rqn.0)
                .ok_or(Error::DataPath(verbs_core::Error::NoSuchQueue(
                    "receive queue",
                )))?;
            // IBV_WC_IP_CSUM_OK only where the device checks checksums
            // (rdma-core's MLX5_RX_CSUM_VALID with IBV_DEVICE_RAW_IP_CSUM).
            h.set_rx_csum(csum);
            self.recv_cq.attach(self.recv_uidx, h)?;
        }
        Ok(())
    }

    /// A raw packet QP's transition (called by [`modify`](Self::modify)
    /// once the transition and its attribute mask are known valid).
    pub(super) fn modify_raw(
        &mut self,
        cur: QpState,
        next: QpState,
        attr: &QpAttr,
        given: QpAttrMask,
    ) -> Result<()> {
        if given.contains(QpAttrMask::PORT) {
            let info = self.pd.context().hca().info();
            let eth = info
                .ports
                .iter()
                .find(|p| p.port == attr.port_num)
                .is_some_and(|p| p.link_layer == LinkLayer::Ethernet);
            if !eth {
                return Err(Error::InvalidAttribute {
                    attr: "port_num",
                    value: u64::from(attr.port_num),
                    reason: "a raw packet QP needs an Ethernet port",
                });
            }
        }
        let Some(raw) = self.raw.as_mut() else {
            return Err(Error::Unsupported("not a raw packet QP"));
        };
        match (cur, next) {
            (_, QpState::Reset) => {
                raw.move_wqs(WQ_STATE_RST)?;
                self.state = QpState::Reset;
                self.reset_queues()?;
            }
            (_, QpState::Err) => raw.move_wqs(WQ_STATE_ERR)?,
            (QpState::Reset, QpState::Init) => raw.move_wqs(WQ_STATE_RDY)?,
            (QpState::Init, QpState::Rtr) => {
                if let Some(dp) = self.dp.as_mut() {
                    if let Ok(rq) = dp.rq() {
                        rq.set_doorbell_record_enabled(true);
                    }
                }
            }
            // RTR to RTS, RTS to RTS: the rate limit, when given.
            (QpState::Rtr | QpState::Rts, QpState::Rts)
                if given.contains(QpAttrMask::RATE_LIMIT) =>
            {
                raw.set_rate(RateLimit::kbps(attr.rate_limit))?;
            }
            // INIT to INIT, and RTR to RTS or RTS to RTS without a rate:
            // nothing to change.
            _ => {}
        }
        self.state = next;
        if given.contains(QpAttrMask::PORT) {
            self.port = attr.port_num;
        }
        Ok(())
    }

    /// The attributes of a raw packet QP as the driver set them (its
    /// state is its work queues', which only the driver moves but for an
    /// error).
    pub(super) fn query_raw(&self) -> QpAttr {
        let mut a = QpAttr::new();
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a.port_num = self.port;
        a.cap = self.cap;
        a.rate_limit = self.raw.as_ref().map_or(0, |r| r.rate().rate_kbps);
        a
    }

    /// Paces a raw packet QP's sends at `rl` (`ibv_modify_qp_rate_limit`;
    /// rate 0: no pacing), through the device's packet pacing rate-limit
    /// table (SET_PP_RATE_LIMIT, then MODIFY_SQ naming the entry; SQs at
    /// the same parameters share one). The QP must be in RTS, as
    /// libibverbs' RTS to RTS modify it makes.
    ///
    /// Typed errors before any command: another QP type or one without a
    /// send queue, a QP not in RTS, a device that does not pace
    /// ([`Error::Unsupported`]), a rate outside the device's range, or a
    /// burst or typical size the device cannot take
    /// ([`Error::InvalidAttribute`]), a full table
    /// ([`Error::CapacityExceeded`]). A refused change keeps the old rate.
    pub fn set_rate_limit(&mut self, rl: RateLimit) -> Result<()> {
        let state = self.state;
        let Some(raw) = self.raw.as_mut() else {
            return Err(Error::Unsupported(
                "a rate limit on a QP that is not a raw packet QP",
            ));
        };
        if state != QpState::Rts {
            return Err(Error::InvalidAttribute {
                attr: "rate_limit",
                value: u64::from(rl.rate_kbps),
                reason: "the QP is not in RTS",
            });
        }
        raw.set_rate(rl)
    }

    /// A raw packet QP's send rate (rate 0: not paced; also for other
    /// QPs).
    pub fn rate_limit(&self) -> RateLimit {
        self.raw.as_ref().map(|r| r.rate()).unwrap_or_default()
    }

    /// The send queue's number (CREATE_SQ) of a raw packet QP with a send
    /// queue: what its send completions carry.
    pub fn sq_number(&self) -> Option<Sqn> {
        self.raw.as_ref()?.sq.as_ref().map(|s| s.number())
    }

    /// The receive queue's number (CREATE_RQ) of a raw packet QP with a
    /// receive queue. (Its receive completions carry the flow tag of the
    /// rule that steered the frame where the QP number would be, and
    /// report it as `WorkCompletion::qp_num`, as rdma-core's mlx5 provider
    /// does.)
    pub fn rq_number(&self) -> Option<Rqn> {
        self.raw.as_ref()?.rq.as_ref().map(|r| r.number())
    }

    /// The direct TIR of a raw packet QP's receive queue, which flow rules
    /// deliver into this QP through. Rules made by
    /// [`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule)
    /// keep the receive side alive past the QP; a rule made with the
    /// number alone ([`FlowDest::Receivers`](crate::flow::FlowDest)) does
    /// not, and must then be deleted before the QP is destroyed.
    pub fn tir(&self) -> Option<Tirn> {
        self.raw.as_ref()?.tir.as_ref().map(|t| t.number())
    }

    /// Posts a send work request of a raw packet QP with a VLAN tag
    /// inserted (`vlan`: the TCI and TPID; verbs-core's
    /// `SendQueue::post_send_vlan`, Linux mlx5e's encoding: the tag goes
    /// into the inline headers after the MAC addresses). Checked as
    /// [`post_send`](Self::post_send) checks; refused with
    /// [`Error::InvalidWorkRequest`] on other QPs and without the device's
    /// `vlan_cap` (the device inserts no tag it cannot).
    pub fn post_send_vlan(&mut self, wr: &SendWr<'_>, vlan: verbs_core::VlanInsert) -> Result<()> {
        let refuse = |reason| Error::InvalidWorkRequest { index: 0, reason };
        if !self.state.can_post_send() {
            return Err(refuse(WrError::WrongState {
                queue: "send queue",
                state: self.state,
            }));
        }
        let vlan_cap = self.pd.context().query_device().raw_packet_caps
            & crate::verbs::attr::RAW_PACKET_CAP_CVLAN_STRIPPING
            != 0;
        if self.raw.is_none() || !vlan_cap {
            return Err(refuse(WrError::DataPath(verbs_core::Error::EthSegment(
                "VLAN insertion needs a raw packet QP on a device with vlan_cap",
            ))));
        }
        check_send_sges(&self.pd, &mut self.cache, self.sge_check, wr).map_err(refuse)?;
        let sq = self
            .dp()
            .and_then(|d| d.sq().map_err(WrError::DataPath))
            .map_err(refuse)?;
        sq.post_send_vlan(wr, vlan)
            .map_err(|e| refuse(WrError::DataPath(e)))
    }

    /// The create flags of a raw packet QP (`NONE` for other QPs).
    pub fn create_flags(&self) -> QpCreateFlags {
        self.raw.as_ref().map_or(QpCreateFlags::NONE, |r| r.flags)
    }

    /// The inline header bytes every send of this QP must carry
    /// ([`SendWr::eth_headers`] at least this long), from the device's
    /// inline mode; 0 for other QPs.
    pub fn eth_min_inline(&self) -> u16 {
        self.cfg.eth_min_inline
    }
}
