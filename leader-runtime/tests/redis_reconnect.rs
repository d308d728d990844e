//! Reconnecting after Redis was unreachable: the election's own pacing
//! (`retry_interval` for followers) decides when the next attempt happens,
//! not a hidden backoff inside the Redis connection manager — otherwise a
//! group whose Redis came back empty (safe start: one ttl) would lead again
//! later than ttl + renew_interval.

use std::time::Duration;

use leader_runtime::{Config, Event, Runtime};
use leader_testkit::RedisServer;
use tokio::time::{timeout, Instant};

const G: &str = "jobs";
const TTL: Duration = Duration::from_millis(500);
const RETRY: Duration = Duration::from_millis(50);

#[tokio::test]
async fn failed_calls_fail_fast_and_retries_follow_retry_interval() {
    let mut server = RedisServer::start().await.unwrap();
    server.kill().await.unwrap(); // the port now refuses connections
    let rt = Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .ttl(TTL)
            .renew_interval(Duration::from_millis(100))
            .retry_interval(RETRY)
            .instance_id("a")
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut events = rt.subscribe();
    assert!(!rt.is_leader(G)); // starts the election
    let down = Duration::from_secs(1);
    tokio::time::sleep(down).await;
    let attempts = rt.stats(G).unwrap().acquire_attempts;
    // About down / RETRY = 20 attempts. A connection manager that sleeps
    // (≥ 100 ms) and retries inside each failed call allows at most 7.
    assert!(
        attempts >= 12,
        "{attempts} acquire attempts in {down:?} with retry_interval {RETRY:?}"
    );

    server.start_again().await.unwrap();
    let back = Instant::now();
    let elected = timeout(TTL * 4, async {
        loop {
            if let Ok(Event::Elected { .. }) = events.recv().await {
                return;
            }
        }
    })
    .await;
    assert!(
        elected.is_ok(),
        "not leader {:?} after Redis returned",
        TTL * 4
    );
    // Safe start (the server came back empty): one ttl after the first
    // acquisition, which follows within about one retry interval.
    assert!(back.elapsed() >= TTL - RETRY, "{:?}", back.elapsed());
    rt.shutdown().await;
}
