//! Every layout of the crate against the layout facts extracted from the
//! `mlx5_ifc` headers (`data/prm/ifc-layouts.json`): the size, and every
//! declared field's name, bit offset and width (nested layouts are layouts
//! of the registry too, so they are checked the same way). Every
//! non-reserved field of the facts is declared as well.
//!
//! The declarations in `src/` are a transcription; this test is what keeps
//! them honest. Where a declaration departs from the facts on purpose, the
//! departure is listed in [`EXCEPTIONS`] with its reason, and the test
//! checks that every listed exception is still needed.

use std::collections::BTreeSet;
use std::path::Path;

use firmware_cmds::endian::Be32;
use firmware_cmds::init_seg::{
    self, CmdifRevFwSub, CmdqAddrLSz, FwRev, HealthCounter, Initializing,
};
use firmware_cmds::layout::{FieldInfo, FieldKind, LayoutInfo};
use firmware_cmds::registry::all_layouts;
use serde_json::Value;

/// `(layout, field or "<size>", why the declaration departs from the facts)`.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "qos_cap",
        "<size>",
        "the facts end at bit 0x7e8 (0xfd bytes, not a whole dword); Linux's \
         mlx5_ifc_qos_cap_bits runs to 0x800 bits, a 0x100-byte block like \
         the other capability types",
    ),
    (
        "create_qp_in",
        "<size>",
        "classic form: the fixed part ends at 0x110 where the page list starts \
         (qpc_pas_list); the 0xc0-byte qpc_extension_and_pas_list member of the \
         union is not part of the layout (see the qp module documentation)",
    ),
    (
        "fte_match_param",
        "<size>",
        "the facts drop the 0x40-byte reserved tail (hidden behind #ifndef in \
         the source); Linux's fte_match_param is 0x200 bytes, which also makes \
         create_flow_group_in (match_criteria at 0x40, 0x400 bytes) add up",
    ),
    (
        "create_flow_group_in",
        "start_flow_index",
        "the facts (DPDK) leave everything after table_id reserved; Linux \
         mlx5_ifc: start_flow_index[0x20] at bit 0xe0",
    ),
    (
        "create_flow_group_in",
        "end_flow_index",
        "Linux mlx5_ifc: end_flow_index[0x20] at bit 0x120",
    ),
    (
        "create_flow_group_in",
        "match_criteria_enable",
        "Linux mlx5_ifc: match_criteria_enable[0x8] at bit 0x1f8",
    ),
    (
        "create_flow_group_in",
        "match_criteria",
        "Linux mlx5_ifc: struct fte_match_param match_criteria at bit 0x200",
    ),
    (
        "flow_context",
        "modify_header_id",
        "the facts leave bits 0xe0..0x120 reserved; Linux mlx5_ifc: \
         modify_header_id[0x20] at bit 0xe0",
    ),
    (
        "flow_context",
        "match_value",
        "the facts leave 0x140.. reserved; Linux mlx5_ifc: struct \
         fte_match_param match_value at bit 0x200",
    ),
    (
        "flow_context",
        "destination",
        "unparsed flexible array in the facts (union \
         dest_format_flow_counter_list destination[] at the end, 0x300)",
    ),
    (
        "set_fte_in",
        "destination",
        "where flow_context.destination lands in the message (0x40 + 0x300)",
    ),
    (
        "wq",
        "pas",
        "the facts (DPDK) omit the flexible page list; Linux mlx5_ifc: \
         struct cmd_pas_bits pas[] at the end of wq (0xc0)",
    ),
    (
        "create_sq_in",
        "pas",
        "where ctx.wq.pas lands in the message (0x20 + 0x30 + 0xc0)",
    ),
    (
        "create_rq_in",
        "pas",
        "where ctx.wq.pas lands in the message (0x20 + 0x30 + 0xc0)",
    ),
    (
        "create_rmp_in",
        "pas",
        "where ctx.wq.pas lands in the message (0x20 + 0x30 + 0xc0)",
    ),
    (
        "query_rmp_out",
        "pas",
        "where rmp_context.wq.pas lands in the message (0x20 + 0x30 + 0xc0)",
    ),
    (
        "rqtc",
        "rq_num",
        "unparsed flexible array in the facts (struct rq_num rq_num[] at 0xf0)",
    ),
    (
        "create_rqt_in",
        "rq_num",
        "where rqt_context.rq_num lands in the message (0x20 + 0xf0)",
    ),
    (
        "roce_cap",
        "roce_apm",
        "the facts hold only dword 0 of roce_cap; Linux mlx5_ifc: roce_apm[0x1] at bit 0",
    ),
    (
        "roce_cap",
        "l3_type",
        "Linux mlx5_ifc: l3_type[0x4] at bit 0x8c",
    ),
    (
        "roce_cap",
        "roce_version",
        "Linux mlx5_ifc: roce_version[0x8] at bit 0x98",
    ),
    (
        "roce_cap",
        "r_roce_dest_udp_port",
        "Linux mlx5_ifc: r_roce_dest_udp_port[0x10] at bit 0xb0 (the real \
         ConnectX-4 answers 4791 there)",
    ),
    (
        "roce_cap",
        "r_roce_max_src_udp_port",
        "Linux mlx5_ifc at bit 0xc0; the facts' roce_caps (DPDK) agree",
    ),
    (
        "roce_cap",
        "r_roce_min_src_udp_port",
        "Linux mlx5_ifc at bit 0xd0; the facts' roce_caps (DPDK) agree",
    ),
    (
        "roce_cap",
        "roce_address_table_size",
        "Linux mlx5_ifc: roce_address_table_size[0x10] at bit 0xf0",
    ),
    (
        "hca_cap_union",
        "atomic_caps",
        "the facts' union (DPDK) has no atomic member; Linux reads atomic_caps \
         for MLX5_CAP_ATOMIC from the same block",
    ),
    (
        "hca_cap_union",
        "qos_cap",
        "the member is declared at its 0x100-byte size (see qos_cap's own \
         size exception); the facts size it 2024 bits",
    ),
    (
        "hca_cap_union",
        "roce_cap",
        "the facts' union has DPDK's roce_caps; Linux reads roce_cap for \
         MLX5_CAP_ROCE",
    ),
    (
        "event_auto",
        "pages_req_event",
        "the facts' union (DPDK) omits it; Linux's EQE data union has the page \
         request event",
    ),
    (
        "create_srq_out",
        "status",
        "the facts leave the first dword reserved; every command output starts \
         with status (PRM command output header)",
    ),
    (
        "create_srq_out",
        "syndrome",
        "every command output carries the syndrome in dword 1",
    ),
    (
        "health_buffer",
        "assert_var",
        "the facts leave 0x00..0x20 reserved; Linux struct health_buffer: \
         __be32 assert_var[5] at 0",
    ),
    (
        "health_buffer",
        "rfr",
        "the facts leave dword 0x38 reserved; Linux: rfr_severity byte at 0x38, \
         recovery-flow-required in bit 7",
    ),
    (
        "health_buffer",
        "severity",
        "Linux: severity in bits 2:0 of the rfr_severity byte at 0x38",
    ),
];

/// Fields of the facts deliberately not declared, with the reason.
const UNDECLARED: &[(&str, &str, &str)] = &[
    (
        "flow_table_context",
        "anonymous_union",
        "the RTC ids / software-owner ICM roots union is software steering only \
         and its members are not sized in the facts",
    ),
    (
        "create_qp_in",
        "anonymous_union",
        "represented by its qpc_pas_list member: pas at 0x110",
    ),
    (
        "hca_cap_union",
        "cmd_hca_cap_2",
        "capability type GENERAL_2 is not declared by this crate (ConnectX-4 \
         does not have it; the trace does not query it)",
    ),
    (
        "hca_cap_union",
        "vdpa_caps",
        "capability type VDPA_EMULATION is not declared",
    ),
    (
        "hca_cap_union",
        "flow_table_esw_cap",
        "capability type ESWITCH_FLOW_TABLE is not declared",
    ),
    (
        "hca_cap_union",
        "esw_cap",
        "capability type ESWITCH is not declared",
    ),
    (
        "hca_cap_union",
        "wqe_based_flow_table_cap",
        "WQE-based flow table update capabilities are not declared",
    ),
    (
        "event_auto",
        "wqe_associated_page_fault_event",
        "on-demand paging events are not declared",
    ),
    (
        "event_auto",
        "rdma_page_fault_event",
        "on-demand paging events are not declared",
    ),
    (
        "event_auto",
        "dropped_packet_logged",
        "dropped packet log events are not declared",
    ),
    ("event_auto", "gpio_event", "GPIO events are not declared"),
    (
        "event_auto",
        "db_bf_congestion_event",
        "doorbell congestion events are not declared",
    ),
    (
        "event_auto",
        "stall_vl_event",
        "VL stall events are not declared",
    ),
];

/// Register fields of the init segment declared differently from the facts.
const REGISTER_EXCEPTIONS: &[(&str, &str)] = &[
    (
        "nic_interface",
        "Linux reads and writes three bits (>> 8 & 7, MLX5_NIC_IFC_SW_RESET = 7): \
         bits 10:8, where the facts declare 9:8",
    ),
    (
        "nic_interface_supported",
        "Linux reads three bits (>> 24 & 7) with fw_reset_supported in bit 30: \
         bits 26:24, where the facts declare 30:24",
    ),
];

fn facts() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/prm/ifc-layouts.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("ifc-layouts.json is JSON")
}

/// A field of the facts, with nested unions flattened.
#[derive(Debug, Clone)]
struct Fact {
    name: String,
    offset: u64,
    width: u64,
    ty: Option<String>,
    flexible: bool,
    top_level: bool,
}

fn fact_fields(facts: &Value, layout: &str) -> Vec<Fact> {
    let mut out = Vec::new();
    let Some(fields) = facts[layout]["fields"].as_array() else {
        return out;
    };
    for f in fields {
        let Some(offset) = f["offset"].as_u64() else {
            continue; // unparsed source text
        };
        let width = f["width"].as_u64().unwrap_or(0);
        let name = f["name"].as_str().unwrap_or("").to_string();
        let members = f["union_of"].as_array();
        out.push(Fact {
            name,
            offset,
            width,
            ty: f["type"].as_str().map(str::to_string),
            flexible: f["flexible"].as_bool().unwrap_or(false),
            top_level: true,
        });
        for m in members.into_iter().flatten() {
            if let Some(t) = m["type"].as_str() {
                for mut sub in fact_fields(facts, t) {
                    sub.offset += offset;
                    sub.top_level = false;
                    out.push(sub);
                }
            }
        }
    }
    out
}

fn is_exception(layout: &str, field: &str) -> bool {
    EXCEPTIONS
        .iter()
        .any(|&(l, f, _)| l == layout && f == field)
}

/// Why `field` of `info` does not match the facts, or `None` if it does.
fn mismatch(info: &LayoutInfo, field: &FieldInfo, facts: &[Fact]) -> Option<String> {
    let candidates: Vec<&Fact> = facts.iter().filter(|f| f.name == field.name).collect();
    if candidates.is_empty() {
        return Some(format!(
            "{}.{}: no such field in the facts",
            info.ifc, field.name
        ));
    }
    let flex = matches!(field.kind, FieldKind::Flex { .. });
    let ok = candidates.iter().any(|f| {
        let place = u64::from(field.offset) == f.offset
            && if flex {
                // A flexible array, or a zero-width array of a type (the
                // GIDs of query_hca_vport_gid_out).
                f.width == 0 && (f.flexible || f.ty.is_some())
            } else {
                u64::from(field.width) == f.width
            };
        let ty = match (field.kind, &f.ty) {
            (FieldKind::Struct(n), Some(t)) => n.ifc == t,
            _ => true,
        };
        place && ty
    });
    if ok {
        None
    } else {
        Some(format!(
            "{}.{}: declared at bit {} width {} ({:?}), facts say {:?}",
            info.ifc,
            field.name,
            field.offset,
            field.width,
            field.kind_name(),
            candidates
                .iter()
                .map(|f| (f.offset, f.width, f.ty.clone()))
                .collect::<Vec<_>>()
        ))
    }
}

trait KindName {
    fn kind_name(&self) -> &'static str;
}

impl KindName for FieldInfo {
    fn kind_name(&self) -> &'static str {
        match self.kind {
            FieldKind::Uint { .. } => "uint",
            FieldKind::Flag => "flag",
            FieldKind::Bytes => "bytes",
            FieldKind::Struct(_) => "struct",
            FieldKind::Flex { .. } => "flex",
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn every_layout_matches_the_facts() {
    let facts = facts();
    let mut errors = Vec::new();
    let mut used = BTreeSet::new();
    let mut undeclared_used = BTreeSet::new();
    let mut checked_fields = 0;

    for info in all_layouts() {
        let Some(layout) = facts.get(info.ifc) else {
            errors.push(format!("{}: not in the facts", info.ifc));
            continue;
        };
        let size_bits = layout["size"].as_u64().expect("size");
        if size_bits != info.size as u64 * 8 {
            if is_exception(info.ifc, "<size>") {
                used.insert((info.ifc, "<size>"));
            } else {
                errors.push(format!(
                    "{}: size {:#x} bytes, facts say {:#x}",
                    info.ifc,
                    info.size,
                    size_bits / 8
                ));
            }
        }
        let fields = fact_fields(&facts, info.ifc);
        for field in info.fields {
            checked_fields += 1;
            if let Some(why) = mismatch(info, field, &fields) {
                if is_exception(info.ifc, field.name) {
                    used.insert((info.ifc, field.name));
                } else {
                    errors.push(why);
                }
            }
        }
        // Every non-reserved top-level field of the facts is declared.
        for f in fields.iter().filter(|f| f.top_level) {
            if f.name.starts_with("reserved") {
                continue;
            }
            let declared = info.fields.iter().any(|d| d.name == f.name);
            let excused = UNDECLARED
                .iter()
                .any(|&(l, n, _)| l == info.ifc && n == f.name);
            if excused {
                undeclared_used.insert((info.ifc, f.name.clone()));
            }
            if declared && excused {
                errors.push(format!(
                    "{}.{}: declared but listed in UNDECLARED",
                    info.ifc, f.name
                ));
            }
            if !declared && !excused {
                errors.push(format!(
                    "{}.{}: in the facts but not declared",
                    info.ifc, f.name
                ));
            }
        }
    }

    for &(l, f, _) in EXCEPTIONS {
        if !used.contains(&(l, f)) {
            errors.push(format!(
                "exception {l}.{f} is not needed (or the layout is not registered)"
            ));
        }
    }
    for &(l, f, _) in UNDECLARED {
        if !undeclared_used.contains(&(l, f.to_string())) {
            errors.push(format!("UNDECLARED {l}.{f} is not in the facts"));
        }
    }
    assert!(
        checked_fields > 1000,
        "only {checked_fields} fields checked"
    );
    assert!(
        errors.is_empty(),
        "{} mismatches:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

/// The capability blocks declare every field the facts give them (also
/// covered by the general check; spelled out because issue 2 asks for it).
#[test]
#[cfg_attr(miri, ignore)]
fn capability_blocks_are_complete() {
    let facts = facts();
    for ifc in [
        "cmd_hca_cap",
        "per_protocol_networking_offload_caps",
        "atomic_caps",
        "roce_cap",
        "roce_caps",
        "flow_table_prop_layout",
        "flow_table_nic_cap",
    ] {
        let info = all_layouts()
            .iter()
            .find(|l| l.ifc == ifc)
            .unwrap_or_else(|| panic!("{ifc} not registered"));
        let named: Vec<String> = fact_fields(&facts, ifc)
            .into_iter()
            .filter(|f| f.top_level && !f.name.starts_with("reserved"))
            .map(|f| f.name)
            .collect();
        assert!(!named.is_empty(), "{ifc}: no fields in the facts");
        for n in &named {
            assert!(info.field(n).is_some(), "{ifc}.{n} not declared");
        }
        if ifc == "cmd_hca_cap" {
            assert!(
                named.len() > 250,
                "cmd_hca_cap has {} named fields",
                named.len()
            );
        }
    }
}

fn fact(facts: &[Fact], name: &str) -> Fact {
    facts
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("initial_seg.{name} not in the facts"))
        .clone()
}

/// Byte offset of the dword holding `name` and its mask within the dword.
fn dword_and_mask(f: &Fact) -> (u64, u32) {
    let dword = f.offset / 32 * 4;
    if f.width >= 32 {
        return (dword, u32::MAX);
    }
    let lo = 32 - (f.offset % 32) - f.width;
    let mask = ((1u32 << f.width) - 1) << lo;
    (dword, mask)
}

#[test]
#[cfg_attr(miri, ignore)]
fn init_segment_matches_the_facts() {
    let facts = facts();
    let seg = fact_fields(&facts, "initial_seg");
    assert_eq!(
        facts["initial_seg"]["size"].as_u64(),
        Some(init_seg::INIT_SEG_SIZE as u64 * 8)
    );
    for (name, offset) in [
        ("fw_rev_minor", init_seg::FW_REV_OFFSET),
        ("cmd_interface_rev", init_seg::CMDIF_REV_FW_SUB_OFFSET),
        ("cmdq_phy_addr_63_32", init_seg::CMDQ_ADDR_H_OFFSET),
        ("cmdq_phy_addr_31_12", init_seg::CMDQ_ADDR_L_SZ_OFFSET),
        ("command_doorbell_vector", init_seg::CMD_DBELL_OFFSET),
        ("initializing", init_seg::INITIALIZING_OFFSET),
        ("health_buffer", init_seg::HEALTH_BUFFER_OFFSET),
        ("no_dram_nic_offset", init_seg::NO_DRAM_NIC_OFFSET),
        ("internal_timer_h", init_seg::INTERNAL_TIMER_H_OFFSET),
        ("internal_timer_l", init_seg::INTERNAL_TIMER_L_OFFSET),
        ("clear_int", init_seg::CLEAR_INT_OFFSET),
        ("health_counter", init_seg::HEALTH_COUNTER_OFFSET),
        ("real_time", init_seg::REAL_TIME_OFFSET),
    ] {
        let (dword, _) = dword_and_mask(&fact(&seg, name));
        assert_eq!(dword, offset as u64, "initial_seg.{name}");
    }
    assert_eq!(
        fact(&seg, "health_buffer").ty.as_deref(),
        Some("health_buffer")
    );

    // The polled dwords: each field's mask, set through the bitfield type.
    let bits = |b: Be32| b.get();
    let registers: [(&str, usize, u32); 12] = [
        (
            "fw_rev_minor",
            0x000,
            bits(FwRev::new().with_fw_rev_minor(u16::MAX).into_bits()),
        ),
        (
            "fw_rev_major",
            0x000,
            bits(FwRev::new().with_fw_rev_major(u16::MAX).into_bits()),
        ),
        (
            "cmd_interface_rev",
            0x004,
            bits(
                CmdifRevFwSub::new()
                    .with_cmd_interface_rev(u16::MAX)
                    .into_bits(),
            ),
        ),
        (
            "fw_rev_subminor",
            0x004,
            bits(
                CmdifRevFwSub::new()
                    .with_fw_rev_subminor(u16::MAX)
                    .into_bits(),
            ),
        ),
        (
            "cmdq_phy_addr_31_12",
            0x014,
            bits(
                CmdqAddrLSz::new()
                    .with_cmdq_phy_addr_31_12(0xfffff)
                    .into_bits(),
            ),
        ),
        (
            "nic_interface",
            0x014,
            bits(CmdqAddrLSz::new().with_nic_interface(7).into_bits()),
        ),
        (
            "log_cmdq_size",
            0x014,
            bits(CmdqAddrLSz::new().with_log_cmdq_size(0xf).into_bits()),
        ),
        (
            "log_cmdq_stride",
            0x014,
            bits(CmdqAddrLSz::new().with_log_cmdq_stride(0xf).into_bits()),
        ),
        (
            "initializing",
            0x1fc,
            bits(Initializing::new().with_initializing(true).into_bits()),
        ),
        (
            "nic_interface_supported",
            0x1fc,
            bits(
                Initializing::new()
                    .with_nic_interface_supported(7)
                    .into_bits(),
            ),
        ),
        (
            "health_syndrome",
            0x1010,
            bits(
                HealthCounter::new()
                    .with_health_syndrome(u8::MAX)
                    .into_bits(),
            ),
        ),
        (
            "health_counter",
            0x1010,
            bits(
                HealthCounter::new()
                    .with_health_counter(0xff_ffff)
                    .into_bits(),
            ),
        ),
    ];
    let mut used = BTreeSet::new();
    for (name, dword, mask) in registers {
        let (d, m) = dword_and_mask(&fact(&seg, name));
        let matches = d == dword as u64 && m == mask;
        match REGISTER_EXCEPTIONS.iter().find(|&&(n, _)| n == name) {
            Some(_) => {
                assert!(!matches, "register exception {name} is not needed");
                assert_eq!(d, dword as u64, "{name}: dword");
                used.insert(name);
            }
            None => assert!(
                matches,
                "initial_seg.{name}: declared dword {dword:#x} mask {mask:#010x}, facts {d:#x} {m:#010x}"
            ),
        }
    }
    assert_eq!(used.len(), REGISTER_EXCEPTIONS.len());
}
