//! # hca-shm-bridge: hca-emu behind a BAR0 in shared memory
//!
//! A program (or a virtual machine) stores into a shared memory file that
//! stands for a ConnectX's BAR0 (the init segment, then the UAR pages);
//! a bridge thread of the process running [`hca_emu`] watches that file
//! for doorbells and delivers them to the emulated function, and publishes
//! the registers the program reads ([`bridge`]). The memory itself is a
//! [`shm::SharedBar`]: a new memfd, or an existing file (QEMU's
//! `ivshmem-plain` backing file).
//!
//! Two front ends use it: the VFIO preload library (`vfio-emu`, BAR0
//! mapped by the program's `mmap` of the device fd) and `hca-ivshmem`
//! (`tools`, BAR0 as BAR2 of an ivshmem-plain device in a QEMU guest).
//!
//! The mappings are made with raw `mmap`/`munmap` system calls, not the
//! libc functions: inside the preload library those are interposed.

pub mod bridge;
pub mod shm;

use std::time::Duration;

use hca_emu::{Clock, EmuConfig, Execution};

/// `base` adjusted for a function whose BAR0 is reached through a bridge:
/// real clock, device thread, uncached UARs (the shared memory is mapped
/// uncached by vfio-pci, and a polling bridge cannot see the order of a
/// write-combined burst), and no `initializing` delay after the command
/// queue address is written: the program's read of 0x1fc right after that
/// write cannot see the bridge's delivery (a posted write followed by a
/// read is ordered on PCIe, not through a polled shared page), so it would
/// go on to ring a doorbell the device then ignores. The boot and reset
/// delays stay.
pub fn bridged_config(base: EmuConfig) -> EmuConfig {
    EmuConfig {
        clock: Clock::Real,
        execution: Execution::DeviceThread,
        uar_write_combining: false,
        initializing_delay: Duration::ZERO,
        ..base
    }
}
