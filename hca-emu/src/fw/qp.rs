//! Queue pairs: creation and the state machine.
//!
//! Legal edges: RST2INIT (RST), INIT2INIT (INIT), INIT2RTR (INIT), RTR2RTS
//! (RTR), RTS2RTS (RTS), SQERR2RTS (SQER), SQD_RTS (SQD); 2ERR and 2RST from
//! any state. Any other edge is answered with bad resource state
//! ([`QP_BAD_TRANSITION`](crate::syndrome::QP_BAD_TRANSITION)). Each
//! transition accepts only its optional-parameter bits and checks the fields
//! it needs (port, P_Key index, MTU, RoCE GRH/GID/MAC). A transition takes
//! its required fields from the input context, and an optional field only
//! when its `opt_param_mask` bit is set.

use super::cmds::{check_buffer, check_dbr, read_pas_at, simple_destroy};
use super::objects::{ObjData, ObjKind, Qp, QpState, pages_for};
use super::{Cmd, R, fail, st};
use crate::device::Device;
use crate::ifc::{Field, get_bits, ifc, set_bits};
use crate::syndrome as syn;

const ST_RC: u8 = 0;
const ST_UC: u8 = 1;
const ST_UD: u8 = 2;

/// `opt_param_mask` bits (MLX5_QP_OPTPAR_*).
mod opt {
    pub const ALT_ADDR_PATH: u32 = 1 << 0;
    pub const RRE: u32 = 1 << 1;
    pub const RAE: u32 = 1 << 2;
    pub const RWE: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const Q_KEY: u32 = 1 << 5;
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    pub const SRA_MAX: u32 = 1 << 8;
    pub const RRA_MAX: u32 = 1 << 9;
    pub const PM_STATE: u32 = 1 << 10;
    pub const RETRY_COUNT: u32 = 1 << 12;
    pub const RNR_RETRY: u32 = 1 << 13;
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    pub const PRI_PORT: u32 = 1 << 16;
    pub const COUNTER_SET_ID: u32 = 1 << 25;
}

pub(crate) fn create_qp(d: &mut Device, c: &Cmd) -> R {
    let g = |p: &str| c.get(&format!("qpc.{p}"));
    let st_ = g("st") as u8;
    if ![ST_RC, ST_UC, ST_UD].contains(&st_) {
        return fail(st::BAD_PARAM, syn::QP_ST);
    }
    if g("state") != 0 {
        return fail(st::BAD_PARAM, syn::QP_STATE_NOT_RST);
    }
    super::ts::check(
        d.fw.caps.qp_ts_format(),
        d.cfg.personality.knows_ts_format(),
        g("ts_format"),
        syn::QP_TS_FORMAT,
    )?;
    let pd = g("pd") as u32;
    d.need(ObjKind::Pd, pd, syn::BAD_PD)?;
    let uar = g("uar_page") as u32;
    d.need(ObjKind::Uar, uar, syn::BAD_UAR)?;
    // user_index belongs to CQE version 1 (Linux sets it only when
    // cqe_version is 1); at version 0 it is not the driver's to set.
    if d.fw.caps.general("cqe_version") != 1 && g("user_index") != 0 {
        return fail(st::BAD_PARAM, syn::QP_USER_INDEX);
    }
    let log_rq = g("log_rq_size");
    let log_sq = g("log_sq_size");
    let max = d.fw.caps.general("log_max_qp_sz");
    if log_rq > max || log_sq > max {
        return fail(st::LIM_EXCEEDED, syn::QP_LOG_SIZE);
    }
    let stride = g("log_rq_stride");
    if 16u64 << stride > d.fw.caps.general("max_wqe_sz_rq") {
        return fail(st::BAD_PARAM, syn::QP_RQ_STRIDE);
    }
    let rq_type = g("rq_type") as u8;
    let mut deps = vec![(ObjKind::Pd, pd), (ObjKind::Uar, uar)];
    let mut srqn = None;
    match rq_type {
        0 | 3 => {}
        1 => {
            let s = g("srqn_rmpn_xrqn") as u32;
            d.need(ObjKind::Srq, s, syn::QP_BAD_SRQ)?;
            deps.push((ObjKind::Srq, s));
            srqn = Some(s);
        }
        _ => return fail(st::BAD_PARAM, syn::QP_RQ_TYPE),
    }
    let no_sq = g("no_sq") == 1;
    let cqn_snd = g("cqn_snd") as u32;
    let cqn_rcv = g("cqn_rcv") as u32;
    if !no_sq || cqn_snd != 0 {
        d.need(ObjKind::Cq, cqn_snd, syn::BAD_CQN)?;
        deps.push((ObjKind::Cq, cqn_snd));
    }
    if rq_type != 3 || cqn_rcv != 0 {
        d.need(ObjKind::Cq, cqn_rcv, syn::BAD_CQN)?;
        deps.push((ObjKind::Cq, cqn_rcv));
    }
    let mut lps = check_buffer(g)?;
    let dbr = if g("dbr_umem_valid") == 1 {
        let id = g("dbr_umem_id") as u32;
        let a = d.umem_dbr(id, g("dbr_addr"))?;
        deps.push((ObjKind::Umem, id));
        a
    } else {
        g("dbr_addr")
    };
    check_dbr(dbr)?;
    let log_max_qp = d.fw.caps.general("log_max_qp").min(31);
    if d.fw.objs.count(ObjKind::Qp) as u64 >= 1 << log_max_qp {
        return fail(st::LIM_EXCEEDED, syn::QP_TOO_MANY_QPS);
    }
    let rq_bytes = if rq_type == 0 {
        (16u64 << stride) << log_rq
    } else {
        0
    };
    let sq_bytes = if no_sq { 0 } else { 64u64 << log_sq };
    let pas = if c.get("wq_umem_valid") == 1 {
        let id = c.get("wq_umem_id") as u32;
        let p = d.umem_pages(id, c.get("wq_umem_offset"), rq_bytes + sq_bytes, false)?;
        deps.push((ObjKind::Umem, id));
        lps = 0;
        p
    } else {
        let n = pages_for(rq_bytes + sq_bytes, lps);
        read_pas_at(c, ifc().field(c.lin, "qpc_pas_list").byte_offset(), n)?
    };
    let qp = Qp {
        st: st_,
        state: QpState::Rst,
        pd,
        cqn_snd,
        cqn_rcv,
        srqn,
        rq_type,
        log_rq_size: log_rq as u8,
        log_rq_stride: stride as u8,
        log_sq_size: log_sq as u8,
        no_sq,
        uar,
        log_page_size: lps,
        pas,
        dbr_addr: dbr,
        ctx: c.bytes("qpc").to_vec(),
    };
    let qpn = d.fw.objs.create(ObjKind::Qp, ObjData::Qp(qp), deps)?;
    c.out().set("qpn", u64::from(qpn)).done()
}

pub(crate) fn destroy_qp(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Qp, "qpn")
}

pub(crate) fn query_qp(d: &mut Device, c: &Cmd) -> R {
    let Some(q) = d.fw.objs.qp(c.get("qpn") as u32) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let mut ctx = q.ctx.clone();
    ifc().set(&mut ctx, "qpc", "state", q.state as u64);
    let off = ifc().field(c.lout, "qpc").byte_offset();
    c.out().put(off, &ctx).done()
}

/// Fields each transition takes from its input context (paths in `qpc`):
/// the required ones always, each optional group only when its
/// `opt_param_mask` bit is set (as firmware does: an optional attribute the
/// driver did not select keeps its value).
type Fields = (
    &'static [&'static str],
    &'static [(u32, &'static [&'static str])],
);

fn fields_set(opcode: u16, st: u8) -> Fields {
    const ACCESS: [(u32, &[&str]); 3] = [
        (opt::RRE, &["rre"]),
        (opt::RWE, &["rwe"]),
        (opt::RAE, &["rae"]),
    ];
    const PKEY: (u32, &[&str]) = (opt::PKEY_INDEX, &["primary_address_path.pkey_index"]);
    const QKEY: (u32, &[&str]) = (opt::Q_KEY, &["q_key"]);
    const RNR: (u32, &[&str]) = (opt::RNR_TIMEOUT, &["min_rnr_nak"]);
    const ACK: (u32, &[&str]) = (opt::ACK_TIMEOUT, &["primary_address_path.ack_timeout"]);
    const PATH: (u32, &[&str]) = (opt::PRIMARY_ADDR_PATH, &["primary_address_path"]);
    match opcode {
        0x502 => (
            &[
                "primary_address_path.pkey_index",
                "primary_address_path.vhca_port_num",
                "rre",
                "rwe",
                "rae",
                "q_key",
            ],
            &[],
        ),
        0x50e => (
            &[],
            &[
                ACCESS[0],
                ACCESS[1],
                ACCESS[2],
                PKEY,
                QKEY,
                (opt::PRI_PORT, &["primary_address_path.vhca_port_num"]),
            ],
        ),
        0x503 if st == ST_UD => (&[], &[ACCESS[0], ACCESS[1], ACCESS[2], PKEY, QKEY]),
        0x503 => (
            &[
                "mtu",
                "log_msg_max",
                "remote_qpn",
                "primary_address_path",
                "next_rcv_psn",
                "log_rra_max",
                "min_rnr_nak",
            ],
            &[ACCESS[0], ACCESS[1], ACCESS[2], PKEY, QKEY],
        ),
        0x504 => (
            &[
                "next_send_psn",
                "retry_count",
                "rnr_retry",
                "log_sra_max",
                "primary_address_path.ack_timeout",
                "log_ack_req_freq",
            ],
            &[ACCESS[0], ACCESS[1], ACCESS[2], RNR, QKEY],
        ),
        0x505 => (
            &[],
            &[ACCESS[0], ACCESS[1], ACCESS[2], RNR, QKEY, ACK, PATH],
        ),
        0x506 => (&[], &[RNR, QKEY]),
        0x50c => (
            &[],
            &[
                ACCESS[0],
                ACCESS[1],
                ACCESS[2],
                PKEY,
                QKEY,
                RNR,
                ACK,
                PATH,
                (opt::RETRY_COUNT, &["retry_count"]),
                (opt::RNR_RETRY, &["rnr_retry"]),
                (opt::SRA_MAX, &["log_sra_max"]),
                (opt::RRA_MAX, &["log_rra_max"]),
            ],
        ),
        _ => (&[], &[]),
    }
}

fn copy_field(dst: &mut [u8], src: &[u8], f: Field) {
    if f.width <= 64 {
        set_bits(dst, f, get_bits(src, f));
    } else {
        let (a, b) = (f.offset / 8, (f.offset + f.width) / 8);
        if b <= dst.len() && b <= src.len() {
            dst[a..b].copy_from_slice(&src[a..b]);
        }
    }
}

pub(crate) fn modify_qp(d: &mut Device, c: &Cmd) -> R {
    use QpState::*;
    let qpn = c.get("qpn") as u32;
    let Some(q) = d.fw.objs.qp(qpn) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let (from, to, allowed): (&[QpState], QpState, u32) = match c.opcode {
        0x502 => (&[Rst], Init, 0),
        0x50e => (
            &[Init],
            Init,
            opt::RRE | opt::RWE | opt::RAE | opt::PKEY_INDEX | opt::PRI_PORT | opt::Q_KEY,
        ),
        0x503 => (
            &[Init],
            Rtr,
            opt::ALT_ADDR_PATH | opt::RRE | opt::RWE | opt::RAE | opt::PKEY_INDEX | opt::Q_KEY,
        ),
        0x504 => (
            &[Rtr],
            Rts,
            opt::ALT_ADDR_PATH
                | opt::RRE
                | opt::RWE
                | opt::RAE
                | opt::RNR_TIMEOUT
                | opt::PM_STATE
                | opt::Q_KEY,
        ),
        0x505 => (
            &[Rts],
            Rts,
            opt::ALT_ADDR_PATH
                | opt::RRE
                | opt::RWE
                | opt::RAE
                | opt::RNR_TIMEOUT
                | opt::PM_STATE
                | opt::Q_KEY
                | opt::ACK_TIMEOUT
                | opt::PRIMARY_ADDR_PATH,
        ),
        0x506 => (&[Sqer], Rts, opt::RNR_TIMEOUT | opt::Q_KEY),
        0x50c => (
            &[Sqd],
            Rts,
            opt::ALT_ADDR_PATH
                | opt::RRE
                | opt::RWE
                | opt::RAE
                | opt::PKEY_INDEX
                | opt::Q_KEY
                | opt::RNR_TIMEOUT
                | opt::PM_STATE
                | opt::ACK_TIMEOUT
                | opt::RETRY_COUNT
                | opt::RNR_RETRY
                | opt::SRA_MAX
                | opt::RRA_MAX
                | opt::PRIMARY_ADDR_PATH,
        ),
        0x507 => (&[Rst, Init, Rtr, Rts, Sqer, Sqd, Err], Err, 0),
        0x50a => (&[Rst, Init, Rtr, Rts, Sqer, Sqd, Err], Rst, 0),
        _ => return fail(st::BAD_OP, syn::BAD_OPCODE),
    };
    if !from.contains(&q.state) {
        return fail(st::BAD_RES_STATE, syn::QP_BAD_TRANSITION);
    }
    let has_ctx = !matches!(c.opcode, 0x507 | 0x50a);
    if has_ctx {
        let mask = c.get("opt_param_mask") as u32;
        if mask & !(allowed | opt::COUNTER_SET_ID) != 0 {
            return fail(st::BAD_PARAM, syn::QP_OPT_PARAM);
        }
        let g = |p: &str| c.get(&format!("qpc.{p}"));
        let nports = d.fw.ports.len() as u64;
        if c.opcode == 0x502 || (c.opcode == 0x50e && mask & opt::PRI_PORT != 0) {
            let port = g("primary_address_path.vhca_port_num");
            if port == 0 || port > nports {
                return fail(st::BAD_PARAM, syn::QP_PORT);
            }
        }
        if (c.opcode == 0x502 || mask & opt::PKEY_INDEX != 0)
            && g("primary_address_path.pkey_index") >= d.pkey_table_len() as u64
        {
            return fail(st::BAD_PARAM, syn::QP_PKEY_INDEX);
        }
        // The RDMA READ / atomic depths within what the device offers:
        // requester (log_sra_max) and responder (log_rra_max) resources.
        if g("log_sra_max") > d.fw.caps.general("log_max_ra_req_qp")
            || g("log_rra_max") > d.fw.caps.general("log_max_ra_res_qp")
        {
            return fail(st::BAD_PARAM, syn::QP_RA_DEPTH);
        }
        if c.opcode == 0x503 && q.st != ST_UD {
            let mtu = g("mtu");
            if !(1..=5).contains(&mtu) {
                return fail(st::BAD_PARAM, syn::QP_MTU);
            }
            let roce = d.fw.caps.general("port_type") == 1;
            // The `grh` bit is not required on RoCE: Linux's mlx5_set_path
            // sets it on InfiniBand only, and the GRH fields (source GID
            // index, remote GID) are used whatever it says.
            if roce {
                let port_num = ifc()
                    .get(&q.ctx, "qpc", "primary_address_path.vhca_port_num")
                    .max(1);
                let idx = g("primary_address_path.src_addr_index") as usize;
                let valid =
                    d.fw.ports
                        .get(port_num as usize - 1)
                        .and_then(|p| p.gids.get(idx))
                        .is_some_and(Option::is_some);
                if !valid {
                    return fail(st::BAD_PARAM, syn::QP_GID_INDEX);
                }
                if g("primary_address_path.rmac_47_32") == 0
                    && g("primary_address_path.rmac_31_0") == 0
                {
                    return fail(st::BAD_PARAM, syn::QP_RMAC);
                }
            }
        }
    }
    // Apply.
    let (input_ctx, mask) = if has_ctx {
        (c.bytes("qpc").to_vec(), c.get("opt_param_mask") as u32)
    } else {
        (Vec::new(), 0)
    };
    let q = d.fw.objs.qp_mut(qpn).expect("checked above");
    let t = ifc();
    let (required, optional) = fields_set(c.opcode, q.st);
    let chosen = optional
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .flat_map(|(_, f)| f.iter());
    for path in required.iter().chain(chosen) {
        copy_field(&mut q.ctx, &input_ctx, t.field("qpc", path));
    }
    let from_state = q.state;
    q.state = to;
    d.qp_transition(qpn, from_state, to);
    c.out().done()
}
