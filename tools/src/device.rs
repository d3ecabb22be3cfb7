//! Choosing and opening a device, shared by every command that needs one
//! (info, caps, health, pingpong, perf).
//!
//! `-d <bdf>` opens a PCI function bound to vfio-pci through
//! `platform::vfio`; no `-d` (or `-d emu`) builds the emulated ConnectX-4 of
//! `hca-emu` and says so on stderr. A command implements [`HcaTask`] (runs
//! on a brought-up [`Hca`]) or [`PlatformTask`] (runs on the bare platform,
//! before or without bring-up), and [`run_hca`] / [`run_platform`] take care
//! of opening, the command recorder (`--dump-commands`), progress on a
//! terminal, and teardown. A test with two sides implements [`PairTask`]
//! and runs through [`run_pair`] (two emulated HCAs cabled together, or
//! one real function for both sides); [`with_emulated`] brings up one HCA
//! of an emulated pair on a thread of its own (`--tcp-loopback`).
//!
//! On the emulator, `--wire SPEC` (or `HCA_EMU_WIRE`) cables port 1 of
//! this process's emulated HCA to a datagram socket wire
//! ([`hca_emu::WireSpec`]: `udp:LOCAL,PEER` or `unix:LOCAL,PEER`), so
//! that a server and a client in two `hca` processes (or an `hca` process
//! and a QEMU guest on `-netdev dgram`) reach each other; `--pcap FILE`
//! writes every frame of port 1 (side A's in one process) into a pcap
//! file ([`crate::capture`]).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use firmware_cmds::Opcode;
use hca_driver::{CommandRecorder, Config, DumpRecorder, Exchange, Hca, WaitMode};
use hca_emu::{Clock, EmuConfig, EmuHca, WireSpec};
use platform::Platform;
use platform::vfio::{VfioOptions, VfioPlatform, normalize_bdf};

use crate::capture::Capture;
use crate::error::{Result, ToolError};
use crate::progress::{self, Progress};

/// Which device a command runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The built-in emulated ConnectX-4.
    Emulator,
    /// A PCI function (normalised `dddd:bb:dd.f`) bound to vfio-pci.
    Vfio(String),
    /// Two PCI functions (`-d <bdf1>,<bdf2>`) whose ports are cabled
    /// together: the two sides of a pair command (perf, pingpong in one
    /// process).
    VfioPair(String, String),
}

impl Selection {
    /// From the `-d` option: none or `emu` is the emulator, two PCI
    /// addresses separated by a comma are a cabled pair, anything else must
    /// be a PCI address.
    pub fn parse(device: Option<&str>) -> Result<Self> {
        match device {
            None => Ok(Selection::Emulator),
            Some(d) if d.eq_ignore_ascii_case("emu") => Ok(Selection::Emulator),
            Some(d) => match d.split_once(',') {
                Some((a, b)) => {
                    let (a, b) = (normalize_bdf(a.trim())?, normalize_bdf(b.trim())?);
                    if a == b {
                        return Err(ToolError::Usage(format!(
                            "-d {d}: the two sides of a pair must be two functions (for one function with its port looped back, give it once)"
                        )));
                    }
                    Ok(Selection::VfioPair(a, b))
                }
                None => Ok(Selection::Vfio(normalize_bdf(d)?)),
            },
        }
    }

    /// The `hca_id` this device is shown under: its PCI address (side A's
    /// of a pair), or `emu`.
    pub fn hca_id(&self) -> &str {
        match self {
            Selection::Emulator => "emu",
            Selection::Vfio(bdf) | Selection::VfioPair(bdf, _) => bdf,
        }
    }

    /// The error for a pair given to a command that runs on one device.
    fn one_device_only(&self) -> ToolError {
        ToolError::Usage(format!(
            "-d {}: this command runs on one device; two (a,b) are for the pair commands perf and pingpong",
            match self {
                Selection::VfioPair(a, b) => format!("{a},{b}"),
                other => other.hca_id().to_string(),
            }
        ))
    }
}

/// Options every device-opening command shares.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Record the driver's command traffic in Linux's hexdump form here.
    pub dump_commands: Option<PathBuf>,
    /// The sysfs root (`/sys`).
    pub sysfs_root: Option<PathBuf>,
    /// Whether the emulator was asked for by name (`-d emu`) rather than
    /// chosen because no device was given (for the notice on stderr).
    pub emulator_asked: bool,
    /// Interrupts (where the platform has them) or polling (`--poll`).
    pub wait_mode: WaitMode,
    /// On the emulator: cable port 1 of this process's emulated HCA to
    /// this socket wire (`--wire`, `HCA_EMU_WIRE`).
    pub wire: Option<WireSpec>,
    /// On the emulator: capture port 1's frames into this pcap file
    /// (`--pcap`).
    pub pcap: Option<PathBuf>,
}

/// The port the emulator's wire and capture are on.
pub const WIRE_PORT: u8 = 1;

impl OpenOptions {
    /// The error for `--wire`/`--pcap` given for a real device.
    fn emulator_only(&self) -> Result<()> {
        if self.wire.is_some() {
            return Err(ToolError::Usage(
                "--wire (or HCA_EMU_WIRE) cables the emulated HCA: it does not apply to a device given with -d".into(),
            ));
        }
        if self.pcap.is_some() {
            return Err(ToolError::Usage(
                "--pcap captures the emulated HCA's wire: it does not apply to a device given with -d".into(),
            ));
        }
        Ok(())
    }

    /// The error for `--wire` in a mode that runs both sides in this
    /// process.
    fn no_wire_for_pair(&self) -> Result<()> {
        match &self.wire {
            Some(w) => Err(ToolError::Usage(format!(
                "--wire {w} (or HCA_EMU_WIRE): both sides run in this process, cabled to each other; the wire is for one side per process (--server, or a server host)"
            ))),
            None => Ok(()),
        }
    }
}

/// What a command knows about the device it runs on.
#[derive(Clone, Debug)]
pub struct DeviceDesc {
    /// The selection.
    pub selection: Selection,
    /// The platform's description (`vfio 0000:02:00.0 (15b3:1013)`,
    /// `emulated ConnectX-4`).
    pub describe: String,
}

/// A command that runs on a brought-up device.
pub trait HcaTask {
    /// What it returns.
    type Output;
    /// Runs on `hca`.
    fn run<P: Platform>(self, hca: &Hca<P>, dev: &DeviceDesc) -> Result<Self::Output>;
}

/// A command that runs on the platform alone (BAR0 registers), without
/// bringing the device up.
pub trait PlatformTask {
    /// What it returns.
    type Output;
    /// Runs on `platform`.
    fn run<P: Platform>(self, platform: &P, dev: &DeviceDesc) -> Result<Self::Output>;
}

/// A `fmt::Write` into a buffered file that keeps the first I/O error.
struct FileSink {
    w: BufWriter<File>,
    error: Option<std::io::Error>,
}

impl std::fmt::Write for FileSink {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.error.is_some() {
            return Err(std::fmt::Error);
        }
        self.w.write_all(s.as_bytes()).map_err(|e| {
            self.error = Some(e);
            std::fmt::Error
        })
    }
}

/// The tool's command recorder: counts commands for the progress line and
/// writes the hexdump of each into the `--dump-commands` file.
pub struct ToolRecorder {
    commands: AtomicU32,
    last_opcode: AtomicU16,
    dump: Option<(PathBuf, DumpRecorder<FileSink>)>,
    /// The progress line to update, if any.
    status: Mutex<Option<progress::Status>>,
}

impl ToolRecorder {
    /// A recorder that lives for the rest of the process (the driver wants
    /// a `'static` recorder; the tool makes one per run).
    fn leak(dump_to: Option<&Path>) -> Result<&'static ToolRecorder> {
        let dump = match dump_to {
            Some(path) => {
                let f = File::create(path).map_err(|source| ToolError::File {
                    path: path.to_path_buf(),
                    source,
                })?;
                let sink = FileSink {
                    w: BufWriter::new(f),
                    error: None,
                };
                Some((path.to_path_buf(), DumpRecorder::new(sink)))
            }
            None => None,
        };
        Ok(Box::leak(Box::new(ToolRecorder {
            commands: AtomicU32::new(0),
            last_opcode: AtomicU16::new(0),
            dump,
            status: Mutex::new(None),
        })))
    }

    fn set_status(&self, s: Option<progress::Status>) {
        if let Ok(mut g) = self.status.lock() {
            *g = s;
        }
    }

    /// Flushes the dump file; reports the first write error.
    fn finish(&self) -> Result<()> {
        let Some((path, rec)) = &self.dump else {
            return Ok(());
        };
        rec.with(|sink| {
            let r = match sink.error.take() {
                Some(e) => Err(e),
                None => sink.w.flush(),
            };
            r.map_err(|source| ToolError::File {
                path: path.clone(),
                source,
            })
        })
    }
}

impl CommandRecorder for ToolRecorder {
    fn record(&self, exchange: &Exchange<'_>) {
        let n = self.commands.fetch_add(1, Ordering::Relaxed) + 1;
        self.last_opcode.store(exchange.opcode.0, Ordering::Relaxed);
        if let Some((_, rec)) = &self.dump {
            rec.record(exchange);
        }
        if let Ok(g) = self.status.lock() {
            if let Some(s) = g.as_ref() {
                let mut text = String::new();
                let op = Opcode(self.last_opcode.load(Ordering::Relaxed));
                let _ = write!(text, "{n} commands, last {op}");
                progress::set(s, text);
            }
        }
    }
}

/// The notice that the emulator is in use, worded by what was asked:
/// `-d emu`, or no `-d` at all.
pub fn emulator_notice(asked: bool, what: &str) -> String {
    if asked {
        format!("hca: -d emu: using {what}")
    } else {
        format!("hca: no device given (-d <bdf>): using {what}")
    }
}

/// A seed for an emulated HCA on a wire: from the wire's local end, so
/// that the two processes on one wire get different MAC addresses and
/// GIDs.
fn wire_seed(w: &WireSpec) -> u64 {
    // FNV-1a.
    w.local_name()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
        ^ EmuConfig::default().seed
}

/// Builds the emulated ConnectX-4 and says so on stderr; with a wire, on
/// the real-time clock with port 1 cabled to it; with `--pcap`, port 1
/// captured.
fn emulator(opts: &OpenOptions) -> Result<(EmuHca, Option<Capture>)> {
    let what = "the emulated ConnectX-4 (hca-emu, firmware 14.12.1220)";
    let emu = match &opts.wire {
        None => {
            eprintln!("{}", emulator_notice(opts.emulator_asked, what));
            EmuHca::new(EmuConfig::default())
        }
        Some(w) => {
            eprintln!(
                "{}",
                emulator_notice(
                    opts.emulator_asked,
                    &format!("{what}, port {WIRE_PORT} on the wire {w}")
                )
            );
            let emu = EmuHca::new(EmuConfig {
                clock: Clock::Real,
                seed: wire_seed(w),
                ..EmuConfig::default()
            });
            emu.cable_to(WIRE_PORT, w)
                .map_err(|e| ToolError::Usage(format!("--wire {w}: {e}")))?;
            emu
        }
    };
    let cap = start_capture(&emu, opts)?;
    Ok((emu, cap))
}

/// Starts `--pcap` on port 1 of `emu`, if asked.
fn start_capture(emu: &EmuHca, opts: &OpenOptions) -> Result<Option<Capture>> {
    opts.pcap
        .as_deref()
        .map(|p| Capture::start(emu, WIRE_PORT, p))
        .transpose()
}

/// Ends a capture started on `emu` (if any), keeping the command's error
/// first.
pub fn end_capture<T>(cap: Option<Capture>, emu: &EmuHca, r: Result<T>) -> Result<T> {
    let done = cap.map(|c| c.finish(emu)).transpose();
    let out = r?;
    done?;
    Ok(out)
}

fn vfio_options(opts: &OpenOptions) -> VfioOptions {
    let o = VfioOptions::default();
    match &opts.sysfs_root {
        Some(root) => o.sysfs_root(root.clone()),
        None => o,
    }
}

/// Opens the selected device, brings it up, runs `task`, tears it down.
pub fn run_hca<T: HcaTask>(sel: &Selection, opts: &OpenOptions, task: T) -> Result<T::Output> {
    let recorder = ToolRecorder::leak(opts.dump_commands.as_deref())?;
    let r = match sel {
        Selection::Emulator => {
            let (emu, cap) = emulator(opts)?;
            let r = bring_up_and_run(emu.platform(), sel, recorder, opts.wait_mode, task);
            end_capture(cap, &emu, r)
        }
        Selection::Vfio(bdf) => {
            opts.emulator_only()?;
            let p = VfioPlatform::open(bdf, vfio_options(opts))?;
            bring_up_and_run(p, sel, recorder, opts.wait_mode, task)
        }
        Selection::VfioPair(..) => Err(sel.one_device_only()),
    };
    let flushed = recorder.finish();
    let out = r?;
    flushed?;
    Ok(out)
}

fn bring_up_and_run<P: Platform, T: HcaTask>(
    platform: P,
    sel: &Selection,
    recorder: &'static ToolRecorder,
    wait_mode: WaitMode,
    task: T,
) -> Result<T::Output> {
    let dev = desc_of(&platform, sel);
    let hca = open_hca(platform, &dev, Some(recorder), wait_mode)?;
    let result = task.run(&hca, &dev);
    finish(result, close_hca(hca, &dev))
}

/// A command that runs on two sides of a wire (perf and pingpong in one
/// process): side A (the client) and side B (the server).
pub trait PairTask {
    /// What it returns.
    type Output;
    /// Runs on `a` and `b` (the same HCA when the device is one real
    /// function: both sides then share it, on its ports).
    fn run<P: Platform>(self, a: &Hca<P>, b: &Hca<P>, dev: &PairDesc) -> Result<Self::Output>;
}

/// What a pair command knows about the devices it runs on.
#[derive(Clone, Debug)]
pub struct PairDesc {
    /// Side A's device.
    pub a: DeviceDesc,
    /// Whether side B is another HCA (two emulated HCAs cabled together)
    /// rather than side A's HCA again.
    pub two_hcas: bool,
    /// How the two sides reach each other, for the report.
    pub link: String,
}

/// Builds two emulated ConnectX-4s cabled port 1 to port 1 and says so on
/// stderr; with `--pcap`, side A's port 1 captured. A `--wire` is an
/// error here: both sides are in this process.
pub fn emulated_pair(opts: &OpenOptions) -> Result<(EmuHca, EmuHca, Option<Capture>)> {
    opts.no_wire_for_pair()?;
    eprintln!(
        "{}",
        emulator_notice(
            opts.emulator_asked,
            "two emulated ConnectX-4s (hca-emu, firmware 14.12.1220) cabled port 1 to port 1"
        )
    );
    let a = EmuHca::new(EmuConfig::default());
    let b = EmuHca::new(EmuConfig {
        seed: EmuConfig::default().seed ^ 0xb0b,
        ..EmuConfig::default()
    });
    hca_emu::connect(&a, 1, &b, 1)
        .map_err(|e| ToolError::Usage(format!("cabling the two emulated HCAs together: {e}")))?;
    let cap = start_capture(&a, opts)?;
    Ok((a, b, cap))
}

/// Opens both sides of a pair command: on the emulator two emulated HCAs
/// cabled together (side A records `--dump-commands`), on a PCI function
/// that one function for both sides. Brings them up, runs `task`, tears
/// them down.
pub fn run_pair<T: PairTask>(sel: &Selection, opts: &OpenOptions, task: T) -> Result<T::Output> {
    let recorder = ToolRecorder::leak(opts.dump_commands.as_deref())?;
    let r = match sel {
        Selection::Emulator => {
            let (ea, eb, cap) = emulated_pair(opts)?;
            let r = run_two(
                (ea.platform(), eb.platform()),
                sel,
                "two emulated HCAs, port 1 cabled to port 1".to_string(),
                recorder,
                opts.wait_mode,
                task,
            );
            end_capture(cap, &ea, r)
        }
        Selection::Vfio(bdf) => {
            opts.emulator_only()?;
            let p = VfioPlatform::open(bdf, vfio_options(opts))?;
            let d = desc_of(&p, sel);
            let h = open_hca(p, &d, Some(recorder), opts.wait_mode)?;
            let desc = PairDesc {
                a: d.clone(),
                two_hcas: false,
                link: format!("both sides on {} (its port(s) looped back)", d.describe),
            };
            let result = task.run(&h, &h, &desc);
            finish(result, close_hca(h, &d))
        }
        Selection::VfioPair(a, b) => {
            opts.emulator_only()?;
            let pa = VfioPlatform::open(a, vfio_options(opts))?;
            let pb = VfioPlatform::open(b, vfio_options(opts))?;
            let link = format!(
                "{a} and {b} ({} and {}), their ports cabled together",
                pa.describe(),
                pb.describe()
            );
            run_two((pa, pb), sel, link, recorder, opts.wait_mode, task)
        }
    };
    let flushed = recorder.finish();
    let out = r?;
    flushed?;
    Ok(out)
}

/// Brings up two HCAs (side A records the commands), runs a pair task on
/// them, tears both down.
fn run_two<P: Platform, T: PairTask>(
    (pa, pb): (P, P),
    sel: &Selection,
    link: String,
    recorder: &'static ToolRecorder,
    wait_mode: WaitMode,
    task: T,
) -> Result<T::Output> {
    let (da, db) = (desc_of(&pa, sel), desc_of(&pb, sel));
    let ha = open_hca(pa, &da, Some(recorder), wait_mode)?;
    let hb = match open_hca(pb, &db, None, wait_mode) {
        Ok(h) => h,
        Err(e) => {
            let _ = close_hca(ha, &da);
            return Err(e);
        }
    };
    let desc = PairDesc {
        a: da.clone(),
        two_hcas: true,
        link,
    };
    let result = task.run(&ha, &hb, &desc);
    let cb = close_hca(hb, &db);
    let ca = close_hca(ha, &da);
    finish(result, ca.and(cb))
}

/// Brings up an emulated HCA the caller built (one of a cabled pair, in a
/// thread of its own), runs `f` on it, tears it down. `dump_commands`
/// records its command traffic.
pub fn with_emulated<R>(
    emu: &EmuHca,
    dump_commands: Option<&Path>,
    wait_mode: WaitMode,
    f: impl FnOnce(&Hca<hca_emu::EmuPlatform>, &DeviceDesc) -> Result<R>,
) -> Result<R> {
    let recorder = ToolRecorder::leak(dump_commands)?;
    let p = emu.platform();
    let dev = desc_of(&p, &Selection::Emulator);
    let r = open_hca(p, &dev, Some(recorder), wait_mode).and_then(|hca| {
        let result = f(&hca, &dev);
        finish(result, close_hca(hca, &dev))
    });
    let flushed = recorder.finish();
    let out = r?;
    flushed?;
    Ok(out)
}

fn desc_of<P: Platform>(p: &P, sel: &Selection) -> DeviceDesc {
    DeviceDesc {
        selection: sel.clone(),
        describe: p.describe().to_string(),
    }
}

/// Brings a device up (with a progress line on a terminal).
fn open_hca<P: Platform>(
    platform: P,
    dev: &DeviceDesc,
    recorder: Option<&'static ToolRecorder>,
    wait_mode: WaitMode,
) -> Result<Hca<P>> {
    let cfg = Config {
        wait_mode,
        recorder: recorder.map(|r| r as &'static dyn CommandRecorder),
        ..Config::default()
    };
    let progress = Progress::start(&format!("bringing up {}", dev.describe));
    if let Some(r) = recorder {
        r.set_status(Some(progress.status()));
    }
    let r = Hca::open(platform, cfg);
    if let Some(r) = recorder {
        r.set_status(None);
    }
    drop(progress);
    let hca = r.map_err(|f| ToolError::BringUp {
        device: dev.describe.clone(),
        source: f.error,
    })?;
    log::info!("{}: {}", dev.describe, hca.bring_up_report());
    Ok(hca)
}

/// Tears a device down.
fn close_hca<P: Platform>(hca: Hca<P>, dev: &DeviceDesc) -> Result<()> {
    log::info!("{}: waits: {}", dev.describe, hca.interrupt_stats());
    hca.close().map(drop).map_err(|f| ToolError::Teardown {
        device: dev.describe.clone(),
        source: f.error,
    })
}

/// The command's result, unless it succeeded and the teardown failed.
fn finish<T>(result: Result<T>, closed: Result<()>) -> Result<T> {
    match (result, closed) {
        (Ok(out), Ok(())) => Ok(out),
        (Ok(_), Err(e)) => Err(e),
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(t)) => {
            log::error!("{t}");
            Err(e)
        }
    }
}

/// Opens the selected device's platform only (no bring-up, no DMA) and
/// runs `task` on it.
pub fn run_platform<T: PlatformTask>(
    sel: &Selection,
    opts: &OpenOptions,
    task: T,
) -> Result<T::Output> {
    match sel {
        Selection::Emulator => {
            let (emu, cap) = emulator(opts)?;
            let p = emu.platform();
            let dev = DeviceDesc {
                selection: sel.clone(),
                describe: p.describe().to_string(),
            };
            let r = task.run(&p, &dev);
            end_capture(cap, &emu, r)
        }
        Selection::Vfio(bdf) => {
            opts.emulator_only()?;
            // Memory space on, bus master off: only registers are read.
            let o = vfio_options(opts).bus_master(false).planned_dma_bytes(0);
            let p = VfioPlatform::open(bdf, o)?;
            p.set_command(platform::pci::COMMAND_MEMORY, 0)?;
            let dev = DeviceDesc {
                selection: sel.clone(),
                describe: p.describe().to_string(),
            };
            task.run(&p, &dev)
        }
        Selection::VfioPair(..) => Err(sel.one_device_only()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections() {
        assert_eq!(Selection::parse(None).unwrap(), Selection::Emulator);
        assert_eq!(Selection::parse(Some("EMU")).unwrap(), Selection::Emulator);
        assert_eq!(
            Selection::parse(Some("02:00.0")).unwrap(),
            Selection::Vfio("0000:02:00.0".into())
        );
        let e = Selection::parse(Some("nonsense")).unwrap_err();
        assert!(e.to_string().contains("not a PCI address"), "{e}");
        // Two functions cabled together.
        let pair = Selection::parse(Some("02:00.0, 0000:03:00.1")).unwrap();
        assert_eq!(
            pair,
            Selection::VfioPair("0000:02:00.0".into(), "0000:03:00.1".into())
        );
        assert_eq!(pair.hca_id(), "0000:02:00.0");
        let e = Selection::parse(Some("02:00.0,0000:02:00.0")).unwrap_err();
        assert!(e.to_string().contains("must be two functions"), "{e}");
        let e = Selection::parse(Some("02:00.0,bogus")).unwrap_err();
        assert!(e.to_string().contains("not a PCI address"), "{e}");
        let e = run_hca(&pair, &OpenOptions::default(), Nothing).unwrap_err();
        assert!(e.to_string().contains("runs on one device"), "{e}");
    }

    struct Nothing;
    impl HcaTask for Nothing {
        type Output = ();
        fn run<P: Platform>(self, _: &Hca<P>, _: &DeviceDesc) -> Result<()> {
            Ok(())
        }
    }
}
