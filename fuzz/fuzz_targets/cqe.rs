//! verbs-core's CQE parsing and poll path on a CQ in memory: an RC QP (QPN
//! 0x123, user index 5) with sends and receives posted and a UD QP (0x124,
//! user index 6) with receives posted, both served by one CQ, as in the
//! libmlx5 golden vectors. The input is two configuration bytes followed by
//! CQE images written at the consumer index onwards; the CQ is then polled
//! through one of its poll paths until it is empty (or a bound), and
//! optionally cleaned of the RC QP's entries.
//!
//! Configuration byte 0: bit 0 CQE version 0 (else 1), bits 1..3 log2 of
//! the CQ size - 2, bits 3..5 the poll path, bit 5 keep the images' owner
//! bits (else the harness sets the valid one), bits 6..8 the starting
//! consumer index. Byte 1: bit 0 clean the RC QP's CQEs after polling,
//! bit 1 start the send counters near the 16-bit wrap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlx5_fuzz::SinkUar;
use platform::host::HostBlock;
use verbs_core::{
    BfConfig, Completion, Cq, CqConfig, CqLayout, CqTable, CqeVersion, DeviceLimits, Qp, QpCaps,
    QpConfig, QpGeometry, QpType, RecvWr, SendFlags, SendOp, Sge, WorkCompletion,
};

static UAR: SinkUar = SinkUar;

fn qp_config(qp_type: QpType, qpn: u32) -> QpConfig {
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
        send_ops: None,
    };
    let geometry = QpGeometry::new(qp_type, &caps, &DeviceLimits::default()).expect("geometry");
    QpConfig {
        qp_type,
        qpn,
        geometry,
        atomics: false,
        sq_sig_all: false,
        eth_min_inline: 0,
    }
}

fn make_qp(
    cfg: &QpConfig,
    iova: u64,
    sq_start: u32,
    sends: u32,
    recvs: u32,
) -> (HostBlock, Qp<&'static SinkUar>) {
    let mem = HostBlock::new(cfg.geometry.layout.total_bytes, 4096).expect("memory");
    let mut qp = Qp::with_counters(
        mem.lend(iova, 0).expect("lend"),
        Some((&UAR, BfConfig::new(0))),
        cfg,
        sq_start,
        0,
    )
    .map_err(|(e, _)| e)
    .expect("qp");
    let sge = Sge {
        addr: 0x1000,
        length: 64,
        lkey: 1,
    };
    for i in 0..sends {
        qp.sq()
            .expect("sq")
            .post_send_sge(
                0x5351_0000_0000_0000 | u64::from(i),
                SendOp::Send,
                SendFlags::SIGNALED,
                sge,
            )
            .expect("send");
    }
    for i in 0..recvs {
        qp.rq()
            .expect("rq")
            .post_recv(&RecvWr {
                wr_id: 0x5251_0000_0000_0000 | u64::from(i),
                sgl: &[sge],
            })
            .expect("recv");
    }
    (mem, qp)
}

fuzz_target!(|data: &[u8]| {
    let [c0, c1, cqes @ ..] = data else {
        return;
    };
    let version = if c0 & 1 != 0 {
        CqeVersion::V0
    } else {
        CqeVersion::V1
    };
    let log = 2 + (c0 >> 1 & 3);
    let entries = 1u32 << log;
    let path = c0 >> 3 & 3;
    let raw_owner = c0 & 0x20 != 0;
    let ci = [0, entries - 1, 0xff_fffe, 0x1234_5678][usize::from(c0 >> 6)];
    let sq_start = if c1 & 2 != 0 { 0xfffc } else { 0 };

    let (rc_mem, rc) = make_qp(&qp_config(QpType::Rc, 0x123), 0x100_0000, sq_start, 8, 8);
    let (ud_mem, ud) = make_qp(&qp_config(QpType::Ud, 0x124), 0x200_0000, sq_start, 0, 8);
    let mut table: CqTable<8> = CqTable::new();
    table
        .insert(5, rc.completions(true, true, None).expect("rc handle"))
        .map_err(|(e, _)| e)
        .expect("insert");
    table
        .insert(6, ud.completions(true, true, None).expect("ud handle"))
        .map_err(|(e, _)| e)
        .expect("insert");

    let layout = CqLayout::new(log).expect("cq layout");
    let cq_mem = HostBlock::new(layout.total_bytes, 4096).expect("memory");
    let cfg = CqConfig {
        cqn: 7,
        layout,
        version,
        uar_page_offset: 0,
    };
    let mut cq = Cq::with_consumer_index(cq_mem.lend(0x300_0000, 0).expect("lend"), &UAR, &cfg, ci)
        .map_err(|(e, _)| e)
        .expect("cq");

    // Written after the CQ exists: creating it marks every entry invalid.
    // Every slot starts invalid (opcode 0xf, owner of the previous pass).
    for s in 0..entries {
        let mut b = [0u8; 64];
        b[63] = 0xf0 | u8::from(ci.wrapping_sub(entries).wrapping_add(s) & entries != 0);
        cq_mem.write(64 * s as usize, &b).expect("write");
    }
    for (k, chunk) in cqes.chunks_exact(64).take(entries as usize).enumerate() {
        let pos = ci.wrapping_add(k as u32);
        let mut b: [u8; 64] = chunk.try_into().expect("64 bytes");
        if !raw_owner {
            b[63] = (b[63] & !1) | u8::from(pos & entries != 0);
        }
        cq_mem
            .write(64 * (pos & (entries - 1)) as usize, &b)
            .expect("write");
    }

    let mut acc = 0u64;
    for _ in 0..2 * entries + 4 {
        let more = match path {
            0 => {
                let mut wc = [Completion::default(); 3];
                match cq.poll(&table, &mut wc) {
                    Ok(n) => {
                        for c in &wc[..n] {
                            acc ^= c.wr_id() ^ u64::from(c.byte_len());
                            let _ = (c.status(), c.opcode());
                        }
                        n > 0
                    }
                    Err(e) => {
                        acc ^= e.to_string().len() as u64;
                        true
                    }
                }
            }
            1 | 2 => {
                let mut c = Completion::default();
                match cq.poll_one(&table, &mut c) {
                    Ok(got) => {
                        acc ^= c.wr_id();
                        got
                    }
                    Err(e) => {
                        acc ^= e.to_string().len() as u64;
                        true
                    }
                }
            }
            _ => {
                let mut wc = [WorkCompletion::default(); 2];
                match cq.poll(&table, &mut wc) {
                    Ok(n) => {
                        for w in &wc[..n] {
                            acc ^= w.wr_id ^ format!("{w:?}").len() as u64;
                        }
                        n > 0
                    }
                    Err(e) => {
                        acc ^= e.to_string().len() as u64;
                        true
                    }
                }
            }
        };
        if !more {
            break;
        }
    }
    if c1 & 1 != 0 {
        if let Some(h) = table.remove(5) {
            let r = cq.clean_qp(5, &h);
            acc ^= u64::from(r.removed) ^ u64::from(r.srq_freed) ^ u64::from(r.srq_skipped);
        }
    }
    std::hint::black_box(acc);

    drop(table);
    let _ = cq_mem.reclaim(cq.into_parts().region);
    for (qp, mem) in [(rc, rc_mem), (ud, ud_mem)] {
        let parts = qp.into_parts().map_err(|_| ()).expect("no handles left");
        let _ = mem.reclaim(parts.region);
    }
});
