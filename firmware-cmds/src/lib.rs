//! # firmware-cmds: the ConnectX (mlx5) command interface, as Rust types
//!
//! Definitions only, transcribed from the Programmer's Reference Manual (PRM)
//! and named as in the `mlx5_ifc` headers: no I/O, no allocation, no `unsafe`.
//! Everything a driver, an emulator or a tool needs to speak to the firmware:
//!
//! - [`layout`]: the [`prm_struct!`] machinery. Every PRM structure is a
//!   copyable big-endian image with a typed handle per field
//!   (`Cqc::log_cq_size`) and a reflection table ([`layout::LayoutInfo`]) that
//!   tests check against the layout facts and tools use to print any image.
//! - [`cmdq`]: the 64-byte command-queue entry; [`mailbox`]: the 576-byte
//!   mailbox block and input/output chains of any length.
//! - [`opcode`], [`status`]: opcodes, command status, delivery status, their
//!   names, and [`status::CmdError`] which prints like Linux:
//!   `CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1a2b3c)`.
//! - [`command`]: the [`command::Command`] trait (opcode and output type of
//!   each `*_in` layout) and [`command::Encode`] for inputs that end in a
//!   flexible array.
//! - One module per PRM object with its context, commands and constants:
//!   [`hca`] (bring-up, pages, teardown), [`caps`] (QUERY/SET_HCA_CAP and the
//!   capability blocks), [`uar`], [`eq`] (EQ context, EQE, event types and
//!   data), [`cq`], [`pd`], [`mkey`], [`qp`] (QP context, address path,
//!   every state transition), [`srq`], [`eth`] (SQ, RQ, TIS, TIR, RQT),
//!   [`rmp`] (receive memory pools),
//!   [`flow`] (flow tables, groups, entries), [`reg`] (ACCESS_REG, PAOS,
//!   PTYS, PMTU), [`vport`], [`roce`], [`mad`].
//! - [`init_seg`]: the initialization segment (register offsets, the polled
//!   dwords as bitfields over [`endian::Be32`], firmware version, the health
//!   buffer and health syndromes).
//! - [`registry`]: every layout of the crate and every command's input and
//!   output layouts (with the capability block or register an op_mod or
//!   input selects), so a tool can decode any command field by field.
//! - [`trace`]: writes commands (or single mailbox blocks) in the Linux
//!   `mlx5_core` dump format and,
//!   with the `alloc` feature, parses such dumps back.
//!
//! ```
//! use firmware_cmds::command::Command;
//! use firmware_cmds::cq::{CreateCqIn, Cqc};
//!
//! let cqc = Cqc::new().with(Cqc::log_cq_size, 8)?.with(Cqc::c_eqn, 3)?;
//! let mut input = CreateCqIn::new();
//! input.set(CreateCqIn::cq_context, cqc)?;
//! assert_eq!(CreateCqIn::OPCODE.to_string(), "CREATE_CQ(0x400)");
//! assert_eq!(&input.as_bytes()[..2], &[0x04, 0x00]);
//! # Ok::<(), firmware_cmds::Error>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod layout;

pub mod cmdq;
pub mod command;
/// Aligned big-endian integers (`Be16`, `Be32`, `Be64`), from the leaf
/// crate `hca-endian` that `platform` shares.
pub mod endian {
    pub use hca_endian::{Be16, Be32, Be64};
}
mod error;
pub mod mailbox;
pub mod opcode;
pub mod status;
pub mod trace;

pub mod caps;
pub mod cq;
pub mod eq;
pub mod eth;
pub mod flow;
pub mod hca;
pub mod init_seg;
pub mod mad;
pub mod mcg;
pub mod mkey;
pub mod pd;
pub mod pp;
pub mod q_counter;
pub mod qp;
pub mod reg;
pub mod registry;
pub mod rmp;
pub mod roce;
pub mod rss;
pub mod srq;
pub mod uar;
pub mod vport;

pub use error::Error;
pub use opcode::Opcode;
pub use status::{CmdError, CmdStatus, DeliveryStatus};
