//! The verbs context (`ibv_context`): a UAR page for doorbells, the
//! RoCE port setup, device and port queries, and the allocators QPs and
//! memory keys draw from.

use core::fmt;
use core::sync::atomic::{AtomicU8, AtomicU16, Ordering};

use firmware_cmds::roce::{
    QueryRoceAddressIn, QueryRoceAddressOut, ROCE_L3_TYPE_IPV6, ROCE_VERSION_V1, ROCE_VERSION_V2,
    RoceAddrLayout, SetRoceAddressIn,
};
use firmware_cmds::vport::{ModifyNicVportContextIn, ModifyNicVportFieldSelect, NicVportContext};
use platform::Platform;
use verbs_core::DeviceLimits;

use firmware_cmds::caps::CmdHcaCap;

use crate::bits;
use crate::error::{Error, Result};
use crate::fw::{Object, UarObj};
use crate::hca::Hca;
use crate::info::LinkLayer;
use crate::verbs::attr::{DeviceAttr, Gid, GidEntry, PortAttr, RoceVersion};
use crate::verbs::capacity::{Capacities, MAX_CONTEXT_QPS};
use crate::verbs::qp::ReceiverPins;
use crate::verbs::share::{DefaultShare, Handle, Share};

/// A raw firmware object held through a verbs family's HCA handle.
pub(crate) type FwObj<P, S, K> = Object<<S as Share>::Ref<Hca<P>>, K>;
/// The RoCE v2 GID index [`Context::open`] programs on every Ethernet
/// port: the link-local GID of the port's MAC, RoCE v2.
///
/// The table is laid out as Linux lays out a port's default GIDs (RoCE v1
/// and v2 both enabled): the same link-local GID at index
/// [`ROCE_V1_GID_INDEX`] (0) as RoCE v1 and at index 1 as RoCE v2. A peer
/// running Linux uses the same indices: `-g 1` for RoCE v2 with perftest
/// and the `ibv_*_pingpong` examples, `-g 0` for RoCE v1.
pub const DEFAULT_GID_INDEX: u8 = 1;
/// The RoCE v1 GID index [`Context::open`] programs on every Ethernet port:
/// the link-local GID of the port's MAC, RoCE v1 (EtherType 0x8915).
pub const ROCE_V1_GID_INDEX: u8 = 0;
/// The default P_Key (full membership), the only P_Key of an Ethernet port
/// and entry 0 of an InfiniBand port's table.
pub const DEFAULT_PKEY: u16 = firmware_cmds::vport::DEFAULT_PKEY;

/// A verbs context (`struct ibv_context`) on an open [`Hca`].
///
/// Holds a UAR page (ALLOC_UAR) whose CQ doorbell and BlueFlame registers
/// the context's CQs and QPs ring, the device attributes, and the user
/// index allocator of its QPs. Opening it sets up RoCE on every Ethernet
/// port: `roce_en` in the NIC vport context (MODIFY_NIC_VPORT_CONTEXT)
/// first, then (SET_ROCE_ADDRESS) the link-local GID of the port's MAC as
/// RoCE v1 at [`ROCE_V1_GID_INDEX`] and RoCE v2 at [`DEFAULT_GID_INDEX`],
/// as Linux lays out the table. It holds a handle of the HCA; what is
/// created from it holds a handle of it.
pub struct Context<P: Platform + 'static, S: Share = DefaultShare> {
    hca: S::Ref<Hca<P>>,
    uar: FwObj<P, S, UarObj>,
    attr: DeviceAttr,
    limits: DeviceLimits,
    caps: Capacities,
    uidx: spin::Mutex<[u64; MAX_CONTEXT_QPS / 64]>,
    mkey_variant: AtomicU8,
    sport: AtomicU16,
    /// The reserved lkey (QUERY_SPECIAL_CONTEXTS `resd_lkey`), asked for
    /// by the first QP that leaves key checks to the device.
    reserved_lkey: spin::Once<u32>,
    /// The raw packet QP receive sides flow rules pin.
    pins: ReceiverPins<P, S>,
    /// The descriptor of [`async_fd`](Self::async_fd), made at its first
    /// call.
    #[cfg(all(feature = "std", target_os = "linux"))]
    async_fd: spin::Once<AsyncFd>,
}

/// An epoll set of the HCA's "asynchronous events queued" eventfd and the
/// eventfd of the asynchronous EQ's MSI-X vector.
#[cfg(all(feature = "std", target_os = "linux"))]
#[derive(Debug)]
struct AsyncFd {
    set: platform::notify::Epoll,
    _queued: std::sync::Arc<platform::notify::EventFd>,
}

impl<P: Platform + 'static, S: Share> fmt::Debug for Context<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("uar", &self.uar.number())
            .finish_non_exhaustive()
    }
}

impl<P: Platform + 'static, S: Share> Context<P, S> {
    /// Opens a context (`ibv_open_device`) on the HCA behind `hca`:
    /// ALLOC_UAR, then the RoCE setup of every Ethernet port whose MAC
    /// address is known.
    pub fn open(hca: &impl Handle<Hca<P>, Share = S>) -> Result<Self> {
        let hca: S::Ref<Hca<P>> = hca.clone().into_ref();
        let uar = hca.alloc_uar()?.rehome(hca.clone());
        let info = hca.info();
        let g = info.caps.general();
        let attr = DeviceAttr::from_info(info);
        let max_wqe = 1u32
            .checked_shl(u32::from(g.get(CmdHcaCap::log_max_qp_sz)))
            .unwrap_or(u32::MAX);
        let limits = DeviceLimits {
            max_sq_desc_sz: u32::from(g.get(CmdHcaCap::max_wqe_sz_sq)),
            max_rq_desc_sz: u32::from(g.get(CmdHcaCap::max_wqe_sz_rq)),
            max_send_wqebb: max_wqe,
            max_recv_wr: max_wqe,
        };
        let ctx = Context {
            hca: hca.clone(),
            uar,
            attr,
            limits,
            caps: Capacities::from_caps(&info.caps),
            uidx: spin::Mutex::new([0; MAX_CONTEXT_QPS / 64]),
            // A fixed start: keys differ between contexts only by index.
            mkey_variant: AtomicU8::new(0x5a),
            sport: AtomicU16::new(0),
            reserved_lkey: spin::Once::new(),
            pins: ReceiverPins::new(),
            #[cfg(all(feature = "std", target_os = "linux"))]
            async_fd: spin::Once::new(),
        };
        if info.caps.link_layer() == LinkLayer::Ethernet && info.caps.roce.is_some() {
            ctx.enable_roce()?;
            for p in info.ports.iter() {
                match p.mac {
                    Some(mac) => {
                        for (index, version) in [
                            (ROCE_V1_GID_INDEX, RoceVersion::V1),
                            (DEFAULT_GID_INDEX, RoceVersion::V2),
                        ] {
                            let e = GidEntry {
                                gid: Gid::link_local_from_mac(mac),
                                mac,
                                vlan: None,
                                version,
                                ipv6: true,
                            };
                            ctx.set_gid(p.port, u16::from(index), &e)?;
                        }
                    }
                    None => log::warn!(
                        "port {}: MAC address unknown, GIDs {ROCE_V1_GID_INDEX} and {DEFAULT_GID_INDEX} not programmed",
                        p.port
                    ),
                }
            }
        }
        Ok(ctx)
    }

    /// Closes the context (DEALLOC_UAR of its UAR page). Everything
    /// created from it is gone (they hold handles of it).
    pub fn destroy(self) -> Result<()> {
        self.uar.destroy()
    }

    /// Closes the context behind its last handle; while PDs or CQs still
    /// hold it, drops this handle and returns [`Error::InUse`] (it is
    /// closed when the last handle drops).
    pub fn try_destroy(this: impl Handle<Self, Share = S>) -> Result<()> {
        crate::verbs::share::destroy_last::<S, Self>(this.into_ref(), "the context", Self::destroy)
    }

    /// Reads the next asynchronous event (`ibv_get_async_event`): port
    /// state changes, CQ errors, QP/SRQ events, internal errors, as the
    /// driver's EQ code queues them ([`EventRouter::pop`](crate::EventRouter::pop);
    /// the queue is the HCA's, shared by its contexts). Waits at most
    /// `timeout` (platform time), looking at the EQs and, when the driver
    /// runs on interrupts, sleeping on the asynchronous EQ's MSI-X vector
    /// between two looks; `None` when nothing came (a zero timeout: a
    /// non-blocking descriptor's `EAGAIN`). Nothing needs acknowledging
    /// (events are values).
    ///
    /// # Errors
    ///
    /// What servicing the HCA reports.
    pub fn get_async_event(
        &self,
        timeout: core::time::Duration,
    ) -> Result<Option<crate::AsyncEvent>> {
        let hca = &self.hca;
        let p = hca.platform();
        let deadline = crate::deadline::Deadline::start(p, timeout);
        let vector =
            (hca.interrupt_stats().vectors > 0).then(|| hca.vector_for(crate::eq::EqKind::Async));
        loop {
            let seen = vector.and_then(|v| hca.interrupt_seen(v).map(|s| (v, s)));
            crate::verbs::queue::service(hca)?;
            if let Some(e) = hca.events().pop() {
                return Ok(Some(e));
            }
            let left = deadline.remaining(p);
            if left.is_zero() {
                return Ok(None);
            }
            match seen {
                Some((v, count)) => {
                    hca.wait_interrupt(v, count, left.min(hca.config().timeouts.health_poll))?;
                }
                None => {
                    hca.note_poll();
                    p.relax();
                }
            }
        }
    }

    /// A file descriptor (`ibv_context.async_fd`) that becomes readable
    /// when an asynchronous event is queued or the asynchronous EQ's
    /// MSI-X vector interrupts (std, Linux): an epoll set of an eventfd
    /// the EQ code signals while events are queued and of the vector's
    /// eventfd ([`Platform::interrupt_fd`]). The vector is shared with
    /// the command EQ, so readability is a hint:
    /// [`get_async_event`](Self::get_async_event) with a zero timeout may
    /// find nothing. The descriptor stays owned by the context.
    ///
    /// # Errors
    ///
    /// [`Error::Platform`] when `epoll_create1`, `eventfd` or `epoll_ctl`
    /// fails.
    #[cfg(all(feature = "std", target_os = "linux"))]
    pub fn async_fd(&self) -> Result<std::os::fd::RawFd> {
        let hca = &self.hca;
        let make = || -> core::result::Result<AsyncFd, platform::Error> {
            let set = platform::notify::Epoll::new()?;
            let queued = hca.events().queued_fd()?;
            set.add(queued.raw_fd())?;
            if hca.interrupt_stats().vectors > 0 {
                let v = hca.vector_for(crate::eq::EqKind::Async);
                if let Some(fd) = hca.platform().interrupt_fd(v) {
                    set.add(fd)?;
                }
            }
            Ok(AsyncFd {
                set,
                _queued: queued,
            })
        };
        self.async_fd
            .try_call_once(make)
            .map(|a| a.set.raw_fd())
            .map_err(|source| Error::Platform {
                what: "making the context's asynchronous event descriptor",
                source,
            })
    }

    /// The reserved lkey (QUERY_SPECIAL_CONTEXTS `resd_lkey`, asked once):
    /// posts that leave key checks to the device ([`SgeCheck::Off`]) refuse
    /// it, since the device checks no PD, range or translation for it.
    ///
    /// [`SgeCheck::Off`]: crate::verbs::SgeCheck::Off
    pub fn reserved_lkey(&self) -> Result<u32> {
        self.reserved_lkey
            .try_call_once(|| Ok(self.hca.query_special_contexts()?.resd_lkey))
            .copied()
    }

    /// The HCA's handle.
    pub fn hca(&self) -> &S::Ref<Hca<P>> {
        &self.hca
    }

    /// The context's UAR page.
    pub fn uar(&self) -> &FwObj<P, S, UarObj> {
        &self.uar
    }

    /// The capacities of the context's tables (sized from the device caps).
    pub fn capacities(&self) -> &Capacities {
        &self.caps
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> &DeviceAttr {
        &self.attr
    }

    /// The queue size limits of the device (for verbs-core's sizing).
    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// Queries a port (`ibv_query_port`): state, MTUs, speed and width,
    /// LID or MAC, table lengths.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.check_port(port)?;
        let p = self.hca.query_port(port)?;
        Ok(PortAttr::from_port(self.hca.info(), &p))
    }

    pub(crate) fn check_port(&self, port: u8) -> Result<()> {
        if port == 0 || port > self.hca.caps().num_ports() {
            return Err(Error::InvalidAttribute {
                attr: "port_num",
                value: u64::from(port),
                reason: "no such port",
            });
        }
        Ok(())
    }

    /// GID `index` of a port (`ibv_query_gid`).
    pub fn query_gid(&self, port: u8, index: u16) -> Result<Gid> {
        self.check_port(port)?;
        Ok(Gid(self.hca.query_gid(port, index)?))
    }

    /// An entry of an Ethernet port's RoCE address table
    /// (QUERY_ROCE_ADDRESS): GID, MAC, VLAN, RoCE version. `None` when the
    /// entry is empty.
    pub fn query_gid_entry(&self, port: u8, index: u16) -> Result<Option<GidEntry>> {
        self.check_port(port)?;
        if self.hca.caps().link_layer() != LinkLayer::Ethernet {
            return Err(Error::Unsupported(
                "RoCE address table entries exist on Ethernet ports only",
            ));
        }
        let q = QueryRoceAddressIn::new()
            .with(QueryRoceAddressIn::roce_address_index, index)?
            .with(
                QueryRoceAddressIn::vhca_port_num,
                self.hca.roce_vhca_port_num(port),
            )?;
        let out: QueryRoceAddressOut = self.hca.exec(&q)?;
        let a = out.get(QueryRoceAddressOut::roce_address);
        let gid = Gid(a.get(RoceAddrLayout::source_l3_address));
        if gid.is_zero() {
            return Ok(None);
        }
        Ok(Some(GidEntry {
            gid,
            mac: a.source_mac(),
            vlan: a
                .get(RoceAddrLayout::vlan_valid)
                .then(|| a.get(RoceAddrLayout::vlan_id)),
            version: if a.get(RoceAddrLayout::roce_version) == ROCE_VERSION_V1 {
                RoceVersion::V1
            } else {
                RoceVersion::V2
            },
            ipv6: a.get(RoceAddrLayout::roce_l3_type) == ROCE_L3_TYPE_IPV6,
        }))
    }

    /// Programs entry `index` of an Ethernet port's RoCE address table
    /// (SET_ROCE_ADDRESS).
    pub fn set_gid(&self, port: u8, index: u16, e: &GidEntry) -> Result<()> {
        self.check_port(port)?;
        let mut a = RoceAddrLayout::new();
        a.set(RoceAddrLayout::source_l3_address, e.gid.0)?;
        a.set_source_mac(e.mac);
        if let Some(v) = e.vlan {
            a.set(RoceAddrLayout::vlan_valid, true)?
                .set(RoceAddrLayout::vlan_id, v)?;
        }
        a.set(
            RoceAddrLayout::roce_version,
            match e.version {
                RoceVersion::V1 => ROCE_VERSION_V1,
                RoceVersion::V2 => ROCE_VERSION_V2,
            },
        )?;
        if e.ipv6 {
            a.set(RoceAddrLayout::roce_l3_type, ROCE_L3_TYPE_IPV6)?;
        }
        let s = SetRoceAddressIn::new()
            .with(SetRoceAddressIn::roce_address_index, index)?
            .with(
                SetRoceAddressIn::vhca_port_num,
                self.hca.roce_vhca_port_num(port),
            )?
            .with(SetRoceAddressIn::roce_address, a)?;
        self.hca.exec(&s)?;
        Ok(())
    }

    /// Empties entry `index` of an Ethernet port's RoCE address table
    /// (SET_ROCE_ADDRESS with an all-zero address).
    pub fn clear_gid(&self, port: u8, index: u16) -> Result<()> {
        self.check_port(port)?;
        let s = SetRoceAddressIn::new()
            .with(SetRoceAddressIn::roce_address_index, index)?
            .with(
                SetRoceAddressIn::vhca_port_num,
                self.hca.roce_vhca_port_num(port),
            )?;
        self.hca.exec(&s)?;
        Ok(())
    }

    /// P_Key `index` of a port (`ibv_query_pkey`). An Ethernet port has one,
    /// the default P_Key 0xffff (as `mlx5_ib` reports, without asking the
    /// device); an InfiniBand port's table is read with
    /// QUERY_HCA_VPORT_PKEY ([`Hca::query_pkey`]).
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        self.check_port(port)?;
        let (one, len) = match self.hca.caps().link_layer() {
            LinkLayer::Ethernet => (true, 1),
            LinkLayer::InfiniBand => (false, self.hca.pkey_table_len()?),
        };
        if index >= len {
            return Err(Error::InvalidAttribute {
                attr: "pkey_index",
                value: u64::from(index),
                reason: if one {
                    "an Ethernet port has one P_Key"
                } else {
                    "beyond the port's P_Key table"
                },
            });
        }
        if one {
            Ok(DEFAULT_PKEY)
        } else {
            self.hca.query_pkey(port, index)
        }
    }

    /// Sets `roce_en` in the NIC vport context (MODIFY_NIC_VPORT_CONTEXT)
    /// unless it is already set.
    pub fn enable_roce(&self) -> Result<()> {
        if self.hca.nic_vport_context()?.get(NicVportContext::roce_en) {
            return Ok(());
        }
        let sel =
            ModifyNicVportFieldSelect::new().with(ModifyNicVportFieldSelect::roce_en, true)?;
        let ctx = NicVportContext::new().with(NicVportContext::roce_en, true)?;
        let m = ModifyNicVportContextIn::new()
            .with(ModifyNicVportContextIn::field_select, sel)?
            .with(ModifyNicVportContextIn::nic_vport_context, ctx)?;
        self.hca.exec(&m)?;
        Ok(())
    }

    /// A register window over BAR0 for a queue's doorbells.
    pub(crate) fn map_bar(&self) -> Result<P::Mmio> {
        self.hca
            .platform()
            .map_bar(0)
            .map_err(|source| Error::Platform {
                what: "mapping BAR0 for a queue's doorbells",
                source,
            })
    }

    /// Byte offset of the context's UAR page in BAR0.
    pub(crate) fn uar_offset(&self) -> usize {
        self.uar.offset()
    }

    /// A free user index (the QPC `user_index` CQEs carry).
    pub(crate) fn alloc_user_index(&self) -> Result<u32> {
        let mut b = self.uidx.lock();
        let cap = self.caps.qps;
        let i = bits::first_clear(&*b, 0, cap).ok_or(Error::CapacityExceeded {
            what: "the context's QP user indices",
            capacity: cap,
        })?;
        bits::put(&mut *b, i, true);
        Ok(i as u32)
    }

    pub(crate) fn free_user_index(&self, i: u32) {
        let i = i as usize;
        if i < MAX_CONTEXT_QPS {
            bits::put(&mut *self.uidx.lock(), i, false);
        }
    }

    /// The pins flow rules hold on raw packet QP receive sides.
    pub(crate) fn receiver_pins(&self) -> &ReceiverPins<P, S> {
        &self.pins
    }

    /// A flow rule naming the TIR `tirn` of a raw packet QP of this
    /// context is gone: when it was the last and the QP is destroyed,
    /// its receive side (TIR, RQ, transport domain) is destroyed now.
    pub(crate) fn unpin_receiver(&self, tirn: crate::types::Tirn) -> Result<()> {
        match self.pins.unpin(tirn) {
            Some(r) => r.destroy(),
            None => Ok(()),
        }
    }

    /// The raw packet QP receive sides flow rules pin
    /// ([`FlowGroup::add_qp_rule`](crate::flow::FlowGroup::add_qp_rule)):
    /// how many, and how many of them belong to QPs already destroyed
    /// (their TIR, RQ and transport domain wait for the last rule).
    pub fn pinned_receivers(&self) -> (usize, usize) {
        self.pins.counts()
    }

    /// The 8-bit key of the next memory key (`mkc.mkey_7_0`).
    pub(crate) fn next_mkey_variant(&self) -> u8 {
        self.mkey_variant.fetch_add(1, Ordering::Relaxed)
    }

    /// A RoCE v2 UDP source port for an address handle without a flow
    /// label (rdma-core picks a random one in 0xc000..=0xffff).
    pub(crate) fn next_sport(&self) -> u16 {
        0xc000 | (self.sport.fetch_add(1, Ordering::Relaxed) & 0x3fff)
    }
}
