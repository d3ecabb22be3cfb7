//! One side of a test: setting it up (its port, its QPs to INIT and
//! connected to the peer's) and its engine for one message size, which
//! the loopback, client, server and perftest drivers step.

use hca_driver::verbs::Context;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::Hca;
use hca_driver::verbs::{Ah, QpType};
use platform::Platform;

use super::engine::{
    BwReceiver, BwSender, Layout, Peer, PingPong, ReqLat, SendLat, Until, WriteLat,
};
use super::report::{self, BwRow, Row};
use super::spec::{Conn, Spec, Verb};
use crate::error::{Result, ToolError};
use crate::rdma::{
    ConnParams, Endpoint, PortView, Side, path_to, port_view, random_psn, to_init, to_rts,
};

/// A side's engine for one size.
pub(super) enum Engine {
    BwSend(BwSender),
    BwRecv(BwReceiver),
    Write(WriteLat),
    Send(SendLat),
    Req(ReqLat),
    /// The passive side: done once the client is.
    Idle {
        done: bool,
    },
}

impl Engine {
    pub(super) fn new<P: Platform + 'static>(
        spec: &Spec,
        client: bool,
        size: u64,
        s: &mut Side<P>,
        lay: Layout,
        inline: bool,
        start: Instant,
    ) -> Result<Self> {
        let size_us = size as usize;
        let iters = spec.duration.is_none().then_some(spec.iters);
        let deadline = spec.duration.map(|d| start + Duration::from_secs(d));
        let until = match iters {
            Some(n) => Until::Iters(n),
            None => Until::Deadline(if client { deadline } else { None }),
        };
        let ud = spec.conn == Conn::Ud;
        Ok(match (spec.bw, spec.verb, client) {
            (true, _, true) => Engine::BwSend(BwSender::new(
                spec.verb,
                spec.atomic,
                size_us,
                spec.qps as usize,
                iters,
                deadline,
                spec.tx_depth,
                spec.cq_mod,
                inline,
            )),
            (true, Verb::Send, false) => Engine::BwRecv(BwReceiver::new(
                size_us,
                ud,
                spec.qps as usize,
                spec.rx_depth,
                iters,
            )),
            (false, Verb::Write, _) => {
                let w = WriteLat::new(client, size_us, until, spec.tx_depth, inline);
                w.prepare(s, lay)?;
                Engine::Write(w)
            }
            (false, Verb::Send, _) => {
                let mut x = SendLat::new(
                    client,
                    size_us,
                    ud,
                    until,
                    spec.tx_depth,
                    spec.rx_depth,
                    inline,
                );
                x.prepare(s, lay)?;
                Engine::Send(x)
            }
            (false, _, true) => Engine::Req(ReqLat::new(spec.verb, spec.atomic, size_us, until)),
            _ => Engine::Idle { done: false },
        })
    }

    pub(super) fn step<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
    ) -> Result<bool> {
        match self {
            Engine::BwSend(e) => e.step(s, peer),
            Engine::BwRecv(e) => e.step(s, peer),
            Engine::Write(e) => e.step(s, peer),
            Engine::Send(e) => e.step(s, peer),
            Engine::Req(e) => e.step(s, peer),
            Engine::Idle { .. } => Ok(false),
        }
    }

    pub(super) fn done(&self) -> bool {
        match self {
            Engine::BwSend(e) => e.done(),
            Engine::BwRecv(e) => e.done(),
            Engine::Write(e) => e.done(),
            Engine::Send(e) => e.done(),
            Engine::Req(e) => e.done(),
            Engine::Idle { done } => *done,
        }
    }

    /// What the client sent on each QP (to tell the server).
    pub(super) fn sent(&self, qps: usize) -> Vec<u64> {
        match self {
            Engine::BwSend(e) => e.per_qp_posted(),
            Engine::Write(e) => vec![e.pp.iterations()],
            Engine::Send(e) => vec![e.pp.iterations()],
            Engine::Req(e) => vec![e.pp.iterations()],
            _ => vec![0; qps],
        }
    }

    /// Moves the end of a run with a duration (the client's).
    pub(super) fn restart_deadline(&mut self, d: Instant) {
        match self {
            Engine::BwSend(e) => e.set_deadline(d),
            Engine::Write(e) => e.pp.set_deadline(d),
            Engine::Send(e) => e.pp.set_deadline(d),
            Engine::Req(e) => e.pp.set_deadline(d),
            _ => {}
        }
    }

    /// The server learns what the client sent.
    pub(super) fn peer_sent(&mut self, sent: &[u64]) {
        match self {
            Engine::BwRecv(e) => e.set_target(sent),
            Engine::Write(e) => e.pp.set_target(sent.first().copied().unwrap_or(0)),
            Engine::Send(e) => e.pp.set_target(sent.first().copied().unwrap_or(0)),
            Engine::Idle { done } => *done = true,
            _ => {}
        }
    }

    pub(super) fn received(&self) -> u64 {
        match self {
            Engine::BwRecv(e) => e.received(),
            _ => 0,
        }
    }

    pub(super) fn progress(&self) -> (u64, Option<u64>) {
        match self {
            Engine::BwSend(e) => (e.completed(), None),
            Engine::BwRecv(e) => (e.received(), None),
            Engine::Write(e) => (e.pp.iterations(), None),
            Engine::Send(e) => (e.pp.iterations(), None),
            Engine::Req(e) => (e.pp.iterations(), None),
            Engine::Idle { .. } => (0, None),
        }
    }

    /// The client's result row.
    pub(super) fn row(&self, spec: &Spec, size: u64) -> Row {
        let lat = |pp: &PingPong| {
            let (posted, start, end) = pp.samples();
            let it = pp.iterations();
            Row::Lat(match spec.duration {
                Some(_) => report::lat_dur_row(
                    size,
                    it,
                    match (start, end) {
                        (Some(a), Some(b)) => b.saturating_duration_since(a),
                        _ => Duration::ZERO,
                    },
                    spec.rtt_factor(),
                ),
                None => report::lat_row(size, it, posted, spec.rtt_factor()),
            })
        };
        match self {
            Engine::BwSend(e) => {
                Row::Bw(report::bw_row(size, &e.samples, spec.gbits, spec.no_peak))
            }
            Engine::BwRecv(e) => Row::Bw(report::bw_row(size, &e.samples, spec.gbits, true)),
            Engine::Write(e) => lat(&e.pp),
            Engine::Send(e) => lat(&e.pp),
            Engine::Req(e) => lat(&e.pp),
            Engine::Idle { .. } => Row::Bw(BwRow {
                bytes: size,
                iterations: 0,
                bw_peak: 0.0,
                bw_average: 0.0,
                msg_rate_mpps: 0.0,
            }),
        }
    }
}

pub(super) fn progress_text(spec: &Spec, size: u64, e: &Engine) -> String {
    let (n, _) = e.progress();
    match spec.duration {
        Some(d) => format!("{} {size} B: {n} done ({d} s)", spec.test),
        None => format!(
            "{} {size} B: {n} of {}",
            spec.test,
            spec.iters * u64::from(if spec.bw { spec.qps } else { 1 })
        ),
    }
}

/// Moves the QPs to INIT and describes them.
pub(super) fn local_endpoints<P: Platform + 'static>(
    s: &mut Side<P>,
    port: &PortView,
    spec: &Spec,
    lay: Layout,
) -> Result<Vec<Endpoint>> {
    let access = spec.access();
    let mut eps = Vec::with_capacity(s.qps.len());
    for i in 0..s.qps.len() {
        to_init(&mut s.qps[i], port.port, access)
            .map_err(|e| ToolError::driver(format!("{}: modifying a QP to INIT", s.name), e))?;
        eps.push(Endpoint {
            lid: port.lid,
            qpn: s.qps[i].number().0,
            psn: random_psn(),
            gid: port.gid.0,
            rkey: s.mr.rkey().0,
            addr: s.mr.addr() + lay.target(i) as u64,
        });
    }
    Ok(eps)
}

/// Connects the QPs to the peer's and makes the UD address handles.
pub(super) fn connect_all<P: Platform>(
    s: &mut Side<P>,
    port: &PortView,
    me: &[Endpoint],
    remote: &[Endpoint],
    p: &ConnParams,
) -> Result<Vec<Ah<P>>> {
    if remote.len() != s.qps.len() {
        return Err(ToolError::Usage(format!(
            "{}: the peer has {} QPs, this side {}",
            s.name,
            remote.len(),
            s.qps.len()
        )));
    }
    let mut ahs = Vec::new();
    for i in 0..s.qps.len() {
        to_rts(&mut s.qps[i], port, &remote[i], me[i].psn, p)
            .map_err(|e| ToolError::driver(format!("{}: connecting QP {i}", s.name), e))?;
        if s.qps[i].qp_type() == QpType::Ud {
            let ah = Ah::create(&s.pd, &path_to(port, &remote[i], p.hop_limit)).map_err(|e| {
                ToolError::driver(format!("{}: creating an address handle", s.name), e)
            })?;
            ahs.push(ah);
        }
    }
    Ok(ahs)
}

/// Whether sends on these QPs go inline at this size.
pub(super) fn inline_for<P: Platform + 'static>(s: &Side<P>, spec: &Spec, size: u64) -> bool {
    matches!(spec.verb, Verb::Write | Verb::Send)
        && spec.inline > 0
        && size <= u64::from(spec.inline)
        && s.qps
            .iter()
            .all(|q| u64::from(q.cap().max_inline_data) >= size)
}

pub(super) fn probe_port<P: Platform + 'static>(
    hca: &Arc<Hca<P>>,
    who: &str,
    port: u8,
    gid: Option<u8>,
    hint: &str,
) -> Result<PortView> {
    let ctx = Context::open(hca)
        .map_err(|e| ToolError::driver(format!("{who}: opening a verbs context"), e))?;
    port_view(&ctx, who, port, gid, hint)
}
