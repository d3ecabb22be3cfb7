//! The bridge between the process's BAR0 mapping (shared memory) and the
//! emulated function: one thread per function polls the shared memory for
//! what the program stored and delivers it to the emulator through
//! [`EmuBar`] (`Mmio::write32`/`write64`), and publishes the registers the
//! program reads.
//!
//! - **Init segment.** The read-only registers (firmware and command
//!   interface revisions, `cmdq_addr_l_sz`'s low byte, the `initializing`
//!   word at 0x1fc, the health buffer 0x200..0x240, the internal timer
//!   0x1000/0x1004, the health counter 0x1010) are refreshed from
//!   `bar_read32` on every poll. `cmdq_addr_h` (0x10) and
//!   `cmdq_addr_l_sz` (0x14) are published the same way, with a
//!   compare-and-swap: a value that differs from the last one published is
//!   a store of the program and is delivered (a store of exactly the
//!   value already published cannot be seen; it would not change the
//!   register either). The command doorbell vector (0x18) is swapped back
//!   to 0 and a non-zero value delivered.
//! - **UAR pages.** Each doorbell word of an allocated UAR page — CQ arm
//!   (0x20, 8 bytes), EQ arm and no-arm (0x40, 0x48, 4 bytes), the two
//!   send doorbell / BlueFlame registers (0x800, 0x900, 8 bytes; hca-emu
//!   decodes no others) — holds a sentinel, all ones, that a program never
//!   writes there: a CQ arm of CQN 0xffffff, an EQ doorbell of EQN 255 with
//!   consumer index 0xffffff, a send doorbell of QPN 0xffffff (hca-emu's
//!   CQ, QP and EQ numbers stay far below; EQNs are allocated from small
//!   numbers). The bridge swaps each word back to the sentinel and delivers
//!   any other value, so the same value written twice (between two polls
//!   of the bridge) is two doorbells. Two stores to one word within one
//!   poll interval coalesce to the last one, as a doorbell register that
//!   latches the last producer index does.
//! - **BlueFlame.** A BlueFlame copy writes the whole WQE into the
//!   register; the bridge delivers its first 8 bytes (the doorbell) as a
//!   doorbell write and ignores the rest: a polling bridge cannot see the
//!   order or the completeness of a write-combined burst. (vfio-pci maps
//!   BARs uncached, and `platform::vfio` says so, so our own driver never
//!   copies BlueFlame there.)
//! - UAR pages that are not allocated are swept every 10 ms; a store found
//!   there is delivered (hca-emu logs it as an ignored doorbell).
//!
//! **Polling and latency.** After any activity the bridge spins (yielding)
//! for 200 µs, then sleeps 50 µs between polls: a doorbell is seen within
//! about 50-110 µs of an idle period (timer slack included), within a
//! few µs during activity; an idle process costs about 20,000 wake-ups a
//! second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hca_emu::{EmuBar, EmuHca};
use platform::{Be32, Be64, Mmio, Platform};

use crate::shm::SharedBar;

/// Init segment registers the bridge publishes (besides 0x10/0x14).
const READ_ONLY: &[usize] = &[0x000, 0x004, 0x1fc, 0x1000, 0x1004, 0x1010];
/// Health buffer.
const HEALTH: std::ops::Range<usize> = 0x200..0x240;
/// `cmdq_addr_h`, `cmdq_addr_l_sz`.
const CMDQ: [usize; 2] = [0x10, 0x14];
/// Command doorbell vector.
const CMD_DBELL: usize = 0x18;
/// The init segment (16 KiB) before the first UAR page.
const INIT_SEG: usize = 0x4000;
/// UAR doorbell words: (page offset, width).
pub const DOORBELLS: &[(usize, u8)] = &[(0x20, 8), (0x40, 4), (0x48, 4), (0x800, 8), (0x900, 8)];
/// How long the bridge spins after activity.
const SPIN: Duration = Duration::from_micros(200);
/// The sleep between polls when idle.
const IDLE_SLEEP: Duration = Duration::from_micros(50);
/// Period of the sweep of unallocated UAR pages.
const SWEEP: Duration = Duration::from_millis(10);

/// Whether `HCA_EMU_VFIO_TRACE` is set: every delivered store is printed
/// on stderr.
fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("HCA_EMU_VFIO_TRACE").is_some())
}

struct Inner {
    emu: Arc<EmuHca>,
    bar: EmuBar,
    shm: Arc<SharedBar>,
    /// Last values published at 0x10 and 0x14.
    published: [u32; 2],
    /// Doorbells delivered so far.
    delivered: u64,
}

/// One function's bridge thread.
pub struct Bridge {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl core::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Bridge")
    }
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inner {
    /// Puts the shared memory in the state of a function just reset.
    fn init(&mut self) {
        let len = self.shm.len();
        self.shm.zero(0, INIT_SEG);
        let ps = self.emu.uar_page_size().max(4096);
        for page in (INIT_SEG..len).step_by(ps) {
            for &(o, w) in DOORBELLS {
                if o + usize::from(w) <= ps {
                    match w {
                        8 => {
                            self.shm.swap64(page + o, u64::MAX);
                        }
                        _ => self.shm.store32(page + o, u32::MAX),
                    }
                }
            }
        }
        self.published = [0; 2];
        self.publish();
    }

    /// Refreshes the readable registers.
    fn publish(&mut self) {
        for &o in READ_ONLY
            .iter()
            .chain(HEALTH.step_by(4).collect::<Vec<_>>().iter())
        {
            let v = self.bar.read32(o).get();
            self.shm.store32(o, v);
        }
        for (i, &o) in CMDQ.iter().enumerate() {
            let v = self.bar.read32(o).get();
            if v != self.published[i] && self.shm.cas32(o, self.published[i], v) {
                self.published[i] = v;
            }
        }
    }

    /// Delivers what changed in one UAR page. Returns whether anything did.
    fn page(&mut self, page: usize, ps: usize) -> bool {
        let mut any = false;
        for &(o, w) in DOORBELLS {
            let off = page + o;
            if o + usize::from(w) > ps || off + usize::from(w) > self.shm.len() {
                continue;
            }
            match w {
                8 => {
                    if self.shm.load64(off) != u64::MAX {
                        let v = self.shm.swap64(off, u64::MAX);
                        if trace() {
                            eprintln!("hca-vfio-emu: BAR {off:#x} <- {v:#018x} (64-bit)");
                        }
                        self.bar.write64(off, Be64::new(v));
                        any = true;
                    }
                }
                _ => {
                    if self.shm.load32(off) != u32::MAX {
                        let v = self.shm.swap32(off, u32::MAX);
                        if trace() {
                            eprintln!("hca-vfio-emu: BAR {off:#x} <- {v:#010x}");
                        }
                        self.bar.write32(off, Be32::new(v));
                        any = true;
                    }
                }
            }
        }
        if any {
            self.delivered += 1;
        }
        any
    }

    /// One poll. Returns whether the program did anything.
    fn poll(&mut self, sweep: bool) -> bool {
        let mut any = false;
        for (i, &o) in CMDQ.iter().enumerate() {
            let v = self.shm.load32(o);
            if v != self.published[i] {
                if trace() {
                    eprintln!("hca-vfio-emu: BAR {o:#x} <- {v:#010x}");
                }
                self.bar.write32(o, Be32::new(v));
                self.published[i] = v;
                any = true;
            }
        }
        let ps = self.emu.uar_page_size().max(4096);
        let uars = self.emu.uars();
        for &u in &uars {
            let page = u as usize * ps;
            if page >= INIT_SEG && page + ps <= self.shm.len() {
                any |= self.page(page, ps);
            }
        }
        if sweep {
            for page in (INIT_SEG..self.shm.len()).step_by(ps) {
                if !uars.contains(&((page / ps) as u32)) {
                    any |= self.page(page, ps);
                }
            }
        }
        // After the UAR doorbells: a program that writes a doorbell and
        // then posts a command destroying its object (EQ doorbell, then
        // DESTROY_EQ) within one poll interval must have them delivered in
        // that order; the reverse cannot happen within one interval (a
        // program waits for the command that creates an object before it
        // rings the object's doorbell).
        let db = self.shm.swap32(CMD_DBELL, 0);
        if db != 0 {
            if trace() {
                eprintln!("hca-vfio-emu: BAR {CMD_DBELL:#x} <- {db:#010x} (command doorbell)");
            }
            self.bar.write32(CMD_DBELL, Be32::new(db));
            any = true;
        }
        self.publish();
        any
    }
}

impl Bridge {
    /// Starts the bridge of `emu` over `shm`.
    pub fn start(emu: Arc<EmuHca>, shm: Arc<SharedBar>, name: &str) -> std::io::Result<Self> {
        let bar = emu
            .platform()
            .map_bar(0)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut inner = Inner {
            emu,
            bar,
            shm,
            published: [0; 2],
            delivered: 0,
        };
        inner.init();
        let inner = Arc::new(Mutex::new(inner));
        let stop = Arc::new(AtomicBool::new(false));
        let (i, s) = (inner.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("vfio-emu {name}"))
            .spawn(move || run(&i, &s))?;
        Ok(Self {
            inner,
            stop,
            thread: Some(thread),
        })
    }

    /// Resets the function (FLR) and the shared memory with it, with the
    /// bridge stopped in between.
    pub fn reset(&self) -> Result<(), platform::Error> {
        let mut g = lock(&self.inner);
        g.emu.platform().reset_function()?;
        g.init();
        Ok(())
    }

    /// Runs one poll now (so that stores made before a call are delivered
    /// before it: a device-fd close or reset).
    pub fn flush(&self) {
        lock(&self.inner).poll(true);
    }

    /// UAR pages in which doorbells were delivered so far.
    pub fn delivered(&self) -> u64 {
        lock(&self.inner).delivered
    }
}

fn run(inner: &Mutex<Inner>, stop: &AtomicBool) {
    let mut last_activity = Instant::now();
    let mut last_sweep = Instant::now();
    let mut last_status = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if trace() && last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            let g = lock(inner);
            eprintln!(
                "hca-vfio-emu: status: {} commands, state {:?}, IOMMU faults {:?}, ignored doorbells {:?}, internal errors {:?}",
                g.emu.command_log().len(),
                g.emu.hca_state(),
                g.emu.iommu_faults(),
                g.emu.ignored_doorbells(),
                g.emu.internal_errors()
            );
        }
        let sweep = last_sweep.elapsed() >= SWEEP;
        if sweep {
            last_sweep = Instant::now();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lock(inner).poll(sweep)));
        match r {
            Ok(true) => last_activity = Instant::now(),
            Ok(false) => {}
            Err(_) => {
                eprintln!("hca-vfio-emu: the BAR bridge failed (a bug); stopping it");
                return;
            }
        }
        if last_activity.elapsed() < SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(IDLE_SLEEP);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
