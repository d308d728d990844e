//! Keep saying it while the backend keeps failing: each group's election
//! logs the first failure of a burst as an ERROR and the rest at debug level;
//! this counts the failed calls of all the runtime's groups and logs a WARN
//! with the count at least once a minute while they go on.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;

/// How often a WARN repeats while backend calls keep failing.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Failed backend calls since the last report, across one runtime's groups
/// (one line a minute for the runtime, however many groups it has).
pub(crate) struct Outage {
    state: Mutex<State>,
    /// The longest a failing election goes between two failed calls (a call
    /// that timed out, then the retry pace): a report is due this much
    /// before the minute is up, so that the next failure cannot come too late.
    slack: Duration,
}

#[derive(Default)]
struct State {
    /// Failed calls since `since`.
    failures: u64,
    /// Start of the count: the burst's first failure, or the last report.
    since: Option<Instant>,
    /// The last failure: a failure `REPORT_EVERY` after it starts a new burst.
    last: Option<Instant>,
}

impl Outage {
    /// Reports for elections that retry every `retry_interval` with calls
    /// bounded by `call_timeout`.
    pub(crate) fn new(retry_interval: Duration, call_timeout: Duration) -> Self {
        Self {
            state: Mutex::default(),
            slack: (retry_interval + call_timeout).min(REPORT_EVERY / 2),
        }
    }

    /// A backend call of `group` failed with `error`. Logs a WARN with the
    /// count when the next failure could come `REPORT_EVERY` or more after
    /// the last report (or the burst's first failure, which the election
    /// logs itself).
    pub(crate) fn failed(&self, group: &str, op: &str, error: &Error) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let quiet = state.last.is_none_or(|last| now - last >= REPORT_EVERY);
        state.last = Some(now);
        let since = match state.since {
            Some(since) if !quiet => since,
            // A new burst: the election reports its first failure.
            _ => {
                *state = State {
                    failures: 0,
                    since: Some(now),
                    last: Some(now),
                };
                return;
            }
        };
        state.failures += 1;
        if now - since + self.slack < REPORT_EVERY {
            return;
        }
        let failures = std::mem::take(&mut state.failures);
        state.since = Some(now);
        drop(state);
        let over = now - since;
        tracing::warn!(
            failures,
            op,
            %error,
            "backend calls keep failing: {failures} failed in the last {over:?} (the last for group `{group}`); retrying"
        );
    }
}

#[cfg(test)]
#[path = "outage_tests.rs"]
mod tests;
