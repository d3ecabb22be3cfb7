//! Q counters: per-queue counter sets that receive queues (`rqc` and
//! `qpc.counter_set_id`) count into; ALLOC_Q_COUNTER, DEALLOC_Q_COUNTER
//! and QUERY_Q_COUNTER. A device offers `cmd_hca_cap.max_qp_cnt` of them.

use crate::prm_struct;

prm_struct! {
    /// ALLOC_Q_COUNTER input (`alloc_q_counter_in`).
    pub struct AllocQCounterIn("alloc_q_counter_in", 0x10): command ALLOC_Q_COUNTER -> AllocQCounterOut {
        /// Opcode (ALLOC_Q_COUNTER).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// ALLOC_Q_COUNTER output (`alloc_q_counter_out`).
    pub struct AllocQCounterOut("alloc_q_counter_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The counter set.
        counter_set_id: u8 = 0x08[7:0],
    }
}

prm_struct! {
    /// DEALLOC_Q_COUNTER input (`dealloc_q_counter_in`).
    pub struct DeallocQCounterIn("dealloc_q_counter_in", 0x10): command DEALLOC_Q_COUNTER -> DeallocQCounterOut {
        /// Opcode (DEALLOC_Q_COUNTER).
        opcode: u16 = 0x00[31:16],
        /// Counter set to free.
        counter_set_id: u8 = 0x08[7:0],
    }
}

prm_struct! {
    /// DEALLOC_Q_COUNTER output (`dealloc_q_counter_out`).
    pub struct DeallocQCounterOut("dealloc_q_counter_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_Q_COUNTER input (`query_q_counter_in`).
    pub struct QueryQCounterIn("query_q_counter_in", 0x20): command QUERY_Q_COUNTER -> QueryQCounterOut {
        /// Opcode (QUERY_Q_COUNTER).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Zero the counters after reading them.
        clear: bool = 0x18[31:31],
        /// Counter set to read.
        counter_set_id: u8 = 0x1c[7:0],
    }
}

prm_struct! {
    /// QUERY_Q_COUNTER output (`query_q_counter_out`), 0x100 bytes.
    pub struct QueryQCounterOut("query_q_counter_out", 0x100) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// RDMA write requests received.
        rx_write_requests: u32 = 0x10[31:0],
        /// RDMA read requests received.
        rx_read_requests: u32 = 0x18[31:0],
        /// Atomic requests received.
        rx_atomic_requests: u32 = 0x20[31:0],
        /// DCT connect requests received.
        rx_dct_connect: u32 = 0x28[31:0],
        /// Packets dropped because no receive WQE was posted.
        out_of_buffer: u32 = 0x30[31:0],
        /// Out-of-sequence packets received.
        out_of_sequence: u32 = 0x38[31:0],
        /// Duplicate requests received.
        duplicate_request: u32 = 0x40[31:0],
        /// RNR NAK retries exhausted.
        rnr_nak_retry_err: u32 = 0x48[31:0],
        /// PSN sequence errors (NAK received).
        packet_seq_err: u32 = 0x50[31:0],
        /// Implied NAK sequence errors.
        implied_nak_seq_err: u32 = 0x58[31:0],
        /// Local ACK timeouts.
        local_ack_timeout_err: u32 = 0x60[31:0],
        /// Responder local length errors.
        resp_local_length_error: u32 = 0x78[31:0],
        /// Requester local length errors.
        req_local_length_error: u32 = 0x7c[31:0],
        /// Responder local QP operation errors.
        resp_local_qp_error: u32 = 0x80[31:0],
        /// Local operation errors.
        local_operation_error: u32 = 0x84[31:0],
        /// Responder local protection errors.
        resp_local_protection: u32 = 0x88[31:0],
        /// Requester local protection errors.
        req_local_protection: u32 = 0x8c[31:0],
        /// Responder CQEs with an error.
        resp_cqe_error: u32 = 0x90[31:0],
        /// Requester CQEs with an error.
        req_cqe_error: u32 = 0x94[31:0],
        /// Memory window binding errors.
        req_mw_binding: u32 = 0x98[31:0],
        /// Bad responses.
        req_bad_response: u32 = 0x9c[31:0],
        /// Remote invalid request errors (requester).
        req_remote_invalid_request: u32 = 0xa0[31:0],
        /// Remote invalid request errors (responder).
        resp_remote_invalid_request: u32 = 0xa4[31:0],
        /// Remote access errors (requester).
        req_remote_access_errors: u32 = 0xa8[31:0],
        /// Remote access errors (responder).
        resp_remote_access_errors: u32 = 0xac[31:0],
        /// Remote operation errors (requester).
        req_remote_operation_errors: u32 = 0xb0[31:0],
        /// Transport retries exceeded.
        req_transport_retries_exceeded: u32 = 0xb4[31:0],
        /// CQ overflows.
        cq_overflow: u32 = 0xb8[31:0],
        /// Responder flush-error CQEs.
        resp_cqe_flush_error: u32 = 0xbc[31:0],
        /// Requester flush-error CQEs.
        req_cqe_flush_error: u32 = 0xc0[31:0],
    }
}
