//! Data-path test helpers, written from FACTS.md and the PRM field tables
//! (not from verbs-core or the emulator's layout table): a small WQE
//! encoder, memory keys, CQs with polling, QPs with their transitions over
//! RoCE, SRQs, and a node that tears everything down and checks the
//! emulator is clean.

use std::time::Duration;

use super::{Raw, inp, put_pas, put64, setf};
use hca_emu::EmuConfig;
use platform::{Be32, Be64, Mmio, Platform};

/// MKEY access: local write.
pub const LW: u8 = 1;
/// MKEY access: remote read.
pub const RR: u8 = 2;
/// MKEY access: remote write.
pub const RW: u8 = 4;
/// MKEY access: atomic.
pub const AT: u8 = 8;

/// Send opcodes.
pub mod op {
    pub const NOP: u8 = 0x00;
    pub const WRITE: u8 = 0x08;
    pub const WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const READ: u8 = 0x10;
    pub const CS: u8 = 0x11;
    pub const FA: u8 = 0x12;
}

/// `fm_ce_se`: CQE requested.
pub const SIGNALED: u8 = 0x08;
/// `fm_ce_se`: solicited event.
pub const SOLICITED: u8 = 0x02;
/// `fm_ce_se`: fence.
pub const FENCE: u8 = 0x80;

/// Event types the nodes' EQ takes.
pub const EVENTS: u64 = (1 << 0x00)
    | (1 << 0x02)
    | (1 << 0x04)
    | (1 << 0x05)
    | (1 << 0x08)
    | (1 << 0x09)
    | (1 << 0x10)
    | (1 << 0x11)
    | (1 << 0x12)
    | (1 << 0x13)
    | (1 << 0x14);

/// A UD address vector.
#[derive(Clone, Debug)]
pub struct Av {
    pub qkey: u32,
    pub dqpn: u32,
    pub rmac: [u8; 6],
    pub rgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub tclass: u8,
    pub flow_label: u32,
    /// InfiniBand: the destination LID (RoCE v2: the UDP source port).
    pub rlid: u16,
}

/// A send work request, encoded by [`Wr::encode`].
#[derive(Clone, Debug, Default)]
pub struct Wr {
    pub opcode: u8,
    pub flags: u8,
    pub imm: u32,
    pub remote: Option<(u64, u32)>,
    pub atomic: Option<(u64, u64)>,
    pub av: Option<Av>,
    pub sges: Vec<(u64, u32, u32)>,
    pub inline: Option<Vec<u8>>,
    /// Raw Ethernet: (cs_flags, inline headers).
    pub eth: Option<(u8, Vec<u8>)>,
}

impl Wr {
    pub fn new(opcode: u8) -> Self {
        Wr {
            opcode,
            flags: SIGNALED,
            ..Wr::default()
        }
    }

    pub fn sge(mut self, addr: u64, len: u32, lkey: u32) -> Self {
        self.sges.push((addr, len, lkey));
        self
    }

    pub fn remote(mut self, addr: u64, rkey: u32) -> Self {
        self.remote = Some((addr, rkey));
        self
    }

    pub fn flags(mut self, f: u8) -> Self {
        self.flags = f;
        self
    }

    pub fn imm(mut self, v: u32) -> Self {
        self.imm = v;
        self
    }

    pub fn inline(mut self, d: &[u8]) -> Self {
        self.inline = Some(d.to_vec());
        self
    }

    /// The WQE bytes (a multiple of 16; the control segment's `ds` counts
    /// them) for WQE counter `index` of queue `qpn`.
    pub fn encode(&self, index: u16, qpn: u32) -> Vec<u8> {
        let mut w = vec![0u8; 16];
        if let Some(av) = &self.av {
            let mut a = [0u8; 48];
            a[0..4].copy_from_slice(&av.qkey.to_be_bytes());
            a[8..12].copy_from_slice(&(av.dqpn | 0x8000_0000).to_be_bytes());
            a[14..16].copy_from_slice(&av.rlid.to_be_bytes());
            a[20..26].copy_from_slice(&av.rmac);
            a[26] = av.tclass;
            a[27] = av.hop_limit;
            let gfl = (u32::from(av.sgid_index) << 20) | (av.flow_label & 0xf_ffff);
            a[28..32].copy_from_slice(&gfl.to_be_bytes());
            a[32..48].copy_from_slice(&av.rgid);
            w.extend_from_slice(&a);
        }
        if let Some((cs, hdr)) = &self.eth {
            let mut e = vec![0u8; (14 + hdr.len()).div_ceil(16) * 16];
            e[4] = *cs;
            e[12..14].copy_from_slice(&(hdr.len() as u16).to_be_bytes());
            e[14..14 + hdr.len()].copy_from_slice(hdr);
            w.extend_from_slice(&e);
        }
        if let Some((addr, rkey)) = self.remote {
            w.extend_from_slice(&addr.to_be_bytes());
            w.extend_from_slice(&rkey.to_be_bytes());
            w.extend_from_slice(&[0; 4]);
        }
        if let Some((swap_add, compare)) = self.atomic {
            w.extend_from_slice(&swap_add.to_be_bytes());
            w.extend_from_slice(&compare.to_be_bytes());
        }
        if let Some(d) = &self.inline {
            let mut s = ((d.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
            s.extend_from_slice(d);
            s.resize(s.len().div_ceil(16) * 16, 0);
            w.extend_from_slice(&s);
        }
        for &(addr, len, lkey) in &self.sges {
            w.extend_from_slice(&len.to_be_bytes());
            w.extend_from_slice(&lkey.to_be_bytes());
            w.extend_from_slice(&addr.to_be_bytes());
        }
        let ds = (w.len() / 16) as u32;
        let c0 = (u32::from(index) << 8) | u32::from(self.opcode);
        w[0..4].copy_from_slice(&c0.to_be_bytes());
        w[4..8].copy_from_slice(&((qpn << 8) | ds).to_be_bytes());
        w[11] = self.flags;
        w[12..16].copy_from_slice(&self.imm.to_be_bytes());
        w
    }
}

/// A memory key over test memory.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    pub addr: u64,
    pub len: usize,
    pub key: u32,
    pub index: u32,
}

/// A CQ and its consumer index.
#[derive(Debug)]
pub struct Cq {
    pub cqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log: u32,
    pub ci: u32,
}

/// A polled CQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub opcode: u8,
    pub se: bool,
    pub syndrome: u8,
    pub vendor: u8,
    pub qpn: u32,
    pub wqe_opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    pub imm: u32,
    pub flags_rqpn: u32,
    pub srqn_uidx: u32,
    pub l4_l3: u8,
    pub raw: Vec<u8>,
}

impl Cqe {
    fn parse(b: &[u8; 64]) -> Self {
        let be32 = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        Cqe {
            opcode: b[63] >> 4,
            se: b[63] & 2 != 0,
            syndrome: b[0x37],
            vendor: b[0x36],
            qpn: be32(0x38) & 0xff_ffff,
            wqe_opcode: b[0x38],
            wqe_counter: u16::from_be_bytes([b[0x3c], b[0x3d]]),
            byte_cnt: be32(0x2c),
            imm: be32(0x24),
            flags_rqpn: be32(0x18),
            srqn_uidx: be32(0x20) & 0xff_ffff,
            l4_l3: b[0x1d],
            raw: b.to_vec(),
        }
    }

    /// Success opcodes: 0 requester, 1 RDMA write with immediate, 2 send,
    /// 3 send with immediate.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert!(self.opcode < 13, "error CQE: {self:?}");
        self
    }

    /// An error CQE with this syndrome.
    #[track_caller]
    pub fn err(&self, syndrome: u8) -> &Self {
        assert!(
            self.opcode == 13 || self.opcode == 14,
            "not an error CQE: {self:?}"
        );
        assert_eq!(self.syndrome, syndrome, "syndrome of {self:?}");
        self
    }
}

/// A queue pair's memory and counters.
#[derive(Debug)]
pub struct Qp {
    pub qpn: u32,
    pub st: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log_rq: u32,
    pub rq_stride: usize,
    pub log_sq: u32,
    pub srq: bool,
    pub sq_pc: u16,
    pub rq_pc: u16,
    pub port: u8,
    pub bf: bool,
    pub bf_toggle: bool,
}

impl Qp {
    pub fn sq_offset(&self) -> usize {
        if self.srq {
            0
        } else {
            self.rq_stride << self.log_rq
        }
    }
}

/// Creation parameters of a QP.
#[derive(Clone, Debug)]
pub struct QpSpec {
    /// 0 RC, 1 UC, 2 UD.
    pub st: u32,
    pub log_rq: u32,
    /// Receive WQE stride 16 << this.
    pub log_rq_stride: u32,
    pub log_sq: u32,
    pub srqn: Option<u32>,
    pub scq: u32,
    pub rcq: u32,
    pub user_index: u32,
}

impl QpSpec {
    pub fn new(st: u32, cq: &Cq) -> Self {
        QpSpec {
            st,
            log_rq: 4,
            log_rq_stride: 2,
            log_sq: 6,
            srqn: None,
            scq: cq.cqn,
            rcq: cq.cqn,
            user_index: 0,
        }
    }
}

/// The remote end of a connection.
#[derive(Clone, Debug)]
pub struct Path {
    pub port: u8,
    pub sgid_index: u8,
    pub rmac: [u8; 6],
    pub rgid: [u8; 16],
    pub remote_qpn: u32,
}

/// Connection attributes.
#[derive(Clone, Debug)]
pub struct Attrs {
    pub access: u8,
    /// 1 = 256 .. 5 = 4096.
    pub mtu: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub retry_count: u32,
    pub rnr_retry: u32,
    pub ack_timeout: u32,
    pub min_rnr_nak: u32,
    pub log_sra: u32,
    pub log_rra: u32,
    pub qkey: u32,
    /// RTR2RTS `log_ack_req_freq`: AckReq at least every 2^n packets.
    pub log_ack_req_freq: u32,
    /// Address path: hop limit (TTL), traffic class, flow label, DSCP,
    /// ECN, UDP source port (0: derived).
    pub hop_limit: u8,
    pub tclass: u8,
    pub flow_label: u32,
    pub dscp: u8,
    pub ecn: u8,
    pub udp_sport: u16,
}

impl Default for Attrs {
    fn default() -> Self {
        Attrs {
            access: LW | RR | RW | AT,
            mtu: 3,
            sq_psn: 0x100,
            rq_psn: 0x100,
            retry_count: 7,
            rnr_retry: 7,
            ack_timeout: 14,
            min_rnr_nak: 1,
            log_sra: 4,
            log_rra: 4,
            qkey: 0x1111_1111,
            log_ack_req_freq: 0,
            hop_limit: 64,
            tclass: 0,
            flow_label: 0,
            dscp: 0,
            ecn: 0,
            udp_sport: 0,
        }
    }
}

/// An SRQ.
#[derive(Debug)]
pub struct Srq {
    pub srqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log: u32,
    pub stride: usize,
    /// Next WQE index to post at (the free list's head).
    pub head: u16,
    pub counter: u16,
}

/// An initialised HCA with a UAR, a PD, an EQ taking completion and
/// affiliated events, RoCE enabled, and a list of objects destroyed in
/// reverse order by [`Node::finish`].
pub struct Node {
    pub r: Raw,
    pub id: u8,
    pub uar: u32,
    pub pd: u32,
    pub eqn: u32,
    pub eq_buf: u64,
    pub eq_ci: u32,
    objs: Vec<(u16, u32)>,
}

const LOG_EQ: u32 = 7;
/// How long [`Node::wait`] polls in device time.
pub const WAIT: Duration = Duration::from_secs(30);

impl Node {
    pub fn new(id: u8, cfg: EmuConfig) -> Node {
        let mut r = Raw::new(cfg);
        r.init();
        let uar = r.alloc_uar();
        let pd = r.alloc_pd();
        let (eqn, eq_buf) = r.create_eq(LOG_EQ, uar, EVENTS);
        // RoCE on: MODIFY_NIC_VPORT_CONTEXT field_select.roce_en.
        let mut mv = inp(0x755, 0, 0x200);
        setf(&mut mv, 0xc, 1, 1, 1);
        setf(&mut mv, 0x100, 0, 0, 1);
        r.ok(&mv, 16);
        let mut n = Node {
            r,
            id,
            uar,
            pd,
            eqn,
            eq_buf,
            eq_ci: 0,
            objs: vec![(0x803, uar), (0x801, pd), (0x302, eqn)],
        };
        let ports = n.r.emu.ports();
        for p in 1..=ports {
            let (gid, mac) = (n.gid(p), n.mac(p));
            n.set_gid(p, 0, gid, mac, 2, 0);
        }
        n
    }

    /// The RoCE v2 IPv4 GID this node gives port `p` at index 0:
    /// `::ffff:10.0.<id>.<p>`.
    pub fn gid(&self, p: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 0, self.id, p]);
        g
    }

    /// The MAC of that GID entry: `02:00:00:00:<id>:<p>`.
    pub fn mac(&self, p: u8) -> [u8; 6] {
        [2, 0, 0, 0, self.id, p]
    }

    /// SET_ROCE_ADDRESS.
    pub fn set_gid(
        &mut self,
        port: u8,
        index: u16,
        gid: [u8; 16],
        mac: [u8; 6],
        version: u32,
        l3: u32,
    ) {
        let mut g = inp(0x761, 0, 0x30);
        setf(&mut g, 0x8, 31, 16, u64::from(index));
        // vhca_port_num only where the function has several vHCA ports.
        if self.r.emu.ports() > 1 {
            setf(&mut g, 0x8, 3, 0, u64::from(port));
        }
        g[0x10..0x20].copy_from_slice(&gid);
        setf(
            &mut g,
            0x20,
            15,
            0,
            u64::from(u16::from_be_bytes([mac[0], mac[1]])),
        );
        g[0x24..0x28].copy_from_slice(&mac[2..6]);
        setf(&mut g, 0x28, 11, 8, u64::from(l3));
        setf(&mut g, 0x28, 7, 0, u64::from(version));
        self.r.ok(&g, 16);
    }

    /// The path to port `port` of `other` (sgid index 0 here).
    pub fn path_to(&self, other: &Node, port: u8, remote_qpn: u32, local_port: u8) -> Path {
        Path {
            port: local_port,
            sgid_index: 0,
            rmac: other.mac(port),
            rgid: other.gid(port),
            remote_qpn,
        }
    }

    /// Test memory (kept until `finish`), filled with `fill`.
    pub fn mem(&mut self, len: usize, fill: u8) -> u64 {
        let a = self.r.dma(len);
        let r = self.r.region(a);
        r.write_bytes(0, &vec![fill; r.len()]);
        a
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        let r = self.r.region(addr);
        r.write_bytes((addr - r.iova()) as usize, data);
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let r = self.r.region(addr);
        let mut v = vec![0u8; len];
        r.read_bytes((addr - r.iova()) as usize, &mut v);
        v
    }

    /// CREATE_MKEY in PA mode over `len` bytes at `addr`.
    pub fn mkey(&mut self, pd: u32, addr: u64, len: usize, access: u8) -> Mr {
        let variant = 0x40 | (self.objs.len() as u8 & 0x3f);
        let mut m = inp(0x200, 0, 0x110);
        setf(&mut m, 0x10, 9, 8, 0);
        setf(&mut m, 0x10, 10, 10, 1);
        setf(&mut m, 0x10, 11, 11, u64::from(access & LW != 0));
        setf(&mut m, 0x10, 12, 12, u64::from(access & RR != 0));
        setf(&mut m, 0x10, 13, 13, u64::from(access & RW != 0));
        setf(&mut m, 0x10, 14, 14, u64::from(access & AT != 0));
        setf(&mut m, 0x14, 31, 8, 0xff_ffff);
        setf(&mut m, 0x14, 7, 0, u64::from(variant));
        setf(&mut m, 0x1c, 23, 0, u64::from(pd));
        put64(&mut m, 0x20, addr);
        put64(&mut m, 0x28, len as u64);
        let index = self.r.create(&m);
        self.objs.push((0x202, index));
        Mr {
            addr,
            len,
            key: (index << 8) | u32::from(variant),
            index,
        }
    }

    /// Memory of `len` bytes filled with `fill`, registered in the node's
    /// PD with `access`.
    pub fn mr(&mut self, len: usize, fill: u8, access: u8) -> Mr {
        let a = self.mem(len, fill);
        let pd = self.pd;
        self.mkey(pd, a, len, access)
    }

    /// CREATE_MKEY in MTT mode: the virtual range `va .. va + 4096 * n`
    /// over `n` separate pages. Returns the key and the pages' IOVAs.
    pub fn mkey_mtt(&mut self, va: u64, n: usize, access: u8) -> (Mr, Vec<u64>) {
        let pages: Vec<u64> = (0..n).map(|_| self.mem(4096, 0)).collect();
        let mut m = inp(0x200, 0, 0x110 + 8 * n.next_multiple_of(2));
        setf(&mut m, 0x10, 9, 8, 1);
        setf(&mut m, 0x10, 10, 10, 1);
        setf(&mut m, 0x10, 11, 11, u64::from(access & LW != 0));
        setf(&mut m, 0x10, 12, 12, u64::from(access & RR != 0));
        setf(&mut m, 0x10, 13, 13, u64::from(access & RW != 0));
        setf(&mut m, 0x10, 14, 14, u64::from(access & AT != 0));
        setf(&mut m, 0x14, 31, 8, 0xff_ffff);
        setf(&mut m, 0x14, 7, 0, 0x77);
        setf(&mut m, 0x1c, 23, 0, u64::from(self.pd));
        put64(&mut m, 0x20, va);
        put64(&mut m, 0x28, 4096 * n as u64);
        setf(&mut m, 0x44, 31, 0, n.div_ceil(2) as u64);
        setf(&mut m, 0x48, 4, 0, 12);
        setf(&mut m, 0x60, 31, 0, n.div_ceil(2) as u64);
        for (i, p) in pages.iter().enumerate() {
            put64(&mut m, 0x110 + 8 * i, *p);
        }
        let index = self.r.create(&m);
        self.objs.push((0x202, index));
        (
            Mr {
                addr: va,
                len: 4096 * n,
                key: (index << 8) | 0x77,
                index,
            },
            pages,
        )
    }

    pub fn cq(&mut self, log: u32) -> Cq {
        let (cqn, buf, dbr) = self.r.create_cq(log, self.uar, self.eqn);
        self.objs.push((0x401, cqn));
        Cq {
            cqn,
            buf,
            dbr,
            log,
            ci: 0,
        }
    }

    pub fn qp(&mut self, s: &QpSpec) -> Qp {
        let srq = s.srqn.is_some();
        let stride = 16usize << s.log_rq_stride;
        let rq_bytes = if srq { 0 } else { stride << s.log_rq };
        let sq_bytes = 64usize << s.log_sq;
        let total = (rq_bytes + sq_bytes).next_multiple_of(4096);
        let buf = self.mem(total, 0);
        let dbr = self.mem(64, 0);
        let pages = total / 4096;
        let mut m = inp(0x500, 0, 0x110 + 8 * pages);
        setf(&mut m, 0x18, 23, 16, u64::from(s.st));
        setf(&mut m, 0x1c, 23, 0, u64::from(self.pd));
        setf(&mut m, 0x20, 22, 19, u64::from(s.log_rq));
        setf(&mut m, 0x20, 18, 16, u64::from(s.log_rq_stride));
        setf(&mut m, 0x20, 14, 11, u64::from(s.log_sq));
        setf(&mut m, 0x24, 23, 0, u64::from(self.uar));
        setf(&mut m, 0x28, 23, 0, u64::from(s.user_index));
        setf(&mut m, 0x94, 23, 0, u64::from(s.scq));
        setf(&mut m, 0xb4, 23, 0, u64::from(s.rcq));
        put64(&mut m, 0xb8, dbr);
        if let Some(n) = s.srqn {
            setf(&mut m, 0xc4, 26, 24, 1);
            setf(&mut m, 0xc4, 23, 0, u64::from(n));
        }
        put_pas(&mut m, 0x110, buf, pages);
        let qpn = self.r.create(&m);
        self.objs.push((0x501, qpn));
        Qp {
            qpn,
            st: s.st,
            buf,
            dbr,
            log_rq: s.log_rq,
            rq_stride: stride,
            log_sq: s.log_sq,
            srq,
            sq_pc: 0,
            rq_pc: 0,
            port: 1,
            bf: false,
            bf_toggle: false,
        }
    }

    /// RST2INIT on `port` with access flags and Q_Key.
    pub fn rst2init(&mut self, qp: &mut Qp, port: u8, a: &Attrs) {
        let mut m = Raw::modify_input(0x502, qp.qpn);
        setf(&mut m, 0x54, 23, 16, u64::from(port));
        setf(&mut m, 0xa8, 15, 15, u64::from(a.access & RR != 0));
        setf(&mut m, 0xa8, 14, 14, u64::from(a.access & RW != 0));
        setf(&mut m, 0xa8, 13, 13, u64::from(a.access & AT != 0));
        setf(&mut m, 0xc0, 31, 0, u64::from(a.qkey));
        self.r.ok(&m, 16);
        qp.port = port;
    }

    /// INIT2RTR (RC/UC with a RoCE path; UD without).
    pub fn init2rtr(&mut self, qp: &Qp, path: Option<&Path>, a: &Attrs) {
        let mut m = Raw::modify_input(0x503, qp.qpn);
        if let Some(p) = path {
            setf(&mut m, 0x20, 31, 29, u64::from(a.mtu));
            setf(&mut m, 0x20, 28, 24, 30);
            setf(&mut m, 0x2c, 23, 0, u64::from(p.remote_qpn));
            setf(&mut m, 0x34, 23, 23, 1); // grh
            setf(&mut m, 0x38, 23, 16, u64::from(p.sgid_index));
            setf(&mut m, 0x38, 7, 0, u64::from(a.hop_limit));
            setf(&mut m, 0x3c, 27, 20, u64::from(a.tclass));
            setf(&mut m, 0x3c, 19, 0, u64::from(a.flow_label));
            setf(&mut m, 0x50, 23, 22, u64::from(a.ecn));
            setf(&mut m, 0x50, 21, 16, u64::from(a.dscp));
            setf(&mut m, 0x50, 15, 0, u64::from(a.udp_sport));
            m[0x40..0x50].copy_from_slice(&p.rgid);
            setf(&mut m, 0x54, 23, 16, u64::from(p.port));
            setf(
                &mut m,
                0x54,
                15,
                0,
                u64::from(u16::from_be_bytes([p.rmac[0], p.rmac[1]])),
            );
            m[0x58..0x5c].copy_from_slice(&p.rmac[2..6]);
            setf(&mut m, 0xa8, 23, 21, u64::from(a.log_rra));
            setf(&mut m, 0xac, 28, 24, u64::from(a.min_rnr_nak));
            setf(&mut m, 0xac, 23, 0, u64::from(a.rq_psn));
        }
        self.r.ok(&m, 16);
    }

    /// RTR2RTS.
    pub fn rtr2rts(&mut self, qp: &Qp, a: &Attrs) {
        let mut m = Raw::modify_input(0x504, qp.qpn);
        setf(&mut m, 0x38, 31, 27, u64::from(a.ack_timeout));
        setf(&mut m, 0x88, 31, 28, u64::from(a.log_ack_req_freq));
        setf(&mut m, 0x88, 23, 21, u64::from(a.log_sra));
        setf(&mut m, 0x88, 18, 16, u64::from(a.retry_count));
        setf(&mut m, 0x88, 15, 13, u64::from(a.rnr_retry));
        setf(&mut m, 0x90, 23, 0, u64::from(a.sq_psn));
        self.r.ok(&m, 16);
    }

    /// RST -> INIT -> RTR -> RTS along `path`.
    pub fn connect(&mut self, qp: &mut Qp, path: &Path, a: &Attrs) {
        self.rst2init(qp, path.port, a);
        self.init2rtr(qp, Some(path), a);
        self.rtr2rts(qp, a);
    }

    /// A UD QP to RTS on `port`.
    pub fn ud_ready(&mut self, qp: &mut Qp, port: u8, a: &Attrs) {
        self.rst2init(qp, port, a);
        self.init2rtr(qp, None, a);
        self.rtr2rts(qp, a);
    }

    /// 2ERR_QP / 2RST_QP.
    pub fn modify(&mut self, qp: &Qp, opcode: u16) {
        let m = Raw::modify_input(opcode, qp.qpn);
        self.r.ok(&m, 16);
    }

    /// Writes WQEs into the SQ (with wrap), updates the doorbell record and
    /// rings the doorbell once with the last WQE's first 8 bytes (or, with
    /// `qp.bf`, copies the whole last WQE to the BlueFlame register).
    pub fn post_send(&mut self, qp: &mut Qp, wrs: &[Wr]) {
        let size = 1usize << qp.log_sq;
        let mut last = Vec::new();
        for wr in wrs {
            let w = wr.encode(qp.sq_pc, qp.qpn);
            let nbb = w.len().div_ceil(64);
            let mut padded = w.clone();
            padded.resize(nbb * 64, 0);
            for (i, bb) in padded.chunks(64).enumerate() {
                let slot = (usize::from(qp.sq_pc) + i) & (size - 1);
                self.write(qp.buf + (qp.sq_offset() + slot * 64) as u64, bb);
            }
            qp.sq_pc = qp.sq_pc.wrapping_add(nbb as u16);
            last = padded;
        }
        self.ring(qp, &last);
    }

    /// Updates the send counter of the doorbell record and rings.
    pub fn ring(&mut self, qp: &mut Qp, last: &[u8]) {
        platform::barrier::udma_to_device_barrier();
        self.write(qp.dbr + 4, &u32::from(qp.sq_pc).to_be_bytes());
        platform::barrier::udma_to_device_barrier();
        let reg = self.uar as usize * 4096 + if qp.bf_toggle { 0x900 } else { 0x800 };
        qp.bf_toggle ^= true;
        if qp.bf {
            let words: Vec<Be64> = last
                .chunks(8)
                .map(|c| Be64::new(u64::from_be_bytes(c.try_into().unwrap())))
                .collect();
            self.r.bar.write_bf(reg, &words[..words.len().min(32)]);
        } else {
            let v = u64::from_be_bytes(last[0..8].try_into().unwrap());
            self.r.bar.write64(reg, Be64::new(v));
        }
    }

    /// Posts receive WQEs (scatter lists) to a QP's RQ.
    pub fn post_recv(&mut self, qp: &mut Qp, sges: &[(u64, u32, u32)]) {
        let slot = usize::from(qp.rq_pc) & ((1 << qp.log_rq) - 1);
        let mut w = vec![0u8; qp.rq_stride];
        for (i, &(addr, len, lkey)) in sges.iter().enumerate() {
            w[i * 16..i * 16 + 4].copy_from_slice(&len.to_be_bytes());
            w[i * 16 + 4..i * 16 + 8].copy_from_slice(&lkey.to_be_bytes());
            w[i * 16 + 8..i * 16 + 16].copy_from_slice(&addr.to_be_bytes());
        }
        if sges.len() * 16 < qp.rq_stride {
            let i = sges.len() * 16;
            w[i + 4..i + 8].copy_from_slice(&0x100u32.to_be_bytes());
        }
        self.write(qp.buf + (slot * qp.rq_stride) as u64, &w);
        qp.rq_pc = qp.rq_pc.wrapping_add(1);
        platform::barrier::udma_to_device_barrier();
        self.write(qp.dbr, &u32::from(qp.rq_pc).to_be_bytes());
    }

    /// A shared receive queue as Linux creates it at ISSI 1: CREATE_RMP
    /// with `2^log` WQEs of `16 << log_stride` bytes; the free list is
    /// linked 0 -> 1 -> ... like rdma-core does.
    pub fn srq(&mut self, log: u32, log_stride: u32) -> Srq {
        let stride = 16usize << log_stride;
        let total = (stride << log).next_multiple_of(4096);
        let buf = self.mem(total, 0);
        let dbr = self.mem(64, 0);
        for i in 0..(1usize << log) {
            let next = ((i + 1) & ((1 << log) - 1)) as u16;
            self.write(buf + (i * stride) as u64 + 2, &next.to_be_bytes());
        }
        let pages = total / 4096;
        // create_rmp_in: rmpc at 0x20 (state RDY), its wq at 0x50.
        let mut m = inp(0x90c, 0, 0x110 + 8 * pages);
        setf(&mut m, 0x20, 23, 20, 1);
        setf(&mut m, 0x58, 23, 0, u64::from(self.pd));
        put64(&mut m, 0x60, dbr);
        setf(&mut m, 0x70, 19, 16, u64::from(log_stride + 4));
        setf(&mut m, 0x70, 4, 0, u64::from(log));
        put_pas(&mut m, 0x110, buf, pages);
        let srqn = self.r.create(&m);
        self.objs.push((0x90e, srqn));
        Srq {
            srqn,
            buf,
            dbr,
            log,
            stride,
            head: 0,
            counter: 0,
        }
    }

    /// Posts one receive to an SRQ at its head (following the links).
    pub fn post_srq(&mut self, s: &mut Srq, sge: (u64, u32, u32)) -> u16 {
        let idx = s.head;
        let base = s.buf + (usize::from(idx) * s.stride) as u64;
        let next = u16::from_be_bytes(self.read(base + 2, 2).try_into().unwrap());
        let mut seg = [0u8; 16];
        seg[0..4].copy_from_slice(&sge.1.to_be_bytes());
        seg[4..8].copy_from_slice(&sge.2.to_be_bytes());
        seg[8..16].copy_from_slice(&sge.0.to_be_bytes());
        self.write(base + 16, &seg);
        if s.stride > 32 {
            let mut t = [0u8; 16];
            t[4..8].copy_from_slice(&0x100u32.to_be_bytes());
            self.write(base + 32, &t);
        }
        s.head = next;
        s.counter = s.counter.wrapping_add(1);
        platform::barrier::udma_to_device_barrier();
        self.write(s.dbr, &u32::from(s.counter).to_be_bytes());
        idx
    }

    /// MODIFY_RMP of `wq.lwm` (Linux's arm_rmp_cmd): the SRQ limit.
    pub fn arm_srq(&mut self, s: &Srq, lwm: u16) {
        let mut arm = inp(0x90d, 0, 0x110);
        setf(&mut arm, 8, 31, 28, 1);
        setf(&mut arm, 8, 23, 0, u64::from(s.srqn));
        setf(&mut arm, 0x14, 0, 0, 1);
        setf(&mut arm, 0x20, 23, 20, 1);
        setf(&mut arm, 0x54, 15, 0, u64::from(lwm));
        self.r.ok(&arm, 16);
    }

    /// Polls one CQE (owner bit of the current pass, opcode not 0xf) and
    /// updates the consumer index in the doorbell record.
    pub fn poll(&self, cq: &mut Cq) -> Option<Cqe> {
        let idx = (cq.ci & ((1 << cq.log) - 1)) as usize;
        let r = self.r.region(cq.buf);
        let own = r.read_u8(idx * 64 + 63);
        let want = ((cq.ci >> cq.log) & 1) as u8;
        if own >> 4 == 0xf || own & 1 != want {
            return None;
        }
        platform::barrier::udma_from_device_barrier();
        let mut b = [0u8; 64];
        r.read_bytes(idx * 64, &mut b);
        cq.ci = cq.ci.wrapping_add(1);
        self.write(cq.dbr, &(cq.ci & 0xff_ffff).to_be_bytes());
        Some(Cqe::parse(&b))
    }

    /// Polls until `n` CQEs arrived (the device clock runs on while
    /// polling); panics after [`WAIT`] of device time.
    #[track_caller]
    pub fn wait(&self, cq: &mut Cq, n: usize) -> Vec<Cqe> {
        let start = self.r.p.now();
        let mut v = Vec::new();
        while v.len() < n {
            if let Some(c) = self.poll(cq) {
                v.push(c);
                continue;
            }
            if self.r.p.now() - start > WAIT {
                panic!(
                    "CQ {:#x}: {} of {n} CQEs after {WAIT:?}: {v:#?}\n{:#?}",
                    cq.cqn,
                    v.len(),
                    self.r.emu.datapath()
                );
            }
            self.r.p.relax();
        }
        v
    }

    /// Lets `d` of device time pass and checks that no CQE arrived.
    #[track_caller]
    pub fn quiet(&self, cq: &mut Cq, d: Duration) {
        self.r.p.delay(d);
        if let Some(c) = self.poll(cq) {
            panic!("unexpected CQE {c:?}");
        }
    }

    /// EQEs since the last call: (event type, event data).
    pub fn events(&mut self) -> Vec<(u8, [u8; 28])> {
        self.r.emu.run_until_idle();
        let mut v = Vec::new();
        let r = self.r.region(self.eq_buf);
        loop {
            let idx = (self.eq_ci & ((1 << LOG_EQ) - 1)) as usize;
            let own = r.read_u8(idx * 64 + 63) & 1;
            if own != ((self.eq_ci >> LOG_EQ) & 1) as u8 {
                break;
            }
            let mut d = [0u8; 28];
            r.read_bytes(idx * 64 + 0x20, &mut d);
            v.push((r.read_u8(idx * 64 + 1), d));
            self.eq_ci += 1;
        }
        let w = (self.eq_ci & 0xff_ffff) | (self.eqn << 24);
        self.r
            .bar
            .write32(self.uar as usize * 4096 + 0x48, Be32::new(w));
        v
    }

    /// Records an object created by hand for `finish` (destroy opcode,
    /// number).
    pub fn keep(&mut self, opcode: u16, n: u32) {
        self.objs.push((opcode, n));
    }

    /// Takes an object destroyed by hand off `finish`'s list (destroy
    /// opcode, number).
    pub fn forget(&mut self, opcode: u16, n: u32) {
        self.objs.retain(|&o| o != (opcode, n));
    }

    /// Destroys every object in reverse order, tears the HCA down, frees
    /// the memory and asserts the emulator is clean (no IOMMU fault, no
    /// leak, no internal error).
    #[track_caller]
    pub fn finish(self) {
        let emu = self.teardown();
        emu.assert_clean();
    }

    /// Like [`finish`](Self::finish), tolerating IOMMU faults (random
    /// traffic): no leak, no internal error.
    #[track_caller]
    pub fn finish_allowing_iommu_faults(self) {
        let emu = self.teardown();
        assert!(
            emu.internal_errors().is_empty(),
            "{:?}",
            emu.internal_errors()
        );
        assert!(emu.leak_report().is_clean(), "{:?}", emu.leak_report());
    }

    #[track_caller]
    fn teardown(mut self) -> hca_emu::EmuHca {
        while let Some((opcode, n)) = self.objs.pop() {
            let mut m = inp(opcode, 0, 16);
            setf(&mut m, 8, 23, 0, u64::from(n));
            let a = self.r.cmd(&m, 16);
            assert_eq!(
                (a.delivery, a.status),
                (0, 0),
                "destroy {opcode:#x} {n:#x}: syndrome {:#x}",
                a.syndrome
            );
        }
        self.r.teardown();
        self.r.free_all();
        self.r.emu
    }
}

impl Node {
    /// ALLOC_TRANSPORT_DOMAIN.
    pub fn transport_domain(&mut self) -> u32 {
        let td = self.r.create(&inp(0x816, 0, 16));
        self.keep(0x817, td);
        td
    }

    /// CREATE_TIS in a transport domain.
    pub fn tis(&mut self, td: u32) -> u32 {
        let mut tis = inp(0x912, 0, 0xc0);
        setf(&mut tis, 0x20 + 0x24, 23, 0, u64::from(td));
        let tisn = self.r.create(&tis);
        self.keep(0x914, tisn);
        tisn
    }

    /// CREATE_SQ (`sq`, on `tisn`) or CREATE_RQ: a cyclic WQ of `2^log`
    /// entries of `2^log_stride` bytes, then MODIFY to RDY. Returned as a
    /// [`Qp`] for the posting helpers.
    pub fn raw_wq(&mut self, sq: bool, cqn: u32, tisn: u32, log: u32, log_stride: u32) -> Qp {
        self.raw_wq_uidx(sq, cqn, tisn, log, log_stride, 0)
    }

    /// [`raw_wq`](Self::raw_wq) with `user_index` `uidx` (what its CQEs
    /// carry in `srqn_uidx`: a raw receive CQE names no RQ).
    pub fn raw_wq_uidx(
        &mut self,
        sq: bool,
        cqn: u32,
        tisn: u32,
        log: u32,
        log_stride: u32,
        uidx: u32,
    ) -> Qp {
        let (m, buf, dbr) = self.raw_wq_input(sq, cqn, tisn, log, log_stride, uidx);
        let num = self.r.create(&m);
        self.keep(if sq { 0x906 } else { 0x90a }, num);
        let mut md = inp(if sq { 0x905 } else { 0x909 }, 0, 0x110);
        setf(&mut md, 8, 23, 0, u64::from(num));
        setf(&mut md, 0x20, 23, 20, 1);
        self.r.ok(&md, 16);
        raw_wq_qp(num, buf, dbr, log, log_stride)
    }

    /// The CREATE_SQ (`sq`, on `tisn`) or CREATE_RQ input of
    /// [`raw_wq_uidx`](Self::raw_wq_uidx), with its buffer and doorbell
    /// record (allocated here): for a test that sets more of the context.
    pub fn raw_wq_input(
        &mut self,
        sq: bool,
        cqn: u32,
        tisn: u32,
        log: u32,
        log_stride: u32,
        uidx: u32,
    ) -> (Vec<u8>, u64, u64) {
        let bytes = (1usize << (log + log_stride)).next_multiple_of(4096);
        let buf = self.mem(bytes, 0);
        let dbr = self.mem(64, 0);
        let pages = bytes / 4096;
        let mut m = inp(if sq { 0x904 } else { 0x908 }, 0, 0x110 + 8 * pages);
        setf(&mut m, 0x28, 23, 0, u64::from(cqn));
        setf(&mut m, 0x24, 23, 0, u64::from(uidx));
        if !sq {
            // `vsd`: VLAN tags stay in the frame (Linux mlx5_ib's default).
            setf(&mut m, 0x20, 28, 28, 1);
        }
        if sq {
            setf(&mut m, 0x20 + 0x2c, 23, 0, u64::from(tisn));
        }
        setf(&mut m, 0x50, 31, 28, 1);
        setf(&mut m, 0x58, 23, 0, u64::from(self.pd));
        setf(&mut m, 0x5c, 23, 0, u64::from(self.uar));
        put64(&mut m, 0x60, dbr);
        setf(&mut m, 0x70, 19, 16, u64::from(log_stride));
        setf(&mut m, 0x70, 4, 0, u64::from(log));
        put_pas(&mut m, 0x110, buf, pages);
        (m, buf, dbr)
    }

    /// A raw Ethernet SQ (with its TD, TIS and CQ) to put any frame on the
    /// wire.
    pub fn raw_sq(&mut self) -> (Qp, Cq) {
        let td = self.transport_domain();
        let tisn = self.tis(td);
        let cq = self.cq(8);
        let sq = self.raw_wq(true, cq.cqn, tisn, 6, 6);
        (sq, cq)
    }

    /// Sends `frame` (at most ~1000 bytes: inline headers) from a raw SQ.
    pub fn send_frame(&mut self, sq: &mut Qp, frame: &[u8]) {
        let w = Wr {
            eth: Some((0, frame.to_vec())),
            ..Wr::new(op::SEND).flags(0)
        };
        self.post_send(sq, &[w]);
    }
}

/// A RoCE v2 (IPv4) frame from `src` (port 1, GID index 0) to `dst` with a
/// BTH (`opcode`, `dqpn`, `psn`) and `body` after it, written from the RoCE
/// v2 and IBA header layouts independently of the emulator, with its ICRC
/// ([`icrc_v2_ipv4`]).
pub fn roce_v2(src: &Node, dst: &Node, opcode: u8, dqpn: u32, psn: u32, body: &[u8]) -> Vec<u8> {
    let ib = 12 + body.len() + 4;
    let mut f = vec![0u8; 14 + 20 + 8];
    f[0..6].copy_from_slice(&dst.mac(1));
    f[6..12].copy_from_slice(&src.mac(1));
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((28 + ib) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&src.gid(1)[12..]);
    f[30..34].copy_from_slice(&dst.gid(1)[12..]);
    f[34..36].copy_from_slice(&0xc000u16.to_be_bytes());
    f[36..38].copy_from_slice(&4791u16.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + ib) as u16).to_be_bytes());
    let mut bth = [0u8; 12];
    bth[0] = opcode;
    bth[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    bth[5..8].copy_from_slice(&dqpn.to_be_bytes()[1..]);
    bth[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    f.extend_from_slice(&bth);
    f.extend_from_slice(body);
    let c = icrc_v2_ipv4(&f[14..]);
    f.extend_from_slice(&c);
    f
}

/// Bitwise CRC-32 (Ethernet polynomial, reflected), continuing `c`.
pub fn crc32_bitwise(mut c: u32, data: &[u8]) -> u32 {
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            let lsb = c & 1;
            c >>= 1;
            if lsb == 1 {
                c ^= 0xedb8_8320;
            }
        }
    }
    c
}

/// The ICRC of a RoCE v2 over IPv4 packet, `pkt` running from the IPv4
/// header to the end of the pad (RoCE Annex A17: 8 bytes of ones for the
/// LRH; TOS, TTL, IP checksum, UDP checksum and BTH byte 4 set to ones),
/// as the 4 bytes on the wire. Written here from the annex, independently
/// of the emulator's implementation.
pub fn icrc_v2_ipv4(pkt: &[u8]) -> [u8; 4] {
    let mut m = pkt.to_vec();
    for i in [1, 8, 10, 11, 26, 27, 28 + 4] {
        m[i] = 0xff;
    }
    let mut all = vec![0xffu8; 8];
    all.extend_from_slice(&m);
    (!crc32_bitwise(!0, &all)).to_le_bytes()
}

/// Two HCAs connected port 1 to port 1.
pub fn pair() -> (Node, Node) {
    let a = Node::new(1, EmuConfig::default());
    let b = Node::new(2, EmuConfig::default());
    hca_emu::connect(&a.r.emu, 1, &b.r.emu, 1).unwrap();
    (a, b)
}

/// An RC (or UC) connection between `a` and `b`: a QP and CQ on each side,
/// connected with `attrs`.
pub fn connected(a: &mut Node, b: &mut Node, st: u32, attrs: &Attrs) -> (Qp, Cq, Qp, Cq) {
    let ca = a.cq(8);
    let cb = b.cq(8);
    let mut qa = a.qp(&QpSpec::new(st, &ca));
    let mut qb = b.qp(&QpSpec::new(st, &cb));
    connect_pair(a, &mut qa, b, &mut qb, attrs);
    (qa, ca, qb, cb)
}

/// Connects `qa` of `a` and `qb` of `b` to each other (port 1 to port 1)
/// with `attrs`: RESET -> INIT -> RTR -> RTS on both sides.
pub fn connect_pair(a: &mut Node, qa: &mut Qp, b: &mut Node, qb: &mut Qp, attrs: &Attrs) {
    let pa = a.path_to(b, 1, qb.qpn, 1);
    let pb = b.path_to(a, 1, qa.qpn, 1);
    a.connect(qa, &pa, attrs);
    b.connect(qb, &pb, attrs);
}

/// The [`Qp`] view of a raw work queue `num` (buffer `buf`, doorbell
/// record `dbr`, `2^log` entries of `2^log_stride` bytes), for the posting
/// helpers.
pub fn raw_wq_qp(num: u32, buf: u64, dbr: u64, log: u32, log_stride: u32) -> Qp {
    Qp {
        qpn: num,
        st: 0,
        buf,
        dbr,
        log_rq: log,
        rq_stride: 1 << log_stride,
        log_sq: log,
        srq: true,
        sq_pc: 0,
        rq_pc: 0,
        port: 1,
        bf: false,
        bf_toggle: false,
    }
}
