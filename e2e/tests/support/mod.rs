//! Support for the multi-process tests: the instance fleet, the checker of
//! leadership windows, and a fenced downstream store. Each test file uses
//! only part of it.
#![allow(dead_code)]

pub mod chaos;
pub mod checker;
pub mod fake_redis;
pub mod fleet;
pub mod store;

use std::time::Duration;

/// Milliseconds as a `Duration`.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `t_ns` plus `d`.
pub fn after(t_ns: u64, d: Duration) -> u64 {
    t_ns + d.as_nanos() as u64
}

/// Sleep until the monotonic clock reads `t_ns` (the length of a fault,
/// never a synchronisation: those wait for log lines).
pub async fn sleep_until_ns(t_ns: u64) {
    let now = leader_testkit::monotonic_now_ns();
    if t_ns > now {
        tokio::time::sleep(Duration::from_nanos(t_ns - now)).await;
    }
}

/// Nanoseconds as milliseconds, for messages.
pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Serialises the tests of one file that spawn processes: their timing
/// bounds assume the machine is not also running the other scenarios.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
