//! QP states, attributes and attribute masks (`ibv_qp_attr`,
//! `ibv_qp_attr_mask`), the InfiniBand specification's table of the
//! attributes each transition requires and accepts (the one Linux keeps
//! as `qp_state_table`), and how a transition becomes an mlx5 command: its
//! opcode, the QP context fields it carries and its `opt_param_mask`.

use core::fmt;

use firmware_cmds::Opcode;
use firmware_cmds::qp::{
    ATOMIC_MODE_IB_COMP, Ads, QP_OPTPAR_ALT_ADDR_PATH, QP_OPTPAR_PKEY_INDEX, QP_OPTPAR_PM_STATE,
    QP_OPTPAR_PRI_PORT, QP_OPTPAR_Q_KEY, QP_OPTPAR_RAE, QP_OPTPAR_RNR_TIMEOUT, QP_OPTPAR_RRE,
    QP_OPTPAR_RWE, QP_STATE_ERR, QP_STATE_INIT, QP_STATE_RST, QP_STATE_RTR, QP_STATE_RTS,
    QP_STATE_SQ_DRAINING, QP_STATE_SQD, QP_STATE_SQER, Qpc,
};
use verbs_core::QpType;

use crate::info::IbMtu;
use crate::verbs::ah::AhAttr;
use crate::verbs::pd::AccessFlags;
use crate::verbs::qp::QpCap;

/// A QP state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset,
    /// `IBV_QPS_INIT`.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error (UC, UD).
    Sqe,
    /// `IBV_QPS_ERR`.
    Err,
}

impl QpState {
    /// The libibverbs name.
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }

    /// From `qpc.state` (`QP_STATE_*`); `None` for a value the PRM does
    /// not define for a QP a driver sees.
    pub fn from_prm(v: u8) -> Option<Self> {
        Some(match v {
            QP_STATE_RST => QpState::Reset,
            QP_STATE_INIT => QpState::Init,
            QP_STATE_RTR => QpState::Rtr,
            QP_STATE_RTS => QpState::Rts,
            QP_STATE_SQER => QpState::Sqe,
            QP_STATE_SQD | QP_STATE_SQ_DRAINING => QpState::Sqd,
            QP_STATE_ERR => QpState::Err,
            _ => return None,
        })
    }

    /// Whether the send queue takes work requests in this state (they
    /// execute in RTS, are flushed in ERR and SQE).
    pub fn can_post_send(self) -> bool {
        matches!(
            self,
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err
        )
    }

    /// Whether the receive queue takes work requests in this state (every
    /// state but RESET).
    pub fn can_post_recv(self) -> bool {
        self != QpState::Reset
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The verbs name of a QP type (`IBV_QPT_*` without the prefix).
pub fn qp_type_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
        QpType::RawPacket => "RAW_PACKET",
    }
}

/// Which attributes of a [`QpAttr`] a modify sets (`enum
/// ibv_qp_attr_mask`, the same bit values).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QpAttrMask(pub u32);

macro_rules! mask_bits {
    ($($(#[$m:meta])* $name:ident = $bit:expr, $s:literal;)*) => {
        impl QpAttrMask {
            $($(#[$m])* pub const $name: Self = Self(1 << $bit);)*
            /// Every bit with its libibverbs name.
            pub const NAMES: &'static [(QpAttrMask, &'static str)] = &[$((Self::$name, $s)),*];
        }
    };
}

mask_bits! {
    /// `IBV_QP_STATE`: `qp_state`.
    STATE = 0, "IBV_QP_STATE";
    /// `IBV_QP_CUR_STATE`: `cur_qp_state`.
    CUR_STATE = 1, "IBV_QP_CUR_STATE";
    /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
    EN_SQD_ASYNC_NOTIFY = 2, "IBV_QP_EN_SQD_ASYNC_NOTIFY";
    /// `IBV_QP_ACCESS_FLAGS`: `qp_access_flags`.
    ACCESS_FLAGS = 3, "IBV_QP_ACCESS_FLAGS";
    /// `IBV_QP_PKEY_INDEX`.
    PKEY_INDEX = 4, "IBV_QP_PKEY_INDEX";
    /// `IBV_QP_PORT`: `port_num`.
    PORT = 5, "IBV_QP_PORT";
    /// `IBV_QP_QKEY`.
    QKEY = 6, "IBV_QP_QKEY";
    /// `IBV_QP_AV`: `ah_attr` (the primary path).
    AV = 7, "IBV_QP_AV";
    /// `IBV_QP_PATH_MTU`.
    PATH_MTU = 8, "IBV_QP_PATH_MTU";
    /// `IBV_QP_TIMEOUT`: local ACK timeout.
    TIMEOUT = 9, "IBV_QP_TIMEOUT";
    /// `IBV_QP_RETRY_CNT`.
    RETRY_CNT = 10, "IBV_QP_RETRY_CNT";
    /// `IBV_QP_RNR_RETRY`.
    RNR_RETRY = 11, "IBV_QP_RNR_RETRY";
    /// `IBV_QP_RQ_PSN`.
    RQ_PSN = 12, "IBV_QP_RQ_PSN";
    /// `IBV_QP_MAX_QP_RD_ATOMIC`: `max_rd_atomic`.
    MAX_QP_RD_ATOMIC = 13, "IBV_QP_MAX_QP_RD_ATOMIC";
    /// `IBV_QP_ALT_PATH`.
    ALT_PATH = 14, "IBV_QP_ALT_PATH";
    /// `IBV_QP_MIN_RNR_TIMER`.
    MIN_RNR_TIMER = 15, "IBV_QP_MIN_RNR_TIMER";
    /// `IBV_QP_SQ_PSN`.
    SQ_PSN = 16, "IBV_QP_SQ_PSN";
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    MAX_DEST_RD_ATOMIC = 17, "IBV_QP_MAX_DEST_RD_ATOMIC";
    /// `IBV_QP_PATH_MIG_STATE`.
    PATH_MIG_STATE = 18, "IBV_QP_PATH_MIG_STATE";
    /// `IBV_QP_CAP`.
    CAP = 19, "IBV_QP_CAP";
    /// `IBV_QP_DEST_QPN`: `dest_qp_num`.
    DEST_QPN = 20, "IBV_QP_DEST_QPN";
    /// `IBV_QP_RATE_LIMIT`: `rate_limit` (raw packet QPs, RTR to RTS and
    /// RTS to RTS: packet pacing).
    RATE_LIMIT = 25, "IBV_QP_RATE_LIMIT";
}

impl QpAttrMask {
    /// No attribute.
    pub const NONE: Self = Self(0);

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// The bits of `self` not in `other`.
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl core::ops::BitOr for QpAttrMask {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl core::ops::BitAnd for QpAttrMask {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

/// `IBV_QP_AV | IBV_QP_PATH_MTU`: the libibverbs names joined with ` | `.
impl fmt::Display for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::write_flags(f, self.0, Self::NAMES.iter().map(|(b, n)| (b.0, *n)))
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QpAttrMask({self})")
    }
}

/// Path migration state (`enum ibv_mig_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PathMigState {
    /// `IBV_MIG_MIGRATED` (no alternate path in use).
    #[default]
    Migrated,
    /// `IBV_MIG_REARM`.
    Rearm,
    /// `IBV_MIG_ARMED`.
    Armed,
}

impl PathMigState {
    /// `qpc.pm_state` (`QP_PM_*`).
    pub(crate) fn to_prm(self) -> u8 {
        use firmware_cmds::qp::{QP_PM_ARMED, QP_PM_MIGRATED, QP_PM_REARM};
        match self {
            PathMigState::Migrated => QP_PM_MIGRATED,
            PathMigState::Rearm => QP_PM_REARM,
            PathMigState::Armed => QP_PM_ARMED,
        }
    }

    fn from_prm(v: u8) -> Self {
        use firmware_cmds::qp::{QP_PM_ARMED, QP_PM_REARM};
        match v {
            QP_PM_ARMED => PathMigState::Armed,
            QP_PM_REARM => PathMigState::Rearm,
            _ => PathMigState::Migrated,
        }
    }
}

/// QP attributes (`struct ibv_qp_attr`) with the mask of the ones that
/// are set: each builder method sets its attribute and its mask bit.
///
/// ```
/// use hca_driver::IbMtu;
/// use hca_driver::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState};
/// let a = QpAttr::new()
///     .state(QpState::Init)
///     .pkey_index(0)
///     .port(1)
///     .access(AccessFlags::REMOTE_WRITE);
/// assert_eq!(a.mask.to_string(),
///     "IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT");
/// let b = QpAttr::new().state(QpState::Rtr).path_mtu(IbMtu::Mtu1024);
/// assert!(b.mask.contains(QpAttrMask::PATH_MTU));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Which attributes are set.
    pub mask: QpAttrMask,
    /// The state to move to (`qp_state`).
    pub qp_state: QpState,
    /// The state the caller believes the QP is in (`cur_qp_state`).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: IbMtu,
    /// Path migration state.
    pub path_mig_state: PathMigState,
    /// Q_Key (UD).
    pub qkey: u32,
    /// First expected receive PSN (24 bits).
    pub rq_psn: u32,
    /// First send PSN (24 bits).
    pub sq_psn: u32,
    /// Remote QP number (RC, UC).
    pub dest_qp_num: u32,
    /// Remote access the QP allows (remote read/write/atomic).
    pub qp_access_flags: AccessFlags,
    /// Primary path (RC, UC).
    pub ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Port (1-based).
    pub port_num: u8,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite), 0..=31.
    pub timeout: u8,
    /// Transport retries, 0..=7.
    pub retry_cnt: u8,
    /// RNR retries, 0..=7 (7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code, 0..=31.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READs / atomics as initiator.
    pub max_rd_atomic: u8,
    /// Incoming RDMA READs / atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Async notification when the SQ drains (SQD).
    pub en_sqd_async_notify: bool,
    /// The SQ is draining (query only).
    pub sq_draining: bool,
    /// Capabilities (query only).
    pub cap: QpCap,
    /// Send rate, kbit/s (`rate_limit`; 0: not paced): a raw packet QP's
    /// packet pacing (see [`Qp::set_rate_limit`](super::Qp::set_rate_limit)
    /// for the burst and typical packet size).
    pub rate_limit: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        Self::new()
    }
}

impl QpAttr {
    /// No attribute set.
    pub const fn new() -> Self {
        Self {
            mask: QpAttrMask::NONE,
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: IbMtu::Mtu1024,
            path_mig_state: PathMigState::Migrated,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::NONE,
            ah_attr: AhAttr::new(),
            pkey_index: 0,
            port_num: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            min_rnr_timer: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            cap: QpCap::new(),
            rate_limit: 0,
        }
    }

    /// `rate_limit` in kbit/s ([`QpAttrMask::RATE_LIMIT`]; 0: not
    /// paced).
    pub const fn rate_limit(mut self, kbps: u32) -> Self {
        self.rate_limit = kbps;
        self.mask.0 |= QpAttrMask::RATE_LIMIT.0;
        self
    }
    /// `qp_state` ([`QpAttrMask::STATE`]).
    pub const fn state(mut self, s: QpState) -> Self {
        self.qp_state = s;
        self.mask.0 |= QpAttrMask::STATE.0;
        self
    }
    /// `cur_qp_state` ([`QpAttrMask::CUR_STATE`]).
    pub const fn cur_state(mut self, s: QpState) -> Self {
        self.cur_qp_state = s;
        self.mask.0 |= QpAttrMask::CUR_STATE.0;
        self
    }
    /// `path_mtu` ([`QpAttrMask::PATH_MTU`]).
    pub const fn path_mtu(mut self, m: IbMtu) -> Self {
        self.path_mtu = m;
        self.mask.0 |= QpAttrMask::PATH_MTU.0;
        self
    }
    /// `path_mig_state` ([`QpAttrMask::PATH_MIG_STATE`]).
    pub const fn path_mig_state(mut self, m: PathMigState) -> Self {
        self.path_mig_state = m;
        self.mask.0 |= QpAttrMask::PATH_MIG_STATE.0;
        self
    }
    /// `qkey` ([`QpAttrMask::QKEY`]).
    pub const fn qkey(mut self, k: u32) -> Self {
        self.qkey = k;
        self.mask.0 |= QpAttrMask::QKEY.0;
        self
    }
    /// `rq_psn` ([`QpAttrMask::RQ_PSN`]).
    pub const fn rq_psn(mut self, p: u32) -> Self {
        self.rq_psn = p;
        self.mask.0 |= QpAttrMask::RQ_PSN.0;
        self
    }
    /// `sq_psn` ([`QpAttrMask::SQ_PSN`]).
    pub const fn sq_psn(mut self, p: u32) -> Self {
        self.sq_psn = p;
        self.mask.0 |= QpAttrMask::SQ_PSN.0;
        self
    }
    /// `dest_qp_num` ([`QpAttrMask::DEST_QPN`]).
    pub const fn dest_qp_num(mut self, n: u32) -> Self {
        self.dest_qp_num = n;
        self.mask.0 |= QpAttrMask::DEST_QPN.0;
        self
    }
    /// `qp_access_flags` ([`QpAttrMask::ACCESS_FLAGS`]).
    pub const fn access(mut self, a: AccessFlags) -> Self {
        self.qp_access_flags = a;
        self.mask.0 |= QpAttrMask::ACCESS_FLAGS.0;
        self
    }
    /// `ah_attr` ([`QpAttrMask::AV`]).
    pub const fn ah(mut self, a: AhAttr) -> Self {
        self.ah_attr = a;
        self.mask.0 |= QpAttrMask::AV.0;
        self
    }
    /// `pkey_index` ([`QpAttrMask::PKEY_INDEX`]).
    pub const fn pkey_index(mut self, i: u16) -> Self {
        self.pkey_index = i;
        self.mask.0 |= QpAttrMask::PKEY_INDEX.0;
        self
    }
    /// `port_num` ([`QpAttrMask::PORT`]).
    pub const fn port(mut self, p: u8) -> Self {
        self.port_num = p;
        self.mask.0 |= QpAttrMask::PORT.0;
        self
    }
    /// `timeout` ([`QpAttrMask::TIMEOUT`]).
    pub const fn timeout(mut self, t: u8) -> Self {
        self.timeout = t;
        self.mask.0 |= QpAttrMask::TIMEOUT.0;
        self
    }
    /// `retry_cnt` ([`QpAttrMask::RETRY_CNT`]).
    pub const fn retry_cnt(mut self, n: u8) -> Self {
        self.retry_cnt = n;
        self.mask.0 |= QpAttrMask::RETRY_CNT.0;
        self
    }
    /// `rnr_retry` ([`QpAttrMask::RNR_RETRY`]).
    pub const fn rnr_retry(mut self, n: u8) -> Self {
        self.rnr_retry = n;
        self.mask.0 |= QpAttrMask::RNR_RETRY.0;
        self
    }
    /// `min_rnr_timer` ([`QpAttrMask::MIN_RNR_TIMER`]).
    pub const fn min_rnr_timer(mut self, t: u8) -> Self {
        self.min_rnr_timer = t;
        self.mask.0 |= QpAttrMask::MIN_RNR_TIMER.0;
        self
    }
    /// `max_rd_atomic` ([`QpAttrMask::MAX_QP_RD_ATOMIC`]).
    pub const fn max_rd_atomic(mut self, n: u8) -> Self {
        self.max_rd_atomic = n;
        self.mask.0 |= QpAttrMask::MAX_QP_RD_ATOMIC.0;
        self
    }
    /// `max_dest_rd_atomic` ([`QpAttrMask::MAX_DEST_RD_ATOMIC`]).
    pub const fn max_dest_rd_atomic(mut self, n: u8) -> Self {
        self.max_dest_rd_atomic = n;
        self.mask.0 |= QpAttrMask::MAX_DEST_RD_ATOMIC.0;
        self
    }
}

/// The attributes a transition requires and accepts for a QP type (the IB
/// specification's table, as Linux's `ib_modify_qp_is_ok` has it); `None`
/// when the transition does not exist.
pub fn transition_masks(
    cur: QpState,
    next: QpState,
    t: QpType,
) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let by = |ud: M, uc: M, rc: M| match t {
        QpType::Ud => Some(ud),
        QpType::Uc => Some(uc),
        QpType::Rc => Some(rc),
        QpType::RawPacket => None,
    };
    let none = M::NONE;
    let valid = || Some((M::NONE, M::NONE));
    if t == QpType::RawPacket {
        // Linux's qp_state_table for IB_QPT_RAW_PACKET: the port at
        // RESET to INIT, the rate limit at RTR to RTS and RTS to RTS.
        return match (cur, next) {
            (Reset, Reset) => valid(),
            (Reset, Init) => Some((M::PORT, none)),
            (Reset, _) => None,
            (_, Reset) | (_, Err) => valid(),
            (Init, Init) | (Init, Rtr) => valid(),
            (Rtr, Rts) | (Rts, Rts) => Some((none, M::RATE_LIMIT)),
            _ => None,
        };
    }
    match (cur, next) {
        (Reset, Reset) => valid(),
        (Reset, Init) => {
            let conn = M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
            Some((by(M::PKEY_INDEX | M::PORT | M::QKEY, conn, conn)?, none))
        }
        (Reset, _) => None,
        (_, Reset) | (_, Err) => valid(),
        (Init, Init) => {
            let conn = M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
            Some((none, by(M::PKEY_INDEX | M::PORT | M::QKEY, conn, conn)?))
        }
        (Init, Rtr) => {
            let uc = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
            let rc = uc | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
            let conn_opt = M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX;
            Some((
                by(none, uc, rc)?,
                by(M::PKEY_INDEX | M::QKEY, conn_opt, conn_opt)?,
            ))
        }
        (Rtr, Rts) => {
            let rc = M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
            let uc_opt = M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE;
            Some((
                by(M::SQ_PSN, M::SQ_PSN, rc)?,
                by(M::CUR_STATE | M::QKEY, uc_opt, uc_opt | M::MIN_RNR_TIMER)?,
            ))
        }
        (Rts, Rts) | (Sqd, Rts) => {
            let uc_opt = M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE;
            Some((
                none,
                by(M::CUR_STATE | M::QKEY, uc_opt, uc_opt | M::MIN_RNR_TIMER)?,
            ))
        }
        (Rts, Sqd) => Some((
            none,
            by(
                M::EN_SQD_ASYNC_NOTIFY,
                M::EN_SQD_ASYNC_NOTIFY,
                M::EN_SQD_ASYNC_NOTIFY,
            )?,
        )),
        (Sqd, Sqd) => {
            let uc = M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE;
            let rc = uc
                | M::PORT
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER;
            Some((none, by(M::PKEY_INDEX | M::QKEY, uc, rc)?))
        }
        (Sqe, Rts) => Some((
            none,
            by(M::CUR_STATE | M::QKEY, M::CUR_STATE | M::ACCESS_FLAGS, none)?,
        )),
        _ => None,
    }
}

/// What a valid transition becomes on mlx5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// A transition command with a QP context: its opcode (RST2INIT,
    /// INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS) and the
    /// `opt_param_mask` bits it accepts for this QP type.
    WithContext { opcode: Opcode, optpar: u32 },
    /// 2ERR_QP.
    ToErr,
    /// 2RST_QP.
    ToReset,
}

/// The mlx5 command of a transition (Linux's `optab` and `opt_mask`).
pub(crate) fn command(cur: QpState, next: QpState, t: QpType) -> Result<Command, &'static str> {
    use QpState::*;
    let st = |rc: u32, uc: u32, ud: u32| match t {
        QpType::Rc => rc,
        QpType::Uc => uc,
        _ => ud,
    };
    const ACC: u32 = QP_OPTPAR_RRE | QP_OPTPAR_RAE | QP_OPTPAR_RWE;
    let ctx = |opcode, optpar| Ok(Command::WithContext { opcode, optpar });
    match (cur, next) {
        (_, Reset) => Ok(Command::ToReset),
        (_, Err) => Ok(Command::ToErr),
        (Reset, Init) => ctx(Opcode::RST2INIT_QP, 0),
        (Init, Init) => ctx(
            Opcode::INIT2INIT_QP,
            st(
                ACC | QP_OPTPAR_PKEY_INDEX | QP_OPTPAR_PRI_PORT,
                QP_OPTPAR_RWE | QP_OPTPAR_PKEY_INDEX | QP_OPTPAR_PRI_PORT,
                QP_OPTPAR_PKEY_INDEX | QP_OPTPAR_Q_KEY | QP_OPTPAR_PRI_PORT,
            ),
        ),
        (Init, Rtr) => ctx(
            Opcode::INIT2RTR_QP,
            st(
                QP_OPTPAR_ALT_ADDR_PATH | ACC | QP_OPTPAR_PKEY_INDEX,
                QP_OPTPAR_ALT_ADDR_PATH | QP_OPTPAR_RWE | QP_OPTPAR_PKEY_INDEX,
                QP_OPTPAR_PKEY_INDEX | QP_OPTPAR_Q_KEY,
            ),
        ),
        (Rtr, Rts) => ctx(
            Opcode::RTR2RTS_QP,
            st(
                QP_OPTPAR_ALT_ADDR_PATH | ACC | QP_OPTPAR_PM_STATE | QP_OPTPAR_RNR_TIMEOUT,
                QP_OPTPAR_ALT_ADDR_PATH | QP_OPTPAR_RWE | QP_OPTPAR_PM_STATE,
                QP_OPTPAR_Q_KEY,
            ),
        ),
        (Rts, Rts) => ctx(
            Opcode::RTS2RTS_QP,
            st(
                ACC | QP_OPTPAR_RNR_TIMEOUT | QP_OPTPAR_PM_STATE | QP_OPTPAR_ALT_ADDR_PATH,
                QP_OPTPAR_RWE | QP_OPTPAR_PM_STATE | QP_OPTPAR_ALT_ADDR_PATH,
                QP_OPTPAR_Q_KEY,
            ),
        ),
        (Sqe, Rts) => ctx(Opcode::SQERR2RTS_QP, st(0, QP_OPTPAR_RWE, QP_OPTPAR_Q_KEY)),
        (Rts, Sqd) | (Sqd, Sqd) | (Sqd, Rts) => core::result::Result::Err(
            "the SQD state: mlx5 has no RTS2SQD command (Linux's mlx5_ib refuses it too)",
        ),
        _ => core::result::Result::Err("no mlx5 command for this transition"),
    }
}

/// The `opt_param_mask` bits of the attributes in `mask` (Linux's
/// `ib_mask_to_mlx5_opt`), before masking with what a transition accepts.
pub(crate) fn optpar_of(mask: QpAttrMask) -> u32 {
    use QpAttrMask as M;
    let mut r = 0;
    let pairs: [(M, u32); 8] = [
        (
            M::ACCESS_FLAGS,
            QP_OPTPAR_RWE | QP_OPTPAR_RRE | QP_OPTPAR_RAE,
        ),
        (M::PKEY_INDEX, QP_OPTPAR_PKEY_INDEX),
        (M::PORT, QP_OPTPAR_PRI_PORT),
        (M::QKEY, QP_OPTPAR_Q_KEY),
        (M::ALT_PATH, QP_OPTPAR_ALT_ADDR_PATH),
        (M::MIN_RNR_TIMER, QP_OPTPAR_RNR_TIMEOUT),
        (M::PATH_MIG_STATE, QP_OPTPAR_PM_STATE),
        (M::CUR_STATE, 0),
    ];
    for (m, b) in pairs {
        if mask.contains(m) {
            r |= b;
        }
    }
    r
}

/// `log2` rounded up, for the RDMA READ / atomic depths (`log_sra_max`,
/// `log_rra_max`).
pub(crate) fn log2_ceil(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (8 - (n - 1).leading_zeros()) as u8
    }
}

/// Sets the access bits of a QP context (`rre`, `rwe`, `rae` and the
/// atomic mode); a UC QP has only remote write.
pub(crate) fn set_access(qpc: &mut Qpc, a: AccessFlags, t: QpType) -> crate::Result<()> {
    let connected_rc = t == QpType::Rc;
    qpc.set(Qpc::rwe, a.contains(AccessFlags::REMOTE_WRITE))?
        .set(
            Qpc::rre,
            connected_rc && a.contains(AccessFlags::REMOTE_READ),
        )?;
    let rae = connected_rc && a.contains(AccessFlags::REMOTE_ATOMIC);
    qpc.set(Qpc::rae, rae)?;
    if rae {
        // IB-compatible 8-byte atomics: what Linux's `get_atomic_mode`
        // picks when only the standard atomics are wanted.
        qpc.set(Qpc::atomic_mode, ATOMIC_MODE_IB_COMP)?;
    }
    Ok(())
}

/// The parts of a QP context a query returns, as attributes.
pub(crate) fn attr_from_qpc(qpc: &Qpc, t: QpType) -> (Option<QpState>, QpAttr) {
    let p: Ads = qpc.get(Qpc::primary_address_path);
    let mut a = QpAttr::new();
    let state = QpState::from_prm(qpc.get(Qpc::state));
    if let Some(s) = state {
        a.qp_state = s;
        a.cur_qp_state = s;
    }
    a.sq_draining = qpc.get(Qpc::state) == QP_STATE_SQ_DRAINING;
    a.path_mtu = match qpc.get(Qpc::mtu) {
        1 => IbMtu::Mtu256,
        2 => IbMtu::Mtu512,
        3 => IbMtu::Mtu1024,
        4 => IbMtu::Mtu2048,
        _ => IbMtu::Mtu4096,
    };
    a.path_mig_state = PathMigState::from_prm(qpc.get(Qpc::pm_state));
    a.qkey = qpc.get(Qpc::q_key);
    a.rq_psn = qpc.get(Qpc::next_rcv_psn);
    a.sq_psn = qpc.get(Qpc::next_send_psn);
    a.dest_qp_num = qpc.get(Qpc::remote_qpn);
    let mut acc = AccessFlags::NONE;
    if qpc.get(Qpc::rre) {
        acc = acc | AccessFlags::REMOTE_READ;
    }
    if qpc.get(Qpc::rwe) {
        acc = acc | AccessFlags::REMOTE_WRITE;
    }
    if qpc.get(Qpc::rae) {
        acc = acc | AccessFlags::REMOTE_ATOMIC;
    }
    a.qp_access_flags = acc;
    a.pkey_index = p.get(Ads::pkey_index);
    a.port_num = p.get(Ads::vhca_port_num);
    a.timeout = p.get(Ads::ack_timeout);
    a.retry_cnt = qpc.get(Qpc::retry_count);
    a.rnr_retry = qpc.get(Qpc::rnr_retry);
    a.min_rnr_timer = qpc.get(Qpc::min_rnr_nak);
    let depth = |l: u8| if l >= 8 { u8::MAX } else { 1u8 << l };
    if t == QpType::Rc {
        a.max_rd_atomic = depth(qpc.get(Qpc::log_sra_max));
        a.max_dest_rd_atomic = depth(qpc.get(Qpc::log_rra_max));
    }
    a.ah_attr = AhAttr::from_ads(&p);
    a.mask = QpAttrMask::STATE;
    (state, a)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::format;

    use super::*;

    #[test]
    fn the_ib_table_for_rc() {
        use QpAttrMask as M;
        let (req, opt) = transition_masks(QpState::Reset, QpState::Init, QpType::Rc).unwrap();
        assert_eq!(req, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        assert!(opt.is_empty());
        let (req, _) = transition_masks(QpState::Init, QpState::Rtr, QpType::Rc).unwrap();
        assert_eq!(
            req,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        let (req, _) = transition_masks(QpState::Init, QpState::Rtr, QpType::Ud).unwrap();
        assert!(req.is_empty());
        let (req, opt) = transition_masks(QpState::Rtr, QpState::Rts, QpType::Ud).unwrap();
        assert_eq!((req, opt), (M::SQ_PSN, M::CUR_STATE | M::QKEY));
        assert!(transition_masks(QpState::Reset, QpState::Rts, QpType::Rc).is_none());
        assert!(transition_masks(QpState::Reset, QpState::Err, QpType::Rc).is_none());
        assert!(transition_masks(QpState::Rts, QpState::Err, QpType::Uc).is_some());
        assert!(transition_masks(QpState::Init, QpState::Rts, QpType::Rc).is_none());
    }

    #[test]
    fn masks_print_their_names() {
        let m = QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask(1 << 26);
        assert_eq!(format!("{m}"), "IBV_QP_AV | IBV_QP_PATH_MTU | 0x4000000");
        assert_eq!(format!("{}", QpAttrMask::RATE_LIMIT), "IBV_QP_RATE_LIMIT");
        assert_eq!(format!("{}", QpAttrMask::NONE), "0");
    }

    #[test]
    fn commands_and_optional_parameters() {
        assert_eq!(
            command(QpState::Init, QpState::Rtr, QpType::Ud),
            Ok(Command::WithContext {
                opcode: Opcode::INIT2RTR_QP,
                optpar: QP_OPTPAR_PKEY_INDEX | QP_OPTPAR_Q_KEY
            })
        );
        assert_eq!(
            command(QpState::Rts, QpState::Err, QpType::Rc),
            Ok(Command::ToErr)
        );
        assert!(command(QpState::Rts, QpState::Sqd, QpType::Rc).is_err());
        assert_eq!(
            optpar_of(QpAttrMask::ACCESS_FLAGS | QpAttrMask::QKEY),
            QP_OPTPAR_RWE | QP_OPTPAR_RRE | QP_OPTPAR_RAE | QP_OPTPAR_Q_KEY
        );
        assert_eq!(log2_ceil(0), 0);
        assert_eq!(log2_ceil(1), 0);
        assert_eq!(log2_ceil(2), 1);
        assert_eq!(log2_ceil(3), 2);
        assert_eq!(log2_ceil(16), 4);
    }

    /// Linux's `__mlx5_ib_modify_qp` writes `fls(n - 1)` for a depth n > 0
    /// (the least power of two holding n; it once wrote `ilog2(n)`, which
    /// rounds 3 down to 2 outstanding READs) and leaves the field 0 for 0.
    #[test]
    fn read_atomic_depths_are_encoded_as_linux_encodes_them() {
        let fls = |x: u32| 32 - x.leading_zeros();
        for n in 0..=u8::MAX {
            let linux = if n == 0 { 0 } else { fls(u32::from(n) - 1) };
            assert_eq!(u32::from(log2_ceil(n)), linux, "depth {n}");
            // The encoded depth holds the requested one.
            assert!(1u32 << log2_ceil(n) >= u32::from(n), "depth {n}");
        }
    }
}
