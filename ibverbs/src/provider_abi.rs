//! rdma-core's provider ABI (`IBVERBS_PRIVATE_34`), so that the provider
//! libraries (Debian's libmlx5.so.1, libefa.so.1), which programs such as
//! pyverbs load beside libibverbs and which are linked with `-z now`, can
//! be loaded at all.
//!
//! This library is the only provider of its devices: it loads no provider
//! library, so a registration (`verbs_register_driver_34`, which a
//! provider calls from its constructor) is accepted and not used, and no
//! context of a provider can be made (`verbs_open_device`,
//! `_verbs_init_and_alloc_context`: NULL, `EOPNOTSUPP`). The `ibv_cmd_*`
//! functions send commands to the kernel's uverbs interface, which this
//! library does not use (there is no command fd, `cmd_fd` is -1): they
//! answer `EOPNOTSUPP`. A provider's direct-verbs call on one of this
//! library's contexts (`mlx5dv_*`) finds it is not the provider's device
//! and refuses, as it would for another vendor's device.

use core::ffi::{c_int, c_void};
use core::ptr;
use std::sync::atomic::AtomicBool;

use crate::ffi::{ibv_ah_attr, ibv_context, ibv_cq};
use crate::set_errno;

/// `verbs_allow_disassociate_destroy` (a `bool` libibverbs sets from
/// `RDMAV_ALLOW_DISASSOC_DESTROY`): false, there is no disassociation.
#[unsafe(no_mangle)]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

macro_rules! no_kernel_commands {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: a kernel uverbs command; there is no kernel interface here (`EOPNOTSUPP`).")]
            #[unsafe(no_mangle)]
            pub extern "C" fn $name() -> c_int {
                libc::EOPNOTSUPP
            }
        )*
    };
}

no_kernel_commands!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_cq_ex2,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);

/// `verbs_register_driver_34`: a provider library registering itself
/// (from its constructor); accepted, not used (see the module docs).
#[unsafe(no_mangle)]
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {
    log::debug!("a provider library registered itself; this library is the only provider");
}

/// `verbs_open_device`: no provider context can be made (NULL,
/// `EOPNOTSUPP`).
#[unsafe(no_mangle)]
pub extern "C" fn verbs_open_device(
    _device: *mut c_void,
    _private: *mut c_void,
) -> *mut ibv_context {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}

/// `_verbs_init_and_alloc_context`: no provider context can be made
/// (NULL, `EOPNOTSUPP`).
#[unsafe(no_mangle)]
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}

/// `verbs_uninit_context`: no provider context exists, nothing to undo.
#[unsafe(no_mangle)]
pub extern "C" fn verbs_uninit_context(_context: *mut c_void) {}

/// `verbs_set_ops`: no provider context exists, nothing to set.
#[unsafe(no_mangle)]
pub extern "C" fn verbs_set_ops(_vctx: *mut c_void, _ops: *const c_void) {}

/// `verbs_init_cq`: no provider CQ exists, nothing to initialise.
#[unsafe(no_mangle)]
pub extern "C" fn verbs_init_cq(
    _cq: *mut ibv_cq,
    _context: *mut ibv_context,
    _channel: *mut c_void,
    _cq_context: *mut c_void,
) {
}

/// `__verbs_log` (a provider's debug log): ignored.
#[unsafe(no_mangle)]
pub extern "C" fn __verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_void) {}

/// `ibv_dontfork_range` (`IBVERBS_1.1`): 0; registered memory needs no
/// protection from fork here (see `ibv_is_fork_initialized`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range` (`IBVERBS_1.1`): 0, as `ibv_dontfork_range`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_resolve_eth_l2_from_gid` (`IBVERBS_1.1`): the destination MAC of
/// a link-local (EUI-64) or multicast GID (the driver does no neighbour
/// resolution: other GIDs `EINVAL`); `vid` 0xffff, no VLAN (an assumption:
/// the VLAN of the source GID is not looked up).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    if attr.is_null() || eth_mac.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's attributes, non-null.
    let a = unsafe { &*attr };
    if a.is_global == 0 {
        return libc::EINVAL;
    }
    match hca_driver::verbs::Gid(a.grh.dgid.raw).mac() {
        Some(mac) => {
            // SAFETY: the caller's 6-byte MAC buffer and optional vid.
            unsafe {
                ptr::copy_nonoverlapping(mac.as_ptr(), eth_mac, 6);
                if !vid.is_null() {
                    *vid = 0xffff;
                }
            }
            0
        }
        None => libc::EINVAL,
    }
}
