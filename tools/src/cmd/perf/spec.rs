//! The test description both sides agree on ([`Spec`]: the client sends
//! it to the server), and what follows from it: the title, the access
//! rights, the path MTU and sizes fitted to a port, the outstanding
//! READ / atomic depth, the buffer layout, the QPs' capacities and the
//! connection parameters.

use hca_driver::verbs::{AccessFlags, QpCap, QpType};
use hca_driver::{Hca, IbMtu};
use platform::Platform;
use serde::{Deserialize, Serialize};

use super::engine::{GRH, Layout};
use crate::error::{Result, ToolError};
use crate::rdma::{ConnParams, PortView, SideSpec};

/// perftest's `MAX_OUT_READ_HERMON`.
const MAX_OUT_READS: u32 = 16;

/// The operation a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verb {
    /// SEND / receive.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomics.
    Atomic,
}

impl Verb {
    /// perftest's `testsStr`.
    pub(super) fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }

    /// The work request, for messages.
    pub fn wr_name(self) -> &'static str {
        match self {
            Verb::Send => "a SEND",
            Verb::Write => "an RDMA WRITE",
            Verb::Read => "an RDMA READ",
            Verb::Atomic => "an atomic",
        }
    }
}

/// The atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AtomicKind {
    /// `FETCH_AND_ADD`.
    FetchAndAdd,
    /// `CMP_AND_SWAP`.
    CmpAndSwap,
}

impl AtomicKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            AtomicKind::FetchAndAdd => "FETCH_AND_ADD",
            AtomicKind::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

/// Connection types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Conn {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl Conn {
    pub(super) fn name(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
        }
    }

    fn qp_type(self) -> QpType {
        match self {
            Conn::Rc => QpType::Rc,
            Conn::Uc => QpType::Uc,
            Conn::Ud => QpType::Ud,
        }
    }
}

/// What a test is: everything both sides must agree on. The client sends
/// it to the server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    /// The test's name (`write-bw`...).
    pub test: String,
    /// The operation.
    pub verb: Verb,
    /// Bandwidth (true) or latency.
    pub bw: bool,
    /// Connection type.
    pub conn: Conn,
    /// Message sizes (one, or -a's).
    pub sizes: Vec<u64>,
    /// Whether -a was given (the sizes are then limited by the MTU on UD).
    pub all: bool,
    /// Whether the size is the default (no -s): on UD it then becomes the
    /// MTU when larger, as perftest does.
    #[serde(default)]
    pub default_size: bool,
    /// Iterations per QP (when no duration).
    pub iters: u64,
    /// Duration in seconds.
    pub duration: Option<u64>,
    /// QPs.
    pub qps: u32,
    /// Outstanding work requests per QP.
    pub tx_depth: u32,
    /// Receives per QP (send tests).
    pub rx_depth: u32,
    /// Signal every this many.
    pub cq_mod: u32,
    /// Path MTU in bytes (0: the port's active MTU).
    pub mtu: u32,
    /// Inline bytes asked for.
    pub inline: u32,
    /// Outstanding READs / atomics (0: the device's, at most 16).
    pub outs: u32,
    /// The atomic operation.
    pub atomic: AtomicKind,
    /// Report in Gb/sec.
    pub gbits: bool,
    /// No peak.
    pub no_peak: bool,
}

impl Spec {
    pub(super) fn title(&self) -> String {
        let mut t = format!("{} ", self.verb.title());
        if self.verb == Verb::Atomic {
            t.push_str(self.atomic.name());
            t.push(' ');
        }
        t.push_str(if self.bw { "BW " } else { "Latency " });
        t.push_str("Test");
        t
    }

    pub(super) fn access(&self) -> AccessFlags {
        AccessFlags::LOCAL_WRITE
            | match self.verb {
                Verb::Write => AccessFlags::REMOTE_WRITE,
                Verb::Read => AccessFlags::REMOTE_READ,
                Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
                Verb::Send => AccessFlags::NONE,
            }
    }

    /// Fits the spec to the port: the path MTU (the port's active one, or
    /// -m if not larger), and on UD the sizes to the MTU.
    pub(super) fn fit(&mut self, port: &PortView) -> Result<IbMtu> {
        let mtu = match self.mtu {
            0 => port.active_mtu,
            m if m > port.active_mtu.bytes() => {
                return Err(ToolError::Usage(format!(
                    "-m {m}: above the port's active MTU ({})",
                    port.active_mtu.bytes()
                )));
            }
            m => IbMtu::fitting(m).unwrap_or(port.active_mtu),
        };
        self.mtu = mtu.bytes();
        // The size is settled from here on (a server takes it as given).
        let default_size = std::mem::take(&mut self.default_size);
        if self.conn == Conn::Ud {
            let m = u64::from(mtu.bytes());
            if self.all {
                if self.sizes.iter().any(|&s| s > m) {
                    eprintln!("hca: max msg size in UD is the MTU ({m} bytes): -a stops there");
                }
                self.sizes.retain(|&s| s <= m);
            } else if default_size && self.sizes.iter().any(|&s| s > m) {
                // perftest: with no -s, a UD test uses the MTU.
                eprintln!("hca: max msg size in UD is the MTU ({m} bytes): using it");
                self.sizes = vec![m];
            } else if let Some(&s) = self.sizes.iter().find(|&&s| s > m) {
                return Err(ToolError::Usage(format!(
                    "-s {s}: a UD message must fit in one packet, at most the MTU ({m} bytes)"
                )));
            }
        }
        Ok(mtu)
    }

    /// The outstanding READ / atomic depth on these devices.
    pub(super) fn out_reads<P: Platform + 'static>(&self, hcas: &[&Hca<P>]) -> Result<u8> {
        if !matches!(self.verb, Verb::Read | Verb::Atomic) {
            return Ok(1);
        }
        let mut dev = MAX_OUT_READS;
        for h in hcas {
            let a = hca_driver::verbs::DeviceAttr::from_info(h.info());
            dev = dev.min(a.max_qp_init_rd_atom).min(a.max_qp_rd_atom);
            if self.verb == Verb::Atomic && !a.atomic_ops {
                return Err(ToolError::Usage(format!(
                    "{} executes no 8-byte atomics",
                    h.platform().describe()
                )));
            }
        }
        let o = if self.outs == 0 { dev } else { self.outs };
        if o > dev {
            return Err(ToolError::Usage(format!(
                "-o {o}: the device allows {dev} outstanding READs / atomics per QP"
            )));
        }
        Ok(o.max(1) as u8)
    }

    pub(super) fn layout(&self) -> Layout {
        let max = self.sizes.iter().copied().max().unwrap_or(8) as usize;
        Layout {
            slot: (max + GRH).next_multiple_of(64),
        }
    }

    pub(super) fn side_spec(&self) -> SideSpec {
        let send = self.verb == Verb::Send;
        let qps = self.qps as usize;
        let rx = if send { self.rx_depth } else { 0 };
        SideSpec {
            qp_type: self.conn.qp_type(),
            qps,
            cap: QpCap {
                max_send_wr: self.tx_depth,
                max_recv_wr: rx,
                max_send_sge: 1,
                max_recv_sge: if send { 1 } else { 0 },
                max_inline_data: self.inline,
            },
            cqe: (self.qps * (self.tx_depth + rx) + 16).min(1 << 20),
            buf_len: 2 * qps * self.layout().slot,
            access: self.access(),
        }
    }

    pub(super) fn conn_params(&self, mtu: IbMtu, out_reads: u8) -> ConnParams {
        // perftest's values (timeout 14, 7 retries, RNR retry 7).
        ConnParams {
            mtu,
            rd_atomic: out_reads,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 64,
            sl: 0,
        }
    }

    /// 2 for WRITE and SEND (a round trip is two messages), else 1.
    pub(super) fn rtt_factor(&self) -> f64 {
        match self.verb {
            Verb::Read | Verb::Atomic => 1.0,
            _ => 2.0,
        }
    }

    /// The units of the results: bandwidth's, or microseconds for latency.
    pub(super) fn units(&self) -> &'static str {
        match (self.bw, self.gbits) {
            (false, _) => "usec",
            (true, true) => "Gb/sec",
            (true, false) => "MiB/sec",
        }
    }
}
