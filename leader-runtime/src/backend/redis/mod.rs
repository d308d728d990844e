//! The Redis backend: one Lua script per lease operation, run on a
//! self-reconnecting connection (a connection manager for one server, a
//! cluster connection for Redis Cluster, a connection that follows the
//! master for Sentinel: `sentinel.rs`), and a pub/sub connection for
//! release notices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisFuture, Script, ServerErrorKind, Value,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::batch::RenewBatcher;
use super::heir::{Heir, HEIR_GRACE};
use super::sentinel::SentinelConn;
use super::{Acquire, Channels, Counts, Member, Notice, NoticeSink, Op, Renew, SafeStart};
use crate::names::GroupKeys;
use crate::util::redact::redact_url;
use crate::{Error, Result};
use unconfirmed::UnconfirmedWaits;

#[cfg(test)]
mod acquire_many_tests;
#[cfg(test)]
mod confirm_tests;
#[cfg(feature = "cron")]
mod cron;
#[cfg(test)]
mod heir_tests;
#[cfg(test)]
mod holding_tests;
mod once;
mod unconfirmed;

/// Where and how to reach Redis, as the config builder collected it.
#[derive(Clone)]
pub(crate) struct RedisConfig {
    /// The server's URL, or the seed nodes of a cluster.
    pub(crate) urls: Vec<String>,
    /// Redis Cluster (`redis_cluster_urls`) rather than one server (`redis_url`).
    pub(crate) cluster: bool,
    /// Sentinel (`redis_sentinel`): the master's name; `urls` are the sentinels'.
    pub(crate) sentinel: Option<String>,
    pub(crate) options: RedisOptions,
    /// The environment variable the URLs were cut from, if any: messages
    /// then name a URL by its position in it, never by a piece of it (a cut
    /// may have fallen inside a password).
    pub(crate) from_variable: Option<&'static str>,
}

/// Settings for either kind of deployment, set independently of the URLs.
#[derive(Clone, Default)]
pub(crate) struct RedisOptions {
    /// PEM certificates of the CAs to trust instead of the system's roots.
    pub(crate) tls_ca: Option<Vec<u8>>,
    /// PEM client certificate chain and private key, for servers that verify clients.
    pub(crate) tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// After each acquisition, `WAIT` for this many replicas (0: don't).
    pub(crate) min_replicas: u32,
    /// Sentinel only: user (empty: none) and password for the master.
    pub(crate) master_auth: Option<(String, String)>,
}

impl RedisOptions {
    /// The builder method of the first option that is set, if any.
    pub(crate) fn first_set(&self) -> Option<&'static str> {
        if self.tls_ca.is_some() {
            Some("tls_ca_certs")
        } else if self.tls_client.is_some() {
            Some("tls_client_cert")
        } else if self.min_replicas > 0 {
            Some("min_replicas")
        } else if self.master_auth.is_some() {
            Some("sentinel_master_auth")
        } else {
            None
        }
    }
}

impl RedisConfig {
    pub(crate) fn standalone(url: String) -> Self {
        Self {
            urls: vec![url],
            cluster: false,
            sentinel: None,
            options: RedisOptions::default(),
            from_variable: None,
        }
    }

    pub(crate) fn cluster(urls: Vec<String>) -> Self {
        Self {
            urls,
            cluster: true,
            sentinel: None,
            options: RedisOptions::default(),
            from_variable: None,
        }
    }

    pub(crate) fn sentinel(master_name: String, urls: Vec<String>) -> Self {
        Self {
            urls,
            cluster: false,
            sentinel: Some(master_name),
            options: RedisOptions::default(),
            from_variable: None,
        }
    }

    /// The builder method that set the URLs.
    fn field(&self) -> &'static str {
        if self.cluster {
            "redis_cluster_urls"
        } else if self.sentinel.is_some() {
            "redis_sentinel"
        } else {
            "redis_url"
        }
    }

    /// Check every URL and option without connecting.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the builder method; never shows a password.
    pub(crate) fn validate(&self) -> Result<()> {
        Clients::new(self).map(drop)
    }

    /// The URLs with passwords redacted, and the options, for `Debug`.
    pub(crate) fn describe(&self) -> String {
        let urls: Vec<String> = self.urls.iter().map(|u| redact_url(u)).collect();
        let mut out = if self.cluster {
            format!("redis cluster [{}]", urls.join(", "))
        } else if let Some(master) = &self.sentinel {
            format!("redis sentinel {master:?} [{}]", urls.join(", "))
        } else {
            urls.join(", ")
        };
        match &self.options.master_auth {
            Some((user, _)) if !user.is_empty() => {
                out.push_str(&format!(" (master user {user:?}, password ***)"));
            }
            Some(_) => out.push_str(" (master password ***)"),
            None => {}
        }
        if self.options.tls_ca.is_some() {
            out.push_str(" (custom CA)");
        }
        if self.options.tls_client.is_some() {
            out.push_str(" (client certificate)");
        }
        if self.options.min_replicas > 0 {
            out.push_str(&format!(" (min_replicas {})", self.options.min_replicas));
        }
        out
    }
}

/// The clients a backend connects with, built (and so checked) without any I/O.
struct Clients {
    /// One per URL: the server, or each seed node (used for release notices).
    /// Empty for Sentinel.
    nodes: Vec<redis::Client>,
    cluster: Option<ClusterClient>,
    /// The sentinel client and the master's database.
    sentinel: Option<(redis::sentinel::SentinelClient, i64)>,
}

impl Clients {
    fn new(config: &RedisConfig) -> Result<Self> {
        let field = config.field();
        if config.urls.is_empty() {
            return Err(Error::config(field, "needs at least one URL".to_owned()));
        }
        let tls_options = config.options.tls_ca.is_some() || config.options.tls_client.is_some();
        const CERT: &[u8] = b"-----BEGIN CERTIFICATE-----";
        if let Some(pem) = &config.options.tls_ca {
            if !contains(pem, CERT) {
                return Err(Error::config(
                    "tls_ca_certs",
                    "contains no PEM certificate".to_owned(),
                ));
            }
        }
        if let Some((cert, _)) = &config.options.tls_client {
            if !contains(cert, CERT) {
                return Err(Error::config(
                    "tls_client_cert",
                    "contains no PEM certificate".to_owned(),
                ));
            }
        }
        if config.options.master_auth.is_some() && config.sentinel.is_none() {
            return Err(Error::config(
                "sentinel_master_auth",
                format!("is for redis_sentinel, not {field}: put the credentials in the URL"),
            ));
        }
        let mut nodes = Vec::with_capacity(config.urls.len());
        let mut infos = Vec::with_capacity(config.urls.len());
        // How a message names a URL.
        let shown = |i: usize, url: &str| match config.from_variable {
            Some(name) => format!("URL {} of {name}", i + 1),
            None => redact_url(url),
        };
        for (i, url) in config.urls.iter().enumerate() {
            let tls = is_tls_url(url);
            if tls && !cfg!(feature = "tls") {
                return Err(Error::config(
                    field,
                    format!(
                        "uses TLS ({}), which needs the `tls` feature of leader-runtime",
                        shown(i, url)
                    ),
                ));
            }
            if tls_options && !tls {
                let option = config.options.first_set().unwrap_or("tls_ca_certs");
                return Err(Error::config(
                    option,
                    format!("needs rediss:// URLs, but {field} has {}", shown(i, url)),
                ));
            }
            let info = url.as_str().into_connection_info().map_err(|e| {
                Error::config(
                    field,
                    format!(
                        "must be a valid redis:// or rediss:// URL ({}): {}{}",
                        shown(i, url),
                        e.category(),
                        if config.from_variable.is_some() {
                            " (the variable is cut at commas and spaces: percent-encode them in a password, as %2C and %20)"
                        } else {
                            ""
                        }
                    ),
                )
            })?;
            if config.cluster && info.redis_settings().db() != 0 {
                return Err(Error::config(
                    field,
                    format!(
                        "must not name a database ({}): Redis Cluster has only database 0",
                        shown(i, url)
                    ),
                ));
            }
            if config.sentinel.is_some() {
                infos.push((info, shown(i, url)));
            } else {
                nodes.push(open_client(info, &config.options, field)?);
            }
        }
        if let Some(master) = &config.sentinel {
            let sentinel = super::sentinel::client(master, infos, &config.options)?;
            return Ok(Self {
                nodes,
                cluster: None,
                sentinel: Some(sentinel),
            });
        }
        let cluster = if config.cluster {
            // One retry, right away, follows a MOVED/ASK redirect (after a
            // failover or resharding) inside the call; a failed connection
            // is retried once after at most 20 ms. As with one server, the
            // election's own pacing decides about anything longer.
            let builder = ClusterClientBuilder::new(config.urls.iter().map(String::as_str))
                .retries(1)
                .min_retry_wait(0)
                .max_retry_wait(20);
            #[cfg(feature = "tls")]
            let builder = match tls_certificates(&config.options) {
                Some(certs) => builder.certs(certs),
                None => builder,
            };
            let client = builder.build().map_err(|e| {
                Error::config(
                    field,
                    format!(
                        "must share one scheme, user, password and database: {}",
                        e.detail().unwrap_or(e.category())
                    ),
                )
            })?;
            Some(client)
        } else {
            None
        };
        Ok(Self {
            nodes,
            cluster,
            sentinel: None,
        })
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub(super) fn is_tls_url(url: &str) -> bool {
    let scheme = url.split("://").next().unwrap_or_default();
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

#[cfg(feature = "tls")]
pub(super) fn tls_certificates(options: &RedisOptions) -> Option<redis::TlsCertificates> {
    if options.tls_ca.is_none() && options.tls_client.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: options
            .tls_client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: options.tls_ca.clone(),
    })
}

fn open_client(
    info: redis::ConnectionInfo,
    options: &RedisOptions,
    field: &'static str,
) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    if let Some(certs) = tls_certificates(options) {
        return redis::Client::build_with_tls(info, certs).map_err(|e| {
            let option = if options.tls_client.is_some() {
                "tls_client_cert"
            } else {
                "tls_ca_certs"
            };
            // The message names what failed to parse, never key material.
            Error::config(
                option,
                format!("is unusable: {}", e.detail().unwrap_or(e.category())),
            )
        });
    }
    let _ = options;
    redis::Client::open(info)
        .map_err(|e| Error::config(field, format!("is unusable: {}", e.category())))
}

/// rustls panics when no crypto provider can be determined (e.g. two
/// providers' features are on and the application installed none); install
/// ring, which the `tls` feature brings, unless one is installed already.
#[cfg(feature = "tls")]
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The command connection: both kinds reconnect by themselves, and a script
/// runs on the node that owns the slot of its first key.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

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

/// Where the release-notice subscription connects.
#[derive(Clone)]
enum NoticeSource {
    /// The server, or each seed node of a cluster, used in turn, moving on
    /// when one fails.
    Nodes(Arc<[redis::Client]>),
    /// The master the sentinels name, resolved again for every connection.
    Sentinel(SentinelConn),
}

impl NoticeSource {
    /// The client for attempt number `n`.
    async fn client(&self, n: usize, timeout: Duration) -> Result<redis::Client> {
        match self {
            NoticeSource::Nodes(nodes) => nodes
                .get(n % nodes.len().max(1))
                .cloned()
                .ok_or_else(|| backend_message("no Redis node to subscribe on")),
            NoticeSource::Sentinel(sentinel) => {
                match tokio::time::timeout(timeout, sentinel.resolve()).await {
                    Ok(client) => client.map_err(|e| connection_err(&e)),
                    Err(_) => Err(timeout_err(timeout)),
                }
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            NoticeSource::Nodes(nodes) => nodes.len(),
            NoticeSource::Sentinel(_) => 1,
        }
    }

    /// What to name in a log line when no node could be chosen.
    fn describe(&self) -> String {
        match self {
            NoticeSource::Nodes(_) => "?".to_owned(),
            NoticeSource::Sentinel(s) => format!("master {:?} via sentinels", s.master_name()),
        }
    }
}

/// The notice connection's health check: a `PING` every `every`, answered
/// within `deadline`, or the connection counts as lost (a half-open
/// connection otherwise looks healthy, and followers would wait for notices
/// that never come).
#[derive(Clone, Copy)]
struct Health {
    every: Duration,
    deadline: Duration,
}

/// Subscribe and forward notices until the connection ends, fails its
/// health check, or `stop`.
#[allow(clippy::too_many_arguments)]
async fn listen(
    client: &redis::Client,
    channel: &Channels,
    sink: &NoticeSink,
    up: &AtomicBool,
    timeout: Duration,
    health: Health,
    stop: &CancellationToken,
    reconnect: bool,
) -> Result<()> {
    let err = |e: redis::RedisError| connection_err(&e);
    let mut pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
        .await
        .map_err(|_| timeout_err(timeout))?
        .map_err(err)?;
    tokio::time::timeout(timeout, pubsub.subscribe(&channel.release))
        .await
        .map_err(|_| timeout_err(timeout))?
        .map_err(err)?;
    // Operators' requests. An ACL user written for an earlier version may
    // not reach this channel: releases still work, a pause still takes
    // effect at the leader's next renewal; only the quick path is lost.
    match tokio::time::timeout(timeout, pubsub.subscribe(&channel.control)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {
            tracing::warn!(
                channel = channel.control,
                error = %e,
                "cannot subscribe to control requests (allow the channel to the ACL user): \
                 step-down requests are not received, and pauses take effect at the next renewal"
            );
        }
        Ok(Err(e)) => return Err(err(e)),
        Err(_) => return Err(timeout_err(timeout)),
    }
    up.store(true, Ordering::SeqCst);
    tracing::debug!(
        ?channel,
        "listening for release notices and control requests"
    );
    if reconnect {
        // Redis may have restarted empty meanwhile: leaders renew now,
        // instead of up to one renew interval later.
        sink(Notice::Released {
            group: super::EVERY_GROUP,
            by: "",
        });
    }
    let (mut commands, mut messages) = pubsub.split();
    let mut next_ping = Instant::now() + health.every;
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            msg = messages.next() => msg,
            _ = tokio::time::sleep_until(next_ping) => {
                // Messages that arrive meanwhile wait in the stream's buffer.
                match tokio::time::timeout(health.deadline, commands.ping::<Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(err(e)),
                    Err(_) => {
                        return Err(backend_message(&format!(
                            "release-notice connection did not answer PING within {:?}",
                            health.deadline
                        )))
                    }
                }
                next_ping = Instant::now() + health.every;
                continue;
            }
        };
        let Some(msg) = msg else {
            return Err(backend_message("release-notice connection closed"));
        };
        let payload: String = match msg.get_payload() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a release notice that is not a string");
                continue;
            }
        };
        match channel.parse(msg.get_channel_name(), &payload) {
            Some(notice) => sink(notice),
            None => tracing::warn!(payload, "ignoring a malformed notice"),
        }
    }
}

/// A connection-level error with no underlying error (the notice connection).
fn backend_message(message: &str) -> Error {
    Error::Connection {
        message: message.to_owned(),
        source: None,
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

/// One group's part of `acquire_many.lua`'s flat reply.
#[derive(Debug, PartialEq)]
enum FlatReply {
    /// What `acquire.lua` would have replied for that group alone.
    Acquire(Value),
    /// That group's own error (`{-1, message}`).
    Error(Vec<u8>),
}

/// `acquire_many.lua`'s flat reply cut into `groups` replies: each starts
/// with its kind, which tells its length (1 won: 5 entries, 0 held: 3,
/// 2 paused and -1 error: 2). Anything else, or entries left over or missing,
/// is an error: the reply, or the part that does not parse (a protocol error
/// for every group).
fn split_flat(groups: usize, reply: Value) -> std::result::Result<Vec<FlatReply>, Value> {
    let Value::Array(items) = reply else {
        return Err(reply);
    };
    let mut out = Vec::with_capacity(groups);
    let mut items = items.into_iter();
    while let Some(kind) = items.next() {
        let len = match kind {
            Value::Int(1) => 5,
            Value::Int(0) => 3,
            Value::Int(2 | -1) => 2,
            other => return Err(other),
        };
        let mut part = Vec::with_capacity(len);
        part.push(kind);
        part.extend(items.by_ref().take(len - 1));
        if part.len() < len || out.len() == groups {
            return Err(Value::Array(part));
        }
        out.push(match part.as_mut_slice() {
            [Value::Int(-1), Value::BulkString(e)] => FlatReply::Error(std::mem::take(e)),
            [Value::Int(-1), _] => return Err(Value::Array(part)),
            _ => FlatReply::Acquire(Value::Array(part)),
        });
    }
    if out.len() == groups {
        Ok(out)
    } else {
        Err(Value::Array(Vec::new()))
    }
}

fn parse_acquire(group: &str, reply: Value) -> Result<Acquire> {
    let items = match reply {
        Value::Array(items) if items.len() == 2 => {
            return match items.as_slice() {
                [Value::Int(2), Value::BulkString(word)] if word == b"paused" => {
                    Ok(Acquire::Paused)
                }
                _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
            };
        }
        Value::Array(items) if items.len() == 3 || items.len() == 5 => items,
        other => return Err(protocol_err(group, "acquire", &other)),
    };
    match (&items[0], &items[1], &items[2]) {
        (Value::Int(1), Value::BulkString(token), Value::Int(wait)) => {
            let why = match items.get(3) {
                Some(Value::BulkString(why)) => SafeStart::from_script(why),
                _ => None,
            };
            // Tokens travel as decimal strings: exact up to u64::MAX.
            let decimal = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<u64>().ok();
            let token = decimal(token).filter(|t| *t > 0);
            // The token before it; empty: there was no record.
            let last = match items.get(4) {
                Some(Value::BulkString(last)) if last.is_empty() => Some(None),
                Some(Value::BulkString(last)) => decimal(last).map(Some),
                _ => None,
            };
            match (token, u64::try_from(*wait), why, last) {
                (Some(token), Ok(wait), Some(why), Some(last)) => Ok(Acquire::Won {
                    token,
                    wait: Duration::from_millis(wait),
                    why,
                    last,
                }),
                _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
            }
        }
        (Value::Int(0), Value::BulkString(holder), Value::Int(pttl)) => Ok(Acquire::Held {
            holder: String::from_utf8_lossy(holder).into_owned(),
            pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
        }),
        _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX).max(1)
}

fn backend_err(group: &str, e: &redis::RedisError) -> Error {
    // RedisError's Display carries the server's message, never the URL.
    Error::redis(Some(group), e.to_string(), e.clone())
}

/// A connection-level error: no group's call failed.
fn connection_err(e: &redis::RedisError) -> Error {
    // RedisError's Display carries the server's message, never the URL.
    Error::redis(None, e.to_string(), e.clone())
}

/// The release-notice connection did not answer in time.
fn timeout_err(after: Duration) -> Error {
    Error::Connection {
        message: format!("no answer within {after:?}"),
        source: None,
    }
}

/// `members.lua`'s reply: id, leading, campaigns of each live member.
fn parse_members(reply: Value) -> Result<Vec<Member>> {
    let bad = |reply: &Value| protocol_err("members", "members", reply);
    let Value::Array(items) = reply else {
        return Err(bad(&reply));
    };
    if items.len() % 3 != 0 {
        return Err(bad(&Value::Array(items)));
    }
    let text = |item: &Value| match item {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        other => Err(bad(other)),
    };
    // Digits (the script checks); a count beyond u32, which no fleet has,
    // counts as u32::MAX rather than failing every round until it expires.
    let count = |item: &Value| {
        let digits = text(item)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(item));
        }
        Ok(digits.parse::<u32>().unwrap_or(u32::MAX))
    };
    items
        .chunks_exact(3)
        .map(|m| {
            Ok(Member {
                id: text(&m[0])?,
                counts: Counts {
                    leading: count(&m[1])?,
                    campaigns: count(&m[2])?,
                },
            })
        })
        .collect()
}

fn protocol_err(group: &str, op: &str, reply: &Value) -> Error {
    Error::unexpected_reply(group, op, reply)
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
