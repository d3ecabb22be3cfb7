//! Fault injection: what a test can make the emulated device do wrong.
//!
//! Get the handle with [`EmuHca::faults`](crate::EmuHca::faults); every
//! method takes effect from the next device event on.

use std::sync::Arc;

use crate::device::Shared;

/// How [`alloc_dma`](platform::Platform::alloc_dma) of the emulated
/// platform fails (see [`Faults::fail_dma`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DmaFailure {
    /// Nothing fails (removes the rule).
    #[default]
    None,
    /// The next `n` allocations succeed; every one after them fails until
    /// the rule is removed.
    After(u32),
    /// Only the allocation after the next `n` fails (one shot).
    Nth(u32),
    /// Every allocation of more than this many bytes fails.
    Above(usize),
}

/// How to corrupt a command answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputCorruption {
    /// Output mailbox blocks carry a wrong `block_number`.
    BlockNumber,
    /// Output mailbox blocks carry a wrong `token`.
    Token,
    /// Output mailbox blocks carry a wrong `signature` / `ctrl_signature`.
    Signature,
    /// XOR a byte of the output message (offset from the start of the
    /// output, inline bytes included), e.g. `output_num_entries` of
    /// MANAGE_PAGES at 0x8..0xc.
    OutputByte {
        /// Offset in the output message.
        offset: usize,
        /// Value XORed into the byte.
        xor: u8,
    },
    /// The firmware rewrites the entry's `output_length` with this value.
    EntryOutputLength(u32),
    /// The entry's status word comes back with this token instead.
    EntryToken(u8),
    /// The answered entry's `signature` is wrong (only noticeable while
    /// `cmdif_checksum` is on: the firmware then signs its answers).
    EntrySignature,
}

/// Which frames a port drops on transmission (the virtual wire loses
/// them): requests, responses, ACKs and raw frames alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PacketDrop {
    /// Nothing (removes the rule).
    None,
    /// Every frame.
    All,
    /// The next `n` frames, then none.
    Next(u32),
    /// Every `n`-th frame (the `n`-th, `2n`-th, ...; 1 = every frame).
    EveryNth(u32),
    /// Each frame with this probability (0.0 to 1.0), from a generator
    /// seeded by the HCA's seed: reproducible.
    Rate(f64),
}

/// One injected fault rule, as returned by the [`Faults`] method that
/// installed it: [`Faults::hits`] says how many times it took effect, so a
/// test can tell a rule that fired from one that never matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultRule(pub(crate) usize);

/// A port's drop rule and its state.
#[derive(Clone, Debug)]
pub(crate) struct DropRule {
    pub(crate) id: FaultRule,
    pub(crate) policy: PacketDrop,
    pub(crate) seen: u64,
    pub(crate) rng: crate::rng::Rng,
}

impl DropRule {
    /// Whether the next frame is dropped.
    pub(crate) fn hit(&mut self) -> bool {
        self.seen += 1;
        match &mut self.policy {
            PacketDrop::None => false,
            PacketDrop::All => true,
            PacketDrop::Next(n) => {
                if *n > 0 {
                    *n -= 1;
                    true
                } else {
                    false
                }
            }
            PacketDrop::EveryNth(n) => *n > 0 && self.seen % u64::from(*n) == 0,
            PacketDrop::Rate(p) => {
                let x = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                x < *p
            }
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct OpcodeRule {
    pub(crate) id: FaultRule,
    pub(crate) opcode: Option<u16>,
    /// Matching commands still to let through before the rule fires.
    pub(crate) skip: u32,
    /// Fire once, or on every match after `skip`.
    pub(crate) once: bool,
}

impl OpcodeRule {
    /// Whether the rule fires for this command; updates the counters. A
    /// fired one-shot rule is marked dead by returning `(true, true)`.
    pub(crate) fn hit(&mut self, opcode: u16) -> (bool, bool) {
        if self.opcode.is_some_and(|o| o != opcode) {
            return (false, false);
        }
        if self.skip > 0 {
            self.skip -= 1;
            return (false, false);
        }
        (true, self.once)
    }
}

/// A test's function on a port's transmitted frames: may change the frame;
/// returns whether it goes on the wire.
pub(crate) type TapFn = dyn FnMut(&mut Vec<u8>) -> bool + Send;

/// A port's frame tap and its rule id.
#[derive(Clone)]
pub(crate) struct Tap {
    pub(crate) id: FaultRule,
    pub(crate) f: Arc<std::sync::Mutex<TapFn>>,
}

impl core::fmt::Debug for Tap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Tap({:?})", self.id)
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct FaultPlan {
    /// How `alloc_dma` fails, and the rule's id.
    pub(crate) dma: DmaFailure,
    pub(crate) dma_rule: Option<FaultRule>,
    pub(crate) never_complete: Vec<OpcodeRule>,
    pub(crate) fail: Vec<(OpcodeRule, (u8, u32))>,
    pub(crate) corrupt_output: Vec<(OpcodeRule, OutputCorruption)>,
    pub(crate) init_never_clears: bool,
    pub(crate) corrupt_cqe: Vec<(u32, usize, u8, FaultRule)>,
    pub(crate) corrupt_eqe: Vec<(u32, usize, u8, FaultRule)>,
    pub(crate) cq_overrun: Vec<(u32, FaultRule)>,
    /// Packet loss by port.
    pub(crate) drop: std::collections::BTreeMap<u8, DropRule>,
    /// Frame taps by port ([`Faults::tap_frames`]).
    pub(crate) tap: std::collections::BTreeMap<u8, Tap>,
    /// How many times each rule took effect, by [`FaultRule`] id (kept
    /// across [`Faults::clear`], so ids stay unique).
    pub(crate) hits: Vec<u64>,
}

impl FaultPlan {
    /// A new rule id, with no hits yet.
    pub(crate) fn new_rule(&mut self) -> FaultRule {
        self.hits.push(0);
        FaultRule(self.hits.len() - 1)
    }

    /// Counts one hit of a rule.
    pub(crate) fn hit(&mut self, rule: FaultRule) {
        if let Some(h) = self.hits.get_mut(rule.0) {
            *h += 1;
        }
    }

    /// Whether an allocation of `len` bytes fails; updates the rule.
    pub(crate) fn dma_fails(&mut self, len: usize) -> Option<platform::Error> {
        let out = |available| platform::Error::OutOfDmaMemory {
            requested: len,
            available,
        };
        let r = self.dma_rule_fires(len, out);
        if r.is_some() {
            if let Some(id) = self.dma_rule {
                self.hit(id);
            }
        }
        r
    }

    fn dma_rule_fires(
        &mut self,
        len: usize,
        out: impl Fn(usize) -> platform::Error,
    ) -> Option<platform::Error> {
        match self.dma {
            DmaFailure::None => None,
            DmaFailure::After(0) => Some(out(0)),
            DmaFailure::After(n) => {
                self.dma = DmaFailure::After(n - 1);
                None
            }
            DmaFailure::Nth(0) => {
                self.dma = DmaFailure::None;
                Some(out(0))
            }
            DmaFailure::Nth(n) => {
                self.dma = DmaFailure::Nth(n - 1);
                None
            }
            DmaFailure::Above(max) if len > max => Some(out(max)),
            DmaFailure::Above(_) => None,
        }
    }
}

/// Applies the first firing rule of a list (counting its hit in `hits`);
/// removes fired one-shot rules.
pub(crate) fn fire<T: Clone>(
    rules: &mut Vec<(OpcodeRule, T)>,
    hits: &mut [u64],
    opcode: u16,
) -> Option<T> {
    let mut hit = None;
    let mut i = 0;
    while i < rules.len() {
        let (fired, dead) = rules[i].0.hit(opcode);
        if fired && hit.is_none() {
            hit = Some(rules[i].1.clone());
            if let Some(h) = hits.get_mut(rules[i].0.id.0) {
                *h += 1;
            }
            if dead {
                rules.remove(i);
                continue;
            }
        }
        i += 1;
    }
    hit
}

/// The fault-injection handle of one emulated HCA.
#[derive(Clone)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl Faults {
    fn with(&self, f: impl FnOnce(&mut crate::device::Device)) {
        let mut d = self.shared.lock();
        f(&mut d);
        drop(d);
        self.shared.cv.notify_all();
    }

    /// The `nth` next command (1 = the next one) with this opcode (`None`:
    /// any opcode) is never completed: the entry stays owned by firmware.
    pub fn command_never_completes(&self, opcode: Option<u16>, nth: u32) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.never_complete.push(OpcodeRule {
                id,
                opcode,
                skip: nth.saturating_sub(1),
                once: true,
            });
            id
        })
    }

    /// Every command with this opcode fails with `status` and `syndrome`
    /// (without any effect).
    pub fn fail_opcode(&self, opcode: u16, status: u8, syndrome: u32) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.fail.push((
                OpcodeRule {
                    id,
                    opcode: Some(opcode),
                    skip: 0,
                    once: false,
                },
                (status, syndrome),
            ));
            id
        })
    }

    /// Only the `nth` next command with this opcode (1 = the next) fails.
    pub fn fail_opcode_nth(&self, opcode: u16, nth: u32, status: u8, syndrome: u32) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.fail.push((
                OpcodeRule {
                    id,
                    opcode: Some(opcode),
                    skip: nth.saturating_sub(1),
                    once: true,
                },
                (status, syndrome),
            ));
            id
        })
    }

    /// `initializing` (init segment 0x1fc bit 31) never clears from now on.
    pub fn initializing_never_clears(&self) {
        self.with(|d| d.faults.init_never_clears = true)
    }

    /// A fatal firmware error: `health.synd`/`ext_synd` are set, the health
    /// counter stops, and commands are no longer executed.
    pub fn fatal_health(&self, synd: u8, ext_synd: u16) {
        self.with(|d| d.set_fatal(synd, ext_synd))
    }

    /// Surprise removal: every BAR read returns all-ones, writes are lost,
    /// the device does no more DMA.
    pub fn surprise_removal(&self) {
        self.with(|d| d.gone = true)
    }

    /// Surprise removal at device time `at` (virtual time by default):
    /// from then on every BAR read returns all-ones and writes are lost,
    /// as with [`surprise_removal`](Self::surprise_removal) but at a
    /// deterministic point of a wait.
    pub fn surprise_removal_at(&self, at: std::time::Duration) {
        self.with(|d| d.gone_at = Some(at))
    }

    /// The firmware asks at runtime for `num_pages` more pages (positive) or
    /// wants to give `-num_pages` back (negative): a PAGE_REQUEST EQE (event
    /// 0x0b) on the EQ subscribed to it.
    pub fn page_request(&self, num_pages: i32) {
        self.with(|d| d.page_request(num_pages))
    }

    /// Corrupts the answer of the `nth` next command with this opcode
    /// (`None`: any).
    pub fn corrupt_output(
        &self,
        opcode: Option<u16>,
        nth: u32,
        how: OutputCorruption,
    ) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.corrupt_output.push((
                OpcodeRule {
                    id,
                    opcode,
                    skip: nth.saturating_sub(1),
                    once: true,
                },
                how,
            ));
            id
        })
    }

    /// XORs byte `offset` of the next CQE written to CQ `cqn`.
    pub fn corrupt_next_cqe(&self, cqn: u32, offset: usize, xor: u8) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.corrupt_cqe.push((cqn, offset % 64, xor, id));
            id
        })
    }

    /// XORs byte `offset` of the next EQE written to EQ `eqn`.
    pub fn corrupt_next_eqe(&self, eqn: u32, offset: usize, xor: u8) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.corrupt_eqe.push((eqn, offset % 64, xor, id));
            id
        })
    }

    /// The next completion for CQ `cqn` overruns it, as if the consumer
    /// index had not moved: the CQ enters the error state and a CQ error
    /// event (0x04, syndrome 1 = overrun) is posted.
    pub fn cq_overrun(&self, cqn: u32) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.cq_overrun.push((cqn, id));
            id
        })
    }

    /// Frames transmitted by `port` are lost on the wire according to
    /// `policy` (counted in [`Datapath::drops`](crate::Datapath)`.injected`).
    /// An RC requester sees no acknowledgement and retransmits after its
    /// ACK timeout; when its `retry_count` is spent the WQE completes with
    /// "transport retry counter exceeded" (syndrome 0x15).
    /// [`PacketDrop::None`] removes the rule. The returned rule's
    /// [`hits`](Self::hits) count the frames it dropped.
    pub fn drop_packets(&self, port: u8, policy: PacketDrop) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            if policy == PacketDrop::None {
                d.faults.drop.remove(&port);
            } else {
                let rng = crate::rng::Rng::new(d.cfg.seed ^ 0x6472_6f70 ^ u64::from(port));
                d.faults.drop.insert(
                    port,
                    DropRule {
                        id,
                        policy,
                        seen: 0,
                        rng,
                    },
                );
            }
            id
        })
    }

    /// Calls `tap` with every frame `port` transmits, before the wire
    /// (and the [`drop_packets`](Self::drop_packets) rule) takes it: a
    /// test sees the frames exactly as the port puts them on the wire, may
    /// change them (a corrupted byte, as on a noisy link), and returns
    /// whether the frame goes on (`false`: lost, counted in
    /// [`Drops::injected`](crate::Drops) and in the returned rule's
    /// [`hits`](Self::hits)). Replaces an earlier tap of the port;
    /// [`untap_frames`](Self::untap_frames) removes it. `tap` runs while
    /// the device is busy: it must not call into the emulator.
    pub fn tap_frames(
        &self,
        port: u8,
        tap: impl FnMut(&mut Vec<u8>) -> bool + Send + 'static,
    ) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            let f: Arc<std::sync::Mutex<TapFn>> = Arc::new(std::sync::Mutex::new(tap));
            d.faults.tap.insert(port, Tap { id, f });
            id
        })
    }

    /// Removes the frame tap of `port` ([`tap_frames`](Self::tap_frames)).
    pub fn untap_frames(&self, port: u8) {
        self.with(|d| {
            d.faults.tap.remove(&port);
        });
    }

    /// Makes `alloc_dma` of the emulated platform fail with
    /// [`platform::Error::OutOfDmaMemory`] as `rule` says
    /// ([`DmaFailure::None`] removes the rule). Failed attempts are counted
    /// in [`EmuHca::dma_allocations`](crate::EmuHca::dma_allocations).
    pub fn fail_dma(&self, rule: DmaFailure) -> FaultRule {
        self.with_result(|d| {
            let id = d.faults.new_rule();
            d.faults.dma = rule;
            d.faults.dma_rule = Some(id);
            id
        })
    }

    /// How many times `rule` took effect so far: commands it failed,
    /// never completed or corrupted, CQEs/EQEs it corrupted, overruns it
    /// forced, frames it dropped, allocations it failed. A rule removed by
    /// [`clear`](Self::clear), replaced, or spent keeps its count.
    pub fn hits(&self, rule: FaultRule) -> u64 {
        self.shared
            .lock()
            .faults
            .hits
            .get(rule.0)
            .copied()
            .unwrap_or(0)
    }

    /// An affiliated event of QP `qpn` (`qp_events` data with resource type
    /// 0, QP) on the EQ subscribed to `event_type`, as the firmware raises
    /// it. The work queue errors — WQ catastrophic error (0x05), invalid
    /// request local WQ error (0x10), local access violation WQ error
    /// (0x11) — first move the QP to the error state (everything posted
    /// completes with flush errors; a QP on an SRQ raises last WQE reached
    /// (0x13) once); path migrated (0x01), communication established
    /// (0x02), SQ drained (0x03), path migration failed (0x07) and last WQE
    /// reached (0x13) only post the event.
    ///
    /// Returns whether an EQ took the event (`false`: no EQ subscribes to
    /// it, or the EQ overran). [`EmuError::NoSuchObject`] for a QP that does
    /// not exist, [`EmuError::NotAnEvent`] for another event type.
    ///
    /// [`EmuError::NoSuchObject`]: crate::EmuError::NoSuchObject
    /// [`EmuError::NotAnEvent`]: crate::EmuError::NotAnEvent
    pub fn qp_event(&self, qpn: u32, event_type: u8) -> Result<bool, crate::EmuError> {
        self.with_result(|d| d.inject_qp_event(qpn, event_type))
    }

    /// An event of SRQ `srqn` (`qp_events` data with the SRQ number): SRQ
    /// catastrophic error (0x12; the SRQ context's state becomes error,
    /// which QUERY_SRQ shows) or SRQ limit reached (0x14; the limit is
    /// disarmed, as when the data path raises it). Returns whether an EQ
    /// took it; errors as for [`qp_event`](Self::qp_event).
    pub fn srq_event(&self, srqn: u32, event_type: u8) -> Result<bool, crate::EmuError> {
        self.with_result(|d| d.inject_srq_event(srqn, event_type))
    }

    /// A work queue error of a raw Ethernet SQ or RQ (`kind` is
    /// [`ObjKind::Sq`] or [`ObjKind::Rq`]; `qp_events` data with resource
    /// type 2 or 1): WQ catastrophic error (0x05), invalid request (0x10)
    /// or local access violation (0x11). The queue moves to the error state
    /// (3) first. Returns whether an EQ took the event; errors as for
    /// [`qp_event`](Self::qp_event).
    ///
    /// [`ObjKind::Sq`]: crate::ObjKind::Sq
    /// [`ObjKind::Rq`]: crate::ObjKind::Rq
    pub fn wq_event(
        &self,
        kind: crate::ObjKind,
        n: u32,
        event_type: u8,
    ) -> Result<bool, crate::EmuError> {
        self.with_result(|d| d.inject_wq_event(kind, n, event_type))
    }

    /// An internal error event (0x08, no event data) on the EQ subscribed
    /// to it. On its own the health buffer stays clean (a driver that looks
    /// finds no syndrome); with [`fatal_health`](Self::fatal_health) first
    /// it reports a fatal error. Returns whether an EQ took it.
    pub fn internal_error_event(&self) -> bool {
        self.with_result(|d| d.inject_internal_error())
    }

    fn with_result<T>(&self, f: impl FnOnce(&mut crate::device::Device) -> T) -> T {
        let mut d = self.shared.lock();
        let r = f(&mut d);
        drop(d);
        self.shared.cv.notify_all();
        r
    }

    /// Removes every pending injected fault (a fatal error or surprise
    /// removal stays until `reset_function`).
    pub fn clear(&self) {
        self.with(|d| {
            let hits = std::mem::take(&mut d.faults.hits);
            d.faults = FaultPlan {
                hits,
                ..FaultPlan::default()
            };
        })
    }
}
