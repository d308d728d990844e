//! The Redis backend: one Lua script per lease operation (`RedisBackend`,
//! here), run on a self-reconnecting connection (`connection.rs`: a
//! connection manager for one server, a cluster connection for Redis
//! Cluster, a connection that follows the master for Sentinel, TLS), a
//! pub/sub connection for release notices and control requests
//! (`notices.rs`), and the scripts' replies parsed apart from both
//! (`reply.rs`), as redis-rs keeps its protocol apart from its connections.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::{ErrorKind, Script, ServerErrorKind, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::batch::RenewBatcher;
use super::heir::{Heir, HEIR_GRACE};
use super::sentinel::SentinelConn;
use super::{Acquire, Channels, Counts, Member, NoticeSink, Op, Renew, SafeStart};
use crate::names::GroupKeys;
use crate::{Error, Result};
use unconfirmed::UnconfirmedWaits;

use self::connection::*;
pub(crate) use self::connection::{Conn, RedisConfig, RedisOptions};
use self::notices::*;
use self::reply::*;

#[cfg(test)]
mod acquire_many_tests;
#[cfg(test)]
mod confirm_tests;
pub(super) mod connection;
#[cfg(feature = "cron")]
mod cron;
#[cfg(test)]
mod heir_tests;
#[cfg(test)]
mod holding_tests;
mod notices;
mod once;
mod reply;
mod unconfirmed;

#[derive(Clone)]
pub(crate) struct RedisBackend {
    conn: Conn,
    /// Renewals of many groups in one round trip (see `batch.rs`); `None`
    /// for a backend that never leads (the admin API).
    renewals: Option<RenewBatcher>,
    /// Where the release-notice subscription connects.
    notices: NoticeSource,
    scripts: Arc<Scripts>,
    min_replicas: u32,
    /// How long `WAIT` may block (half the call timeout).
    wait_timeout: Duration,
    /// The longest wait for one call (also the notice connection's `PING`).
    call_timeout: Duration,
    /// Groups whose acquisition had to wait (a safe start) but was not
    /// confirmed by enough replicas: the record it wrote may be lost in a
    /// failover, so the next win still waits one ttl. Each mark is dropped
    /// once it no longer matters (see [`UnconfirmedWaits`]).
    unconfirmed_waits: Arc<Mutex<UnconfirmedWaits>>,
    /// The heir rule's timings (see `heir.rs`); `None`: off.
    heir: Option<Heir>,
}

/// `redis::Script` retries with `SCRIPT LOAD` on `NOSCRIPT`, which is what a
/// restarted (script cache emptied) server needs.
struct Scripts {
    acquire: Script,
    acquire_many: Script,
    release: Script,
    members: Script,
}

impl RedisBackend {
    /// A backend for `config`; connects lazily, so an unreachable Redis at
    /// start-up is not an error (the elections retry). `renews`: start the
    /// renew batcher (a task: inside a tokio runtime), which a backend that
    /// never leads (the admin API) does without.
    pub(crate) fn new(config: &RedisConfig, call_timeout: Duration, renews: bool) -> Result<Self> {
        let clients = Clients::new(config)?;
        #[cfg(feature = "tls")]
        if config.urls.iter().any(|u| is_tls_url(u)) {
            ensure_crypto_provider();
        }
        let conn = match (&clients.cluster, clients.sentinel) {
            (_, Some((sentinel, db))) => {
                let master = config.sentinel.as_deref().unwrap_or_default();
                Conn::Sentinel(SentinelConn::new(sentinel, master, db, call_timeout))
            }
            (Some(cluster), None) => {
                let config = ClusterConfig::new()
                    .set_connection_timeout(call_timeout)
                    .set_response_timeout(call_timeout);
                Conn::Cluster(cluster.get_pending_async_connection_with_config(config))
            }
            (None, None) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(call_timeout))
                    .set_response_timeout(Some(call_timeout))
                    // One connection attempt per call: a failed call fails at once,
                    // and the election's own pacing (retry_interval, the leader's
                    // quick renew retries) decides when to try again. The manager's
                    // own retries sleep 100 ms or more inside the call, which delays
                    // the first acquisition after Redis returns.
                    .set_number_of_retries(0)
                    .set_max_delay(call_timeout);
                let client = clients
                    .nodes
                    .first()
                    .cloned()
                    .ok_or_else(|| Error::config("redis_url", "needs a URL".to_owned()))?;
                Conn::Single(
                    ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(|e| connection_err(&e))?,
                )
            }
        };
        let notices = match &conn {
            Conn::Sentinel(sentinel) => NoticeSource::Sentinel(sentinel.clone()),
            _ => NoticeSource::Nodes(clients.nodes.into()),
        };
        Ok(Self {
            renewals: renews.then(|| RenewBatcher::new(conn.clone(), config.cluster, call_timeout)),
            conn,
            notices,
            scripts: Arc::new(Scripts {
                acquire: Script::new(concat!(
                    include_str!("../scripts/record.lua"),
                    include_str!("../scripts/acquire.lua")
                )),
                acquire_many: Script::new(concat!(
                    include_str!("../scripts/record.lua"),
                    include_str!("../scripts/acquire_many.lua")
                )),
                release: Script::new(concat!(
                    include_str!("../scripts/record.lua"),
                    include_str!("../scripts/release.lua")
                )),
                members: Script::new(include_str!("../scripts/members.lua")),
            }),
            min_replicas: config.options.min_replicas,
            wait_timeout: (call_timeout / 2).max(Duration::from_millis(1)),
            call_timeout,
            unconfirmed_waits: Arc::default(),
            heir: None,
        })
    }

    /// With the heir rule (see `heir.rs`), for the acquire scripts.
    pub(crate) fn with_heir(mut self, heir: Option<Heir>) -> Self {
        self.heir = heir;
        self
    }

    /// The acquire scripts' ARGV[3] and ARGV[4]: the heir rule's
    /// `suspect_below` and [`HEIR_GRACE`] in ms; none when it is off.
    fn heir_args(&self) -> Vec<u64> {
        self.heir
            .map(|h| vec![millis(h.suspect_below), millis(HEIR_GRACE)])
            .unwrap_or_default()
    }

    pub(super) async fn acquire(&self, op: &Op<'_>, ttl: Duration) -> Result<Acquire> {
        if self.min_replicas > 0 {
            return self.acquire_confirmed(op, ttl).await;
        }
        let mut call = self.scripts.acquire.prepare_invoke();
        call.key(&op.keys.lease)
            .key(&op.keys.record)
            .key(&op.keys.paused)
            .key(self.marker(&op.keys.record))
            .arg(op.id)
            .arg(millis(ttl))
            .arg(self.heir_args());
        let reply: Value = call
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(op.group, &e))?;
        parse_acquire(op.group, reply)
    }

    /// Refresh `id`'s membership at `key` for `ttl` with its counts
    /// (`None`: leave), and list the members refreshed within `fresh` with
    /// theirs.
    pub(super) async fn members(
        &self,
        key: &str,
        id: &str,
        refresh: Option<(Duration, Counts)>,
        fresh: Duration,
    ) -> Result<Vec<Member>> {
        let (ttl, counts) = refresh.unwrap_or_default();
        let reply: Value = self
            .scripts
            .members
            .key(key)
            .arg(id)
            .arg(refresh.map_or(0, |_| millis(ttl)))
            .arg(millis(fresh))
            .arg(counts.leading)
            .arg(counts.campaigns)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err("members", &e))?;
        parse_members(reply)
    }

    /// The attempts of `groups` for `id`: one `acquire_many.lua` call (one
    /// `acquire.lua` call for a single group). With `min_replicas`, the call
    /// is pipelined with one `WAIT`, and each group's win is confirmed by
    /// its result as a lone acquire's would be (`confirm`).
    pub(super) async fn acquire_many(
        &self,
        id: &str,
        ttl: Duration,
        groups: &[(&str, &GroupKeys)],
    ) -> Vec<Result<Acquire>> {
        if let [(group, keys)] = groups {
            return vec![self.acquire(&Op { group, keys, id }, ttl).await];
        }
        let marker = groups.first().map(|(_, k)| self.marker(&k.record));
        let keys: Vec<&str> = groups
            .iter()
            .flat_map(|(_, k)| [&*k.lease, &*k.record, &*k.paused])
            .chain(marker.as_deref())
            .collect();
        let script = &self.scripts.acquire_many;
        // With `min_replicas`: every group is in doubt until the reply is read.
        let doubt = (self.min_replicas > 0).then(|| self.in_doubt(groups.iter().map(|g| g.0), ttl));
        let (reply, acks) = if self.min_replicas > 0 {
            match self.invoke_and_wait(script, &keys, id, ttl).await {
                Ok((reply, acks)) => (Ok(reply), Some(acks)),
                Err(failed) => {
                    return groups
                        .iter()
                        .map(|(group, _)| Err(failed.error(group, "acquire_many + WAIT")))
                        .collect()
                }
            }
        } else {
            let mut call = script.prepare_invoke();
            for key in &keys {
                call.key(*key);
            }
            call.arg(id).arg(millis(ttl)).arg(self.heir_args());
            (call.invoke_async(&mut self.conn.clone()).await, None)
        };
        let replies = match reply.map(|r| split_flat(groups.len(), r)) {
            Ok(Ok(replies)) => replies,
            Ok(Err(other)) => {
                return groups
                    .iter()
                    .map(|(group, _)| Err(protocol_err(group, "acquire_many", &other)))
                    .collect()
            }
            Err(e) => {
                return groups
                    .iter()
                    .map(|(group, _)| Err(backend_err(group, &e)))
                    .collect()
            }
        };
        if let Some(doubt) = doubt {
            doubt.settled();
        }
        groups
            .iter()
            .zip(replies)
            .map(|(&(group, _), reply)| {
                let acquired = match reply {
                    // That group's own error.
                    FlatReply::Error(e) => Err(Error::backend(group, String::from_utf8_lossy(&e))),
                    FlatReply::Acquire(reply) => parse_acquire(group, reply),
                };
                match (&acks, acquired) {
                    (Some(acks), Ok(acquired)) => self.confirm(group, acquired, acks, ttl),
                    // No reply `confirm` can judge: as a call with none.
                    (Some(_), Err(e)) => {
                        self.unconfirmed(group, ttl);
                        Err(e)
                    }
                    (None, acquired) => acquired,
                }
            })
            .collect()
    }

    /// Acquire, then `WAIT` for `min_replicas` replicas, pipelined on one
    /// connection so that the `WAIT` covers the acquire's writes.
    async fn acquire_confirmed(&self, op: &Op<'_>, ttl: Duration) -> Result<Acquire> {
        let marker = self.marker(&op.keys.record);
        let keys = [
            &*op.keys.lease,
            &*op.keys.record,
            &*op.keys.paused,
            &*marker,
        ];
        let doubt = self.in_doubt([op.group], ttl);
        let (reply, acks) = self
            .invoke_and_wait(&self.scripts.acquire, &keys, op.id, ttl)
            .await
            .map_err(|failed| failed.error(op.group, "acquire + WAIT"))?;
        let acquired = parse_acquire(op.group, reply)?;
        doubt.settled();
        self.confirm(op.group, acquired, &acks, ttl)
    }

    /// The groups of an acquire + `WAIT` call, in doubt until its reply is
    /// read (see [`InDoubt`]).
    fn in_doubt<'a>(
        &'a self,
        groups: impl IntoIterator<Item = &'a str>,
        ttl: Duration,
    ) -> InDoubt<'a> {
        InDoubt {
            backend: self,
            groups: groups.into_iter().collect(),
            ttl,
        }
    }

    /// Mark `group` as won by a safe start no `WAIT` confirmed: its next win
    /// waits one ttl (see [`Self::confirm`]).
    fn unconfirmed(&self, group: &str, ttl: Duration) {
        self.unconfirmed_waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .mark(group, self.mark_lasts(ttl));
    }

    /// How long a mark of [`Self::unconfirmed`] matters: see
    /// [`UnconfirmedWaits`].
    fn mark_lasts(&self, ttl: Duration) -> Duration {
        ttl.saturating_add(self.call_timeout)
    }

    /// How many groups are marked (expired marks not yet pruned included).
    #[cfg(test)]
    pub(crate) fn unconfirmed_len(&self) -> usize {
        self.unconfirmed_waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// `script` (an acquire script) on `keys` with our `id` and `ttl`, then
    /// `WAIT` for `min_replicas` replicas, pipelined on one connection so
    /// that the `WAIT` covers the script's writes: the script's reply and
    /// `WAIT`'s (either may be an error value).
    async fn invoke_and_wait(
        &self,
        script: &Script,
        keys: &[&str],
        id: &str,
        ttl: Duration,
    ) -> std::result::Result<(Value, Value), WaitFailed> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(id)
            .arg(millis(ttl))
            .arg(self.heir_args());
        pipe.cmd("WAIT")
            .arg(self.min_replicas)
            .arg(millis(self.wait_timeout));
        let mut conn = self.conn.clone();
        let mut loaded = false;
        loop {
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            let [reply, acks]: [Value; 2] = replies
                .try_into()
                .map_err(|r| WaitFailed::Protocol(Value::Array(r)))?;
            match reply.extract_error() {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) && !loaded => {
                    script.prepare_invoke().load_async(&mut conn).await?;
                    loaded = true;
                }
                Err(e) => return Err(e.into()),
                Ok(reply) => return Ok((reply, acks)),
            }
        }
    }

    /// The `min_replicas` rule for one group's `acquired` reply, given the
    /// reply of the `WAIT` that followed it: a win counts only once enough
    /// replicas acknowledged it (a failed `WAIT` acknowledged none). A win
    /// that had to wait (a safe start) but was not confirmed may have
    /// written a record the replicas lack, so the group's next win waits one
    /// ttl — as after a call with no reply to judge ([`InDoubt`]); a
    /// refusal clears that, a paused reply does not.
    fn confirm(
        &self,
        group: &str,
        acquired: Acquire,
        acks: &Value,
        ttl: Duration,
    ) -> Result<Acquire> {
        let mut unconfirmed = self
            .unconfirmed_waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        unconfirmed.tidy();
        match acquired {
            Acquire::Won {
                token,
                mut wait,
                mut why,
                last,
            } => {
                if unconfirmed.contains(group) && wait < ttl {
                    (wait, why) = (ttl, SafeStart::Unvouched);
                }
                // A `WAIT` that failed (refused, e.g. by an ACL without
                // `+wait`; an error or a reply that is no count) confirmed
                // nothing: as too few acknowledgements.
                let unconfirmed_by = match acks.clone().extract_error() {
                    Ok(Value::Int(n)) if n >= i64::from(self.min_replicas) => None,
                    Ok(Value::Int(n)) => Some(Error::backend(
                        group,
                        format!(
                            "acquired the lease, but only {n} of min_replicas {} replicas \
                             acknowledged it within {:?}; not leading until enough do",
                            self.min_replicas, self.wait_timeout
                        ),
                    )),
                    Ok(other) => Some(protocol_err(group, "WAIT", &other)),
                    Err(e) => Some(backend_err(group, &e)),
                };
                if let Some(e) = unconfirmed_by {
                    if why != SafeStart::No {
                        unconfirmed.mark(group, self.mark_lasts(ttl));
                    }
                    return Err(e);
                }
                unconfirmed.remove(group);
                Ok(Acquire::Won {
                    token,
                    wait,
                    why,
                    last,
                })
            }
            held @ Acquire::Held { .. } => {
                unconfirmed.remove(group);
                Ok(held)
            }
            // The script returned before reading the lease: says nothing of
            // whether the unconfirmed acquisition reached the replicas, so
            // the next win after the resume still waits one ttl.
            Acquire::Paused => Ok(Acquire::Paused),
        }
    }

    /// The command connection (cheap to clone), for fenced writes.
    pub(super) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// Whether keys of one call must share a hash slot (Redis Cluster).
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The server marker for the group of `record` (see `marker.rs`).
    pub(super) fn marker(&self, record: &str) -> String {
        super::marker_key(record, self.is_cluster())
    }

    pub(super) async fn renew(&self, op: &Op<'_>, token: u64, ttl: Duration) -> Result<Renew> {
        let Some(renewals) = &self.renewals else {
            return Err(Error::backend(
                op.group,
                "this connection does not renew leases (the admin API's)".to_owned(),
            ));
        };
        renewals
            .renew(op.group, op.keys, op.id, token, millis(ttl))
            .await
    }

    /// When to renew `group`'s lease due at `due`: on the renew phase this
    /// runtime's batches share (one of a few for a leader of many groups).
    pub(super) fn renew_at(&self, due: Instant, every: Duration, group: &str) -> Instant {
        match &self.renewals {
            Some(renewals) => renewals.align(due, every, group),
            None => due,
        }
    }

    /// Count a lease this runtime holds while the guard lives (its renew
    /// phases, `phases.rs`).
    pub(super) fn holding(&self) -> Option<super::phases::Holding> {
        self.renewals.as_ref().map(|r| r.holding())
    }

    pub(super) async fn release(&self, op: &Op<'_>, channel: &str, token: u64) -> Result<bool> {
        let reply: Value = self
            .scripts
            .release
            .key(&op.keys.lease)
            .key(&op.keys.record)
            .key(self.marker(&op.keys.record))
            .arg(op.id)
            .arg(channel)
            .arg(op.group)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(op.group, &e))?;
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(protocol_err(op.group, "release", &other)),
        }
    }

    /// `PING` on the command connection; a failure is the connection's, not
    /// a group's.
    pub(super) async fn ping(&self) -> Result<()> {
        redis::cmd("PING")
            .query_async::<Value>(&mut self.conn.clone())
            .await
            .map(drop)
            .map_err(|e| connection_err(&e))
    }

    pub(super) async fn holder(&self, group: &str, keys: &GroupKeys) -> Result<Option<String>> {
        let reply: Value = redis::cmd("GET")
            .arg(&keys.lease)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        match reply {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            other => Err(protocol_err(group, "GET", &other)),
        }
    }

    pub(super) fn spawn_notices(
        &self,
        channel: Channels,
        sink: NoticeSink,
        up: Arc<AtomicBool>,
        retry: Duration,
        stop: CancellationToken,
    ) {
        let source = self.notices.clone();
        let health = Health {
            every: retry,
            deadline: self.call_timeout,
        };
        tokio::spawn(async move {
            let mut failing = false;
            let mut next = 0;
            // Whether a connection was attempted (and ended) before.
            let mut lost = false;
            while !stop.is_cancelled() {
                let (listened, node) = match source.client(next, retry).await {
                    Ok(client) => {
                        let node = client.get_connection_info().addr().to_string();
                        let listened =
                            listen(&client, &channel, &sink, &up, retry, health, &stop, lost).await;
                        (listened, node)
                    }
                    Err(e) => (Err(e), source.describe()),
                };
                lost = true;
                match listened {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, node, "release-notice connection down; followers fall back to retry_interval");
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, node, "release-notice connection still down")
                    }
                }
                // A node that was listening and failed: try the next one
                // (of a cluster's seeds) at once; otherwise pace the retries.
                let was_up = up.swap(false, Ordering::SeqCst);
                next += 1;
                if was_up && source.len() > 1 {
                    continue;
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
        });
    }
}

/// The groups of one acquire + `WAIT` call (`min_replicas`) until its
/// reply has been read: dropped before [`InDoubt::settled`] — the call
/// failed after it may have been sent (a connection error, a timeout, a
/// cancelled call), the script failed midway, the reply does not parse — it
/// marks every one of them as a safe start no `WAIT` confirmed (see
/// `RedisBackend::confirm`). The script may have run and won any of them,
/// with a safe start whose record the replicas may lack, and nothing tells
/// which: safety first. The doubt costs one ttl of waiting at most, at a
/// group's next win, and only if no attempt finds the group held before it
/// (which clears the mark).
struct InDoubt<'a> {
    backend: &'a RedisBackend,
    groups: Vec<&'a str>,
    /// The call's ttl (how long a mark matters follows from it).
    ttl: Duration,
}

impl InDoubt<'_> {
    /// The reply was read: `confirm` judges each group from it.
    fn settled(mut self) {
        self.groups.clear();
    }
}

impl Drop for InDoubt<'_> {
    fn drop(&mut self) {
        if self.groups.is_empty() {
            return;
        }
        tracing::debug!(
            groups = self.groups.len(),
            "acquire + WAIT without a reply: each group's next win waits one ttl"
        );
        let lasts = self.backend.mark_lasts(self.ttl);
        let mut unconfirmed = self
            .backend
            .unconfirmed_waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for group in &self.groups {
            unconfirmed.mark(group, lasts);
        }
    }
}

/// Why a script + `WAIT` pipeline gave no script reply.
enum WaitFailed {
    Redis(redis::RedisError),
    /// Not the two replies sent for.
    Protocol(Value),
}

impl From<redis::RedisError> for WaitFailed {
    fn from(e: redis::RedisError) -> Self {
        Self::Redis(e)
    }
}

impl WaitFailed {
    /// The error of `group`'s call, `op`.
    fn error(&self, group: &str, op: &str) -> Error {
        match self {
            Self::Redis(e) => backend_err(group, e),
            Self::Protocol(reply) => protocol_err(group, op, reply),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, ConfigBuilder, MemoryBackend};

    #[test]
    fn acquire_many_replies_split_by_their_kind() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = vec![
            Value::Int(0),
            b("other"),
            Value::Int(1500),
            Value::Int(1),
            b("17"),
            Value::Int(0),
            b(""),
            b("16"),
            Value::Int(2),
            b("paused"),
            Value::Int(-1),
            b("ERR lease record x holds no valid token"),
        ];
        let parts = split_flat(4, Value::Array(flat.clone())).unwrap();
        assert_eq!(
            parts,
            vec![
                FlatReply::Acquire(Value::Array(flat[0..3].to_vec())),
                FlatReply::Acquire(Value::Array(flat[3..8].to_vec())),
                FlatReply::Acquire(Value::Array(flat[8..10].to_vec())),
                FlatReply::Error(b"ERR lease record x holds no valid token".to_vec()),
            ]
        );
        // Each part reads as acquire.lua's reply.
        let mut parsed = parts.into_iter().map(|p| match p {
            FlatReply::Acquire(v) => parse_acquire("g", v).map_err(|e| e.to_string()),
            FlatReply::Error(_) => Err("error".to_owned()),
        });
        assert!(
            matches!(parsed.next(), Some(Ok(Acquire::Held { holder, pttl: Some(p) })) if holder == "other" && p == Duration::from_millis(1500))
        );
        assert!(
            matches!(parsed.next(), Some(Ok(Acquire::Won { token: 17, wait, why: SafeStart::No, last: Some(16) })) if wait.is_zero())
        );
        assert!(matches!(parsed.next(), Some(Ok(Acquire::Paused))));
        // One group too many or too few, a part cut short, an unknown kind,
        // an error that is not text: the whole reply is refused.
        assert!(split_flat(5, Value::Array(flat.clone())).is_err());
        assert!(split_flat(3, Value::Array(flat.clone())).is_err());
        assert!(split_flat(1, Value::Array(flat[0..2].to_vec())).is_err());
        assert!(split_flat(1, Value::Array(vec![Value::Int(3), b("x")])).is_err());
        assert!(split_flat(1, Value::Array(vec![Value::Int(-1), Value::Int(5)])).is_err());
        assert!(split_flat(1, Value::Int(0)).is_err());
        assert_eq!(split_flat(0, Value::Array(Vec::new())), Ok(Vec::new()));
    }

    fn config_error(b: ConfigBuilder) -> (&'static str, String) {
        match b.build() {
            Err(Error::Config { field, rule }) => (field, rule),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn cluster_urls_are_checked_without_showing_passwords() {
        let cluster = |urls: &[&str]| Config::builder().redis_cluster_urls(urls.iter().copied());
        let (field, _) = config_error(cluster(&[]));
        assert_eq!(field, "redis_cluster_urls");
        let (field, rule) = config_error(cluster(&["redis://:pw-one@a:1", "redis://:pw-two@b:2"]));
        assert_eq!(field, "redis_cluster_urls");
        assert!(
            !rule.contains("pw-one") && !rule.contains("pw-two"),
            "{rule}"
        );
        let (field, rule) = config_error(cluster(&["redis://:pw-one@a:1", "http://b:2"]));
        assert_eq!(field, "redis_cluster_urls");
        assert!(!rule.contains("pw-one"), "{rule}");
        let (field, _) = config_error(cluster(&["redis+unix:///tmp/redis.sock"]));
        assert_eq!(field, "redis_cluster_urls");

        let config = cluster(&["redis://u:pw-one@a:1", "redis://u:pw-one@b:2"])
            .build()
            .unwrap();
        let debug = format!("{config:?}");
        assert!(
            debug.contains("redis cluster [redis://u:***@a:1, redis://u:***@b:2]"),
            "{debug}"
        );
        assert!(!debug.contains("pw-one"), "{debug}");
    }

    #[test]
    fn redis_options_need_a_redis_backend() {
        let (field, rule) = config_error(
            Config::builder()
                .memory(MemoryBackend::new())
                .min_replicas(1),
        );
        assert_eq!(field, "min_replicas");
        assert!(rule.contains("Redis"), "{rule}");
        let config = Config::builder()
            .redis_url("redis://h:1")
            .min_replicas(2)
            .build()
            .unwrap();
        assert!(format!("{config:?}").contains("min_replicas 2"));
    }

    #[test]
    fn rediss_needs_the_tls_feature() {
        let built = Config::builder().redis_url("rediss://u:pw-one@h:1").build();
        #[cfg(feature = "tls")]
        built.unwrap();
        #[cfg(not(feature = "tls"))]
        {
            let rule = match built {
                Err(Error::Config {
                    field: "redis_url",
                    rule,
                }) => rule,
                other => panic!("{other:?}"),
            };
            assert!(rule.contains("`tls` feature"), "{rule}");
            assert!(!rule.contains("pw-one"), "{rule}");
        }
    }

    #[test]
    fn redis_errors_keep_their_source_and_connection_errors_name_no_group() {
        let e = redis::RedisError::from(std::io::Error::other("connection refused"));
        let call = backend_err("jobs", &e);
        assert!(std::error::Error::source(&call).is_some());
        assert!(
            call.to_string()
                .starts_with("backend error for group `jobs`: "),
            "{call}"
        );
        let conn = connection_err(&e);
        assert!(std::error::Error::source(&conn).is_some());
        assert!(
            conn.to_string().starts_with("backend connection error: "),
            "{conn}"
        );
        assert!(!timeout_err(Duration::from_secs(1))
            .to_string()
            .contains('*'));
    }

    #[test]
    fn acquire_replies() {
        let won_after = |token: &str, wait: i64, why: &str, last: &str| {
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(token.into()),
                Value::Int(wait),
                Value::BulkString(why.into()),
                Value::BulkString(last.into()),
            ])
        };
        let won = |token: &str, wait: i64, why: &str| won_after(token, wait, why, "");
        assert_eq!(
            parse_acquire("g", won("42", 1000, "first")).unwrap(),
            Acquire::Won {
                token: 42,
                wait: Duration::from_secs(1),
                why: SafeStart::First,
                last: None,
            }
        );
        // Above 2^53 (where a double would round) and up to u64::MAX, exactly.
        assert_eq!(
            parse_acquire(
                "g",
                won_after("9007199254740993", 0, "", "9007199254740992")
            )
            .unwrap(),
            Acquire::Won {
                token: 9_007_199_254_740_993,
                wait: Duration::ZERO,
                why: SafeStart::No,
                last: Some(9_007_199_254_740_992),
            }
        );
        let held = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"b".to_vec()),
            Value::Int(1500),
        ]);
        assert_eq!(
            parse_acquire("g", held).unwrap(),
            Acquire::Held {
                holder: "b".into(),
                pttl: Some(Duration::from_millis(1500))
            }
        );
        let paused = Value::Array(vec![Value::Int(2), Value::BulkString(b"paused".to_vec())]);
        assert_eq!(parse_acquire("g", paused).unwrap(), Acquire::Paused);
        let no_expiry = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"b".to_vec()),
            Value::Int(-1),
        ]);
        assert!(matches!(
            parse_acquire("g", no_expiry).unwrap(),
            Acquire::Held { pttl: None, .. }
        ));
        for bad in [
            Value::Nil,
            Value::Int(1),
            won("-5", 0, ""),
            won("0", 0, ""),
            won("1e300", 0, ""),
            won("18446744073709551616", 0, ""),
            won("7", -1, ""),
            won("7", 0, "sometime"),
            won_after("7", 0, "", "x"),
            won_after("7", 0, "", "-6"),
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(b"7".to_vec()),
                Value::Int(0),
                Value::BulkString(b"".to_vec()),
            ]),
            Value::Array(vec![Value::Int(1), Value::Int(42), Value::Int(0)]),
            Value::Array(vec![Value::Int(7), Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(2), Value::BulkString(b"later".to_vec())]),
        ] {
            assert!(matches!(
                parse_acquire("g", bad),
                Err(Error::Protocol { .. })
            ));
        }
    }

    #[test]
    fn members_replies() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = |items: &[&str]| Value::Array(items.iter().map(|s| bulk(s)).collect());
        let member = |id: &str, leading, campaigns| Member {
            id: id.to_owned(),
            counts: Counts { leading, campaigns },
        };
        assert_eq!(
            parse_members(reply(&["a", "3", "10", "b", "0", "2"])).unwrap(),
            [member("a", 3, 10), member("b", 0, 2)]
        );
        assert_eq!(parse_members(reply(&[])).unwrap(), []);
        // A count no fleet has saturates instead of failing every round.
        assert_eq!(
            parse_members(reply(&["a", "99999999999", "1"])).unwrap(),
            [member("a", u32::MAX, 1)]
        );
        for bad in [
            reply(&["a", "3"]),
            reply(&["a", "-1", "2"]),
            reply(&["a", "", "2"]),
            Value::Array(vec![bulk("a"), Value::Int(3), bulk("2")]),
            Value::Int(0),
        ] {
            assert!(
                matches!(parse_members(bad), Err(Error::Protocol { .. })),
                "accepted"
            );
        }
    }
}
