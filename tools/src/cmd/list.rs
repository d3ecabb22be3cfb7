//! `hca list`: the mlx5 PCI functions of this machine.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use platform::vfio::{PciFunction, Sysfs};
use serde::Serialize;

use crate::error::Result;
use crate::output::{Table, json};

/// One function as `hca list --json` prints it.
#[derive(Debug, Serialize)]
pub struct ListEntry {
    /// PCI address.
    pub bdf: String,
    /// Vendor ID, `15b3`.
    pub vendor_id: String,
    /// Device ID, `1013`.
    pub device_id: String,
    /// Product name (`ConnectX-4 Lx`).
    pub name: Option<&'static str>,
    /// Bound driver, if any.
    pub driver: Option<String>,
    /// Whether it is bound to vfio-pci (usable with `-d`).
    pub vfio: bool,
    /// IOMMU group, if the IOMMU is on.
    pub iommu_group: Option<u32>,
}

impl From<&PciFunction> for ListEntry {
    fn from(f: &PciFunction) -> Self {
        Self {
            bdf: f.bdf.clone(),
            vendor_id: format!("{:04x}", f.vendor),
            device_id: format!("{:04x}", f.device),
            name: hca_driver::pci::mlx5_device_name(f.device),
            driver: f.driver.clone(),
            vfio: f.is_vfio_bound(),
            iommu_group: f.iommu_group,
        }
    }
}

/// Lists the mlx5 functions under `sysfs_root`.
pub fn run(sysfs_root: &Path, as_json: bool, out: &mut dyn Write) -> Result<ExitCode> {
    let sysfs = Sysfs::new(sysfs_root);
    let functions = if sysfs_root.join("bus/pci/devices").exists() {
        sysfs
            .list_all()?
            .into_iter()
            .filter(|f| hca_driver::pci::is_mlx5(f.vendor, f.device))
            .collect()
    } else {
        // No PCI bus in sysfs (a container without /sys/bus/pci): no device.
        log::debug!("{} has no bus/pci/devices", sysfs_root.display());
        Vec::new()
    };
    let entries: Vec<ListEntry> = functions.iter().map(ListEntry::from).collect();
    if as_json {
        json(out, &entries)?;
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        writeln!(
            out,
            "No mlx5 device found (ConnectX-4 or later, PCI vendor 15b3). Without -d, the other commands use the emulated ConnectX-4."
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["BDF", "ID", "NAME", "DRIVER", "IOMMU GROUP"]);
    for e in &entries {
        t.row(vec![
            e.bdf.clone(),
            format!("{}:{}", e.vendor_id, e.device_id),
            e.name.unwrap_or("?").to_string(),
            e.driver.clone().unwrap_or_else(|| "(none)".into()),
            e.iommu_group
                .map(|g| g.to_string())
                .unwrap_or_else(|| "(no IOMMU)".into()),
        ]);
    }
    t.write(out)?;
    Ok(ExitCode::SUCCESS)
}
