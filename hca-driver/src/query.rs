//! Registers (ACCESS_REG) and the port/vport queries of bring-up.

use firmware_cmds::caps::CmdHcaCap;
use firmware_cmds::command::Encode;
use firmware_cmds::layout::Layout;
use firmware_cmds::mkey::{QuerySpecialContextsIn, QuerySpecialContextsOut};
use firmware_cmds::reg::{
    ACCESS_REG_OP_MOD_READ, AccessRegisterIn, PORT_STATUS_UP, PTYS_EN, PTYS_IB, PaosReg, PmtuReg,
    PtysReg, REG_PAOS, REG_PMTU, REG_PTYS, REGISTER_DATA_OFFSET,
};
use firmware_cmds::roce::{QueryRoceAddressIn, QueryRoceAddressOut, RoceAddrLayout};
use firmware_cmds::vport::{
    HcaVportContext, NicVportContext, Pkey, QueryHcaVportContextIn, QueryHcaVportContextOut,
    QueryHcaVportGidIn, QueryHcaVportGidOut, QueryHcaVportPkeyIn, QueryHcaVportPkeyOut,
    QueryNicVportContextIn, QueryNicVportContextOut, QueryVportStateIn, QueryVportStateOut,
    VPORT_QUERY_ALL_INDICES, VPORT_STATE_UP,
};
use platform::Platform;

use crate::Output;
use crate::error::{Error, Result};
use crate::events::MAX_PORTS;
use crate::hca::Hca;
use crate::info::{ETH_FRAMING, IbMtu, LinkLayer, PortInfo, PortState, eth_speed};

/// A command head followed by a register image.
struct HeadAndImage<'a> {
    head: &'a [u8],
    image: &'a [u8],
}

impl Encode for HeadAndImage<'_> {
    fn encoded_len(&self) -> usize {
        self.head.len() + self.image.len()
    }
    fn encode_range(&self, offset: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            let pos = offset + i;
            *d = if pos < self.head.len() {
                self.head[pos]
            } else {
                self.image.get(pos - self.head.len()).copied().unwrap_or(0)
            };
        }
    }
}

/// The device's special memory keys (QUERY_SPECIAL_CONTEXTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialContexts {
    /// `dump_fill_mkey`: reads through it return the fill pattern.
    pub dump_fill_mkey: u32,
    /// `resd_lkey`: local access by physical (bus) address, without
    /// translation and without a PD. Whoever can name it in a work request
    /// can aim the device's DMA anywhere the bus reaches.
    pub resd_lkey: u32,
    /// `null_mkey`: scatter entries with it are skipped.
    pub null_mkey: u32,
}

impl<P: Platform> Hca<P> {
    /// QUERY_SPECIAL_CONTEXTS: the reserved, dump-fill and null keys.
    pub fn query_special_contexts(&self) -> Result<SpecialContexts> {
        let out: QuerySpecialContextsOut = self.exec(&QuerySpecialContextsIn::new())?;
        Ok(SpecialContexts {
            dump_fill_mkey: out.get(QuerySpecialContextsOut::dump_fill_mkey),
            resd_lkey: out.get(QuerySpecialContextsOut::resd_lkey),
            null_mkey: out.get(QuerySpecialContextsOut::null_mkey),
        })
    }

    /// ACCESS_REG: writes (`ACCESS_REG_OP_MOD_WRITE`) or reads
    /// (`ACCESS_REG_OP_MOD_READ`) register `id` (`REG_*` of
    /// [`firmware_cmds::reg`]) with image `reg`; returns the image the
    /// firmware answers.
    pub fn access_reg<R: Layout>(&self, op_mod: u16, id: u16, argument: u32, reg: &R) -> Result<R> {
        let head = AccessRegisterIn::new()
            .with(AccessRegisterIn::op_mod, op_mod)?
            .with(AccessRegisterIn::register_id, id)?
            .with(AccessRegisterIn::argument, argument)?;
        let msg = HeadAndImage {
            head: head.bytes(),
            image: reg.bytes(),
        };
        self.exec_read(&msg, REGISTER_DATA_OFFSET + R::SIZE, |o| {
            o.decode_at::<R>(REGISTER_DATA_OFFSET)
        })
    }

    fn read_port_reg<R: Layout>(&self, id: u16, reg: R) -> Result<R> {
        self.access_reg(ACCESS_REG_OP_MOD_READ, id, 0, &reg)
    }

    /// Queries every port: state, MTUs, speed, addresses (QUERY_VPORT_STATE,
    /// QUERY_NIC_VPORT_CONTEXT or QUERY_HCA_VPORT_CONTEXT, and the PAOS,
    /// PMTU and PTYS registers).
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        let ll = self.info.caps.link_layer();
        let pmtu = self.read_port_reg(REG_PMTU, PmtuReg::new().with(PmtuReg::local_port, port)?)?;
        let (max_b, oper_b) = (pmtu.get(PmtuReg::max_mtu), pmtu.get(PmtuReg::oper_mtu));
        let ptys = self.read_port_reg(
            REG_PTYS,
            PtysReg::new().with(PtysReg::local_port, port)?.with(
                PtysReg::proto_mask,
                if ll == LinkLayer::Ethernet {
                    PTYS_EN
                } else {
                    PTYS_IB
                },
            )?,
        )?;
        match ll {
            LinkLayer::Ethernet => {
                let paos =
                    self.read_port_reg(REG_PAOS, PaosReg::new().with(PaosReg::local_port, port)?)?;
                let up = paos.get(PaosReg::oper_status) == PORT_STATUS_UP;
                let nic = self.nic_vport_context()?;
                let oper = ptys.get(PtysReg::eth_proto_oper);
                Ok(PortInfo {
                    port,
                    link_layer: ll,
                    state: if up {
                        PortState::Active
                    } else {
                        PortState::Down
                    },
                    max_mtu_bytes: max_b,
                    oper_mtu_bytes: oper_b,
                    max_mtu: IbMtu::for_roce(u32::from(max_b.saturating_sub(ETH_FRAMING))),
                    active_mtu: IbMtu::for_roce(u32::from(oper_b.saturating_sub(ETH_FRAMING))),
                    proto_oper: oper,
                    speed_mbps: if up {
                        eth_speed(oper).map(|s| s.1)
                    } else {
                        None
                    },
                    ib_link_width_oper: 0,
                    lid: 0,
                    mac: (port == 1).then(|| nic.get(NicVportContext::permanent_address).mac()),
                    port_guid: nic.get(NicVportContext::port_guid),
                    gid0: None,
                })
            }
            LinkLayer::InfiniBand => {
                let q =
                    QueryHcaVportContextIn::new().with(QueryHcaVportContextIn::port_num, port)?;
                let out: QueryHcaVportContextOut = self.exec(&q)?;
                let ctx = out.get(QueryHcaVportContextOut::hca_vport_context);
                let state = PortState::from_raw(ctx.get(HcaVportContext::port_state));
                Ok(PortInfo {
                    port,
                    link_layer: ll,
                    state,
                    max_mtu_bytes: max_b,
                    oper_mtu_bytes: oper_b,
                    max_mtu: IbMtu::fitting(u32::from(max_b)),
                    active_mtu: IbMtu::fitting(u32::from(oper_b)),
                    proto_oper: u32::from(ptys.get(PtysReg::ib_proto_oper)),
                    speed_mbps: None,
                    ib_link_width_oper: ptys.get(PtysReg::ib_link_width_oper),
                    lid: ctx.get(HcaVportContext::lid),
                    mac: None,
                    port_guid: ctx.get(HcaVportContext::port_guid),
                    gid0: Some(self.query_gid(port, 0)?),
                })
            }
        }
    }

    /// `vhca_port_num` of the RoCE address commands for `port`: the port
    /// on a function with several vHCA ports (`num_vhca_ports` > 0), 0
    /// otherwise, where the field is not the driver's to set (Linux's
    /// `lib/gid.c`).
    pub fn roce_vhca_port_num(&self, port: u8) -> u8 {
        if self.info.caps.general().get(CmdHcaCap::num_vhca_ports) > 0 {
            port
        } else {
            0
        }
    }

    /// GID `index` of a port: QUERY_ROCE_ADDRESS on Ethernet (the RoCE
    /// address table, all zero until someone sets the entry with
    /// SET_ROCE_ADDRESS; RoCE must be enabled first, see
    /// [`Context::enable_roce`](crate::verbs::Context::enable_roce)),
    /// QUERY_HCA_VPORT_GID on InfiniBand.
    pub fn query_gid(&self, port: u8, index: u16) -> Result<[u8; 16]> {
        match self.info.caps.link_layer() {
            LinkLayer::Ethernet => {
                let q = QueryRoceAddressIn::new()
                    .with(QueryRoceAddressIn::roce_address_index, index)?
                    .with(
                        QueryRoceAddressIn::vhca_port_num,
                        self.roce_vhca_port_num(port),
                    )?;
                let out: QueryRoceAddressOut = self.exec(&q)?;
                Ok(out
                    .get(QueryRoceAddressOut::roce_address)
                    .get(RoceAddrLayout::source_l3_address))
            }
            LinkLayer::InfiniBand => {
                let q = QueryHcaVportGidIn::new()
                    .with(QueryHcaVportGidIn::port_num, port)?
                    .with(QueryHcaVportGidIn::gid_index, index)?;
                self.exec_read(&q, QueryHcaVportGidOut::SIZE + 16, one_gid)
            }
        }
    }

    /// Entries of a port's P_Key table: `128 << pkey_table_size` of the
    /// current general capabilities (what QUERY_HCA_VPORT_PKEY answers);
    /// see [`Caps::pkey_table_len`](crate::Caps::pkey_table_len).
    pub fn pkey_table_len(&self) -> Result<u16> {
        self.info.caps.pkey_table_len()
    }

    /// P_Key `index` of a port's table (QUERY_HCA_VPORT_PKEY): what
    /// `ibv_query_pkey` asks on an InfiniBand port. 0 is an empty entry.
    ///
    /// [`Error::InvalidArgument`] for an index beyond
    /// [`pkey_table_len`](Self::pkey_table_len) (0xffff, "the whole table",
    /// included: see [`query_pkey_table`](Self::query_pkey_table)).
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        if index >= self.pkey_table_len()? || index == VPORT_QUERY_ALL_INDICES {
            return Err(Error::InvalidArgument {
                arg: "index",
                reason: "beyond the P_Key table",
            });
        }
        let mut k = 0;
        self.pkey_query(port, index, core::slice::from_mut(&mut k))?;
        Ok(k)
    }

    /// The whole P_Key table of a port (QUERY_HCA_VPORT_PKEY with index
    /// 0xffff) into `out`, which must hold
    /// [`pkey_table_len`](Self::pkey_table_len) entries; returns how many
    /// were written.
    pub fn query_pkey_table(&self, port: u8, out: &mut [u16]) -> Result<usize> {
        let n = usize::from(self.pkey_table_len()?);
        let out = out.get_mut(..n).ok_or(Error::InvalidArgument {
            arg: "out",
            reason: "shorter than the P_Key table",
        })?;
        self.pkey_query(port, VPORT_QUERY_ALL_INDICES, out)?;
        Ok(n)
    }

    fn pkey_query(&self, port: u8, index: u16, out: &mut [u16]) -> Result<()> {
        let q = QueryHcaVportPkeyIn::new()
            .with(QueryHcaVportPkeyIn::port_num, port)?
            .with(QueryHcaVportPkeyIn::pkey_index, index)?;
        let len = QueryHcaVportPkeyOut::SIZE + Pkey::SIZE * out.len();
        self.exec_read(&q, len, |o| pkeys(o, out))
    }

    /// QUERY_NIC_VPORT_CONTEXT of this function's vport.
    pub fn nic_vport_context(&self) -> Result<NicVportContext> {
        let out: QueryNicVportContextOut = self.exec(&QueryNicVportContextIn::new())?;
        Ok(out.get(QueryNicVportContextOut::nic_vport_context))
    }

    /// QUERY_HCA_VPORT_CONTEXT of `port` (InfiniBand: the subnet
    /// manager's view, `sm_lid`, `lmc`, port GUID...).
    pub fn hca_vport_context(&self, port: u8) -> Result<HcaVportContext> {
        let q = QueryHcaVportContextIn::new().with(QueryHcaVportContextIn::port_num, port)?;
        let out: QueryHcaVportContextOut = self.exec(&q)?;
        Ok(out.get(QueryHcaVportContextOut::hca_vport_context))
    }

    /// QUERY_VPORT_STATE of this function's vport: whether it is up.
    pub fn vport_up(&self) -> Result<bool> {
        let out: QueryVportStateOut = self.exec(&QueryVportStateIn::new())?;
        Ok(out.get(QueryVportStateOut::state) == VPORT_STATE_UP)
    }

    /// Bring-up: the vport, GUIDs and every port.
    pub(crate) fn query_ports(&mut self) -> Result<()> {
        let ll = self.info.caps.link_layer();
        let n = self.info.caps.num_ports();
        if usize::from(n) > MAX_PORTS {
            log::warn!("{n} ports; the driver tracks the first {MAX_PORTS}");
        }
        if ll == LinkLayer::Ethernet {
            let up = self.vport_up()?;
            log::debug!("vport state: {}", if up { "up" } else { "down" });
            let nic = self.nic_vport_context()?;
            self.info.node_guid = nic.get(NicVportContext::node_guid);
            self.info.sys_image_guid = nic.get(NicVportContext::system_image_guid);
        }
        self.info.ports.clear();
        for port in 1..=n.min(MAX_PORTS as u8) {
            let p = self.query_port(port)?;
            if ll == LinkLayer::InfiniBand && port == 1 {
                let q = QueryHcaVportContextIn::new().with(QueryHcaVportContextIn::port_num, 1)?;
                let out: QueryHcaVportContextOut = self.exec(&q)?;
                let ctx = out.get(QueryHcaVportContextOut::hca_vport_context);
                self.info.node_guid = ctx.get(HcaVportContext::node_guid);
                self.info.sys_image_guid = ctx.get(HcaVportContext::system_image_guid);
            }
            self.events.set_port_state(port, p.state);
            // Capacity: at most MAX_PORTS ports are queried.
            let _ = self.info.ports.push(p);
        }
        Ok(())
    }
}

/// Reads the answer of QUERY_HCA_VPORT_GID for one GID: `gids_num` must be
/// 1 and the GID inside the output.
pub(crate) fn one_gid(o: &Output<'_>) -> Result<[u8; 16]> {
    let h: QueryHcaVportGidOut = o.decode()?;
    let n = h.get(QueryHcaVportGidOut::gids_num);
    if n != 1 {
        return Err(o.invalid(
            "query_hca_vport_gid_out.gids_num",
            u64::from(n),
            "one GID was asked for",
        ));
    }
    let mut g = [0u8; 16];
    o.read(QueryHcaVportGidOut::SIZE, &mut g)?;
    Ok(g)
}

/// Reads the `out.len()` P_Keys of a QUERY_HCA_VPORT_PKEY answer into `out`.
pub(crate) fn pkeys(o: &Output<'_>, out: &mut [u16]) -> Result<()> {
    let mut i = 0;
    let n = out.len();
    o.read_array::<[u8; 4]>(
        "query_hca_vport_pkey_out.pkey",
        QueryHcaVportPkeyOut::SIZE,
        n,
        |e| {
            out[i] = Pkey::from_array(e).get(Pkey::pkey);
            i += 1;
            Ok(())
        },
    )
}
