//! The rules of `once.lua`, in memory.

use std::collections::HashMap;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::super::once::{Done, Holder, OnceKeys, Step, Stored, Verdict};
use super::MemoryBackend;
use crate::Result;

/// The results of run-once names, by result key (kept in snapshots).
#[derive(Debug, Default, Clone)]
pub(super) struct OnceData(HashMap<String, Entry>);

/// One result hash of `once.lua`.
#[derive(Debug, Default, Clone)]
struct Entry {
    stored: Stored,
    started_token: Option<u64>,
    failed_token: Option<u64>,
    /// Until when the latest attempt's runner, deposed mid-body, said it
    /// still runs.
    running_until: Option<Instant>,
}

impl Entry {
    /// Whether the latest attempt's runner said its body still runs.
    fn attempt_alive(&self, now: Instant) -> bool {
        self.started_token.is_some()
            && self.failed_token != self.started_token
            && self.running_until.is_some_and(|u| u > now)
    }
}

impl MemoryBackend {
    pub(in crate::backend) fn once_step(
        &self,
        holder: &Holder<'_>,
        step: Step<'_>,
    ) -> Result<(Verdict, Stored)> {
        self.check_available(holder.group)?;
        let mut state = self.state();
        let ours = Self::live(&mut state, &holder.keys.group.lease)
            .is_some_and(|(h, _)| h == holder.id)
            && state
                .data
                .records
                .get(&holder.keys.group.record)
                .is_some_and(|r| r.token == holder.token);
        let entry = state
            .data
            .once
            .0
            .entry(holder.keys.result.clone())
            .or_default();
        let now = Instant::now();
        let latest = entry.started_token == Some(holder.token);
        let verdict = if entry.stored.done.is_some() {
            Verdict::Done
        } else {
            match step {
                Step::Begin { .. } if !ours => Verdict::Lost,
                Step::Begin { .. } if latest => Verdict::Run,
                Step::Begin { limit } if entry.stored.attempts >= limit => {
                    if entry.attempt_alive(now) {
                        Verdict::Held
                    } else {
                        Verdict::Failed
                    }
                }
                Step::Begin { .. } => {
                    let s = &mut entry.stored;
                    s.attempts += 1;
                    s.error = format!(
                        "attempt {} (instance {}, token {}) ended without a result: its runner \
                         stopped or lost the lease",
                        s.attempts, holder.id, holder.token
                    );
                    entry.started_token = Some(holder.token);
                    Verdict::Run
                }
                _ if !latest => Verdict::Lost,
                Step::Done { summary } => {
                    let at_ms = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                        .unwrap_or_default();
                    entry.stored.done = Some(Done {
                        token: holder.token,
                        by: holder.id.to_owned(),
                        at_ms,
                        summary: summary.to_owned(),
                    });
                    Verdict::Done
                }
                Step::Fail { error } => {
                    if entry.failed_token != Some(holder.token) {
                        entry.stored.failures += 1;
                    }
                    entry.failed_token = Some(holder.token);
                    entry.stored.error = error.to_owned();
                    Verdict::Open
                }
                Step::Alive { .. } if entry.failed_token == Some(holder.token) => Verdict::Lost,
                Step::Alive { ttl } => {
                    let until = crate::util::clock::deadline_in(ttl);
                    entry.running_until = Some(entry.running_until.map_or(until, |u| u.max(until)));
                    Verdict::Run
                }
            }
        };
        let answer = (verdict, entry.stored.clone());
        #[cfg(test)]
        if self.inner.lose_once_replies.load(Ordering::SeqCst) {
            return Err(crate::Error::backend(
                holder.group,
                "the reply was lost (simulated)",
            ));
        }
        Ok(answer)
    }

    /// Tests: from now on (`true`), each run-once step applies, but its
    /// reply is lost (the caller gets an error), as a connection that fails
    /// after sending a request could. Reads and resets are not affected.
    #[cfg(test)]
    pub(crate) fn lose_once_replies(&self, lose: bool) {
        self.inner.lose_once_replies.store(lose, Ordering::SeqCst);
    }

    /// Whether an attempt of the name may still run (see `once.lua`):
    /// somebody holds the lease, its last holder may still lead (the lease
    /// lost early, or a record this server cannot vouch for), or the latest
    /// attempt's runner said its body still runs; with no record, until one
    /// `ttl` after the last loss (the server marker's `since`).
    fn may_run(state: &mut super::State, keys: &OnceKeys, ttl: Duration) -> bool {
        if Self::live(state, &keys.group.lease).is_some() {
            return true;
        }
        let now = Instant::now();
        let run = state.run;
        if state
            .data
            .records
            .get(&keys.group.record)
            .is_some_and(|r| r.run != run || r.until > now)
        {
            return true;
        }
        if !state.data.records.contains_key(&keys.group.record)
            && state.since.is_some_and(|since| now < since + ttl)
        {
            return true;
        }
        state
            .data
            .once
            .0
            .get(&keys.result)
            .is_some_and(|e| e.attempt_alive(now))
    }

    pub(in crate::backend) fn once_read(
        &self,
        group: &str,
        keys: &OnceKeys,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        self.check_available(group)?;
        let mut state = self.state();
        let held = Self::may_run(&mut state, keys, ttl);
        let stored = state
            .data
            .once
            .0
            .get(&keys.result)
            .map(|e| e.stored.clone())
            .unwrap_or_default();
        let verdict = if stored.done.is_some() {
            Verdict::Done
        } else if held {
            Verdict::Held
        } else {
            Verdict::Open
        };
        Ok((verdict, stored))
    }

    pub(in crate::backend) fn once_reset(
        &self,
        group: &str,
        keys: &OnceKeys,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        self.check_available(group)?;
        let mut state = self.state();
        let held = Self::may_run(&mut state, keys, ttl);
        let entry = state.data.once.0.entry(keys.result.clone()).or_default();
        let verdict = if entry.stored.done.is_some() {
            Verdict::Done
        } else if held {
            Verdict::Busy
        } else {
            entry.stored.attempts = 0;
            entry.stored.failures = 0;
            entry.stored.error.clear();
            Verdict::Open
        };
        Ok((verdict, entry.stored.clone()))
    }
}
