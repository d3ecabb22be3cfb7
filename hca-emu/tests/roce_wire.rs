//! RoCE as a ConnectX puts it on the wire: the ICRC (checked against a
//! test-side implementation written from RoCE Annex A17), corrupted frames
//! dropped and counted, messages segmented at the path MTU and reassembled,
//! ACK coalescing, go-back-N recovery of a lost packet, and the Ethernet/IP
//! fields set from the path. Frames are observed with
//! [`Faults::tap_frames`](hca_emu::Faults::tap_frames).

mod common;

use std::sync::{Arc, Mutex};

use common::dp::*;

/// Frames a port transmitted, as the tap saw them.
type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// Records every frame `port` of `n` transmits.
fn record(n: &Node, port: u8) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    n.r.emu.faults().tap_frames(port, move |f| {
        s.lock().unwrap().push(f.clone());
        true
    });
    seen
}

#[test]
fn corrupted_frames_are_dropped_and_counted() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut ca = a.cq(6);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    // A's QP is connected to a QPN B does not have: B's raw SQ plays the
    // requester.
    let p = a.path_to(&b, 1, 0xabcde, 1);
    a.connect(&mut qa, &p, &at);
    let (mut sq, _csq) = b.raw_sq();
    let dst = a.mr(4096, 0, LW);
    a.post_recv(&mut qa, &[(dst.addr, 4096, dst.key)]);
    let good = roce_v2(&b, &a, 0x04, qa.qpn, at.rq_psn, b"hello, world");
    // One bit of the payload flipped: the ICRC no longer matches.
    let mut bad = good.clone();
    bad[14 + 20 + 8 + 12] ^= 0x01;
    // A variant field changed (TTL, as a router does): still valid.
    let mut routed = good.clone();
    routed[14 + 8] -= 1;
    b.send_frame(&mut sq, &bad);
    b.r.emu.run_until_idle();
    a.r.emu.run_until_idle();
    assert_eq!(a.r.emu.datapath().drops.icrc, 1);
    assert!(a.poll(&mut ca).is_none(), "a corrupted SEND was taken");
    b.send_frame(&mut sq, &routed);
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!(c.byte_cnt, 12);
    assert_eq!(a.read(dst.addr, 12), b"hello, world");
    assert_eq!(a.r.emu.datapath().drops.icrc, 1);
    a.finish();
    b.finish();
}

#[test]
fn every_frame_carries_the_icrc_of_annex_a17() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
    let seen_a = record(&a, 1);
    let seen_b = record(&b, 1);
    let src = a.mr(8192, 0x5a, LW);
    let dst = b.mr(8192, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 8192, dst.key)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 3001, src.key)]);
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    let frames: Vec<Vec<u8>> = [seen_a, seen_b]
        .iter()
        .flat_map(|s| s.lock().unwrap().clone())
        .collect();
    assert!(frames.len() >= 2);
    for f in &frames {
        assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x0800);
        let ip_len = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let pkt = &f[14..14 + ip_len];
        let n = pkt.len();
        assert_eq!(
            icrc_v2_ipv4(&pkt[..n - 4]),
            pkt[n - 4..],
            "ICRC of {:02x?}",
            &pkt[..40]
        );
    }
    a.finish();
    b.finish();
}
