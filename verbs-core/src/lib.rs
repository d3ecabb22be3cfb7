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
//! the device is never given those addresses.
//!
//! ## Queue memory: safe code only
//!
//! The crate is `#![forbid(unsafe_code)]`. Every queue owns its region as a
//! [`platform::ring::QueueMem`] and reaches it only through the views that
//! type checks once, when the queue is made: rings whose byte offsets are
//! masked with the ring size (an index read from a CQE cannot point outside
//! the ring, whatever its value), 64-byte blocks (a CQE, a WQEBB) whose
//! field offsets are masked with a constant, host tables of atomics whose
//! indices are masked with their count, and the doorbell record. The
//! BlueFlame register pair ([`platform::BlueFlame`]) checks its two
//! buffers against the window once; the doorbell is then one 64-bit store.
//!
//! Completion handles hold counted views of their queue's bookkeeping: the
//! memory they use stays valid as long as they live, whatever the queue's
//! owner does, and the region only comes back ([`Qp::into_parts`],
//! [`Srq::into_parts`]) when no handle is alive. Only one handle per queue
//! side exists at a time, so exactly one CQ retires a send or receive
//! queue.
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
//! the outstanding window, receive `byte_cnt`). One path per direction:
//!
//! - Send: [`SendQueue::post_send`] (a [`SendWr`], any operation, the full
//!   [`Error`]), [`SendQueue::post_send_sge`] (one work request with one
//!   SGE, arguments in registers, the two-word [`SendError`], which `?`
//!   converts to [`Error`] field for field) and [`SendQueue::batch`]: a
//!   [`SendBatch`] with the same two methods, rung once
//!   ([`SendBatch::ring`]). On a connected QP with plain flags and a
//!   non-empty SGE, `post_send_sge` writes one WQEBB with a few 64-bit
//!   stores; anything else takes the general path with the same arguments.
//!   ([`SendQueue::post_send_list`] is `ibv_post_send` with a list.)
//! - Receive: [`RecvQueue::post_recv`] and [`Srq::post_recv`] (and their
//!   `_list` forms, `ibv_post_recv` with a list).
//! - Poll: [`Cq::poll`] into a slice of [`Completion`]s (32 bytes, every
//!   `ibv_wc` field by accessor) or [`WorkCompletion`]s retires a run of
//!   successful requester CQEs of one send queue with one lookup and one
//!   tail store; [`Cq::poll_one`] takes one CQE into a caller's
//!   [`Completion`] and returns `Result<bool, PollError>` (the two-word
//!   [`PollError`] converts to [`Error`] field for field). A CQE that fails
//!   a check, and every other kind, is decoded by the general path, which
//!   says what is wrong.
//!
//! Instructions per operation (callgrind, x86_64, release; see
//! the `datapath_cost` example of the integration crate, `tests/examples/`), each in a function of its own that returns
//! the result: one RDMA write with its doorbell 62.4 (`post_send_sge`;
//! 65.4 with the error converted to `Error`), per WQE in a batch of 32:
//! 41.1 (41.1), one CQE by `poll_one` 68, per CQE in a poll of 32: 34.7
//! (rdma-core's libmlx5 on the same fixtures: 311 (227 with `ibv_wr_*`),
//! 190 (129), 175, 108; `bash bench/incumbent/run.sh` measures all three
//! side by side). Of issue 12's targets (60, 40, 40, 40) only the last
//! is met.
//! Before queue memory went through [`platform::ring`] the hand-written
//! pointer code took 57.4, 40.75, 66 (56.5 with a polling session that
//! remembered the queue) and 38.
//!
//! ```
//! # use platform::host::{HostBlock, HostMmio};
//! # use verbs_core::*;
//! # let uar = HostMmio::new(4096).unwrap();
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
//! let write = SendOp::RdmaWrite { remote_addr: 0x2000, rkey: 0x1234 };
//! let sq = qp.sq()?;
//! // The compact error converts to `Error` with `?`.
//! sq.post_send_sge(1, write, SendFlags::SIGNALED, sge)?;
//! let mut batch = sq.batch();
//! for wr_id in 2..6 {
//!     batch.post_send_sge(wr_id, write, SendFlags::SIGNALED, sge)?;
//! }
//! batch.ring(); // one doorbell for the four
//! assert_eq!(sq.outstanding(), 5);
//! // Checksum offload on an RC QP is refused before anything is written;
//! // the compact error says why, and converts to the full one.
//! let e = sq.post_send_sge(6, write, SendFlags::IP_CSUM, sge).unwrap_err();
//! assert_eq!(e.kind(), SendErrorKind::EthOnNonRawQp);
//! assert!(matches!(Error::from(e), Error::EthSegment(_)));
//! assert_eq!(sq.outstanding(), 5);
//!
//! // The "device" completes the first WQE (WQEBB counter 0).
//! let mut cqe = [0u8; 64];
//! cqe[0x20..0x24].copy_from_slice(&5u32.to_be_bytes());
//! cqe[0x38..0x3c].copy_from_slice(&0x0800_0123u32.to_be_bytes());
//! cq_mem.write(0, &cqe).unwrap();
//! let mut c = Completion::default();
//! assert!(cq.poll_one(&table, &mut c)?);
//! assert_eq!((c.wr_id(), c.status(), c.opcode()), (1, WcStatus::Success, WcOpcode::RdmaWrite));
//! assert_eq!(c.qp_num(), 0x123);
//! assert!(!cq.poll_one(&table, &mut c)?);
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
//! 4. Post with [`SendQueue::post_send`] / [`SendQueue::post_send_sge`] /
//!    [`SendQueue::batch`] / [`RecvQueue::post_recv`], poll with
//!    [`Cq::poll`] / [`Cq::poll_one`], arm with [`Cq::arm`].
//! 5. Teardown: DESTROY_QP (or 2RST), [`Cq::clean_qp`] on each of its CQs
//!    (its unpolled CQEs go, its SRQ WQEs return to the SRQ),
//!    `table.remove(user_index)`, [`Qp::into_parts`], free the region;
//!    DESTROY_CQ, [`Cq::into_parts`], free.
//!
//! Here with heap memory standing in for DMA memory and for the UAR page;
//! the "device" writes a requester CQE by hand:
//!
//! ```
//! use platform::host::{HostBlock, HostMmio};
//! use verbs_core::*;
//!
//! // A UAR page standing in for BAR memory.
//! let uar = HostMmio::new(4096).unwrap();
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
//! qp.sq()?.post_send(&wr)?;
//! let mut db = [0u8; 4];
//! uar.block().read(0x800, &mut db).unwrap();
//! assert_eq!(db, [0, 0, 0, 0x08]);
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
#![forbid(unsafe_code)]
// Constructors and `into_parts` hand ownership back on failure; without a heap
// there is nothing to box the returned queue into.
#![allow(clippy::result_large_err)]

pub mod av;
pub mod cq;
mod error;
mod mem;
pub mod qp;
pub mod rx;
pub mod sizing;
pub mod srq;
pub mod uar;
pub mod wc;
pub mod wqe;

pub use av::{AddressVector, AhAttr, GlobalRoute, PortLinkLayer};
pub use cq::{
    Cq, CqClean, CqConfig, CqParts, CqResizeRing, CqResolver, CqTable, CqeVersion, QpCompletions,
    resize_region_bytes,
};
pub use error::{Error, PollError, PollErrorKind, SendError, SendErrorKind};
pub use qp::{
    Payload, PostError, Qp, QpConfig, QpParts, QpType, RecvQueue, RecvWr, SendBatch, SendFlags,
    SendOp, SendQueue, SendWr, Sge, UdDest,
};
pub use rx::{EthSplit, L3HdrType, L4HdrType, RxCqe, VlanInsert};
pub use sizing::{
    CqLayout, DeviceLimits, QpCaps, QpGeometry, QpLayout, RqGeometry, SqGeometry, SrqGeometry,
    SrqLayout,
};
pub use srq::{Srq, SrqCompletions};
pub use uar::BfConfig;
pub use wc::{Completion, CompletionSlot, WcFlags, WcOpcode, WcStatus, WorkCompletion};
