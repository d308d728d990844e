//! Cron jobs that run only on the leader, each scheduled tick at most once
//! fleet-wide (feature `cron`).
//!
//! Every instance adds the same [`tokio_cron_scheduler`] job to its own
//! scheduler; only the instance that leads the job's group runs its ticks,
//! each claimed in the backend first.
//!
//! # Guarantees
//!
//! A tick id (`<job name>:<scheduled unix ms>`) runs **at most once
//! fleet-wide**, through every fault below; and **exactly once** when no
//! leaderless gap is longer than what the [missed-run policy](Missed)
//! catches up, and no data is lost.
//!
//! | fault | what happens to ticks |
//! | --- | --- |
//! | handover (`step_down`, SIGTERM, `shutdown`) | the old leader drains its run before it releases; the new one runs the next ticks; none twice, none lost |
//! | crash (kill -9) | ticks due while the lease runs out (≤ ttl) are *missed*: caught up or recorded as missed by the next leader, per [`Missed`]; so are ticks due while the whole fleet was down (a restart, a redeploy): the look-back reaches back to the job's last decided tick, kept in the backend (at most 1024 ticks), not only to when the job was built; so is a tick the dead leader had claimed but not started (recorded `abandoned` first, see [claimed, not run](#claimed-not-run)); one whose body had started is never run again |
//! | partition, pause | the cut-off leader's view ends (on its own clock) before another's begins; a claim is made in the same script that checks the lease (holder *and* token), and a claim answered after the view ended is not run there: the next leadership decides it again, as a missed tick ([claimed, not run](#claimed-not-run)); then as a crash |
//! | Redis outage | nothing is claimed, so nothing runs; ticks due meanwhile are missed, per [`Missed`]; a claim whose reply was lost is recognised as ours (by its token and the job object that sent it: a job built again does not run its predecessor's tick) when retried within [`tolerance`](JobBuilder::tolerance) of its tick; retried later, it is a missed tick: caught up or recorded missed, per [`Missed`]; a start that fails leaves the tick to the next firing likewise |
//! | data loss (flush, restart without persistence, restore from a snapshot, failover to a lagging replica, eviction) | fail closed: a leadership that began after the lease record was lost or restored never looks back before its own start, and a restored job record (or one evicted or deleted on its own) refuses every tick before the first claim seen after that — such ticks are recorded as *missed*, never run twice. With a [`tolerance`](JobBuilder::tolerance) above the ttl, an earlier leader's clock may have run that much ahead, so these floors move later by the excess (tolerance − ttl): that many seconds of ticks after the loss are refused too (also at a job's very first claim, or its first under a new lease record) |
//! | clock skew | ids are the schedule's own times, not the host's: hosts within [`tolerance`](JobBuilder::tolerance) (default 5 s) of each other name a tick alike, and a tick that falls between two leaders is run (late) by the second |
//! | DST, host time zones | a job's schedule is read in its [`time_zone`](JobBuilder::time_zone) (IANA, default UTC); every local time the schedule matches runs once: at the first instant after the gap if the day does not have it (spring forward), at its first occurrence if the day has it twice (fall back), else at itself — local times that land on one instant (several in one gap, or a gap's time and the time after the gap) are one tick; ids are UTC instants, the same whatever a host's `TZ` |
//!
//! # Policies, per job
//!
//! | policy | values | default |
//! | --- | --- | --- |
//! | [`overlap`](JobBuilder::overlap) | [`Overlap::Skip`]: no tick starts while a run of the job is in flight anywhere in the fleet — on this leader, or on an earlier one still finishing (recorded `skipped-overlap`); a tick missed in a gap that the missed-run policy catches up waits for that run instead, so catch-ups run one after another; [`Overlap::Allow`] | `Skip` |
//! | [`missed`](JobBuilder::missed) | [`Missed::Skip`]: ticks missed in a leaderless gap or an outage are recorded as missed; [`Missed::Latest`]: the latest of them runs once, late; [`Missed::All`]: all of them within a window run, oldest first, at most [`max_catch_up`](JobBuilder::max_catch_up) | `Skip` |
//! | [`tolerance`](JobBuilder::tolerance) | clock skew between hosts: a tick this late is on time, not missed; above the ttl, data loss refuses the excess (see above) | 5 s |
//! | [`history`](JobBuilder::history) | runs kept per job in the backend, read with [`history()`] | 20 |
//! | [`cancel_on_loss`](JobBuilder::cancel_on_loss) | stop the body when the view ends | off |
//!
//! A tick that runs later than `tolerance` (a catch-up run) is logged at
//! INFO with how late it is; the body can tell from [`Tick::catch_up`],
//! [`Tick::scheduled`] and [`Tick::started`].
//!
//! # How
//!
//! The scheduler fires the job every second; on the leader each firing
//! decides the ticks due since the last one it decided (oldest first) in
//! one script (`backend/scripts/claim.lua`) that checks the lease is ours (the lease
//! key holds our id and the record our token), keeps the job's latest
//! decided tick (a watermark: an older tick never runs) and its run in
//! flight, and records ticks that will not run in the job's history; a
//! claimed tick runs once marked started ([claimed, not run](#claimed-not-run)). The
//! keys, in the group's hash slot: `{prefix}:{group}:cron:<job>` (a hash)
//! and `{prefix}:{group}:cron-history:<job>` (a list).
//!
//! # Claimed, not run
//!
//! A claimed tick's body starts only after a second script
//! (`backend/scripts/cron_start.lua`) marked the claim *started*, under the same
//! lease (holder and token checked again) and while this instance's view
//! is still valid. Until then the claim is *pending*. A pending claim of an
//! older leadership can never start: its token never holds the lease again,
//! and both scripts check the lease, so a start comes either before every
//! claim of a newer leadership (which then sees it started) or not at all.
//! The next leadership therefore decides such a tick again, as a tick
//! missed in a gap, by the job's [`Missed`] policy: the history records it
//! [`abandoned`](Outcome::Abandoned) (with the old claimer's instance and
//! token), then how it was decided — the catch-up run's outcome
//! ([`Missed::Latest`], [`Missed::All`]), or `missed`
//! ([`Missed::Skip`], or not chosen). Its busy mark no longer makes later
//! ticks `skipped-overlap`. A started claim is never decided again: its
//! body may have run. This covers a claim answered after the view ended, a
//! leader that died between claim and start, and a start that failed (the
//! same job object then asks for the tick again at its next firing). A
//! start that went through but whose reply came after the view ended (or
//! was lost) is not run and is recorded [`cancelled`](Outcome::Cancelled).
//!
//! # Examples
//!
//! ```no_run
//! use leader_runtime::cron::{JobBuilder, Missed, Overlap};
//! use leader_runtime::cron::tokio_cron_scheduler::JobScheduler;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! leader_runtime::init(
//!     leader_runtime::Config::builder().redis_url("redis://127.0.0.1:6379").build()?,
//! )?;
//! let scheduler = JobScheduler::new().await?;
//! // Every replica adds the job; every five minutes, Berlin time, it runs on one of them.
//! let job = JobBuilder::new("0 */5 * * * *", "reports")
//!     .name("hourly-report")
//!     .time_zone(leader_runtime::cron::chrono_tz::Europe::Berlin)
//!     .overlap(Overlap::Skip)
//!     .missed(Missed::Latest)
//!     .build(|tick| async move {
//!         println!("report for {:?} (catch-up: {})", tick.scheduled(), tick.catch_up());
//!     })?;
//! scheduler.add(job).await?;
//! scheduler.start().await?;
//! // Later, anywhere in the fleet:
//! for run in leader_runtime::cron::history("reports", "hourly-report").await? {
//!     println!("{:?}: {} on {}", run.scheduled, run.outcome, run.instance);
//! }
//! # Ok(()) }
//! ```

mod history;
mod metrics;
mod registry;
mod schedule;

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
pub use chrono_tz;
use chrono_tz::Tz;
use croner::Cron;
use futures_util::FutureExt;
/// The scheduler the jobs run on, re-exported so that users need no version pin.
pub use tokio_cron_scheduler;
use tokio_cron_scheduler::Job;

pub use self::history::{history, TickResult};
use crate::backend::cron::{busy_mark, Abandoned, ClaimRequest, Claimed, JobKeys, Mode};
use crate::names::validate_group;
pub use crate::observe::jobs::{JobStatus, Missed, Outcome, Overlap, Run};
use crate::runtime::global;
use crate::{Error, Lease, Result, Runtime};

/// Default [`JobBuilder::tolerance`].
///
/// # Examples
///
/// ```
/// use leader_runtime::cron::{JobBuilder, DEFAULT_TOLERANCE};
///
/// // Hosts whose clocks may disagree by more: widen it.
/// let builder = JobBuilder::new("0 * * * * *", "reports").tolerance(DEFAULT_TOLERANCE * 6);
/// # drop(builder);
/// ```
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5);

/// Largest [`JobBuilder::tolerance`]: one hour.
pub const MAX_TOLERANCE: Duration = Duration::from_secs(3600);

/// Largest catch-up window of [`Missed::All`]: seven days.
pub const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default [`JobBuilder::history`] length.
pub const DEFAULT_HISTORY: usize = 20;

/// Largest [`JobBuilder::history`] length and [`JobBuilder::max_catch_up`].
pub const MAX_HISTORY: usize = 1000;

/// Default [`JobBuilder::max_catch_up`].
pub const DEFAULT_MAX_CATCH_UP: usize = 16;

/// Most ticks one firing considers (oldest dropped first).
const LOOK_BACK_TICKS: usize = 1024;

/// A tokio-cron-scheduler job on `schedule` (six fields, seconds first, UTC:
/// `"0 */5 * * * *"`) whose body `f` runs only on the instance that leads
/// `group`, each tick at most once fleet-wide; see the [module docs](self).
///
/// The shorthand of [`JobBuilder`] with every default, named after its
/// schedule (spaces as `_`: `"0_*/5_*_*_*_*"`), as before names were
/// explicit; a new job should use [`JobBuilder::name`].
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, MemoryBackend, Runtime};
/// use leader_runtime::cron::tokio_cron_scheduler::JobScheduler;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let scheduler = JobScheduler::new().await?;
/// let job = runtime.scope(async {
///     leader_runtime::cron::job("*/10 * * * * *", "cleanup", |tick| async move {
///         let lease = tick.lease(); // fencing token: lease.token()
///         println!("tick {} under token {}", tick.id(), lease.token());
///     })
/// }).await?;
/// scheduler.add(job).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`JobBuilder::build`].
pub fn job<F, Fut>(schedule: &str, group: &str, f: F) -> Result<Job>
where
    F: Fn(Tick) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: TickResult,
{
    let name = schedule.split_whitespace().collect::<Vec<_>>().join("_");
    JobBuilder::new(schedule, group).name(name).build(f)
}

/// A cron job with its name and policies; [`build`](Self::build) makes the
/// tokio-cron-scheduler job.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_runtime::cron::{JobBuilder, Missed, Overlap};
/// use leader_runtime::{Config, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let job = JobBuilder::new("0 30 2 * * *", "maintenance")
///     .name("vacuum")
///     .runtime(&runtime)
///     .time_zone(leader_runtime::cron::chrono_tz::Europe::Berlin)
///     .overlap(Overlap::Skip)
///     .missed(Missed::Latest)
///     .tolerance(Duration::from_secs(30))
///     .build(|_tick| async { /* VACUUM */ })?;
/// # drop(job);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct JobBuilder {
    schedule: String,
    group: String,
    name: Option<String>,
    runtime: Option<Runtime>,
    time_zone: Tz,
    overlap: Overlap,
    missed: Missed,
    tolerance: Duration,
    max_catch_up: usize,
    history: usize,
    cancel_on_loss: bool,
    clock_offset_ms: i64,
}

impl JobBuilder {
    /// A job on `schedule` (six fields, seconds first: second minute hour
    /// day-of-month month day-of-week; `@daily` and the like too) gated on
    /// `group`. [`build`](Self::build) checks the schedule: a field out of
    /// range is named (`hour 25 out of range 0-23`), and one that can never
    /// fire (`0 0 0 30 2 *`) is refused. [`next_fire_times`](Self::next_fire_times)
    /// shows when it fires.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = JobBuilder::new("0 */15 * * * *", "reports").name("digest").build(|_tick| async {})?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn new(schedule: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            schedule: schedule.into(),
            group: group.into(),
            name: None,
            runtime: None,
            time_zone: Tz::UTC,
            overlap: Overlap::default(),
            missed: Missed::default(),
            tolerance: DEFAULT_TOLERANCE,
            max_catch_up: DEFAULT_MAX_CATCH_UP,
            history: DEFAULT_HISTORY,
            cancel_on_loss: false,
            clock_offset_ms: 0,
        }
    }

    /// The job's name (required): it names the job's keys and tick ids, so
    /// it must stay the same across deploys, and two jobs of one group
    /// built on one runtime cannot share it. 1 to 128 bytes of ASCII
    /// letters, digits and `. _ : - * / , ?`.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// # fn f() -> leader_runtime::Result<()> {
    /// // Two nightly jobs of one group: distinct names, distinct ticks.
    /// let vacuum = JobBuilder::new("0 0 3 * * *", "maintenance").name("vacuum").build(|_| async {})?;
    /// let reindex = JobBuilder::new("0 0 3 * * *", "maintenance").name("reindex").build(|_| async {})?;
    /// assert!(JobBuilder::new("0 0 4 * * *", "maintenance").name("vacuum").build(|_| async {}).is_err());
    /// # drop((vacuum, reindex)); Ok(()) }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Run on this runtime instead of the current one (the one of
    /// [`Runtime::scope`] when the job is built, else the global one at
    /// each tick).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{cron::JobBuilder, Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// let job = JobBuilder::new("*/10 * * * * *", "jobs").name("poll").runtime(&runtime).build(|_| async {})?;
    /// # drop(job);
    /// # Ok(())
    /// # }
    /// ```
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Read the schedule in this IANA time zone (default UTC), DST
    /// included; see the [module docs](self#guarantees). Tick ids stay UTC
    /// instants.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// // 02:30 Berlin time: 00:30 UTC in summer, 01:30 UTC in winter.
    /// let builder = JobBuilder::new("0 30 2 * * *", "reports").time_zone(leader_runtime::cron::chrono_tz::Europe::Berlin);
    /// # drop(builder);
    /// ```
    pub fn time_zone(mut self, time_zone: Tz) -> Self {
        self.time_zone = time_zone;
        self
    }

    /// The [`Overlap`] policy (default [`Overlap::Skip`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::{JobBuilder, Overlap};
    ///
    /// let builder = JobBuilder::new("* * * * * *", "etl").overlap(Overlap::Allow);
    /// # drop(builder);
    /// ```
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// The [`Missed`] policy (default [`Missed::Skip`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::{JobBuilder, Missed};
    ///
    /// let builder = JobBuilder::new("0 0 * * * *", "reports").missed(Missed::Latest);
    /// # drop(builder);
    /// ```
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// How far the hosts' clocks may disagree (default 5 s, at most
    /// [`MAX_TOLERANCE`]): a tick up to this late is on time, run by
    /// whichever leader sees it first; a later one is missed and goes to
    /// the [`Missed`] policy. Zero: every late tick is missed.
    ///
    /// Above the lease's ttl it costs ticks after data loss: an earlier
    /// leader's clock may have been up to `tolerance` ahead, so after a
    /// loss (and at the job's first claim under a new lease record, such as
    /// its very first) the ticks up to tolerance − ttl past the claimer's
    /// clock are refused (recorded missed) rather than risk running one
    /// twice. Keep it at most the ttl where that matters.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// let builder = JobBuilder::new("0 * * * * *", "reports").tolerance(Duration::from_secs(30));
    /// # drop(builder);
    /// assert!(JobBuilder::new("0 * * * * *", "reports").name("r").tolerance(Duration::MAX).build(|_| async {}).is_err());
    /// ```
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Most missed ticks one catch-up of [`Missed::All`] runs (default 16,
    /// 1 to [`MAX_HISTORY`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::cron::{JobBuilder, Missed};
    ///
    /// let builder = JobBuilder::new("0 * * * * *", "billing")
    ///     .missed(Missed::All { window: Duration::from_secs(600) })
    ///     .max_catch_up(3);
    /// # drop(builder);
    /// ```
    pub fn max_catch_up(mut self, max: usize) -> Self {
        self.max_catch_up = max;
        self
    }

    /// How many of the job's last runs the backend keeps for [`history()`]
    /// (default 20, 1 to [`MAX_HISTORY`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// let builder = JobBuilder::new("0 * * * * *", "reports").history(100);
    /// # drop(builder);
    /// ```
    pub fn history(mut self, runs: usize) -> Self {
        self.history = runs;
        self
    }

    /// Stop the body when the view ends (the run's outcome is then
    /// [`Outcome::Cancelled`]); by default a body runs to its end, and
    /// [`Tick::lease`] tells it when the view ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// let builder = JobBuilder::new("0 * * * * *", "reports").cancel_on_loss(true);
    /// # drop(builder);
    /// ```
    pub fn cancel_on_loss(mut self, cancel: bool) -> Self {
        self.cancel_on_loss = cancel;
        self
    }

    /// Not public API: shift this job's clock, to play hosts whose clocks
    /// disagree in one process (tests).
    #[doc(hidden)]
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn clock_offset_ms(mut self, offset_ms: i64) -> Self {
        self.clock_offset_ms = offset_ms;
        self
    }

    /// Build the job; add it to a `JobScheduler`. The scheduler fires it
    /// every second; the job decides which of its ticks are due.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    /// use leader_runtime::cron::tokio_cron_scheduler::JobScheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let scheduler = JobScheduler::new().await?;
    /// scheduler
    ///     .add(JobBuilder::new("0 * * * * *", "reports").name("minutely").build(|tick| async move {
    ///         println!("tick {}", tick.id());
    ///     })?)
    ///     .await?;
    /// assert!(JobBuilder::new("every minute", "reports").name("bad").build(|_| async {}).is_err());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the schedule does not parse (field
    /// `"schedule"`), the name is missing, malformed or already used by a
    /// job of the group on the runtime (`"name"`), or a setting is out of
    /// range (`"tolerance"`, `"missed"`, `"max_catch_up"`, `"history"`);
    /// [`Error::InvalidGroup`].
    pub fn build<F, Fut>(self, f: F) -> Result<Job>
    where
        F: Fn(Tick) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: TickResult,
    {
        let shared = Arc::new(self.prepare(f)?);
        let registration = registry::register(&shared)?;
        Job::new_async("* * * * * *", move |_id, _scheduler| {
            let shared = shared.clone();
            let _keep = &registration;
            Box::pin(async move { shared.fire().await })
        })
        .map_err(|e| Error::Config {
            field: "schedule",
            rule: format!("the scheduler refused the job's every-second trigger ({e})"),
        })
    }

    /// The next `n` times the schedule fires after now, in the job's
    /// [`time_zone`](Self::time_zone), DST included: a local time a
    /// spring-forward day lacks fires at the first instant after the gap, a
    /// time a fall-back day has twice fires once, at the first. To check a
    /// schedule before deploying it, or in a test.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::{chrono_tz, JobBuilder};
    ///
    /// let builder = JobBuilder::new("0 30 2 * * MON-FRI", "reports")
    ///     .time_zone(chrono_tz::Europe::Berlin);
    /// for at in builder.next_fire_times(3)? {
    ///     println!("{}", at.to_rfc3339()); // e.g. 2026-12-07T02:30:00+01:00
    /// }
    /// // A field out of range is named.
    /// let err = JobBuilder::new("0 0 25 * * *", "reports").next_fire_times(1).unwrap_err();
    /// assert!(err.to_string().contains("hour 25 out of range 0-23"));
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] (field `"schedule"`) as [`build`](Self::build);
    /// field `"n"` for more than 10,000 times, `"after"` for a time in the
    /// year 5000 or later.
    pub fn next_fire_times(&self, n: usize) -> Result<Vec<DateTime<Tz>>> {
        self.next_fire_times_after(Utc::now(), n)
    }

    /// [`next_fire_times`](Self::next_fire_times) after `after` instead of
    /// now.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::{chrono_tz, JobBuilder};
    ///
    /// let after = "2026-03-28T12:00:00Z".parse().unwrap();
    /// let times = JobBuilder::new("0 30 2 * * *", "reports")
    ///     .time_zone(chrono_tz::Europe::Berlin)
    ///     .next_fire_times_after(after, 1)?;
    /// // Berlin has no 02:30 on 29 March 2026: the first instant after the gap.
    /// assert_eq!(times[0].to_rfc3339(), "2026-03-29T03:00:00+02:00");
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`next_fire_times`](Self::next_fire_times).
    pub fn next_fire_times_after(
        &self,
        after: DateTime<Utc>,
        n: usize,
    ) -> Result<Vec<DateTime<Tz>>> {
        // Bounds that keep the search finite and chrono's conversions in
        // range (a time near chrono's last one panics in a zone east of UTC).
        if n > MAX_FIRE_TIMES {
            return Err(range_err("n", "next_fire_times lists at most 10000 times"));
        }
        if after.year() >= 5000 {
            return Err(range_err("after", "must be before the year 5000"));
        }
        let cron = schedule::parse(&self.schedule)?;
        Ok(schedule::next_fire_times(&cron, &self.time_zone, after, n))
    }

    fn prepare<F, Fut>(self, f: F) -> Result<JobShared>
    where
        F: Fn(Tick) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: TickResult,
    {
        validate_group(&self.group)?;
        let cron = schedule::parse(&self.schedule)?;
        let name = self.name.ok_or_else(|| Error::Config {
            field: "name",
            rule: "is required: a cron job's name names its keys and tick ids, e.g. .name(\"hourly-report\")".to_owned(),
        })?;
        validate_name(&name)?;
        if self.tolerance > MAX_TOLERANCE {
            return Err(range_err("tolerance", "must be at most one hour"));
        }
        if let Missed::All { window } = self.missed {
            if window > MAX_WINDOW {
                return Err(range_err(
                    "missed",
                    "Missed::All's window must be at most seven days",
                ));
            }
        }
        if !(1..=MAX_HISTORY).contains(&self.max_catch_up) {
            return Err(range_err("max_catch_up", "must be 1 to 1000"));
        }
        if !(1..=MAX_HISTORY).contains(&self.history) {
            return Err(range_err("history", "must be 1 to 1000"));
        }
        let offset = TimeDelta::try_milliseconds(self.clock_offset_ms)
            .filter(|o| o.num_days().abs() < 365)
            .ok_or_else(|| range_err("clock_offset_ms", "must be within a year"))?;
        let runtime = self.runtime.or_else(global::scoped);
        // Both bounded above, so the conversions cannot fail.
        let tolerance = TimeDelta::from_std(self.tolerance).unwrap_or(TimeDelta::zero());
        let window = match self.missed {
            Missed::All { window } => TimeDelta::from_std(window).unwrap_or(TimeDelta::zero()),
            _ => TimeDelta::zero(),
        };
        Ok(JobShared {
            group: self.group,
            name,
            schedule: self.schedule,
            cron,
            time_zone: self.time_zone,
            runtime,
            overlap: self.overlap,
            missed: self.missed,
            tolerance,
            window,
            max_catch_up: self.max_catch_up,
            history: self.history,
            cancel_on_loss: self.cancel_on_loss,
            offset,
            created: Utc::now() + offset,
            claimer: u64::from(crate::util::jitter::random_u32()) << 32
                | u64::from(crate::util::jitter::random_u32()),
            tried: Mutex::new(BTreeSet::new()),
            gaps: Mutex::new(Gaps::default()),
            claiming: tokio::sync::Mutex::new(()),
            recent: Mutex::new(std::collections::VecDeque::new()),
            body: Box::new(move |tick| {
                let fut = f(tick);
                Box::pin(async move { fut.await.outcome() })
            }),
        })
    }
}

/// The instant a local time in `tz` runs at: itself; its first occurrence
/// if the day has it twice (fall back); the first instant after the gap if
/// the day does not have it (spring forward). `None` past chrono's range.
fn instant(tz: &Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => Some(at.with_timezone(&Utc)),
        LocalResult::None => {
            // The first local time after the gap: widen the step until one
            // exists (gaps are at most a day long), then bisect.
            let exists =
                |n: NaiveDateTime| !matches!(tz.from_local_datetime(&n), LocalResult::None);
            let (mut lo, mut step) = (local, TimeDelta::seconds(1));
            let mut hi = local.checked_add_signed(step)?;
            while !exists(hi) {
                if step > TimeDelta::days(3) {
                    return None;
                }
                lo = hi;
                step = step * 2;
                hi = local.checked_add_signed(step)?;
            }
            let hi = bisect(lo, hi, exists);
            tz.from_local_datetime(&hi)
                .earliest()
                .map(|at| at.with_timezone(&Utc))
        }
    }
}

/// The last second of the repeated local hour (fall back) that `local`, a
/// repeated time, lies in.
fn last_repeated(tz: &Tz, local: NaiveDateTime) -> NaiveDateTime {
    let repeated =
        |n: NaiveDateTime| matches!(tz.from_local_datetime(&n), LocalResult::Ambiguous(..));
    let (mut lo, mut step) = (local, TimeDelta::seconds(1));
    loop {
        match local.checked_add_signed(step) {
            Some(hi) if repeated(hi) && step <= TimeDelta::days(3) => {
                lo = hi;
                step = step * 2;
            }
            Some(hi) => return bisect(lo, hi, |n| !repeated(n)) - TimeDelta::seconds(1),
            None => return lo,
        }
    }
}

/// The first second in `(lo, hi]` where `after` holds, given that it does
/// not at `lo`, does at `hi`, and switches once in between.
fn bisect(
    mut lo: NaiveDateTime,
    mut hi: NaiveDateTime,
    after: impl Fn(NaiveDateTime) -> bool,
) -> NaiveDateTime {
    while hi - lo > TimeDelta::seconds(1) {
        let mid = lo + TimeDelta::seconds((hi - lo).num_seconds() / 2);
        if after(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Check a job name: 1 to 128 bytes of ASCII letters, digits and
/// `. _ : - * / , ?` (the last four for the names [`job`] derives from
/// schedules).
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let ok = (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:_-*/,?".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Config {
            field: "name",
            rule: "must be 1 to 128 bytes of ASCII letters, digits and . _ : - * / , ?".to_owned(),
        })
    }
}

/// Most fire times [`JobBuilder::next_fire_times`] lists in one call.
const MAX_FIRE_TIMES: usize = 10_000;

fn range_err(field: &'static str, rule: &str) -> Error {
    Error::Config {
        field,
        rule: rule.to_owned(),
    }
}

/// Whether a claimed tick's body may start ([`JobShared::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Marked started under our lease, and our view is still valid.
    Go,
    /// Marked started, but our view ended before the reply: not run.
    Late,
    /// Not marked started (or not known to be): not run here.
    Not(&'static str),
}

type Body =
    Box<dyn Fn(Tick) -> Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync + 'static>;

/// A tick as one firing plans it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Planned {
    at: DateTime<Utc>,
    mode: Mode,
    catch_up: bool,
}

/// Ticks missed in a gap: already late when this instance first planned
/// them (nobody could decide them on time), as opposed to ticks it saw on
/// time that waited behind a run. Only the first wait for a run in flight
/// ([`Mode::CatchUp`]); the others are skipped while one is (overlap skip).
#[derive(Debug, Default)]
struct Gaps {
    /// The latest `now` this instance planned at: ticks after it are new.
    planned_until: Option<DateTime<Utc>>,
    /// Undecided ticks (unix ms) that were late when first planned.
    ticks: BTreeSet<i64>,
    /// Ticks (unix ms) this job object claimed whose body did not start
    /// here (the view ended first, or the start failed): planned again
    /// until decided, as gap ticks. The backend decides them again only if
    /// they never started (see `claim.lua`).
    retry: BTreeSet<i64>,
}

/// What every firing of one job shares.
struct JobShared {
    group: String,
    name: String,
    schedule: String,
    cron: Cron,
    time_zone: Tz,
    /// `None`: the global runtime at each tick.
    runtime: Option<Runtime>,
    overlap: Overlap,
    missed: Missed,
    tolerance: TimeDelta,
    /// [`Missed::All`]'s window (zero for the others).
    window: TimeDelta,
    max_catch_up: usize,
    history: usize,
    cancel_on_loss: bool,
    offset: TimeDelta,
    /// When the job was built: a job the backend has no decided tick of
    /// decides none before this.
    created: DateTime<Utc>,
    /// This job object's id in its claims (random): the backend answers a
    /// claim `ours` (a retry after a lost reply: run it) only to the object
    /// that made it. A job built again (same name, same leader) has
    /// another, and a fresh memory of decided ticks: without it, the tick
    /// its predecessor last ran was `ours` to it and ran twice.
    claimer: u64,
    /// Ticks (unix ms) this instance got a decision for; the latest
    /// [`LOOK_BACK_TICKS`] of them.
    tried: Mutex<BTreeSet<i64>>,
    /// Which ticks were missed in a gap, for [`Mode::CatchUp`].
    gaps: Mutex<Gaps>,
    /// Held while one firing plans and claims, so that two firings (the
    /// scheduler spawns each) never claim the same tick.
    claiming: tokio::sync::Mutex<()>,
    /// The last runs this instance saw through, for `status()`.
    recent: Mutex<std::collections::VecDeque<Run>>,
    body: Body,
}

impl JobShared {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }

    /// The schedule's latest tick before `t` (at or before, if `inclusive`):
    /// the latest instant that a local time matching the schedule maps to
    /// (see [`instant`]) — a time in a DST gap to the first instant after
    /// the gap, a repeated time to its first occurrence.
    ///
    /// The schedule is matched against the zone's wall clock read as a
    /// naive time (croner's search in UTC, which has no DST), not by
    /// croner's own DST handling: that snaps a search step that lands in a
    /// gap to the gap's end only when hour, minute and second are single
    /// values, and then whether or not the schedule's time is in the gap
    /// (a 01:30 job ran again at 03:00 on the spring-forward day, and a
    /// `2,14` job lost its 02:30).
    fn previous(&self, t: &DateTime<Utc>, inclusive: bool) -> Option<DateTime<Utc>> {
        // Ticks are whole seconds: the latest one at or before `bound`.
        let secs = if inclusive || t.timestamp_subsec_nanos() != 0 {
            t.timestamp()
        } else {
            t.timestamp() - 1
        };
        let bound = DateTime::from_timestamp(secs, 0)?;
        let tz = &self.time_zone;
        let local = bound.with_timezone(tz).naive_local();
        // Every local time up to `local` maps to `bound` or earlier (the
        // mapping keeps order), and none after — except in the second pass
        // of a repeated hour (fall back), when the whole hour already
        // passed, at its first occurrence.
        let upto = match tz.from_local_datetime(&local) {
            LocalResult::Ambiguous(first, _) if first.with_timezone(&Utc) != bound => {
                last_repeated(tz, local)
            }
            _ => local,
        };
        let at = self
            .cron
            .find_previous_occurrence(&upto.and_utc(), true)
            .ok()?
            .naive_utc();
        instant(tz, at)
    }

    /// The ticks to decide now, oldest first: the schedule's times at or
    /// before `now` back to the last tick this instance decided and to
    /// `floor` (exclusive of earlier ones), at most [`LOOK_BACK_TICKS`]
    /// (the backend answers those decided before, across restarts, and
    /// those before the job was built while it decided none); each to run
    /// (on time, or a catch-up per the policy) or to record as missed.
    fn plan(&self, now: DateTime<Utc>, floor: Option<DateTime<Utc>>) -> Vec<Planned> {
        // croner works in whole seconds.
        let Some(now_s) = DateTime::from_timestamp(now.timestamp(), 0) else {
            return Vec::new();
        };
        let earliest = floor.unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut ticks = Vec::new();
        {
            let tried = self.tried.lock().unwrap_or_else(PoisonError::into_inner);
            let mut next = self.previous(&now_s, true);
            // (Not `Cron::iter_before`: it skips every other second of a
            // per-second schedule.)
            while let Some(t) = next {
                if t < earliest
                    || ticks.len() >= LOOK_BACK_TICKS
                    || tried.contains(&t.timestamp_millis())
                {
                    break;
                }
                ticks.push(t);
                next = self.previous(&t, false);
            }
        }
        ticks.reverse();
        let late = |t: &DateTime<Utc>| now - *t > self.tolerance;
        let gaps = {
            let mut gaps = self.gaps.lock().unwrap_or_else(PoisonError::into_inner);
            if !gaps.retry.is_empty() {
                let retry: Vec<DateTime<Utc>> = gaps
                    .retry
                    .iter()
                    .filter_map(|&ms| DateTime::from_timestamp_millis(ms))
                    .filter(|t| *t >= earliest && *t <= now && !ticks.contains(t))
                    .collect();
                ticks.extend(retry);
                ticks.sort();
                if ticks.len() > LOOK_BACK_TICKS {
                    ticks.drain(..ticks.len() - LOOK_BACK_TICKS);
                }
            }
            let seen = gaps.planned_until;
            for t in &ticks {
                if late(t) && seen.is_none_or(|seen| *t > seen) {
                    gaps.ticks.insert(t.timestamp_millis());
                }
            }
            gaps.planned_until = Some(seen.map_or(now, |seen| seen.max(now)));
            // Which of this plan's ticks are gap ticks (not a copy of the
            // whole set: this runs at every firing).
            ticks
                .iter()
                .map(|t| gaps.ticks.contains(&t.timestamp_millis()))
                .collect::<Vec<bool>>()
        };
        let missed: Vec<usize> = (0..ticks.len()).filter(|&i| late(&ticks[i])).collect();
        let mut catch_up = BTreeSet::new();
        match self.missed {
            Missed::Skip => {}
            // The latest gap tick: one already chosen may be waiting for
            // a run in flight (undecided), while a later tick, seen on
            // time, turns late behind it; choosing that one instead let
            // the catch-up go as missed and the later one be skipped as
            // overlapping, and nothing was caught up.
            Missed::Latest => catch_up.extend(
                missed
                    .iter()
                    .rev()
                    .find(|&&i| gaps[i])
                    .or(missed.last())
                    .copied(),
            ),
            Missed::All { .. } => catch_up.extend(
                missed
                    .iter()
                    .copied()
                    .filter(|&i| now - ticks[i] <= self.window)
                    .rev()
                    .take(self.max_catch_up),
            ),
        }
        ticks
            .into_iter()
            .enumerate()
            .map(|(i, at)| {
                let on_time = !late(&at);
                let mode = if on_time {
                    Mode::Run
                } else if !catch_up.contains(&i) {
                    Mode::Miss
                } else if gaps[i] {
                    Mode::CatchUp
                } else {
                    Mode::Run
                };
                Planned {
                    at,
                    mode,
                    catch_up: !on_time,
                }
            })
            .collect()
    }

    fn tried(&self, ticks: &[Planned]) {
        let mut tried = self.tried.lock().unwrap_or_else(PoisonError::into_inner);
        tried.extend(ticks.iter().map(|p| p.at.timestamp_millis()));
        while tried.len() > LOOK_BACK_TICKS {
            tried.pop_first();
        }
        let mut gaps = self.gaps.lock().unwrap_or_else(PoisonError::into_inner);
        for p in ticks {
            gaps.ticks.remove(&p.at.timestamp_millis());
            gaps.retry.remove(&p.at.timestamp_millis());
        }
        while gaps.ticks.len() > LOOK_BACK_TICKS {
            gaps.ticks.pop_first();
        }
    }

    /// Plan `at` again (a claim of it whose body did not start here), as a
    /// tick missed in a gap.
    fn retry(&self, at: DateTime<Utc>) {
        let mut gaps = self.gaps.lock().unwrap_or_else(PoisonError::into_inner);
        let ms = at.timestamp_millis();
        gaps.retry.insert(ms);
        gaps.ticks.insert(ms);
        while gaps.retry.len() > LOOK_BACK_TICKS {
            gaps.retry.pop_first();
        }
        while gaps.ticks.len() > LOOK_BACK_TICKS {
            gaps.ticks.pop_first();
        }
    }

    /// One firing of the scheduler.
    async fn fire(&self) {
        self.fire_at(self.now()).await;
    }

    /// One firing, at `now` by this host's clock.
    async fn fire_at(&self, now: DateTime<Utc>) {
        let runtime = match &self.runtime {
            Some(runtime) => runtime.clone(),
            None => match global::current() {
                Some(runtime) => runtime,
                None => return,
            },
        };
        // Only the leader looks at ticks; the gate drains this run before a
        // step-down releases the lease.
        let ran = runtime
            .run_if_leader(&self.group, || self.run_due(&runtime, now))
            .await;
        if ran.is_none() {
            tracing::trace!(group = %self.group, job = %self.name, "cron firing: not leader");
        }
    }

    async fn run_due(&self, runtime: &Runtime, now: DateTime<Utc>) {
        let Some(lease) = crate::group::admission::current_lease() else {
            return;
        };
        let ctx = runtime.cron_ctx();
        let keys = JobKeys::new(&ctx.config.key_prefix, &self.group, &self.name);
        let ttl = TimeDelta::from_std(ctx.config.ttl).unwrap_or(TimeDelta::MAX);
        // An earlier leader's clock may be up to `tolerance` ahead of ours:
        // it ran ticks up to that far past its own time. The safe start
        // covers a ttl of it; what the tolerance exceeds it by, the floors
        // below add.
        let skew = (self.tolerance - ttl).max(TimeDelta::zero());
        // A leadership that began after its record was lost or restored
        // never looks back before its own start (earlier ones may have run
        // ticks whose claims are gone).
        let (began, after_loss) = lease.tenure.began();
        let floor = after_loss.then(|| {
            let since = TimeDelta::from_std(began.elapsed()).unwrap_or(TimeDelta::MAX);
            now.checked_sub_signed(since)
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        });
        // The newest tick this firing decided: each turn plans from the
        // firing's time again, and only later ticks are its business. (A
        // plan after a run longer than the look-back reaches back past what
        // `tried` still holds: without this, it asked for the same old ticks
        // at every turn. Planning from the time now instead would keep a
        // firing claiming new ticks for as long as they come, and a drain
        // waiting for it.)
        let mut decided: Option<DateTime<Utc>> = None;
        loop {
            if !lease.is_valid() {
                return;
            }
            let (run, answer) = {
                let _claiming = self.claiming.lock().await;
                let mut plan = self.plan(now, floor);
                plan.retain(|p| decided.is_none_or(|d| p.at > d));
                // Misses up to and including the first tick to run.
                let end = plan
                    .iter()
                    .position(|p| p.mode.runs())
                    .map_or(plan.len(), |i| i + 1);
                let batch = &plan[..end];
                if batch.is_empty() {
                    return;
                }
                let ticks: Vec<(i64, Mode)> = batch
                    .iter()
                    .map(|p| (p.at.timestamp_millis(), p.mode))
                    .collect();
                // Decisions before this cannot have been lost with the lease
                // record (see claim.lua): our own view's start after a loss,
                // plus the skew beyond the ttl; else earlier leaders' ticks
                // before a loss are at most `tolerance` after it, and a
                // whole ttl (a safe start) passed between the loss and any
                // view after it.
                let floor_ms = match floor {
                    Some(f) => f.timestamp_millis().saturating_add(skew.num_milliseconds()),
                    None => {
                        let back = ttl - self.tolerance;
                        now.timestamp_millis()
                            .saturating_sub(back.num_milliseconds())
                    }
                };
                let req = ClaimRequest {
                    floor_ms,
                    group: &self.group,
                    keys: &keys,
                    id: runtime.instance_id(),
                    token: lease.token(),
                    clock_ms: now.timestamp_millis(),
                    // A restored job record: its lost decisions are before
                    // our clock, plus the skew beyond the ttl.
                    restore_floor_ms: now
                        .timestamp_millis()
                        .saturating_add(skew.num_milliseconds()),
                    created_ms: self.created.timestamp_millis(),
                    claimer: self.claimer,
                    skip_overlap: self.overlap == Overlap::Skip,
                    busy_ttl: ctx.config.ttl,
                    history_len: self.history,
                    ticks: &ticks,
                };
                let limit = ctx.config.call_timeout;
                let answer = match tokio::time::timeout(limit, ctx.backend.cron_claim(&req)).await {
                    Ok(Ok(Some(answer))) => answer,
                    Ok(Ok(None)) => {
                        tracing::debug!(group = %self.group, job = %self.name, "cron claim: the lease is no longer ours");
                        return;
                    }
                    Ok(Err(e)) => {
                        // Nothing marked as tried: the next firing asks again
                        // (a claim that went through is recognised as ours).
                        tracing::warn!(group = %self.group, job = %self.name, error = %e, "could not claim cron ticks; trying again at the next firing");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(group = %self.group, job = %self.name, after = ?limit, "cron claim timed out; trying again at the next firing");
                        return;
                    }
                };
                if answer.last() == Some(&Claimed::Wait) {
                    // Undecided: planned again at the next firing.
                    self.tried(&batch[..batch.len() - 1]);
                } else {
                    self.tried(batch);
                    decided = Some(batch[batch.len() - 1].at);
                }
                (batch[batch.len() - 1], answer)
            };
            let missed = answer
                .iter()
                .filter(|a| matches!(a, Claimed::Missed | Claimed::Refused))
                .count();
            if missed > 0 {
                metrics::missed(&self.group, &self.name, missed as u64);
                tracing::info!(group = %self.group, job = %self.name, missed, "cron ticks missed (recorded in the history)");
            }
            if answer.contains(&Claimed::Refused) {
                tracing::warn!(group = %self.group, job = %self.name, "ticks refused (recorded as missed; they may have run already): the backend holds no decisions of this job it can vouch for before now — a new job, or a lease record or job record restored or lost");
            }
            if !run.mode.runs() {
                continue;
            }
            match answer.last() {
                Some(Claimed::Wait) => {
                    // The firing that runs the job's current run goes on to
                    // this tick after it; so do later firings.
                    tracing::debug!(group = %self.group, job = %self.name, tick = %self.id(run.at), "cron catch-up waits for the run in flight");
                    return;
                }
                Some(Claimed::New | Claimed::Ours) => {
                    self.run_one(runtime, &keys, &lease, run, now).await;
                }
                Some(Claimed::Busy) => {
                    metrics::skipped(&self.group, &self.name);
                    self.remember(Run {
                        scheduled: run.at.into(),
                        instance: runtime.instance_id().to_owned(),
                        token: lease.token(),
                        started: SystemTime::now(),
                        duration: Duration::ZERO,
                        outcome: Outcome::SkippedOverlap,
                    });
                    tracing::info!(group = %self.group, job = %self.name, tick = %self.id(run.at), "cron tick skipped: a run of the job is still in flight");
                }
                _ => {}
            }
        }
    }

    fn id(&self, at: DateTime<Utc>) -> String {
        format!("{}:{}", self.name, at.timestamp_millis())
    }

    /// Run the body for a claimed tick and record how it ended.
    async fn run_one(
        &self,
        runtime: &Runtime,
        keys: &JobKeys,
        lease: &Lease,
        run: Planned,
        now: DateTime<Utc>,
    ) {
        let ctx = runtime.cron_ctx();
        let id = self.id(run.at);
        let mark = busy_mark(run.at.timestamp_millis(), lease.token());
        let started = SystemTime::now();
        let late = (self.now() - run.at).to_std().unwrap_or_default();
        let outcome = match self.start(runtime, keys, lease, run.at).await {
            Start::Not(why) => {
                // Claimed, not started: the backend decides it again (per
                // the missed-run policy) for the next leadership, or for
                // this job object when it asks for it again.
                tracing::warn!(group = %self.group, tick = %id, why, "cron tick claimed but not started; not run here: decided again per the missed-run policy");
                self.abandon(runtime, keys, lease, run, &mark, started)
                    .await;
                return;
            }
            Start::Late => {
                // Started on the server under our lease, answered after our
                // view ended: another instance may lead by now.
                tracing::warn!(group = %self.group, tick = %id, "cron tick started but the view ended before its body could start; not run");
                Outcome::Cancelled
            }
            Start::Go => {
                if run.catch_up {
                    tracing::info!(group = %self.group, job = %self.name, tick = %id, late_ms = late.as_millis() as u64, token = lease.token(), "cron tick runs late (catch-up)");
                } else {
                    tracing::debug!(group = %self.group, tick = %id, token = lease.token(), late_ms = (now - run.at).num_milliseconds(), "cron tick claimed; running");
                }
                let tick = Tick {
                    scheduled: run.at.into(),
                    started,
                    catch_up: run.catch_up,
                    id: id.clone(),
                    lease: lease.clone(),
                };
                let body = AssertUnwindSafe((self.body)(tick)).catch_unwind();
                let keep_alive = async {
                    if self.overlap != Overlap::Skip {
                        return std::future::pending().await;
                    }
                    let every = (ctx.config.ttl / 3).max(Duration::from_millis(10));
                    loop {
                        tokio::time::sleep(every).await;
                        let keep = ctx
                            .backend
                            .cron_keep(&self.group, keys, &mark, ctx.config.ttl);
                        match tokio::time::timeout(ctx.config.call_timeout, keep).await {
                            Ok(Ok(true)) => {}
                            Ok(Ok(false)) => {
                                tracing::warn!(group = %self.group, tick = %id, "the run's in-flight mark is gone (data lost?); overlapping runs are possible")
                            }
                            Ok(Err(e)) => {
                                tracing::warn!(group = %self.group, tick = %id, error = %e, "could not keep the run's in-flight mark alive")
                            }
                            Err(_) => {
                                tracing::warn!(group = %self.group, tick = %id, "keeping the run's in-flight mark alive timed out")
                            }
                        }
                    }
                };
                let lost = async {
                    if self.cancel_on_loss {
                        lease.lost().await
                    } else {
                        std::future::pending().await
                    }
                };
                tokio::select! {
                    // Redacted here, before the log, the history and `status`
                    // see it: the body's error may name a URL with its password.
                    r = body => r.map_or(Outcome::Panicked, Outcome::cleaned),
                    () = keep_alive => Outcome::Cancelled,
                    () = lost => Outcome::Cancelled,
                }
            }
        };
        let duration = started.elapsed().unwrap_or_default();
        if outcome.ran() {
            metrics::ran(&self.group, &self.name, &outcome, duration, run.catch_up);
        }
        match &outcome {
            Outcome::Panicked => {
                tracing::error!(group = %self.group, tick = %id, "cron tick body panicked")
            }
            Outcome::Error(e) => {
                tracing::warn!(group = %self.group, tick = %id, error = %e, "cron tick body failed")
            }
            _ => {}
        }
        let entry = Run {
            scheduled: run.at.into(),
            instance: runtime.instance_id().to_owned(),
            token: lease.token(),
            started,
            duration,
            outcome,
        };
        let line = entry.entry();
        let done = ctx
            .backend
            .cron_done(&self.group, keys, &mark, &line, self.history);
        match tokio::time::timeout(ctx.config.call_timeout, done).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(group = %self.group, tick = %id, error = %e, "could not record the cron run in the history")
            }
            Err(_) => {
                tracing::warn!(group = %self.group, tick = %id, "recording the cron run in the history timed out")
            }
        }
        self.remember(entry);
    }

    /// Mark the claim of `at` started, right before its body starts (see
    /// `cron_start.lua`): only then may the body start. Not sent once the
    /// view ended; bounded by what the view has left.
    async fn start(
        &self,
        runtime: &Runtime,
        keys: &JobKeys,
        lease: &Lease,
        at: DateTime<Utc>,
    ) -> Start {
        if !lease.is_valid() {
            return Start::Not("the view ended first");
        }
        let ctx = runtime.cron_ctx();
        let left = lease
            .valid_until()
            .saturating_duration_since(tokio::time::Instant::now());
        let call = ctx.backend.cron_start(
            &self.group,
            keys,
            runtime.instance_id(),
            lease.token(),
            at.timestamp_millis(),
            self.claimer,
        );
        match tokio::time::timeout(ctx.config.call_timeout.min(left), call).await {
            Ok(Ok(true)) if lease.is_valid() => Start::Go,
            Ok(Ok(true)) => Start::Late,
            Ok(Ok(false)) => {
                Start::Not("the start was refused: the lease or the claim is no longer ours")
            }
            Ok(Err(e)) => {
                tracing::warn!(group = %self.group, job = %self.name, error = %e, "could not mark the cron tick started");
                Start::Not("the start failed")
            }
            Err(_) => Start::Not("the start timed out"),
        }
    }

    /// Give up the claim of `run`, whose body did not start here: drop its
    /// busy mark, and plan the tick again (the backend decides it again
    /// only if it never started). A start that went through after all
    /// (its reply lost) is recorded [`Outcome::Cancelled`]: that tick stays
    /// decided, not run.
    async fn abandon(
        &self,
        runtime: &Runtime,
        keys: &JobKeys,
        lease: &Lease,
        run: Planned,
        mark: &str,
        started: SystemTime,
    ) {
        let ctx = runtime.cron_ctx();
        let mut entry = Run {
            scheduled: run.at.into(),
            instance: runtime.instance_id().to_owned(),
            token: lease.token(),
            started,
            duration: Duration::ZERO,
            outcome: Outcome::Cancelled,
        };
        let line = entry.entry();
        let call =
            ctx.backend
                .cron_abandon(&self.group, keys, mark, self.claimer, &line, self.history);
        match tokio::time::timeout(ctx.config.call_timeout, call).await {
            Ok(Ok(Abandoned::Started)) => {}
            Ok(Ok(Abandoned::Claimed | Abandoned::Gone)) => {
                entry.outcome = Outcome::Abandoned;
                self.retry(run.at);
            }
            Ok(Err(e)) => {
                tracing::debug!(group = %self.group, job = %self.name, error = %e, "could not give up the cron claim; its busy mark runs out");
                entry.outcome = Outcome::Abandoned;
                self.retry(run.at);
            }
            Err(_) => {
                entry.outcome = Outcome::Abandoned;
                self.retry(run.at);
            }
        }
        self.remember(entry);
    }

    fn remember(&self, run: Run) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.push_front(run);
        recent.truncate(self.history);
    }
}

/// One scheduled tick, claimed by this instance, handed to a job's body.
///
/// # Examples
///
/// ```
/// # fn _f() -> leader_runtime::Result<()> {
/// let job = leader_runtime::cron::JobBuilder::new("0 * * * * *", "reports")
///     .name("report")
///     .build(|tick| async move {
///         // An idempotency key shared by the whole fleet, and a fencing token.
///         let key = format!("report:{}", tick.id());
///         let token = tick.lease().token();
///         println!("{key} {token} {:?} late by {:?}", tick.scheduled(), tick.late());
///     })?;
/// # drop(job); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Tick {
    scheduled: SystemTime,
    started: SystemTime,
    catch_up: bool,
    id: String,
    lease: Lease,
}

impl Tick {
    /// The time the schedule fired for (a UTC instant).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     println!("running the {:?} tick", tick.scheduled());
    /// })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn scheduled(&self) -> SystemTime {
        self.scheduled
    }

    /// When the body started, by this host's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     assert!(tick.started() >= tick.scheduled() || tick.late().is_zero());
    /// })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// How much later than scheduled the body started (zero if this host's
    /// clock is behind).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     println!("{:?} late", tick.late());
    /// })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn late(&self) -> Duration {
        self.started
            .duration_since(self.scheduled)
            .unwrap_or_default()
    }

    /// Whether this is a catch-up run: a tick missed while nobody led, run
    /// late by the [`Missed`] policy (later than the clock-skew tolerance).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     if tick.catch_up() {
    ///         println!("catching up {} ({:?} late)", tick.id(), tick.late());
    ///     }
    /// })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn catch_up(&self) -> bool {
        self.catch_up
    }

    /// The tick's id, the same on every instance: `<job name>:<scheduled
    /// time in unix ms>`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::JobBuilder::new("0 * * * * *", "reports")
    ///     .name("report")
    ///     .build(|tick| async move {
    ///         // The same on every instance: an idempotency key for the tick's writes.
    ///         assert!(tick.id().starts_with("report:"));
    ///     })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The lease under which the tick runs (also [`current_lease`](crate::current_lease)
    /// inside the body).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     let token = tick.lease().token(); // for a store that rejects stale writers
    ///     println!("tick {} under token {token}", tick.id());
    /// })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

#[cfg(test)]
mod redis_tests;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;
