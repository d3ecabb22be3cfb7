//! Work-queue-entry segments, as the PRM (and rdma-core's `mlx5dv.h`) lays
//! them out.
//!
//! A send WQE is a sequence of 16-byte segments in 64-byte basic blocks
//! (WQEBBs): a control segment, then per transport a remote-address,
//! atomic, datagram (address vector) or Ethernet segment, then data
//! (pointer) segments or one inline segment. Every multi-byte field is
//! big-endian.
//!
//! Each builder here returns the segment's image as native-endian `u64`
//! words whose in-memory bytes are the device bytes (`Be64::to_raw`), so the
//! queues store a segment with two 64-bit stores and tests can compare byte
//! images ([`words_to_bytes`]).

use bitfield_struct::bitfield;
use platform::{Be32, Be64};

/// Size of a send WQE basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// Size of one WQE segment unit (`ds` counts these).
pub const SEG_UNIT: usize = 16;
/// `MLX5_INLINE_SEG`: set in an inline segment's byte count.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_INVALID_LKEY`: terminates a partly filled receive scatter list.
pub const INVALID_LKEY: u32 = 0x100;
/// `MLX5_EXTENDED_UD_AV`: set with the destination QPN in a datagram segment.
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// Length written in an atomic operation's data segment (`MLX5_ATOMIC_SIZE`).
pub const ATOMIC_SIZE: u32 = 8;
/// `MLX5_ETH_L2_INLINE_HEADER_SIZE`: the L2 header bytes a ConnectX-4
/// needs inline (14-byte Ethernet header plus a VLAN tag).
pub const ETH_L2_INLINE_HEADER_SIZE: usize = 18;
/// `MLX5_ETH_L2_MIN_HEADER_SIZE`: an Ethernet header without a VLAN tag.
pub const ETH_L2_MIN_HEADER_SIZE: usize = 14;

/// `fm_ce_se` bits of the control segment.
pub mod fm_ce_se {
    /// `MLX5_WQE_CTRL_CQ_UPDATE`: generate a CQE (signaled).
    pub const CQ_UPDATE: u8 = 0x08;
    /// `MLX5_WQE_CTRL_SOLICITED`: solicited event.
    pub const SOLICITED: u8 = 0x02;
    /// `MLX5_WQE_CTRL_FENCE`: strong (ordering) fence.
    pub const FENCE: u8 = 0x80;
    /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`: small fence.
    pub const SMALL_FENCE: u8 = 0x20;
}

/// Ethernet segment `cs_flags`.
pub mod cs_flags {
    /// `MLX5_ETH_WQE_L3_CSUM`: compute the IP header checksum.
    pub const L3_CSUM: u8 = 0x40;
    /// `MLX5_ETH_WQE_L4_CSUM`: compute the TCP/UDP checksum.
    pub const L4_CSUM: u8 = 0x80;
}

/// Send WQE opcodes (`MLX5_OPCODE_*`), byte 3 of the control segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// `MLX5_OPCODE_NOP`.
    Nop = 0x00,
    /// `MLX5_OPCODE_SEND_INVAL`.
    SendInval = 0x01,
    /// `MLX5_OPCODE_RDMA_WRITE`.
    RdmaWrite = 0x08,
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
    RdmaWriteImm = 0x09,
    /// `MLX5_OPCODE_SEND`.
    Send = 0x0a,
    /// `MLX5_OPCODE_SEND_IMM`.
    SendImm = 0x0b,
    /// `MLX5_OPCODE_TSO` (LSO).
    Tso = 0x0e,
    /// `MLX5_OPCODE_RDMA_READ`.
    RdmaRead = 0x10,
    /// `MLX5_OPCODE_ATOMIC_CS`.
    AtomicCs = 0x11,
    /// `MLX5_OPCODE_ATOMIC_FA`.
    AtomicFa = 0x12,
    /// `MLX5_OPCODE_ATOMIC_MASKED_CS`.
    AtomicMaskedCs = 0x14,
    /// `MLX5_OPCODE_ATOMIC_MASKED_FA`.
    AtomicMaskedFa = 0x15,
    /// `MLX5_OPCODE_LOCAL_INVAL`.
    LocalInval = 0x1b,
    /// `MLX5_OPCODE_UMR`.
    Umr = 0x25,
}

impl Opcode {
    /// The opcode for a value of control-segment byte 3 (or the `sop` byte
    /// of a requester CQE).
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::Nop,
            0x01 => Self::SendInval,
            0x08 => Self::RdmaWrite,
            0x09 => Self::RdmaWriteImm,
            0x0a => Self::Send,
            0x0b => Self::SendImm,
            0x0e => Self::Tso,
            0x10 => Self::RdmaRead,
            0x11 => Self::AtomicCs,
            0x12 => Self::AtomicFa,
            0x14 => Self::AtomicMaskedCs,
            0x15 => Self::AtomicMaskedFa,
            0x1b => Self::LocalInval,
            0x25 => Self::Umr,
            _ => return None,
        })
    }
}

/// Control segment dword 0: `opmod_idx_opcode` (PRM `opmod`, `wqe_index`,
/// `opcode`).
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CtrlOpmodIdxOpcode {
    /// Opcode modifier.
    pub opmod: u8,
    /// The 16-bit producer counter of the WQE (not the ring slot).
    pub wqe_index: u16,
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
}

/// Control segment dword 1: `qpn_ds`.
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CtrlQpnDs {
    /// QP (or SQ) number.
    #[bits(24)]
    pub qpn: u32,
    #[bits(2)]
    __: u8,
    /// WQE size in 16-byte units, control segment included.
    #[bits(6)]
    pub ds: u8,
}

/// Control segment dword 2: signature, `dci_stream_channel_id`, `fm_ce_se`.
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CtrlSigFmCeSe {
    /// WQE signature (0 unless `wq_sig`).
    pub signature: u8,
    /// DCI stream channel (DC only).
    pub dci_stream_channel_id: u16,
    /// Fence / completion / solicited bits, see [`fm_ce_se`].
    pub fm_ce_se: u8,
}

/// Packs two big-endian dwords (at byte offsets 0 and 4) into the raw `u64`
/// whose memory image is their bytes in order.
#[inline(always)]
pub const fn pair(hi: Be32, lo: Be32) -> u64 {
    Be64::new(((hi.get() as u64) << 32) | lo.get() as u64).to_raw()
}

/// Control segment (16 bytes): `opmod_idx_opcode`, `qpn_ds`, signature /
/// dci stream / `fm_ce_se`, immediate (or invalidation key), host order
/// `imm` written big-endian.
#[inline(always)]
pub fn ctrl_seg(opcode: u8, wqe_index: u16, qpn: u32, ds: u8, fm_ce_se: u8, imm: u32) -> [u64; 2] {
    let w0 = CtrlOpmodIdxOpcode::new()
        .with_opmod(0)
        .with_wqe_index(wqe_index)
        .with_opcode(opcode);
    let w1 = CtrlQpnDs::new()
        .with_qpn(qpn & 0xff_ffff)
        .with_ds(ds & 0x3f);
    let w2 = CtrlSigFmCeSe::new().with_fm_ce_se(fm_ce_se);
    [
        pair(w0.into_bits(), w1.into_bits()),
        pair(w2.into_bits(), Be32::new(imm)),
    ]
}

/// Remote address segment (16 bytes): be64 raddr, be32 rkey, be32 reserved.
#[inline(always)]
pub fn raddr_seg(remote_addr: u64, rkey: u32) -> [u64; 2] {
    [
        Be64::new(remote_addr).to_raw(),
        pair(Be32::new(rkey), Be32::ZERO),
    ]
}

/// Atomic segment (16 bytes): be64 swap_add, be64 compare.
#[inline(always)]
pub fn atomic_seg(swap_add: u64, compare: u64) -> [u64; 2] {
    [Be64::new(swap_add).to_raw(), Be64::new(compare).to_raw()]
}

/// Data (pointer) segment (16 bytes): be32 byte_count, be32 lkey, be64 addr.
#[inline(always)]
pub fn data_seg(byte_count: u32, lkey: u32, addr: u64) -> [u64; 2] {
    [
        pair(Be32::new(byte_count), Be32::new(lkey)),
        Be64::new(addr).to_raw(),
    ]
}

/// The receive-list terminator: byte_count 0, lkey `MLX5_INVALID_LKEY`,
/// addr 0.
#[inline(always)]
pub fn data_seg_end() -> [u64; 2] {
    data_seg(0, INVALID_LKEY, 0)
}

/// The first dword of an inline segment: `byte_count | MLX5_INLINE_SEG`.
#[inline(always)]
pub fn inline_header(len: u32) -> Be32 {
    Be32::new(len | INLINE_SEG)
}

/// Size in 16-byte units of an inline segment carrying `len` bytes (0 when
/// `len` is 0: rdma-core then writes no inline segment at all).
#[inline(always)]
pub const fn inline_seg_units(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + 4).div_ceil(SEG_UNIT)
    }
}

/// Size in 16-byte units of an Ethernet segment with `inline_len` bytes of
/// inline headers (the first two bytes live in the segment itself at offset
/// 14).
#[inline(always)]
pub const fn eth_seg_units(inline_len: usize) -> usize {
    (14 + inline_len).div_ceil(SEG_UNIT)
}

/// The first 16 bytes of an Ethernet segment (without inline header bytes):
/// 4 reserved, cs_flags, reserved, be16 mss, 4 reserved, be16
/// inline_hdr_sz; bytes 14..16 are the first inline header bytes and are
/// written by the caller.
#[inline(always)]
pub fn eth_seg_head(cs_flags: u8, mss: u16, inline_hdr_sz: u16) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[4] = cs_flags;
    b[6..8].copy_from_slice(&mss.to_be_bytes());
    b[12..14].copy_from_slice(&inline_hdr_sz.to_be_bytes());
    b
}

/// The memory image of segment words.
pub fn words_to_bytes<const N: usize>(words: &[u64; N], out: &mut [u8]) {
    for (i, w) in words.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
}

/// SRQ WQE next segment (16 bytes): 2 reserved, be16 next_wqe_index,
/// signature, 11 reserved.
#[inline(always)]
pub fn srq_next_seg(next_wqe_index: u16) -> [u64; 2] {
    [pair(Be32::new(u32::from(next_wqe_index)), Be32::ZERO), 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img<const N: usize>(w: [u64; N]) -> [u8; 16] {
        let mut b = [0u8; 16];
        words_to_bytes(&w, &mut b);
        b
    }

    #[test]
    fn segment_images_match_facts() {
        assert_eq!(
            img(ctrl_seg(0x08, 0x3ff, 0x123, 3, 0x08, 0xdead_beef)),
            [
                0, 0x03, 0xff, 0x08, 0, 0x01, 0x23, 0x03, 0, 0, 0, 0x08, 0xde, 0xad, 0xbe, 0xef
            ]
        );
        assert_eq!(
            img(raddr_seg(0x0a0b_0c0d_0e0f_1011, 0x0012_3402)),
            [10, 11, 12, 13, 14, 15, 16, 17, 0, 0x12, 0x34, 2, 0, 0, 0, 0]
        );
        assert_eq!(
            img(data_seg(0x1000, 0xabcd01, 0x1122_3344_5566_7788)),
            [
                0, 0, 0x10, 0, 0, 0xab, 0xcd, 1, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88
            ]
        );
        assert_eq!(img(data_seg_end())[4..8], [0, 0, 1, 0]);
        assert_eq!(img(atomic_seg(1, 2))[7], 1);
        assert_eq!(img(atomic_seg(1, 2))[15], 2);
        assert_eq!(inline_header(0x64).to_bytes(), [0x80, 0, 0, 0x64]);
        assert_eq!(img(srq_next_seg(0x1234))[2..4], [0x12, 0x34]);
        assert_eq!(inline_seg_units(0), 0);
        assert_eq!(inline_seg_units(12), 1);
        assert_eq!(inline_seg_units(16), 2);
        assert_eq!(inline_seg_units(44), 3);
        assert_eq!(eth_seg_units(18), 2);
        assert_eq!(eth_seg_units(0), 1);
        assert_eq!(eth_seg_units(19), 3);
        let e = eth_seg_head(cs_flags::L3_CSUM | cs_flags::L4_CSUM, 0, 18);
        assert_eq!(e, [0, 0, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 18]);
    }

    #[test]
    fn ctrl_words_by_shifts_equal_the_bitfields() {
        // The send fast path builds `opmod_idx_opcode | qpn_ds` with shifts.
        let (idx, op, qpn, ds) = (0xfffeu16, 0x0au8, 0xabcdefu32, 0x3fu8);
        let shifts = ((u64::from(idx) << 8 | u64::from(op)) << 32
            | u64::from(qpn << 8 | u32::from(ds)))
        .to_be();
        assert_eq!(ctrl_seg(op, idx, qpn, ds, 0, 0)[0], shifts);
        let fm_imm = (u64::from(0x88u8) << 32 | 0xdead_beef).to_be();
        assert_eq!(ctrl_seg(op, idx, qpn, ds, 0x88, 0xdead_beef)[1], fm_imm);
    }

    #[test]
    fn ctrl_fields_round_trip() {
        let w = CtrlQpnDs::new().with_qpn(0xabcdef).with_ds(0x3f);
        assert_eq!(w.into_bits().get(), 0xabcd_ef3f);
        assert_eq!(Opcode::from_u8(0x11), Some(Opcode::AtomicCs));
        assert_eq!(Opcode::from_u8(0x7f), None);
    }
}
