//! What `capture` and `perf raw-bw` share: a raw packet QP
//! (`IBV_QPT_RAW_PACKET`) with its receive buffers and the repost loop,
//! the NIC RX flow rule that steers frames into it, and the device's own
//! drop counters where it has them.
//!
//! The QP is the verbs API's ([`QpType::RawPacket`]: transport domain,
//! TIS + SQ, RQ + direct TIR under the hood), on one port, with `n`
//! receive buffers of `slot` bytes each (one registered region; buffer
//! `i` at `i * slot`, its work request id `i`) and, for a sender, send
//! slots after them.

use std::sync::Arc;

use hca_driver::flow::{FlowDest, TirDest};
use hca_driver::fw::{Object, QCounterObj};
use hca_driver::steering::FlowMatch;
use hca_driver::verbs::{
    AccessFlags, Context, Cq, DmaBuf, Mr, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, WorkCompletion,
};
use hca_driver::{Error, Hca, LinkLayer, PortState, Tirn};
use platform::Platform;

use crate::error::{Result, ToolError};

/// The shape of a raw packet QP.
#[derive(Clone, Copy, Debug)]
pub struct RawSpec {
    /// The port (1-based).
    pub port: u8,
    /// Receive buffers (0: a send-only QP).
    pub rx: u32,
    /// Send work requests (0: a receive-only QP).
    pub tx: u32,
    /// Bytes of each buffer (receive and send).
    pub slot: usize,
}

/// The port's MAC address, after checking that it is an Ethernet port
/// that is up. `down_hint` is appended when it is not up.
pub fn ethernet_port<P: Platform + 'static>(
    ctx: &Context<P>,
    who: &str,
    port: u8,
    down_hint: &str,
) -> Result<[u8; 6]> {
    let attr = ctx
        .query_port(port)
        .map_err(|e| ToolError::driver(format!("{who}: querying port {port}"), e))?;
    let dev = ctx.hca().platform().describe();
    if attr.link_layer != LinkLayer::Ethernet {
        return Err(ToolError::Usage(format!(
            "{who}: port {port} of {dev} is an InfiniBand port: raw packet QPs need an Ethernet port"
        )));
    }
    if attr.state != PortState::Active {
        return Err(ToolError::Usage(format!(
            "{who}: port {port} of {dev} is {}, not PORT_ACTIVE{down_hint}",
            attr.state
        )));
    }
    Ok(attr.mac.unwrap_or_default())
}

/// A raw packet QP with its CQ, buffers and memory region.
pub struct RawQp<P: Platform + 'static> {
    /// The verbs context.
    pub ctx: Arc<Context<P>>,
    /// The CQ of sends and receives.
    pub cq: Arc<Cq<P>>,
    /// The buffers: `rx` receive slots, then `tx` send slots.
    pub buf: Arc<DmaBuf<P>>,
    /// Their memory region.
    pub mr: Mr<P>,
    /// The QP (RTS when it sends, RTR when it only receives).
    pub qp: Qp<P>,
    /// The Q counter set its receive queue counts into
    /// ([`open_counted`](Self::open_counted)); dropped after the QP.
    q_counter: Option<Object<Arc<Hca<P>>, QCounterObj>>,
    /// Its shape.
    pub spec: RawSpec,
    _pd: Arc<Pd<P>>,
}

impl<P: Platform + 'static> RawQp<P> {
    /// Creates the QP on `hca` (a port check first, `down_hint` for a port
    /// that is down), moves it to RTR (RTS with a send queue) and posts
    /// every receive buffer. Returns it with the port's MAC.
    pub fn open(
        hca: &Arc<Hca<P>>,
        who: &str,
        spec: RawSpec,
        down_hint: &str,
    ) -> Result<(Self, [u8; 6])> {
        Self::open_with(hca, who, spec, down_hint, false)
    }

    /// [`open`](Self::open) with a Q counter set of its own for the
    /// receive queue (ALLOC_Q_COUNTER, `rqc.counter_set_id`), so that
    /// [`rx_drops`](Self::rx_drops) reads the device's out-of-buffer drops;
    /// without one on a device that has no Q counters (`max_qp_cnt` 0).
    pub fn open_counted(
        hca: &Arc<Hca<P>>,
        who: &str,
        spec: RawSpec,
        down_hint: &str,
    ) -> Result<(Self, [u8; 6])> {
        Self::open_with(hca, who, spec, down_hint, spec.rx > 0)
    }

    fn open_with(
        hca: &Arc<Hca<P>>,
        who: &str,
        spec: RawSpec,
        down_hint: &str,
        counted: bool,
    ) -> Result<(Self, [u8; 6])> {
        let what = |w: &str| format!("{who}: {w}");
        let ctx = Arc::new(
            Context::open(hca)
                .map_err(|e| ToolError::driver(what("opening a verbs context"), e))?,
        );
        let mac = ethernet_port(&ctx, who, spec.port, down_hint)?;
        let dev = *ctx.query_device();
        for (opt, v) in [("receive buffers", spec.rx), ("send depth", spec.tx)] {
            if v > dev.max_qp_wr {
                return Err(ToolError::Usage(format!(
                    "{who}: {v} {opt}: the device allows at most {} work requests per queue",
                    dev.max_qp_wr
                )));
            }
        }
        let pd =
            Arc::new(Pd::alloc(&ctx).map_err(|e| ToolError::driver(what("allocating a PD"), e))?);
        let cqe = (spec.rx + spec.tx).clamp(1, dev.max_cqe);
        let cq = Arc::new(
            Cq::create(&ctx, cqe)
                .map_err(|e| ToolError::driver(what(&format!("creating a CQ of {cqe}")), e))?,
        );
        let len = (spec.rx as usize + spec.tx as usize) * spec.slot;
        let buf = Arc::new(DmaBuf::alloc(hca, len.max(1)).map_err(|e| {
            ToolError::driver(what(&format!("allocating {len} bytes of DMA memory")), e)
        })?);
        let mr = Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE)
            .map_err(|e| ToolError::driver(what("registering the buffers"), e))?;
        let cap = QpCap {
            max_send_wr: spec.tx,
            max_recv_wr: spec.rx,
            max_send_sge: u32::from(spec.tx > 0),
            max_recv_sge: u32::from(spec.rx > 0),
            max_inline_data: 0,
        };
        let q_counter = match counted.then(|| hca.alloc_q_counter_on(hca.clone())) {
            None | Some(Err(Error::Unsupported(_))) => None,
            Some(Ok(q)) => Some(q),
            Some(Err(e)) => {
                return Err(ToolError::driver(
                    what("allocating a Q counter (ALLOC_Q_COUNTER)"),
                    e,
                ));
            }
        };
        let mut attr = QpInitAttr::new(QpType::RawPacket, &cq, &cq).cap(cap);
        if let Some(q) = &q_counter {
            attr = attr.counter_set(q.number());
        }
        let mut qp = Qp::create(&pd, &attr).map_err(|e| {
            ToolError::driver(
                what(&format!(
                    "creating a raw packet QP ({} send / {} receive work requests)",
                    spec.tx, spec.rx
                )),
                e,
            )
        })?;
        let moved = (|| {
            qp.modify(&QpAttr::new().state(QpState::Init).port(spec.port))?;
            qp.modify(&QpAttr::new().state(QpState::Rtr))?;
            if spec.tx > 0 {
                qp.modify(&QpAttr::new().state(QpState::Rts))?;
            }
            Ok(())
        })();
        let mut this = RawQp {
            ctx,
            cq,
            buf,
            mr,
            qp,
            q_counter,
            spec,
            _pd: pd,
        };
        if let Err(e) = moved {
            return Err(this.close_after(ToolError::driver(
                what("moving the raw packet QP to RTR/RTS"),
                e,
            )));
        }
        for i in 0..spec.rx {
            if let Err(e) = this.repost(u64::from(i)) {
                return Err(this.close_after(e));
            }
        }
        Ok((this, mac))
    }

    /// Destroys the QP after `e` (a teardown failure is logged).
    fn close_after(self, e: ToolError) -> ToolError {
        if let Err(t) = self.qp.destroy() {
            log::error!("destroying the raw packet QP: {t}");
        }
        e
    }

    /// Posts receive buffer `wr_id` (again).
    pub fn repost(&mut self, wr_id: u64) -> Result<()> {
        let slot = self.spec.slot;
        let off = usize::try_from(wr_id).unwrap_or(usize::MAX);
        if off >= self.spec.rx as usize {
            return Err(ToolError::Usage(format!(
                "a receive completion names buffer {wr_id}, which does not exist"
            )));
        }
        let sge = self
            .mr
            .sge(off * slot, slot as u32)
            .map_err(|e| ToolError::driver("building a receive scatter entry", e))?;
        self.qp
            .post_recv(&RecvWr { wr_id, sgl: &[sge] })
            .map_err(|e| ToolError::driver(format!("posting receive buffer {wr_id}"), e))
    }

    /// Copies the `len` bytes received into buffer `wr_id` into `out`
    /// (a length larger than a buffer is refused: the device is not
    /// trusted).
    pub fn read_frame(&self, wr: &WorkCompletion, out: &mut Vec<u8>) -> Result<()> {
        let slot = self.spec.slot;
        let len = wr.byte_len as usize;
        if wr.wr_id >= u64::from(self.spec.rx) || len > slot {
            return Err(ToolError::Usage(format!(
                "a receive completion names {len} bytes in buffer {} (there are {} buffers of {slot} bytes)",
                wr.wr_id, self.spec.rx
            )));
        }
        out.resize(len, 0);
        self.buf
            .read(wr.wr_id as usize * slot, out)
            .map_err(|e| ToolError::driver("reading a received frame", e))
    }

    /// Frames the device dropped because no receive buffer was posted
    /// (its Q counter's `out_of_buffer`), since the QP was opened; `None`
    /// without a Q counter.
    pub fn rx_drops(&self) -> Result<Option<u32>> {
        self.q_counter
            .as_ref()
            .map(|q| q.query(false).map(|v| v.out_of_buffer))
            .transpose()
            .map_err(|e| ToolError::driver("reading the Q counter (QUERY_Q_COUNTER)", e))
    }

    /// The TIR of the QP's receive queue.
    pub fn tir(&self) -> Result<Tirn> {
        self.qp
            .tir()
            .ok_or_else(|| ToolError::Usage("the raw packet QP has no receive queue".into()))
    }

    /// Destroys the QP (the CQ, region, PD and context follow when the
    /// last handle goes).
    pub fn close(self) -> Result<()> {
        self.qp
            .destroy()
            .map_err(|e| ToolError::driver("destroying the raw packet QP", e))
    }
}

/// A TIR named by number (the raw QP's, which the receive loop keeps
/// using mutably while the rule delivers to it).
struct TirOf(Tirn);

impl TirDest for TirOf {
    fn tir_number(&self) -> Option<Tirn> {
        Some(self.0)
    }
}

/// Steers the frames `m` matches into `dest` while `f` runs: a NIC RX
/// flow table at level 0 (made the root), one flow group with `m`'s match
/// criteria and one flow table entry forwarding to `dest`'s TIR. An
/// empty `m` is a catch-all (`match_criteria_enable` 0): every frame the
/// NIC RX path sees. The rule, group and table are deleted in that order
/// after `f` (a failure there is reported when `f` succeeded).
pub fn with_steering<P: Platform, R>(
    hca: &Hca<P>,
    m: &FlowMatch,
    dest: Tirn,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let dest = TirOf(dest);
    let table = hca
        .create_flow_table(0, 1, None)
        .map_err(|e| ToolError::driver("creating a NIC RX flow table (CREATE_FLOW_TABLE)", e))?;
    let group = table
        .create_group(0, 0, m)
        .map_err(|e| ToolError::driver("creating a flow group (CREATE_FLOW_GROUP)", e))?;
    let dests: [&dyn TirDest; 1] = [&dest];
    let rule = group
        .add_rule(0, m, FlowDest::Receivers(&dests))
        .map_err(|e| ToolError::driver("adding the flow rule (SET_FLOW_TABLE_ENTRY)", e))?;
    table
        .set_root()
        .map_err(|e| ToolError::driver("making the flow table the NIC RX root", e))?;
    let r = f();
    let removed = rule
        .destroy()
        .and_then(|()| group.destroy())
        .and_then(|()| table.destroy())
        .map_err(|e| ToolError::driver("removing the flow rule, group and table", e));
    let v = r?;
    removed?;
    Ok(v)
}
