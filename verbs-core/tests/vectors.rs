//! Every send, receive and CQE vector of `data/prm/libmlx5-vectors.json`
//! (what rdma-core's own mlx5 provider writes and decodes), replayed through
//! verbs-core.
//!
//! Queue memory is pre-filled with sentinels (0xa5 rings, 0x5a UAR page), so
//! bytes the vectors mark as not written by the library must stay untouched
//! here too; the only differences from the provider are justified where they
//! are allowed.
#![cfg(not(miri))] // Parsing the 300 kB JSON under Miri takes too long; see lib tests.

mod common;

use common::replay::*;
use common::*;
use serde_json::Value;
use verbs_core::*;

fn flags(v: &Value) -> SendFlags {
    let mut f = SendFlags::NONE;
    for s in v.as_array().unwrap() {
        f = f | match s.as_str().unwrap() {
            "IBV_SEND_SIGNALED" => SendFlags::SIGNALED,
            "IBV_SEND_FENCE" => SendFlags::FENCE,
            "IBV_SEND_SOLICITED" => SendFlags::SOLICITED,
            "IBV_SEND_INLINE" => SendFlags::NONE, // expressed by the payload
            other => panic!("flag {other}"),
        };
    }
    f
}

fn imm(v: &Value) -> u32 {
    // "htobe32(0xdeadbeef)": the host value the caller meant.
    let s = v.as_str().unwrap();
    let inner = s.trim_start_matches("htobe32(").trim_end_matches(')');
    num(&Value::String(inner.to_string())) as u32
}

/// Owned pieces of one work request from the JSON.
struct OwnedWr {
    wr_id: u64,
    op: SendOp,
    flags: SendFlags,
    sgl: Vec<Sge>,
    inline: Option<Vec<u8>>,
    ud: Option<(AddressVector, u32, u32)>,
}

impl OwnedWr {
    fn wr(&self) -> SendWr<'_> {
        let mut w = SendWr::new(self.wr_id, self.op).flags(self.flags);
        w = match &self.inline {
            Some(d) => w.inline(d),
            None => w.sgl(&self.sgl),
        };
        if let Some((av, qpn, qkey)) = &self.ud {
            w = w.ud(UdDest {
                av,
                remote_qpn: *qpn,
                remote_qkey: *qkey,
            });
        }
        w
    }
}

fn op_of(name: &str, w: &Value) -> SendOp {
    let ra = || num(&w["remote_addr"]);
    let rkey = || num(&w["rkey"]) as u32;
    match name {
        "IBV_WR_SEND" => SendOp::Send,
        "IBV_WR_SEND_WITH_IMM" => SendOp::SendWithImm(imm(&w["imm_data"])),
        "IBV_WR_RDMA_WRITE" => SendOp::RdmaWrite {
            remote_addr: ra(),
            rkey: rkey(),
        },
        "IBV_WR_RDMA_WRITE_WITH_IMM" => SendOp::RdmaWriteWithImm {
            remote_addr: ra(),
            rkey: rkey(),
            imm: imm(&w["imm_data"]),
        },
        "IBV_WR_RDMA_READ" => SendOp::RdmaRead {
            remote_addr: ra(),
            rkey: rkey(),
        },
        "IBV_WR_ATOMIC_CMP_AND_SWP" => SendOp::AtomicCmpSwp {
            remote_addr: ra(),
            rkey: rkey(),
            compare: num(&w["compare_add"]),
            swap: num(&w["swap"]),
        },
        "IBV_WR_ATOMIC_FETCH_AND_ADD" => SendOp::AtomicFetchAdd {
            remote_addr: ra(),
            rkey: rkey(),
            add: num(&w["compare_add"]),
        },
        other => panic!("opcode {other}"),
    }
}

fn wrs_of(all: &Value, v: &Value) -> Vec<OwnedWr> {
    let ud_of = |w: &Value| {
        w.get("ah").map(|ah| {
            (
                fixture_av(all, ah.as_str().unwrap()),
                num(&w["remote_qpn"]) as u32,
                num(&w["remote_qkey"]) as u32,
            )
        })
    };
    if let Some(wrs) = v["wrs"].as_array() {
        return wrs
            .iter()
            .map(|w| OwnedWr {
                wr_id: num(&w["wr_id"]),
                op: op_of(w["opcode"].as_str().unwrap(), w),
                flags: flags(&w["send_flags"]),
                sgl: w["sg_list"]
                    .as_array()
                    .map(|l| l.iter().map(sge).collect())
                    .unwrap_or_default(),
                inline: w.get("inline_payload").map(|p| hex(p.as_str().unwrap())),
                ud: ud_of(w),
            })
            .collect();
    }
    // ibv_wr_* calls: one WR built from the builder and setter calls.
    let mut out: Vec<OwnedWr> = Vec::new();
    for c in v["calls"].as_array().unwrap() {
        match c["fn"].as_str().unwrap() {
            "ibv_wr_start" | "ibv_wr_complete" => {}
            "ibv_wr_rdma_write" => out.push(OwnedWr {
                wr_id: num(&c["qp_ex.wr_id"]),
                op: op_of("IBV_WR_RDMA_WRITE", c),
                flags: flags(&c["qp_ex.wr_flags"]),
                sgl: vec![],
                inline: None,
                ud: None,
            }),
            "ibv_wr_send" => out.push(OwnedWr {
                wr_id: num(&c["qp_ex.wr_id"]),
                op: SendOp::Send,
                flags: flags(&c["qp_ex.wr_flags"]),
                sgl: vec![],
                inline: None,
                ud: None,
            }),
            "ibv_wr_set_sge" => out.last_mut().unwrap().sgl = vec![sge(c)],
            "ibv_wr_set_inline_data" => {
                out.last_mut().unwrap().inline = Some(hex(c["data"].as_str().unwrap()))
            }
            "ibv_wr_set_ud_addr" => out.last_mut().unwrap().ud = ud_of(c),
            other => panic!("call {other}"),
        }
    }
    out
}

#[test]
fn address_vectors_match_mlx5_create_ah() {
    let all = vectors();
    for (name, ah) in all["fixtures"]["address_handles"].as_object().unwrap() {
        let av = fixture_av(&all, name);
        assert_eq!(
            av.0.to_vec(),
            hex(ah["av_bytes"].as_str().unwrap()),
            "address vector {name}"
        );
    }
}

/// How a send vector is replayed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Api {
    /// `SendQueue::post` / `post_list`, or `SendQueue::batch` with
    /// `SendBatch::push` for the ibv_wr_* vectors.
    General,
    /// The typed one-SGE entry points (`post_rdma_write`, `post_send`,
    /// `post_rdma_read`, `post_sge`, and the same on a batch) for every
    /// work request with exactly one SGE and no UD destination; the
    /// general ones for the rest.
    Typed,
}

/// Whether the typed entry points take `w`.
fn typed(w: &OwnedWr) -> Option<Sge> {
    match (&w.sgl[..], &w.inline, &w.ud) {
        ([sge], None, None) => Some(*sge),
        _ => None,
    }
}

fn post_typed_one<M: platform::Mmio>(
    sq: &mut SendQueue<M>,
    w: &OwnedWr,
    sge: Sge,
) -> Result<(), Error> {
    Ok(sq.post_send_sge(w.wr_id, w.op, w.flags, sge)?)
}

fn push_typed<M: platform::Mmio>(
    b: &mut SendBatch<'_, M>,
    w: &OwnedWr,
    sge: Sge,
) -> Result<(), Error> {
    Ok(b.post_send_sge(w.wr_id, w.op, w.flags, sge)?)
}

#[test]
fn send_vectors() {
    send_vectors_through(Api::General);
}

#[test]
fn send_vectors_through_typed_entry_points() {
    send_vectors_through(Api::Typed);
}

fn send_vectors_through(api: Api) {
    let all = vectors();
    let send = all["send"].as_array().unwrap();
    assert_eq!(send.len(), 28);
    let mut typed_wrs = 0;
    for v in send {
        let name = v["name"].as_str().unwrap();
        let uar = UarPage::new();
        let st = &v["state_before"];
        assert_eq!(num(&st["sq_cur_post"]), num(&st["sq_head"]), "{name}");
        assert_eq!(num(&st["bf_offset"]), 0, "{name}");
        let mut env = make_qp(
            v["qp"].as_str().unwrap(),
            &uar,
            num(&st["sq_cur_post"]) as u32,
            0,
        );
        let dbr_before = sentinels(&env, &uar);

        let owned = wrs_of(&all, v);
        let wrs: Vec<SendWr<'_>> = owned.iter().map(OwnedWr::wr).collect();
        let sq = env.qp.sq().unwrap();
        match api {
            Api::General => post_sends(sq, &wrs, &v["api"]),
            Api::Typed => {
                typed_wrs += owned.iter().filter(|w| typed(w).is_some()).count();
                if v["api"] == "ibv_post_send" && wrs.len() == 1 {
                    match typed(&owned[0]) {
                        Some(sge) => post_typed_one(sq, &owned[0], sge).unwrap(),
                        None => sq.post_send(&wrs[0]).unwrap(),
                    }
                } else {
                    let mut b = sq.batch();
                    for (o, w) in owned.iter().zip(&wrs) {
                        match typed(o) {
                            Some(sge) => push_typed(&mut b, o, sge).unwrap(),
                            None => b.post_send(w).unwrap(),
                        }
                    }
                    assert_eq!(b.len(), wrs.len());
                    b.ring();
                }
            }
        }
        let r = &v["result"];
        assert_eq!(r["return"], 0);
        assert_sq_counters(sq, r, name);
        let bf_after = sq.bf_offset();

        // WQE bytes under the written mask; sentinels elsewhere.
        let mut first_counters = Vec::new();
        for w in r["wqes"].as_array().unwrap() {
            let bytes = hex(w["bytes"].as_str().unwrap());
            let mask = hex(w["written_mask"].as_str().unwrap());
            let got = sq_wqe(&env, w);
            assert_send_wqe(&got, &bytes, &mask, v["api"] == "ibv_post_send", name);
            first_counters.push((
                num(&w["ctrl_decoded"]["wqe_index"]) as u16,
                num(&w["sq_wrid_at_first_slot"]),
            ));
        }

        // Doorbell record: send word as the provider, receive word untouched.
        let d = &r["doorbell_record"];
        let dbr = env.dbr();
        assert_eq!(
            dbr[4..8].to_vec(),
            hex(d["sq_dbrec_bytes"].as_str().unwrap()),
            "{name} dbr"
        );
        assert_eq!(dbr[0..4], dbr_before[0..4], "{name} rq dbr");

        // Doorbell register: exactly the range the provider wrote.
        let blueflame = r["doorbell_register"].get("equals_wqe_bytes").is_some();
        assert_doorbell_register(&env, &uar, r, blueflame, bf_after, name);

        // wr_id at each WQE's first slot, read back through a requester CQE.
        assert_send_wr_ids(&mut env, &uar, &first_counters, name);
        env.reclaim();
    }
    if api == Api::Typed {
        // Most vectors are single-SGE RC sends and RDMA operations.
        assert!(typed_wrs >= 15, "only {typed_wrs} typed work requests");
    }
}

#[test]
fn recv_vectors() {
    let all = vectors();
    let recv = all["recv"].as_array().unwrap();
    assert_eq!(recv.len(), 7);
    for v in recv {
        let name = v["name"].as_str().unwrap();
        let uar = UarPage::new();
        let head = num(&v["state_before"]["rq_head"]) as u32;
        let mut env = make_qp(v["qp"].as_str().unwrap(), &uar, 0, head);
        let dbr_before = sentinels(&env, &uar);
        let sgls = recv_sgls(v);
        let wrs = recv_wrs(&sgls);
        let rq = env.qp.rq().unwrap();
        post_recvs(rq, &wrs);
        let r = &v["result"];
        assert_eq!(rq.head(), num(&r["rq_head_after"]) as u32, "{name}");
        assert_recv_wqes(&env, r, name);
        let d = &r["doorbell_record"];
        let dbr = env.dbr();
        assert_eq!(
            dbr[0..4].to_vec(),
            hex(d["rq_dbrec_bytes"].as_str().unwrap()),
            "{name}"
        );
        assert_eq!(dbr[4..8], dbr_before[4..8], "{name}: send word untouched");
        assert!(
            uar.bytes().iter().all(|&b| b == SENTINEL_UAR),
            "{name}: receives ring no UAR"
        );

        // wr_id per slot, through responder CQEs.
        let qpn = env.qp.qpn();
        assert_recv_wr_ids(&mut env, &uar, r, head, qpn, name);
        env.reclaim();
    }
}

#[test]
fn cqe_vectors() {
    cqe_vectors_through(PollApi::Slice);
}

#[test]
fn cqe_vectors_through_poll_one() {
    cqe_vectors_through(PollApi::One);
}

fn cqe_vectors_through(api: PollApi) {
    let all = vectors();
    let cqes = all["cqe"].as_array().unwrap();
    assert_eq!(cqes.len(), 36);
    for v in cqes {
        let name = v["name"].as_str().unwrap();
        let st = &v["state_before"];
        assert_eq!(num(&st["sq_tail"]), 0);
        assert_eq!(num(&st["rq_tail"]), 0);
        let uar = UarPage::new();
        // The provider's state: wrid[i] = base + i, wqe_head[i] = i. We build
        // it by posting: 16 NOPs (one WQEBB each) and 16 receives, so slot i
        // holds work request i. Unlike the provider's faked state, these
        // WQEs are really outstanding, which our wqe_counter checks require.
        let mut rc = make_qp("rc_qp", &uar, 0, 0);
        let mut ud = make_qp("ud_qp", &uar, 0, 0);
        for (env, sbase, rbase, len) in [
            (
                &mut rc,
                0x5351_0000_0000_0000u64,
                0x5251_0000_0000_0000u64,
                4096,
            ),
            (&mut ud, 0x5553_0000_0000_0000, 0x5552_0000_0000_0000, 296),
        ] {
            let sge = [Sge {
                addr: 0x1000,
                length: len,
                lkey: 1,
            }];
            for i in 0..16 {
                env.qp
                    .sq()
                    .unwrap()
                    .post_send(&SendWr::new(sbase + i, SendOp::Nop))
                    .unwrap();
                env.qp
                    .rq()
                    .unwrap()
                    .post_recv(&RecvWr {
                        wr_id: rbase + i,
                        sgl: &sge,
                    })
                    .unwrap();
            }
        }
        let mut cq = make_cq(&uar, 8, num(&st["cq_cons_index"]) as u32);
        let table = cq_table::<8>([
            (5, rc.qp.completions(true, true, None).unwrap()),
            (6, ud.qp.completions(true, true, None).unwrap()),
        ]);
        write_cqes(&mut cq, v);
        assert_poll(&mut cq, &table, v, name, api);
        let r = &v["result"];
        assert_cq_after(&mut cq, r, name);
        let env = if v["qp"] == "rc_qp" { &mut rc } else { &mut ud };
        assert_tails(env, r, name);
        drop(table);
        rc.reclaim();
        ud.reclaim();
    }
}
