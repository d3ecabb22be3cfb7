//! The data path: the transport engine that executes what the driver posts.
//!
//! # What executes
//!
//! - **Send doorbells** (UAR offset 0x800 or 0x900, a 64-bit store of the
//!   first 8 bytes of the last WQE's control segment; `qpn << 8 | ds` in
//!   the low word) name a QP or a raw Ethernet SQ. The engine reads the
//!   send counter of the queue's doorbell record (word 1, 16 bits) and
//!   executes every WQE from its own position up to that counter, fetching
//!   the 64-byte WQEBBs from the queue buffer (the SQ follows the RQ in a
//!   QP's buffer) with wrap-around.
//! - **BlueFlame**: a write-combined copy of a WQE into a register half
//!   ([`Mmio::write_bf`](platform::Mmio::write_bf), one burst per call)
//!   is a doorbell that carries the WQE: once the `ds × 16` bytes its
//!   control segment announces have arrived (at most the 256-byte half),
//!   the engine executes the copy, as the hardware does, not the WQE in
//!   memory (the doorbell record is still checked). A copy that differs
//!   from memory, or that stops short of its `ds`, is a driver error
//!   counted in [`Datapath::bf_mismatches`]; a copy that stops short is
//!   executed from memory when the next write to its half starts. Single
//!   8-byte writes into the rest of a half (a copy not written through
//!   `write_bf`) are only compared with memory.
//!   (Assumption: the PRM says BlueFlame WQEs are taken from the
//!   register; when the WQE named is not the next one the queue executes,
//!   the engine fetches from memory.)
//! - A WQE is checked before it runs: its control segment must carry this
//!   queue's number and the queue position as `wqe_index`, `ds` must cover
//!   the segments the opcode needs, the opcode must be one the queue type
//!   executes (RC: NOP, SEND, SEND_IMM, RDMA_WRITE, RDMA_WRITE_IMM,
//!   RDMA_READ, ATOMIC_CS, ATOMIC_FA; UC: NOP, SEND, SEND_IMM, RDMA_WRITE,
//!   RDMA_WRITE_IMM; UD: NOP, SEND, SEND_IMM; raw SQ: NOP, SEND). Anything
//!   else completes with a local QP operation error (syndrome 0x02).
//! - **RC**: messages go out as RoCE packets on the QP's port, segmented
//!   at the path MTU (`mtu` of INIT2RTR): SEND and RDMA WRITE as FIRST,
//!   MIDDLE..., LAST of exactly one MTU (the last the rest), ONLY when
//!   they fit; the RETH on the first packet of a WRITE, the immediate and
//!   the solicited bit on the last; AckReq on the last packet and at least
//!   every 2^`log_ack_req_freq` packets (RTR2RTS). The responder checks
//!   each packet's PSN (duplicates are re-acknowledged when they ask,
//!   READs re-executed, atomics answered from their saved result; a PSN
//!   ahead is NAKed once with a sequence error), the opcode sequence and
//!   the packet sizes (NAK invalid request), scatters each packet at its
//!   offset, completes the receive on the last, ACKs when asked and at the
//!   end of each message, and answers READs with responses segmented the
//!   same way (FIRST/MIDDLE/LAST with the AETH on the first and the last,
//!   or ONLY). The requester completes WQEs in order when they are
//!   acknowledged, resends from the first unacknowledged packet (go back
//!   N: from the NAKed PSN) on the ACK timeout (4.096 µs ×
//!   2^`ack_timeout`, 0 = never) and on a sequence NAK, and asks a READ
//!   again for the rest of its data when a response is missing, counting
//!   `retry_count`; on an RNR NAK it waits the responder's `min_rnr_nak`
//!   timer and retries, counting `rnr_retry` (7 = infinite). All timers run
//!   on the device clock (virtual time by default).
//! - Every RoCE packet carries its ICRC; a received packet whose ICRC does
//!   not match is dropped ([`Drops::icrc`]) before anything else looks at
//!   it.
//! - **UC and UD** complete at transmission; the responder drops what it
//!   cannot take (no receive WQE, Q_Key mismatch, bad rkey on UC) silently,
//!   as on the wire. UC messages are segmented like RC (no AckReq); a UC
//!   message with a missing packet is dropped and its receive WQE serves
//!   the next SEND (IBA 9.8, UC). UD messages are one packet, at most the port
//!   MTU.
//! - **Receive**: a SEND consumes the next WQE of the QP's RQ (receive
//!   counter in word 0 of the doorbell record) or of its SRQ (following
//!   the `next_wqe_index` links; SRQ limit event 0x14 when fewer WQEs than
//!   the armed `lwm` remain) and scatters into it; a UD receive scatters the
//!   40-byte GRH area first.
//! - **Raw Ethernet**: an SQ object sends its inline headers plus gathered
//!   data as a frame (with checksum insertion if asked); frames that are
//!   not RoCE (or arrive while RoCE is disabled on the vport) are steered
//!   by the NIC RX flow tables (outer L2-L4 match, priorities by flow
//!   index, miss actions) to TIRs, and by each TIR to its RQ, directly or
//!   by the Toeplitz hash through an RQ table; the CQE carries the RSS
//!   hash and type and the L3/L4 checksum-OK bits. An SQ whose
//!   `packet_pacing_rate_limit_index` names a set entry of the rate-limit
//!   table (SET_PP_RATE_LIMIT) is paced: a token bucket of the entry's
//!   rate and burst (`burst_upper_bound`, else one frame) lets each frame
//!   leave only when its bits fit; a WQE that does not fit waits, with the
//!   WQEs behind it, for a pacing timer, and its send CQE is written when
//!   its frame leaves ([`Datapath::pace_waits`] counts the waits).
//! - **QP states**: the SQ executes in RTS; the RQ receives in RTR and RTS
//!   (and SQE for UD/UC); in the error state everything posted completes
//!   with the flush syndrome (0x05), also WQEs posted later (send
//!   doorbells, and receive counters checked every 100 µs of device time).
//!   A requester error on UD/UC puts the QP in SQE (the RQ keeps working).
//!
//! See [`Datapath`] for the counters and the drop reasons, and
//! [`Faults::drop_packets`](crate::Faults::drop_packets) for packet loss.
//!
//! # CQEs
//!
//! 64-byte CQEs as in FACTS.md (checked against the libmlx5 vectors):
//! `op_own` (opcode, solicited bit; `write_cqe` adds the owner bit),
//! `sop_drop_qpn` (send opcode << 24 for requester CQEs, and the QPN),
//! `wqe_counter` (requester: the WQE's `wqe_index`; RQ: the receive
//! counter; SRQ: the WQE index), `srqn_uidx` (the QP's `user_index` when
//! `cqe_version` is 1, as the recorded caps say; else the SRQ number of an
//! SRQ receive), `byte_cnt` (RDMA READ length, 8 for atomics, received
//! bytes, 40 more for UD), `imm_inval_pkey` (immediate; the P_Key for a UD
//! receive without one), `flags_rqpn` (source QPN; bits 29:28 = 1 when the
//! GRH is in the buffer (UD); bits 25:24 the RoCE L3 type: 0 GRH/v1, 1
//! IPv6, 2 IPv4), `l4_l3_hdr_type` (VLAN bit, raw L3/L4 types),
//! `vlan_info`, `timestamp` (internal timer ticks). Error CQEs carry the
//! syndrome and `vendor_err_synd`.
//!
//! # Deviations from a real ConnectX
//!
//! - No Ethernet FCS; no end-to-end credits (ACKs carry the "invalid
//!   credit count" code), no congestion control (no CNPs, ECN not marked
//!   by the wire), no APM.
//! - ACK coalescing follows the requester's AckReq only: the responder
//!   ACKs a packet that asks and the last packet of each message (a real
//!   HCA may also ACK on its own timer).
//! - A duplicate SEND/WRITE packet is acknowledged again only when it asks
//!   for an ACK (IBA leaves the choice to the responder); a lost READ
//!   response is asked again at once with a request for the rest (IBA
//!   allows waiting for the ACK timeout too).
//! - Not executed (local QP operation error): SEND_INVAL, LOCAL_INVAL, UMR,
//!   masked atomics, LSO; no memory windows, XRC, DC, striding RQ, CQE
//!   compression or scatter-to-CQE.
//! - UD/UC send-side errors put the QP in SQE, RC errors in ERR (IBA). A UD
//!   receive too small completes with local length error and leaves the QP
//!   usable.
//! - `vendor_err_synd` is only known from the field for flush (0xf9,
//!   accelio issue #181), transport retry (0x81, Oracle note 1614576.1)
//!   and remote access (0x88, NVIDIA forum thread 207715); local
//!   protection's 0x51 is an assumption (the field shows 0x52 and 0x53,
//!   by cause); it is 0 otherwise.
//! - Raw Ethernet: flow matching on outer L2-L4 headers only (no misc,
//!   inner or tunnel fields, no flow counters or header rewrite), no
//!   inverted-XOR8 hash, VLAN stripping or LSO; SQs send on port 1.
//! - RoCE frames are only handled when the NIC vport has `roce_en`; a frame
//!   to the sending port's own MAC loops back inside the HCA (link up).
//! - InfiniBand ports: RC/UC QPs are routed by LID (`rlid`, no GRH); the
//!   packet travels in the RoCE v1 framing with MAC `02:1b:00:00:<lid>` / GID `fe80::<lid>`
//!   standing for the LRH's DLID and SLID (no LRH, SL/VL or VCRC), and is
//!   taken by the port whose LID it names (its own LID loops back inside
//!   the HCA). UD address vectors name the destination by `rlid` too; a
//!   UD receive on InfiniBand skips the 40 bytes of the GRH area (written
//!   as zeros) and its CQE says no GRH. UD multicast: DLID an MLID
//!   (0xc000..=0xfffe) that the modelled subnet manager derives from the
//!   MGID ([`ib_mlid`]), GRH mandatory (DGID the MGID, SGID the sender's
//!   LID GID), DQPN 0xffffff; a member port's attached QPs receive it with
//!   the GRH, the sender's own port too (not the sender when `block_lb_mc`).
//! - Each HCA has its own virtual clock; `relax`/`delay` wait for the peers
//!   on the wire to be quiet before the clock advances.
//! - The UD message limit is the IB MTU that fits the port's PMTU admin MTU
//!   (1522 by default: 1024 bytes).
//! - There is no RTS2SQD command, so the SQD drain is not reachable.

mod cqe;
mod mem;
mod packet;
mod raw;
mod requester;
mod responder;
mod steer;
mod wqe;

pub use cqe::syndrome as cqe_syndrome;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::device::{Device, Event, InFlight, Shared, Timer};
use crate::fw::{ObjKind, Qp, QpState, buf_addr};
use crate::ifc::ifc;
use crate::wire::{Peer, SocketWire};
use packet::{RoceVer, Route};

/// Entries kept in [`Datapath::doorbells`] and [`Datapath::log`].
const KEEP: usize = 256;
/// Period of the check for WQEs posted to queues in the error state.
const ERR_POLL: Duration = Duration::from_micros(100);

/// One doorbell write the data path received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoorbellWrite {
    /// UAR page.
    pub uar: u32,
    /// Offset in the page (0x800 or 0x900 for the send doorbell/BlueFlame).
    pub offset: usize,
    /// Value written (device byte order, as a host integer of the bytes).
    pub value: u64,
    /// Access width in bytes.
    pub width: u8,
}

/// Frames the engine dropped, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// Dropped by [`Faults::drop_packets`](crate::Faults::drop_packets).
    pub injected: u64,
    /// Sent on a port whose link is down (no peer, or admin down).
    pub no_link: u64,
    /// Not parseable.
    pub malformed: u64,
    /// RoCE packets whose ICRC (IBA 7.8.1, RoCE Annexes A16/A17) does not
    /// match their contents: corrupted on the wire, dropped before any
    /// transport check, as a real HCA does.
    pub icrc: u64,
    /// Destination MAC or GID not this port's.
    pub not_for_us: u64,
    /// No QP with the destination QPN on this port, or a transport that
    /// does not match the QP's type.
    pub no_qp: u64,
    /// The QP is not in a state that receives.
    pub bad_state: u64,
    /// UD: Q_Key mismatch.
    pub qkey: u64,
    /// UD/UC: no receive WQE posted.
    pub no_receive: u64,
    /// UC: RDMA WRITE refused (rkey, rights, bounds).
    pub uc_access: u64,
    /// Raw Ethernet frame with no ready RQ or no receive WQE.
    pub raw_no_buffer: u64,
    /// Raw Ethernet frame that no NIC RX flow entry matched (or with no
    /// root table), the table's miss action being the default drop.
    pub steering_miss: u64,
    /// Raw Ethernet frame that a flow entry dropped (drop action, or a
    /// forward that reached no TIR).
    pub steering_drop: u64,
    /// Frames of the RDMA transport that could not be acted on (a response
    /// matching nothing outstanding, a duplicate atomic whose result is
    /// gone).
    pub stale: u64,
}

/// Data-path state and counters.
#[derive(Clone, Debug, Default)]
pub struct Datapath {
    /// Send doorbell writes received (most recent last, at most 256 kept).
    pub doorbells: VecDeque<DoorbellWrite>,
    /// CQ arm doorbells handled.
    pub cq_arms: u64,
    /// CQs that overran.
    pub cq_overruns: Vec<u32>,
    /// EQs that overran.
    pub eq_overruns: Vec<u32>,
    /// Send WQEs executed.
    pub wqes: u64,
    /// Receive WQEs consumed (RQ, SRQ, raw RQ).
    pub recv_wqes: u64,
    /// CQEs written by the engine.
    pub cqes: u64,
    /// Frames sent (before drops).
    pub frames_tx: u64,
    /// Frames received.
    pub frames_rx: u64,
    /// RC packets sent again (timeouts, sequence NAKs, RNR retries).
    pub retransmissions: u64,
    /// RNR NAKs sent by responders.
    pub rnr_naks: u64,
    /// PSN sequence error NAKs sent by responders.
    pub seq_naks: u64,
    /// Dropped frames by reason.
    pub drops: Drops,
    /// BlueFlame copies whose bytes differ from the WQE in memory.
    pub bf_mismatches: u64,
    /// Doorbells naming a WQE the doorbell record does not cover (the
    /// record was not updated before the doorbell).
    pub doorbell_mismatches: u64,
    /// Times a paced raw SQ had to wait before its next frame (packet
    /// pacing: `sqc.packet_pacing_rate_limit_index`); 0 while no SQ is
    /// held back by its rate.
    pub pace_waits: u64,
    /// Notable events (errors, drops), most recent last, at most 256.
    pub log: VecDeque<String>,
}

impl Datapath {
    pub(crate) fn note(&mut self, s: String) {
        log::debug!("data path: {s}");
        if self.log.len() >= KEEP {
            self.log.pop_front();
        }
        self.log.push_back(s);
    }

    /// Keeps `w` among the last 256 doorbell writes.
    fn record_doorbell(&mut self, w: DoorbellWrite) {
        if self.doorbells.len() >= KEEP {
            self.doorbells.pop_front();
        }
        self.doorbells.push_back(w);
    }
}

/// A QP's attributes as the engine uses them, decoded from the QP context
/// at each transition.
#[derive(Clone, Debug)]
pub(crate) struct QpInfo {
    pub(crate) qpn: u32,
    /// 0 RC, 1 UC, 2 UD.
    pub(crate) st: u8,
    pub(crate) pd: u32,
    pub(crate) cqn_snd: u32,
    pub(crate) cqn_rcv: u32,
    pub(crate) srqn: Option<u32>,
    pub(crate) rq_type: u8,
    pub(crate) log_rq_size: u8,
    pub(crate) log_rq_stride: u8,
    pub(crate) log_sq_size: u8,
    pub(crate) no_sq: bool,
    pub(crate) log_page_size: u8,
    pub(crate) pas: Vec<u64>,
    pub(crate) dbr_addr: u64,
    pub(crate) port: u8,
    pub(crate) remote_qpn: u32,
    /// Path MTU in bytes.
    pub(crate) mtu: u64,
    /// The requester asks for an ACK (BTH AckReq) at least every
    /// 2^`log_ack_req_freq` packets, and on the last of each message.
    pub(crate) log_ack_req_freq: u8,
    pub(crate) q_key: u32,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) ack_timeout: u8,
    pub(crate) min_rnr_nak: u8,
    pub(crate) rre: bool,
    pub(crate) rwe: bool,
    pub(crate) rae: bool,
    pub(crate) user_index: u32,
    pub(crate) log_sra_max: u8,
    pub(crate) next_send_psn: u32,
    pub(crate) next_rcv_psn: u32,
    /// Largest message: 2^log_max_msg of the capabilities.
    pub(crate) max_msg: u64,
    /// CQEs carry the user index (`cqe_version` 1).
    pub(crate) cqe_v1: bool,
    /// Atomics on host-endian memory (`atomic_req_8B_endianness_mode` 1).
    pub(crate) atomic_host_endian: bool,
    /// `block_lb_mc`: multicast packets it sends are not looped back to it.
    pub(crate) block_lb_mc: bool,
    /// The connected route (RC/UC), if the address path resolves.
    pub(crate) route: Result<Route, String>,
}

impl QpInfo {
    /// Offset of the SQ in the QP buffer.
    pub(crate) fn sq_offset(&self) -> u64 {
        if self.rq_type == 0 {
            (16u64 << self.log_rq_stride) << self.log_rq_size
        } else {
            0
        }
    }
}

/// One posted RC WQE the requester has not completed.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) wqe: wqe::SendWqe,
    pub(crate) first_psn: u32,
    pub(crate) npsn: u32,
    /// Acknowledged (or answered, or failed).
    pub(crate) done: bool,
    /// Completes with this syndrome.
    pub(crate) failed: Option<u8>,
    /// Bytes for the CQE (READ length, 8 for atomics).
    pub(crate) byte_cnt: u32,
    /// Packets of the message acknowledged (SEND/WRITE; a retransmission
    /// starts after them) or, for a READ, response packets received.
    pub(crate) acked: u32,
    /// READ: the response packet the last READ request asked from (a
    /// request sent again after a lost response asks for the rest only).
    pub(crate) read_base: u32,
    /// READ: the request was sent again after a response went missing;
    /// later responses of the first request are not a new gap.
    pub(crate) read_gap: bool,
}

impl Pending {
    pub(crate) fn last_psn(&self) -> u32 {
        self.first_psn.wrapping_add(self.npsn.max(1) - 1) & 0xff_ffff
    }
}

/// The engine's state of one QP.
#[derive(Debug)]
pub(crate) struct QpEngine {
    pub(crate) info: Arc<QpInfo>,
    // Requester.
    pub(crate) sq_next: u16,
    pub(crate) next_psn: u32,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) reads_out: u32,
    pub(crate) retries_left: u8,
    pub(crate) rnr_left: u8,
    /// Generation of the RNR wait timer (bumped to cancel it).
    pub(crate) timer_gen: u64,
    /// When the ACK timer expires (None: not armed).
    pub(crate) retry_deadline: Option<Duration>,
    /// A retry timer entry is scheduled (at most one per QP: it moves to
    /// the deadline when it fires early).
    pub(crate) retry_scheduled: bool,
    /// Distinguishes this engine state from an earlier one of the same
    /// QPN (timers of a reset or destroyed QP are ignored).
    pub(crate) incarnation: u64,
    pub(crate) rnr_wait: bool,
    // Responder.
    pub(crate) epsn: u32,
    pub(crate) msn: u32,
    pub(crate) rq_ci: u16,
    pub(crate) nak_seq_sent: bool,
    pub(crate) atomics: VecDeque<(u32, u64)>,
    /// The multi-packet message being received (RC, UC).
    pub(crate) rx: Option<responder::RxMsg>,
    /// UC: a receive WQE taken for a SEND that was lost on the way; the
    /// next SEND uses it (IBA 9.8: nothing completes for a lost UC
    /// message).
    pub(crate) uc_spare: Option<responder::RecvWqe>,
    pub(crate) comm_est: bool,
    pub(crate) last_wqe_reached: bool,
}

impl QpEngine {
    fn new(info: Arc<QpInfo>, incarnation: u64) -> Self {
        Self {
            info,
            sq_next: 0,
            next_psn: 0,
            pending: VecDeque::new(),
            reads_out: 0,
            retries_left: 0,
            rnr_left: 0,
            timer_gen: 0,
            retry_deadline: None,
            retry_scheduled: false,
            incarnation,
            rnr_wait: false,
            epsn: 0,
            msn: 0,
            rq_ci: 0,
            nak_seq_sent: false,
            atomics: VecDeque::new(),
            rx: None,
            uc_spare: None,
            comm_est: false,
            last_wqe_reached: false,
        }
    }
}

/// An SRQ's consumer state.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SrqState {
    /// Index of the next WQE to consume (the head of the linked list).
    pub(crate) head: u16,
    /// WQEs consumed (compared with the doorbell record counter).
    pub(crate) consumed: u16,
}

/// A BlueFlame register half that received a doorbell: the rest of the
/// copy is compared with the WQE in memory.
#[derive(Clone, Debug)]
pub(crate) struct BfCopy {
    pub(crate) kind: ObjKind,
    pub(crate) n: u32,
    pub(crate) index: u16,
    pub(crate) expected: Option<Vec<u8>>,
    /// A write-combined copy being received: its bytes so far, and the
    /// `ds × 16` bytes it needs before it executes (None: rung already).
    pub(crate) copy: Option<(Vec<u8>, usize)>,
}

/// A frame for another HCA, posted once the device lock is released.
pub(crate) type Outgoing = (Weak<Shared>, u8, Vec<u8>, Option<InFlight>);

/// The engine's state.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    pub(crate) qps: HashMap<u32, QpEngine>,
    /// Raw SQ: next WQEBB counter.
    pub(crate) sqs: HashMap<u32, u16>,
    /// Raw RQ: consumer counter.
    pub(crate) rqs: HashMap<u32, u16>,
    pub(crate) srqs: HashMap<u32, SrqState>,
    pub(crate) bf: HashMap<(u32, usize), BfCopy>,
    /// The BlueFlame copy being executed: (raw SQ?, queue number, WQE
    /// counter, bytes). Set only while its doorbell runs.
    pub(crate) bf_exec: Option<(bool, u32, u16, Vec<u8>)>,
    pub(crate) outbox: Vec<Outgoing>,
    /// Frames for socket wires, in the order sent, put on the wire once
    /// the device lock is released (see [`Shared::run_one`]).
    pub(crate) wire_out: Vec<(Arc<SocketWire>, Vec<u8>)>,
    /// In-flight marks of frames processed in this event, released after
    /// the outbox was delivered.
    pub(crate) held: Vec<InFlight>,
    pub(crate) err_poll_armed: bool,
    /// Incarnations handed out to QP engine states.
    pub(crate) incarnations: u64,
    /// Paced raw SQs: their token buckets and pacing waits.
    pub(crate) pace: HashMap<u32, raw::Pace>,
    /// Generations handed out to pacing waits.
    pub(crate) pace_gens: u64,
}

/// Number of path-MTU packets a message of `len` bytes takes.
pub(crate) fn npkts(len: u64, mtu: u64) -> u32 {
    len.div_ceil(mtu.max(256)).clamp(1, 1 << 23) as u32
}

/// The RoCE v2 UDP source port of a flow: from its flow label, or when
/// that is 0 from the QP numbers of both ends (Linux
/// `rdma_calc_flow_label` and `rdma_flow_label_to_udp_sport`, which
/// mlx5_ib and the other RoCE v2 drivers use: the low 14 bits of the
/// label XOR its high 6, in 0xc000..=0xffff).
pub(crate) fn udp_sport_for(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = match flow_label & 0xf_ffff {
        0 => {
            let mut v = u64::from(lqpn) * u64::from(rqpn);
            v ^= v >> 20;
            v ^= v >> 40;
            (v & 0xf_ffff) as u32
        }
        f => f,
    };
    ((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) as u16 | 0xc000
}

/// `a <= b` in 24-bit PSN space.
pub(crate) fn psn_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) & 0xff_ffff) < 0x80_0000
}

/// The IB MTU (bytes) that fits an Ethernet MTU (the L2 payload size), as
/// Linux's `iboe_get_mtu` picks it.
pub(crate) fn ib_mtu_for(eth_mtu: u64) -> u64 {
    let room = eth_mtu.saturating_sub(96);
    [4096u64, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m <= room)
        .unwrap_or(256)
}

/// A decoded RoCE address (GID table) entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GidEntry {
    pub(crate) gid: [u8; 16],
    pub(crate) vlan: Option<u16>,
    pub(crate) mac: [u8; 6],
    pub(crate) ver: RoceVer,
}

/// InfiniBand on the emulator's wire: a packet to LID `l` travels in the
/// wire's RoCE v1 framing with destination MAC `02:1b:00:00:<l>` (a locally
/// administered address standing for the LRH's DLID) and GID
/// [`lid_gid`]; the receiving port takes it when the DLID is its own LID.
/// Deviation: no LRH, SL/VL or ICRC on the wire.
pub(crate) fn lid_mac(lid: u16) -> [u8; 6] {
    let l = lid.to_be_bytes();
    [0x02, 0x1b, 0, 0, l[0], l[1]]
}

/// Whether a LID is a multicast LID (IBA vol 1 4.1.1, 7.11.1:
/// 0xc000..=0xfffe; 0xffff is the permissive LID).
pub(crate) fn is_mlid(lid: u16) -> bool {
    (0xc000..=0xfffe).contains(&lid)
}

/// The multicast LID the emulator's modelled subnet manager gives the
/// InfiniBand multicast group `mgid`: `0xc000 + (the MGID's last 16 bits
/// mod 0x3fff)`, a value in 0xc000..=0xfffe.
///
/// Assumption (there is no subnet administrator, so no MCMemberRecord
/// join assigns MLIDs): every HCA derives the same MLID from the MGID, so
/// a sender and the group's members agree without exchanging anything;
/// a port is a member of the MLID's multicast tree while one of its QPs
/// is attached (ATTACH_TO_MCG) to a group with that MLID. Two MGIDs may
/// share an MLID (as IBA allows); the receiving HCA then sorts them by
/// the GRH's DGID.
pub fn ib_mlid(mgid: &[u8; 16]) -> u16 {
    0xc000 + u16::from_be_bytes([mgid[14], mgid[15]]) % 0x3fff
}

/// The GRH address standing for a LID on the emulator's wire: the
/// link-local prefix with the LID in the last two bytes.
pub(crate) fn lid_gid(lid: u16) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[14..].copy_from_slice(&lid.to_be_bytes());
    g
}

/// Decodes a `roce_addr_layout` image (offsets of ifc-layouts.json,
/// checked in the tests).
pub(crate) fn gid_entry(e: &[u8]) -> Option<GidEntry> {
    if e.len() < 28 {
        return None;
    }
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&e[0..16]);
    let vlan = (e[16] & 0x10 != 0).then(|| (u16::from(e[16] & 0xf) << 8) | u16::from(e[17]));
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&e[18..24]);
    let ver = match (e[27], e[26] & 0xf) {
        (0, _) => RoceVer::V1,
        (_, 0) => RoceVer::V2Ipv4,
        _ => RoceVer::V2Ipv6,
    };
    Some(GidEntry {
        gid,
        vlan,
        mac,
        ver,
    })
}

impl Device {
    /// Device internal timer ticks (275 MHz), the CQE timestamp.
    pub(crate) fn ticks(&self) -> u64 {
        (self.now().as_nanos() * 275 / 1000) as u64
    }

    /// A port's MAC address.
    pub(crate) fn port_mac(&self, port: u8) -> Option<[u8; 6]> {
        self.fw
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .map(|p| p.mac)
    }

    /// A GID table entry of a port.
    pub(crate) fn gid(&self, port: u8, index: u8) -> Option<GidEntry> {
        let p = self.fw.ports.get(usize::from(port).wrapping_sub(1))?;
        p.gids
            .get(usize::from(index))?
            .as_deref()
            .and_then(gid_entry)
    }

    /// The route of an RC/UC packet on an InfiniBand port: LID routing
    /// carried in the emulator's framing (see [`lid_mac`]); the port must
    /// be Active (have a LID).
    pub(crate) fn ib_route(&self, port: u8, dlid: u16) -> Result<Route, String> {
        let slid = self.port_lid(port);
        if slid == 0 {
            return Err(format!("port {port} is not Active (no LID)"));
        }
        if dlid == 0 {
            return Err("rlid 0 on an InfiniBand path".into());
        }
        Ok(Route {
            dmac: lid_mac(dlid),
            smac: lid_mac(slid),
            vlan: None,
            ver: RoceVer::V1,
            sgid: lid_gid(slid),
            dgid: lid_gid(dlid),
            tclass: 0,
            flow_label: 0,
            hop_limit: 0,
            udp_sport: 0,
        })
    }

    /// The route of a UD packet to an InfiniBand multicast group: DLID the
    /// MLID `av.rlid`, the GRH mandatory (IBA vol 1: a packet with a
    /// multicast DLID carries a GRH) and its DGID an MGID, DQPN 0xffffff
    /// (IBA 10.5.2.3).
    pub(crate) fn ib_mcast_route(&self, port: u8, av: &wqe::Av) -> Result<Route, String> {
        if !av.grh {
            return Err(format!(
                "multicast DLID {:#x} without a GRH (the address vector's grh bit is 0)",
                av.rlid
            ));
        }
        if av.rgid[0] != 0xff {
            return Err(format!(
                "multicast DLID {:#x} with a DGID that is not an MGID",
                av.rlid
            ));
        }
        if av.dqpn != 0xff_ffff {
            return Err(format!(
                "multicast DLID {:#x} with DQPN {:#x} (not 0xffffff)",
                av.rlid, av.dqpn
            ));
        }
        let mut r = self.ib_route(port, av.rlid)?;
        r.dgid = av.rgid;
        r.tclass = av.tclass;
        r.flow_label = av.flow_label;
        r.hop_limit = av.hop_limit;
        Ok(r)
    }

    /// Whether a destination MAC is this port's (its own MAC or the MAC of
    /// one of its GID entries; on InfiniBand, its LID's).
    pub(crate) fn port_owns_mac(&self, port: u8, mac: &[u8]) -> bool {
        if self.fw.infiniband() {
            let lid = self.port_lid(port);
            return lid != 0 && mac == lid_mac(lid);
        }
        let Some(p) = self.fw.ports.get(usize::from(port).wrapping_sub(1)) else {
            return false;
        };
        p.mac == mac
            || p.gids
                .iter()
                .flatten()
                .filter_map(|e| gid_entry(e))
                .any(|g| g.mac == mac)
    }

    /// Whether a destination GID is in the port's table (with the packet's
    /// RoCE version).
    pub(crate) fn port_owns_gid(&self, port: u8, gid: &[u8; 16], ver: RoceVer) -> bool {
        if self.fw.infiniband() {
            let lid = self.port_lid(port);
            return lid != 0 && *gid == lid_gid(lid);
        }
        let Some(p) = self.fw.ports.get(usize::from(port).wrapping_sub(1)) else {
            return false;
        };
        p.gids
            .iter()
            .flatten()
            .filter_map(|e| gid_entry(e))
            .any(|g| g.gid == *gid && (g.ver == RoceVer::V1) == (ver == RoceVer::V1))
    }

    /// The IB MTU of a port (from its PMTU admin MTU, Linux's 1522 = 1500
    /// + 22 bytes of L2 overhead).
    pub(crate) fn port_ib_mtu(&self, port: u8) -> u64 {
        let eth = self
            .fw
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .map_or(1522, |p| u64::from(p.admin_mtu));
        ib_mtu_for(eth.saturating_sub(22))
    }

    /// Builds the route of a packet from a port's GID entry.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn route(
        &self,
        port: u8,
        sgid_index: u8,
        dmac: [u8; 6],
        dgid: [u8; 16],
        tclass: u8,
        flow_label: u32,
        hop_limit: u8,
        udp_sport: u16,
    ) -> Result<Route, String> {
        let g = self
            .gid(port, sgid_index)
            .ok_or_else(|| format!("port {port} has no GID at index {sgid_index}"))?;
        let smac = if g.mac == [0; 6] {
            self.port_mac(port).unwrap_or([0; 6])
        } else {
            g.mac
        };
        Ok(Route {
            dmac,
            smac,
            vlan: g.vlan,
            ver: g.ver,
            sgid: g.gid,
            dgid,
            tclass,
            flow_label,
            hop_limit,
            udp_sport,
        })
    }

    /// Decodes a QP's context for the engine.
    fn qp_info(&self, qpn: u32, q: &Qp) -> QpInfo {
        let t = ifc();
        let g = |p: &str| t.get(&q.ctx, "qpc", p);
        let a = |p: &str| t.get(&q.ctx, "qpc", &format!("primary_address_path.{p}"));
        let port = match a("vhca_port_num") as u8 {
            0 => 1,
            p => p,
        };
        let mut rgid = [0u8; 16];
        rgid.copy_from_slice(t.bytes(&q.ctx, "qpc", "primary_address_path.rgid_rip"));
        let mac = (a("rmac_47_32") << 32) | a("rmac_31_0");
        let mut rmac = [0u8; 6];
        rmac.copy_from_slice(&mac.to_be_bytes()[2..]);
        let mtu = match g("mtu") {
            m @ 1..=5 => 128u64 << m,
            _ => self.port_ib_mtu(port),
        };
        let remote_qpn = g("remote_qpn") as u32;
        let sport = match a("udp_sport") as u16 {
            0 => udp_sport_for(a("flow_label") as u32, qpn, remote_qpn),
            s => s,
        };
        let route = if q.st == 2 {
            Err("UD: routes come from the address vector".into())
        } else if self.fw.infiniband() {
            self.ib_route(port, a("rlid") as u16)
        } else {
            self.route(
                port,
                a("src_addr_index") as u8,
                rmac,
                rgid,
                a("tclass") as u8,
                a("flow_label") as u32,
                a("hop_limit") as u8,
                sport,
            )
            .map(|mut r| {
                // RoCE v2: the IP DSCP and ECN come from the path's `dscp`
                // and `ecn` (Linux mlx5_ib sets dscp = traffic_class >> 2
                // for RoCE v2 GIDs); the GRH of RoCE v1 carries `tclass`.
                if r.ver != RoceVer::V1 {
                    r.tclass = ((a("dscp") as u8 & 0x3f) << 2) | (a("ecn") as u8 & 3);
                }
                r
            })
        };
        let atomic = t.get(
            &self.fw.caps.cur[&crate::personality::CAP_ATOMIC],
            "atomic_caps",
            "atomic_req_8B_endianness_mode",
        );
        QpInfo {
            qpn,
            st: q.st,
            pd: q.pd,
            cqn_snd: q.cqn_snd,
            cqn_rcv: q.cqn_rcv,
            srqn: q.srqn,
            rq_type: q.rq_type,
            log_rq_size: q.log_rq_size,
            log_rq_stride: q.log_rq_stride,
            log_sq_size: q.log_sq_size.min(15),
            no_sq: q.no_sq,
            log_page_size: q.log_page_size,
            pas: q.pas.clone(),
            dbr_addr: q.dbr_addr,
            port,
            remote_qpn,
            mtu,
            log_ack_req_freq: g("log_ack_req_freq") as u8,
            q_key: g("q_key") as u32,
            retry_count: g("retry_count") as u8,
            rnr_retry: g("rnr_retry") as u8,
            ack_timeout: a("ack_timeout") as u8,
            min_rnr_nak: g("min_rnr_nak") as u8,
            rre: g("rre") == 1,
            rwe: g("rwe") == 1,
            rae: g("rae") == 1,
            user_index: g("user_index") as u32,
            log_sra_max: g("log_sra_max") as u8,
            next_send_psn: g("next_send_psn") as u32,
            next_rcv_psn: g("next_rcv_psn") as u32,
            max_msg: 1u64 << self.fw.caps.general("log_max_msg").min(31),
            cqe_v1: self.fw.caps.general("cqe_version") == 1,
            atomic_host_endian: atomic == 1,
            block_lb_mc: g("block_lb_mc") == 1,
            route,
        }
    }

    /// A QP changed state (MODIFY_QP): the engine takes the new attributes,
    /// loads PSNs, starts the SQ in RTS, flushes in the error state.
    pub(crate) fn qp_transition(&mut self, qpn: u32, from: QpState, to: QpState) {
        let Some(q) = self.fw.objs.qp(qpn) else {
            return;
        };
        if to == QpState::Rst {
            self.engine.qps.remove(&qpn);
            return;
        }
        let info = Arc::new(self.qp_info(qpn, q));
        self.engine.incarnations += 1;
        let inc = self.engine.incarnations;
        let e = self
            .engine
            .qps
            .entry(qpn)
            .or_insert_with(|| QpEngine::new(info.clone(), inc));
        e.info = info.clone();
        match (from, to) {
            (QpState::Init, QpState::Rtr) => {
                e.epsn = info.next_rcv_psn & 0xff_ffff;
                e.msn = 0;
                e.rx = None;
            }
            (QpState::Rtr, QpState::Rts) => {
                e.next_psn = info.next_send_psn & 0xff_ffff;
                e.retries_left = info.retry_count;
                e.rnr_left = info.rnr_retry;
            }
            (_, QpState::Rts) => {
                e.retries_left = info.retry_count;
                e.rnr_left = info.rnr_retry;
            }
            _ => {}
        }
        match to {
            QpState::Rts => self.qp_kick(qpn),
            QpState::Err => {
                let e = self.engine.qps.get_mut(&qpn).expect("inserted above");
                e.timer_gen += 1;
                e.retry_deadline = None;
                e.rnr_wait = false;
                self.qp_flush(qpn);
                self.arm_err_poll();
            }
            _ => {}
        }
    }

    /// An object was destroyed or reset: forget its engine state.
    pub(crate) fn datapath_forget(&mut self, kind: ObjKind, n: u32) {
        match kind {
            ObjKind::Qp => {
                self.engine.qps.remove(&n);
                // A destroyed QP leaves its multicast groups.
                self.fw.mcast.retain(|_, qps| {
                    qps.retain(|&q| q != n);
                    !qps.is_empty()
                });
            }
            ObjKind::Sq => {
                self.engine.sqs.remove(&n);
                self.engine.pace.remove(&n);
            }
            ObjKind::Rq => {
                self.engine.rqs.remove(&n);
            }
            ObjKind::Srq => {
                self.engine.srqs.remove(&n);
            }
            _ => {}
        }
    }

    /// Writes a CQE (with the timestamp) and counts it; a CQ that cannot
    /// take it is noted.
    pub(crate) fn emit_cqe(&mut self, cqn: u32, mut c: cqe::Cqe) {
        c.timestamp = self.ticks();
        match self.write_cqe(cqn, &c.bytes()) {
            Ok(()) => self.datapath.cqes += 1,
            Err(e) => self
                .datapath
                .note(format!("CQ {cqn:#x}: CQE for QPN {:#x} lost: {e}", c.qpn)),
        }
    }

    /// `srqn_uidx` of a CQE: the user index (cqe_version 1) or the SRQ
    /// number of an SRQ receive.
    pub(crate) fn uidx(info: &QpInfo, srqn: Option<u32>) -> u32 {
        if info.cqe_v1 {
            info.user_index
        } else {
            srqn.unwrap_or(0)
        }
    }

    /// An affiliated QP/SRQ event (`qp_events` data) to the EQ that takes
    /// it.
    pub(crate) fn qp_event(&mut self, ty: u8, n: u32) {
        self.post_event(
            ty,
            0,
            "qp_events",
            &[("type", 0), ("qpn_rqn_sqn", u64::from(n & 0xff_ffff))],
        );
    }

    /// Reads a 32-bit big-endian word of a doorbell record.
    pub(crate) fn read_dbr_word(&mut self, addr: u64, what: &str) -> Result<u32, ()> {
        let mut w = [0u8; 4];
        self.iommu
            .read(addr, &mut w, &|| format!("{what} doorbell record"))?;
        Ok(u32::from_be_bytes(w))
    }

    /// Puts a frame on a port: injected drops, link state, internal
    /// loopback (destination MAC of the port itself), then the peer.
    pub(crate) fn transmit(&mut self, port: u8, frame: Vec<u8>) {
        self.transmit_from(port, frame, None);
    }

    /// [`transmit`](Self::transmit) for a frame a raw SQ sent through a
    /// TIS of transport domain `src_td` (`Some`): the NIC's local
    /// loopback hands the port's own receive steering a copy of each
    /// multicast frame (destination MAC bit 0; unless the NIC vport
    /// context's `disable_mc_local_lb`) besides the wire, and takes a
    /// unicast frame to the port's own address (unless
    /// `disable_uc_local_lb`) instead of the wire; a TIR of the same
    /// transport domain whose `self_lb_block` has the matching bit does
    /// not receive these copies.
    pub(crate) fn transmit_from(&mut self, port: u8, mut frame: Vec<u8>, src_td: Option<u32>) {
        self.datapath.frames_tx += 1;
        if let Some(t) = self.faults.tap.get(&port).cloned() {
            let keep = {
                let mut f = t.f.lock().unwrap_or_else(|e| e.into_inner());
                f(&mut frame)
            };
            if !keep {
                self.faults.hit(t.id);
                self.datapath.drops.injected += 1;
                return;
            }
            if frame.len() < 14 {
                self.datapath.drops.malformed += 1;
                return;
            }
        }
        if self.drop_injected(port) {
            self.datapath.drops.injected += 1;
            return;
        }
        if !self.link_up(port) {
            self.datapath.drops.no_link += 1;
            return;
        }
        let vport = self.fw.ports.first();
        let (mc_lb, uc_lb) = vport.map_or((false, false), |p| {
            (!p.disable_mc_local_lb, !p.disable_uc_local_lb)
        });
        if let Some(td) = src_td {
            if frame[0] & 1 != 0 && mc_lb {
                self.local_loopback(port, frame.clone(), td);
            } else if uc_lb && self.port_owns_mac(port, &frame[0..6]) {
                self.local_loopback(port, frame, td);
                return;
            }
        }
        if src_td.is_none() && self.port_owns_mac(port, &frame[0..6]) {
            self.events.push_back(Event::Frame {
                port,
                bytes: frame,
                flight: None,
            });
            return;
        }
        let Some(peer) = self.peers.get(&port) else {
            self.datapath.drops.no_link += 1;
            return;
        };
        match peer {
            Peer::Loopback => self.events.push_back(Event::Frame {
                port,
                bytes: frame,
                flight: None,
            }),
            // Sent once the device lock is released: a full-duplex port
            // keeps receiving while its transmitter waits for room at the
            // far end.
            Peer::Socket(s) => self.engine.wire_out.push((s.clone(), frame)),
            Peer::Port { hca, port: p } if Weak::ptr_eq(hca, &self.me) => {
                let p = *p;
                self.events.push_back(Event::Frame {
                    port: p,
                    bytes: frame,
                    flight: None,
                });
            }
            Peer::Port { hca, port: p } => {
                let o = (hca.clone(), *p, frame, Some(InFlight::new(&self.inflight)));
                self.engine.outbox.push(o);
            }
        }
    }

    /// A raw SQ's frame looped back inside the HCA to `port`'s receive
    /// path, with the transport domain it was sent from (seen by the
    /// port's tap once, In, as any frame that does not leave the port).
    fn local_loopback(&mut self, port: u8, frame: Vec<u8>, td: u32) {
        self.taps.see(port, crate::wire::Direction::In, &frame);
        self.receive_frame_from(port, frame, Some(td));
    }

    fn drop_injected(&mut self, port: u8) -> bool {
        let Some(rule) = self.faults.drop.get_mut(&port) else {
            return false;
        };
        let (dropped, id) = (rule.hit(), rule.id);
        if dropped {
            self.faults.hit(id);
        }
        dropped
    }

    /// Schedules the periodic flush of WQEs posted to queues in error.
    pub(crate) fn arm_err_poll(&mut self) {
        if !self.engine.err_poll_armed {
            self.engine.err_poll_armed = true;
            self.schedule(ERR_POLL, Timer::ErrPoll);
        }
    }

    /// The periodic flush: WQEs posted since to QPs in error (or SQE) and to
    /// raw queues in error.
    pub(crate) fn err_poll(&mut self) {
        self.engine.err_poll_armed = false;
        let errs: Vec<u32> = self
            .engine
            .qps
            .keys()
            .copied()
            .filter(|&n| {
                matches!(
                    self.fw.objs.qp(n).map(|q| q.state),
                    Some(QpState::Err | QpState::Sqer)
                )
            })
            .collect();
        let raw: Vec<u32> = self
            .engine
            .sqs
            .keys()
            .copied()
            .filter(|&n| {
                self.fw
                    .objs
                    .wq(ObjKind::Sq, n)
                    .is_some_and(|w| w.state == 3)
            })
            .collect();
        let raw_rqs: Vec<u32> = self
            .engine
            .rqs
            .keys()
            .copied()
            .filter(|&n| {
                self.fw
                    .objs
                    .wq(ObjKind::Rq, n)
                    .is_some_and(|w| w.state == 3)
            })
            .collect();
        let any = !errs.is_empty() || !raw.is_empty() || !raw_rqs.is_empty();
        for n in errs {
            self.qp_flush(n);
        }
        for n in raw {
            self.raw_sq_flush(n);
        }
        for n in raw_rqs {
            self.raw_rq_flush(n);
        }
        if any {
            self.arm_err_poll();
        }
    }

    /// A timer of the engine fired.
    pub(crate) fn datapath_timer(&mut self, t: Timer) {
        match t {
            Timer::Retry { qpn, tgen } => self.rc_retry_timeout(qpn, tgen),
            Timer::Rnr { qpn, tgen } => self.rc_rnr_timeout(qpn, tgen),
            Timer::ErrPoll => self.err_poll(),
            Timer::Pace { sqn, pgen } => self.raw_pace_timer(sqn, pgen),
            Timer::ExecCommands(_) | Timer::SmConfigure { .. } => {}
        }
    }

    /// A frame from the wire.
    pub(crate) fn receive_frame(&mut self, port: u8, bytes: Vec<u8>) {
        self.receive_frame_from(port, bytes, None);
    }

    /// [`receive_frame`](Self::receive_frame) of a frame looped back from
    /// a raw SQ of transport domain `src_td` (`None`: from the wire).
    fn receive_frame_from(&mut self, port: u8, bytes: Vec<u8>, src_td: Option<u32>) {
        self.datapath.frames_rx += 1;
        if self.gone || self.fatal() {
            return;
        }
        if !self.link_up(port) {
            self.datapath.drops.no_link += 1;
            return;
        }
        match packet::parse(&bytes) {
            packet::Frame::Malformed(why) => {
                self.datapath.drops.malformed += 1;
                self.datapath
                    .note(format!("port {port}: malformed frame dropped: {why}"));
            }
            packet::Frame::Other { vlan, l3, l4 } => {
                self.raw_receive(port, &bytes, vlan, (l3, l4), src_td);
            }
            packet::Frame::Roce(p) => {
                // An InfiniBand port takes IB transport packets whatever
                // the NIC vport's roce_en says (there is no Ethernet).
                let roce_en =
                    self.fw.infiniband() || self.fw.ports.first().is_some_and(|p| p.roce_en);
                if roce_en && !p.icrc_ok {
                    self.datapath.drops.icrc += 1;
                    self.datapath.note(format!(
                        "port {port}: RoCE packet to QPN {:#x} PSN {:#x} dropped: ICRC mismatch",
                        p.bth.dqpn, p.bth.psn
                    ));
                } else if roce_en {
                    self.roce_receive(port, &p);
                } else {
                    let vlan = p.vlan;
                    let l3 = match p.ver {
                        RoceVer::V2Ipv4 => 2,
                        RoceVer::V2Ipv6 => 1,
                        RoceVer::V1 => 0,
                    };
                    let l4 = if p.ver == RoceVer::V1 { 0 } else { 2 };
                    self.raw_receive(port, &bytes, vlan, (l3, l4), src_td);
                }
            }
        }
    }

    /// Reads `n` bytes of a queue buffer at byte `off` (one WQEBB or
    /// stride: never crosses a page of the buffer).
    pub(crate) fn read_queue(
        &mut self,
        pas: &[u64],
        log_page_size: u8,
        off: u64,
        dst: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ()> {
        let Some(a) = buf_addr(pas, log_page_size, off) else {
            let w = what();
            self.datapath
                .note(format!("{w}: offset {off:#x} beyond the queue's page list"));
            return Err(());
        };
        self.iommu.read(a, dst, what)
    }
}

/// A send doorbell or BlueFlame write.
pub(crate) fn send_doorbell(dev: &mut Device, uar: u32, offset: usize, value: u64, width: u8) {
    dev.datapath.record_doorbell(DoorbellWrite {
        uar,
        offset,
        value,
        width,
    });
    let half = offset & !0xff;
    if offset & 0xff != 0 {
        dev.bf_chunk(uar, half, offset & 0xff, value, width);
        return;
    }
    if width != 8 {
        dev.ignored_doorbells.push(format!(
            "UAR {uar:#x} offset {offset:#x}: a {width}-byte send doorbell (must be a 64-bit store)"
        ));
        return;
    }
    dev.bf_flush_incomplete(uar, half);
    let Some((kind, n, index)) = doorbell_target(dev, uar, value) else {
        return;
    };
    dev.ring_from_memory(uar, half, kind, n, index);
}

/// The queue a send doorbell's first 8 bytes (`opmod_idx_opcode`,
/// `qpn_ds`) name, if it exists and this is its UAR: (kind, number, WQE
/// counter).
fn doorbell_target(dev: &mut Device, uar: u32, value: u64) -> Option<(ObjKind, u32, u16)> {
    let w0 = (value >> 32) as u32;
    let w1 = value as u32;
    let n = w1 >> 8;
    let index = ((w0 >> 8) & 0xffff) as u16;
    let (kind, owner_uar) = if let Some(q) = dev.fw.objs.qp(n) {
        (ObjKind::Qp, q.uar)
    } else if let Some(w) = dev.fw.objs.wq(ObjKind::Sq, n) {
        (ObjKind::Sq, w.uar)
    } else {
        dev.ignored_doorbells.push(format!(
            "UAR {uar:#x}: send doorbell for QPN/SQN {n:#x}, which does not exist"
        ));
        return None;
    };
    if owner_uar != uar {
        dev.ignored_doorbells.push(format!(
            "send doorbell for {kind:?} {n:#x} on UAR {uar:#x}, not its UAR {owner_uar:#x}"
        ));
        return None;
    }
    Some((kind, n, index))
}

/// Size of a BlueFlame register half (`bf_reg_size / 2`).
const BF_HALF: usize = 256;

/// A write-combined BlueFlame burst ([`platform::Mmio::write_bf`]) of
/// `bytes` at `offset` of UAR page `uar`.
pub(crate) fn blueflame_write(dev: &mut Device, uar: u32, offset: usize, bytes: Vec<u8>) {
    if !dev.fw.objs.exists(ObjKind::Uar, uar) {
        dev.ignored_doorbells.push(format!(
            "BlueFlame write to UAR page {uar:#x}, which is not allocated"
        ));
        return;
    }
    let half = offset & !(BF_HALF - 1);
    let pos = offset - half;
    if !(0x800..0xa00).contains(&offset) || pos + bytes.len() > BF_HALF || bytes.len() % 8 != 0 {
        dev.ignored_doorbells.push(format!(
            "UAR {uar:#x} offset {offset:#x}: a {}-byte BlueFlame write outside one register half",
            bytes.len()
        ));
        return;
    }
    for (i, w) in bytes.chunks_exact(8).enumerate() {
        dev.datapath.record_doorbell(DoorbellWrite {
            uar,
            offset: offset + 8 * i,
            value: u64::from_be_bytes(w.try_into().expect("8-byte chunk")),
            width: 8,
        });
    }
    if pos == 0 {
        dev.bf_flush_incomplete(uar, half);
        let ctrl0 = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        let Some((kind, n, index)) = doorbell_target(dev, uar, ctrl0) else {
            return;
        };
        let need = usize::from(ctrl0 as u8 & 0x3f) * 16;
        if need == 0 || need > BF_HALF {
            // Not a WQE the half can carry: a doorbell for memory.
            dev.datapath.note(format!(
                "BlueFlame copy for {kind:?} {n:#x} WQE {index:#x} announces {need} bytes: executed from memory"
            ));
            dev.datapath.bf_mismatches += 1;
            dev.ring_from_memory(uar, half, kind, n, index);
            return;
        }
        dev.engine.bf.insert(
            (uar, half),
            BfCopy {
                kind,
                n,
                index,
                expected: None,
                copy: Some((bytes, need)),
            },
        );
    } else {
        let continues = dev
            .engine
            .bf
            .get(&(uar, half))
            .and_then(|b| b.copy.as_ref())
            .is_some_and(|(c, _)| c.len() == pos);
        if !continues {
            // Single words after a doorbell: compared with memory.
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                let v = u64::from_be_bytes(w.try_into().expect("8-byte chunk"));
                dev.bf_chunk(uar, half, pos + 8 * i, v, 8);
            }
            return;
        }
        if let Some((c, _)) = dev
            .engine
            .bf
            .get_mut(&(uar, half))
            .and_then(|b| b.copy.as_mut())
        {
            c.extend_from_slice(&bytes);
        }
    }
    dev.bf_try_execute(uar, half);
}

impl Device {
    /// A doorbell for the WQE in memory through BlueFlame half `half` of
    /// UAR page `uar`: the half remembers the queue and WQE (single words
    /// written to it later are compared with that WQE) and the queue rings.
    fn ring_from_memory(&mut self, uar: u32, half: usize, kind: ObjKind, n: u32, index: u16) {
        self.engine.bf.insert(
            (uar, half),
            BfCopy {
                kind,
                n,
                index,
                expected: None,
                copy: None,
            },
        );
        self.ring_queue(kind, n, index);
    }

    /// Rings a send queue: the doorbell of a QP or of a raw SQ.
    fn ring_queue(&mut self, kind: ObjKind, n: u32, index: u16) {
        if kind == ObjKind::Qp {
            self.qp_doorbell(n, index);
        } else {
            self.raw_sq_doorbell(n, index);
        }
    }

    /// Executes the copy in a half once it is complete: compared with the
    /// WQE in memory (a difference is a driver error), then run instead of
    /// it.
    fn bf_try_execute(&mut self, uar: u32, half: usize) {
        let Some(bf) = self.engine.bf.get(&(uar, half)).cloned() else {
            return;
        };
        let Some((copy, need)) = bf.copy else {
            return;
        };
        if copy.len() < need {
            return;
        }
        // A queue the engine does not run yet (before INIT) has nothing to
        // compare with (as for single BlueFlame words).
        let memory = self.wqe_bytes(bf.kind, bf.n, bf.index);
        if let Some(b) = self.engine.bf.get_mut(&(uar, half)) {
            b.copy = None;
            b.expected = memory.clone();
        }
        if let Some(memory) = memory.filter(|m| m.get(..need) != Some(&copy[..need])) {
            self.datapath.bf_mismatches += 1;
            let at = (0..need)
                .find(|&i| memory.get(i) != copy.get(i))
                .unwrap_or(0);
            self.datapath.note(format!(
                "BlueFlame copy for {:?} {:#x} WQE {:#x} differs from memory at byte {at}: the copy executes",
                bf.kind, bf.n, bf.index
            ));
        }
        self.engine.bf_exec = Some((bf.kind == ObjKind::Sq, bf.n, bf.index, copy));
        self.ring_queue(bf.kind, bf.n, bf.index);
        self.engine.bf_exec = None;
    }

    /// A copy in this half that stopped short of its `ds`: a driver error;
    /// it rings as a doorbell for the WQE in memory.
    fn bf_flush_incomplete(&mut self, uar: u32, half: usize) {
        let Some(bf) = self.engine.bf.get_mut(&(uar, half)) else {
            return;
        };
        let Some((copy, need)) = bf.copy.take() else {
            return;
        };
        let (kind, n, index) = (bf.kind, bf.n, bf.index);
        self.datapath.bf_mismatches += 1;
        self.datapath.note(format!(
            "BlueFlame copy for {kind:?} {n:#x} WQE {index:#x} stopped at {} of {need} bytes: executed from memory",
            copy.len()
        ));
        self.ring_queue(kind, n, index);
    }

    /// The bytes of WQEBB `i` of the WQE at counter `idx`, if that WQE is
    /// the BlueFlame copy being executed and the copy reaches it.
    pub(crate) fn bf_wqebb(&self, raw: bool, n: u32, idx: u16, i: u16) -> Option<[u8; 64]> {
        let (r, qn, qi, copy) = self.engine.bf_exec.as_ref()?;
        if (*r, *qn, *qi) != (raw, n, idx) {
            return None;
        }
        let o = usize::from(i) * 64;
        let src = copy.get(o..)?;
        if src.is_empty() {
            return None;
        }
        let mut b = [0u8; 64];
        let len = src.len().min(64);
        b[..len].copy_from_slice(&src[..len]);
        Some(b)
    }
}

impl Device {
    /// Part of a BlueFlame copy: compared with the WQE in memory.
    fn bf_chunk(&mut self, uar: u32, half: usize, pos: usize, value: u64, width: u8) {
        let Some(bf) = self.engine.bf.get(&(uar, half)).cloned() else {
            return;
        };
        let expected = match bf.expected {
            Some(e) => e,
            None => {
                let e = self.wqe_bytes(bf.kind, bf.n, bf.index).unwrap_or_default();
                if let Some(b) = self.engine.bf.get_mut(&(uar, half)) {
                    b.expected = Some(e.clone());
                }
                e
            }
        };
        let got = if width == 8 {
            value.to_be_bytes().to_vec()
        } else {
            (value as u32).to_be_bytes().to_vec()
        };
        if let Some(want) = expected.get(pos..pos + got.len()) {
            if want != got.as_slice() {
                self.datapath.bf_mismatches += 1;
                self.datapath.note(format!(
                    "BlueFlame copy for {:?} {:#x} WQE {:#x} differs from memory at byte {pos}",
                    bf.kind, bf.n, bf.index
                ));
            }
        }
    }

    /// The bytes of the WQE at counter `index` of a send queue (at most
    /// 256, for BlueFlame comparisons).
    fn wqe_bytes(&mut self, kind: ObjKind, n: u32, index: u16) -> Option<Vec<u8>> {
        let (pas, lps, base, log_size) = match kind {
            ObjKind::Qp => {
                let e = self.engine.qps.get(&n)?;
                let i = e.info.clone();
                (i.pas.clone(), i.log_page_size, i.sq_offset(), i.log_sq_size)
            }
            _ => {
                let w = self.fw.objs.wq(ObjKind::Sq, n)?;
                (w.pas.clone(), w.log_wq_pg_sz, 0, w.log_wq_sz.min(15))
            }
        };
        let mask = (1u32 << log_size) - 1;
        let mut out = Vec::new();
        let mut ds = 1;
        for i in 0..4u16 {
            if out.len() >= usize::from(ds) * 16 {
                break;
            }
            let slot = u32::from(index.wrapping_add(i)) & mask;
            let mut b = [0u8; 64];
            self.read_queue(&pas, lps, base + u64::from(slot) * 64, &mut b, &|| {
                format!("{kind:?} {n:#x} send queue")
            })
            .ok()?;
            if i == 0 {
                ds = wqe::ctrl_fields(&b).3;
            }
            out.extend_from_slice(&b);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_entry_offsets_match_the_layout_file() {
        let t = ifc();
        let mut e = vec![0u8; t.size("roce_addr_layout")];
        e[0..16].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        t.set(&mut e, "roce_addr_layout", "vlan_valid", 1);
        t.set(&mut e, "roce_addr_layout", "vlan_id", 0x123);
        t.set(&mut e, "roce_addr_layout", "source_mac_47_32", 0x0211);
        t.set(&mut e, "roce_addr_layout", "source_mac_31_0", 0x2233_4455);
        t.set(&mut e, "roce_addr_layout", "roce_l3_type", 1);
        t.set(&mut e, "roce_addr_layout", "roce_version", 2);
        let g = gid_entry(&e).unwrap();
        assert_eq!(g.gid[0], 0xfe);
        assert_eq!(g.vlan, Some(0x123));
        assert_eq!(g.mac, [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(g.ver, RoceVer::V2Ipv6);
        t.set(&mut e, "roce_addr_layout", "roce_l3_type", 0);
        assert_eq!(gid_entry(&e).unwrap().ver, RoceVer::V2Ipv4);
        t.set(&mut e, "roce_addr_layout", "roce_version", 0);
        assert_eq!(gid_entry(&e).unwrap().ver, RoceVer::V1);
    }

    #[test]
    fn psn_and_mtu_arithmetic() {
        assert!(psn_le(5, 5) && psn_le(0xff_fffe, 2) && !psn_le(3, 2));
        assert_eq!(npkts(0, 1024), 1);
        assert_eq!(npkts(1025, 1024), 2);
        // Linux rdma_flow_label_to_udp_sport (the values hca-driver's
        // verbs tests check too).
        assert_eq!(udp_sport_for(0x6_0002, 1, 2), 0xc01a);
        assert_eq!(udp_sport_for(0xf_ff1e, 1, 2), 0xff21);
        assert_eq!(udp_sport_for(0x5a5a5, 1, 2), 0xe5b3);
        // Flow label 0: from the QPNs, the same at both ends.
        assert_eq!(udp_sport_for(0, 0x12, 0x345), udp_sport_for(0, 0x345, 0x12));
        let fl = (0x12u64 * 0x345) as u32; // no folding below 2^20
        assert_eq!(udp_sport_for(0, 0x12, 0x345), udp_sport_for(fl, 0, 0));
        assert_eq!(ib_mtu_for(1500), 1024);
        assert_eq!(ib_mtu_for(9000), 4096);
    }
}
