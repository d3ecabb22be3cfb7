//! Data-path benchmarks (placeholder until the criterion benches land).
fn main() {}
