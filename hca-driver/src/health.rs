//! The health monitor: the health buffer and the health counter of the
//! initialization segment.
//!
//! The firmware keeps `health_counter` (init segment 0x1010, bits 23:0)
//! changing while it is alive; three polls in a row, each at least one poll
//! period after the previous one, that see the same value mean the firmware
//! has stopped. A non-zero `health_buffer.synd` is a fatal firmware error,
//! and `fw_version` reading all ones means the device is gone.

use core::time::Duration;

use firmware_cmds::init_seg::{HEALTH_FW_VERSION_GONE, HealthSyndrome};

use crate::error::DeadReason;

/// Polls without a change of the health counter that mean the firmware is
/// dead (Linux `MAX_MISSES`).
pub const MAX_HEALTH_STALLS: u32 = 3;

/// What one poll read from the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthReading {
    /// `health_buffer.fw_version` (all ones: the device is gone).
    pub fw_version: u32,
    /// `health_buffer.synd`.
    pub syndrome: HealthSyndrome,
    /// `health_buffer.ext_synd`.
    pub ext_synd: u16,
    /// `health_counter` (24 bits).
    pub counter: u32,
}

impl HealthReading {
    /// The verdict on the health buffer alone (no counter history).
    pub fn buffer_verdict(&self) -> Result<(), DeadReason> {
        if self.fw_version == HEALTH_FW_VERSION_GONE {
            return Err(DeadReason::Gone);
        }
        if self.syndrome.is_error() {
            return Err(DeadReason::Fatal {
                syndrome: self.syndrome,
                ext_synd: self.ext_synd,
            });
        }
        Ok(())
    }
}

/// The counter history.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HealthMonitor {
    last: Option<(u32, Duration)>,
    stalls: u32,
}

impl HealthMonitor {
    /// Judges a reading taken at `now`. The counter is only compared with
    /// a reading at least `period` older; earlier polls only check the
    /// health buffer.
    pub(crate) fn observe(
        &mut self,
        now: Duration,
        r: &HealthReading,
        period: Duration,
    ) -> Result<(), DeadReason> {
        r.buffer_verdict()?;
        match self.last {
            None => self.last = Some((r.counter, now)),
            Some((_, at)) if now.saturating_sub(at) < period => {}
            Some((c, _)) => {
                if c == r.counter {
                    self.stalls += 1;
                    if self.stalls >= MAX_HEALTH_STALLS {
                        return Err(DeadReason::HealthCounterStalled {
                            counter: c,
                            polls: self.stalls,
                        });
                    }
                } else {
                    self.stalls = 0;
                }
                self.last = Some((r.counter, now));
            }
        }
        Ok(())
    }

    /// Consecutive polls without a change so far.
    #[cfg(test)]
    pub(crate) fn stalls(&self) -> u32 {
        self.stalls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(counter: u32) -> HealthReading {
        HealthReading {
            fw_version: 0x000c_000e,
            syndrome: HealthSyndrome(0),
            ext_synd: 0,
            counter,
        }
    }

    const P: Duration = Duration::from_secs(2);

    fn at(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn three_stalled_polls_mean_dead() {
        let mut m = HealthMonitor::default();
        m.observe(at(0), &reading(5), P).unwrap();
        m.observe(at(2), &reading(5), P).unwrap();
        m.observe(at(4), &reading(5), P).unwrap();
        assert_eq!(m.stalls(), 2);
        assert_eq!(
            m.observe(at(6), &reading(5), P),
            Err(DeadReason::HealthCounterStalled {
                counter: 5,
                polls: 3
            })
        );
    }

    #[test]
    fn a_change_resets_and_fast_polls_do_not_count() {
        let mut m = HealthMonitor::default();
        m.observe(at(0), &reading(1), P).unwrap();
        m.observe(at(2), &reading(1), P).unwrap();
        m.observe(at(4), &reading(1), P).unwrap();
        m.observe(at(6), &reading(2), P).unwrap();
        assert_eq!(m.stalls(), 0);
        // Many polls within one period never count as stalls.
        for ms in 0..100 {
            m.observe(at(6) + Duration::from_millis(ms * 10), &reading(2), P)
                .unwrap();
        }
        assert_eq!(m.stalls(), 0);
    }

    #[test]
    fn buffer_verdicts() {
        let mut m = HealthMonitor::default();
        let mut r = reading(1);
        r.syndrome = HealthSyndrome::HW_FTL_ERR;
        r.ext_synd = 0x42;
        assert_eq!(
            m.observe(at(0), &r, P),
            Err(DeadReason::Fatal {
                syndrome: HealthSyndrome::HW_FTL_ERR,
                ext_synd: 0x42
            })
        );
        let mut r = reading(1);
        r.fw_version = u32::MAX;
        assert_eq!(m.observe(at(0), &r, P), Err(DeadReason::Gone));
    }
}
