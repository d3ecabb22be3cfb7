//! The responder: incoming RoCE packets are checked (destination MAC and
//! GID, QP, transport, state, PSN), executed (receive WQE consumption from
//! the RQ or SRQ and scatter, RDMA WRITE, RDMA READ, atomics) and answered
//! (RC: ACK, NAK, RNR NAK, READ response, atomic ACK); responder CQEs.

use super::cqe::{Cqe, op as cqe_op, syndrome as syn};
use super::mem::{self, Access};
use super::packet::{self, Bth, Roce, aeth, op as ib};
use super::wqe::{self, Rse};
use super::{QpInfo, npkts};
use crate::device::Device;
use crate::fw::QpState;

/// Event types of affiliated errors (PRM).
mod ev {
    pub const COMM_EST: u8 = 0x02;
    pub const INVALID_REQUEST_LOCAL_WQ: u8 = 0x10;
    pub const LOCAL_ACCESS_VIOLATION: u8 = 0x11;
    pub const SRQ_LIMIT: u8 = 0x14;
}

/// A multi-packet message being received on an RC or UC QP.
#[derive(Clone, Debug)]
pub(crate) enum RxMsg {
    /// A SEND: its receive WQE and the bytes scattered so far.
    Send { rw: RecvWqe, off: u64 },
    /// An RDMA WRITE: its RETH and the bytes written so far.
    Write {
        va: u64,
        rkey: u32,
        len: u64,
        off: u64,
    },
}

/// A consumed receive WQE.
#[derive(Clone, Debug)]
pub(crate) struct RecvWqe {
    /// CQE `wqe_counter`: the RQ counter, or the SRQ WQE index.
    pub(crate) counter: u16,
    pub(crate) sges: Vec<Rse>,
    pub(crate) srqn: Option<u32>,
    /// The PD its lkeys must belong to (the SRQ's for an SRQ).
    pub(crate) pd: u32,
    /// Why its scatter list is malformed.
    pub(crate) bad: Option<String>,
}

/// How a request failed on an RC responder.
struct Nak {
    aeth: u8,
    event: u8,
}

const NAK_INVALID: Nak = Nak {
    aeth: aeth::NAK_INVALID_REQUEST,
    event: ev::INVALID_REQUEST_LOCAL_WQ,
};
const NAK_ACCESS: Nak = Nak {
    aeth: aeth::NAK_REMOTE_ACCESS,
    event: ev::LOCAL_ACCESS_VIOLATION,
};
const NAK_OP: Nak = Nak {
    aeth: aeth::NAK_REMOTE_OP,
    event: ev::INVALID_REQUEST_LOCAL_WQ,
};

/// The destination QP number of a multicast packet.
const MULTICAST_QPN: u32 = 0xff_ffff;

impl Device {
    /// A RoCE packet for this port.
    pub(crate) fn roce_receive(&mut self, port: u8, p: &Roce<'_>) {
        if p.bth.dqpn == MULTICAST_QPN && p.dgid[0] == 0xff {
            if self.fw.infiniband() {
                self.ib_mcast_receive(port, p, None);
            } else {
                self.mcast_receive(port, p);
            }
            return;
        }
        if !self.port_owns_mac(port, &p.dmac) || !self.port_owns_gid(port, &p.dgid, p.ver) {
            self.datapath.drops.not_for_us += 1;
            return;
        }
        self.qp_receive(port, p, p.bth.dqpn);
    }

    /// A RoCE packet to a multicast group (DQPN 0xffffff, the DGID an MGID,
    /// the destination MAC the MGID's 33:33 MAC): a copy to each UD QP of
    /// this port attached to the group (IBA 10.5.2.3: one packet replicated
    /// to every member QP), dropped when none is.
    fn mcast_receive(&mut self, port: u8, p: &Roce<'_>) {
        let g = &p.dgid;
        if p.dmac != [0x33, 0x33, g[12], g[13], g[14], g[15]] {
            self.datapath.drops.not_for_us += 1;
            return;
        }
        let Some(qps) = self.fw.mcast.get(g).cloned() else {
            self.datapath.drops.not_for_us += 1;
            return;
        };
        for qpn in qps {
            if self
                .engine
                .qps
                .get(&qpn)
                .is_some_and(|e| e.info.port == port)
            {
                self.qp_receive(port, p, qpn);
            }
        }
    }

    /// An InfiniBand packet to a multicast group: its DLID (the wire's
    /// [`lid_mac`](super::lid_mac)) is the MLID the modelled subnet
    /// manager gives its DGID ([`ib_mlid`](super::ib_mlid)), and the port
    /// is a member of that MLID (one of its QPs is attached to the DGID):
    /// a copy to each UD QP of this port attached to the DGID (IBA
    /// 10.5.2.3), but `exclude` (the sender of a looped-back copy that
    /// blocks its own multicast loopback).
    pub(crate) fn ib_mcast_receive(&mut self, port: u8, p: &Roce<'_>, exclude: Option<u32>) {
        let mlid = u16::from_be_bytes([p.dmac[4], p.dmac[5]]);
        if p.dmac != super::lid_mac(mlid)
            || !super::is_mlid(mlid)
            || super::ib_mlid(&p.dgid) != mlid
            || self.port_lid(port) == 0
        {
            self.datapath.drops.not_for_us += 1;
            return;
        }
        let Some(qps) = self.fw.mcast.get(&p.dgid).cloned() else {
            self.datapath.drops.not_for_us += 1;
            return;
        };
        for qpn in qps {
            if Some(qpn) != exclude
                && self
                    .engine
                    .qps
                    .get(&qpn)
                    .is_some_and(|e| e.info.port == port)
            {
                self.qp_receive(port, p, qpn);
            }
        }
    }

    /// The local copy of an InfiniBand multicast packet QP `info` sent:
    /// to the members on its own port, not to the QP itself when its
    /// `block_lb_mc` is set.
    pub(crate) fn ib_mcast_loopback(&mut self, info: &QpInfo, frame: &[u8]) {
        if !self.link_up(info.port) {
            return;
        }
        if let packet::Frame::Roce(p) = packet::parse(frame) {
            let exclude = info.block_lb_mc.then_some(info.qpn);
            self.ib_mcast_receive(info.port, &p, exclude);
        }
    }

    /// A packet for QP `qpn` of this port.
    fn qp_receive(&mut self, port: u8, p: &Roce<'_>, qpn: u32) {
        let Some(state) = self.fw.objs.qp(qpn).map(|q| q.state) else {
            self.datapath.drops.no_qp += 1;
            return;
        };
        let Some(info) = self.engine.qps.get(&qpn).map(|e| e.info.clone()) else {
            self.datapath.drops.bad_state += 1;
            return;
        };
        let transport = match p.bth.opcode >> 5 {
            0 => 0,
            1 => 1,
            3 => 2,
            _ => 0xff,
        };
        if info.port != port || transport != info.st {
            self.datapath.drops.no_qp += 1;
            return;
        }
        let op = p.bth.opcode & 0x1f;
        if info.st == 0
            && matches!(
                op,
                ib::ACKNOWLEDGE
                    | ib::ATOMIC_ACKNOWLEDGE
                    | ib::READ_RESPONSE_FIRST
                    | ib::READ_RESPONSE_MIDDLE
                    | ib::READ_RESPONSE_LAST
                    | ib::READ_RESPONSE_ONLY
            )
        {
            self.rc_response(qpn, p);
            return;
        }
        let receives = matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            || (state == QpState::Sqer && info.st != 0);
        if !receives {
            self.datapath.drops.bad_state += 1;
            return;
        }
        if state == QpState::Rtr && info.st != 2 {
            if let Some(e) = self.engine.qps.get_mut(&qpn) {
                if !e.comm_est {
                    e.comm_est = true;
                    self.qp_event(ev::COMM_EST, qpn);
                }
            }
        }
        match info.st {
            0 => self.rc_request(&info, p),
            1 => self.uc_request(&info, p),
            _ => self.ud_request(&info, p),
        }
    }

    /// Whether a receive WQE is posted (without consuming it).
    fn recv_ready(&mut self, info: &QpInfo) -> bool {
        match info.rq_type {
            0 => {
                let Ok(dbr) = self.read_dbr_word(info.dbr_addr, &format!("QP {:#x}", info.qpn))
                else {
                    return false;
                };
                let ci = self.engine.qps.get(&info.qpn).map_or(0, |e| e.rq_ci);
                (dbr as u16) != ci
            }
            1 => {
                let Some(srqn) = info.srqn else { return false };
                let Some(dbr_addr) = self.fw.objs.srq(srqn).map(|s| s.dbr_addr) else {
                    return false;
                };
                let Ok(dbr) = self.read_dbr_word(dbr_addr, &format!("SRQ {srqn:#x}")) else {
                    return false;
                };
                let consumed = self.engine.srqs.get(&srqn).map_or(0, |s| s.consumed);
                (dbr as u16) != consumed
            }
            _ => false,
        }
    }

    /// Consumes the next receive WQE of a QP's RQ or SRQ.
    fn take_recv(&mut self, info: &QpInfo) -> Option<RecvWqe> {
        let qpn = info.qpn;
        match info.rq_type {
            0 => {
                let dbr = self
                    .read_dbr_word(info.dbr_addr, &format!("QP {qpn:#x}"))
                    .ok()? as u16;
                let ci = self.engine.qps.get(&qpn)?.rq_ci;
                if dbr == ci {
                    return None;
                }
                let stride = 16usize << info.log_rq_stride.min(7);
                let size = 1u32 << info.log_rq_size.min(15);
                let off = u64::from(u32::from(ci) & (size - 1)) * stride as u64;
                let mut b = vec![0u8; stride];
                let read = self.read_queue(&info.pas, info.log_page_size, off, &mut b, &|| {
                    format!("QP {qpn:#x} receive WQE {ci:#x}")
                });
                if let Some(e) = self.engine.qps.get_mut(&qpn) {
                    e.rq_ci = ci.wrapping_add(1);
                }
                self.datapath.recv_wqes += 1;
                let parsed = match read {
                    Ok(()) => wqe::parse_recv(&b),
                    Err(()) => Err("the receive WQE could not be read".into()),
                };
                Some(recv_wqe(ci, None, info.pd, parsed))
            }
            1 => self.srq_take(info.srqn?),
            _ => None,
        }
    }

    /// Consumes the WQE at the head of an SRQ's list; raises the SRQ limit
    /// event when fewer than `lwm` WQEs remain.
    fn srq_take(&mut self, srqn: u32) -> Option<RecvWqe> {
        let s = self.fw.objs.srq(srqn)?;
        let (dbr_addr, log_size, log_stride, lps, pd, lwm) = (
            s.dbr_addr,
            s.log_size.min(15),
            s.log_rq_stride.min(7),
            s.log_page_size,
            s.pd,
            s.lwm,
        );
        let dbr = self
            .read_dbr_word(dbr_addr, &format!("SRQ {srqn:#x}"))
            .ok()? as u16;
        let st = *self.engine.srqs.entry(srqn).or_default();
        let avail = dbr.wrapping_sub(st.consumed);
        if avail == 0 {
            return None;
        }
        let size = 1u32 << log_size;
        let stride = 16usize << log_stride;
        let idx = (u32::from(st.head) & (size - 1)) as u16;
        let off = u64::from(idx) * stride as u64;
        let mut b = vec![0u8; stride.max(16)];
        let addr = self
            .fw
            .objs
            .srq(srqn)
            .and_then(|s| crate::fw::buf_addr(&s.pas, lps, off));
        let read = match addr {
            Some(a) => self
                .iommu
                .read(a, &mut b, &|| format!("SRQ {srqn:#x} WQE {idx:#x}")),
            None => Err(()),
        };
        let next = u16::from_be_bytes([b[2], b[3]]);
        if let Some(x) = self.engine.srqs.get_mut(&srqn) {
            x.head = next;
            x.consumed = st.consumed.wrapping_add(1);
        }
        self.datapath.recv_wqes += 1;
        let remaining = avail.saturating_sub(1);
        if lwm > 0 && u32::from(remaining) < u32::from(lwm) {
            if let Some(s) = self.fw.objs.srq_mut(srqn) {
                s.lwm = 0;
            }
            self.qp_event(ev::SRQ_LIMIT, srqn);
        }
        let parsed = match read {
            Ok(()) => wqe::parse_recv(&b[16..]),
            Err(()) => Err("the SRQ WQE could not be read".into()),
        };
        Some(recv_wqe(idx, Some(srqn), pd, parsed))
    }

    /// Scatters `parts` into a receive WQE. Errors are CQE syndromes.
    fn scatter_recv(&mut self, rw: &RecvWqe, parts: &[&[u8]], qpn: u32) -> Result<u32, u8> {
        let joined;
        let data: &[u8] = if parts.len() == 1 {
            parts[0]
        } else {
            joined = parts.concat();
            &joined
        };
        self.scatter_recv_at(rw, 0, data, qpn)?;
        Ok(data.len() as u32)
    }

    /// Scatters `data` into a receive WQE at byte `skip` of the message
    /// (one packet of a multi-packet SEND). Errors are CQE syndromes.
    fn scatter_recv_at(
        &mut self,
        rw: &RecvWqe,
        mut skip: u64,
        data: &[u8],
        qpn: u32,
    ) -> Result<(), u8> {
        if rw.bad.is_some() {
            return Err(syn::LOCAL_QP_OP);
        }
        let cap: u64 = rw
            .sges
            .iter()
            .map(|s| s.len)
            .fold(0u64, u64::saturating_add);
        let end = skip + data.len() as u64;
        if end > cap {
            self.datapath.note(format!(
                "QP {qpn:#x}: message of {end} bytes or more does not fit the receive WQE ({cap} bytes)"
            ));
            return Err(syn::LOCAL_LENGTH);
        }
        let mut o = 0usize;
        let mut chunks = Vec::new();
        for s in &rw.sges {
            if o == data.len() {
                break;
            }
            if skip >= s.len {
                skip -= s.len;
                continue;
            }
            let n = ((s.len - skip) as usize).min(data.len() - o);
            let a = s.addr.wrapping_add(skip);
            chunks.clear();
            if let Err(e) = mem::translate(
                &self.fw.objs,
                s.lkey,
                rw.pd,
                a,
                n as u64,
                Access::LocalWrite,
                &mut chunks,
            ) {
                self.datapath.note(format!(
                    "QP {qpn:#x}: receive scatter lkey {:#x} addr {a:#x}: {e}",
                    s.lkey
                ));
                return Err(syn::LOCAL_PROT);
            }
            let lkey = s.lkey;
            mem::scatter(&mut self.iommu, &chunks, &data[o..o + n], &|| {
                format!("QP {qpn:#x} receive scatter (lkey {lkey:#x})")
            })
            .map_err(|()| syn::LOCAL_PROT)?;
            skip = 0;
            o += n;
        }
        Ok(())
    }

    /// A responder CQE.
    #[allow(clippy::too_many_arguments)]
    fn resp_cqe(
        &mut self,
        info: &QpInfo,
        rw: &RecvWqe,
        opcode: u8,
        p: &Roce<'_>,
        byte_cnt: u32,
        imm_pkey: u32,
        flags_rqpn: u32,
    ) {
        let vlan = p.vlan;
        let c = Cqe {
            opcode,
            se: p.bth.se,
            qpn: info.qpn,
            wqe_counter: rw.counter,
            srqn_uidx: Self::uidx(info, rw.srqn),
            byte_cnt,
            imm_inval_pkey: imm_pkey,
            flags_rqpn,
            l4_l3_hdr_type: u8::from(vlan.is_some()),
            vlan_info: vlan.unwrap_or(0),
            ..Cqe::default()
        };
        self.emit_cqe(info.cqn_rcv, c);
    }

    /// The CQE of a SEND (with its immediate, if any) on an RC or UC QP:
    /// `flags_rqpn` names the L3 header and the remote QP.
    fn connected_cqe(
        &mut self,
        info: &QpInfo,
        rw: &RecvWqe,
        p: &Roce<'_>,
        byte_cnt: u32,
        imm: Option<u32>,
    ) {
        let flags = connected_flags(info, p);
        let opcode = send_opcode(imm.is_some());
        self.resp_cqe(info, rw, opcode, p, byte_cnt, imm.unwrap_or(0), flags);
    }

    /// The CQE of an RDMA WRITE with immediate on an RC or UC QP.
    fn write_imm_cqe(&mut self, info: &QpInfo, rw: &RecvWqe, p: &Roce<'_>, len: u32, imm: u32) {
        let flags = connected_flags(info, p);
        self.resp_cqe(info, rw, cqe_op::RESP_WR_IMM, p, len, imm, flags);
    }

    /// A responder error CQE.
    fn resp_err_cqe(&mut self, info: &QpInfo, rw: &RecvWqe, s: u8) {
        if let Some(b) = &rw.bad {
            self.datapath.note(format!(
                "QP {:#x}: receive WQE {:#x}: {b}",
                info.qpn, rw.counter
            ));
        }
        let c = Cqe {
            opcode: cqe_op::RESP_ERR,
            qpn: info.qpn,
            wqe_counter: rw.counter,
            srqn_uidx: Self::uidx(info, rw.srqn),
            syndrome: s,
            ..Cqe::default()
        };
        self.emit_cqe(info.cqn_rcv, c);
    }

    /// Sends an RC response packet along the responder's own address path.
    fn rc_reply(
        &mut self,
        info: &QpInfo,
        opcode: u8,
        psn: u32,
        syndrome: u8,
        ext: &[u8],
        data: Reply,
    ) {
        let Ok(route) = info.route.clone() else {
            self.datapath
                .note(format!("QP {:#x}: cannot answer: no route", info.qpn));
            return;
        };
        let msn = self.engine.qps.get(&info.qpn).map_or(0, |e| e.msn);
        let bth = Bth {
            opcode: ib::RC | opcode,
            pkey: 0xffff,
            dqpn: info.remote_qpn,
            psn,
            ..Bth::default()
        };
        let mut hdr = Vec::with_capacity(4 + ext.len());
        // READ_RESPONSE_MIDDLE carries no AETH (IBA 9.2).
        if opcode != ib::READ_RESPONSE_MIDDLE {
            hdr.push(syndrome);
            hdr.extend_from_slice(&(msn & 0xff_ffff).to_be_bytes()[1..]);
        }
        hdr.extend_from_slice(ext);
        let qpn = info.qpn;
        let frame = match data {
            Reply::None => packet::build(&route, &bth, &hdr, 0, |_| Ok::<(), ()>(())),
            Reply::Memory(chunks, len) => packet::build(&route, &bth, &hdr, len, |p| {
                mem::gather(&mut self.iommu, &chunks, p, &|| {
                    format!("QP {qpn:#x} RDMA READ response")
                })
            }),
        };
        match frame {
            Ok(f) => self.transmit(info.port, f),
            Err(()) => self
                .datapath
                .note(format!("QP {qpn:#x}: READ response could not be read")),
        }
    }

    fn rc_nak(&mut self, info: &QpInfo, psn: u32, nak: Nak, why: String) {
        self.datapath.note(format!(
            "QP {:#x}: NAK {:#04x} for PSN {psn:#x}: {why}",
            info.qpn, nak.aeth
        ));
        self.rc_reply(info, ib::ACKNOWLEDGE, psn, nak.aeth, &[], Reply::None);
        self.qp_error(info.qpn, false, Some(nak.event));
    }

    /// An RC request packet.
    fn rc_request(&mut self, info: &QpInfo, p: &Roce<'_>) {
        let qpn = info.qpn;
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let psn = p.bth.psn;
        let epsn = e.epsn;
        let d = psn.wrapping_sub(epsn) & 0xff_ffff;
        if d != 0 {
            if d < 0x80_0000 {
                if !e.nak_seq_sent {
                    e.nak_seq_sent = true;
                    self.datapath.seq_naks += 1;
                    self.rc_reply(
                        info,
                        ib::ACKNOWLEDGE,
                        epsn,
                        aeth::NAK_PSN_SEQ,
                        &[],
                        Reply::None,
                    );
                }
            } else {
                self.rc_duplicate(info, p);
            }
            return;
        }
        e.nak_seq_sent = false;
        let op = p.bth.opcode & 0x1f;
        let body = p.body;
        let in_msg = e.rx.is_some();
        let continues = matches!(
            op,
            ib::SEND_MIDDLE
                | ib::SEND_LAST
                | ib::SEND_LAST_IMM
                | ib::WRITE_MIDDLE
                | ib::WRITE_LAST
                | ib::WRITE_LAST_IMM
        );
        // IBA 9.7: a packet that continues a message needs
        // one in progress of its kind; a new request while one is in
        // progress is out of sequence: NAK invalid request.
        if continues != in_msg {
            return self.rc_nak(
                info,
                psn,
                NAK_INVALID,
                format!("opcode {op:#04x} out of sequence"),
            );
        }
        match op {
            ib::SEND_FIRST
            | ib::SEND_MIDDLE
            | ib::SEND_LAST
            | ib::SEND_LAST_IMM
            | ib::SEND_ONLY
            | ib::SEND_ONLY_IMM => self.rc_send_packet(info, p, op),
            ib::WRITE_FIRST
            | ib::WRITE_MIDDLE
            | ib::WRITE_LAST
            | ib::WRITE_LAST_IMM
            | ib::WRITE_ONLY
            | ib::WRITE_ONLY_IMM => self.rc_write_packet(info, p, op),
            ib::READ_REQUEST => {
                if body.len() < 16 {
                    return self.rc_nak(info, psn, NAK_INVALID, "short RDMA READ request".into());
                }
                if !info.rre {
                    return self.rc_nak(
                        info,
                        psn,
                        NAK_INVALID,
                        "remote read not enabled on the QP".into(),
                    );
                }
                let len = u64::from(packet::reth(body).2);
                self.rc_advance(qpn, npkts(len, info.mtu), true);
                if let Err(why) = self.read_response(info, body, psn) {
                    if let Some(e) = self.engine.qps.get_mut(&qpn) {
                        e.epsn = psn;
                    }
                    self.rc_nak(info, psn, NAK_ACCESS, why);
                }
            }
            ib::COMPARE_SWAP | ib::FETCH_ADD => {
                if body.len() < 28 {
                    return self.rc_nak(info, psn, NAK_INVALID, "short atomic request".into());
                }
                if !info.rae {
                    return self.rc_nak(
                        info,
                        psn,
                        NAK_INVALID,
                        "atomics not enabled on the QP".into(),
                    );
                }
                let va = packet::rd64(body, 0);
                if va % 8 != 0 {
                    return self.rc_nak(
                        info,
                        psn,
                        NAK_INVALID,
                        format!("atomic at unaligned address {va:#x}"),
                    );
                }
                let rkey = packet::rd32(body, 8);
                let mut chunks = Vec::new();
                if let Err(e) = mem::translate(
                    &self.fw.objs,
                    rkey,
                    info.pd,
                    va,
                    8,
                    Access::Atomic,
                    &mut chunks,
                ) {
                    return self.rc_nak(
                        info,
                        psn,
                        NAK_ACCESS,
                        format!("atomic rkey {rkey:#x} va {va:#x}: {e}"),
                    );
                }
                let (swap_add, compare) = (packet::rd64(body, 12), packet::rd64(body, 20));
                let Ok(orig) =
                    self.atomic(info, &chunks, op == ib::COMPARE_SWAP, swap_add, compare)
                else {
                    return self.rc_nak(info, psn, NAK_OP, "atomic target not mapped".into());
                };
                if let Some(e) = self.engine.qps.get_mut(&qpn) {
                    if e.atomics.len() >= 16 {
                        e.atomics.pop_front();
                    }
                    e.atomics.push_back((psn, orig));
                }
                self.rc_advance(qpn, 1, true);
                self.rc_reply(
                    info,
                    ib::ATOMIC_ACKNOWLEDGE,
                    psn,
                    aeth::ACK,
                    &orig.to_be_bytes(),
                    Reply::None,
                );
            }
            _ => self.rc_nak(
                info,
                psn,
                NAK_INVALID,
                format!("unsupported opcode {:#04x}", p.bth.opcode),
            ),
        }
    }

    /// Executes an atomic on 8 bytes (big-endian memory, or host-endian
    /// when `atomic_req_8B_endianness_mode` is 1). Returns the original.
    fn atomic(
        &mut self,
        info: &QpInfo,
        chunks: &[(u64, usize)],
        cs: bool,
        swap_add: u64,
        compare: u64,
    ) -> Result<u64, ()> {
        let qpn = info.qpn;
        let mut b = [0u8; 8];
        mem::gather(&mut self.iommu, chunks, &mut b, &|| {
            format!("QP {qpn:#x} atomic")
        })?;
        let host = info.atomic_host_endian;
        let orig = if host {
            u64::from_ne_bytes(b)
        } else {
            u64::from_be_bytes(b)
        };
        let new = if cs {
            if orig == compare { swap_add } else { orig }
        } else {
            orig.wrapping_add(swap_add)
        };
        if new != orig {
            let nb = if host {
                new.to_ne_bytes()
            } else {
                new.to_be_bytes()
            };
            mem::scatter(&mut self.iommu, chunks, &nb, &|| {
                format!("QP {qpn:#x} atomic")
            })?;
        }
        Ok(orig)
    }

    /// Checks an RDMA READ request (RETH in `body`) and sends the
    /// response. Returns the length read.
    fn read_response(&mut self, info: &QpInfo, body: &[u8], psn: u32) -> Result<u64, String> {
        let (va, rkey, dmalen) = packet::reth(body);
        let len = u64::from(dmalen);
        if len > info.max_msg {
            return Err(format!("RDMA READ of {len} bytes"));
        }
        let mut chunks = Vec::new();
        mem::translate(
            &self.fw.objs,
            rkey,
            info.pd,
            va,
            len,
            Access::RemoteRead,
            &mut chunks,
        )
        .map_err(|e| format!("RDMA READ rkey {rkey:#x} va {va:#x} len {len:#x}: {e}"))?;
        if len > super::requester::LARGE {
            self.precheck_chunks(&chunks, &format!("QP {:#x} RDMA READ response", info.qpn))
                .map_err(|()| "RDMA READ source not mapped".to_string())?;
        }
        // Segmented at the path MTU: FIRST, MIDDLE..., LAST (AETH on the
        // first and the last), or ONLY; PSNs from the request's on.
        let mtu = info.mtu.max(256);
        let n = npkts(len, mtu);
        for k in 0..n {
            let off = u64::from(k) * mtu;
            let plen = len.saturating_sub(off).min(mtu) as usize;
            let op = match (k == 0, k + 1 == n) {
                (true, true) => ib::READ_RESPONSE_ONLY,
                (true, false) => ib::READ_RESPONSE_FIRST,
                (false, true) => ib::READ_RESPONSE_LAST,
                (false, false) => ib::READ_RESPONSE_MIDDLE,
            };
            let part = chunk_range(&chunks, off as usize, plen);
            self.rc_reply(
                info,
                op,
                psn.wrapping_add(k) & 0xff_ffff,
                aeth::ACK,
                &[],
                Reply::Memory(part, plen),
            );
        }
        Ok(len)
    }

    /// A request whose PSN is behind the expected one.
    fn rc_duplicate(&mut self, info: &QpInfo, p: &Roce<'_>) {
        let qpn = info.qpn;
        let op = p.bth.opcode & 0x1f;
        let psn = p.bth.psn;
        match op {
            ib::READ_REQUEST if p.body.len() >= 16 && info.rre => {
                let r = self.read_response(info, p.body, psn);
                if r.is_err() {
                    self.datapath.drops.stale += 1;
                }
            }
            ib::COMPARE_SWAP | ib::FETCH_ADD => {
                let saved = self
                    .engine
                    .qps
                    .get(&qpn)
                    .and_then(|e| e.atomics.iter().find(|a| a.0 == psn).map(|a| a.1));
                match saved {
                    Some(orig) => self.rc_reply(
                        info,
                        ib::ATOMIC_ACKNOWLEDGE,
                        psn,
                        aeth::ACK,
                        &orig.to_be_bytes(),
                        Reply::None,
                    ),
                    None => self.datapath.drops.stale += 1,
                }
            }
            // A duplicate SEND or WRITE packet is acknowledged again
            // (IBA 9.7) when it asks for an ACK (the last packet of
            // each message does): with the PSN of the last packet taken.
            _ if p.bth.ackreq || !continues_or_first(op) => {
                let last = self
                    .engine
                    .qps
                    .get(&qpn)
                    .map_or(0, |e| e.epsn.wrapping_sub(1) & 0xff_ffff);
                self.rc_reply(info, ib::ACKNOWLEDGE, last, aeth::ACK, &[], Reply::None);
            }
            _ => {}
        }
    }

    /// The expected PSN moves on by `n` packets; `msg_done`: a message
    /// ended (the MSN counts it).
    fn rc_advance(&mut self, qpn: u32, n: u32, msg_done: bool) {
        if let Some(e) = self.engine.qps.get_mut(&qpn) {
            e.epsn = e.epsn.wrapping_add(n) & 0xff_ffff;
            if msg_done {
                e.msn = e.msn.wrapping_add(1) & 0xff_ffff;
            }
        }
    }

    /// Acknowledges everything up to `psn` when the requester asked
    /// (AckReq) or a message ended: ACKs are coalesced over the packets
    /// between (IBA 9.7).
    fn rc_ack(&mut self, info: &QpInfo, p: &Roce<'_>, last: bool) {
        if p.bth.ackreq || last {
            self.rc_reply(
                info,
                ib::ACKNOWLEDGE,
                p.bth.psn,
                aeth::ACK,
                &[],
                Reply::None,
            );
        }
    }

    /// A SEND packet at the expected PSN (IBA 9.7): FIRST and
    /// ONLY take a receive WQE (RNR NAK when there is none), every packet
    /// scatters at its offset in it, LAST and ONLY complete it. FIRST and
    /// MIDDLE carry exactly one path MTU; LAST and ONLY at most one.
    fn rc_send_packet(&mut self, info: &QpInfo, p: &Roce<'_>, op: u8) {
        let qpn = info.qpn;
        let psn = p.bth.psn;
        let imm_op = matches!(op, ib::SEND_LAST_IMM | ib::SEND_ONLY_IMM);
        let Some((imm, payload)) = send_only(imm_op, p.body) else {
            return self.rc_nak(info, psn, NAK_INVALID, "short SEND with immediate".into());
        };
        let mtu = info.mtu.max(256);
        let full = matches!(op, ib::SEND_FIRST | ib::SEND_MIDDLE);
        let len = payload.len() as u64;
        if (full && len != mtu) || len > mtu {
            return self.rc_nak(
                info,
                psn,
                NAK_INVALID,
                format!("SEND packet of {len} bytes with a path MTU of {mtu}"),
            );
        }
        let (rw, off) = if matches!(op, ib::SEND_FIRST | ib::SEND_ONLY | ib::SEND_ONLY_IMM) {
            let Some(rw) = self.take_recv(info) else {
                return self.rc_rnr(info, psn);
            };
            (rw, 0)
        } else {
            match self.engine.qps.get_mut(&qpn).and_then(|e| e.rx.take()) {
                Some(RxMsg::Send { rw, off }) => (rw, off),
                other => {
                    if let Some(e) = self.engine.qps.get_mut(&qpn) {
                        e.rx = other;
                    }
                    return self.rc_nak(
                        info,
                        psn,
                        NAK_INVALID,
                        format!("SEND opcode {op:#04x} within an RDMA WRITE"),
                    );
                }
            }
        };
        match self.scatter_recv_at(&rw, off, payload, qpn) {
            Ok(()) => {
                let last = !full;
                self.rc_advance(qpn, 1, last);
                if last {
                    let total = (off + len) as u32;
                    self.connected_cqe(info, &rw, p, total, imm);
                } else if let Some(e) = self.engine.qps.get_mut(&qpn) {
                    e.rx = Some(RxMsg::Send { rw, off: off + len });
                }
                self.rc_ack(info, p, last);
            }
            Err(s) => {
                self.resp_err_cqe(info, &rw, s);
                let nak = if s == syn::LOCAL_LENGTH {
                    NAK_INVALID
                } else {
                    NAK_OP
                };
                self.rc_nak(
                    info,
                    psn,
                    nak,
                    format!("receive failed with syndrome {s:#04x}"),
                );
            }
        }
    }

    /// An RDMA WRITE packet at the expected PSN: FIRST and ONLY carry the
    /// RETH, checked for the whole DMA length (rkey, rights, bounds); every
    /// packet is written at its offset; LAST_IMM and ONLY_IMM consume a
    /// receive WQE for the immediate (RNR NAK when there is none: the
    /// packet is taken again when it is sent again).
    fn rc_write_packet(&mut self, info: &QpInfo, p: &Roce<'_>, op: u8) {
        let qpn = info.qpn;
        let psn = p.bth.psn;
        let body = p.body;
        let has_reth = matches!(op, ib::WRITE_FIRST | ib::WRITE_ONLY | ib::WRITE_ONLY_IMM);
        let has_imm = matches!(op, ib::WRITE_LAST_IMM | ib::WRITE_ONLY_IMM);
        let need = if has_reth { 16 } else { 0 } + if has_imm { 4 } else { 0 };
        if body.len() < need {
            return self.rc_nak(info, psn, NAK_INVALID, "short RDMA WRITE".into());
        }
        let payload = &body[need..];
        let len = payload.len() as u64;
        let mtu = info.mtu.max(256);
        let full = matches!(op, ib::WRITE_FIRST | ib::WRITE_MIDDLE);
        let imm = has_imm.then(|| packet::rd32(body, need - 4));
        let (va, rkey, dmalen, off) = if has_reth {
            let (va, rkey, dmalen) = packet::reth(body);
            let dmalen = u64::from(dmalen);
            let bad_len = if full {
                len != mtu || dmalen <= mtu
            } else {
                len != dmalen
            };
            if bad_len {
                return self.rc_nak(
                    info,
                    psn,
                    NAK_INVALID,
                    "RETH length differs from the payload".into(),
                );
            }
            if !info.rwe {
                return self.rc_nak(
                    info,
                    psn,
                    NAK_INVALID,
                    "remote write not enabled on the QP".into(),
                );
            }
            let mut chunks = Vec::new();
            if let Err(e) = mem::translate(
                &self.fw.objs,
                rkey,
                info.pd,
                va,
                dmalen,
                Access::RemoteWrite,
                &mut chunks,
            ) {
                return self.rc_nak(
                    info,
                    psn,
                    NAK_ACCESS,
                    format!("RDMA WRITE rkey {rkey:#x} va {va:#x} len {dmalen:#x}: {e}"),
                );
            }
            (va, rkey, dmalen, 0)
        } else {
            let Some(RxMsg::Write {
                va,
                rkey,
                len: dmalen,
                off,
            }) = self.engine.qps.get(&qpn).and_then(|e| e.rx.clone())
            else {
                return self.rc_nak(
                    info,
                    psn,
                    NAK_INVALID,
                    format!("RDMA WRITE opcode {op:#04x} within a SEND"),
                );
            };
            let ok = if full {
                len == mtu && off + len < dmalen
            } else {
                off + len == dmalen && len <= mtu
            };
            if !ok {
                return self.rc_nak(
                    info,
                    psn,
                    NAK_INVALID,
                    format!("RDMA WRITE packet of {len} bytes at {off} of {dmalen}"),
                );
            }
            (va, rkey, dmalen, off)
        };
        if imm.is_some() && !self.recv_ready(info) {
            return self.rc_rnr(info, psn);
        }
        if len > 0 {
            let mut chunks = Vec::new();
            let a = va.wrapping_add(off);
            let r = mem::translate(
                &self.fw.objs,
                rkey,
                info.pd,
                a,
                len,
                Access::RemoteWrite,
                &mut chunks,
            );
            if r.is_err()
                || mem::scatter(&mut self.iommu, &chunks, payload, &|| {
                    format!("QP {qpn:#x} RDMA WRITE (rkey {rkey:#x})")
                })
                .is_err()
            {
                return self.rc_nak(info, psn, NAK_OP, "RDMA WRITE target not mapped".into());
            }
        }
        let last = !full;
        self.rc_advance(qpn, 1, last);
        if let Some(e) = self.engine.qps.get_mut(&qpn) {
            e.rx = (!last).then_some(RxMsg::Write {
                va,
                rkey,
                len: dmalen,
                off: off + len,
            });
        }
        if let Some(imm) = imm {
            if let Some(rw) = self.take_recv(info) {
                if rw.bad.is_some() {
                    self.resp_err_cqe(info, &rw, syn::LOCAL_QP_OP);
                    return self.rc_nak(info, psn, NAK_OP, "bad receive WQE".into());
                }
                self.write_imm_cqe(info, &rw, p, dmalen as u32, imm);
            }
        }
        self.rc_ack(info, p, last);
    }

    fn rc_rnr(&mut self, info: &QpInfo, psn: u32) {
        self.datapath.rnr_naks += 1;
        let t = info.min_rnr_nak & 0x1f;
        self.rc_reply(
            info,
            ib::ACKNOWLEDGE,
            psn,
            aeth::RNR_NAK | t,
            &[],
            Reply::None,
        );
    }

    /// A UC request (IBA 9.8): a packet with a PSN other than the
    /// expected one ends the message in progress (lost: nothing completes,
    /// a SEND's receive WQE is kept for the next SEND); FIRST and ONLY
    /// start a message at any PSN; MIDDLE and LAST without a message in
    /// progress are dropped. What cannot be taken is dropped silently.
    fn uc_request(&mut self, info: &QpInfo, p: &Roce<'_>) {
        let qpn = info.qpn;
        let op = p.bth.opcode & 0x1f;
        let psn = p.bth.psn;
        let Some(e) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let starts = matches!(
            op,
            ib::SEND_FIRST
                | ib::SEND_ONLY
                | ib::SEND_ONLY_IMM
                | ib::WRITE_FIRST
                | ib::WRITE_ONLY
                | ib::WRITE_ONLY_IMM
        );
        if psn != e.epsn || starts {
            if let Some(RxMsg::Send { rw, .. }) = e.rx.take() {
                e.uc_spare = Some(rw);
            }
        }
        e.epsn = psn.wrapping_add(1) & 0xff_ffff;
        let rx = e.rx.take();
        let mtu = info.mtu.max(256);
        let body = p.body;
        match op {
            ib::SEND_FIRST
            | ib::SEND_MIDDLE
            | ib::SEND_LAST
            | ib::SEND_LAST_IMM
            | ib::SEND_ONLY
            | ib::SEND_ONLY_IMM => {
                let imm_op = matches!(op, ib::SEND_LAST_IMM | ib::SEND_ONLY_IMM);
                let Some((imm, payload)) = send_only(imm_op, body) else {
                    self.datapath.drops.malformed += 1;
                    return;
                };
                let full = matches!(op, ib::SEND_FIRST | ib::SEND_MIDDLE);
                let len = payload.len() as u64;
                if (full && len != mtu) || len > mtu {
                    self.datapath.drops.malformed += 1;
                    return;
                }
                let (rw, off) = if starts {
                    let spare = self
                        .engine
                        .qps
                        .get_mut(&qpn)
                        .and_then(|e| e.uc_spare.take());
                    match spare.or_else(|| self.take_recv(info)) {
                        Some(rw) => (rw, 0),
                        None => {
                            self.datapath.drops.no_receive += 1;
                            return;
                        }
                    }
                } else {
                    match rx {
                        Some(RxMsg::Send { rw, off }) => (rw, off),
                        _ => {
                            self.datapath.drops.stale += 1;
                            return;
                        }
                    }
                };
                match self.scatter_recv_at(&rw, off, payload, qpn) {
                    Ok(()) if full => {
                        if let Some(e) = self.engine.qps.get_mut(&qpn) {
                            e.rx = Some(RxMsg::Send { rw, off: off + len });
                        }
                    }
                    Ok(()) => self.connected_cqe(info, &rw, p, (off + len) as u32, imm),
                    Err(s) => {
                        self.resp_err_cqe(info, &rw, s);
                        self.qp_error(qpn, false, None);
                    }
                }
            }
            ib::WRITE_FIRST
            | ib::WRITE_MIDDLE
            | ib::WRITE_LAST
            | ib::WRITE_LAST_IMM
            | ib::WRITE_ONLY
            | ib::WRITE_ONLY_IMM => {
                let has_reth = starts;
                let has_imm = matches!(op, ib::WRITE_LAST_IMM | ib::WRITE_ONLY_IMM);
                let need = if has_reth { 16 } else { 0 } + if has_imm { 4 } else { 0 };
                if body.len() < need {
                    self.datapath.drops.malformed += 1;
                    return;
                }
                let payload = &body[need..];
                let len = payload.len() as u64;
                let full = matches!(op, ib::WRITE_FIRST | ib::WRITE_MIDDLE);
                let (va, rkey, dmalen, off) = if has_reth {
                    let (va, rkey, dmalen) = packet::reth(body);
                    let dmalen = u64::from(dmalen);
                    let ok = if full {
                        len == mtu && dmalen > mtu
                    } else {
                        len == dmalen
                    };
                    if !ok || !info.rwe {
                        self.datapath.drops.uc_access += 1;
                        return;
                    }
                    let mut chunks = Vec::new();
                    if mem::translate(
                        &self.fw.objs,
                        rkey,
                        info.pd,
                        va,
                        dmalen,
                        Access::RemoteWrite,
                        &mut chunks,
                    )
                    .is_err()
                    {
                        self.datapath.drops.uc_access += 1;
                        return;
                    }
                    (va, rkey, dmalen, 0)
                } else {
                    let Some(RxMsg::Write {
                        va,
                        rkey,
                        len: dmalen,
                        off,
                    }) = rx
                    else {
                        self.datapath.drops.stale += 1;
                        return;
                    };
                    let ok = if full {
                        len == mtu && off + len < dmalen
                    } else {
                        off + len == dmalen && len <= mtu
                    };
                    if !ok {
                        self.datapath.drops.malformed += 1;
                        return;
                    }
                    (va, rkey, dmalen, off)
                };
                if has_imm && !self.recv_ready(info) {
                    self.datapath.drops.no_receive += 1;
                    return;
                }
                let mut chunks = Vec::new();
                if mem::translate(
                    &self.fw.objs,
                    rkey,
                    info.pd,
                    va.wrapping_add(off),
                    len,
                    Access::RemoteWrite,
                    &mut chunks,
                )
                .is_err()
                    || mem::scatter(&mut self.iommu, &chunks, payload, &|| {
                        format!("UC QP {qpn:#x} RDMA WRITE")
                    })
                    .is_err()
                {
                    self.datapath.drops.uc_access += 1;
                    return;
                }
                if full {
                    if let Some(e) = self.engine.qps.get_mut(&qpn) {
                        e.rx = Some(RxMsg::Write {
                            va,
                            rkey,
                            len: dmalen,
                            off: off + len,
                        });
                    }
                } else if has_imm {
                    if let Some(rw) = self.take_recv(info) {
                        let imm = packet::rd32(body, need - 4);
                        self.write_imm_cqe(info, &rw, p, dmalen as u32, imm);
                    }
                }
            }
            _ => self.datapath.drops.malformed += 1,
        }
    }

    /// A UD packet: Q_Key check, then the receive with the 40-byte GRH
    /// area first.
    fn ud_request(&mut self, info: &QpInfo, p: &Roce<'_>) {
        let qpn = info.qpn;
        let op = p.bth.opcode & 0x1f;
        let body = p.body;
        let imm = op == ib::SEND_ONLY_IMM;
        if !matches!(op, ib::SEND_ONLY | ib::SEND_ONLY_IMM)
            || body.len() < 8 + if imm { 4 } else { 0 }
        {
            self.datapath.drops.malformed += 1;
            return;
        }
        let qkey = packet::rd32(body, 0);
        let src_qp = packet::rd32(body, 4) & 0xff_ffff;
        if qkey != info.q_key {
            self.datapath.drops.qkey += 1;
            self.datapath.note(format!(
                "UD QP {qpn:#x}: Q_Key {qkey:#x} from QP {src_qp:#x} does not match {:#x}: dropped",
                info.q_key
            ));
            return;
        }
        let (imm_v, payload) = if imm {
            (packet::rd32(body, 8), &body[12..])
        } else {
            (0, &body[8..])
        };
        let Some(rw) = self.take_recv(info) else {
            self.datapath.drops.no_receive += 1;
            return;
        };
        // InfiniBand (LID routed, no GRH): the 40 bytes the GRH would take
        // are skipped (written as zeros: their contents are undefined) and
        // the CQE says no GRH.
        // A multicast packet always carries its GRH (IBA vol 1).
        let ib = self.fw.infiniband() && !(p.bth.dqpn == MULTICAST_QPN && p.dgid[0] == 0xff);
        let grh: &[u8] = if ib { &[0; 40] } else { &p.grh_area };
        match self.scatter_recv(&rw, &[grh, payload], qpn) {
            Ok(n) => {
                let grh_flag = if ib { 0 } else { 1 << 28 };
                let flags = grh_flag | (p.ver.cqe_l3_type() << 24) | src_qp;
                let imm_pkey = if imm { imm_v } else { u32::from(p.bth.pkey) };
                self.resp_cqe(info, &rw, send_opcode(imm), p, n, imm_pkey, flags);
            }
            Err(s) => self.resp_err_cqe(info, &rw, s),
        }
    }
}

/// `flags_rqpn` of a connected QP's responder CQE: the L3 header type and
/// the remote QP number.
fn connected_flags(info: &QpInfo, p: &Roce<'_>) -> u32 {
    (p.ver.cqe_l3_type() << 24) | (info.remote_qpn & 0xff_ffff)
}

/// The responder CQE opcode of a SEND, with or without immediate.
fn send_opcode(imm: bool) -> u8 {
    if imm {
        cqe_op::RESP_SEND_IMM
    } else {
        cqe_op::RESP_SEND
    }
}

/// The immediate (ImmDt, when `imm`) and payload of a SEND packet's
/// body; `None` when the ImmDt is cut short.
fn send_only(imm: bool, body: &[u8]) -> Option<(Option<u32>, &[u8])> {
    if !imm {
        return Some((None, body));
    }
    (body.len() >= 4).then(|| (Some(packet::rd32(body, 0)), &body[4..]))
}

/// Whether a request opcode is the FIRST or a MIDDLE packet of a message
/// (not its end).
fn continues_or_first(op: u8) -> bool {
    matches!(
        op,
        ib::SEND_FIRST | ib::SEND_MIDDLE | ib::WRITE_FIRST | ib::WRITE_MIDDLE
    )
}

/// The part `off..off + n` of a list of IOVA chunks.
fn chunk_range(chunks: &[(u64, usize)], mut off: usize, mut n: usize) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    for &(a, l) in chunks {
        if n == 0 {
            break;
        }
        if off >= l {
            off -= l;
            continue;
        }
        let take = (l - off).min(n);
        out.push((a + off as u64, take));
        n -= take;
        off = 0;
    }
    out
}

/// Data of a response packet.
enum Reply {
    None,
    /// RDMA READ data: IOVA chunks and total length.
    Memory(Vec<(u64, usize)>, usize),
}

fn recv_wqe(counter: u16, srqn: Option<u32>, pd: u32, parsed: Result<Vec<Rse>, String>) -> RecvWqe {
    match parsed {
        Ok(sges) => RecvWqe {
            counter,
            sges,
            srqn,
            pd,
            bad: None,
        },
        Err(b) => RecvWqe {
            counter,
            sges: Vec::new(),
            srqn,
            pd,
            bad: Some(b),
        },
    }
}
