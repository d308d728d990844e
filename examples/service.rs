//! The first service: what a real deployment of `leader` looks like, in one
//! file. Every replica runs this same program; Redis decides which one does
//! the singleton work.
//!
//! - `init` with a Redis URL, then `ready_for`: a wrong password or an
//!   unreachable Redis stops the deploy here, not later;
//! - `once`: start-up work (a schema change) that runs on one replica while
//!   the others wait for its result;
//! - two `cron::JobBuilder` jobs with a time zone: each scheduled tick runs
//!   at most once fleet-wide, on the leader of the job's group;
//! - `/metrics` in Prometheus text format (the `metrics` feature);
//! - `shutdown_on_signal`: on SIGTERM or Ctrl-C, drain and release the
//!   leases, so another replica takes over at once.
//!
//! ```text
//! redis-server --port 6379 --save '' &
//! cargo run --example service --features service              # terminal 1
//! METRICS_ADDR=127.0.0.1:9899 cargo run --example service --features service   # terminal 2
//! curl -s localhost:9898/metrics | grep ^leader_
//! ```
//!
//! `REDIS_URL` (default `redis://127.0.0.1:6379`) and `METRICS_ADDR` (default
//! `127.0.0.1:9898`; port 0 picks a free one, logged) configure it.
//! This is, line for line after this header, the program of the README's
//! "First service" (a test keeps them equal and builds the README's as a
//! crate of its own); `e2e/tests/service.rs` runs it against a real
//! `redis-server` and stops it with SIGTERM.

use std::time::Duration;

use leader_runtime::cron::chrono_tz::{America, Europe};
use leader_runtime::cron::tokio_cron_scheduler::JobScheduler;
use leader_runtime::cron::JobBuilder;
use leader_runtime::Config;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tokio_cron_scheduler=warn".into()),
        )
        .init();
    // Before anything records a metric.
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    leader_runtime::init(
        Config::builder()
            .redis_url(url)
            .ttl(Duration::from_secs(5)) // crash-failover bound (default 15 s)
            .build()?,
    )?;
    // Fail fast: a refused password is an error at once, no Redis within 10 s.
    leader_runtime::ready_for(["reports", "cleanup"], Duration::from_secs(10)).await?;

    // Start-up work, once fleet-wide; the other replicas wait for its result.
    let schema = leader_runtime::once("create-tables-v1", || async {
        let token = leader_runtime::current_lease().map_or(0, |l| l.token());
        // CREATE TABLE IF NOT EXISTS …, fenced with `token` or idempotent
        Ok::<_, std::io::Error>(format!("tables created under token {token}"))
    })
    .await?;
    tracing::info!(by = %schema.instance_id, summary = %schema.summary, "once: schema ready");

    // Every replica adds the same jobs; each tick runs on one of them.
    let mut scheduler = JobScheduler::new().await?;
    let report = JobBuilder::new("*/5 * * * * *", "reports")
        .name("report")
        .time_zone(Europe::Berlin)
        .build(|tick| async move {
            tracing::info!(tick = tick.id(), "report: ran");
        })?;
    let cleanup = JobBuilder::new("0 30 3 * * *", "cleanup") // 03:30 in New York
        .name("nightly-cleanup")
        .time_zone(America::New_York)
        .build(|tick| async move {
            tracing::info!(tick = tick.id(), "cleanup: ran");
            Ok::<_, std::io::Error>(()) // an `Err` is recorded in the job's history
        })?;
    scheduler.add(report).await?;
    scheduler.add(cleanup).await?;
    scheduler.start().await?;

    // Installs the SIGTERM and Ctrl-C handlers now; completes after a signal,
    // once the gated runs finished and the leases were released.
    let stopped = leader_runtime::shutdown_on_signal();
    let metrics_addr = std::env::var("METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:9898".into());
    let listener = TcpListener::bind(metrics_addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics");
    tokio::select! {
        served = serve_metrics(listener, prometheus) => served?,
        () = stopped => tracing::info!("leases released"),
    }
    scheduler.shutdown().await?;
    Ok(())
}

/// `GET /metrics` in Prometheus text format; 404 for anything else.
async fn serve_metrics(listener: TcpListener, prometheus: PrometheusHandle) -> std::io::Result<()> {
    let upkeep = prometheus.clone(); // the recorder's housekeeping, every 5 s
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let (mut conn, _) = listener.accept().await?;
        let prometheus = prometheus.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let n = conn.read(&mut request).await.unwrap_or(0);
            let (status, body) = if request[..n].starts_with(b"GET /metrics ") {
                ("200 OK", prometheus.render())
            } else {
                ("404 Not Found", String::new())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all((head + &body).as_bytes()).await;
        });
    }
}
