//! # hca-emu: a software ConnectX
//!
//! An emulated ConnectX-4 that behaves like the hardware interface: the
//! driver sees BAR0 and DMA memory behind a simulated IOMMU, the firmware
//! model executes the command queue from DMA memory and validates like
//! firmware, the data-path engine executes posted WQEs and writes CQEs, and
//! faults can be injected. Every test, benchmark and the `hca` tool run on it
//! when no card is present.
