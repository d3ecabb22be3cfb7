//! The raw shared memory behind BAR0: a memfd the process maps (through
//! the intercepted `mmap` of the device fd) and the bridge thread maps
//! too, or an existing file (QEMU's ivshmem-plain backing file) that a
//! virtual machine maps as a PCI BAR. All access is through aligned
//! atomics on the mapping: the program stores into it with plain
//! (volatile) stores, so the bridge must never hold a reference to it as
//! plain data.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A shared memory file of BAR size, and the bridge's mapping of it.
#[derive(Debug)]
pub struct SharedBar {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics (see the module
// docs); it is valid until `drop`.
unsafe impl Send for SharedBar {}
// SAFETY: as above.
unsafe impl Sync for SharedBar {}

impl SharedBar {
    /// Creates a zeroed shared memory file of `len` bytes (a multiple of
    /// the page size) and maps it.
    pub fn create(len: usize, name: &str) -> io::Result<Self> {
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        // SAFETY: `cname` is a valid C string; memfd_create has no other
        // preconditions.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain system call on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ptr = map_shared(&fd, len)?;
        Ok(Self { fd, ptr, len })
    }

    /// Maps the existing file at `path` (at least `len` bytes; `len` a
    /// non-zero multiple of 4 KiB), shared: QEMU's
    /// `memory-backend-file,share=on` behind an `ivshmem-plain` device.
    /// The contents are left as they are.
    pub fn open(path: &std::path::Path, len: usize) -> io::Result<Self> {
        if len == 0 || len % 4096 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared BAR length {len:#x} is not a non-zero multiple of 4 KiB"),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let size = file.metadata()?.len();
        if size < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: {size} bytes, smaller than the {len} bytes to map",
                    path.display()
                ),
            ));
        }
        let fd = OwnedFd::from(file);
        let ptr = map_shared(&fd, len)?;
        Ok(Self { fd, ptr, len })
    }

    /// The whole mapping as a [`HostWindow`](platform::host::HostWindow)
    /// (to map into an emulated IOMMU with `EmuHca::map_dma`: a guest's
    /// RAM served by guest-physical address). The mapping is kept for the
    /// rest of the process: the window may be held anywhere, so it is
    /// never unmapped.
    pub fn into_window(self) -> Result<platform::host::HostWindow, platform::Error> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: our own shared mapping of `len` bytes, readable and
        // writable; `this` is never dropped, so it stays mapped for the
        // rest of the process, and nothing in this process holds a
        // reference into it (only the window's volatile copies reach it).
        unsafe { platform::host::HostWindow::new(this.ptr, this.len) }
    }

    /// The memory file (what the process's mapping of the BAR maps).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The mapping's first byte (what a program in this process maps as
    /// the BAR: reach it only with volatile or atomic accesses).
    pub fn host_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the BAR is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn a32(&self, off: usize) -> &AtomicU32 {
        assert!(
            off % 4 == 0 && off + 4 <= self.len,
            "BAR dword {off:#x} out of range"
        );
        // SAFETY: in bounds and 4-byte aligned (the mapping is page
        // aligned); the memory lives as long as `self`, and every access
        // to it from Rust is atomic.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    fn a64(&self, off: usize) -> &AtomicU64 {
        assert!(
            off % 8 == 0 && off + 8 <= self.len,
            "BAR qword {off:#x} out of range"
        );
        // SAFETY: as in `a32`, 8-byte aligned.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// Reads a big-endian register.
    pub fn load32(&self, off: usize) -> u32 {
        u32::from_be(self.a32(off).load(Ordering::Acquire))
    }

    /// Writes a big-endian register.
    pub fn store32(&self, off: usize, v: u32) {
        self.a32(off).store(v.to_be(), Ordering::Release);
    }

    /// Swaps a big-endian register, returning the old value.
    pub fn swap32(&self, off: usize, v: u32) -> u32 {
        u32::from_be(self.a32(off).swap(v.to_be(), Ordering::AcqRel))
    }

    /// Replaces `old` with `new` if the register still holds `old`.
    pub fn cas32(&self, off: usize, old: u32, new: u32) -> bool {
        self.a32(off)
            .compare_exchange(
                old.to_be(),
                new.to_be(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Reads a big-endian 64-bit register.
    pub fn load64(&self, off: usize) -> u64 {
        u64::from_be(self.a64(off).load(Ordering::Acquire))
    }

    /// Swaps a big-endian 64-bit register, returning the old value.
    pub fn swap64(&self, off: usize, v: u64) -> u64 {
        u64::from_be(self.a64(off).swap(v.to_be(), Ordering::AcqRel))
    }

    /// Zeroes `off .. off + len` (dword granular).
    pub fn zero(&self, off: usize, len: usize) {
        for o in (off..off + len).step_by(4) {
            self.a32(o).store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for SharedBar {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, not used after this; a
        // raw system call (the libc function may be interposed).
        unsafe { libc::syscall(libc::SYS_munmap, self.ptr.as_ptr(), self.len) };
    }
}

/// A shared read-write mapping of the first `len` bytes of `fd`, made with
/// the raw system call: inside the VFIO preload library, libc's `mmap` is
/// the interposed one.
fn map_shared(fd: &OwnedFd, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a new shared mapping of a file we hold, `len` bytes long, at
    // an address the kernel picks; nothing else is touched.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<libc::c_void>(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0 as libc::off_t,
        )
    };
    // glibc's `syscall` returns -1 and sets errno on failure.
    if p == -1 {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap gave null"))
}
