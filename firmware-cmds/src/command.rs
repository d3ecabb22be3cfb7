//! The command abstraction: typed inputs with their opcode and output type,
//! and the encoding of inputs that end in a flexible array.

use crate::Error;
use crate::layout::{Layout, read_bits};
use crate::opcode::Opcode;
use crate::status::{CmdError, CmdStatus};

/// A command input layout (`*_in`): it knows its opcode and the layout of its
/// output (`*_out`).
///
/// Every input starts with `opcode` (bits 31:16 of dword 0) and `op_mod`
/// (bits 15:0 of dword 1); every output with `status` (byte 0) and
/// `syndrome` (dword 1).
pub trait Command: Layout {
    /// The opcode written by `new()`.
    const OPCODE: Opcode;
    /// The output layout.
    type Output: Layout;

    /// The op_mod of this input.
    fn op_mod(&self) -> u16 {
        read_bits(self.bytes(), 48, 16) as u16
    }
}

/// Reads the opcode and op_mod of any command input image (at least 8 bytes).
pub fn input_header(input: &[u8]) -> Result<(Opcode, u16), Error> {
    if input.len() < 8 {
        return Err(Error::Truncated {
            what: "command input header",
            need: 8,
            got: input.len(),
        });
    }
    Ok((
        Opcode(read_bits(input, 0, 16) as u16),
        read_bits(input, 48, 16) as u16,
    ))
}

/// Reads status and syndrome of any command output image (at least 8 bytes).
pub fn output_header(output: &[u8]) -> Result<(CmdStatus, u32), Error> {
    if output.len() < 8 {
        return Err(Error::Truncated {
            what: "command output header",
            need: 8,
            got: output.len(),
        });
    }
    Ok((CmdStatus(output[0]), read_bits(output, 32, 32) as u32))
}

/// Checks the status of a command output: `Ok` for status OK, otherwise the
/// [`CmdError`] carrying the opcode and op_mod of `input`.
pub fn check_status(input: &[u8], output: &[u8]) -> Result<(), Error> {
    let (opcode, op_mod) = input_header(input)?;
    let (status, syndrome) = output_header(output)?;
    if status.is_ok() {
        Ok(())
    } else {
        Err(Error::Command(CmdError {
            opcode,
            op_mod,
            status,
            syndrome,
        }))
    }
}

/// A command message that can be written out piecewise: into the 16 inline
/// bytes of the queue entry and then 512 bytes per mailbox block, without
/// building the whole message in memory first.
pub trait Encode {
    /// Length of the whole message in bytes.
    fn encoded_len(&self) -> usize;
    /// Writes bytes `offset .. offset + dst.len()` of the message into `dst`.
    /// Bytes past the end of the message are written as zero.
    fn encode_range(&self, offset: usize, dst: &mut [u8]);
}

impl<L: Layout> Encode for L {
    fn encoded_len(&self) -> usize {
        L::SIZE
    }
    fn encode_range(&self, offset: usize, dst: &mut [u8]) {
        copy_range(self.bytes(), offset, dst);
    }
}

/// A raw message.
impl Encode for [u8] {
    fn encoded_len(&self) -> usize {
        self.len()
    }
    fn encode_range(&self, offset: usize, dst: &mut [u8]) {
        copy_range(self, offset, dst);
    }
}

fn copy_range(src: &[u8], offset: usize, dst: &mut [u8]) {
    let avail = src.len().saturating_sub(offset);
    let n = avail.min(dst.len());
    if n > 0 {
        dst[..n].copy_from_slice(&src[offset..offset + n]);
    }
    dst[n..].fill(0);
}

/// An element of a flexible array at the end of a command (page addresses,
/// MTT entries, RQ numbers), stored big-endian.
pub trait ArrayItem: Copy + 'static {
    /// Size of one element in bytes.
    const SIZE: usize;
    /// Byte `i` (`0..SIZE`) of the element in memory order.
    fn byte(self, i: usize) -> u8;
    /// Reads an element from exactly `SIZE` bytes.
    fn from_be(bytes: &[u8]) -> Self;
}

impl ArrayItem for u64 {
    const SIZE: usize = 8;
    fn byte(self, i: usize) -> u8 {
        self.to_be_bytes()[i]
    }
    fn from_be(b: &[u8]) -> Self {
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

impl ArrayItem for u32 {
    const SIZE: usize = 4;
    fn byte(self, i: usize) -> u8 {
        self.to_be_bytes()[i]
    }
    fn from_be(b: &[u8]) -> Self {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// A byte image of a fixed size: a 16-byte GID, the 8-byte image of a flow
/// destination (`dest_format_struct`), copied as is.
impl<const N: usize> ArrayItem for [u8; N] {
    const SIZE: usize = N;
    fn byte(self, i: usize) -> u8 {
        self[i]
    }
    fn from_be(b: &[u8]) -> Self {
        let mut out = [0u8; N];
        out.copy_from_slice(&b[..N]);
        out
    }
}

/// A fixed layout followed by a flexible array: `CREATE_CQ` with its page
/// list, `MANAGE_PAGES` with the pages it gives.
#[derive(Clone, Copy, Debug)]
pub struct WithArray<'a, H, T> {
    /// The fixed part.
    pub head: &'a H,
    /// The array after it.
    pub items: &'a [T],
}

impl<'a, H: Layout, T: ArrayItem> WithArray<'a, H, T> {
    /// `head` followed by `items`.
    pub fn new(head: &'a H, items: &'a [T]) -> Self {
        Self { head, items }
    }
}

impl<H: Layout, T: ArrayItem> Encode for WithArray<'_, H, T> {
    fn encoded_len(&self) -> usize {
        H::SIZE + self.items.len() * T::SIZE
    }
    fn encode_range(&self, offset: usize, dst: &mut [u8]) {
        let head = self.head.bytes();
        for (i, d) in dst.iter_mut().enumerate() {
            let pos = offset + i;
            *d = if pos < head.len() {
                head[pos]
            } else {
                let k = pos - head.len();
                match self.items.get(k / T::SIZE) {
                    Some(item) => item.byte(k % T::SIZE),
                    None => 0,
                }
            };
        }
    }
}

/// The `count` big-endian elements of a flexible array that starts at byte
/// `start` of `image`, or [`Error::Truncated`] if the image does not hold them.
pub fn read_array<T: ArrayItem>(
    image: &[u8],
    start: usize,
    count: usize,
) -> Result<impl ExactSizeIterator<Item = T> + '_, Error> {
    let need = count
        .checked_mul(T::SIZE)
        .and_then(|n| n.checked_add(start));
    match need {
        Some(need) if need <= image.len() => {
            Ok(image[start..need].chunks_exact(T::SIZE).map(T::from_be))
        }
        _ => Err(Error::Truncated {
            what: "flexible array",
            need: need.unwrap_or(usize::MAX),
            got: image.len(),
        }),
    }
}

#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use super::*;

    crate::prm_struct! {
        /// Test header.
        pub struct Head("head", 0x10) {
            /// n.
            n: u32 = 0x0c[31:0],
        }
    }

    #[test]
    fn with_array_encodes_any_range() {
        let h = Head::new().with(Head::n, 2).unwrap();
        let items = [0x1122_3344_5566_7788u64, 0x99aa_bbcc_ddee_ff00];
        let m = WithArray::new(&h, &items);
        assert_eq!(m.encoded_len(), 0x20);
        let mut all = [0xa5u8; 0x24];
        m.encode_range(0, &mut all);
        assert_eq!(&all[0x0c..0x10], &[0, 0, 0, 2]);
        assert_eq!(&all[0x10..0x18], &items[0].to_be_bytes());
        assert_eq!(&all[0x18..0x20], &items[1].to_be_bytes());
        assert_eq!(&all[0x20..], &[0, 0, 0, 0], "past the end is zero");
        let mut part = [0u8; 5];
        m.encode_range(0x0e, &mut part);
        assert_eq!(part, [0, 2, 0x11, 0x22, 0x33]);
    }

    #[test]
    fn read_array_checks_bounds() {
        let img = [0u8, 0, 0, 1, 0, 0, 0, 2, 9];
        let v: heapless::Vec<u32, 4> = read_array::<u32>(&img, 1, 2).unwrap().collect();
        assert_eq!(v.as_slice(), &[0x100, 0x209]);
        assert!(read_array::<u32>(&img, 2, 2).is_err());
        assert!(read_array::<u64>(&img, 0, usize::MAX).is_err());
    }

    #[test]
    fn headers() {
        let mut input = [0u8; 16];
        input[0] = 0x05;
        input[7] = 0x03;
        assert_eq!(input_header(&input).unwrap(), (Opcode::CREATE_QP, 3));
        let out = [3u8, 0, 0, 0, 0, 0, 1, 2];
        match check_status(&input, &out) {
            Err(Error::Command(e)) => {
                assert_eq!((e.status, e.syndrome), (CmdStatus::BAD_PARAM, 0x102))
            }
            other => panic!("{other:?}"),
        }
        assert!(input_header(&input[..7]).is_err());
    }
}
