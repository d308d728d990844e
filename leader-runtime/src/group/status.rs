//! What a health endpoint shows: each group's state as this instance knows it,
//! without a network call.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::group::lease::Tenure;
use crate::Error;

/// One group's state on this instance, as [`status`](crate::status()) and
/// [`Runtime::status`](crate::Runtime::status) report it.
///
/// Taking it never touches the network, so a health check stays fast while
/// Redis is slow or down. What is live and what is cached:
///
/// - **live** (read from the clock and atomics at the call): `is_leader`,
///   `token`, `valid_for`, `eligible`;
/// - **cached** (the last thing the election learned): `leader_id` (from the
///   last acquire reply, or this instance while it leads), `paused` (from the
///   last acquire or renew reply), `failing` and
///   `last_error` (from the last backend calls). A follower refreshes them
///   about once per `ttl - renew_interval`, a leader every `renew_interval`.
///   Ask [`leader_id`](crate::leader_id) for the backend's current answer.
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).instance_id("a").build()?)?;
/// runtime.run_if_leader("cleanup", || async {}).await;
/// let status = runtime.status();
/// assert_eq!(status.len(), 1);
/// let cleanup = &status[0];
/// assert_eq!(cleanup.group, "cleanup");
/// assert!(cleanup.is_leader);
/// assert_eq!(cleanup.leader_id.as_deref(), Some("a"));
/// assert!(cleanup.token.is_some() && cleanup.valid_for.is_some());
/// assert!(cleanup.eligible && !cleanup.failing && cleanup.last_error.is_none());
/// # runtime.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupStatus {
    /// The group's name.
    pub group: String,
    /// Whether this instance leads the group right now (the same answer as
    /// [`is_leader`](crate::is_leader)).
    pub is_leader: bool,
    /// Who leads, as last learned by this instance: itself while it leads,
    /// else the holder named by the last acquire reply; `None` when nobody
    /// held the lease then, or nothing is known yet (no reply since the last
    /// change, or a leadership of ours just ended).
    pub leader_id: Option<String>,
    /// The fencing token of this instance's leadership; `None` when not leader.
    pub token: Option<u64>,
    /// How long the local view stays valid without another renew; `None`
    /// when not leader.
    pub valid_for: Option<Duration>,
    /// Whether this instance takes part in the election; see
    /// [`set_eligible`](crate::set_eligible).
    pub eligible: bool,
    /// Whether the group is paused fleet-wide (`leader pause`), as this
    /// instance's last acquire or renew reply said (cached).
    pub paused: bool,
    /// Whether the last backend call of this group's election failed (the
    /// backend is unreachable, slow or erroring right now).
    pub failing: bool,
    /// The last backend error of this group's election, kept after recovery
    /// until a newer one replaces it (so see `failing` for "right now"). Never
    /// contains credentials.
    pub last_error: Option<String>,
    /// The group's cron jobs built on this runtime, each with the last runs
    /// this instance saw through (feature `cron`; the fleet-wide history is
    /// [`cron::history`](crate::cron::history())).
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub cron_jobs: Vec<crate::observe::jobs::JobStatus>,
}

/// What the election tells the status page; written by the election task,
/// read by [`GroupStatus`] snapshots.
#[derive(Debug)]
pub(crate) struct Observed {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    holder: Option<Arc<str>>,
    paused: bool,
    failing: bool,
    last_error: Option<Error>,
}

impl Observed {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The holder as the backend last named it (`None`: nobody, or unknown).
    pub(crate) fn saw_holder(&self, holder: Option<&str>) {
        let mut state = self.state();
        if state.holder.as_deref() != holder {
            state.holder = holder.map(Arc::from);
        }
    }

    /// Whether the backend said the group is paused; returns whether that
    /// changed.
    pub(crate) fn saw_paused(&self, paused: bool) -> bool {
        let mut state = self.state();
        std::mem::replace(&mut state.paused, paused) != paused
    }

    /// A backend call succeeded.
    pub(crate) fn ok(&self) {
        self.state().failing = false;
    }

    /// A snapshot of the group named `group` as `instance_id` sees it now:
    /// `tenure` is its leadership if its view holds, `eligible` its
    /// eligibility flag.
    pub(crate) fn snapshot(
        &self,
        group: &str,
        tenure: Option<&Tenure>,
        eligible: bool,
        instance_id: &str,
    ) -> GroupStatus {
        let state = self.state();
        let leader_id = match tenure {
            Some(_) => Some(instance_id.to_owned()),
            None => state.holder.as_deref().map(str::to_owned),
        };
        GroupStatus {
            group: group.to_owned(),
            is_leader: tenure.is_some(),
            leader_id,
            token: tenure.map(|t| t.token()),
            valid_for: tenure.map(|t| t.valid_until().saturating_duration_since(Instant::now())),
            eligible,
            paused: state.paused,
            failing: state.failing,
            last_error: state.last_error.as_ref().map(Error::to_string),
            #[cfg(feature = "cron")]
            cron_jobs: Vec::new(),
        }
    }

    /// A backend call failed.
    pub(crate) fn failed(&self, e: &Error) {
        let mut state = self.state();
        state.failing = true;
        state.last_error = Some(e.clone());
    }

    /// The error of the last backend call, if it failed.
    pub(crate) fn failure(&self) -> Option<Error> {
        let state = self.state();
        state.last_error.as_ref().filter(|_| state.failing).cloned()
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
