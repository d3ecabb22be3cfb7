//! # The verbs API
//!
//! What a libibverbs user expects, in Rust form, over the control plane of
//! this crate and the data path of `verbs-core`:
//!
//! | libibverbs | here |
//! |---|---|
//! | `ibv_open_device` | [`Hca::open_context`](crate::Hca::open_context) → [`Context`] |
//! | `ibv_query_device` / `_port` / `_gid` / `_pkey` | [`Context::query_device`], [`Context::query_port`], [`Context::query_gid`], [`Context::query_pkey`] |
//! | `ibv_alloc_pd` | [`Context::alloc_pd`] → [`Pd`] |
//! | `ibv_reg_mr` | [`Hca::alloc_buf`](crate::Hca::alloc_buf) → [`DmaBuf`], [`Pd::reg_mr`] → [`Mr`] (lkey, rkey) |
//! | `ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event` | [`Context::create_cq`] → [`Cq`], [`Cq::poll`], [`Cq::req_notify`], [`Cq::wait_event`] |
//! | `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp` | [`Pd::create_qp`] with [`QpInitAttr`] → [`Qp`], [`Qp::modify`] with [`QpAttr`], [`Qp::query`] |
//! | `ibv_post_send`, `ibv_post_recv` | [`Qp::post_send`], [`Qp::post_send_list`], [`Qp::batch`], [`Qp::post_recv`] (work requests are verbs-core's [`SendWr`], [`RecvWr`]) |
//! | `ibv_create_srq`, `ibv_post_srq_recv`, `ibv_modify_srq` | [`Pd::create_srq`] → [`Srq`], [`Srq::post_recv`], [`Srq::arm_limit`] |
//! | `ibv_create_ah` | [`Pd::create_ah`] → [`Ah`] |
//! | `ibv_get_async_event` | per object: [`Qp::take_events`], [`Srq::take_events`]; all of them: [`Hca::events`](crate::Hca::events)`().pop()` |
//!
//! ## Ownership
//!
//! Every object borrows its parents: the [`Hca`](crate::Hca) outlives the
//! context, the context its PDs and CQs, a PD its memory regions, QPs, SRQs
//! and address handles, a memory region its buffer, a QP its CQs and SRQ.
//! So nothing can be destroyed while something uses it, and the HCA cannot
//! be closed while any of them exists. Each has an explicit
//! `destroy(self) -> Result` (or [`Mr::deregister`]) and destroys itself
//! when dropped, logging a failure. Memory the device may still write
//! after a failed destroy is kept until the HCA is closed (or leaked),
//! never freed under the device.
//!
//! A CQ cannot be destroyed while a QP completes to it:
//!
//! ```compile_fail,E0505
//! # use hca_driver::verbs::*;
//! # let emu = hca_emu::EmuHca::new(Default::default());
//! # let hca = hca_driver::Hca::open(emu.platform(), Default::default()).unwrap();
//! let ctx = hca.open_context().unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let cq = ctx.create_cq(16).unwrap();
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
//! cq.destroy().unwrap(); // `cq` is borrowed by `qp`
//! drop(qp);
//! ```
//!
//! nor a buffer freed while a memory region covers it, nor the HCA closed
//! while a context is open:
//!
//! ```compile_fail,E0505
//! # use hca_driver::verbs::*;
//! # let emu = hca_emu::EmuHca::new(Default::default());
//! # let hca = hca_driver::Hca::open(emu.platform(), Default::default()).unwrap();
//! let ctx = hca.open_context().unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let buf = hca.alloc_buf(4096).unwrap();
//! let mr = pd.reg_mr(&buf, AccessFlags::LOCAL_WRITE).unwrap();
//! drop(buf); // `buf` is borrowed by `mr`
//! drop(mr);
//! ```
//!
//! ```compile_fail,E0505
//! # let emu = hca_emu::EmuHca::new(Default::default());
//! # let hca = hca_driver::Hca::open(emu.platform(), Default::default()).unwrap();
//! let ctx = hca.open_context().unwrap();
//! hca.close().unwrap(); // `hca` is borrowed by `ctx`
//! drop(ctx);
//! ```
//!
//! ## Addresses
//!
//! Addresses in SGEs and RDMA requests are bus addresses (IOVAs):
//! [`DmaBuf::iova`], [`Mr::addr`]. A memory region is a memory key
//! (CREATE_MKEY, MTT by default) over a buffer range; lkey and rkey are
//! the same key.
//!
//! ## Checks before the device
//!
//! A work request is refused with
//! [`Error::InvalidWorkRequest`](crate::Error::InvalidWorkRequest) and a
//! [`WrError`] before anything of it is written: posting in a state whose
//! queue takes nothing ([`QpState::can_post_send`]), an lkey that is no
//! region of the QP's PD, an SGE outside its region, a region without local
//! write where the device writes, and everything verbs-core refuses (queue
//! full, too many SGEs, inline data too long, an operation the QP type does
//! not have). [`SgeCheck::Off`] leaves the key checks to the device.
//!
//! ## Errors of the device
//!
//! A failing work request completes with its status
//! ([`WcStatus`], printed with the libibverbs
//! strings); the QP is then in ERR (RC) or SQE (UC, UD sends) and every
//! outstanding request completes with `IBV_WC_WR_FLUSH_ERR`.
//! [`Qp::drain`] moves a QP to ERR and waits until all is flushed.
//! Moving a QP to RESET or destroying it removes its completions not yet
//! polled from its CQs (rdma-core's `__mlx5_cq_clean`; the SRQ WQEs they
//! consumed go back to the SRQ): they never surface later, and the other
//! QPs' completions on those CQs stay as they were.
//!
//! ## RoCE
//!
//! [`Context::open`] enables RoCE on the vport, then programs two GIDs of
//! every Ethernet port, as Linux lays out a port's default GIDs: the port
//! MAC's link-local GID as RoCE v1 at [`ROCE_V1_GID_INDEX`] (0) and as
//! RoCE v2 at [`DEFAULT_GID_INDEX`] (1). A Linux peer uses the same
//! indices (`-g 1` for RoCE v2). Paths and address handles name a destination GID; the
//! destination MAC is derived from a link-local or multicast GID, or given
//! ([`AhAttr::dmac`]).
//!
//! ## Polling
//!
//! There are no interrupts: [`Cq::wait_event`], [`Cq::poll_wait`],
//! [`Srq::wait_limit_event`] and [`Qp::drain`] call
//! [`Hca::service`](crate::Hca::service) while they wait; a program that
//! only polls CQs must call it itself (see the crate documentation).

mod ah;
mod attr;
mod buf;
mod context;
mod cq;
mod modify;
mod pd;
mod qp;
mod queue;
mod srq;

pub use ah::{Ah, AhAttr};
pub use attr::{
    AtomicByteOrder, AtomicCap, DeviceAttr, Gid, GidEntry, PortAttr, RoceVersion,
    eth_oper_width_speed, eth_width_speed, ib_width_from_ptys, linux_atomic_cap, speed, width,
};
pub use buf::{DMA_BUF_ALIGN, DmaBuf};
pub use context::{Context, DEFAULT_GID_INDEX, DEFAULT_PKEY, MAX_CONTEXT_QPS, ROCE_V1_GID_INDEX};
pub use cq::{Cq, MAX_QPS_PER_CQ};
pub use modify::{PathMigState, QpAttr, QpAttrMask, QpState, qp_type_name, transition_masks};
pub use pd::{AccessFlags, MAX_MRS_PER_PD, Mr, MrMode, Pd};
pub use qp::{DRAIN_WR_ID, Qp, QpCap, QpInitAttr, SendBatch, SgeCheck, WrError};
pub use srq::{Srq, SrqAttr, SrqInitAttr};

/// Writes the set bits of `bits` as their names joined with ` | `, then
/// the bits no name covers in hex; `0` when none is set.
fn write_flags(
    f: &mut core::fmt::Formatter<'_>,
    bits: u32,
    names: impl Iterator<Item = (u32, &'static str)> + Clone,
) -> core::fmt::Result {
    let mut first = true;
    for (b, n) in names.clone() {
        if bits & b != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            f.write_str(n)?;
            first = false;
        }
    }
    let rest = bits & !names.fold(0, |known, (b, _)| known | b);
    if rest != 0 {
        if !first {
            f.write_str(" | ")?;
        }
        write!(f, "{rest:#x}")?;
        first = false;
    }
    if first {
        f.write_str("0")?;
    }
    Ok(())
}

// The data-path types the API takes and returns.
pub use verbs_core::{
    Completion, GlobalRoute, Payload, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest,
    WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
