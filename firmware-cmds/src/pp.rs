//! Packet pacing: the device's rate-limit table, which send queues
//! (`sqc.packet_pacing_rate_limit_index`, set through MODIFY_SQ with
//! [`MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX`](crate::eth::MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX))
//! are paced by; SET_PP_RATE_LIMIT writes one entry.
//!
//! A device paces when `cmd_hca_cap.qos` and the QoS capabilities'
//! ([`QosCap`](crate::caps::QosCap)) `packet_pacing` are set; its table
//! has `packet_pacing_rate_table_size` entries, of which index 0 means "not
//! paced" (Linux `mlx5_rl` hands out indices from 1), and a rate must lie
//! within `packet_pacing_min_rate ..= packet_pacing_max_rate` (kbit/s).

use crate::prm_struct;

prm_struct! {
    /// SET_PP_RATE_LIMIT input (`set_pp_rate_limit_in`): sets entry
    /// `rate_limit_index` of the rate-limit table; a `rate_limit` of 0
    /// clears it.
    pub struct SetPpRateLimitIn("set_pp_rate_limit_in", 0x40): command SET_PP_RATE_LIMIT -> SetPpRateLimitOut {
        /// Opcode (SET_PP_RATE_LIMIT).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The table entry to set.
        rate_limit_index: u16 = 0x08[15:0],
        /// The rate, kbit/s (0: clear the entry).
        rate_limit: u32 = 0x10[31:0],
        /// Burst bound, bytes (0: the device's default), with
        /// `qos_cap.packet_pacing_burst_bound`.
        burst_upper_bound: u32 = 0x14[31:0],
        /// Typical packet size, bytes (0: none), with
        /// `qos_cap.packet_pacing_typical_size`.
        typical_packet_size: u16 = 0x18[15:0],
    }
}

prm_struct! {
    /// SET_PP_RATE_LIMIT output (`set_pp_rate_limit_out`).
    pub struct SetPpRateLimitOut("set_pp_rate_limit_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
