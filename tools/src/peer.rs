//! Two processes (or two threads) running a test together: where each
//! side is ([`Mode`]), the TCP connection they exchange QP information
//! and synchronise over, and the line-based JSON control channel perf
//! uses on it.
//!
//! On the emulator every `hca` process has an emulated HCA of its own:
//! a server and a client in two processes reach each other when both are
//! cabled to one socket wire (`--wire` or `HCA_EMU_WIRE`, the two ends
//! swapped; see [`crate::device`]); `--tcp-loopback` runs both in one
//! process (two threads, each with its own emulated HCA, the two cabled
//! together).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Result, ToolError};

/// The TCP port of perftest and the pingpong examples.
pub const DEFAULT_PORT: u16 = 18515;

/// How long a side waits for its peer's next control message while the
/// peer is only exchanging information (not running a test).
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connecting to a server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The arguments saying where the sides of `hca perf` and `hca pingpong`
/// run and on which port of the HCA (as perftest and the ibv_*_pingpong
/// examples take them).
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// Connect to the server at this host. Without it (and without
    /// --server, -p or --tcp-loopback) both sides run in this process.
    #[arg(value_name = "SERVER")]
    pub host: Option<String>,

    /// Listen on / connect to this TCP port (default 18515). Given without
    /// a server host, this process is the server.
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,

    /// Be the server: wait for a client on the TCP port.
    #[arg(long)]
    pub server: bool,

    /// Run a server and a client in this process, on two threads, each
    /// with its own emulated HCA (the two cabled together), exchanging
    /// over TCP on 127.0.0.1 like two processes (-p 0 or none: any free
    /// port). Emulator only.
    #[arg(long)]
    pub tcp_loopback: bool,

    /// Use this port of the HCA.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
}

impl ConnectionArgs {
    /// The mode these arguments ask for ([`Mode::from_args`]).
    pub fn mode(&self) -> Result<Mode> {
        Mode::from_args(
            self.host.as_deref(),
            self.port,
            self.server,
            self.tcp_loopback,
        )
    }
}

/// Where the two sides of a test run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Both sides in this process, on one thread: two QPs on the device
    /// (two emulated HCAs cabled together, or one real function's ports).
    Loopback,
    /// This process is the server: it waits for a client on a TCP port.
    Server {
        /// The TCP port.
        port: u16,
    },
    /// This process is the client of the server at `host`.
    Client {
        /// The server's host name or address.
        host: String,
        /// The TCP port.
        port: u16,
    },
    /// Server and client in this process, on two threads, each with its
    /// own emulated HCA (the two cabled together), meeting over TCP on
    /// 127.0.0.1 like two processes (port 0: any free port).
    TcpLoopback {
        /// The TCP port.
        port: u16,
    },
}

impl Mode {
    /// From the command line: a server host makes a client; `--server` or
    /// `-p` without a host a server; `--tcp-loopback` two threads; nothing
    /// the loopback in one thread.
    pub fn from_args(
        host: Option<&str>,
        port: Option<u16>,
        server: bool,
        tcp_loopback: bool,
    ) -> Result<Self> {
        let p = port.unwrap_or(DEFAULT_PORT);
        match (host, server, tcp_loopback) {
            (Some(_), true, _) => Err(ToolError::Usage(
                "--server takes no server host (the server waits for a client)".into(),
            )),
            (Some(_), _, true) | (None, true, true) => Err(ToolError::Usage(
                "--tcp-loopback runs both the server and the client in this process; it takes no server host and no --server".into(),
            )),
            (Some(h), false, false) => Ok(Mode::Client {
                host: h.to_string(),
                port: p,
            }),
            (None, true, false) => Ok(Mode::Server { port: p }),
            (None, false, true) => Ok(Mode::TcpLoopback {
                port: port.unwrap_or(0),
            }),
            (None, false, false) if port.is_some() => Ok(Mode::Server { port: p }),
            (None, false, false) => Ok(Mode::Loopback),
        }
    }
}

/// What to add to a "port is down" error on the emulator.
pub fn emulator_down_hint(mode: &Mode) -> &'static str {
    match mode {
        Mode::Server { .. } | Mode::Client { .. } => {
            " (an emulated HCA's port is up only when it is cabled: give both processes a wire, e.g. --wire udp:127.0.0.1:5000,127.0.0.1:5001 here and --wire udp:127.0.0.1:5001,127.0.0.1:5000 in the other (or HCA_EMU_WIRE), or run both sides in one process with --tcp-loopback, or use real HCAs with -d)"
        }
        _ => "",
    }
}

/// Listens on TCP `port` of every IPv4 address (0: a free port).
pub fn listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .map_err(|e| ToolError::Usage(format!("cannot listen on TCP port {port}: {e}")))
}

/// Waits for the client, saying so on stderr.
pub fn accept(l: &TcpListener) -> Result<TcpStream> {
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    eprintln!("hca: waiting for a client to connect on TCP port {port}");
    let (s, peer) = l
        .accept()
        .map_err(|e| ToolError::Usage(format!("accepting a client on TCP port {port}: {e}")))?;
    log::info!("client {peer} connected");
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Connects to the server at `host:port` (every address it resolves to,
/// in turn).
pub fn connect(host: &str, port: u16) -> Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| ToolError::Usage(format!("cannot resolve server {host}: {e}")))?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(ToolError::Usage(match last {
        Some(e) => format!("cannot connect to server {host}:{port}: {e}"),
        None => format!("cannot connect to server {host}:{port}: it resolves to no address"),
    }))
}

/// A line-based JSON control channel over a TCP connection: one message
/// per line. Sends block; receives wait (with or without a limit) or
/// poll.
pub struct Control {
    peer: &'static str,
    s: TcpStream,
    pending: Vec<u8>,
}

impl Control {
    /// A channel to `peer` ("client" or "server") over `s`.
    pub fn new(s: TcpStream, peer: &'static str) -> Result<Self> {
        Ok(Self {
            peer,
            s,
            pending: Vec::new(),
        })
    }

    fn io(&self, what: &str, e: std::io::Error) -> ToolError {
        ToolError::Usage(format!("{what} the {}: {e}", self.peer))
    }

    /// Sends one message.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(|e| ToolError::Usage(e.to_string()))?;
        line.push(b'\n');
        self.s
            .write_all(&line)
            .and_then(|()| self.s.flush())
            .map_err(|e| self.io("sending to", e))
    }

    fn parse<T: DeserializeOwned>(&self, line: &[u8]) -> Result<T> {
        // A peer that failed says so.
        if let Ok(Wire::Error { error }) = serde_json::from_slice::<Wire>(line) {
            return Err(ToolError::Usage(format!(
                "the {} failed: {error}",
                self.peer
            )));
        }
        serde_json::from_slice(line).map_err(|e| {
            ToolError::Usage(format!(
                "the {} sent an unexpected message ({e}): {}",
                self.peer,
                String::from_utf8_lossy(line).trim_end()
            ))
        })
    }

    /// A complete line already buffered, if any.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let at = self.pending.iter().position(|&b| b == b'\n')?;
        let rest = self.pending.split_off(at + 1);
        Some(std::mem::replace(&mut self.pending, rest))
    }

    /// Reads what is there, waiting at most `wait` (`None`: for ever,
    /// `Some(ZERO)`: not at all). Returns whether a line is complete.
    fn fill(&mut self, wait: Option<Duration>) -> Result<bool> {
        let start = std::time::Instant::now();
        loop {
            if self.pending.contains(&b'\n') {
                return Ok(true);
            }
            let left = match wait {
                None => None,
                Some(w) => {
                    let left = w.saturating_sub(start.elapsed());
                    if left.is_zero() && !w.is_zero() {
                        return Ok(false);
                    }
                    Some(left)
                }
            };
            let r = match left {
                Some(l) if l.is_zero() => {
                    self.s
                        .set_nonblocking(true)
                        .map_err(|e| self.io("configuring the connection to", e))?;
                    let mut chunk = [0u8; 4096];
                    let r = self.s.read(&mut chunk).map(|n| (n, chunk));
                    let _ = self.s.set_nonblocking(false);
                    r
                }
                l => {
                    self.s
                        .set_read_timeout(l)
                        .map_err(|e| self.io("configuring the connection to", e))?;
                    let mut chunk = [0u8; 4096];
                    self.s.read(&mut chunk).map(|n| (n, chunk))
                }
            };
            match r {
                Ok((0, _)) => {
                    return Err(ToolError::Usage(format!(
                        "the {} closed the connection",
                        self.peer
                    )));
                }
                Ok((n, chunk)) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if wait.is_some_and(|w| w.is_zero()) {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io("reading from", e)),
            }
        }
    }

    /// The next message, waiting at most `wait` (`None`: for ever).
    pub fn poll_recv<T: DeserializeOwned>(&mut self, wait: Option<Duration>) -> Result<Option<T>> {
        if !self.fill(wait)? {
            return Ok(None);
        }
        match self.take_line() {
            Some(line) => self.parse(&line).map(Some),
            None => Ok(None),
        }
    }

    /// The next message; an error after `timeout` (`None`: no limit).
    pub fn recv<T: DeserializeOwned>(&mut self, timeout: Option<Duration>) -> Result<T> {
        match self.poll_recv(timeout)? {
            Some(m) => Ok(m),
            None => Err(ToolError::Usage(format!(
                "the {} sent nothing for {} s",
                self.peer,
                timeout.unwrap_or_default().as_secs()
            ))),
        }
    }

    /// The next message if one has arrived, without waiting.
    pub fn try_recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>> {
        self.poll_recv(Some(Duration::ZERO))
    }

    /// Tells the peer this side failed (best effort).
    pub fn send_error(&mut self, e: &ToolError) {
        let _ = self.send(&Wire::Error {
            error: e.to_string(),
        });
    }
}

/// The one message every side understands: a failure report.
#[derive(Debug, Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Wire {
    Error { error: String },
}

/// Runs a server on a thread of its own and a client on the calling
/// thread (so that the client may print to the caller's output as it goes),
/// meeting over TCP on 127.0.0.1:`port` (0: any free port), each side on an
/// emulated HCA of its own (the two cabled together, see
/// [`crate::device::emulated_pair`]). Returns both results, or the error
/// of the side that failed first (the other side's failure is then only
/// its consequence).
pub fn tcp_loopback<RS: Send, RC>(
    port: u16,
    server: impl FnOnce(TcpListener) -> Result<RS> + Send,
    client: impl FnOnce(u16) -> Result<RC>,
) -> Result<(RS, RC)> {
    let listener = listen(port)?;
    let port = listener
        .local_addr()
        .map_err(|e| ToolError::Usage(format!("TCP listener: {e}")))?
        .port();
    fn panicked<T>() -> (Result<T>, std::time::Instant) {
        (
            Err(ToolError::Usage("a test thread panicked".into())),
            std::time::Instant::now(),
        )
    }
    let ((rs, ts), (rc, tc)) = std::thread::scope(|sc| {
        let s = sc.spawn(move || {
            let r = server(listener);
            (r, std::time::Instant::now())
        });
        let c = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| client(port)))
            .unwrap_or_else(|_| Err(ToolError::Usage("the client panicked".into())));
        if c.is_err() {
            // A server still waiting for this client: let it go.
            let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, port));
        }
        let c = (c, std::time::Instant::now());
        (s.join().unwrap_or_else(|_| panicked()), c)
    });
    match (rs, rc) {
        (Ok(s), Ok(c)) => Ok((s, c)),
        (Err(e), Ok(_)) => Err(e),
        (Ok(_), Err(e)) => Err(e),
        (Err(es), Err(ec)) => Err(if ts <= tc { es } else { ec }),
    }
}
