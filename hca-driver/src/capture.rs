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
//! [`RawContext::qp`]).

use alloc::sync::Arc;
use core::time::Duration;

use platform::Platform;
use verbs_core::{Completion, RecvWr, RxCqe, SendWr, WcStatus, WorkCompletion};

use crate::error::{Error, Result};
use crate::fw::{Object, QCounterObj};
use crate::hca::Hca;
use crate::verbs::{
    CompChannel, Context, Cq, Pd, Qp, QpAttr, QpCap, QpCreateFlags, QpInitAttr, QpState, QpType,
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
    /// frames dropped for want of a posted receive (`out_of_buffer`).
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
        let ctx = Arc::new(Context::open(hca)?);
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
