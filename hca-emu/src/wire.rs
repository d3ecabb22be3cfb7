//! The virtual wire: what is at the far end of each port's cable.
//!
//! - another emulated port, of another HCA or of the same one
//!   ([`connect`](crate::connect));
//! - a loopback plug: the port's frames come back in on the port itself
//!   ([`EmuHca::plug_loopback`](crate::EmuHca::plug_loopback)), as with a
//!   loopback plug in a real port;
//! - a Unix datagram socket, one Ethernet frame per datagram
//!   ([`EmuHca::cable_to_socket`](crate::EmuHca::cable_to_socket)): the
//!   wire between emulated HCAs of two processes.
//!
//! A port with nothing at the far end is down.
//!
//! The socket wire is an unreliable link, like a real one: a frame the
//! far end cannot take now (no socket bound at the peer path yet, its
//! receive queue full) is dropped and counted in
//! [`Drops::no_link`](crate::Drops::no_link); RC recovers by retransmission.
//! Each process has its own device clock, so a socket cable is meant for
//! [`Clock::Real`](crate::Clock::Real): on a virtual clock the far end's
//! frames arrive whenever its process sends them.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::device::{Event, Shared};

/// Largest frame carried on a socket wire (an Ethernet jumbo frame and
/// then some; the emulator's own frames carry a whole message, so this is
/// also the largest message a socket wire carries).
pub const SOCKET_MAX_FRAME: usize = 64 * 1024;

/// The far end of a port's cable.
#[derive(Clone)]
pub(crate) enum Peer {
    /// A port of an emulated HCA in this process (weak: a dropped HCA is a
    /// cut cable).
    Port {
        /// The HCA at the other end.
        hca: Weak<Shared>,
        /// Its port number.
        port: u8,
    },
    /// A loopback plug.
    Loopback,
    /// A Unix datagram socket.
    Socket(Arc<SocketWire>),
}

impl Peer {
    /// The emulated HCA at the other end, if it is one in this process.
    pub(crate) fn hca(&self) -> Option<(Arc<Shared>, u8)> {
        match self {
            Peer::Port { hca, port } => hca.upgrade().map(|h| (h, *port)),
            Peer::Loopback | Peer::Socket(_) => None,
        }
    }
}

impl core::fmt::Debug for Peer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Peer::Port { port, .. } => write!(f, "Peer(port {port})"),
            Peer::Loopback => f.write_str("Peer(loopback plug)"),
            Peer::Socket(s) => write!(f, "Peer(socket {})", s.peer.display()),
        }
    }
}

/// Peers by local port number.
pub(crate) type Peers = BTreeMap<u8, Peer>;

/// One end of a socket wire: the socket bound at the local path, the peer's
/// path, and the receiving thread's stop flag.
pub(crate) struct SocketWire {
    /// Bound at `local`; the receiving thread blocks on it.
    sock: UnixDatagram,
    /// Unbound and non-blocking: a frame the far end cannot take now is
    /// dropped rather than stalling the device.
    sender: UnixDatagram,
    local: PathBuf,
    peer: PathBuf,
    stop: AtomicBool,
    /// Frames the far end did not take (absent, or its queue full).
    pub(crate) unsent: AtomicU64,
}

impl SocketWire {
    /// Binds `local` (replacing a stale socket file left there) and starts
    /// the thread that posts every datagram received to `port` of `hca`.
    pub(crate) fn open(
        hca: Weak<Shared>,
        port: u8,
        local: &Path,
        peer: &Path,
    ) -> std::io::Result<Arc<Self>> {
        if std::fs::symlink_metadata(local).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        }) {
            std::fs::remove_file(local)?;
        }
        let sock = UnixDatagram::bind(local)?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let sender = UnixDatagram::unbound()?;
        sender.set_nonblocking(true)?;
        let wire = Arc::new(SocketWire {
            sock,
            sender,
            local: local.to_path_buf(),
            peer: peer.to_path_buf(),
            stop: AtomicBool::new(false),
            unsent: AtomicU64::new(0),
        });
        let w = wire.clone();
        std::thread::Builder::new()
            .name(format!("hca-emu wire port {port}"))
            .spawn(move || w.receive(hca, port))?;
        Ok(wire)
    }

    /// Sends one frame; false if the far end did not take it.
    pub(crate) fn send(&self, frame: &[u8]) -> bool {
        if frame.len() > SOCKET_MAX_FRAME {
            log::warn!(
                "socket wire {}: a {}-byte frame is larger than the wire carries",
                self.local.display(),
                frame.len()
            );
            self.unsent.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        match self.sender.send_to(frame, &self.peer) {
            Ok(n) if n == frame.len() => true,
            Ok(n) => {
                log::debug!(
                    "socket wire {}: short datagram ({n} bytes)",
                    self.local.display()
                );
                self.unsent.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(e) => {
                log::debug!(
                    "socket wire {} -> {}: frame dropped ({e})",
                    self.local.display(),
                    self.peer.display()
                );
                self.unsent.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn receive(&self, hca: Weak<Shared>, port: u8) {
        let mut buf = vec![0u8; SOCKET_MAX_FRAME];
        while !self.stop.load(Ordering::Acquire) {
            match self.sock.recv(&mut buf) {
                Ok(n) => {
                    let Some(h) = hca.upgrade() else { return };
                    h.post(Event::Frame {
                        port,
                        bytes: buf[..n].to_vec(),
                        flight: None,
                    });
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if hca.strong_count() == 0 {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    log::warn!("socket wire {}: receive failed: {e}", self.local.display());
                    return;
                }
            }
        }
    }

    /// Stops the receiving thread (within its 50 ms receive timeout) and
    /// removes the socket file.
    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = std::fs::remove_file(&self.local);
    }
}

impl Drop for SocketWire {
    fn drop(&mut self) {
        self.close();
    }
}
