//! The fake sysfs and `/dev/vfio` tree, and the path rewriting that shows
//! it to the process.
//!
//! A private directory (under `$TMPDIR`) holds, for each emulated function,
//! what Linux shows for a function bound to vfio-pci:
//!
//! ```text
//! sys/devices/hca-emu/<bdf>/{vendor,device,subsystem_vendor,subsystem_device,
//!                            class,revision,numa_node,irq,enable,uevent}
//! sys/devices/hca-emu/<bdf>/iommu_group -> ../../../kernel/iommu_groups/<n>
//! sys/devices/hca-emu/<bdf>/driver      -> ../../../bus/pci/drivers/vfio-pci
//! sys/bus/pci/devices/<bdf>             -> ../../../devices/hca-emu/<bdf>
//! sys/bus/pci/devices/<real bdf>        -> /sys/bus/pci/devices/<real bdf>
//! sys/bus/pci/drivers/vfio-pci/<bdf>    -> ../../../../devices/hca-emu/<bdf>
//! sys/kernel/iommu_groups/<n>/devices/<bdf> -> ../../../../devices/hca-emu/<bdf>
//! dev/vfio/vfio, dev/vfio/<n>           (plain files, for stat and access)
//! ```
//!
//! Paths the process passes to the intercepted calls are rewritten into
//! this tree when they name an emulated function's sysfs directory, one of
//! its IOMMU groups, the PCI device list (which also lists the real
//! functions, as links to theirs), or the vfio-pci driver directory when
//! the host has none. Everything else is untouched.

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::config::FunctionSpec;

const DEVICES: &str = "/sys/bus/pci/devices";
const GROUPS: &str = "/sys/kernel/iommu_groups";
const VFIO_DRIVER: &str = "/sys/bus/pci/drivers/vfio-pci";
const EMU_DEVICES: &str = "/sys/devices/hca-emu";
/// The container node.
pub const DEV_VFIO: &str = "/dev/vfio/vfio";

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathKind {
    /// Not ours.
    Other,
    /// Redirected into the fake tree.
    Redirect(PathBuf),
    /// `/dev/vfio/vfio`.
    Container(PathBuf),
    /// `/dev/vfio/<group>` of an emulated group.
    Group(u32, PathBuf),
}

/// The fake tree.
#[derive(Debug)]
pub struct Tree {
    root: PathBuf,
    bdfs: Vec<String>,
    groups: Vec<u32>,
    redirect_vfio_driver: bool,
}

fn write(p: &Path, s: &str) -> io::Result<()> {
    fs::write(p, s)
}

impl Tree {
    /// Builds the tree for `specs`.
    pub fn build(specs: &[FunctionSpec]) -> io::Result<Self> {
        let base = std::env::temp_dir();
        let mut root = None;
        for i in 0..100u32 {
            let p = base.join(format!("hca-vfio-emu.{}.{i}", std::process::id()));
            match fs::create_dir(&p) {
                Ok(()) => {
                    root = Some(p);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        let root = root.ok_or_else(|| io::Error::other("no free temporary directory name"))?;
        let r = |p: &str| root.join(p.trim_start_matches('/'));
        fs::create_dir_all(r(EMU_DEVICES))?;
        fs::create_dir_all(r(DEVICES))?;
        fs::create_dir_all(r(GROUPS))?;
        fs::create_dir_all(r(VFIO_DRIVER))?;
        fs::create_dir_all(r("/dev/vfio"))?;
        write(&r(DEV_VFIO), "")?;
        for name in ["bind", "unbind", "new_id", "remove_id"] {
            write(&r(VFIO_DRIVER).join(name), "")?;
        }
        // The real functions, so that a listing shows them too.
        if let Ok(entries) = fs::read_dir(DEVICES) {
            for e in entries.flatten() {
                let name = e.file_name();
                let n = name.to_string_lossy();
                if specs.iter().any(|s| s.bdf == n) {
                    continue;
                }
                let _ = symlink(Path::new(DEVICES).join(&name), r(DEVICES).join(&name));
            }
        }
        for s in specs {
            let dev = r(EMU_DEVICES).join(&s.bdf);
            fs::create_dir_all(&dev)?;
            let id = s.model.device_id();
            write(&dev.join("vendor"), "0x15b3\n")?;
            write(&dev.join("device"), &format!("0x{id:04x}\n"))?;
            write(&dev.join("subsystem_vendor"), "0x15b3\n")?;
            write(&dev.join("subsystem_device"), "0x0008\n")?;
            write(&dev.join("class"), "0x020000\n")?;
            write(&dev.join("revision"), "0x00\n")?;
            write(&dev.join("numa_node"), "-1\n")?;
            write(&dev.join("irq"), "0\n")?;
            write(&dev.join("enable"), "1\n")?;
            write(&dev.join("driver_override"), "vfio-pci\n")?;
            write(
                &dev.join("uevent"),
                &format!(
                    "DRIVER=vfio-pci\nPCI_CLASS=20000\nPCI_ID=15B3:{id:04X}\nPCI_SUBSYS_ID=15B3:0008\nPCI_SLOT_NAME={}\nMODALIAS=pci:v000015B3d0000{id:04X}sv000015B3sd00000008bc02sc00i00\n",
                    s.bdf
                ),
            )?;
            symlink(
                format!("../../../kernel/iommu_groups/{}", s.group),
                dev.join("iommu_group"),
            )?;
            symlink("../../../bus/pci/drivers/vfio-pci", dev.join("driver"))?;
            symlink(
                format!("../../../devices/hca-emu/{}", s.bdf),
                r(DEVICES).join(&s.bdf),
            )?;
            symlink(
                format!("../../../../devices/hca-emu/{}", s.bdf),
                r(VFIO_DRIVER).join(&s.bdf),
            )?;
            let g = r(GROUPS).join(s.group.to_string());
            fs::create_dir_all(g.join("devices"))?;
            if !g.join("type").exists() {
                write(&g.join("type"), "DMA\n")?;
            }
            symlink(
                format!("../../../../devices/hca-emu/{}", s.bdf),
                g.join("devices").join(&s.bdf),
            )?;
            let node = r("/dev/vfio").join(s.group.to_string());
            if !node.exists() {
                write(&node, "")?;
            }
        }
        let mut groups: Vec<u32> = specs.iter().map(|s| s.group).collect();
        groups.sort_unstable();
        groups.dedup();
        Ok(Self {
            redirect_vfio_driver: !Path::new(VFIO_DRIVER).exists(),
            root,
            bdfs: specs.iter().map(|s| s.bdf.clone()).collect(),
            groups,
        })
    }

    /// The root of the tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn redirect(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// What `path` names (only absolute paths are rewritten).
    pub fn classify(&self, path: &str) -> PathKind {
        // `prefix` followed by the end or a slash.
        let under = |prefix: &str| {
            path.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        if let Some(rest) = path.strip_prefix("/dev/vfio/") {
            let rest = rest.trim_end_matches('/');
            if rest == "vfio" {
                return PathKind::Container(self.redirect(path));
            }
            if let Ok(n) = rest.parse::<u32>() {
                if self.groups.contains(&n) {
                    return PathKind::Group(n, self.redirect(path));
                }
            }
            return PathKind::Other;
        }
        if !path.starts_with("/sys/") {
            return PathKind::Other;
        }
        if let Some(rest) = path.strip_prefix(DEVICES) {
            let rest = rest.trim_start_matches('/');
            if rest.is_empty() {
                return PathKind::Redirect(self.redirect(DEVICES));
            }
            let name = rest.split('/').next().unwrap_or("");
            if self.bdfs.iter().any(|b| b == name) {
                return PathKind::Redirect(self.redirect(path));
            }
            return PathKind::Other;
        }
        if let Some(rest) = path.strip_prefix(GROUPS) {
            let name = rest.trim_start_matches('/').split('/').next().unwrap_or("");
            if name.parse::<u32>().is_ok_and(|n| self.groups.contains(&n)) {
                return PathKind::Redirect(self.redirect(path));
            }
            return PathKind::Other;
        }
        if under(EMU_DEVICES) || (self.redirect_vfio_driver && under(VFIO_DRIVER)) {
            return PathKind::Redirect(self.redirect(path));
        }
        PathKind::Other
    }

    /// Removes the tree.
    pub fn remove(&self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    #[test]
    fn builds_and_classifies() {
        let specs = parse("0000:00:10.0=cx4;0000:00:11.0=cx4,group=7").unwrap();
        let t = Tree::build(&specs).unwrap();
        let k = t.classify("/sys/bus/pci/devices/0000:00:10.0/vendor");
        let PathKind::Redirect(p) = k else {
            panic!("{k:?}")
        };
        assert_eq!(fs::read_to_string(p).unwrap(), "0x15b3\n");
        let PathKind::Redirect(p) = t.classify("/sys/bus/pci/devices/0000:00:11.0/iommu_group")
        else {
            panic!()
        };
        assert_eq!(
            fs::read_link(&p).unwrap(),
            Path::new("../../../kernel/iommu_groups/7")
        );
        assert!(fs::metadata(&p).unwrap().is_dir());
        assert_eq!(
            t.classify("/sys/bus/pci/devices/0000:00:12.0/vendor"),
            PathKind::Other
        );
        assert!(matches!(
            t.classify("/sys/bus/pci/devices/"),
            PathKind::Redirect(_)
        ));
        assert!(matches!(t.classify("/dev/vfio/7"), PathKind::Group(7, _)));
        assert!(matches!(
            t.classify("/dev/vfio/100"),
            PathKind::Group(100, _)
        ));
        assert_eq!(t.classify("/dev/vfio/101"), PathKind::Other);
        assert!(matches!(
            t.classify("/dev/vfio/vfio"),
            PathKind::Container(_)
        ));
        let PathKind::Redirect(g) = t.classify("/sys/kernel/iommu_groups/7/devices") else {
            panic!()
        };
        let names: Vec<_> = fs::read_dir(g)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["0000:00:11.0"]);
        assert_eq!(t.classify("/etc/passwd"), PathKind::Other);
        t.remove();
    }
}
