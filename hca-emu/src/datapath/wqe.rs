//! Work queue entries as the PRM lays them out (decoded here from bytes,
//! independently of `verbs-core`): send WQEs of 16-byte segments in 64-byte
//! basic blocks (control, remote address, atomic, datagram/address vector,
//! Ethernet, data and inline segments) and receive WQEs (data segments, an
//! SRQ WQE starting with a next segment).

/// Send opcodes (control segment byte 3, `MLX5_OPCODE_*`). The engine
/// does not execute SEND_INVAL, TSO, the masked atomics, LOCAL_INVAL and
/// UMR (local QP operation error).
#[allow(dead_code)]
pub(crate) mod opcode {
    pub const NOP: u8 = 0x00;
    pub const SEND_INVAL: u8 = 0x01;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const TSO: u8 = 0x0e;
    pub const RDMA_READ: u8 = 0x10;
    pub const ATOMIC_CS: u8 = 0x11;
    pub const ATOMIC_FA: u8 = 0x12;
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    pub const LOCAL_INVAL: u8 = 0x1b;
    pub const UMR: u8 = 0x25;
}

/// `fm_ce_se` bits.
pub(crate) mod fm_ce_se {
    /// Solicited event.
    pub const SE: u8 = 0x02;
    /// CE = 2: a CQE is requested (CE = 3 also asks for an EQE).
    pub const CQ_UPDATE: u8 = 0x08;
    /// The fence mode field (bits 7:5): any non-zero mode orders the WQE
    /// behind outstanding RDMA READs and atomics.
    pub const FENCE_MASK: u8 = 0xe0;
}

/// The inline flag of a data segment's byte count.
pub(crate) const INLINE_SEG: u32 = 0x8000_0000;
/// The lkey that ends a receive WQE's scatter list (`MLX5_INVALID_LKEY`).
pub(crate) const INVALID_LKEY: u32 = 0x100;
/// A data segment byte count of 0 means 2 GiB.
pub(crate) const ZERO_LENGTH_MEANS: u64 = 1 << 31;

/// Which queue a send WQE was posted to (what opcodes and segments it may
/// have).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SqKind {
    Rc,
    Uc,
    Ud,
    /// A raw Ethernet send queue (SQ object).
    Raw,
}

/// One gather entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Sge {
    /// A data segment.
    Data { addr: u64, len: u64, lkey: u32 },
    /// Inline data.
    Inline(Vec<u8>),
}

impl Sge {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Sge::Data { len, .. } => *len,
            Sge::Inline(v) => v.len() as u64,
        }
    }
}

/// The address vector of a UD WQE (`mlx5_wqe_av`, 48 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Av {
    pub(crate) qkey: u32,
    pub(crate) dqpn: u32,
    /// `stat_rate_sl`.
    pub(crate) stat_rate_sl: u8,
    /// `rlid` (RoCE v2: the UDP source port).
    pub(crate) rlid: u16,
    pub(crate) rmac: [u8; 6],
    pub(crate) tclass: u8,
    pub(crate) hop_limit: u8,
    /// `grh_gid_fl` bit 30 (IB GRH; implicit on RoCE).
    pub(crate) grh: bool,
    /// `grh_gid_fl` bits 27:20.
    pub(crate) sgid_index: u8,
    /// `grh_gid_fl` bits 19:0.
    pub(crate) flow_label: u32,
    pub(crate) rgid: [u8; 16],
}

/// The Ethernet segment of a raw packet send WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EthSeg {
    /// 0x40 L3 checksum, 0x80 L4 checksum.
    pub(crate) cs_flags: u8,
    pub(crate) mss: u16,
    /// The inline packet headers.
    pub(crate) inline_hdr: Vec<u8>,
}

/// A decoded send WQE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendWqe {
    /// `wqe_index`: the 16-bit counter of its first WQEBB.
    pub(crate) index: u16,
    /// WQEBBs it occupies.
    pub(crate) nbb: u16,
    pub(crate) opcode: u8,
    pub(crate) opmod: u8,
    pub(crate) fm_ce_se: u8,
    /// Immediate data as on the wire (big-endian bytes as a u32).
    pub(crate) imm: u32,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) av: Option<Av>,
    pub(crate) eth: Option<EthSeg>,
    pub(crate) sg: Vec<Sge>,
}

impl SendWqe {
    pub(crate) fn signaled(&self) -> bool {
        self.fm_ce_se & fm_ce_se::CQ_UPDATE != 0
    }

    pub(crate) fn solicited(&self) -> bool {
        self.fm_ce_se & fm_ce_se::SE != 0
    }

    pub(crate) fn fenced(&self) -> bool {
        self.fm_ce_se & fm_ce_se::FENCE_MASK != 0
    }

    /// Total length of the gather list.
    pub(crate) fn len(&self) -> u64 {
        self.sg.iter().map(Sge::len).sum()
    }

    pub(crate) fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.opcode,
            opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA
        )
    }
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

pub(crate) fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

pub(crate) fn be64(b: &[u8], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(x)
}

/// The fields of a control segment that locate the WQE: (wqe_index,
/// opcode, qpn, ds).
pub(crate) fn ctrl_fields(c: &[u8]) -> (u16, u8, u32, u8) {
    let w0 = be32(c, 0);
    let w1 = be32(c, 4);
    (
        ((w0 >> 8) & 0xffff) as u16,
        w0 as u8,
        w1 >> 8,
        (w1 & 0x3f) as u8,
    )
}

/// WQEBBs a WQE of `ds` 16-byte units occupies (at least one).
pub(crate) fn wqebbs(ds: u8) -> u16 {
    u16::from(ds).div_ceil(4).max(1)
}

/// Decodes a send WQE. `b` holds its `ds * 16` bytes (the caller read them
/// across the ring's wrap). Checks that the control segment names this QP
/// and the expected WQE index, that the opcode is one the queue type
/// executes, and that the segments fit in `ds`.
pub(crate) fn parse_send(
    b: &[u8],
    kind: SqKind,
    expect_index: u16,
    expect_qpn: u32,
) -> Result<SendWqe, String> {
    if b.len() < 16 {
        return Err("WQE shorter than a control segment".into());
    }
    let (index, op, qpn, ds) = ctrl_fields(b);
    let opmod = b[0];
    if ds == 0 {
        return Err("ds is 0".into());
    }
    let len = usize::from(ds) * 16;
    if b.len() < len {
        return Err(format!("ds {ds} exceeds the bytes read"));
    }
    if qpn != expect_qpn {
        return Err(format!(
            "control segment names QP {qpn:#x}, the doorbell rang QP {expect_qpn:#x}"
        ));
    }
    if index != expect_index {
        return Err(format!(
            "wqe_index {index:#x} is not the send queue position {expect_index:#x}"
        ));
    }
    use opcode::*;
    let allowed: &[u8] = match kind {
        SqKind::Rc => &[
            NOP,
            RDMA_WRITE,
            RDMA_WRITE_IMM,
            SEND,
            SEND_IMM,
            RDMA_READ,
            ATOMIC_CS,
            ATOMIC_FA,
        ],
        SqKind::Uc => &[NOP, RDMA_WRITE, RDMA_WRITE_IMM, SEND, SEND_IMM],
        SqKind::Ud => &[NOP, SEND, SEND_IMM],
        SqKind::Raw => &[NOP, SEND],
    };
    if !allowed.contains(&op) {
        return Err(format!(
            "opcode {op:#04x} is not executed on a {kind:?} send queue"
        ));
    }
    let mut w = SendWqe {
        index,
        nbb: wqebbs(ds),
        opcode: op,
        opmod,
        fm_ce_se: b[11],
        imm: be32(b, 12),
        ..SendWqe::default()
    };
    let mut o = 16;
    let need = |o: usize, n: usize, what: &str| -> Result<(), String> {
        if o + n > len {
            Err(format!("ds {ds} too small for the {what} segment"))
        } else {
            Ok(())
        }
    };
    if op == NOP {
        return Ok(w);
    }
    if kind == SqKind::Ud {
        need(o, 48, "datagram")?;
        let a = &b[o..o + 48];
        let dqp = be32(a, 8);
        let gfl = be32(a, 28);
        let mut rmac = [0u8; 6];
        rmac.copy_from_slice(&a[20..26]);
        let mut rgid = [0u8; 16];
        rgid.copy_from_slice(&a[32..48]);
        w.av = Some(Av {
            qkey: be32(a, 0),
            dqpn: dqp & 0xff_ffff,
            stat_rate_sl: a[12],
            rlid: be16(a, 14),
            rmac,
            tclass: a[26],
            hop_limit: a[27],
            grh: gfl & (1 << 30) != 0,
            sgid_index: ((gfl >> 20) & 0xff) as u8,
            flow_label: gfl & 0xf_ffff,
            rgid,
        });
        o += 48;
    }
    if kind == SqKind::Raw {
        need(o, 16, "Ethernet")?;
        let e = &b[o..o + 16];
        let hdr_sz = usize::from(be16(e, 12) & 0x3ff);
        let seg = (14 + hdr_sz).div_ceil(16) * 16;
        need(o, seg, "Ethernet (inline headers)")?;
        w.eth = Some(EthSeg {
            cs_flags: e[4],
            mss: be16(e, 6),
            inline_hdr: b[o + 14..o + 14 + hdr_sz].to_vec(),
        });
        o += seg.max(16);
    }
    if matches!(
        op,
        RDMA_WRITE | RDMA_WRITE_IMM | RDMA_READ | ATOMIC_CS | ATOMIC_FA
    ) {
        need(o, 16, "remote address")?;
        w.raddr = be64(b, o);
        w.rkey = be32(b, o + 8);
        o += 16;
    }
    if matches!(op, ATOMIC_CS | ATOMIC_FA) {
        need(o, 16, "atomic")?;
        w.swap_add = be64(b, o);
        w.compare = be64(b, o + 8);
        o += 16;
    }
    while o < len {
        let bc = be32(b, o);
        if bc & INLINE_SEG != 0 {
            let n = (bc & !INLINE_SEG) as usize;
            if o + 4 + n > len {
                return Err(format!("inline data of {n} bytes overruns ds {ds}"));
            }
            w.sg.push(Sge::Inline(b[o + 4..o + 4 + n].to_vec()));
            o += (4 + n).div_ceil(16) * 16;
        } else {
            let l = if bc == 0 {
                ZERO_LENGTH_MEANS
            } else {
                u64::from(bc)
            };
            w.sg.push(Sge::Data {
                addr: be64(b, o + 8),
                len: l,
                lkey: be32(b, o + 4),
            });
            o += 16;
        }
    }
    if matches!(op, ATOMIC_CS | ATOMIC_FA)
        && !(w.sg.len() == 1 && matches!(w.sg[0], Sge::Data { .. }))
    {
        return Err("an atomic WQE needs exactly one data segment".into());
    }
    if op == RDMA_READ && w.sg.iter().any(|s| matches!(s, Sge::Inline(_))) {
        return Err("RDMA READ with an inline segment".into());
    }
    Ok(w)
}

/// One scatter entry of a receive WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rse {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) lkey: u32,
}

/// Decodes the scatter list of a receive WQE (`b` = its data segments):
/// up to the first data segment with the invalid lkey 0x100, or the end.
/// An inline flag is malformed.
pub(crate) fn parse_recv(b: &[u8]) -> Result<Vec<Rse>, String> {
    let mut v = Vec::new();
    for s in b.chunks_exact(16) {
        let bc = be32(s, 0);
        let lkey = be32(s, 4);
        if lkey == INVALID_LKEY {
            break;
        }
        if bc & INLINE_SEG != 0 {
            return Err("inline flag in a receive data segment".into());
        }
        v.push(Rse {
            addr: be64(s, 8),
            len: if bc == 0 {
                ZERO_LENGTH_MEANS
            } else {
                u64::from(bc)
            },
            lkey,
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// WQE bytes of libmlx5 (data/prm/libmlx5-vectors.json) decode to the
    /// work requests that produced them.
    #[test]
    fn golden_wqes_decode() {
        let fa = hex(
            "000000120001230400000008000000000a0b0c0d0e0f10100012340200000000\
             000000000000000500000000000000000000000800abcd011122334455667788",
        );
        let w = parse_send(&fa, SqKind::Rc, 0, 0x123).unwrap();
        assert_eq!(w.opcode, opcode::ATOMIC_FA);
        assert!(w.signaled());
        assert_eq!((w.raddr, w.rkey), (0x0a0b_0c0d_0e0f_1010, 0x0012_3402));
        assert_eq!(w.swap_add, 5);
        assert_eq!(
            w.sg,
            vec![Sge::Data {
                addr: 0x1122_3344_5566_7788,
                len: 8,
                lkey: 0x00ab_cd01
            }]
        );
        let inl = hex("0000000a0001230200000008000000008000000c000102030405060708090a0b");
        let w = parse_send(&inl, SqKind::Rc, 0, 0x123).unwrap();
        assert_eq!(w.sg, vec![Sge::Inline((0..12).collect())]);
        let ud = hex(
            "0000000a0001240500000008000000001111111100000000800004560600e5b3\
             0000000002000000000120400015a5a500000000000000000000ffffc0a80102\
             0000010000abcd011122334455667788",
        );
        let w = parse_send(&ud, SqKind::Ud, 0, 0x124).unwrap();
        let av = w.av.clone().unwrap();
        assert_eq!((av.qkey, av.dqpn, av.rlid), (0x1111_1111, 0x456, 0xe5b3));
        assert_eq!(av.rmac, [2, 0, 0, 0, 0, 1]);
        assert_eq!((av.tclass, av.hop_limit, av.sgid_index), (0x20, 64, 1));
        assert_eq!(av.flow_label, 0x5a5a5);
        assert_eq!(w.len(), 256);
        // Wrong QP, wrong index, opcode not for the type, ds too small.
        assert!(parse_send(&fa, SqKind::Rc, 0, 0x124).is_err());
        assert!(parse_send(&fa, SqKind::Rc, 1, 0x123).is_err());
        assert!(parse_send(&fa, SqKind::Uc, 0, 0x123).is_err());
        assert!(parse_send(&fa[..48], SqKind::Rc, 0, 0x123).is_err());
        let recv = hex("0000100000abcd0111223344556677880000000000000100\
             0000000000000000");
        assert_eq!(
            parse_recv(&recv).unwrap(),
            vec![Rse {
                addr: 0x1122_3344_5566_7788,
                len: 0x1000,
                lkey: 0x00ab_cd01
            }]
        );
    }
}
