//! The health buffer and the init-segment words the driver reads while it
//! waits and polls: 64 bytes of `health_buffer`, then the `health_counter`,
//! `initializing`, `fw_rev` and `cmdif_rev_fw_sub` dwords, then a sequence
//! of polls for hca-driver's health monitor (`fw_version`, syndrome dword
//! and health counter, 12 bytes each; the first two bytes of the sequence
//! are the time between polls and the poll period, in milliseconds).
#![no_main]

use firmware_cmds::init_seg::{
    CmdifRevFwSub, FwVersion, HealthBuffer, HealthCounter, HealthSyndrome, Initializing,
};
use firmware_cmds::layout::Layout;
use hca_driver::HealthReading;
use libfuzzer_sys::fuzz_target;
use mlx5_fuzz::walk_layout;
use platform::Be32;

fn word(b: &[u8], i: usize) -> u32 {
    b.get(4 * i..4 * i + 4)
        .map_or(0, |w| u32::from_be_bytes(w.try_into().expect("4 bytes")))
}

fuzz_target!(|data: &[u8]| {
    let Ok(h) = HealthBuffer::decode(data.get(..0x40).unwrap_or(data)) else {
        return;
    };
    let s = h.syndrome();
    let _ = (
        s.name(),
        s.is_error(),
        format!("{s:?} {s}"),
        h.device_gone(),
    );
    std::hint::black_box(walk_layout(&HealthBuffer::INFO, h.as_bytes(), None));
    let rest = data.get(0x40..).unwrap_or(&[]);
    let counter = HealthCounter::from_bits(Be32::new(word(rest, 0)));
    let init = Initializing::from_bits(Be32::new(word(rest, 1)));
    let _ = (
        init.initializing(),
        init.fw_reset_supported(),
        init.nic_interface_supported(),
    );
    let v = FwVersion::from_words(word(rest, 2), word(rest, 3));
    let _ = (
        v.to_string(),
        CmdifRevFwSub::from_bits(Be32::new(word(rest, 3))).cmd_interface_rev(),
    );
    let r = HealthReading {
        fw_version: h.get(HealthBuffer::fw_version),
        syndrome: HealthSyndrome(h.get(HealthBuffer::synd)),
        ext_synd: h.get(HealthBuffer::ext_synd),
        counter: counter.health_counter(),
    };
    if let Err(d) = r.buffer_verdict() {
        let _ = d.to_string();
    }
    if let [step, period, polls @ ..] = rest.get(16..).unwrap_or(&[]) {
        let v = hca_driver::fuzzing::health_polls(
            polls,
            u16::from(*step) * 100,
            u16::from(*period) * 100,
        );
        let _ = std::hint::black_box(v.map_err(|e| e.to_string()));
    }
});
