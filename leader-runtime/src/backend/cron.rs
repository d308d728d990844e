//! The cron operations of the backends (feature `cron`): claim ticks under
//! the lease, mark a claimed tick started, keep a run's busy mark alive,
//! end a run or give up a claim that did not start, read a job's history.
//! `claim.lua`, `cron_start.lua` and `cron_run.lua` are the Redis side;
//! `memory/cron.rs` the same rules in memory.

use std::time::Duration;

use super::Backend;
use crate::names::GroupKeys;
use crate::Result;

/// The keys of one cron job; all in the group's hash slot.
#[derive(Debug, Clone)]
pub(crate) struct JobKeys {
    pub(crate) group: GroupKeys,
    /// The job's decisions (hash, no expiry; see `claim.lua`).
    pub(crate) job: String,
    /// The job's last runs (list, newest first).
    pub(crate) history: String,
}

impl JobKeys {
    pub(crate) fn new(prefix: &str, group: &str, job: &str) -> Self {
        Self {
            group: GroupKeys::new(prefix, group),
            job: format!("{prefix}:{{{group}}}:cron:{job}"),
            history: format!("{prefix}:{{{group}}}:cron-history:{job}"),
        }
    }
}

/// What to do with one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Claim it to run now.
    Run,
    /// Claim it to run now, a catch-up of a tick missed in a gap: while a
    /// run of the job is in flight (overlap skip) it is left undecided
    /// ([`Claimed::Wait`]), to run after it.
    CatchUp,
    /// Record it as missed (it will not run).
    Miss,
}

/// A claim request: ticks of one job, oldest first, at most one that runs
/// ([`Mode::Run`] or [`Mode::CatchUp`]) and that one last.
#[derive(Debug)]
pub(crate) struct ClaimRequest<'a> {
    pub(crate) group: &'a str,
    pub(crate) keys: &'a JobKeys,
    pub(crate) id: &'a str,
    pub(crate) token: u64,
    /// The claimer's clock, unix ms.
    pub(crate) clock_ms: i64,
    /// Whether no tick may start while a run of the job is busy.
    pub(crate) skip_overlap: bool,
    pub(crate) busy_ttl: Duration,
    pub(crate) history_len: usize,
    /// No decision before this (unix ms, the claimer's clock) can have been
    /// made since the lease record was (re)created; see `claim.lua`.
    pub(crate) floor_ms: i64,
    /// No decision before this (unix ms, the claimer's clock) can have been
    /// lost when the job's record was restored: the claimer's clock plus the
    /// skew beyond the ttl; see `claim.lua`.
    pub(crate) restore_floor_ms: i64,
    /// When the job was built (unix ms, the claimer's clock): a job record
    /// without a decided tick decides no tick before it.
    pub(crate) created_ms: i64,
    /// Which job object claims (drawn when it was built): a claim is
    /// answered `ours` only for the object that made it, never for a job
    /// built again under the same leadership; see `claim.lua`.
    pub(crate) claimer: u64,
    pub(crate) ticks: &'a [(i64, Mode)],
}

/// The answer for one tick; see `claim.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    New,
    Ours,
    Taken,
    Refused,
    Missed,
    Busy,
    /// Left undecided: a catch-up while a run is in flight.
    Wait,
}

impl Claimed {
    pub(crate) fn from_script(word: &[u8]) -> Option<Self> {
        Some(match word {
            b"claimed" => Claimed::New,
            b"ours" => Claimed::Ours,
            b"taken" => Claimed::Taken,
            b"refused" => Claimed::Refused,
            b"missed" => Claimed::Missed,
            b"busy" => Claimed::Busy,
            b"wait" => Claimed::Wait,
            _ => return None,
        })
    }
}

impl Mode {
    /// Whether the tick is to run (not recorded as missed).
    pub(crate) fn runs(self) -> bool {
        self != Mode::Miss
    }

    /// The word `claim.lua` reads.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Mode::Run => "run",
            Mode::CatchUp => "catch-up",
            Mode::Miss => "miss",
        }
    }
}

/// What became of a claim given up before its body started
/// ([`Backend::cron_abandon`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abandoned {
    /// Not started: left to be decided again (by a later leadership, or
    /// by the same job object when it asks for the tick again).
    Claimed,
    /// Its start went through (its reply was lost): recorded with the
    /// given entry; the tick stays decided, not run.
    Started,
    /// Not this job object's claim any more (decided again already).
    Gone,
}

/// The busy mark of a run: `"<tick> <token>"`.
pub(crate) fn busy_mark(tick_ms: i64, token: u64) -> String {
    format!("{tick_ms} {token}")
}

impl Backend {
    /// Decide `req.ticks`; `None` when the lease is not ours.
    pub(crate) async fn cron_claim(&self, req: &ClaimRequest<'_>) -> Result<Option<Vec<Claimed>>> {
        match self {
            Backend::Redis(b) => b.cron_claim(req).await,
            Backend::Memory(b) => {
                let answer = b.cron_claim(req);
                #[cfg(test)]
                if let Some(delay) = b.cron_claim_reply_delay(req.id) {
                    tokio::time::sleep(delay).await;
                }
                answer
            }
        }
    }

    /// Mark the claim of `tick` by `token` and job object `claimer` started,
    /// right before its body starts; `false` (refused: the body must not
    /// start) when the lease is not ours on the server or the claim is not
    /// ours and still unstarted.
    pub(crate) async fn cron_start(
        &self,
        group: &str,
        keys: &JobKeys,
        id: &str,
        token: u64,
        tick_ms: i64,
        claimer: u64,
    ) -> Result<bool> {
        match self {
            Backend::Redis(b) => b.cron_start(group, keys, id, token, tick_ms, claimer).await,
            Backend::Memory(b) => b.cron_start(group, keys, id, token, tick_ms, claimer),
        }
    }

    /// Give up the claim `mark` of job object `claimer` whose body did not
    /// start here: drop its busy mark; if its start went through after all
    /// (a lost reply), end it with `entry` (keeping `len` entries).
    pub(crate) async fn cron_abandon(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        claimer: u64,
        entry: &str,
        len: usize,
    ) -> Result<Abandoned> {
        match self {
            Backend::Redis(b) => b.cron_abandon(group, keys, mark, claimer, entry, len).await,
            Backend::Memory(b) => b.cron_abandon(group, keys, mark, claimer, entry, len),
        }
    }

    /// Extend the busy mark `mark` by `ttl` from now, if it is still the
    /// job's; returns whether it was.
    pub(crate) async fn cron_keep(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        ttl: Duration,
    ) -> Result<bool> {
        match self {
            Backend::Redis(b) => b.cron_keep(group, keys, mark, ttl).await,
            Backend::Memory(b) => b.cron_keep(group, keys, mark, ttl),
        }
    }

    /// End a run: clear its busy mark `mark` (if still the job's) and its
    /// pending claim, and push `entry` to the history, keeping `len`
    /// entries.
    pub(crate) async fn cron_done(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        entry: &str,
        len: usize,
    ) -> Result<()> {
        match self {
            Backend::Redis(b) => b.cron_done(group, keys, mark, entry, len).await,
            Backend::Memory(b) => b.cron_done(group, keys, mark, entry, len),
        }
    }

    /// The history entries of a job, newest first.
    pub(crate) async fn cron_history(&self, group: &str, keys: &JobKeys) -> Result<Vec<String>> {
        match self {
            Backend::Redis(b) => b.cron_history(group, keys).await,
            Backend::Memory(b) => b.cron_history(group, keys),
        }
    }
}
