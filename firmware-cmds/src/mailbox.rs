//! Command mailboxes (`cmd_if_box`, 576 bytes): the chain that carries the
//! part of a command input or output beyond its first 16 bytes.
//!
//! Block `i` carries message bytes `16 + 512 * i ..`; its trailer holds the
//! pointer to the next block, its number in the chain, the command's token
//! and, when the firmware checks them (`cmdif_checksum`), two signatures.
//!
//! [`InputChain`] cuts a message of any length into an inline part and
//! blocks; [`OutputChain`] checks the blocks of an answer one by one and hands
//! back the message bytes they carry.

use crate::Error;
use crate::cmdq::{INLINE_SIZE, check_align, xor8};
use crate::command::Encode;

/// Data bytes per block.
pub const MAILBOX_DATA_SIZE: usize = 512;
/// Size of a block including its trailer.
pub const MAILBOX_BLOCK_SIZE: usize = 576;
/// Blocks are 1 KiB aligned (`next_pointer` leaves bits 9:0 reserved).
pub const MAILBOX_ALIGN: u64 = 1 << 10;

crate::prm_struct! {
    /// A command mailbox block (`cmd_if_box`).
    pub struct CmdIfBox("cmd_if_box", 576) {
        /// 512 bytes of the message.
        mailbox_data: [u8; 512] = 0x000,
        /// Next block pointer, high half.
        next_pointer_63_32: u32 = 0x230[31:0],
        /// Next block pointer, bits 31:10.
        next_pointer_31_10: u32 = 0x234[31:10],
        /// Position of this block in the chain, from 0.
        block_number: u32 = 0x238[31:0],
        /// The command's token.
        token: u8 = 0x23c[23:16],
        /// Makes the XOR of bytes 0x200..0x23f 0xff.
        ctrl_signature: u8 = 0x23c[15:8],
        /// Makes the XOR of bytes 0x000..0x23f 0xff.
        signature: u8 = 0x23c[7:0],
    }
}

/// Number of mailbox blocks a message of `len` bytes needs.
pub const fn blocks_for(len: usize) -> usize {
    len.saturating_sub(INLINE_SIZE).div_ceil(MAILBOX_DATA_SIZE)
}

impl CmdIfBox {
    /// The next-block pointer.
    pub fn next_pointer(&self) -> u64 {
        (u64::from(self.get(Self::next_pointer_63_32)) << 32)
            | (u64::from(self.get(Self::next_pointer_31_10)) << 10)
    }

    /// Sets the next-block pointer (1 KiB aligned, 0 for the last block).
    pub fn set_next_pointer(&mut self, addr: u64) -> Result<&mut Self, Error> {
        check_align("mailbox next pointer", addr, MAILBOX_ALIGN)?;
        self.set(Self::next_pointer_63_32, (addr >> 32) as u32)?
            .set(
                Self::next_pointer_31_10,
                ((addr & 0xffff_ffff) >> 10) as u32,
            )
    }

    /// The 512 data bytes.
    pub fn data(&self) -> &[u8] {
        &self.0[..MAILBOX_DATA_SIZE]
    }

    /// Computes `ctrl_signature` (over the trailer) and then `signature` (over
    /// the whole block), each making its bytes XOR to 0xff.
    pub fn sign(&mut self) {
        self.0[0x23e] = 0;
        self.0[0x23f] = 0;
        self.0[0x23e] = !xor8(&self.0[MAILBOX_DATA_SIZE..MAILBOX_BLOCK_SIZE - 1]);
        self.0[0x23f] = !xor8(&self.0[..MAILBOX_BLOCK_SIZE - 1]);
    }

    /// Checks both signatures.
    pub fn check_signatures(&self) -> Result<(), Error> {
        let ctrl = xor8(&self.0[MAILBOX_DATA_SIZE..MAILBOX_BLOCK_SIZE - 1]);
        if ctrl != 0xff {
            return Err(Error::BadSignature {
                what: "mailbox block",
                which: "ctrl_signature",
                xor: ctrl,
            });
        }
        let all = xor8(&self.0);
        if all != 0xff {
            return Err(Error::BadSignature {
                what: "mailbox block",
                which: "signature",
                xor: all,
            });
        }
        Ok(())
    }

    /// Checks that this is block `index` of the command with `token`, and
    /// its signatures when `check_signatures` is set.
    pub fn check(&self, index: u32, token: u8, check_signatures: bool) -> Result<(), Error> {
        let found = self.get(Self::block_number);
        if found != index {
            return Err(Error::BadBlockNumber { index, found });
        }
        let t = self.get(Self::token);
        if t != token {
            return Err(Error::BadToken {
                what: "mailbox block",
                expected: token,
                found: t,
            });
        }
        if check_signatures {
            self.check_signatures()?;
        }
        Ok(())
    }
}

/// Cuts a command message into the 16 inline bytes of the queue entry and
/// mailbox blocks.
///
/// ```
/// use firmware_cmds::command::Encode;
/// use firmware_cmds::mailbox::InputChain;
///
/// let msg = [7u8; 600];
/// let chain = InputChain::new(&msg[..], 0x2b, false);
/// assert_eq!(chain.num_blocks(), 2);
/// let b1 = chain.block(1, 0).unwrap();
/// assert_eq!(&b1.data()[..72], &[7u8; 72][..]);
/// assert_eq!(&b1.data()[72..], &[0u8; 440][..]);
/// ```
pub struct InputChain<'a, E: Encode + ?Sized> {
    msg: &'a E,
    token: u8,
    signed: bool,
}

impl<'a, E: Encode + ?Sized> InputChain<'a, E> {
    /// A chain for `msg` with `token`; `signed` computes block signatures.
    pub fn new(msg: &'a E, token: u8, signed: bool) -> Self {
        Self { msg, token, signed }
    }

    /// The message length, as the entry's `input_length`.
    pub fn len(&self) -> usize {
        self.msg.encoded_len()
    }

    /// Whether the message is empty (never the case for a real command).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of blocks needed.
    pub fn num_blocks(&self) -> usize {
        blocks_for(self.len())
    }

    /// The first 16 bytes (zero-padded).
    pub fn inline(&self) -> [u8; INLINE_SIZE] {
        let mut b = [0u8; INLINE_SIZE];
        self.msg.encode_range(0, &mut b);
        b
    }

    /// Block `index`, pointing at `next` (0 for the last block).
    pub fn block(&self, index: usize, next: u64) -> Result<CmdIfBox, Error> {
        if index >= self.num_blocks() {
            return Err(Error::BadLength {
                what: "mailbox block index",
                len: index,
                reason: "past the end of the chain",
            });
        }
        let mut b = CmdIfBox::new();
        self.msg.encode_range(
            INLINE_SIZE + index * MAILBOX_DATA_SIZE,
            &mut b.0[..MAILBOX_DATA_SIZE],
        );
        b.set_next_pointer(next)?;
        b.set(CmdIfBox::block_number, index as u32)?
            .set(CmdIfBox::token, self.token)?;
        if self.signed {
            b.sign();
        }
        Ok(b)
    }
}

/// Checks the blocks of a command output, in order, and hands back the
/// message bytes each carries.
///
/// ```
/// use firmware_cmds::mailbox::{CmdIfBox, OutputChain};
///
/// let mut chain = OutputChain::new(16 + 8, 0x2b, false);
/// let mut b = CmdIfBox::new();
/// b.set(CmdIfBox::token, 0x2b)?;
/// b.set(CmdIfBox::mailbox_data, [1u8; 512])?;
/// assert_eq!(chain.push(&b)?, &[1u8; 8][..]);
/// chain.finish()?;
/// # Ok::<(), firmware_cmds::Error>(())
/// ```
#[derive(Debug)]
pub struct OutputChain {
    len: usize,
    token: u8,
    check_signatures: bool,
    next_index: usize,
}

impl OutputChain {
    /// Expects an output of `len` bytes (the entry's `output_length`).
    pub fn new(len: usize, token: u8, check_signatures: bool) -> Self {
        Self {
            len,
            token,
            check_signatures,
            next_index: 0,
        }
    }

    /// Number of blocks the output occupies.
    pub fn num_blocks(&self) -> usize {
        blocks_for(self.len)
    }

    /// Checks the next block and returns the message bytes it carries.
    pub fn push<'b>(&mut self, block: &'b CmdIfBox) -> Result<&'b [u8], Error> {
        let index = self.next_index;
        if index >= self.num_blocks() {
            return Err(Error::BadLength {
                what: "output mailbox chain",
                len: self.len,
                reason: "more blocks than the output length needs",
            });
        }
        block.check(index as u32, self.token, self.check_signatures)?;
        self.next_index += 1;
        let start = INLINE_SIZE + index * MAILBOX_DATA_SIZE;
        let n = (self.len - start).min(MAILBOX_DATA_SIZE);
        Ok(&block.data()[..n])
    }

    /// Checks that every block the length needs was pushed.
    pub fn finish(self) -> Result<(), Error> {
        if self.next_index == self.num_blocks() {
            Ok(())
        } else {
            Err(Error::ChainTooShort {
                len: self.len,
                need: self.num_blocks(),
                got: self.next_index,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_counts() {
        assert_eq!(blocks_for(0), 0);
        assert_eq!(blocks_for(16), 0);
        assert_eq!(blocks_for(17), 1);
        assert_eq!(blocks_for(16 + 512), 1);
        assert_eq!(blocks_for(16 + 513), 2);
        // The trace's MANAGE_PAGES of 12,868 pages: 16 + 8 * 12,868 = 0x19230
        // bytes, 202 blocks (the last one carries 32 bytes).
        assert_eq!(blocks_for(0x19230), 202);
    }

    #[test]
    fn trailer_layout_matches_the_real_trace() {
        // SET_HCA_CAP input, block 0 trailer at 0x230:
        // 00000007 ac2cf400 00000000 00090000
        let msg = [0u8; 0x1010];
        let chain = InputChain::new(&msg[..], 0x09, false);
        let b = chain.block(0, 0x7_ac2c_f400).unwrap();
        assert_eq!(
            &b.as_bytes()[0x230..],
            &[0, 0, 0, 7, 0xac, 0x2c, 0xf4, 0, 0, 0, 0, 0, 0, 9, 0, 0]
        );
        assert_eq!(chain.num_blocks(), 8);
        let last = chain.block(7, 0).unwrap();
        assert_eq!(last.get(CmdIfBox::block_number), 7);
        assert_eq!(last.next_pointer(), 0);
    }

    #[test]
    fn signatures_round_trip_and_detect_corruption() {
        let msg = [0x5au8; 100];
        let b = InputChain::new(&msg[..], 3, true).block(0, 0x4000).unwrap();
        b.check(0, 3, true).unwrap();
        let mut bad = b.clone();
        bad.0[10] ^= 1;
        assert!(matches!(
            bad.check(0, 3, true),
            Err(Error::BadSignature {
                which: "signature",
                ..
            })
        ));
        let mut bad = b.clone();
        bad.0[0x239] ^= 1; // block number byte, inside both signatures
        assert!(bad.check(0, 3, true).is_err());
        // Unsigned chains pass when checking is off.
        let u = InputChain::new(&msg[..], 3, false).block(0, 0).unwrap();
        u.check(0, 3, false).unwrap();
        assert!(u.check(0, 3, true).is_err());
    }

    #[test]
    fn output_chain_rejects_wrong_numbers_tokens_and_short_chains() {
        let msg = [1u8; 16 + 600];
        let input = InputChain::new(&msg[..], 7, false);
        let b0 = input.block(0, 0x400).unwrap();
        let b1 = input.block(1, 0).unwrap();

        let mut out = OutputChain::new(msg.len(), 7, false);
        assert_eq!(out.push(&b0).unwrap().len(), 512);
        assert_eq!(out.push(&b1).unwrap().len(), 88);
        assert!(out.push(&b1).is_err(), "one block too many");

        let mut out = OutputChain::new(msg.len(), 7, false);
        assert!(matches!(
            out.push(&b1),
            Err(Error::BadBlockNumber { index: 0, found: 1 })
        ));

        let mut out = OutputChain::new(msg.len(), 8, false);
        assert!(matches!(out.push(&b0), Err(Error::BadToken { .. })));

        let mut out = OutputChain::new(msg.len(), 7, false);
        out.push(&b0).unwrap();
        assert!(matches!(
            out.finish(),
            Err(Error::ChainTooShort {
                need: 2,
                got: 1,
                ..
            })
        ));
    }

    #[test]
    fn misaligned_next_pointer_is_refused() {
        let msg = [0u8; 40];
        assert!(InputChain::new(&msg[..], 1, false).block(0, 0x200).is_err());
        assert!(InputChain::new(&msg[..], 1, false).block(1, 0).is_err());
    }
}
