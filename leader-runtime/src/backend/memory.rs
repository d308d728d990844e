//! The in-memory backend: the lease protocol inside one process, on tokio's clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Acquire, NoticeSink, Op, Renew};
use crate::names::GroupKeys;
use crate::{Error, Result};

/// An in-process lease store with the same semantics as the Redis backend
/// (TTL, compare-and-set, fencing tokens, release notices), driven by tokio's
/// clock so tests can pause and advance time.
///
/// Clone it and give each clone to a [`Runtime`](crate::Runtime) to play
/// several instances in one process — the quickstart does that.
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
/// let a_ran = a.run_if_leader("jobs", || async { 1 }).await;
/// let b_ran = b.run_if_leader("jobs", || async { 2 }).await;
/// assert_eq!(a_ran, Some(1)); // the first to ask won the lease
/// assert_eq!(b_ran, None);
/// assert_eq!(b.leader_id("jobs").await?.as_deref(), Some("a"));
/// # a.shutdown().await;
/// # b.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    available: AtomicBool,
    notices: broadcast::Sender<(String, String)>,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, (String, Instant)>,
    tokens: HashMap<String, u64>,
    /// Keys set with [`MemoryBackend::claim`] (`SET NX PX`), with their expiry.
    claims: HashMap<String, Instant>,
    /// Whether data was ever lost ([`MemoryBackend::flush`]): only then can a
    /// missing token counter hide an earlier leader.
    flushed: bool,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend};
    ///
    /// let config = Config::builder().memory(MemoryBackend::new()).build()?;
    /// # drop(config);
    /// # Ok::<(), leader_runtime::Error>(())
    /// ```
    pub fn new() -> Self {
        let (notices, _) = broadcast::channel(1024);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                available: AtomicBool::new(true),
                notices,
            }),
        }
    }

    /// Simulate an outage: while unavailable every call fails with
    /// [`Error::Backend`] (leases keep expiring on the clock).
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).build()?)?;
    /// backend.set_available(false);
    /// assert!(runtime.leader_id("jobs").await.is_err());
    /// backend.set_available(true);
    /// assert_eq!(runtime.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_available(&self, available: bool) {
        self.inner.available.store(available, Ordering::SeqCst);
    }

    /// Simulate a server that lost its data: every lease and token counter is
    /// gone, and the next leader of each group waits one ttl before its view
    /// turns true (safe start). A new `MemoryBackend` never had an earlier
    /// leader, so its first elections do not wait.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// backend.flush(); // as a Redis restarted without persistence
    /// assert_eq!(runtime.leader_id("jobs").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush(&self) {
        let mut state = self.state();
        state.leases.clear();
        state.tokens.clear();
        state.claims.clear();
        state.flushed = true;
    }

    /// Write a lease directly, as another party would (`SET key holder PX ttl`),
    /// e.g. to test what a leader does when someone else overwrites its lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let backend = MemoryBackend::new();
    /// let runtime = Runtime::new(Config::builder().memory(backend.clone()).instance_id("a").build()?)?;
    /// runtime.run_if_leader("jobs", || async {}).await;
    /// backend.overwrite("leader", "jobs", "intruder", Duration::from_secs(60));
    /// assert_eq!(runtime.leader_id("jobs").await?.as_deref(), Some("intruder"));
    /// // a's next renew finds it and ends a's view (LostReason::Superseded).
    /// # Ok(())
    /// # }
    /// ```
    pub fn overwrite(&self, key_prefix: &str, group: &str, holder: &str, ttl: Duration) {
        let keys = GroupKeys::new(key_prefix, group);
        self.state()
            .leases
            .insert(keys.lease, (holder.to_owned(), Instant::now() + ttl));
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The lock guards plain maps whose invariants hold between statements.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn check_available(&self, group: &str) -> Result<()> {
        if self.inner.available.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::Backend {
                group: group.to_owned(),
                message: "memory backend is unavailable (simulated outage)".to_owned(),
            })
        }
    }

    /// The live holder of `key` and its expiry, dropping it if expired.
    fn live<'s>(state: &'s mut State, key: &str) -> Option<&'s (String, Instant)> {
        let now = Instant::now();
        if state.leases.get(key).is_some_and(|(_, exp)| *exp <= now) {
            state.leases.remove(key);
        }
        state.leases.get(key)
    }

    pub(super) fn acquire(&self, op: &Op<'_>, ttl: Duration) -> Result<Acquire> {
        self.check_available(op.group)?;
        let mut state = self.state();
        if let Some((holder, exp)) = Self::live(&mut state, &op.keys.lease) {
            if holder != op.id {
                let pttl = exp.saturating_duration_since(Instant::now());
                return Ok(Acquire::Held {
                    holder: holder.clone(),
                    pttl: Some(pttl),
                });
            }
        }
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or_default();
        let (token, fresh) = match state.tokens.get(&op.keys.token) {
            Some(last) => (last.saturating_add(1).max(now_us), false),
            // A new store had no earlier leader; a flushed one may have.
            None => (now_us, state.flushed),
        };
        state.tokens.insert(op.keys.token.clone(), token);
        state.leases.insert(
            op.keys.lease.clone(),
            (op.id.to_owned(), Instant::now() + ttl),
        );
        Ok(Acquire::Won { token, fresh })
    }

    pub(super) fn renew(&self, op: &Op<'_>, ttl: Duration) -> Result<Renew> {
        self.check_available(op.group)?;
        let mut state = self.state();
        let found = Self::live(&mut state, &op.keys.lease).map(|(h, _)| h == op.id);
        Ok(match found {
            Some(true) => {
                state.leases.insert(
                    op.keys.lease.clone(),
                    (op.id.to_owned(), Instant::now() + ttl),
                );
                Renew::Renewed
            }
            Some(false) => Renew::Other,
            None => Renew::Gone,
        })
    }

    pub(super) fn release(&self, op: &Op<'_>, channel: &str) -> Result<bool> {
        self.check_available(op.group)?;
        let mut state = self.state();
        let ours = Self::live(&mut state, &op.keys.lease).is_some_and(|(h, _)| h == op.id);
        if ours {
            state.leases.remove(&op.keys.lease);
            drop(state);
            // No receiver is fine: nobody waits.
            let _ = self
                .inner
                .notices
                .send((channel.to_owned(), format!("{} {}", op.group, op.id)));
        }
        Ok(ours)
    }

    pub(super) fn holder(&self, group: &str, keys: &GroupKeys) -> Result<Option<String>> {
        self.check_available(group)?;
        let mut state = self.state();
        Ok(Self::live(&mut state, &keys.lease).map(|(h, _)| h.clone()))
    }

    #[cfg(feature = "cron")]
    pub(super) fn claim(
        &self,
        group: &str,
        key: &str,
        _value: &str,
        ttl: Duration,
    ) -> Result<bool> {
        self.check_available(group)?;
        let now = Instant::now();
        let mut state = self.state();
        state.claims.retain(|_, expires| *expires > now);
        if state.claims.contains_key(key) {
            return Ok(false);
        }
        state.claims.insert(key.to_owned(), now + ttl);
        Ok(true)
    }

    pub(super) fn spawn_notices(
        &self,
        channel: String,
        sink: NoticeSink,
        up: Arc<AtomicBool>,
        stop: CancellationToken,
    ) {
        let mut rx = self.inner.notices.subscribe();
        up.store(true, Ordering::SeqCst);
        tokio::spawn(async move {
            loop {
                let received = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = rx.recv() => r,
                };
                match received {
                    Ok((ch, payload)) if ch == channel => {
                        if let Some((group, by)) = crate::names::parse_notice(&payload) {
                            sink(group, by);
                        }
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
}
