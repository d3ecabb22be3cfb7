//! NIC RX flow steering and RSS through the driver's API
//! (`hca_driver::flow`): frames arriving on the wire (a UDP socket wire
//! into an emulated ConnectX-4, the frames written here) are matched by
//! flow rules of each selector kind into the right RQs, by priority,
//! through a miss table to a catch-all, dropped and counted when nothing
//! matches (after the catch-all rule is dropped), and spread over RQs by
//! an indirect TIR's Toeplitz hash (the expected RQ computed here from
//! `firmware_cmds::rss`). The RQs are the driver's raw RQ objects
//! (`RawHca::create_rq`, `modify_state`) on memory of this test, observed
//! through their buffers.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use firmware_cmds::eth::{WQ_STATE_ERR, WQ_STATE_RDY, WQ_STATE_RST, Wq};
use hca_driver::flow::{
    FlowDest, RX_HASH_SRC_IPV4, RX_HASH_SRC_IPV6, RX_HASH_SRC_PORT_TCP, RX_HASH_SRC_PORT_UDP,
    RxHashConf,
};
use hca_driver::steering::FlowMatch;
use hca_driver::verbs::{Context, Cq, DmaBuf, Pd};
use hca_driver::{Config, Error, Hca, PageList, QueueId, Rqn};
use hca_emu::frame::{L3, L4};
use hca_emu::{Clock, EmuConfig, EmuHca, EmuPlatform, ObjKind, WireSpec};
use hca_tests::Bench;
use hca_tests::steer::{
    MCAST, OTHER_SMAC, RQ_SLOTS, RSS_KEY, RawRq, V4A, V4B, V6A, V6B, create_sq_in, cyclic_wq,
    landed, marked_frame, matches_of, one_entry_groups, selector_specs, udp4_rss, udp4_rss_hash,
};

/// A CQ on a context of `hca` and `n` raw RQs completing on it, in RDY
/// with their buffers posted, each RQ's state transitions checked on the
/// way: ERR does not go straight to RDY (refused before any command), and
/// the firmware checks the current state it is told.
fn raw_rqs(
    hca: &Arc<Hca<EmuPlatform>>,
    n: usize,
) -> (Cq<EmuPlatform>, Vec<RawRq<'_, EmuPlatform>>) {
    let ctx = Arc::new(Context::open(hca).unwrap());
    let pd = Arc::new(Pd::alloc(&ctx).unwrap());
    let cq = Cq::create(&ctx, 256).unwrap();
    // SAFETY: the RQs' rings and doorbell records are DMA regions of this
    // HCA's platform, kept (in each RawRq) until after DESTROY_RQ.
    let raw = unsafe { hca.raw() };
    let rqs = (0..n)
        .map(|_| {
            let rq = RawRq::create(&raw, &pd, &cq).unwrap();
            assert!(matches!(
                rq.rq().modify_state(WQ_STATE_ERR, WQ_STATE_RDY),
                Err(Error::InvalidArgument { arg: "state", .. })
            ));
            assert!(matches!(
                rq.rq().modify_state(WQ_STATE_RDY, WQ_STATE_RDY),
                Err(Error::Command(_))
            ));
            rq.ready().unwrap();
            rq
        })
        .collect();
    (cq, rqs)
}

/// DESTROY_RQ, then the RQ is no longer registered for events.
fn destroy(rq: RawRq<'_, EmuPlatform>, hca: &Hca<EmuPlatform>) {
    let rqn = rq.number();
    rq.destroy().unwrap();
    assert!(!hca.events().unregister_queue(QueueId::Rq(rqn.0)));
}

/// A frame with a marker byte `tag` in its 16-byte payload
/// ([`marked_frame`]).
fn frame(dmac: [u8; 6], smac: [u8; 6], vid: Option<u16>, l3: L3, l4: L4, tag: u8) -> Vec<u8> {
    marked_frame(dmac, smac, vid, l3, l4, b"sixteen byte pay", tag)
}

const ME: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];

/// The test's end of the wire: a UDP socket cabled to the device's
/// port 1.
struct Tx<'e> {
    sock: UdpSocket,
    port_addr: SocketAddr,
    emu: &'e EmuHca,
}

impl Tx<'_> {
    /// Puts `f` on the wire and waits until the device has taken it in
    /// (`frames_rx` went up).
    fn send(&self, f: &[u8]) {
        let before = self.emu.datapath().frames_rx;
        self.sock.send_to(f, self.port_addr).unwrap();
        let t0 = Instant::now();
        while self.emu.datapath().frames_rx == before {
            assert!(t0.elapsed() < Duration::from_secs(10), "frame not received");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The frame is handled under the device lock that `datapath()`
        // takes.
        let _ = self.emu.datapath();
    }
}

/// Runs `test` on an opened emulated HCA on real time whose port 1 is
/// cabled to a UDP socket ([`Tx`]) the test writes frames into.
fn on_wire(test: impl FnOnce(&Arc<Hca<EmuPlatform>>, &EmuHca, &Tx<'_>)) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port_addr = probe.local_addr().unwrap();
    drop(probe);
    let spec: WireSpec = format!("udp:{port_addr},{}", sock.local_addr().unwrap())
        .parse()
        .unwrap();
    let mut bench = Bench::<EmuPlatform>::emulated(
        EmuConfig {
            clock: Clock::Real,
            ..EmuConfig::default()
        },
        Config::default(),
    );
    bench.emu().unwrap().cable_to(1, &spec).unwrap();
    bench.with_open(|hca, emu| {
        let tx = Tx {
            sock,
            port_addr,
            emu,
        };
        test(hca, emu, &tx);
    });
}

#[test]
fn flow_rules_of_each_selector_kind_priorities_miss_catch_all_and_removal() {
    on_wire(|hca, emu, tx| {
        let (_cq, mut rqs) = raw_rqs(hca, 9);
        let td = hca.alloc_transport_domain().unwrap();
        let tirs: Vec<_> = rqs
            .iter()
            .map(|r| hca.create_tir_direct(&td, r.number()).unwrap())
            .collect();
        // Level 1: the catch-all, reached by level 0's misses.
        let t1 = hca.create_flow_table(1, 2, None).unwrap();
        let all = FlowMatch::default();
        let g_all = t1.create_group(0, 0, &all).unwrap();
        let catch_all = g_all
            .add_rule(0, &all, FlowDest::Tirs(&[&tirs[8]]))
            .unwrap();
        let t0 = hca.create_flow_table(0, 4, Some(&t1)).unwrap();
        // One selector kind per group and rule, in priority order.
        let matches = matches_of(&selector_specs());
        let groups = one_entry_groups(&t0, &matches);
        let tir_refs: Vec<[&_; 1]> = tirs.iter().map(|t| [t]).collect();
        let rules: Vec<_> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                g.add_rule(i as u32, &matches[i], FlowDest::Tirs(&tir_refs[i]))
                    .unwrap()
            })
            .collect();
        t0.set_root().unwrap();

        // Typed refusals, before any command is sent.
        let refused = |e: Error, arg: &str| {
            assert!(
                matches!(e, Error::InvalidArgument { arg: a, .. } if a == arg),
                "{e}"
            );
        };
        refused(
            groups[0]
                .add_rule(1, &matches[0], FlowDest::Drop)
                .unwrap_err(),
            "index",
        );
        refused(
            groups[0]
                .add_rule(0, &matches[0], FlowDest::Drop)
                .unwrap_err(),
            "index",
        );
        refused(
            groups[0]
                .add_rule(0, &matches[1], FlowDest::Drop)
                .unwrap_err(),
            "match",
        );
        refused(t0.create_group(15, 16, &all).unwrap_err(), "start..=end");
        refused(hca.create_flow_table(1, 2, Some(&t1)).unwrap_err(), "miss");
        refused(hca.create_flow_table(0, 13, None).unwrap_err(), "log_size");
        // An overlapping group: the firmware's refusal, typed.
        match t0.create_group(0, 0, &all).unwrap_err() {
            Error::Command(c) => {
                assert_eq!(c.opcode, firmware_cmds::Opcode::CREATE_FLOW_GROUP);
                assert_eq!(c.status, firmware_cmds::CmdStatus::BAD_PARAM);
            }
            e => panic!("{e}"),
        }

        let udp = |d| L4::Udp(1234, d);
        let cases: [(Vec<u8>, Option<usize>); 10] = [
            (
                frame(MCAST, PEER, None, L3::V4(V4B, V4B), udp(1), 0),
                Some(0),
            ),
            (
                frame(ME, OTHER_SMAC, None, L3::V4(V4B, V4B), udp(1), 1),
                Some(1),
            ),
            (
                frame(ME, PEER, None, L3::Other(0x88b5), L4::None, 2),
                Some(2),
            ),
            (
                frame(ME, PEER, Some(100), L3::V4(V4B, V4B), udp(1), 3),
                Some(3),
            ),
            (
                frame(ME, PEER, Some(101), L3::V4(V4B, V4B), udp(1), 4),
                Some(8),
            ),
            (frame(ME, PEER, None, L3::V4(V4B, V4A), udp(1), 5), Some(4)),
            (frame(ME, PEER, None, L3::V6(V6A, V6B), udp(1), 6), Some(5)),
            (
                frame(ME, PEER, None, L3::V6(V6B, V6A), L4::Tcp(5, 80), 7),
                Some(6),
            ),
            (
                frame(ME, PEER, None, L3::V4(V4B, V4B), udp(9000), 8),
                Some(7),
            ),
            // Matches rules 4 and 7: the lower flow index wins.
            (
                frame(ME, PEER, None, L3::V4(V4B, V4A), udp(9000), 9),
                Some(4),
            ),
        ];
        for (i, (f, want)) in cases.iter().enumerate() {
            tx.send(f);
            assert_eq!(landed(&mut rqs, f), *want, "case {i}");
        }
        let dp = emu.datapath();
        assert_eq!((dp.drops.steering_miss, dp.drops.steering_drop), (0, 0));

        // The catch-all rule dropped: a frame matching nothing is dropped
        // and counted, and reaches no RQ.
        drop(catch_all);
        let f = frame(ME, PEER, Some(102), L3::V4(V4B, V4B), udp(2), 10);
        tx.send(&f);
        assert_eq!(landed(&mut rqs, &f), None);
        assert_eq!(emu.datapath().drops.steering_miss, 1);
        // A drop rule in its place: dropped and counted as such.
        let drop_rule = g_all.add_rule(0, &all, FlowDest::Drop).unwrap();
        tx.send(&f);
        assert_eq!(landed(&mut rqs, &f), None);
        assert_eq!(emu.datapath().drops.steering_drop, 1);
        // The UDP rule removed with `destroy`: its frame now misses level
        // 0 and is dropped by level 1.
        let mut rules = rules;
        rules.pop().unwrap().destroy().unwrap();
        tx.send(&cases[8].0);
        assert_eq!(landed(&mut rqs, &cases[8].0), None);
        assert_eq!(emu.datapath().drops.steering_drop, 2);
        // A table forwarding rule: level 0 entry 7 sends to table 1, whose
        // drop rule is replaced by the catch-all again.
        drop(drop_rule);
        let back = g_all
            .add_rule(0, &all, FlowDest::Tirs(&[&tirs[8]]))
            .unwrap();
        let to_t1 = groups[7]
            .add_rule(7, &matches[7], FlowDest::Table(&t1))
            .unwrap();
        tx.send(&cases[8].0);
        assert_eq!(landed(&mut rqs, &cases[8].0), Some(8));
        assert!(emu.objects(ObjKind::FlowEntry).len() == 9);

        // Teardown in the order the borrows allow; nothing is left.
        drop(to_t1);
        drop(back);
        drop(rules);
        assert!(emu.objects(ObjKind::FlowEntry).is_empty());
        drop(groups);
        drop(g_all);
        assert!(emu.objects(ObjKind::FlowGroup).is_empty());
        t0.destroy().unwrap();
        drop(t1);
        assert!(emu.objects(ObjKind::FlowTable).is_empty());
        drop(tirs);
        assert!(emu.objects(ObjKind::Tir).is_empty());
        drop(td);
        for rq in rqs {
            destroy(rq, hca);
        }
    });
}

#[test]
fn rss_spreads_frames_over_rqs_by_the_toeplitz_hash() {
    on_wire(|hca, _, tx| {
        let (_cq, mut rqs) = raw_rqs(hca, 4);
        let td = hca.alloc_transport_domain().unwrap();
        let numbers: Vec<Rqn> = rqs.iter().map(RawRq::number).collect();
        let rqt = hca.create_rqt(&numbers).unwrap();
        // ibv_rx_hash_conf refusals.
        for (mask, why) in [
            (RX_HASH_SRC_IPV4 | RX_HASH_SRC_IPV6, "IPv4 and IPv6"),
            (RX_HASH_SRC_PORT_TCP | RX_HASH_SRC_PORT_UDP, "TCP and UDP"),
            (0, "no hashed field"),
            (1 << 20, "unknown"),
        ] {
            let e = rqt
                .create_tir(
                    &td,
                    &RxHashConf {
                        key: RSS_KEY,
                        fields_mask: mask,
                    },
                )
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        arg: "rx_hash_fields_mask",
                        ..
                    }
                ),
                "{why}: {e}"
            );
        }
        assert!(matches!(
            hca.create_rqt(&[]).unwrap_err(),
            Error::InvalidArgument { arg: "rqs", .. }
        ));
        let conf = udp4_rss();
        let tir = rqt.create_tir(&td, &conf).unwrap();
        let t = hca.create_flow_table(0, 0, None).unwrap();
        let all = FlowMatch::default();
        let g = t.create_group(0, 0, &all).unwrap();
        let rule = g.add_rule(0, &all, FlowDest::Tirs(&[&tir])).unwrap();
        t.set_root().unwrap();
        let mut per_rq = [0usize; 4];
        for sport in 0..24u16 {
            let sport = 1000 + 7 * sport;
            let f = frame(
                ME,
                PEER,
                None,
                L3::V4(V4A, V4B),
                L4::Udp(sport, 4000),
                sport as u8,
            );
            let want = (udp4_rss_hash(V4A, V4B, sport, 4000) % 4) as usize;
            if rqs[want].seen == RQ_SLOTS {
                continue;
            }
            tx.send(&f);
            assert_eq!(landed(&mut rqs, &f), Some(want), "sport {sport}");
            per_rq[want] += 1;
        }
        assert!(
            per_rq.iter().filter(|&&n| n > 0).count() >= 2,
            "the hash spread the flows: {per_rq:?}"
        );
        drop(rule);
        drop(g);
        drop(t);
        drop(tir);
        rqt.destroy().unwrap();
        drop(td);
        for rq in rqs {
            destroy(rq, hca);
        }
    });
}

#[test]
fn sq_and_tis_objects_follow_the_work_queue_state_machine() {
    let mut b = Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default());
    b.with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Cq::create(&ctx, 16).unwrap();
        let td = hca.alloc_transport_domain().unwrap();
        let tis = hca.create_tis(td.number()).unwrap();
        assert_eq!(emu.objects(ObjKind::Tis), vec![tis.number().0]);
        let ring = DmaBuf::alloc(hca, 4096).unwrap();
        let dbr = DmaBuf::alloc(hca, 64).unwrap();
        let wq = cyclic_wq(pd.number(), dbr.iova(), 6, 6)
            .with(Wq::uar_page, ctx.uar().number().0)
            .unwrap();
        let create = create_sq_in(cq.number(), tis.number().0, wq);
        // SAFETY: the ring and doorbell record are DMA regions of this
        // HCA's platform, freed after DESTROY_SQ below.
        let raw = unsafe { hca.raw() };
        let pages = [ring.iova()];
        let sq = raw.create_sq(&PageList::list(&create, &pages)).unwrap();
        let n = sq.number().0;
        assert_eq!(emu.wq(ObjKind::Sq, n).unwrap().state, WQ_STATE_RST);
        assert!(matches!(
            sq.modify_state(2, WQ_STATE_RDY),
            Err(Error::InvalidArgument { arg: "state", .. })
        ));
        sq.modify_state(WQ_STATE_RST, WQ_STATE_RDY).unwrap();
        assert_eq!(emu.wq(ObjKind::Sq, n).unwrap().state, WQ_STATE_RDY);
        sq.modify_state(WQ_STATE_RDY, WQ_STATE_ERR).unwrap();
        assert_eq!(emu.wq(ObjKind::Sq, n).unwrap().state, WQ_STATE_ERR);
        sq.modify_state(WQ_STATE_ERR, WQ_STATE_RST).unwrap();
        sq.modify_state(WQ_STATE_RST, WQ_STATE_RDY).unwrap();
        // The SQ goes before the TIS it sends through; dropping it
        // destroys it and unregisters it for events.
        drop(sq);
        assert!(!hca.events().unregister_queue(QueueId::Sq(n)));
        assert!(emu.objects(ObjKind::Sq).is_empty());
        tis.destroy().unwrap();
        assert!(emu.objects(ObjKind::Tis).is_empty());
        drop((ring, dbr, td));
    });
}
