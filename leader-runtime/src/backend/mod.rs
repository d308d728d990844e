//! Where leases live: Redis, or an in-process map with the same semantics.
//!
//! Each backend implements the three lease operations of the crate docs'
//! lease algorithm
//! (acquire, renew, release) atomically, reads the holder, and delivers
//! release notices.

pub(crate) mod admin;
mod batch;
#[cfg(feature = "cron")]
pub(crate) mod cron;
pub(crate) mod fence;
pub(crate) mod heir;
mod marker;
mod memory;
pub(crate) mod once;
mod phases;
pub(crate) mod probe;
pub(crate) mod redis;
mod sentinel;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use self::batch::{slot, AttemptBatcher, Expiry};
#[cfg(test)]
pub(crate) use self::batch::{ATTEMPT_SPREAD, ATTEMPT_STEP};
pub(crate) use self::marker::marker_key;
pub use self::memory::{MemoryBackend, MemorySnapshot};
pub(crate) use self::redis::{RedisBackend, RedisConfig, RedisOptions};
use crate::names::{ControlRequest, GroupKeys};
use crate::{Error, Result};

/// What an acquire found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// We hold the lease now, with a new fencing token; our view may begin
    /// only `wait` after the reply arrived, for the reason `why`. `last`:
    /// the token issued before it (`None`: there was no record).
    Won {
        token: u64,
        wait: Duration,
        why: SafeStart,
        last: Option<u64>,
    },
    /// Another instance holds it; `pttl` is its remaining life if it expires
    /// — on Redis plus the heir rule's grace when the holder missed a
    /// renewal and another follower is the group's heir (`heir.rs`): when
    /// to ask again, not when the lease ends.
    Held {
        holder: String,
        pttl: Option<Duration>,
    },
    /// The group is paused fleet-wide: nobody may acquire it.
    Paused,
}

/// What a member of a balanced fleet publishes with each membership
/// refresh (see `election/balance.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// How many groups it leads (`once:` groups left out).
    pub(crate) leading: u32,
    /// How many groups it campaigns in: eligible, not `once:`.
    pub(crate) campaigns: u32,
}

/// A live member of a balanced fleet and what it published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) id: String,
    pub(crate) counts: Counts,
}

/// Why a new leader's view must wait before it begins: an earlier holder
/// may still believe it leads (the crate docs' lease algorithm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SafeStart {
    /// Nobody else can lead: the view begins at once.
    No,
    /// No record of the group: its first election, or the server lost its
    /// data. One ttl.
    First,
    /// The record was written by another server process (a restart from an
    /// RDB or AOF file, a promoted replica, a restore). One ttl.
    Unvouched,
    /// The lease key vanished before the last holder's time (eviction, a
    /// manual `DEL`): until that time.
    Early,
}

impl SafeStart {
    /// The wait of a reply that said `why` (the acquire script's words).
    pub(crate) fn from_script(why: &[u8]) -> Option<Self> {
        Some(match why {
            b"" => SafeStart::No,
            b"first" => SafeStart::First,
            b"unvouched" => SafeStart::Unvouched,
            b"early" => SafeStart::Early,
            _ => return None,
        })
    }
}

/// What a renew found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renew {
    Renewed,
    /// Nobody holds the lease any more.
    Gone,
    /// Someone else (or another value) holds it, or another leadership of
    /// ours does (the record's token is not the one renewed: our own
    /// acquire, run late, re-created or re-claimed the lease).
    Other,
    /// We hold it, but the group's record was written by another server
    /// process (a restart from disk, a failover, a restore): nothing was
    /// renewed; acquire again, with a safe start.
    Unvouched,
    /// We hold it, but the group is paused: nothing was renewed; hand over.
    Paused,
}

/// What arrives on the notice connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChannelNotice<'a> {
    /// An instance released `group` (the group [`EVERY_GROUP`]: the notice
    /// connection came back after a loss, `by` is empty).
    Released { group: &'a str, by: &'a str },
    /// An operator's request about `group` (on the control channel).
    Control {
        group: &'a str,
        request: ControlRequest,
    },
}

/// The channels the notice connection listens on.
#[derive(Debug, Clone)]
pub(crate) struct Channels {
    /// Release notices: `"<group> <instance id>"`.
    pub(crate) release: String,
    /// Operators' requests (see [`ControlRequest`]).
    pub(crate) control: String,
}

impl Channels {
    /// The notice a message on `channel` with `payload` stands for, if any.
    pub(crate) fn parse<'a>(&self, channel: &str, payload: &'a str) -> Option<ChannelNotice<'a>> {
        if channel == self.release {
            let (group, by) = crate::names::parse_notice(payload)?;
            Some(ChannelNotice::Released { group, by })
        } else if channel == self.control {
            let (request, group) = ControlRequest::parse(payload)?;
            Some(ChannelNotice::Control { group, request })
        } else {
            None
        }
    }
}

/// Called for every notice.
pub(crate) type NoticeSink = Arc<dyn Fn(ChannelNotice<'_>) + Send + Sync>;

/// The group of a notice to every group (`*` is never a group name): the
/// backend's notice connection came back after it was lost — the server may
/// have restarted empty, so leaders renew now rather than at their next
/// renewal.
pub(crate) const EVERY_GROUP: &str = "*";

/// One group's operation, as the backend sees it.
/// A backend call for `group`, bounded by `limit`: [`Error::Timeout`]
/// after that.
pub(crate) async fn within<T>(
    group: &str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            group: group.to_owned(),
            after: limit,
        }),
    }
}

pub(crate) struct Op<'a> {
    pub(crate) group: &'a str,
    pub(crate) keys: &'a GroupKeys,
    pub(crate) id: &'a str,
}

#[derive(Clone)]
pub(crate) enum Backend {
    Redis(RedisBackend),
    Memory(MemoryBackend),
}

impl Backend {
    /// One group's acquire attempt, alone (the elections batch theirs).
    #[cfg(test)]
    pub(crate) async fn acquire(&self, op: &Op<'_>, ttl: Duration) -> Result<Acquire> {
        let mut answers = self.acquire_many(op.id, ttl, &[(op.group, op.keys)]).await;
        answers
            .pop()
            .unwrap_or_else(|| Err(Error::backend(op.group, "no answer")))
    }

    /// The acquire attempts of `groups` (name, keys) for instance `id`, in
    /// one call where the backend can (all in one hash slot on a cluster):
    /// one answer per group, in order, each meaning what an attempt of that group
    /// would have answered
    /// alone (`acquire.lua`).
    pub(crate) async fn acquire_many(
        &self,
        id: &str,
        ttl: Duration,
        groups: &[(&str, &GroupKeys)],
    ) -> Vec<Result<Acquire>> {
        match self {
            Backend::Redis(b) => b.acquire_many(id, ttl, groups).await,
            Backend::Memory(b) => {
                #[cfg(test)]
                if let Some(delay) = b.acquire_run_delay(id) {
                    tokio::time::sleep(delay).await;
                }
                let answers = b.acquire_many(id, ttl, groups);
                #[cfg(test)]
                if let Some(delay) = b.acquire_reply_delay(id) {
                    tokio::time::sleep(delay).await;
                }
                answers
            }
        }
    }

    /// Refresh `id`'s membership at `key` for `ttl`, publishing its
    /// `counts`, and list the live members with theirs: those refreshed
    /// within `fresh` (balanced leadership: `members.lua`).
    pub(crate) async fn members(
        &self,
        key: &str,
        id: &str,
        ttl: Duration,
        fresh: Duration,
        counts: Counts,
    ) -> Result<Vec<Member>> {
        match self {
            Backend::Redis(b) => b.members(key, id, Some((ttl, counts)), fresh).await,
            Backend::Memory(b) => Ok(b.members(key, id, Some((ttl, counts)), fresh)),
        }
    }

    /// End `id`'s membership at `key`.
    pub(crate) async fn leave(&self, key: &str, id: &str) -> Result<()> {
        match self {
            Backend::Redis(b) => b.members(key, id, None, Duration::ZERO).await.map(drop),
            Backend::Memory(b) => {
                b.members(key, id, None, Duration::ZERO);
                Ok(())
            }
        }
    }

    /// Whether calls must keep their keys in one hash slot (Redis Cluster).
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            Backend::Redis(b) => b.is_cluster(),
            Backend::Memory(_) => false,
        }
    }

    /// Extend the lease we hold under the leadership with `token` by `ttl`.
    pub(crate) async fn renew(&self, op: &Op<'_>, token: u64, ttl: Duration) -> Result<Renew> {
        match self {
            Backend::Redis(b) => b.renew(op, token, ttl).await,
            Backend::Memory(b) => b.renew(op, token, ttl),
        }
    }

    /// When a leader renews `group`'s lease due for renewal at `due`
    /// (renewing every `every`): Redis moves it back onto this runtime's
    /// renew phase, which all its groups share so that their renewals batch
    /// (one of a few phases for a leader of thousands; see
    /// `batch::RenewBatcher::align`); in memory, `due` itself.
    pub(crate) fn renew_at(&self, due: Instant, every: Duration, group: &str) -> Instant {
        match self {
            Backend::Redis(b) => b.renew_at(due, every, group),
            Backend::Memory(_) => due,
        }
    }

    /// Count a lease this runtime holds while the guard lives: how many
    /// renew phases its leases spread over on Redis.
    pub(crate) fn holding(&self) -> Option<phases::Holding> {
        match self {
            Backend::Redis(b) => b.holding(),
            Backend::Memory(_) => None,
        }
    }

    /// Release the lease we hold under the leadership with `token`.
    /// Returns whether we held (and so released) it.
    pub(crate) async fn release(&self, op: &Op<'_>, channel: &str, token: u64) -> Result<bool> {
        match self {
            Backend::Redis(b) => b.release(op, channel, token).await,
            Backend::Memory(b) => b.release(op, channel, token),
        }
    }

    /// One round trip that needs no group: `PING` (connecting, and so
    /// authenticating and selecting the database, first if need be).
    pub(crate) async fn ping(&self) -> Result<()> {
        match self {
            Backend::Redis(b) => b.ping().await,
            Backend::Memory(b) => b.ping(),
        }
    }

    pub(crate) async fn holder(&self, group: &str, keys: &GroupKeys) -> Result<Option<String>> {
        match self {
            Backend::Redis(b) => b.holder(group, keys).await,
            Backend::Memory(b) => b.holder(group, keys),
        }
    }

    /// A fenced write: applied only if `call.token` is not below the group's
    /// high-water mark (see `fence.lua`).
    pub(crate) async fn fenced(&self, call: &fence::Call<'_>) -> Result<fence::Outcome> {
        match self {
            Backend::Redis(b) => fence::redis(b.conn(), call).await,
            Backend::Memory(b) => b.fenced(call),
        }
    }

    /// Start delivering notices on `channels` to `sink` until `stop`;
    /// `up` tells whether notices can currently arrive.
    pub(crate) fn spawn_notices(
        &self,
        channel: Channels,
        sink: NoticeSink,
        up: Arc<AtomicBool>,
        retry: Duration,
        stop: CancellationToken,
    ) {
        match self {
            Backend::Redis(b) => b.spawn_notices(channel, sink, up, retry, stop),
            Backend::Memory(b) => b.spawn_notices(channel, sink, up, stop),
        }
    }
}
