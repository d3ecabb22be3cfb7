//! The ConnectX-5 and ConnectX-6 Dx personalities: PCI ids, firmware
//! version, the capability bits they change from the recorded ConnectX-4
//! (`umem_uid_0`, the timestamp formats), and what follows from them.

mod common;

use common::{Raw, setf};
use hca_emu::{EmuConfig, Personality, syndrome as syn};
use platform::{Mmio, Platform};

fn raw(p: Personality) -> Raw {
    let mut r = Raw::new(EmuConfig::default().with_personality(p));
    r.init();
    r
}

/// A general capability bit (current when `cur`) at a bit offset.
fn cap_bit(r: &mut Raw, cur: bool, bit: usize) -> u8 {
    let o = r.ok(&common::inp(0x100, u16::from(cur), 16), 0x1010);
    (o[0x10 + bit / 8] >> (7 - bit % 8)) & 1
}

/// `roce_cap.qp_ts_format` (bits 0x1e..0x20 of the RoCE caps, type 4).
fn qp_ts_format(r: &mut Raw) -> u8 {
    let o = r.ok(&common::inp(0x100, (4 << 1) | 1, 16), 0x1010);
    o[0x10 + 3] & 0x3
}

#[test]
fn identities_and_caps() {
    for (p, id, fw, umem, ts) in [
        (Personality::ConnectX4, 0x1013, (14, 12, 1220), 0, 0),
        (Personality::ConnectX5, 0x1017, (16, 35, 2000), 1, 0),
        (Personality::ConnectX6Dx, 0x101d, (22, 35, 2000), 1, 1),
    ] {
        assert_eq!(p.pci_id(), (0x15b3, id));
        let mut r = raw(p);
        let mut c = [0u8; 4];
        r.p.config_read(0, &mut c).unwrap();
        assert_eq!(c, [0xb3, 0x15, id as u8, (id >> 8) as u8], "{p:?}");
        let rev = r.bar.read32(0).get();
        let sub = r.bar.read32(4).get() & 0xffff;
        assert_eq!((rev & 0xffff, rev >> 16, sub), (fw.0, fw.1, fw.2), "{p:?}");
        // umem_uid_0: general caps bit 0x252, current and maximum.
        assert_eq!(cap_bit(&mut r, true, 0x252), umem, "{p:?}");
        assert_eq!(cap_bit(&mut r, false, 0x252), umem, "{p:?}");
        assert_eq!(qp_ts_format(&mut r), ts, "{p:?}");
        r.teardown();
        r.free_all();
        r.emu.assert_clean();
    }
}

#[test]
fn timestamp_formats_each_personality_takes() {
    // (personality, ts_format) -> accepted
    let cases = [
        (Personality::ConnectX4, 0, true),
        (Personality::ConnectX4, 1, false),
        (Personality::ConnectX5, 0, true),
        (Personality::ConnectX5, 1, true),
        (Personality::ConnectX5, 2, false),
        (Personality::ConnectX6Dx, 0, false),
        (Personality::ConnectX6Dx, 1, true),
        (Personality::ConnectX6Dx, 2, true),
    ];
    for (p, ts, ok) in cases {
        let mut r = raw(p);
        let uar = r.alloc_uar();
        let pd = r.alloc_pd();
        let (eqn, _) = r.create_eq(4, uar, 1);
        let (cqn, _, _) = r.create_cq(6, uar, eqn);
        let mut q = r.qp_input(0, pd, uar, cqn);
        // qpc.ts_format: qpc bits 0x58..0x5a, dword 0x8 bits 7:6 (qpc at 0x18).
        setf(&mut q, 0x18 + 0x8, 7, 6, ts);
        if ok {
            r.create(&q);
        } else {
            assert_eq!(r.fails(&q, 16, 0x3), syn::QP_TS_FORMAT, "{p:?} {ts}");
        }
        r.teardown();
        r.free_all();
    }
}

#[test]
fn query_hca_cap_output_holds_the_structure_asked_for() {
    let mut r = raw(Personality::ConnectX5);
    // rdma-core's QueryCmdHcaCapOut: 16 + 2048 bytes.
    let full = r.ok(&common::inp(0x100, 1, 16), 0x1010);
    let short = r.ok(&common::inp(0x100, 1, 16), 16 + 2048);
    assert_eq!(short.len(), 16 + 2048);
    assert_eq!(&short[..], &full[..16 + 2048]);
    // The general caps are 256 bytes in the layouts: one less is refused.
    assert_eq!(
        r.fails(&common::inp(0x100, 1, 16), 16 + 255, 0x51),
        syn::OUTPUT_TOO_SHORT
    );
    // RoCE caps (type 4): 256 bytes.
    r.ok(&common::inp(0x100, (4 << 1) | 1, 16), 16 + 256);
    r.teardown();
    r.free_all();
    r.emu.assert_clean();
}
