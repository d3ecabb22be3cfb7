//! Raw Ethernet: SQ objects send frames made of the Ethernet segment's
//! inline headers and the gathered data (with IPv4 header and TCP/UDP
//! checksum insertion when `cs_flags` asks), on port 1; received frames
//! that are not for the RDMA engine are steered by the NIC RX flow tables
//! to TIRs and their RQs (`steer.rs`), each copy into the next receive WQE.

use super::cqe::{Cqe, op as cqe_op, syndrome as syn};
use super::mem::{self, Access};
use super::packet::{ETH_MIN_FRAME, ETH_P_IPV4, ETH_P_IPV6, ETH_P_VLAN, ethernet_fcs};
use super::steer;
use super::wqe::{self, SqKind, opcode};
use crate::device::Device;
use crate::device::Timer;
use crate::frame::{fold, ones_sum as sum16};
use crate::fw::{ObjKind, RateLimit, buf_addr, sq_pp_index};
use crate::ifc::ifc;
use std::time::Duration;

/// `cs_flags`: insert the IPv4 header checksum.
const CS_L3: u8 = 0x40;
/// `cs_flags`: insert the TCP/UDP checksum.
const CS_L4: u8 = 0x80;

/// Inserts checksums into an outgoing frame (IPv4 header; TCP or UDP
/// over IPv4/IPv6 without extension headers). Anything else is left alone.
pub(crate) fn insert_checksums(f: &mut [u8], l3: bool, l4: bool) {
    let mut o = 12;
    let Some(mut et) = f.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
        return;
    };
    o += 2;
    if et == ETH_P_VLAN {
        let Some(b) = f.get(16..18) else { return };
        et = u16::from_be_bytes([b[0], b[1]]);
        o = 18;
    }
    let (proto, l4_start, l4_len, pseudo) = match et {
        ETH_P_IPV4 => {
            let Some(h) = f.get(o..o + 20) else { return };
            let ihl = usize::from(h[0] & 0xf) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            if ihl < 20 || o + total > f.len() || total < ihl {
                return;
            }
            if l3 {
                f[o + 10] = 0;
                f[o + 11] = 0;
                let c = fold(sum16(&f[o..o + ihl], 0));
                f[o + 10..o + 12].copy_from_slice(&c.to_be_bytes());
            }
            let proto = f[o + 9];
            let l4_len = total - ihl;
            let mut ps = sum16(&f[o + 12..o + 20], 0);
            ps += u32::from(proto) + l4_len as u32;
            (proto, o + ihl, l4_len, ps)
        }
        ETH_P_IPV6 => {
            let Some(h) = f.get(o..o + 40) else { return };
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            if o + 40 + len > f.len() {
                return;
            }
            let proto = h[6];
            let mut ps = sum16(&h[8..40], 0);
            ps += u32::from(proto) + len as u32;
            (proto, o + 40, len, ps)
        }
        _ => return,
    };
    if !l4 {
        return;
    }
    let off = match proto {
        6 => 16,
        17 => 6,
        _ => return,
    };
    if l4_len < off + 2 {
        return;
    }
    let seg = &mut f[l4_start..l4_start + l4_len];
    seg[off] = 0;
    seg[off + 1] = 0;
    let mut c = fold(sum16(seg, pseudo));
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    seg[off..off + 2].copy_from_slice(&c.to_be_bytes());
}

/// Token-bucket units per bit: a rate of R kbit/s adds R units per
/// nanosecond.
const UNITS_PER_BIT: u128 = 1_000_000;

/// A paced raw SQ's token bucket (packet pacing): frames leave so that
/// over any run the bits sent stay within rate × elapsed + burst, the
/// burst being the entry's `burst_upper_bound` or one frame.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Credit in [`UNITS_PER_BIT`] units when counted at `at` (None: full,
    /// the SQ has not sent a paced frame yet).
    credit: Option<u128>,
    /// Device time the credit was counted at.
    at: Duration,
    /// The pacing wait the SQ is in (its generation), if any: doorbells
    /// only move its doorbell record, the `Timer::Pace` of this
    /// generation resumes it.
    timer: Option<u64>,
}

impl Device {
    /// A send doorbell for a raw Ethernet SQ.
    pub(crate) fn raw_sq_doorbell(&mut self, sqn: u32, index: u16) {
        let Some((state, dbr_addr, log_size)) = self
            .fw
            .objs
            .wq(ObjKind::Sq, sqn)
            .map(|w| (w.state, w.dbr_addr, w.log_wq_sz.min(15)))
        else {
            return;
        };
        if let Ok(w) = self.read_dbr_word(dbr_addr + 4, &format!("SQ {sqn:#x}")) {
            let dbr = w as u16;
            let ahead = u32::from(dbr.wrapping_sub(index));
            if ahead == 0 || ahead > 1u32 << log_size {
                self.datapath.doorbell_mismatches += 1;
                self.datapath.note(format!(
                    "SQ {sqn:#x}: doorbell names WQE {index:#x}, the doorbell record's send counter is {dbr:#x}"
                ));
            }
        }
        match state {
            1 => self.raw_sq_kick(sqn),
            3 => self.raw_sq_flush(sqn),
            s => self.ignored_doorbells.push(format!(
                "send doorbell for SQ {sqn:#x} in state {s}: WQEs wait for RDY"
            )),
        }
    }

    fn raw_sq_kick(&mut self, sqn: u32) {
        let Some(w) = self.fw.objs.wq(ObjKind::Sq, sqn) else {
            return;
        };
        // The entry of the rate-limit table the SQ is paced by (an index
        // naming an entry cleared since, as Linux leaves one in an SQ it
        // resets, paces nothing). An SQ with index 0 is never in a pacing
        // wait (MODIFY_SQ ends one), so unpaced SQs look no further.
        let rate = match sq_pp_index(&w.ctx) {
            0 => None,
            i => {
                if self
                    .engine
                    .pace
                    .get(&sqn)
                    .is_some_and(|p| p.timer.is_some())
                {
                    // Waiting for its rate: the pacing timer takes the
                    // WQEs up.
                    return;
                }
                self.fw.rate_limits.get(&i).copied()
            }
        };
        let (pas, lps, log_size, cqn, pd, dbr_addr) = (
            w.pas.clone(),
            w.log_wq_pg_sz,
            w.log_wq_sz.min(15),
            w.cqn,
            w.pd,
            w.dbr_addr,
        );
        let uidx = ifc().get(&w.ctx, "sqc", "user_index") as u32;
        // The transport domain of the SQ's TIS (for the local loopback's
        // self_lb_block check).
        let tisn = w.tisn;
        let src_td = self.fw.objs.get(ObjKind::Tis, tisn).and_then(|o| {
            o.deps
                .iter()
                .find(|(k, _)| *k == ObjKind::TransportDomain)
                .map(|&(_, n)| n)
        });
        let Ok(dbr) = self.read_dbr_word(dbr_addr + 4, &format!("SQ {sqn:#x}")) else {
            return;
        };
        let dbr = dbr as u16;
        let size = 1u16 << log_size;
        loop {
            let next = *self.engine.sqs.entry(sqn).or_insert(0);
            if next == dbr {
                return;
            }
            if dbr.wrapping_sub(next) > size {
                self.datapath.note(format!(
                    "SQ {sqn:#x}: doorbell record {dbr:#x} runs more than the queue ahead of {next:#x}"
                ));
                return;
            }
            let w = match self.read_send_wqe(&pas, lps, 0, log_size, next, SqKind::Raw, sqn) {
                Ok(w) => w,
                Err(bad) => {
                    self.datapath
                        .note(format!("SQ {sqn:#x} WQE {next:#x}: {}", bad.reason));
                    self.engine.sqs.insert(sqn, next.wrapping_add(bad.nbb));
                    self.req_err_cqe_to(cqn, sqn, uidx, bad.opcode, next, syn::LOCAL_QP_OP);
                    self.raw_sq_error(sqn);
                    return;
                }
            };
            if let Some(rl) = rate.filter(|_| w.opcode == opcode::SEND) {
                let hdr = w.eth.as_ref().map_or(0, |e| e.inline_hdr.len());
                let len = hdr + w.len() as usize;
                // A frame too long for the wire fails below, unpaced.
                if len <= 16384 && !self.raw_pace(sqn, rl, len.max(ETH_MIN_FRAME)) {
                    return;
                }
            }
            self.engine.sqs.insert(sqn, next.wrapping_add(w.nbb));
            self.datapath.wqes += 1;
            if w.opcode == opcode::SEND {
                let hdr = w
                    .eth
                    .as_ref()
                    .map(|e| e.inline_hdr.clone())
                    .unwrap_or_default();
                let cs = w.eth.as_ref().map_or(0, |e| e.cs_flags);
                let len = hdr.len() + w.len() as usize;
                if len > 16384 {
                    self.req_err_cqe_to(cqn, sqn, uidx, w.opcode, w.index, syn::LOCAL_LENGTH);
                    self.raw_sq_error(sqn);
                    return;
                }
                let mut f = vec![0u8; len.max(ETH_MIN_FRAME)];
                f[..hdr.len()].copy_from_slice(&hdr);
                if let Err(s) = self.gather_sg(pd, &w.sg, &mut f[hdr.len()..len], sqn) {
                    self.req_err_cqe_to(cqn, sqn, uidx, w.opcode, w.index, s);
                    self.raw_sq_error(sqn);
                    return;
                }
                if cs & (CS_L3 | CS_L4) != 0 {
                    insert_checksums(&mut f, cs & CS_L3 != 0, cs & CS_L4 != 0);
                }
                self.transmit_from(1, f, src_td);
            }
            if w.signaled() {
                let c = Cqe {
                    opcode: cqe_op::REQ,
                    qpn: sqn,
                    wqe_opcode: w.opcode,
                    wqe_counter: w.index,
                    srqn_uidx: uidx,
                    ..Cqe::default()
                };
                self.emit_cqe(cqn, c);
            }
        }
    }

    /// Takes a frame of `bytes` from a paced SQ's token bucket: true when
    /// it may leave now; false when it must wait, the wait being
    /// scheduled (`Timer::Pace`) for when the rate lets it.
    fn raw_pace(&mut self, sqn: u32, rl: RateLimit, bytes: usize) -> bool {
        let now = self.now();
        let rate = u128::from(rl.rate_limit.max(1));
        let bits = bytes as u128 * 8;
        let need = bits * UNITS_PER_BIT;
        let cap = bits.max(u128::from(rl.burst_upper_bound) * 8) * UNITS_PER_BIT;
        let p = self.engine.pace.entry(sqn).or_default();
        let credit = match p.credit {
            None => cap,
            Some(c) => c
                .saturating_add(rate.saturating_mul(now.saturating_sub(p.at).as_nanos()))
                .min(cap),
        };
        p.at = now;
        if credit >= need {
            p.credit = Some(credit - need);
            return true;
        }
        p.credit = Some(credit);
        let wait = (need - credit).div_ceil(rate);
        self.engine.pace_gens += 1;
        let pgen = self.engine.pace_gens;
        p.timer = Some(pgen);
        self.datapath.pace_waits += 1;
        self.schedule(
            Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX)),
            Timer::Pace { sqn, pgen },
        );
        false
    }

    /// A pacing wait ends: the SQ (still ready, the wait not cancelled)
    /// sends what its rate allows.
    pub(crate) fn raw_pace_timer(&mut self, sqn: u32, pgen: u64) {
        let Some(p) = self.engine.pace.get_mut(&sqn) else {
            return;
        };
        if p.timer != Some(pgen) {
            return;
        }
        p.timer = None;
        if self
            .fw
            .objs
            .wq(ObjKind::Sq, sqn)
            .is_some_and(|w| w.state == 1)
        {
            self.raw_sq_kick(sqn);
        }
    }

    /// MODIFY_SQ changed an SQ (its state or its rate): a pacing wait is
    /// cancelled, and a ready SQ goes on under its (new) rate.
    pub(crate) fn raw_sq_repace(&mut self, sqn: u32) {
        let waited = self
            .engine
            .pace
            .get_mut(&sqn)
            .and_then(|p| p.timer.take())
            .is_some();
        if waited
            && self
                .fw
                .objs
                .wq(ObjKind::Sq, sqn)
                .is_some_and(|w| w.state == 1)
        {
            self.raw_sq_kick(sqn);
        }
    }

    /// SET_PP_RATE_LIMIT changed entry `index`: the SQs waiting under it
    /// go on at the new rate.
    pub(crate) fn raw_pace_entry_changed(&mut self, index: u16) {
        let waiting: Vec<u32> = self
            .engine
            .pace
            .iter()
            .filter(|(_, p)| p.timer.is_some())
            .map(|(&n, _)| n)
            .filter(|&n| {
                self.fw
                    .objs
                    .wq(ObjKind::Sq, n)
                    .is_some_and(|w| sq_pp_index(&w.ctx) == index)
            })
            .collect();
        for n in waiting {
            self.raw_sq_repace(n);
        }
    }

    fn raw_sq_error(&mut self, sqn: u32) {
        if let Some(w) = self.fw.objs.wq_mut(ObjKind::Sq, sqn) {
            w.state = 3;
        }
        self.raw_sq_flush(sqn);
        self.arm_err_poll();
    }

    /// Flushes everything posted to a raw SQ in the error state.
    pub(crate) fn raw_sq_flush(&mut self, sqn: u32) {
        let Some(w) = self.fw.objs.wq(ObjKind::Sq, sqn) else {
            return;
        };
        let (pas, lps, log_size, cqn, dbr_addr) = (
            w.pas.clone(),
            w.log_wq_pg_sz,
            w.log_wq_sz,
            w.cqn,
            w.dbr_addr,
        );
        let uidx = ifc().get(&w.ctx, "sqc", "user_index") as u32;
        let Ok(dbr) = self.read_dbr_word(dbr_addr + 4, &format!("SQ {sqn:#x}")) else {
            return;
        };
        let start = *self.engine.sqs.entry(sqn).or_insert(0);
        let end = self.flush_ring((sqn, cqn, uidx), start, dbr as u16, &pas, lps, 0, log_size);
        self.engine.sqs.insert(sqn, end);
    }

    /// A frame for the raw Ethernet path: steered by the NIC RX flow
    /// tables to TIRs, each handing it to one RQ (`steer.rs`).
    /// `src_td`: the transport domain of the TIS a looped-back frame was
    /// sent through (`None` from the wire); a TIR of that domain whose
    /// `self_lb_block` has the frame's bit (multicast: destination MAC
    /// bit 0; unicast otherwise) does not receive it.
    pub(crate) fn raw_receive(
        &mut self,
        port: u8,
        f: &[u8],
        vlan: Option<u16>,
        (l3, l4): (u8, u8),
        src_td: Option<u32>,
    ) {
        let _ = (port, vlan);
        let p = steer::parse(f);
        let lb_bit = if f[0] & 1 != 0 { 2 } else { 1 };
        for (tirn, flow_tag) in self.steer_rx(&p) {
            if let Some(td) = src_td {
                let blocked = matches!(
                    self.fw.objs.get(ObjKind::Tir, tirn).map(|o| &o.data),
                    Some(crate::fw::objects::ObjData::Tir(t)) if t.td == td && t.self_lb_block & lb_bit != 0
                );
                if blocked {
                    self.datapath.note(format!(
                        "TIR {tirn:#x}: self loopback blocked (self_lb_block {lb_bit:#x}, transport domain {td:#x})"
                    ));
                    continue;
                }
            }
            let Some((rqn, hash)) = self.tir_rq(tirn, &p) else {
                self.datapath.drops.raw_no_buffer += 1;
                continue;
            };
            // CQE `hds_ip_ext`: L3_OK (bit 1) and L4_OK (bit 2).
            let ok = (u8::from(p.ip.is_some() && p.l3_csum_ok) << 1)
                | (u8::from(p.l4.is_some() && p.l4_csum_ok) << 2);
            self.raw_deliver(rqn, f, (l3, l4, ok), hash, flow_tag);
        }
    }

    /// Writes a received frame into the next receive WQE of RQ `rqn`.
    fn raw_deliver(
        &mut self,
        rqn: u32,
        f: &[u8],
        (l3, l4, ok): (u8, u8, u8),
        hash: steer::RssHash,
        flow_tag: u32,
    ) {
        if self
            .fw
            .objs
            .wq(ObjKind::Rq, rqn)
            .is_none_or(|w| w.state != 1)
        {
            self.datapath.drops.raw_no_buffer += 1;
            return;
        }
        let Some(w) = self.fw.objs.wq(ObjKind::Rq, rqn) else {
            return;
        };
        let (lps, log_size, log_stride, cqn, pd, dbr_addr) = (
            w.log_wq_pg_sz,
            w.log_wq_sz.min(15),
            w.log_wq_stride.min(12),
            w.cqn,
            w.pd,
            w.dbr_addr,
        );
        let uidx = ifc().get(&w.ctx, "rqc", "user_index") as u32;
        let strip = ifc().get(&w.ctx, "rqc", "vsd") == 0;
        let scatter_fcs = ifc().get(&w.ctx, "rqc", "scatter_fcs") == 1;
        // VLAN stripping (`vsd` 0): the first 802.1Q tag leaves the frame
        // for the CQE's `vlan_info`, and `cv` (bit 0 of `l4_l3_hdr_type`)
        // says so. Scatter FCS: the frame's FCS follows it.
        let tagged = f.len() >= 18 && u16::from_be_bytes([f[12], f[13]]) == ETH_P_VLAN;
        let mut data: Vec<u8>;
        let mut vlan_info = 0u16;
        let mut cv = 0u8;
        let f_in = f;
        let f: &[u8] = if (strip && tagged) || scatter_fcs {
            data = Vec::with_capacity(f.len() + 4);
            if strip && tagged {
                vlan_info = u16::from_be_bytes([f[14], f[15]]);
                cv = 1;
                data.extend_from_slice(&f[..12]);
                data.extend_from_slice(&f[16..]);
            } else {
                data.extend_from_slice(f);
            }
            if scatter_fcs {
                data.extend_from_slice(&ethernet_fcs(f_in));
            }
            &data
        } else {
            f
        };
        let Ok(dbr) = self.read_dbr_word(dbr_addr, &format!("RQ {rqn:#x}")) else {
            return;
        };
        let ci = *self.engine.rqs.entry(rqn).or_insert(0);
        if dbr as u16 == ci {
            self.datapath.drops.raw_no_buffer += 1;
            // The RQ's Q counter set counts it as `out_of_buffer`.
            let set = self
                .fw
                .objs
                .wq(ObjKind::Rq, rqn)
                .map_or(0, |w| ifc().get(&w.ctx, "rqc", "counter_set_id") as u32);
            if set != 0
                && let Some(q) = self.fw.objs.q_counter_mut(set)
            {
                q.out_of_buffer = q.out_of_buffer.wrapping_add(1);
            }
            return;
        }
        let stride = 1usize << log_stride;
        let off = u64::from(u32::from(ci) & ((1u32 << log_size) - 1)) * stride as u64;
        let mut b = vec![0u8; stride.max(16)];
        let addr = self
            .fw
            .objs
            .wq(ObjKind::Rq, rqn)
            .and_then(|w| buf_addr(&w.pas, lps, off));
        let read = match addr {
            Some(a) => self
                .iommu
                .read(a, &mut b, &|| format!("RQ {rqn:#x} WQE {ci:#x}")),
            None => Err(()),
        };
        self.engine.rqs.insert(rqn, ci.wrapping_add(1));
        self.datapath.recv_wqes += 1;
        let sges = match read
            .map_err(|()| String::from("unreadable"))
            .and_then(|()| wqe::parse_recv(&b))
        {
            Ok(s) => s,
            Err(why) => {
                self.datapath
                    .note(format!("RQ {rqn:#x} WQE {ci:#x}: {why}"));
                return self.raw_rq_err(rqn, cqn, uidx, ci, syn::LOCAL_QP_OP);
            }
        };
        let cap: u64 = sges.iter().map(|s| s.len).fold(0, u64::saturating_add);
        if f.len() as u64 > cap {
            return self.raw_rq_err(rqn, cqn, uidx, ci, syn::LOCAL_LENGTH);
        }
        let mut o = 0usize;
        let mut chunks = Vec::new();
        for s in &sges {
            if o == f.len() {
                break;
            }
            let n = (f.len() - o).min(s.len as usize);
            chunks.clear();
            if mem::translate(
                &self.fw.objs,
                s.lkey,
                pd,
                s.addr,
                n as u64,
                Access::LocalWrite,
                &mut chunks,
            )
            .is_err()
                || mem::scatter(&mut self.iommu, &chunks, &f[o..o + n], &|| {
                    format!("RQ {rqn:#x} scatter")
                })
                .is_err()
            {
                return self.raw_rq_err(rqn, cqn, uidx, ci, syn::LOCAL_PROT);
            }
            o += n;
        }
        let c = Cqe {
            opcode: cqe_op::RESP_SEND,
            // `sop_drop_qpn` of a raw receive holds the flow tag of the
            // steering entry (rdma-core's `ibv_wc_read_flow_tag` reads it
            // there, masked by `MLX5_FLOW_TAG_MASK`); 0 without one.
            qpn: flow_tag & 0xff_ffff,
            wqe_counter: ci,
            srqn_uidx: uidx,
            byte_cnt: f.len() as u32,
            l4_l3_hdr_type: (l4 << 4) | (l3 << 2) | cv,
            vlan_info,
            hds_ip_ext: ok,
            rss_hash_result: hash.result,
            rss_hash_type: hash.htype,
            ..Cqe::default()
        };
        self.emit_cqe(cqn, c);
    }

    /// A raw SQ or RQ went to ERR (MODIFY_SQ/MODIFY_RQ): with
    /// `flush_in_error_en` its posted WQEs complete with the flush error
    /// now, and those posted later at the next error poll.
    pub(crate) fn raw_wq_error(&mut self, k: ObjKind, n: u32) {
        let flush = self.fw.objs.wq(k, n).is_some_and(|w| {
            let f = if k == ObjKind::Sq { "sqc" } else { "rqc" };
            ifc().get(&w.ctx, f, "flush_in_error_en") == 1
        });
        if !flush {
            return;
        }
        if k == ObjKind::Sq {
            self.raw_sq_flush(n);
        } else {
            self.engine.rqs.entry(n).or_insert(0);
            self.raw_rq_flush(n);
        }
        self.arm_err_poll();
    }

    /// Flushes the receive WQEs posted to a raw RQ in the error state
    /// (up to its doorbell record's counter), one flush-error CQE each.
    pub(crate) fn raw_rq_flush(&mut self, rqn: u32) {
        let Some(w) = self.fw.objs.wq(ObjKind::Rq, rqn) else {
            return;
        };
        if ifc().get(&w.ctx, "rqc", "flush_in_error_en") != 1 {
            return;
        }
        let (cqn, dbr_addr, log_size) = (w.cqn, w.dbr_addr, w.log_wq_sz.min(15));
        let uidx = ifc().get(&w.ctx, "rqc", "user_index") as u32;
        let Ok(dbr) = self.read_dbr_word(dbr_addr, &format!("RQ {rqn:#x}")) else {
            return;
        };
        let dbr = dbr as u16;
        let ci = *self.engine.rqs.entry(rqn).or_insert(0);
        let n = dbr.wrapping_sub(ci).min(1u16 << log_size);
        self.engine.rqs.insert(rqn, ci.wrapping_add(n));
        for i in 0..n {
            self.raw_rq_err(rqn, cqn, uidx, ci.wrapping_add(i), syn::WR_FLUSH);
        }
    }

    fn raw_rq_err(&mut self, rqn: u32, cqn: u32, uidx: u32, ci: u16, s: u8) {
        let c = Cqe {
            opcode: cqe_op::RESP_ERR,
            qpn: rqn,
            wqe_counter: ci,
            srqn_uidx: uidx,
            syndrome: s,
            ..Cqe::default()
        };
        self.emit_cqe(cqn, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_over_ipv4_checksums() {
        // Ethernet + IPv4 + UDP with 4 bytes of payload.
        let mut f = vec![0u8; 14 + 20 + 12];
        f[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&32u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let udp = &mut f[34..46];
        udp[0..2].copy_from_slice(&1234u16.to_be_bytes());
        udp[2..4].copy_from_slice(&5678u16.to_be_bytes());
        udp[4..6].copy_from_slice(&12u16.to_be_bytes());
        udp[8..12].copy_from_slice(b"ping");
        insert_checksums(&mut f, true, true);
        assert_eq!(fold(sum16(&f[14..34], 0)), 0, "IPv4 header sums to 0");
        let mut ps = sum16(&f[26..34], 0) + 17 + 12;
        ps = sum16(&f[34..46], ps);
        assert_eq!(fold(ps), 0, "UDP with pseudo header sums to 0");
        // Not IP: untouched.
        let mut g = vec![0u8; 60];
        insert_checksums(&mut g, true, true);
        assert_eq!(g, vec![0u8; 60]);
    }
}
