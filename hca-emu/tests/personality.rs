//! The personality data file is the real card's answers, byte for byte.

mod common;

use common::trace;
use hca_emu::personality::recorded_answers;

#[test]
fn data_file_matches_the_trace() {
    let cmds = trace::parse();
    assert_eq!(cmds.len(), 42, "commands in the trace");
    let answers = recorded_answers();
    for a in &answers {
        let c = &cmds[a.trace_command];
        let (op, title) = match c.opcode {
            0x100 => (0x100, format!("QUERY_HCA_CAP op_mod=0x{:x}", c.op_mod())),
            0x101 => (0x101, "QUERY_ADAPTER".to_string()),
            0x10a => (0x10a, "QUERY_ISSI".to_string()),
            o => panic!("unexpected opcode {o:#x} for {}", a.title),
        };
        assert_eq!(c.opcode, op);
        assert_eq!(title, a.title);
        let out = c.output_msg();
        assert_eq!(out.len(), 16 + a.bytes.len(), "{}", a.title);
        assert_eq!(&out[..8], &[0u8; 8][..], "{}: status OK", a.title);
        assert_eq!(&out[16..], &a.bytes[..], "{}: bytes", a.title);
    }
    // Every capability type/op_mod the trace queried is in the file (the
    // first answer for each; general current caps before SET_HCA_CAP).
    for c in cmds.iter().filter(|c| c.opcode == 0x100) {
        let t = format!("QUERY_HCA_CAP op_mod=0x{:x}", c.op_mod());
        assert!(answers.iter().any(|a| a.title == t), "{t} missing");
    }
}
