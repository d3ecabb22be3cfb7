//! # hca-driver: the mlx5 control plane
//!
//! `#![no_std]`, no heap. Takes a ConnectX from power-on to a ready HCA and
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
//! - Device information ([`DeviceInfo`], [`Caps`], [`PortInfo`]) and RAII
//!   resources with typed numbers ([`Uar`], [`Pd`], [`TransportDomain`],
//!   [`Cq`], [`Qp`], [`Srq`], [`Mkey`]).
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
//! UC and UD QPs, SRQs, address handles. Two emulated ConnectX-4s on a
//! virtual wire, an RC connection between them, a SEND and an RDMA WRITE:
//!
//! ```
//! use hca_driver::verbs::*;
//! use hca_driver::{Config, Hca, IbMtu};
//! use hca_emu::{EmuConfig, EmuHca};
//! use std::time::Duration;
//!
//! let ea = EmuHca::new(EmuConfig::default());
//! let eb = EmuHca::new(EmuConfig { seed: 2, ..EmuConfig::default() });
//! hca_emu::connect(&ea, 1, &eb, 1).unwrap();
//! let ha = Hca::open(ea.platform(), Config::default())?;
//! let hb = Hca::open(eb.platform(), Config::default())?;
//! {
//!     // Each side: context, PD, CQ, a registered buffer, an RC QP.
//!     let (ca, cb) = (ha.open_context()?, hb.open_context()?);
//!     let (pda, pdb) = (ca.alloc_pd()?, cb.alloc_pd()?);
//!     let (cqa, cqb) = (ca.create_cq(16)?, cb.create_cq(16)?);
//!     let (bufa, bufb) = (ha.alloc_buf(4096)?, hb.alloc_buf(4096)?);
//!     let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
//!     let (mra, mrb) = (pda.reg_mr(&bufa, access)?, pdb.reg_mr(&bufb, access)?);
//!     let mut qpa = pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqa, &cqa))?;
//!     let mut qpb = pdb.create_qp(&QpInitAttr::new(QpType::Rc, &cqb, &cqb))?;
//!
//!     // What the sides exchange: QP numbers and GIDs (RoCE).
//!     let (qpna, qpnb) = (qpa.number().0, qpb.number().0);
//!     let (gida, gidb) = (ca.query_gid(1, 0)?, cb.query_gid(1, 0)?);
//!     let connect = |qp: &mut Qp<'_, _>, remote_qpn, dgid| -> hca_driver::Result<()> {
//!         qp.modify(&QpAttr::new().state(QpState::Init).port(1).pkey_index(0).access(access))?;
//!         qp.modify(&QpAttr::new().state(QpState::Rtr).path_mtu(IbMtu::Mtu1024)
//!             .dest_qp_num(remote_qpn).rq_psn(0).max_dest_rd_atomic(1).min_rnr_timer(12)
//!             .ah(AhAttr::roce(1, dgid, DEFAULT_GID_INDEX)))?;
//!         qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0).timeout(14)
//!             .retry_cnt(7).rnr_retry(7).max_rd_atomic(1))
//!     };
//!     connect(&mut qpa, qpnb, gidb)?;
//!     connect(&mut qpb, qpna, gida)?;
//!
//!     // A SEND into a posted receive.
//!     qpb.post_recv(&RecvWr { wr_id: 1, sgl: &[mrb.sge(0, 64)?] })?;
//!     bufa.write(0, b"hello")?;
//!     qpa.post_send(&SendWr::new(2, SendOp::Send).sgl(&[mra.sge(0, 5)?]).flags(SendFlags::SIGNALED))?;
//!     let mut wc = [WorkCompletion::default(); 1];
//!     cqb.poll_wait(&mut wc, Duration::from_secs(5))?;
//!     assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (1, WcStatus::Success, 5));
//!     cqa.poll_wait(&mut wc, Duration::from_secs(5))?;
//!     assert_eq!(wc[0].opcode, WcOpcode::Send);
//!
//!     // An RDMA WRITE to the peer's address and rkey.
//!     qpa.post_rdma_write(3, SendFlags::SIGNALED, mrb.addr() + 100, mrb.rkey().0, mra.sge(0, 5)?)?;
//!     cqa.poll_wait(&mut wc, Duration::from_secs(5))?;
//!     let mut got = [0u8; 5];
//!     bufb.read(100, &mut got)?;
//!     assert_eq!(&got, b"hello");
//! } // everything destroyed here, children before parents
//! ha.close()?;
//! hb.close()?;
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

mod bits;
mod cmd;
mod config;
mod deadline;
mod eq;
mod error;
mod events;
#[cfg(fuzzing)]
pub mod fuzzing;
mod fwpages;
mod hca;
mod health;
mod info;
mod irq;
mod mailbox;
mod pages;
mod pas;
pub mod pci;
mod query;
mod raw;
mod record;
mod resources;
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
pub use pages::MAX_PAGE_CHUNKS;
pub use pas::{PAS_PAGE_SIZE, PageList};
pub use raw::RawHca;
pub use record::{CommandRecorder, DumpRecorder, Exchange, LogRecorder, Outcome};
pub use resources::{
    Cq, CqObj, FwObject, Mkey, MkeyObj, Object, Pd, PdObj, Qp, QpObj, Srq, SrqObj, TdObj,
    TransportDomain, Uar, UarObj,
};
pub use types::{Cqn, Eqn, Lkey, MkeyIndex, Pdn, Qpn, Rkey, Srqn, Tdn, Uarn};
pub use verbs::DmaBuf;
