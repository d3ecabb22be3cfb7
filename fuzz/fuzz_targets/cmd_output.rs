//! A command answer as the device writes it: the 64-byte queue entry
//! followed by the output mailbox blocks (576 bytes each), exactly the bytes
//! of an OUTPUT dump. Everything firmware-cmds offers to check and decode
//! such an answer is run on it: the entry (signature, delivery status,
//! status word, pointers), the output chain (block numbers, tokens,
//! signatures, lengths), the status and syndrome, and the output layout of
//! the command named by the entry's inline input, field by field.
#![no_main]

use firmware_cmds::cmdq::{CmdQueueEntry, ENTRY_SIZE};
use firmware_cmds::command::{check_status, input_header, output_header, read_array};
use firmware_cmds::layout::Layout;
use firmware_cmds::mailbox::{CmdIfBox, MAILBOX_BLOCK_SIZE, OutputChain};
use firmware_cmds::registry;
use firmware_cmds::status::check_output;
use libfuzzer_sys::fuzz_target;
use mlx5_fuzz::walk_layout;

fuzz_target!(|data: &[u8]| {
    if data.len() < ENTRY_SIZE {
        let _ = CmdQueueEntry::decode(data);
        return;
    }
    let (e, rest) = data.split_at(ENTRY_SIZE);
    let entry = CmdQueueEntry::decode(e).expect("64 bytes are an entry");
    let _ = entry.check_signature();
    let ds = entry.delivery_status();
    let _ = (ds.name(), ds.is_known(), ds.is_ok(), ds.to_string());
    let _ = (entry.owned_by_firmware(), entry.status_word());
    let _ = (entry.input_mailbox(), entry.output_mailbox());
    let token = entry.get(CmdQueueEntry::token);
    let len = entry.get(CmdQueueEntry::output_length) as usize;
    let input = entry.get(CmdQueueEntry::command_input_inline_data);
    let inline = entry.get(CmdQueueEntry::command_output_inline_data);

    for check_signatures in [false, true] {
        let mut chain = OutputChain::new(len, token, check_signatures);
        let _ = chain.num_blocks();
        let mut message = inline[..len.min(inline.len())].to_vec();
        let mut ok = true;
        for raw in rest.chunks(MAILBOX_BLOCK_SIZE) {
            let Ok(block) = CmdIfBox::decode(raw) else {
                ok = false;
                break;
            };
            let _ = (block.next_pointer(), block.check_signatures());
            match chain.push(&block) {
                Ok(bytes) => message.extend_from_slice(bytes),
                Err(e) => {
                    let _ = e.to_string();
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            let _ = chain.finish().map_err(|e| e.to_string());
        }
        let _ = output_header(&message);
        let _ = check_status(&input, &message).map_err(|e| e.to_string());
        if let (Ok((op, op_mod)), Some(head)) = (input_header(&input), message.get(..8)) {
            let head: &[u8; 8] = head.try_into().expect("8 bytes");
            let _ = check_output(op, op_mod, head).map_err(|e| e.to_string());
            let _ = (op.name(), op.to_string());
        }
        if let Ok(d) = registry::lookup(&input) {
            std::hint::black_box(walk_layout(d.output, &message, d.output_payload));
        }
        // A flexible array whose count the device wrote (MANAGE_PAGES'
        // output_num_entries at 0x08).
        if let Some(n) = message.get(8..12) {
            let n = u32::from_be_bytes(n.try_into().expect("4 bytes")) as usize;
            if let Ok(it) = read_array::<u64>(&message, 0x10, n) {
                std::hint::black_box(it.fold(0u64, u64::wrapping_add));
            }
        }
    }
});
