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

use platform::{Be64, BlueFlame, Mmio};

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

/// A send queue's doorbell register: platform's [`BlueFlame`] pair (the
/// offsets checked once there) and how the queue uses it.
#[derive(Debug)]
pub(crate) struct SqDoorbell<M: Mmio> {
    pub(crate) bf: BlueFlame<M>,
    pub(crate) blueflame: bool,
    /// `blueflame && prefer_bf`: single posts of any kind go by BlueFlame.
    pub(crate) bf_always: bool,
}

impl<M: Mmio> SqDoorbell<M> {
    pub(crate) fn new(mmio: M, cfg: BfConfig) -> Result<Self, (Error, M)> {
        match BlueFlame::new(mmio, cfg.reg_offset, cfg.buf_size) {
            Ok(bf) => Ok(Self {
                bf,
                blueflame: cfg.blueflame,
                bf_always: cfg.blueflame && cfg.prefer_bf,
            }),
            Err((platform::Error::InvalidArgument(_), mmio)) => Err((
                Error::InvalidGeometry(
                    "BlueFlame buf_size must be a non-zero multiple of 64, at most 64 KiB",
                ),
                mmio,
            )),
            Err((_, mmio)) => {
                let len = mmio.len();
                Err((
                    Error::UarOutOfRange {
                        offset: cfg.reg_offset,
                        width: cfg.buf_size.saturating_mul(2),
                        len,
                    },
                    mmio,
                ))
            }
        }
    }

    /// Bytes of one BlueFlame buffer.
    #[inline(always)]
    pub(crate) fn buf_size(&self) -> u32 {
        self.bf.buf_size() as u32
    }

    /// Writes the 8-byte doorbell `ctrl0` (the memory image of the first
    /// control-segment word) to the current buffer: one store, no check.
    #[inline(always)]
    pub(crate) fn ring(&self, ctrl0: u64) {
        self.bf.ring(Be64::from_raw(ctrl0));
    }

    /// Switches to the other buffer (`bf->offset ^= bf->buf_size`).
    #[inline(always)]
    pub(crate) fn flip(&mut self) {
        self.bf.flip();
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
