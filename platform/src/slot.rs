//! A counted object in caller-supplied static storage: `Arc` without a
//! heap.
//!
//! Bare-metal programs keep long-lived objects in statics. A plain
//! `&'static T` never gives the object back, so nothing held that way can
//! be torn down (an HCA's verbs objects, whose destroy commands return
//! memory to the device's owner). A [`Slot`] is a static place for one
//! `T`; [`Slot::put`] moves a value in and returns the first [`SlotRef`],
//! a counted handle like `Arc`: clones share the value, the last handle
//! dropped drops it and empties the slot, and [`SlotRef::try_unwrap`]
//! gives the value back when it is the last handle. An emptied slot takes
//! a new value.
//!
//! ```
//! use platform::slot::{Slot, SlotRef};
//!
//! static NAME: Slot<String> = Slot::new();
//! let a = NAME.put(String::from("cq 7")).unwrap();
//! let b = a.clone();
//! assert_eq!((b.as_str(), SlotRef::count(&a)), ("cq 7", 2));
//! let a = SlotRef::try_unwrap(a).unwrap_err(); // `b` still holds it
//! drop(b);
//! assert_eq!(SlotRef::try_unwrap(a).unwrap(), "cq 7");
//! assert!(NAME.put(String::from("again")).is_ok()); // empty again
//! ```

use core::cell::UnsafeCell;
use core::fmt;
use core::mem::MaybeUninit;
use core::ops::Deref;
use core::sync::atomic::{AtomicUsize, Ordering, fence};

/// The count of an empty slot.
const EMPTY: usize = 0;
/// The count while a value is being moved in or out (no handle exists).
const BUSY: usize = usize::MAX;
/// Most handles of one value; a clone beyond it panics (as `Arc` aborts).
const MAX_REFS: usize = usize::MAX / 2;

/// Static storage for one counted `T` (see the [module docs](self)).
pub struct Slot<T> {
    /// [`EMPTY`], [`BUSY`], or the number of [`SlotRef`]s.
    count: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is reached from other threads only through `SlotRef`s
// (shared `&T`, so `T: Sync`) and moved in and out by whichever thread
// puts it or drops the last handle (so `T: Send`). The count serialises
// moving in and out against every handle.
unsafe impl<T: Send + Sync> Sync for Slot<T> {}

impl<T> Slot<T> {
    /// An empty slot, for a `static`.
    pub const fn new() -> Self {
        Self {
            count: AtomicUsize::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Whether a value is in the slot (racy: a hint for diagnostics).
    pub fn is_occupied(&self) -> bool {
        self.count.load(Ordering::Relaxed) != EMPTY
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.count.load(Ordering::Relaxed) {
            EMPTY => f.write_str("Slot(empty)"),
            BUSY => f.write_str("Slot(busy)"),
            n => write!(f, "Slot({n} handles)"),
        }
    }
}

impl<T: 'static> Slot<T> {
    /// Moves `value` in and returns its first handle; `Err(value)` when the
    /// slot holds a value already.
    pub fn put(&'static self, value: T) -> Result<SlotRef<T>, T> {
        // Acquire: the previous value's drop (or move out) happened before.
        if self
            .count
            .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(value);
        }
        // SAFETY: BUSY is ours alone: no handle exists and no other `put`
        // can pass the exchange above, so nothing else touches the value.
        unsafe { (*self.value.get()).write(value) };
        // Release: the value is written before any handle can read it.
        self.count.store(1, Ordering::Release);
        Ok(SlotRef { slot: self })
    }
}

/// A counted handle of the value in a [`Slot`]; see the
/// [module docs](self).
pub struct SlotRef<T: 'static> {
    slot: &'static Slot<T>,
}

// SAFETY: as for `Arc<T>`: the handle gives `&T` to any thread holding it
// and the last one drops `T` where it happens to be.
unsafe impl<T: Send + Sync> Send for SlotRef<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for SlotRef<T> {}

impl<T: 'static> SlotRef<T> {
    /// Handles of this value now (racy unless the caller holds the only
    /// other path to the value).
    pub fn count(this: &Self) -> usize {
        this.slot.count.load(Ordering::Relaxed)
    }

    /// The value, when `this` is its last handle (the slot is then empty);
    /// otherwise `this` back.
    pub fn try_unwrap(this: Self) -> Result<T, Self> {
        if this
            .slot
            .count
            .compare_exchange(1, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(this);
        }
        let slot = this.slot;
        core::mem::forget(this);
        // SAFETY: the count was 1 (this handle) and is BUSY now: no other
        // handle exists, the value is initialised (a handle existed) and is
        // read exactly once before the slot is marked empty.
        let value = unsafe { (*slot.value.get()).assume_init_read() };
        slot.count.store(EMPTY, Ordering::Release);
        Ok(value)
    }

    /// Whether two handles share one slot.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        core::ptr::eq(a.slot, b.slot)
    }
}

impl<T: 'static> Deref for SlotRef<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this handle counts in the slot's count, so the value is
        // initialised and is neither moved out nor dropped until this
        // handle is gone; only shared references are ever made to it.
        unsafe { (*self.slot.value.get()).assume_init_ref() }
    }
}

impl<T: 'static> Clone for SlotRef<T> {
    fn clone(&self) -> Self {
        // Relaxed: this handle already keeps the value alive (as `Arc`).
        let old = self.slot.count.fetch_add(1, Ordering::Relaxed);
        assert!(old < MAX_REFS, "too many handles of one slot");
        Self { slot: self.slot }
    }
}

impl<T: 'static> Drop for SlotRef<T> {
    fn drop(&mut self) {
        let count = &self.slot.count;
        let mut c = count.load(Ordering::Relaxed);
        loop {
            if c == 1 {
                // The last handle: take the slot before dropping the value,
                // so no `put` can write it meanwhile.
                match count.compare_exchange_weak(1, BUSY, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => c = now,
                }
            } else {
                match count.compare_exchange_weak(c, c - 1, Ordering::Release, Ordering::Relaxed) {
                    Ok(_) => return,
                    Err(now) => c = now,
                }
            }
        }
        // Every other handle's uses happened before their releasing
        // decrements; see them before dropping the value (as `Arc`).
        fence(Ordering::Acquire);
        // SAFETY: the count went from 1 (this handle) to BUSY: no other
        // handle exists and no `put` can start; the value is initialised.
        unsafe { (*self.slot.value.get()).assume_init_drop() };
        count.store(EMPTY, Ordering::Release);
    }
}

impl<T: fmt::Debug + 'static> fmt::Debug for SlotRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    /// A value that adds its number to its counter when dropped.
    #[derive(Debug)]
    struct Counted(u32, &'static AtomicU32);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_add(self.0, Ordering::Relaxed);
        }
    }

    #[test]
    fn last_handle_drops_the_value_and_empties_the_slot() {
        static S: Slot<Counted> = Slot::new();
        static DROPS: AtomicU32 = AtomicU32::new(0);
        let a = S.put(Counted(1, &DROPS)).unwrap();
        let b = a.clone();
        assert_eq!(SlotRef::count(&a), 2);
        assert!(SlotRef::ptr_eq(&a, &b));
        // Occupied: a second value is handed back.
        drop(S.put(Counted(0, &DROPS)).unwrap_err());
        let before = DROPS.load(Ordering::Relaxed);
        drop(a);
        assert_eq!(DROPS.load(Ordering::Relaxed), before, "b still holds it");
        assert_eq!(b.0, 1);
        drop(b);
        assert_eq!(DROPS.load(Ordering::Relaxed), before + 1);
        assert!(!S.is_occupied());
        // Reusable.
        let c = S.put(Counted(100, &DROPS)).unwrap();
        drop(c);
        assert_eq!(DROPS.load(Ordering::Relaxed), before + 101);
    }

    #[test]
    fn try_unwrap_only_from_the_last_handle() {
        static S: Slot<Counted> = Slot::new();
        static DROPS: AtomicU32 = AtomicU32::new(0);
        let a = S.put(Counted(0, &DROPS)).unwrap();
        let b = a.clone();
        let a = SlotRef::try_unwrap(a).unwrap_err();
        assert_eq!(SlotRef::count(&b), 2);
        drop(b);
        let v = SlotRef::try_unwrap(a).unwrap();
        assert_eq!(v.0, 0);
        assert!(!S.is_occupied());
        assert_eq!(std::format!("{S:?}"), "Slot(empty)");
    }

    #[test]
    fn handles_shared_across_threads() {
        static S: Slot<Counted> = Slot::new();
        static DROPS: AtomicU32 = AtomicU32::new(0);
        let a = S.put(Counted(7, &DROPS)).unwrap();
        let before = DROPS.load(Ordering::Relaxed);
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let h = a.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let c = h.clone();
                        assert_eq!(c.0, 7);
                    }
                })
            })
            .collect();
        drop(a);
        for t in threads {
            t.join().unwrap();
        }
        assert!(!S.is_occupied());
        assert_eq!(DROPS.load(Ordering::Relaxed), before + 7);
    }
}
