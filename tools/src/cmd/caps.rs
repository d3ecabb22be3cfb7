//! `hca caps`: every capability of the device by PRM name, walking each
//! capability block's layout table, current or maximum values.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use firmware_cmds::caps::{
    AtomicCaps, CmdHcaCap, FlowTableNicCap, PerProtocolNetworkingOffloadCaps, RoceCap,
};
use firmware_cmds::layout::Layout;
use hca_driver::{CapMode, CapPair};
use serde::Serialize;
use serde::ser::SerializeMap;

use crate::decode::{self, Fields, Node};
use crate::device::{Device, OpenOptions, Selection, ToolHca};
use crate::error::{Result, ToolError};
use crate::output::{Table, json};

/// A capability type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CapType {
    /// General device capabilities (`cmd_hca_cap`, type 0x0).
    General,
    /// Ethernet offloads (`per_protocol_networking_offload_caps`, type 0x1).
    Eth,
    /// Atomics (`atomic_caps`, type 0x3).
    Atomic,
    /// RoCE (`roce_cap`, type 0x4).
    Roce,
    /// NIC flow tables (`flow_table_nic_cap`, type 0x7).
    Flow,
    /// Every type the device reports.
    All,
}

/// Arguments of `hca caps`.
#[derive(Debug, Args)]
pub struct CapsArgs {
    /// Which capability block.
    #[arg(long = "type", short = 't', value_enum, default_value = "all")]
    cap_type: CapType,
    /// Print what the device supports at most (HCA_CAP_OP_MOD_GET_MAX)
    /// instead of what is in effect (HCA_CAP_OP_MOD_GET_CUR).
    #[arg(long)]
    max: bool,
}

/// One decoded capability block.
pub struct Block {
    /// The type's name (`GENERAL`...).
    pub name: &'static str,
    /// Capability type number.
    pub cap_type: u16,
    /// The layout's `mlx5_ifc` name.
    pub ifc: &'static str,
    /// Every field.
    pub fields: Vec<Node>,
}

/// The blocks of one run.
pub struct CapsReport {
    /// `current` or `max`.
    pub mode: &'static str,
    /// The blocks, in type order.
    pub blocks: Vec<Block>,
}

impl Serialize for CapsReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.blocks.len() + 1))?;
        m.serialize_entry("mode", self.mode)?;
        for b in &self.blocks {
            m.serialize_entry(&b.name.to_ascii_lowercase(), &Fields(&b.fields))?;
        }
        m.end()
    }
}

fn block_of<C: Layout>(name: &'static str, cap_type: u16, c: &C) -> Block {
    Block {
        name,
        cap_type,
        ifc: C::INFO.ifc,
        fields: decode::decode(&C::INFO, c.bytes(), None),
    }
}

fn pick<C>(p: &CapPair<C>, mode: CapMode) -> &C {
    match mode {
        CapMode::Max => &p.max,
        CapMode::Current => &p.cur,
    }
}

struct Caps {
    which: CapType,
    mode: CapMode,
}

impl Caps {
    fn wants(&self, t: CapType) -> bool {
        self.which == CapType::All || self.which == t
    }
}

impl Caps {
    /// Reads the asked capability blocks of `hca`.
    fn read(&self, hca: &ToolHca) -> Result<CapsReport> {
        let caps = hca.caps();
        let g = caps.general();
        let explicit = self.which != CapType::All;
        let missing = |name, flag| ToolError::CapsNotSupported { name, flag };
        let mut blocks = Vec::new();
        if self.wants(CapType::General) {
            blocks.push(block_of("GENERAL", 0, pick(&caps.general, self.mode)));
        }
        if self.wants(CapType::Eth) {
            match &caps.ethernet {
                Some(p) => blocks.push(block_of::<PerProtocolNetworkingOffloadCaps>(
                    "ETHERNET_OFFLOADS",
                    1,
                    pick(p, self.mode),
                )),
                None if explicit => return Err(missing("ETHERNET_OFFLOADS", "eth_net_offloads")),
                None => {}
            }
        }
        if self.wants(CapType::Atomic) {
            match &caps.atomic {
                Some(p) => blocks.push(block_of::<AtomicCaps>("ATOMIC", 3, pick(p, self.mode))),
                None if explicit => return Err(missing("ATOMIC", "atomic")),
                None => {}
            }
        }
        if self.wants(CapType::Roce) {
            match &caps.roce {
                Some(p) => blocks.push(block_of::<RoceCap>("ROCE", 4, pick(p, self.mode))),
                None if explicit => return Err(missing("ROCE", "roce")),
                None => {}
            }
        }
        if self.wants(CapType::Flow) {
            if g.get(CmdHcaCap::nic_flow_table) {
                // The driver does not keep this block: query it now.
                let c: FlowTableNicCap = hca.query_cap(self.mode).map_err(|e| {
                    ToolError::driver("QUERY_HCA_CAP of the NIC flow table capabilities", e)
                })?;
                blocks.push(block_of("FLOW_TABLE", 7, &c));
            } else if explicit {
                return Err(missing("FLOW_TABLE", "nic_flow_table"));
            }
        }
        Ok(CapsReport {
            mode: match self.mode {
                CapMode::Max => "max",
                CapMode::Current => "current",
            },
            blocks,
        })
    }
}

/// `hca caps`.
pub fn run(
    a: &CapsArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let mode = if a.max {
        CapMode::Max
    } else {
        CapMode::Current
    };
    let caps = Caps {
        which: a.cap_type,
        mode,
    };
    let dev = Device::open(sel, open)?;
    let r = caps.read(dev.hca());
    let report = dev.finish(r)?;
    if as_json {
        json(out, &report)?;
        return Ok(ExitCode::SUCCESS);
    }
    for (i, b) in report.blocks.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "{} capabilities (type {:#x}, {}, {}):",
            b.name, b.cap_type, b.ifc, report.mode
        )?;
        let mut rows = Vec::new();
        decode::flatten(&b.fields, "", &mut rows);
        let mut t = Table::new(&["  FIELD", "VALUE"]);
        for (name, value) in rows {
            t.row(vec![format!("  {name}"), value]);
        }
        t.write(out)?;
    }
    Ok(ExitCode::SUCCESS)
}
