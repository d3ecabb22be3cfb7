//! The command table and the handlers of the simpler objects (UAR, PD,
//! transport domain, MKEY, CQ, SRQ, and the raw Ethernet objects).

use super::objects::{
    Cq, FlowEntry, FlowGroup, FlowTable, Mkey, ObjData, ObjKind, QCounter, Srq, Wq, pages_for,
};
use super::{Cmd, Fail, R, fail, st};
use crate::device::Device;
use crate::ifc::ifc;
use crate::syndrome as syn;

/// In which firmware states a command is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Only before ENABLE_HCA.
    Disabled,
    /// Any time after ENABLE_HCA.
    Enabled,
    /// After ENABLE_HCA, before INIT_HCA.
    PreInit,
    /// After INIT_HCA, before TEARDOWN_HCA.
    Initialized,
    /// Enabled but not initialized (before INIT_HCA or after TEARDOWN_HCA).
    NotInitialized,
    /// ACCESS_REG: before and after INIT_HCA (the handler restricts which
    /// registers before).
    AccessReg,
}

pub(crate) type Handler = fn(&mut Device, &Cmd) -> R;

/// One command: layouts, minimum lengths, gate and handler.
pub(crate) struct Spec {
    pub(crate) lin: &'static str,
    pub(crate) lout: &'static str,
    pub(crate) min_in: Option<usize>,
    pub(crate) min_out: Option<usize>,
    pub(crate) gate: Gate,
    pub(crate) handler: Handler,
    /// The capability the command needs (without it: bad operation, as
    /// an opcode the firmware does not know).
    pub(crate) needs: Option<fn(&Device) -> bool>,
}

macro_rules! spec {
    ($lin:expr, $lout:expr, $gate:ident, $h:expr) => {
        Spec {
            lin: $lin,
            lout: $lout,
            min_in: None,
            min_out: None,
            gate: Gate::$gate,
            handler: $h,
            needs: None,
        }
    };
    ($lin:expr, $lout:expr, $gate:ident, $h:expr, in = $mi:expr) => {
        Spec {
            lin: $lin,
            lout: $lout,
            min_in: Some($mi),
            min_out: None,
            gate: Gate::$gate,
            handler: $h,
            needs: None,
        }
    };
}

/// The command table.
pub(crate) fn spec(opcode: u16) -> Option<Spec> {
    use super::{eq, hca, port, qp};
    Some(match opcode {
        0x100 => Spec {
            min_out: Some(16),
            ..spec!(
                "query_hca_cap_in",
                "query_hca_cap_out",
                Enabled,
                hca::query_hca_cap
            )
        },
        0x101 => spec!(
            "query_adapter_in",
            "query_adapter_out",
            Enabled,
            hca::query_adapter
        ),
        0x102 => spec!("init_hca_in", "init_hca_out", PreInit, hca::init_hca),
        0x103 => spec!(
            "teardown_hca_in",
            "teardown_hca_out",
            Initialized,
            hca::teardown_hca
        ),
        0x104 => spec!("enable_hca_in", "enable_hca_out", Disabled, hca::enable_hca),
        0x105 => spec!(
            "disable_hca_in",
            "disable_hca_out",
            NotInitialized,
            hca::disable_hca
        ),
        0x107 => spec!(
            "query_pages_in",
            "query_pages_out",
            Enabled,
            hca::query_pages
        ),
        0x108 => spec!(
            "manage_pages_in",
            "manage_pages_out",
            Enabled,
            hca::manage_pages
        ),
        0x109 => spec!(
            "set_hca_cap_in",
            "set_hca_cap_out",
            PreInit,
            hca::set_hca_cap
        ),
        0x10a => spec!("query_issi_in", "query_issi_out", Enabled, hca::query_issi),
        0x10b => spec!("set_issi_in", "set_issi_out", PreInit, hca::set_issi),
        0x10d => spec!(
            "set_driver_version_in",
            "set_driver_version_out",
            Initialized,
            hca::set_driver_version
        ),
        0x200 => spec!(
            "create_mkey_in",
            "create_mkey_out",
            Initialized,
            create_mkey
        ),
        0x201 => spec!("query_mkey_in", "query_mkey_out", Initialized, query_mkey),
        0x202 => spec!(
            "destroy_mkey_in",
            "destroy_mkey_out",
            Initialized,
            destroy_mkey
        ),
        0x203 => spec!(
            "query_special_contexts_in",
            "query_special_contexts_out",
            Initialized,
            hca::query_special_contexts
        ),
        0x301 => spec!("create_eq_in", "create_eq_out", Initialized, eq::create_eq),
        0x302 => spec!(
            "destroy_eq_in",
            "destroy_eq_out",
            Initialized,
            eq::destroy_eq
        ),
        0x303 => spec!("query_eq_in", "query_eq_out", Initialized, eq::query_eq),
        0x400 => spec!("create_cq_in", "create_cq_out", Initialized, create_cq),
        0x401 => spec!("destroy_cq_in", "destroy_cq_out", Initialized, destroy_cq),
        0x402 => spec!("query_cq_in", "query_cq_out", Initialized, query_cq),
        0x403 => spec!("modify_cq_in", "modify_cq_out", Initialized, modify_cq),
        0x806 => spec!(
            "attach_to_mcg_in",
            "attach_to_mcg_out",
            Initialized,
            attach_to_mcg
        ),
        0x807 => spec!(
            "detach_from_mcg_in",
            "detach_from_mcg_out",
            Initialized,
            detach_from_mcg
        ),
        0x500 => spec!("create_qp_in", "create_qp_out", Initialized, qp::create_qp, in = 0x110),
        0x501 => spec!(
            "destroy_qp_in",
            "destroy_qp_out",
            Initialized,
            qp::destroy_qp
        ),
        0x502 => spec!(
            "rst2init_qp_in",
            "rst2init_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x503 => spec!(
            "init2rtr_qp_in",
            "init2rtr_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x504 => spec!(
            "rtr2rts_qp_in",
            "rtr2rts_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x505 => spec!(
            "rts2rts_qp_in",
            "rts2rts_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x506 => spec!(
            "sqerr2rts_qp_in",
            "sqerr2rts_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x507 => spec!("qp_2err_in", "qp_2err_out", Initialized, qp::modify_qp),
        0x50a => spec!("qp_2rst_in", "qp_2rst_out", Initialized, qp::modify_qp),
        0x50b => spec!("query_qp_in", "query_qp_out", Initialized, qp::query_qp),
        0x50c => spec!(
            "sqd2rts_qp_in",
            "sqd2rts_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x50e => spec!(
            "init2init_qp_in",
            "init2init_qp_out",
            Initialized,
            qp::modify_qp
        ),
        0x50d => spec!(
            "mad_ifc_in",
            "mad_ifc_out",
            Initialized,
            super::mad::mad_ifc
        ),
        0x700 => spec!("create_srq_in", "create_srq_out", Initialized, create_srq),
        0x701 => spec!(
            "destroy_srq_in",
            "destroy_srq_out",
            Initialized,
            destroy_srq
        ),
        0x702 => spec!("query_srq_in", "query_srq_out", Initialized, query_srq),
        0x703 => spec!("arm_rq_in", "arm_rq_out", Initialized, arm_rq),
        0x750 => spec!(
            "query_vport_state_in",
            "query_vport_state_out",
            Initialized,
            port::query_vport_state
        ),
        0x754 => spec!(
            "query_nic_vport_context_in",
            "query_nic_vport_context_out",
            Initialized,
            port::query_nic_vport_context
        ),
        0x755 => spec!(
            "modify_nic_vport_context_in",
            "modify_nic_vport_context_out",
            Initialized,
            port::modify_nic_vport_context
        ),
        0x760 => spec!(
            "query_roce_address_in",
            "query_roce_address_out",
            Initialized,
            port::query_roce_address
        ),
        0x761 => spec!(
            "set_roce_address_in",
            "set_roce_address_out",
            Initialized,
            port::set_roce_address
        ),
        0x762 => spec!(
            "query_hca_vport_context_in",
            "query_hca_vport_context_out",
            Initialized,
            port::query_hca_vport_context
        ),
        0x764 => spec!(
            "query_hca_vport_gid_in",
            "query_hca_vport_gid_out",
            Initialized,
            port::query_hca_vport_gid
        ),
        0x765 => spec!(
            "query_hca_vport_pkey_in",
            "query_hca_vport_pkey_out",
            Initialized,
            port::query_hca_vport_pkey
        ),
        0x771 => spec!(
            "alloc_q_counter_in",
            "alloc_q_counter_out",
            Initialized,
            alloc_q_counter
        ),
        0x772 => spec!(
            "dealloc_q_counter_in",
            "dealloc_q_counter_out",
            Initialized,
            dealloc_q_counter
        ),
        0x773 => spec!(
            "query_q_counter_in",
            "query_q_counter_out",
            Initialized,
            query_q_counter
        ),
        0x780 => Spec {
            needs: Some(super::pp::has_packet_pacing),
            ..spec!(
                "set_pp_rate_limit_in",
                "set_pp_rate_limit_out",
                Initialized,
                super::pp::set_pp_rate_limit
            )
        },
        0x800 => spec!("alloc_pd_in", "alloc_pd_out", Initialized, alloc_pd),
        0x801 => spec!("dealloc_pd_in", "dealloc_pd_out", Initialized, dealloc_pd),
        0x802 => spec!("alloc_uar_in", "alloc_uar_out", Initialized, alloc_uar),
        0x803 => spec!(
            "dealloc_uar_in",
            "dealloc_uar_out",
            Initialized,
            dealloc_uar
        ),
        0x805 => spec!(
            "access_register_in",
            "access_register_out",
            AccessReg,
            port::access_reg
        ),
        0x80d => spec!("nop_in", "nop_out", Initialized, hca::nop),
        0x816 => spec!(
            "alloc_transport_domain_in",
            "alloc_transport_domain_out",
            Initialized,
            alloc_td
        ),
        0x817 => spec!(
            "dealloc_transport_domain_in",
            "dealloc_transport_domain_out",
            Initialized,
            dealloc_td
        ),
        0x900 => spec!("create_tir_in", "create_tir_out", Initialized, create_tir),
        0x902 => spec!(
            "destroy_tir_in",
            "destroy_tir_out",
            Initialized,
            destroy_tir
        ),
        0x904 => spec!("create_sq_in", "create_sq_out", Initialized, create_sq),
        0x905 => spec!("modify_sq_in", "modify_sq_out", Initialized, modify_sq),
        0x906 => spec!("destroy_sq_in", "destroy_sq_out", Initialized, destroy_sq),
        0x907 => spec!("query_sq_in", "query_sq_out", Initialized, query_sq),
        0x908 => spec!("create_rq_in", "create_rq_out", Initialized, create_rq),
        0x909 => spec!("modify_rq_in", "modify_rq_out", Initialized, modify_rq),
        0x90a => spec!("destroy_rq_in", "destroy_rq_out", Initialized, destroy_rq),
        0x90b => spec!("query_rq_in", "query_rq_out", Initialized, query_rq),
        0x912 => spec!("create_tis_in", "create_tis_out", Initialized, create_tis),
        0x914 => spec!(
            "destroy_tis_in",
            "destroy_tis_out",
            Initialized,
            destroy_tis
        ),
        0x90c => spec!("create_rmp_in", "create_rmp_out", Initialized, create_rmp),
        0x90d => spec!("modify_rmp_in", "modify_rmp_out", Initialized, modify_rmp),
        0x90e => spec!(
            "destroy_rmp_in",
            "destroy_rmp_out",
            Initialized,
            destroy_rmp
        ),
        0x90f => spec!("query_rmp_in", "query_rmp_out", Initialized, query_rmp),
        0x916 => spec!("create_rqt_in", "create_rqt_out", Initialized, create_rqt),
        0x918 => spec!(
            "destroy_rqt_in",
            "destroy_rqt_out",
            Initialized,
            destroy_rqt
        ),
        0x92f => spec!(
            "set_flow_table_root_in",
            "set_flow_table_root_out",
            Initialized,
            set_flow_table_root
        ),
        0x930 => spec!(
            "create_flow_table_in",
            "create_flow_table_out",
            Initialized,
            create_flow_table
        ),
        0x931 => spec!(
            "destroy_flow_table_in",
            "destroy_flow_table_out",
            Initialized,
            destroy_flow_table
        ),
        0x933 => spec!(
            "create_flow_group_in",
            "create_flow_group_out",
            Initialized,
            create_flow_group
        ),
        0x934 => spec!(
            "destroy_flow_group_in",
            "destroy_flow_group_out",
            Initialized,
            destroy_flow_group
        ),
        0x936 => spec!("set_fte_in", "set_fte_out", Initialized, set_fte),
        0xa08 => spec!(
            "create_umem_in",
            "create_umem_out",
            Initialized,
            super::umem::create_umem
        ),
        0xa0a => spec!(
            "destroy_umem_in",
            "destroy_umem_out",
            Initialized,
            super::umem::destroy_umem
        ),
        0x938 => spec!("delete_fte_in", "delete_fte_out", Initialized, delete_fte),
        _ => return None,
    })
}

// ---- helpers ----------------------------------------------------------------

impl Device {
    /// Fails with `BAD_RES` + `syndrome` unless the object exists.
    pub(crate) fn need(&self, k: ObjKind, n: u32, syndrome: u32) -> Result<(), Fail> {
        if self.fw.objs.exists(k, n) {
            Ok(())
        } else {
            fail(st::BAD_RES, syndrome)
        }
    }

    /// Fails with `LIM_EXCEEDED` when `1 << log_max` objects exist.
    pub(crate) fn limit(&self, k: ObjKind, log_max_field: &str) -> Result<(), Fail> {
        let log = self.fw.caps.general(log_max_field).min(31);
        if self.fw.objs.count(k) as u64 >= 1u64 << log {
            fail(st::LIM_EXCEEDED, syn::TOO_MANY)
        } else {
            Ok(())
        }
    }

    pub(crate) fn cap_le(&self, v: u64, field: &str, syndrome: u32) -> Result<(), Fail> {
        if v > self.fw.caps.general(field) {
            fail(st::LIM_EXCEEDED, syndrome)
        } else {
            Ok(())
        }
    }
}

/// Reads `n` page addresses of a flexible array starting at byte `off`.
pub(crate) fn read_pas_at(c: &Cmd, off: usize, n: usize) -> Result<Vec<u64>, Fail> {
    if c.input.len() < off + 8 * n {
        return fail(st::BAD_INP_LEN, syn::PAS_TOO_SHORT);
    }
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let mut b = [0u8; 8];
        b.copy_from_slice(&c.input[off + 8 * i..off + 8 * i + 8]);
        let a = u64::from_be_bytes(b);
        if a & 0xfff != 0 {
            return fail(st::BAD_PARAM, syn::PAS_MISALIGNED);
        }
        v.push(a);
    }
    Ok(v)
}

pub(crate) fn read_pas(c: &Cmd, path: &str, n: usize) -> Result<Vec<u64>, Fail> {
    read_pas_at(c, c.off(path), n)
}

pub(crate) fn check_dbr(dbr: u64) -> Result<(), Fail> {
    if dbr % 8 != 0 {
        fail(st::BAD_PARAM, syn::DBR_MISALIGNED)
    } else {
        Ok(())
    }
}

/// The buffer fields of a CQ, SRQ, QP or EQ context (`g` reads the
/// context's fields): `page_offset` must be 0, then `log_page_size` is
/// checked ([`check_lps`]) and returned.
pub(crate) fn check_buffer(g: impl Fn(&str) -> u64) -> Result<u8, Fail> {
    if g("page_offset") != 0 {
        return fail(st::BAD_PARAM, syn::PAGE_OFFSET);
    }
    check_lps(g("log_page_size"))
}

pub(crate) fn check_lps(lps: u64) -> Result<u8, Fail> {
    if lps > 20 {
        fail(st::BAD_PARAM, syn::BAD_PAGE_SIZE)
    } else {
        Ok(lps as u8)
    }
}

fn simple_alloc(d: &mut Device, c: &Cmd, k: ObjKind, out_field: &str) -> R {
    let n = d.fw.objs.create(k, ObjData::None, vec![])?;
    c.out().set(out_field, u64::from(n)).done()
}

/// Destroys the object `in_field` names and forgets its data-path state.
pub(crate) fn simple_destroy(d: &mut Device, c: &Cmd, k: ObjKind, in_field: &str) -> R {
    let n = c.get(in_field) as u32;
    d.fw.objs.destroy(k, n)?;
    d.datapath_forget(k, n);
    c.out().done()
}

// ---- UAR, PD, transport domain -----------------------------------------------

fn alloc_uar(d: &mut Device, c: &Cmd) -> R {
    let n =
        d.fw.objs
            .create(ObjKind::Uar, ObjData::None, vec![])
            .map_err(|_| Fail {
                status: st::LIM_EXCEEDED,
                syndrome: syn::NO_UAR,
            })?;
    c.out().set("uar", u64::from(n)).done()
}

fn dealloc_uar(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Uar, "uar")
}

fn alloc_pd(d: &mut Device, c: &Cmd) -> R {
    d.limit(ObjKind::Pd, "log_max_pd")?;
    simple_alloc(d, c, ObjKind::Pd, "pd")
}

fn dealloc_pd(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Pd, "pd")
}

fn alloc_td(d: &mut Device, c: &Cmd) -> R {
    d.limit(ObjKind::TransportDomain, "log_max_transport_domain")?;
    simple_alloc(d, c, ObjKind::TransportDomain, "transport_domain")
}

fn dealloc_td(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::TransportDomain, "transport_domain")
}

// ---- Q counters ---------------------------------------------------------------

/// Whether `id` names an allocated Q counter set (0, the default set, is
/// never allocated).
fn q_counter_exists(d: &Device, id: u64) -> bool {
    u32::try_from(id).is_ok_and(|n| n != 0 && d.fw.objs.q_counter(n).is_some())
}

fn alloc_q_counter(d: &mut Device, c: &Cmd) -> R {
    let max = d.fw.caps.general("max_qp_cnt");
    if d.fw.objs.count(ObjKind::QCounter) as u64 >= max {
        return fail(st::LIM_EXCEEDED, syn::Q_COUNTER_LIMIT);
    }
    let n =
        d.fw.objs
            .create(
                ObjKind::QCounter,
                ObjData::QCounter(QCounter::default()),
                vec![],
            )
            .map_err(|_| Fail {
                status: st::LIM_EXCEEDED,
                syndrome: syn::Q_COUNTER_LIMIT,
            })?;
    c.out().set("counter_set_id", u64::from(n)).done()
}

/// The RQs whose context counts into set `id`.
fn q_counter_users(d: &Device, id: u32) -> usize {
    d.fw.objs
        .of(ObjKind::Rq)
        .filter(|(_, o)| match &o.data {
            ObjData::Wq(w) => ifc().get(&w.ctx, "rqc", "counter_set_id") == u64::from(id),
            _ => false,
        })
        .count()
}

fn dealloc_q_counter(d: &mut Device, c: &Cmd) -> R {
    let id = c.get("counter_set_id");
    if !q_counter_exists(d, id) {
        return fail(st::BAD_PARAM, syn::Q_COUNTER_BAD_ID);
    }
    let id = id as u32;
    if q_counter_users(d, id) > 0 {
        return fail(st::BAD_RES_STATE, syn::Q_COUNTER_IN_USE);
    }
    d.fw.objs.destroy(ObjKind::QCounter, id)?;
    c.out().done()
}

fn query_q_counter(d: &mut Device, c: &Cmd) -> R {
    let id = c.get("counter_set_id");
    if !q_counter_exists(d, id) {
        return fail(st::BAD_PARAM, syn::Q_COUNTER_BAD_ID);
    }
    let clear = c.get("clear") == 1;
    let Some(q) = d.fw.objs.q_counter_mut(id as u32) else {
        return fail(st::BAD_PARAM, syn::Q_COUNTER_BAD_ID);
    };
    let oob = q.out_of_buffer;
    if clear {
        *q = QCounter::default();
    }
    c.out().set("out_of_buffer", u64::from(oob)).done()
}

// ---- MKEY ---------------------------------------------------------------------

fn create_mkey(d: &mut Device, c: &Cmd) -> R {
    let m = |p: &str| c.get(&format!("memory_key_mkey_entry.{p}"));
    let access_mode = (m("access_mode_1_0") | (m("access_mode_4_2") << 2)) as u8;
    if access_mode > 1 {
        return fail(st::BAD_PARAM, syn::MKEY_ACCESS_MODE);
    }
    let pd = m("pd") as u32;
    d.need(ObjKind::Pd, pd, syn::BAD_PD)?;
    if m("qpn") != 0xff_ffff {
        return fail(st::BAD_PARAM, syn::MKEY_QPN);
    }
    let (lr, lw, rr, rw, a) = (
        m("lr") == 1,
        m("lw") == 1,
        m("rr") == 1,
        m("rw") == 1,
        m("a") == 1,
    );
    if (rw || a) && !lw {
        return fail(st::BAD_PARAM, syn::MKEY_REMOTE_WITHOUT_LOCAL_WRITE);
    }
    let start = m("start_addr");
    let length64 = m("length64") == 1;
    let len = if length64 { u64::MAX } else { m("len") };
    if !length64 && start.checked_add(len).is_none() {
        return fail(st::BAD_PARAM, syn::MKEY_BOUNDS);
    }
    d.limit(ObjKind::Mkey, "log_max_mkey")?;
    let mut log_page_size = 12u8;
    let mut mtt = Vec::new();
    if access_mode == 1 {
        let lps = m("log_page_size");
        if !(12..=30).contains(&lps) {
            return fail(st::BAD_PARAM, syn::BAD_PAGE_SIZE);
        }
        log_page_size = lps as u8;
        let ps = 1u64 << lps;
        let entries = if length64 || len == 0 {
            0
        } else {
            ((start % ps + len).div_ceil(ps)) as usize
        };
        let actual = c.get("translations_octword_actual_size");
        if m("translations_octword_size") * 2 < entries as u64 || actual * 2 < entries as u64 {
            return fail(st::BAD_PARAM, syn::MKEY_MTT_SHORT);
        }
        // The list goes in whole octowords: 16 bytes for each one
        // translations_octword_actual_size counts (Linux reg_create and
        // rdma-core mlx5_vfio_reg_mr pad an odd count with a zero entry).
        let off = c.off("klm_pas_mtt");
        if (c.input.len() as u64) < off as u64 + 16 * actual {
            return fail(st::BAD_INP_LEN, syn::MKEY_MTT_OCTOWORDS);
        }
        for i in 0..entries {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c.input[off + 8 * i..off + 8 * i + 8]);
            let e = u64::from_be_bytes(b) & !7;
            if e % ps != 0 {
                return fail(st::BAD_PARAM, syn::MKEY_MTT_MISALIGNED);
            }
            mtt.push(e);
        }
    }
    let variant = m("mkey_7_0") as u32;
    let ctx = c.bytes("memory_key_mkey_entry").to_vec();
    let idx = d.fw.objs.create(
        ObjKind::Mkey,
        ObjData::Mkey(Mkey {
            key: 0,
            pd,
            access_mode,
            lr,
            lw,
            rr,
            rw,
            a,
            start,
            len,
            log_page_size,
            mtt,
            ctx,
        }),
        vec![(ObjKind::Pd, pd)],
    )?;
    if let Some(k) = d.fw.objs.mkey_mut(idx) {
        k.key = (idx << 8) | variant;
    }
    c.out().set("mkey_index", u64::from(idx)).done()
}

fn query_mkey(d: &mut Device, c: &Cmd) -> R {
    let idx = c.get("mkey_index") as u32;
    let Some(k) = d.fw.objs.mkey(idx) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let off = ifc().field(c.lout, "memory_key_mkey_entry").byte_offset();
    c.out().put(off, &k.ctx.clone()).done()
}

fn destroy_mkey(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Mkey, "mkey_index")
}

// ---- CQ -------------------------------------------------------------------------

fn create_cq(d: &mut Device, c: &Cmd) -> R {
    let g = |p: &str| c.get(&format!("cq_context.{p}"));
    let log = g("log_cq_size");
    d.cap_le(log, "log_max_cq_sz", syn::CQ_LOG_SIZE)?;
    let cqe_sz = g("cqe_sz");
    if cqe_sz > 1 {
        return fail(st::BAD_PARAM, syn::CQ_CQE_SIZE);
    }
    let uar = g("uar_page") as u32;
    d.need(ObjKind::Uar, uar, syn::BAD_UAR)?;
    let c_eqn = g("c_eqn") as u32;
    d.need(ObjKind::Eq, c_eqn, syn::CQ_BAD_EQN)?;
    let mut lps = check_buffer(g)?;
    let mut deps = vec![(ObjKind::Uar, uar), (ObjKind::Eq, c_eqn)];
    let dbr = if g("dbr_umem_valid") == 1 {
        let id = g("dbr_umem_id") as u32;
        let a = d.umem_dbr(id, g("dbr_addr"))?;
        deps.push((ObjKind::Umem, id));
        a
    } else {
        g("dbr_addr")
    };
    check_dbr(dbr)?;
    d.limit(ObjKind::Cq, "log_max_cq")?;
    let bytes = (64u64 << cqe_sz) << log;
    let pas = if c.get("cq_umem_valid") == 1 {
        let id = c.get("cq_umem_id") as u32;
        let p = d.umem_pages(id, c.get("cq_umem_offset"), bytes, true)?;
        deps.push((ObjKind::Umem, id));
        lps = 0;
        p
    } else {
        read_pas(c, "pas", pages_for(bytes, lps))?
    };
    let cq = Cq {
        log_size: log as u8,
        cqe_sz: cqe_sz as u8,
        uar,
        c_eqn,
        log_page_size: lps,
        pas,
        dbr_addr: dbr,
        pc: 0,
        armed: None,
        arm_sn: 0,
        reported: 0,
        solicited_unreported: false,
        error: false,
        ctx: c.bytes("cq_context").to_vec(),
    };
    let cqn = d.fw.objs.create(ObjKind::Cq, ObjData::Cq(cq), deps)?;
    c.out().set("cqn", u64::from(cqn)).done()
}

fn destroy_cq(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Cq, "cqn")
}

fn query_cq(d: &mut Device, c: &Cmd) -> R {
    let cqn = c.get("cqn") as u32;
    let Some(cq) = d.fw.objs.cq(cqn) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let mut o = c.out();
    let off = ifc().field(c.lout, "cq_context").byte_offset();
    o.put(off, &cq.ctx);
    o.set("cq_context.producer_counter", u64::from(cq.pc & 0xff_ffff));
    o.set("cq_context.status", if cq.error { 9 } else { 0 });
    o.done()
}

fn modify_cq(d: &mut Device, c: &Cmd) -> R {
    let cqn = c.get("cqn") as u32;
    match c.op_mod {
        0 => {}
        1 => return resize_cq(d, c, cqn),
        _ => return fail(st::BAD_PARAM, syn::BAD_OP_MOD),
    }
    let period = c.get("cq_context.cq_period");
    let count = c.get("cq_context.cq_max_count");
    let Some(cq) = d.fw.objs.cq_mut(cqn) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    ifc().set(&mut cq.ctx, "cqc", "cq_period", period);
    ifc().set(&mut cq.ctx, "cqc", "cq_max_count", count);
    c.out().done()
}

/// MODIFY_CQ with op_mod 1 (resize): the new size and page list take
/// effect at once. A RESIZE_CQ CQE (opcode 5) goes to the old buffer at the
/// producer counter (it raises no completion event), then the device
/// writes the new buffer, the producer counter going on: CQE `pc` at index
/// `pc mod 2^log_cq_size` of the new buffer with owner bit
/// `pc >> log_cq_size`. Software copies the CQEs it has not polled (up to
/// the RESIZE_CQ CQE) into the new buffer and steps its consumer index
/// over the RESIZE_CQ CQE (Linux `mlx5_ib` `copy_resize_cqes`, rdma-core
/// `mlx5_cq_resize_copy_cqes`). The doorbell record and EQ stay.
fn resize_cq(d: &mut Device, c: &Cmd, cqn: u32) -> R {
    let g = |p: &str| c.get(&format!("cq_context.{p}"));
    let select = c.get("modify_field_select_resize_field_select");
    if select & 1 == 0 {
        return fail(st::BAD_PARAM, syn::CQ_RESIZE_FIELDS);
    }
    let Some(cq) = d.fw.objs.cq(cqn) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    if cq.error {
        return fail(st::BAD_RES_STATE, syn::CQ_RESIZE_IN_ERROR);
    }
    let cqe_sz = cq.cqe_sz;
    let old_lps = cq.log_page_size;
    let (dbr, old_log, pc) = (cq.dbr_addr, cq.log_size, cq.pc);
    let log = g("log_cq_size");
    d.cap_le(log, "log_max_cq_sz", syn::CQ_LOG_SIZE)?;
    if c.get("cq_umem_valid") == 1 {
        return fail(st::BAD_PARAM, syn::CQ_RESIZE_UMEM);
    }
    if select & 2 != 0 && g("page_offset") != 0 {
        return fail(st::BAD_PARAM, syn::PAGE_OFFSET);
    }
    let lps = if select & 4 != 0 {
        check_lps(g("log_page_size"))?
    } else {
        old_lps
    };
    let bytes = (64u64 << cqe_sz) << log;
    let pas = read_pas(c, "pas", pages_for(bytes, lps))?;
    // The CQEs not yet consumed (producer counter minus the consumer index
    // in the doorbell record) must fit in the new size, and the old ring
    // must have room for the RESIZE_CQ CQE.
    let mut w = [0u8; 4];
    if d.iommu
        .read(dbr, &mut w, &|| format!("CQ {cqn:#x} doorbell record"))
        .is_err()
    {
        return fail(st::BAD_PARAM, syn::CQ_RESIZE_DBR);
    }
    let used = pc.wrapping_sub(u32::from_be_bytes(w)) & 0xff_ffff;
    if used >= 1 << log || used >= 1 << old_log {
        return fail(st::BAD_PARAM, syn::CQ_RESIZE_TOO_SMALL);
    }
    // The RESIZE_CQ CQE in the old buffer, without an event.
    let mut e = [0u8; 64];
    e[63] = CQE_RESIZE_CQ << 4;
    let armed = d.fw.objs.cq_mut(cqn).and_then(|q| q.armed.take());
    let wrote = d.write_cqe(cqn, &e);
    let Some(cq) = d.fw.objs.cq_mut(cqn) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    cq.armed = armed;
    if wrote.is_err() {
        // Overrun (the CQ is now in error) or a fault writing the buffer.
        return fail(st::BAD_RES_STATE, syn::CQ_RESIZE_IN_ERROR);
    }
    cq.log_size = log as u8;
    cq.log_page_size = lps;
    cq.pas = pas;
    ifc().set(&mut cq.ctx, "cqc", "log_cq_size", log);
    ifc().set(&mut cq.ctx, "cqc", "log_page_size", u64::from(lps));
    c.out().done()
}

/// CQE opcode RESIZE_CQ (`MLX5_CQE_RESIZE_CQ`).
const CQE_RESIZE_CQ: u8 = 5;

// ---- Multicast groups ----------------------------------------------------------

/// The QP and MGID of ATTACH_TO_MCG / DETACH_FROM_MCG: the QP exists and is
/// UD, the GID is a multicast one (IBA 4.1.1: MGIDs start with 0xff).
fn mcg_args(d: &Device, c: &Cmd) -> Result<(u32, [u8; 16]), Fail> {
    let qpn = c.get("qpn") as u32;
    let Some(q) = d.fw.objs.qp(qpn) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    if q.st != 2 {
        return fail(st::BAD_PARAM, syn::MCG_NOT_UD);
    }
    let off = c.off("multicast_gid");
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&c.input[off..off + 16]);
    if gid[0] != 0xff {
        return fail(st::BAD_PARAM, syn::MCG_NOT_MULTICAST);
    }
    Ok((qpn, gid))
}

/// ATTACH_TO_MCG: the UD QP joins the group of `multicast_gid`; UD sends
/// to the group reach it (see the data path's multicast delivery).
fn attach_to_mcg(d: &mut Device, c: &Cmd) -> R {
    let (qpn, gid) = mcg_args(d, c)?;
    let qps = d.fw.mcast.entry(gid).or_default();
    if qps.contains(&qpn) {
        return fail(st::BAD_PARAM, syn::MCG_ATTACHED);
    }
    qps.push(qpn);
    c.out().done()
}

/// DETACH_FROM_MCG: the QP leaves the group.
fn detach_from_mcg(d: &mut Device, c: &Cmd) -> R {
    let (qpn, gid) = mcg_args(d, c)?;
    let Some(qps) = d.fw.mcast.get_mut(&gid) else {
        return fail(st::BAD_PARAM, syn::MCG_NOT_ATTACHED);
    };
    let Some(i) = qps.iter().position(|&q| q == qpn) else {
        return fail(st::BAD_PARAM, syn::MCG_NOT_ATTACHED);
    };
    qps.remove(i);
    if qps.is_empty() {
        d.fw.mcast.remove(&gid);
    }
    c.out().done()
}

// ---- SRQ and RMP -------------------------------------------------------------------

/// The SRQ commands exist at ISSI 0, the RMP commands at ISSI 1 (Linux's
/// `srq_cmd.c` chooses by `dev->mdev->issi`); the other family is an
/// unknown operation at the ISSI in effect.
fn need_issi(d: &Device, rmp: bool) -> Result<(), Fail> {
    match (rmp, d.fw.issi) {
        (false, 0) => Ok(()),
        (false, _) => fail(st::BAD_OP, syn::SRQ_NOT_AT_ISSI_1),
        (true, 0) => fail(st::BAD_OP, syn::RMP_NOT_AT_ISSI_0),
        (true, _) => Ok(()),
    }
}

/// The SRQ or RMP `n`, if it exists and is of the family asked for.
fn srq_of(d: &mut Device, n: u32, rmp: bool) -> Result<&mut Srq, Fail> {
    match d.fw.objs.srq_mut(n) {
        Some(s) if s.rmp == rmp => Ok(s),
        _ => fail(st::BAD_RES, syn::NO_SUCH_OBJECT),
    }
}

/// What an SRQ and an RMP share at creation: size, PD, buffer, doorbell
/// record.
struct SrqBuffer {
    rmp: bool,
    log_size: u64,
    log_rq_stride: u64,
    pd: u32,
    cqn: u32,
    lps: u8,
    dbr: u64,
    lwm: u16,
}

fn create_srq_common(
    d: &mut Device,
    c: &Cmd,
    b: SrqBuffer,
    pas_at: usize,
    mut deps: Vec<(ObjKind, u32)>,
    ctx: &str,
) -> Result<u32, Fail> {
    d.cap_le(b.log_size, "log_max_srq_sz", syn::SRQ_LOG_SIZE)?;
    d.need(ObjKind::Pd, b.pd, syn::BAD_PD)?;
    deps.push((ObjKind::Pd, b.pd));
    check_dbr(b.dbr)?;
    d.limit(ObjKind::Srq, "log_max_srq")?;
    let n = pages_for((16u64 << b.log_rq_stride) << b.log_size, b.lps);
    let pas = read_pas_at(c, pas_at, n)?;
    let srq = Srq {
        rmp: b.rmp,
        log_size: b.log_size as u8,
        log_rq_stride: b.log_rq_stride as u8,
        pd: b.pd,
        cqn: b.cqn,
        dbr_addr: b.dbr,
        log_page_size: b.lps,
        pas,
        lwm: b.lwm,
        ctx: c.bytes(ctx).to_vec(),
    };
    d.fw.objs.create(ObjKind::Srq, ObjData::Srq(srq), deps)
}

fn create_srq(d: &mut Device, c: &Cmd) -> R {
    need_issi(d, false)?;
    let g = |p: &str| c.get(&format!("srq_context_entry.{p}"));
    let cqn = g("cqn") as u32;
    let mut deps = vec![];
    if cqn != 0 {
        d.need(ObjKind::Cq, cqn, syn::BAD_CQN)?;
        deps.push((ObjKind::Cq, cqn));
    }
    let b = SrqBuffer {
        rmp: false,
        log_size: g("log_srq_size"),
        log_rq_stride: g("log_rq_stride"),
        pd: g("pd") as u32,
        cqn,
        lps: check_buffer(g)?,
        dbr: g("dbr_addr"),
        lwm: g("lwm") as u16,
    };
    let n = create_srq_common(d, c, b, c.off("pas"), deps, "srq_context_entry")?;
    c.out().set("srqn", u64::from(n)).done()
}

/// DESTROY_SRQ (`rmp` false, number in `srqn`) or DESTROY_RMP (`rmpn`).
fn destroy_srq_or_rmp(d: &mut Device, c: &Cmd, rmp: bool, number: &str) -> R {
    need_issi(d, rmp)?;
    srq_of(d, c.get(number) as u32, rmp)?;
    simple_destroy(d, c, ObjKind::Srq, number)
}

/// QUERY_SRQ or QUERY_RMP: the context as created, with the current limit
/// at `lwm` (a path in the output layout).
fn query_srq_or_rmp(
    d: &mut Device,
    c: &Cmd,
    rmp: bool,
    number: &str,
    ctx_field: &str,
    lwm: &str,
) -> R {
    need_issi(d, rmp)?;
    let s = srq_of(d, c.get(number) as u32, rmp)?;
    let (ctx, limit) = (s.ctx.clone(), s.lwm);
    let mut o = c.out();
    let off = ifc().field(c.lout, ctx_field).byte_offset();
    o.put(off, &ctx);
    o.set(lwm, u64::from(limit));
    o.done()
}

fn destroy_srq(d: &mut Device, c: &Cmd) -> R {
    destroy_srq_or_rmp(d, c, false, "srqn")
}

fn query_srq(d: &mut Device, c: &Cmd) -> R {
    query_srq_or_rmp(
        d,
        c,
        false,
        "srqn",
        "srq_context_entry",
        "srq_context_entry.lwm",
    )
}

fn arm_rq(d: &mut Device, c: &Cmd) -> R {
    // op_mod 1 arms an SRQ (`MLX5_ARM_RQ_IN_OP_MOD_SRQ`); the XRQ and RQ
    // kinds are not emulated.
    if c.op_mod != 1 {
        return fail(st::BAD_PARAM, syn::BAD_OP_MOD);
    }
    let lwm = c.get("lwm") as u16;
    let s = srq_of(d, c.get("srq_number") as u32, false)?;
    if u32::from(lwm) > 1u32 << s.log_size {
        return fail(st::BAD_PARAM, syn::SRQ_LWM);
    }
    s.lwm = lwm;
    c.out().done()
}

/// `rmpc.state` values.
const RMP_RDY: u64 = 1;

fn create_rmp(d: &mut Device, c: &Cmd) -> R {
    need_issi(d, true)?;
    let g = |p: &str| c.get(&format!("ctx.{p}"));
    // Linux create_rmp_cmd creates it ready, over a linked-list WQ.
    if g("state") != RMP_RDY {
        return fail(st::BAD_PARAM, syn::RMP_STATE);
    }
    if g("wq.wq_type") != 0 {
        return fail(st::BAD_PARAM, syn::RMP_WQ_TYPE);
    }
    if g("wq.page_offset") != 0 {
        return fail(st::BAD_PARAM, syn::PAGE_OFFSET);
    }
    let stride = g("wq.log_wq_stride");
    if !(4..=15).contains(&stride) || 1u64 << stride > d.fw.caps.general("max_wqe_sz_rq") {
        return fail(st::BAD_PARAM, syn::RMP_STRIDE);
    }
    let b = SrqBuffer {
        rmp: true,
        log_size: g("wq.log_wq_sz"),
        log_rq_stride: stride - 4,
        pd: g("wq.pd") as u32,
        cqn: 0,
        lps: check_lps(g("wq.log_wq_pg_sz"))?,
        dbr: g("wq.dbr_addr"),
        lwm: g("wq.lwm") as u16,
    };
    // The page list (`wq.pas`) follows the fixed part of the command.
    let n = create_srq_common(d, c, b, ifc().size(c.lin), vec![], "ctx")?;
    c.out().set("rmpn", u64::from(n)).done()
}

fn modify_rmp(d: &mut Device, c: &Cmd) -> R {
    need_issi(d, true)?;
    let cur = c.get("rmp_state");
    let new = c.get("ctx.state");
    let bitmask = c.get("bitmask");
    let lwm = c.get("ctx.wq.lwm") as u16;
    let s = srq_of(d, c.get("rmpn") as u32, true)?;
    // RDY -> RDY is the one edge emulated (what Linux's arm_rmp_cmd
    // sends); an RMP in error stays there.
    let state = ifc().get(&s.ctx, "rmpc", "state");
    if cur != state || new != RMP_RDY || state != RMP_RDY {
        return fail(st::BAD_RES_STATE, syn::RMP_STATE);
    }
    // rmp_bitmask: only `lwm` (bit 0) is defined.
    if bitmask & !1 != 0 {
        return fail(st::BAD_PARAM, syn::RMP_BITMASK);
    }
    if bitmask & 1 != 0 {
        if u32::from(lwm) > 1u32 << s.log_size {
            return fail(st::BAD_PARAM, syn::SRQ_LWM);
        }
        s.lwm = lwm;
    }
    c.out().done()
}

fn destroy_rmp(d: &mut Device, c: &Cmd) -> R {
    destroy_srq_or_rmp(d, c, true, "rmpn")
}

fn query_rmp(d: &mut Device, c: &Cmd) -> R {
    query_srq_or_rmp(d, c, true, "rmpn", "rmp_context", "rmp_context.wq.lwm")
}

// ---- SQ / RQ --------------------------------------------------------------------

fn create_wq(d: &mut Device, c: &Cmd, k: ObjKind) -> Result<u32, Fail> {
    let g = |p: &str| c.get(&format!("ctx.{p}"));
    if g("state") != 0 {
        return fail(st::BAD_PARAM, syn::WQ_STATE);
    }
    let ts_cap = match k {
        ObjKind::Sq => d.fw.caps.general("sq_ts_format"),
        _ => d.fw.caps.general("rq_ts_format"),
    };
    super::ts::check(
        ts_cap,
        d.cfg.personality.knows_ts_format(),
        g("ts_format"),
        syn::WQ_TS_FORMAT,
    )?;
    if k == ObjKind::Sq {
        d.check_sq_pp_index(g("packet_pacing_rate_limit_index") as u16)?;
    }
    let cqn = g("cqn") as u32;
    d.need(ObjKind::Cq, cqn, syn::BAD_CQN)?;
    if k == ObjKind::Rq {
        let set = g("counter_set_id");
        if set != 0 && !q_counter_exists(d, set) {
            return fail(st::BAD_PARAM, syn::WQ_COUNTER_SET_ID);
        }
    }
    if g("wq.wq_type") != 1 {
        return fail(st::BAD_PARAM, syn::WQ_TYPE);
    }
    let pd = g("wq.pd") as u32;
    d.need(ObjKind::Pd, pd, syn::BAD_PD)?;
    let mut deps = vec![(ObjKind::Cq, cqn), (ObjKind::Pd, pd)];
    let uar = g("wq.uar_page") as u32;
    if k == ObjKind::Sq {
        d.need(ObjKind::Uar, uar, syn::BAD_UAR)?;
        deps.push((ObjKind::Uar, uar));
    }
    let mut tisn = 0;
    if k == ObjKind::Sq {
        tisn = g("tis_num_0") as u32;
        d.need(ObjKind::Tis, tisn, syn::WQ_BAD_TIS)?;
        deps.push((ObjKind::Tis, tisn));
    }
    let dbr = g("wq.dbr_addr");
    check_dbr(dbr)?;
    let log = g("wq.log_wq_sz");
    d.cap_le(log, "log_max_wq_sz", syn::WQ_LOG_SIZE)?;
    let stride = g("wq.log_wq_stride");
    let lps = check_lps(g("wq.log_wq_pg_sz"))?;
    if g("wq.page_offset") != 0 {
        return fail(st::BAD_PARAM, syn::PAGE_OFFSET);
    }
    d.limit(
        k,
        if k == ObjKind::Sq {
            "log_max_sq"
        } else {
            "log_max_rq"
        },
    )?;
    // The wq's flexible `pas` follows the fixed layout of the command (the
    // layout file omits it).
    let n = pages_for((1u64 << stride.min(16)) << log, lps);
    let pas = read_pas_at(c, ifc().size(c.lin), n)?;
    let wq = Wq {
        state: 0,
        cqn,
        pd,
        uar,
        dbr_addr: dbr,
        log_wq_sz: log as u8,
        log_wq_stride: stride as u8,
        log_wq_pg_sz: lps,
        pas,
        tisn,
        ctx: c.bytes("ctx").to_vec(),
    };
    d.fw.objs.create(k, ObjData::Wq(wq), deps)
}

fn create_sq(d: &mut Device, c: &Cmd) -> R {
    let n = create_wq(d, c, ObjKind::Sq)?;
    c.out().set("sqn", u64::from(n)).done()
}

fn create_rq(d: &mut Device, c: &Cmd) -> R {
    let n = create_wq(d, c, ObjKind::Rq)?;
    c.out().set("rqn", u64::from(n)).done()
}

fn modify_wq(d: &mut Device, c: &Cmd, k: ObjKind, num: &str, cur: &str) -> R {
    let n = c.get(num) as u32;
    let cur_state = c.get(cur) as u8;
    let new_state = c.get("ctx.state") as u8;
    let ctx = c.bytes("ctx").to_vec();
    if k == ObjKind::Rq && c.get("modify_bitmask") & 8 != 0 {
        // Changing an RQ's set needs `modify_rq_counter_set_id` (0 on the
        // recorded ConnectX-4: there the set is given at CREATE_RQ).
        if d.fw.caps.general("modify_rq_counter_set_id") == 0 {
            return fail(st::BAD_PARAM, syn::WQ_COUNTER_SET_ID_MODIFY);
        }
        let set = c.get("ctx.counter_set_id");
        if set != 0 && !q_counter_exists(d, set) {
            return fail(st::BAD_PARAM, syn::WQ_COUNTER_SET_ID);
        }
    }
    if k == ObjKind::Sq && c.get("modify_bitmask") & 1 != 0 {
        // A new rate: 0 (not paced) or a set entry of the table.
        d.check_sq_pp_index(c.get("ctx.packet_pacing_rate_limit_index") as u16)?;
    }
    let Some(w) = d.fw.objs.wq_mut(k, n) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let legal = matches!(
        (cur_state, new_state),
        (0, 1) | (1, 1) | (1, 3) | (1, 0) | (3, 0)
    );
    if w.state != cur_state || !legal {
        return fail(st::BAD_RES_STATE, syn::WQ_STATE);
    }
    w.state = new_state;
    if new_state == 0 {
        d.datapath_forget(k, n);
    }
    let Some(w) = d.fw.objs.wq_mut(k, n) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    // The state changes, and the fields `modify_bitmask` selects (RQ: vsd
    // bit 1, scatter_fcs bit 2, counter_set_id bit 3; SQ: the packet
    // pacing rate limit index, bit 0); every other field keeps its
    // creation-time value (user_index, cqn, the wq...), as Linux's
    // modify_raw_packet_qp_rq/_sq rely on when they send the state alone.
    let bitmask = c.get("modify_bitmask");
    let sfield = if k == ObjKind::Sq { "sqc" } else { "rqc" };
    let selected: &[(u64, &str)] = if k == ObjKind::Sq {
        &[(1, "packet_pacing_rate_limit_index")]
    } else {
        &[(2, "vsd"), (4, "scatter_fcs"), (8, "counter_set_id")]
    };
    let mut kept = w.ctx.clone();
    ifc().set(&mut kept, sfield, "state", u64::from(new_state));
    for (bit, f) in selected {
        if bitmask & bit != 0 {
            ifc().set(&mut kept, sfield, f, ifc().get(&ctx, sfield, f));
        }
    }
    w.ctx = kept;
    if k == ObjKind::Sq {
        // A pacing wait ends: the SQ's rate, or its state, changed.
        d.raw_sq_repace(n);
    }
    if new_state == 3 && cur_state != 3 {
        d.raw_wq_error(k, n);
    }
    c.out().done()
}

fn modify_sq(d: &mut Device, c: &Cmd) -> R {
    modify_wq(d, c, ObjKind::Sq, "sqn", "sq_state")
}

fn modify_rq(d: &mut Device, c: &Cmd) -> R {
    modify_wq(d, c, ObjKind::Rq, "rqn", "rq_state")
}

fn destroy_sq(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Sq, "sqn")
}

fn destroy_rq(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Rq, "rqn")
}

fn query_wq(d: &mut Device, c: &Cmd, k: ObjKind, num: &str) -> R {
    let n = c.get(num) as u32;
    let Some(w) = d.fw.objs.wq_mut(k, n) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    let ctx = w.ctx.clone();
    let field = if k == ObjKind::Sq {
        "sq_context"
    } else {
        "rq_context"
    };
    let off = ifc().field(c.lout, field).byte_offset();
    c.out().put(off, &ctx).done()
}

fn query_sq(d: &mut Device, c: &Cmd) -> R {
    query_wq(d, c, ObjKind::Sq, "sqn")
}

fn query_rq(d: &mut Device, c: &Cmd) -> R {
    query_wq(d, c, ObjKind::Rq, "rqn")
}

// ---- TIS / TIR / RQT ------------------------------------------------------------

fn create_tis(d: &mut Device, c: &Cmd) -> R {
    let td = c.get("ctx.transport_domain") as u32;
    d.need(ObjKind::TransportDomain, td, syn::BAD_TD)?;
    d.limit(ObjKind::Tis, "log_max_tis")?;
    let n = d.fw.objs.create(
        ObjKind::Tis,
        ObjData::None,
        vec![(ObjKind::TransportDomain, td)],
    )?;
    c.out().set("tisn", u64::from(n)).done()
}

fn destroy_tis(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Tis, "tisn")
}

fn create_tir(d: &mut Device, c: &Cmd) -> R {
    let td = c.get("ctx.transport_domain") as u32;
    d.need(ObjKind::TransportDomain, td, syn::BAD_TD)?;
    let mut deps = vec![(ObjKind::TransportDomain, td)];
    let disp_type = c.get("ctx.disp_type") as u8;
    let inline_rqn = c.get("ctx.inline_rqn") as u32;
    let rqt = c.get("ctx.indirect_table") as u32;
    match disp_type {
        0 => {
            d.need(ObjKind::Rq, inline_rqn, syn::TIR_BAD_RQ)?;
            deps.push((ObjKind::Rq, inline_rqn));
        }
        1 => {
            d.need(ObjKind::Rqt, rqt, syn::TIR_BAD_RQT)?;
            deps.push((ObjKind::Rqt, rqt));
        }
        _ => return fail(st::BAD_PARAM, syn::TIR_DISP_TYPE),
    }
    let hash_fn = c.get("ctx.rx_hash_fn") as u8;
    let fields = c.get("ctx.rx_hash_field_selector_outer.selected_fields") as u32;
    // Executed: no hash, or Toeplitz over source/destination IP and L4
    // ports. Inverted XOR8 and the IPsec SPI are not emulated.
    if hash_fn != 0 && hash_fn != 2 {
        return fail(st::BAD_PARAM, syn::TIR_HASH_FN);
    }
    if fields & !0xf != 0 {
        return fail(st::BAD_PARAM, syn::TIR_HASH_FIELDS);
    }
    let mut key = [0u8; 40];
    key.copy_from_slice(&c.bytes("ctx.rx_hash_toeplitz_key")[..40]);
    let tir = super::objects::Tir {
        disp_type,
        inline_rqn,
        rqt,
        hash_fn,
        key,
        l3_ipv6: c.get("ctx.rx_hash_field_selector_outer.l3_prot_type") == 1,
        l4_udp: c.get("ctx.rx_hash_field_selector_outer.l4_prot_type") == 1,
        fields,
        td,
        self_lb_block: c.get("ctx.self_lb_block") as u8,
    };
    d.limit(ObjKind::Tir, "log_max_tir")?;
    let n =
        d.fw.objs
            .create(ObjKind::Tir, ObjData::Tir(Box::new(tir)), deps)?;
    c.out().set("tirn", u64::from(n)).done()
}

fn destroy_tir(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Tir, "tirn")
}

/// Byte offset of `create_rqt_in.rqt_context.rq_num[0]` (`rqtc` is 0xf0
/// bytes at 0x20; Linux `mlx5_ifc.h`).
const RQT_RQ_NUM: usize = 0x20 + 0xf0;

fn create_rqt(d: &mut Device, c: &Cmd) -> R {
    let max = c.get("rqt_context.rqt_max_size");
    let actual = c.get("rqt_context.rqt_actual_size");
    let log = d.fw.caps.general("log_max_rqt_size").min(31);
    if actual == 0 || actual > max || max > 1 << log {
        return fail(st::BAD_PARAM, syn::RQT_SIZE);
    }
    let n = actual as usize;
    if c.input.len() < RQT_RQ_NUM + 4 * n {
        return fail(st::BAD_INP_LEN, syn::RQT_SHORT);
    }
    let rqs: Vec<u32> = c.input[RQT_RQ_NUM..RQT_RQ_NUM + 4 * n]
        .chunks(4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0xff_ffff)
        .collect();
    let mut deps: Vec<(ObjKind, u32)> = Vec::new();
    for &r in &rqs {
        d.need(ObjKind::Rq, r, syn::RQT_BAD_RQ)?;
        if !deps.contains(&(ObjKind::Rq, r)) {
            deps.push((ObjKind::Rq, r));
        }
    }
    d.limit(ObjKind::Rqt, "log_max_rqt")?;
    let n = d.fw.objs.create(ObjKind::Rqt, ObjData::Rqt(rqs), deps)?;
    c.out().set("rqtn", u64::from(n)).done()
}

fn destroy_rqt(d: &mut Device, c: &Cmd) -> R {
    simple_destroy(d, c, ObjKind::Rqt, "rqtn")
}

// ---- flow tables ----------------------------------------------------------------

fn check_table(d: &Device, c: &Cmd) -> Result<u32, Fail> {
    let ty = c.get("table_type") as u8;
    if ty > 1 {
        return fail(st::BAD_PARAM, syn::FT_TYPE);
    }
    let id = c.get("table_id") as u32;
    match table(d, id) {
        Some(t) if t.table_type == ty => Ok(id),
        _ => fail(st::BAD_RES, syn::FT_BAD_TABLE),
    }
}

fn table(d: &Device, id: u32) -> Option<&FlowTable> {
    match d.fw.objs.get(ObjKind::FlowTable, id).map(|o| &o.data) {
        Some(ObjData::FlowTable(t)) => Some(t),
        _ => None,
    }
}

fn group(d: &Device, id: u32) -> Option<&FlowGroup> {
    match d.fw.objs.get(ObjKind::FlowGroup, id).map(|o| &o.data) {
        Some(ObjData::FlowGroup(g)) => Some(g),
        _ => None,
    }
}

fn flow_prop(d: &Device, ty: u8, field: &str) -> u64 {
    let prop = if ty == 0 {
        "flow_table_properties_nic_receive"
    } else {
        "flow_table_properties_nic_transmit"
    };
    ifc().get(
        &d.fw.caps.cur[&7],
        "flow_table_nic_cap",
        &format!("{prop}.{field}"),
    )
}

fn create_flow_table(d: &mut Device, c: &Cmd) -> R {
    if c.get("other_vport") != 0 {
        return fail(st::BAD_PARAM, syn::VPORT_OTHER);
    }
    let ty = c.get("table_type") as u8;
    if ty > 1 {
        return fail(st::BAD_PARAM, syn::FT_TYPE);
    }
    let log = c.get("flow_table_context.log_size") as u8;
    if u64::from(log) > flow_prop(d, ty, "log_max_ft_size") {
        return fail(st::BAD_PARAM, syn::FT_LOG_SIZE);
    }
    let level = c.get("flow_table_context.level") as u8;
    if u64::from(level) > flow_prop(d, ty, "max_ft_level") {
        return fail(st::BAD_PARAM, syn::FT_LEVEL);
    }
    let miss_action = c.get("flow_table_context.table_miss_action") as u8;
    let miss_table = c.get("flow_table_context.table_miss_id") as u32;
    let mut deps = vec![];
    match miss_action {
        0 => {}
        1 => match table(d, miss_table) {
            Some(t) if t.table_type == ty && t.level > level => {
                deps.push((ObjKind::FlowTable, miss_table));
            }
            _ => return fail(st::BAD_PARAM, syn::FT_BAD_MISS),
        },
        _ => return fail(st::BAD_PARAM, syn::FT_BAD_MISS),
    }
    let n = d.fw.objs.create(
        ObjKind::FlowTable,
        ObjData::FlowTable(FlowTable {
            table_type: ty,
            log_size: log,
            level,
            miss_action,
            miss_table,
            root: false,
        }),
        deps,
    )?;
    c.out().set("table_id", u64::from(n)).done()
}

fn destroy_flow_table(d: &mut Device, c: &Cmd) -> R {
    let id = check_table(d, c)?;
    d.fw.objs.destroy(ObjKind::FlowTable, id)?;
    c.out().done()
}

/// Byte offsets in `create_flow_group_in` beyond the layout facts (Linux
/// `mlx5_ifc.h`; see `firmware_cmds::flow`).
mod fg {
    pub(super) const START: usize = 0x1c;
    pub(super) const END: usize = 0x24;
    pub(super) const ENABLE: usize = 0x3f;
    pub(super) const CRITERIA: usize = 0x40;
    /// Reserved bytes between `table_id` and `match_criteria`.
    pub(super) const RESERVED: [(usize, usize); 3] = [(0x18, 0x1c), (0x20, 0x24), (0x28, 0x3f)];
}

/// Length of `fte_match_param` in bytes; each of its sets is 0x40.
const MATCH_PARAM: usize = 0x200;

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn create_flow_group(d: &mut Device, c: &Cmd) -> R {
    let id = check_table(d, c)?;
    let i = &c.input;
    if fg::RESERVED
        .iter()
        .any(|&(a, b)| i[a..b].iter().any(|&x| x != 0))
    {
        return fail(st::BAD_PARAM, syn::RESERVED_NOT_ZERO);
    }
    let (start, end) = (be32(i, fg::START), be32(i, fg::END));
    let log_size = table(d, id).map_or(0, |t| t.log_size);
    if start > end || u64::from(end) >= 1u64 << log_size.min(40) {
        return fail(st::BAD_PARAM, syn::FG_RANGE);
    }
    let overlaps = d.fw.objs.of(ObjKind::FlowGroup).any(|(_, o)| {
        matches!(&o.data, ObjData::FlowGroup(g) if g.table == id && g.start <= end && start <= g.end)
    });
    if overlaps {
        return fail(st::BAD_PARAM, syn::FG_RANGE);
    }
    let enable = i[fg::ENABLE];
    let criteria = &i[fg::CRITERIA..fg::CRITERIA + MATCH_PARAM];
    // Only outer_headers are executed: criteria in any other enabled set
    // are refused rather than silently ignored.
    let other = (1..8).any(|s| {
        enable & (1 << s) != 0 && criteria[s * 0x40..(s + 1) * 0x40].iter().any(|&x| x != 0)
    });
    if enable >> 5 != 0 || other {
        return fail(st::BAD_PARAM, syn::FG_CRITERIA);
    }
    let outer = if enable & 1 != 0 {
        criteria[..0x40].to_vec()
    } else {
        vec![0; 0x40]
    };
    let n = d.fw.objs.create(
        ObjKind::FlowGroup,
        ObjData::FlowGroup(FlowGroup {
            table: id,
            start,
            end,
            outer,
        }),
        vec![(ObjKind::FlowTable, id)],
    )?;
    c.out().set("group_id", u64::from(n)).done()
}

fn destroy_flow_group(d: &mut Device, c: &Cmd) -> R {
    let id = check_table(d, c)?;
    let g = c.get("group_id") as u32;
    match group(d, g) {
        Some(gr) if gr.table == id => {}
        _ => return fail(st::BAD_RES, syn::NO_SUCH_OBJECT),
    }
    d.fw.objs.destroy(ObjKind::FlowGroup, g)?;
    c.out().done()
}

fn find_fte(d: &Device, table: u32, index: u32) -> Option<u32> {
    d.fw.objs
        .of(ObjKind::FlowEntry)
        .find(|(_, o)| matches!(&o.data, ObjData::FlowEntry(e) if e.table == table && e.index == index))
        .map(|(n, _)| n)
}

/// Byte offsets in `set_fte_in`: `flow_context` at 0x40, its
/// `match_value` at 0x40 and its destination list at 0x300 (Linux
/// `mlx5_ifc.h`; see `firmware_cmds::flow`).
const FTE_MATCH_VALUE: usize = 0x40 + 0x40;
const FTE_DESTS: usize = 0x40 + 0x300;

fn set_fte(d: &mut Device, c: &Cmd) -> R {
    let id = check_table(d, c)?;
    let index = c.get("flow_index") as u32;
    let Some(t) = table(d, id) else {
        return fail(st::BAD_RES, syn::FT_BAD_TABLE);
    };
    let (log_size, level, ty) = (t.log_size, t.level, t.table_type);
    if u64::from(index) >= 1u64 << log_size.min(40) {
        return fail(st::BAD_PARAM, syn::FT_INDEX);
    }
    let g = c.get("flow_context.group_id") as u32;
    match group(d, g) {
        Some(gr) if gr.table == id => {
            if index < gr.start || index > gr.end {
                return fail(st::BAD_PARAM, syn::FTE_NOT_IN_GROUP);
            }
        }
        _ => return fail(st::BAD_PARAM, syn::FT_BAD_GROUP),
    }
    let action = c.get("flow_context.action") as u16;
    // Executed actions: allow, drop, forward. Counters, reformat, header
    // rewrite and VLAN push/pop are not emulated.
    const ALLOW: u16 = 1;
    const DROP: u16 = 2;
    const FWD: u16 = 4;
    if action & !(ALLOW | DROP | FWD) != 0 || (action & DROP != 0 && action & FWD != 0) {
        return fail(st::BAD_PARAM, syn::FTE_ACTION);
    }
    let ndest = c.get("flow_context.destination_list_size") as usize;
    if (action & FWD != 0) != (ndest > 0) {
        return fail(st::BAD_PARAM, syn::FTE_DEST);
    }
    if c.input.len() < FTE_DESTS + 8 * ndest {
        return fail(st::BAD_INP_LEN, syn::FTE_SHORT);
    }
    let mut dests = Vec::with_capacity(ndest);
    let mut deps = vec![(ObjKind::FlowGroup, g)];
    for k in 0..ndest {
        let w = be32(&c.input, FTE_DESTS + 8 * k);
        let (dt, did) = ((w >> 24) as u8, w & 0xff_ffff);
        let ok = match dt {
            1 => table(d, did).is_some_and(|t| t.table_type == ty && t.level > level),
            2 => ty == 0 && d.fw.objs.exists(ObjKind::Tir, did),
            _ => false,
        };
        if !ok {
            return fail(st::BAD_PARAM, syn::FTE_DEST);
        }
        let kind = if dt == 1 {
            ObjKind::FlowTable
        } else {
            ObjKind::Tir
        };
        deps.push((kind, did));
        dests.push((dt, did));
    }
    // A flow tag (reported in the receive CQEs of the frames the entry
    // forwards) needs the table type's `flow_tag` capability.
    let flow_tag = c.get("flow_context.flow_tag") as u32;
    if flow_tag != 0 && flow_prop(d, ty, "flow_tag") == 0 {
        return fail(st::BAD_PARAM, syn::FTE_FLOW_TAG);
    }
    let outer = c.input[FTE_MATCH_VALUE..FTE_MATCH_VALUE + 0x40].to_vec();
    if let Some(old) = find_fte(d, id, index) {
        d.fw.objs.destroy(ObjKind::FlowEntry, old)?;
    }
    d.fw.objs.create(
        ObjKind::FlowEntry,
        ObjData::FlowEntry(FlowEntry {
            table: id,
            index,
            group: g,
            action,
            outer,
            dests,
            flow_tag,
        }),
        deps,
    )?;
    c.out().done()
}

fn delete_fte(d: &mut Device, c: &Cmd) -> R {
    let id = check_table(d, c)?;
    let index = c.get("flow_index") as u32;
    let Some(n) = find_fte(d, id, index) else {
        return fail(st::BAD_RES, syn::NO_SUCH_OBJECT);
    };
    d.fw.objs.destroy(ObjKind::FlowEntry, n)?;
    c.out().done()
}

fn set_flow_table_root(d: &mut Device, c: &Cmd) -> R {
    if c.get("other_vport") != 0 {
        return fail(st::BAD_PARAM, syn::VPORT_OTHER);
    }
    let id = check_table(d, c)?;
    let ty = c.get("table_type") as u8;
    let ids: Vec<u32> = d.fw.objs.of(ObjKind::FlowTable).map(|(n, _)| n).collect();
    for n in ids {
        if let Some(ObjData::FlowTable(t)) =
            d.fw.objs
                .get_mut(ObjKind::FlowTable, n)
                .map(|o| &mut o.data)
        {
            if t.table_type == ty {
                t.root = n == id;
            }
        }
    }
    c.out().done()
}
