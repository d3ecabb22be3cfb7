//! User memory (UMEM): CREATE_UMEM (0xa08) and DESTROY_UMEM (0xa0a), and
//! queues whose buffer or doorbell record lives in one (DevX under VFIO:
//! `cq_umem_valid`, `wq_umem_valid`, `dbr_umem_valid`).
//!
//! A UMEM is a list of MTT entries (`mtt.ptag` with `wr_en`/`rd_en`) of
//! pages of `4 KiB << umem.log_page_size`, starting `page_offset` bytes into
//! the first page. Byte `x` of the UMEM is at `mtt[(page_offset + x) >>
//! page_shift] + ((page_offset + x) & (page_size - 1))`. A queue created on
//! a UMEM takes its buffer from `*_umem_offset` on; the emulator resolves it
//! once, at creation, into the 4 KiB page list the data path uses (the
//! UMEM cannot be destroyed while a queue uses it). A doorbell record on a
//! UMEM is named by its byte offset in `dbr_addr`.
//!
//! Rules (syndromes in [`crate::syndrome`]): the firmware needs
//! `umem_uid_0` (a ConnectX-4 14.12 firmware has no UMEM command: bad
//! operation); `num_of_mtt` at least 1 and the input long enough for it;
//! `page_offset` inside the first page; every MTT entry aligned to the page
//! size and readable (`rd_en`); a CQ's buffer on a writable UMEM
//! (`wr_en` in every entry); a queue's range inside the UMEM and its
//! start 4 KiB aligned; a doorbell record inside the UMEM and 8-byte
//! aligned.

use super::objects::{ObjData, ObjKind};
use super::{Cmd, Fail, R, fail, st};
use crate::device::Device;
use crate::ifc::ifc;
use crate::syndrome as syn;

/// Most MTT entries one UMEM takes (assumption: a bound so that a bad
/// count cannot make the emulator allocate without limit; mlx5_vfio sends
/// one entry, Linux one per page).
pub(crate) const MAX_MTT: u64 = 1 << 20;

/// A registered user memory.
#[derive(Clone, Debug)]
pub struct Umem {
    /// Offset of byte 0 in the first page.
    pub page_offset: u64,
    /// log2 of the page size in bytes (12 + `umem.log_page_size`).
    pub page_shift: u8,
    /// Page addresses (IOVAs), flags stripped.
    pub mtt: Vec<u64>,
    /// Whether the pages are writable by the device (`wr_en`).
    pub writable: bool,
}

impl Umem {
    /// Bytes the UMEM covers.
    pub fn len(&self) -> u64 {
        ((self.mtt.len() as u64) << self.page_shift).saturating_sub(self.page_offset)
    }

    /// Whether the UMEM covers no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// IOVA of byte `off`.
    pub fn iova(&self, off: u64) -> Option<u64> {
        if off >= self.len() {
            return None;
        }
        let x = self.page_offset + off;
        let page = usize::try_from(x >> self.page_shift).ok()?;
        Some(self.mtt.get(page)? + (x & ((1u64 << self.page_shift) - 1)))
    }

    /// The 4 KiB pages of `bytes` bytes from `off` (which must map to a
    /// 4 KiB aligned address).
    pub(crate) fn pages_4k(&self, off: u64, bytes: u64) -> Result<Vec<u64>, Fail> {
        let end = off.checked_add(bytes).ok_or(Fail {
            status: st::BAD_PARAM,
            syndrome: syn::UMEM_RANGE,
        })?;
        if bytes == 0 || end > self.len() {
            return fail(st::BAD_PARAM, syn::UMEM_RANGE);
        }
        if (self.page_offset + off) % 4096 != 0 {
            return fail(st::BAD_PARAM, syn::UMEM_OFFSET_MISALIGNED);
        }
        (0..bytes.div_ceil(4096))
            .map(|i| {
                self.iova(off + i * 4096).ok_or(Fail {
                    status: st::BAD_PARAM,
                    syndrome: syn::UMEM_RANGE,
                })
            })
            .collect()
    }
}

pub(crate) fn create_umem(d: &mut Device, c: &Cmd) -> R {
    if !d.fw.caps.umem_uid_0() {
        return fail(st::BAD_OP, syn::BAD_OPCODE);
    }
    let n = c.get("umem.num_of_mtt");
    if n == 0 || n > MAX_MTT {
        return fail(st::BAD_PARAM, syn::UMEM_NUM_MTT);
    }
    let page_shift = 12 + c.get("umem.log_page_size");
    if page_shift > 43 {
        return fail(st::BAD_PARAM, syn::BAD_PAGE_SIZE);
    }
    let page_offset = c.get("umem.page_offset");
    if page_offset >= 1 << page_shift {
        return fail(st::BAD_PARAM, syn::UMEM_PAGE_OFFSET);
    }
    let off = ifc().field(c.lin, "umem").byte_offset() + ifc().size("umem");
    let n = n as usize;
    if c.input.len() < off + 8 * n {
        return fail(st::BAD_INP_LEN, syn::UMEM_MTT_SHORT);
    }
    let mut mtt = Vec::with_capacity(n);
    let mut writable = true;
    for i in 0..n {
        let mut b = [0u8; 8];
        b.copy_from_slice(&c.input[off + 8 * i..off + 8 * i + 8]);
        let e = u64::from_be_bytes(b);
        let addr = e & !0xff;
        if addr % (1u64 << page_shift) != 0 {
            return fail(st::BAD_PARAM, syn::UMEM_MTT_MISALIGNED);
        }
        if e & 1 == 0 {
            return fail(st::BAD_PARAM, syn::UMEM_MTT_NOT_READABLE);
        }
        writable &= e & 2 != 0;
        mtt.push(addr);
    }
    let u = Umem {
        page_offset,
        page_shift: page_shift as u8,
        mtt,
        writable,
    };
    let id = d.fw.objs.create(ObjKind::Umem, ObjData::Umem(u), vec![])?;
    c.out().set("umem_id", u64::from(id)).done()
}

pub(crate) fn destroy_umem(d: &mut Device, c: &Cmd) -> R {
    super::cmds::simple_destroy(d, c, ObjKind::Umem, "umem_id")
}

impl Device {
    /// The 4 KiB pages of a queue buffer of `bytes` bytes at `offset` of
    /// UMEM `id`; `device_writes`: the device writes the buffer (a CQ),
    /// so the UMEM must have been registered writable (`wr_en`).
    pub(crate) fn umem_pages(
        &self,
        id: u32,
        offset: u64,
        bytes: u64,
        device_writes: bool,
    ) -> Result<Vec<u64>, Fail> {
        let Some(u) = self.fw.objs.umem(id) else {
            return fail(st::BAD_RES, syn::UMEM_BAD_ID);
        };
        if device_writes && !u.writable {
            return fail(st::BAD_PARAM, syn::UMEM_NOT_WRITABLE);
        }
        u.pages_4k(offset, bytes)
    }

    /// The IOVA of a doorbell record at byte `offset` of UMEM `id`.
    pub(crate) fn umem_dbr(&self, id: u32, offset: u64) -> Result<u64, Fail> {
        let Some(u) = self.fw.objs.umem(id) else {
            return fail(st::BAD_RES, syn::UMEM_BAD_ID);
        };
        if offset % 8 != 0 {
            return fail(st::BAD_PARAM, syn::DBR_MISALIGNED);
        }
        match (
            u.iova(offset),
            offset.checked_add(7).and_then(|e| u.iova(e)),
        ) {
            (Some(a), Some(b)) if b == a + 7 => Ok(a),
            _ => fail(st::BAD_PARAM, syn::UMEM_RANGE),
        }
    }
}
