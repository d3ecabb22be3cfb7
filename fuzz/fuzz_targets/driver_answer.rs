//! hca-driver's command executor on a device-written answer: the checks of
//! the answered entry and output mailbox chain against what was posted
//! (token, output length and pointer, next pointers, block numbers, tokens,
//! signatures, status), then one of the driver's readers of an accepted
//! output (capability block, MANAGE_PAGES page list, one GID, P_Key table,
//! the whole message).
//!
//! Input: four configuration bytes, then the answered entry (64 bytes) and
//! the output mailbox blocks (576 bytes each). Byte 0: the posted token.
//! Byte 1: bit 0 signatures checked, bit 1 the posted pointers are put into
//! the answer, bits 2..5 the reader, bit 5 token and output length are the
//! entry's own. Bytes 2..4: the posted output length - 16 (big-endian,
//! modulo 0x1001: up to 8 blocks).
#![no_main]

use hca_driver::fuzzing::{AnswerCase, command_answer};
use libfuzzer_sys::fuzz_target;
use platform::DmaRegion;
use platform::host::HostBlock;

/// Mailbox memory lent at distinct 4 KiB-aligned addresses, kept from one
/// run to the next (every block comes back at the end of a run).
#[derive(Default)]
struct Memory {
    blocks: Vec<HostBlock>,
}

impl Memory {
    fn grow(&mut self, bytes: usize) -> Option<DmaRegion> {
        let i = match self
            .blocks
            .iter()
            .position(|b| !b.is_lent() && b.len() == bytes)
        {
            Some(i) => i,
            None => {
                self.blocks.push(HostBlock::new(bytes, 4096).ok()?);
                self.blocks.len() - 1
            }
        };
        // No need to clear: every block of the chain is written whole.
        self.blocks[i]
            .lend(0x10_0000_0000 + 0x100_0000 * i as u64, 0)
            .ok()
    }

    fn free(&mut self, mut r: DmaRegion) {
        for b in &self.blocks {
            match b.reclaim(r) {
                Ok(()) => return,
                Err(back) => r = back,
            }
        }
        panic!("a mailbox region the harness never lent");
    }
}

thread_local! {
    static MEMORY: std::cell::RefCell<Memory> = std::cell::RefCell::new(Memory::default());
}

fuzz_target!(|data: &[u8]| {
    let [token, flags, l0, l1, answer @ ..] = data else {
        return;
    };
    let mut case = AnswerCase {
        answer,
        out_len: 16 + usize::from(u16::from_be_bytes([*l0, *l1])) % 0x1001,
        token: *token,
        checksum: flags & 1 != 0,
        fix_links: flags & 2 != 0,
        reader: flags >> 2 & 7,
    };
    if flags & 0x20 != 0 && answer.len() >= 64 {
        case.token = answer[0x3c];
        let ol = u32::from_be_bytes([answer[0x38], answer[0x39], answer[0x3a], answer[0x3b]]);
        case.out_len = (ol as usize).min(16 + 0x1000);
    }
    let r = MEMORY.with(|mem| {
        command_answer(&case, &mut |n| mem.borrow_mut().grow(n), &mut |r| {
            mem.borrow_mut().free(r)
        })
    });
    if let Err(e) = &r {
        std::hint::black_box(e.to_string());
    }
    std::hint::black_box(r.ok());
});
