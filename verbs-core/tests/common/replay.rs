//! Replaying the JSON vectors of rdma-core's mlx5 provider
//! (`data/prm/libmlx5-vectors.json`, `data/prm/libmlx5-raw-vectors.json`,
//! written by `bench/golden/run.sh`) through verbs-core: the parts every
//! vector file shares (receive work requests and their WQEs, the
//! doorbell record, polling CQEs and comparing the work completions, the
//! CQ and queue state after).

use serde_json::Value;
use verbs_core::*;

use super::{
    CqEnv, CqeImage, QpEnv, SENTINEL_Q, SENTINEL_UAR, UarPage, cq_table, hex, make_cq, num,
};

/// A vector file of `data/prm/`.
pub fn load(file: &str) -> Value {
    let path = format!("{}/../data/prm/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A scatter/gather entry of a vector (`addr`, `length`, `lkey`).
pub fn sge(v: &Value) -> Sge {
    Sge {
        addr: num(&v["addr"]),
        length: num(&v["length"]) as u32,
        lkey: num(&v["lkey"]) as u32,
    }
}

/// The receive work requests of a vector (`wrs`): each one's `wr_id` and
/// scatter list, for [`recv_wrs`] to borrow.
pub fn recv_sgls(v: &Value) -> Vec<(u64, Vec<Sge>)> {
    v["wrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                num(&w["wr_id"]),
                w["sg_list"].as_array().unwrap().iter().map(sge).collect(),
            )
        })
        .collect()
}

/// The work requests over [`recv_sgls`].
pub fn recv_wrs(sgls: &[(u64, Vec<Sge>)]) -> Vec<RecvWr<'_>> {
    sgls.iter()
        .map(|(id, s)| RecvWr { wr_id: *id, sgl: s })
        .collect()
}

/// Fills the queue rings and the UAR page with their sentinels (so that a
/// byte nobody wrote shows) and returns the doorbell record before the
/// replay.
pub fn sentinels(env: &QpEnv<'_>, uar: &UarPage) -> [u8; 8] {
    env.fill_rings(SENTINEL_Q);
    uar.fill(SENTINEL_UAR);
    env.dbr()
}

/// Posts send `wrs` as the provider's vector did: through `ibv_post_send`
/// (`api` names it) one `post_send` for one work request, else one
/// `post_send_list`; otherwise (the extended QP's `ibv_wr_*` calls) one
/// batch, rung once.
pub fn post_sends<M: platform::Mmio>(sq: &mut SendQueue<M>, wrs: &[SendWr<'_>], api: &Value) {
    if api == "ibv_post_send" {
        if wrs.len() == 1 {
            sq.post_send(&wrs[0]).unwrap();
        } else {
            sq.post_send_list(wrs).unwrap();
        }
    } else {
        let mut b = sq.batch();
        for w in wrs {
            b.post_send(w).unwrap();
        }
        b.ring();
    }
}

/// The send queue's producer and consumer counters after a vector
/// (`sq_cur_post_after`, `sq_head_after` of its result `r`).
pub fn assert_sq_counters<M: platform::Mmio>(sq: &SendQueue<M>, r: &Value, name: &str) {
    assert_eq!(
        sq.cur_post(),
        num(&r["sq_cur_post_after"]) as u32,
        "{name} cur_post"
    );
    assert_eq!(sq.head(), num(&r["sq_head_after"]) as u32, "{name} head");
}

/// Posts `wrs` as the provider's vector did: one `post_recv` for one work
/// request, else one `post_recv_list`.
pub fn post_recvs(rq: &mut RecvQueue, wrs: &[RecvWr<'_>]) {
    if wrs.len() == 1 {
        rq.post_recv(&wrs[0]).unwrap();
    } else {
        rq.post_recv_list(wrs).unwrap();
    }
}

/// Asserts that `got` holds a vector WQE's `bytes` where its
/// `written_mask` is 0xff and the queue sentinel everywhere else.
pub fn assert_masked(got: &[u8], w: &Value, name: &str) {
    let bytes = hex(w["bytes"].as_str().unwrap());
    let mask = hex(w["written_mask"].as_str().unwrap());
    assert_eq!(got.len(), bytes.len(), "{name}");
    for i in 0..bytes.len() {
        if mask[i] == 0xff {
            assert_eq!(got[i], bytes[i], "{name}: byte {i}");
        } else {
            assert_eq!(got[i], SENTINEL_Q, "{name}: byte {i} must stay unwritten");
        }
    }
}

/// Asserts the receive WQEs of a vector's result `r` (`wqes`: where each
/// is in the receive queue, its stride, bytes and mask).
pub fn assert_recv_wqes(env: &QpEnv<'_>, r: &Value, name: &str) {
    let rq_off = env.qp.layout().rq_offset;
    for w in r["wqes"].as_array().unwrap() {
        let got = env.read(
            rq_off + num(&w["buffer_offset"]) as usize,
            num(&w["stride"]) as usize,
        );
        assert_masked(&got, w, name);
    }
}

/// Asserts, through one responder CQE per receive WQE of `r` (QPN field
/// `cqe_qpn`, WQE counter from `head` on), that each slot's completion
/// carries the `wr_id` the provider had there.
pub fn assert_recv_wr_ids(
    env: &mut QpEnv<'_>,
    uar: &UarPage,
    r: &Value,
    head: u32,
    cqe_qpn: u32,
    name: &str,
) {
    let mut cq = make_cq(uar, 8, 0);
    let table = cq_table::<8>([(2, env.qp.completions(false, true, None).unwrap())]);
    for (i, w) in r["wqes"].as_array().unwrap().iter().enumerate() {
        let counter = head.wrapping_add(i as u32) as u16;
        assert_eq!(u32::from(counter) & 63, num(&w["slot"]) as u32);
        cq.write_cqe(
            i,
            &CqeImage::new(2, 0)
                .qpn(0, cqe_qpn)
                .uidx(2)
                .counter(counter)
                .byte_cnt(8)
                .0,
        );
        let mut wc = [WorkCompletion::default(); 1];
        assert_eq!(cq.cq().poll(&table, &mut wc), Ok(1), "{name}");
        assert_eq!(wc[0].wr_id, num(&w["rq_wrid_at_slot"]), "{name}");
    }
}

/// How CQE vectors are polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollApi {
    /// `Cq::poll` with `ne` `WorkCompletion` slots (`ibv_poll_cq`).
    Slice,
    /// `Cq::poll_one` until nothing or `ne` are taken.
    One,
    /// `Cq::poll_one_rx` likewise, keeping each raw receive CQE's fields.
    Rx,
}

/// Polls up to `ne` completions through `api`: `ne` work completion slots
/// (the first of them filled), how many were filled, and (with
/// [`PollApi::Rx`]) each one's raw CQE fields.
pub fn poll_vector<R: CqResolver>(
    cq: &mut CqEnv<'_>,
    table: &R,
    ne: usize,
    api: PollApi,
) -> (Vec<WorkCompletion>, usize, Vec<RxCqe>) {
    let mut wc = vec![WorkCompletion::default(); ne];
    let mut rx = Vec::new();
    let n = match api {
        PollApi::Slice => cq.cq().poll(table, &mut wc).unwrap(),
        PollApi::One | PollApi::Rx => {
            let mut got = Vec::new();
            let mut c = Completion::default();
            let mut r = RxCqe::default();
            let q = cq.cq();
            while got.len() < ne
                && match api {
                    PollApi::One => q.poll_one(table, &mut c).unwrap(),
                    _ => q.poll_one_rx(table, &mut c, &mut r).unwrap(),
                }
            {
                got.push(WorkCompletion::from(c));
                rx.push(r);
            }
            wc[..got.len()].copy_from_slice(&got);
            got.len()
        }
    };
    (wc, n, rx)
}

/// Writes a CQE vector's CQEs (`cqes`: each one's `slot` and `bytes`)
/// into `cq`'s ring; returns each one's decoded `fields` and bytes.
pub fn write_cqes(cq: &mut CqEnv<'_>, v: &Value) -> Vec<(Value, Vec<u8>)> {
    v["cqes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let bytes = hex(c["bytes"].as_str().unwrap());
            cq.write_cqe(num(&c["slot"]) as usize, &bytes);
            (c["fields"].clone(), bytes)
        })
        .collect()
}

/// Polls `cq` as a CQE vector's `poll` did (`ne` entries) through `api`
/// and asserts its `return` and each work completion ([`assert_wc`]);
/// returns what [`poll_vector`] does.
pub fn assert_poll<R: CqResolver>(
    cq: &mut CqEnv<'_>,
    table: &R,
    v: &Value,
    name: &str,
    api: PollApi,
) -> (Vec<WorkCompletion>, usize, Vec<RxCqe>) {
    let p = &v["poll"];
    let (wc, n, rx) = poll_vector(cq, table, num(&p["ne"]) as usize, api);
    assert_eq!(n as u64, num(&p["return"]), "{name} ({api:?})");
    for (w, e) in wc.iter().zip(p["wc"].as_array().unwrap()) {
        assert_wc(w, e, name, api);
    }
    (wc, n, rx)
}

/// Asserts a work completion against the provider's `ibv_wc` `e`: every
/// field it wrote (those in `not_written` are skipped), the status's
/// string (and its name where `e` has one), and the immediate (or the
/// invalidated rkey where `e` has one).
pub fn assert_wc(w: &WorkCompletion, e: &Value, name: &str, api: PollApi) {
    let nw: Vec<&str> = e["not_written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let chk = |f: &str, got: u64| {
        if !nw.contains(&f) {
            assert_eq!(got, num(&e[f]), "{name}: {f} ({api:?})");
        }
    };
    chk("wr_id", w.wr_id);
    chk("status", w.status as u64);
    assert_eq!(
        w.status.as_str(),
        e["status_str"].as_str().unwrap(),
        "{name}"
    );
    if let Some(s) = e.get("status_name") {
        assert_eq!(w.status.name(), s.as_str().unwrap(), "{name}");
    }
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
    if let Some(rkey) = e.get("invalidated_rkey") {
        assert_eq!(w.invalidated_rkey(), Some(num(rkey) as u32), "{name}");
    } else if !nw.contains(&"imm_data") {
        // imm_data as the 4 bytes of ibv_wc (network order).
        assert_eq!(
            w.imm_data.to_be_bytes().to_vec(),
            hex(e["imm_data"].as_str().unwrap()),
            "{name}"
        );
    }
}

/// Asserts the CQ after polling against a vector's result `r`: its
/// consumer index and doorbell record (the arm word untouched).
pub fn assert_cq_after(cq: &mut CqEnv<'_>, r: &Value, name: &str) {
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
}

/// Asserts the send and receive queue tails after polling against a
/// vector's result `r`.
pub fn assert_tails(env: &mut QpEnv<'_>, r: &Value, name: &str) {
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
}

/// The bytes of a vector's send WQE `w` as they are in the ring (its
/// `slots`, in order).
pub fn sq_wqe(env: &QpEnv<'_>, w: &Value) -> Vec<u8> {
    let mut got = Vec::new();
    for s in w["slots"].as_array().unwrap() {
        got.extend(env.sq_slot(num(s) as usize));
    }
    got
}

/// Asserts a send WQE as the ring holds it (`got`) against the provider's
/// `bytes` under its `mask`: bytes it did not write stay the sentinel,
/// except the control segment's immediate (bytes 12..16) where the
/// provider took the `ibv_wr_*` path (`post_send` false), which leaves it
/// alone for opcodes without one; verbs-core always writes it (0), as
/// `ibv_post_send` does for the same WQE.
pub fn assert_send_wqe(got: &[u8], bytes: &[u8], mask: &[u8], post_send: bool, name: &str) {
    assert_eq!(got.len(), bytes.len(), "{name}");
    for i in 0..bytes.len() {
        if mask[i] == 0xff {
            assert_eq!(got[i], bytes[i], "{name}: WQE byte {i}");
        } else if !post_send && (12..16).contains(&i) {
            assert_eq!(got[i], 0, "{name}: ctrl imm byte {i}");
        } else {
            assert_eq!(got[i], SENTINEL_Q, "{name}: byte {i} must stay unwritten");
        }
    }
}

/// Asserts the doorbell register write of a vector's result `r`: exactly
/// the range the provider wrote in the UAR page, and the BlueFlame offset
/// after. A BlueFlame write (`blueflame`) copies the last WQE's blocks as
/// they are in the ring: the provider's bytes under the WQE's written
/// mask, the ring's stale (here: sentinel) bytes in the padding.
pub fn assert_doorbell_register(
    env: &QpEnv<'_>,
    uar: &UarPage,
    r: &Value,
    blueflame: bool,
    bf_after: usize,
    name: &str,
) {
    let reg = &r["doorbell_register"];
    let off = num(&reg["uar_page_offset"]) as usize;
    let len = num(&reg["length"]) as usize;
    let page = uar.bytes();
    let expect = hex(reg["bytes"].as_str().unwrap());
    if blueflame {
        let w = r["wqes"].as_array().unwrap().last().unwrap();
        let mask = hex(w["written_mask"].as_str().unwrap());
        let ring = sq_wqe(env, w);
        assert_eq!(
            page[off..off + len].to_vec(),
            ring[..len].to_vec(),
            "{name} BlueFlame = ring"
        );
        for i in 0..len {
            if mask[i] == 0xff {
                assert_eq!(page[off + i], expect[i], "{name} BlueFlame byte {i}");
            }
        }
    } else {
        assert_eq!(page[off..off + len].to_vec(), expect, "{name} doorbell");
    }
    for (i, b) in page.iter().enumerate() {
        if !(off..off + len).contains(&i) {
            assert_eq!(*b, SENTINEL_UAR, "{name}: UAR byte {i:#x} written");
        }
    }
    assert_eq!(
        bf_after,
        num(&reg["bf_offset_after"]) as usize,
        "{name} bf offset"
    );
}

/// Asserts, through one requester CQE per (WQE counter, `wr_id`) of
/// `first`, that each WQE's completion carries the `wr_id` the provider
/// had at its first slot, and that none is left outstanding after.
pub fn assert_send_wr_ids(env: &mut QpEnv<'_>, uar: &UarPage, first: &[(u16, u64)], name: &str) {
    let mut cq = make_cq(uar, 8, 0);
    let table = cq_table::<8>([(1, env.qp.completions(true, false, None).unwrap())]);
    let qpn = env.qp.qpn();
    for (i, (counter, wr_id)) in first.iter().enumerate() {
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
    drop(table);
    assert_eq!(env.qp.sq().unwrap().outstanding(), 0, "{name}: all retired");
}
