//! Leadership metrics in Prometheus text format, through the `metrics` facade
//! (`leader-runtime` feature `metrics`) and `metrics-exporter-prometheus`.
//!
//! The library only emits; the application picks and installs the recorder,
//! here the Prometheus exporter's. Three instances on one in-memory backend
//! pass the lease around, then the exporter renders what they recorded:
//!
//! ```text
//! cargo run --example metrics --features metrics
//! ```
//!
//! In a service, serve `handle.render()` on `/metrics` (e.g. next to
//! `/health` from `examples/health.rs`), or enable the exporter's
//! `http-listener` feature and call `PrometheusBuilder::install()`.
//!
//! The metrics and when each moves are listed in `leader-runtime`'s crate
//! docs ("Operating it: health, draining, metrics").
//!
//! (Three instances in one process share one `leader_is_leader` series here;
//! in a fleet each process exports its own.)

use std::time::Duration;

use leader_runtime::{Config, MemoryBackend, Runtime};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

const GROUP: &str = "reports";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = install()?;
    print!("{}", demo(&handle).await?);
    Ok(())
}

/// Install the Prometheus recorder, with histogram buckets for renew round
/// trips (without buckets it renders a summary).
pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("leader_renew_seconds".to_owned()),
            &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0],
        )?
        .install_recorder()
}

/// Three instances hand the lease of `reports` around; returns the metrics
/// in Prometheus text format.
pub async fn demo(handle: &PrometheusHandle) -> leader_runtime::Result<String> {
    let mem = MemoryBackend::new();
    let instance = |id: &str| {
        Runtime::new(
            Config::builder()
                .memory(mem.clone())
                .ttl(Duration::from_millis(600))
                .renew_interval(Duration::from_millis(200))
                .instance_id(id)
                .build()?,
        )
    };
    let (a, b, c) = (instance("a")?, instance("b")?, instance("c")?);
    for rt in [&a, &b, &c] {
        rt.run_if_leader(GROUP, || async {}).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // a renews twice
    a.step_down(GROUP).await?; // b or c takes over
    tokio::time::sleep(Duration::from_millis(500)).await;
    for rt in [&a, &b, &c] {
        // The new leader hands over again; the others are not leading.
        if rt.is_leader(GROUP) {
            rt.set_eligible(GROUP, false).await?;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Followers first, so that the leader's shutdown hands over to nobody.
    let (leaders, followers): (Vec<_>, Vec<_>) =
        [a, b, c].into_iter().partition(|rt| rt.is_leader(GROUP));
    for rt in followers.into_iter().chain(leaders) {
        rt.shutdown().await;
    }
    Ok(handle.render())
}
