//! Transitions, as events on a broadcast channel.

use tokio::time::Instant;

/// Why this instance stopped leading a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The lease could not be renewed before the local view ended
    /// (Redis unreachable, slow, or restarted).
    Expired,
    /// The server says another instance (or another value) holds the lease.
    Superseded,
    /// [`step_down`](crate::step_down) handed the lease over.
    SteppedDown,
    /// [`shutdown`](crate::shutdown) (or dropping the runtime) released it.
    Shutdown,
}

impl LostReason {
    /// The reason as a short lowercase label (`"expired"`, …), as used in metrics.
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
    pub fn group(&self) -> &str {
        match self {
            Event::Elected { group, .. }
            | Event::Renewed { group, .. }
            | Event::Lost { group, .. }
            | Event::BackendError { group, .. } => group,
        }
    }
}
