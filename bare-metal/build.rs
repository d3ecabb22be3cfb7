//! Links the image with its machine's linker script when built for
//! aarch64-unknown-none (`aarch64-virt.ld`) or x86_64-unknown-none
//! (`x86_64-q35.ld`, linked at fixed addresses: the 32-bit PVH entry
//! needs absolute ones, so not as a position-independent executable).

fn main() {
    println!("cargo:rerun-if-changed=aarch64-virt.ld");
    println!("cargo:rerun-if-changed=x86_64-q35.ld");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    match std::env::var("TARGET").as_deref() {
        Ok("aarch64-unknown-none") => {
            println!("cargo:rustc-link-arg-bins=-T{dir}/aarch64-virt.ld");
        }
        Ok("x86_64-unknown-none") => {
            println!("cargo:rustc-link-arg-bins=-T{dir}/x86_64-q35.ld");
            println!("cargo:rustc-link-arg-bins=--no-pie");
        }
        _ => {}
    }
}
