//! The bridge between BAR0 mappings (shared memory) and the
//! emulated functions: one thread polls every function's shared memory for
//! what the program stored and delivers it to the emulator through
//! [`EmuBar`] (`Mmio::write32`/`write64`), and publishes the registers the
//! program reads. One thread for all functions, so that stores to two
//! functions are delivered in an order a card could see (see `poll_all`).
//!
//! - **Init segment.** The read-only registers are refreshed from
//!   `bar_read32`: the `initializing` word at 0x1fc, the internal timer
//!   0x1000/0x1004 and the health counter 0x1010 on every poll; the
//!   firmware and command interface revisions and the health buffer
//!   0x200..0x240 (which change only at a reset, refreshed then, or a fatal
//!   error) every 32 polls. `cmdq_addr_h` (0x10) and
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
//! - UAR pages that are not allocated are swept, a slice on every poll (the
//!   whole BAR in 1024 polls: 0.1-0.2 s); a store found there is delivered
//!   (hca-emu logs it as an ignored doorbell).
//!
//! **Polling and latency.** After any activity the bridge spins (yielding)
//! for 200 µs, then sleeps 50 µs between polls, and 100 µs after 10 ms
//! without activity: a doorbell is seen within a few µs during activity,
//! within about 60-160 µs (timer slack included) after an idle period.
//! An idle process wakes the bridge about 6,000 times a second: 13% of one
//! core in a release build on the 2-core CI VM, nearly all of it the
//! kernel's context switches (`perf record` on the bridge thread); the
//! polling itself is a few µs. Measured with `vfio-emu/scripts/idle-cpu.py`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hca_emu::{EmuBar, EmuHca};
use platform::{Be32, Be64, Mmio, Platform};

use crate::shm::SharedBar;

/// Init segment registers the bridge publishes on every poll (besides
/// 0x10/0x14): `initializing`, the internal timer, the health counter.
const VOLATILE: &[usize] = &[0x1fc, 0x1000, 0x1004, 0x1010];
/// Registers that change only at a reset or a fatal error (revisions,
/// health buffer 0x200..0x240): published every `SLOW_EVERY` polls.
const SLOW: &[usize] = &[0x000, 0x004];
/// How often (in polls) the slow registers are refreshed.
const SLOW_EVERY: u32 = 32;
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
/// The sleep between polls after a long idle time.
const LONG_IDLE_SLEEP: Duration = Duration::from_micros(100);
/// What a long idle time is.
const LONG_IDLE: Duration = Duration::from_millis(10);
/// Polls over which the unallocated UAR pages are swept once.
const SWEEP_POLLS: usize = 1024;

/// Whether `HCA_EMU_VFIO_TRACE` is set: every delivered store is printed
/// on stderr.
pub fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("HCA_EMU_VFIO_TRACE").is_some())
}

/// What one poll took from a function's shared memory.
struct Captured {
    db: u32,
    doorbells: Vec<(usize, u64, u8)>,
    cmdq: [u32; 2],
    ps: usize,
}

struct Inner {
    emu: Arc<EmuHca>,
    bar: EmuBar,
    shm: Arc<SharedBar>,
    /// Last values published at 0x10 and 0x14.
    published: [u32; 2],
    /// Doorbells delivered so far.
    delivered: u64,
    /// Next unallocated page of the sweep (index from the first UAR page).
    sweep_at: usize,
    /// Polls so far.
    polls: u32,
    /// The token of the command each slot held when a doorbell for it was
    /// delivered.
    rung_tokens: [Option<u8>; 32],
    /// The doorbell record words last seen, per QP (send counter) and CQ
    /// (arm word): what a delivered doorbell covers.
    seen: std::collections::HashMap<(bool, u32), u32>,
}

/// One function's bridge: its state, polled by the process's one bridge
/// thread together with every other function's (so that stores to
/// different functions are delivered in a legal order, see `poll_all`).
pub struct Bridge {
    inner: Arc<Mutex<Inner>>,
}

impl core::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Bridge")
    }
}

/// The functions the bridge thread polls.
static BRIDGES: Mutex<Vec<Arc<Mutex<Inner>>>> = Mutex::new(Vec::new());
/// Whether the bridge thread runs.
static THREAD: AtomicBool = AtomicBool::new(false);

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
        self.rung_tokens = [None; 32];
        self.seen.clear();
        self.publish(true);
    }

    /// Refreshes the readable registers (all of them with `all`).
    fn publish(&mut self, all: bool) {
        let slow = SLOW.iter().copied().chain(HEALTH.step_by(4));
        let regs: Vec<usize> = if all {
            VOLATILE.iter().copied().chain(slow).collect()
        } else {
            VOLATILE.to_vec()
        };
        for o in regs {
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

    /// Two doorbells of different queues stored into one register of a
    /// UAR within one poll interval: only the last one is seen here (a card
    /// sees both posted writes). For each UAR a send or CQ arm doorbell
    /// was delivered on, the other QPs and CQs of that UAR whose doorbell
    /// record moved since the bridge last looked (a send counter, a CQ arm
    /// word: written before the doorbell) get the doorbell that record
    /// stands for: the send doorbell naming the last WQE posted, the arm
    /// doorbell with the record's arm word.
    fn recover_lost(&mut self, delivered: &[(usize, u64, u8)], ps: usize) {
        use hca_emu::ObjKind;
        let uar_of = |off: usize| (off / ps) as u32;
        let mut send_uars: Vec<u32> = Vec::new();
        let mut arm_uars: Vec<u32> = Vec::new();
        let mut named: Vec<(bool, u32)> = Vec::new();
        for &(off, v, _) in delivered {
            match off % ps {
                0x800 | 0x900 => {
                    send_uars.push(uar_of(off));
                    named.push((true, (v as u32) >> 8));
                }
                0x20 => {
                    arm_uars.push(uar_of(off));
                    named.push((false, (v as u32) & 0xff_ffff));
                }
                _ => {}
            }
        }
        let mut word = |dbr: u64, kind: bool, n: u32| -> Option<u32> {
            let mut b = [0u8; 4];
            if !self.emu.peek_dma(dbr + 4, &mut b) {
                return None;
            }
            let w = u32::from_be_bytes(b);
            let before = self.seen.insert((kind, n), w);
            (before != Some(w) && !named.contains(&(kind, n))).then_some(w)
        };
        let mut extra: Vec<(usize, u64)> = Vec::new();
        if !send_uars.is_empty() {
            for n in self.emu.objects(ObjKind::Qp) {
                let Some(q) = self.emu.qp(n) else { continue };
                if !send_uars.contains(&q.uar) || q.no_sq {
                    continue;
                }
                if let Some(w) = word(q.dbr_addr, true, n) {
                    let index = (w as u16).wrapping_sub(1);
                    let v = (u64::from(index) << 40) | u64::from(n << 8);
                    extra.push((q.uar as usize * ps + 0x800, v));
                }
            }
        }
        if !arm_uars.is_empty() {
            for n in self.emu.objects(ObjKind::Cq) {
                let Some(c) = self.emu.cq(n) else { continue };
                if !arm_uars.contains(&c.uar) {
                    continue;
                }
                if let Some(w) = word(c.dbr_addr, false, n) {
                    extra.push((
                        c.uar as usize * ps + 0x20,
                        (u64::from(w) << 32) | u64::from(n),
                    ));
                }
            }
        }
        for (off, v) in extra {
            if trace() {
                eprintln!(
                    "hca-vfio-emu: BAR {off:#x} <- {v:#x} (a doorbell the record shows and no store delivered)"
                );
            }
            self.bar.write64(off, Be64::new(v));
        }
    }

    /// The command queue slots whose entry has its ownership bit set (owned
    /// by the device), read through the emulator's IOMMU, and every slot's
    /// token.
    fn device_owned_slots(&self) -> (u32, [u8; 32]) {
        let h = self.bar.read32(CMDQ[0]).get();
        let l = self.bar.read32(CMDQ[1]).get();
        let (log_size, log_stride) = ((l >> 4) & 0xf, l & 0xf);
        let mut tokens = [0u8; 32];
        if log_size > 5 || !(6..=11).contains(&log_stride) {
            return (0, tokens);
        }
        let base = (u64::from(h) << 32) | u64::from(l & 0xffff_f000);
        let stride = 1usize << log_stride;
        let mut q = vec![0u8; stride << log_size];
        if !self.emu.peek_dma(base, &mut q) {
            return (0, tokens);
        }
        let mut owned = 0;
        for s in 0..1usize << log_size {
            tokens[s] = q[s * stride + 0x3c];
            if q[s * stride + 0x3f] & 1 != 0 {
                owned |= 1 << s;
            }
        }
        (owned, tokens)
    }

    /// Takes the doorbells stored into one UAR page (swapping the sentinel
    /// back), as (BAR offset, value, width).
    fn capture_page(&self, page: usize, ps: usize, out: &mut Vec<(usize, u64, u8)>) {
        for &(o, w) in DOORBELLS {
            let off = page + o;
            if o + usize::from(w) > ps || off + usize::from(w) > self.shm.len() {
                continue;
            }
            match w {
                8 => {
                    if self.shm.load64(off) != u64::MAX {
                        out.push((off, self.shm.swap64(off, u64::MAX), 8));
                    }
                }
                _ => {
                    if self.shm.load32(off) != u32::MAX {
                        out.push((off, u64::from(self.shm.swap32(off, u32::MAX)), 4));
                    }
                }
            }
        }
    }

    /// Takes what the program stored since the last poll.
    ///
    /// The words are *read* in the reverse of the order a program stores
    /// them (the command doorbell, then the UAR doorbells, then the
    /// command queue address), and *delivered* in program order (the
    /// address, the UAR doorbells, the command doorbell): the process's
    /// stores become visible in program order (x86 TSO; elsewhere the
    /// program's write barrier before a doorbell), so a doorbell seen here
    /// comes with everything stored before it, as PCIe posted writes keep
    /// their order.
    fn capture(&mut self, sweep: bool) -> Captured {
        let db = self.shm.swap32(CMD_DBELL, 0);
        let ps = self.emu.uar_page_size().max(4096);
        let uars = self.emu.uars();
        let mut doorbells = Vec::new();
        for &u in &uars {
            let page = u as usize * ps;
            if page >= INIT_SEG && page + ps <= self.shm.len() {
                self.capture_page(page, ps, &mut doorbells);
            }
        }
        // A slice of the unallocated pages on every poll: the whole BAR
        // is swept in SWEEP_POLLS polls, at a constant cost per poll.
        let pages = (self.shm.len() - INIT_SEG) / ps;
        let per_poll = if sweep {
            pages
        } else {
            pages.div_ceil(SWEEP_POLLS)
        };
        for _ in 0..per_poll {
            let page = INIT_SEG + (self.sweep_at % pages) * ps;
            self.sweep_at = (self.sweep_at + 1) % pages;
            if !uars.contains(&((page / ps) as u32)) {
                self.capture_page(page, ps, &mut doorbells);
            }
        }
        let cmdq = CMDQ.map(|o| self.shm.load32(o));
        Captured {
            db,
            doorbells,
            cmdq,
            ps,
        }
    }

    /// Delivers stores to the command queue address registers.
    fn deliver_regs(&mut self, c: &Captured) -> bool {
        let mut any = false;
        for (i, &o) in CMDQ.iter().enumerate() {
            let v = c.cmdq[i];
            if v != self.published[i] {
                if trace() {
                    eprintln!("hca-vfio-emu: BAR {o:#x} <- {v:#010x}");
                }
                self.bar.write32(o, Be32::new(v));
                self.published[i] = v;
                any = true;
            }
        }
        any
    }

    /// Delivers the captured arm doorbells (CQ arm, EQ doorbells) with
    /// `arms`, else the send doorbells (and the doorbells lost to
    /// coalescing, [`recover_lost`](Self::recover_lost)).
    fn deliver_doorbells(&mut self, c: &Captured, arms: bool) -> bool {
        let mine: Vec<(usize, u64, u8)> = c
            .doorbells
            .iter()
            .copied()
            .filter(|&(off, _, _)| (off % c.ps < 0x800) == arms)
            .collect();
        for &(off, v, w) in &mine {
            if trace() {
                eprintln!("hca-vfio-emu: BAR {off:#x} <- {v:#x} ({w} bytes)");
            }
            match w {
                8 => self.bar.write64(off, Be64::new(v)),
                _ => self.bar.write32(off, Be32::new(v as u32)),
            }
        }
        if !arms && !c.doorbells.is_empty() {
            self.recover_lost(&c.doorbells, c.ps);
        }
        self.delivered += mine.len() as u64;
        !mine.is_empty()
    }

    /// Delivers the command doorbell, and publishes the registers.
    fn deliver_cmd(&mut self, c: &Captured) -> bool {
        let mut db = c.db;
        // Threads that ring their slots at once store into one word: all
        // but the last store are lost here (a card sees every posted
        // write). A doorbell therefore also rings the slots whose entries
        // the program handed to the device (ownership bit set) and that no
        // doorbell delivered yet.
        if db != 0 {
            let (owned, tokens) = self.device_owned_slots();
            // Slots delivered before keep their bit in `rung` with the
            // token of the command they held: the same token still owned
            // is the same command, not a new one.
            let mut lost = 0u32;
            for (s, &token) in tokens.iter().enumerate() {
                let bit = 1u32 << s;
                if owned & bit != 0 && db & bit == 0 && self.rung_tokens[s] != Some(token) {
                    lost |= bit;
                }
            }
            if lost != 0 && trace() {
                eprintln!("hca-vfio-emu: command doorbell {db:#x} also rings slots {lost:#x}");
            }
            db |= lost;
            for (s, &token) in tokens.iter().enumerate() {
                if db & (1 << s) != 0 {
                    self.rung_tokens[s] = Some(token);
                }
            }
        }
        if db != 0 {
            if trace() {
                eprintln!(
                    "hca-vfio-emu: BAR {CMD_DBELL:#x} <- {db:#010x} (command doorbell; initializing word {:#010x}, cmdq {:#x}:{:#x})",
                    self.bar.read32(0x1fc).get(),
                    self.bar.read32(0x10).get(),
                    self.bar.read32(0x14).get()
                );
            }
            self.bar.write32(CMD_DBELL, Be32::new(db));
        }
        self.polls = self.polls.wrapping_add(1);
        self.publish(self.polls % SLOW_EVERY == 0);
        db != 0
    }

    /// One poll of this function alone. Returns whether the program did
    /// anything.
    fn poll(&mut self, sweep: bool) -> bool {
        let c = self.capture(sweep);
        let mut any = self.deliver_regs(&c);
        any |= self.deliver_doorbells(&c, true);
        any |= self.deliver_doorbells(&c, false);
        any | self.deliver_cmd(&c)
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
            sweep_at: 0,
            polls: 0,
            rung_tokens: [None; 32],
            seen: Default::default(),
        };
        inner.init();
        let inner = Arc::new(Mutex::new(inner));
        BRIDGES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(inner.clone());
        if !THREAD.swap(true, Ordering::AcqRel) {
            let spawned = std::thread::Builder::new()
                .name("hca-vfio-emu bridge".into())
                .spawn(run);
            if let Err(e) = spawned {
                THREAD.store(false, Ordering::Release);
                return Err(e);
            }
        }
        let _ = name;
        Ok(Self { inner })
    }

    /// Resets the function (FLR) and the shared memory with it, with the
    /// bridge stopped in between.
    pub fn reset(&self) -> Result<(), platform::Error> {
        let mut g = lock(&self.inner);
        g.emu.platform().reset_function()?;
        g.init();
        Ok(())
    }

    /// Runs one poll now, sweeping every page (so that stores made before
    /// a call are delivered before it: a device-fd close or reset).
    pub fn flush(&self) {
        lock(&self.inner).poll(true);
    }

    /// UAR doorbells delivered so far.
    pub fn delivered(&self) -> u64 {
        lock(&self.inner).delivered
    }
}

/// One poll of every function: capture all, then deliver in phases across
/// functions: the command queue addresses, the arm doorbells (CQ arm, EQ
/// doorbells), the send doorbells, the command doorbells. A program that
/// arms a CQ of one function and then posts a send on another has the arm
/// delivered first; the reverse (posting, then arming) may see its arm
/// delivered first, which is one of the orders a card may also see.
fn poll_all(list: &[Arc<Mutex<Inner>>]) -> bool {
    let caps: Vec<Captured> = list.iter().map(|i| lock(i).capture(false)).collect();
    let mut any = false;
    for (i, c) in list.iter().zip(&caps) {
        any |= lock(i).deliver_regs(c);
    }
    for (i, c) in list.iter().zip(&caps) {
        any |= lock(i).deliver_doorbells(c, true);
    }
    for (i, c) in list.iter().zip(&caps) {
        any |= lock(i).deliver_doorbells(c, false);
    }
    for (i, c) in list.iter().zip(&caps) {
        any |= lock(i).deliver_cmd(c);
    }
    any
}

fn run() {
    let mut last_activity = Instant::now();
    let mut last_status = Instant::now();
    loop {
        let list: Vec<Arc<Mutex<Inner>>> = BRIDGES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if trace() && last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            for i in &list {
                let g = lock(i);
                eprintln!(
                    "hca-vfio-emu: status: {} commands, state {:?}, IOMMU faults {:?}, ignored doorbells {:?}, internal errors {:?}",
                    g.emu.command_log().len(),
                    g.emu.hca_state(),
                    g.emu.iommu_faults(),
                    g.emu.ignored_doorbells(),
                    g.emu.internal_errors()
                );
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_all(&list)));
        match r {
            Ok(true) => last_activity = Instant::now(),
            Ok(false) => {}
            Err(_) => {
                eprintln!("hca-vfio-emu: the BAR bridge failed (a bug); stopping it");
                return;
            }
        }
        let idle = last_activity.elapsed();
        if idle < SPIN {
            std::thread::yield_now();
        } else if idle < LONG_IDLE {
            std::thread::sleep(IDLE_SLEEP);
        } else {
            std::thread::sleep(LONG_IDLE_SLEEP);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        BRIDGES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|i| !Arc::ptr_eq(i, &self.inner));
    }
}
