//! The virtual wire: what is at the far end of each port's cable.
//!
//! - another emulated port, of another HCA or of the same one
//!   ([`connect`](crate::connect));
//! - a loopback plug: the port's frames come back in on the port itself
//!   ([`EmuHca::plug_loopback`](crate::EmuHca::plug_loopback)), as with a
//!   loopback plug in a real port;
//! - a datagram socket, one Ethernet frame per datagram and nothing else
//!   in it ([`EmuHca::cable_to`](crate::EmuHca::cable_to) with a
//!   [`WireSpec`]): the wire between emulated HCAs of two processes, or
//!   between an emulated HCA and a QEMU guest's NIC. Two kinds, the two
//!   of QEMU's `-netdev dgram` (QEMU 7.2 and later, net/dgram.c):
//!   - UDP (`udp:LOCAL,PEER`, e.g. `udp:127.0.0.1:5000,127.0.0.1:5001`),
//!     which is QEMU's
//!     `-netdev dgram,id=n,local.type=inet,local.host=127.0.0.1,local.port=5001,remote.type=inet,remote.host=127.0.0.1,remote.port=5000`;
//!   - Unix datagram sockets (`unix:LOCAL,PEER`, e.g. `unix:/tmp/a,/tmp/b`),
//!     which is QEMU's `-netdev dgram,id=n,local.type=unix,local.path=/tmp/b,remote.type=unix,remote.path=/tmp/a`.
//!
//! A port with nothing at the far end is down.
//!
//! The socket wire is an unreliable link, like a real one: a frame the
//! far end cannot take now (no socket bound at the peer address yet, its
//! receive queue still full after a short wait, a UDP datagram lost) is
//! dropped and counted in
//! [`Drops::no_link`](crate::Drops::no_link); RC recovers by retransmission.
//! Each process has its own device clock, so a socket cable is meant for
//! [`Clock::Real`](crate::Clock::Real): on a virtual clock the far end's
//! frames arrive whenever its process sends them.
//!
//! A port can also be tapped ([`EmuHca::capture`](crate::EmuHca::capture)):
//! a [`FrameTap`] sees every frame the port puts on its cable
//! ([`Direction::Out`]) and every frame that comes in on it
//! ([`Direction::In`]), whatever the cable. A frame that never left the
//! port (sent to the port's own MAC address, or through a loopback plug or
//! to another port of the same HCA) is seen once, coming in.

use std::collections::BTreeMap;
use std::fmt;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use crate::device::{Event, Shared};

/// Largest frame carried on a socket wire (an Ethernet jumbo frame and
/// then some; RoCE packets carry at most one path MTU). A UDP wire carries at
/// most 65507 bytes (IPv4) in a datagram; a larger frame is dropped and
/// counted.
pub const SOCKET_MAX_FRAME: usize = 64 * 1024;

/// Where a port's socket wire is bound and where its frames go: the text
/// form is `udp:LOCAL,PEER` (two socket addresses, `host:port`, IPv6 as
/// `[addr]:port`; hosts are IP addresses, not names) or
/// `unix:LOCAL,PEER` (two paths). The far end is cabled with the two
/// swapped. The QEMU equivalent of `udp:A,B` is
/// `-netdev dgram,id=n,local.type=inet,local.host=<B's host>,local.port=<B's port>,remote.type=inet,remote.host=<A's host>,remote.port=<A's port>`,
/// of `unix:A,B` `-netdev dgram,id=n,local.type=unix,local.path=B,remote.type=unix,remote.path=A`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireSpec {
    /// UDP datagrams.
    Udp {
        /// Bound here.
        local: SocketAddr,
        /// Frames go there.
        peer: SocketAddr,
    },
    /// Unix datagram sockets.
    Unix {
        /// Bound here (a stale socket file there is replaced).
        local: PathBuf,
        /// Frames go there.
        peer: PathBuf,
    },
}

impl WireSpec {
    /// The same wire seen from the far end (local and peer swapped).
    pub fn far_end(&self) -> WireSpec {
        match self {
            WireSpec::Udp { local, peer } => WireSpec::Udp {
                local: *peer,
                peer: *local,
            },
            WireSpec::Unix { local, peer } => WireSpec::Unix {
                local: peer.clone(),
                peer: local.clone(),
            },
        }
    }

    /// The local end, as text (for errors).
    pub fn local_name(&self) -> String {
        match self {
            WireSpec::Udp { local, .. } => local.to_string(),
            WireSpec::Unix { local, .. } => local.display().to_string(),
        }
    }
}

impl fmt::Display for WireSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireSpec::Udp { local, peer } => write!(f, "udp:{local},{peer}"),
            WireSpec::Unix { local, peer } => {
                write!(f, "unix:{},{}", local.display(), peer.display())
            }
        }
    }
}

/// Why a wire specification does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireSpecError {
    /// Neither `udp:` nor `unix:` in front.
    #[error("wire '{0}': the kind is udp: or unix: (udp:LOCAL,PEER or unix:LOCAL,PEER)")]
    Kind(String),
    /// Not two ends separated by a comma.
    #[error("wire '{0}': two ends are needed, LOCAL,PEER")]
    Ends(String),
    /// An end of a UDP wire that is not `ip:port`.
    #[error("wire '{spec}': '{end}' is not an IP address and port (127.0.0.1:5000, [::1]:5000)")]
    Address {
        /// The whole specification.
        spec: String,
        /// The end that is wrong.
        end: String,
    },
    /// An empty path, or the two ends the same.
    #[error("wire '{0}': {1}")]
    Invalid(String, &'static str),
}

impl FromStr for WireSpec {
    type Err = WireSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| WireSpecError::Kind(s.to_string()))?;
        let (a, b) = rest
            .split_once(',')
            .map(|(a, b)| (a.trim(), b.trim()))
            .ok_or_else(|| WireSpecError::Ends(s.to_string()))?;
        if a.is_empty() || b.is_empty() || b.contains(',') {
            return Err(WireSpecError::Ends(s.to_string()));
        }
        let spec = match kind.trim().to_ascii_lowercase().as_str() {
            "udp" => {
                let addr = |end: &str| {
                    end.parse::<SocketAddr>()
                        .map_err(|_| WireSpecError::Address {
                            spec: s.to_string(),
                            end: end.to_string(),
                        })
                };
                let (local, peer) = (addr(a)?, addr(b)?);
                if peer.port() == 0 || peer.ip().is_unspecified() {
                    return Err(WireSpecError::Invalid(
                        s.to_string(),
                        "the peer needs an address and a port (not 0)",
                    ));
                }
                WireSpec::Udp { local, peer }
            }
            "unix" => WireSpec::Unix {
                local: PathBuf::from(a),
                peer: PathBuf::from(b),
            },
            _ => return Err(WireSpecError::Kind(s.to_string())),
        };
        let same = match &spec {
            WireSpec::Udp { local, peer } => local == peer,
            WireSpec::Unix { local, peer } => local == peer,
        };
        if same {
            return Err(WireSpecError::Invalid(
                s.to_string(),
                "the two ends are the same (for a port that hears itself, use a loopback plug)",
            ));
        }
        Ok(spec)
    }
}

/// Which way a frame went through a tapped port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Put on the cable by the port.
    Out,
    /// Come in on the port.
    In,
}

/// What [`EmuHca::capture`](crate::EmuHca::capture) calls with every frame
/// of a tapped port: the port, the direction and the whole Ethernet frame
/// (no preamble, no FCS). Called on the device's or the wire's thread,
/// sometimes with the device locked: it must not call back into the
/// emulator, and should be quick.
pub type FrameTap = Arc<dyn Fn(u8, Direction, &[u8]) + Send + Sync>;

/// The taps of an HCA's ports, shared with its socket wires.
#[derive(Clone, Default)]
pub(crate) struct Taps(Arc<RwLock<BTreeMap<u8, FrameTap>>>);

impl Taps {
    pub(crate) fn set(&self, port: u8, tap: Option<FrameTap>) {
        let mut g = self.0.write().unwrap_or_else(|p| p.into_inner());
        match tap {
            Some(t) => g.insert(port, t),
            None => g.remove(&port),
        };
    }

    /// Hands a frame to the port's tap, if it has one.
    pub(crate) fn see(&self, port: u8, dir: Direction, frame: &[u8]) {
        let g = self.0.read().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = g.get(&port) {
            t(port, dir, frame);
        }
    }

    /// Whether any port is tapped.
    pub(crate) fn any(&self) -> bool {
        !self.0.read().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

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
    /// A datagram socket (UDP or Unix).
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

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Port { port, .. } => write!(f, "Peer(port {port})"),
            Peer::Loopback => f.write_str("Peer(loopback plug)"),
            Peer::Socket(s) => write!(f, "Peer(socket {})", s.spec),
        }
    }
}

/// Peers by local port number.
pub(crate) type Peers = BTreeMap<u8, Peer>;

/// The sockets of one end of a socket wire.
enum Sock {
    Unix {
        /// Bound at the local path; the receiving thread blocks on it.
        sock: UnixDatagram,
        /// Unbound, with a short send timeout: a full queue at the far
        /// end (Linux queues only `net.unix.max_dgram_qlen`, 10 by default,
        /// datagrams) holds the sender back until its receiving thread
        /// drains it, as a link's flow control would; a far end that does
        /// not drain it within the timeout loses the frame.
        sender: UnixDatagram,
    },
    /// Bound at the local address; frames leave from it too (as QEMU's
    /// do), with a short send timeout (a UDP send only waits for the
    /// local socket buffer; a full peer queue drops silently).
    Udp(UdpSocket),
}

/// One end of a socket wire: the socket bound at the local end, the
/// peer's address, and the receiving thread's stop flag.
pub(crate) struct SocketWire {
    sock: Sock,
    spec: WireSpec,
    port: u8,
    taps: Taps,
    stop: AtomicBool,
    /// Frames the far end did not take (absent, or its queue full).
    pub(crate) unsent: AtomicU64,
}

/// How long a send may wait for room at the far end (Unix) or in the
/// local socket buffer (UDP) before the frame is dropped. Long enough for
/// a far end that is merely slow to be scheduled (a link's pause frames
/// lose nothing), short enough that a stopped one does not hold up the
/// device's other work, which waits behind the send (its lock is
/// released, so its own frames keep arriving meanwhile: two processes
/// sending to each other at once both drain their queues).
const SEND_WAIT: Duration = Duration::from_millis(500);

/// How long the receiving thread blocks before it looks at its stop flag.
const RECV_POLL: Duration = Duration::from_millis(50);

impl SocketWire {
    /// Binds the local end (replacing a stale Unix socket file left
    /// there) and starts the thread that posts every datagram received to
    /// `port` of `hca`.
    pub(crate) fn open(
        hca: Weak<Shared>,
        taps: Taps,
        port: u8,
        spec: &WireSpec,
    ) -> std::io::Result<Arc<Self>> {
        let sock = match spec {
            WireSpec::Unix { local, .. } => {
                if std::fs::symlink_metadata(local).is_ok_and(|m| {
                    use std::os::unix::fs::FileTypeExt;
                    m.file_type().is_socket()
                }) {
                    std::fs::remove_file(local)?;
                }
                let sock = UnixDatagram::bind(local)?;
                sock.set_read_timeout(Some(RECV_POLL))?;
                let sender = UnixDatagram::unbound()?;
                sender.set_write_timeout(Some(SEND_WAIT))?;
                Sock::Unix { sock, sender }
            }
            WireSpec::Udp { local, .. } => {
                let sock = UdpSocket::bind(local)?;
                sock.set_read_timeout(Some(RECV_POLL))?;
                sock.set_write_timeout(Some(SEND_WAIT))?;
                Sock::Udp(sock)
            }
        };
        let wire = Arc::new(SocketWire {
            sock,
            spec: spec.clone(),
            port,
            taps,
            stop: AtomicBool::new(false),
            unsent: AtomicU64::new(0),
        });
        let w = wire.clone();
        std::thread::Builder::new()
            .name(format!("hca-emu wire port {port}"))
            .spawn(move || w.receive(hca))?;
        Ok(wire)
    }

    /// Sends one frame; false if the far end did not take it.
    pub(crate) fn send(&self, frame: &[u8]) -> bool {
        self.taps.see(self.port, Direction::Out, frame);
        if frame.len() > SOCKET_MAX_FRAME {
            log::warn!(
                "socket wire {}: a {}-byte frame is larger than the wire carries",
                self.spec,
                frame.len()
            );
            self.unsent.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let r = match (&self.sock, &self.spec) {
            (Sock::Unix { sender, .. }, WireSpec::Unix { peer, .. }) => sender.send_to(frame, peer),
            (Sock::Udp(s), WireSpec::Udp { peer, .. }) => s.send_to(frame, peer),
            _ => Err(std::io::Error::other("socket and specification differ")),
        };
        match r {
            Ok(n) if n == frame.len() => true,
            Ok(n) => {
                log::debug!("socket wire {}: short datagram ({n} bytes)", self.spec);
                self.unsent.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(e) => {
                log::debug!("socket wire {}: frame dropped ({e})", self.spec);
                self.unsent.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &self.sock {
            Sock::Unix { sock, .. } => sock.recv(buf),
            Sock::Udp(s) => s.recv(buf),
        }
    }

    fn receive(&self, hca: Weak<Shared>) {
        let mut buf = vec![0u8; SOCKET_MAX_FRAME];
        while !self.stop.load(Ordering::Acquire) {
            match self.recv(&mut buf) {
                Ok(n) => {
                    let Some(h) = hca.upgrade() else { return };
                    h.post(Event::Frame {
                        port: self.port,
                        bytes: buf[..n].to_vec(),
                        flight: None,
                    });
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if hca.strong_count() == 0 {
                        return;
                    }
                }
                // A UDP socket may report an ICMP error of an earlier send
                // (nothing bound at the peer yet): not a reason to stop.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => {
                    log::warn!("socket wire {}: receive failed: {e}", self.spec);
                    return;
                }
            }
        }
    }

    /// Stops the receiving thread (within its 50 ms receive timeout) and
    /// removes a Unix socket file.
    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Release);
        if let WireSpec::Unix { local, .. } = &self.spec {
            let _ = std::fs::remove_file(local);
        }
    }
}

impl fmt::Debug for SocketWire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SocketWire({}, port {})", self.spec, self.port)
    }
}

impl Drop for SocketWire {
    fn drop(&mut self) {
        self.close();
    }
}

/// The path of a Unix wire's local end, for the tests of this module.
#[cfg(test)]
fn unix_local(spec: &WireSpec) -> Option<&std::path::Path> {
    match spec {
        WireSpec::Unix { local, .. } => Some(local),
        WireSpec::Udp { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specifications_parse_and_print() {
        let u: WireSpec = "udp:127.0.0.1:5000,127.0.0.1:5001".parse().unwrap();
        assert_eq!(
            u,
            WireSpec::Udp {
                local: "127.0.0.1:5000".parse().unwrap(),
                peer: "127.0.0.1:5001".parse().unwrap()
            }
        );
        assert_eq!(u.to_string(), "udp:127.0.0.1:5000,127.0.0.1:5001");
        assert_eq!(u.far_end().to_string(), "udp:127.0.0.1:5001,127.0.0.1:5000");
        let v6: WireSpec = "UDP:[::1]:7, [::1]:8".parse().unwrap();
        assert_eq!(v6.to_string(), "udp:[::1]:7,[::1]:8");
        let x: WireSpec = "unix:/tmp/a,/tmp/b".parse().unwrap();
        assert_eq!(unix_local(&x), Some(std::path::Path::new("/tmp/a")));
        assert_eq!(x.to_string(), "unix:/tmp/a,/tmp/b");
        assert_eq!(x.local_name(), "/tmp/a");
    }

    #[test]
    fn bad_specifications_say_what_is_wrong() {
        let e = |s: &str| s.parse::<WireSpec>().unwrap_err();
        assert!(matches!(
            e("tcp:1.2.3.4:5,1.2.3.4:6"),
            WireSpecError::Kind(_)
        ));
        assert!(matches!(e("/tmp/a,/tmp/b"), WireSpecError::Kind(_)));
        assert!(matches!(e("unix:/tmp/a"), WireSpecError::Ends(_)));
        assert!(matches!(e("unix:/tmp/a,"), WireSpecError::Ends(_)));
        assert!(matches!(e("unix:/a,/b,/c"), WireSpecError::Ends(_)));
        assert!(
            matches!(e("udp:localhost:5,127.0.0.1:6"), WireSpecError::Address { end, .. } if end == "localhost:5")
        );
        assert!(matches!(
            e("udp:127.0.0.1:5,127.0.0.1:0"),
            WireSpecError::Invalid(..)
        ));
        assert!(matches!(e("unix:/a,/a"), WireSpecError::Invalid(..)));
        assert!(e("udp:1.2.3.4:5").to_string().contains("LOCAL,PEER"));
    }
}
