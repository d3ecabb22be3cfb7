//! # hca-driver: the mlx5 control plane
//!
//! `#![no_std]`, no heap needed (the `alloc` feature, on with `std`, adds
//! `Arc` handles for the verbs objects and heap tables sized from the
//! device caps; see [`verbs`]). Takes a ConnectX from power-on to a ready HCA and
//! back through the firmware command interface alone, on any
//! [`platform::Platform`]: the emulated ConnectX of `hca-emu`, Linux
//! userspace under VFIO, bare metal.
//!
//! - [`Hca::open`] / [`Hca::close`]: bring-up and teardown in the PRM/Linux
//!   order (PCI command register, firmware ready, command queue,
//!   ENABLE_HCA, ISSI, boot pages, capabilities, init pages, INIT_HCA,
//!   SET_DRIVER_VERSION, QUERY_ADAPTER, ALLOC_UAR, EQs, ports; and back).
//!   A failed bring-up unwinds and hands the platform back ([`Failure`]).
//! - The command executor, reached from outside through the `unsafe`
//!   [`Hca::raw`] (a raw command can aim the device's DMA anywhere):
//!   [`RawHca::exec`] for any typed command of `firmware-cmds`,
//!   [`RawHca::exec_with_items`] for inputs with a flexible array,
//!   [`RawHca::exec_encoded`] for any [`Encode`](firmware_cmds::command::Encode)d
//!   input (e.g. [`PageList`]), [`RawHca::exec_read`] for outputs with a
//!   flexible array ([`Output`]). Slots, tokens, mailbox chains of any
//!   length, polling or EQ completion, timeouts, and validation of every
//!   byte the device writes. Each command is logged at trace level and can
//!   be recorded in Linux's hexdump form ([`CommandRecorder`],
//!   [`DumpRecorder`]).
//! - Firmware pages: given at bring-up and on page request events,
//!   taken back on negative requests and at teardown, every returned
//!   address checked ([`PageStats`]).
//! - Events: [`Hca::poll_events`] consumes the EQs; completion events are
//!   counted per CQ and asynchronous events queued for their owners
//!   ([`EventRouter`], [`AsyncEvent`]).
//! - Interrupts: with [`WaitMode::Interrupts`] (the default) on a platform
//!   with MSI-X ([`platform::Platform::msix_vectors`]), the EQs get vectors
//!   and command waits and CQ waits sleep on them
//!   ([`Hca::wait_interrupt`]); [`WaitMode::Polling`] polls. How the waits
//!   went: [`Hca::interrupt_stats`] ([`InterruptStats`]).
//! - Health: [`Hca::check_health`] (health counter, syndromes, device
//!   gone); a dead device puts the driver in an error state in which every
//!   command fails at once with [`Error::DeviceDead`].
//! - Device information ([`DeviceInfo`], [`Caps`], [`PortInfo`]) and raw
//!   firmware objects as RAII handles with typed numbers ([`fw`]:
//!   [`fw::Uar`], [`fw::Pd`], [`fw::TransportDomain`], [`fw::Cq`],
//!   [`fw::Qp`], [`fw::Srq`], [`fw::Mkey`]).
//!
//! ```
//! use hca_driver::{Config, Hca};
//! use hca_emu::{EmuConfig, EmuHca};
//!
//! let emu = EmuHca::new(EmuConfig::default());
//! let hca = Hca::open(emu.platform(), Config::default())?;
//! println!("{}", hca.info()); // fw_ver, node_guid, ports... like ibv_devinfo
//! let pd = hca.alloc_pd()?;
//! println!("{}", pd.number()); // "PD 0x..."
//! pd.destroy()?;
//! hca.service()?; // health poll + events + page requests: call it regularly
//! let _platform = hca.close()?;
//! emu.assert_clean(); // no IOMMU fault, no page, object or DMA region left
//! # Ok::<(), hca_driver::Error>(())
//! ```
//!
//! ## The verbs API
//!
//! [`verbs`] is what a libibverbs user expects, over this control plane
//! and `verbs-core`'s data path: contexts, PDs, memory regions, CQs, RC,
//! UC and UD QPs, SRQs, address handles. Each object holds handles of its
//! parents (with `std`: `Arc`s; see [`verbs::Share`]), so an application
//! keeps them in its own structs and moves them between threads.
//!
//! Two emulated ConnectX-4s on a virtual wire; each side keeps its HCA,
//! PD, CQs, a registered buffer and an RC QP in one struct. A QP is moved
//! to another thread, which posts a SEND and an RDMA WRITE there, while
//! the main thread polls the CQs:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use hca_driver::verbs::*;
//! use hca_driver::{Config, Hca, IbMtu};
//! use hca_emu::{EmuConfig, EmuHca, EmuPlatform};
//!
//! /// Everything one side needs, kept together.
//! struct Side {
//!     hca: Arc<Hca<EmuPlatform>>,
//!     ctx: Arc<Context<EmuPlatform>>,
//!     send_cq: Arc<Cq<EmuPlatform>>,
//!     recv_cq: Arc<Cq<EmuPlatform>>,
//!     buf: Arc<DmaBuf<EmuPlatform>>,
//!     mr: Mr<EmuPlatform>,
//!     qp: Qp<EmuPlatform>,
//! }
//!
//! const ACCESS: AccessFlags = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);
//!
//! impl Side {
//!     fn new(emu: &EmuHca) -> hca_driver::Result<Side> {
//!         let hca = Arc::new(Hca::open(emu.platform(), Config::default())?);
//!         let ctx = Arc::new(Context::open(&hca)?);
//!         let pd = Arc::new(Pd::alloc(&ctx)?);
//!         let send_cq = Arc::new(Cq::create(&ctx, 16)?);
//!         let recv_cq = Arc::new(Cq::create(&ctx, 16)?);
//!         let buf = Arc::new(DmaBuf::alloc(&hca, 4096)?);
//!         let mr = Mr::register(&pd, &buf, ACCESS)?;
//!         // The QP holds the PD and both CQs: `pd` may go out of scope.
//!         let qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &send_cq, &recv_cq))?;
//!         Ok(Side { hca, ctx, send_cq, recv_cq, buf, mr, qp })
//!     }
//!
//!     /// INIT, RTR, RTS towards the peer's QP number and GID (RoCE).
//!     fn connect(&mut self, remote_qpn: u32, dgid: Gid) -> hca_driver::Result<()> {
//!         self.qp.modify(&QpAttr::new().state(QpState::Init).port(1).pkey_index(0).access(ACCESS))?;
//!         self.qp.modify(&QpAttr::new().state(QpState::Rtr).path_mtu(IbMtu::Mtu1024)
//!             .dest_qp_num(remote_qpn).rq_psn(0).max_dest_rd_atomic(1).min_rnr_timer(12)
//!             .ah(AhAttr::roce(1, dgid, DEFAULT_GID_INDEX)))?;
//!         self.qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0).timeout(14)
//!             .retry_cnt(7).rnr_retry(7).max_rd_atomic(1))
//!     }
//! }
//!
//! let ea = EmuHca::new(EmuConfig::default());
//! let eb = EmuHca::new(EmuConfig { seed: 2, ..EmuConfig::default() });
//! hca_emu::connect(&ea, 1, &eb, 1).unwrap();
//! let (mut a, mut b) = (Side::new(&ea)?, Side::new(&eb)?);
//! let (gida, gidb) = (a.ctx.query_gid(1, 0)?, b.ctx.query_gid(1, 0)?);
//! let (qpna, qpnb) = (a.qp.number().0, b.qp.number().0);
//! a.connect(qpnb, gidb)?;
//! b.connect(qpna, gida)?;
//! b.qp.post_recv(&RecvWr { wr_id: 1, sgl: &[b.mr.sge(0, 64)?] })?;
//!
//! // The QP (with the handles it holds) moves to another thread, posts
//! // there, and comes back; the CQs are polled here meanwhile.
//! a.buf.write(0, b"hello")?;
//! let (sge, remote, rkey) = (a.mr.sge(0, 5)?, b.mr.addr() + 100, b.mr.rkey());
//! let mut qp = a.qp;
//! let poster = std::thread::spawn(move || -> hca_driver::Result<Qp<EmuPlatform>> {
//!     qp.post_send(&SendWr::new(2, SendOp::Send).sgl(&[sge]).flags(SendFlags::SIGNALED))?;
//!     qp.post_rdma_write(3, SendFlags::SIGNALED, remote, rkey, sge)?;
//!     Ok(qp)
//! });
//! a.qp = poster.join().unwrap()?;
//! let mut wc = [WorkCompletion::default(); 2];
//! b.recv_cq.poll_wait(&mut wc, Duration::from_secs(5))?;
//! assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (1, WcStatus::Success, 5));
//! let mut done = 0;
//! while done < 2 {
//!     done += a.send_cq.poll_wait(&mut wc[done..], Duration::from_secs(5))?;
//! }
//! assert_eq!((wc[0].opcode, wc[1].opcode), (WcOpcode::Send, WcOpcode::RdmaWrite));
//! let mut got = [0u8; 5];
//! b.buf.read(100, &mut got)?;
//! assert_eq!(&got, b"hello");
//!
//! // A CQ a QP still holds cannot be destroyed: `try_destroy` says so
//! // (and the CQ lives on with the QP).
//! let err = Cq::try_destroy(a.send_cq.clone()).unwrap_err();
//! assert!(matches!(err, hca_driver::Error::InUse { .. }));
//!
//! // Children first, parents last: dropping a side drops its QP, MR, CQs,
//! // buffer and context; then each HCA is closed through its last handle.
//! let (ha, hb) = (a.hca.clone(), b.hca.clone());
//! drop((a, b));
//! Arc::into_inner(ha).expect("the last handle").close()?;
//! Arc::into_inner(hb).expect("the last handle").close()?;
//! ea.assert_clean();
//! eb.assert_clean();
//! # Ok::<(), hca_driver::Error>(())
//! ```
//!
//! No interrupts are used: a driver calls [`Hca::service`] (or
//! [`Hca::check_health`] and [`Hca::poll_events`]) at least every
//! [`Timeouts::health_poll`] so that page requests are answered and the
//! asynchronous EQ never overruns; command waits poll the command EQ
//! themselves.
//!
//! ## Locking rules
//!
//! Every method takes `&self` and may be called from several threads.
//! Internal spin locks guard the command slot mask, the mailbox pool, each
//! EQ's consumer state, the page manager, the event registry and queue;
//! none is held while waiting for a command except the page manager's
//! (held across MANAGE_PAGES, so page work is serialized). EQs are polled
//! with `try_lock`: two threads never consume the same EQ. A
//! [`CommandRecorder`] is called outside every lock but must not run
//! commands.
#![no_std]
// `deny`, not `forbid`: the one `unsafe fn` is `Hca::raw` (raw.rs), whose
// declaration is allowed there; the crate has no `unsafe` block.
#![deny(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod bits;
#[cfg(feature = "alloc")]
pub mod capture;
mod cmd;
mod config;
mod deadline;
mod eq;
mod error;
mod events;
pub mod flow;
#[cfg(fuzzing)]
pub mod fuzzing;
pub mod fw;
mod fwpages;
mod hca;
mod health;
mod info;
mod irq;
mod mailbox;
mod pacing;
mod pages;
mod pas;
pub mod pci;
mod query;
mod raw;
mod record;
pub mod steering;
mod types;
pub mod verbs;

pub use cmd::{MAX_MESSAGE, Output};
pub use config::{Config, Timeouts, WaitMode};
pub use eq::{ASYNC_EVENTS, EQ_UPDATE_EVERY, EqKind};
pub use error::{DeadReason, EqeError, Error, Result, Wait};
pub use events::{
    AsyncEvent, CqEventCounts, EVENT_QUEUE_LEN, EventRouter, MAX_CQS, MAX_PORTS, MAX_QUEUES,
    QueueId,
};
pub use fwpages::PageStats;
pub use hca::{BringUpReport, DmaUsage, Failure, Hca, MAX_COMP_EQS};
pub use health::{HealthReading, MAX_HEALTH_STALLS};
pub use info::{
    CapMode, CapPair, Caps, DeviceInfo, ETH_FRAMING, ETH_PROTOCOLS, Guid, IbMtu, LinkLayer,
    MAX_LOG_PKEY_TABLE, MIN_PKEY_TABLE_SIZE, PciIds, PortInfo, PortState, eth_speed,
};
pub use irq::InterruptStats;
pub use mailbox::MAX_MAILBOX_CHUNKS;
pub use pacing::{MAX_RATE_ENTRIES, PacketPacingCaps, RATE_TABLE, RateLimit};
pub use pages::MAX_PAGE_CHUNKS;
pub use pas::{PAS_PAGE_SIZE, PageList};
pub use query::SpecialContexts;
pub use raw::RawHca;
pub use record::{CommandRecorder, DumpRecorder, Exchange, LogRecorder, Outcome};
pub use types::{
    CounterSetId, Cqn, Eqn, FlowGroupId, FlowTableId, Lkey, MkeyIndex, Pdn, Qpn, Rkey, Rqn, Rqtn,
    Srqn, Tdn, Tirn, Uarn,
};
pub use verbs::DmaBuf;
