//! Startup work: a body that runs to success once per name, fleet-wide and
//! across restarts, while the other callers wait for its result.
//!
//! Built on the election of a group per name (`once:<name>`): the caller
//! whose election wins runs the body admitted under that lease (so
//! `current_lease()`, fencing tokens, the drain and loss are the ones of
//! every gated body), and records the outcome with one backend call that
//! applies only while the lease is still its own under its token
//! (`backend/scripts/once.lua`). Every other caller waits for the result: it reads
//! it every `retry_interval`, and its own election takes over the lease when
//! the runner releases it (a failure) or stops renewing it (a crash).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::{sleep, sleep_until, Instant};

use crate::backend::once::{Holder, OnceKeys, Step, Stored, Verdict};
use crate::backend::{self};
use crate::group::admission;
use crate::group::lease::Lease;
use crate::group::Group;
use crate::names::{validate_group, MAX_GROUP_LEN};
use crate::observe::events::Event;
use crate::runtime::global;
use crate::{BodyError, Error, Result, Runtime};

/// The group of a run-once name is this prefix and the name.
const GROUP_PREFIX: &str = "once:";

/// The longest summary and error text stored, in bytes (longer ones are cut).
const MAX_TEXT: usize = 1024;

/// How often a runner retries recording its outcome after a backend error,
/// while its lease is valid.
const RECORD_RETRY: Duration = Duration::from_millis(100);

/// How to run a body once per name, fleet-wide: the name, how long a caller
/// waits for another instance's result, how many attempts the fleet makes.
///
/// [`once`] and [`Runtime::once`] use the defaults; build a `Once` for
/// others.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_runtime::{Config, MemoryBackend, Once, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let done = Once::new("seed-2026-12")
///     .timeout(Duration::from_secs(60)) // wait at most this for another instance's run
///     .attempts(5)                      // fleet-wide, crashed attempts included
///     .run_on(&runtime, || async { Ok::<_, std::io::Error>("seeded 3 rows") })
///     .await?;
/// assert_eq!(done.summary, "seeded 3 rows");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a `Once` does nothing until `run` or `run_on`"]
pub struct Once {
    name: String,
    timeout: Duration,
    attempts: u32,
}

impl Once {
    /// How long a caller waits for a result by default: 5 minutes.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

    /// How many attempts the fleet makes by default: 3.
    pub const DEFAULT_ATTEMPTS: u32 = 3;

    /// The run-once `name`: the rules of a group name (ASCII letters,
    /// digits, `. _ : -`), at most 123 bytes. Use a new name for each piece
    /// of work (`"migrate-2026-12"`): a name that succeeded never runs again.
    ///
    /// # Examples
    ///
    /// ```
    /// let migrate = leader_runtime::Once::new("migrate-2026-12");
    /// # drop(migrate);
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            timeout: Self::DEFAULT_TIMEOUT,
            attempts: Self::DEFAULT_ATTEMPTS,
        }
    }

    /// How long a call waits for the result (another instance running the
    /// body, a crashed runner's lease to expire, its own turn) before it
    /// returns [`Error::OnceTimeout`]. It bounds the wait, not a body this
    /// call runs: that runs to its end (bound it inside if you must).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let migrate = leader_runtime::Once::new("migrate-2026-12").timeout(Duration::from_secs(900));
    /// # drop(migrate);
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many attempts the fleet makes, counted in the backend across
    /// instances and restarts: every attempt started counts, whether its
    /// body returned an error or its runner stopped before recording
    /// anything (a crash, a lost lease, a dropped call). Once `attempts`
    /// were started and none may still run — nobody holds the name's lease,
    /// its last holder can no longer believe it leads (a lease key evicted
    /// or deleted early does not count as ended), and no runner that lost
    /// the lease mid-body still says its body runs (it does so every
    /// `renew_interval` while the body runs; a crashed one stops) — a call
    /// returns [`Error::OnceFailed`] instead of running or waiting: a
    /// waiter learns it at its next read (every `retry_interval`), or when
    /// its own election wins the lease. The limit is the caller's: a call
    /// with a higher one, or [`Runtime::reset_once`], allows more. At least
    /// 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let migrate = leader_runtime::Once::new("migrate-2026-12").attempts(1); // never retry
    /// # drop(migrate);
    /// ```
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Run `body` once per name on the current runtime (the one of
    /// [`Runtime::scope`], else the global one); see [`Runtime::once`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> leader_runtime::Result<()> {
    /// use std::time::Duration;
    ///
    /// let done = leader_runtime::Once::new("migrate-2026-12")
    ///     .timeout(Duration::from_secs(900))
    ///     .run(|| async { Ok::<_, std::io::Error>("added column users.locale") })
    ///     .await?;
    /// println!("{} by {} under token {}", done.summary, done.instance_id, done.token);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotConfigured`] without a runtime; otherwise as [`Runtime::once`].
    pub async fn run<F, Fut, S, E>(self, body: F) -> Result<OnceRecord>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
        S: Into<String>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let runtime = global::current().ok_or(Error::NotConfigured)?;
        self.run_on(&runtime, body).await
    }

    /// Run `body` once per name on `runtime`; see [`Runtime::once`].
    ///
    /// # Errors
    ///
    /// As [`Runtime::once`].
    pub async fn run_on<F, Fut, S, E>(self, runtime: &Runtime, body: F) -> Result<OnceRecord>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
        S: Into<String>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        Call::new(runtime, &self)?.run(body).await
    }
}

/// A name's success, as recorded in the backend: who ran it, when, under
/// which token, and the body's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OnceRecord {
    /// The run-once name.
    pub name: String,
    /// The instance that ran the body to success.
    pub instance_id: String,
    /// The fencing token of the lease it ran under.
    pub token: u64,
    /// When the success was recorded (the backend's clock).
    pub finished_at: SystemTime,
    /// What the body returned (at most 1 KiB: longer ones are cut).
    pub summary: String,
    /// Attempts made fleet-wide, the successful one included.
    pub attempts: u32,
    /// Whether the recorded success is this call's run (not stored: the
    /// caller's own view). `false` does not mean the body did not run
    /// here: a runner deposed mid-run whose body still finished after its
    /// successor recorded gets that successor's record, and `false`.
    pub ran_here: bool,
}

/// What the backend holds for a run-once name: its success if any, and the
/// attempts so far; see [`Runtime::once_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OnceStatus {
    /// The run-once name.
    pub name: String,
    /// The success, if the body ran to one.
    pub done: Option<OnceRecord>,
    /// Attempts started, fleet-wide (crashed ones included).
    pub attempts: u32,
    /// Attempts that ended with an error.
    pub failures: u32,
    /// The text of the latest failure (or of an attempt that ended without
    /// a result), credentials redacted.
    pub last_error: Option<String>,
}

/// Run `body` once per `name` across the fleet, on the current runtime, with
/// the default timeout and attempts (see [`Once`] for others); see
/// [`Runtime::once`].
///
/// # Examples
///
/// ```no_run
/// # async fn apply_schema() -> Result<(), std::io::Error> { Ok(()) }
/// # async fn example() -> leader_runtime::Result<()> {
/// // On every replica, at start-up, before serving:
/// let done = leader_runtime::once("migrate-2026-12", || async {
///     apply_schema().await?;
///     Ok::<_, std::io::Error>("added column users.locale")
/// })
/// .await?;
/// println!("schema ready: {} (by {})", done.summary, done.instance_id);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as [`Runtime::once`].
pub async fn once<F, Fut, S, E>(name: &str, body: F) -> Result<OnceRecord>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = std::result::Result<S, E>>,
    S: Into<String>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Once::new(name).run(body).await
}

impl Runtime {
    /// Run `body` to success at most once per `name` across the fleet and
    /// across restarts, and return the recorded result everywhere.
    ///
    /// - The caller that wins `name`'s lease (group `once:<name>`) runs
    ///   `body` under it, like a gated body: [`current_lease`](crate::current_lease)
    ///   answers inside, with a fencing token greater than any earlier
    ///   runner's. On `Ok(summary)` it records who, when, the token and the
    ///   summary — one backend call that applies only while the lease is
    ///   still its own under that token — then releases the lease.
    /// - Every other caller waits (at most [`Once::timeout`], 5 minutes by
    ///   default) and returns the record. A caller that comes after the
    ///   success gets the record at once, without running anything.
    /// - If the runner crashes, its lease expires and a waiter's election
    ///   takes it over (within one `ttl`) and runs its own `body`, under a
    ///   greater token; so write through the token (see
    ///   [Fencing](crate#fencing)) or make the body idempotent.
    /// - An error ends the attempt: no success is recorded (the failure and
    ///   its redacted text are), the lease is released, this call returns
    ///   [`Error::OnceBody`] with the body's error, and the next waiter (or
    ///   the next call) tries again, until [`Once::attempts`] attempts were
    ///   started (3 by default, crashed ones included); then every caller
    ///   gets [`Error::OnceFailed`] with the last error's text.
    ///
    /// The record lives in the backend: a Redis that loses its data (a
    /// restart without persistence, an older snapshot restored, eviction
    /// under an `allkeys-*` policy) forgets it, and the body runs again. So
    /// keep the body idempotent (`CREATE … IF NOT EXISTS`, a schema version
    /// in your own store) when running it twice would hurt.
    ///
    /// Calls with one name on one runtime take turns. On Redis, the first
    /// election of a name's group waits one `ttl` before its view begins
    /// (the safe start: a missing record may be a Redis that lost its data),
    /// so the first run of a new name starts one `ttl` after the first call.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let shared = MemoryBackend::new();
    /// let a = Runtime::new(Config::builder().memory(shared.clone()).instance_id("a").build()?)?;
    /// let b = Runtime::new(Config::builder().memory(shared.clone()).instance_id("b").build()?)?;
    /// let done = a
    ///     .once("migrate-2026-12", || async {
    ///         let token = leader_runtime::current_lease().unwrap().token();
    ///         // ... the schema change, fenced with `token` ...
    ///         Ok::<_, std::io::Error>(format!("migrated under token {token}"))
    ///     })
    ///     .await?;
    /// assert!(done.ran_here);
    /// // Later callers (here another instance) get the record without running:
    /// let seen = b.once("migrate-2026-12", || async { Ok::<_, std::io::Error>("never") }).await?;
    /// assert!(!seen.ran_here);
    /// assert_eq!((seen.instance_id.as_str(), seen.token), ("a", done.token));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidGroup`] for a bad name, [`Error::Config`] for
    ///   `attempts(0)`, [`Error::ShutDown`] when the runtime stops;
    /// - [`Error::OnceBody`]: this call ran `body` and it failed;
    /// - [`Error::OnceFailed`]: the attempts are used up;
    /// - [`Error::OnceTimeout`]: no result within the timeout (the backend
    ///   unreachable all along, or another instance still running);
    /// - [`Error::OnceUnrecorded`]: `body` succeeded here but was not known
    ///   to be recorded: another attempt started after this one lost the
    ///   lease, or the backend did not answer. A body that succeeds after
    ///   losing the lease is still recorded when no later attempt started
    ///   meanwhile; unless it was (a reply lost on the way), another
    ///   instance runs it again.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the body, counts nothing more (the attempt
    /// stays counted) and releases the lease, so a waiter takes over at once.
    pub async fn once<F, Fut, S, E>(&self, name: &str, body: F) -> Result<OnceRecord>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
        S: Into<String>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        Once::new(name).run_on(self, body).await
    }

    /// What the backend holds for the run-once `name`: its success, if any,
    /// and the attempts and failures so far. One read, no lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// assert!(runtime.once_status("migrate-2026-12").await?.done.is_none());
    /// runtime.once("migrate-2026-12", || async { Ok::<_, std::io::Error>("ok") }).await?;
    /// let status = runtime.once_status("migrate-2026-12").await?;
    /// assert_eq!((status.done.unwrap().summary.as_str(), status.attempts), ("ok", 1));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`] for a bad name; the backend's error or timeout.
    pub async fn once_status(&self, name: &str) -> Result<OnceStatus> {
        let group = group_of(name)?;
        let keys = OnceKeys::new(&self.config().key_prefix, &group);
        let limit = self.config().call_timeout;
        let (_, stored) = backend::within(
            &group,
            limit,
            self.ctx()
                .backend
                .once_read(&group, &keys, self.config().ttl),
        )
        .await?;
        Ok(status(name, stored))
    }

    /// Forget the attempts and failures of the run-once `name`, so that the
    /// next call runs it again with its full [`Once::attempts`] — after a
    /// fix for a body that failed on every attempt. A success is never
    /// forgotten (use a new name to run new work), and nothing is reset
    /// while an instance holds the name's lease (an attempt may be running,
    /// and must stay counted). Returns the status after.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, Error, MemoryBackend, Once, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// let broken = || async { Err::<&str, _>("bad SQL") };
    /// let failed = Once::new("migrate").attempts(1).run_on(&runtime, broken).await;
    /// assert!(matches!(failed, Err(Error::OnceBody { .. })));
    /// let again = Once::new("migrate").attempts(1).run_on(&runtime, broken).await;
    /// assert!(matches!(again, Err(Error::OnceFailed { attempts: 1, .. })));
    ///
    /// runtime.reset_once("migrate").await?; // after the fix:
    /// let fixed = Once::new("migrate").attempts(1).run_on(&runtime, || async { Ok::<_, Error>("ok") });
    /// assert!(fixed.await?.ran_here);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`] for a bad name; [`Error::OnceBusy`] while the
    /// name's lease is held; the backend's error or timeout.
    pub async fn reset_once(&self, name: &str) -> Result<OnceStatus> {
        let group = group_of(name)?;
        let keys = OnceKeys::new(&self.config().key_prefix, &group);
        let limit = self.config().call_timeout;
        let reset = self
            .ctx()
            .backend
            .once_reset(&group, &keys, self.config().ttl);
        match backend::within(&group, limit, reset).await? {
            (Verdict::Busy, _) => Err(Error::OnceBusy {
                name: name.to_owned(),
            }),
            (verdict, stored) => {
                if verdict != Verdict::Done {
                    tracing::info!(name, "once: attempts and failures reset");
                }
                Ok(status(name, stored))
            }
        }
    }
}

/// The group of run-once `name`, after checking the name.
fn group_of(name: &str) -> Result<String> {
    validate_group(name)?;
    let group = format!("{GROUP_PREFIX}{name}");
    if group.len() > MAX_GROUP_LEN {
        return Err(Error::InvalidGroup {
            group: name.to_owned(),
            rule: "a run-once name must be at most 123 bytes (its group is `once:<name>`)",
        });
    }
    Ok(group)
}

fn status(name: &str, stored: Stored) -> OnceStatus {
    OnceStatus {
        name: name.to_owned(),
        done: record(name, &stored, None),
        attempts: stored.attempts,
        failures: stored.failures,
        last_error: (!stored.error.is_empty()).then_some(stored.error),
    }
}

/// The success in `stored`, if any; `ran_under`: the token this call ran
/// the body under, if it did.
fn record(name: &str, stored: &Stored, ran_under: Option<u64>) -> Option<OnceRecord> {
    let done = stored.done.as_ref()?;
    Some(OnceRecord {
        name: name.to_owned(),
        instance_id: done.by.clone(),
        token: done.token,
        // A time no clock writes (not one the script wrote) shows as the
        // epoch, as a pause's does.
        finished_at: crate::util::clock::wall_time_from_unix_ms(done.at_ms).unwrap_or(UNIX_EPOCH),
        summary: done.summary.clone(),
        attempts: stored.attempts,
        ran_here: ran_under == Some(done.token),
    })
}

/// `text` cut to [`MAX_TEXT`] bytes (at a character boundary).
fn bounded(mut text: String, name: &str, what: &str) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        tracing::warn!(
            name,
            len = text.len(),
            "once: {what} longer than {MAX_TEXT} bytes, cut"
        );
        text.truncate(end);
    }
    text
}

/// One call of [`Once::run_on`].
struct Call<'a> {
    rt: &'a Runtime,
    name: &'a str,
    group: String,
    keys: OnceKeys,
    timeout: Duration,
    attempts: u32,
    /// In a burst of failed reads (log only its first at WARN).
    reads_failing: AtomicBool,
    /// In a burst of failed steps under the lease (likewise; apart from
    /// the reads, which may succeed in between).
    steps_failing: AtomicBool,
}

impl<'a> Call<'a> {
    fn new(rt: &'a Runtime, spec: &'a Once) -> Result<Self> {
        let group = group_of(&spec.name)?;
        if spec.attempts == 0 {
            return Err(Error::config("attempts", "must be at least 1"));
        }
        Ok(Self {
            rt,
            name: &spec.name,
            keys: OnceKeys::new(&rt.config().key_prefix, &group),
            group,
            timeout: spec.timeout,
            attempts: spec.attempts,
            reads_failing: AtomicBool::new(false),
            steps_failing: AtomicBool::new(false),
        })
    }

    async fn run<F, Fut, S, E>(&self, body: F) -> Result<OnceRecord>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
        S: Into<String>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let deadline = crate::util::clock::deadline_in(self.timeout);
        let _turn = tokio::time::timeout_at(deadline, turn(self.rt.id(), self.name))
            .await
            .map_err(|_| self.timed_out())?;
        // Before registering, so that no election of ours is missed.
        let mut events = self.rt.subscribe();
        if let Some(settled) = self.read().await {
            return settled;
        }
        let registration = Registration::new(self.rt, &self.group)?;
        let result = self
            .wait_or_run(&registration.group, &mut events, deadline, body)
            .await;
        registration.release().await;
        result
    }

    /// Until settled: run the attempt while leading, else wait for the
    /// election or the next read of the result.
    async fn wait_or_run<F, Fut, S, E>(
        &self,
        group: &Arc<Group>,
        events: &mut broadcast::Receiver<Event>,
        deadline: Instant,
        body: F,
    ) -> Result<OnceRecord>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
        S: Into<String>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let poll = self.rt.config().retry_interval;
        let mut body = Some(body);
        let mut next_read = Instant::now() + poll;
        loop {
            if !self.rt.is_running() {
                return Err(Error::ShutDown);
            }
            if group.is_leader() && Instant::now() < deadline {
                let attempt = self.attempt(group, &mut body);
                if let Some(Some(settled)) = admission::run(group, false, attempt).await {
                    return settled;
                }
            }
            if Instant::now() >= deadline {
                return Err(self.timed_out());
            }
            tokio::select! {
                _ = elected(events, &self.group) => {}
                _ = sleep_until(next_read.min(deadline)) => {}
            }
            if Instant::now() >= next_read {
                next_read = Instant::now() + poll;
                if let Some(settled) = self.read().await {
                    return settled;
                }
            }
        }
    }

    /// Under the lease: start an attempt and run the body, or learn that
    /// there is nothing to run. `None`: not settled (the lease is not ours
    /// after all, or the backend failed): wait and try again.
    async fn attempt<F, Fut, S, E>(
        &self,
        group: &Group,
        body: &mut Option<F>,
    ) -> Option<Result<OnceRecord>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
        S: Into<String>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let lease = admission::current_lease()?;
        let id = &self.rt.config().instance_id;
        let holder = Holder {
            group: &self.group,
            keys: &self.keys,
            id,
            token: lease.token(),
        };
        let limit = self.attempts;
        // A backend error is logged by `step`; the caller tries again.
        let (verdict, stored) = self.step(&holder, Step::Begin { limit }).await.ok()?;
        match verdict {
            Verdict::Run => {}
            Verdict::Done => return record(self.name, &stored, None).map(Ok),
            Verdict::Failed => return Some(Err(self.failed(stored))),
            Verdict::Lost | Verdict::Open | Verdict::Held | Verdict::Busy => return None,
        }
        // Answered after our view ended (a slow reply, as cron's `run_one`
        // checks too): another instance may lead and run its own attempt by
        // now. The attempt stays counted, as for a runner that died in it.
        if !lease.is_valid() {
            tracing::warn!(
                name = self.name,
                token = holder.token,
                "once: the attempt was started, but the answer came after this instance's view ended: not running the body"
            );
            return None;
        }
        // Out of the race from now on (the flag only: the lease stays ours
        // while we hold it). This call ends with this attempt, so its group
        // is forgotten anyway; but if the lease is lost while the body runs,
        // our own election must not take it again (under a token the body
        // did not run under) and keep it from the waiters. Set here, before
        // the body, it is in place before any loss.
        group.control.set_eligible(false);
        let Some(body) = body.take() else {
            // A call settles once its body ran: a second start is a bug.
            return Some(Err(Error::Protocol {
                group: self.group.clone(),
                message: "once: asked to run the body a second time".to_owned(),
            }));
        };
        let attempt = stored.attempts;
        tracing::info!(
            name = self.name,
            attempt,
            token = holder.token,
            "once: running the body"
        );
        match self.run_body(body, &holder, &lease).await {
            Ok(summary) => {
                let summary = bounded(summary.into(), self.name, "summary");
                Some(self.record_done(&holder, &lease, &summary).await)
            }
            Err(e) => {
                let source = BodyError::new(e.into());
                let text = bounded(source.to_string(), self.name, "error text");
                tracing::warn!(name = self.name, attempt, token = holder.token, error = %text, "once: the body failed");
                self.record_failure(&holder, &lease, &text).await;
                Some(Err(Error::OnceBody {
                    name: self.name.to_owned(),
                    attempt,
                    message: text,
                    source,
                }))
            }
        }
    }

    /// Run the body to its end. If the lease is lost meanwhile (the
    /// election is out of the race already, see `attempt`), say so, and
    /// keep telling the backend that the attempt still runs (every
    /// `renew_interval`, for one `ttl` each time) until it ends: until then
    /// no waiter concludes that the attempts are used up, and its outcome
    /// is still recorded unless a later attempt started meanwhile.
    async fn run_body<F, Fut, S, E>(
        &self,
        body: F,
        holder: &Holder<'_>,
        lease: &Lease,
    ) -> Fut::Output
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<S, E>>,
    {
        let body = body();
        tokio::pin!(body);
        tokio::select! {
            biased;
            out = &mut body => return out,
            _ = lease.lost() => {}
        }
        tracing::warn!(
            name = self.name,
            token = lease.token(),
            "once: the lease was lost while the body runs; its outcome is recorded unless another attempt starts first"
        );
        let config = self.rt.config();
        let (ttl, every) = (config.ttl, config.renew_interval);
        loop {
            let beat = self.step(holder, Step::Alive { ttl });
            tokio::select! {
                biased;
                out = &mut body => return out,
                said = beat => {
                    // A later attempt started, or the name is done: no more
                    // to say. (A backend error is logged by `step`; the next
                    // beat tries again.)
                    if let Ok((Verdict::Lost | Verdict::Done, _)) = said {
                        break;
                    }
                }
            }
            tokio::select! {
                biased;
                out = &mut body => return out,
                () = sleep(every) => {}
            }
        }
        body.await
    }

    /// Record the success, retrying a backend error while the lease is valid.
    async fn record_done(
        &self,
        holder: &Holder<'_>,
        lease: &Lease,
        summary: &str,
    ) -> Result<OnceRecord> {
        let stored = loop {
            match self.step(holder, Step::Done { summary }).await {
                Ok((_, stored)) => break Some(stored),
                Err(_) if lease.is_valid() => sleep(RECORD_RETRY).await,
                // The script may have run and only its reply been lost:
                // look once (bounded) before saying it was not recorded.
                Err(_) => break self.fetch().await.ok().map(|(_, stored)| stored),
            }
        };
        // Ours, or (deposed meanwhile) a successor's: the name is done.
        if let Some(done) = stored.and_then(|s| record(self.name, &s, Some(holder.token))) {
            tracing::info!(name = self.name, token = done.token, by = %done.instance_id, "once: done");
            return Ok(done);
        }
        tracing::warn!(
            name = self.name,
            token = holder.token,
            "once: the body succeeded, but the lease was lost before its success was known to be recorded"
        );
        Err(Error::OnceUnrecorded {
            name: self.name.to_owned(),
            token: holder.token,
        })
    }

    /// Record the failure (best effort: unrecorded, the attempt still
    /// counts, with a text saying it ended without a result).
    async fn record_failure(&self, holder: &Holder<'_>, lease: &Lease, text: &str) {
        loop {
            match self.step(holder, Step::Fail { error: text }).await {
                Ok((Verdict::Open | Verdict::Done, _)) => return,
                Ok(_) => {
                    tracing::debug!(
                        name = self.name,
                        "once: lease lost before the failure was recorded"
                    );
                    return;
                }
                Err(_) if lease.is_valid() => sleep(RECORD_RETRY).await,
                Err(_) => return,
            }
        }
    }

    /// A step under the lease (a backend error logged, see `logged`).
    async fn step(&self, holder: &Holder<'_>, step: Step<'_>) -> Result<(Verdict, Stored)> {
        let ctx = self.rt.ctx();
        let limit = ctx.config.call_timeout;
        let what = match step {
            Step::Begin { .. } => "starting an attempt",
            Step::Done { .. } => "recording the success",
            Step::Fail { .. } => "recording the failure",
            Step::Alive { .. } => "saying the body still runs",
        };
        let answer = backend::within(&self.group, limit, ctx.backend.once_step(holder, step));
        self.logged(&self.steps_failing, what, answer.await)
    }

    /// The result as stored, and whether the lease is held (a backend error
    /// logged, see `logged`).
    async fn fetch(&self) -> Result<(Verdict, Stored)> {
        let ctx = self.rt.ctx();
        let limit = ctx.config.call_timeout;
        let read = ctx
            .backend
            .once_read(&self.group, &self.keys, ctx.config.ttl);
        let answer = backend::within(&self.group, limit, read).await;
        self.logged(&self.reads_failing, "reading the result", answer)
    }

    /// `answer`, its error logged: at WARN the first of a burst (these calls
    /// are retried every `retry_interval` or faster), at DEBUG the others
    /// until a call of the kind (`failing` is the kind's flag) succeeds.
    fn logged<T>(&self, failing: &AtomicBool, what: &str, answer: Result<T>) -> Result<T> {
        match &answer {
            Ok(_) => failing.store(false, Ordering::Relaxed),
            Err(e) if failing.swap(true, Ordering::Relaxed) => {
                tracing::debug!(name = self.name, error = %e, "once: {what} failed again");
            }
            Err(e) => {
                tracing::warn!(name = self.name, error = %e, "once: {what} failed; trying again (until a call succeeds, further failures are logged at debug)");
            }
        }
        answer
    }

    /// Read the result without the lease: settled if it is done, or if
    /// this caller's limit of attempts were started and none is running
    /// (nobody holds the lease) — the rule a runner's `begin` applies. A
    /// backend error settles nothing.
    async fn read(&self) -> Option<Result<OnceRecord>> {
        let (verdict, stored) = self.fetch().await.ok()?;
        if let Some(done) = record(self.name, &stored, None) {
            return Some(Ok(done));
        }
        (verdict == Verdict::Open && stored.attempts >= self.attempts)
            .then(|| Err(self.failed(stored)))
    }

    fn failed(&self, stored: Stored) -> Error {
        Error::OnceFailed {
            name: self.name.to_owned(),
            attempts: stored.attempts,
            last_error: stored.error,
        }
    }

    fn timed_out(&self) -> Error {
        Error::OnceTimeout {
            name: self.name.to_owned(),
            after: self.timeout,
        }
    }
}

/// Until this runtime is elected in `group` (or events were lost: look).
async fn elected(events: &mut broadcast::Receiver<Event>, group: &str) {
    loop {
        match events.recv().await {
            Ok(Event::Elected { group: g, .. }) if g == group => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            // The runtime is gone; the caller's deadline ends the wait.
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// The name's group, registered (and campaigning) for one call; forgotten
/// afterwards — released if held — also when the call is dropped.
struct Registration<'a> {
    rt: &'a Runtime,
    name: &'a str,
    group: Arc<Group>,
    armed: bool,
}

impl<'a> Registration<'a> {
    fn new(rt: &'a Runtime, name: &'a str) -> Result<Self> {
        Ok(Self {
            rt,
            name,
            group: rt.once_group(name)?,
            armed: true,
        })
    }

    /// Forget the group and wait for its release.
    async fn release(mut self) {
        self.armed = false;
        if let Some((_, answer)) = self.rt.forget_now(self.name) {
            if let Ok(Err(e)) = answer.await {
                tracing::warn!(group = self.name, error = %e, "once: releasing the lease failed; it expires within one ttl");
            }
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Cancelled: the election hands over in the background.
            let _ = self.rt.forget_now(self.name);
        }
    }
}

type Turns = Mutex<HashMap<(u64, String), Weak<tokio::sync::Mutex<()>>>>;

/// Calls of one name on one runtime take turns: they share one group, which
/// each call registers and forgets.
static TURNS: LazyLock<Turns> = LazyLock::new(Turns::default);

async fn turn(runtime: u64, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
    let lock = {
        let mut turns = TURNS.lock().unwrap_or_else(PoisonError::into_inner);
        turns.retain(|_, lock| lock.strong_count() > 0);
        let key = (runtime, name.to_owned());
        match turns.get(&key).and_then(Weak::upgrade) {
            Some(lock) => lock,
            None => {
                let lock = Arc::new(tokio::sync::Mutex::new(()));
                turns.insert(key, Arc::downgrade(&lock));
                lock
            }
        }
    };
    lock.lock_owned().await
}

#[cfg(test)]
mod backend_tests;
#[cfg(test)]
mod tests;
