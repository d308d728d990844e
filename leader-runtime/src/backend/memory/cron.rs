//! The rules of `claim.lua` and `cron_run.lua`, in memory.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::super::cron::{busy_mark, ClaimRequest, Claimed, JobKeys, Mode};
use super::MemoryBackend;
use crate::Result;

/// What a snapshot keeps of the cron jobs.
#[derive(Debug, Default, Clone)]
pub(super) struct CronData {
    /// Job keys that claimed under the current records (the record field
    /// of `claim.lua`; lost with the records).
    marked: std::collections::HashSet<String>,
    jobs: HashMap<String, Job>,
    histories: HashMap<String, VecDeque<String>>,
}

impl CronData {
    /// The history keys of every job (for the admin API's listing).
    pub(super) fn history_keys(&self) -> impl Iterator<Item = String> + '_ {
        self.histories.keys().cloned()
    }
}

/// A job's decisions; the fields of the job hash in `claim.lua`.
#[derive(Debug, Default, Clone)]
struct Job {
    last: Option<i64>,
    claim: Option<(i64, u64)>,
    /// The job object that made `claim`.
    claimer: Option<u64>,
    since: i64,
    since_token: Option<u64>,
    /// The server process that set `since`; `None` before any claim.
    run: Option<u64>,
    busy: Option<(String, Instant)>,
}

fn push(history: &mut VecDeque<String>, entry: String, len: usize) {
    history.push_front(entry);
    history.truncate(len);
}

impl MemoryBackend {
    /// Tests: the job key `job` is lost on its own (evicted, deleted), its
    /// lease record's mark kept.
    #[cfg(test)]
    pub(crate) fn lose_cron_job(&self, job: &str) {
        self.state().data.cron.jobs.remove(job);
    }

    pub(in crate::backend) fn cron_claim(
        &self,
        req: &ClaimRequest<'_>,
    ) -> Result<Option<Vec<Claimed>>> {
        self.check_available(req.group)?;
        let mut state = self.state();
        let ours = Self::live(&mut state, &req.keys.group.lease).is_some_and(|(h, _)| h == req.id)
            && state
                .data
                .records
                .get(&req.keys.group.record)
                .is_some_and(|r| r.token == req.token);
        if !ours {
            return Ok(None);
        }
        let now = Instant::now();
        let run = state.run;
        let data = &mut state.data.cron;
        let job = data.jobs.entry(req.keys.job.clone()).or_default();
        let history = data.histories.entry(req.keys.history.clone()).or_default();
        if !data.marked.contains(&req.keys.job) {
            data.marked.insert(req.keys.job.clone());
            job.since = req.floor_ms;
            job.since_token = None;
            job.run = Some(run);
        } else if job.run != Some(run) {
            if job.run.is_some() {
                // Restored: only the leader of the saved claim may look back.
                job.since = req.restore_floor_ms;
                job.since_token = job.claim.map(|(_, token)| token);
            } else if job.last.is_none() && job.claim.is_none() {
                // Lost on its own while marked (as claim.lua): nobody may
                // look back before the restore floor.
                job.since = req.restore_floor_ms;
                job.since_token = None;
            } else {
                job.since = 0;
                job.since_token = None;
            }
            job.run = Some(run);
        }
        if job.busy.as_ref().is_some_and(|(_, until)| *until <= now) {
            job.busy = None;
        }
        let record = |history: &mut VecDeque<String>, tick: i64, outcome: &str| {
            let entry = format!(
                "{tick}\t{}\t{}\t0\t{outcome}\t{}\t",
                req.token, req.clock_ms, req.id
            );
            push(history, entry, req.history_len);
        };
        // Nothing decided yet: no tick from before the job was built.
        let created = job.last.is_none().then_some(req.created_ms);
        let mut out = Vec::with_capacity(req.ticks.len());
        for &(tick, mode) in req.ticks {
            let refused = tick < job.since && job.since_token != Some(req.token);
            let busy = req.skip_overlap && job.busy.is_some();
            // As claim.lua: ours only while still the newest decided tick.
            let r = if mode.runs()
                && job.claim == Some((tick, req.token))
                && job.claimer == Some(req.claimer)
                && job.last == Some(tick)
            {
                Claimed::Ours
            } else if job.last.is_some_and(|last| tick <= last)
                || created.is_some_and(|created| tick < created)
            {
                Claimed::Taken
            } else if mode == Mode::CatchUp && busy && !refused {
                Claimed::Wait
            } else {
                job.last = Some(tick);
                if refused {
                    record(history, tick, "missed");
                    Claimed::Refused
                } else if mode == Mode::Miss {
                    record(history, tick, "missed");
                    Claimed::Missed
                } else if busy {
                    record(history, tick, "skipped-overlap");
                    Claimed::Busy
                } else {
                    job.claim = Some((tick, req.token));
                    job.claimer = Some(req.claimer);
                    if req.skip_overlap {
                        job.busy = Some((busy_mark(tick, req.token), now + req.busy_ttl));
                    }
                    Claimed::New
                }
            };
            out.push(r);
        }
        Ok(Some(out))
    }

    pub(in crate::backend) fn cron_keep(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        ttl: Duration,
    ) -> Result<bool> {
        self.check_available(group)?;
        let mut state = self.state();
        let busy = state
            .data
            .cron
            .jobs
            .get_mut(&keys.job)
            .and_then(|job| job.busy.as_mut())
            .filter(|(m, _)| m == mark);
        Ok(match busy {
            Some((_, until)) => {
                *until = Instant::now() + ttl;
                true
            }
            None => false,
        })
    }

    pub(in crate::backend) fn cron_done(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        entry: &str,
        len: usize,
    ) -> Result<()> {
        self.check_available(group)?;
        let mut state = self.state();
        let data = &mut state.data.cron;
        if let Some(job) = data.jobs.get_mut(&keys.job) {
            if job.busy.as_ref().is_some_and(|(m, _)| m == mark) {
                job.busy = None;
            }
        }
        let history = data.histories.entry(keys.history.clone()).or_default();
        push(history, entry.to_owned(), len);
        Ok(())
    }

    pub(in crate::backend) fn cron_history(
        &self,
        group: &str,
        keys: &JobKeys,
    ) -> Result<Vec<String>> {
        self.check_available(group)?;
        let state = self.state();
        Ok(state
            .data
            .cron
            .histories
            .get(&keys.history)
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default())
    }
}
