//! Which runtime is current: the one whose [`Runtime::scope`] future is
//! being polled (or dropped) on this thread, else the process-wide one
//! behind the free functions (set by [`init`], or from the environment on
//! first use).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::runtime::{Runtime, WeakRuntime};
use crate::{Config, Error, Result};

thread_local! {
    /// The id of the runtime whose [`Runtime::scope`] future is being polled
    /// or dropped on this thread, else 0 (ids start at 1). The gate reads it
    /// on every call: a `Copy` thread-local without a destructor is one load
    /// and two stores to set and restore, where a tokio task-local is a
    /// `RefCell<Option<T>>` swapped in and out around every poll, with a
    /// destructor check on each access (BENCHMARKS.md).
    static SCOPED_ID: Cell<u64> = const { Cell::new(0) };
}

/// Every live runtime by id: how the free functions get the runtime
/// `SCOPED_ID` names (off the gate's path). Weak handles: the registry keeps
/// no runtime alive, and a runtime removes itself when its last handle goes.
/// A scope holds a handle for as long as it sets `SCOPED_ID`, so the entry
/// it names is alive.
static LIVE: RwLock<BTreeMap<u64, WeakRuntime>> = RwLock::new(BTreeMap::new());

/// Called by [`Runtime::new`].
pub(crate) fn register_runtime(runtime: &Runtime) {
    let mut live = LIVE.write().unwrap_or_else(PoisonError::into_inner);
    live.insert(runtime.id(), runtime.downgrade());
}

/// Called when a runtime's last handle is dropped.
pub(crate) fn forget_runtime(id: u64) {
    let mut live = LIVE.write().unwrap_or_else(PoisonError::into_inner);
    live.remove(&id);
}

static GLOBAL: OnceLock<Runtime> = OnceLock::new();
static AUTO_INIT: Mutex<()> = Mutex::new(());
static REPORTED_UNCONFIGURED: AtomicBool = AtomicBool::new(false);

/// Set the process-wide runtime used by the free functions and by gated
/// functions called outside [`Runtime::scope`]. Call once at start-up, inside
/// the tokio runtime.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use leader_runtime::Config;
///
/// # #[tokio::main] async fn main() -> Result<(), leader_runtime::Error> {
/// leader_runtime::init(
///     Config::builder()
///         .redis_url("redis://127.0.0.1:6379")
///         .ttl(Duration::from_secs(15))
///         .build()?,
/// )?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::AlreadyInitialized`] when called twice (or after the runtime
/// initialised itself from the environment: `LEADER_REDIS_URL`,
/// `LEADER_REDIS_CLUSTER_URLS`, `LEADER_REDIS_SENTINEL_MASTER` with
/// `LEADER_REDIS_SENTINEL_URLS` (and optionally
/// `LEADER_REDIS_SENTINEL_MASTER_USER` / `LEADER_REDIS_SENTINEL_MASTER_PASSWORD`),
/// or `REDIS_URL`; see the [crate docs](crate));
/// [`Error::NoTokioRuntime`] outside tokio; [`Error::Config`].
pub fn init(config: Config) -> Result<()> {
    let _lock = AUTO_INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if GLOBAL.get().is_some() {
        return Err(Error::AlreadyInitialized);
    }
    let runtime = Runtime::new(config)?;
    GLOBAL.set(runtime).map_err(|_| Error::AlreadyInitialized)
}

/// The global runtime, initialising it from the environment on first use.
/// `None` (and one error log) when it is not configured.
#[inline]
pub(crate) fn global() -> Option<&'static Runtime> {
    match GLOBAL.get() {
        Some(runtime) => Some(runtime),
        None => global_from_env(),
    }
}

/// The slow path of [`global`], off the gate's hot path.
#[cold]
fn global_from_env() -> Option<&'static Runtime> {
    let _lock = AUTO_INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(runtime) = GLOBAL.get() {
        return Some(runtime);
    }
    match from_env() {
        Ok(runtime) => {
            tracing::info!(
                instance = runtime.instance_id(),
                "leader runtime initialised from the environment"
            );
            Some(GLOBAL.get_or_init(|| runtime))
        }
        Err(e) => {
            if !REPORTED_UNCONFIGURED.swap(true, Ordering::Relaxed) {
                tracing::error!(error = %e, "leader-only code will not run on this instance");
            }
            None
        }
    }
}

fn from_env() -> Result<Runtime> {
    Runtime::new(crate::config::env::builder()?.build()?)
}

// Defined here rather than in `runtime/mod.rs`: the scope is this module's.
impl Runtime {
    /// Make this runtime the current one for `fut`: gated functions and the
    /// free functions called inside use it instead of the global runtime.
    /// The innermost scope decides; tasks spawned inside do not inherit it
    /// (as with a tokio task-local).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{leader_only, Config, MemoryBackend, Runtime};
    ///
    /// #[leader_only(group = "jobs")]
    /// async fn job() -> &'static str { "ran" }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// assert_eq!(runtime.scope(job()).await, Some("ran"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        Scope {
            fut: Some(fut),
            exit: None,
            runtime: self.clone(),
        }
    }
}

pin_project! {
    /// [`Runtime::scope`]'s future: `SCOPED_ID` set while it is polled, and
    /// while the future is dropped, so that its destructors run in the
    /// scope too (a cancelled body's gated calls and free functions go to
    /// this runtime, as they did while it ran). A future that finished is
    /// dropped at once, in the scope (as tokio's task-local future does):
    /// what it still holds (a gated future's admission, which a drain
    /// waits for) goes when it finishes, not when the caller drops this.
    struct Scope<F> {
        #[pin]
        fut: Option<F>,
        // Set by `drop`; dropped after `fut`, so `fut` drops inside.
        exit: Option<EnterScope>,
        // Dropped last: alive (and so its entry in `LIVE`) while its id
        // can be in `SCOPED_ID`.
        runtime: Runtime,
    }

    impl<F> PinnedDrop for Scope<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.fut.is_some() {
                *this.exit = Some(EnterScope::new(this.runtime.id()));
            }
        }
    }
}

impl<F: Future> Future for Scope<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let _enter = EnterScope::new(this.runtime.id());
        let Some(fut) = this.fut.as_mut().as_pin_mut() else {
            // A broken `Future` contract (polled again once ready): there
            // is no output to give, so it never completes again.
            tracing::error!("a `Runtime::scope` future was polled after it completed");
            return Poll::Pending;
        };
        let out = fut.poll(cx);
        if out.is_ready() {
            this.fut.set(None);
        }
        out
    }
}

/// `SCOPED_ID` set for as long as this lives; the outer id comes back on
/// drop, also when the future panics. The twin of `admission::Enter` on
/// purpose: one generic guard holding a `&'static LocalKey` for both costs
/// the gated call more instructions.
struct EnterScope(u64);

impl EnterScope {
    #[inline]
    fn new(id: u64) -> Self {
        Self(SCOPED_ID.replace(id))
    }
}

impl Drop for EnterScope {
    #[inline]
    fn drop(&mut self) {
        SCOPED_ID.set(self.0);
    }
}

/// The runtime whose [`Runtime::scope`] future is being polled or dropped on
/// this thread, if any.
pub(crate) fn scoped() -> Option<Runtime> {
    let id = scoped_id()?;
    let live = LIVE.read().unwrap_or_else(PoisonError::into_inner);
    live.get(&id).and_then(WeakRuntime::upgrade)
}

/// The id of the scoped runtime, without cloning it.
#[inline]
fn scoped_id() -> Option<u64> {
    match SCOPED_ID.get() {
        0 => None,
        id => Some(id),
    }
}

/// The runtime of this task: the scoped one, else the global one.
pub(crate) fn current() -> Option<Runtime> {
    scoped().or_else(|| global().cloned())
}

/// The id of the runtime of this task, without cloning it.
#[inline]
pub(crate) fn current_id() -> Option<u64> {
    scoped_id().or_else(|| global().map(Runtime::id))
}

/// The runtime of this task, without initialising the global one.
pub(crate) fn current_existing() -> Option<Runtime> {
    scoped().or_else(|| existing().cloned())
}

/// The global runtime if it exists, without initialising it.
pub(crate) fn existing() -> Option<&'static Runtime> {
    GLOBAL.get()
}

#[cfg(test)]
#[path = "global_tests.rs"]
mod tests;
