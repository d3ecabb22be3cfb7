//! Bare-metal backend: DMA memory from a physically contiguous region the
//! caller hands in, registers at a virtual address the caller maps.
