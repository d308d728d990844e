//! Run singleton work — cron jobs, cleanups, migrations, reapers — on exactly
//! one instance of a fleet, by holding a lease in Redis.
//!
//! ```no_run
//! use leader_runtime::leader_only;
//!
//! #[leader_only(group = "cleanup")]
//! async fn purge_expired() -> u64 {
//!     // runs only on the instance that holds the `cleanup` lease
//!     42
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), leader_runtime::Error> {
//! leader_runtime::init(
//!     leader_runtime::Config::builder().redis_url("redis://127.0.0.1:6379").build()?,
//! )?;
//! // every replica calls it on its own schedule; `None` where not leader
//! if let Some(purged) = purge_expired().await {
//!     println!("purged {purged}");
//! }
//! # Ok(()) }
//! ```
//!
//! See the README for the guide; each item documents its own semantics.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod backend;
mod config;
#[cfg(feature = "cron")]
pub mod cron;
mod election;
mod error;
mod events;
mod gate;
mod global;
mod group;
mod jitter;
mod lease;
mod metrics;
mod names;
mod runtime;
mod stats;
mod status;

use std::future::Future;

pub use leader_macros::leader_only;
use tokio::sync::broadcast;

pub use crate::backend::MemoryBackend;
pub use crate::config::{
    Config, ConfigBuilder, DEFAULT_KEY_PREFIX, DEFAULT_RENEW_INTERVAL, DEFAULT_RETRY_INTERVAL,
    DEFAULT_TTL,
};
pub use crate::error::{Error, Result};
pub use crate::events::{Event, LostReason};
pub use crate::global::init;
pub use crate::lease::Lease;
pub use crate::runtime::Runtime;
pub use crate::stats::Stats;
pub use crate::status::GroupStatus;

/// Whether this instance leads `group` right now, on the current runtime
/// (the one of [`Runtime::scope`], else the global one). Sync and local,
/// never touches the network; false when no runtime is configured.
///
/// # Examples
///
/// ```no_run
/// if leader_runtime::is_leader("cleanup") {
///     println!("this replica runs the cleanup");
/// }
/// ```
pub fn is_leader(group: &str) -> bool {
    global::current().is_some_and(|rt| rt.is_leader(group))
}

/// Who leads `group`, asked of the backend.
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as
/// [`Runtime::leader_id`].
pub async fn leader_id(group: &str) -> Result<Option<String>> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .leader_id(group)
        .await
}

/// Run `f` if this instance leads `group`; see [`Runtime::run_if_leader`].
///
/// # Examples
///
/// ```no_run
/// # async fn example() {
/// let sent: Option<usize> =
///     leader_runtime::run_if_leader("mailer", || async { 3 /* emails sent */ }).await;
/// # }
/// ```
pub async fn run_if_leader<F, Fut>(group: &str, f: F) -> Option<Fut::Output>
where
    F: FnOnce() -> Fut,
    Fut: Future,
{
    global::current()?.run_if_leader(group, f).await
}

/// Hand the lease of `group` to another instance; see [`Runtime::step_down`].
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as [`Runtime::step_down`].
pub async fn step_down(group: &str) -> Result<()> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .step_down(group)
        .await
}

/// The lease under which the current gated body runs (`None` outside one).
pub fn current_lease() -> Option<Lease> {
    group::current_lease()
}

/// Counters of `group` on the current runtime; `None` if never used.
pub fn stats(group: &str) -> Option<Stats> {
    global::current()?.stats(group)
}

/// Transitions of every group on the current runtime, from now on. Without
/// a configured runtime the receiver is closed.
pub fn subscribe() -> broadcast::Receiver<Event> {
    match global::current() {
        Some(rt) => rt.subscribe(),
        None => broadcast::channel(1).1,
    }
}

/// Each group of the current runtime with its state as this instance knows
/// it, for a health endpoint; empty without a runtime. Never touches the
/// network. See [`Runtime::status`] and [`GroupStatus`] (what is live and
/// what is cached).
///
/// # Examples
///
/// ```no_run
/// for group in leader_runtime::status() {
///     println!(
///         "{}: leader={} leader_id={:?} token={:?} valid_for={:?} last_error={:?}",
///         group.group, group.is_leader, group.leader_id, group.token, group.valid_for, group.last_error,
///     );
/// }
/// ```
pub fn status() -> Vec<GroupStatus> {
    global::current().map(|rt| rt.status()).unwrap_or_default()
}

/// Take this instance out of the race for `group` (`false`), or put it back
/// (`true`), on the current runtime; see [`Runtime::set_eligible`].
///
/// # Examples
///
/// ```no_run
/// # async fn before_deploy() -> leader_runtime::Result<()> {
/// // Draining before a deploy: hand the lease over and stay out of the race.
/// leader_runtime::set_eligible("cleanup", false).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as
/// [`Runtime::set_eligible`].
pub async fn set_eligible(group: &str, eligible: bool) -> Result<()> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .set_eligible(group, eligible)
        .await
}

/// Release every lease held by the current runtime and stop its elections;
/// see [`Runtime::shutdown`]. Does nothing without one.
pub async fn shutdown() {
    let runtime = runtime::scoped().or_else(|| global::existing().cloned());
    if let Some(runtime) = runtime {
        runtime.shutdown().await;
    }
}

#[doc(hidden)]
/// Not public API: the contract between `#[leader_only]` expansions and the runtime.
pub mod __private {
    pub use crate::gate::{gate_async, gate_sync, CallSite};
}
