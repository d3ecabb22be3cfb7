//! The transport engine through the raw interface: WQEs built by hand
//! (tests/common/dp.rs), executed between emulated HCAs on the virtual
//! wire, CQEs checked field by field, and every test ends with the
//! emulator clean (no IOMMU fault, no leak).

mod common;

use std::time::Duration;

use common::dp::*;
use hca_emu::{EmuConfig, connect};
use platform::Mmio;

#[test]
fn rc_send_receive_between_two_hcas() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut ca = a.cq(8);
    let mut cb = b.cq(8);
    let mut qa = a.qp(&QpSpec {
        user_index: 0x1234,
        ..QpSpec::new(0, &ca)
    });
    let mut qb = b.qp(&QpSpec {
        user_index: 0x777,
        ..QpSpec::new(0, &cb)
    });
    connect_pair(&mut a, &mut qa, &mut b, &mut qb, &at);
    let src = a.mr(4096, 0, LW);
    let dst = b.mr(4096, 0xee, LW);
    let msg: Vec<u8> = (0..1500u32).map(|i| i as u8).collect();
    a.write(src.addr, &msg);
    b.post_recv(&mut qb, &[(dst.addr, 4096, dst.key)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 1500, src.key)]);
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!(
        (c.opcode, c.wqe_opcode, c.qpn, c.wqe_counter),
        (0, op::SEND, qa.qpn, 0)
    );
    assert_eq!(c.srqn_uidx, 0x1234, "user index (cqe_version 1)");
    let r = &b.wait(&mut cb, 1)[0];
    r.ok();
    assert_eq!(
        (r.opcode, r.qpn, r.byte_cnt, r.wqe_counter),
        (2, qb.qpn, 1500, 0)
    );
    assert_eq!(r.srqn_uidx, 0x777);
    assert_eq!(r.flags_rqpn & 0xff_ffff, qa.qpn, "source QP");
    assert_eq!(r.flags_rqpn >> 28, 0, "no GRH in the buffer for RC");
    assert_eq!((r.flags_rqpn >> 24) & 3, 2, "RoCE v2 over IPv4");
    assert!(!r.se);
    assert_eq!(b.read(dst.addr, 1500), msg);
    assert_eq!(b.read(dst.addr + 1500, 4), vec![0xee; 4], "nothing beyond");
    // A second message, scattered over three SGEs, with immediate data and
    // the solicited bit.
    let d2 = b.mr(4096, 0, LW);
    b.post_recv(
        &mut qb,
        &[
            (d2.addr, 100, d2.key),
            (d2.addr + 1000, 100, d2.key),
            (d2.addr + 2000, 1000, d2.key),
        ],
    );
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND_IMM)
            .flags(SIGNALED | SOLICITED)
            .imm(0xdead_beef)
            .sge(src.addr, 300, src.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    assert_eq!(
        (r.opcode, r.byte_cnt, r.imm, r.wqe_counter),
        (3, 300, 0xdead_beef, 1)
    );
    assert!(r.se, "solicited");
    assert_eq!(b.read(d2.addr, 100), msg[..100]);
    assert_eq!(b.read(d2.addr + 1000, 100), msg[100..200]);
    assert_eq!(b.read(d2.addr + 2000, 100), msg[200..300]);
    let dp = a.r.emu.datapath();
    assert_eq!((dp.wqes, dp.retransmissions), (2, 0));
    a.finish();
    b.finish();
}

#[test]
fn rc_write_write_with_immediate_and_read() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let local = a.mr(8192, 0, LW);
    let remote = b.mr(8192, 0x11, LW | RW | RR);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    a.write(local.addr, &data);
    // RDMA WRITE of 5000 bytes (5 packets at MTU 1024) to offset 100.
    a.post_send(
        &mut qa,
        &[Wr::new(op::WRITE)
            .sge(local.addr, 5000, local.key)
            .remote(remote.addr + 100, remote.key)],
    );
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!((c.opcode, c.wqe_opcode), (0, op::WRITE));
    assert_eq!(b.read(remote.addr + 100, 5000), data);
    assert_eq!(b.read(remote.addr + 99, 1), vec![0x11]);
    b.quiet(&mut cb, Duration::from_millis(1));
    // WRITE_WITH_IMM consumes a receive WQE and completes with opcode 1.
    let unused = b.mr(64, 0, LW);
    b.post_recv(&mut qb, &[(unused.addr, 64, unused.key)]);
    a.post_send(
        &mut qa,
        &[Wr::new(op::WRITE_IMM)
            .imm(0x0102_0304)
            .sge(local.addr, 16, local.key)
            .remote(remote.addr, remote.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    assert_eq!((r.opcode, r.byte_cnt, r.imm), (1, 16, 0x0102_0304));
    assert_eq!(b.read(remote.addr, 16), data[..16]);
    assert_eq!(
        b.read(unused.addr, 4),
        vec![0; 4],
        "the receive buffer is not written"
    );
    // RDMA READ back 3000 bytes into two local SGEs.
    let back = a.mr(8192, 0, LW);
    a.post_send(
        &mut qa,
        &[Wr::new(op::READ)
            .sge(back.addr, 1000, back.key)
            .sge(back.addr + 4096, 2000, back.key)
            .remote(remote.addr + 100, remote.key)],
    );
    let c = &a.wait(&mut ca, 1)[0];
    c.ok();
    assert_eq!((c.opcode, c.wqe_opcode, c.byte_cnt), (0, op::READ, 3000));
    assert_eq!(a.read(back.addr, 1000), data[..1000]);
    assert_eq!(a.read(back.addr + 4096, 2000), data[1000..3000]);
    // Zero-length write: no rkey check, still acknowledged.
    a.post_send(&mut qa, &[Wr::new(op::WRITE).remote(0, 0)]);
    a.wait(&mut ca, 1)[0].ok();
    a.finish();
    b.finish();
}

#[test]
fn atomics_fetch_add_converges_and_compare_swap() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let target = b.mr(4096, 0, LW | RW | RR | AT);
    b.write(target.addr, &1000u64.to_be_bytes());
    // Two QPs of A adding concurrently to one counter on B.
    let (mut q1, mut c1, _q1b, _c1b) = connected(&mut a, &mut b, 0, &at);
    let (mut q2, mut c2, _q2b, _c2b) = connected(&mut a, &mut b, 0, &at);
    let results = a.mr(8 * 128, 0xff, LW);
    let mut wrs1 = Vec::new();
    let mut wrs2 = Vec::new();
    for i in 0..32u64 {
        let w = |slot: u64| Wr {
            atomic: Some((3, 0)),
            ..Wr::new(op::FA)
                .sge(results.addr + 8 * slot, 8, results.key)
                .remote(target.addr, target.key)
        };
        wrs1.push(w(i));
        wrs2.push(w(64 + i));
    }
    // Posted in batches that interleave on the wire.
    for k in 0..4 {
        a.post_send(&mut q1, &wrs1[k * 8..k * 8 + 8]);
        a.post_send(&mut q2, &wrs2[k * 8..k * 8 + 8]);
    }
    let r1 = a.wait(&mut c1, 32);
    let r2 = a.wait(&mut c2, 32);
    for c in r1.iter().chain(&r2) {
        c.ok();
        assert_eq!((c.wqe_opcode, c.byte_cnt), (op::FA, 8));
    }
    let fin = u64::from_be_bytes(b.read(target.addr, 8).try_into().unwrap());
    assert_eq!(fin, 1000 + 3 * 64, "every add applied once");
    let mut olds: Vec<u64> = (0..32)
        .flat_map(|i| [i, 64 + i])
        .map(|s| u64::from_be_bytes(a.read(results.addr + 8 * s, 8).try_into().unwrap()))
        .collect();
    olds.sort_unstable();
    let want: Vec<u64> = (0..64).map(|k| 1000 + 3 * k).collect();
    assert_eq!(olds, want, "each add saw a distinct original value");
    // Compare-and-swap: a mismatch leaves memory, a match swaps; both
    // return the original.
    let cas = |cmp: u64, swap: u64, slot: u64| Wr {
        atomic: Some((swap, cmp)),
        ..Wr::new(op::CS)
            .sge(results.addr + 8 * slot, 8, results.key)
            .remote(target.addr, target.key)
    };
    a.post_send(&mut q1, &[cas(5, 77, 100)]);
    a.wait(&mut c1, 1)[0].ok();
    assert_eq!(a.read(results.addr + 800, 8), fin.to_be_bytes());
    assert_eq!(b.read(target.addr, 8), fin.to_be_bytes(), "no swap");
    a.post_send(&mut q1, &[cas(fin, 77, 101)]);
    a.wait(&mut c1, 1)[0].ok();
    assert_eq!(a.read(results.addr + 808, 8), fin.to_be_bytes());
    assert_eq!(b.read(target.addr, 8), 77u64.to_be_bytes(), "swapped");
    a.finish();
    b.finish();
}

#[test]
fn ud_with_grh_and_qkey_mismatch() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut ca = a.cq(6);
    let mut cb = b.cq(6);
    let mut qa = a.qp(&QpSpec::new(2, &ca));
    let mut qb = b.qp(&QpSpec::new(2, &cb));
    a.ud_ready(&mut qa, 1, &at);
    b.ud_ready(&mut qb, 1, &at);
    let src = a.mr(4096, 0, LW);
    let dst = b.mr(4096, 0, LW);
    let msg: Vec<u8> = (0..256u32).map(|i| (255 - i) as u8).collect();
    a.write(src.addr, &msg);
    b.post_recv(&mut qb, &[(dst.addr, 1024, dst.key)]);
    b.post_recv(&mut qb, &[(dst.addr + 2048, 1024, dst.key)]);
    let av = |qkey| Av {
        qkey,
        dqpn: qb.qpn,
        rmac: b.mac(1),
        rgid: b.gid(1),
        sgid_index: 0,
        hop_limit: 64,
        tclass: 0x20,
        flow_label: 0x5a5a5,
        rlid: 0,
    };
    // Wrong Q_Key: sent (the requester completes) but dropped silently.
    let w = Wr {
        av: Some(av(0x2222_2222)),
        ..Wr::new(op::SEND).sge(src.addr, 256, src.key)
    };
    a.post_send(&mut qa, &[w]);
    a.wait(&mut ca, 1)[0].ok();
    b.quiet(&mut cb, Duration::from_millis(1));
    assert_eq!(b.r.emu.datapath().drops.qkey, 1);
    // Right Q_Key, with immediate data.
    let w = Wr {
        av: Some(av(at.qkey)),
        ..Wr::new(op::SEND_IMM)
            .imm(0x0a0b_0c0d)
            .sge(src.addr, 256, src.key)
    };
    a.post_send(&mut qa, &[w]);
    a.wait(&mut ca, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    r.ok();
    assert_eq!(
        (r.opcode, r.byte_cnt, r.imm, r.wqe_counter),
        (3, 296, 0x0a0b_0c0d, 0)
    );
    assert_eq!(r.flags_rqpn & 0xff_ffff, qa.qpn, "source QP");
    assert_eq!((r.flags_rqpn >> 28) & 3, 1, "GRH in the buffer");
    assert_eq!((r.flags_rqpn >> 24) & 3, 2, "RoCE v2 over IPv4");
    // The GRH area: 20 reserved bytes, then the IPv4 header.
    let grh = b.read(dst.addr, 40);
    assert_eq!(grh[..20], [0; 20]);
    assert_eq!(grh[20], 0x45);
    assert_eq!(grh[20 + 1], 0x20, "traffic class");
    assert_eq!(grh[20 + 8], 64, "TTL = hop limit");
    assert_eq!(grh[20 + 9], 17, "UDP");
    assert_eq!(grh[20 + 12..20 + 16], a.gid(1)[12..], "source address");
    assert_eq!(grh[20 + 16..20 + 20], b.gid(1)[12..], "destination address");
    assert_eq!(b.read(dst.addr + 40, 256), msg);
    // The Q_Key of the QP when the WQE's has its high bit set.
    let w = Wr {
        av: Some(av(0x8000_0000)),
        ..Wr::new(op::SEND).sge(src.addr, 10, src.key)
    };
    a.post_send(&mut qa, &[w]);
    a.wait(&mut ca, 1)[0].ok();
    let r = &b.wait(&mut cb, 1)[0];
    assert_eq!(
        (r.opcode, r.byte_cnt, r.imm & 0xffff),
        (2, 50, 0xffff),
        "P_Key"
    );
    // Larger than the port MTU (1024 at the default 1500-byte Ethernet
    // MTU): local length error, the QP's send queue enters SQE.
    let w = Wr {
        av: Some(av(at.qkey)),
        ..Wr::new(op::SEND).sge(src.addr, 2000, src.key)
    };
    a.post_send(&mut qa, &[w]);
    a.wait(&mut ca, 1)[0].err(hca_emu::cqe_syndrome::LOCAL_LENGTH);
    assert_eq!(a.r.emu.qp_state(qa.qpn), Some(hca_emu::QpState::Sqer));
    a.finish();
    b.finish();
}

#[test]
fn ud_over_roce_v2_ipv6_and_roce_v1() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    // Index 1: RoCE v2 over IPv6; index 2: RoCE v1 (same GIDs, both ends).
    let g6 = |n: &Node| {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = n.id;
        g
    };
    let (ga, gb) = (g6(&a), g6(&b));
    let (ma, mb) = (a.mac(1), b.mac(1));
    a.set_gid(1, 1, ga, ma, 2, 1);
    b.set_gid(1, 1, gb, mb, 2, 1);
    a.set_gid(1, 2, ga, ma, 0, 1);
    b.set_gid(1, 2, gb, mb, 0, 1);
    let mut ca = a.cq(6);
    let mut cb = b.cq(6);
    let mut qa = a.qp(&QpSpec::new(2, &ca));
    let mut qb = b.qp(&QpSpec::new(2, &cb));
    a.ud_ready(&mut qa, 1, &at);
    b.ud_ready(&mut qb, 1, &at);
    let src = a.mr(4096, 0x5a, LW);
    let dst = b.mr(4096, 0, LW);
    for (idx, l3) in [(1u8, 1u32), (2, 0)] {
        b.post_recv(&mut qb, &[(dst.addr, 1024, dst.key)]);
        let w = Wr {
            av: Some(Av {
                qkey: at.qkey,
                dqpn: qb.qpn,
                rmac: mb,
                rgid: gb,
                sgid_index: idx,
                hop_limit: 9,
                tclass: 0,
                flow_label: 0x12345,
                rlid: 0,
            }),
            ..Wr::new(op::SEND).sge(src.addr, 100, src.key)
        };
        a.post_send(&mut qa, &[w]);
        a.wait(&mut ca, 1)[0].ok();
        let r = &b.wait(&mut cb, 1)[0];
        r.ok();
        assert_eq!((r.flags_rqpn >> 24) & 3, l3, "RoCE L3 type (1 IPv6, 0 GRH)");
        let grh = b.read(dst.addr, 40);
        assert_eq!(grh[0] >> 4, 6, "IPv6 / GRH version");
        assert_eq!(
            u32::from_be_bytes(grh[0..4].try_into().unwrap()) & 0xf_ffff,
            0x12345
        );
        assert_eq!(grh[6], if idx == 1 { 17 } else { 0x1b }, "next header");
        assert_eq!(grh[7], 9, "hop limit");
        assert_eq!(grh[8..24], ga, "source GID");
        assert_eq!(grh[24..40], gb, "destination GID");
        assert_eq!(b.read(dst.addr + 40, 100), vec![0x5a; 100]);
    }
    a.finish();
    b.finish();
}

#[test]
fn srq_shared_by_three_qps_with_the_limit_event() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut srq = b.srq(4, 2); // 16 WQEs of 64 bytes
    let mut ca = a.cq(8);
    let mut cb = b.cq(8);
    let buf = b.mr(16 * 256, 0, LW);
    let mut posted = Vec::new();
    for i in 0..10u64 {
        let idx = b.post_srq(&mut srq, (buf.addr + 256 * i, 256, buf.key));
        posted.push(idx);
    }
    assert_eq!(posted, (0..10).collect::<Vec<u16>>());
    b.arm_srq(&srq, 4);
    let mut pairs = Vec::new();
    for _ in 0..3 {
        let mut qa = a.qp(&QpSpec::new(0, &ca));
        let mut qb = b.qp(&QpSpec {
            srqn: Some(srq.srqn),
            ..QpSpec::new(0, &cb)
        });
        connect_pair(&mut a, &mut qa, &mut b, &mut qb, &at);
        pairs.push((qa, qb));
    }
    let src = a.mr(4096, 0, LW);
    for i in 0..7u8 {
        a.write(src.addr + 16 * u64::from(i), &[i; 16]);
        let (qa, _) = &mut pairs[usize::from(i) % 3];
        a.post_send(
            qa,
            &[Wr::new(op::SEND).sge(src.addr + 16 * u64::from(i), 16, src.key)],
        );
        a.wait(&mut ca, 1)[0].ok();
    }
    let rs = b.wait(&mut cb, 7);
    for (i, r) in rs.iter().enumerate() {
        r.ok();
        assert_eq!(r.qpn, pairs[i % 3].1.qpn);
        assert_eq!(r.wqe_counter, i as u16, "SRQ WQE index");
        assert_eq!(b.read(buf.addr + 256 * i as u64, 16), vec![i as u8; 16]);
    }
    // 10 posted, 7 taken: 3 left < limit 4 -> one SRQ limit event (0x14)
    // naming the SRQ, and the limit is disarmed.
    let ev: Vec<_> = b.events().into_iter().filter(|e| e.0 == 0x14).collect();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        u32::from_be_bytes(ev[0].1[24..28].try_into().unwrap()) & 0xff_ffff,
        srq.srqn
    );
    assert_eq!(b.r.emu.srq(srq.srqn).unwrap().lwm, 0);
    // Completed WQEs go back to the free list's tail (like rdma-core):
    // link WQE 15 (the tail) to WQE 0, then post again past the wrap.
    b.write(srq.buf + 15 * srq.stride as u64 + 2, &0u16.to_be_bytes());
    let idx = b.post_srq(&mut srq, (buf.addr, 256, buf.key));
    assert_eq!(idx, 10);
    for k in 0..4u64 {
        let (qa, _) = &mut pairs[0];
        a.post_send(
            qa,
            &[Wr::new(op::SEND).sge(src.addr, 8 + k as u32, src.key)],
        );
        a.wait(&mut ca, 1)[0].ok();
    }
    let rs = b.wait(&mut cb, 4);
    let idxs: Vec<u16> = rs.iter().map(|r| r.wqe_counter).collect();
    assert_eq!(idxs, vec![7, 8, 9, 10]);
    drop(pairs);
    a.finish();
    b.finish();
}

#[test]
fn inline_sends_and_unsignaled_batches() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(64 * 1024, 0, LW);
    for i in 0..8u64 {
        b.post_recv(&mut qb, &[(dst.addr + 1024 * i, 1024, dst.key)]);
    }
    // Inline payloads of several sizes, only the last WQE signaled: one
    // requester CQE naming the last WQE.
    let sizes = [1usize, 12, 16, 44, 60, 100, 188, 3];
    let mut wrs = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let d: Vec<u8> = (0..n).map(|k| (k + i) as u8).collect();
        let last = i == sizes.len() - 1;
        wrs.push(
            Wr::new(op::SEND)
                .flags(if last { SIGNALED } else { 0 })
                .inline(&d),
        );
    }
    a.post_send(&mut qa, &wrs);
    let c = a.wait(&mut ca, 1);
    let last_index = qa.sq_pc - wrs.last().unwrap().encode(0, 0).len().div_ceil(64) as u16;
    assert_eq!(c[0].wqe_counter, last_index);
    a.quiet(&mut ca, Duration::from_millis(1));
    let rs = b.wait(&mut cb, sizes.len());
    for (i, (r, &n)) in rs.iter().zip(&sizes).enumerate() {
        assert_eq!(r.byte_cnt as usize, n);
        let d: Vec<u8> = (0..n).map(|k| (k + i) as u8).collect();
        assert_eq!(b.read(dst.addr + 1024 * i as u64, n), d);
    }
    // A NOP, signaled: a requester CQE with opcode NOP.
    a.post_send(&mut qa, &[Wr::new(op::NOP)]);
    let c = &a.wait(&mut ca, 1)[0];
    assert_eq!((c.opcode, c.wqe_opcode), (0, op::NOP));
    a.finish();
    b.finish();
}

#[test]
fn send_queue_wraps_around() {
    let (mut a, mut b) = pair();
    let mut ca = a.cq(10);
    let mut cb = b.cq(10);
    let at = Attrs::default();
    // An 8-WQEBB send queue; WQEs of 1 to 3 WQEBBs, so some straddle the
    // end of the ring; the 16-bit counter passes 0xffff.
    let mut qa = a.qp(&QpSpec {
        log_sq: 3,
        ..QpSpec::new(0, &ca)
    });
    let mut qb = b.qp(&QpSpec {
        log_rq: 6,
        ..QpSpec::new(0, &cb)
    });
    connect_pair(&mut a, &mut qa, &mut b, &mut qb, &at);
    let src = a.mr(4096, 0, LW);
    let dst = b.mr(256 * 64, 0, LW);
    let mut n = 0u64;
    while n < 200 {
        let sizes: &[u32] = match n % 3 {
            0 => &[8],
            1 => &[8, 8, 8],
            _ => &[8, 8, 8, 8, 8, 8, 8, 8],
        };
        let mut w = Wr::new(op::SEND);
        let mut payload = Vec::new();
        for (k, &l) in sizes.iter().enumerate() {
            let off = (n * 64 + k as u64 * 8) % 4000;
            let bytes = [(n + k as u64) as u8; 8];
            a.write(src.addr + off, &bytes);
            payload.extend_from_slice(&bytes);
            w = w.sge(src.addr + off, l, src.key);
        }
        if qb.rq_pc.wrapping_sub(n as u16) < 64 {
            b.post_recv(&mut qb, &[(dst.addr + 256 * (n % 64), 256, dst.key)]);
        }
        a.post_send(&mut qa, &[w]);
        a.wait(&mut ca, 1)[0].ok();
        let r = &b.wait(&mut cb, 1)[0];
        assert_eq!(r.byte_cnt as usize, payload.len());
        assert_eq!(b.read(dst.addr + 256 * (n % 64), payload.len()), payload);
        n += 1;
    }
    assert!(qa.sq_pc > 8 * 40, "the ring wrapped many times");
    assert!(
        a.r.emu.pending_timers() <= 1,
        "one ACK timer per QP at most"
    );
    a.finish();
    b.finish();
}

#[test]
fn wqe_counter_wraps_past_0xffff() {
    let (mut a, mut b) = pair();
    let mut ca = a.cq(12);
    let at = Attrs::default();
    let mut qa = a.qp(&QpSpec {
        log_sq: 4,
        ..QpSpec::new(0, &ca)
    });
    let cbq = b.cq(4);
    let qb = b.qp(&QpSpec::new(0, &cbq));
    let pa = a.path_to(&b, 1, qb.qpn, 1);
    a.connect(&mut qa, &pa, &at);
    // NOPs complete locally; 4100 of them (16 per doorbell) carry the
    // counter past 0xffff... in WQEBBs: 16 * 4100 = 65600.
    for _ in 0..4100 {
        let wrs: Vec<Wr> = (0..16).map(|_| Wr::new(op::NOP).flags(0)).collect();
        let mut wrs = wrs;
        wrs[15] = Wr::new(op::NOP);
        a.post_send(&mut qa, &wrs);
        let c = &a.wait(&mut ca, 1)[0];
        assert_eq!(c.wqe_counter, qa.sq_pc.wrapping_sub(1));
    }
    assert!(qa.sq_pc < 1000, "wrapped: {:#x}", qa.sq_pc);
    a.finish();
    b.finish();
}

#[test]
fn two_ports_of_one_hca_and_mtt_keys() {
    let mut n = Node::new(
        3,
        EmuConfig {
            ports: 2,
            ..EmuConfig::default()
        },
    );
    connect(&n.r.emu, 1, &n.r.emu, 2).unwrap();
    let at = Attrs::default();
    let mut c = n.cq(8);
    let mut q1 = n.qp(&QpSpec::new(0, &c));
    let mut q2 = n.qp(&QpSpec::new(0, &c));
    let p1 = Path {
        port: 1,
        sgid_index: 0,
        rmac: n.mac(2),
        rgid: n.gid(2),
        remote_qpn: q2.qpn,
    };
    let p2 = Path {
        port: 2,
        sgid_index: 0,
        rmac: n.mac(1),
        rgid: n.gid(1),
        remote_qpn: q1.qpn,
    };
    n.connect(&mut q1, &p1, &at);
    n.connect(&mut q2, &p2, &at);
    // The target is an MTT key: a virtual range over 3 scattered pages,
    // starting mid-page.
    let (mtt, pages) = n.mkey_mtt(0x7f00_0000_0000, 3, LW | RW | RR);
    let src = n.mr(8192, 0, LW);
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    n.write(src.addr, &data);
    n.post_send(
        &mut q1,
        &[Wr::new(op::WRITE)
            .sge(src.addr, 6000, src.key)
            .remote(mtt.addr + 2000, mtt.key)],
    );
    let cs = n.wait(&mut c, 1);
    cs[0].ok();
    assert_eq!(n.read(pages[0] + 2000, 2096), data[..2096]);
    assert_eq!(n.read(pages[1], 3904), data[2096..]);
    assert_eq!(n.read(pages[2], 4), vec![0; 4]);
    // Read it back from port 2's QP.
    let back = n.mr(8192, 0, LW);
    n.post_send(
        &mut q2,
        &[Wr::new(op::READ)
            .sge(back.addr, 6000, back.key)
            .remote(mtt.addr + 2000, mtt.key)],
    );
    n.wait(&mut c, 1)[0].ok();
    assert_eq!(n.read(back.addr, 6000), data);
    // Beyond the key: remote access error.
    n.post_send(
        &mut q2,
        &[Wr::new(op::READ)
            .sge(back.addr, 16, back.key)
            .remote(mtt.addr + 3 * 4096 - 8, mtt.key)],
    );
    n.wait(&mut c, 1)[0].err(hca_emu::cqe_syndrome::REMOTE_ACCESS);
    n.finish();
}

#[test]
fn blueflame_doorbells_and_a_mismatching_copy() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(4096, 0, LW);
    qa.bf = true;
    for i in 0..4u64 {
        b.post_recv(&mut qb, &[(dst.addr + 512 * i, 512, dst.key)]);
        a.post_send(&mut qa, &[Wr::new(op::SEND).inline(&[i as u8; 100])]);
        a.wait(&mut ca, 1)[0].ok();
        b.wait(&mut cb, 1)[0].ok();
    }
    a.r.emu.run_until_idle();
    let dbs = a.r.emu.datapath().doorbells;
    let offs: Vec<usize> = dbs
        .iter()
        .filter(|d| d.offset & 0xff == 0)
        .map(|d| d.offset)
        .collect();
    assert_eq!(offs, vec![0x800, 0x900, 0x800, 0x900], "alternating halves");
    assert_eq!(a.r.emu.datapath().bf_mismatches, 0);
    // A BlueFlame copy that differs from the WQE in memory: the device
    // executes the copy (as the hardware does), and the driver error is
    // counted and fails assert_clean.
    b.post_recv(&mut qb, &[(dst.addr, 512, dst.key)]);
    let w = Wr::new(op::SEND).inline(&[9; 20]);
    let mut bytes = w.encode(qa.sq_pc, qa.qpn);
    bytes.resize(64, 0);
    let size = 1usize << qa.log_sq;
    let slot = usize::from(qa.sq_pc) & (size - 1);
    a.write(qa.buf + (16 * 64 + slot * 64) as u64, &bytes);
    qa.sq_pc += 1;
    // Inline data starts at byte 20 (control 16, byte count 4): byte 5 of
    // the message differs in the copy.
    bytes[25] ^= 0xff;
    a.ring(&mut qa, &bytes);
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    a.r.emu.run_until_idle();
    assert_eq!(a.r.emu.datapath().bf_mismatches, 1);
    let mut want = vec![9u8; 20];
    want[5] ^= 0xff;
    assert_eq!(b.read(dst.addr, 20), want, "the copy executes, not memory");
    b.finish();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.finish()))
        .expect_err("assert_clean must fail on a BlueFlame copy that differs from memory");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("1 BlueFlame copies that differ")
            && msg.contains("differs from memory at byte 25"),
        "{msg}"
    );
}

#[test]
fn a_blueflame_copy_in_several_bursts_executes_once_complete() {
    // rdma-core and verbs-core copy 64 bytes per write-combined burst: the
    // WQE runs when the last burst arrives, from the copy.
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(4096, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 512, dst.key)]);
    let data: Vec<u8> = (0..150u8).collect();
    let w = Wr::new(op::SEND).inline(&data);
    let mut bytes = w.encode(qa.sq_pc, qa.qpn);
    bytes.resize(bytes.len().div_ceil(64) * 64, 0);
    assert_eq!(bytes.len(), 192, "three WQEBBs");
    let size = 1usize << qa.log_sq;
    for (i, bb) in bytes.chunks(64).enumerate() {
        let slot = (usize::from(qa.sq_pc) + i) & (size - 1);
        a.write(qa.buf + (qa.sq_offset() + slot * 64) as u64, bb);
    }
    qa.sq_pc += 3;
    a.write(qa.dbr + 4, &u32::from(qa.sq_pc).to_be_bytes());
    // The copy carries other data than memory, in three bursts.
    let mut copy = bytes.clone();
    for b in &mut copy[20..170] {
        *b = !*b;
    }
    let reg = a.uar as usize * 4096 + 0x800;
    for (i, c) in copy.chunks(64).enumerate() {
        let words: Vec<platform::Be64> = c
            .chunks(8)
            .map(|x| platform::Be64::new(u64::from_be_bytes(x.try_into().unwrap())))
            .collect();
        a.r.bar.write_bf(reg + 64 * i, &words);
        a.r.emu.run_until_idle();
        if i < 2 {
            assert_eq!(
                a.r.emu.datapath().wqes,
                0,
                "not before the copy is complete"
            );
        }
    }
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    let want: Vec<u8> = data.iter().map(|x| !x).collect();
    assert_eq!(b.read(dst.addr, 150), want);
    assert_eq!(a.r.emu.datapath().bf_mismatches, 1);
    assert_eq!(a.r.emu.datapath().wqes, 1);
    b.finish();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.finish()));
    assert!(
        err.is_err(),
        "assert_clean must fail on the mismatching copy"
    );
}

#[test]
fn a_blueflame_copy_that_stops_short_runs_from_memory_and_is_an_error() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(4096, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 512, dst.key)]);
    let data: Vec<u8> = (0..100u8).collect();
    let mut bytes = Wr::new(op::SEND).inline(&data).encode(qa.sq_pc, qa.qpn);
    bytes.resize(128, 0);
    let size = 1usize << qa.log_sq;
    for (i, bb) in bytes.chunks(64).enumerate() {
        let slot = (usize::from(qa.sq_pc) + i) & (size - 1);
        a.write(qa.buf + (qa.sq_offset() + slot * 64) as u64, bb);
    }
    qa.sq_pc += 2;
    a.write(qa.dbr + 4, &u32::from(qa.sq_pc).to_be_bytes());
    // Only the first 64 of the 128 bytes the control segment announces.
    let reg = a.uar as usize * 4096 + 0x800;
    let words: Vec<platform::Be64> = bytes[..64]
        .chunks(8)
        .map(|x| platform::Be64::new(u64::from_be_bytes(x.try_into().unwrap())))
        .collect();
    a.r.bar.write_bf(reg, &words);
    a.r.emu.run_until_idle();
    assert_eq!(a.r.emu.datapath().wqes, 0, "an incomplete copy waits");
    // The next write to that half ends it: the WQE runs from memory.
    let mut nop = Wr::new(op::NOP).encode(qa.sq_pc, qa.qpn);
    nop.resize(64, 0);
    let slot = usize::from(qa.sq_pc) & (size - 1);
    a.write(qa.buf + (qa.sq_offset() + slot * 64) as u64, &nop);
    qa.sq_pc += 1;
    a.write(qa.dbr + 4, &u32::from(qa.sq_pc).to_be_bytes());
    a.r.bar.write64(
        reg,
        platform::Be64::new(u64::from_be_bytes(nop[..8].try_into().unwrap())),
    );
    a.wait(&mut ca, 2);
    b.wait(&mut cb, 1)[0].ok();
    assert_eq!(b.read(dst.addr, 100), data);
    assert_eq!(a.r.emu.datapath().bf_mismatches, 1);
    b.finish();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.finish()))
        .expect_err("assert_clean must fail on a BlueFlame copy that stops short");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("stopped at 64 of 128 bytes"), "{msg}");
}

#[test]
fn a_doorbell_rung_before_the_doorbell_record_fails_assert_clean() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(4096, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 512, dst.key)]);
    // The WQE is in memory, but the doorbell comes before the doorbell
    // record covers it.
    let mut bytes = Wr::new(op::SEND).inline(&[7; 8]).encode(qa.sq_pc, qa.qpn);
    bytes.resize(64, 0);
    let slot = usize::from(qa.sq_pc) & ((1usize << qa.log_sq) - 1);
    a.write(qa.buf + (qa.sq_offset() + slot * 64) as u64, &bytes);
    let reg = a.uar as usize * 4096 + 0x800;
    let ctrl0 = u64::from_be_bytes(bytes[..8].try_into().unwrap());
    a.r.bar.write64(reg, platform::Be64::new(ctrl0));
    a.r.emu.run_until_idle();
    assert_eq!(a.r.emu.datapath().doorbell_mismatches, 1);
    assert_eq!(a.r.emu.datapath().wqes, 0, "the record does not cover it");
    // The driver then updates the record and rings again, correctly.
    qa.sq_pc += 1;
    a.write(qa.dbr + 4, &u32::from(qa.sq_pc).to_be_bytes());
    a.r.bar.write64(reg + 0x100, platform::Be64::new(ctrl0));
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    assert_eq!(a.r.emu.datapath().doorbell_mismatches, 1);
    b.finish();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.finish()))
        .expect_err("assert_clean must fail on a doorbell before its doorbell record");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("1 send doorbells rung before the doorbell record"),
        "{msg}"
    );
}

#[test]
fn uc_send_and_write() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 1, &Attrs::default());
    let src = a.mr(4096, 0x33, LW);
    let dst = b.mr(4096, 0, LW | RW);
    // No receive posted: the SEND completes on A and is dropped on B.
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 64, src.key)]);
    a.wait(&mut ca, 1)[0].ok();
    b.quiet(&mut cb, Duration::from_millis(1));
    assert_eq!(b.r.emu.datapath().drops.no_receive, 1);
    b.post_recv(&mut qb, &[(dst.addr, 64, dst.key)]);
    a.post_send(&mut qa, &[Wr::new(op::SEND).sge(src.addr, 64, src.key)]);
    a.wait(&mut ca, 1)[0].ok();
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 64);
    // A bad rkey on UC: dropped silently, the requester still succeeds.
    a.post_send(
        &mut qa,
        &[Wr::new(op::WRITE)
            .sge(src.addr, 64, src.key)
            .remote(dst.addr, dst.key ^ 0x100)],
    );
    a.wait(&mut ca, 1)[0].ok();
    a.post_send(
        &mut qa,
        &[Wr::new(op::WRITE)
            .sge(src.addr, 64, src.key)
            .remote(dst.addr + 1024, dst.key)],
    );
    a.wait(&mut ca, 1)[0].ok();
    b.r.emu.run_until_idle();
    assert_eq!(b.read(dst.addr + 1024, 64), vec![0x33; 64]);
    assert_eq!(b.r.emu.datapath().drops.uc_access, 1);
    // READ is not a UC operation: local QP operation error, SQE.
    a.post_send(
        &mut qa,
        &[Wr::new(op::READ)
            .sge(src.addr, 8, src.key)
            .remote(dst.addr, dst.key)],
    );
    a.wait(&mut ca, 1)[0].err(hca_emu::cqe_syndrome::LOCAL_QP_OP);
    assert_eq!(a.r.emu.qp_state(qa.qpn), Some(hca_emu::QpState::Sqer));
    a.finish();
    b.finish();
}

#[test]
fn solicited_completion_events() {
    let (mut a, mut b) = pair();
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &Attrs::default());
    let dst = b.mr(4096, 0, LW);
    for i in 0..2u64 {
        b.post_recv(&mut qb, &[(dst.addr + 64 * i, 64, dst.key)]);
    }
    b.events();
    // Arm B's CQ for solicited completions only.
    let arm = (1u32 << 24) | (cb.ci & 0xff_ffff);
    b.write(cb.dbr + 4, &arm.to_be_bytes());
    b.r.bar.write64(
        b.uar as usize * 4096 + 0x20,
        platform::Be64::new((u64::from(arm) << 32) | u64::from(cb.cqn)),
    );
    a.post_send(&mut qa, &[Wr::new(op::SEND).inline(b"plain")]);
    a.wait(&mut ca, 1)[0].ok();
    b.wait(&mut cb, 1)[0].ok();
    assert!(
        b.events().iter().all(|e| e.0 != 0),
        "no event for an unsolicited CQE"
    );
    a.post_send(
        &mut qa,
        &[Wr::new(op::SEND)
            .flags(SIGNALED | SOLICITED)
            .inline(b"wake")],
    );
    a.wait(&mut ca, 1)[0].ok();
    assert!(b.wait(&mut cb, 1)[0].se);
    let ev: Vec<_> = b.events().into_iter().filter(|e| e.0 == 0).collect();
    assert_eq!(ev.len(), 1, "one completion event");
    assert_eq!(
        u32::from_be_bytes(ev[0].1[24..28].try_into().unwrap()) & 0xff_ffff,
        cb.cqn
    );
    a.finish();
    b.finish();
}

#[test]
fn doorbell_before_rts_waits_and_runs_at_rts() {
    let (mut a, mut b) = pair();
    let at = Attrs::default();
    let mut ca = a.cq(6);
    let mut cb = b.cq(6);
    let mut qa = a.qp(&QpSpec::new(0, &ca));
    let mut qb = b.qp(&QpSpec::new(0, &cb));
    let pa = a.path_to(&b, 1, qb.qpn, 1);
    let pb = b.path_to(&a, 1, qa.qpn, 1);
    b.connect(&mut qb, &pb, &at);
    let dst = b.mr(4096, 0, LW);
    b.post_recv(&mut qb, &[(dst.addr, 64, dst.key)]);
    a.rst2init(&mut qa, 1, &at);
    a.init2rtr(&qa, Some(&pa), &at);
    a.post_send(&mut qa, &[Wr::new(op::SEND).inline(b"early")]);
    a.quiet(&mut ca, Duration::from_millis(1));
    assert!(
        a.r.emu
            .ignored_doorbells()
            .iter()
            .any(|s| s.contains("wait for RTS"))
    );
    a.rtr2rts(&qa, &at);
    a.wait(&mut ca, 1)[0].ok();
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 5);
    assert_eq!(b.read(dst.addr, 5), b"early");
    a.finish();
    b.finish();
}

#[test]
fn fence_and_initiator_depth_hold_wqes_back() {
    let (mut a, mut b) = pair();
    let at = Attrs {
        log_sra: 0, // one RDMA READ / atomic outstanding
        ack_timeout: 10,
        ..Attrs::default()
    };
    let (mut qa, mut ca, mut qb, mut cb) = connected(&mut a, &mut b, 0, &at);
    let src = a.mr(4096, 7, LW);
    let remote = b.mr(4096, 9, LW | RR);
    for i in 0..4 {
        b.post_recv(&mut qb, &[(remote.addr + 1024 * i, 64, remote.key)]);
    }
    let read = || {
        Wr::new(op::READ)
            .sge(src.addr + 2048, 16, src.key)
            .remote(remote.addr + 512, remote.key)
    };
    let tx = |n: &Node| n.r.emu.datapath().frames_tx;
    // The READ request is lost; the fenced SEND behind it is not sent
    // until the READ completed.
    a.r.emu
        .faults()
        .drop_packets(1, hca_emu::PacketDrop::Next(1));
    let t0 = tx(&a);
    a.post_send(
        &mut qa,
        &[
            read(),
            Wr::new(op::SEND)
                .flags(SIGNALED | FENCE)
                .sge(src.addr, 8, src.key),
        ],
    );
    a.r.emu.run_until_idle();
    assert_eq!(tx(&a) - t0, 1, "only the READ went out");
    let c = a.wait(&mut ca, 2);
    assert_eq!((c[0].wqe_opcode, c[1].wqe_opcode), (op::READ, op::SEND));
    assert_eq!(b.wait(&mut cb, 1)[0].byte_cnt, 8);
    // Without the fence the SEND goes out at once.
    a.r.emu
        .faults()
        .drop_packets(1, hca_emu::PacketDrop::Next(1));
    let t0 = tx(&a);
    a.post_send(
        &mut qa,
        &[read(), Wr::new(op::SEND).sge(src.addr, 8, src.key)],
    );
    a.r.emu.run_until_idle();
    // READ (lost) and SEND; the SEND arrives out of sequence, B NAKs it
    // with a PSN sequence error, A sends both again.
    assert_eq!(tx(&a) - t0, 4);
    assert_eq!(b.r.emu.datapath().seq_naks, 1);
    a.wait(&mut ca, 2);
    b.wait(&mut cb, 1);
    // A second READ waits for the first (initiator depth 1).
    a.r.emu
        .faults()
        .drop_packets(1, hca_emu::PacketDrop::Next(1));
    let t0 = tx(&a);
    a.post_send(&mut qa, &[read(), read()]);
    a.r.emu.run_until_idle();
    assert_eq!(tx(&a) - t0, 1);
    for c in a.wait(&mut ca, 2) {
        c.ok();
        assert_eq!(c.byte_cnt, 16);
    }
    assert_eq!(a.read(src.addr + 2048, 16), vec![9; 16]);
    a.finish();
    b.finish();
}

#[test]
fn loopback_between_qps_of_one_hca() {
    // Port 1 is cabled (to B), so its link is up; frames to its own MAC
    // and GID loop back inside A.
    let (mut a, b) = pair();
    let at = Attrs::default();
    let mut c = a.cq(6);
    let mut q1 = a.qp(&QpSpec::new(0, &c));
    let mut q2 = a.qp(&QpSpec::new(0, &c));
    let p1 = a.path_to(&a, 1, q2.qpn, 1);
    let p2 = a.path_to(&a, 1, q1.qpn, 1);
    a.connect(&mut q1, &p1, &at);
    a.connect(&mut q2, &p2, &at);
    let buf = a.mr(4096, 0, LW | RW);
    a.post_recv(&mut q2, &[(buf.addr, 64, buf.key)]);
    a.post_send(&mut q1, &[Wr::new(op::SEND).inline(b"self")]);
    let cs = a.wait(&mut c, 2);
    let (req, resp): (Vec<_>, Vec<_>) = cs.iter().partition(|x| x.opcode == 0);
    assert_eq!(
        (req[0].qpn, resp[0].qpn, resp[0].byte_cnt),
        (q1.qpn, q2.qpn, 4)
    );
    assert_eq!(a.read(buf.addr, 4), b"self");
    assert_eq!(b.r.emu.datapath().frames_rx, 0, "nothing reached the wire");
    a.finish();
    b.finish();
}
