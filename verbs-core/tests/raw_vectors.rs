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

use common::*;
use serde_json::Value;
use verbs_core::*;

fn raw_vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/prm/libmlx5-raw-vectors.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `raw_qp` of the fixtures with the vector's minimum inline size.
fn raw_cfg(all: &Value, min_inline: u16) -> QpConfig {
    let f = &all["fixtures"]["raw_qp"];
    let cap = &f["cap"];
    let caps = QpCaps {
        max_send_wr: num(&cap["max_send_wr"]) as u32,
        max_recv_wr: num(&cap["max_recv_wr"]) as u32,
        max_send_sge: num(&cap["max_send_sge"]) as u32,
        max_recv_sge: num(&cap["max_recv_sge"]) as u32,
        max_inline_data: num(&cap["max_inline_data"]) as u32,
        send_ops: None,
    };
    let geometry = QpGeometry::new(QpType::RawPacket, &caps, &DeviceLimits::default()).unwrap();
    QpConfig {
        qp_type: QpType::RawPacket,
        qpn: num(&f["qpn"]) as u32,
        geometry,
        atomics: false,
        sq_sig_all: false,
        eth_min_inline: min_inline,
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
                assert_eq!(w["opcode"], "IBV_WR_SEND");
                let (f, inline) = flags(&w["send_flags"]);
                let segs: Vec<Seg> = w["sg_list"].as_array().unwrap().iter().map(seg).collect();
                OwnedWr::new(num(&w["wr_id"]), f, inline, &segs, min)
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
    assert!(send.len() >= 19);
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
        let mut env = make_qp_cfg(&raw_cfg(&all, min), &uar, start, 0);
        env.fill_rings(SENTINEL_Q);
        uar.fill(SENTINEL_UAR);
        let dbr_before = env.dbr();
        let rings_before = env.read(0, env.qp.layout().ring_bytes);

        let owned = wrs_of(v, usize::from(min));
        let wrs: Vec<SendWr<'_>> = owned.iter().map(OwnedWr::wr).collect();
        let r = &v["result"];
        let sq = env.qp.sq().unwrap();
        sq.set_ip_csum_offload(csum_cap);
        if num(&r["return"]) != 0 {
            // The provider refused the work request (and scribbled on the
            // ring without publishing anything); verbs-core refuses it and
            // writes nothing at all.
            assert_eq!(r["return_name"], "EINVAL", "{name}");
            assert_eq!(num(&r["bad_wr"]), 0, "{name}");
            let why = if csum_cap {
                "inline headers shorter than the queue's minimum"
            } else {
                "checksum offload (IBV_SEND_IP_CSUM) not supported by the device or port"
            };
            assert_eq!(sq.post_send(&wrs[0]), Err(Error::EthSegment(why)), "{name}");
            assert_eq!(sq.cur_post(), num(&r["sq_cur_post_after"]) as u32, "{name}");
            assert_eq!(sq.head(), num(&r["sq_head_after"]) as u32, "{name}");
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
        if v["api"] == "ibv_post_send" {
            if wrs.len() == 1 {
                sq.post_send(&wrs[0]).unwrap();
            } else {
                sq.post_send_list(&wrs).unwrap();
            }
        } else {
            let mut b = sq.batch();
            for w in &wrs {
                b.post_send(w).unwrap();
            }
            b.ring();
        }
        assert_eq!(
            sq.cur_post(),
            num(&r["sq_cur_post_after"]) as u32,
            "{name} cur_post"
        );
        assert_eq!(sq.head(), num(&r["sq_head_after"]) as u32, "{name} head");
        let bf_after = sq.bf_offset();

        let mut first_counters = Vec::new();
        for w in r["wqes"].as_array().unwrap() {
            let bytes = hex(w["bytes"].as_str().unwrap());
            let mask = hex(w["written_mask"].as_str().unwrap());
            let mut got = Vec::new();
            for s in w["slots"].as_array().unwrap() {
                got.extend(env.sq_slot(num(s) as usize));
            }
            assert_eq!(got.len(), bytes.len(), "{name}");
            for i in 0..bytes.len() {
                if mask[i] == 0xff {
                    assert_eq!(got[i], bytes[i], "{name}: WQE byte {i}");
                } else if v["api"] != "ibv_post_send" && (12..16).contains(&i) {
                    // The ibv_wr_* path leaves the control segment's
                    // immediate alone; verbs-core writes 0 there, as
                    // ibv_post_send does for the same WQE.
                    assert_eq!(got[i], 0, "{name}: ctrl imm byte {i}");
                } else {
                    assert_eq!(got[i], SENTINEL_Q, "{name}: byte {i} must stay unwritten");
                }
            }
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

        let reg = &r["doorbell_register"];
        let off = num(&reg["uar_page_offset"]) as usize;
        let len = num(&reg["length"]) as usize;
        let expect = hex(reg["bytes"].as_str().unwrap());
        let page = uar.bytes();
        match reg["kind"].as_str().unwrap() {
            "doorbell" => {
                assert_eq!(page[off..off + len].to_vec(), expect, "{name} doorbell")
            }
            "blueflame" => {
                // The WQE's blocks as they are in the ring (stale padding
                // included); the provider's bytes under the WQE's mask.
                let w = r["wqes"].as_array().unwrap().last().unwrap();
                let mask = hex(w["written_mask"].as_str().unwrap());
                let mut ring = Vec::new();
                for s in w["slots"].as_array().unwrap() {
                    ring.extend(env.sq_slot(num(s) as usize));
                }
                assert_eq!(
                    page[off..off + len].to_vec(),
                    ring[..len].to_vec(),
                    "{name} BF"
                );
                for i in 0..len {
                    if mask[i] == 0xff {
                        assert_eq!(page[off + i], expect[i], "{name} BlueFlame byte {i}");
                    }
                }
            }
            k => panic!("{name}: kind {k}"),
        }
        for (i, b) in page.iter().enumerate() {
            if !(off..off + len).contains(&i) {
                assert_eq!(*b, SENTINEL_UAR, "{name}: UAR byte {i:#x} written");
            }
        }
        assert_eq!(bf_after, num(&reg["bf_offset_after"]) as usize, "{name} bf");

        // The wr_id at each WQE's first slot, through requester CQEs.
        let mut cq = make_cq(&uar, 8, 0);
        let mut table = CqTable::<8>::new();
        table
            .insert(1, env.qp.completions(true, false, None).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
        let qpn = env.qp.qpn();
        for (i, (counter, wr_id)) in first_counters.iter().enumerate() {
            cq.write_cqe(
                i,
                &CqeImage::new(0, 0)
                    .qpn(0x0a, qpn)
                    .uidx(1)
                    .counter(*counter)
                    .0,
            );
            let mut wc = [WorkCompletion::default(); 1];
            assert_eq!(cq.cq().poll(&table, &mut wc), Ok(1), "{name}");
            assert_eq!(wc[0].wr_id, *wr_id, "{name} wr_id");
        }
        assert_eq!(env.qp.sq().unwrap().outstanding(), 0, "{name}: all retired");
        drop(table);
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
        env.fill_rings(SENTINEL_Q);
        uar.fill(SENTINEL_UAR);
        let dbr_before = env.dbr();
        let sgls: Vec<(u64, Vec<Sge>)> = v["wrs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    num(&w["wr_id"]),
                    w["sg_list"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(seg_nodata)
                        .collect(),
                )
            })
            .collect();
        let wrs: Vec<RecvWr<'_>> = sgls
            .iter()
            .map(|(id, s)| RecvWr { wr_id: *id, sgl: s })
            .collect();
        let rq = env.qp.rq().unwrap();
        // A raw packet QP's receive doorbell record is off until RTR.
        match v["state_before"]["qp_state"].as_str().unwrap() {
            "IBV_QPS_RTS" => rq.set_doorbell_record_enabled(true),
            "IBV_QPS_INIT" => {}
            s => panic!("{name}: state {s}"),
        }
        if wrs.len() == 1 {
            rq.post_recv(&wrs[0]).unwrap();
        } else {
            rq.post_recv_list(&wrs).unwrap();
        }
        let r = &v["result"];
        assert_eq!(num(&r["return"]), 0, "{name}");
        assert_eq!(rq.head(), num(&r["rq_head_after"]) as u32, "{name}");
        let rq_off = env.qp.layout().rq_offset;
        for w in r["wqes"].as_array().unwrap() {
            let bytes = hex(w["bytes"].as_str().unwrap());
            let mask = hex(w["written_mask"].as_str().unwrap());
            let got = env.read(
                rq_off + num(&w["buffer_offset"]) as usize,
                num(&w["stride"]) as usize,
            );
            for i in 0..bytes.len() {
                if mask[i] == 0xff {
                    assert_eq!(got[i], bytes[i], "{name}: byte {i}");
                } else {
                    assert_eq!(got[i], SENTINEL_Q, "{name}: byte {i} must stay unwritten");
                }
            }
        }
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
        let mut cq = make_cq(&uar, 8, 0);
        let mut table = CqTable::<8>::new();
        table
            .insert(2, env.qp.completions(false, true, None).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
        for (i, w) in r["wqes"].as_array().unwrap().iter().enumerate() {
            let counter = head.wrapping_add(i as u32) as u16;
            assert_eq!(u32::from(counter) & 63, num(&w["slot"]) as u32);
            cq.write_cqe(
                i,
                &CqeImage::new(2, 0)
                    .qpn(0, 0)
                    .uidx(2)
                    .counter(counter)
                    .byte_cnt(8)
                    .0,
            );
            let mut wc = [WorkCompletion::default(); 1];
            assert_eq!(cq.cq().poll(&table, &mut wc), Ok(1), "{name}");
            assert_eq!(wc[0].wr_id, num(&w["rq_wrid_at_slot"]), "{name}");
        }
        drop(table);
        env.reclaim();
    }
}

fn seg_nodata(v: &Value) -> Sge {
    Sge {
        addr: num(&v["addr"]),
        length: num(&v["length"]) as u32,
        lkey: num(&v["lkey"]) as u32,
    }
}

/// How the CQE vectors are polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PollApi {
    /// `Cq::poll` with `ne` `WorkCompletion` slots (`ibv_poll_cq`).
    Slice,
    /// `Cq::poll_one` until nothing or `ne` are taken.
    One,
    /// `Cq::poll_one_rx`, also held to the extended CQ's reads.
    Rx,
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
        let mut table = CqTable::<8>::new();
        let mut h = env.qp.completions(true, true, None).unwrap();
        assert!(h.is_raw());
        h.set_rx_csum(st["rx_csum_valid"] == true);
        table.insert(uidx, h).map_err(|(e, _)| e).unwrap();
        let mut images = Vec::new();
        for c in v["cqes"].as_array().unwrap() {
            let bytes = hex(c["bytes"].as_str().unwrap());
            cq.write_cqe(num(&c["slot"]) as usize, &bytes);
            images.push((c["fields"].clone(), bytes));
        }
        let p = &v["poll"];
        let ne = num(&p["ne"]) as usize;
        let mut wc = vec![WorkCompletion::default(); ne];
        let mut rx = Vec::new();
        let n = match api {
            PollApi::Slice => cq.cq().poll(&table, &mut wc).unwrap(),
            PollApi::One | PollApi::Rx => {
                let mut got = Vec::new();
                let mut c = Completion::default();
                let mut r = RxCqe::default();
                let q = cq.cq();
                while got.len() < ne
                    && match api {
                        PollApi::One => q.poll_one(&table, &mut c).unwrap(),
                        _ => q.poll_one_rx(&table, &mut c, &mut r).unwrap(),
                    }
                {
                    got.push(WorkCompletion::from(c));
                    rx.push(r);
                }
                wc[..got.len()].copy_from_slice(&got);
                got.len()
            }
        };
        assert_eq!(n as u64, num(&p["return"]), "{name} ({api:?})");
        for (w, e) in wc.iter().zip(p["wc"].as_array().unwrap()) {
            let nw: Vec<&str> = e["not_written"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            let chk = |fld: &str, got: u64| {
                if !nw.contains(&fld) {
                    assert_eq!(got, num(&e[fld]), "{name}: {fld} ({api:?})");
                }
            };
            chk("wr_id", w.wr_id);
            chk("status", w.status as u64);
            assert_eq!(
                w.status.as_str(),
                e["status_str"].as_str().unwrap(),
                "{name}"
            );
            chk("opcode", w.opcode as u64);
            chk("vendor_err", u64::from(w.vendor_err));
            chk("byte_len", u64::from(w.byte_len));
            chk("qp_num", u64::from(w.qp_num));
            chk("src_qp", u64::from(w.src_qp));
            chk("wc_flags", u64::from(w.wc_flags.0));
            chk("pkey_index", u64::from(w.pkey_index));
            chk("slid", u64::from(w.slid));
            chk("sl", u64::from(w.sl));
            chk("dlid_path_bits", u64::from(w.dlid_path_bits));
            if !nw.contains(&"imm_data") {
                assert_eq!(
                    w.imm_data.to_be_bytes().to_vec(),
                    hex(e["imm_data"].as_str().unwrap()),
                    "{name}"
                );
            }
        }
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
        assert_eq!(
            u64::from(cq.cq().consumer_index()),
            num(&r["cq_cons_index_after"]),
            "{name}"
        );
        let dbr = cq.dbr();
        assert_eq!(
            dbr[0..4].to_vec(),
            hex(r["cq_dbrec_ci_bytes"].as_str().unwrap()),
            "{name}"
        );
        assert_eq!(dbr[4..8], [0; 4], "{name}: arm word untouched");
        let sq = env.qp.sq().unwrap();
        assert_eq!(
            u64::from(sq.head() - sq.outstanding()),
            num(&r["sq_tail_after"]),
            "{name} sq tail"
        );
        let rq = env.qp.rq().unwrap();
        assert_eq!(
            u64::from(rq.head() - rq.outstanding()),
            num(&r["rq_tail_after"]),
            "{name} rq tail"
        );
        drop(table);
        env.reclaim();
    }
}
