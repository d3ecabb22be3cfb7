//! `hca info [-v]`: the device and its ports, with the fields and layout of
//! rdma-core's `ibv_devinfo [-v]`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use firmware_cmds::vport::HcaVportContext;
use hca_driver::verbs::{AtomicByteOrder, Context, Gid, RoceVersion};
use hca_driver::{Guid, IbMtu, LinkLayer, PortState};
use platform::Platform;
use serde::Serialize;

use crate::cmd::devattr::{self, Format};
use crate::device::{Device, DeviceDesc, OpenOptions, Selection, ToolHca};
use crate::error::{Result, ToolError};
use crate::output::json;

/// Arguments of `hca info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Also print the device's capability limits and each port's GIDs (as
    /// `ibv_devinfo -v`).
    #[arg(short, long)]
    verbose: bool,
}

/// `IBV_TRANSPORT_IB`: mlx5 devices report the InfiniBand transport on
/// both link layers (RoCE is the IB transport over Ethernet).
const TRANSPORT_IB: u8 = 0;

/// One GID table entry.
#[derive(Debug, Serialize)]
pub struct GidEntry {
    /// Index in the port's GID table.
    pub index: u16,
    /// The GID in colon form (`fe80::7efe:90ff:fe58:7d01`, as every
    /// `--json` output writes GIDs; the text shows ibv_devinfo's 8 groups).
    #[serde(serialize_with = "ser_gid")]
    pub gid: Gid,
    /// On Ethernet, the RoCE version of the entry (`RoCE v1` or `RoCE
    /// v2`), as ibv_devinfo prints it after the GID: a Linux peer's
    /// `-g <index>` must name an entry of the same version.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub gid_type: Option<&'static str>,
}

fn ser_gid<S: serde::Serializer>(g: &Gid, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&crate::rdma::gid_ipv6(&g.0))
}

/// One port, as `ibv_devinfo` shows it.
#[derive(Debug, Serialize)]
pub struct PortReport {
    /// The port (1-based).
    pub port: u8,
    /// `PORT_ACTIVE`...
    pub state: String,
    /// `IBV_PORT_*` value.
    pub state_num: u8,
    /// Largest MTU in bytes (null: none fits).
    pub max_mtu: Option<u32>,
    /// Active MTU in bytes.
    pub active_mtu: Option<u32>,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// Port LID.
    pub port_lid: u16,
    /// LID mask control.
    pub port_lmc: u8,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
    /// Why the port is down (null when it is not).
    pub down_reason: Option<String>,
    /// Speed in Mb/s when the link is up (from PTYS).
    pub speed_mbps: Option<u32>,
    /// MAC address (Ethernet port 1).
    pub mac: Option<String>,
    /// Largest message (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_msg_sz: Option<u64>,
    /// Subnet manager SL (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sm_sl: Option<u8>,
    /// P_Key table length (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pkey_tbl_len: Option<u64>,
    /// GID table length (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid_tbl_len: Option<u64>,
    /// Subnet timeout (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet_timeout: Option<u8>,
    /// Init type reply (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_type_reply: Option<u8>,
    /// `enum ibv_width` code in operation (`-v`; 0 when down).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_width: Option<u8>,
    /// `enum ibv_speed` code in operation (`-v`; 0 when down).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_speed: Option<u8>,
    /// The GIDs that are set (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gids: Option<Vec<GidEntry>>,
}

/// The device, as `ibv_devinfo` shows it.
#[derive(Debug, Serialize)]
pub struct InfoReport {
    /// The device's name (`hca_id`): its PCI address, or `emu`.
    pub hca_id: String,
    /// What the platform says it is.
    pub device: String,
    /// `InfiniBand`.
    pub transport: &'static str,
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: String,
    /// System image GUID.
    pub sys_image_guid: String,
    /// IEEE vendor id.
    pub vendor_id: u32,
    /// PCI device id.
    pub vendor_part_id: u32,
    /// PCI revision.
    pub hw_ver: u32,
    /// Board id (PSID).
    pub board_id: String,
    /// Number of ports.
    pub phys_port_cnt: u8,
    /// `ibv_device_attr.atomic_cap`, as Linux mlx5_ib computes it.
    pub atomic_cap: &'static str,
    /// Byte order of the 8-byte operands the device reads, writes and
    /// returns for RDMA atomics (`host` or `big-endian`; null when it
    /// executes none).
    pub atomic_byte_order: Option<&'static str>,
    /// Capability limits by `ibv_device_attr` name (`-v`), in
    /// `ibv_devinfo -v` order.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_attrs")]
    pub attributes: Option<Vec<devattr::Attr>>,
    /// `hca_core_clock` in kHz (`-v`; 0 when not reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hca_core_clock_khz: Option<u64>,
    /// The ports.
    pub ports: Vec<PortReport>,
}

fn ser_attrs<S: serde::Serializer>(
    attrs: &Option<Vec<devattr::Attr>>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let attrs = attrs.as_deref().unwrap_or_default();
    let mut m = s.serialize_map(Some(attrs.len()))?;
    for a in attrs {
        m.serialize_entry(a.name, &a.value)?;
    }
    m.end()
}

/// libibverbs' test for an unset GID: the interface id (bytes 8..16) is 0.
fn null_gid(g: &[u8; 16]) -> bool {
    g[8..].iter().all(|&b| b == 0)
}

fn mtu_bytes(m: Option<IbMtu>) -> Option<u32> {
    m.map(IbMtu::bytes)
}

/// Queries the device, its ports and their GIDs, as `ibv_devinfo`.
fn info(hca: &Arc<ToolHca>, dev: &DeviceDesc, verbose: bool) -> Result<InfoReport> {
    // As ibv_devinfo: open a verbs context (which sets up RoCE and GID
    // 0 on Ethernet ports, as the kernel does for libibverbs), then
    // query the device, every port and its GIDs.
    let ctx = Context::open(hca).map_err(|e| ToolError::driver("opening a verbs context", e))?;
    let info = hca.info();
    let caps = hca.caps();
    let d = ctx.query_device();
    let mut ports = Vec::new();
    for p in 1..=d.phys_port_cnt {
        ports.push(port_report(&ctx, p, caps.link_layer(), verbose, dev)?);
    }
    let attributes = verbose.then(|| devattr::device_attrs(d, caps));
    Ok(InfoReport {
        hca_id: dev.selection.hca_id().to_string(),
        device: dev.describe.clone(),
        transport: "InfiniBand",
        fw_ver: d.fw_ver.map(|v| v.to_string()).unwrap_or_default(),
        node_guid: Guid(d.node_guid).to_string(),
        sys_image_guid: Guid(d.sys_image_guid).to_string(),
        vendor_id: d.vendor_id,
        vendor_part_id: d.vendor_part_id,
        hw_ver: d.hw_ver,
        board_id: info.board_id().to_string(),
        phys_port_cnt: d.phys_port_cnt,
        atomic_cap: devattr::atomic_cap_str(devattr::atomic_cap_num(d.atomic_cap)),
        atomic_byte_order: d.atomic_ops.then(|| byte_order_name(d.atomic_byte_order)),
        attributes,
        hca_core_clock_khz: verbose.then(|| devattr::hca_core_clock_khz(caps)),
        ports,
    })
}

/// `host` or `big-endian`.
pub fn byte_order_name(o: AtomicByteOrder) -> &'static str {
    match o {
        AtomicByteOrder::Host => "host",
        AtomicByteOrder::BigEndian => "big-endian",
    }
}

/// What `info` says about atomics: the byte order, and why atomic_cap is
/// what it is.
fn atomics_text(r: &InfoReport) -> String {
    match r.atomic_byte_order {
        None => "none (the device executes no 8-byte RDMA atomics)".to_string(),
        Some("host") => "8-byte, operands in host byte order".to_string(),
        Some(o) => format!(
            "8-byte, operands {o} (atomic_req_8B_endianness_mode 0), so atomic_cap is {} as Linux reports it",
            r.atomic_cap
        ),
    }
}

/// Why a port in state `state` is down, if it is.
fn down_reason(state: PortState, dev: &DeviceDesc) -> Option<String> {
    if state != PortState::Down {
        return None;
    }
    Some(if dev.selection == Selection::Emulator {
        "no link: this emulated HCA's port has no cable (info and caps run one emulated HCA; pingpong and perf cable two together)".to_string()
    } else {
        "no link: no cable, or the port at its other end (or the switch) is down".to_string()
    })
}

fn port_report<P: Platform + 'static>(
    ctx: &Context<P>,
    port: u8,
    ll: LinkLayer,
    verbose: bool,
    dev: &DeviceDesc,
) -> Result<PortReport> {
    let hca = ctx.hca();
    let p = ctx
        .query_port(port)
        .map_err(|e| ToolError::driver(format!("querying port {port}"), e))?;
    // InfiniBand: the subnet manager's view from the HCA vport context;
    // on Ethernet these are all 0.
    let vport = if ll == LinkLayer::InfiniBand {
        let ctx = hca
            .hca_vport_context(port)
            .map_err(|e| ToolError::driver(format!("port {port}: QUERY_HCA_VPORT_CONTEXT"), e))?;
        Some(ctx)
    } else {
        None
    };
    let vport_get = |f: fn(&HcaVportContext) -> u64| vport.as_ref().map_or(0, f);
    let mut r = PortReport {
        port,
        state: p.state.to_string(),
        state_num: p.state as u8,
        max_mtu: mtu_bytes(p.max_mtu),
        active_mtu: mtu_bytes(p.active_mtu),
        sm_lid: vport_get(|c| u64::from(c.get(HcaVportContext::sm_lid))) as u16,
        port_lid: p.lid,
        port_lmc: vport_get(|c| u64::from(c.get(HcaVportContext::lmc))) as u8,
        link_layer: p.link_layer.to_string(),
        down_reason: down_reason(p.state, dev),
        speed_mbps: p.speed_mbps,
        mac: p.mac.map(|m| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        }),
        max_msg_sz: None,
        sm_sl: None,
        pkey_tbl_len: None,
        gid_tbl_len: None,
        subnet_timeout: None,
        init_type_reply: None,
        active_width: None,
        active_speed: None,
        gids: None,
    };
    if verbose {
        r.max_msg_sz = Some(p.max_msg_sz);
        r.sm_sl = Some(vport_get(|c| u64::from(c.get(HcaVportContext::sm_sl))) as u8);
        r.pkey_tbl_len = Some(p.pkey_tbl_len.into());
        r.gid_tbl_len = Some(p.gid_tbl_len.into());
        r.subnet_timeout =
            Some(vport_get(|c| u64::from(c.get(HcaVportContext::subnet_timeout))) as u8);
        r.init_type_reply =
            Some(vport_get(|c| u64::from(c.get(HcaVportContext::init_type_reply))) as u8);
        r.active_width = Some(p.active_width);
        r.active_speed = Some(p.active_speed);
        let mut gids = Vec::new();
        for index in 0..p.gid_tbl_len.min(u32::from(u16::MAX)) as u16 {
            let fail = |e| ToolError::driver(format!("port {port}: GID {index}"), e);
            // On Ethernet one QUERY_ROCE_ADDRESS gives the GID and its RoCE
            // version (an empty entry is None); on InfiniBand the GID alone.
            let entry = if ll == LinkLayer::Ethernet {
                ctx.query_gid_entry(port, index).map_err(fail)?.map(|e| {
                    let t = match e.version {
                        RoceVersion::V1 => "RoCE v1",
                        RoceVersion::V2 => "RoCE v2",
                    };
                    (e.gid, Some(t))
                })
            } else {
                let g = ctx.query_gid(port, index).map_err(fail)?;
                (!null_gid(&g.0)).then_some((g, None))
            };
            if let Some((gid, gid_type)) = entry {
                gids.push(GidEntry {
                    index,
                    gid,
                    gid_type,
                });
            }
        }
        r.gids = Some(gids);
    }
    Ok(r)
}

/// `name:` followed by tabs up to column `col` (tab stops every 8), as
/// ibv_devinfo aligns its values; at least one tab.
fn field(indent: usize, name: &str, col: usize) -> String {
    let mut s = "\t".repeat(indent);
    s.push_str(name);
    s.push(':');
    let mut at = indent * 8 + name.len() + 1;
    loop {
        s.push('\t');
        at = (at / 8 + 1) * 8;
        if at >= col {
            break;
        }
    }
    s
}

fn mtu_text(m: Option<u32>) -> String {
    match m.and_then(IbMtu::fitting) {
        Some(m) => m.to_string(),
        None => "invalid MTU (0)".to_string(),
    }
}

/// Writes the report in ibv_devinfo's layout.
pub fn write_text(r: &InfoReport, out: &mut dyn Write) -> Result<()> {
    const DEV: usize = 40;
    const PORT: usize = 48;
    writeln!(out, "hca_id:\t{}", r.hca_id)?;
    writeln!(
        out,
        "{}{} ({TRANSPORT_IB})",
        field(1, "transport", DEV),
        r.transport
    )?;
    if !r.fw_ver.is_empty() {
        writeln!(out, "{}{}", field(1, "fw_ver", DEV), r.fw_ver)?;
    }
    writeln!(out, "{}{}", field(1, "node_guid", DEV), r.node_guid)?;
    writeln!(
        out,
        "{}{}",
        field(1, "sys_image_guid", DEV),
        r.sys_image_guid
    )?;
    writeln!(out, "{}{:#06x}", field(1, "vendor_id", DEV), r.vendor_id)?;
    writeln!(
        out,
        "{}{}",
        field(1, "vendor_part_id", DEV),
        r.vendor_part_id
    )?;
    writeln!(out, "{}0x{:X}", field(1, "hw_ver", DEV), r.hw_ver)?;
    if !r.board_id.is_empty() {
        writeln!(out, "{}{}", field(1, "board_id", DEV), r.board_id)?;
    }
    writeln!(out, "{}{}", field(1, "phys_port_cnt", DEV), r.phys_port_cnt)?;
    writeln!(out, "{}{}", field(1, "atomics", DEV), atomics_text(r))?;
    if let Some(attrs) = &r.attributes {
        for a in attrs {
            let v = match a.format {
                Format::Dec => a.value.to_string(),
                Format::Hex => format!("{:#x}", a.value),
                Format::Atomic => format!("{} ({})", devattr::atomic_cap_str(a.value), a.value),
            };
            writeln!(out, "{}{v}", field(1, a.name, DEV))?;
        }
        match r.hca_core_clock_khz {
            Some(k) if k > 0 => writeln!(out, "{}{k}kHZ", field(1, "hca_core_clock", DEV))?,
            _ => writeln!(out, "\tcore clock not supported")?,
        }
    }
    for p in &r.ports {
        writeln!(out, "\t\tport:\t{}", p.port)?;
        writeln!(
            out,
            "{}{} ({})",
            field(3, "state", PORT),
            p.state,
            p.state_num
        )?;
        if let Some(why) = &p.down_reason {
            writeln!(out, "{}{why}", field(3, "down_reason", PORT))?;
        }
        writeln!(out, "{}{}", field(3, "max_mtu", PORT), mtu_text(p.max_mtu))?;
        writeln!(
            out,
            "{}{}",
            field(3, "active_mtu", PORT),
            mtu_text(p.active_mtu)
        )?;
        writeln!(out, "{}{}", field(3, "sm_lid", PORT), p.sm_lid)?;
        writeln!(out, "{}{}", field(3, "port_lid", PORT), p.port_lid)?;
        writeln!(out, "{}0x{:02x}", field(3, "port_lmc", PORT), p.port_lmc)?;
        writeln!(out, "{}{}", field(3, "link_layer", PORT), p.link_layer)?;
        if let Some(v) = p.max_msg_sz {
            writeln!(out, "{}{v:#x}", field(3, "max_msg_sz", PORT))?;
        }
        // Not printed: port_cap_flags, port_cap_flags2, max_vl_num,
        // bad_pkey_cntr, qkey_viol_cntr and phys_state, which the verbs
        // API's query_port does not report.
        if let Some(v) = p.sm_sl {
            writeln!(out, "{}{v}", field(3, "sm_sl", PORT))?;
        }
        if let Some(v) = p.pkey_tbl_len {
            writeln!(out, "{}{v}", field(3, "pkey_tbl_len", PORT))?;
        }
        if let Some(v) = p.gid_tbl_len {
            writeln!(out, "{}{v}", field(3, "gid_tbl_len", PORT))?;
        }
        if let Some(v) = p.subnet_timeout {
            writeln!(out, "{}{v}", field(3, "subnet_timeout", PORT))?;
        }
        if let Some(v) = p.init_type_reply {
            writeln!(out, "{}{v}", field(3, "init_type_reply", PORT))?;
        }
        if let Some(w) = p.active_width {
            writeln!(
                out,
                "{}{}X ({w})",
                field(3, "active_width", PORT),
                devattr::width_str(w)
            )?;
        }
        if let Some(v) = p.active_speed {
            writeln!(
                out,
                "{}{} ({v})",
                field(3, "active_speed", PORT),
                devattr::speed_str(v)
            )?;
        }
        if let Some(gids) = &p.gids {
            for g in gids {
                write!(
                    out,
                    "{}{}",
                    field(3, &format!("GID[{:3}]", g.index), PORT),
                    g.gid
                )?;
                match g.gid_type {
                    Some(t) => writeln!(out, ", {t}")?,
                    None => writeln!(out)?,
                }
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `hca info`.
pub fn run(
    a: &InfoArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let verbose = a.verbose;
    let dev = Device::open(sel, open)?;
    let r = info(dev.hca(), dev.desc(), verbose);
    let report = dev.finish(r)?;
    if as_json {
        json(out, &report)?;
    } else {
        write_text(&report, out)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_align_like_ibv_devinfo() {
        assert_eq!(field(1, "max_qp", 40), "\tmax_qp:\t\t\t\t");
        assert_eq!(field(1, "max_qp_wr", 40), "\tmax_qp_wr:\t\t\t");
        assert_eq!(field(1, "max_res_rd_atom", 40), "\tmax_res_rd_atom:\t\t");
        assert_eq!(
            field(1, "max_total_mcast_qp_attach", 40),
            "\tmax_total_mcast_qp_attach:\t"
        );
        assert_eq!(field(1, "transport", 40), "\ttransport:\t\t\t");
        assert_eq!(field(3, "state", 48), "\t\t\tstate:\t\t\t");
        assert_eq!(field(3, "max_mtu", 48), "\t\t\tmax_mtu:\t\t");
        assert_eq!(field(3, "port_lmc", 48), "\t\t\tport_lmc:\t\t");
        assert_eq!(field(3, "GID[  0]", 48), "\t\t\tGID[  0]:\t\t");
        assert!(null_gid(&[
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        ]));
        assert_eq!(
            hca_driver::verbs::Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1])
                .to_string(),
            "fe80:0000:0000:0000:0200:0000:0000:0001"
        );
    }
}
