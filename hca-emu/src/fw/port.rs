//! Ports: PAOS/PTYS/PMTU and HOST_ENDIANNESS through ACCESS_REG, vport
//! state and contexts, the RoCE address (GID) table.
//!
//! Synthesized values (the trace does not show them): MAC
//! `7c:fe:90:xx:xx:pp` (Mellanox OUI, bytes from the seed, port number
//! last), max MTU 9978 (PMTU, bytes including the L2 header), default admin
//! MTU 1522 (1500 + Ethernet header, VLAN tag and FCS, as Linux writes it),
//! Ethernet protocols 10G/25G/40G/50G/100G with 100GBASE-CR4 operational
//! when the link is up. The link is up when the port's PAOS admin status is
//! up and a peer is connected on the virtual wire (the peer's own admin
//! state is not considered).
//!
//! With [`PortType::InfiniBand`](crate::PortType::InfiniBand): PTYS answers
//! the IB protocol mask (widths 1X/4X, speeds SDR..EDR, 4X EDR operational
//! when up), the HCA vport context has a LID (the port number) when up,
//! GID 0 is `fe80::` with the port GUID. Every port has a P_Key table
//! (QUERY_HCA_VPORT_PKEY) with the default P_Key 0xffff in entry 0.

use super::{Cmd, HcaState, R, fail, st};
use crate::device::Device;
use crate::ifc::ifc;
use crate::personality::ROCE_ADDRESS_TABLE_SIZE;

/// The default P_Key (full membership), entry 0 of every P_Key table.
pub const DEFAULT_PKEY: u16 = 0xffff;
use crate::rng::Rng;
use crate::syndrome as syn;

const REG_PMTU: u64 = 0x5003;
const REG_PTYS: u64 = 0x5004;
const REG_PAOS: u64 = 0x5006;
const REG_HOST_ENDIANNESS: u64 = 0x7004;

/// Ethernet protocol bits the port offers: 10GBASE-CR (12), 40GBASE-CR4
/// (6), 100GBASE-CR4 (20), 25GBASE-CR (27), 50GBASE-CR2 (30).
pub const ETH_PROTO_CAPABILITY: u32 = (1 << 12) | (1 << 6) | (1 << 20) | (1 << 27) | (1 << 30);
/// Operational protocol when the link is up: 100GBASE-CR4.
pub const ETH_PROTO_OPER: u32 = 1 << 20;
/// PMTU max_mtu.
pub const MAX_MTU: u16 = 9978;

/// PTYS `proto_mask`: InfiniBand.
const PTYS_IB: u64 = 1 << 0;
/// PTYS `proto_mask`: Ethernet.
const PTYS_EN: u64 = 1 << 2;
/// IB link widths an InfiniBand port offers: 1X (bit 0) and 4X (bit 2).
pub const IB_LINK_WIDTH_CAPABILITY: u64 = (1 << 0) | (1 << 2);
/// IB link width in operation when the link is up: 4X.
pub const IB_LINK_WIDTH_OPER: u64 = 1 << 2;
/// IB speeds an InfiniBand port offers: SDR (bit 0), DDR, QDR, FDR10, FDR,
/// EDR (bit 5), as a ConnectX-4 does.
pub const IB_PROTO_CAPABILITY: u64 = 0x3f;
/// IB speed in operation when the link is up: EDR (bit 5).
pub const IB_PROTO_OPER: u64 = 1 << 5;
/// The subnet prefix of GID 0 on an InfiniBand port (the default,
/// link-local prefix fe80::/64).
const DEFAULT_GID_PREFIX: u64 = 0xfe80_0000_0000_0000;

/// One physical port.
#[derive(Clone, Debug)]
pub(crate) struct Port {
    pub(crate) num: u8,
    pub(crate) admin_up: bool,
    pub(crate) admin_mtu: u16,
    pub(crate) eth_proto_admin: u32,
    pub(crate) mac: [u8; 6],
    pub(crate) roce_en: bool,
    /// NIC vport context `disable_mc_local_lb`: multicast frames the
    /// function sends are not looped back to its own receive steering.
    pub(crate) disable_mc_local_lb: bool,
    /// NIC vport context `disable_uc_local_lb`: unicast frames to the
    /// function's own address are not looped back to it.
    pub(crate) disable_uc_local_lb: bool,
    pub(crate) vport_mtu: u16,
    pub(crate) event_enable: u8,
    pub(crate) gids: Vec<Option<Vec<u8>>>,
    pub(crate) node_guid: u64,
    /// The P_Key table: entry 0 is the default P_Key, entries beyond the
    /// vector (up to the table size of the capabilities) are 0 (invalid).
    pub(crate) pkeys: Vec<u16>,
    /// InfiniBand: the subnet manager has configured the port (LID
    /// assigned, logical state Active).
    pub(crate) ib_active: bool,
    /// InfiniBand: a subnet manager sweep is scheduled.
    pub(crate) sm_pending: bool,
    /// Generation of the subnet manager timer (a link change cancels it).
    pub(crate) sm_gen: u64,
}

impl Port {
    pub(crate) fn new(seed: u64, num: u8) -> Self {
        let mut r = Rng::new(seed ^ 0x6d61_6321);
        let x = r.next_u64();
        let mac = [0x7c, 0xfe, 0x90, (x >> 16) as u8, (x >> 8) as u8, num];
        let node_guid = u64::from_be_bytes([mac[0], mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], 0]);
        Self {
            num,
            admin_up: true,
            admin_mtu: 1522,
            eth_proto_admin: ETH_PROTO_CAPABILITY,
            mac,
            roce_en: false,
            disable_mc_local_lb: false,
            disable_uc_local_lb: false,
            vport_mtu: 1522,
            event_enable: 0,
            gids: vec![None; ROCE_ADDRESS_TABLE_SIZE],
            node_guid,
            pkeys: vec![DEFAULT_PKEY],
            ib_active: false,
            sm_pending: false,
            sm_gen: 0,
        }
    }
}

impl Device {
    /// Whether a port's link is up.
    pub(crate) fn link_up(&self, port: u8) -> bool {
        let admin = self
            .fw
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .is_some_and(|p| p.admin_up);
        admin && self.peers.contains_key(&port)
    }

    /// The port's link came up or went down (cable, PAOS, INIT_HCA,
    /// TEARDOWN_HCA): an Ethernet port posts the port change event at
    /// once; an InfiniBand port posts Down when it leaves Active, and
    /// Active only once the subnet manager has configured it
    /// ([`ib_port_check`](Self::ib_port_check)).
    pub(crate) fn link_changed(&mut self, port: u8, up: bool) {
        if !self.fw.infiniband() {
            self.port_change_event(port, up);
            return;
        }
        self.ib_port_check(port);
    }

    /// InfiniBand: whether the port is physically up and its HCA
    /// initialized, so that the subnet manager configures it.
    fn ib_wants_active(&self, port: u8) -> bool {
        self.link_up(port) && self.fw.state == HcaState::Initialized
    }

    /// InfiniBand: brings the logical port state in line with the link.
    /// Down (link down or HCA not initialized): Active is lost (Down
    /// event) and a pending sweep cancelled. Up: the subnet manager
    /// configures the port [`EmuConfig::sm_delay`](crate::EmuConfig::sm_delay)
    /// later (at once when zero) and the Active event is posted then.
    pub(crate) fn ib_port_check(&mut self, port: u8) {
        if !self.fw.infiniband() {
            return;
        }
        let want = self.ib_wants_active(port);
        let delay = self.cfg.sm_delay;
        let Some(p) = self.fw.ports.get_mut(usize::from(port).wrapping_sub(1)) else {
            return;
        };
        if !want {
            p.sm_gen += 1;
            p.sm_pending = false;
            if std::mem::take(&mut p.ib_active) {
                self.port_change_event(port, false);
            }
            return;
        }
        if p.ib_active || p.sm_pending {
            return;
        }
        if delay.is_zero() {
            p.ib_active = true;
            self.port_change_event(port, true);
        } else {
            p.sm_pending = true;
            let gen_ = p.sm_gen;
            self.schedule(
                delay,
                crate::device::Timer::SmConfigure { port, sm_gen: gen_ },
            );
        }
    }

    /// The subnet manager's sweep reached the port.
    pub(crate) fn sm_configure(&mut self, port: u8, sm_gen: u64) {
        let want = self.ib_wants_active(port);
        let Some(p) = self.fw.ports.get_mut(usize::from(port).wrapping_sub(1)) else {
            return;
        };
        if p.sm_gen != sm_gen || !p.sm_pending {
            return;
        }
        p.sm_pending = false;
        if want {
            p.ib_active = true;
            self.port_change_event(port, true);
        }
    }

    /// The LID the subnet manager gave a port (0 when not Active or on
    /// Ethernet): [`EmuConfig::lid_base`](crate::EmuConfig::lid_base) +
    /// port - 1.
    pub(crate) fn port_lid(&self, port: u8) -> u16 {
        match self.fw.ports.get(usize::from(port).wrapping_sub(1)) {
            Some(p) if self.fw.infiniband() && p.ib_active => {
                self.cfg.lid_base.wrapping_add(u16::from(port) - 1)
            }
            _ => 0,
        }
    }

    /// InfiniBand logical port state (IBA PortInfo.PortState, also the
    /// HCA vport context's `port_state`): 1 Down, 2 Init (link up, not yet
    /// configured), 4 Active.
    pub(crate) fn ib_port_state(&self, port: u8) -> u8 {
        let active = self
            .fw
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .is_some_and(|p| p.ib_active);
        match (self.link_up(port), active) {
            (true, true) => 4,
            (true, false) => 2,
            _ => 1,
        }
    }

    /// IBA PortPhysicalState: 5 LinkUp, 3 Disabled (admin down), 2 Polling
    /// (admin up, no peer).
    pub(crate) fn ib_phys_state(&self, port: u8) -> u8 {
        let admin = self
            .fw
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .is_some_and(|p| p.admin_up);
        match (self.link_up(port), admin) {
            (true, _) => 5,
            (false, true) => 2,
            (false, false) => 3,
        }
    }

    /// Entries of every port's P_Key table: `128 << pkey_table_size` of the
    /// current general capabilities (at most 4096).
    pub(crate) fn pkey_table_len(&self) -> usize {
        128usize << self.fw.caps.general("pkey_table_size").min(5)
    }

    fn port_index(&self, port: u64) -> Result<usize, super::Fail> {
        if port == 0 || port > self.fw.ports.len() as u64 {
            fail(st::BAD_PARAM, syn::BAD_PORT)
        } else {
            Ok(port as usize - 1)
        }
    }
}

pub(crate) fn access_reg(d: &mut Device, c: &Cmd) -> R {
    let id = c.get("register_id");
    if d.fw.state != HcaState::Initialized && id != REG_HOST_ENDIANNESS {
        return fail(st::BAD_SYS_STATE, syn::REG_BEFORE_INIT);
    }
    let layout = match id {
        REG_HOST_ENDIANNESS => "register_host_endianness",
        REG_PAOS => "paos_reg",
        REG_PTYS => "ptys_reg",
        REG_PMTU => "pmtu_reg",
        _ => return fail(st::BAD_PARAM, syn::REG_UNKNOWN),
    };
    let size = ifc().size(layout);
    if c.input.len() < 16 + size {
        return fail(st::BAD_INP_LEN, syn::REG_SHORT);
    }
    if c.out_len < 16 + size {
        return fail(st::BAD_OUTP_LEN, syn::REG_SHORT);
    }
    let write = match c.op_mod {
        0 => true,
        1 => false,
        _ => return fail(st::BAD_PARAM, syn::BAD_OP_MOD),
    };
    let data = c.input[16..16 + size].to_vec();
    let t = ifc();
    let get = |f: &str| t.get(&data, layout, f);
    let mut reg = vec![0u8; size];
    if id == REG_HOST_ENDIANNESS {
        if write {
            d.fw.host_endianness = get("he") as u8;
        }
        t.set(&mut reg, layout, "he", u64::from(d.fw.host_endianness));
    } else {
        let pi = d.port_index(get("local_port"))?;
        let num = d.fw.ports[pi].num;
        t.set(&mut reg, layout, "local_port", u64::from(num));
        match id {
            REG_PAOS => {
                if write && get("ase") == 1 {
                    let up = match get("admin_status") {
                        1 => true,
                        2 => false,
                        _ => return fail(st::BAD_PARAM, syn::REG_BAD_VALUE),
                    };
                    let before = d.link_up(num);
                    d.fw.ports[pi].admin_up = up;
                    let after = d.link_up(num);
                    if before != after {
                        d.link_changed(num, after);
                    }
                }
                if write && get("ee") == 1 {
                    d.fw.ports[pi].event_enable = get("e") as u8;
                }
                let p = &d.fw.ports[pi];
                t.set(
                    &mut reg,
                    layout,
                    "admin_status",
                    if p.admin_up { 1 } else { 2 },
                );
                t.set(
                    &mut reg,
                    layout,
                    "oper_status",
                    if d.link_up(num) { 1 } else { 2 },
                );
                t.set(
                    &mut reg,
                    layout,
                    "e",
                    u64::from(d.fw.ports[pi].event_enable),
                );
            }
            REG_PTYS if d.fw.infiniband() => {
                if get("proto_mask") & PTYS_IB == 0 {
                    return fail(st::BAD_PARAM, syn::REG_BAD_VALUE);
                }
                if write {
                    let (w, p) = (get("ib_link_width_admin"), get("ib_proto_admin"));
                    if w & !IB_LINK_WIDTH_CAPABILITY != 0
                        || p & !IB_PROTO_CAPABILITY != 0
                        || w == 0
                        || p == 0
                    {
                        return fail(st::BAD_PARAM, syn::REG_BAD_VALUE);
                    }
                }
                let up = d.link_up(num);
                t.set(&mut reg, layout, "proto_mask", PTYS_IB);
                t.set(
                    &mut reg,
                    layout,
                    "ib_link_width_capability",
                    IB_LINK_WIDTH_CAPABILITY,
                );
                t.set(&mut reg, layout, "ib_proto_capability", IB_PROTO_CAPABILITY);
                t.set(
                    &mut reg,
                    layout,
                    "ib_link_width_admin",
                    IB_LINK_WIDTH_CAPABILITY,
                );
                t.set(&mut reg, layout, "ib_proto_admin", IB_PROTO_CAPABILITY);
                let (w, p) = if up {
                    (IB_LINK_WIDTH_OPER, IB_PROTO_OPER)
                } else {
                    (0, 0)
                };
                t.set(&mut reg, layout, "ib_link_width_oper", w);
                t.set(&mut reg, layout, "ib_proto_oper", p);
            }
            REG_PTYS => {
                if get("proto_mask") & PTYS_EN == 0 {
                    return fail(st::BAD_PARAM, syn::REG_BAD_VALUE);
                }
                if write {
                    let admin = get("eth_proto_admin") as u32;
                    if admin & !ETH_PROTO_CAPABILITY != 0 || admin == 0 {
                        return fail(st::BAD_PARAM, syn::REG_BAD_VALUE);
                    }
                    d.fw.ports[pi].eth_proto_admin = admin;
                }
                let up = d.link_up(num);
                t.set(&mut reg, layout, "proto_mask", PTYS_EN);
                t.set(
                    &mut reg,
                    layout,
                    "eth_proto_capability",
                    u64::from(ETH_PROTO_CAPABILITY),
                );
                t.set(
                    &mut reg,
                    layout,
                    "eth_proto_admin",
                    u64::from(d.fw.ports[pi].eth_proto_admin),
                );
                t.set(
                    &mut reg,
                    layout,
                    "eth_proto_oper",
                    if up { u64::from(ETH_PROTO_OPER) } else { 0 },
                );
            }
            REG_PMTU => {
                if write {
                    let m = get("admin_mtu");
                    if m == 0 || m > u64::from(MAX_MTU) {
                        return fail(st::BAD_PARAM, syn::REG_BAD_VALUE);
                    }
                    d.fw.ports[pi].admin_mtu = m as u16;
                }
                let p = &d.fw.ports[pi];
                t.set(&mut reg, layout, "max_mtu", u64::from(MAX_MTU));
                t.set(&mut reg, layout, "admin_mtu", u64::from(p.admin_mtu));
                t.set(&mut reg, layout, "oper_mtu", u64::from(p.admin_mtu));
            }
            _ => unreachable!("register ids matched above"),
        }
    }
    let mut o = c.out();
    o.put(16, &reg);
    o.done()
}

fn no_other_vport(c: &Cmd) -> Result<(), super::Fail> {
    if c.get("other_vport") != 0 {
        fail(st::BAD_PARAM, syn::VPORT_OTHER)
    } else {
        Ok(())
    }
}

pub(crate) fn query_vport_state(d: &mut Device, c: &Cmd) -> R {
    no_other_vport(c)?;
    if c.op_mod > 2 {
        return fail(st::BAD_PARAM, syn::BAD_OP_MOD);
    }
    c.out()
        .set("state", u64::from(d.link_up(1)))
        .set("admin_state", 2)
        .done()
}

pub(crate) fn query_nic_vport_context(d: &mut Device, c: &Cmd) -> R {
    no_other_vport(c)?;
    let p = &d.fw.ports[0];
    let mut o = c.out();
    let m = &p.mac;
    // `min_wqe_inline_mode` L2 (1): the SQ WQEs must inline the L2
    // headers (the Ethernet caps say `wqe_inline_mode` 1, "as the vport
    // context says").
    o.set("nic_vport_context.min_wqe_inline_mode", 1)
        .set("nic_vport_context.roce_en", u64::from(p.roce_en))
        .set(
            "nic_vport_context.disable_mc_local_lb",
            u64::from(p.disable_mc_local_lb),
        )
        .set(
            "nic_vport_context.disable_uc_local_lb",
            u64::from(p.disable_uc_local_lb),
        )
        .set("nic_vport_context.mtu", u64::from(p.vport_mtu))
        .set(
            "nic_vport_context.permanent_address.mac_addr_47_32",
            u64::from(u16::from_be_bytes([m[0], m[1]])),
        )
        .set(
            "nic_vport_context.permanent_address.mac_addr_31_0",
            u64::from(u32::from_be_bytes([m[2], m[3], m[4], m[5]])),
        )
        .set("nic_vport_context.node_guid", p.node_guid)
        .set("nic_vport_context.port_guid", p.node_guid)
        .set("nic_vport_context.system_image_guid", p.node_guid);
    o.done()
}

pub(crate) fn modify_nic_vport_context(d: &mut Device, c: &Cmd) -> R {
    no_other_vport(c)?;
    let sel = |f: &str| c.get(&format!("field_select.{f}")) == 1;
    let v = |f: &str| c.get(&format!("nic_vport_context.{f}"));
    if sel("mtu") && v("mtu") > u64::from(MAX_MTU) {
        return fail(st::BAD_PARAM, syn::MTU_RANGE);
    }
    let p = &mut d.fw.ports[0];
    if sel("mtu") {
        p.vport_mtu = v("mtu") as u16;
    }
    if sel("roce_en") {
        p.roce_en = v("roce_en") == 1;
    }
    if sel("disable_mc_local_lb") {
        p.disable_mc_local_lb = v("disable_mc_local_lb") == 1;
    }
    if sel("disable_uc_local_lb") {
        p.disable_uc_local_lb = v("disable_uc_local_lb") == 1;
    }
    if sel("permanent_address") {
        let hi = (v("permanent_address.mac_addr_47_32") as u16).to_be_bytes();
        let lo = (v("permanent_address.mac_addr_31_0") as u32).to_be_bytes();
        p.mac = [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]];
    }
    c.out().done()
}

pub(crate) fn query_hca_vport_context(d: &mut Device, c: &Cmd) -> R {
    no_other_vport(c)?;
    let pi = d.port_index(c.get("port_num").max(1))?;
    let num = d.fw.ports[pi].num;
    let up = d.link_up(num);
    let guid = d.fw.ports[pi].node_guid;
    // An InfiniBand port gets a LID from the subnet manager once it is
    // configured (EmuConfig::lid_base + port - 1); Ethernet ports have
    // none and are Active with the link.
    let lid = d.port_lid(num);
    let (state, phys) = if d.fw.infiniband() {
        (d.ib_port_state(num), d.ib_phys_state(num))
    } else if up {
        (4, 5)
    } else {
        (1, 3)
    };
    c.out()
        .set("hca_vport_context.lid", u64::from(lid))
        .set("hca_vport_context.port_state", u64::from(state))
        .set("hca_vport_context.vport_state", u64::from(state))
        .set("hca_vport_context.port_physical_state", u64::from(phys))
        .set("hca_vport_context.has_raw", 1)
        .set("hca_vport_context.node_guid", guid)
        .set("hca_vport_context.port_guid", guid)
        .set("hca_vport_context.system_image_guid", guid)
        .done()
}

pub(crate) fn query_hca_vport_gid(d: &mut Device, c: &Cmd) -> R {
    no_other_vport(c)?;
    let pi = d.port_index(c.get("port_num").max(1))?;
    let idx = c.get("gid_index") as usize;
    if idx >= ROCE_ADDRESS_TABLE_SIZE {
        return fail(st::BAD_PARAM, syn::GID_INDEX);
    }
    if c.out_len < 32 {
        return fail(st::BAD_OUTP_LEN, syn::OUTPUT_TOO_SHORT);
    }
    let gid = if d.fw.infiniband() {
        // GID 0: the default subnet prefix and the port GUID; no others.
        let mut g = vec![0u8; 16];
        if idx == 0 {
            g[..8].copy_from_slice(&DEFAULT_GID_PREFIX.to_be_bytes());
            g[8..].copy_from_slice(&d.fw.ports[pi].node_guid.to_be_bytes());
        }
        g
    } else {
        d.fw.ports[pi].gids[idx]
            .as_ref()
            .map(|a| a[..16].to_vec())
            .unwrap_or_else(|| vec![0; 16])
    };
    let mut o = c.out();
    o.set("gids_num", 1);
    o.put(16, &gid);
    o.done()
}

/// QUERY_HCA_VPORT_PKEY: one entry of the port's P_Key table, or the
/// whole table for `pkey_index` 0xffff. The table has `128 <<
/// pkey_table_size` entries (current general capabilities); entry 0 is the
/// default P_Key 0xffff, the others 0. Answered on Ethernet ports too.
pub(crate) fn query_hca_vport_pkey(d: &mut Device, c: &Cmd) -> R {
    no_other_vport(c)?;
    let pi = d.port_index(c.get("port_num").max(1))?;
    let len = d.pkey_table_len();
    let idx = c.get("pkey_index") as usize;
    let range = if idx == 0xffff {
        0..len
    } else if idx < len {
        idx..idx + 1
    } else {
        return fail(st::BAD_PARAM, syn::PKEY_INDEX);
    };
    if c.out_len < 16 + 4 * range.len() {
        return fail(st::BAD_OUTP_LEN, syn::OUTPUT_TOO_SHORT);
    }
    let pkeys = &d.fw.ports[pi].pkeys;
    let mut o = c.out();
    for (k, i) in range.enumerate() {
        let p = pkeys.get(i).copied().unwrap_or(0);
        o.put(16 + 4 * k, &u32::from(p).to_be_bytes());
    }
    o.done()
}

fn roce_index(d: &Device, c: &Cmd) -> Result<(usize, usize), super::Fail> {
    let idx = c.get("roce_address_index") as usize;
    if idx >= ROCE_ADDRESS_TABLE_SIZE {
        return fail(st::BAD_PARAM, syn::GID_INDEX);
    }
    // vhca_port_num names a port of a multi-port vHCA; with
    // num_vhca_ports 0 it is not a field the driver may use (Linux's
    // lib/gid.c sets it only when num_vhca_ports > 0), and the table is
    // the function's own port's.
    let n = c.get("vhca_port_num");
    let vhca_ports = d.fw.caps.general("num_vhca_ports");
    let port = match (vhca_ports, n) {
        (0, 0) => 1,
        (0, _) => return fail(st::BAD_PARAM, syn::ROCE_VHCA_PORT),
        (m, n) if n == 0 || n > m => return fail(st::BAD_PARAM, syn::ROCE_VHCA_PORT),
        (_, n) => n,
    };
    let pi = d.port_index(port)?;
    // The RoCE address table is RoCE's: Linux enables RoCE
    // (MODIFY_NIC_VPORT_CONTEXT roce_en) before its first RoCE address
    // command and never reads the table.
    if !d.fw.ports[0].roce_en {
        return fail(st::BAD_RES_STATE, syn::ROCE_NOT_ENABLED);
    }
    Ok((pi, idx))
}

pub(crate) fn set_roce_address(d: &mut Device, c: &Cmd) -> R {
    let (pi, idx) = roce_index(d, c)?;
    let a = c.bytes("roce_address").to_vec();
    d.fw.ports[pi].gids[idx] = a.iter().any(|&b| b != 0).then_some(a);
    c.out().done()
}

pub(crate) fn query_roce_address(d: &mut Device, c: &Cmd) -> R {
    let (pi, idx) = roce_index(d, c)?;
    let a = d.fw.ports[pi].gids[idx]
        .clone()
        .unwrap_or_else(|| vec![0; 32]);
    let off = ifc().field(c.lout, "roce_address").byte_offset();
    c.out().put(off, &a).done()
}
