//! Replays the inputs of every command of the real-hardware trace
//! (`data/prm/trace-mlx5_core-cx4.txt`, Linux mlx5_core and a ConnectX-4 with
//! firmware 14.12.1220), in order, through the raw command interface, and
//! checks that the emulator returns the statuses and output lengths the real
//! firmware returned, and the real bytes where the answer does not depend on
//! host addresses or object numbers (capabilities, adapter, ISSI, pages).
//!
//! Inputs the trace does not show, or that name host memory, are built the
//! way Linux built them:
//! - MANAGE_PAGES: the dump omits the 6 boot pages and cuts the list of
//!   12,868 init pages short, and its addresses are host physical: the test
//!   gives as many pages of its own DMA memory.
//! - ACCESS_REG (HOST_ENDIANNESS, 0x7004): the register data is not dumped;
//!   Linux writes `he` = 0 on a little-endian host.
//! - CREATE_EQ: `uar_page` is the UAR the emulator allocated for the first
//!   ALLOC_UAR (the real one answered 0x10), and `pas` points to a buffer of
//!   the test's DMA memory of the EQ's size and page size.
//!
//! Object numbers (UARs, EQs) are the emulator's own: real firmware numbers
//! are not part of the interface.
//!
//! What the byte equality proves, and what it does not: the emulator's
//! capability, QUERY_ADAPTER and QUERY_ISSI payloads are *taken from this
//! same trace* (`hca-emu/data/cx4-fw14.12.1220.txt`), so equal payload
//! bytes are circular by construction and prove only that the personality
//! was extracted and is served unchanged. Not circular: where the payload
//! lands (the 16-byte header, the output mailbox chain of a 4 KiB answer),
//! the statuses, syndromes and output lengths, the plain answers of the
//! commands that change state (ENABLE_HCA, MANAGE_PAGES, SET_HCA_CAP,
//! INIT_HCA, SET_ISSI), and the checks at the end, which compare the
//! emulator's state after the replay with what Linux's inputs asked for.

mod common;

use common::trace::{self, TraceCmd};
use common::{Raw, put64, setf};
use hca_emu::EmuConfig;
use platform::Platform;

fn replay_input(r: &mut Raw, c: &TraceCmd, uars: &[u32]) -> Vec<u8> {
    let mut m = c.input_msg();
    let want = c.input_length();
    match c.opcode {
        0x108 => {
            // MANAGE_PAGES give: our own pages.
            let n = u32::from_be_bytes(m[12..16].try_into().unwrap()) as usize;
            assert_eq!(want, 16 + 8 * n);
            let region = r.p.alloc_dma(n * 4096, 4096).unwrap();
            m.resize(want, 0);
            for i in 0..n {
                put64(&mut m, 16 + 8 * i, region.iova() + (i * 4096) as u64);
            }
            r.pages.push(region);
        }
        0x805 => {
            // ACCESS_REG write of HOST_ENDIANNESS: he = 0 (little endian).
            assert_eq!(u16::from_be_bytes([m[10], m[11]]), 0x7004);
            m.resize(want, 0);
        }
        0x301 => {
            assert_eq!(m.len(), want, "CREATE_EQ input fully dumped");
            // eqc at 0x10: log_eq_size 0x0c[28:24], uar_page 0x0c[23:0],
            // log_page_size 0x18[28:24]; pas at 0x110.
            let w = u32::from_be_bytes(m[0x1c..0x20].try_into().unwrap());
            assert_eq!(w & 0xff_ffff, 0x10, "the trace's EQs use UAR 0x10");
            let log = (w >> 24) & 0x1f;
            let lps = (u32::from_be_bytes(m[0x28..0x2c].try_into().unwrap()) >> 24) & 0x1f;
            setf(&mut m, 0x1c, 23, 0, u64::from(uars[0]));
            let page = 4096usize << lps;
            let size = (64usize << log).max(page);
            let buf = r.p.alloc_dma(size, page).unwrap();
            put64(&mut m, 0x110, buf.iova());
            r.other.push(buf);
        }
        _ => assert_eq!(m.len(), want, "input of {:#x} fully dumped", c.opcode),
    }
    m
}

#[test]
fn every_trace_command_gets_the_real_answer() {
    let cmds = trace::parse();
    let mut r = Raw::new(EmuConfig::default().with_real_pages());
    let mut uars = Vec::new();
    let mut checked_bytes = 0;
    for (i, c) in cmds.iter().enumerate() {
        let input = replay_input(&mut r, c, &uars);
        let real_out = c.output_msg();
        let token = c.input.entry[0x3c];
        let a = r
            .cmd_with(&input, c.output_length(), token, |_, _, _| {})
            .unwrap_or_else(|| panic!("command {i} ({:#x}) did not complete", c.opcode));
        // Delivery status and ownership as the real firmware left them.
        assert_eq!(
            a.entry[0x3f], c.output.entry[0x3f],
            "command {i} ({:#x}): status_own",
            c.opcode
        );
        assert_eq!(a.entry[0x3c], c.output.entry[0x3c], "command {i}: token");
        // Output length (the entry's) and status/syndrome.
        assert_eq!(
            &a.entry[0x38..0x3c],
            &c.output.entry[0x38..0x3c],
            "command {i}: output length"
        );
        assert_eq!(a.out.len(), c.output_length());
        assert_eq!(
            &a.out[..8],
            &real_out[..8],
            "command {i} ({:#x}): status and syndrome",
            c.opcode
        );
        match c.opcode {
            // Capabilities, adapter, ISSI, page counts, and the plain
            // answers: every byte the real firmware wrote.
            0x100 | 0x101 | 0x10a | 0x107 | 0x104 | 0x10b | 0x108 | 0x109 | 0x102 => {
                assert_eq!(
                    real_out.len(),
                    c.output_length(),
                    "command {i}: whole answer dumped"
                );
                assert_eq!(
                    a.out,
                    real_out,
                    "command {i} ({:#x} op_mod {:#x}): answer bytes",
                    c.opcode,
                    c.op_mod()
                );
                checked_bytes += a.out.len();
            }
            // The register data of the answer is not dumped: the inline part.
            0x805 => assert_eq!(
                &a.out[..16],
                &real_out[..16],
                "command {i}: ACCESS_REG inline answer"
            ),
            0x802 => {
                let uar = a.be32(8) & 0xff_ffff;
                assert_ne!(uar, 0);
                uars.push(uar);
            }
            0x301 => assert_ne!(a.be32(8) & 0xff, 0, "EQ number"),
            o => panic!("unexpected opcode {o:#x} in the trace"),
        }
    }
    assert!(checked_bytes > 10 * 4096);
    assert_eq!(uars.len(), 4);
    assert!(
        r.emu.iommu_faults().is_empty(),
        "{:?}",
        r.emu.iommu_faults()
    );
    // 6 boot + 12,868 init pages held, as on the real card.
    assert_eq!(r.emu.firmware_pages(), 6 + 12_868);

    // Not circular: the general capabilities the firmware reports as
    // current now are the ones Linux's SET_HCA_CAP wrote (its input, not
    // the recorded answers), field by field, for every field the
    // firmware lets a driver set; the others kept the recorded values.
    let set = cmds
        .iter()
        .find(|c| c.opcode == 0x109)
        .expect("the trace sets capabilities");
    let set_in = set.input_msg();
    let before = cmds
        .iter()
        .find(|c| c.opcode == 0x100 && c.op_mod() == 1)
        .expect("the trace queries the current general caps")
        .output_msg();
    let now = r.ok(&common::inp(0x100, 1, 16), 16 + 4096);
    let t = hca_emu::ifc::ifc();
    let mut changed = 0;
    for f in [
        "log_max_qp",
        "pkey_table_size",
        "gid_table_size",
        "cmdif_checksum",
        "log_uar_page_sz",
        "cqe_version",
        "uar_4k",
    ] {
        let asked = t.get(&set_in[0x10..], "cmd_hca_cap", f);
        let was = t.get(&before[0x10..], "cmd_hca_cap", f);
        assert_eq!(t.get(&now[0x10..], "cmd_hca_cap", f), asked, "{f}");
        changed += usize::from(asked != was);
    }
    // Linux raised log_max_qp from 0xe to 0x11.
    assert!(
        changed > 0,
        "the SET changed nothing: the check would be empty"
    );
}
