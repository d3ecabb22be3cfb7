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
