//! Operating a fleet from outside it: who leads each group, pause and resume
//! a group fleet-wide, ask a leader to hand over, read cron histories, watch
//! transitions. What the `leader` command-line tool is built on; this module
//! owns the key layout, so the tool never names a key itself.
//!
//! | request | what the fleet does |
//! | --- | --- |
//! | [`Admin::pause`] | writes the group's pause key (no expiry: it survives restarts of the instances and of a persistent Redis) and publishes `pause <group>` on `{prefix}:control`. While the key exists no acquire succeeds, and no renew extends the lease: the leader renews at once on the request, or at its next renewal if it missed it (pub/sub is lossy) — within one `renew_interval` either way — then drains its gated runs and releases |
//! | [`Admin::resume`] | deletes the pause key and publishes `resume <group>`: followers try to acquire at once (or within `retry_interval` without the notice) |
//! | [`Admin::step_down`] | publishes `step-down <group> <token> <holder>`: that holder, if it still holds the leadership of that token, drains, releases and stays out of the race for one `ttl`, as after [`step_down`](crate::step_down). A request the holder misses (it was not connected), or that comes after that leadership ended, does nothing |
//!
//! Instances of a version without pause support ignore the pause key and
//! the requests: upgrade the whole fleet before relying on them.
//!
//! # Examples
//!
//! ```
//! use leader_runtime::admin::Admin;
//! use leader_runtime::{Config, MemoryBackend, Runtime};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), leader_runtime::Error> {
//! let backend = MemoryBackend::new();
//! let config = Config::builder().memory(backend.clone()).instance_id("a").build()?;
//! let runtime = Runtime::new(config.clone())?;
//! runtime.run_if_leader("jobs", || async {}).await;
//!
//! let admin = Admin::new(&config)?;
//! let jobs = admin.group("jobs").await?;
//! assert_eq!(jobs.holder.as_deref(), Some("a"));
//! assert!(jobs.paused.is_none());
//!
//! admin.pause("jobs", "ops", Some("incident 42")).await?;
//! assert!(admin.group("jobs").await?.paused.is_some());
//! # runtime.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::backend::admin::{PauseMark, PauseRequest};
use crate::backend::{Backend, ChannelNotice, Channels, RedisBackend};
use crate::config::BackendConfig;
use crate::names::{control_channel, release_channel, validate_group, ControlRequest, GroupKeys};
use crate::{Config, Result};

/// A connection to the backend of a fleet, for operators' requests.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> leader_runtime::Result<()> {
/// use leader_runtime::{admin::Admin, Config};
///
/// let admin = Admin::new(&Config::builder().redis_url("redis://127.0.0.1/").build()?)?;
/// for group in admin.groups().await? {
///     println!("{}: {:?}", group.group, group.holder);
/// }
/// # Ok(()) }
/// ```
pub struct Admin {
    backend: Backend,
    /// The backend as messages may name it (passwords redacted).
    target: String,
    prefix: String,
    call_timeout: Duration,
    retry_interval: Duration,
    /// The runtime `new` was called in: [`Admin::notices`] spawns its
    /// subscription there, wherever it is called from.
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("target", &self.target)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// One group as the backend shows it now, fleet-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group's name.
    pub group: String,
    /// The instance holding the lease; `None` when nobody does.
    pub holder: Option<String>,
    /// How long the lease lives without a renewal (`None`: nobody holds it,
    /// or it has no expiry, which the runtime never writes).
    pub expires_in: Option<Duration>,
    /// The last fencing token issued: the holder's, while one holds the lease.
    pub token: Option<u64>,
    /// Set while the group is paused.
    pub paused: Option<Pause>,
    /// The names of the group's cron jobs that have a history.
    pub cron_jobs: Vec<String>,
    /// Why this group could not be read, when [`Admin::groups`] listed it
    /// but reading it failed (the other fields are then empty): one bad
    /// group does not hide the others.
    pub error: Option<String>,
}

/// Who paused a group, when, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pause {
    /// Who paused it, as they said (the CLI: user and host).
    pub by: String,
    /// When, by the pausing machine's clock. [`UNIX_EPOCH`] when the pause
    /// key holds no time [`Admin::pause`] could have written (unreadable,
    /// negative, or after the year 9999: written by something else): the
    /// group is paused all the same, and such a time would only break
    /// whoever formats it.
    pub at: SystemTime,
    /// Why, if given.
    pub reason: Option<String>,
}

/// A transition announced on the notice connection; see [`Admin::notices`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// `instance_id` released `group` (it stepped down, shut down, or was paused).
    Released {
        /// The group.
        group: String,
        /// The instance that released it.
        instance_id: String,
    },
    /// An operator paused `group`.
    Paused {
        /// The group.
        group: String,
    },
    /// An operator resumed `group`.
    Resumed {
        /// The group.
        group: String,
    },
    /// An operator asked `holder` to hand over its leadership of `group`
    /// (that of `token`).
    StepDownRequested {
        /// The group.
        group: String,
        /// The instance asked.
        holder: String,
        /// The fencing token of the leadership to end.
        token: u64,
    },
    /// The notice connection came back after a loss: notices may have been missed.
    Reconnected,
}

impl Admin {
    /// An admin connection to the backend `config` names, under its key
    /// prefix. Connects lazily: the first request says whether the backend
    /// is reachable. Starts no task; its requests run on the caller's tokio
    /// runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{admin::Admin, Config, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let admin = Admin::new(&Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// assert!(admin.groups().await?.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) when the backend cannot be
    /// set up; [`Error::NoTokioRuntime`](crate::Error::NoTokioRuntime)
    /// outside a tokio runtime.
    pub fn new(config: &Config) -> Result<Self> {
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| crate::Error::NoTokioRuntime)?;
        let (backend, target) = match &config.backend {
            BackendConfig::Redis(redis) => (
                Backend::Redis(RedisBackend::new(redis, config.call_timeout, false)?),
                redis.describe(),
            ),
            BackendConfig::Memory(memory) => (Backend::Memory(memory.clone()), "memory".to_owned()),
        };
        Ok(Self {
            backend,
            target,
            prefix: config.key_prefix.clone(),
            call_timeout: config.call_timeout,
            retry_interval: config.retry_interval,
            handle,
        })
    }

    /// The backend, as a message may name it: its URLs with passwords
    /// redacted (`redis://user:***@host:6379`), or `memory`.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{admin::Admin, Config};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let admin = Admin::new(&Config::builder().redis_url("redis://ops:s3cret@db:6379").build()?)?;
    /// assert_eq!(admin.target(), "redis://ops:***@db:6379");
    /// # Ok(()) }
    /// ```
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The key prefix the fleet uses.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every group under the prefix that has a lease, a record or a pause,
    /// sorted by name, each read as [`group`](Self::group) does, with its
    /// cron jobs. A group that cannot be read is listed with its
    /// [`error`](GroupInfo::error) rather than failing the list.
    ///
    /// Lists keys with `SCAN` (on Redis Cluster: on each master, as
    /// `CLUSTER SLOTS` lists them), which walks the whole keyspace: a tool
    /// polling for changes should call this now and then, and
    /// [`group`](Self::group) for the groups it knows in between.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`](crate::Error::Backend) or
    /// [`Error::Timeout`](crate::Error::Timeout) when the keys cannot be listed.
    pub async fn groups(&self) -> Result<Vec<GroupInfo>> {
        let head = format!("{}:{{", self.prefix);
        let keys = self
            .bounded("*", self.backend.keys_starting_with(&head))
            .await?;
        let mut out = Vec::new();
        for (group, jobs) in self.by_group(&keys) {
            let mut info = match self.inspect(&group).await {
                Ok(info) => info,
                Err(e) => GroupInfo {
                    error: Some(e.to_string()),
                    ..GroupInfo::empty(&group)
                },
            };
            info.cron_jobs = jobs;
            out.push(info);
        }
        Ok(out)
    }

    /// Group names and their cron jobs, from the keys under the prefix.
    fn by_group(&self, keys: &[String]) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let head = format!("{}:{{", self.prefix);
        for key in keys {
            let Some((group, rest)) = key.strip_prefix(&head).and_then(|k| k.split_once("}:"))
            else {
                continue;
            };
            if validate_group(group).is_err() {
                continue;
            }
            match rest {
                "lease" | "token" | "paused" => {
                    groups.entry(group.to_owned()).or_default();
                }
                _ => {
                    if let Some(job) = rest.strip_prefix("cron-history:") {
                        groups
                            .entry(group.to_owned())
                            .or_default()
                            .push(job.to_owned());
                    }
                }
            }
        }
        for jobs in groups.values_mut() {
            jobs.sort();
            jobs.dedup();
        }
        groups
    }

    /// The names of the cron jobs of `group` that have a history, sorted
    /// (feature `cron`). Reads the keys of that group alone (`SCAN MATCH`
    /// on the node of its slot).
    ///
    /// # Errors
    ///
    /// As [`group`](Self::group).
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub async fn cron_jobs(&self, group: &str) -> Result<Vec<String>> {
        validate_group(group)?;
        let head = format!("{}:{{{group}}}:", self.prefix);
        let keys = self
            .bounded(group, self.backend.keys_starting_with(&head))
            .await?;
        Ok(self.by_group(&keys).remove(group).unwrap_or_default())
    }

    /// One group, as the backend shows it now (its `cron_jobs` are listed by
    /// [`groups`](Self::groups) only).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`](crate::Error::InvalidGroup) for a malformed
    /// name; [`Error::Backend`](crate::Error::Backend) or
    /// [`Error::Timeout`](crate::Error::Timeout) when the backend cannot answer.
    pub async fn group(&self, group: &str) -> Result<GroupInfo> {
        validate_group(group)?;
        self.inspect(group).await
    }

    async fn inspect(&self, group: &str) -> Result<GroupInfo> {
        let keys = GroupKeys::new(&self.prefix, group);
        let found = self
            .bounded(group, self.backend.inspect(group, &keys))
            .await?;
        let (holder, expires_in) = match found.holder {
            Some((holder, left)) => (Some(holder), left),
            None => (None, None),
        };
        Ok(GroupInfo {
            group: group.to_owned(),
            holder,
            expires_in,
            token: found.token,
            paused: found.paused.map(|p| Pause {
                by: p.by,
                at: u64::try_from(p.at)
                    .ok()
                    .and_then(crate::util::clock::wall_time_from_unix_ms)
                    .unwrap_or(UNIX_EPOCH),
                reason: (!p.reason.is_empty()).then_some(p.reason),
            }),
            cron_jobs: Vec::new(),
            error: None,
        })
    }

    /// Pause `group` fleet-wide: no instance acquires it until
    /// [`resume`](Self::resume), and its leader drains and releases. `by`
    /// says who (free text, shown by `status`). Pausing a group nobody runs
    /// yet is allowed (it starts paused). Returns whether it was not paused
    /// before (pausing again replaces who, when and why).
    ///
    /// # Errors
    ///
    /// As [`group`](Self::group).
    pub async fn pause(&self, group: &str, by: &str, reason: Option<&str>) -> Result<bool> {
        validate_group(group)?;
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mark = PauseMark {
            by: by.to_owned(),
            at,
            reason: reason.unwrap_or_default().to_owned(),
        };
        self.set_pause(group, Some(&mark), ControlRequest::Pause)
            .await
    }

    /// End the pause of `group`; returns whether it was paused.
    ///
    /// # Errors
    ///
    /// As [`group`](Self::group).
    pub async fn resume(&self, group: &str) -> Result<bool> {
        validate_group(group)?;
        self.set_pause(group, None, ControlRequest::Resume).await
    }

    async fn set_pause(
        &self,
        group: &str,
        mark: Option<&PauseMark>,
        c: ControlRequest,
    ) -> Result<bool> {
        let keys = GroupKeys::new(&self.prefix, group);
        let channel = control_channel(&self.prefix);
        let message = c.message(group);
        let request = PauseRequest {
            group,
            keys: &keys,
            mark,
            channel: &channel,
            message: &message,
        };
        self.bounded(group, self.backend.pause(&request)).await
    }

    /// Ask the holder of `group` to hand it over: it drains its gated runs,
    /// releases, and stays out of the race for one `ttl`. Returns the holder
    /// asked, or `None` when nobody holds the lease (nothing is sent).
    ///
    /// # Errors
    ///
    /// As [`group`](Self::group).
    pub async fn step_down(&self, group: &str) -> Result<Option<String>> {
        let info = self.group(group).await?;
        let Some(holder) = info.holder else {
            return Ok(None);
        };
        // The request names the leadership (its token), not only the
        // holder: arriving late, it must not end a later leadership.
        let Some(token) = info.token.filter(|t| *t != 0) else {
            return Err(crate::Error::Protocol {
                group: group.to_owned(),
                message: "the lease has a holder but the group's record no token: \
                          cannot name the leadership to end"
                    .to_owned(),
            });
        };
        let message = ControlRequest::StepDown {
            token,
            holder: holder.clone(),
        }
        .message(group);
        let channel = control_channel(&self.prefix);
        self.bounded(group, self.backend.publish(group, &channel, &message))
            .await?;
        Ok(Some(holder))
    }

    /// The last runs of cron job `job` of `group`, newest first (feature
    /// `cron`), without the entries [`cron::history`](crate::cron::history)
    /// leaves out.
    ///
    /// # Errors
    ///
    /// As [`group`](Self::group); [`Error::Config`](crate::Error::Config)
    /// (field `"name"`) for a malformed job name.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub async fn history(&self, group: &str, job: &str) -> Result<Vec<crate::cron::Run>> {
        validate_group(group)?;
        crate::cron::validate_name(job)?;
        let keys = crate::backend::cron::JobKeys::new(&self.prefix, group, job);
        let entries = self
            .bounded(group, self.backend.cron_history(group, &keys))
            .await?;
        Ok(entries
            .iter()
            .filter_map(|e| crate::cron::Run::parse(e))
            .collect())
    }

    /// Listen for transitions and requests under the prefix: releases,
    /// pauses, resumes, step-down requests, as they are published. The
    /// subscription reconnects by itself (sending [`Notice::Reconnected`]);
    /// pub/sub is lossy, so poll [`groups`](Self::groups) too. Ends when the
    /// returned [`Notices`] is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::admin::{Admin, Notice};
    /// use leader_runtime::{Config, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let admin = Admin::new(&Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// let mut notices = admin.notices();
    /// admin.pause("jobs", "ops", None).await?;
    /// assert_eq!(notices.recv().await, Some(Notice::Paused { group: "jobs".into() }));
    /// # Ok(()) }
    /// ```
    pub fn notices(&self) -> Notices {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let _runtime = self.handle.enter();
        let sink = std::sync::Arc::new(move |notice: ChannelNotice<'_>| {
            let _ = tx.send(Notice::from_wire(notice));
        });
        self.backend.spawn_notices(
            Channels {
                release: release_channel(&self.prefix),
                control: control_channel(&self.prefix),
            },
            sink,
            std::sync::Arc::default(),
            self.retry_interval,
            stop.clone(),
        );
        Notices {
            rx,
            _stop: stop.drop_guard(),
        }
    }

    async fn bounded<T>(
        &self,
        group: &str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        crate::backend::within(group, self.call_timeout, call).await
    }
}

impl GroupInfo {
    fn empty(group: &str) -> Self {
        Self {
            group: group.to_owned(),
            holder: None,
            expires_in: None,
            token: None,
            paused: None,
            cron_jobs: Vec::new(),
            error: None,
        }
    }
}

impl Notice {
    fn from_wire(notice: ChannelNotice<'_>) -> Self {
        match notice {
            ChannelNotice::Released {
                group: crate::backend::EVERY_GROUP,
                ..
            } => Notice::Reconnected,
            ChannelNotice::Released { group, by } => Notice::Released {
                group: group.to_owned(),
                instance_id: by.to_owned(),
            },
            ChannelNotice::Control { group, request } => {
                let group = group.to_owned();
                match request {
                    ControlRequest::Pause => Notice::Paused { group },
                    ControlRequest::Resume => Notice::Resumed { group },
                    ControlRequest::StepDown { token, holder } => Notice::StepDownRequested {
                        group,
                        holder,
                        token,
                    },
                }
            }
        }
    }
}

/// The notices of [`Admin::notices`]; the subscription ends when this is dropped.
#[derive(Debug)]
pub struct Notices {
    rx: mpsc::UnboundedReceiver<Notice>,
    _stop: DropGuard,
}

impl Notices {
    /// The next notice; `None` once the subscription ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a notice not returned stays queued.
    pub async fn recv(&mut self) -> Option<Notice> {
        self.rx.recv().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_tokio_runtime_new_is_an_error_not_a_panic() {
        let config = Config::builder()
            .redis_url("redis://127.0.0.1:1/")
            .build()
            .unwrap();
        let err = Admin::new(&config).unwrap_err();
        assert!(matches!(err, crate::Error::NoTokioRuntime), "{err}");
    }

    /// A pause time no clock writes (a stray `HSET`) reads as the epoch: the
    /// pause holds, and formatting its time cannot panic.
    #[tokio::test]
    async fn a_pause_time_past_the_year_9999_reads_as_the_epoch() {
        let mem = crate::MemoryBackend::new();
        let admin = Admin::new(&Config::builder().memory(mem.clone()).build().unwrap()).unwrap();
        let key = GroupKeys::new(admin.prefix(), "jobs").paused;
        for (at, expect) in [
            (
                1_700_000_000_123,
                UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            ),
            (
                253_402_300_799_999,
                UNIX_EPOCH + Duration::from_millis(253_402_300_799_999),
            ),
            (253_402_300_800_000, UNIX_EPOCH),
            (9_000_000_000_000_000, UNIX_EPOCH),
            (-1, UNIX_EPOCH),
        ] {
            let mark = PauseMark {
                by: "ops".into(),
                at,
                reason: String::new(),
            };
            mem.set_paused("jobs", &key, mark).unwrap();
            let pause = admin.group("jobs").await.unwrap().paused.expect("paused");
            assert_eq!(pause.at, expect, "{at}");
            assert_eq!(pause.by, "ops");
        }
    }
}
