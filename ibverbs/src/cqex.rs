//! Extended CQs (`ibv_create_cq_ex`): one completion at a time with
//! `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll`, its fields read
//! with `ibv_wc_read_*`.
//!
//! `start_poll` and `next_poll` take the next completion from the CQ
//! (`ENOENT` when there is none) into the CQ object, set the extended CQ's
//! `wr_id` and `status`, and the readers return its fields; `end_poll`
//! has nothing to release (each completion was consumed when taken, as
//! with `ibv_poll_cq`).
//!
//! The raw Ethernet fields of a receive CQE are kept with it, for
//! `ibv_wc_read_cvlan` (the stripped VLAN TCI, `IBV_WC_EX_WITH_CVLAN`) and
//! `ibv_wc_read_flow_tag` (the tag of the steering rule,
//! `IBV_WC_EX_WITH_FLOW_TAG`).

use core::ffi::{c_int, c_uint};
use std::sync::MutexGuard;

use hca_driver::verbs::WorkCompletion;
use hca_driver::verbs::{Completion, RxCqe};

use crate::ffi::*;
use crate::guard;
use crate::verbs::CqObj;

/// Installs the poll functions and the readers.
pub fn install(c: &mut ibv_cq_ex, _wc_flags: u64) {
    c.comp_mask = 0;
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
    c.read_cvlan = Some(read_cvlan);
    c.read_flow_tag = Some(read_flow_tag);
}

fn obj<'a>(cq: *mut ibv_cq_ex) -> Option<&'a CqObj> {
    if cq.is_null() {
        return None;
    }
    // SAFETY: data path, as libibverbs: an extended CQ of this library,
    // whose object begins with it.
    Some(unsafe { &*cq.cast::<CqObj>() })
}

fn cur(q: &CqObj) -> MutexGuard<'_, WorkCompletion> {
    q.cur.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes the next completion: 0, `ENOENT` when the CQ is empty, `EIO`
/// for a completion the device got wrong.
fn take(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || {
        let Some(q) = obj(cq) else {
            return libc::EINVAL;
        };
        let mut c = Completion::default();
        let mut rx = RxCqe::default();
        match q.cq.poll_one_rx(&mut c, &mut rx) {
            Ok(false) => libc::ENOENT,
            Ok(true) => {
                let w = WorkCompletion::from(c);
                *cur(q) = w;
                *q.cur_rx.lock().unwrap_or_else(|p| p.into_inner()) = rx;
                // SAFETY: the caller's extended CQ (checked non-null); its
                // wr_id and status are the program's to read.
                unsafe {
                    (*cq).wr_id = w.wr_id;
                    (*cq).status = w.status as c_int;
                }
                0
            }
            Err(e) => {
                log::error!("ibv_start_poll/ibv_next_poll: {e}");
                libc::EIO
            }
        }
    })
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the caller's attributes, when given.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    take(cq)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    take(cq)
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> T) -> T {
    guard(T::default(), || {
        obj(cq).map(|q| f(&cur(q))).unwrap_or_default()
    })
}

fn read_rx<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&RxCqe) -> T) -> T {
    guard(T::default(), || {
        obj(cq)
            .map(|q| f(&q.cur_rx.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
    })
}

/// `ibv_wc_read_cvlan`: the VLAN TCI the device stripped (valid when the
/// completion's flags have `IBV_WC_CVLAN` ... as libmlx5: the CQE's
/// `vlan_info`).
unsafe extern "C" fn read_cvlan(cq: *mut ibv_cq_ex) -> u16 {
    read_rx(cq, |r| r.vlan_tci())
}

/// `ibv_wc_read_flow_tag`: the flow tag of the rule that steered the
/// frame (the CQE's `sop_drop_qpn` bits 23:0 on a raw packet receive).
unsafe extern "C" fn read_flow_tag(cq: *mut ibv_cq_ex) -> u32 {
    read_rx(cq, |r| r.flow_tag())
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_int {
    read(cq, |w| w.opcode as c_int)
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.vendor_err)
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.byte_len)
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // Network order, as `ibv_wc.imm_data`; an invalidated rkey as it is.
    read(cq, |w| crate::verbs::to_ibv_wc(w).imm_data)
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.qp_num)
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.src_qp)
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    read(cq, |w| w.wc_flags.0)
}

unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| u32::from(w.slid))
}

unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.sl)
}

unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.dlid_path_bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hca_driver::verbs::WcFlags;

    #[test]
    fn imm_data_reads_in_network_order() {
        let w = WorkCompletion {
            imm_data: 0x1234_5678,
            wc_flags: WcFlags(WcFlags::WITH_IMM),
            ..WorkCompletion::default()
        };
        assert_eq!(crate::verbs::to_ibv_wc(&w).imm_data, 0x1234_5678u32.to_be());
    }
}
