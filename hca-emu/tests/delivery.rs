//! Delivery checks on the command entry and mailbox chains, each answered
//! with its delivery status (the raw command interface, entries and chains
//! built with firmware-cmds and then tampered with).

mod common;

use common::{Raw, inp, setf};
use hca_emu::{EmuConfig, FaultKind};

fn query_hca_cap() -> Vec<u8> {
    inp(0x100, 1, 16)
}

/// A command with an input chain: SET_ISSI padded to 0x100 bytes is not a
/// valid length for the command itself, but delivery is checked first.
fn long_input() -> Vec<u8> {
    let mut m = inp(0x10b, 0, 0x300);
    setf(&mut m, 8, 15, 0, 1);
    m
}

fn enabled() -> Raw {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    r
}

fn delivery(
    r: &mut Raw,
    input: &[u8],
    out_len: usize,
    f: impl FnOnce(&mut [u8; 64], &platform::DmaRegion, &platform::DmaRegion),
) -> u8 {
    let a = r.cmd_with(input, out_len, 0x42, f).expect("completes");
    assert_eq!(a.entry[0x3f] & 1, 0, "ownership returned");
    a.delivery
}

#[test]
fn bad_descriptor_type() {
    let mut r = enabled();
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |e, _, _| e[0] = 6),
        0x10
    );
    // The device still works afterwards.
    r.ok(&query_hca_cap(), 0x1010);
}

#[test]
fn reserved_entry_fields() {
    let mut r = enabled();
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |e, _, _| e[2] = 1),
        0x09
    );
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |e, _, _| e[0x3e] = 1),
        0x09
    );
}

#[test]
fn lengths() {
    let mut r = enabled();
    let q = query_hca_cap();
    assert_eq!(
        delivery(&mut r, &q, 0x1010, |e, _, _| e[4..8]
            .copy_from_slice(&8u32.to_be_bytes())),
        0x07
    );
    assert_eq!(
        delivery(&mut r, &q, 0x1010, |e, _, _| e[0x38..0x3c]
            .copy_from_slice(&4u32.to_be_bytes())),
        0x08
    );
    assert_eq!(
        delivery(&mut r, &q, 0x1010, |e, _, _| e[0x38..0x3c]
            .copy_from_slice(&u32::MAX.to_be_bytes())),
        0x08
    );
    // 12 bytes, the size of enable_hca_out, as rdma-core's mlx5_vfio asks:
    // delivered; QUERY_HCA_CAP itself needs its whole output.
    let a = r.cmd(&q, 12);
    assert_eq!((a.delivery, a.status), (0, 0x51));
    assert_eq!(a.syndrome, hca_emu::syndrome::OUTPUT_TOO_SHORT);
}

#[test]
fn enable_hca_with_its_12_byte_output() {
    let mut r = Raw::new(hca_emu::EmuConfig::default());
    let a = r.cmd(&inp(0x104, 0, 16), 12);
    assert_eq!((a.delivery, a.status, a.out.len()), (0, 0, 12));
    let a = r.cmd(&inp(0x105, 0, 16), 8);
    assert_eq!(
        (a.delivery, a.status),
        (0, 0x51),
        "DISABLE_HCA needs 12 bytes"
    );
    let a = r.cmd(&inp(0x105, 0, 16), 12);
    assert_eq!((a.delivery, a.status), (0, 0));
}

#[test]
fn misaligned_chain_pointers() {
    let mut r = enabled();
    // Input pointer with bit 9 set (the entry field keeps bits 31:9).
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |e, _, _| e[0x0e] ^= 0x02),
        0x05
    );
    // Output pointer likewise.
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |e, _, _| e[0x36] ^= 0x02),
        0x04
    );
    // A block's next pointer not 1 KiB aligned.
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |_, inb, _| inb
            .write_u8(0x237, 0x10)),
        0x05
    );
}

#[test]
fn block_numbers_and_tokens() {
    let mut r = enabled();
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |_, inb, _| inb
            .write_be32(0x238, 7)),
        0x03
    );
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |_, inb, _| inb
            .write_u8(0x23d, 0x43)),
        0x02
    );
    // The second input block.
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |_, inb, _| inb
            .write_u8(1024 + 0x23d, 0)),
        0x02
    );
    // Output blocks are checked too.
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |_, _, outb| outb
            .write_be32(3 * 1024 + 0x238, 1)),
        0x03
    );
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |_, _, outb| outb
            .write_u8(0x23d, 9)),
        0x02
    );
}

#[test]
fn signatures_are_checked_only_with_cmdif_checksum_on() {
    let mut r = enabled();
    // Checksum off (the recorded current caps): a bad signature passes.
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |e, _, _| e[0x3d] ^= 0xff),
        0
    );
    // Turn it on: SET_HCA_CAP with cmdif_checksum = 3 (cmd_hca_cap dword
    // 0x40 bits 15:14, at input 0x10 + 0x42).
    let cur = r.ok(&query_hca_cap(), 0x1010);
    let mut set = inp(0x109, 0, 0x1010);
    set[0x10..].copy_from_slice(&cur[0x10..]);
    set[0x10 + 0x42] |= 0xc0;
    r.ok(&set, 16);
    r.sign = true;
    r.ok(&query_hca_cap(), 0x1010);
    assert_eq!(
        delivery(&mut r, &query_hca_cap(), 0x1010, |e, _, _| e[0x3d] ^= 0x01),
        0x01
    );
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |_, inb, _| inb
            .write_u8(0x10, 0x77)),
        0x01
    );
    assert_eq!(
        delivery(&mut r, &long_input(), 16, |_, inb, _| inb
            .write_u8(0x23e, 0x77)),
        0x01
    );
    // The answer's entry and blocks are signed by the firmware.
    let a = r.cmd(&query_hca_cap(), 0x1010);
    assert_eq!(a.entry.iter().fold(0, |x, y| x ^ y), 0xff);
}

#[test]
fn chain_through_unmapped_memory_is_an_iommu_fault() {
    let mut r = enabled();
    // Input pointer to an IOVA nobody mapped.
    let d = delivery(&mut r, &long_input(), 16, |e, _, _| {
        e[0x08..0x10].copy_from_slice(&0x7_0000_0000u64.to_be_bytes());
    });
    assert_eq!(d, 0x06);
    // A null next pointer where a second block is needed.
    let d = delivery(&mut r, &long_input(), 16, |_, inb, _| {
        inb.write_be64(0x230, 0);
    });
    assert_eq!(d, 0x06);
    let f = r.emu.iommu_faults();
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|f| f.kind == FaultKind::Read));
    assert_eq!(f[0].iova, 0x7_0000_0000);
    assert_eq!(f[1].iova, 0);
}

#[test]
fn doorbell_for_an_entry_the_driver_owns_is_ignored() {
    let r = enabled();
    let e = [0u8; 64];
    r.post(3, &e);
    r.emu.run_until_idle();
    assert!(
        r.emu
            .ignored_doorbells()
            .iter()
            .any(|s| s.contains("slot 3"))
    );
}
