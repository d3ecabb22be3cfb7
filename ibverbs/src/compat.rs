//! The rest of the symbols programs and rdma-core's other libraries link
//! against (librdmacm and pyverbs are linked with `-z now`, so every symbol
//! they import must exist for them to load at all):
//!
//! - the historical kernel-ABI copies librdmacm uses
//!   (`ibv_copy_qp_attr_from_kern`, `ibv_copy_ah_attr_from_kern`,
//!   `ibv_copy_path_rec_from_kern`, `ibv_copy_path_rec_to_kern`: field by
//!   field between `<rdma/ib_user_verbs.h>`/`<rdma/ib_user_sa.h>` and
//!   `<infiniband/verbs.h>`/`<infiniband/sa.h>` structs) and
//!   `ibv_get_sysfs_path`;
//! - `_ibv_query_gid_table`, `ibv_is_fork_initialized`,
//!   `ibv_query_qp_data_in_order`;
//! - verbs the driver does not offer, with the errno libibverbs gives for
//!   a provider without them: device memory (`ibv_import_dm`), ECE
//!   (`ibv_query_ece`, `ibv_set_ece`), and dma-buf memory regions
//!   (`ibv_reg_dmabuf_mr`). (`ibv_import_device`, `_pd` and `_mr` are in
//!   `verbs` and `mr`: within one process.)

use core::ffi::{c_char, c_int, c_void};
use core::ptr;

use crate::ffi::*;
use crate::verbs::{fail, gid_entries};
use crate::{guard, set_errno};

/// `struct ib_uverbs_global_route` (`<rdma/ib_user_verbs.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec` (`<rdma/ib_user_sa.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

fn ah_from_kern(s: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: s.grh.dgid },
            flow_label: s.grh.flow_label,
            sgid_index: s.grh.sgid_index,
            hop_limit: s.grh.hop_limit,
            traffic_class: s.grh.traffic_class,
        },
        dlid: s.dlid,
        sl: s.sl,
        src_path_bits: s.src_path_bits,
        static_rate: s.static_rate,
        is_global: s.is_global,
        port_num: s.port_num,
    }
}

/// `ibv_copy_ah_attr_from_kern` (`IBVERBS_1.1`, historical).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const ib_uverbs_ah_attr) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's two structs, non-null.
    unsafe { dst.write(ah_from_kern(&*src)) };
}

/// `ibv_copy_qp_attr_from_kern` (`IBVERBS_1.0`, historical).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const ib_uverbs_qp_attr) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's struct, non-null.
    let s = unsafe { &*src };
    let as_int = |v: u32| v as c_int;
    let a = ibv_qp_attr {
        qp_state: as_int(s.qp_state),
        cur_qp_state: as_int(s.cur_qp_state),
        path_mtu: as_int(s.path_mtu),
        path_mig_state: as_int(s.path_mig_state),
        qkey: s.qkey,
        rq_psn: s.rq_psn,
        sq_psn: s.sq_psn,
        dest_qp_num: s.dest_qp_num,
        qp_access_flags: s.qp_access_flags,
        cap: ibv_qp_cap {
            max_send_wr: s.max_send_wr,
            max_recv_wr: s.max_recv_wr,
            max_send_sge: s.max_send_sge,
            max_recv_sge: s.max_recv_sge,
            max_inline_data: s.max_inline_data,
        },
        ah_attr: ah_from_kern(&s.ah_attr),
        alt_ah_attr: ah_from_kern(&s.alt_ah_attr),
        pkey_index: s.pkey_index,
        alt_pkey_index: s.alt_pkey_index,
        en_sqd_async_notify: s.en_sqd_async_notify,
        sq_draining: s.sq_draining,
        max_rd_atomic: s.max_rd_atomic,
        max_dest_rd_atomic: s.max_dest_rd_atomic,
        min_rnr_timer: s.min_rnr_timer,
        port_num: s.port_num,
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        alt_port_num: s.alt_port_num,
        alt_timeout: s.alt_timeout,
        rate_limit: 0,
    };
    // SAFETY: the caller's struct, non-null.
    unsafe { dst.write(a) };
}

/// `ibv_copy_path_rec_from_kern` (`IBVERBS_1.0`, historical).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const ib_user_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's struct, non-null.
    let s = unsafe { &*src };
    let r = ibv_sa_path_rec {
        dgid: ibv_gid { raw: s.dgid },
        sgid: ibv_gid { raw: s.sgid },
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as c_int,
        flow_label: s.flow_label,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        reversible: s.reversible as c_int,
        numb_path: s.numb_path,
        pkey: s.pkey,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        mtu: s.mtu as u8,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: the caller's struct, non-null.
    unsafe { dst.write(r) };
}

/// `ibv_copy_path_rec_to_kern` (`IBVERBS_1.0`, historical).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller's struct, non-null.
    let s = unsafe { &*src };
    let r = ib_user_path_rec {
        dgid: s.dgid.raw,
        sgid: s.sgid.raw,
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as u32,
        flow_label: s.flow_label,
        reversible: s.reversible as u32,
        mtu: u32::from(s.mtu),
        pkey: s.pkey,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        numb_path: s.numb_path,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: the caller's struct, non-null.
    unsafe { dst.write(r) };
}

/// `ibv_get_sysfs_path` (`IBVERBS_1.0`, historical): `$SYSFS_PATH` when
/// set (and the process is not set-uid), else `/sys`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: getuid and geteuid cannot fail.
        let same = unsafe { libc::getuid() == libc::geteuid() };
        let p = same
            .then(|| std::env::var("SYSFS_PATH").ok())
            .flatten()
            .map(|s| s.trim_end_matches('/').to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/sys".into());
        std::ffi::CString::new(p).unwrap_or_else(|_| c"/sys".into())
    })
    .as_ptr()
}

/// `_ibv_query_gid_table` (`IBVERBS_1.11`): the port GID tables' valid
/// entries; their number, or a negative errno.
#[unsafe(no_mangle)]
pub extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        if flags != 0
            || entry_size < size_of::<ibv_gid_entry>()
            || (entries.is_null() && max_entries > 0)
        {
            return -(libc::EINVAL as isize);
        }
        let all = match gid_entries(context) {
            Ok(v) => v,
            Err(e) => return -(e as isize),
        };
        if all.len() > max_entries {
            return -(libc::EINVAL as isize);
        }
        for (i, e) in all.iter().enumerate() {
            // SAFETY: `entries` has room for `max_entries` entries of
            // `entry_size` bytes; i < all.len() <= max_entries.
            unsafe {
                let dst = entries
                    .cast::<u8>()
                    .add(i * entry_size)
                    .cast::<ibv_gid_entry>();
                ptr::write_bytes(dst.cast::<u8>(), 0, entry_size);
                dst.write_unaligned(*e);
            }
        }
        isize::try_from(all.len()).unwrap_or(isize::MAX)
    })
}

/// `ibv_is_fork_initialized` (`IBVERBS_1.13`): `IBV_FORK_UNNEEDED` (2):
/// registered memory is mapped through the IOMMU by this process's VFIO
/// container or the emulator, not pinned by a kernel RDMA stack that a
/// fork's copy-on-write could fool.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// `ibv_query_qp_data_in_order` (`IBVERBS_1.14`): 0, no in-order
/// guarantee is claimed (what libibverbs answers when the provider does not
/// say).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}

/// `ibv_query_ece` (`IBVERBS_1.10`): not offered (`EOPNOTSUPP`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_set_ece` (`IBVERBS_1.10`): not offered (`EOPNOTSUPP`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_import_dm` (`IBVERBS_1.13`): not offered (`EOPNOTSUPP`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_import_dm(_context: *mut ibv_context, _handle: u32) -> *mut c_void {
    fail(libc::EOPNOTSUPP)
}

/// `ibv_unimport_dm` (`IBVERBS_1.13`): nothing was imported.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// `ibv_reg_dmabuf_mr` (`IBVERBS_1.12`): not offered (`EOPNOTSUPP`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_abi_copies_keep_every_field() {
        let mut k = ib_uverbs_qp_attr {
            qp_state: 3,
            path_mtu: 4,
            qkey: 0x1111_2222,
            dest_qp_num: 0x12_3456,
            max_send_wr: 9,
            max_inline_data: 64,
            pkey_index: 2,
            max_rd_atomic: 4,
            timeout: 14,
            retry_cnt: 7,
            ..Default::default()
        };
        k.ah_attr.grh.dgid[0] = 0xfe;
        k.ah_attr.grh.sgid_index = 3;
        k.ah_attr.is_global = 1;
        k.ah_attr.port_num = 1;
        k.alt_ah_attr.dlid = 0x42;
        let mut a = ibv_qp_attr::default();
        ibv_copy_qp_attr_from_kern(&mut a, &k);
        assert_eq!(
            (a.qp_state, a.path_mtu, a.qkey, a.dest_qp_num),
            (3, 4, 0x1111_2222, 0x12_3456)
        );
        assert_eq!(
            (a.cap.max_send_wr, a.cap.max_inline_data, a.pkey_index),
            (9, 64, 2)
        );
        assert_eq!((a.max_rd_atomic, a.timeout, a.retry_cnt), (4, 14, 7));
        assert_eq!(
            (a.ah_attr.grh.dgid.raw[0], a.ah_attr.grh.sgid_index),
            (0xfe, 3)
        );
        assert_eq!(
            (a.ah_attr.is_global, a.ah_attr.port_num, a.alt_ah_attr.dlid),
            (1, 1, 0x42)
        );

        let p = ib_user_path_rec {
            dgid: [1; 16],
            sgid: [2; 16],
            dlid: 0x0100,
            mtu: 4,
            pkey: 0xffff,
            sl: 3,
            rate: 16,
            preference: 9,
            ..Default::default()
        };
        let mut r = ibv_sa_path_rec::default();
        ibv_copy_path_rec_from_kern(&mut r, &p);
        assert_eq!(
            (r.dgid.raw, r.sgid.raw, r.dlid, r.mtu),
            ([1; 16], [2; 16], 0x0100, 4)
        );
        assert_eq!((r.pkey, r.sl, r.rate, r.preference), (0xffff, 3, 16, 9));
        let mut back = ib_user_path_rec::default();
        ibv_copy_path_rec_to_kern(&mut back, &r);
        assert_eq!(
            (back.dgid, back.mtu, back.pkey, back.preference),
            ([1; 16], 4, 0xffff, 9)
        );
    }
}
