//! Helpers of the data-path scenarios: what a QP exposes to its peer, the
//! RESET -> INIT -> RTR -> RTS sequence over RoCE or InfiniBand, posting
//! a receive, and polling with a timeout.

use std::time::Duration;

use hca_driver::verbs::{
    AccessFlags, AhAttr, Context, Cq, DEFAULT_GID_INDEX, Gid, Qp, QpAttr, QpCap, QpState, RecvWr,
    Sge, WcStatus, WorkCompletion,
};
use hca_driver::{IbMtu, LinkLayer, Rkey};
use platform::Platform;

/// How long a scenario waits for a completion or an event (device time:
/// virtual on the emulator).
pub const WAIT: Duration = Duration::from_secs(10);

/// QP capabilities: `send` and `recv` work requests, `sge` SGEs each way,
/// `inline` bytes of inline data.
pub fn qp_cap(send: u32, recv: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// What one side tells the other about a QP (what the RC example of the
/// "RDMA Aware Networks Programming User Manual" exchanges over its
/// socket: buffer address, rkey, QP number, LID, GID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Port of the QP.
    pub port: u8,
    /// LID of the port (InfiniBand).
    pub lid: u16,
    /// GID [`DEFAULT_GID_INDEX`] of the port (RoCE).
    pub gid: Gid,
    /// QP number.
    pub qpn: u32,
    /// Address of the buffer the peer may access.
    pub addr: u64,
    /// Its rkey.
    pub rkey: Rkey,
}

impl Endpoint {
    /// The endpoint of QP `qpn` on `port` of `ctx`'s HCA.
    #[track_caller]
    pub fn of<P: Platform + 'static>(
        ctx: &Context<P>,
        port: u8,
        qpn: u32,
        addr: u64,
        rkey: Rkey,
    ) -> Self {
        let attr = ctx.query_port(port).expect("query_port");
        let gid = if attr.link_layer == LinkLayer::Ethernet {
            ctx.query_gid(port, u16::from(DEFAULT_GID_INDEX))
                .expect("query_gid")
        } else {
            Gid::default()
        };
        Self {
            port,
            lid: attr.lid,
            gid,
            qpn,
            addr,
            rkey,
        }
    }
}

/// The connection parameters of the RC example (`modify_qp_to_rtr`,
/// `modify_qp_to_rts`), changeable per scenario.
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    /// Remote access of the QP.
    pub access: AccessFlags,
    /// Path MTU.
    pub mtu: IbMtu,
    /// First receive PSN.
    pub rq_psn: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// Incoming RDMA READ / atomic depth.
    pub max_dest_rd_atomic: u8,
    /// Outgoing RDMA READ / atomic depth.
    pub max_rd_atomic: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// ACK timeout code.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Hop limit of the GRH.
    pub hop_limit: u8,
}

impl Default for RcParams {
    /// The RC example's values: local write, remote read and write; MTU
    /// 256; PSNs 0; one outstanding READ each way; RNR timer 0x12; ACK
    /// timeout 0x12; 6 retries, no RNR retry; hop limit 1.
    fn default() -> Self {
        Self {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            mtu: IbMtu::Mtu256,
            rq_psn: 0,
            sq_psn: 0,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 0x12,
            timeout: 0x12,
            retry_cnt: 6,
            rnr_retry: 0,
            hop_limit: 1,
        }
    }
}

/// The path from a local port to a remote endpoint: by GID on Ethernet,
/// by LID on InfiniBand.
#[track_caller]
pub fn path_to<P: Platform + 'static>(
    ctx: &Context<P>,
    port: u8,
    remote: &Endpoint,
    hop_limit: u8,
) -> AhAttr {
    if ctx.query_port(port).expect("query_port").link_layer == LinkLayer::Ethernet {
        let mut a = AhAttr::roce(port, remote.gid, DEFAULT_GID_INDEX);
        if let Some(g) = a.grh.as_mut() {
            g.hop_limit = hop_limit;
        }
        a
    } else {
        AhAttr::ib(port, remote.lid)
    }
}

/// RESET -> INIT of a connected QP (`modify_qp_to_init`).
#[track_caller]
pub fn to_init<P: Platform + 'static>(qp: &mut Qp<P>, port: u8, access: AccessFlags) {
    qp.modify(
        &QpAttr::new()
            .state(QpState::Init)
            .port(port)
            .pkey_index(0)
            .access(access),
    )
    .expect("RESET -> INIT");
}

/// INIT -> RTR of a connected QP (`modify_qp_to_rtr`).
#[track_caller]
pub fn to_rtr<P: Platform + 'static>(qp: &mut Qp<P>, path: AhAttr, remote_qpn: u32, p: &RcParams) {
    let mut a = QpAttr::new()
        .state(QpState::Rtr)
        .path_mtu(p.mtu)
        .dest_qp_num(remote_qpn)
        .rq_psn(p.rq_psn)
        .ah(path);
    if qp.qp_type() == hca_driver::verbs::QpType::Rc {
        a = a
            .max_dest_rd_atomic(p.max_dest_rd_atomic)
            .min_rnr_timer(p.min_rnr_timer);
    }
    qp.modify(&a).expect("INIT -> RTR");
}

/// RTR -> RTS of a connected QP (`modify_qp_to_rts`).
#[track_caller]
pub fn to_rts<P: Platform + 'static>(qp: &mut Qp<P>, p: &RcParams) {
    let mut a = QpAttr::new().state(QpState::Rts).sq_psn(p.sq_psn);
    if qp.qp_type() == hca_driver::verbs::QpType::Rc {
        a = a
            .timeout(p.timeout)
            .retry_cnt(p.retry_cnt)
            .rnr_retry(p.rnr_retry)
            .max_rd_atomic(p.max_rd_atomic);
    }
    qp.modify(&a).expect("RTR -> RTS");
}

/// RESET -> INIT -> RTR -> RTS of an RC or UC QP towards `remote`.
#[track_caller]
pub fn connect<P: Platform + 'static>(
    ctx: &Context<P>,
    qp: &mut Qp<P>,
    port: u8,
    remote: &Endpoint,
    p: &RcParams,
) {
    to_init(qp, port, p.access);
    to_rtr(qp, path_to(ctx, port, remote, p.hop_limit), remote.qpn, p);
    to_rts(qp, p);
    assert_eq!(qp.state(), QpState::Rts);
}

/// Connects two RC (or UC) QPs to each other with `p`: `a` (context, port,
/// QP) towards `b` and `b` towards `a`. The third argument is the buffer
/// address and rkey of side B's endpoint (`(0, Rkey(0))` when unused); side A's
/// endpoint has none. Returns the two endpoints.
#[track_caller]
pub fn connect_pair<P: Platform + 'static>(
    (ca, pa, qa): (&Context<P>, u8, &mut Qp<P>),
    (cb, pb, qb): (&Context<P>, u8, &mut Qp<P>),
    (addr, rkey): (u64, Rkey),
    p: &RcParams,
) -> (Endpoint, Endpoint) {
    let ea = Endpoint::of(ca, pa, qa.number().0, 0, Rkey(0));
    let eb = Endpoint::of(cb, pb, qb.number().0, addr, rkey);
    connect(ca, qa, pa, &eb, p);
    connect(cb, qb, pb, &ea, p);
    (ea, eb)
}

/// RESET -> INIT -> RTR -> RTS of a UD QP on `port` with Q_Key `qkey`.
#[track_caller]
pub fn ud_ready<P: Platform + 'static>(qp: &mut Qp<P>, port: u8, qkey: u32) {
    qp.modify(
        &QpAttr::new()
            .state(QpState::Init)
            .port(port)
            .pkey_index(0)
            .qkey(qkey),
    )
    .expect("UD RESET -> INIT");
    qp.modify(&QpAttr::new().state(QpState::Rtr))
        .expect("UD INIT -> RTR");
    qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0))
        .expect("UD RTR -> RTS");
}

/// Posts one receive work request of one SGE (`ibv_post_recv`); panics
/// when it is refused.
#[track_caller]
pub fn post_recv_sge<P: Platform + 'static>(qp: &mut Qp<P>, wr_id: u64, sge: Sge) {
    if let Err(e) = qp.post_recv(&RecvWr { wr_id, sgl: &[sge] }) {
        panic!("{qp:?}: post_recv of {wr_id:#x}: {e}");
    }
}

/// Polls `cq` until `n` completions arrived; panics with what came after
/// [`WAIT`] of device time.
#[track_caller]
pub fn poll_n<P: Platform + 'static>(cq: &Cq<P>, n: usize) -> Vec<WorkCompletion> {
    let mut v = Vec::with_capacity(n);
    let mut wc = [WorkCompletion::default(); 16];
    while v.len() < n {
        let want = (n - v.len()).min(wc.len());
        match cq.poll_wait(&mut wc[..want], WAIT) {
            Ok(k) => v.extend_from_slice(&wc[..k]),
            Err(e) => panic!("{cq:?}: {} of {n} completions: {e}\n{v:#?}", v.len()),
        }
    }
    v
}

/// Polls one completion and checks it succeeded.
#[track_caller]
pub fn poll_ok<P: Platform + 'static>(cq: &Cq<P>) -> WorkCompletion {
    let wc = poll_n(cq, 1)[0];
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}: {}", wc.status);
    wc
}

/// Lets `d` of device time pass and checks no completion arrived.
#[track_caller]
pub fn assert_quiet<P: Platform + 'static>(cq: &Cq<P>, d: Duration) {
    cq.context().hca().platform().delay(d);
    let mut wc = [WorkCompletion::default(); 1];
    let n = cq.poll(&mut wc).expect("poll");
    assert_eq!(n, 0, "unexpected completion {:?}", wc[0]);
}
