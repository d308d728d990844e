//! Per-group counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::observe::events::LostReason;

/// A snapshot of one group's counters on this instance; see [`stats`](crate::stats()).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// runtime.run_if_leader("jobs", || async {}).await;
/// let stats = runtime.stats("jobs").unwrap();
/// assert_eq!(stats.elected, 1);
/// assert_eq!(stats.renew_failures, 0);
/// # Ok(())
/// # }
/// ```
pub struct Stats {
    /// Times this instance became leader.
    pub elected: u64,
    /// Leaderships that ended because the view expired.
    pub lost_expired: u64,
    /// Leaderships that ended because someone else held the lease.
    pub lost_superseded: u64,
    /// Leaderships handed over by `step_down`.
    pub lost_stepped_down: u64,
    /// Leaderships released by `shutdown`.
    pub lost_shutdown: u64,
    /// Renew calls that failed or timed out.
    pub renew_failures: u64,
    /// Acquire calls sent.
    pub acquire_attempts: u64,
    /// Renew calls that succeeded.
    pub renewals: u64,
}

impl Stats {
    /// All losses, whatever the reason.
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
    /// runtime.step_down("jobs").await?;
    /// let stats = runtime.stats("jobs").unwrap();
    /// assert_eq!((stats.lost_stepped_down, stats.lost()), (1, 1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> u64 {
        self.lost_expired + self.lost_superseded + self.lost_stepped_down + self.lost_shutdown
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    elected: AtomicU64,
    lost_expired: AtomicU64,
    lost_superseded: AtomicU64,
    lost_stepped_down: AtomicU64,
    lost_shutdown: AtomicU64,
    renew_failures: AtomicU64,
    acquire_attempts: AtomicU64,
    renewals: AtomicU64,
}

impl Counters {
    pub(crate) fn elected(&self) {
        self.elected.fetch_add(1, Relaxed);
    }

    pub(crate) fn lost(&self, reason: LostReason) {
        let counter = match reason {
            LostReason::Expired => &self.lost_expired,
            LostReason::Superseded => &self.lost_superseded,
            LostReason::SteppedDown => &self.lost_stepped_down,
            LostReason::Shutdown => &self.lost_shutdown,
        };
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn renew_failed(&self) {
        self.renew_failures.fetch_add(1, Relaxed);
    }

    pub(crate) fn renewed(&self) {
        self.renewals.fetch_add(1, Relaxed);
    }

    pub(crate) fn acquire_attempt(&self) {
        self.acquire_attempts.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            elected: self.elected.load(Relaxed),
            lost_expired: self.lost_expired.load(Relaxed),
            lost_superseded: self.lost_superseded.load(Relaxed),
            lost_stepped_down: self.lost_stepped_down.load(Relaxed),
            lost_shutdown: self.lost_shutdown.load(Relaxed),
            renew_failures: self.renew_failures.load(Relaxed),
            acquire_attempts: self.acquire_attempts.load(Relaxed),
            renewals: self.renewals.load(Relaxed),
        }
    }
}
