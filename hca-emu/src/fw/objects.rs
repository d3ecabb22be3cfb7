//! Object tables: every firmware object, its number, what it depends on and
//! how many objects use it (destroy order is checked against that).

use std::collections::BTreeMap;

use super::{Fail, NumberPool, fail, st};
use crate::device::{BAR_SIZE, reg::INIT_SEG_SIZE};
use crate::rng::Rng;
use crate::syndrome as syn;

/// The kinds of firmware objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjKind {
    /// User access region (ALLOC_UAR).
    Uar,
    /// Protection domain (ALLOC_PD).
    Pd,
    /// Transport domain (ALLOC_TRANSPORT_DOMAIN).
    TransportDomain,
    /// Memory key (CREATE_MKEY); the number is the `mkey_index`.
    Mkey,
    /// Event queue.
    Eq,
    /// Completion queue.
    Cq,
    /// Queue pair.
    Qp,
    /// Shared receive queue.
    Srq,
    /// Send queue (raw Ethernet).
    Sq,
    /// Receive queue (raw Ethernet).
    Rq,
    /// Transport interface send.
    Tis,
    /// Transport interface receive.
    Tir,
    /// RQ table.
    Rqt,
    /// Flow table.
    FlowTable,
    /// Flow group.
    FlowGroup,
    /// Flow table entry (numbered internally).
    FlowEntry,
    /// User memory (CREATE_UMEM).
    Umem,
    /// Q counter set (ALLOC_Q_COUNTER); the number is the
    /// `counter_set_id`.
    QCounter,
}

/// An event queue.
#[derive(Clone, Debug)]
pub(crate) struct Eq {
    pub(crate) log_size: u8,
    pub(crate) uar: u32,
    pub(crate) intr: u8,
    pub(crate) log_page_size: u8,
    pub(crate) pas: Vec<u64>,
    /// `event_bitmask[0]`: bit n = event type n.
    pub(crate) events: u64,
    pub(crate) pc: u32,
    pub(crate) cc: u32,
    pub(crate) armed: bool,
    pub(crate) overrun: bool,
    pub(crate) ctx: Vec<u8>,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub struct Cq {
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// 0: 64-byte CQEs, 1: 128-byte.
    pub cqe_sz: u8,
    /// UAR of its doorbells.
    pub uar: u32,
    /// EQ that receives its completion events.
    pub c_eqn: u32,
    /// Buffer page size: 4 KiB << log_page_size.
    pub log_page_size: u8,
    /// Buffer pages (IOVAs).
    pub pas: Vec<u64>,
    /// Doorbell record IOVA.
    pub dbr_addr: u64,
    /// Producer counter: CQEs written so far.
    pub pc: u32,
    /// Armed: `Some(solicited_only)`.
    pub armed: Option<bool>,
    /// Arm sequence number of the last arm doorbell.
    pub arm_sn: u8,
    /// Producer counter when the CQ last raised a completion event: the
    /// CQEs before it were reported by an event, those from it on were
    /// not.
    pub reported: u32,
    /// A solicited CQE was written since the last completion event.
    pub solicited_unreported: bool,
    /// Overrun or write failure happened: the CQ is in error.
    pub error: bool,
    /// The context as created.
    pub ctx: Vec<u8>,
}

/// QP state (PRM encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// RESET.
    Rst = 0,
    /// INIT.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue error.
    Sqer = 4,
    /// Send queue drained.
    Sqd = 5,
    /// Error.
    Err = 6,
}

/// A queue pair.
#[derive(Clone, Debug)]
pub struct Qp {
    /// Service type (0 RC, 1 UC, 2 UD).
    pub st: u8,
    /// Current state.
    pub state: QpState,
    /// Protection domain.
    pub pd: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// SRQ when `rq_type` = 1.
    pub srqn: Option<u32>,
    /// 0 regular RQ, 1 SRQ, 3 zero-length RQ.
    pub rq_type: u8,
    /// log2 receive WQEs.
    pub log_rq_size: u8,
    /// Receive WQE stride: 16 << log_rq_stride.
    pub log_rq_stride: u8,
    /// log2 send WQEBBs.
    pub log_sq_size: u8,
    /// No send queue.
    pub no_sq: bool,
    /// UAR of its doorbells.
    pub uar: u32,
    /// Buffer page size: 4 KiB << log_page_size.
    pub log_page_size: u8,
    /// Buffer pages: the RQ first, then the SQ.
    pub pas: Vec<u64>,
    /// Doorbell record.
    pub dbr_addr: u64,
    /// The QP context as last set (QUERY_QP answers it).
    pub ctx: Vec<u8>,
}

/// A memory key.
#[derive(Clone, Debug)]
pub struct Mkey {
    /// The key: `mkey_index << 8 | mkey_7_0`.
    pub key: u32,
    /// Protection domain.
    pub pd: u32,
    /// Access mode: 0 PA, 1 MTT.
    pub access_mode: u8,
    /// Local read.
    pub lr: bool,
    /// Local write.
    pub lw: bool,
    /// Remote read.
    pub rr: bool,
    /// Remote write.
    pub rw: bool,
    /// Atomic.
    pub a: bool,
    /// First virtual address.
    pub start: u64,
    /// Length (`u64::MAX` with length64).
    pub len: u64,
    /// MTT page size: 4 KiB << (log_page_size - 12) ... stored as log2 bytes.
    pub log_page_size: u8,
    /// MTT entries (page IOVAs).
    pub mtt: Vec<u64>,
    /// The context as created.
    pub ctx: Vec<u8>,
}

/// A shared receive queue: an SRQ (CREATE_SRQ, ISSI 0) or a receive memory
/// pool (CREATE_RMP, ISSI 1); the data path treats both alike.
#[derive(Clone, Debug)]
pub struct Srq {
    /// Created as an RMP: only the RMP commands reach it (and only the SRQ
    /// commands an SRQ).
    pub rmp: bool,
    /// log2 WQEs.
    pub log_size: u8,
    /// WQE stride: 16 << log_rq_stride.
    pub log_rq_stride: u8,
    /// Protection domain.
    pub pd: u32,
    /// CQ (XRC only; 0 otherwise).
    pub cqn: u32,
    /// Doorbell record.
    pub dbr_addr: u64,
    /// Buffer page size.
    pub log_page_size: u8,
    /// Buffer pages.
    pub pas: Vec<u64>,
    /// Limit watermark (ARM_RQ, or MODIFY_RMP of `wq.lwm`).
    pub lwm: u16,
    /// The context as created (`srqc`, or `rmpc` for an RMP).
    pub ctx: Vec<u8>,
}

/// A send or receive queue of the raw Ethernet path.
#[derive(Clone, Debug)]
pub struct Wq {
    /// 0 RST, 1 RDY, 3 ERR.
    pub state: u8,
    /// CQ.
    pub cqn: u32,
    /// Protection domain.
    pub pd: u32,
    /// UAR.
    pub uar: u32,
    /// Doorbell record.
    pub dbr_addr: u64,
    /// log2 WQEs.
    pub log_wq_sz: u8,
    /// log2 WQE stride.
    pub log_wq_stride: u8,
    /// log2 page size (relative to 4 KiB).
    pub log_wq_pg_sz: u8,
    /// Buffer pages.
    pub pas: Vec<u64>,
    /// TIS (send queues).
    pub tisn: u32,
    /// The context as last set.
    pub ctx: Vec<u8>,
}

impl Wq {
    /// An SQ's `sqc.packet_pacing_rate_limit_index`: the entry of the
    /// rate-limit table it is paced by (0: not paced).
    pub fn packet_pacing_rate_limit_index(&self) -> u16 {
        super::pp::sq_pp_index(&self.ctx)
    }
}

/// A flow table (`flow_table_context`).
#[derive(Clone, Debug)]
pub(crate) struct FlowTable {
    pub(crate) table_type: u8,
    pub(crate) log_size: u8,
    pub(crate) level: u8,
    /// `table_miss_action`: 0 default (drop), 1 go to `miss_table`.
    pub(crate) miss_action: u8,
    pub(crate) miss_table: u32,
    /// Set by SET_FLOW_TABLE_ROOT (one root per table type).
    pub(crate) root: bool,
}

/// A flow group: its index range and match criteria.
#[derive(Clone, Debug)]
pub(crate) struct FlowGroup {
    pub(crate) table: u32,
    pub(crate) start: u32,
    pub(crate) end: u32,
    /// `match_criteria.outer_headers` (`fte_match_set_lyr_2_4`, 64 bytes).
    pub(crate) outer: Vec<u8>,
}

/// A flow table entry (`flow_context`).
#[derive(Clone, Debug)]
pub(crate) struct FlowEntry {
    pub(crate) table: u32,
    pub(crate) index: u32,
    pub(crate) group: u32,
    /// `action` bits (allow 1, drop 2, forward 4, count 8).
    pub(crate) action: u16,
    /// `match_value.outer_headers` (64 bytes).
    pub(crate) outer: Vec<u8>,
    /// `(destination_type, destination_id)` of each destination.
    pub(crate) dests: Vec<(u8, u32)>,
    /// `flow_tag` (24 bits): written into the receive CQE's `sop_drop_qpn`
    /// of the frames the entry forwards.
    pub(crate) flow_tag: u32,
}

/// A TIR (`tirc`): where it dispatches and how it hashes.
#[derive(Clone, Debug)]
pub(crate) struct Tir {
    /// 0 direct (`inline_rqn`), 1 indirect (`indirect_table`).
    pub(crate) disp_type: u8,
    pub(crate) inline_rqn: u32,
    pub(crate) rqt: u32,
    /// `rx_hash_fn` (0 none, 2 Toeplitz).
    pub(crate) hash_fn: u8,
    pub(crate) key: [u8; 40],
    /// `rx_hash_field_selector_outer.l3_prot_type` (0 IPv4, 1 IPv6).
    pub(crate) l3_ipv6: bool,
    /// `rx_hash_field_selector_outer.l4_prot_type` (0 TCP, 1 UDP).
    pub(crate) l4_udp: bool,
    /// `rx_hash_field_selector_outer.selected_fields`.
    pub(crate) fields: u32,
    /// `transport_domain`.
    pub(crate) td: u32,
    /// `self_lb_block`: bit 0 unicast, bit 1 multicast self loopback
    /// blocked (frames sent through a TIS of the same transport domain).
    pub(crate) self_lb_block: u8,
}

/// The counters of a Q counter set the emulator counts
/// (`query_q_counter_out`); the others read 0.
#[derive(Clone, Debug, Default)]
pub(crate) struct QCounter {
    /// Frames steered to an RQ of this set with no receive WQE posted.
    pub(crate) out_of_buffer: u32,
}

/// Object payloads.
#[derive(Clone, Debug)]
pub(crate) enum ObjData {
    None,
    Mkey(Mkey),
    Eq(Eq),
    Cq(Cq),
    Qp(Qp),
    Srq(Srq),
    Wq(Wq),
    FlowTable(FlowTable),
    FlowGroup(FlowGroup),
    FlowEntry(FlowEntry),
    Tir(Box<Tir>),
    /// An RQ table: its `rq_num[]` (the first `rqt_actual_size` entries).
    Rqt(Vec<u32>),
    Umem(super::umem::Umem),
    QCounter(QCounter),
}

/// A typed accessor of the objects of one kind: `typed!(ref cq, Cq)` is
/// `fn cq(&self, n) -> Option<&Cq>`, the data of CQ `n` when it exists;
/// `mut` makes the `&mut` one.
macro_rules! typed {
    (ref $name:ident, $kind:ident) => {
        pub(crate) fn $name(&self, n: u32) -> Option<&$kind> {
            match self.get(ObjKind::$kind, n).map(|o| &o.data) {
                Some(ObjData::$kind(x)) => Some(x),
                _ => None,
            }
        }
    };
    (mut $name:ident, $kind:ident) => {
        pub(crate) fn $name(&mut self, n: u32) -> Option<&mut $kind> {
            match self.get_mut(ObjKind::$kind, n).map(|o| &mut o.data) {
                Some(ObjData::$kind(x)) => Some(x),
                _ => None,
            }
        }
    };
}

/// One object.
#[derive(Clone, Debug)]
pub(crate) struct Obj {
    pub(crate) deps: Vec<(ObjKind, u32)>,
    pub(crate) users: u32,
    pub(crate) data: ObjData,
}

/// Number spaces: QPs, SQs and RQs share one like on the device.
fn pool_of(k: ObjKind) -> ObjKind {
    match k {
        ObjKind::Sq | ObjKind::Rq => ObjKind::Qp,
        k => k,
    }
}

/// All objects.
pub(crate) struct Objects {
    map: BTreeMap<(ObjKind, u32), Obj>,
    pools: BTreeMap<ObjKind, NumberPool>,
}

impl Objects {
    pub(crate) fn new(rng: &mut Rng) -> Self {
        let max_uar = (BAR_SIZE / 4096 - 1) as u32;
        let first_uar = (INIT_SEG_SIZE / 4096) as u32 * 2;
        let mut pools = BTreeMap::new();
        use ObjKind::*;
        pools.insert(
            Uar,
            NumberPool::new(rng, first_uar, first_uar + 32, 1, max_uar),
        );
        pools.insert(Eq, NumberPool::new(rng, 5, 40, 1, 0xff));
        for k in [
            Pd,
            TransportDomain,
            Mkey,
            Cq,
            Srq,
            Tis,
            Tir,
            Rqt,
            FlowTable,
            FlowGroup,
            Umem,
        ] {
            pools.insert(k, NumberPool::new(rng, 0x10, 0x4000, 7, 0xff_ffff));
        }
        pools.insert(Qp, NumberPool::new(rng, 0x100, 0x8000, 7, 0xff_ffff));
        pools.insert(FlowEntry, NumberPool::new(rng, 1, 2, 1, u32::MAX));
        // `counter_set_id` is 8 bits; set 0 is the default set every queue
        // counts into.
        pools.insert(QCounter, NumberPool::new(rng, 1, 2, 1, 0xff));
        Self {
            map: BTreeMap::new(),
            pools,
        }
    }

    pub(crate) fn get(&self, k: ObjKind, n: u32) -> Option<&Obj> {
        self.map.get(&(k, n))
    }

    pub(crate) fn get_mut(&mut self, k: ObjKind, n: u32) -> Option<&mut Obj> {
        self.map.get_mut(&(k, n))
    }

    pub(crate) fn exists(&self, k: ObjKind, n: u32) -> bool {
        self.map.contains_key(&(k, n))
    }

    pub(crate) fn count(&self, k: ObjKind) -> usize {
        self.map.range((k, 0)..=(k, u32::MAX)).count()
    }

    /// Every live object.
    pub(crate) fn live(&self) -> Vec<(ObjKind, u32)> {
        self.map.keys().copied().collect()
    }

    /// Live objects of one kind.
    pub(crate) fn of(&self, k: ObjKind) -> impl Iterator<Item = (u32, &Obj)> {
        self.map
            .range((k, 0)..=(k, u32::MAX))
            .map(|(&(_, n), o)| (n, o))
    }

    /// Creates an object that holds `deps` (each must exist).
    pub(crate) fn create(
        &mut self,
        k: ObjKind,
        data: ObjData,
        deps: Vec<(ObjKind, u32)>,
    ) -> Result<u32, Fail> {
        let pool = pool_of(k);
        let map = &self.map;
        let sharing: &[ObjKind] = if pool == ObjKind::Qp {
            &[ObjKind::Qp, ObjKind::Sq, ObjKind::Rq]
        } else {
            std::slice::from_ref(&k)
        };
        let taken = |n: u32| sharing.iter().any(|&kk| map.contains_key(&(kk, n)));
        let n = self
            .pools
            .get_mut(&pool)
            .expect("every kind has a pool")
            .alloc(taken)
            .ok_or(Fail {
                status: st::LIM_EXCEEDED,
                syndrome: syn::TOO_MANY,
            })?;
        for d in &deps {
            if let Some(o) = self.map.get_mut(d) {
                o.users += 1;
            }
        }
        self.map.insert(
            (k, n),
            Obj {
                deps,
                users: 0,
                data,
            },
        );
        Ok(n)
    }

    /// Destroys an object nobody uses.
    pub(crate) fn destroy(&mut self, k: ObjKind, n: u32) -> Result<Obj, Fail> {
        match self.map.get(&(k, n)) {
            None => return fail(st::BAD_RES, syn::NO_SUCH_OBJECT),
            Some(o) if o.users > 0 => return fail(st::BAD_RES_STATE, syn::IN_USE),
            Some(_) => {}
        }
        let o = self.map.remove(&(k, n)).expect("checked above");
        for d in &o.deps {
            if let Some(x) = self.map.get_mut(d) {
                x.users = x.users.saturating_sub(1);
            }
        }
        Ok(o)
    }

    /// Forgets every object (TEARDOWN_HCA, reset).
    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }

    typed!(ref cq, Cq);
    typed!(mut cq_mut, Cq);
    typed!(mut eq_mut, Eq);
    typed!(ref qp, Qp);
    typed!(mut qp_mut, Qp);
    typed!(ref mkey, Mkey);
    typed!(mut mkey_mut, Mkey);
    typed!(ref srq, Srq);

    pub(crate) fn umem(&self, n: u32) -> Option<&super::umem::Umem> {
        match self.get(ObjKind::Umem, n).map(|o| &o.data) {
            Some(ObjData::Umem(u)) => Some(u),
            _ => None,
        }
    }
    typed!(mut srq_mut, Srq);
    typed!(mut q_counter_mut, QCounter);
    typed!(ref q_counter, QCounter);

    pub(crate) fn wq(&self, k: ObjKind, n: u32) -> Option<&Wq> {
        match self.get(k, n).map(|o| &o.data) {
            Some(ObjData::Wq(w)) => Some(w),
            _ => None,
        }
    }

    pub(crate) fn wq_mut(&mut self, k: ObjKind, n: u32) -> Option<&mut Wq> {
        match self.get_mut(k, n).map(|o| &mut o.data) {
            Some(ObjData::Wq(w)) => Some(w),
            _ => None,
        }
    }

    /// Queue buffers and doorbell records of live objects, as IOVA ranges.
    pub(crate) fn buffers(&self) -> Vec<(ObjKind, u32, u64, usize)> {
        let mut v = Vec::new();
        for (&(k, n), o) in &self.map {
            let (pas, lps, dbr): (&[u64], u8, Option<u64>) = match &o.data {
                ObjData::Eq(e) => (&e.pas, e.log_page_size, None),
                ObjData::Cq(c) => (&c.pas, c.log_page_size, Some(c.dbr_addr)),
                ObjData::Qp(q) => (&q.pas, q.log_page_size, Some(q.dbr_addr)),
                ObjData::Srq(s) => (&s.pas, s.log_page_size, Some(s.dbr_addr)),
                ObjData::Wq(w) => (&w.pas, w.log_wq_pg_sz, Some(w.dbr_addr)),
                _ => (&[], 0, None),
            };
            for &p in pas {
                v.push((k, n, p, 4096usize << lps.min(20)));
            }
            if let Some(d) = dbr {
                v.push((k, n, d, 8));
            }
        }
        v
    }
}

/// Number of pages a queue of `bytes` needs with pages of 4 KiB << lps.
pub(crate) fn pages_for(bytes: u64, log_page_size: u8) -> usize {
    let ps = 4096u64 << log_page_size.min(20);
    bytes.div_ceil(ps) as usize
}

/// IOVA of byte `off` of a queue buffer.
pub fn buf_addr(pas: &[u64], log_page_size: u8, off: u64) -> Option<u64> {
    let shift = 12 + u32::from(log_page_size.min(20));
    let page = usize::try_from(off >> shift).ok()?;
    Some(pas.get(page)? + (off & ((1u64 << shift) - 1)))
}
