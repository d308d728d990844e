//! A leadership tenure as seen by the code that runs under it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::fence::Target;

/// One leadership of one group on this instance: its fencing token and how
/// long the local view stays valid. Cheap to clone.
///
/// Inside a gated body, get it with [`current_lease`](crate::current_lease).
///
/// # Examples
///
/// ```no_run
/// # async fn write_with_fence(_token: u64) {}
/// #[leader_runtime::leader_only(group = "reaper")]
/// async fn reap() {
///     if let Some(lease) = leader_runtime::current_lease() {
///         // hand the token to a store that rejects stale writers
///         write_with_fence(lease.token()).await;
///     }
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Lease {
    pub(crate) tenure: Arc<Tenure>,
}

/// The shared state of one leadership, updated by the election task.
#[derive(Debug)]
pub(crate) struct Tenure {
    group: Arc<str>,
    token: u64,
    /// Zero point of `valid_until_ns` (the group's creation instant).
    base: Instant,
    /// End of the local view, in nanoseconds since `base`.
    valid_until_ns: AtomicU64,
    ended: CancellationToken,
    /// Where fenced writes of this leadership go (set when it begins).
    pub(crate) fence: OnceLock<Arc<Target>>,
    /// When the view began (cron: look-back floor).
    began: Instant,
    /// Whether the view began after a safe start for lost or restored data
    /// (no record, or one another server process wrote): work done under
    /// earlier leaderships may have left no trace in the backend.
    after_loss: bool,
}

impl Tenure {
    pub(crate) fn new(group: Arc<str>, token: u64, base: Instant, valid_until: Instant) -> Self {
        Self {
            group,
            token,
            base,
            valid_until_ns: AtomicU64::new(nanos_since(base, valid_until)),
            ended: CancellationToken::new(),
            fence: OnceLock::new(),
            began: Instant::now(),
            after_loss: false,
        }
    }

    /// Mark a view that began after lost or restored data (see `after_loss`).
    pub(crate) fn after_loss(mut self, after_loss: bool) -> Self {
        self.after_loss = after_loss;
        self
    }

    /// When the view began, and whether it began after lost or restored
    /// data.
    #[cfg_attr(not(feature = "cron"), allow(dead_code))]
    pub(crate) fn began(&self) -> (Instant, bool) {
        (self.began, self.after_loss)
    }

    /// True while the view is valid: not ended, and the clock is before its end.
    /// An atomic compare against the clock, so it turns false on time even when
    /// the election task is stuck.
    #[inline]
    pub(crate) fn is_valid_now(&self) -> bool {
        let now = nanos_since(self.base, Instant::now());
        now < self.valid_until_ns.load(Ordering::Acquire) && !self.ended.is_cancelled()
    }

    pub(crate) fn extend(&self, valid_until: Instant) {
        self.valid_until_ns
            .store(nanos_since(self.base, valid_until), Ordering::Release);
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.base + Duration::from_nanos(self.valid_until_ns.load(Ordering::Acquire))
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// End the view now (before a release, or on loss).
    pub(crate) fn end(&self) {
        self.ended.cancel();
    }
}

fn nanos_since(base: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(base)
        .as_nanos()
        .try_into()
        .unwrap_or(u64::MAX)
}

impl Lease {
    /// The group this lease is for.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// let lease = runtime
    ///     .run_if_leader("jobs", || async { leader_runtime::current_lease() })
    ///     .await
    ///     .flatten()
    ///     .unwrap();
    /// assert_eq!(lease.group(), "jobs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn group(&self) -> &str {
        &self.tenure.group
    }

    /// The fencing token: strictly greater than every token issued before for
    /// this group (also across Redis restarts). Hand it to stores that reject
    /// writes carrying a smaller token than the last they saw.
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
    /// let token = |rt: Runtime| async move {
    ///     rt.run_if_leader("jobs", || async { leader_runtime::current_lease().unwrap().token() }).await
    /// };
    /// let first = token(a.clone()).await.unwrap();
    /// a.shutdown().await; // hands over
    /// b.run_if_leader("jobs", || async {}).await;
    /// let second = token(b.clone()).await.unwrap();
    /// assert!(second > first); // a store that saw `second` rejects a writer holding `first`
    /// # Ok(())
    /// # }
    /// ```
    pub fn token(&self) -> u64 {
        self.tenure.token
    }

    /// Until when the local view is certainly valid (extended by each renew).
    /// After the leadership ended, the last such instant.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// let lease = runtime
    ///     .run_if_leader("jobs", || async { leader_runtime::current_lease() })
    ///     .await
    ///     .flatten()
    ///     .unwrap();
    /// let left = lease.valid_until() - tokio::time::Instant::now();
    /// assert!(left <= runtime.config().ttl());
    /// # Ok(())
    /// # }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.tenure.valid_until()
    }

    /// Whether this leadership still holds right now.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// let lease = runtime
    ///     .run_if_leader("jobs", || async { leader_runtime::current_lease() })
    ///     .await
    ///     .flatten()
    ///     .unwrap();
    /// assert!(lease.is_valid());
    /// runtime.shutdown().await;
    /// assert!(!lease.is_valid());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_valid(&self) -> bool {
        self.tenure.is_valid_now()
    }

    /// Completes when this leadership ends: lost, stepped down, shut down, or
    /// simply because the view ran out (even if the election task is stuck).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn one_batch() {}
    /// # async fn example() {
    /// let Some(lease) = leader_runtime::current_lease() else { return };
    /// loop {
    ///     tokio::select! {
    ///         _ = lease.lost() => break, // stop before the next leader starts
    ///         _ = one_batch() => {}
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        loop {
            if !self.tenure.is_valid_now() {
                return;
            }
            let until = self.tenure.valid_until();
            tokio::select! {
                _ = self.tenure.ended.cancelled() => return,
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
}
