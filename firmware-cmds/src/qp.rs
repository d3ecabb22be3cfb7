//! Queue pairs: the QP context (`qpc`), the address path (`ads`),
//! CREATE_QP, DESTROY_QP, QUERY_QP and the state transitions RST2INIT,
//! INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, SQD_RTS, 2ERR and
//! 2RST.
//!
//! # CREATE_QP and the `qpc_extension_and_pas_list` union
//!
//! In the current PRM, `create_qp_in` is 0x1d0 bytes: after the QP context
//! and the user-memory fields, byte 0x110 starts a union that is either the
//! page list (`qpc_pas_list`, when `qpc_ext` is 0) or a 0xc0-byte QP context
//! extension followed by the page list (`qpc_extension_and_pas_list`, when
//! `qpc_ext` is 1). The classic driver (and ConnectX-4 firmware) uses the
//! first form: the physical addresses of the WQ buffer follow the fixed
//! part directly at 0x110. [`CreateQpIn`] is that fixed part (0x110 bytes)
//! with `pas` at 0x110; send it with
//! [`WithArray`](crate::command::WithArray) and `qpc_ext` = 0. The extension
//! form is not provided.

use crate::prm_struct;

/// `qpc.state`: reset.
pub const QP_STATE_RST: u8 = 0x0;
/// `qpc.state`: initialized.
pub const QP_STATE_INIT: u8 = 0x1;
/// `qpc.state`: ready to receive.
pub const QP_STATE_RTR: u8 = 0x2;
/// `qpc.state`: ready to send.
pub const QP_STATE_RTS: u8 = 0x3;
/// `qpc.state`: send queue error.
pub const QP_STATE_SQER: u8 = 0x4;
/// `qpc.state`: send queue drained.
pub const QP_STATE_SQD: u8 = 0x5;
/// `qpc.state`: error.
pub const QP_STATE_ERR: u8 = 0x6;
/// `qpc.state`: send queue draining.
pub const QP_STATE_SQ_DRAINING: u8 = 0x7;
/// `qpc.state`: suspended.
pub const QP_STATE_SUSPENDED: u8 = 0x9;

/// `(state, name)` of the QP states.
pub const QP_STATES: &[(u8, &str)] = &[
    (QP_STATE_RST, "RST"),
    (QP_STATE_INIT, "INIT"),
    (QP_STATE_RTR, "RTR"),
    (QP_STATE_RTS, "RTS"),
    (QP_STATE_SQER, "SQER"),
    (QP_STATE_SQD, "SQD"),
    (QP_STATE_ERR, "ERR"),
    (QP_STATE_SQ_DRAINING, "SQ_DRAINING"),
    (QP_STATE_SUSPENDED, "SUSPENDED"),
];

/// The name of QP state `s`.
pub fn qp_state_name(s: u8) -> Option<&'static str> {
    QP_STATES.iter().find(|&&(v, _)| v == s).map(|&(_, n)| n)
}

/// `qpc.st` (service type): reliable connected.
pub const QP_ST_RC: u8 = 0x0;
/// `qpc.st`: unreliable connected.
pub const QP_ST_UC: u8 = 0x1;
/// `qpc.st`: unreliable datagram.
pub const QP_ST_UD: u8 = 0x2;
/// `qpc.st`: extended reliable connected.
pub const QP_ST_XRC: u8 = 0x3;
/// `qpc.st`: MLX (raw IB packets).
pub const QP_ST_MLX: u8 = 0x4;
/// `qpc.st`: dynamically connected initiator.
pub const QP_ST_DCI: u8 = 0x5;
/// `qpc.st`: QP0 (subnet management).
pub const QP_ST_QP0: u8 = 0x7;
/// `qpc.st`: QP1 (general services).
pub const QP_ST_QP1: u8 = 0x8;
/// `qpc.st`: raw Ethertype.
pub const QP_ST_RAW_ETHERTYPE: u8 = 0x9;
/// `qpc.st`: raw IPv6.
pub const QP_ST_RAW_IPV6: u8 = 0xa;
/// `qpc.st`: sniffer.
pub const QP_ST_SNIFFER: u8 = 0xb;
/// `qpc.st`: sync UMR.
pub const QP_ST_SYNC_UMR: u8 = 0xe;
/// `qpc.st`: PTP 1588.
pub const QP_ST_PTP_1588: u8 = 0xd;
/// `qpc.st`: register UMR.
pub const QP_ST_REG_UMR: u8 = 0xc;

/// `qpc.pm_state`: path migration armed.
pub const QP_PM_ARMED: u8 = 0x0;
/// `qpc.pm_state`: rearm.
pub const QP_PM_REARM: u8 = 0x1;
/// `qpc.pm_state`: migrated (no alternate path).
pub const QP_PM_MIGRATED: u8 = 0x3;

/// `qpc.mtu` (IB MTU encoding): 256 bytes.
pub const IB_MTU_256: u8 = 1;
/// `qpc.mtu`: 512 bytes.
pub const IB_MTU_512: u8 = 2;
/// `qpc.mtu`: 1024 bytes.
pub const IB_MTU_1024: u8 = 3;
/// `qpc.mtu`: 2048 bytes.
pub const IB_MTU_2048: u8 = 4;
/// `qpc.mtu`: 4096 bytes.
pub const IB_MTU_4096: u8 = 5;

/// The path MTU in bytes of `qpc.mtu` value `mtu`, or `None` if invalid.
pub const fn ib_mtu_bytes(mtu: u8) -> Option<u32> {
    match mtu {
        1..=5 => Some(128 << mtu),
        _ => None,
    }
}

/// `qpc.atomic_mode`: no atomic operations (`MLX5_ATOMIC_MODE_NONE`).
pub const ATOMIC_MODE_NONE: u8 = 0x0;
/// `qpc.atomic_mode`: InfiniBand-compatible 8-byte atomics (compare-and-swap
/// and fetch-and-add, `MLX5_ATOMIC_MODE_IB_COMP`).
pub const ATOMIC_MODE_IB_COMP: u8 = 0x1;
/// `qpc.atomic_mode`: ConnectX atomics (`MLX5_ATOMIC_MODE_CX`).
pub const ATOMIC_MODE_CX: u8 = 0x2;
/// `qpc.atomic_mode`: extended atomics of up to 8 bytes
/// (`MLX5_ATOMIC_MODE_8B`).
pub const ATOMIC_MODE_8B: u8 = 0x3;
/// `qpc.atomic_mode`: extended atomics of up to 16 bytes
/// (`MLX5_ATOMIC_MODE_16B`).
pub const ATOMIC_MODE_16B: u8 = 0x4;
/// `qpc.atomic_mode`: extended atomics of up to 32 bytes
/// (`MLX5_ATOMIC_MODE_32B`).
pub const ATOMIC_MODE_32B: u8 = 0x5;
/// `qpc.atomic_mode`: extended atomics of up to 64 bytes
/// (`MLX5_ATOMIC_MODE_64B`).
pub const ATOMIC_MODE_64B: u8 = 0x6;
/// `qpc.atomic_mode`: extended atomics of up to 128 bytes
/// (`MLX5_ATOMIC_MODE_128B`).
pub const ATOMIC_MODE_128B: u8 = 0x7;
/// `qpc.atomic_mode`: extended atomics of up to 256 bytes
/// (`MLX5_ATOMIC_MODE_256B`).
pub const ATOMIC_MODE_256B: u8 = 0x8;

/// `qpc.rq_type`: a regular receive queue of `log_rq_size` entries.
pub const RQ_TYPE_NON_ZERO_RQ: u8 = 0x0;
/// `qpc.rq_type`: receives come from the SRQ in `srqn_rmpn_xrqn`.
pub const RQ_TYPE_SRQ_RQ: u8 = 0x1;
/// `qpc.rq_type`: cross-channel receive queue.
pub const RQ_TYPE_CRQ_RQ: u8 = 0x2;
/// `qpc.rq_type`: no receive queue.
pub const RQ_TYPE_ZERO_LEN_RQ: u8 = 0x3;

/// `opt_param_mask` bit `MLX5_QP_OPTPAR_ALT_ADDR_PATH`.
pub const QP_OPTPAR_ALT_ADDR_PATH: u32 = 1 << 0;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RRE` (remote read enable).
pub const QP_OPTPAR_RRE: u32 = 1 << 1;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RAE` (remote atomic enable).
pub const QP_OPTPAR_RAE: u32 = 1 << 2;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RWE` (remote write enable).
pub const QP_OPTPAR_RWE: u32 = 1 << 3;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_PKEY_INDEX`.
pub const QP_OPTPAR_PKEY_INDEX: u32 = 1 << 4;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_Q_KEY`.
pub const QP_OPTPAR_Q_KEY: u32 = 1 << 5;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RNR_TIMEOUT` (`min_rnr_nak`).
pub const QP_OPTPAR_RNR_TIMEOUT: u32 = 1 << 6;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH`.
pub const QP_OPTPAR_PRIMARY_ADDR_PATH: u32 = 1 << 7;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_SRA_MAX`.
pub const QP_OPTPAR_SRA_MAX: u32 = 1 << 8;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RRA_MAX`.
pub const QP_OPTPAR_RRA_MAX: u32 = 1 << 9;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_PM_STATE`.
pub const QP_OPTPAR_PM_STATE: u32 = 1 << 10;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RETRY_COUNT`.
pub const QP_OPTPAR_RETRY_COUNT: u32 = 1 << 12;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_RNR_RETRY`.
pub const QP_OPTPAR_RNR_RETRY: u32 = 1 << 13;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_ACK_TIMEOUT`.
pub const QP_OPTPAR_ACK_TIMEOUT: u32 = 1 << 14;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_LAG_TX_AFF`.
pub const QP_OPTPAR_LAG_TX_AFF: u32 = 1 << 15;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_PRI_PORT`.
pub const QP_OPTPAR_PRI_PORT: u32 = 1 << 16;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_SRQN`.
pub const QP_OPTPAR_SRQN: u32 = 1 << 18;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_CQN_RCV`.
pub const QP_OPTPAR_CQN_RCV: u32 = 1 << 19;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_DC_HS`.
pub const QP_OPTPAR_DC_HS: u32 = 1 << 20;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_DC_KEY`.
pub const QP_OPTPAR_DC_KEY: u32 = 1 << 21;
/// `opt_param_mask` bit `MLX5_QP_OPTPAR_COUNTER_SET_ID`.
pub const QP_OPTPAR_COUNTER_SET_ID: u32 = 1 << 25;

prm_struct! {
    /// Address path (`ads`), 44 bytes: where a connected QP sends, with the
    /// InfiniBand fields (LIDs, SL, GRH) and the RoCE fields (remote MAC,
    /// UDP source port, DSCP/ECN, Ethernet priority).
    pub struct Ads("ads", 0x2c) {
        /// Force loopback.
        fl: bool = 0x00[31:31],
        /// Free adaptive routing.
        free_ar: bool = 0x00[30:30],
        /// P_Key index (IB).
        pkey_index: u16 = 0x00[15:0],
        /// A GRH is present (InfiniBand). Linux's `mlx5_set_path` leaves
        /// it 0 on RoCE, where every packet carries its GRH or IP header.
        grh: bool = 0x04[23:23],
        /// Source LID path bits (IB).
        mlid: u8 = 0x04[22:16],
        /// Destination LID (IB).
        rlid: u16 = 0x04[15:0],
        /// Local ACK timeout: 4.096 µs × 2^ack_timeout.
        ack_timeout: u8 = 0x08[31:27],
        /// Source GID index (RoCE address table index).
        src_addr_index: u8 = 0x08[23:16],
        /// Static rate.
        stat_rate: u8 = 0x08[11:8],
        /// Hop limit (GRH / IP TTL).
        hop_limit: u8 = 0x08[7:0],
        /// Traffic class (GRH).
        tclass: u8 = 0x0c[27:20],
        /// Flow label (GRH).
        flow_label: u32 = 0x0c[19:0],
        /// Remote GID or IP address (IPv4 mapped into the last 4 bytes).
        rgid_rip: [u8; 16] = 0x10,
        /// Force the DSCP (RoCE).
        f_dscp: bool = 0x20[27:27],
        /// Force the ECN (RoCE).
        f_ecn: bool = 0x20[26:26],
        /// Force the Ethernet priority (RoCE).
        f_eth_prio: bool = 0x20[24:24],
        /// ECN (RoCE).
        ecn: u8 = 0x20[23:22],
        /// DSCP (RoCE).
        dscp: u8 = 0x20[21:16],
        /// UDP source port (RoCE v2).
        udp_sport: u16 = 0x20[15:0],
        /// VLAN DEI/CFI (RoCE).
        dei_cfi: bool = 0x24[31:31],
        /// Ethernet priority (RoCE).
        eth_prio: u8 = 0x24[30:28],
        /// Service level (IB).
        sl: u8 = 0x24[27:24],
        /// Port number (1-based).
        vhca_port_num: u8 = 0x24[23:16],
        /// Remote MAC address, bits 47:32 (RoCE).
        rmac_47_32: u16 = 0x24[15:0],
        /// Remote MAC address, bits 31:0 (RoCE).
        rmac_31_0: u32 = 0x28[31:0],
    }
}

impl Ads {
    /// Sets the remote MAC address (`rmac_47_32` and `rmac_31_0`).
    pub fn set_rmac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.0[0x26..0x2c].copy_from_slice(&mac);
        self
    }

    /// The remote MAC address.
    pub fn rmac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.0[0x26..0x2c]);
        m
    }
}

prm_struct! {
    /// QP context (`qpc`), 0xe8 bytes.
    pub struct Qpc("qpc", 0xe8) {
        /// QP state (`QP_STATE_*`), read-only.
        state: u8 = 0x00[31:28],
        /// LAG TX port affinity.
        lag_tx_port_affinity: u8 = 0x00[27:24],
        /// Service type (`QP_ST_*`).
        st: u8 = 0x00[23:16],
        /// Path migration state (`QP_PM_*`).
        pm_state: u8 = 0x00[12:11],
        /// Requester end-to-end credit mode.
        req_e2e_credit_mode: u8 = 0x00[9:8],
        /// Offload type.
        offload_type: u8 = 0x00[7:4],
        /// End padding mode of scatter to memory.
        end_padding_mode: u8 = 0x00[3:2],
        /// WQE signatures.
        wq_signature: bool = 0x04[31:31],
        /// Block multicast loopback.
        block_lb_mc: bool = 0x04[30:30],
        /// Atomic-like writes.
        atomic_like_write_en: bool = 0x04[29:29],
        /// Latency sensitive.
        latency_sensitive: bool = 0x04[28:28],
        /// Drain on signature error.
        drain_sigerr: bool = 0x04[26:26],
        /// Protection domain.
        pd: u32 = 0x04[23:0],
        /// Path MTU (`IB_MTU_*`).
        mtu: u8 = 0x08[31:29],
        /// log2 of the largest message (bytes).
        log_msg_max: u8 = 0x08[28:24],
        /// log2 of the number of receive WQEs.
        log_rq_size: u8 = 0x08[22:19],
        /// log2 of the receive WQE stride in 16-byte units.
        log_rq_stride: u8 = 0x08[18:16],
        /// No send queue.
        no_sq: bool = 0x08[15:15],
        /// log2 of the number of send WQE basic blocks.
        log_sq_size: u8 = 0x08[14:11],
        /// Timestamp format.
        ts_format: u8 = 0x08[7:6],
        /// The reserved lkey may be used.
        rlky: bool = 0x08[4:4],
        /// ULP stateless offload mode.
        ulp_stateless_offload_mode: u8 = 0x08[3:0],
        /// Counter set id.
        counter_set_id: u8 = 0x0c[31:24],
        /// UAR page of the QP's doorbells.
        uar_page: u32 = 0x0c[23:0],
        /// User index reported in CQEs (`cqe_version` 1).
        user_index: u32 = 0x10[23:0],
        /// log2 of the WQ buffer page size in 4 KiB units.
        log_page_size: u8 = 0x14[28:24],
        /// Remote QP number (connected services).
        remote_qpn: u32 = 0x14[23:0],
        /// Primary address path.
        primary_address_path: Ads = 0x18,
        /// Alternate address path.
        secondary_address_path: Ads = 0x44,
        /// log2 of the ACK request frequency.
        log_ack_req_freq: u8 = 0x70[31:28],
        /// log2 of the outstanding RDMA read/atomic requests as requester.
        log_sra_max: u8 = 0x70[23:21],
        /// Transport retry count.
        retry_count: u8 = 0x70[18:16],
        /// RNR retry count (7 = infinite).
        rnr_retry: u8 = 0x70[15:13],
        /// Fast registration enable.
        fre: bool = 0x70[11:11],
        /// Current RNR retry count.
        cur_rnr_retry: u8 = 0x70[10:8],
        /// Current retry count.
        cur_retry_count: u8 = 0x70[7:5],
        /// Next send PSN.
        next_send_psn: u32 = 0x78[23:0],
        /// CQ of the send queue.
        cqn_snd: u32 = 0x7c[23:0],
        /// DETH source QP number.
        deth_sqpn: u32 = 0x80[23:0],
        /// Last acknowledged PSN.
        last_acked_psn: u32 = 0x88[23:0],
        /// Send sequence number.
        ssn: u32 = 0x8c[23:0],
        /// log2 of the RDMA read/atomic responder resources.
        log_rra_max: u8 = 0x90[23:21],
        /// Atomic mode (`ATOMIC_MODE_*`).
        atomic_mode: u8 = 0x90[19:16],
        /// Remote read enable.
        rre: bool = 0x90[15:15],
        /// Remote write enable.
        rwe: bool = 0x90[14:14],
        /// Remote atomic enable.
        rae: bool = 0x90[13:13],
        /// Offset of the WQ in its first page, in 64-byte units.
        page_offset: u8 = 0x90[11:6],
        /// Core-direct slave receive.
        cd_slave_receive: bool = 0x90[2:2],
        /// Core-direct slave send.
        cd_slave_send: bool = 0x90[1:1],
        /// Core-direct master.
        cd_master: bool = 0x90[0:0],
        /// Minimum RNR NAK timer.
        min_rnr_nak: u8 = 0x94[28:24],
        /// Next expected receive PSN.
        next_rcv_psn: u32 = 0x94[23:0],
        /// XRC domain.
        xrcd: u32 = 0x98[23:0],
        /// CQ of the receive queue.
        cqn_rcv: u32 = 0x9c[23:0],
        /// Bus address of the doorbell record (8-byte aligned).
        dbr_addr: u64 = 0xa0[63:0],
        /// Q_Key (UD).
        q_key: u32 = 0xa8[31:0],
        /// Receive queue type (`RQ_TYPE_*`).
        rq_type: u8 = 0xac[26:24],
        /// SRQ, RMP or XRQ number (`rq_type` = SRQ).
        srqn_rmpn_xrqn: u32 = 0xac[23:0],
        /// Remote message sequence number.
        rmsn: u32 = 0xb0[23:0],
        /// Hardware send WQEBB counter.
        hw_sq_wqebb_counter: u16 = 0xb4[31:16],
        /// Software send WQEBB counter.
        sw_sq_wqebb_counter: u16 = 0xb4[15:0],
        /// Hardware receive counter.
        hw_rq_counter: u32 = 0xb8[31:0],
        /// Software receive counter.
        sw_rq_counter: u32 = 0xbc[31:0],
        /// Congestion control.
        cgs: bool = 0xc4[16:16],
        /// Requester scatter to CQE size.
        cs_req: u8 = 0xc4[15:8],
        /// Responder scatter to CQE size.
        cs_res: u8 = 0xc4[7:0],
        /// DC access key.
        dc_access_key: u64 = 0xc8[63:0],
        /// The doorbell record is in a user memory object.
        dbr_umem_valid: bool = 0xd0[28:28],
        /// User memory object holding the doorbell record.
        dbr_umem_id: u32 = 0xe4[31:0],
    }
}

prm_struct! {
    /// CREATE_QP input (`create_qp_in`), the classic form: the fixed part up
    /// to the union at 0x110, followed by the page list (see the module
    /// documentation).
    pub struct CreateQpIn("create_qp_in", 0x110): command CREATE_QP -> CreateQpOut {
        /// Opcode (CREATE_QP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// A QP context extension precedes the page list (must stay 0 with
        /// this layout).
        qpc_ext: bool = 0x08[31:31],
        /// Optional parameter mask.
        opt_param_mask: u32 = 0x10[31:0],
        /// The QP context.
        qpc: Qpc = 0x18,
        /// Offset in the user memory object.
        wq_umem_offset: u64 = 0x100[63:0],
        /// User memory object holding the WQ buffer.
        wq_umem_id: u32 = 0x108[31:0],
        /// The WQ buffer is in a user memory object.
        wq_umem_valid: bool = 0x10c[31:31],
        /// Physical address list of the WQ buffer (`qpc_pas_list.pas`).
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// CREATE_QP output (`create_qp_out`).
    pub struct CreateQpOut("create_qp_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The QP number.
        qpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_QP input (`destroy_qp_in`).
    pub struct DestroyQpIn("destroy_qp_in", 0x10): command DESTROY_QP -> DestroyQpOut {
        /// Opcode (DESTROY_QP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// QP to destroy.
        qpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_QP output (`destroy_qp_out`).
    pub struct DestroyQpOut("destroy_qp_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_QP input (`query_qp_in`).
    pub struct QueryQpIn("query_qp_in", 0x10): command QUERY_QP -> QueryQpOut {
        /// Opcode (QUERY_QP).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// QP to query.
        qpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// QUERY_QP output (`query_qp_out`), followed by the page list.
    pub struct QueryQpOut("query_qp_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// Optional parameter mask.
        opt_param_mask: u32 = 0x10[31:0],
        /// The QP context.
        qpc: Qpc = 0x18,
        /// Physical address list.
        pas: [u64] = 0x110,
    }
}

/// Declares a QP transition that carries a context (`*2*_qp_in` of 0x110
/// bytes) and its output.
macro_rules! qp_transition {
    ($in:ident, $in_ifc:literal, $out:ident, $out_ifc:literal, $op:ident, $doc:literal) => {
        prm_struct! {
            #[doc = concat!($doc, " input (`", $in_ifc, "`).")]
            pub struct $in($in_ifc, 0x110): command $op -> $out {
                /// Opcode.
                opcode: u16 = 0x00[31:16],
                /// User context id.
                uid: u16 = 0x00[15:0],
                /// Op mod.
                op_mod: u16 = 0x04[15:0],
                /// The QP.
                qpn: u32 = 0x08[23:0],
                /// Optional parameters present in `qpc` (`QP_OPTPAR_*`).
                opt_param_mask: u32 = 0x10[31:0],
                /// The QP context fields of the transition.
                qpc: Qpc = 0x18,
            }
        }

        prm_struct! {
            #[doc = concat!($doc, " output (`", $out_ifc, "`).")]
            pub struct $out($out_ifc, 0x10) {
                /// Return status.
                status: u8 = 0x00[31:24],
                /// Syndrome.
                syndrome: u32 = 0x04[31:0],
            }
        }
    };
}

qp_transition!(
    Rst2initQpIn,
    "rst2init_qp_in",
    Rst2initQpOut,
    "rst2init_qp_out",
    RST2INIT_QP,
    "RST2INIT_QP: reset to initialized"
);
qp_transition!(
    Init2initQpIn,
    "init2init_qp_in",
    Init2initQpOut,
    "init2init_qp_out",
    INIT2INIT_QP,
    "INIT2INIT_QP: modify a QP in initialized"
);
qp_transition!(
    Init2rtrQpIn,
    "init2rtr_qp_in",
    Init2rtrQpOut,
    "init2rtr_qp_out",
    INIT2RTR_QP,
    "INIT2RTR_QP: initialized to ready-to-receive"
);
qp_transition!(
    Rtr2rtsQpIn,
    "rtr2rts_qp_in",
    Rtr2rtsQpOut,
    "rtr2rts_qp_out",
    RTR2RTS_QP,
    "RTR2RTS_QP: ready-to-receive to ready-to-send"
);
qp_transition!(
    Rts2rtsQpIn,
    "rts2rts_qp_in",
    Rts2rtsQpOut,
    "rts2rts_qp_out",
    RTS2RTS_QP,
    "RTS2RTS_QP: modify a QP in ready-to-send"
);
qp_transition!(
    Sqerr2rtsQpIn,
    "sqerr2rts_qp_in",
    Sqerr2rtsQpOut,
    "sqerr2rts_qp_out",
    SQERR2RTS_QP,
    "SQERR2RTS_QP: send queue error to ready-to-send"
);

qp_transition!(
    Sqd2rtsQpIn,
    "sqd2rts_qp_in",
    Sqd2rtsQpOut,
    "sqd2rts_qp_out",
    SQD_RTS_QP,
    "SQD_RTS_QP: send queue drained to ready-to-send"
);

prm_struct! {
    /// 2ERR_QP input (`qp_2err_in`): any state to error.
    pub struct Qp2errIn("qp_2err_in", 0x10): command QP_2ERR -> Qp2errOut {
        /// Opcode (2ERR_QP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The QP.
        qpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// 2ERR_QP output (`qp_2err_out`).
    pub struct Qp2errOut("qp_2err_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// 2RST_QP input (`2rst_qp_in`, also named `qp_2rst_in`): any state to
    /// reset.
    pub struct Qp2rstIn("2rst_qp_in", 0x10): command QP_2RST -> Qp2rstOut {
        /// Opcode (2RST_QP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// vHCA tunnel id.
        vhca_tunnel_id: u16 = 0x04[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The QP.
        qpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// 2RST_QP output (`2rst_qp_out`).
    pub struct Qp2rstOut("2rst_qp_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::opcode::Opcode;

    #[test]
    fn init2init_and_sqd2rts_have_their_own_opcodes() {
        assert_eq!(Init2initQpIn::OPCODE, Opcode::INIT2INIT_QP);
        assert_eq!(Init2initQpIn::OPCODE.0, 0x50e);
        assert_eq!(&Init2initQpIn::new().as_bytes()[..2], &[0x05, 0x0e]);
        assert_eq!(Sqd2rtsQpIn::OPCODE, Opcode::SQD_RTS_QP);
        assert_eq!(&Sqd2rtsQpIn::new().as_bytes()[..2], &[0x05, 0x0c]);
        let i = Init2initQpIn::new()
            .with(Init2initQpIn::qpn, 0x12_3456)
            .unwrap()
            .with(Init2initQpIn::opt_param_mask, QP_OPTPAR_PKEY_INDEX)
            .unwrap();
        assert_eq!(&i.as_bytes()[0x08..0x0c], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(&i.as_bytes()[0x10..0x14], &[0, 0, 0, 0x10]);
    }

    #[test]
    fn atomic_mode_sits_in_bits_19_16_of_dword_0x90() {
        for (mode, byte) in [
            (ATOMIC_MODE_NONE, 0x00),
            (ATOMIC_MODE_IB_COMP, 0x01),
            (ATOMIC_MODE_CX, 0x02),
            (ATOMIC_MODE_8B, 0x03),
            (ATOMIC_MODE_256B, 0x08),
        ] {
            let q = Qpc::new().with(Qpc::atomic_mode, mode).unwrap();
            assert_eq!(q.as_bytes()[0x91], byte, "mode {mode}");
            assert_eq!(q.get(Qpc::atomic_mode), mode);
        }
        // Linux's MLX5_ATOMIC_MODE_* are these values shifted by 16
        // (MLX5_ATOMIC_MODE_OFFSET) within the dword.
        let q = Qpc::new()
            .with(Qpc::atomic_mode, ATOMIC_MODE_IB_COMP)
            .unwrap();
        assert_eq!(
            u32::from_be_bytes(q.as_bytes()[0x90..0x94].try_into().unwrap()),
            1 << 16
        );
    }
}
