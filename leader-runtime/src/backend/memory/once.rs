//! The rules of `once.lua`, in memory.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

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
        let verdict = if entry.stored.done.is_some() {
            Verdict::Done
        } else if !ours {
            Verdict::Lost
        } else {
            match step {
                Step::Begin { .. } if entry.started_token == Some(holder.token) => Verdict::Run,
                Step::Begin { limit } if entry.stored.attempts >= limit => Verdict::Failed,
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
            }
        };
        Ok((verdict, entry.stored.clone()))
    }

    pub(in crate::backend) fn once_read(&self, group: &str, keys: &OnceKeys) -> Result<Stored> {
        self.check_available(group)?;
        let state = self.state();
        Ok(state
            .data
            .once
            .0
            .get(&keys.result)
            .map(|e| e.stored.clone())
            .unwrap_or_default())
    }

    pub(in crate::backend) fn once_reset(&self, group: &str, keys: &OnceKeys) -> Result<Stored> {
        self.check_available(group)?;
        let mut state = self.state();
        let entry = state.data.once.0.entry(keys.result.clone()).or_default();
        if entry.stored.done.is_none() {
            entry.stored.attempts = 0;
            entry.stored.failures = 0;
            entry.stored.error.clear();
        }
        Ok(entry.stored.clone())
    }
}
