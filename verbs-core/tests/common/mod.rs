//! Test fixtures: the golden-vector queue setups on heap memory.
#![allow(dead_code, missing_docs)]

pub mod replay;

use platform::MmioWindow;
use platform::host::HostBlock;
use verbs_core::*;

pub const SENTINEL_Q: u8 = 0xa5;
pub const SENTINEL_UAR: u8 = 0x5a;

/// A UAR page on the heap, seen through an `MmioWindow`.
pub struct UarPage {
    pub block: HostBlock,
    pub window: MmioWindow,
}

impl UarPage {
    pub fn new() -> Self {
        let block = HostBlock::new(4096, 4096).unwrap();
        // SAFETY: the block lives as long as the window (both in this
        // struct, the window dropped first is irrelevant: it does not access
        // memory on drop), and is only accessed through volatile copies.
        let window = unsafe { MmioWindow::new(block.host_ptr(), 4096) };
        Self { block, window }
    }

    pub fn fill(&self, v: u8) {
        self.block.write(0, &[v; 4096]).unwrap();
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = vec![0; 4096];
        self.block.read(0, &mut b).unwrap();
        b
    }
}

pub fn rc_caps() -> QpCaps {
    QpCaps {
        max_send_wr: 128,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 128,
        send_ops: Some(0x3ff),
    }
}

pub fn ud_caps() -> QpCaps {
    QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
        send_ops: Some(0x0c),
    }
}

/// A QP of the golden fixtures: `rc_qp` (qpn 0x123, user index 5) or
/// `ud_qp` (qpn 0x124, user index 6).
pub struct QpEnv<'u> {
    pub mem: HostBlock,
    pub qp: Qp<&'u MmioWindow>,
}

/// Queue capacities of `send_wr`/`recv_wr` work requests of
/// `send_sge`/`recv_sge` entries, no inline data, every send opcode.
pub fn caps(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: 0,
        send_ops: None,
    }
}

/// A `qp_type` QP numbered `qpn`, its queues sized for `caps` within the
/// default device limits: no atomics, selective signalling, no minimum
/// of inline headers (change them with struct update syntax).
pub fn qp_cfg(qp_type: QpType, qpn: u32, caps: &QpCaps) -> QpConfig {
    QpConfig {
        qp_type,
        qpn,
        geometry: QpGeometry::new(qp_type, caps, &DeviceLimits::default()).unwrap(),
        atomics: false,
        sq_sig_all: false,
        eth_min_inline: 0,
    }
}

/// A CQ table holding each `(user index, completion handle)` of
/// `entries`.
pub fn cq_table<const N: usize>(
    entries: impl IntoIterator<Item = (u32, QpCompletions)>,
) -> CqTable<N> {
    let mut table = CqTable::<N>::new();
    for (uidx, handle) in entries {
        table.insert(uidx, handle).map_err(|(e, _)| e).unwrap();
    }
    table
}

pub fn qp_config(name: &str) -> QpConfig {
    let (qp_type, caps, qpn, atomics) = match name {
        "rc_qp" => (QpType::Rc, rc_caps(), 0x123, true),
        "ud_qp" => (QpType::Ud, ud_caps(), 0x124, false),
        _ => panic!("unknown fixture {name}"),
    };
    QpConfig {
        atomics,
        ..qp_cfg(qp_type, qpn, &caps)
    }
}

pub fn make_qp<'u>(name: &str, uar: &'u UarPage, sq_start: u32, rq_start: u32) -> QpEnv<'u> {
    make_qp_cfg(&qp_config(name), uar, sq_start, rq_start)
}

pub fn make_qp_cfg<'u>(
    cfg: &QpConfig,
    uar: &'u UarPage,
    sq_start: u32,
    rq_start: u32,
) -> QpEnv<'u> {
    make_qp_bf(cfg, uar, BfConfig::new(0), sq_start, rq_start)
}

pub fn make_qp_bf<'u>(
    cfg: &QpConfig,
    uar: &'u UarPage,
    bf: BfConfig,
    sq_start: u32,
    rq_start: u32,
) -> QpEnv<'u> {
    let mem = HostBlock::new(cfg.geometry.layout.total_bytes, 4096).unwrap();
    let region = mem.lend(0x100_0000, 0).unwrap();
    let qp = Qp::with_counters(region, Some((&uar.window, bf)), cfg, sq_start, rq_start)
        .map_err(|(e, _)| e)
        .unwrap();
    QpEnv { mem, qp }
}

impl QpEnv<'_> {
    pub fn fill_rings(&self, v: u8) {
        let l = self.qp.layout();
        self.mem.write(0, &vec![v; l.ring_bytes]).unwrap();
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mem.read(off, &mut b).unwrap();
        b
    }

    pub fn dbr(&self) -> [u8; 8] {
        let b = self.read(self.qp.layout().dbr_offset, 8);
        b.try_into().unwrap()
    }

    /// The SQ bytes of WQEBB `slot`.
    pub fn sq_slot(&self, slot: usize) -> Vec<u8> {
        self.read(self.qp.layout().sq_offset + 64 * slot, 64)
    }

    pub fn reclaim(self) {
        let parts = self.qp.into_parts().map_err(|_| "handles alive").unwrap();
        self.mem.reclaim(parts.region).unwrap();
    }
}

/// A 256-entry CQ (cqn 7), CQE version 1, on the UAR page.
pub struct CqEnv<'u> {
    pub mem: HostBlock,
    cq: Option<Cq<&'u MmioWindow>>,
}

impl<'u> CqEnv<'u> {
    pub fn cq(&mut self) -> &mut Cq<&'u MmioWindow> {
        self.cq.as_mut().unwrap()
    }

    /// The CQ and, apart, its memory (to write CQEs while a poller session
    /// holds the CQ).
    pub fn split(&mut self) -> (&HostBlock, &mut Cq<&'u MmioWindow>) {
        (&self.mem, self.cq.as_mut().unwrap())
    }
}

impl Drop for CqEnv<'_> {
    /// Hands the region back so the heap block is freed (no leak under Miri).
    fn drop(&mut self) {
        if let Some(cq) = self.cq.take() {
            let _ = self.mem.reclaim(cq.into_parts().region);
        }
    }
}

pub fn make_cq<'u>(uar: &'u UarPage, log: u8, ci: u32) -> CqEnv<'u> {
    make_cq_version(uar, log, ci, CqeVersion::V1)
}

pub fn make_cq_version<'u>(uar: &'u UarPage, log: u8, ci: u32, version: CqeVersion) -> CqEnv<'u> {
    let layout = CqLayout::new(log).unwrap();
    let mem = HostBlock::new(layout.total_bytes, 4096).unwrap();
    let cfg = CqConfig {
        cqn: 7,
        layout,
        version,
        uar_page_offset: 0,
    };
    let cq = Cq::with_consumer_index(mem.lend(0x200_0000, 0).unwrap(), &uar.window, &cfg, ci)
        .map_err(|(e, _)| e)
        .unwrap();
    CqEnv { mem, cq: Some(cq) }
}

impl CqEnv<'_> {
    pub fn write_cqe(&self, slot: usize, bytes: &[u8]) {
        assert_eq!(bytes.len(), 64);
        self.mem.write(64 * slot, bytes).unwrap();
    }

    pub fn dbr(&self) -> [u8; 8] {
        let mut b = [0; 8];
        let entries = self.cq.as_ref().unwrap().entries() as usize;
        self.mem.read(64 * entries, &mut b).unwrap();
        b
    }
}

/// A 64-byte CQE image.
#[derive(Clone, Copy)]
pub struct CqeImage(pub [u8; 64]);

impl CqeImage {
    pub fn new(opcode: u8, owner: u8) -> Self {
        let mut b = [0u8; 64];
        b[63] = (opcode << 4) | (owner & 1);
        Self(b)
    }
    pub fn qpn(mut self, sop: u8, qpn: u32) -> Self {
        self.0[0x38..0x3c].copy_from_slice(&((u32::from(sop) << 24) | qpn).to_be_bytes());
        self
    }
    pub fn uidx(mut self, v: u32) -> Self {
        self.0[0x20..0x24].copy_from_slice(&v.to_be_bytes());
        self
    }
    pub fn counter(mut self, c: u16) -> Self {
        self.0[0x3c..0x3e].copy_from_slice(&c.to_be_bytes());
        self
    }
    pub fn byte_cnt(mut self, c: u32) -> Self {
        self.0[0x2c..0x30].copy_from_slice(&c.to_be_bytes());
        self
    }
    pub fn syndrome(mut self, vendor: u8, synd: u8) -> Self {
        self.0[0x36] = vendor;
        self.0[0x37] = synd;
        self
    }
}

pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn num(v: &serde_json::Value) -> u64 {
    match v {
        serde_json::Value::Number(n) => n.as_u64().unwrap(),
        serde_json::Value::String(s) => {
            u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
        }
        other => panic!("not a number: {other}"),
    }
}

pub fn vectors() -> serde_json::Value {
    replay::load("libmlx5-vectors.json")
}

/// The fixture address handles, built by our `mlx5_create_ah`.
pub fn fixture_av(v: &serde_json::Value, name: &str) -> AddressVector {
    let ah = &v["fixtures"]["address_handles"][name];
    let a = &ah["ibv_ah_attr"];
    let grh = (a["is_global"].as_u64() == Some(1)).then(|| {
        let g = &a["grh"];
        GlobalRoute {
            dgid: hex(g["dgid"].as_str().unwrap()).try_into().unwrap(),
            flow_label: num(&g["flow_label"]) as u32,
            sgid_index: num(&g["sgid_index"]) as u8,
            hop_limit: num(&g["hop_limit"]) as u8,
            traffic_class: num(&g["traffic_class"]) as u8,
        }
    });
    let attr = AhAttr {
        dlid: num(&a["dlid"]) as u16,
        sl: num(&a["sl"]) as u8,
        src_path_bits: num(&a["src_path_bits"]) as u8,
        static_rate: num(&a["static_rate"]) as u8,
        grh,
        port_num: num(&a["port_num"]) as u8,
    };
    let link = match ah["port_link_layer"].as_str().unwrap() {
        "INFINIBAND" => PortLinkLayer::Infiniband,
        "ETHERNET" => PortLinkLayer::Ethernet {
            roce_v2: true,
            dmac: [2, 0, 0, 0, 0, 1],
            sport_if_no_flow_label: 0xc000,
        },
        other => panic!("link layer {other}"),
    };
    AddressVector::from_ah_attr(&attr, link).unwrap()
}
