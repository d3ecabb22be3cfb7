//! Posting to a QP: send and receive work requests, checked before they
//! reach the device, and batches rung with one doorbell.

use super::*;
use crate::types::Rkey;

impl<P: Platform + 'static, S: Share> Qp<P, S> {
    // ---- posting ----------------------------------------------------------

    #[inline]
    fn send_state(&self) -> core::result::Result<(), WrError> {
        if self.state.can_post_send() {
            Ok(())
        } else {
            Err(WrError::WrongState {
                queue: "send queue",
                state: self.state,
            })
        }
    }

    #[inline]
    fn check_send(&mut self, wr: &SendWr<'_>) -> core::result::Result<(), WrError> {
        self.send_state()?;
        if self.sge_check == SgeCheck::Full {
            check_send_sges(&self.pd, &mut self.cache, SgeCheck::Full, wr)?;
        }
        Ok(())
    }

    /// Checks and posts a work request of one SGE through verbs-core's
    /// one-SGE fast path. Inline: the state and the cached key region
    /// (see [`KeyCache`]); everything else (a key not cached, an empty
    /// SGE, [`SgeCheck::Off`], a refusal and its error) is
    /// [`post_sge_slow`](Self::post_sge_slow), which checks the request
    /// fully, so the inline path keeps few values live across calls.
    #[inline(always)]
    fn post_sge(&mut self, wr_id: u64, op: SendOp, flags: SendFlags, sge: Sge) -> Result<()> {
        if self.state.can_post_send()
            && self.cache.hit(self.pd.generation(), sge, local_needs(&op))
            && let Some(sq) = self.dp.as_mut().and_then(|d| d.sq().ok())
        {
            return match sq.post_send_sge(wr_id, op, flags, sge) {
                Ok(()) => Ok(()),
                Err(e) => Err(sge_refused(e)),
            };
        }
        // The slow path's arguments in registers (the SGE stays where the
        // caller put it): nothing is stored for it on the inline path.
        match pack_sge_op(&op, flags) {
            Some([w0, w1]) => self.post_sge_cold(wr_id, w0, w1, &sge),
            None => self.post_sge_slow(wr_id, op, flags, sge),
        }
    }

    /// [`post_sge_slow`](Self::post_sge_slow) of an operation packed by
    /// [`pack_sge_op`].
    #[cold]
    #[inline(never)]
    fn post_sge_cold(&mut self, wr_id: u64, w0: u64, w1: u64, sge: &Sge) -> Result<()> {
        let (op, flags) = unpack_sge_op(w0, w1);
        self.post_sge_slow(wr_id, op, flags, *sge)
    }

    /// [`post_sge`](Self::post_sge) past its inline path: every check,
    /// in order, then the post.
    #[cold]
    #[inline(never)]
    fn post_sge_slow(&mut self, wr_id: u64, op: SendOp, flags: SendFlags, sge: Sge) -> Result<()> {
        self.send_state()
            .and_then(|()| {
                check_single_sge(
                    &self.pd,
                    &mut self.cache,
                    self.sge_check,
                    sge,
                    local_needs(&op),
                )
            })
            .and_then(|()| {
                self.sq()?
                    .post_send_sge(wr_id, op, flags, sge)
                    .map_err(|e| WrError::DataPath(e.into()))
            })
            .map_err(|reason| refused(0, reason))
    }

    #[inline]
    fn sq(&mut self) -> core::result::Result<&mut verbs_core::SendQueue<P::Mmio>, WrError> {
        self.dp()?.sq().map_err(WrError::DataPath)
    }

    /// Posts one send work request (`ibv_post_send`): SEND,
    /// SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), RDMA_READ, the atomics, with a
    /// gather list or inline data, signaled or not, fenced, solicited; UD
    /// with a destination ([`Ah::dest`](crate::verbs::Ah::dest)). Refused
    /// with [`Error::InvalidWorkRequest`] before anything is written when
    /// the state, a key, the queue space or the request's shape is wrong.
    ///
    /// Inline, as verbs-core's `SendQueue::post_send` (so a work request
    /// built at the call is never copied through memory); the errors are
    /// built out of line.
    #[inline(always)]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<()> {
        if self.sge_check == SgeCheck::Off {
            return self.post_send_off(wr);
        }
        if let Err(reason) = self.check_send(wr) {
            return Err(refused(0, reason));
        }
        let sq = match self.sq() {
            Ok(sq) => sq,
            Err(reason) => return Err(refused(0, reason)),
        };
        match sq.post_send(wr) {
            Ok(()) => Ok(()),
            Err(e) => Err(refused(0, WrError::DataPath(e))),
        }
    }

    /// [`post_send`](Self::post_send) of a QP without key checks
    /// ([`SgeCheck::Off`]): the state and the reserved lkey, then the post;
    /// out of line, so that it costs the checked path nothing.
    #[cold]
    #[inline(never)]
    fn post_send_off(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.send_state()
            .and_then(|()| check_send_sges(&self.pd, &mut self.cache, SgeCheck::Off, wr))
            .and_then(|()| self.sq()?.post_send(wr).map_err(WrError::DataPath))
            .map_err(|reason| refused(0, reason))
    }

    /// Posts a list of send work requests with one doorbell. On a
    /// rejected request the ones before it are posted (and rung) and the
    /// error names its index.
    pub fn post_send_list(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut b = self.batch()?;
        for wr in wrs {
            b.post_send(wr)?;
        }
        b.ring();
        Ok(())
    }

    /// Starts a batch of send work requests rung with one doorbell when the
    /// batch is rung or dropped (the `ibv_wr_start` / `ibv_wr_complete`
    /// pattern).
    #[inline(always)]
    pub fn batch(&mut self) -> Result<SendBatch<'_, P, S>> {
        self.send_state()
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        let check = self.sge_check;
        let Qp { dp, cache, pd, .. } = self;
        let pd: &Pd<P, S> = pd;
        let sq = data_path(dp)
            .and_then(|d| d.sq().map_err(WrError::DataPath))
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        Ok(SendBatch {
            b: sq.batch(),
            pd,
            cache: *cache,
            qp_cache: cache,
            check,
        })
    }

    /// Posts an RDMA WRITE of one SGE (verbs-core's one-SGE fast path).
    #[inline]
    pub fn post_rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: Rkey,
        sge: Sge,
    ) -> Result<()> {
        let rkey = rkey.0;
        self.post_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)
    }

    /// Posts an RDMA READ into one SGE (the one-SGE fast path).
    #[inline]
    pub fn post_rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: Rkey,
        sge: Sge,
    ) -> Result<()> {
        let rkey = rkey.0;
        self.post_sge(wr_id, SendOp::RdmaRead { remote_addr, rkey }, flags, sge)
    }

    /// Posts a SEND of one SGE (the one-SGE fast path; not for UD, which
    /// needs a destination: use [`post_send`](Self::post_send)).
    #[inline]
    pub fn post_send_sge(&mut self, wr_id: u64, flags: SendFlags, sge: Sge) -> Result<()> {
        self.post_sge(wr_id, SendOp::Send, flags, sge)
    }

    /// Posts one receive work request (`ibv_post_recv`).
    ///
    /// Inline: the state, a receive queue, and each SGE in the region the
    /// QP's last key check found, then verbs-core's single post; anything else
    /// (a key not cached, [`SgeCheck::Off`], a refusal) is
    /// [`post_recv_list`](Self::post_recv_list) of the one request, which
    /// checks it fully and gives the same errors.
    #[inline(always)]
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        // (A QP on an SRQ has no receive queue: `rq()` sends it to the
        // list path, which names the SRQ.)
        if self.state.can_post_recv() {
            let generation = self.pd.generation();
            let cache = &self.cache;
            #[cfg(not(feature = "cache-maintenance"))]
            if wr
                .sgl
                .iter()
                .all(|s| s.length == 0 || cache.hit(generation, *s, AccessFlags::LOCAL_WRITE))
                && let Some(rq) = self.dp.as_mut().and_then(|d| d.rq().ok())
            {
                return match rq.post_recv(wr) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(rejected_cold(e)),
                };
            }
            // Without coherent DMA: the WQE, then the record, cleaned.
            #[cfg(feature = "cache-maintenance")]
            if wr
                .sgl
                .iter()
                .all(|s| s.length == 0 || cache.hit(generation, *s, AccessFlags::LOCAL_WRITE))
                && let Some((rq, mmio)) = self.dp.as_mut().and_then(|d| d.rq_synced().ok())
            {
                return match rq.post_recv_synced(wr, mmio) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(rejected_cold(e)),
                };
            }
        }
        self.post_recv_list(core::slice::from_ref(wr))
    }

    /// Posts receive work requests with one doorbell-record update; on a
    /// rejected request the ones before it are posted.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if !self.state.can_post_recv() {
            return Err(Error::InvalidWorkRequest {
                index: 0,
                reason: WrError::WrongState {
                    queue: "receive queue",
                    state: self.state,
                },
            });
        }
        if self.srq.is_some() {
            return Err(rejected(
                0,
                verbs_core::Error::NoSuchQueue("receive queue (it receives through an SRQ)"),
            ));
        }
        let (n, refused) = check_recv_list(&self.pd, &mut self.cache, self.sge_check, wrs);
        #[cfg(not(feature = "cache-maintenance"))]
        let rq = self
            .dp()
            .and_then(|d| d.rq().map_err(WrError::DataPath))
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        #[cfg(feature = "cache-maintenance")]
        let rq = self
            .dp()
            .and_then(|d| d.rq_synced().map_err(WrError::DataPath))
            .map_err(|reason| Error::InvalidWorkRequest { index: 0, reason })?;
        if n > 0 {
            #[cfg(not(feature = "cache-maintenance"))]
            let posted = rq.post_recv_list(&wrs[..n]);
            #[cfg(feature = "cache-maintenance")]
            let (rq, mmio) = rq;
            #[cfg(feature = "cache-maintenance")]
            let posted = rq.post_recv_list_synced(&wrs[..n], mmio);
            posted.map_err(|e| rejected(e.posted, e.error))?;
        }
        refused
    }

    /// Work requests posted and not yet completed: (send, receive). The
    /// receive count is 0 for a QP on an SRQ (see
    /// [`Srq::outstanding`]). An unsignaled request counts until a later
    /// completion retires it.
    pub fn outstanding(&mut self) -> (u32, u32) {
        match self.dp.as_mut() {
            Some(d) => {
                let (sq, rq) = d.queues();
                (
                    sq.map_or(0, |q| q.outstanding()),
                    rq.map_or(0, |q| q.outstanding()),
                )
            }
            None => (0, 0),
        }
    }
}

/// Send work requests written and not yet rung; see [`Qp::batch`]. Each
/// request is checked like [`Qp::post_send`]; a rejected one writes
/// nothing and the batch stays usable. Rung once, at
/// [`ring`](Self::ring) or when dropped.
pub struct SendBatch<'q, P: Platform + 'static, S: Share = DefaultShare> {
    b: verbs_core::SendBatch<'q, P::Mmio>,
    pd: &'q Pd<P, S>,
    /// The QP's key cache, copied in so the checks of the batch's requests
    /// read it from the batch (a local of the caller), not through a
    /// pointer into the QP; written back at [`ring`](Self::ring).
    cache: KeyCache,
    qp_cache: &'q mut KeyCache,
    check: SgeCheck,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for SendBatch<'_, P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendBatch({} pushed)", self.b.len())
    }
}

impl<'q, P: Platform + 'static, S: Share> SendBatch<'q, P, S> {
    fn fail(&self, reason: WrError) -> Error {
        Error::InvalidWorkRequest {
            index: self.b.len(),
            reason,
        }
    }

    /// Checks and writes one work request (as [`Qp::post_send`]).
    #[inline]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<()> {
        check_send_sges(self.pd, &mut self.cache, self.check, wr).map_err(|r| self.fail(r))?;
        self.b
            .post_send(wr)
            .map_err(|e| self.fail(WrError::DataPath(e)))?;
        Ok(())
    }

    /// Checks and writes a work request of one SGE through verbs-core's
    /// one-SGE fast path (errors built out of line).
    ///
    /// A cache miss goes out of line with the cache by value (it comes
    /// back updated): no call takes the address of a field of the batch,
    /// so its fields and verbs-core's cursor can stay in registers.
    #[inline(always)]
    fn push_sge(&mut self, wr_id: u64, op: SendOp, flags: SendFlags, sge: Sge) -> Result<()> {
        let needs = local_needs(&op);
        if !self.cache.hit(self.pd.generation(), sge, needs) {
            let (checked, cache) =
                check_single_by_value(self.pd, self.cache, self.check, sge, needs);
            self.cache = cache;
            if let Err(reason) = checked {
                return Err(refused(self.b.len(), reason));
            }
        }
        if let Err(e) = self.b.post_send_sge(wr_id, op, flags, sge) {
            return Err(refused(self.b.len(), WrError::DataPath(e.into())));
        }
        Ok(())
    }

    /// Checks and writes an RDMA WRITE of one SGE.
    #[inline]
    pub fn post_rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: Rkey,
        sge: Sge,
    ) -> Result<()> {
        let rkey = rkey.0;
        self.push_sge(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, flags, sge)
    }

    /// Checks and writes an RDMA READ into one SGE.
    #[inline]
    pub fn post_rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote_addr: u64,
        rkey: Rkey,
        sge: Sge,
    ) -> Result<()> {
        let rkey = rkey.0;
        self.push_sge(wr_id, SendOp::RdmaRead { remote_addr, rkey }, flags, sge)
    }

    /// Checks and writes a SEND of one SGE (as [`Qp::post_send_sge`]).
    #[inline]
    pub fn post_send_sge(&mut self, wr_id: u64, flags: SendFlags, sge: Sge) -> Result<()> {
        self.push_sge(wr_id, SendOp::Send, flags, sge)
    }

    /// Work requests in the batch.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    /// Rings the doorbell once for everything pushed (and keeps the key
    /// the batch's checks found for the QP's next posts; a batch dropped
    /// without `ring` rings too, but the QP's cache stays as it was).
    pub fn ring(self) {
        *self.qp_cache = self.cache;
        self.b.ring();
    }
}

/// `check_single_sge` past the cache hit, on a copy of the cache: the
/// result and the cache as the check left it (the batch's path, which
/// takes no address of its own state).
#[cold]
#[inline(never)]
fn check_single_by_value<P: Platform + 'static, S: Share>(
    pd: &Pd<P, S>,
    mut cache: KeyCache,
    check: SgeCheck,
    sge: Sge,
    needs: AccessFlags,
) -> (core::result::Result<(), WrError>, KeyCache) {
    let r = check_single_sge(pd, &mut cache, check, sge, needs);
    (r, cache)
}

/// [`Error::InvalidWorkRequest`] of the request at `index`, built out of
/// the posting paths.
#[cold]
#[inline(never)]
fn refused(index: usize, reason: WrError) -> Error {
    Error::InvalidWorkRequest { index, reason }
}

/// [`rejected`] of the first request, built out of the posting paths.
#[cold]
#[inline(never)]
fn rejected_cold(e: verbs_core::Error) -> Error {
    rejected(0, e)
}

/// The error of a one-SGE post verbs-core refused, built out of line.
#[cold]
#[inline(never)]
fn sge_refused(e: verbs_core::SendError) -> Error {
    refused(0, WrError::DataPath(e.into()))
}

/// A one-SGE operation of [`Qp::post_sge`] and its flags as two words
/// (`remote_addr`, and `rkey | kind << 32 | flags << 40` with kind 0 SEND,
/// 1 RDMA WRITE, 2 RDMA READ); `None` for any other operation.
#[inline(always)]
fn pack_sge_op(op: &SendOp, flags: SendFlags) -> Option<[u64; 2]> {
    let (kind, remote_addr, rkey) = match *op {
        SendOp::Send => (0u64, 0, 0),
        SendOp::RdmaWrite { remote_addr, rkey } => (1, remote_addr, rkey),
        SendOp::RdmaRead { remote_addr, rkey } => (2, remote_addr, rkey),
        _ => return None,
    };
    Some([
        remote_addr,
        u64::from(rkey) | kind << 32 | u64::from(flags.0) << 40,
    ])
}

/// The operation and flags [`pack_sge_op`] packed.
fn unpack_sge_op(w0: u64, w1: u64) -> (SendOp, SendFlags) {
    let (remote_addr, rkey) = (w0, w1 as u32);
    let op = match (w1 >> 32) as u8 {
        1 => SendOp::RdmaWrite { remote_addr, rkey },
        2 => SendOp::RdmaRead { remote_addr, rkey },
        _ => SendOp::Send,
    };
    (op, SendFlags((w1 >> 40) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sge_operations_round_trip_through_their_packed_words() {
        let flags = [SendFlags(0), SendFlags(0xff), SendFlags::SIGNALED];
        let ops = [
            SendOp::Send,
            SendOp::RdmaWrite {
                remote_addr: 0x0123_4567_89ab_cdef,
                rkey: 0xfedc_ba98,
            },
            SendOp::RdmaRead {
                remote_addr: u64::MAX,
                rkey: u32::MAX,
            },
        ];
        for op in ops {
            for f in flags {
                let [w0, w1] = pack_sge_op(&op, f).expect("packed");
                assert_eq!(unpack_sge_op(w0, w1), (op, f));
            }
        }
        assert_eq!(pack_sge_op(&SendOp::SendWithImm(1), SendFlags(0)), None);
    }
}
