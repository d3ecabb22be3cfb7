//! What the flow steering and raw packet QP tests share: the addresses
//! their frames carry, the RSS key, frames with a marker byte, one flow
//! spec of each selector kind the rules of those tests match on, the
//! flow groups of one entry each for them, and the raw work queue objects
//! (RQ and SQ contexts, an RQ observed through its buffers) the steering
//! tests build below the verbs API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firmware_cmds::eth::{
    CreateRqIn, CreateSqIn, RX_HASH_FIELD_SELECT_DST_IP, RX_HASH_FIELD_SELECT_L4_DPORT,
    RX_HASH_FIELD_SELECT_L4_SPORT, RX_HASH_FIELD_SELECT_SRC_IP, Rqc, Sqc, WQ_STATE_RDY,
    WQ_STATE_RST, WQ_TYPE_CYCLIC, Wq,
};
use firmware_cmds::rss::{HashFields, MAX_HASH_INPUT, hash_input, toeplitz};
use hca_driver::flow::{
    FlowGroup, FlowTable, RX_HASH_DST_IPV4, RX_HASH_DST_PORT_UDP, RX_HASH_SRC_IPV4,
    RX_HASH_SRC_PORT_UDP, RxHashConf,
};
use hca_driver::fw::Rq;
use hca_driver::steering::{FlowMatch, FlowSpec, Masked};
use hca_driver::verbs::{
    AccessFlags, Cq, DmaBuf, Mr, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, SendFlags,
    SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use hca_driver::{Cqn, PageList, Pdn, RawHca, Rqn};
use hca_emu::frame::{Frame, L3, L4};
use platform::Platform;

/// The capacities of a raw packet QP with `send` and `recv` work
/// requests of one SGE each, no inline data.
pub fn raw_cap(send: u32, recv: u32) -> QpCap {
    QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// A raw packet QP's attributes: `cq` for both queues, [`raw_cap`].
pub fn raw_attr<P: Platform + 'static>(cq: &Arc<Cq<P>>, send: u32, recv: u32) -> QpInitAttr<P> {
    QpInitAttr::new(QpType::RawPacket, cq, cq).cap(raw_cap(send, recv))
}

/// RESET -> INIT (port 1) -> RTR -> RTS, as a raw packet QP goes.
pub fn raw_to_rts<P: Platform + 'static>(qp: &mut Qp<P>) {
    qp.modify(&QpAttr::new().state(QpState::Init).port(1))
        .unwrap();
    qp.modify(&QpAttr::new().state(QpState::Rtr)).unwrap();
    qp.modify(&QpAttr::new().state(QpState::Rts)).unwrap();
}

/// A raw packet QP of [`raw_attr`] in RTS.
pub fn raw_qp<P: Platform + 'static>(
    pd: &Arc<Pd<P>>,
    cq: &Arc<Cq<P>>,
    send: u32,
    recv: u32,
) -> Qp<P> {
    let mut q = Qp::create(pd, &raw_attr(cq, send, recv)).unwrap();
    raw_to_rts(&mut q);
    q
}

/// Side A's MAC in the two-HCA raw packet tests (the sender's).
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
/// Side B's MAC in the two-HCA raw packet tests (the receiver's).
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// An Ethernet + IPv4 (10.0.0.1 -> 10.0.0.2) + UDP frame from [`MAC_A`] to
/// `dst` carrying `payload`, checksums zero; to build with more options.
pub fn udp4_frame(dst: [u8; 6], src_port: u16, dst_port: u16, payload: &[u8]) -> Frame<'_> {
    Frame::new(dst, MAC_A)
        .l3(L3::V4([10, 0, 0, 1], [10, 0, 0, 2]))
        .l4(L4::Udp(src_port, dst_port))
        .payload(payload)
}

/// How long [`send_frame`] waits for its send completion.
pub const SEND_WAIT: Duration = Duration::from_secs(10);

/// Sends `frame` from the raw packet QP `qp`: its first bytes (the
/// device's minimum inline headers, at least the 18 of an Ethernet header
/// with a VLAN tag) inline in the Ethernet segment, the rest gathered from
/// `mr` at offset 0 (`buf` is the memory `mr` registers). Waits for the
/// send's completion on `cq` and checks it succeeded for this QP.
pub fn send_frame<P: Platform + 'static>(
    qp: &mut Qp<P>,
    cq: &Cq<P>,
    mr: &Mr<P>,
    buf: &DmaBuf<P>,
    frame: &[u8],
    flags: SendFlags,
) {
    let hdr = usize::from(qp.eth_min_inline()).max(18).min(frame.len());
    buf.write(0, &frame[hdr..]).unwrap();
    let sge = mr.sge(0, (frame.len() - hdr) as u32).unwrap();
    qp.post_send(
        &SendWr::new(7, SendOp::Send)
            .sgl(&[sge])
            .eth_headers(&frame[..hdr])
            .flags(flags | SendFlags::SIGNALED),
    )
    .unwrap();
    let mut wc = [WorkCompletion::default(); 1];
    let t = Instant::now();
    while cq.poll(&mut wc).unwrap() == 0 {
        assert!(
            t.elapsed() < SEND_WAIT,
            "no send completion in {SEND_WAIT:?}"
        );
        std::thread::yield_now();
    }
    let wc = wc[0];
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.opcode, WcOpcode::Send, "{wc:?}");
    assert_eq!(wc.qp_num, qp.number().0, "{wc:?}");
}

/// The match of UDP destination port `port` (any source port).
pub fn udp_dport(port: u16) -> FlowMatch {
    FlowMatch::from_specs(&[FlowSpec::Udp {
        src_port: Masked::default(),
        dst_port: Masked::exact(port, 0xffff),
    }])
    .unwrap()
}

/// An IPv4 address the selector rules name.
pub const V4A: [u8; 4] = [10, 1, 1, 1];
/// An IPv4 address no rule names.
pub const V4B: [u8; 4] = [10, 2, 2, 2];
/// An IPv6 address the selector rules name.
pub const V6A: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
/// An IPv6 address no rule names.
pub const V6B: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6];
/// An IPv4 multicast MAC (224.0.0.1's).
pub const MCAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];
/// A source MAC a rule selects.
pub const OTHER_SMAC: [u8; 6] = [0x02, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa];
/// The Toeplitz key of Microsoft's RSS verification suite (the one
/// `firmware-cmds/tests/toeplitz.rs` checks the hash with).
pub const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// RSS over the IPv4 addresses and UDP ports with [`RSS_KEY`].
pub fn udp4_rss() -> RxHashConf {
    RxHashConf {
        key: RSS_KEY,
        fields_mask: RX_HASH_SRC_IPV4
            | RX_HASH_DST_IPV4
            | RX_HASH_SRC_PORT_UDP
            | RX_HASH_DST_PORT_UDP,
    }
}

/// The Toeplitz hash an RSS TIR of [`udp4_rss`] computes for a UDP/IPv4
/// frame from `src:sport` to `dst:dport` (`firmware_cmds::rss`, checked
/// against Microsoft's verification suite): the expected RQ table entry is
/// this modulo the table's size.
pub fn udp4_rss_hash(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
    let selected = RX_HASH_FIELD_SELECT_SRC_IP
        | RX_HASH_FIELD_SELECT_DST_IP
        | RX_HASH_FIELD_SELECT_L4_SPORT
        | RX_HASH_FIELD_SELECT_L4_DPORT;
    let fields = HashFields {
        src_ip: &src,
        dst_ip: &dst,
        ports: Some((sport, dport)),
    };
    let mut input = [0u8; MAX_HASH_INPUT];
    let n = hash_input(&fields, selected, &mut input);
    toeplitz(&RSS_KEY, &input[..n])
}

/// A frame (`hca_emu::frame`, checksums zero: steering does not check
/// them) with `payload` whose first byte is replaced by `tag`, so that a
/// test can tell where each frame landed; padded to 60 bytes.
pub fn marked_frame(
    dmac: [u8; 6],
    smac: [u8; 6],
    vid: Option<u16>,
    l3: L3,
    l4: L4,
    payload: &[u8],
    tag: u8,
) -> Vec<u8> {
    let mut pay = payload.to_vec();
    if let Some(b) = pay.first_mut() {
        *b = tag;
    }
    Frame::new(dmac, smac)
        .vlan(vid)
        .l3(l3)
        .l4(l4)
        .payload(&pay)
        .pad_to(60)
        .build()
}

/// An Ethernet flow spec: each of destination MAC, source MAC, EtherType
/// and VLAN ID matched exactly where given, ignored where `None`.
pub fn eth_spec(
    dst: Option<[u8; 6]>,
    src: Option<[u8; 6]>,
    ty: Option<u16>,
    vid: Option<u16>,
) -> FlowSpec {
    let mac = |m: Option<[u8; 6]>| m.map_or(Masked::default(), |m| Masked::exact(m, [0xff; 6]));
    FlowSpec::Eth {
        dst_mac: mac(dst),
        src_mac: mac(src),
        ether_type: ty.map_or(Masked::default(), |t| Masked::exact(t, 0xffff)),
        vlan_tag: vid.map_or(Masked::default(), |v| Masked::exact(v, 0x0fff)),
    }
}

/// One flow spec of each selector kind, in the tests' priority order:
/// destination MAC [`MCAST`], source MAC [`OTHER_SMAC`], EtherType
/// 0x88b5, VLAN 100, IPv4 destination [`V4A`], IPv6 source [`V6A`], TCP
/// destination port 80, UDP destination port 9000.
pub fn selector_specs() -> [FlowSpec; 8] {
    [
        eth_spec(Some(MCAST), None, None, None),
        eth_spec(None, Some(OTHER_SMAC), None, None),
        eth_spec(None, None, Some(0x88b5), None),
        eth_spec(None, None, None, Some(100)),
        FlowSpec::Ipv4 {
            src_ip: Masked::default(),
            dst_ip: Masked::exact(V4A, [0xff; 4]),
        },
        FlowSpec::Ipv6 {
            src_ip: Masked::exact(V6A, [0xff; 16]),
            dst_ip: Masked::default(),
        },
        FlowSpec::Tcp {
            src_port: Masked::default(),
            dst_port: Masked::exact(80, 0xffff),
        },
        FlowSpec::Udp {
            src_port: Masked::default(),
            dst_port: Masked::exact(9000, 0xffff),
        },
    ]
}

/// A cyclic work queue (the `wq` of an RQ or SQ context, PRM "Work Queue
/// Format"): 2^`log_wq_sz` WQEs of 2^`log_wq_stride` bytes in protection
/// domain `pd`, its doorbell record at `dbr_addr`. An SQ also needs its
/// `uar_page`.
pub fn cyclic_wq(pd: Pdn, dbr_addr: u64, log_wq_stride: u8, log_wq_sz: u8) -> Wq {
    Wq::new()
        .with(Wq::wq_type, WQ_TYPE_CYCLIC)
        .unwrap()
        .with(Wq::pd, pd.0)
        .unwrap()
        .with(Wq::dbr_addr, dbr_addr)
        .unwrap()
        .with(Wq::log_wq_stride, log_wq_stride)
        .unwrap()
        .with(Wq::log_wq_sz, log_wq_sz)
        .unwrap()
}

/// CREATE_RQ's input: an RQ of work queue `wq` completing on `cqn`; with
/// `vsd` (VLAN strip disable) VLAN tags stay in the frame, mlx5_ib's
/// default.
pub fn create_rq_in(cqn: Cqn, vsd: bool, wq: Wq) -> CreateRqIn {
    let rqc = Rqc::new()
        .with(Rqc::vsd, vsd)
        .unwrap()
        .with(Rqc::cqn, cqn.0)
        .unwrap()
        .with(Rqc::wq, wq)
        .unwrap();
    CreateRqIn::new().with(CreateRqIn::ctx, rqc).unwrap()
}

/// CREATE_SQ's input: an SQ of work queue `wq` sending through the one
/// TIS `tisn`, completing on `cqn`.
pub fn create_sq_in(cqn: Cqn, tisn: u32, wq: Wq) -> CreateSqIn {
    let sqc = Sqc::new()
        .with(Sqc::cqn, cqn.0)
        .unwrap()
        .with(Sqc::tis_lst_sz, 1)
        .unwrap()
        .with(Sqc::tis_num_0, tisn)
        .unwrap()
        .with(Sqc::wq, wq)
        .unwrap();
    CreateSqIn::new().with(CreateSqIn::ctx, sqc).unwrap()
}

/// Receive buffers of a [`RawRq`].
pub const RQ_SLOTS: usize = 16;
/// The size of each receive buffer of a [`RawRq`].
pub const RQ_SLOT: usize = 2048;

/// A raw RQ of the driver's firmware objects (CREATE_RQ, cyclic, VLAN
/// tags kept, [`RQ_SLOTS`] WQEs of one 16-byte data segment) on memory it
/// owns, observed through its receive buffers: a frame steered to it is
/// seen in the next buffer, no completion needed.
pub struct RawRq<'a, P: Platform + 'static> {
    // Declared first: destroyed before the memory it uses is freed.
    rq: Rq<'a, P>,
    data: Arc<DmaBuf<P>>,
    _ring: Arc<DmaBuf<P>>,
    _dbr: Arc<DmaBuf<P>>,
    _mr: Mr<P>,
    /// Frames taken so far ([`RawRq::take`]): the next buffer to look at.
    pub seen: usize,
}

impl<'a, P: Platform + 'static> RawRq<'a, P> {
    /// CREATE_RQ through `raw`, with a ring, doorbell record and
    /// [`RQ_SLOTS`] buffers of [`RQ_SLOT`] bytes (registered in `pd`, of
    /// the same HCA) allocated here and kept until the RQ is destroyed, which is what
    /// [`Hca::raw`](hca_driver::Hca::raw)'s contract asks of its caller; the RQ is left in RST.
    pub fn create(
        raw: &RawHca<'a, P>,
        pd: &Arc<Pd<P>>,
        cq: &Cq<P>,
    ) -> Result<Self, hca_driver::Error> {
        let hca = pd.context().hca();
        if !std::ptr::eq(&**hca, raw.hca()) {
            return Err(hca_driver::Error::InvalidArgument {
                arg: "pd",
                reason: "of another HCA than the raw handle's",
            });
        }
        let ring = Arc::new(DmaBuf::alloc(hca, 4096)?);
        let dbr = Arc::new(DmaBuf::alloc(hca, 64)?);
        let data = Arc::new(DmaBuf::alloc(hca, RQ_SLOTS * RQ_SLOT)?);
        let mr = Mr::register(pd, &data, AccessFlags::LOCAL_WRITE)?;
        let create = create_rq_in(cq.number(), true, cyclic_wq(pd.number(), dbr.iova(), 4, 4));
        let rq = raw.create_rq(&PageList::list(&create, &[ring.iova()]))?;
        Ok(RawRq {
            rq,
            data,
            _ring: ring,
            _dbr: dbr,
            _mr: mr,
            seen: 0,
        })
    }

    /// MODIFY_RQ from RST to RDY, then every buffer posted: the receive
    /// WQEs (`mlx5_wqe_data_seg`: byte_count, lkey, addr), then the
    /// doorbell record's receive counter.
    pub fn ready(&self) -> Result<(), hca_driver::Error> {
        self.rq.modify_state(WQ_STATE_RST, WQ_STATE_RDY)?;
        for i in 0..RQ_SLOTS {
            let mut seg = [0u8; 16];
            seg[0..4].copy_from_slice(&(RQ_SLOT as u32).to_be_bytes());
            seg[4..8].copy_from_slice(&self._mr.lkey().0.to_be_bytes());
            seg[8..16].copy_from_slice(&(self.data.iova() + (i * RQ_SLOT) as u64).to_be_bytes());
            self._ring.write(i * 16, &seg)?;
        }
        self._dbr.write(0, &(RQ_SLOTS as u32).to_be_bytes())
    }

    /// The firmware object (for MODIFY_RQ and the like).
    pub fn rq(&self) -> &Rq<'a, P> {
        &self.rq
    }

    /// The RQ's number.
    pub fn number(&self) -> Rqn {
        self.rq.number()
    }

    /// The first `len` bytes of receive buffer `i`.
    pub fn slot(&self, i: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.data.read(i * RQ_SLOT, &mut b).unwrap();
        b
    }

    /// Whether the next buffer not yet taken holds `f` (byte for byte);
    /// if so it is taken.
    pub fn take(&mut self, f: &[u8]) -> bool {
        let hit = self.seen < RQ_SLOTS && self.slot(self.seen, f.len()) == f;
        self.seen += usize::from(hit);
        hit
    }

    /// DESTROY_RQ (which unregisters it for events), then the memory is
    /// freed.
    pub fn destroy(self) -> Result<(), hca_driver::Error> {
        self.rq.destroy()
    }
}

/// The one RQ of `rqs` the frame `f` landed in ([`RawRq::take`]), None if
/// none did; panics if more than one did.
pub fn landed<P: Platform + 'static>(rqs: &mut [RawRq<'_, P>], f: &[u8]) -> Option<usize> {
    let mut hit = None;
    for (i, rq) in rqs.iter_mut().enumerate() {
        if rq.take(f) {
            assert!(hit.is_none(), "frame delivered twice");
            hit = Some(i);
        }
    }
    hit
}

/// One [`FlowMatch`] of each spec.
pub fn matches_of(specs: &[FlowSpec]) -> Vec<FlowMatch> {
    specs
        .iter()
        .map(|s| FlowMatch::from_specs(&[*s]).unwrap())
        .collect()
}

/// One flow group per match of `matches` in table `t`: group `i` holds
/// entry `i` alone (the lower, the higher its priority) and matches on
/// the fields `matches[i]` constrains.
pub fn one_entry_groups<'t, P: Platform>(
    t: &'t FlowTable<'_, P>,
    matches: &[FlowMatch],
) -> Vec<FlowGroup<'t, P>> {
    matches
        .iter()
        .enumerate()
        .map(|(i, m)| t.create_group(i as u32, i as u32, m).unwrap())
        .collect()
}
