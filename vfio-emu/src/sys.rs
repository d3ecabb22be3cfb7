//! The C side: the intercepted libc entry points, the real functions they
//! forward to (found with `dlsym(RTLD_NEXT, ..)`), and the few raw system
//! calls the library makes. All of the library's FFI `unsafe` is here and
//! in [`crate::shm`].
//!
//! Every entry point converts its C arguments, then asks [`crate::vfio`]
//! (safe code) what to do, under `guarded`: a thread-local flag makes
//! every libc call the library itself makes (std's file system calls, the
//! emulator's threads' work on this thread) go straight to the real
//! function, and `catch_unwind` keeps a panic from crossing into C (the
//! call then falls through to the real function).

use std::cell::Cell;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_ulong, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{DIR, FILE, off_t, size_t, ssize_t};
use platform::host::HostWindow;

use crate::vfio::{OpenOutcome, State, UserMem};

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

static STATE: OnceLock<Option<State>> = OnceLock::new();

/// Runs `f` unless this thread is already inside the library (then, or if
/// `f` panics, `None`: the caller forwards to the real function).
fn guarded<R>(f: impl FnOnce() -> Option<R>) -> Option<R> {
    if BUSY.try_with(|b| b.replace(true)) != Ok(false) {
        return None;
    }
    let r = catch_unwind(AssertUnwindSafe(f));
    let _ = BUSY.try_with(|b| b.set(false));
    match r {
        Ok(r) => r,
        Err(_) => {
            eprintln!("hca-vfio-emu: internal error (a panic, caught); the call goes to libc");
            None
        }
    }
}

/// The state, built on first use (inside [`guarded`]).
fn state() -> Option<&'static State> {
    STATE
        .get_or_init(|| {
            let s = State::from_env();
            if s.is_some() {
                // SAFETY: registering a plain `extern "C" fn()`.
                unsafe { libc::atexit(at_exit) };
            }
            s
        })
        .as_ref()
}

/// The state if it exists already (no initialisation): fd calls on a
/// process that never opened one of our paths cost one atomic load.
fn state_if_built() -> Option<&'static State> {
    STATE.get().and_then(Option::as_ref)
}

extern "C" fn at_exit() {
    guarded(|| {
        let s = state_if_built()?;
        for f in s.created() {
            crate::report::write(s, &f, "process exit");
        }
        s.tree().remove();
        Some(())
    });
}

fn set_errno(e: i32) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether a path could be ours at all (cheap, before any state).
fn candidate(p: &[u8]) -> bool {
    p.starts_with(b"/sys/") || p.starts_with(b"/dev/vfio/")
}

/// # Safety
///
/// `p` is null or a C string.
unsafe fn path_of<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a C string by the caller's contract.
    let b = unsafe { CStr::from_ptr(p) }.to_bytes();
    if !candidate(b) {
        return None;
    }
    std::str::from_utf8(b).ok()
}

fn cpath(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

/// The redirected path of `p` if it is ours.
///
/// # Safety
///
/// `p` is null or a C string.
unsafe fn redirected(p: *const c_char) -> Option<CString> {
    // SAFETY: forwarded contract.
    let path = unsafe { path_of(p) }?;
    guarded(|| state()?.redirect(path).and_then(|p| cpath(&p)))
}

macro_rules! real {
    ($(#[$m:meta])* $rust:ident = $c:literal : fn($($a:ident : $t:ty),*) -> $r:ty) => {
        $(#[$m])*
        ///
        /// # Safety
        ///
        /// As the C function's.
        pub(crate) unsafe fn $rust($($a: $t),*) -> $r {
            static P: AtomicUsize = AtomicUsize::new(0);
            let mut p = P.load(Ordering::Acquire);
            if p == 0 {
                // SAFETY: dlsym with a NUL-terminated name.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($c, "\0").as_ptr().cast()) }
                    as usize;
                if p == 0 {
                    eprintln!(concat!("hca-vfio-emu: libc has no ", $c));
                    std::process::abort();
                }
                P.store(p, Ordering::Release);
            }
            // SAFETY: `p` is the address of the C function of that name,
            // whose signature this is.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller's contract.
            unsafe { f($($a),*) }
        }
    };
}

real!(real_open = "open": fn(p: *const c_char, f: c_int, m: c_uint) -> c_int);
real!(real_open64 = "open64": fn(p: *const c_char, f: c_int, m: c_uint) -> c_int);
real!(real_open_2 = "__open_2": fn(p: *const c_char, f: c_int) -> c_int);
real!(real_open64_2 = "__open64_2": fn(p: *const c_char, f: c_int) -> c_int);
real!(real_openat = "openat": fn(d: c_int, p: *const c_char, f: c_int, m: c_uint) -> c_int);
real!(real_openat64 = "openat64": fn(d: c_int, p: *const c_char, f: c_int, m: c_uint) -> c_int);
real!(real_openat_2 = "__openat_2": fn(d: c_int, p: *const c_char, f: c_int) -> c_int);
real!(real_openat64_2 = "__openat64_2": fn(d: c_int, p: *const c_char, f: c_int) -> c_int);
real!(real_fopen = "fopen": fn(p: *const c_char, m: *const c_char) -> *mut FILE);
real!(real_fopen64 = "fopen64": fn(p: *const c_char, m: *const c_char) -> *mut FILE);
real!(real_stat = "stat": fn(p: *const c_char, b: *mut c_void) -> c_int);
real!(real_stat64 = "stat64": fn(p: *const c_char, b: *mut c_void) -> c_int);
real!(real_lstat = "lstat": fn(p: *const c_char, b: *mut c_void) -> c_int);
real!(real_lstat64 = "lstat64": fn(p: *const c_char, b: *mut c_void) -> c_int);
real!(real_fstatat = "fstatat": fn(d: c_int, p: *const c_char, b: *mut c_void, f: c_int) -> c_int);
real!(real_fstatat64 = "fstatat64": fn(d: c_int, p: *const c_char, b: *mut c_void, f: c_int) -> c_int);
real!(real_statx = "statx": fn(d: c_int, p: *const c_char, f: c_int, m: c_uint, b: *mut c_void) -> c_int);
real!(real_access = "access": fn(p: *const c_char, m: c_int) -> c_int);
real!(real_faccessat = "faccessat": fn(d: c_int, p: *const c_char, m: c_int, f: c_int) -> c_int);
real!(real_readlink = "readlink": fn(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t);
real!(real_readlinkat = "readlinkat": fn(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t);
real!(real_opendir = "opendir": fn(p: *const c_char) -> *mut DIR);
real!(real_close = "close": fn(fd: c_int) -> c_int);
real!(real_ioctl = "ioctl": fn(fd: c_int, r: c_ulong, a: *mut c_void) -> c_int);
real!(
    /// The real `mmap`.
    real_mmap = "mmap": fn(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void
);
real!(real_mmap64 = "mmap64": fn(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void);
real!(
    /// The real `munmap`.
    real_munmap = "munmap": fn(a: *mut c_void, l: size_t) -> c_int
);
real!(real_pread = "pread": fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t);
real!(real_pread64 = "pread64": fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t);
real!(real_pread_chk = "__pread_chk": fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t, bl: size_t) -> ssize_t);
real!(real_pread64_chk = "__pread64_chk": fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t, bl: size_t) -> ssize_t);
real!(real_pwrite = "pwrite": fn(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t);
real!(real_pwrite64 = "pwrite64": fn(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t);

// ---- helpers for the safe modules -------------------------------------------

/// A file descriptor standing for a VFIO object: `/dev/null`, opened with
/// the caller's close-on-exec and non-blocking flags.
pub(crate) fn placeholder_fd(flags: i32) -> Result<i32, i32> {
    let f = libc::O_RDWR | (flags & (libc::O_CLOEXEC | libc::O_NONBLOCK));
    // SAFETY: a constant C string.
    let fd = unsafe { real_open(c"/dev/null".as_ptr(), f, 0) };
    if fd < 0 { Err(errno()) } else { Ok(fd) }
}

/// Signals an eventfd as the kernel's `eventfd_signal` does (adds 1).
pub(crate) fn eventfd_signal(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a local buffer to our own descriptor.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

/// A duplicate of the program's eventfd `fd` (the kernel takes its own
/// reference too). `EBADF` for a closed fd, `EINVAL` for a descriptor that
/// is not an eventfd.
pub(crate) fn dup_eventfd(fd: i32) -> Result<OwnedFd, i32> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EBADF)?;
    if link.as_os_str().as_bytes() != b"anon_inode:[eventfd]" {
        return Err(libc::EINVAL);
    }
    // SAFETY: fcntl on a descriptor number; fails cleanly if it is closed.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return Err(errno());
    }
    // SAFETY: `d` is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

/// Whether `addr .. addr + len` is mapped memory of this process.
pub(crate) fn is_mapped(addr: usize, len: usize) -> bool {
    if addr % 4096 != 0 || len == 0 {
        return false;
    }
    let mut vec = vec![0u8; len.div_ceil(4096)];
    // SAFETY: mincore only inspects the range; `vec` has one byte per page.
    unsafe { libc::mincore(addr as *mut c_void, len, vec.as_mut_ptr()) == 0 }
}

/// A window over `len` bytes of this process at `addr`, for the emulator's
/// IOMMU.
pub(crate) fn host_window(addr: usize, len: usize) -> Option<HostWindow> {
    let p = NonNull::new(addr as *mut u8)?;
    // SAFETY: the program handed this range to VFIO_IOMMU_MAP_DMA (and we
    // checked it is mapped): like the kernel, which pins it, we rely on it
    // staying mapped until VFIO_IOMMU_UNMAP_DMA; an munmap of it first is
    // intercepted and takes the window out of the emulator before the
    // memory goes (`State::munmap`). The program reaches that memory
    // through raw pointers only (it is C memory handed to a device).
    unsafe { HostWindow::new(p, len) }.ok()
}

struct RawMem;

impl UserMem for RawMem {
    fn read(&self, addr: usize, len: usize) -> Result<Vec<u8>, i32> {
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mut v = vec![0u8; len];
        // SAFETY: the ioctl's contract: the argument points at a structure
        // of at least the size its `argsz` says, which is what we read.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
        Ok(v)
    }

    fn write(&self, addr: usize, bytes: &[u8]) -> Result<(), i32> {
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        // SAFETY: as in `read`: the caller's structure is writable.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
        Ok(())
    }
}

// ---- the entry points --------------------------------------------------------

/// An open-like call: `Ok(fd)` handled, `Err(Some(path))` forward with
/// this path, `Err(None)` forward unchanged.
///
/// # Safety
///
/// `p` is null or a C string.
unsafe fn open_common(p: *const c_char, flags: c_int) -> Result<c_int, Option<CString>> {
    // SAFETY: forwarded contract.
    let Some(path) = (unsafe { path_of(p) }) else {
        return Err(None);
    };
    match guarded(|| Some(state()?.open(path, flags))) {
        None | Some(OpenOutcome::Pass) => Err(None),
        Some(OpenOutcome::Redirect(np)) => Err(cpath(&np)),
        Some(OpenOutcome::Fd(fd)) => Ok(fd),
        Some(OpenOutcome::Err(e)) => {
            set_errno(e);
            Ok(-1)
        }
    }
}

macro_rules! open_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted: VFIO nodes and the fake sysfs.
        ///
        /// # Safety
        ///
        /// As `open(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            // SAFETY: C caller's contract.
            match unsafe { open_common(p, flags) } {
                Ok(fd) => fd,
                // SAFETY: forwarding the caller's (or our rewritten) path.
                Err(Some(np)) => unsafe { $real(np.as_ptr(), flags, mode) },
                // SAFETY: forwarding unchanged.
                Err(None) => unsafe { $real(p, flags, mode) },
            }
        }
    };
}
open_entry!(open, real_open);
open_entry!(open64, real_open64);

macro_rules! open2_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted (fortified `open`).
        ///
        /// # Safety
        ///
        /// As `open(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *const c_char, flags: c_int) -> c_int {
            // SAFETY: C caller's contract.
            match unsafe { open_common(p, flags) } {
                Ok(fd) => fd,
                // SAFETY: forwarding.
                Err(Some(np)) => unsafe { $real(np.as_ptr(), flags) },
                // SAFETY: forwarding.
                Err(None) => unsafe { $real(p, flags) },
            }
        }
    };
}
open2_entry!(__open_2, real_open_2);
open2_entry!(__open64_2, real_open64_2);

macro_rules! openat_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted (absolute paths only).
        ///
        /// # Safety
        ///
        /// As `openat(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            d: c_int,
            p: *const c_char,
            flags: c_int,
            mode: c_uint,
        ) -> c_int {
            // SAFETY: C caller's contract.
            match unsafe { open_common(p, flags) } {
                Ok(fd) => fd,
                // SAFETY: forwarding.
                Err(Some(np)) => unsafe { $real(d, np.as_ptr(), flags, mode) },
                // SAFETY: forwarding.
                Err(None) => unsafe { $real(d, p, flags, mode) },
            }
        }
    };
}
openat_entry!(openat, real_openat);
openat_entry!(openat64, real_openat64);

macro_rules! openat2_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted (fortified `openat`).
        ///
        /// # Safety
        ///
        /// As `openat(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(d: c_int, p: *const c_char, flags: c_int) -> c_int {
            // SAFETY: C caller's contract.
            match unsafe { open_common(p, flags) } {
                Ok(fd) => fd,
                // SAFETY: forwarding.
                Err(Some(np)) => unsafe { $real(d, np.as_ptr(), flags) },
                // SAFETY: forwarding.
                Err(None) => unsafe { $real(d, p, flags) },
            }
        }
    };
}
openat2_entry!(__openat_2, real_openat_2);
openat2_entry!(__openat64_2, real_openat64_2);

/// Generates a path-rewriting entry point: `$path` is the path argument.
macro_rules! path_entry {
    ($name:ident, $real:ident, fn($($a:ident : $t:ty),*) -> $r:ty, $path:ident) => {
        /// Intercepted: paths of the fake sysfs are rewritten.
        ///
        /// # Safety
        ///
        /// As the C function's.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            // SAFETY: the path argument is a C string or null.
            match unsafe { redirected($path) } {
                Some(np) => {
                    let $path = np.as_ptr();
                    // SAFETY: forwarding with the rewritten path.
                    unsafe { $real($($a),*) }
                }
                // SAFETY: forwarding unchanged.
                None => unsafe { $real($($a),*) },
            }
        }
    };
}
path_entry!(
    fopen,
    real_fopen,
    fn(p: *const c_char, m: *const c_char) -> *mut FILE,
    p
);
path_entry!(
    fopen64,
    real_fopen64,
    fn(p: *const c_char, m: *const c_char) -> *mut FILE,
    p
);
path_entry!(
    stat,
    real_stat,
    fn(p: *const c_char, b: *mut c_void) -> c_int,
    p
);
path_entry!(
    stat64,
    real_stat64,
    fn(p: *const c_char, b: *mut c_void) -> c_int,
    p
);
path_entry!(
    lstat,
    real_lstat,
    fn(p: *const c_char, b: *mut c_void) -> c_int,
    p
);
path_entry!(
    lstat64,
    real_lstat64,
    fn(p: *const c_char, b: *mut c_void) -> c_int,
    p
);
path_entry!(
    fstatat,
    real_fstatat,
    fn(d: c_int, p: *const c_char, b: *mut c_void, f: c_int) -> c_int,
    p
);
path_entry!(
    fstatat64,
    real_fstatat64,
    fn(d: c_int, p: *const c_char, b: *mut c_void, f: c_int) -> c_int,
    p
);
path_entry!(
    statx,
    real_statx,
    fn(d: c_int, p: *const c_char, f: c_int, m: c_uint, b: *mut c_void) -> c_int,
    p
);
path_entry!(
    access,
    real_access,
    fn(p: *const c_char, m: c_int) -> c_int,
    p
);
path_entry!(
    faccessat,
    real_faccessat,
    fn(d: c_int, p: *const c_char, m: c_int, f: c_int) -> c_int,
    p
);
path_entry!(
    readlink,
    real_readlink,
    fn(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t,
    p
);
path_entry!(
    readlinkat,
    real_readlinkat,
    fn(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t,
    p
);
path_entry!(opendir, real_opendir, fn(p: *const c_char) -> *mut DIR, p);

/// Intercepted: closing a VFIO fd releases its object.
///
/// # Safety
///
/// As `close(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if state_if_built().is_some_and(State::has_fds) {
        guarded(|| {
            state_if_built()?.close(fd);
            Some(())
        });
    }
    // SAFETY: forwarding.
    unsafe { real_close(fd) }
}

/// Intercepted: the VFIO ioctls of our fds.
///
/// # Safety
///
/// As `ioctl(2)` (the third argument is read as a pointer or integer, as
/// the request says).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if state_if_built().is_some_and(State::has_fds) {
        // `unsigned long` is 32 bits wide on some targets.
        #[allow(clippy::unnecessary_cast)]
        let req = req as u64;
        let r = guarded(|| state_if_built()?.ioctl(fd, req, arg as usize, &RawMem));
        match r {
            Some(Ok(v)) => return v,
            Some(Err(e)) => {
                set_errno(e);
                return -1;
            }
            None => {}
        }
    }
    // SAFETY: forwarding.
    unsafe { real_ioctl(fd, req as c_ulong, arg) }
}

macro_rules! mmap_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted: BAR0 of a device fd maps its shared memory.
        ///
        /// # Safety
        ///
        /// As `mmap(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            a: *mut c_void,
            l: size_t,
            p: c_int,
            f: c_int,
            fd: c_int,
            o: off_t,
        ) -> *mut c_void {
            if fd >= 0 && state_if_built().is_some_and(State::has_fds) {
                match guarded(|| state_if_built()?.mmap(fd, l, f, o)) {
                    // SAFETY: mapping our memory file in place of the BAR.
                    Some(Ok((mfd, mo))) => return unsafe { $real(a, l, p, f, mfd, mo) },
                    Some(Err(e)) => {
                        set_errno(e);
                        return libc::MAP_FAILED;
                    }
                    None => {}
                }
            }
            // SAFETY: forwarding.
            unsafe { $real(a, l, p, f, fd, o) }
        }
    };
}
mmap_entry!(mmap, real_mmap);
mmap_entry!(mmap64, real_mmap64);

/// Intercepted: memory still DMA-mapped is taken out of the emulator first.
///
/// # Safety
///
/// As `munmap(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(a: *mut c_void, l: size_t) -> c_int {
    if state_if_built().is_some() {
        guarded(|| {
            state_if_built()?.munmap(a as usize, l);
            Some(())
        });
    }
    // SAFETY: forwarding.
    unsafe { real_munmap(a, l) }
}

/// What an intercepted read or write returns: the byte count, or -1 with
/// `errno` set; `None` when the descriptor is not one of ours.
fn io_answer(r: Option<Result<usize, i32>>) -> Option<ssize_t> {
    match r? {
        Ok(k) => Some(k as ssize_t),
        Err(e) => {
            set_errno(e);
            Some(-1)
        }
    }
}

macro_rules! pread_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted: config space and BAR0 of a device fd.
        ///
        /// # Safety
        ///
        /// As `pread(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t {
            if !b.is_null() && state_if_built().is_some_and(State::has_fds) {
                let r = guarded(|| {
                    // SAFETY: the caller's buffer of `n` bytes.
                    let buf = unsafe { std::slice::from_raw_parts_mut(b.cast::<u8>(), n) };
                    state_if_built()?.pread(fd, buf, o)
                });
                if let Some(v) = io_answer(r) {
                    return v;
                }
            }
            // SAFETY: forwarding.
            unsafe { $real(fd, b, n, o) }
        }
    };
}
pread_entry!(pread, real_pread);
pread_entry!(pread64, real_pread64);

macro_rules! pread_chk_entry {
    ($name:ident, $real:ident, $plain:ident) => {
        /// Intercepted (fortified `pread`): as `pread` when the buffer is
        /// large enough; otherwise glibc's check fails as it would.
        ///
        /// # Safety
        ///
        /// As `pread(2)`, with `bl` the size of the buffer.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            b: *mut c_void,
            n: size_t,
            o: off_t,
            bl: size_t,
        ) -> ssize_t {
            if n > bl {
                // SAFETY: forwarding; glibc reports the overflow.
                return unsafe { $real(fd, b, n, o, bl) };
            }
            // SAFETY: the buffer holds `n` bytes (checked against `bl`).
            unsafe { $plain(fd, b, n, o) }
        }
    };
}
pread_chk_entry!(__pread_chk, real_pread_chk, pread);
pread_chk_entry!(__pread64_chk, real_pread64_chk, pread64);

macro_rules! pwrite_entry {
    ($name:ident, $real:ident) => {
        /// Intercepted: config space and BAR0 of a device fd.
        ///
        /// # Safety
        ///
        /// As `pwrite(2)`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            b: *const c_void,
            n: size_t,
            o: off_t,
        ) -> ssize_t {
            if !b.is_null() && state_if_built().is_some_and(State::has_fds) {
                let r = guarded(|| {
                    // SAFETY: the caller's buffer of `n` bytes.
                    let buf = unsafe { std::slice::from_raw_parts(b.cast::<u8>(), n) };
                    state_if_built()?.pwrite(fd, buf, o)
                });
                if let Some(v) = io_answer(r) {
                    return v;
                }
            }
            // SAFETY: forwarding.
            unsafe { $real(fd, b, n, o) }
        }
    };
}
pwrite_entry!(pwrite, real_pwrite);
pwrite_entry!(pwrite64, real_pwrite64);
