//! Cron jobs that run only on the leader, each scheduled tick at most once
//! fleet-wide (feature `cron`).
//!
//! Every instance adds the same [`tokio_cron_scheduler`] job to its own
//! scheduler; [`job`] wraps its body so that on each tick
//!
//! 1. only the instance that leads the group goes on (the others return at
//!    once, as a `#[leader_only]` function would);
//! 2. the leader claims the tick in the backend with `SET key NX PX …`, the
//!    key naming the tick's *scheduled* time, `{prefix}:{group}:tick:<job
//!    name>:<unix ms>`, in the group's hash slot;
//! 3. and runs the body only if that claim was new.
//!
//! So a tick runs at most once even when leadership moves between two
//! instances right around it: the old leader claimed it (and ran it), the new
//! one finds the claim and skips it.
//!
//! # Clock skew
//!
//! Each scheduler fires by its host's clock, so two hosts whose clocks differ
//! by a second fire "12:00:00" a second apart. The tick id is not the time a
//! host fired at but the schedule's own fire time it fired for (the latest
//! scheduled time at or before the host's clock), so both name the tick
//! `…:12:00:00` and only one claim succeeds.
//!
//! Skew can also make a tick fall between two leaders: with the new leader's
//! clock a second ahead of the old one's, the old leader is stopped before its
//! clock reaches 12:00:00, and the new leader's clock was already past it
//! when it took over. To keep such a tick from being lost, the leader also
//! looks back: each firing claims (oldest first) every scheduled time within
//! [`JobBuilder::tolerance`] (default 5 s) before the current one that nobody
//! claimed, and runs it late. So with clocks within `tolerance` of each other
//! and a handover shorter than `tolerance`, every tick runs exactly once; a
//! tick that falls into a longer gap (a crashed leader's lease running out,
//! a Redis outage) is skipped, never run twice. Look-back never reaches
//! before the job was built, so a new deploy does not replay the past.
//!
//! Claims expire after `3 × tolerance + 60 s`, long enough that every host
//! that could still consider a tick sees its claim.
//!
//! # Examples
//!
//! ```no_run
//! use tokio_cron_scheduler::JobScheduler;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! leader_runtime::init(
//!     leader_runtime::Config::builder().redis_url("redis://127.0.0.1:6379").build()?,
//! )?;
//! let scheduler = JobScheduler::new().await?;
//! // Every replica adds the job; each minute it runs on one of them.
//! scheduler
//!     .add(leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
//!         println!("report for {:?}", tick.scheduled());
//!     })?)
//!     .await?;
//! scheduler.start().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeDelta, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use tokio_cron_scheduler::Job;

use crate::names::validate_group;
use crate::{global, Error, Lease, Result, Runtime};

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

/// Most ticks one firing looks back at.
const MAX_LOOK_BACK: usize = 64;

/// A tokio-cron-scheduler job on `schedule` (six fields, seconds first, UTC:
/// `"0 */5 * * * *"`) whose body `f` runs only on the instance that leads
/// `group`, each tick at most once fleet-wide; see the [module docs](self).
///
/// The job uses the runtime that is current when it is built (the one of
/// [`Runtime::scope`], else the global one at each tick); use
/// [`JobBuilder::runtime`] to choose another, [`JobBuilder::name`] when one
/// group has two jobs on the same schedule.
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, MemoryBackend, Runtime};
/// use tokio_cron_scheduler::JobScheduler;
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
/// [`Error::Config`] (field `"schedule"`) when the schedule does not parse;
/// [`Error::InvalidGroup`].
pub fn job<F, Fut>(schedule: &str, group: &str, f: F) -> Result<Job>
where
    F: Fn(Tick) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    JobBuilder::new(schedule, group).build(f)
}

/// A [`job`] with options.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_runtime::{cron::JobBuilder, Config, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let job = JobBuilder::new("0 0 * * * *", "maintenance")
///     .name("vacuum")
///     .runtime(&runtime)
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
    tolerance: Duration,
    clock_offset_ms: i64,
}

impl JobBuilder {
    /// A job on `schedule` gated on `group`; see [`job`].
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = JobBuilder::new("0 */15 * * * *", "reports").build(|_tick| async {})?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn new(schedule: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            schedule: schedule.into(),
            group: group.into(),
            name: None,
            runtime: None,
            tolerance: DEFAULT_TOLERANCE,
            clock_offset_ms: 0,
        }
    }

    /// The job's name in its tick keys (default: the schedule, spaces as
    /// `_`). Two jobs of one group on the same schedule need different
    /// names, or they share their ticks and only one runs. Same alphabet as
    /// group names: ASCII letters, digits, `.`, `_`, `:`, `-`.
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
    /// # drop((vacuum, reindex)); Ok(()) }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Run on this runtime instead of the current one.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{cron::JobBuilder, Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// let job = JobBuilder::new("*/10 * * * * *", "jobs").runtime(&runtime).build(|_| async {})?;
    /// # drop(job);
    /// # Ok(())
    /// # }
    /// ```
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// How far the hosts' clocks may disagree, and how far back a leader
    /// looks for ticks nobody claimed (default 5 s); see the
    /// [module docs](self#clock-skew). Zero turns look-back off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::cron::JobBuilder;
    ///
    /// let builder = JobBuilder::new("0 * * * * *", "reports").tolerance(Duration::from_secs(30));
    /// # drop(builder);
    /// ```
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Not public API: shift this job's clock, to play hosts whose clocks
    /// disagree in one process (tests).
    #[doc(hidden)]
    pub fn clock_offset_ms(mut self, offset_ms: i64) -> Self {
        self.clock_offset_ms = offset_ms;
        self
    }

    /// Build the job; add it to a `JobScheduler`.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::cron::JobBuilder;
    /// use tokio_cron_scheduler::JobScheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let scheduler = JobScheduler::new().await?;
    /// scheduler
    ///     .add(JobBuilder::new("0 * * * * *", "reports").build(|tick| async move {
    ///         println!("tick {}", tick.id());
    ///     })?)
    ///     .await?;
    /// assert!(JobBuilder::new("every minute", "reports").build(|_| async {}).is_err());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] (field `"schedule"`, or `"name"`) when the schedule
    /// does not parse or the name is not a valid identifier;
    /// [`Error::InvalidGroup`].
    pub fn build<F, Fut>(self, f: F) -> Result<Job>
    where
        F: Fn(Tick) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let shared = Arc::new(self.prepare(f)?);
        let schedule = shared.schedule_text.clone();
        Job::new_async(schedule, move |_id, _scheduler| {
            let shared = shared.clone();
            Box::pin(async move { shared.fire().await })
        })
        .map_err(|e| schedule_err(&e))
    }

    fn prepare<F, Fut>(self, f: F) -> Result<Shared>
    where
        F: Fn(Tick) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        validate_group(&self.group)?;
        let schedule_text = Job::schedule_to_cron(&self.schedule).map_err(|e| schedule_err(&e))?;
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .dom_and_dow(true)
            .build()
            .parse(&schedule_text)
            .map_err(|e| schedule_err(&e))?;
        let name = match self.name {
            Some(name) => {
                validate_group(&name).map_err(|e| match e {
                    Error::InvalidGroup { rule, .. } => Error::Config {
                        field: "name",
                        rule: rule.to_owned(),
                    },
                    other => other,
                })?;
                name
            }
            None => schedule_text
                .split_whitespace()
                .collect::<Vec<_>>()
                .join("_"),
        };
        let offset = TimeDelta::milliseconds(self.clock_offset_ms);
        let runtime = self.runtime.or_else(global::scoped);
        let tolerance = TimeDelta::from_std(self.tolerance).unwrap_or(TimeDelta::MAX);
        let shared = Shared {
            group: self.group,
            name,
            schedule_text,
            cron,
            runtime,
            tolerance,
            claim_ttl: self.tolerance.saturating_mul(3) + Duration::from_secs(60),
            offset,
            created: Utc::now() + offset,
            last_tried: Mutex::new(None),
            body: Box::new(move |tick| Box::pin(f(tick))),
        };
        Ok(shared)
    }
}

fn schedule_err(e: &dyn std::fmt::Display) -> Error {
    Error::Config {
        field: "schedule",
        rule: format!(
            "must be a cron expression with six fields, seconds first, e.g. \"0 */5 * * * *\" ({e})"
        ),
    }
}

type Body =
    Box<dyn Fn(Tick) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync + 'static>;

/// What every firing of one job shares.
struct Shared {
    group: String,
    name: String,
    schedule_text: String,
    cron: Cron,
    /// `None`: the global runtime at each tick.
    runtime: Option<Runtime>,
    tolerance: TimeDelta,
    claim_ttl: Duration,
    offset: TimeDelta,
    /// Look-back never reaches before this.
    created: DateTime<Utc>,
    /// The latest tick whose claim this instance tried and got an answer for:
    /// every tick up to it is claimed by someone.
    last_tried: Mutex<Option<DateTime<Utc>>>,
    body: Body,
}

impl Shared {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }

    /// The ticks to try now, oldest first: the schedule's latest fire time at
    /// or before `now`, and those within `tolerance` before it that this
    /// instance has not tried yet.
    fn due(&self, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let Some(now) = DateTime::from_timestamp(now.timestamp(), 0) else {
            return Vec::new();
        };
        let Ok(current) = self.cron.find_previous_occurrence(&now, true) else {
            return Vec::new();
        };
        let last_tried = *self
            .last_tried
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let earliest = current
            .checked_sub_signed(self.tolerance)
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
            .max(self.created);
        let fresh = |t: &DateTime<Utc>| last_tried.is_none_or(|last| *t > last);
        let mut due = vec![current];
        // (Not `Cron::iter_before`: it skips every other second of a
        // per-second schedule.)
        while due.len() <= MAX_LOOK_BACK {
            match self
                .cron
                .find_previous_occurrence(&due[due.len() - 1], false)
            {
                Ok(earlier) if earlier >= earliest && fresh(&earlier) => due.push(earlier),
                _ => break,
            }
        }
        due.retain(fresh);
        due.reverse();
        due
    }

    fn tried(&self, tick: DateTime<Utc>) {
        let mut last = self
            .last_tried
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|l| tick > l) {
            *last = Some(tick);
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
            tracing::trace!(group = %self.group, job = %self.name, "cron tick: not leader");
        }
    }

    async fn run_due(&self, runtime: &Runtime, now: DateTime<Utc>) {
        let Some(lease) = crate::current_lease() else {
            return;
        };
        for scheduled in self.due(now) {
            if !lease.is_valid() {
                return;
            }
            let id = format!("{}:{}", self.name, scheduled.timestamp_millis());
            let value = format!("{} {}", runtime.instance_id(), lease.token());
            match runtime
                .claim_tick(&self.group, &id, &value, self.claim_ttl)
                .await
            {
                Ok(true) => {
                    self.tried(scheduled);
                    let late = now - scheduled;
                    tracing::debug!(group = %self.group, tick = %id, token = lease.token(), late_ms = late.num_milliseconds(), "cron tick claimed; running");
                    let tick = Tick {
                        scheduled: SystemTime::from(scheduled),
                        id,
                        lease: lease.clone(),
                    };
                    (self.body)(tick).await;
                }
                Ok(false) => {
                    self.tried(scheduled);
                    tracing::debug!(group = %self.group, tick = %id, "cron tick already claimed; skipped");
                }
                Err(e) => {
                    // Not marked as tried: the next firing looks again
                    // (within the tolerance).
                    tracing::warn!(group = %self.group, tick = %id, error = %e, "could not claim cron tick; not run");
                }
            }
        }
    }
}

/// One scheduled tick, claimed by this instance, handed to a [`job`]'s body.
///
/// # Examples
///
/// ```
/// # fn _f() -> leader_runtime::Result<()> {
/// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
///     // An idempotency key shared by the whole fleet, and a fencing token.
///     let key = format!("report:{}", tick.id());
///     let token = tick.lease().token();
///     println!("{key} {token} {:?}", tick.scheduled());
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Tick {
    scheduled: SystemTime,
    id: String,
    lease: Lease,
}

impl Tick {
    /// The time the schedule fired for (not the time the body started: a
    /// tick run after a handover starts late).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     let late = tick.scheduled().elapsed().unwrap_or_default();
    ///     println!("running the {:?} tick {late:?} after it was due", tick.scheduled());
    /// })?;
    /// # drop(job); Ok(()) }
    /// ```
    pub fn scheduled(&self) -> SystemTime {
        self.scheduled
    }

    /// The tick's id, the same on every instance: `<job name>:<scheduled
    /// time in unix ms>`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn f() -> leader_runtime::Result<()> {
    /// let job = leader_runtime::cron::job("0 * * * * *", "reports", |tick| async move {
    ///     // The same on every instance: an idempotency key for the tick's writes.
    ///     assert!(tick.id().starts_with("0_*_*_*_*_*:"));
    /// })?;
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
mod tests;
