//! Memory keys: lkey/rkey checks (the key exists and its variant byte
//! matches, the PD is the queue's, the access right is granted, the range
//! is inside the key's `start_addr .. start_addr + len`) and translation to
//! IOVA chunks (PA mode: the address is the IOVA; MTT mode: pages from the
//! translation table). Data moves with bulk IOMMU reads and writes, one per
//! contiguous chunk.

use crate::fw::{Mkey, Objects};
use crate::iommu::Iommu;

/// `resd_lkey` of QUERY_SPECIAL_CONTEXTS: local access to IOVAs without
/// translation and without a PD.
pub(crate) const RESD_LKEY: u32 = crate::fw::RESD_LKEY;

/// The right an access needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Gather (send data, RDMA WRITE source): `lr`.
    LocalRead,
    /// Scatter (receive, RDMA READ and atomic response destinations): `lw`.
    LocalWrite,
    /// Remote RDMA READ: `rr`.
    RemoteRead,
    /// Remote RDMA WRITE: `rw`.
    RemoteWrite,
    /// Remote atomic: `a`.
    Atomic,
}

/// Why a key check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No such key (or its variant byte differs).
    NoKey,
    /// The key belongs to another protection domain.
    Pd,
    /// The key does not grant the access.
    Rights,
    /// The range is outside the key.
    Bounds,
    /// The translation table does not cover the range.
    Translation,
}

impl core::fmt::Display for KeyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            KeyError::NoKey => "no such memory key",
            KeyError::Pd => "memory key of another protection domain",
            KeyError::Rights => "memory key lacks the access right",
            KeyError::Bounds => "range outside the memory key",
            KeyError::Translation => "range outside the key's translation table",
        })
    }
}

fn lookup(objs: &Objects, key: u32) -> Option<&Mkey> {
    objs.mkey(key >> 8).filter(|m| m.key == key)
}

/// Checks `key` for `len` bytes at `addr` and appends the IOVA chunks to
/// `out`. A zero length checks nothing (IBA: zero-length accesses do not
/// validate the key).
pub(crate) fn translate(
    objs: &Objects,
    key: u32,
    pd: u32,
    addr: u64,
    len: u64,
    acc: Access,
    out: &mut Vec<(u64, usize)>,
) -> Result<(), KeyError> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(KeyError::Bounds)?;
    if key == RESD_LKEY && matches!(acc, Access::LocalRead | Access::LocalWrite) {
        push_chunk(out, addr, len)?;
        return Ok(());
    }
    let m = lookup(objs, key).ok_or(KeyError::NoKey)?;
    if m.pd != pd {
        return Err(KeyError::Pd);
    }
    let ok = match acc {
        Access::LocalRead => m.lr,
        Access::LocalWrite => m.lw,
        Access::RemoteRead => m.rr,
        Access::RemoteWrite => m.rw,
        Access::Atomic => m.a,
    };
    if !ok {
        return Err(KeyError::Rights);
    }
    let kend = m.start.saturating_add(m.len);
    if addr < m.start || end > kend {
        return Err(KeyError::Bounds);
    }
    match m.access_mode {
        0 => push_chunk(out, addr, len),
        _ => {
            let shift = u32::from(m.log_page_size.clamp(12, 63));
            let ps = 1u64 << shift;
            let base = m.start & !(ps - 1);
            let mut a = addr;
            while a < end {
                let page =
                    usize::try_from((a - base) >> shift).map_err(|_| KeyError::Translation)?;
                let pa = *m.mtt.get(page).ok_or(KeyError::Translation)?;
                let off = (a - base) & (ps - 1);
                let n = (ps - off).min(end - a);
                push_chunk(out, pa + off, n)?;
                a += n;
            }
            Ok(())
        }
    }
}

fn push_chunk(out: &mut Vec<(u64, usize)>, iova: u64, len: u64) -> Result<(), KeyError> {
    let n = usize::try_from(len).map_err(|_| KeyError::Bounds)?;
    // Merge with the previous chunk when contiguous.
    if let Some(last) = out.last_mut() {
        if last.0.checked_add(last.1 as u64) == Some(iova) {
            last.1 += n;
            return Ok(());
        }
    }
    out.push((iova, n));
    Ok(())
}

/// Reads `dst.len()` bytes from the chunks. Records an IOMMU fault and
/// fails when a chunk is not mapped.
pub(crate) fn gather(
    iommu: &mut Iommu,
    chunks: &[(u64, usize)],
    dst: &mut [u8],
    what: &dyn Fn() -> String,
) -> Result<(), ()> {
    let mut o = 0;
    for &(iova, n) in chunks {
        let Some(d) = dst.get_mut(o..o + n) else {
            return Err(());
        };
        iommu.read(iova, d, what)?;
        o += n;
    }
    Ok(())
}

/// Writes `src` through the chunks (their total length is `src.len()`).
pub(crate) fn scatter(
    iommu: &mut Iommu,
    chunks: &[(u64, usize)],
    src: &[u8],
    what: &dyn Fn() -> String,
) -> Result<(), ()> {
    let mut o = 0;
    for &(iova, n) in chunks {
        let Some(s) = src.get(o..o + n) else {
            return Err(());
        };
        iommu.write(iova, s, what)?;
        o += n;
    }
    Ok(())
}
