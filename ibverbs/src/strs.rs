//! The `*_str` helpers and the rate conversions: the strings and numbers
//! libibverbs programs print and compare (the interface's facts).

use core::ffi::{CStr, c_char, c_int};

fn out(s: &'static CStr) -> *const c_char {
    s.as_ptr()
}

/// `ibv_node_type_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    out(match node_type {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    })
}

/// `ibv_port_state_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    out(match port_state {
        0 => c"no state change (NOP)",
        1 => c"down",
        2 => c"init",
        3 => c"armed",
        4 => c"active",
        5 => c"active defer",
        _ => c"unknown",
    })
}

/// `ibv_event_type_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    out(match event {
        0 => c"CQ error",
        1 => c"local work queue catastrophic error",
        2 => c"invalid request local work queue error",
        3 => c"local access violation work queue error",
        4 => c"communication established",
        5 => c"send queue drained",
        6 => c"path migrated",
        7 => c"path migration request error",
        8 => c"local catastrophic error",
        9 => c"port active",
        10 => c"port error",
        11 => c"LID change",
        12 => c"P_Key change",
        13 => c"SM change",
        14 => c"SRQ catastrophic error",
        15 => c"SRQ limit reached",
        16 => c"last WQE reached",
        17 => c"client reregistration",
        18 => c"GID table change",
        19 => c"WQ fatal",
        20 => c"Device link speed change",
        _ => c"unknown",
    })
}

/// The C string of a work completion status (`ibv_wc_status_str`), from
/// verbs-core's own table.
fn wc_status_cstr(status: c_int) -> &'static CStr {
    const NAMES: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| NAMES.get(i).copied())
        .unwrap_or(c"unknown")
}

/// `ibv_wc_status_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    out(wc_status_cstr(status))
}

/// `ibv_wr_opcode_str` (an inline-free helper of newer libibverbs;
/// exported for programs that print work request opcodes).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_wr_opcode_str(opcode: c_int) -> *const c_char {
    out(match opcode {
        0 => c"rdma-write",
        1 => c"rdma-write-with-imm",
        2 => c"send",
        3 => c"send-with-imm",
        4 => c"rdma-read",
        5 => c"atomic-cmp-and-swp",
        6 => c"atomic-fetch-and-add",
        7 => c"local-inv",
        8 => c"bind-mw",
        9 => c"send-with-inv",
        10 => c"tso",
        11 => c"driver1",
        14 => c"flush",
        15 => c"atomic-write",
        _ => c"unknown",
    })
}

/// `(enum ibv_rate, multiple of 2.5 Gb/s, Mb/s)`.
const RATES: [(c_int, c_int, c_int); 24] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 5, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
    (0, -1, -1),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s (-1 unknown).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 > 0)
        .map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`.
#[unsafe(no_mangle)]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && r.1 > 0)
        .map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps` (-1 unknown).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.2 > 0)
        .map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`.
#[unsafe(no_mangle)]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.2 == mbps && r.2 > 0)
        .map_or(0, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hca_driver::verbs::WcStatus;

    /// The C table agrees with verbs-core's `WcStatus::as_str` for every
    /// status both know.
    #[test]
    fn wc_status_strings_match_verbs_core() {
        for i in 0..22u8 {
            let s = WcStatus::from_u8(i);
            assert_eq!(
                wc_status_cstr(c_int::from(i)).to_str().unwrap(),
                s.as_str(),
                "{i}"
            );
        }
        assert_eq!(wc_status_cstr(99).to_str().unwrap(), "unknown");
        assert_eq!(wc_status_cstr(-1).to_str().unwrap(), "unknown");
    }

    #[test]
    fn rates_round_trip() {
        assert_eq!(ibv_rate_to_mult(3), 4);
        assert_eq!(mult_to_ibv_rate(4), 3);
        assert_eq!(ibv_rate_to_mbps(16), 103125);
        assert_eq!(mbps_to_ibv_rate(103125), 16);
        assert_eq!(ibv_rate_to_mult(99), -1);
        assert_eq!(mult_to_ibv_rate(0), 0);
    }
}
