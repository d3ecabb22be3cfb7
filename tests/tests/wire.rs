//! The cables of the emulated port beyond another emulated HCA of this
//! process: a loopback plug (two QPs of one HCA talk through its own port)
//! and a Unix datagram socket (the wire between two processes' emulated
//! HCAs, here two HCAs of this process that only share the socket).

use hca_driver::verbs::{Ah, Context, Cq, DmaBuf, Mr, Pd, Qp};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hca_driver::verbs::{
    AccessFlags, QpInitAttr, QpType, SendFlags, SendOp, SendWr, WcOpcode, WcStatus,
};
use hca_driver::{Config, PortState, Rkey};
use hca_emu::{Clock, EmuConfig, EmuError, EmuPlatform, WireSpec};
use hca_tests::verbs::{
    Endpoint, RcParams, connect, path_to, poll_n, poll_ok, post_recv_sge, qp_cap, ud_ready,
};
use hca_tests::{Bench, Link};

/// RC SENDs with immediate data both ways between side A and side B, and
/// an RDMA WRITE from A into B's buffer.
fn rc_both_ways(l: &mut Link<EmuPlatform>, rounds: u32) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    {
        let (ca, cb) = (
            Arc::new(Context::open(&h.a).unwrap()),
            Arc::new(Context::open(h.b()).unwrap()),
        );
        assert_eq!(ca.query_port(pa).unwrap().state, PortState::Active);
        let (pda, pdb) = (
            Arc::new(Pd::alloc(&ca).unwrap()),
            Arc::new(Pd::alloc(&cb).unwrap()),
        );
        let (cqa, cqb) = (
            Arc::new(Cq::create(&ca, 64).unwrap()),
            Arc::new(Cq::create(&cb, 64).unwrap()),
        );
        let (ba, bb) = (
            Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap()),
            Arc::new(DmaBuf::alloc(h.b(), 8192).unwrap()),
        );
        let ma = Mr::register(&pda, &ba, AccessFlags::ALL).unwrap();
        let mb = Mr::register(&pdb, &bb, AccessFlags::ALL).unwrap();
        let rc = |cq| QpInitAttr::new(QpType::Rc, cq, cq).cap(qp_cap(16, 16, 1, 64));
        let mut qa = Qp::create(&pda, &rc(&cqa)).unwrap();
        let mut qb = Qp::create(&pdb, &rc(&cqb)).unwrap();
        let ea = Endpoint::of(&ca, pa, qa.number().0, ma.addr(), ma.rkey());
        let eb = Endpoint::of(&cb, pb, qb.number().0, mb.addr(), mb.rkey());
        let p = RcParams {
            access: AccessFlags::ALL,
            ..RcParams::default()
        };
        connect(&ca, &mut qa, pa, &eb, &p);
        connect(&cb, &mut qb, pb, &ea, &p);
        for round in 0..rounds {
            let ping = format!("ping {round} from {:#x}", ea.qpn);
            let pong = format!("pong {round} from {:#x}", eb.qpn);
            post_recv_sge(&mut qb, 0xb00 + u64::from(round), mb.sge(0, 256).unwrap());
            post_recv_sge(&mut qa, 0xa00 + u64::from(round), ma.sge(0, 256).unwrap());
            qa.post_send(
                &SendWr::new(u64::from(round), SendOp::SendWithImm(round))
                    .inline(ping.as_bytes())
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let wc = poll_ok(&cqb);
            assert_eq!(
                (wc.wr_id, wc.opcode, wc.imm_data, wc.byte_len),
                (
                    0xb00 + u64::from(round),
                    WcOpcode::Recv,
                    round,
                    ping.len() as u32
                )
            );
            let mut got = vec![0u8; ping.len()];
            bb.read(0, &mut got).unwrap();
            assert_eq!(got, ping.as_bytes());
            assert_eq!(poll_ok(&cqa).wr_id, u64::from(round));
            qb.post_send(
                &SendWr::new(0x100 + u64::from(round), SendOp::Send)
                    .inline(pong.as_bytes())
                    .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            let wc = poll_ok(&cqa);
            assert_eq!(wc.wr_id, 0xa00 + u64::from(round));
            let mut got = vec![0u8; pong.len()];
            ba.read(0, &mut got).unwrap();
            assert_eq!(got, pong.as_bytes());
            assert_eq!(poll_ok(&cqb).wr_id, 0x100 + u64::from(round));
        }
        ba.write(4096, b"written across the wire").unwrap();
        qa.post_send(
            &SendWr::new(
                7,
                SendOp::RdmaWrite {
                    remote_addr: eb.addr + 4096,
                    rkey: eb.rkey.0,
                },
            )
            .sgl(&[ma.sge(4096, 23).unwrap()])
            .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        assert_eq!(poll_ok(&cqa).opcode, WcOpcode::RdmaWrite);
        let mut got = [0u8; 23];
        bb.read(4096, &mut got).unwrap();
        assert_eq!(&got, b"written across the wire");
    }
    l.close(h);
}

#[test]
fn a_loopback_plug_brings_the_link_up_and_carries_two_qps_of_one_hca() {
    let mut a = Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default());
    // No cable: the port is down.
    a.with_open(|hca, _| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        assert_eq!(ctx.query_port(1).unwrap().state, PortState::Down);
    });
    let emu = a.emu().unwrap();
    emu.plug_loopback(1).unwrap();
    assert_eq!(emu.plug_loopback(1), Err(EmuError::PortBusy(1)));
    assert_eq!(
        emu.plug_loopback(2),
        Err(EmuError::NoSuchPort { port: 2, ports: 1 })
    );
    let tx = emu.datapath().frames_tx;
    let mut l = Link {
        a,
        b: None,
        port_a: 1,
        port_b: 1,
    };
    rc_both_ways(&mut l, 8);
    let emu = l.a.emu().unwrap();
    assert!(
        emu.datapath().frames_tx >= tx + 8 * 2 * 2,
        "every message and its ACK went out of the port"
    );
    l.assert_clean();
    // Unplugged, the link is down again.
    l.a.emu().unwrap().disconnect(1);
    l.a.with_open(|hca, _| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        assert_eq!(ctx.query_port(1).unwrap().state, PortState::Down);
    });
}

fn socket_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hca-wire-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two emulated HCAs of this process on real time that share nothing but
/// a Unix datagram socket wire between their ports 1, bound in a fresh
/// directory named after `tag` (returned, with B's socket path).
fn unix_link(tag: &str) -> (Link<EmuPlatform>, PathBuf, PathBuf) {
    let dir = socket_dir(tag);
    let (sa, sb) = (dir.join("a.sock"), dir.join("b.sock"));
    let real = EmuConfig {
        clock: Clock::Real,
        ..EmuConfig::default()
    };
    let a = Bench::<EmuPlatform>::emulated(real.clone(), Config::default());
    let b = Bench::<EmuPlatform>::emulated(EmuConfig { seed: 77, ..real }, Config::default());
    let ab = WireSpec::Unix {
        local: sa.clone(),
        peer: sb.clone(),
    };
    a.emu().unwrap().cable_to(1, &ab).unwrap();
    b.emu().unwrap().cable_to(1, &ab.far_end()).unwrap();
    assert!(sa.exists() && sb.exists(), "both ends bound their sockets");
    let l = Link {
        a,
        b: Some(b),
        port_a: 1,
        port_b: 1,
    };
    (l, dir, sb)
}

#[test]
fn a_socket_wire_carries_rc_between_hcas_that_share_nothing_else() {
    let (mut l, dir, sb) = unix_link("rc");
    rc_both_ways(&mut l, 16);
    l.assert_clean();
    assert_eq!(l.emu_a().socket_frames_unsent(1), 0);
    // The far end unplugged: A's frames are lost (counted), B's socket
    // file is gone.
    l.emu_b().disconnect(1);
    assert!(!sb.exists());
    l.a.with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 4).unwrap());
        let mut qp = Qp::create(
            &pd,
            &QpInitAttr::new(QpType::Ud, &cq, &cq).cap(qp_cap(4, 4, 1, 64)),
        )
        .unwrap();
        hca_tests::verbs::ud_ready(&mut qp, 1, 0x11);
        let me = Endpoint::of(&ctx, 1, qp.number().0, 0, hca_driver::Rkey(0));
        let before = emu.socket_frames_unsent(1);
        // To a MAC that is not the port's own, so the frame leaves the port.
        let mut attr = hca_tests::verbs::path_to(&ctx, 1, &me, 64);
        attr = attr.dmac([0x02, 0, 0, 0, 0, 0x99]);
        let away = Ah::create(&pd, &attr).unwrap();
        qp.post_send(
            &SendWr::new(1, SendOp::Send)
                .inline(b"into the void")
                .flags(SendFlags::SIGNALED)
                .ud(away.dest(0x99, 0x11)),
        )
        .unwrap();
        assert_eq!(poll_ok(&cq).wr_id, 1, "UD completes at transmission");
        let t0 = std::time::Instant::now();
        while emu.socket_frames_unsent(1) == before && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(emu.socket_frames_unsent(1), before + 1);
        drop((away, qp));
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_socket_that_cannot_be_bound_is_a_typed_error() {
    let a = Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default());
    let e = a
        .emu()
        .unwrap()
        .cable_to(
            1,
            &WireSpec::Unix {
                local: "/nonexistent-dir/a.sock".into(),
                peer: "/nonexistent-dir/b.sock".into(),
            },
        )
        .unwrap_err();
    assert!(
        matches!(&e, EmuError::Socket { path, .. } if path == "/nonexistent-dir/a.sock"),
        "{e}"
    );
    // The port stays free.
    a.emu().unwrap().plug_loopback(1).unwrap();
}

/// Frames a tap saw, by direction.
#[derive(Default)]
struct Seen {
    out: Vec<Vec<u8>>,
    inn: Vec<Vec<u8>>,
}

fn tap(emu: &hca_emu::EmuHca, port: u8) -> std::sync::Arc<std::sync::Mutex<Seen>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let s = seen.clone();
    emu.capture(
        port,
        std::sync::Arc::new(move |p: u8, dir: hca_emu::Direction, f: &[u8]| {
            assert_eq!(p, port);
            let mut g = s.lock().unwrap();
            match dir {
                hca_emu::Direction::Out => g.out.push(f.to_vec()),
                hca_emu::Direction::In => g.inn.push(f.to_vec()),
            }
        }),
    )
    .unwrap();
    seen
}

/// What A sent is what B received and the other way round, frame for
/// frame; A's frames carry A's MAC as source, B's as destination.
fn taps_agree(a: &Seen, b: &Seen) {
    assert!(!a.out.is_empty() && !a.inn.is_empty());
    assert_eq!(a.out, b.inn, "A's frames out are B's frames in");
    assert_eq!(b.out, a.inn, "B's frames out are A's frames in");
    let mac_a = &a.out[0][6..12];
    assert!(a.out.iter().all(|f| &f[6..12] == mac_a));
    assert!(a.inn.iter().all(|f| &f[0..6] == mac_a));
}

#[test]
fn a_udp_wire_carries_rc_and_taps_see_every_frame_both_ways() {
    let (ua, ub) = (
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
    );
    let (pa, pb) = (ua.local_addr().unwrap(), ub.local_addr().unwrap());
    drop((ua, ub));
    let spec: WireSpec = format!("udp:{pa},{pb}").parse().unwrap();
    let real = EmuConfig {
        clock: Clock::Real,
        ..EmuConfig::default()
    };
    let a = Bench::<EmuPlatform>::emulated(real.clone(), Config::default());
    let b = Bench::<EmuPlatform>::emulated(EmuConfig { seed: 78, ..real }, Config::default());
    a.emu().unwrap().cable_to(1, &spec).unwrap();
    b.emu().unwrap().cable_to(1, &spec.far_end()).unwrap();
    let (sa, sb) = (tap(a.emu().unwrap(), 1), tap(b.emu().unwrap(), 1));
    // A tap on a port the HCA does not have is an error.
    assert!(matches!(
        a.emu()
            .unwrap()
            .capture(3, std::sync::Arc::new(|_, _, _| {})),
        Err(EmuError::NoSuchPort { port: 3, .. })
    ));
    let mut l = Link {
        a,
        b: Some(b),
        port_a: 1,
        port_b: 1,
    };
    rc_both_ways(&mut l, 8);
    l.assert_clean();
    assert_eq!(l.emu_a().socket_frames_unsent(1), 0);
    l.emu_a().stop_capture(1);
    l.emu_b().stop_capture(1);
    taps_agree(&sa.lock().unwrap(), &sb.lock().unwrap());
    // A UDP port in use is a typed error naming the address.
    let busy = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let c = Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default());
    let e = c
        .emu()
        .unwrap()
        .cable_to(
            1,
            &format!("udp:{},127.0.0.1:9", busy.local_addr().unwrap())
                .parse()
                .unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(&e, EmuError::Socket { path, .. } if *path == busy.local_addr().unwrap().to_string()),
        "{e}"
    );
}

#[test]
fn taps_see_the_frames_between_two_hcas_of_one_process() {
    let a = Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default());
    let b = Bench::<EmuPlatform>::emulated(
        EmuConfig {
            seed: 79,
            ..EmuConfig::default()
        },
        Config::default(),
    );
    hca_emu::connect(a.emu().unwrap(), 1, b.emu().unwrap(), 1).unwrap();
    let (sa, sb) = (tap(a.emu().unwrap(), 1), tap(b.emu().unwrap(), 1));
    let mut l = Link {
        a,
        b: Some(b),
        port_a: 1,
        port_b: 1,
    };
    rc_both_ways(&mut l, 8);
    l.assert_clean();
    taps_agree(&sa.lock().unwrap(), &sb.lock().unwrap());
}

/// A UD QP on port 1 in `pd`, ready with Q_Key `qkey`, completing on
/// `cq`, with `n` receives posted into a buffer of its own: its region, the
/// QP and its endpoint.
fn ud_end(
    pd: &Arc<Pd<EmuPlatform>>,
    cq: &Arc<Cq<EmuPlatform>>,
    n: u32,
    qkey: u32,
) -> (Mr<EmuPlatform>, Qp<EmuPlatform>, Endpoint) {
    let ctx = pd.context();
    let buf = Arc::new(DmaBuf::alloc(ctx.hca(), 4096).unwrap());
    let mr = Mr::register(pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
    let attr = QpInitAttr::new(QpType::Ud, cq, cq).cap(qp_cap(n, n, 1, 64));
    let mut qp = Qp::create(pd, &attr).unwrap();
    ud_ready(&mut qp, 1, qkey);
    for i in 0..u64::from(n) {
        post_recv_sge(&mut qp, i, mr.sge(0, 256).unwrap());
    }
    let end = Endpoint::of(ctx, 1, qp.number().0, 0, Rkey(0));
    (mr, qp, end)
}

/// Both ends of a Unix socket wire sending at once, each a burst of UD
/// SENDs twenty times the far end's datagram queue
/// (`net.unix.max_dgram_qlen`, 10 by default): every frame arrives,
/// none is lost waiting for room. A port goes on receiving while its
/// transmitter waits for the far end, as on a full-duplex link (IEEE
/// 802.3 Annex 31B: PAUSE holds back the transmitter only); two devices
/// that each held their own lock while waiting to send to the other
/// would drop frames after the send timeout.
#[test]
fn a_socket_wire_carries_bursts_both_ways_at_once() {
    const N: u32 = 200;
    const QKEY: u32 = 0x5eed;
    let (mut l, dir, _) = unix_link("duplex");
    let h = l.open();
    {
        let s = h.sides(2 * N);
        let (ma, mut qa, ea) = ud_end(&s.pda, &s.cqa, N, QKEY);
        let (mb, mut qb, eb) = ud_end(&s.pdb, &s.cqb, N, QKEY);
        let to_b = Ah::create(&s.pda, &path_to(&s.ca, 1, &eb, 64)).unwrap();
        let to_a = Ah::create(&s.pdb, &path_to(&s.cb, 1, &ea, 64)).unwrap();
        // Both bursts posted before either device is done with its own.
        let (da, db) = (to_b.dest(eb.qpn, QKEY), to_a.dest(ea.qpn, QKEY));
        let msg = b"both ways at once";
        for i in 0..u64::from(N) {
            let f = SendFlags::SIGNALED;
            qa.post_send(&SendWr::new(i, SendOp::Send).inline(msg).flags(f).ud(da))
                .unwrap();
            qb.post_send(&SendWr::new(i, SendOp::Send).inline(msg).flags(f).ud(db))
                .unwrap();
        }
        for (side, cq) in [("A", &s.cqa), ("B", &s.cqb)] {
            let wc = poll_n(cq, 2 * N as usize);
            let recvs = wc.iter().filter(|w| w.opcode == WcOpcode::Recv).count();
            assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{side}");
            assert_eq!(recvs, N as usize, "side {side}: every frame received");
        }
        assert_eq!(l.emu_a().socket_frames_unsent(1), 0);
        assert_eq!(l.emu_b().socket_frames_unsent(1), 0);
        drop((to_a, to_b, qa, qb, ma, mb));
    }
    l.close(h);
    l.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}
