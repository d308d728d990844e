//! The runtime: a registry of groups, each with its election task.

pub(crate) mod global;
pub(crate) mod ready;
mod report;
pub(crate) mod shutdown;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use tokio::runtime::Handle;
use tokio::sync::{broadcast, oneshot};
use tokio_util::task::TaskTracker;

use crate::backend::fence::Target;
use crate::backend::{self, ChannelNotice, NoticeSink, EVERY_GROUP};
use crate::config::Config;
use crate::election;
use crate::election::ctx::Ctx;
use crate::group::admission;
use crate::group::lease::Lease;
use crate::group::{self, Command, Group, GroupKind};
use crate::names::{validate_group, ControlRequest, GroupKeys};
use crate::observe::events::Event;
use crate::observe::stats::Stats;
use crate::{Error, Result};

static NEXT_RUNTIME_ID: AtomicU64 = AtomicU64::new(1);

/// One instance's view of every group: elections, local views, events.
///
/// The free functions ([`is_leader`](crate::is_leader), …) use the global
/// runtime set by [`init`](crate::init); an explicit `Runtime` offers the same
/// methods, so one process can host several instances (tests, demos).
/// Cloning is cheap and shares the runtime. Dropping the last clone stops
/// every election and releases the leases it holds (in background tasks);
/// prefer [`shutdown`](Self::shutdown), which waits for that.
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let ran = runtime.run_if_leader("cleanup", || async { "purged" }).await;
/// assert_eq!(ran, Some("purged"));
/// assert!(runtime.is_leader("cleanup"));
/// runtime.shutdown().await;
/// assert!(!runtime.is_leader("cleanup"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// A [`Runtime`] that may have been dropped.
pub(crate) struct WeakRuntime(Weak<Inner>);

impl WeakRuntime {
    /// The runtime, if a handle to it is still alive.
    pub(crate) fn upgrade(&self) -> Option<Runtime> {
        self.0.upgrade().map(|inner| Runtime { inner })
    }
}

/// Owner of the shared state; dropping it stops the elections.
struct Inner {
    id: u64,
    shared: Arc<Shared>,
}

struct Shared {
    ctx: Arc<Ctx>,
    groups: RwLock<HashMap<Arc<str>, Arc<Group>>>,
    /// Groups forgotten whose elections have not ended yet (their hand-over
    /// drains a body still running), or ended with a body still in flight: a
    /// group registered again under the same name waits for its predecessor
    /// found here, so that this instance never leads it twice at once. Each
    /// election's end prunes the entries no successor needs to wait for any
    /// more; a registration takes its predecessor's.
    retiring: Mutex<HashMap<Arc<str>, Arc<Group>>>,
    handle: Handle,
    tasks: TaskTracker,
}

impl Shared {
    fn groups(&self) -> RwLockReadGuard<'_, HashMap<Arc<str>, Arc<Group>>> {
        self.groups.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn groups_mut(&self) -> RwLockWriteGuard<'_, HashMap<Arc<str>, Arc<Group>>> {
        self.groups.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A registered group.
    fn get(&self, name: &str) -> Option<Arc<Group>> {
        self.groups().get(name).cloned()
    }

    fn retiring(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Group>>> {
        self.retiring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An election ended: keep of the forgotten groups only those a
    /// successor must still wait for (an election not ended, or a body that
    /// may still run past its view: see `Group::ended`).
    fn prune_retiring(&self) {
        let now = tokio::time::Instant::now();
        self.retiring().retain(|_, g| match g.control.has_ended() {
            None => true,
            Some(claim_after) => claim_after.is_some_and(|at| at > now),
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        crate::runtime::global::forget_runtime(self.id);
        self.shared.ctx.stop.cancel();
        self.shared.tasks.close();
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("instance_id", &self.instance_id())
            .field("config", self.config())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Start a runtime (no command reaches Redis yet: only the release-notice
    /// subscription connects; groups start their elections on first use).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(
    ///     Config::builder()
    ///         .memory(MemoryBackend::new()) // or .redis_url("redis://…")
    ///         .ttl(Duration::from_secs(6))
    ///         .renew_interval(Duration::from_secs(2))
    ///         .build()?,
    /// )?;
    /// assert!(runtime.is_running());
    /// runtime.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoTokioRuntime`] outside a tokio runtime;
    /// [`Error::Config`] if the Redis URL is unusable.
    pub fn new(config: Config) -> Result<Self> {
        let handle = Handle::try_current().map_err(|_| Error::NoTokioRuntime)?;
        let _guard = handle.enter();
        let ctx = Arc::new(Ctx::new(config)?);
        let shared = Arc::new(Shared {
            ctx,
            groups: RwLock::new(HashMap::new()),
            retiring: Mutex::new(HashMap::new()),
            handle: handle.clone(),
            tasks: TaskTracker::new(),
        });
        shared
            .ctx
            .spawn_notices(notice_sink(Arc::downgrade(&shared)));
        let config = &shared.ctx.config;
        tracing::debug!(instance = %config.instance_id, ?config, "leader runtime started");
        let runtime = Self {
            inner: Arc::new(Inner {
                id: NEXT_RUNTIME_ID.fetch_add(1, Ordering::Relaxed),
                shared,
            }),
        };
        crate::runtime::global::register_runtime(&runtime);
        Ok(runtime)
    }

    /// A handle that does not keep this runtime alive (the registry of
    /// live runtimes holds these).
    pub(crate) fn downgrade(&self) -> WeakRuntime {
        WeakRuntime(Arc::downgrade(&self.inner))
    }

    /// A process-unique id of this runtime (keys per-call-site caches).
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// This instance's id, as stored in the leases it holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// assert_eq!(runtime.instance_id(), "a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn instance_id(&self) -> &str {
        &self.config().instance_id
    }

    /// The configuration this runtime runs with.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// assert_eq!(runtime.config().ttl(), leader_runtime::DEFAULT_TTL);
    /// # Ok(())
    /// # }
    /// ```
    pub fn config(&self) -> &Config {
        &self.ctx().config
    }

    /// What every group of this runtime shares.
    pub(crate) fn ctx(&self) -> &Arc<Ctx> {
        &self.inner.shared.ctx
    }

    /// Whether this instance leads `group` right now. Sync and local: an
    /// atomic compare against the clock, never a network call. The first call
    /// naming a group starts its election (and returns false).
    ///
    /// An invalid group name answers false; the first such call for each
    /// name logs an error, later ones log at debug level.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// assert!(!runtime.is_leader("jobs")); // starts the election of "jobs"
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// assert!(runtime.is_leader("jobs"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_leader(&self, group: &str) -> bool {
        match self.group(group) {
            Ok(group) => group.is_leader(),
            Err(e) => {
                report_unusable_group("is_leader", "not leader", &e);
                false
            }
        }
    }

    /// Who leads `group`, asked of the backend (`None`: nobody).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// assert_eq!(runtime.leader_id("jobs").await?, None); // nobody yet
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// assert_eq!(runtime.leader_id("jobs").await?.as_deref(), Some("a"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`], or the backend's error or timeout.
    pub async fn leader_id(&self, group: &str) -> Result<Option<String>> {
        validate_group(group)?;
        let ctx = self.ctx();
        let keys = GroupKeys::new(&ctx.config.key_prefix, group);
        let limit = ctx.config.call_timeout;
        backend::within(group, limit, ctx.backend.holder(group, &keys)).await
    }

    /// Run `f` if this instance leads `group`: `Some(output)` when it ran,
    /// `None` when not leader. The first call naming a group waits for its
    /// first acquisition round (bounded by 1.5 × the call timeout).
    ///
    /// `f` itself is called only once the run is admitted, inside it: a
    /// follower never calls it, so work started in its synchronous part
    /// (`|| tokio::spawn(job())`) is gated too (though a spawned task
    /// outlives the run: a hand-over does not wait for it).
    ///
    /// An invalid group name, or a runtime shut down, also gives `None`
    /// (fail closed); the first call with each invalid name logs an error,
    /// later ones log at debug level. To tell those apart from "not the
    /// leader", call [`try_run_if_leader`](Self::try_run_if_leader).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// let purged = runtime
    ///     .run_if_leader("cleanup", || async {
    ///         let lease = leader_runtime::current_lease().expect("inside a gated body");
    ///         println!("purging under token {}", lease.token());
    ///         42
    ///     })
    ///     .await;
    /// assert_eq!(purged, Some(42));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the body; the group's election goes on.
    pub async fn run_if_leader<F, Fut>(&self, group: &str, f: F) -> Option<Fut::Output>
    where
        F: FnOnce() -> Fut,
        Fut: Future,
    {
        match self.try_run_if_leader(group, f).await {
            Ok(ran) => ran,
            Err(e) => {
                report_unusable_group("run_if_leader", "body not run", &e);
                None
            }
        }
    }

    /// [`run_if_leader`](Self::run_if_leader) that tells a name it cannot
    /// use from "not the leader": `Ok(Some(output))` when `f` ran,
    /// `Ok(None)` when this instance does not lead `group`, `Err` when
    /// `group` is not a valid group name or the runtime is shut down. For
    /// group names made at run time (a tenant, a shard). Logs nothing: the
    /// error is the caller's.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, Error, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// let tenant = "acme corp"; // a space: not a group name
    /// match runtime.try_run_if_leader(tenant, || async { 1 }).await {
    ///     Ok(Some(n)) => println!("ran: {n}"),
    ///     Ok(None) => println!("another instance leads {tenant}"),
    ///     Err(Error::InvalidGroup { rule, .. }) => println!("{tenant:?} cannot be a group: {rule}"),
    ///     Err(e) => return Err(e),
    /// }
    /// let ran = runtime.try_run_if_leader("acme-corp", || async { 1 }).await?;
    /// assert_eq!(ran, Some(1));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`]; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the body; the group's election goes on.
    pub async fn try_run_if_leader<F, Fut>(&self, group: &str, f: F) -> Result<Option<Fut::Output>>
    where
        F: FnOnce() -> Fut,
        Fut: Future,
    {
        let group = self.ready_group(group).await?;
        if !self.is_running() {
            return Err(Error::ShutDown);
        }
        // `f` is called inside the admitted body, never before the gate:
        // its synchronous part may start work too (`|| tokio::spawn(job())`).
        Ok(admission::run(&group, false, async move { f().await }).await)
    }

    /// Hand the lease of `group` to another instance: stop admitting gated
    /// runs, wait for those in flight, release, and stay out of the race for
    /// one `ttl` or until another instance released it. With no other
    /// instance this one takes the lease back after that. A no-op when not
    /// leader.
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
    /// assert!(a.run_if_leader("jobs", || async {}).await.is_some());
    /// b.run_if_leader("jobs", || async {}).await; // b follows
    /// a.step_down("jobs").await?;
    /// assert!(!a.is_leader("jobs"));
    /// # tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// assert_eq!(b.leader_id("jobs").await?.as_deref(), Some("b")); // one round trip later
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Called from inside a gated body of the same group (also from a gated
    /// body of another group nested in one of it), it cannot wait
    /// for the drain (which waits for that body): it stops admitting new
    /// runs and returns `Ok(())` at once, and the lease is released when the
    /// body (and any other run in flight) has returned — so the next leader
    /// still never starts while this body runs. A release error is then only
    /// logged.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`]; [`Error::ShutDown`]; the backend's error if the
    /// release failed (the view has ended anyway, and the lease expires by
    /// itself within one `ttl`).
    pub async fn step_down(&self, group: &str) -> Result<()> {
        validate_group(group)?;
        let Some(group) = self.registered(group) else {
            return Ok(());
        };
        let (reply, answer) = oneshot::channel();
        group
            .control
            .commands
            .send(Command::StepDown(reply))
            .map_err(|_| Error::ShutDown)?;
        Self::await_hand_over(&group, answer).await
    }

    /// The election's answer to a hand-over command — unless the caller is a
    /// gated body of that group: the drain waits for it, so it must not wait
    /// for the drain. It returns at once then, and the release follows when
    /// the body has returned.
    async fn await_hand_over(group: &Group, answer: oneshot::Receiver<Result<()>>) -> Result<()> {
        if inside_lineage(group) {
            tracing::debug!(group = %group.name, "hand-over asked from inside its own gated body: it completes when the body returns");
            return Ok(());
        }
        answer.await.map_err(|_| Error::ShutDown)?
    }

    /// Forget `group` on this instance: hand its lease over if leading
    /// (drain, then release, as [`step_down`](Self::step_down)), end its
    /// election and drop it from the registry, so that it costs nothing any
    /// more. A later call naming it registers it anew; that election waits
    /// until this hand-over is done (so the instance never runs the group's
    /// bodies under two leaderships at once), and a `ttl` more if a body of
    /// the old one was still running when its view ended.
    ///
    /// Groups named at run time (`is_leader(name)` with names made up as the
    /// program runs — a tenant, a shard) each start an election that runs
    /// until the runtime stops: forget those you no longer need, or the
    /// elections add up. Called from inside a gated body of the group (or
    /// of a forgotten one of the same name still handing over), it returns
    /// at once and the release follows when the body has returned.
    /// Otherwise, forgetting a group named again while its predecessor
    /// still hands over returns once that hand-over is done.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("tenant-42", || async {}).await;
    /// runtime.forget("tenant-42").await?;
    /// assert!(runtime.status().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`]; the backend's error if the release failed
    /// (the lease expires by itself within one `ttl`).
    pub async fn forget(&self, group: &str) -> Result<()> {
        validate_group(group)?;
        let Some((group, answer)) = self.forget_now(group) else {
            return Ok(());
        };
        Self::await_hand_over(&group, answer).await
    }

    /// The part of [`forget`](Self::forget) that does not wait (so a `Drop`
    /// can do it): drop `group` from the registry and ask its election to
    /// hand over and end. `None` when it was not registered, or its
    /// election has ended already; else the group and the election's answer.
    pub(crate) fn forget_now(
        &self,
        group: &str,
    ) -> Option<(Arc<Group>, oneshot::Receiver<Result<()>>)> {
        let shared = &self.inner.shared;
        let mut groups = shared.groups_mut();
        let group = groups.remove(group)?;
        group.control.forget();
        // Under the registry's lock, so a `register` of the name finds it;
        // before the command, so the election's end takes it out.
        shared.retiring().insert(group.name.clone(), group.clone());
        drop(groups);
        let (reply, answer) = oneshot::channel();
        let sent = group.control.commands.send(Command::Forget(reply));
        // After the command: an election that had ended already (the send
        // fails) is pruned here, its own prune having come before.
        shared.prune_retiring();
        sent.ok()?;
        Some((group, answer))
    }

    /// The lease of the gated body running on this task (see
    /// [`current_lease`](crate::current_lease)).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// assert!(runtime.current_lease().is_none()); // not in a gated body
    /// let token = runtime
    ///     .run_if_leader("jobs", || async { leader_runtime::current_lease().map(|l| l.token()) })
    ///     .await
    ///     .flatten();
    /// assert!(token.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn current_lease(&self) -> Option<Lease> {
        crate::group::admission::current_lease()
    }

    /// Counters of `group` on this instance; `None` if the group was never used.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// assert!(runtime.stats("jobs").is_none());
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// let stats = runtime.stats("jobs").unwrap();
    /// assert_eq!((stats.elected, stats.acquire_attempts, stats.lost()), (1, 1, 0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self, group: &str) -> Option<Stats> {
        self.registered(group).map(|g| g.counters.snapshot())
    }

    /// Every transition of every group on this instance, from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, Event, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// let mut events = runtime.subscribe();
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// match events.recv().await {
    ///     Ok(Event::Elected { group, token, .. }) => println!("leading {group} under token {token}"),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.ctx().events.subscribe()
    }

    /// Whether this runtime still runs: true until [`shutdown`](Self::shutdown)
    /// starts. A health check can answer "unhealthy" once it is false.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// assert!(runtime.is_running());
    /// runtime.shutdown().await;
    /// assert!(!runtime.is_running());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_running(&self) -> bool {
        !self.ctx().stop.is_cancelled()
    }

    /// Take this instance out of the race for `group` (`false`) or put it
    /// back in (`true`), without stopping the runtime — e.g. to drain an
    /// instance before a deploy.
    ///
    /// - `false` while leading: stop admitting gated runs, wait for those in
    ///   flight (bounded by what the view has left), end the view and release
    ///   the lease, as [`step_down`](Self::step_down) does (the loss is
    ///   reported with [`LostReason::SteppedDown`](crate::LostReason::SteppedDown));
    ///   then make no acquire attempts until eligible again. Returns after
    ///   the release — or at once when called from inside a gated body of
    ///   the same group, which the drain waits for (the release then follows
    ///   when the body has returned).
    /// - `false` while following: stop making acquire attempts. A group never
    ///   used before is registered ineligible, so its first use does not
    ///   campaign.
    /// - `true` after `false`: campaign again right away. Leaving the race
    ///   and coming back also ends a step-down's cooldown: after
    ///   [`step_down`](Self::step_down), `false` then `true` puts the
    ///   instance back in the race at once, not after the cooldown.
    /// - `true` while the group is eligible already: it stays in the race,
    ///   and a step-down's cooldown goes on (only `false` first ends it). On
    ///   a group never used it does nothing: groups are eligible by default.
    ///
    /// [`status`](Self::status) shows the flag.
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
    /// assert!(a.run_if_leader("jobs", || async {}).await.is_some());
    /// b.run_if_leader("jobs", || async {}).await; // b follows
    ///
    /// a.set_eligible("jobs", false).await?; // drain a before its deploy
    /// assert!(!a.is_leader("jobs"));
    /// # tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// assert_eq!(b.leader_id("jobs").await?.as_deref(), Some("b")); // b took over at once
    ///
    /// a.set_eligible("jobs", true).await?; // back in the race, as a follower now
    /// # a.shutdown().await;
    /// # b.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`]; [`Error::ShutDown`]; the backend's error if
    /// the release failed (the view has ended anyway, and the lease expires
    /// by itself within one `ttl`).
    ///
    /// # Cancel safety
    ///
    /// The flag is set at the first poll; dropping the future then does not
    /// undo it, and a hand-over that started goes on.
    pub async fn set_eligible(&self, group: &str, eligible: bool) -> Result<()> {
        validate_group(group)?;
        let group = match self.registered(group) {
            Some(group) => group,
            None if eligible => return Ok(()),
            None => self.register(group, GroupKind::User, false)?,
        };
        group.control.set_eligible(eligible);
        let (reply, answer) = oneshot::channel();
        group
            .control
            .commands
            .send(Command::SetEligible(eligible, reply))
            .map_err(|_| Error::ShutDown)?;
        Self::await_hand_over(&group, answer).await
    }

    /// What the cron module needs of this runtime: the backend, the
    /// config (key prefix, ttl, call timeout).
    #[cfg(feature = "cron")]
    pub(crate) fn cron_ctx(&self) -> &Arc<crate::election::ctx::Ctx> {
        self.ctx()
    }

    /// Release every held lease (after draining gated runs) and stop all
    /// elections. Later calls are not leader.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// runtime.shutdown().await; // drained and released
    /// assert!(!runtime.is_leader("jobs"));
    /// assert_eq!(runtime.run_if_leader("jobs", || async {}).await, None);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Called from inside a gated body of this runtime, it cannot wait for
    /// the drain (which waits for that body): it starts the stop and returns
    /// at once, and the body's group releases its lease when the body has
    /// returned.
    ///
    /// # Cancel safety
    ///
    /// The stop is started at the first poll and goes on if this future is dropped.
    pub async fn shutdown(&self) {
        let shared = &self.inner.shared;
        self.begin_shutdown();
        // A forgotten group's hand-over may wait for this body too.
        let inside_own_body = shared.groups().values().any(|g| inside_lineage(g))
            || shared.retiring().values().any(|g| inside_lineage(g));
        if inside_own_body {
            tracing::debug!("shutdown asked from inside a gated body: its group hands over when the body returns");
            return;
        }
        shared.tasks.wait().await;
    }

    /// Stop every election: each hands its lease over (drain, release) in
    /// its own task; [`elections`](Self::elections) tells when all are done.
    pub(crate) fn begin_shutdown(&self) {
        let shared = &self.inner.shared;
        shared.ctx.stop.cancel();
        shared.tasks.close();
    }

    /// The election tasks (waiting on it after
    /// [`begin_shutdown`](Self::begin_shutdown) waits for their hand-overs),
    /// and the tokio runtime they run on.
    pub(crate) fn elections(&self) -> (&TaskTracker, &Handle) {
        (&self.inner.shared.tasks, &self.inner.shared.handle)
    }

    /// A registered group, or register it and start its election.
    pub(crate) fn group(&self, name: &str) -> Result<Arc<Group>> {
        self.register(name, GroupKind::User, true)
    }

    /// A run-once call's group (see [`GroupKind::Once`]), registered as
    /// [`group`](Self::group) does.
    pub(crate) fn once_group(&self, name: &str) -> Result<Arc<Group>> {
        self.register(name, GroupKind::Once, true)
    }

    /// A registered group, or register it as `kind` (taking part in the
    /// election or not) and start its election.
    fn register(&self, name: &str, kind: GroupKind, eligible: bool) -> Result<Arc<Group>> {
        if let Some(group) = self.registered(name) {
            return Ok(group);
        }
        validate_group(name)?;
        let shared = &self.inner.shared;
        if shared.ctx.stop.is_cancelled() {
            return Err(Error::ShutDown);
        }
        let mut groups = shared.groups_mut();
        if let Some(group) = groups.get(name) {
            return Ok(group.clone());
        }
        let name: Arc<str> = Arc::from(name);
        let (commands, command_rx) = group::mailbox();
        let group = Arc::new(Group::new(name.clone(), kind, commands));
        group.control.set_eligible(eligible);
        let ctx = &shared.ctx;
        let target = Target::new(
            ctx.backend.clone(),
            &ctx.config.key_prefix,
            &name,
            ctx.config.call_timeout,
        );
        let _ = group.fence.set(target);
        // Forgotten, and its election still hands over: ours waits for it.
        let predecessor = shared.retiring().remove(&name);
        group.control.set_predecessor(predecessor.clone());
        groups.insert(name, group.clone());
        let registry = Arc::downgrade(shared);
        // The election's future is made inside the task: one made outside
        // and awaited inside is kept twice in the task (the captured value
        // and the awaited one), doubling every group's task for its life.
        let (election_group, ctx) = (group.clone(), shared.ctx.clone());
        shared.tasks.spawn_on(
            async move {
                election::run(election_group, ctx, command_rx, predecessor).await;
                if let Some(shared) = registry.upgrade() {
                    shared.prune_retiring();
                }
            },
            &shared.handle,
        );
        Ok(group)
    }

    /// The group, after its first acquisition round (bounded).
    pub(crate) async fn ready_group(&self, name: &str) -> Result<Arc<Group>> {
        let group = self.group(name)?;
        let limit = self.config().call_timeout;
        group.control.first_round(limit + limit / 2).await;
        Ok(group)
    }

    pub(crate) fn registered(&self, name: &str) -> Option<Arc<Group>> {
        self.inner.shared.get(name)
    }

    /// Every registered group, in no order.
    pub(crate) fn groups(&self) -> Vec<Arc<Group>> {
        self.inner.shared.groups().values().cloned().collect()
    }
}

/// Whether the running code is inside a gated body of `group`, or of a
/// forgotten predecessor of it whose election has not ended: the hand-over
/// of either waits for that body, and a command to `group` may wait for the
/// predecessor's (its election waits for it).
fn inside_lineage(group: &Group) -> bool {
    if crate::group::admission::inside(group) {
        return true;
    }
    let mut next = group.control.predecessor();
    while let Some(predecessor) = next {
        if crate::group::admission::inside(&predecessor) {
            return true;
        }
        next = predecessor.control.predecessor();
    }
    false
}

/// Log why `api` could not use a group: an invalid name as an error the
/// first time for each name (at most [`REPORTED_NAMES`] of them, so that
/// made-up names cannot grow the set without bound), then at debug level
/// (such calls tend to repeat in a loop); a runtime shut down at debug level.
fn report_unusable_group(api: &str, outcome: &str, e: &Error) {
    static REPORTED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let first = match e {
        Error::InvalidGroup { group, .. } => {
            let mut reported = REPORTED.lock().unwrap_or_else(PoisonError::into_inner);
            let new = !reported.contains(group) && reported.len() < REPORTED_NAMES;
            if new {
                reported.push(group.clone());
            }
            new
        }
        _ => false,
    };
    if first {
        tracing::error!(error = %e, "{api}: {outcome} (later calls with this name log at debug level)");
    } else {
        tracing::debug!(error = %e, "{api}: {outcome}");
    }
}

/// How many invalid group names get an error of their own.
const REPORTED_NAMES: usize = 64;

/// Route release notices to the waiting group (ignoring our own), and
/// control requests to the group they name.
fn notice_sink(shared: Weak<Shared>) -> NoticeSink {
    Arc::new(move |notice: ChannelNotice<'_>| {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match notice {
            ChannelNotice::Released { by, .. } if by == shared.ctx.config.instance_id => {}
            ChannelNotice::Released {
                group: EVERY_GROUP, ..
            } => {
                // Leaders renew now. Followers go on pacing themselves (a
                // wake-up here would also cut short a step-down's cooldown).
                let groups = shared.groups();
                tracing::debug!("notice connection back: leaders check their lease");
                for group in groups.values().filter(|g| g.is_leader()) {
                    group.control.released.notify_one();
                }
            }
            ChannelNotice::Released { group, by } => {
                if let Some(group) = shared.get(group) {
                    tracing::debug!(group = %group.name, by, "release notice");
                    group.control.released.notify_one();
                }
            }
            ChannelNotice::Control { group, request } => {
                if let Some(group) = shared.get(group) {
                    control(&shared.ctx.config.instance_id, &group, request);
                }
            }
        }
    })
}

/// An operator's request about a group of ours. A pause wakes the election:
/// a leader renews at once, which finds the pause and hands over (the renew
/// finds it without the request too, only later); a follower tries to
/// acquire, which finds the pause and reports it. A resume wakes followers.
/// A step-down is for the holder it names, and the leadership of its token:
/// it is kept for that leadership (which may not have begun yet), and wakes
/// the election only when that leadership runs — a late or repeated request
/// must not wake a follower out of its step-down cooldown.
fn control(instance_id: &str, group: &Group, request: ControlRequest) {
    tracing::debug!(group = %group.name, ?request, "control request");
    match request {
        ControlRequest::Pause | ControlRequest::Resume => group.control.requested.notify_one(),
        ControlRequest::StepDown { token, holder } if holder == instance_id && token != 0 => {
            group.control.step_down_token.store(token, Ordering::SeqCst);
            // SeqCst, as the election's store of leading_token then load of
            // step_down_token: one of the two sees the other's write.
            if group.control.leading_token.load(Ordering::SeqCst) == token {
                group.control.requested.notify_one();
            }
        }
        ControlRequest::StepDown { .. } => {}
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod inside_body_tests;

#[cfg(test)]
mod forget_tests;
