//! Every vector of `data/prm/libmlx5-raw-vectors.json` (what rdma-core's own
//! mlx5 provider, built from source by `bench/golden/run.sh`, writes for raw
//! packet QP work requests and decodes from raw receive CQEs), replayed
//! through verbs-core.
//!
//! The provider takes a raw send's inline headers from the start of the
//! gather list (`eth_min_inline_size` bytes, across SGEs if need be) and
//! sends the rest through data segments; verbs-core takes the headers as
//! bytes (`SendWr::eth_headers`) and the rest as the gather list, so the
//! replay splits each vector's gather list the provider's way
//! ([`split`]) — what a libibverbs layer over verbs-core does with the
//! memory behind the SGEs. Queue memory is pre-filled with sentinels, so
//! bytes the provider did not write must stay untouched here too.
#![cfg(not(miri))] // JSON parsing under Miri takes too long.

mod common;

use common::replay::*;
use common::*;
use serde_json::Value;
use verbs_core::*;

fn raw_vectors() -> Value {
    load("libmlx5-raw-vectors.json")
}

/// `raw_qp` of the fixtures with the vector's minimum inline size.
fn raw_cfg(all: &Value, min_inline: u16) -> QpConfig {
    raw_cfg_of(all, "raw_qp", min_inline)
}

/// `raw_qp` or `raw_tso_qp`. verbs-core's sizing has no
/// `max_tso_header`: the TSO fixture's queue (WQEs of 48 + 64 + 4 x 16
/// bytes, rounded to 192) is the one with room for 140 inline bytes
/// (48 + 4 + 140 = 192), which is also the provider's `max_inline_data`
/// for it; `raw_tso_qp_geometry_is_the_providers` holds them equal.
fn raw_cfg_of(all: &Value, fixture: &str, min_inline: u16) -> QpConfig {
    let f = &all["fixtures"]["raw_qp"];
    let cap = &f["cap"];
    let n = |k: &str| num(&cap[k]) as u32;
    let caps = QpCaps {
        max_inline_data: match fixture {
            "raw_qp" => n("max_inline_data"),
            "raw_tso_qp" => num(&all["fixtures"]["raw_tso_qp"]["max_inline_data"]) as u32,
            other => panic!("fixture {other}"),
        },
        ..caps(
            n("max_send_wr"),
            n("max_recv_wr"),
            n("max_send_sge"),
            n("max_recv_sge"),
        )
    };
    QpConfig {
        eth_min_inline: min_inline,
        ..qp_cfg(QpType::RawPacket, num(&f["qpn"]) as u32, &caps)
    }
}

#[test]
fn raw_qp_geometry_is_the_providers() {
    let all = raw_vectors();
    let f = &all["fixtures"]["raw_qp"];
    let g = raw_cfg(&all, 18).geometry;
    let sq = g.sq.unwrap();
    let rq = g.rq.unwrap();
    assert_eq!(sq.wqe_cnt, num(&f["sq_wqebbs"]) as u32);
    assert_eq!(sq.max_post, num(&f["sq_max_post"]) as u32);
    assert_eq!(sq.max_gs, num(&f["sq_max_gs"]) as u32);
    assert_eq!(sq.max_inline_data, num(&f["max_inline_data"]) as u32);
    assert_eq!(rq.wqe_cnt, num(&f["rq_entries"]) as u32);
    assert_eq!(rq.max_gs, num(&f["rq_max_gs"]) as u32);
    assert_eq!(u32::from(rq.wqe_shift), num(&f["rq_log_stride"]) as u32);
}

#[test]
fn raw_tso_qp_geometry_is_the_providers() {
    let all = raw_vectors();
    let f = &all["fixtures"]["raw_tso_qp"];
    let sq = raw_cfg_of(&all, "raw_tso_qp", 18).geometry.sq.unwrap();
    assert_eq!(sq.wqe_cnt, num(&f["sq_wqebbs"]) as u32);
    assert_eq!(sq.max_post, num(&f["sq_max_post"]) as u32);
    assert_eq!(sq.max_inline_data, num(&f["max_inline_data"]) as u32);
    assert_eq!(sq.max_wqe_size, 192);
}

/// One SGE (or inline buffer) of a vector with the bytes behind it.
#[derive(Clone)]
struct Seg {
    sge: Sge,
    data: Vec<u8>,
}

fn seg(v: &Value) -> Seg {
    let data = hex(v["data"].as_str().unwrap());
    let length = v.get("length").map_or(data.len() as u32, |l| num(l) as u32);
    assert_eq!(length as usize, data.len());
    Seg {
        sge: Sge {
            addr: v.get("addr").map_or(0, num),
            length,
            lkey: v.get("lkey").map_or(0, |l| num(l) as u32),
        },
        data,
    }
}

/// The provider's split of a gather list into `n` inline header bytes
/// (taken from the front, across entries) and the rest, through
/// [`EthSplit`]. A list too short for the headers gives all its bytes as
/// headers and no rest (verbs-core then refuses the short headers).
fn split(segs: &[Seg], n: usize) -> (Vec<u8>, Vec<Seg>) {
    let sgl: Vec<Sge> = segs.iter().map(|s| s.sge).collect();
    let hdr: Vec<u8> = segs.iter().flat_map(|s| s.data.clone()).take(n).collect();
    let sp = match EthSplit::new(&sgl, n) {
        Ok(sp) => sp,
        Err(e) => {
            assert_eq!(
                e,
                Error::EthSegment("inline headers shorter than the queue's minimum")
            );
            return (hdr, Vec::new());
        }
    };
    let mut out = vec![Sge::default(); sgl.len()];
    let rest = sp
        .data(&sgl, &mut out)
        .iter()
        .zip(&segs[sp.index..])
        .enumerate()
        .map(|(i, (sge, s))| Seg {
            sge: *sge,
            data: s.data[if i == 0 { sp.offset as usize } else { 0 }..].to_vec(),
        })
        .collect();
    (hdr, rest)
}

fn flags(v: &Value) -> (SendFlags, bool) {
    let mut f = SendFlags::NONE;
    let mut inline = false;
    for s in v.as_array().unwrap() {
        match s.as_str().unwrap() {
            "IBV_SEND_SIGNALED" => f = f | SendFlags::SIGNALED,
            "IBV_SEND_IP_CSUM" => f = f | SendFlags::IP_CSUM,
            "IBV_SEND_INLINE" => inline = true,
            other => panic!("flag {other}"),
        }
    }
    (f, inline)
}

/// A work request of a vector, split for verbs-core.
struct OwnedWr {
    wr_id: u64,
    flags: SendFlags,
    hdr: Vec<u8>,
    sgl: Vec<Sge>,
    inline: Option<Vec<u8>>,
    /// `IBV_WR_TSO` with this MSS (`hdr` is then the TSO header).
    mss: Option<u16>,
}

impl OwnedWr {
    fn new(wr_id: u64, flags: SendFlags, inline: bool, segs: &[Seg], min: usize) -> Self {
        let (hdr, rest) = split(segs, min);
        Self {
            wr_id,
            flags,
            hdr,
            sgl: rest.iter().map(|s| s.sge).collect(),
            inline: inline.then(|| rest.iter().flat_map(|s| s.data.clone()).collect()),
            mss: None,
        }
    }

    fn wr(&self) -> SendWr<'_> {
        let w = SendWr::new(self.wr_id, SendOp::Send)
            .flags(self.flags)
            .eth_headers(&self.hdr);
        match &self.inline {
            Some(d) => w.inline(d),
            None => w.sgl(&self.sgl),
        }
    }
}

fn wrs_of(v: &Value, min: usize) -> Vec<OwnedWr> {
    if let Some(wrs) = v["wrs"].as_array() {
        return wrs
            .iter()
            .map(|w| {
                let (f, inline) = flags(&w["send_flags"]);
                let segs: Vec<Seg> = w["sg_list"].as_array().unwrap().iter().map(seg).collect();
                match w["opcode"].as_str().unwrap() {
                    "IBV_WR_SEND" => OwnedWr::new(num(&w["wr_id"]), f, inline, &segs, min),
                    "IBV_WR_TSO" => {
                        // The header is its own buffer; the gather list is
                        // the payload.
                        let t = &w["tso"];
                        let hdr = hex(t["hdr"].as_str().unwrap());
                        assert_eq!(hdr.len() as u64, num(&t["hdr_sz"]));
                        assert!(!inline);
                        OwnedWr {
                            wr_id: num(&w["wr_id"]),
                            flags: f,
                            hdr,
                            sgl: segs.iter().map(|s| s.sge).collect(),
                            inline: None,
                            mss: Some(num(&t["mss"]) as u16),
                        }
                    }
                    op => panic!("opcode {op}"),
                }
            })
            .collect();
    }
    // ibv_wr_start, ibv_wr_send, one setter, ibv_wr_complete.
    let calls = v["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[1]["fn"], "ibv_wr_send");
    let wr_id = num(&calls[1]["qp_ex.wr_id"]);
    let (f, _) = flags(&calls[1]["qp_ex.wr_flags"]);
    let c = &calls[2];
    let (segs, inline) = match c["fn"].as_str().unwrap() {
        "ibv_wr_set_sge" => (vec![seg(c)], false),
        "ibv_wr_set_sge_list" => (
            c["sg_list"].as_array().unwrap().iter().map(seg).collect(),
            false,
        ),
        "ibv_wr_set_inline_data" => (vec![seg(c)], true),
        "ibv_wr_set_inline_data_list" => (
            c["buf_list"].as_array().unwrap().iter().map(seg).collect(),
            true,
        ),
        other => panic!("call {other}"),
    };
    vec![OwnedWr::new(wr_id, f, inline, &segs, min)]
}

#[test]
fn raw_send_vectors() {
    let all = raw_vectors();
    let send = all["send"].as_array().unwrap();
    assert_eq!(send.len(), num(&all["counts"]["send"]) as usize);
    assert!(send.len() >= 23);
    let mut matched = 0;
    for v in send {
        let name = v["name"].as_str().unwrap();
        let min = num(&v["eth_min_inline_size"]) as u16;
        let st = &v["state_before"];
        let start = num(&st["sq_cur_post"]) as u32;
        assert_eq!(start, num(&st["sq_head"]) as u32, "{name}");
        assert_eq!(num(&st["bf_offset"]), 0, "{name}");
        let csum_cap = st["csum_cap"] == true;
        let uar = UarPage::new();
        let fixture = v["qp"].as_str().unwrap();
        let mut env = make_qp_cfg(&raw_cfg_of(&all, fixture, min), &uar, start, 0);
        let dbr_before = sentinels(&env, &uar);
        let rings_before = env.read(0, env.qp.layout().ring_bytes);

        let owned = wrs_of(v, usize::from(min));
        let wrs: Vec<SendWr<'_>> = owned.iter().map(OwnedWr::wr).collect();
        let r = &v["result"];
        let sq = env.qp.sq().unwrap();
        sq.set_ip_csum_offload(csum_cap);
        if fixture == "raw_tso_qp" {
            let t = &all["fixtures"]["raw_tso_qp"];
            sq.set_tso(num(&t["max_tso_header"]) as u16, num(&t["max_tso"]) as u32);
        }
        if num(&r["return"]) != 0 {
            // The provider refused the work request (and scribbled on the
            // ring without publishing anything); verbs-core refuses it and
            // writes nothing at all.
            assert_eq!(r["return_name"], "EINVAL", "{name}");
            assert_eq!(num(&r["bad_wr"]), 0, "{name}");
            let (why, got) = match (owned[0].mss, csum_cap) {
                (Some(mss), _) => (
                    "TSO header shorter than 14 bytes or longer than the queue's largest",
                    sq.post_send_tso(&wrs[0], mss),
                ),
                (None, true) => (
                    "inline headers shorter than the queue's minimum",
                    sq.post_send(&wrs[0]),
                ),
                (None, false) => (
                    "checksum offload (IBV_SEND_IP_CSUM) not supported by the device or port",
                    sq.post_send(&wrs[0]),
                ),
            };
            assert_eq!(got, Err(Error::EthSegment(why)), "{name}");
            assert_sq_counters(sq, r, name);
            assert!(r["doorbell_register"].is_null(), "{name}");
            assert!(uar.bytes().iter().all(|&b| b == SENTINEL_UAR), "{name}");
            assert_eq!(env.dbr(), dbr_before, "{name}");
            assert_eq!(
                env.read(0, env.qp.layout().ring_bytes),
                rings_before,
                "{name}"
            );
            env.reclaim();
            matched += 1;
            continue;
        }
        if let Some(mss) = owned[0].mss {
            assert_eq!(wrs.len(), 1);
            sq.post_send_tso(&wrs[0], mss).unwrap();
        } else {
            post_sends(sq, &wrs, &v["api"]);
        }
        assert_sq_counters(sq, r, name);
        let bf_after = sq.bf_offset();

        // Blocks the provider wrote outside every WQE: none, except where
        // its TSO header wrap puts the data segments one block too far.
        let outside = r["sq_written_outside_wqes"].as_array().unwrap();
        let tso_wrap_bug = name == "raw_tso_hdr64_wrap_at_255";
        assert_eq!(outside.len(), usize::from(tso_wrap_bug), "{name}");
        let mut first_counters = Vec::new();
        for w in r["wqes"].as_array().unwrap() {
            let mut bytes = hex(w["bytes"].as_str().unwrap());
            let mut mask = hex(w["written_mask"].as_str().unwrap());
            if tso_wrap_bug {
                // The header ends at WQE byte 96 (slot 0, byte 32), where
                // the WQE's DS count puts the two data segments; the
                // provider wrote them at slot 1 instead. verbs-core writes
                // them where they belong, and nothing in slot 1.
                let spill = &outside[0];
                assert_eq!(num(&spill["slot"]), 1, "{name}");
                let sb = hex(spill["bytes"].as_str().unwrap());
                let sm = hex(spill["written_mask"].as_str().unwrap());
                assert_eq!(num(&w["ds"]), 8, "{name}");
                assert!(mask[96..128].iter().all(|&m| m == 0), "{name}");
                assert!(sm[..32].iter().all(|&m| m == 0xff), "{name}");
                assert!(sm[32..].iter().all(|&m| m == 0), "{name}");
                bytes[96..128].copy_from_slice(&sb[..32]);
                mask[96..128].fill(0xff);
                assert!(env.sq_slot(1).iter().all(|&b| b == SENTINEL_Q), "{name}");
            }
            let got = sq_wqe(&env, w);
            assert_send_wqe(&got, &bytes, &mask, v["api"] == "ibv_post_send", name);
            first_counters.push((
                num(&w["wqe_index"]) as u16,
                num(&w["sq_wrid_at_first_slot"]),
            ));
        }

        let d = &r["doorbell_record"];
        assert_eq!(d["sq_dbrec_written"], true, "{name}");
        assert_eq!(d["rq_dbrec_written"], false, "{name}");
        let dbr = env.dbr();
        assert_eq!(
            dbr[4..8].to_vec(),
            hex(d["sq_dbrec_bytes"].as_str().unwrap()),
            "{name} dbr"
        );
        assert_eq!(
            dbr[0..4],
            dbr_before[0..4],
            "{name}: receive word untouched"
        );

        let blueflame = match r["doorbell_register"]["kind"].as_str().unwrap() {
            "doorbell" => false,
            "blueflame" => true,
            k => panic!("{name}: kind {k}"),
        };
        assert_doorbell_register(&env, &uar, r, blueflame, bf_after, name);

        // The wr_id at each WQE's first slot, through requester CQEs.
        assert_send_wr_ids(&mut env, &uar, &first_counters, name);
        env.reclaim();
        matched += 1;
    }
    assert_eq!(matched, send.len());
}

#[test]
fn raw_recv_vectors() {
    let all = raw_vectors();
    let recv = all["recv"].as_array().unwrap();
    assert_eq!(recv.len(), num(&all["counts"]["recv"]) as usize);
    for v in recv {
        let name = v["name"].as_str().unwrap();
        let uar = UarPage::new();
        let head = num(&v["state_before"]["rq_head"]) as u32;
        let mut env = make_qp_cfg(&raw_cfg(&all, 18), &uar, 0, head);
        let dbr_before = sentinels(&env, &uar);
        let sgls = recv_sgls(v);
        let wrs = recv_wrs(&sgls);
        let rq = env.qp.rq().unwrap();
        // A raw packet QP's receive doorbell record is off until RTR.
        match v["state_before"]["qp_state"].as_str().unwrap() {
            "IBV_QPS_RTS" => rq.set_doorbell_record_enabled(true),
            "IBV_QPS_INIT" => {}
            s => panic!("{name}: state {s}"),
        }
        post_recvs(rq, &wrs);
        let r = &v["result"];
        assert_eq!(num(&r["return"]), 0, "{name}");
        assert_eq!(rq.head(), num(&r["rq_head_after"]) as u32, "{name}");
        assert_recv_wqes(&env, r, name);
        let d = &r["doorbell_record"];
        let dbr = env.dbr();
        if d["rq_dbrec_written"] == true {
            assert_eq!(
                dbr[0..4].to_vec(),
                hex(d["rq_dbrec_bytes"].as_str().unwrap()),
                "{name}"
            );
        } else {
            assert_eq!(
                dbr[0..4],
                dbr_before[0..4],
                "{name}: receive word untouched"
            );
        }
        assert_eq!(d["sq_dbrec_written"], false);
        assert_eq!(dbr[4..8], dbr_before[4..8], "{name}: send word untouched");
        assert!(uar.bytes().iter().all(|&b| b == SENTINEL_UAR), "{name}");

        // wr_id per slot through raw receive CQEs (flow tag 0, not the QPN).
        assert_recv_wr_ids(&mut env, &uar, r, head, 0, name);
        env.reclaim();
    }
}

#[test]
fn raw_cqe_vectors() {
    raw_cqe_vectors_through(PollApi::Slice);
}

#[test]
fn raw_cqe_vectors_through_poll_one() {
    raw_cqe_vectors_through(PollApi::One);
}

#[test]
fn raw_cqe_vectors_through_poll_one_rx_and_the_extended_cq() {
    raw_cqe_vectors_through(PollApi::Rx);
}

fn raw_cqe_vectors_through(api: PollApi) {
    let all = raw_vectors();
    let cqes = all["cqe"].as_array().unwrap();
    assert_eq!(cqes.len(), num(&all["counts"]["cqe"]) as usize);
    let f = &all["fixtures"]["raw_qp"];
    let (sbase, rbase) = (num(&f["sq_wrid_base"]), num(&f["rq_wrid_base"]));
    let uidx = num(&f["user_index"]) as u32;
    for v in cqes {
        let name = v["name"].as_str().unwrap();
        let st = &v["state_before"];
        let uar = UarPage::new();
        // The provider's state: wrid[i] = base + i with 16 outstanding
        // send WQEs and receives; built here by posting.
        let rq_start = num(&st["rq_tail"]) as u32;
        let mut env = make_qp_cfg(&raw_cfg(&all, 18), &uar, 0, rq_start);
        let sge = [Sge {
            addr: 0x1000,
            length: 4096,
            lkey: 1,
        }];
        for i in 0..num(&st["sq_head"]) {
            env.qp
                .sq()
                .unwrap()
                .post_send(&SendWr::new(sbase + i, SendOp::Nop))
                .unwrap();
        }
        for ctr in rq_start..num(&st["rq_head"]) as u32 {
            env.qp
                .rq()
                .unwrap()
                .post_recv(&RecvWr {
                    wr_id: rbase + u64::from(ctr & 63),
                    sgl: &sge,
                })
                .unwrap();
        }
        let mut cq = make_cq(&uar, 8, num(&st["cq_cons_index"]) as u32);
        let mut h = env.qp.completions(true, true, None).unwrap();
        assert!(h.is_raw());
        h.set_rx_csum(st["rx_csum_valid"] == true);
        let table = cq_table::<8>([(uidx, h)]);
        let images = write_cqes(&mut cq, v);
        let (wc, n, rx) = assert_poll(&mut cq, &table, v, name, api);
        if api == PollApi::Rx {
            // The extended CQ's reads of the same CQEs.
            let x = &v["ex_poll"];
            assert_eq!(num(&x["start_poll_return"]), 0, "{name}");
            let entries = x["entries"].as_array().unwrap();
            assert_eq!(entries.len(), n, "{name}");
            for (i, e) in entries.iter().enumerate() {
                let (w, r) = (&wc[i], &rx[i]);
                assert_eq!(w.wr_id, num(&e["wr_id"]), "{name}");
                assert_eq!(w.status as u64, num(&e["status"]), "{name}");
                assert_eq!(u64::from(w.vendor_err), num(&e["vendor_err"]), "{name}");
                assert_eq!(u64::from(w.qp_num), num(&e["qp_num"]), "{name}");
                assert_eq!(u64::from(w.wc_flags.0), num(&e["wc_flags"]), "{name}");
                if let Some(op) = e.get("opcode") {
                    assert_eq!(w.opcode as u64, num(op), "{name}");
                    assert_eq!(u64::from(w.byte_len), num(&e["byte_len"]), "{name}");
                }
                if w.opcode == WcOpcode::Recv && w.status == WcStatus::Success {
                    assert_eq!(u64::from(r.vlan_tci()), num(&e["cvlan"]), "{name} cvlan");
                    assert_eq!(
                        u64::from(r.flow_tag()),
                        num(&e["flow_tag"]),
                        "{name} flow tag"
                    );
                    // The CQE fields the vector was made from, decoded.
                    let fl = &images[i].0;
                    assert_eq!(u64::from(r.hds_ip_ext()), num(&fl["hds_ip_ext"]), "{name}");
                    assert_eq!(
                        u64::from(r.l4_hdr_type_etc()),
                        num(&fl["l4_hdr_type_etc"]),
                        "{name}"
                    );
                    assert_eq!(
                        u64::from(r.rss_hash()),
                        num(&fl["rss_hash_result"]),
                        "{name}"
                    );
                    assert_eq!(
                        u64::from(r.rss_hash_type()),
                        num(&fl["rss_hash_type"]),
                        "{name}"
                    );
                    assert_eq!(u64::from(r.check_sum()), num(&fl["check_sum"]), "{name}");
                    assert_eq!(r, &RxCqe::from_bytes(&images[i].1), "{name}");
                    // What the provider derived from them.
                    let csum = w.wc_flags.has(WcFlags::IP_CSUM_OK);
                    assert_eq!(
                        csum,
                        r.ip_csum_ok() && st["rx_csum_valid"] == true,
                        "{name}"
                    );
                }
            }
            assert_eq!(num(&x["polled"]) as usize, n, "{name}");
            assert_eq!(
                u64::from(cq.cq().consumer_index()),
                num(&x["cq_cons_index_after"]),
                "{name}"
            );
        }
        let r = &v["result"];
        assert_cq_after(&mut cq, r, name);
        assert_tails(&mut env, r, name);
        drop(table);
        env.reclaim();
    }
}
