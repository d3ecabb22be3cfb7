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
//!                               send-bw send-lat atomic-bw atomic-lat
//! ```
//!
//! `-d <bdf>` runs on a PCI function bound to vfio-pci; without it (or with
//! `-d emu`) on the built-in emulated ConnectX-4 (pingpong and perf: two of
//! them, cabled port 1 to port 1). `--json` prints data as JSON.
//! `--dump-commands <file>` records the driver's command traffic in the
//! hexdump form `hca trace` reads. Errors are one line on stderr and a
//! non-zero exit code.
//!
//! pingpong and perf run both sides in this process by default; `--server`
//! (or `-p PORT`) and a server host run them as a server and a client that
//! meet over TCP; `--tcp-loopback` runs a server and a client on two
//! threads, each with its own emulated HCA (two `hca` processes on the
//! emulator cannot reach each other: each has an emulated HCA of its own).
//!
//! Layout of the crate: [`device`] (device selection, bring-up, teardown,
//! the command recorder, progress), [`output`] (tables, JSON), [`decode`]
//! (any PRM layout as named fields), [`error`] (the one error type),
//! [`rdma`] (one side of a data-path test: resources, addresses, QP
//! connection, polling pace), [`peer`] (where the sides run, TCP, the
//! control channel), [`cmd`] (one module per subcommand).

#![forbid(unsafe_code)]

mod cmd;
mod decode;
mod device;
mod error;
mod output;
mod peer;
mod progress;
mod rdma;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::device::{OpenOptions, Selection};
use crate::error::{Result, ToolError};

/// The mlx5 driver's tool: devices, bring-up information, capabilities,
/// health and command traces, on real ConnectX cards under VFIO or on the
/// built-in emulated ConnectX-4.
#[derive(Debug, Parser)]
#[command(name = "hca", version, about, long_about = None)]
pub struct Cli {
    /// The device: a PCI address (dddd:bb:dd.f) bound to vfio-pci, or `emu`
    /// for the emulated ConnectX-4 (the default).
    #[arg(short = 'd', long = "device", global = true, value_name = "BDF|emu")]
    device: Option<String>,

    /// Print data as JSON (trace: one JSON object per line).
    #[arg(long, global = true)]
    json: bool,

    /// Record the driver's own command traffic into FILE, in the hexdump
    /// form of Linux mlx5_core (readable with `hca trace FILE`).
    #[arg(long, global = true, value_name = "FILE")]
    dump_commands: Option<PathBuf>,

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

#[derive(Debug, Subcommand)]
enum Command {
    /// List mlx5 PCI functions: address, ids, name, driver, IOMMU group.
    List,
    /// Bind a PCI function to vfio-pci (checks the IOMMU group, memlock
    /// limit, huge pages and the vfio-pci module, and says what to fix).
    Bind(cmd::bind::BindArgs),
    /// Give a PCI function back from vfio-pci to its kernel driver.
    Unbind(cmd::bind::UnbindArgs),
    /// Device and port attributes, laid out like ibv_devinfo.
    Info(cmd::info::InfoArgs),
    /// Every capability of the device by PRM name.
    Caps(cmd::caps::CapsArgs),
    /// Health buffer, health counter and syndrome, read from the
    /// initialization segment without bringing the device up.
    Health(cmd::health::HealthArgs),
    /// Decode a Linux mlx5_core command dump (dyndbg hexdump) command by
    /// command.
    Trace(cmd::trace::TraceArgs),
    /// ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong: in this
    /// process (two QPs), or as a server or client over TCP.
    Pingpong(cmd::pingpong::PingpongArgs),
    /// perftest: write-bw, write-lat, read-bw, read-lat, send-bw,
    /// send-lat, atomic-bw, atomic-lat; in this process (two QPs), or as
    /// a server or client over TCP.
    Perf(cmd::perf::PerfArgs),
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
    let sel = || Selection::parse(cli.device.as_deref());
    let open = OpenOptions {
        dump_commands: cli.dump_commands.clone(),
        sysfs_root: Some(cli.sysfs_root.clone()),
    };
    let needs_no_device = matches!(
        cli.command,
        Command::List | Command::Bind(_) | Command::Unbind(_) | Command::Trace(_)
    );
    if needs_no_device && cli.device.is_some() {
        return Err(ToolError::Usage(
            "-d/--device does not apply to this command".to_string(),
        ));
    }
    if cli.dump_commands.is_some() && matches!(cli.command, Command::Health(_)) {
        return Err(ToolError::Usage(
            "--dump-commands does not apply to `hca health`, which runs no command".to_string(),
        ));
    }
    if needs_no_device && cli.dump_commands.is_some() {
        return Err(ToolError::Usage(
            "--dump-commands does not apply to this command".to_string(),
        ));
    }
    match cli.command {
        Command::List => cmd::list::run(&cli.sysfs_root, cli.json, out),
        Command::Bind(a) => cmd::bind::bind(&a, &cli.sysfs_root, cli.json, out),
        Command::Unbind(a) => cmd::bind::unbind(&a, &cli.sysfs_root, cli.json, out),
        Command::Info(a) => cmd::info::run(&a, &sel()?, &open, cli.json, out),
        Command::Caps(a) => cmd::caps::run(&a, &sel()?, &open, cli.json, out),
        Command::Health(a) => cmd::health::run(&a, &sel()?, &open, cli.json, out),
        Command::Trace(a) => cmd::trace::run(&a, cli.json, out),
        Command::Pingpong(a) => {
            cmd::pingpong::run(&a, &sel()?, &open, cli.json, out).map(|()| ExitCode::SUCCESS)
        }
        Command::Perf(a) => {
            cmd::perf::run(&a, &sel()?, &open, cli.json, out).map(|()| ExitCode::SUCCESS)
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
