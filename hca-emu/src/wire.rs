//! The virtual wire: ports of emulated HCAs connected to each other (or two
//! ports of one HCA). A port with no peer is down.

use std::collections::BTreeMap;
use std::sync::Weak;

use crate::device::Shared;

/// The far end of a port's cable.
#[derive(Clone)]
pub(crate) struct Peer {
    /// The HCA at the other end (weak: a dropped HCA is a cut cable).
    pub(crate) hca: Weak<Shared>,
    /// Its port number.
    pub(crate) port: u8,
}

impl core::fmt::Debug for Peer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Peer(port {})", self.port)
    }
}

/// Peers by local port number.
pub(crate) type Peers = BTreeMap<u8, Peer>;
