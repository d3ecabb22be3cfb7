//! A QP's state machine: modify, query, drain and its events.

use super::*;
use crate::hca::Hca;

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

impl<P: Platform + 'static, S: Share> Qp<P, S> {
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
        if self.raw.is_some() {
            self.check_values(attr, given)?;
            return self.modify_raw(cur, next, attr, given);
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
        if self.raw.is_none() && matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
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
        if self.raw.is_some() {
            return Ok(self.query_raw());
        }
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
    pub(super) fn reset_queues(&mut self) -> Result<()> {
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
        let raw_rq = self.rq_number().is_some();
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
            #[cfg(not(feature = "cache-maintenance"))]
            if let (Some(rq), true) = (rq, has_rq) {
                let r = RecvWr {
                    wr_id: DRAIN_WR_ID,
                    sgl: &[],
                };
                if let Err(e) = rq.post_recv(&r) {
                    log::debug!("QP {qpn:#x} drain: no receive marker ({e})");
                }
            }
            // Without coherent DMA: the marker WQE, then the record, cleaned.
            #[cfg(feature = "cache-maintenance")]
            let _ = rq;
            #[cfg(feature = "cache-maintenance")]
            if let (true, Ok((rq, mmio))) = (has_rq, d.rq_synced()) {
                let r = RecvWr {
                    wr_id: DRAIN_WR_ID,
                    sgl: &[],
                };
                if let Err(e) = rq.post_recv_synced(&r, mmio) {
                    log::debug!("QP {qpn:#x} drain: no receive marker ({e})");
                }
            }
        }
        let hca: S::Ref<Hca<P>> = self.pd.context().hca().clone();
        let p = hca.platform();
        let deadline = Deadline::start(p, timeout);
        let mut wc = [WorkCompletion::default(); 16];
        let mut spins = 0u32;
        // On interrupts: the interrupt count read (and the CQs armed) before
        // the current look, when both CQs report to one vector.
        let mut armed: Option<(u16, u64)> = None;
        loop {
            let mut got = 0;
            let cqs: [Option<&Cq<P, S>>; 2] = [
                Some(&self.send_cq),
                (!self.same_cq()).then_some(&self.recv_cq),
            ];
            for cq in cqs.into_iter().flatten() {
                let n = cq.poll(&mut wc)?;
                got += n;
                for w in &wc[..n] {
                    // (A raw packet QP's receive completions carry the
                    // flow tag where the QP number would be: its receive
                    // marker is known by its work request id.)
                    let mine = w.qp_num == qpn || (raw_rq && w.opcode == WcOpcode::Recv);
                    if !(w.wr_id == DRAIN_WR_ID && mine) {
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
                service(&hca)?;
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
}
