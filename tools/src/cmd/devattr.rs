//! The device attributes `ibv_devinfo -v` prints (`struct ibv_device_attr`)
//! in its order and formats: the verbs API's [`DeviceAttr`]
//! (`ibv_query_device`), completed with the few attributes it does not
//! carry, derived from the capability blocks the way the mlx5 verbs
//! provider derives them (multicast, memory windows, and the reliable
//! datagram and raw QP limits mlx5 reports as 0).
//!
//! `device_cap_flags` and the ODP, TSO, RSS and packet pacing capabilities
//! are not printed: neither the verbs API nor the capability blocks this
//! driver reads give them.

use firmware_cmds::caps::CmdHcaCap;
use hca_driver::Caps;
use hca_driver::verbs::{AtomicCap, DeviceAttr, speed, width};

/// How `ibv_devinfo` prints an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `%d` / `%u`.
    Dec,
    /// `0x%llx`.
    Hex,
    /// `ATOMIC_HCA (1)`.
    Atomic,
}

/// One attribute: its `ibv_device_attr` name, value and print format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The `ibv_device_attr` field name.
    pub name: &'static str,
    /// Its value.
    pub value: u64,
    /// How to print it.
    pub format: Format,
}

/// The `enum ibv_atomic_cap` value.
pub fn atomic_cap_num(c: AtomicCap) -> u64 {
    match c {
        AtomicCap::None => 0,
        AtomicCap::Hca => 1,
        AtomicCap::Glob => 2,
    }
}

/// The name of an `ibv_atomic_cap` value.
pub fn atomic_cap_str(v: u64) -> &'static str {
    match v {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

/// `ibv_devinfo`'s name of an `enum ibv_width` code.
pub fn width_str(w: u8) -> &'static str {
    match w {
        width::X1 => "1",
        width::X4 => "4",
        width::X8 => "8",
        width::X12 => "12",
        width::X2 => "2",
        _ => "invalid width",
    }
}

/// `ibv_devinfo`'s name of an `enum ibv_speed` code.
pub fn speed_str(s: u8) -> &'static str {
    match s {
        speed::SDR => "2.5 Gbps",
        speed::DDR => "5.0 Gbps",
        speed::QDR | speed::FDR10 => "10.0 Gbps",
        speed::FDR => "14.0 Gbps",
        speed::EDR => "25.0 Gbps",
        speed::HDR => "50.0 Gbps",
        _ => "invalid speed",
    }
}

fn pow2(log: u8) -> u64 {
    1u64.checked_shl(u32::from(log)).unwrap_or(0)
}

/// The device attributes in `ibv_devinfo -v` order.
pub fn device_attrs(d: &DeviceAttr, caps: &Caps) -> Vec<Attr> {
    let g = caps.general();
    let max_mcast_grp = pow2(g.get(CmdHcaCap::log_max_mcg));
    let max_mcast_qp_attach = u64::from(g.get(CmdHcaCap::max_qp_mcg));
    use Format::{Atomic, Dec, Hex};
    let a = |name, value, format| Attr {
        name,
        value,
        format,
    };
    let mut v = vec![
        a("max_mr_size", d.max_mr_size, Hex),
        a("page_size_cap", d.page_size_cap, Hex),
        a("max_qp", d.max_qp.into(), Dec),
        a("max_qp_wr", d.max_qp_wr.into(), Dec),
        a("max_sge", d.max_sge.into(), Dec),
        a("max_sge_rd", d.max_sge_rd.into(), Dec),
        a("max_cq", d.max_cq.into(), Dec),
        a("max_cqe", d.max_cqe.into(), Dec),
        a("max_mr", d.max_mr.into(), Dec),
        a("max_pd", d.max_pd.into(), Dec),
        a("max_qp_rd_atom", d.max_qp_rd_atom.into(), Dec),
        // No end-to-end contexts (reliable datagram) on mlx5.
        a("max_ee_rd_atom", 0, Dec),
        a("max_res_rd_atom", d.max_res_rd_atom, Dec),
        a("max_qp_init_rd_atom", d.max_qp_init_rd_atom.into(), Dec),
        a("max_ee_init_rd_atom", 0, Dec),
        a("atomic_cap", atomic_cap_num(d.atomic_cap), Atomic),
        a("max_ee", 0, Dec),
        a("max_rdd", 0, Dec),
        // Memory windows need `imaicl`; one per memory key.
        a(
            "max_mw",
            if g.get(CmdHcaCap::imaicl) {
                u64::from(d.max_mr)
            } else {
                0
            },
            Dec,
        ),
        a("max_raw_ipv6_qp", 0, Dec),
        a("max_raw_ethy_qp", 0, Dec),
        a("max_mcast_grp", max_mcast_grp, Dec),
        a("max_mcast_qp_attach", max_mcast_qp_attach, Dec),
        a(
            "max_total_mcast_qp_attach",
            max_mcast_grp * max_mcast_qp_attach,
            Dec,
        ),
        // Address handles are host objects, not limited by the device.
        a("max_ah", i32::MAX as u64, Dec),
        a("max_fmr", 0, Dec),
        a("max_srq", d.max_srq.into(), Dec),
    ];
    if d.max_srq > 0 {
        v.push(a("max_srq_wr", d.max_srq_wr.into(), Dec));
        v.push(a("max_srq_sge", d.max_srq_sge.into(), Dec));
    }
    v.push(a("max_pkeys", d.max_pkeys.into(), Dec));
    v.push(a("local_ca_ack_delay", d.local_ca_ack_delay.into(), Dec));
    v
}

/// `hca_core_clock` in kHz (0: not reported).
pub fn hca_core_clock_khz(caps: &Caps) -> u64 {
    u64::from(caps.general().get(CmdHcaCap::device_frequency_khz))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hca_driver::DeviceInfo;

    #[test]
    fn connectx4_like_caps() {
        let mut info = DeviceInfo::default();
        let g = &mut info.caps.general.cur;
        g.set(CmdHcaCap::log_max_qp, 17).unwrap();
        g.set(CmdHcaCap::max_wqe_sz_sq, 512).unwrap();
        g.set(CmdHcaCap::max_wqe_sz_rq, 512).unwrap();
        g.set(CmdHcaCap::log_pg_sz, 12).unwrap();
        g.set(CmdHcaCap::log_max_srq, 23).unwrap();
        g.set(CmdHcaCap::log_max_srq_sz, 15).unwrap();
        g.set(CmdHcaCap::log_max_mcg, 21).unwrap();
        g.set(CmdHcaCap::max_qp_mcg, 48).unwrap();
        let attrs = device_attrs(&DeviceAttr::from_info(&info), &info.caps);
        let get = |n: &str| attrs.iter().find(|a| a.name == n).unwrap().value;
        assert_eq!(get("max_qp"), 1 << 17);
        assert_eq!(get("max_sge"), 30);
        assert_eq!(get("max_sge_rd"), 30);
        assert_eq!(get("page_size_cap"), 0xffff_ffff_ffff_f000);
        assert_eq!(get("max_srq_wr"), 32767);
        assert_eq!(get("max_srq_sge"), 31);
        assert_eq!(get("atomic_cap"), 0);
        assert_eq!(get("max_total_mcast_qp_attach"), 48 << 21);
        assert_eq!(attrs.last().unwrap().name, "local_ca_ack_delay");
        assert_eq!(atomic_cap_str(1), "ATOMIC_HCA");
        assert_eq!(width_str(width::X4), "4");
        assert_eq!(speed_str(speed::EDR), "25.0 Gbps");
        assert_eq!(speed_str(0), "invalid speed");
    }
}
