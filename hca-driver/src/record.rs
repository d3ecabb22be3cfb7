//! Recording command exchanges: every command's queue entry as posted and
//! as answered, with its input and output mailbox blocks, printable in the
//! hexdump form of Linux's `mlx5_core` command dumps (the form of the real
//! ConnectX-4 trace), so a dump of this driver can be compared line by line
//! with one of Linux.
//!
//! Without a heap: a [`CommandRecorder`] sees each [`Exchange`] while the
//! blocks are still in the mailbox pool and streams what it wants to keep;
//! [`DumpRecorder`] writes the hexdump into any [`core::fmt::Write`] (a
//! `String` in tests), [`LogRecorder`] logs it at debug level.

use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;

use firmware_cmds::cmdq::CmdQueueEntry;
use firmware_cmds::mailbox::{CmdIfBox, MAILBOX_BLOCK_SIZE};
use firmware_cmds::trace::{Direction, write_block, write_dump};
use firmware_cmds::{CmdStatus, DeliveryStatus, Opcode};

use crate::mailbox::{Chain, MailboxPool};

/// Receives every command exchange. Called on the thread that ran the
/// command, after the answer was read and before the command's mailboxes
/// are reused; it must not run commands itself.
pub trait CommandRecorder: Sync {
    /// One command, answered or timed out.
    fn record(&self, exchange: &Exchange<'_>);
}

/// How a recorded command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The firmware answered with a delivery status and a command status.
    Answered {
        /// Delivery status of the entry.
        delivery: DeliveryStatus,
        /// Command status (output byte 0; meaningless when delivery failed).
        status: CmdStatus,
        /// Syndrome.
        syndrome: u32,
    },
    /// The firmware still owned the entry when the wait ended.
    TimedOut,
}

/// One command exchange.
pub struct Exchange<'a> {
    /// The command.
    pub opcode: Opcode,
    /// Its op_mod.
    pub op_mod: u16,
    /// The command queue slot.
    pub slot: u8,
    /// The token.
    pub token: u8,
    /// Time from the doorbell to the answer (or the timeout).
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// The entry as posted.
    pub input_entry: &'a CmdQueueEntry,
    /// The entry as answered (`None` on a timeout).
    pub output_entry: Option<&'a CmdQueueEntry>,
    pub(crate) pool: &'a spin::Mutex<MailboxPool>,
    pub(crate) input: &'a Chain,
    pub(crate) output: &'a Chain,
}

fn read_block(pool: &spin::Mutex<MailboxPool>, chain: &Chain, i: usize) -> Option<CmdIfBox> {
    if i >= chain.len() {
        return None;
    }
    let pool = pool.lock();
    let (region, off) = pool.block(chain, i);
    let mut b = [0u8; MAILBOX_BLOCK_SIZE];
    region.read_bytes(off, &mut b);
    Some(CmdIfBox::from_array(b))
}

impl Exchange<'_> {
    /// Number of input mailbox blocks.
    pub fn input_blocks(&self) -> usize {
        self.input.len()
    }

    /// Number of output mailbox blocks.
    pub fn output_blocks(&self) -> usize {
        self.output.len()
    }

    /// Input block `i`, as posted.
    pub fn input_block(&self, i: usize) -> Option<CmdIfBox> {
        read_block(self.pool, self.input, i)
    }

    /// Output block `i`, as the firmware left it.
    pub fn output_block(&self, i: usize) -> Option<CmdIfBox> {
        read_block(self.pool, self.output, i)
    }

    /// Writes the exchange as Linux dumps it: the INPUT entry and blocks,
    /// then (if answered) the OUTPUT entry and blocks (entries with
    /// [`firmware_cmds::trace::write_dump`], each block read out of the
    /// mailbox pool and written with [`firmware_cmds::trace::write_block`]).
    pub fn write_dump(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        write_dump(w, Direction::Input, self.input_entry, &[])?;
        for i in 0..self.input_blocks() {
            if let Some(b) = self.input_block(i) {
                write_block(w, i, &b)?;
            }
        }
        if let Some(out) = self.output_entry {
            write_dump(w, Direction::Output, out, &[])?;
            for i in 0..self.output_blocks() {
                if let Some(b) = self.output_block(i) {
                    write_block(w, i, &b)?;
                }
            }
        }
        Ok(())
    }
}

/// The hexdump of [`Exchange::write_dump`].
impl fmt::Display for Exchange<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_dump(f)
    }
}

/// Writes every exchange, in hexdump form, into a [`fmt::Write`].
///
/// ```
/// use hca_driver::DumpRecorder;
/// static TRACE: DumpRecorder<String> = DumpRecorder::new(String::new());
/// // Config { recorder: Some(&TRACE), ..Default::default() }
/// assert_eq!(TRACE.commands(), 0);
/// ```
pub struct DumpRecorder<W> {
    w: spin::Mutex<W>,
    commands: AtomicU32,
}

impl<W> DumpRecorder<W> {
    /// A recorder writing into `w`.
    pub const fn new(w: W) -> Self {
        Self {
            w: spin::Mutex::new(w),
            commands: AtomicU32::new(0),
        }
    }

    /// Runs `f` on the writer (to read or clear what was recorded).
    pub fn with<R>(&self, f: impl FnOnce(&mut W) -> R) -> R {
        f(&mut self.w.lock())
    }

    /// Commands recorded so far.
    pub fn commands(&self) -> u32 {
        self.commands.load(Ordering::Relaxed)
    }
}

impl<W: fmt::Write + Send> CommandRecorder for DumpRecorder<W> {
    fn record(&self, exchange: &Exchange<'_>) {
        self.commands.fetch_add(1, Ordering::Relaxed);
        let mut w = self.w.lock();
        if exchange.write_dump(&mut *w).is_err() {
            log::warn!("command recorder: the writer refused the dump");
        }
    }
}

/// Logs every exchange in hexdump form at debug level.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogRecorder;

impl CommandRecorder for LogRecorder {
    fn record(&self, exchange: &Exchange<'_>) {
        log::debug!("{exchange}");
    }
}
