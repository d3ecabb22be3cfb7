//! Memory barriers between the CPU and the device, named as in rdma-core's
//! `util/udma_barrier.h`.
//!
//! Every instruction below was checked against that header (rdma-core commit
//! 05e55372a0d6) for x86_64 and aarch64. In the header, each barrier is an
//! `asm volatile(... ::: "memory")`, so it is also a compiler barrier; the
//! `asm!` blocks here have no `nomem` option for the same effect.
//!
//! | function | use | x86_64 | aarch64 |
//! |---|---|---|---|
//! | [`udma_to_device_barrier`] | before an MMIO store that makes the device read memory (WQE and doorbell record before the doorbell) | compiler barrier only | `dmb oshst` |
//! | [`udma_from_device_barrier`] | after seeing a valid/ownership bit in device-written memory, before reading the rest | `lfence` | `dmb oshld` |
//! | [`udma_ordering_write_barrier`] | between writing data and its valid bit in memory the device reads | = `udma_to_device_barrier` | = `udma_to_device_barrier` |
//! | [`mmio_flush_writes`] | after write-combined (BlueFlame) stores: flush them, and keep two WC stores from combining | `sfence` | `dsb st` |
//! | [`mmio_wc_start`] | before write-combined stores: keep them after earlier MMIO and memory stores | = `mmio_flush_writes` | = `mmio_flush_writes` |
//! | [`mmio_ordered_writes_hack`] | keep two MMIO stores in order | = `mmio_flush_writes` | = `mmio_flush_writes` |
//!
//! The header's `mmio_wc_spinlock`/`mmio_wc_spinunlock` pair (take a lock,
//! then `mmio_wc_start` except on x86, where the lock's atomic already orders
//! write-combined stores; `mmio_flush_writes` before releasing) is left to the
//! caller, who owns the lock.
//!
//! [`full_barrier`] is not in the header: it is the Linux kernel's `mb()`
//! (`mfence` on x86_64, `dsb sy` on aarch64, from
//! `arch/{x86,arm64}/include/asm/barrier.h`), for slow paths that need every
//! earlier access complete.
//!
//! rdma-core refuses to build for an architecture it has no barriers for.
//! Here other architectures get a sequentially consistent fence, which orders
//! normal memory between CPUs but is **not** known to order accesses with
//! respect to a device: only x86_64 and aarch64 are supported targets. Under
//! Miri, which cannot run inline assembly, the same fence stands in so that
//! code using the barriers can be checked.

#[allow(unused_imports)]
use core::sync::atomic::{Ordering, fence};

/// `udma_to_device_barrier()`: makes every earlier store to memory visible to
/// the device before any later store, in particular before the MMIO store
/// that makes the device start reading (WQE contents before the doorbell
/// record, the doorbell record before the doorbell register).
///
/// x86_64: a compiler barrier (x86 keeps stores to normal memory in order);
/// aarch64: `dmb oshst`.
#[inline(always)]
pub fn udma_to_device_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: an empty asm block; without `nomem` the compiler must assume it
    // reads and writes memory, which is exactly the compiler barrier of the
    // header's `asm volatile("" ::: "memory")`.
    unsafe {
        core::arch::asm!("", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; it only orders memory accesses.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

/// `udma_from_device_barrier()`: after observing a store of the device (an
/// ownership or valid bit in a CQE or EQE, or an MMIO read), makes every
/// later load see the stores the device made before it.
///
/// x86_64: `lfence`; aarch64: `dmb oshld`.
#[inline(always)]
pub fn udma_from_device_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `lfence` only orders loads.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; it only orders memory accesses.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

/// `udma_ordering_write_barrier()`: orders stores to memory the device reads
/// so that it cannot see a later store (a valid bit) without the earlier ones
/// (the data). The header defines it as [`udma_to_device_barrier`].
#[inline(always)]
pub fn udma_ordering_write_barrier() {
    udma_to_device_barrier();
}

/// `mmio_flush_writes()`: pushes write-combined MMIO stores (BlueFlame) out to
/// the device promptly, and keeps a store after it from being combined with
/// one before it.
///
/// x86_64: `sfence`; aarch64: `dsb st`.
#[inline(always)]
pub fn mmio_flush_writes() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` only orders and drains stores.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; it only orders and completes stores.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

/// `mmio_wc_start()`: before a write-combined (BlueFlame) copy, keeps it
/// after every earlier MMIO store and implies [`udma_to_device_barrier`]. The
/// header defines it as [`mmio_flush_writes`].
#[inline(always)]
pub fn mmio_wc_start() {
    mmio_flush_writes();
}

/// `mmio_ordered_writes_hack()`: keeps two MMIO stores in order. The header
/// defines it as [`mmio_flush_writes`].
#[inline(always)]
pub fn mmio_ordered_writes_hack() {
    mmio_flush_writes();
}

/// A full barrier for slow paths (command interface, teardown): every earlier
/// load and store completes before any later one. This is Linux's `mb()`:
/// `mfence` on x86_64, `dsb sy` on aarch64.
#[inline(always)]
pub fn full_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `mfence` only orders and completes memory accesses.
    unsafe {
        core::arch::asm!("mfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; it only orders and completes accesses.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barriers_execute() {
        udma_to_device_barrier();
        udma_from_device_barrier();
        udma_ordering_write_barrier();
        mmio_flush_writes();
        mmio_wc_start();
        mmio_ordered_writes_hack();
        full_barrier();
    }

    /// The machine code of each barrier, read back from this test binary:
    /// the instruction the table above (and rdma-core's header) names, and
    /// no other fence. A barrier that lost or changed its instruction fails
    /// here, which executing it cannot show.
    #[cfg(all(any(target_arch = "x86_64", target_arch = "aarch64"), not(miri)))]
    mod machine_code {
        use super::*;

        /// The fences a barrier may contain, by name.
        #[cfg(target_arch = "x86_64")]
        const FENCES: [(&str, &[u8]); 3] = [
            ("lfence", &[0x0f, 0xae, 0xe8]),
            ("sfence", &[0x0f, 0xae, 0xf8]),
            ("mfence", &[0x0f, 0xae, 0xf0]),
        ];
        /// `dmb`/`dsb` with their option (CRm) in bits 11:8, little-endian.
        #[cfg(target_arch = "aarch64")]
        const FENCES: [(&str, &[u8]); 4] = [
            ("dmb oshst", &0xd503_32bf_u32.to_le_bytes()),
            ("dmb oshld", &0xd503_31bf_u32.to_le_bytes()),
            ("dsb st", &0xd503_3e9f_u32.to_le_bytes()),
            ("dsb sy", &0xd503_3f9f_u32.to_le_bytes()),
        ];

        /// Which of [`FENCES`] occur in the first bytes of `f` (bit i for
        /// `FENCES[i]`; the wrappers below are a few instructions long, the
        /// barriers are inlined into them).
        fn fences_in(f: fn()) -> u8 {
            let p = f as *const u8;
            let mut code = [0u8; 48];
            for (i, b) in code.iter_mut().enumerate() {
                // SAFETY: `p` is the entry of a function of this binary,
                // whose text is mapped readable and is longer than 48
                // bytes together with what follows it in the section; the
                // bytes are only read, never executed or written.
                *b = unsafe { core::ptr::read_volatile(p.add(i)) };
            }
            // Up to the function's return (`ret`), so the next function's
            // code is not taken for this one's.
            #[cfg(target_arch = "x86_64")]
            let end = code.iter().position(|&b| b == 0xc3);
            #[cfg(target_arch = "aarch64")]
            let end = code
                .chunks_exact(4)
                .position(|w| w == 0xd65f_03c0_u32.to_le_bytes())
                .map(|i| 4 * i);
            let code = &code[..end.expect("the wrapper returns within 48 bytes")];
            let mut found = 0;
            for (i, (_, enc)) in FENCES.iter().enumerate() {
                if code.windows(enc.len()).any(|w| w == *enc) {
                    found |= 1 << i;
                }
            }
            found
        }

        /// The bit mask of fences named `names`.
        fn mask(names: &[&str]) -> u8 {
            let mut m = 0;
            for n in names {
                let i = FENCES
                    .iter()
                    .position(|(f, _)| f == n)
                    .expect("a known fence");
                m |= 1 << i;
            }
            m
        }

        #[inline(never)]
        fn to_device() {
            udma_to_device_barrier();
        }
        #[inline(never)]
        fn from_device() {
            udma_from_device_barrier();
        }
        #[inline(never)]
        fn ordering_write() {
            udma_ordering_write_barrier();
        }
        #[inline(never)]
        fn flush_writes() {
            mmio_flush_writes();
        }
        #[inline(never)]
        fn wc_start() {
            mmio_wc_start();
        }
        #[inline(never)]
        fn ordered_writes_hack() {
            mmio_ordered_writes_hack();
        }
        #[inline(never)]
        fn full() {
            full_barrier();
        }

        /// A barrier's name, its wrapper, and the fences it must contain.
        type Expect = (&'static str, fn(), &'static [&'static str]);

        #[test]
        fn each_barrier_is_its_instruction() {
            #[cfg(target_arch = "x86_64")]
            let want: [Expect; 7] = [
                ("udma_to_device_barrier", to_device, &[]),
                ("udma_from_device_barrier", from_device, &["lfence"]),
                ("udma_ordering_write_barrier", ordering_write, &[]),
                ("mmio_flush_writes", flush_writes, &["sfence"]),
                ("mmio_wc_start", wc_start, &["sfence"]),
                ("mmio_ordered_writes_hack", ordered_writes_hack, &["sfence"]),
                ("full_barrier", full, &["mfence"]),
            ];
            #[cfg(target_arch = "aarch64")]
            let want: [Expect; 7] = [
                ("udma_to_device_barrier", to_device, &["dmb oshst"]),
                ("udma_from_device_barrier", from_device, &["dmb oshld"]),
                (
                    "udma_ordering_write_barrier",
                    ordering_write,
                    &["dmb oshst"],
                ),
                ("mmio_flush_writes", flush_writes, &["dsb st"]),
                ("mmio_wc_start", wc_start, &["dsb st"]),
                ("mmio_ordered_writes_hack", ordered_writes_hack, &["dsb st"]),
                ("full_barrier", full, &["dsb sy"]),
            ];
            for (name, f, fences) in want {
                assert_eq!(fences_in(f), mask(fences), "{name}: {fences:?}");
            }
        }
    }
}
