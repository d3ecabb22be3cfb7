//! Choosing and opening a device, shared by every command that needs one
//! (info, caps, health, pingpong, perf).
//!
//! `-d <bdf>` opens a PCI function bound to vfio-pci through
//! `platform::vfio`; no `-d` (or `-d emu`) builds the emulated ConnectX-4 of
//! `hca-emu` and says so on stderr. Either way the device is one concrete
//! type, [`ToolHca`] (an `Hca` over [`ToolPlatform`]), which a command
//! holds in locals and structs like any other value:
//!
//! - [`Device::open`] brings the selected device up and returns it;
//!   [`Device::finish`] tears it down and reports (the command's error
//!   first, then the teardown's, the capture's and the command dump's).
//!   It owns what the run needs besides the HCA: the emulated HCA, the
//!   `--dump-commands` recorder (progress on a terminal too) and the
//!   `--pcap` capture.
//! - [`DevicePair::open`] opens both sides of a pair command (two emulated
//!   HCAs cabled together, one real function for both sides, or two
//!   functions `-d a,b`).
//! - [`BareDevice::open`] opens the platform alone, without bring-up
//!   (registers only).
//! - [`Device::open_emulated`] brings up one HCA of an [`emulated_pair`] on
//!   a thread of its own (`--tcp-loopback`).
//!
//! Dropped without `finish` (an early return), each tears down just the
//! same and logs what failed.
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
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use firmware_cmds::Opcode;
use hca_driver::{CommandRecorder, Config, DumpRecorder, Exchange, Hca, WaitMode};
use hca_emu::{Clock, EmuConfig, EmuHca, EmuPlatform, Personality, WireSpec};
use platform::vfio::{VfioOptions, VfioPlatform, normalize_bdf};
use platform::{Either, Platform};

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
    /// On the emulator: the model it plays (`--emu-model`; none: the
    /// recorded ConnectX-4).
    pub emu_model: Option<Personality>,
    /// On the emulator: run on the host's clock (as with a wire) rather
    /// than the virtual one, for a command whose device-timed behaviour
    /// (packet pacing) the host's clock measures.
    pub real_time: bool,
}

/// `--emu-model`: `cx4`, `cx5` or `cx6dx`.
pub fn parse_emu_model(s: &str) -> Result<Personality> {
    match s.to_ascii_lowercase().as_str() {
        "cx4" => Ok(Personality::ConnectX4),
        "cx5" => Ok(Personality::ConnectX5),
        "cx6dx" => Ok(Personality::ConnectX6Dx),
        _ => Err(ToolError::Usage(format!(
            "--emu-model {s}: one of cx4 (the recorded ConnectX-4), cx5, cx6dx"
        ))),
    }
}

/// How the notice on stderr names an emulated model: its name (with `s`
/// appended for two) and its details.
fn model_name(p: Personality, plural: &str) -> String {
    let name = match p {
        Personality::ConnectX4 => "ConnectX-4",
        Personality::ConnectX5 => "ConnectX-5",
        Personality::ConnectX6Dx => "ConnectX-6 Dx",
    };
    let (a, b, c) = p.fw_version();
    format!("{name}{plural} (hca-emu, firmware {a}.{b}.{c})")
}

/// The port the emulator's wire and capture are on.
pub const WIRE_PORT: u8 = 1;

impl OpenOptions {
    /// The error for `--wire`/`--pcap` given for a real device.
    fn emulator_only(&self) -> Result<()> {
        if self.emu_model.is_some() {
            return Err(ToolError::Usage(
                "--emu-model chooses the emulated HCA's model: it does not apply to a device given with -d".into(),
            ));
        }
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

    /// The emulator's configuration these options ask for: the model
    /// (`--emu-model`, the recorded ConnectX-4 by default), on the host's
    /// clock when [`real_time`](Self::real_time), else the virtual one.
    fn emu_config(&self) -> EmuConfig {
        EmuConfig {
            personality: self.emu_model.unwrap_or(Personality::ConnectX4),
            clock: if self.real_time {
                Clock::Real
            } else {
                Clock::Virtual
            },
            ..EmuConfig::default()
        }
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

/// The platform every command runs on: the emulated ConnectX of `hca-emu`
/// (`Left`) or a PCI function under VFIO (`Right`), chosen at run time and
/// held in this one concrete type, so that an opened device is an ordinary
/// value ([`ToolHca`]) a command keeps in locals and structs.
///
/// Every platform and register call, each doorbell included, pays one
/// well-predicted branch on the variant ([`platform::Either`]); the
/// data-path benchmarks are not in the tool and use the platform itself.
pub type ToolPlatform = Either<EmuPlatform, VfioPlatform>;

/// A brought-up device of the tool.
pub type ToolHca = Hca<ToolPlatform>;

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
    let model = opts.emu_model.unwrap_or(Personality::ConnectX4);
    let what = format!("the emulated {}", model_name(model, ""));
    let emu = match &opts.wire {
        None => {
            eprintln!("{}", emulator_notice(opts.emulator_asked, &what));
            EmuHca::new(opts.emu_config())
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
                ..opts.emu_config()
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

/// What a device keeps besides its HCA(s): the emulated HCA(s) this
/// process built for it, the `--pcap` capture of side A's port 1 and the
/// `--dump-commands` recorder. Closed after the HCA(s): the capture ends
/// and the dump is flushed, by [`close`](Self::close) or on drop.
struct Backing {
    /// The emulated HCA (side A's of a pair) the capture is on.
    emu: Option<EmuHca>,
    /// Side B's emulated HCA of a pair.
    emu_b: Option<EmuHca>,
    cap: Option<Capture>,
    recorder: Option<&'static ToolRecorder>,
}

impl Backing {
    /// Nothing yet but the recorder, if any.
    fn new(recorder: Option<&'static ToolRecorder>) -> Self {
        Backing {
            emu: None,
            emu_b: None,
            cap: None,
            recorder,
        }
    }

    /// Ends the capture, then flushes the recorder; the capture's error
    /// first. A second call does nothing.
    fn close(&mut self) -> Result<()> {
        let done = match (self.cap.take(), &self.emu) {
            (Some(c), Some(emu)) => c.finish(emu).map(drop),
            _ => Ok(()),
        };
        let flushed = self.recorder.take().map_or(Ok(()), |r| r.finish());
        done?;
        flushed
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("{e}");
        }
    }
}

/// The result of a command, then the teardown's and the backing's errors,
/// in that order (a teardown error after a failed command is logged).
fn conclude<T>(result: Result<T>, closed: Result<()>, backing: &mut Backing) -> Result<T> {
    let r = finish(result, closed);
    let after = backing.close();
    let out = r?;
    after?;
    Ok(out)
}

/// A brought-up device (`-d <bdf>` or the emulator), held by a command
/// for as long as it needs it.
///
/// [`finish`](Self::finish) tears it down and reports: the command's
/// error first, then the teardown's, the `--pcap` capture's and the
/// `--dump-commands` file's. Dropped without `finish` (an early return), it
/// tears down just the same and logs what failed.
pub struct Device {
    // Declared first: dropped (torn down) before what backs it. Shared:
    // verbs objects hold handles of it (and an `Hca` is tens of kilobytes).
    hca: Arc<ToolHca>,
    desc: DeviceDesc,
    backing: Backing,
}

impl Device {
    /// Opens the selected device and brings it up (a progress line on a
    /// terminal; `--dump-commands` records from here). A pair (`-d a,b`)
    /// is an error: the command runs on one device.
    pub fn open(sel: &Selection, opts: &OpenOptions) -> Result<Device> {
        let recorder = ToolRecorder::leak(opts.dump_commands.as_deref())?;
        let mut backing = Backing::new(Some(recorder));
        let platform = match sel {
            Selection::Emulator => {
                let (emu, cap) = emulator(opts)?;
                let p = emu.platform();
                backing.emu = Some(emu);
                backing.cap = cap;
                Either::Left(p)
            }
            Selection::Vfio(bdf) => {
                opts.emulator_only()?;
                Either::Right(VfioPlatform::open(bdf, vfio_options(opts))?)
            }
            Selection::VfioPair(..) => return Err(sel.one_device_only()),
        };
        Self::bring_up(platform, sel, recorder, opts.wait_mode, backing)
    }

    /// Brings up an emulated HCA the caller built (one of a cabled pair,
    /// on a thread of its own: `--tcp-loopback`), which must outlive the
    /// device. `dump_commands` records its command traffic.
    pub fn open_emulated(
        emu: &EmuHca,
        dump_commands: Option<&Path>,
        wait_mode: WaitMode,
    ) -> Result<Device> {
        let recorder = ToolRecorder::leak(dump_commands)?;
        let backing = Backing::new(Some(recorder));
        Self::bring_up(
            Either::Left(emu.platform()),
            &Selection::Emulator,
            recorder,
            wait_mode,
            backing,
        )
    }

    fn bring_up(
        platform: ToolPlatform,
        sel: &Selection,
        recorder: &'static ToolRecorder,
        wait_mode: WaitMode,
        mut backing: Backing,
    ) -> Result<Device> {
        let desc = desc_of(&platform, sel);
        match open_hca(platform, &desc, Some(recorder), wait_mode) {
            Ok(hca) => Ok(Device { hca, desc, backing }),
            Err(e) => {
                // The capture and the dump of a failed bring-up are kept;
                // the bring-up's error is the one reported.
                let _ = backing.close();
                Err(e)
            }
        }
    }

    /// The brought-up HCA.
    pub fn hca(&self) -> &Arc<ToolHca> {
        &self.hca
    }

    /// What the command knows about the device.
    pub fn desc(&self) -> &DeviceDesc {
        &self.desc
    }

    /// The emulated HCA this process built for the device, if it is one
    /// (its counters are the device's own view).
    pub fn emulator(&self) -> Option<&EmuHca> {
        self.backing.emu.as_ref()
    }

    /// Tears the device down and returns `result`, unless the command
    /// succeeded and the teardown, the capture or the command dump failed.
    pub fn finish<T>(self, result: Result<T>) -> Result<T> {
        let Device {
            hca,
            desc,
            mut backing,
        } = self;
        let closed = close_hca(hca, &desc);
        conclude(result, closed, &mut backing)
    }
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
    let model = opts.emu_model.unwrap_or(Personality::ConnectX4);
    eprintln!(
        "{}",
        emulator_notice(
            opts.emulator_asked,
            &format!(
                "two emulated {} cabled port 1 to port 1",
                model_name(model, "s")
            )
        )
    );
    let cfg = opts.emu_config();
    let a = EmuHca::new(cfg.clone());
    let b = EmuHca::new(EmuConfig {
        seed: cfg.seed ^ 0xb0b,
        ..cfg
    });
    hca_emu::connect(&a, 1, &b, 1)
        .map_err(|e| ToolError::Usage(format!("cabling the two emulated HCAs together: {e}")))?;
    let cap = start_capture(&a, opts)?;
    Ok((a, b, cap))
}

/// The two sides of a pair command (perf and pingpong in one process),
/// brought up: on the emulator two emulated HCAs cabled together (side A
/// records `--dump-commands`), on a PCI function that one function for
/// both sides, on two functions (`-d a,b`) one each.
///
/// [`finish`](Self::finish) tears both down (B, then A) and reports as
/// [`Device::finish`]; dropped without it, it tears them down and logs
/// what failed.
pub struct DevicePair {
    // Declared first: side B is torn down first, then side A, then what
    // backs them.
    b: Option<(Arc<ToolHca>, DeviceDesc)>,
    a: Arc<ToolHca>,
    desc: PairDesc,
    backing: Backing,
}

impl DevicePair {
    /// Opens and brings up both sides of the selected device.
    pub fn open(sel: &Selection, opts: &OpenOptions) -> Result<DevicePair> {
        let recorder = ToolRecorder::leak(opts.dump_commands.as_deref())?;
        let mut backing = Backing::new(Some(recorder));
        match sel {
            Selection::Emulator => {
                let (ea, eb, cap) = emulated_pair(opts)?;
                let platforms = (Either::Left(ea.platform()), Either::Left(eb.platform()));
                backing.emu = Some(ea);
                backing.emu_b = Some(eb);
                backing.cap = cap;
                Self::two(
                    platforms,
                    sel,
                    "two emulated HCAs, port 1 cabled to port 1".to_string(),
                    recorder,
                    opts.wait_mode,
                    backing,
                )
            }
            Selection::Vfio(bdf) => {
                opts.emulator_only()?;
                let p = Either::Right(VfioPlatform::open(bdf, vfio_options(opts))?);
                let d = desc_of(&p, sel);
                let h = match open_hca(p, &d, Some(recorder), opts.wait_mode) {
                    Ok(h) => h,
                    Err(e) => {
                        let _ = backing.close();
                        return Err(e);
                    }
                };
                let desc = PairDesc {
                    a: d.clone(),
                    two_hcas: false,
                    link: format!("both sides on {} (its port(s) looped back)", d.describe),
                };
                Ok(DevicePair {
                    b: None,
                    a: h,
                    desc,
                    backing,
                })
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
                Self::two(
                    (Either::Right(pa), Either::Right(pb)),
                    sel,
                    link,
                    recorder,
                    opts.wait_mode,
                    backing,
                )
            }
        }
    }

    /// Brings up two HCAs (side A records the commands).
    fn two(
        (pa, pb): (ToolPlatform, ToolPlatform),
        sel: &Selection,
        link: String,
        recorder: &'static ToolRecorder,
        wait_mode: WaitMode,
        mut backing: Backing,
    ) -> Result<DevicePair> {
        let (da, db) = (desc_of(&pa, sel), desc_of(&pb, sel));
        let ha = match open_hca(pa, &da, Some(recorder), wait_mode) {
            Ok(h) => h,
            Err(e) => {
                let _ = backing.close();
                return Err(e);
            }
        };
        let hb = match open_hca(pb, &db, None, wait_mode) {
            Ok(h) => h,
            Err(e) => {
                let _ = close_hca(ha, &da);
                let _ = backing.close();
                return Err(e);
            }
        };
        let desc = PairDesc {
            a: da,
            two_hcas: true,
            link,
        };
        Ok(DevicePair {
            b: Some((hb, db)),
            a: ha,
            desc,
            backing,
        })
    }

    /// Side A's HCA (the client's).
    pub fn a(&self) -> &Arc<ToolHca> {
        &self.a
    }

    /// Side B's HCA (the server's): side A's again when the device is one
    /// real function (both sides then share it, on its ports).
    pub fn b(&self) -> &Arc<ToolHca> {
        match &self.b {
            Some((h, _)) => h,
            None => &self.a,
        }
    }

    /// What the command knows about the devices.
    pub fn desc(&self) -> &PairDesc {
        &self.desc
    }

    /// Tears both sides down and returns `result`, unless the command
    /// succeeded and a teardown (side A's error first), the capture or the
    /// command dump failed.
    pub fn finish<T>(self, result: Result<T>) -> Result<T> {
        let DevicePair {
            b,
            a,
            desc,
            mut backing,
        } = self;
        let cb = b.map_or(Ok(()), |(hb, db)| close_hca(hb, &db));
        let ca = close_hca(a, &desc.a);
        conclude(result, ca.and(cb), &mut backing)
    }
}

fn desc_of<P: Platform>(p: &P, sel: &Selection) -> DeviceDesc {
    DeviceDesc {
        selection: sel.clone(),
        describe: p.describe().to_string(),
    }
}

/// Brings a device up (with a progress line on a terminal); shared at once (verbs objects hold handles of it).
fn open_hca<P: Platform>(
    platform: P,
    dev: &DeviceDesc,
    recorder: Option<&'static ToolRecorder>,
    wait_mode: WaitMode,
) -> Result<Arc<Hca<P>>> {
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
    Ok(Arc::new(hca))
}

/// Tears a device down.
fn close_hca<P: Platform>(hca: Arc<Hca<P>>, dev: &DeviceDesc) -> Result<()> {
    // The last handle: every verbs object of the command is gone.
    let hca = Arc::try_unwrap(hca).map_err(|h| ToolError::Teardown {
        device: dev.describe.clone(),
        source: hca_driver::Error::InUse {
            what: "the HCA",
            users: u32::try_from(Arc::strong_count(&h) - 1).unwrap_or(u32::MAX),
        },
    })?;
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

/// The selected device's platform alone, opened without bringing the
/// device up and without DMA (registers only: `hca health`).
pub struct BareDevice {
    // Declared first: closed before the emulator behind it.
    platform: ToolPlatform,
    desc: DeviceDesc,
    backing: Backing,
}

impl BareDevice {
    /// Opens the selected device's platform: on a PCI function, memory
    /// space on and bus mastering off.
    pub fn open(sel: &Selection, opts: &OpenOptions) -> Result<BareDevice> {
        match sel {
            Selection::Emulator => {
                let (emu, cap) = emulator(opts)?;
                let platform = Either::Left(emu.platform());
                let desc = desc_of(&platform, sel);
                Ok(BareDevice {
                    platform,
                    desc,
                    backing: Backing {
                        emu: Some(emu),
                        emu_b: None,
                        cap,
                        recorder: None,
                    },
                })
            }
            Selection::Vfio(bdf) => {
                opts.emulator_only()?;
                // Memory space on, bus master off: only registers are read.
                let o = vfio_options(opts).bus_master(false).planned_dma_bytes(0);
                let p = VfioPlatform::open(bdf, o)?;
                p.set_command(platform::pci::COMMAND_MEMORY, 0)?;
                let platform = Either::Right(p);
                let desc = desc_of(&platform, sel);
                Ok(BareDevice {
                    platform,
                    desc,
                    backing: Backing::new(None),
                })
            }
            Selection::VfioPair(..) => Err(sel.one_device_only()),
        }
    }

    /// The platform.
    pub fn platform(&self) -> &ToolPlatform {
        &self.platform
    }

    /// What the command knows about the device.
    pub fn desc(&self) -> &DeviceDesc {
        &self.desc
    }

    /// Closes the platform and returns `result`, unless the command
    /// succeeded and the capture failed.
    pub fn finish<T>(self, result: Result<T>) -> Result<T> {
        let BareDevice {
            platform,
            desc: _,
            mut backing,
        } = self;
        drop(platform);
        conclude(result, Ok(()), &mut backing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hca_driver::verbs::Context;
    use platform::Mmio;

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
        let e = Device::open(&pair, &OpenOptions::default())
            .err()
            .expect("a pair opened as one device");
        assert!(e.to_string().contains("runs on one device"), "{e}");
        let e = BareDevice::open(&pair, &OpenOptions::default())
            .err()
            .expect("a pair opened as one platform");
        assert!(e.to_string().contains("runs on one device"), "{e}");
    }

    /// A `--dump-commands` file of this test process.
    fn dump_file(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hca-device-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join("commands.trace")
    }

    fn opcodes(dump: &Path) -> Vec<Opcode> {
        crate::cmd::trace::load(dump)
            .unwrap()
            .iter()
            .map(|c| c.opcode)
            .collect()
    }

    fn dumping_to(dump: &Path) -> OpenOptions {
        OpenOptions {
            dump_commands: Some(dump.to_path_buf()),
            emulator_asked: true,
            ..OpenOptions::default()
        }
    }

    #[test]
    fn a_device_is_held_as_a_value_and_reports_on_finish() {
        let dump = dump_file("finish");
        // An opened device kept in a struct, like any other value.
        struct Held {
            dev: Device,
        }
        let held = Held {
            dev: Device::open(&Selection::Emulator, &dumping_to(&dump)).unwrap(),
        };
        assert_eq!(held.dev.desc().selection, Selection::Emulator);
        assert!(held.dev.hca().platform().left().is_some());
        assert!(Context::open(held.dev.hca()).is_ok());
        // The command's error is the one reported; the device is torn down
        // and the dump flushed all the same.
        let e = held
            .dev
            .finish::<()>(Err(ToolError::Usage("the command failed".into())))
            .unwrap_err();
        assert_eq!(e.to_string(), "the command failed");
        let ops = opcodes(&dump);
        assert_eq!(ops.first(), Some(&Opcode::ENABLE_HCA));
        assert_eq!(ops.last(), Some(&Opcode::DISABLE_HCA));
    }

    #[test]
    fn a_device_dropped_without_finish_is_torn_down_and_its_dump_flushed() {
        let dump = dump_file("drop");
        let dev = Device::open(&Selection::Emulator, &dumping_to(&dump)).unwrap();
        drop(dev);
        let ops = opcodes(&dump);
        assert_eq!(ops.first(), Some(&Opcode::ENABLE_HCA));
        assert_eq!(ops.last(), Some(&Opcode::DISABLE_HCA));
    }

    #[test]
    fn a_pair_on_the_emulator_is_two_hcas_cabled_together() {
        let pair = DevicePair::open(&Selection::Emulator, &OpenOptions::default()).unwrap();
        assert!(pair.desc().two_hcas);
        assert!(!std::ptr::eq(pair.a(), pair.b()));
        assert_eq!(pair.desc().a.selection, Selection::Emulator);
        assert_eq!(pair.finish(Ok(7)).unwrap(), 7);
        // A wire is for one side per process.
        let wired = OpenOptions {
            wire: Some("udp:127.0.0.1:0,127.0.0.1:9".parse().unwrap()),
            ..OpenOptions::default()
        };
        let e = DevicePair::open(&Selection::Emulator, &wired)
            .err()
            .expect("a pair opened with a wire");
        assert!(
            e.to_string().contains("both sides run in this process"),
            "{e}"
        );
    }

    #[test]
    fn a_bare_device_reads_registers_without_bring_up() {
        let dev = BareDevice::open(&Selection::Emulator, &OpenOptions::default()).unwrap();
        let bar = dev.platform().map_bar(0).unwrap();
        // The initialization segment's firmware revision: 14.12.1220.
        assert_eq!(bar.read32(0).get() & 0xffff, 14);
        assert_eq!(dev.finish(Ok(())).unwrap(), ());
    }
}
