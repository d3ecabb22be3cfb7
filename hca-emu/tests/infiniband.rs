//! InfiniBand ports: MAD_IFC (SubnGet(PortInfo), NodeInfo, malformed MADs),
//! the subnet manager that configures a port after its link comes up
//! (LID, Active, the port state change event), PAOS, and RC traffic routed
//! by LID without a GRH, as rdma-core's mlx5_vfio suite drives them.

mod common;

use std::time::Duration;

use common::dp::{Attrs, Cq, Node, Qp, QpSpec, Wr, op};
use common::{Raw, inp, setf};
use hca_emu::{EmuConfig, Personality, connect, syndrome as syn};
use platform::Platform;

const BAD_PARAM: u8 = 0x3;

fn ib(seed: u64, lid_base: u16) -> EmuConfig {
    EmuConfig {
        seed,
        lid_base,
        ..EmuConfig::default()
            .infiniband()
            .with_personality(Personality::ConnectX5)
    }
}

/// A SubnGet MAD (LID routed unless `class` says otherwise).
fn smp(class: u8, base: u8, method: u8, attr: u16, attr_mod: u32) -> [u8; 256] {
    let mut m = [0u8; 256];
    m[0] = base;
    m[1] = class;
    m[2] = 1;
    m[3] = method;
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m[20..24].copy_from_slice(&attr_mod.to_be_bytes());
    m
}

/// MAD_IFC with op_mod 3 (ignore M_Key and B_Key) as rdma-core sends it;
/// returns the response MAD.
fn mad_ifc(r: &mut Raw, op_mod: u16, port: u8, mad: &[u8; 256]) -> Vec<u8> {
    let mut m = inp(0x50d, op_mod, 0x110);
    setf(&mut m, 0x8, 7, 0, u64::from(port));
    m[0x10..0x110].copy_from_slice(mad);
    r.ok(&m, 0x110)[0x10..0x110].to_vec()
}

fn port_info(r: &mut Raw, port: u8) -> Vec<u8> {
    let o = mad_ifc(r, 3, port, &smp(0x01, 1, 0x01, 0x15, u32::from(port)));
    assert_eq!(o[3], 0x81, "GetResp");
    assert_eq!(&o[4..6], &[0, 0], "MAD status");
    o[64..128].to_vec()
}

/// (PortState, PortPhysicalState, LID) of a PortInfo.
fn state(pi: &[u8]) -> (u8, u8, u16) {
    (
        pi[32] & 0xf,
        pi[33] >> 4,
        u16::from_be_bytes([pi[16], pi[17]]),
    )
}

fn paos(r: &mut Raw, admin: u64) -> (u64, u64) {
    // ACCESS_REG PAOS (0x5006), write with ase.
    let mut m = inp(0x805, 0, 0x20);
    setf(&mut m, 0x8, 15, 0, 0x5006);
    setf(&mut m, 0x10, 23, 16, 1);
    setf(&mut m, 0x10, 11, 8, admin);
    setf(&mut m, 0x14, 31, 31, 1);
    let o = r.ok(&m, 0x20);
    (u64::from(o[0x12] & 0xf), u64::from(o[0x13] & 0xf))
}

/// Port state change EQEs (subtype, port) of an EQ since `ci`.
fn port_events(r: &Raw, eq_buf: u64, log: u32, ci: &mut u32) -> Vec<(u8, u8)> {
    r.emu.run_until_idle();
    let reg = r.region(eq_buf);
    let mut v = Vec::new();
    loop {
        let idx = (*ci & ((1 << log) - 1)) as usize;
        if reg.read_u8(idx * 64 + 63) & 1 != ((*ci >> log) & 1) as u8 {
            break;
        }
        assert_eq!(reg.read_u8(idx * 64 + 1), 0x09, "port state change EQE");
        // Sub type at byte 3, port_num in bits 7:4 of data byte 8.
        v.push((
            reg.read_u8(idx * 64 + 3),
            reg.read_u8(idx * 64 + 0x20 + 8) >> 4,
        ));
        *ci += 1;
    }
    v
}

#[test]
fn port_info_subnet_manager_and_port_events() {
    let cfg = ib(1, 1).with_sm_delay(Duration::from_millis(300));
    let mut a = Raw::new(cfg);
    a.init();
    let mut b = Raw::new(ib(2, 7));
    b.init();
    let uar = a.alloc_uar();
    let (eqn, eq_buf) = a.create_eq(4, uar, 1 << 0x09);
    let mut ci = 0;
    // No cable: Down, Polling, no LID.
    assert_eq!(state(&port_info(&mut a, 1)), (1, 2, 0));
    connect(&a.emu, 1, &b.emu, 1).unwrap();
    // Link up, not yet configured by the subnet manager: Init, LinkUp.
    let pi = port_info(&mut a, 1);
    assert_eq!(state(&pi), (2, 5, 0));
    assert!(port_events(&a, eq_buf, 4, &mut ci).is_empty());
    // The subnet manager configures it: LID, Active, one event.
    a.p.delay(Duration::from_millis(400));
    let pi = port_info(&mut a, 1);
    assert_eq!(state(&pi), (4, 5, 1));
    assert_eq!(pi[31], 0x2, "4X active");
    assert_eq!(pi[62] >> 4, 2, "EDR active");
    assert_eq!(pi[41] & 0xf, 5, "MTU cap 4096");
    assert_eq!(port_events(&a, eq_buf, 4, &mut ci), vec![(4, 1)]);
    // attr_mod 0: the port the MAD came in on.
    let o = mad_ifc(&mut a, 3, 1, &smp(0x01, 1, 0x01, 0x15, 0));
    assert_eq!(state(&o[64..128]), (4, 5, 1));
    // The HCA vport context agrees.
    let mut q = inp(0x762, 0, 16);
    setf(&mut q, 8, 19, 16, 1);
    let ctx = a.ok(&q, 0x210);
    assert_eq!(u16::from_be_bytes([ctx[0x70], ctx[0x71]]), 1);
    // PAOS admin down: Down event, Disabled; admin up: Active again after
    // the subnet manager's delay.
    assert_eq!(paos(&mut a, 2), (2, 2));
    assert_eq!(state(&port_info(&mut a, 1)), (1, 3, 0));
    assert_eq!(port_events(&a, eq_buf, 4, &mut ci), vec![(1, 1)]);
    assert_eq!(paos(&mut a, 1), (1, 1));
    assert_eq!(state(&port_info(&mut a, 1)), (2, 5, 0));
    a.p.delay(Duration::from_millis(400));
    assert_eq!(port_events(&a, eq_buf, 4, &mut ci), vec![(4, 1)]);
    // The peer, configured at once (sm_delay 0), has its own LID.
    assert_eq!(state(&port_info(&mut b, 1)), (4, 5, 7));
    // NodeInfo: a channel adapter with one port, device id 0x1017.
    let o = mad_ifc(&mut a, 3, 1, &smp(0x81, 1, 0x01, 0x11, 0));
    assert_eq!(&o[4..6], &[0x80, 0], "directed route: D bit, status 0");
    assert_eq!((o[64 + 2], o[64 + 3]), (1, 1));
    assert_eq!(&o[64 + 30..64 + 32], &[0x10, 0x17]);
    let mut d = inp(0x302, 0, 16);
    setf(&mut d, 8, 7, 0, u64::from(eqn));
    a.ok(&d, 16);
    let mut d = inp(0x803, 0, 16);
    setf(&mut d, 8, 23, 0, u64::from(uar));
    a.ok(&d, 16);
    for mut r in [a, b] {
        r.teardown();
        r.free_all();
        r.emu.assert_clean();
    }
}

#[test]
fn malformed_mads_and_bad_mad_ifc_commands() {
    let mut a = Raw::new(ib(1, 1));
    a.init();
    let status = |o: &[u8]| u16::from_be_bytes([o[4], o[5]]);
    let cases: [([u8; 256], u16); 5] = [
        (smp(0x01, 2, 0x01, 0x15, 1), 0x0004),   // base version
        (smp(0x04, 1, 0x01, 0x15, 1), 0x0004),   // performance class
        (smp(0x01, 1, 0x02, 0x15, 1), 0x0008),   // Set
        (smp(0x01, 1, 0x01, 0x0020, 1), 0x000c), // P_KeyTable: not answered
        (smp(0x01, 1, 0x01, 0x15, 9), 0x001c),   // no port 9
    ];
    for (m, want) in cases {
        let o = mad_ifc(&mut a, 3, 1, &m);
        assert_eq!(status(&o), want, "MAD {:02x?}", &m[..4]);
        assert_eq!(o[3], 0x81);
    }
    let mut m = inp(0x50d, 4, 0x110);
    setf(&mut m, 0x8, 7, 0, 1);
    assert_eq!(a.fails(&m, 0x110, BAD_PARAM), syn::BAD_OP_MOD);
    let mut m = inp(0x50d, 3, 0x110);
    setf(&mut m, 0x8, 7, 0, 2);
    assert_eq!(a.fails(&m, 0x110, BAD_PARAM), syn::BAD_PORT);
    // Short input: the MAD must be all there.
    let m = inp(0x50d, 3, 0x20);
    assert_eq!(a.fails(&m, 0x110, 0x50), syn::INPUT_TOO_SHORT);
    a.teardown();
    a.free_all();
    a.emu.assert_clean();
    // Ethernet: no subnet management agent.
    let mut e = Raw::new(EmuConfig::default().with_personality(Personality::ConnectX5));
    e.init();
    let mut m = inp(0x50d, 3, 0x110);
    setf(&mut m, 0x8, 7, 0, 1);
    assert_eq!(e.fails(&m, 0x110, BAD_PARAM), syn::MAD_IFC_NOT_IB);
    e.teardown();
    e.free_all();
    e.emu.assert_clean();
}

/// INIT2RTR on an InfiniBand path: rlid, no GRH.
fn init2rtr_ib(n: &mut Node, qp: &Qp, rlid: u16, remote_qpn: u32, a: &Attrs) {
    let mut m = Raw::modify_input(0x503, qp.qpn);
    setf(&mut m, 0x20, 31, 29, u64::from(a.mtu));
    setf(&mut m, 0x20, 28, 24, 20);
    setf(&mut m, 0x2c, 23, 0, u64::from(remote_qpn));
    setf(&mut m, 0x34, 15, 0, u64::from(rlid));
    setf(&mut m, 0x54, 23, 16, 1);
    setf(&mut m, 0xac, 28, 24, u64::from(a.min_rnr_nak));
    setf(&mut m, 0xac, 23, 0, u64::from(a.rq_psn));
    n.r.ok(&m, 16);
}

fn ib_node(id: u8, lid_base: u16) -> Node {
    Node::new(id, ib(u64::from(id), lid_base))
}

#[test]
fn rc_send_imm_routed_by_lid() {
    let mut a = ib_node(1, 3);
    let mut b = ib_node(2, 9);
    connect(&a.r.emu, 1, &b.r.emu, 1).unwrap();
    let attrs = Attrs::default();
    let mut ca: Cq = a.cq(6);
    let mut cb: Cq = b.cq(6);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    let mut qb = b.qp(&QpSpec::new(0, &cb));
    a.rst2init(&mut qa, 1, &attrs);
    b.rst2init(&mut qb, 1, &attrs);
    init2rtr_ib(&mut a, &qa, 9, qb.qpn, &attrs);
    init2rtr_ib(&mut b, &qb, 3, qa.qpn, &attrs);
    a.rtr2rts(&qa, &attrs);
    b.rtr2rts(&qb, &attrs);
    let src = a.mr(512, b'c', common::dp::LW);
    let dst = b.mr(512, 0, common::dp::LW);
    for i in 0..4u32 {
        b.post_recv(&mut qb, &[(dst.addr, 512, dst.key)]);
        a.post_send(
            &mut qa,
            &[Wr::new(op::SEND_IMM).sge(src.addr, 512, src.key).imm(i)],
        );
        assert_eq!(a.wait(&mut ca, 1)[0].opcode, 0x0);
        let r = b.wait(&mut cb, 1);
        assert_eq!((r[0].opcode, r[0].imm, r[0].byte_cnt), (0x3, i, 512));
        assert_eq!(b.read(dst.addr, 512), vec![b'c'; 512]);
    }
    // A QP addressed to a LID nobody has: its packets are not taken, the
    // requester retries and fails.
    let mut qc = a.qp(&QpSpec::new(0, &ca));
    a.rst2init(&mut qc, 1, &attrs);
    init2rtr_ib(&mut a, &qc, 0x77, qb.qpn, &attrs);
    let short = Attrs {
        retry_count: 1,
        ack_timeout: 8,
        ..Attrs::default()
    };
    a.rtr2rts(&qc, &short);
    a.post_send(&mut qc, &[Wr::new(op::SEND).sge(src.addr, 64, src.key)]);
    let e = a.wait(&mut ca, 1);
    assert_eq!(e[0].opcode, 0xd, "requester error: {e:?}");
    a.finish_allowing_iommu_faults();
    b.finish();
}

/// rdma-core's `test_mlx5vfio_rc_qp_send_imm_traffic` in miniature: one
/// HCA, two RC QPs on port 1, each addressed to the port's own LID (the
/// packets loop back), SEND_IMM one way. Port 1 has a loopback plug, as
/// the mlx5_vfio peer suite runs it.
#[test]
fn rc_send_imm_to_own_lid() {
    let mut n = Node::new(1, ib(5, 1));
    n.r.emu.plug_loopback(1).unwrap();
    assert_eq!(state(&port_info(&mut n.r, 1)), (4, 5, 1));
    let attrs = Attrs::default();
    let mut cs: Cq = n.cq(6);
    let mut cc: Cq = n.cq(6);
    let mut server = n.qp(&QpSpec::new(0, &cs));
    let mut client = n.qp(&QpSpec::new(0, &cc));
    n.rst2init(&mut server, 1, &attrs);
    n.rst2init(&mut client, 1, &attrs);
    init2rtr_ib(&mut n, &server, 1, client.qpn, &attrs);
    init2rtr_ib(&mut n, &client, 1, server.qpn, &attrs);
    n.rtr2rts(&server, &attrs);
    n.rtr2rts(&client, &attrs);
    let src = n.mr(1024, b'c', common::dp::LW);
    let dst = n.mr(1024, 0, common::dp::LW);
    let frames_before = n.r.emu.datapath().frames_tx;
    for i in 0..8u32 {
        n.post_recv(&mut server, &[(dst.addr, 1024, dst.key)]);
        n.post_send(
            &mut client,
            &[Wr::new(op::SEND_IMM)
                .sge(src.addr, 1024, src.key)
                .imm(0x0302_0100 + i)],
        );
        assert_eq!(n.wait(&mut cc, 1)[0].opcode, 0x0);
        let r = n.wait(&mut cs, 1);
        assert_eq!(
            (r[0].opcode, r[0].imm, r[0].byte_cnt),
            (0x3, 0x0302_0100 + i, 1024)
        );
        assert_eq!(n.read(dst.addr, 1024), vec![b'c'; 1024]);
        n.write(dst.addr, &[0; 1024]);
    }
    // Requests and acknowledgements went through the port.
    assert!(n.r.emu.datapath().frames_tx >= frames_before + 16);
    n.finish();
}

/// What rdma-core's async-event test relies on: after a function reset
/// the port is down; INIT_HCA brings its link up, the subnet manager
/// makes it Active `sm_delay` later, and an EQ created in between (after
/// INIT_HCA) hears the Active event.
#[test]
fn port_is_down_after_a_reset_and_active_again_after_init_hca() {
    let cfg = ib(11, 1).with_sm_delay(Duration::from_millis(500));
    let mut r = Raw::new(cfg);
    r.emu.plug_loopback(1).unwrap();
    r.init();
    r.p.delay(Duration::from_millis(600));
    assert_eq!(state(&port_info(&mut r, 1)), (4, 5, 1));
    // Function reset: the firmware state, and with it the port, is gone.
    r.p.reset_function().unwrap();
    r.free_all();
    r.enable_pci();
    assert!(r.wait_init(Duration::from_secs(2)));
    r.setup_cmdq();
    r.init();
    // Link up (the plug is still in), not yet configured.
    assert_eq!(state(&port_info(&mut r, 1)), (2, 5, 0));
    let uar = r.alloc_uar();
    let (eqn, eq_buf) = r.create_eq(4, uar, 1 << 0x09);
    let mut ci = 0;
    assert!(port_events(&r, eq_buf, 4, &mut ci).is_empty());
    r.p.delay(Duration::from_millis(600));
    assert_eq!(port_events(&r, eq_buf, 4, &mut ci), vec![(4, 1)]);
    assert_eq!(state(&port_info(&mut r, 1)), (4, 5, 1));
    let mut d = inp(0x302, 0, 16);
    setf(&mut d, 8, 7, 0, u64::from(eqn));
    r.ok(&d, 16);
    let mut d = inp(0x803, 0, 16);
    setf(&mut d, 8, 23, 0, u64::from(uar));
    r.ok(&d, 16);
    r.teardown();
    r.free_all();
}

/// UD on InfiniBand: the address vector names the destination by LID; the
/// receive skips the 40 bytes of the GRH area and its CQE says there was
/// no GRH.
#[test]
fn ud_routed_by_lid_without_grh() {
    let mut a = ib_node(1, 3);
    let mut b = ib_node(2, 9);
    connect(&a.r.emu, 1, &b.r.emu, 1).unwrap();
    let attrs = Attrs::default();
    let mut ca: Cq = a.cq(6);
    let mut cb: Cq = b.cq(6);
    let mut qa = a.qp(&QpSpec::new(2, &ca));
    let mut qb = b.qp(&QpSpec::new(2, &cb));
    a.ud_ready(&mut qa, 1, &attrs);
    b.ud_ready(&mut qb, 1, &attrs);
    let src = a.mr(256, b'u', common::dp::LW);
    let dst = b.mr(40 + 256, 0xee, common::dp::LW);
    b.post_recv(&mut qb, &[(dst.addr, 40 + 256, dst.key)]);
    let av = common::dp::Av {
        qkey: attrs.qkey,
        dqpn: qb.qpn,
        rmac: [0; 6],
        rgid: [0; 16],
        sgid_index: 0,
        hop_limit: 0,
        tclass: 0,
        flow_label: 0,
        rlid: 9,
    };
    let mut w = Wr::new(op::SEND_IMM).sge(src.addr, 256, src.key).imm(7);
    w.av = Some(av);
    a.post_send(&mut qa, &[w]);
    assert_eq!(a.wait(&mut ca, 1)[0].opcode, 0x0);
    let r = b.wait(&mut cb, 1);
    assert_eq!((r[0].opcode, r[0].imm, r[0].byte_cnt), (0x3, 7, 40 + 256));
    assert_eq!(r[0].flags_rqpn >> 28 & 3, 0, "no GRH");
    assert_eq!(r[0].flags_rqpn & 0xff_ffff, qa.qpn);
    assert_eq!(b.read(dst.addr + 40, 256), vec![b'u'; 256]);
    a.finish();
    b.finish();
}
