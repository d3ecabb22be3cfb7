//! The initialization segment (`initial_seg`, BAR0 offset 0): firmware
//! version, command queue address, command doorbell, the `initializing`
//! flag, the health buffer, the internal timer and the health counter.
//!
//! The driver reads these registers one dword at a time; the dwords it
//! decodes are `#[bitfield]` types (`bitfield-struct`) over an aligned
//! [`Be32`] with the most significant bit first, one PRM dword per type:
//! read the dword with a single 32-bit load, wrap it with
//! `from_bits(Be32::from_raw(raw))`.
//!
//! ```
//! use firmware_cmds::endian::Be32;
//! use firmware_cmds::init_seg::{CmdqAddrLSz, FwVersion, NIC_IFC_FULL_DRIVER};
//!
//! // 0x014 as a ConnectX-4 presents it before the driver writes it.
//! let w = CmdqAddrLSz::from_bits(Be32::new(0x0000_0056));
//! assert_eq!((w.log_cmdq_size(), w.log_cmdq_stride()), (5, 6));
//! assert_eq!(w.nic_interface(), NIC_IFC_FULL_DRIVER);
//! // 0x000 and 0x004 of the trace's ConnectX-4.
//! let v = FwVersion::from_words(0x000c_000e, 0x0005_04c4);
//! assert_eq!(v.to_string(), "14.12.1220");
//! ```

use core::fmt;

use bitfield_struct::bitfield;

use crate::endian::Be32;
use crate::prm_struct;

/// `fw_rev`: minor (31:16) and major (15:0) firmware version.
pub const FW_REV_OFFSET: usize = 0x000;
/// `cmdif_rev_fw_sub`: command interface revision (31:16) and firmware
/// sub-minor version (15:0).
pub const CMDIF_REV_FW_SUB_OFFSET: usize = 0x004;
/// `cmdq_addr_h`: bits 63:32 of the command queue address (write first).
pub const CMDQ_ADDR_H_OFFSET: usize = 0x010;
/// `cmdq_addr_l_sz`: bits 31:12 of the command queue address, NIC interface
/// mode, queue size and stride ([`CmdqAddrLSz`]).
pub const CMDQ_ADDR_L_SZ_OFFSET: usize = 0x014;
/// `cmd_dbell`: command doorbell, bit n hands slot n to the firmware.
pub const CMD_DBELL_OFFSET: usize = 0x018;
/// `initializing` dword ([`Initializing`]).
pub const INITIALIZING_OFFSET: usize = 0x1fc;
/// The health buffer ([`HealthBuffer`]).
pub const HEALTH_BUFFER_OFFSET: usize = 0x200;
/// `no_dram_nic_offset`.
pub const NO_DRAM_NIC_OFFSET: usize = 0x240;
/// `internal_timer_h`: bits 63:32 of the free-running internal timer.
pub const INTERNAL_TIMER_H_OFFSET: usize = 0x1000;
/// `internal_timer_l`: bits 31:0 of the internal timer (read h, l, h).
pub const INTERNAL_TIMER_L_OFFSET: usize = 0x1004;
/// `clear_int` dword: bit 0 clears the legacy interrupt.
pub const CLEAR_INT_OFFSET: usize = 0x100c;
/// `health_counter` dword ([`HealthCounter`]).
pub const HEALTH_COUNTER_OFFSET: usize = 0x1010;
/// `real_time`: the 64-bit real-time clock.
pub const REAL_TIME_OFFSET: usize = 0x1040;
/// Size of the initialization segment.
pub const INIT_SEG_SIZE: usize = 0x400c;

/// The command interface revision this crate speaks (`cmdif_rev`).
pub const CMDIF_REV: u16 = 5;
/// `fw_version` in the health buffer reads all ones when the device is gone
/// (surprise removal, PCI error).
pub const HEALTH_FW_VERSION_GONE: u32 = 0xffff_ffff;

/// `nic_interface`: full driver operation (Linux `MLX5_NIC_IFC_FULL`).
pub const NIC_IFC_FULL_DRIVER: u8 = 0;
/// `nic_interface`: the NIC interface is disabled.
pub const NIC_IFC_DISABLED: u8 = 1;
/// `nic_interface`: no DRAM NIC.
pub const NIC_IFC_NO_DRAM_NIC: u8 = 2;
/// `nic_interface`: software reset requested (Linux
/// `MLX5_NIC_IFC_SW_RESET`).
pub const NIC_IFC_SW_RESET: u8 = 7;

/// The dword at [`FW_REV_OFFSET`].
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct FwRev {
    /// `fw_rev_minor`.
    pub fw_rev_minor: u16,
    /// `fw_rev_major`.
    pub fw_rev_major: u16,
}

/// The dword at [`CMDIF_REV_FW_SUB_OFFSET`].
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CmdifRevFwSub {
    /// `cmd_interface_rev` (must be [`CMDIF_REV`]).
    pub cmd_interface_rev: u16,
    /// `fw_rev_subminor`.
    pub fw_rev_subminor: u16,
}

/// The dword at [`CMDQ_ADDR_L_SZ_OFFSET`].
///
/// `nic_interface` is three bits (10:8) here, as Linux reads and writes it
/// (`>> 8 & 7`, `MLX5_NIC_IFC_SW_RESET` = 7); the `mlx5_ifc` layout declares
/// two bits (9:8) with bits 11:10 reserved.
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct CmdqAddrLSz {
    /// `cmdq_phy_addr_31_12`: bits 31:12 of the queue's bus address.
    #[bits(20)]
    pub cmdq_phy_addr_31_12: u32,
    #[bits(1)]
    __: u8,
    /// `nic_interface` (`NIC_IFC_*`).
    #[bits(3)]
    pub nic_interface: u8,
    /// `log_cmdq_size`: log2 of the number of slots.
    #[bits(4)]
    pub log_cmdq_size: u8,
    /// `log_cmdq_stride`: log2 of the entry stride in bytes.
    #[bits(4)]
    pub log_cmdq_stride: u8,
}

impl CmdqAddrLSz {
    /// The value the driver writes: the low half of the queue address (4 KiB
    /// aligned) and `nic_interface`; the size and stride bits are read-only
    /// and written as zero.
    pub fn for_address(cmdq_addr: u64, nic_interface: u8) -> Self {
        Self::new()
            .with_cmdq_phy_addr_31_12(((cmdq_addr & 0xffff_ffff) >> 12) as u32)
            .with_nic_interface(nic_interface & 0x7)
    }
}

/// The dword at [`INITIALIZING_OFFSET`].
///
/// `fw_reset_supported` (bit 30) and the three-bit
/// `nic_interface_supported` (26:24) follow Linux
/// (`MLX5_FW_RESET_SUPPORTED_OFFSET`, `>> 24 & 7`); the `mlx5_ifc` layout
/// declares `nic_interface_supported` as bits 30:24.
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct Initializing {
    /// `initializing`: the firmware is busy; poll until 0.
    pub initializing: bool,
    /// The firmware supports a reset through `nic_interface`.
    pub fw_reset_supported: bool,
    #[bits(3)]
    __: u8,
    /// `nic_interface_supported`: bit mask of the supported `nic_interface`
    /// modes.
    #[bits(3)]
    pub nic_interface_supported: u8,
    #[bits(24)]
    __: u32,
}

/// The dword at [`HEALTH_COUNTER_OFFSET`].
#[bitfield(u32, repr = Be32, from = Be32::new, into = Be32::get, order = Msb)]
pub struct HealthCounter {
    /// `health_syndrome`.
    pub health_syndrome: u8,
    /// `health_counter`: must keep changing while the firmware is alive.
    #[bits(24)]
    pub health_counter: u32,
}

/// The firmware version: `major.minor.subminor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FwVersion {
    /// `fw_rev_major`.
    pub major: u16,
    /// `fw_rev_minor`.
    pub minor: u16,
    /// `fw_rev_subminor`.
    pub subminor: u16,
}

impl FwVersion {
    /// From the dwords at 0x000 and 0x004 (host order).
    pub fn from_words(fw_rev: u32, cmdif_rev_fw_sub: u32) -> Self {
        let r = FwRev::from_bits(Be32::new(fw_rev));
        let s = CmdifRevFwSub::from_bits(Be32::new(cmdif_rev_fw_sub));
        Self {
            major: r.fw_rev_major(),
            minor: r.fw_rev_minor(),
            subminor: s.fw_rev_subminor(),
        }
    }
}

/// `14.12.1220`.
impl fmt::Display for FwVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

/// A health syndrome (`health_buffer.synd`); non-zero means the firmware
/// failed.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HealthSyndrome(pub u8);

#[allow(missing_docs)] // Each constant is the Linux `MLX5_HEALTH_SYNDR_*` of the same name.
impl HealthSyndrome {
    pub const FW_ERR: HealthSyndrome = HealthSyndrome(0x01);
    pub const IRISC_ERR: HealthSyndrome = HealthSyndrome(0x07);
    pub const HW_UNRECOVERABLE_ERR: HealthSyndrome = HealthSyndrome(0x08);
    pub const CRC_ERR: HealthSyndrome = HealthSyndrome(0x09);
    pub const FETCH_PCI_ERR: HealthSyndrome = HealthSyndrome(0x0a);
    pub const HW_FTL_ERR: HealthSyndrome = HealthSyndrome(0x0b);
    pub const ASYNC_EQ_OVERRUN_ERR: HealthSyndrome = HealthSyndrome(0x0c);
    pub const EQ_ERR: HealthSyndrome = HealthSyndrome(0x0d);
    pub const EQ_INV: HealthSyndrome = HealthSyndrome(0x0e);
    pub const FFSER_ERR: HealthSyndrome = HealthSyndrome(0x0f);
    pub const HIGH_TEMP: HealthSyndrome = HealthSyndrome(0x10);
}

/// `(syndrome, name)` for every health syndrome, names as Linux prints them.
pub const HEALTH_SYNDROMES: &[(u8, &str)] = &[
    (0x01, "firmware internal error"),
    (0x07, "irisc not responding"),
    (0x08, "unrecoverable hardware error"),
    (0x09, "firmware CRC error"),
    (0x0a, "ICM fetch PCI error"),
    (0x0b, "HW fatal error"),
    (0x0c, "async EQ buffer overrun"),
    (0x0d, "EQ error"),
    (0x0e, "Invalid EQ referenced"),
    (0x0f, "FFSER error"),
    (0x10, "High temperature"),
];

impl HealthSyndrome {
    /// The name, or `None` for a syndrome the PRM does not define (0 is "no
    /// error" and has no name either).
    pub fn name(self) -> Option<&'static str> {
        HEALTH_SYNDROMES
            .iter()
            .find(|&&(s, _)| s == self.0)
            .map(|&(_, n)| n)
    }

    /// Whether this reports a failure.
    pub fn is_error(self) -> bool {
        self.0 != 0
    }
}

/// `firmware internal error(0x1)`; 0 prints `no error(0x0)`.
impl fmt::Display for HealthSyndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match (self.0, self.name()) {
            (0, _) => "no error",
            (_, Some(n)) => n,
            (_, None) => "unrecognized error",
        };
        write!(f, "{name}({:#x})", self.0)
    }
}

impl fmt::Debug for HealthSyndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

prm_struct! {
    /// The health buffer (`health_buffer`, init segment 0x200..0x240), read
    /// by the health poll.
    ///
    /// `assert_var`, `rfr` and `severity` are not in the layout facts (which
    /// leave 0x00..0x20 and 0x38 reserved); they follow Linux's `struct
    /// health_buffer` (`assert_var[5]`, `rfr_severity`: bit 7 recovery flow
    /// required, bits 2:0 severity).
    pub struct HealthBuffer("health_buffer", 0x40) {
        /// Five assert variables.
        assert_var: [u8; 20] = 0x00,
        /// Assert exit pointer (the PRM header spells it `assert_existptr`).
        assert_existptr: u32 = 0x20[31:0],
        /// Assert caller return address.
        assert_callra: u32 = 0x24[31:0],
        /// Firmware version (all ones: the device is gone).
        fw_version: u32 = 0x30[31:0],
        /// Hardware id.
        hw_id: u32 = 0x34[31:0],
        /// Recovery flow required.
        rfr: bool = 0x38[31:31],
        /// Severity.
        severity: u8 = 0x38[26:24],
        /// Index of the failing internal processor.
        irisc_index: u8 = 0x3c[31:24],
        /// Health syndrome ([`HealthSyndrome`]).
        synd: u8 = 0x3c[23:16],
        /// Extended syndrome.
        ext_synd: u16 = 0x3c[15:0],
    }
}

impl HealthBuffer {
    /// The health syndrome.
    pub fn syndrome(&self) -> HealthSyndrome {
        HealthSyndrome(self.get(Self::synd))
    }

    /// Whether `fw_version` reads all ones (the device does not answer).
    pub fn device_gone(&self) -> bool {
        self.get(Self::fw_version) == HEALTH_FW_VERSION_GONE
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn register_bit_positions() {
        let w = CmdqAddrLSz::new()
            .with_cmdq_phy_addr_31_12(0xfffff)
            .into_bits()
            .get();
        assert_eq!(w, 0xffff_f000);
        assert_eq!(
            CmdqAddrLSz::new().with_nic_interface(7).into_bits().get(),
            0x700
        );
        assert_eq!(
            CmdqAddrLSz::for_address(0x7_af3d_0000, NIC_IFC_SW_RESET)
                .into_bits()
                .get(),
            0xaf3d_0700
        );
        let i = Initializing::from_bits(Be32::new(0xc500_0000));
        assert!(i.initializing() && i.fw_reset_supported());
        assert_eq!(i.nic_interface_supported(), 5);
        let h = HealthCounter::from_bits(Be32::new(0x0112_3456));
        assert_eq!((h.health_syndrome(), h.health_counter()), (1, 0x12_3456));
        // One load in memory order.
        assert_eq!(
            CmdqAddrLSz::from_bits(Be32::from_raw(u32::from_ne_bytes([0, 0, 0, 0x51])))
                .log_cmdq_size(),
            5
        );
    }

    #[test]
    fn health_syndromes_print_with_names() {
        assert_eq!(
            format!("{}", HealthSyndrome::FW_ERR),
            "firmware internal error(0x1)"
        );
        assert_eq!(format!("{}", HealthSyndrome(0)), "no error(0x0)");
        assert_eq!(
            format!("{}", HealthSyndrome(0x42)),
            "unrecognized error(0x42)"
        );
        assert_eq!(HealthSyndrome::HIGH_TEMP.name(), Some("High temperature"));
        let mut b = HealthBuffer::new();
        b.set(HealthBuffer::synd, 0x0b).unwrap();
        b.set(HealthBuffer::fw_version, 0xffff_ffff).unwrap();
        assert_eq!(b.syndrome(), HealthSyndrome::HW_FTL_ERR);
        assert!(b.device_gone());
        assert_eq!(b.as_bytes()[0x3d], 0x0b);
    }
}
