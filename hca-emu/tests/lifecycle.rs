//! The firmware state machine: ENABLE/INIT/TEARDOWN/DISABLE, ISSI, pages,
//! capabilities, and the generic command checks.

mod common;

use common::{Raw, inp, put64, setf};
use hca_emu::syndrome as syn;
use hca_emu::{EmuConfig, HcaState, ObjKind};
use platform::Platform;

#[test]
fn bring_up_and_down_repeatedly_leaves_nothing_behind() {
    let mut r = Raw::new(EmuConfig::default());
    for _ in 0..3 {
        r.init();
        assert_eq!(r.emu.hca_state(), HcaState::Initialized);
        assert_eq!(r.emu.firmware_pages(), 18);
        r.teardown();
        assert_eq!(r.emu.hca_state(), HcaState::Disabled);
    }
    r.free_all();
    r.emu.assert_clean();
}

#[test]
fn nothing_but_enable_before_enable() {
    let mut r = Raw::new(EmuConfig::default());
    assert_eq!(r.fails(&inp(0x10a, 0, 16), 0x70, 0x4), syn::NOT_ENABLED);
    assert_eq!(r.fails(&inp(0x107, 1, 16), 16, 0x4), syn::NOT_ENABLED);
    r.ok(&inp(0x104, 0, 16), 16);
    assert_eq!(r.fails(&inp(0x104, 0, 16), 16, 0x4), syn::ALREADY_ENABLED);
    // Only the pre-init commands before INIT_HCA.
    assert_eq!(r.fails(&inp(0x802, 0, 16), 16, 0x4), syn::NOT_INITIALIZED);
    assert_eq!(
        r.fails(&inp(0x301, 0, 0x118), 16, 0x4),
        syn::NOT_INITIALIZED
    );
    // ACCESS_REG: only HOST_ENDIANNESS.
    let mut reg = inp(0x805, 1, 0x20);
    setf(&mut reg, 8, 15, 0, 0x5006);
    assert_eq!(r.fails(&reg, 0x20, 0x4), syn::REG_BEFORE_INIT);
    setf(&mut reg, 8, 15, 0, 0x7004);
    r.ok(&reg, 0x20);
    r.free_all();
}

#[test]
fn generic_command_checks() {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    assert_eq!(r.fails(&inp(0x7777, 0, 16), 16, 0x2), syn::BAD_OPCODE);
    // Output shorter than QUERY_HCA_CAP's layout.
    assert_eq!(
        r.fails(&inp(0x100, 1, 16), 0x100, 0x51),
        syn::OUTPUT_TOO_SHORT
    );
    // Input shorter than SET_HCA_CAP's layout.
    assert_eq!(
        r.fails(&inp(0x109, 0, 0x100), 16, 0x50),
        syn::INPUT_TOO_SHORT
    );
    // A reserved field of the input (query_issi_in reserved_at_10).
    let mut q = inp(0x10a, 0, 16);
    q[2] = 1;
    assert_eq!(r.fails(&q, 0x70, 0x3), syn::RESERVED_NOT_ZERO);
    r.free_all();
}

#[test]
fn issi() {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    let o = r.ok(&inp(0x10a, 0, 16), 0x70);
    assert_eq!(u16::from_be_bytes([o[0x0a], o[0x0b]]), 0, "current_issi");
    assert_eq!(
        u32::from_be_bytes(o[0x6c..0x70].try_into().unwrap()),
        2,
        "supported: ISSI 1"
    );
    let mut s = inp(0x10b, 0, 16);
    setf(&mut s, 8, 15, 0, 5);
    assert_eq!(r.fails(&s, 16, 0x3), syn::ISSI_UNSUPPORTED);
    setf(&mut s, 8, 15, 0, 1);
    r.ok(&s, 16);
    let o = r.ok(&inp(0x10a, 0, 16), 0x70);
    assert_eq!(o[0x0b], 1);
    r.free_all();
}

#[test]
fn init_hca_needs_the_pages_it_asked_for() {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    assert_eq!(r.query_pages(1), 2);
    assert_eq!(
        r.fails(&inp(0x102, 0, 16), 16, 0x4),
        syn::INIT_PAGES_MISSING
    );
    r.give_pages(2);
    assert_eq!(r.query_pages(1), 0);
    assert_eq!(r.query_pages(2), 16);
    r.give_pages(15);
    assert_eq!(
        r.fails(&inp(0x102, 0, 16), 16, 0x4),
        syn::INIT_PAGES_MISSING
    );
    r.give_pages(1);
    r.ok(&inp(0x102, 0, 16), 16);
    assert_eq!(r.fails(&inp(0x102, 0, 16), 16, 0x4), syn::ONLY_BEFORE_INIT);
    // Boot and init pages are not returned while initialized.
    assert!(r.take_pages(5).is_empty());
    // DISABLE_HCA needs TEARDOWN_HCA first.
    assert_eq!(
        r.fails(&inp(0x105, 0, 16), 16, 0x4),
        syn::DISABLE_WHILE_INIT
    );
    r.ok(&inp(0x103, 0, 16), 16);
    // Never more than asked.
    assert_eq!(r.take_pages(5).len(), 5);
    assert_eq!(r.take_pages(100).len(), 13);
    r.ok(&inp(0x105, 0, 16), 16);
    r.free_all();
    r.emu.assert_clean();
}

#[test]
fn manage_pages_validates_every_page() {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    let a = r.dma(4 * 4096);
    let give = |pages: &[u64]| {
        let mut m = inp(0x108, 1, 16 + 8 * pages.len());
        setf(&mut m, 0xc, 31, 0, pages.len() as u64);
        for (i, p) in pages.iter().enumerate() {
            put64(&mut m, 16 + 8 * i, *p);
        }
        m
    };
    assert_eq!(
        r.fails(&give(&[a, a + 0x800]), 16, 0x3),
        syn::PAGE_MISALIGNED
    );
    assert_eq!(r.fails(&give(&[a, a]), 16, 0x3), syn::PAGE_DUPLICATE);
    // Unmapped: an IOMMU fault and a refusal, nothing taken.
    assert_eq!(
        r.fails(&give(&[a, 0x7_0000_0000]), 16, 0x3),
        syn::PAGE_NOT_MAPPED
    );
    assert_eq!(r.emu.iommu_faults().len(), 1);
    assert_eq!(r.emu.firmware_pages(), 0);
    // The list shorter than input_num_entries.
    let mut m = give(&[a]);
    setf(&mut m, 0xc, 31, 0, 3);
    assert_eq!(r.fails(&m, 16, 0x50), syn::PAGES_LIST_SHORT);
    r.ok(&give(&[a, a + 4096]), 16);
    assert_eq!(r.fails(&give(&[a + 4096]), 16, 0x3), syn::PAGE_DUPLICATE);
    // The firmware uses its pages: the driver sees them written.
    let mut b = [0u8; 8];
    r.region(a).read_bytes(0, &mut b);
    assert_eq!(&b, b"ICM page");
    // Output too short for the pages returned.
    let mut t = inp(0x108, 2, 16);
    setf(&mut t, 0xc, 31, 0, 2);
    assert_eq!(r.fails(&t, 16, 0x51), syn::PAGES_OUT_SHORT);
    assert_eq!(r.take_pages(2).len(), 2);
    r.ok(&inp(0x105, 0, 16), 16);
    r.free_all();
    // The unmapped page given above is the only fault.
    assert_eq!(r.emu.iommu_faults().len(), 1);
    assert!(r.emu.leak_report().is_clean());
}

#[test]
fn set_hca_cap_is_honoured_and_checked() {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    let cur = r.ok(&inp(0x100, 1, 16), 0x1010);
    let max = r.ok(&inp(0x100, 0, 16), 0x1010);
    // log_max_qp: cmd_hca_cap dword 0x10 bits 4:0 (input 0x10 + 0x13).
    assert_eq!(cur[0x10 + 0x13] & 0x1f, 14);
    assert_eq!(max[0x10 + 0x13] & 0x1f, 23);
    let mut set = inp(0x109, 0, 0x1010);
    set[0x10..].copy_from_slice(&cur[0x10..]);
    set[0x10 + 0x13] = (set[0x10 + 0x13] & !0x1f) | 24;
    assert_eq!(r.fails(&set, 16, 0x3), syn::SET_CAP_ABOVE_MAX);
    set[0x10 + 0x13] = (set[0x10 + 0x13] & !0x1f) | 17;
    r.ok(&set, 16);
    let now = r.ok(&inp(0x100, 1, 16), 0x1010);
    assert_eq!(now[0x10 + 0x13] & 0x1f, 17);
    // Atomic caps (type 3): host-endian 8-byte atomics are not offered by
    // the recorded card (supported_atomic_req_8B_endianness_mode_1 = 0).
    let mut at = inp(0x109, 6, 0x1010);
    setf(&mut at, 0x10 + 0x8, 31, 30, 1);
    assert_eq!(r.fails(&at, 16, 0x3), syn::SET_CAP_UNSUPPORTED);
    // Unknown capability types.
    assert_eq!(r.fails(&inp(0x100, 0x41, 16), 0x1010, 0x3), syn::CAP_TYPE);
    assert_eq!(
        r.fails(&inp(0x109, 0x10, 0x1010), 16, 0x3),
        syn::SET_CAP_TYPE
    );
    r.free_all();
}

#[test]
fn teardown_reports_objects_never_destroyed() {
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    r.teardown();
    r.free_all();
    let rep = r.emu.leak_report();
    assert!(rep.firmware_pages.is_empty());
    assert!(rep.objects.is_empty());
    assert!(rep.dma_regions.is_empty());
    assert_eq!(
        rep.objects_at_teardown,
        vec![(ObjKind::Uar, uar), (ObjKind::Pd, pd)]
    );
}

#[test]
fn leak_report_lists_pages_objects_and_memory() {
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    let pd = r.alloc_pd();
    let rep = r.emu.leak_report();
    assert_eq!(rep.firmware_pages.len(), 18);
    assert_eq!(rep.objects, vec![(ObjKind::Pd, pd)]);
    // cmdq + two page regions.
    assert_eq!(rep.dma_regions.len(), 3);
    assert!(!rep.is_clean());
    // Freeing memory the firmware holds is a fault.
    let pages = r.pages.pop().unwrap();
    r.p.free_dma(pages);
    let f = r.emu.iommu_faults();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, hca_emu::FaultKind::FreedWhileHeld);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.emu.assert_clean()));
    let msg = *res.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains("firmware pages not returned"), "{msg}");
    assert!(msg.contains("object never destroyed: Pd"), "{msg}");
}

#[test]
fn function_reset_forgets_everything() {
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    r.p.reset_function().unwrap();
    assert_eq!(r.emu.hca_state(), HcaState::Disabled);
    assert_eq!(r.emu.firmware_pages(), 0);
    // The pages it held are reported lost.
    assert_eq!(r.emu.leak_report().firmware_pages.len(), 18);
    // Boots again.
    r.enable_pci();
    assert!(r.wait_init(std::time::Duration::from_secs(120)));
}
