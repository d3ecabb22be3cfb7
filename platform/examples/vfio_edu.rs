//! The vfio backend against a real kernel: QEMU's `edu` PCI device
//! (1234:11e8) behind an emulated Intel IOMMU, driven exactly as the mlx5
//! driver drives a ConnectX. Run inside the guest that `tests/qemu/run.sh`
//! boots (it needs root, vfio-pci, uio_pci_generic and the device layout of
//! that script); prints one line `VFIO-EDU: PASS` or `VFIO-EDU: FAIL ...`.
//!
//! Layout expected: one edu alone in its IOMMU group (the device under test)
//! and two edu behind a conventional PCI bridge, which share one group (for
//! the non-viable-group check).

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use platform::vfio::{
    PciFunction, Sysfs, VfioOptions, VfioPlatform, drop_cap_ipc_lock, has_cap_ipc_lock,
    kernel_group_viable, set_memlock_limit, wait_for_path,
};
use platform::{Be32, Be64, DmaRegion, Error, Mmio, Platform, pci};

const EDU_VENDOR: u16 = 0x1234;
const EDU_DEVICE: u16 = 0x11e8;
/// edu registers (QEMU docs/specs/edu.rst).
const EDU_ID: usize = 0x00;
const EDU_LIVENESS: usize = 0x04;
const EDU_DMA_SRC: usize = 0x80;
const EDU_DMA_DST: usize = 0x88;
const EDU_DMA_CNT: usize = 0x90;
const EDU_DMA_CMD: usize = 0x98;
const EDU_DMA_START: u32 = 1;
const EDU_DMA_TO_RAM: u32 = 2;
/// The device's 4 KiB DMA buffer, at this device address.
const EDU_BUF: u64 = 0x40000;
/// Bytes per transfer: half of edu's buffer. (QEMU 7.2's edu refuses a
/// transfer that ends exactly at the end of its buffer, an off-by-one fixed
/// later, by aborting the whole VM; half the buffer also leaves the other
/// half of the host page to show that the device writes no more than asked.)
const EDU_XFER: usize = 2048;
/// The host buffer.
const HOST_LEN: usize = 4096;
/// edu's default DMA mask.
const EDU_DMA_BITS: u8 = 28;

struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) {
        if ok {
            self.passed += 1;
            println!("ok   {name}: {detail}");
        } else {
            self.failed.push(name.to_string());
            println!("FAIL {name}: {detail}");
        }
    }

    /// `r` must be an error matching `want`; prints its message.
    fn expect_err<T>(&mut self, name: &str, r: Result<T, Error>, want: impl Fn(&Error) -> bool) {
        match r {
            Err(e) => {
                let ok = want(&e);
                self.check(name, ok, format!("error: {e}"));
            }
            Ok(_) => self.check(name, false, "succeeded, expected an error"),
        }
    }
}

/// Little-endian device registers: the raw value of the load is the
/// register (x86_64 guest).
fn rd(w: &impl Mmio, off: usize) -> u32 {
    w.read32(off).to_raw()
}
fn wr(w: &impl Mmio, off: usize, v: u32) {
    w.write32(off, Be32::from_raw(v))
}
fn wr64(w: &impl Mmio, off: usize, v: u64) {
    w.write64(off, Be64::from_raw(v))
}

/// Runs one edu DMA and waits for the engine to finish (edu completes a
/// transfer 100 ms after the command, virtual time).
fn edu_dma(
    w: &impl Mmio,
    src: u64,
    dst: u64,
    len: usize,
    to_ram: bool,
) -> Result<Duration, String> {
    wr64(w, EDU_DMA_SRC, src);
    wr64(w, EDU_DMA_DST, dst);
    wr64(w, EDU_DMA_CNT, len as u64);
    let cmd = EDU_DMA_START | if to_ram { EDU_DMA_TO_RAM } else { 0 };
    let start = Instant::now();
    wr(w, EDU_DMA_CMD, cmd);
    while rd(w, EDU_DMA_CMD) & EDU_DMA_START != 0 {
        if start.elapsed() > Duration::from_secs(20) {
            return Err("edu DMA engine did not finish within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(start.elapsed())
}

/// Kernel log lines written from now on.
struct Kmsg(fs::File);

impl Kmsg {
    fn open() -> std::io::Result<Self> {
        let mut f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")?;
        // Skip what is there already.
        let mut buf = vec![0u8; 8192];
        while f.read(&mut buf).is_ok_and(|n| n > 0) {}
        Ok(Self(f))
    }

    /// Lines logged since the last call.
    fn drain(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        // /dev/kmsg returns one record per read; EAGAIN when none is left.
        while let Ok(n) = self.0.read(&mut buf) {
            if n == 0 {
                break;
            }
            let rec = String::from_utf8_lossy(&buf[..n]);
            let msg = rec.split_once(';').map(|(_, m)| m).unwrap_or(&rec);
            out.push(msg.trim_end().to_string());
        }
        out
    }
}

/// Binds a function to another driver through driver_override (test setup:
/// what another kernel driver owning the device looks like).
fn bind_other(sysfs: &Sysfs, bdf: &str, driver: &str) -> std::io::Result<()> {
    let dev = sysfs.device_path(bdf);
    if dev.join("driver").exists() {
        fs::write(dev.join("driver/unbind"), bdf)?;
    }
    fs::write(dev.join("driver_override"), driver)?;
    fs::write(sysfs.root().join("bus/pci/drivers_probe"), bdf)
}

fn options() -> VfioOptions {
    VfioOptions::default()
        .dma_mask_bits(EDU_DMA_BITS)
        .planned_dma_bytes(4 << 20)
}

fn fill_pattern(r: &DmaRegion, seed: u8) {
    let bytes: Vec<u8> = (0..r.len())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect();
    r.write_bytes(0, &bytes);
}

fn read_all(r: &DmaRegion, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    r.read_bytes(0, &mut v);
    v
}

/// The device under test: the positive path.
fn exercise(c: &mut Checks, sysfs: &Sysfs, dut: &PciFunction, kmsg: &mut Option<Kmsg>) {
    let plat = match VfioPlatform::open(&dut.bdf, options()) {
        Ok(p) => p,
        Err(e) => return c.check("open", false, format!("open failed: {e}")),
    };
    c.check("open", true, plat.describe());
    let info = plat.iommu_info();
    c.check(
        "iommu info",
        info.ranges_reported && !info.ranges.is_empty(),
        format!(
            "IOVA ranges {:x?}, page sizes {:#x}, DMA mask {:#x}",
            info.ranges,
            info.page_sizes,
            plat.dma_mask()
        ),
    );

    // Bus mastering and memory space were enabled by open().
    let mut cmd = [0u8; 2];
    let cmd = plat
        .config_read(pci::COMMAND, &mut cmd)
        .map(|_| u16::from_le_bytes(cmd));
    c.check(
        "command register",
        cmd.as_ref().is_ok_and(|v| {
            v & (pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER)
                == pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER
        }),
        format!("{cmd:x?}"),
    );
    let mut ids = [0u8; 4];
    let ids = plat.config_read(pci::VENDOR_ID, &mut ids).map(|_| ids);
    c.check(
        "config space ids",
        ids.as_ref().is_ok_and(|b| *b == [0x34, 0x12, 0xe8, 0x11]),
        format!("{ids:x?}"),
    );

    let bar = match plat.map_bar(0) {
        Ok(b) => b,
        Err(e) => return c.check("map BAR0", false, e),
    };
    c.check(
        "map BAR0",
        bar.len() >= 4096,
        format!("{} bytes", bar.len()),
    );
    let id = rd(&bar, EDU_ID);
    c.check(
        "edu identification",
        id & 0xff == 0xed,
        format!("{id:#010x} (version {}.{})", id >> 24, (id >> 16) & 0xff),
    );
    let mut live = true;
    for v in [0u32, 0x1234_5678, 0xffff_ffff, 0xa5a5_5a5a] {
        wr(&bar, EDU_LIVENESS, v);
        live &= rd(&bar, EDU_LIVENESS) == !v;
    }
    c.check(
        "edu liveness",
        live,
        "reads back the bitwise NOT of each write",
    );
    c.check(
        "BAR bounds",
        bar.check(bar.len(), 4).is_err() && bar.check(2, 4).is_err(),
        "outside/misaligned offsets refused",
    );

    // DMA host -> device -> host through the IOMMU.
    let buf = match plat.alloc_dma(HOST_LEN, 4096) {
        Ok(b) => b,
        Err(e) => return c.check("alloc DMA", false, e),
    };
    let end = buf.iova() + buf.len() as u64 - 1;
    c.check(
        "IOVA below the DMA mask",
        end <= plat.dma_mask() && buf.iova() >= platform::vfio::IOVA_MIN,
        format!(
            "IOVA {:#x}..={end:#x}, chunks {:x?}",
            buf.iova(),
            plat.dma_chunks()
        ),
    );
    c.check(
        "DMA memory zeroed",
        read_all(&buf, buf.len()).iter().all(|&b| b == 0),
        "all zero",
    );
    fill_pattern(&buf, 7);
    let sent = read_all(&buf, EDU_XFER);
    let r = edu_dma(&bar, buf.iova(), EDU_BUF, EDU_XFER, false);
    c.check("DMA RAM -> edu", r.is_ok(), format!("{r:?}"));
    buf.fill(0, buf.len(), 0);
    let r = edu_dma(&bar, EDU_BUF, buf.iova(), EDU_XFER, true);
    c.check("DMA edu -> RAM", r.is_ok(), format!("{r:?}"));
    let back = read_all(&buf, HOST_LEN);
    let diffs = sent.iter().zip(&back).filter(|(a, b)| a != b).count();
    let beyond = back[EDU_XFER..].iter().filter(|&&b| b != 0).count();
    c.check(
        "round trip byte for byte",
        diffs == 0 && beyond == 0 && sent != vec![0u8; EDU_XFER],
        format!("{EDU_XFER} bytes, {diffs} differ, {beyond} written beyond the transfer"),
    );

    // Bus mastering off: the device's DMA does not reach memory.
    buf.fill(0, buf.len(), 0x5a);
    let off = plat.set_bus_master(false);
    let r = edu_dma(&bar, EDU_BUF, buf.iova(), EDU_XFER, true);
    let untouched = read_all(&buf, EDU_XFER).iter().all(|&b| b == 0x5a);
    let on = plat.set_bus_master(true);
    c.check(
        "bus master off blocks DMA",
        off.is_ok() && on.is_ok() && r.is_ok() && untouched,
        format!("buffer untouched: {untouched}"),
    );
    let r = edu_dma(&bar, EDU_BUF, buf.iova(), EDU_XFER, true);
    c.check(
        "bus master on again",
        r.is_ok() && read_all(&buf, EDU_XFER) == sent,
        "DMA reaches memory again",
    );

    // Free: the chunk is unmapped from the IOMMU; a DMA to its IOVA faults.
    let freed_iova = buf.iova();
    let r = plat.try_free_dma(buf);
    c.check(
        "free unmaps",
        r.is_ok() && plat.dma_chunks().is_empty(),
        format!("{r:?}, chunks left {:?}", plat.dma_chunks()),
    );
    if let Some(k) = kmsg.as_mut() {
        k.drain();
    }
    let r = edu_dma(&bar, EDU_BUF, freed_iova, EDU_XFER, true);
    std::thread::sleep(Duration::from_millis(200));
    let lines = kmsg.as_mut().map(Kmsg::drain).unwrap_or_default();
    let addr = format!("fault addr {freed_iova:#x}");
    let fault: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("DMAR") && (l.contains("fault") || l.contains("Fault")))
        .collect();
    let names_addr = fault.iter().any(|l| l.contains(&addr));
    c.check(
        "DMA to an unmapped IOVA faults",
        r.is_ok() && names_addr,
        format!(
            "guest kernel log: {}",
            if fault.is_empty() {
                "no DMAR fault".to_string()
            } else {
                fault
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            }
        ),
    );
    // The process is unharmed: DMA through a new mapping works.
    let ok = plat.alloc_dma(HOST_LEN, 4096).is_ok_and(|b| {
        let ok = edu_dma(&bar, EDU_BUF, b.iova(), EDU_XFER, true).is_ok()
            && read_all(&b, EDU_XFER) == sent;
        plat.free_dma(b);
        ok
    });
    c.check("DMA works after the fault", ok, "new mapping, same data");

    // Typed refusals on the freed and foreign regions.
    let big = plat.alloc_dma(3 << 20, 4096);
    c.check(
        "multi-chunk allocation",
        big.as_ref()
            .is_ok_and(|b| b.len() == 3 << 20 && b.iova() + (3 << 20) - 1 <= plat.dma_mask()),
        format!("{:?}", big.as_ref().map(|b| (b.iova(), b.len()))),
    );
    if let Ok(b) = big {
        let _ = plat.try_free_dma(b);
    }
    c.expect_err(
        "no alignment above 2 MiB",
        plat.alloc_dma(4096, 4 << 20),
        |e| matches!(e, Error::InvalidArgument(_)),
    );

    // Function reset through VFIO_DEVICE_RESET (edu has no FLR; the kernel
    // may still have another reset method, or report none).
    let r = plat.reset_function();
    c.check(
        "reset",
        matches!(r, Ok(()) | Err(Error::NotSupported(_))),
        format!("{r:?}"),
    );
    if r.is_ok() {
        c.check("edu alive after reset", rd(&bar, EDU_ID) & 0xff == 0xed, "");
    }
    drop(bar);
    drop(plat);
    let _ = sysfs;
}

/// DMA from a 2 MiB huge page: reserve a few in the guest, check the chunk
/// is one and that edu's DMA goes through it.
fn huge_pages(c: &mut Checks, dut: &PciFunction) {
    let knob = "/proc/sys/vm/nr_hugepages";
    let reserved = fs::write(knob, "4")
        .and_then(|_| fs::read_to_string(knob))
        .map(|s| s.trim().to_string());
    c.check(
        "setup: huge pages reserved",
        reserved.as_ref().is_ok_and(|n| n != "0"),
        format!("nr_hugepages = {reserved:?}"),
    );
    let plat = match VfioPlatform::open(&dut.bdf, options()) {
        Ok(p) => p,
        Err(e) => return c.check("open (huge pages)", false, e),
    };
    let (bar, buf) = match (plat.map_bar(0), plat.alloc_dma(HOST_LEN, 4096)) {
        (Ok(bar), Ok(buf)) => (bar, buf),
        (a, b) => {
            return c.check(
                "huge page DMA",
                false,
                format!("{:?} {:?}", a.err(), b.err()),
            );
        }
    };
    let chunks = plat.dma_chunks();
    fill_pattern(&buf, 99);
    let sent = read_all(&buf, EDU_XFER);
    let there = edu_dma(&bar, buf.iova(), EDU_BUF, EDU_XFER, false);
    buf.fill(0, HOST_LEN, 0);
    let back = edu_dma(&bar, EDU_BUF, buf.iova(), EDU_XFER, true);
    let same = read_all(&buf, EDU_XFER) == sent;
    c.check(
        "huge page DMA",
        chunks.len() == 1 && chunks[0].huge && there.is_ok() && back.is_ok() && same,
        format!("chunks {chunks:x?}, round trip equal: {same}"),
    );
    let freed = plat.try_free_dma(buf);
    c.check("huge page freed", freed.is_ok(), format!("{freed:?}"));
    drop(bar);
    drop(plat);
    let _ = fs::write(knob, "0");
}

fn main() -> ExitCode {
    let mut c = Checks {
        passed: 0,
        failed: Vec::new(),
    };
    let sysfs = Sysfs::default();
    let mut kmsg = Kmsg::open().ok();

    // Discovery.
    let mlx5 = sysfs.list_by_id(0x15b3, None);
    c.check("mlx5 discovery", mlx5.is_ok(), format!("{mlx5:?}"));
    let edus = sysfs
        .list_by_id(EDU_VENDOR, Some(EDU_DEVICE))
        .unwrap_or_default();
    for e in &edus {
        println!(
            "     found {} {:04x}:{:04x} driver {:?} group {:?}",
            e.bdf, e.vendor, e.device, e.driver, e.iommu_group
        );
    }
    let alone = |f: &&PciFunction| {
        f.iommu_group
            .is_some_and(|g| sysfs.group_members(g).is_ok_and(|m| m.len() == 1))
    };
    let Some(dut) = edus.iter().find(alone).cloned() else {
        c.check("discovery", false, "no edu device alone in an IOMMU group");
        return finish(&c);
    };
    let shared: Vec<&PciFunction> = edus.iter().filter(|f| !alone(f)).collect();
    c.check(
        "discovery",
        shared.len() == 2,
        format!(
            "device under test {} (group {:?}), {} edu sharing a group",
            dut.bdf,
            dut.iommu_group,
            shared.len()
        ),
    );
    let group_node = Path::new("/dev/vfio").join(dut.iommu_group.unwrap_or(0).to_string());

    // Not bound at all, then bound to another driver: the clear error.
    c.expect_err(
        "not bound: no driver",
        VfioPlatform::open(&dut.bdf, options()),
        |e| matches!(e, Error::NotBoundToVfio { driver: None, .. }),
    );
    let other = bind_other(&sysfs, &dut.bdf, "uio_pci_generic");
    let f = sysfs.function(&dut.bdf);
    c.check(
        "setup: bound to uio_pci_generic",
        other.is_ok()
            && f.as_ref()
                .is_ok_and(|f| f.driver.as_deref() == Some("uio_pci_generic")),
        format!("{other:?} {:?}", f.map(|f| f.driver)),
    );
    c.expect_err(
        "not bound: other driver",
        VfioPlatform::open(&dut.bdf, options()),
        |e| {
            matches!(e, Error::NotBoundToVfio { driver: Some(d), .. } if d == "uio_pci_generic")
                && e.to_string().contains("hca bind")
        },
    );

    // The project's bind code (driver_override, unbind, drivers_probe).
    let bound = sysfs.bind_vfio(&dut.bdf);
    c.check(
        "bind to vfio-pci",
        bound
            .as_ref()
            .is_ok_and(|f| f.driver.as_deref() == Some("vfio-pci")),
        format!("{:?}", bound.as_ref().map(|f| &f.driver)),
    );
    let node = wait_for_path(&group_node, Duration::from_secs(2));
    c.check("group node appears", node.is_ok(), group_node.display());
    c.check(
        "readiness",
        sysfs.check_vfio_ready(&dut.bdf).is_ok(),
        "bound, group viable",
    );
    c.check(
        "kernel says viable",
        dut.iommu_group
            .is_some_and(|g| kernel_group_viable(Path::new("/dev/vfio"), g).unwrap_or(false)),
        "VFIO_GROUP_GET_STATUS",
    );

    exercise(&mut c, &sysfs, &dut, &mut kmsg);
    huge_pages(&mut c, &dut);

    // A non-viable group: one edu of the shared group on vfio-pci, the other
    // owned by a kernel driver.
    if let [a, b] = shared[..] {
        let ba = sysfs.bind_vfio(&a.bdf);
        let bb = bind_other(&sysfs, &b.bdf, "uio_pci_generic");
        let b_driver = sysfs.function(&b.bdf).ok().and_then(|f| f.driver);
        c.check(
            "setup: shared group",
            ba.is_ok() && bb.is_ok() && b_driver.as_deref() == Some("uio_pci_generic"),
            format!("{} on vfio-pci, {} on {:?}", a.bdf, b.bdf, b_driver),
        );
        let group = a.iommu_group.unwrap_or(0);
        let kernel = kernel_group_viable(Path::new("/dev/vfio"), group);
        c.check(
            "kernel says not viable",
            matches!(kernel, Ok(false)),
            format!("VFIO_GROUP_GET_STATUS on group {group}: viable = {kernel:?}"),
        );
        c.expect_err(
            "non-viable group",
            VfioPlatform::open(&a.bdf, options()),
            |e| {
                matches!(e, Error::GroupNotViable { blockers, .. }
                if blockers.iter().any(|(bdf, d)| *bdf == b.bdf && d == "uio_pci_generic"))
            },
        );
        // Unbinding the other driver makes the group viable again.
        let _ = sysfs.unbind_vfio(&b.bdf);
        let ok = VfioPlatform::open(&a.bdf, options()).map(|p| p.describe().to_string());
        c.check("group viable again", ok.is_ok(), format!("{ok:?}"));
    } else {
        c.check(
            "non-viable group",
            false,
            "no pair of edu devices sharing a group",
        );
    }

    // The memlock limit, with CAP_IPC_LOCK dropped so the kernel enforces it
    // on a root process too.
    let dropped = drop_cap_ipc_lock();
    let limit = set_memlock_limit(1 << 20);
    c.check(
        "setup: CAP_IPC_LOCK dropped, RLIMIT_MEMLOCK 1 MiB",
        dropped.is_ok() && limit.is_ok() && !has_cap_ipc_lock(),
        format!("{dropped:?} {limit:?}"),
    );
    c.expect_err(
        "memlock too low (checked up front)",
        VfioPlatform::open(&dut.bdf, options().planned_dma_bytes(64 << 20)),
        |e| {
            matches!(e, Error::MemlockTooLow { limit, .. } if *limit == 1 << 20)
                && e.to_string().contains("ulimit -l")
        },
    );
    match VfioPlatform::open(&dut.bdf, options().planned_dma_bytes(512 << 10)) {
        Ok(p) => c.expect_err(
            "memlock too low (refused by the kernel at map time)",
            p.alloc_dma(4096, 4096),
            |e| matches!(e, Error::MemlockTooLow { .. }),
        ),
        Err(e) => c.check("open within the memlock limit", false, e),
    }
    let _ = set_memlock_limit(u64::MAX);

    // Back to where it was.
    let unbound = sysfs.unbind_vfio(&dut.bdf);
    c.check(
        "unbind from vfio-pci",
        unbound.as_ref().is_ok_and(|f| !f.is_vfio_bound()),
        format!("{:?}", unbound.as_ref().map(|f| &f.driver)),
    );
    finish(&c)
}

fn finish(c: &Checks) -> ExitCode {
    if c.failed.is_empty() && c.passed > 0 {
        println!("VFIO-EDU: PASS ({} checks)", c.passed);
        ExitCode::SUCCESS
    } else {
        println!(
            "VFIO-EDU: FAIL ({} passed, {} failed: {})",
            c.passed,
            c.failed.len(),
            c.failed.join(", ")
        );
        ExitCode::FAILURE
    }
}
