//! What ran: the outcome of each tick, kept in the backend per job.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::cron::JobKeys;
use crate::names::validate_group;
use crate::runtime::global;
use crate::util::clock::wall_time_from_unix_ms;
use crate::{Error, Result, Runtime};

/// How one tick of a cron job ended, as its [`Run`] in the
/// [history](history()) says.
///
/// # Examples
///
/// ```
/// use leader_runtime::cron::Outcome;
///
/// assert_eq!(Outcome::Ok.to_string(), "ok");
/// assert_eq!(Outcome::SkippedOverlap.to_string(), "skipped-overlap");
/// assert_eq!(Outcome::Abandoned.to_string(), "abandoned");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The body returned `()` or `Ok(_)`.
    Ok,
    /// The body returned `Err(e)`: `e`'s message, URL credentials
    /// redacted (`postgres://app:***@db`), at most 256 bytes.
    Error(String),
    /// The body panicked (the panic was caught; the scheduler goes on).
    Panicked,
    /// The tick was claimed but did not run to its end: its start was
    /// recorded but the view ended (or the reply was lost) before the body
    /// began, or the view ended during the run of a job built with
    /// [`cancel_on_loss`](super::JobBuilder::cancel_on_loss). Not run
    /// again (the body may have started); a claim whose start was never
    /// recorded is [`Outcome::Abandoned`] instead, and decided again.
    Cancelled,
    /// Not run: a run of the same job was in flight somewhere in the fleet
    /// ([`Overlap::Skip`](super::Overlap::Skip)).
    SkippedOverlap,
    /// Claimed, not run: the leader that claimed it lost its lease before
    /// the body started (the claim's reply came after its view ended, or
    /// it died between claim and start). Certain: a body starts only after
    /// its start is recorded under the claim's lease. The tick is then
    /// decided again, as a tick missed in a gap, by the next leadership: a
    /// later entry of the same tick says how (a run's outcome when the
    /// [missed-run policy](super::Missed) caught it up, [`Outcome::Missed`]
    /// or [`Outcome::SkippedOverlap`] otherwise). The entry carries the
    /// claimer's instance and token. Also what [`status()`](crate::Runtime::status)
    /// shows for a tick this instance claimed and did not start.
    Abandoned,
    /// Not run: nobody led when it was due and the
    /// [missed-run policy](super::Missed) did not catch it up, or the
    /// backend could not vouch that nobody ran it (data lost or restored).
    Missed,
}

impl Outcome {
    fn word(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error(_) => "error",
            Outcome::Panicked => "panicked",
            Outcome::Cancelled => "cancelled",
            Outcome::SkippedOverlap => "skipped-overlap",
            Outcome::Missed => "missed",
            Outcome::Abandoned => "abandoned",
        }
    }

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

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Error(message) => write!(f, "error: {message}"),
            other => f.write_str(other.word()),
        }
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

/// One tick of a cron job as its history keeps it: which instance decided
/// it, under which token, when it started, how long it ran, how it ended.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> leader_runtime::Result<()> {
/// for run in leader_runtime::cron::history("reports", "hourly-report").await? {
///     println!("{:?} on {} ({}): {} in {:?}", run.scheduled, run.instance, run.token, run.outcome, run.duration);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Run {
    /// The tick's scheduled time.
    pub scheduled: SystemTime,
    /// The instance that ran it (or recorded that it did not run).
    pub instance: String,
    /// That instance's fencing token at the time.
    pub token: u64,
    /// When the body started (for a tick that did not run: when that was
    /// decided). By the instance's clock.
    pub started: SystemTime,
    /// How long the body ran (zero for a tick that did not run).
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
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
