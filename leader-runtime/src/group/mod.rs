//! One group on this instance: the local view, admission of gated runs, and
//! what the election and the gate share.

pub(crate) mod admission;
pub(crate) mod in_flight;
pub(crate) mod lease;
pub(crate) mod status;

use std::collections::VecDeque;
#[cfg(test)]
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::SeqCst,
};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::{oneshot, Notify, SetOnce};
use tokio::time::Instant;

use crate::backend::fence::Target;
use crate::group::in_flight::InFlight;
use crate::group::lease::{Lease, Tenure};
use crate::group::status::{GroupStatus, Observed};
use crate::observe::stats::Counters;
use crate::util::clock;
use crate::Result;

/// A request to a group's election task.
pub(crate) enum Command {
    StepDown(oneshot::Sender<Result<()>>),
    /// The eligibility flag changed (it is already stored in
    /// [`Steering`]): hand over if it is now false and we lead, campaign
    /// again if it is now true.
    SetEligible(bool, oneshot::Sender<Result<()>>),
    /// The group was forgotten ([`Runtime::forget`](crate::Runtime::forget)):
    /// hand over if leading, then end the election.
    Forget(oneshot::Sender<Result<()>>),
}

/// At most this many ended leaderships are kept for gated runs still in
/// flight under them (a body that never returns would otherwise keep one per
/// leadership change, for ever). A run admitted under an older one finds no
/// [`current_lease`](crate::current_lease) any more: its view ended long ago.
const MAX_RETIRED: usize = 64;

/// One group on this instance, in named parts: what the gate reads
/// ([`View`]), the gated runs in flight ([`Runs`]), what steers the election
/// ([`Steering`]), and what it reports (`counters`, `observed`).
pub(crate) struct Group {
    pub(crate) name: Arc<str>,
    /// Who registered it, fixed at registration.
    pub(crate) kind: GroupKind,
    pub(crate) view: View,
    pub(crate) runs: Runs,
    pub(crate) control: Steering,
    pub(crate) counters: Counters,
    /// What the status page shows.
    pub(crate) observed: Observed,
    /// Where the fenced writes of this group's leaderships go.
    pub(crate) fence: OnceLock<Arc<Target>>,
    /// Tests: how many hand-overs for the balance the election counted in
    /// vain (taken back with nobody having held the group meanwhile).
    #[cfg(test)]
    pub(crate) vain_take_backs: AtomicU32,
}

/// The local view of the current leadership: the gate's atomics, and the
/// tenures `current_lease` finds.
pub(crate) struct View {
    /// Zero point of the nanosecond instants below (the group's creation).
    pub(crate) base: Instant,
    /// End of the current leadership's view in nanoseconds since `base`, 0
    /// while not leader. Mirrors the current tenure, so the gate checks one
    /// atomic against the clock and touches no reference count.
    until: AtomicU64,
    /// The token of the leadership `until` belongs to (stored before `until`).
    token: AtomicU64,
    /// The view's fast deadline on the kernel's coarse clock (see
    /// [`clock`]), 0 for none; stored before `until`, cleared before it.
    fast_until: AtomicU64,
    /// The current leadership; `None` while not leader.
    current: ArcSwapOption<Tenure>,
    /// Ended leaderships that gated runs still in flight may ask for with
    /// `current_lease`; emptied whenever nothing is in flight. Its lock also
    /// orders changes of `current` against those lookups (never the gate).
    retired: Mutex<Vec<Arc<Tenure>>>,
}

/// The gated runs in flight, and whether new ones may start.
pub(crate) struct Runs {
    /// False while draining: no new gated runs start.
    admitting: AtomicBool,
    in_flight: InFlight,
    /// A run in flight finished while not admitting.
    drained: Notify,
    /// Tests: [`Runs::busy`] says no (see [`Runs::blind_busy`]).
    #[cfg(test)]
    busy_blind: AtomicBool,
}

/// What steers the group's election from outside it.
pub(crate) struct Steering {
    pub(crate) commands: Mailbox,
    /// A release notice from another instance arrived (or the notice
    /// connection came back: leaders renew at once).
    pub(crate) released: Notify,
    /// An operator's request about the group arrived (pause, resume, or a
    /// step-down of the leadership running now). Apart from `released`: a
    /// step-down's cooldown ends at a release by another instance, never
    /// at a request.
    pub(crate) requested: Notify,
    /// The token of the leadership an operator asked this instance to hand
    /// over (a control request naming it as the holder; 0: none). Kept
    /// until a leadership of that token takes it, so a request that comes
    /// between the acquire's reply and the start of the leadership counts.
    pub(crate) step_down_token: AtomicU64,
    /// The token of the leadership the election runs now (0: none).
    pub(crate) leading_token: AtomicU64,
    /// Set once the election finished its first acquisition round.
    first_round: SetOnce<()>,
    /// Whether this instance takes part in the election.
    eligible: AtomicBool,
    /// Removed from its runtime's registry: call sites that cached it look
    /// the group up again.
    forgotten: AtomicBool,
    /// The group of this name forgotten before this one was registered,
    /// while its election has not ended (ours waits for it): a body of it
    /// that asks for a hand-over or a shutdown must not wait for its own
    /// drain through ours. Cleared when it has ended, so that a name
    /// forgotten and named again many times keeps no chain.
    predecessor: Mutex<Option<Arc<Group>>>,
    /// Set when the election task ends (its last hand-over done): from
    /// when this instance may claim the group again (`None`: at once; else
    /// a body of it may still run past its view).
    ended: SetOnce<Option<Instant>>,
}

/// Who registered a group, recorded when it is registered (never read from
/// its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupKind {
    /// Named by the user: a gated call, `run_if_leader`, `is_leader`, a cron
    /// job. Takes part in balanced leadership.
    User,
    /// A run-once call's group (`once:<name>`), registered for the call:
    /// outside balanced leadership, never handed over for it nor counted.
    Once,
}

impl Group {
    pub(crate) fn new(name: Arc<str>, kind: GroupKind, commands: Mailbox) -> Self {
        Self {
            name,
            kind,
            view: View {
                base: Instant::now(),
                until: AtomicU64::new(0),
                token: AtomicU64::new(0),
                fast_until: AtomicU64::new(0),
                current: ArcSwapOption::empty(),
                retired: Mutex::new(Vec::new()),
            },
            runs: Runs {
                admitting: AtomicBool::new(false),
                in_flight: InFlight::new(),
                drained: Notify::new(),
                #[cfg(test)]
                busy_blind: AtomicBool::new(false),
            },
            control: Steering {
                commands,
                released: Notify::new(),
                requested: Notify::new(),
                step_down_token: AtomicU64::new(0),
                leading_token: AtomicU64::new(0),
                first_round: SetOnce::new(),
                eligible: AtomicBool::new(true),
                forgotten: AtomicBool::new(false),
                predecessor: Mutex::new(None),
                ended: SetOnce::new(),
            },
            counters: Counters::default(),
            observed: Observed::new(),
            fence: OnceLock::new(),
            #[cfg(test)]
            vain_take_backs: AtomicU32::new(0),
        }
    }

    /// Local, lock-free: is the last confirmed lease certainly unexpired?
    #[inline]
    pub(crate) fn is_leader(&self) -> bool {
        self.view.is_leader()
    }

    /// The lease of the leadership with `token`: the current one, or an ended
    /// one a gated run still in flight was admitted under.
    pub(crate) fn lease(&self, token: u64) -> Option<Lease> {
        self.view.lease(token)
    }

    /// The current leadership, if any (its view may have just ended).
    pub(crate) fn tenure(&self) -> Option<Arc<Tenure>> {
        self.view.current.load_full()
    }

    /// A snapshot of this group as `instance_id` sees it now.
    pub(crate) fn status(&self, instance_id: &str) -> GroupStatus {
        let tenure = self.tenure().filter(|t| t.is_valid_now());
        self.observed.snapshot(
            &self.name,
            tenure.as_deref(),
            self.control.eligible(),
            instance_id,
        )
    }

    /// Start a leadership: publish the view and admit gated runs.
    pub(crate) fn begin(&self, tenure: Arc<Tenure>) {
        if let Some(target) = self.fence.get() {
            let _ = tenure.fence.set(target.clone());
        }
        let view = &self.view;
        let until = view.ns(tenure.valid_until());
        let mut retired = view.retired();
        // Not admitting since the last `stop_admitting`: the count is exact.
        if self.runs.in_flight.count() == 0 {
            retired.clear();
        }
        let fast_until = clock::fast_deadline(tenure.valid_until());
        view.token.store(tenure.token(), SeqCst);
        view.current.store(Some(tenure));
        view.fast_until.store(fast_until, SeqCst);
        view.until.store(until, SeqCst);
        self.runs.admitting.store(true, SeqCst);
    }

    /// A renewal moved the end of the current leadership's view.
    pub(crate) fn extend(&self, tenure: &Tenure, valid_until: Instant) {
        tenure.extend(valid_until);
        let view = &self.view;
        if view.until.load(SeqCst) != 0 {
            view.fast_until
                .store(clock::fast_deadline(valid_until), SeqCst);
            view.until.store(view.ns(valid_until), SeqCst);
        }
    }

    /// End the view now (the tenure itself is ended by the caller).
    pub(crate) fn end(&self) {
        let view = &self.view;
        view.fast_until.store(0, SeqCst);
        view.until.store(0, SeqCst);
        self.runs.stop_admitting();
        let mut retired = view.retired();
        let ended = view.current.swap(None);
        // A run admitted under the ended view counted itself before it read
        // the view, so a zero here means none was.
        if self.runs.in_flight.count() == 0 {
            retired.clear();
        } else {
            retired.extend(ended);
            if retired.len() > MAX_RETIRED {
                let excess = retired.len() - MAX_RETIRED;
                retired.drain(..excess);
                tracing::warn!(group = %self.name, "a gated run has been in flight across {MAX_RETIRED} leaderships; current_lease() inside the oldest runs now returns None");
            }
        }
    }
}

impl View {
    /// Whether a view is published at all (it may have run out): the gate's
    /// first check, one relaxed load.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.until.load(Relaxed) != 0
    }

    /// Local, lock-free: is the last confirmed lease certainly unexpired?
    #[inline]
    pub(crate) fn is_leader(&self) -> bool {
        self.until.load(SeqCst) != 0 && self.holds()
    }

    /// Whether the view (if any) holds now: the coarse clock says so cheaply
    /// while its end is well ahead; otherwise the precise clock decides.
    /// Never true at or after `valid_until`: read the view, then the clock.
    #[inline]
    pub(crate) fn holds(&self) -> bool {
        if clock::before_fast_deadline(self.fast_until.load(SeqCst)) {
            return true;
        }
        let until = self.until.load(SeqCst);
        until != 0 && self.now_ns() < until
    }

    /// The token of the published view: stored before it (and its fast
    /// deadline), so read after them it is at least as new as the view read.
    #[inline]
    pub(crate) fn token(&self) -> u64 {
        self.token.load(Acquire)
    }

    /// The monotonic clock, in nanoseconds since `base` (tokio's clock, so
    /// paused-time tests drive it).
    #[inline]
    fn now_ns(&self) -> u64 {
        self.ns(Instant::now())
    }

    #[inline]
    fn ns(&self, t: Instant) -> u64 {
        clock::nanos(t.saturating_duration_since(self.base))
    }

    fn retired(&self) -> MutexGuard<'_, Vec<Arc<Tenure>>> {
        self.retired.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lease(&self, token: u64) -> Option<Lease> {
        let retired = self.retired();
        let current = self.current.load_full().filter(|t| t.token() == token);
        current
            .or_else(|| retired.iter().find(|t| t.token() == token).cloned())
            .map(|tenure| Lease { tenure })
    }

    /// How many ended leaderships are kept for runs in flight.
    #[cfg(test)]
    pub(crate) fn retired_len(&self) -> usize {
        self.retired().len()
    }

    /// The fast deadline as stored (tests of the coarse clock's fast path).
    #[cfg(test)]
    pub(crate) fn fast_until(&self) -> u64 {
        self.fast_until.load(SeqCst)
    }
}

impl Runs {
    /// Count a run in (before it checks whether it may start).
    #[inline]
    pub(crate) fn enter(&self) {
        self.in_flight.enter();
    }

    /// Count a run out. Only a drain waits for the count to reach zero, and
    /// it stops admitting first: no wake-up (a lock inside `Notify`) while
    /// admitting. The load of `admitting` after the count is what
    /// `in_flight`'s argument needs (see its module docs).
    #[inline]
    pub(crate) fn leave(&self) {
        self.in_flight.leave();
        if !self.admitting.load(SeqCst) {
            self.drained.notify_waiters();
        }
    }

    /// Whether new gated runs may start, as a hint before counting in: no
    /// ordering, so it may be stale either way; only [`admitting`]'s answer
    /// after [`enter`] decides.
    ///
    /// [`admitting`]: Self::admitting
    /// [`enter`]: Self::enter
    #[inline]
    pub(crate) fn admitting_hint(&self) -> bool {
        self.admitting.load(Relaxed)
    }

    /// Whether new gated runs may start.
    #[inline]
    pub(crate) fn admitting(&self) -> bool {
        self.admitting.load(SeqCst)
    }

    /// Stop admitting new gated runs. When they were admitted until now, a
    /// heavy fence follows: every run that saw `admitting` true is then in
    /// the count (see `in_flight`), so a read of it decides.
    fn stop_admitting(&self) {
        if self.admitting.swap(false, SeqCst) {
            self.in_flight.fence();
        }
    }

    /// Stop admitting new gated runs, then wait for those in flight, at most
    /// until `deadline`. Returns whether all finished.
    pub(crate) async fn drain(&self, deadline: Instant) -> bool {
        self.stop_admitting();
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight.count() == 0 {
                return true;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => return self.in_flight.count() == 0,
            }
        }
    }

    /// Stop admitting if no gated run is in flight (`true`: none is, and
    /// none starts until the next view, so a drain that follows finds the
    /// count at zero at once); if one is, admit again as before and say
    /// `false`, without waiting for it. For a hand-over nobody needs (the
    /// balance's), which must not leave the group leaderless for a body
    /// that outlasts the view. The count is read after the heavy fence, as
    /// a drain reads it: exact. A gated call in that window (one heavy
    /// fence) is refused, as during any hand-over; the gate's path is
    /// unchanged. Only the election task changes `admitting`, so admitting
    /// again restores what it was.
    pub(crate) fn quiesce(&self) -> bool {
        let was = self.admitting.swap(false, SeqCst);
        if was {
            self.in_flight.fence();
        }
        if self.in_flight.count() == 0 {
            return true;
        }
        if was {
            self.admitting.store(true, SeqCst);
        }
        false
    }

    /// Whether a gated run seems to be in flight: the count without the
    /// drain's heavy fence, so a run that just started may not show — for a
    /// preference (balanced leadership skips a busy group without the cost
    /// of [`quiesce`](Self::quiesce)'s fence), never for safety.
    pub(crate) fn busy(&self) -> bool {
        #[cfg(test)]
        if self.busy_blind.load(Relaxed) {
            return false;
        }
        self.in_flight.count() > 0
    }

    /// Tests: make [`busy`](Self::busy) miss every run, as it may miss one
    /// that just started on another thread.
    #[cfg(test)]
    pub(crate) fn blind_busy(&self) {
        self.busy_blind.store(true, Relaxed);
    }

    /// Tests: act as if the drain's heavy fence had failed.
    #[cfg(test)]
    pub(crate) fn fail_fence(&self) {
        self.in_flight.fail_fence();
    }

    /// How many gated runs are in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.count()
    }
}

impl Steering {
    /// The election finished its first acquisition round.
    pub(crate) fn mark_first_round(&self) {
        let _ = self.first_round.set(());
    }

    /// Wait until the election finished its first acquisition round, at
    /// most `limit`; whether it has.
    pub(crate) async fn first_round(&self, limit: Duration) -> bool {
        if self.first_round.initialized() {
            return true;
        }
        tokio::time::timeout(limit, self.first_round.wait())
            .await
            .is_ok()
    }

    /// Whether this instance takes part in the election.
    pub(crate) fn eligible(&self) -> bool {
        self.eligible.load(SeqCst)
    }

    pub(crate) fn set_eligible(&self, eligible: bool) {
        self.eligible.store(eligible, SeqCst);
    }

    /// Mark the group removed from its runtime's registry.
    pub(crate) fn forget(&self) {
        self.forgotten.store(true, SeqCst);
    }

    /// The election task ended; this instance may claim the group again
    /// from `claim_after` on (see `ended`). Later calls change nothing.
    pub(crate) fn mark_ended(&self, claim_after: Option<Instant>) {
        let _ = self.ended.set(claim_after);
    }

    /// The forgotten predecessor this group's election waits for, if any.
    pub(crate) fn predecessor(&self) -> Option<Arc<Group>> {
        self.predecessor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Set (`Some`) or clear the predecessor.
    pub(crate) fn set_predecessor(&self, predecessor: Option<Arc<Group>>) {
        *self
            .predecessor
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = predecessor;
    }

    /// `Some` once the election task has ended: from when this instance may
    /// claim the group again (`None`: at once).
    pub(crate) fn has_ended(&self) -> Option<Option<Instant>> {
        self.ended.get().copied()
    }

    /// Wait until the election task has ended: from when this instance may
    /// claim the group again.
    pub(crate) async fn ended(&self) -> Option<Instant> {
        *self.ended.wait().await
    }

    /// Whether the group was removed from its runtime's registry. On the
    /// gate's path (a call site's cache check): inlined into the expansion.
    #[inline]
    pub(crate) fn is_forgotten(&self) -> bool {
        self.forgotten.load(SeqCst)
    }
}

/// A group's command queue, to its election task. What `mpsc::channel` did,
/// in a fraction of the memory (no cache-padded channel state, no block of 32
/// slots): about 1 KiB less per group, 10 MiB at 10,000 groups.
pub(crate) fn mailbox() -> (Mailbox, MailboxRx) {
    let shared = Arc::new(MailboxShared {
        queue: Mutex::new(VecDeque::new()),
        notify: Notify::new(),
        closed: AtomicBool::new(false),
    });
    (Mailbox(shared.clone()), MailboxRx(shared))
}

struct MailboxShared {
    queue: Mutex<VecDeque<Command>>,
    notify: Notify,
    /// The election ended: nothing will take commands any more.
    closed: AtomicBool,
}

impl MailboxShared {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Command>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sending half, kept by the group.
pub(crate) struct Mailbox(Arc<MailboxShared>);

impl Mailbox {
    /// Queue `command` for the election; gives it back once the election has ended.
    pub(crate) fn send(&self, command: Command) -> std::result::Result<(), Command> {
        let mut queue = self.0.queue();
        if self.0.closed.load(SeqCst) {
            return Err(command);
        }
        queue.push_back(command);
        drop(queue);
        self.0.notify.notify_one();
        Ok(())
    }
}

/// The receiving half, owned by the election task; dropping it refuses
/// later commands and drops queued ones (their callers see the reply
/// channel closed).
pub(crate) struct MailboxRx(Arc<MailboxShared>);

impl MailboxRx {
    /// The next command. Cancel safe: a command leaves the queue only when
    /// returned.
    pub(crate) async fn recv(&mut self) -> Command {
        loop {
            if let Some(command) = self.0.queue().pop_front() {
                return command;
            }
            // `notify_one` leaves a permit when nobody waits: no lost wake-up.
            self.0.notify.notified().await;
        }
    }
}

impl Drop for MailboxRx {
    fn drop(&mut self) {
        let mut queue = self.0.queue();
        self.0.closed.store(true, SeqCst);
        queue.clear();
    }
}

#[cfg(test)]
mod tests;
