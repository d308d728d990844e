//! Transitions, as events on a broadcast channel.

use tokio::time::Instant;

/// Why this instance stopped leading a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, LostReason, MemoryBackend};
///
/// let config = Config::builder()
///     .memory(MemoryBackend::new())
///     .on_lost(|group, reason| match reason {
///         LostReason::Expired | LostReason::Superseded => eprintln!("{group}: lost ({reason})"),
///         LostReason::SteppedDown | LostReason::Shutdown => {} // we let go ourselves
///         _ => {}
///     })
///     .build()?;
/// # drop(config);
/// # Ok::<(), leader_runtime::Error>(())
/// ```
pub enum LostReason {
    /// The lease could not be renewed before the local view ended
    /// (Redis unreachable, slow, or restarted).
    Expired,
    /// The server says another instance (or another value) holds the lease.
    Superseded,
    /// [`step_down`](crate::step_down) handed the lease over.
    SteppedDown,
    /// [`shutdown`](crate::shutdown()) (or dropping the runtime) released it.
    Shutdown,
}

impl LostReason {
    /// The reason as a short lowercase label (`"expired"`, …), as used in metrics.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::LostReason;
    ///
    /// assert_eq!(LostReason::SteppedDown.as_str(), "stepped_down");
    /// assert_eq!(LostReason::Expired.to_string(), "expired");
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Superseded => "superseded",
            LostReason::SteppedDown => "stepped_down",
            LostReason::Shutdown => "shutdown",
        }
    }
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One transition of one group on this instance; see [`subscribe`](crate::subscribe).
#[derive(Debug, Clone)]
#[non_exhaustive]
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, Event, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let mut events = runtime.subscribe();
/// runtime.run_if_leader("jobs", || async {}).await;
/// runtime.shutdown().await;
/// assert!(matches!(events.recv().await, Ok(Event::Elected { .. })));
/// assert!(matches!(events.recv().await, Ok(Event::Lost { .. })));
/// # Ok(())
/// # }
/// ```
pub enum Event {
    /// This instance became leader.
    Elected {
        /// The group.
        group: String,
        /// This instance's id.
        instance_id: String,
        /// The fencing token of this leadership.
        token: u64,
        /// Until when the local view is certainly valid.
        valid_until: Instant,
    },
    /// The lease was renewed; the view now lasts until `valid_until`.
    Renewed {
        /// The group.
        group: String,
        /// The fencing token of this leadership.
        token: u64,
        /// The new end of the local view.
        valid_until: Instant,
    },
    /// This instance stopped leading.
    Lost {
        /// The group.
        group: String,
        /// This instance's id.
        instance_id: String,
        /// The fencing token of the leadership that ended.
        token: u64,
        /// Why.
        reason: LostReason,
    },
    /// An operator asked this instance to hand the group over (`leader
    /// step-down`): it drains, then releases ([`Event::Lost`] with
    /// [`LostReason::SteppedDown`] follows) and stays out of the race for one
    /// `ttl`, as after [`step_down`](crate::step_down).
    StepDownRequested {
        /// The group.
        group: String,
        /// The fencing token of the leadership handed over.
        token: u64,
    },
    /// This instance found the group paused fleet-wide (`leader pause`): it
    /// does not acquire it, and hands it over if it led ([`Event::Lost`] with
    /// [`LostReason::SteppedDown`] follows then). Sent once per pause seen.
    Paused {
        /// The group.
        group: String,
    },
    /// This instance found the pause it reported ended (`leader resume`): it
    /// campaigns again.
    Resumed {
        /// The group.
        group: String,
    },
    /// A backend call failed (the first of a burst; recovery is not an event).
    BackendError {
        /// The group.
        group: String,
        /// What went wrong (never includes credentials).
        message: String,
    },
}

impl Event {
    /// The group the event is about.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
    /// let mut events = runtime.subscribe();
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// assert_eq!(events.recv().await.unwrap().group(), "jobs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn group(&self) -> &str {
        match self {
            Event::Elected { group, .. }
            | Event::Renewed { group, .. }
            | Event::Lost { group, .. }
            | Event::StepDownRequested { group, .. }
            | Event::Paused { group }
            | Event::Resumed { group }
            | Event::BackendError { group, .. } => group,
        }
    }
}
