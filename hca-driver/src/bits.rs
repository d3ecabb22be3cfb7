//! Bitmap helpers for the driver's fixed-size allocators (mailbox blocks,
//! firmware pages): bit `i` set = item `i` in use.

const W: usize = u64::BITS as usize;

/// Whether bit `i` is set.
pub(crate) fn get(bits: &[u64], i: usize) -> bool {
    bits[i / W] >> (i % W) & 1 == 1
}

/// Sets or clears bit `i`.
pub(crate) fn put(bits: &mut [u64], i: usize, v: bool) {
    if v {
        bits[i / W] |= 1 << (i % W);
    } else {
        bits[i / W] &= !(1 << (i % W));
    }
}

/// Sets or clears bits `from .. from + len`.
pub(crate) fn put_range(bits: &mut [u64], from: usize, len: usize, v: bool) {
    for i in from..from + len {
        put(bits, i, v);
    }
}

/// The first clear bit in `from .. n`.
pub(crate) fn first_clear(bits: &[u64], from: usize, n: usize) -> Option<usize> {
    let mut i = from;
    while i < n {
        let word = !bits[i / W] >> (i % W);
        if word == 0 {
            i = (i / W + 1) * W;
            continue;
        }
        let found = i + word.trailing_zeros() as usize;
        return (found < n).then_some(found);
    }
    None
}

/// Length of the run of clear bits starting at `from` (at most `max`,
/// never past `n`).
pub(crate) fn clear_run(bits: &[u64], from: usize, n: usize, max: usize) -> usize {
    let mut len = 0;
    while len < max && from + len < n && !get(bits, from + len) {
        len += 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_searches_cross_words() {
        let mut b = [0u64; 3];
        put_range(&mut b, 60, 10, true);
        assert!(get(&b, 60) && get(&b, 69) && !get(&b, 70) && !get(&b, 59));
        assert_eq!(first_clear(&b, 60, 192), Some(70));
        assert_eq!(first_clear(&b, 0, 192), Some(0));
        assert_eq!(clear_run(&b, 0, 192, 100), 60);
        assert_eq!(clear_run(&b, 70, 192, 500), 122);
        assert_eq!(clear_run(&b, 70, 100, 500), 30);
        put_range(&mut b, 0, 192, true);
        assert_eq!(first_clear(&b, 0, 192), None);
        put(&mut b, 191, false);
        assert_eq!(first_clear(&b, 5, 192), Some(191));
        assert_eq!(first_clear(&b, 5, 191), None);
    }
}
