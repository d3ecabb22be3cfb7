//! Event queues, event delivery, and the completion side of CQs (CQE
//! writing with the owner bit, arming, overrun) that the data path uses.

use std::sync::atomic::{Ordering, fence};

use super::cmds::{check_buffer, read_pas, simple_destroy};
use super::objects::{Eq, ObjData, ObjKind, buf_addr, pages_for};
use super::{Cmd, R, fail, st};
use crate::device::Device;
use crate::ifc::ifc;
use crate::syndrome as syn;

/// Event types (PRM "event type").
pub mod event {
    /// Completion event.
    pub const COMPLETION: u8 = 0x00;
    /// CQ error.
    pub const CQ_ERROR: u8 = 0x04;
    /// Port state change.
    pub const PORT_CHANGE: u8 = 0x09;
    /// Command completion.
    pub const CMD: u8 = 0x0a;
    /// Page request.
    pub const PAGE_REQUEST: u8 = 0x0b;
    /// Path migrated.
    pub const PATH_MIG: u8 = 0x01;
    /// Communication established.
    pub const COMM_EST: u8 = 0x02;
    /// Send queue drained.
    pub const SQ_DRAINED: u8 = 0x03;
    /// Work queue catastrophic error.
    pub const WQ_CATAS_ERROR: u8 = 0x05;
    /// Path migration failed.
    pub const PATH_MIG_FAILED: u8 = 0x07;
    /// Internal error.
    pub const INTERNAL_ERROR: u8 = 0x08;
    /// Invalid request local work queue error.
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    /// Local access violation work queue error.
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
    /// SRQ catastrophic error.
    pub const SRQ_CATAS_ERROR: u8 = 0x12;
    /// Last WQE reached.
    pub const SRQ_LAST_WQE: u8 = 0x13;
    /// SRQ limit reached.
    pub const SRQ_RQ_LIMIT: u8 = 0x14;
}

/// `qp_events.type`: the resource an affiliated event names.
mod resource {
    pub const QP: u64 = 0;
    pub const RQ: u64 = 1;
    pub const SQ: u64 = 2;
}

pub(crate) fn create_eq(d: &mut Device, c: &Cmd) -> R {
    let g = |p: &str| c.get(&format!("eq_context_entry.{p}"));
    let log = g("log_eq_size");
    d.cap_le(log, "log_max_eq_sz", syn::EQ_LOG_SIZE)?;
    let uar = g("uar_page") as u32;
    d.need(ObjKind::Uar, uar, syn::BAD_UAR)?;
    let intr = g("intr") as u8;
    if intr >= d.cfg.msix_vectors {
        return fail(st::BAD_PARAM, syn::EQ_INTR);
    }
    let lps = check_buffer(g)?;
    let events = c.get("event_bitmask[0]");
    if events & (1 << event::CMD) != 0 && d.eq_for(event::CMD).is_some() {
        return fail(st::BAD_PARAM, syn::EQ_CMD_TWICE);
    }
    d.limit(ObjKind::Eq, "log_max_eq")?;
    let pas = read_pas(c, "pas", pages_for(64u64 << log, lps))?;
    let eq = Eq {
        log_size: log as u8,
        uar,
        intr,
        log_page_size: lps,
        pas,
        events,
        pc: 0,
        cc: 0,
        armed: false,
        overrun: false,
        ctx: c.bytes("eq_context_entry").to_vec(),
    };
    let n =
        d.fw.objs
            .create(ObjKind::Eq, ObjData::Eq(eq), vec![(ObjKind::Uar, uar)])?;
    c.out().set("eq_number", u64::from(n)).done()
}

pub(crate) fn destroy_eq(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Eq, "eq_number")
}

pub(crate) fn query_eq(d: &mut Device, c: &Cmd) -> R {
    let n = c.get("eq_number") as u32;
    let Some(eq) = d.fw.objs.eq_mut(n) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let (ctx, pc, cc, events, overrun) = (eq.ctx.clone(), eq.pc, eq.cc, eq.events, eq.overrun);
    let mut o = c.out();
    let off = ifc().field(c.lout, "eq_context_entry").byte_offset();
    o.put(off, &ctx);
    o.set(
        "eq_context_entry.producer_counter",
        u64::from(pc & 0xff_ffff),
    );
    o.set(
        "eq_context_entry.consumer_counter",
        u64::from(cc & 0xff_ffff),
    );
    o.set("eq_context_entry.status", if overrun { 0xa } else { 0 });
    o.set("event_bitmask", events);
    o.done()
}

impl Device {
    /// The EQ subscribed to an event type (lowest number first).
    pub(crate) fn eq_for(&self, ty: u8) -> Option<u32> {
        self.fw
            .objs
            .of(ObjKind::Eq)
            .find_map(|(n, o)| match &o.data {
                ObjData::Eq(e) if e.events & (1u64 << (ty & 63)) != 0 => Some(n),
                _ => None,
            })
    }

    /// Writes an EQE. Returns whether it was written.
    pub(crate) fn post_eqe(&mut self, eqn: u32, ty: u8, sub: u8, data: &[u8]) -> bool {
        let Some(eq) = self.fw.objs.eq_mut(eqn) else {
            return false;
        };
        if eq.overrun {
            return false;
        }
        let size = 1u32 << eq.log_size;
        if eq.pc.wrapping_sub(eq.cc) >= size {
            eq.overrun = true;
            log::warn!("EQ {eqn:#x} overrun: event type {ty:#x} lost");
            self.datapath.eq_overruns.push(eqn);
            return false;
        }
        let idx = eq.pc & (size - 1);
        let owner = ((eq.pc >> eq.log_size) & 1) as u64;
        let Some(addr) = buf_addr(&eq.pas, eq.log_page_size, u64::from(idx) * 64) else {
            return false;
        };
        eq.pc = eq.pc.wrapping_add(1);
        let interrupt = eq.armed.then_some(eq.intr);
        eq.armed = false;
        let t = ifc();
        let mut e = [0u8; 64];
        t.set(&mut e, "eqe", "event_type", u64::from(ty));
        t.set(&mut e, "eqe", "event_sub_type", u64::from(sub));
        let doff = t.field("eqe", "event_data").byte_offset();
        let n = data.len().min(28);
        e[doff..doff + n].copy_from_slice(&data[..n]);
        t.set(&mut e, "eqe", "owner", owner);
        if let Some(i) = self
            .faults
            .corrupt_eqe
            .iter()
            .position(|&(q, _, _, _)| q == eqn)
        {
            let (_, off, x, id) = self.faults.corrupt_eqe.remove(i);
            self.faults.hit(id);
            e[off] ^= x;
        }
        let what = || format!("EQ {eqn:#x} entry {idx}");
        if self.iommu.write(addr, &e[..63], &what).is_err() {
            return false;
        }
        fence(Ordering::SeqCst);
        if self.iommu.write(addr + 63, &e[63..], &what).is_err() {
            return false;
        }
        if let Some(v) = interrupt {
            self.raise_interrupt(v);
        }
        true
    }

    /// Posts an event of `ty` to the EQ subscribed to it, if any.
    pub(crate) fn post_event(
        &mut self,
        ty: u8,
        sub: u8,
        layout: &str,
        fields: &[(&str, u64)],
    ) -> bool {
        let Some(eqn) = self.eq_for(ty) else {
            return false;
        };
        let mut data = vec![0u8; 28];
        for &(f, v) in fields {
            ifc().set(&mut data, layout, f, v);
        }
        self.post_eqe(eqn, ty, sub, &data)
    }

    /// An affiliated event (`qp_events` data) of resource type `rtype`.
    fn affiliated_event(&mut self, ty: u8, rtype: u64, n: u32) -> bool {
        self.post_event(
            ty,
            0,
            "qp_events",
            &[("type", rtype), ("qpn_rqn_sqn", u64::from(n & 0xff_ffff))],
        )
    }

    /// [`Faults::qp_event`](crate::Faults::qp_event).
    pub(crate) fn inject_qp_event(&mut self, qpn: u32, ty: u8) -> Result<bool, crate::EmuError> {
        use super::QpState;
        let Some(state) = self.fw.objs.qp(qpn).map(|q| q.state) else {
            return Err(crate::EmuError::NoSuchObject {
                kind: ObjKind::Qp,
                number: qpn,
            });
        };
        match ty {
            event::WQ_CATAS_ERROR | event::WQ_INVAL_REQ_ERROR | event::WQ_ACCESS_ERROR => {
                // The event follows the move to the error state, then the
                // flush (as `qp_error` does for data-path errors). A QP in
                // RESET has nothing to flush.
                if state == QpState::Err {
                    return Ok(self.affiliated_event(ty, resource::QP, qpn));
                }
                if let Some(q) = self.fw.objs.qp_mut(qpn) {
                    q.state = QpState::Err;
                }
                let posted = self.affiliated_event(ty, resource::QP, qpn);
                self.qp_transition(qpn, state, QpState::Err);
                Ok(posted)
            }
            event::PATH_MIG
            | event::COMM_EST
            | event::SQ_DRAINED
            | event::PATH_MIG_FAILED
            | event::SRQ_LAST_WQE => Ok(self.affiliated_event(ty, resource::QP, qpn)),
            _ => Err(crate::EmuError::NotAnEvent {
                event_type: ty,
                of: "a QP",
            }),
        }
    }

    /// [`Faults::srq_event`](crate::Faults::srq_event).
    pub(crate) fn inject_srq_event(&mut self, srqn: u32, ty: u8) -> Result<bool, crate::EmuError> {
        let Some(s) = self.fw.objs.srq_mut(srqn) else {
            return Err(crate::EmuError::NoSuchObject {
                kind: ObjKind::Srq,
                number: srqn,
            });
        };
        match ty {
            event::SRQ_CATAS_ERROR => {
                if s.rmp {
                    // rmpc.state 3: error.
                    ifc().set(&mut s.ctx, "rmpc", "state", 3);
                } else {
                    // srqc.state 1: error.
                    ifc().set(&mut s.ctx, "srqc", "state", 1);
                }
            }
            event::SRQ_RQ_LIMIT => s.lwm = 0,
            _ => {
                return Err(crate::EmuError::NotAnEvent {
                    event_type: ty,
                    of: "an SRQ",
                });
            }
        }
        Ok(self.affiliated_event(ty, resource::QP, srqn))
    }

    /// [`Faults::wq_event`](crate::Faults::wq_event).
    pub(crate) fn inject_wq_event(
        &mut self,
        kind: ObjKind,
        n: u32,
        ty: u8,
    ) -> Result<bool, crate::EmuError> {
        let (rtype, layout) = match kind {
            ObjKind::Sq => (resource::SQ, "sqc"),
            ObjKind::Rq => (resource::RQ, "rqc"),
            _ => {
                return Err(crate::EmuError::NotAnEvent {
                    event_type: ty,
                    of: "an SQ or RQ (the object kind given)",
                });
            }
        };
        if !matches!(
            ty,
            event::WQ_CATAS_ERROR | event::WQ_INVAL_REQ_ERROR | event::WQ_ACCESS_ERROR
        ) {
            return Err(crate::EmuError::NotAnEvent {
                event_type: ty,
                of: "an SQ or RQ",
            });
        }
        let Some(w) = self.fw.objs.wq_mut(kind, n) else {
            return Err(crate::EmuError::NoSuchObject { kind, number: n });
        };
        // State 3: error.
        w.state = 3;
        ifc().set(&mut w.ctx, layout, "state", 3);
        Ok(self.affiliated_event(ty, rtype, n))
    }

    /// [`Faults::internal_error_event`](crate::Faults::internal_error_event).
    pub(crate) fn inject_internal_error(&mut self) -> bool {
        match self.eq_for(event::INTERNAL_ERROR) {
            Some(eqn) => self.post_eqe(eqn, event::INTERNAL_ERROR, 0, &[0; 28]),
            None => false,
        }
    }

    pub(crate) fn post_cmd_completion(&mut self, eqn: u32, slot: u8) {
        let mut data = vec![0u8; 28];
        ifc().set(
            &mut data,
            "cmd_inter_comp_event",
            "command_completion_vector",
            1u64 << slot,
        );
        self.post_eqe(eqn, event::CMD, 0, &data);
    }

    /// A runtime page request (positive) or reclaim (negative).
    pub(crate) fn page_request(&mut self, num_pages: i32) {
        if num_pages >= 0 {
            self.fw.pages.regular_wanted += num_pages as u32;
        } else {
            self.fw.pages.to_return += num_pages.unsigned_abs();
        }
        self.post_event(
            event::PAGE_REQUEST,
            0,
            "pages_req_event",
            &[
                ("function_id", 0),
                ("num_pages", u64::from(num_pages as u32)),
            ],
        );
    }

    /// A port state change event (sub-type 1 down, 4 active).
    pub(crate) fn port_change_event(&mut self, port: u8, up: bool) {
        self.post_event(
            event::PORT_CHANGE,
            if up { 4 } else { 1 },
            "port_state_change_event",
            &[("port_num", u64::from(port))],
        );
    }

    /// A write into a UAR page: EQ and CQ doorbells here, send doorbells to
    /// the data path.
    pub(crate) fn uar_write(&mut self, page: u32, offset: usize, value: u64, width: u8) {
        if !self.fw.objs.exists(ObjKind::Uar, page) {
            self.ignored_doorbells.push(format!(
                "write of {value:#x} to UAR page {page:#x}, which is not allocated"
            ));
            return;
        }
        match (offset, width) {
            (0x40 | 0x48, 4) => self.eq_doorbell(page, value as u32, offset == 0x40),
            (0x20, 8) => self.cq_arm_doorbell(page, value),
            (0x800..=0x9ff, _) => crate::datapath::send_doorbell(self, page, offset, value, width),
            _ => self.ignored_doorbells.push(format!(
                "UAR {page:#x} offset {offset:#x}: unknown doorbell {value:#x}"
            )),
        }
    }

    fn eq_doorbell(&mut self, page: u32, v: u32, arm: bool) {
        let eqn = v >> 24;
        let ci = v & 0xff_ffff;
        let Some(eq) = self.fw.objs.eq_mut(eqn) else {
            self.ignored_doorbells
                .push(format!("EQ doorbell for EQ {eqn:#x}, which does not exist"));
            return;
        };
        if eq.uar != page {
            self.ignored_doorbells.push(format!(
                "EQ {eqn:#x} doorbell on UAR {page:#x}, not its UAR {:#x}",
                eq.uar
            ));
            return;
        }
        // Widen the 24-bit consumer index next to the producer counter.
        let mut cc = (eq.pc & !0xff_ffff) | ci;
        if cc > eq.pc {
            cc = cc.wrapping_sub(1 << 24);
        }
        eq.cc = cc;
        if arm {
            eq.armed = true;
            if eq.cc != eq.pc {
                eq.armed = false;
                let v = eq.intr;
                self.raise_interrupt(v);
            }
        }
    }

    fn cq_arm_doorbell(&mut self, page: u32, v: u64) {
        let cqn = (v & 0xff_ffff) as u32;
        let arm = (v >> 32) as u32;
        let sn = ((arm >> 28) & 3) as u8;
        let cmd = (arm >> 24) & 0xf;
        let ci = arm & 0xff_ffff;
        let Some(cq) = self.fw.objs.cq_mut(cqn) else {
            self.ignored_doorbells
                .push(format!("CQ arm for CQ {cqn:#x}, which does not exist"));
            return;
        };
        if cq.uar != page {
            self.ignored_doorbells.push(format!(
                "CQ {cqn:#x} arm on UAR {page:#x}, not its UAR {:#x}",
                cq.uar
            ));
            return;
        }
        let solicited_only = cmd == 1;
        cq.armed = Some(solicited_only);
        cq.arm_sn = sn;
        self.datapath.cq_arms += 1;
        // An arm raises the event at once only for a CQE that is both
        // unconsumed (at or after the arm's consumer index) and unreported
        // (written after the CQ's last completion event). Both sets are
        // the newest CQEs, so they share one iff neither is empty. A CQE
        // already reported by the event the program is handling does not
        // raise another: the verbs' "next completion".
        let unconsumed = cq.pc.wrapping_sub(ci) & 0xff_ffff;
        let unreported = cq.pc.wrapping_sub(cq.reported);
        let fire =
            unconsumed != 0 && unreported != 0 && (!solicited_only || cq.solicited_unreported);
        let eqn = cq.c_eqn;
        if fire {
            cq.armed = None;
            cq.reported = cq.pc;
            cq.solicited_unreported = false;
            self.post_eqe_completion(eqn, cqn);
        }
    }

    fn post_eqe_completion(&mut self, eqn: u32, cqn: u32) {
        let mut data = vec![0u8; 28];
        ifc().set(&mut data, "comp_event", "cq_number", u64::from(cqn));
        self.post_eqe(eqn, event::COMPLETION, 0, &data);
    }

    /// Writes a CQE into CQ `cqn`: the owner bit is set from the producer
    /// counter, the CQE's last byte is written last; if the CQ is armed a
    /// completion event goes to its EQ. An overrun (the CQ is full per the
    /// consumer index in its doorbell record, or an injected overrun) puts
    /// the CQ in error and posts a CQ error event (syndrome 1).
    pub(crate) fn write_cqe(&mut self, cqn: u32, cqe: &[u8; 64]) -> Result<(), crate::CqeError> {
        use crate::CqeError;
        let Some(cq) = self.fw.objs.cq(cqn) else {
            return Err(CqeError::NoSuchCq);
        };
        if cq.error {
            return Err(CqeError::CqInError);
        }
        let (dbr, log, pc) = (cq.dbr_addr, cq.log_size, cq.pc);
        let mut w = [0u8; 4];
        self.iommu
            .read(dbr, &mut w, &|| format!("CQ {cqn:#x} doorbell record"))
            .map_err(|_| CqeError::IommuFault)?;
        let ci = u32::from_be_bytes(w) & 0xff_ffff;
        let size = 1u32 << log;
        let used = (pc.wrapping_sub(ci)) & 0xff_ffff;
        let forced = if let Some(i) = self.faults.cq_overrun.iter().position(|&(c, _)| c == cqn) {
            let (_, id) = self.faults.cq_overrun.remove(i);
            self.faults.hit(id);
            true
        } else {
            false
        };
        if used >= size || forced {
            if let Some(cq) = self.fw.objs.cq_mut(cqn) {
                cq.error = true;
            }
            self.datapath.cq_overruns.push(cqn);
            self.post_event(
                event::CQ_ERROR,
                0,
                "cq_error",
                &[("cqn", u64::from(cqn)), ("syndrome", 1)],
            );
            return Err(CqeError::Overrun);
        }
        let cq = self.fw.objs.cq_mut(cqn).expect("checked above");
        let stride = 64u64 << cq.cqe_sz;
        let idx = pc & (size - 1);
        let owner = ((pc >> log) & 1) as u8;
        let addr = buf_addr(&cq.pas, cq.log_page_size, u64::from(idx) * stride)
            .ok_or(CqeError::IommuFault)?
            + (stride - 64);
        cq.pc = pc.wrapping_add(1);
        let armed = cq.armed;
        let eqn = cq.c_eqn;
        let mut e = *cqe;
        e[63] = (e[63] & !1) | owner;
        if let Some(i) = self
            .faults
            .corrupt_cqe
            .iter()
            .position(|&(q, _, _, _)| q == cqn)
        {
            let (_, off, x, id) = self.faults.corrupt_cqe.remove(i);
            self.faults.hit(id);
            e[off] ^= x;
        }
        let what = || format!("CQ {cqn:#x} entry {idx}");
        self.iommu
            .write(addr, &e[..63], &what)
            .map_err(|_| CqeError::IommuFault)?;
        fence(Ordering::SeqCst);
        self.iommu
            .write(addr + 63, &e[63..], &what)
            .map_err(|_| CqeError::IommuFault)?;
        let opcode = cqe[63] >> 4;
        let solicited = cqe[63] & 2 != 0 || opcode == 13 || opcode == 14;
        let fire = match armed {
            Some(true) => solicited,
            Some(false) => true,
            None => false,
        };
        if let Some(cq) = self.fw.objs.cq_mut(cqn) {
            cq.solicited_unreported |= solicited;
            if fire {
                cq.armed = None;
                cq.reported = cq.pc;
                cq.solicited_unreported = false;
            }
        }
        if fire {
            self.post_eqe_completion(eqn, cqn);
        }
        Ok(())
    }
}
