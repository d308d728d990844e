//! What ran: the outcome of each tick, kept in the backend per job.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Outcome, Run};
use crate::backend::cron::JobKeys;
use crate::names::validate_group;
use crate::runtime::global;
use crate::util::clock::wall_time_from_unix_ms;
use crate::{Error, Result, Runtime};

impl Outcome {
    fn parse(word: &str, message: &str) -> Option<Self> {
        Some(match word {
            "ok" => Outcome::Ok,
            "error" => Outcome::Error(message.to_owned()),
            "panicked" => Outcome::Panicked,
            "cancelled" => Outcome::Cancelled,
            "skipped-overlap" => Outcome::SkippedOverlap,
            "missed" => Outcome::Missed,
            "abandoned" => Outcome::Abandoned,
            _ => return None,
        })
    }

    /// The outcome as it is logged and kept: an error's message as
    /// [`clean`] makes it (a [`TickResult`] of the user's may return any
    /// text).
    pub(crate) fn cleaned(self) -> Self {
        match self {
            Outcome::Error(message) => Outcome::Error(clean(&message)),
            other => other,
        }
    }

    /// Whether the body ran (to any end).
    pub(crate) fn ran(&self) -> bool {
        matches!(self, Outcome::Ok | Outcome::Error(_) | Outcome::Panicked)
    }
}

/// What a job's body returns: `()`, or a `Result` whose error becomes
/// [`Outcome::Error`] in the history.
///
/// # Examples
///
/// ```
/// # fn f() -> leader_runtime::Result<()> {
/// let job = leader_runtime::cron::JobBuilder::new("0 * * * * *", "reports")
///     .name("report")
///     .build(|_tick| async { Err::<(), _>("database unreachable") })?;
/// # drop(job); Ok(()) }
/// ```
pub trait TickResult {
    /// The outcome this value stands for.
    fn outcome(self) -> Outcome;
}

impl TickResult for () {
    fn outcome(self) -> Outcome {
        Outcome::Ok
    }
}

impl<T, E: fmt::Display> TickResult for std::result::Result<T, E> {
    fn outcome(self) -> Outcome {
        match self {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::Error(clean(&e.to_string())),
        }
    }
}

/// A message as the history keeps it (fleet-wide, shown by `leader
/// history`) and the log shows it: URL credentials redacted, no control
/// characters, at most 256 bytes. Redacted first: a URL cut short before
/// its `@` would no longer read as holding a password.
fn clean(message: &str) -> String {
    let message = crate::util::redact::redact_text(message);
    let mut out = String::new();
    for c in message.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > 256 {
            break;
        }
        out.push(c);
    }
    out
}

impl Run {
    /// The entry as the backend keeps it: tab-separated
    /// `tick token start_ms duration_ms outcome instance message`
    /// (instance ids have no control characters).
    pub(crate) fn entry(&self) -> String {
        let message = match &self.outcome {
            Outcome::Error(m) => clean(m),
            _ => String::new(),
        };
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            unix_ms(self.scheduled),
            self.token,
            unix_ms(self.started),
            self.duration.as_millis(),
            self.outcome.word(),
            self.instance,
            message
        )
    }

    /// The entry back; `None` for one this crate did not write: malformed,
    /// or with a time after the year 9999, which no clock gives (and which
    /// would break whoever formats it).
    pub(crate) fn parse(entry: &str) -> Option<Self> {
        let mut f = entry.splitn(7, '\t');
        let tick: u64 = f.next()?.parse().ok()?;
        let token = f.next()?.parse().ok()?;
        let started: u64 = f.next()?.parse().ok()?;
        let duration = f.next()?.parse().ok()?;
        let word = f.next()?;
        let instance = f.next()?.to_owned();
        let outcome = Outcome::parse(word, f.next().unwrap_or(""))?;
        Some(Self {
            scheduled: wall_time_from_unix_ms(tick)?,
            instance,
            token,
            started: wall_time_from_unix_ms(started)?,
            duration: Duration::from_millis(duration),
            outcome,
        })
    }
}

pub(crate) fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The last runs of cron job `job` of `group`, fleet-wide, newest first:
/// what the backend keeps ([`JobBuilder::history`](super::JobBuilder::history)
/// entries, default 20), read from the global runtime's backend. Entries
/// this crate did not write (malformed, or with a time after the year 9999)
/// are left out.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> leader_runtime::Result<()> {
/// let runs = leader_runtime::cron::history("reports", "hourly-report").await?;
/// if let Some(last) = runs.first() {
///     println!("last run: {} on {}", last.outcome, last.instance);
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a global runtime; [`Error::InvalidGroup`]
/// or [`Error::Config`] (field `"name"`) for a malformed group or job name;
/// [`Error::Backend`] or [`Error::Timeout`] when the backend cannot answer.
pub async fn history(group: &str, job: &str) -> Result<Vec<Run>> {
    let runtime = global::current().ok_or(Error::NotConfigured)?;
    runtime.cron_history(group, job).await
}

impl Runtime {
    /// The last runs of cron job `job` of `group`, fleet-wide, newest first;
    /// see [`cron::history`](history()).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// assert!(runtime.cron_history("reports", "hourly-report").await?.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`cron::history`](history()).
    pub async fn cron_history(&self, group: &str, job: &str) -> Result<Vec<Run>> {
        validate_group(group)?;
        super::validate_name(job)?;
        let ctx = self.cron_ctx();
        let keys = JobKeys::new(&ctx.config.key_prefix, group, job);
        let limit = ctx.config.call_timeout;
        let entries = tokio::time::timeout(limit, ctx.backend.cron_history(group, &keys))
            .await
            .map_err(|_| Error::Timeout {
                group: group.to_owned(),
                after: limit,
            })??;
        Ok(entries.iter().filter_map(|e| Run::parse(e)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_with_times_no_clock_gives_are_left_out() {
        let ok = "1700000000000\t7\t1700000000100\t5\tok\ta\t";
        let run = Run::parse(ok).expect("a run");
        assert_eq!(unix_ms(run.scheduled), 1_700_000_000_000);
        assert_eq!(run.entry(), ok);
        // The last millisecond of 9999 is a time; the next one is not.
        assert!(Run::parse("253402300799999\t1\t0\t0\tok\ti\t").is_some());
        assert_eq!(Run::parse("253402300800000\t1\t0\t0\tok\ti\t"), None);
        assert_eq!(Run::parse("99999999999999999\t1\t0\t0\tok\ti\t"), None);
        assert_eq!(Run::parse("0\t1\t99999999999999999\t0\tok\ti\t"), None);
    }
}
