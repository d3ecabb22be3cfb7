//! UAR doorbells: the send-queue doorbell / BlueFlame register and the CQ
//! doorbell.
//!
//! A UAR page holds, at page offset 0x20, the CQ doorbell (`MLX5_CQ_DOORBELL`)
//! and from 0x800 on the BlueFlame registers. A QP is given one register of
//! `bf_reg_size` bytes (512 on current kernels): two halves of `buf_size` =
//! 256 bytes at 0x800 and 0x900, used alternately (`bf->offset ^=
//! buf_size` after every doorbell). A doorbell is the first 8 bytes of the
//! last WQE's control segment written with one 64-bit store; a BlueFlame
//! doorbell copies the whole WQE (rounded up to 64 bytes, at most
//! `buf_size`) into the register instead.

use platform::{Be64, Mmio};

use crate::Error;

/// `MLX5_CQ_DOORBELL`: page offset of the CQ arm doorbell.
pub const CQ_DOORBELL: usize = 0x20;
/// Page offset of the first BlueFlame register of a dynamically allocated
/// UAR (as rdma-core's context sets up `bfs[]`).
pub const BF_REG_OFFSET: usize = 0x800;
/// `bf_reg_size` of current firmware and kernels: 512 bytes, two halves.
pub const BF_REG_SIZE: usize = 512;

/// Where a send queue rings its doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfConfig {
    /// Offset in the register window of the BlueFlame register (the UAR
    /// page's offset plus 0x800 for the first register).
    pub reg_offset: usize,
    /// Half size of the register (`bf_reg_size / 2`, 256): doorbells
    /// alternate between `reg_offset` and `reg_offset + buf_size`.
    pub buf_size: usize,
    /// The register can take BlueFlame copies (rdma-core: `uuarn != 0`).
    /// When false only 8-byte doorbells are written.
    pub blueflame: bool,
    /// Copy every single-WQE post by BlueFlame, not only inline ones
    /// (rdma-core's `MLX5_POST_SEND_PREFER_BF`).
    pub prefer_bf: bool,
}

impl BfConfig {
    /// The configuration of the golden vectors: register at 0x800 of a
    /// UAR page at `page_offset`, halves of 256 bytes, BlueFlame capable.
    pub const fn new(page_offset: usize) -> Self {
        Self {
            reg_offset: page_offset + BF_REG_OFFSET,
            buf_size: BF_REG_SIZE / 2,
            blueflame: true,
            prefer_bf: false,
        }
    }
}

/// A send queue's doorbell register: the window, its offsets (checked once
/// here) and the alternating BlueFlame half.
///
/// The current register offset is kept as a `u32` that is a multiple of 8,
/// and the two halves are swapped with one XOR (`cur ^= toggle`, where
/// `toggle = reg ^ (reg + buf_size)`), so the doorbell store needs no
/// address arithmetic and the window's own bounds check reduces to one
/// compare (the offset cannot overflow and is known to be aligned).
#[derive(Debug)]
pub(crate) struct SqDoorbell<M: Mmio> {
    pub(crate) mmio: M,
    /// Offset of the register half the next doorbell goes to.
    cur: u32,
    /// `reg ^ (reg + buf_size)`.
    toggle: u32,
    /// Offset of the first half.
    reg: u32,
    pub(crate) buf_size: u32,
    pub(crate) blueflame: bool,
    /// `blueflame && prefer_bf`: single posts of any kind go by BlueFlame.
    pub(crate) bf_always: bool,
}

impl<M: Mmio> SqDoorbell<M> {
    pub(crate) fn new(mmio: M, cfg: BfConfig) -> Result<Self, (Error, M)> {
        if cfg.buf_size % 64 != 0 || cfg.buf_size == 0 || cfg.buf_size > 1 << 16 {
            return Err((
                Error::InvalidGeometry(
                    "BlueFlame buf_size must be a non-zero multiple of 64, at most 64 KiB",
                ),
                mmio,
            ));
        }
        // Both halves must be inside the window, 8-byte aligned, and their
        // offsets must fit 32 bits. Checked against `len` itself (not the
        // overridable `check`): this is what `ring` relies on.
        let end = cfg.reg_offset.checked_add(2 * cfg.buf_size);
        let ok = end.is_some_and(|e| e <= mmio.len() && e <= u32::MAX as usize)
            && cfg.reg_offset % 8 == 0
            && mmio.check(cfg.reg_offset, 8).is_ok()
            && mmio.check(cfg.reg_offset + 2 * cfg.buf_size - 8, 8).is_ok();
        if !ok {
            let len = mmio.len();
            return Err((
                Error::UarOutOfRange {
                    offset: cfg.reg_offset,
                    width: 2 * cfg.buf_size,
                    len,
                },
                mmio,
            ));
        }
        let reg = cfg.reg_offset as u32;
        let buf_size = cfg.buf_size as u32;
        Ok(Self {
            mmio,
            cur: reg,
            toggle: reg ^ (reg + buf_size),
            reg,
            buf_size,
            blueflame: cfg.blueflame,
            bf_always: cfg.blueflame && cfg.prefer_bf,
        })
    }

    /// The offset of the register half the next doorbell goes to.
    #[inline(always)]
    pub(crate) fn cur(&self) -> usize {
        self.cur as usize
    }

    /// Writes the 8-byte doorbell `ctrl0` (the memory image of the first
    /// control-segment word) to the current register half: one store, no
    /// bounds check.
    #[inline(always)]
    pub(crate) fn ring(&self, ctrl0: u64) {
        let off = self.cur();
        // SAFETY: `cur` is `reg` or `reg + buf_size`, both multiples of 8
        // (`reg % 8 == 0` and `buf_size % 64 == 0`, checked in `new`), and
        // `cur + 8 <= reg + 2 * buf_size <= mmio.len()` (checked in `new`
        // against `len`, which does not change while the window exists).
        unsafe { self.mmio.write64_unchecked(off, Be64::from_raw(ctrl0)) }
    }

    /// `bf->offset`: 0 or `buf_size`.
    pub(crate) fn bf_offset(&self) -> usize {
        (self.cur - self.reg) as usize
    }

    /// Switches to the other half (`bf->offset ^= bf->buf_size`).
    #[inline(always)]
    pub(crate) fn flip(&mut self) {
        self.cur ^= self.toggle;
    }
}

/// Checks a CQ doorbell offset once at construction.
pub(crate) fn check_cq_doorbell<M: Mmio>(mmio: &M, offset: usize) -> Result<(), Error> {
    mmio.check(offset, 8).map_err(|_| Error::UarOutOfRange {
        offset,
        width: 8,
        len: mmio.len(),
    })
}
