//! One group on this instance: the local view, admission of gated runs, and
//! what the election and the gate share.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::SeqCst,
};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::clock;
use crate::current::Handle;
use crate::lease::{Lease, Tenure};
use crate::stats::Counters;
use crate::status::Observed;
use crate::Result;

/// A request to a group's election task.
pub(crate) enum Command {
    StepDown(oneshot::Sender<Result<()>>),
    /// The eligibility flag changed (it is already stored in
    /// [`Observed`]): hand over if it is now false and we lead, campaign
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

pub(crate) struct Group {
    pub(crate) name: Arc<str>,
    pub(crate) base: Instant,
    /// The gate's view: end of the current leadership's view in nanoseconds
    /// since `base`, 0 while not leader. Mirrors the current tenure, so the
    /// gate checks one atomic against the clock and touches no reference count.
    view: AtomicU64,
    /// The token of the leadership `view` belongs to (stored before `view`).
    token: AtomicU64,
    /// The view's fast deadline on the kernel's coarse clock (see
    /// [`clock`]), 0 for none; stored before `view`, cleared before it.
    fast_until: AtomicU64,
    /// The current leadership; `None` while not leader.
    current: ArcSwapOption<Tenure>,
    /// Ended leaderships that gated runs still in flight may ask for with
    /// `current_lease`; emptied whenever nothing is in flight. Its lock also
    /// orders changes of `current` against those lookups (never the gate).
    retired: Mutex<Vec<Arc<Tenure>>>,
    /// False while draining: no new gated runs start.
    admitting: AtomicBool,
    /// Removed from its runtime's registry: call sites that cached it look
    /// the group up again.
    forgotten: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
    /// A release notice from another instance arrived.
    pub(crate) released: Notify,
    /// The election finished its first acquisition round (`first_round_done`).
    first_round_done: AtomicBool,
    first_round: Notify,
    pub(crate) counters: Counters,
    /// What the status page shows; also the eligibility flag.
    pub(crate) observed: Observed,
    pub(crate) commands: Mailbox,
    /// Where the fenced writes of this group's leaderships go.
    pub(crate) fence: std::sync::OnceLock<Arc<crate::fence::Target>>,
}

impl Group {
    pub(crate) fn new(name: Arc<str>, commands: Mailbox) -> Self {
        Self {
            name,
            base: Instant::now(),
            view: AtomicU64::new(0),
            token: AtomicU64::new(0),
            fast_until: AtomicU64::new(0),
            current: ArcSwapOption::empty(),
            retired: Mutex::new(Vec::new()),
            admitting: AtomicBool::new(false),
            forgotten: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
            released: Notify::new(),
            first_round_done: AtomicBool::new(false),
            first_round: Notify::new(),
            counters: Counters::default(),
            observed: Observed::new(true),
            commands,
            fence: std::sync::OnceLock::new(),
        }
    }

    /// Local, lock-free: is the last confirmed lease certainly unexpired?
    #[inline]
    pub(crate) fn is_leader(&self) -> bool {
        self.view.load(SeqCst) != 0 && self.view_holds()
    }

    /// Whether the view (if any) holds now: the coarse clock says so cheaply
    /// while its end is well ahead; otherwise the precise clock decides.
    /// Never true at or after `valid_until`: read the view, then the clock.
    #[inline]
    fn view_holds(&self) -> bool {
        if clock::before_fast_deadline(self.fast_until.load(SeqCst)) {
            return true;
        }
        let view = self.view.load(SeqCst);
        view != 0 && self.now_ns() < view
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

    /// The lease of the leadership with `token`: the current one, or an ended
    /// one a gated run still in flight was admitted under.
    pub(crate) fn lease(&self, token: u64) -> Option<Lease> {
        let retired = self.retired();
        let current = self.current.load_full().filter(|t| t.token() == token);
        current
            .or_else(|| retired.iter().find(|t| t.token() == token).cloned())
            .map(|tenure| Lease { tenure })
    }

    /// The current leadership, if any (its view may have just ended).
    pub(crate) fn tenure(&self) -> Option<Arc<Tenure>> {
        self.current.load_full()
    }

    /// Start a leadership: publish the view and admit gated runs.
    pub(crate) fn begin(&self, tenure: Arc<Tenure>) {
        if let Some(target) = self.fence.get() {
            let _ = tenure.fence.set(target.clone());
        }
        let view = self.ns(tenure.valid_until());
        let mut retired = self.retired();
        if self.in_flight.load(SeqCst) == 0 {
            retired.clear();
        }
        let fast_until = clock::fast_deadline(tenure.valid_until());
        self.token.store(tenure.token(), SeqCst);
        self.current.store(Some(tenure));
        self.fast_until.store(fast_until, SeqCst);
        self.view.store(view, SeqCst);
        self.admitting.store(true, SeqCst);
    }

    /// A renewal moved the end of the current leadership's view.
    pub(crate) fn extend(&self, tenure: &Tenure, valid_until: Instant) {
        tenure.extend(valid_until);
        if self.view.load(SeqCst) != 0 {
            self.fast_until
                .store(clock::fast_deadline(valid_until), SeqCst);
            self.view.store(self.ns(valid_until), SeqCst);
        }
    }

    /// End the view now (the tenure itself is ended by the caller).
    pub(crate) fn end(&self) {
        self.fast_until.store(0, SeqCst);
        self.view.store(0, SeqCst);
        self.admitting.store(false, SeqCst);
        let mut retired = self.retired();
        let ended = self.current.swap(None);
        // A run admitted under the ended view counted itself before it read
        // the view, so a zero here means none was.
        if self.in_flight.load(SeqCst) == 0 {
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

    /// Mark the group removed from its runtime's registry.
    pub(crate) fn forget(&self) {
        self.forgotten.store(true, SeqCst);
    }

    /// Whether the group was removed from its runtime's registry.
    pub(crate) fn is_forgotten(&self) -> bool {
        self.forgotten.load(SeqCst)
    }

    /// How many ended leaderships are kept for runs in flight.
    #[cfg(test)]
    pub(crate) fn retired_len(&self) -> usize {
        self.retired().len()
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

    /// Run an async gated body: `None` when not leader, or when
    /// `cancel_on_loss` and the leadership ended before the body finished.
    pub(crate) async fn run<F: Future>(
        self: &Arc<Self>,
        cancel_on_loss: bool,
        body: F,
    ) -> Option<F::Output> {
        run_admitted(admit(self.clone())?, cancel_on_loss, body).await
    }

    /// How many gated runs are in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(SeqCst)
    }

    pub(crate) fn mark_first_round(&self) {
        if !self.first_round_done.swap(true, SeqCst) {
            self.first_round.notify_waiters();
        }
    }

    /// Wait until the election finished its first acquisition round, at most `limit`.
    pub(crate) async fn first_round(&self, limit: Duration) {
        if self.first_round_done.load(SeqCst) {
            return;
        }
        let notified = self.first_round.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.first_round_done.load(SeqCst) {
            return;
        }
        let _ = tokio::time::timeout(limit, notified).await;
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
    pub(crate) async fn send(&self, command: Command) -> std::result::Result<(), Command> {
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
    /// returned. Never `None` (the group holds the sender), like the channel
    /// it replaces while its sender lives.
    pub(crate) async fn recv(&mut self) -> Option<Command> {
        loop {
            if let Some(command) = self.0.queue().pop_front() {
                return Some(command);
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

/// Admit one gated run if this instance leads `group`, the view is valid now
/// and the group is not draining. The gate's hot path: on a follower one
/// atomic load; on a leader two atomic read-modify-writes (count in, and out
/// on drop), a few loads and one read of the monotonic clock (the kernel's
/// coarse one, the precise one near the view's end: see [`clock`]). No lock,
/// no allocation, and with a call site's `&'static Group` no reference count.
#[inline]
pub(crate) fn admit<G: Deref<Target = Group>>(group: G) -> Option<Admitted<G>> {
    if group.view.load(Relaxed) == 0 {
        return None; // not leader: no clock read
    }
    // Count first, then check: a drain that stopped admitting before our
    // check waits for us; one that stopped it after sees us.
    group.in_flight.fetch_add(1, SeqCst);
    let mut admitted = Admitted { group, token: 0 };
    // Dropping `admitted` undoes the count.
    let group = &*admitted.group;
    if !group.admitting.load(SeqCst) {
        return None;
    }
    if !group.view_holds() {
        return None;
    }
    // Stored before the view (and its fast deadline), so at least as new
    // as the view just read.
    admitted.token = group.token.load(Acquire);
    Some(admitted)
}

/// A gated run in flight in `group` (a call site's `&'static Group` or an
/// `Arc<Group>`), admitted under the leadership with `token`. The body runs
/// in its scope (how `current_lease` finds its lease: see
/// [`current`](crate::current)), and dropping it lets a drain proceed.
pub(crate) struct Admitted<G: Deref<Target = Group>> {
    pub(crate) group: G,
    pub(crate) token: u64,
}

impl<G: Deref<Target = Group>> Drop for Admitted<G> {
    #[inline]
    fn drop(&mut self) {
        let group = &*self.group;
        // Only a drain waits for the count to reach zero, and it stops
        // admitting first: no wake-up (a lock inside `Notify`) otherwise.
        if group.in_flight.fetch_sub(1, SeqCst) == 1 && !group.admitting.load(SeqCst) {
            group.drained.notify_waiters();
        }
    }
}

/// Run an async gated body under `admitted`: `None` when `cancel_on_loss`
/// and the leadership ended before the body finished. The body enters its
/// scope here, before anything is returned, so that the admission is never
/// held apart from it: dropped unpolled or not, the body goes first.
pub(crate) fn run_admitted<G: Handle, F: Future>(
    admitted: Admitted<G>,
    cancel_on_loss: bool,
    body: F,
) -> impl Future<Output = Option<F::Output>> {
    let lease = cancel_on_loss.then(|| admitted.group.lease(admitted.token));
    let body = G::scope(admitted, body);
    async move {
        let lease = match lease {
            None => return Some(body.await),
            Some(lease) => lease?,
        };
        tokio::select! {
            biased;
            out = body => Some(out),
            _ = lease.lost() => {
                tracing::warn!(group = lease.group(), token = lease.token(), "leadership ended mid-run; gated body cancelled");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;

    use tokio::time::{sleep, Instant};

    use crate::{current_lease, Config, MemoryBackend, Runtime};

    /// On tokio's real clock the gate takes the coarse clock's fast path
    /// while the view's end is far, and still stops admitting on time.
    #[tokio::test]
    async fn on_the_real_clock_the_gate_stops_admitting_when_the_view_ends() {
        let mem = MemoryBackend::new();
        let a = Runtime::new(
            Config::builder()
                .memory(mem.clone())
                .ttl(Duration::from_secs(1))
                .renew_interval(Duration::from_millis(200))
                .instance_id("a")
                .build()
                .unwrap(),
        )
        .unwrap();
        assert!(a.run_if_leader("g", || async {}).await.is_some());
        let group = a.group("g").unwrap();
        assert_ne!(
            group.fast_until.load(SeqCst),
            0,
            "a fast deadline on the real clock"
        );
        mem.set_available(false); // no more renewals: the view runs out
        let (mut fast, mut last_valid_until) = (0, None);
        loop {
            let called = Instant::now();
            let fast_before = group.fast_until.load(SeqCst);
            let Some(valid_until) = a
                .run_if_leader("g", || async { current_lease().unwrap().valid_until() })
                .await
            else {
                break;
            };
            assert!(
                called < valid_until,
                "admitted {:?} after the view ended",
                called - valid_until
            );
            if crate::clock::before_fast_deadline(fast_before) {
                fast += 1;
            }
            last_valid_until = Some(valid_until);
            tokio::task::yield_now().await;
        }
        let valid_until = last_valid_until.expect("admitted while the view held");
        let late = Instant::now().saturating_duration_since(valid_until);
        assert!(
            late < Duration::from_millis(100),
            "still admitting {late:?} after the view ended"
        );
        assert!(fast > 0, "never on the fast path");
        a.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_keeps_the_lease_it_was_admitted_under_after_a_new_leadership() {
        let mem = MemoryBackend::new();
        let a = Runtime::new(
            Config::builder()
                .memory(mem.clone())
                .ttl(Duration::from_secs(3))
                .renew_interval(Duration::from_secs(1))
                .instance_id("a")
                .build()
                .unwrap(),
        )
        .unwrap();
        let first = a
            .run_if_leader("g", || async { current_lease().unwrap().token() })
            .await
            .unwrap();
        let a2 = a.clone();
        let body = tokio::spawn(async move {
            a2.run_if_leader("g", || async {
                sleep(Duration::from_secs(10)).await;
                current_lease()
            })
            .await
        });
        // The view expires while the body runs; then this instance leads again.
        sleep(Duration::from_millis(10)).await;
        mem.set_available(false);
        sleep(Duration::from_secs(4)).await;
        assert!(!a.is_leader("g"));
        mem.set_available(true);
        sleep(Duration::from_secs(2)).await;
        let second = a
            .run_if_leader("g", || async { current_lease().unwrap().token() })
            .await
            .expect("leads again");
        assert!(second > first);
        let lease = body.await.unwrap().expect("admitted").expect("a lease");
        assert_eq!(lease.token(), first, "the lease it was admitted under");
        assert!(!lease.is_valid());
        assert!(current_lease().is_none(), "outside any gated body");
        a.shutdown().await;
    }
}
