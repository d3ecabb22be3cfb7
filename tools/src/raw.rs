//! What `capture` and `perf raw-bw` share, on the driver's capture layer
//! ([`hca_driver::capture`]): a [`RawContext`] (verbs context, PD, a send
//! and a receive CQ, the raw packet QP: transport domain, TIS + SQ,
//! RQ + direct TIR under the hood) on one port, with [`RawSlots`] of its
//! own (`rx` receive slots, then `tx` send slots; slot `i` the buffer of
//! the work request whose id is `i`), the port check with the tool's
//! messages, and the NIC RX flow rule that steers frames into it
//! ([`with_steering`]).

use std::sync::Arc;

use hca_driver::capture::{RawContext, RawContextBuilder, RawSlots};
use hca_driver::steering::FlowMatch;
use hca_driver::verbs::{Context, QpState, WorkCompletion};
use hca_driver::{Hca, LinkLayer, PortState, Tirn};
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

/// A raw context with its slots.
pub struct RawQp<P: Platform + 'static> {
    /// The context: QP, send and receive CQs, PD, verbs context.
    pub raw: RawContext<P>,
    /// Its buffers: `rx` receive slots, then `tx` send slots.
    pub slots: RawSlots<P>,
    /// Its shape.
    pub spec: RawSpec,
}

impl<P: Platform + 'static> RawQp<P> {
    /// Opens the context on `hca` (the port checked first, `down_hint`
    /// for a port that is down), moves the QP to RTR (RTS with a send queue)
    /// and posts every receive slot. Returns it with the port's MAC.
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
        Self::open_with(
            hca,
            who,
            spec,
            down_hint,
            spec.rx > 0 && hca.has_q_counters(),
        )
    }

    fn open_with(
        hca: &Arc<Hca<P>>,
        who: &str,
        spec: RawSpec,
        down_hint: &str,
        counted: bool,
    ) -> Result<(Self, [u8; 6])> {
        let what = |w: &str| format!("{who}: {w}");
        // The port first: its messages say what is wrong with it.
        let ctx = Arc::new(
            Context::open(hca)
                .map_err(|e| ToolError::driver(what("opening a verbs context"), e))?,
        );
        let mac = ethernet_port(&ctx, who, spec.port, down_hint)?;
        let raw = RawContextBuilder::new(spec.port)
            .send_wr(spec.tx)
            .recv_wr(spec.rx)
            .q_counter(counted)
            .build_in(&ctx)
            .map_err(|e| {
                ToolError::driver(
                    what(&format!(
                        "opening a raw packet QP ({} send / {} receive work requests)",
                        spec.tx, spec.rx
                    )),
                    e,
                )
            })?;
        let slots = RawSlots::new(&raw, spec.rx + spec.tx, spec.slot).map_err(|e| {
            ToolError::driver(
                what(&format!(
                    "{} buffers of {} bytes",
                    spec.rx + spec.tx,
                    spec.slot
                )),
                e,
            )
        })?;
        let mut this = RawQp { raw, slots, spec };
        let up = if spec.tx > 0 {
            QpState::Rts
        } else {
            QpState::Rtr
        };
        this.raw
            .bring_up(up)
            .map_err(|e| ToolError::driver(what("moving the raw packet QP to RTR/RTS"), e))?;
        for i in 0..spec.rx {
            this.repost(u64::from(i))?;
        }
        Ok((this, mac))
    }

    /// Posts receive slot `wr_id` (again).
    pub fn repost(&mut self, wr_id: u64) -> Result<()> {
        if wr_id >= u64::from(self.spec.rx) {
            return Err(ToolError::Usage(format!(
                "a receive completion names buffer {wr_id}, which does not exist"
            )));
        }
        self.raw
            .post_recv_slot(&self.slots, wr_id)
            .map_err(|e| ToolError::driver(format!("posting receive buffer {wr_id}"), e))
    }

    /// Copies the frame received into slot `wr.wr_id` into `out` (a
    /// slot that is not a receive slot, or a length beyond a slot, is
    /// refused: the device is not trusted).
    pub fn read_frame(&self, wr: &WorkCompletion, out: &mut Vec<u8>) -> Result<()> {
        if wr.wr_id >= u64::from(self.spec.rx) {
            return Err(ToolError::Usage(format!(
                "a receive completion names buffer {}, which is not a receive buffer",
                wr.wr_id
            )));
        }
        self.slots.read_frame(wr, out).map_err(|e| {
            ToolError::driver(
                format!(
                    "reading a received frame ({} bytes in buffer {}; there are {} buffers of {} bytes)",
                    wr.byte_len, wr.wr_id, self.spec.rx, self.spec.slot
                ),
                e,
            )
        })
    }

    /// Frames the device dropped because no receive buffer was posted
    /// (its Q counter's `out_of_buffer`), since the QP was opened; `None`
    /// without a Q counter.
    pub fn rx_drops(&self) -> Result<Option<u32>> {
        self.raw
            .rx_drops()
            .map_err(|e| ToolError::driver("reading the Q counter (QUERY_Q_COUNTER)", e))
    }

    /// The TIR of the QP's receive queue.
    pub fn tir(&self) -> Result<Tirn> {
        self.raw
            .tir()
            .map_err(|e| ToolError::driver("the raw packet QP's TIR", e))
    }

    /// Destroys the QP (the CQs, slots, PD and context follow when their
    /// last handle goes).
    pub fn close(self) -> Result<()> {
        self.raw
            .close()
            .map_err(|e| ToolError::driver("destroying the raw packet QP", e))
    }
}

/// Runs `f` while the frames `m` matches are steered into `tir`
/// ([`hca_driver::capture::with_steering`]: a NIC RX flow table made the
/// root, one group, one rule; removed after `f`, a failure there reported
/// when `f` succeeded).
pub fn with_steering<P: Platform, R>(
    hca: &Hca<P>,
    m: &FlowMatch,
    tir: Tirn,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    hca_driver::capture::with_steering(hca, m, tir, f).map_err(|e| {
        ToolError::driver(
            "steering the frames into the raw packet QP (NIC RX flow table, group and rule)",
            e,
        )
    })?
}
