//! MSI-X interrupts: the vector of each EQ, the waits that sleep on them,
//! and the counters that tell sleeping from polling.
//!
//! With [`WaitMode::Interrupts`] on a platform that has MSI-X vectors, the
//! driver enables `1 + comp_eqs` vectors (fewer if the platform offers
//! fewer) before it creates the EQs. As in Linux (`mlx5_eq_table`), the
//! command EQ and the asynchronous EQ share vector 0 and completion EQ `i`
//! takes vector `1 + i` (vectors are shared round-robin when there are not
//! enough). An EQ raises its vector's interrupt for the first EQE written
//! after it was armed; the driver arms it at creation and after each batch
//! of entries it consumes. A wait reads the vector's interrupt count, looks
//! at the device (EQ, CQ), and sleeps with that count
//! ([`Platform::wait_interrupt`]): an interrupt in between ends the sleep at
//! once.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use platform::Platform;

use crate::config::WaitMode;
use crate::eq::EqKind;
use crate::error::{Error, Result};
use crate::hca::Hca;
use crate::types::Eqn;

/// The driver's interrupt state.
#[derive(Default)]
pub(crate) struct IrqState {
    /// Vectors enabled (0: the driver polls).
    pub(crate) vectors: u16,
    wakeups: AtomicU64,
    idle: AtomicU64,
    polls: AtomicU64,
}

/// How the driver's waits went: sleeps ended by an interrupt, sleeps that
/// ran to their time limit, and polling steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterruptStats {
    /// How the driver waits ([`WaitMode::Polling`] also when interrupts
    /// were asked for but the platform has none).
    pub mode: WaitMode,
    /// MSI-X vectors enabled.
    pub vectors: u16,
    /// Interrupts the device raised on those vectors, as the platform
    /// counts them (VFIO: eventfd signals; emulator: MSI-X messages). An
    /// armed EQ raises one for its next EQE whether or not a wait is
    /// sleeping: a wait that finds its completion at the first look does
    /// not sleep, so `wakeups` may stay 0 while this grows.
    pub interrupts: u64,
    /// Sleeps that an interrupt ended.
    pub wakeups: u64,
    /// Sleeps that ran to their time limit without an interrupt (a health
    /// check or page request was due, or the wait timed out).
    pub idle_sleeps: u64,
    /// Polling steps of the driver's waits ([`Platform::relax`] or a short
    /// delay between two looks at the device). On interrupts, the command
    /// waits of bring-up before the EQs exist poll, as does a command wait
    /// while another thread is consuming the command EQ.
    pub polls: u64,
}

impl fmt::Display for InterruptStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mode {
            WaitMode::Interrupts => write!(
                f,
                "interrupts ({} MSI-X vectors): {} interrupts raised, {} wakeups by interrupt, {} sleeps to their limit, {} polling steps (commands before the EQs exist, or while another thread consumes the EQ)",
                self.vectors, self.interrupts, self.wakeups, self.idle_sleeps, self.polls
            ),
            WaitMode::Polling => write!(f, "polling: {} polling steps", self.polls),
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Enables the MSI-X vectors for the EQs (before they are created),
    /// unless the configuration asks for polling or the platform has none.
    pub(crate) fn setup_interrupts(&mut self) {
        self.irq.vectors = 0;
        if self.cfg.wait_mode == WaitMode::Polling {
            log::debug!("{}: polling (as configured)", self.p().describe());
            return;
        }
        let available = self.p().msix_vectors();
        if available == 0 {
            log::debug!(
                "{}: the platform has no MSI-X interrupts; polling",
                self.p().describe()
            );
            return;
        }
        let n = available.min(1 + u16::from(self.cfg.comp_eqs));
        match self.p().enable_msix(n) {
            Ok(()) => {
                self.irq.vectors = n;
                log::debug!(
                    "{}: {n} of {available} MSI-X vectors enabled",
                    self.p().describe()
                );
            }
            Err(e) => log::warn!(
                "{}: enabling {n} MSI-X vectors failed ({e}); polling",
                self.p().describe()
            ),
        }
    }

    /// Disables the vectors (after the EQs are gone).
    pub(crate) fn teardown_interrupts(&mut self) -> Result<()> {
        if self.irq.vectors == 0 {
            return Ok(());
        }
        self.irq.vectors = 0;
        self.p().disable_msix().map_err(|source| Error::Platform {
            what: "disabling MSI-X",
            source,
        })
    }

    /// The vector of an EQ of `kind` (0 while polling).
    pub(crate) fn vector_for(&self, kind: EqKind) -> u16 {
        let n = self.irq.vectors;
        match kind {
            EqKind::Command | EqKind::Async => 0,
            EqKind::Completion(i) if n > 1 => 1 + u16::from(i) % (n - 1),
            EqKind::Completion(_) => 0,
        }
    }

    /// How the driver waits and how its waits went.
    pub fn interrupt_stats(&self) -> InterruptStats {
        let vectors = self.irq.vectors;
        InterruptStats {
            mode: if vectors > 0 {
                WaitMode::Interrupts
            } else {
                WaitMode::Polling
            },
            vectors,
            interrupts: (0..vectors)
                .filter_map(|v| self.p().interrupt_count(v).ok())
                .sum(),
            wakeups: self.irq.wakeups.load(Ordering::Relaxed),
            idle_sleeps: self.irq.idle.load(Ordering::Relaxed),
            polls: self.irq.polls.load(Ordering::Relaxed),
        }
    }

    /// The MSI-X vector of an EQ of this driver, when the driver runs on
    /// interrupts.
    pub fn eq_vector(&self, eqn: Eqn) -> Option<u16> {
        if self.irq.vectors == 0 {
            return None;
        }
        self.eqs.find(eqn.0).map(|eq| eq.vector)
    }

    /// The interrupt count of `vector`, to pass to
    /// [`wait_interrupt`](Self::wait_interrupt) after looking at the
    /// device; `None` while polling (or if the platform cannot tell, which
    /// is logged), in which case the caller polls.
    pub fn interrupt_seen(&self, vector: u16) -> Option<u64> {
        if self.irq.vectors == 0 {
            return None;
        }
        match self.p().interrupt_count(vector) {
            Ok(c) => Some(c),
            Err(e) => {
                log::warn!(
                    "{}: interrupt count of vector {vector}: {e}",
                    self.p().describe()
                );
                None
            }
        }
    }

    /// Sleeps until an interrupt of `vector` beyond `seen` (from
    /// [`interrupt_seen`](Self::interrupt_seen), read before the caller
    /// last looked at the device) or until `timeout`; returns whether an
    /// interrupt ended the sleep. Counted in
    /// [`interrupt_stats`](Self::interrupt_stats).
    ///
    /// # Errors
    ///
    /// [`Error::Platform`] when the platform's wait fails.
    pub fn wait_interrupt(&self, vector: u16, seen: u64, timeout: Duration) -> Result<bool> {
        let c = self
            .p()
            .wait_interrupt(vector, seen, timeout)
            .map_err(|source| Error::Platform {
                what: "waiting for an interrupt",
                source,
            })?;
        if c > seen {
            self.irq.wakeups.fetch_add(1, Ordering::Relaxed);
            Ok(true)
        } else {
            self.irq.idle.fetch_add(1, Ordering::Relaxed);
            Ok(false)
        }
    }

    /// Counts one polling step of a wait.
    pub(crate) fn note_poll(&self) {
        self.irq.polls.fetch_add(1, Ordering::Relaxed);
    }
}
