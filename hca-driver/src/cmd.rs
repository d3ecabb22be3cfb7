//! The command queue executor.
//!
//! A command goes into a free slot of the command queue page: its input
//! mailbox chain (the input beyond 16 bytes, any length) and output chain
//! (trailers prepared: next pointer, block number, token) come from the
//! mailbox pool, the entry is written with the ownership bit last behind a
//! barrier, and the slot's doorbell bit is rung. The driver then polls the
//! ownership bit (polling mode) or the command completion EQ (event mode,
//! once that EQ exists), with a timeout on the platform clock and a health
//! check every [`Timeouts::health_check_in_wait`](crate::Timeouts). In
//! event mode on interrupts ([`WaitMode`](crate::WaitMode)) it sleeps on
//! the command EQ's MSI-X vector between two looks at the EQ instead of
//! spinning.
//!
//! Everything the device wrote is validated before it is used: the entry's
//! token, delivery status, output length and output pointer (and signature
//! while `cmdif_checksum` is on), every output block's number, token, next
//! pointer (and signatures), then the command status and syndrome.
//!
//! A command in flight is an [`InFlight`] value: it holds its slot and,
//! once allocated, its input and output mailbox chains, and gives all of
//! them back when it is dropped, on every path (success, failure, an
//! answer refused). A command that does not complete is marked stuck
//! instead: its slot and mailboxes are not reused until the firmware gives
//! the entry back (the device may still write the output mailboxes), and
//! freed only once the device is quiesced.
//!
//! Several threads may run commands at once, each in its own slot (`&self`
//! everywhere; spin locks guard the slot mask and the mailbox pool and are
//! never held while waiting).

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use core::time::Duration;

use firmware_cmds::cmdq::{
    CmdQueueEntry, ENTRY_SIZE, EntryStatusWord, INLINE_SIZE, MAX_SLOTS, STATUS_WORD_OFFSET,
};
use firmware_cmds::command::{ArrayItem, Command, Encode, WithArray, input_header, output_header};
use firmware_cmds::init_seg::CMD_DBELL_OFFSET;
use firmware_cmds::layout::Layout;
use firmware_cmds::mailbox::{
    CmdIfBox, InputChain, MAILBOX_BLOCK_SIZE, MAILBOX_DATA_SIZE, OutputChain, blocks_for,
};
use firmware_cmds::{CmdError, CmdStatus, Opcode};
use platform::barrier::{udma_from_device_barrier, udma_to_device_barrier};
use platform::{Be32, DmaRegion, Mmio, Platform};

use crate::deadline::Deadline;
use crate::error::{EqeError, Error, Result, Wait};
use crate::events::AsyncEvent;
use crate::hca::{DmaUse, Hca};
use crate::mailbox::{Chain, MailboxPool, PoolError};
use crate::record::{Exchange, Outcome};

/// Largest command message (input or output) the driver builds or accepts:
/// 16 inline bytes and 8,192 mailbox blocks (4 MiB).
pub const MAX_MESSAGE: usize = INLINE_SIZE + 8192 * MAILBOX_DATA_SIZE;

/// Relax spins before a command wait starts sleeping.
const SPINS_BEFORE_SLEEP: u32 = 64;
/// Longest sleep between two polls of a command entry.
const MAX_POLL_SLEEP: Duration = Duration::from_millis(1);

/// State of the command interface.
pub(crate) struct CmdState {
    pub(crate) queue: Option<DmaRegion>,
    pub(crate) slots: u32,
    pub(crate) stride: usize,
    free: spin::Mutex<u32>,
    in_flight: AtomicU32,
    completed: AtomicU32,
    stuck_mask: AtomicU32,
    stuck: spin::Mutex<[Option<(Chain, Chain)>; MAX_SLOTS]>,
    token: AtomicU8,
    pub(crate) events_mode: AtomicBool,
    pub(crate) pool: spin::Mutex<MailboxPool>,
    pub(crate) sign_inputs: AtomicBool,
    pub(crate) check_signatures: AtomicBool,
    pub(crate) executed: AtomicU32,
}

impl CmdState {
    pub(crate) fn new(queue: DmaRegion, log_size: u8, log_stride: u8) -> Self {
        let slots = 1u32 << log_size;
        let free = if slots >= 32 {
            u32::MAX
        } else {
            (1 << slots) - 1
        };
        Self {
            queue: Some(queue),
            slots,
            stride: 1 << log_stride,
            free: spin::Mutex::new(free),
            in_flight: AtomicU32::new(0),
            completed: AtomicU32::new(0),
            stuck_mask: AtomicU32::new(0),
            stuck: spin::Mutex::new([const { None }; MAX_SLOTS]),
            token: AtomicU8::new(0),
            events_mode: AtomicBool::new(false),
            pool: spin::Mutex::new(MailboxPool::new()),
            sign_inputs: AtomicBool::new(true),
            check_signatures: AtomicBool::new(false),
            executed: AtomicU32::new(0),
        }
    }

    pub(crate) fn queue(&self) -> &DmaRegion {
        self.queue
            .as_ref()
            .expect("the command queue page exists while the HCA is open")
    }

    fn next_token(&self) -> u8 {
        loop {
            let t = self.token.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if t != 0 {
                return t;
            }
        }
    }

    /// Marks slots as holding a command (fuzzing: command completion
    /// events are checked against them).
    #[cfg(fuzzing)]
    pub(crate) fn mark_in_flight(&mut self, mask: u32) {
        *self.in_flight.get_mut() = mask;
    }

    /// Slots whose command never completed.
    pub(crate) fn stuck_slots(&self) -> u32 {
        self.stuck_mask.load(Ordering::Acquire)
    }

    /// Marks command completion events for `vector`; returns the bits that
    /// name no command in flight.
    pub(crate) fn complete_by_event(&self, vector: u32) -> u32 {
        let in_flight = self.in_flight.load(Ordering::Acquire);
        self.completed
            .fetch_or(vector & in_flight, Ordering::AcqRel);
        vector & !in_flight
    }

    /// Every stuck chain, for freeing after the device is quiesced.
    pub(crate) fn take_stuck(&self) {
        let mut st = self.stuck.lock();
        let mut pool = self.pool.lock();
        for s in st.iter_mut() {
            if let Some((i, o)) = s.take() {
                pool.release(i);
                pool.release(o);
            }
        }
        self.stuck_mask.store(0, Ordering::Release);
    }

    /// Gives a slot back: free for the next command, no longer in flight.
    fn release_slot(&self, slot: u8) {
        self.in_flight.fetch_and(!(1 << slot), Ordering::AcqRel);
        self.completed.fetch_and(!(1 << slot), Ordering::AcqRel);
        *self.free.lock() |= 1 << slot;
    }

    /// Slots and mailbox blocks as they are now, for tests that count
    /// what a command left behind.
    #[cfg(test)]
    pub(crate) fn census(&self) -> Census {
        Census {
            free_slots: self.free.lock().count_ones(),
            in_flight: self.in_flight.load(Ordering::Acquire),
            stuck: self.stuck_mask.load(Ordering::Acquire),
            parked_chains: self.stuck.lock().iter().flatten().count(),
            used_blocks: self.pool.lock().used_blocks(),
        }
    }
}

/// What [`CmdState::census`] counts.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Census {
    /// Slots free for the next command.
    pub(crate) free_slots: u32,
    /// Mask of the slots whose command is posted and not given back.
    pub(crate) in_flight: u32,
    /// Mask of the stuck slots.
    pub(crate) stuck: u32,
    /// Stuck commands whose mailbox chains are parked.
    pub(crate) parked_chains: usize,
    /// Mailbox blocks in use.
    pub(crate) used_blocks: usize,
}

/// A command between taking its slot and its end: the slot and the
/// command's mailbox chains (empty until allocated).
///
/// Dropping it releases the chains to the pool and the slot, whatever path
/// the command took. [`mark_stuck`](Self::mark_stuck) is for a command the
/// device never completed: the device may still write its output mailboxes
/// (and read the input), so the chains are parked in the stuck table and
/// the slot stays taken until the firmware gives the entry back
/// ([`Hca::reclaim_stuck`]) or the device is quiesced
/// ([`CmdState::take_stuck`]).
struct InFlight<'h> {
    cmd: &'h CmdState,
    slot: u8,
    input: Chain,
    output: Chain,
    stuck: bool,
}

impl<'h> InFlight<'h> {
    /// Holds `slot` (taken from the free mask by the caller).
    fn new(cmd: &'h CmdState, slot: u8) -> Self {
        Self {
            cmd,
            slot,
            input: Chain::default(),
            output: Chain::default(),
            stuck: false,
        }
    }

    /// Keeps the command's mailbox chains: they are released (or parked)
    /// with the slot.
    fn hold_chains(&mut self, (input, output): (Chain, Chain)) {
        debug_assert!(self.input.len() == 0 && self.output.len() == 0);
        self.input = input;
        self.output = output;
    }

    /// The command never completed: on drop, park the chains and keep the
    /// slot.
    fn mark_stuck(mut self) {
        self.stuck = true;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let input = core::mem::take(&mut self.input);
        let output = core::mem::take(&mut self.output);
        if self.stuck {
            // The firmware may still own the entry and write the output
            // mailboxes: keep both until it gives the entry back.
            self.cmd.stuck.lock()[usize::from(self.slot)] = Some((input, output));
            self.cmd
                .stuck_mask
                .fetch_or(1 << self.slot, Ordering::AcqRel);
            return;
        }
        {
            let mut pool = self.cmd.pool.lock();
            pool.release(input);
            pool.release(output);
        }
        self.cmd.release_slot(self.slot);
    }
}

/// The answer of a command: the output message, read out of the queue entry
/// and the output mailboxes on demand (nothing is copied up front).
pub struct Output<'a> {
    opcode: Opcode,
    op_mod: u16,
    /// `command_output_inline_data`: the first 16 output bytes.
    inline: [u8; INLINE_SIZE],
    len: usize,
    chain: &'a Chain,
    pool: &'a spin::Mutex<MailboxPool>,
}

impl Output<'_> {
    /// The command.
    pub fn opcode(&self) -> Opcode {
        self.opcode
    }

    /// Length of the output message (the entry's `output_length`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the output is empty (never: at least 16 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An [`Error::InvalidAnswer`] for this command.
    pub fn invalid(&self, field: &'static str, value: u64, reason: &'static str) -> Error {
        Error::InvalidAnswer {
            opcode: self.opcode,
            op_mod: self.op_mod,
            field,
            value,
            reason,
        }
    }

    /// Copies output bytes `offset .. offset + dst.len()`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(dst.len());
        if end.is_none_or(|e| e > self.len) {
            return Err(Error::InvalidArgument {
                arg: "offset",
                reason: "read past the end of the command output",
            });
        }
        let mut done = 0;
        if offset < INLINE_SIZE {
            let n = (INLINE_SIZE - offset).min(dst.len());
            dst[..n].copy_from_slice(&self.inline[offset..offset + n]);
            done = n;
        }
        if done < dst.len() {
            let pool = self.pool.lock();
            while done < dst.len() {
                let m = offset + done - INLINE_SIZE;
                let (block, within) = (m / MAILBOX_DATA_SIZE, m % MAILBOX_DATA_SIZE);
                let n = (MAILBOX_DATA_SIZE - within).min(dst.len() - done);
                let (region, off) = pool.block(self.chain, block);
                region.read_bytes(off + within, &mut dst[done..done + n]);
                done += n;
            }
        }
        Ok(())
    }

    /// The first `L::SIZE` bytes as layout `L`.
    pub fn decode<L: Layout>(&self) -> Result<L> {
        let mut l = L::zeroed();
        if L::SIZE > self.len {
            return Err(Error::InvalidArgument {
                arg: "L",
                reason: "layout larger than the command output",
            });
        }
        self.read(0, l.bytes_mut())?;
        Ok(l)
    }

    /// Layout `L` at byte `offset`.
    pub fn decode_at<L: Layout>(&self, offset: usize) -> Result<L> {
        let mut l = L::zeroed();
        self.read(offset, l.bytes_mut())?;
        Ok(l)
    }

    /// Calls `f` with each of the `count` big-endian elements of a flexible
    /// array starting at byte `start`. `count` usually comes from the
    /// device: it is checked against the output length first
    /// ([`Error::InvalidAnswer`] naming `field`).
    pub fn read_array<T: ArrayItem>(
        &self,
        field: &'static str,
        start: usize,
        count: usize,
        mut f: impl FnMut(T) -> Result<()>,
    ) -> Result<()> {
        let fits = count
            .checked_mul(T::SIZE)
            .and_then(|n| n.checked_add(start))
            .is_some_and(|end| end <= self.len);
        if !fits {
            return Err(self.invalid(field, count as u64, "more entries than the output holds"));
        }
        let mut buf = [0u8; 64];
        let per = 64 / T::SIZE.max(1);
        let mut k = 0;
        while k < count {
            let n = per.min(count - k);
            let bytes = &mut buf[..n * T::SIZE];
            self.read(start + k * T::SIZE, bytes)?;
            for item in bytes.chunks_exact(T::SIZE) {
                f(T::from_be(item))?;
            }
            k += n;
        }
        Ok(())
    }
}

/// Writes the trailers of an output chain's blocks (next pointer, block
/// number, token) for the firmware to fill in the data.
pub(crate) fn prepare_output_chain(pool: &MailboxPool, outb: &Chain, token: u8) -> Result<()> {
    for i in 0..outb.len() {
        let next = if i + 1 < outb.len() {
            pool.iova(outb, i + 1)
        } else {
            0
        };
        let mut b = CmdIfBox::new();
        b.set_next_pointer(next)?;
        b.set(CmdIfBox::block_number, i as u32)?
            .set(CmdIfBox::token, token)?;
        let (region, off) = pool.block(outb, i);
        region.write_bytes(off, b.as_bytes());
    }
    Ok(())
}

/// The output length a layout needs (at least the 16 inline bytes).
pub(crate) fn out_len_for<L: Layout>() -> usize {
    L::SIZE.max(INLINE_SIZE)
}

/// The command executor. Crate-internal: every command the driver builds
/// carries only addresses of memory it allocated itself. Callers outside
/// the crate reach these through [`RawHca`](crate::RawHca), whose
/// constructor is `unsafe`.
impl<P: Platform> Hca<P> {
    /// Runs a command whose output is the fixed layout `C::Output`.
    pub(crate) fn exec<C: Command>(&self, input: &C) -> Result<C::Output> {
        self.exec_read(input, out_len_for::<C::Output>(), |o| o.decode())
    }

    /// Runs a command whose input ends in a flexible array (`pas`, MTT
    /// entries...): `head` followed by `items`.
    pub(crate) fn exec_with_items<C: Command, T: ArrayItem>(
        &self,
        head: &C,
        items: &[T],
    ) -> Result<C::Output> {
        self.exec_read(
            &WithArray::new(head, items),
            out_len_for::<C::Output>(),
            |o| o.decode(),
        )
    }

    /// Runs a command with any encoded input (see
    /// [`firmware_cmds::command::Encode`], e.g. [`PageList`](crate::PageList))
    /// and a fixed output layout.
    pub(crate) fn exec_encoded<O: Layout, E: Encode + ?Sized>(&self, input: &E) -> Result<O> {
        self.exec_read(input, out_len_for::<O>(), |o| o.decode())
    }

    /// Runs a command with any input and an output of `out_len` bytes, and
    /// hands the validated answer to `read` (for outputs with a flexible
    /// array: MANAGE_PAGES take, QUERY_HCA_VPORT_GID...).
    ///
    /// Errors: [`Error::DeviceDead`] at once once the device is known dead;
    /// [`Error::Timeout`] naming the command; [`Error::Delivery`],
    /// [`Error::MalformedAnswer`], [`Error::InvalidAnswer`] for answers the
    /// device got wrong; [`Error::Command`] when the command failed.
    pub(crate) fn exec_read<E: Encode + ?Sized, R>(
        &self,
        input: &E,
        out_len: usize,
        read: impl FnOnce(&Output<'_>) -> Result<R>,
    ) -> Result<R> {
        self.check_alive()?;
        let in_len = input.encoded_len();
        let mut hdr = [0u8; 8];
        input.encode_range(0, &mut hdr);
        let (opcode, op_mod) = input_header(&hdr)?;
        if !(INLINE_SIZE..=MAX_MESSAGE).contains(&in_len) {
            return Err(Error::InvalidArgument {
                arg: "input",
                reason: "a command input is 16 bytes to 4 MiB long",
            });
        }
        if !(INLINE_SIZE..=MAX_MESSAGE).contains(&out_len) {
            return Err(Error::InvalidArgument {
                arg: "out_len",
                reason: "a command output is 16 bytes to 4 MiB long",
            });
        }
        // Every early return below drops `cmd`, which gives back the
        // mailboxes and the slot.
        let mut cmd = self.acquire_slot()?;
        let token = self.cmd.next_token();
        let chain = InputChain::new(input, token, self.cmd.sign_inputs.load(Ordering::Relaxed));
        cmd.hold_chains(self.alloc_chains(chain.num_blocks(), blocks_for(out_len))?);
        let entry = self.prepare(token, &chain, out_len, &cmd.input, &cmd.output)?;
        let answered = match self.post_and_wait(&cmd, token, opcode, op_mod, &entry) {
            Ok(answered) => answered,
            Err(e) => {
                cmd.mark_stuck();
                return Err(e);
            }
        };
        let checksum = self.cmd.check_signatures.load(Ordering::Relaxed);
        answer(
            &self.cmd.pool,
            checksum,
            opcode,
            op_mod,
            token,
            &answered,
            out_len,
            &cmd.output,
            read,
        )
    }

    fn alloc_chains(&self, n_in: usize, n_out: usize) -> Result<(Chain, Chain)> {
        let mut pool = self.cmd.pool.lock();
        let mut grow = |bytes: usize| {
            self.dma_alloc(
                bytes,
                4096,
                DmaUse::Mailboxes,
                "allocating command mailboxes",
            )
        };
        let map = |e: PoolError<Error>| match e {
            PoolError::Grow(e) => e,
            PoolError::TooManyChunks => Error::CapacityExceeded {
                what: "the mailbox pool",
                capacity: crate::mailbox::MAX_MAILBOX_CHUNKS,
            },
            PoolError::TooManyRuns => Error::CapacityExceeded {
                what: "a mailbox chain's list of runs",
                capacity: crate::mailbox::MAX_CHAIN_RUNS,
            },
        };
        let inb = pool.alloc(n_in, &mut grow).map_err(map)?;
        match pool.alloc(n_out, &mut grow) {
            Ok(outb) => Ok((inb, outb)),
            Err(e) => {
                pool.release(inb);
                Err(map(e))
            }
        }
    }

    /// Takes a free slot, waiting (with the command timeout) when all are
    /// busy.
    fn acquire_slot(&self) -> Result<InFlight<'_>> {
        let deadline = Deadline::start(self.p(), self.cfg.timeouts.command);
        loop {
            if self.cmd.stuck_mask.load(Ordering::Acquire) != 0 {
                self.reclaim_stuck();
            }
            {
                let mut f = self.cmd.free.lock();
                if *f != 0 {
                    let s = f.trailing_zeros();
                    *f &= !(1 << s);
                    return Ok(InFlight::new(&self.cmd, s as u8));
                }
            }
            self.check_alive()?;
            deadline.check(self.p(), Wait::CommandSlot)?;
            self.p().relax();
        }
    }

    /// Frees stuck slots whose entry the firmware has given back.
    pub(crate) fn reclaim_stuck(&self) {
        let mask = self.cmd.stuck_mask.load(Ordering::Acquire);
        for slot in 0..self.cmd.slots {
            let slot = slot as u8;
            if mask & (1 << slot) == 0 || self.entry_owned_by_fw(slot) {
                continue;
            }
            // Only the thread that takes the parked chains frees the slot.
            let Some(chains) = self.cmd.stuck.lock()[usize::from(slot)].take() else {
                continue;
            };
            self.cmd
                .stuck_mask
                .fetch_and(!(1 << slot), Ordering::AcqRel);
            log::debug!("command slot {slot} came back from the firmware late; reusing it");
            let mut late = InFlight::new(&self.cmd, slot);
            late.hold_chains(chains);
            drop(late);
        }
    }

    /// The entry's `ownership` bit, read with the whole status word in one
    /// aligned load.
    fn entry_owned_by_fw(&self, slot: u8) -> bool {
        let off = usize::from(slot) * self.cmd.stride;
        // The device writes the word: fresh from memory on a system
        // without coherent DMA (nothing otherwise).
        self.p()
            .dma_invalidate(self.cmd.queue(), off + STATUS_WORD_OFFSET, 4);
        EntryStatusWord::from_bits(self.cmd.queue().read32(off + STATUS_WORD_OFFSET)).ownership()
    }

    /// Writes the mailbox blocks and builds the entry (nothing reaches the
    /// device yet).
    #[allow(clippy::too_many_arguments)]
    fn prepare<E: Encode + ?Sized>(
        &self,
        token: u8,
        chain: &InputChain<'_, E>,
        out_len: usize,
        inb: &Chain,
        outb: &Chain,
    ) -> Result<CmdQueueEntry> {
        let (in_ptr, out_ptr) = {
            let pool = self.cmd.pool.lock();
            for i in 0..inb.len() {
                let next = if i + 1 < inb.len() {
                    pool.iova(inb, i + 1)
                } else {
                    0
                };
                let b = chain.block(i, next)?;
                let (region, off) = pool.block(inb, i);
                region.write_bytes(off, b.as_bytes());
            }
            prepare_output_chain(&pool, outb, token)?;
            let first = |c: &Chain| if c.len() > 0 { pool.iova(c, 0) } else { 0 };
            (first(inb), first(outb))
        };
        Ok(CmdQueueEntry::build(
            &chain.inline(),
            chain.len() as u32,
            in_ptr,
            out_len as u32,
            out_ptr,
            token,
        )?)
    }

    /// Writes the entry (its status word, with the ownership bit, last),
    /// rings the doorbell, waits. Returns the answered entry.
    fn post_and_wait(
        &self,
        cmd: &InFlight<'_>,
        token: u8,
        opcode: Opcode,
        op_mod: u16,
        entry: &CmdQueueEntry,
    ) -> Result<CmdQueueEntry> {
        let slot = cmd.slot;
        let q = self.cmd.queue();
        let off = usize::from(slot) * self.cmd.stride;
        q.write_bytes(off, &entry.as_bytes()[..STATUS_WORD_OFFSET]);
        udma_to_device_barrier();
        q.write32(off + STATUS_WORD_OFFSET, entry.status_word().into_bits());
        let bit = 1u32 << slot;
        self.cmd.completed.fetch_and(!bit, Ordering::AcqRel);
        self.cmd.in_flight.fetch_or(bit, Ordering::AcqRel);
        // Without coherent DMA: the entry and both mailbox chains (the
        // output trailers too, and no dirty line left to be written back
        // over the device's answer) reach memory before the doorbell.
        self.sync_chain(&cmd.input, true);
        self.sync_chain(&cmd.output, true);
        self.p().dma_clean(q, off, ENTRY_SIZE);
        udma_to_device_barrier();
        let start = self.p().now();
        self.bar.write32(CMD_DBELL_OFFSET, Be32::new(bit));
        self.cmd.executed.fetch_add(1, Ordering::Relaxed);
        let timeout = if opcode == Opcode::TEARDOWN_HCA {
            self.cfg.timeouts.teardown
        } else {
            self.cfg.timeouts.command
        };
        let waited = self.wait_slot(slot, opcode, op_mod, start, timeout);
        let elapsed = self.p().now().saturating_sub(start);
        let mut answered = [0u8; ENTRY_SIZE];
        if waited.is_ok() {
            udma_from_device_barrier();
            // Without coherent DMA: the device's answer, from memory.
            self.p().dma_invalidate(q, off, ENTRY_SIZE);
            self.sync_chain(&cmd.output, false);
            q.read_bytes(off, &mut answered);
        }
        let answered = CmdQueueEntry::from_array(answered);
        self.log_and_record(
            opcode,
            op_mod,
            slot,
            token,
            elapsed,
            entry,
            waited.is_ok().then_some(&answered),
            &cmd.input,
            &cmd.output,
        );
        waited.map(|()| answered)
    }

    /// Cleans (`to_device`) or invalidates every mailbox block of `chain`
    /// ([`Platform::dma_clean`], [`Platform::dma_invalidate`]: nothing on
    /// a platform with coherent DMA).
    fn sync_chain(&self, chain: &Chain, to_device: bool) {
        let pool = self.cmd.pool.lock();
        for i in 0..chain.len() {
            let (region, off) = pool.block(chain, i);
            if to_device {
                self.p().dma_clean(region, off, MAILBOX_BLOCK_SIZE);
            } else {
                self.p().dma_invalidate(region, off, MAILBOX_BLOCK_SIZE);
            }
        }
    }

    fn wait_slot(
        &self,
        slot: u8,
        opcode: Opcode,
        op_mod: u16,
        start: Duration,
        timeout: Duration,
    ) -> Result<()> {
        let bit = 1u32 << slot;
        let mut last_health = start;
        let mut clear_since: Option<Duration> = None;
        let mut spins = 0u32;
        let mut sleep = Duration::from_micros(1);
        loop {
            let events = self.cmd.events_mode.load(Ordering::Acquire);
            // On interrupts: the count before looking at the EQ, so that an
            // EQE written after the look ends the sleep below.
            let irq = match self.eqs.cmd.as_ref() {
                Some(eq) if events => self.interrupt_seen(eq.vector).map(|s| (eq.vector, s)),
                _ => None,
            };
            let owned = self.entry_owned_by_fw(slot);
            let mut eq_busy = false;
            if events {
                if self.cmd.completed.load(Ordering::Acquire) & bit != 0 {
                    self.cmd.completed.fetch_and(!bit, Ordering::AcqRel);
                    if !owned {
                        return Ok(());
                    }
                    let eqn = self.eqs.cmd.as_ref().map_or(0, |e| e.eqn);
                    log::warn!(
                        "command completion event for slot {slot} while the firmware still owns it"
                    );
                    self.events.push(AsyncEvent::InvalidEqe {
                        eqn,
                        error: EqeError::BadCommandSlots { vector: bit },
                    });
                }
                if let Some(eq) = self.eqs.cmd.as_ref() {
                    // Errors are queued as events; this wait goes on.
                    eq_busy = self.try_poll_eq(eq).is_none();
                }
                if self.cmd.completed.load(Ordering::Acquire) & bit != 0 {
                    continue;
                }
                if !owned {
                    let now = self.p().now();
                    let since = *clear_since.get_or_insert(now);
                    if now.saturating_sub(since) >= self.cfg.timeouts.missing_completion_event {
                        log::warn!(
                            "{opcode} op_mod({op_mod:#x}): entry of slot {slot} is back without a completion event; accepting it"
                        );
                        self.events
                            .push(AsyncEvent::MissedCommandCompletion { slot });
                        return Ok(());
                    }
                }
            } else if !owned {
                return Ok(());
            }
            let now = self.p().now();
            let waited = now.saturating_sub(start);
            if waited >= timeout {
                log::error!(
                    "{opcode} op_mod({op_mod:#x}) timed out after {waited:?} in slot {slot}"
                );
                return Err(Error::Timeout {
                    what: Wait::Command { opcode, op_mod },
                    after: waited,
                });
            }
            let health = self.cfg.timeouts.health_check_in_wait;
            if now.saturating_sub(last_health) >= health {
                last_health = now;
                self.probe_health()?;
                if events {
                    // A command the firmware holds until it gets pages.
                    self.service_while_waiting();
                }
            }
            match irq {
                // Another thread is consuming the EQ: it may be handling
                // this command's completion right now; look again soon.
                Some((vector, seen)) if !eq_busy => {
                    // Sleep until the completion's interrupt, or until the
                    // next health check, missing-event limit or timeout.
                    let now = self.p().now();
                    let mut slice = timeout
                        .saturating_sub(now.saturating_sub(start))
                        .min(health.saturating_sub(now.saturating_sub(last_health)));
                    if let Some(since) = clear_since {
                        slice = slice.min(
                            self.cfg
                                .timeouts
                                .missing_completion_event
                                .saturating_sub(now.saturating_sub(since)),
                        );
                    }
                    if self.wait_interrupt(vector, seen, slice)? {
                        // The asynchronous EQ shares the vector: page
                        // requests the firmware may be holding this command
                        // for.
                        self.service_while_waiting();
                    }
                }
                _ => {
                    self.note_poll();
                    if spins < SPINS_BEFORE_SLEEP {
                        spins += 1;
                        self.p().relax();
                    } else {
                        self.p().delay(sleep);
                        sleep = (sleep * 2).min(MAX_POLL_SLEEP);
                    }
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn log_and_record(
        &self,
        opcode: Opcode,
        op_mod: u16,
        slot: u8,
        token: u8,
        elapsed: Duration,
        input: &CmdQueueEntry,
        output: Option<&CmdQueueEntry>,
        inb: &Chain,
        outb: &Chain,
    ) {
        let outcome = match output {
            Some(o) => {
                let (status, syndrome) = entry_output_header(o);
                Outcome::Answered {
                    delivery: o.delivery_status(),
                    status,
                    syndrome,
                }
            }
            None => Outcome::TimedOut,
        };
        match outcome {
            Outcome::Answered {
                delivery,
                status,
                syndrome,
            } => log::trace!(
                "{opcode} op_mod({op_mod:#x}) slot {slot}: delivery {delivery}, status {status}, syndrome {syndrome:#x}, {elapsed:?}"
            ),
            Outcome::TimedOut => {
                log::trace!("{opcode} op_mod({op_mod:#x}) slot {slot}: no answer after {elapsed:?}")
            }
        }
        if let Some(rec) = self.cfg.recorder {
            rec.record(&Exchange {
                opcode,
                op_mod,
                slot,
                token,
                duration: elapsed,
                outcome,
                input_entry: input,
                output_entry: output,
                pool: &self.cmd.pool,
                input: inb,
                output: outb,
            });
        }
    }
}

/// Validates an answered entry and its output chain against what was
/// posted (token, output length, output pointer, every block's next
/// pointer, number, token and, with `checksum`, signatures), then the
/// command status, and hands the output to `read`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn answer<R>(
    pool: &spin::Mutex<MailboxPool>,
    checksum: bool,
    opcode: Opcode,
    op_mod: u16,
    token: u8,
    entry: &CmdQueueEntry,
    out_len: usize,
    outb: &Chain,
    read: impl FnOnce(&Output<'_>) -> Result<R>,
) -> Result<R> {
    let invalid = |field, value: u64, reason| Error::InvalidAnswer {
        opcode,
        op_mod,
        field,
        value,
        reason,
    };
    let malformed = |error| Error::MalformedAnswer {
        opcode,
        op_mod,
        error,
    };
    let t = entry.get(CmdQueueEntry::token);
    if t != token {
        return Err(invalid(
            "cmd_queue_entry.token",
            u64::from(t),
            "not the token of the command in this slot",
        ));
    }
    if checksum {
        entry.check_signature().map_err(malformed)?;
    }
    let ds = entry.delivery_status();
    if !ds.is_ok() {
        return Err(Error::Delivery {
            opcode,
            op_mod,
            status: ds,
        });
    }
    let ol = entry.get(CmdQueueEntry::output_length);
    if ol as usize != out_len {
        return Err(invalid(
            "cmd_queue_entry.output_length",
            u64::from(ol),
            "differs from the output length the driver posted",
        ));
    }
    {
        let p = pool.lock();
        let expect_ptr = if outb.len() > 0 { p.iova(outb, 0) } else { 0 };
        if entry.output_mailbox() != expect_ptr {
            return Err(invalid(
                "cmd_queue_entry.output_mailbox_pointer",
                entry.output_mailbox(),
                "differs from the output mailbox the driver posted",
            ));
        }
        let mut oc = OutputChain::new(out_len, token, checksum);
        for i in 0..outb.len() {
            let (region, off) = p.block(outb, i);
            let mut b = [0u8; MAILBOX_BLOCK_SIZE];
            region.read_bytes(off, &mut b);
            let b = CmdIfBox::from_array(b);
            let next = if i + 1 < outb.len() {
                p.iova(outb, i + 1)
            } else {
                0
            };
            if b.next_pointer() != next {
                return Err(invalid(
                    "cmd_if_box.next_pointer",
                    b.next_pointer(),
                    "an output block's next pointer was changed",
                ));
            }
            oc.push(&b).map_err(malformed)?;
        }
        oc.finish().map_err(malformed)?;
    }
    let (status, syndrome) = entry_output_header(entry);
    if !status.is_ok() {
        return Err(Error::Command(CmdError {
            opcode,
            op_mod,
            status,
            syndrome,
        }));
    }
    read(&Output {
        opcode,
        op_mod,
        inline: entry.get(CmdQueueEntry::command_output_inline_data),
        len: out_len,
        chain: outb,
        pool,
    })
}

/// `status` and `syndrome` of the output header, which travels in the
/// entry's `command_output_inline_data`.
fn entry_output_header(entry: &CmdQueueEntry) -> (CmdStatus, u32) {
    let inline = entry.get(CmdQueueEntry::command_output_inline_data);
    // 16 inline bytes always hold the 8-byte header.
    output_header(&inline).unwrap_or((CmdStatus(inline[0]), 0))
}

#[cfg(test)]
mod tests {
    //! What a command leaves behind, counted in the driver's own
    //! bookkeeping (slot masks, the stuck table, mailbox blocks in use) on
    //! each way a command can end.

    use core::time::Duration;

    use firmware_cmds::caps::QueryHcaCapIn;
    use firmware_cmds::pd::AllocPdIn;
    use hca_emu::{DmaFailure, EmuConfig, EmuHca, EmuPlatform, OutputCorruption};

    use super::*;
    use crate::Config;

    /// 16 inline bytes and 200 8-byte items: 1,600 mailbox bytes, four
    /// 512-byte input blocks.
    const ITEMS: [u64; 200] = [0; 200];
    /// QUERY_HCA_CAP's output, 0x1010 bytes: eight output blocks.
    const OUT_LEN: usize = 0x1010;
    /// The blocks of one such command.
    const BLOCKS: usize = 4 + 8;

    fn open() -> (EmuHca, Hca<EmuPlatform>) {
        let emu = EmuHca::new(EmuConfig::default());
        let mut cfg = Config::default();
        // Virtual time: the test does not wait for it.
        cfg.timeouts.command = Duration::from_secs(3);
        cfg.timeouts.teardown = Duration::from_secs(3);
        let hca = Hca::open(emu.platform(), cfg).unwrap();
        (emu, hca)
    }

    /// ALLOC_PD with a long input and a long output: mailboxes both ways.
    fn padded_alloc_pd(hca: &Hca<EmuPlatform>) -> Result<usize> {
        hca.exec_read(&WithArray::new(&AllocPdIn::new(), &ITEMS), OUT_LEN, |o| {
            Ok(o.len())
        })
    }

    fn idle(hca: &Hca<EmuPlatform>) -> Census {
        Census {
            free_slots: hca.cmd.slots,
            in_flight: 0,
            stuck: 0,
            parked_chains: 0,
            used_blocks: 0,
        }
    }

    fn close(emu: &EmuHca, hca: Hca<EmuPlatform>) {
        hca.close().unwrap();
        emu.assert_clean();
    }

    #[test]
    fn the_sizes_of_the_test_command_are_what_the_counts_assume() {
        let head = AllocPdIn::new();
        let input = WithArray::new(&head, &ITEMS);
        let chain = InputChain::new(&input, 1, true);
        assert_eq!(chain.num_blocks() + blocks_for(OUT_LEN), BLOCKS);
    }

    #[test]
    fn a_completed_command_gives_back_its_slot_and_mailboxes() {
        let (emu, hca) = open();
        assert_eq!(hca.cmd.census(), idle(&hca));
        hca.exec(&QueryHcaCapIn::new()).unwrap();
        assert_eq!(hca.cmd.census(), idle(&hca));
        close(&emu, hca);
    }

    #[test]
    fn a_failed_command_gives_back_its_slot_and_mailboxes() {
        let (emu, hca) = open();
        let rule = emu
            .faults()
            .fail_opcode(Opcode::ALLOC_PD.0, CmdStatus::BAD_PARAM.0, 0x1234);
        let e = padded_alloc_pd(&hca).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Command(CmdError {
                    opcode: Opcode::ALLOC_PD,
                    status: CmdStatus::BAD_PARAM,
                    syndrome: 0x1234,
                    ..
                })
            ),
            "{e}"
        );
        assert_eq!(emu.faults().hits(rule), 1);
        assert_eq!(hca.cmd.census(), idle(&hca));
        emu.faults().clear();
        close(&emu, hca);
    }

    #[test]
    fn a_refused_answer_gives_back_its_slot_and_mailboxes() {
        let (emu, hca) = open();
        let rule = emu.faults().corrupt_output(
            Some(Opcode::QUERY_HCA_CAP.0),
            1,
            OutputCorruption::BlockNumber,
        );
        let e = hca.exec(&QueryHcaCapIn::new()).unwrap_err();
        assert!(matches!(e, Error::MalformedAnswer { .. }), "{e}");
        assert_eq!(emu.faults().hits(rule), 1);
        assert_eq!(hca.cmd.census(), idle(&hca));
        close(&emu, hca);
    }

    #[test]
    fn a_command_without_mailbox_memory_gives_back_its_slot() {
        let (emu, hca) = open();
        // The pool has grown to what bring-up needed; a command longer
        // than that needs a new chunk, and every DMA allocation fails.
        let free = hca.cmd.pool.lock().free_blocks();
        let items = [0u64; 4096];
        assert!(blocks_for(16 + 8 * items.len()) > free);
        let executed = hca.commands_executed();
        let rule = emu.faults().fail_dma(DmaFailure::After(0));
        let e = hca
            .exec_read(&WithArray::new(&AllocPdIn::new(), &items), OUT_LEN, |o| {
                Ok(o.len())
            })
            .unwrap_err();
        emu.faults().fail_dma(DmaFailure::None);
        assert!(emu.faults().hits(rule) >= 1, "{e}");
        assert_eq!(hca.commands_executed(), executed, "nothing was posted");
        assert_eq!(hca.cmd.census(), idle(&hca));
        assert_eq!(hca.cmd.pool.lock().free_blocks(), free);
        close(&emu, hca);
    }

    #[test]
    fn a_stuck_command_keeps_its_slot_and_mailboxes_until_the_entry_comes_back() {
        let (emu, hca) = open();
        let rule = emu
            .faults()
            .command_never_completes(Some(Opcode::ALLOC_PD.0), 1);
        let e = padded_alloc_pd(&hca).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Timeout {
                    what: Wait::Command {
                        opcode: Opcode::ALLOC_PD,
                        ..
                    },
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(emu.faults().hits(rule), 1);
        let stuck = hca.cmd.census();
        assert_eq!(stuck.stuck.count_ones(), 1, "{stuck:?}");
        let slot = stuck.stuck.trailing_zeros() as u8;
        assert_eq!(
            stuck,
            Census {
                free_slots: hca.cmd.slots - 1,
                in_flight: 1 << slot,
                stuck: 1 << slot,
                parked_chains: 1,
                used_blocks: BLOCKS,
            }
        );
        assert!(hca.entry_owned_by_fw(slot));

        // Other commands run in the other slots, and end clean; the stuck
        // slot stays stuck while the firmware owns its entry.
        let pd = hca.alloc_pd().unwrap();
        pd.destroy().unwrap();
        assert_eq!(hca.cmd.census(), stuck);

        // The firmware hands the entry back late (written here as the
        // device would: the status word with the ownership bit clear).
        let off = usize::from(slot) * hca.cmd.stride;
        let q = hca.cmd.queue();
        let word = EntryStatusWord::from_bits(q.read32(off + STATUS_WORD_OFFSET));
        q.write32(
            off + STATUS_WORD_OFFSET,
            word.with_ownership(false).into_bits(),
        );
        // The next command takes the slot back, with its mailboxes.
        let pd = hca.alloc_pd().unwrap();
        pd.destroy().unwrap();
        assert_eq!(hca.cmd.census(), idle(&hca));
        close(&emu, hca);
    }

    #[test]
    fn a_stuck_command_is_freed_at_close() {
        let (emu, hca) = open();
        emu.faults()
            .command_never_completes(Some(Opcode::ALLOC_PD.0), 1);
        padded_alloc_pd(&hca).unwrap_err();
        assert_eq!(hca.cmd.census().used_blocks, BLOCKS);
        // Close quiesces the device (a stuck slot forces a function reset)
        // before the parked mailboxes are freed: nothing leaks.
        close(&emu, hca);
    }
}
