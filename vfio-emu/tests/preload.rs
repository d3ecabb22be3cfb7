//! The preload library in a real process: each test runs itself again as
//! a child with `LD_PRELOAD=libhca_vfio_emu.so` and `HCA_EMU_VFIO` set, and
//! the child drives the emulated function through the plain libc calls a
//! VFIO program makes (raw ioctls, pread/pwrite, mmap); the parent checks
//! the child's exit status and the report file.

use std::ffi::CString;
use std::fs;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BDF: &str = "0000:00:10.0";
const CHILD: &str = "HCA_VFIO_EMU_TEST_CHILD";

/// `_IO(';', 100 + n)`.
const fn vfio(n: u64) -> u64 {
    (0x3b << 8) | (100 + n)
}
const GET_API_VERSION: u64 = vfio(0);
const CHECK_EXTENSION: u64 = vfio(1);
const SET_IOMMU: u64 = vfio(2);
const GROUP_GET_STATUS: u64 = vfio(3);
const GROUP_SET_CONTAINER: u64 = vfio(4);
const GROUP_GET_DEVICE_FD: u64 = vfio(6);
const DEVICE_GET_INFO: u64 = vfio(7);
const DEVICE_GET_REGION_INFO: u64 = vfio(8);
const DEVICE_GET_IRQ_INFO: u64 = vfio(9);
const DEVICE_SET_IRQS: u64 = vfio(10);
const DEVICE_RESET: u64 = vfio(11);
const IOMMU_GET_INFO: u64 = vfio(12);
const IOMMU_MAP_DMA: u64 = vfio(13);
const IOMMU_UNMAP_DMA: u64 = vfio(14);
const CONFIG: i64 = 7 << 40;

/// The library cargo built with this test (the crate's cdylib, beside
/// this test's binary in `target/<profile>/deps/`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let lib = dir.join("libhca_vfio_emu.so");
    if !lib.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "hca-vfio-emu"])
            .status()
            .unwrap();
        assert!(st.success(), "building the preload library failed");
    }
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

struct Child {
    ok: bool,
    stderr: String,
    report: String,
}

/// Runs test `name` again as a child under the preload library.
fn child(name: &str, var: &str) -> Child {
    let report = std::env::temp_dir().join(format!(
        "hca-vfio-emu-test-{name}-{}.txt",
        std::process::id()
    ));
    let _ = fs::remove_file(&report);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_PRELOAD", library())
        .env("HCA_EMU_VFIO", var)
        .env("HCA_EMU_VFIO_REPORT", &report)
        .output()
        .unwrap();
    let stderr =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let r = fs::read_to_string(&report).unwrap_or_default();
    let _ = fs::remove_file(&report);
    Child {
        ok: out.status.success(),
        stderr,
        report: r,
    }
}

fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

#[track_caller]
fn run(name: &str) -> Child {
    let c = child(name, &format!("{BDF}=cx4"));
    assert!(
        c.ok,
        "child {name} failed:\n{}\nreport:\n{}",
        c.stderr, c.report
    );
    c
}

// ---- raw VFIO helpers (the child side) ----------------------------------------

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn open(path: &str) -> Result<RawFd, i32> {
    let p = CString::new(path).unwrap();
    // SAFETY: a C string.
    let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDWR) };
    if fd < 0 { Err(errno()) } else { Ok(fd) }
}

fn ioctl_val(fd: RawFd, req: u64, arg: u64) -> Result<i32, i32> {
    // SAFETY: an integer argument.
    let r = unsafe { libc::ioctl(fd, req as _, arg as libc::c_ulong) };
    if r < 0 { Err(errno()) } else { Ok(r) }
}

fn ioctl_buf(fd: RawFd, req: u64, buf: &mut [u8]) -> Result<i32, i32> {
    // SAFETY: the buffer is as large as the structure's argsz says.
    let r = unsafe { libc::ioctl(fd, req as _, buf.as_mut_ptr()) };
    if r < 0 { Err(errno()) } else { Ok(r) }
}

fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
}
fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
}
fn get64(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().unwrap())
}

/// Container, group and device of `BDF`, set up as a VFIO program does.
fn open_device() -> (RawFd, RawFd, RawFd) {
    let c = open("/dev/vfio/vfio").unwrap();
    assert_eq!(ioctl_val(c, GET_API_VERSION, 0), Ok(0));
    assert_eq!(ioctl_val(c, CHECK_EXTENSION, 3), Ok(1));
    let g = open("/dev/vfio/100").unwrap();
    let mut st = [0u8; 8];
    put32(&mut st, 0, 8);
    ioctl_buf(g, GROUP_GET_STATUS, &mut st).unwrap();
    assert_eq!(get32(&st, 4), 1, "viable, no container");
    let mut cfd = c.to_ne_bytes();
    ioctl_buf(g, GROUP_SET_CONTAINER, &mut cfd).unwrap();
    ioctl_val(c, SET_IOMMU, 3).unwrap();
    let mut name = CString::new(BDF).unwrap().into_bytes_with_nul();
    let d = ioctl_buf(g, GROUP_GET_DEVICE_FD, &mut name).unwrap();
    (c, g, d)
}

fn pread(fd: RawFd, buf: &mut [u8], off: i64) -> isize {
    // SAFETY: a buffer of that length.
    unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) }
}

fn pwrite(fd: RawFd, buf: &[u8], off: i64) -> isize {
    // SAFETY: a buffer of that length.
    unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off) }
}

/// Anonymous memory of `len` bytes.
fn anon(len: usize) -> *mut u8 {
    // SAFETY: a new private anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

fn map_dma(c: RawFd, vaddr: u64, iova: u64, size: u64) -> Result<i32, i32> {
    let mut m = [0u8; 32];
    put32(&mut m, 0, 32);
    put32(&mut m, 4, 3);
    put64(&mut m, 8, vaddr);
    put64(&mut m, 16, iova);
    put64(&mut m, 24, size);
    ioctl_buf(c, IOMMU_MAP_DMA, &mut m)
}

fn unmap_dma(c: RawFd, iova: u64, size: u64) -> Result<u64, i32> {
    let mut m = [0u8; 24];
    put32(&mut m, 0, 24);
    put64(&mut m, 8, iova);
    put64(&mut m, 16, size);
    ioctl_buf(c, IOMMU_UNMAP_DMA, &mut m).map(|_| get64(&m, 16))
}

/// BAR0, mapped.
fn map_bar(d: RawFd) -> *mut u8 {
    // SAFETY: a shared mapping of the device's BAR0 region (offset 0).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            32 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            d,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of BAR0: {}", errno());
    p.cast()
}

fn bar_write32(bar: *mut u8, off: usize, v: u32) {
    // SAFETY: inside the 32 MiB BAR mapping, aligned.
    unsafe { bar.add(off).cast::<u32>().write_volatile(v.to_be()) }
}
fn bar_write64(bar: *mut u8, off: usize, v: u64) {
    // SAFETY: inside the 32 MiB BAR mapping, aligned.
    unsafe { bar.add(off).cast::<u64>().write_volatile(v.to_be()) }
}
fn bar_read32(bar: *mut u8, off: usize) -> u32 {
    // SAFETY: inside the 32 MiB BAR mapping, aligned.
    u32::from_be(unsafe { bar.add(off).cast::<u32>().read_volatile() })
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Turns on memory decoding and bus mastering.
fn bus_master(d: RawFd) {
    assert_eq!(pwrite(d, &6u16.to_le_bytes(), CONFIG + 4), 2);
}

/// Points the command queue at `iova` and waits for `initializing` to
/// clear.
fn set_cmdq(bar: *mut u8, iova: u64) {
    bar_write32(bar, 0x10, (iova >> 32) as u32);
    bar_write32(bar, 0x14, iova as u32);
    // The device's answer: the address with its log sizes (0x56).
    wait_for("the command queue address", || {
        bar_read32(bar, 0x14) == iova as u32 | 0x56
    });
    wait_for("initializing to clear", || {
        bar_read32(bar, 0x1fc) >> 31 == 0
    });
}

// ---- the tests -----------------------------------------------------------------

#[test]
fn sysfs_shows_a_function_bound_to_vfio_pci() {
    if !in_child() {
        run("sysfs_shows_a_function_bound_to_vfio_pci");
        return;
    }
    let dir = Path::new("/sys/bus/pci/devices").join(BDF);
    assert_eq!(fs::read_to_string(dir.join("vendor")).unwrap(), "0x15b3\n");
    assert_eq!(fs::read_to_string(dir.join("device")).unwrap(), "0x1013\n");
    assert_eq!(fs::read_to_string(dir.join("class")).unwrap(), "0x020000\n");
    let g = fs::read_link(dir.join("iommu_group")).unwrap();
    assert_eq!(g.file_name().unwrap(), "100");
    let drv = fs::read_link(dir.join("driver")).unwrap();
    assert_eq!(drv.file_name().unwrap(), "vfio-pci");
    let members: Vec<_> = fs::read_dir("/sys/kernel/iommu_groups/100/devices")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(members, [BDF]);
    let listed: Vec<_> = fs::read_dir("/sys/bus/pci/devices")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(listed.iter().any(|n| n == BDF), "{listed:?}");
    assert!(Path::new("/dev/vfio/vfio").exists());
    assert!(Path::new("/dev/vfio/100").exists());
    assert!(!Path::new("/dev/vfio/101").exists());
    // What platform::vfio checks before it opens a device.
    let f = platform::vfio::Sysfs::default()
        .check_vfio_ready(BDF)
        .unwrap();
    assert_eq!(f.iommu_group, Some(100));
    assert_eq!((f.vendor, f.device), (0x15b3, 0x1013));
    assert_eq!(
        hca_driver::pci::mlx5_device_name(f.device),
        Some("ConnectX-4")
    );
    assert!(f.is_vfio_bound());
    // Not presented: another address.
    assert!(!Path::new("/sys/bus/pci/devices/0000:00:11.0").exists());
}

#[test]
fn a_malformed_variable_is_reported_and_presents_nothing() {
    if !in_child() {
        let c = child(
            "a_malformed_variable_is_reported_and_presents_nothing",
            &format!("{BDF}=cx9"),
        );
        assert!(c.ok, "{}", c.stderr);
        assert!(
            c.stderr.contains("HCA_EMU_VFIO: unknown model \"cx9\""),
            "{}",
            c.stderr
        );
        return;
    }
    assert!(!Path::new("/sys/bus/pci/devices").join(BDF).exists());
    assert_eq!(open("/dev/vfio/100"), Err(libc::ENOENT));
}

#[test]
fn container_group_and_device_ioctls() {
    if !in_child() {
        run("container_group_and_device_ioctls");
        return;
    }
    let c = open("/dev/vfio/vfio").unwrap();
    assert_eq!(ioctl_val(c, CHECK_EXTENSION, 1), Ok(1));
    assert_eq!(ioctl_val(c, CHECK_EXTENSION, 8), Ok(0), "no NOIOMMU");
    // No group yet.
    assert_eq!(ioctl_val(c, SET_IOMMU, 3), Err(libc::EINVAL));
    assert_eq!(ioctl_val(c, 0x3b00 | 199, 0), Err(libc::ENOTTY));
    let g = open("/dev/vfio/100").unwrap();
    assert_eq!(
        open("/dev/vfio/100"),
        Err(libc::EBUSY),
        "a group opens once"
    );
    let mut name = CString::new(BDF).unwrap().into_bytes_with_nul();
    assert_eq!(
        ioctl_buf(g, GROUP_GET_DEVICE_FD, &mut name),
        Err(libc::EINVAL),
        "no container yet"
    );
    let mut cfd = c.to_ne_bytes();
    ioctl_buf(g, GROUP_SET_CONTAINER, &mut cfd).unwrap();
    let mut st = [0u8; 8];
    put32(&mut st, 0, 8);
    ioctl_buf(g, GROUP_GET_STATUS, &mut st).unwrap();
    assert_eq!(get32(&st, 4), 3, "viable, container set");
    assert_eq!(ioctl_val(c, SET_IOMMU, 2), Err(libc::ENODEV));
    ioctl_val(c, SET_IOMMU, 3).unwrap();
    assert_eq!(ioctl_val(c, SET_IOMMU, 3), Err(libc::EINVAL), "set twice");

    // IOMMU info: first too small for the capability chain.
    let mut info = [0u8; 24];
    put32(&mut info, 0, 24);
    ioctl_buf(c, IOMMU_GET_INFO, &mut info).unwrap();
    let need = get32(&info, 0) as usize;
    assert!(need > 24);
    assert_eq!(get32(&info, 4), 3, "PGSIZES | CAPS");
    assert_eq!(get64(&info, 8) & 0x1000, 0x1000);
    assert_eq!(get32(&info, 16), 0, "no capabilities copied");
    let mut info = vec![0u8; need];
    put32(&mut info, 0, need as u32);
    ioctl_buf(c, IOMMU_GET_INFO, &mut info).unwrap();
    let parsed = platform::vfio::parse_iommu_info(&info).unwrap();
    assert_eq!(parsed.ranges.len(), 2);
    assert_eq!(parsed.ranges[0].start, 0);

    let mut bad = CString::new("0000:00:11.0").unwrap().into_bytes_with_nul();
    assert_eq!(
        ioctl_buf(g, GROUP_GET_DEVICE_FD, &mut bad),
        Err(libc::ENODEV)
    );
    let d = ioctl_buf(g, GROUP_GET_DEVICE_FD, &mut name).unwrap();
    let mut di = [0u8; 16];
    put32(&mut di, 0, 16);
    ioctl_buf(d, DEVICE_GET_INFO, &mut di).unwrap();
    assert_eq!((get32(&di, 4), get32(&di, 8), get32(&di, 12)), (3, 9, 5));
    let region = |i: u32| {
        let mut r = [0u8; 32];
        put32(&mut r, 0, 32);
        put32(&mut r, 8, i);
        ioctl_buf(d, DEVICE_GET_REGION_INFO, &mut r)
            .map(|_| (get32(&r, 4), get64(&r, 16), get64(&r, 24)))
    };
    assert_eq!(region(0), Ok((7, 32 << 20, 0)), "BAR0: read, write, mmap");
    assert_eq!(region(7), Ok((3, 256, 7 << 40)), "config space");
    assert_eq!(region(1), Ok((0, 0, 1 << 40)));
    assert_eq!(region(9), Err(libc::EINVAL));
    let mut irq = [0u8; 16];
    put32(&mut irq, 0, 16);
    put32(&mut irq, 8, 2);
    ioctl_buf(d, DEVICE_GET_IRQ_INFO, &mut irq).unwrap();
    assert_eq!(get32(&irq, 4) & 1, 1, "MSI-X with eventfds");
    assert_eq!(get32(&irq, 12), 64);
    assert_eq!(ioctl_val(d, 0x3b00 | 199, 0), Err(libc::ENOTTY));
    assert_eq!(ioctl_val(d, DEVICE_RESET, 0), Ok(0));

    // Config space.
    let mut cfg = [0u8; 256];
    assert_eq!(pread(d, &mut cfg, CONFIG), 256);
    assert_eq!(u16::from_le_bytes([cfg[0], cfg[1]]), 0x15b3);
    assert_eq!(u16::from_le_bytes([cfg[2], cfg[3]]), 0x1013);
    assert_eq!(cfg[4] & 2, 2, "memory decoding on after open");
    bus_master(d);
    let mut cmd = [0u8; 2];
    assert_eq!(pread(d, &mut cmd, CONFIG + 4), 2);
    assert_eq!(u16::from_le_bytes(cmd), 6);
    // A reset keeps the command register, as the kernel restores it.
    assert_eq!(ioctl_val(d, DEVICE_RESET, 0), Ok(0));
    assert_eq!(pread(d, &mut cmd, CONFIG + 4), 2);
    assert_eq!(u16::from_le_bytes(cmd), 6);
    assert_eq!(pread(d, &mut cfg, CONFIG + 256), -1);
    // BAR0 by pread: firmware 14.12.1220.
    let mut fw = [0u8; 4];
    assert_eq!(pread(d, &mut fw, 0), 4);
    assert_eq!(u32::from_be_bytes(fw), 0x000c_000e);

    assert_eq!(
        ioctl_val(g, vfio(5), 0),
        Err(libc::EBUSY),
        "unset with a device open"
    );
    // The group and the container closed before the device: the device
    // keeps them (Linux: device fds hold their group).
    // SAFETY: our own descriptors.
    unsafe {
        libc::close(g);
        libc::close(c);
    }
    assert_eq!(open("/dev/vfio/100"), Err(libc::EBUSY));
    assert_eq!(pread(d, &mut fw, 0), 4);
    // SAFETY: ours.
    unsafe { libc::close(d) };
    // Now the group can be opened again.
    let g = open("/dev/vfio/100").unwrap();
    // SAFETY: ours.
    unsafe { libc::close(g) };
}

#[test]
fn dma_maps_carry_commands_and_unmapped_iovas_fault() {
    if !in_child() {
        let c = run("dma_maps_carry_commands_and_unmapped_iovas_fault");
        assert!(
            c.report
                .contains("command ENABLE_HCA(0x104) op_mod(0x0): ok"),
            "{}",
            c.report
        );
        assert!(
            c.report
                .contains("IOMMU fault: Read of 64 bytes at IOVA 0x800000"),
            "{}",
            c.report
        );
        return;
    }
    let (c, _g, d) = open_device();
    bus_master(d);
    let bar = map_bar(d);
    assert_eq!(bar_read32(bar, 0), 0x000c_000e);
    let mem = anon(0x10000);
    let va = mem as u64;
    // Type1 rules.
    assert_eq!(map_dma(c, va + 8, 0x10_0000, 0x1000), Err(libc::EINVAL));
    assert_eq!(map_dma(c, va, 0x10_0000, 0), Err(libc::EINVAL));
    assert_eq!(
        map_dma(c, va, 0xfee0_0000, 0x1000),
        Err(libc::EINVAL),
        "MSI window"
    );
    map_dma(c, va, 0x10_0000, 0x10000).unwrap();
    assert_eq!(map_dma(c, va, 0x10_f000, 0x2000), Err(libc::EEXIST));
    assert_eq!(map_dma(c, 0x1000, 0x40_0000, 0x1000), Err(libc::EFAULT));
    assert_eq!(
        unmap_dma(c, 0x10_1000, 0x1000),
        Err(libc::EINVAL),
        "no cutting a mapping"
    );

    // An ENABLE_HCA command in the mapped memory.
    // SAFETY: `mem` is 64 KiB of our memory; the device reads and writes it
    // while we poll its ownership byte with volatile reads.
    unsafe {
        let e = mem;
        e.write(7); // type: PCIe command interface
        e.add(4).cast::<u32>().write_unaligned(16u32.to_be()); // input_length
        e.add(0x10).cast::<u16>().write_unaligned(0x104u16.to_be()); // ENABLE_HCA
        e.add(0x38).cast::<u32>().write_unaligned(16u32.to_be()); // output_length
        e.add(0x3c).write(1); // token
        e.add(0x3f).write(1); // owned by hardware
    }
    set_cmdq(bar, 0x10_0000);
    bar_write32(bar, 0x18, 1);
    // SAFETY: as above.
    wait_for(
        "ENABLE_HCA",
        || unsafe { mem.add(0x3f).read_volatile() } & 1 == 0,
    );
    // SAFETY: as above.
    let (delivery, status) = unsafe {
        (
            mem.add(0x3f).read_volatile() >> 1,
            mem.add(0x20).read_volatile(),
        )
    };
    assert_eq!((delivery, status), (0, 0));
    assert_eq!(unmap_dma(c, 0x10_0000, 0x10000), Ok(0x10000));

    // A command queue at an IOVA nothing is mapped at: an IOMMU fault.
    set_cmdq(bar, 0x80_0000);
    bar_write32(bar, 0x18, 1);
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn a_doorbell_written_twice_with_the_same_value_is_delivered_twice() {
    if !in_child() {
        let c = run("a_doorbell_written_twice_with_the_same_value_is_delivered_twice");
        // UAR page 5 is not allocated: the emulator logs every doorbell it
        // got there.
        let cq = c
            .report
            .matches("write of 0x12345678 to UAR page 0x5")
            .count();
        let eq = c.report.matches("write of 0x2a to UAR page 0x5").count();
        assert_eq!((cq, eq), (2, 2), "{}", c.report);
        return;
    }
    let (_c, _g, d) = open_device();
    let bar = map_bar(d);
    for _ in 0..2 {
        bar_write64(bar, 0x5020, 0x1234_5678);
        bar_write32(bar, 0x5048, 0x2a);
        // The bridge takes a doorbell by swapping all ones back into the
        // BAR word; its sweep of unallocated UAR pages comes round in 1024
        // polls, longer on a loaded machine. The second write must not
        // land on a word not yet taken.
        wait_for("the bridge to take both doorbells", || {
            bar_read32(bar, 0x5020) == u32::MAX
                && bar_read32(bar, 0x5024) == u32::MAX
                && bar_read32(bar, 0x5048) == u32::MAX
        });
    }
    // SAFETY: ours; closing delivers the report.
    unsafe { libc::close(d) };
}

fn eventfd() -> RawFd {
    // SAFETY: plain system call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    fd
}

fn eventfd_read(fd: RawFd) -> Option<u64> {
    let mut v = [0u8; 8];
    // SAFETY: 8 bytes into a local buffer.
    let n = unsafe { libc::read(fd, v.as_mut_ptr().cast(), 8) };
    (n == 8).then(|| u64::from_ne_bytes(v))
}

fn set_irqs(d: RawFd, flags: u32, start: u32, data: &[u8], count: u32) -> Result<i32, i32> {
    let mut b = vec![0u8; 20 + data.len()];
    let n = b.len() as u32;
    put32(&mut b, 0, n);
    put32(&mut b, 4, flags);
    put32(&mut b, 8, 2);
    put32(&mut b, 12, start);
    put32(&mut b, 16, count);
    b[20..].copy_from_slice(data);
    ioctl_buf(d, DEVICE_SET_IRQS, &mut b)
}

/// The VFIO device fd among this process's descriptors.
fn find_device_fd() -> RawFd {
    for fd in 3..1024 {
        let mut di = [0u8; 16];
        put32(&mut di, 0, 16);
        if ioctl_buf(fd, DEVICE_GET_INFO, &mut di).is_ok() && get32(&di, 8) == 9 {
            return fd;
        }
    }
    panic!("no VFIO device fd");
}

#[test]
fn msix_eventfds_are_set_triggered_and_signalled_by_eq_interrupts() {
    const NONE: u32 = 1;
    const EVENTFD: u32 = 4;
    const TRIGGER: u32 = 32;
    if !in_child() {
        let c = run("msix_eventfds_are_set_triggered_and_signalled_by_eq_interrupts");
        assert!(
            c.report
                .contains("command DISABLE_HCA(0x105) op_mod(0x0): ok"),
            "{}",
            c.report
        );
        assert!(!c.report.contains("leak"), "{}", c.report);
        return;
    }
    {
        let (_c, _g, d) = open_device();
        let (e0, e1) = (eventfd(), eventfd());
        assert_eq!(
            set_irqs(d, NONE | TRIGGER, 0, &[], 1),
            Err(libc::EINVAL),
            "not enabled"
        );
        assert_eq!(
            set_irqs(d, NONE | EVENTFD | TRIGGER, 0, &[], 1),
            Err(libc::EINVAL)
        );
        let fds: Vec<u8> = [e0, e1].iter().flat_map(|f| f.to_ne_bytes()).collect();
        set_irqs(d, EVENTFD | TRIGGER, 0, &fds, 2).unwrap();
        set_irqs(d, NONE | TRIGGER, 1, &[], 1).unwrap();
        assert_eq!((eventfd_read(e0), eventfd_read(e1)), (None, Some(1)));
        // Partial update: vector 1 loses its eventfd; beyond the enabled
        // count is refused.
        set_irqs(d, EVENTFD | TRIGGER, 1, &(-1i32).to_ne_bytes(), 1).unwrap();
        set_irqs(d, NONE | TRIGGER, 0, &[], 2).unwrap();
        assert_eq!((eventfd_read(e0), eventfd_read(e1)), (Some(1), None));
        assert_eq!(
            set_irqs(d, EVENTFD | TRIGGER, 1, &fds, 2),
            Err(libc::EINVAL)
        );
        assert_eq!(
            set_irqs(d, EVENTFD | TRIGGER, 0, &0i32.to_ne_bytes(), 1),
            Err(libc::EINVAL),
            "stdin is no eventfd"
        );
        // Disable.
        set_irqs(d, NONE | TRIGGER, 0, &[], 0).unwrap();
        assert_eq!(set_irqs(d, NONE | TRIGGER, 0, &[], 1), Err(libc::EINVAL));
        // SAFETY: our own descriptors.
        unsafe {
            for fd in [d, _g, _c, e0, e1] {
                libc::close(fd);
            }
        }
    }
    // The emulator's EQ interrupts reach vector 0's eventfd: bring the
    // function up with this project's driver over platform::vfio.
    let p =
        platform::vfio::VfioPlatform::open(BDF, platform::vfio::VfioOptions::default()).unwrap();
    let d = find_device_fd();
    let e = eventfd();
    set_irqs(d, EVENTFD | TRIGGER, 0, &e.to_ne_bytes(), 1).unwrap();
    let hca = hca_driver::Hca::open(p, hca_driver::Config::default())
        .map_err(|f| f.error)
        .unwrap();
    let n = eventfd_read(e).unwrap_or(0);
    assert!(n > 0, "no interrupt on vector 0");
    drop(hca);
}

#[test]
fn ports_are_wired_as_the_variable_says() {
    const VAR: &str = "0000:00:10.0=cx4,loop;0000:00:11.0=cx4,group=7;\
                       0000:00:12.0=cx4,ib,sm=0,wire=0000:00:13.0;0000:00:13.0=cx4,ib,sm=0;\
                       0000:00:14.0=cx5,ib,loop,lid=0x20";
    if !in_child() {
        let c = child("ports_are_wired_as_the_variable_says", VAR);
        assert!(c.ok, "{}\n{}", c.stderr, c.report);
        return;
    }
    use hca_driver::{LinkLayer, PortState};
    let group = |bdf: &str| {
        let g = fs::read_link(
            Path::new("/sys/bus/pci/devices")
                .join(bdf)
                .join("iommu_group"),
        )
        .unwrap();
        g.file_name().unwrap().to_string_lossy().into_owned()
    };
    assert_eq!(group("0000:00:10.0"), "100");
    assert_eq!(group("0000:00:11.0"), "7");
    assert_eq!(group("0000:00:13.0"), "103");
    let open = |bdf: &str| {
        let p = platform::vfio::VfioPlatform::open(bdf, platform::vfio::VfioOptions::default())
            .unwrap();
        hca_driver::Hca::open(p, hca_driver::Config::default())
            .map_err(|f| f.error)
            .unwrap()
    };
    let looped = open("0000:00:10.0");
    let alone = open("0000:00:11.0");
    let (ib_a, ib_b) = (open("0000:00:12.0"), open("0000:00:13.0"));
    let port = |h: &hca_driver::Hca<platform::vfio::VfioPlatform>| {
        let p = h.query_port(1).unwrap();
        (p.state, p.link_layer)
    };
    assert_eq!(
        port(&looped),
        (PortState::Active, LinkLayer::Ethernet),
        "loopback plug"
    );
    assert_eq!(port(&alone).0, PortState::Down, "no cable");
    assert_eq!(
        port(&ib_a),
        (PortState::Active, LinkLayer::InfiniBand),
        "cabled"
    );
    assert_eq!(
        port(&ib_b),
        (PortState::Active, LinkLayer::InfiniBand),
        "cabled"
    );
    // The subnet manager gave the two ends distinct LIDs (from their PCI
    // addresses).
    let lid = |h: &hca_driver::Hca<platform::vfio::VfioPlatform>| h.query_port(1).unwrap().lid;
    assert_eq!((lid(&ib_a), lid(&ib_b)), (0x91, 0x99));
    drop((looped, alone, ib_a, ib_b));
    // With the default subnet manager delay, an InfiniBand port is Init
    // (link up, no LID) when bring-up ends, and Active with the LID asked
    // for once the subnet manager has swept it.
    let late = open("0000:00:14.0");
    let p = late.query_port(1).unwrap();
    assert_eq!((p.state, p.lid), (PortState::Init, 0));
    let t0 = std::time::Instant::now();
    while late.query_port(1).unwrap().state != PortState::Active {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "never Active"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(lid(&late), 0x20);
    drop(late);
}
