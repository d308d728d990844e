//! Renewals and follower attempts of many groups in a few round trips.
//!
//! Leaders renew on a grid of wall-clock time ([`RenewBatcher::align`]), so
//! that after their first renewal the leaders of every instance renew at the
//! same instants, and their leases expire at the same instants. Renewals
//! that arrive together are sent as one `renew_many.lua` call per chunk of
//! keys (per hash slot on a cluster), the chunks at once on the one
//! multiplexed connection: 10,000 leaders cost about twenty commands per
//! tick, not 10,000 round trips.
//!
//! Followers do the same ([`AttemptBatcher`]): an attempt waits for the
//! lease's expiry moved onto a grid ([`AttemptBatcher::follow_at`]), so the
//! attempts of the groups whose leases expire together (renewed together)
//! are due together, and go as one `acquire_many.lua` call per chunk. A
//! follower's load then grows with its hash slots and the leaders' renew
//! instants, not with its groups.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{Acquire, Backend, Renew};
use crate::names::GroupKeys;
use crate::{Error, Result};

/// At most this many groups per script call (three keys each), which bounds how long one call
/// keeps the server busy (well under a millisecond).
const MAX_GROUPS: usize = 500;

/// The grid is at most this fine; it is finer for renew intervals under 500 ms.
const MAX_GRID: Duration = Duration::from_millis(250);

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
    ttl_ms: u64,
    reply: oneshot::Sender<Result<Renew>>,
}

/// Collects renewals and sends them in batches, on a task of its own that
/// ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct RenewBatcher {
    requests: mpsc::UnboundedSender<Request>,
    /// The renew grid.
    grid: Grid,
}

struct Scripts {
    one: Script,
    many: Script,
}

impl RenewBatcher {
    /// A batcher sending on `conn`; `cluster`: keep every call in one hash slot.
    /// Must be called inside a tokio runtime.
    pub(crate) fn new<C>(conn: C, cluster: bool) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let (requests, rx) = mpsc::unbounded_channel();
        let scripts = Arc::new(Scripts {
            one: Script::new(concat!(
                include_str!("record.lua"),
                include_str!("renew.lua")
            )),
            many: Script::new(concat!(
                include_str!("record.lua"),
                include_str!("renew_many.lua")
            )),
        });
        tokio::spawn(run(conn, cluster, scripts, rx));
        Self {
            requests,
            grid: Grid::wall_clock(),
        }
    }

    /// When to renew a lease due for renewal at `due` (renewing every
    /// `every`): `due` moved back onto the wall-clock grid, by less than one
    /// step of at most `every / 2`. Renewing early is always safe: a renewal
    /// extends the view from the instant it is sent. A leader renewing on the
    /// grid stays on it: its next renewal is exactly `every` later. Every
    /// instance with the same `every` shares the grid, so their leases
    /// expire on few instants, which their followers' attempts batch on.
    pub(crate) fn align(&self, due: Instant, every: Duration) -> Instant {
        let steps = every
            .as_nanos()
            .div_ceil(MAX_GRID.as_nanos())
            .clamp(2, u128::from(u32::MAX));
        self.grid.floor(due, every / steps as u32)
    }

    /// Renew one group's lease as part of the next batch.
    pub(crate) async fn renew(
        &self,
        group: &str,
        keys: &GroupKeys,
        id: &str,
        ttl_ms: u64,
    ) -> Result<Renew> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            group: group.to_owned(),
            keys: keys.clone(),
            id: id.to_owned(),
            ttl_ms,
            reply,
        };
        let stopped = || Error::backend(group, "the renewal batcher has stopped");
        self.requests.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// `first` and the requests that queue up behind it while the tasks woken
/// with it run: groups due at the same instant wake together.
async fn gather<T>(first: T, rx: &mut mpsc::UnboundedReceiver<T>) -> Vec<T> {
    let mut batch = vec![first];
    loop {
        tokio::task::yield_now().await;
        let before = batch.len();
        while let Ok(request) = rx.try_recv() {
            batch.push(request);
        }
        if batch.len() == before {
            return batch;
        }
    }
}

async fn run<C>(
    conn: C,
    cluster: bool,
    scripts: Arc<Scripts>,
    mut rx: mpsc::UnboundedReceiver<Request>,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    while let Some(first) = rx.recv().await {
        let mut batch = gather(first, &mut rx).await;
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
                tokio::spawn(send(conn.clone(), scripts.clone(), full));
            }
        }
        for chunk in chunks.into_values().filter(|c| !c.is_empty()) {
            tokio::spawn(send(conn.clone(), scripts.clone(), chunk));
        }
    }
}

/// One script call for `chunk` (same id, ttl and slot), answering each request.
async fn send<C: ConnectionLike>(mut conn: C, scripts: Arc<Scripts>, chunk: Vec<Request>) {
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
    call.arg(id).arg(ttl_ms);
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
    reply: oneshot::Sender<Result<Acquire>>,
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
}

impl AttemptBatcher {
    /// A batcher sending on `backend` (`batched` false: each attempt alone).
    /// Must be called inside a tokio runtime.
    pub(crate) fn new(backend: Backend, batched: bool) -> Self {
        let grid = match &backend {
            Backend::Redis(_) => Grid::wall_clock(),
            Backend::Memory(_) => Grid::from_now(),
        };
        let (requests, rx) = mpsc::unbounded_channel();
        if batched {
            tokio::spawn(run_attempts(backend.clone(), rx));
        }
        Self {
            requests,
            batched,
            backend,
            grid,
            spread: RandomState::new(),
        }
    }

    /// When to try a lease that expires at `expiry` (or to retry at
    /// `expiry`). Far ahead: early, at `expiry` moved back onto the coarse
    /// grid of [`EARLY_STEP`] — a live leader has renewed the lease since
    /// (it renews more than `EARLY_STEP` before its lease ends), so the
    /// attempt learns the new expiry just as well, and the attempts of leases
    /// renewed at nearby instants (by different calls, leaders, instances)
    /// fall due together. Close (an early attempt found the lease still
    /// there: its holder stopped renewing): at `expiry` moved forward onto
    /// the grid of [`ATTEMPT_STEP`]. Either then moved by this instance's
    /// spread for that step (less than [`ATTEMPT_SPREAD`], the same for every
    /// group). So a lease that ends is tried at most `ATTEMPT_STEP +
    /// ATTEMPT_SPREAD` after it ends.
    pub(crate) fn follow_at(&self, expiry: Instant) -> Instant {
        let spread_ms = ATTEMPT_SPREAD.as_millis() as u32;
        if !self.batched {
            let ms = crate::jitter::random_u32() % (spread_ms + 1);
            return expiry + Duration::from_millis(u64::from(ms));
        }
        let early = self.grid.floor(expiry, EARLY_STEP);
        let on_grid = if early >= Instant::now() + EARLY_STEP {
            early
        } else {
            self.grid.ceil(expiry, ATTEMPT_STEP)
        };
        let step = self.grid.past(on_grid, u128::MAX) / ATTEMPT_STEP.as_nanos();
        let spread = self.spread.hash_one(step) % u64::from(spread_ms.max(1));
        on_grid + Duration::from_millis(spread)
    }

    /// Acquire one group's lease as part of the next batch: the answer of
    /// `acquire.lua` for that group.
    pub(crate) async fn acquire(
        &self,
        group: &str,
        keys: &GroupKeys,
        id: &str,
        ttl: Duration,
    ) -> Result<Acquire> {
        if !self.batched {
            let mut answers = self.backend.acquire_many(id, ttl, &[(group, keys)]).await;
            return answers
                .pop()
                .unwrap_or_else(|| Err(Error::backend(group, "no answer")));
        }
        let (reply, answer) = oneshot::channel();
        let request = Attempt {
            group: group.to_owned(),
            keys: keys.clone(),
            id: id.to_owned(),
            ttl,
            reply,
        };
        let stopped = || Error::backend(group, "the attempt batcher has stopped");
        self.requests.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run_attempts(backend: Backend, mut rx: mpsc::UnboundedReceiver<Attempt>) {
    let cluster = backend.is_cluster();
    while let Some(first) = rx.recv().await {
        let mut batch = gather(first, &mut rx).await;
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
                tokio::spawn(send_attempts(backend.clone(), full));
            }
        }
        for chunk in chunks.into_values().filter(|c| !c.is_empty()) {
            tokio::spawn(send_attempts(backend.clone(), chunk));
        }
    }
}

/// One backend call for `chunk` (same id, ttl and slot), answering each attempt.
async fn send_attempts(backend: Backend, chunk: Vec<Attempt>) {
    let (id, ttl) = (chunk[0].id.clone(), chunk[0].ttl);
    let groups: Vec<(&str, &GroupKeys)> = chunk.iter().map(|r| (&*r.group, &r.keys)).collect();
    let answers = backend.acquire_many(&id, ttl, &groups).await;
    drop(groups);
    for (r, answer) in chunk.into_iter().zip(answers) {
        let _ = r.reply.send(answer);
    }
}

fn protocol_err(group: &str, reply: &Value) -> Error {
    Error::Protocol {
        group: group.to_owned(),
        message: format!("renew returned {reply:?}"),
    }
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

    #[test]
    fn slots_follow_the_cluster_spec() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"leader:{jobs}:lease"), slot(b"jobs"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
    }

    #[tokio::test(start_paused = true)]
    async fn renew_times_fall_on_a_grid_and_stay_there() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let batcher = RenewBatcher {
            requests: tx,
            grid: Grid::from_now(),
        };
        let every = Duration::from_secs(5);
        let step = Duration::from_millis(250);
        let epoch = batcher.grid.at;
        // Leaders elected at different instants renew on the same grid point.
        let a = batcher.align(epoch + Duration::from_millis(5_010), every);
        let b = batcher.align(epoch + Duration::from_millis(5_240), every);
        assert_eq!(a, epoch + every);
        assert_eq!(a, b);
        // Early by less than one step, never late.
        for due_ms in [5_000, 5_001, 5_249, 5_250, 7_777] {
            let due = epoch + Duration::from_millis(due_ms);
            let at = batcher.align(due, every);
            assert!(at <= due && due - at < step, "{due_ms}");
        }
        // A renewal sent a little after a grid point keeps the next one on the grid.
        let next = batcher.align(a + Duration::from_millis(3) + every, every);
        assert_eq!(next, a + every);
        // Short intervals: at least two steps per interval.
        let short = Duration::from_millis(300);
        let at = batcher.align(epoch + Duration::from_millis(310), short);
        assert_eq!(at, epoch + Duration::from_millis(300));
        let at = batcher.align(epoch + Duration::from_millis(440), short);
        assert_eq!(at, epoch + Duration::from_millis(300));
    }
}
