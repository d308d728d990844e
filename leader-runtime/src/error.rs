//! The one error type of the crate.

use std::sync::Arc;
use std::time::Duration;

/// Everything that can go wrong in `leader-runtime`.
///
/// Messages never contain a password or token from a Redis URL.
///
/// [`is_config`](Self::is_config) tells the errors that no retry fixes (a
/// rule of the builder, a group name, Redis refusing the credentials, an ACL
/// rule or the database) from those that may pass (the network, a timeout,
/// a server restarting). The error is `Clone`: the backend's own error is
/// shared.
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
#[derive(Debug, Clone, thiserror::Error)]
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
    /// `heir`, `cron:*` or `cron-history:*` under a group, or the balance's
    /// membership (`{prefix}:balance`, `{prefix}:members`); see
    /// [`Fence::key`](crate::Fence::key).
    #[error(
        "fenced write for group `{group}`: key {key:?} is one the runtime keeps for itself \
         (lease, token, paused, result, heir, cron:*, cron-history:*, the prefix's balance membership): pick another name"
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
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// The connection to the backend failed outside any one group's call:
    /// setting it up, or the release-notice subscription.
    #[error("backend connection error: {message}")]
    Connection {
        /// What went wrong (never includes credentials).
        message: String,
        /// The backend's own error (a `redis::RedisError`), when there is one.
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// Redis refused this client for a reason no retry fixes: the
    /// configuration (this client's or the server's) must change. Wrong
    /// credentials (`WRONGPASS`, a failed `AUTH`), a password missing
    /// (`NOAUTH`), an ACL rule (`NOPERM`), a database the server does not
    /// have, a Sentinel master name the sentinels do not know. `hint` says
    /// what to check.
    ///
    /// The elections keep retrying (the server side may be fixed while this
    /// instance runs), logging it; [`Runtime::ready`](crate::Runtime::ready)
    /// returns it at once.
    #[error("redis refused {}: {message} (hint: {hint})", refused_what(.group.as_deref()))]
    Misconfigured {
        /// The group whose call was refused; `None` for the connection
        /// itself (before any group's call, or the release-notice connection).
        group: Option<String>,
        /// What Redis said (never includes credentials).
        message: String,
        /// What to check, in words.
        hint: &'static str,
        /// The backend's own error (a `redis::RedisError`), when there is one.
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// [`Runtime::ready`](crate::Runtime::ready) ran out of time: the
    /// backend did not answer, or a group's first election round did not
    /// complete without an error. `source` is the last error seen.
    #[error("not ready within {after:?}: {source}")]
    NotReady {
        /// The timeout given to `ready`.
        after: Duration,
        /// The last error seen (an [`Error::Timeout`] when a call or round
        /// was still pending).
        #[source]
        source: Box<Error>,
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
        /// The body's error ([`BodyError::get_ref`]; shared: [`Error`] is
        /// `Clone`); it shows redacted.
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

/// How much of an unexpected reply an [`Error::Protocol`] shows.
const REPLY_SHOWN: usize = 300;

impl Error {
    /// Whether this error is a configuration problem that no retry fixes:
    /// [`Config`](Self::Config), [`InvalidGroup`](Self::InvalidGroup),
    /// [`NotConfigured`](Self::NotConfigured) and
    /// [`Misconfigured`](Self::Misconfigured) (Redis refused the credentials,
    /// an ACL rule, the database or the Sentinel master name). A start-up
    /// that gets one should stop and say so rather than retry.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::{Config, MemoryBackend};
    ///
    /// let err = Config::builder()
    ///     .memory(MemoryBackend::new())
    ///     .ttl(Duration::ZERO)
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.is_config());
    /// ```
    pub fn is_config(&self) -> bool {
        match self {
            Error::Config { .. }
            | Error::InvalidGroup { .. }
            | Error::NotConfigured
            | Error::Misconfigured { .. } => true,
            Error::NotReady { source, .. } => source.is_config(),
            _ => false,
        }
    }

    /// A Redis error of `group`'s call (`None`: the connection's), shown as
    /// `message`: [`Error::Misconfigured`] when no retry fixes it, else
    /// [`Error::Backend`] (or [`Error::Connection`] without a group).
    pub(crate) fn redis(group: Option<&str>, message: String, e: redis::RedisError) -> Self {
        let hint = refusal_hint(&e);
        let message = match transport_words(&e) {
            Some(words) if hint.is_none() => format!("{message} ({words})"),
            _ => message,
        };
        let source: Option<Arc<dyn std::error::Error + Send + Sync>> = Some(Arc::new(e));
        match (hint, group) {
            (Some(hint), group) => Error::Misconfigured {
                group: group.map(str::to_owned),
                message,
                hint,
                source,
            },
            (None, Some(group)) => Error::Backend {
                group: group.to_owned(),
                message,
                source,
            },
            (None, None) => Error::Connection { message, source },
        }
    }

    /// An [`Error::Backend`] for `group` with no underlying error.
    pub(crate) fn backend(group: &str, message: impl Into<String>) -> Self {
        Error::Backend {
            group: group.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Protocol`]: `what` (the call) returned `reply`, shown
    /// with at most [`REPLY_SHOWN`] bytes of it — a misbehaving server's reply
    /// (a huge hash, garbage) must not make every round's error and log line
    /// as large.
    pub(crate) fn unexpected_reply(group: &str, what: &str, reply: &impl std::fmt::Debug) -> Self {
        let mut shown = format!("{reply:?}");
        if shown.len() > REPLY_SHOWN {
            let total = shown.len();
            let mut end = REPLY_SHOWN;
            while !shown.is_char_boundary(end) {
                end -= 1;
            }
            shown.truncate(end);
            shown.push_str(&format!("… ({total} bytes in all)"));
        }
        Error::Protocol {
            group: group.to_owned(),
            message: format!("{what} returned {shown}"),
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
#[derive(Clone)]
pub struct BodyError(Arc<dyn std::error::Error + Send + Sync>);

impl BodyError {
    pub(crate) fn new(error: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Self(error.into())
    }

    /// The body's error, as it returned it (its text unredacted).
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The body's error, as it returned it (its text unredacted; shared
    /// with the clones of this error).
    pub fn into_inner(self) -> Arc<dyn std::error::Error + Send + Sync> {
        self.0
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::util::redact::redact_text(&self.0.to_string()))
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

/// What [`Error::Misconfigured`] says was refused.
fn refused_what(group: Option<&str>) -> String {
    match group {
        Some(group) => format!("the call for group `{group}`"),
        None => "the connection".to_owned(),
    }
}

/// What a transport failure means, in a user's words (the OS's message
/// alone, "Connection refused (os error 111)", says nothing of Redis).
fn transport_words(e: &redis::RedisError) -> Option<&'static str> {
    if e.is_connection_refusal() {
        Some("nothing accepts connections there: is redis-server running, and are the URL's host and port right?")
    } else if e.is_timeout() {
        Some("no answer in time: is the host right and reachable from here, and is Redis not overloaded?")
    } else if e.is_connection_dropped() {
        Some("the connection was closed: Redis restarted or refused this client, or something between cut it")
    } else {
        None
    }
}

/// What to check when Redis refused us for a reason no retry fixes; `None`
/// for every other error.
fn refusal_hint(e: &redis::RedisError) -> Option<&'static str> {
    let code = e.code().unwrap_or_default();
    // Errors raised inside a script arrive wrapped ("ERR ... NOPERM ..."):
    // the text is the only place their cause shows.
    let text = e.to_string();
    if e.kind() == redis::ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
        Some(
            "check the user and password: in the Redis URL (redis://user:password@host), or \
             sentinel_master_auth for a Sentinel-managed master; a server without a password \
             refuses one too",
        )
    } else if code == "NOAUTH" {
        Some(
            "the server requires a password: put it in the URL (redis://:password@host), or \
             in sentinel_master_auth for a Sentinel-managed master",
        )
    } else if code == "NOPERM" || text.contains("NOPERM") {
        Some(
            "the ACL user lacks a command, key or channel it needs: DEPLOYING.md (and the \
             docs of ConfigBuilder::redis_url) list the rules",
        )
    } else if text.contains("DB index is out of range") || text.contains("switch database") {
        Some(
            "the database in the URL (/N) does not exist on the server (see its `databases` \
             setting; Redis Cluster has only database 0)",
        )
    } else if e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        Some("the sentinels monitor no master by the name given to redis_sentinel")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a server replying `-<text>` gives.
    fn server_error(text: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    /// A misbehaving server's huge reply is shown in part: every round
    /// logs the error, and a members hash of megabytes would go in whole.
    #[test]
    fn an_unexpected_reply_is_shown_cut_short() {
        let huge = redis::Value::BulkString("é".repeat(100_000).into_bytes());
        let Error::Protocol { message, .. } = Error::unexpected_reply("g", "renew", &huge) else {
            panic!("not a protocol error");
        };
        assert!(message.starts_with("renew returned "), "{message}");
        assert!(message.len() < REPLY_SHOWN + 100, "{} bytes", message.len());
        assert!(message.ends_with("bytes in all)"), "{message}");
        let small = redis::Value::Int(3);
        let Error::Protocol { message, .. } = Error::unexpected_reply("g", "renew", &small) else {
            panic!("not a protocol error");
        };
        assert_eq!(message, "renew returned int(3)");
    }

    #[test]
    fn refusals_are_configuration_errors_with_a_hint() {
        for (said, hint) in [
            (
                "WRONGPASS invalid username-password pair or user is disabled.",
                "password",
            ),
            ("NOAUTH Authentication required.", "requires a password"),
            (
                "NOPERM User app has no permissions to run the 'evalsha' command",
                "ACL",
            ),
            ("ERR DB index is out of range", "database"),
        ] {
            let e = Error::redis(Some("jobs"), said.to_owned(), server_error(said));
            assert!(e.is_config(), "{said}: {e:?}");
            assert!(matches!(&e, Error::Misconfigured { group: Some(g), .. } if g == "jobs"));
            let text = e.to_string();
            assert!(text.contains(said) && text.contains(hint), "{text}");
            assert!(text.contains("group `jobs`"), "{text}");
            assert!(std::error::Error::source(&e).is_some());
        }
        let auth = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let e = Error::redis(None, auth.to_string(), auth);
        assert!(e.is_config());
        assert!(
            e.to_string().starts_with("redis refused the connection: "),
            "{e}"
        );
    }

    #[test]
    fn other_redis_errors_may_pass() {
        let io =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let e = Error::redis(Some("jobs"), io.to_string(), io.clone());
        assert!(
            matches!(e, Error::Backend { .. }) && !e.is_config(),
            "{e:?}"
        );
        // Said in a user's words, not the OS's alone.
        assert!(e.to_string().contains("is redis-server running"), "{e}");
        let e = Error::redis(None, io.to_string(), io);
        assert!(
            matches!(e, Error::Connection { .. }) && !e.is_config(),
            "{e:?}"
        );
        let timeout = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let e = Error::redis(None, timeout.to_string(), timeout);
        assert!(e.to_string().contains("no answer in time"), "{e}");
        let loading = server_error("LOADING Redis is loading the dataset in memory");
        let e = Error::redis(Some("jobs"), loading.to_string(), loading);
        assert!(!e.is_config(), "{e:?}");
    }
}
