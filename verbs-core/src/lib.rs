//! # verbs-core: the mlx5 data path
//!
//! `#![no_std]`, no allocation. Builds work-queue entries (control, remote
//! address, atomic, data, inline, datagram and Ethernet segments) into send
//! queues, posts receive and shared-receive WQEs, updates doorbell records and
//! rings the UAR doorbell (or copies the WQE to the BlueFlame register), and
//! parses completion queue entries into work completions with every index and
//! length bounds-checked. Generic over [`platform::Mmio`], so the doorbell of
//! real hardware compiles to one 64-bit store.
#![no_std]
