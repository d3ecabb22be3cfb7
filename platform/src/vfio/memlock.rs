//! The locked-memory limit. VFIO pins every page mapped for DMA and counts
//! it against the process's `RLIMIT_MEMLOCK` (unless the process has
//! `CAP_IPC_LOCK`); pinning past the limit fails with `ENOMEM`. The backend
//! checks up front, with a message that says what to raise.

use std::string::String;

use crate::Error;

/// What decides whether memory can be locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockStatus {
    /// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` = unlimited).
    pub limit: u64,
    /// Bytes the process has locked already (`VmLck` of
    /// `/proc/self/status`, which includes earlier VFIO pins; 0 if unknown).
    pub locked: u64,
    /// Whether the process has `CAP_IPC_LOCK`, which lifts the limit.
    pub cap_ipc_lock: bool,
}

/// Checks that `planned` more bytes can be locked.
///
/// # Errors
///
/// [`Error::MemlockTooLow`] naming the limit and what is needed.
pub fn check_memlock(status: &MemlockStatus, planned: u64) -> Result<(), Error> {
    if status.cap_ipc_lock || status.limit == u64::MAX {
        return Ok(());
    }
    let needed = status.locked.saturating_add(planned);
    if needed > status.limit {
        return Err(Error::MemlockTooLow {
            limit: status.limit,
            needed,
        });
    }
    Ok(())
}

/// The soft `RLIMIT_MEMLOCK` of this process (`u64::MAX` = unlimited).
pub fn memlock_limit() -> Result<u64, Error> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `struct rlimit` to the pointer, which
    // points to a live local of that type.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if rc != 0 {
        return Err(Error::Sys {
            what: String::from("getrlimit(RLIMIT_MEMLOCK)"),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(if rl.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        rl.rlim_cur
    })
}

/// Sets the soft `RLIMIT_MEMLOCK` of this process to `bytes` (`u64::MAX`:
/// unlimited), keeping the hard limit. For tests of the memlock checks.
pub fn set_memlock_limit(bytes: u64) -> Result<(), Error> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write one `struct rlimit` at a
    // live local.
    let rc = unsafe {
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) != 0 {
            -1
        } else {
            rl.rlim_cur = if bytes == u64::MAX {
                libc::RLIM_INFINITY
            } else {
                bytes
            };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl)
        }
    };
    if rc != 0 {
        return Err(Error::Sys {
            what: std::format!("setting RLIMIT_MEMLOCK to {bytes} bytes"),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_VERSION_3: u32 = 0x2008_0522;
/// `CAP_IPC_LOCK`.
const CAP_IPC_LOCK: u32 = 14;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Whether this process has `CAP_IPC_LOCK` in its effective set.
pub fn has_cap_ipc_lock() -> bool {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget reads the header and writes two `CapData` (version 3)
    // to the second pointer; both point to live locals of those layouts.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    rc == 0 && data[0].effective & (1 << CAP_IPC_LOCK) != 0
}

/// Drops `CAP_IPC_LOCK` from this process's effective set (the permitted
/// set keeps it). Used by tests that must see the memlock limit enforced
/// while running as root.
pub fn drop_cap_ipc_lock() -> Result<(), Error> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    let sys = |what: &str| Error::Sys {
        what: String::from(what),
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: as in `has_cap_ipc_lock`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(sys("capget"));
    }
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    // SAFETY: capset reads the header and two `CapData` from live locals.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(sys("capset"));
    }
    Ok(())
}

/// Bytes of memory this process has locked (`VmLck`), 0 if unknown.
pub fn locked_bytes() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    parse_vmlck(&status).unwrap_or(0)
}

fn parse_vmlck(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmLck:"))?;
    let kib: u64 = line["VmLck:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The status of this process.
pub fn memlock_status() -> Result<MemlockStatus, Error> {
    Ok(MemlockStatus {
        limit: memlock_limit()?,
        locked: locked_bytes(),
        cap_ipc_lock: has_cap_ipc_lock(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_check_counts_what_is_locked_already() {
        let s = MemlockStatus {
            limit: 64 * MIB,
            locked: 8 * MIB,
            cap_ipc_lock: false,
        };
        check_memlock(&s, 56 * MIB).unwrap();
        let e = check_memlock(&s, 57 * MIB).unwrap_err();
        match e {
            Error::MemlockTooLow { limit, needed } => {
                assert_eq!((limit, needed), (64 * MIB, 65 * MIB));
            }
            ref other => panic!("expected MemlockTooLow, got {other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.starts_with("RLIMIT_MEMLOCK is 64 MiB but 65 MiB must be locked"),
            "{msg}"
        );
        assert!(msg.contains("ulimit -l"), "{msg}");
        assert!(msg.contains("/etc/security/limits.conf"), "{msg}");
        // CAP_IPC_LOCK and an unlimited limit lift the check.
        check_memlock(
            &MemlockStatus {
                cap_ipc_lock: true,
                ..s
            },
            u64::MAX,
        )
        .unwrap();
        check_memlock(
            &MemlockStatus {
                limit: u64::MAX,
                ..s
            },
            u64::MAX,
        )
        .unwrap();
        // No overflow at the top.
        assert!(
            check_memlock(
                &MemlockStatus {
                    locked: u64::MAX,
                    ..s
                },
                1
            )
            .is_err()
        );
    }

    #[test]
    fn vmlck_parses() {
        let status = "Name:\tx\nVmPeak:\t 1000 kB\nVmLck:\t     64 kB\nVmPin:\t0 kB\n";
        assert_eq!(parse_vmlck(status), Some(64 * 1024));
        assert_eq!(parse_vmlck("Name:\tx\n"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run getrlimit/setrlimit")]
    fn the_real_limit_is_read_and_followed_through_setrlimit() {
        let original = memlock_limit().unwrap();
        assert!(original > 0);
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit read or write one `struct rlimit` at a
        // live local. Only this test changes RLIMIT_MEMLOCK, and nothing
        // else in the test process locks memory.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl), 0);
            let lowered = libc::rlimit {
                rlim_cur: MIB,
                rlim_max: rl.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &lowered), 0);
        }
        let s = memlock_status().unwrap();
        // SAFETY: as above; restores the original limit.
        unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl), 0) };
        assert_eq!(s.limit, MIB);
        assert_eq!(s.cap_ipc_lock, has_cap_ipc_lock());
        let r = check_memlock(&s, 2 * MIB);
        if s.cap_ipc_lock {
            r.unwrap();
        } else {
            assert!(matches!(r, Err(Error::MemlockTooLow { limit, .. }) if limit == MIB));
        }
        assert_eq!(memlock_limit().unwrap(), original);
    }
}
