//! One group on this instance: the local view, admission of gated runs, and
//! what the election and the gate share.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;

use crate::lease::{Lease, Tenure};
use crate::stats::Counters;
use crate::status::Observed;
use crate::Result;

tokio::task_local! {
    static CURRENT_LEASE: Lease;
}

/// The lease of the gated body running on this task, if any.
pub(crate) fn current_lease() -> Option<Lease> {
    CURRENT_LEASE.try_with(Lease::clone).ok()
}

/// A request to a group's election task.
pub(crate) enum Command {
    StepDown(oneshot::Sender<Result<()>>),
    /// The eligibility flag changed (it is already stored in
    /// [`Observed`]): hand over if it is now false and we lead, campaign
    /// again if it is now true.
    SetEligible(bool, oneshot::Sender<Result<()>>),
}

pub(crate) struct Group {
    pub(crate) name: Arc<str>,
    pub(crate) base: Instant,
    /// The current leadership; `None` while not leader.
    current: ArcSwapOption<Tenure>,
    /// False while draining: no new gated runs start.
    admitting: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
    /// A release notice from another instance arrived.
    pub(crate) released: Notify,
    first_round: watch::Sender<bool>,
    pub(crate) counters: Counters,
    /// What the status page shows; also the eligibility flag.
    pub(crate) observed: Observed,
    pub(crate) commands: mpsc::Sender<Command>,
}

impl Group {
    pub(crate) fn new(name: Arc<str>, commands: mpsc::Sender<Command>) -> Self {
        Self {
            name,
            base: Instant::now(),
            current: ArcSwapOption::empty(),
            admitting: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
            released: Notify::new(),
            first_round: watch::Sender::new(false),
            counters: Counters::default(),
            observed: Observed::new(true),
            commands,
        }
    }

    /// Local, lock-free: is the last confirmed lease certainly unexpired?
    #[inline]
    pub(crate) fn is_leader(&self) -> bool {
        self.current
            .load()
            .as_ref()
            .is_some_and(|tenure| tenure.is_valid_now())
    }

    /// The current leadership, if any (its view may have just ended).
    pub(crate) fn tenure(&self) -> Option<Arc<Tenure>> {
        self.current.load_full()
    }

    /// Start a leadership: publish the view and admit gated runs.
    pub(crate) fn begin(&self, tenure: Arc<Tenure>) {
        self.current.store(Some(tenure));
        self.admitting.store(true, SeqCst);
    }

    /// End the view now (the tenure itself is ended by the caller).
    pub(crate) fn end(&self) {
        self.admitting.store(false, SeqCst);
        self.current.store(None);
    }

    /// Stop admitting new gated runs, then wait for those in flight, at most
    /// until `deadline`. Returns whether all finished.
    pub(crate) async fn drain(&self, deadline: Instant) -> bool {
        self.admitting.store(false, SeqCst);
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight.load(SeqCst) == 0 {
                return true;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => return self.in_flight.load(SeqCst) == 0,
            }
        }
    }

    /// Admit one gated run if this instance leads and is not draining.
    fn admit(&self) -> Option<Admitted<'_>> {
        let tenure = self.current.load_full()?;
        if !tenure.is_valid_now() {
            return None;
        }
        // Count first, then check the flag: a drain that cleared the flag
        // before our check waits for us; one that cleared it after sees us.
        self.in_flight.fetch_add(1, SeqCst);
        let admitted = Admitted {
            group: self,
            lease: Lease { tenure },
        };
        if self.admitting.load(SeqCst) {
            Some(admitted)
        } else {
            None // dropping `admitted` undoes the count
        }
    }

    /// Run an async gated body: `None` when not leader, or when
    /// `cancel_on_loss` and the leadership ended before the body finished.
    pub(crate) async fn run<F: Future>(&self, cancel_on_loss: bool, body: F) -> Option<F::Output> {
        let admitted = self.admit()?;
        let lease = admitted.lease.clone();
        let body = CURRENT_LEASE.scope(admitted.lease.clone(), body);
        if cancel_on_loss {
            tokio::select! {
                biased;
                out = body => Some(out),
                _ = lease.lost() => {
                    tracing::warn!(group = %self.name, token = lease.token(), "leadership ended mid-run; gated body cancelled");
                    None
                }
            }
        } else {
            Some(body.await)
        }
    }

    /// Run a sync gated body: `None` when not leader.
    pub(crate) fn run_sync<T>(&self, body: impl FnOnce() -> T) -> Option<T> {
        let admitted = self.admit()?;
        Some(CURRENT_LEASE.sync_scope(admitted.lease.clone(), body))
    }

    pub(crate) fn mark_first_round(&self) {
        self.first_round
            .send_if_modified(|done| !std::mem::replace(done, true));
    }

    /// Wait until the election finished its first acquisition round, at most `limit`.
    pub(crate) async fn first_round(&self, limit: Duration) {
        if *self.first_round.borrow() {
            return;
        }
        let mut rx = self.first_round.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
    }
}

/// A gated run in flight; dropping it lets a drain proceed.
struct Admitted<'a> {
    group: &'a Group,
    lease: Lease,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.group.in_flight.fetch_sub(1, SeqCst) == 1 {
            self.group.drained.notify_waiters();
        }
    }
}
