//! # hca-ibverbs: libibverbs.so.1 over hca-driver
//!
//! A shared library with the soname, the symbol versions and the public
//! structs of rdma-core's libibverbs (the ABI of Debian 12's
//! `libibverbs.so.1`, rdma-core 44), implemented with this project's
//! driver, so that an unmodified libibverbs program runs over a ConnectX
//! under VFIO, or over the emulated ConnectX of `hca-emu`, with only
//! `LD_LIBRARY_PATH` changed:
//!
//! ```sh
//! bash ibverbs/build-so.sh            # -> target/ibverbs/libibverbs.so.1
//! HCA_IBV_DEVICES="emu:emu0=loopback" LD_LIBRARY_PATH=target/ibverbs ibv_devinfo -v
//! ```
//!
//! Devices are named by `HCA_IBV_DEVICES` ([`devices`]).
//!
//! The C structs are in [`ffi`]; the exported functions are `extern "C"`
//! functions of this crate, linked into the shared object by
//! `build-so.sh` with the version script `libibverbs.map` (a `staticlib`
//! linked with `cc -shared`, because rustc writes a version script of its
//! own for a `cdylib`, which a second one cannot be combined with).
//!
//! Conventions, as libibverbs': functions returning `int` return 0 or an
//! errno value; functions returning a pointer return NULL and set `errno`;
//! `ibv_poll_cq` returns a negative number on error. Null pointers and
//! pointers that are not live objects of this library (checked on every
//! control-path call) give `EINVAL`; an operation the driver cannot serve
//! gives `EOPNOTSUPP`. A panic never crosses into C: it is caught and
//! reported as `EIO`.

mod async_ev;
#[cfg(test)]
mod capi_tests;
mod compat;
mod cqex;
mod cqresize;
pub mod devices;
pub mod ffi;
pub mod flow;
mod mcast;

/// The kernel-ABI structs (`<rdma/ib_user_verbs.h>`, `<rdma/ib_user_sa.h>`)
/// and `<infiniband/sa.h>`'s path record, which the historical
/// `ibv_copy_*_from_kern` functions convert.
pub mod kabi {
    pub use crate::compat::{
        ib_user_path_rec, ib_uverbs_ah_attr, ib_uverbs_global_route, ib_uverbs_qp_attr,
        ibv_sa_path_rec,
    };
}
mod mr;
mod provider_abi;
mod qpex;
#[cfg(test)]
mod raw_tests;
mod registry;
mod strs;
#[cfg(test)]
mod test_wr;
mod verbs;
mod wq;

use std::sync::Arc;

use hca_driver::Hca;
use hca_emu::EmuPlatform;
use platform::Either;
use platform::vfio::VfioPlatform;

/// The platform of every device: the emulated ConnectX (`Left`) or a PCI
/// function under VFIO (`Right`).
pub type P = Either<EmuPlatform, VfioPlatform>;

/// A brought-up device, shared by its contexts.
pub struct Dev {
    running: devices::Running,
}

impl Dev {
    /// The HCA.
    pub fn hca(&self) -> &Arc<Hca<P>> {
        &self.running.hca
    }

    /// The contexts its service thread gives asynchronous events to.
    pub(crate) fn subscribers(&self) -> &Arc<async_ev::Subscribers> {
        &self.running.subscribers
    }
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// The return value of a verb that gives 0 or an errno: 0 for success,
/// else the errno of the driver error.
pub(crate) fn status_of(r: Result<(), hca_driver::Error>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// The errno libibverbs gives for a driver error.
pub(crate) fn errno_of(e: &hca_driver::Error) -> i32 {
    use hca_driver::Error as E;
    match e {
        E::InvalidArgument { .. }
        | E::InvalidAttribute { .. }
        | E::QpAttrMask { .. }
        | E::InvalidTransition { .. }
        | E::InvalidWorkRequest { .. }
        | E::AddressHandle(_)
        | E::Command(_) => libc::EINVAL,
        // mlx5_rl_add_rate: "There is no room in the rate table".
        E::CapacityExceeded { what, .. } if *what == hca_driver::RATE_TABLE => libc::ENOSPC,
        E::CapacityExceeded { .. } => libc::ENOMEM,
        E::Unsupported(_) => libc::EOPNOTSUPP,
        E::InUse { .. } => libc::EBUSY,
        E::Timeout { .. } => libc::ETIMEDOUT,
        _ => libc::EIO,
    }
}

/// Runs `f`, turning a panic into `on_panic` (a panic must not unwind
/// into C).
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            log::error!("hca-ibverbs: internal panic caught at the C boundary");
            set_errno(libc::EIO);
            on_panic
        }
    }
}
