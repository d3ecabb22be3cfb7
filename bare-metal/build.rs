//! Links the image with `aarch64-virt.ld` when built for
//! aarch64-unknown-none.

fn main() {
    println!("cargo:rerun-if-changed=aarch64-virt.ld");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("TARGET").as_deref() == Ok("aarch64-unknown-none") {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!("cargo:rustc-link-arg-bins=-T{dir}/aarch64-virt.ld");
    }
}
