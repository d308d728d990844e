//! The cron recipe: every replica runs the same schedule
//! (tokio-cron-scheduler, every 5 seconds); `#[leader_only]` lets exactly one
//! of them do the work.
//!
//! Needs a Redis: `LEADER_REDIS_URL` (or `REDIS_URL`), by default
//! `redis://127.0.0.1:6379`. Run two copies and watch one work:
//!
//! ```text
//! redis-server --port 6379 &
//! cargo run --example cron --features cron    # terminal 1
//! cargo run --example cron --features cron    # terminal 2
//! ```
//!
//! Ctrl-C (or SIGTERM) the one that works: it releases its lease on the way
//! out and the other runs the next tick. `kill -9` it instead and the other
//! takes over once the lease expires (within the ttl, 6 s here).
//!
//! On a Redis that has never seen the group (or lost its data) the first
//! leader waits one ttl before its body runs: no leader from before can
//! still believe it leads.

use std::error::Error;
use std::time::Duration;

use leader_runtime::{leader_only, Config};
use tokio_cron_scheduler::{Job, JobScheduler};

type BoxError = Box<dyn Error + Send + Sync>;

/// The singleton job. Every replica calls it on every tick; the body runs on
/// the replica that holds the `cron-report` lease.
#[leader_only(group = "cron-report")]
async fn build_report() -> Result<u64, BoxError> {
    // The fencing token: hand it to a store that rejects stale writers.
    let token = leader_runtime::current_lease().map_or(0, |lease| lease.token());
    tokio::time::sleep(Duration::from_millis(200)).await; // the work
    Ok(token)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,tokio_cron_scheduler=warn")
            }),
        )
        .init();

    let url = std::env::var("LEADER_REDIS_URL")
        .or_else(|_| std::env::var("REDIS_URL"))
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let config = Config::builder()
        .redis_url(url)
        .ttl(Duration::from_secs(6))
        .renew_interval(Duration::from_secs(2))
        .build()?;
    let me = config.instance_id().to_owned();
    leader_runtime::init(config)?;
    tracing::info!(instance = %me, "started; the job fires every 5 s on every replica");

    let scheduler = JobScheduler::new().await?;
    scheduler
        .add(Job::new_async("*/5 * * * * *", |_id, _scheduler| {
            Box::pin(async {
                match build_report().await {
                    Some(Ok(token)) => tracing::info!(token, "leader: ran the job"),
                    Some(Err(e)) => tracing::error!(error = %e, "leader: the job failed"),
                    None => tracing::info!("not the leader: skipped"),
                }
            })
        })?)
        .await?;
    scheduler.start().await?;

    stopped().await;
    tracing::info!("stopping: no more ticks, then release the lease");
    let mut scheduler = scheduler;
    scheduler.shutdown().await?;
    // Waits for a gated run in flight, then releases, so another replica
    // takes over at once.
    leader_runtime::shutdown().await;
    Ok(())
}

/// Ctrl-C, or SIGTERM where there is one.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                return;
            }
            Err(e) => tracing::warn!(error = %e, "no SIGTERM handler; Ctrl-C only"),
        }
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::error!(error = %e, "no Ctrl-C handler; stopping now");
    }
}
