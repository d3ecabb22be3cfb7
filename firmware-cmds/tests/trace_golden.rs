//! Golden test against a real ConnectX-4 (firmware 14.12.1220) driven by
//! Linux `mlx5_core`: `data/prm/trace-mlx5_core-cx4.txt`.
//!
//! Every command of the trace is parsed, its entries and mailbox chains
//! checked, its input and output decoded through the registry, its input
//! re-encoded from typed values and compared byte for byte with what Linux
//! wrote, and the firmware's capability answers decoded into named
//! capabilities and compared with values read by hand from the hexdump.
//!
//! In the hand-read comments, "dump 050" is the dump line at offset 0x050;
//! a capability block starts at message byte 0x10, which is dump offset
//! 0x040 (the first mailbox block), so capability byte `c` is at dump
//! offset `0x40 + c` while `c < 0x200`.
#![cfg(feature = "alloc")]

use std::collections::BTreeMap;
use std::path::Path;

use firmware_cmds::caps::{
    self, AtomicCaps, CmdHcaCap, FlowTableNicCap, FlowTablePropLayout,
    PerProtocolNetworkingOffloadCaps, QueryHcaCapIn, QueryHcaCapOut, RoceCap, SetHcaCapIn,
};
use firmware_cmds::cmdq::CmdQueueEntry;
use firmware_cmds::command::{Command, Encode, WithArray, read_array};
use firmware_cmds::eq::{self, CreateEqIn, CreateEqOut, Eqc};
use firmware_cmds::hca::{
    self, EnableHcaIn, InitHcaIn, ManagePagesIn, QueryAdapterIn, QueryAdapterOut,
    QueryAdapterParamBlock, QueryIssiIn, QueryIssiOut, QueryPagesIn, QueryPagesOut, SetIssiIn,
};
use firmware_cmds::layout::{FieldKind, Layout, LayoutInfo, read_bits, write_bits};
use firmware_cmds::mailbox::{CmdIfBox, InputChain, blocks_for};
use firmware_cmds::opcode::Opcode;
use firmware_cmds::reg::{self, AccessRegisterIn, RegisterHostEndianness};
use firmware_cmds::registry;
use firmware_cmds::trace::{self, Dump, ParseOptions, TraceCommand};
use firmware_cmds::uar::{AllocUarIn, AllocUarOut};

fn trace_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/prm/trace-mlx5_core-cx4.txt");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn commands() -> Vec<TraceCommand> {
    trace::parse(&trace_text()).expect("the real trace parses")
}

fn output(c: &TraceCommand) -> &Dump {
    c.output
        .as_ref()
        .expect("every command of the trace has its OUTPUT")
}

/// The commands with `opcode` and `op_mod`, in trace order.
fn find(cmds: &[TraceCommand], opcode: Opcode, op_mod: u16) -> Vec<&TraceCommand> {
    cmds.iter()
        .filter(|c| c.opcode == opcode && c.op_mod == op_mod)
        .collect()
}

/// Builds the input queue entry the way a driver would, with the mailbox
/// addresses and token the trace shows (addresses are the driver's choice,
/// not something encoded from a value), and checks it equals the dumped one
/// byte for byte (signature and ownership included).
fn assert_entry(c: &TraceCommand, msg: &(impl Encode + ?Sized)) {
    let dumped = &c.input.entry;
    let token = dumped.get(CmdQueueEntry::token);
    let chain = InputChain::new(msg, token, false);
    let built = CmdQueueEntry::build(
        &chain.inline(),
        chain.len() as u32,
        dumped.input_mailbox(),
        dumped.get(CmdQueueEntry::output_length),
        dumped.output_mailbox(),
        token,
    )
    .unwrap();
    assert_eq!(
        built.as_bytes(),
        dumped.as_bytes(),
        "{} line {}: entry",
        c.opcode,
        c.input.line
    );
}

/// Builds every dumped input block from `msg` (next pointers as dumped) and
/// checks them byte for byte, trailer included.
fn assert_blocks(c: &TraceCommand, msg: &(impl Encode + ?Sized)) {
    let token = c.input.entry.get(CmdQueueEntry::token);
    let chain = InputChain::new(msg, token, false);
    for (i, dumped) in c.input.blocks.iter().enumerate() {
        let built = chain.block(i, dumped.next_pointer()).unwrap();
        assert_eq!(
            built.as_bytes(),
            dumped.as_bytes(),
            "{} line {}: block {i}",
            c.opcode,
            c.input.line
        );
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn every_command_parses_with_checked_entries() {
    let cmds = commands();
    let expected: Vec<Opcode> = [
        (Opcode::ENABLE_HCA, 1),
        (Opcode::QUERY_ISSI, 1),
        (Opcode::SET_ISSI, 1),
        (Opcode::QUERY_PAGES, 1),
        (Opcode::MANAGE_PAGES, 1),
        (Opcode::ACCESS_REG, 1),
        (Opcode::QUERY_HCA_CAP, 2),
        (Opcode::SET_HCA_CAP, 1),
        (Opcode::QUERY_PAGES, 1),
        (Opcode::MANAGE_PAGES, 1),
        (Opcode::INIT_HCA, 1),
        (Opcode::QUERY_HCA_CAP, 10),
        (Opcode::QUERY_ADAPTER, 1),
        (Opcode::ALLOC_UAR, 4),
        (Opcode::CREATE_EQ, 15),
    ]
    .iter()
    .flat_map(|&(op, n)| std::iter::repeat_n(op, n))
    .collect();
    assert_eq!(cmds.iter().map(|c| c.opcode).collect::<Vec<_>>(), expected);
    // The opcode comes from the entry: QUERY_ISSI and SET_ISSI appear as
    // "unknown command opcode(0x10a)" / "(0x10b)" in the log text.
    assert_eq!(cmds[1].opcode, Opcode(0x10a));
    assert_eq!(cmds[2].opcode, Opcode(0x10b));

    for (i, c) in cmds.iter().enumerate() {
        let out = output(c);
        let what = format!("{} line {}", c.opcode, c.input.line);
        // Tokens: Linux numbers its commands 1, 2, 3...; the output entry
        // carries the same token.
        assert_eq!(
            c.input.entry.get(CmdQueueEntry::token) as usize,
            i + 1,
            "{what}"
        );
        assert_eq!(
            out.entry.get(CmdQueueEntry::token) as usize,
            i + 1,
            "{what}"
        );
        // Type 7, ownership handed over and given back.
        assert_eq!(c.input.entry.get(CmdQueueEntry::r#type), 7, "{what}");
        assert!(c.input.entry.owned_by_firmware(), "{what}");
        assert!(!out.entry.owned_by_firmware(), "{what}");
        // The posted entry's signature makes its 64 bytes XOR to 0xff.
        c.input.entry.check_signature().unwrap();
        let xor = c.input.entry.as_bytes().iter().fold(0u8, |a, b| a ^ b);
        assert_eq!(xor, 0xff, "{what}");
        // Delivered and executed.
        assert!(out.entry.delivery_status().is_ok(), "{what}");
        c.result().unwrap();
        // Lengths: the output is what the output layout needs (at least 16
        // bytes: the entry always carries 16), and complete.
        let d = c.decode().unwrap();
        let out_extra = if c.opcode == Opcode::ACCESS_REG {
            RegisterHostEndianness::SIZE
        } else {
            0
        };
        assert_eq!(
            out.length,
            d.output.size.max(16) + out_extra,
            "{what}: output_length"
        );
        // Linux dumped every output block except ACCESS_REG's.
        assert_eq!(
            out.is_complete(),
            c.opcode != Opcode::ACCESS_REG,
            "{what}: output dumped in full"
        );
        // The input: the layout's fixed part, plus page addresses for
        // MANAGE_PAGES and CREATE_EQ, plus the register for ACCESS_REG.
        let extra = match c.opcode {
            Opcode::MANAGE_PAGES => {
                8 * read_bits(&c.input.message, 96, 32) as usize // input_num_entries
            }
            Opcode::CREATE_EQ => 8,
            Opcode::ACCESS_REG => RegisterHostEndianness::SIZE,
            _ => 0,
        };
        assert_eq!(c.input.length, d.input.size + extra, "{what}: input_length");
    }

    // Complete inputs, except where Linux did not dump the mailboxes: the
    // boot MANAGE_PAGES (6 pages) and ACCESS_REG show no input block, the
    // init MANAGE_PAGES shows 179 of its 202 blocks.
    let partial: Vec<(Opcode, usize, usize)> = cmds
        .iter()
        .filter(|c| !c.input.is_complete())
        .map(|c| (c.opcode, c.input.blocks.len(), c.input.blocks_needed()))
        .collect();
    assert_eq!(
        partial,
        vec![
            (Opcode::MANAGE_PAGES, 0, 1),
            (Opcode::ACCESS_REG, 0, 1),
            (Opcode::MANAGE_PAGES, 179, 202),
        ]
    );

    // With signature checking on, the unsigned mailboxes Linux sends once
    // cmdif_checksum is off are refused.
    let err = trace::parse_with(
        &trace_text(),
        ParseOptions {
            check_signatures: true,
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            firmware_cmds::Error::BadSignature {
                what: "mailbox block",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn manage_pages_init_chain() {
    let cmds = commands();
    let init = find(
        &cmds,
        Opcode::MANAGE_PAGES,
        hca::MANAGE_PAGES_OP_MOD_ALLOCATION_SUCCESS,
    );
    assert_eq!(init.len(), 2);
    let boot = init[0];
    let c = init[1];

    // Boot pages: 6 pages, 0x40 bytes = 16 + 6 * 8.
    let head = ManagePagesIn::decode(&boot.input.message).unwrap();
    assert_eq!(head.get(ManagePagesIn::input_num_entries), 6);
    assert_eq!(boot.input.length, 0x40);

    // Init pages: 12,868 pages (dump 010: 01080000 00000001 00000000
    // 00003244), input_length 0x19230 (dump 000: 07000000 00019230).
    let head = ManagePagesIn::decode(&c.input.message).unwrap();
    assert_eq!(head.get(ManagePagesIn::input_num_entries), 12_868);
    assert_eq!(head.get(ManagePagesIn::function_id), 0);
    assert_eq!(c.input.length, 0x19230);
    assert_eq!(c.input.length, 16 + 8 * 12_868);
    assert_eq!(c.input.blocks_needed(), 202);
    assert_eq!(blocks_for(0x19230), 202);
    // The dump shows blocks 0..=178, numbered in order, all with token 0x0b
    // (dump 270: 00000007 ab0e7400 00000000 000b0000), each pointing at the
    // next one.
    assert_eq!(c.input.blocks.len(), 179);
    for (i, b) in c.input.blocks.iter().enumerate() {
        assert_eq!(b.get(CmdIfBox::block_number), i as u32);
        assert_eq!(b.get(CmdIfBox::token), 0x0b);
        assert_ne!(b.next_pointer(), 0);
        assert_eq!(b.next_pointer() % 1024, 0);
    }
    assert_eq!(c.input.blocks[0].next_pointer(), 0x7_ab0e_7400);
    // Block 178's trailer: dump 192f0: 00000007 ab0a9000 000000b2 000b0000.
    assert_eq!(c.input.blocks[178].next_pointer(), 0x7_ab0a_9000);
    assert_eq!(c.input.blocks[178].get(CmdIfBox::block_number), 0xb2);

    // The page addresses the dump shows decode: 16 + 512 * 179 bytes of
    // message = 11,456 addresses, all 4 KiB aligned and distinct.
    assert_eq!(c.input.message.len(), 16 + 512 * 179);
    let visible = (c.input.message.len() - 16) / 8;
    let pages: Vec<u64> = read_array::<u64>(&c.input.message, 16, visible)
        .unwrap()
        .collect();
    assert_eq!(pages.len(), 11_456);
    // dump 040: 00000007 ab122000 00000007 ab123000
    assert_eq!(&pages[..2], &[0x7_ab12_2000, 0x7_ab12_3000]);
    // dump 192b0: 00000007 a8400000 00000007 a8401000 (last data line).
    assert_eq!(&pages[pages.len() - 2..], &[0x7_a840_0000, 0x7_a840_1000]);
    let mut sorted = pages.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), pages.len(), "distinct pages");
    assert!(pages.iter().all(|p| p % 4096 == 0 && *p != 0));
    // Asking for more than the dump shows is a typed error.
    assert!(read_array::<u64>(&c.input.message, 16, 12_868).is_err());

    // Re-encode: the same header and pages (the unseen ones as zero) give
    // the same entry and the same 179 blocks, trailers included.
    let mut all = pages.clone();
    all.resize(12_868, 0);
    let built = ManagePagesIn::new()
        .with(
            ManagePagesIn::op_mod,
            hca::MANAGE_PAGES_OP_MOD_ALLOCATION_SUCCESS,
        )
        .unwrap()
        .with(ManagePagesIn::input_num_entries, 12_868)
        .unwrap();
    let msg = WithArray::new(&built, &all);
    assert_entry(c, &msg);
    assert_blocks(c, &msg);

    // QUERY_PAGES asked for exactly these counts: boot 6, init 0x3244.
    let q = find(
        &cmds,
        Opcode::QUERY_PAGES,
        hca::QUERY_PAGES_OP_MOD_BOOT_PAGES,
    );
    let o = QueryPagesOut::decode(&output(q[0]).message).unwrap();
    assert_eq!(o.num_pages_signed(), 6); // dump 020: 00000000 00000000 00000000 00000006
    let q = find(
        &cmds,
        Opcode::QUERY_PAGES,
        hca::QUERY_PAGES_OP_MOD_INIT_PAGES,
    );
    let o = QueryPagesOut::decode(&output(q[0]).message).unwrap();
    assert_eq!(o.num_pages_signed(), 0x3244); // dump 020: ... 00003244
}

/// Copies every declared field of `info` from `src` into `dst`
/// (recursively for nested layouts), as far as `src` reaches.
fn copy_declared(info: &LayoutInfo, src: &[u8], dst: &mut [u8]) {
    for f in info.fields {
        let start = (f.offset / 8) as usize;
        let end = (f.offset as usize + f.width as usize).div_ceil(8);
        match f.kind {
            FieldKind::Flex { .. } => {
                if start < src.len() {
                    dst[start..src.len()].copy_from_slice(&src[start..]);
                }
            }
            _ if end > src.len() => {}
            FieldKind::Uint { .. } | FieldKind::Flag => {
                write_bits(dst, f.offset, f.width, read_bits(src, f.offset, f.width));
            }
            FieldKind::Bytes => dst[start..end].copy_from_slice(&src[start..end]),
            FieldKind::Struct(n) => copy_declared(n, &src[start..end], &mut dst[start..end]),
        }
    }
}

/// Bits of `image` set outside every declared field of `info`.
fn undeclared_bits(info: &LayoutInfo, image: &[u8]) -> Vec<(usize, u8)> {
    let mut copy = vec![0u8; image.len()];
    copy_declared(info, image, &mut copy);
    image
        .iter()
        .zip(&copy)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i, a ^ b))
        .collect()
}

#[test]
#[cfg_attr(miri, ignore)]
fn inputs_decode_and_reencode_from_their_fields() {
    for c in commands() {
        let d = registry::lookup(&c.input.message).unwrap();
        assert_eq!(d.opcode, c.opcode);
        // Every declared field reads without error, in the input, the output
        // and their payloads (as far as the dump shows them).
        for (info, msg) in [(d.input, &c.input.message), (d.output, &output(&c).message)] {
            for f in info.fields {
                if (f.offset as usize + f.width as usize).div_ceil(8) <= msg.len() {
                    info.read(msg, f).unwrap();
                }
            }
        }
        for (p, msg) in [
            (d.input_payload, &c.input.message),
            (d.output_payload, &output(&c).message),
        ] {
            if let Some(p) = p {
                if msg.len() >= p.offset + p.layout.size {
                    let img = &msg[p.offset..p.offset + p.layout.size];
                    for f in p.layout.fields {
                        p.layout.read(img, f).unwrap();
                    }
                }
            }
        }
        // Re-encoding the input from its declared fields alone reproduces
        // every byte Linux wrote: no set bit lies outside a declared field
        // (for the capability union, outside a field of one of its members).
        let undeclared = undeclared_bits(d.input, &c.input.message);
        assert!(
            undeclared.is_empty(),
            "{} line {}: {undeclared:x?}",
            c.opcode,
            c.input.line
        );
        // Within the payload's own layout too, with one exception: Linux
        // sends SET_HCA_CAP the current capability block as the firmware
        // returned it, reserved bits included: capability byte 0x41 = 0x06,
        // bits 18:17 of dword 0x40 (reserved_at_20c), dump 080: c0060c0e;
        // byte 0x45 = 0xfa, bit 22 of dword 0x44 (reserved_at_229), dump
        // 080: e2fa030f.
        if let Some(p) = d.input_payload {
            if c.input.message.len() >= p.offset + p.layout.size {
                let img = &c.input.message[p.offset..p.offset + p.layout.size];
                let undeclared = undeclared_bits(p.layout, img);
                let expected = if c.opcode == Opcode::SET_HCA_CAP {
                    vec![(0x41, 0x06), (0x45, 0x40)]
                } else {
                    vec![]
                };
                assert_eq!(
                    undeclared, expected,
                    "{} payload {}",
                    c.opcode, p.layout.ifc
                );
            }
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn inputs_reencode_from_typed_values() {
    let cmds = commands();

    // ENABLE_HCA: dump 010: 01040000 00000000 00000000 00000000.
    assert_entry(&cmds[0], &EnableHcaIn::new());

    // QUERY_ISSI, then SET_ISSI 1 (dump 010: 010b0000 00000000 00000001).
    assert_entry(&cmds[1], &QueryIssiIn::new());
    let set = SetIssiIn::new().with(SetIssiIn::current_issi, 1).unwrap();
    assert_entry(&cmds[2], &set);

    // QUERY_PAGES boot and init.
    for (c, op_mod) in [(&cmds[3], 1), (&cmds[9], 2)] {
        let q = QueryPagesIn::new()
            .with(QueryPagesIn::op_mod, op_mod)
            .unwrap();
        assert_entry(c, &q);
    }

    // MANAGE_PAGES boot: 6 pages in a mailbox that was not dumped; the entry
    // does not depend on their values.
    let head = ManagePagesIn::new()
        .with(ManagePagesIn::op_mod, 1)
        .unwrap()
        .with(ManagePagesIn::input_num_entries, 6)
        .unwrap();
    assert_entry(&cmds[4], &WithArray::new(&head, &[0u64; 6]));

    // ACCESS_REG: write the host endianness register (dump 010: 08050000
    // 00000000 00007004 00000000).
    let a = AccessRegisterIn::new()
        .with(AccessRegisterIn::op_mod, reg::ACCESS_REG_OP_MOD_WRITE)
        .unwrap()
        .with(AccessRegisterIn::register_id, reg::REG_HOST_ENDIANNESS)
        .unwrap();
    let mut msg = a.as_bytes().to_vec();
    msg.extend_from_slice(RegisterHostEndianness::new().as_bytes());
    assert_entry(&cmds[5], &msg[..]);

    // Every QUERY_HCA_CAP: op_mod = type << 1 | mode.
    for c in cmds.iter().filter(|c| c.opcode == Opcode::QUERY_HCA_CAP) {
        let q = QueryHcaCapIn::new()
            .with(
                QueryHcaCapIn::op_mod,
                caps::hca_cap_op_mod(c.op_mod >> 1, c.op_mod & 1),
            )
            .unwrap();
        assert_eq!(q.cap_type(), c.op_mod >> 1);
        assert_entry(c, &q);
    }

    // SET_HCA_CAP: the general capability block, typed, then sent as 8
    // mailbox blocks identical to Linux's, trailers included.
    let s = &cmds[8];
    let cap: CmdHcaCap = SetHcaCapIn::decode(&s.input.message).unwrap().cap();
    let set = SetHcaCapIn::for_cap(&cap).unwrap();
    assert_eq!(set.op_mod(), 0);
    assert_eq!(s.input.blocks.len(), 8);
    assert_entry(s, &set);
    assert_blocks(s, &set);
    // What Linux changed against the current capabilities it queried just
    // before: only log_max_qp, 14 -> 17 (dump 050 of the query: 0f0f000e,
    // of the set: 0f0f0011). cmdif_checksum was already 0.
    let queried: CmdHcaCap = QueryHcaCapOut::decode(&output(&cmds[7]).message)
        .unwrap()
        .cap();
    let info = <CmdHcaCap as Layout>::INFO;
    let changed: Vec<(&str, u64, u64)> = info
        .fields
        .iter()
        .filter_map(|f| {
            let a = read_bits(queried.as_bytes(), f.offset, f.width.min(64));
            let b = read_bits(cap.as_bytes(), f.offset, f.width.min(64));
            (a != b).then_some((f.name, a, b))
        })
        .collect();
    assert_eq!(changed, vec![("log_max_qp", 14, 17)]);
    assert_eq!(
        cap.get(CmdHcaCap::cmdif_checksum),
        caps::CMDIF_CHECKSUM_DISABLED
    );

    // INIT_HCA, QUERY_ADAPTER, ALLOC_UAR.
    assert_entry(&cmds[11], &InitHcaIn::new());
    assert_entry(&cmds[22], &QueryAdapterIn::new());
    for c in &cmds[23..27] {
        assert_entry(c, &AllocUarIn::new());
    }

    // The first CREATE_EQ, from values read by hand (block dump 040:
    // ... 08000010 -> log_eq_size 8, uar_page 0x10; 050: 00000000 00000001
    // 02000000 -> intr 1, log_page_size 2; 080: ... 00000400 -> event bit
    // 10, command completion; 140: 00000007 ac80c000 -> one page).
    let c = &cmds[27];
    let eqc = Eqc::new()
        .with(Eqc::log_eq_size, 8)
        .unwrap()
        .with(Eqc::uar_page, 0x10)
        .unwrap()
        .with(Eqc::intr, 1)
        .unwrap()
        .with(Eqc::log_page_size, 2)
        .unwrap();
    let mut create = CreateEqIn::new()
        .with(CreateEqIn::eq_context_entry, eqc)
        .unwrap();
    create.set_event(eq::EVENT_TYPE_CMD);
    let msg = WithArray::new(&create, &[0x7_ac80_c000u64]);
    assert_entry(c, &msg);
    assert_blocks(c, &msg);

    // Every CREATE_EQ, rebuilt field by field from its typed decoding.
    for c in cmds.iter().filter(|c| c.opcode == Opcode::CREATE_EQ) {
        let got = CreateEqIn::decode(&c.input.message).unwrap();
        let ctx = got.get(CreateEqIn::eq_context_entry);
        let mut eqc = Eqc::new();
        eqc.set(Eqc::log_eq_size, ctx.get(Eqc::log_eq_size))
            .unwrap()
            .set(Eqc::uar_page, ctx.get(Eqc::uar_page))
            .unwrap()
            .set(Eqc::intr, ctx.get(Eqc::intr))
            .unwrap()
            .set(Eqc::log_page_size, ctx.get(Eqc::log_page_size))
            .unwrap()
            .set(Eqc::page_offset, ctx.get(Eqc::page_offset))
            .unwrap();
        let mut create = CreateEqIn::new()
            .with(CreateEqIn::eq_context_entry, eqc)
            .unwrap();
        for t in 0..=255u8 {
            if got.has_event(t) {
                create.set_event(t);
            }
        }
        let n = (c.input.length - CreateEqIn::SIZE) / 8;
        let pas: Vec<u64> = read_array(&c.input.message, CreateEqIn::SIZE, n)
            .unwrap()
            .collect();
        let msg = WithArray::new(&create, &pas);
        assert_entry(c, &msg);
        assert_blocks(c, &msg);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn outputs_decode_into_named_values() {
    let cmds = commands();

    // QUERY_ISSI: current 0, supported_issi_dw0 = 2 (block dump 090:
    // 00000000 00000000 00000000 00000002 = message 0x6c): ISSI 1 supported.
    let o = QueryIssiOut::decode(&output(&cmds[1]).message).unwrap();
    assert_eq!(o.get(QueryIssiOut::current_issi), 0);
    assert_eq!(o.get(QueryIssiOut::supported_issi_dw0), 2);
    assert!(o.supports_issi(1) && !o.supports_issi(0));

    // QUERY_ADAPTER: block dump 050: ... 000002c9 000015b3 (param block
    // 0x18, 0x1c); 130: 4d545f32 34333031 31303032 37000000 (PSID at 0xf0).
    let a: QueryAdapterParamBlock = QueryAdapterOut::decode(&output(&cmds[22]).message)
        .unwrap()
        .get(QueryAdapterOut::query_adapter_struct);
    assert_eq!(a.get(QueryAdapterParamBlock::ieee_vendor_id), 0x0002c9);
    assert_eq!(a.get(QueryAdapterParamBlock::vsd_vendor_id), 0x15b3);
    assert_eq!(
        &a.get(QueryAdapterParamBlock::vsd_contd_psid)[..13],
        b"MT_2430110027"
    );

    // ALLOC_UAR: UARs 0x10..=0x13 (output dump 020: 00000000 00000000
    // 00000010 00000000, ...11, ...12, ...13).
    let uars: Vec<u32> = cmds[23..27]
        .iter()
        .map(|c| {
            AllocUarOut::decode(&output(c).message)
                .unwrap()
                .get(AllocUarOut::uar)
        })
        .collect();
    assert_eq!(uars, vec![0x10, 0x11, 0x12, 0x13]);

    // CREATE_EQ: EQs 0x10..=0x1e.
    let eqs: Vec<u8> = cmds[27..]
        .iter()
        .map(|c| {
            CreateEqOut::decode(&output(c).message)
                .unwrap()
                .get(CreateEqOut::eq_number)
        })
        .collect();
    assert_eq!(eqs, (0x10..=0x1e).collect::<Vec<u8>>());
    // Event masks (block dump 080, last word = message 0x5c): the command
    // EQ 00000400 (event 0x0a), the async EQ 001f02be (path migration,
    // communication established, SQ drained, CQ error, WQ catastrophic,
    // path migration failed, port change, and 0x10..0x14), the page request
    // EQ 00000800 (event 0x0b), and the completion EQs 00000000.
    let masks: Vec<u64> = cmds[27..]
        .iter()
        .map(|c| {
            CreateEqIn::decode(&c.input.message)
                .unwrap()
                .event_bitmask_word(0)
                .unwrap()
        })
        .collect();
    assert_eq!(
        &masks[..3],
        &[
            1 << eq::EVENT_TYPE_CMD,
            0x001f_02be,
            1 << eq::EVENT_TYPE_PAGE_REQUEST
        ]
    );
    assert!(masks[3..].iter().all(|&m| m == 0));
    let asynchronous = CreateEqIn::decode(&cmds[28].input.message).unwrap();
    for t in [
        eq::EVENT_TYPE_PATH_MIG,
        eq::EVENT_TYPE_COMM_EST,
        eq::EVENT_TYPE_SQ_DRAINED,
        eq::EVENT_TYPE_CQ_ERROR,
        eq::EVENT_TYPE_WQ_CATAS_ERROR,
        eq::EVENT_TYPE_PATH_MIG_FAILED,
        eq::EVENT_TYPE_PORT_CHANGE,
        eq::EVENT_TYPE_WQ_INVAL_REQ_ERROR,
        eq::EVENT_TYPE_WQ_ACCESS_ERROR,
        eq::EVENT_TYPE_SRQ_CATAS_ERROR,
        eq::EVENT_TYPE_SRQ_LAST_WQE,
        eq::EVENT_TYPE_SRQ_RQ_LIMIT,
    ] {
        assert!(
            asynchronous.has_event(t),
            "{}",
            eq::event_type_name(t).unwrap()
        );
    }
    assert!(!asynchronous.has_event(eq::EVENT_TYPE_PAGE_REQUEST));
}

fn cap_of<C: caps::HcaCap>(cmds: &[TraceCommand], op_mod: u16, nth: usize) -> C {
    let c = find(cmds, Opcode::QUERY_HCA_CAP, op_mod)[nth];
    let d = c.decode().unwrap();
    let payload = d.output_payload.expect("a declared capability block");
    assert_eq!(payload.layout.ifc, <C as Layout>::INFO.ifc);
    QueryHcaCapOut::decode(&output(c).message).unwrap().cap()
}

#[test]
#[cfg_attr(miri, ignore)]
fn general_capabilities_read_by_hand() {
    let cmds = commands();
    // The current general capabilities before SET_HCA_CAP (trace line 489).
    let cur: CmdHcaCap = cap_of(&cmds, 0x1, 0);
    // dump 050: 0f0f000e 00170000 00160018 16180008 (capability 0x10..0x1f)
    assert_eq!(cur.get(CmdHcaCap::log_max_srq_sz), 0x0f); // 0x10 bits 31:24
    assert_eq!(cur.get(CmdHcaCap::log_max_qp_sz), 0x0f); // 0x10 bits 23:16
    assert_eq!(cur.get(CmdHcaCap::log_max_qp), 0x0e); // 0x10 bits 4:0
    assert_eq!(cur.get(CmdHcaCap::log_max_srq), 0x17); // 0x14 bits 20:16
    assert_eq!(cur.get(CmdHcaCap::log_max_cq_sz), 0x16); // 0x18 bits 23:16
    assert_eq!(cur.get(CmdHcaCap::log_max_cq), 0x18); // 0x18 bits 4:0
    assert_eq!(cur.get(CmdHcaCap::log_max_eq_sz), 0x16); // 0x1c bits 31:24
    assert_eq!(cur.get(CmdHcaCap::log_max_mkey), 0x18); // 0x1c bits 21:16
    assert_eq!(cur.get(CmdHcaCap::log_max_eq), 0x8); // 0x1c bits 3:0
    // dump 060: 04401010 00040004 00040004 e0000000
    assert_eq!(cur.get(CmdHcaCap::max_indirection), 0x04); // 0x20 bits 31:24
    assert_eq!(cur.get(CmdHcaCap::log_max_mrw_sz), 0x40); // 0x20 bits 22:16
    assert_eq!(cur.get(CmdHcaCap::log_max_bsf_list_size), 0x10); // 0x20 bits 13:8
    assert_eq!(cur.get(CmdHcaCap::log_maxklm_list_size), 0x10); // 0x20 bits 5:0
    assert_eq!(cur.get(CmdHcaCap::log_max_ra_req_qp), 0x4); // 0x28 bits 21:16
    assert_eq!(cur.get(CmdHcaCap::log_max_ra_res_qp), 0x4); // 0x28 bits 5:0
    assert!(cur.get(CmdHcaCap::end_pad)); // 0x2c bit 31
    assert_eq!(cur.get(CmdHcaCap::gid_table_size), 0); // 0x2c bits 15:0
    // dump 070: 40ff0000 c7100101 1e000000 00010001
    assert!(cur.get(CmdHcaCap::vport_counters)); // 0x30 bit 30
    assert_eq!(cur.get(CmdHcaCap::max_qp_cnt), 0xff); // 0x30 bits 25:16
    assert!(cur.get(CmdHcaCap::vport_group_manager)); // 0x34 bit 31
    assert!(cur.get(CmdHcaCap::ets) && cur.get(CmdHcaCap::nic_flow_table)); // 0x34 bits 26, 25
    assert!(cur.get(CmdHcaCap::eswitch_manager)); // 0x34 bit 24
    assert_eq!(cur.get(CmdHcaCap::local_ca_ack_delay), 0x10); // 0x34 bits 20:16
    assert_eq!(cur.get(CmdHcaCap::port_type), caps::PORT_TYPE_ETH); // 0x34 bits 9:8 = 01
    assert_eq!(cur.get(CmdHcaCap::num_ports), 1); // 0x34 bits 7:0
    assert_eq!(cur.get(CmdHcaCap::log_max_msg), 0x1e); // 0x38 bits 28:24: 1 GiB
    assert_eq!(cur.get(CmdHcaCap::stat_rate_support), 0x0001); // 0x3c bits 31:16
    assert_eq!(cur.get(CmdHcaCap::cqe_version), 1); // 0x3c bits 3:0
    // dump 080: c0060c0e e2fa030f 0005000c a0090000
    assert!(cur.get(CmdHcaCap::compact_address_vector)); // 0x40 bit 31
    assert!(cur.get(CmdHcaCap::striding_rq)); // 0x40 bit 30
    assert_eq!(cur.get(CmdHcaCap::cmdif_checksum), 0); // 0x40 bits 15:14 of 0x0c
    assert!(cur.get(CmdHcaCap::wq_signature) && cur.get(CmdHcaCap::sctr_data_cqe)); // bits 11, 10
    assert!(cur.get(CmdHcaCap::eth_net_offloads)); // 0x40 bit 3 of 0x0e
    assert!(cur.get(CmdHcaCap::roce)); // 0x40 bit 2
    assert!(cur.get(CmdHcaCap::atomic)); // 0x40 bit 1
    assert!(
        cur.get(CmdHcaCap::cq_oi)
            && cur.get(CmdHcaCap::cq_resize)
            && cur.get(CmdHcaCap::cq_moderation)
    ); // 0x44 bits 31..29 (0xe2)
    assert!(cur.get(CmdHcaCap::cq_eq_remap)); // 0x44 bit 25
    assert!(!cur.get(CmdHcaCap::pg)); // 0x44 bit 24
    assert!(cur.get(CmdHcaCap::apm) && !cur.get(CmdHcaCap::vector_calc)); // 0x44 bits 17, 16 (0xfa)
    assert!(cur.get(CmdHcaCap::qkv) && cur.get(CmdHcaCap::pkv)); // 0x44 bits 9, 8 (0x03)
    assert!(
        cur.get(CmdHcaCap::xrc)
            && cur.get(CmdHcaCap::ud)
            && cur.get(CmdHcaCap::uc)
            && cur.get(CmdHcaCap::rc)
    ); // 0x44 bits 3:0 (0x0f)
    assert!(!cur.get(CmdHcaCap::uar_4k)); // 0x48 bit 31
    assert_eq!(cur.get(CmdHcaCap::uar_sz), 5); // 0x48 bits 21:16
    assert_eq!(cur.get(CmdHcaCap::log_pg_sz), 12); // 0x48 bits 7:0
    assert!(cur.get(CmdHcaCap::bf) && !cur.get(CmdHcaCap::driver_version)); // 0x4c bits 31, 30 (0xa0)
    assert_eq!(cur.get(CmdHcaCap::log_bf_reg_size), 9); // 0x4c bits 20:16
    // dump 090: 00000400 00000200 00000100 00000030
    assert_eq!(cur.get(CmdHcaCap::max_wqe_sz_sq), 0x400); // 0x50 bits 15:0
    assert_eq!(cur.get(CmdHcaCap::max_wqe_sz_rq), 0x200); // 0x54 bits 15:0
    assert_eq!(cur.get(CmdHcaCap::max_wqe_sz_sq_dc), 0x100); // 0x58 bits 15:0
    assert_eq!(cur.get(CmdHcaCap::max_qp_mcg), 0x30); // 0x5c bits 24:0
    // dump 0a0: 00000015 10180018 00000000 17171717
    assert_eq!(cur.get(CmdHcaCap::log_max_mcg), 0x15); // 0x60 bits 7:0
    assert_eq!(cur.get(CmdHcaCap::log_max_transport_domain), 0x10); // 0x64 bits 28:24
    assert_eq!(cur.get(CmdHcaCap::log_max_pd), 0x18); // 0x64 bits 20:16
    assert_eq!(cur.get(CmdHcaCap::log_max_xrcd), 0x18); // 0x64 bits 4:0
    assert_eq!(cur.get(CmdHcaCap::log_max_rq), 0x17); // 0x6c bits 28:24
    assert_eq!(cur.get(CmdHcaCap::log_max_sq), 0x17); // 0x6c bits 20:16
    assert_eq!(cur.get(CmdHcaCap::log_max_tir), 0x17); // 0x6c bits 12:8
    assert_eq!(cur.get(CmdHcaCap::log_max_tis), 0x17); // 0x6c bits 4:0
    // dump 0b0: 97100900 09040606 0000000f 800c0e0a
    assert!(cur.get(CmdHcaCap::basic_cyclic_rcv_wqe)); // 0x70 bit 31
    assert_eq!(cur.get(CmdHcaCap::log_max_rmp), 0x17); // 0x70 bits 28:24
    assert_eq!(cur.get(CmdHcaCap::log_max_rqt), 0x10); // 0x70 bits 20:16
    assert_eq!(cur.get(CmdHcaCap::log_max_rqt_size), 0x09); // 0x70 bits 12:8
    assert_eq!(cur.get(CmdHcaCap::log_max_stride_sz_rq), 9); // 0x74 bits 28:24
    assert_eq!(cur.get(CmdHcaCap::log_min_stride_sz_rq), 4); // 0x74 bits 20:16
    assert_eq!(cur.get(CmdHcaCap::log_max_wq_sz), 0xf); // 0x78 bits 4:0
    assert!(cur.get(CmdHcaCap::nic_vport_change_event)); // 0x7c bit 31
    assert_eq!(cur.get(CmdHcaCap::log_max_vlan_list), 0xc); // 0x7c bits 20:16
    assert_eq!(cur.get(CmdHcaCap::log_max_current_mc_list), 0xe); // 0x7c bits 12:8
    assert_eq!(cur.get(CmdHcaCap::log_max_current_uc_list), 0xa); // 0x7c bits 4:0
    // dump 0d0: 10000000 00000000 00000113 00000000
    assert_eq!(cur.get(CmdHcaCap::log_max_l2_table), 0x10); // 0x90 bits 28:24
    assert_eq!(cur.get(CmdHcaCap::log_uar_page_sz), 0); // 0x90 bits 15:0
    assert_eq!(cur.get(CmdHcaCap::device_frequency_mhz), 275); // 0x98
    // dump 0f0: 00000000 00000001 00080010 00000000
    assert!(cur.get(CmdHcaCap::cqe_compression)); // 0xb4 bit 0
    assert_eq!(cur.get(CmdHcaCap::cqe_compression_timeout), 8); // 0xb8 bits 31:16
    assert_eq!(cur.get(CmdHcaCap::cqe_compression_max_num), 0x10); // 0xb8 bits 15:0

    // The maximum capabilities (line 169) differ where the current ones are
    // limited: dump 050: 0f0f0017 -> log_max_qp 0x17; 060: ... e0000004 ->
    // gid_table_size 4; 070: 40ff0005 -> pkey_table_size 5; 080: c006cc0e
    // -> cmdif_checksum 3; 0d0: 10000008 -> log_uar_page_sz 8.
    let max: CmdHcaCap = cap_of(&cmds, 0x0, 0);
    assert_eq!(max.get(CmdHcaCap::log_max_qp), 0x17);
    assert_eq!(max.get(CmdHcaCap::gid_table_size), 4);
    assert_eq!(max.get(CmdHcaCap::pkey_table_size), 5);
    assert_eq!(
        max.get(CmdHcaCap::cmdif_checksum),
        caps::CMDIF_CHECKSUM_ENABLED
    );
    assert_eq!(max.get(CmdHcaCap::log_uar_page_sz), 8);

    // After SET_HCA_CAP (line 8041): dump 050: 0f0f0011 -> log_max_qp 17.
    let after: CmdHcaCap = cap_of(&cmds, 0x1, 1);
    assert_eq!(after.get(CmdHcaCap::log_max_qp), 0x11);
}

#[test]
#[cfg_attr(miri, ignore)]
fn other_capabilities_read_by_hand() {
    let cmds = commands();

    // Ethernet offloads, current (line 8681, op_mod 3). Dump 040:
    // e8725903 00000000 00000544 00000000.
    let e: PerProtocolNetworkingOffloadCaps = cap_of(&cmds, 0x3, 0);
    type E = PerProtocolNetworkingOffloadCaps;
    assert!(e.get(E::csum_cap) && e.get(E::vlan_cap) && e.get(E::lro_cap)); // 0xe8: bits 31..29
    assert!(!e.get(E::lro_psh_flag) && e.get(E::lro_time_stamp)); // bits 28, 27
    assert!(e.get(E::self_lb_mc) && e.get(E::self_lb_uc)); // 0x72: bits 22, 21
    assert_eq!(e.get(E::max_lso_cap), 0x12); // 0x72: bits 20:16 = 10010
    assert_eq!(e.get(E::multi_pkt_send_wqe), 1); // 0x59: bits 15:14 = 01
    assert_eq!(e.get(E::wqe_inline_mode), 1); // bits 13:12 = 01 (vport context)
    assert_eq!(e.get(E::rss_ind_tbl_cap), 9); // bits 11:8 = 1001
    assert!(e.get(E::tunnel_stateless_gre) && e.get(E::tunnel_stateless_vxlan)); // 0x03
    assert_eq!(e.get(E::lro_min_mss_size), 0x544); // 0x08 bits 15:0
    // dump 070: 00000008 00000010 00000020 00000200 (0x30..0x3f).
    assert_eq!(
        e.get(E::lro_timer_supported_periods),
        [0, 0, 0, 8, 0, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 2, 0]
    );

    // Atomic, current (line 9327, op_mod 7). Dump 050: 0000000f 0000003c
    // 0000003c 00000000 (0x10..0x1f); dump 040 all zero (0x08: big-endian
    // 8-byte atomics, host endianness not supported).
    let a: AtomicCaps = cap_of(&cmds, 0x7, 0);
    assert_eq!(
        a.get(AtomicCaps::atomic_operations),
        caps::ATOMIC_OPS_CMP_SWAP
            | caps::ATOMIC_OPS_FETCH_ADD
            | caps::ATOMIC_OPS_MASKED_CMP_SWAP
            | caps::ATOMIC_OPS_MASKED_FETCH_ADD
    );
    assert_eq!(a.get(AtomicCaps::atomic_size_qp), 0x3c); // 4, 8, 16, 32 bytes
    assert_eq!(a.get(AtomicCaps::atomic_size_dc), 0x3c);
    assert_eq!(
        a.get(AtomicCaps::atomic_req_8B_endianness_mode),
        caps::ATOMIC_REQ_8B_ENDIANNESS_MODE_BIG_ENDIAN
    );
    assert!(!a.get(AtomicCaps::supported_atomic_req_8B_endianness_mode_1));

    // RoCE, current (line 9967, op_mod 9). Dump 050: 00070007 000012b7
    // ffffc000 00000100 (0x10..0x1f).
    let r: RoceCap = cap_of(&cmds, 0x9, 0);
    assert_eq!(r.get(RoceCap::l3_type), 7); // 0x10 bits 19:16
    assert_eq!(
        r.get(RoceCap::roce_version),
        caps::ROCE_VERSION_1 | caps::ROCE_VERSION_1_5 | caps::ROCE_VERSION_2
    ); // 0x10 bits 7:0
    assert_eq!(r.get(RoceCap::r_roce_dest_udp_port), 4791); // 0x14 bits 15:0
    assert_eq!(r.get(RoceCap::r_roce_max_src_udp_port), 0xffff); // 0x18 bits 31:16
    assert_eq!(r.get(RoceCap::r_roce_min_src_udp_port), 0xc000); // 0x18 bits 15:0
    assert_eq!(r.get(RoceCap::roce_address_table_size), 0x100); // 0x1c bits 15:0

    // Flow tables, current (line 10607, op_mod 0xf). NIC receive properties
    // at 0x40 (dump 080: c8000000 100000ff 00000000 00000009; 090: 0000000a
    // 00000019), NIC transmit at 0x100 (dump 140: 88000000 ...).
    let f: FlowTableNicCap = cap_of(&cmds, 0xf, 0);
    let rx = f.get(FlowTableNicCap::flow_table_properties_nic_receive);
    type P = FlowTablePropLayout;
    assert!(rx.get(P::ft_support) && rx.get(P::flow_tag) && rx.get(P::modify_root)); // 0xc8
    assert!(!rx.get(P::flow_counter));
    assert_eq!(rx.get(P::log_max_ft_size), 0x10); // 0x04 bits 29:24
    assert_eq!(rx.get(P::max_ft_level), 0xff); // 0x04 bits 7:0
    assert_eq!(rx.get(P::log_max_ft_num), 9); // 0x0c bits 7:0
    assert_eq!(rx.get(P::log_max_destination), 0x0a); // 0x10 bits 7:0
    assert_eq!(rx.get(P::log_max_flow), 0x19); // 0x14 bits 7:0
    let tx = f.get(FlowTableNicCap::flow_table_properties_nic_transmit);
    assert!(tx.get(P::ft_support) && !tx.get(P::flow_tag) && tx.get(P::modify_root)); // 0x88
}

#[test]
#[cfg_attr(miri, ignore)]
fn dumps_write_back_as_linux_printed_them() {
    let text = trace_text();
    let cmds = commands();
    // The hex lines of the original without their timestamps, per dump,
    // keyed by the line of the dump header.
    let mut original: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for (i, line) in text.lines().enumerate() {
        let s = line.find("] ").map_or(line, |p| &line[p + 2..]).trim();
        if s.contains("dump command ") {
            current = Some(i + 1);
            original.insert(i + 1, Vec::new());
        } else if let Some((off, _)) = s.split_once(": ") {
            if off.len() >= 3 && off.bytes().all(|b| b.is_ascii_hexdigit()) {
                if let Some(d) = current.and_then(|c| original.get_mut(&c)) {
                    d.push(s.to_string());
                }
            }
        }
    }
    let mut written = String::new();
    let mut compared = 0;
    for c in &cmds {
        for (dir, dump) in [
            (trace::Direction::Input, &c.input),
            (trace::Direction::Output, output(c)),
        ] {
            let mut s = String::new();
            trace::write_dump(&mut s, dir, &dump.entry, &dump.blocks).unwrap();
            let first = s.lines().next().unwrap();
            assert!(first.starts_with("dump command ") && first.ends_with(&dir.to_string()));
            let hex: Vec<String> = s
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with("dump") && !l.starts_with("command"))
                .map(str::to_string)
                .collect();
            assert_eq!(&hex, &original[&dump.line], "dump at line {}", dump.line);
            compared += 1;
            written.push_str(&s);
        }
    }
    assert_eq!(compared, original.len());

    // What we write parses back to the same commands.
    let again = trace::parse(&written).unwrap();
    assert_eq!(again.len(), cmds.len());
    for (a, b) in again.iter().zip(&cmds) {
        assert_eq!(a.input.message, b.input.message);
        assert_eq!(output(a).message, output(b).message);
        assert_eq!(a.input.entry, b.input.entry);
        assert_eq!(a.input.blocks, b.input.blocks);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn commands_know_their_types() {
    // The Command trait ties each input to its output type and opcode.
    assert_eq!(<QueryHcaCapIn as Command>::OPCODE, Opcode::QUERY_HCA_CAP);
    assert_eq!(
        <<QueryHcaCapIn as Command>::Output as Layout>::SIZE,
        QueryHcaCapOut::SIZE
    );
    assert_eq!(
        <<CreateEqIn as Command>::Output as Layout>::INFO.ifc,
        "create_eq_out"
    );
}
