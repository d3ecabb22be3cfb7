//! Command dumps in the Linux `mlx5_core` format.
//!
//! With dynamic debug on, Linux dumps every command twice: the 64-byte queue
//! entry as posted (`INPUT`, offsets `000`..`030`) followed by the input
//! mailbox blocks, and the entry after the firmware answered (`OUTPUT`)
//! followed by the output mailbox blocks; each block is 576 bytes
//! (`command block:`, offsets from `040` on, 0x240 per block):
//!
//! ```text
//! dump command MLX5_CMD_OP_ENABLE_HCA(0x104) INPUT
//! 000: 07000000 00000010 00000000 00000000
//! 010: 01040000 00000000 00000000 00000000
//! 020: 00000000 00000000 00000000 00000000
//! 030: 00000000 00000000 00000010 01fd0001
//! ```
//!
//! [`write_dump`] writes one entry and its blocks in this form to any
//! [`core::fmt::Write`] (no allocation), and [`write_block`] one mailbox
//! block, so a driver can dump its own traffic like Linux does. With the `alloc` feature, `parse` reads such a
//! dump back (the caller passes the text): it pairs each INPUT with its
//! OUTPUT, checks the entries and the mailbox chains (block numbers, tokens,
//! lengths, optionally signatures) and reassembles the input and output
//! messages as far as the dump shows them. Lines that are not part of a
//! dump (other kernel messages, timestamps) are skipped; a dump that is cut
//! short, a hex line out of sequence or a chain that contradicts its entry
//! is an error naming the line.

use core::fmt;

use crate::cmdq::{CmdQueueEntry, ENTRY_SIZE};
use crate::mailbox::{CmdIfBox, MAILBOX_BLOCK_SIZE};
use crate::opcode::Opcode;

/// Which side of a command a dump shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The entry as posted, with the input mailboxes.
    Input,
    /// The entry after completion, with the output mailboxes.
    Output,
}

/// `INPUT` / `OUTPUT`.
impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Input => "INPUT",
            Direction::Output => "OUTPUT",
        })
    }
}

/// Offset of the first mailbox block in a dump.
pub const FIRST_BLOCK_OFFSET: usize = ENTRY_SIZE;

fn write_lines<W: fmt::Write + ?Sized>(w: &mut W, bytes: &[u8], offset: usize) -> fmt::Result {
    for (i, line) in bytes.chunks(16).enumerate() {
        write!(w, "{:03x}:", offset + 16 * i)?;
        for word in line.chunks(4) {
            w.write_char(' ')?;
            for b in word {
                write!(w, "{b:02x}")?;
            }
        }
        w.write_char('\n')?;
    }
    w.write_char('\n')
}

/// Writes mailbox block `index` of a chain as Linux dumps it: a
/// `command block:` line, then the 576 bytes in hex lines of four
/// big-endian words at offsets `040 + 0x240 * index` onwards, and an empty
/// line. [`write_dump`] writes each block of a dump this way; a caller that
/// reads blocks one at a time (out of DMA memory, without a buffer for the
/// whole chain) writes the entry with [`write_dump`] and no blocks, then
/// each block with this.
///
/// ```
/// use firmware_cmds::mailbox::CmdIfBox;
/// use firmware_cmds::trace::write_block;
///
/// let block = CmdIfBox::new().with(CmdIfBox::block_number, 1)?;
/// let mut s = String::new();
/// write_block(&mut s, 1, &block).unwrap();
/// assert!(s.starts_with("command block:\n280: 00000000 00000000"));
/// // The trailer: block number 1 at 0x238 of the block.
/// assert!(s.contains("\n4b0: 00000000 00000000 00000001 00000000\n"));
/// # Ok::<(), firmware_cmds::Error>(())
/// ```
pub fn write_block<W: fmt::Write + ?Sized>(
    w: &mut W,
    index: usize,
    block: &CmdIfBox,
) -> fmt::Result {
    w.write_str("command block:\n")?;
    write_lines(
        w,
        block.as_bytes(),
        FIRST_BLOCK_OFFSET + index * MAILBOX_BLOCK_SIZE,
    )
}

/// Writes one side of a command exchange as Linux dumps it: the header line
/// (`dump command NAME(0xop) INPUT`), the 64 entry bytes at offsets
/// `000`..`030`, then for each block a `command block:` line and its 576
/// bytes at offsets from `040` on.
///
/// ```
/// use firmware_cmds::cmdq::CmdQueueEntry;
/// use firmware_cmds::trace::{write_dump, Direction};
///
/// let mut inline = [0u8; 16];
/// inline[..2].copy_from_slice(&[0x01, 0x04]);
/// let e = CmdQueueEntry::build(&inline, 0x10, 0, 0x10, 0, 0x01)?;
/// let mut s = String::new();
/// write_dump(&mut s, Direction::Input, &e, &[]).unwrap();
/// assert!(s.starts_with("dump command ENABLE_HCA(0x104) INPUT\n000: 07000000 00000010"));
/// assert!(s.contains("030: 00000000 00000000 00000010 01fd0001\n"));
/// # Ok::<(), firmware_cmds::Error>(())
/// ```
pub fn write_dump<W: fmt::Write + ?Sized>(
    w: &mut W,
    direction: Direction,
    entry: &CmdQueueEntry,
    blocks: &[CmdIfBox],
) -> fmt::Result {
    let b = entry.as_bytes();
    let op = Opcode(u16::from_be_bytes([b[0x10], b[0x11]]));
    let name = op.name().unwrap_or("unknown command opcode");
    writeln!(w, "dump command {name}({:#x}) {direction}", op.0)?;
    write_lines(w, b, 0)?;
    for (i, block) in blocks.iter().enumerate() {
        write_block(w, i, block)?;
    }
    Ok(())
}

/// Writes a whole exchange: the INPUT dump, then the OUTPUT dump.
pub fn write_exchange<W: fmt::Write + ?Sized>(
    w: &mut W,
    input_entry: &CmdQueueEntry,
    input_blocks: &[CmdIfBox],
    output_entry: &CmdQueueEntry,
    output_blocks: &[CmdIfBox],
) -> fmt::Result {
    write_dump(w, Direction::Input, input_entry, input_blocks)?;
    write_dump(w, Direction::Output, output_entry, output_blocks)
}

#[cfg(feature = "alloc")]
pub use parse::*;

#[cfg(feature = "alloc")]
mod parse {
    use alloc::vec::Vec;

    use super::Direction;
    use crate::Error;
    use crate::cmdq::{CMD_IF_TYPE_PCIE, CmdQueueEntry, ENTRY_SIZE, INLINE_SIZE};
    use crate::command::{check_status, input_header};
    use crate::layout::Layout;
    use crate::mailbox::{CmdIfBox, MAILBOX_BLOCK_SIZE, OutputChain};
    use crate::opcode::Opcode;
    use crate::registry::{self, CommandDecode};
    use crate::status::{CmdStatus, DeliveryStatus};

    /// Lines of hex per mailbox block (576 / 16).
    const LINES_PER_BLOCK: usize = MAILBOX_BLOCK_SIZE / 16;
    /// Lines of hex per queue entry (64 / 16).
    const LINES_PER_ENTRY: usize = ENTRY_SIZE / 16;

    /// What [`parse_with`] checks beyond the structure of the dump.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct ParseOptions {
        /// Check the INPUT entries' signature and every dumped block's
        /// signatures (as firmware does while `cmdif_checksum` is on).
        pub check_signatures: bool,
    }

    /// One side of a command as the dump shows it.
    #[derive(Clone, Debug)]
    pub struct Dump {
        /// 1-based line of the `dump command` header.
        pub line: usize,
        /// The queue entry.
        pub entry: CmdQueueEntry,
        /// The mailbox blocks dumped (possibly fewer than the length
        /// needs: Linux does not always dump them all).
        pub blocks: Vec<CmdIfBox>,
        /// The message: the 16 inline bytes and the data of the dumped
        /// blocks, at most `length` bytes.
        pub message: Vec<u8>,
        /// The length the entry announces (`input_length` or
        /// `output_length`).
        pub length: usize,
    }

    impl Dump {
        /// Whether the dump shows the whole message.
        pub fn is_complete(&self) -> bool {
            self.message.len() == self.length
        }

        /// Number of mailbox blocks the length needs.
        pub fn blocks_needed(&self) -> usize {
            crate::mailbox::blocks_for(self.length)
        }
    }

    /// One command of a trace: its input and, when dumped, its output.
    #[derive(Clone, Debug)]
    pub struct TraceCommand {
        /// The opcode, from the queue entry (not from the log text).
        pub opcode: Opcode,
        /// The op_mod, from the queue entry.
        pub op_mod: u16,
        /// The INPUT dump.
        pub input: Dump,
        /// The OUTPUT dump, if the trace has it.
        pub output: Option<Dump>,
    }

    impl TraceCommand {
        /// The command's layouts, from the registry.
        pub fn decode(&self) -> Result<CommandDecode, Error> {
            registry::lookup(&self.input.message)
        }

        /// The delivery status of the OUTPUT entry.
        pub fn delivery_status(&self) -> Option<DeliveryStatus> {
            self.output.as_ref().map(|o| o.entry.delivery_status())
        }

        /// The outcome: `Ok` if the firmware delivered and executed the
        /// command; [`Error::UnknownDeliveryStatus`], [`Error::Delivery`],
        /// [`Error::UnknownStatus`] or [`Error::Command`] otherwise, and
        /// [`Error::TraceSyntax`] if the trace has no OUTPUT for it.
        pub fn result(&self) -> Result<(), Error> {
            let out = self.output.as_ref().ok_or(Error::TraceSyntax {
                line: self.input.line,
                reason: "the command has no OUTPUT dump",
            })?;
            let ds = out.entry.delivery_status();
            if !ds.is_known() {
                return Err(Error::UnknownDeliveryStatus(ds.0));
            }
            if !ds.is_ok() {
                return Err(Error::Delivery(ds));
            }
            let status = CmdStatus(out.message.first().copied().unwrap_or(0));
            if !status.is_known() {
                return Err(Error::UnknownStatus(status.0));
            }
            check_status(&self.input.message, &out.message)
        }
    }

    /// Parses a Linux `mlx5_core` command dump without checking signatures.
    pub fn parse(text: &str) -> Result<Vec<TraceCommand>, Error> {
        parse_with(text, ParseOptions::default())
    }

    struct RawDump {
        line: usize,
        direction: Direction,
        header_opcode: u16,
        bytes: Vec<u8>,
        lines: usize,
        blocks: usize,
    }

    fn syntax(line: usize, reason: &'static str) -> Error {
        Error::TraceSyntax { line, reason }
    }

    /// The text after an optional `[timestamp]` prefix.
    fn strip_timestamp(line: &str) -> &str {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix('[') {
            if let Some(end) = rest.find(']') {
                return rest[end + 1..].trim_start();
            }
        }
        line.trim_start()
    }

    fn hex_u32(s: &str) -> Option<u32> {
        if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(s, 16).ok()
    }

    /// `Some(Ok((offset, 16 bytes)))` for a hex dump line, `Some(Err)` for a
    /// line that starts like one but is malformed, `None` for other text.
    fn hex_line(s: &str) -> Option<Result<(usize, [u8; 16]), &'static str>> {
        let colon = s.find(": ")?;
        let (off, rest) = (&s[..colon], &s[colon + 2..]);
        if off.len() < 3 || !off.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if !rest.as_bytes().first().is_some_and(u8::is_ascii_hexdigit) {
            return None;
        }
        let Ok(offset) = usize::from_str_radix(off, 16) else {
            return Some(Err("hex dump offset out of range"));
        };
        let mut out = [0u8; 16];
        let mut n = 0;
        for word in rest.split_ascii_whitespace() {
            if n == 4 {
                return Some(Err("hex dump line with more than four words"));
            }
            let Some(v) = hex_u32(word) else {
                return Some(Err("malformed hex dump word"));
            };
            out[4 * n..4 * n + 4].copy_from_slice(&v.to_be_bytes());
            n += 1;
        }
        if n != 4 {
            return Some(Err("hex dump line with fewer than four words"));
        }
        Some(Ok((offset, out)))
    }

    /// Parses `... dump command NAME(0xop) INPUT|OUTPUT`.
    fn header(s: &str, line: usize) -> Result<Option<(Direction, u16)>, Error> {
        let Some(pos) = s.find("dump command ") else {
            return Ok(None);
        };
        let rest = &s[pos + "dump command ".len()..];
        if rest.starts_with("data ") {
            return Err(syntax(line, "data-only command dumps are not supported"));
        }
        let (direction, head) = if let Some(h) = rest.strip_suffix(" INPUT") {
            (Direction::Input, h)
        } else if let Some(h) = rest.strip_suffix(" OUTPUT") {
            (Direction::Output, h)
        } else {
            return Err(syntax(line, "dump header without INPUT or OUTPUT"));
        };
        let open = head
            .rfind("(0x")
            .ok_or(syntax(line, "dump header without an opcode"))?;
        let close = head[open..]
            .find(')')
            .ok_or(syntax(line, "dump header without an opcode"))?;
        let hex = &head[open + 3..open + close];
        let op = if !hex.is_empty() && hex.len() <= 4 && hex.bytes().all(|b| b.is_ascii_hexdigit())
        {
            u16::from_str_radix(hex, 16).ok()
        } else {
            None
        };
        let op = op.ok_or(syntax(line, "malformed opcode in dump header"))?;
        Ok(Some((direction, op)))
    }

    impl RawDump {
        fn push_line(&mut self, line: usize, offset: usize, data: &[u8; 16]) -> Result<(), Error> {
            if offset != 16 * self.lines {
                return Err(syntax(line, "hex dump offset out of sequence"));
            }
            if self.lines >= LINES_PER_ENTRY
                && (self.lines - LINES_PER_ENTRY) / LINES_PER_BLOCK >= self.blocks
            {
                return Err(syntax(line, "mailbox data without a 'command block:' line"));
            }
            self.bytes.extend_from_slice(data);
            self.lines += 1;
            Ok(())
        }

        fn start_block(&mut self, line: usize) -> Result<(), Error> {
            if self.lines != LINES_PER_ENTRY + LINES_PER_BLOCK * self.blocks {
                return Err(syntax(
                    line,
                    "'command block:' before the entry or the previous block is complete",
                ));
            }
            self.blocks += 1;
            Ok(())
        }

        fn finish(self, options: ParseOptions) -> Result<(Direction, u16, Dump), Error> {
            let line = self.line;
            if self.lines < LINES_PER_ENTRY {
                return Err(syntax(line, "truncated command queue entry"));
            }
            if self.lines != LINES_PER_ENTRY + LINES_PER_BLOCK * self.blocks {
                return Err(syntax(line, "truncated mailbox block"));
            }
            let entry = CmdQueueEntry::decode(&self.bytes[..ENTRY_SIZE])?;
            let ty = entry.get(CmdQueueEntry::r#type);
            if ty != CMD_IF_TYPE_PCIE {
                return Err(Error::BadEntryType(ty));
            }
            let (length, mailbox, inline, what) = match self.direction {
                Direction::Input => (
                    entry.get(CmdQueueEntry::input_length),
                    entry.input_mailbox(),
                    entry.get(CmdQueueEntry::command_input_inline_data),
                    "input_length",
                ),
                Direction::Output => (
                    entry.get(CmdQueueEntry::output_length),
                    entry.output_mailbox(),
                    entry.get(CmdQueueEntry::command_output_inline_data),
                    "output_length",
                ),
            };
            let length = length as usize;
            if self.direction == Direction::Input {
                if length < 8 {
                    return Err(Error::BadLength {
                        what,
                        len: length,
                        reason: "shorter than the 8-byte command header",
                    });
                }
                if options.check_signatures {
                    entry.check_signature()?;
                }
            }
            if length > INLINE_SIZE && mailbox == 0 {
                return Err(Error::BadLength {
                    what,
                    len: length,
                    reason: "needs mailbox blocks but the mailbox pointer is 0",
                });
            }
            let token = entry.get(CmdQueueEntry::token);
            let mut message = Vec::new();
            message.extend_from_slice(&inline[..length.min(INLINE_SIZE)]);
            let mut chain = OutputChain::new(length, token, options.check_signatures);
            let need = chain.num_blocks();
            let mut blocks = Vec::with_capacity(self.blocks);
            for (i, raw) in self.bytes[ENTRY_SIZE..]
                .chunks_exact(MAILBOX_BLOCK_SIZE)
                .enumerate()
            {
                let block = CmdIfBox::decode(raw)?;
                message.extend_from_slice(chain.push(&block)?);
                if i + 1 < need && block.next_pointer() == 0 {
                    return Err(Error::ChainTooShort {
                        len: length,
                        need,
                        got: i + 1,
                    });
                }
                blocks.push(block);
            }
            Ok((
                self.direction,
                self.header_opcode,
                Dump {
                    line,
                    entry,
                    blocks,
                    message,
                    length,
                },
            ))
        }
    }

    /// The entry bytes an OUTPUT dump must share with its INPUT: everything
    /// but the output inline data and the last dword (signature, status and
    /// ownership change when the firmware answers), and the token.
    fn same_command(a: &CmdQueueEntry, b: &CmdQueueEntry) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        a[..0x20] == b[..0x20] && a[0x30..0x3d] == b[0x30..0x3d]
    }

    /// Parses a Linux `mlx5_core` command dump (see the module
    /// documentation) into its commands, in the order of their INPUT dumps.
    ///
    /// Errors: [`Error::TraceSyntax`] for text that is not such a dump (no
    /// dump at all, a dump cut short, hex lines out of sequence, an OUTPUT
    /// without its INPUT, a header whose opcode differs from the entry's);
    /// the mailbox errors ([`Error::BadBlockNumber`], [`Error::BadToken`],
    /// [`Error::BadSignature`], [`Error::BadLength`],
    /// [`Error::ChainTooShort`]) and [`Error::BadEntryType`] for entries
    /// and chains that contradict each other.
    pub fn parse_with(text: &str, options: ParseOptions) -> Result<Vec<TraceCommand>, Error> {
        let mut commands: Vec<TraceCommand> = Vec::new();
        let mut pending: Vec<usize> = Vec::new();
        let mut current: Option<RawDump> = None;
        let mut seen_dump = false;

        let finish = |raw: RawDump,
                      commands: &mut Vec<TraceCommand>,
                      pending: &mut Vec<usize>|
         -> Result<(), Error> {
            let (direction, header_opcode, dump) = raw.finish(options)?;
            let (opcode, op_mod) = {
                let inline = dump.entry.get(CmdQueueEntry::command_input_inline_data);
                input_header(&inline)?
            };
            if opcode.0 != header_opcode {
                return Err(syntax(
                    dump.line,
                    "the dump header's opcode differs from the entry's",
                ));
            }
            match direction {
                Direction::Input => {
                    pending.push(commands.len());
                    commands.push(TraceCommand {
                        opcode,
                        op_mod,
                        input: dump,
                        output: None,
                    });
                }
                Direction::Output => {
                    let token = dump.entry.get(CmdQueueEntry::token);
                    let pos = pending
                        .iter()
                        .position(|&i| commands[i].input.entry.get(CmdQueueEntry::token) == token)
                        .ok_or(syntax(
                            dump.line,
                            "OUTPUT dump without a pending INPUT of the same token",
                        ))?;
                    let idx = pending.remove(pos);
                    if !same_command(&commands[idx].input.entry, &dump.entry) {
                        return Err(syntax(
                            dump.line,
                            "OUTPUT entry does not match its INPUT entry",
                        ));
                    }
                    commands[idx].output = Some(dump);
                }
            }
            Ok(())
        };

        for (i, raw_line) in text.lines().enumerate() {
            let line = i + 1;
            let s = strip_timestamp(raw_line);
            if let Some((direction, header_opcode)) = header(s, line)? {
                if let Some(d) = current.take() {
                    finish(d, &mut commands, &mut pending)?;
                }
                seen_dump = true;
                current = Some(RawDump {
                    line,
                    direction,
                    header_opcode,
                    bytes: Vec::new(),
                    lines: 0,
                    blocks: 0,
                });
            } else if s.ends_with("command block:") {
                current
                    .as_mut()
                    .ok_or(syntax(line, "'command block:' outside a command dump"))?
                    .start_block(line)?;
            } else if let Some(h) = hex_line(s) {
                let (offset, data) = h.map_err(|reason| syntax(line, reason))?;
                current
                    .as_mut()
                    .ok_or(syntax(line, "hex dump line outside a command dump"))?
                    .push_line(line, offset, &data)?;
            }
        }
        if let Some(d) = current.take() {
            finish(d, &mut commands, &mut pending)?;
        }
        if !seen_dump {
            return Err(syntax(1, "no command dump found"));
        }
        Ok(commands)
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    extern crate alloc;
    extern crate std;
    use alloc::string::String;
    use alloc::vec::Vec;

    use super::*;
    use crate::Error;
    use crate::command::{Encode, WithArray};
    use crate::hca::ManagePagesIn;
    use crate::mailbox::InputChain;

    fn exchange(pages: &[u64], token: u8, signed: bool) -> (String, Vec<u8>) {
        let head = ManagePagesIn::new()
            .with(ManagePagesIn::op_mod, 1)
            .unwrap()
            .with(ManagePagesIn::input_num_entries, pages.len() as u32)
            .unwrap();
        let msg = WithArray::new(&head, pages);
        let chain = InputChain::new(&msg, token, signed);
        let mut blocks = Vec::new();
        for i in 0..chain.num_blocks() {
            let next = if i + 1 < chain.num_blocks() {
                0x1000 * (i as u64 + 2)
            } else {
                0
            };
            blocks.push(chain.block(i, next).unwrap());
        }
        let mb = if blocks.is_empty() { 0 } else { 0x1000 };
        let e =
            CmdQueueEntry::build(&chain.inline(), chain.len() as u32, mb, 0x10, 0, token).unwrap();
        let mut out = e.clone();
        out.set(CmdQueueEntry::ownership, false).unwrap();
        let mut s = String::new();
        write_exchange(&mut s, &e, &blocks, &out, &[]).unwrap();
        let mut bytes = alloc::vec![0u8; msg.encoded_len()];
        msg.encode_range(0, &mut bytes);
        (s, bytes)
    }

    #[test]
    fn written_dumps_parse_back() {
        let pages: Vec<u64> = (0..100).map(|i| 0x7_0000_0000 + 0x1000 * i).collect();
        for signed in [false, true] {
            let (text, bytes) = exchange(&pages, 0x2a, signed);
            let cmds = parse_with(
                &text,
                ParseOptions {
                    check_signatures: signed,
                },
            )
            .unwrap();
            assert_eq!(cmds.len(), 1);
            let c = &cmds[0];
            assert_eq!(c.opcode, Opcode::MANAGE_PAGES);
            assert_eq!(c.op_mod, 1);
            assert!(c.input.is_complete());
            assert_eq!(c.input.message, bytes);
            assert_eq!(c.input.blocks.len(), 2);
            c.result().unwrap();
        }
    }

    #[test]
    fn blocks_written_one_at_a_time_match_the_whole_dump() {
        let pages: Vec<u64> = (0..150).map(|i| 0x9_0000_0000 + 0x1000 * i).collect();
        let (whole, _) = exchange(&pages, 7, true);
        // The same INPUT side, entry first, then each block on its own.
        let cmds = parse(&whole).unwrap();
        let input = &cmds[0].input;
        assert_eq!(input.blocks.len(), 3);
        let mut piecewise = String::new();
        write_dump(&mut piecewise, Direction::Input, &input.entry, &[]).unwrap();
        for (i, b) in input.blocks.iter().enumerate() {
            write_block(&mut piecewise, i, b).unwrap();
        }
        assert!(whole.starts_with(&piecewise), "{piecewise}");
        // Block 2 starts at 0x40 + 2 * 0x240.
        assert!(piecewise.contains("command block:\n4c0: "));
        assert_eq!(
            piecewise.matches("command block:\n").count(),
            input.blocks.len()
        );
    }

    #[test]
    fn structural_errors_name_the_line() {
        let (text, _) = exchange(&[0x1000; 70], 3, false);
        let lines: Vec<&str> = text.lines().collect();
        // Drop one line of the second block.
        let mut cut = lines.clone();
        cut.remove(10 + 37);
        let cut = cut.join("\n");
        assert!(matches!(parse(&cut), Err(Error::TraceSyntax { .. })));
        // Wrong offset.
        let bad = text.replacen("010: ", "020: ", 1);
        assert_eq!(
            parse(&bad).unwrap_err(),
            Error::TraceSyntax {
                line: 3,
                reason: "hex dump offset out of sequence"
            }
        );
        assert!(matches!(
            parse("hello\nworld\n"),
            Err(Error::TraceSyntax { line: 1, .. })
        ));
        assert!(matches!(
            parse("000: 07000000 00000010 00000000 00000000"),
            Err(Error::TraceSyntax { line: 1, .. })
        ));
    }
}
