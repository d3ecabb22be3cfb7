//! Resources: validation, object numbers, destroy order, the QP state
//! machine, EQs and CQs at work, ports and the wire.

mod common;

use common::{Raw, inp, put64, setf};
use hca_emu::syndrome as syn;
use hca_emu::{EmuConfig, ObjKind, QpState, connect};
use platform::{Mmio, Platform};

const EV_CMD: u64 = 1 << 0x0a;
const EV_PORT: u64 = 1 << 0x09;
const EV_CQ_ERR: u64 = 1 << 0x04;
const EV_PAGE: u64 = 1 << 0x0b;

fn up() -> Raw {
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    r
}

fn destroy(r: &mut Raw, opcode: u16, field_off: usize, n: u32) -> u8 {
    let mut m = inp(opcode, 0, 16);
    setf(&mut m, field_off, 23, 0, u64::from(n));
    r.cmd(&m, 16).status
}

#[test]
fn object_numbers_are_not_0_and_not_predictable_from_1() {
    let mut r = up();
    let uars: Vec<u32> = (0..3).map(|_| r.alloc_uar()).collect();
    let pds: Vec<u32> = (0..3).map(|_| r.alloc_pd()).collect();
    for n in uars.iter().chain(&pds) {
        assert!(*n > 1, "{n:#x}");
    }
    assert!(uars.windows(2).all(|w| w[0] != w[1]));
    assert!(pds.windows(2).all(|w| w[0] != w[1]));
    // UARs are BAR pages after the init segment.
    assert!(uars[0] >= 8);
    assert_eq!(destroy(&mut r, 0x803, 8, 0x7f_0000), 0x5, "unknown UAR");
    assert_eq!(destroy(&mut r, 0x801, 8, pds[0]), 0);
    assert_eq!(destroy(&mut r, 0x801, 8, pds[0]), 0x5, "freed twice");
}

#[test]
fn eq_validation_and_command_completion_events() {
    let mut r = up();
    let uar = r.alloc_uar();
    let (mut m, _) = r.eq_input(4, uar, EV_CMD);
    setf(&mut m, 0x1c, 23, 0, 0x7f_0000);
    assert_eq!(r.fails(&m, 16, 0x5), syn::BAD_UAR);
    let (mut m, _) = r.eq_input(4, uar, EV_CMD);
    setf(&mut m, 0x1c, 28, 24, 23); // above log_max_eq_sz 22
    assert_eq!(r.fails(&m, 16, 0x8), syn::EQ_LOG_SIZE);
    let (mut m, _) = r.eq_input(4, uar, EV_CMD);
    setf(&mut m, 0x24, 7, 0, 64);
    assert_eq!(r.fails(&m, 16, 0x3), syn::EQ_INTR);
    let (m, _) = r.eq_input(4, uar, EV_CMD);
    assert_eq!(r.fails(&m[..0x110], 16, 0x50), syn::PAS_TOO_SHORT);
    let (eqn, buf) = r.create_eq(4, uar, EV_CMD);
    // The CREATE_EQ itself completed before the EQ existed; the next
    // command's completion lands in EQE 0 with owner 0 and slot bit 0.
    r.ok(&inp(0x80d, 0, 16), 16);
    let eq = r.region(buf);
    assert_eq!(eq.read_u8(1), 0x0a, "event type");
    assert_eq!(eq.read_be32(0x20), 1, "slot 0");
    assert_eq!(eq.read_u8(63) & 1, 0, "owner of the first pass");
    assert_eq!(eq.read_u8(64 + 63), 1, "EQE 1 still the driver's");
    // Arm: the next EQE is an interrupt on vector 0.
    r.bar.write32(
        (uar as usize) * 4096 + 0x40,
        platform::Be32::new(1 | (eqn << 24)),
    );
    r.ok(&inp(0x80d, 0, 16), 16);
    r.emu.run_until_idle();
    assert_eq!(r.emu.interrupts(0), 1);
    // A second command-completion EQ is refused.
    let (m, _) = r.eq_input(4, uar, EV_CMD);
    assert_eq!(r.fails(&m, 16, 0x3), syn::EQ_CMD_TWICE);
    // The UAR is in use by the EQ.
    assert_eq!(destroy(&mut r, 0x803, 8, uar), 0x9);
}

#[test]
fn eq_overrun_is_reported() {
    let mut r = up();
    let uar = r.alloc_uar();
    let (eqn, _) = r.create_eq(1, uar, EV_CMD); // 2 entries
    for _ in 0..3 {
        r.ok(&inp(0x80d, 0, 16), 16);
    }
    assert_eq!(r.emu.datapath().eq_overruns, vec![eqn]);
    let mut q = inp(0x303, 0, 16);
    setf(&mut q, 8, 7, 0, u64::from(eqn));
    let o = r.ok(&q, 0x110);
    assert_eq!(o[0x10] >> 4, 0xa, "eqc.status: EQ write failure");
}

#[test]
fn cq_validation_arming_and_destroy_order() {
    let mut r = up();
    let uar = r.alloc_uar();
    let (eqn, eqbuf) = r.create_eq(4, uar, EV_CQ_ERR);
    let (mut m, _, _) = r.cq_input(4, uar, eqn);
    setf(&mut m, 0x24, 7, 0, u64::from((eqn + 1) & 0xff));
    assert_eq!(r.fails(&m, 16, 0x5), syn::CQ_BAD_EQN);
    let (mut m, _, _) = r.cq_input(4, uar, eqn);
    setf(&mut m, 0x1c, 28, 24, 23);
    assert_eq!(r.fails(&m, 16, 0x8), syn::CQ_LOG_SIZE);
    let (mut m, _, _) = r.cq_input(4, uar, eqn);
    setf(&mut m, 0x10, 23, 21, 3);
    assert_eq!(r.fails(&m, 16, 0x3), syn::CQ_CQE_SIZE);
    let (mut m, _, dbr) = r.cq_input(4, uar, eqn);
    put64(&mut m, 0x48, dbr + 4);
    assert_eq!(r.fails(&m, 16, 0x3), syn::DBR_MISALIGNED);
    let (cqn, cqbuf, _) = r.create_cq(4, uar, eqn);
    assert!(r.emu.cq(cqn).is_some());
    // The EQ is in use by the CQ.
    assert_eq!(destroy(&mut r, 0x302, 8, eqn), 0x9);
    // A CQE (what the data path will write) gets the owner bit; arming
    // raises a completion event on the CQ's EQ... which only takes CQ
    // errors here, so no EQE; overrun produces a CQ error EQE.
    let cqe = [0u8; 64];
    r.emu.post_cqe(cqn, &cqe).unwrap();
    assert_eq!(r.region(cqbuf).read_u8(63), 0x00, "owner 0, opcode 0");
    for _ in 1..16 {
        r.emu.post_cqe(cqn, &cqe).unwrap();
    }
    assert_eq!(r.emu.post_cqe(cqn, &cqe), Err(hca_emu::CqeError::Overrun));
    let eq = r.region(eqbuf);
    assert_eq!(eq.read_u8(1), 0x04, "CQ error event");
    assert_eq!(eq.read_be32(0x20) & 0xff_ffff, cqn);
    assert_eq!(eq.read_u8(0x20 + 11), 1, "syndrome: overrun");
    assert_eq!(r.emu.datapath().cq_overruns, vec![cqn]);
    assert_eq!(destroy(&mut r, 0x401, 8, cqn), 0);
    assert_eq!(destroy(&mut r, 0x302, 8, eqn), 0);
}

#[test]
fn armed_cq_raises_a_completion_event() {
    let mut r = up();
    let uar = r.alloc_uar();
    let (eqn, eqbuf) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(4, uar, eqn);
    // Arm (sn 0, cmd 0 = next completion, ci 0): 64-bit store to UAR+0x20.
    let v = u64::from(cqn); // arm word 0 (sn 0, next completion, ci 0) << 32
    r.bar
        .write64(uar as usize * 4096 + 0x20, platform::Be64::new(v));
    r.emu.run_until_idle();
    r.emu.post_cqe(cqn, &[0u8; 64]).unwrap();
    let eq = r.region(eqbuf);
    assert_eq!(eq.read_u8(1), 0x00, "completion event");
    assert_eq!(eq.read_be32(0x38) & 0xff_ffff, cqn);
    // Not armed any more: no second event.
    r.emu.post_cqe(cqn, &[0u8; 64]).unwrap();
    assert_eq!(eq.read_u8(64 + 63), 1);
}

#[test]
fn mkeys() {
    let mut r = up();
    let pd = r.alloc_pd();
    let mk = |_r: &mut Raw, mode: u64, lw: u64, rw: u64, pd: u32, n_mtt: usize| {
        let mut m = inp(0x200, 0, 0x110 + 8 * n_mtt);
        setf(&mut m, 0x10, 9, 8, mode);
        setf(&mut m, 0x10, 11, 11, lw);
        setf(&mut m, 0x10, 13, 13, rw);
        setf(&mut m, 0x10, 10, 10, 1);
        setf(&mut m, 0x14, 31, 8, 0xff_ffff);
        setf(&mut m, 0x14, 7, 0, 0x5a);
        setf(&mut m, 0x1c, 23, 0, u64::from(pd));
        put64(&mut m, 0x20, 0x10_0000);
        put64(&mut m, 0x28, 0x3000);
        setf(&mut m, 0x44, 31, 0, 2);
        setf(&mut m, 0x48, 4, 0, 12);
        // translations_octword_actual_size: the octowords sent.
        setf(&mut m, 0x60, 31, 0, n_mtt.div_ceil(2) as u64);
        for i in 0..n_mtt {
            put64(&mut m, 0x110 + 8 * i, 0x20_0000 + 0x1000 * i as u64);
        }
        m
    };
    let m = mk(&mut r, 0, 1, 1, pd, 0);
    let idx = r.create(&m);
    let k = r.emu.mkey(idx).unwrap();
    assert_eq!(k.key, idx << 8 | 0x5a);
    assert!(k.lw && k.rw && k.lr && !k.a);
    assert_eq!((k.start, k.len), (0x10_0000, 0x3000));
    let m = mk(&mut r, 0, 0, 1, pd, 0);
    assert_eq!(r.fails(&m, 16, 0x3), syn::MKEY_REMOTE_WITHOUT_LOCAL_WRITE);
    let m = mk(&mut r, 2, 1, 0, pd, 0);
    assert_eq!(r.fails(&m, 16, 0x3), syn::MKEY_ACCESS_MODE);
    let m = mk(&mut r, 0, 1, 0, pd + 1, 0);
    assert_eq!(r.fails(&m, 16, 0x5), syn::BAD_PD);
    // MTT: 0x3000 bytes from a page-aligned start need 3 entries.
    let mut m = mk(&mut r, 1, 1, 0, pd, 3);
    setf(&mut m, 0x44, 31, 0, 1); // one octword: 2 entries
    assert_eq!(r.fails(&m, 16, 0x3), syn::MKEY_MTT_SHORT);
    let m = mk(&mut r, 1, 1, 0, pd, 2);
    assert_eq!(r.fails(&m, 16, 0x3), syn::MKEY_MTT_SHORT);
    // Three entries sent as two octowords without the padding entry: the
    // input is 8 bytes short of what translations_octword_actual_size
    // counts (what this driver sent for every odd page count).
    let m = mk(&mut r, 1, 1, 0, pd, 3);
    assert_eq!(r.fails(&m, 16, 0x50), syn::MKEY_MTT_OCTOWORDS);
    let mut m = mk(&mut r, 1, 1, 0, pd, 4);
    put64(&mut m, 0x118, 0x20_0800);
    assert_eq!(r.fails(&m, 16, 0x3), syn::MKEY_MTT_MISALIGNED);
    // Padded to whole octowords, the fourth entry zero.
    let mut m = mk(&mut r, 1, 1, 0, pd, 4);
    put64(&mut m, 0x128, 0);
    let idx = r.create(&m);
    assert_eq!(
        r.emu.mkey(idx).unwrap().mtt,
        vec![0x20_0000, 0x20_1000, 0x20_2000]
    );
    // The PD is in use by the keys.
    assert_eq!(destroy(&mut r, 0x801, 8, pd), 0x9);
    assert_eq!(destroy(&mut r, 0x202, 8, idx), 0);
}

#[test]
fn qp_state_machine() {
    let mut r = up();
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    let mut bad = r.qp_input(7, pd, uar, cqn);
    assert_eq!(r.fails(&bad, 16, 0x3), syn::QP_ST);
    bad = r.qp_input(0, pd, uar, cqn);
    setf(&mut bad, 0x20, 18, 16, 7); // 2 KiB receive WQEs > max_wqe_sz_rq
    assert_eq!(r.fails(&bad, 16, 0x3), syn::QP_RQ_STRIDE);
    let bad = r.qp_input(0, pd, uar, cqn ^ 0x100);
    assert_eq!(r.fails(&bad, 16, 0x5), syn::BAD_CQN);
    let qpn = r.create_qp(0, pd, uar, cqn);
    assert!(qpn >= 0x100);
    assert_eq!(r.query_qp_state(qpn), 0);
    // Illegal edges.
    for op in [0x503u16, 0x504, 0x505, 0x506, 0x50c, 0x50e] {
        let m = Raw::modify_input(op, qpn);
        assert_eq!(
            r.fails(&m, 16, 0x9),
            syn::QP_BAD_TRANSITION,
            "{op:#x} from RST"
        );
    }
    // RST2INIT needs a port.
    let mut m = Raw::modify_input(0x502, qpn);
    assert_eq!(r.fails(&m, 16, 0x3), syn::QP_PORT);
    setf(&mut m, 0x54, 23, 16, 1);
    setf(&mut m, 0x10, 31, 0, 1 << 5);
    assert_eq!(r.fails(&m, 16, 0x3), syn::QP_OPT_PARAM);
    setf(&mut m, 0x10, 31, 0, 0);
    r.ok(&m, 16);
    assert_eq!(r.query_qp_state(qpn), 1);
    // INIT2RTR over RoCE: MTU, a valid GID, a MAC; the grh bit stays 0
    // as Linux's mlx5_set_path leaves it on RoCE.
    let mut m = Raw::modify_input(0x503, qpn);
    assert_eq!(r.fails(&m, 16, 0x3), syn::QP_MTU);
    setf(&mut m, 0x20, 31, 29, 3);
    assert_eq!(r.fails(&m, 16, 0x3), syn::QP_GID_INDEX);
    let mut g = inp(0x761, 0, 0x30);
    g[0x10..0x20].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    setf(&mut g, 0x28, 7, 0, 2);
    // The RoCE address table before RoCE is on: refused.
    assert_eq!(r.fails(&g, 16, 0x9), syn::ROCE_NOT_ENABLED);
    let mut roce_on = inp(0x755, 0, 0x200);
    setf(&mut roce_on, 0xc, 1, 1, 1);
    setf(&mut roce_on, 0x100, 0, 0, 1);
    r.ok(&roce_on, 16);
    // vhca_port_num on a function with num_vhca_ports 0: refused.
    let mut with_port = g.clone();
    setf(&mut with_port, 0x8, 3, 0, 1);
    assert_eq!(r.fails(&with_port, 16, 0x3), syn::ROCE_VHCA_PORT);
    r.ok(&g, 16);
    assert_eq!(r.fails(&m, 16, 0x3), syn::QP_RMAC);
    setf(&mut m, 0x58, 31, 0, 0x1234_5678);
    setf(&mut m, 0x2c, 23, 0, 0xabcd);
    r.ok(&m, 16);
    r.ok(&Raw::modify_input(0x504, qpn), 16);
    assert_eq!(r.emu.qp_state(qpn), Some(QpState::Rts));
    assert_eq!(
        r.emu.qp(qpn).unwrap().ctx[0x14..0x18],
        [0, 0, 0xab, 0xcd],
        "remote_qpn kept"
    );
    r.ok(&Raw::modify_input(0x505, qpn), 16);
    // 2ERR and 2RST from anywhere.
    r.ok(&Raw::modify_input(0x507, qpn), 16);
    assert_eq!(r.query_qp_state(qpn), 6);
    r.ok(&Raw::modify_input(0x507, qpn), 16);
    r.ok(&Raw::modify_input(0x50a, qpn), 16);
    assert_eq!(r.query_qp_state(qpn), 0);
    // The CQ is in use by the QP.
    assert_eq!(destroy(&mut r, 0x401, 8, cqn), 0x9);
    assert_eq!(destroy(&mut r, 0x801, 8, pd), 0x9);
    assert_eq!(destroy(&mut r, 0x501, 8, qpn), 0);
    assert_eq!(destroy(&mut r, 0x401, 8, cqn), 0);
    // UD: no address checks.
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    let ud = r.create_qp(2, pd, uar, cqn);
    let mut m = Raw::modify_input(0x502, ud);
    setf(&mut m, 0x54, 23, 16, 1);
    r.ok(&m, 16);
    r.ok(&Raw::modify_input(0x503, ud), 16);
    r.ok(&Raw::modify_input(0x504, ud), 16);
    assert_eq!(r.emu.objects(ObjKind::Qp), vec![ud]);
}

#[test]
fn qp_count_follows_set_hca_cap() {
    // log_max_qp is 14 at power-on; the limit applies to creation.
    let mut r = up();
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    let q = r.create_qp(1, pd, uar, cqn);
    assert!(r.emu.qp(q).is_some());
}

#[test]
fn srq_and_qp_on_it() {
    // The SRQ commands: ISSI 0.
    let mut r = Raw::new(EmuConfig::default());
    r.init_at_issi(0);
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    let buf = r.dma(4096);
    let dbr = r.dma(64);
    let mut m = inp(0x700, 0, 0x118);
    setf(&mut m, 0x10, 27, 24, 4);
    setf(&mut m, 0x14, 26, 24, 2);
    setf(&mut m, 0x28, 23, 0, u64::from(pd));
    put64(&mut m, 0x38, dbr);
    put64(&mut m, 0x110, buf);
    let mut big = m.clone();
    setf(&mut big, 0x10, 27, 24, 0xf);
    setf(&mut big, 0x14, 26, 24, 7);
    assert_eq!(
        r.cmd(&big, 16).status,
        0x50,
        "log 15 of 2 KiB WQEs needs more pages"
    );
    let srqn = r.create(&m);
    let mut q = r.qp_input(0, pd, uar, cqn);
    setf(&mut q, 0xc4, 26, 24, 1);
    setf(&mut q, 0xc4, 23, 0, u64::from(srqn));
    let qpn = r.create(&q);
    assert_eq!(r.emu.qp(qpn).unwrap().srqn, Some(srqn));
    assert_eq!(destroy(&mut r, 0x701, 8, srqn), 0x9);
    let mut arm = inp(0x703, 1, 16);
    setf(&mut arm, 8, 23, 0, u64::from(srqn));
    setf(&mut arm, 0xc, 15, 0, 100);
    assert_eq!(r.fails(&arm, 16, 0x3), syn::SRQ_LWM);
    setf(&mut arm, 0xc, 15, 0, 4);
    r.ok(&arm, 16);
    assert_eq!(r.emu.srq(srqn).unwrap().lwm, 4);
}

#[test]
fn raw_ethernet_objects() {
    let mut r = up();
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    let td = r.create(&inp(0x816, 0, 16));
    let mut tis = inp(0x912, 0, 0xc0);
    setf(&mut tis, 0x20 + 0x24, 23, 0, u64::from(td));
    let tisn = r.create(&tis);
    // SQ: sqc at 0x20, wq at sqc + 0x30.
    let buf = r.dma(4096);
    let dbr = r.dma(64);
    let wq = |m: &mut Vec<u8>| {
        setf(m, 0x20 + 0x08, 23, 0, u64::from(cqn));
        setf(m, 0x50, 31, 28, 1);
        setf(m, 0x50 + 0x08, 23, 0, u64::from(pd));
        setf(m, 0x50 + 0x0c, 23, 0, u64::from(uar));
        put64(m, 0x50 + 0x10, dbr);
        setf(m, 0x50 + 0x20, 19, 16, 6);
        setf(m, 0x50 + 0x20, 4, 0, 6);
        put64(m, 0x110, buf);
    };
    let mut sq = inp(0x904, 0, 0x118);
    wq(&mut sq);
    assert_eq!(r.fails(&sq, 16, 0x5), syn::WQ_BAD_TIS);
    setf(&mut sq, 0x20 + 0x2c, 23, 0, u64::from(tisn));
    let sqn = r.create(&sq);
    // MODIFY_SQ: RST -> RDY; a wrong current state is refused.
    let mut ms = inp(0x905, 0, 0x110);
    setf(&mut ms, 8, 31, 28, 1);
    setf(&mut ms, 8, 23, 0, u64::from(sqn));
    setf(&mut ms, 0x20, 23, 20, 1);
    assert_eq!(r.fails(&ms, 16, 0x9), syn::WQ_STATE);
    setf(&mut ms, 8, 31, 28, 0);
    r.ok(&ms, 16);
    assert_eq!(r.emu.wq(ObjKind::Sq, sqn).unwrap().state, 1);
    // RQ and a TIR on it.
    let mut rq = inp(0x908, 0, 0x118);
    wq(&mut rq);
    let rqn = r.create(&rq);
    assert_ne!(rqn, sqn, "QPs, SQs and RQs share a number space");
    let mut tir = inp(0x900, 0, 0x110);
    setf(&mut tir, 0x20 + 0x1c, 23, 0, u64::from(rqn ^ 0x40));
    setf(&mut tir, 0x20 + 0x24, 23, 0, u64::from(td));
    assert_eq!(r.fails(&tir, 16, 0x5), syn::TIR_BAD_RQ);
    setf(&mut tir, 0x20 + 0x1c, 23, 0, u64::from(rqn));
    r.ok(&tir, 16);
    assert_eq!(destroy(&mut r, 0x90a, 8, rqn), 0x9, "RQ used by the TIR");
    // Flow table, group, entry.
    let mut ft = inp(0x930, 0, 0x30);
    setf(&mut ft, 0x18, 7, 0, 4);
    let table = r.create(&ft);
    let mut fg = inp(0x933, 0, 0x400);
    setf(&mut fg, 0x14, 23, 0, u64::from(table));
    setf(&mut fg, 0x24, 31, 0, 15); // indices 0..=15
    let group = r.create(&fg);
    let mut fte = inp(0x936, 0, 0x340);
    setf(&mut fte, 0x14, 23, 0, u64::from(table));
    setf(&mut fte, 0x20, 31, 0, 16);
    setf(&mut fte, 0x40 + 4, 31, 0, u64::from(group));
    assert_eq!(r.fails(&fte, 16, 0x3), syn::FT_INDEX);
    setf(&mut fte, 0x20, 31, 0, 3);
    r.ok(&fte, 16);
    let mut dg = inp(0x934, 0, 0x40);
    setf(&mut dg, 0x14, 23, 0, u64::from(table));
    setf(&mut dg, 0x18, 31, 0, u64::from(group));
    assert_eq!(r.cmd(&dg, 16).status, 0x9, "group still has an entry");
}

#[test]
fn ports_registers_and_the_wire() {
    let mut a = up();
    let mut b = up();
    let ua = a.alloc_uar();
    let (_, eqbuf) = a.create_eq(4, ua, EV_PORT | EV_PAGE);
    let paos = |r: &mut Raw| {
        let mut m = inp(0x805, 1, 0x20);
        setf(&mut m, 8, 15, 0, 0x5006);
        setf(&mut m, 0x10, 23, 16, 1);
        let o = r.ok(&m, 0x20);
        (o[0x12] & 0xf, o[0x13] & 0xf)
    };
    assert_eq!(paos(&mut a), (1, 2), "admin up, oper down: no cable");
    assert!(!a.emu.link_up(1));
    connect(&a.emu, 1, &b.emu, 1).unwrap();
    assert_eq!(
        connect(&a.emu, 1, &b.emu, 1),
        Err(hca_emu::EmuError::PortBusy(1))
    );
    assert_eq!(paos(&mut a), (1, 1));
    assert_eq!(paos(&mut b), (1, 1));
    let eqb = |a: &Raw, off: usize| a.region(eqbuf).read_u8(off);
    assert_eq!((eqb(&a, 1), eqb(&a, 3)), (0x09, 4), "port active event");
    assert_eq!(eqb(&a, 0x28) >> 4, 1, "port_num");
    // QUERY_VPORT_STATE: up.
    let o = a.ok(&inp(0x750, 0, 16), 16);
    assert_eq!(o[0xf] & 0xf, 1);
    // PTYS: 100GBASE-CR4 operational.
    let mut m = inp(0x805, 1, 0x50);
    setf(&mut m, 8, 15, 0, 0x5004);
    setf(&mut m, 0x10, 23, 16, 1);
    setf(&mut m, 0x10, 2, 0, 4);
    let o = a.ok(&m, 0x50);
    assert_eq!(
        u32::from_be_bytes(o[0x34..0x38].try_into().unwrap()),
        1 << 20
    );
    // PMTU: write admin MTU, read it back; out of range refused.
    let mut m = inp(0x805, 0, 0x20);
    setf(&mut m, 8, 15, 0, 0x5003);
    setf(&mut m, 0x10, 23, 16, 1);
    setf(&mut m, 0x18, 31, 16, 9000);
    let o = a.ok(&m, 0x20);
    assert_eq!(u16::from_be_bytes([o[0x1c], o[0x1d]]), 9000, "oper_mtu");
    setf(&mut m, 0x18, 31, 16, 10_000);
    assert_eq!(a.fails(&m, 0x20, 0x3), syn::REG_BAD_VALUE);
    // Port 2 does not exist.
    setf(&mut m, 0x10, 23, 16, 2);
    assert_eq!(a.fails(&m, 0x20, 0x3), syn::BAD_PORT);
    // PAOS admin down: link down, event.
    let mut m = inp(0x805, 0, 0x20);
    setf(&mut m, 8, 15, 0, 0x5006);
    setf(&mut m, 0x10, 23, 16, 1);
    setf(&mut m, 0x10, 11, 8, 2);
    setf(&mut m, 0x14, 31, 31, 1);
    a.ok(&m, 0x20);
    assert!(!a.emu.link_up(1));
    assert_eq!((eqb(&a, 64 + 1), eqb(&a, 64 + 3)), (0x09, 1));
    // NIC vport context: MAC and MTU; modify the MTU and RoCE.
    let o = a.ok(&inp(0x754, 0, 16), 0x110);
    assert_eq!(&o[0x10 + 0xf6..0x10 + 0xf9], &[0x7c, 0xfe, 0x90]);
    let mut mv = inp(0x755, 0, 0x200);
    setf(&mut mv, 0xc, 6, 6, 1); // field_select.mtu (bit 25 from MSB)
    setf(&mut mv, 0xc, 1, 1, 1); // field_select.roce_en (bit 30)
    setf(&mut mv, 0x100, 0, 0, 1);
    setf(&mut mv, 0x100 + 0x24, 15, 0, 4096);
    a.ok(&mv, 16);
    let o = a.ok(&inp(0x754, 0, 16), 0x110);
    assert_eq!(o[0x13] & 1, 1, "roce_en");
    assert_eq!(u16::from_be_bytes([o[0x10 + 0x26], o[0x10 + 0x27]]), 4096);
    // Disconnect: b goes down too.
    b.emu.disconnect(1);
    assert!(!b.emu.link_up(1));
    assert!(!a.emu.link_up(1));
    // Two ports of one HCA.
    let two = hca_emu::EmuHca::new(EmuConfig {
        ports: 2,
        ..EmuConfig::default()
    });
    connect(&two, 1, &two, 2).unwrap();
    assert!(two.link_up(1) && two.link_up(2));
    assert_eq!(connect(&two, 1, &two, 1), Err(hca_emu::EmuError::SelfLoop));
}

/// CREATE_SRQ input over one page: `2^log` WQEs of 32 bytes.
fn srq_input(pd: u32, dbr: u64, page: u64) -> Vec<u8> {
    let mut m = inp(0x700, 0, 0x110 + 8);
    setf(&mut m, 0x10, 27, 24, 4);
    setf(&mut m, 0x14, 26, 24, 1);
    setf(&mut m, 0x28, 23, 0, u64::from(pd));
    put64(&mut m, 0x38, dbr);
    put64(&mut m, 0x110, page);
    m
}

/// CREATE_RMP input over one page: 16 WQEs of 32 bytes, state `state`,
/// `wq_type` `wq_type`.
fn rmp_input(pd: u32, dbr: u64, page: u64, state: u64, wq_type: u64) -> Vec<u8> {
    let mut m = inp(0x90c, 0, 0x110 + 8);
    setf(&mut m, 0x20, 23, 20, state);
    setf(&mut m, 0x50, 31, 28, wq_type);
    setf(&mut m, 0x58, 23, 0, u64::from(pd));
    put64(&mut m, 0x60, dbr);
    setf(&mut m, 0x70, 19, 16, 5);
    setf(&mut m, 0x70, 4, 0, 4);
    put64(&mut m, 0x110, page);
    m
}

#[test]
fn at_issi_1_shared_receive_queues_are_rmps() {
    let mut r = up();
    let pd = r.alloc_pd();
    let page = r.p.alloc_dma(4096, 4096).unwrap();
    let dbr = page.iova() + 0x800;
    // What this driver sent before: the SRQ commands, which exist at ISSI
    // 0 only.
    let m = srq_input(pd, dbr, page.iova());
    assert_eq!(r.fails(&m, 16, 0x2), syn::SRQ_NOT_AT_ISSI_1);
    // CREATE_RMP as Linux's create_rmp_cmd sends it.
    assert_eq!(
        r.fails(&rmp_input(pd, dbr, page.iova(), 0, 0), 16, 0x3),
        syn::RMP_STATE
    );
    assert_eq!(
        r.fails(&rmp_input(pd, dbr, page.iova(), 1, 1), 16, 0x3),
        syn::RMP_WQ_TYPE
    );
    let rmpn = r.create(&rmp_input(pd, dbr, page.iova(), 1, 0));
    let s = r.emu.srq(rmpn).unwrap();
    assert!(s.rmp);
    assert_eq!((s.log_size, s.log_rq_stride, s.pd), (4, 1, pd));
    // The SRQ commands do not reach an RMP.
    let mut arm = inp(0x703, 1, 16);
    setf(&mut arm, 8, 23, 0, u64::from(rmpn));
    setf(&mut arm, 0xc, 15, 0, 3);
    assert_eq!(r.fails(&arm, 16, 0x5), syn::NO_SUCH_OBJECT);
    // MODIFY_RMP arms the limit (arm_rmp_cmd): RDY -> RDY, bitmask lwm.
    let modify = |lwm: u64, bitmask: u64, cur: u64| {
        let mut m = inp(0x90d, 0, 0x110);
        setf(&mut m, 8, 31, 28, cur);
        setf(&mut m, 8, 23, 0, u64::from(rmpn));
        setf(&mut m, 0x14, 31, 0, bitmask);
        setf(&mut m, 0x20, 23, 20, 1);
        setf(&mut m, 0x54, 15, 0, lwm);
        m
    };
    assert_eq!(r.fails(&modify(3, 2, 1), 16, 0x3), syn::RMP_BITMASK);
    assert_eq!(r.fails(&modify(3, 1, 3), 16, 0x9), syn::RMP_STATE);
    assert_eq!(r.fails(&modify(17, 1, 1), 16, 0x3), syn::SRQ_LWM);
    r.ok(&modify(3, 1, 1), 16);
    assert_eq!(r.emu.srq(rmpn).unwrap().lwm, 3);
    // QUERY_RMP returns the context with the armed limit.
    let mut q = inp(0x90f, 0, 16);
    setf(&mut q, 8, 23, 0, u64::from(rmpn));
    let o = r.ok(&q, 0x110);
    assert_eq!(o[0x21] >> 4, 1, "rmp_context.state RDY");
    assert_eq!(u16::from_be_bytes([o[0x56], o[0x57]]), 3, "wq.lwm");
    assert_eq!(
        destroy(&mut r, 0x701, 8, rmpn),
        0x2,
        "DESTROY_SRQ at ISSI 1"
    );
    assert_eq!(destroy(&mut r, 0x90e, 8, rmpn), 0);
    r.p.free_dma(page);
}

#[test]
fn at_issi_0_shared_receive_queues_are_srqs() {
    let mut r = Raw::new(EmuConfig::default());
    r.init_at_issi(0);
    let pd = r.alloc_pd();
    let page = r.p.alloc_dma(4096, 4096).unwrap();
    let dbr = page.iova() + 0x800;
    assert_eq!(
        r.fails(&rmp_input(pd, dbr, page.iova(), 1, 0), 16, 0x2),
        syn::RMP_NOT_AT_ISSI_0
    );
    let srqn = r.create(&srq_input(pd, dbr, page.iova()));
    assert!(!r.emu.srq(srqn).unwrap().rmp);
    let mut arm = inp(0x703, 1, 16);
    setf(&mut arm, 8, 23, 0, u64::from(srqn));
    setf(&mut arm, 0xc, 15, 0, 3);
    r.ok(&arm, 16);
    assert_eq!(r.emu.srq(srqn).unwrap().lwm, 3);
    assert_eq!(
        destroy(&mut r, 0x90e, 8, srqn),
        0x2,
        "DESTROY_RMP at ISSI 0"
    );
    assert_eq!(destroy(&mut r, 0x701, 8, srqn), 0);
    r.p.free_dma(page);
}

#[test]
fn query_issi_answers_as_configured() {
    use hca_emu::IssiSupport;
    for (issi, status, mask) in [
        (IssiSupport::Recorded, 0, 2u8),
        (IssiSupport::Only0, 0, 1),
        (IssiSupport::ZeroMask, 0, 0),
        (IssiSupport::NoQueryIssi, 2, 0),
    ] {
        let mut r = Raw::new(EmuConfig::default().with_issi(issi));
        r.ok(&inp(0x104, 0, 16), 16);
        let a = r.cmd(&inp(0x10a, 0, 16), 0x70);
        assert_eq!(a.status, status, "{issi:?}");
        if status == 0 {
            assert_eq!(a.out[0x6f], mask, "{issi:?}");
        }
        // SET_ISSI 1 only where it is offered.
        let mut s = inp(0x10b, 0, 16);
        setf(&mut s, 0x8, 15, 0, 1);
        let want = if mask & 2 != 0 { 0 } else { 0x3 };
        assert_eq!(r.cmd(&s, 16).status, want, "{issi:?}");
    }
}

#[test]
fn user_index_needs_cqe_version_1_and_read_depths_stay_within_the_caps() {
    for cqe_version in [0u8, 1] {
        let mut r = Raw::new(EmuConfig::default().with_cqe_version(cqe_version));
        r.init();
        let uar = r.alloc_uar();
        let pd = r.alloc_pd();
        let (eqn, _) = r.create_eq(4, uar, 1);
        let (cqn, _, _) = r.create_cq(6, uar, eqn);
        // qpc.user_index: qpc at 0x18, bits 23:0 of its dword 0x10.
        let mut q = r.qp_input(0, pd, uar, cqn);
        setf(&mut q, 0x28, 23, 0, 5);
        if cqe_version == 0 {
            assert_eq!(r.fails(&q, 16, 0x3), syn::QP_USER_INDEX);
            setf(&mut q, 0x28, 23, 0, 0);
        }
        let qpn = r.create(&q);
        if cqe_version == 1 {
            // log_sra_max (qpc dword 0x70, bits 23:21) above
            // log_max_ra_req_qp; log_rra_max (0x90) above log_max_ra_res_qp.
            let mut m = Raw::modify_input(0x502, qpn);
            setf(&mut m, 0x54, 23, 16, 1);
            setf(&mut m, 0x18 + 0x70, 23, 21, 7);
            assert_eq!(r.fails(&m, 16, 0x3), syn::QP_RA_DEPTH);
            let mut m = Raw::modify_input(0x502, qpn);
            setf(&mut m, 0x54, 23, 16, 1);
            setf(&mut m, 0x18 + 0x90, 23, 21, 7);
            assert_eq!(r.fails(&m, 16, 0x3), syn::QP_RA_DEPTH);
            setf(&mut m, 0x18 + 0x90, 23, 21, 0);
            r.ok(&m, 16);
        }
    }
}
