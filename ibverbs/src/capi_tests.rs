//! The C API driven as a C program drives it, in this process, on the
//! emulated devices of [`TEST_DEVICES`](crate::devices::TEST_DEVICES):
//! device list, open, queries, PD, MR on a Vec's memory (zero-copy), CQ on
//! a completion channel, RC QPs through their transitions, post and poll
//! through the context's ops table, and the errors of bad calls.

use core::ffi::{c_int, c_void};
use core::ptr;
use std::time::{Duration, Instant};

use crate::ffi::*;
use crate::mr::*;
use crate::test_wr::*;
use crate::verbs::*;

struct Side {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    chan: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    buf: Vec<u8>,
    mr: *mut ibv_mr,
    gid: ibv_gid,
}

const ACCESS: c_int = 1 | 2 | 4; // local write, remote write, remote read

fn open(name: &str) -> Side {
    let (ctx, pd) = open_pd(name);
    let chan = ibv_create_comp_channel(ctx);
    assert!(!chan.is_null());
    let cq = ibv_create_cq(ctx, 16, 0x5eed as *mut c_void, chan, 0);
    assert!(!cq.is_null());
    let mut init = qp_init(cq, IBV_QPT_RC, qp_cap(8, 8, 1, 1));
    let qp = ibv_create_qp(pd, &mut init);
    assert!(!qp.is_null());
    assert!(init.cap.max_send_wr >= 8 && init.cap.max_recv_wr >= 8);
    let mut buf = vec![0u8; 8192];
    let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ACCESS);
    assert!(!mr.is_null());
    let mut gid = ibv_gid::default();
    assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
    Side {
        ctx,
        pd,
        chan,
        cq,
        qp,
        buf,
        mr,
        gid,
    }
}

fn connect(s: &Side, remote_qpn: u32, dgid: ibv_gid) {
    let mut a = ibv_qp_attr {
        qp_state: 1,
        port_num: 1,
        qp_access_flags: ACCESS as u32,
        ..Default::default()
    };
    // STATE | ACCESS_FLAGS | PKEY_INDEX | PORT.
    assert_eq!(ibv_modify_qp(s.qp, &mut a, 1 | 8 | 16 | 32), 0);
    let mut a = ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: remote_qpn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    // STATE | AV | PATH_MTU | RQ_PSN | MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC |
    // DEST_QPN.
    let rtr = 1 | (1 << 7) | (1 << 8) | (1 << 12) | (1 << 15) | (1 << 17) | (1 << 20);
    assert_eq!(
        ibv_modify_qp(s.qp, &mut a, rtr & !(1 << 20)),
        libc::EINVAL,
        "RTR without DEST_QPN"
    );
    assert_eq!(ibv_modify_qp(s.qp, &mut a, rtr), 0);
    let mut a = ibv_qp_attr {
        qp_state: 3,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    // STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC.
    let rts = 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13);
    assert_eq!(ibv_modify_qp(s.qp, &mut a, rts), 0);
    // SAFETY: a live QP of this library.
    assert_eq!(unsafe { (*s.qp).state }, 3);
}

/// Registers `buf` on `pd` and connects the RC QP `qp` (on `cq`) to
/// itself through port 1: the MR.
fn reg_and_self_connect(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    buf: &mut [u8],
) -> *mut ibv_mr {
    let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ACCESS);
    assert!(!mr.is_null());
    let mut gid = ibv_gid::default();
    assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
    let s = Side {
        ctx,
        pd,
        chan: ptr::null_mut(),
        cq,
        qp,
        buf: Vec::new(),
        mr,
        gid,
    };
    // SAFETY: a live QP.
    connect(&s, unsafe { (*qp).qp_num }, gid);
    mr
}

/// Deregisters `mr` (over `buf`), destroys `cq` and `pd` and closes `ctx`,
/// each successfully: the end of a test whose QPs are gone.
fn close(ctx: *mut ibv_context, pd: *mut ibv_pd, cq: *mut ibv_cq, mr: *mut ibv_mr, buf: Vec<u8>) {
    assert_eq!(ibv_dereg_mr(mr), 0);
    drop(buf);
    assert_eq!(ibv_destroy_cq(cq), 0);
    assert_eq!(ibv_dealloc_pd(pd), 0);
    assert_eq!(ibv_close_device(ctx), 0);
}

fn ops(ctx: *mut ibv_context) -> &'static ibv_context_ops {
    // SAFETY: a live context; its ops table lives as long as it.
    unsafe { &(*ctx).ops }
}

fn poll_one(cq: *mut ibv_cq) -> ibv_wc {
    // SAFETY: a live CQ of this library.
    let poll = ops(unsafe { (*cq).context }).poll_cq.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = ibv_wc::default();
    loop {
        // SAFETY: one ibv_wc of room.
        let n = unsafe { poll(cq, 1, &mut wc) };
        assert!(n >= 0);
        if n == 1 {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
}

fn teardown(s: Side) {
    assert_eq!(ibv_destroy_qp(s.qp), 0);
    assert_eq!(ibv_dereg_mr(s.mr), 0);
    drop(s.buf);
    assert_eq!(
        ibv_destroy_comp_channel(s.chan),
        libc::EBUSY,
        "a CQ uses it"
    );
    assert_eq!(ibv_destroy_cq(s.cq), 0);
    assert_eq!(ibv_destroy_comp_channel(s.chan), 0);
    assert_eq!(ibv_dealloc_pd(s.pd), 0);
    assert_eq!(ibv_close_device(s.ctx), 0);
}

#[test]
fn rc_write_send_and_a_completion_event_through_the_c_api() {
    let mut a = open("ta");
    let b = open("tb");
    // SAFETY: live QPs.
    let (qa, qb) = unsafe { ((*a.qp).qp_num, (*b.qp).qp_num) };
    connect(&a, qb, b.gid);
    connect(&b, qa, a.gid);

    // A receive on b, then b's CQ armed: its channel's fd becomes readable
    // when the SEND lands.
    let mut rsge = [sge(b.mr, b.buf.as_ptr() as u64 + 4096, 64)];
    post_recv(b.qp, &mut recv_wr(7, &mut rsge)).unwrap();
    // SAFETY: live CQ.
    assert_eq!(unsafe { ops(b.ctx).req_notify_cq.unwrap()(b.cq, 0) }, 0);
    // SAFETY: the channel's fd; make it non-blocking.
    let fd = unsafe { (*b.chan).fd };
    // SAFETY: fcntl on our own eventfd.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let (mut ecq, mut ectx) = (ptr::null_mut(), ptr::null_mut());
    assert_eq!(ibv_get_cq_event(b.chan, &mut ecq, &mut ectx), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN)
    );

    // RDMA WRITE from a's Vec into b's Vec, then a SEND.
    a.buf[..5].copy_from_slice(b"hello");
    a.buf[100..104].copy_from_slice(b"ping");
    // SAFETY: a live MR.
    let brkey = unsafe { (*b.mr).rkey };
    let base = a.buf.as_ptr() as u64;
    let (mut s1, mut s2) = ([sge(a.mr, base, 5)], [sge(a.mr, base + 100, 4)]);
    let mut w2 = send_wr(2, IBV_WR_SEND, &mut s2, IBV_SEND_SIGNALED);
    let (flags, to) = (IBV_SEND_SIGNALED, b.buf.as_ptr() as u64 + 10);
    let mut w1 = rdma_wr(1, IBV_WR_RDMA_WRITE, &mut s1, flags, to, brkey);
    w1.next = &mut w2;
    post_send(a.qp, &mut w1).unwrap();
    let c1 = poll_one(a.cq);
    let c2 = poll_one(a.cq);
    assert_eq!((c1.wr_id, c1.status, c1.opcode), (1, 0, 1));
    assert_eq!((c2.wr_id, c2.status, c2.opcode), (2, 0, 0));

    // The channel's fd becomes readable; the event names b's CQ and its
    // context.
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, 10_000) };
    assert_eq!(r, 1, "the completion channel's fd became readable");
    assert_eq!(ibv_get_cq_event(b.chan, &mut ecq, &mut ectx), 0);
    assert_eq!(ecq, b.cq);
    assert_eq!(ectx as usize, 0x5eed);
    assert_eq!(ibv_destroy_cq(b.cq), libc::EBUSY, "the QP uses it");
    ibv_ack_cq_events(b.cq, 1);
    let rc = poll_one(b.cq);
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode, rc.byte_len),
        (7, 0, 128, 4)
    );
    // Zero-copy: the bytes are in b's Vec itself.
    assert_eq!(&b.buf[10..15], b"hello");
    assert_eq!(&b.buf[4096..4100], b"ping");

    // Bad calls: errno values, nothing posted.
    let mut w3 = send_wr(0, 77, &mut [], 0);
    let r = post_send(a.qp, &mut w3);
    assert_eq!(r, Err((libc::EINVAL, ptr::addr_of!(w3) as usize)));
    assert_eq!(ibv_dealloc_pd(a.pd), libc::EBUSY, "objects live in it");
    let mut gid = ibv_gid::default();
    assert_eq!(ibv_query_gid(a.ctx, 9, 0, &mut gid), libc::EINVAL);
    let mut attr = ibv_qp_attr::default();
    // SAFETY: all-zero is a valid ibv_qp_init_attr.
    let mut init: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
    assert_eq!(ibv_query_qp(a.qp, &mut attr, 0, &mut init), 0);
    assert_eq!(
        (attr.qp_state, attr.dest_qp_num, init.qp_type),
        (3, qb, IBV_QPT_RC)
    );
    init.send_cq = a.cq;
    init.recv_cq = a.cq;
    init.qp_type = 9; // XRC send: not offered
    assert!(ibv_create_qp(a.pd, &mut init).is_null());
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );
    assert!(ibv_reg_mr(a.pd, ptr::null_mut(), 64, ACCESS).is_null());
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    // ODP is not offered.
    let mut x = [0u8; 64];
    assert!(ibv_reg_mr(a.pd, x.as_mut_ptr().cast(), 64, ACCESS | 64).is_null());
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );

    teardown(a);
    teardown(b);
    // Destroyed objects are foreign pointers now.
    assert_eq!(ibv_close_device(ptr::null_mut()), libc::EINVAL);
}

#[test]
fn device_and_port_queries() {
    let ctx = ibv_open_device(device("tl"));
    assert!(!ctx.is_null());
    // SAFETY: all-zero is a valid ibv_device_attr.
    let mut da: ibv_device_attr = unsafe { core::mem::zeroed() };
    assert_eq!(ibv_query_device(ctx, &mut da), 0);
    assert_eq!(
        (da.vendor_id, da.vendor_part_id, da.phys_port_cnt),
        (0x02c9, 4115, 1)
    );
    let mut pa = ibv_port_attr::default();
    assert_eq!(ibv_query_port(ctx, 1, ptr::addr_of_mut!(pa).cast()), 0);
    assert_eq!((pa.state, pa.link_layer), (4, IBV_LINK_LAYER_ETHERNET));
    assert_eq!(
        ibv_query_port(ctx, 2, ptr::addr_of_mut!(pa).cast()),
        libc::EINVAL
    );
    let mut t = -1;
    assert_eq!(ibv_query_gid_type(ctx, 1, 1, &mut t), 0);
    assert_eq!(t, 1, "GID 1 is RoCE v2");
    let mut e = ibv_gid_entry::default();
    assert_eq!(
        _ibv_query_gid_ex(ctx, 1, 0, &mut e, 0, size_of::<ibv_gid_entry>()),
        0
    );
    assert_eq!(e.gid_type, IBV_GID_TYPE_ROCE_V1);
    assert_eq!(
        _ibv_query_gid_ex(ctx, 1, 5, &mut e, 0, size_of::<ibv_gid_entry>()),
        libc::ENODATA
    );
    let mut k = 0u16;
    assert_eq!(ibv_query_pkey(ctx, 1, 0, &mut k), 0);
    assert_eq!(u16::from_be(k), 0xffff);
    assert_eq!(ibv_get_pkey_index(ctx, 1, 0xffffu16.to_be()), 0);
    assert_eq!(ibv_close_device(ctx), 0);
    assert_eq!(ibv_close_device(ctx), libc::EINVAL, "closed twice");
}

#[test]
fn the_wr_builder_of_an_extended_qp() {
    // One QP connected to itself through a loopback plug.
    let (ctx, pd) = open_pd("tl");
    let cq = ibv_create_cq(ctx, 16, ptr::null_mut(), ptr::null_mut(), 0);
    assert!(!pd.is_null() && !cq.is_null());
    // SAFETY: all-zero is a valid ibv_qp_init_attr_ex.
    let mut ia: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = ibv_qp_cap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd = pd;
    ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
    // A send-ops flag the library does not offer (TSO).
    ia.send_ops_flags |= 1 << 10;
    // SAFETY: a live context and valid attributes.
    assert!(unsafe { op_create_qp_ex(ctx, &mut ia) }.is_null());
    ia.send_ops_flags &= !(1 << 10);
    // SAFETY: as above.
    let qp = unsafe { op_create_qp_ex(ctx, &mut ia) };
    assert!(!qp.is_null());
    let plain = ibv_create_qp(pd, ptr::addr_of_mut!(ia).cast());
    assert!(!plain.is_null());
    assert!(
        ibv_qp_to_qp_ex(plain).is_null(),
        "a QP without send-ops flags"
    );
    assert_eq!(ibv_destroy_qp(plain), 0);
    let qpx = ibv_qp_to_qp_ex(qp);
    assert!(!qpx.is_null());
    let mut buf = vec![0u8; 4096];
    let mr = reg_and_self_connect(ctx, pd, cq, qp, &mut buf);
    // SAFETY: a live MR and extended QP of this library; the builder's
    // functions are installed.
    let (lkey, rkey, x) = unsafe { ((*mr).lkey, (*mr).rkey, &mut *qpx) };

    // A setter outside wr_start..wr_complete: EINVAL, nothing posted.
    // SAFETY: the builder's functions on a live extended QP.
    unsafe {
        x.wr_set_sge.unwrap()(qpx, lkey, buf.as_ptr() as u64, 4);
        x.wr_start.unwrap()(qpx);
        x.wr_set_sge.unwrap()(qpx, lkey, buf.as_ptr() as u64, 4);
        assert_eq!(x.wr_complete.unwrap()(qpx), libc::EINVAL);
        assert!(x.wr_rdma_read.is_none(), "not asked for");
    }

    // RDMA WRITE of bytes 0..5 to 1000.., then an inline RDMA WRITE.
    buf[..5].copy_from_slice(b"write");
    let mut inline = *b"inline";
    // SAFETY: as above; the inline data is copied when set.
    unsafe {
        x.wr_start.unwrap()(qpx);
        x.wr_id = 11;
        x.wr_flags = IBV_SEND_SIGNALED;
        x.wr_rdma_write.unwrap()(qpx, rkey, buf.as_ptr() as u64 + 1000);
        x.wr_set_sge.unwrap()(qpx, lkey, buf.as_ptr() as u64, 5);
        x.wr_id = 12;
        x.wr_rdma_write.unwrap()(qpx, rkey, buf.as_ptr() as u64 + 2000);
        x.wr_set_inline_data.unwrap()(qpx, inline.as_mut_ptr().cast(), inline.len());
        inline.fill(0);
        assert_eq!(x.wr_complete.unwrap()(qpx), 0);
    }
    let c1 = poll_one(cq);
    let c2 = poll_one(cq);
    assert_eq!((c1.wr_id, c1.status, c2.wr_id, c2.status), (11, 0, 12, 0));
    // The device wrote the Vec behind our back: read it through a raw
    // pointer, as any DMA memory.
    let mut got = [0u8; 6];
    // SAFETY: reading bytes of the live Vec.
    unsafe { ptr::copy_nonoverlapping(buf.as_ptr().add(1000), got.as_mut_ptr(), 5) };
    assert_eq!(&got[..5], b"write");
    // SAFETY: as above.
    unsafe { ptr::copy_nonoverlapping(buf.as_ptr().add(2000), got.as_mut_ptr(), 6) };
    assert_eq!(&got, b"inline");

    assert_eq!(ibv_destroy_qp(qp), 0);
    close(ctx, pd, cq, mr, buf);
}

#[test]
fn the_srq_limit_event_comes_through_ibv_get_async_event() {
    // An RC QP on an SRQ, connected to itself through a loopback plug.
    let ctx = ibv_open_device(device("tl"));
    assert!(!ctx.is_null());
    // SAFETY: a live context.
    let afd = unsafe { (*ctx).async_fd };
    assert!(afd >= 0);
    let pd = ibv_alloc_pd(ctx);
    let cq = ibv_create_cq(ctx, 32, ptr::null_mut(), ptr::null_mut(), 0);
    let mut sia = ibv_srq_init_attr {
        srq_context: ptr::null_mut(),
        attr: ibv_srq_attr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        },
    };
    let srq = ibv_create_srq(pd, &mut sia);
    assert!(!srq.is_null());
    let mut init = ibv_qp_init_attr {
        srq,
        sq_sig_all: 1,
        ..qp_init(cq, IBV_QPT_RC, qp_cap(8, 0, 1, 1))
    };
    let qp = ibv_create_qp(pd, &mut init);
    assert!(!qp.is_null());
    let mut buf = vec![0u8; 4096];
    let mr = reg_and_self_connect(ctx, pd, cq, qp, &mut buf);

    // Four receives, the limit at 3: two SENDs take two of them.
    for i in 0..4u64 {
        let mut sg = [sge(mr, buf.as_ptr() as u64 + 1024 + i * 64, 64)];
        post_srq_recv(srq, &mut recv_wr(100 + i, &mut sg)).unwrap();
    }
    let mut lim = ibv_srq_attr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: 3,
    };
    assert_eq!(ibv_modify_srq(srq, &mut lim, IBV_SRQ_LIMIT), 0);
    assert_eq!(
        ibv_modify_srq(srq, &mut lim, IBV_SRQ_MAX_WR),
        libc::EOPNOTSUPP
    );
    let mut q = ibv_srq_attr::default();
    assert_eq!(ibv_query_srq(srq, &mut q), 0);
    assert_eq!(q.srq_limit, 3);
    // SAFETY: fcntl on the context's async_fd.
    unsafe { libc::fcntl(afd, libc::F_SETFL, libc::O_NONBLOCK) };
    // SAFETY: all-zero is a valid ibv_async_event.
    let mut ev: ibv_async_event = unsafe { core::mem::zeroed() };
    assert_eq!(ibv_get_async_event(ctx, &mut ev), -1, "no event yet");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN)
    );
    for i in 0..2u64 {
        let mut sg = [sge(mr, buf.as_ptr() as u64, 8)];
        post_send(qp, &mut send_wr(i, IBV_WR_SEND, &mut sg, 0)).unwrap();
    }
    for _ in 0..4 {
        assert_eq!(poll_one(cq).status, 0);
    }
    // The async_fd becomes readable; the event names the SRQ.
    let mut pfd = libc::pollfd {
        fd: afd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 10_000) }, 1);
    assert_eq!(ibv_get_async_event(ctx, &mut ev), 0);
    assert_eq!(ev.event_type, crate::async_ev::ty::SRQ_LIMIT_REACHED);
    // SAFETY: the member an SRQ event sets.
    assert_eq!(unsafe { ev.element.srq }, srq);
    ibv_ack_async_event(&mut ev);
    // SAFETY: a live SRQ.
    assert_eq!(unsafe { (*srq).events_completed }, 1);
    assert_eq!(ibv_query_srq(srq, &mut q), 0);
    assert_eq!(q.srq_limit, 0, "disarmed by the event");

    assert_eq!(ibv_destroy_srq(srq), libc::EBUSY, "the QP uses it");
    assert_eq!(ibv_destroy_qp(qp), 0);
    assert_eq!(ibv_destroy_srq(srq), 0);
    close(ctx, pd, cq, mr, buf);
}

#[test]
fn rereg_mr_moves_a_region_to_other_memory() {
    let (ctx, pd) = open_pd("tl");
    let pd2 = ibv_alloc_pd(ctx);
    assert!(!pd.is_null() && !pd2.is_null());
    let mut a = vec![0u8; 8192];
    let mut b = vec![0u8; 4096];
    let mr = ibv_reg_mr(pd, a.as_mut_ptr().cast(), a.len(), ACCESS);
    assert!(!mr.is_null());
    // SAFETY: a live MR.
    let key0 = unsafe { (*mr).lkey };
    // Nothing asked, or an unknown flag: input errors, the region unchanged.
    assert_eq!(
        ibv_rereg_mr(mr, 0, ptr::null_mut(), ptr::null_mut(), 0, 0),
        -1
    );
    assert_eq!(
        ibv_rereg_mr(mr, 8, ptr::null_mut(), ptr::null_mut(), 0, 0),
        -1
    );
    // SAFETY: as above.
    assert_eq!(unsafe { (*mr).lkey }, key0);
    // PD or access changes are refused (mlx5 would keep the keys; the
    // driver cannot), the region unchanged.
    assert_eq!(
        ibv_rereg_mr(mr, 4, ptr::null_mut(), ptr::null_mut(), 0, 1),
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );
    assert_eq!(ibv_rereg_mr(mr, 2, pd2, ptr::null_mut(), 0, 0), -1);
    // SAFETY: as above.
    assert_eq!(unsafe { ((*mr).lkey, (*mr).pd) }, (key0, pd));
    // Translation: other memory, a new key.
    assert_eq!(
        ibv_rereg_mr(mr, 1, ptr::null_mut(), b.as_mut_ptr().cast(), b.len(), 0),
        0
    );
    // SAFETY: as above.
    unsafe {
        assert_eq!(((*mr).addr, (*mr).length), (b.as_mut_ptr().cast(), b.len()));
        assert_ne!((*mr).lkey, key0);
    }
    assert_eq!(
        ibv_rereg_mr(mr, 1, ptr::null_mut(), ptr::null_mut(), 64, 0),
        -1
    );
    assert_eq!(ibv_dealloc_pd(pd2), 0, "nothing in it");
    assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY, "the region is in it");
    let pd3 = pd;
    assert_eq!(ibv_dereg_mr(mr), 0);
    drop((a, b));
    assert_eq!(ibv_dealloc_pd(pd3), 0);
    assert_eq!(ibv_close_device(ctx), 0);
}

/// A CQ on a channel with one completion event read: an RDMA WRITE with
/// immediate data of the self-connected `qp` into its own receive queue.
fn one_event(
    ctx: *mut ibv_context,
    chan: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    buf: &mut [u8],
) {
    // SAFETY: a live MR.
    let rkey = unsafe { (*mr).rkey };
    post_recv(qp, &mut recv_wr(1, &mut [])).unwrap();
    // SAFETY: live CQ.
    assert_eq!(unsafe { ops(ctx).req_notify_cq.unwrap()(cq, 0) }, 0);
    let (base, mut sg) = (buf.as_ptr() as u64, [sge(mr, buf.as_ptr() as u64, 8)]);
    let op = IBV_WR_RDMA_WRITE_WITH_IMM;
    post_send(qp, &mut rdma_wr(2, op, &mut sg, 0, base + 64, rkey)).unwrap();
    let (mut ecq, mut ectx) = (ptr::null_mut(), ptr::null_mut());
    assert_eq!(ibv_get_cq_event(chan, &mut ecq, &mut ectx), 0);
    assert_eq!(ecq, cq);
    assert_eq!(poll_one(cq).wr_id, 1);
}

/// libibverbs' `ibv_destroy_cq` waits for the acknowledgement of the
/// events read from the CQ: here another thread gives it, and the destroy
/// returns once it did. With none given, the destroy gives up waiting,
/// destroys the CQ all the same and leaves nothing behind: its channel is
/// free to go (the CQ is unbound, its device object destroyed).
#[test]
fn destroy_cq_waits_for_its_events_acknowledgement_and_leaks_nothing() {
    let (ctx, pd) = open_pd("tl");
    let chan = ibv_create_comp_channel(ctx);
    assert!(!pd.is_null() && !chan.is_null());
    let mut buf = vec![0u8; 4096];
    let mut mr: *mut ibv_mr = ptr::null_mut();
    for round in 0..2 {
        let cq = ibv_create_cq(ctx, 16, ptr::null_mut(), chan, 0);
        assert!(!cq.is_null());
        let mut init = qp_init(cq, IBV_QPT_RC, qp_cap(4, 4, 1, 1));
        let qp = ibv_create_qp(pd, &mut init);
        assert!(!qp.is_null());
        if mr.is_null() {
            mr = reg_and_self_connect(ctx, pd, cq, qp, &mut buf);
        } else {
            // SAFETY: a live QP.
            let (qpn, mut gid) = (unsafe { (*qp).qp_num }, ibv_gid::default());
            assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
            let s = Side {
                ctx,
                pd,
                chan,
                cq,
                qp,
                buf: Vec::new(),
                mr,
                gid,
            };
            connect(&s, qpn, gid);
        }
        one_event(ctx, chan, cq, qp, mr, &mut buf);
        assert_eq!(ibv_destroy_qp(qp), 0);
        if round == 0 {
            // Another thread acknowledges the event a while later.
            let acked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (c, a) = (cq as usize, acked.clone());
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                a.store(true, std::sync::atomic::Ordering::SeqCst);
                ibv_ack_cq_events(c as *mut ibv_cq, 1);
            });
            assert_eq!(ibv_destroy_cq(cq), 0);
            assert!(
                acked.load(std::sync::atomic::Ordering::SeqCst),
                "the destroy returned before the acknowledgement"
            );
            t.join().unwrap();
        } else {
            // Nobody acknowledges: the wait ends, the CQ goes all the same.
            set_destroy_ack_wait(Duration::from_millis(200));
            assert_eq!(ibv_destroy_cq(cq), 0);
            // A stale pointer: ignored.
            ibv_ack_cq_events(cq, 1);
            assert_eq!(ibv_destroy_cq(cq), libc::EINVAL);
        }
    }
    // The channel has no CQ left (a CQ given up would keep it: EBUSY).
    assert_eq!(ibv_destroy_comp_channel(chan), 0);
    assert_eq!(ibv_dereg_mr(mr), 0);
    drop(buf);
    assert_eq!(ibv_dealloc_pd(pd), 0);
    assert_eq!(ibv_close_device(ctx), 0);
}

/// `ibv_import_device`, `ibv_import_pd`, `ibv_import_mr` in one process:
/// a context imported by a `dup` of another's `cmd_fd` shares its PD and
/// region (same keys); an RDMA WRITE between a QP of each context, on the
/// shared PD, through the imported region's keys, lands in the region's
/// memory; bad descriptors and handles are refused; unimporting leaves
/// the objects to their owner.
#[test]
fn import_device_pd_and_mr_of_a_context_of_this_process() {
    let (ctx, pd) = open_pd("tl");
    let mut buf = vec![0u8; 4096];
    let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ACCESS);
    assert!(!mr.is_null());

    // A descriptor that is no context's: EOPNOTSUPP; a closed one: EBADF.
    // SAFETY: a new eventfd, closed below.
    let other = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(ibv_import_device(other).is_null());
    assert_eq!(errno(), libc::EOPNOTSUPP);
    // SAFETY: our own descriptor.
    unsafe { libc::close(other) };
    assert!(ibv_import_device(-1).is_null());
    assert_eq!(errno(), libc::EBADF);

    // SAFETY: a live context's descriptor, duplicated for the import to own.
    let fd = unsafe { libc::dup((*ctx).cmd_fd) };
    let ctx2 = ibv_import_device(fd);
    assert!(!ctx2.is_null());
    // SAFETY: live contexts.
    unsafe { assert_eq!((*ctx2).device, (*ctx).device) };
    // SAFETY: a live PD and region.
    let (pdh, mrh, lkey, rkey) = unsafe { ((*pd).handle, (*mr).handle, (*mr).lkey, (*mr).rkey) };
    assert!(ibv_import_pd(ctx2, pdh + 1000).is_null());
    assert_eq!(errno(), libc::EINVAL);
    let pd2 = ibv_import_pd(ctx2, pdh);
    assert!(!pd2.is_null());
    assert!(ibv_import_mr(pd2, mrh ^ 0x100).is_null());
    let mr2 = ibv_import_mr(pd2, mrh);
    assert!(!mr2.is_null());
    // SAFETY: the imported region.
    unsafe {
        assert_eq!(
            ((*mr2).lkey, (*mr2).rkey, (*mr2).length),
            (lkey, rkey, 4096)
        );
        assert!((*mr2).addr.is_null(), "the kernel gives no address");
        assert_eq!(((*pd2).handle, (*pd2).context), (pdh, ctx2));
    }
    assert_eq!(ibv_dereg_mr(mr), libc::EBUSY, "imported elsewhere");

    // A QP on the imported context and PD writes, through the imported
    // region's keys, into the region (a self-connected QP).
    let cq = ibv_create_cq(ctx2, 16, ptr::null_mut(), ptr::null_mut(), 0);
    assert!(!cq.is_null());
    let mut init = qp_init(cq, IBV_QPT_RC, qp_cap(4, 4, 1, 1));
    let qp = ibv_create_qp(pd2, &mut init);
    assert!(!qp.is_null());
    let mut gid = ibv_gid::default();
    assert_eq!(ibv_query_gid(ctx2, 1, 1, &mut gid), 0);
    let s = Side {
        ctx: ctx2,
        pd: pd2,
        chan: ptr::null_mut(),
        cq,
        qp,
        buf: Vec::new(),
        mr: mr2,
        gid,
    };
    // SAFETY: a live QP.
    connect(&s, unsafe { (*qp).qp_num }, gid);
    buf[..8].copy_from_slice(b"imported");
    let (base, mut sg) = (buf.as_ptr() as u64, [sge(mr2, buf.as_ptr() as u64, 8)]);
    let (op, flags) = (IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED);
    post_send(qp, &mut rdma_wr(9, op, &mut sg, flags, base + 2048, rkey)).unwrap();
    let wc = poll_one(cq);
    assert_eq!((wc.wr_id, wc.status), (9, 0));
    let mut got = [0u8; 8];
    // SAFETY: reading bytes of the live Vec the device wrote.
    unsafe { ptr::copy_nonoverlapping(buf.as_ptr().add(2048), got.as_mut_ptr(), 8) };
    assert_eq!(&got, b"imported");
    assert_eq!(ibv_destroy_qp(qp), 0);
    assert_eq!(ibv_destroy_cq(cq), 0);

    // Unimported: the owner's objects stay, and go with their owner.
    ibv_unimport_mr(mr2);
    ibv_unimport_pd(pd2);
    assert_eq!(ibv_close_device(ctx2), 0);
    // SAFETY: the owner's region is live.
    assert_eq!(unsafe { (*mr).lkey }, lkey);
    assert_eq!(ibv_dereg_mr(mr), 0);
    drop(buf);
    assert_eq!(ibv_dealloc_pd(pd), 0);
    assert_eq!(ibv_close_device(ctx), 0);
}
