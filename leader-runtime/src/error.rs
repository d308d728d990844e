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
    /// error: no success was recorded (the failure and its text were, as
    /// far as the backend answered), the lease was released, and the next
    /// caller tries again (within the attempt limit). `source` holds the
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
        /// The body's error ([`BodyError::get_ref`]); it shows redacted.
        #[source]
        source: BodyError,
    },
    /// This [`once`](crate::once) call ran the body to success, but could
    /// not learn that the success was recorded while it still held the
    /// name's lease: the lease was lost, or the backend failed (or did not
    /// answer) until the view ended. Most likely nothing was recorded and
    /// another instance runs the body again, under a greater token; but a
    /// record whose reply was lost may also stand — see
    /// [`Runtime::once_status`](crate::Runtime::once_status).
    #[error(
        "once `{name}`: the body succeeded under token {token}, but the lease was lost before \
         its success was known to be recorded; unless it was, another instance runs it again"
    )]
    OnceUnrecorded {
        /// The run-once name.
        name: String,
        /// The fencing token the body ran under.
        token: u64,
    },
    /// [`Runtime::reset_once`](crate::Runtime::reset_once) was refused:
    /// an instance holds the name's lease, so an attempt may be running
    /// (nothing was reset: a running attempt stays counted). Try again when
    /// it has ended.
    #[error("once `{name}`: not reset, its lease is held (an attempt may be running); try again when it has ended")]
    OnceBusy {
        /// The run-once name.
        name: String,
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

/// The error a [`once`](crate::once) body returned, as
/// [`Error::OnceBody`] holds it: shown (`Display` and `Debug`) with URL
/// credentials redacted, like every error of this crate. The body's own
/// error, as it returned it, is [`get_ref`](Self::get_ref) or
/// [`into_inner`](Self::into_inner).
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, Error, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
/// let failed = runtime
///     .once("seed", || async {
///         Err::<&str, _>(std::io::Error::other("no route to postgres://app:s3cret@db/app"))
///     })
///     .await;
/// let Err(Error::OnceBody { source, .. }) = failed else { panic!("{failed:?}") };
/// assert_eq!(source.to_string(), "no route to postgres://app:***@db/app");
/// assert!(!format!("{source:?}").contains("s3cret"));
/// assert!(source.get_ref().downcast_ref::<std::io::Error>().is_some());
/// # Ok(())
/// # }
/// ```
pub struct BodyError(Box<dyn std::error::Error + Send + Sync>);

impl BodyError {
    pub(crate) fn new(error: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Self(error)
    }

    /// The body's error, as it returned it (its text unredacted).
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The body's error, as it returned it (its text unredacted).
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync> {
        self.0
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::redact::redact_text(&self.0.to_string()))
    }
}

impl std::fmt::Debug for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BodyError").field(&self.to_string()).finish()
    }
}

/// Its `source` is none: the body's error's own chain is not redacted (reach
/// it through [`get_ref`](Self::get_ref)).
impl std::error::Error for BodyError {}

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
