//! Memory regions on the program's own memory: `ibv_reg_mr`,
//! `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`, `ibv_dereg_mr`, over
//! `Mr::register_user` (zero-copy: the pages are mapped for the device
//! through the IOMMU, the emulator's or VFIO's, and the memory key names
//! them by the IOVA, by default the process address).

use core::ffi::{c_int, c_uint, c_void};
use core::ptr::{self, NonNull};
use std::sync::Arc;

use hca_driver::verbs::{AccessFlags, Mr};
use platform::UserMemory;

use crate::ffi::{ibv_mr, ibv_pd};
use crate::registry::{self, Kind};
use crate::verbs::{fail, live_pd};
use crate::{P, errno_of, guard, status_of};

#[repr(C)]
struct MrObj {
    c: ibv_mr,
    /// Shared with the objects `ibv_import_mr` made of it.
    mr: Arc<Mr<P>>,
}

/// `IBV_ACCESS_MW_BIND`: no memory windows are offered, so it changes
/// nothing.
const ACCESS_MW_BIND: c_uint = 1 << 4;
/// `IBV_ACCESS_ZERO_BASED`.
const ACCESS_ZERO_BASED: c_uint = 1 << 5;
/// `IBV_ACCESS_ON_DEMAND`.
const ACCESS_ON_DEMAND: c_uint = 1 << 6;
/// `IBV_ACCESS_HUGETLB`: a hint.
const ACCESS_HUGETLB: c_uint = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_RANGE`: flags a provider may ignore.
const ACCESS_OPTIONAL: c_uint = 0x3ff << 20;

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard(ptr::null_mut(), || {
        let Some(p) = live_pd(pd) else {
            return fail(libc::EINVAL);
        };
        if access & (ACCESS_ON_DEMAND | ACCESS_ZERO_BASED) != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        let known = AccessFlags::ALL.0 | ACCESS_MW_BIND | ACCESS_HUGETLB | ACCESS_OPTIONAL;
        if access & !known != 0 {
            return fail(libc::EINVAL);
        }
        let Some(a) = NonNull::new(addr.cast::<u8>()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: libibverbs' contract for ibv_reg_mr: the memory stays
        // allocated until ibv_dereg_mr, which destroys the key and unmaps
        // it (MrObj owns the Mr); the library never makes a Rust reference
        // into it.
        let mem = match unsafe { UserMemory::new(a, length) } {
            Ok(m) => m,
            Err(_) => return fail(libc::EINVAL),
        };
        match Mr::register_user(p, mem, iova, AccessFlags(access & AccessFlags::ALL.0)) {
            Ok(mr) => {
                let c = ibv_mr {
                    context: p_context(pd),
                    pd,
                    addr,
                    length,
                    handle: mr.lkey().0,
                    lkey: mr.lkey().0,
                    rkey: mr.rkey().0,
                };
                let obj = registry::publish(
                    MrObj {
                        c,
                        mr: Arc::new(mr),
                    },
                    Kind::Mr,
                );
                obj.cast()
            }
            Err(e) => {
                log::info!("ibv_reg_mr: {e}");
                fail(match &e {
                    hca_driver::Error::Platform { .. } => libc::EFAULT,
                    other => errno_of(other),
                })
            }
        }
    })
}

fn p_context(pd: *mut ibv_pd) -> *mut crate::ffi::ibv_context {
    // SAFETY: `pd` was checked live by the caller.
    unsafe { (*pd).context }
}

/// `ibv_reg_mr` (`IBVERBS_1.1`): the region is known by its process
/// address.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    reg(pd, addr, length, addr as usize as u64, access as c_uint)
}

/// `ibv_reg_mr_iova` (`IBVERBS_1.7`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access as c_uint)
}

/// `ibv_reg_mr_iova2` (`IBVERBS_1.8`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access)
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
const REREG_TRANSLATION: c_int = 1;
/// `IBV_REREG_MR_CHANGE_PD`.
const REREG_PD: c_int = 2;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
const REREG_ACCESS: c_int = 4;
/// `IBV_REREG_MR_ERR_INPUT`.
const REREG_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`.
const REREG_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr` (`Mr::rereg_user`): other memory
/// (`IBV_REREG_MR_CHANGE_TRANSLATION`, known by its process address); a
/// new memory key is made over it, so `lkey` and `rkey` change (read them
/// again, as libibverbs says they may). Changing the PD or the access
/// flags is refused (`IBV_REREG_MR_ERR_INPUT`, `EOPNOTSUPP`): the driver's
/// `Mr::rereg` makes a new key for it too, while mlx5 keeps the key (the
/// kernel modifies the mkey in place), and programs written for mlx5, such
/// as rdma-core's own tests, keep using the old keys. 0, or
/// `IBV_REREG_MR_ERR_INPUT` (the region is unchanged) /
/// `IBV_REREG_MR_ERR_CMD` with `errno`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(REREG_ERR_CMD, || {
        let o = mr.cast::<MrObj>();
        let input = |e: c_int| {
            crate::set_errno(e);
            REREG_ERR_INPUT
        };
        if !registry::is_live(o, Kind::Mr) {
            return input(libc::EINVAL);
        }
        if flags == 0 || flags & !(REREG_TRANSLATION | REREG_PD | REREG_ACCESS) != 0 {
            return input(libc::EINVAL);
        }
        if flags & (REREG_PD | REREG_ACCESS) != 0 {
            return input(libc::EOPNOTSUPP);
        }
        // SAFETY: the registry says `o` is a live region of this library.
        let m = unsafe { &mut *o };
        let Some(mr) = Arc::get_mut(&mut m.mr) else {
            // Another object of it (ibv_import_mr) keeps its keys.
            return input(libc::EBUSY);
        };
        let new_pd = if flags & REREG_PD != 0 {
            match live_pd(pd) {
                Some(p) => Some(p.clone()),
                None => return input(libc::EINVAL),
            }
        } else {
            None
        };
        let new_access = if flags & REREG_ACCESS != 0 {
            let a = access as c_uint;
            if a & (ACCESS_ON_DEMAND | ACCESS_ZERO_BASED) != 0 {
                return input(libc::EOPNOTSUPP);
            }
            Some(AccessFlags(a & AccessFlags::ALL.0))
        } else {
            None
        };
        if flags & REREG_TRANSLATION != 0 {
            let Some(a) = NonNull::new(addr.cast::<u8>()) else {
                return input(libc::EINVAL);
            };
            // SAFETY: as ibv_reg_mr's: the new memory stays allocated
            // until the region is deregistered or moved again.
            let mem = match unsafe { UserMemory::new(a, length) } {
                Ok(mem) => mem,
                Err(_) => return input(libc::EINVAL),
            };
            if let Err(e) = mr.rereg_user(mem, addr as usize as u64) {
                log::info!("ibv_rereg_mr: {e}");
                return input(errno_of(&e));
            }
            m.c.addr = addr;
            m.c.length = length;
        }
        if new_pd.is_some() || new_access.is_some() {
            if let Err(e) = mr.rereg(new_pd, new_access) {
                log::info!("ibv_rereg_mr: {e}");
                crate::set_errno(errno_of(&e));
                return REREG_ERR_CMD;
            }
            if flags & REREG_PD != 0 {
                m.c.pd = pd;
            }
        }
        m.c.lkey = mr.lkey().0;
        m.c.rkey = mr.rkey().0;
        m.c.handle = m.c.lkey;
        0
    })
}

/// `ibv_dereg_mr`: destroys the key, then unmaps the pages; `EBUSY` (the
/// region stays) while an object `ibv_import_mr` made of it lives.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(libc::EIO, || {
        let o = mr.cast::<MrObj>();
        if !registry::is_live(o, Kind::Mr) {
            return libc::EINVAL;
        }
        // SAFETY: the registry says `o` is a live region of this library.
        if Arc::strong_count(unsafe { &(*o).mr }) > 1 {
            return libc::EBUSY;
        }
        let Some(b) = registry::take(o, Kind::Mr) else {
            return libc::EINVAL;
        };
        match Arc::try_unwrap(b.mr) {
            Ok(m) => status_of(m.destroy()),
            Err(_) => libc::EBUSY,
        }
    })
}

/// `ibv_import_mr` (`IBVERBS_1.10`): the region whose handle
/// (`ibv_mr.handle`, its lkey) is `handle`, registered in the PD `pd`
/// names (an imported one, see `ibv_import_device`, or the same); the
/// object has the region's keys and length, and a NULL address, as
/// rdma-core's (the kernel does not give it). `EINVAL` when there is no
/// such region. Released with `ibv_unimport_mr`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr {
    guard(ptr::null_mut(), || {
        let Some(p) = live_pd(pd) else {
            return fail(libc::EINVAL);
        };
        let found = registry::live_of(Kind::Mr).into_iter().find_map(|o| {
            if !registry::is_live(o as *const MrObj, Kind::Mr) {
                return None;
            }
            // SAFETY: the registry says `o` is a live region.
            let m = unsafe { &*(o as *const MrObj) };
            let same = m.c.handle == handle && live_pd(m.c.pd).is_some_and(|q| Arc::ptr_eq(q, p));
            same.then(|| (m.mr.clone(), m.c.length))
        });
        let Some((mr, length)) = found else {
            return fail(libc::EINVAL);
        };
        let c = ibv_mr {
            context: p_context(pd),
            pd,
            addr: ptr::null_mut(),
            length,
            handle,
            lkey: mr.lkey().0,
            rkey: mr.rkey().0,
        };
        registry::publish(MrObj { c, mr }, Kind::Mr).cast()
    })
}

/// `ibv_unimport_mr` (`IBVERBS_1.10`): forgets an imported region object
/// without destroying the region. A region this is the last object of is
/// deregistered (nothing would be left to do it).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    guard((), || {
        if let Some(b) = registry::take(mr.cast::<MrObj>(), Kind::Mr) {
            if let Ok(m) = Arc::try_unwrap(b.mr) {
                if let Err(e) = m.destroy() {
                    log::error!("ibv_unimport_mr: {e}");
                }
            }
        }
    })
}
