//! `examples/service.rs` — the README's first service — as two processes
//! against a real `redis-server` (started here): the first runs the `once`
//! step and the report job's ticks and serves `/metrics`; the second finds
//! the step done and does not tick while the first leads; SIGTERM to the
//! first exits 0 after releasing its leases, and the second runs the next
//! tick; SIGTERM to the second exits 0 too.
//!
//! The binary is the example itself, built as `service-example` of this
//! package (`e2e/Cargo.toml`).

use std::time::{Duration, Instant};

use leader_testkit::{ChildProcess, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

/// Up to one ttl (5 s) of safe start on a new server, then the first tick
/// (every 5 s), with room for a loaded machine.
const FIRST_TICK: Duration = Duration::from_secs(30);

fn service(redis: &RedisServer) -> ChildProcess {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_service-example"));
    cmd.env("REDIS_URL", redis.url())
        .env("METRICS_ADDR", "127.0.0.1:0")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info,tokio_cron_scheduler=warn");
    ChildProcess::spawn(cmd).expect("spawn the service example")
}

fn output(child: &ChildProcess) -> String {
    let mut lines = child.stdout().snapshot();
    lines.extend(child.stderr().snapshot());
    lines.join("\n")
}

/// `GET path` over HTTP/1.1; the whole response.
async fn get(addr: &str, path: &str) -> String {
    let mut conn = TcpStream::connect(addr).await.expect("connect to /metrics");
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_service_runs_once_ticks_serves_metrics_and_hands_over_on_sigterm() {
    let redis = RedisServer::start().await.unwrap();
    let started = Instant::now();
    let mut a = service(&redis);

    let once = a
        .stdout()
        .wait_for(|l| l.contains("once: schema ready"), FIRST_TICK)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", output(&a), redis.report()));
    assert!(once.contains("tables created under token"), "{once}");
    let serving = a
        .stdout()
        .wait_for(|l| l.contains("serving /metrics"), FIRST_TICK)
        .await
        .unwrap();
    let addr = serving.rsplit("addr=").next().unwrap().trim().to_owned();
    a.stdout()
        .wait_for(|l| l.contains("report: ran"), FIRST_TICK)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", output(&a)));
    println!("first tick {:?} after the start", started.elapsed());

    let metrics = get(&addr, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
    for line in [
        "leader_is_leader{group=\"reports\"} 1",
        "leader_elected_total{group=\"once:create-tables-v1\"} 1",
        "leader_cron_runs_total{group=\"reports\",job=\"report\",outcome=\"ok\"}",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    assert!(get(&addr, "/").await.starts_with("HTTP/1.1 404"));

    // A second replica: the step is done (by the first), and it does not tick
    // while the first leads.
    let mut b = service(&redis);
    let once_b = b
        .stdout()
        .wait_for(|l| l.contains("once: schema ready"), FIRST_TICK)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", output(&b)));
    assert_eq!(
        once_b.split("summary=").nth(1),
        once.split("summary=").nth(1),
        "the second replica ran the step again:\n{}",
        output(&b)
    );
    b.stdout()
        .wait_for(|l| l.contains("serving /metrics"), FIRST_TICK)
        .await
        .unwrap();
    let ticks_a = a.stdout().snapshot().len();
    a.stdout()
        .wait_for_from(
            ticks_a,
            |l| l.contains("report: ran"),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", output(&a)));
    assert!(
        !output(&b).contains("report: ran"),
        "both replicas ran report ticks:\n{}",
        output(&b)
    );

    // SIGTERM: released, exit 0; the second replica takes the next tick.
    a.terminate().unwrap();
    let status = a.wait_timeout(Duration::from_secs(10)).await.unwrap();
    a.stdout()
        .wait_closed(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(status.success(), "{status}\n{}", output(&a));
    assert!(output(&a).contains("leases released"), "{}", output(&a));
    b.stdout()
        .wait_for(|l| l.contains("report: ran"), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", output(&b)));

    b.terminate().unwrap();
    let status = b.wait_timeout(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "{status}\n{}", output(&b));
    println!("{}", output(&a));
}
