//! The cron jobs built in this process, by runtime, group and name: a name
//! is used once per group and runtime, and `status()` lists the jobs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use super::{Missed, Overlap, Run, Shared};
use crate::runtime::global;
use crate::{Error, Result, Runtime};

/// (runtime id, or 0 for "the global one at each tick"; group; name)
type Key = (u64, String, String);

fn jobs() -> &'static Mutex<HashMap<Key, Weak<Shared>>> {
    static JOBS: OnceLock<Mutex<HashMap<Key, Weak<Shared>>>> = OnceLock::new();
    JOBS.get_or_init(Mutex::default)
}

/// A job's place in the registry, held by its scheduler job: dropping it
/// frees the name.
pub(super) struct Registration {
    key: Key,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut jobs = jobs().lock().unwrap_or_else(PoisonError::into_inner);
        if jobs.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            jobs.remove(&self.key);
        }
    }
}

pub(super) fn register(shared: &Arc<Shared>) -> Result<Registration> {
    let runtime = shared.runtime.as_ref().map_or(0, Runtime::id);
    let key = (runtime, shared.group.clone(), shared.name.clone());
    let mut jobs = jobs().lock().unwrap_or_else(PoisonError::into_inner);
    jobs.retain(|_, w| w.strong_count() > 0);
    if jobs.contains_key(&key) {
        return Err(Error::Config {
            field: "name",
            rule: format!(
                "must be unique in its group: group `{}` already has a cron job named `{}`",
                shared.group, shared.name
            ),
        });
    }
    jobs.insert(key.clone(), Arc::downgrade(shared));
    Ok(Registration { key })
}

/// A cron job as [`status()`](crate::Runtime::status) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStatus {
    /// The job's name.
    pub name: String,
    /// Its schedule, as given.
    pub schedule: String,
    /// The IANA time zone it is read in.
    pub time_zone: String,
    /// Its overlap policy.
    pub overlap: Overlap,
    /// Its missed-run policy.
    pub missed: Missed,
    /// The last runs this instance ran or skipped, newest first.
    pub recent: Vec<Run>,
}

/// The jobs of `group` on `runtime`, by name.
pub(crate) fn jobs_of(runtime: &Runtime, group: &str) -> Vec<JobStatus> {
    let is_global = global::existing().is_some_and(|g| g.id() == runtime.id());
    let found: Vec<Arc<Shared>> = {
        let jobs = jobs().lock().unwrap_or_else(PoisonError::into_inner);
        jobs.iter()
            .filter(|((rt, g, _), _)| {
                g == group && (*rt == runtime.id() || (*rt == 0 && is_global))
            })
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    };
    let mut out: Vec<JobStatus> = found
        .iter()
        .map(|s| JobStatus {
            name: s.name.clone(),
            schedule: s.schedule.clone(),
            time_zone: s.time_zone.name().to_owned(),
            overlap: s.overlap,
            missed: s.missed,
            recent: s
                .recent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned()
                .collect(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
