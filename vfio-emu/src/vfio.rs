//! The VFIO objects the process sees: containers, groups and devices,
//! behind the file descriptors the intercepted calls hand out, and their
//! ioctls, as Linux's vfio, vfio_iommu_type1 and vfio-pci answer them.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use hca_emu::{EmuConfig, EmuHca};
use libc::{EBADF, EBUSY, EEXIST, EFAULT, EINVAL, ENODEV, ENOTTY};
use platform::Platform;

use crate::bridge::Bridge;
use crate::config::{self, FunctionSpec, Wire};
use crate::report;
use crate::shm::SharedBar;
use crate::sys;
use crate::sysfs::{PathKind, Tree};

/// `VFIO_TYPE` (';') << 8 | `VFIO_BASE` (100): every VFIO ioctl is `_IO`.
const fn vfio_io(n: u64) -> u64 {
    (0x3b << 8) | (100 + n)
}
/// Container ioctls.
pub const VFIO_GET_API_VERSION: u64 = vfio_io(0);
/// Container ioctls.
pub const VFIO_CHECK_EXTENSION: u64 = vfio_io(1);
/// Container ioctls.
pub const VFIO_SET_IOMMU: u64 = vfio_io(2);
/// Group ioctls.
pub const VFIO_GROUP_GET_STATUS: u64 = vfio_io(3);
/// Group ioctls.
pub const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(4);
/// Group ioctls.
pub const VFIO_GROUP_UNSET_CONTAINER: u64 = vfio_io(5);
/// Group ioctls.
pub const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
/// Device ioctls.
pub const VFIO_DEVICE_GET_INFO: u64 = vfio_io(7);
/// Device ioctls.
pub const VFIO_DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
/// Device ioctls.
pub const VFIO_DEVICE_GET_IRQ_INFO: u64 = vfio_io(9);
/// Device ioctls.
pub const VFIO_DEVICE_SET_IRQS: u64 = vfio_io(10);
/// Device ioctls.
pub const VFIO_DEVICE_RESET: u64 = vfio_io(11);
/// Container ioctls (type1).
pub const VFIO_IOMMU_GET_INFO: u64 = vfio_io(12);
/// Container ioctls (type1).
pub const VFIO_IOMMU_MAP_DMA: u64 = vfio_io(13);
/// Container ioctls (type1).
pub const VFIO_IOMMU_UNMAP_DMA: u64 = vfio_io(14);

const VFIO_API_VERSION: i32 = 0;
const VFIO_TYPE1_IOMMU: u64 = 1;
const VFIO_TYPE1V2_IOMMU: u64 = 3;
const VFIO_UNMAP_ALL: u64 = 9;

/// Region index of the PCI configuration space.
pub const CONFIG_REGION: u32 = 7;
const NUM_REGIONS: u32 = 9;
const NUM_IRQS: u32 = 5;
const MSIX_INDEX: u32 = 2;
/// Size of the configuration space region.
const CONFIG_SIZE: u64 = 256;
/// IOMMU page sizes (4 KiB, 2 MiB, 1 GiB), as an Intel IOMMU reports.
const PGSIZES: u64 = 0x4020_1000;
/// IOVA ranges of a 48-bit Intel IOMMU with the MSI window reserved.
pub const IOVA_RANGES: [(u64, u64); 2] = [(0, 0xfedf_ffff), (0xfef0_0000, (1 << 48) - 1)];
/// `dma_entry_limit` default of vfio_iommu_type1.
const DMA_AVAIL: u32 = 65535;

/// The offset of region `index` in the device fd (vfio-pci's layout).
pub const fn region_offset(index: u32) -> u64 {
    (index as u64) << 40
}

/// Access to the memory an ioctl argument points at (the kernel's
/// `copy_from_user`/`copy_to_user`).
pub trait UserMem {
    /// Copies `len` bytes from `addr`.
    fn read(&self, addr: usize, len: usize) -> Result<Vec<u8>, i32>;
    /// Copies `bytes` to `addr`.
    fn write(&self, addr: usize, bytes: &[u8]) -> Result<(), i32>;
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// MSI-X state of a device.
#[derive(Debug, Default)]
struct Msix {
    /// Vectors enabled (the count of the first SET_IRQS), if enabled.
    enabled: Option<usize>,
    /// Each vector's eventfd (a duplicate of the program's).
    fds: Vec<Option<OwnedFd>>,
}

/// One emulated function.
pub struct Func {
    /// Its configuration.
    pub spec: FunctionSpec,
    /// The emulator.
    pub emu: Arc<EmuHca>,
    shm: Arc<SharedBar>,
    bridge: Bridge,
    msix: Arc<Mutex<Msix>>,
    opens: Mutex<usize>,
    /// How much of the command log, IOMMU faults, internal errors and
    /// ignored doorbells is in the report already.
    pub reported: Mutex<[usize; 4]>,
}

impl core::fmt::Debug for Func {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Func({})", self.spec.bdf)
    }
}

impl Func {
    fn new(spec: FunctionSpec) -> Result<Self, String> {
        // Real clock, device thread, uncached UARs, no `initializing`
        // delay after the command queue address (see `bridged_config`).
        let cfg = hca_shm_bridge::bridged_config(EmuConfig {
            personality: config::personality(spec.model),
            sm_delay: spec.sm_delay,
            lid_base: spec.lid,
            port_type: spec.port_type,
            // From the PCI address: functions in different processes get
            // different MACs, GUIDs and object numbers.
            seed: EmuConfig::default().seed ^ bdf_hash(&spec.bdf),
            ..EmuConfig::default()
        });
        let emu = Arc::new(EmuHca::new(cfg));
        let shm = Arc::new(
            SharedBar::create(emu.bar_size(), &format!("hca-emu BAR0 {}", spec.bdf))
                .map_err(|e| format!("shared memory for BAR0: {e}"))?,
        );
        let bridge = Bridge::start(emu.clone(), shm.clone(), &spec.bdf)
            .map_err(|e| format!("BAR bridge thread: {e}"))?;
        let msix = Arc::new(Mutex::new(Msix::default()));
        let m = msix.clone();
        emu.set_msix_sink(Some(Arc::new(move |v: u16| {
            let g = lock(&m);
            let fd = g.fds.get(usize::from(v)).and_then(Option::as_ref);
            if crate::bridge::trace() {
                eprintln!(
                    "hca-vfio-emu: MSI-X vector {v}: {}",
                    if fd.is_some() {
                        "eventfd signalled"
                    } else {
                        "no eventfd set"
                    }
                );
            }
            if let Some(fd) = fd {
                sys::eventfd_signal(fd);
            }
        })));
        Ok(Self {
            spec,
            emu,
            shm,
            bridge,
            msix,
            opens: Mutex::new(0),
            reported: Mutex::new([0; 4]),
        })
    }

    /// A function reset as vfio-pci does it: the kernel saves the
    /// configuration space around the FLR (`pci_try_reset_function`), so
    /// the command register survives; with `command` given, it is set to
    /// that instead (opening: `pci_enable_device` turns memory decoding
    /// on; closing: everything off).
    fn reset(&self, command: Option<u16>) -> Result<(), i32> {
        let p = self.emu.platform();
        let mut saved = [0u8; 2];
        p.config_read(4, &mut saved).map_err(|_| libc::EIO)?;
        self.bridge.reset().map_err(|_| libc::EIO)?;
        let cmd = command.map_or(saved, u16::to_le_bytes);
        p.config_write(4, &cmd).map_err(|_| libc::EIO)
    }
}

/// FNV-1a of a PCI address.
fn bdf_hash(bdf: &str) -> u64 {
    bdf.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A container.
#[derive(Debug, Default)]
struct Container {
    iommu: Option<u64>,
    groups: Vec<u32>,
    /// IOVA -> (vaddr, size).
    maps: BTreeMap<u64, (u64, u64)>,
}

/// A group's state.
#[derive(Debug, Default)]
struct Group {
    /// Whether the group's fd is open.
    fd_open: bool,
    container: Option<Arc<Mutex<Container>>>,
    devices_open: usize,
}

/// What one of our file descriptors is.
#[derive(Clone, Debug)]
enum Obj {
    Container(Arc<Mutex<Container>>),
    Group(u32),
    Device(Arc<Func>),
}

/// Everything the library presents.
pub struct State {
    specs: Vec<FunctionSpec>,
    tree: Tree,
    funcs: OnceLock<Result<Vec<Arc<Func>>, String>>,
    fds: Mutex<HashMap<i32, Obj>>,
    nfds: AtomicUsize,
    groups: Mutex<HashMap<u32, Group>>,
    /// The report file.
    pub report: Option<PathBuf>,
}

impl core::fmt::Debug for State {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "State({:?})", self.specs)
    }
}

/// What an open of a path does.
#[derive(Debug)]
pub enum OpenOutcome {
    /// Not ours.
    Pass,
    /// Open this path instead.
    Redirect(PathBuf),
    /// This file descriptor.
    Fd(i32),
    /// Fail with this errno.
    Err(i32),
}

impl State {
    /// Reads the environment. `None` (after a message on stderr when the
    /// variable is malformed) presents nothing.
    pub fn from_env() -> Option<Self> {
        let v = std::env::var(config::VAR).ok()?;
        let specs = match config::parse(&v) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "hca-vfio-emu: {}: {e}; no emulated device is presented",
                    config::VAR
                );
                return None;
            }
        };
        let tree = match Tree::build(&specs) {
            Ok(t) => t,
            Err(e) => {
                eprintln!(
                    "hca-vfio-emu: cannot build the fake sysfs tree: {e}; no emulated device is presented"
                );
                return None;
            }
        };
        Some(Self {
            specs,
            tree,
            funcs: OnceLock::new(),
            fds: Mutex::new(HashMap::new()),
            nfds: AtomicUsize::new(0),
            groups: Mutex::new(HashMap::new()),
            report: std::env::var_os(config::REPORT_VAR).map(PathBuf::from),
        })
    }

    /// The fake tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The functions, created on first use (all at once, then cabled).
    fn funcs(&self) -> Result<&[Arc<Func>], i32> {
        let r = self.funcs.get_or_init(|| {
            let mut v = Vec::new();
            for s in &self.specs {
                v.push(Arc::new(Func::new(s.clone())?));
            }
            wire(&self.specs, &v);
            Ok(v)
        });
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                eprintln!("hca-vfio-emu: cannot create the emulated functions: {e}");
                Err(libc::EIO)
            }
        }
    }

    /// The functions created so far.
    pub fn created(&self) -> Vec<Arc<Func>> {
        match self.funcs.get() {
            Some(Ok(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether any fd of ours is open (a fast check for fd calls).
    pub fn has_fds(&self) -> bool {
        self.nfds.load(Ordering::Acquire) != 0
    }

    fn obj(&self, fd: i32) -> Option<Obj> {
        if !self.has_fds() {
            return None;
        }
        lock(&self.fds).get(&fd).cloned()
    }

    fn add_fd(&self, fd: i32, o: Obj) {
        lock(&self.fds).insert(fd, o);
        self.nfds.fetch_add(1, Ordering::AcqRel);
    }

    /// The rewritten path for a path-taking call, if `path` is ours.
    pub fn redirect(&self, path: &str) -> Option<PathBuf> {
        match self.tree.classify(path) {
            PathKind::Other => None,
            PathKind::Redirect(p) | PathKind::Container(p) | PathKind::Group(_, p) => Some(p),
        }
    }

    /// An `open` of `path`.
    pub fn open(&self, path: &str, flags: i32) -> OpenOutcome {
        match self.tree.classify(path) {
            PathKind::Other => OpenOutcome::Pass,
            PathKind::Redirect(p) => OpenOutcome::Redirect(p),
            PathKind::Container(_) => match sys::placeholder_fd(flags) {
                Ok(fd) => {
                    self.add_fd(fd, Obj::Container(Arc::default()));
                    OpenOutcome::Fd(fd)
                }
                Err(e) => OpenOutcome::Err(e),
            },
            PathKind::Group(n, _) => {
                let mut groups = lock(&self.groups);
                let g = groups.entry(n).or_default();
                // Device fds hold a reference to their group's file, as in
                // Linux: the group is busy until they are closed too.
                if g.fd_open || g.devices_open > 0 {
                    return OpenOutcome::Err(EBUSY);
                }
                match sys::placeholder_fd(flags) {
                    Ok(fd) => {
                        g.fd_open = true;
                        drop(groups);
                        self.add_fd(fd, Obj::Group(n));
                        OpenOutcome::Fd(fd)
                    }
                    Err(e) => OpenOutcome::Err(e),
                }
            }
        }
    }

    /// A `close` of `fd` (the caller closes the real descriptor after).
    pub fn close(&self, fd: i32) {
        if !self.has_fds() {
            return;
        }
        let Some(o) = lock(&self.fds).remove(&fd) else {
            return;
        };
        self.nfds.fetch_sub(1, Ordering::AcqRel);
        match o {
            // The groups set to it keep a container alive (Linux: each
            // group holds a reference); its mappings go with the last one.
            Obj::Container(_) => {}
            Obj::Group(n) => {
                let released = {
                    let mut groups = lock(&self.groups);
                    let g = groups.entry(n).or_default();
                    g.fd_open = false;
                    g.devices_open == 0
                };
                if released {
                    let _ = self.unset_container(n, true);
                }
            }
            Obj::Device(f) => self.device_closed(&f),
        }
    }

    fn device_closed(&self, f: &Arc<Func>) {
        f.bridge.flush();
        let last = {
            let mut o = lock(&f.opens);
            *o = o.saturating_sub(1);
            *o == 0
        };
        let group_released = {
            let mut groups = lock(&self.groups);
            let g = groups.entry(f.spec.group).or_default();
            g.devices_open = g.devices_open.saturating_sub(1);
            g.devices_open == 0 && !g.fd_open
        };
        if last {
            disable_msix(f);
            // Like vfio-pci: the function is reset when its last user goes.
            let _ = f.reset(Some(0));
            report::write(self, f, "device fd closed");
        }
        if group_released {
            // The group's fd was closed before its devices: it goes now.
            let _ = self.unset_container(f.spec.group, true);
        }
    }

    fn group_funcs(&self, group: u32) -> Result<Vec<Arc<Func>>, i32> {
        Ok(self
            .funcs()?
            .iter()
            .filter(|f| f.spec.group == group)
            .cloned()
            .collect())
    }

    /// Takes a group out of its container; with `force` (the group or the
    /// container is being closed) even with devices open.
    fn unset_container(&self, group: u32, force: bool) -> Result<(), i32> {
        let c = {
            let mut groups = lock(&self.groups);
            let g = groups.entry(group).or_default();
            if g.container.is_none() {
                return Err(EINVAL);
            }
            if g.devices_open > 0 && !force {
                return Err(EBUSY);
            }
            g.container.take().expect("checked")
        };
        let mut c = lock(&c);
        c.groups.retain(|&g| g != group);
        let maps: Vec<(u64, u64)> = c.maps.iter().map(|(&i, &(_, s))| (i, s)).collect();
        if let Ok(funcs) = self.group_funcs(group) {
            for f in funcs {
                for &(iova, size) in &maps {
                    let _ = f.emu.unmap_dma(iova, size);
                }
            }
        }
        if c.groups.is_empty() {
            // The last group leaves: the IOMMU driver and its mappings go.
            c.iommu = None;
            c.maps.clear();
        }
        Ok(())
    }

    /// An `ioctl` on `fd`; `None` if the fd is not ours.
    pub fn ioctl(
        &self,
        fd: i32,
        req: u64,
        arg: usize,
        mem: &dyn UserMem,
    ) -> Option<Result<i32, i32>> {
        let o = self.obj(fd)?;
        // Requests every file descriptor takes (FIOCLEX, FIONBIO...) go to
        // the real descriptor.
        if matches!(req, 0x5451 | 0x5450 | 0x5421 | 0x5452) {
            return None;
        }
        let r = match &o {
            Obj::Container(c) => self.container_ioctl(c, req, arg, mem),
            Obj::Group(n) => self.group_ioctl(*n, req, arg, mem),
            Obj::Device(f) => device_ioctl(f, req, arg, mem),
        };
        if crate::bridge::trace() {
            let kind = match &o {
                Obj::Container(_) => "container".to_string(),
                Obj::Group(n) => format!("group {n}"),
                Obj::Device(f) => f.spec.bdf.clone(),
            };
            eprintln!(
                "hca-vfio-emu: ioctl({fd}: {kind}, VFIO_BASE + {}) = {r:?}",
                (req & 0xff) - 100
            );
        }
        Some(r)
    }

    fn container_ioctl(
        &self,
        c: &Arc<Mutex<Container>>,
        req: u64,
        arg: usize,
        mem: &dyn UserMem,
    ) -> Result<i32, i32> {
        match req {
            VFIO_GET_API_VERSION => Ok(VFIO_API_VERSION),
            VFIO_CHECK_EXTENSION => Ok(i32::from(matches!(
                arg as u64,
                VFIO_TYPE1_IOMMU | VFIO_TYPE1V2_IOMMU | VFIO_UNMAP_ALL
            ))),
            VFIO_SET_IOMMU => {
                let mut c = lock(c);
                if c.groups.is_empty() || c.iommu.is_some() {
                    return Err(EINVAL);
                }
                if !matches!(arg as u64, VFIO_TYPE1_IOMMU | VFIO_TYPE1V2_IOMMU) {
                    return Err(ENODEV);
                }
                c.iommu = Some(arg as u64);
                Ok(0)
            }
            VFIO_IOMMU_GET_INFO => {
                if lock(c).iommu.is_none() {
                    return Err(EINVAL);
                }
                iommu_get_info(arg, mem)
            }
            VFIO_IOMMU_MAP_DMA => self.map_dma(c, arg, mem),
            VFIO_IOMMU_UNMAP_DMA => self.unmap_dma(c, arg, mem),
            _ => Err(ENOTTY),
        }
    }

    fn map_dma(
        &self,
        c: &Arc<Mutex<Container>>,
        arg: usize,
        mem: &dyn UserMem,
    ) -> Result<i32, i32> {
        let b = mem.read(arg, 32)?;
        let (argsz, flags) = (u32_at(&b, 0), u32_at(&b, 4));
        let (vaddr, iova, size) = (u64_at(&b, 8), u64_at(&b, 16), u64_at(&b, 24));
        if argsz < 32 || flags & !3 != 0 {
            return Err(EINVAL);
        }
        let mut c = lock(c);
        if c.iommu.is_none() {
            return Err(EINVAL);
        }
        // vfio_dma_do_map: page-aligned, non-empty, no wrap, readable or
        // writable, inside the IOVA ranges, no overlap, memory present.
        if size == 0 || (size | iova | vaddr) & 0xfff != 0 || flags & 3 == 0 {
            return Err(EINVAL);
        }
        let end = iova.checked_add(size - 1).ok_or(EINVAL)?;
        vaddr.checked_add(size - 1).ok_or(EINVAL)?;
        if !IOVA_RANGES.iter().any(|&(s, e)| iova >= s && end <= e) {
            return Err(EINVAL);
        }
        if let Some((&i, &(_, s))) = c.maps.range(..=end).next_back() {
            if i + s > iova {
                return Err(EEXIST);
            }
        }
        if !sys::is_mapped(vaddr as usize, size as usize) {
            return Err(EFAULT);
        }
        let mut done: Vec<Arc<Func>> = Vec::new();
        for &g in &c.groups {
            for f in self.group_funcs(g)? {
                match sys::host_window(vaddr as usize, size as usize)
                    .map(|w| f.emu.map_dma(iova, w))
                {
                    Some(Ok(())) => done.push(f),
                    _ => {
                        for d in done {
                            let _ = d.emu.unmap_dma(iova, size);
                        }
                        return Err(EINVAL);
                    }
                }
            }
        }
        c.maps.insert(iova, (vaddr, size));
        Ok(0)
    }

    fn unmap_dma(
        &self,
        c: &Arc<Mutex<Container>>,
        arg: usize,
        mem: &dyn UserMem,
    ) -> Result<i32, i32> {
        let mut b = mem.read(arg, 24)?;
        let (argsz, flags) = (u32_at(&b, 0), u32_at(&b, 4));
        let (iova, size) = (u64_at(&b, 8), u64_at(&b, 16));
        const ALL: u32 = 2;
        if argsz < 24 || flags & !ALL != 0 {
            return Err(EINVAL);
        }
        let mut c = lock(c);
        if c.iommu.is_none() {
            return Err(EINVAL);
        }
        let range = if flags & ALL != 0 {
            if iova != 0 || size != 0 {
                return Err(EINVAL);
            }
            0..u64::MAX
        } else {
            if size == 0 || (iova | size) & 0xfff != 0 {
                return Err(EINVAL);
            }
            let end = iova.checked_add(size).ok_or(EINVAL)?;
            // Type1v2: an unmap may not cut a mapping in two.
            if let Some((&i, &(_, s))) = c.maps.range(..iova).next_back() {
                if i + s > iova {
                    return Err(EINVAL);
                }
            }
            if let Some((&i, &(_, s))) = c.maps.range(..end).next_back() {
                if i + s > end {
                    return Err(EINVAL);
                }
            }
            iova..end
        };
        let gone: Vec<(u64, u64)> = c.maps.range(range).map(|(&i, &(_, s))| (i, s)).collect();
        let mut total = 0u64;
        for &(i, s) in &gone {
            c.maps.remove(&i);
            total += s;
            for &g in &c.groups {
                for f in self.group_funcs(g)? {
                    let _ = f.emu.unmap_dma(i, s);
                }
            }
        }
        put64(&mut b, 16, total);
        mem.write(arg + 16, &b[16..24])?;
        Ok(0)
    }

    /// Memory the process unmaps while a DMA mapping still covers it:
    /// taken out of the emulator's IOMMU first (the kernel keeps such
    /// pages pinned; here the device would touch freed memory), and
    /// reported.
    pub fn munmap(&self, addr: usize, len: usize) {
        let (s, e) = (addr as u64, (addr as u64).saturating_add(len as u64));
        for f in self.created() {
            for (iova, l, host) in f.emu.dma_windows() {
                let (hs, he) = (host as u64, host as u64 + l as u64);
                if hs < e && s < he {
                    let _ = f.emu.unmap_dma(iova, l as u64);
                    report::note(
                        self,
                        &f,
                        &format!(
                            "munmap of {addr:#x}+{len:#x} while IOVA {iova:#x} ({l:#x} bytes) was DMA-mapped there: unmapped from the device first"
                        ),
                    );
                }
            }
        }
    }

    fn group_ioctl(&self, n: u32, req: u64, arg: usize, mem: &dyn UserMem) -> Result<i32, i32> {
        match req {
            VFIO_GROUP_GET_STATUS => {
                let b = mem.read(arg, 8)?;
                if u32_at(&b, 0) < 8 {
                    return Err(EINVAL);
                }
                let set = lock(&self.groups)
                    .get(&n)
                    .is_some_and(|g| g.container.is_some());
                // VIABLE | CONTAINER_SET.
                let flags = 1 | if set { 2 } else { 0 };
                mem.write(arg + 4, &u32::to_ne_bytes(flags))?;
                Ok(0)
            }
            VFIO_GROUP_SET_CONTAINER => {
                let b = mem.read(arg, 4)?;
                let cfd = i32::from_ne_bytes(b[..4].try_into().expect("4 bytes"));
                let Some(Obj::Container(c)) = self.obj(cfd) else {
                    return Err(if cfd < 0 { EBADF } else { EINVAL });
                };
                {
                    let mut groups = lock(&self.groups);
                    let g = groups.entry(n).or_default();
                    if g.container.is_some() {
                        return Err(EINVAL);
                    }
                    g.container = Some(c.clone());
                }
                let mut cg = lock(&c);
                cg.groups.push(n);
                // Existing mappings reach the new group's devices.
                let maps: Vec<(u64, (u64, u64))> = cg.maps.iter().map(|(&i, &m)| (i, m)).collect();
                drop(cg);
                for f in self.group_funcs(n)? {
                    for &(iova, (vaddr, size)) in &maps {
                        if let Some(w) = sys::host_window(vaddr as usize, size as usize) {
                            let _ = f.emu.map_dma(iova, w);
                        }
                    }
                }
                Ok(0)
            }
            VFIO_GROUP_UNSET_CONTAINER => self.unset_container(n, false).map(|()| 0),
            VFIO_GROUP_GET_DEVICE_FD => {
                let name = read_cstr(mem, arg)?;
                let c = lock(&self.groups).get(&n).and_then(|g| g.container.clone());
                match c {
                    Some(c) if lock(&c).iommu.is_some() => {}
                    _ => return Err(EINVAL),
                }
                let Some(f) = self
                    .group_funcs(n)?
                    .into_iter()
                    .find(|f| f.spec.bdf == name)
                else {
                    return Err(ENODEV);
                };
                let fd = sys::placeholder_fd(libc::O_CLOEXEC)?;
                let first = {
                    let mut o = lock(&f.opens);
                    *o += 1;
                    *o == 1
                };
                if first {
                    // vfio-pci resets the function when it is first opened.
                    let _ = f.reset(Some(platform::pci::COMMAND_MEMORY));
                }
                if let Some(g) = lock(&self.groups).get_mut(&n) {
                    g.devices_open += 1;
                }
                self.add_fd(fd, Obj::Device(f));
                Ok(fd)
            }
            _ => Err(ENOTTY),
        }
    }

    /// `mmap` of `fd`: the memory file and offset to map instead.
    pub fn mmap(
        &self,
        fd: i32,
        len: usize,
        flags: i32,
        off: i64,
    ) -> Option<Result<(i32, i64), i32>> {
        let Obj::Device(f) = self.obj(fd)? else {
            return Some(Err(libc::ENODEV));
        };
        Some((|| {
            let off = u64::try_from(off).map_err(|_| EINVAL)?;
            if off >> 40 != 0 || flags & libc::MAP_SHARED == 0 {
                return Err(EINVAL);
            }
            let end = off.checked_add(len as u64).ok_or(EINVAL)?;
            if end > f.shm.len() as u64 || off & 0xfff != 0 {
                return Err(EINVAL);
            }
            Ok((f.shm.fd(), off as i64))
        })())
    }

    /// `pread` of `fd`.
    pub fn pread(&self, fd: i32, buf: &mut [u8], off: i64) -> Option<Result<usize, i32>> {
        let Obj::Device(f) = self.obj(fd)? else {
            return Some(Err(EINVAL));
        };
        Some(region_rw(&f, off, buf.len(), Rw::Read(buf)))
    }

    /// `pwrite` of `fd`.
    pub fn pwrite(&self, fd: i32, buf: &[u8], off: i64) -> Option<Result<usize, i32>> {
        let Obj::Device(f) = self.obj(fd)? else {
            return Some(Err(EINVAL));
        };
        if crate::bridge::trace() {
            eprintln!("hca-vfio-emu: pwrite({fd}, {buf:02x?}, {off:#x})");
        }
        Some(region_rw(&f, off, buf.len(), Rw::Write(buf)))
    }
}

enum Rw<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

fn region_rw(f: &Func, off: i64, len: usize, rw: Rw<'_>) -> Result<usize, i32> {
    let off = u64::try_from(off).map_err(|_| EINVAL)?;
    let (index, pos) = ((off >> 40) as u32, off & ((1 << 40) - 1));
    let p = f.emu.platform();
    match index {
        CONFIG_REGION => {
            if pos >= CONFIG_SIZE {
                return Err(EINVAL);
            }
            let n = len.min((CONFIG_SIZE - pos) as usize);
            let r = match rw {
                Rw::Read(b) => p.config_read(pos as u16, &mut b[..n]),
                Rw::Write(b) => p.config_write(pos as u16, &b[..n]),
            };
            r.map(|()| n).map_err(|_| EINVAL)
        }
        0 => {
            use platform::Mmio;
            let bar = p.map_bar(0).map_err(|_| EINVAL)?;
            let end = pos.checked_add(len as u64).ok_or(EINVAL)?;
            if end > bar.len() as u64 {
                return Err(EINVAL);
            }
            let pos = pos as usize;
            match rw {
                // vfio-pci reads BARs in 4-byte (or smaller) accesses.
                Rw::Read(b) => {
                    if pos % 4 != 0 || len % 4 != 0 {
                        return Err(EINVAL);
                    }
                    for (i, c) in b.chunks_exact_mut(4).enumerate() {
                        c.copy_from_slice(&bar.read32(pos + 4 * i).get().to_be_bytes());
                    }
                }
                Rw::Write(b) => match len {
                    4 if pos % 4 == 0 => bar.write32(
                        pos,
                        platform::Be32::new(u32::from_be_bytes(b[..4].try_into().expect("4"))),
                    ),
                    8 if pos % 8 == 0 => bar.write64(
                        pos,
                        platform::Be64::new(u64::from_be_bytes(b[..8].try_into().expect("8"))),
                    ),
                    _ => return Err(EINVAL),
                },
            }
            Ok(len)
        }
        // Regions of size 0.
        1..NUM_REGIONS => Err(EINVAL),
        _ => Err(EINVAL),
    }
}

fn read_cstr(mem: &dyn UserMem, arg: usize) -> Result<String, i32> {
    let mut out = Vec::new();
    for i in 0..64 {
        let b = mem.read(arg + i, 1)?[0];
        if b == 0 {
            return String::from_utf8(out).map_err(|_| ENODEV);
        }
        out.push(b);
    }
    Err(ENODEV)
}

/// `VFIO_IOMMU_GET_INFO` as vfio_iommu_type1 formats it: flags
/// PGSIZES | CAPS, the page sizes, and a capability chain of the IOVA
/// ranges (id 1) and the DMA mappings available (id 3), each aligned to
/// 8 bytes, `next` counted from the start of the buffer; when `argsz` is
/// too small for the chain, only `argsz` is raised to what it needs.
fn iommu_get_info(arg: usize, mem: &dyn UserMem) -> Result<i32, i32> {
    let head = mem.read(arg, 16)?;
    let argsz = u32_at(&head, 0);
    if argsz < 16 {
        return Err(EINVAL);
    }
    const INFO: usize = 24;
    let range_cap = INFO;
    let avail_cap = range_cap + 16 + 16 * IOVA_RANGES.len();
    let total = avail_cap + 16;
    let mut b = vec![0u8; total];
    put32(&mut b, 4, 1 | 2);
    put64(&mut b, 8, PGSIZES);
    if (argsz as usize) < total {
        put32(&mut b, 0, total as u32);
        let n = if argsz as usize >= INFO { INFO } else { 16 };
        return mem.write(arg, &b[..n]).map(|()| 0);
    }
    put32(&mut b, 0, argsz);
    put32(&mut b, 16, INFO as u32);
    b[range_cap..range_cap + 2].copy_from_slice(&1u16.to_ne_bytes());
    b[range_cap + 2..range_cap + 4].copy_from_slice(&1u16.to_ne_bytes());
    put32(&mut b, range_cap + 4, avail_cap as u32);
    put32(&mut b, range_cap + 8, IOVA_RANGES.len() as u32);
    for (i, &(s, e)) in IOVA_RANGES.iter().enumerate() {
        put64(&mut b, range_cap + 16 + 16 * i, s);
        put64(&mut b, range_cap + 24 + 16 * i, e);
    }
    b[avail_cap..avail_cap + 2].copy_from_slice(&3u16.to_ne_bytes());
    b[avail_cap + 2..avail_cap + 4].copy_from_slice(&1u16.to_ne_bytes());
    put32(&mut b, avail_cap + 8, DMA_AVAIL);
    mem.write(arg, &b).map(|()| 0)
}

fn device_ioctl(f: &Arc<Func>, req: u64, arg: usize, mem: &dyn UserMem) -> Result<i32, i32> {
    match req {
        VFIO_DEVICE_GET_INFO => {
            let mut b = mem.read(arg, 16)?;
            if u32_at(&b, 0) < 16 {
                return Err(EINVAL);
            }
            // RESET | PCI.
            put32(&mut b, 4, 1 | 2);
            put32(&mut b, 8, NUM_REGIONS);
            put32(&mut b, 12, NUM_IRQS);
            mem.write(arg, &b).map(|()| 0)
        }
        VFIO_DEVICE_GET_REGION_INFO => {
            let mut b = mem.read(arg, 32)?;
            if u32_at(&b, 0) < 32 {
                return Err(EINVAL);
            }
            let index = u32_at(&b, 8);
            let (flags, size) = match index {
                // READ | WRITE | MMAP.
                0 => (1 | 2 | 4, f.shm.len() as u64),
                CONFIG_REGION => (1 | 2, CONFIG_SIZE),
                i if i < NUM_REGIONS => (0, 0),
                _ => return Err(EINVAL),
            };
            put32(&mut b, 4, flags);
            put32(&mut b, 12, 0);
            put64(&mut b, 16, size);
            put64(&mut b, 24, region_offset(index));
            mem.write(arg, &b).map(|()| 0)
        }
        VFIO_DEVICE_GET_IRQ_INFO => {
            let mut b = mem.read(arg, 16)?;
            if u32_at(&b, 0) < 16 {
                return Err(EINVAL);
            }
            // EVENTFD 1, MASKABLE 2, AUTOMASKED 4, NORESIZE 8.
            let (flags, count) = match u32_at(&b, 8) {
                0 => (1 | 2 | 4, 1),
                1 => (1 | 8, 0),
                MSIX_INDEX => (1 | 8, u32::from(f.emu.msix_vectors())),
                3 | 4 => (1, 1),
                _ => return Err(EINVAL),
            };
            put32(&mut b, 4, flags);
            put32(&mut b, 12, count);
            mem.write(arg, &b).map(|()| 0)
        }
        VFIO_DEVICE_SET_IRQS => set_irqs(f, arg, mem),
        VFIO_DEVICE_RESET => {
            f.bridge.flush();
            f.reset(None).map(|()| 0)
        }
        _ => Err(ENOTTY),
    }
}

fn disable_msix(f: &Func) {
    let mut m = lock(&f.msix);
    m.enabled = None;
    m.fds.clear();
}

/// `VFIO_DEVICE_SET_IRQS` as vfio-pci validates and applies it
/// (`vfio_set_irqs_validate_and_prepare`, `vfio_pci_set_msi_trigger`),
/// for MSI-X; other indexes take nothing.
fn set_irqs(f: &Func, arg: usize, mem: &dyn UserMem) -> Result<i32, i32> {
    const NONE: u32 = 1;
    const BOOL: u32 = 2;
    const EVENTFD: u32 = 4;
    const TRIGGER: u32 = 32;
    const DATA: u32 = 7;
    const ACTION: u32 = 0x38;
    let b = mem.read(arg, 20)?;
    let (argsz, flags, index) = (u32_at(&b, 0), u32_at(&b, 4), u32_at(&b, 8));
    let (start, count) = (u32_at(&b, 12) as usize, u32_at(&b, 16) as usize);
    if argsz < 20
        || index >= NUM_IRQS
        || flags & !(DATA | ACTION) != 0
        || (flags & DATA).count_ones() != 1
        || (flags & ACTION).count_ones() != 1
    {
        return Err(EINVAL);
    }
    if index != MSIX_INDEX {
        return Err(EINVAL);
    }
    let max = usize::from(f.emu.msix_vectors());
    if (count == 0 && flags & NONE == 0) || (count > 0 && (start >= max || start + count > max)) {
        return Err(EINVAL);
    }
    let size = match flags & DATA {
        BOOL => 1,
        EVENTFD => 4,
        _ => 0,
    };
    if size > 0 && (argsz as usize - 20) < count * size {
        return Err(EINVAL);
    }
    let data = if size > 0 {
        mem.read(arg + 20, count * size)?
    } else {
        Vec::new()
    };
    if flags & TRIGGER == 0 {
        // vfio-pci has no mask/unmask for MSI-X.
        return Err(ENOTTY);
    }
    let mut m = lock(&f.msix);
    if count == 0 && flags & NONE != 0 {
        m.enabled = None;
        m.fds.clear();
        return Ok(0);
    }
    if flags & EVENTFD != 0 {
        let n = match m.enabled {
            Some(n) => n,
            None => start + count,
        };
        if start + count > n {
            return Err(EINVAL);
        }
        let mut new: Vec<(usize, Option<OwnedFd>)> = Vec::new();
        for i in 0..count {
            let fd = i32::from_ne_bytes(data[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            if fd < 0 {
                new.push((start + i, None));
            } else {
                new.push((start + i, Some(sys::dup_eventfd(fd)?)));
            }
        }
        if m.enabled.is_none() {
            m.enabled = Some(n);
            m.fds = (0..n).map(|_| None).collect();
        }
        for (v, fd) in new {
            m.fds[v] = fd;
        }
        return Ok(0);
    }
    if m.enabled.is_none() {
        return Err(EINVAL);
    }
    for i in 0..count {
        if flags & NONE != 0 || data.get(i).is_some_and(|&b| b != 0) {
            if let Some(Some(fd)) = m.fds.get(start + i) {
                sys::eventfd_signal(fd);
            }
        }
    }
    Ok(0)
}

/// Cables the functions as the variable says.
fn wire(specs: &[FunctionSpec], funcs: &[Arc<Func>]) {
    for (a, b) in config::cables(specs) {
        if let Err(e) = hca_emu::connect(&funcs[a].emu, 1, &funcs[b].emu, 1) {
            eprintln!(
                "hca-vfio-emu: cannot cable {} to {}: {e}",
                specs[a].bdf, specs[b].bdf
            );
        }
    }
    for (s, f) in specs.iter().zip(funcs) {
        let r = match &s.wire {
            Wire::Loopback => f.emu.plug_loopback(1),
            Wire::Socket { local, peer } => f.emu.cable_to(
                1,
                &hca_emu::WireSpec::Unix {
                    local: local.into(),
                    peer: peer.into(),
                },
            ),
            Wire::None | Wire::To(_) => Ok(()),
        };
        if let Err(e) = r {
            eprintln!("hca-vfio-emu: {}: cannot wire port 1: {e}", s.bdf);
        }
    }
}
