//! Renewals and follower attempts of many groups in a few round trips.
//!
//! Each runtime renews all its leases at one phase of the renew interval
//! ([`RenewBatcher::align`]): a renewal due at `t` is sent at the last
//! instant up to `t` that lies on this runtime's phase, so after its first
//! renewal every lease the runtime holds is renewed at the same instants,
//! and expires at the same instants, however the groups were won (at a
//! first election, one by one from a crashed leader, by hand-overs for the
//! balance). A runtime leading more than 400 groups uses one phase per 400
//! instead, on slots 500 ms apart (as many as fit in the interval; one
//! phase under a second; `phases.rs`), so that its crash frees its leases
//! in waves. Renewals that arrive together are sent as one `renew_many.lua`
//! call per chunk of keys (per hash slot on a cluster), the chunks at once
//! on the one multiplexed connection: 10,000 leaders cost about twenty
//! commands per tick, not 10,000 round trips. Each runtime draws its own
//! phase (a step of the followers' 250 ms grid when the interval is made of
//! such steps): when one instance dies, only its leases expire at its
//! instant. A batch (of renewals, or of attempts) is what arrives
//! together: on Redis, until no request came for a few milliseconds
//! ([`gather`]), so tasks that the OS preempted do not make calls of their
//! own.
//!
//! Followers do the same ([`AttemptBatcher`]): an attempt waits for the
//! lease's expiry moved onto a grid ([`AttemptBatcher::follow_at`]), so the
//! attempts of the groups whose leases expire together (renewed together)
//! are due together, and go as one `acquire_many.lua` call per chunk. A
//! follower's load then grows with its hash slots and the number of renew
//! phases of the leaders it follows (one per leader, and one per 400 groups
//! of a leader of more), not with its groups.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::phases::{Holding, Leading};
use super::{Acquire, Backend, Renew};
use crate::names::GroupKeys;
use crate::{Error, Result};

/// At most this many groups per script call (three keys each), which bounds how long one call
/// keeps the server busy (well under a millisecond).
pub(crate) const MAX_GROUPS: usize = 500;

/// Follower attempts are due on a grid this fine: the attempts of leases
/// that expire within one step go together.
pub(crate) const ATTEMPT_STEP: Duration = Duration::from_millis(10);

/// Attempts at leases that expire further ahead than one step of this are
/// made early, on this coarser grid (see [`AttemptBatcher::follow_at`]).
pub(crate) const EARLY_STEP: Duration = Duration::from_millis(250);

/// Each instance moves its attempts of one step by up to this much more (the
/// same for all its groups in that step), so that the followers of one lease
/// do not all ask at the same instant.
pub(crate) const ATTEMPT_SPREAD: Duration = Duration::from_millis(5);

/// A grid of time: multiples of a step counted from a zero point. Redis
/// counts them from the Unix epoch (the instances of a fleet share the
/// wall clock, so their grids line up); in memory, from the backend's start
/// (tokio's paused clock is not the wall clock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grid {
    /// An instant, and how far past the grid's zero point it is, in ns.
    at: Instant,
    since_zero: u128,
}

impl Grid {
    /// A grid counted from the Unix epoch.
    pub(crate) fn wall_clock() -> Self {
        Self {
            at: Instant::now(),
            since_zero: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        }
    }

    /// A grid counted from now.
    pub(crate) fn from_now() -> Self {
        Self {
            at: Instant::now(),
            since_zero: 0,
        }
    }

    /// How far `t` is past the last multiple of `step` (ns, `step` > 0).
    fn past(&self, t: Instant, step: u128) -> u128 {
        (self.since_zero + t.saturating_duration_since(self.at).as_nanos()) % step
    }

    /// `t` moved back onto the grid of `step`.
    fn floor(&self, t: Instant, step: Duration) -> Instant {
        let past = self.past(t, step.as_nanos().max(1));
        t - Duration::from_nanos(past as u64)
    }

    /// `t` moved forward onto the grid of `step`.
    fn ceil(&self, t: Instant, step: Duration) -> Instant {
        let step = step.as_nanos().max(1);
        match self.past(t, step) {
            0 => t,
            past => t + Duration::from_nanos((step - past) as u64),
        }
    }
}

struct Request {
    group: String,
    /// The lease key, the record key and the pause key.
    keys: GroupKeys,
    id: String,
    /// The token of the leadership the renewal extends.
    token: u64,
    ttl_ms: u64,
    reply: oneshot::Sender<Result<Renew>>,
}

/// Collects renewals and sends them in batches, on a task of its own that
/// ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct RenewBatcher {
    requests: mpsc::UnboundedSender<Request>,
    /// Wall-clock time, which the phase is counted in.
    grid: Grid,
    /// This runtime's renew phase, as a fraction of the renew interval
    /// (`phase / 2^64`), drawn once: every lease it holds is renewed at
    /// that phase, or (a leader of many) at slots after it (`phases.rs`).
    phase: u64,
    /// How many leases this runtime holds: how many phases they spread
    /// over (`phases.rs`).
    leading: Leading,
    /// Which of the phases a group takes: its name's hash, per runtime.
    group_hash: RandomState,
}

struct Scripts {
    one: Script,
    many: Script,
}

impl RenewBatcher {
    /// A batcher sending on `conn`; `cluster`: keep every call in one hash
    /// slot; `call_timeout`: what bounds each renewal (see [`Wait::within`]).
    /// Must be called inside a tokio runtime.
    pub(crate) fn new<C>(conn: C, cluster: bool, call_timeout: Duration) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let (requests, rx) = mpsc::unbounded_channel();
        let scripts = Arc::new(Scripts {
            one: Script::new(concat!(
                include_str!("scripts/record.lua"),
                include_str!("scripts/renew.lua")
            )),
            many: Script::new(concat!(
                include_str!("scripts/record.lua"),
                include_str!("scripts/renew_many.lua")
            )),
        });
        tokio::spawn(run(conn, cluster, scripts, rx, Wait::within(call_timeout)));
        Self::sending_on(requests)
    }

    /// A batcher sending `requests` to its task, with a phase of its own.
    fn sending_on(requests: mpsc::UnboundedSender<Request>) -> Self {
        let phase = u64::from(crate::util::jitter::random_u32()) << 32
            | u64::from(crate::util::jitter::random_u32());
        Self {
            requests,
            grid: Grid::wall_clock(),
            phase,
            leading: Leading::default(),
            group_hash: RandomState::new(),
        }
    }

    /// Count a lease this runtime holds until the guard is dropped.
    pub(crate) fn holding(&self) -> Holding {
        self.leading.holding()
    }

    /// How many leases are counted now.
    #[cfg(test)]
    pub(crate) fn leading_count(&self) -> usize {
        self.leading.count()
    }

    /// When to renew a lease due for renewal at `due` (renewing every
    /// `every`): the last instant up to `due` on the group's phase of
    /// `every` (of wall-clock time: the runtime's own phase, or for a
    /// leader of many, a slot after it, see below), less than `every`
    /// before `due`.
    /// Renewing early is always safe: a renewal extends the view from the
    /// instant it is sent; never later than `due`. A lease renewed on the
    /// phase stays on it: sent a little after a phase instant, its next
    /// renewal is due a little after the next one, which it moves back to.
    /// A lease just won (its first renewal due `every` after its
    /// acquisition, off the phase) is renewed once early, at the first
    /// phase instant after its acquisition, and is on the phase from then
    /// on: at most one extra renewal per win, and no tight loop — the
    /// instant returned is always after `due - every` (the instant the
    /// previous renewal, or the acquisition, was sent), so a renewal that
    /// found it passed already lands on the next phase instant.
    ///
    /// When `every` is a multiple of [`EARLY_STEP`] (and at least four of
    /// them), the phase is one too (a random one of `every / EARLY_STEP`), so the leases expire just
    /// after an instant of the followers' early grid (`ttl` a multiple of
    /// it as well, as by default): their early attempts at those leases
    /// then fall due at that instant every time, not at one or the other
    /// side of a grid step by how late a reply came (a call more); and they
    /// come about when the leader renews: one that arrives after the
    /// renewal learns the expiry it set, and asks again a `ttl` later, not
    /// `ttl - every`. With the heir rule's lead (half of `every` and half
    /// an early step, `heir.rs`) they come about halfway between two
    /// renewals instead, and ask once per
    /// `ttl - every` (see [`AttemptBatcher::follow_at`]).
    ///
    /// A runtime that leads more than `PHASE_LEASES` (400) groups spreads
    /// them over one phase per 400, on slots two early steps apart from its
    /// own (on the grid of `EARLY_STEP` when the phase is), at most one per
    /// slot, each group on one by its name's hash (`phases.rs`): a crash
    /// frees its leases in waves, at the cost of a few more calls (a phase
    /// of 400–500 groups sometimes takes two; BENCHMARKS.md).
    pub(crate) fn align(&self, due: Instant, every: Duration, group: &str) -> Instant {
        let every_ns = every.as_nanos();
        // Nothing to divide by, or an interval of centuries (the products
        // below stay within u128): renew when due.
        if every_ns == 0 || every_ns > u128::from(u64::MAX) {
            return due;
        }
        let step = EARLY_STEP.as_nanos();
        // Which of the runtime's phases this group's (`phases.rs`): a
        // multiple of two steps after the runtime's own.
        let offset = self
            .leading
            .offset(|| self.group_hash.hash_one(group), every_ns);
        // At least 4 steps: with fewer, few phases to draw from (one at
        // 250 ms), and most runtimes would share one.
        let own = if every_ns >= 4 * step && every_ns.is_multiple_of(step) {
            let steps = every_ns / step;
            ((u128::from(self.phase) * steps) >> 64) * step
        } else {
            (u128::from(self.phase) * every_ns) >> 64
        };
        let phase = (own + offset % every_ns) % every_ns;
        // How far `due` is past the last phase instant: less than `every`.
        let past = (self.grid.past(due, every_ns) + every_ns - phase) % every_ns;
        u64::try_from(past)
            .ok()
            .and_then(|past| due.checked_sub(Duration::from_nanos(past)))
            // An interval of centuries: renew when due.
            .unwrap_or(due)
    }

    /// Renew one group's lease, held under the leadership with `token`, as
    /// part of the next batch.
    pub(crate) async fn renew(
        &self,
        group: &str,
        keys: &GroupKeys,
        id: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<Renew> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            group: group.to_owned(),
            keys: keys.clone(),
            id: id.to_owned(),
            token,
            ttl_ms,
            reply,
        };
        let stopped = || Error::backend(group, "the renewal batcher has stopped");
        self.requests.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// On Redis, a batch stays open until no request joined it for this long
/// (see [`gather`]) ...
const QUIET: Duration = Duration::from_millis(4);

/// ... and at most this long after its first request.
const MAX_GATHER: Duration = Duration::from_millis(20);

/// How long a batch stays open for requests that come a little late.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Wait {
    /// Until no request came for this long ...
    quiet: Duration,
    /// ... and at most this long after the first;
    max: Duration,
    /// while requests keep coming in every yield round (a big wake-up on a
    /// busy host), at most this long (`None`: no bound).
    busy_max: Option<Duration>,
}

impl Wait {
    /// No wait: what arrives within yield rounds (the memory backend).
    const NONE: Wait = Wait {
        quiet: Duration::ZERO,
        max: Duration::ZERO,
        busy_max: None,
    };

    /// For calls bounded by `call_timeout`: [`QUIET`] and [`MAX_GATHER`],
    /// but at most an eighth and a quarter of it, so that the wait never
    /// makes a call time out (a ttl of a few ms has a call timeout of a few
    /// ms: with the full 4 ms every renewal timed out, and the lease was
    /// lost and won again each ttl); requests that keep coming keep it open
    /// up to a quarter of it: thousands of tasks woken together on a busy
    /// host may take longer than [`MAX_GATHER`] to ask, and are not cut in
    /// two calls at it, while a stream that never ends still cannot hold
    /// the batch past its calls' budget.
    fn within(call_timeout: Duration) -> Self {
        Wait {
            quiet: QUIET.min(call_timeout / 8),
            max: MAX_GATHER.min(call_timeout / 4),
            busy_max: Some(call_timeout / 4),
        }
    }

    /// For close attempts (a crashed leader's leases, expiring now): what
    /// arrives within yield rounds, while requests keep coming in every
    /// round at most a quarter of `call_timeout`; no quiet period. The
    /// attempts of one grid point wake together, and a take-over is worth
    /// the quiet period's milliseconds more than a call saved; a share that
    /// the OS preempted goes in a call of its own (close attempts come only
    /// when a leader stops renewing, so this does not weigh on the steady
    /// state's calls).
    fn prompt(call_timeout: Duration) -> Self {
        Wait {
            quiet: Duration::ZERO,
            max: Duration::ZERO,
            busy_max: Some(call_timeout / 4),
        }
    }
}

/// `first` and the requests that queue up behind it while the tasks woken
/// with it run: groups due at the same instant wake together. Then, with a
/// [`Wait`], until no request came for its quiet period (and at most its
/// `max` after the first, or its `busy_max` while requests keep coming in
/// every yield round): the tasks woken together run on both worker threads,
/// and when the OS preempts one of them (many processes on few cores) its
/// share runs milliseconds later; without the wait that share went in a
/// call of its own, and the split leases expired apart (measured: 250
/// renewals due at one instant went in about three calls, 20 processes on
/// 2 cores). A renewal or an attempt waits at most that long more: a
/// renewal's view counts from before the wait, so it only starts early.
async fn gather<T>(first: T, rx: &mut mpsc::UnboundedReceiver<T>, wait: Wait) -> Vec<T> {
    let mut batch = vec![first];
    let start = Instant::now();
    let until = start + wait.max;
    let busy_until = wait.busy_max.map(|max| start + max);
    loop {
        tokio::task::yield_now().await;
        let before = batch.len();
        while let Ok(request) = rx.try_recv() {
            batch.push(request);
        }
        let open = busy_until.is_none_or(|busy_until| Instant::now() < busy_until);
        if batch.len() > before && open {
            continue;
        }
        let left = until
            .saturating_duration_since(Instant::now())
            .min(wait.quiet);
        if left.is_zero() {
            return batch;
        }
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(request)) => batch.push(request),
            _ => return batch,
        }
    }
}

async fn run<C>(
    conn: C,
    cluster: bool,
    scripts: Arc<Scripts>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    wait: Wait,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    while let Some(first) = rx.recv().await {
        let mut batch = gather(first, &mut rx, wait).await;
        // An election that gave up waiting no longer counts on this renewal.
        batch.retain(|r| !r.reply.is_closed());
        let mut chunks: HashMap<(String, u64, u16), Vec<Request>> = HashMap::new();
        for request in batch {
            let slot = if cluster {
                slot(request.keys.lease.as_bytes())
            } else {
                0
            };
            let chunk = chunks
                .entry((request.id.clone(), request.ttl_ms, slot))
                .or_default();
            chunk.push(request);
            if chunk.len() == MAX_GROUPS {
                let full = std::mem::take(chunk);
                tokio::spawn(send(conn.clone(), cluster, scripts.clone(), full));
            }
        }
        for chunk in chunks.into_values().filter(|c| !c.is_empty()) {
            tokio::spawn(send(conn.clone(), cluster, scripts.clone(), chunk));
        }
    }
}

/// One script call for `chunk` (same id, ttl and slot), answering each
/// request; `cluster`: the server marker of the chunk's slot.
async fn send<C: ConnectionLike>(
    mut conn: C,
    cluster: bool,
    scripts: Arc<Scripts>,
    chunk: Vec<Request>,
) {
    let (id, ttl_ms) = (&chunk[0].id, chunk[0].ttl_ms);
    let script = if chunk.len() == 1 {
        &scripts.one
    } else {
        &scripts.many
    };
    let mut call = script.prepare_invoke();
    for request in &chunk {
        call.key(&request.keys.lease)
            .key(&request.keys.record)
            .key(&request.keys.paused);
    }
    call.key(super::marker_key(&chunk[0].keys.record, cluster));
    call.arg(id).arg(ttl_ms);
    for request in &chunk {
        call.arg(request.token);
    }
    let reply: redis::RedisResult<Value> = call.invoke_async(&mut conn).await;
    let replies = match reply {
        Ok(Value::Array(items)) if items.len() == chunk.len() => items,
        Ok(one @ Value::Int(_)) if chunk.len() == 1 => vec![one],
        Ok(other) => {
            for r in chunk {
                let e = protocol_err(&r.group, &other);
                let _ = r.reply.send(Err(e));
            }
            return;
        }
        Err(e) => {
            // RedisError's Display carries the server's message, never the URL.
            let message = e.to_string();
            for r in chunk {
                let e = Error::redis(Some(&r.group), message.clone(), e.clone());
                let _ = r.reply.send(Err(e));
            }
            return;
        }
    };
    for (r, value) in chunk.into_iter().zip(replies) {
        let result = match value {
            Value::Int(1) => Ok(Renew::Renewed),
            Value::Int(0) => Ok(Renew::Gone),
            Value::Int(-1) => Ok(Renew::Other),
            Value::Int(-2) => Ok(Renew::Unvouched),
            Value::Int(-3) => Ok(Renew::Paused),
            // That key's own error (the script reports it as a string).
            Value::BulkString(e) => Err(Error::backend(&r.group, String::from_utf8_lossy(&e))),
            other => Err(protocol_err(&r.group, &other)),
        };
        let _ = r.reply.send(result);
    }
}

/// One follower attempt, waiting for its batch.
struct Attempt {
    group: String,
    keys: GroupKeys,
    id: String,
    ttl: Duration,
    /// A close attempt (see [`Due::close`]).
    close: bool,
    /// When the election handed it over: its call timeout runs from about
    /// then (`send_attempts` keeps a retry within it).
    queued: Instant,
    reply: oneshot::Sender<Result<Asked>>,
}

impl Attempt {
    /// Give the election its answer, from the call sent at `asked` (an
    /// election that stopped waiting no longer listens).
    fn answer(self, answer: Result<Acquire>, asked: Instant) {
        let _ = self.reply.send(answer.map(|answer| (answer, asked)));
    }
}

/// An attempt's answer, and when its call went to the backend.
pub(crate) type Asked = (Acquire, Instant);

/// When a lease found held expires, as far as a follower can tell: a
/// `pttl` counts from when the script ran, somewhere between the call's
/// sending and its answer's arrival, which under load lie tens of ms apart
/// (Redis answers a burst of calls only after running them all, and the
/// follower's own threads may be busy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expiry {
    /// The call's sending plus the pttl: the lease cannot expire sooner
    /// than about this (Redis's clock may tick a little faster).
    pub(crate) earliest: Instant,
    /// The answer's arrival plus the pttl: it has expired by then.
    pub(crate) latest: Instant,
    /// A lease found held (its holder may have stopped renewing), not a
    /// retry of our own after a failed call or a pause: only its close
    /// attempts are [`Due::close`].
    pub(crate) lease: bool,
}

/// When a follower's next attempt is due ([`AttemptBatcher::follow_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) at: Instant,
    /// A close attempt (on the fine grid, at a lease found held that is
    /// about to expire: its holder stopped renewing): its batch goes
    /// without a quiet period (see [`Wait::prompt`]). Never a retry's
    /// ([`Expiry::at`]): those come in the steady state too (a paused
    /// group, every retry interval), where the quiet period saves calls.
    pub(crate) close: bool,
}

impl Expiry {
    /// The expiry of a lease found held: a pttl counted from when the call
    /// went (`earliest`) and from when its answer came (`latest`).
    pub(crate) fn lease(earliest: Instant, latest: Instant) -> Self {
        Self {
            earliest,
            latest,
            lease: true,
        }
    }

    /// An instant known exactly (a retry, or a time of our own choosing).
    pub(crate) fn at(t: Instant) -> Self {
        Self {
            earliest: t,
            latest: t,
            lease: false,
        }
    }
}

/// Collects the acquire attempts of one runtime's followers and sends those
/// that are due together as one call per chunk (per hash slot on a cluster),
/// on a task of its own that ends when the last handle is dropped. Each
/// attempt's answer means what a lone `acquire` would have answered: the
/// elections keep every per-group rule (safe-start waits, notices,
/// eligibility).
#[derive(Clone)]
pub(crate) struct AttemptBatcher {
    requests: mpsc::UnboundedSender<Attempt>,
    /// Off: each attempt alone, at its expiry plus a random spread (the
    /// baseline the load bench compares with).
    batched: bool,
    backend: Backend,
    grid: Grid,
    /// Picks this instance's spread in each step.
    spread: RandomState,
    /// How long before its grid point an early attempt is made: the heir
    /// rule's lead (see `heir.rs`), or zero.
    lead: Duration,
}

impl AttemptBatcher {
    /// A batcher sending on `backend` (`batched` false: each attempt alone);
    /// `call_timeout`: what bounds each attempt (see [`Wait::within`]).
    /// Must be called inside a tokio runtime.
    pub(crate) fn new(
        backend: Backend,
        batched: bool,
        call_timeout: Duration,
        lead: Duration,
    ) -> Self {
        let grid = match &backend {
            Backend::Redis(_) => Grid::wall_clock(),
            Backend::Memory(_) => Grid::from_now(),
        };
        let (requests, rx) = mpsc::unbounded_channel();
        if batched {
            tokio::spawn(run_attempts(backend.clone(), rx, call_timeout));
        }
        Self {
            requests,
            batched,
            backend,
            grid,
            spread: RandomState::new(),
            lead,
        }
    }

    /// When to try a lease that expires at `expiry` (or to retry at
    /// `expiry`). Far ahead: early, at its latest moved back onto the coarse
    /// grid of [`EARLY_STEP`], and back by the heir rule's lead when it is
    /// on — a live leader has renewed the lease since (it renews more than
    /// `EARLY_STEP` before its lease ends, and the lead is about half a
    /// renew interval), so the attempt learns the new expiry just as well,
    /// and the attempts of leases renewed at nearby instants (by different calls,
    /// leaders, instances) fall due together; a crashed leader's lease is
    /// found missing a renewal, which names its heir (`heir.rs`). Close (an
    /// early attempt found the lease still there: its holder stopped
    /// renewing): at its earliest moved forward onto the grid of
    /// [`ATTEMPT_STEP`] (its latest once that point has passed). Either
    /// then moved by this instance's spread for that step (less than
    /// [`ATTEMPT_SPREAD`], the same for every group). So a lease that ends is tried at most `ATTEMPT_STEP +
    /// ATTEMPT_SPREAD` after it ends (after the expiry Redis answered: for
    /// a follower that is not the group's heir, `HEIR_GRACE` after the
    /// lease's own), and sometimes a few ms before it (the script ran that
    /// much after the call went out): Redis then answers the ms left, and
    /// the batcher asks again right after those (`send_attempts`).
    pub(crate) fn follow_at(&self, expiry: Expiry) -> Due {
        let spread_ms = ATTEMPT_SPREAD.as_millis() as u32;
        let now = Instant::now();
        if !self.batched {
            let ms = crate::util::jitter::random_u32() % (spread_ms + 1);
            let at = if expiry.earliest > now {
                expiry.earliest
            } else {
                expiry.latest
            };
            return Due {
                at: at + Duration::from_millis(u64::from(ms)),
                close: false,
            };
        }
        // Far or close is decided on the point moved back by the lead, not
        // on the grid point itself: a non-heir is answered the expiry plus
        // `HEIR_GRACE` (less than `EARLY_STEP`), whose coarse grid point
        // often lies between the expiry and the end of the grace, where it
        // would ask before the heir. Moved back by the lead (more than the
        // grace) it lands before the expiry, or else on the fine grid after
        // the answered point. The cost: a retry closer than the lead plus a
        // step (2 s after a failed call, with the default 2.625 s lead) goes
        // on the fine grid, where the groups failed by one call still fall
        // due together.
        //
        // Early attempts go by the latest expiry: a live leader's leases
        // expire just after an early grid point (its renewals are on
        // that grid, `RenewBatcher::align`), which the latest never puts
        // before it, so the attempts at leases renewed together stay
        // together. Close ones go by the earliest unless its grid point
        // has passed: at a crash, the group's heir learned the expiry from
        // an answer that came late, after the other followers' attempts
        // of that burst (tens of ms: its take-over came that much after
        // the expiry, BENCHMARKS.md); asked a little early, Redis answers
        // the few ms left and the retry goes by those.
        let early = self.grid.floor(expiry.latest, EARLY_STEP);
        let early = early.checked_sub(self.lead).unwrap_or(early);
        let close = early < now + EARLY_STEP;
        let on_grid = if !close {
            early
        } else {
            match self.grid.ceil(expiry.earliest, ATTEMPT_STEP) {
                first if first > now => first,
                _ => self.grid.ceil(expiry.latest, ATTEMPT_STEP),
            }
        };
        let step = self.grid.past(on_grid, u128::MAX) / ATTEMPT_STEP.as_nanos();
        let spread = self.spread.hash_one(step) % u64::from(spread_ms.max(1));
        Due {
            at: on_grid + Duration::from_millis(spread),
            close: close && expiry.lease,
        }
    }

    /// Acquire one group's lease as part of the next batch: the answer of
    /// `acquire.lua` for that group.
    /// `close`: a close attempt, made at its [`Due`] (see [`Due::close`]).
    pub(crate) async fn acquire(
        &self,
        group: &str,
        keys: &GroupKeys,
        id: &str,
        ttl: Duration,
        close: bool,
    ) -> Result<Asked> {
        if !self.batched {
            let asked = Instant::now();
            // Boxed: inline, this call's state would be most of every
            // batched attempt's future too, which waits for its batch.
            let mut answers = Box::pin(self.backend.acquire_many(id, ttl, &[(group, keys)])).await;
            return answers
                .pop()
                .unwrap_or_else(|| Err(Error::backend(group, "no answer")))
                .map(|answer| (answer, asked));
        }
        let (reply, answer) = oneshot::channel();
        let request = Attempt {
            group: group.to_owned(),
            keys: keys.clone(),
            id: id.to_owned(),
            ttl,
            close,
            queued: Instant::now(),
            reply,
        };
        let stopped = || Error::backend(group, "the attempt batcher has stopped");
        self.requests.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run_attempts(
    backend: Backend,
    mut rx: mpsc::UnboundedReceiver<Attempt>,
    call_timeout: Duration,
) {
    let cluster = backend.is_cluster();
    // A quiet period on Redis, as for renewals: without it, the attempts
    // of one instant split into several calls when the OS preempts a
    // worker thread (BENCHMARKS.md). In memory nothing is saved by waiting (and
    // paused-time tests keep their exact instants).
    let (wait, prompt) = match backend {
        Backend::Redis(_) => (Wait::within(call_timeout), Wait::prompt(call_timeout)),
        Backend::Memory(_) => (Wait::NONE, Wait::NONE),
    };
    while let Some(first) = rx.recv().await {
        let wait = if first.close { prompt } else { wait };
        let mut batch = gather(first, &mut rx, wait).await;
        // An election that gave up waiting (stopped, timed out) no longer
        // counts on this attempt: don't take a lease nobody would hold.
        batch.retain(|r| !r.reply.is_closed());
        let mut chunks: HashMap<(String, Duration, u16), Vec<Attempt>> = HashMap::new();
        for request in batch {
            let slot = if cluster {
                slot(request.keys.lease.as_bytes())
            } else {
                0
            };
            let chunk = chunks
                .entry((request.id.clone(), request.ttl, slot))
                .or_default();
            chunk.push(request);
            if chunk.len() == MAX_GROUPS {
                let full = std::mem::take(chunk);
                tokio::spawn(send_attempts(backend.clone(), full, call_timeout));
            }
        }
        for chunk in chunks.into_values().filter(|c| !c.is_empty()) {
            tokio::spawn(send_attempts(backend.clone(), chunk, call_timeout));
        }
    }
}

/// An attempt that finds the lease with at most this long left is made
/// again by the batcher once that has passed, instead of being answered
/// (see [`send_attempts`]).
pub(crate) const PROMPT_RETRY: Duration = Duration::from_millis(50);

/// The attempts made again whose expiries lie within this of the first
/// one's go in one call, at the last of them: wider, a lease waits longer
/// after its expiry; narrower, more calls.
const RETRY_WAVE: Duration = Duration::from_millis(5);

/// How many times the batcher makes one attempt again (see
/// [`send_attempts`]): a retry that still comes early is made again, up to
/// this, then answered.
const MAX_RETRIES: u32 = 3;

/// One backend call for `chunk` (same id, ttl and slot), answering each
/// attempt; and more calls for each wave of attempts made again.
///
/// A close attempt (`follow_at`) goes at the earliest the lease can expire,
/// which lies before the true expiry by however long the script that
/// answered the pttl waited in Redis (tens of ms when the followers' early
/// attempts arrive together). Answered then, the election would try again
/// on the attempt grid: up to `ATTEMPT_STEP + ATTEMPT_SPREAD` and a batch's
/// quiet period later, a third of a 20 × 5,000 crash's failover
/// (BENCHMARKS.md). So an attempt found with at most [`PROMPT_RETRY`] left
/// is made again here, a millisecond after the earliest that can have
/// passed (the call's sending plus the pttl: the reply may come long after
/// the script ran, when Redis answers a burst of calls together or this
/// process's threads are busy, and timed from its arrival the retry came
/// that much after the expiry), together with those whose expiries follow
/// within [`RETRY_WAVE`]. A retry that still comes early (its script ran
/// sooner after its sending than the first call's did) is answered the ms left
/// and goes again by the same rule, up to [`MAX_RETRIES`] times. Each only
/// while it goes within a quarter of `call_timeout` of the election's
/// handing the attempt over (so three quarters are left for it), and not
/// for an election that stopped waiting meanwhile. It is the same `acquire`
/// again: the script decides as always, so this changes when a follower
/// asks, never who may win; the calls count as one attempt of the
/// election, whose view of a win counts from before them all. The other
/// answers of the chunk are delivered at once.
async fn send_attempts(backend: Backend, chunk: Vec<Attempt>, call_timeout: Duration) {
    let (id, ttl) = (chunk[0].id.clone(), chunk[0].ttl);
    let (asked, answered) = call_attempts(&backend, &id, ttl, chunk).await;
    let retry = Retry {
        backend,
        id,
        ttl,
        call_timeout,
    };
    let again = answer_or_keep(answered, asked, call_timeout);
    retry.in_waves(again, MAX_RETRIES);
}

/// Answers each of `answered` (from the call sent at `asked`), but for
/// those found held with at most [`PROMPT_RETRY`] left, whose retry fits
/// the budget: those come back with when to ask again, the soonest first.
fn answer_or_keep(
    answered: Vec<(Attempt, Result<Acquire>)>,
    asked: Instant,
    call_timeout: Duration,
) -> Vec<(Instant, Attempt)> {
    let mut again = Vec::new();
    for (r, answer) in answered {
        let retry_at = match answer {
            Ok(Acquire::Held {
                pttl: Some(pttl), ..
            }) if pttl <= PROMPT_RETRY => Some(asked + pttl + Duration::from_millis(1)),
            _ => None,
        };
        match retry_at {
            Some(at) if at + RETRY_WAVE <= r.queued + call_timeout / 4 => again.push((at, r)),
            _ => r.answer(answer, asked),
        }
    }
    again.sort_by_key(|(at, _)| *at);
    again
}

/// What the retries of one chunk share (see [`send_attempts`]).
#[derive(Clone)]
struct Retry {
    backend: Backend,
    id: String,
    ttl: Duration,
    call_timeout: Duration,
}

impl Retry {
    /// `again` (sorted by when to ask) in waves: those within
    /// [`RETRY_WAVE`] of a wave's first go at the last of them, each wave
    /// on a task of its own; `left` retries each at most.
    fn in_waves(&self, again: Vec<(Instant, Attempt)>, left: u32) {
        let mut again = again.into_iter().peekable();
        while let Some((first, r)) = again.next() {
            let (mut at, mut wave) = (first, vec![r]);
            while let Some((next, r)) = again.next_if(|(next, _)| *next <= first + RETRY_WAVE) {
                at = next;
                wave.push(r);
            }
            tokio::spawn(self.clone().wave(at, wave, left));
        }
    }

    /// One retry of `wave` at `at`, each attempt answered as it comes, but
    /// those that came early again (while retries are `left`), which go
    /// once more in waves of their own.
    async fn wave(self, at: Instant, mut wave: Vec<Attempt>, left: u32) {
        tokio::time::sleep_until(at).await;
        wave.retain(|r| !r.reply.is_closed());
        if wave.is_empty() {
            return;
        }
        let (asked, answered) = call_attempts(&self.backend, &self.id, self.ttl, wave).await;
        if left <= 1 {
            for (r, answer) in answered {
                r.answer(answer, asked);
            }
            return;
        }
        let again = answer_or_keep(answered, asked, self.call_timeout);
        self.in_waves(again, left - 1);
    }
}

/// One `acquire_many` call for `attempts`: when the call went, and each
/// attempt with its answer (an error for a group the
/// reply left out). Each call is a DEBUG event as its reply comes (what a
/// crash wave's take-overs wait for, BENCHMARKS.md): how many attempts,
/// how many close, how long since the first was handed over, how long the
/// call took.
async fn call_attempts(
    backend: &Backend,
    id: &str,
    ttl: Duration,
    attempts: Vec<Attempt>,
) -> (Instant, Vec<(Attempt, Result<Acquire>)>) {
    let groups: Vec<(&str, &GroupKeys)> = attempts.iter().map(|r| (&*r.group, &r.keys)).collect();
    let asked = Instant::now();
    let mut answers = backend.acquire_many(id, ttl, &groups).await.into_iter();
    drop(groups);
    let received = Instant::now();
    // Evaluated only when the event is enabled.
    let first_queued = || attempts.iter().map(|a| a.queued).min().unwrap_or(asked);
    tracing::debug!(
        instance = id,
        attempts = attempts.len(),
        close = attempts.iter().filter(|a| a.close).count(),
        queued_us = asked.saturating_duration_since(first_queued()).as_micros() as u64,
        took_us = received.saturating_duration_since(asked).as_micros() as u64,
        "acquire_many call answered"
    );
    let answered = attempts
        .into_iter()
        .map(|r| {
            let answer = answers
                .next()
                .unwrap_or_else(|| Err(Error::backend(&r.group, "no answer for this group")));
            (r, answer)
        })
        .collect();
    (asked, answered)
}

fn protocol_err(group: &str, reply: &Value) -> Error {
    Error::unexpected_reply(group, "renew", reply)
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// part between the first `{` and the next `}`, when not empty), mod 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait of the default timings (a call timeout of 5 s).
    const FULL: Wait = Wait {
        quiet: QUIET,
        max: MAX_GATHER,
        busy_max: Some(Duration::from_millis(1250)),
    };

    /// Instance `b`'s attempt at `group` (ttl 1 s), handed over at
    /// `queued`, and where its answer comes.
    fn attempt_of_b(
        group: &str,
        close: bool,
        queued: Instant,
    ) -> (Attempt, oneshot::Receiver<Result<Asked>>) {
        let (reply, answer) = oneshot::channel();
        let attempt = Attempt {
            group: group.to_owned(),
            keys: GroupKeys::new("leader", group),
            id: "b".to_owned(),
            ttl: Duration::from_secs(1),
            close,
            queued,
            reply,
        };
        (attempt, answer)
    }

    /// Instance `b`'s close attempt at `group`, handed over now and sent on
    /// `mem` in a chunk of its own (call timeout 1 s): when it was handed
    /// over, and where its answer comes.
    fn send_one(
        mem: &crate::MemoryBackend,
        group: &str,
    ) -> (Instant, oneshot::Receiver<Result<Asked>>) {
        let start = Instant::now();
        let (attempt, answer) = attempt_of_b(group, true, start);
        let backend = Backend::Memory(mem.clone());
        tokio::spawn(send_attempts(
            backend,
            vec![attempt],
            Duration::from_secs(1),
        ));
        (start, answer)
    }

    #[test]
    fn the_wait_is_a_small_part_of_the_call_timeout() {
        assert_eq!(Wait::within(Duration::from_secs(5)), FULL);
        // A ttl of 15 ms has a call timeout of 5 ms: a wait of 4 ms (20 ms
        // under a trickle) made every renewal time out.
        let short = Wait::within(Duration::from_millis(5));
        assert!(short.quiet <= Duration::from_micros(625), "{short:?}");
        assert!(short.max <= Duration::from_micros(1250), "{short:?}");
        assert!(
            short.busy_max <= Some(Duration::from_micros(1250)),
            "{short:?}"
        );
    }

    /// With the heir rule's lead, an early attempt comes that much before
    /// its grid point (so a crashed leader is found out before the
    /// expiry); one closer than the lead and a step is not moved before
    /// itself.
    #[tokio::test(start_paused = true)]
    async fn an_early_attempt_comes_the_lead_before_its_grid_point() {
        let backend = Backend::Memory(crate::MemoryBackend::new());
        let timeout = Duration::from_secs(5);
        let lead = Duration::from_millis(2_500);
        let plain = AttemptBatcher::new(backend.clone(), true, timeout, Duration::ZERO);
        let led = AttemptBatcher::new(backend, true, timeout, lead);
        let expiry = Instant::now() + Duration::from_secs(15);
        let (at, early) = (
            plain.follow_at(Expiry::at(expiry)).at,
            led.follow_at(Expiry::at(expiry)).at,
        );
        assert!(at <= expiry + ATTEMPT_SPREAD, "{:?}", at - Instant::now());
        // Each batcher draws its own spread within a step.
        let apart = at - early;
        assert!(
            apart > lead - ATTEMPT_SPREAD && apart < lead + ATTEMPT_SPREAD,
            "{apart:?}"
        );
        // A non-heir's answered point (the expiry plus the grace) closer
        // than the lead and a step: never before it (paused time, grid from
        // now: its coarse grid point is 150 ms before it, after the
        // expiry, where the heir alone may ask).
        let answered = Instant::now() + Duration::from_millis(2_150);
        let at = led.follow_at(Expiry::at(answered)).at;
        assert!(
            at >= answered && at <= answered + ATTEMPT_STEP + ATTEMPT_SPREAD,
            "{:?}",
            at - answered
        );
    }

    /// Each call is a DEBUG event with its size, its close attempts and its
    /// timings: the chunk's call, then the retry of the attempt it found
    /// a few ms early.
    #[tokio::test(start_paused = true)]
    async fn each_attempt_call_is_a_debug_event() {
        let captured = crate::test_support::Captured::default();
        let _capture = crate::test_support::capture_this_thread(&captured);
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        mem.overwrite("leader", "soon", "x", ms(5));
        let queued = Instant::now();
        // The call goes 3 ms after the attempts were handed over.
        tokio::time::advance(ms(3)).await;
        let mut chunk = Vec::new();
        let mut answers = Vec::new();
        for group in ["soon", "free"] {
            let (attempt, answer) = attempt_of_b(group, group == "soon", queued);
            chunk.push(attempt);
            answers.push(answer);
        }
        send_attempts(Backend::Memory(mem), chunk, ms(1_000)).await;
        for answer in answers {
            let (answer, _) = answer.await.unwrap().unwrap();
            assert!(matches!(answer, Acquire::Won { .. }), "{answer:?}");
        }
        let calls = captured.lines("DEBUG", "acquire_many call answered");
        assert_eq!(calls.len(), 2, "{calls:?}");
        // `soon` had 2 ms left: asked again 1 ms after, 6 ms after the
        // hand-over.
        assert!(
            calls[0].contains("attempts=2 close=1 queued_us=3000 took_us=0"),
            "{calls:?}"
        );
        assert!(
            calls[1].contains("attempts=1 close=1 queued_us=6000 took_us=0"),
            "{calls:?}"
        );
    }

    /// A close attempt goes by the earliest instant the lease can expire
    /// (an answer that came late, as an heir's does at a crash, overstates
    /// the expiry by its delay), or by the latest once the earliest's grid
    /// point has passed; an early attempt by the latest (see `follow_at`).
    #[tokio::test(start_paused = true)]
    async fn a_close_attempt_goes_by_the_earliest_expiry() {
        let ms = Duration::from_millis;
        let backend = Backend::Memory(crate::MemoryBackend::new());
        let timeout = Duration::from_secs(5);
        let lead = super::super::heir::Heir::for_timings(ms(15_000), ms(5_000))
            .unwrap()
            .lead;
        let led = AttemptBatcher::new(backend.clone(), true, timeout, lead);
        let unbatched = AttemptBatcher::new(backend, false, timeout, lead);
        // The grids count from the batchers' start (in memory): now is
        // 5 ms past a point of the fine grid, 5 ms before the next.
        tokio::time::advance(ms(1_005)).await;
        let now = Instant::now();
        let within = |at: Instant, from: Instant, by: Duration| {
            assert!(at >= from && at <= from + by, "{:?} after", at - from);
        };
        let late = Expiry::lease(now + ms(2_000), now + ms(2_060));
        let close = ATTEMPT_STEP + ATTEMPT_SPREAD;
        within(led.follow_at(late).at, late.earliest, close);
        within(unbatched.follow_at(late).at, late.earliest, ATTEMPT_SPREAD);
        // The earliest's grid point passed: by the latest.
        let passed = Expiry::lease(now - ms(15), now + ms(30));
        within(led.follow_at(passed).at, passed.latest, close);
        within(
            unbatched.follow_at(passed).at,
            passed.latest,
            ATTEMPT_SPREAD,
        );
        // The earliest passed, its grid point not (5 ms ahead): that point.
        let just = Expiry::lease(now - ms(1), now + ms(30));
        within(led.follow_at(just).at, now + ms(5), ATTEMPT_SPREAD);
        // Far ahead: the latest's early grid point (16 s after the start;
        // the earliest's would be 15.75 s), back by the lead.
        let far = Expiry::lease(now + ms(14_950), now + ms(15_010));
        within(
            led.follow_at(far).at,
            now + ms(14_995) - lead,
            ATTEMPT_SPREAD,
        );
        // Close attempts are marked so (their batch has no quiet period).
        let close_ones = [late, passed, just].map(|e| led.follow_at(e).close);
        assert_eq!(close_ones, [true; 3]);
        assert!(!led.follow_at(far).close);
        assert!(!unbatched.follow_at(late).close);
        // A retry (after a failed call, a pause) as close is not: those
        // come in the steady state, where the quiet period saves calls.
        let retry = Expiry::at(late.earliest);
        within(led.follow_at(retry).at, late.earliest, close);
        assert!(!led.follow_at(retry).close);
    }

    /// Attempts answered with a few ms left are made again right after
    /// those, each wave of expiries at its own time (not all at the chunk's
    /// longest), while the other answers of the chunk are delivered at once;
    /// an election that stopped waiting is left out, and one found with a
    /// few ms left again (taken again meanwhile) goes once more by those.
    #[tokio::test(start_paused = true)]
    async fn attempts_made_again_go_in_waves_and_the_rest_are_answered_at_once() {
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        // Held by an instance that never renews: `soon` for 5 ms, `later`
        // for 40, `gone` for 20 (its election stops waiting); `free` is not.
        // `later2` for 43, in `later`'s wave (41 to 46 ms); `stale` for 10
        // ms, but handed over a quarter of the call timeout ago: no time
        // for a second call.
        let leases = [
            ("soon", 5),
            ("later", 40),
            ("later2", 43),
            ("stale", 10),
            ("gone", 20),
            ("free", 0),
        ];
        let timeout = ms(1_000);
        let start = Instant::now();
        let mut chunk = Vec::new();
        let mut answers = Vec::new();
        for (group, left) in leases {
            if left > 0 {
                mem.overwrite("leader", group, "x", ms(left));
            }
            let queued = if group == "stale" {
                start - timeout / 4
            } else {
                start
            };
            let (attempt, answer) = attempt_of_b(group, true, queued);
            chunk.push(attempt);
            if group == "gone" {
                drop(answer);
                continue;
            }
            // Each answer with when it came.
            answers.push(tokio::spawn(async move {
                let (answer, _) = answer.await.unwrap().unwrap();
                (group, answer, Instant::now() - start)
            }));
        }
        tokio::spawn(send_attempts(Backend::Memory(mem.clone()), chunk, timeout));
        // After the first call: x takes `soon` again for 30 ms, so its
        // retry at 6 ms finds it held with 25 ms left: asked again at 32.
        tokio::time::sleep(ms(1)).await;
        mem.overwrite("leader", "soon", "x", ms(30));
        let mut answered = Vec::new();
        for answer in answers {
            answered.push(answer.await.unwrap());
        }
        let won = |a: &Acquire| matches!(a, Acquire::Won { .. });
        let held = |a: &Acquire| matches!(a, Acquire::Held { .. });
        let [(_, soon, soon_at), (_, later, later_at), (_, later2, later2_at), (_, stale, stale_at), (_, free, free_at)] =
            &answered[..]
        else {
            panic!("{answered:?}");
        };
        assert!(won(free) && *free_at == ms(0), "{answered:?}");
        assert!(held(stale) && *stale_at == ms(0), "{answered:?}");
        assert!(won(soon) && *soon_at == ms(32), "{answered:?}");
        // One wave, at its last expiry.
        assert!(won(later) && *later_at == ms(44), "{answered:?}");
        assert!(won(later2) && *later2_at == ms(44), "{answered:?}");
        let gone = mem.holder("gone", &GroupKeys::new("leader", "gone"));
        assert_eq!(
            gone.unwrap(),
            None,
            "taken for an election that stopped waiting"
        );
    }

    /// A retry goes by the call's sending plus the pttl, not by the
    /// answer's arrival: an answer that came 20 ms after the script ran
    /// (as when Redis answers a burst together) would put it 20 ms after
    /// the expiry.
    #[tokio::test(start_paused = true)]
    async fn a_retry_counts_from_the_call_not_from_its_answer() {
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        mem.overwrite("leader", "soon", "x", ms(30));
        mem.delay_acquire_replies(Some(("b", ms(20))));
        let (start, answer) = send_one(&mem, "soon");
        let (answer, asked) = answer.await.unwrap().unwrap();
        assert!(matches!(answer, Acquire::Won { .. }), "{answer:?}");
        // Asked again 1 ms after the expiry; its answer 20 ms later.
        assert_eq!(asked - start, ms(31));
        assert_eq!(Instant::now() - start, ms(51));
        assert_eq!(mem.acquire_calls(), 2);
    }

    /// A retry whose script ran sooner after its sending than the first
    /// call's did comes early again: answered the ms left, it goes once
    /// more by those.
    #[tokio::test(start_paused = true)]
    async fn a_retry_that_comes_early_again_goes_once_more() {
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        mem.overwrite("leader", "soon", "x", ms(30));
        // The first call's script runs 10 ms after its sending (pttl 20:
        // asked again at 21), the later ones at once (at 21: 9 ms left).
        mem.delay_acquire_runs(Some(("b", ms(10))));
        let (start, answer) = send_one(&mem, "soon");
        tokio::time::sleep(ms(5)).await;
        mem.delay_acquire_runs(None);
        let (answer, asked) = answer.await.unwrap().unwrap();
        assert!(matches!(answer, Acquire::Won { .. }), "{answer:?}");
        assert_eq!(asked - start, ms(31));
        assert_eq!(mem.acquire_calls(), 3);
    }

    /// Attempts of one wave that come early again by different amounts
    /// go in waves of their own, each within its own budget, not all at
    /// the last one's time.
    #[tokio::test(start_paused = true)]
    async fn attempts_early_again_split_into_waves_of_their_own() {
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        mem.overwrite("leader", "a", "x", ms(40));
        mem.overwrite("leader", "b", "x", ms(42));
        let start = Instant::now();
        // `a` was handed over 30 ms ago: its budget (a quarter of 400 ms)
        // ends at 70 ms.
        let (a, a_answer) = attempt_of_b("a", true, start - ms(30));
        let (b, b_answer) = attempt_of_b("b", true, start);
        tokio::spawn(send_attempts(
            Backend::Memory(mem.clone()),
            vec![a, b],
            ms(400),
        ));
        // Before the wave's retry at 43 ms, x takes both again: `a` until
        // 49 ms, `b` until 89.
        tokio::time::sleep(ms(42)).await;
        mem.overwrite("leader", "a", "x", ms(7));
        mem.overwrite("leader", "b", "x", ms(47));
        let (a_won, a_asked) = a_answer.await.unwrap().unwrap();
        let (b_won, b_asked) = b_answer.await.unwrap().unwrap();
        assert!(matches!(a_won, Acquire::Won { .. }), "{a_won:?}");
        assert!(matches!(b_won, Acquire::Won { .. }), "{b_won:?}");
        assert_eq!(a_asked - start, ms(50));
        assert_eq!(b_asked - start, ms(90));
    }

    /// An election that stops waiting between two retries is left out of
    /// the next: its group is not taken for nobody.
    #[tokio::test(start_paused = true)]
    async fn an_election_gone_between_retries_is_left_out() {
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        mem.overwrite("leader", "gone", "x", ms(20));
        let (_, answer) = send_one(&mem, "gone");
        // Taken again before the first retry (at 21 ms): asked again at 51.
        tokio::time::sleep(ms(20)).await;
        mem.overwrite("leader", "gone", "x", ms(30));
        tokio::time::sleep(ms(10)).await;
        drop(answer);
        tokio::time::sleep(ms(100)).await;
        assert_eq!(mem.acquire_calls(), 2, "a retry for nobody");
        let holder = mem.holder("gone", &GroupKeys::new("leader", "gone"));
        assert_eq!(holder.unwrap(), None);
    }

    /// A lease whose holder keeps taking it back with a few ms left is
    /// asked for at most `MAX_RETRIES` more times, then answered held.
    #[tokio::test(start_paused = true)]
    async fn an_attempt_is_made_again_at_most_max_retries_times() {
        let ms = Duration::from_millis;
        let mem = crate::MemoryBackend::new();
        mem.overwrite("leader", "kept", "x", ms(20));
        let holder = mem.clone();
        tokio::spawn(async move {
            for _ in 0..30 {
                tokio::time::sleep(ms(10)).await;
                holder.overwrite("leader", "kept", "x", ms(20));
            }
        });
        let (start, answer) = send_one(&mem, "kept");
        let (answer, _) = answer.await.unwrap().unwrap();
        assert!(matches!(answer, Acquire::Held { .. }), "{answer:?}");
        assert_eq!(mem.acquire_calls(), 1 + u64::from(MAX_RETRIES));
        // The calls at 0, 21, 41 and 61 ms.
        assert_eq!(Instant::now() - start, ms(61));
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_call_timeout_closes_the_batch_soon() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = Instant::now();
        tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_micros(500)).await;
                if tx.send(1).is_err() {
                    return;
                }
            }
        });
        gather(0, &mut rx, Wait::within(Duration::from_millis(5))).await;
        assert!(
            start.elapsed() <= Duration::from_micros(1250),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn requests_in_every_yield_round_do_not_keep_a_batch_open() {
        // Old code: the batch stayed open while each yield round brought a
        // request (a leader's timed-out renewals retried into it under
        // overload) without bound; here until the sender gave up.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sender = tokio::spawn(async move {
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until && tx.send(1).is_ok() {
                tokio::task::yield_now().await;
            }
        });
        let gathered = tokio::time::timeout(Duration::from_secs(2), gather(0, &mut rx, FULL)).await;
        drop(rx);
        sender.await.unwrap();
        assert!(
            gathered.is_ok(),
            "still gathering after 2 s (busy_max is {:?})",
            FULL.busy_max
        );
    }

    #[test]
    fn slots_follow_the_cluster_spec() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"leader:{jobs}:lease"), slot(b"jobs"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
    }

    /// A batcher (no task behind it) whose phase is `quarters` / 4 of the
    /// renew interval, counted from now.
    fn batcher_at(quarters: u64) -> RenewBatcher {
        let (tx, _rx) = mpsc::unbounded_channel();
        RenewBatcher {
            grid: Grid::from_now(),
            phase: quarters << 62,
            ..RenewBatcher::sending_on(tx)
        }
    }

    /// A leader of thousands of groups renews them at one phase per
    /// `PHASE_LEASES` (at most one per slot of two early steps: here all
    /// ten, 500 ms apart from its own); with fewer, at its own.
    #[tokio::test(start_paused = true)]
    async fn a_leader_of_thousands_spreads_its_renewals_over_phases() {
        let batcher = batcher_at(1);
        let every = Duration::from_secs(5);
        let epoch = batcher.grid.at;
        let due = epoch + Duration::from_secs(60);
        let names: Vec<String> = (0..5_000).map(|i| format!("g{i}")).collect();
        // Each phase instant (ms past the interval) and how many groups on it.
        let at_phases = |b: &RenewBatcher| {
            let mut count: std::collections::BTreeMap<u128, usize> = Default::default();
            for g in &names {
                let at = b.align(due, every, g);
                assert!(at <= due && due - at < every);
                *count.entry((at - epoch).as_millis() % 5_000).or_default() += 1;
            }
            count
        };
        let few: Vec<_> = (0..super::super::phases::PHASE_LEASES)
            .map(|_| batcher.holding())
            .collect();
        assert_eq!(at_phases(&batcher).keys().collect::<Vec<_>>(), [&1_250]);
        let many: Vec<_> = (0..4_000).map(|_| batcher.holding()).collect();
        // 4,400 leases: 10 phases (at most one per two 250 ms steps), 500 ms
        // apart from the runtime's own (1.25 s), about 500 groups each.
        let spread = at_phases(&batcher);
        let mut expected: Vec<u128> = (0..10).map(|i| (1_250 + 500 * i) % 5_000).collect();
        expected.sort_unstable();
        assert_eq!(
            spread.keys().copied().collect::<Vec<_>>(),
            expected,
            "{spread:?}"
        );
        for n in spread.values() {
            assert!((400..600).contains(n), "{spread:?}");
        }
        // The count follows the guards: back to one phase.
        drop(many);
        assert_eq!(at_phases(&batcher).len(), 1);
        drop(few);
    }

    /// Whatever the interval and the count of leases, a renewal is never
    /// later than due, and less than one interval early.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_is_never_late_with_any_count_of_phases() {
        let batcher = batcher_at(3);
        let epoch = batcher.grid.at;
        let ms = Duration::from_millis;
        let intervals = [
            Duration::from_nanos(1),
            Duration::from_nanos(3),
            ms(1),
            ms(249),
            ms(499),
            ms(750),
            ms(999),
            ms(1_001),
            ms(1_100),
            ms(4_999),
            ms(5_000),
            ms(5_001),
            Duration::from_secs(3_600),
            Duration::from_secs(100 * 365 * 86_400),
            Duration::from_nanos(u64::MAX),
            Duration::MAX,
        ];
        let mut held = Vec::new();
        for count in [0, 1, 399, 400, 401, 800, 801, 4_400, 100_000] {
            held.resize_with(count, || batcher.holding());
            for every in intervals {
                for (i, due_ms) in [0u64, 1, 777, 6_250, 86_400_000].iter().enumerate() {
                    let due = epoch + ms(*due_ms);
                    let at = batcher.align(due, every, &format!("g{i}{count}"));
                    assert!(at <= due, "{count} {every:?} {due_ms}");
                    assert!(due - at < every, "{count} {every:?} {due_ms}");
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn renew_times_fall_on_the_phase_and_stay_there() {
        let batcher = batcher_at(1);
        let every = Duration::from_secs(5);
        let epoch = batcher.grid.at;
        // This runtime's phase instants: 1.25 s, 6.25 s, 11.25 s, ...
        let on_phase = |at: Instant| (at - epoch).as_millis() % 5_000 == 1_250;
        // Leaders elected at different instants renew at the same phase instant.
        let a = batcher.align(epoch + Duration::from_millis(6_260), every, "g");
        let b = batcher.align(epoch + Duration::from_millis(11_240), every, "g");
        assert_eq!(a, epoch + Duration::from_millis(6_250));
        assert_eq!(a, b);
        // Early by less than one interval, never late.
        for due_ms in [5_000, 5_001, 6_249, 6_250, 6_251, 7_777, 11_249] {
            let due = epoch + Duration::from_millis(due_ms);
            let at = batcher.align(due, every, "g");
            assert!(at <= due && due - at < every, "{due_ms}");
            assert!(on_phase(at), "{due_ms}: {:?}", at - epoch);
        }
        // A renewal sent a little after a phase instant keeps the next one on it.
        let next = batcher.align(a + Duration::from_millis(3) + every, every, "g");
        assert_eq!(next, a + every);
        // Short intervals: the phase scales with the interval.
        let short = Duration::from_millis(300);
        let at = batcher.align(epoch + Duration::from_millis(310), short, "g");
        assert_eq!(at, epoch + Duration::from_millis(75));
        let at = batcher.align(epoch + Duration::from_millis(374), short, "g");
        assert_eq!(at, epoch + Duration::from_millis(75));
        // Any phase of an interval of whole early steps is a whole step.
        let drawn = RenewBatcher {
            phase: 0x9e37_79b9_7f4a_7c15,
            ..batcher.clone()
        };
        let at = drawn.align(epoch + Duration::from_secs(60), every, "g");
        assert_eq!(
            (at - epoch).as_nanos() % EARLY_STEP.as_nanos(),
            0,
            "{:?}",
            at - epoch
        );
        // Degenerate intervals: never later than due, nothing to divide by zero.
        let due = epoch + Duration::from_millis(1);
        assert_eq!(batcher.align(due, Duration::ZERO, "g"), due);
        let at = batcher.align(due, Duration::from_nanos(3), "g");
        assert!(at <= due && due - at < Duration::from_nanos(3));
    }

    /// Renew like `Election::leading`: the first renewal aligned from
    /// `won + every`, each next one from when the last was sent, each
    /// round trip taking `rtt`; the instants sent, up to `until`.
    async fn renewals(
        batcher: RenewBatcher,
        won: Instant,
        every: Duration,
        rtt: Duration,
        until: Instant,
    ) -> Vec<Instant> {
        tokio::time::sleep_until(won + rtt).await;
        let mut next = batcher.align(won + every, every, "g");
        let mut sent = vec![];
        loop {
            tokio::time::sleep_until(next).await;
            let now = Instant::now();
            if now >= until {
                return sent;
            }
            sent.push(now);
            tokio::time::sleep(rtt).await;
            next = batcher.align(now + every, every, "g");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn groups_won_at_different_instants_renew_at_one_instant() {
        // Old code: each of these groups stayed on the 250 ms grid point of
        // its win, five renew instants per interval.
        let batcher = batcher_at(3);
        let every = Duration::from_secs(5);
        let rtt = Duration::from_millis(40);
        let epoch = batcher.grid.at;
        let until = epoch + Duration::from_secs(60);
        // Won at different instants; the last one 10 ms before a phase
        // instant (3.75 s), so its first renewal finds that instant passed.
        let wins = [300, 1_700, 3_740, 4_990, 6_200];
        let tasks: Vec<_> = wins
            .iter()
            .map(|&ms| {
                let won = epoch + Duration::from_millis(ms);
                tokio::spawn(renewals(batcher.clone(), won, every, rtt, until))
            })
            .collect();
        let mut all = vec![];
        for (task, ms) in tasks.into_iter().zip(wins) {
            let sent = task.await.unwrap();
            let won = epoch + Duration::from_millis(ms);
            // Never late: each renewal within `every` of the one before.
            let mut last = won;
            for &at in &sent {
                assert!(at > last && at <= last + rtt + every, "won at {ms} ms");
                last = at;
            }
            // At most one renewal more than one per interval (the early first).
            let intervals = (until - won).as_millis() / every.as_millis();
            assert!(
                sent.len() as u128 <= intervals + 1,
                "won at {ms} ms: {sent:?}"
            );
            all.push(sent);
        }
        // From 10 s on (every group has renewed once), every group renews at
        // the same instants: one batch per interval.
        let late = |sent: &Vec<Instant>| -> Vec<Instant> {
            let from = epoch + Duration::from_secs(10);
            sent.iter().copied().filter(|&at| at >= from).collect()
        };
        for sent in &all[1..] {
            assert_eq!(late(sent), late(&all[0]));
        }
        let from_10s: Vec<u128> = late(&all[0])
            .iter()
            .map(|&at| (at - epoch).as_millis())
            .collect();
        assert_eq!(
            from_10s,
            [13_750, 18_750, 23_750, 28_750, 33_750, 38_750, 43_750, 48_750, 53_750, 58_750]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_for_stragglers_while_they_keep_coming() {
        // Old code: a batch closed after one yield round without new
        // requests, so a straggler 1 ms late (its worker thread preempted)
        // went in a call of its own.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = Instant::now();
        let sender = tokio::spawn(async move {
            for ms in [1, 3, 6, 9, 30] {
                tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
                tx.send(ms).unwrap();
            }
        });
        let first = gather(0, &mut rx, FULL).await;
        // Each came within QUIET of the one before; 30 ms came after a
        // quiet QUIET (past MAX_GATHER as well).
        assert_eq!(first, [0, 1, 3, 6, 9]);
        assert!(start.elapsed() <= Duration::from_millis(9) + QUIET);
        let next = rx.recv().await.unwrap();
        assert_eq!(gather(next, &mut rx, FULL).await, [30]);
        sender.await.unwrap();
        // Without a quiet period (the memory backend), one yield round.
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            tx.send(1).unwrap();
        });
        assert_eq!(gather(0, &mut rx, Wait::NONE).await, [0]);
    }

    /// Close attempts (a crashed leader's leases): what is queued and what
    /// the yield rounds bring, at once; a request 1 ms later is not waited
    /// for (with the full wait it would be: `QUIET` is 4 ms).
    #[tokio::test(start_paused = true)]
    async fn a_batch_of_close_attempts_goes_without_a_quiet_period() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for n in 1..4 {
            tx.send(n).unwrap();
        }
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            tx.send(9).unwrap();
        });
        let start = Instant::now();
        let prompt = Wait::prompt(Duration::from_secs(5));
        assert_eq!(gather(0, &mut rx, prompt).await, [0, 1, 2, 3]);
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(gather(0, &mut rx, FULL).await, [0, 9]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_closes_after_max_gather() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for ms in 1..100 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                if tx.send(ms).is_err() {
                    return;
                }
            }
        });
        let start = Instant::now();
        let batch = gather(0, &mut rx, FULL).await;
        // Requests every 2 ms keep it open, but not past MAX_GATHER.
        assert!(batch.len() > 5, "{batch:?}");
        assert!(
            start.elapsed() <= MAX_GATHER + Duration::from_millis(1),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn runtimes_draw_different_renew_phases() {
        // Old code: every runtime on the one wall-clock grid (250 ms steps),
        // so a crash freed leases at the instants other leaders renewed at.
        // A long interval makes two random phases closer than a second
        // unlikely (about 1 in 170,000 for three runtimes).
        let every = Duration::from_secs(1_000_000);
        let due = Instant::now() + every;
        let aligned: Vec<Instant> = (0..3)
            .map(|_| {
                let (tx, _rx) = mpsc::unbounded_channel();
                RenewBatcher::sending_on(tx).align(due, every, "g")
            })
            .collect();
        for (i, a) in aligned.iter().enumerate() {
            for b in &aligned[i + 1..] {
                let apart = a.max(b).duration_since(*a.min(b));
                assert!(apart > Duration::from_secs(1), "{aligned:?}");
            }
        }
    }
}
