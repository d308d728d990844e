//! The one error type of the crate.

use std::time::Duration;

/// Everything that can go wrong in `leader-runtime`.
///
/// Messages never contain a password or token from a Redis URL.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_runtime::{Config, Error, MemoryBackend};
///
/// let err = Config::builder()
///     .memory(MemoryBackend::new())
///     .ttl(Duration::from_secs(5))
///     .renew_interval(Duration::from_secs(6))
///     .build()
///     .unwrap_err();
/// match &err {
///     Error::Config { field, .. } => assert_eq!(*field, "renew_interval"),
///     other => panic!("{other}"),
/// }
/// assert_eq!(
///     err.to_string(),
///     "invalid config: `renew_interval` must be shorter than ttl (6s >= 5s)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A [`Config`](crate::Config) field broke a rule; `field` names the builder method.
    #[error("invalid config: `{field}` {rule}")]
    Config {
        /// The builder method whose value is wrong, e.g. `"renew_interval"`
        /// (or the environment variable, e.g. `"LEADER_REDIS_SENTINEL_URLS"`,
        /// for a configuration read from the environment).
        field: &'static str,
        /// The rule it broke, in words.
        rule: String,
    },
    /// A group name is not a short printable identifier.
    #[error("invalid group name {group:?}: {rule}")]
    InvalidGroup {
        /// The rejected name (as given).
        group: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// [`init`](crate::init) was called when the global runtime already exists.
    #[error("the global leader runtime is already initialised")]
    AlreadyInitialized,
    /// The global runtime was used before [`init`](crate::init) and no
    /// Redis deployment is described in the environment (`LEADER_REDIS_URL`,
    /// `LEADER_REDIS_CLUSTER_URLS`, `LEADER_REDIS_SENTINEL_MASTER` +
    /// `LEADER_REDIS_SENTINEL_URLS`, or `REDIS_URL`).
    #[error(
        "the global leader runtime is not configured: call leader_runtime::init(..) \
         or set LEADER_REDIS_URL (or LEADER_REDIS_CLUSTER_URLS, or LEADER_REDIS_SENTINEL_MASTER \
         and LEADER_REDIS_SENTINEL_URLS, or REDIS_URL)"
    )]
    NotConfigured,
    /// A runtime was built outside a tokio runtime.
    #[error("leader runtime needs a tokio runtime: create it inside #[tokio::main] or a tokio runtime context")]
    NoTokioRuntime,
    /// The runtime is shut down; nothing more is elected.
    #[error("the leader runtime is shut down")]
    ShutDown,
    /// A backend call did not answer in time.
    #[error("backend call for group `{group}` timed out after {after:?}")]
    Timeout {
        /// The group the call was for.
        group: String,
        /// How long we waited.
        after: Duration,
    },
    /// A fenced write named a key outside its group's hash slot (refused
    /// before anything was sent); name keys with
    /// [`Fence::key`](crate::Fence::key).
    #[error(
        "fenced write for group `{group}`: key {key:?} is not in the group's hash slot \
         (name it with Fence::key, e.g. \"<prefix>:{{{group}}}:<name>\")"
    )]
    KeySlot {
        /// The group of the lease.
        group: String,
        /// The rejected key.
        key: String,
    },
    /// A fenced write named a key the runtime keeps for itself (refused
    /// before anything was sent): `lease`, `token`, `paused`, `result`,
    /// `cron:*` or `cron-history:*` under a group; see
    /// [`Fence::key`](crate::Fence::key).
    #[error(
        "fenced write for group `{group}`: key {key:?} is one the runtime keeps for itself \
         (lease, token, paused, result, cron:*, cron-history:*): pick another name"
    )]
    ReservedKey {
        /// The group of the lease.
        group: String,
        /// The rejected key.
        key: String,
    },
    /// The backend (Redis) failed the call.
    #[error("backend error for group `{group}`: {message}")]
    Backend {
        /// The group the call was for.
        group: String,
        /// What the backend said (never includes credentials).
        message: String,
        /// The backend's own error (a `redis::RedisError`), when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The connection to the backend failed outside any one group's call:
    /// setting it up, or the release-notice subscription.
    #[error("backend connection error: {message}")]
    Connection {
        /// What went wrong (never includes credentials).
        message: String,
        /// The backend's own error (a `redis::RedisError`), when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A [`once`](crate::once) call waited `after` (its
    /// [`timeout`](crate::Once::timeout)) and the name has no result yet:
    /// another instance may still be running it.
    #[error("once `{name}`: no result after {after:?} (another instance may still be running it)")]
    OnceTimeout {
        /// The run-once name.
        name: String,
        /// How long the call waited.
        after: Duration,
    },
    /// A [`once`](crate::once) name used up its attempts
    /// ([`Once::attempts`](crate::Once::attempts)) without a success; nothing
    /// runs it any more until [`Runtime::reset_once`](crate::Runtime::reset_once)
    /// or a call with a higher limit.
    #[error("once `{name}` failed {attempts} times (the attempt limit); last error: {last_error}")]
    OnceFailed {
        /// The run-once name.
        name: String,
        /// The attempts started, fleet-wide (crashed ones included).
        attempts: u32,
        /// The last attempt's error text, as recorded (URL credentials
        /// redacted, at most 1 KiB).
        last_error: String,
    },
    /// This [`once`](crate::once) call ran the body and it returned an
    /// error: nothing was recorded, the lease was released, and the next
    /// caller tries again (within the attempt limit). `source` is the
    /// body's own error.
    #[error("once `{name}`: attempt {attempt} failed: {message}")]
    OnceBody {
        /// The run-once name.
        name: String,
        /// Which attempt this was, fleet-wide (1 for the first).
        attempt: u32,
        /// The body's error as text, URL credentials redacted (as recorded
        /// for the other callers, at most 1 KiB).
        message: String,
        /// The body's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// This [`once`](crate::once) call ran the body to success, but could
    /// not record it while it still held the name's lease (the lease was
    /// lost, or the backend failed until the view ended): another instance
    /// will run the body again, under a greater token.
    #[error(
        "once `{name}`: the body succeeded under token {token}, but its result could not be \
         recorded before the lease was lost; another instance will run it again"
    )]
    OnceUnrecorded {
        /// The run-once name.
        name: String,
        /// The fencing token the body ran under.
        token: u64,
    },
    /// The backend answered with something the protocol does not allow.
    #[error("unexpected reply from backend for group `{group}`: {message}")]
    Protocol {
        /// The group the call was for.
        group: String,
        /// What was wrong with the reply.
        message: String,
    },
}

impl Error {
    /// An [`Error::Backend`] for `group` with no underlying error.
    pub(crate) fn backend(group: &str, message: impl Into<String>) -> Self {
        Error::Backend {
            group: group.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    /// A [`Error::Config`]: `field` (the builder method) broke `rule`.
    pub(crate) fn config(field: &'static str, rule: impl Into<String>) -> Self {
        Error::Config {
            field,
            rule: rule.into(),
        }
    }
}

/// `Result` with [`Error`] as the default error type.
///
/// # Examples
///
/// ```
/// fn configure() -> leader_runtime::Result<leader_runtime::Config> {
///     leader_runtime::Config::builder()
///         .memory(leader_runtime::MemoryBackend::new())
///         .build()
/// }
/// assert!(configure().is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
