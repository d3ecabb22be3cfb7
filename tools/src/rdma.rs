//! What `pingpong` and `perf` share: the resources of one side of a test
//! (verbs context, PD, CQ, a registered buffer, QPs), what a side tells
//! its peer about a QP, the RESET -> INIT -> RTR -> RTS sequence, and the
//! polling loop's pacing (relax, periodic service, stall detection).
//!
//! All timing here is real (monotonic) time: on the emulator the
//! platform's clock is virtual and runs ahead while the device idles, so
//! it measures nothing and cannot bound a wait for work another thread
//! has yet to post.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::verbs::{
    AccessFlags, AhAttr, Completion, Context, Cq, DmaBuf, Gid, Mr, Pd, Qp, QpAttr, QpCap,
    QpInitAttr, QpState, QpType, WcStatus,
};
use hca_driver::{Eqn, Hca, IbMtu, LinkLayer, PortState};
use platform::Platform;
use serde::{Deserialize, Serialize};

use crate::error::{Result, ToolError};

/// How long a test waits without any progress (no completion, no data)
/// before it gives up.
pub const STALL: Duration = Duration::from_secs(10);

/// The Q_Key of UD tests (libibverbs' examples and perftest use it).
pub const QKEY: u32 = 0x1111_1111;

/// What one side tells the other about a QP: the pingpong examples'
/// `LID:QPN:PSN:GID` plus perftest's rkey and buffer address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// LID of the port (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN of the QP's send queue.
    pub psn: u32,
    /// GID (RoCE, or InfiniBand with a GRH); all zero when none is used.
    /// In JSON (reports and the perf control protocol) in the colon form
    /// of `inet_ntop` (`fe80::7efe:90ff:fe58:7d01`, `::` when none), the
    /// one form every `--json` output uses.
    #[serde(with = "gid_colon")]
    pub gid: [u8; 16],
    /// rkey of the buffer the peer may access.
    pub rkey: u32,
    /// Bus address of that buffer (the region the peer targets).
    pub addr: u64,
}

mod gid_colon {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(g: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::gid_ipv6(g))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<std::net::Ipv6Addr>()
            .map(|a| a.octets())
            .map_err(|_| serde::de::Error::custom(format!("not a GID in colon form: {s:?}")))
    }
}

/// 32 hexadecimal digits as a GID.
pub fn parse_gid_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(g)
}

/// A GID as `inet_ntop(AF_INET6)` prints it (`fe80::7efe:90ff:fe58:7d01`,
/// `::` when zero), as the pingpong examples show it.
pub fn gid_ipv6(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

/// A random 24-bit PSN (the examples use `lrand48() & 0xffffff`).
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// A port as a test uses it.
#[derive(Clone, Copy, Debug)]
pub struct PortView {
    /// The port (1-based).
    pub port: u8,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active MTU.
    pub active_mtu: IbMtu,
    /// LID (InfiniBand).
    pub lid: u16,
    /// The local GID index in use (always one on Ethernet).
    pub gid_index: Option<u8>,
    /// That GID (zero when none).
    pub gid: Gid,
}

impl PortView {
    /// `Ethernet` or `IB`, as perftest names link types.
    pub fn link_name(&self) -> &'static str {
        match self.link_layer {
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::InfiniBand => "IB",
        }
    }
}

/// Checks that `port` is up and finds its LID, MTU and GID.
/// `gid_index`: the `-g` option; on Ethernet (RoCE needs a GID) it
/// defaults to 0, on InfiniBand to none. `down_hint` is appended to the
/// error when the port is not active.
pub fn port_view<P: Platform + 'static>(
    ctx: &Context<P>,
    who: &str,
    port: u8,
    gid_index: Option<u8>,
    down_hint: &str,
) -> Result<PortView> {
    let attr = ctx
        .query_port(port)
        .map_err(|e| ToolError::driver(format!("{who}: querying port {port}"), e))?;
    if attr.state != PortState::Active {
        return Err(ToolError::Usage(format!(
            "{who}: port {port} of {} is {}, not PORT_ACTIVE{down_hint}",
            ctx.hca().platform().describe(),
            attr.state
        )));
    }
    let active_mtu = attr
        .active_mtu
        .ok_or_else(|| ToolError::Usage(format!("{who}: port {port} reports no active MTU")))?;
    let gid_index = match (attr.link_layer, gid_index) {
        (LinkLayer::Ethernet, None) => Some(hca_driver::verbs::DEFAULT_GID_INDEX),
        (_, g) => g,
    };
    let gid = match gid_index {
        Some(i) => {
            let g = ctx.query_gid(port, u16::from(i)).map_err(|e| {
                ToolError::driver(format!("{who}: reading GID index {i} of port {port}"), e)
            })?;
            if g.is_zero() {
                return Err(ToolError::Usage(format!(
                    "{who}: GID index {i} of port {port} is empty (see `hca info -v` for the GIDs)"
                )));
            }
            g
        }
        None => Gid::default(),
    };
    Ok(PortView {
        port,
        link_layer: attr.link_layer,
        active_mtu,
        lid: attr.lid,
        gid_index,
        gid,
    })
}

/// Connection parameters of RC and UC QPs.
#[derive(Clone, Copy, Debug)]
pub struct ConnParams {
    /// Path MTU.
    pub mtu: IbMtu,
    /// RDMA READ / atomic depth, both directions (RC).
    pub rd_atomic: u8,
    /// Minimum RNR NAK timer code (RC).
    pub min_rnr_timer: u8,
    /// ACK timeout code (RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries, 7 = infinite (RC).
    pub rnr_retry: u8,
    /// Hop limit of the GRH.
    pub hop_limit: u8,
    /// Service level (RoCE: the Ethernet priority).
    pub sl: u8,
}

/// The path from a local port to a remote QP: by GID when the local side
/// uses one and the remote has one (always on Ethernet), else by LID.
pub fn path_to(local: &PortView, remote: &Endpoint, hop_limit: u8) -> AhAttr {
    match local.gid_index {
        Some(i) if remote.gid != [0; 16] => {
            let mut a = AhAttr::roce(local.port, Gid(remote.gid), i);
            a.dlid = remote.lid;
            if let Some(g) = a.grh.as_mut() {
                g.hop_limit = hop_limit;
            }
            a
        }
        _ => AhAttr::ib(local.port, remote.lid),
    }
}

/// RESET -> INIT of a QP: port, P_Key index 0, and the access flags (RC,
/// UC) or the Q_Key (UD).
pub fn to_init<P: Platform + 'static>(
    qp: &mut Qp<P>,
    port: u8,
    access: AccessFlags,
) -> hca_driver::Result<()> {
    let mut a = QpAttr::new().state(QpState::Init).port(port).pkey_index(0);
    a = if qp.qp_type() == QpType::Ud {
        a.qkey(QKEY)
    } else {
        a.access(access)
    };
    qp.modify(&a)
}

/// INIT -> RTR -> RTS of an RC or UC QP towards `remote`, or of a UD QP
/// (which needs no remote).
pub fn to_rts<P: Platform + 'static>(
    qp: &mut Qp<P>,
    local: &PortView,
    remote: &Endpoint,
    my_psn: u32,
    p: &ConnParams,
) -> hca_driver::Result<()> {
    match qp.qp_type() {
        QpType::Ud => {
            qp.modify(&QpAttr::new().state(QpState::Rtr))?;
            qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(my_psn))
        }
        t => {
            let mut a = QpAttr::new()
                .state(QpState::Rtr)
                .path_mtu(p.mtu)
                .dest_qp_num(remote.qpn)
                .rq_psn(remote.psn)
                .ah({
                    let mut a = path_to(local, remote, p.hop_limit);
                    a.sl = p.sl;
                    a
                });
            if t == QpType::Rc {
                a = a
                    .max_dest_rd_atomic(p.rd_atomic)
                    .min_rnr_timer(p.min_rnr_timer);
            }
            qp.modify(&a)?;
            let mut a = QpAttr::new().state(QpState::Rts).sq_psn(my_psn);
            if t == QpType::Rc {
                a = a
                    .timeout(p.timeout)
                    .retry_cnt(p.retry_cnt)
                    .rnr_retry(p.rnr_retry)
                    .max_rd_atomic(p.rd_atomic);
            }
            qp.modify(&a)
        }
    }
}

/// The shape of one side's resources.
#[derive(Clone, Copy, Debug)]
pub struct SideSpec {
    /// Transport of the QPs.
    pub qp_type: QpType,
    /// How many QPs.
    pub qps: usize,
    /// Capabilities of each QP.
    pub cap: QpCap,
    /// Entries of the (one, shared) CQ.
    pub cqe: u32,
    /// Bytes of the data buffer (one registered region).
    pub buf_len: usize,
    /// Access of the memory region.
    pub access: AccessFlags,
}

/// One side of a test: a verbs context on an HCA with a PD, one CQ for
/// sends and receives of all its QPs, a buffer registered as one memory
/// region, and the QPs (created in RESET).
///
/// It owns its objects (each holds its parents), so it can be kept and
/// moved like any value; [`Side::close`] destroys the QPs first and
/// reports a failure, dropping it destroys everything as well (a failure
/// then is logged).
pub struct Side<P: Platform + 'static> {
    /// `client` or `server`, for messages.
    pub name: &'static str,
    /// The verbs context.
    pub ctx: Arc<Context<P>>,
    /// The PD.
    pub pd: Arc<Pd<P>>,
    /// The CQ.
    pub cq: Arc<Cq<P>>,
    /// The data buffer.
    pub buf: Arc<DmaBuf<P>>,
    /// Its memory region.
    pub mr: Mr<P>,
    /// The QPs.
    pub qps: Vec<Qp<P>>,
}

/// Creates one side's resources on `hca` and runs `f` with them; they are
/// destroyed when `f` returns (children first).
pub fn with_side<P: Platform + 'static, R>(
    hca: &Arc<Hca<P>>,
    name: &'static str,
    spec: &SideSpec,
    f: impl FnOnce(&mut Side<P>) -> Result<R>,
) -> Result<R> {
    let mut side = Side::open(hca, name, spec)?;
    let r = f(&mut side);
    side.close(r)
}

impl<P: Platform + 'static> Side<P> {
    /// Creates one side's resources on `hca`: a context, a PD, one CQ, a
    /// registered buffer and the QPs of `spec` (in RESET).
    pub fn open(hca: &Arc<Hca<P>>, name: &'static str, spec: &SideSpec) -> Result<Self> {
        let what = |w: &str| format!("{name}: {w}");
        let ctx = Arc::new(
            Context::open(hca)
                .map_err(|e| ToolError::driver(what("opening a verbs context"), e))?,
        );
        let pd =
            Arc::new(Pd::alloc(&ctx).map_err(|e| ToolError::driver(what("allocating a PD"), e))?);
        let max_cqe = ctx.query_device().max_cqe;
        let cq = Arc::new(Cq::create(&ctx, spec.cqe.clamp(1, max_cqe)).map_err(|e| {
            ToolError::driver(what(&format!("creating a CQ of {} entries", spec.cqe)), e)
        })?);
        let buf = Arc::new(DmaBuf::alloc(hca, spec.buf_len).map_err(|e| {
            ToolError::driver(
                what(&format!("allocating {} bytes of DMA memory", spec.buf_len)),
                e,
            )
        })?);
        let mr = Mr::register(&pd, &buf, spec.access)
            .map_err(|e| ToolError::driver(what("registering the buffer"), e))?;
        let mut qps = Vec::with_capacity(spec.qps);
        for _ in 0..spec.qps {
            let init = QpInitAttr::new(spec.qp_type, &cq, &cq).cap(spec.cap);
            qps.push(Qp::create(&pd, &init).map_err(|e| {
                ToolError::driver(
                    what(&format!(
                        "creating a {} QP ({} send / {} receive work requests, {} inline bytes)",
                        hca_driver::verbs::qp_type_name(spec.qp_type),
                        spec.cap.max_send_wr,
                        spec.cap.max_recv_wr,
                        spec.cap.max_inline_data
                    )),
                    e,
                )
            })?);
        }
        Ok(Side {
            name,
            ctx,
            pd,
            cq,
            buf,
            mr,
            qps,
        })
    }

    /// Destroys the side, QPs first, and returns `r`, or the first
    /// failure of the teardown when `r` is `Ok`.
    pub fn close<R>(self, r: Result<R>) -> Result<R> {
        let name = self.name;
        let what = |w: &str| format!("{name}: {w}");
        // QPs first (explicitly, to report a failure); the region, buffer, CQ,
        // PD and context follow when they go out of scope (children before
        // parents; a failure there is logged).
        let Side { qps, .. } = self;
        let mut teardown = Ok(());
        for qp in qps {
            let n = qp.number();
            if let Err(e) = qp.destroy() {
                if teardown.is_ok() {
                    teardown = Err(ToolError::driver(
                        what(&format!("destroying QP {:#x}", n.0)),
                        e,
                    ));
                }
            }
        }
        match (r, teardown) {
            (Ok(v), Ok(())) => Ok(v),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), _) => Err(e),
        }
    }
}

/// A completion that did not succeed, as one line.
pub fn failed_completion(side: &str, what: &str, c: &Completion) -> ToolError {
    let status: WcStatus = c.status();
    ToolError::Usage(format!(
        "{side}: {what} (wr_id {:#x}, QP {:#x}) completed with {} ({}), vendor error {:#x}",
        c.wr_id(),
        c.qp_num(),
        status,
        status as u8,
        c.vendor_err()
    ))
}

/// Pacing of a polling loop: relaxes the device when a pass made no
/// progress, services the HCAs now and then (health, events, page
/// requests), and gives up after [`STALL`] without progress.
pub struct Pacer<'h, P: Platform> {
    hcas: Vec<&'h Hca<P>>,
    last_progress: Instant,
    last_service: Instant,
    idle: u32,
    stall: Duration,
    /// With [`sleep_on`](Self::sleep_on): the MSI-X vector idle passes
    /// sleep on, and its interrupt count read before the current pass.
    irq: Option<(u16, Option<u64>)>,
}

/// How often the loop services the HCAs.
const SERVICE_EVERY: Duration = Duration::from_millis(20);

impl<'h, P: Platform> Pacer<'h, P> {
    /// A pacer for a loop driving these HCAs (one, or the two sides').
    pub fn new(hcas: &[&'h Hca<P>]) -> Self {
        let now = Instant::now();
        Self {
            hcas: hcas.to_vec(),
            last_progress: now,
            last_service: now,
            idle: 0,
            stall: STALL,
            irq: None,
        }
    }

    /// Makes idle passes sleep on the MSI-X interrupt of completion EQ
    /// `eqn` instead of polling, when the loop drives one HCA and it runs
    /// on interrupts; for loops that wait for CQ events (the CQ is armed
    /// between passes), whose event then ends the sleep.
    pub fn sleep_on(&mut self, eqn: Eqn) {
        let Some(&h) = self.hcas.first() else { return };
        if self.hcas.iter().any(|o| !std::ptr::eq(*o, h)) {
            return;
        }
        if let Some(v) = h.eq_vector(eqn) {
            self.irq = Some((v, h.interrupt_seen(v)));
        }
    }

    /// Reads the interrupt count the next idle pass sleeps with (before the
    /// loop's next look at the CQ).
    fn snapshot(&mut self) {
        if let (Some((v, seen)), Some(h)) = (self.irq.as_mut(), self.hcas.first()) {
            *seen = h.interrupt_seen(*v);
        }
    }

    /// Records that the loop made progress.
    #[inline]
    pub fn progress(&mut self) -> Result<()> {
        self.idle = 0;
        self.last_progress = Instant::now();
        self.snapshot();
        self.service_now_and_then()
    }

    fn service_now_and_then(&mut self) -> Result<()> {
        if self.last_service.elapsed() >= SERVICE_EVERY {
            self.last_service = Instant::now();
            for h in &self.hcas {
                match h.service() {
                    Ok(_) | Err(hca_driver::Error::InvalidEqe { .. }) => {}
                    Err(e) => return Err(ToolError::driver("servicing the HCA", e)),
                }
            }
        }
        Ok(())
    }

    /// A pass made no progress: lets the device run, services the HCAs,
    /// and fails with `what()` after [`STALL`] without progress.
    pub fn idle(&mut self, what: impl FnOnce() -> String) -> Result<()> {
        self.idle = self.idle.wrapping_add(1);
        if let (Some((v, Some(seen))), Some(h)) = (self.irq, self.hcas.first()) {
            // Sleep until the event's interrupt (counted before this pass
            // looked at the CQ), or the next service.
            h.wait_interrupt(v, seen, SERVICE_EVERY)
                .map_err(|e| ToolError::driver("waiting for a completion interrupt", e))?;
            self.snapshot();
            self.service_now_and_then()?;
            if self.last_progress.elapsed() > self.stall {
                return Err(ToolError::Usage(format!(
                    "no progress for {} s: {}",
                    self.stall.as_secs(),
                    what()
                )));
            }
            return Ok(());
        }
        if self.idle % 64 == 0 {
            self.service_now_and_then()?;
            if self.last_progress.elapsed() > self.stall {
                return Err(ToolError::Usage(format!(
                    "no progress for {} s: {}",
                    self.stall.as_secs(),
                    what()
                )));
            }
        }
        if let Some(h) = self.hcas.first() {
            h.platform().relax();
        }
        Ok(())
    }
}

impl<P: Platform + 'static> fmt::Debug for Pacer<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pacer").field("idle", &self.idle).finish()
    }
}
