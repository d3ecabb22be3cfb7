//! Protection domains and memory regions: ALLOC_PD, CREATE_MKEY /
//! DESTROY_MKEY over [`DmaBuf`]s, and the per-PD table of local keys that
//! work requests are checked against before they reach the device.

use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};

use firmware_cmds::mkey::{CreateMkeyIn, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA, Mkc};
use platform::{Platform, UserMapping, UserMemory};

use crate::error::{Error, Result};
use crate::fw::{MkeyObj, PdObj};
use crate::pas::{PAS_PAGE_SIZE, PageList};
use crate::types::{Lkey, Pdn, Rkey};
use crate::verbs::buf::DmaBuf;
use crate::verbs::capacity::{Bounded, MAX_MRS_PER_PD};
use crate::verbs::context::{Context, FwObj};
use crate::verbs::share::{DefaultShare, Handle, Share};

/// `MLX5_IB_MTT_READ | MLX5_IB_MTT_WRITE`: the low bits of an MTT entry.
const MTT_PRESENT: u64 = 3;
/// `mkc.qpn` of a key not bound to a QP.
const MKC_QPN_ANY: u32 = 0xff_ffff;
/// log2 of the MTT page size.
const MTT_LOG_PAGE: u8 = 12;
/// log2 of the largest MTT page of a region over user memory (1 GiB).
const MAX_MTT_LOG_PAGE: u8 = 30;

/// Access flags of a memory region or a QP (`enum ibv_access_flags`, the
/// same values).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// No remote access, local read only.
    pub const NONE: Self = Self(0);
    /// `IBV_ACCESS_LOCAL_WRITE` (`mkc.lw`): the device may write the
    /// memory for receives, RDMA READ responses and atomic results.
    pub const LOCAL_WRITE: Self = Self(1);
    /// `IBV_ACCESS_REMOTE_WRITE` (`mkc.rw`, QP `rwe`).
    pub const REMOTE_WRITE: Self = Self(2);
    /// `IBV_ACCESS_REMOTE_READ` (`mkc.rr`, QP `rre`).
    pub const REMOTE_READ: Self = Self(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC` (`mkc.a`, QP `rae`).
    pub const REMOTE_ATOMIC: Self = Self(8);
    /// Every flag above.
    pub const ALL: Self = Self(15);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for AccessFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u32, &str); 4] = [
            (1, "IBV_ACCESS_LOCAL_WRITE"),
            (2, "IBV_ACCESS_REMOTE_WRITE"),
            (4, "IBV_ACCESS_REMOTE_READ"),
            (8, "IBV_ACCESS_REMOTE_ATOMIC"),
        ];
        super::write_flags(f, self.0, NAMES.into_iter())
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessFlags({self})")
    }
}

/// How a memory key translates addresses (`mkc.access_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MrMode {
    /// `MKC_ACCESS_MODE_MTT`: a translation table of the region's 4 KiB
    /// pages (what drivers use for registered memory).
    #[default]
    Mtt,
    /// `MKC_ACCESS_MODE_PA`: addresses are bus addresses, no table.
    Pa,
}

/// A registered range in a PD's key table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MrEntry {
    pub(crate) lkey: u32,
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) access: AccessFlags,
}

impl MrEntry {
    /// Whether `[addr, addr + len)` lies inside the region.
    pub(crate) fn covers(&self, addr: u64, len: u32) -> bool {
        addr >= self.start
            && (addr - self.start)
                .checked_add(u64::from(len))
                .is_some_and(|end| end <= self.len)
    }
}

/// A protection domain (`ibv_pd`, ALLOC_PD): memory regions, QPs, SRQs and
/// address handles are created in it and hold a handle of it.
///
/// Its table of memory regions holds
/// [`Capacities::mrs_per_pd`](crate::verbs::Capacities::mrs_per_pd)
/// entries; a key is looked up by a scan of the table, after a one-entry
/// cache per QP and SRQ (work requests mostly reuse a key).
pub struct Pd<P: Platform + 'static, S: Share = DefaultShare> {
    ctx: S::Ref<Context<P, S>>,
    obj: FwObj<P, S, PdObj>,
    mrs: spin::Mutex<Bounded<MrEntry, MAX_MRS_PER_PD>>,
    /// Bumped at every deregistration: a QP's cached key check is valid
    /// only for the generation it was made in.
    generation: AtomicU32,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Pd<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.obj.number())
    }
}

impl<P: Platform + 'static, S: Share> Pd<P, S> {
    /// Allocates a protection domain (`ibv_alloc_pd`) in the context
    /// behind `ctx`.
    pub fn alloc(ctx: &impl Handle<Context<P, S>, Share = S>) -> Result<Self> {
        let ctx: S::Ref<Context<P, S>> = ctx.clone().into_ref();
        let hca = ctx.hca().clone();
        let obj = hca.alloc_pd()?.rehome(hca.clone());
        let cap = ctx.capacities().mrs_per_pd;
        Ok(Pd {
            ctx,
            obj,
            mrs: spin::Mutex::new(Bounded::new(cap)),
            generation: AtomicU32::new(0),
        })
    }

    /// The PD number.
    pub fn number(&self) -> Pdn {
        self.obj.number()
    }

    /// The context's handle.
    pub fn context(&self) -> &S::Ref<Context<P, S>> {
        &self.ctx
    }

    /// Deallocates the PD (DEALLOC_PD). Everything created in it is gone
    /// (they hold handles of it).
    pub fn destroy(self) -> Result<()> {
        self.obj.destroy()
    }

    /// Deallocates the PD behind its last handle; while regions, QPs, SRQs
    /// or address handles still hold it, drops this handle and returns
    /// [`Error::InUse`] (it is deallocated when the last handle drops).
    pub fn try_destroy(this: impl Handle<Self, Share = S>) -> Result<()> {
        crate::verbs::share::destroy_last::<S, Self>(this.into_ref(), "the PD", Self::destroy)
    }
}

impl<P: Platform + 'static, S: Share> Mr<P, S> {
    /// Registers a whole buffer (`ibv_reg_mr`) in the PD behind `pd`.
    pub fn register(
        pd: &impl Handle<Pd<P, S>, Share = S>,
        buf: &impl Handle<DmaBuf<P, S>, Share = S>,
        access: AccessFlags,
    ) -> Result<Self> {
        let len = buf.len();
        Self::register_range(pd, buf, 0, len, access, MrMode::Mtt)
    }

    /// Registers `len` bytes of a buffer from `offset` with a translation
    /// mode.
    ///
    /// Refused like libibverbs does: remote write or remote atomic without
    /// local write, an empty range, a range outside the buffer, a buffer of
    /// another HCA.
    pub fn register_range(
        pd: &impl Handle<Pd<P, S>, Share = S>,
        buf: &impl Handle<DmaBuf<P, S>, Share = S>,
        offset: usize,
        len: usize,
        access: AccessFlags,
        mode: MrMode,
    ) -> Result<Self> {
        let this: &Pd<P, S> = pd;
        let hca = this.ctx.hca();
        if !core::ptr::eq::<crate::Hca<P>>(&**buf.hca(), &**hca) {
            return Err(Error::InvalidArgument {
                arg: "buf",
                reason: "the buffer belongs to another HCA",
            });
        }
        check_access(access)?;
        if len == 0 {
            return Err(Error::InvalidArgument {
                arg: "len",
                reason: "a memory region has at least one byte",
            });
        }
        let start = buf.addr(offset)?;
        if !buf.contains(start, len) {
            return Err(Error::InvalidArgument {
                arg: "len",
                reason: "the range is outside the buffer",
            });
        }
        let ps = PAS_PAGE_SIZE as u64;
        let (first_page, pages) = match mode {
            MrMode::Pa => (0, 0),
            MrMode::Mtt => {
                let first = start & !(ps - 1);
                (first, ((start - first) + len as u64).div_ceil(ps) as usize)
            }
        };
        let layout = KeyLayout {
            mode,
            log_page: MTT_LOG_PAGE,
            first_page,
            pages,
        };
        let (mkey, key) = create_key(this, start, len, access, &layout)?;
        Ok(Mr {
            pd: pd.clone().into_ref(),
            mkey: Some(mkey),
            lkey: Lkey(key),
            addr: start,
            len,
            access,
            layout,
            backing: Backing::Buf(buf.clone().into_ref()),
        })
    }

    /// Registers `mem`, memory of the program itself (`ibv_reg_mr` on
    /// ordinary user memory, `ibv_reg_mr_iova2` with an IOVA of the
    /// caller's choice), in the PD behind `pd`: zero-copy, the device
    /// reads and writes those very bytes.
    ///
    /// The platform maps the pages for DMA
    /// ([`Platform::map_user`](platform::Platform::map_user): pinned and
    /// mapped through the IOMMU under VFIO, the emulated IOMMU, the
    /// user-memory window on bare metal), then a memory key is made over
    /// the mapping's pages (an MTT whose page size is the largest the
    /// alignment of the mapping and of `iova` allows, up to 1 GiB) with
    /// start address `iova`: SGEs and a peer's RDMA name the memory by
    /// `iova ..= iova + len - 1` (libibverbs passes the process address
    /// of the memory). Deregistering destroys the key, then unmaps the
    /// pages; from then on the device cannot reach them, and the caller
    /// may free the memory (the promise of
    /// [`UserMemory`](platform::UserMemory) ends there).
    ///
    /// # Errors
    ///
    /// As [`register_range`](Self::register_range) for the access flags
    /// and the table;
    /// [`Error::InvalidArgument`] when `iova` and the memory's address
    /// differ in their offset inside a 4 KiB page (as Linux' `ib_uverbs`
    /// refuses, `EINVAL`) or `iova + len` wraps;
    /// [`Error::Platform`] with the platform's reason when the pages
    /// cannot be mapped ([`platform::Error::NotSupported`] on a platform
    /// without it, [`platform::Error::UserMemoryFault`] for pages not
    /// mapped in the process, `MemlockTooLow` under
    /// VFIO).
    pub fn register_user(
        pd: &impl Handle<Pd<P, S>, Share = S>,
        mem: UserMemory,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Self> {
        let this: &Pd<P, S> = pd;
        let (mkey, key, mapping, layout) = map_and_key(this, mem, iova, access)?;
        Ok(Mr {
            pd: pd.clone().into_ref(),
            mkey: Some(mkey),
            lkey: Lkey(key),
            addr: iova,
            len: mapping.1,
            access,
            layout,
            backing: Backing::User(Some(mapping.0)),
        })
    }
}

/// A key over user memory: maps `mem`, then CREATE_MKEY at `iova` in
/// `this`. Returns the key, the mapping with the region's length, and the
/// key's layout; unmaps again when the key cannot be made.
#[allow(clippy::type_complexity)]
fn map_and_key<P: Platform + 'static, S: Share>(
    this: &Pd<P, S>,
    mem: UserMemory,
    iova: u64,
    access: AccessFlags,
) -> Result<(FwObj<P, S, MkeyObj>, u32, (UserMapping, usize), KeyLayout)> {
    check_access(access)?;
    let len = mem.len();
    let host = mem.addr().as_ptr().addr();
    let ps = PAS_PAGE_SIZE as u64;
    if iova % ps != host as u64 % ps {
        return Err(Error::InvalidArgument {
            arg: "iova",
            reason: "the IOVA and the memory's address differ in their offset inside a 4 KiB page",
        });
    }
    if iova.checked_add(len as u64).is_none() {
        return Err(Error::InvalidArgument {
            arg: "iova",
            reason: "the region wraps around the 64-bit address space",
        });
    }
    if this.mrs.lock().is_full() {
        return Err(Error::CapacityExceeded {
            what: "the PD's memory region table",
            capacity: this.mrs.lock().capacity(),
        });
    }
    let hca = this.ctx.hca();
    let mapping = hca
        .platform()
        .map_user(mem)
        .map_err(|source| Error::Platform {
            what: "mapping user memory for DMA",
            source,
        })?;
    let Some(bus) = mapping.iova_of(host) else {
        unmap_user(hca, mapping);
        return Err(Error::InvalidArgument {
            arg: "mem",
            reason: "the platform's mapping does not cover the memory",
        });
    };
    // The largest MTT page for which the bus address and `iova` agree
    // below the page size (the device finds byte `x` of the key at
    // MTT[(x - align_down(iova)) / page] + x % page).
    let mut log = MTT_LOG_PAGE;
    while log < MAX_MTT_LOG_PAGE
        && (bus ^ iova) & ((2u64 << log) - 1) == 0
        && (1u64 << log) < len as u64
    {
        log += 1;
    }
    let page = 1u64 << log;
    let layout = KeyLayout {
        mode: MrMode::Mtt,
        log_page: log,
        first_page: bus & !(page - 1),
        pages: ((iova & (page - 1)) + len as u64).div_ceil(page) as usize,
    };
    match create_key(this, iova, len, access, &layout) {
        Ok((mkey, key)) => Ok((mkey, key, (mapping, len), layout)),
        Err(e) => {
            unmap_user(hca, mapping);
            Err(e)
        }
    }
}

/// How a memory key translates: mode, and for an MTT its pages (`pages`
/// of `1 << log_page` bytes, consecutive on the bus from `first_page`).
#[derive(Clone, Copy, Debug)]
struct KeyLayout {
    mode: MrMode,
    log_page: u8,
    first_page: u64,
    pages: usize,
}

/// Refuses access flags as libibverbs does: unknown bits, remote write or
/// remote atomic without local write.
fn check_access(access: AccessFlags) -> Result<()> {
    if access.0 & !AccessFlags::ALL.0 != 0 {
        return Err(Error::InvalidAttribute {
            attr: "access",
            value: u64::from(access.0),
            reason: "unknown access flags",
        });
    }
    if (access.contains(AccessFlags::REMOTE_WRITE) || access.contains(AccessFlags::REMOTE_ATOMIC))
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::InvalidAttribute {
            attr: "access",
            value: u64::from(access.0),
            reason: "remote write or remote atomic access needs local write",
        });
    }
    Ok(())
}

/// Unmaps user memory, logging a refusal (the pages then stay mapped and
/// pinned: safe for the memory, a leak of the mapping).
fn unmap_user<P: Platform>(hca: &crate::Hca<P>, mapping: UserMapping) {
    let (host, len) = (mapping.host_addr(), mapping.len());
    if let Err(e) = hca.platform().unmap_user(mapping) {
        log::error!(
            "unmapping {len:#x} bytes of user memory at {host:#x}: {e}; the pages stay mapped"
        );
    }
}

/// CREATE_MKEY of `len` bytes from `start` in `pd`'s table, translated
/// as `layout` says. Returns the key object and the key, entered in the
/// PD's table.
fn create_key<P: Platform + 'static, S: Share>(
    this: &Pd<P, S>,
    start: u64,
    len: usize,
    access: AccessFlags,
    layout: &KeyLayout,
) -> Result<(FwObj<P, S, MkeyObj>, u32)> {
    let KeyLayout {
        mode,
        log_page,
        first_page,
        pages,
    } = *layout;
    let hca = this.ctx.hca();
    let capacity = this.mrs.lock().capacity();
    if this.mrs.lock().is_full() {
        return Err(Error::CapacityExceeded {
            what: "the PD's memory region table",
            capacity,
        });
    }
    let variant = this.ctx.next_mkey_variant();
    let mut mkc = Mkc::new();
    mkc.set(Mkc::lr, true)?
        .set(Mkc::lw, access.contains(AccessFlags::LOCAL_WRITE))?
        .set(Mkc::rr, access.contains(AccessFlags::REMOTE_READ))?
        .set(Mkc::rw, access.contains(AccessFlags::REMOTE_WRITE))?
        .set(Mkc::a, access.contains(AccessFlags::REMOTE_ATOMIC))?
        .set(Mkc::qpn, MKC_QPN_ANY)?
        .set(Mkc::mkey_7_0, variant)?
        .set(Mkc::pd, this.number().0)?
        .set(Mkc::start_addr, start)?
        .set(Mkc::len, len as u64)?;
    let pages = match mode {
        MrMode::Pa => {
            mkc.set_access_mode(MKC_ACCESS_MODE_PA)?;
            0
        }
        MrMode::Mtt => {
            mkc.set_access_mode(MKC_ACCESS_MODE_MTT)?;
            // Two 8-byte entries per octoword.
            let octo = u32::try_from(pages.div_ceil(2)).map_err(|_| Error::InvalidArgument {
                arg: "len",
                reason: "too many pages for one memory key",
            })?;
            mkc.set(Mkc::translations_octword_size, octo)?
                .set(Mkc::log_page_size, log_page)?;
            pages
        }
    };
    let mut head = CreateMkeyIn::new();
    head.set(CreateMkeyIn::memory_key_mkey_entry, mkc)?;
    if pages > 0 {
        head.set(
            CreateMkeyIn::translations_octword_actual_size,
            pages.div_ceil(2) as u32,
        )?;
    }
    // Whole octowords: an odd page count is padded with a zero entry.
    let list = PageList::contiguous(&head, first_page, 1usize << log_page, pages)
        .with_flags(MTT_PRESENT)
        .in_octowords();
    let mkey = hca.create_mkey(&list)?.rehome(hca.clone());
    let key = firmware_cmds::mkey::mkey_from_index(mkey.number().0, variant);
    let entry = MrEntry {
        lkey: key,
        start,
        len: len as u64,
        access,
    };
    if this.mrs.lock().push(entry).is_err() {
        // Another thread filled the table meanwhile: the drop of
        // `mkey` destroys the key.
        return Err(Error::CapacityExceeded {
            what: "the PD's memory region table",
            capacity,
        });
    }
    Ok((mkey, key))
}

impl<P: Platform + 'static, S: Share> Pd<P, S> {
    /// The registered region an lkey names, if any.
    pub(crate) fn lookup(&self, lkey: u32) -> Option<MrEntry> {
        self.mrs.lock().iter().find(|e| e.lkey == lkey).copied()
    }

    /// The key table's generation (see [`Pd::lookup`]).
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    fn forget(&self, lkey: u32) {
        let mut t = self.mrs.lock();
        if let Some(i) = t.iter().position(|e| e.lkey == lkey) {
            t.swap_remove(i);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Memory regions registered now.
    pub fn mr_count(&self) -> usize {
        self.mrs.lock().len()
    }
}

/// A memory region (`ibv_mr`): a memory key over a buffer range, with its
/// lkey and rkey. Holds handles of its PD and its buffer; deregistered
/// when dropped.
pub struct Mr<P: Platform + 'static, S: Share = DefaultShare> {
    pd: S::Ref<Pd<P, S>>,
    mkey: Option<FwObj<P, S, MkeyObj>>,
    lkey: Lkey,
    addr: u64,
    len: usize,
    access: AccessFlags,
    layout: KeyLayout,
    backing: Backing<P, S>,
}

/// What a memory region's key translates to.
enum Backing<P: Platform + 'static, S: Share> {
    /// A range of a DMA buffer, which the region keeps alive.
    Buf(S::Ref<DmaBuf<P, S>>),
    /// User memory the platform mapped (`None` once unmapped).
    User(Option<UserMapping>),
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Mr<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MR {} at {:#x}, {} bytes, {}",
            self.lkey, self.addr, self.len, self.access
        )
    }
}

impl<P: Platform + 'static, S: Share> Mr<P, S> {
    /// The local key.
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }

    /// The remote key (the same memory key on mlx5).
    pub fn rkey(&self) -> Rkey {
        Rkey(self.lkey.0)
    }

    /// Bus address of the first byte (`ibv_mr.addr`): what SGEs and remote
    /// addresses name.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Access flags.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The PD's handle.
    pub fn pd(&self) -> &S::Ref<Pd<P, S>> {
        &self.pd
    }

    /// The buffer's handle; `None` for a region over user memory
    /// ([`register_user`](Self::register_user)).
    pub fn buf(&self) -> Option<&S::Ref<DmaBuf<P, S>>> {
        match &self.backing {
            Backing::Buf(b) => Some(b),
            Backing::User(_) => None,
        }
    }

    /// The platform's mapping of the region's user memory
    /// ([`register_user`](Self::register_user)); `None` for a region over
    /// a DMA buffer.
    pub fn user_mapping(&self) -> Option<&UserMapping> {
        match &self.backing {
            Backing::User(m) => m.as_ref(),
            Backing::Buf(_) => None,
        }
    }

    /// An SGE over `len` bytes at `offset` of the region.
    pub fn sge(&self, offset: usize, len: u32) -> Result<verbs_core::Sge> {
        match offset.checked_add(len as usize) {
            Some(end) if end <= self.len => Ok(verbs_core::Sge {
                addr: self.addr + offset as u64,
                length: len,
                lkey: self.lkey.0,
            }),
            _ => Err(Error::InvalidArgument {
                arg: "offset",
                reason: "the SGE is outside the memory region",
            }),
        }
    }

    /// Deregisters the region (`ibv_dereg_mr`): the key leaves the PD's
    /// table, then DESTROY_MKEY; for user memory, the platform then
    /// unmaps its pages (also when DESTROY_MKEY failed: the device must
    /// not reach memory the caller is about to free).
    pub fn destroy(mut self) -> Result<()> {
        self.dereg()
    }

    /// Changes the PD and/or the access flags of the region
    /// (`ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD` /
    /// `IBV_REREG_MR_CHANGE_ACCESS`; `None` keeps what it is): a new
    /// memory key over the same translation is made in the (new) PD, then
    /// the old key is destroyed, so the lkey and rkey change (read them
    /// again), as they may with libibverbs.
    ///
    /// # Errors
    ///
    /// As [`register_range`](Self::register_range) for the flags and the
    /// table; [`Error::InvalidArgument`] for a PD of another context.
    /// When the new key cannot be made the region is unchanged; when the
    /// old key cannot be destroyed the region already has the new one and
    /// the error is returned (the old key is reclaimed at close).
    pub fn rereg(
        &mut self,
        pd: Option<S::Ref<Pd<P, S>>>,
        access: Option<AccessFlags>,
    ) -> Result<()> {
        let pd = pd.unwrap_or_else(|| self.pd.clone());
        if !core::ptr::eq::<Context<P, S>>(&**pd.context(), &**self.pd.context()) {
            return Err(Error::InvalidArgument {
                arg: "pd",
                reason: "the PD belongs to another context",
            });
        }
        let access = access.unwrap_or(self.access);
        check_access(access)?;
        let (mkey, key) = create_key(&pd, self.addr, self.len, access, &self.layout)?;
        self.replace_key(pd, mkey, key, access)
    }

    /// Points the region at other user memory (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`): `mem` is mapped and a new key
    /// made over it at `iova` (same PD and access flags), then the old key
    /// is destroyed and the old memory unmapped (a region over a
    /// [`DmaBuf`] lets its buffer go). The lkey and rkey change.
    ///
    /// # Errors
    ///
    /// As [`register_user`](Self::register_user); when the new memory
    /// cannot be mapped or keyed the region is unchanged.
    pub fn rereg_user(&mut self, mem: UserMemory, iova: u64) -> Result<()> {
        let pd = self.pd.clone();
        let (mkey, key, (mapping, len), layout) = map_and_key(&pd, mem, iova, self.access)?;
        let r = self.replace_key(pd, mkey, key, self.access);
        let old = core::mem::replace(&mut self.backing, Backing::User(Some(mapping)));
        self.addr = iova;
        self.len = len;
        self.layout = layout;
        match old {
            // The device must not reach the old memory any more, whether
            // or not its key went.
            Backing::User(Some(m)) => unmap_user(self.pd.ctx.hca(), m),
            Backing::User(None) => {}
            // A buffer the old key may still name is kept (leaked) rather
            // than freed under the device.
            Backing::Buf(b) if r.is_err() => core::mem::forget(b),
            Backing::Buf(b) => drop(b),
        }
        r
    }

    /// Installs a new key (made in `pd`) and destroys the old one.
    fn replace_key(
        &mut self,
        pd: S::Ref<Pd<P, S>>,
        mkey: FwObj<P, S, MkeyObj>,
        key: u32,
        access: AccessFlags,
    ) -> Result<()> {
        let old = self.mkey.replace(mkey);
        self.pd.forget(self.lkey.0);
        self.pd = pd;
        self.lkey = Lkey(key);
        self.access = access;
        match old {
            Some(m) => m.destroy(),
            None => Ok(()),
        }
    }

    fn dereg(&mut self) -> Result<()> {
        let r = match self.mkey.take() {
            Some(m) => {
                self.pd.forget(self.lkey.0);
                m.destroy()
            }
            None => Ok(()),
        };
        if let Backing::User(m) = &mut self.backing {
            if let Some(m) = m.take() {
                let hca = self.pd.ctx.hca();
                let (host, len) = (m.host_addr(), m.len());
                if let Err(source) = hca.platform().unmap_user(m) {
                    log::error!(
                        "unmapping {len:#x} bytes of user memory at {host:#x}: {source}; the pages stay mapped"
                    );
                    return r.and(Err(Error::Platform {
                        what: "unmapping user memory",
                        source,
                    }));
                }
            }
        }
        r
    }
}

impl<P: Platform + 'static, S: Share> Drop for Mr<P, S> {
    fn drop(&mut self) {
        if let Err(e) = self.dereg() {
            log::error!("deregistering {}: {e}", self.lkey);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::AccessFlags;

    #[test]
    fn access_flags_print_their_names() {
        let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags(0x30);
        assert_eq!(
            format!("{a}"),
            "IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | 0x30"
        );
        assert_eq!(format!("{:?}", AccessFlags::NONE), "AccessFlags(0)");
        assert_eq!(format!("{}", AccessFlags(0x40)), "0x40");
    }
}
