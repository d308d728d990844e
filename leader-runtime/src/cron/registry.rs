//! The cron jobs built in this process on the jobs board
//! (`observe::jobs`), by runtime, group and name: a name is used once per
//! group and runtime, and `status()` lists the jobs.

use std::sync::{Arc, PoisonError};

use super::{JobShared, JobStatus};
use crate::observe::jobs::{self, BoardPlace, JobSource};
use crate::{Result, Runtime};

impl JobSource for JobShared {
    fn status(&self) -> JobStatus {
        JobStatus {
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            time_zone: self.time_zone.name().to_owned(),
            overlap: self.overlap,
            missed: self.missed,
            recent: self
                .recent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned()
                .collect(),
        }
    }
}

/// Put the job on the board (its runtime's id; 0: the process-wide one at
/// each tick), held by its scheduler job: dropping it frees the name.
pub(super) fn register(shared: &Arc<JobShared>) -> Result<BoardPlace> {
    let runtime = shared.runtime.as_ref().map_or(0, Runtime::id);
    let weak: std::sync::Weak<dyn JobSource> = Arc::downgrade(shared) as _;
    jobs::register(runtime, &shared.group, &shared.name, weak)
}
