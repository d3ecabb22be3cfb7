//! # verbs-core: the mlx5 data path
//!
//! `#![no_std]`, no allocation. Builds work-queue entries (control, remote
//! address, atomic, data, inline, datagram and Ethernet segments) into send
//! queues, posts receive and shared-receive WQEs, updates doorbell records and
//! rings the UAR doorbell (or copies the WQE to the BlueFlame register), and
//! parses completion queue entries into work completions with every index and
//! length bounds-checked. Generic over [`platform::Mmio`], so the doorbell of
//! real hardware compiles to one 64-bit store.
//!
//! Layouts and behaviour follow the PRM and rdma-core's mlx5 provider; the
//! tests check every send, receive and CQE vector that the real provider
//! produced (`data/prm/libmlx5-vectors.json`) byte for byte.
//!
//! ## Objects and who owns what
//!
//! | object | owns | made from |
//! |---|---|---|
//! | [`Qp`] ([`SendQueue`] + [`RecvQueue`]) | one [`DmaRegion`](platform::DmaRegion) laid out by [`QpLayout`], the UAR window `M` | [`QpGeometry`] (rdma-core sizing rules, see [`sizing`]) |
//! | [`Srq`] | one region laid out by [`SrqLayout`] | [`SrqGeometry`] |
//! | [`Cq`] | one region laid out by [`CqLayout`], the UAR window `M` | [`CqConfig`] |
//! | [`QpCompletions`], [`SrqCompletions`] | nothing: handles into a QP's / SRQ's bookkeeping, `Send + Sync` | [`Qp::completions`], [`Srq::completions`] |
//! | [`CqTable`] | the handles of the queues a CQ serves, by user index | `CqTable::new()` |
//!
//! A region holds the rings the device sees, the doorbell record, and
//! host-only bookkeeping after them: the `wr_id` table, the send queue's
//! `wqe_head` table (rdma-core's), posted receive lengths and the
//! producer/consumer counters. That is where `wr_id`s live without a heap;
//! the device is never given those addresses. Completion handles point into
//! it; a queue refuses [`into_parts`](Qp::into_parts) while a handle is
//! alive, so the memory a handle uses is never freed under it. Only one
//! handle per queue side exists at a time, so exactly one CQ retires a send
//! or receive queue.
//!
//! Posting takes `&mut` of the queue (one posting thread per queue); polling
//! takes `&mut Cq` and `&` of the resolver: a poller thread and a posting
//! thread share a queue through the handle, whose counters are atomics
//! (acquire/release) and whose tables are written before the doorbell and
//! read after the CQE.
//!
//! ## The fast paths
//!
//! Every way of posting and polling validates the same way (queue space,
//! QP type and opcode, SGE count, inline length, WQE size; CQE owner bit,
//! opcode and format, user index and QPN, WQE opcode, `wqe_counter` inside
//! the outstanding window, receive `byte_cnt`); the fast paths only make
//! the common case cheap:
//!
//! - [`SendQueue::post_rdma_write`], [`post_rdma_read`](SendQueue::post_rdma_read),
//!   [`post_send`](SendQueue::post_send) and [`post_sge`](SendQueue::post_sge)
//!   post one work request with one SGE, arguments in registers; the same
//!   methods on a [`SendBatch`] write without ringing (one doorbell for the
//!   batch). On a connected QP with plain flags and a non-empty SGE they
//!   write one WQEBB with a few 64-bit stores; anything else takes the
//!   general path of [`SendQueue::post`] with the same arguments.
//! - [`SendQueue::wr_rdma_write`], [`wr_rdma_read`](SendQueue::wr_rdma_read),
//!   [`wr_send`](SendQueue::wr_send) and [`wr_sge`](SendQueue::wr_sge) (and
//!   the same on a [`SendBatch`]) are those methods with the two-word
//!   [`SendError`]: a `Result<(), SendError>` comes back in registers where
//!   a `Result<(), Error>` (32 bytes) goes through memory, which counts in
//!   a function of the caller's that returns it. `Error::from` gives the
//!   full error, field for field; `?` converts it.
//! - The doorbell is one 64-bit store without a bounds check: the
//!   BlueFlame register's offsets are checked against the window once,
//!   when the queue is made ([`platform::Mmio::write64_unchecked`]).
//! - [`Cq::poll`] into [`Completion`]s (32 bytes, every `ibv_wc` field by
//!   accessor) retires a run of successful requester CQEs of one send
//!   queue with one lookup and one tail store. A CQE that fails a check,
//!   and every other kind, is decoded by the general path, which says what
//!   is wrong. Polling into [`WorkCompletion`]s works the same, with a
//!   conversion per completion.
//! - One CQE at a time: [`Cq::poll_one_into`] writes the completion into a
//!   caller's [`Completion`] and returns `Result<bool, PollError>` (the
//!   two-word [`PollError`] converts to [`Error`] field for field, as
//!   [`SendError`] does); a polling session, [`Cq::poller`] →
//!   [`CqPoller::poll_one_into`], also remembers the send queue and WQE
//!   opcode of the CQE before, so a CQE of the same queue is checked
//!   against them instead of being looked up (the resolver is borrowed
//!   for the session, so the answer cannot change). [`Cq::poll_one`]
//!   returns `Result<Option<Completion>, Error>`.
//!
//! Instructions per operation (callgrind, x86_64, release; see
//! `examples/datapath_cost.rs`), each in a function of its own that returns
//! the result: one RDMA write with its doorbell 57 (`wr_rdma_write`; 64
//! with `post_rdma_write`'s `Error`), per WQE in a batch of 32: 40.7
//! (43), one CQE by a session's `poll_one_into` 56.5 (`Cq::poll_one_into`
//! 66, `poll_one` 76), per CQE in a poll of 32: 38 (rdma-core's libmlx5
//! on the same machine: 319, 190 (123 with `ibv_wr_*`), 185, 108).
//!
//! ```
//! # use platform::host::HostBlock;
//! # use platform::MmioWindow;
//! # use verbs_core::*;
//! # let uar_mem = HostBlock::new(4096, 4096).unwrap();
//! # // SAFETY: the block outlives the window and is only used through it.
//! # let uar = unsafe { MmioWindow::new(uar_mem.host_ptr(), 4096) };
//! # let caps = QpCaps { max_send_wr: 64, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0,
//! #                     max_inline_data: 0, send_ops: None };
//! # let geometry = QpGeometry::new(QpType::Rc, &caps, &DeviceLimits::default())?;
//! # let qp_mem = HostBlock::new(geometry.layout.total_bytes, 4096).unwrap();
//! # let cfg = QpConfig { qp_type: QpType::Rc, qpn: 0x123, geometry, atomics: true,
//! #                      sq_sig_all: false, eth_min_inline: 0 };
//! # let mut qp = Qp::new(qp_mem.lend(0x10_0000, 0).unwrap(), Some((&uar, BfConfig::new(0))), &cfg)
//! #     .map_err(|(e, _)| e)?;
//! # let layout = CqLayout::for_entries(255)?;
//! # let cq_mem = HostBlock::new(layout.total_bytes, 4096).unwrap();
//! # let cq_cfg = CqConfig { cqn: 7, layout, version: CqeVersion::V1, uar_page_offset: 0 };
//! # let mut cq = Cq::new(cq_mem.lend(0x20_0000, 0).unwrap(), &uar, &cq_cfg).map_err(|(e, _)| e)?;
//! # let mut table = CqTable::<8>::new();
//! # table.insert(5, qp.completions(true, false, None)?).map_err(|(e, _)| e)?;
//! // (QP 0x123 with user index 5 and its CQ, wired as below.)
//! let sge = Sge { addr: 0x1000, length: 64, lkey: 0xabcd01 };
//! let sq = qp.sq()?;
//! sq.post_rdma_write(1, SendFlags::SIGNALED, 0x2000, 0x1234, sge)?;
//! let mut batch = sq.batch();
//! for wr_id in 2..6 {
//!     // The compact error converts to `Error` with `?` as well.
//!     batch.wr_rdma_write(wr_id, SendFlags::SIGNALED, 0x2000, 0x1234, sge)?;
//! }
//! batch.ring(); // one doorbell for the four
//! assert_eq!(sq.outstanding(), 5);
//! // Checksum offload on an RC QP is refused before anything is written;
//! // the compact error says why, and converts to the full one.
//! let e = sq.wr_rdma_write(6, SendFlags::IP_CSUM, 0x2000, 0x1234, sge).unwrap_err();
//! assert_eq!(e.kind(), SendErrorKind::EthOnNonRawQp);
//! assert!(matches!(Error::from(e), Error::EthSegment(_)));
//! assert_eq!(sq.outstanding(), 5);
//!
//! // The "device" completes the first WQE (WQEBB counter 0).
//! let mut cqe = [0u8; 64];
//! cqe[0x20..0x24].copy_from_slice(&5u32.to_be_bytes());
//! cqe[0x38..0x3c].copy_from_slice(&0x0800_0123u32.to_be_bytes());
//! cq_mem.write(0, &cqe).unwrap();
//! let c = cq.poll_one(&table)?.expect("a completion");
//! assert_eq!((c.wr_id(), c.status(), c.opcode()), (1, WcStatus::Success, WcOpcode::RdmaWrite));
//! assert_eq!(c.qp_num(), 0x123);
//! assert_eq!(cq.poll_one(&table)?, None);
//! # drop(table.remove(5));
//! # qp_mem.reclaim(qp.into_parts().map_err(|_| "handle alive")?.region).unwrap();
//! # cq_mem.reclaim(cq.into_parts().region).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Wiring a QP and a CQ from raw parts
//!
//! A driver creates the firmware objects with the geometry verbs-core
//! computes, then hands the memory over:
//!
//! 1. [`QpGeometry::new`] from the requested capabilities; allocate
//!    `geometry.layout.total_bytes` of DMA memory; CREATE_QP with
//!    `log_sq_size`, `log_rq_size`, `log_rq_stride`, the page list of
//!    `0..layout.ring_bytes`, `dbr_addr = iova + layout.dbr_offset`,
//!    `user_index` (CQE version 1), the UAR page; then [`Qp::new`] with the
//!    QPN and the UAR window plus [`BfConfig`].
//! 2. [`CqLayout::for_entries`]; allocate; [`Cq::new`] (initialises the CQEs
//!    to invalid/owner 0); CREATE_CQ with `log_cq_size`, the page list,
//!    `dbr_addr = iova + layout.dbr_offset`; if the CQ was made before
//!    CREATE_CQ answered, [`Cq::set_cqn`] with the number it gave.
//! 3. Register the QP with its CQ(s): `table.insert(user_index,
//!    qp.completions(send, recv, srq)?)`.
//! 4. Post with [`SendQueue::post`] / [`SendQueue::batch`] /
//!    [`RecvQueue::post`] (or the typed entry points below), poll with
//!    [`Cq::poll`] / [`Cq::poll_one`], arm with [`Cq::arm`].
//! 5. Teardown: DESTROY_QP (or 2RST), [`Cq::clean_qp`] on each of its CQs
//!    (its unpolled CQEs go, its SRQ WQEs return to the SRQ),
//!    `table.remove(user_index)`, [`Qp::into_parts`], free the region;
//!    DESTROY_CQ, [`Cq::into_parts`], free.
//!
//! Here with heap memory standing in for DMA memory and a plain buffer for
//! the UAR page; the "device" writes a requester CQE by hand:
//!
//! ```
//! use core::ptr::NonNull;
//! use platform::host::HostBlock;
//! use platform::MmioWindow;
//! use verbs_core::*;
//!
//! // A UAR page standing in for BAR memory.
//! let mut uar_page = vec![0u64; 4096 / 8];
//! // SAFETY: the buffer outlives the window and is only used through it.
//! let uar = unsafe { MmioWindow::new(NonNull::new(uar_page.as_mut_ptr().cast()).unwrap(), 4096) };
//!
//! // QP: geometry, memory, data path object.
//! let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1,
//!                     max_inline_data: 0, send_ops: None };
//! let geometry = QpGeometry::new(QpType::Rc, &caps, &DeviceLimits::default())?;
//! let qp_mem = HostBlock::new(geometry.layout.total_bytes, 4096).unwrap();
//! let cfg = QpConfig { qp_type: QpType::Rc, qpn: 0x123, geometry, atomics: true,
//!                      sq_sig_all: false, eth_min_inline: 0 };
//! let mut qp = Qp::new(qp_mem.lend(0x10_0000, 0).unwrap(), Some((&uar, BfConfig::new(0))), &cfg)
//!     .map_err(|(e, _)| e)?;
//!
//! // CQ with 256 entries on the same UAR page.
//! let layout = CqLayout::for_entries(255)?;
//! let cq_mem = HostBlock::new(layout.total_bytes, 4096).unwrap();
//! let cq_cfg = CqConfig { cqn: 7, layout, version: CqeVersion::V1, uar_page_offset: 0 };
//! let mut cq = Cq::new(cq_mem.lend(0x20_0000, 0).unwrap(), &uar, &cq_cfg).map_err(|(e, _)| e)?;
//!
//! // The CQ serves both queues of the QP, registered under user index 5.
//! let mut table = CqTable::<8>::new();
//! table.insert(5, qp.completions(true, true, None)?).map_err(|(e, _)| e)?;
//!
//! // RDMA write, signaled: one WQE, doorbell record 1, doorbell at 0x800.
//! let sge = [Sge { addr: 0x1000, length: 64, lkey: 0xabcd01 }];
//! let wr = SendWr::new(42, SendOp::RdmaWrite { remote_addr: 0x2000, rkey: 0x1234 })
//!     .sgl(&sge)
//!     .flags(SendFlags::SIGNALED);
//! qp.sq()?.post(&wr)?;
//! assert_eq!(uar_page[0x800 / 8].to_ne_bytes()[..4], [0, 0, 0, 0x08]);
//!
//! // The "device" completes it: requester CQE, WQE counter 0, user index 5.
//! let mut cqe = [0u8; 64];
//! cqe[0x20..0x24].copy_from_slice(&5u32.to_be_bytes());
//! cqe[0x38..0x3c].copy_from_slice(&0x0800_0123u32.to_be_bytes());
//! cqe[0x3f] = 0x00; // opcode REQ, owner 0 (first pass)
//! cq_mem.write(0, &cqe).unwrap();
//!
//! let mut wc = [WorkCompletion::default(); 4];
//! assert_eq!(cq.poll(&table, &mut wc)?, 1);
//! assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (42, WcStatus::Success, WcOpcode::RdmaWrite));
//! assert_eq!(cq.poll(&table, &mut wc)?, 0);
//!
//! // Teardown (after DESTROY_QP / DESTROY_CQ).
//! drop(table.remove(5));
//! let parts = qp.into_parts().map_err(|_| "handle alive")?;
//! qp_mem.reclaim(parts.region).unwrap();
//! cq_mem.reclaim(cq.into_parts().region).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![no_std]
// Constructors and `into_parts` hand ownership back on failure; without a heap
// there is nothing to box the returned queue into.
#![allow(clippy::result_large_err)]

pub mod av;
pub mod cq;
mod error;
mod mem;
pub mod qp;
pub mod sizing;
pub mod srq;
pub mod uar;
pub mod wc;
pub mod wqe;

pub use av::{AddressVector, AhAttr, GlobalRoute, PortLinkLayer};
pub use cq::{
    Cq, CqClean, CqConfig, CqParts, CqPoller, CqResolver, CqTable, CqeVersion, QpCompletions,
};
pub use error::{Error, PollError, PollErrorKind, SendError, SendErrorKind};
pub use qp::{
    Payload, PostError, Qp, QpConfig, QpParts, QpType, RecvQueue, RecvWr, SendBatch, SendFlags,
    SendOp, SendQueue, SendWr, Sge, UdDest,
};
pub use sizing::{
    CqLayout, DeviceLimits, QpCaps, QpGeometry, QpLayout, RqGeometry, SqGeometry, SrqGeometry,
    SrqLayout,
};
pub use srq::{Srq, SrqCompletions};
pub use uar::BfConfig;
pub use wc::{Completion, CompletionSlot, WcFlags, WcOpcode, WcStatus, WorkCompletion};
