//! HCA lifecycle: ENABLE/INIT/TEARDOWN/DISABLE_HCA, ISSI, pages,
//! capabilities, adapter identity.

use super::{Cmd, Fail, HcaState, R, fail, st};
use crate::config::IssiSupport;
use crate::device::Device;
use crate::ifc::ifc;
use crate::personality::{CAP_ATOMIC, CAP_GENERAL, CAP_ROCE, Caps, recorded_answers};
use crate::syndrome as syn;

/// `resd_lkey` answered by QUERY_SPECIAL_CONTEXTS (synthesized).
pub const RESD_LKEY: u32 = 0x0000_0a00;
/// `null_mkey` answered by QUERY_SPECIAL_CONTEXTS (synthesized).
pub const NULL_MKEY: u32 = 0x0000_0b00;
/// `dump_fill_mkey` answered by QUERY_SPECIAL_CONTEXTS (synthesized).
pub const DUMP_FILL_MKEY: u32 = 0x0000_0c00;

/// Most pages the firmware accepts to hold.
const MAX_PAGES: usize = 1 << 22;

pub(crate) fn enable_hca(d: &mut Device, c: &Cmd) -> R {
    if c.get("function_id") != 0 {
        return fail(st::BAD_PARAM, syn::BAD_FUNCTION_ID);
    }
    let p = &mut d.fw.pages;
    p.boot_given = 0;
    p.init_given = 0;
    p.regular_wanted = 0;
    p.to_return = 0;
    p.pinned.clear();
    d.fw.issi = 0;
    d.fw.caps = Caps::for_config(&d.cfg);
    d.fw.rate_limits.clear();
    d.fw.state = HcaState::Enabled;
    c.out().done()
}

pub(crate) fn disable_hca(d: &mut Device, c: &Cmd) -> R {
    if c.get("function_id") != 0 {
        return fail(st::BAD_PARAM, syn::BAD_FUNCTION_ID);
    }
    // Pages still held are lost to the driver: a leak.
    let held: Vec<u64> = std::mem::take(&mut d.fw.pages.held).into_iter().collect();
    d.fw.pages.pinned.clear();
    d.fw.pages_lost.extend(held);
    d.fw.state = HcaState::Disabled;
    c.out().done()
}

pub(crate) fn init_hca(d: &mut Device, c: &Cmd) -> R {
    let p = &d.fw.pages;
    if p.boot_given < p.boot_wanted || p.init_given < p.init_wanted {
        return fail(st::BAD_SYS_STATE, syn::INIT_PAGES_MISSING);
    }
    d.fw.state = HcaState::Initialized;
    // The link of an InfiniBand port comes up with INIT_HCA and the
    // subnet manager configures it (Linux: INIT_HCA brings the link up
    // unless disable_link_up_by_init_hca).
    for p in 1..=d.fw.ports.len() as u8 {
        d.ib_port_check(p);
    }
    c.out().done()
}

pub(crate) fn teardown_hca(d: &mut Device, c: &Cmd) -> R {
    let profile = c.get("profile");
    if profile > 1 {
        return fail(st::BAD_PARAM, syn::BAD_TEARDOWN_PROFILE);
    }
    let live = d.fw.objs.live();
    d.fw.leaked_at_teardown.extend(live);
    d.fw.objs.clear();
    d.fw.rate_limits.clear();
    d.engine = Default::default();
    d.fw.state = HcaState::TornDown;
    for p in 1..=d.fw.ports.len() as u8 {
        d.ib_port_check(p);
    }
    c.out().done()
}

pub(crate) fn query_issi(d: &mut Device, c: &Cmd) -> R {
    let mask = match d.cfg.issi {
        IssiSupport::Recorded => None,
        IssiSupport::Only0 => Some(1),
        IssiSupport::ZeroMask => Some(0),
        IssiSupport::NoQueryIssi => return fail(st::BAD_OP, syn::BAD_OPCODE),
    };
    let mut o = c.out();
    let rec = recorded_answers()
        .into_iter()
        .find(|a| a.title == "QUERY_ISSI")
        .map(|a| a.bytes)
        .unwrap_or_default();
    o.put(16, &rec);
    if let Some(m) = mask {
        o.set("supported_issi_dw0", m);
    }
    o.set("current_issi", u64::from(d.fw.issi));
    o.done()
}

/// The ISSI values this function supports (`supported_issi_dw0`).
pub(crate) fn supported_issi(d: &Device) -> u32 {
    match d.cfg.issi {
        IssiSupport::Recorded => recorded_supported_issi(),
        IssiSupport::Only0 | IssiSupport::ZeroMask | IssiSupport::NoQueryIssi => 1,
    }
}

/// The ISSI values the recorded firmware supports (`supported_issi_dw0`).
fn recorded_supported_issi() -> u32 {
    let rec = recorded_answers()
        .into_iter()
        .find(|a| a.title == "QUERY_ISSI")
        .map(|a| a.bytes)
        .unwrap_or_default();
    let mut full = vec![0u8; 16];
    full.extend(rec);
    ifc().get(&full, "query_issi_out", "supported_issi_dw0") as u32
}

pub(crate) fn set_issi(d: &mut Device, c: &Cmd) -> R {
    let v = c.get("current_issi");
    if v >= 32 || supported_issi(d) & (1 << v) == 0 {
        return fail(st::BAD_PARAM, syn::ISSI_UNSUPPORTED);
    }
    d.fw.issi = v as u16;
    c.out().done()
}

pub(crate) fn query_pages(d: &mut Device, c: &Cmd) -> R {
    let p = &d.fw.pages;
    let n: i64 = match c.op_mod {
        1 => i64::from(p.boot_wanted.saturating_sub(p.boot_given)),
        2 => i64::from(p.init_wanted.saturating_sub(p.init_given)),
        3 => i64::from(p.regular_wanted) - i64::from(p.to_return),
        _ => return fail(st::BAD_PARAM, syn::PAGES_OP_MOD),
    };
    c.out().set("num_pages", n as i32 as u32 as u64).done()
}

pub(crate) fn manage_pages(d: &mut Device, c: &Cmd) -> R {
    if c.get("function_id") != 0 || c.get("embedded_cpu_function") != 0 {
        return fail(st::BAD_PARAM, syn::BAD_FUNCTION_ID);
    }
    let n = c.get("input_num_entries") as usize;
    match c.op_mod {
        // Allocation failed: the driver cannot give what was asked.
        0 => {
            d.fw.pages.regular_wanted = 0;
            c.out().done()
        }
        1 => give_pages(d, c, n),
        2 => take_pages(d, c, n),
        _ => fail(st::BAD_PARAM, syn::BAD_OP_MOD),
    }
}

fn give_pages(d: &mut Device, c: &Cmd, n: usize) -> R {
    if c.pas_room("pas") < n {
        return fail(st::BAD_INP_LEN, syn::PAGES_LIST_SHORT);
    }
    if d.fw.pages.held.len() + n > MAX_PAGES {
        return fail(st::LIM_EXCEEDED, syn::PAGES_TOO_MANY);
    }
    let mut list = Vec::with_capacity(n);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..n {
        let a = c.pas("pas", i);
        if a & 0xfff != 0 {
            return fail(st::BAD_PARAM, syn::PAGE_MISALIGNED);
        }
        if d.fw.pages.held.contains(&a) || !seen.insert(a) {
            return fail(st::BAD_PARAM, syn::PAGE_DUPLICATE);
        }
        list.push(a);
    }
    for &a in &list {
        if !d.iommu.is_mapped(a, 4096) {
            d.iommu.fault(
                crate::iommu::FaultKind::Write,
                a,
                4096,
                "MANAGE_PAGES: firmware page not mapped",
            );
            return fail(st::BAD_PARAM, syn::PAGE_NOT_MAPPED);
        }
    }
    // The firmware takes the pages into use (it writes its own data there).
    for &a in &list {
        let _ = d
            .iommu
            .write(a, b"ICM page", &|| format!("firmware page {a:#x}"));
        d.fw.pages.held.insert(a);
    }
    let p = &mut d.fw.pages;
    for &a in &list {
        if p.boot_given < p.boot_wanted {
            p.boot_given += 1;
            p.pinned.insert(a);
        } else if p.init_given < p.init_wanted {
            p.init_given += 1;
            p.pinned.insert(a);
        } else if p.regular_wanted > 0 {
            p.regular_wanted -= 1;
        }
    }
    c.out().done()
}

fn take_pages(d: &mut Device, c: &Cmd, n: usize) -> R {
    let initialized = d.fw.state == HcaState::Initialized;
    let p = &mut d.fw.pages;
    // Regular pages first; boot and init pages only once the HCA is not
    // initialized.
    let mut give_back: Vec<u64> = p
        .held
        .iter()
        .filter(|a| !p.pinned.contains(a))
        .copied()
        .take(n)
        .collect();
    if !initialized && give_back.len() < n {
        let more: Vec<u64> = p.pinned.iter().copied().take(n - give_back.len()).collect();
        give_back.extend(more);
    }
    let need = 16 + 8 * give_back.len();
    if c.out_len < need {
        return fail(st::BAD_OUTP_LEN, syn::PAGES_OUT_SHORT);
    }
    let mut o = c.out();
    o.set("output_num_entries", give_back.len() as u64);
    for (i, &a) in give_back.iter().enumerate() {
        o.put(16 + 8 * i, &a.to_be_bytes());
        p.held.remove(&a);
        if p.pinned.remove(&a) {
            if p.init_given > 0 {
                p.init_given -= 1;
            } else {
                p.boot_given = p.boot_given.saturating_sub(1);
            }
        }
    }
    p.to_return = p.to_return.saturating_sub(give_back.len() as u32);
    o.done()
}

pub(crate) fn query_hca_cap(d: &mut Device, c: &Cmd) -> R {
    let ty = (c.op_mod >> 1) as u8;
    let cur = c.op_mod & 1 == 1;
    let map = if cur { &d.fw.caps.cur } else { &d.fw.caps.max };
    let Some(b) = map.get(&ty) else {
        return fail(st::BAD_PARAM, syn::CAP_TYPE);
    };
    let off = ifc().field(c.lout, "capability").byte_offset();
    // The output must hold the capability structure asked for, not the
    // whole 4 KiB union: rdma-core's DevX tests ask for the general caps
    // with 16 + 2048 bytes (QueryCmdHcaCapOut) and real firmware answers.
    let layout = match ty {
        CAP_GENERAL => "cmd_hca_cap",
        1 => "per_protocol_networking_offload_caps",
        2 => "odp_cap",
        CAP_ATOMIC => "atomic_caps",
        CAP_ROCE => "roce_cap",
        7 => "flow_table_nic_cap",
        8 => "flow_table_eswitch_cap",
        9 => "e_switch_cap",
        crate::personality::CAP_QOS => "qos_cap",
        _ => "hca_cap_union",
    };
    if c.out_len < off + ifc().size(layout) {
        return fail(st::BAD_OUTP_LEN, syn::OUTPUT_TOO_SHORT);
    }
    let b = b.clone();
    c.out().put(off, &b).done()
}

#[derive(Clone, Copy)]
enum Rule {
    /// The new value must not exceed the maximum caps' value.
    LeMax,
    /// Mode 1 needs `supported_atomic_req_8B_endianness_mode_1`.
    AtomicEndianness,
}

pub(crate) fn set_hca_cap(d: &mut Device, c: &Cmd) -> R {
    let ty = (c.op_mod >> 1) as u8;
    let (layout, rules): (&str, &[(&str, Rule)]) = match ty {
        CAP_GENERAL => (
            "cmd_hca_cap",
            &[
                ("log_max_qp", Rule::LeMax),
                ("pkey_table_size", Rule::LeMax),
                ("gid_table_size", Rule::LeMax),
                ("cmdif_checksum", Rule::LeMax),
                ("log_uar_page_sz", Rule::LeMax),
                ("cqe_version", Rule::LeMax),
                ("uar_4k", Rule::LeMax),
            ],
        ),
        CAP_ATOMIC => (
            "atomic_caps",
            &[("atomic_req_8B_endianness_mode", Rule::AtomicEndianness)],
        ),
        CAP_ROCE => ("roce_caps", &[]),
        _ => return fail(st::BAD_PARAM, syn::SET_CAP_TYPE),
    };
    let off = ifc().field(c.lin, "capability").byte_offset();
    let new = &c.input[off..off + 4096];
    let t = ifc();
    let max =
        d.fw.caps
            .max
            .get(&ty)
            .cloned()
            .unwrap_or_else(|| vec![0; 4096]);
    let mut cur =
        d.fw.caps
            .cur
            .get(&ty)
            .cloned()
            .unwrap_or_else(|| vec![0; 4096]);
    for &(f, rule) in rules {
        let v = t.get(new, layout, f);
        match rule {
            Rule::LeMax => {
                if v > t.get(&max, layout, f) {
                    return Err(Fail {
                        status: st::BAD_PARAM,
                        syndrome: syn::SET_CAP_ABOVE_MAX,
                    });
                }
            }
            Rule::AtomicEndianness => {
                let ok = v == 0
                    || (v == 1
                        && t.get(&max, layout, "supported_atomic_req_8B_endianness_mode_1") == 1);
                if !ok {
                    return fail(st::BAD_PARAM, syn::SET_CAP_UNSUPPORTED);
                }
            }
        }
        t.set(&mut cur, layout, f, v);
    }
    d.fw.caps.cur.insert(ty, cur);
    c.out().done()
}

pub(crate) fn query_adapter(d: &mut Device, c: &Cmd) -> R {
    let off = ifc().field(c.lout, "query_adapter_struct").byte_offset();
    let a = d.fw.caps.adapter.clone();
    c.out().put(off, &a).done()
}

pub(crate) fn set_driver_version(d: &mut Device, c: &Cmd) -> R {
    d.fw.driver_version = c.bytes("driver_version").to_vec();
    c.out().done()
}

pub(crate) fn query_special_contexts(_d: &mut Device, c: &Cmd) -> R {
    c.out()
        .set("dump_fill_mkey", u64::from(DUMP_FILL_MKEY))
        .set("resd_lkey", u64::from(RESD_LKEY))
        .set("null_mkey", u64::from(NULL_MKEY))
        .done()
}

pub(crate) fn nop(_d: &mut Device, c: &Cmd) -> R {
    c.out().done()
}
