//! The test loops, as state machines a caller steps: one side's part of a
//! test for one message size. Both sides of a loopback run are stepped in
//! turn on one thread; a server or a client steps its own.
//!
//! - [`BwSender`]: the bandwidth client. Keeps up to `tx_depth` work
//!   requests outstanding on each QP, posted in batches with one doorbell
//!   (`Qp::batch`: `post_rdma_write` / `post_rdma_read` / `post_send`
//!   fast paths, atomics and UD through `push`), every `cq_mod`-th
//!   signaled (and the last), completions polled 32 at a time.
//! - [`BwReceiver`]: the SEND bandwidth server: keeps `rx_depth` receives
//!   posted on each QP and counts what arrives.
//! - [`WriteLat`]: RDMA WRITE ping-pong; each side polls the last byte of
//!   its buffer for the peer's counter, then writes back.
//! - [`SendLat`]: SEND ping-pong.
//! - [`ReqLat`]: RDMA READ or atomic round trips (the client alone).
//! - The passive side (the server of WRITE, READ and atomic
//!   tests).

use std::time::Instant;

use hca_driver::verbs::{Ah, Completion, RecvWr, SendFlags, SendOp, SendWr, Sge};
use platform::Platform;

use super::report::BwSamples;
use super::spec::{AtomicKind, Verb};
use crate::error::{Result, ToolError};
use crate::rdma::{Endpoint, QKEY, Side, failed_completion};

/// Bytes of the GRH area in front of a UD receive.
pub const GRH: usize = 40;
/// The `wr_id` bits that carry the QP index.
const QP_SHIFT: u32 = 48;
const SEQ_MASK: u64 = (1 << QP_SHIFT) - 1;
/// The `wr_id` tag of receives in the latency tests.
const RECV_TAG: u64 = 1 << 63;
/// At most this many posting times are kept (for the peak).
const MAX_SAMPLES: usize = 4_000_000;

/// Where things are in a side's buffer: per QP, a receive / target region
/// the peer writes into or reads from, then a send / source region.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bytes of one region.
    pub slot: usize,
}

impl Layout {
    /// The receive / target region of QP `i`.
    pub fn target(&self, i: usize) -> usize {
        2 * i * self.slot
    }

    /// The send / source region of QP `i`.
    pub fn source(&self, i: usize) -> usize {
        (2 * i + 1) * self.slot
    }
}

/// What a test needs of its side besides the resources.
pub struct Peer<'s, P: Platform + 'static> {
    /// The peer's QPs.
    pub remote: &'s [Endpoint],
    /// UD address handles towards them.
    pub ahs: &'s [Ah<P>],
    /// The buffer layout.
    pub layout: Layout,
}

fn sge<P: Platform + 'static>(s: &Side<P>, offset: usize, len: usize) -> Result<Sge> {
    s.mr.sge(offset, len as u32)
        .map_err(|e| ToolError::driver(format!("{}: describing the buffer", s.name), e))
}

fn post_err(side: &str, what: &str, e: hca_driver::Error) -> ToolError {
    ToolError::driver(format!("{side}: posting {what}"), e)
}

fn poll<P: Platform + 'static>(s: &Side<P>, wc: &mut [Completion]) -> Result<usize> {
    s.cq.poll(wc)
        .map_err(|e| ToolError::driver(format!("{}: polling the CQ", s.name), e))
}

/// What a step did.
pub type Progressed = bool;

/// The bandwidth client.
pub struct BwSender {
    verb: Verb,
    atomic: AtomicKind,
    size: usize,
    tx_depth: u64,
    cq_mod: u64,
    inline: bool,
    /// Work requests per QP (`None`: until the deadline).
    target: Option<u64>,
    deadline: Option<Instant>,
    stopped: bool,
    scnt: Vec<u64>,
    ccnt: Vec<u64>,
    /// Per QP: work requests up to the last signaled one.
    signaled: Vec<u64>,
    /// Per QP: receives the peer has posted (loopback SEND: never send
    /// more, so UC and UD drop nothing).
    credit: Option<Vec<u64>>,
    record: bool,
    msg: Vec<u8>,
    /// What was measured.
    pub samples: BwSamples,
}

impl BwSender {
    /// A sender of `size`-byte messages on `qps` QPs.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        verb: Verb,
        atomic: AtomicKind,
        size: usize,
        qps: usize,
        iters: Option<u64>,
        deadline: Option<Instant>,
        tx_depth: u32,
        cq_mod: u32,
        inline: bool,
    ) -> Self {
        let record = iters.is_some_and(|n| n.saturating_mul(qps as u64) <= MAX_SAMPLES as u64);
        let mut samples = BwSamples::default();
        if record {
            samples.posted.reserve(iters.unwrap_or(0) as usize * qps);
        }
        Self {
            verb,
            atomic,
            size,
            tx_depth: u64::from(tx_depth),
            cq_mod: u64::from(cq_mod.max(1)),
            inline,
            target: iters,
            deadline,
            stopped: false,
            scnt: vec![0; qps],
            ccnt: vec![0; qps],
            signaled: vec![0; qps],
            credit: None,
            record,
            msg: vec![0; if inline { size } else { 0 }],
            samples,
        }
    }

    /// Moves the end of a run with a duration.
    pub fn set_deadline(&mut self, d: Instant) {
        if self.deadline.is_some() {
            self.deadline = Some(d);
        }
    }

    /// Work requests posted on each QP.
    pub fn per_qp_posted(&self) -> Vec<u64> {
        self.scnt.clone()
    }

    /// Limits each QP to the receives its peer QP has posted.
    pub fn set_credit(&mut self, posted: &[u64]) {
        let c = self.credit.get_or_insert_with(Vec::new);
        c.clear();
        c.extend_from_slice(posted);
    }

    /// Work requests retired in all.
    pub fn completed(&self) -> u64 {
        self.samples.done
    }

    /// Whether every work request it will post has completed.
    pub fn done(&self) -> bool {
        match self.target {
            Some(t) => self.ccnt.iter().all(|&c| c >= t),
            None => self.stopped && self.ccnt.iter().zip(&self.signaled).all(|(&c, &s)| c >= s),
        }
    }

    fn signal(&self, seq: u64) -> bool {
        (seq + 1) % self.cq_mod == 0 || self.target == Some(seq + 1)
    }

    /// Posts what the windows allow and polls the CQ.
    pub fn step<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
    ) -> Result<Progressed> {
        let mut progressed = false;
        let now = Instant::now();
        if let Some(d) = self.deadline {
            if now >= d && !self.stopped {
                self.stopped = true;
            }
        }
        if !self.stopped {
            for i in 0..s.qps.len() {
                let mut room = self.tx_depth - (self.scnt[i] - self.ccnt[i]);
                if let Some(t) = self.target {
                    room = room.min(t - self.scnt[i]);
                }
                if let Some(c) = &self.credit {
                    room = room.min(c[i].saturating_sub(self.scnt[i]));
                }
                if room == 0 {
                    continue;
                }
                if self.samples.start.is_none() {
                    self.samples.start = Some(now);
                }
                self.post_batch(s, peer, i, room)?;
                if self.record {
                    self.samples
                        .posted
                        .extend(std::iter::repeat_n(now, room as usize));
                }
                progressed = true;
            }
            if let Some(t) = self.target {
                if self.scnt.iter().all(|&c| c >= t) {
                    self.stopped = true;
                }
            }
        }
        let mut wc = [Completion::default(); 32];
        loop {
            let n = poll(s, &mut wc)?;
            if n == 0 {
                break;
            }
            let t = Instant::now();
            for c in &wc[..n] {
                if !c.is_success() {
                    return Err(failed_completion(s.name, self.verb.wr_name(), c));
                }
                let i = (c.wr_id() >> QP_SHIFT) as usize;
                let seq = c.wr_id() & SEQ_MASK;
                let Some(cc) = self.ccnt.get_mut(i) else {
                    return Err(ToolError::Usage(format!(
                        "{}: a completion names QP index {i}, which does not exist",
                        s.name
                    )));
                };
                let retired = (seq + 1).saturating_sub(*cc);
                *cc = seq + 1;
                self.samples.done += retired;
                self.samples.completions.push((self.samples.done, t));
            }
            self.samples.end = Some(t);
            progressed = true;
            if n < wc.len() {
                break;
            }
        }
        Ok(progressed)
    }

    fn post_batch<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
        i: usize,
        n: u64,
    ) -> Result<()> {
        let name = s.name;
        let lay = peer.layout;
        let remote = peer.remote[i];
        let len = if self.verb == Verb::Atomic {
            8
        } else {
            self.size
        };
        let local = sge(s, lay.source(i), len)?;
        let raddr = remote.addr;
        let first = self.scnt[i];
        let mut last_signaled = self.signaled[i];
        {
            let mut b = s.qps[i].batch().map_err(|e| post_err(name, "a batch", e))?;
            for seq in first..first + n {
                let wr_id = (i as u64) << QP_SHIFT | seq;
                let signaled = self.signal(seq);
                if signaled {
                    last_signaled = seq + 1;
                }
                let flags = if signaled {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::NONE
                };
                let r = match self.verb {
                    Verb::Write if self.inline => b.post_send(
                        &SendWr::new(
                            wr_id,
                            SendOp::RdmaWrite {
                                remote_addr: raddr,
                                rkey: remote.rkey,
                            },
                        )
                        .inline(&self.msg)
                        .flags(flags),
                    ),
                    Verb::Write => {
                        b.post_rdma_write(wr_id, flags, raddr, hca_driver::Rkey(remote.rkey), local)
                    }
                    Verb::Read => {
                        b.post_rdma_read(wr_id, flags, raddr, hca_driver::Rkey(remote.rkey), local)
                    }
                    Verb::Send if peer.ahs.is_empty() && !self.inline => {
                        b.post_send_sge(wr_id, flags, local)
                    }
                    Verb::Send => {
                        let l = [local];
                        let mut wr = SendWr::new(wr_id, SendOp::Send).flags(flags);
                        wr = if self.inline {
                            wr.inline(&self.msg)
                        } else {
                            wr.sgl(&l)
                        };
                        if let Some(ah) = peer.ahs.get(i) {
                            wr = wr.ud(ah.dest(remote.qpn, QKEY));
                        }
                        b.post_send(&wr)
                    }
                    Verb::Atomic => {
                        let op = match self.atomic {
                            AtomicKind::FetchAndAdd => SendOp::AtomicFetchAdd {
                                remote_addr: raddr,
                                rkey: remote.rkey,
                                add: 1,
                            },
                            AtomicKind::CmpAndSwap => SendOp::AtomicCmpSwp {
                                remote_addr: raddr,
                                rkey: remote.rkey,
                                compare: 0,
                                swap: 0,
                            },
                        };
                        b.post_send(&SendWr::new(wr_id, op).sgl(&[local]).flags(flags))
                    }
                };
                r.map_err(|e| post_err(name, self.verb.wr_name(), e))?;
            }
            b.ring();
        }
        self.scnt[i] += n;
        self.signaled[i] = last_signaled;
        Ok(())
    }
}

/// The SEND bandwidth server: receives.
pub struct BwReceiver {
    rx_depth: u64,
    len: usize,
    /// Receives expected per QP (`None`: until told).
    target: Option<Vec<u64>>,
    posted: Vec<u64>,
    done: Vec<u64>,
    /// What was measured (receive completions).
    pub samples: BwSamples,
}

impl BwReceiver {
    /// A receiver of `size`-byte messages on `qps` QPs, `iters` each
    /// (`None`: until told).
    pub fn new(size: usize, ud: bool, qps: usize, rx_depth: u32, iters: Option<u64>) -> Self {
        Self {
            rx_depth: u64::from(rx_depth.max(1)),
            len: size + if ud { GRH } else { 0 },
            target: iters.map(|n| vec![n; qps]),
            posted: vec![0; qps],
            done: vec![0; qps],
            samples: BwSamples::default(),
        }
    }

    /// Receives posted per QP so far.
    pub fn posted(&self) -> &[u64] {
        &self.posted
    }

    /// Receives completed in all.
    pub fn received(&self) -> u64 {
        self.samples.done
    }

    /// Sets the number of messages the sender sent on each QP.
    pub fn set_target(&mut self, per_qp: &[u64]) {
        self.target = Some(per_qp.to_vec());
    }

    /// Whether every expected message arrived.
    pub fn done(&self) -> bool {
        match &self.target {
            Some(t) => self.done.iter().zip(t).all(|(&d, &t)| d >= t),
            None => false,
        }
    }

    /// Posts receives up to the depth (not beyond what is expected, in
    /// batches of a quarter of the depth) and polls the CQ.
    pub fn step<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
    ) -> Result<Progressed> {
        let mut progressed = false;
        let batch = (self.rx_depth / 4).max(1);
        for i in 0..s.qps.len() {
            let mut want = self.rx_depth - (self.posted[i] - self.done[i]);
            let mut last = false;
            if let Some(t) = &self.target {
                let left = t[i].saturating_sub(self.posted[i]);
                if left <= want {
                    want = left;
                    last = true;
                }
            }
            if want == 0 || (want < batch && !last) {
                continue;
            }
            let sg = [sge(s, peer.layout.target(i), self.len)?];
            let wrs: Vec<RecvWr<'_>> = (0..want)
                .map(|k| RecvWr {
                    wr_id: (i as u64) << QP_SHIFT | (self.posted[i] + k),
                    sgl: &sg,
                })
                .collect();
            s.qps[i]
                .post_recv_list(&wrs)
                .map_err(|e| post_err(s.name, "receives", e))?;
            self.posted[i] += want;
            progressed = true;
        }
        let mut wc = [Completion::default(); 32];
        loop {
            let n = poll(s, &mut wc)?;
            if n == 0 {
                break;
            }
            let t = Instant::now();
            if self.samples.start.is_none() {
                self.samples.start = Some(t);
            }
            for c in &wc[..n] {
                if !c.is_success() {
                    return Err(failed_completion(s.name, "a receive", c));
                }
                let i = (c.wr_id() >> QP_SHIFT) as usize;
                let Some(d) = self.done.get_mut(i) else {
                    return Err(ToolError::Usage(format!(
                        "{}: a completion names QP index {i}, which does not exist",
                        s.name
                    )));
                };
                *d += 1;
                self.samples.done += 1;
            }
            self.samples.end = Some(t);
            progressed = true;
            if n < wc.len() {
                break;
            }
        }
        Ok(progressed)
    }
}

/// How a latency side knows when to stop.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// After this many round trips.
    Iters(u64),
    /// The client: at this time. The server: until told how many.
    Deadline(Option<Instant>),
}

/// State shared by the ping-pong latency tests: round trips, when to
/// stop, the client's posting times.
pub struct PingPong {
    client: bool,
    until: Until,
    tx_depth: u64,
    scnt: u64,
    rcnt: u64,
    sdone: u64,
    finished: bool,
    /// Posting times (the client's; one per round trip).
    posted: Vec<Instant>,
    start: Option<Instant>,
    end: Option<Instant>,
}

impl PingPong {
    fn new(client: bool, until: Until, tx_depth: u32) -> Self {
        let cap = match until {
            Until::Iters(n) if client => n.min(MAX_SAMPLES as u64) as usize,
            _ => 0,
        };
        Self {
            client,
            until,
            tx_depth: u64::from(tx_depth.max(1)),
            scnt: 0,
            rcnt: 0,
            sdone: 0,
            finished: false,
            posted: Vec::with_capacity(cap),
            start: None,
            end: None,
        }
    }

    /// Moves the end of a run with a duration.
    pub fn set_deadline(&mut self, d: Instant) {
        if let Until::Deadline(Some(_)) = self.until {
            self.until = Until::Deadline(Some(d));
        }
    }

    /// Whether this side may post its next message now.
    fn may_send(&mut self, now: Instant) -> bool {
        if self.scnt - self.sdone >= self.tx_depth {
            return false;
        }
        if self.client {
            if self.finished {
                return false;
            }
            match self.until {
                Until::Iters(n) if self.scnt >= n => {
                    self.finished = true;
                    return false;
                }
                Until::Deadline(Some(d)) if now >= d => {
                    self.finished = true;
                    return false;
                }
                _ => {}
            }
            self.scnt == self.rcnt
        } else {
            self.scnt < self.rcnt
        }
    }

    fn target(&self) -> Option<u64> {
        match self.until {
            Until::Iters(n) => Some(n),
            Until::Deadline(_) if self.client && self.finished => Some(self.scnt),
            Until::Deadline(_) => None,
        }
    }

    fn done(&self) -> bool {
        match self.target() {
            Some(n) => self.rcnt >= n && self.scnt >= n && self.sdone >= self.scnt,
            None => false,
        }
    }

    /// The round trips done (the client's posts).
    pub fn iterations(&self) -> u64 {
        self.scnt
    }

    /// The server of a run with a duration: the client sent `n`.
    pub fn set_target(&mut self, n: u64) {
        self.until = Until::Iters(n);
    }

    /// The client's posting times and its first and last.
    pub fn samples(&self) -> (&[Instant], Option<Instant>, Option<Instant>) {
        (&self.posted, self.start, self.end)
    }

    fn sent(&mut self, now: Instant) {
        if self.client {
            if self.posted.len() < MAX_SAMPLES {
                self.posted.push(now);
            }
            self.start.get_or_insert(now);
        }
        self.scnt += 1;
    }
}

/// RDMA WRITE latency: each side writes `size` bytes into the peer's
/// target region, the last byte carrying its counter, and polls the last
/// byte of its own target region for the peer's.
pub struct WriteLat {
    /// The round trips.
    pub pp: PingPong,
    size: usize,
    inline: bool,
    msg: Vec<u8>,
}

impl WriteLat {
    /// One side (`client` starts).
    pub fn new(client: bool, size: usize, until: Until, tx_depth: u32, inline: bool) -> Self {
        Self {
            pp: PingPong::new(client, until, tx_depth),
            size,
            inline,
            msg: vec![0; size],
        }
    }

    /// Zeroes the target region (before the peer may write into it).
    pub fn prepare<P: Platform + 'static>(&self, s: &Side<P>, lay: Layout) -> Result<()> {
        s.buf
            .fill(lay.target(0), self.size, 0)
            .and_then(|()| s.buf.fill(lay.source(0), self.size, 0))
            .map_err(|e| ToolError::driver("clearing the buffer", e))
    }

    /// Whether this side is done.
    pub fn done(&self) -> bool {
        self.pp.done()
    }

    /// Polls, checks the target region, posts the next WRITE.
    pub fn step<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
    ) -> Result<Progressed> {
        let mut progressed = false;
        let mut wc = [Completion::default(); 4];
        let n = poll(s, &mut wc)?;
        for c in &wc[..n] {
            if !c.is_success() {
                return Err(failed_completion(s.name, "an RDMA WRITE", c));
            }
            self.pp.sdone += 1;
            progressed = true;
        }
        let lay = peer.layout;
        let expect_more = match self.pp.target() {
            Some(t) => self.pp.rcnt < t,
            None => true,
        };
        if expect_more && (!self.pp.client || self.pp.rcnt < self.pp.scnt) {
            let mut b = [0u8; 1];
            s.buf
                .read(lay.target(0) + self.size - 1, &mut b)
                .map_err(|e| ToolError::driver("reading the buffer", e))?;
            if b[0] == (self.pp.rcnt + 1) as u8 {
                self.pp.rcnt += 1;
                progressed = true;
                if self.pp.client {
                    self.pp.end = Some(Instant::now());
                }
            }
        }
        let now = Instant::now();
        if self.pp.may_send(now) {
            let counter = (self.pp.scnt + 1) as u8;
            let remote = peer.remote[0];
            let op = SendOp::RdmaWrite {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            };
            let r = if self.inline {
                if let Some(last) = self.msg.last_mut() {
                    *last = counter;
                }
                s.qps[0].post_send(
                    &SendWr::new(self.pp.scnt, op)
                        .inline(&self.msg)
                        .flags(SendFlags::SIGNALED),
                )
            } else {
                s.buf
                    .write(lay.source(0) + self.size - 1, &[counter])
                    .map_err(|e| ToolError::driver("writing the buffer", e))?;
                let l = sge(s, lay.source(0), self.size)?;
                s.qps[0].post_rdma_write(
                    self.pp.scnt,
                    SendFlags::SIGNALED,
                    remote.addr,
                    hca_driver::Rkey(remote.rkey),
                    l,
                )
            };
            r.map_err(|e| post_err(s.name, "an RDMA WRITE", e))?;
            self.pp.sent(now);
            progressed = true;
        }
        Ok(progressed)
    }
}

/// SEND latency: each side keeps receives posted and answers each message
/// received with one of its own.
pub struct SendLat {
    /// The round trips.
    pub pp: PingPong,
    size: usize,
    len: usize,
    rx_depth: u64,
    rposted: u64,
    inline: bool,
    msg: Vec<u8>,
}

impl SendLat {
    /// One side (`client` starts).
    pub fn new(
        client: bool,
        size: usize,
        ud: bool,
        until: Until,
        tx_depth: u32,
        rx_depth: u32,
        inline: bool,
    ) -> Self {
        Self {
            pp: PingPong::new(client, until, tx_depth),
            size,
            len: size + if ud { GRH } else { 0 },
            rx_depth: u64::from(rx_depth.max(1)),
            rposted: 0,
            inline,
            msg: vec![0; size],
        }
    }

    fn post_recvs<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        lay: Layout,
        n: u64,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let sg = [sge(s, lay.target(0), self.len)?];
        let wrs: Vec<RecvWr<'_>> = (0..n)
            .map(|k| RecvWr {
                wr_id: RECV_TAG | (self.rposted + k),
                sgl: &sg,
            })
            .collect();
        s.qps[0]
            .post_recv_list(&wrs)
            .map_err(|e| post_err(s.name, "receives", e))?;
        self.rposted += n;
        Ok(())
    }

    /// Posts the receives (before the peer may send).
    pub fn prepare<P: Platform + 'static>(&mut self, s: &mut Side<P>, lay: Layout) -> Result<()> {
        let n = match self.pp.until {
            Until::Iters(n) => self.rx_depth.min(n),
            Until::Deadline(_) => self.rx_depth,
        };
        self.post_recvs(s, lay, n)
    }

    /// Whether this side is done.
    pub fn done(&self) -> bool {
        self.pp.done()
    }

    /// Polls (receives are reposted at once), posts the next SEND.
    pub fn step<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
    ) -> Result<Progressed> {
        let mut progressed = false;
        let lay = peer.layout;
        let mut wc = [Completion::default(); 4];
        let n = poll(s, &mut wc)?;
        let mut received = 0;
        for c in &wc[..n] {
            if !c.is_success() {
                let what = if c.wr_id() & RECV_TAG != 0 {
                    "a receive"
                } else {
                    "a SEND"
                };
                return Err(failed_completion(s.name, what, c));
            }
            if c.wr_id() & RECV_TAG != 0 {
                self.pp.rcnt += 1;
                received += 1;
                if self.pp.client {
                    self.pp.end = Some(Instant::now());
                }
            } else {
                self.pp.sdone += 1;
            }
            progressed = true;
        }
        if received > 0 {
            // Keep the depth, but never post more than will be received.
            let want = match self.pp.until {
                Until::Iters(n) => n.saturating_sub(self.rposted).min(received),
                Until::Deadline(_) => received,
            };
            self.post_recvs(s, lay, want)?;
        }
        let now = Instant::now();
        if self.pp.may_send(now) {
            let remote = peer.remote[0];
            let l = [sge(s, lay.source(0), self.size)?];
            let mut wr = SendWr::new(self.pp.scnt, SendOp::Send).flags(SendFlags::SIGNALED);
            wr = if self.inline {
                wr.inline(&self.msg)
            } else {
                wr.sgl(&l)
            };
            if let Some(ah) = peer.ahs.first() {
                wr = wr.ud(ah.dest(remote.qpn, QKEY));
            }
            s.qps[0]
                .post_send(&wr)
                .map_err(|e| post_err(s.name, "a SEND", e))?;
            self.pp.sent(now);
            progressed = true;
        }
        Ok(progressed)
    }
}

/// RDMA READ or atomic latency: the client's round trips, one at a time.
pub struct ReqLat {
    /// The round trips.
    pub pp: PingPong,
    verb: Verb,
    atomic: AtomicKind,
    size: usize,
}

impl ReqLat {
    /// The client of a READ (`size` bytes) or atomic test.
    pub fn new(verb: Verb, atomic: AtomicKind, size: usize, until: Until) -> Self {
        Self {
            pp: PingPong::new(true, until, 1),
            verb,
            atomic,
            size,
        }
    }

    /// Whether every request completed.
    pub fn done(&self) -> bool {
        self.pp.finished && self.pp.sdone >= self.pp.scnt
    }

    /// Polls, posts the next request once the previous completed.
    pub fn step<P: Platform + 'static>(
        &mut self,
        s: &mut Side<P>,
        peer: &Peer<'_, P>,
    ) -> Result<Progressed> {
        let mut progressed = false;
        let mut wc = [Completion::default(); 4];
        let n = poll(s, &mut wc)?;
        for c in &wc[..n] {
            if !c.is_success() {
                return Err(failed_completion(s.name, self.verb.wr_name(), c));
            }
            self.pp.sdone += 1;
            // One request at a time: a completion is a received answer.
            self.pp.rcnt += 1;
            self.pp.end = Some(Instant::now());
            progressed = true;
        }
        let now = Instant::now();
        if self.pp.may_send(now) {
            let remote = peer.remote[0];
            let lay = peer.layout;
            let id = self.pp.scnt;
            let r = if self.verb == Verb::Read {
                let l = sge(s, lay.source(0), self.size)?;
                s.qps[0].post_rdma_read(
                    id,
                    SendFlags::SIGNALED,
                    remote.addr,
                    hca_driver::Rkey(remote.rkey),
                    l,
                )
            } else {
                let l = [sge(s, lay.source(0), 8)?];
                let op = match self.atomic {
                    AtomicKind::FetchAndAdd => SendOp::AtomicFetchAdd {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                        add: 1,
                    },
                    AtomicKind::CmpAndSwap => SendOp::AtomicCmpSwp {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                        compare: 0,
                        swap: 0,
                    },
                };
                s.qps[0].post_send(&SendWr::new(id, op).sgl(&l).flags(SendFlags::SIGNALED))
            };
            r.map_err(|e| post_err(s.name, self.verb.wr_name(), e))?;
            self.pp.sent(now);
            progressed = true;
        }
        Ok(progressed)
    }
}
