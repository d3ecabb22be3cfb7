//! The device attributes `ibv_devinfo -v` prints (`struct ibv_device_attr`),
//! derived from the capability blocks the driver queried, the way the mlx5
//! verbs provider derives them.
//!
//! VERBS-LAYER: this is the tool's stand-in until hca-driver's verbs API
//! offers device attributes (`query_device`) itself; when it lands, `hca
//! info -v` takes the values from there and this module goes. Attributes
//! the capability blocks alone cannot give (`device_cap_flags`, the ODP,
//! TSO, RSS and packet pacing capabilities) are left out rather than
//! guessed.

use firmware_cmds::caps::{
    ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD, AtomicCaps, CmdHcaCap, RoceCap,
};
use hca_driver::{Caps, LinkLayer};

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

/// `IBV_ATOMIC_NONE`.
pub const IBV_ATOMIC_NONE: u64 = 0;
/// `IBV_ATOMIC_HCA`.
pub const IBV_ATOMIC_HCA: u64 = 1;

/// The name of an `ibv_atomic_cap` value.
pub fn atomic_cap_str(v: u64) -> &'static str {
    match v {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

/// Bytes of a WQE data segment, control segment and remote address
/// segment.
const DATA_SEG: u64 = 16;
const CTRL_SEG: u64 = 16;
const RADDR_SEG: u64 = 16;
/// The largest send WQE the provider builds for scatter/gather (512 bytes).
const MAX_SQ_DESC: u64 = 512;

fn pow2(log: u8) -> u64 {
    1u64.checked_shl(u32::from(log)).unwrap_or(0)
}

/// The device attributes of the current capabilities, in `ibv_devinfo -v`
/// order.
pub fn device_attrs(caps: &Caps) -> Vec<Attr> {
    let g = caps.general();
    let max_qp = pow2(g.get(CmdHcaCap::log_max_qp));
    let max_rq_sg = u64::from(g.get(CmdHcaCap::max_wqe_sz_rq)) / DATA_SEG;
    let max_sq_sg = (u64::from(g.get(CmdHcaCap::max_wqe_sz_sq)).min(MAX_SQ_DESC))
        .saturating_sub(CTRL_SEG + RADDR_SEG)
        / DATA_SEG;
    let max_qp_rd_atom = pow2(g.get(CmdHcaCap::log_max_ra_res_qp));
    let atomic = caps
        .atomic
        .as_ref()
        .map(|a| &a.cur)
        .filter(|a| {
            let ops = a.get(AtomicCaps::atomic_operations);
            let both = ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD;
            ops & both == both && a.get(AtomicCaps::atomic_size_qp) & 8 != 0
        })
        .map_or(IBV_ATOMIC_NONE, |_| IBV_ATOMIC_HCA);
    let max_mcast_grp = pow2(g.get(CmdHcaCap::log_max_mcg));
    let max_mcast_qp_attach = u64::from(g.get(CmdHcaCap::max_qp_mcg));
    let max_srq = pow2(g.get(CmdHcaCap::log_max_srq));
    let min_page = pow2(g.get(CmdHcaCap::log_pg_sz)).max(1);
    use Format::{Atomic, Dec, Hex};
    let a = |name, value, format| Attr {
        name,
        value,
        format,
    };
    let mut v = vec![
        // Memory regions are not limited in size.
        a("max_mr_size", u64::MAX, Hex),
        a("page_size_cap", !(min_page - 1), Hex),
        a("max_qp", max_qp, Dec),
        a("max_qp_wr", pow2(g.get(CmdHcaCap::log_max_qp_sz)), Dec),
        a("max_sge", max_rq_sg.min(max_sq_sg), Dec),
        a(
            "max_sge_rd",
            (MAX_SQ_DESC - CTRL_SEG - RADDR_SEG) / DATA_SEG,
            Dec,
        ),
        a("max_cq", pow2(g.get(CmdHcaCap::log_max_cq)), Dec),
        a(
            "max_cqe",
            pow2(g.get(CmdHcaCap::log_max_cq_sz)).saturating_sub(1),
            Dec,
        ),
        a("max_mr", pow2(g.get(CmdHcaCap::log_max_mkey)), Dec),
        a("max_pd", pow2(g.get(CmdHcaCap::log_max_pd)), Dec),
        a("max_qp_rd_atom", max_qp_rd_atom, Dec),
        // No end-to-end contexts (reliable datagram) on mlx5.
        a("max_ee_rd_atom", 0, Dec),
        a("max_res_rd_atom", max_qp_rd_atom * max_qp, Dec),
        a(
            "max_qp_init_rd_atom",
            pow2(g.get(CmdHcaCap::log_max_ra_req_qp)),
            Dec,
        ),
        a("max_ee_init_rd_atom", 0, Dec),
        a("atomic_cap", atomic, Atomic),
        a("max_ee", 0, Dec),
        a("max_rdd", 0, Dec),
        a(
            "max_mw",
            if g.get(CmdHcaCap::imaicl) {
                pow2(g.get(CmdHcaCap::log_max_mkey))
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
        a("max_srq", max_srq, Dec),
    ];
    if max_srq > 0 {
        v.push(a(
            "max_srq_wr",
            pow2(g.get(CmdHcaCap::log_max_srq_sz)).saturating_sub(1),
            Dec,
        ));
        v.push(a("max_srq_sge", max_rq_sg.saturating_sub(1), Dec));
    }
    v.push(a(
        "max_pkeys",
        128u64 << g.get(CmdHcaCap::pkey_table_size).min(16),
        Dec,
    ));
    v.push(a(
        "local_ca_ack_delay",
        u64::from(g.get(CmdHcaCap::local_ca_ack_delay)),
        Dec,
    ));
    v
}

/// `hca_core_clock` in kHz (0: not reported).
pub fn hca_core_clock_khz(caps: &Caps) -> u64 {
    u64::from(caps.general().get(CmdHcaCap::device_frequency_khz))
}

/// `max_msg_sz` of a port.
pub fn max_msg_sz(caps: &Caps) -> u64 {
    pow2(caps.general().get(CmdHcaCap::log_max_msg))
}

/// `gid_tbl_len` of a port: the RoCE address table on Ethernet, the
/// encoded `gid_table_size` (8 << n) on InfiniBand.
pub fn gid_tbl_len(caps: &Caps) -> u64 {
    match caps.link_layer() {
        LinkLayer::Ethernet => caps.roce.as_ref().map_or(0, |r| {
            u64::from(r.cur.get(RoceCap::roce_address_table_size))
        }),
        LinkLayer::InfiniBand => {
            let n = caps.general().get(CmdHcaCap::gid_table_size);
            if n > 4 { 0 } else { 8 << n }
        }
    }
}

/// `pkey_tbl_len` of a port: the P_Key table on InfiniBand; one entry
/// (the default P_Key) on Ethernet, where RoCE has no P_Key table.
pub fn pkey_tbl_len(caps: &Caps) -> u64 {
    match caps.link_layer() {
        LinkLayer::Ethernet => 1,
        LinkLayer::InfiniBand => 128u64 << caps.general().get(CmdHcaCap::pkey_table_size).min(16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connectx4_like_caps() {
        let mut c = Caps::default();
        let g = &mut c.general.cur;
        g.set(CmdHcaCap::log_max_qp, 17).unwrap();
        g.set(CmdHcaCap::max_wqe_sz_sq, 512).unwrap();
        g.set(CmdHcaCap::max_wqe_sz_rq, 512).unwrap();
        g.set(CmdHcaCap::log_pg_sz, 12).unwrap();
        g.set(CmdHcaCap::log_max_srq, 23).unwrap();
        g.set(CmdHcaCap::log_max_srq_sz, 15).unwrap();
        let attrs = device_attrs(&c);
        let get = |n: &str| attrs.iter().find(|a| a.name == n).unwrap().value;
        assert_eq!(get("max_qp"), 1 << 17);
        assert_eq!(get("max_sge"), 30);
        assert_eq!(get("max_sge_rd"), 30);
        assert_eq!(get("page_size_cap"), 0xffff_ffff_ffff_f000);
        assert_eq!(get("max_srq_wr"), 32767);
        assert_eq!(get("max_srq_sge"), 31);
        assert_eq!(get("atomic_cap"), IBV_ATOMIC_NONE);
        assert_eq!(atomic_cap_str(1), "ATOMIC_HCA");
    }
}
