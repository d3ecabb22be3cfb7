//! The device core: registers, events, time, and the thread that runs them.

use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::config::{Clock, EmuConfig, Execution};
use crate::datapath::{Datapath, Engine, Outgoing};
use crate::faults::FaultPlan;
use crate::fw::Fw;
use crate::iommu::Iommu;
use crate::personality::CMDIF_REV;

/// Init segment offsets (PRM "initialization segment").
pub(crate) mod reg {
    pub const FW_REV: usize = 0x000;
    pub const CMDIF_REV_FW_SUB: usize = 0x004;
    pub const CMDQ_ADDR_H: usize = 0x010;
    pub const CMDQ_ADDR_L: usize = 0x014;
    pub const CMD_DBELL: usize = 0x018;
    pub const INITIALIZING: usize = 0x1fc;
    pub const HEALTH_FW_VER: usize = 0x230;
    pub const HEALTH_HW_ID: usize = 0x234;
    pub const HEALTH_SYND: usize = 0x23c;
    pub const INTERNAL_TIMER_H: usize = 0x1000;
    pub const INTERNAL_TIMER_L: usize = 0x1004;
    pub const HEALTH_COUNTER: usize = 0x1010;
    /// Size of the register area before the first UAR page the driver may
    /// get (the init segment layout is 16 KiB).
    pub const INIT_SEG_SIZE: usize = 0x4000;
}

/// Log2 of the number of command queue slots the device offers.
pub(crate) const LOG_CMDQ_SIZE: u32 = 5;
/// Log2 of the command queue entry stride.
pub(crate) const LOG_CMDQ_STRIDE: u32 = 6;
/// BAR0 size: `uar_sz` = 5 of the recorded caps, 1 MiB << 5.
pub(crate) const BAR_SIZE: usize = 32 << 20;
/// Real time the driver side waits for the device thread before it logs a
/// warning (it keeps waiting: a device that is merely slow must not cause
/// a spurious timeout).
const SLOW_DEVICE_WARNING: Duration = Duration::from_secs(10);

/// A frame sent to another HCA, counted in the sender's frames in flight
/// until the receiver has processed it and delivered what it sent in
/// response (the sender's `wait_idle` waits for that, so its virtual clock
/// does not run ahead of a peer that has not looked at the frame yet).
pub(crate) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub(crate) fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl core::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("InFlight")
    }
}

/// Something the driver did that the device reacts to.
#[derive(Debug)]
pub(crate) enum Event {
    /// A write of the command doorbell (init segment 0x18).
    CmdDoorbell(u32),
    /// A write into a UAR page.
    Uar {
        page: u32,
        offset: usize,
        value: u64,
        width: u8,
    },
    /// A write-combined BlueFlame burst into a UAR page.
    UarBf {
        page: u32,
        offset: usize,
        bytes: Vec<u8>,
    },
    /// A frame arriving from the wire on `port` (for the data path).
    Frame {
        port: u8,
        bytes: Vec<u8>,
        flight: Option<InFlight>,
    },
}

/// Timed device work.
#[derive(Clone, Debug)]
pub(crate) enum Timer {
    /// Execute the commands of a doorbell (command latency).
    ExecCommands(u32),
    /// An RC QP's ACK timer (`tgen`: the incarnation of its engine state).
    Retry { qpn: u32, tgen: u64 },
    /// An RC QP's RNR wait ends (`tgen`: its RNR timer generation).
    Rnr { qpn: u32, tgen: u64 },
    /// Flush WQEs posted to queues in the error state.
    ErrPoll,
    /// The subnet manager configures an InfiniBand port (`sm_gen`: the
    /// port's timer generation).
    SmConfigure { port: u8, sm_gen: u64 },
    /// A paced raw SQ may send its next frame (`pgen`: the wait it ends;
    /// a wait cancelled by MODIFY_SQ, a rate change or a reset is stale).
    Pace { sqn: u32, pgen: u64 },
}

/// A command as the device executed it, for tests and reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    /// Command queue slot.
    pub slot: u8,
    /// Opcode (from the inline input).
    pub opcode: u16,
    /// op_mod.
    pub op_mod: u16,
    /// Delivery status written into the entry.
    pub delivery_status: u8,
    /// Command status (0 when delivery failed).
    pub status: u8,
    /// Syndrome.
    pub syndrome: u32,
    /// Input length of the entry.
    pub input_length: u32,
    /// Output length of the entry.
    pub output_length: u32,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Health {
    pub(crate) synd: u8,
    pub(crate) ext_synd: u16,
    /// Counter value frozen at a fatal error.
    pub(crate) frozen: Option<u32>,
}

/// All device state, behind one lock.
pub(crate) struct Device {
    pub(crate) cfg: EmuConfig,
    pub(crate) iommu: Iommu,
    pub(crate) vnow: Duration,
    pub(crate) real_start: Instant,
    pub(crate) relax_quantum: Duration,
    pub(crate) relax_seen: u64,
    pub(crate) progress: u64,
    pub(crate) events: VecDeque<Event>,
    pub(crate) timers: BTreeMap<(Duration, u64), Timer>,
    pub(crate) timer_seq: u64,
    pub(crate) shutdown: bool,
    pub(crate) cmdq_h: u32,
    pub(crate) cmdq_l: u32,
    pub(crate) cmdq_written: bool,
    pub(crate) init_clear_at: Option<Duration>,
    /// Until this device time every BAR read returns all ones and writes
    /// are lost ([`EmuConfig::boot_all_ones`] after power-on and reset).
    pub(crate) off_bus_until: Duration,
    /// Device time of an injected surprise removal
    /// ([`Faults::surprise_removal_at`](crate::Faults::surprise_removal_at)).
    pub(crate) gone_at: Option<Duration>,
    pub(crate) health: Health,
    pub(crate) gone: bool,
    pub(crate) config_space: [u8; 256],
    pub(crate) fw: Fw,
    pub(crate) faults: FaultPlan,
    pub(crate) internal_errors: Vec<String>,
    pub(crate) cmd_log: Vec<CommandRecord>,
    pub(crate) ignored_doorbells: Vec<String>,
    pub(crate) datapath: Datapath,
    pub(crate) interrupts: BTreeMap<u8, u64>,
    pub(crate) peers: crate::wire::Peers,
    /// The ports' packet capture taps ([`crate::EmuHca::capture`]).
    pub(crate) taps: crate::wire::Taps,
    /// The transport engine's state.
    pub(crate) engine: Engine,
    /// This device's own shared state (to recognise itself as a peer).
    pub(crate) me: Weak<Shared>,
    /// Frames this device sent to other HCAs, not yet processed there.
    pub(crate) inflight: Arc<AtomicUsize>,
    /// `alloc_dma` calls, and how many of them an injected fault failed.
    pub(crate) dma_allocs: (u64, u64),
    /// BlueFlame stores through an uncached BAR mapping
    /// ([`EmuConfig::uar_write_combining`] = false): how many, and the
    /// first one.
    pub(crate) uncached_bf: (u64, Option<String>),
    /// Called with the vector of every interrupt ([`crate::EmuHca::set_msix_sink`]).
    pub(crate) msix_sink: Option<crate::MsixSink>,
    /// The eventfd of each vector a platform handle asked for
    /// ([`Platform::interrupt_fd`](platform::Platform::interrupt_fd)),
    /// signalled at every interrupt of the vector.
    #[cfg(target_os = "linux")]
    pub(crate) irq_fds: BTreeMap<u8, Arc<platform::notify::EventFd>>,
}

impl Device {
    pub(crate) fn new(cfg: EmuConfig, me: Weak<Shared>, inflight: Arc<AtomicUsize>) -> Self {
        let mut config_space = [0u8; 256];
        let pci_id = cfg.personality.pci_id();
        config_space[0..2].copy_from_slice(&pci_id.0.to_le_bytes());
        config_space[2..4].copy_from_slice(&pci_id.1.to_le_bytes());
        config_space[0x0a] = 0x00; // subclass: Ethernet
        config_space[0x0b] = 0x02; // class: network controller
        config_space[0x2c..0x2e].copy_from_slice(&pci_id.0.to_le_bytes());
        config_space[0x2e..0x30].copy_from_slice(&0x0008u16.to_le_bytes());
        let iova_offset = cfg.seed % 4096;
        let fw = Fw::new(&cfg);
        Self {
            init_clear_at: Some(cfg.boot_all_ones + cfg.boot_delay),
            off_bus_until: cfg.boot_all_ones,
            gone_at: None,
            iommu: Iommu::new(iova_offset),
            vnow: Duration::ZERO,
            real_start: Instant::now(),
            relax_quantum: Duration::from_micros(1),
            relax_seen: 0,
            progress: 0,
            events: VecDeque::new(),
            timers: BTreeMap::new(),
            timer_seq: 0,
            shutdown: false,
            cmdq_h: 0,
            cmdq_l: 0,
            cmdq_written: false,
            health: Health::default(),
            gone: false,
            config_space,
            fw,
            faults: FaultPlan::default(),
            internal_errors: Vec::new(),
            cmd_log: Vec::new(),
            ignored_doorbells: Vec::new(),
            datapath: Datapath::default(),
            interrupts: BTreeMap::new(),
            peers: Default::default(),
            taps: Default::default(),
            engine: Engine::default(),
            me,
            inflight,
            cfg,
            dma_allocs: (0, 0),
            uncached_bf: (0, None),
            msix_sink: None,
            #[cfg(target_os = "linux")]
            irq_fds: BTreeMap::new(),
        }
    }

    /// MSI-X vector `v` interrupts: its count goes up, the MSI-X sink is
    /// called and the vector's eventfd signalled.
    pub(crate) fn raise_interrupt(&mut self, v: u8) {
        *self.interrupts.entry(v).or_default() += 1;
        self.msix_sink.as_ref().inspect(|s| s(u16::from(v)));
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.irq_fds.get(&v) {
            fd.signal();
        }
    }

    /// Empties the eventfd of vector `v` (its interrupts are being
    /// counted).
    pub(crate) fn drain_irq_fd(&self, v: u8) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.irq_fds.get(&v) {
            fd.drain();
        }
        #[cfg(not(target_os = "linux"))]
        let _ = v;
    }

    /// Device time.
    pub(crate) fn now(&self) -> Duration {
        match self.cfg.clock {
            Clock::Virtual => self.vnow,
            Clock::Real => self.real_start.elapsed(),
        }
    }

    pub(crate) fn initializing(&self) -> bool {
        if self.faults.init_never_clears {
            return true;
        }
        match self.init_clear_at {
            Some(t) => self.now() < t,
            None => true,
        }
    }

    pub(crate) fn health_counter(&self) -> u32 {
        if let Some(f) = self.health.frozen {
            return f;
        }
        let p = self.cfg.health_period.as_nanos().max(1);
        ((self.now().as_nanos() / p) as u32) & 0xff_ffff
    }

    pub(crate) fn set_fatal(&mut self, synd: u8, ext_synd: u16) {
        self.health.frozen = Some(self.health_counter());
        self.health.synd = synd;
        self.health.ext_synd = ext_synd;
    }

    pub(crate) fn fatal(&self) -> bool {
        self.health.frozen.is_some()
    }

    /// Whether the PCI command register lets the device do DMA.
    pub(crate) fn dma_enabled(&self) -> bool {
        if !self.cfg.require_bus_master {
            return true;
        }
        let cmd = u16::from_le_bytes([self.config_space[4], self.config_space[5]]);
        cmd & platform::pci::COMMAND_BUS_MASTER != 0 && cmd & platform::pci::COMMAND_MEMORY != 0
    }

    pub(crate) fn cmdq_addr(&self) -> u64 {
        (u64::from(self.cmdq_h) << 32) | u64::from(self.cmdq_l & 0xffff_f000)
    }

    /// UAR page size in bytes (4 KiB << log_uar_page_sz).
    pub(crate) fn uar_page_size(&self) -> usize {
        let l = self.fw.caps.general("log_uar_page_sz").min(8);
        4096 << l
    }

    /// Whether the function does not answer BAR accesses now: surprise
    /// removal, or the window after power-on/reset of
    /// [`EmuConfig::boot_all_ones`].
    pub(crate) fn off_bus(&self) -> bool {
        self.gone
            || self.now() < self.off_bus_until
            || self.gone_at.is_some_and(|t| self.now() >= t)
    }

    /// A BAR0 read.
    pub(crate) fn bar_read32(&self, off: usize) -> u32 {
        if self.off_bus() {
            return 0xffff_ffff;
        }
        let (maj, min, sub) = self.cfg.personality.fw_version();
        match off {
            reg::FW_REV => (u32::from(min) << 16) | u32::from(maj),
            reg::CMDIF_REV_FW_SUB => (u32::from(CMDIF_REV) << 16) | u32::from(sub),
            reg::CMDQ_ADDR_H => self.cmdq_h,
            reg::CMDQ_ADDR_L => {
                (self.cmdq_l & 0xffff_f700) | (LOG_CMDQ_SIZE << 4) | LOG_CMDQ_STRIDE
            }
            reg::INITIALIZING => {
                (u32::from(self.initializing()) << 31) | (1 << 24) // nic_interface_supported: full driver
            }
            reg::HEALTH_FW_VER => (u32::from(min) << 16) | u32::from(maj),
            reg::HEALTH_HW_ID => 0x0000_0209,
            reg::HEALTH_SYND => {
                (u32::from(self.health.synd) << 16) | u32::from(self.health.ext_synd)
            }
            reg::INTERNAL_TIMER_H | reg::INTERNAL_TIMER_L => {
                // device_frequency_mhz = 275 in the recorded caps.
                let ticks = (self.now().as_nanos() * 275 / 1000) as u64;
                if off == reg::INTERNAL_TIMER_H {
                    (ticks >> 32) as u32
                } else {
                    ticks as u32
                }
            }
            reg::HEALTH_COUNTER => (u32::from(self.health.synd) << 24) | self.health_counter(),
            _ => 0,
        }
    }

    /// A BAR0 write. Register stores take effect at once; doorbells become
    /// events for the device to execute.
    pub(crate) fn bar_write(&mut self, off: usize, value: u64, width: u8) {
        if self.off_bus() {
            return;
        }
        self.progress += 1;
        let v32 = value as u32;
        match off {
            reg::CMDQ_ADDR_H if width == 4 => self.cmdq_h = v32,
            reg::CMDQ_ADDR_L if width == 4 => {
                self.cmdq_l = v32;
                self.cmdq_written = true;
                self.init_clear_at = Some(self.now() + self.cfg.initializing_delay);
            }
            reg::CMD_DBELL if width == 4 => self.events.push_back(Event::CmdDoorbell(v32)),
            o if o >= reg::INIT_SEG_SIZE => {
                let ps = self.uar_page_size();
                self.events.push_back(Event::Uar {
                    page: (o / ps) as u32,
                    offset: o % ps,
                    value,
                    width,
                });
            }
            _ => log::debug!("write of {value:#x} to read-only/unknown register {off:#x} ignored"),
        }
    }

    /// A write-combined BlueFlame copy ([`platform::Mmio::write_bf`]): one
    /// burst, one event.
    pub(crate) fn bar_write_bf(&mut self, off: usize, bytes: Vec<u8>) {
        if self.gone {
            return;
        }
        self.progress += 1;
        if off < reg::INIT_SEG_SIZE {
            log::debug!("BlueFlame write to the init segment at {off:#x} ignored");
            return;
        }
        let ps = self.uar_page_size();
        self.events.push_back(Event::UarBf {
            page: (off / ps) as u32,
            offset: off % ps,
            bytes,
        });
    }

    /// Whether there is work the device can do now.
    pub(crate) fn has_ready(&self) -> bool {
        if !self.events.is_empty() {
            return true;
        }
        let now = self.now();
        self.timers.keys().next().is_some_and(|&(t, _)| t <= now)
    }

    /// Runs one event or due timer. Returns whether there was one. A panic
    /// inside the device model is caught and reported as a firmware internal
    /// error (health syndrome 0x1): the device thread never dies.
    pub(crate) fn run_one(&mut self) -> bool {
        let now = self.now();
        let due = self
            .timers
            .keys()
            .next()
            .copied()
            .filter(|&(t, _)| t <= now);
        let work: Option<Result<Timer, Event>> = if let Some(k) = due {
            self.timers.remove(&k).map(Ok)
        } else {
            self.events.pop_front().map(Err)
        };
        let Some(work) = work else { return false };
        self.progress += 1;
        let r = catch_unwind(AssertUnwindSafe(|| match work {
            Ok(Timer::ExecCommands(bits)) => self.exec_commands(bits),
            Ok(Timer::SmConfigure { port, sm_gen }) => self.sm_configure(port, sm_gen),
            Ok(t) => self.datapath_timer(t),
            Err(Event::CmdDoorbell(bits)) => self.command_doorbell(bits),
            Err(Event::Uar {
                page,
                offset,
                value,
                width,
            }) => self.uar_write(page, offset, value, width),
            Err(Event::UarBf {
                page,
                offset,
                bytes,
            }) => crate::datapath::blueflame_write(self, page, offset, bytes),
            Err(Event::Frame {
                port,
                bytes,
                flight,
            }) => {
                self.taps.see(port, crate::wire::Direction::In, &bytes);
                self.receive_frame(port, bytes);
                if let Some(f) = flight {
                    self.engine.held.push(f);
                }
            }
        }));
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            log::error!("emulated firmware internal error: {msg}");
            self.internal_errors.push(msg);
            if !self.fatal() {
                self.set_fatal(0x1, 0);
            }
        }
        true
    }

    pub(crate) fn schedule(&mut self, after: Duration, t: Timer) {
        self.timer_seq += 1;
        let at = self.now() + after;
        self.timers.insert((at, self.timer_seq), t);
    }

    fn command_doorbell(&mut self, bits: u32) {
        if self.cfg.command_latency > Duration::ZERO {
            self.schedule(self.cfg.command_latency, Timer::ExecCommands(bits));
        } else {
            self.exec_commands(bits);
        }
    }

    /// The PCI function is reset (FLR): firmware state, objects and pages
    /// are gone, the device boots again. DMA mappings (host memory) stay.
    pub(crate) fn reset(&mut self) {
        let cfg = self.cfg.clone();
        let lost = std::mem::take(&mut self.fw.pages_lost);
        let at_teardown = std::mem::take(&mut self.fw.leaked_at_teardown);
        self.fw = Fw::new(&cfg);
        self.fw.pages_lost = lost;
        self.fw.leaked_at_teardown = at_teardown;
        self.cmdq_h = 0;
        self.cmdq_l = 0;
        self.cmdq_written = false;
        self.off_bus_until = self.now() + cfg.boot_all_ones;
        self.init_clear_at = Some(self.off_bus_until + cfg.boot_delay);
        self.health = Health::default();
        self.gone = false;
        self.gone_at = None;
        self.events.clear();
        self.timers.clear();
        self.engine = Engine::default();
        self.config_space[4] = 0;
        self.config_space[5] = 0;
    }
}

/// The device state shared by the HCA handle, its platform handles, BAR
/// windows and the device thread.
pub(crate) struct Shared {
    dev: Mutex<Device>,
    pub(crate) cv: Condvar,
    pub(crate) clock: Clock,
    pub(crate) execution: Execution,
    pub(crate) thread_alive: AtomicBool,
    pub(crate) real_start: Instant,
    /// Frames sent to other HCAs and not processed there yet.
    pub(crate) inflight: Arc<AtomicUsize>,
}

impl Shared {
    pub(crate) fn new(cfg: EmuConfig, me: Weak<Shared>) -> Self {
        let clock = cfg.clock;
        let execution = cfg.execution;
        let inflight = Arc::new(AtomicUsize::new(0));
        let dev = Device::new(cfg, me, inflight.clone());
        let real_start = dev.real_start;
        Self {
            dev: Mutex::new(dev),
            cv: Condvar::new(),
            clock,
            execution,
            thread_alive: AtomicBool::new(false),
            real_start,
            inflight,
        }
    }

    /// Locks the device. A poisoned lock (a panic on a driver thread while
    /// holding it) is taken over: the device state is still consistent
    /// because device work runs under `catch_unwind`.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Device> {
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn now(&self) -> Duration {
        match self.clock {
            Clock::Virtual => self.lock().vnow,
            Clock::Real => self.real_start.elapsed(),
        }
    }

    /// Waits until the device has done everything it can do now, and (with
    /// a device thread) until the frames it sent to other HCAs were
    /// processed there.
    pub(crate) fn wait_idle(&self) {
        let mut d = self.lock();
        match self.execution {
            Execution::Stepping => loop {
                let (g, ran) = self.run_one(d);
                d = g;
                if !ran {
                    break;
                }
            },
            Execution::DeviceThread => {
                let start = Instant::now();
                let mut warned = false;
                loop {
                    let flying = self.inflight.load(Ordering::Acquire) > 0;
                    if d.shutdown || !(d.has_ready() || flying) {
                        break;
                    }
                    if !self.thread_alive.load(Ordering::Acquire) {
                        // Never happens (the thread catches panics); run
                        // the work here rather than hang.
                        loop {
                            let (g, ran) = self.run_one(d);
                            d = g;
                            if !ran {
                                break;
                            }
                        }
                        break;
                    }
                    // Frames in flight are released by another device
                    // without this lock: poll for them.
                    let t = if flying {
                        Duration::from_micros(200)
                    } else {
                        Duration::from_millis(100)
                    };
                    let (g, _) = self
                        .cv
                        .wait_timeout(d, t)
                        .unwrap_or_else(|e| e.into_inner());
                    d = g;
                    if !warned && start.elapsed() > SLOW_DEVICE_WARNING {
                        log::warn!("emulated device busy for more than {SLOW_DEVICE_WARNING:?}");
                        warned = true;
                    }
                }
            }
        }
    }

    fn advance(&self, by: Duration) {
        {
            let mut d = self.lock();
            d.vnow += by;
        }
        self.cv.notify_all();
        self.wait_quiet();
    }

    /// Whether the device has work now or frames in flight.
    fn busy(&self) -> bool {
        self.inflight.load(Ordering::Acquire) > 0 || self.lock().has_ready()
    }

    /// Waits until this device and the devices on the other end of its
    /// cables (those with a device thread) have nothing left to do now.
    /// Each HCA has its own virtual clock: before one advances, the frames
    /// and doorbells its peers were given must have been processed, or a
    /// driver polling one HCA would run its clock (and its timeouts) ahead
    /// of a peer whose thread has not run yet.
    pub(crate) fn wait_quiet(&self) {
        // Bounded: ping-pong between devices converges, but never spin
        // forever on a peer that keeps itself busy.
        for _ in 0..10_000 {
            self.wait_idle();
            let peers: Vec<Arc<Shared>> = {
                let d = self.lock();
                d.peers
                    .values()
                    .filter_map(|p| p.hca().map(|(h, _)| h))
                    .filter(|p| {
                        !std::ptr::eq(Arc::as_ptr(p), self)
                            && p.execution == Execution::DeviceThread
                    })
                    .collect()
            };
            let mut quiet = true;
            for p in &peers {
                if p.busy() {
                    quiet = false;
                    p.wait_idle();
                }
            }
            if quiet && !self.busy() {
                return;
            }
        }
    }

    pub(crate) fn delay(&self, d: Duration) {
        match self.clock {
            Clock::Real => std::thread::sleep(d),
            Clock::Virtual => {
                self.wait_quiet();
                self.advance(d);
            }
        }
    }

    /// A busy-poll step. Virtual clock: the device catches up; if it has
    /// made no progress since the previous `relax`, virtual time advances by
    /// a quantum that doubles from 1 µs up to 10 ms while nothing happens
    /// (so a driver that polls with `relax` alone still reaches its
    /// timeouts quickly), and falls back to 1 µs after any progress.
    pub(crate) fn relax(&self) {
        match self.clock {
            Clock::Real => {
                if self.execution == Execution::Stepping {
                    let (g, _) = self.run_one(self.lock());
                    drop(g);
                }
                std::thread::yield_now();
            }
            Clock::Virtual => {
                if self.execution == Execution::Stepping {
                    let (g, ran) = self.run_one(self.lock());
                    drop(g);
                    if ran {
                        return;
                    }
                } else {
                    self.wait_quiet();
                }
                let q = {
                    let mut d = self.lock();
                    if d.progress != d.relax_seen {
                        d.relax_seen = d.progress;
                        d.relax_quantum = Duration::from_micros(1);
                    } else {
                        d.relax_quantum = (d.relax_quantum * 2).min(Duration::from_millis(10));
                    }
                    d.relax_quantum
                };
                self.advance(q);
                let mut d = self.lock();
                d.relax_seen = d.progress;
            }
        }
    }

    /// Posts an event from outside (the wire).
    pub(crate) fn post(&self, ev: Event) {
        self.lock().events.push_back(ev);
        self.cv.notify_all();
    }

    /// Runs one event or due timer, then delivers the frames it sent to
    /// other HCAs and puts those for socket wires on the wire, with this
    /// device's lock released: two devices never hold each other's locks,
    /// and while a socket send waits for room at the far end, this
    /// device's own wire thread can still take the frames arriving (two
    /// processes sending to each other at once would otherwise each hold
    /// their device while the other's frames wait for it). A frame the far
    /// end does not take is counted in `Drops::no_link`. Returns the
    /// guard and whether there was work.
    pub(crate) fn run_one<'a>(
        &'a self,
        mut d: MutexGuard<'a, Device>,
    ) -> (MutexGuard<'a, Device>, bool) {
        let ran = d.run_one();
        if d.engine.outbox.is_empty() && d.engine.held.is_empty() && d.engine.wire_out.is_empty() {
            return (d, ran);
        }
        let out = std::mem::take(&mut d.engine.outbox);
        let held = std::mem::take(&mut d.engine.held);
        let wire_out = std::mem::take(&mut d.engine.wire_out);
        if d.taps.any() {
            tap_outgoing(&d, &out);
        }
        drop(d);
        self.cv.notify_all();
        deliver(out);
        let unsent = wire_out.iter().filter(|(w, f)| !w.send(f)).count();
        drop(held);
        let mut d = self.lock();
        d.datapath.drops.no_link += unsent as u64;
        (d, ran)
    }
}

/// Shows the frames going to other HCAs to the taps of the ports they
/// leave by (the port cabled to that HCA's port).
fn tap_outgoing(d: &Device, out: &[Outgoing]) {
    for (peer, pport, bytes, _) in out {
        let local = d.peers.iter().find_map(|(p, w)| match w {
            crate::wire::Peer::Port { hca, port } if Weak::ptr_eq(hca, peer) && port == pport => {
                Some(*p)
            }
            _ => None,
        });
        if let Some(p) = local {
            d.taps.see(p, crate::wire::Direction::Out, bytes);
        }
    }
}

/// Posts frames to the HCAs at the other end of the wire. A frame for a
/// device in stepping mode is not counted in flight (nothing would process
/// it until the test steps that device).
fn deliver(out: Vec<Outgoing>) {
    for (peer, port, bytes, flight) in out {
        if let Some(p) = peer.upgrade() {
            let flight = flight.filter(|_| p.execution == Execution::DeviceThread);
            p.post(Event::Frame {
                port,
                bytes,
                flight,
            });
        }
    }
}

/// The device thread's body.
pub(crate) fn device_thread(shared: Arc<Shared>) {
    struct Alive<'a>(&'a AtomicBool);
    impl Drop for Alive<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    shared.thread_alive.store(true, Ordering::Release);
    let _alive = Alive(&shared.thread_alive);
    let mut d = shared.lock();
    loop {
        if d.shutdown {
            return;
        }
        let (g, ran) = shared.run_one(d);
        d = g;
        if ran {
            drop(d);
            shared.cv.notify_all();
            d = shared.lock();
            continue;
        }
        // Idle: sleep until an event, a clock change, or the next timer in
        // real time.
        let wait = match shared.clock {
            Clock::Real => d
                .timers
                .keys()
                .next()
                .map(|&(t, _)| t.saturating_sub(d.now()))
                .unwrap_or(Duration::from_millis(100)),
            Clock::Virtual => Duration::from_millis(100),
        };
        shared.cv.notify_all();
        let (g, _) = shared
            .cv
            .wait_timeout(d, wait.max(Duration::from_micros(50)))
            .unwrap_or_else(|e| e.into_inner());
        d = g;
    }
}
