//! The in-memory backend: the lease protocol inside one process, on tokio's clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::admin::{Inspected, PauseMark};
use super::fence::{Call, MemoryKeys as FencedKeys, Outcome};
use super::{Acquire, Channels, Counts, Member, NoticeSink, Op, Renew, SafeStart};
use crate::names::GroupKeys;
use crate::{Error, Result};

#[cfg(feature = "cron")]
mod cron;
mod once;

/// An in-process lease store with the same semantics as the Redis backend
/// (TTL, compare-and-set, fencing tokens, release notices), driven by tokio's
/// clock so tests can pause and advance time.
///
/// Clone it and give each clone to a [`Runtime`](crate::Runtime) to play
/// several instances in one process — the quickstart does that.
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
/// let a_ran = a.run_if_leader("jobs", || async { 1 }).await;
/// let b_ran = b.run_if_leader("jobs", || async { 2 }).await;
/// assert_eq!(a_ran, Some(1)); // the first to ask won the lease
/// assert_eq!(b_ran, None);
/// assert_eq!(b.leader_id("jobs").await?.as_deref(), Some("a"));
/// # a.shutdown().await;
/// # b.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

/// One membership key: instance id → when its entry expires, and the
/// counts it published (balanced leadership).
type Membership = HashMap<String, (Instant, Counts)>;

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    available: AtomicBool,
    notices: broadcast::Sender<(String, String)>,
    /// Tests: run-once steps apply, but their replies are lost.
    #[cfg(test)]
    lose_once_replies: AtomicBool,
    /// Tests: faults of one instance (see [`MemoryBackend::cut_off`]).
    #[cfg(test)]
    faults: Mutex<InstanceFaults>,
    /// Tests: the notice connections are down (see
    /// [`MemoryBackend::set_notices_up`]), and each runtime's flag that says
    /// whether its own is up.
    #[cfg(test)]
    notices_down: Arc<NoticesDown>,
    /// Acquire calls served (a batch counts once), as a server would count
    /// script calls.
    acquire_calls: AtomicU64,
    /// Balanced leadership's memberships: key → instance id → expiry and
    /// the counts it published.
    members: Mutex<HashMap<String, Membership>>,
}

#[derive(Debug, Default)]
struct State {
    data: Data,
    /// Which "server process" this is: a [`MemoryBackend::restore`] starts a
    /// new one, like a Redis restarted from a snapshot (its `run_id`).
    run: u64,
    /// The server marker's `since` (record.lua): when data was last lost
    /// ([`MemoryBackend::flush`], a restore) or a key evicted
    /// ([`MemoryBackend::lose_lease`]); `None`: never. Only a holder from
    /// before it can hide behind a missing record.
    since: Option<Instant>,
}

/// What a snapshot keeps.
#[derive(Debug, Default, Clone)]
struct Data {
    leases: HashMap<String, (String, Instant)>,
    records: HashMap<String, Record>,
    /// Cron jobs' decisions and histories (see `memory/cron.rs`).
    #[cfg(feature = "cron")]
    cron: cron::CronData,
    /// Keys written by fenced writes ([`crate::Fence`]).
    fenced: FencedKeys,
    /// Results of run-once names (see `memory/once.rs`).
    once: once::OnceData,
    /// The pause keys of paused groups, with who paused and why.
    paused: HashMap<String, PauseMark>,
}

/// A group's record, as `backend/scripts/record.lua` describes it.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// The last fencing token issued.
    token: u64,
    /// Until when the last holder (the current one included) may lead.
    until: Instant,
    /// Until when the holders before the current one may lead.
    prior: Instant,
    /// The server process that wrote `until` and `prior`.
    run: u64,
}

/// The data of a [`MemoryBackend`] at one moment, to [`restore`] later as a
/// Redis restarted from an older snapshot (or a lagging replica promoted).
///
/// [`restore`]: MemoryBackend::restore
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    data: Data,
}

/// The largest token: fits a signed 64-bit column of any store.
const MAX_TOKEN: u64 = i64::MAX as u64;

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend};
    ///
    /// let config = Config::builder().memory(MemoryBackend::new()).build()?;
    /// # drop(config);
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    pub fn new() -> Self {
        let (notices, _) = broadcast::channel(1024);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                available: AtomicBool::new(true),
                #[cfg(test)]
                lose_once_replies: AtomicBool::new(false),
                #[cfg(test)]
                faults: Mutex::default(),
                #[cfg(test)]
                notices_down: Arc::default(),
                notices,
                acquire_calls: AtomicU64::new(0),
                members: Mutex::default(),
            }),
        }
    }

    /// Simulate an outage: while unavailable every call fails with
    /// [`Error::Backend`] (leases keep expiring on the clock).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).build()?)?;
    /// backend.set_available(false);
    /// assert!(runtime.leader_id("jobs").await.is_err());
    /// backend.set_available(true);
    /// assert_eq!(runtime.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_available(&self, available: bool) {
        self.inner.available.store(available, Ordering::SeqCst);
    }

    /// Simulate a server that lost its data: every lease and token counter is
    /// gone, and the next leader of each group waits what is left of one ttl
    /// after the flush before its view turns true (safe start). A new
    /// `MemoryBackend` never had an earlier leader, so its first elections do
    /// not wait.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// backend.flush(); // as a Redis restarted without persistence
    /// assert_eq!(runtime.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush(&self) {
        let mut state = self.state();
        state.data = Data::default();
        state.since = Some(Instant::now());
    }

    /// Simulate the loss of one group's lease key alone, as an eviction
    /// under a `volatile-*` policy or a manual `DEL` would: the record stays,
    /// so the next leader's view waits until the last one's has certainly
    /// ended. As on Redis, where any eviction moves the server marker's
    /// `since` on (`record.lua`), a group with no record elected within one
    /// ttl after it waits for the rest of that ttl.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// backend.lose_lease("leader", "jobs");
    /// assert_eq!(runtime.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lose_lease(&self, key_prefix: &str, group: &str) {
        let keys = GroupKeys::new(key_prefix, group);
        let mut state = self.state();
        state.data.leases.remove(&keys.lease);
        // As Redis counts an eviction (record.lua's marker).
        state.since = Some(Instant::now());
    }

    /// The data as it is now, to [`restore`](Self::restore) later.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::MemoryBackend;
    ///
    /// let backend = MemoryBackend::new();
    /// let snapshot = backend.snapshot();
    /// backend.restore(&snapshot);
    /// ```
    pub fn snapshot(&self) -> MemorySnapshot {
        MemorySnapshot {
            data: self.state().data.clone(),
        }
    }

    /// Simulate a server restarted from an older snapshot, or a lagging
    /// replica promoted: the data is `snapshot`'s again (leases past their
    /// expiry are gone), and it is a new server process, which vouches for
    /// none of the records it finds. So the next leader of each group waits
    /// one ttl before its view begins, since leaders may have renewed on the
    /// old server after the snapshot was taken.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let before = backend.snapshot(); // nobody leads yet
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// backend.restore(&before);
    /// assert_eq!(runtime.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn restore(&self, snapshot: &MemorySnapshot) {
        let mut state = self.state();
        state.data = snapshot.data.clone();
        state.run += 1;
        state.since = Some(Instant::now());
    }

    /// Write a lease directly, as another party would (`SET key holder PX ttl`),
    /// e.g. to test what a leader does when someone else overwrites its lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// backend.overwrite("leader", "jobs", "intruder", Duration::from_secs(60));
    /// assert_eq!(runtime.leader_id("jobs").await?.as_deref(), Some("intruder"));
    /// // a's next renew finds it and ends a's view (LostReason::Superseded).
    /// # Ok(())
    /// # }
    /// ```
    pub fn overwrite(&self, key_prefix: &str, group: &str, holder: &str, ttl: Duration) {
        let keys = GroupKeys::new(key_prefix, group);
        self.state().data.leases.insert(
            keys.lease,
            (holder.to_owned(), crate::util::clock::deadline_in(ttl)),
        );
    }

    /// Evict the record at `key` (as an `allkeys-*` policy may), counted as
    /// an eviction.
    #[cfg(test)]
    pub(crate) fn evict_record(&self, key: &str) {
        let mut state = self.state();
        state.data.records.remove(key);
        state.since = Some(Instant::now());
    }

    /// Set the last token issued in the record at `key` (which exists).
    #[cfg(test)]
    pub(crate) fn set_last_token(&self, key: &str, token: u64) {
        if let Some(record) = self.state().data.records.get_mut(key) {
            record.token = token;
        }
    }

    /// The string at `key`, as fenced writes ([`Fence`](crate::Fence)) left
    /// it (`None`: absent, expired, or not a string), for tests of code that
    /// writes through a fence.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, Fenced, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).build()?)?;
    /// let written = runtime
    ///     .run_if_leader("jobs", || async {
    ///         let fence = leader_runtime::current_lease().unwrap().fence();
    ///         fence.set(fence.key("state"), "done").await
    ///     })
    ///     .await
    ///     .unwrap()?;
    /// assert!(matches!(written, Fenced::Applied(())));
    /// assert_eq!(backend.get("leader:{jobs}:state").as_deref(), Some(&b"done"[..]));
    /// # Ok(())
    /// # }
    /// ```
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.state().data.fenced.get(key)
    }

    /// The field `field` of the hash at `key`, as fenced writes left it.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::MemoryBackend;
    ///
    /// assert_eq!(MemoryBackend::new().hget("leader:{jobs}:h", "f"), None);
    /// ```
    pub fn hget(&self, key: &str, field: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.state().data.fenced.hget(key, field.as_ref())
    }

    /// A fenced write, against the record's token (see `fence.lua`).
    pub(super) fn fenced(&self, call: &Call<'_>) -> Result<Outcome> {
        self.check_available(call.group)?;
        let mut state = self.state();
        let run = state.run;
        let data = &mut state.data;
        // fence.lua's rule: only a record this server vouches for has a mark.
        let mark = data
            .records
            .get_mut(call.record)
            .filter(|r| r.run == run)
            .map(|r| &mut r.token);
        data.fenced.apply(mark, call)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The lock guards plain maps whose invariants hold between statements.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn faults(&self) -> std::sync::MutexGuard<'_, InstanceFaults> {
        self.inner
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Tests: from now on the lease calls (acquire, renew) of instance
    /// `id` fail, as over a link that is down for it alone (`None`: nobody's).
    #[cfg(test)]
    pub(crate) fn cut_off(&self, id: Option<&str>) {
        self.faults().cut_off = id.map(str::to_owned);
    }

    /// Tests: from now on the run-once steps of instance `id` apply at once
    /// but their replies arrive `delay` later, as over a slow link (`None`:
    /// nobody's).
    #[cfg(test)]
    pub(crate) fn delay_once_replies(&self, id: Option<(&str, Duration)>) {
        self.faults().slow_once = id.map(|(id, delay)| (id.to_owned(), delay));
    }

    /// Tests: how late the run-once replies of instance `id` arrive.
    #[cfg(test)]
    pub(crate) fn once_reply_delay(&self, id: &str) -> Option<Duration> {
        delay_for(&self.faults().slow_once, id)
    }

    /// Tests: from now on the acquire attempts of instance `id` apply at
    /// once but their answers arrive `delay` later (`None`: nobody's).
    #[cfg(test)]
    pub(crate) fn delay_acquire_replies(&self, id: Option<(&str, Duration)>) {
        self.faults().slow_acquire = id.map(|(id, delay)| (id.to_owned(), delay));
    }

    /// Tests: how late the acquire answers of instance `id` arrive.
    #[cfg(test)]
    pub(crate) fn acquire_reply_delay(&self, id: &str) -> Option<Duration> {
        delay_for(&self.faults().slow_acquire, id)
    }

    /// Tests: from now on the acquire attempts of instance `id` wait
    /// `delay` before they apply, as behind a burst of other calls on a
    /// busy server, and their answers come right after (`None`: nobody's).
    #[cfg(test)]
    pub(crate) fn delay_acquire_runs(&self, id: Option<(&str, Duration)>) {
        self.faults().queued_acquire = id.map(|(id, delay)| (id.to_owned(), delay));
    }

    /// Tests: how long the acquire attempts of instance `id` wait to apply.
    #[cfg(test)]
    pub(crate) fn acquire_run_delay(&self, id: &str) -> Option<Duration> {
        delay_for(&self.faults().queued_acquire, id)
    }

    #[cfg(test)]
    fn check_cut_off(&self, op: &Op<'_>) -> Result<()> {
        if self.faults().cut_off.as_deref() == Some(op.id) {
            return Err(Error::backend(op.group, "the link is down (simulated)"));
        }
        Ok(())
    }

    pub(super) fn check_available(&self, group: &str) -> Result<()> {
        if self.inner.available.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::backend(
                group,
                "memory backend is unavailable (simulated outage)",
            ))
        }
    }

    /// The live holder of `key` and its expiry, dropping it if expired.
    fn live<'s>(state: &'s mut State, key: &str) -> Option<&'s (String, Instant)> {
        let leases = &mut state.data.leases;
        let now = Instant::now();
        if leases.get(key).is_some_and(|(_, exp)| *exp <= now) {
            leases.remove(key);
        }
        leases.get(key)
    }

    /// How many acquire calls this store served (a batch counts once).
    #[cfg(test)]
    pub(crate) fn acquire_calls(&self) -> u64 {
        self.inner.acquire_calls.load(Ordering::SeqCst)
    }

    /// Refresh `id`'s membership at `key` for `ttl` with its counts
    /// (`None`: leave), and list the members refreshed within `fresh` with
    /// theirs (`members.lua`).
    pub(super) fn members(
        &self,
        key: &str,
        id: &str,
        refresh: Option<(Duration, Counts)>,
        fresh: Duration,
    ) -> Vec<Member> {
        let mut all = self
            .inner
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let set = all.entry(key.to_owned()).or_default();
        let now = Instant::now();
        match refresh {
            Some((ttl, counts)) => set.insert(id.to_owned(), (now + ttl, counts)),
            None => set.remove(id),
        };
        set.retain(|_, (until, _)| *until > now);
        // Refreshed within `fresh`: it expires later than `ttl - fresh` from now.
        let ttl = refresh.map_or(Duration::ZERO, |(ttl, _)| ttl);
        let live_after = now + ttl.saturating_sub(fresh);
        // As `members.lua`: none expires after ours (the fleet shares one
        // ttl), give or take `fresh`.
        let live_until = now + ttl + fresh;
        set.iter()
            .filter(|(_, (until, _))| *until > live_after && *until <= live_until)
            .map(|(id, (_, counts))| Member {
                id: id.clone(),
                counts: *counts,
            })
            .collect()
    }

    /// The attempts of `groups` for `id`, as one call.
    pub(super) fn acquire_many(
        &self,
        id: &str,
        ttl: Duration,
        groups: &[(&str, &GroupKeys)],
    ) -> Vec<Result<Acquire>> {
        self.inner.acquire_calls.fetch_add(1, Ordering::SeqCst);
        groups
            .iter()
            .map(|&(group, keys)| self.acquire_one(&Op { group, keys, id }, ttl))
            .collect()
    }

    fn acquire_one(&self, op: &Op<'_>, ttl: Duration) -> Result<Acquire> {
        self.check_available(op.group)?;
        #[cfg(test)]
        self.check_cut_off(op)?;
        let mut state = self.state();
        // The rule of acquire.lua: a paused group is acquired by nobody.
        if state.data.paused.contains_key(&op.keys.paused) {
            return Ok(Acquire::Paused);
        }
        let reclaim = match Self::live(&mut state, &op.keys.lease) {
            Some((holder, exp)) if holder != op.id => {
                let pttl = exp.saturating_duration_since(Instant::now());
                return Ok(Acquire::Held {
                    holder: holder.clone(),
                    pttl: Some(pttl),
                });
            }
            Some(_) => true,
            None => false,
        };
        // The rule of acquire.lua, on tokio's clock.
        let now = Instant::now();
        let record = state.data.records.get(&op.keys.record).copied();
        let (wait, why, prior) = match record {
            // No record: only a holder from before the last loss may still
            // lead (record.lua's marker); a new store had none.
            None => {
                let wait = state.since.map_or(Duration::ZERO, |since| {
                    (since + ttl).saturating_duration_since(now)
                });
                let why = if wait.is_zero() {
                    SafeStart::No
                } else {
                    SafeStart::First
                };
                (wait, why, now + wait)
            }
            Some(r) if r.run != state.run => (ttl, SafeStart::Unvouched, now + ttl),
            Some(r) => {
                // A re-claim waits only for the holders before us.
                let earlier = if reclaim { r.prior } else { r.until };
                let wait = earlier.saturating_duration_since(now);
                let why = if wait.is_zero() {
                    SafeStart::No
                } else {
                    SafeStart::Early
                };
                (wait, why, r.until)
            }
        };
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(MAX_TOKEN))
            .unwrap_or_default();
        let token = match record {
            Some(r) if r.token >= MAX_TOKEN => {
                return Err(Error::Protocol {
                    group: op.group.to_owned(),
                    message: "fencing tokens exhausted".to_owned(),
                })
            }
            Some(r) => (r.token + 1).max(now_us),
            None => now_us,
        };
        let run = state.run;
        state.data.records.insert(
            op.keys.record.clone(),
            Record {
                token,
                until: prior.max(now + ttl),
                prior,
                run,
            },
        );
        state
            .data
            .leases
            .insert(op.keys.lease.clone(), (op.id.to_owned(), now + ttl));
        Ok(Acquire::Won {
            token,
            wait,
            why,
            last: record.map(|r| r.token),
        })
    }

    pub(super) fn renew(&self, op: &Op<'_>, token: u64, ttl: Duration) -> Result<Renew> {
        self.check_available(op.group)?;
        #[cfg(test)]
        self.check_cut_off(op)?;
        let mut state = self.state();
        let found = Self::live(&mut state, &op.keys.lease).map(|(h, _)| h == op.id);
        Ok(match found {
            Some(true) if state.data.paused.contains_key(&op.keys.paused) => Renew::Paused,
            Some(true) => {
                let now = Instant::now();
                let run = state.run;
                // The rule of record.lua's renew_one: only on a vouched
                // record that still names the leadership renewed.
                match state.data.records.get_mut(&op.keys.record) {
                    Some(r) if r.run != run => return Ok(Renew::Unvouched),
                    Some(r) if r.token != token => return Ok(Renew::Other),
                    Some(r) => r.until = r.until.max(now + ttl),
                    None => return Ok(Renew::Unvouched),
                }
                state
                    .data
                    .leases
                    .insert(op.keys.lease.clone(), (op.id.to_owned(), now + ttl));
                Renew::Renewed
            }
            Some(false) => Renew::Other,
            None => Renew::Gone,
        })
    }

    pub(super) fn release(&self, op: &Op<'_>, channel: &str, token: u64) -> Result<bool> {
        self.check_available(op.group)?;
        let mut state = self.state();
        // Ours, and under the leadership we end (not a newer one of ours).
        let ours = Self::live(&mut state, &op.keys.lease).is_some_and(|(h, _)| h == op.id)
            && state
                .data
                .records
                .get(&op.keys.record)
                .is_some_and(|r| r.token == token);
        if ours {
            let run = state.run;
            state.data.leases.remove(&op.keys.lease);
            if let Some(r) = state.data.records.get_mut(&op.keys.record) {
                if r.run == run {
                    // We drained and ended our view: only earlier holders count.
                    r.until = r.prior.max(Instant::now());
                }
            }
            drop(state);
            // No receiver is fine: nobody waits.
            let _ = self
                .inner
                .notices
                .send((channel.to_owned(), format!("{} {}", op.group, op.id)));
        }
        Ok(ours)
    }

    /// Whether the backend answers (no simulated outage).
    pub(super) fn ping(&self) -> Result<()> {
        if self.inner.available.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::Connection {
                message: "memory backend is unavailable (simulated outage)".to_owned(),
                source: None,
            })
        }
    }

    pub(super) fn holder(&self, group: &str, keys: &GroupKeys) -> Result<Option<String>> {
        self.check_available(group)?;
        let mut state = self.state();
        Ok(Self::live(&mut state, &keys.lease).map(|(h, _)| h.clone()))
    }

    pub(super) fn spawn_notices(
        &self,
        channel: Channels,
        sink: NoticeSink,
        up: Arc<AtomicBool>,
        stop: CancellationToken,
    ) {
        let mut rx = self.inner.notices.subscribe();
        up.store(true, Ordering::SeqCst);
        #[cfg(test)]
        let notices_down = {
            let down = self.inner.notices_down.clone();
            let mut flags = down.flags.lock().unwrap_or_else(PoisonError::into_inner);
            flags.push(up.clone());
            up.store(!down.down.load(Ordering::SeqCst), Ordering::SeqCst);
            drop(flags);
            down
        };
        tokio::spawn(async move {
            loop {
                let received = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = rx.recv() => r,
                };
                match received {
                    // Tests: lost while the connection is down.
                    #[cfg(test)]
                    Ok(_) if notices_down.down.load(Ordering::SeqCst) => {}
                    Ok((ch, payload)) => {
                        if let Some(notice) = channel.parse(&ch, &payload) {
                            sink(notice);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
}

/// Tests: faults of one instance of a shared memory backend.
#[cfg(test)]
#[derive(Debug, Default)]
struct InstanceFaults {
    /// This instance's lease calls fail.
    cut_off: Option<String>,
    /// This instance's run-once replies arrive this much later.
    slow_once: Option<(String, Duration)>,
    /// This instance's acquire answers arrive this much later.
    slow_acquire: Option<(String, Duration)>,
    /// This instance's acquire attempts apply this much later.
    queued_acquire: Option<(String, Duration)>,
}

/// Tests: the delay of a slow instance's replies, if `id` is that instance.
#[cfg(test)]
fn delay_for(slow: &Option<(String, Duration)>, id: &str) -> Option<Duration> {
    match slow {
        Some((slow, delay)) if slow == id => Some(*delay),
        _ => None,
    }
}

/// Tests: the simulated notice connections (see
/// [`MemoryBackend::set_notices_up`]).
#[cfg(test)]
#[derive(Debug, Default)]
struct NoticesDown {
    down: AtomicBool,
    /// Each runtime's "notice connection up" flag.
    flags: Mutex<Vec<Arc<AtomicBool>>>,
}

#[cfg(test)]
impl MemoryBackend {
    /// Tests: take every runtime's notice connection down (`false`) or
    /// back up. While down, release notices and control requests are lost
    /// (not delivered later) and each runtime's flag says its connection is
    /// down, as with Redis; coming back up sends no reconnect notice.
    pub(crate) fn set_notices_up(&self, up: bool) {
        let notices = &self.inner.notices_down;
        notices.down.store(!up, Ordering::SeqCst);
        for flag in notices
            .flags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            flag.store(up, Ordering::SeqCst);
        }
    }
}

/// What the admin API (`admin/mod.rs`) reads and writes.
impl MemoryBackend {
    /// Publish `payload` on `channel`, as Redis `PUBLISH` would.
    pub(crate) fn publish(&self, channel: &str, payload: String) {
        // No receiver is fine: nobody listens.
        let _ = self.inner.notices.send((channel.to_owned(), payload));
    }

    /// Set the pause key `key`; whether it was new.
    pub(crate) fn set_paused(&self, group: &str, key: &str, mark: PauseMark) -> Result<bool> {
        self.check_available(group)?;
        Ok(self
            .state()
            .data
            .paused
            .insert(key.to_owned(), mark)
            .is_none())
    }

    /// Delete the pause key `key`; whether it existed.
    pub(crate) fn clear_paused(&self, group: &str, key: &str) -> Result<bool> {
        self.check_available(group)?;
        Ok(self.state().data.paused.remove(key).is_some())
    }

    /// What one group's keys hold.
    pub(crate) fn inspect(&self, group: &str, keys: &GroupKeys) -> Result<Inspected> {
        self.check_available(group)?;
        let mut state = self.state();
        let holder = Self::live(&mut state, &keys.lease).map(|(h, exp)| {
            let left = exp.saturating_duration_since(Instant::now());
            (h.clone(), Some(left))
        });
        Ok(Inspected {
            holder,
            token: state.data.records.get(&keys.record).map(|r| r.token),
            paused: state.data.paused.get(&keys.paused).cloned(),
        })
    }

    /// Every key of the lease protocol (lease, record, pause key).
    pub(crate) fn keys(&self) -> Result<Vec<String>> {
        self.check_available("*")?;
        let state = self.state();
        let data = &state.data;
        let keys = data.leases.keys().chain(data.records.keys());
        let keys = keys.chain(data.paused.keys()).cloned();
        #[cfg(feature = "cron")]
        let keys = keys.chain(data.cron.history_keys());
        Ok(keys.collect())
    }
}
