//! The `ibv_wr_*` work-request builder of an extended QP (`ibv_qp_ex`):
//! `wr_start`, one operation per work request (`wr_send`,
//! `wr_rdma_write`, ...) taking `wr_id` and `wr_flags` from the QP at that
//! moment, setters for the current request's data (`wr_set_sge`,
//! `wr_set_sge_list`, `wr_set_inline_data`, `wr_set_ud_addr`), then
//! `wr_complete` posts them in order (or `wr_abort` drops them).
//!
//! A setter without a current request, or a second `wr_start`, makes
//! `wr_complete` fail with `EINVAL` and post nothing; inline data is
//! copied when it is set, so the caller may reuse its buffer at once. The
//! requests are posted one after the other through the same path as
//! `ibv_post_send`: when one is refused, those before it are posted and
//! `wr_complete` returns its errno.

use core::ffi::{c_int, c_uint, c_void};
use std::sync::MutexGuard;

use crate::ffi::*;
use crate::guard;
use crate::verbs::{QpObj, post_one_send};

/// The send-ops flags an extended QP may ask for.
pub const SUPPORTED_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_SEND_WITH_INV;

/// One work request being built.
struct Pending {
    wr_id: u64,
    flags: c_uint,
    opcode: c_int,
    imm: u32,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    sgl: Vec<ibv_sge>,
    inline: Option<Vec<u8>>,
    ud: Option<(*mut ibv_ah, u32, u32)>,
}

/// The requests between `wr_start` and `wr_complete`.
#[derive(Default)]
pub struct Builder {
    started: bool,
    wrs: Vec<Pending>,
    err: Option<c_int>,
}

/// Installs the builder's functions for the operations `ops` allows.
pub fn install(c: &mut ibv_qp_ex, ops: u64) {
    c.comp_mask = 0;
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    if ops & IBV_QP_EX_WITH_SEND != 0 {
        c.wr_send = Some(wr_send);
    }
    if ops & IBV_QP_EX_WITH_SEND_WITH_IMM != 0 {
        c.wr_send_imm = Some(wr_send_imm);
    }
    if ops & IBV_QP_EX_WITH_SEND_WITH_INV != 0 {
        c.wr_send_inv = Some(wr_send_inv);
    }
    if ops & IBV_QP_EX_WITH_RDMA_WRITE != 0 {
        c.wr_rdma_write = Some(wr_rdma_write);
    }
    if ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM != 0 {
        c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    }
    if ops & IBV_QP_EX_WITH_RDMA_READ != 0 {
        c.wr_rdma_read = Some(wr_rdma_read);
    }
    if ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP != 0 {
        c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    }
    if ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD != 0 {
        c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    }
}

/// The QP object of an extended QP handed out by `ibv_qp_to_qp_ex`.
fn obj<'a>(qp: *mut ibv_qp_ex) -> Option<&'a QpObj> {
    if qp.is_null() {
        return None;
    }
    // SAFETY: data path, as libibverbs: the caller passes the extended QP
    // of a QP of this library, whose object begins with it.
    Some(unsafe { &*qp.cast::<QpObj>() })
}

fn builder(q: &QpObj) -> MutexGuard<'_, Builder> {
    q.builder.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a new work request of `opcode` with the QP's `wr_id` and
/// `wr_flags`; `f` fills its operation fields.
fn new_wr(qp: *mut ibv_qp_ex, opcode: c_int, f: impl FnOnce(&mut Pending)) {
    guard((), || {
        let Some(q) = obj(qp) else {
            return;
        };
        let mut b = builder(q);
        if !b.started {
            b.err.get_or_insert(libc::EINVAL);
            return;
        }
        let mut p = Pending {
            wr_id: q.c.wr_id,
            flags: q.c.wr_flags,
            opcode,
            imm: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            sgl: Vec::new(),
            inline: None,
            ud: None,
        };
        f(&mut p);
        b.wrs.push(p);
    })
}

/// Applies `f` to the current work request.
fn current(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut Pending)) {
    guard((), || {
        let Some(q) = obj(qp) else {
            return;
        };
        let mut b = builder(q);
        let started = b.started;
        match b.wrs.last_mut() {
            Some(p) if started => f(p),
            _ => {
                b.err.get_or_insert(libc::EINVAL);
            }
        }
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    guard((), || {
        let Some(q) = obj(qp) else {
            return;
        };
        let mut b = builder(q);
        if b.started {
            b.err.get_or_insert(libc::EINVAL);
            return;
        }
        *b = Builder {
            started: true,
            ..Builder::default()
        };
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = obj(qp) else {
            return libc::EINVAL;
        };
        let b = core::mem::take(&mut *builder(q));
        if !b.started {
            return libc::EINVAL;
        }
        if let Some(e) = b.err {
            return e;
        }
        let mut g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        let mut sbuf = [hca_driver::verbs::Sge::default(); 16];
        let mut heap = Vec::new();
        let mut inline = Vec::new();
        for p in &b.wrs {
            let mut sgl = p.sgl.clone();
            let mut flags = p.flags & !IBV_SEND_INLINE;
            if let Some(data) = &p.inline {
                flags |= IBV_SEND_INLINE;
                sgl = vec![ibv_sge {
                    addr: data.as_ptr() as usize as u64,
                    length: u32::try_from(data.len()).unwrap_or(u32::MAX),
                    lkey: 0,
                }];
            }
            let mut wr: ibv_send_wr = crate::verbs::zeroed();
            wr.wr_id = p.wr_id;
            wr.sg_list = sgl.as_mut_ptr();
            wr.num_sge = c_int::try_from(sgl.len()).unwrap_or(c_int::MAX);
            wr.opcode = p.opcode;
            wr.send_flags = flags;
            wr.imm_data = p.imm;
            match p.opcode {
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                    wr.wr.atomic = ibv_send_wr_atomic {
                        remote_addr: p.remote_addr,
                        compare_add: p.compare_add,
                        swap: p.swap,
                        rkey: p.rkey,
                    };
                }
                _ => match p.ud {
                    Some((ah, remote_qpn, remote_qkey)) => {
                        wr.wr.ud = ibv_send_wr_ud {
                            ah,
                            remote_qpn,
                            remote_qkey,
                        };
                    }
                    None => {
                        wr.wr.rdma = ibv_send_wr_rdma {
                            remote_addr: p.remote_addr,
                            rkey: p.rkey,
                        };
                    }
                },
            }
            if let Err(e) = post_one_send(&mut g, &wr, &mut sbuf, &mut heap, &mut inline) {
                return e;
            }
        }
        0
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    guard((), || {
        if let Some(q) = obj(qp) {
            *builder(q) = Builder::default();
        }
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    new_wr(qp, IBV_WR_SEND, |_| {});
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    new_wr(qp, IBV_WR_SEND_WITH_IMM, |p| p.imm = imm);
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    new_wr(qp, IBV_WR_SEND_WITH_INV, |p| p.imm = rkey);
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    new_wr(qp, IBV_WR_RDMA_WRITE, |p| {
        p.rkey = rkey;
        p.remote_addr = remote_addr;
    });
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    new_wr(qp, IBV_WR_RDMA_WRITE_WITH_IMM, |p| {
        p.rkey = rkey;
        p.remote_addr = remote_addr;
        p.imm = imm;
    });
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    new_wr(qp, IBV_WR_RDMA_READ, |p| {
        p.rkey = rkey;
        p.remote_addr = remote_addr;
    });
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    new_wr(qp, IBV_WR_ATOMIC_CMP_AND_SWP, |p| {
        p.rkey = rkey;
        p.remote_addr = remote_addr;
        p.compare_add = compare;
        p.swap = swap;
    });
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    new_wr(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, |p| {
        p.rkey = rkey;
        p.remote_addr = remote_addr;
        p.compare_add = add;
    });
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    current(qp, |p| {
        p.inline = None;
        p.sgl = vec![ibv_sge { addr, length, lkey }];
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    current(qp, |p| {
        p.inline = None;
        p.sgl = if num_sge == 0 {
            Vec::new()
        } else if sg_list.is_null() {
            // Refused at wr_complete (an SGE list the caller did not give).
            p.opcode = -1;
            Vec::new()
        } else {
            // SAFETY: the caller's list of `num_sge` SGEs.
            unsafe { core::slice::from_raw_parts(sg_list, num_sge) }.to_vec()
        };
    });
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: one buffer.
    unsafe { wr_set_inline_data_list(qp, 1, &buf) };
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    current(qp, |p| {
        let mut data = Vec::new();
        if num_buf > 0 && buf_list.is_null() {
            p.opcode = -1;
            return;
        }
        let bufs = if num_buf == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's list of `num_buf` buffers.
            unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
        };
        for b in bufs {
            if b.length == 0 {
                continue;
            }
            if b.addr.is_null() {
                p.opcode = -1;
                return;
            }
            // SAFETY: the caller's buffer of `length` readable bytes,
            // copied now (libibverbs copies inline data when it is set).
            data.extend_from_slice(unsafe {
                core::slice::from_raw_parts(b.addr.cast::<u8>(), b.length)
            });
        }
        p.sgl.clear();
        p.inline = Some(data);
    });
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    current(qp, |p| p.ud = Some((ah, remote_qpn, remote_qkey)));
}
