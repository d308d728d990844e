//! The run-once operations of the backends: start an attempt (only under
//! the name's lease, with its token), record its success or failure or say
//! it still runs (only while it is the latest attempt), read the result
//! (and whether an attempt may still run), reset the attempt count (only
//! while none may). `once.lua` is the Redis side,
//! `memory/once.rs` the same rules in memory.

use std::time::Duration;

use super::Backend;
use crate::names::GroupKeys;
use crate::Result;

/// The keys of one run-once name; all in the slot of its group.
#[derive(Debug, Clone)]
pub(crate) struct OnceKeys {
    /// The lease and record of the name's group (`once:<name>`).
    pub(crate) group: GroupKeys,
    /// The result (hash, no expiry; see `once.lua`).
    pub(crate) result: String,
}

impl OnceKeys {
    /// The keys of `group` (the name's group, `once:<name>`) under `prefix`.
    pub(crate) fn new(prefix: &str, group: &str) -> Self {
        Self {
            group: GroupKeys::new(prefix, group),
            result: format!("{prefix}:{{{group}}}:result"),
        }
    }
}

/// An operation of a runner on the result: `Begin` under the lease, the
/// others while its attempt is the latest (with or without the lease).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<'a> {
    /// Start an attempt, if fewer than `limit` were started and none may
    /// still run.
    Begin { limit: u32 },
    /// The body succeeded: record it with `summary`.
    Done { summary: &'a str },
    /// The body failed with `error` (redacted).
    Fail { error: &'a str },
    /// The body still runs although the lease was lost: for `ttl` more,
    /// nobody concludes that the attempts are used up.
    Alive { ttl: std::time::Duration },
}

/// Who asks: the lease holder `id` under `token`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder<'a> {
    pub(crate) group: &'a str,
    pub(crate) keys: &'a OnceKeys,
    pub(crate) id: &'a str,
    pub(crate) token: u64,
}

/// What a step, a read or a reset found; see `once.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Done,
    Lost,
    Run,
    Failed,
    Open,
    /// Read: an attempt may still run (the lease is held, its last holder
    /// may still lead, or a deposed runner said its body still runs).
    /// Begin: the attempts are used up, but the latest may still run.
    Held,
    /// Reset: an attempt may still run; nothing was reset.
    Busy,
}

impl Verdict {
    pub(crate) fn from_script(word: &[u8]) -> Option<Self> {
        Some(match word {
            b"done" => Verdict::Done,
            b"lost" => Verdict::Lost,
            b"run" => Verdict::Run,
            b"failed" => Verdict::Failed,
            b"open" => Verdict::Open,
            b"held" => Verdict::Held,
            b"busy" => Verdict::Busy,
            _ => return None,
        })
    }
}

/// The result of a name as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Attempts started (a crashed one included).
    pub(crate) attempts: u32,
    /// Attempts that ended with an error.
    pub(crate) failures: u32,
    /// The latest failure's text ("" for none).
    pub(crate) error: String,
    pub(crate) done: Option<Done>,
}

/// A success, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Done {
    pub(crate) token: u64,
    pub(crate) by: String,
    /// Unix ms (the server's clock) when it was recorded.
    pub(crate) at_ms: u64,
    pub(crate) summary: String,
}

impl Backend {
    /// `step` on the result of `holder.keys`, if the lease is `holder`'s.
    pub(crate) async fn once_step(
        &self,
        holder: &Holder<'_>,
        step: Step<'_>,
    ) -> Result<(Verdict, Stored)> {
        match self {
            Backend::Redis(b) => b.once_step(holder, step).await,
            Backend::Memory(b) => {
                let answer = b.once_step(holder, step);
                #[cfg(test)]
                if let Some(delay) = b.once_reply_delay(holder.id) {
                    tokio::time::sleep(delay).await;
                }
                answer
            }
        }
    }

    /// The result as stored, read without the lease, and whether an attempt
    /// may still run: [`Verdict::Done`], [`Verdict::Held`] or
    /// [`Verdict::Open`] (no attempt is running).
    pub(crate) async fn once_read(
        &self,
        group: &str,
        keys: &OnceKeys,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        match self {
            Backend::Redis(b) => b.once_read(group, keys, ttl).await,
            Backend::Memory(b) => b.once_read(group, keys, ttl),
        }
    }

    /// Forget the attempts and failures (not a success) of a name:
    /// [`Verdict::Open`] when done, [`Verdict::Busy`] (nothing changed) while
    /// an attempt may still run, [`Verdict::Done`] after a success.
    pub(crate) async fn once_reset(
        &self,
        group: &str,
        keys: &OnceKeys,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        match self {
            Backend::Redis(b) => b.once_reset(group, keys, ttl).await,
            Backend::Memory(b) => b.once_reset(group, keys, ttl),
        }
    }
}
