//! The HCA: bring-up, teardown, health, and the state everything else
//! hangs off.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use core::time::Duration;

use firmware_cmds::Opcode;
use firmware_cmds::caps::{
    self, AtomicCaps, CmdHcaCap, FlowTableNicCap, HcaCap, PerProtocolNetworkingOffloadCaps, QosCap,
    QueryHcaCapIn, RoceCap, SetHcaCapIn,
};
use firmware_cmds::endian::Be32;
use firmware_cmds::hca::{
    DisableHcaIn, EnableHcaIn, InitHcaIn, QUERY_PAGES_OP_MOD_BOOT_PAGES,
    QUERY_PAGES_OP_MOD_INIT_PAGES, QueryAdapterIn, QueryAdapterOut, QueryAdapterParamBlock,
    QueryIssiIn, SetDriverVersionIn, SetIssiIn, TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS,
    TEARDOWN_HCA_PROFILE_FORCE_CLOSE, TEARDOWN_HCA_PROFILE_GRACEFUL_CLOSE, TeardownHcaIn,
    TeardownHcaOut,
};
use firmware_cmds::init_seg::{
    CMDIF_REV, CMDIF_REV_FW_SUB_OFFSET, CMDQ_ADDR_H_OFFSET, CMDQ_ADDR_L_SZ_OFFSET, CmdifRevFwSub,
    CmdqAddrLSz, FW_REV_OFFSET, FwVersion, INITIALIZING_OFFSET, Initializing, NIC_IFC_FULL_DRIVER,
};
use platform::{DmaRegion, Mmio, Platform, pci};

use crate::cmd::CmdState;
use crate::config::Config;
use crate::deadline::Deadline;
use crate::eq::{Eq, EqKind, Eqs};
use crate::error::{DeadReason, Error, Result, Wait};
use crate::events::EventRouter;
use crate::fwpages::PageManager;
use crate::health::{HealthMonitor, HealthReading, read_health, read_internal_timer};
use crate::info::{CapPair, Caps, DeviceInfo, PciIds};
use crate::irq::IrqState;
use crate::types::Uarn;

/// Most completion EQs.
pub const MAX_COMP_EQS: usize = 8;
/// Most DMA regions whose device ownership is uncertain (kept until the
/// device is quiesced).
const MAX_RETIRED: usize = 16;

/// What a DMA region is used for, for the accounting in [`DmaUsage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DmaUse {
    CmdQueue = 0,
    Mailboxes = 1,
    FirmwarePages = 2,
    Eqs = 3,
    /// Rings, doorbell records and bookkeeping of CQs, QPs and SRQs.
    Queues = 4,
    /// Data buffers ([`DmaBuf`](crate::DmaBuf)).
    Buffers = 5,
}

/// DMA memory the driver holds, by use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaUsage {
    /// The command queue page.
    pub cmd_queue: usize,
    /// The mailbox pool.
    pub mailboxes: usize,
    /// Pages given to the firmware (whole chunks).
    pub firmware_pages: usize,
    /// EQ buffers.
    pub eqs: usize,
    /// CQ, QP and SRQ memory (rings, doorbell records, bookkeeping).
    pub queues: usize,
    /// Data buffers allocated through the HCA ([`DmaBuf`](crate::DmaBuf)).
    pub buffers: usize,
    /// The most held at any time.
    pub peak: usize,
}

impl DmaUsage {
    /// Everything held now.
    pub fn total(&self) -> usize {
        self.cmd_queue
            + self.mailboxes
            + self.firmware_pages
            + self.eqs
            + self.queues
            + self.buffers
    }
}

impl fmt::Display for DmaUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} KiB (command queue {} KiB, mailboxes {} KiB, firmware pages {} KiB, EQs {} KiB, queues {} KiB, buffers {} KiB; peak {} KiB)",
            self.total() / 1024,
            self.cmd_queue / 1024,
            self.mailboxes / 1024,
            self.firmware_pages / 1024,
            self.eqs / 1024,
            self.queues / 1024,
            self.buffers / 1024,
            self.peak / 1024
        )
    }
}

#[derive(Default)]
pub(crate) struct DmaAccounting {
    by: [AtomicUsize; 6],
    peak: AtomicUsize,
}

impl DmaAccounting {
    fn add(&self, u: DmaUse, n: usize) {
        self.by[u as usize].fetch_add(n, Ordering::Relaxed);
        let total: usize = self.by.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        self.peak.fetch_max(total, Ordering::Relaxed);
    }
    fn sub(&self, u: DmaUse, n: usize) {
        self.by[u as usize].fetch_sub(n, Ordering::Relaxed);
    }
    fn usage(&self) -> DmaUsage {
        let g = |u: DmaUse| self.by[u as usize].load(Ordering::Relaxed);
        DmaUsage {
            cmd_queue: g(DmaUse::CmdQueue),
            mailboxes: g(DmaUse::Mailboxes),
            firmware_pages: g(DmaUse::FirmwarePages),
            eqs: g(DmaUse::Eqs),
            queues: g(DmaUse::Queues),
            buffers: g(DmaUse::Buffers),
            peak: self.peak.load(Ordering::Relaxed),
        }
    }
}

/// What bring-up took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BringUpReport {
    /// Commands executed.
    pub commands: u32,
    /// Boot pages given (QUERY_PAGES op_mod 1).
    pub boot_pages: u32,
    /// Init pages given (QUERY_PAGES op_mod 2).
    pub init_pages: u32,
    /// DMA memory held when bring-up finished (the peak includes the
    /// mailboxes of the large MANAGE_PAGES, trimmed afterwards).
    pub dma: DmaUsage,
    /// Platform time bring-up took.
    pub duration: Duration,
}

impl fmt::Display for BringUpReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} commands, {} boot + {} init firmware pages, DMA {}",
            self.commands, self.boot_pages, self.init_pages, self.dma
        )
    }
}

/// What was done, for unwinding.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Progress {
    pub(crate) cmdq_written: bool,
    pub(crate) enabled: bool,
    pub(crate) initialized: bool,
}

/// A failed [`Hca::open`] or [`Hca::close`]: the error and the platform,
/// handed back so that it can be used again (or dropped).
pub struct Failure<P> {
    /// What went wrong.
    pub error: Error,
    /// The platform.
    pub platform: P,
}

impl<P> fmt::Debug for Failure<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

impl<P> fmt::Display for Failure<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<P> core::error::Error for Failure<P> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<P> From<Failure<P>> for Error {
    fn from(f: Failure<P>) -> Self {
        f.error
    }
}

/// An open ConnectX: the command interface, firmware pages, EQs, health,
/// and device information.
///
/// Every method takes `&self` and may be called from several threads;
/// raw firmware objects borrow the `Hca` ([`fw::Pd`](crate::fw::Pd),
/// [`fw::Cq`](crate::fw::Cq)...) and verbs objects hold a handle of it
/// (e.g. an `Arc<Hca>`, see [`verbs::Share`](crate::verbs::Share)), so it
/// cannot be closed while one exists. [`Hca::close`] tears the device
/// down in PRM order and hands the platform back; dropping an `Hca` does the
/// same, logging errors.
pub struct Hca<P: Platform> {
    platform: Option<P>,
    pub(crate) bar: P::Mmio,
    pub(crate) cfg: Config,
    pub(crate) cmd: CmdState,
    pub(crate) pages: spin::Mutex<PageManager>,
    pub(crate) pending_pages: AtomicI64,
    pub(crate) internal_error_seen: AtomicBool,
    pub(crate) eqs: Eqs,
    pub(crate) irq: IrqState,
    pub(crate) events: EventRouter,
    health: spin::Mutex<HealthMonitor>,
    dead: spin::Mutex<Option<DeadReason>>,
    dead_flag: AtomicBool,
    pub(crate) info: DeviceInfo,
    pub(crate) uar: Option<Uarn>,
    pub(crate) uar_page_size: usize,
    progress: Progress,
    dma: DmaAccounting,
    report: BringUpReport,
    retired: spin::Mutex<heapless::Vec<(DmaRegion, DmaUse), MAX_RETIRED>>,
    /// The packet pacing rate-limit table's entries in use (module
    /// `pacing`).
    pub(crate) rates: spin::Mutex<crate::pacing::RateTable>,
}

impl<P: Platform> fmt::Debug for Hca<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hca")
            .field("device", &self.platform.as_ref().map(|p| p.describe()))
            .field("fw_version", &self.info.fw_version)
            .field("dead", &*self.dead.lock())
            .finish_non_exhaustive()
    }
}

fn check_config(cfg: &Config) -> Result<()> {
    if cfg.comp_eqs == 0 || usize::from(cfg.comp_eqs) > MAX_COMP_EQS {
        return Err(Error::InvalidArgument {
            arg: "comp_eqs",
            reason: "must be 1..=MAX_COMP_EQS",
        });
    }
    for (arg, v) in [
        ("cmd_eq_log_size", cfg.cmd_eq_log_size),
        ("async_eq_log_size", cfg.async_eq_log_size),
        ("comp_eq_log_size", cfg.comp_eq_log_size),
    ] {
        if !(1..=16).contains(&v) {
            return Err(Error::InvalidArgument {
                arg,
                reason: "an EQ has 2^1 ..= 2^16 entries here",
            });
        }
    }
    if cfg.max_pages_per_command == 0 {
        return Err(Error::InvalidArgument {
            arg: "max_pages_per_command",
            reason: "must be at least 1",
        });
    }
    if cfg.min_page_chunk == 0 {
        return Err(Error::InvalidArgument {
            arg: "min_page_chunk",
            reason: "must be at least 1",
        });
    }
    Ok(())
}

/// Sets memory space and bus master in the PCI command register. A platform
/// without configuration space access (bare metal without hooks) is assumed
/// to have done it.
fn pci_set_command<P: Platform>(p: &P, set: u16, clear: u16) -> Result<()> {
    let mut b = [0u8; 2];
    match p.config_read(pci::COMMAND, &mut b) {
        Ok(()) => {}
        Err(platform::Error::NotSupported(what)) => {
            log::warn!(
                "{}: no configuration space access ({what}); PCI command register left alone",
                p.describe()
            );
            return Ok(());
        }
        Err(source) => {
            return Err(Error::Platform {
                what: "reading the PCI command register",
                source,
            });
        }
    }
    let v = (u16::from_le_bytes(b) | set) & !clear;
    p.config_write(pci::COMMAND, &v.to_le_bytes())
        .map_err(|source| Error::Platform {
            what: "writing the PCI command register",
            source,
        })
}

/// Polls `initializing` until it clears, and nothing else, as Linux
/// (`wait_fw_init`) and rdma-core's VFIO provider do: neither the health
/// buffer nor an all-ones read ends the wait early. A function coming back
/// from power-on or a reset may answer every read with all ones for a while
/// (Linux's `mlx5_health_wait_pci_up` waits that out); only when the
/// timeout passes with the last read still all ones is the device declared
/// gone ([`DeadReason::NoAnswer`]); otherwise the wait ends with
/// [`Error::Timeout`].
fn wait_initializing<P: Platform, M: Mmio>(
    p: &P,
    bar: &M,
    what: Wait,
    timeout: Duration,
) -> Result<()> {
    let deadline = Deadline::start(p, timeout);
    let mut all_ones_since = None;
    loop {
        let w = bar.read32(INITIALIZING_OFFSET);
        if !Initializing::from_bits(w).initializing() {
            if all_ones_since.is_some() {
                log::info!("{}: the device answers again", p.describe());
            }
            return Ok(());
        }
        if w.get() == u32::MAX {
            if all_ones_since.is_none() {
                log::debug!(
                    "{}: `initializing` reads all ones; waiting for the device to answer",
                    p.describe()
                );
                all_ones_since = Some(p.now());
            }
        } else {
            all_ones_since = None;
        }
        if let Err(e) = deadline.check(p, what) {
            return match (e, all_ones_since) {
                (Error::Timeout { after, .. }, Some(since)) => {
                    Err(Error::DeviceDead(DeadReason::NoAnswer {
                        what,
                        after,
                        all_ones_for: p.now().saturating_sub(since),
                    }))
                }
                (e, _) => Err(e),
            };
        }
        p.delay(Duration::from_millis(2));
    }
}

fn pci_ids<P: Platform>(p: &P) -> PciIds {
    let mut cs = [0u8; 0x30];
    if let Err(e) = p.config_read(0, &mut cs) {
        log::debug!("{}: PCI ids not readable: {e}", p.describe());
        return PciIds::default();
    }
    let r16 = |o: usize| u16::from_le_bytes([cs[o], cs[o + 1]]);
    PciIds {
        vendor_id: r16(usize::from(pci::VENDOR_ID)),
        device_id: r16(usize::from(pci::DEVICE_ID)),
        revision: cs[usize::from(pci::REVISION_ID)],
        subsystem_vendor_id: r16(usize::from(pci::SUBSYSTEM_VENDOR_ID)),
        subsystem_id: r16(usize::from(pci::SUBSYSTEM_ID)),
    }
}

impl<P: Platform> Hca<P> {
    /// Brings the device up: PCI memory space and bus master, wait for the
    /// firmware, command interface revision check, command queue, then
    /// ENABLE_HCA, ISSI, boot pages, capabilities, init pages, INIT_HCA,
    /// SET_DRIVER_VERSION, QUERY_ADAPTER, ALLOC_UAR, the EQs (commands,
    /// asynchronous events and page requests, completions) and the ports,
    /// in the order of the PRM and Linux.
    ///
    /// A failure unwinds what was done (EQs destroyed, pages reclaimed, the
    /// HCA disabled, DMA memory freed once the device can no longer touch
    /// it) and hands the platform back with the error.
    pub fn open(platform: P, cfg: Config) -> core::result::Result<Self, Failure<P>> {
        // A platform without coherent DMA needs the data path's cache
        // maintenance: refused at compile time without it.
        const {
            assert!(
                !<P::Mmio as Mmio>::DMA_CACHE_MAINTENANCE || cfg!(feature = "cache-maintenance"),
                "this platform's DMA is not coherent (its BAR window asks for cache maintenance): \
                 build hca-driver with the `cache-maintenance` feature"
            )
        };
        macro_rules! fail {
            ($e:expr) => {
                return Err(Failure {
                    error: $e,
                    platform,
                })
            };
        }
        if let Err(e) = check_config(&cfg) {
            fail!(e);
        }
        let start = platform.now();
        let bar = match platform.map_bar(0) {
            Ok(b) => b,
            Err(source) => fail!(Error::Platform {
                what: "mapping BAR0",
                source
            }),
        };
        if let Err(e) = pci_set_command(&platform, pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER, 0)
        {
            fail!(e);
        }
        if let Err(e) = wait_initializing(
            &platform,
            &bar,
            Wait::FirmwareReady,
            cfg.timeouts.fw_pre_init,
        ) {
            fail!(e);
        }
        let rev = bar.read32(CMDIF_REV_FW_SUB_OFFSET);
        let cmdif = CmdifRevFwSub::from_bits(rev).cmd_interface_rev();
        if cmdif != CMDIF_REV {
            fail!(Error::InvalidRegister {
                register: "cmdif_rev_fw_sub.cmd_interface_rev",
                value: u32::from(cmdif),
                reason: "this driver speaks command interface revision 5",
            });
        }
        let fw = FwVersion::from_words(bar.read32(FW_REV_OFFSET).get(), rev.get());
        let sz = CmdqAddrLSz::from_bits(bar.read32(CMDQ_ADDR_L_SZ_OFFSET));
        let (log_size, log_stride) = (sz.log_cmdq_size(), sz.log_cmdq_stride());
        if log_size > 5 {
            fail!(Error::InvalidRegister {
                register: "cmdq_addr_l_sz.log_cmdq_size",
                value: u32::from(log_size),
                reason: "a command queue has at most 32 slots",
            });
        }
        if log_stride < 6 || (1usize << log_size) << log_stride > 4096 {
            fail!(Error::InvalidRegister {
                register: "cmdq_addr_l_sz.log_cmdq_stride",
                value: u32::from(log_stride),
                reason: "entries are 64 bytes and the queue one 4 KiB page",
            });
        }
        let queue = match platform.alloc_dma(4096, 4096) {
            Ok(q) => q,
            Err(source) => fail!(Error::Platform {
                what: "allocating the command queue page",
                source
            }),
        };
        let mut info = DeviceInfo {
            fw_version: Some(fw),
            cmdif_rev: cmdif,
            pci: pci_ids(&platform),
            ..Default::default()
        };
        info.ports.clear();
        let mut hca = Hca {
            platform: Some(platform),
            bar,
            cfg,
            cmd: CmdState::new(queue, log_size, log_stride),
            pages: spin::Mutex::new(PageManager::new()),
            pending_pages: AtomicI64::new(0),
            internal_error_seen: AtomicBool::new(false),
            eqs: Eqs::default(),
            irq: IrqState::default(),
            events: EventRouter::new(),
            health: spin::Mutex::new(HealthMonitor::default()),
            dead: spin::Mutex::new(None),
            dead_flag: AtomicBool::new(false),
            info,
            uar: None,
            uar_page_size: 4096,
            progress: Progress::default(),
            dma: DmaAccounting::default(),
            report: BringUpReport::default(),
            retired: spin::Mutex::new(heapless::Vec::new()),
            rates: spin::Mutex::new(crate::pacing::RateTable::default()),
        };
        hca.dma.add(DmaUse::CmdQueue, 4096);
        log::debug!(
            "{}: firmware {fw}, command interface revision {cmdif}, {} command slots",
            hca.p().describe(),
            1u32 << log_size
        );
        match hca.bring_up(start) {
            Ok(()) => Ok(hca),
            Err(error) => {
                log::error!("{}: bring-up failed: {error}", hca.p().describe());
                if let Err(e) = hca.shutdown() {
                    log::warn!("unwinding the failed bring-up: {e}");
                }
                let platform = hca
                    .platform
                    .take()
                    .expect("the platform is present until close");
                Err(Failure { error, platform })
            }
        }
    }

    /// Tears the device down (EQs, UAR, TEARDOWN_HCA, every firmware page
    /// back, DISABLE_HCA, bus master off), frees all DMA memory once the
    /// device can no longer touch it, and hands the platform back.
    ///
    /// On an error the teardown still went as far as it could; memory the
    /// device might still write is leaked rather than freed (see the log).
    pub fn close(mut self) -> core::result::Result<P, Failure<P>> {
        let r = self.shutdown();
        let platform = self
            .platform
            .take()
            .expect("the platform is present until close");
        match r {
            Ok(()) => Ok(platform),
            Err(error) => Err(Failure { error, platform }),
        }
    }

    pub(crate) fn p(&self) -> &P {
        self.platform
            .as_ref()
            .expect("the platform is present until close")
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        self.p()
    }

    /// The configuration the device was opened with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// What the driver knows about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The capabilities.
    pub fn caps(&self) -> &Caps {
        &self.info.caps
    }

    /// The event registry and queue.
    pub fn events(&self) -> &EventRouter {
        &self.events
    }

    /// What bring-up took.
    pub fn bring_up_report(&self) -> BringUpReport {
        self.report
    }

    /// DMA memory held now.
    pub fn dma_usage(&self) -> DmaUsage {
        self.dma.usage()
    }

    /// Commands executed since open.
    pub fn commands_executed(&self) -> u32 {
        self.cmd.executed.load(Ordering::Relaxed)
    }

    /// Size of a UAR page in bytes (4 KiB << `log_uar_page_sz`).
    pub fn uar_page_size(&self) -> usize {
        self.uar_page_size
    }

    /// The driver's own UAR (EQ doorbells).
    pub fn driver_uar(&self) -> Option<Uarn> {
        self.uar
    }

    pub(crate) fn dma_alloc(
        &self,
        len: usize,
        align: usize,
        u: DmaUse,
        what: &'static str,
    ) -> Result<DmaRegion> {
        let r = self
            .p()
            .alloc_dma(len, align)
            .map_err(|source| Error::Platform { what, source })?;
        self.dma.add(u, r.len());
        Ok(r)
    }

    pub(crate) fn dma_free(&self, r: DmaRegion, u: DmaUse) {
        self.dma.sub(u, r.len());
        self.p().free_dma(r);
    }

    /// Keeps a region the device may still touch until it is quiesced.
    pub(crate) fn retire(&self, r: DmaRegion, u: DmaUse) {
        if let Err((r, _)) = self.retired.lock().push((r, u)) {
            log::error!(
                "no room to keep DMA region {:#x} until the device is quiesced; leaking it",
                r.iova()
            );
            self.dma.sub(u, r.len());
        }
    }

    // ---- health -----------------------------------------------------------

    /// Fails with [`Error::DeviceDead`] once the device is known dead.
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.dead_flag.load(Ordering::Acquire) {
            if let Some(r) = *self.dead.lock() {
                return Err(Error::DeviceDead(r));
            }
        }
        Ok(())
    }

    /// Enters the error state.
    pub(crate) fn declare_dead(&self, r: DeadReason) -> Error {
        let mut d = self.dead.lock();
        if d.is_none() {
            log::error!(
                "{}: {r}; every command fails from now on",
                self.p().describe()
            );
            *d = Some(r);
            self.dead_flag.store(true, Ordering::Release);
            crate::health::log_fatal_health(&self.bar, &r);
        }
        Error::DeviceDead(d.unwrap_or(r))
    }

    /// Why the device is dead, if it is.
    pub fn dead_reason(&self) -> Option<DeadReason> {
        *self.dead.lock()
    }

    /// Reads the health buffer (not the counter history): a dead device
    /// fails at once.
    pub(crate) fn probe_health(&self) -> Result<()> {
        self.check_alive()?;
        match read_health(&self.bar).buffer_verdict() {
            Ok(()) => Ok(()),
            Err(r) => Err(self.declare_dead(r)),
        }
    }

    /// The health poll (call it every [`Timeouts::health_poll`](crate::Timeouts)
    /// or more often): health buffer syndrome, `fw_version` all ones, and
    /// the health counter, which must change between polls a poll period
    /// apart (three stalls = dead). A dead device enters the error state.
    pub fn check_health(&self) -> Result<HealthReading> {
        self.check_alive()?;
        let r = read_health(&self.bar);
        let now = self.p().now();
        let verdict = self
            .health
            .lock()
            .observe(now, &r, self.cfg.timeouts.health_poll);
        match verdict {
            Ok(()) => Ok(r),
            Err(d) => Err(self.declare_dead(d)),
        }
    }

    /// The device's free-running clock (`internal_timer_h`/`_l` of the
    /// initialization segment), the clock of free-running CQE timestamps
    /// ([`RxCqe::timestamp`](verbs_core::RxCqe::timestamp)); its rate is
    /// [`device_clock_khz`](Self::device_clock_khz). A dead
    /// device fails.
    pub fn internal_timer(&self) -> Result<u64> {
        self.check_alive()?;
        Ok(read_internal_timer(&self.bar))
    }

    /// The device clock's rate in kHz: `device_frequency_khz` of the
    /// general HCA caps, or `device_frequency_mhz` × 1000 where the
    /// firmware leaves the kHz field 0 (the recorded ConnectX-4 firmware
    /// 14.12 reports 275 MHz and 0 kHz); 0 when it reports neither.
    pub fn device_clock_khz(&self) -> u32 {
        let g = self.caps().general();
        match g.get(CmdHcaCap::device_frequency_khz) {
            0 => g.get(CmdHcaCap::device_frequency_mhz).saturating_mul(1000),
            khz => khz,
        }
    }

    /// Runs the periodic work of a polling driver: the health poll, then
    /// every EQ (events, page requests). Returns the EQEs handled.
    pub fn service(&self) -> Result<usize> {
        self.check_health()?;
        self.poll_events()
    }

    // ---- bring-up ---------------------------------------------------------

    fn bring_up(&mut self, start: Duration) -> Result<()> {
        // Command queue address, then wait for the firmware to take it.
        let q = self.cmd.queue().iova();
        self.bar
            .write32(CMDQ_ADDR_H_OFFSET, Be32::new((q >> 32) as u32));
        self.bar.write32(
            CMDQ_ADDR_L_SZ_OFFSET,
            CmdqAddrLSz::for_address(q, NIC_IFC_FULL_DRIVER).into_bits(),
        );
        self.progress.cmdq_written = true;
        wait_initializing(
            self.p(),
            &self.bar,
            Wait::CommandQueueReady,
            self.cfg.timeouts.fw_init,
        )
        .map_err(|e| self.dead_if_dead(e))?;

        self.exec(&EnableHcaIn::new())?;
        self.progress.enabled = true;
        // First health reading: the baseline of the counter.
        self.check_health()?;

        self.negotiate_issi()?;
        let boot = self.query_pages(QUERY_PAGES_OP_MOD_BOOT_PAGES)?;
        self.give_pages_now(boot)?;
        self.report.boot_pages = boot;
        self.set_host_endianness()?;
        self.set_caps()?;
        let init = self.query_pages(QUERY_PAGES_OP_MOD_INIT_PAGES)?;
        self.give_pages_now(init)?;
        self.report.init_pages = init;
        self.exec(&InitHcaIn::new())?;
        self.progress.initialized = true;
        if self.info.caps.general().get(CmdHcaCap::driver_version) {
            let v = SetDriverVersionIn::new().with_version_string(self.cfg.driver_version)?;
            self.exec(&v)?;
        }
        self.query_all_caps()?;
        self.query_adapter()?;
        self.alloc_driver_uar()?;
        self.create_eqs()?;
        self.query_ports()?;

        // The large MANAGE_PAGES chains are not needed any more.
        self.trim_mailboxes();
        self.report.commands = self.commands_executed();
        self.report.dma = self.dma.usage();
        self.report.duration = self.p().now().saturating_sub(start);
        log::info!("{}: up, {}", self.p().describe(), self.report);
        Ok(())
    }

    /// A timeout of a register wait on a device that turns out dead is the
    /// dead-device error.
    fn dead_if_dead(&self, e: Error) -> Error {
        match e {
            Error::DeviceDead(r) => self.declare_dead(r),
            e => e,
        }
    }

    /// QUERY_ISSI, then SET_ISSI 1 when offered, as Linux's
    /// `mlx5_core_set_issi` does ("fix query ISSI flow"): a QUERY_ISSI that
    /// the firmware fails with any status, or a zero `supported_issi_dw0`,
    /// means ISSI 0; a mask offering neither 0 nor 1 is refused.
    fn negotiate_issi(&mut self) -> Result<()> {
        let supported = match self.exec(&QueryIssiIn::new()) {
            Ok(o) => o.get(firmware_cmds::hca::QueryIssiOut::supported_issi_dw0),
            Err(Error::Command(e)) => {
                log::warn!("{e}: the firmware has no ISSI negotiation; ISSI is 0");
                self.info.issi = 0;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if supported & (1 << 1) != 0 {
            self.exec(&SetIssiIn::new().with(SetIssiIn::current_issi, 1)?)?;
            self.info.issi = 1;
        } else if supported & 1 != 0 || supported == 0 {
            self.info.issi = 0;
        } else {
            return Err(Error::InvalidAnswer {
                opcode: Opcode::QUERY_ISSI,
                op_mod: 0,
                field: "query_issi_out.supported_issi_dw0",
                value: u64::from(supported),
                reason: "supports neither ISSI 0 nor ISSI 1",
            });
        }
        Ok(())
    }

    fn set_host_endianness(&self) -> Result<()> {
        use firmware_cmds::reg::{
            ACCESS_REG_OP_MOD_WRITE, REG_HOST_ENDIANNESS, RegisterHostEndianness,
        };
        let he = RegisterHostEndianness::new()
            .with(RegisterHostEndianness::he, cfg!(target_endian = "big"))?;
        self.access_reg(ACCESS_REG_OP_MOD_WRITE, REG_HOST_ENDIANNESS, 0, &he)?;
        Ok(())
    }

    /// QUERY_HCA_CAP of one capability block.
    pub fn query_cap<C: HcaCap>(&self, mode: crate::info::CapMode) -> Result<C> {
        let m = match mode {
            crate::info::CapMode::Max => caps::HCA_CAP_OP_MOD_GET_MAX,
            crate::info::CapMode::Current => caps::HCA_CAP_OP_MOD_GET_CUR,
        };
        let q = QueryHcaCapIn::for_cap::<C>(m)?;
        self.exec_read(&q, caps::QueryHcaCapOut::SIZE, |o| {
            o.decode_at::<C>(caps::CAPABILITY_OFFSET)
        })
    }

    fn query_pair<C: HcaCap>(&self) -> Result<CapPair<C>> {
        Ok(CapPair {
            max: self.query_cap(crate::info::CapMode::Max)?,
            cur: self.query_cap(crate::info::CapMode::Current)?,
        })
    }

    /// General caps: checksum off (or on, [`Config::cmdif_checksum`]), 4 KiB
    /// UAR pages, 128 P_Keys, the QP profile; atomics in host byte order when
    /// supported.
    fn set_caps(&mut self) -> Result<()> {
        let general = self.query_pair::<CmdHcaCap>()?;
        // From here on the answers are checked if the firmware signs them.
        self.cmd.check_signatures.store(
            general.cur.get(CmdHcaCap::cmdif_checksum) == caps::CMDIF_CHECKSUM_ENABLED,
            Ordering::Relaxed,
        );
        let checksum = self.cfg.cmdif_checksum
            && general.max.get(CmdHcaCap::cmdif_checksum) == caps::CMDIF_CHECKSUM_ENABLED;
        if self.cfg.cmdif_checksum && !checksum {
            log::warn!(
                "cmdif_checksum asked for, but the device's maximum is {}: running without signatures",
                general.max.get(CmdHcaCap::cmdif_checksum)
            );
        }
        let mut set = general.cur.clone();
        set.set(
            CmdHcaCap::cmdif_checksum,
            if checksum {
                caps::CMDIF_CHECKSUM_ENABLED
            } else {
                caps::CMDIF_CHECKSUM_DISABLED
            },
        )?;
        // 4 KiB UAR pages (PAGE_SHIFT - 12 on a 4 KiB-page host).
        set.set(CmdHcaCap::log_uar_page_sz, 0)?;
        // 128 P_Keys (the firmware encoding of 128 is 0).
        set.set(CmdHcaCap::pkey_table_size, 0)?;
        if let Some(l) = self.cfg.log_max_qp {
            set.set(
                CmdHcaCap::log_max_qp,
                l.min(general.max.get(CmdHcaCap::log_max_qp)),
            )?;
        }
        self.exec(&SetHcaCapIn::for_cap(&set)?)?;
        // The answer to this SET_HCA_CAP was signed (or not) as the old
        // setting said; every later command follows the new one.
        self.cmd.sign_inputs.store(checksum, Ordering::Relaxed);
        self.cmd.check_signatures.store(checksum, Ordering::Relaxed);
        self.info.caps.general = general;

        if self.cfg.host_endian_atomics && self.info.caps.general.cur.get(CmdHcaCap::atomic) {
            let at = self.query_pair::<AtomicCaps>()?;
            let supported = at
                .max
                .get(AtomicCaps::supported_atomic_req_8B_endianness_mode_1);
            let mode = at.cur.get(AtomicCaps::atomic_req_8B_endianness_mode);
            if supported && mode != caps::ATOMIC_REQ_8B_ENDIANNESS_MODE_HOST_ENDIANNESS {
                let mut set = at.cur.clone();
                set.set(
                    AtomicCaps::atomic_req_8B_endianness_mode,
                    caps::ATOMIC_REQ_8B_ENDIANNESS_MODE_HOST_ENDIANNESS,
                )?;
                self.exec(&SetHcaCapIn::for_cap(&set)?)?;
            }
        }
        Ok(())
    }

    /// After INIT_HCA: every capability type in use, maximum and current.
    fn query_all_caps(&mut self) -> Result<()> {
        let general = self.query_pair::<CmdHcaCap>()?;
        let c = general.cur.clone();
        self.info.caps.general = general;
        self.info.caps.ethernet = if c.get(CmdHcaCap::eth_net_offloads) {
            Some(self.query_pair::<PerProtocolNetworkingOffloadCaps>()?)
        } else {
            None
        };
        self.info.caps.atomic = if c.get(CmdHcaCap::atomic) {
            Some(self.query_pair::<AtomicCaps>()?)
        } else {
            None
        };
        self.info.caps.roce = if c.get(CmdHcaCap::roce) {
            Some(self.query_pair::<RoceCap>()?)
        } else {
            None
        };
        // Flow table capabilities (Linux queries them too, as
        // MLX5_CAP_FLOW_TABLE); the NIC receive properties are kept.
        self.info.caps.nic_receive_flow = if c.get(CmdHcaCap::nic_flow_table) {
            let p = self.query_pair::<FlowTableNicCap>()?;
            Some(CapPair {
                max: p
                    .max
                    .get(FlowTableNicCap::flow_table_properties_nic_receive),
                cur: p
                    .cur
                    .get(FlowTableNicCap::flow_table_properties_nic_receive),
            })
        } else {
            None
        };
        // QoS capabilities (packet pacing), as Linux reads MLX5_CAP_QOS
        // when the general caps say `qos`.
        self.info.caps.qos = if c.get(CmdHcaCap::qos) {
            Some(self.query_pair::<QosCap>()?)
        } else {
            None
        };
        *self.rates.lock() = crate::pacing::RateTable::for_caps(&self.info.caps);
        let l = c.get(CmdHcaCap::log_uar_page_sz);
        if l > 8 {
            return Err(Error::InvalidAnswer {
                opcode: Opcode::QUERY_HCA_CAP,
                op_mod: 1,
                field: "cmd_hca_cap.log_uar_page_sz",
                value: u64::from(l),
                reason: "UAR pages above 1 MiB",
            });
        }
        self.uar_page_size = 4096 << l;
        // The P_Key table size every user of it reads (an encoding beyond
        // 4096 entries is an invalid answer).
        self.info.caps.pkey_table_len()?;
        self.events.set_num_ports(self.info.caps.num_ports());
        Ok(())
    }

    fn query_adapter(&mut self) -> Result<()> {
        let out: QueryAdapterOut = self.exec(&QueryAdapterIn::new())?;
        let a: QueryAdapterParamBlock = out.get(QueryAdapterOut::query_adapter_struct);
        self.info.psid = a.get(QueryAdapterParamBlock::vsd_contd_psid);
        self.info.ieee_vendor_id = a.get(QueryAdapterParamBlock::ieee_vendor_id);
        Ok(())
    }

    fn alloc_driver_uar(&mut self) -> Result<()> {
        let n = self.alloc_uar_number()?;
        self.uar = Some(n);
        Ok(())
    }

    fn create_eqs(&mut self) -> Result<()> {
        self.setup_interrupts();
        let cmd = self.create_eq(EqKind::Command, self.cfg.cmd_eq_log_size)?;
        let eqn = cmd.eqn;
        self.eqs.cmd = Some(cmd);
        // Commands started from now on complete through the command EQ.
        self.cmd.events_mode.store(true, Ordering::Release);
        log::debug!("command interface in event mode (EQ {eqn:#x})");
        let a = self.create_eq(EqKind::Async, self.cfg.async_eq_log_size)?;
        self.eqs.async_eq = Some(a);
        for i in 0..self.cfg.comp_eqs {
            let c = self.create_eq(EqKind::Completion(i), self.cfg.comp_eq_log_size)?;
            // Capacity checked against MAX_COMP_EQS in check_config.
            let _ = self.eqs.comp.push(c);
        }
        Ok(())
    }

    fn trim_mailboxes(&self) {
        let mut freed: heapless::Vec<DmaRegion, { crate::mailbox::MAX_MAILBOX_CHUNKS }> =
            heapless::Vec::new();
        self.cmd.pool.lock().trim(1, &mut |r| {
            let _ = freed.push(r);
        });
        for r in freed {
            self.dma_free(r, DmaUse::Mailboxes);
        }
    }

    // ---- teardown ---------------------------------------------------------

    /// Tears down whatever exists, in reverse bring-up order; frees DMA
    /// memory once the device is quiesced.
    fn shutdown(&mut self) -> Result<()> {
        let mut first: Option<Error> = None;
        let note = |e: Error, first: &mut Option<Error>| {
            log::warn!("teardown: {e}");
            if first.is_none() {
                *first = Some(e);
            }
        };
        let mut disabled = !self.progress.enabled;
        if self.check_alive().is_ok() {
            // EQs: completion, asynchronous, then the command EQ in polling
            // mode (its own DESTROY_EQ cannot complete through it).
            while let Some(eq) = self.eqs.comp.pop() {
                if let Err(e) = self.destroy_eq(eq) {
                    note(e, &mut first);
                }
            }
            if let Some(eq) = self.eqs.async_eq.take() {
                if let Err(e) = self.destroy_eq(eq) {
                    note(e, &mut first);
                }
            }
            self.cmd.events_mode.store(false, Ordering::Release);
            if let Some(eq) = self.eqs.cmd.take() {
                if let Err(e) = self.destroy_eq(eq) {
                    note(e, &mut first);
                }
            }
            if let Err(e) = self.teardown_interrupts() {
                note(e, &mut first);
            }
            if let Some(u) = self.uar.take() {
                if let Err(e) = self.dealloc_uar_number(u) {
                    note(e, &mut first);
                }
            }
            if self.progress.initialized {
                // Profile 0: graceful close.
                let t = TeardownHcaIn::new();
                debug_assert_eq!(
                    t.get(TeardownHcaIn::profile),
                    TEARDOWN_HCA_PROFILE_GRACEFUL_CLOSE
                );
                match self.exec(&t) {
                    Ok(_) => self.progress.initialized = false,
                    Err(e) => {
                        let force = self.info.caps.general.max.get(CmdHcaCap::force_teardown);
                        if force && self.check_alive().is_ok() && self.teardown_force() {
                            self.progress.initialized = false;
                        }
                        note(e, &mut first);
                    }
                }
            }
            if self.progress.enabled {
                if let Err(e) = self.reclaim_all_pages() {
                    note(e, &mut first);
                }
                match self.exec(&DisableHcaIn::new()) {
                    Ok(_) => {
                        self.progress.enabled = false;
                        disabled = true;
                    }
                    Err(e) => note(e, &mut first),
                }
            }
        } else if let Err(e) = self.check_alive() {
            note(e, &mut first);
        }
        self.cmd.events_mode.store(false, Ordering::Release);
        if let Err(e) = self.teardown_interrupts() {
            note(e, &mut first);
        }
        // Bus master off: no DMA from here on.
        if let Err(e) = pci_set_command(self.p(), 0, pci::COMMAND_BUS_MASTER) {
            note(e, &mut first);
        }
        let stuck = self.cmd.stuck_slots() != 0;
        let fw_may_hold_pages = self.pages.lock().holds_pages();
        let mut quiesced = disabled && !stuck && !fw_may_hold_pages && self.check_alive().is_ok();
        if !quiesced {
            // The firmware may still write memory it was given: reset the
            // function so that it cannot.
            match self.p().reset_function() {
                Ok(()) => {
                    log::info!(
                        "{}: function reset to quiesce the device",
                        self.p().describe()
                    );
                    quiesced = true;
                }
                Err(e) if self.dead_reason().is_some_and(|r| r.is_gone()) => {
                    log::warn!(
                        "{}: reset failed ({e}), but the device is gone and cannot reach memory",
                        self.p().describe()
                    );
                    quiesced = true;
                }
                Err(source) => note(
                    Error::Platform {
                        what: "resetting the function to quiesce the device",
                        source,
                    },
                    &mut first,
                ),
            }
        }
        self.release_memory(quiesced);
        match first {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// TEARDOWN_HCA with the force-close profile, after a graceful close
    /// failed; whether it worked.
    fn teardown_force(&self) -> bool {
        let t = match TeardownHcaIn::new()
            .with(TeardownHcaIn::profile, TEARDOWN_HCA_PROFILE_FORCE_CLOSE)
        {
            Ok(t) => t,
            Err(_) => return false,
        };
        match self.exec(&t) {
            Ok(o) if o.get(TeardownHcaOut::state) == TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS => {
                log::warn!("graceful TEARDOWN_HCA failed; force close succeeded");
                true
            }
            Ok(_) => {
                log::error!("TEARDOWN_HCA force close reports failure");
                false
            }
            Err(e) => {
                log::error!("TEARDOWN_HCA force close: {e}");
                false
            }
        }
    }

    /// Frees every DMA region (or leaks those the device may still touch).
    fn release_memory(&mut self, quiesced: bool) {
        let mut leaked = 0usize;
        let free = |hca: &Self, r: DmaRegion, u: DmaUse, leaked: &mut usize| {
            if quiesced {
                hca.dma_free(r, u);
            } else {
                *leaked += r.len();
                hca.dma.sub(u, r.len());
            }
        };
        // EQs that could not be destroyed.
        let eqs: heapless::Vec<Eq, { MAX_COMP_EQS + 2 }> = self
            .eqs
            .comp
            .drain(..)
            .chain(self.eqs.async_eq.take())
            .chain(self.eqs.cmd.take())
            .collect();
        for eq in eqs {
            free(self, eq.buf, DmaUse::Eqs, &mut leaked);
        }
        let retired: heapless::Vec<(DmaRegion, DmaUse), MAX_RETIRED> =
            core::mem::take(&mut *self.retired.lock());
        for (r, u) in retired {
            free(self, r, u, &mut leaked);
        }
        let mut regions: heapless::Vec<DmaRegion, { crate::pages::MAX_PAGE_CHUNKS }> =
            heapless::Vec::new();
        self.pages.lock().drain(&mut |r| {
            let _ = regions.push(r);
        });
        for r in regions {
            free(self, r, DmaUse::FirmwarePages, &mut leaked);
        }
        self.cmd.take_stuck();
        let mut mb: heapless::Vec<DmaRegion, { crate::mailbox::MAX_MAILBOX_CHUNKS }> =
            heapless::Vec::new();
        self.cmd.pool.lock().drain(&mut |r| {
            let _ = mb.push(r);
        });
        for r in mb {
            free(self, r, DmaUse::Mailboxes, &mut leaked);
        }
        if let Some(q) = self.cmd.queue.take() {
            free(self, q, DmaUse::CmdQueue, &mut leaked);
        }
        if leaked > 0 {
            log::error!(
                "{}: the device could not be quiesced; leaking {leaked} bytes of DMA memory it may still write",
                self.p().describe()
            );
        }
    }
}

impl<P: Platform> Drop for Hca<P> {
    fn drop(&mut self) {
        if self.platform.is_some() {
            if let Err(e) = self.shutdown() {
                log::error!("dropping the HCA: {e}");
            }
            self.platform = None;
        }
    }
}
