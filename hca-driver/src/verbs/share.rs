//! How verbs objects hold their parents: a family of shared handles.
//!
//! A verbs object keeps its parents alive by holding a handle to each (a
//! QP holds its PD, CQs and SRQ; a PD its context; a context the
//! [`Hca`](crate::Hca)), so it can be stored in the user's own structs and
//! moved to another thread, and a parent cannot go while a child uses it.
//! The handle type is chosen once per program by a [`Share`] family:
//!
//! - `ArcShare` (feature `alloc`, on with `std`): `Arc<T>`. A parent is
//!   destroyed when its last handle drops; [`Share::try_unwrap`] is
//!   `Arc::try_unwrap`.
//! - [`SlotShare`]: [`SlotRef<T>`](platform::slot::SlotRef), for bare
//!   metal without a heap: the caller gives each parent a static
//!   [`Slot`](platform::slot::Slot) and gets a counted handle back, with
//!   the semantics of `Arc` (the last handle destroys the object, and
//!   [`Share::try_unwrap`] gives it back), so a bare-metal program can
//!   tear everything down and close the HCA.
//! - [`StaticShare`]: `&'static T`, for bare metal without a heap. The
//!   caller keeps each parent in a static (e.g. a `spin::Once`); such an
//!   object lives as long as the program.
//!
//! Objects are created by an associated function of their type that takes
//! the parent's handle by reference, any type implementing [`Handle`]:
//! `Context::open(&hca)`, `Pd::alloc(&ctx)`, `Cq::create(&ctx, n)`,
//! `Qp::create(&pd, &QpInitAttr::new(..., &cq, &cq))`,
//! `Mr::register(&pd, &buf, access)`, `DmaBuf::alloc(&hca, len)`,
//! `Srq::create(&pd, ...)`, `Ah::create(&pd, ...)`. The new object is an
//! owned value; wrap it in the family's handle to create children from it.
//!
//! Why a family (a generic associated type) rather than a handle type per
//! parent: a QP names four parents of different types, and with one
//! parameter `S` all of them agree on the ownership scheme.

use core::ops::Deref;

/// A family of shared handles: `Ref<T>` keeps a `T` alive and derefs to it.
pub trait Share: Sized + 'static {
    /// The handle of a `T`.
    type Ref<T: 'static>: Handle<T, Share = Self>;

    /// The object, when `r` is its last handle; otherwise `r` back, with
    /// how many other handles hold it (`None` when it cannot be known or
    /// the object is never released, as for statics).
    fn try_unwrap<T: 'static>(r: Self::Ref<T>) -> Result<T, (Self::Ref<T>, Option<usize>)>;
}

/// A handle of a `T` in a [`Share`] family: cloning it shares the object.
pub trait Handle<T: 'static>: Clone + Deref<Target = T> {
    /// The family.
    type Share: Share;
    /// The handle as its family's `Ref<T>` (the same value).
    fn into_ref(self) -> <Self::Share as Share>::Ref<T>;
}

/// Handles that are [`SlotRef<T>`](platform::slot::SlotRef): objects in
/// caller-supplied static [`Slot`](platform::slot::Slot)s, counted like
/// `Arc` (no heap).
#[derive(Debug, Clone, Copy)]
pub enum SlotShare {}

impl Share for SlotShare {
    type Ref<T: 'static> = platform::slot::SlotRef<T>;

    fn try_unwrap<T: 'static>(
        r: platform::slot::SlotRef<T>,
    ) -> Result<T, (platform::slot::SlotRef<T>, Option<usize>)> {
        platform::slot::SlotRef::try_unwrap(r).map_err(|r| {
            let others = platform::slot::SlotRef::count(&r).saturating_sub(1);
            (r, Some(others))
        })
    }
}

impl<T: 'static> Handle<T> for platform::slot::SlotRef<T> {
    type Share = SlotShare;
    fn into_ref(self) -> platform::slot::SlotRef<T> {
        self
    }
}

/// Handles that are `&'static T`: objects kept in statics (no heap).
#[derive(Debug, Clone, Copy)]
pub enum StaticShare {}

impl Share for StaticShare {
    type Ref<T: 'static> = &'static T;

    fn try_unwrap<T: 'static>(r: &'static T) -> Result<T, (&'static T, Option<usize>)> {
        Err((r, None))
    }
}

impl<T: 'static> Handle<T> for &'static T {
    type Share = StaticShare;
    fn into_ref(self) -> &'static T {
        self
    }
}

/// Handles that are `alloc::sync::Arc<T>`.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, Copy)]
pub enum ArcShare {}

#[cfg(feature = "alloc")]
impl Share for ArcShare {
    type Ref<T: 'static> = alloc::sync::Arc<T>;

    fn try_unwrap<T: 'static>(
        r: alloc::sync::Arc<T>,
    ) -> Result<T, (alloc::sync::Arc<T>, Option<usize>)> {
        alloc::sync::Arc::try_unwrap(r).map_err(|r| {
            let others = alloc::sync::Arc::strong_count(&r) - 1;
            (r, Some(others))
        })
    }
}

#[cfg(feature = "alloc")]
impl<T: 'static> Handle<T> for alloc::sync::Arc<T> {
    type Share = ArcShare;
    fn into_ref(self) -> alloc::sync::Arc<T> {
        self
    }
}

/// The family the verbs types use when none is named: `ArcShare` with
/// the `alloc` feature, [`StaticShare`] without.
#[cfg(feature = "alloc")]
pub type DefaultShare = ArcShare;
/// The family the verbs types use when none is named: `ArcShare` with
/// the `alloc` feature, [`StaticShare`] without.
#[cfg(not(feature = "alloc"))]
pub type DefaultShare = StaticShare;

/// Destroys the object behind its last handle with `destroy`; while other
/// handles hold it, drops this one and reports [`Error::InUse`]: the
/// object is then destroyed when the last handle drops.
pub(crate) fn destroy_last<S: Share, T: 'static>(
    r: S::Ref<T>,
    what: &'static str,
    destroy: impl FnOnce(T) -> crate::Result<()>,
) -> crate::Result<()> {
    match S::try_unwrap(r) {
        Ok(t) => destroy(t),
        Err((_, Some(others))) => Err(crate::Error::InUse {
            what,
            users: u32::try_from(others).unwrap_or(u32::MAX),
        }),
        Err((_, None)) => Err(crate::Error::Unsupported(
            "an object held by a &'static handle lives as long as the program",
        )),
    }
}
