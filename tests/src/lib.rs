//! # hca-tests: integration tests of the mlx5 driver
//!
//! The scenarios in `tests/` run against `hca-emu` by default and against a
//! real ConnectX through the vfio backend when `HCA_PCI=<bdf>` is set: this
//! suite is what a hardware bring-up engineer runs on a new card.
