//! Packet pacing: the QoS capabilities of each personality,
//! SET_PP_RATE_LIMIT and its refusals, the SQ context's
//! `packet_pacing_rate_limit_index` at CREATE_SQ / MODIFY_SQ / QUERY_SQ,
//! and raw SQs sending at the rate of their entry (CQE timestamps), with
//! the pacing wait ended by MODIFY_SQ, a new rate, RST, ERR and destroy.
//!
//! Offsets are the PRM's (`qos_cap`, `set_pp_rate_limit_in`, `sqc`,
//! `modify_sq_in`), written here from the layout tables, not read from the
//! emulator.

mod common;

use std::time::Duration;

use common::dp::*;
use common::{Raw, inp, setf};
use hca_emu::{EmuConfig, ObjKind, Personality, RateLimit, syndrome as syn};

/// Command statuses.
const BAD_OP: u8 = 0x02;
const BAD_PARAM: u8 = 0x03;
const BAD_RES_STATE: u8 = 0x09;

/// Device clock ticks per microsecond (`device_frequency_mhz` 275).
const TICKS_PER_US: u64 = 275;

fn cx5() -> EmuConfig {
    EmuConfig::default().with_personality(Personality::ConnectX5)
}

/// A general capability bit (current when `cur`) at a bit offset.
fn cap_bit(r: &mut Raw, cur: bool, bit: usize) -> u8 {
    let o = r.ok(&inp(0x100, u16::from(cur), 16), 0x1010);
    (o[0x10 + bit / 8] >> (7 - bit % 8)) & 1
}

/// `cmd_hca_cap.qos`: bit 0x21b.
const QOS_BIT: usize = 0x21b;

/// QUERY_HCA_CAP of the QoS capabilities (type 0xc): the 256-byte block.
fn qos_cap(r: &mut Raw, cur: bool) -> Vec<u8> {
    let o = r.ok(&inp(0x100, (0xc << 1) | u16::from(cur), 16), 16 + 0x100);
    o[0x10..0x110].to_vec()
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
}

/// SET_PP_RATE_LIMIT input: `rate_limit_index` 0x08[15:0], `rate_limit`
/// 0x10, `burst_upper_bound` 0x14, `typical_packet_size` 0x18[15:0].
fn set_pp(index: u16, rate: u32, burst: u32, typical: u16) -> Vec<u8> {
    let mut m = inp(0x780, 0, 0x40);
    setf(&mut m, 0x08, 15, 0, u64::from(index));
    setf(&mut m, 0x10, 31, 0, u64::from(rate));
    setf(&mut m, 0x14, 31, 0, u64::from(burst));
    setf(&mut m, 0x18, 15, 0, u64::from(typical));
    m
}

#[test]
fn qos_capabilities_of_each_personality() {
    // The recorded ConnectX-4: qos 0, no QoS block (bad parameter, as for
    // any type it does not answer), no SET_PP_RATE_LIMIT.
    let mut r = Raw::new(EmuConfig::default());
    r.init();
    assert_eq!(cap_bit(&mut r, true, QOS_BIT), 0);
    assert_eq!(cap_bit(&mut r, false, QOS_BIT), 0);
    for cur in [false, true] {
        let s = r.fails(&inp(0x100, (0xc << 1) | u16::from(cur), 16), 0x1010, 3);
        assert_eq!(s, syn::CAP_TYPE);
    }
    assert_eq!(
        r.fails(&set_pp(1, 10_000, 0, 0), 16, BAD_OP),
        syn::BAD_OPCODE
    );
    r.teardown();
    r.free_all();
    r.emu.assert_clean();

    for p in [Personality::ConnectX5, Personality::ConnectX6Dx] {
        let mut r = Raw::new(EmuConfig::default().with_personality(p));
        r.init();
        assert_eq!(cap_bit(&mut r, true, QOS_BIT), 1, "{p:?}");
        assert_eq!(cap_bit(&mut r, false, QOS_BIT), 1, "{p:?}");
        for cur in [false, true] {
            let q = qos_cap(&mut r, cur);
            // packet_pacing 0x00[31], burst_bound [26], typical_size [25].
            assert_eq!(q[0] & 0x80, 0x80, "{p:?} packet_pacing");
            assert_eq!(q[0] & 0x04, 0x04, "{p:?} packet_pacing_burst_bound");
            assert_eq!(q[0] & 0x02, 0x02, "{p:?} packet_pacing_typical_size");
            assert_eq!(be32(&q, 0x08), 100_000_000, "max rate");
            assert_eq!(be32(&q, 0x0c), 0, "min rate");
            assert_eq!(be32(&q, 0x10) & 0xffff, 128, "table size");
            // wqe_rate_pp (0x04[31]): rates are bits per second.
            assert_eq!(q[4] & 0x80, 0);
        }
        r.teardown();
        r.free_all();
        r.emu.assert_clean();
    }

    // A ConnectX-5 configured without pacing: the block says no pacing,
    // and the command is unknown to it.
    let mut r = Raw::new(EmuConfig {
        packet_pacing_cap: false,
        ..cx5()
    });
    r.init();
    assert_eq!(cap_bit(&mut r, true, QOS_BIT), 1);
    assert_eq!(qos_cap(&mut r, true)[0] & 0x80, 0);
    assert_eq!(
        r.fails(&set_pp(1, 10_000, 0, 0), 16, BAD_OP),
        syn::BAD_OPCODE
    );
    r.teardown();
    r.free_all();
    r.emu.assert_clean();
}

#[test]
fn set_pp_rate_limit_sets_refuses_and_clears() {
    let mut n = Node::new(1, cx5());
    n.r.ok(&set_pp(1, 10_000, 3000, 1000), 16);
    n.r.ok(&set_pp(127, 100_000_000, 0, 0), 16);
    assert_eq!(
        n.r.emu.rate_limits(),
        vec![
            (
                1,
                RateLimit {
                    rate_limit: 10_000,
                    burst_upper_bound: 3000,
                    typical_packet_size: 1000
                }
            ),
            (
                127,
                RateLimit {
                    rate_limit: 100_000_000,
                    burst_upper_bound: 0,
                    typical_packet_size: 0
                }
            )
        ]
    );
    // Index 0 ("not paced") and indices past the table.
    for i in [0u16, 128, 0xffff] {
        assert_eq!(
            n.r.fails(&set_pp(i, 10_000, 0, 0), 16, BAD_PARAM),
            syn::PP_INDEX,
            "index {i}"
        );
    }
    // A rate above packet_pacing_max_rate.
    assert_eq!(
        n.r.fails(&set_pp(2, 100_000_001, 0, 0), 16, BAD_PARAM),
        syn::PP_RATE
    );
    // A reserved field.
    let mut bad = set_pp(2, 10_000, 0, 0);
    bad[0x20] = 1;
    assert_eq!(n.r.fails(&bad, 16, BAD_PARAM), syn::RESERVED_NOT_ZERO);
    // Failed commands changed nothing; a new rate replaces an entry.
    assert_eq!(n.r.emu.rate_limits().len(), 2);
    n.r.ok(&set_pp(127, 5_000, 0, 0), 16);
    assert_eq!(n.r.emu.rate_limits()[1].1.rate_limit, 5_000);
    // Rate 0 clears (an unset entry too).
    n.r.ok(&set_pp(127, 0, 0, 0), 16);
    n.r.ok(&set_pp(50, 0, 0, 0), 16);
    assert_eq!(n.r.emu.rate_limits().len(), 1);

    // Clearing the entry a ready SQ is paced by is refused; once the SQ
    // is out of RDY (as Linux moves it before removing the rate) it is
    // not.
    let (mut sq, mut cq) = paced_sq(&mut n, 1, false);
    assert_eq!(
        n.r.fails(&set_pp(1, 0, 0, 0), 16, BAD_RES_STATE),
        syn::PP_IN_USE
    );
    send_frames(&mut n, &mut sq, 1, 100);
    n.wait(&mut cq, 1)[0].ok();
    modify_sq(&mut n, sq.qpn, 1, 0, None);
    n.r.ok(&set_pp(1, 0, 0, 0), 16);
    assert!(n.r.emu.rate_limits().is_empty());
    // The SQ keeps its (now stale) index.
    let w = n.r.emu.wq(ObjKind::Sq, sq.qpn).unwrap();
    assert_eq!(w.packet_pacing_rate_limit_index(), 1);
    n.finish();
}

/// CREATE_SQ input (as `Node::raw_wq`) with `sqc.packet_pacing_rate_limit_index`
/// (0x1c[15:0] of the context at 0x20) and, with `flush`,
/// `flush_in_error_en` (0x00[28]). Returns the input, the buffer and the
/// doorbell record.
fn create_sq_input(
    n: &mut Node,
    cqn: u32,
    tisn: u32,
    index: u16,
    flush: bool,
) -> (Vec<u8>, u64, u64) {
    let (mut m, buf, dbr) = n.raw_wq_input(true, cqn, tisn, 6, 6, 0);
    if flush {
        setf(&mut m, 0x20, 28, 28, 1);
    }
    setf(&mut m, 0x20 + 0x1c, 15, 0, u64::from(index));
    (m, buf, dbr)
}

/// MODIFY_SQ from `cur` to `new`; with `index`, `modify_bitmask` bit 0
/// and that `packet_pacing_rate_limit_index`.
fn modify_sq_input(sqn: u32, cur: u8, new: u8, index: Option<u16>) -> Vec<u8> {
    let mut m = inp(0x905, 0, 0x110);
    setf(&mut m, 0x08, 31, 28, u64::from(cur));
    setf(&mut m, 0x08, 23, 0, u64::from(sqn));
    setf(&mut m, 0x20, 23, 20, u64::from(new));
    if let Some(i) = index {
        setf(&mut m, 0x14, 0, 0, 1);
        setf(&mut m, 0x20 + 0x1c, 15, 0, u64::from(i));
    }
    m
}

fn modify_sq(n: &mut Node, sqn: u32, cur: u8, new: u8, index: Option<u16>) {
    n.r.ok(&modify_sq_input(sqn, cur, new, index), 16);
}

/// QUERY_SQ: the context's `packet_pacing_rate_limit_index`.
fn query_sq_index(n: &mut Node, sqn: u32) -> u16 {
    let mut m = inp(0x907, 0, 0x10);
    setf(&mut m, 0x08, 23, 0, u64::from(sqn));
    let o = n.r.ok(&m, 0x110);
    u16::from_be_bytes([o[0x20 + 0x1e], o[0x20 + 0x1f]])
}

/// A ready raw SQ on its own CQ, paced by entry `index` (0: not paced).
fn paced_sq(n: &mut Node, index: u16, flush: bool) -> (Qp, Cq) {
    let td = n.transport_domain();
    let tisn = n.tis(td);
    let cq = n.cq(8);
    let (m, buf, dbr) = create_sq_input(n, cq.cqn, tisn, index, flush);
    let sqn = n.r.create(&m);
    n.keep(0x906, sqn);
    modify_sq(n, sqn, 0, 1, None);
    let sq = raw_wq_qp(sqn, buf, dbr, 6, 6);
    (sq, cq)
}

/// Posts `count` frames of `len` bytes (14 bytes of Ethernet header
/// inline, the rest gathered) with one doorbell.
fn send_frames(n: &mut Node, sq: &mut Qp, count: usize, len: usize) {
    let src = n.mr(4096, 0x5a, 0);
    post_frames(n, sq, &src, count, len);
}

/// [`send_frames`] from the payload memory `src` (no command: the device
/// clock does not move).
fn post_frames(n: &mut Node, sq: &mut Qp, src: &Mr, count: usize, len: usize) {
    let mut hdr = vec![0u8; 14];
    hdr[0..6].copy_from_slice(&[0x02, 0, 0, 0, 9, 9]);
    hdr[6..12].copy_from_slice(&n.mac(1));
    hdr[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    let w = Wr {
        eth: Some((0, hdr)),
        ..Wr::new(op::SEND).sge(src.addr, (len - 14) as u32, src.key)
    };
    let wrs = vec![w; count];
    n.post_send(sq, &wrs);
}

/// The CQE timestamp (0x30, be64), device clock ticks.
fn ts(c: &Cqe) -> u64 {
    u64::from_be_bytes(c.raw[0x30..0x38].try_into().unwrap())
}

/// Checks the pacing bound on every run of consecutive frames (all of
/// `len` bytes): bits sent ≤ rate × elapsed + burst. The elapsed time is
/// taken one tick short (timestamps are truncated to ticks).
fn assert_within_rate(t: &[u64], len: u64, kbps: u64, burst_bytes: u64) {
    for i in 0..t.len() {
        for j in i..t.len() {
            let bits = (j - i + 1) as u64 * len * 8;
            // kbit/s × µs / 1000 = bits.
            let elapsed_ns = (t[j] - t[i] + 1) * 1000 / TICKS_PER_US;
            let allowed = kbps * elapsed_ns / 1_000_000 + burst_bytes.max(len) * 8;
            assert!(
                bits <= allowed,
                "frames {i}..={j}: {bits} bits in {elapsed_ns} ns at {kbps} kbit/s (burst {burst_bytes} B): {t:?}"
            );
        }
    }
}

#[test]
fn sq_rate_limit_index_at_create_modify_and_query() {
    let mut n = Node::new(1, cx5());
    let td = n.transport_domain();
    let tisn = n.tis(td);
    let cq = n.cq(6);
    // An index naming no set entry.
    let (m, _, _) = create_sq_input(&mut n, cq.cqn, tisn, 5, false);
    assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::WQ_PP_INDEX);
    n.r.ok(&set_pp(5, 20_000, 0, 0), 16);
    n.r.ok(&set_pp(6, 40_000, 0, 0), 16);
    let sqn = n.r.create(&m);
    n.keep(0x906, sqn);
    let idx = |n: &Node| {
        n.r.emu
            .wq(ObjKind::Sq, sqn)
            .unwrap()
            .packet_pacing_rate_limit_index()
    };
    assert_eq!(idx(&n), 5);
    assert_eq!(query_sq_index(&mut n, sqn), 5);
    // Without the bitmask bit the context's index is ignored.
    let mut m = modify_sq_input(sqn, 0, 1, None);
    setf(&mut m, 0x20 + 0x1c, 15, 0, 9);
    n.r.ok(&m, 16);
    assert_eq!(idx(&n), 5);
    // With it: an unset entry is refused and changes nothing...
    assert_eq!(
        n.r.fails(&modify_sq_input(sqn, 1, 1, Some(9)), 16, BAD_PARAM),
        syn::WQ_PP_INDEX
    );
    assert_eq!(idx(&n), 5);
    // ...a set one, or 0 (not paced), is taken.
    modify_sq(&mut n, sqn, 1, 1, Some(6));
    assert_eq!(query_sq_index(&mut n, sqn), 6);
    modify_sq(&mut n, sqn, 1, 1, Some(0));
    assert_eq!(query_sq_index(&mut n, sqn), 0);
    n.finish();

    // A device without packet pacing refuses any non-zero index.
    for cfg in [
        EmuConfig::default(),
        EmuConfig {
            packet_pacing_cap: false,
            ..cx5()
        },
    ] {
        let mut n = Node::new(1, cfg);
        let td = n.transport_domain();
        let tisn = n.tis(td);
        let cq = n.cq(6);
        let (m, _, _) = create_sq_input(&mut n, cq.cqn, tisn, 1, false);
        assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::WQ_PP_UNSUPPORTED);
        let (m, _, _) = create_sq_input(&mut n, cq.cqn, tisn, 0, false);
        let sqn = n.r.create(&m);
        n.keep(0x906, sqn);
        assert_eq!(
            n.r.fails(&modify_sq_input(sqn, 0, 1, Some(1)), 16, BAD_PARAM),
            syn::WQ_PP_UNSUPPORTED
        );
        modify_sq(&mut n, sqn, 0, 1, Some(0));
        n.finish();
    }
}

#[test]
fn a_paced_sq_spaces_its_frames() {
    let mut n = Node::new(1, cx5());
    // 10 Mb/s, burst one frame: 1000-byte frames at least 800 µs apart.
    n.r.ok(&set_pp(1, 10_000, 0, 0), 16);
    let (mut sq, mut cq) = paced_sq(&mut n, 1, false);
    send_frames(&mut n, &mut sq, 4, 1000);
    let mut c = n.wait(&mut cq, 1);
    // A doorbell while the SQ waits: the frames join the queue.
    send_frames(&mut n, &mut sq, 4, 1000);
    c.extend(n.wait(&mut cq, 7));
    let t: Vec<u64> = c.iter().map(|c| ts(c.ok())).collect();
    for (i, w) in t.windows(2).enumerate() {
        assert!(
            w[1] - w[0] >= 800 * TICKS_PER_US,
            "gap {i}: {} ticks < 800 µs: {t:?}",
            w[1] - w[0]
        );
    }
    assert_within_rate(&t, 1000, 10_000, 0);
    // Device time (virtual: not the machine's load): at most a generous
    // multiple of the 5.6 ms the rate needs.
    assert!(t[7] - t[0] < 100_000 * TICKS_PER_US, "{t:?}");
    let dp = n.r.emu.datapath();
    assert_eq!(dp.pace_waits, 7, "one wait a frame after the first: {dp:?}");
    assert_eq!(dp.frames_tx, 8);
    let counters: Vec<u16> = c.iter().map(|c| c.wqe_counter).collect();
    assert_eq!(counters, (0..8).collect::<Vec<u16>>(), "in order");

    // With a burst of 3000 bytes the first three frames leave at once,
    // then the rate holds.
    n.r.ok(&set_pp(2, 10_000, 3000, 0), 16);
    let (mut sq2, mut cq2) = paced_sq(&mut n, 2, false);
    send_frames(&mut n, &mut sq2, 6, 1000);
    let t: Vec<u64> = n.wait(&mut cq2, 6).iter().map(|c| ts(c.ok())).collect();
    assert_eq!((t[0], t[1]), (t[2], t[2]), "the burst: {t:?}");
    assert!(t[3] - t[2] >= 800 * TICKS_PER_US, "{t:?}");
    assert_within_rate(&t, 1000, 10_000, 3000);
    n.finish();
}

#[test]
fn an_unpaced_sq_is_not_delayed() {
    let mut n = Node::new(1, cx5());
    n.r.ok(&set_pp(1, 10_000, 0, 0), 16);
    let (mut sq, mut cq) = paced_sq(&mut n, 0, false);
    send_frames(&mut n, &mut sq, 8, 1000);
    let t: Vec<u64> = n.wait(&mut cq, 8).iter().map(|c| ts(c.ok())).collect();
    assert!(t.iter().all(|&x| x == t[0]), "one doorbell, one go: {t:?}");
    assert_eq!(n.r.emu.datapath().pace_waits, 0);
    n.finish();
}

#[test]
fn a_new_rate_ends_the_wait() {
    let mut n = Node::new(1, cx5());
    // 1 Mb/s: a 1000-byte frame every 8 ms.
    n.r.ok(&set_pp(1, 1_000, 0, 0), 16);
    n.r.ok(&set_pp(2, 100_000, 0, 0), 16);
    let (mut sq, mut cq) = paced_sq(&mut n, 1, false);
    send_frames(&mut n, &mut sq, 3, 1000);
    let first = ts(n.wait(&mut cq, 1)[0].ok());
    // MODIFY_SQ to entry 2 (80 µs a frame): the rest leave at that rate,
    // long before the old wait would have ended (device time).
    modify_sq(&mut n, sq.qpn, 1, 1, Some(2));
    let t: Vec<u64> = n.wait(&mut cq, 2).iter().map(|c| ts(c.ok())).collect();
    assert!(t[1] - t[0] >= 80 * TICKS_PER_US, "{t:?}");
    assert!(t[1] - first < 8000 * TICKS_PER_US, "{first} {t:?}");
    // SET_PP_RATE_LIMIT of the entry a waiting SQ uses: the same.
    modify_sq(&mut n, sq.qpn, 1, 1, Some(1));
    send_frames(&mut n, &mut sq, 3, 1000);
    let first = ts(n.wait(&mut cq, 1)[0].ok());
    n.r.ok(&set_pp(1, 100_000, 0, 0), 16);
    let t: Vec<u64> = n.wait(&mut cq, 2).iter().map(|c| ts(c.ok())).collect();
    assert!(t[0] - first >= 80 * TICKS_PER_US, "{first} {t:?}");
    assert!(t[1] - first < 8000 * TICKS_PER_US, "{first} {t:?}");
    // The stale timers fire into nothing.
    n.quiet(&mut cq, Duration::from_millis(50));
    assert_eq!(n.r.emu.datapath().frames_tx, 6);
    assert!(n.r.emu.internal_errors().is_empty());
    n.finish();
}

#[test]
fn reset_error_and_destroy_end_the_wait() {
    let mut n = Node::new(1, cx5());
    n.r.ok(&set_pp(1, 1_000, 0, 0), 16);
    // RST: the waiting frames are never sent.
    let (mut sq, mut cq) = paced_sq(&mut n, 1, false);
    send_frames(&mut n, &mut sq, 4, 1000);
    n.wait(&mut cq, 1)[0].ok();
    modify_sq(&mut n, sq.qpn, 1, 0, None);
    n.quiet(&mut cq, Duration::from_millis(100));
    assert_eq!(n.r.emu.datapath().frames_tx, 1);
    // ERR with flush_in_error_en: the waiting WQEs are flushed, nothing
    // is sent after.
    let (mut sq2, mut cq2) = paced_sq(&mut n, 1, true);
    send_frames(&mut n, &mut sq2, 4, 1000);
    n.wait(&mut cq2, 1)[0].ok();
    modify_sq(&mut n, sq2.qpn, 1, 3, None);
    let flushed = n.wait(&mut cq2, 3);
    for (i, c) in flushed.iter().enumerate() {
        c.err(hca_emu::cqe_syndrome::WR_FLUSH);
        assert_eq!(c.wqe_counter, i as u16 + 1);
    }
    n.quiet(&mut cq2, Duration::from_millis(100));
    assert_eq!(n.r.emu.datapath().frames_tx, 2);
    // The entry is no longer in use by a ready SQ: it may be cleared.
    n.r.ok(&set_pp(1, 0, 0, 0), 16);
    // Destroyed while waiting.
    n.r.ok(&set_pp(1, 1_000, 0, 0), 16);
    let (mut sq3, mut cq3) = paced_sq(&mut n, 1, false);
    send_frames(&mut n, &mut sq3, 4, 1000);
    n.wait(&mut cq3, 1)[0].ok();
    let mut d = inp(0x906, 0, 16);
    setf(&mut d, 8, 23, 0, u64::from(sq3.qpn));
    n.r.ok(&d, 16);
    n.quiet(&mut cq3, Duration::from_millis(100));
    assert_eq!(n.r.emu.datapath().frames_tx, 3);
    assert!(n.r.emu.internal_errors().is_empty());
    // `finish` destroys what is left; the destroyed SQ must not be
    // destroyed twice: recreate the object list without it.
    n.forget(0x906, sq3.qpn);
    n.finish();
}

#[test]
fn sqs_sharing_an_entry_are_paced_each_on_its_own() {
    let mut n = Node::new(1, cx5());
    n.r.ok(&set_pp(1, 10_000, 0, 0), 16);
    let (mut a, mut ca) = paced_sq(&mut n, 1, false);
    let (mut b, mut cb) = paced_sq(&mut n, 1, false);
    let src = n.mr(4096, 0x5a, 0);
    post_frames(&mut n, &mut a, &src, 3, 1000);
    post_frames(&mut n, &mut b, &src, 3, 1000);
    let ta: Vec<u64> = n.wait(&mut ca, 3).iter().map(|c| ts(c.ok())).collect();
    let tb: Vec<u64> = n.wait(&mut cb, 3).iter().map(|c| ts(c.ok())).collect();
    // B's first frame does not wait for A's (one rate, two buckets).
    assert_eq!(ta[0], tb[0], "{ta:?} {tb:?}");
    for t in [&ta, &tb] {
        assert!(
            t.windows(2).all(|w| w[1] - w[0] >= 800 * TICKS_PER_US),
            "{t:?}"
        );
        assert_within_rate(t, 1000, 10_000, 0);
    }
    n.finish();
}

#[test]
fn wqes_behind_a_waiting_frame_wait_in_order() {
    let mut n = Node::new(1, cx5());
    n.r.ok(&set_pp(1, 10_000, 0, 0), 16);
    let (mut sq, mut cq) = paced_sq(&mut n, 1, false);
    let src = n.mr(4096, 0x5a, 0);
    let mut hdr = vec![0u8; 14];
    hdr[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    let send = Wr {
        eth: Some((0, hdr)),
        ..Wr::new(op::SEND).sge(src.addr, 986, src.key)
    };
    // SEND, SEND, NOP: the NOP sends nothing but completes after the
    // second frame, which waits for the rate.
    n.post_send(&mut sq, &[send.clone(), send, Wr::new(op::NOP)]);
    let c = n.wait(&mut cq, 3);
    let ops: Vec<(u8, u16)> = c
        .iter()
        .map(|c| (c.ok().wqe_opcode, c.wqe_counter))
        .collect();
    assert_eq!(ops[0].0, op::SEND);
    assert_eq!(ops[1].0, op::SEND);
    assert_eq!(ops[2].0, op::NOP);
    let t: Vec<u64> = c.iter().map(ts).collect();
    assert!(t[1] - t[0] >= 800 * TICKS_PER_US, "{t:?}");
    assert!(t[2] >= t[1], "{t:?}");
    assert_eq!(n.r.emu.datapath().frames_tx, 2);
    n.finish();
}
