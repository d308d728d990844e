//! [`Runtime::status`]: each group's state with its cron jobs, read from
//! the jobs board (`observe::jobs`) that `cron` fills, so that the runtime
//! does not import `cron`, which builds on it.

use crate::group::status::GroupStatus;
use crate::Runtime;

impl Runtime {
    /// Each group this instance has used, sorted by name, with its state as
    /// this instance knows it: see [`GroupStatus`] for what is live and what
    /// is cached. Never touches the network, never waits on an election.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let shared = MemoryBackend::new();
    /// let a = Runtime::new(Config::builder().memory(shared.clone()).instance_id("a").build()?)?;
    /// let b = Runtime::new(Config::builder().memory(shared.clone()).instance_id("b").build()?)?;
    /// a.run_if_leader("reports", || async {}).await;
    /// b.run_if_leader("reports", || async {}).await;
    /// let seen_by_b = &b.status()[0];
    /// assert!(!seen_by_b.is_leader);
    /// assert_eq!(seen_by_b.leader_id.as_deref(), Some("a")); // from b's last acquire reply
    /// # a.shutdown().await;
    /// # b.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn status(&self) -> Vec<GroupStatus> {
        let groups = self.groups();
        let mut status: Vec<GroupStatus> = groups
            .iter()
            .map(|g| g.status(self.instance_id()))
            .collect();
        #[cfg(feature = "cron")]
        let is_global = super::global::existing().is_some_and(|g| g.id() == self.id());
        #[cfg(feature = "cron")]
        for s in &mut status {
            s.cron_jobs = crate::observe::jobs::jobs_of(self.id(), is_global, &s.group);
        }
        status.sort_by(|a, b| a.group.cmp(&b.group));
        status
    }
}
