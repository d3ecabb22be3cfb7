//! Work queues (`ibv_create_wq`), receive work queue indirection tables
//! (`ibv_create_rwq_ind_table`) and RSS QPs.

use core::ptr;

use hca_driver::Tirn;

use crate::ffi::*;
use crate::verbs::fail;

/// Installs the context's work-queue operations.
pub(crate) fn install(_v: &mut verbs_context) {}

/// `ibv_create_qp_ex` with an indirection table and a hash.
pub(crate) fn create_rss_qp(_a: &ibv_qp_init_attr_ex) -> *mut ibv_qp {
    fail(libc::EOPNOTSUPP)
}

/// The indirect TIR of an RSS QP.
pub(crate) fn rss_tir(_qp: *mut ibv_qp) -> Option<Tirn> {
    let _ = ptr::null::<u8>();
    None
}
