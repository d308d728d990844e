//! What the outside learns of transitions: the event channel, per-group
//! counters, the `metrics` facade, and the outage log.

pub(crate) mod events;
#[cfg(feature = "cron")]
pub(crate) mod jobs;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
pub(crate) mod metrics;
pub(crate) mod outage;
pub(crate) mod stats;
