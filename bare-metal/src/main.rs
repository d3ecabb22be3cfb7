//! The bare-metal image: boots on QEMU's aarch64 `virt` machine (`-kernel`
//! loads this ELF), finds the emulated ConnectX behind `ivshmem-plain`
//! through ECAM, drives it with hca-driver on `platform::bare_metal`, and
//! exits through semihosting with 0 when everything passed.
//!
//! Built for `aarch64-unknown-none` only; on other targets this binary
//! just says so. See the crate docs (`src/lib.rs`) and
//! `tests/peers/run.sh bare_metal`.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
mod image;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "hca-bare-metal is a bare-metal image: build it with \
         `cargo build -p hca-bare-metal --release --target aarch64-unknown-none` \
         and boot it with `tests/peers/run.sh bare_metal`"
    );
    std::process::exit(2);
}
