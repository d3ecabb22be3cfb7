//! PCI functions as Linux shows them under `/sys`: discovery, driver
//! binding, IOMMU groups and their viability, and the bind helper.
//!
//! The root (`/sys`) is injectable so that everything here is tested against
//! a fake tree.

use std::format;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::time::{Duration, Instant};
use std::vec::Vec;

use crate::Error;

/// The driver the vfio backend needs.
pub const VFIO_PCI: &str = "vfio-pci";

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// PCI address, `dddd:bb:dd.f`.
    pub bdf: String,
    /// Vendor ID.
    pub vendor: u16,
    /// Device ID.
    pub device: u16,
    /// Class code (24 bits).
    pub class: u32,
    /// The bound driver, if any.
    pub driver: Option<String>,
    /// The IOMMU group, if the IOMMU is on.
    pub iommu_group: Option<u32>,
}

impl PciFunction {
    /// Whether it is bound to vfio-pci (or a vendor variant of it, such as
    /// mlx5_vfio_pci).
    pub fn is_vfio_bound(&self) -> bool {
        self.driver.as_deref().is_some_and(is_vfio_driver)
    }
}

fn is_vfio_driver(d: &str) -> bool {
    d == VFIO_PCI || d.ends_with("vfio_pci") || d.ends_with("vfio-pci")
}

/// Whether a device bound to `driver` lets VFIO own its IOMMU group: drivers
/// that declare `driver_managed_dma` in Linux (the vfio-pci family,
/// pci-stub, and pcieport for the bridges in a group).
fn driver_allows_vfio(driver: Option<&str>) -> bool {
    match driver {
        None => true,
        Some(d) => is_vfio_driver(d) || d == "pci-stub" || d == "pcieport",
    }
}

/// Checks and normalises a PCI address: `02:00.0` becomes `0000:02:00.0`.
pub fn normalize_bdf(bdf: &str) -> Result<String, Error> {
    let bad = || Error::InvalidBdf(bdf.to_string());
    let s = bdf.trim().to_ascii_lowercase();
    let full = if s.len() == 7 { format!("0000:{s}") } else { s };
    let b = full.as_bytes();
    if b.len() != 12 || b[4] != b':' || b[7] != b':' || b[10] != b'.' {
        return Err(bad());
    }
    let hex = |r: core::ops::Range<usize>| full[r.clone()].bytes().all(|c| c.is_ascii_hexdigit());
    if !(hex(0..4) && hex(5..7) && hex(8..10)) {
        return Err(bad());
    }
    let dev = u8::from_str_radix(&full[8..10], 16).map_err(|_| bad())?;
    let func = full[11..12].parse::<u8>().map_err(|_| bad())?;
    if dev > 0x1f || func > 7 {
        return Err(bad());
    }
    Ok(full)
}

/// The sysfs tree, `/sys` unless told otherwise.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new("/sys")
    }
}

fn sysfs_err(path: &Path, source: std::io::Error) -> Error {
    Error::Sysfs {
        path: path.display().to_string(),
        source,
    }
}

/// The last component of a symlink's target (`../../bus/pci/drivers/mlx5_core`
/// gives `mlx5_core`), or `None` if there is no such link.
fn link_name(path: &Path) -> Option<String> {
    let target = fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

fn read_hex(path: &Path) -> Result<u32, Error> {
    let text = fs::read_to_string(path).map_err(|e| sysfs_err(path, e))?;
    let t = text.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u32::from_str_radix(t, 16).map_err(|_| Error::Sysfs {
        path: path.display().to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a hexadecimal number: {text:?}"),
        ),
    })
}

fn write_file(path: &Path, value: &str) -> Result<(), Error> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| sysfs_err(path, e))?;
    f.write_all(value.as_bytes())
        .map_err(|e| sysfs_err(path, e))
}

impl Sysfs {
    /// A sysfs tree rooted at `root` (`/sys` on a real system).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn devices_dir(&self) -> PathBuf {
        self.root.join("bus/pci/devices")
    }

    /// The sysfs directory of a function.
    pub fn device_path(&self, bdf: &str) -> PathBuf {
        self.devices_dir().join(bdf)
    }

    /// Reads one function.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidBdf`], [`Error::DeviceNotFound`], or
    /// [`Error::Sysfs`] for unreadable attributes.
    pub fn function(&self, bdf: &str) -> Result<PciFunction, Error> {
        let bdf = normalize_bdf(bdf)?;
        let dir = self.device_path(&bdf);
        if !dir.exists() {
            return Err(Error::DeviceNotFound {
                bdf,
                sysfs: self.devices_dir().display().to_string(),
            });
        }
        let vendor = read_hex(&dir.join("vendor"))? as u16;
        let device = read_hex(&dir.join("device"))? as u16;
        let class = read_hex(&dir.join("class")).unwrap_or(0);
        let iommu_group = link_name(&dir.join("iommu_group")).and_then(|g| g.parse().ok());
        Ok(PciFunction {
            driver: link_name(&dir.join("driver")),
            bdf,
            vendor,
            device,
            class,
            iommu_group,
        })
    }

    /// Every PCI function, sorted by address.
    pub fn list_all(&self) -> Result<Vec<PciFunction>, Error> {
        self.functions_in(&self.devices_dir())
    }

    /// The PCI functions whose entries are in `dir`, sorted by address;
    /// entries that are not PCI addresses are passed over.
    fn functions_in(&self, dir: &Path) -> Result<Vec<PciFunction>, Error> {
        let entries = fs::read_dir(dir).map_err(|e| sysfs_err(dir, e))?;
        let mut out = Vec::new();
        for e in entries {
            let e = e.map_err(|e| sysfs_err(dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if normalize_bdf(&name).is_ok() {
                out.push(self.function(&name)?);
            }
        }
        out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        Ok(out)
    }

    /// Every function with this vendor ID and, if given, device ID.
    pub fn list_by_id(&self, vendor: u16, device: Option<u16>) -> Result<Vec<PciFunction>, Error> {
        Ok(self
            .list_all()?
            .into_iter()
            .filter(|f| f.vendor == vendor && device.is_none_or(|d| f.device == d))
            .collect())
    }

    /// The functions in IOMMU group `group`.
    pub fn group_members(&self, group: u32) -> Result<Vec<PciFunction>, Error> {
        // Groups can hold non-PCI devices on some platforms; only PCI
        // functions are checked.
        self.functions_in(
            &self
                .root
                .join(format!("kernel/iommu_groups/{group}/devices")),
        )
    }

    /// Checks that `bdf` exists, is bound to vfio-pci, has an IOMMU group,
    /// and that the group is viable (every member bound to vfio-pci, to a
    /// driver that leaves DMA to VFIO, or to none). Returns the function.
    ///
    /// # Errors
    ///
    /// [`Error::DeviceNotFound`], [`Error::NotBoundToVfio`],
    /// [`Error::NoIommuGroup`], [`Error::GroupNotViable`], each saying how
    /// to fix it.
    pub fn check_vfio_ready(&self, bdf: &str) -> Result<PciFunction, Error> {
        let f = self.function(bdf)?;
        if !f.is_vfio_bound() {
            return Err(Error::NotBoundToVfio {
                bdf: f.bdf,
                driver: f.driver,
            });
        }
        let Some(group) = f.iommu_group else {
            return Err(Error::NoIommuGroup { bdf: f.bdf });
        };
        let blockers: Vec<(String, String)> = self
            .group_members(group)?
            .into_iter()
            .filter(|m| !driver_allows_vfio(m.driver.as_deref()))
            .map(|m| (m.bdf, m.driver.unwrap_or_default()))
            .collect();
        if !blockers.is_empty() {
            return Err(Error::GroupNotViable {
                bdf: f.bdf,
                group,
                blockers,
            });
        }
        Ok(f)
    }

    /// Binds `bdf` to vfio-pci the way SPDK's `setup.sh` does: write
    /// `vfio-pci` to its `driver_override`, unbind it from its current
    /// driver, write its address to `bus/pci/drivers_probe`, then verify
    /// the binding. Binding a function already bound to vfio-pci does
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`Error::VfioPciNotLoaded`], [`Error::Sysfs`] (not root),
    /// [`Error::BindFailed`].
    pub fn bind_vfio(&self, bdf: &str) -> Result<PciFunction, Error> {
        let f = self.function(bdf)?;
        if f.is_vfio_bound() {
            return Ok(f);
        }
        if !self.root.join("bus/pci/drivers").join(VFIO_PCI).exists() {
            return Err(Error::VfioPciNotLoaded);
        }
        self.rebind(&f, VFIO_PCI)?;
        let now = self.function(&f.bdf)?;
        if !now.is_vfio_bound() {
            return Err(Error::BindFailed {
                bdf: now.bdf,
                wanted: VFIO_PCI.to_string(),
                driver: now.driver,
            });
        }
        Ok(now)
    }

    /// Undoes [`bind_vfio`](Self::bind_vfio): clears `driver_override`,
    /// unbinds from vfio-pci and reprobes, so the function's default driver
    /// (mlx5_core for a ConnectX) takes it if loaded. Returns the function as
    /// it is afterwards.
    pub fn unbind_vfio(&self, bdf: &str) -> Result<PciFunction, Error> {
        let f = self.function(bdf)?;
        self.rebind(&f, "\n")?;
        self.function(&f.bdf)
    }

    /// Sets `driver_override`, unbinds, and reprobes.
    fn rebind(&self, f: &PciFunction, driver_override: &str) -> Result<(), Error> {
        let dir = self.device_path(&f.bdf);
        write_file(&dir.join("driver_override"), driver_override)?;
        if f.driver.is_some() {
            write_file(&dir.join("driver/unbind"), &f.bdf)?;
        }
        write_file(&self.root.join("bus/pci/drivers_probe"), &f.bdf)
    }
}

/// Waits until `path` exists (a device node created after a bind), for at
/// most `timeout`.
pub fn wait_for_path(path: &Path, timeout: Duration) -> Result<(), Error> {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() >= timeout {
            return Err(Error::Sys {
                what: format!(
                    "waiting {} ms for {} to appear",
                    timeout.as_millis(),
                    path.display()
                ),
                source: std::io::Error::from(std::io::ErrorKind::TimedOut),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// A fake sysfs tree for tests (also used by other crates' tests through the
/// `vfio` feature).
#[doc(hidden)]
pub mod fake {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Builds a fake `/sys` under a directory.
    #[derive(Debug)]
    pub struct FakeSysfs {
        /// The root.
        pub root: PathBuf,
    }

    impl FakeSysfs {
        /// An empty tree under `root` (created).
        pub fn new(root: &Path) -> Self {
            fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            fs::create_dir_all(root.join("bus/pci/drivers")).unwrap();
            fs::write(root.join("bus/pci/drivers_probe"), "").unwrap();
            Self {
                root: root.to_path_buf(),
            }
        }

        /// Adds a driver directory with an `unbind` file.
        pub fn add_driver(&self, name: &str) {
            let d = self.root.join("bus/pci/drivers").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("unbind"), "").unwrap();
        }

        /// Adds a function the way Linux lays it out (a directory under
        /// `devices/` linked from `bus/pci/devices/`).
        pub fn add_device(
            &self,
            bdf: &str,
            vendor: u16,
            device: u16,
            driver: Option<&str>,
            group: Option<u32>,
        ) {
            let real = self.root.join("devices/pci0000:00").join(bdf);
            fs::create_dir_all(&real).unwrap();
            fs::write(real.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
            fs::write(real.join("device"), format!("0x{device:04x}\n")).unwrap();
            fs::write(real.join("class"), "0x020000\n").unwrap();
            fs::write(real.join("driver_override"), "(null)\n").unwrap();
            symlink(&real, self.root.join("bus/pci/devices").join(bdf)).unwrap();
            if let Some(d) = driver {
                self.add_driver(d);
                symlink(
                    self.root.join("bus/pci/drivers").join(d),
                    real.join("driver"),
                )
                .unwrap();
            }
            if let Some(g) = group {
                let gdir = self.root.join(format!("kernel/iommu_groups/{g}/devices"));
                fs::create_dir_all(&gdir).unwrap();
                symlink(&real, gdir.join(bdf)).unwrap();
                symlink(gdir.parent().unwrap(), real.join("iommu_group")).unwrap();
            }
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    /// A fresh temporary directory (the caller removes it; a [`FakeSysfs`]
    /// built on it removes it when dropped).
    pub fn temp_dir(tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "platform-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{FakeSysfs, temp_dir};
    use super::*;

    fn tree() -> (FakeSysfs, Sysfs) {
        let dir = temp_dir("sysfs");
        let fake = FakeSysfs::new(&dir);
        fake.add_device("0000:02:00.0", 0x15b3, 0x1013, Some("mlx5_core"), Some(12));
        fake.add_device("0000:02:00.1", 0x15b3, 0x1013, Some("mlx5_core"), Some(12));
        fake.add_device("0000:03:00.0", 0x15b3, 0x1017, Some("vfio-pci"), Some(13));
        fake.add_device("0000:04:00.0", 0x15b3, 0x101d, None, Some(14));
        fake.add_device("0000:05:00.0", 0x15b3, 0xcafe, None, Some(15));
        fake.add_device("0000:00:03.0", 0x1234, 0x11e8, Some("vfio-pci"), None);
        fake.add_device("0000:06:00.0", 0x15b3, 0x1019, Some("vfio-pci"), Some(16));
        fake.add_device("0000:06:00.1", 0x8086, 0x10d3, Some("e1000e"), Some(16));
        fake.add_device("0000:07:00.0", 0x15b3, 0x1021, Some("vfio-pci"), Some(17));
        fake.add_device("0000:00:1c.0", 0x8086, 0x2940, Some("pcieport"), Some(17));
        fake.add_device("0000:07:00.1", 0x15b3, 0x1021, None, Some(17));
        let sys = Sysfs::new(&dir);
        (fake, sys)
    }

    #[test]
    fn bdf_parsing() {
        assert_eq!(normalize_bdf("02:00.0").unwrap(), "0000:02:00.0");
        assert_eq!(normalize_bdf(" 0000:AF:1F.7\n").unwrap(), "0000:af:1f.7");
        for bad in [
            "",
            "2:00.0",
            "0000:02:00",
            "0000:02:20.0",
            "0000:02:00.8",
            "zz:00.0",
            "0000-02:00.0",
        ] {
            assert!(
                matches!(normalize_bdf(bad), Err(Error::InvalidBdf(_))),
                "{bad}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run a sysfs tree in a temporary directory")]
    fn discovery_lists_functions_with_ids_drivers_and_groups() {
        let (_fake, sys) = tree();
        let all = sys.list_by_id(0x15b3, None).unwrap();
        let summary: Vec<_> = all
            .iter()
            .map(|f| (f.bdf.as_str(), f.device, f.driver.as_deref(), f.iommu_group))
            .collect();
        // Which IDs are mlx5 devices is hca_driver::pci's table.
        assert_eq!(
            summary,
            [
                ("0000:02:00.0", 0x1013, Some("mlx5_core"), Some(12)),
                ("0000:02:00.1", 0x1013, Some("mlx5_core"), Some(12)),
                ("0000:03:00.0", 0x1017, Some("vfio-pci"), Some(13)),
                ("0000:04:00.0", 0x101d, None, Some(14)),
                ("0000:05:00.0", 0xcafe, None, Some(15)),
                ("0000:06:00.0", 0x1019, Some("vfio-pci"), Some(16)),
                ("0000:07:00.0", 0x1021, Some("vfio-pci"), Some(17)),
                ("0000:07:00.1", 0x1021, None, Some(17)),
            ]
        );
        let edu = sys.list_by_id(0x1234, Some(0x11e8)).unwrap();
        assert_eq!(edu.len(), 1);
        assert_eq!(
            (edu[0].bdf.as_str(), edu[0].iommu_group),
            ("0000:00:03.0", None)
        );
        assert_eq!(sys.list_by_id(0x15b3, None).unwrap().len(), 8);
        assert_eq!(sys.group_members(12).unwrap().len(), 2);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run a sysfs tree in a temporary directory")]
    fn readiness_checks_say_what_is_wrong() {
        let (_fake, sys) = tree();
        assert_eq!(
            sys.check_vfio_ready("03:00.0").unwrap().iommu_group,
            Some(13)
        );
        // A pcieport bridge and an unbound function do not spoil a group.
        assert!(sys.check_vfio_ready("0000:07:00.0").is_ok());

        let e = sys.check_vfio_ready("0000:02:00.0").unwrap_err();
        assert_eq!(
            e.to_string(),
            "0000:02:00.0 is bound to mlx5_core, not vfio-pci: run `hca bind 0000:02:00.0`"
        );
        let e = sys.check_vfio_ready("0000:04:00.0").unwrap_err();
        assert!(matches!(&e, Error::NotBoundToVfio { driver: None, .. }));
        assert!(e.to_string().contains("is not bound to any driver"), "{e}");

        let e = sys.check_vfio_ready("0000:06:00.0").unwrap_err();
        match &e {
            Error::GroupNotViable {
                group, blockers, ..
            } => {
                assert_eq!(*group, 16);
                assert_eq!(
                    blockers,
                    &[("0000:06:00.1".to_string(), "e1000e".to_string())]
                );
            }
            other => panic!("expected GroupNotViable, got {other:?}"),
        }
        assert!(
            e.to_string().contains("0000:06:00.1 is bound to e1000e"),
            "{e}"
        );

        let e = sys.check_vfio_ready("0000:00:03.0").unwrap_err();
        assert!(matches!(e, Error::NoIommuGroup { .. }), "{e}");
        assert!(e.to_string().contains("intel_iommu=on"));

        let e = sys.check_vfio_ready("0000:09:00.0").unwrap_err();
        assert!(matches!(e, Error::DeviceNotFound { .. }), "{e}");
        assert!(e.to_string().contains("0000:09:00.0"));
        assert!(matches!(
            sys.check_vfio_ready("nonsense"),
            Err(Error::InvalidBdf(_))
        ));
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run a sysfs tree in a temporary directory")]
    fn bind_writes_what_setup_sh_writes_and_verifies() {
        let (fake, sys) = tree();
        // vfio-pci not loaded: a tree without its driver directory.
        let dir = temp_dir("sysfs-bind");
        let bare = FakeSysfs::new(&dir);
        bare.add_device("0000:02:00.0", 0x15b3, 0x1013, Some("mlx5_core"), Some(1));
        let e = Sysfs::new(&dir).bind_vfio("0000:02:00.0").unwrap_err();
        assert!(matches!(e, Error::VfioPciNotLoaded), "{e}");

        // A fake tree does not rebind, so verification fails after the
        // writes; the writes are what the kernel would have been told.
        let e = sys.bind_vfio("0000:02:00.0").unwrap_err();
        assert!(
            matches!(&e, Error::BindFailed { driver: Some(d), .. } if d == "mlx5_core"),
            "{e}"
        );
        let dev = sys.device_path("0000:02:00.0");
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "vfio-pci"
        );
        let unbind = fake.root.join("bus/pci/drivers/mlx5_core/unbind");
        assert_eq!(fs::read_to_string(unbind).unwrap(), "0000:02:00.0");
        let probe = fake.root.join("bus/pci/drivers_probe");
        assert_eq!(fs::read_to_string(&probe).unwrap(), "0000:02:00.0");

        // Already bound: nothing is written.
        fs::write(&probe, "").unwrap();
        assert!(sys.bind_vfio("0000:03:00.0").unwrap().is_vfio_bound());
        assert_eq!(fs::read_to_string(&probe).unwrap(), "");

        // Unbound function: no unbind write, just override + probe.
        let e = sys.bind_vfio("0000:04:00.0").unwrap_err();
        assert!(matches!(e, Error::BindFailed { driver: None, .. }));
        assert_eq!(fs::read_to_string(&probe).unwrap(), "0000:04:00.0");

        // Unbind clears the override and reprobes.
        let f = sys.unbind_vfio("0000:03:00.0").unwrap();
        assert_eq!(f.bdf, "0000:03:00.0");
        let dev = sys.device_path("0000:03:00.0");
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "\n"
        );
        let unbind = fake.root.join("bus/pci/drivers/vfio-pci/unbind");
        assert_eq!(fs::read_to_string(unbind).unwrap(), "0000:03:00.0");
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run a sysfs tree in a temporary directory")]
    fn unreadable_attributes_are_sysfs_errors() {
        let (fake, sys) = tree();
        fs::write(
            fake.root.join("devices/pci0000:00/0000:02:00.0/vendor"),
            "garbage",
        )
        .unwrap();
        let e = sys.function("0000:02:00.0").unwrap_err();
        assert!(matches!(e, Error::Sysfs { .. }), "{e}");
        assert!(e.to_string().contains("vendor"));
        let e = Sysfs::new("/nonexistent-sysfs").list_all().unwrap_err();
        assert!(matches!(e, Error::Sysfs { .. }));
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run a sysfs tree in a temporary directory")]
    fn waiting_for_a_path_times_out() {
        let dir = temp_dir("wait");
        let fake = FakeSysfs::new(&dir);
        wait_for_path(&dir, Duration::from_millis(10)).unwrap();
        let e = wait_for_path(&fake.root.join("never"), Duration::from_millis(20)).unwrap_err();
        assert!(e.to_string().contains("to appear"), "{e}");
    }
}
