//! Transitions exported through the [`metrics`](https://docs.rs/metrics)
//! facade, behind the `metrics` feature; without it every function here is a
//! no-op the compiler removes.
//!
//! The library never installs a recorder: with none installed (the
//! application's choice) the facade drops everything.
//!
//! The metrics and when each moves: the table in the crate docs ("Operating
//! it"), the one place they are listed.

#[cfg(feature = "metrics")]
use std::time::Duration;

use crate::events::LostReason;

/// Metric names, as exported.
#[cfg(feature = "metrics")]
pub(crate) mod names {
    pub(crate) const ELECTED: &str = "leader_elected_total";
    pub(crate) const LOST: &str = "leader_lost_total";
    pub(crate) const IS_LEADER: &str = "leader_is_leader";
    pub(crate) const RENEW_SECONDS: &str = "leader_renew_seconds";
    pub(crate) const ACQUIRE_ATTEMPTS: &str = "leader_acquire_attempts_total";
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
pub(crate) fn lost(_group: &str, _reason: LostReason) {}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn renew_round_trip(_group: &str, _elapsed: std::time::Duration) {}

#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(crate) fn acquire_attempt(_group: &str) {}

#[cfg(all(test, feature = "metrics"))]
pub(crate) mod tests;
