//! The command queue entry (`cmd_queue_entry`, 64 bytes).
//!
//! The driver writes an entry into a slot of the command queue page, sets the
//! ownership bit last, and rings the command doorbell with the slot's bit; the
//! firmware executes the command, writes the first 16 output bytes into the
//! entry (the rest into the output mailbox chain), sets the delivery status and
//! clears the ownership bit.

use bitfield_struct::bitfield;

use crate::Error;
use crate::endian::Be32;
use crate::status::DeliveryStatus;

/// `type` of every entry: the PCIe command interface.
pub const CMD_IF_TYPE_PCIE: u8 = 0x07;
/// Size of one entry.
pub const ENTRY_SIZE: usize = 64;
/// Bytes of the input and of the output that travel inline in the entry.
pub const INLINE_SIZE: usize = 16;
/// Most slots a command queue can have (`1 << log_cmdq_size`, at most 32).
pub const MAX_SLOTS: usize = 32;
/// Byte offset of the last dword (token, signature, status, ownership).
pub const STATUS_WORD_OFFSET: usize = 0x3c;
/// Mailbox pointers in the entry leave bits 8:0 reserved.
pub const ENTRY_MAILBOX_ALIGN: u64 = 1 << 9;

crate::prm_struct! {
    /// A command-queue entry (`cmd_queue_entry`).
    pub struct CmdQueueEntry("cmd_queue_entry", 64) {
        /// Always [`CMD_IF_TYPE_PCIE`].
        r#type: u8 = 0x00[31:24],
        /// Length of the whole input in bytes (inline 16 + mailbox data).
        input_length: u32 = 0x04[31:0],
        /// Input mailbox pointer, high half.
        input_mailbox_pointer_63_32: u32 = 0x08[31:0],
        /// Input mailbox pointer, bits 31:9.
        input_mailbox_pointer_31_9: u32 = 0x0c[31:9],
        /// The first 16 bytes of the input.
        command_input_inline_data: [u8; 16] = 0x10,
        /// The first 16 bytes of the output, written by firmware.
        command_output_inline_data: [u8; 16] = 0x20,
        /// Output mailbox pointer, high half.
        output_mailbox_pointer_63_32: u32 = 0x30[31:0],
        /// Output mailbox pointer, bits 31:9.
        output_mailbox_pointer_31_9: u32 = 0x34[31:9],
        /// Length of the whole output in bytes.
        output_length: u32 = 0x38[31:0],
        /// Token; the mailbox blocks of this command carry the same one.
        token: u8 = 0x3c[31:24],
        /// Makes the XOR of the 64 entry bytes 0xff.
        signature: u8 = 0x3c[23:16],
        /// Delivery status, written by firmware.
        status: u8 = 0x3c[7:1],
        /// 1 while the firmware owns the entry.
        ownership: bool = 0x3c[0:0],
    }
}

/// The last dword of an entry, which the driver polls for ownership: one
/// aligned big-endian word read with a single load.
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct EntryStatusWord {
    /// Token of the command.
    pub token: u8,
    /// Entry signature.
    pub signature: u8,
    #[bits(8)]
    __: u8,
    /// Delivery status.
    #[bits(7)]
    pub status: u8,
    /// 1 while the firmware owns the entry.
    pub ownership: bool,
}

/// XOR of all bytes.
pub fn xor8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |a, &b| a ^ b)
}

impl CmdQueueEntry {
    /// An entry handing a command to firmware: type 7, the inline input, the
    /// lengths and mailbox pointers, the token, ownership set and the
    /// signature computed over the whole entry (including the ownership bit,
    /// as Linux does).
    ///
    /// Mailbox pointers must be 512-byte aligned (0 when there is no chain).
    pub fn build(
        input_inline: &[u8; INLINE_SIZE],
        input_length: u32,
        input_mailbox: u64,
        output_length: u32,
        output_mailbox: u64,
        token: u8,
    ) -> Result<Self, Error> {
        let mut e = Self::new();
        e.set(Self::r#type, CMD_IF_TYPE_PCIE)?
            .set(Self::input_length, input_length)?
            .set(Self::command_input_inline_data, *input_inline)?
            .set(Self::output_length, output_length)?
            .set(Self::token, token)?
            .set(Self::ownership, true)?;
        e.set_input_mailbox(input_mailbox)?;
        e.set_output_mailbox(output_mailbox)?;
        e.sign();
        Ok(e)
    }

    /// The input mailbox pointer.
    pub fn input_mailbox(&self) -> u64 {
        (u64::from(self.get(Self::input_mailbox_pointer_63_32)) << 32)
            | (u64::from(self.get(Self::input_mailbox_pointer_31_9)) << 9)
    }

    /// The output mailbox pointer.
    pub fn output_mailbox(&self) -> u64 {
        (u64::from(self.get(Self::output_mailbox_pointer_63_32)) << 32)
            | (u64::from(self.get(Self::output_mailbox_pointer_31_9)) << 9)
    }

    /// Sets the input mailbox pointer (512-byte aligned).
    pub fn set_input_mailbox(&mut self, addr: u64) -> Result<&mut Self, Error> {
        check_align("input mailbox pointer", addr, ENTRY_MAILBOX_ALIGN)?;
        self.set(Self::input_mailbox_pointer_63_32, (addr >> 32) as u32)?
            .set(
                Self::input_mailbox_pointer_31_9,
                ((addr & 0xffff_ffff) >> 9) as u32,
            )
    }

    /// Sets the output mailbox pointer (512-byte aligned).
    pub fn set_output_mailbox(&mut self, addr: u64) -> Result<&mut Self, Error> {
        check_align("output mailbox pointer", addr, ENTRY_MAILBOX_ALIGN)?;
        self.set(Self::output_mailbox_pointer_63_32, (addr >> 32) as u32)?
            .set(
                Self::output_mailbox_pointer_31_9,
                ((addr & 0xffff_ffff) >> 9) as u32,
            )
    }

    /// Recomputes `signature` so that the XOR of all 64 bytes is 0xff.
    pub fn sign(&mut self) {
        self.0[0x3d] = 0;
        self.0[0x3d] = !xor8(&self.0);
    }

    /// Checks the entry signature.
    pub fn check_signature(&self) -> Result<(), Error> {
        match xor8(&self.0) {
            0xff => Ok(()),
            xor => Err(Error::BadSignature {
                what: "command queue entry",
                which: "signature",
                xor,
            }),
        }
    }

    /// The delivery status written by firmware.
    pub fn delivery_status(&self) -> DeliveryStatus {
        DeliveryStatus(self.get(Self::status))
    }

    /// Whether the firmware still owns the entry.
    pub fn owned_by_firmware(&self) -> bool {
        self.get(Self::ownership)
    }

    /// The last dword as the polled status word.
    pub fn status_word(&self) -> EntryStatusWord {
        let w = &self.0[STATUS_WORD_OFFSET..];
        EntryStatusWord::from_bits(Be32::from_bytes([w[0], w[1], w[2], w[3]]))
    }
}

pub(crate) fn check_align(what: &'static str, addr: u64, align: u64) -> Result<(), Error> {
    if addr % align == 0 {
        Ok(())
    } else {
        Err(Error::MisalignedPointer { what, addr, align })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(e: &CmdQueueEntry) -> [u32; 16] {
        let mut w = [0u32; 16];
        for (i, c) in e.as_bytes().chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        w
    }

    #[test]
    fn enable_hca_entry_matches_the_real_trace() {
        // 000: 07000000 00000010 00000000 00000000
        // 010: 01040000 00000000 00000000 00000000
        // 030: 00000000 00000000 00000010 01fd0001
        let mut inline = [0u8; 16];
        inline[..2].copy_from_slice(&[0x01, 0x04]);
        let e = CmdQueueEntry::build(&inline, 0x10, 0, 0x10, 0, 0x01).unwrap();
        let w = words(&e);
        assert_eq!(w[0], 0x0700_0000);
        assert_eq!(w[1], 0x10);
        assert_eq!(w[4], 0x0104_0000);
        assert_eq!(w[14], 0x10);
        assert_eq!(w[15], 0x01fd_0001);
        e.check_signature().unwrap();
        let sw = e.status_word();
        assert_eq!(
            (sw.token(), sw.signature(), sw.status(), sw.ownership()),
            (1, 0xfd, 0, true)
        );
    }

    #[test]
    fn manage_pages_entry_with_mailboxes_matches_the_real_trace() {
        // 000: 07000000 00019230 00000007 ab0e7800
        // 010: 01080000 00000001 00000000 00003244
        // 030: 00000000 00000000 00000010 0be50001
        let inline = [1, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x32, 0x44];
        let e = CmdQueueEntry::build(&inline, 0x19230, 0x7_ab0e_7800, 0x10, 0, 0x0b).unwrap();
        assert_eq!(words(&e)[15], 0x0be5_0001);
        assert_eq!(e.input_mailbox(), 0x7_ab0e_7800);
    }

    #[test]
    fn misaligned_mailbox_is_refused() {
        assert!(matches!(
            CmdQueueEntry::build(&[0; 16], 0x20, 0x1100, 0x10, 0, 1),
            Err(Error::MisalignedPointer { .. })
        ));
    }

    #[test]
    fn corrupted_signature_is_detected() {
        let mut e = CmdQueueEntry::build(&[0; 16], 0x10, 0, 0x10, 0, 1).unwrap();
        e.set(CmdQueueEntry::output_length, 0x20).unwrap();
        assert!(e.check_signature().is_err());
    }
}
