//! `hca`: the command-line tool of the mlx5 driver.
//!
//! ```text
//! hca list                      mlx5 PCI functions, driver binding, IOMMU group
//! hca bind <bdf> / unbind <bdf> move a function to or from vfio-pci, with advice
//! hca info [-v]                 what ibv_devinfo [-v] shows
//! hca caps [--type T] [--max]   every capability by PRM name
//! hca health                    health buffer, health counter, syndrome
//! hca trace <file>              decode a Linux mlx5_core command dump
//! hca pingpong rc|uc|ud [host]  ibv_rc/uc/ud_pingpong
//! hca perf <test> [host]        perftest: write-bw write-lat read-bw read-lat
//!                               send-bw send-lat atomic-bw atomic-lat raw-bw
//! hca capture [selectors] -w F  frames through a raw packet QP into pcap
//! ```
//!
//! `-d <bdf>` runs on a PCI function bound to vfio-pci; without it (or with
//! `-d emu`) on the built-in emulated ConnectX-4 (pingpong and perf: two of
//! them, cabled port 1 to port 1). `--json` prints data as JSON.
//! `--dump-commands <file>` records the driver's command traffic in the
//! hexdump form `hca trace` reads. Errors are one line on stderr and a
//! non-zero exit code.
//!
//! On the emulator, `--wire udp:LOCAL,PEER` or `--wire unix:LOCAL,PEER`
//! (or the environment variable `HCA_EMU_WIRE`) cables port 1 of the
//! emulated HCA to a datagram socket, one Ethernet frame per datagram, as
//! QEMU's `-netdev dgram`; `--pcap FILE` writes every frame of port 1
//! into a pcap file.
//!
//! pingpong and perf run both sides in this process by default; `--server`
//! (or `-p PORT`) and a server host run them as a server and a client that
//! meet over TCP (on the emulator: two `hca` processes, each with
//! `--wire`, the two ends swapped); `--tcp-loopback` runs a server and a
//! client on two threads, each with its own emulated HCA.
//!
//! Layout of the crate: [`device`] (device selection, bring-up, teardown,
//! the command recorder, progress), [`output`] (tables, JSON), [`decode`]
//! (any PRM layout as named fields), [`error`] (the one error type),
//! [`rdma`] (one side of a data-path test: resources, addresses, QP
//! connection, polling pace), [`peer`] (where the sides run, TCP, the
//! control channel), [`cmd`] (one module per subcommand).

#![forbid(unsafe_code)]

mod capture;
mod cmd;
mod decode;
mod device;
mod error;
mod output;
mod peer;
mod progress;
mod raw;
mod rdma;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::device::{OpenOptions, Selection};
use crate::error::{Result, ToolError};
use hca_driver::WaitMode;

/// The mlx5 driver's tool: devices, bring-up information, capabilities,
/// health and command traces, on real ConnectX cards under VFIO or on the
/// built-in emulated ConnectX-4.
#[derive(Debug, Parser)]
#[command(name = "hca", version, about, long_about = None)]
pub struct Cli {
    /// The device of info, caps, health, pingpong and perf (also taken
    /// after the command): a PCI address (dddd:bb:dd.f) bound to vfio-pci,
    /// two of them (bdf1,bdf2: two functions cabled together, for pingpong
    /// and perf in one process), or `emu` for the emulated ConnectX-4 (the
    /// default).
    #[arg(short = 'd', long = "device", value_name = "BDF|emu")]
    device: Option<String>,

    /// Print data as JSON (also taken after the command).
    #[arg(long)]
    json: bool,

    /// For info, caps, pingpong and perf (also taken after the command):
    /// record the driver's own command traffic into FILE, in the hexdump
    /// form of Linux mlx5_core (readable with `hca trace FILE`).
    #[arg(long, value_name = "FILE")]
    dump_commands: Option<PathBuf>,

    /// Poll the device instead of sleeping on its MSI-X interrupts
    /// (command completions, CQ events of `pingpong -e`). Without it the
    /// driver sleeps on interrupts where the platform has them (VFIO,
    /// the emulator) and polls elsewhere.
    #[arg(long, global = true)]
    poll: bool,
    /// For the commands on a device (also taken after the command): on the
    /// emulator, cable port 1 to a datagram socket wire, udp:LOCAL,PEER
    /// (e.g. udp:127.0.0.1:5000,127.0.0.1:5001) or unix:LOCAL,PEER (two
    /// socket paths), as QEMU's -netdev dgram; the other process takes the
    /// two ends swapped. Default: the environment variable HCA_EMU_WIRE.
    #[arg(long, value_name = "SPEC")]
    wire: Option<String>,

    /// For the commands on a device (also taken after the command): on the
    /// emulator, write every frame of port 1 (both directions) into FILE,
    /// a pcap capture (Ethernet, nanosecond timestamps).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,

    /// On the emulator: the ConnectX model it plays: cx4 (the recorded
    /// ConnectX-4, the default), cx5 or cx6dx (its capabilities with what
    /// later generations add, such as packet pacing).
    #[arg(long = "emu-model", global = true, value_name = "MODEL")]
    emu_model: Option<String>,

    /// The sysfs root (for tests and containers).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        hide = true,
        default_value = "/sys"
    )]
    sysfs_root: PathBuf,

    #[command(subcommand)]
    command: Command,
}

/// `-d`, for the commands that run on a device.
#[derive(Debug, Args)]
struct DeviceOpt {
    /// The device: a PCI address (dddd:bb:dd.f) bound to vfio-pci (for
    /// pingpong and perf in one process also two, bdf1,bdf2: two functions
    /// cabled together), or `emu` for the emulated ConnectX-4 (the default).
    #[arg(short = 'd', long = "device", value_name = "BDF|emu")]
    device: Option<String>,
}

/// `--wire` and `--pcap`, for the commands that run on a device.
#[derive(Debug, Args)]
struct EmuOpt {
    /// On the emulator: cable port 1 to a datagram socket wire,
    /// udp:LOCAL,PEER (e.g. udp:127.0.0.1:5000,127.0.0.1:5001) or
    /// unix:LOCAL,PEER (two socket paths), one Ethernet frame per
    /// datagram as QEMU's -netdev dgram; the other process takes the two
    /// ends swapped. Default: the environment variable HCA_EMU_WIRE.
    #[arg(long, value_name = "SPEC")]
    wire: Option<String>,

    /// On the emulator: write every frame of port 1 (both directions, as
    /// seen at the port) into FILE, a pcap capture (Ethernet, nanosecond
    /// timestamps).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
}

/// `--dump-commands`, for the commands that run firmware commands.
#[derive(Debug, Args)]
struct DumpOpt {
    /// Record the driver's own command traffic into FILE, in the hexdump
    /// form of Linux mlx5_core (readable with `hca trace FILE`).
    #[arg(long, value_name = "FILE")]
    dump_commands: Option<PathBuf>,
}

/// `--json`, for every command but trace (whose output is one object per
/// command).
#[derive(Debug, Args)]
struct JsonOpt {
    /// Print data as JSON.
    #[arg(long)]
    json: bool,
}

/// `--json` of `hca trace`.
#[derive(Debug, Args)]
struct TraceJsonOpt {
    /// Print JSON: one object per command, one per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List mlx5 PCI functions: address, ids, name, driver, IOMMU group.
    List {
        #[command(flatten)]
        out: JsonOpt,
    },
    /// Bind a PCI function to vfio-pci (checks the IOMMU group, memlock
    /// limit, huge pages and the vfio-pci module, and says what to fix).
    Bind {
        #[command(flatten)]
        args: cmd::bind::BindArgs,
        #[command(flatten)]
        out: JsonOpt,
    },
    /// Give a PCI function back from vfio-pci to its kernel driver.
    Unbind {
        #[command(flatten)]
        args: cmd::bind::UnbindArgs,
        #[command(flatten)]
        out: JsonOpt,
    },
    /// Device and port attributes, laid out like ibv_devinfo.
    Info {
        #[command(flatten)]
        args: cmd::info::InfoArgs,
        #[command(flatten)]
        dev: DeviceOpt,
        #[command(flatten)]
        emu: EmuOpt,
        #[command(flatten)]
        dump: DumpOpt,
        #[command(flatten)]
        out: JsonOpt,
    },
    /// Every capability of the device by PRM name.
    Caps {
        #[command(flatten)]
        args: cmd::caps::CapsArgs,
        #[command(flatten)]
        dev: DeviceOpt,
        #[command(flatten)]
        emu: EmuOpt,
        #[command(flatten)]
        dump: DumpOpt,
        #[command(flatten)]
        out: JsonOpt,
    },
    /// Health buffer, health counter and syndrome, read from the
    /// initialization segment without bringing the device up.
    Health {
        #[command(flatten)]
        args: cmd::health::HealthArgs,
        #[command(flatten)]
        dev: DeviceOpt,
        #[command(flatten)]
        emu: EmuOpt,
        #[command(flatten)]
        out: JsonOpt,
    },
    /// Decode a Linux mlx5_core command dump (dyndbg hexdump) command by
    /// command.
    Trace {
        #[command(flatten)]
        args: cmd::trace::TraceArgs,
        #[command(flatten)]
        out: TraceJsonOpt,
    },
    /// ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong: in this
    /// process (two QPs), or as a server or client over TCP.
    Pingpong {
        #[command(flatten)]
        args: cmd::pingpong::PingpongArgs,
        #[command(flatten)]
        dev: DeviceOpt,
        #[command(flatten)]
        emu: EmuOpt,
        #[command(flatten)]
        dump: DumpOpt,
        #[command(flatten)]
        out: JsonOpt,
    },
    /// tcpdump for a port the driver owns: a raw packet QP receives the
    /// frames a flow rule built from the selectors (none: every frame)
    /// steers to it, into a pcap file (-w) or one line each; counters on
    /// stderr.
    Capture {
        #[command(flatten)]
        args: cmd::capture::CaptureArgs,
        #[command(flatten)]
        dev: DeviceOpt,
        #[command(flatten)]
        emu: EmuOpt,
        #[command(flatten)]
        dump: DumpOpt,
    },
    /// perftest: write-bw, write-lat, read-bw, read-lat, send-bw,
    /// send-lat, atomic-bw, atomic-lat; in this process (two QPs), or as
    /// a server or client over TCP.
    Perf {
        #[command(flatten)]
        args: cmd::perf::PerfArgs,
        #[command(flatten)]
        dev: DeviceOpt,
        #[command(flatten)]
        emu: EmuOpt,
        #[command(flatten)]
        dump: DumpOpt,
        #[command(flatten)]
        out: JsonOpt,
    },
}

impl Command {
    /// The command's own `-d`, `--dump-commands` and `--json`, where it
    /// takes them.
    fn own(&self) -> (Option<&DeviceOpt>, Option<&DumpOpt>, bool) {
        match self {
            Command::List { out } | Command::Bind { out, .. } | Command::Unbind { out, .. } => {
                (None, None, out.json)
            }
            Command::Trace { out, .. } => (None, None, out.json),
            Command::Capture { dev, dump, .. } => (Some(dev), Some(dump), false),
            Command::Health { dev, out, .. } => (Some(dev), None, out.json),
            Command::Info { dev, dump, out, .. }
            | Command::Caps { dev, dump, out, .. }
            | Command::Pingpong { dev, dump, out, .. }
            | Command::Perf { dev, dump, out, .. } => (Some(dev), Some(dump), out.json),
        }
    }

    /// The command's own `--wire` and `--pcap`, where it takes them.
    fn own_emu(&self) -> Option<&EmuOpt> {
        match self {
            Command::List { .. }
            | Command::Bind { .. }
            | Command::Unbind { .. }
            | Command::Trace { .. } => None,
            Command::Health { emu, .. }
            | Command::Info { emu, .. }
            | Command::Caps { emu, .. }
            | Command::Pingpong { emu, .. }
            | Command::Capture { emu, .. }
            | Command::Perf { emu, .. } => Some(emu),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Command::List { .. } => "list",
            Command::Bind { .. } => "bind",
            Command::Unbind { .. } => "unbind",
            Command::Info { .. } => "info",
            Command::Caps { .. } => "caps",
            Command::Health { .. } => "health",
            Command::Trace { .. } => "trace",
            Command::Pingpong { .. } => "pingpong",
            Command::Perf { .. } => "perf",
            Command::Capture { .. } => "capture",
        }
    }
}

/// One of an option given before the command and after it.
fn either<T: PartialEq + std::fmt::Debug>(
    before: Option<T>,
    after: Option<T>,
    what: &str,
) -> Result<Option<T>> {
    match (before, after) {
        (Some(a), Some(b)) if a != b => Err(ToolError::Usage(format!(
            "{what} given twice, as {a:?} and {b:?}"
        ))),
        (a, b) => Ok(b.or(a)),
    }
}

/// One line on stderr for a panic (a broken internal invariant), never a
/// backtrace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let msg = msg.replace('\n', " ");
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("hca: internal error: {msg}{at} (please report this)");
    }));
}

fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitCode> {
    let (dev, dump, own_json) = cli.command.own();
    let name = cli.command.name();
    if cli.device.is_some() && dev.is_none() {
        return Err(ToolError::Usage(format!(
            "-d/--device does not apply to `hca {name}`, which runs on no device"
        )));
    }
    if cli.emu_model.is_some() && dev.is_none() {
        return Err(ToolError::Usage(format!(
            "--emu-model does not apply to `hca {name}`, which runs on no device"
        )));
    }
    if cli.poll && dev.is_none() {
        return Err(ToolError::Usage(format!(
            "--poll does not apply to `hca {name}`, which runs on no device"
        )));
    }
    if cli.dump_commands.is_some() && dump.is_none() {
        return Err(ToolError::Usage(format!(
            "--dump-commands does not apply to `hca {name}`, which runs no firmware command"
        )));
    }
    let device = either(
        cli.device.clone(),
        dev.and_then(|d| d.device.clone()),
        "-d/--device",
    )?;
    let dump_commands = either(
        cli.dump_commands.clone(),
        dump.and_then(|d| d.dump_commands.clone()),
        "--dump-commands",
    )?;
    let emu = cli.command.own_emu();
    if emu.is_none() && (cli.wire.is_some() || cli.pcap.is_some()) {
        return Err(ToolError::Usage(format!(
            "--wire and --pcap do not apply to `hca {name}`, which runs on no device"
        )));
    }
    let wire = either(cli.wire.clone(), emu.and_then(|e| e.wire.clone()), "--wire")?;
    let pcap = either(cli.pcap.clone(), emu.and_then(|e| e.pcap.clone()), "--pcap")?;
    let wire = match wire {
        Some(w) => Some(w),
        None if emu.is_some() => std::env::var("HCA_EMU_WIRE")
            .ok()
            .filter(|w| !w.trim().is_empty()),
        None => None,
    };
    let wire = wire
        .map(|w| {
            w.parse::<hca_emu::WireSpec>()
                .map_err(|e| ToolError::Usage(format!("--wire/HCA_EMU_WIRE: {e}")))
        })
        .transpose()?;
    let json = cli.json || own_json;
    let sel = || Selection::parse(device.as_deref());
    let open = OpenOptions {
        dump_commands,
        sysfs_root: Some(cli.sysfs_root.clone()),
        emulator_asked: device.is_some(),
        wait_mode: if cli.poll {
            WaitMode::Polling
        } else {
            WaitMode::Interrupts
        },
        wire,
        pcap,
        emu_model: cli
            .emu_model
            .as_deref()
            .map(crate::device::parse_emu_model)
            .transpose()?,
        real_time: false,
    };
    match &cli.command {
        Command::List { .. } => cmd::list::run(&cli.sysfs_root, json, out),
        Command::Bind { args, .. } => cmd::bind::bind(args, &cli.sysfs_root, json, out),
        Command::Unbind { args, .. } => cmd::bind::unbind(args, &cli.sysfs_root, json, out),
        Command::Info { args, .. } => cmd::info::run(args, &sel()?, &open, json, out),
        Command::Caps { args, .. } => cmd::caps::run(args, &sel()?, &open, json, out),
        Command::Health { args, .. } => cmd::health::run(args, &sel()?, &open, json, out),
        Command::Trace { args, .. } => cmd::trace::run(args, json, out),
        Command::Pingpong { args, .. } => {
            cmd::pingpong::run(args, &sel()?, &open, json, out).map(|()| ExitCode::SUCCESS)
        }
        Command::Capture { args, .. } => {
            if json {
                return Err(ToolError::Usage(
                    "--json does not apply to `hca capture` (frames go to -w FILE or one line each; counters to stderr)".into(),
                ));
            }
            cmd::capture::run(args, &sel()?, &open, out).map(|_| ExitCode::SUCCESS)
        }
        Command::Perf { args, .. } => {
            cmd::perf::run(args, &sel()?, &open, json, out).map(|()| ExitCode::SUCCESS)
        }
    }
}

/// A multi-line message as one line.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() -> ExitCode {
    install_panic_hook();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // Usage errors: clap's message (which suggests the fix) on one
            // line, exit code 2.
            eprintln!("hca: {}", one_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
        Err(e) => {
            // Help and version go to stdout with success.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let r = run(cli, &mut out).and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    match r {
        Ok(code) => code,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("hca: error: {}", e.to_string().replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}
