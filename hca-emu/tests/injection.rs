//! The test knobs a driver's tests need: booting with command interface
//! signatures on, affiliated and internal error events for a chosen object,
//! failing DMA allocations, the P_Key table (QUERY_HCA_VPORT_PKEY) and
//! InfiniBand ports.

mod common;

use common::dp::*;
use common::*;
use hca_emu::syndrome as syn;
use hca_emu::{
    DmaFailure, EmuConfig, EmuError, EmuHca, ObjKind, OutputCorruption, QpState, connect,
};
use platform::{Mmio, Platform};

/// `qp_events`: resource type (byte 0x14 of the event data) and number.
fn affiliated(data: &[u8; 28]) -> (u8, u32) {
    (
        data[0x14],
        u32::from_be_bytes(data[0x18..0x1c].try_into().unwrap()) & 0xff_ffff,
    )
}

fn xor(b: &[u8]) -> u8 {
    b.iter().fold(0, |a, x| a ^ x)
}

/// QUERY_HCA_CAP, general, current.
fn query_general_cur() -> Vec<u8> {
    inp(0x100, 1, 16)
}

/// QUERY_PAGES (boot) padded with zeros to 0x300 bytes: an input that needs
/// mailbox blocks and has no effect.
fn long_query_pages() -> Vec<u8> {
    inp(0x107, 1, 0x300)
}

#[test]
fn boots_with_command_signatures_on_when_configured() {
    let mut r = Raw::new(EmuConfig::default().with_checksum());
    // ENABLE_HCA: entries are always signed by firmware-cmds.
    r.ok(&inp(0x104, 0, 16), 16);
    let cap = r.ok(&query_general_cur(), 0x1010);
    // cmdif_checksum (cmd_hca_cap 0x40 bits 15:14) is 3 from boot.
    assert_eq!(cap[0x10 + 0x42] >> 6, 3);
    // The answer entry is signed: its bytes XOR to 0xff.
    let a = r.cmd(&query_general_cur(), 0x1010);
    assert_eq!(xor(&a.entry), 0xff);
    // Unsigned input blocks are refused with a signature error (0x1).
    r.sign = false;
    let a = r.cmd(&long_query_pages(), 16);
    assert_eq!(a.delivery, 0x01);
    // Signed ones pass.
    r.sign = true;
    let a = r.cmd(&long_query_pages(), 16);
    assert_eq!((a.delivery, a.status), (0, 0));
    // A wrong entry signature is refused too.
    let t = 0x42;
    let a = r
        .cmd_with(&query_general_cur(), 0x1010, t, |e, _, _| e[0x3d] ^= 0x10)
        .unwrap();
    assert_eq!(a.delivery, 0x01);
    // SET_HCA_CAP with cmdif_checksum 0 switches it off: unsigned blocks
    // pass again.
    let mut set = inp(0x109, 0, 0x1010);
    set[0x10..].copy_from_slice(&cap[0x10..]);
    set[0x10 + 0x42] &= 0x3f;
    r.ok(&set, 16);
    r.sign = false;
    let a = r.cmd(&long_query_pages(), 16);
    assert_eq!((a.delivery, a.status), (0, 0));
    let cap = r.ok(&query_general_cur(), 0x1010);
    assert_eq!(cap[0x10 + 0x42] >> 6, 0);
}

#[test]
fn entry_signature_corruption_of_an_answer() {
    let mut r = Raw::new(EmuConfig::default().with_checksum());
    r.sign = true;
    r.ok(&inp(0x104, 0, 16), 16);
    r.emu
        .faults()
        .corrupt_output(Some(0x100), 1, OutputCorruption::EntrySignature);
    let a = r.cmd(&query_general_cur(), 0x1010);
    assert_eq!((a.delivery, a.status), (0, 0), "delivered and executed");
    assert_ne!(xor(&a.entry), 0xff, "but the entry signature is wrong");
    let a = r.cmd(&query_general_cur(), 0x1010);
    assert_eq!(xor(&a.entry), 0xff, "one shot");
}

#[test]
fn qp_work_queue_errors_move_the_qp_to_error_flush_and_raise_the_event() {
    let mut n = Node::new(1, EmuConfig::default());
    let mut cq = n.cq(6);
    let mut qp = n.qp(&QpSpec::new(0, &cq));
    n.rst2init(&mut qp, 1, &Attrs::default());
    let buf = n.mr(4096, 0, LW);
    n.post_recv(&mut qp, &[(buf.addr, 64, buf.key)]);
    let f = n.r.emu.faults();
    assert_eq!(f.qp_event(qp.qpn, 0x10), Ok(true));
    let ev = n.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].0, 0x10);
    assert_eq!(affiliated(&ev[0].1), (0, qp.qpn), "resource type QP");
    assert_eq!(n.r.emu.qp_state(qp.qpn), Some(QpState::Err));
    // The posted receive is flushed (syndrome 0x05).
    n.wait(&mut cq, 1)[0].err(0x05);
    // On a QP already in error the event is raised again, nothing moves.
    assert_eq!(f.qp_event(qp.qpn, 0x05), Ok(true));
    assert_eq!(n.events()[0].0, 0x05);
    // Events that do not change the state.
    assert_eq!(f.qp_event(qp.qpn, 0x02), Ok(true));
    assert_eq!(n.events()[0].0, 0x02);
    // Typed refusals.
    assert_eq!(
        f.qp_event(qp.qpn ^ 0x5a5a, 0x05),
        Err(EmuError::NoSuchObject {
            kind: ObjKind::Qp,
            number: qp.qpn ^ 0x5a5a
        })
    );
    assert_eq!(
        f.qp_event(qp.qpn, 0x04),
        Err(EmuError::NotAnEvent {
            event_type: 0x04,
            of: "a QP"
        })
    );
    assert_eq!(
        f.qp_event(qp.qpn, 0x12).unwrap_err().to_string(),
        "event type 0x12 is not an event of a QP"
    );
    // The event types the EQ does not take are lost (as on hardware).
    assert_eq!(f.qp_event(qp.qpn, 0x03), Ok(false));
    n.finish();
}

#[test]
fn access_violation_on_a_qp_in_rts() {
    let mut n = Node::new(1, EmuConfig::default());
    let cq = n.cq(6);
    let mut qp = n.qp(&QpSpec::new(2, &cq));
    n.ud_ready(&mut qp, 1, &Attrs::default());
    assert_eq!(n.r.emu.qp_state(qp.qpn), Some(QpState::Rts));
    assert_eq!(n.r.emu.faults().qp_event(qp.qpn, 0x11), Ok(true));
    assert_eq!(n.r.emu.qp_state(qp.qpn), Some(QpState::Err));
    let ev = n.events();
    assert_eq!((ev[0].0, affiliated(&ev[0].1)), (0x11, (0, qp.qpn)));
    n.finish();
}

#[test]
fn srq_catastrophic_error_and_limit() {
    let mut n = Node::new(1, EmuConfig::default());
    let srq = n.srq(4, 2);
    n.arm_srq(&srq, 3);
    let f = n.r.emu.faults();
    assert_eq!(f.srq_event(srq.srqn, 0x14), Ok(true));
    assert_eq!(n.r.emu.srq(srq.srqn).unwrap().lwm, 0, "limit disarmed");
    assert_eq!(f.srq_event(srq.srqn, 0x12), Ok(true));
    let ev = n.events();
    let got: Vec<(u8, u32)> = ev.iter().map(|e| (e.0, affiliated(&e.1).1)).collect();
    assert_eq!(got, vec![(0x14, srq.srqn), (0x12, srq.srqn)]);
    // QUERY_RMP: rmpc.state (bits 23:20 of the context at 0x20) is error
    // (3), which Linux's query_rmp_cmd reports as MLX5_SRQ_FLAG_ERR.
    let mut q = inp(0x90f, 0, 16);
    setf(&mut q, 8, 23, 0, u64::from(srq.srqn));
    let o = n.r.ok(&q, 0x110);
    assert_eq!(o[0x21] >> 4, 3);
    assert!(matches!(
        f.srq_event(srq.srqn, 0x05),
        Err(EmuError::NotAnEvent {
            event_type: 0x05,
            ..
        })
    ));
    assert!(matches!(
        f.srq_event(srq.srqn + 1, 0x12),
        Err(EmuError::NoSuchObject {
            kind: ObjKind::Srq,
            ..
        })
    ));
    n.finish();
}

#[test]
fn raw_rq_and_sq_work_queue_errors() {
    let mut n = Node::new(1, EmuConfig::default());
    let cq = n.cq(6);
    let rq = n.raw_wq(false, cq.cqn, 0, 6, 6);
    let f = n.r.emu.faults();
    assert_eq!(f.wq_event(ObjKind::Rq, rq.qpn, 0x05), Ok(true));
    let ev = n.events();
    assert_eq!((ev[0].0, affiliated(&ev[0].1)), (0x05, (1, rq.qpn)));
    assert_eq!(n.r.emu.wq(ObjKind::Rq, rq.qpn).unwrap().state, 3);
    // QUERY_RQ: rqc.state (bits 23:20 of the context at 0x20).
    let mut q = inp(0x90b, 0, 16);
    setf(&mut q, 8, 23, 0, u64::from(rq.qpn));
    let o = n.r.ok(&q, 0x110);
    assert_eq!(o[0x21] >> 4, 3);
    let (sq, _scq) = n.raw_sq();
    assert_eq!(f.wq_event(ObjKind::Sq, sq.qpn, 0x10), Ok(true));
    let ev = n.events();
    assert_eq!((ev[0].0, affiliated(&ev[0].1)), (0x10, (2, sq.qpn)));
    // QUERY_SQ: sqc.state (bits 23:20 of the context at 0x20).
    let mut q = inp(0x907, 0, 16);
    setf(&mut q, 8, 23, 0, u64::from(sq.qpn));
    assert_eq!(n.r.ok(&q, 0x110)[0x21] >> 4, 3);
    assert!(matches!(
        f.wq_event(ObjKind::Qp, sq.qpn, 0x10),
        Err(EmuError::NotAnEvent { .. })
    ));
    assert!(matches!(
        f.wq_event(ObjKind::Sq, sq.qpn, 0x02),
        Err(EmuError::NotAnEvent { .. })
    ));
    assert!(matches!(
        f.wq_event(ObjKind::Rq, sq.qpn ^ 0xffff, 0x05),
        Err(EmuError::NoSuchObject { .. })
    ));
    n.finish();
}

#[test]
fn internal_error_event_leaves_the_health_buffer_clean() {
    let mut n = Node::new(1, EmuConfig::default());
    let f = n.r.emu.faults();
    assert!(f.internal_error_event());
    let ev = n.events();
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1), (0x08, [0; 28]));
    // The health syndrome (0x23d) stays clean.
    assert_eq!((n.r.bar.read32(0x23c).get() >> 16) & 0xff, 0);
    n.finish();
    // No EQ subscribed: nothing is posted.
    let r = Raw::new(EmuConfig::default());
    assert!(!r.emu.faults().internal_error_event());
}

#[test]
fn dma_allocation_failures() {
    let emu = EmuHca::new(EmuConfig::default());
    let p = emu.platform();
    let f = emu.faults();
    f.fail_dma(DmaFailure::After(2));
    let a = p.alloc_dma(4096, 4096).unwrap();
    let b = p.alloc_dma(4096, 4096).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            p.alloc_dma(8192, 4096).unwrap_err(),
            platform::Error::OutOfDmaMemory {
                requested: 8192,
                available: 0
            }
        ));
    }
    f.fail_dma(DmaFailure::Nth(1));
    let c = p.alloc_dma(4096, 4096).unwrap();
    assert!(p.alloc_dma(4096, 4096).is_err());
    let d = p.alloc_dma(4096, 4096).unwrap();
    f.fail_dma(DmaFailure::Above(16384));
    let e = p.alloc_dma(16384, 4096).unwrap();
    assert!(matches!(
        p.alloc_dma(16385, 4096).unwrap_err(),
        platform::Error::OutOfDmaMemory {
            requested: 16385,
            available: 16384
        }
    ));
    f.fail_dma(DmaFailure::None);
    let g = p.alloc_dma(1 << 20, 4096).unwrap();
    assert_eq!(emu.dma_allocations(), (11, 5));
    for r in [a, b, c, d, e, g] {
        p.free_dma(r);
    }
    emu.assert_clean();
}

/// QUERY_HCA_VPORT_PKEY of port 1, index `idx`, with `out_len`.
fn pkey_query(idx: u16, port: u8) -> Vec<u8> {
    let mut q = inp(0x765, 0, 16);
    setf(&mut q, 8, 19, 16, u64::from(port));
    setf(&mut q, 0xc, 15, 0, u64::from(idx));
    q
}

#[test]
fn p_key_table_with_the_default_p_key() {
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    let o = r.ok(&pkey_query(0, 1), 0x14);
    assert_eq!(&o[0x10..0x14], &[0, 0, 0xff, 0xff]);
    let o = r.ok(&pkey_query(7, 0), 0x14);
    assert_eq!(&o[0x10..0x14], &[0, 0, 0, 0], "an empty entry");
    // The whole table: 128 entries (pkey_table_size 0).
    let o = r.ok(&pkey_query(0xffff, 1), 16 + 4 * 128);
    assert_eq!(&o[0x10..0x14], &[0, 0, 0xff, 0xff]);
    assert!(o[0x14..].iter().all(|&b| b == 0));
    assert_eq!(
        r.fails(&pkey_query(0xffff, 1), 16 + 4 * 127, 0x51),
        syn::OUTPUT_TOO_SHORT
    );
    assert_eq!(r.fails(&pkey_query(128, 1), 0x14, 0x3), syn::PKEY_INDEX);
    assert_eq!(r.fails(&pkey_query(0, 2), 0x14, 0x3), syn::BAD_PORT);
    let mut other = pkey_query(0, 1);
    setf(&mut other, 8, 31, 31, 1);
    assert_eq!(r.fails(&other, 0x14, 0x3), syn::VPORT_OTHER);
    r.teardown();
    r.free_all();
    r.emu.assert_clean();
}

/// ACCESS_REG read of PTYS on port 1 with `proto_mask`.
fn ptys(proto_mask: u64) -> Vec<u8> {
    let mut m = inp(0x805, 1, 0x50);
    setf(&mut m, 8, 15, 0, 0x5004);
    setf(&mut m, 0x10, 23, 16, 1);
    setf(&mut m, 0x10, 2, 0, proto_mask);
    m
}

#[test]
fn infiniband_ports() {
    let mut a = Raw::new(EmuConfig::default().infiniband());
    let mut b = Raw::new(EmuConfig {
        seed: 7,
        ..EmuConfig::default().infiniband()
    });
    a.init();
    b.init();
    let cap = a.ok(&query_general_cur(), 0x1010);
    // port_type: cmd_hca_cap bits 438..440 (byte 0x36, bits 1:0) = 0 (IB).
    assert_eq!(cap[0x10 + 0x36] & 3, 0);
    // PTYS answers the IB mask only.
    assert_eq!(a.fails(&ptys(4), 0x50, 0x3), syn::REG_BAD_VALUE);
    let be16 = |o: &[u8], off: usize| u16::from_be_bytes([o[off], o[off + 1]]);
    let o = a.ok(&ptys(1), 0x50);
    assert_eq!(o[0x13] & 7, 1, "proto_mask IB");
    assert_eq!(
        (be16(&o, 0x20), be16(&o, 0x22)),
        (0b101, 0x3f),
        "capability"
    );
    assert_eq!((be16(&o, 0x38), be16(&o, 0x3a)), (0, 0), "link down");
    // HCA vport context: no LID while down; GID 0 = fe80:: + port GUID.
    let mut q = inp(0x762, 0, 16);
    setf(&mut q, 8, 19, 16, 1);
    let ctx = a.ok(&q, 0x210);
    let lid = |c: &[u8]| be16(c, 0x10 + 0x60);
    assert_eq!(lid(&ctx), 0);
    let guid = &ctx[0x10 + 0x30..0x10 + 0x38];
    let mut g = inp(0x764, 0, 16);
    setf(&mut g, 8, 19, 16, 1);
    let o = a.ok(&g, 0x20);
    assert_eq!(&o[0x10..0x18], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&o[0x18..0x20], guid);
    setf(&mut g, 0xc, 15, 0, 1);
    assert_eq!(&a.ok(&g, 0x20)[0x10..0x20], &[0; 16]);
    // Cabled: 4X EDR and a LID.
    connect(&a.emu, 1, &b.emu, 1).unwrap();
    let o = a.ok(&ptys(1), 0x50);
    assert_eq!((be16(&o, 0x38), be16(&o, 0x3a)), (1 << 2, 1 << 5));
    assert_eq!(lid(&a.ok(&q, 0x210)), 1);
    // The P_Key table of an IB port.
    let o = a.ok(&pkey_query(0, 1), 0x14);
    assert_eq!(&o[0x12..0x14], &[0xff, 0xff]);
    for mut r in [a, b] {
        r.teardown();
        r.free_all();
        r.emu.assert_clean();
    }
}

#[test]
fn the_p_key_table_follows_pkey_table_size() {
    let mut r = Raw::new(EmuConfig::default());
    // Raw::init with SET_HCA_CAP pkey_table_size 1 (256 entries; the
    // recorded maximum is 5) between the boot and the init pages.
    r.ok(&inp(0x104, 0, 16), 16);
    let boot = r.query_pages(1);
    r.give_pages(boot as usize);
    let cur = r.ok(&query_general_cur(), 0x1010);
    let mut set = inp(0x109, 0, 0x1010);
    set[0x10..].copy_from_slice(&cur[0x10..]);
    // pkey_table_size: cmd_hca_cap bits 400..416 (bytes 0x32..0x34).
    set[0x10 + 0x32..0x10 + 0x34].copy_from_slice(&1u16.to_be_bytes());
    r.ok(&set, 16);
    let init = r.query_pages(2);
    r.give_pages(init as usize);
    r.ok(&inp(0x102, 0, 16), 16);
    let o = r.ok(&pkey_query(0xffff, 1), 16 + 4 * 256);
    assert_eq!(&o[0x10..0x14], &[0, 0, 0xff, 0xff]);
    assert_eq!(&r.ok(&pkey_query(255, 1), 0x14)[0x10..0x14], &[0; 4]);
    assert_eq!(r.fails(&pkey_query(256, 1), 0x14, 0x3), syn::PKEY_INDEX);
    r.teardown();
    r.free_all();
    r.emu.assert_clean();
}

#[test]
fn fault_rules_count_their_hits() {
    let mut r = Raw::new(EmuConfig::default());
    r.ok(&inp(0x104, 0, 16), 16);
    let f = r.emu.faults();
    // A rule for a command that never comes: no hit.
    let never = f.fail_opcode(0x500, 0x3, 0);
    // One shot on the second QUERY_PAGES: one hit, on that command only.
    let second = f.fail_opcode_nth(0x107, 2, 0x3, 0x1234);
    // Every QUERY_HCA_CAP: a hit each.
    let every = f.corrupt_output(Some(0x100), 1, OutputCorruption::EntryToken(0x77));
    let pages = inp(0x107, 1, 16);
    r.ok(&pages, 16);
    assert_eq!((f.hits(second), f.hits(never)), (0, 0));
    assert_eq!(r.fails(&pages, 16, 0x3), 0x1234);
    assert_eq!(f.hits(second), 1);
    r.ok(&pages, 16);
    assert_eq!(f.hits(second), 1, "a spent one-shot rule counts no more");
    let _ = r.cmd(&query_general_cur(), 0x1010);
    assert_eq!(f.hits(every), 1);
    let _ = r.cmd(&query_general_cur(), 0x1010);
    assert_eq!(f.hits(every), 1, "corrupt_output is one shot");
    let persistent = f.fail_opcode(0x107, 0x4, 0);
    for n in 1..=3 {
        r.fails(&pages, 16, 0x4);
        assert_eq!(f.hits(persistent), n);
    }
    // A DMA failure rule counts the allocations it failed.
    let dma = f.fail_dma(DmaFailure::Nth(1));
    assert!(r.p.alloc_dma(4096, 4096).map(|m| r.p.free_dma(m)).is_ok());
    assert!(r.p.alloc_dma(4096, 4096).is_err());
    assert!(r.p.alloc_dma(4096, 4096).map(|m| r.p.free_dma(m)).is_ok());
    assert_eq!(f.hits(dma), 1);
    // Counts survive clear(), and new rules get new counters.
    f.clear();
    assert_eq!((f.hits(persistent), f.hits(never)), (3, 0));
    let fresh = f.fail_opcode(0x107, 0x4, 0);
    assert_ne!(fresh, persistent);
    assert_eq!(f.hits(fresh), 0);
}
