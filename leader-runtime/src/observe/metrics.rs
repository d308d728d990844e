//! The metrics exported through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`; without it every call here is a no-op the
//! compiler removes, and this module is private). The library never installs
//! a recorder: with none installed (the application's choice) the facade
//! drops everything.
//!
//! What each metric means, its labels and when it moves: the table in the
//! [crate docs](crate#operating-it-health-draining-metrics), the one place
//! they are listed. The constants here are their names, for dashboards and
//! tests that look them up.

#[cfg(feature = "metrics")]
use std::time::Duration;

use crate::observe::events::LostReason;

/// Counter, label `group`: this instance became leader.
#[cfg(feature = "metrics")]
pub const ELECTED: &str = "leader_elected_total";
/// Counter, labels `group`, `reason`: a leadership ended.
#[cfg(feature = "metrics")]
pub const LOST: &str = "leader_lost_total";
/// Gauge, label `group`: 1 while leading, else 0 (from the group's first use).
#[cfg(feature = "metrics")]
pub const IS_LEADER: &str = "leader_is_leader";
/// Histogram (seconds), label `group`: round trip of every renew call.
#[cfg(feature = "metrics")]
pub const RENEW_SECONDS: &str = "leader_renew_seconds";
/// Counter, label `group`: an acquire call was sent.
#[cfg(feature = "metrics")]
pub const ACQUIRE_ATTEMPTS: &str = "leader_acquire_attempts_total";
/// Counter, labels `group`, `job`, `outcome`: a cron tick's body ran here.
#[cfg(all(feature = "metrics", feature = "cron"))]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub const CRON_RUNS: &str = "leader_cron_runs_total";
/// Counter, labels `group`, `job`: a cron tick ran later than its tolerance.
#[cfg(all(feature = "metrics", feature = "cron"))]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub const CRON_LATE: &str = "leader_cron_late_total";
/// Counter, labels `group`, `job`: a cron tick was skipped (a run was in flight).
#[cfg(all(feature = "metrics", feature = "cron"))]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub const CRON_SKIPPED: &str = "leader_cron_skipped_total";
/// Counter, labels `group`, `job`: cron ticks this leader recorded as missed.
#[cfg(all(feature = "metrics", feature = "cron"))]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub const CRON_MISSED: &str = "leader_cron_missed_total";
/// Histogram (seconds), labels `group`, `job`: how long each cron run took.
#[cfg(all(feature = "metrics", feature = "cron"))]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub const CRON_RUN_SECONDS: &str = "leader_cron_run_seconds";

/// The names, as the code below uses them.
#[cfg(feature = "metrics")]
mod names {
    pub(super) use super::{ACQUIRE_ATTEMPTS, ELECTED, IS_LEADER, LOST, RENEW_SECONDS};
}

/// Help texts and units, for exporters that show them.
#[cfg(feature = "metrics")]
fn describe() {
    use ::metrics::Unit;
    ::metrics::describe_counter!(
        names::ELECTED,
        "Times this instance became leader of the group"
    );
    ::metrics::describe_counter!(
        names::LOST,
        "Leaderships of the group that ended on this instance, by reason"
    );
    ::metrics::describe_gauge!(
        names::IS_LEADER,
        "1 while this instance leads the group, else 0"
    );
    ::metrics::describe_histogram!(
        names::RENEW_SECONDS,
        Unit::Seconds,
        "Round trip of each lease renew call, whatever its outcome"
    );
    ::metrics::describe_counter!(
        names::ACQUIRE_ATTEMPTS,
        "Acquire calls this instance sent for the group"
    );
}

/// This instance became leader of `group`.
#[cfg(feature = "metrics")]
pub(crate) fn elected(group: &str) {
    ::metrics::counter!(names::ELECTED, "group" => group.to_owned()).increment(1);
    ::metrics::gauge!(names::IS_LEADER, "group" => group.to_owned()).set(1.0);
}

/// `group`'s election started: not leading yet. The gauge exists from
/// here, so a follower counts as 0 rather than missing.
#[cfg(feature = "metrics")]
pub(crate) fn following(group: &str) {
    ::metrics::gauge!(names::IS_LEADER, "group" => group.to_owned()).set(0.0);
}

/// A leadership of `group` ended.
#[cfg(feature = "metrics")]
pub(crate) fn lost(group: &str, reason: LostReason) {
    ::metrics::counter!(names::LOST, "group" => group.to_owned(), "reason" => reason.as_str())
        .increment(1);
    ::metrics::gauge!(names::IS_LEADER, "group" => group.to_owned()).set(0.0);
}

/// A renew call of `group` finished (or gave up) after `elapsed`.
#[cfg(feature = "metrics")]
pub(crate) fn renew_round_trip(group: &str, elapsed: Duration) {
    ::metrics::histogram!(names::RENEW_SECONDS, "group" => group.to_owned())
        .record(elapsed.as_secs_f64());
}

/// An acquire call of `group` is being sent. (The first one in the process
/// also describes every metric to the recorder installed by then.)
#[cfg(feature = "metrics")]
pub(crate) fn acquire_attempt(group: &str) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(describe);
    ::metrics::counter!(names::ACQUIRE_ATTEMPTS, "group" => group.to_owned()).increment(1);
}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn elected(_group: &str) {}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn following(_group: &str) {}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn lost(_group: &str, _reason: LostReason) {}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn renew_round_trip(_group: &str, _elapsed: std::time::Duration) {}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn acquire_attempt(_group: &str) {}

#[cfg(all(test, feature = "metrics"))]
#[path = "metrics_tests.rs"]
pub(crate) mod tests;
