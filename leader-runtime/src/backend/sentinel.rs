//! Redis Sentinel: a command connection that follows the master.
//!
//! The master is resolved through the sentinels (`SENTINEL MASTERS`, then
//! `ROLE` on the named node, both by the redis crate's sentinel client), and
//! one multiplexed connection to it is kept. The connection is dropped, and
//! the next call resolves the master again, when a call on it:
//!
//! - fails with an I/O error, a timeout or a dropped connection (a killed or
//!   partitioned master; Sentinel also kills every client of a node it
//!   reconfigures),
//! - is answered `READONLY` (the node was demoted to a replica: a write there
//!   must never count as done), `NOREPLICAS` (a master with
//!   `min-replicas-to-write` cut off from its replicas: likely replaced),
//!   `MASTERDOWN` or `LOADING` — also when a batched script returns the
//!   refusal as one group's error text,
//! - or is abandoned by its caller before the reply (the election's own
//!   timeout: a hung master must not keep every later call waiting on it).
//!
//! So a lease operation never succeeds on a node that is not the master at
//! that moment, and after a failover the first call that notices resolves
//! the new master.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisFuture,
    ServerErrorKind, TlsMode, Value,
};

use super::redis::RedisOptions;
use crate::{Error, Result};

const FIELD: &str = "redis_sentinel";

/// The sentinel client for `master` through the sentinels `urls` (each
/// parsed, with its redacted form for messages), and the master's database.
///
/// The URLs' user and password authenticate with the sentinels, so they
/// must agree, and so must their scheme (`rediss://` means TLS to the
/// sentinels *and* the master) and database (the master's, sentinels have
/// none). The master's credentials come from `sentinel_master_auth`.
pub(super) fn client(
    master: &str,
    urls: Vec<(ConnectionInfo, String)>,
    options: &RedisOptions,
) -> Result<(SentinelClient, i64)> {
    if master.is_empty()
        || master.len() > 256
        || master.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(Error::config(
            FIELD,
            format!("needs a master name of 1 to 256 bytes without spaces or control characters, not {master:?}"),
        ));
    }
    let Some((first, _)) = urls.first() else {
        return Err(Error::config(
            FIELD,
            "needs at least one sentinel URL".to_owned(),
        ));
    };
    let (first_tls, first_redis) = (tls_mode(first.addr()), first.redis_settings().clone());
    let mut addrs = Vec::with_capacity(urls.len());
    for (info, shown) in &urls {
        let redis = info.redis_settings();
        let agrees = tls_mode(info.addr()) == first_tls
            && redis.username() == first_redis.username()
            && redis.password() == first_redis.password()
            && redis.db() == first_redis.db();
        if !agrees {
            return Err(Error::config(
                FIELD,
                format!(
                    "sentinel URLs must share one scheme, user, password and database; {shown} differs from the first"
                ),
            ));
        }
        addrs.push(info.addr().clone());
    }
    let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)
        .map_err(|e| Error::config(FIELD, format!("is unusable: {}", e.category())))?
        .set_client_to_redis_db(first_redis.db());
    if let Some(user) = first_redis.username() {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = first_redis.password() {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some((user, password)) = &options.master_auth {
        if !user.is_empty() {
            builder = builder.set_client_to_redis_username(user);
        }
        builder = builder.set_client_to_redis_password(password);
    }
    if let Some(mode) = first_tls {
        // TLS to the sentinels means TLS to the master too.
        builder = builder.set_client_to_redis_tls_mode(mode);
    }
    #[cfg(feature = "tls")]
    if let Some(certs) = super::redis::connection::tls_certificates(options) {
        builder = builder
            .set_client_to_sentinel_certificates(certs.clone())
            .set_client_to_redis_certificates(certs);
    }
    let client = builder.build().map_err(|e| {
        // The message names what failed to parse, never key material.
        Error::config(
            FIELD,
            format!("is unusable: {}", e.detail().unwrap_or(e.category())),
        )
    })?;
    Ok((client, first_redis.db()))
}

/// `Some` for a TLS address: whether certificates are verified.
fn tls_mode(addr: &ConnectionAddr) -> Option<TlsMode> {
    match addr {
        ConnectionAddr::TcpTls { insecure: true, .. } => Some(TlsMode::Insecure),
        ConnectionAddr::TcpTls { .. } => Some(TlsMode::Secure),
        _ => None,
    }
}

/// The command connection of a Sentinel deployment; clones share it.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    inner: Arc<Inner>,
}

struct Inner {
    /// Serialises resolutions: callers that find no connection wait for the
    /// one resolution in flight instead of each asking the sentinels.
    resolver: tokio::sync::Mutex<SentinelClient>,
    /// The current connection and its generation.
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    generation: AtomicU64,
    /// The master's address at the last resolution, to log changes.
    last_master: Mutex<Option<String>>,
    master_name: String,
    connection: AsyncConnectionConfig,
    /// Bound of one resolution (all sentinels asked, the master checked).
    timeout: Duration,
    /// The master's database.
    db: i64,
}

impl SentinelConn {
    /// Connects lazily: nothing happens until the first call.
    pub(crate) fn new(
        client: SentinelClient,
        master_name: &str,
        db: i64,
        call_timeout: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                resolver: tokio::sync::Mutex::new(client),
                current: Mutex::new(None),
                generation: AtomicU64::new(0),
                last_master: Mutex::new(None),
                master_name: master_name.to_owned(),
                connection: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(call_timeout))
                    .set_response_timeout(Some(call_timeout)),
                timeout: call_timeout,
                db,
            }),
        }
    }

    /// The name of the master the sentinels are asked about.
    pub(crate) fn master_name(&self) -> &str {
        &self.inner.master_name
    }

    /// A client for the node the sentinels name master now (checked with
    /// `ROLE`), for a connection of its own (release notices).
    pub(crate) async fn resolve(&self) -> redis::RedisResult<redis::Client> {
        let mut resolver = self.inner.resolver.lock().await;
        self.resolve_locked(&mut resolver).await
    }

    async fn resolve_locked(
        &self,
        resolver: &mut SentinelClient,
    ) -> redis::RedisResult<redis::Client> {
        let client =
            match tokio::time::timeout(self.inner.timeout, resolver.async_get_client()).await {
                Ok(Err(e)) if e.kind() == ErrorKind::MasterNameNotFoundBySentinel => {
                    return Err(redis::RedisError::from((
                        ErrorKind::MasterNameNotFoundBySentinel,
                        "master not found",
                        format!(
                            "no sentinel names a master `{}` that is up and answers ROLE as master \
                             (check the master name, and that the sentinels monitor it)",
                            self.inner.master_name
                        ),
                    )))
                }
                Ok(client) => client?,
                Err(_) => {
                    return Err(redis::RedisError::from((
                        ErrorKind::Io,
                        "timed out",
                        format!(
                            "no sentinel named a reachable master `{}` within {:?}",
                            self.inner.master_name, self.inner.timeout
                        ),
                    )))
                }
            };
        let addr = client.get_connection_info().addr().to_string();
        let mut last = lock(&self.inner.last_master);
        if last.as_deref() != Some(addr.as_str()) {
            tracing::info!(master = %self.inner.master_name, addr, previous = ?*last, "sentinels name a Redis master");
            *last = Some(addr);
        }
        Ok(client)
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        lock(&self.inner.current).clone()
    }

    /// The connection to the master, resolving and connecting when there is none.
    async fn connection(&self) -> redis::RedisResult<(u64, MultiplexedConnection)> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let mut resolver = self.inner.resolver.lock().await;
        // Another caller may have connected while we waited for the lock.
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let client = self.resolve_locked(&mut resolver).await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.inner.connection)
            .await?;
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *lock(&self.inner.current) = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// Forget connection `generation` (if still current): the next call
    /// resolves the master again.
    fn invalidate(&self, generation: u64, why: &str) {
        let mut current = lock(&self.inner.current);
        if matches!(&*current, Some((g, _)) if *g == generation) {
            *current = None;
            tracing::debug!(master = %self.inner.master_name, why, "dropping the connection to the Redis master; the next call asks the sentinels again");
        }
    }

    /// Look at the outcome of a call on connection `generation`, and forget
    /// the connection when it says it may not be the master's any more.
    fn check<T>(
        &self,
        generation: u64,
        result: redis::RedisResult<T>,
        replies: impl Fn(&T) -> &[Value],
    ) -> redis::RedisResult<T> {
        match &result {
            Err(e) if stale(e) => self.invalidate(generation, e.category()),
            Err(_) => {}
            // A pipeline (e.g. acquire + WAIT) carries errors in its replies.
            Ok(t) => {
                if let Some(code) = replies(t).iter().find_map(refusal) {
                    self.invalidate(generation, code);
                }
            }
        }
        result
    }
}

/// Forgets the connection when a call is dropped before its reply.
struct Abandoned<'a> {
    conn: &'a SentinelConn,
    generation: u64,
    armed: bool,
}

impl<'a> Abandoned<'a> {
    fn new(conn: &'a SentinelConn, generation: u64) -> Self {
        Self {
            conn,
            generation,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn
                .invalidate(self.generation, "a call was abandoned before its reply");
        }
    }
}

/// Whether an error means the connection may not lead to the master any
/// more (so the master must be resolved again).
pub(crate) fn stale(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
            )
        )
        || e.code() == Some("NOREPLICAS")
        // A script's write refused on a replica can come wrapped in a script error.
        || e.to_string().contains("READONLY")
}

/// Why `reply` says the node may not be the master any more, if it does:
/// a stale server error, also inside an array, or a write a script caught
/// with `pcall` and returned as one group's error text (`renew_many.lua`,
/// `acquire_many.lua`: one string per refused group). Without this, a node
/// demoted by hand (`REPLICAOF`, which does not disconnect clients as
/// Sentinel does) kept the connection, every call refused, until it broke.
fn refusal(reply: &Value) -> Option<&str> {
    match reply {
        Value::ServerError(e) if stale_server_error(e) => Some(e.code()),
        Value::Array(items) => items.iter().find_map(refusal),
        Value::BulkString(text) if text.starts_with(READONLY_WRITE.as_bytes()) => Some("READONLY"),
        Value::SimpleString(text) if text.starts_with(READONLY_WRITE) => Some("READONLY"),
        _ => None,
    }
}

/// How Redis refuses a write on a replica (the whole text, so that a
/// holder's id that happens to begin with `READONLY` is not taken for it).
const READONLY_WRITE: &str = "READONLY You can't write against a read only replica";

fn stale_server_error(e: &redis::ServerError) -> bool {
    matches!(
        e.code(),
        "READONLY" | "MASTERDOWN" | "LOADING" | "NOREPLICAS"
    ) || e.details().is_some_and(|d| d.contains("READONLY"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.connection().await?;
            let guard = Abandoned::new(self, generation);
            let result = conn.req_packed_command(cmd).await;
            guard.disarm();
            self.check(generation, result, std::slice::from_ref)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.connection().await?;
            let guard = Abandoned::new(self, generation);
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            guard.disarm();
            self.check(generation, result, Vec::as_slice)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}

#[cfg(test)]
mod tests {
    use super::refusal;
    use crate::{Config, ConfigBuilder, Error};
    use redis::Value;

    /// A demoted node's refusal is found where a batched script puts it:
    /// one group's error text inside the reply array.
    #[test]
    fn a_refused_write_inside_a_script_reply_is_a_refusal() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let refused = "READONLY You can't write against a read only replica.";
        // acquire_many: [kind, detail, ...] per group; renew_many: one
        // value per group.
        let acquire = Value::Array(vec![
            Value::Int(0),
            text("b"),
            Value::Int(-1),
            text(refused),
        ]);
        assert_eq!(refusal(&acquire), Some("READONLY"));
        let renew = Value::Array(vec![Value::Int(1), text(refused)]);
        assert_eq!(refusal(&renew), Some("READONLY"));
        // A pipeline's replies, nested.
        assert_eq!(
            refusal(&Value::Array(vec![renew, Value::Int(1)])),
            Some("READONLY")
        );
        // A holder whose id begins so, and other groups' errors: not one.
        let held = Value::Array(vec![
            Value::Int(0),
            text("READONLY-7"),
            text("WRONGTYPE Operation"),
        ]);
        assert_eq!(refusal(&held), None);
    }

    fn config_error(b: ConfigBuilder) -> (&'static str, String) {
        match b.build() {
            Err(Error::Config { field, rule }) => (field, rule),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn sentinel_settings_are_checked_without_showing_passwords() {
        let sentinel = |master: &str, urls: &[&str]| {
            Config::builder().redis_sentinel(master, urls.iter().copied())
        };
        let (field, _) = config_error(sentinel("mymaster", &[]));
        assert_eq!(field, "redis_sentinel");
        let (field, rule) = config_error(sentinel("", &["redis://s:1"]));
        assert_eq!(field, "redis_sentinel");
        assert!(rule.contains("master name"), "{rule}");
        let (field, _) = config_error(sentinel("my master", &["redis://s:1"]));
        assert_eq!(field, "redis_sentinel");
        let (field, rule) = config_error(sentinel(
            "mymaster",
            &["redis://:pw-one@a:1", "redis://:pw-two@b:2"],
        ));
        assert_eq!(field, "redis_sentinel");
        assert!(rule.contains("share one scheme"), "{rule}");
        assert!(
            !rule.contains("pw-one") && !rule.contains("pw-two"),
            "{rule}"
        );
        let (field, rule) = config_error(sentinel("mymaster", &["redis://u:pw/one@a:1"]));
        assert_eq!(field, "redis_sentinel");
        assert!(!rule.contains("pw/one"), "{rule}");
        let (field, _) = config_error(sentinel("mymaster", &["redis://a:1", "redis://b:2/3"]));
        assert_eq!(field, "redis_sentinel");

        let (field, _) = config_error(
            Config::builder()
                .redis_url("redis://h:1")
                .sentinel_master_auth("u", "pw"),
        );
        assert_eq!(field, "sentinel_master_auth");

        let config = sentinel(
            "mymaster",
            &["redis://u:pw-one@a:1", "redis://u:pw-one@b:2/4"],
        );
        assert!(config.build().is_err(), "databases differ");
        let config = sentinel(
            "mymaster",
            &["redis://u:pw-one@a:1", "redis://u:pw-one@b:2"],
        )
        .sentinel_master_auth("app", "pw-two")
        .build()
        .unwrap();
        let debug = format!("{config:?}");
        assert!(
            debug.contains(
                r#"redis sentinel \"mymaster\" [redis://u:***@a:1, redis://u:***@b:2] (master user \"app\", password ***)"#
            ),
            "{debug}"
        );
        assert!(
            !debug.contains("pw-one") && !debug.contains("pw-two"),
            "{debug}"
        );
    }

    #[test]
    fn sentinel_tls_follows_the_scheme() {
        let built = Config::builder()
            .redis_sentinel("mymaster", ["rediss://a:1", "rediss://b:2"])
            .build();
        #[cfg(feature = "tls")]
        built.unwrap();
        #[cfg(not(feature = "tls"))]
        assert!(matches!(
            built,
            Err(Error::Config {
                field: "redis_sentinel",
                ..
            })
        ));
        let (field, _) = config_error(
            Config::builder().redis_sentinel("mymaster", ["rediss://a:1", "redis://b:2"]),
        );
        assert_eq!(field, "redis_sentinel");
    }
}
