//! `hca health`: the health buffer, the health counter (read twice) and the
//! firmware version, read from the initialization segment directly. No
//! command is sent and nothing is brought up, so it works on a device whose
//! bring-up fails.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use firmware_cmds::endian::Be32;
use firmware_cmds::init_seg::{
    CMDIF_REV_FW_SUB_OFFSET, CMDQ_ADDR_L_SZ_OFFSET, CmdifRevFwSub, CmdqAddrLSz, FW_REV_OFFSET,
    FwVersion, HEALTH_BUFFER_OFFSET, HEALTH_COUNTER_OFFSET, HEALTH_FW_VERSION_GONE, HealthBuffer,
    HealthCounter, HealthSyndrome, INITIALIZING_OFFSET, Initializing,
};
use firmware_cmds::layout::Layout;
use platform::{Mmio, Platform};
use serde::{Serialize, Serializer};

use crate::decode::{self, Fields, Node, TextStyle};
use crate::device::{BareDevice, DeviceDesc, OpenOptions, Selection, ToolPlatform};
use crate::error::Result;
use crate::output::json;
use crate::progress::Progress;

/// Exit code when the device is unhealthy (gone, fatal syndrome, stalled
/// firmware); the report is printed all the same.
pub const EXIT_UNHEALTHY: u8 = 3;

/// Arguments of `hca health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Time between the two reads of the health counter, in milliseconds
    /// (firmware updates it well within the 2 s health poll period).
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    interval: u64,
}

fn ser_fields<S: Serializer>(nodes: &[Node], s: S) -> std::result::Result<S::Ok, S::Error> {
    Fields(nodes).serialize(s)
}

/// What `hca health` found.
#[derive(Debug, Serialize)]
pub struct HealthReport {
    /// The device.
    pub device: String,
    /// Firmware version from `fw_rev` / `cmdif_rev_fw_sub`.
    pub fw_ver: String,
    /// Command interface revision (5).
    pub cmdif_rev: u16,
    /// The `initializing` bit: the firmware is busy.
    pub initializing: bool,
    /// `nic_interface` of `cmdq_addr_l_sz`.
    pub nic_interface: u8,
    /// Every field of the health buffer by PRM name.
    #[serde(serialize_with = "ser_fields")]
    pub health_buffer: Vec<Node>,
    /// `health_buffer.synd`.
    pub syndrome: u8,
    /// Its name (`null` for 0 or an undefined syndrome).
    pub syndrome_name: Option<&'static str>,
    /// `health_buffer.ext_synd`.
    pub ext_synd: u16,
    /// The two readings of `health_counter` (24 bits).
    pub health_counter: [u32; 2],
    /// Milliseconds between the readings.
    pub interval_ms: u64,
    /// `virtual` on the emulator (its clock is virtual: the interval passes
    /// at once, no real time), `real` on a device.
    pub clock: &'static str,
    /// Whether the counter changed between the readings.
    pub counter_advancing: bool,
    /// Whether the device looks healthy.
    pub healthy: bool,
    /// The verdict in words.
    pub verdict: String,
}

fn read_block<M: Mmio>(bar: &M, offset: usize, len: usize) -> Vec<u8> {
    (0..len / 4)
        .flat_map(|i| bar.read32(offset + 4 * i).get().to_be_bytes())
        .collect()
}

/// Maps BAR0 of `p` and judges its health registers.
fn health(p: &ToolPlatform, dev: &DeviceDesc, interval: Duration) -> Result<HealthReport> {
    let bar = p.map_bar(0)?;
    Ok(read_health(p, &bar, dev, interval))
}

/// Reads the registers and judges them.
fn read_health<P: Platform, M: Mmio>(
    p: &P,
    bar: &M,
    dev: &DeviceDesc,
    interval: Duration,
) -> HealthReport {
    let counter =
        |b: &M| HealthCounter::from_bits(b.read32(HEALTH_COUNTER_OFFSET)).health_counter();
    let c0 = counter(bar);
    {
        let _progress = Progress::start(&format!(
            "reading the health counter again in {} ms",
            interval.as_millis()
        ));
        p.delay(interval);
    }
    let fw_rev = bar.read32(FW_REV_OFFSET).get();
    let sub = bar.read32(CMDIF_REV_FW_SUB_OFFSET).get();
    let fw = FwVersion::from_words(fw_rev, sub);
    let cmdif_rev = CmdifRevFwSub::from_bits(Be32::new(sub)).cmd_interface_rev();
    let init = Initializing::from_bits(bar.read32(INITIALIZING_OFFSET));
    let addr_l = CmdqAddrLSz::from_bits(bar.read32(CMDQ_ADDR_L_SZ_OFFSET));
    let image = read_block(bar, HEALTH_BUFFER_OFFSET, HealthBuffer::SIZE);
    let hb = HealthBuffer::decode(&image).unwrap_or_default();
    let c1 = counter(bar);
    let syndrome = hb.syndrome();
    let gone = hb.get(HealthBuffer::fw_version) == HEALTH_FW_VERSION_GONE;
    let advancing = c0 != c1;
    let (healthy, verdict) = if gone {
        (
            false,
            "device is gone: the health buffer's fw_version reads 0xffffffff (surprise removal or PCI error)".to_string(),
        )
    } else if syndrome.is_error() {
        (
            false,
            format!(
                "firmware fatal error: health syndrome {syndrome}, ext_synd {:#x}",
                hb.get(HealthBuffer::ext_synd)
            ),
        )
    } else if !advancing {
        (
            false,
            format!(
                "firmware may be stuck: the health counter stayed at {c0:#x} for {} ms",
                interval.as_millis()
            ),
        )
    } else if init.initializing() {
        (
            true,
            "healthy; the firmware is still initializing".to_string(),
        )
    } else {
        (true, "healthy".to_string())
    };
    HealthReport {
        device: dev.describe.clone(),
        fw_ver: fw.to_string(),
        cmdif_rev,
        initializing: init.initializing(),
        nic_interface: addr_l.nic_interface(),
        health_buffer: decode::decode(&HealthBuffer::INFO, hb.bytes(), None),
        syndrome: syndrome.0,
        syndrome_name: syndrome.name(),
        ext_synd: hb.get(HealthBuffer::ext_synd),
        health_counter: [c0, c1],
        interval_ms: interval.as_millis() as u64,
        clock: if dev.selection == Selection::Emulator {
            "virtual"
        } else {
            "real"
        },
        counter_advancing: advancing,
        healthy,
        verdict,
    }
}

/// Writes the report as text.
pub fn write_text(r: &HealthReport, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "device:          {}", r.device)?;
    writeln!(
        out,
        "fw_ver:          {} (cmdif_rev {})",
        r.fw_ver, r.cmdif_rev
    )?;
    writeln!(out, "initializing:    {}", u8::from(r.initializing))?;
    writeln!(out, "nic_interface:   {}", r.nic_interface)?;
    writeln!(
        out,
        "health buffer (init segment {HEALTH_BUFFER_OFFSET:#x}):"
    )?;
    decode::write_text(
        out,
        &r.health_buffer,
        2,
        TextStyle {
            zeros: true,
            max_elements: 8,
        },
    )?;
    writeln!(out, "syndrome:        {}", HealthSyndrome(r.syndrome))?;
    writeln!(
        out,
        "health_counter:  {:#x} -> {:#x} after {} ms{} ({})",
        r.health_counter[0],
        r.health_counter[1],
        r.interval_ms,
        if r.clock == "virtual" {
            " of the emulator's virtual clock (no real time passes)"
        } else {
            ""
        },
        if r.counter_advancing {
            "advancing"
        } else {
            "not advancing"
        }
    )?;
    writeln!(out, "verdict:         {}", r.verdict)?;
    Ok(())
}

/// `hca health`.
pub fn run(
    a: &HealthArgs,
    sel: &Selection,
    open: &OpenOptions,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<ExitCode> {
    let dev = BareDevice::open(sel, open)?;
    let r = health(
        dev.platform(),
        dev.desc(),
        Duration::from_millis(a.interval),
    );
    let report = dev.finish(r)?;
    if as_json {
        json(out, &report)?;
    } else {
        write_text(&report, out)?;
    }
    Ok(if report.healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_UNHEALTHY)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Selection;
    use hca_emu::{EmuConfig, EmuHca};

    fn desc() -> DeviceDesc {
        DeviceDesc {
            selection: Selection::Emulator,
            describe: "test".into(),
        }
    }

    #[test]
    fn the_emulated_device_reads_healthy_and_its_counter_runs() {
        let emu = EmuHca::new(EmuConfig::default());
        let p = emu.platform();
        let bar = p.map_bar(0).unwrap();
        let r = read_health(&p, &bar, &desc(), Duration::from_millis(500));
        assert!(r.healthy, "{}", r.verdict);
        assert!(r.counter_advancing);
        assert_eq!(r.fw_ver, "14.12.1220");
        assert_eq!(r.cmdif_rev, 5);
        assert_eq!(r.syndrome, 0);
        // The emulator's clock is virtual, and the report says so.
        assert_eq!(r.clock, "virtual");
        let mut text = Vec::new();
        write_text(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("after 500 ms of the emulator's virtual clock (no real time passes)"),
            "{text}"
        );
        let real = DeviceDesc {
            selection: Selection::Vfio("0000:02:00.0".into()),
            describe: "test".into(),
        };
        let r = read_health(&p, &bar, &real, Duration::from_millis(500));
        assert_eq!(r.clock, "real");
        let mut text = Vec::new();
        write_text(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("after 500 ms (advancing)"), "{text}");
    }

    #[test]
    fn a_fatal_syndrome_and_a_removed_device_are_named() {
        let emu = EmuHca::new(EmuConfig::default());
        let p = emu.platform();
        let bar = p.map_bar(0).unwrap();
        emu.faults().fatal_health(0x0b, 0x42);
        let r = read_health(&p, &bar, &desc(), Duration::from_millis(500));
        assert!(!r.healthy);
        assert_eq!(r.syndrome, 0x0b);
        assert_eq!(r.syndrome_name, Some("HW fatal error"));
        assert_eq!(r.ext_synd, 0x42);
        assert!(r.verdict.contains("HW fatal error(0xb)"), "{}", r.verdict);
        let mut text = Vec::new();
        write_text(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("syndrome:        HW fatal error(0xb)"),
            "{text}"
        );
        assert!(text.contains("  synd: 11 (0xb)"), "{text}");

        emu.faults().surprise_removal();
        let r = read_health(&p, &bar, &desc(), Duration::from_millis(500));
        assert!(!r.healthy);
        assert!(r.verdict.starts_with("device is gone"), "{}", r.verdict);
    }
}
