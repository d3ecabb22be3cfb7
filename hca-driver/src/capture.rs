//! A capture-oriented convenience layer over raw packet QPs, modelled on
//! what InfinibandVerbs.jl offers its radio-astronomy capture users: a
//! [`RawContext`] bundling the verbs context, port, PD, a send and a
//! receive CQ each on a completion channel, and a raw packet QP, sized by
//! a [`RawContextBuilder`]; posting lists of work requests with the
//! RTR/RTS transitions done for the caller; and a repost loop
//! ([`RawContext::repost_loop`]) that hands each received frame to a
//! callback and posts its receive again, ending on the callback's word or
//! after a timeout without traffic.
//!
//! Flow rules steer frames into the context's QP as into any raw QP
//! ([`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule) with
//! [`RawContext::qp`]); the
//! simplest case, one rule into one QP for as long as a closure runs, is
//! [`with_steering`] (or [`RawContext::steered`]). [`RawSlots`] are the
//! buffers: slots of one registered DMA buffer, a slot per work request.
//!
//! Receive CQEs carry the device's timestamp
//! ([`RxCqe::timestamp`]); [`DeviceClock`] turns free-running ticks into
//! host time, anchored to a reading of the device's internal timer
//! ([`Hca::internal_timer`]) taken with the host's clock.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

use firmware_cmds::caps::{CmdHcaCap, ts_cap_free_running};
use platform::Platform;
use verbs_core::{Completion, RecvWr, RxCqe, SendWr, Sge, WcStatus, WorkCompletion};

use crate::error::{Error, Result};
use crate::flow::{FlowDest, TirDest};
use crate::fw::{Object, QCounterObj};
use crate::hca::Hca;
use crate::steering::FlowMatch;
use crate::types::Tirn;
use crate::verbs::{
    AccessFlags, CompChannel, Context, Cq, DmaBuf, Mr, Pd, Qp, QpAttr, QpCap, QpCreateFlags,
    QpInitAttr, QpState, QpType,
};

/// Sizes and options of a [`RawContext`] (InfinibandVerbs.jl's keyword
/// arguments to its `Context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawContextBuilder {
    port: u8,
    send_wr: u32,
    recv_wr: u32,
    send_sge: u32,
    recv_sge: u32,
    inline: u32,
    send_cqe: u32,
    recv_cqe: u32,
    flags: QpCreateFlags,
    q_counter: bool,
}

impl RawContextBuilder {
    /// A context on `port` with 64 send and 64 receive work requests of
    /// one SGE, no inline data beyond the headers, CQs as deep as the
    /// queues.
    pub fn new(port: u8) -> Self {
        Self {
            port,
            send_wr: 64,
            recv_wr: 64,
            send_sge: 1,
            recv_sge: 1,
            inline: 0,
            send_cqe: 0,
            recv_cqe: 0,
            flags: QpCreateFlags::NONE,
            q_counter: false,
        }
    }

    /// Gives the QP's receive queue a Q counter set of its own
    /// (ALLOC_Q_COUNTER), so that [`RawContext::rx_drops`] reports the
    /// frames dropped for want of a posted receive (`out_of_buffer`). On a
    /// device without Q counters ([`Hca::has_q_counters`]) building fails
    /// with [`Error::Unsupported`].
    pub fn q_counter(mut self, on: bool) -> Self {
        self.q_counter = on;
        self
    }

    /// Outstanding send work requests (0: a receive-only QP).
    pub fn send_wr(mut self, n: u32) -> Self {
        self.send_wr = n;
        self
    }

    /// Outstanding receive work requests (0: a send-only QP).
    pub fn recv_wr(mut self, n: u32) -> Self {
        self.recv_wr = n;
        self
    }

    /// SGEs per send and per receive work request.
    pub fn sge(mut self, send: u32, recv: u32) -> Self {
        self.send_sge = send;
        self.recv_sge = recv;
        self
    }

    /// Inline bytes per send work request.
    pub fn inline_data(mut self, n: u32) -> Self {
        self.inline = n;
        self
    }

    /// Entries of the send and the receive CQ (0: as many as the queue's
    /// work requests).
    pub fn cqe(mut self, send: u32, recv: u32) -> Self {
        self.send_cqe = send;
        self.recv_cqe = recv;
        self
    }

    /// The QP's create flags (CVLAN stripping, scatter FCS).
    pub fn create_flags(mut self, f: QpCreateFlags) -> Self {
        self.flags = f;
        self
    }

    /// Opens the context on `hca`: verbs context, PD, a completion channel
    /// and a CQ for each direction, the raw packet QP in RESET.
    pub fn build<P: Platform + 'static>(&self, hca: &Arc<Hca<P>>) -> Result<RawContext<P>> {
        self.build_in(&Arc::new(Context::open(hca)?))
    }

    /// [`build`](Self::build) in a verbs context the caller already has
    /// open (e.g. to query the port first).
    pub fn build_in<P: Platform + 'static>(&self, ctx: &Arc<Context<P>>) -> Result<RawContext<P>> {
        let ctx = ctx.clone();
        ctx.check_port(self.port)?;
        let pd = Arc::new(Pd::alloc(&ctx)?);
        let send_channel = Arc::new(CompChannel::create(&ctx)?);
        let recv_channel = Arc::new(CompChannel::create(&ctx)?);
        let depth = |cqe: u32, wr: u32| if cqe == 0 { wr.max(1) } else { cqe };
        let send_cq = Arc::new(Cq::create_on_channel(
            &ctx,
            depth(self.send_cqe, self.send_wr),
            0,
            &send_channel,
            0,
        )?);
        let recv_cq = Arc::new(Cq::create_on_channel(
            &ctx,
            depth(self.recv_cqe, self.recv_wr),
            0,
            &recv_channel,
            1,
        )?);
        let cap = QpCap {
            max_send_wr: self.send_wr,
            max_recv_wr: self.recv_wr,
            max_send_sge: if self.send_wr == 0 { 0 } else { self.send_sge },
            max_recv_sge: if self.recv_wr == 0 { 0 } else { self.recv_sge },
            max_inline_data: self.inline,
        };
        let q_counter = if self.q_counter {
            let hca = ctx.hca();
            Some(hca.alloc_q_counter_on(hca.clone())?)
        } else {
            None
        };
        let mut attr = QpInitAttr::new(QpType::RawPacket, &send_cq, &recv_cq)
            .cap(cap)
            .create_flags(self.flags);
        if let Some(q) = &q_counter {
            attr = attr.counter_set(q.number());
        }
        let qp = Qp::create(&pd, &attr)?;
        Ok(RawContext {
            qp,
            q_counter,
            send_cq,
            recv_cq,
            send_channel,
            recv_channel,
            pd,
            ctx,
            port: self.port,
        })
    }
}

/// What the [`RawContext::repost_loop`] callback tells the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Post the receive again and go on.
    Continue,
    /// Post the receive again and end the loop.
    Stop,
}

/// How a [`RawContext::repost_loop`] ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// Frames handed to the callback.
    pub frames: u64,
    /// Bytes of those frames.
    pub bytes: u64,
    /// Receive completions in error (not handed to the callback, not
    /// posted again).
    pub errors: u64,
    /// The loop ended because no completion came within the timeout
    /// (rather than on the callback's [`Flow::Stop`]).
    pub timed_out: bool,
}

/// A raw packet QP with everything it needs (InfinibandVerbs.jl's
/// `Context`): verbs context, port, PD, a send and a receive CQ on
/// completion channels of their own, the QP. Dropping it destroys them
/// (QP first).
pub struct RawContext<P: Platform + 'static> {
    /// The raw packet QP (a flow-rule destination).
    pub qp: Qp<P>,
    /// The QP's Q counter set ([`RawContextBuilder::q_counter`]); dropped
    /// after the QP that counts into it.
    q_counter: Option<Object<Arc<Hca<P>>, QCounterObj>>,
    /// The send CQ, on [`send_channel`](Self::send_channel).
    pub send_cq: Arc<Cq<P>>,
    /// The receive CQ, on [`recv_channel`](Self::recv_channel).
    pub recv_cq: Arc<Cq<P>>,
    /// The send CQ's completion channel.
    pub send_channel: Arc<CompChannel<P>>,
    /// The receive CQ's completion channel.
    pub recv_channel: Arc<CompChannel<P>>,
    /// The PD (register the buffers in it).
    pub pd: Arc<Pd<P>>,
    /// The verbs context.
    pub ctx: Arc<Context<P>>,
    port: u8,
}

impl<P: Platform + 'static> RawContext<P> {
    /// The port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// Frames the device dropped because the QP had no receive posted
    /// (QUERY_Q_COUNTER's `out_of_buffer` of the QP's own set), since the
    /// context was built; `None` without a Q counter
    /// ([`RawContextBuilder::q_counter`]).
    pub fn rx_drops(&self) -> Result<Option<u32>> {
        self.q_counter
            .as_ref()
            .map(|q| q.query(false).map(|v| v.out_of_buffer))
            .transpose()
    }

    /// The QP's Q counter set, when it has one.
    pub fn q_counter(&self) -> Option<&Object<Arc<Hca<P>>, QCounterObj>> {
        self.q_counter.as_ref()
    }

    /// Moves the QP up to `to` (INIT, RTR or RTS) along RESET -> INIT
    /// (with the port) -> RTR -> RTS, from wherever it is on that path.
    pub fn bring_up(&mut self, to: QpState) -> Result<()> {
        let order = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts];
        let rank = |s| order.iter().position(|&o| o == s);
        let (Some(want), Some(mut at)) = (rank(to), rank(self.qp.state())) else {
            return Err(Error::InvalidTransition {
                qp_type: QpType::RawPacket,
                from: self.qp.state(),
                to,
            });
        };
        while at < want {
            let next = order[at + 1];
            let mut a = QpAttr::new().state(next);
            if next == QpState::Init {
                a = a.port(self.port);
            }
            self.qp.modify(&a)?;
            at += 1;
        }
        Ok(())
    }

    /// Posts receive work requests (`post_wrs` for receives), moving the
    /// QP to RTR first when it is below (RESET or INIT): the receive
    /// doorbell record is live from RTR on.
    pub fn post_recv_wrs(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if matches!(self.qp.state(), QpState::Reset | QpState::Init) {
            self.bring_up(QpState::Rtr)?;
        }
        self.qp.post_recv_list(wrs)
    }

    /// Posts send work requests (`post_wrs` for sends), moving the QP to
    /// RTS first when it is below.
    pub fn post_send_wrs(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        if self.qp.state() != QpState::Rts {
            self.bring_up(QpState::Rts)?;
        }
        self.qp.post_send_list(wrs)
    }

    /// Waits up to `timeout` for a completion on `cq`: polls it, and when
    /// it is empty arms it and sleeps on its channel (the event acked),
    /// then polls again. `Ok(false)` when nothing came in time.
    fn next_completion(
        cq: &Cq<P>,
        channel: &CompChannel<P>,
        out: &mut Completion,
        rx: &mut RxCqe,
        timeout: Duration,
    ) -> Result<bool> {
        let hca = cq.context().hca();
        let p = hca.platform();
        let deadline = crate::deadline::Deadline::start(p, timeout);
        loop {
            if cq.poll_one_rx(out, rx)? {
                return Ok(true);
            }
            cq.req_notify(false);
            // A completion that came before the arm raises no event.
            if cq.poll_one_rx(out, rx)? {
                return Ok(true);
            }
            let left = deadline.remaining(p);
            if left.is_zero() {
                return Ok(false);
            }
            match channel.get_event(left)? {
                // The event's CQ (the only one on the channel) is looked
                // at again.
                Some(_) => cq.ack_events(1)?,
                None => return Ok(false),
            }
        }
    }

    /// The repost loop: posts `wrs` (their `wr_id` must be their index in
    /// `wrs`), moving the QP to RTR first, then hands each received frame
    /// (its completion and CQE fields) to `on_frame` and posts the same
    /// work request again. Ends when `on_frame` says [`Flow::Stop`], or
    /// when no completion comes for `timeout` (sleeping on the receive
    /// channel meanwhile). Receive completions in error are counted and
    /// not posted again (the QP is in error then, as after a flush).
    pub fn repost_loop(
        &mut self,
        wrs: &[RecvWr<'_>],
        timeout: Duration,
        on_frame: impl FnMut(&WorkCompletion, &RxCqe) -> Flow,
    ) -> Result<LoopStats> {
        check_indices(wrs)?;
        self.post_recv_wrs(wrs)?;
        self.repost_loop_posted(wrs, timeout, on_frame)
    }

    /// [`repost_loop`](Self::repost_loop) over work requests the caller
    /// already posted (with [`post_recv_wrs`](Self::post_recv_wrs)), e.g.
    /// to start a sender once the buffers are in place.
    pub fn repost_loop_posted(
        &mut self,
        wrs: &[RecvWr<'_>],
        timeout: Duration,
        mut on_frame: impl FnMut(&WorkCompletion, &RxCqe) -> Flow,
    ) -> Result<LoopStats> {
        check_indices(wrs)?;
        if matches!(self.qp.state(), QpState::Reset | QpState::Init) {
            self.bring_up(QpState::Rtr)?;
        }
        let mut stats = LoopStats::default();
        let mut c = Completion::default();
        let mut rx = RxCqe::default();
        loop {
            if !Self::next_completion(&self.recv_cq, &self.recv_channel, &mut c, &mut rx, timeout)?
            {
                stats.timed_out = true;
                return Ok(stats);
            }
            let w = WorkCompletion::from(c);
            if w.status != WcStatus::Success {
                stats.errors += 1;
                continue;
            }
            stats.frames += 1;
            stats.bytes += u64::from(w.byte_len);
            let flow = on_frame(&w, &rx);
            let wr = wrs.get(w.wr_id as usize).ok_or(Error::InvalidArgument {
                arg: "wr_id",
                reason: "a completion names no work request of the loop",
            })?;
            self.qp.post_recv(wr)?;
            if flow == Flow::Stop {
                return Ok(stats);
            }
        }
    }

    /// The TIR of the QP's receive queue, which flow rules name to deliver
    /// frames to it ([`with_steering`]); a send-only QP has none.
    pub fn tir(&self) -> Result<Tirn> {
        self.qp.tir().ok_or(Error::InvalidArgument {
            arg: "recv_wr",
            reason: "a raw packet QP without a receive queue has no TIR to steer frames to",
        })
    }

    /// Posts receive buffer `i` of `slots` (a whole slot, `wr_id` `i`),
    /// moving the QP to RTR first when it is below.
    pub fn post_recv_slot(&mut self, slots: &RawSlots<P>, i: u64) -> Result<()> {
        let sge = slots.sge(i, slots.slot_size())?;
        self.post_recv_wrs(&[RecvWr {
            wr_id: i,
            sgl: &[sge],
        }])
    }

    /// Runs `f` with the frames `m` matches steered into this QP
    /// ([`with_steering`] on its HCA and [`tir`](Self::tir)); the rule,
    /// group and table are gone when it returns. A failure to remove them
    /// is the result when `f` succeeded (else it is logged).
    pub fn steered<R>(
        &mut self,
        m: &FlowMatch,
        f: impl FnOnce(&mut Self) -> Result<R>,
    ) -> Result<R> {
        let tir = self.tir()?;
        let ctx = self.ctx.clone();
        with_steering(ctx.hca(), m, tir, || f(self))?
    }

    /// Destroys the QP now, with its result (dropping the context does the
    /// same and logs a failure); the CQs, channels, PD and verbs context
    /// go when their last handle does.
    pub fn close(self) -> Result<()> {
        self.qp.destroy()
    }

    /// Polls the send CQ for one completion, sleeping on its channel up to
    /// `timeout`; `None` when nothing came.
    pub fn wait_send(&self, timeout: Duration) -> Result<Option<WorkCompletion>> {
        let mut c = Completion::default();
        let mut rx = RxCqe::default();
        Ok(
            Self::next_completion(&self.send_cq, &self.send_channel, &mut c, &mut rx, timeout)?
                .then(|| WorkCompletion::from(c)),
        )
    }
}

/// The repost loop's work requests: each `wr_id` its index.
fn check_indices(wrs: &[RecvWr<'_>]) -> Result<()> {
    for (i, w) in wrs.iter().enumerate() {
        if w.wr_id != i as u64 {
            return Err(Error::InvalidArgument {
                arg: "wrs",
                reason: "each work request's wr_id must be its index",
            });
        }
    }
    Ok(())
}

/// A TIR named by number: the rule of [`with_steering`] delivers to it
/// while its QP stays postable (see [`FlowDest::Receivers`]).
struct TirOf(Tirn);

impl TirDest for TirOf {
    fn tir_number(&self) -> Option<Tirn> {
        Some(self.0)
    }
}

/// Runs `f` while the NIC RX frames `m` matches are steered into `tir`
/// (a raw packet QP's, [`RawContext::tir`]): a NIC RX flow table at level
/// 0 made the root, one flow group with `m`'s match criteria and one flow
/// table entry forwarding to `tir`. An empty `m` is a catch-all
/// (`match_criteria_enable` 0): every frame the NIC RX path sees. The
/// rule, the group and the table are then deleted, in that order.
///
/// The outer result is the steering's: creating the objects, or deleting
/// them after an `f` that succeeded (after one that failed, a deletion
/// failure is logged and `f`'s error kept). The inner one is `f`'s, with
/// its own error type.
pub fn with_steering<P: Platform, R, E>(
    hca: &Hca<P>,
    m: &FlowMatch,
    tir: Tirn,
    f: impl FnOnce() -> core::result::Result<R, E>,
) -> Result<core::result::Result<R, E>> {
    let dest = TirOf(tir);
    let table = hca.create_flow_table(0, 1, None)?;
    let group = table.create_group(0, 0, m)?;
    let dests: [&dyn TirDest; 1] = [&dest];
    let rule = group.add_rule(0, m, FlowDest::Receivers(&dests))?;
    table.set_root()?;
    let r = f();
    let removed = rule
        .destroy()
        .and_then(|()| group.destroy())
        .and_then(|()| table.destroy());
    match (r, removed) {
        (Ok(v), Ok(())) => Ok(Ok(v)),
        (Ok(_), Err(e)) => Err(e),
        (Err(e), removed) => {
            if let Err(d) = removed {
                log::error!("removing the flow rule, group and table: {d}");
            }
            Ok(Err(e))
        }
    }
}

/// Buffers of a [`RawContext`]: `n` slots of `slot` bytes, back to back
/// in one DMA buffer registered in the context's PD (local write); slot
/// `i` is the buffer of the work request whose `wr_id` is `i`.
pub struct RawSlots<P: Platform + 'static> {
    mr: Mr<P>,
    buf: Arc<DmaBuf<P>>,
    n: u64,
    slot: usize,
    /// Each slot's whole scatter entry, for [`recv_wrs`](Self::recv_wrs).
    sges: Vec<Sge>,
}

impl<P: Platform + 'static> RawSlots<P> {
    /// `n` slots of `slot` bytes for `raw`'s QP (at least one of each).
    pub fn new(raw: &RawContext<P>, n: u32, slot: usize) -> Result<Self> {
        let len = (n as usize).checked_mul(slot).filter(|&l| l > 0);
        let len = len.ok_or(Error::InvalidArgument {
            arg: "n, slot",
            reason: "at least one slot of at least one byte, n * slot within the address space",
        })?;
        if u32::try_from(slot).is_err() {
            return Err(Error::InvalidArgument {
                arg: "slot",
                reason: "a slot is one scatter entry: at most 2^32 - 1 bytes",
            });
        }
        let buf = Arc::new(DmaBuf::alloc(raw.ctx.hca(), len)?);
        let mr = Mr::register(&raw.pd, &buf, AccessFlags::LOCAL_WRITE)?;
        let sges = (0..n as usize)
            .map(|i| mr.sge(i * slot, slot as u32))
            .collect::<Result<_>>()?;
        Ok(Self {
            mr,
            buf,
            n: u64::from(n),
            slot,
            sges,
        })
    }

    /// One receive work request per slot, each `wr_id` its slot, for
    /// [`RawContext::repost_loop`] (which wants them in that order).
    pub fn recv_wrs(&self) -> Vec<RecvWr<'_>> {
        self.sges
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr {
                wr_id: i as u64,
                sgl: core::slice::from_ref(s),
            })
            .collect()
    }

    /// The number of slots.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Bytes of each slot.
    pub fn slot_size(&self) -> u32 {
        self.slot as u32
    }

    /// The DMA buffer.
    pub fn buf(&self) -> &Arc<DmaBuf<P>> {
        &self.buf
    }

    /// The memory region over it.
    pub fn mr(&self) -> &Mr<P> {
        &self.mr
    }

    fn offset(&self, i: u64, at: usize, len: usize) -> Result<usize> {
        if i >= self.n || at.checked_add(len).is_none_or(|end| end > self.slot) {
            return Err(Error::InvalidArgument {
                arg: "slot",
                reason: "no such slot, or bytes past its end",
            });
        }
        Ok(i as usize * self.slot + at)
    }

    /// The scatter entry of the first `len` bytes of slot `i`.
    pub fn sge(&self, i: u64, len: u32) -> Result<Sge> {
        let off = self.offset(i, 0, len as usize)?;
        self.mr.sge(off, len)
    }

    /// Writes `data` into slot `i` from byte `at`.
    pub fn write(&self, i: u64, at: usize, data: &[u8]) -> Result<()> {
        let off = self.offset(i, at, data.len())?;
        self.buf.write(off, data)
    }

    /// Copies the frame a successful receive completion names into `out`
    /// (resized to it): its `byte_len` bytes from slot `wr_id`. The device
    /// is not trusted: a slot that does not exist or a length beyond a
    /// slot is refused.
    pub fn read_frame(&self, wc: &WorkCompletion, out: &mut Vec<u8>) -> Result<()> {
        let len = wc.byte_len as usize;
        let off = self.offset(wc.wr_id, 0, len).map_err(|_| Error::InvalidArgument {
            arg: "wc",
            reason: "a receive completion names a slot that does not exist or more bytes than a slot holds",
        })?;
        out.resize(len, 0);
        self.buf.read(off, out)
    }
}

/// The device clock of free-running CQE timestamps, anchored to the
/// host: ticks at `khz` kHz, tick `at_tick` read when the host's clock
/// showed `at_host` (any epoch; e.g. since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceClock {
    khz: u32,
    at_tick: u64,
    at_host: Duration,
}

impl DeviceClock {
    /// A clock of `khz` kHz ([`Hca::device_clock_khz`])
    /// anchored at tick `at_tick` = host time `at_host`; 0 kHz (a device
    /// that does not report its clock) is refused.
    pub fn new(khz: u32, at_tick: u64, at_host: Duration) -> Result<Self> {
        if khz == 0 {
            return Err(Error::Unsupported(
                "the device reports no clock rate (device_frequency_khz and _mhz 0): CQE timestamps cannot be converted",
            ));
        }
        Ok(Self {
            khz,
            at_tick,
            at_host,
        })
    }

    /// Anchors the clock of `hca` now: its internal timer read between two
    /// readings of `host_now`, which the anchor takes the middle of.
    ///
    /// A device whose receive queues cannot timestamp free-running (the
    /// general caps' `rq_ts_format` offers real time only, so RQs are
    /// created real time: seconds and nanoseconds, not ticks) is refused.
    pub fn anchor<P: Platform>(
        hca: &Hca<P>,
        mut host_now: impl FnMut() -> Duration,
    ) -> Result<Self> {
        let rq_ts = hca.caps().general().get(CmdHcaCap::rq_ts_format);
        if !ts_cap_free_running(rq_ts) {
            return Err(Error::Unsupported(
                "the device's receive queues timestamp in real time (rq_ts_format), not in device clock ticks",
            ));
        }
        let khz = hca.device_clock_khz();
        let before = host_now();
        let tick = hca.internal_timer()?;
        let after = host_now();
        let mid = before + after.saturating_sub(before) / 2;
        Self::new(khz, tick, mid)
    }

    /// The clock's rate in kHz (never 0).
    pub fn khz(&self) -> u32 {
        self.khz
    }

    /// The anchor's device time, in ticks.
    pub fn at_tick(&self) -> u64 {
        self.at_tick
    }

    /// The anchor's host time.
    pub fn at_host(&self) -> Duration {
        self.at_host
    }

    /// The host time of device tick `t` (ticks before the anchor count
    /// back from it; the result saturates at zero and at `Duration::MAX`). Exact to the
    /// nanosecond: `ticks * 10^6 / khz` in 128-bit arithmetic.
    pub fn host_time(&self, t: u64) -> Duration {
        let ns = |d: u64| {
            let n = u128::from(d) * 1_000_000 / u128::from(self.khz);
            Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
        };
        if t >= self.at_tick {
            self.at_host
                .checked_add(ns(t - self.at_tick))
                .unwrap_or(Duration::MAX)
        } else {
            self.at_host.saturating_sub(ns(self.at_tick - t))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ticks_become_host_time_from_the_anchor() {
        // 275 MHz (the recorded ConnectX-4: device_frequency_mhz 275): 275
        // ticks a microsecond.
        let c = DeviceClock::new(275_000, 1_000_000, Duration::from_secs(1_700_000_000)).unwrap();
        assert_eq!(c.host_time(1_000_000), Duration::from_secs(1_700_000_000));
        assert_eq!(
            c.host_time(1_000_275),
            Duration::from_secs(1_700_000_000) + Duration::from_micros(1)
        );
        // 1 tick = 3.636... ns: truncated.
        assert_eq!(
            c.host_time(1_000_001),
            Duration::from_secs(1_700_000_000) + Duration::from_nanos(3)
        );
        assert_eq!(
            c.host_time(1_000_000 + 275_000_000 * 3),
            Duration::from_secs(1_700_000_003)
        );
        // Before the anchor.
        assert_eq!(
            c.host_time(1_000_000 - 275_000),
            Duration::from_secs(1_700_000_000) - Duration::from_millis(1)
        );
        // Strictly increasing ticks a nanosecond or more apart stay
        // strictly increasing.
        let mut last = Duration::ZERO;
        for k in 0..1000u64 {
            let t = c.host_time(1_000_000 + k * 4);
            assert!(t > last || k == 0, "tick {k}");
            last = t;
        }
        // Saturating, never panicking, at both ends.
        let z = DeviceClock::new(1, u64::MAX, Duration::from_secs(1)).unwrap();
        assert_eq!(z.host_time(0), Duration::ZERO);
        let m = DeviceClock::new(1, 0, Duration::MAX - Duration::from_secs(1)).unwrap();
        assert_eq!(m.host_time(u64::MAX), Duration::MAX);
        assert!(matches!(
            DeviceClock::new(0, 0, Duration::ZERO),
            Err(Error::Unsupported(_))
        ));
    }
}
