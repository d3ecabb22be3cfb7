//! The trace parser behind `hca trace`: any text, parsed with and without
//! signature checks; every command is looked up in the registry, its outcome
//! judged, and its input and output decoded field by field (payloads
//! included) as `hca trace` prints them.
#![no_main]

use firmware_cmds::trace::{Direction, ParseOptions, TraceCommand, parse_with, write_dump};
use libfuzzer_sys::fuzz_target;
use mlx5_fuzz::walk_layout;

fn exercise(c: &TraceCommand) -> u64 {
    let mut acc = u64::from(c.opcode.0) ^ u64::from(c.op_mod);
    let _ = c.delivery_status();
    let _ = c.result().map_err(|e| e.to_string());
    acc ^= c.input.is_complete() as u64 ^ c.input.blocks_needed() as u64;
    if let Ok(d) = c.decode() {
        acc = acc.wrapping_add(walk_layout(d.input, &c.input.message, d.input_payload));
        if let Some(o) = &c.output {
            acc = acc.wrapping_add(walk_layout(d.output, &o.message, d.output_payload));
            acc ^= o.is_complete() as u64 ^ o.blocks_needed() as u64;
        }
    }
    // Dump the command again, as `--dump-commands` writes it.
    let mut s = String::new();
    let _ = write_dump(&mut s, Direction::Input, &c.input.entry, &c.input.blocks);
    if let Some(o) = &c.output {
        let _ = write_dump(&mut s, Direction::Output, &o.entry, &o.blocks);
    }
    // What the parser accepted, dumped again, parses to the same messages.
    let again = parse_with(&s, ParseOptions::default())
        .unwrap_or_else(|e| panic!("a re-dumped command does not parse: {e}\n{s}"));
    assert_eq!(again.len(), 1, "{s}");
    assert_eq!(again[0].input.message, c.input.message);
    assert_eq!(
        again[0].output.as_ref().map(|o| &o.message),
        c.output.as_ref().map(|o| &o.message)
    );
    acc.wrapping_add(s.len() as u64)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for check_signatures in [false, true] {
        if let Ok(cmds) = parse_with(&text, ParseOptions { check_signatures }) {
            let mut acc = 0u64;
            for c in &cmds {
                acc = acc.wrapping_add(exercise(c));
            }
            std::hint::black_box(acc);
        }
    }
});
