//! The doorbell-cost model of the side-by-side benchmark against libmlx5
//! (`bench/incumbent/run.sh`), shared by both of our programs
//! (`verbs-core/examples/vs_libmlx5.rs` and hca-tests'
//! `vs_libmlx5_driver`); the twin of the C side's
//! `bench/incumbent/doorbell_model.h`.
//!
//! Environment variable `DOORBELL_MODEL`: `nt` (default) a non-temporal
//! 8-byte store to a page of its own plus `sfence`, `spin:N` N pause
//! instructions, `none` nothing.
#![allow(dead_code, missing_docs)]

use std::sync::atomic::{AtomicU32, Ordering};

/// 0 none, 1 non-temporal store + sfence, 2 spin.
static DB_KIND: AtomicU32 = AtomicU32::new(1);
static DB_SPINS: AtomicU32 = AtomicU32::new(0);

/// A page of its own for the model's non-temporal store.
#[repr(C, align(4096))]
struct DbPage([u64; 512]);
static mut DB_PAGE: DbPage = DbPage([0; 512]);

pub fn doorbell_model_init() {
    match std::env::var("DOORBELL_MODEL").as_deref() {
        Err(_) | Ok("nt") => DB_KIND.store(1, Ordering::Relaxed),
        Ok("none") => DB_KIND.store(0, Ordering::Relaxed),
        Ok(m) => match m.strip_prefix("spin:").and_then(|n| n.parse::<u32>().ok()) {
            Some(n) => {
                DB_KIND.store(2, Ordering::Relaxed);
                DB_SPINS.store(n, Ordering::Relaxed);
            }
            None => {
                eprintln!("DOORBELL_MODEL must be nt, none or spin:N, not {m}");
                std::process::exit(2);
            }
        },
    }
}

/// What a doorbell to real MMIO costs beyond the store to ordinary memory
/// (see the module documentation); the twin of the C side's
/// `doorbell_cost`.
#[inline(always)]
pub fn doorbell_cost() {
    match DB_KIND.load(Ordering::Relaxed) {
        1 => {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the page is a static only this function touches (the
            // benchmark is single-threaded), accessed through raw pointers
            // with volatile and non-temporal accesses; `sfence` has no
            // memory-safety requirement.
            unsafe {
                let v = (&raw const DB_PAGE.0[1]).read_volatile();
                core::arch::x86_64::_mm_stream_si64((&raw mut DB_PAGE.0[0]).cast(), v as i64);
                core::arch::x86_64::_mm_sfence();
            }
            #[cfg(not(target_arch = "x86_64"))]
            // SAFETY: as above: a static page only this thread touches.
            unsafe {
                let v = (&raw const DB_PAGE.0[1]).read_volatile();
                (&raw mut DB_PAGE.0[0]).write_volatile(v);
                std::sync::atomic::fence(Ordering::SeqCst);
            }
        }
        2 => {
            for _ in 0..DB_SPINS.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        }
        _ => {}
    }
}
