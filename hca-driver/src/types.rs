//! Typed object numbers: what the firmware calls each object by.

use core::fmt;

macro_rules! object_number {
    ($(#[$m:meta])* $name:ident($t:ty), $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub $t);

        impl $name {
            /// The raw number.
            pub const fn get(self) -> $t {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, " {:#x}"), self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }
    };
}

object_number!(
    /// A UAR index (`alloc_uar_out.uar`): the UAR page's number in BAR0.
    Uarn(u32), "UAR"
);
object_number!(
    /// A protection domain number (`alloc_pd_out.pd`).
    Pdn(u32), "PD"
);
object_number!(
    /// A transport domain number (`alloc_transport_domain_out.transport_domain`).
    Tdn(u32), "TD"
);
object_number!(
    /// An event queue number (`create_eq_out.eq_number`).
    Eqn(u8), "EQ"
);
object_number!(
    /// A completion queue number (`create_cq_out.cqn`).
    Cqn(u32), "CQ"
);
object_number!(
    /// A queue pair number (`create_qp_out.qpn`).
    Qpn(u32), "QP"
);
object_number!(
    /// A shared receive queue number (`create_srq_out.srqn`).
    Srqn(u32), "SRQ"
);
object_number!(
    /// A memory key index (`create_mkey_out.mkey_index`); the key is
    /// `index << 8 | mkey_7_0`.
    MkeyIndex(u32), "MKEY index"
);
object_number!(
    /// A local key (`lkey`): the memory key an SGE names, `mkey_index << 8 |
    /// mkey_7_0` (`mkc.mkey_7_0`).
    Lkey(u32), "lkey"
);
object_number!(
    /// A remote key (`rkey`): the memory key a peer names in an RDMA or
    /// atomic request; on mlx5 the same key as the lkey.
    Rkey(u32), "rkey"
);
object_number!(
    /// A Q counter set id (`alloc_q_counter_out.counter_set_id`); 0 is the
    /// device's default set, never allocated.
    CounterSetId(u8), "Q counter"
);
object_number!(
    /// A receive queue number (`create_rq_out.rqn`).
    Rqn(u32), "RQ"
);
object_number!(
    /// A transport interface receive number (`create_tir_out.tirn`).
    Tirn(u32), "TIR"
);
object_number!(
    /// An RQ table number (`create_rqt_out.rqtn`).
    Rqtn(u32), "RQT"
);
object_number!(
    /// A flow table id (`create_flow_table_out.table_id`).
    FlowTableId(u32), "flow table"
);
object_number!(
    /// A flow group id (`create_flow_group_out.group_id`).
    FlowGroupId(u32), "flow group"
);
object_number!(
    /// A send queue number (`create_sq_out.sqn`).
    Sqn(u32), "SQ"
);
object_number!(
    /// A transport interface send number (`create_tis_out.tisn`).
    Tisn(u32), "TIS"
);
