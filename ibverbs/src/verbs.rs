//! The exported verbs.
//!
//! Every object the library hands out is a `#[repr(C)]` box whose first
//! field is the C struct the program sees (so the two addresses are the
//! same), followed by the driver's object. Pointers given back by the
//! program are checked against the [`registry`] on the control path; the
//! data path (post, poll, notify) trusts them, as libibverbs does.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::offset_of;
use core::ptr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use hca_driver::IbMtu;
use hca_driver::verbs::{
    AccessFlags, Ah, AhAttr, CompChannel, Context, Cq, GlobalRoute, PathMigState, Pd, Qp, QpAttr,
    QpAttrMask, QpCap, QpCreateFlags, QpInitAttr, QpState, QpType, RateLimit, RecvWr, RoceVersion,
    SendFlags, SendOp, SendWr, Sge, Srq, SrqInitAttr, WcFlags, WorkCompletion,
};
use hca_driver::{LinkLayer, PortState};

use crate::async_ev::{ContextEvents, Element, ty};
use crate::devices::{self, DevEntry};
use crate::ffi::*;
use crate::registry::{self, Kind};
use crate::{Dev, P, errno_of, guard, set_errno, status_of};

// ---------------------------------------------------------------------
// Objects.

/// A context: the `verbs_context` (with the `ibv_context` at its end)
/// first.
#[repr(C)]
pub struct CtxObj {
    v: verbs_context,
    entry: &'static DevEntry,
    dev: Option<Arc<Dev>>,
    ctx: Option<Arc<Context<P>>>,
    events: Arc<ContextEvents>,
    /// The descriptor behind `cmd_fd` (closed with the context).
    _cmd_fd: OwnedFd,
}

#[repr(C)]
struct PdObj {
    c: ibv_pd,
    pd: Arc<Pd<P>>,
}

#[repr(C)]
pub(crate) struct CqObj {
    /// The C view: an `ibv_cq_ex` (its first members are the `ibv_cq`);
    /// its poll functions are set for CQs made by `ibv_create_cq_ex`.
    pub(crate) c: ibv_cq_ex,
    pub(crate) cq: Arc<Cq<P>>,
    /// The completion `ibv_start_poll`/`ibv_next_poll` took last.
    pub(crate) cur: Mutex<WorkCompletion>,
    /// The raw Ethernet fields of that completion's CQE.
    pub(crate) cur_rx: Mutex<hca_driver::verbs::RxCqe>,
    /// Held while events are acknowledged; `ibv_destroy_cq` waits on
    /// [`acked`](Self::acked) for the acknowledgements (libibverbs' `cq->mutex`
    /// and `cq->cond`).
    pub(crate) ack_lock: Mutex<()>,
    /// Signalled by `ibv_ack_cq_events`.
    pub(crate) acked: std::sync::Condvar,
}

#[repr(C)]
struct ChanObj {
    c: ibv_comp_channel,
    ch: Arc<CompChannel<P>>,
    /// The CQs on the channel (CQ number -> the CQ's object), to name the
    /// CQ of an event.
    cqs: Mutex<Vec<(u32, usize)>>,
}

#[repr(C)]
pub(crate) struct QpObj {
    /// The C view: an `ibv_qp_ex` (whose first member is the `ibv_qp`), so
    /// that `ibv_qp_to_qp_ex` can hand it out.
    pub(crate) c: ibv_qp_ex,
    pub(crate) qp: Mutex<Qp<P>>,
    sq_sig_all: bool,
    /// The `ibv_wr_*` work requests being built (QPs created with send-ops
    /// flags).
    pub(crate) builder: Mutex<crate::qpex::Builder>,
}

#[repr(C)]
struct SrqObj {
    c: ibv_srq,
    srq: Arc<Srq<P>>,
}

#[repr(C)]
struct AhObj {
    c: ibv_ah,
    ah: Ah<P>,
}

/// The context object of an `ibv_context` pointer (not checked).
fn ctx_obj(ctx: *mut ibv_context) -> *mut CtxObj {
    ctx.cast::<u8>()
        .wrapping_sub(offset_of!(verbs_context, context))
        .cast::<CtxObj>()
}

/// The context object of a live context, or `None`.
pub(crate) fn live_ctx<'a>(ctx: *mut ibv_context) -> Option<&'a CtxObj> {
    let o = ctx_obj(ctx);
    if ctx.is_null() || !registry::is_live(o, Kind::Context) {
        return None;
    }
    // SAFETY: the registry says `o` is a live CtxObj (boxed by
    // ibv_open_device, not yet freed by ibv_close_device).
    Some(unsafe { &*o })
}

/// A live object of kind `k` at `p`, or `None`.
pub(crate) fn live<'a, T>(p: *mut T, k: Kind) -> Option<&'a T> {
    if registry::is_live(p, k) {
        // SAFETY: the registry says `p` is a live object of this kind,
        // boxed by its create function and not yet destroyed.
        Some(unsafe { &*p })
    } else {
        None
    }
}

/// The destroy call of an object that may be in use: `EINVAL` when `p` is
/// not a live object of kind `k`, `EBUSY` (and it stays) while `busy` says
/// something still uses it, else it is forgotten and handed to `destroy`.
fn destroy_idle<T>(
    p: *mut T,
    k: Kind,
    busy: impl FnOnce(&T) -> bool,
    destroy: impl FnOnce(Box<T>) -> c_int,
) -> c_int {
    let Some(o) = live(p, k) else {
        return libc::EINVAL;
    };
    if busy(o) {
        return libc::EBUSY;
    }
    registry::take(p, k).map_or(libc::EINVAL, destroy)
}

pub(crate) fn zeroed<T>() -> T {
    // SAFETY: used only for the C structs of ffi, for which all-zero bytes
    // are a valid value (integers, null pointers, None function pointers,
    // glibc's static mutex/cond initialisers).
    unsafe { core::mem::zeroed() }
}

/// Returns NULL with `errno` set.
pub(crate) fn fail<T>(e: i32) -> *mut T {
    set_errno(e);
    ptr::null_mut()
}

impl CtxObj {
    fn ctx(&self) -> &Arc<Context<P>> {
        self.ctx
            .as_ref()
            .expect("a live context has its driver context")
    }

    fn cptr(&self) -> *mut ibv_context {
        ptr::addr_of!(self.v.context).cast_mut()
    }
}

// ---------------------------------------------------------------------
// Devices.

/// `ibv_get_device_list`: the devices of `HCA_IBV_DEVICES`, in a
/// NULL-terminated array freed with `ibv_free_device_list`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(ptr::null_mut(), || {
        let list = match devices::devices() {
            Ok(l) => l,
            Err(_) => return fail(libc::EINVAL),
        };
        // SAFETY: calloc of (n + 1) pointers; checked for NULL below.
        let arr = unsafe { libc::calloc(list.len() + 1, size_of::<*mut ibv_device>()) }
            .cast::<*mut ibv_device>();
        if arr.is_null() {
            return fail(libc::ENOMEM);
        }
        for (i, e) in list.iter().enumerate() {
            // SAFETY: `arr` has room for list.len() + 1 pointers.
            unsafe { *arr.add(i) = ptr::addr_of!(e.c).cast_mut() };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL.
            unsafe { *num_devices = c_int::try_from(list.len()).unwrap_or(c_int::MAX) };
        }
        arr
    })
}

/// `ibv_free_device_list`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from ibv_get_device_list's calloc (or is NULL,
    // which free accepts).
    unsafe { libc::free(list.cast()) };
}

/// `ibv_get_device_name`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match devices::find(device) {
        Some(e) => e.c.name.as_ptr(),
        None => fail::<c_char>(libc::EINVAL),
    }
}

/// `ibv_get_device_guid`: the node GUID in network byte order.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || match devices::find(device) {
        Some(e) => match e.guid() {
            Ok(g) => g.to_be(),
            Err(msg) => {
                log::error!("{msg}");
                set_errno(libc::EIO);
                0
            }
        },
        None => {
            set_errno(libc::EINVAL);
            0
        }
    })
}

/// `ibv_get_device_index`: the position in the list (-1 unknown).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    devices::devices()
        .ok()
        .and_then(|l| l.iter().position(|e| ptr::eq(&e.c, device)))
        .map_or(-1, |i| c_int::try_from(i).unwrap_or(-1))
}

unsafe extern "C" fn op_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    query_port_into(ctx, port, attr.cast(), len.min(size_of::<ibv_port_attr>()))
}

unsafe extern "C" fn op_query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    len: usize,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller passes a valid input or NULL.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return libc::EINVAL;
        }
        let Some(c) = live_ctx(ctx) else {
            return libc::EINVAL;
        };
        if attr.is_null() || len < size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        let mut ex: ibv_device_attr_ex = zeroed();
        ex.orig_attr = device_attr(c);
        ex.phys_port_cnt_ex = u32::from(ex.orig_attr.phys_port_cnt);
        let d = *c.ctx().query_device();
        ex.device_cap_flags_ex = u64::from(ex.orig_attr.device_cap_flags) | d.device_cap_flags;
        ex.raw_packet_caps = d.raw_packet_caps;
        // Packet pacing, for raw packet QPs only (mlx5_ib's
        // `packet_pacing_caps`).
        if let Some(pp) = d.packet_pacing {
            ex.packet_pacing_caps = ibv_packet_pacing_caps {
                qp_rate_limit_min: pp.min_rate_kbps,
                qp_rate_limit_max: pp.max_rate_kbps,
                supported_qpts: 1 << IBV_QPT_RAW_PACKET,
            };
        }
        let n = len.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: `attr` has room for `len` bytes (the caller's size);
        // `n` is at most that and at most our struct.
        unsafe {
            ptr::write_bytes(attr.cast::<u8>(), 0, len);
            ptr::copy_nonoverlapping(ptr::addr_of!(ex).cast::<u8>(), attr.cast::<u8>(), n);
        }
        0
    })
}

/// `ibv_open_device`: brings the device up (if no other context has) and
/// opens a driver context on it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(ptr::null_mut(), || {
        let Some(entry) = devices::find(device) else {
            return fail(libc::EINVAL);
        };
        let dev = match entry.acquire() {
            Ok(d) => d,
            Err(msg) => {
                eprintln!("libibverbs (hca-ibverbs): {msg}");
                return fail(libc::EIO);
            }
        };
        let ctx = match Context::open(dev.hca()) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                eprintln!("libibverbs (hca-ibverbs): {}: {e}", entry.name());
                let _ = entry.release(dev);
                return fail(errno_of(&e));
            }
        };
        let events = match ContextEvents::new() {
            Ok(e) => e,
            Err(e) => {
                let _ = Context::try_destroy(ctx);
                let _ = entry.release(dev);
                return fail(e.raw_os_error().unwrap_or(libc::EMFILE));
            }
        };
        // A memfd: a file of its own (every eventfd shares one inode), so
        // that ibv_import_device knows the context by its descriptor.
        // SAFETY: a NUL-terminated name and valid flags; checked below.
        let raw = unsafe { libc::memfd_create(c"hca-ibverbs-context".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            let _ = Context::try_destroy(ctx);
            let _ = entry.release(dev);
            return fail(libc::EMFILE);
        }
        // SAFETY: a new descriptor nothing else owns.
        let cmd_fd = unsafe { OwnedFd::from_raw_fd(raw) };
        publish_context(device, entry, dev, ctx, events, cmd_fd)
    })
}

/// Publishes a context object over driver context `ctx` of `dev`, with its
/// own asynchronous events and `cmd_fd`; returns its `ibv_context`.
fn publish_context(
    device: *mut ibv_device,
    entry: &'static DevEntry,
    dev: Arc<Dev>,
    ctx: Arc<Context<P>>,
    events: Arc<ContextEvents>,
    cmd_fd: OwnedFd,
) -> *mut ibv_context {
    {
        dev.subscribers().add(&events);
        let mut v: verbs_context = zeroed();
        v.query_port = Some(op_query_port);
        v.query_device_ex = Some(op_query_device_ex);
        v.create_qp_ex = Some(op_create_qp_ex);
        v.create_cq_ex = Some(op_create_cq_ex);
        v.ibv_create_flow = Some(crate::flow::op_create_flow);
        v.ibv_destroy_flow = Some(crate::flow::op_destroy_flow);
        v.modify_qp_rate_limit = Some(op_modify_qp_rate_limit);
        crate::wq::install(&mut v);
        v.sz = size_of::<verbs_context>();
        v.context.device = device;
        // A descriptor standing for the context (libibverbs' is the
        // kernel's uverbs device): programs dup and pass it around
        // (ibv_import_device finds the context by it, in this process).
        v.context.cmd_fd = cmd_fd.as_raw_fd();
        v.context.async_fd = events.fd();
        v.context.num_comp_vectors = 1;
        v.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        v.context.ops.poll_cq = Some(op_poll_cq);
        v.context.ops.req_notify_cq = Some(op_req_notify_cq);
        v.context.ops.post_send = Some(op_post_send);
        v.context.ops.post_recv = Some(op_post_recv);
        v.context.ops.post_srq_recv = Some(op_post_srq_recv);
        let obj = registry::publish(
            CtxObj {
                v,
                entry,
                dev: Some(dev),
                ctx: Some(ctx),
                events,
                _cmd_fd: cmd_fd,
            },
            Kind::Context,
        );
        // SAFETY: `obj` was just boxed.
        unsafe { (*obj).cptr() }
    }
}

/// The `(st_dev, st_ino)` of descriptor `fd`: a `dup` of it, or the same
/// descriptor passed to another process, has the same.
fn file_id(fd: c_int) -> Option<(u64, u64)> {
    let mut st: libc::stat = zeroed();
    // SAFETY: fstat writes the caller's struct; a bad fd gives -1.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// `ibv_import_device` (`IBVERBS_1.10`): a new context over the device
/// context whose `cmd_fd` (or a `dup` of it) is `cmd_fd`, as rdma-core's
/// shares the kernel's uverbs file: the two contexts share their PDs, MRs
/// and other objects, each has its own asynchronous events; the new
/// context owns `cmd_fd` (closed by `ibv_close_device`). Only a context
/// of this process can be imported: a device is driven by the process
/// that opened it (its VFIO descriptors, or the emulated device in its
/// memory), which another process has no way into; any other descriptor
/// gets `EOPNOTSUPP`, as a kernel without the import command gives.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    guard(ptr::null_mut(), || {
        let Some(id) = file_id(cmd_fd) else {
            return fail(libc::EBADF);
        };
        let found = registry::live_of(Kind::Context).into_iter().find_map(|o| {
            let c = live(o as *mut CtxObj, Kind::Context)?;
            (file_id(c._cmd_fd.as_raw_fd()) == Some(id)).then_some(c)
        });
        let Some(c) = found else {
            log::info!(
                "ibv_import_device: descriptor {cmd_fd} is not the cmd_fd of a context of this \
                 process (a device is driven by the process that opened it)"
            );
            return fail(libc::EOPNOTSUPP);
        };
        let entry = c.entry;
        let dev = match entry.acquire() {
            Ok(d) => d,
            Err(msg) => {
                eprintln!("libibverbs (hca-ibverbs): {msg}");
                return fail(libc::EIO);
            }
        };
        let events = match ContextEvents::new() {
            Ok(e) => e,
            Err(e) => {
                let _ = entry.release(dev);
                return fail(e.raw_os_error().unwrap_or(libc::EMFILE));
            }
        };
        // SAFETY: libibverbs' contract: the imported context owns cmd_fd
        // (checked open above).
        let fd = unsafe { OwnedFd::from_raw_fd(cmd_fd) };
        publish_context(c.v.context.device, entry, dev, c.ctx().clone(), events, fd)
    })
}

/// `ibv_import_pd` (`IBVERBS_1.10`): the PD numbered `handle`
/// (`ibv_pd.handle`) of a context that shares `context`'s device context
/// (see [`ibv_import_device`]); `EINVAL` when there is none. Released with
/// `ibv_unimport_pd`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> *mut ibv_pd {
    guard(ptr::null_mut(), || {
        let Some(c) = live_ctx(context) else {
            return fail(libc::EINVAL);
        };
        let found = registry::live_of(Kind::Pd).into_iter().find_map(|o| {
            let p = live(o as *mut PdObj, Kind::Pd)?;
            let same = p.pd.number().0 == handle
                && live_ctx(p.c.context).is_some_and(|pc| Arc::ptr_eq(pc.ctx(), c.ctx()));
            same.then(|| p.pd.clone())
        });
        let Some(pd) = found else {
            return fail(libc::EINVAL);
        };
        let obj = registry::publish(
            PdObj {
                c: ibv_pd { context, handle },
                pd,
            },
            Kind::Pd,
        );
        obj.cast()
    })
}

/// `ibv_unimport_pd` (`IBVERBS_1.10`): forgets an imported (or any) PD
/// object without destroying the PD, which its other objects keep.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    guard((), || {
        if let Some(b) = registry::take(pd.cast::<PdObj>(), Kind::Pd) {
            drop(b);
        }
    })
}

/// `ibv_close_device`: closes the context; the last context of a device
/// tears it down.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    guard(libc::EIO, || {
        if context.is_null() {
            return libc::EINVAL;
        }
        let Some(mut b) = registry::take(ctx_obj(context), Kind::Context) else {
            return libc::EINVAL;
        };
        let entry = b.entry;
        crate::flow::close_context(context);
        if let Some(ctx) = b.ctx.take() {
            let shared = registry::live_of(Kind::Context).into_iter().any(|o| {
                live(o as *mut CtxObj, Kind::Context)
                    .is_some_and(|c| c.ctx.as_ref().is_some_and(|x| Arc::ptr_eq(x, &ctx)))
            });
            if shared {
                // Another context of this process imported it (or it
                // imported another): the last one closed destroys it.
                drop(ctx);
            } else if let Err(e) = Context::try_destroy(ctx) {
                log::warn!("{}: context still in use at close: {e}", entry.name());
            }
        }
        if let Some(dev) = b.dev.take() {
            dev.subscribers().remove(&b.events);
            if let Err(msg) = entry.release(dev) {
                log::warn!("{msg}");
            }
        }
        0
    })
}

fn device_attr(c: &CtxObj) -> ibv_device_attr {
    let d = *c.ctx().query_device();
    let mut a: ibv_device_attr = zeroed();
    let fw = d.fw_ver.map(|v| v.to_string()).unwrap_or_default();
    for (dst, b) in a.fw_ver.iter_mut().zip(fw.bytes().take(63)) {
        *dst = b as c_char;
    }
    let int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = d.max_mr_size;
    a.page_size_cap = d.page_size_cap;
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    a.max_qp = int(d.max_qp);
    a.max_qp_wr = int(d.max_qp_wr);
    // What this library and driver do: system image GUID, RNR NAK
    // generation on RC, completion notification re-arming (N_NOTIFY_CQ),
    // bad P_Key / Q_Key counters are kept by the device (mlx5 reports both).
    a.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR
        | IBV_DEVICE_BAD_QKEY_CNTR
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_N_NOTIFY_CQ
        // The raw Ethernet bits the driver derives as mlx5_ib does
        // (IBV_DEVICE_RAW_IP_CSUM, IBV_DEVICE_MANAGED_FLOW_STEERING); the
        // bits above 31 are device_cap_flags_ex's only.
        | (d.device_cap_flags & u64::from(u32::MAX)) as c_uint;
    a.max_sge = int(d.max_sge);
    a.max_sge_rd = int(d.max_sge_rd);
    a.max_cq = int(d.max_cq);
    a.max_cqe = int(d.max_cqe);
    a.max_mr = int(d.max_mr);
    a.max_pd = int(d.max_pd);
    a.max_qp_rd_atom = int(d.max_qp_rd_atom);
    a.max_res_rd_atom = c_int::try_from(d.max_res_rd_atom).unwrap_or(c_int::MAX);
    a.max_qp_init_rd_atom = int(d.max_qp_init_rd_atom);
    a.atomic_cap = d.atomic_cap as c_int;
    a.max_srq = int(d.max_srq);
    a.max_srq_wr = int(d.max_srq_wr);
    a.max_srq_sge = int(d.max_srq_sge);
    a.max_pkeys = d.max_pkeys;
    a.local_ca_ack_delay = d.local_ca_ack_delay;
    a.phys_port_cnt = d.phys_port_cnt;
    a.max_ah = c_int::MAX;
    a
}

/// `ibv_query_device`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr_out: *mut ibv_device_attr,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(context) else {
            return libc::EINVAL;
        };
        if device_attr_out.is_null() {
            return libc::EINVAL;
        }
        let a = device_attr(c);
        // SAFETY: non-null, the caller's struct.
        unsafe { device_attr_out.write(a) };
        0
    })
}

fn port_attr(c: &CtxObj, port: u8) -> Result<ibv_port_attr, i32> {
    let p = c.ctx().query_port(port).map_err(|e| errno_of(&e))?;
    let mut a = ibv_port_attr {
        state: p.state as c_int,
        max_mtu: p.max_mtu.map_or(0, |m| m as c_int),
        active_mtu: p.active_mtu.map_or(0, |m| m as c_int),
        gid_tbl_len: c_int::try_from(p.gid_tbl_len).unwrap_or(c_int::MAX),
        max_msg_sz: u32::try_from(p.max_msg_sz).unwrap_or(u32::MAX),
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        active_width: p.active_width,
        active_speed: p.active_speed,
        max_vl_num: 1,
        ..Default::default()
    };
    // Physical state: 5 LinkUp, 3 Disabled (`enum ibv_port_phys_state`
    // values as sysfs reports them).
    a.phys_state = if p.state == PortState::Active { 5 } else { 3 };
    a.link_layer = match p.link_layer {
        LinkLayer::Ethernet => IBV_LINK_LAYER_ETHERNET,
        LinkLayer::InfiniBand => IBV_LINK_LAYER_INFINIBAND,
    };
    Ok(a)
}

fn query_port_into(ctx: *mut ibv_context, port: u8, out: *mut u8, len: usize) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(ctx) else {
            return libc::EINVAL;
        };
        if out.is_null() {
            return libc::EINVAL;
        }
        match port_attr(c, port) {
            Ok(a) => {
                // SAFETY: `out` has room for `len` bytes, which is at most
                // the size of `a`.
                unsafe { ptr::copy_nonoverlapping(ptr::addr_of!(a).cast::<u8>(), out, len) };
                0
            }
            Err(e) => e,
        }
    })
}

/// `ibv_query_port` (`IBVERBS_1.1`: the compat port attributes, without
/// `port_cap_flags2`; the header's inline `ibv_query_port` calls the
/// context's extended `query_port` with the full size instead).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut c_void,
) -> c_int {
    query_port_into(
        context,
        port_num,
        port_attr_out.cast(),
        COMPAT_PORT_ATTR_LEN,
    )
}

fn port_u8(port: u32) -> Option<u8> {
    u8::try_from(port).ok()
}

fn gid_entry(c: &CtxObj, port: u32, index: u32) -> Result<Option<ibv_gid_entry>, i32> {
    let port8 = port_u8(port).ok_or(libc::EINVAL)?;
    let idx = u16::try_from(index).map_err(|_| libc::EINVAL)?;
    let ctx = c.ctx();
    let pa = ctx.query_port(port8).map_err(|e| errno_of(&e))?;
    let mut e = ibv_gid_entry {
        gid_index: index,
        port_num: port,
        ..Default::default()
    };
    match pa.link_layer {
        LinkLayer::InfiniBand => {
            let g = ctx.query_gid(port8, idx).map_err(|e| errno_of(&e))?;
            if g.is_zero() {
                return Ok(None);
            }
            e.gid.raw = g.0;
            e.gid_type = IBV_GID_TYPE_IB;
        }
        LinkLayer::Ethernet => {
            if index >= pa.gid_tbl_len {
                return Err(libc::EINVAL);
            }
            match ctx.query_gid_entry(port8, idx).map_err(|e| errno_of(&e))? {
                None => return Ok(None),
                Some(g) => {
                    e.gid.raw = g.gid.0;
                    e.gid_type = match g.version {
                        RoceVersion::V1 => IBV_GID_TYPE_ROCE_V1,
                        RoceVersion::V2 => IBV_GID_TYPE_ROCE_V2,
                    };
                }
            }
        }
    }
    Ok(Some(e))
}

/// Every valid GID table entry of every port of a context
/// (`_ibv_query_gid_table`).
pub(crate) fn gid_entries(context: *mut ibv_context) -> Result<Vec<ibv_gid_entry>, c_int> {
    let Some(c) = live_ctx(context) else {
        return Err(libc::EINVAL);
    };
    let ports = c.ctx().query_device().phys_port_cnt;
    let mut out = Vec::new();
    for port in 1..=ports {
        let pa = c.ctx().query_port(port).map_err(|e| errno_of(&e))?;
        for i in 0..pa.gid_tbl_len {
            if let Some(e) = gid_entry(c, u32::from(port), i)? {
                out.push(e);
            }
        }
    }
    Ok(out)
}

/// `ibv_query_gid`: an empty entry reads as all zero.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(context) else {
            return libc::EINVAL;
        };
        let Ok(index) = u32::try_from(index) else {
            return libc::EINVAL;
        };
        if gid.is_null() {
            return libc::EINVAL;
        }
        match gid_entry(c, u32::from(port_num), index) {
            Ok(e) => {
                // SAFETY: non-null, the caller's gid.
                unsafe { gid.write(e.map(|e| e.gid).unwrap_or_default()) };
                0
            }
            Err(e) => e,
        }
    })
}

/// `_ibv_query_gid_ex` (`IBVERBS_1.11`): `ENODATA` for an empty entry.
#[unsafe(no_mangle)]
pub extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(context) else {
            return libc::EINVAL;
        };
        if flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return libc::EINVAL;
        }
        match gid_entry(c, port_num, gid_index) {
            Ok(Some(e)) => {
                // SAFETY: non-null and at least our size.
                unsafe { entry.write(e) };
                0
            }
            Ok(None) => libc::ENODATA,
            Err(e) => e,
        }
    })
}

/// `ibv_query_gid_type` (`IBVERBS_PRIVATE_34`, which `ibv_devinfo` uses).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    type_out: *mut c_int,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(context) else {
            return libc::EINVAL;
        };
        if type_out.is_null() {
            return libc::EINVAL;
        }
        match gid_entry(c, u32::from(port_num), index) {
            Ok(e) => {
                let t = e.map_or(IBV_GID_TYPE_IB, |e| e.gid_type);
                // ibv_devinfo's sysfs view: 0 IB/RoCE v1, 1 RoCE v2.
                let sysfs = c_int::from(t == IBV_GID_TYPE_ROCE_V2);
                // SAFETY: non-null, the caller's int.
                unsafe { type_out.write(sysfs) };
                0
            }
            Err(e) => e,
        }
    })
}

/// `ibv_query_pkey`: the P_Key in network byte order.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(context) else {
            return libc::EINVAL;
        };
        let Ok(index) = u16::try_from(index) else {
            return libc::EINVAL;
        };
        if pkey.is_null() {
            return libc::EINVAL;
        }
        match c.ctx().query_pkey(port_num, index) {
            Ok(k) => {
                // SAFETY: non-null, the caller's u16.
                unsafe { pkey.write(k.to_be()) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_get_pkey_index` (`IBVERBS_1.5`): the index of a P_Key (network
/// order), or -1.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
    guard(-1, || {
        let Some(c) = live_ctx(context) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let want = u16::from_be(pkey);
        for i in 0..u16::MAX {
            match c.ctx().query_pkey(port_num, i) {
                Ok(k) if k == want => return c_int::from(i),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        set_errno(libc::ENOENT);
        -1
    })
}

/// `ibv_read_sysfs_file` (`IBVERBS_1.0`): reads `dir/file` into `buf`
/// without its trailing newline; the number of bytes, or -1. Paths of our
/// emulated devices (which have no sysfs) read as missing files.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return -1;
        }
        // SAFETY: the caller passes NUL-terminated strings.
        let (d, f) = unsafe {
            (
                core::ffi::CStr::from_ptr(dir).to_string_lossy(),
                core::ffi::CStr::from_ptr(file).to_string_lossy(),
            )
        };
        let Ok(bytes) = std::fs::read(format!("{d}/{f}")) else {
            return -1;
        };
        let mut n = bytes.len();
        if n > 0 && bytes[n - 1] == b'\n' {
            n -= 1;
        }
        if n >= size {
            return -1;
        }
        // SAFETY: `buf` has room for `size` bytes; n + 1 <= size.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        c_int::try_from(n).unwrap_or(-1)
    })
}

/// `ibv_fork_init`: nothing to do (the driver pins no pages a fork could
/// lose; registered user memory stays mapped through the IOMMU).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

// ---------------------------------------------------------------------
// PD.

/// `ibv_alloc_pd`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(ptr::null_mut(), || {
        let Some(c) = live_ctx(context) else {
            return fail(libc::EINVAL);
        };
        match Pd::alloc(c.ctx()) {
            Ok(pd) => {
                let handle = pd.number().0;
                let obj = registry::publish(
                    PdObj {
                        c: ibv_pd { context, handle },
                        pd: Arc::new(pd),
                    },
                    Kind::Pd,
                );
                obj.cast()
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

/// `ibv_dealloc_pd`: `EBUSY` while an object of it lives.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard(libc::EIO, || {
        let o = pd.cast::<PdObj>();
        destroy_idle(
            o,
            Kind::Pd,
            |p| Arc::strong_count(&p.pd) > 1 || p.pd.mr_count() > 0,
            |b| status_of(Pd::try_destroy(b.pd)),
        )
    })
}

/// The driver PD of a live `ibv_pd`.
pub(crate) fn live_pd<'a>(pd: *mut ibv_pd) -> Option<&'a Arc<Pd<P>>> {
    live(pd.cast::<PdObj>(), Kind::Pd).map(|p| &p.pd)
}

// ---------------------------------------------------------------------
// CQ.

/// `ibv_create_cq`, on a completion channel or none.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(ptr::null_mut(), || {
        create_cq(context, cqe, cq_context, channel, comp_vector, None).cast()
    })
}

/// The context's `create_cq_ex` (the header's inline `ibv_create_cq_ex`):
/// the standard work-completion fields (`IBV_WC_STANDARD_FLAGS`), the
/// stripped VLAN and the flow tag of raw packet receives
/// (`IBV_WC_EX_WITH_CVLAN`, `IBV_WC_EX_WITH_FLOW_TAG`) and the
/// single-threaded flag; timestamps, tag matching and parent domains are
/// not offered (`EOPNOTSUPP`).
pub(crate) unsafe extern "C" fn op_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(ptr::null_mut(), || {
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-null, the caller's attributes.
        let a = unsafe { &*attr };
        if a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            || a.wc_flags
                & !(IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG)
                != 0
            || (a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
                && a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0)
        {
            return fail(libc::EOPNOTSUPP);
        }
        let (Ok(cqe), Ok(vector)) = (c_int::try_from(a.cqe), c_int::try_from(a.comp_vector)) else {
            return fail(libc::EINVAL);
        };
        create_cq(
            context,
            cqe,
            a.cq_context,
            a.channel,
            vector,
            Some(a.wc_flags),
        )
    })
}

fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    ex: Option<u64>,
) -> *mut ibv_cq_ex {
    {
        let Some(c) = live_ctx(context) else {
            return fail(libc::EINVAL);
        };
        let Ok(n) = u32::try_from(cqe) else {
            return fail(libc::EINVAL);
        };
        if n == 0 || comp_vector < 0 || comp_vector >= c.v.context.num_comp_vectors {
            return fail(libc::EINVAL);
        }
        let chan = if channel.is_null() {
            None
        } else {
            match live(channel.cast::<ChanObj>(), Kind::Channel) {
                Some(ch) if ch.c.context == context => Some(ch),
                _ => return fail(libc::EINVAL),
            }
        };
        let vector = u32::try_from(comp_vector).unwrap_or(0);
        let created = match chan {
            None => Cq::create(c.ctx(), n),
            Some(ch) => {
                Cq::create_on_channel(c.ctx(), n, vector, &ch.ch, cq_context as usize as u64)
            }
        };
        match created {
            Ok(cq) => {
                let mut cc: ibv_cq_ex = zeroed();
                cc.context = context;
                cc.channel = channel;
                cc.cq_context = cq_context;
                cc.handle = cq.number().0;
                cc.cqe = c_int::try_from(cq.cqe()).unwrap_or(c_int::MAX);
                let cqn = cq.number().0;
                if let Some(flags) = ex {
                    crate::cqex::install(&mut cc, flags);
                }
                let obj = registry::publish(
                    CqObj {
                        c: cc,
                        cq: Arc::new(cq),
                        cur: Mutex::new(WorkCompletion::default()),
                        cur_rx: Mutex::new(hca_driver::verbs::RxCqe::default()),
                        ack_lock: Mutex::new(()),
                        acked: std::sync::Condvar::new(),
                    },
                    Kind::Cq,
                );
                if let Some(ch) = chan {
                    ch.cqs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((cqn, obj as usize));
                    // SAFETY: `channel` is live (checked above); its C view
                    // counts its CQs, as libibverbs' does.
                    unsafe { (*channel).refcnt += 1 };
                }
                obj.cast()
            }
            Err(e) => fail(errno_of(&e)),
        }
    }
}

/// How long `ibv_destroy_cq` waits for the acknowledgement of the
/// completion events read from its CQ (milliseconds).
static DESTROY_ACK_WAIT_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(10_000);

/// Sets how long `ibv_destroy_cq` waits for acknowledgements (tests).
#[cfg(test)]
pub(crate) fn set_destroy_ack_wait(d: std::time::Duration) {
    DESTROY_ACK_WAIT_MS.store(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Waits until every completion event read from `q`'s channel is
/// acknowledged (by another thread's `ibv_ack_cq_events`), as libibverbs'
/// destroy does, for at most [`DESTROY_ACK_WAIT_MS`]; then acknowledges
/// those still owed itself, so that the CQ can be destroyed. Returns how
/// many that were.
fn await_acks(q: &CqObj) -> u64 {
    let wait = std::time::Duration::from_millis(
        DESTROY_ACK_WAIT_MS.load(std::sync::atomic::Ordering::Relaxed),
    );
    let deadline = std::time::Instant::now() + wait;
    let mut g = q.ack_lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let owed = q.cq.unacked_events();
        if owed == 0 {
            return 0;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            let n = u32::try_from(owed).unwrap_or(u32::MAX);
            if let Err(e) = q.cq.ack_events(n) {
                log::error!("ibv_destroy_cq: acknowledging {n} events: {e}");
            }
            return owed;
        }
        g = q
            .acked
            .wait_timeout(g, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// `ibv_destroy_cq`: `EBUSY` while a QP uses it. As in libibverbs, it
/// waits for the acknowledgement (`ibv_ack_cq_events`, by another thread)
/// of every completion event read from the CQ; where libibverbs would wait
/// for ever, it waits at most 10 s, then destroys the CQ all the same (its
/// device object, memory and channel binding: nothing is left until close)
/// and logs the events it acknowledged for the program.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(libc::EIO, || {
        let o = cq.cast::<CqObj>();
        let Some(q) = live(o, Kind::Cq) else {
            return libc::EINVAL;
        };
        if Arc::strong_count(&q.cq) > 1 {
            return libc::EBUSY;
        }
        let owed = await_acks(q);
        if owed > 0 {
            log::warn!(
                "ibv_destroy_cq: {owed} completion events read from CQ {} were not \
                 acknowledged (ibv_ack_cq_events); destroyed all the same",
                q.cq.number()
            );
        }
        destroy_idle(
            o,
            Kind::Cq,
            |q| Arc::strong_count(&q.cq) > 1,
            |b| {
                forget_object(b.c.context, o as usize);
                if let Some(ch) = live(b.c.channel.cast::<ChanObj>(), Kind::Channel) {
                    ch.cqs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|&(_, x)| x != o as usize);
                    // SAFETY: the channel is live (checked just above).
                    unsafe { (*b.c.channel).refcnt -= 1 };
                }
                status_of(Cq::try_destroy(b.cq))
            },
        )
    })
}

pub(crate) fn to_ibv_wc(w: &WorkCompletion) -> ibv_wc {
    let imm = if w.wc_flags.has(WcFlags::WITH_IMM) {
        w.imm_data.to_be()
    } else {
        w.imm_data
    };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode as c_int,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.0,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

unsafe extern "C" fn op_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        if cq.is_null() || num_entries < 0 || (wc.is_null() && num_entries > 0) {
            return -1;
        }
        // SAFETY: data path: the caller passes a CQ of this library.
        let q = unsafe { &*cq.cast::<CqObj>() };
        let want = usize::try_from(num_entries).unwrap_or(0);
        let mut done = 0usize;
        let mut buf = [WorkCompletion::default(); 16];
        while done < want {
            let n = (want - done).min(buf.len());
            match q.cq.poll(&mut buf[..n]) {
                Ok(got) => {
                    for (i, w) in buf[..got].iter().enumerate() {
                        // SAFETY: `wc` has room for `num_entries` entries;
                        // done + i < want.
                        unsafe { wc.add(done + i).write(to_ibv_wc(w)) };
                    }
                    done += got;
                    if got < n {
                        break;
                    }
                }
                Err(e) => {
                    log::error!("poll_cq: {e}");
                    return if done > 0 {
                        c_int::try_from(done).unwrap_or(c_int::MAX)
                    } else {
                        -1
                    };
                }
            }
        }
        c_int::try_from(done).unwrap_or(c_int::MAX)
    })
}

unsafe extern "C" fn op_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: data path: the caller passes a CQ of this library.
    let q = unsafe { &*cq.cast::<CqObj>() };
    q.cq.req_notify(solicited_only != 0);
    0
}

// ---------------------------------------------------------------------
// Completion channels.

/// `ibv_create_comp_channel` (`CompChannel::create`): its `fd` becomes
/// readable when a CQ of it has a completion event (after
/// `ibv_req_notify_cq`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(ptr::null_mut(), || {
        let Some(c) = live_ctx(context) else {
            return fail(libc::EINVAL);
        };
        let ch = match CompChannel::create(c.ctx()) {
            Ok(ch) => ch,
            Err(e) => return fail(errno_of(&e)),
        };
        let obj = registry::publish(
            ChanObj {
                c: ibv_comp_channel {
                    context,
                    fd: ch.fd().unwrap_or(-1),
                    refcnt: 0,
                },
                ch: Arc::new(ch),
                cqs: Mutex::new(Vec::new()),
            },
            Kind::Channel,
        );
        obj.cast()
    })
}

/// `ibv_destroy_comp_channel`: `EBUSY` while a CQ uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard(libc::EIO, || {
        let o = channel.cast::<ChanObj>();
        destroy_idle(
            o,
            Kind::Channel,
            |ch| ch.ch.cqs() != 0 || Arc::strong_count(&ch.ch) > 1,
            |b| status_of(CompChannel::try_destroy(b.ch)),
        )
    })
}

/// How long one blocking wait of `ibv_get_cq_event` lasts before it looks
/// again (it waits until an event comes).
const EVENT_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// `ibv_get_cq_event` (`CompChannel::get_event`): waits for a completion
/// event of a CQ of the channel, or fails with `EAGAIN` at once when the
/// program made the channel's fd non-blocking; 0, or -1 with `errno`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        let Some(ch) = live(channel.cast::<ChanObj>(), Kind::Channel) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let nonblocking = ch.c.fd >= 0 && {
            // SAFETY: F_GETFL on the channel's own descriptor.
            let fl = unsafe { libc::fcntl(ch.c.fd, libc::F_GETFL) };
            fl >= 0 && fl & libc::O_NONBLOCK != 0
        };
        let ev = loop {
            let timeout = if nonblocking {
                std::time::Duration::ZERO
            } else {
                EVENT_WAIT
            };
            match ch.ch.get_event(timeout) {
                Ok(Some(ev)) => break ev,
                Ok(None) if nonblocking => {
                    set_errno(libc::EAGAIN);
                    return -1;
                }
                Ok(None) => {}
                Err(e) => {
                    log::error!("ibv_get_cq_event: {e}");
                    set_errno(errno_of(&e));
                    return -1;
                }
            }
        };
        let found = ch
            .cqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|&&(n, _)| n == ev.cqn.0)
            .map(|&(_, o)| o as *mut CqObj);
        let Some(q) = found.and_then(|o| live(o, Kind::Cq).map(|q| (o, q))) else {
            set_errno(libc::EIO);
            return -1;
        };
        // SAFETY: the caller's two out pointers, non-null.
        unsafe {
            *cq = q.0.cast();
            *cq_context = q.1.c.cq_context;
        }
        0
    })
}

/// `ibv_ack_cq_events` (`Cq::ack_events`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    guard((), || {
        let o = cq.cast::<CqObj>();
        let Some(q) = live(o, Kind::Cq) else {
            return;
        };
        // Under the lock a waiting ibv_destroy_cq checks the count with:
        // it frees the CQ only after this call is done with it.
        let _g = q.ack_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = q.cq.ack_events(nevents) {
            log::error!("ibv_ack_cq_events: {e}");
            return;
        }
        // SAFETY: `o` is live; the C view's counter is the program's to
        // read (libibverbs keeps it the same way).
        unsafe {
            (*o).c.comp_events_completed = (*o).c.comp_events_completed.wrapping_add(nevents)
        };
        q.acked.notify_all();
    })
}

// ---------------------------------------------------------------------
// QP.

fn qp_type(t: c_int) -> Option<QpType> {
    match t {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UC => Some(QpType::Uc),
        IBV_QPT_UD => Some(QpType::Ud),
        IBV_QPT_RAW_PACKET => Some(QpType::RawPacket),
        _ => None,
    }
}

fn qp_type_c(t: QpType) -> c_int {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Uc => IBV_QPT_UC,
        QpType::Ud => IBV_QPT_UD,
        QpType::RawPacket => IBV_QPT_RAW_PACKET,
    }
}

fn cap_c(c: QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_create_qp`: RC, UC, UD and RAW_PACKET (other types
/// `EOPNOTSUPP`); the capabilities the QP got are written back into
/// `init_attr->cap`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(ptr::null_mut(), || create_qp(pd, init, None, 0))
}

/// Creates a QP; `send_ops` (the `IBV_QP_EX_WITH_*` flags of
/// `ibv_create_qp_ex`) installs the `ibv_wr_*` builder; `create_flags`
/// (`IBV_QP_CREATE_SCATTER_FCS`, `IBV_QP_CREATE_CVLAN_STRIPPING`) are for
/// raw packet QPs only.
pub(crate) fn create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
    send_ops: Option<u64>,
    create_flags: u32,
) -> *mut ibv_qp {
    let Some(p) = live(pd.cast::<PdObj>(), Kind::Pd) else {
        return fail(libc::EINVAL);
    };
    if init.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: non-null, the caller's attributes.
    let ia = unsafe { &mut *init };
    let Some(t) = qp_type(ia.qp_type) else {
        return fail(libc::EOPNOTSUPP);
    };
    let (Some(scq), Some(rcq)) = (
        live(ia.send_cq.cast::<CqObj>(), Kind::Cq),
        live(ia.recv_cq.cast::<CqObj>(), Kind::Cq),
    ) else {
        return fail(libc::EINVAL);
    };
    let mut qi = QpInitAttr::new(t, &scq.cq, &rcq.cq)
        .cap(QpCap {
            max_send_wr: ia.cap.max_send_wr,
            max_recv_wr: ia.cap.max_recv_wr,
            max_send_sge: ia.cap.max_send_sge,
            max_recv_sge: ia.cap.max_recv_sge,
            max_inline_data: ia.cap.max_inline_data,
        })
        .sq_sig_all(ia.sq_sig_all != 0);
    if create_flags != 0 {
        // The driver checks them against the QP type and the caps
        // (EINVAL / EOPNOTSUPP through its error).
        qi = qi.create_flags(QpCreateFlags(create_flags));
    }
    if !ia.srq.is_null() {
        let Some(s) = live(ia.srq.cast::<SrqObj>(), Kind::Srq) else {
            return fail(libc::EINVAL);
        };
        qi = qi.srq(&s.srq);
    }
    match Qp::create(&p.pd, &qi) {
        Ok(qp) => {
            ia.cap = cap_c(qp.cap());
            let mut c: ibv_qp_ex = zeroed();
            let b = &mut c.qp_base;
            b.context = p.c.context;
            b.qp_context = ia.qp_context;
            b.pd = pd;
            b.send_cq = ia.send_cq;
            b.recv_cq = ia.recv_cq;
            b.srq = ia.srq;
            b.handle = qp.number().0;
            b.qp_num = qp.number().0;
            b.state = 0;
            b.qp_type = ia.qp_type;
            if let Some(ops) = send_ops {
                crate::qpex::install(&mut c, ops);
            }
            let qpn = qp.number().0;
            let obj = registry::publish(
                QpObj {
                    c,
                    qp: Mutex::new(qp),
                    sq_sig_all: ia.sq_sig_all != 0,
                    builder: Mutex::new(crate::qpex::Builder::default()),
                },
                Kind::Qp,
            );
            if let Some(cx) = live_ctx(p.c.context) {
                cx.events.add_object(Element::Qp(qpn), obj as usize);
            }
            obj.cast()
        }
        Err(e) => fail(errno_of(&e)),
    }
}

/// The context's `create_qp_ex` (what the header's inline
/// `ibv_create_qp_ex` calls when more than the PD is given): the PD and the
/// send-ops flags of the `ibv_wr_*` API; other attributes `EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn op_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(ptr::null_mut(), || {
        if live_ctx(context).is_none() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-null, the caller's attributes.
        let a = unsafe { &*attr };
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return fail(libc::EINVAL);
        }
        // Creation flags and a TSO header size are accepted when they ask
        // for nothing (zero); anything else asked is not offered.
        // The create flags the driver offers (blocking multicast loopback
        // on UD QPs, the raw packet QPs' own) are checked by it against the
        // QP type and the caps; RSS QPs (an indirection table and a hash)
        // are made by crate::wq.
        let known = IBV_QP_INIT_ATTR_PD
            | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
            | IBV_QP_INIT_ATTR_CREATE_FLAGS
            | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
        let offered = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
            | IBV_QP_CREATE_SCATTER_FCS
            | IBV_QP_CREATE_CVLAN_STRIPPING;
        let flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
            a.create_flags
        } else {
            0
        };
        if a.comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH) != 0 {
            return crate::wq::create_rss_qp(a);
        }
        // BLOCK_SELF_MCAST_LB on a raw packet QP sets its TIR's
        // `self_lb_block` multicast bit, as mlx5_ib does (the driver).
        if a.comp_mask & !known != 0
            || flags & !offered != 0
            || (a.comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER != 0 && a.max_tso_header != 0)
        {
            return fail(libc::EOPNOTSUPP);
        }
        let ops = (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        if let Some(o) = ops {
            if o & !crate::qpex::SUPPORTED_SEND_OPS != 0 {
                return fail(libc::EOPNOTSUPP);
            }
        }
        // The first members of ibv_qp_init_attr_ex are an ibv_qp_init_attr.
        create_qp(a.pd, attr.cast::<ibv_qp_init_attr>(), ops, flags)
    })
}

/// `ibv_qp_to_qp_ex` (`IBVERBS_1.6`): the extended QP of a QP created by
/// `ibv_create_qp_ex` with send-ops flags; NULL for any other, as
/// libibverbs answers.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    match live(qp.cast::<QpObj>(), Kind::Qp) {
        Some(q) if q.c.wr_start.is_some() => qp.cast(),
        _ => ptr::null_mut(),
    }
}

/// `ibv_destroy_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        if let Some(r) = crate::wq::destroy_rss_qp(qp) {
            return r;
        }
        let o = qp.cast::<QpObj>();
        // A raw packet QP that flows deliver to stays (the kernel's EBUSY):
        // the flows go first.
        if let Some(q) = live(o, Kind::Qp) {
            let g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = g.tir() {
                let hca = Arc::as_ptr(g.pd().context().hca()) as usize;
                if crate::flow::in_use(hca, t) {
                    return libc::EBUSY;
                }
            }
        }
        let Some(b) = registry::take(o, Kind::Qp) else {
            return libc::EINVAL;
        };
        forget_object(b.c.qp_base.context, o as usize);
        let q = b.qp.into_inner().unwrap_or_else(|p| p.into_inner());
        status_of(q.destroy())
    })
}

fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    let mut r = AhAttr::new();
    r.dlid = a.dlid;
    r.sl = a.sl;
    r.src_path_bits = a.src_path_bits;
    r.static_rate = a.static_rate;
    r.port_num = a.port_num;
    if a.is_global != 0 {
        r.grh = Some(GlobalRoute {
            dgid: a.grh.dgid.raw,
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        });
    }
    r
}

fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    let mut r = ibv_ah_attr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        ..Default::default()
    };
    if let Some(g) = &a.grh {
        r.is_global = 1;
        r.grh = ibv_global_route {
            dgid: ibv_gid { raw: g.dgid },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        };
    }
    r
}

fn qp_state(v: c_int) -> Option<QpState> {
    Some(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

fn mtu(v: c_int) -> Option<IbMtu> {
    Some(match v {
        1 => IbMtu::Mtu256,
        2 => IbMtu::Mtu512,
        3 => IbMtu::Mtu1024,
        4 => IbMtu::Mtu2048,
        5 => IbMtu::Mtu4096,
        _ => return None,
    })
}

/// The bits of `enum ibv_qp_attr_mask` the driver knows (IBV_QP_STATE ..
/// IBV_QP_DEST_QPN).
/// The `ibv_qp_attr_mask` bits the driver takes: `IBV_QP_STATE` ..=
/// `IBV_QP_DEST_QPN` and `IBV_QP_RATE_LIMIT`.
const KNOWN_MASK: c_int = ((1 << 21) - 1) | QpAttrMask::RATE_LIMIT.0 as c_int;

fn qp_attr_from_c(a: &ibv_qp_attr, mask: c_int) -> Result<QpAttr, i32> {
    if mask & !KNOWN_MASK != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let m = QpAttrMask(mask as u32);
    let mut r = QpAttr::new();
    r.mask = m;
    if m.contains(QpAttrMask::STATE) {
        r.qp_state = qp_state(a.qp_state).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        r.cur_qp_state = qp_state(a.cur_qp_state).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        r.path_mtu = mtu(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::PATH_MIG_STATE) {
        r.path_mig_state = match a.path_mig_state {
            0 => PathMigState::Migrated,
            1 => PathMigState::Rearm,
            2 => PathMigState::Armed,
            _ => return Err(libc::EINVAL),
        };
    }
    r.qkey = a.qkey;
    r.rq_psn = a.rq_psn;
    r.sq_psn = a.sq_psn;
    r.dest_qp_num = a.dest_qp_num;
    r.qp_access_flags = AccessFlags(a.qp_access_flags & AccessFlags::ALL.0);
    r.ah_attr = ah_attr_from_c(&a.ah_attr);
    r.pkey_index = a.pkey_index;
    r.port_num = a.port_num;
    r.timeout = a.timeout;
    r.retry_cnt = a.retry_cnt;
    r.rnr_retry = a.rnr_retry;
    r.min_rnr_timer = a.min_rnr_timer;
    r.max_rd_atomic = a.max_rd_atomic;
    r.max_dest_rd_atomic = a.max_dest_rd_atomic;
    r.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    r.rate_limit = a.rate_limit;
    Ok(r)
}

/// The verbs context's `modify_qp_rate_limit` (`ibv_modify_qp_rate_limit`):
/// a raw packet QP's packet pacing with burst and typical packet size.
/// As rdma-core's mlx5 provider: EINVAL for a `comp_mask`, or a burst or
/// typical size without a rate or on a device that does not take them;
/// then the driver's checks (a QP in RTS, a rate in the device's range).
unsafe extern "C" fn op_modify_qp_rate_limit(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_rate_limit_attr,
) -> c_int {
    guard(libc::EIO, || {
        if crate::wq::is_rss(qp) {
            return libc::EINVAL;
        }
        let Some(q) = live(qp.cast::<QpObj>(), Kind::Qp) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: non-null, the caller's attributes.
        let a = unsafe { *attr };
        if a.comp_mask != 0 || ((a.max_burst_sz != 0 || a.typical_pkt_sz != 0) && a.rate_limit == 0)
        {
            return libc::EINVAL;
        }
        let mut g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        let rl = RateLimit {
            rate_kbps: a.rate_limit,
            max_burst_bytes: a.max_burst_sz,
            typical_packet_bytes: a.typical_pkt_sz,
        };
        match g.set_rate_limit(rl) {
            Ok(()) => 0,
            Err(e) => {
                log::info!("ibv_modify_qp_rate_limit: {e}");
                errno_of(&e)
            }
        }
    })
}

/// `ibv_modify_qp`, with the IB attribute-mask rules of each transition
/// (checked by the driver).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    guard(libc::EIO, || {
        if crate::wq::is_rss(qp) {
            return libc::ENOSYS;
        }
        let o = qp.cast::<QpObj>();
        let Some(q) = live(o, Kind::Qp) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: non-null, the caller's attributes.
        let a = match qp_attr_from_c(unsafe { &*attr }, mask) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let mut g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        match g.modify(&a) {
            Ok(()) => {
                let st = g.state() as c_int;
                drop(g);
                // SAFETY: `o` is live; the C view's state is the program's
                // to read (libibverbs updates it the same way).
                unsafe { (*o).c.qp_base.state = st };
                0
            }
            Err(e) => {
                log::info!("ibv_modify_qp: {e}");
                errno_of(&e)
            }
        }
    })
}

/// `ibv_query_qp`: every attribute (whatever `attr_mask` asks), and the
/// init attributes.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(libc::EIO, || {
        if crate::wq::is_rss(qp) {
            return libc::ENOSYS;
        }
        let o = qp.cast::<QpObj>();
        let Some(q) = live(o, Kind::Qp) else {
            return libc::EINVAL;
        };
        if attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        let mut g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        let r = match g.query() {
            Ok(r) => r,
            Err(e) => return errno_of(&e),
        };
        let cap = cap_c(g.cap());
        let t = g.qp_type();
        drop(g);
        let a = ibv_qp_attr {
            qp_state: r.qp_state as c_int,
            cur_qp_state: r.qp_state as c_int,
            path_mtu: r.path_mtu as c_int,
            path_mig_state: r.path_mig_state as c_int,
            qkey: r.qkey,
            rq_psn: r.rq_psn,
            sq_psn: r.sq_psn,
            dest_qp_num: r.dest_qp_num,
            qp_access_flags: r.qp_access_flags.0,
            cap,
            ah_attr: ah_attr_to_c(&r.ah_attr),
            pkey_index: r.pkey_index,
            en_sqd_async_notify: u8::from(r.en_sqd_async_notify),
            sq_draining: u8::from(r.sq_draining),
            max_rd_atomic: r.max_rd_atomic,
            max_dest_rd_atomic: r.max_dest_rd_atomic,
            min_rnr_timer: r.min_rnr_timer,
            port_num: r.port_num,
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            rnr_retry: r.rnr_retry,
            rate_limit: r.rate_limit,
            ..Default::default()
        };
        // SAFETY: both non-null, the caller's structs.
        unsafe {
            attr.write(a);
            let ia = &mut *init_attr;
            ia.qp_context = q.c.qp_base.qp_context;
            ia.send_cq = q.c.qp_base.send_cq;
            ia.recv_cq = q.c.qp_base.recv_cq;
            ia.srq = q.c.qp_base.srq;
            ia.cap = cap;
            ia.qp_type = qp_type_c(t);
            ia.sq_sig_all = c_int::from(q.sq_sig_all);
        }
        0
    })
}

/// Copies up to `N` SGEs from C into `buf`, or into a heap vector past
/// that.
fn sges<'a>(
    list: *const ibv_sge,
    n: c_int,
    buf: &'a mut [Sge; 16],
    heap: &'a mut Vec<Sge>,
) -> Option<&'a [Sge]> {
    let n = usize::try_from(n).ok()?;
    if n == 0 {
        return Some(&[]);
    }
    if list.is_null() {
        return None;
    }
    // SAFETY: the caller's work request has `n` SGEs at `list`.
    let src = unsafe { core::slice::from_raw_parts(list, n) };
    let conv = |s: &ibv_sge| Sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    };
    if n <= buf.len() {
        for (d, s) in buf.iter_mut().zip(src) {
            *d = conv(s);
        }
        Some(&buf[..n])
    } else {
        heap.clear();
        heap.extend(src.iter().map(conv));
        Some(heap)
    }
}

/// Errno of a refused work request: a full queue is `ENOMEM` (libmlx5),
/// anything else `EINVAL`.
fn post_errno(e: &hca_driver::Error) -> c_int {
    let s = e.to_string();
    if s.contains("full") {
        libc::ENOMEM
    } else {
        errno_of(e)
    }
}

unsafe extern "C" fn op_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: data path: the caller passes a QP of this library.
        let q = unsafe { &*qp.cast::<QpObj>() };
        let mut g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        let mut cur = wr;
        let mut sbuf = [Sge::default(); 16];
        let mut heap = Vec::new();
        let mut inline = Vec::new();
        while !cur.is_null() {
            // SAFETY: a work request of the caller's list.
            let w = unsafe { &*cur };
            let r = post_one_send(&mut g, w, &mut sbuf, &mut heap, &mut inline);
            if let Err(e) = r {
                if !bad_wr.is_null() {
                    // SAFETY: the caller's bad_wr slot.
                    unsafe { *bad_wr = cur };
                }
                return e;
            }
            cur = w.next;
        }
        0
    })
}

pub(crate) fn post_one_send(
    qp: &mut Qp<P>,
    w: &ibv_send_wr,
    sbuf: &mut [Sge; 16],
    heap: &mut Vec<Sge>,
    inline: &mut Vec<u8>,
) -> Result<(), c_int> {
    let Some(sgl) = sges(w.sg_list, w.num_sge, sbuf, heap) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: reading the union member the opcode says is set.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm(u32::from_be(w.imm_data)),
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv(w.imm_data),
        IBV_WR_RDMA_WRITE => SendOp::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm: u32::from_be(w.imm_data),
        },
        IBV_WR_RDMA_READ => SendOp::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::AtomicCmpSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::AtomicFetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        _ => return Err(libc::EINVAL),
    };
    let f = w.send_flags;
    let mut flags = SendFlags::NONE;
    if f & IBV_SEND_FENCE != 0 {
        flags = flags | SendFlags::FENCE;
    }
    if f & IBV_SEND_SIGNALED != 0 {
        flags = flags | SendFlags::SIGNALED;
    }
    if f & IBV_SEND_SOLICITED != 0 {
        flags = flags | SendFlags::SOLICITED;
    }
    if f & IBV_SEND_IP_CSUM != 0 {
        flags = flags | SendFlags::IP_CSUM;
    }
    // A raw packet QP's send carries its first headers in the Ethernet
    // segment (the device's minimum inline headers), taken from the
    // front of the gather list as libmlx5 takes them
    // (`copy_eth_inline_headers`); the rest of the list follows.
    let mut hdr = [0u8; ETH_HEADERS_MAX];
    let mut rest = [Sge::default(); 16];
    let mut rest_heap = Vec::new();
    let (hdr, sgl): (&[u8], &[Sge]) = if qp.qp_type() == QpType::RawPacket {
        let n = usize::from(qp.eth_min_inline()).min(ETH_HEADERS_MAX);
        split_eth_headers(sgl, &mut hdr[..n], &mut rest, &mut rest_heap)?
    } else {
        (&[], sgl)
    };
    let mut swr = SendWr::new(w.wr_id, op).flags(flags).eth_headers(hdr);
    if f & IBV_SEND_INLINE != 0 {
        // Inline data is read from the SGEs' addresses, which are the
        // program's virtual addresses (libibverbs semantics).
        inline.clear();
        for s in sgl {
            if s.length == 0 {
                continue;
            }
            if s.addr == 0 {
                return Err(libc::EINVAL);
            }
            let len = usize::try_from(s.length).map_err(|_| libc::EINVAL)?;
            // SAFETY: the caller's inline SGE names `len` readable bytes
            // at `addr` in its own memory.
            let bytes = unsafe { core::slice::from_raw_parts(s.addr as usize as *const u8, len) };
            inline.extend_from_slice(bytes);
        }
        swr = swr.inline(inline);
    } else {
        swr = swr.sgl(sgl);
    }
    let ah_ref;
    if qp.qp_type() == QpType::Ud {
        let Some(a) = live(ud.ah.cast::<AhObj>(), Kind::Ah) else {
            return Err(libc::EINVAL);
        };
        ah_ref = a;
        swr = swr.ud(ah_ref.ah.dest(ud.remote_qpn, ud.remote_qkey));
    }
    qp.post_send(&swr).map_err(|e| {
        log::info!("ibv_post_send: {e}");
        post_errno(&e)
    })
}

/// The most inline header bytes a raw packet send takes from its gather
/// list (`MLX5_ETH_L2_INLINE_HEADER_SIZE`).
const ETH_HEADERS_MAX: usize = hca_driver::verbs::ETH_L2_INLINE_HEADER_SIZE as usize;

/// Copies the first `hdr.len()` bytes the gather list `sgl` names (the
/// program's own memory, by virtual address) into `hdr`, and returns them
/// with the rest of the list; a list shorter than the headers is `EINVAL`
/// (libmlx5's answer).
fn split_eth_headers<'a>(
    sgl: &'a [Sge],
    hdr: &'a mut [u8],
    rest: &'a mut [Sge; 16],
    heap: &'a mut Vec<Sge>,
) -> Result<(&'a [u8], &'a [Sge]), c_int> {
    let want = hdr.len();
    if want == 0 {
        return Ok((hdr, sgl));
    }
    let mut got = 0usize;
    let mut first = sgl.len();
    let mut skip = 0u32;
    for (i, s) in sgl.iter().enumerate() {
        let len = usize::try_from(s.length).map_err(|_| libc::EINVAL)?;
        let take = len.min(want - got);
        if take > 0 {
            if s.addr == 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's SGE names `length` readable bytes at
            // `addr` in its own memory (a registered region); `take` is
            // at most that.
            let src = unsafe { core::slice::from_raw_parts(s.addr as usize as *const u8, take) };
            hdr[got..got + take].copy_from_slice(src);
            got += take;
        }
        if got == want {
            first = i;
            skip = u32::try_from(take).map_err(|_| libc::EINVAL)?;
            break;
        }
    }
    if got < want {
        return Err(libc::EINVAL);
    }
    let tail = sgl[first..].iter().enumerate().filter_map(|(i, s)| {
        let cut = if i == 0 { skip } else { 0 };
        (s.length > cut).then(|| Sge {
            addr: s.addr + u64::from(cut),
            length: s.length - cut,
            lkey: s.lkey,
        })
    });
    let n = sgl.len() - first;
    let list: &[Sge] = if n <= rest.len() {
        let mut k = 0;
        for s in tail {
            rest[k] = s;
            k += 1;
        }
        &rest[..k]
    } else {
        heap.clear();
        heap.extend(tail);
        heap
    };
    Ok((hdr, list))
}

unsafe extern "C" fn op_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: data path: the caller passes a QP of this library.
        let q = unsafe { &*qp.cast::<QpObj>() };
        let mut g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        post_recv_list(wr, bad_wr, |r| g.post_recv(r))
    })
}

unsafe extern "C" fn op_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: data path: the caller passes an SRQ of this library.
        let s = unsafe { &*srq.cast::<SrqObj>() };
        post_recv_list(wr, bad_wr, |r| s.srq.post_recv(r))
    })
}

pub(crate) fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(&RecvWr<'_>) -> hca_driver::Result<()>,
) -> c_int {
    let mut cur = wr;
    let mut sbuf = [Sge::default(); 16];
    let mut heap = Vec::new();
    while !cur.is_null() {
        // SAFETY: a work request of the caller's list.
        let w = unsafe { &*cur };
        let r = match sges(w.sg_list, w.num_sge, &mut sbuf, &mut heap) {
            Some(sgl) => post(&RecvWr {
                wr_id: w.wr_id,
                sgl,
            })
            .map_err(|e| {
                log::info!("ibv_post_recv: {e}");
                post_errno(&e)
            }),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: the caller's bad_wr slot.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

// ---------------------------------------------------------------------
// SRQ.

/// `ibv_create_srq`; a non-zero `srq_limit` arms the limit event.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(ptr::null_mut(), || {
        let Some(p) = live(pd.cast::<PdObj>(), Kind::Pd) else {
            return fail(libc::EINVAL);
        };
        if init.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-null, the caller's attributes.
        let ia = unsafe { &mut *init };
        // libmlx5 takes max_wr 0 (its ring gets one entry); the driver
        // wants at least one work request: asked for 0, the SRQ gets the
        // smallest ring, as with libmlx5.
        let si = SrqInitAttr::new(ia.attr.max_wr.max(1), ia.attr.max_sge);
        let srq = match Srq::create(&p.pd, &si) {
            Ok(s) => s,
            Err(e) => return fail(errno_of(&e)),
        };
        if ia.attr.srq_limit > 0 {
            if let Err(e) = srq.arm_limit(ia.attr.srq_limit) {
                return fail(errno_of(&e));
            }
        }
        let got = srq.attr();
        ia.attr.max_wr = got.max_wr;
        ia.attr.max_sge = got.max_sge;
        let mut c: ibv_srq = zeroed();
        c.context = p.c.context;
        c.srq_context = ia.srq_context;
        c.pd = pd;
        c.handle = srq.number().0;
        let srqn = srq.number().0;
        let obj = registry::publish(
            SrqObj {
                c,
                srq: Arc::new(srq),
            },
            Kind::Srq,
        );
        if let Some(cx) = live_ctx(p.c.context) {
            cx.events.add_object(Element::Srq(srqn), obj as usize);
        }
        obj.cast()
    })
}

/// `ibv_modify_srq`: `IBV_SRQ_LIMIT` arms the limit; resizing
/// (`IBV_SRQ_MAX_WR`) is not supported.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    guard(libc::EIO, || {
        let Some(s) = live(srq.cast::<SrqObj>(), Kind::Srq) else {
            return libc::EINVAL;
        };
        if attr.is_null() || mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        if mask & IBV_SRQ_MAX_WR != 0 {
            return libc::EOPNOTSUPP;
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            // SAFETY: non-null, the caller's attributes.
            let lim = unsafe { (*attr).srq_limit };
            if let Err(e) = s.srq.arm_limit(lim) {
                return errno_of(&e);
            }
        }
        0
    })
}

/// `ibv_query_srq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard(libc::EIO, || {
        let Some(s) = live(srq.cast::<SrqObj>(), Kind::Srq) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        let a = s.srq.attr();
        // SAFETY: non-null, the caller's struct.
        unsafe {
            attr.write(ibv_srq_attr {
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                srq_limit: a.srq_limit,
            })
        };
        0
    })
}

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard(libc::EIO, || {
        let o = srq.cast::<SrqObj>();
        destroy_idle(
            o,
            Kind::Srq,
            |s| Arc::strong_count(&s.srq) > 1,
            |b| {
                forget_object(b.c.context, o as usize);
                status_of(Srq::try_destroy(b.srq))
            },
        )
    })
}

// ---------------------------------------------------------------------
// AH.

/// `ibv_create_ah`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(ptr::null_mut(), || {
        let Some(p) = live(pd.cast::<PdObj>(), Kind::Pd) else {
            return fail(libc::EINVAL);
        };
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-null, the caller's attributes.
        let a = ah_attr_from_c(unsafe { &*attr });
        match Ah::create(&p.pd, &a) {
            Ok(ah) => {
                let obj = registry::publish(
                    AhObj {
                        c: ibv_ah {
                            context: p.c.context,
                            pd,
                            handle: 0,
                        },
                        ah,
                    },
                    Kind::Ah,
                );
                obj.cast()
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

/// `ibv_destroy_ah`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard(libc::EIO, || {
        let o = ah.cast::<AhObj>();
        match registry::take(o, Kind::Ah) {
            Some(_) => 0,
            None => libc::EINVAL,
        }
    })
}

/// `ibv_init_ah_from_wc`: the reply path of a received UD (or RC/UC)
/// completion, with the GRH at the start of the receive buffer when the
/// completion has one.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard(libc::EIO, || {
        let Some(c) = live_ctx(context) else {
            return libc::EINVAL;
        };
        if wc.is_null() || ah_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: non-null, the caller's completion.
        let w = unsafe { *wc };
        let mut a = ibv_ah_attr {
            dlid: w.slid,
            sl: w.sl,
            src_path_bits: w.dlid_path_bits,
            port_num,
            ..Default::default()
        };
        let eth =
            matches!(c.ctx().query_port(port_num), Ok(p) if p.link_layer == LinkLayer::Ethernet);
        if w.wc_flags & WcFlags::GRH != 0 {
            if grh.is_null() {
                return libc::EINVAL;
            }
            // SAFETY: non-null, the GRH at the start of the caller's
            // receive buffer.
            let g = unsafe { *grh };
            // Our GID of the destination of the packet is the source GID
            // of the reply.
            let mut sgid_index = None;
            for i in 0..=255u8 {
                match c.ctx().query_gid(port_num, u16::from(i)) {
                    Ok(x) if x.0 == g.dgid.raw => {
                        sgid_index = Some(i);
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            let Some(sgid_index) = sgid_index else {
                return libc::ENOENT;
            };
            let flow = u32::from_be(g.version_tclass_flow);
            a.is_global = 1;
            a.grh = ibv_global_route {
                dgid: g.sgid,
                flow_label: flow & 0xf_ffff,
                sgid_index,
                hop_limit: 0xff,
                traffic_class: ((flow >> 20) & 0xff) as u8,
            };
        } else if eth {
            return libc::EINVAL;
        }
        // SAFETY: non-null, the caller's struct.
        unsafe { ah_attr.write(a) };
        0
    })
}

/// `ibv_create_ah_from_wc`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    let Some(p) = live(pd.cast::<PdObj>(), Kind::Pd) else {
        return fail(libc::EINVAL);
    };
    let mut a = ibv_ah_attr::default();
    let r = ibv_init_ah_from_wc(p.c.context, port_num, wc, grh, &mut a);
    if r != 0 {
        return fail(r);
    }
    ibv_create_ah(pd, &mut a)
}

// ---------------------------------------------------------------------
// Not supported: the errno libibverbs gives for a verb the provider lacks.

/// Forgets a destroyed object in its context's event routing.
fn forget_object(ctx: *mut ibv_context, c: usize) {
    if let Some(cx) = live_ctx(ctx) {
        cx.events.remove_object(c);
    }
}

/// `ibv_get_async_event`: the next asynchronous event of the context
/// (port changes, CQ errors, QP and SRQ events, the device's fatal error),
/// waiting for one unless the program made `async_fd` non-blocking
/// (`EAGAIN`); 0, or -1 with `errno`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard(-1, || {
        let Some(c) = live_ctx(context) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        loop {
            let ev = match c.events.next() {
                Ok(ev) => ev,
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            };
            let element = match ev.element {
                Element::Port(p) => ibv_async_event_element {
                    port_num: c_int::from(p),
                },
                Element::Device => ibv_async_event_element { port_num: 0 },
                el => {
                    // An object destroyed since: its event is dropped, as
                    // the kernel drops the events of a destroyed object.
                    let Some(o) = c.events.object(el) else {
                        continue;
                    };
                    match el {
                        Element::Qp(_) => ibv_async_event_element {
                            qp: o as *mut ibv_qp,
                        },
                        Element::Cq(_) => ibv_async_event_element {
                            cq: o as *mut ibv_cq,
                        },
                        _ => {
                            if ev.event_type == ty::SRQ_LIMIT_REACHED {
                                if let Some(s) = live(o as *mut SrqObj, Kind::Srq) {
                                    // Disarmed, as the device disarms it.
                                    s.srq.take_limit_event();
                                }
                            }
                            ibv_async_event_element {
                                srq: o as *mut ibv_srq,
                            }
                        }
                    }
                }
            };
            // SAFETY: non-null, the caller's struct.
            unsafe {
                event.write(ibv_async_event {
                    element,
                    event_type: ev.event_type,
                })
            };
            return 0;
        }
    })
}

/// `ibv_ack_async_event`: counts the event acknowledged on its object
/// (`events_completed`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    guard((), || {
        if event.is_null() {
            return;
        }
        // SAFETY: the caller's event, as ibv_get_async_event filled it.
        let ev = unsafe { &*event };
        // SAFETY: the union member the event type says is set.
        let (qp, cq, srq) = unsafe { (ev.element.qp, ev.element.cq, ev.element.srq) };
        match ev.event_type {
            ty::CQ_ERR if live(cq.cast::<CqObj>(), Kind::Cq).is_some() => {
                // SAFETY: a live CQ of this library.
                unsafe { (*cq).async_events_completed += 1 };
            }
            ty::SRQ_ERR | ty::SRQ_LIMIT_REACHED
                if live(srq.cast::<SrqObj>(), Kind::Srq).is_some() =>
            {
                // SAFETY: a live SRQ of this library.
                unsafe { (*srq).events_completed += 1 };
            }
            ty::QP_FATAL
            | ty::QP_REQ_ERR
            | ty::QP_ACCESS_ERR
            | ty::COMM_EST
            | ty::SQ_DRAINED
            | ty::PATH_MIG
            | ty::PATH_MIG_ERR
            | ty::QP_LAST_WQE_REACHED
                if live(qp.cast::<QpObj>(), Kind::Qp).is_some() =>
            {
                // SAFETY: a live QP of this library.
                unsafe { (*qp).events_completed += 1 };
            }
            _ => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_pointer_round_trips() {
        let mut backing = vec![0u8; size_of::<CtxObj>() + 64];
        let o = backing.as_mut_ptr().cast::<CtxObj>();
        let c = o
            .cast::<u8>()
            .wrapping_add(offset_of!(verbs_context, context))
            .cast::<ibv_context>();
        assert_eq!(ctx_obj(c), o);
    }

    #[test]
    fn attr_mask_bits_beyond_the_driver_are_refused() {
        let a = ibv_qp_attr::default();
        assert_eq!(qp_attr_from_c(&a, 1 << 21).unwrap_err(), libc::EOPNOTSUPP);
        assert_eq!(qp_attr_from_c(&a, 1 << 26).unwrap_err(), libc::EOPNOTSUPP);
        let paced = ibv_qp_attr {
            rate_limit: 5000,
            ..Default::default()
        };
        assert_eq!(qp_attr_from_c(&paced, 1 << 25).unwrap().rate_limit, 5000);
        let bad_state = ibv_qp_attr {
            qp_state: 9,
            ..Default::default()
        };
        assert_eq!(qp_attr_from_c(&bad_state, 1).unwrap_err(), libc::EINVAL);
        let bad_mtu = ibv_qp_attr {
            path_mtu: 7,
            ..Default::default()
        };
        assert_eq!(qp_attr_from_c(&bad_mtu, 1 << 8).unwrap_err(), libc::EINVAL);
    }

    #[test]
    fn null_and_foreign_pointers_give_einval() {
        assert_eq!(ibv_close_device(ptr::null_mut()), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(ptr::null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_cq(ptr::null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(ptr::null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_srq(ptr::null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_ah(ptr::null_mut()), libc::EINVAL);
        let mut junk = [0u64; 64];
        let p = junk.as_mut_ptr().cast::<c_void>();
        assert_eq!(ibv_close_device(p.cast()), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(p.cast()), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(p.cast()), libc::EINVAL);
        assert!(ibv_alloc_pd(p.cast()).is_null());
        assert!(ibv_open_device(p.cast()).is_null());
        assert!(ibv_get_device_name(p.cast()).is_null());
    }
}
