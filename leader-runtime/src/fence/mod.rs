//! Fenced writes: Redis writes that apply only while no newer leader of the
//! group exists, whatever this instance's local view believes.
//!
//! A leader can be paused (a GC pause, `SIGSTOP`, a VM migration) or cut off
//! after its body was admitted, and write when it resumes — after its lease
//! expired and another instance was elected. Every election raises the
//! group's *high-water mark* in Redis (the last fencing token issued, in the
//! group's record); a fenced write is one Lua script that compares the
//! writer's token with that mark and writes only if the token is not below
//! it, in the same atomic step. A deposed leader is locked out from the
//! moment its successor is elected, before the successor writes anything.
//! A record the server does not vouch for (restored from an older snapshot,
//! promoted from a lagging replica), or none at all, refuses every write
//! until the next election: its mark may be older than tokens issued since.
//!
//! Get a [`Fence`] from the lease of a gated body
//! ([`Lease::fence`](crate::Lease::fence)); name the keys you write with
//! [`Fence::key`], which puts them in the group's hash slot (Redis Cluster
//! runs a script only on keys of one slot; a key of another slot is refused
//! with [`Error::KeySlot`] before anything is sent, on every backend, so code
//! tested on one server or in memory also runs on a cluster).
//!
//! ```no_run
//! use leader_runtime::{leader_only, Fenced};
//!
//! #[leader_only(group = "cleanup")]
//! async fn purge() -> leader_runtime::Result<()> {
//!     let fence = leader_runtime::current_lease().unwrap().fence();
//!     // … the long part of the job …
//!     match fence.set(fence.key("state"), "purged").await? {
//!         Fenced::Applied(()) => {}
//!         Fenced::Stale { mark, .. } => {
//!             tracing::warn!(?mark, "a newer leader exists: stopping");
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Each write costs one round trip to Redis (a script call, `EVALSHA`).
//! Stores other than Redis fence the same way with the token of
//! [`Lease::token`](crate::Lease::token): see the crate docs'
//! [Fencing](crate#fencing) section for SQL and HTTP.

use std::time::Duration;

pub use crate::backend::fence::Reply;
use crate::backend::fence::{self as backend, Call, Outcome, Target, Write};
use crate::backend::slot;
use crate::{Error, Lease, Result};

impl Lease {
    /// Writes to Redis (over the runtime's own connection) that apply only
    /// while no newer leader of this group exists: see [`Fence`] and the
    /// crate docs' [Fencing](crate#fencing) section.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use leader_runtime::Fenced;
    ///
    /// #[leader_runtime::leader_only(group = "cleanup")]
    /// async fn cleanup() -> leader_runtime::Result<()> {
    ///     let fence = leader_runtime::current_lease().unwrap().fence();
    ///     match fence.set(fence.key("state"), "v").await? {
    ///         Fenced::Applied(()) => {}
    ///         Fenced::Stale { .. } => { /* a newer leader exists: stop */ }
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn fence(&self) -> Fence {
        Fence::new(self.clone())
    }
}

/// What a fenced write did.
///
/// # Examples
///
/// ```no_run
/// use leader_runtime::Fenced;
///
/// # async fn example() -> leader_runtime::Result<()> {
/// let fence = leader_runtime::current_lease().unwrap().fence();
/// match fence.incr(fence.key("done"), 1).await? {
///     Fenced::Applied(n) => println!("{n} done"),
///     Fenced::Stale { token, mark, .. } => {
///         // `mark` (the last token issued) is above `token`: stop.
///         println!("deposed: token {token}, a newer leader has {mark:?}");
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a stale write was not applied: check for Fenced::Stale"]
pub enum Fenced<T> {
    /// The token was current: the write was applied; the write's reply.
    Applied(T),
    /// A newer leader of the group exists: nothing was written.
    #[non_exhaustive]
    Stale {
        /// The token the write carried (this leadership's).
        token: u64,
        /// The group's high-water mark: the last token issued. `None` when
        /// the server has no record of the group (it lost its data), or one
        /// it does not vouch for (restarted from an older RDB or AOF file,
        /// promoted from a lagging replica, restored: a later token may
        /// have been issued and lost): no token can be vouched for until
        /// the next election, so every fenced write is refused until then
        /// (fail closed; the leader's renewal fails there too, and it
        /// acquires again with a safe start).
        mark: Option<u64>,
    },
}

impl<T> Fenced<T> {
    /// Whether the write was applied.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(leader_runtime::Fenced::Applied(()).is_applied());
    /// ```
    pub fn is_applied(&self) -> bool {
        matches!(self, Fenced::Applied(_))
    }

    /// The write's reply, if it was applied.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(leader_runtime::Fenced::Applied(true).applied(), Some(true));
    /// ```
    pub fn applied(self) -> Option<T> {
        match self {
            Fenced::Applied(v) => Some(v),
            Fenced::Stale { .. } => None,
        }
    }

    fn map<U>(self, f: impl FnOnce(T) -> U) -> Fenced<U> {
        match self {
            Fenced::Applied(v) => Fenced::Applied(f(v)),
            Fenced::Stale { token, mark } => Fenced::Stale { token, mark },
        }
    }
}

/// A Lua script body of your own that runs only after the fence check let
/// the write through, in the same `EVAL` (so atomically with it). Build it
/// once (a `static` with [`LazyLock`](std::sync::LazyLock)) and run it with
/// [`Fence::eval`].
///
/// The body sees its own keys and arguments as `KEYS` and `ARGV` (the
/// record key and the token are not among them); what it returns is the
/// [`Reply`] of [`Fenced::Applied`]. Runs on Redis only: the memory backend
/// checks the token, then fails an applicable call with [`Error::Backend`].
///
/// # Examples
///
/// ```no_run
/// use std::sync::LazyLock;
/// use leader_runtime::fence::{FencedScript, Reply};
/// use leader_runtime::Fenced;
///
/// // Move a job from one list to another, fenced.
/// static MOVE: LazyLock<FencedScript> = LazyLock::new(|| {
///     FencedScript::new("return redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')")
/// });
///
/// # async fn example() -> leader_runtime::Result<()> {
/// let fence = leader_runtime::current_lease().unwrap().fence();
/// let (todo, doing) = (fence.key("todo"), fence.key("doing"));
/// if let Fenced::Applied(Reply::Data(job)) = fence.eval(&MOVE, &[&todo, &doing], &[]).await? {
///     println!("took {}", String::from_utf8_lossy(&job));
/// }
/// # Ok(())
/// # }
/// ```
pub struct FencedScript {
    script: redis::Script,
}

impl FencedScript {
    /// A fenced script running `body` (Lua) after the check.
    ///
    /// # Examples
    ///
    /// ```
    /// let script = leader_runtime::fence::FencedScript::new("return ARGV[1]");
    /// # drop(script);
    /// ```
    pub fn new(body: &str) -> Self {
        Self {
            script: backend::user_script(body),
        }
    }
}

impl std::fmt::Debug for FencedScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedScript")
            .field("sha1", &self.script.get_hash())
            .finish()
    }
}

/// Fenced writes of one leadership, over the runtime's own Redis connection
/// (or memory backend): each is one script call that applies the write only
/// if this leadership's token is not below the group's high-water mark, and
/// otherwise returns [`Fenced::Stale`] with the mark.
///
/// Get it with [`Lease::fence`]. Cheap to clone. A fenced write is valid
/// even after the local view ended — that is the point: if no newer leader
/// was elected meanwhile, the write is still safe and applies.
///
/// # Errors
///
/// Every write fails with [`Error::KeySlot`] if a key is not in the group's
/// hash slot (nothing is sent), [`Error::Timeout`] after the config's
/// `call_timeout`, and [`Error::Backend`] / [`Error::Protocol`] for Redis's
/// errors (`WRONGTYPE`, a malformed record …). After an error or a timeout
/// the write may or may not have been applied, as with any Redis call.
///
/// # Examples
///
/// ```
/// use leader_runtime::{Config, Fenced, MemoryBackend, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leader_runtime::Error> {
/// let shared = MemoryBackend::new();
/// let a = Runtime::new(Config::builder().memory(shared.clone()).instance_id("a").build()?)?;
/// let b = Runtime::new(Config::builder().memory(shared.clone()).instance_id("b").build()?)?;
/// let lease = a.run_if_leader("jobs", || async { leader_runtime::current_lease() }).await.flatten().unwrap();
/// let old = lease.fence();
/// assert_eq!(old.set(old.key("state"), "a").await?, Fenced::Applied(()));
///
/// a.shutdown().await; // b is elected: the mark is raised to b's token
/// let b_token = b.run_if_leader("jobs", || async { leader_runtime::current_lease().unwrap().token() }).await.unwrap();
///
/// match old.set(old.key("state"), "late").await? {
///     Fenced::Stale { mark, .. } => assert_eq!(mark, Some(b_token)),
///     Fenced::Applied(()) => unreachable!("a deposed leader wrote"),
/// }
/// assert_eq!(shared.get("leader:{jobs}:state").as_deref(), Some(&b"a"[..]));
/// # b.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Fence {
    lease: Lease,
}

impl Fence {
    pub(crate) fn new(lease: Lease) -> Self {
        Self { lease }
    }

    fn target(&self) -> Result<&Target> {
        match self.lease.tenure.fence.get() {
            Some(target) => Ok(target),
            None => {
                // Every lease handed out comes from a begun leadership, which
                // has its target: this is a bug, fail closed.
                tracing::error!(group = self.lease.group(), "fenced write without a backend");
                Err(Error::backend(
                    self.lease.group(),
                    "this lease has no backend to fence writes with",
                ))
            }
        }
    }

    /// The token every write of this fence carries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let lease = leader_runtime::current_lease().unwrap();
    /// assert_eq!(lease.fence().token(), lease.token());
    /// ```
    pub fn token(&self) -> u64 {
        self.lease.token()
    }

    /// The name of key `name` in the group's hash slot:
    /// `<key_prefix>:{<group>}:<name>` (with the defaults,
    /// `fence.key("state")` in group `cleanup` is `leader:{cleanup}:state`).
    /// Any key whose first `{…}` is `{<group>}` is in that slot.
    ///
    /// The runtime keeps some names for itself: `lease`, `token`, `paused`,
    /// `result`, `heir`, and any starting with `cron:` or `cron-history:`. A fenced
    /// write to such a key (of any group) is refused with
    /// [`Error::ReservedKey`] before anything is sent: writing the pause key
    /// would pause the group fleet-wide, writing the record would corrupt
    /// its tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::{Config, MemoryBackend, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leader_runtime::Error> {
    /// let runtime = Runtime::new(Config::builder().memory(MemoryBackend::new()).build()?)?;
    /// let key = runtime
    ///     .run_if_leader("cleanup", || async { leader_runtime::current_lease().unwrap().fence().key("state") })
    ///     .await;
    /// assert_eq!(key.as_deref(), Some("leader:{cleanup}:state"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn key(&self, name: &str) -> String {
        let prefix = match self.lease.tenure.fence.get() {
            Some(target) => &*target.prefix,
            None => crate::config::DEFAULT_KEY_PREFIX,
        };
        format!("{prefix}:{{{}}}:{name}", self.lease.group())
    }

    /// `SET key value` (removing any expiry), if the token is current.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> leader_runtime::Result<()> {
    /// let fence = leader_runtime::current_lease().unwrap().fence();
    /// if !fence.set(fence.key("state"), "v").await?.is_applied() {
    ///     return Ok(()); // a newer leader exists: stop
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`Fence`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the write applied.
    pub async fn set(&self, key: impl AsRef<str>, value: impl AsRef<[u8]>) -> Result<Fenced<()>> {
        let write = Write::Set {
            key: key.as_ref(),
            value: value.as_ref(),
        };
        Ok(self.run(write).await?.map(drop))
    }

    /// `DEL key`, if the token is current; applied with whether it existed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> leader_runtime::Result<()> {
    /// let fence = leader_runtime::current_lease().unwrap().fence();
    /// let existed = fence.delete(fence.key("lock")).await?.applied();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`Fence`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the write applied.
    pub async fn delete(&self, key: impl AsRef<str>) -> Result<Fenced<bool>> {
        let reply = self.run(Write::Delete { key: key.as_ref() }).await?;
        Ok(reply.map(|r| r.int() == Some(1)))
    }

    /// `HSET key field value`, if the token is current; applied with
    /// whether the field is new.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> leader_runtime::Result<()> {
    /// let fence = leader_runtime::current_lease().unwrap().fence();
    /// fence.hset(fence.key("progress"), "page", "17").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`Fence`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the write applied.
    pub async fn hset(
        &self,
        key: impl AsRef<str>,
        field: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<Fenced<bool>> {
        let write = Write::HSet {
            key: key.as_ref(),
            field: field.as_ref(),
            value: value.as_ref(),
        };
        Ok(self.run(write).await?.map(|r| r.int() == Some(1)))
    }

    /// `INCRBY key by`, if the token is current; applied with the new value
    /// (exact over the whole `i64` range).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> leader_runtime::Result<()> {
    /// let fence = leader_runtime::current_lease().unwrap().fence();
    /// let purged = fence.incr(fence.key("purged"), 42).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`Fence`]; [`Error::Backend`] if the value is not an integer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the write applied.
    pub async fn incr(&self, key: impl AsRef<str>, by: i64) -> Result<Fenced<i64>> {
        let group = self.lease.group();
        let reply = self.run(Write::Incr {
            key: key.as_ref(),
            by,
        });
        match reply.await? {
            Fenced::Applied(r) => match r.int() {
                Some(n) => Ok(Fenced::Applied(n)),
                None => Err(Error::Protocol {
                    group: group.to_owned(),
                    message: format!("fenced incr returned {r:?}"),
                }),
            },
            Fenced::Stale { token, mark } => Ok(Fenced::Stale { token, mark }),
        }
    }

    /// `PEXPIRE key ttl`, if the token is current; applied with whether
    /// the key exists (and so now expires).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> leader_runtime::Result<()> {
    /// use std::time::Duration;
    /// let fence = leader_runtime::current_lease().unwrap().fence();
    /// fence.expire(fence.key("state"), Duration::from_secs(3600)).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`Fence`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the write applied.
    pub async fn expire(&self, key: impl AsRef<str>, ttl: Duration) -> Result<Fenced<bool>> {
        let write = Write::Expire {
            key: key.as_ref(),
            ttl,
        };
        Ok(self.run(write).await?.map(|r| r.int() == Some(1)))
    }

    /// Run `script` with `keys` and `args`, if the token is current; applied
    /// with what it returned.
    ///
    /// # Examples
    ///
    /// See [`FencedScript`].
    ///
    /// # Errors
    ///
    /// See [`Fence`]; [`Error::Backend`] if the script fails (what it wrote
    /// before the error stays written, as with any Redis script), or on the
    /// memory backend when the token is current (it runs no Lua).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not leave the script run.
    pub async fn eval(
        &self,
        script: &FencedScript,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Fenced<Reply>> {
        self.run(Write::Script {
            script: &script.script,
            keys,
            args,
        })
        .await
    }

    async fn run(&self, write: Write<'_>) -> Result<Fenced<Reply>> {
        let target = self.target()?;
        let group = self.lease.group();
        let token = self.lease.token();
        for key in write.keys() {
            if slot(key.as_bytes()) != target.slot {
                tracing::warn!(
                    group,
                    key,
                    "fenced write refused: key outside the group's hash slot"
                );
                return Err(Error::KeySlot {
                    group: group.to_owned(),
                    key: (*key).to_owned(),
                });
            }
        }
        if let Some(key) = write
            .keys()
            .iter()
            .find(|k| crate::names::reserved_key(&target.prefix, k))
        {
            tracing::warn!(
                group,
                key,
                "fenced write refused: the runtime keeps that key for itself"
            );
            return Err(Error::ReservedKey {
                group: group.to_owned(),
                key: (*key).to_owned(),
            });
        }
        let op = write.name();
        let call = Call {
            group,
            record: &target.record,
            token,
            write,
        };
        let outcome = tokio::time::timeout(target.timeout, target.backend.fenced(&call)).await;
        match outcome {
            Ok(Ok(Outcome::Applied(reply))) => Ok(Fenced::Applied(reply)),
            Ok(Ok(Outcome::Stale(mark))) => {
                tracing::warn!(
                    group,
                    token,
                    ?mark,
                    op,
                    "fenced write refused: a newer leader exists"
                );
                Ok(Fenced::Stale { token, mark })
            }
            Ok(Err(e)) => {
                tracing::warn!(group, token, op, error = %e, "fenced write failed");
                Err(e)
            }
            Err(_) => {
                tracing::warn!(group, token, op, after = ?target.timeout, "fenced write timed out");
                Err(Error::Timeout {
                    group: group.to_owned(),
                    after: target.timeout,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{instance, settle};
    use crate::{MemoryBackend, Runtime};

    async fn lease(rt: &Runtime, group: &str) -> Lease {
        rt.run_if_leader(group, || async { crate::current_lease() })
            .await
            .flatten()
            .expect("leads")
    }

    /// `a` leads and gets its fence; then `a` hands over to `b`.
    async fn deposed(mem: &MemoryBackend) -> (Fence, Lease, Runtime, Runtime) {
        let (a, b) = (instance(mem, "a"), instance(mem, "b"));
        let old = lease(&a, "jobs").await.fence();
        assert!(b.run_if_leader("jobs", || async {}).await.is_none());
        a.shutdown().await;
        settle().await;
        let new = lease(&b, "jobs").await;
        assert!(new.token() > old.token());
        (old, new, a, b)
    }

    #[tokio::test(start_paused = true)]
    async fn every_write_applies_with_the_current_token() {
        let mem = MemoryBackend::new();
        let rt = instance(&mem, "a");
        let fence = lease(&rt, "jobs").await.fence();
        let key = fence.key("state");
        assert_eq!(key, "leader:{jobs}:state");
        assert_eq!(fence.set(&key, "v").await.unwrap(), Fenced::Applied(()));
        assert_eq!(mem.get(&key).as_deref(), Some(&b"v"[..]));
        let hash = fence.key("h");
        assert_eq!(
            fence.hset(&hash, "f", "1").await.unwrap(),
            Fenced::Applied(true)
        );
        assert_eq!(
            fence.hset(&hash, "f", "2").await.unwrap(),
            Fenced::Applied(false)
        );
        assert_eq!(mem.hget(&hash, "f").as_deref(), Some(&b"2"[..]));
        let n = fence.key("n");
        assert_eq!(fence.incr(&n, 5).await.unwrap(), Fenced::Applied(5));
        assert_eq!(
            fence.incr(&n, i64::MAX - 5).await.unwrap(),
            Fenced::Applied(i64::MAX)
        );
        assert!(
            fence.incr(&n, 1).await.is_err(),
            "overflow is Redis's error"
        );
        assert!(fence.incr(&hash, 1).await.is_err(), "WRONGTYPE");
        assert_eq!(
            fence.expire(&key, Duration::from_secs(1)).await.unwrap(),
            Fenced::Applied(true)
        );
        assert_eq!(
            fence
                .expire(fence.key("none"), Duration::from_secs(1))
                .await
                .unwrap(),
            Fenced::Applied(false)
        );
        // No overflow of the clock (it panicked before): "for good".
        assert_eq!(
            fence.expire(&n, Duration::MAX).await.unwrap(),
            Fenced::Applied(true)
        );
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert_eq!(mem.get(&key), None, "expired");
        assert_eq!(fence.delete(&hash).await.unwrap(), Fenced::Applied(true));
        assert_eq!(fence.delete(&hash).await.unwrap(), Fenced::Applied(false));
        rt.shutdown().await;
        // After the view ended, with no newer leader, the token is still current.
        assert!(!fence.lease.is_valid());
        assert_eq!(fence.set(&key, "after").await.unwrap(), Fenced::Applied(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deposed_leader_is_refused_from_the_successors_election_on() {
        let mem = MemoryBackend::new();
        let (old, new, _a, _b) = deposed(&mem).await;
        let key = old.key("state");
        let stale = Fenced::Stale {
            token: old.token(),
            mark: Some(new.token()),
        };
        // The successor has not written anything yet: refused all the same.
        assert_eq!(old.set(&key, "late").await.unwrap(), stale);
        assert_eq!(
            old.delete(&key).await.unwrap(),
            stale.clone().map(|()| false)
        );
        assert_eq!(old.incr(&key, 1).await.unwrap(), stale.clone().map(|()| 0));
        assert_eq!(
            old.hset(&key, "f", "v").await.unwrap(),
            stale.clone().map(|()| false)
        );
        assert_eq!(
            old.expire(&key, Duration::from_secs(1)).await.unwrap(),
            stale.clone().map(|()| false)
        );
        let script = FencedScript::new("return 1");
        assert_eq!(
            old.eval(&script, &[&key], &[]).await.unwrap(),
            stale.map(|()| Reply::Nil)
        );
        assert_eq!(mem.get(&key), None);
        let fence = new.fence();
        assert_eq!(fence.set(&key, "new").await.unwrap(), Fenced::Applied(()));
        assert_eq!(mem.get(&key).as_deref(), Some(&b"new"[..]));
        // The memory backend runs no Lua, but says so only to a current token.
        assert!(matches!(
            fence.eval(&script, &[&key], &[]).await,
            Err(Error::Backend { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_lost_its_data_vouches_for_no_token() {
        let mem = MemoryBackend::new();
        let rt = instance(&mem, "a");
        let fence = lease(&rt, "jobs").await.fence();
        mem.flush();
        let key = fence.key("state");
        assert_eq!(
            fence.set(&key, "v").await.unwrap(),
            Fenced::Stale {
                token: fence.token(),
                mark: None
            }
        );
        assert_eq!(mem.get(&key), None);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_of_another_slot_are_refused_before_anything_is_sent() {
        let mem = MemoryBackend::new();
        let rt = instance(&mem, "a");
        let fence = lease(&rt, "cleanup").await.fence();
        mem.set_available(false); // anything sent would fail with Backend
        for key in ["{leader}:{cleanup}:state", "state", "leader:{other}:state"] {
            match fence.set(key, "v").await {
                Err(Error::KeySlot { group, key: k }) => {
                    assert_eq!((group.as_str(), k.as_str()), ("cleanup", key));
                }
                other => panic!("{key}: {other:?}"),
            }
        }
        let script = FencedScript::new("return 1");
        let (ok, bad) = (fence.key("a"), "b".to_owned());
        assert!(matches!(
            fence.eval(&script, &[&ok, &bad], &[]).await,
            Err(Error::KeySlot { .. })
        ));
        // A key of the group's slot is sent (and fails: the backend is down).
        assert!(matches!(
            fence.set("x:{cleanup}", "v").await,
            Err(Error::Backend { .. })
        ));
        let err = fence.set("state", "v").await.unwrap_err().to_string();
        assert!(err.contains("Fence::key"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_runtimes_own_keys_are_refused_before_anything_is_sent() {
        let mem = MemoryBackend::new();
        let rt = instance(&mem, "a");
        let fence = lease(&rt, "cleanup").await.fence();
        let paused = fence.key("paused");
        mem.set_available(false); // anything sent would fail with Backend
        for name in [
            "lease",
            "token",
            "paused",
            "result",
            "heir",
            "cron:x",
            "cron-history:x",
        ] {
            let key = fence.key(name);
            assert!(
                matches!(fence.set(&key, "v").await, Err(Error::ReservedKey { .. })),
                "{key}"
            );
            assert!(matches!(
                fence.delete(&key).await,
                Err(Error::ReservedKey { .. })
            ));
        }
        let script = FencedScript::new("return 1");
        let err = fence
            .eval(&script, &[&fence.key("a"), &paused], &[])
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ReservedKey { .. }), "{err}");
        assert!(err.to_string().contains("pick another name"), "{err}");
        // Other names are sent (and fail: the backend is down).
        assert!(matches!(
            fence.set(fence.key("pausedx"), "v").await,
            Err(Error::Backend { .. })
        ));
    }
}
