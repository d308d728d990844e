//! A cron job's state as plain data — its policies, its runs, its status —
//! below the runtime, so that a group's status lists its jobs without
//! knowing cron (`crate::cron` re-exports every public item here), and the
//! board of the jobs built in this process, which `cron` fills and
//! `Runtime::status` reads.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use crate::{Error, Result};

/// Whether a tick may start while a run of the same job is in flight.
///
/// # Examples
///
/// ```
/// use leader_runtime::cron::{JobBuilder, Overlap};
///
/// // A job whose runs may overlap (each tick writes its own partition).
/// let builder = JobBuilder::new("*/10 * * * * *", "etl").name("partition").overlap(Overlap::Allow);
/// # drop(builder);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overlap {
    /// A tick does not start while a run of the job is in flight anywhere
    /// in the fleet (on this leader, or on an earlier leader still
    /// finishing); it is recorded as [`Outcome::SkippedOverlap`]. The
    /// default. A run counts as in flight while its instance keeps its mark
    /// alive (every ttl / 3), so a crashed one stops counting after one ttl.
    /// A tick missed in a gap (already late when the leader first saw it)
    /// that the [`Missed`] policy catches up is not skipped: it waits for
    /// the run in flight, so [`Missed::All`]'s catch-ups run one after
    /// another, oldest first, however long each takes; ticks that came due
    /// meanwhile are skipped as usual.
    #[default]
    Skip,
    /// Ticks start on time whatever else runs.
    Allow,
}

/// What happens to ticks missed while nobody led (a crash, an outage, a
/// restart or redeploy of the whole fleet): ticks later than the
/// [`tolerance`](crate::cron::JobBuilder::tolerance). The next leader looks back to the
/// job's last decided tick, kept in the backend (at most 1024 ticks); a
/// job the backend has no decided tick of (a new one) looks back to when
/// it was built — but its first claim under a lease record refuses ticks
/// more than `ttl − tolerance` old (recorded as missed): the backend cannot
/// tell a new job from one whose decisions were lost with the record, and
/// fails closed.
///
/// A tick a leader claimed but whose body never started (its view ended
/// first, or it died in between) is missed too: the next leadership
/// decides it by this policy, after recording it
/// [`abandoned`](Outcome::Abandoned); see [claimed, not run](crate::cron#claimed-not-run).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_runtime::cron::{JobBuilder, Missed};
///
/// // Every missed tick of the last hour runs (at most 16 of them, the default cap).
/// let builder = JobBuilder::new("0 * * * * *", "billing")
///     .name("invoice")
///     .missed(Missed::All { window: Duration::from_secs(3600) });
/// # drop(builder);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Missed {
    /// Missed ticks do not run; they are recorded as [`Outcome::Missed`].
    /// The default.
    #[default]
    Skip,
    /// The latest missed tick runs once, late ([`Tick::catch_up`](crate::cron::Tick::catch_up)); the
    /// others are recorded as missed. A catch-up already waiting for a run
    /// in flight stays the one: a tick seen on time that turns late behind
    /// it is recorded as missed.
    Latest,
    /// Every missed tick at most `window` late (at most [`MAX_WINDOW`](crate::cron::MAX_WINDOW))
    /// runs, oldest first, up to [`max_catch_up`](crate::cron::JobBuilder::max_catch_up)
    /// of them (the latest ones); the others are recorded as missed. With
    /// [`Overlap::Skip`] each catch-up waits for the run before it, oldest
    /// first; a tick that comes due on time meanwhile is skipped as
    /// overlapping ([`Outcome::SkippedOverlap`]), as [`Overlap::Skip`]
    /// says.
    All {
        /// How late a tick may still run.
        window: Duration,
    },
}

/// How one tick of a cron job ended, as its [`Run`] in the
/// [history](crate::cron::history()) says.
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
    /// [`cancel_on_loss`](crate::cron::JobBuilder::cancel_on_loss). Not run
    /// again (the body may have started); a claim whose start was never
    /// recorded is [`Outcome::Abandoned`] instead, and decided again.
    Cancelled,
    /// Not run: a run of the same job was in flight somewhere in the fleet
    /// ([`Overlap::Skip`](crate::cron::Overlap::Skip)).
    SkippedOverlap,
    /// Claimed, not run: the leader that claimed it lost its lease before
    /// the body started (the claim's reply came after its view ended, or
    /// it died between claim and start). Certain: a body starts only after
    /// its start is recorded under the claim's lease. The tick is then
    /// decided again, as a tick missed in a gap, by the next leadership: a
    /// later entry of the same tick says how (a run's outcome when the
    /// [missed-run policy](crate::cron::Missed) caught it up, [`Outcome::Missed`]
    /// or [`Outcome::SkippedOverlap`] otherwise). The entry carries the
    /// claimer's instance and token. Also what [`status()`](crate::Runtime::status)
    /// shows for a tick this instance claimed and did not start.
    Abandoned,
    /// Not run: nobody led when it was due and the
    /// [missed-run policy](crate::cron::Missed) did not catch it up, or the
    /// backend could not vouch that nobody ran it (data lost or restored).
    Missed,
}

impl Outcome {
    /// The outcome's word in the history entries and logs.
    pub(crate) fn word(&self) -> &'static str {
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
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Error(message) => write!(f, "error: {message}"),
            other => f.write_str(other.word()),
        }
    }
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

/// A cron job as [`status()`](crate::Runtime::status) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStatus {
    /// The job's name.
    pub name: String,
    /// Its schedule, as given.
    pub schedule: String,
    /// The IANA time zone it is read in.
    pub time_zone: String,
    /// Its overlap policy.
    pub overlap: Overlap,
    /// Its missed-run policy.
    pub missed: Missed,
    /// The last runs this instance ran or skipped, newest first.
    pub recent: Vec<Run>,
}

/// A cron job on the board: what it shows in a status.
pub(crate) trait JobSource: Send + Sync {
    /// The job's status now.
    fn status(&self) -> JobStatus;
}

/// A job on the board: its runtime's id (0: the process-wide runtime,
/// whichever it turns out to be), its group and its name.
type Key = (u64, String, String);

type Board = Mutex<HashMap<Key, Weak<dyn JobSource>>>;

fn board() -> &'static Board {
    static BOARD: OnceLock<Board> = OnceLock::new();
    BOARD.get_or_init(Mutex::default)
}

/// A job's place on the board, left when dropped (unless another job of
/// that key took it since).
pub(crate) struct BoardPlace {
    key: Key,
}

impl Drop for BoardPlace {
    fn drop(&mut self) {
        let mut jobs = board().lock().unwrap_or_else(PoisonError::into_inner);
        if jobs.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            jobs.remove(&self.key);
        }
    }
}

/// Put a job on the board; its name must be unique in its group and
/// runtime.
pub(crate) fn register(
    runtime: u64,
    group: &str,
    name: &str,
    job: Weak<dyn JobSource>,
) -> Result<BoardPlace> {
    let key = (runtime, group.to_owned(), name.to_owned());
    let mut jobs = board().lock().unwrap_or_else(PoisonError::into_inner);
    jobs.retain(|_, w| w.strong_count() > 0);
    if jobs.contains_key(&key) {
        return Err(Error::Config {
            field: "name",
            rule: format!(
                "must be unique in its group: group `{group}` already has a cron job named `{name}`"
            ),
        });
    }
    jobs.insert(key.clone(), job);
    Ok(BoardPlace { key })
}

/// The jobs of `group` on the runtime `runtime` (`is_global`: it is the
/// process-wide one, which also owns the jobs built for it before it
/// existed), by name.
pub(crate) fn jobs_of(runtime: u64, is_global: bool, group: &str) -> Vec<JobStatus> {
    let found: Vec<Arc<dyn JobSource>> = {
        let jobs = board().lock().unwrap_or_else(PoisonError::into_inner);
        jobs.iter()
            .filter(|((rt, g, _), _)| g == group && (*rt == runtime || (*rt == 0 && is_global)))
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    };
    let mut out: Vec<JobStatus> = found.iter().map(|job| job.status()).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
