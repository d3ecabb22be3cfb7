//! Malformed input: truncated mailbox chains, wrong block numbers, bad
//! signatures with checking on, lengths that do not add up, unknown opcodes
//! and statuses, and random bytes into every decoder and the trace parser.
//! Every case gets a typed error; nothing panics.
//!
//! Also the encoding checks: buffers pre-filled with 0xa5 so that a byte an
//! encoder forgets to write is caught.

use firmware_cmds::Error;
use firmware_cmds::cmdq::CmdQueueEntry;
use firmware_cmds::command::{Encode, WithArray, check_status, input_header, read_array};
use firmware_cmds::eq::{CreateEqIn, Eqe};
use firmware_cmds::flow::{DestFormatStruct, SetFteIn};
use firmware_cmds::hca::ManagePagesIn;
use firmware_cmds::layout::{FieldKind, LayoutInfo, read_bits, write_bits};
use firmware_cmds::mailbox::{CmdIfBox, InputChain, MAILBOX_DATA_SIZE, OutputChain, blocks_for};
use firmware_cmds::opcode::Opcode;
use firmware_cmds::registry::{self, all_layouts};
use firmware_cmds::status::{CmdStatus, DeliveryStatus};
use proptest::prelude::*;

/// Proptest settings: fewer cases and no failure files under Miri (which
/// isolates the file system).
fn config(cases: u32) -> ProptestConfig {
    if cfg!(miri) {
        ProptestConfig {
            cases: 4,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    } else {
        ProptestConfig {
            cases,
            ..ProptestConfig::default()
        }
    }
}

fn chain_blocks<E: Encode + ?Sized>(msg: &E, token: u8, signed: bool) -> Vec<CmdIfBox> {
    let chain = InputChain::new(msg, token, signed);
    (0..chain.num_blocks())
        .map(|i| {
            let next = if i + 1 < chain.num_blocks() {
                0x10_0000 + 0x400 * (i as u64 + 1)
            } else {
                0
            };
            chain.block(i, next).unwrap()
        })
        .collect()
}

#[test]
fn truncated_chain_is_reported() {
    let msg = vec![0x11u8; 16 + 3 * 512];
    let blocks = chain_blocks(&msg[..], 9, false);
    let mut out = OutputChain::new(msg.len(), 9, false);
    out.push(&blocks[0]).unwrap();
    out.push(&blocks[1]).unwrap();
    assert_eq!(
        out.finish().unwrap_err(),
        Error::ChainTooShort {
            len: msg.len(),
            need: 3,
            got: 2
        }
    );
}

#[test]
fn wrong_block_numbers_and_tokens_are_reported() {
    let msg = vec![0x22u8; 16 + 2 * 512];
    let blocks = chain_blocks(&msg[..], 9, false);
    let mut out = OutputChain::new(msg.len(), 9, false);
    assert_eq!(
        out.push(&blocks[1]).unwrap_err(),
        Error::BadBlockNumber { index: 0, found: 1 }
    );
    let mut out = OutputChain::new(msg.len(), 10, false);
    assert!(matches!(
        out.push(&blocks[0]),
        Err(Error::BadToken {
            expected: 10,
            found: 9,
            ..
        })
    ));
}

#[test]
fn bad_signatures_are_reported_when_checking() {
    let msg = [0x33u8; 100];
    let mut block = chain_blocks(&msg[..], 4, true).remove(0);
    block.check(0, 4, true).unwrap();
    let mut bytes = *block.as_bytes();
    bytes[0x23e] ^= 0x10; // ctrl_signature
    block = CmdIfBox::from_array(bytes);
    assert!(matches!(
        block.check(0, 4, true),
        Err(Error::BadSignature {
            which: "ctrl_signature",
            ..
        })
    ));
    // Not checked while cmdif_checksum is off.
    block.check(0, 4, false).unwrap();

    let e = CmdQueueEntry::build(&[0; 16], 16, 0, 16, 0, 1).unwrap();
    let mut b = *e.as_bytes();
    b[0x20] = 0x5a;
    assert!(matches!(
        CmdQueueEntry::from_array(b).check_signature(),
        Err(Error::BadSignature { .. })
    ));
}

#[test]
fn lengths_that_do_not_add_up() {
    // More blocks than the length needs.
    let msg = [0u8; 16 + 10];
    let blocks = chain_blocks(&vec![0u8; 16 + 600][..], 1, false);
    let mut out = OutputChain::new(msg.len(), 1, false);
    out.push(&blocks[0]).unwrap();
    assert!(matches!(out.push(&blocks[1]), Err(Error::BadLength { .. })));
    // An array longer than its image.
    assert!(matches!(
        read_array::<u64>(&[0u8; 20], 16, 1),
        Err(Error::Truncated { .. })
    ));
    // A block index past the chain.
    assert!(InputChain::new(&msg[..], 1, false).block(1, 0).is_err());
    assert_eq!(blocks_for(16), 0);
}

#[test]
fn unknown_opcodes_and_statuses() {
    assert_eq!(
        registry::lookup(&[0xab, 0xcd, 0, 0, 0, 0, 0, 0]).unwrap_err(),
        Error::UnknownOpcode(0xabcd)
    );
    assert!(!Opcode(0xabcd).is_known());
    assert!(!CmdStatus(0x77).is_known());
    assert!(!DeliveryStatus(0x42).is_known());
    let input = [0x05, 0x00, 0, 0, 0, 0, 0, 0];
    let out = [0x03, 0, 0, 0, 0x00, 0x1a, 0x2b, 0x3c];
    let e = check_status(&input, &out).unwrap_err();
    assert_eq!(
        e.to_string(),
        "CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1a2b3c)"
    );
    assert!(input_header(&input[..4]).is_err());
}

/// Encoders write every byte they own: the same range encoded into a buffer
/// of 0xa5 and into a buffer of zeros gives the same bytes, and those are
/// the expected message (header, items, zero padding).
#[test]
fn encoders_overwrite_prefilled_buffers() {
    let head = ManagePagesIn::new()
        .with(ManagePagesIn::op_mod, 1)
        .unwrap()
        .with(ManagePagesIn::input_num_entries, 70)
        .unwrap();
    let pages: Vec<u64> = (0..70).map(|i| 0x1234_5000 + 0x1000 * i).collect();
    let msg = WithArray::new(&head, &pages);
    let mut expected = head.as_bytes().to_vec();
    for p in &pages {
        expected.extend_from_slice(&p.to_be_bytes());
    }
    assert_eq!(msg.encoded_len(), expected.len());
    // Inline part and each mailbox block's data, in 0xa5-filled memory.
    let blocks = blocks_for(expected.len());
    let mut inline = [0xa5u8; 16];
    msg.encode_range(0, &mut inline);
    assert_eq!(&inline[..], &expected[..16]);
    for i in 0..blocks {
        let mut data = [0xa5u8; MAILBOX_DATA_SIZE];
        msg.encode_range(16 + i * MAILBOX_DATA_SIZE, &mut data);
        let start = 16 + i * MAILBOX_DATA_SIZE;
        let end = (start + MAILBOX_DATA_SIZE).min(expected.len());
        assert_eq!(&data[..end - start], &expected[start..end]);
        assert!(
            data[end - start..].iter().all(|&b| b == 0),
            "padding zeroed"
        );
    }
    // The chain blocks carry exactly that.
    for (i, b) in chain_blocks(&msg, 7, false).iter().enumerate() {
        let mut data = [0xa5u8; MAILBOX_DATA_SIZE];
        msg.encode_range(16 + i * MAILBOX_DATA_SIZE, &mut data);
        assert_eq!(b.data(), &data[..]);
    }

    // Flow destinations as 8-byte images after SET_FLOW_TABLE_ENTRY.
    let fte = SetFteIn::new();
    let dest = DestFormatStruct::new()
        .with(DestFormatStruct::destination_type, 2)
        .unwrap()
        .with(DestFormatStruct::destination_id, 0x12345)
        .unwrap();
    let dests = [*dest.as_bytes(); 2];
    let m = WithArray::new(&fte, &dests);
    let mut tail = [0xa5u8; 20];
    m.encode_range(SetFteIn::SIZE, &mut tail);
    assert_eq!(&tail[..8], &[2, 0x01, 0x23, 0x45, 0, 0, 0, 0]);
    assert_eq!(&tail[8..16], &tail[..8]);
    assert_eq!(&tail[16..], &[0; 4]);

    // A context set field by field over 0xa5 keeps the bits it does not own.
    let mut c = CreateEqIn::from_array([0xa5; CreateEqIn::SIZE]);
    c.set(CreateEqIn::opcode, 0x301).unwrap();
    assert_eq!(&c.as_bytes()[..4], &[0x03, 0x01, 0xa5, 0xa5]);
}

/// Every field of every layout: writing a value changes exactly the field's
/// bits, and reading gives the value back.
fn check_every_field(image: &[u8], value: u64) {
    for info in all_layouts() {
        let mut img = vec![0u8; info.size];
        for (d, s) in img.iter_mut().zip(image.iter().cycle()) {
            *d = *s;
        }
        for f in info.fields {
            let (FieldKind::Uint { .. } | FieldKind::Flag) = f.kind else {
                continue;
            };
            let mask = if f.width == 64 {
                u64::MAX
            } else {
                (1 << f.width) - 1
            };
            let before = img.clone();
            write_bits(&mut img, f.offset, f.width, value & mask);
            assert_eq!(
                read_bits(&img, f.offset, f.width),
                value & mask,
                "{}.{}",
                info.ifc,
                f.name
            );
            for bit in 0..info.size * 8 {
                let inside = bit >= f.offset as usize && bit < (f.offset + f.width) as usize;
                let (byte, m) = (bit / 8, 0x80u8 >> (bit % 8));
                if !inside {
                    assert_eq!(
                        img[byte] & m,
                        before[byte] & m,
                        "{}.{} bit {bit}",
                        info.ifc,
                        f.name
                    );
                }
            }
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn every_field_writes_only_its_bits() {
    check_every_field(&[0xa5], 0xffff_ffff_ffff_ffff);
    check_every_field(&[0x00], 0x5a5a_5a5a_5a5a_5a5a);
}

/// Reads every field of `info` out of `image` through the reflection table;
/// a short image is a typed error, never a panic.
fn read_all(info: &LayoutInfo, image: &[u8]) {
    for f in info.fields {
        let end = (f.offset as usize + f.width as usize).div_ceil(8);
        match info.read(image, f) {
            Ok(_) => assert!(end <= image.len() || matches!(f.kind, FieldKind::Flex { .. })),
            Err(Error::Truncated { .. }) => assert!(end > image.len()),
            Err(e) => panic!("{}.{}: {e:?}", info.ifc, f.name),
        }
    }
    struct Show<'a>(&'a LayoutInfo, &'a [u8]);
    impl std::fmt::Display for Show<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt_image(self.1, f)
        }
    }
    let _ = Show(info, image).to_string();
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn random_bytes_into_every_layout(bytes in proptest::collection::vec(any::<u8>(), 0..0x1100)) {
        for info in all_layouts() {
            read_all(info, &bytes);
            if bytes.len() > info.size {
                read_all(info, &bytes[..info.size]);
            }
        }
    }

    #[test]
    fn random_bytes_into_the_command_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = registry::lookup(&bytes);
        let _ = input_header(&bytes);
        let _ = firmware_cmds::command::output_header(&bytes);
        if bytes.len() >= 8 {
            let _ = check_status(&bytes, &bytes);
        }
        let _ = Eqe::from_slice(&bytes).map(|e| (e.to_string(), e.is_sw_owned(u32::MAX, 40)));
        if bytes.len() == 64 {
            let e = CmdQueueEntry::from_array(bytes.clone().try_into().unwrap());
            let _ = e.check_signature();
            let _ = (e.input_mailbox(), e.output_mailbox(), e.delivery_status().to_string());
            let _ = e.status_word();
        }
    }

    #[test]
    /// A well-formed output chain with one byte changed: the chain names
    /// exactly what is wrong (the block number, the token, a signature when
    /// they are checked), and a change in the data only is carried through
    /// to that byte of the message.
    fn a_changed_byte_in_a_valid_chain_is_named(
        len in 17usize..3000,
        token in any::<u8>(),
        signed in any::<bool>(),
        seed in any::<u8>(),
        // Half of the changes in the trailer (0x230..0x240).
        at in (any::<usize>(), prop_oneof![0usize..576, 0x230usize..0x240], 1u8..=255),
        drop_last in any::<bool>(),
    ) {
        let msg: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let mut blocks = chain_blocks(&msg[..], token, signed);
        let n = blocks.len();
        let (k, pos, x) = (at.0 % n, at.1, at.2);
        let mut raw: [u8; 576] = *blocks[k].as_bytes();
        raw[pos] ^= x;
        blocks[k] = CmdIfBox::from_array(raw);
        if drop_last {
            blocks.pop();
        }
        let mut chain = OutputChain::new(len, token, signed);
        let mut data = msg[..16].to_vec();
        let mut first_err = None;
        for (i, b) in blocks.iter().enumerate() {
            match chain.push(b) {
                Ok(d) => data.extend_from_slice(d),
                Err(e) => {
                    first_err = Some((i, e));
                    break;
                }
            }
        }
        let dropped = drop_last && k == n - 1;
        if dropped {
            // The changed block is not pushed.
            prop_assert!(first_err.is_none(), "{first_err:?}");
        } else if (0x238..0x23c).contains(&pos) {
            let found = k as u32 ^ (u32::from(x) << (8 * (0x23b - pos)));
            prop_assert_eq!(
                first_err,
                Some((k, Error::BadBlockNumber { index: k as u32, found }))
            );
            return Ok(());
        } else if pos == 0x23d {
            prop_assert_eq!(
                first_err,
                Some((k, Error::BadToken { what: "mailbox block", expected: token, found: token ^ x }))
            );
            return Ok(());
        } else if signed {
            // ctrl_signature covers 0x200..0x23f, signature every byte.
            let which = if (0x200..0x23f).contains(&pos) { "ctrl_signature" } else { "signature" };
            prop_assert!(
                matches!(first_err, Some((i, Error::BadSignature { which: w, .. })) if i == k && w == which),
                "{first_err:?}"
            );
            return Ok(());
        } else {
            prop_assert!(first_err.is_none(), "{first_err:?}");
        }
        let pushed = blocks.len();
        let r = chain.finish();
        if drop_last {
            prop_assert_eq!(r, Err(Error::ChainTooShort { len, need: n, got: n - 1 }));
            return Ok(());
        }
        prop_assert_eq!(r, Ok(()));
        prop_assert_eq!(pushed, n);
        // Only a data byte inside the message shows, exactly there.
        let mut want = msg.clone();
        let p = 16 + k * 512 + pos;
        if pos < 512 && p < len {
            want[p] ^= x;
        }
        prop_assert_eq!(data, want);
    }
}

#[cfg(feature = "alloc")]
mod trace_input {
    use super::*;

    /// The real-hardware dump (Linux mlx5_core and a ConnectX-4).
    const REAL_TRACE: &str = include_str!("../../data/prm/trace-mlx5_core-cx4.txt");
    use firmware_cmds::trace::{self, Direction, ParseOptions};

    /// A small dump: one command with two input blocks and its output.
    fn sample(token: u8, signed: bool) -> String {
        let head = ManagePagesIn::new()
            .with(ManagePagesIn::op_mod, 1)
            .unwrap()
            .with(ManagePagesIn::input_num_entries, 70)
            .unwrap();
        let pages: Vec<u64> = (0..70).map(|i| 0x7_0000_0000 + 0x1000 * i).collect();
        let msg = WithArray::new(&head, &pages);
        let blocks = chain_blocks(&msg, token, signed);
        let e = CmdQueueEntry::build(
            &InputChain::new(&msg, token, signed).inline(),
            msg.encoded_len() as u32,
            0x10_0000,
            16,
            0,
            token,
        )
        .unwrap();
        let mut out = e.clone();
        out.set(CmdQueueEntry::ownership, false).unwrap();
        let mut s = String::new();
        trace::write_exchange(&mut s, &e, &blocks, &out, &[]).unwrap();
        s
    }

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_sample_parses() {
        let cmds = trace::parse(&sample(5, false)).unwrap();
        assert_eq!(cmds.len(), 1);
        cmds[0].result().unwrap();
        assert!(cmds[0].input.is_complete());
    }

    #[test]
    fn truncated_dumps_are_syntax_errors() {
        let s = sample(5, false);
        let l = lines(&s);
        // Entry cut after two lines.
        let cut = [&l[..3], &l[l.len() - 6..]].concat().join("\n");
        assert!(matches!(
            trace::parse(&cut),
            Err(Error::TraceSyntax {
                reason: "truncated command queue entry",
                ..
            })
        ));
        // A block cut short at the end of the text.
        let cut = l[..20].join("\n");
        assert!(matches!(
            trace::parse(&cut),
            Err(Error::TraceSyntax {
                reason: "truncated mailbox block",
                ..
            })
        ));
        // A line cut in the middle of a word.
        let mut m = l.clone();
        m[3].truncate(20);
        assert!(matches!(
            trace::parse(&m.join("\n")),
            Err(Error::TraceSyntax { line: 4, .. })
        ));
    }

    #[test]
    fn inconsistent_chains_are_mailbox_errors() {
        // Block numbers swapped: edit the trailer of block 0 (dump 270).
        let s = sample(5, false).replace(
            "270: 00000000 00100400 00000000 00050000",
            "270: 00000000 00100400 00000001 00050000",
        );
        assert_eq!(
            trace::parse(&s).unwrap_err(),
            Error::BadBlockNumber { index: 0, found: 1 }
        );
        // Wrong token in a block.
        let s = sample(5, false).replace(
            "270: 00000000 00100400 00000000 00050000",
            "270: 00000000 00100400 00000000 00060000",
        );
        assert!(matches!(trace::parse(&s), Err(Error::BadToken { .. })));
        // A chain that ends before the length: block 0 points nowhere.
        let s = sample(5, false).replace(
            "270: 00000000 00100400 00000000 00050000",
            "270: 00000000 00000000 00000000 00050000",
        );
        assert!(matches!(trace::parse(&s), Err(Error::ChainTooShort { .. })));
        // The length says there is a mailbox, the pointer says none.
        let s = sample(5, false).replacen(
            "000: 07000000 00000240 00000000 00100000",
            "000: 07000000 00000240 00000000 00000000",
            1,
        );
        assert!(
            matches!(trace::parse(&s), Err(Error::BadLength { .. })),
            "{:?}",
            trace::parse(&s)
        );
        // Not a PCIe command entry.
        let s = sample(5, false).replacen("000: 07000000", "000: 06000000", 1);
        assert_eq!(trace::parse(&s).unwrap_err(), Error::BadEntryType(6));
        // The header names another opcode than the entry.
        let s =
            sample(5, false).replacen("MANAGE_PAGES(0x108) INPUT", "MANAGE_PAGES(0x109) INPUT", 1);
        assert!(matches!(
            trace::parse(&s),
            Err(Error::TraceSyntax { line: 1, .. })
        ));
        // An OUTPUT whose token matches no INPUT.
        let l = lines(&sample(5, false));
        let out_start = l
            .iter()
            .rposition(|x| x.starts_with("dump command"))
            .unwrap();
        let orphan = l[out_start..].join("\n");
        assert!(matches!(
            trace::parse(&orphan),
            Err(Error::TraceSyntax { .. })
        ));
    }

    #[test]
    fn signatures_are_checked_on_request() {
        let checked = |t: &str| {
            trace::parse_with(
                t,
                ParseOptions {
                    check_signatures: true,
                },
            )
        };
        let signed = sample(5, true);
        checked(&signed).unwrap();
        let unsigned = sample(5, false);
        assert!(matches!(
            checked(&unsigned),
            Err(Error::BadSignature { .. })
        ));
        // A data byte flipped in a signed block.
        let broken = signed.replacen("040: 00000007 00000000", "040: 00000007 00000001", 1);
        assert_ne!(broken, signed);
        assert!(matches!(checked(&broken), Err(Error::BadSignature { .. })));
    }

    #[test]
    fn statuses_are_checked() {
        let mut e = CmdQueueEntry::build(
            &[0x01, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            16,
            0,
            16,
            0,
            1,
        )
        .unwrap();
        let input = e.clone();
        let result = |out: &CmdQueueEntry| {
            let mut s = String::new();
            trace::write_exchange(&mut s, &input, &[], out, &[]).unwrap();
            trace::parse(&s).unwrap()[0].result()
        };
        e.set(CmdQueueEntry::ownership, false).unwrap();
        result(&e).unwrap();
        e.set(CmdQueueEntry::status, 0x02).unwrap();
        assert_eq!(
            result(&e).unwrap_err(),
            Error::Delivery(DeliveryStatus::TOKEN_ERR)
        );
        e.set(CmdQueueEntry::status, 0x42).unwrap();
        assert_eq!(result(&e).unwrap_err(), Error::UnknownDeliveryStatus(0x42));
        e.set(CmdQueueEntry::status, 0).unwrap();
        let mut out_inline = [0u8; 16];
        out_inline[0] = 0x77;
        e.set(CmdQueueEntry::command_output_inline_data, out_inline)
            .unwrap();
        assert_eq!(result(&e).unwrap_err(), Error::UnknownStatus(0x77));
        out_inline[0] = 0x08;
        out_inline[4..8].copy_from_slice(&0x62bbc6u32.to_be_bytes());
        e.set(CmdQueueEntry::command_output_inline_data, out_inline)
            .unwrap();
        assert_eq!(
            result(&e).unwrap_err().to_string(),
            "ENABLE_HCA(0x104) op_mod(0x0) failed, status limits exceeded(0x8), syndrome (0x62bbc6)"
        );
    }

    #[test]
    fn text_that_is_not_a_trace() {
        for t in [
            "",
            "\n\n",
            "hello world",
            "[ 1.0] usbcore: registered new interface driver",
        ] {
            assert!(
                matches!(trace::parse(t), Err(Error::TraceSyntax { .. })),
                "{t:?}"
            );
        }
        assert!(matches!(
            trace::parse("dump command FOO INPUT"),
            Err(Error::TraceSyntax { .. })
        ));
        assert!(matches!(
            trace::parse("dump command NOP(0x80d) SIDEWAYS"),
            Err(Error::TraceSyntax { .. })
        ));
        assert!(matches!(
            trace::parse("command block:"),
            Err(Error::TraceSyntax { .. })
        ));
        let _ = Direction::Output.to_string();
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        /// Windows of the real ConnectX-4 dump, with a few characters
        /// changed: the parser returns commands whose lengths hold, a
        /// syntax error that names a line of the text, or one of the entry
        /// and chain errors it documents.
        fn mutated_real_dumps_into_the_parser(
            start in any::<usize>(),
            lines in 1usize..240,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        ) {
            let all: Vec<&str> = REAL_TRACE.lines().collect();
            let start = start % all.len();
            let end = (start + lines).min(all.len());
            let mut bytes = all[start..end].join("\n").into_bytes();
            if !bytes.is_empty() {
                for (pos, b) in edits {
                    let i = pos % bytes.len();
                    bytes[i] = b" 0123456789abcdefx:()\n"[usize::from(b) % 22];
                }
            }
            let text = String::from_utf8(bytes).unwrap();
            let nlines = text.lines().count();
            match trace::parse(&text) {
                Ok(cmds) => {
                    for c in cmds {
                        let _ = c.result();
                        let _ = c.decode();
                        prop_assert!(c.input.message.len() <= c.input.length);
                    }
                }
                Err(Error::TraceSyntax { line, .. }) => {
                    prop_assert!(line >= 1 && line <= nlines + 1, "line {line} of {nlines}");
                }
                // A changed hex digit can make an entry or its chain
                // contradict itself; `parse_with` documents these errors.
                Err(
                    Error::BadEntryType(_)
                    | Error::BadLength { .. }
                    | Error::BadBlockNumber { .. }
                    | Error::BadToken { .. }
                    | Error::BadSignature { .. }
                    | Error::ChainTooShort { .. },
                ) => {}
                Err(e) => prop_assert!(false, "an error parse_with does not document: {e}"),
            }
        }

        #[test]
        fn mutated_dumps_into_the_parser(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
            signed in any::<bool>(),
        ) {
            let mut bytes = sample(3, signed).into_bytes();
            for (pos, b) in edits {
                let i = pos % bytes.len();
                // Printable ASCII keeps the text valid UTF-8.
                bytes[i] = b" 0123456789abcdef:x\n[]"[usize::from(b) % 22];
            }
            let mut text = String::from_utf8(bytes).unwrap();
            text.truncate(cut % (text.len() + 1));
            if let Ok(cmds) = trace::parse_with(&text, ParseOptions { check_signatures: signed }) {
                for c in cmds {
                    let _ = c.result();
                    let _ = c.decode();
                    prop_assert!(c.input.message.len() <= c.input.length);
                }
            }
        }
    }
}
