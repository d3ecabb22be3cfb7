//! The time limit of a wait: every wait of the driver has one and ends in
//! an [`Error::Timeout`] naming what it waited for.

use core::time::Duration;

use platform::Platform;

use crate::error::{Error, Result, Wait};

/// When a wait started and how long it may take (platform time).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    start: Duration,
    timeout: Duration,
}

impl Deadline {
    /// A wait of at most `timeout`, starting now.
    pub(crate) fn start<P: Platform>(p: &P, timeout: Duration) -> Self {
        Self {
            start: p.now(),
            timeout,
        }
    }

    /// Time left until the limit (zero once it passed).
    pub(crate) fn remaining<P: Platform>(&self, p: &P) -> Duration {
        self.timeout
            .saturating_sub(p.now().saturating_sub(self.start))
    }

    /// [`Error::Timeout`] for `what` once `timeout` has passed since the
    /// start.
    pub(crate) fn check<P: Platform>(&self, p: &P, what: Wait) -> Result<()> {
        let waited = p.now().saturating_sub(self.start);
        if waited >= self.timeout {
            Err(Error::Timeout {
                what,
                after: waited,
            })
        } else {
            Ok(())
        }
    }
}
