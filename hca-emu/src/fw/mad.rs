//! MAD_IFC (0x50d): the firmware's subnet management agent answering a
//! management datagram (a 256-byte MAD) for a port, as Linux's
//! `mlx5_query_mad_ifc_port` and rdma-core's `query_port_state_with_mads`
//! use it.
//!
//! The command itself fails (a command status, syndromes in
//! [`crate::syndrome`]) when `op_mod` has bits other than "ignore M_Key"
//! (bit 0) and "ignore B_Key" (bit 1), when the port does not exist, or on
//! an Ethernet port (no subnet management there). Otherwise the answer is
//! the MAD with method GetResp (0x81) and the MAD status (IBA 13.4.7) of
//! what the agent made of it:
//!
//! | MAD | MAD status |
//! |---|---|
//! | `base_version` not 1, or `class_version` not 1 | 0x0004 unsupported class or version |
//! | management class not subnet (LID routed 0x01 or directed route 0x81) | 0x0004 |
//! | method not Get (0x01) | 0x0008 method not supported |
//! | attribute not NodeInfo (0x0011) or PortInfo (0x0015) | 0x000c method/attribute combination not supported |
//! | PortInfo for a port the HCA does not have (`attr_mod`, 0 = this port) | 0x001c invalid attribute modifier |
//!
//! PortInfo (IBA 14.2.5.6, the offsets Linux `mlx5_query_mad_ifc_port`
//! reads): M_Key 0, GID prefix fe80::, the LID (once the subnet manager
//! has configured the port), master SM LID = the port's own LID (the
//! emulated subnet manager runs on it; assumption), capability mask with
//! IsExtendedSpeedsSupported (bit 14), link widths 1X/4X supported and
//! enabled, 4X active when up, speeds SDR/DDR/QDR supported, extended
//! speeds FDR/EDR supported and EDR active when up (as PTYS says),
//! PortState (1 Down, 2 Init, 4 Active), PortPhysicalState (2 Polling, 3
//! Disabled, 5 LinkUp), MTU capability 4096, active MTU 4096 when up,
//! VL capability VL0-VL3, subnet timeout 18.

use super::{Cmd, R, fail, st};
use crate::device::Device;
use crate::syndrome as syn;

/// MAD status: unsupported class or version.
pub const MAD_STATUS_BAD_VERSION: u16 = 0x0004;
/// MAD status: method not supported.
pub const MAD_STATUS_UNSUP_METHOD: u16 = 0x0008;
/// MAD status: method/attribute combination not supported.
pub const MAD_STATUS_UNSUP_METHOD_ATTR: u16 = 0x000c;
/// MAD status: invalid value in the attribute or its modifier.
pub const MAD_STATUS_INVALID_ATTRIB_VALUE: u16 = 0x001c;

const MGMT_CLASS_SUBN_LID_ROUTED: u8 = 0x01;
const MGMT_CLASS_SUBN_DIRECTED_ROUTE: u8 = 0x81;
const METHOD_GET: u8 = 0x01;
const METHOD_GET_RESP: u8 = 0x81;
const ATTR_NODE_INFO: u16 = 0x0011;
const ATTR_PORT_INFO: u16 = 0x0015;
/// Offset of the SMP data (64 bytes) in a MAD.
const SMP_DATA: usize = 64;
/// Size of a MAD.
const MAD: usize = 256;

pub(crate) fn mad_ifc(d: &mut Device, c: &Cmd) -> R {
    if c.op_mod & !0x3 != 0 {
        return fail(st::BAD_PARAM, syn::BAD_OP_MOD);
    }
    let port = c.get("port");
    if port == 0 || port > d.fw.ports.len() as u64 {
        return fail(st::BAD_PARAM, syn::BAD_PORT);
    }
    let port = port as u8;
    if !d.fw.infiniband() {
        return fail(st::BAD_PARAM, syn::MAD_IFC_NOT_IB);
    }
    let off = c.off("mad");
    let mut mad = [0u8; MAD];
    mad.copy_from_slice(&c.input[off..off + MAD]);
    let status = d.smp(port, &mut mad);
    mad[3] = METHOD_GET_RESP;
    let mut st_word = status;
    if mad[1] == MGMT_CLASS_SUBN_DIRECTED_ROUTE {
        // Directed route: the response has the direction bit set.
        st_word |= 0x8000;
    }
    mad[4..6].copy_from_slice(&st_word.to_be_bytes());
    let mut o = c.out();
    let out_off = crate::ifc::ifc()
        .field(c.lout, "response_mad_packet")
        .byte_offset();
    o.put(out_off, &mad);
    o.done()
}

impl Device {
    /// Executes a subnet management packet for `port` in place (the
    /// answer's data replaces the request's); returns the MAD status.
    fn smp(&self, port: u8, mad: &mut [u8; MAD]) -> u16 {
        let (base_version, class, class_version, method) = (mad[0], mad[1], mad[2], mad[3]);
        if base_version != 1 || class_version != 1 {
            return MAD_STATUS_BAD_VERSION;
        }
        if class != MGMT_CLASS_SUBN_LID_ROUTED && class != MGMT_CLASS_SUBN_DIRECTED_ROUTE {
            return MAD_STATUS_BAD_VERSION;
        }
        if method != METHOD_GET {
            return MAD_STATUS_UNSUP_METHOD;
        }
        let attr_id = u16::from_be_bytes([mad[16], mad[17]]);
        let attr_mod = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
        let data = &mut mad[SMP_DATA..SMP_DATA + 64];
        match attr_id {
            ATTR_NODE_INFO => {
                data.fill(0);
                self.node_info(port, data);
                0
            }
            ATTR_PORT_INFO => {
                let p = if attr_mod == 0 {
                    u32::from(port)
                } else {
                    attr_mod
                };
                if p == 0 || p > self.fw.ports.len() as u32 {
                    return MAD_STATUS_INVALID_ATTRIB_VALUE;
                }
                data.fill(0);
                self.port_info(p as u8, data);
                0
            }
            _ => MAD_STATUS_UNSUP_METHOD_ATTR,
        }
    }

    /// NodeInfo (IBA 14.2.5.3): a channel adapter with the HCA's ports.
    fn node_info(&self, port: u8, b: &mut [u8]) {
        let guid = self.fw.ports.first().map_or(0, |p| p.node_guid);
        let port_guid = self
            .fw
            .ports
            .get(usize::from(port) - 1)
            .map_or(0, |p| p.node_guid);
        b[0] = 1; // BaseVersion
        b[1] = 1; // ClassVersion
        b[2] = 1; // NodeType: channel adapter
        b[3] = self.fw.ports.len() as u8;
        b[4..12].copy_from_slice(&guid.to_be_bytes()); // SystemImageGUID
        b[12..20].copy_from_slice(&guid.to_be_bytes()); // NodeGUID
        b[20..28].copy_from_slice(&port_guid.to_be_bytes());
        b[28..30].copy_from_slice(&(self.pkey_table_len() as u16).to_be_bytes());
        b[30..32].copy_from_slice(&self.cfg.personality.pci_id().1.to_be_bytes());
        b[36] = port;
        b[37..40].copy_from_slice(&[0x00, 0x02, 0xc9]); // Mellanox OUI
    }

    /// PortInfo (IBA 14.2.5.6) of `port`.
    fn port_info(&self, port: u8, b: &mut [u8]) {
        let up = self.link_up(port);
        let lid = self.port_lid(port);
        b[8..16].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
        b[16..18].copy_from_slice(&lid.to_be_bytes());
        b[18..20].copy_from_slice(&lid.to_be_bytes()); // MasterSMLID
        b[20..24].copy_from_slice(&(1u32 << 14).to_be_bytes()); // CapabilityMask
        b[28] = port;
        b[29] = 0x3; // LinkWidthEnabled: 1X, 4X
        b[30] = 0x3; // LinkWidthSupported
        b[31] = if up { 0x2 } else { 0 }; // LinkWidthActive: 4X
        b[32] = (0x7 << 4) | self.ib_port_state(port); // LinkSpeedSupported | PortState
        b[33] = (self.ib_phys_state(port) << 4) | 0x2; // PortPhysicalState | LinkDownDefaultState
        b[35] = (u8::from(up) << 4) | 0x7; // LinkSpeedActive (SDR: extended speed in use) | Enabled
        b[36] = if up { 5 << 4 } else { 0 }; // NeighborMTU 4096 | MasterSMSL 0
        b[37] = 3 << 4; // VLCap: VL0-VL3
        b[41] = 5; // MTUCap 4096
        b[43] = 3 << 4; // OperationalVLs
        b[50] = 1; // GUIDCap
        b[51] = 18; // SubnetTimeOut
        b[62] = (if up { 2 << 4 } else { 0 }) | 0x3; // LinkSpeedExtActive EDR | Supported FDR, EDR
        b[63] = 0x3; // LinkSpeedExtEnabled
    }
}
