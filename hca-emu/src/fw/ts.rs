//! The timestamp format of a new QP, SQ or RQ (`ts_format`) against the
//! formats the device offers (`roce_cap.qp_ts_format`,
//! `cmd_hca_cap.sq_ts_format` / `rq_ts_format`; see
//! [`TsFormatCaps`](crate::TsFormatCaps)).
//!
//! - capability 0 (free-running only, and every device whose firmware
//!   predates the field, like the recorded ConnectX-4): only 0. Linux sends
//!   0 there and never 1 ("don't set the ts_format bit to default when it
//!   is reserved - device is running in the old mode", Linux commit
//!   "RDMA/mlx5: Fix timestamp default mode", drivers/infiniband/hw/mlx5/qp.c
//!   `get_ts_format`);
//!   A firmware that knows the field (the ConnectX-5 personality) also
//!   takes 1 ("default": the device's own format, free running there;
//!   assumed: rdma-core's `Mlx5DevxRcResources.create_qp` sets 1
//!   unconditionally and its test suite has run on real cards);
//! - capability 1 (real time only): 1 (default) or 2 (real time); free
//!   running is refused (Linux commit "RDMA/mlx5: Support real-time
//!   timestamp directly from the device": "When the device supports only
//!   real-time timestamp and not free-running, the creation of the QP will
//!   fail");
//! - capability 2 (both): 0, 1 or 2;
//! - 3 is no format and always refused.
//!
//! The answer is status bad parameter (0x3) with a syndrome of this rule.
//! Which status real firmware returns is not documented; bad parameter is
//! what it answers for other context fields out of range (assumption).

use super::{Fail, fail, st};

/// Checks `ts_format` against capability `cap` (`known`: the firmware
/// knows the field); `syndrome` names the command's rule.
pub(crate) fn check(cap: u64, known: bool, ts_format: u64, syndrome: u32) -> Result<(), Fail> {
    let ok = match ts_format {
        0 => cap == 0 || cap == 2,
        1 => cap == 1 || cap == 2 || (cap == 0 && known),
        2 => cap == 1 || cap == 2,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        fail(st::BAD_PARAM, syndrome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_capability() {
        let ok = |cap, f| check(cap, false, f, 1).is_ok();
        // A firmware that knows the field takes "default" at capability 0.
        assert!(check(0, true, 1, 1).is_ok() && check(0, true, 2, 1).is_err());
        // Free-running only (the recorded ConnectX-4).
        assert!(ok(0, 0) && !ok(0, 1) && !ok(0, 2) && !ok(0, 3));
        // Real time only.
        assert!(!ok(1, 0) && ok(1, 1) && ok(1, 2) && !ok(1, 3));
        // Both.
        assert!(ok(2, 0) && ok(2, 1) && ok(2, 2) && !ok(2, 3));
        let e = check(1, true, 0, 0x42).unwrap_err();
        assert_eq!((e.status, e.syndrome), (st::BAD_PARAM, 0x42));
    }
}
