//! The recorded ConnectX-4: capability blocks, QUERY_ADAPTER and QUERY_ISSI
//! answers, from `hca-emu/data/cx4-fw14.12.1220.txt` (extracted from the
//! real-hardware trace `data/prm/trace-mlx5_core-cx4.txt`; the test
//! `tests/personality.rs` proves every byte matches the trace).
//!
//! Synthesized (the trace does not show them, documented here):
//! - capability types 8 (eswitch flow table) and 9 (eswitch): all zero, the
//!   emulator has no eswitch (the general caps still say
//!   `vport_group_manager`/`eswitch_manager`, as the card did);
//! - with [`EmuConfig::ports`](crate::EmuConfig::ports) = 2, `num_ports` and
//!   `num_vhca_ports` in the general caps are rewritten to 2 (an assumption:
//!   one function with both ports, whose RoCE address commands name the
//!   port; the recorded card has one port per function and 0);
//! - the RoCE address (GID) table has [`ROCE_ADDRESS_TABLE_SIZE`] entries:
//!   the recorded RoCE caps say 256 in a dword the layout file marks
//!   reserved;
//! - port registers (PAOS/PTYS/PMTU): see `fw::port`;
//! - with [`EmuConfig::cmdif_checksum`](crate::EmuConfig::cmdif_checksum),
//!   the current `cmdif_checksum` is 3 (the recorded card booted with 0; its
//!   maximum is 3); with [`PortType::InfiniBand`](crate::PortType), the
//!   current and maximum `port_type` are 0;
//! - with [`EmuConfig::ts_format_caps`](crate::EmuConfig::ts_format_caps),
//!   `sq_ts_format`, `rq_ts_format` (general) and `qp_ts_format` (RoCE)
//!   are rewritten, current and maximum (the recorded card reads 0 in all
//!   three: free-running only).
//!
//! The later personalities ([`Personality::ConnectX5`](crate::Personality),
//! `ConnectX6Dx`) start from the recorded ConnectX-4 capabilities and change
//! only what Linux and rdma-core test for on those generations; every
//! other value is the ConnectX-4's (assumed, listed in `docs/fidelity.md`):
//! - `umem_uid_0` (general caps bit 0x252, Linux `mlx5_ifc.h`) is 1,
//!   current and maximum: rdma-core's `mlx5_vfio_setup_function` refuses a
//!   device without it (EOPNOTSUPP), and UMEMs (CREATE_UMEM) are accepted;
//! - the firmware knows `ts_format` (a QP with `ts_format` 1, "default", is
//!   accepted on a free-running-only ConnectX-5; assumed, rdma-core's
//!   `Mlx5DevxRcResources.create_qp` sets it unconditionally);
//! - `qos` (general caps) is 1 and the QoS capabilities (type 0xc) offer
//!   packet pacing: `packet_pacing`, `packet_pacing_burst_bound`,
//!   `packet_pacing_typical_size` 1, rates [`PACKET_PACING_MIN_RATE`] ..=
//!   [`PACKET_PACING_MAX_RATE`] kbit/s, [`PACKET_PACING_RATE_TABLE_SIZE`]
//!   table entries (assumed: typical ConnectX-5 answers, not recorded;
//!   [`EmuConfig::packet_pacing_cap`](crate::EmuConfig::packet_pacing_cap)
//!   false leaves the block without pacing). The recorded ConnectX-4 says
//!   `qos` 0 and answers no QoS capabilities;
//! - ConnectX-6 Dx: real-time clock mode, `qp_ts_format`, `sq_ts_format`
//!   and `rq_ts_format` 1 (Linux `mlx5_is_real_time_rq/sq`,
//!   `MLX5_TIMESTAMP_FORMAT_CAP_REAL_TIME`).

use std::collections::BTreeMap;

const DATA: &str = include_str!("../data/cx4-fw14.12.1220.txt");

/// Firmware version 14.12.1220.
pub const FW_VERSION: (u16, u16, u16) = (14, 12, 1220);
/// Command interface revision.
pub const CMDIF_REV: u16 = 5;
/// PCI vendor and device id of a ConnectX-4.
pub const PCI_ID: (u16, u16) = (0x15b3, 0x1013);
/// `cmd_hca_cap.umem_uid_0` (bit offset 0x252, width 1; Linux
/// `include/linux/mlx5/mlx5_ifc.h`, not in the layout file of this
/// repository, which predates it).
pub const UMEM_UID_0: crate::ifc::Field = crate::ifc::Field {
    offset: 0x252,
    width: 1,
};
/// Entries of the RoCE address table per port.
pub const ROCE_ADDRESS_TABLE_SIZE: usize = 256;
/// The ISSI values the firmware supports (bit n = ISSI n): 0 and 1.
pub const SUPPORTED_ISSI: u32 = 0b11;

/// One recorded answer: a section of the data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedAnswer {
    /// Section title (`QUERY_HCA_CAP op_mod=0x1`, `QUERY_ADAPTER`...).
    pub title: String,
    /// Index of the command in the trace (0-based).
    pub trace_command: usize,
    /// Output payload: the bytes after the 16-byte header.
    pub bytes: Vec<u8>,
}

/// Parses the personality data file.
pub fn recorded_answers() -> Vec<RecordedAnswer> {
    parse(DATA).expect("hca-emu/data/cx4-fw14.12.1220.txt is well formed")
}

fn parse(text: &str) -> Result<Vec<RecordedAnswer>, String> {
    let mut out: Vec<RecordedAnswer> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let (title, tail) = rest
                .split_once(']')
                .ok_or_else(|| format!("line {}: unterminated section", n + 1))?;
            let idx = tail
                .trim()
                .strip_prefix("trace_command=")
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("line {}: missing trace_command", n + 1))?;
            out.push(RecordedAnswer {
                title: title.to_string(),
                trace_command: idx,
                bytes: Vec::new(),
            });
            continue;
        }
        let cur = out
            .last_mut()
            .ok_or_else(|| format!("line {}: data before a section", n + 1))?;
        if line.len() % 2 != 0 {
            return Err(format!("line {}: odd number of hex digits", n + 1));
        }
        for i in (0..line.len()).step_by(2) {
            let b = u8::from_str_radix(&line[i..i + 2], 16)
                .map_err(|_| format!("line {}: not hex", n + 1))?;
            cur.bytes.push(b);
        }
    }
    Ok(out)
}

/// The capability and identity data the firmware model answers with.
#[derive(Clone, Debug)]
pub(crate) struct Caps {
    /// Current capabilities by type (4096 bytes each).
    pub(crate) cur: BTreeMap<u8, Vec<u8>>,
    /// Maximum capabilities by type.
    pub(crate) max: BTreeMap<u8, Vec<u8>>,
    /// QUERY_ADAPTER payload (256 bytes).
    pub(crate) adapter: Vec<u8>,
}

/// Capability type: general device caps.
pub(crate) const CAP_GENERAL: u8 = 0;
/// Capability type: Ethernet offloads.
pub(crate) const CAP_ETHERNET_OFFLOADS: u8 = 1;
/// Capability type: atomic.
pub(crate) const CAP_ATOMIC: u8 = 3;
/// Capability type: RoCE.
pub(crate) const CAP_ROCE: u8 = 4;
/// Capability type: QoS (`qos_cap`: packet pacing).
pub(crate) const CAP_QOS: u8 = 0xc;

/// `qos_cap.packet_pacing_max_rate` of the later personalities, kbit/s
/// (assumed: a typical ConnectX-5 answer, Linux `mlx5_init_rl_table`
/// prints "range: 0Mbps to 97656Mbps" for it).
pub const PACKET_PACING_MAX_RATE: u32 = 100_000_000;
/// `qos_cap.packet_pacing_min_rate` of the later personalities, kbit/s
/// (assumed, as [`PACKET_PACING_MAX_RATE`]).
pub const PACKET_PACING_MIN_RATE: u32 = 0;
/// `qos_cap.packet_pacing_rate_table_size` of the later personalities,
/// index 0 (not paced) included (assumed, as [`PACKET_PACING_MAX_RATE`]:
/// Linux prints "127 rates are supported").
pub const PACKET_PACING_RATE_TABLE_SIZE: u16 = 128;

impl Caps {
    pub(crate) fn connectx4(ports: u8) -> Self {
        let mut cur = BTreeMap::new();
        let mut max = BTreeMap::new();
        let mut adapter = Vec::new();
        for a in recorded_answers() {
            if let Some(m) = a.title.strip_prefix("QUERY_HCA_CAP op_mod=0x") {
                let op_mod = u8::from_str_radix(m, 16).expect("op_mod in hex");
                let mut b = a.bytes.clone();
                b.resize(4096, 0);
                if op_mod & 1 == 1 {
                    cur.insert(op_mod >> 1, b);
                } else {
                    max.insert(op_mod >> 1, b);
                }
            } else if a.title == "QUERY_ADAPTER" {
                adapter = a.bytes.clone();
            }
        }
        for t in [8u8, 9] {
            cur.entry(t).or_insert_with(|| vec![0; 4096]);
            max.entry(t).or_insert_with(|| vec![0; 4096]);
        }
        let mut caps = Self { cur, max, adapter };
        if ports != 1 {
            for m in [&mut caps.cur, &mut caps.max] {
                if let Some(g) = m.get_mut(&CAP_GENERAL) {
                    crate::ifc::ifc().set(g, "cmd_hca_cap", "num_ports", u64::from(ports));
                    // Both ports in one vHCA: the RoCE address commands
                    // then name the port in vhca_port_num.
                    crate::ifc::ifc().set(g, "cmd_hca_cap", "num_vhca_ports", u64::from(ports));
                }
            }
        }
        caps
    }

    /// The capabilities an emulated HCA boots (and comes out of ENABLE_HCA)
    /// with: the recorded ones, with the port count, `cmdif_checksum` (3
    /// when [`EmuConfig::cmdif_checksum`](crate::EmuConfig::cmdif_checksum))
    /// `port_type` (0 for InfiniBand, current and maximum) and the current
    /// `cqe_version` of the configuration.
    pub(crate) fn for_config(cfg: &crate::EmuConfig) -> Self {
        let mut caps = Self::connectx4(cfg.ports);
        if cfg.cmdif_checksum {
            caps.set_general(false, "cmdif_checksum", 3);
        }
        if cfg.cqe_version != 1 {
            caps.set_general(false, "cqe_version", u64::from(cfg.cqe_version));
        }
        if cfg.port_type == crate::PortType::InfiniBand {
            caps.set_general(false, "port_type", 0);
            caps.set_general(true, "port_type", 0);
        }
        if cfg.personality != crate::Personality::ConnectX4 {
            for m in [&mut caps.cur, &mut caps.max] {
                if let Some(g) = m.get_mut(&CAP_GENERAL) {
                    crate::ifc::set_bits(g, UMEM_UID_0, 1);
                }
                // Scatter FCS for raw packet QPs (`IBV_RAW_PACKET_CAP_SCATTER_FCS`).
                if let Some(e) = m.get_mut(&CAP_ETHERNET_OFFLOADS) {
                    crate::ifc::ifc().set(
                        e,
                        "per_protocol_networking_offload_caps",
                        "scatter_fcs",
                        1,
                    );
                }
            }
            // QoS capabilities (type 0xc) with packet pacing; the
            // recorded ConnectX-4 has `qos` 0 and is never asked for them.
            caps.set_general(false, "qos", 1);
            caps.set_general(true, "qos", 1);
            let q = qos_caps(cfg.packet_pacing_cap);
            caps.cur.insert(CAP_QOS, q.clone());
            caps.max.insert(CAP_QOS, q);
            // Host-endian 8-byte atomics can be asked for (SET_HCA_CAP of
            // the atomic caps, as Linux's handle_hca_cap_atomic does);
            // the recorded ConnectX-4 cannot.
            if let Some(a) = caps.max.get_mut(&CAP_ATOMIC) {
                crate::ifc::ifc().set(
                    a,
                    "atomic_caps",
                    "supported_atomic_req_8B_endianness_mode_1",
                    1,
                );
            }
        }
        if !cfg.nic_rx_flow_tag_cap {
            for m in [&mut caps.cur, &mut caps.max] {
                if let Some(f) = m.get_mut(&7) {
                    crate::ifc::ifc().set(
                        f,
                        "flow_table_nic_cap",
                        "flow_table_properties_nic_receive.flow_tag",
                        0,
                    );
                }
            }
        }
        if !cfg.eth_csum_cap {
            for m in [&mut caps.cur, &mut caps.max] {
                if let Some(e) = m.get_mut(&CAP_ETHERNET_OFFLOADS) {
                    crate::ifc::ifc().set(e, "per_protocol_networking_offload_caps", "csum_cap", 0);
                }
            }
        }
        let ts = u64::from(cfg.effective_ts_format_caps().cap());
        for max in [false, true] {
            caps.set_general(max, "sq_ts_format", ts);
            caps.set_general(max, "rq_ts_format", ts);
            let m = if max { &mut caps.max } else { &mut caps.cur };
            if let Some(r) = m.get_mut(&CAP_ROCE) {
                crate::ifc::ifc().set(r, "roce_cap", "qp_ts_format", ts);
            }
        }
        caps
    }

    /// A field of the current QoS capabilities (0 when the device has
    /// none: `cmd_hca_cap.qos` 0).
    pub(crate) fn qos(&self, field: &str) -> u64 {
        if self.general("qos") == 0 {
            return 0;
        }
        self.cur
            .get(&CAP_QOS)
            .map_or(0, |q| crate::ifc::ifc().get(q, "qos_cap", field))
    }

    /// Whether the device paces send queues (`cmd_hca_cap.qos` and
    /// `qos_cap.packet_pacing`, Linux `mlx5_rl_is_supported`).
    pub(crate) fn packet_pacing(&self) -> bool {
        self.qos("packet_pacing") == 1
    }

    /// `roce_cap.qp_ts_format` (current).
    pub(crate) fn qp_ts_format(&self) -> u64 {
        self.cur
            .get(&CAP_ROCE)
            .map_or(0, |r| crate::ifc::ifc().get(r, "roce_cap", "qp_ts_format"))
    }

    /// Sets a general capability field, maximum (`max`) or current.
    pub(crate) fn set_general(&mut self, max: bool, field: &str, v: u64) {
        let m = if max { &mut self.max } else { &mut self.cur };
        if let Some(g) = m.get_mut(&CAP_GENERAL) {
            crate::ifc::ifc().set(g, "cmd_hca_cap", field, v);
        }
    }

    /// Whether the current general caps say `umem_uid_0`.
    pub(crate) fn umem_uid_0(&self) -> bool {
        crate::ifc::get_bits(&self.cur[&CAP_GENERAL], UMEM_UID_0) == 1
    }

    /// A general (current) capability field.
    pub(crate) fn general(&self, field: &str) -> u64 {
        crate::ifc::ifc().get(&self.cur[&CAP_GENERAL], "cmd_hca_cap", field)
    }
}

/// The QoS capability block of the later personalities: packet pacing
/// with burst bound and typical packet size, rates
/// [`PACKET_PACING_MIN_RATE`]..=[`PACKET_PACING_MAX_RATE`] kbit/s, a table
/// of [`PACKET_PACING_RATE_TABLE_SIZE`] entries; all zero but the block
/// itself without pacing (`EmuConfig::packet_pacing_cap` false).
fn qos_caps(pacing: bool) -> Vec<u8> {
    let t = crate::ifc::ifc();
    let mut q = vec![0u8; 4096];
    if pacing {
        t.set(&mut q, "qos_cap", "packet_pacing", 1);
        t.set(&mut q, "qos_cap", "packet_pacing_burst_bound", 1);
        t.set(&mut q, "qos_cap", "packet_pacing_typical_size", 1);
        t.set(
            &mut q,
            "qos_cap",
            "packet_pacing_max_rate",
            u64::from(PACKET_PACING_MAX_RATE),
        );
        t.set(
            &mut q,
            "qos_cap",
            "packet_pacing_min_rate",
            u64::from(PACKET_PACING_MIN_RATE),
        );
        t.set(
            &mut q,
            "qos_cap",
            "packet_pacing_rate_table_size",
            u64::from(PACKET_PACING_RATE_TABLE_SIZE),
        );
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_file_parses() {
        let a = recorded_answers();
        assert_eq!(a.len(), 12);
        let caps = Caps::connectx4(1);
        assert_eq!(caps.general("log_max_qp"), 14);
        assert_eq!(
            crate::ifc::ifc().get(&caps.max[&0], "cmd_hca_cap", "log_max_qp"),
            23
        );
        assert_eq!(caps.general("num_ports"), 1);
        assert_eq!(caps.adapter.len(), 256);
        assert!(parse("[x] trace_command=1\nzz\n").is_err());
        assert!(parse("00\n").is_err());
    }
}
