//! `hca bind <bdf>` / `hca unbind <bdf>`: move a PCI function to or from
//! vfio-pci, with the checks that decide whether `hca -d <bdf>` will work
//! afterwards (IOMMU group viability, the memlock limit, huge pages, the
//! vfio-pci module, the group's device node) and what to do about each.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use platform::vfio::{
    PciFunction, Sysfs, VFIO_PCI, check_memlock, memlock_status, normalize_bdf, wait_for_path,
};
use serde::Serialize;

use crate::error::{Result, ToolError};
use crate::output::json;

/// DMA memory a ConnectX-4 bring-up pins (the driver's default plan: about
/// 50 MiB of firmware pages plus queues).
const PLANNED_DMA: u64 = 64 << 20;

/// Arguments of `hca bind`.
#[derive(Debug, Args)]
pub struct BindArgs {
    /// The PCI function (dddd:bb:dd.f or bb:dd.f).
    bdf: String,
    /// Bind even if the function is not an mlx5 device.
    #[arg(long)]
    force: bool,
}

/// Arguments of `hca unbind`.
#[derive(Debug, Args)]
pub struct UnbindArgs {
    /// The PCI function (dddd:bb:dd.f or bb:dd.f).
    bdf: String,
}

/// One check and its verdict.
#[derive(Debug, Serialize)]
pub struct Check {
    /// What was checked (`iommu_group`, `memlock`, `hugepages`, `dev_node`).
    pub check: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was found, and what to do if it failed.
    pub message: String,
}

/// What `hca bind` / `hca unbind` did.
#[derive(Debug, Serialize)]
pub struct BindReport {
    /// PCI address.
    pub bdf: String,
    /// Product name.
    pub name: Option<&'static str>,
    /// Driver before.
    pub driver_before: Option<String>,
    /// Driver after.
    pub driver_after: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// The checks made after binding.
    pub checks: Vec<Check>,
}

fn driver_name(d: &Option<String>) -> &str {
    d.as_deref().unwrap_or("no driver")
}

fn write_report(r: &BindReport, as_json: bool, out: &mut dyn Write) -> Result<()> {
    if as_json {
        return json(out, r);
    }
    let name = r.name.map(|n| format!(" ({n})")).unwrap_or_default();
    if r.driver_before == r.driver_after {
        writeln!(
            out,
            "{}{name}: stays bound to {}",
            r.bdf,
            driver_name(&r.driver_after)
        )?;
    } else {
        writeln!(
            out,
            "{}{name}: {} -> {}",
            r.bdf,
            driver_name(&r.driver_before),
            driver_name(&r.driver_after)
        )?;
    }
    for c in &r.checks {
        writeln!(
            out,
            "  {:<4} {}",
            if c.ok { "ok" } else { "FIX" },
            c.message
        )?;
    }
    Ok(())
}

/// The checks that decide whether the function is usable through VFIO.
fn checks(sysfs: &Sysfs, f: &PciFunction, real_system: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    // IOMMU group viability.
    match sysfs.check_vfio_ready(&f.bdf) {
        Ok(_) => checks.push(Check {
            check: "iommu_group",
            ok: true,
            message: format!(
                "IOMMU group {} is viable: every device in it is bound to vfio-pci or to no driver",
                f.iommu_group.map(|g| g.to_string()).unwrap_or_default()
            ),
        }),
        Err(e) => checks.push(Check {
            check: "iommu_group",
            ok: false,
            message: e.to_string(),
        }),
    }
    // The group's device node (created by the kernel and udev after the bind).
    if real_system {
        if let Some(g) = f.iommu_group {
            let node = PathBuf::from(format!("/dev/vfio/{g}"));
            let ok = wait_for_path(&node, Duration::from_secs(2)).is_ok();
            checks.push(Check {
                check: "dev_node",
                ok,
                message: if ok {
                    format!("{} exists", node.display())
                } else {
                    format!(
                        "{} did not appear: check that the vfio-pci module is loaded and the kernel log (dmesg)",
                        node.display()
                    )
                },
            });
        }
    }
    // The memlock limit of this shell (the user who runs `hca -d` needs it).
    match memlock_status() {
        Ok(s) => match check_memlock(&s, PLANNED_DMA) {
            Ok(()) => checks.push(Check {
                check: "memlock",
                ok: true,
                message: if s.cap_ipc_lock {
                    "CAP_IPC_LOCK: no memlock limit applies".to_string()
                } else {
                    format!(
                        "RLIMIT_MEMLOCK allows the {} MiB of DMA memory a ConnectX-4 needs",
                        PLANNED_DMA >> 20
                    )
                },
            }),
            Err(e) => checks.push(Check {
                check: "memlock",
                ok: false,
                message: format!("{e} (for the user who runs `hca -d`)"),
            }),
        },
        Err(e) => checks.push(Check {
            check: "memlock",
            ok: false,
            message: format!("cannot read RLIMIT_MEMLOCK: {e}"),
        }),
    }
    checks.push(hugepages(sysfs.root()));
    checks
}

/// Free 2 MiB huge pages (the vfio backend uses them for DMA memory when
/// there are some, 4 KiB pages otherwise).
fn hugepages(root: &Path) -> Check {
    let dir = root.join("kernel/mm/hugepages/hugepages-2048kB");
    let read = |f: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let wanted = PLANNED_DMA >> 21;
    match read("free_hugepages") {
        Some(free) if free >= wanted => Check {
            check: "hugepages",
            ok: true,
            message: format!("{free} free 2 MiB huge pages"),
        },
        found => Check {
            check: "hugepages",
            ok: false,
            message: format!(
                "{} free 2 MiB huge pages: DMA memory falls back to 4 KiB pages (works, more IOMMU work); reserve {wanted} with `echo {wanted} > {}` as root, or boot with hugepages={wanted}",
                found.unwrap_or(0),
                dir.join("nr_hugepages").display()
            ),
        },
    }
}

/// `hca bind <bdf>`.
pub fn bind(
    a: &BindArgs,
    sysfs_root: &Path,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let sysfs = Sysfs::new(sysfs_root);
    let bdf = normalize_bdf(&a.bdf)?;
    let before = sysfs.function(&bdf)?;
    if !hca_driver::pci::is_mlx5(before.vendor, before.device) && !a.force {
        return Err(ToolError::Usage(format!(
            "{bdf} ({:04x}:{:04x}) is not an mlx5 device (ConnectX-4 or later); pass --force to bind it anyway",
            before.vendor, before.device
        )));
    }
    let after = if before.is_vfio_bound() {
        before.clone()
    } else {
        if !sysfs_root.join("bus/pci/drivers").join(VFIO_PCI).exists() {
            return Err(platform::Error::VfioPciNotLoaded.into());
        }
        if before.iommu_group.is_none() {
            return Err(platform::Error::NoIommuGroup { bdf }.into());
        }
        sysfs.bind_vfio(&bdf)?
    };
    let checks = checks(&sysfs, &after, sysfs_root == Path::new("/sys"));
    write_change(before, after, checks, as_json, out)
}

/// `hca unbind <bdf>`.
pub fn unbind(
    a: &UnbindArgs,
    sysfs_root: &Path,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let sysfs = Sysfs::new(sysfs_root);
    let bdf = normalize_bdf(&a.bdf)?;
    let before = sysfs.function(&bdf)?;
    let after = if before.is_vfio_bound() {
        sysfs.unbind_vfio(&bdf)?
    } else {
        before.clone()
    };
    let mut checks = Vec::new();
    if after.driver.is_none() {
        checks.push(Check {
            check: "driver",
            ok: false,
            message: "no driver took the function: load its kernel driver (`modprobe mlx5_core`) or bind it again with `hca bind`".to_string(),
        });
    }
    write_change(before, after, checks, as_json, out)
}

/// Writes the report of a bind or unbind: the function as it is `after`,
/// the driver it had `before`, and the checks.
fn write_change(
    before: PciFunction,
    after: PciFunction,
    checks: Vec<Check>,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let report = BindReport {
        bdf: after.bdf,
        name: if after.vendor == hca_driver::pci::MELLANOX_VENDOR_ID {
            hca_driver::pci::mlx5_device_name(after.device)
        } else {
            None
        },
        driver_before: before.driver,
        driver_after: after.driver,
        iommu_group: after.iommu_group,
        checks,
    };
    write_report(&report, as_json, out)?;
    Ok(ExitCode::SUCCESS)
}
