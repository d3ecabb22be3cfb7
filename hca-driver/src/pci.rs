//! The mlx5 PCI functions: the vendor ID and the table of the device IDs
//! this driver takes, with their product names (ConnectX-4 and later,
//! BlueField). Used to name a device ([`PciIds::product`](crate::PciIds::product))
//! and by tools that look for mlx5 functions on a PCI bus.
//!
//! ```
//! use hca_driver::pci;
//! assert_eq!(pci::mlx5_device_name(0x1017), Some("ConnectX-5"));
//! assert!(pci::is_mlx5(pci::MELLANOX_VENDOR_ID, 0x1013));
//! assert!(!pci::is_mlx5(pci::MELLANOX_VENDOR_ID, 0x1003)); // ConnectX-3: mlx4
//! ```

/// Mellanox / NVIDIA networking PCI vendor ID.
pub const MELLANOX_VENDOR_ID: u16 = 0x15b3;

/// The mlx5 devices (vendor [`MELLANOX_VENDOR_ID`]): PCI device ID and
/// product name, ConnectX-4 and later and BlueField.
pub const MLX5_DEVICES: &[(u16, &str)] = &[
    (0x1013, "ConnectX-4"),
    (0x1014, "ConnectX-4 VF"),
    (0x1015, "ConnectX-4 Lx"),
    (0x1016, "ConnectX-4 Lx VF"),
    (0x1017, "ConnectX-5"),
    (0x1018, "ConnectX-5 VF"),
    (0x1019, "ConnectX-5 Ex"),
    (0x101a, "ConnectX-5 Ex VF"),
    (0x101b, "ConnectX-6"),
    (0x101c, "ConnectX-6 VF"),
    (0x101d, "ConnectX-6 Dx"),
    (0x101e, "ConnectX VF"),
    (0x101f, "ConnectX-6 Lx"),
    (0x1021, "ConnectX-7"),
    (0x1023, "ConnectX-8"),
    (0xa2d6, "BlueField-2"),
    (0xa2dc, "BlueField-3"),
];

/// The product name of an mlx5 device ID, if it is one.
pub fn mlx5_device_name(device_id: u16) -> Option<&'static str> {
    MLX5_DEVICES
        .iter()
        .find(|(id, _)| *id == device_id)
        .map(|(_, name)| *name)
}

/// Whether a PCI function with these IDs is an mlx5 device (this driver's).
pub fn is_mlx5(vendor_id: u16, device_id: u16) -> bool {
    vendor_id == MELLANOX_VENDOR_ID && mlx5_device_name(device_id).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_mlx5_devices_only() {
        assert_eq!(mlx5_device_name(0x1013), Some("ConnectX-4"));
        assert_eq!(mlx5_device_name(0x101d), Some("ConnectX-6 Dx"));
        assert_eq!(mlx5_device_name(0xa2dc), Some("BlueField-3"));
        // An unknown Mellanox device ID is not an mlx5 function, nor is an
        // mlx5 device ID under another vendor.
        assert_eq!(mlx5_device_name(0xcafe), None);
        assert!(!is_mlx5(MELLANOX_VENDOR_ID, 0xcafe));
        assert!(!is_mlx5(0x8086, 0x1013));
        assert!(is_mlx5(0x15b3, 0x1021));
        // No ID twice.
        for (i, (a, _)) in MLX5_DEVICES.iter().enumerate() {
            assert!(MLX5_DEVICES[i + 1..].iter().all(|(b, _)| a != b), "{a:#x}");
        }
    }
}
