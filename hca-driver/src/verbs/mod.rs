//! # The verbs API
//!
//! What a libibverbs user expects, in Rust form, over the control plane of
//! this crate and the data path of `verbs-core`:
//!
//! | libibverbs | here |
//! |---|---|
//! | `ibv_open_device` | [`Context::open`] → [`Context`] |
//! | `ibv_query_device` / `_port` / `_gid` / `_pkey` | [`Context::query_device`], [`Context::query_port`], [`Context::query_gid`], [`Context::query_pkey`] |
//! | `ibv_alloc_pd` | [`Pd::alloc`] → [`Pd`] |
//! | `ibv_reg_mr` | [`DmaBuf::alloc`] → [`DmaBuf`], [`Mr::register`] → [`Mr`] (lkey, rkey) |
//! | `ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event` | [`Cq::create`] → [`Cq`], [`Cq::poll`], [`Cq::req_notify`], [`Cq::wait_event`] |
//! | `ibv_create_comp_channel`, `ibv_create_cq` on a channel, `ibv_get_cq_event`, `ibv_ack_cq_events` | [`CompChannel::create`], [`Cq::create_on_channel`], [`CompChannel::get_event`] (and `CompChannel::fd` to poll on, Linux), [`Cq::ack_events`] |
//! | `ibv_reg_mr` on user memory, `ibv_reg_mr_iova2`, `ibv_rereg_mr` | [`Mr::register_user`] over a [`platform::UserMemory`], [`Mr::rereg`] (PD, access), [`Mr::rereg_user`] (translation) |
//! | `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp` | [`Qp::create`] with [`QpInitAttr`] → [`Qp`], [`Qp::modify`] with [`QpAttr`], [`Qp::query`] |
//! | `ibv_post_send`, `ibv_post_recv` | [`Qp::post_send`], [`Qp::post_send_list`], [`Qp::post_send_sge`], [`Qp::batch`], [`Qp::post_recv`] (work requests are verbs-core's [`SendWr`], [`RecvWr`]) |
//! | `ibv_create_srq`, `ibv_post_srq_recv`, `ibv_modify_srq` | [`Srq::create`] → [`Srq`], [`Srq::post_recv`], [`Srq::arm_limit`] |
//! | `ibv_create_ah` | [`Ah::create`] → [`Ah`] |
//! | `ibv_get_async_event` | per object: [`Qp::take_events`], [`Srq::take_events`]; all of them: [`Hca::events`](crate::Hca::events)`().pop()` |
//!
//! One name per operation on every type: `post_send(&SendWr)`,
//! `post_send_sge`, `post_rdma_write`, `post_rdma_read` on [`Qp`] and on
//! its [`SendBatch`]; `post_recv(&RecvWr)` and `post_recv_list` on [`Qp`]
//! and [`Srq`]. Keys are typed ([`Lkey`](crate::Lkey),
//! [`Rkey`](crate::Rkey)) where the API takes one.
//!
//! ## Ownership
//!
//! Every object holds handles of its parents: a context holds the
//! [`Hca`](crate::Hca), a PD and a CQ their context, a memory region its
//! PD and its buffer, a QP its PD, its CQs and its SRQ, an SRQ and an
//! address handle their PD. So nothing is destroyed while something uses
//! it, and the objects can be kept in the user's structs and sent to other
//! threads (they are `Send` and `Sync` when the platform is; posting to a
//! QP takes `&mut self`, polling a CQ `&self`).
//!
//! The handles are those of a [`Share`] family, the type parameter `S` of
//! every verbs type: `ArcShare` (`Arc`, feature `alloc`, on with `std`,
//! and then the default) or [`StaticShare`] (`&'static`, for bare metal
//! without a heap: the caller keeps parents in statics). Every object is
//! created by an associated function of its type from its parents'
//! handles, e.g. `Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))`,
//! and comes back as an owned value, which the caller wraps in a handle
//! when it is to be a parent.
//!
//! An object the user owns outright has an explicit `destroy(self) ->
//! Result` ([`Mr::destroy`] is `ibv_dereg_mr`); every object also destroys
//! itself when dropped, logging a failure. A shared context, PD, CQ or SRQ
//! is destroyed with `try_destroy` on its handle ([`Context::try_destroy`],
//! [`Pd::try_destroy`], [`Cq::try_destroy`], [`Srq::try_destroy`]), which
//! reports [`Error::InUse`](crate::Error::InUse) while a child still holds
//! it. Memory the device may still write after a failed destroy is kept
//! until the HCA is closed (or leaked), never freed under the device.
//!
//! Why this design: a QP names four parents of different types, so one
//! type parameter choosing the ownership scheme for all of them (a family
//! with a generic associated type) keeps the types short and consistent;
//! `Arc` is what a `std` program wants, and `&'static` is the only owned
//! handle a heapless bare-metal image has (objects live in statics, set
//! up once, e.g. with `spin::Once`).
//!
//! A CQ cannot be destroyed outright while a QP holds it (it is shared,
//! and `destroy` needs the object itself):
//!
//! ```compile_fail,E0507
//! # use std::sync::Arc;
//! # use hca_driver::verbs::*;
//! # let emu = hca_emu::EmuHca::new(Default::default());
//! # let hca = Arc::new(hca_driver::Hca::open(emu.platform(), Default::default()).unwrap());
//! let ctx = Arc::new(Context::open(&hca).unwrap());
//! let pd = Arc::new(Pd::alloc(&ctx).unwrap());
//! let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
//! let qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
//! cq.destroy().unwrap(); // `cq` is shared: cannot move out of an `Arc`
//! drop(qp);
//! ```
//!
//! and through its handle it is refused at run time while the QP lives,
//! then destroyed once the QP is gone:
//!
//! ```
//! # use std::sync::Arc;
//! # use hca_driver::verbs::*;
//! # let emu = hca_emu::EmuHca::new(Default::default());
//! # let hca = Arc::new(hca_driver::Hca::open(emu.platform(), Default::default()).unwrap());
//! let ctx = Arc::new(Context::open(&hca)?);
//! let pd = Arc::new(Pd::alloc(&ctx)?);
//! let cq = Arc::new(Cq::create(&ctx, 16)?);
//! let qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))?;
//! let e = Cq::try_destroy(cq.clone()).unwrap_err();
//! assert!(matches!(e, hca_driver::Error::InUse { what: "the CQ", .. }));
//! drop(qp);
//! Cq::try_destroy(cq)?; // the last handle: DESTROY_CQ
//! # Ok::<(), hca_driver::Error>(())
//! ```
//!
//! Nor can the HCA be closed while a context holds it (closing takes the
//! HCA itself, which is shared):
//!
//! ```compile_fail,E0507
//! # use std::sync::Arc;
//! # let emu = hca_emu::EmuHca::new(Default::default());
//! # let hca = Arc::new(hca_driver::Hca::open(emu.platform(), Default::default()).unwrap());
//! let ctx = hca_driver::verbs::Context::open(&hca).unwrap();
//! hca.close().unwrap(); // `hca` is shared: cannot move out of an `Arc`
//! drop(ctx);
//! ```
//!
//! Capacities (QPs per context, which is also QPs per CQ; memory regions
//! per PD) are held in one place, [`Capacities`], sized from the device's
//! capabilities; a CQ finds the QP of a completion by its user index in
//! O(1).
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
//! not have). [`SgeCheck::Off`] leaves the key checks to the device, but
//! for the reserved lkey, which the device does not check.
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
mod capacity;
mod channel;
mod context;
mod cq;
mod modify;
mod pd;
mod qp;
mod queue;
mod share;
mod srq;

pub use crate::pacing::{PacketPacingCaps, RateLimit};
pub use ah::{Ah, AhAttr};
pub use attr::{
    AtomicByteOrder, AtomicCap, DEVICE_MANAGED_FLOW_STEERING, DEVICE_RAW_IP_CSUM,
    DEVICE_RAW_SCATTER_FCS, DeviceAttr, Gid, GidEntry, PortAttr, RAW_PACKET_CAP_CVLAN_STRIPPING,
    RAW_PACKET_CAP_DELAY_DROP, RAW_PACKET_CAP_IP_CSUM, RAW_PACKET_CAP_SCATTER_FCS, RoceVersion,
    eth_oper_width_speed, eth_width_speed, ib_width_from_ptys, linux_atomic_cap, speed, width,
};
pub use buf::{DMA_BUF_ALIGN, DmaBuf};
pub use capacity::{Capacities, MAX_CONTEXT_QPS, MAX_MRS_PER_PD};
pub use channel::{CompChannel, CqEvent, MAX_CHANNEL_CQS};
pub use context::{Context, DEFAULT_GID_INDEX, DEFAULT_PKEY, ROCE_V1_GID_INDEX};
pub use cq::Cq;
pub use modify::{PathMigState, QpAttr, QpAttrMask, QpState, qp_type_name, transition_masks};
pub use pd::{AccessFlags, Mr, MrMode, Pd};
pub use qp::{
    DRAIN_WR_ID, ETH_L2_INLINE_HEADER_SIZE, MAX_PINNED_RECEIVERS, Qp, QpCap, QpCreateFlags,
    QpInitAttr, SendBatch, SgeCheck, WrError,
};
#[cfg(feature = "alloc")]
pub use share::ArcShare;
pub use share::{DefaultShare, Handle, Share, SlotShare, StaticShare};
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
    Completion, GlobalRoute, L3HdrType, L4HdrType, Payload, PollError, QpType, RecvWr, RxCqe,
    SendFlags, SendOp, SendWr, Sge, UdDest, VlanInsert, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};
