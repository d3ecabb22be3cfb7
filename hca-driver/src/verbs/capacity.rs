//! How many objects the verbs layer keeps track of, in one place.
//!
//! Every table of the verbs layer is sized here, from the device's
//! capabilities where memory allows and never above a ceiling:
//!
//! | what | from the caps | ceiling with `alloc` | ceiling without |
//! |---|---|---|---|
//! | QPs of a context (user indices; a CQ serves all of them) | `2^log_max_qp` | 512 | 256 |
//! | memory regions of a PD | `2^log_max_mkey` | 4096 | 256 |
//! | CQs with events (the HCA's event registry) | `2^log_max_cq` | [`MAX_CQS`] | [`MAX_CQS`] |
//!
//! With `alloc` the tables are heap vectors that grow up to their
//! capacity (a CQ's index by user index is allocated whole: 2 bytes per
//! QP of the context); without, they are inline arrays of the
//! ceiling (a CQ holds an index of [`MAX_CONTEXT_QPS`] entries and room
//! for that many QP completion handles, so a CQ can serve every QP of its
//! context). The HCA's registry of queues with events ([`MAX_QUEUES`])
//! holds at least a context's QPs; it lives inline in the `Hca` (no heap),
//! which is why the QP ceiling is not higher: each entry costs the `Hca`
//! about 40 bytes. A QP or SRQ beyond the registry is refused with
//! [`Error::CapacityExceeded`](crate::Error::CapacityExceeded).

use firmware_cmds::caps::CmdHcaCap;

use crate::events::{MAX_CQS, MAX_QUEUES};
use crate::info::Caps;

/// Ceiling of the QPs one context has at a time (its user indices).
#[cfg(feature = "alloc")]
pub const MAX_CONTEXT_QPS: usize = 512;
/// Ceiling of the QPs one context has at a time (its user indices).
#[cfg(not(feature = "alloc"))]
pub const MAX_CONTEXT_QPS: usize = 256;

/// Ceiling of the memory regions one PD has at a time.
#[cfg(feature = "alloc")]
pub const MAX_MRS_PER_PD: usize = 4096;
/// Ceiling of the memory regions one PD has at a time.
#[cfg(not(feature = "alloc"))]
pub const MAX_MRS_PER_PD: usize = 256;

const _: () = assert!(MAX_QUEUES >= MAX_CONTEXT_QPS);
const _: () = assert!(MAX_CONTEXT_QPS <= u16::MAX as usize);

/// The capacities of a context's tables, fixed when it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacities {
    /// QPs of the context at a time; also the QPs one CQ serves.
    pub qps: usize,
    /// Memory regions of one PD at a time.
    pub mrs_per_pd: usize,
    /// CQs of the HCA that receive completion events.
    pub cqs: usize,
}

fn pow2(log: u8, ceiling: usize) -> usize {
    1usize
        .checked_shl(u32::from(log))
        .unwrap_or(usize::MAX)
        .min(ceiling)
}

impl Capacities {
    /// The capacities for a device with `caps`: `2^log_max_*`, at most the
    /// ceilings of this module.
    pub fn from_caps(caps: &Caps) -> Self {
        let g = caps.general();
        Self {
            qps: pow2(g.get(CmdHcaCap::log_max_qp), MAX_CONTEXT_QPS),
            mrs_per_pd: pow2(g.get(CmdHcaCap::log_max_mkey), MAX_MRS_PER_PD),
            cqs: pow2(g.get(CmdHcaCap::log_max_cq), MAX_CQS),
        }
    }
}

#[cfg(feature = "alloc")]
type Store<T, const N: usize> = alloc::vec::Vec<T>;
#[cfg(not(feature = "alloc"))]
type Store<T, const N: usize> = heapless::Vec<T, N>;

/// A vector of at most `cap` items (`cap <= N`): on the heap with
/// `alloc`, inline with room for `N` without.
pub(crate) struct Bounded<T, const N: usize> {
    items: Store<T, N>,
    cap: usize,
}

impl<T, const N: usize> Bounded<T, N> {
    /// An empty vector for `cap` items (at most `N`).
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.min(N);
        // Grown as items come (a PD's 4096 regions would be 128 KB).
        #[cfg(feature = "alloc")]
        let items = alloc::vec::Vec::new();
        #[cfg(not(feature = "alloc"))]
        let items = heapless::Vec::new();
        Self { items, cap }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.items.len() >= self.cap
    }

    /// Appends `t`, or gives it back when full.
    pub(crate) fn push(&mut self, t: T) -> Result<(), T> {
        if self.is_full() {
            return Err(t);
        }
        #[cfg(feature = "alloc")]
        {
            self.items.push(t);
            Ok(())
        }
        #[cfg(not(feature = "alloc"))]
        self.items.push(t)
    }

    pub(crate) fn swap_remove(&mut self, i: usize) -> T {
        self.items.swap_remove(i)
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        &self.items
    }

    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.items.iter()
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.items
    }
}

impl<T: core::fmt::Debug, const N: usize> core::fmt::Debug for Bounded<T, N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.items.iter()).finish()
    }
}
