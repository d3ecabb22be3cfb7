//! Entry points for the cargo-fuzz targets in `fuzz/`: the decoders of
//! device-written bytes that otherwise run only inside an open [`Hca`]
//! (the command executor's answer checks and output readers, EQE dispatch,
//! the health poll), reachable on their own.
//!
//! Compiled only with `--cfg fuzzing`, which cargo-fuzz sets; not part of
//! the driver's API.
//!
//! [`Hca`]: crate::Hca

use core::fmt::{self, Write as _};
use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use core::time::Duration;

use firmware_cmds::caps::{CAPABILITY_OFFSET, CmdHcaCap};
use firmware_cmds::cmdq::{CmdQueueEntry, ENTRY_SIZE, INLINE_SIZE};
use firmware_cmds::command::input_header;
use firmware_cmds::eq::{EQE_SIZE, Eqe};
use firmware_cmds::init_seg::HEALTH_COUNTER_OFFSET;
use firmware_cmds::layout::Layout;
use firmware_cmds::mailbox::{CmdIfBox, MAILBOX_BLOCK_SIZE, blocks_for};
use platform::{Be32, Be64, DmaRegion, Mmio};

use crate::cmd::{CmdState, MAX_MESSAGE, Output, answer, prepare_output_chain};
use crate::eq::{EqKind, EqRing, EqeContext, dispatch_eqe};
use crate::error::{Error, Result};
use crate::events::{EventRouter, QueueId};
use crate::fwpages::returned_pages;
use crate::health::{HealthMonitor, HealthReading};
use crate::mailbox::MailboxPool;
use crate::query::{one_gid, pkeys};
use crate::types::{Cqn, Qpn, Srqn};

/// A command answer to check, and how the command was posted.
#[derive(Clone, Copy, Debug)]
pub struct AnswerCase<'a> {
    /// The answered queue entry (64 bytes) followed by the output mailbox
    /// blocks (576 bytes each) as the device wrote them.
    pub answer: &'a [u8],
    /// The output length the driver posted (clamped to 16 bytes..4 MiB).
    pub out_len: usize,
    /// The token the driver posted.
    pub token: u8,
    /// Whether signatures are checked (`cmdif_checksum` on).
    pub checksum: bool,
    /// Put the posted output pointer, length, token and the blocks' next
    /// pointers into the answer (so the checks beyond them are reached).
    pub fix_links: bool,
    /// Which output reader of the driver runs on an accepted answer.
    pub reader: u8,
}

/// Runs the command executor's checks of an answer and, if it is accepted,
/// one of the driver's output readers. `grow(bytes)` lends mailbox memory
/// (4 KiB aligned); `free` takes it back.
pub fn command_answer(
    case: &AnswerCase<'_>,
    grow: &mut dyn FnMut(usize) -> Option<DmaRegion>,
    free: &mut dyn FnMut(DmaRegion),
) -> Result<u64> {
    let out_len = case.out_len.clamp(INLINE_SIZE, MAX_MESSAGE);
    let pool = spin::Mutex::new(MailboxPool::new());
    let outb = pool
        .lock()
        .alloc(blocks_for(out_len), &mut |n| grow(n).ok_or(()))
        .map_err(|_| Error::InvalidArgument {
            arg: "grow",
            reason: "no mailbox memory",
        })?;
    let r = (|| {
        let n = case.answer.len().min(ENTRY_SIZE);
        let mut e = [0u8; ENTRY_SIZE];
        e[..n].copy_from_slice(&case.answer[..n]);
        let mut entry = CmdQueueEntry::from_array(e);
        {
            let p = pool.lock();
            prepare_output_chain(&p, &outb, case.token)?;
            let trailer = MAILBOX_BLOCK_SIZE - 0x40;
            let mut blocks = case.answer[n..].chunks(MAILBOX_BLOCK_SIZE);
            for i in 0..outb.len() {
                // Blocks the answer does not have keep their trailers only.
                let raw = blocks.next().unwrap_or(&[]);
                let (region, off) = p.block(&outb, i);
                let mut b = [0u8; MAILBOX_BLOCK_SIZE];
                if raw.len() < trailer {
                    region.read_bytes(off + trailer, &mut b[trailer..]);
                }
                b[..raw.len()].copy_from_slice(raw);
                let mut b = CmdIfBox::from_array(b);
                if case.fix_links {
                    let next = if i + 1 < outb.len() {
                        p.iova(&outb, i + 1)
                    } else {
                        0
                    };
                    b.set_next_pointer(next)?;
                }
                region.write_bytes(off, b.as_bytes());
            }
            if case.fix_links {
                let ptr = if outb.len() > 0 { p.iova(&outb, 0) } else { 0 };
                entry.set_output_mailbox(ptr)?;
                entry
                    .set(CmdQueueEntry::output_length, out_len as u32)?
                    .set(CmdQueueEntry::token, case.token)?;
            }
        }
        let (opcode, op_mod) = input_header(&entry.get(CmdQueueEntry::command_input_inline_data))?;
        answer(
            &pool,
            case.checksum,
            opcode,
            op_mod,
            case.token,
            &entry,
            out_len,
            &outb,
            |o| read_output(o, case.reader),
        )
    })();
    let mut p = pool.lock();
    p.release(outb);
    p.drain(free);
    r
}

/// One of the driver's readers of an accepted output.
fn read_output(o: &Output<'_>, reader: u8) -> Result<u64> {
    let room = o.len() - INLINE_SIZE;
    match reader % 5 {
        // QUERY_HCA_CAP: the capability block.
        0 => {
            let c: CmdHcaCap = o.decode_at(CAPABILITY_OFFSET)?;
            Ok(c.bytes().iter().map(|&b| u64::from(b)).sum())
        }
        // MANAGE_PAGES take of as many pages as the output holds.
        1 => {
            let mut acc = 0u64;
            returned_pages(o, room / 8, |a| acc ^= a)?;
            Ok(acc)
        }
        // QUERY_HCA_VPORT_GID of one GID.
        2 => Ok(u64::from(one_gid(o)?[15])),
        // QUERY_HCA_VPORT_PKEY of the whole table.
        3 => {
            let mut out = [0u16; 128];
            let n = (room / 4).min(out.len());
            pkeys(o, &mut out[..n])?;
            Ok(out.iter().map(|&k| u64::from(k)).sum())
        }
        // The whole message, byte by byte.
        _ => {
            let mut buf = [0u8; 64];
            let mut acc = 0u64;
            let mut off = 0;
            while off < o.len() {
                let k = (o.len() - off).min(buf.len());
                o.read(off, &mut buf[..k])?;
                acc = acc.wrapping_add(buf[..k].iter().map(|&b| u64::from(b)).sum::<u64>());
                off += k;
            }
            Ok(acc)
        }
    }
}

/// Handles EQEs the way an EQ poll does: each 64-byte chunk of `eqes` is
/// the next entry of an EQ of `2^log_size` entries and `kind` (0 command,
/// 1 asynchronous, else completion); entries are consumed while their
/// owner bit says software owns them, and each is dispatched against a
/// driver state with command slots `in_flight` (of `2^log_slots`), CQ 7,
/// QP 0x123, SRQ 0x10, RQ 0x20, SQ 0x21 and DCT 0x22 known and
/// `num_ports` ports. `queue` backs the command queue page; it is handed
/// back with the number of entries that were valid.
pub fn eqes(
    eqes: &[u8],
    kind: u8,
    log_size: u8,
    log_slots: u8,
    in_flight: u32,
    num_ports: u8,
    queue: DmaRegion,
) -> (u64, DmaRegion) {
    let mut cmd = CmdState::new(queue, log_slots.min(5), 6);
    cmd.mark_in_flight(in_flight);
    let events = EventRouter::new();
    let _ = events.register_cq(Cqn(7));
    for q in [
        QueueId::Qp(Qpn(0x123)),
        QueueId::Srq(Srqn(0x10)),
        QueueId::Rq(0x20),
        QueueId::Sq(0x21),
        QueueId::Dct(0x22),
    ] {
        let _ = events.register_queue(q);
    }
    events.set_num_ports(num_ports);
    let pending = AtomicI64::new(0);
    let internal = AtomicBool::new(false);
    let ctx = EqeContext {
        cmd: &cmd,
        events: &events,
        num_ports,
        pending_pages: &pending,
        internal_error_seen: &internal,
    };
    let kind = match kind % 3 {
        0 => EqKind::Command,
        1 => EqKind::Async,
        _ => EqKind::Completion(kind),
    };
    let mut ring = EqRing::new(log_size.clamp(1, 12));
    let mut valid = 0u64;
    for chunk in eqes.chunks_exact(EQE_SIZE) {
        if !ring.is_sw_owned(chunk[EQE_SIZE - 1]) {
            break;
        }
        let e = Eqe::from_slice(chunk).expect("64 bytes are an EQE");
        if let Err(err) = dispatch_eqe(&ctx, kind, &e) {
            let mut n = Count(0);
            let _ = write!(n, "{err}");
            valid ^= n.0 as u64;
        }
        valid += 1;
        let _ = ring.advance();
    }
    while events.pop().is_some() {}
    valid ^= pending.load(Ordering::Relaxed) as u64;
    let queue = cmd.queue.take().expect("the queue page is still there");
    (valid, queue)
}

/// Counts the bytes of a formatted message.
struct Count(usize);

impl fmt::Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Register window over fuzz bytes: the health buffer's `fw_version` and
/// syndrome dwords and the health counter.
struct HealthWords([u32; 3]);

impl Mmio for HealthWords {
    fn len(&self) -> usize {
        HEALTH_COUNTER_OFFSET + 4
    }
    fn read32(&self, offset: usize) -> Be32 {
        Be32::new(match offset {
            crate::health::FW_VERSION_OFFSET => self.0[0],
            crate::health::SYNDROME_DWORD_OFFSET => self.0[1],
            HEALTH_COUNTER_OFFSET => self.0[2],
            _ => 0,
        })
    }
    fn write32(&self, _: usize, _: Be32) {}
    fn write64(&self, _: usize, _: Be64) {}
}

/// The health poll over a sequence of readings: each 12 bytes of `words`
/// are the `fw_version`, syndrome dword and health counter the device
/// shows at the next poll, `step_ms` after the previous one; returns the
/// verdict of each poll until the first that declares the device dead.
pub fn health_polls(words: &[u8], step_ms: u16, period_ms: u16) -> Result<u64> {
    let mut monitor = HealthMonitor::default();
    let period = Duration::from_millis(u64::from(period_ms));
    let mut acc = 0u64;
    for (i, w) in words.chunks_exact(12).enumerate() {
        let word = |k: usize| u32::from_be_bytes([w[k], w[k + 1], w[k + 2], w[k + 3]]);
        let bar = HealthWords([word(0), word(4), word(8)]);
        let r: HealthReading = crate::health::read_health(&bar);
        let now = Duration::from_millis(i as u64 * u64::from(step_ms));
        if let Err(d) = monitor.observe(now, &r, period) {
            return Err(Error::DeviceDead(d));
        }
        acc = acc.wrapping_add(u64::from(r.counter));
    }
    Ok(acc)
}
