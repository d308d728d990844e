//! The process-wide runtime behind the free functions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::runtime::{self, Runtime};
use crate::{Config, Error, Result};

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
    Runtime::new(crate::env::builder()?.build()?)
}

/// The runtime of this task: the scoped one, else the global one.
pub(crate) fn current() -> Option<Runtime> {
    runtime::scoped().or_else(|| global().cloned())
}

/// The id of the runtime of this task, without cloning it.
#[inline]
pub(crate) fn current_id() -> Option<u64> {
    runtime::scoped_id().or_else(|| global().map(Runtime::id))
}

/// The global runtime if it exists, without initialising it.
pub(crate) fn existing() -> Option<&'static Runtime> {
    GLOBAL.get()
}
