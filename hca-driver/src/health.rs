//! The health monitor: the health buffer and the health counter of the
//! initialization segment.
//!
//! The firmware keeps `health_counter` (init segment 0x1010, bits 23:0)
//! changing while it is alive; three polls in a row, each at least one poll
//! period after the previous one, that see the same value mean the firmware
//! has stopped. A non-zero `health_buffer.synd` is a fatal firmware error,
//! and `fw_version` reading all ones means the device is gone.

use core::time::Duration;

use firmware_cmds::init_seg::{
    HEALTH_BUFFER_OFFSET, HEALTH_COUNTER_OFFSET, HEALTH_FW_VERSION_GONE, HealthBuffer,
    HealthCounter, HealthSyndrome, INTERNAL_TIMER_H_OFFSET, INTERNAL_TIMER_L_OFFSET,
};
use firmware_cmds::layout::Field;
use platform::Mmio;

use crate::error::DeadReason;

/// Init-segment offset of the dword that holds `field` of the health
/// buffer (every MMIO read is one aligned dword).
const fn buffer_dword<V>(field: Field<HealthBuffer, V>) -> usize {
    HEALTH_BUFFER_OFFSET + (field.offset() / 32) as usize * 4
}

/// `health_buffer.assert_var[0]`: five dwords from init segment 0x200.
pub(crate) const ASSERT_VAR_OFFSET: usize = buffer_dword(HealthBuffer::assert_var);
/// `health_buffer.assert_existptr` (the assert exit pointer): 0x220.
pub(crate) const ASSERT_EXIT_PTR_OFFSET: usize = buffer_dword(HealthBuffer::assert_existptr);
/// `health_buffer.assert_callra`: 0x224.
pub(crate) const ASSERT_CALLRA_OFFSET: usize = buffer_dword(HealthBuffer::assert_callra);
/// `health_buffer.fw_version` (all ones: the device is gone): 0x230.
pub(crate) const FW_VERSION_OFFSET: usize = buffer_dword(HealthBuffer::fw_version);
/// `health_buffer.hw_id`: 0x234.
pub(crate) const HW_ID_OFFSET: usize = buffer_dword(HealthBuffer::hw_id);
/// The dword of `health_buffer.irisc_index` (bits 31:24), `synd` (23:16)
/// and `ext_synd` (15:0): 0x23c.
pub(crate) const SYNDROME_DWORD_OFFSET: usize = buffer_dword(HealthBuffer::synd);

// The offsets of ../shared/prm/FACTS.md (init segment table).
const _: () = {
    assert!(ASSERT_VAR_OFFSET == 0x200);
    assert!(ASSERT_EXIT_PTR_OFFSET == 0x220);
    assert!(ASSERT_CALLRA_OFFSET == 0x224);
    assert!(FW_VERSION_OFFSET == 0x230);
    assert!(HW_ID_OFFSET == 0x234);
    assert!(SYNDROME_DWORD_OFFSET == 0x23c);
    assert!(buffer_dword(HealthBuffer::irisc_index) == SYNDROME_DWORD_OFFSET);
    assert!(buffer_dword(HealthBuffer::ext_synd) == SYNDROME_DWORD_OFFSET);
};

/// One health poll: `health_buffer.fw_version`, the syndrome dword and
/// `health_counter`, three aligned dword reads, decoded through the
/// [`HealthBuffer`] and [`HealthCounter`] layouts.
pub(crate) fn read_health<M: Mmio>(bar: &M) -> HealthReading {
    let mut image = [0u8; HealthBuffer::SIZE];
    for off in [FW_VERSION_OFFSET, SYNDROME_DWORD_OFFSET] {
        let at = off - HEALTH_BUFFER_OFFSET;
        image[at..at + 4].copy_from_slice(&bar.read32(off).to_bytes());
    }
    let hb = HealthBuffer::from_array(image);
    HealthReading {
        fw_version: hb.get(HealthBuffer::fw_version),
        syndrome: hb.syndrome(),
        ext_synd: hb.get(HealthBuffer::ext_synd),
        counter: HealthCounter::from_bits(bar.read32(HEALTH_COUNTER_OFFSET)).health_counter(),
    }
}

/// The device's free-running clock, `internal_timer_h`:`internal_timer_l`
/// of the initialization segment (ticks of the HCA caps'
/// `device_frequency_khz`): the high word, the low word, the high word
/// again; when the two high words differ the low word wrapped between
/// the reads, and it is read once more to go with the second high word
/// (as Linux's `mlx5_read_internal_timer` does).
pub(crate) fn read_internal_timer<M: Mmio>(bar: &M) -> u64 {
    let h = bar.read32(INTERNAL_TIMER_H_OFFSET).get();
    let mut l = bar.read32(INTERNAL_TIMER_L_OFFSET).get();
    let h1 = bar.read32(INTERNAL_TIMER_H_OFFSET).get();
    if h1 != h {
        l = bar.read32(INTERNAL_TIMER_L_OFFSET).get();
    }
    u64::from(h1) << 32 | u64::from(l)
}

/// The whole health buffer (16 dwords from init segment 0x200), for the
/// report of a fatal error.
pub(crate) fn read_health_buffer<M: Mmio>(bar: &M) -> HealthBuffer {
    let mut image = [0u8; HealthBuffer::SIZE];
    for (k, dword) in image.chunks_exact_mut(4).enumerate() {
        dword.copy_from_slice(&bar.read32(HEALTH_BUFFER_OFFSET + 4 * k).to_bytes());
    }
    HealthBuffer::from_array(image)
}

/// Logs the health buffer of a device found dead with a fatal syndrome,
/// field by field as Linux's `print_health_info` does (`assert_var[i]`,
/// `assert_exit_ptr`, `assert_callra`, `fw_ver`, `hw_id`, `irisc_index`,
/// `synd`, `ext_synd`).
pub(crate) fn log_fatal_health<M: Mmio>(bar: &M, reason: &DeadReason) {
    if !matches!(reason, DeadReason::Fatal { .. }) {
        return;
    }
    let hb = read_health_buffer(bar);
    let vars = hb.get(HealthBuffer::assert_var);
    for (i, v) in vars.chunks_exact(4).enumerate() {
        let v = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        log::error!("health: assert_var[{i}] {v:#010x}");
    }
    log::error!(
        "health: assert_exit_ptr {:#010x}, assert_callra {:#010x}, fw_ver {:#010x}, hw_id {:#010x}, irisc_index {}, synd {}, ext_synd {:#06x}",
        hb.get(HealthBuffer::assert_existptr),
        hb.get(HealthBuffer::assert_callra),
        hb.get(HealthBuffer::fw_version),
        hb.get(HealthBuffer::hw_id),
        hb.get(HealthBuffer::irisc_index),
        hb.syndrome(),
        hb.get(HealthBuffer::ext_synd),
    );
}

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
    use platform::{Be32, Be64};

    /// An init segment in host memory, dword by dword.
    struct InitSeg(spin::Mutex<[u32; (HEALTH_COUNTER_OFFSET + 4) / 4]>);

    impl InitSeg {
        fn new() -> Self {
            Self(spin::Mutex::new([0; (HEALTH_COUNTER_OFFSET + 4) / 4]))
        }
        fn set(&self, off: usize, v: u32) {
            self.0.lock()[off / 4] = v;
        }
    }

    /// An internal timer that advances by `step` ticks at every read of
    /// either word.
    struct Ticking {
        now: spin::Mutex<u64>,
        step: u64,
    }

    impl Mmio for Ticking {
        fn len(&self) -> usize {
            HEALTH_COUNTER_OFFSET + 4
        }
        fn read32(&self, offset: usize) -> Be32 {
            let mut t = self.now.lock();
            let v = *t;
            *t += self.step;
            match offset {
                INTERNAL_TIMER_H_OFFSET => Be32::new((v >> 32) as u32),
                INTERNAL_TIMER_L_OFFSET => Be32::new(v as u32),
                _ => Be32::new(0),
            }
        }
        fn write32(&self, _: usize, _: Be32) {}
        fn write64(&self, _: usize, _: Be64) {}
    }

    #[test]
    fn internal_timer_is_high_then_low_and_survives_a_low_word_wrap() {
        let seg = InitSeg::new();
        seg.set(0x1000, 0x0000_0012);
        seg.set(0x1004, 0x3456_789a);
        assert_eq!(read_internal_timer(&seg), 0x12_3456_789a);
        // The low word wraps between the first high read and the low
        // read: a naive h:l would be 0x5_0000_0002, far behind the clock.
        let t = Ticking {
            now: spin::Mutex::new(0x5_ffff_fffe),
            step: 2,
        };
        // h at 0x5_ffff_fffe (5), l at 0x6_0000_0000 (0), h again at
        // 0x6_0000_0002 (6): differs, l once more at 0x6_0000_0004.
        assert_eq!(read_internal_timer(&t), 0x6_0000_0004);
        // Without a wrap the three reads are h, l, h.
        let t = Ticking {
            now: spin::Mutex::new(0x7_0000_0000),
            step: 1,
        };
        assert_eq!(read_internal_timer(&t), 0x7_0000_0001);
    }

    impl Mmio for InitSeg {
        fn len(&self) -> usize {
            HEALTH_COUNTER_OFFSET + 4
        }
        fn read32(&self, offset: usize) -> Be32 {
            Be32::new(self.0.lock()[offset / 4])
        }
        fn write32(&self, offset: usize, v: Be32) {
            self.set(offset, v.get());
        }
        fn write64(&self, _: usize, _: Be64) {}
    }

    #[test]
    fn the_poll_reads_the_prm_offsets() {
        let seg = InitSeg::new();
        seg.set(0x230, 0x000e_0c04);
        // irisc_index 5, synd 7 (irisc not responding), ext_synd 0x1234.
        seg.set(0x23c, 0x0507_1234);
        // health_syndrome in bits 31:24, the counter in 23:0.
        seg.set(0x1010, 0xab12_3456);
        let r = read_health(&seg);
        assert_eq!(
            r,
            HealthReading {
                fw_version: 0x000e_0c04,
                syndrome: HealthSyndrome(7),
                ext_synd: 0x1234,
                counter: 0x12_3456,
            }
        );
        assert!(matches!(
            r.buffer_verdict(),
            Err(DeadReason::Fatal {
                ext_synd: 0x1234,
                ..
            })
        ));
    }

    #[test]
    fn the_whole_buffer_is_read_field_by_field() {
        let seg = InitSeg::new();
        for (i, off) in (0x200..0x214).step_by(4).enumerate() {
            seg.set(off, 0xa000_0000 + i as u32);
        }
        seg.set(0x220, 0x0012_3450);
        seg.set(0x224, 0x0012_3460);
        seg.set(0x230, 0x000e_0c04);
        seg.set(0x234, 0x0000_020b);
        seg.set(0x23c, 0x0301_0000);
        let hb = read_health_buffer(&seg);
        let vars = hb.get(HealthBuffer::assert_var);
        assert_eq!(&vars[..4], &[0xa0, 0, 0, 0]);
        assert_eq!(&vars[16..], &[0xa0, 0, 0, 4]);
        assert_eq!(hb.get(HealthBuffer::assert_existptr), 0x0012_3450);
        assert_eq!(hb.get(HealthBuffer::assert_callra), 0x0012_3460);
        assert_eq!(hb.get(HealthBuffer::fw_version), 0x000e_0c04);
        assert_eq!(hb.get(HealthBuffer::hw_id), 0x20b);
        assert_eq!(hb.get(HealthBuffer::irisc_index), 3);
        assert_eq!(hb.syndrome(), HealthSyndrome(1));
        log_fatal_health(
            &seg,
            &DeadReason::Fatal {
                syndrome: hb.syndrome(),
                ext_synd: 0,
            },
        );
    }

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
