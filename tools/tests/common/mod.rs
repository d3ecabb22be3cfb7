//! What the end-to-end tests of the `hca` binary share.

use std::process::{Command, Output};

use serde_json::Value;

/// Runs the `hca` binary with `args` (no RUST_LOG or RUST_BACKTRACE from
/// the environment).
pub fn hca(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .env_remove("HCA_EMU_WIRE")
        .output()
        .expect("run hca")
}

/// Parses `s` as JSON; panics saying what it was otherwise.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}
