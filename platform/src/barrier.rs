//! Memory barriers between the CPU and the device, named as in rdma-core's
//! `util/udma_barrier.h`.
//!
//! | function | use | x86_64 | aarch64 |
//! |---|---|---|---|
//! | [`udma_to_device_barrier`] | order stores to DMA memory before a later store (e.g. WQE before doorbell record) | compiler barrier | `dmb oshst` |
//! | [`udma_from_device_barrier`] | order a load of device-written memory (ownership bit) before later loads | `lfence` | `dmb oshld` |
//! | [`mmio_flush_writes`] | push write-combined MMIO stores out | `sfence` | `dsb st` |
//! | [`mmio_wc_start`] | before a write-combined (BlueFlame) copy | `sfence` (= flush) | `dsb st` |
//!
//! On other architectures a sequentially consistent fence is used.

#[allow(unused_imports)]
use core::sync::atomic::{Ordering, compiler_fence, fence};

/// Orders all prior stores to DMA memory before any later store the device
/// may observe (WQE contents before the doorbell record, the doorbell record
/// before the doorbell register).
#[inline(always)]
pub fn udma_to_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::SeqCst);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory or register side effects
    // beyond ordering.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// Orders a load of device-written memory (an ownership bit) before the loads
/// of the rest of the entry.
#[inline(always)]
pub fn udma_from_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` only orders loads.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// Pushes write-combined MMIO stores (BlueFlame) out to the device.
#[inline(always)]
pub fn mmio_flush_writes() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders and drains stores.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// Starts a write-combined MMIO sequence: prior stores to DMA memory are
/// visible before any of the write-combined stores.
#[inline(always)]
pub fn mmio_wc_start() {
    mmio_flush_writes();
}

/// A full fence for the slow path (command interface, teardown).
#[inline(always)]
pub fn full_barrier() {
    fence(Ordering::SeqCst);
}
