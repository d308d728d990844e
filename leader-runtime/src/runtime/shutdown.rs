//! Hard to forget the shutdown: a guard whose drop releases the leases
//! (bounded by a short timeout), and a future that shuts down on SIGTERM or
//! Ctrl-C. A process that exits without releasing makes every deploy a
//! full-`ttl` failover.

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::runtime::global;
use crate::runtime::Runtime;

/// How long dropping a [`ShutdownGuard`] waits for the hand-overs, unless
/// [`ShutdownGuard::timeout`] says otherwise.
pub const DEFAULT_GUARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Shuts its runtime down when dropped: stops every election, drains the
/// gated runs in flight and releases every lease, so that another instance
/// takes over at once instead of after the `ttl`. Made by
/// [`Runtime::shutdown_guard`] or [`shutdown_guard`](crate::shutdown_guard);
/// keep it alive as long as the instance should take part: bind it to a
/// named local of `main` (`let _leases = …`; `let _ = …` drops it at once).
///
/// **Dropping in async code.** A `Drop` cannot `.await`, and blocking a
/// runtime thread would stall every task on it. So the drop waits (at most
/// [`DEFAULT_GUARD_TIMEOUT`], or [`timeout`](Self::timeout)) only where
/// that is safe: on a multi-thread tokio runtime (through
/// `tokio::task::block_in_place`, which hands the thread's other tasks to
/// another worker), or outside any tokio runtime. On a current-thread runtime
/// (`#[tokio::main(flavor = "current_thread")]`, `#[tokio::test]`) the drop
/// only *starts* the hand-overs, which go on in the background — and stop
/// if the runtime ends first. There, or whenever you can, call
/// [`shutdown`](Self::shutdown)`.await` instead: it waits for all of it.
///
/// # Examples
///
/// ```no_run
/// use leader_runtime::Config;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     leader_runtime::init(Config::builder().redis_url("redis://127.0.0.1:6379").build()?)?;
///     let _leases = leader_runtime::shutdown_guard(); // released however main returns
///     serve().await?; // `?` or a panic here still hands the leases over
///     Ok(())
/// }
/// # async fn serve() -> std::io::Result<()> { Ok(()) }
/// ```
#[must_use = "dropping the guard shuts the runtime down at once: keep it until the process stops"]
pub struct ShutdownGuard {
    /// `None` once shut down; `Some(None)`: the current runtime at drop time.
    target: Option<Option<Runtime>>,
    timeout: Duration,
}

impl std::fmt::Debug for ShutdownGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownGuard")
            .field("armed", &self.target.is_some())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ShutdownGuard {
    /// A guard of `runtime`, or of the current runtime at drop time (`None`).
    pub(crate) fn new(runtime: Option<Runtime>) -> Self {
        Self {
            target: Some(runtime),
            timeout: DEFAULT_GUARD_TIMEOUT,
        }
    }

    /// How long the drop may wait for the hand-overs (default
    /// [`DEFAULT_GUARD_TIMEOUT`]). Leases not released by then expire on
    /// the server within one `ttl`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Shut down now and wait for every hand-over, as
    /// [`Runtime::shutdown`] does; the guard's drop then does nothing.
    ///
    /// # Cancel safety
    ///
    /// The stop is started at the first poll and goes on if this future is
    /// dropped.
    pub async fn shutdown(mut self) {
        if let Some(runtime) = self.target.take().and_then(resolve) {
            runtime.shutdown().await;
        }
    }
}

/// The runtime a guard stands for.
fn resolve(target: Option<Runtime>) -> Option<Runtime> {
    target.or_else(global::current_existing)
}

impl Drop for ShutdownGuard {
    fn drop(&mut self) {
        let Some(runtime) = self.target.take().and_then(resolve) else {
            return;
        };
        runtime.begin_shutdown();
        let (elections, handle) = runtime.elections();
        if elections.is_empty() {
            return;
        }
        // Block only where it stalls no tokio task: outside any runtime, or
        // in `block_in_place` on a multi-thread one. And only if the
        // elections run on a multi-thread runtime: a current-thread one
        // makes progress only while its own `block_on` runs.
        let here = Handle::try_current().ok().map(|h| h.runtime_flavor());
        let can_wait = handle.runtime_flavor() == RuntimeFlavor::MultiThread
            && matches!(here, None | Some(RuntimeFlavor::MultiThread));
        if !can_wait {
            tracing::debug!("shutdown guard dropped on a current-thread runtime: the leases are released in the background (await ShutdownGuard::shutdown to wait for it)");
            return;
        }
        let (done, finished) = mpsc::channel::<()>();
        let elections = elections.clone();
        // Dropped at once by a runtime that is shutting down: `finished`
        // then reports the disconnection without waiting.
        handle.spawn(async move {
            elections.wait().await;
            let _ = done.send(());
        });
        let limit = self.timeout;
        let wait = move || finished.recv_timeout(limit);
        let waited = match here {
            Some(_) => tokio::task::block_in_place(wait),
            None => wait(),
        };
        match waited {
            Ok(()) => tracing::debug!("shutdown guard: every lease released"),
            Err(mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
                timeout = ?limit,
                "shutdown guard: not every lease was released in time; the rest expire within one ttl"
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => tracing::debug!(
                "shutdown guard: the tokio runtime is shutting down; leases not yet released expire within one ttl"
            ),
        }
    }
}

impl Runtime {
    /// A guard that shuts this runtime down when dropped (drain, release
    /// every lease), waiting for it at most [`DEFAULT_GUARD_TIMEOUT`] where
    /// blocking is safe; see [`ShutdownGuard`] for when the drop cannot
    /// wait. The runtime stays up while the guard lives.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let shared = MemoryBackend::new();
    /// let a = Runtime::new(Config::builder().memory(shared.clone()).instance_id("a").build()?)?;
    /// let guard = a.shutdown_guard();
    /// a.run_if_leader("jobs", || async {}).await;
    /// drop(guard); // drained and released before drop returns (multi-thread runtime)
    /// assert!(!a.is_running());
    /// assert_eq!(a.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn shutdown_guard(&self) -> ShutdownGuard {
        ShutdownGuard::new(Some(self.clone()))
    }

    /// A future that waits for SIGTERM or SIGINT (Ctrl-C), then shuts this
    /// runtime down (drain, release every lease) and completes. Await it at
    /// the end of `main`, or `select!` on it beside your own work.
    ///
    /// The signal handlers are installed when this is *called*, not at the
    /// first poll, so a signal that comes right after is not missed. From
    /// then on the process no longer dies of SIGTERM or SIGINT by itself
    /// (tokio keeps the handlers): return from `main` once the future has
    /// completed. Call it inside a tokio runtime with I/O enabled; if the
    /// handlers cannot be installed, an error is logged and the future
    /// never completes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use leader_runtime::{Config, Runtime};
    ///
    /// # #[tokio::main] async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().redis_url("redis://127.0.0.1:6379").build()?)?;
    /// // … start the work …
    /// runtime.shutdown_on_signal().await; // SIGTERM from the orchestrator: hand over, then exit
    /// # Ok(()) }
    /// ```
    pub fn shutdown_on_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let runtime = self.clone();
        let signals = Signals::install();
        async move {
            let name = signals.recv().await;
            tracing::info!(
                signal = name,
                "signal received: draining and releasing every lease"
            );
            runtime.shutdown().await;
        }
    }
}

/// SIGTERM and SIGINT, listened for from when they are installed.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(error = %e, signal = name, "cannot listen for the signal; shutdown_on_signal will not see it");
                None
            }
        };
        Self {
            term: listen(SignalKind::terminate(), "SIGTERM"),
            int: listen(SignalKind::interrupt(), "SIGINT"),
        }
    }

    #[cfg(not(unix))]
    fn install() -> Self {
        Self {}
    }

    /// The name of the first signal that arrives.
    #[cfg(unix)]
    async fn recv(mut self) -> &'static str {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            if let Some(s) = s {
                if s.recv().await.is_some() {
                    return;
                }
            }
            std::future::pending().await
        }
        tokio::select! {
            () = next(&mut self.term) => "SIGTERM",
            () = next(&mut self.int) => "SIGINT",
        }
    }

    #[cfg(not(unix))]
    async fn recv(self) -> &'static str {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for Ctrl-C; shutdown_on_signal will not see it");
                std::future::pending().await
            }
        }
    }
}

/// [`Runtime::shutdown_on_signal`] for the current runtime at signal time.
pub(crate) fn on_signal() -> impl Future<Output = ()> + Send + 'static {
    let signals = Signals::install();
    async move {
        let name = signals.recv().await;
        tracing::info!(
            signal = name,
            "signal received: draining and releasing every lease"
        );
        current().await;
    }
}

/// Shut the current runtime down ([`crate::shutdown`]).
pub(crate) async fn current() {
    if let Some(runtime) = global::current_existing() {
        runtime.shutdown().await;
    }
}

#[cfg(test)]
#[path = "shutdown_tests.rs"]
mod tests;
