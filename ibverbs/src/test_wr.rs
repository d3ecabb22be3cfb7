//! What the C API tests share, written as a C program writes it: a device
//! found by name, `errno`, QP creation attributes, and the work requests
//! (`ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`) posted through the ops the
//! queue's context (or work queue) carries, as libibverbs' inline
//! `ibv_post_send`/`ibv_post_recv`/`ibv_post_srq_recv`/`ibv_post_wq_recv`
//! call them.

use core::ffi::c_int;
use core::ptr;

use crate::ffi::*;
use crate::verbs::*;

/// The device named `name` of the device list (which must end with NULL);
/// panics if there is none.
pub(crate) fn device(name: &str) -> *mut ibv_device {
    let mut n = 0;
    let list = ibv_get_device_list(&mut n);
    assert!(!list.is_null());
    let n = usize::try_from(n).unwrap();
    let mut found = ptr::null_mut();
    for i in 0..n {
        // SAFETY: the list has n entries.
        let d = unsafe { *list.add(i) };
        // SAFETY: a device name is a NUL-terminated string.
        let s = unsafe { core::ffi::CStr::from_ptr(ibv_get_device_name(d)) };
        if s.to_str().unwrap() == name {
            found = d;
        }
    }
    // SAFETY: the list has n entries and the NULL after them.
    assert!(unsafe { *list.add(n) }.is_null());
    ibv_free_device_list(list);
    assert!(!found.is_null(), "device {name}");
    found
}

/// `ibv_open_device` of the device named `name` and `ibv_alloc_pd` on it;
/// panics if either fails.
pub(crate) fn open_pd(name: &str) -> (*mut ibv_context, *mut ibv_pd) {
    let ctx = ibv_open_device(device(name));
    assert!(!ctx.is_null(), "open {name}");
    let pd = ibv_alloc_pd(ctx);
    assert!(!pd.is_null(), "PD on {name}");
    (ctx, pd)
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Queue capacities: `send_wr`/`recv_wr` work requests of
/// `send_sge`/`recv_sge` entries, no inline data.
pub(crate) fn qp_cap(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: 0,
    }
}

/// Creation attributes of a `qp_type` QP completing both directions on
/// `cq`, with capacities `cap`, no SRQ, selective signalling.
pub(crate) fn qp_init(cq: *mut ibv_cq, qp_type: c_int, cap: ibv_qp_cap) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: ptr::null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: ptr::null_mut(),
        cap,
        qp_type,
        sq_sig_all: 0,
    }
}

/// A scatter/gather entry of `length` bytes at `addr` in the region of
/// `mr` (its `lkey`).
pub(crate) fn sge(mr: *const ibv_mr, addr: u64, length: u32) -> ibv_sge {
    assert!(!mr.is_null());
    ibv_sge {
        addr,
        length,
        // SAFETY: a live MR (not null, checked above).
        lkey: unsafe { (*mr).lkey },
    }
}

/// A receive work request `wr_id` scattering into `sges` (none: a
/// receive that takes no data), not chained.
pub(crate) fn recv_wr(wr_id: u64, sges: &mut [ibv_sge]) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: if sges.is_empty() {
            ptr::null_mut()
        } else {
            sges.as_mut_ptr()
        },
        num_sge: c_int::try_from(sges.len()).unwrap(),
    }
}

/// A send work request `wr_id` of `opcode` (`IBV_WR_*`) gathering from
/// `sges`, with `send_flags` (`IBV_SEND_*`), not chained; every other
/// field zero.
pub(crate) fn send_wr(
    wr_id: u64,
    opcode: c_int,
    sges: &mut [ibv_sge],
    send_flags: u32,
) -> ibv_send_wr {
    // SAFETY: all-zero is a valid ibv_send_wr.
    let mut w: ibv_send_wr = unsafe { core::mem::zeroed() };
    w.wr_id = wr_id;
    if !sges.is_empty() {
        w.sg_list = sges.as_mut_ptr();
    }
    w.num_sge = c_int::try_from(sges.len()).unwrap();
    w.opcode = opcode;
    w.send_flags = send_flags;
    w
}

/// [`send_wr`] of an RDMA opcode, to `remote_addr` in the region of
/// `rkey`.
pub(crate) fn rdma_wr(
    wr_id: u64,
    opcode: c_int,
    sges: &mut [ibv_sge],
    send_flags: u32,
    remote_addr: u64,
    rkey: u32,
) -> ibv_send_wr {
    let mut w = send_wr(wr_id, opcode, sges, send_flags);
    w.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
    w
}

/// The post function of a queue `Q` for work requests `W`
/// (`ibv_context_ops::post_send` and its kin).
type PostFn<Q, W> = unsafe extern "C" fn(*mut Q, *mut W, *mut *mut W) -> c_int;

/// Calls `post` for queue `q` and the list starting at `wr`: Ok, or the
/// errno and the address of the first work request refused.
fn posted<Q, W>(post: PostFn<Q, W>, q: *mut Q, wr: &mut W) -> Result<(), (c_int, usize)> {
    let mut bad = ptr::null_mut();
    // SAFETY: `post` is the queue's own post function (the callers take
    // it from the live queue), given a valid list of work requests whose
    // SGEs the caller keeps alive.
    match unsafe { post(q, wr, &mut bad) } {
        0 => Ok(()),
        e => Err((e, bad as usize)),
    }
}

/// Posts the send list starting at `wr` on `qp` through its context's
/// `post_send`: Ok, or the errno and the first work request refused.
pub(crate) fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> Result<(), (c_int, usize)> {
    assert!(!qp.is_null());
    // SAFETY: a live QP of this library (not null); its context's ops
    // table lives as long as the context.
    posted(unsafe { (*(*qp).context).ops.post_send.unwrap() }, qp, wr)
}

/// Posts the receive list starting at `wr` on `qp` through its context's
/// `post_recv`: Ok, or the errno and the first work request refused.
pub(crate) fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> Result<(), (c_int, usize)> {
    assert!(!qp.is_null());
    // SAFETY: as in post_send.
    posted(unsafe { (*(*qp).context).ops.post_recv.unwrap() }, qp, wr)
}

/// Posts the receive list starting at `wr` on `srq` through its
/// context's `post_srq_recv`: Ok, or the errno and the first work
/// request refused.
pub(crate) fn post_srq_recv(srq: *mut ibv_srq, wr: &mut ibv_recv_wr) -> Result<(), (c_int, usize)> {
    assert!(!srq.is_null());
    // SAFETY: as in post_send, for a live SRQ.
    posted(
        unsafe { (*(*srq).context).ops.post_srq_recv.unwrap() },
        srq,
        wr,
    )
}

/// Posts the receive list starting at `wr` on the work queue `wq`
/// through its own `post_recv`: Ok, or the errno and the first work
/// request refused.
pub(crate) fn post_wq_recv(wq: *mut ibv_wq, wr: &mut ibv_recv_wr) -> Result<(), (c_int, usize)> {
    assert!(!wq.is_null());
    // SAFETY: a live WQ of this library (not null).
    posted(unsafe { (*wq).post_recv.unwrap() }, wq, wr)
}
