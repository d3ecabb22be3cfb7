//! The requester: fetching and checking send WQEs, building request
//! packets, and for RC the outstanding-WQE list, acknowledgements, NAKs,
//! retransmission and its timers; requester CQEs; the error state and its
//! flushes.

use std::sync::Arc;
use std::time::Duration;

use super::cqe::{Cqe, op as cqe_op, syndrome as syn};
use super::mem::{self, Access};
use super::packet::{self, Bth, Roce, Route, aeth, op as ib};
use super::wqe::{self, SendWqe, Sge, SqKind, opcode};
use super::{Pending, QpInfo, npkts, psn_le};
use crate::device::{Device, Timer};
use crate::fw::QpState;

/// Messages above this size have their memory checked before the frame is
/// allocated.
pub(crate) const LARGE: u64 = 1 << 20;

/// A WQE that cannot run: why, and what the error CQE names.
pub(crate) struct BadWqe {
    pub(crate) reason: String,
    pub(crate) opcode: u8,
    pub(crate) nbb: u16,
}

/// The ACK timeout: 4.096 µs × 2^`ack_timeout` (None: 0 = infinite).
fn ack_timeout(t: u8) -> Option<Duration> {
    (t != 0).then(|| Duration::from_nanos(4096u64 << t.min(31)))
}

/// The RNR NAK timer (IBA table 45), in microseconds.
pub(crate) fn rnr_delay(code: u8) -> Duration {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    Duration::from_micros(US[usize::from(code & 31)])
}

fn ib_opcode(transport: u8, w: &SendWqe) -> u8 {
    transport
        | match w.opcode {
            opcode::SEND => ib::SEND_ONLY,
            opcode::SEND_IMM => ib::SEND_ONLY_IMM,
            opcode::RDMA_WRITE => ib::WRITE_ONLY,
            opcode::RDMA_WRITE_IMM => ib::WRITE_ONLY_IMM,
            opcode::RDMA_READ => ib::READ_REQUEST,
            opcode::ATOMIC_CS => ib::COMPARE_SWAP,
            _ => ib::FETCH_ADD,
        }
}

fn qp_kind(st: u8) -> SqKind {
    match st {
        0 => SqKind::Rc,
        1 => SqKind::Uc,
        _ => SqKind::Ud,
    }
}

impl Device {
    /// A send doorbell for a QP.
    pub(crate) fn qp_doorbell(&mut self, qpn: u32, index: u16) {
        let Some(state) = self.fw.objs.qp(qpn).map(|q| q.state) else {
            return;
        };
        let Some(info) = self.engine.qps.get(&qpn).map(|e| e.info.clone()) else {
            self.ignored_doorbells.push(format!(
                "send doorbell for QP {qpn:#x} in state {state:?}: WQEs wait"
            ));
            return;
        };
        if let Ok(w) = self.read_dbr_word(info.dbr_addr + 4, &format!("QP {qpn:#x}")) {
            let dbr = w as u16;
            let size = 1u32 << info.log_sq_size;
            let ahead = u32::from(dbr.wrapping_sub(index));
            if ahead == 0 || ahead > size {
                self.datapath.doorbell_mismatches += 1;
                self.datapath.note(format!(
                    "QP {qpn:#x}: doorbell names WQE {index:#x}, the doorbell record's send counter is {dbr:#x}"
                ));
            }
        }
        match state {
            QpState::Rts => self.qp_kick(qpn),
            QpState::Err | QpState::Sqer => self.qp_flush(qpn),
            s => self.ignored_doorbells.push(format!(
                "send doorbell for QP {qpn:#x} in state {s:?}: WQEs wait for RTS"
            )),
        }
    }

    /// Executes posted WQEs of a QP in RTS as far as the doorbell record,
    /// fences, the initiator depth and RNR waits allow.
    pub(crate) fn qp_kick(&mut self, qpn: u32) {
        let Some(info) = self.engine.qps.get(&qpn).map(|e| e.info.clone()) else {
            return;
        };
        if info.no_sq {
            return;
        }
        let Ok(dbr) = self.read_dbr_word(info.dbr_addr + 4, &format!("QP {qpn:#x}")) else {
            return;
        };
        let dbr = dbr as u16;
        let size = 1u16 << info.log_sq_size.min(15);
        let kind = qp_kind(info.st);
        loop {
            if self.fw.objs.qp(qpn).map(|q| q.state) != Some(QpState::Rts) {
                return;
            }
            let Some(e) = self.engine.qps.get(&qpn) else {
                return;
            };
            if e.rnr_wait || e.sq_next == dbr {
                return;
            }
            if e.pending.back().is_some_and(|p| p.failed.is_some()) {
                return;
            }
            let oldest = e.pending.front().map_or(e.sq_next, |p| p.wqe.index);
            if e.sq_next.wrapping_sub(oldest) >= size || dbr.wrapping_sub(e.sq_next) > size {
                self.datapath.note(format!(
                    "QP {qpn:#x}: doorbell record {dbr:#x} runs more than the send queue ({size} WQEBBs) ahead of {:#x}",
                    e.sq_next
                ));
                return;
            }
            let idx = e.sq_next;
            let (reads_out, sra) = (e.reads_out, 1u32 << info.log_sra_max.min(16));
            let w = match self.read_send_wqe(
                &info.pas,
                info.log_page_size,
                info.sq_offset(),
                info.log_sq_size,
                idx,
                kind,
                qpn,
            ) {
                Ok(w) => w,
                Err(bad) => {
                    self.datapath
                        .note(format!("QP {qpn:#x} WQE {idx:#x}: {}", bad.reason));
                    if let Some(e) = self.engine.qps.get_mut(&qpn) {
                        e.sq_next = idx.wrapping_add(bad.nbb);
                    }
                    let w = SendWqe {
                        index: idx,
                        nbb: bad.nbb,
                        opcode: bad.opcode,
                        ..SendWqe::default()
                    };
                    self.requester_fail(&info, w, syn::LOCAL_QP_OP);
                    return;
                }
            };
            if (w.fenced() && reads_out > 0) || (w.is_read_or_atomic() && reads_out >= sra) {
                return;
            }
            if let Some(e) = self.engine.qps.get_mut(&qpn) {
                e.sq_next = idx.wrapping_add(w.nbb);
            }
            self.datapath.wqes += 1;
            if info.st == 0 {
                self.rc_post(&info, w);
            } else {
                self.unreliable_post(&info, w);
            }
        }
    }

    /// Fetches and decodes the send WQE at counter `idx`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_send_wqe(
        &mut self,
        pas: &[u64],
        lps: u8,
        base: u64,
        log_size: u8,
        idx: u16,
        kind: SqKind,
        n: u32,
    ) -> Result<SendWqe, BadWqe> {
        let mask = (1u32 << log_size.min(15)) - 1;
        let mut buf = [0u8; 1024];
        let what = || format!("{kind:?} send queue {n:#x} WQE {idx:#x}");
        let slot = |i: u16| base + u64::from(u32::from(idx.wrapping_add(i)) & mask) * 64;
        // A BlueFlame copy being executed stands in for the queue memory.
        let raw = kind == SqKind::Raw;
        if let Some(b) = self.bf_wqebb(raw, n, idx, 0) {
            buf[..64].copy_from_slice(&b);
        } else if self
            .read_queue(pas, lps, slot(0), &mut buf[..64], &what)
            .is_err()
        {
            return Err(BadWqe {
                reason: "the WQE could not be read".into(),
                opcode: 0,
                nbb: 1,
            });
        }
        let (_, op, _, ds) = wqe::ctrl_fields(&buf);
        let nbb = wqe::wqebbs(ds);
        if u32::from(nbb) > mask + 1 {
            return Err(BadWqe {
                reason: format!("ds {ds} is larger than the send queue"),
                opcode: op,
                nbb: 1,
            });
        }
        for i in 1..nbb {
            let o = usize::from(i) * 64;
            if let Some(b) = self.bf_wqebb(raw, n, idx, i) {
                buf[o..o + 64].copy_from_slice(&b);
            } else if self
                .read_queue(pas, lps, slot(i), &mut buf[o..o + 64], &what)
                .is_err()
            {
                return Err(BadWqe {
                    reason: "the WQE could not be read".into(),
                    opcode: op,
                    nbb,
                });
            }
        }
        let len = (usize::from(ds) * 16).max(16);
        wqe::parse_send(&buf[..len], kind, idx, n).map_err(|reason| BadWqe {
            reason,
            opcode: op,
            nbb,
        })
    }

    /// A WQE failed locally before anything was sent: for RC it completes
    /// in order behind what is outstanding; for UD/UC at once.
    fn requester_fail(&mut self, info: &Arc<QpInfo>, w: SendWqe, s: u8) {
        if info.st == 0 {
            if let Some(e) = self.engine.qps.get_mut(&info.qpn) {
                e.pending.push_back(Pending {
                    wqe: w,
                    first_psn: 0,
                    npsn: 0,
                    done: true,
                    failed: Some(s),
                    byte_cnt: 0,
                    acked: 0,
                    read_base: 0,
                    read_gap: false,
                });
            }
            self.rc_complete(info.qpn);
        } else {
            self.req_err_cqe(info, w.opcode, w.index, s);
            self.qp_error(info.qpn, true, None);
        }
    }

    /// A requester CQE (success).
    pub(crate) fn req_cqe(&mut self, info: &QpInfo, w: &SendWqe, byte_cnt: u32) {
        let c = Cqe {
            opcode: cqe_op::REQ,
            qpn: info.qpn,
            wqe_opcode: w.opcode,
            wqe_counter: w.index,
            srqn_uidx: Self::uidx(info, None),
            byte_cnt,
            ..Cqe::default()
        };
        self.emit_cqe(info.cqn_snd, c);
    }

    /// A requester error CQE.
    pub(crate) fn req_err_cqe(&mut self, info: &QpInfo, op: u8, index: u16, s: u8) {
        self.req_err_cqe_to(info.cqn_snd, info.qpn, Self::uidx(info, None), op, index, s);
    }

    /// A requester error CQE for queue `n` on CQ `cqn`.
    pub(crate) fn req_err_cqe_to(
        &mut self,
        cqn: u32,
        n: u32,
        uidx: u32,
        op: u8,
        index: u16,
        s: u8,
    ) {
        let c = Cqe {
            opcode: cqe_op::REQ_ERR,
            qpn: n,
            wqe_opcode: op,
            wqe_counter: index,
            srqn_uidx: uidx,
            syndrome: s,
            ..Cqe::default()
        };
        self.emit_cqe(cqn, c);
    }

    /// Gathers a WQE's data (inline segments and lkey-checked data
    /// segments) into `dst`. Errors are CQE syndromes.
    pub(crate) fn gather_sg(
        &mut self,
        pd: u32,
        sg: &[Sge],
        dst: &mut [u8],
        who: u32,
    ) -> Result<(), u8> {
        self.gather_sg_at(pd, sg, 0, dst, who)
    }

    /// Gathers `dst.len()` bytes of a WQE's data from byte `skip` of the
    /// message on (one packet of a segmented message).
    pub(crate) fn gather_sg_at(
        &mut self,
        pd: u32,
        sg: &[Sge],
        mut skip: u64,
        dst: &mut [u8],
        who: u32,
    ) -> Result<(), u8> {
        let mut o = 0usize;
        let mut chunks = Vec::new();
        for s in sg {
            if o == dst.len() {
                break;
            }
            let sl = s.len();
            if skip >= sl {
                skip -= sl;
                continue;
            }
            let n = ((sl - skip) as usize).min(dst.len() - o);
            let d = &mut dst[o..o + n];
            match s {
                Sge::Inline(v) => {
                    d.copy_from_slice(&v[skip as usize..skip as usize + n]);
                }
                Sge::Data { addr, lkey, .. } => {
                    chunks.clear();
                    let a = addr.wrapping_add(skip);
                    if let Err(e) = mem::translate(
                        &self.fw.objs,
                        *lkey,
                        pd,
                        a,
                        n as u64,
                        Access::LocalRead,
                        &mut chunks,
                    ) {
                        self.datapath.note(format!(
                            "QPN {who:#x}: gather lkey {lkey:#x} addr {a:#x} len {n:#x}: {e}"
                        ));
                        return Err(syn::LOCAL_PROT);
                    }
                    mem::gather(&mut self.iommu, &chunks, d, &|| {
                        format!("QPN {who:#x} gather (lkey {lkey:#x})")
                    })
                    .map_err(|()| syn::LOCAL_PROT)?;
                }
            }
            skip = 0;
            o += n;
        }
        if o != dst.len() {
            return Err(syn::LOCAL_LENGTH);
        }
        Ok(())
    }

    /// Before a large message is allocated: its keys and their memory must
    /// be valid (a key over a huge range must not make the emulator
    /// allocate the range before the DMA faults). An unmapped chunk is an
    /// IOMMU fault, as the DMA read would be.
    pub(crate) fn precheck_sg(&mut self, pd: u32, sg: &[Sge], who: u32) -> Result<(), u8> {
        let total: u64 = sg.iter().map(Sge::len).sum();
        if total <= LARGE {
            return Ok(());
        }
        let mut chunks = Vec::new();
        for s in sg {
            if let Sge::Data { addr, len, lkey } = s {
                mem::translate(
                    &self.fw.objs,
                    *lkey,
                    pd,
                    *addr,
                    *len,
                    Access::LocalRead,
                    &mut chunks,
                )
                .map_err(|_| syn::LOCAL_PROT)?;
            }
        }
        self.precheck_chunks(&chunks, &format!("QPN {who:#x} gather"))
            .map_err(|()| syn::LOCAL_PROT)
    }

    /// Checks that IOVA chunks are mapped; records an IOMMU fault for the
    /// first that is not.
    pub(crate) fn precheck_chunks(
        &mut self,
        chunks: &[(u64, usize)],
        what: &str,
    ) -> Result<(), ()> {
        for &(iova, n) in chunks {
            if !self.iommu.is_mapped(iova, n) {
                self.iommu.fault(crate::FaultKind::Read, iova, n, what);
                return Err(());
            }
        }
        Ok(())
    }

    /// Builds packet `k` of an RC/UC WQE's request message, at `psn`
    /// (IBA 9.2, 9.7): a SEND or RDMA WRITE of more than one path MTU goes
    /// as FIRST, MIDDLE..., LAST packets of exactly one MTU of payload
    /// (the last one the rest), ONLY when it fits; the RETH on the first
    /// packet of a WRITE, the immediate on the last, the solicited event
    /// bit on the last; AckReq (RC) on the last packet and on every
    /// 2^`log_ack_req_freq`-th. A READ request (`k` is the first response
    /// packet it asks for: 0, or where a request sent again resumes) and
    /// an atomic are one packet.
    fn connected_packet(
        &mut self,
        info: &QpInfo,
        route: &Route,
        w: &SendWqe,
        psn: u32,
        k: u32,
    ) -> Result<Vec<u8>, u8> {
        let rc = info.st == 0;
        let transport = if rc { ib::RC } else { ib::UC };
        let len = w.len();
        let mtu = info.mtu.max(256);
        let n = npkts(len, mtu);
        let last = k + 1 >= n;
        let first = k == 0;
        let imm = matches!(w.opcode, opcode::SEND_IMM | opcode::RDMA_WRITE_IMM);
        let op = match w.opcode {
            opcode::SEND | opcode::SEND_IMM => match (first, last) {
                (true, true) if imm => ib::SEND_ONLY_IMM,
                (true, true) => ib::SEND_ONLY,
                (true, false) => ib::SEND_FIRST,
                (false, false) => ib::SEND_MIDDLE,
                (false, true) if imm => ib::SEND_LAST_IMM,
                (false, true) => ib::SEND_LAST,
            },
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => match (first, last) {
                (true, true) if imm => ib::WRITE_ONLY_IMM,
                (true, true) => ib::WRITE_ONLY,
                (true, false) => ib::WRITE_FIRST,
                (false, false) => ib::WRITE_MIDDLE,
                (false, true) if imm => ib::WRITE_LAST_IMM,
                (false, true) => ib::WRITE_LAST,
            },
            _ => ib_opcode(transport, w) & 0x1f,
        };
        let freq = 1u32 << info.log_ack_req_freq.min(16);
        let bth = Bth {
            opcode: transport | op,
            se: last
                && w.solicited()
                && matches!(
                    w.opcode,
                    opcode::SEND | opcode::SEND_IMM | opcode::RDMA_WRITE_IMM
                ),
            pkey: 0xffff,
            dqpn: info.remote_qpn,
            ackreq: rc && (last || (k + 1) % freq == 0 || w.is_read_or_atomic()),
            psn,
            ..Bth::default()
        };
        let mut ext = Vec::with_capacity(28);
        let (off, plen) = match w.opcode {
            opcode::RDMA_READ => {
                let off = (u64::from(k) * mtu).min(len);
                ext.extend_from_slice(&w.raddr.wrapping_add(off).to_be_bytes());
                ext.extend_from_slice(&w.rkey.to_be_bytes());
                ext.extend_from_slice(&((len - off) as u32).to_be_bytes());
                (0, 0)
            }
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                ext.extend_from_slice(&w.raddr.to_be_bytes());
                ext.extend_from_slice(&w.rkey.to_be_bytes());
                ext.extend_from_slice(&w.swap_add.to_be_bytes());
                ext.extend_from_slice(&w.compare.to_be_bytes());
                (0, 0)
            }
            _ => {
                if first && matches!(w.opcode, opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM) {
                    ext.extend_from_slice(&w.raddr.to_be_bytes());
                    ext.extend_from_slice(&w.rkey.to_be_bytes());
                    ext.extend_from_slice(&(len as u32).to_be_bytes());
                }
                if last && imm {
                    ext.extend_from_slice(&w.imm.to_be_bytes());
                }
                let off = u64::from(k) * mtu;
                (off, len.saturating_sub(off).min(mtu))
            }
        };
        let pd = info.pd;
        packet::build(route, &bth, &ext, plen as usize, |p| {
            self.gather_sg_at(pd, &w.sg, off, p, info.qpn)
        })
    }

    /// Posts an RC WQE: sends it (or records why it fails) and keeps it
    /// until it is acknowledged.
    fn rc_post(&mut self, info: &Arc<QpInfo>, w: SendWqe) {
        let qpn = info.qpn;
        let len = w.len();
        let fail = match w.opcode {
            opcode::NOP => None,
            opcode::ATOMIC_CS | opcode::ATOMIC_FA if len != 8 => Some(syn::LOCAL_LENGTH),
            _ if len > info.max_msg => Some(syn::LOCAL_LENGTH),
            _ if info.route.is_err() => Some(syn::LOCAL_QP_OP),
            _ => None,
        };
        if let Some(s) = fail {
            if let Err(r) = &info.route {
                self.datapath.note(format!("QP {qpn:#x}: no route: {r}"));
            }
            self.requester_fail(info, w, s);
            return;
        }
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        if w.opcode == opcode::NOP {
            e.pending.push_back(Pending {
                wqe: w,
                first_psn: 0,
                npsn: 0,
                done: true,
                failed: None,
                byte_cnt: 0,
                acked: 0,
                read_base: 0,
                read_gap: false,
            });
            self.rc_complete(qpn);
            return;
        }
        let npsn = if matches!(w.opcode, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
            1
        } else {
            npkts(len, info.mtu)
        };
        let psn = e.next_psn;
        e.next_psn = psn.wrapping_add(npsn) & 0xff_ffff;
        if w.is_read_or_atomic() {
            e.reads_out += 1;
        }
        let byte_cnt = if w.is_read_or_atomic() { len as u32 } else { 0 };
        e.pending.push_back(Pending {
            wqe: w,
            first_psn: psn,
            npsn,
            done: false,
            failed: None,
            byte_cnt,
            acked: 0,
            read_base: 0,
            read_gap: false,
        });
        let i = e.pending.len() - 1;
        self.rc_send_pending(info, i);
        self.rc_arm_timer(qpn, false);
        self.rc_complete(qpn);
    }

    /// Sends (or sends again) outstanding WQE `i`: its packets from the
    /// first one not acknowledged (go back N), or for a READ a request for
    /// the responses not received yet. A gather failure marks it failed.
    fn rc_send_pending(&mut self, info: &QpInfo, i: usize) {
        let qpn = info.qpn;
        let Some((w, first_psn, npsn, acked)) = self
            .engine
            .qps
            .get(&qpn)
            .and_then(|e| e.pending.get(i))
            .map(|p| (p.wqe.clone(), p.first_psn, p.npsn, p.acked))
        else {
            return;
        };
        let Ok(route) = &info.route else {
            return;
        };
        let route = route.clone();
        let mut r = self.precheck_sg(info.pd, &w.sg, qpn);
        if r.is_ok() {
            if w.is_read_or_atomic() {
                if let Some(p) = self
                    .engine
                    .qps
                    .get_mut(&qpn)
                    .and_then(|e| e.pending.get_mut(i))
                {
                    p.read_base = acked;
                }
                let psn = first_psn.wrapping_add(acked) & 0xff_ffff;
                r = self
                    .connected_packet(info, &route, &w, psn, acked)
                    .map(|f| self.transmit(info.port, f));
            } else {
                for k in acked..npsn.max(1) {
                    let psn = first_psn.wrapping_add(k) & 0xff_ffff;
                    match self.connected_packet(info, &route, &w, psn, k) {
                        Ok(f) => self.transmit(info.port, f),
                        Err(s) => {
                            r = Err(s);
                            break;
                        }
                    }
                }
            }
        }
        if let Err(s) = r {
            if let Some(p) = self
                .engine
                .qps
                .get_mut(&qpn)
                .and_then(|e| e.pending.get_mut(i))
            {
                p.failed = Some(s);
                p.done = true;
            }
        }
    }

    /// Completes acknowledged WQEs at the head of the outstanding list, in
    /// order; a failed one completes with its syndrome and the QP enters
    /// the error state.
    pub(crate) fn rc_complete(&mut self, qpn: u32) {
        loop {
            let Some(e) = self.engine.qps.get_mut(&qpn) else {
                return;
            };
            let info = e.info.clone();
            if !e.pending.front().is_some_and(|p| p.done) {
                return;
            }
            let p = e.pending.pop_front().expect("front checked");
            if p.wqe.is_read_or_atomic() {
                e.reads_out = e.reads_out.saturating_sub(1);
            }
            if let Some(s) = p.failed {
                self.req_err_cqe(&info, p.wqe.opcode, p.wqe.index, s);
                self.qp_error(qpn, false, None);
                return;
            }
            if p.wqe.signaled() {
                self.req_cqe(&info, &p.wqe, p.byte_cnt);
            }
        }
    }

    /// Arms the ACK timer if something sent is unacknowledged (`restart`:
    /// progress was made, the timer starts over); disarms it otherwise.
    fn rc_arm_timer(&mut self, qpn: u32, restart: bool) {
        let now = self.now();
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let waiting = e.pending.iter().any(|p| !p.done);
        if !waiting || e.rnr_wait {
            e.retry_deadline = None;
            return;
        }
        if e.retry_deadline.is_some() && !restart {
            return;
        }
        let Some(t) = ack_timeout(e.info.ack_timeout) else {
            return;
        };
        e.retry_deadline = Some(now + t);
        if !e.retry_scheduled {
            e.retry_scheduled = true;
            let tgen = e.incarnation;
            self.schedule(t, Timer::Retry { qpn, tgen });
        }
    }

    /// The ACK timer fired: retransmit from the first unacknowledged WQE,
    /// or fail it with "transport retry counter exceeded" when the retry
    /// count is spent.
    pub(crate) fn rc_retry_timeout(&mut self, qpn: u32, tgen: u64) {
        let now = self.now();
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        if e.incarnation != tgen {
            return;
        }
        e.retry_scheduled = false;
        let Some(deadline) = e.retry_deadline else {
            return;
        };
        if now < deadline {
            // Progress moved the deadline: the one timer entry follows it.
            e.retry_scheduled = true;
            self.schedule(deadline - now, Timer::Retry { qpn, tgen });
            return;
        }
        e.retry_deadline = None;
        self.rc_retry(qpn, "ACK timeout");
    }

    /// A retry (timeout or sequence NAK): counts against `retry_count`.
    fn rc_retry(&mut self, qpn: u32, why: &str) {
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let Some(first) = e.pending.iter().position(|p| !p.done) else {
            return;
        };
        if e.retries_left == 0 {
            let p = &mut e.pending[first];
            p.failed = Some(syn::TRANSPORT_RETRY);
            p.done = true;
            let note = format!(
                "QP {qpn:#x}: transport retry counter exceeded at WQE {:#x} PSN {:#x} ({why})",
                p.wqe.index, p.first_psn
            );
            self.datapath.note(note);
            self.rc_complete(qpn);
            return;
        }
        e.retries_left -= 1;
        self.rc_retransmit(qpn);
    }

    /// Sends every unacknowledged WQE again (go back N).
    fn rc_retransmit(&mut self, qpn: u32) {
        let Some(e) = self.engine.qps.get(&qpn) else {
            return;
        };
        let info = e.info.clone();
        let todo: Vec<usize> = (0..e.pending.len())
            .filter(|&i| !e.pending[i].done)
            .collect();
        for i in todo {
            self.datapath.retransmissions += 1;
            self.rc_send_pending(&info, i);
        }
        self.rc_arm_timer(qpn, true);
        self.rc_complete(qpn);
    }

    /// The RNR timer fired: send again from the NAKed WQE.
    pub(crate) fn rc_rnr_timeout(&mut self, qpn: u32, tgen: u64) {
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        if e.timer_gen != tgen || !e.rnr_wait {
            return;
        }
        e.rnr_wait = false;
        self.rc_retransmit(qpn);
        self.qp_kick(qpn);
    }

    /// Marks everything before `psn` (and up to `psn` if `inclusive`)
    /// acknowledged, except READs and atomics, which need their responses;
    /// a message acknowledged in part remembers how many of its packets
    /// were (a retransmission starts after them). Returns whether anything
    /// was newly acknowledged.
    fn rc_ack_through(&mut self, qpn: u32, psn: u32, inclusive: bool) -> bool {
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return false;
        };
        let mut progress = false;
        for p in e.pending.iter_mut() {
            if p.done {
                continue;
            }
            let last = p.last_psn();
            let covered = if inclusive {
                psn_le(last, psn)
            } else {
                psn_le(last, psn) && last != psn
            };
            if p.wqe.is_read_or_atomic() {
                break;
            }
            if !covered {
                // Part of this message: packets first_psn..psn (inclusive
                // or not) are acknowledged.
                if psn_le(p.first_psn, psn) {
                    let k = (psn.wrapping_sub(p.first_psn) & 0xff_ffff) + u32::from(inclusive);
                    if k > p.acked {
                        p.acked = k;
                        progress = true;
                    }
                }
                break;
            }
            p.done = true;
            progress = true;
        }
        if progress {
            e.retries_left = e.info.retry_count;
            e.rnr_left = e.info.rnr_retry;
        }
        progress
    }

    /// A response packet (ACK/NAK, READ response, atomic ACK) for an RC
    /// requester.
    pub(crate) fn rc_response(&mut self, qpn: u32, p: &Roce<'_>) {
        let Some(info) = self.engine.qps.get(&qpn).map(|e| e.info.clone()) else {
            return;
        };
        let state = self.fw.objs.qp(qpn).map(|q| q.state);
        if !matches!(state, Some(QpState::Rts | QpState::Sqd)) {
            self.datapath.drops.bad_state += 1;
            return;
        }
        let psn = p.bth.psn;
        let body = p.body;
        let op = p.bth.opcode & 0x1f;
        if op == ib::READ_RESPONSE_MIDDLE {
            self.rc_read_response(&info, psn, op, body);
            self.qp_kick(qpn);
            return;
        }
        if body.len() < 4 {
            self.datapath.drops.malformed += 1;
            return;
        }
        let syndrome = body[0];
        match op {
            ib::ACKNOWLEDGE => match syndrome >> 5 {
                0 if self.rc_ack_through(qpn, psn, true) => {
                    self.rc_complete(qpn);
                    self.rc_arm_timer(qpn, true);
                }
                0 => self.datapath.drops.stale += 1,
                1 => {
                    self.rc_ack_through(qpn, psn, false);
                    self.rc_complete(qpn);
                    let Some(e) = self.engine.qps.get_mut(&qpn) else {
                        return;
                    };
                    let Some(i) = e.pending.iter().position(|x| {
                        !x.done && psn_le(x.first_psn, psn) && psn_le(psn, x.last_psn())
                    }) else {
                        self.datapath.drops.stale += 1;
                        return;
                    };
                    if e.info.rnr_retry != 7 {
                        if e.rnr_left == 0 {
                            e.pending[i].failed = Some(syn::RNR_RETRY);
                            e.pending[i].done = true;
                            let idx = e.pending[i].wqe.index;
                            self.datapath.note(format!(
                                "QP {qpn:#x}: RNR retry counter exceeded at WQE {idx:#x}"
                            ));
                            self.rc_complete(qpn);
                            return;
                        }
                        e.rnr_left -= 1;
                    }
                    e.rnr_wait = true;
                    e.retry_deadline = None;
                    e.timer_gen += 1;
                    let tgen = e.timer_gen;
                    self.schedule(rnr_delay(syndrome & 0x1f), Timer::Rnr { qpn, tgen });
                }
                3 => {
                    self.rc_ack_through(qpn, psn, false);
                    self.rc_complete(qpn);
                    let code = syndrome & 0x1f;
                    if code == 0 {
                        self.rc_retry(qpn, "PSN sequence error NAK");
                    } else {
                        let s = match syndrome {
                            aeth::NAK_INVALID_REQUEST => syn::REMOTE_INVALID_REQUEST,
                            aeth::NAK_REMOTE_ACCESS => syn::REMOTE_ACCESS,
                            aeth::NAK_REMOTE_OP => syn::REMOTE_OP,
                            _ => syn::BAD_RESP,
                        };
                        self.rc_fail_at(qpn, psn, s);
                    }
                }
                _ => {
                    self.datapath.drops.stale += 1;
                }
            },
            ib::READ_RESPONSE_FIRST | ib::READ_RESPONSE_LAST | ib::READ_RESPONSE_ONLY => {
                if syndrome >> 5 != 0 {
                    self.datapath.drops.malformed += 1;
                    return;
                }
                self.rc_read_response(&info, psn, op, body);
            }
            ib::ATOMIC_ACKNOWLEDGE => {
                let Some(e) = self.engine.qps.get(&qpn) else {
                    return;
                };
                let want = [opcode::ATOMIC_CS, opcode::ATOMIC_FA];
                let Some(i) = e
                    .pending
                    .iter()
                    .position(|x| !x.done && x.first_psn == psn && want.contains(&x.wqe.opcode))
                else {
                    self.datapath.drops.stale += 1;
                    return;
                };
                let w = e.pending[i].wqe.clone();
                if body.len() < 12 {
                    self.datapath.drops.malformed += 1;
                    return;
                }
                let orig = packet::rd64(body, 4);
                let data = if info.atomic_host_endian {
                    orig.to_ne_bytes()
                } else {
                    orig.to_be_bytes()
                };
                self.rc_ack_through(qpn, psn, false);
                let r = if w.len() != 8 {
                    Err(syn::BAD_RESP)
                } else {
                    self.scatter_local(info.pd, &w.sg, 0, &data, qpn)
                };
                self.rc_response_done(&info, i, r);
            }
            _ => {
                self.datapath.drops.stale += 1;
                return;
            }
        }
        self.qp_kick(qpn);
    }

    /// Outstanding READ or atomic `i` got its (last) response: it
    /// completes (with `r`'s syndrome if the data could not be written).
    fn rc_response_done(&mut self, info: &QpInfo, i: usize, r: Result<(), u8>) {
        let qpn = info.qpn;
        if let Some(e) = self.engine.qps.get_mut(&qpn) {
            if let Some(pp) = e.pending.get_mut(i) {
                pp.done = true;
                pp.failed = r.err();
            }
            e.retries_left = info.retry_count;
            e.rnr_left = info.rnr_retry;
        }
        self.rc_complete(qpn);
        self.rc_arm_timer(qpn, true);
    }

    /// A READ response packet (IBA 9.7): it must be the next one the
    /// outstanding READ expects (its PSN and its place: FIRST, MIDDLE...,
    /// LAST, or ONLY, counted from the request last sent), carry one path
    /// MTU of data (the last one the rest); its data is written at its
    /// offset in the READ's scatter list, and the READ completes with the
    /// last. A response with a PSN ahead (one was lost) is dropped and the
    /// READ is asked again for the rest (counted as a retry); a duplicate
    /// is dropped.
    fn rc_read_response(&mut self, info: &QpInfo, psn: u32, op: u8, body: &[u8]) {
        let qpn = info.qpn;
        let Some(e) = self.engine.qps.get(&qpn) else {
            return;
        };
        let Some(i) = e.pending.iter().position(|x| {
            !x.done
                && x.wqe.opcode == opcode::RDMA_READ
                && psn_le(x.first_psn, psn)
                && psn_le(psn, x.last_psn())
        }) else {
            self.datapath.drops.stale += 1;
            return;
        };
        let pd = &e.pending[i];
        let (w, first, n, got, base) = (
            pd.wqe.clone(),
            pd.first_psn,
            pd.npsn.max(1),
            pd.acked,
            pd.read_base,
        );
        let k = psn.wrapping_sub(first) & 0xff_ffff;
        if k != got {
            self.datapath.drops.stale += 1;
            if k > got {
                self.datapath.note(format!(
                    "QP {qpn:#x}: READ response PSN {psn:#x} while {:#x} is expected: asked again",
                    first.wrapping_add(got) & 0xff_ffff
                ));
                if let Some(p) = self
                    .engine
                    .qps
                    .get_mut(&qpn)
                    .and_then(|e| e.pending.get_mut(i))
                {
                    // Asked once per gap.
                    if p.read_gap {
                        return;
                    }
                    p.read_gap = true;
                }
                self.rc_retry(qpn, "READ response sequence error");
            }
            return;
        }
        // Implicitly acknowledges the requests before the READ.
        if k == base {
            self.rc_ack_through(qpn, first, false);
        }
        let m = n - base.min(n - 1);
        let j = k - base.min(k);
        let want = if m == 1 {
            ib::READ_RESPONSE_ONLY
        } else if j == 0 {
            ib::READ_RESPONSE_FIRST
        } else if j + 1 == m {
            ib::READ_RESPONSE_LAST
        } else {
            ib::READ_RESPONSE_MIDDLE
        };
        let mtu = info.mtu.max(256);
        let len = w.len();
        let off = u64::from(k) * mtu;
        let data = if op == ib::READ_RESPONSE_MIDDLE {
            body
        } else {
            &body[4..]
        };
        let expect_len = len.saturating_sub(off).min(mtu);
        if op != want || data.len() as u64 != expect_len {
            self.datapath.note(format!(
                "QP {qpn:#x}: READ response opcode {op:#04x} with {} bytes at PSN {psn:#x}, expected opcode {want:#04x} with {expect_len}",
                data.len()
            ));
            self.rc_response_done(info, i, Err(syn::BAD_RESP));
            return;
        }
        let r = self.scatter_local(info.pd, &w.sg, off, data, qpn);
        if let Some(e) = self.engine.qps.get_mut(&qpn) {
            if let Some(p) = e.pending.get_mut(i) {
                p.acked = k + 1;
                p.read_gap = false;
            }
            e.retries_left = info.retry_count;
            e.rnr_left = info.rnr_retry;
        }
        if r.is_err() || k + 1 == n {
            self.rc_response_done(info, i, r);
        } else {
            self.rc_arm_timer(qpn, true);
        }
    }

    /// The WQE at `psn` was NAKed with a fatal code.
    fn rc_fail_at(&mut self, qpn: u32, psn: u32, s: u8) {
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let Some(p) = e.pending.iter_mut().find(|x| !x.done && x.first_psn == psn) else {
            self.datapath.drops.stale += 1;
            return;
        };
        p.failed = Some(s);
        p.done = true;
        let idx = p.wqe.index;
        self.datapath.note(format!(
            "QP {qpn:#x}: WQE {idx:#x} NAKed, syndrome {s:#04x}"
        ));
        self.rc_complete(qpn);
    }

    /// Writes response data (READ, atomic original value) into a WQE's
    /// local scatter list from byte `skip` of the message on (lkeys need
    /// local write).
    fn scatter_local(
        &mut self,
        pd: u32,
        sg: &[Sge],
        mut skip: u64,
        data: &[u8],
        qpn: u32,
    ) -> Result<(), u8> {
        let mut o = 0usize;
        let mut chunks = Vec::new();
        for s in sg {
            let Sge::Data { addr, len, lkey } = s else {
                return Err(syn::LOCAL_QP_OP);
            };
            if o == data.len() {
                break;
            }
            if skip >= *len {
                skip -= *len;
                continue;
            }
            let n = ((*len - skip) as usize).min(data.len() - o);
            let a = addr.wrapping_add(skip);
            chunks.clear();
            if let Err(e) = mem::translate(
                &self.fw.objs,
                *lkey,
                pd,
                a,
                n as u64,
                Access::LocalWrite,
                &mut chunks,
            ) {
                self.datapath.note(format!(
                    "QP {qpn:#x}: response scatter lkey {lkey:#x} addr {a:#x}: {e}"
                ));
                return Err(syn::LOCAL_PROT);
            }
            mem::scatter(&mut self.iommu, &chunks, &data[o..o + n], &|| {
                format!("QP {qpn:#x} response scatter (lkey {lkey:#x})")
            })
            .map_err(|()| syn::LOCAL_PROT)?;
            skip = 0;
            o += n;
        }
        if o != data.len() {
            return Err(syn::BAD_RESP);
        }
        Ok(())
    }

    /// Posts a UC or UD WQE: it is sent and completes at once.
    fn unreliable_post(&mut self, info: &Arc<QpInfo>, w: SendWqe) {
        let qpn = info.qpn;
        if w.opcode == opcode::NOP {
            if w.signaled() {
                self.req_cqe(info, &w, 0);
            }
            return;
        }
        let len = w.len();
        let frames = if info.st == 2 {
            self.ud_frame(info, &w).map(|f| vec![f])
        } else if len > info.max_msg {
            Err(syn::LOCAL_LENGTH)
        } else {
            match info.route.clone() {
                Ok(route) => {
                    let n = npkts(len, info.mtu);
                    let psn = self.engine.qps.get_mut(&qpn).map_or(0, |e| {
                        let p = e.next_psn;
                        e.next_psn = p.wrapping_add(n) & 0xff_ffff;
                        p
                    });
                    self.uc_packets(info, &route, &w, psn, n)
                }
                Err(r) => {
                    self.datapath.note(format!("QP {qpn:#x}: no route: {r}"));
                    Err(syn::LOCAL_QP_OP)
                }
            }
        };
        let ib_mcast = info.st == 2
            && self.fw.infiniband()
            && w.av.as_ref().is_some_and(|a| super::is_mlid(a.rlid));
        match frames {
            Ok(fs) => {
                for f in fs {
                    if ib_mcast {
                        // The HCA's own port's members get a copy (the
                        // switch does not send it back on its way in).
                        self.ib_mcast_loopback(info, &f);
                    }
                    self.transmit(info.port, f);
                }
                if w.signaled() {
                    self.req_cqe(info, &w, 0);
                }
            }
            Err(s) => {
                self.req_err_cqe(info, w.opcode, w.index, s);
                self.qp_error(qpn, true, None);
            }
        }
    }

    /// Builds the `n` packets of a UC message from `psn` on.
    fn uc_packets(
        &mut self,
        info: &QpInfo,
        route: &Route,
        w: &SendWqe,
        psn: u32,
        n: u32,
    ) -> Result<Vec<Vec<u8>>, u8> {
        self.precheck_sg(info.pd, &w.sg, info.qpn)?;
        (0..n)
            .map(|k| self.connected_packet(info, route, w, psn.wrapping_add(k) & 0xff_ffff, k))
            .collect()
    }

    /// Builds a UD packet from the WQE's address vector.
    fn ud_frame(&mut self, info: &QpInfo, w: &SendWqe) -> Result<Vec<u8>, u8> {
        let qpn = info.qpn;
        let Some(av) = &w.av else {
            return Err(syn::LOCAL_QP_OP);
        };
        let len = w.len();
        let mtu = self.port_ib_mtu(info.port);
        if len > mtu {
            self.datapath.note(format!(
                "UD QP {qpn:#x}: message of {len} bytes exceeds the port MTU {mtu}"
            ));
            return Err(syn::LOCAL_LENGTH);
        }
        let route = if self.fw.infiniband() && super::is_mlid(av.rlid) {
            self.ib_mcast_route(info.port, av)
        } else if self.fw.infiniband() {
            self.ib_route(info.port, av.rlid)
        } else {
            self.route(
                info.port,
                av.sgid_index,
                av.rmac,
                av.rgid,
                av.tclass,
                av.flow_label,
                av.hop_limit,
                if av.rlid != 0 {
                    av.rlid
                } else {
                    super::udp_sport_for(av.flow_label, qpn, av.dqpn)
                },
            )
        }
        .map_err(|r| {
            self.datapath.note(format!("UD QP {qpn:#x}: {r}"));
            syn::LOCAL_QP_OP
        })?;
        let qkey = if av.qkey & 0x8000_0000 != 0 {
            info.q_key
        } else {
            av.qkey
        };
        let psn = self.engine.qps.get_mut(&qpn).map_or(0, |e| {
            let p = e.next_psn;
            e.next_psn = p.wrapping_add(1) & 0xff_ffff;
            p
        });
        let imm = w.opcode == opcode::SEND_IMM;
        let bth = Bth {
            opcode: ib::UD
                | if imm {
                    ib::SEND_ONLY_IMM
                } else {
                    ib::SEND_ONLY
                },
            se: w.solicited(),
            pkey: 0xffff,
            dqpn: av.dqpn,
            ackreq: false,
            psn,
            ..Bth::default()
        };
        let mut ext = Vec::with_capacity(12);
        ext.extend_from_slice(&qkey.to_be_bytes());
        ext.extend_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
        if imm {
            ext.extend_from_slice(&w.imm.to_be_bytes());
        }
        let pd = info.pd;
        self.precheck_sg(pd, &w.sg, qpn)?;
        packet::build(&route, &bth, &ext, len as usize, |p| {
            self.gather_sg(pd, &w.sg, p, qpn)
        })
    }

    /// Moves a QP to the error state (`sq_only`: SQE, for UD/UC requester
    /// errors), posts the affiliated event if any, and flushes.
    pub(crate) fn qp_error(&mut self, qpn: u32, sq_only: bool, event: Option<u8>) {
        let Some(q) = self.fw.objs.qp_mut(qpn) else {
            return;
        };
        if q.state == QpState::Err {
            return;
        }
        q.state = if sq_only { QpState::Sqer } else { QpState::Err };
        if let Some(e) = self.engine.qps.get_mut(&qpn) {
            e.timer_gen += 1;
            e.retry_deadline = None;
            e.rnr_wait = false;
        }
        if let Some(ev) = event {
            self.qp_event(ev, qpn);
        }
        self.qp_flush(qpn);
        self.arm_err_poll();
    }

    /// Completes everything posted to a QP in the error state (or SQE: the
    /// send queue only) with the flush syndrome: outstanding WQEs, WQEs
    /// posted up to the doorbell record, receive WQEs up to the receive
    /// counter. A QP on an SRQ gets the "last WQE reached" event instead.
    pub(crate) fn qp_flush(&mut self, qpn: u32) {
        let Some(state) = self.fw.objs.qp(qpn).map(|q| q.state) else {
            return;
        };
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let info = e.info.clone();
        let pend: Vec<Pending> = e.pending.drain(..).collect();
        e.reads_out = 0;
        for p in pend {
            self.req_err_cqe(&info, p.wqe.opcode, p.wqe.index, syn::WR_FLUSH);
        }
        if !info.no_sq {
            if let Ok(dbr) = self.read_dbr_word(info.dbr_addr + 4, &format!("QP {qpn:#x}")) {
                let dbr = dbr as u16;
                let start = self.engine.qps.get(&qpn).map_or(dbr, |e| e.sq_next);
                let end = self.flush_ring(
                    (qpn, info.cqn_snd, Self::uidx(&info, None)),
                    start,
                    dbr,
                    &info.pas,
                    info.log_page_size,
                    info.sq_offset(),
                    info.log_sq_size,
                );
                if let Some(e) = self.engine.qps.get_mut(&qpn) {
                    e.sq_next = end;
                }
            }
        }
        if state != QpState::Err {
            return;
        }
        match info.rq_type {
            0 => {
                let Ok(dbr) = self.read_dbr_word(info.dbr_addr, &format!("QP {qpn:#x}")) else {
                    return;
                };
                let dbr = dbr as u16;
                let size = 1u16 << info.log_rq_size.min(15);
                let Some(e) = self.engine.qps.get_mut(&qpn) else {
                    return;
                };
                let n = dbr.wrapping_sub(e.rq_ci).min(size);
                let first = e.rq_ci;
                e.rq_ci = dbr;
                for i in 0..n {
                    let c = Cqe {
                        opcode: cqe_op::RESP_ERR,
                        qpn,
                        wqe_counter: first.wrapping_add(i),
                        srqn_uidx: Self::uidx(&info, None),
                        syndrome: syn::WR_FLUSH,
                        ..Cqe::default()
                    };
                    self.emit_cqe(info.cqn_rcv, c);
                }
            }
            1 => {
                let Some(e) = self.engine.qps.get_mut(&qpn) else {
                    return;
                };
                if !e.last_wqe_reached {
                    e.last_wqe_reached = true;
                    self.qp_event(0x13, qpn);
                }
            }
            _ => {}
        }
    }

    /// Flush CQEs for the WQEs of a send ring from `start` to `end`
    /// (following each control segment's `ds`). Returns the position
    /// reached.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn flush_ring(
        &mut self,
        (n, cqn, uidx): (u32, u32, u32),
        start: u16,
        end: u16,
        pas: &[u64],
        lps: u8,
        base: u64,
        log_size: u8,
    ) -> u16 {
        let size = 1u32 << log_size.min(15);
        if u32::from(end.wrapping_sub(start)) > size {
            self.datapath.note(format!(
                "queue {n:#x}: doorbell record {end:#x} runs more than the send queue ahead of {start:#x}; not flushed"
            ));
            return end;
        }
        let mut idx = start;
        while idx != end {
            let mut c = [0u8; 16];
            let off = base + u64::from(u32::from(idx) & (size - 1)) * 64;
            if self
                .read_queue(pas, lps, off, &mut c, &|| {
                    format!("send queue {n:#x} WQE {idx:#x}")
                })
                .is_err()
            {
                return end;
            }
            let (_, op, _, ds) = wqe::ctrl_fields(&c);
            self.req_err_cqe_to(cqn, n, uidx, op, idx, syn::WR_FLUSH);
            let nbb = wqe::wqebbs(ds);
            if end.wrapping_sub(idx) < nbb {
                return end;
            }
            idx = idx.wrapping_add(nbb);
        }
        end
    }
}
