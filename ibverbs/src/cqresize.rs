//! `ibv_resize_cq` over [`Cq::resize`](hca_driver::verbs::Cq::resize):
//! MODIFY_CQ with op_mod resize; the completions not yet polled are kept.

use core::ffi::c_int;

use crate::ffi::ibv_cq;
use crate::registry::{self, Kind};
use crate::verbs::CqObj;
use crate::{errno_of, guard};

/// `ibv_resize_cq`: resizes `cq` to at least `cqe` entries and sets its
/// `cqe` to the entries it now has. `EINVAL` for a pointer that is not a
/// live CQ, `cqe` below 1, above `max_cqe` or below the completions not
/// yet polled (the CQ is then as it was).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard(libc::EIO, || {
        let o = cq.cast::<CqObj>();
        if !registry::is_live(o, Kind::Cq) {
            return libc::EINVAL;
        }
        let Ok(want) = u32::try_from(cqe) else {
            return libc::EINVAL;
        };
        // SAFETY: the registry says `o` is a live CQ object of this
        // library (boxed by its create function, not yet destroyed).
        let q = unsafe { &*o };
        match q.cq.resize(want) {
            Ok(n) => {
                // SAFETY: `cq` is the live object's C view (its first
                // member); libibverbs' resize writes `cqe` the same way.
                unsafe { (*cq).cqe = c_int::try_from(n).unwrap_or(c_int::MAX) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// Through the C API on an emulated device (named `capi_tests` so that
/// CI's miri run skips it with the others of its kind).
#[cfg(test)]
mod capi_tests {
    use core::ffi::CStr;
    use core::ptr;

    use super::ibv_resize_cq;
    use crate::verbs::*;

    /// Resizes a CQ of device `tl` up and down through the C API, and the
    /// refusals: `EINVAL` and nothing changed.
    #[test]
    fn resize_cq_through_the_c_api() {
        let mut n = 0;
        let list = ibv_get_device_list(&mut n);
        assert!(!list.is_null());
        let mut dev = ptr::null_mut();
        for i in 0..usize::try_from(n).unwrap() {
            // SAFETY: the list has n entries.
            let d = unsafe { *list.add(i) };
            // SAFETY: a device name is a NUL-terminated string.
            if unsafe { CStr::from_ptr(ibv_get_device_name(d)) }.to_bytes() == b"tl" {
                dev = d;
            }
        }
        let ctx = ibv_open_device(dev);
        ibv_free_device_list(list);
        assert!(!ctx.is_null());
        let cq = ibv_create_cq(ctx, 10, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());
        // SAFETY: a live CQ.
        let cqe = || unsafe { (*cq).cqe };
        assert_eq!(cqe(), 15);
        assert_eq!(ibv_resize_cq(cq, 100), 0);
        assert_eq!(cqe(), 127);
        assert_eq!(ibv_resize_cq(cq, 0), libc::EINVAL);
        assert_eq!(ibv_resize_cq(cq, -1), libc::EINVAL);
        assert_eq!(ibv_resize_cq(cq, core::ffi::c_int::MAX), libc::EINVAL);
        assert_eq!(cqe(), 127);
        assert_eq!(ibv_resize_cq(cq, 3), 0);
        assert_eq!(cqe(), 3);
        assert_eq!(ibv_resize_cq(ptr::null_mut(), 8), libc::EINVAL);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_resize_cq(cq, 8), libc::EINVAL);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
