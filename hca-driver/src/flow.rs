//! NIC RX flow steering and RSS as RAII objects: transport interface
//! receive objects (TIR, direct on one RQ or indirect over an RQ table
//! with the Toeplitz hash), RQ tables (RQT), and NIC RX flow tables with
//! their flow groups and flow table entries (rules) built from
//! [`FlowMatch`] selectors.
//!
//! Destroy order is enforced by borrows, the way the firmware needs it
//! (an object cannot be destroyed while another refers to it): a
//! [`FlowRule`] borrows its [`FlowGroup`] (which borrows its
//! [`FlowTable`]) and its destination ([`Tir`] or [`FlowTable`]); a flow
//! table borrows the table its misses go to; an indirect [`Tir`] borrows
//! its [`Rqt`]; a [`Tir`] borrows its transport domain. A rule to raw
//! packet QPs ([`FlowGroup::add_qp_rule`], a [`QpFlowRule`]) does not
//! borrow the QPs (they stay postable): it pins their receive sides, which
//! outlive a QP destroyed first until the last rule naming them goes.
//! Dropping a handle
//! runs its destroy command (DELETE_FLOW_TABLE_ENTRY, DESTROY_FLOW_GROUP,
//! DESTROY_FLOW_TABLE, DESTROY_TIR, DESTROY_RQT) and logs a failure;
//! `destroy` does the same and returns the result.
//!
//! Priorities are the PRM's: within a table the entry with the lowest
//! `flow_index` that matches wins; a frame that matches no entry of a
//! table goes to the table's miss table (which must have a higher
//! `level`), or, with the default miss action, is dropped. A catch-all is
//! a group and a rule with an empty [`FlowMatch`] (`match_criteria_enable`
//! 0).
//!
//! The RQs themselves (CREATE_RQ) are named by number ([`Rqn`]): the
//! caller keeps them alive while a TIR or RQT names them (the firmware
//! refuses to destroy an RQ that is still in use).

use core::marker::PhantomData;

use firmware_cmds::caps::FlowTablePropLayout;
use firmware_cmds::eth::{
    CreateRqtIn, CreateRqtOut, CreateTirIn, CreateTirOut, DestroyRqtIn, DestroyTirIn,
    RX_HASH_FIELD_SELECT_DST_IP, RX_HASH_FIELD_SELECT_L4_DPORT, RX_HASH_FIELD_SELECT_L4_SPORT,
    RX_HASH_FIELD_SELECT_SRC_IP, RX_HASH_FN_NONE, RX_HASH_FN_TOEPLITZ, Rqtc, RxHashFieldSelect,
    TIRC_DISP_TYPE_DIRECT, TIRC_DISP_TYPE_INDIRECT, Tirc,
};
use firmware_cmds::flow::{
    CreateFlowGroupIn, CreateFlowGroupOut, CreateFlowTableIn, CreateFlowTableOut, DeleteFteIn,
    DestFormatStruct, DestroyFlowGroupIn, DestroyFlowTableIn, FLOW_CONTEXT_ACTION_DROP,
    FLOW_CONTEXT_ACTION_FWD_DEST, FLOW_DESTINATION_TYPE_FLOW_TABLE, FLOW_DESTINATION_TYPE_TIR,
    FLOW_TABLE_MISS_ACTION_DEF, FLOW_TABLE_MISS_ACTION_FWD, FLOW_TABLE_TYPE_NIC_RX, FlowContext,
    FlowTableContext, FteMatchParam, SetFlowTableRootIn, SetFteIn,
};
use platform::Platform;

use crate::error::{Error, Result};
use crate::fw::TransportDomain;
use crate::hca::Hca;
use crate::steering::FlowMatch;
use crate::types::{FlowGroupId, FlowTableId, Rqn, Rqtn, Tirn};
use crate::verbs::{Context, DefaultShare, Qp, Share};

/// The largest flow table this API creates: `log_size` at most this (the
/// driver tracks which entries are in use in a fixed bitmap, without a
/// heap).
pub const MAX_LOG_FLOW_TABLE_SIZE: u8 = 12;

const BITMAP_WORDS: usize = (1 << MAX_LOG_FLOW_TABLE_SIZE) / 64;

fn invalid(arg: &'static str, reason: &'static str) -> Error {
    Error::InvalidArgument { arg, reason }
}

fn log_destroy_failure(what: &str, e: &Error) {
    log::error!("destroying {what}: {e}");
}

// ---- RSS: ibv_rx_hash_conf ------------------------------------------------------

/// `IBV_RX_HASH_SRC_IPV4`.
pub const RX_HASH_SRC_IPV4: u64 = 1 << 0;
/// `IBV_RX_HASH_DST_IPV4`.
pub const RX_HASH_DST_IPV4: u64 = 1 << 1;
/// `IBV_RX_HASH_SRC_IPV6`.
pub const RX_HASH_SRC_IPV6: u64 = 1 << 2;
/// `IBV_RX_HASH_DST_IPV6`.
pub const RX_HASH_DST_IPV6: u64 = 1 << 3;
/// `IBV_RX_HASH_SRC_PORT_TCP`.
pub const RX_HASH_SRC_PORT_TCP: u64 = 1 << 4;
/// `IBV_RX_HASH_DST_PORT_TCP`.
pub const RX_HASH_DST_PORT_TCP: u64 = 1 << 5;
/// `IBV_RX_HASH_SRC_PORT_UDP`.
pub const RX_HASH_SRC_PORT_UDP: u64 = 1 << 6;
/// `IBV_RX_HASH_DST_PORT_UDP`.
pub const RX_HASH_DST_PORT_UDP: u64 = 1 << 7;
/// `IBV_RX_HASH_IPSEC_SPI` (not supported here).
pub const RX_HASH_IPSEC_SPI: u64 = 1 << 8;
/// `IBV_RX_HASH_INNER` (not supported here).
pub const RX_HASH_INNER: u64 = 1 << 31;

/// The length of the Toeplitz key (`tirc.rx_hash_toeplitz_key`).
pub const RX_HASH_KEY_LEN: usize = 40;

/// The RSS configuration of an indirect TIR, as `ibv_rx_hash_conf` gives
/// it: the Toeplitz key and the `IBV_RX_HASH_*` fields to hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxHashConf {
    /// `rx_hash_key`: the Toeplitz key.
    pub key: [u8; RX_HASH_KEY_LEN],
    /// `rx_hash_fields_mask`: `RX_HASH_*` bits.
    pub fields_mask: u64,
}

/// What an [`RxHashConf`] becomes in the TIR context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashSelect {
    /// `rx_hash_fn`: Toeplitz, or none when no field is hashed.
    pub hash_fn: u8,
    /// `l3_prot_type`: IPv6 (true) or IPv4.
    pub ipv6: bool,
    /// `l4_prot_type`: UDP (true) or TCP.
    pub udp: bool,
    /// `selected_fields` (`RX_HASH_FIELD_SELECT_*`).
    pub selected_fields: u32,
}

impl RxHashConf {
    /// The TIR's hash settings, chosen the way Linux mlx5_ib does for an
    /// RSS raw packet QP (`create_rss_raw_qp_tir`, read for facts): IPv4
    /// and IPv6 fields together, or TCP and UDP ports together, are
    /// refused (one TIR hashes one L3 and one L4 protocol); no field at
    /// all means no hash, allowed only over a one-entry RQ table.
    pub fn select(&self) -> Result<HashSelect> {
        let m = self.fields_mask;
        const V4: u64 = RX_HASH_SRC_IPV4 | RX_HASH_DST_IPV4;
        const V6: u64 = RX_HASH_SRC_IPV6 | RX_HASH_DST_IPV6;
        const TCP: u64 = RX_HASH_SRC_PORT_TCP | RX_HASH_DST_PORT_TCP;
        const UDP: u64 = RX_HASH_SRC_PORT_UDP | RX_HASH_DST_PORT_UDP;
        if m & (RX_HASH_INNER | RX_HASH_IPSEC_SPI) != 0 {
            return Err(invalid(
                "rx_hash_fields_mask",
                "inner-header and IPsec SPI hashing are not supported",
            ));
        }
        if m & !(V4 | V6 | TCP | UDP) != 0 {
            return Err(invalid("rx_hash_fields_mask", "unknown IBV_RX_HASH_* bits"));
        }
        if m & V4 != 0 && m & V6 != 0 {
            return Err(invalid(
                "rx_hash_fields_mask",
                "IPv4 and IPv6 fields cannot be hashed by one TIR",
            ));
        }
        if m & TCP != 0 && m & UDP != 0 {
            return Err(invalid(
                "rx_hash_fields_mask",
                "TCP and UDP ports cannot be hashed by one TIR",
            ));
        }
        let mut f = 0;
        if m & (RX_HASH_SRC_IPV4 | RX_HASH_SRC_IPV6) != 0 {
            f |= RX_HASH_FIELD_SELECT_SRC_IP;
        }
        if m & (RX_HASH_DST_IPV4 | RX_HASH_DST_IPV6) != 0 {
            f |= RX_HASH_FIELD_SELECT_DST_IP;
        }
        if m & (RX_HASH_SRC_PORT_TCP | RX_HASH_SRC_PORT_UDP) != 0 {
            f |= RX_HASH_FIELD_SELECT_L4_SPORT;
        }
        if m & (RX_HASH_DST_PORT_TCP | RX_HASH_DST_PORT_UDP) != 0 {
            f |= RX_HASH_FIELD_SELECT_L4_DPORT;
        }
        Ok(HashSelect {
            hash_fn: if m == 0 {
                RX_HASH_FN_NONE
            } else {
                RX_HASH_FN_TOEPLITZ
            },
            ipv6: m & V6 != 0,
            udp: m & UDP != 0,
            selected_fields: f,
        })
    }
}

// ---- RQT ------------------------------------------------------------------------

/// An RQ table (CREATE_RQT / DESTROY_RQT): the RQs an indirect TIR spreads
/// frames over, indexed by the hash modulo the table size.
pub struct Rqt<'a, P: Platform> {
    hca: &'a Hca<P>,
    rqtn: Rqtn,
    size: usize,
    live: bool,
}

impl<P: Platform> Hca<P> {
    /// CREATE_RQT over `rqs` (in order: entry `i` is `rqs[i]`).
    pub fn create_rqt(&self, rqs: &[Rqn]) -> Result<Rqt<'_, P>> {
        if rqs.is_empty() {
            return Err(invalid("rqs", "an RQ table needs at least one RQ"));
        }
        let n = u16::try_from(rqs.len())
            .map_err(|_| invalid("rqs", "more than 65535 RQs in one RQ table"))?;
        let mut items = [0u32; 256];
        if rqs.len() > items.len() {
            return Err(invalid("rqs", "more than 256 RQs in one RQ table"));
        }
        for (d, r) in items.iter_mut().zip(rqs) {
            if r.0 > 0xff_ffff {
                return Err(invalid("rqs", "an RQ number is wider than 24 bits"));
            }
            *d = r.0;
        }
        let ctx = Rqtc::new()
            .with(Rqtc::rqt_max_size, n)?
            .with(Rqtc::rqt_actual_size, n)?;
        let input = CreateRqtIn::new().with(CreateRqtIn::rqt_context, ctx)?;
        let out: CreateRqtOut = self.exec_with_items(&input, &items[..rqs.len()])?;
        Ok(Rqt {
            hca: self,
            rqtn: Rqtn(out.get(CreateRqtOut::rqtn)),
            size: rqs.len(),
            live: true,
        })
    }

    /// CREATE_TIR, direct: every frame steered to it goes to `rqn`.
    pub fn create_tir_direct<'a>(
        &'a self,
        td: &'a TransportDomain<'_, P>,
        rqn: Rqn,
    ) -> Result<Tir<'a, P>> {
        let ctx = Tirc::new()
            .with(Tirc::disp_type, TIRC_DISP_TYPE_DIRECT)?
            .with(Tirc::inline_rqn, rqn.0)?
            .with(Tirc::transport_domain, td.number().0)?;
        self.create_tir(ctx)
    }

    fn create_tir<'a>(&'a self, ctx: Tirc) -> Result<Tir<'a, P>> {
        let out: CreateTirOut = self.exec(&CreateTirIn::new().with(CreateTirIn::ctx, ctx)?)?;
        Ok(Tir {
            hca: self,
            tirn: Tirn(out.get(CreateTirOut::tirn)),
            live: true,
            _refs: PhantomData,
        })
    }

    /// CREATE_FLOW_TABLE, NIC RX, at `level` with `2^log_size` entries;
    /// frames that match no entry go to `miss` (a table of a higher
    /// level) or, with `None`, are dropped (the default miss action).
    pub fn create_flow_table<'a>(
        &'a self,
        level: u8,
        log_size: u8,
        miss: Option<&'a FlowTable<'_, P>>,
    ) -> Result<FlowTable<'a, P>> {
        if log_size > MAX_LOG_FLOW_TABLE_SIZE {
            return Err(invalid(
                "log_size",
                "above MAX_LOG_FLOW_TABLE_SIZE (4096 entries)",
            ));
        }
        let mut ctx = FlowTableContext::new()
            .with(FlowTableContext::level, level)?
            .with(FlowTableContext::log_size, log_size)?
            .with(
                FlowTableContext::table_miss_action,
                FLOW_TABLE_MISS_ACTION_DEF,
            )?;
        if let Some(m) = miss {
            if m.level <= level {
                return Err(invalid(
                    "miss",
                    "the miss table must have a higher level than the table",
                ));
            }
            ctx = ctx
                .with(
                    FlowTableContext::table_miss_action,
                    FLOW_TABLE_MISS_ACTION_FWD,
                )?
                .with(FlowTableContext::table_miss_id, m.id.0)?;
        }
        let input = CreateFlowTableIn::new()
            .with(CreateFlowTableIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(CreateFlowTableIn::flow_table_context, ctx)?;
        let out: CreateFlowTableOut = self.exec(&input)?;
        Ok(FlowTable {
            hca: self,
            id: FlowTableId(out.get(CreateFlowTableOut::table_id)),
            level,
            log_size,
            used: spin::Mutex::new([0; BITMAP_WORDS]),
            live: true,
            _miss: PhantomData,
        })
    }
}

impl<'a, P: Platform> Rqt<'a, P> {
    /// The RQ table number.
    pub fn number(&self) -> Rqtn {
        self.rqtn
    }

    /// Entries in the table.
    pub fn size(&self) -> usize {
        self.size
    }

    /// CREATE_TIR, indirect over this table: frames are spread over its
    /// RQs by the Toeplitz hash `conf` configures (see
    /// [`RxHashConf::select`]).
    pub fn create_tir<'t>(
        &'t self,
        td: &'t TransportDomain<'_, P>,
        conf: &RxHashConf,
    ) -> Result<Tir<'t, P>> {
        let sel = conf.select()?;
        if sel.hash_fn == RX_HASH_FN_NONE && self.size != 1 {
            return Err(invalid(
                "rx_hash_fields_mask",
                "no hashed field: only an RQ table of one entry can be used",
            ));
        }
        let hsel = RxHashFieldSelect::new()
            .with(RxHashFieldSelect::l3_prot_type, sel.ipv6)?
            .with(RxHashFieldSelect::l4_prot_type, sel.udp)?
            .with(RxHashFieldSelect::selected_fields, sel.selected_fields)?;
        let ctx = Tirc::new()
            .with(Tirc::disp_type, TIRC_DISP_TYPE_INDIRECT)?
            .with(Tirc::indirect_table, self.rqtn.0)?
            .with(Tirc::rx_hash_fn, sel.hash_fn)?
            .with(Tirc::transport_domain, td.number().0)?
            .with(Tirc::rx_hash_toeplitz_key, conf.key)?
            .with(Tirc::rx_hash_field_selector_outer, hsel)?;
        self.hca.create_tir(ctx)
    }

    /// DESTROY_RQT now, with its result.
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        self.run_destroy()
    }

    fn run_destroy(&self) -> Result<()> {
        self.hca
            .exec(&DestroyRqtIn::new().with(DestroyRqtIn::rqtn, self.rqtn.0)?)
            .map(drop)
    }
}

impl<P: Platform> Drop for Rqt<'_, P> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.run_destroy() {
                log_destroy_failure("RQT", &e);
            }
        }
    }
}

impl<P: Platform> core::fmt::Debug for Rqt<'_, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.rqtn)
    }
}

// ---- TIR ------------------------------------------------------------------------

/// A transport interface receive object (CREATE_TIR / DESTROY_TIR): where
/// a flow rule delivers frames, directly to one RQ or through an RQ table
/// by hash.
pub struct Tir<'a, P: Platform> {
    hca: &'a Hca<P>,
    tirn: Tirn,
    live: bool,
    _refs: PhantomData<&'a ()>,
}

impl<P: Platform> Tir<'_, P> {
    /// The TIR number.
    pub fn number(&self) -> Tirn {
        self.tirn
    }

    /// DESTROY_TIR now, with its result.
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        self.run_destroy()
    }

    fn run_destroy(&self) -> Result<()> {
        self.hca
            .exec(&DestroyTirIn::new().with(DestroyTirIn::tirn, self.tirn.0)?)
            .map(drop)
    }
}

impl<P: Platform> Drop for Tir<'_, P> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.run_destroy() {
                log_destroy_failure("TIR", &e);
            }
        }
    }
}

impl<P: Platform> core::fmt::Debug for Tir<'_, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.tirn)
    }
}

// ---- flow tables ----------------------------------------------------------------

/// A NIC RX flow table (CREATE_FLOW_TABLE / DESTROY_FLOW_TABLE).
pub struct FlowTable<'a, P: Platform> {
    hca: &'a Hca<P>,
    id: FlowTableId,
    level: u8,
    log_size: u8,
    /// Entries in use by a live [`FlowRule`].
    used: spin::Mutex<[u64; BITMAP_WORDS]>,
    live: bool,
    _miss: PhantomData<&'a ()>,
}

impl<'a, P: Platform> FlowTable<'a, P> {
    /// The table id.
    pub fn id(&self) -> FlowTableId {
        self.id
    }

    /// The table's level.
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Entries in the table (`2^log_size`).
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// SET_FLOW_TABLE_ROOT: the NIC RX lookup starts at this table.
    pub fn set_root(&self) -> Result<()> {
        let input = SetFlowTableRootIn::new()
            .with(SetFlowTableRootIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(SetFlowTableRootIn::table_id, self.id.0)?;
        self.hca.exec(&input).map(drop)
    }

    /// CREATE_FLOW_GROUP over entries `start..=end`, matching the fields
    /// `criteria` constrains (`criteria.criteria`; its values are not
    /// used). An empty [`FlowMatch`] makes a catch-all group.
    pub fn create_group(
        &self,
        start: u32,
        end: u32,
        criteria: &FlowMatch,
    ) -> Result<FlowGroup<'_, P>> {
        if start > end || end >= self.size() {
            return Err(invalid(
                "start..=end",
                "the group's entries are not inside the table",
            ));
        }
        let mp =
            FteMatchParam::new().with(FteMatchParam::outer_headers, criteria.criteria.clone())?;
        let input = CreateFlowGroupIn::new()
            .with(CreateFlowGroupIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(CreateFlowGroupIn::table_id, self.id.0)?
            .with(CreateFlowGroupIn::start_flow_index, start)?
            .with(CreateFlowGroupIn::end_flow_index, end)?
            .with(
                CreateFlowGroupIn::match_criteria_enable,
                criteria.criteria_enable(),
            )?
            .with(CreateFlowGroupIn::match_criteria, mp)?;
        let out: CreateFlowGroupOut = self.hca.exec(&input)?;
        Ok(FlowGroup {
            table: self,
            id: FlowGroupId(out.get(CreateFlowGroupOut::group_id)),
            start,
            end,
            criteria: criteria.criteria.clone(),
            live: true,
        })
    }

    /// DESTROY_FLOW_TABLE now, with its result.
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        self.run_destroy()
    }

    fn run_destroy(&self) -> Result<()> {
        let input = DestroyFlowTableIn::new()
            .with(DestroyFlowTableIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(DestroyFlowTableIn::table_id, self.id.0)?;
        self.hca.exec(&input).map(drop)
    }

    /// Claims entry `index`; false if a live rule has it.
    fn claim(&self, index: u32) -> bool {
        let (w, b) = ((index / 64) as usize, index % 64);
        let mut u = self.used.lock();
        let taken = u[w] & (1 << b) != 0;
        u[w] |= 1 << b;
        !taken
    }

    fn release(&self, index: u32) {
        let (w, b) = ((index / 64) as usize, index % 64);
        self.used.lock()[w] &= !(1 << b);
    }
}

impl<P: Platform> Drop for FlowTable<'_, P> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.run_destroy() {
                log_destroy_failure("flow table", &e);
            }
        }
    }
}

impl<P: Platform> core::fmt::Debug for FlowTable<'_, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (level {})", self.id, self.level)
    }
}

/// A flow group (CREATE_FLOW_GROUP / DESTROY_FLOW_GROUP): a range of
/// entries of a table that match on the same fields.
pub struct FlowGroup<'a, P: Platform> {
    table: &'a FlowTable<'a, P>,
    id: FlowGroupId,
    start: u32,
    end: u32,
    criteria: firmware_cmds::flow::FteMatchSetLyr24,
    live: bool,
}

/// Something a flow rule can deliver frames to through a TIR, by number:
/// a [`Tir`], or a caller's type naming a TIR it keeps alive. (Rules to
/// raw packet QPs are made by [`FlowGroup::add_qp_rule`], which keeps
/// the QPs' receive sides alive as long as the rule.)
pub trait TirDest {
    /// The TIR number; `None` when there is none.
    fn tir_number(&self) -> Option<Tirn>;
}

/// A TIR named by its number.
struct TirNumber(Tirn);

impl TirDest for TirNumber {
    fn tir_number(&self) -> Option<Tirn> {
        Some(self.0)
    }
}

impl<P: Platform> TirDest for Tir<'_, P> {
    fn tir_number(&self) -> Option<Tirn> {
        Some(self.tirn)
    }
}

/// Where a [`FlowRule`] sends the frames it matches (the rule borrows the
/// destinations `'d`, not the list `'s`).
pub enum FlowDest<'s, 'd, P: Platform> {
    /// To TIRs (`FLOW_DESTINATION_TYPE_TIR`); a frame is delivered to
    /// each (at most 8 here).
    Tirs(&'s [&'d Tir<'d, P>]),
    /// To TIRs named by [`TirDest`]s (`FLOW_DESTINATION_TYPE_TIR`), at
    /// most 8. The rule does not borrow them: the caller keeps each TIR
    /// until the rule is deleted (the firmware refuses to destroy a TIR
    /// a flow table entry names). For raw packet QPs use
    /// [`FlowGroup::add_qp_rule`], which keeps that order itself.
    Receivers(&'s [&'s dyn TirDest]),
    /// To another flow table of a higher level
    /// (`FLOW_DESTINATION_TYPE_FLOW_TABLE`).
    Table(&'d FlowTable<'d, P>),
    /// Dropped (`FLOW_CONTEXT_ACTION_DROP`).
    Drop,
}

/// The most destinations of one rule.
pub const MAX_FLOW_DESTS: usize = 8;

/// The largest flow tag (`flow_context.flow_tag` is 24 bits).
pub const MAX_FLOW_TAG: u32 = 0x00ff_ffff;

impl<'a, P: Platform> FlowGroup<'a, P> {
    /// The group id.
    pub fn id(&self) -> FlowGroupId {
        self.id
    }

    /// SET_FLOW_TABLE_ENTRY at `index` (inside the group; the lower the
    /// index the higher the priority): frames whose outer headers match
    /// `m` go to `dest`. `m` may only constrain fields the group's
    /// criteria name. Each index holds one live rule.
    pub fn add_rule<'r>(
        &'r self,
        index: u32,
        m: &FlowMatch,
        dest: FlowDest<'_, 'r, P>,
    ) -> Result<FlowRule<'r, P>> {
        self.set_entry(index, m, dest, 0)
    }

    /// [`add_rule`](Self::add_rule) with a flow tag: the entry's
    /// `flow_context.flow_tag`, which the device writes into the receive
    /// CQE of every frame the rule forwards (`sop_drop_qpn` bits 23:0,
    /// [`verbs_core::RxCqe::flow_tag`], `ibv_wc_read_flow_tag`). The tag
    /// is 24 bits and not 0 (0 is what an untagged rule reports), the rule
    /// must forward (a drop has no completion to tag), and the device must
    /// offer flow tags on NIC receive tables
    /// (`flow_table_properties_nic_receive.flow_tag`).
    pub fn add_tagged_rule<'r>(
        &'r self,
        index: u32,
        m: &FlowMatch,
        dest: FlowDest<'_, 'r, P>,
        flow_tag: u32,
    ) -> Result<FlowRule<'r, P>> {
        if flow_tag == 0 || flow_tag > MAX_FLOW_TAG {
            return Err(invalid("flow_tag", "from 1 to 0xffffff (24 bits)"));
        }
        if matches!(dest, FlowDest::Drop) {
            return Err(invalid(
                "flow_tag",
                "a dropping rule has no completion to tag",
            ));
        }
        let offered = self
            .table
            .hca
            .caps()
            .nic_receive_flow
            .as_ref()
            .is_some_and(|p| p.cur.get(FlowTablePropLayout::flow_tag));
        if !offered {
            return Err(Error::Unsupported(
                "flow tags on NIC receive flow tables (flow_table_properties_nic_receive.flow_tag)",
            ));
        }
        self.set_entry(index, m, dest, flow_tag)
    }

    fn set_entry<'r>(
        &'r self,
        index: u32,
        m: &FlowMatch,
        dest: FlowDest<'_, 'r, P>,
        flow_tag: u32,
    ) -> Result<FlowRule<'r, P>> {
        if index < self.start || index > self.end {
            return Err(invalid("index", "outside the flow group's entries"));
        }
        let (c, g) = (m.criteria.as_bytes(), self.criteria.as_bytes());
        if c.iter().zip(g.iter()).any(|(&c, &g)| c & !g != 0) {
            return Err(invalid(
                "match",
                "the rule constrains fields the flow group does not match on",
            ));
        }
        let mut dests = [[0u8; 8]; MAX_FLOW_DESTS];
        let (action, n) = match &dest {
            FlowDest::Drop => (FLOW_CONTEXT_ACTION_DROP, 0),
            FlowDest::Table(t) => {
                if t.level <= self.table.level {
                    return Err(invalid(
                        "dest",
                        "a rule forwards only to a table of a higher level",
                    ));
                }
                dests[0] = *DestFormatStruct::new()
                    .with(
                        DestFormatStruct::destination_type,
                        FLOW_DESTINATION_TYPE_FLOW_TABLE,
                    )?
                    .with(DestFormatStruct::destination_id, t.id.0)?
                    .as_bytes();
                (FLOW_CONTEXT_ACTION_FWD_DEST, 1)
            }
            FlowDest::Tirs(tirs) => {
                if tirs.is_empty() || tirs.len() > MAX_FLOW_DESTS {
                    return Err(invalid("dest", "from 1 to 8 TIRs"));
                }
                for (d, t) in dests.iter_mut().zip(tirs.iter()) {
                    *d = *DestFormatStruct::new()
                        .with(
                            DestFormatStruct::destination_type,
                            FLOW_DESTINATION_TYPE_TIR,
                        )?
                        .with(DestFormatStruct::destination_id, t.tirn.0)?
                        .as_bytes();
                }
                (FLOW_CONTEXT_ACTION_FWD_DEST, tirs.len())
            }
            FlowDest::Receivers(list) => {
                if list.is_empty() || list.len() > MAX_FLOW_DESTS {
                    return Err(invalid("dest", "from 1 to 8 receivers"));
                }
                for (d, t) in dests.iter_mut().zip(list.iter()) {
                    let tirn = t.tir_number().ok_or(invalid(
                        "dest",
                        "a receiver without a TIR (a QP that is not raw or has no receive queue)",
                    ))?;
                    *d = *DestFormatStruct::new()
                        .with(
                            DestFormatStruct::destination_type,
                            FLOW_DESTINATION_TYPE_TIR,
                        )?
                        .with(DestFormatStruct::destination_id, tirn.0)?
                        .as_bytes();
                }
                (FLOW_CONTEXT_ACTION_FWD_DEST, list.len())
            }
        };
        let value = FteMatchParam::new().with(FteMatchParam::outer_headers, m.value.clone())?;
        let ctx = FlowContext::new()
            .with(FlowContext::group_id, self.id.0)?
            .with(FlowContext::flow_tag, flow_tag)?
            .with(FlowContext::action, action)?
            .with(FlowContext::destination_list_size, n as u32)?
            .with(FlowContext::match_value, value)?;
        let input = SetFteIn::new()
            .with(SetFteIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(SetFteIn::table_id, self.table.id.0)?
            .with(SetFteIn::flow_index, index)?
            .with(SetFteIn::flow_context, ctx)?;
        if !self.table.claim(index) {
            return Err(invalid("index", "a live rule already holds this entry"));
        }
        if let Err(e) = self.table.hca.exec_with_items(&input, &dests[..n]) {
            self.table.release(index);
            return Err(e);
        }
        Ok(FlowRule {
            table: self.table,
            index,
            live: true,
            _refs: PhantomData,
        })
    }

    /// SET_FLOW_TABLE_ENTRY at `index` forwarding the frames `m` matches
    /// to raw packet QPs (`ibv_create_flow` on a raw QP): each receives a
    /// copy through its direct TIR (at most 8 QPs, each with a receive
    /// queue, on this HCA), and to the TIRs `others` names (e.g. an
    /// indirect RSS [`Tir`]; by number, kept by the caller until the rule
    /// is deleted), at most 8 destinations in all.
    ///
    /// The rule does not borrow the QPs, which stay postable; it pins
    /// their receive sides instead, in their contexts. A QP may be
    /// destroyed before the rule ([`Qp::destroy`](crate::verbs::Qp::destroy)
    /// then succeeds): its send side goes at once, its RQ is stopped (no
    /// frame reaches its buffers or CQ), and its TIR, RQ and transport
    /// domain, with its queue memory and handles of its receive CQ and
    /// PD, stay until the last rule naming them is deleted, which then
    /// destroys them in mlx5_ib's order.
    pub fn add_qp_rule<'r, S: Share>(
        &'r self,
        index: u32,
        m: &FlowMatch,
        qps: &[&Qp<P, S>],
        others: &[&dyn TirDest],
    ) -> Result<QpFlowRule<'r, P, S>>
    where
        P: 'static,
    {
        self.qp_rule(index, m, qps, others, None)
    }

    /// [`add_qp_rule`](Self::add_qp_rule) whose completions carry
    /// `flow_tag` (as [`add_tagged_rule`](Self::add_tagged_rule), with its
    /// checks).
    pub fn add_tagged_qp_rule<'r, S: Share>(
        &'r self,
        index: u32,
        m: &FlowMatch,
        qps: &[&Qp<P, S>],
        others: &[&dyn TirDest],
        flow_tag: u32,
    ) -> Result<QpFlowRule<'r, P, S>>
    where
        P: 'static,
    {
        self.qp_rule(index, m, qps, others, Some(flow_tag))
    }

    fn qp_rule<'r, S: Share>(
        &'r self,
        index: u32,
        m: &FlowMatch,
        qps: &[&Qp<P, S>],
        others: &[&dyn TirDest],
        flow_tag: Option<u32>,
    ) -> Result<QpFlowRule<'r, P, S>>
    where
        P: 'static,
    {
        if qps.is_empty() || qps.len() + others.len() > MAX_FLOW_DESTS {
            return Err(invalid(
                "qps",
                "from 1 to 8 raw packet QPs (with the other destinations: at most 8)",
            ));
        }
        let mut nums: heapless::Vec<TirNumber, MAX_FLOW_DESTS> = heapless::Vec::new();
        for q in qps {
            let t = q.tir().ok_or(invalid(
                "qps",
                "a QP without a TIR (not a raw packet QP, or no receive queue)",
            ))?;
            let ctx: &Context<P, S> = q.pd().context();
            let hca: &Hca<P> = ctx.hca();
            if !core::ptr::eq(hca, self.table.hca) {
                return Err(invalid("qps", "a QP of another HCA than the flow table's"));
            }
            // At most MAX_FLOW_DESTS (checked above).
            let _ = nums.push(TirNumber(t));
        }
        let mut pins = QpPins::<P, S> {
            pins: heapless::Vec::new(),
        };
        for q in qps {
            let ctx: S::Ref<Context<P, S>> = q.pd().context().clone();
            if let Some(t) = q.tir() {
                ctx.receiver_pins().pin(t)?;
                // At most MAX_FLOW_DESTS (checked above).
                let _ = pins.pins.push((ctx, t));
            }
        }
        let list: heapless::Vec<&dyn TirDest, MAX_FLOW_DESTS> = nums
            .iter()
            .map(|n| n as &dyn TirDest)
            .chain(others.iter().copied())
            .collect();
        // On failure `pins` drops here and unpins.
        let dest = FlowDest::Receivers(&list);
        let rule = match flow_tag {
            None => self.add_rule(index, m, dest)?,
            Some(tag) => self.add_tagged_rule(index, m, dest, tag)?,
        };
        Ok(QpFlowRule {
            rule: Some(rule),
            pins,
        })
    }

    /// DESTROY_FLOW_GROUP now, with its result.
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        self.run_destroy()
    }

    fn run_destroy(&self) -> Result<()> {
        let input = DestroyFlowGroupIn::new()
            .with(DestroyFlowGroupIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(DestroyFlowGroupIn::table_id, self.table.id.0)?
            .with(DestroyFlowGroupIn::group_id, self.id.0)?;
        self.table.hca.exec(&input).map(drop)
    }
}

impl<P: Platform> Drop for FlowGroup<'_, P> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.run_destroy() {
                log_destroy_failure("flow group", &e);
            }
        }
    }
}

impl<P: Platform> core::fmt::Debug for FlowGroup<'_, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} [{}..={}]", self.id, self.start, self.end)
    }
}

/// A flow table entry (SET_FLOW_TABLE_ENTRY / DELETE_FLOW_TABLE_ENTRY),
/// removed when dropped.
pub struct FlowRule<'a, P: Platform> {
    table: &'a FlowTable<'a, P>,
    index: u32,
    live: bool,
    _refs: PhantomData<&'a ()>,
}

impl<P: Platform> FlowRule<'_, P> {
    /// The entry's index in its table.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// DELETE_FLOW_TABLE_ENTRY now, with its result.
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        self.run_destroy()
    }

    fn run_destroy(&self) -> Result<()> {
        let input = DeleteFteIn::new()
            .with(DeleteFteIn::table_type, FLOW_TABLE_TYPE_NIC_RX)?
            .with(DeleteFteIn::table_id, self.table.id.0)?
            .with(DeleteFteIn::flow_index, self.index)?;
        let r = self.table.hca.exec(&input).map(drop);
        if r.is_ok() {
            self.table.release(self.index);
        }
        r
    }
}

impl<P: Platform> Drop for FlowRule<'_, P> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.run_destroy() {
                log_destroy_failure("flow table entry", &e);
            }
        }
    }
}

impl<P: Platform> core::fmt::Debug for FlowRule<'_, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} entry {}", self.table.id, self.index)
    }
}

/// A pinned receive side: the context that keeps it and its TIR.
type Pinned<P, S> = (<S as Share>::Ref<Context<P, S>>, Tirn);

/// The receive sides a [`QpFlowRule`] pins; unpinned when dropped (the
/// last unpin of a destroyed QP destroys its receive side).
struct QpPins<P: Platform + 'static, S: Share> {
    pins: heapless::Vec<Pinned<P, S>, MAX_FLOW_DESTS>,
}

impl<P: Platform + 'static, S: Share> QpPins<P, S> {
    fn release(&mut self) -> Result<()> {
        let mut r = Ok(());
        while let Some((ctx, t)) = self.pins.pop() {
            if let Err(e) = ctx.unpin_receiver(t) {
                if r.is_ok() {
                    r = Err(e);
                }
            }
        }
        r
    }
}

impl<P: Platform + 'static, S: Share> Drop for QpPins<P, S> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log_destroy_failure("a raw packet QP's receive side", &e);
        }
    }
}

/// A flow table entry forwarding to raw packet QPs
/// ([`FlowGroup::add_qp_rule`]), removed when dropped: DELETE_FLOW_TABLE_ENTRY,
/// then the receive sides of the QPs it named are released (those of
/// QPs already destroyed are destroyed when no other rule names them).
pub struct QpFlowRule<'a, P: Platform + 'static, S: Share = DefaultShare> {
    /// Deleted before `pins` are released (field order).
    rule: Option<FlowRule<'a, P>>,
    pins: QpPins<P, S>,
}

impl<P: Platform + 'static, S: Share> QpFlowRule<'_, P, S> {
    /// The entry's index in its table.
    pub fn index(&self) -> u32 {
        self.rule.as_ref().map_or(0, |r| r.index)
    }

    /// DELETE_FLOW_TABLE_ENTRY now, then the release of the receive sides
    /// it pins (destroying those of QPs already destroyed that no other
    /// rule names); the first failure. When the entry cannot be deleted
    /// the receive sides stay pinned (the entry may still name them).
    pub fn destroy(mut self) -> Result<()> {
        let deleted = match self.rule.take() {
            Some(r) => r.destroy(),
            None => Ok(()),
        };
        if deleted.is_err() {
            core::mem::forget(core::mem::take(&mut self.pins.pins));
            return deleted;
        }
        self.pins.release()
    }
}

impl<P: Platform + 'static, S: Share> Drop for QpFlowRule<'_, P, S> {
    fn drop(&mut self) {
        if let Some(r) = self.rule.take() {
            if let Err(e) = r.destroy() {
                log_destroy_failure("flow table entry", &e);
                // The entry may still name the TIRs: they stay.
                core::mem::forget(core::mem::take(&mut self.pins.pins));
            }
        }
    }
}

impl<P: Platform + 'static, S: Share> core::fmt::Debug for QpFlowRule<'_, P, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.rule {
            Some(r) => write!(f, "{r:?} (to raw packet QPs)"),
            None => write!(f, "deleted flow table entry"),
        }
    }
}
