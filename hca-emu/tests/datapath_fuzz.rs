//! Nothing a driver can write into a send queue, a receive queue, a
//! doorbell record or a send doorbell, and no frame on the wire, breaks the
//! transport engine: random WQE bytes, random counters and doorbells,
//! random frames (sent through a raw Ethernet SQ) and valid WQEs with
//! random fields. The device thread survives (no internal error), errors
//! are CQEs and CQEs are well formed, and everything can be torn down
//! without leaks.

mod common;

use std::time::Duration;

use common::dp::*;
use platform::{Be64, Mmio, Platform};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Random bytes into a WQEBB of a send queue (queue 0 RC, 1 UD, 2 raw
    /// SQ), optionally with a control segment that names the queue and the
    /// slot's counter (to get past the first checks).
    SqBytes {
        q: usize,
        slot: u16,
        bytes: Vec<u8>,
        sane_ctrl: bool,
    },
    /// Advance the send counter of the doorbell record and ring.
    Ring {
        q: usize,
        by: u16,
        bf: bool,
    },
    /// A doorbell write with a random value at a random BlueFlame offset.
    RawDoorbell {
        off: usize,
        value: u64,
    },
    /// A random receive WQE and a receive counter.
    Recv {
        slot: u16,
        bytes: Vec<u8>,
        by: u16,
    },
    /// A well-formed WQE with random lengths, keys and offsets.
    Valid {
        q: usize,
        opcode: u8,
        len: u32,
        key: u8,
        off: u16,
        flags: u8,
    },
    /// A random frame from A's raw SQ (the first 12 bytes address B or A).
    Frame {
        bytes: Vec<u8>,
        to_b: bool,
    },
    /// A well-formed RoCE v2 header from A's raw SQ to B's RC QP (or a
    /// random QPN) with a random opcode, PSN offset and body.
    Roce {
        opcode: u8,
        to_qp: bool,
        dqpn: u32,
        psn_delta: i8,
        body: Vec<u8>,
    },
    /// Both ends of the RC connection (or the UD QP) back to RESET and up
    /// again.
    Reset {
        rc: bool,
    },
    Delay(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..3, any::<u16>(), prop::collection::vec(any::<u8>(), 64), any::<bool>())
            .prop_map(|(q, slot, bytes, sane_ctrl)| Op::SqBytes { q, slot, bytes, sane_ctrl }),
        3 => (0usize..3, prop_oneof![Just(1u16), 0u16..8, any::<u16>()], any::<bool>())
            .prop_map(|(q, by, bf)| Op::Ring { q, by, bf }),
        1 => (0x800usize..0xa00, any::<u64>()).prop_map(|(o, value)| Op::RawDoorbell { off: o & !7, value }),
        2 => (any::<u16>(), prop::collection::vec(any::<u8>(), 64), prop_oneof![Just(1u16), any::<u16>()])
            .prop_map(|(slot, bytes, by)| Op::Recv { slot, bytes, by }),
        4 => (0usize..2, prop::sample::select(vec![0u8, 0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11, 0x12, 0x25, 0x0e]),
              prop_oneof![0u32..64, 0u32..5000, Just(0)], 0u8..4, 0u16..5000, any::<u8>())
            .prop_map(|(q, opcode, len, key, off, flags)| Op::Valid { q, opcode, len, key, off, flags }),
        2 => (prop::collection::vec(any::<u8>(), 0..200), any::<bool>())
            .prop_map(|(bytes, to_b)| Op::Frame { bytes, to_b }),
        3 => (prop_oneof![0u8..0x18, any::<u8>()], any::<bool>(), any::<u32>(), any::<i8>(), prop::collection::vec(any::<u8>(), 0..80))
            .prop_map(|(opcode, to_qp, dqpn, psn_delta, body)| Op::Roce { opcode, to_qp, dqpn, psn_delta, body }),
        1 => any::<bool>().prop_map(|rc| Op::Reset { rc }),
        1 => (0u64..20_000).prop_map(Op::Delay),
    ]
}

struct Rig {
    at: Attrs,
    a: Node,
    b: Node,
    /// RC, UD and raw SQ of A.
    qs: Vec<Qp>,
    cqs: Vec<Cq>,
    qb: Qp,
    cb: Cq,
    keys: Vec<Mr>,
}

fn rig() -> Rig {
    let (mut a, mut b) = pair();
    let at = Attrs {
        ack_timeout: 8,
        retry_count: 2,
        rnr_retry: 1,
        ..Attrs::default()
    };
    let (qa, ca, qb, cb) = connected(&mut a, &mut b, 0, &at);
    let cu = a.cq(8);
    let mut ud = a.qp(&QpSpec::new(2, &cu));
    a.ud_ready(&mut ud, 1, &at);
    // A raw SQ on A (TD, TIS).
    let (raw, cr) = a.raw_sq();
    let keys = vec![
        a.mr(8192, 0x11, LW | RR | RW | AT),
        a.mr(4096, 0x22, 0),
        b.mr(8192, 0x33, LW | RR | RW | AT),
        b.mr(4096, 0x44, LW),
    ];
    Rig {
        at,
        a,
        b,
        qs: vec![qa, ud, raw],
        cqs: vec![ca, cu, cr],
        qb,
        cb,
        keys,
    }
}

fn run(r: &mut Rig, ops: Vec<Op>) {
    for op in ops {
        match op {
            Op::SqBytes {
                q,
                slot,
                mut bytes,
                sane_ctrl,
            } => {
                let qp = &r.qs[q];
                let size = 1u16 << qp.log_sq;
                let s = slot & (size - 1);
                if sane_ctrl {
                    let idx = qp.sq_pc.wrapping_add(s.wrapping_sub(qp.sq_pc) & (size - 1));
                    bytes[1..3].copy_from_slice(&idx.to_be_bytes());
                    bytes[4..7].copy_from_slice(&qp.qpn.to_be_bytes()[1..]);
                }
                let base = if qp.srq { 0 } else { qp.rq_stride << qp.log_rq };
                r.a.write(qp.buf + (base + usize::from(s) * 64) as u64, &bytes);
            }
            Op::Ring { q, by, bf } => {
                let qp = &mut r.qs[q];
                let size = 1usize << qp.log_sq;
                let base = if qp.srq { 0 } else { qp.rq_stride << qp.log_rq };
                let last = usize::from(qp.sq_pc) & (size - 1);
                let mut w = r.a.read(qp.buf + (base + last * 64) as u64, 64);
                qp.sq_pc = qp.sq_pc.wrapping_add(by);
                qp.bf = bf;
                // The doorbell names the queue (else it is ignored early).
                w[4..7].copy_from_slice(&qp.qpn.to_be_bytes()[1..]);
                r.a.ring(qp, &w);
            }
            Op::RawDoorbell { off, value } => {
                r.a.r
                    .bar
                    .write64(r.a.uar as usize * 4096 + off, Be64::new(value));
            }
            Op::Recv { slot, bytes, by } => {
                let qp = &mut r.qb;
                let s = usize::from(slot) & ((1 << qp.log_rq) - 1);
                r.b.write(
                    qp.buf + (s * qp.rq_stride) as u64,
                    &bytes[..qp.rq_stride.min(64)],
                );
                qp.rq_pc = qp.rq_pc.wrapping_add(by);
                r.b.write(qp.dbr, &u32::from(qp.rq_pc).to_be_bytes());
            }
            Op::Valid {
                q,
                opcode,
                len,
                key,
                off,
                flags,
            } => {
                let k = r.keys[usize::from(key)];
                let remote = r.keys[2 + usize::from(key % 2)];
                let mut w = Wr::new(opcode)
                    .flags(flags)
                    .imm(u32::from(off))
                    .sge(k.addr + u64::from(off), len, k.key)
                    .remote(remote.addr + u64::from(off), remote.key);
                if matches!(opcode, 0x11 | 0x12) {
                    w.atomic = Some((u64::from(len), 7));
                }
                if q == 1 {
                    w.remote = None;
                    w.av = Some(Av {
                        qkey: if flags & 1 == 0 {
                            0x1111_1111
                        } else {
                            0x8000_0000
                        },
                        dqpn: 0x123,
                        rmac: r.b.mac(1),
                        rgid: r.b.gid(1),
                        sgid_index: flags >> 6,
                        hop_limit: 64,
                        tclass: 0,
                        flow_label: 0,
                        rlid: 0,
                    });
                }
                if len % 3 == 0 {
                    w.sges.clear();
                    w.inline = Some(vec![flags; (len % 200) as usize]);
                }
                let qp = &mut r.qs[q];
                r.a.post_send(qp, &[w]);
            }
            Op::Frame { mut bytes, to_b } => {
                let dst = if to_b { r.b.mac(1) } else { r.a.mac(1) };
                bytes.resize(bytes.len().max(14), 0);
                bytes[0..6].copy_from_slice(&dst);
                let w = Wr {
                    eth: Some((bytes[13] & 0xc0, bytes.clone())),
                    ..Wr::new(0x0a)
                };
                let qp = &mut r.qs[2];
                r.a.post_send(qp, &[w]);
            }
            Op::Roce {
                opcode,
                to_qp,
                dqpn,
                psn_delta,
                body,
            } => {
                let dqpn = if to_qp { r.qb.qpn } else { dqpn & 0xff_ffff };
                // B expects PSN 0x100 + what it received; a guess near it.
                let psn = (0x100i32 + i32::from(psn_delta)) as u32 & 0xff_ffff;
                let f = roce_v2(&r.a, &r.b, opcode, dqpn, psn, &body);
                let w = Wr {
                    eth: Some((0, f)),
                    ..Wr::new(0x0a)
                };
                let qp = &mut r.qs[2];
                r.a.post_send(qp, &[w]);
            }
            Op::Reset { rc } => {
                let at = r.at.clone();
                if rc {
                    let (qa, qb) = (&mut r.qs[0], &mut r.qb);
                    r.a.modify(qa, 0x50a);
                    r.b.modify(qb, 0x50a);
                    r.a.write(qa.dbr, &[0; 8]);
                    r.b.write(qb.dbr, &[0; 8]);
                    (qa.sq_pc, qa.rq_pc, qb.sq_pc, qb.rq_pc) = (0, 0, 0, 0);
                    let pa = r.a.path_to(&r.b, 1, qb.qpn, 1);
                    let pb = r.b.path_to(&r.a, 1, qa.qpn, 1);
                    r.a.connect(qa, &pa, &at);
                    r.b.connect(qb, &pb, &at);
                } else {
                    let q = &mut r.qs[1];
                    r.a.modify(q, 0x50a);
                    r.a.write(q.dbr, &[0; 8]);
                    (q.sq_pc, q.rq_pc) = (0, 0);
                    r.a.ud_ready(q, 1, &at);
                }
            }
            Op::Delay(us) => r.a.r.p.delay(Duration::from_micros(us)),
        }
    }
    r.a.r.emu.run_until_idle();
    r.b.r.emu.run_until_idle();
    r.a.r.p.delay(Duration::from_millis(50));
    r.b.r.p.delay(Duration::from_millis(50));
}

/// Drains a CQ; every CQE must have a defined opcode, an error CQE a
/// known syndrome. Returns the error CQEs.
fn drain(n: &Node, cq: &mut Cq) -> Result<Vec<Cqe>, TestCaseError> {
    let mut k = 0;
    let mut errors = Vec::new();
    while let Some(c) = n.poll(cq) {
        prop_assert!(
            matches!(c.opcode, 0..=3 | 13 | 14),
            "CQE opcode {:#x}: {c:?}",
            c.opcode
        );
        if c.opcode >= 13 {
            prop_assert!(
                matches!(
                    c.syndrome,
                    0x01 | 0x02 | 0x04 | 0x05 | 0x10 | 0x12 | 0x13 | 0x14 | 0x15 | 0x16
                ),
                "syndrome {:#x}",
                c.syndrome
            );
            errors.push(c);
        }
        k += 1;
        if k > 100_000 {
            break;
        }
    }
    Ok(errors)
}

/// An error CQE other than a flush moved its queue out of RTS (RDY for
/// the raw SQ): RC to ERR, UD to SQE or ERR. Not after a reset (which
/// brings the QPs back to RTS), and not for a UD receive that was too
/// small (it leaves the QP usable).
fn errors_leave_rts(
    n: &Node,
    errors: &[Cqe],
    raw_sqn: Option<u32>,
) -> Result<usize, TestCaseError> {
    let mut checked = 0;
    for c in errors {
        if c.syndrome == hca_emu::cqe_syndrome::WR_FLUSH
            || (c.opcode == 14 && c.syndrome == hca_emu::cqe_syndrome::LOCAL_LENGTH)
        {
            continue;
        }
        if Some(c.qpn) == raw_sqn {
            let st = n.r.emu.wq(hca_emu::ObjKind::Sq, c.qpn).map(|w| w.state);
            prop_assert_ne!(st, Some(1), "raw SQ {:#x} still ready after {:?}", c.qpn, c);
        } else {
            let st = n.r.emu.qp_state(c.qpn);
            prop_assert!(
                st.is_some(),
                "error CQE names QP {:#x}, which does not exist",
                c.qpn
            );
            prop_assert_ne!(
                st,
                Some(hca_emu::QpState::Rts),
                "QP {:#x} in RTS after {:?}",
                c.qpn,
                c
            );
        }
        checked += 1;
    }
    Ok(checked)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn random_work_requests_never_break_the_engine(ops in prop::collection::vec(op(), 1..40)) {
        let mut r = rig();
        let resets = ops.iter().any(|o| matches!(o, Op::Reset { .. }));
        run(&mut r, ops);
        for n in [&r.a, &r.b] {
            prop_assert!(n.r.emu.internal_errors().is_empty(), "{:?}", n.r.emu.internal_errors());
        }
        let Rig { a, b, qs, mut cqs, mut cb, .. } = r;
        let mut errors_a = Vec::new();
        for c in &mut cqs {
            errors_a.extend(drain(&a, c)?);
        }
        let errors_b = drain(&b, &mut cb)?;
        // An error CQE (not a flush) leaves its QP out of RTS.
        if !resets {
            errors_leave_rts(&a, &errors_a, Some(qs[2].qpn))?;
            errors_leave_rts(&b, &errors_b, None)?;
        }
        // The device still executes: a NOP on a fresh QP of A completes.
        let mut a = a;
        let mut b = b;
        let mut c = a.cq(4);
        let mut q = a.qp(&QpSpec::new(2, &c));
        a.ud_ready(&mut q, 1, &Attrs::default());
        a.post_send(&mut q, &[Wr::new(0)]);
        a.wait(&mut c, 1)[0].ok();
        // Teardown: nothing leaks; IOMMU faults are allowed (random
        // addresses under resd_lkey may point anywhere).
        let _ = &mut b;
        for n in [a, b] {
            n.finish_allowing_iommu_faults();
        }
    }
}
