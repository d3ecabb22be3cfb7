//! Work queues (`ibv_create_wq`), receive work queue indirection tables
//! (`ibv_create_rwq_ind_table`) and RSS QPs (`ibv_create_qp_ex` with an
//! indirection table and an `ibv_rx_hash_conf`), over what the driver
//! offers:
//! - a WQ (`IBV_WQT_RQ`) is a receive-only raw packet QP of the driver
//!   (an RQ with its direct TIR, completing on the WQ's CQ); its
//!   `wq_num` is the RQ's number; `ibv_modify_wq` to `IBV_WQS_RDY` moves
//!   it RESET→INIT→RTR (the RQ to RDY, the receive doorbell on), to
//!   `IBV_WQS_ERR` to ERR, to `IBV_WQS_RESET` back to RESET;
//! - an indirection table is an RQ table (CREATE_RQT) over the WQs' RQs;
//! - an RSS QP is an indirect TIR over that table with the Toeplitz hash
//!   ([`hca_driver::flow::RxHashConf`], the fields mlx5_ib allows), in a
//!   transport domain of its own; it only receives, through the flows
//!   `ibv_create_flow` attaches to it. Modifying or querying it is
//!   `ENOSYS` (mlx5_ib's answer to a modify).
//!
//! A WQ a table names, a table an RSS QP uses, and an RSS QP flows
//! deliver to are not destroyed (`EBUSY`).

use core::ffi::c_int;
use core::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hca_driver::Hca;
use hca_driver::Tirn;
use hca_driver::flow::{RX_HASH_KEY_LEN, Rqt, RxHashConf, Tir};
use hca_driver::fw::TransportDomain;
use hca_driver::verbs::{Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType};

use crate::ffi::*;
use crate::registry::{self, Kind};
use crate::verbs::{CqObj, fail, live, live_ctx, live_pd, post_recv_list, zeroed};
use crate::{P, errno_of, guard, status_of};

/// `IBV_WQS_*`.
const IBV_WQS_RESET: c_int = 0;
const IBV_WQS_RDY: c_int = 1;
const IBV_WQS_ERR: c_int = 2;
/// `IBV_WQ_ATTR_STATE`, `IBV_WQ_ATTR_CURR_STATE`.
const IBV_WQ_ATTR_STATE: u32 = 1;
const IBV_WQ_ATTR_CURR_STATE: u32 = 2;
/// `IBV_RX_HASH_FUNC_TOEPLITZ`.
const IBV_RX_HASH_FUNC_TOEPLITZ: u8 = 1;

#[repr(C)]
struct WqObj {
    c: ibv_wq,
    qp: Mutex<Qp<P>>,
    /// Indirection tables naming it.
    users: AtomicUsize,
}

#[repr(C)]
struct IndObj {
    c: ibv_rwq_ind_table,
    /// Dropped before `hca` (field order): it borrows it.
    rqt: Option<Rqt<'static, P>>,
    hca: Arc<Hca<P>>,
    wqs: Vec<usize>,
    /// RSS QPs over it.
    users: AtomicUsize,
}

#[repr(C)]
struct RssObj {
    c: ibv_qp_ex,
    /// Dropped first: it borrows `td` and the table's RQT.
    tir: Option<Tir<'static, P>>,
    /// Boxed: `tir` borrows it.
    td: Option<Box<TransportDomain<'static, P>>>,
    ind: usize,
    hca: Arc<Hca<P>>,
}

/// Installs the context's work-queue operations.
pub(crate) fn install(v: &mut verbs_context) {
    v.create_wq = Some(op_create_wq);
    v.modify_wq = Some(op_modify_wq);
    v.destroy_wq = Some(op_destroy_wq);
    v.create_rwq_ind_table = Some(op_create_ind);
    v.destroy_rwq_ind_table = Some(op_destroy_ind);
}

unsafe extern "C" fn op_create_wq(
    context: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
) -> *mut ibv_wq {
    guard(ptr::null_mut(), || {
        if live_ctx(context).is_none() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-null, the caller's attributes.
        let a = unsafe { &*attr };
        if a.wq_type != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        if a.comp_mask != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        let Some(pd) = live_pd(a.pd) else {
            return fail(libc::EINVAL);
        };
        let Some(cq) = live(a.cq.cast::<CqObj>(), Kind::Cq) else {
            return fail(libc::EINVAL);
        };
        let qi = QpInitAttr::new(QpType::RawPacket, &cq.cq, &cq.cq).cap(QpCap {
            max_send_wr: 0,
            max_recv_wr: a.max_wr,
            max_send_sge: 0,
            max_recv_sge: a.max_sge,
            max_inline_data: 0,
        });
        let qp = match Qp::create(pd, &qi) {
            Ok(q) => q,
            Err(e) => return fail(errno_of(&e)),
        };
        let Some(rqn) = qp.rq_number() else {
            return fail(libc::EINVAL);
        };
        let mut c: ibv_wq = zeroed();
        c.context = context;
        c.wq_context = a.wq_context;
        c.pd = a.pd;
        c.cq = a.cq;
        c.wq_num = rqn.0;
        c.handle = rqn.0;
        c.state = IBV_WQS_RESET;
        c.wq_type = 0;
        c.post_recv = Some(op_wq_post_recv);
        registry::publish(
            WqObj {
                c,
                qp: Mutex::new(qp),
                users: AtomicUsize::new(0),
            },
            Kind::Wq,
        )
        .cast()
    })
}

unsafe extern "C" fn op_wq_post_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        if wq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: data path: a WQ of this library.
        let w = unsafe { &*wq.cast::<WqObj>() };
        let mut g = w.qp.lock().unwrap_or_else(|p| p.into_inner());
        post_recv_list(wr, bad_wr, |r| g.post_recv(r))
    })
}

fn modify(qp: &mut Qp<P>, to: QpState) -> hca_driver::Result<()> {
    let mut a = QpAttr::new();
    a.qp_state = to;
    a.mask = QpAttrMask::STATE;
    if to == QpState::Init {
        a.port_num = 1;
        a.mask = QpAttrMask(QpAttrMask::STATE.0 | QpAttrMask::PORT.0);
    }
    qp.modify(&a)
}

unsafe extern "C" fn op_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    guard(libc::EIO, || {
        let o = wq.cast::<WqObj>();
        let Some(w) = live(o, Kind::Wq) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: non-null, the caller's attributes.
        let a = unsafe { &*attr };
        if a.attr_mask & !(IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE) != 0 {
            return libc::EOPNOTSUPP;
        }
        if a.attr_mask & IBV_WQ_ATTR_STATE == 0 {
            return 0;
        }
        let mut g = w.qp.lock().unwrap_or_else(|p| p.into_inner());
        let cur = g.state();
        let r = match a.wq_state {
            IBV_WQS_RDY => match cur {
                QpState::Reset => {
                    modify(&mut g, QpState::Init).and_then(|()| modify(&mut g, QpState::Rtr))
                }
                QpState::Rtr => Ok(()),
                _ => return libc::EINVAL,
            },
            IBV_WQS_ERR => modify(&mut g, QpState::Err),
            IBV_WQS_RESET => modify(&mut g, QpState::Reset),
            _ => return libc::EINVAL,
        };
        if r.is_ok() {
            // SAFETY: `o` is live; its C view's state is the program's to
            // read.
            unsafe { (*o).c.state = a.wq_state };
        }
        status_of(r)
    })
}

unsafe extern "C" fn op_destroy_wq(wq: *mut ibv_wq) -> c_int {
    guard(libc::EIO, || {
        let o = wq.cast::<WqObj>();
        let Some(w) = live(o, Kind::Wq) else {
            return libc::EINVAL;
        };
        if w.users.load(Ordering::Acquire) != 0 {
            return libc::EBUSY;
        }
        let Some(b) = registry::take(o, Kind::Wq) else {
            return libc::EINVAL;
        };
        status_of(
            b.qp.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .destroy(),
        )
    })
}

unsafe extern "C" fn op_create_ind(
    context: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    guard(ptr::null_mut(), || {
        if live_ctx(context).is_none() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-null, the caller's attributes.
        let a = unsafe { &*attr };
        if a.comp_mask != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        if a.log_ind_tbl_size > 8 || a.ind_tbl.is_null() {
            return fail(libc::EINVAL);
        }
        let n = 1usize << a.log_ind_tbl_size;
        // SAFETY: the caller's table of 2^log_ind_tbl_size WQs.
        let list = unsafe { core::slice::from_raw_parts(a.ind_tbl, n) };
        let mut rqns = Vec::with_capacity(n);
        let mut hca = None;
        for &w in list {
            let Some(wo) = live(w.cast::<WqObj>(), Kind::Wq) else {
                return fail(libc::EINVAL);
            };
            let g = wo.qp.lock().unwrap_or_else(|p| p.into_inner());
            hca.get_or_insert_with(|| g.pd().context().hca().clone());
            rqns.push(hca_driver::Rqn(wo.c.wq_num));
        }
        let Some(hca) = hca else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `hca` (kept in the object) outlives the RQT, which is
        // dropped first (field order of IndObj).
        let h: &'static Hca<P> = unsafe { &*Arc::as_ptr(&hca) };
        let rqt = match h.create_rqt(&rqns) {
            Ok(r) => r,
            Err(e) => return fail(errno_of(&e)),
        };
        let num = c_int::try_from(rqt.number().0).unwrap_or(c_int::MAX);
        let wqs: Vec<usize> = list.iter().map(|&w| w as usize).collect();
        for &w in &wqs {
            // SAFETY: checked live above.
            unsafe { (*(w as *mut WqObj)).users.fetch_add(1, Ordering::AcqRel) };
        }
        registry::publish(
            IndObj {
                c: ibv_rwq_ind_table {
                    context,
                    ind_tbl_handle: num,
                    ind_tbl_num: num,
                    comp_mask: 0,
                },
                rqt: Some(rqt),
                hca,
                wqs,
                users: AtomicUsize::new(0),
            },
            Kind::RwqIndTable,
        )
        .cast()
    })
}

unsafe extern "C" fn op_destroy_ind(t: *mut ibv_rwq_ind_table) -> c_int {
    guard(libc::EIO, || {
        let o = t.cast::<IndObj>();
        let Some(i) = live(o, Kind::RwqIndTable) else {
            return libc::EINVAL;
        };
        if i.users.load(Ordering::Acquire) != 0 {
            return libc::EBUSY;
        }
        let Some(mut b) = registry::take(o, Kind::RwqIndTable) else {
            return libc::EINVAL;
        };
        let r = b.rqt.take().map_or(Ok(()), Rqt::destroy);
        for &w in &b.wqs {
            if let Some(wo) = live(w as *mut WqObj, Kind::Wq) {
                wo.users.fetch_sub(1, Ordering::AcqRel);
            }
        }
        status_of(r)
    })
}

/// `ibv_create_qp_ex` with an indirection table and a hash: an RSS QP.
pub(crate) fn create_rss_qp(a: &ibv_qp_init_attr_ex) -> *mut ibv_qp {
    let need = IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_PD;
    let known = need | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if a.comp_mask & need != need || a.qp_type != IBV_QPT_RAW_PACKET {
        return fail(libc::EINVAL);
    }
    if a.comp_mask & !known != 0
        || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
    {
        return fail(libc::EOPNOTSUPP);
    }
    if live_pd(a.pd).is_none() {
        return fail(libc::EINVAL);
    }
    let io = a.rwq_ind_tbl.cast::<IndObj>();
    let Some(ind) = live(io, Kind::RwqIndTable) else {
        return fail(libc::EINVAL);
    };
    let h = &a.rx_hash_conf;
    if h.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ
        || usize::from(h.rx_hash_key_len) != RX_HASH_KEY_LEN
        || h.rx_hash_key.is_null()
    {
        return fail(libc::EINVAL);
    }
    let mut key = [0u8; RX_HASH_KEY_LEN];
    // SAFETY: the caller's key of rx_hash_key_len (checked) bytes.
    key.copy_from_slice(unsafe { core::slice::from_raw_parts(h.rx_hash_key, RX_HASH_KEY_LEN) });
    let conf = RxHashConf {
        key,
        fields_mask: h.rx_hash_fields_mask,
    };
    let hca = ind.hca.clone();
    // SAFETY: `hca` is kept in the object and dropped after the domain
    // and the TIR (field order of RssObj).
    let hs: &'static Hca<P> = unsafe { &*Arc::as_ptr(&hca) };
    let td = match hs.alloc_transport_domain() {
        Ok(t) => Box::new(t),
        Err(e) => return fail(errno_of(&e)),
    };
    // SAFETY: the box's contents do not move and outlive the TIR.
    let tdr: &'static TransportDomain<'static, P> = unsafe { &*ptr::addr_of!(*td) };
    let Some(rqt) = ind.rqt.as_ref() else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the table stays while an RSS QP uses it (`users`, checked
    // by its destroy), and the TIR goes with the QP.
    let rqt: &'static Rqt<'static, P> = unsafe { &*ptr::from_ref(rqt) };
    let tir = match rqt.create_tir(tdr, &conf) {
        Ok(t) => t,
        Err(e) => return fail(errno_of(&e)),
    };
    ind.users.fetch_add(1, Ordering::AcqRel);
    let mut c: ibv_qp_ex = zeroed();
    let b = &mut c.qp_base;
    // SAFETY: a live PD of this library (checked).
    b.context = unsafe { (*a.pd).context };
    b.qp_context = a.qp_context;
    b.pd = a.pd;
    b.handle = tir.number().0;
    b.qp_num = tir.number().0;
    b.qp_type = IBV_QPT_RAW_PACKET;
    registry::publish(
        RssObj {
            c,
            tir: Some(tir),
            td: Some(td),
            ind: io as usize,
            hca,
        },
        Kind::RssQp,
    )
    .cast()
}

/// The indirect TIR and the HCA of an RSS QP, or `None`.
pub(crate) fn rss_tir(qp: *mut ibv_qp) -> Option<(Tirn, Arc<Hca<P>>)> {
    let r = live(qp.cast::<RssObj>(), Kind::RssQp)?;
    Some((r.tir.as_ref()?.number(), r.hca.clone()))
}

/// Whether `qp` is an RSS QP of this library.
pub(crate) fn is_rss(qp: *mut ibv_qp) -> bool {
    live(qp.cast::<RssObj>(), Kind::RssQp).is_some()
}

/// `ibv_destroy_qp` of an RSS QP: `None` when `qp` is not one.
pub(crate) fn destroy_rss_qp(qp: *mut ibv_qp) -> Option<c_int> {
    let o = qp.cast::<RssObj>();
    let r = live(o, Kind::RssQp)?;
    let tirn = r.tir.as_ref().map(Tir::number)?;
    if crate::flow::in_use(Arc::as_ptr(&r.hca) as usize, tirn) {
        return Some(libc::EBUSY);
    }
    let mut b = registry::take(o, Kind::RssQp)?;
    let mut res = b.tir.take().map_or(Ok(()), Tir::destroy);
    if let Some(td) = b.td.take() {
        let r2 = td.destroy();
        if res.is_ok() {
            res = r2;
        }
    }
    if let Some(i) = live(b.ind as *mut IndObj, Kind::RwqIndTable) {
        i.users.fetch_sub(1, Ordering::AcqRel);
    }
    Some(status_of(res))
}
