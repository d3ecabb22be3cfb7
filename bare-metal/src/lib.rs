//! # hca-bare-metal: hca-driver on bare metal, booted under QEMU
//!
//! The image (`src/main.rs`) boots on QEMU's aarch64 `virt` (target
//! `aarch64-unknown-none`, `-kernel` loads the ELF) and x86_64 `q35`
//! (target `x86_64-unknown-none`, `-kernel` enters it through its PVH note
//! after SeaBIOS). It enumerates PCI through ECAM, finds an
//! `ivshmem-plain` device whose BAR2 is an emulated ConnectX's BAR0
//! (served by `hca-ivshmem device` on the host), assigns its BARs (virt)
//! or reads them as SeaBIOS placed them (q35), runs hca-driver on
//! `platform::bare_metal`, makes an RDMA WRITE and a SEND to a peer
//! (`hca-ivshmem peer`, a second emulated ConnectX on a socket wire) that
//! checks the bytes, tears everything down and exits through semihosting
//! (virt) or `isa-debug-exit` (q35) with the verdict.
//! `tests/peers/run.sh bare_metal` runs the three, for both machines.
//!
//! The test itself is the same code on both (`src/image.rs`); each
//! machine's boot code, console, clock, exit and addresses are in
//! `src/arch/`.
//!
//! This library is what the image and its host-side peer share: the
//! layout of the exchange page ([`xchg`]), the machines' addresses
//! ([`virt`], [`q35`]) and the RC connection both ends set up ([`rc`]).
#![no_std]

/// Addresses of QEMU's aarch64 `virt` machine (QEMU 7.2, `highmem=off`:
/// the ECAM window is the low one) that the image uses; what to replace
/// when porting it to a board.
pub mod virt {
    /// PL011 UART.
    pub const UART: usize = 0x0900_0000;
    /// ECAM: 16 buses.
    pub const ECAM: usize = 0x3f00_0000;
    /// ECAM length.
    pub const ECAM_LEN: usize = 16 << 20;
    /// The 32-bit PCI memory window (bus address = CPU address).
    pub const PCI_MMIO: u64 = 0x1000_0000;
    /// Its length.
    pub const PCI_MMIO_LEN: u64 = 0x2eff_0000;
    /// RAM base.
    pub const RAM: u64 = 0x4000_0000;
    /// RAM size the image is linked for (`-m 128M`).
    pub const RAM_LEN: u64 = 128 << 20;
    /// The exchange page with the peer: the last page of RAM.
    pub const XCHG: u64 = RAM + RAM_LEN - 4096;
}

/// Addresses of QEMU's x86_64 `q35` machine (QEMU 7.2, `-m 128M`, booted
/// through SeaBIOS and the PVH entry of `-kernel`) that the image uses.
pub mod q35 {
    /// COM1, the 16550 UART's I/O port base.
    pub const COM1: u16 = 0x3f8;
    /// ECAM: the MCH's PCIEXBAR as SeaBIOS programs it (the ACPI MCFG
    /// says the same): 256 buses.
    pub const ECAM: usize = 0xb000_0000;
    /// ECAM length.
    pub const ECAM_LEN: usize = 256 << 20;
    /// The ACPI PM timer (3.579545 MHz, 24 bits): SeaBIOS sets the ICH9
    /// PMBASE to 0x600, the timer is at PMBASE + 8.
    pub const PM_TIMER: u16 = 0x608;
    /// `isa-debug-exit` (`iobase=0xf4,iosize=4`): writing `v` ends QEMU
    /// with status `(v << 1) | 1`.
    pub const DEBUG_EXIT: u16 = 0xf4;
    /// RAM base: guest-physical 0 (the RAM file maps one to one below
    /// 128 MiB; 640 KiB to 1 MiB is the legacy VGA/BIOS hole, unused).
    pub const RAM: u64 = 0;
    /// RAM size the image is linked for (`-m 128M`).
    pub const RAM_LEN: u64 = 128 << 20;
    /// The exchange page with the peer: 64 MiB, clear of the image (from
    /// 1 MiB), of SeaBIOS (below 1 MiB and its tables at the top of RAM)
    /// and of the PVH loader's start info (below 1 MiB).
    pub const XCHG: u64 = 0x0400_0000;
    /// What the image writes to [`DEBUG_EXIT`] for its status `s` (0
    /// passed, 1 failed, 3 exception, 4 panic): `s + 1`, so that QEMU
    /// exits with `(s + 1) << 1 | 1` (3 for a pass) and no outcome is
    /// QEMU's 0, which is also what a triple fault gives with
    /// `-no-reboot`. `tests/peers/run.sh` translates back.
    pub const fn debug_exit_value(s: u32) -> u32 {
        s.saturating_add(1)
    }
}

/// The RC connection the image and its peer agree on: the attributes of
/// the INIT, RTR and RTS transitions (`ibv_modify_qp`'s), the same on both
/// ends, so that one cannot drift from the other.
pub mod rc {
    use hca_driver::IbMtu;
    use hca_driver::verbs::{AccessFlags, AhAttr, DEFAULT_GID_INDEX, Gid, QpAttr, QpState};

    /// The port both ends use.
    pub const PORT: u8 = 1;

    /// Remote access granted on the QP (and the peer's memory region):
    /// RDMA WRITE into the buffer, and local writes of received SENDs.
    pub const ACCESS: AccessFlags =
        AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);

    /// RESET → INIT on [`PORT`], P_Key index 0, with [`ACCESS`].
    pub fn init() -> QpAttr {
        QpAttr::new()
            .state(QpState::Init)
            .port(PORT)
            .pkey_index(0)
            .access(ACCESS)
    }

    /// INIT → RTR toward the remote QP `dest_qpn` at RoCE GID `gid`: path
    /// MTU 1024, receive PSN 0, one incoming RDMA READ/atomic, RNR timer 12
    /// (0.64 ms).
    pub fn rtr(dest_qpn: u32, gid: Gid) -> QpAttr {
        QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(IbMtu::Mtu1024)
            .dest_qp_num(dest_qpn)
            .rq_psn(0)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(12)
            .ah(AhAttr::roce(PORT, gid, DEFAULT_GID_INDEX))
    }

    /// RTR → RTS: send PSN 0, ACK timeout 14 (67 ms), seven retries and
    /// seven RNR retries, one outstanding RDMA READ/atomic.
    pub fn rts() -> QpAttr {
        QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(0)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(1)
    }
}

/// The exchange page between the guest and the peer (big-endian 32-bit
/// words at these offsets; each side fills its fields, then its flag):
/// the out-of-band channel a TCP connection is for `hca pingpong`.
pub mod xchg {
    /// Peer flag: its fields are valid.
    pub const PEER_MAGIC: usize = 0x000;
    /// Value of [`PEER_MAGIC`]: "PEER".
    pub const PEER: u32 = 0x5045_4552;
    /// Peer QPN.
    pub const PEER_QPN: usize = 0x004;
    /// Peer GID (4 words).
    pub const PEER_GID: usize = 0x008;
    /// Peer buffer address, high and low words.
    pub const PEER_ADDR: usize = 0x018;
    /// Peer rkey.
    pub const PEER_RKEY: usize = 0x020;
    /// Peer flag: its QP is connected (RTS) and its receive posted.
    pub const PEER_READY: usize = 0x024;
    /// Value of [`PEER_READY`]: "RDY!".
    pub const READY: u32 = 0x5244_5921;
    /// Guest flag: its fields are valid.
    pub const GUEST_MAGIC: usize = 0x040;
    /// Value of [`GUEST_MAGIC`]: "GUES".
    pub const GUEST: u32 = 0x4755_4553;
    /// Guest QPN.
    pub const GUEST_QPN: usize = 0x044;
    /// Guest GID (4 words).
    pub const GUEST_GID: usize = 0x048;
    /// Offset in the peer buffer of the RDMA WRITE.
    pub const WRITE_OFF: usize = 0x058;
    /// Length of the RDMA WRITE.
    pub const WRITE_LEN: usize = 0x05c;
    /// Length of the SEND.
    pub const SEND_LEN: usize = 0x060;
    /// Seed of the byte patterns ([`pattern`]).
    pub const SEED: usize = 0x064;
    /// Peer verdict: [`PASS`] or [`FAIL`].
    pub const VERDICT: usize = 0x0c0;
    /// Verdict: the bytes matched.
    pub const PASS: u32 = 0x5041_5353;
    /// Verdict: they did not (message at [`MESSAGE`]).
    pub const FAIL: u32 = 0x4641_494c;
    /// Message length.
    pub const MESSAGE_LEN: usize = 0x0c4;
    /// Message bytes (up to 256), packed big-endian in words.
    pub const MESSAGE: usize = 0x100;

    /// Byte `i` of the pattern of `seed`: what the guest writes and sends
    /// (the SEND uses `seed + 1`).
    pub fn pattern(seed: u32, i: usize) -> u8 {
        let x = seed.wrapping_mul(0x9e37_79b9) ^ (i as u32).wrapping_mul(0x85eb_ca6b);
        (x ^ (x >> 13) ^ (x >> 24)) as u8
    }
}
