//! This tool's own exchange between a client and a server (`hca perf
//! HOST` and `hca perf --server`): JSON messages over the TCP control
//! connection ([`crate::peer::Control`]). perftest's exchange, for a
//! perftest peer, is [`super::perftest`].

use hca_driver::IbMtu;
use serde::{Deserialize, Serialize};

use super::report::Row;
use super::spec::Spec;
use crate::rdma::Endpoint;

/// The version of the control protocol (2: GIDs in colon form).
pub(super) const PROTOCOL: u32 = 2;

/// Client to server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ClientMsg {
    /// The test and the client's QPs.
    Hello {
        version: u32,
        spec: Box<Spec>,
        endpoints: Vec<Endpoint>,
    },
    /// Start the next size.
    Start { size: u64 },
    /// The client is done with the size: what it sent on each QP.
    Done { size: u64, sent: Vec<u64> },
    /// The client's result row for the size.
    Result { row: Row },
    /// The end.
    Bye,
}

/// Server to client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ServerMsg {
    /// The server's QPs (connected to the client's) and the path MTU.
    Accept {
        endpoints: Vec<Endpoint>,
        mtu: u32,
        out_reads: u8,
    },
    /// Ready for the size.
    Ready { size: u64 },
    /// The server saw the size through (SEND: what it received).
    Finished { size: u64, received: u64 },
}

/// The smaller of two MTUs.
pub(super) fn min_mtu(a: IbMtu, b: u32) -> IbMtu {
    if b < a.bytes() {
        IbMtu::fitting(b).unwrap_or(a)
    } else {
        a
    }
}
