//! Makes the hardware variants of the scenarios real tests only when
//! `HCA_PCI` names a device at build time (`cfg(hca_hardware)`); otherwise
//! they are `#[ignore]`d, so `cargo test` reports them as ignored rather
//! than as passed. Cargo rebuilds when `HCA_PCI` changes, so
//! `HCA_PCI=<bdf> cargo test -p hca-tests` runs them.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(hca_hardware)");
    println!("cargo::rerun-if-env-changed=HCA_PCI");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("HCA_PCI").is_ok_and(|s| !s.trim().is_empty()) {
        println!("cargo::rustc-cfg=hca_hardware");
    }
}
