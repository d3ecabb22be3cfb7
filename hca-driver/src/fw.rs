//! Raw firmware objects as RAII handles: UAR, protection domain, transport
//! domain, and the CQ, QP, SRQ and memory key the verbs layer creates
//! through typed commands. (The verbs objects of [`crate::verbs`] are
//! built on these; this module is for driving the firmware directly.)
//!
//! An [`Object`] holds a handle of the [`Hca`] ([`HcaRef`]: a reference,
//! as the `Hca::alloc_*`/`create_*` functions give, or an owned handle
//! such as an `Arc<Hca>`), so the HCA cannot be closed while it exists,
//! and the typed object number. [`Object::destroy`] runs the
//! destroy command and returns its result; dropping a handle does the same
//! and logs a failure. The memory a CQ, QP or SRQ lives in belongs to the
//! caller and must outlive the handle (destroy first, then free).

use core::fmt;
use core::ops::Deref;

use firmware_cmds::Opcode;
use firmware_cmds::cq::{CreateCqIn, CreateCqOut, DestroyCqIn};
use firmware_cmds::eth::{
    CreateRqIn, CreateRqOut, CreateSqIn, CreateSqOut, CreateTirIn, CreateTirOut, CreateTisIn,
    CreateTisOut, DestroyRqIn, DestroySqIn, DestroyTirIn, DestroyTisIn,
    MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX, ModifyRqIn, ModifySqIn, Rqc, Sqc, Tirc, Tisc,
    WQ_STATE_ERR, WQ_STATE_RDY, WQ_STATE_RST,
};
use firmware_cmds::mkey::{CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn};
use firmware_cmds::pd::{
    AllocPdIn, AllocPdOut, AllocTransportDomainIn, AllocTransportDomainOut, DeallocPdIn,
    DeallocTransportDomainIn,
};
use firmware_cmds::q_counter::{
    AllocQCounterIn, AllocQCounterOut, DeallocQCounterIn, QueryQCounterIn, QueryQCounterOut,
};
use firmware_cmds::qp::{CreateQpIn, CreateQpOut, DestroyQpIn};
use firmware_cmds::rmp::{CreateRmpIn, CreateRmpOut, DestroyRmpIn};
use firmware_cmds::srq::{CreateSrqIn, CreateSrqOut, DestroySrqIn};
use firmware_cmds::uar::{AllocUarIn, AllocUarOut, DeallocUarIn};
use platform::{Mmio, Platform};

use crate::error::{Error, Result};
use crate::events::QueueId;
use crate::hca::Hca;
use crate::pas::PageList;
use crate::types::{CounterSetId, Cqn, MkeyIndex, Pdn, Qpn, Rqn, Sqn, Srqn, Tdn, Tirn, Tisn, Uarn};

/// A kind of firmware object: its number type and how it is destroyed.
pub trait FwObject {
    /// The typed object number.
    type Number: Copy + fmt::Debug + fmt::Display;
    /// The PRM name of the object (`PD`, `CQ`...).
    const NAME: &'static str;
    /// Runs the destroy command and forgets the object's registrations.
    fn destroy<P: Platform>(hca: &Hca<P>, n: Self::Number) -> Result<()>;
}

/// A handle of an [`Hca`]: `&Hca<P>`, `Arc<Hca<P>>`, `&'static Hca<P>`...
pub trait HcaRef: Deref<Target = Hca<Self::Platform>> {
    /// The platform of the HCA.
    type Platform: Platform;
}

impl<P: Platform, T: Deref<Target = Hca<P>>> HcaRef for T {
    type Platform = P;
}

/// A live firmware object of kind `K` on the HCA behind `H`.
pub struct Object<H: HcaRef, K: FwObject> {
    hca: H,
    number: K::Number,
    live: bool,
}

impl<H: HcaRef, K: FwObject> Object<H, K> {
    pub(crate) fn new(hca: H, number: K::Number) -> Self {
        Self {
            hca,
            number,
            live: true,
        }
    }

    /// The same object, held through another handle of the same HCA.
    pub(crate) fn rehome<H2: HcaRef<Platform = H::Platform>>(mut self, hca: H2) -> Object<H2, K> {
        debug_assert!(core::ptr::eq(&*hca, &*self.hca));
        self.live = false;
        Object::new(hca, self.number)
    }

    /// The object number.
    pub fn number(&self) -> K::Number {
        self.number
    }

    /// The HCA it belongs to.
    pub fn hca(&self) -> &H {
        &self.hca
    }

    /// Destroys the object now and reports the result.
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        K::destroy(&*self.hca, self.number)
    }
}

impl<H: HcaRef, K: FwObject> Drop for Object<H, K> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = K::destroy(&*self.hca, self.number) {
                log::error!("destroying {} {}: {e}", K::NAME, self.number);
            }
        }
    }
}

impl<H: HcaRef, K: FwObject> fmt::Debug for Object<H, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number)
    }
}

/// UAR objects.
#[derive(Debug)]
pub enum UarObj {}
/// Protection domains.
#[derive(Debug)]
pub enum PdObj {}
/// Transport domains.
#[derive(Debug)]
pub enum TdObj {}
/// Completion queues.
#[derive(Debug)]
pub enum CqObj {}
/// Queue pairs.
#[derive(Debug)]
pub enum QpObj {}
/// Shared receive queues.
#[derive(Debug)]
pub enum SrqObj {}
/// Memory keys.
#[derive(Debug)]
pub enum MkeyObj {}

/// Transport interface send objects.
#[derive(Debug)]
pub enum TisObj {}
/// Ethernet send queues.
#[derive(Debug)]
pub enum SqObj {}
/// Ethernet receive queues.
#[derive(Debug)]
pub enum RqObj {}
/// Transport interface receive objects.
#[derive(Debug)]
pub enum TirObj {}

/// Q counter sets.
#[derive(Debug)]
pub enum QCounterObj {}

/// A Q counter set (ALLOC_Q_COUNTER / DEALLOC_Q_COUNTER): receive queues
/// whose `counter_set_id` names it count into it; read it with
/// [`Object::query`](Object#method.query). The handle may be a reference
/// of the HCA or an owned one (`Arc<Hca>`,
/// [`Hca::alloc_q_counter_on`]).
pub type QCounter<'a, P> = Object<&'a Hca<P>, QCounterObj>;

/// The counters of a Q counter set (`query_q_counter_out`), as the device
/// reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QCounterValues {
    /// Packets dropped because their receive queue had no WQE posted
    /// (`out_of_buffer`).
    pub out_of_buffer: u32,
    /// Out-of-sequence packets (`out_of_sequence`).
    pub out_of_sequence: u32,
    /// Duplicate requests (`duplicate_request`).
    pub duplicate_request: u32,
    /// RNR NAK retries exhausted (`rnr_nak_retry_err`).
    pub rnr_nak_retry_err: u32,
    /// PSN sequence errors (`packet_seq_err`).
    pub packet_seq_err: u32,
    /// Implied NAK sequence errors (`implied_nak_seq_err`).
    pub implied_nak_seq_err: u32,
    /// Local ACK timeouts (`local_ack_timeout_err`).
    pub local_ack_timeout_err: u32,
    /// RDMA write requests received (`rx_write_requests`).
    pub rx_write_requests: u32,
    /// RDMA read requests received (`rx_read_requests`).
    pub rx_read_requests: u32,
    /// Atomic requests received (`rx_atomic_requests`).
    pub rx_atomic_requests: u32,
}

impl<H: HcaRef> Object<H, QCounterObj> {
    /// QUERY_Q_COUNTER: the set's counters; with `clear` the device zeroes
    /// them after reading.
    pub fn query(&self, clear: bool) -> Result<QCounterValues> {
        let out: QueryQCounterOut = self.hca.exec(
            &QueryQCounterIn::new()
                .with(QueryQCounterIn::clear, clear)?
                .with(QueryQCounterIn::counter_set_id, self.number.0)?,
        )?;
        Ok(QCounterValues {
            out_of_buffer: out.get(QueryQCounterOut::out_of_buffer),
            out_of_sequence: out.get(QueryQCounterOut::out_of_sequence),
            duplicate_request: out.get(QueryQCounterOut::duplicate_request),
            rnr_nak_retry_err: out.get(QueryQCounterOut::rnr_nak_retry_err),
            packet_seq_err: out.get(QueryQCounterOut::packet_seq_err),
            implied_nak_seq_err: out.get(QueryQCounterOut::implied_nak_seq_err),
            local_ack_timeout_err: out.get(QueryQCounterOut::local_ack_timeout_err),
            rx_write_requests: out.get(QueryQCounterOut::rx_write_requests),
            rx_read_requests: out.get(QueryQCounterOut::rx_read_requests),
            rx_atomic_requests: out.get(QueryQCounterOut::rx_atomic_requests),
        })
    }
}

impl FwObject for QCounterObj {
    type Number = CounterSetId;
    const NAME: &'static str = "Q counter";
    fn destroy<P: Platform>(hca: &Hca<P>, n: CounterSetId) -> Result<()> {
        hca.exec(&DeallocQCounterIn::new().with(DeallocQCounterIn::counter_set_id, n.0)?)
            .map(drop)
    }
}

/// A transport interface send object (CREATE_TIS / DESTROY_TIS).
pub type Tis<'a, P> = Object<&'a Hca<P>, TisObj>;
/// A send queue (CREATE_SQ / DESTROY_SQ), registered for events.
pub type Sq<'a, P> = Object<&'a Hca<P>, SqObj>;
/// A receive queue (CREATE_RQ / DESTROY_RQ), registered for events.
pub type Rq<'a, P> = Object<&'a Hca<P>, RqObj>;

/// A UAR page (ALLOC_UAR / DEALLOC_UAR).
pub type Uar<'a, P> = Object<&'a Hca<P>, UarObj>;
/// A protection domain (ALLOC_PD / DEALLOC_PD).
pub type Pd<'a, P> = Object<&'a Hca<P>, PdObj>;
/// A transport domain (ALLOC_TRANSPORT_DOMAIN / DEALLOC_TRANSPORT_DOMAIN).
pub type TransportDomain<'a, P> = Object<&'a Hca<P>, TdObj>;
/// A completion queue (CREATE_CQ / DESTROY_CQ), registered for events.
pub type Cq<'a, P> = Object<&'a Hca<P>, CqObj>;
/// A queue pair (CREATE_QP / DESTROY_QP), registered for events.
pub type Qp<'a, P> = Object<&'a Hca<P>, QpObj>;
/// A shared receive queue, registered for events: at ISSI 0 an SRQ
/// (CREATE_SRQ / DESTROY_SRQ), at ISSI 1 a receive memory pool (CREATE_RMP
/// / DESTROY_RMP) whose number serves as the SRQ number, as Linux's
/// `create_srq_split` / `destroy_srq_split` choose.
pub type Srq<'a, P> = Object<&'a Hca<P>, SrqObj>;
/// A memory key (CREATE_MKEY / DESTROY_MKEY).
pub type Mkey<'a, P> = Object<&'a Hca<P>, MkeyObj>;

impl FwObject for UarObj {
    type Number = Uarn;
    const NAME: &'static str = "UAR";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Uarn) -> Result<()> {
        hca.dealloc_uar_number(n)
    }
}

impl FwObject for PdObj {
    type Number = Pdn;
    const NAME: &'static str = "PD";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Pdn) -> Result<()> {
        hca.exec(&DeallocPdIn::new().with(DeallocPdIn::pd, n.0)?)
            .map(drop)
    }
}

impl FwObject for TdObj {
    type Number = Tdn;
    const NAME: &'static str = "transport domain";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Tdn) -> Result<()> {
        hca.exec(
            &DeallocTransportDomainIn::new()
                .with(DeallocTransportDomainIn::transport_domain, n.0)?,
        )
        .map(drop)
    }
}

impl FwObject for CqObj {
    type Number = Cqn;
    const NAME: &'static str = "CQ";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Cqn) -> Result<()> {
        hca.exec(&DestroyCqIn::new().with(DestroyCqIn::cqn, n.0)?)?;
        hca.events().unregister_cq(n);
        Ok(())
    }
}

impl FwObject for QpObj {
    type Number = Qpn;
    const NAME: &'static str = "QP";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Qpn) -> Result<()> {
        hca.exec(&DestroyQpIn::new().with(DestroyQpIn::qpn, n.0)?)?;
        hca.events().unregister_queue(QueueId::Qp(n));
        Ok(())
    }
}

impl FwObject for SrqObj {
    type Number = Srqn;
    const NAME: &'static str = "SRQ";
    /// DESTROY_SRQ at ISSI 0, DESTROY_RMP at ISSI 1 (the ISSI is fixed for
    /// the session, so it names the command that created the object).
    fn destroy<P: Platform>(hca: &Hca<P>, n: Srqn) -> Result<()> {
        if hca.uses_rmp() {
            hca.exec(&DestroyRmpIn::new().with(DestroyRmpIn::rmpn, n.0)?)?;
        } else {
            hca.exec(&DestroySrqIn::new().with(DestroySrqIn::srqn, n.0)?)?;
        }
        hca.events().unregister_queue(QueueId::Srq(n));
        Ok(())
    }
}

impl FwObject for MkeyObj {
    type Number = MkeyIndex;
    const NAME: &'static str = "MKEY";
    fn destroy<P: Platform>(hca: &Hca<P>, n: MkeyIndex) -> Result<()> {
        hca.exec(&DestroyMkeyIn::new().with(DestroyMkeyIn::mkey_index, n.0)?)
            .map(drop)
    }
}

impl FwObject for TisObj {
    type Number = Tisn;
    const NAME: &'static str = "TIS";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Tisn) -> Result<()> {
        hca.exec(&DestroyTisIn::new().with(DestroyTisIn::tisn, n.0)?)
            .map(drop)
    }
}

impl FwObject for SqObj {
    type Number = Sqn;
    const NAME: &'static str = "SQ";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Sqn) -> Result<()> {
        hca.exec(&DestroySqIn::new().with(DestroySqIn::sqn, n.0)?)?;
        hca.events().unregister_queue(QueueId::Sq(n.0));
        Ok(())
    }
}

impl FwObject for TirObj {
    type Number = Tirn;
    const NAME: &'static str = "TIR";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Tirn) -> Result<()> {
        hca.exec(&DestroyTirIn::new().with(DestroyTirIn::tirn, n.0)?)
            .map(drop)
    }
}

impl FwObject for RqObj {
    type Number = Rqn;
    const NAME: &'static str = "RQ";
    fn destroy<P: Platform>(hca: &Hca<P>, n: Rqn) -> Result<()> {
        hca.exec(&DestroyRqIn::new().with(DestroyRqIn::rqn, n.0)?)?;
        hca.events().unregister_queue(QueueId::Rq(n.0));
        Ok(())
    }
}

/// Checks a work queue state transition (`WQ_STATE_*`): RST to RDY, RDY
/// to RDY, any state to ERR or RST, as the PRM's SQ/RQ state machine
/// allows.
fn check_wq_transition(from: u8, to: u8) -> Result<()> {
    let known = |s| matches!(s, WQ_STATE_RST | WQ_STATE_RDY | WQ_STATE_ERR);
    if !known(from) || !known(to) {
        return Err(Error::InvalidArgument {
            arg: "state",
            reason: "not a work queue state (RST 0, RDY 1, ERR 3)",
        });
    }
    if to == WQ_STATE_RDY && from == WQ_STATE_ERR {
        return Err(Error::InvalidArgument {
            arg: "state",
            reason: "ERR goes to RST before RDY",
        });
    }
    Ok(())
}

impl<H: HcaRef> Object<H, SqObj> {
    /// MODIFY_SQ from state `from` to `to` (`WQ_STATE_*`).
    pub fn modify_state(&self, from: u8, to: u8) -> Result<()> {
        check_wq_transition(from, to)?;
        let input = ModifySqIn::new()
            .with(ModifySqIn::sq_state, from)?
            .with(ModifySqIn::sqn, self.number.0)?
            .with(ModifySqIn::ctx, Sqc::new().with(Sqc::state, to)?)?;
        self.hca.exec(&input).map(drop)
    }
}

impl<H: HcaRef> Object<H, SqObj> {
    /// MODIFY_SQ of a ready SQ (RDY to RDY) that sets its packet pacing
    /// rate-limit table index (`sqc.packet_pacing_rate_limit_index`,
    /// modify_bitmask bit 0; 0: not paced).
    pub fn modify_rate_index(&self, index: u16) -> Result<()> {
        let input = ModifySqIn::new()
            .with(ModifySqIn::sq_state, WQ_STATE_RDY)?
            .with(ModifySqIn::sqn, self.number.0)?
            .with(
                ModifySqIn::modify_bitmask,
                MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX,
            )?
            .with(
                ModifySqIn::ctx,
                Sqc::new()
                    .with(Sqc::state, WQ_STATE_RDY)?
                    .with(Sqc::packet_pacing_rate_limit_index, index)?,
            )?;
        self.hca.exec(&input).map(drop)
    }
}

impl<H: HcaRef> Object<H, RqObj> {
    /// MODIFY_RQ from state `from` to `to` (`WQ_STATE_*`).
    pub fn modify_state(&self, from: u8, to: u8) -> Result<()> {
        check_wq_transition(from, to)?;
        let input = ModifyRqIn::new()
            .with(ModifyRqIn::rq_state, from)?
            .with(ModifyRqIn::rqn, self.number.0)?
            .with(ModifyRqIn::ctx, Rqc::new().with(Rqc::state, to)?)?;
        self.hca.exec(&input).map(drop)
    }
}

impl<H: HcaRef> Object<H, UarObj> {
    /// Byte offset of the UAR page in BAR0 (checked against the BAR size
    /// when allocated).
    pub fn offset(&self) -> usize {
        self.number.0 as usize * self.hca.uar_page_size()
    }
}

impl<P: Platform> Hca<P> {
    /// ALLOC_UAR; the index is checked to name a page inside BAR0 after the
    /// initialization segment.
    pub(crate) fn alloc_uar_number(&self) -> Result<Uarn> {
        let out: AllocUarOut = self.exec(&AllocUarIn::new())?;
        let n = out.get(AllocUarOut::uar);
        let ps = self.uar_page_size;
        let off = (n as usize).checked_mul(ps);
        let inside = off.is_some_and(|o| {
            o >= firmware_cmds::init_seg::INIT_SEG_SIZE
                && self.bar.check(o, 8).is_ok()
                && self.bar.check(o + ps - 8, 8).is_ok()
        });
        if !inside {
            // Give it back; it cannot be used.
            if let Err(e) = self.dealloc_uar_number(Uarn(n)) {
                log::warn!("DEALLOC_UAR of unusable UAR {n:#x}: {e}");
            }
            return Err(Error::InvalidAnswer {
                opcode: Opcode::ALLOC_UAR,
                op_mod: 0,
                field: "alloc_uar_out.uar",
                value: u64::from(n),
                reason: "the UAR page is not inside BAR0 after the initialization segment",
            });
        }
        Ok(Uarn(n))
    }

    pub(crate) fn dealloc_uar_number(&self, n: Uarn) -> Result<()> {
        self.exec(&DeallocUarIn::new().with(DeallocUarIn::uar, n.0)?)
            .map(drop)
    }

    /// ALLOC_UAR: a UAR page for doorbells (CQ arm at +0x20, BlueFlame at
    /// +0x800).
    pub fn alloc_uar(&self) -> Result<Uar<'_, P>> {
        Ok(Object::new(self, self.alloc_uar_number()?))
    }

    /// ALLOC_PD.
    pub fn alloc_pd(&self) -> Result<Pd<'_, P>> {
        let out: AllocPdOut = self.exec(&AllocPdIn::new())?;
        Ok(Object::new(self, Pdn(out.get(AllocPdOut::pd))))
    }

    /// Whether the device has Q counter sets (`cmd_hca_cap.max_qp_cnt`
    /// above 0).
    pub fn has_q_counters(&self) -> bool {
        self.caps()
            .general
            .cur
            .get(firmware_cmds::caps::CmdHcaCap::max_qp_cnt)
            != 0
    }

    /// ALLOC_Q_COUNTER: a Q counter set, deallocated when the handle goes.
    /// A device has `cmd_hca_cap.max_qp_cnt` of them (0: none, the command
    /// is not sent).
    pub fn alloc_q_counter(&self) -> Result<QCounter<'_, P>> {
        self.alloc_q_counter_on(self)
    }

    /// [`alloc_q_counter`](Self::alloc_q_counter) held through `hca`, a
    /// handle of this HCA (an `Arc<Hca>` for a counter that is kept in an
    /// owned structure).
    pub fn alloc_q_counter_on<H: HcaRef<Platform = P>>(
        &self,
        hca: H,
    ) -> Result<Object<H, QCounterObj>> {
        if !core::ptr::eq(&*hca, self) {
            return Err(Error::InvalidArgument {
                arg: "hca",
                reason: "a handle of another HCA",
            });
        }
        if !self.has_q_counters() {
            return Err(Error::Unsupported("Q counters (max_qp_cnt is 0)"));
        }
        let out: AllocQCounterOut = self.exec(&AllocQCounterIn::new())?;
        let id = out.get(AllocQCounterOut::counter_set_id);
        if id == 0 {
            return Err(Error::InvalidAnswer {
                opcode: Opcode::ALLOC_Q_COUNTER,
                op_mod: 0,
                field: "alloc_q_counter_out.counter_set_id",
                value: 0,
                reason: "set 0 is the default set, never allocated",
            });
        }
        Ok(Object::new(hca, CounterSetId(id)))
    }

    /// ALLOC_TRANSPORT_DOMAIN.
    pub fn alloc_transport_domain(&self) -> Result<TransportDomain<'_, P>> {
        let out: AllocTransportDomainOut = self.exec(&AllocTransportDomainIn::new())?;
        Ok(Object::new(
            self,
            Tdn(out.get(AllocTransportDomainOut::transport_domain)),
        ))
    }

    /// CREATE_TIS in transport domain `td`: what an SQ sends through.
    pub fn create_tis(&self, td: Tdn) -> Result<Tis<'_, P>> {
        let ctx = Tisc::new().with(Tisc::transport_domain, td.0)?;
        let out: CreateTisOut = self.exec(&CreateTisIn::new().with(CreateTisIn::ctx, ctx)?)?;
        Ok(Object::new(self, Tisn(out.get(CreateTisOut::tisn))))
    }

    /// CREATE_TIR with context `ctx` (its RQ or RQ table and transport
    /// domain must outlive it).
    pub(crate) fn create_tir_object(&self, ctx: Tirc) -> Result<Object<&Hca<P>, TirObj>> {
        let out: CreateTirOut = self.exec(&CreateTirIn::new().with(CreateTirIn::ctx, ctx)?)?;
        Ok(Object::new(self, Tirn(out.get(CreateTirOut::tirn))))
    }

    /// CREATE_SQ with the caller's context and buffer pages (`ctx.wq.pas`);
    /// the SQ is registered for events.
    pub(crate) fn create_sq(&self, pages: &PageList<'_, CreateSqIn>) -> Result<Sq<'_, P>> {
        let out: CreateSqOut = self.exec_encoded(pages)?;
        let n = out.get(CreateSqOut::sqn);
        let sq = Object::new(self, Sqn(n));
        let registered = self.events.register_queue(QueueId::Sq(n));
        self.register_created(sq, registered, Opcode::CREATE_SQ, "create_sq_out.sqn", n)
    }

    /// CREATE_RQ with the caller's context and buffer pages (`ctx.wq.pas`);
    /// the RQ is registered for events.
    pub(crate) fn create_rq(&self, pages: &PageList<'_, CreateRqIn>) -> Result<Rq<'_, P>> {
        let out: CreateRqOut = self.exec_encoded(pages)?;
        let n = out.get(CreateRqOut::rqn);
        let rq = Object::new(self, Rqn(n));
        let registered = self.events.register_queue(QueueId::Rq(n));
        self.register_created(rq, registered, Opcode::CREATE_RQ, "create_rq_out.rqn", n)
    }

    /// CREATE_CQ with the caller's context and buffer pages; the CQ is
    /// registered for completion and error events.
    pub(crate) fn create_cq(&self, pages: &PageList<'_, CreateCqIn>) -> Result<Cq<'_, P>> {
        let out: CreateCqOut = self.exec_encoded(pages)?;
        let cqn = Cqn(out.get(CreateCqOut::cqn));
        let cq = Object::new(self, cqn);
        let registered = self.events.register_cq(cqn);
        self.register_created(
            cq,
            registered,
            Opcode::CREATE_CQ,
            "create_cq_out.cqn",
            cqn.0,
        )
    }

    /// CREATE_QP with the caller's context and buffer pages; the QP is
    /// registered for events.
    pub(crate) fn create_qp(&self, pages: &PageList<'_, CreateQpIn>) -> Result<Qp<'_, P>> {
        let out: CreateQpOut = self.exec_encoded(pages)?;
        let qpn = Qpn(out.get(CreateQpOut::qpn));
        let qp = Object::new(self, qpn);
        let registered = self.events.register_queue(QueueId::Qp(qpn));
        self.register_created(
            qp,
            registered,
            Opcode::CREATE_QP,
            "create_qp_out.qpn",
            qpn.0,
        )
    }

    /// Whether shared receive queues are receive memory pools: the SRQ
    /// commands exist at ISSI 0 only; at ISSI 1 Linux (`srq_cmd.c`, the
    /// `*_split` functions) creates, arms, queries and destroys RMPs.
    pub fn uses_rmp(&self) -> bool {
        self.info.issi >= 1
    }

    /// CREATE_SRQ (ISSI 0) with the caller's context and buffer pages; the
    /// SRQ is registered for events.
    pub(crate) fn create_srq(&self, pages: &PageList<'_, CreateSrqIn>) -> Result<Srq<'_, P>> {
        let out: CreateSrqOut = self.exec_encoded(pages)?;
        self.register_srq(
            Srqn(out.get(CreateSrqOut::srqn)),
            Opcode::CREATE_SRQ,
            "create_srq_out.srqn",
        )
    }

    /// CREATE_RMP (ISSI 1) with the caller's context and buffer pages
    /// (`ctx.wq.pas`); the RMP is registered for events under its number,
    /// which the SRQ events (`SRQ_RQ_LIMIT`, SRQ catastrophic error) and
    /// `qpc.srqn_rmpn_xrqn` carry.
    pub(crate) fn create_rmp(&self, pages: &PageList<'_, CreateRmpIn>) -> Result<Srq<'_, P>> {
        let out: CreateRmpOut = self.exec_encoded(pages)?;
        self.register_srq(
            Srqn(out.get(CreateRmpOut::rmpn)),
            Opcode::CREATE_RMP,
            "create_rmp_out.rmpn",
        )
    }

    fn register_srq(&self, srqn: Srqn, opcode: Opcode, field: &'static str) -> Result<Srq<'_, P>> {
        let srq = Object::new(self, srqn);
        let registered = self.events.register_queue(QueueId::Srq(srqn));
        self.register_created(srq, registered, opcode, field, srqn.0)
    }

    /// CREATE_MKEY with the caller's memory key context and MTT (page
    /// addresses with the access bits, as 64-bit entries).
    pub(crate) fn create_mkey(&self, mtt: &PageList<'_, CreateMkeyIn>) -> Result<Mkey<'_, P>> {
        let out: CreateMkeyOut = self.exec_encoded(mtt)?;
        Ok(Object::new(
            self,
            MkeyIndex(out.get(CreateMkeyOut::mkey_index)),
        ))
    }

    /// A created object once its registration for events is done: an
    /// object number already registered is a firmware answer naming an
    /// object that exists ([`duplicate`]).
    fn register_created<'a, K: FwObject>(
        &self,
        obj: Object<&'a Hca<P>, K>,
        registered: Result<()>,
        opcode: Opcode,
        field: &'static str,
        n: u32,
    ) -> Result<Object<&'a Hca<P>, K>> {
        match registered {
            Ok(()) => Ok(obj),
            Err(Error::InvalidArgument { .. }) => Err(duplicate(obj, opcode, field, u64::from(n))),
            // The registry is full: the drop destroys the new object.
            Err(e) => Err(e),
        }
    }
}

/// The firmware answered with the number of an object that already
/// exists: destroying "it" would destroy the other one, so the handle is
/// forgotten (the firmware's bookkeeping is wrong anyway).
fn duplicate<H: HcaRef, K: FwObject>(
    mut obj: Object<H, K>,
    opcode: Opcode,
    field: &'static str,
    value: u64,
) -> Error {
    obj.live = false;
    log::error!("{opcode}: {field} = {value:#x} is already in use; not destroying it");
    Error::InvalidAnswer {
        opcode,
        op_mod: 0,
        field,
        value,
        reason: "the number of an object that exists",
    }
}
