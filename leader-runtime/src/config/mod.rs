//! Configuration: a builder that validates every combination up front.

pub(crate) mod env;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{MemoryBackend, RedisConfig, RedisOptions};
use crate::group::lease::Lease;
use crate::names::validate_prefix;
use crate::observe::events::LostReason;
use crate::{Error, Result};

pub(crate) type ElectedCallback = Arc<dyn Fn(&str, &Lease) + Send + Sync>;
pub(crate) type LostCallback = Arc<dyn Fn(&str, LostReason) + Send + Sync>;

/// Default lease length.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// Default heartbeat while leader with the default ttl: one third of
/// [`DEFAULT_TTL`]. With another ttl the default is that ttl / 3.
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(5);
/// Default follower retry pace when nothing tells it sooner; with a ttl
/// under 6 s the default is ttl / 3 instead.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(2);
/// Default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "leader";

/// Where leases live.
#[derive(Clone)]
pub(crate) enum BackendConfig {
    Redis(RedisConfig),
    Memory(MemoryBackend),
}

/// The runtime's configuration; make one with [`Config::builder`].
#[derive(Clone)]
pub struct Config {
    pub(crate) backend: BackendConfig,
    pub(crate) ttl: Duration,
    pub(crate) renew_interval: Duration,
    pub(crate) retry_interval: Duration,
    pub(crate) call_timeout: Duration,
    pub(crate) drift_margin: Duration,
    /// Send each follower attempt alone, as before attempts were batched
    /// (the load bench's baseline).
    pub(crate) unbatched_attempts: bool,
    /// Each live instance leads its share of the groups (see `election/balance.rs`).
    pub(crate) balance: bool,
    pub(crate) instance_id: String,
    pub(crate) key_prefix: String,
    pub(crate) on_elected: Option<ElectedCallback>,
    pub(crate) on_lost: Option<LostCallback>,
}

impl Config {
    /// Start building a configuration.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Lease length: how long the lease lives on the server after the last
    /// successful acquire or renew, and so the bound on crash failover.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the leader renews its lease.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// How often a follower retries when nothing tells it sooner.
    pub fn retry_interval(&self) -> Duration {
        self.retry_interval
    }

    /// Longest wait for any one backend call.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Whether leadership is balanced across the live instances
    /// ([`ConfigBuilder::balance_leadership`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend};
    ///
    /// let config = Config::builder().memory(MemoryBackend::new()).build()?;
    /// assert!(!config.balances_leadership());
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    pub fn balances_leadership(&self) -> bool {
        self.balance
    }

    /// How much earlier than the server the local view ends (clock drift allowance).
    pub fn drift_margin(&self) -> Duration {
        self.drift_margin
    }

    /// This instance's id, as stored in the lease.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The prefix of every key.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match &self.backend {
            BackendConfig::Redis(redis) => redis.describe(),
            BackendConfig::Memory(_) => "memory".to_owned(),
        };
        f.debug_struct("Config")
            .field("backend", &backend)
            .field("ttl", &self.ttl)
            .field("renew_interval", &self.renew_interval)
            .field("retry_interval", &self.retry_interval)
            .field("call_timeout", &self.call_timeout)
            .field("drift_margin", &self.drift_margin)
            .field("balance_leadership", &self.balance)
            .field("instance_id", &self.instance_id)
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

/// Builder of [`Config`]; every setter is optional except the backend
/// ([`redis_url`](Self::redis_url), [`redis_cluster_urls`](Self::redis_cluster_urls),
/// [`redis_sentinel`](Self::redis_sentinel) or [`memory`](Self::memory)).
///
/// The timings follow the `ttl`: set the lease length alone and the renew
/// interval, retry interval, call timeout and drift margin are derived from
/// it (see [`build`](Self::build)); set any of them to override it. Every
/// rule is checked in [`build`](Self::build), which names the field that
/// broke one.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_runtime::{Config, Error, MemoryBackend};
///
/// // Redis (no connection is made before the first election).
/// let config = Config::builder()
///     .redis_url("redis://leader-app:s3cret@127.0.0.1:6379/0")
///     .ttl(Duration::from_secs(6)) // crash failover within 6 s
///     .instance_id("api-7")
///     .key_prefix("billing")
///     .build()?;
/// assert_eq!(config.renew_interval(), Duration::from_secs(2)); // ttl / 3
/// assert!(!format!("{config:?}").contains("s3cret")); // never shown
///
/// // In memory, for tests; an explicit renew interval must stay below the ttl.
/// let err = Config::builder()
///     .memory(MemoryBackend::new())
///     .ttl(Duration::from_secs(2))
///     .renew_interval(Duration::from_secs(2))
///     .build()
///     .unwrap_err();
/// assert!(matches!(err, Error::Config { field: "renew_interval", .. }));
/// # Ok::<(), leader_runtime::Error>(())
/// ```
#[derive(Default)]
#[must_use]
pub struct ConfigBuilder {
    backend: Option<BackendConfig>,
    redis: RedisOptions,
    ttl: Option<Duration>,
    renew_interval: Option<Duration>,
    retry_interval: Option<Duration>,
    call_timeout: Option<Duration>,
    drift_margin: Option<Duration>,
    unbatched_attempts: bool,
    balance: bool,
    instance_id: Option<String>,
    key_prefix: Option<String>,
    on_elected: Option<ElectedCallback>,
    on_lost: Option<LostCallback>,
}

impl ConfigBuilder {
    /// Keep leases in the Redis server at `url`:
    /// `redis://[[user]:password@]host[:port][/db]`, or `rediss://…` for TLS
    /// (needs the `tls` feature). For Redis Cluster use
    /// [`redis_cluster_urls`](Self::redis_cluster_urls) instead.
    ///
    /// A user and password in the URL authenticate with `AUTH user password`
    /// (Redis 6 ACL); a password alone authenticates the `default` user.
    /// Percent-encode reserved characters in them (`@` is `%40`). Passwords
    /// never appear in an [`Error`], in `Debug` output or in logs.
    ///
    /// An ACL user needs, for the default key prefix `leader`:
    /// `~leader:* &leader:released &leader:control +evalsha +eval +script|load +get +set
    /// +pexpire +pttl +del +time +info +type +exists +hmget +hset +publish
    /// +subscribe +ping` (plus `+wait` with [`min_replicas`](Self::min_replicas));
    /// the scripts' own calls are checked against the user's rules too.
    /// Rules without `+exists` (those of earlier versions) still work, but
    /// each batched follower attempt and renewal is then logged as a denial
    /// in `ACL LOG`.
    /// DEPLOYING.md in the repository lists every command and why.
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.backend = Some(BackendConfig::Redis(RedisConfig::standalone(url.into())));
        self
    }

    /// Keep leases in a Redis Cluster reached through these seed nodes (each
    /// `redis://…` or `rediss://…`, all with the same scheme, user, password
    /// and database; the rest of the cluster is discovered from them).
    ///
    /// A group's keys share one hash slot (`{prefix}:{group}:…`), so each
    /// lease operation is one script on the group's master, and groups spread
    /// over the masters. The connection follows `MOVED`/`ASK` redirects and
    /// reconnects by itself. Release notices are plain `PUBLISH`es, which a
    /// cluster forwards to every node; this instance subscribes on the first
    /// seed and moves to the next when that node fails, so list more than
    /// one. While no notice connection is up, followers fall back to the
    /// lease's expiry and `retry_interval`, as with one server.
    ///
    /// Moving a slot to another master costs its groups about one `ttl` of
    /// leadership, never two leaders: while the slot is open every call gets
    /// `TRYAGAIN`, and the new master vouches for none of the moved records
    /// (DEPLOYING.md, "Redis Cluster: resharding").
    ///
    /// An ACL user needs the rules listed at [`redis_url`](Self::redis_url)
    /// plus `+cluster|slots` (the client reads the slot map with it).
    pub fn redis_cluster_urls<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls = urls.into_iter().map(Into::into).collect();
        self.backend = Some(BackendConfig::Redis(RedisConfig::cluster(urls)));
        self
    }

    /// Keep leases in the Redis master that Sentinel names `master_name`,
    /// found through these sentinels (`redis://host:26379` each, or
    /// `rediss://…` for TLS, which then applies to the master connection
    /// too; all with the same scheme, user, password and database).
    ///
    /// - **Credentials.** A user and password in the sentinel URLs
    ///   authenticate with the *sentinels* (`requirepass` / ACL users of the
    ///   sentinels). The master's own credentials are set with
    ///   [`sentinel_master_auth`](Self::sentinel_master_auth). A database in
    ///   the URLs (`redis://s1:26379/2`) selects the master's database.
    /// - **TLS.** `tls_ca_certs` and `tls_client_cert` (feature `tls`)
    ///   apply to the sentinels and the master alike.
    /// - **Failover.** The master is looked up (`SENTINEL MASTERS`, then
    ///   `ROLE` on the named node) when the first call needs it, and again
    ///   after any call on it failed, timed out, or was answered `READONLY`
    ///   (the node was demoted), `NOREPLICAS`, `MASTERDOWN` or `LOADING`: a
    ///   lease operation never counts as done on a
    ///   node that is not the master then. Sentinel itself disconnects every
    ///   client of a node it demotes. The release-notice subscription also
    ///   follows the master (it asks the sentinels every time it connects).
    /// - **What failover cannot give.** Replication is asynchronous: a
    ///   promoted replica may lack the latest lease writes. See
    ///   [`min_replicas`](Self::min_replicas) and the crate docs on partial
    ///   data loss.
    ///
    /// An ACL user on the master needs the rules listed at
    /// [`redis_url`](Self::redis_url) plus `+role` (the client checks that
    /// the node it was sent to is the master); a sentinel ACL user needs
    /// `+sentinel|masters +role`.
    pub fn redis_sentinel<I, S>(mut self, master_name: impl Into<String>, sentinel_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls = sentinel_urls.into_iter().map(Into::into).collect();
        self.backend = Some(BackendConfig::Redis(RedisConfig::sentinel(
            master_name.into(),
            urls,
        )));
        self
    }

    /// Marks the Redis URLs as cut from the environment variable `name`:
    /// messages name each by its position there (see `env`).
    pub(crate) fn urls_from_variable(mut self, name: &'static str) -> Self {
        if let Some(BackendConfig::Redis(redis)) = &mut self.backend {
            redis.from_variable = Some(name);
        }
        self
    }

    /// The credentials of the master that [`redis_sentinel`](Self::redis_sentinel)
    /// finds: `AUTH username password` (Redis 6 ACL), or `AUTH password`
    /// when `username` is empty (`requirepass`). Only for Sentinel; with
    /// [`redis_url`](Self::redis_url) the credentials go in the URL.
    pub fn sentinel_master_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.redis.master_auth = Some((username.into(), password.into()));
        self
    }

    /// Trust these CA certificates (PEM, one or more) for `rediss://`
    /// connections instead of the system's roots. Without it, the server's
    /// certificate must chain to a root the system trusts.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_certs(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.redis.tls_ca = Some(pem.into());
        self
    }

    /// Present this client certificate chain and private key (PEM) on
    /// `rediss://` connections, for servers that verify clients
    /// (`tls-auth-clients yes`).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.redis.tls_client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// After each acquisition, wait (Redis `WAIT`, up to half of
    /// `call_timeout`) until at least `n` replicas of the group's master have
    /// the new lease, and lead only then (default 0: don't wait). When fewer
    /// acknowledge in time, or the `WAIT` fails (an ACL user without
    /// `+wait`), this round counts as a backend error: the lease stays ours
    /// on the master, and the next round re-claims it and waits again. If
    /// that acquisition was a safe start (the group's record missing, written
    /// by another server process, or its lease key lost early), or the call
    /// got no reply at all (a timeout, a dropped connection: it may have
    /// been one), the record it wrote may be missing on the replicas, so the
    /// group's next win waits one `ttl` before leading — a win within one
    /// `ttl` plus `call_timeout` of that round, while the lease it may have
    /// written can still be there to re-claim; a later one waits as any
    /// instance's would. The runtime forgets these marks after that, so a
    /// process naming many short-lived groups does not accumulate them.
    ///
    /// What it does: a failover that promotes one of those replicas right
    /// after the acquisition keeps the lease, so another instance does not
    /// win it while this one starts leading.
    ///
    /// What it does not: make Redis strongly consistent. `WAIT` does not
    /// stop a replica that did not acknowledge from being promoted, renewals
    /// are not waited for (a failover can promote a replica whose copy of the
    /// lease expires earlier than this instance's view), and acknowledged
    /// writes can still be lost if replicas restart without persistence. Use
    /// the fencing token for correctness; this narrows the window. While a
    /// `WAIT` blocks, other groups' commands on the same connection queue
    /// behind it; follower attempts due together share one `WAIT` per
    /// batched call (each win is confirmed, or not, as a lone one would be).
    pub fn min_replicas(mut self, n: u32) -> Self {
        self.redis.min_replicas = n;
        self
    }

    /// Keep leases in an in-process [`MemoryBackend`]; share one between
    /// several runtimes to play several instances.
    pub fn memory(mut self, backend: MemoryBackend) -> Self {
        self.backend = Some(BackendConfig::Memory(backend));
        self
    }

    /// Lease length (default 15 s): the crash failover bound. The timings
    /// not set explicitly follow it (see [`build`](Self::build)). At least
    /// 10 ms and at most one day.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Heartbeat while leader (default `ttl / 3`: 5 s with the default
    /// ttl); must be shorter than `ttl`.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// Follower retry pace when nothing tells it sooner (default: the
    /// smaller of 2 s and `ttl / 3`): after an error, or while the
    /// release-notice connection is down. At most one day.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = Some(interval);
        self
    }

    /// Longest wait for one backend call (default: the smallest of 2 s,
    /// half of `ttl - renew_interval`, and 1 ms less than `ttl -
    /// drift_margin - renew_interval`). `renew_interval + call_timeout`
    /// must fit inside `ttl` minus the drift margin, so a slow renew still
    /// lands before the lease expires.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// How much earlier than the server the local view ends (default 1% of
    /// `ttl` + 2 ms); must be smaller than `ttl - renew_interval`.
    pub fn drift_margin(mut self, margin: Duration) -> Self {
        self.drift_margin = Some(margin);
        self
    }

    /// Balance leadership across the live instances (default off): with N
    /// instances campaigning in the same G groups, each leads ⌊G/N⌋ or
    /// ⌈G/N⌉ of them once membership settles.
    ///
    /// Worth it beyond spreading the work: with thousands of groups, a
    /// crash frees only the crashed instance's share, not every lease.
    /// When one instance leads all 5,000 groups of a 20-instance fleet on
    /// one Redis, its 5,000 leases are taken over at once at its expiry:
    /// unbalanced, one follower per group (its heir) asks then and the
    /// others 200 ms later, and the take-overs alone keep Redis busy for
    /// tens of ms; balanced, only the crashed instance's share (250 groups)
    /// is taken over, sooner (figures in `BENCHMARKS.md`, "A fleet on one
    /// Redis"). Heirs are off with balancing.
    ///
    /// Membership is a hash
    /// `{prefix}:balance` in the backend (one key, so one slot on a
    /// cluster), refreshed every `renew_interval`; with each refresh an
    /// instance publishes how many groups it leads and how many it
    /// campaigns in (eligible ones; `once:` groups are outside the balance:
    /// never counted, never handed over). An instance that missed a refresh
    /// (`renew_interval` + `call_timeout` without one: it crashed) no
    /// longer counts, and its entry expires after `ttl`. The shares come
    /// from those figures, the same on every instance: an instance's share
    /// is at most the number of groups it campaigns in, and the rest is
    /// split evenly over the others, so instances whose groups differ (a
    /// rolling start, a group only some instances use, groups out of the
    /// race through [`Runtime::set_eligible`](crate::Runtime::set_eligible))
    /// get shares they can take.
    ///
    /// A leader over its share, while another instance leads less than
    /// its own, hands groups over the way
    /// [`Runtime::step_down`](crate::Runtime::step_down) does — drain, end
    /// the view, release — at most 100 per `renew_interval`, and only groups
    /// with no gated body running (checked exactly: a body that started as
    /// the hand-over began calls it off until a later round, so a hand-over
    /// for the balance never waits for one; a gated call in that instant is
    /// refused, as during any hand-over). A follower below its share takes a
    /// released group at once; one at its share lets an instance below its
    /// share take it first (it asks for a fresh
    /// membership round and waits for it: at most 50 ms, or 2 × 50 ms +
    /// `call_timeout` + 50 ms while some instance leads more than its
    /// share). Instances do not know which groups the others campaign in:
    /// if nobody took a group handed over for the balance within
    /// 2 × 50 ms + `call_timeout`, the instance that handed it over takes
    /// it back (with its first attempt after that window that wins or
    /// finds it held — a failed one does not count — and no later one), and keeps it
    /// as long as the instances below their share
    /// and the numbers of groups they campaign in stay the same (when the
    /// instance below its share campaigns in every group, it wanted the
    /// group: the hand-over is tried again at a later round, up to 3
    /// times). So balancing leaves
    /// a group without a leader for at most that window per hand-over (2.1 s
    /// with the default timings), an instance hands a group over in vain a
    /// bounded number of times while those stay the same, and the
    /// moves stop; where group sets differ, an uneven
    /// split that only a chain of moves through a third instance could
    /// even out stays. A [`Runtime::step_down`](crate::Runtime::step_down)
    /// still stays out of the group's race for one `ttl`.
    ///
    /// A joining instance takes its share within a few renew intervals;
    /// one that stops cleanly leaves the membership before it releases, so
    /// its groups move within about two round trips (its release notices,
    /// a membership round), those of one that crashes within `ttl`. Every
    /// instance must use the same `ttl`, and all must run a release with
    /// this membership format (older releases kept ids only, in a sorted
    /// set `{prefix}:members`: the two do not see each other). An ACL user
    /// needs `+hdel +hgetall` besides the rules of
    /// [`redis_url`](Self::redis_url) (without them the membership refresh
    /// fails, is logged, and every instance keeps what it leads).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend};
    ///
    /// let config = Config::builder()
    ///     .memory(MemoryBackend::new())
    ///     .balance_leadership(true)
    ///     .build()?;
    /// assert!(config.balances_leadership());
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    pub fn balance_leadership(mut self, on: bool) -> Self {
        self.balance = on;
        self
    }

    /// Send each follower acquire attempt alone and unaligned: only for
    /// measuring what the batching saves (the load bench's baseline). Not
    /// part of the stable API.
    #[doc(hidden)]
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn unbatched_follower_attempts(mut self) -> Self {
        self.unbatched_attempts = true;
        self
    }

    /// This instance's id in the lease (default `hostname:pid:random`).
    /// Must be unique in the fleet: two instances with one id share a lease.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Prefix of every key (default `"leader"`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Called (on a thread of its own, in order, never blocking an election) when this
    /// instance becomes leader of a group.
    pub fn on_elected(mut self, f: impl Fn(&str, &Lease) + Send + Sync + 'static) -> Self {
        self.on_elected = Some(Arc::new(f));
        self
    }

    /// Called (on the same thread as [`on_elected`](Self::on_elected)) when
    /// this instance stops leading a group, with the reason.
    pub fn on_lost(mut self, f: impl Fn(&str, LostReason) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(f));
        self
    }

    /// Validate and build.
    ///
    /// Timings not set explicitly are derived from the `ttl` (15 s unless
    /// set), so that setting the ttl alone always builds:
    ///
    /// | timing | default | with the default ttl |
    /// | --- | --- | --- |
    /// | `renew_interval` | `ttl / 3` | 5 s |
    /// | `retry_interval` | the smaller of 2 s and `ttl / 3` | 2 s |
    /// | `drift_margin` | 1% of `ttl` + 2 ms | 152 ms |
    /// | `call_timeout` | the smallest of 2 s, `(ttl - renew_interval) / 2` and `ttl - drift_margin - renew_interval` less 1 ms | 2 s |
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field (the builder method) and the rule
    /// it broke, when:
    ///
    /// - no backend is set;
    /// - a Redis URL does not parse, uses `rediss://` without the `tls`
    ///   feature, or (in a cluster, or among sentinels) differs from the
    ///   others in scheme or credentials; a cluster URL names a database
    ///   other than 0;
    /// - the Sentinel master name is empty or has spaces;
    ///   `sentinel_master_auth` is set without `redis_sentinel`;
    /// - TLS certificates are set but do not parse, or the URLs are not
    ///   `rediss://`;
    /// - Redis-only options are set on the memory backend;
    /// - a duration is zero, or `ttl` is under 10 ms;
    /// - `renew_interval >= ttl` (explicit values are checked, never
    ///   adjusted);
    /// - `drift_margin >= ttl - renew_interval`;
    /// - `renew_interval + call_timeout` does not fit inside
    ///   `ttl - drift_margin` (a slow renew must still land before the lease
    ///   expires);
    /// - the instance id is empty, longer than 256 bytes or has control
    ///   characters;
    /// - the key prefix is not `[A-Za-z0-9._:-]{1,128}`.
    pub fn build(self) -> Result<Config> {
        let backend = self.backend.ok_or_else(|| {
            Error::config(
            "redis_url",
            "is required: set .redis_url(\"redis://host:6379\") or .memory(MemoryBackend::new())",
        )
        })?;
        let mut backend = backend;
        match &mut backend {
            BackendConfig::Redis(redis) => {
                redis.options = self.redis;
                redis.validate()?;
            }
            BackendConfig::Memory(_) => {
                if let Some(option) = self.redis.first_set() {
                    return Err(Error::config(option, "needs a Redis backend, not memory"));
                }
            }
        }
        let ttl = self.ttl.unwrap_or(DEFAULT_TTL);
        // Timings not given follow the ttl (the constants are their values
        // at the default ttl).
        let renew_interval = self.renew_interval.unwrap_or(ttl / 3);
        let retry_interval = self
            .retry_interval
            .unwrap_or(DEFAULT_RETRY_INTERVAL.min(ttl / 3));
        non_zero("ttl", ttl)?;
        non_zero("renew_interval", renew_interval)?;
        non_zero("retry_interval", retry_interval)?;
        if ttl < Duration::from_millis(10) {
            return Err(Error::config("ttl", "must be at least 10ms"));
        }
        // The other timings are bounded by the ttl below; these two by this,
        // so that no deadline computed from them can overflow the clock.
        at_most_a_day("ttl", ttl)?;
        at_most_a_day("retry_interval", retry_interval)?;
        if renew_interval >= ttl {
            return Err(Error::config(
                "renew_interval",
                format!("must be shorter than ttl ({renew_interval:?} >= {ttl:?})"),
            ));
        }
        let drift_margin = self
            .drift_margin
            .unwrap_or(ttl / 100 + Duration::from_millis(2));
        if drift_margin >= ttl - renew_interval {
            return Err(Error::config(
                "drift_margin",
                format!(
                    "must be smaller than ttl - renew_interval ({drift_margin:?} >= {:?})",
                    ttl - renew_interval
                ),
            ));
        }
        let room = ttl - drift_margin - renew_interval;
        let call_timeout = match self.call_timeout {
            Some(t) => t,
            // Strictly inside the room (the check below is strict): a
            // default on its edge failed that check, naming a field the
            // user never set.
            None => match room.checked_sub(Duration::from_millis(1)) {
                Some(inside) if !inside.is_zero() => Duration::from_secs(2)
                    .min((ttl - renew_interval) / 2)
                    .min(inside),
                _ => {
                    return Err(Error::config(
                        "renew_interval",
                        format!(
                            "leaves no time for a backend call before the lease ends \
                             (ttl - drift_margin - renew_interval = {room:?})"
                        ),
                    ))
                }
            },
        };
        non_zero("call_timeout", call_timeout)?;
        // Saturating: an explicit `Duration::MAX` is an error, not a panic.
        if renew_interval.saturating_add(call_timeout) >= ttl - drift_margin {
            return Err(Error::config(
                "call_timeout",
                format!(
                    "plus renew_interval must fit inside ttl - drift_margin \
                     ({renew_interval:?} + {call_timeout:?} >= {:?})",
                    ttl - drift_margin
                ),
            ));
        }
        let instance_id = self.instance_id.unwrap_or_else(default_instance_id);
        if instance_id.is_empty() || instance_id.len() > 256 {
            return Err(Error::config("instance_id", "must be 1 to 256 bytes long"));
        }
        if instance_id.chars().any(char::is_control) {
            return Err(Error::config(
                "instance_id",
                "must not contain control characters",
            ));
        }
        let key_prefix = self
            .key_prefix
            .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
        validate_prefix(&key_prefix)?;
        Ok(Config {
            backend,
            ttl,
            renew_interval,
            retry_interval,
            call_timeout,
            drift_margin,
            unbatched_attempts: self.unbatched_attempts,
            balance: self.balance,
            instance_id,
            key_prefix,
            on_elected: self.on_elected,
            on_lost: self.on_lost,
        })
    }
}

/// The longest `ttl` and `retry_interval`: far beyond any use (a crashed
/// leader's groups wait out the ttl), and small enough that every instant
/// computed from a timing stays within the clock's range.
const MAX_TIMING: Duration = Duration::from_secs(24 * 3600);

fn at_most_a_day(field: &'static str, d: Duration) -> Result<()> {
    if d > MAX_TIMING {
        Err(Error::config(
            field,
            format!("must be at most one day ({d:?} > 24h)"),
        ))
    } else {
        Ok(())
    }
}

fn non_zero(field: &'static str, d: Duration) -> Result<()> {
    if d.is_zero() {
        Err(Error::config(field, "must be greater than zero"))
    } else {
        Ok(())
    }
}

/// `hostname:pid:random`, unique per process start.
fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".to_owned());
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        crate::util::jitter::random_u32()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::redact::redact_url;

    fn mem() -> ConfigBuilder {
        Config::builder().memory(MemoryBackend::new())
    }

    fn field_of(b: ConfigBuilder) -> &'static str {
        match b.build() {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = mem().build().unwrap();
        assert_eq!(c.ttl(), Duration::from_secs(15));
        assert_eq!(c.renew_interval(), Duration::from_secs(5));
        assert_eq!(c.retry_interval(), Duration::from_secs(2));
        assert_eq!(c.call_timeout(), Duration::from_secs(2));
        assert_eq!(c.drift_margin(), Duration::from_millis(152));
        assert_eq!(c.key_prefix(), "leader");
        assert_eq!(c.instance_id().matches(':').count(), 2);
    }

    #[test]
    fn each_invalid_field_is_named() {
        let s = Duration::from_secs;
        assert_eq!(field_of(Config::builder()), "redis_url");
        assert_eq!(
            field_of(Config::builder().redis_url("http://x")),
            "redis_url"
        );
        assert_eq!(
            field_of(Config::builder().redis_url("not a url")),
            "redis_url"
        );
        assert_eq!(
            field_of(Config::builder().redis_cluster_urls(["redis://h:1/3"])),
            "redis_cluster_urls"
        );
        assert_eq!(field_of(mem().ttl(Duration::ZERO)), "ttl");
        assert_eq!(
            field_of(mem().renew_interval(Duration::ZERO)),
            "renew_interval"
        );
        assert_eq!(
            field_of(mem().retry_interval(Duration::ZERO)),
            "retry_interval"
        );
        assert_eq!(
            field_of(mem().ttl(s(5)).renew_interval(s(5))),
            "renew_interval"
        );
        assert_eq!(
            field_of(mem().ttl(s(5)).renew_interval(s(6))),
            "renew_interval"
        );
        assert_eq!(
            field_of(mem().ttl(s(5)).renew_interval(s(3)).call_timeout(s(2))),
            "call_timeout"
        );
        assert_eq!(field_of(mem().call_timeout(Duration::ZERO)), "call_timeout");
        // The default call timeout never fails the rule it derives from
        // (it sat on its edge: a `call_timeout` error the user never set);
        // with no room for a call at all, the renew interval is named.
        let ms = Duration::from_millis;
        let tight = mem().ttl(s(15)).renew_interval(ms(14_800)).build().unwrap();
        assert_eq!(tight.call_timeout(), ms(47));
        assert_eq!(
            field_of(mem().ttl(s(15)).renew_interval(ms(14_847))),
            "renew_interval"
        );
        assert_eq!(field_of(mem().drift_margin(s(10))), "drift_margin");
        assert_eq!(field_of(mem().instance_id("")), "instance_id");
        assert_eq!(field_of(mem().instance_id("a\nb")), "instance_id");
        assert_eq!(field_of(mem().key_prefix("")), "key_prefix");
        assert_eq!(field_of(mem().key_prefix("a{b}")), "key_prefix");
    }

    /// `Duration::MAX` (as "forever") and other huge timings are config
    /// errors: before, `call_timeout(MAX)` panicked in `build` (an overflow
    /// adding durations), and a huge ttl or retry interval in the election.
    #[test]
    fn huge_timings_are_errors_not_panics() {
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(field_of(mem().call_timeout(Duration::MAX)), "call_timeout");
        assert_eq!(field_of(mem().ttl(Duration::MAX)), "ttl");
        assert_eq!(field_of(mem().ttl(day + Duration::from_nanos(1))), "ttl");
        assert_eq!(
            field_of(mem().retry_interval(Duration::MAX)),
            "retry_interval"
        );
        assert_eq!(
            field_of(mem().renew_interval(Duration::MAX)),
            "renew_interval"
        );
        assert_eq!(field_of(mem().drift_margin(Duration::MAX)), "drift_margin");
        let err = mem().ttl(Duration::MAX).build().unwrap_err().to_string();
        assert!(err.contains("at most one day"), "{err}");
        // A day is allowed, with the timings that follow it.
        let c = mem().ttl(day).retry_interval(day).build().unwrap();
        assert_eq!((c.ttl(), c.retry_interval()), (day, day));
    }

    #[test]
    fn messages_name_the_rule() {
        let err = mem()
            .ttl(Duration::from_secs(1))
            .renew_interval(Duration::from_secs(2))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("`renew_interval`"), "{err}");
        assert!(err.contains("shorter than ttl"), "{err}");
    }

    #[test]
    fn timings_follow_a_ttl_set_alone() {
        let ms = Duration::from_millis;
        let c = mem().ttl(Duration::from_secs(2)).build().unwrap();
        let third = Duration::from_secs(2) / 3;
        assert_eq!(c.renew_interval(), third);
        assert_eq!(c.retry_interval(), third);
        assert_eq!(c.drift_margin(), ms(22));
        assert_eq!(c.call_timeout(), (Duration::from_secs(2) - third) / 2);
        let c = mem().ttl(Duration::from_secs(60)).build().unwrap();
        assert_eq!(c.renew_interval(), Duration::from_secs(20));
        assert_eq!(c.retry_interval(), DEFAULT_RETRY_INTERVAL);
        assert_eq!(c.call_timeout(), Duration::from_secs(2));
        assert_eq!(c.drift_margin(), ms(602));
        // The default ttl gives the documented constants.
        let c = mem().ttl(DEFAULT_TTL).build().unwrap();
        assert_eq!(c.renew_interval(), DEFAULT_RENEW_INTERVAL);
        assert_eq!(c.retry_interval(), DEFAULT_RETRY_INTERVAL);
    }

    #[test]
    fn any_ttl_alone_builds() {
        let mut ttl = Duration::from_millis(10);
        while ttl < Duration::from_secs(24 * 3600) {
            let c = mem()
                .ttl(ttl)
                .build()
                .unwrap_or_else(|e| panic!("ttl {ttl:?}: {e}"));
            assert!(c.renew_interval() < ttl);
            assert!(c.renew_interval() + c.call_timeout() < ttl - c.drift_margin());
            ttl = ttl * 3 / 2 + Duration::from_micros(7);
        }
    }

    #[test]
    fn explicit_timings_are_kept_and_still_checked() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let c = mem()
            .ttl(s(2))
            .renew_interval(ms(500))
            .retry_interval(s(5))
            .build()
            .unwrap();
        assert_eq!(c.renew_interval(), ms(500));
        assert_eq!(c.retry_interval(), s(5));
        assert_eq!(c.call_timeout(), ms(750)); // (ttl - renew) / 2
        assert_eq!(
            field_of(mem().ttl(s(2)).renew_interval(s(2))),
            "renew_interval"
        );
        assert_eq!(
            field_of(mem().ttl(s(2)).renew_interval(s(3))),
            "renew_interval"
        );
        assert_eq!(field_of(mem().ttl(s(2)).call_timeout(s(2))), "call_timeout");
        assert_eq!(field_of(mem().ttl(s(2)).drift_margin(s(2))), "drift_margin");
        // An explicit renew interval above the default ttl still needs a ttl.
        assert_eq!(field_of(mem().renew_interval(s(20))), "renew_interval");
    }

    #[test]
    fn small_ttl_gets_a_fitting_default_timeout() {
        let c = mem()
            .ttl(Duration::from_secs(1))
            .renew_interval(Duration::from_millis(300))
            .build()
            .unwrap();
        assert_eq!(c.call_timeout(), Duration::from_millis(350));
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact_url("redis://u:s3cret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:s3cret@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://tok3n@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        let err = Config::builder()
            .redis_url("redis://u:s3cret@h:notaport")
            .build()
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret"), "{err}");
        let dbg = format!(
            "{:?}",
            Config::builder()
                .redis_url("redis://u:s3cret@h:1")
                .build()
                .unwrap()
        );
        assert!(!dbg.contains("s3cret"), "{dbg}");
    }
}
