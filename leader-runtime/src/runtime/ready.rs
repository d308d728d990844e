//! Fail fast at start-up: [`Runtime::ready`] waits for the first contact with
//! the backend and the first election round of the groups, and returns the
//! error when there is one.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::group::Group;
use crate::runtime::Runtime;
use crate::{Error, Result};

/// How often a group whose first round failed is checked again (its
/// election retries every `retry_interval` meanwhile).
const RECHECK: Duration = Duration::from_millis(20);

impl Runtime {
    /// Wait until this runtime has reached its backend and every group used
    /// so far has finished an election round without an error — at most
    /// `timeout`. Call it at start-up, after registering the groups the
    /// process needs (e.g. with [`ready_for`](Self::ready_for)), so that a
    /// wrong password or an unreachable Redis stops the deploy instead of
    /// leaving an instance that never leads.
    ///
    /// "Ready" means the backend answered and each group knows who leads
    /// (this instance, or another one); it does not mean this instance
    /// leads. A group taken out of the race with
    /// [`set_eligible(group, false)`](Self::set_eligible) counts as ready.
    ///
    /// Errors that no retry fixes return at once; the others are retried
    /// (every `retry_interval`: Redis may still be starting) until the
    /// timeout. The elections go on either way: `ready` only watches.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// runtime.ready_for(["reports", "cleanup"], Duration::from_secs(10)).await?;
    /// assert_eq!(runtime.status().len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - at once: [`Error::Misconfigured`] (Redis refused the credentials,
    ///   an ACL rule, the database or the Sentinel master name: see its
    ///   `hint`), [`Error::ShutDown`];
    /// - after `timeout`: [`Error::NotReady`] with the last error seen (the
    ///   connection's, or a group's; [`Error::Timeout`] when a round never
    ///   finished).
    ///
    /// [`Error::is_config`] tells the two kinds apart.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn ready(&self, timeout: Duration) -> Result<()> {
        let groups = self.groups();
        self.await_ready(groups, timeout).await
    }

    /// [`ready`](Self::ready) for these groups: registers each (starting its
    /// election, as their first use would) and waits for the backend and
    /// their first rounds; other groups are not waited for.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGroup`] at once for a name that is not a group name;
    /// otherwise as [`ready`](Self::ready).
    pub async fn ready_for<'a, I>(&self, groups: I, timeout: Duration) -> Result<()>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let groups = groups
            .into_iter()
            .map(|name| self.group(name))
            .collect::<Result<Vec<_>>>()?;
        self.await_ready(groups, timeout).await
    }

    async fn await_ready(&self, groups: Vec<Arc<Group>>, timeout: Duration) -> Result<()> {
        // `Duration::MAX` (wait for good) must not overflow the clock.
        let deadline = crate::util::clock::deadline_in(timeout);
        let not_ready = |last: Error| Error::NotReady {
            after: timeout,
            source: Box::new(last),
        };
        if let Err(last) = self.contact(deadline).await {
            return Err(if last.is_config() || matches!(last, Error::ShutDown) {
                last
            } else {
                not_ready(last)
            });
        }
        for group in groups {
            let mut last = None;
            loop {
                if !self.is_running() {
                    return Err(Error::ShutDown);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if group.control.first_round(left).await {
                    match group.observed.failure() {
                        None => break,
                        Some(e) if e.is_config() => return Err(e),
                        Some(e) => last = Some(e),
                    }
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(not_ready(last.unwrap_or_else(|| Error::Timeout {
                        group: group.name.to_string(),
                        after: timeout,
                    })));
                }
                tokio::time::sleep(RECHECK.min(left)).await;
            }
        }
        Ok(())
    }

    /// One answer from the backend before `deadline`, retried every
    /// `retry_interval`: `Err` with the last error otherwise (at once when
    /// no retry can help).
    async fn contact(&self, deadline: Instant) -> Result<()> {
        let config = self.config();
        let backend = &self.ctx().backend;
        let no_answer = |after: Duration| Error::Connection {
            message: format!("no answer within {after:?}"),
            source: None,
        };
        let mut last = None;
        loop {
            if !self.is_running() {
                return Err(Error::ShutDown);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(last.unwrap_or_else(|| no_answer(left)));
            }
            let limit = config.call_timeout().min(left);
            let error = match tokio::time::timeout(limit, backend.ping()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if e.is_config() => return Err(e),
                Ok(Err(e)) => e,
                Err(_) => no_answer(limit),
            };
            // The first failure: is it a Redis at all? (PostgreSQL's port,
            // an HTTP server: no retry helps, say so at once.)
            if last.is_none() {
                if let crate::config::BackendConfig::Redis(redis) = &config.backend {
                    if let Some(e) = crate::backend::probe::not_redis(&redis.urls, limit).await {
                        tracing::error!(error = %e, "the Redis URL points at a server that is not Redis");
                        return Err(e);
                    }
                }
            }
            tracing::debug!(%error, "not ready yet: the backend did not answer; retrying");
            last = Some(error);
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(config.retry_interval().min(left)).await;
        }
    }
}

#[cfg(test)]
#[path = "ready_tests.rs"]
mod tests;
