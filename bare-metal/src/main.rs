//! The bare-metal image: boots on QEMU's aarch64 `virt` machine (`-kernel`
//! loads this ELF) or on its x86_64 `q35` machine (`-kernel` through the
//! ELF's PVH entry), finds the emulated ConnectX behind `ivshmem-plain`
//! through ECAM, drives it with hca-driver on `platform::bare_metal`, and
//! exits through semihosting (aarch64) or `isa-debug-exit` (x86_64) with a
//! status that says whether everything passed.
//!
//! Built for `aarch64-unknown-none` and `x86_64-unknown-none` only; on
//! other targets this binary just says so. See the crate docs
//! (`src/lib.rs`) and `tests/peers/run.sh bare_metal`.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

/// The console: the machine's UART (`arch::put`).
#[cfg(target_os = "none")]
struct Uart;

#[cfg(target_os = "none")]
impl core::fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                arch::put(b'\r');
            }
            arch::put(b);
        }
        Ok(())
    }
}

/// A line on the console.
#[cfg(target_os = "none")]
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::Uart, format_args!("{}\n", format_args!($($t)*)));
    }};
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
#[path = "arch/aarch64.rs"]
mod arch;
#[cfg(all(target_arch = "x86_64", target_os = "none"))]
#[path = "arch/x86_64.rs"]
mod arch;

#[cfg(target_os = "none")]
mod image;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "hca-bare-metal is a bare-metal image: build it with \
         `cargo build -p hca-bare-metal --release --target aarch64-unknown-none` \
         (or x86_64-unknown-none) and boot it with `tests/peers/run.sh bare_metal`"
    );
    std::process::exit(2);
}
