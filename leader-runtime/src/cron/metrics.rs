//! Per-job counters and the run-time histogram, through the `metrics`
//! facade (feature `metrics`); no-ops without it.

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Once;
    use std::time::Duration;

    use crate::cron::Outcome;

    use crate::observe::metrics::{
        CRON_LATE as LATE, CRON_MISSED as MISSED, CRON_RUNS as RUNS, CRON_RUN_SECONDS as DURATION,
        CRON_SKIPPED as SKIPPED,
    };

    fn describe() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            ::metrics::describe_counter!(
                RUNS,
                "Cron ticks whose body ran on this instance, by outcome"
            );
            ::metrics::describe_counter!(
                LATE,
                "Cron ticks that ran later than the clock-skew tolerance (catch-up runs)"
            );
            ::metrics::describe_counter!(
                SKIPPED,
                "Cron ticks not run because a run of the job was in flight (overlap skip)"
            );
            ::metrics::describe_counter!(MISSED, "Cron ticks this instance recorded as missed");
            ::metrics::describe_histogram!(
                DURATION,
                ::metrics::Unit::Seconds,
                "How long each cron run took"
            );
        });
    }

    pub(crate) fn ran(group: &str, job: &str, outcome: &Outcome, took: Duration, late: bool) {
        describe();
        let (g, j) = (group.to_owned(), job.to_owned());
        let word = match outcome {
            Outcome::Ok => "ok",
            Outcome::Error(_) => "error",
            Outcome::Panicked => "panicked",
            _ => "cancelled",
        };
        ::metrics::counter!(RUNS, "group" => g.clone(), "job" => j.clone(), "outcome" => word)
            .increment(1);
        ::metrics::histogram!(DURATION, "group" => g.clone(), "job" => j.clone())
            .record(took.as_secs_f64());
        if late {
            ::metrics::counter!(LATE, "group" => g, "job" => j).increment(1);
        }
    }

    pub(crate) fn skipped(group: &str, job: &str) {
        describe();
        ::metrics::counter!(SKIPPED, "group" => group.to_owned(), "job" => job.to_owned())
            .increment(1);
    }

    pub(crate) fn missed(group: &str, job: &str, n: u64) {
        describe();
        ::metrics::counter!(MISSED, "group" => group.to_owned(), "job" => job.to_owned())
            .increment(n);
    }
}

#[cfg(feature = "metrics")]
pub(crate) use on::{missed, ran, skipped};

#[cfg(not(feature = "metrics"))]
pub(crate) fn ran(
    _group: &str,
    _job: &str,
    _outcome: &super::Outcome,
    _took: std::time::Duration,
    _late: bool,
) {
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn skipped(_group: &str, _job: &str) {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn missed(_group: &str, _job: &str, _n: u64) {}
