//! `ibv_attach_mcast` / `ibv_detach_mcast` over
//! [`Qp::attach_mcast`](hca_driver::verbs::Qp::attach_mcast) and
//! [`Qp::detach_mcast`](hca_driver::verbs::Qp::detach_mcast).

use core::ffi::c_int;

use hca_driver::verbs::Gid;

use crate::ffi::{ibv_gid, ibv_qp};
use crate::registry::{self, Kind};
use crate::verbs::QpObj;
use crate::{errno_of, guard};

/// Runs `attach` (true) or detach on the live UD QP `qp` with `gid`.
fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16, attach: bool) -> c_int {
    guard(libc::EIO, || {
        let o = qp.cast::<QpObj>();
        if !registry::is_live(o, Kind::Qp) || gid.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the registry says `o` is a live QP object of this library
        // (boxed by its create function, not yet destroyed).
        let q = unsafe { &*o };
        // SAFETY: non-null; the caller's GID (16 bytes, any alignment).
        let g = Gid(unsafe { gid.read_unaligned() }.raw);
        let qp = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        let r = if attach {
            qp.attach_mcast(&g, lid)
        } else {
            qp.detach_mcast(&g, lid)
        };
        match r {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_attach_mcast`: the UD QP joins the multicast group `gid` (`lid`:
/// its multicast LID on InfiniBand, 0 on Ethernet). `EINVAL` for a QP that
/// is not a live UD QP, a GID that is not a multicast one, a bad LID, or a
/// QP already attached.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    mcast(qp, gid, lid, true)
}

/// `ibv_detach_mcast`: the QP leaves the group. `EINVAL` as
/// [`ibv_attach_mcast`], and for a QP that is not attached.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    mcast(qp, gid, lid, false)
}

/// Through the C API on an emulated device (named `capi_tests` so that
/// CI's miri run skips it with the others of its kind).
#[cfg(test)]
mod capi_tests {
    use core::ptr;

    use super::{ibv_attach_mcast, ibv_detach_mcast};
    use crate::ffi::*;
    use crate::test_wr::{device, qp_cap, qp_init};
    use crate::verbs::*;

    fn qp(pd: *mut ibv_pd, cq: *mut ibv_cq, qp_type: i32) -> *mut ibv_qp {
        let mut init = qp_init(cq, qp_type, qp_cap(4, 4, 1, 1));
        let q = ibv_create_qp(pd, &mut init);
        assert!(!q.is_null());
        q
    }

    /// Attach and detach of a UD QP of device `tl`, and the refusals.
    #[test]
    fn attach_and_detach_through_the_c_api() {
        let ctx = ibv_open_device(device("tl"));
        assert!(!ctx.is_null());
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 8, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!pd.is_null() && !cq.is_null());
        let ud = qp(pd, cq, IBV_QPT_UD);
        let rc = qp(pd, cq, IBV_QPT_RC);
        let mut raw = [0u8; 16];
        raw[0] = 0xff;
        raw[1] = 0x0e;
        raw[15] = 0x42;
        let mgid = ibv_gid { raw };
        assert_eq!(ibv_attach_mcast(ud, &mgid, 0), 0);
        assert_eq!(ibv_attach_mcast(ud, &mgid, 0), libc::EINVAL, "twice");
        assert_eq!(ibv_attach_mcast(rc, &mgid, 0), libc::EINVAL, "RC");
        assert_eq!(ibv_attach_mcast(ud, ptr::null(), 0), libc::EINVAL);
        assert_eq!(ibv_attach_mcast(ptr::null_mut(), &mgid, 0), libc::EINVAL);
        let unicast = ibv_gid { raw: [0xfe; 16] };
        assert_eq!(ibv_attach_mcast(ud, &unicast, 0), libc::EINVAL);
        assert_eq!(ibv_detach_mcast(ud, &mgid, 0), 0);
        assert_eq!(ibv_detach_mcast(ud, &mgid, 0), libc::EINVAL, "not attached");
        assert_eq!(ibv_destroy_qp(rc), 0);
        assert_eq!(ibv_destroy_qp(ud), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
