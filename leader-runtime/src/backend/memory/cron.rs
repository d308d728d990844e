//! The rules of `claim.lua`, `cron_start.lua` and `cron_run.lua`, in memory.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::super::cron::{busy_mark, Abandoned, ClaimRequest, Claimed, JobKeys, Mode};
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
    /// Tests: the instance whose claims apply at once but whose replies
    /// arrive this much later.
    #[cfg(test)]
    slow_claims: Option<(String, Duration)>,
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
    /// Claims whose run has not ended, by tick (`pending:<tick>`).
    pending: BTreeMap<i64, Pending>,
}

/// A claim whose run has not ended (`pending:<tick>` of `claim.lua`).
#[derive(Debug, Clone)]
struct Pending {
    token: u64,
    claimer: u64,
    /// Its body started (`cron_start.lua`).
    started: bool,
    /// The claimer's clock at the claim, unix ms.
    clock_ms: i64,
    instance: String,
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

    /// Tests: from now on the cron claims of instance `id` apply at once
    /// but their replies arrive `delay` later (`None`: nobody's).
    #[cfg(test)]
    pub(crate) fn delay_cron_claim_replies(&self, id: Option<(&str, Duration)>) {
        self.state().data.cron.slow_claims = id.map(|(id, delay)| (id.to_owned(), delay));
    }

    /// Tests: how late the cron claim replies of instance `id` arrive.
    #[cfg(test)]
    pub(in crate::backend) fn cron_claim_reply_delay(&self, id: &str) -> Option<Duration> {
        self.state()
            .data
            .cron
            .slow_claims
            .as_ref()
            .filter(|(slow, _)| slow == id)
            .map(|(_, delay)| *delay)
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
        let abandoned = |history: &mut VecDeque<String>, tick: i64, p: &Pending| {
            let entry = format!(
                "{tick}\t{}\t{}\t0\tabandoned\t{}\t",
                p.token, p.clock_ms, p.instance
            );
            push(history, entry, req.history_len);
        };
        // As claim.lua: claims of older tokens, never started.
        let first = req.ticks.first().map(|&(tick, _)| tick);
        let ticks: Vec<i64> = job.pending.keys().copied().collect();
        for tick in ticks {
            let Some(p) = job.pending.get(&tick).cloned() else {
                continue;
            };
            if p.token >= req.token {
                continue;
            }
            let mark = busy_mark(tick, p.token);
            if p.started {
                job.pending.remove(&tick);
            } else if first.is_some_and(|first| tick < first) {
                job.pending.remove(&tick);
                if job.busy.as_ref().is_some_and(|(m, _)| *m == mark) {
                    job.busy = None;
                }
                if tick >= job.since {
                    abandoned(history, tick, &p);
                }
                record(history, tick, "missed");
            } else if job.busy.as_ref().is_some_and(|(m, _)| *m == mark) {
                job.busy = None;
            }
        }
        // Nothing decided yet: no tick from before the job was built.
        let created = job.last.is_none().then_some(req.created_ms);
        let mut out = Vec::with_capacity(req.ticks.len());
        for &(tick, mode) in req.ticks {
            let refused = tick < job.since && job.since_token != Some(req.token);
            let busy = req.skip_overlap && job.busy.is_some();
            let own_mark = busy_mark(tick, req.token);
            let p = job.pending.get(&tick).filter(|p| !p.started).cloned();
            let mine = p
                .as_ref()
                .is_some_and(|p| p.token == req.token && p.claimer == req.claimer);
            let older = p.as_ref().is_some_and(|p| p.token < req.token);
            let other_busy = busy && job.busy.as_ref().is_some_and(|(m, _)| *m != own_mark);
            let r = if mine && mode.runs() && !other_busy {
                // As claim.lua: its busy mark again, if gone.
                if req.skip_overlap && job.busy.is_none() {
                    job.busy = Some((own_mark, now + req.busy_ttl));
                }
                Claimed::Ours
            } else if let Some(p) = p.filter(|_| mine || older) {
                if tick < job.since {
                    Self::unclaim(job, tick, &p);
                    record(history, tick, "missed");
                    Claimed::Refused
                } else if mode == Mode::CatchUp && busy {
                    Claimed::Wait
                } else {
                    Self::unclaim(job, tick, &p);
                    if older {
                        abandoned(history, tick, &p);
                    }
                    job.last = Some(job.last.map_or(tick, |last| last.max(tick)));
                    let busy = req.skip_overlap && job.busy.is_some();
                    if !mode.runs() {
                        record(history, tick, "missed");
                        Claimed::Missed
                    } else if busy {
                        record(history, tick, "skipped-overlap");
                        Claimed::Busy
                    } else {
                        Self::claimed(job, req, tick, now);
                        Claimed::New
                    }
                }
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
                    Self::claimed(job, req, tick, now);
                    Claimed::New
                }
            };
            out.push(r);
        }
        Ok(Some(out))
    }

    /// As `claim.lua`'s `unclaim`: drop the pending claim `p` of `tick`
    /// and its busy mark.
    fn unclaim(job: &mut Job, tick: i64, p: &Pending) {
        job.pending.remove(&tick);
        let mark = busy_mark(tick, p.token);
        if job.busy.as_ref().is_some_and(|(m, _)| *m == mark) {
            job.busy = None;
        }
    }

    /// As `claim.lua`'s `claimed`: claim `tick` to run.
    fn claimed(job: &mut Job, req: &ClaimRequest<'_>, tick: i64, now: Instant) {
        job.claim = Some((tick, req.token));
        job.claimer = Some(req.claimer);
        job.pending.insert(
            tick,
            Pending {
                token: req.token,
                claimer: req.claimer,
                started: false,
                clock_ms: req.clock_ms,
                instance: req.id.to_owned(),
            },
        );
        if req.skip_overlap {
            job.busy = Some((busy_mark(tick, req.token), now + req.busy_ttl));
        }
    }

    pub(in crate::backend) fn cron_start(
        &self,
        group: &str,
        keys: &JobKeys,
        id: &str,
        token: u64,
        tick_ms: i64,
        claimer: u64,
    ) -> Result<bool> {
        self.check_available(group)?;
        let mut state = self.state();
        let ours = Self::live(&mut state, &keys.group.lease).is_some_and(|(h, _)| h == id)
            && state
                .data
                .records
                .get(&keys.group.record)
                .is_some_and(|r| r.token == token);
        if !ours {
            return Ok(false);
        }
        let pending = state
            .data
            .cron
            .jobs
            .get_mut(&keys.job)
            .and_then(|job| job.pending.get_mut(&tick_ms))
            .filter(|p| p.token == token && p.claimer == claimer && !p.started);
        Ok(match pending {
            Some(p) => {
                p.started = true;
                true
            }
            None => false,
        })
    }

    pub(in crate::backend) fn cron_abandon(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        claimer: u64,
        entry: &str,
        len: usize,
    ) -> Result<Abandoned> {
        self.check_available(group)?;
        let mut state = self.state();
        let data = &mut state.data.cron;
        let Some(job) = data.jobs.get_mut(&keys.job) else {
            return Ok(Abandoned::Gone);
        };
        let Some((tick, p)) = job
            .pending
            .iter()
            .find(|(tick, p)| busy_mark(**tick, p.token) == mark && p.claimer == claimer)
            .map(|(tick, p)| (*tick, p.started))
        else {
            return Ok(Abandoned::Gone);
        };
        if job.busy.as_ref().is_some_and(|(m, _)| m == mark) {
            job.busy = None;
        }
        if !p {
            return Ok(Abandoned::Claimed);
        }
        job.pending.remove(&tick);
        let history = data.histories.entry(keys.history.clone()).or_default();
        push(history, entry.to_owned(), len);
        Ok(Abandoned::Started)
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
            // As cron_run.lua: the run's pending claim ends with it.
            job.pending
                .retain(|tick, p| busy_mark(*tick, p.token) != mark);
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
