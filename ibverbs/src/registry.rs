//! Which pointers are live objects of this library, so that a null,
//! stale (destroyed) or foreign pointer given to a control-path call gets
//! `EINVAL` instead of being dereferenced.

use std::collections::HashSet;
use std::sync::Mutex;

/// The kind of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Kind {
    Context,
    Pd,
    Mr,
    Cq,
    Qp,
    Srq,
    Ah,
    Channel,
    Flow,
    Wq,
    RwqIndTable,
    RssQp,
}

static LIVE: Mutex<Option<HashSet<(usize, Kind)>>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut HashSet<(usize, Kind)>) -> T) -> T {
    let mut g = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashSet::new))
}

/// Records a new object.
pub fn add<T>(p: *const T, k: Kind) {
    with(|s| s.insert((p as usize, k)));
}

/// Forgets an object (before it is freed). Returns whether it was live.
pub fn remove<T>(p: *const T, k: Kind) -> bool {
    with(|s| s.remove(&(p as usize, k)))
}

/// Whether `p` is a live object of kind `k`.
pub fn is_live<T>(p: *const T, k: Kind) -> bool {
    !p.is_null() && with(|s| s.contains(&(p as usize, k)))
}

/// Boxes `obj`, records it as a live object of kind `k` and returns its
/// address: the pointer a create call hands to the program, which its
/// destroy call gives back to [`take`].
pub fn publish<T>(obj: T, k: Kind) -> *mut T {
    let p = Box::into_raw(Box::new(obj));
    add(p, k);
    p
}

/// Forgets the live object of kind `k` at `p` and takes back its box, or
/// `None` when `p` is not a live object of that kind (null, stale or
/// foreign).
pub fn take<T>(p: *mut T, k: Kind) -> Option<Box<T>> {
    if p.is_null() || !remove(p, k) {
        return None;
    }
    // SAFETY: the registry holds only addresses that `publish` boxed as
    // this kind and no `take` has freed yet; it no longer holds this one,
    // so this box is the only owner.
    Some(unsafe { Box::from_raw(p) })
}

/// The live objects of kind `k` (their addresses), for the imports that
/// look an object up by its handle.
pub fn live_of(k: Kind) -> Vec<usize> {
    with(|s| {
        s.iter()
            .filter(|&&(_, kk)| kk == k)
            .map(|&(p, _)| p)
            .collect()
    })
}
