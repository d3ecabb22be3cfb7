//! Packet pacing: the device's rate-limit table, which paces send queues.
//!
//! A device that paces (`cmd_hca_cap.qos` and `qos_cap.packet_pacing`)
//! holds a table of `packet_pacing_rate_table_size` rates; an SQ whose
//! `sqc.packet_pacing_rate_limit_index` names an entry sends no faster than
//! its rate, and index 0 means "not paced". SET_PP_RATE_LIMIT writes an
//! entry (rate 0 clears it).
//!
//! The driver shares entries as Linux's `mlx5_rl` does (read for facts):
//! SQs paced at the same parameters use one entry, counted; an entry is
//! written when its first user comes and cleared when its last one goes.
//! Verbs users reach it through a raw packet QP's rate limit
//! ([`QpAttr::rate_limit`](crate::verbs::QpAttr::rate_limit),
//! [`Qp::set_rate_limit`](crate::verbs::Qp::set_rate_limit)).

use firmware_cmds::caps::QosCap;
use firmware_cmds::pp::SetPpRateLimitIn;
use platform::Platform;

use crate::error::{Error, Result};
use crate::hca::Hca;
use crate::info::Caps;

/// Table entries the driver manages: indices 1 ..= `MAX_RATE_ENTRIES` of
/// a larger table stay unused (Linux's ConnectX-5 table has 128 entries,
/// 127 usable).
pub const MAX_RATE_ENTRIES: usize = 127;

/// What [`Error::CapacityExceeded`] names for a full rate-limit table
/// (Linux answers `ENOSPC` there, not `ENOMEM`).
pub const RATE_TABLE: &str = "packet pacing rate table";

/// A device's packet pacing capabilities (`qos_cap`, current), as
/// `ibv_query_device_ex` reports them in `packet_pacing_caps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketPacingCaps {
    /// `packet_pacing_min_rate`, kbit/s (`qp_rate_limit_min`).
    pub min_rate_kbps: u32,
    /// `packet_pacing_max_rate`, kbit/s (`qp_rate_limit_max`).
    pub max_rate_kbps: u32,
    /// `packet_pacing_rate_table_size`: the table's entries, index 0
    /// ("not paced") included.
    pub table_size: u16,
    /// `packet_pacing_burst_bound`: a rate may bound its bursts
    /// ([`RateLimit::max_burst_bytes`]).
    pub burst_bound: bool,
    /// `packet_pacing_typical_size`: a rate may name its typical packet
    /// size ([`RateLimit::typical_packet_bytes`]).
    pub typical_size: bool,
}

impl PacketPacingCaps {
    /// The capabilities `caps` describe; `None` when the device does not
    /// pace (no `qos`, or `qos_cap.packet_pacing` 0).
    pub fn from_caps(caps: &Caps) -> Option<Self> {
        let q = &caps.qos.as_ref()?.cur;
        if !q.get(QosCap::packet_pacing) {
            return None;
        }
        Some(Self {
            min_rate_kbps: q.get(QosCap::packet_pacing_min_rate),
            max_rate_kbps: q.get(QosCap::packet_pacing_max_rate),
            table_size: q.get(QosCap::packet_pacing_rate_table_size),
            burst_bound: q.get(QosCap::packet_pacing_burst_bound),
            typical_size: q.get(QosCap::packet_pacing_typical_size),
        })
    }

    /// Table entries usable for rates: all but index 0, at most
    /// [`MAX_RATE_ENTRIES`].
    pub fn usable_entries(&self) -> usize {
        usize::from(self.table_size.saturating_sub(1)).min(MAX_RATE_ENTRIES)
    }

    /// Checks `rl` against these capabilities (a rate of 0, "not paced",
    /// passes).
    pub fn check(&self, rl: &RateLimit) -> Result<()> {
        if rl.rate_kbps == 0 {
            return Ok(());
        }
        if rl.rate_kbps < self.min_rate_kbps || rl.rate_kbps > self.max_rate_kbps {
            return Err(Error::InvalidAttribute {
                attr: "rate_limit",
                value: u64::from(rl.rate_kbps),
                reason: "outside the device's packet_pacing_min_rate ..= packet_pacing_max_rate (kbit/s)",
            });
        }
        if rl.max_burst_bytes != 0 && !self.burst_bound {
            return Err(Error::InvalidAttribute {
                attr: "max_burst_sz",
                value: u64::from(rl.max_burst_bytes),
                reason: "the device has no packet_pacing_burst_bound",
            });
        }
        if rl.typical_packet_bytes != 0 && !self.typical_size {
            return Err(Error::InvalidAttribute {
                attr: "typical_pkt_sz",
                value: u64::from(rl.typical_packet_bytes),
                reason: "the device has no packet_pacing_typical_size",
            });
        }
        Ok(())
    }
}

/// A send rate (`struct ibv_qp_rate_limit_attr`): the parameters of one
/// rate-limit table entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// The rate, kbit/s (`rate_limit`); 0: not paced.
    pub rate_kbps: u32,
    /// Burst bound, bytes (`max_burst_sz`, SET_PP_RATE_LIMIT's
    /// `burst_upper_bound`); 0: the device's default.
    pub max_burst_bytes: u32,
    /// Typical packet size, bytes (`typical_pkt_sz`); 0: none.
    pub typical_packet_bytes: u16,
}

impl RateLimit {
    /// `rate_kbps` kbit/s, the device's default burst, no typical size.
    pub const fn kbps(rate_kbps: u32) -> Self {
        Self {
            rate_kbps,
            max_burst_bytes: 0,
            typical_packet_bytes: 0,
        }
    }
}

/// One entry of the driver's view of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Unused.
    Free,
    /// A SET_PP_RATE_LIMIT for it is in flight.
    Busy,
    /// Written with `rl`, used by `users` SQs.
    Set { rl: RateLimit, users: u32 },
    /// Its clearing command failed: what the device holds there is not
    /// known, so the entry is never handed out again.
    Lost,
}

/// The entries in use, slot `i` being table index `i + 1`.
#[derive(Debug, Default)]
pub(crate) struct RateTable {
    caps: Option<PacketPacingCaps>,
    slots: heapless::Vec<Slot, MAX_RATE_ENTRIES>,
}

impl RateTable {
    /// An empty table for the device `caps` describe.
    pub(crate) fn for_caps(caps: &Caps) -> Self {
        let caps = PacketPacingCaps::from_caps(caps);
        let mut slots = heapless::Vec::new();
        for _ in 0..caps.map_or(0, |c| c.usable_entries()) {
            let _ = slots.push(Slot::Free);
        }
        Self { caps, slots }
    }
}

/// Table index `i` (1-based) of slot `s`.
fn index_of(s: usize) -> u16 {
    (s + 1) as u16
}

impl<P: Platform> Hca<P> {
    /// The device's packet pacing capabilities; `None` when it does not
    /// pace (the recorded ConnectX-4 does not: its `cmd_hca_cap.qos` is 0).
    pub fn packet_pacing(&self) -> Option<PacketPacingCaps> {
        self.rates.lock().caps
    }

    /// The rate-limit table entries in use: `(index, rate, SQs using it)`.
    pub fn rate_table(&self) -> heapless::Vec<(u16, RateLimit, u32), MAX_RATE_ENTRIES> {
        let t = self.rates.lock();
        let mut v = heapless::Vec::new();
        for (i, s) in t.slots.iter().enumerate() {
            if let Slot::Set { rl, users } = *s {
                let _ = v.push((index_of(i), rl, users));
            }
        }
        v
    }

    /// The table index for `rl` (a non-zero rate): an entry already set
    /// to the same parameters gains a user; otherwise a free entry is
    /// written (SET_PP_RATE_LIMIT). Typed errors, before any command: no
    /// packet pacing ([`Error::Unsupported`]), parameters the device does
    /// not take ([`Error::InvalidAttribute`]), a full table
    /// ([`Error::CapacityExceeded`]). Every index returned is given back
    /// with [`release_rate`](Self::release_rate).
    pub(crate) fn acquire_rate(&self, rl: RateLimit) -> Result<u16> {
        let slot = {
            let mut t = self.rates.lock();
            let caps = t.caps.ok_or(Error::Unsupported(
                "packet pacing (qos_cap.packet_pacing is 0)",
            ))?;
            if rl.rate_kbps == 0 {
                return Err(Error::InvalidAttribute {
                    attr: "rate_limit",
                    value: 0,
                    reason: "rate 0 is no pacing, it has no table entry",
                });
            }
            caps.check(&rl)?;
            if let Some((i, Slot::Set { users, .. })) = t
                .slots
                .iter_mut()
                .enumerate()
                .find(|(_, s)| matches!(s, Slot::Set { rl: r, .. } if *r == rl))
            {
                *users += 1;
                return Ok(index_of(i));
            }
            let capacity = t.slots.len();
            let Some(i) = t.slots.iter().position(|s| *s == Slot::Free) else {
                return Err(Error::CapacityExceeded {
                    what: RATE_TABLE,
                    capacity,
                });
            };
            t.slots[i] = Slot::Busy;
            i
        };
        let set = SetPpRateLimitIn::new()
            .with(SetPpRateLimitIn::rate_limit_index, index_of(slot))
            .and_then(|c| c.with(SetPpRateLimitIn::rate_limit, rl.rate_kbps))
            .and_then(|c| c.with(SetPpRateLimitIn::burst_upper_bound, rl.max_burst_bytes))
            .and_then(|c| {
                c.with(
                    SetPpRateLimitIn::typical_packet_size,
                    rl.typical_packet_bytes,
                )
            })
            .map_err(Error::from);
        let r = set.and_then(|c| self.exec(&c));
        let mut t = self.rates.lock();
        match r {
            Ok(_) => {
                t.slots[slot] = Slot::Set { rl, users: 1 };
                Ok(index_of(slot))
            }
            Err(e) => {
                // A refused write leaves the entry as it was: cleared.
                t.slots[slot] = Slot::Free;
                Err(e)
            }
        }
    }

    /// Gives back a user of table `index` (from
    /// [`acquire_rate`](Self::acquire_rate)); the last one clears the
    /// entry (SET_PP_RATE_LIMIT with rate 0). An index the driver does not
    /// hold is ignored (logged).
    pub(crate) fn release_rate(&self, index: u16) {
        let slot = {
            let mut t = self.rates.lock();
            let Some(s) = usize::from(index)
                .checked_sub(1)
                .filter(|&s| s < t.slots.len())
            else {
                log::error!("packet pacing: release of rate index {index}, not a table entry");
                return;
            };
            match &mut t.slots[s] {
                Slot::Set { users, .. } if *users > 1 => {
                    *users -= 1;
                    return;
                }
                Slot::Set { .. } => {}
                other => {
                    log::error!("packet pacing: release of rate index {index}, which is {other:?}");
                    return;
                }
            }
            t.slots[s] = Slot::Busy;
            s
        };
        let r = SetPpRateLimitIn::new()
            .with(SetPpRateLimitIn::rate_limit_index, index)
            .map_err(Error::from)
            .and_then(|c| self.exec(&c));
        let mut t = self.rates.lock();
        t.slots[slot] = match r {
            Ok(_) => Slot::Free,
            Err(e) => {
                log::error!("packet pacing: clearing rate index {index}: {e}");
                Slot::Lost
            }
        };
    }
}
