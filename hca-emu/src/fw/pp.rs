//! Packet pacing: the rate-limit table SET_PP_RATE_LIMIT writes, and the
//! checks of the SQ context's `packet_pacing_rate_limit_index` (CREATE_SQ,
//! MODIFY_SQ). The pacing itself runs in the raw SQ engine
//! (`datapath/raw.rs`).
//!
//! A device paces when `cmd_hca_cap.qos` and `qos_cap.packet_pacing` are
//! set (Linux `mlx5_rl_is_supported`). Its table has
//! `qos_cap.packet_pacing_rate_table_size` entries; index 0 means "not
//! paced" and is never set (Linux `mlx5_rl` hands out 1 ..= size - 1).

use std::sync::OnceLock;

use super::objects::ObjData;
use super::{Cmd, Fail, ObjKind, R, fail, st};
use crate::device::Device;
use crate::ifc::{Field, get_bits, ifc};
use crate::syndrome as syn;

/// One set entry of the device's rate-limit table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// `rate_limit`: the rate, kbit/s (never 0: 0 clears the entry).
    pub rate_limit: u32,
    /// `burst_upper_bound`: bytes a paced SQ may send at once beyond its
    /// rate (0: one frame). Kept 0 when the device lacks
    /// `qos_cap.packet_pacing_burst_bound`.
    pub burst_upper_bound: u32,
    /// `typical_packet_size`, bytes (0: none); kept 0 without
    /// `qos_cap.packet_pacing_typical_size`. Stored, not used by the pacing.
    pub typical_packet_size: u16,
}

/// `sqc.packet_pacing_rate_limit_index` of an SQ context (read on every
/// raw SQ doorbell: two bytes where the layout table puts them).
pub(crate) fn sq_pp_index(sqc: &[u8]) -> u16 {
    static F: OnceLock<Field> = OnceLock::new();
    let f = *F.get_or_init(|| ifc().field("sqc", "packet_pacing_rate_limit_index"));
    if f.offset % 8 == 0 && f.width == 16 {
        let o = f.offset / 8;
        match sqc.get(o..o + 2) {
            Some(b) => u16::from_be_bytes([b[0], b[1]]),
            None => 0,
        }
    } else {
        get_bits(sqc, f) as u16
    }
}

impl Device {
    /// Whether an SQ in RDY is paced by table entry `index`.
    fn rdy_sq_paced_by(&self, index: u16) -> bool {
        self.fw.objs.of(ObjKind::Sq).any(|(_, o)| {
            matches!(&o.data, ObjData::Wq(w) if w.state == 1 && sq_pp_index(&w.ctx) == index)
        })
    }

    /// CREATE_SQ / MODIFY_SQ: `packet_pacing_rate_limit_index` must be 0
    /// (not paced) or a set entry of the table, on a device that paces.
    pub(crate) fn check_sq_pp_index(&self, index: u16) -> Result<(), Fail> {
        if index == 0 {
            return Ok(());
        }
        if !self.fw.caps.packet_pacing() {
            return fail(st::BAD_PARAM, syn::WQ_PP_UNSUPPORTED);
        }
        if !self.fw.rate_limits.contains_key(&index) {
            return fail(st::BAD_PARAM, syn::WQ_PP_INDEX);
        }
        Ok(())
    }
}

/// Whether the device has SET_PP_RATE_LIMIT (it paces).
pub(crate) fn has_packet_pacing(d: &Device) -> bool {
    d.fw.caps.packet_pacing()
}

/// SET_PP_RATE_LIMIT: sets (or with `rate_limit` 0 clears) one entry of
/// the rate-limit table.
pub(crate) fn set_pp_rate_limit(d: &mut Device, c: &Cmd) -> R {
    let caps = &d.fw.caps;
    let index = c.get("rate_limit_index") as u16;
    let size = caps.qos("packet_pacing_rate_table_size");
    if index == 0 || u64::from(index) >= size {
        return fail(st::BAD_PARAM, syn::PP_INDEX);
    }
    let rate = c.get("rate_limit") as u32;
    if rate == 0 {
        if d.rdy_sq_paced_by(index) {
            return fail(st::BAD_RES_STATE, syn::PP_IN_USE);
        }
        d.fw.rate_limits.remove(&index);
    } else {
        let min = caps.qos("packet_pacing_min_rate");
        let max = caps.qos("packet_pacing_max_rate");
        if u64::from(rate) < min || u64::from(rate) > max {
            return fail(st::BAD_PARAM, syn::PP_RATE);
        }
        let burst = if caps.qos("packet_pacing_burst_bound") == 1 {
            c.get("burst_upper_bound") as u32
        } else {
            0
        };
        let typical = if caps.qos("packet_pacing_typical_size") == 1 {
            c.get("typical_packet_size") as u16
        } else {
            0
        };
        d.fw.rate_limits.insert(
            index,
            RateLimit {
                rate_limit: rate,
                burst_upper_bound: burst,
                typical_packet_size: typical,
            },
        );
    }
    d.raw_pace_entry_changed(index);
    c.out().done()
}
