//! Reconnecting after Redis was unreachable or restarted: the election's own
//! pacing (`retry_interval` for followers) decides when the next attempt
//! happens, not a hidden backoff inside the Redis connection manager, and a
//! leader learns of a restart when the release-notice connection comes back,
//! not at its next renewal — otherwise a group whose Redis came back empty
//! (safe start: one ttl) would lead again later than ttl + renew_interval.

use std::time::Duration;

use leader_runtime::{Event, Runtime};
use leader_testkit::RedisServer;
use tokio::time::{timeout, Instant};

mod support;
use support::{config, next_event, G};

const TTL: Duration = Duration::from_millis(500);
const RETRY: Duration = Duration::from_millis(50);

/// One instance on `server`, retrying every `RETRY`.
fn runtime(server: &RedisServer, ttl: Duration, renew: Duration) -> Runtime {
    let config = config("a").redis_url(server.url()).ttl(ttl);
    support::runtime(config.renew_interval(renew).retry_interval(RETRY))
}

#[tokio::test]
async fn failed_calls_fail_fast_and_retries_follow_retry_interval() {
    let mut server = RedisServer::start().await.unwrap();
    server.kill().await.unwrap(); // the port now refuses connections
    let rt = runtime(&server, TTL, Duration::from_millis(100));
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

#[tokio::test]
async fn a_leader_notices_a_restarted_redis_before_its_next_renewal() {
    let mut server = RedisServer::start().await.unwrap();
    let ttl = Duration::from_secs(1);
    // A long renew interval: the next renewal is at least 600 ms away (a
    // renewal sent on the runtime's renew phase, as every renewal after a
    // group's first is, has the next one a full interval later).
    let renew = Duration::from_millis(800);
    let rt = runtime(&server, ttl, renew);
    let mut events = rt.subscribe();
    assert!(!rt.is_leader(G));
    let first = next_event(&mut events, ttl * 4, |e| matches!(e, Event::Elected { .. }))
        .await
        .is_some();
    assert!(first, "never elected");
    // Right after a renewal, Redis restarts empty (lease, token counter,
    // scripts gone).
    let renewed = next_event(&mut events, ttl * 2, |e| matches!(e, Event::Renewed { .. }))
        .await
        .is_some();
    assert!(renewed, "never renewed");
    server.restart().await.unwrap();
    let back = Instant::now();
    // The leader learns it at once (the release-notice connection dropped
    // and came back), not at its next renewal; the safe start then adds one
    // ttl. Waiting for the renewal would take at least 600 ms - restart + ttl.
    let lost_and_elected = timeout(ttl * 4, async {
        let mut lost = None;
        loop {
            match events.recv().await.unwrap() {
                Event::Lost { .. } => lost = Some(back.elapsed()),
                Event::Elected { .. } => return (lost, back.elapsed()),
                _ => {}
            }
        }
    })
    .await
    .expect("leads again after the restart");
    let (lost, elected) = lost_and_elected;
    let lost = lost.expect("the old leadership ended first");
    eprintln!("after Redis was back: lost {lost:?}, leader again {elected:?}");
    assert!(
        lost < Duration::from_millis(300),
        "noticed the restart {lost:?} after Redis was back"
    );
    assert!(
        elected < ttl + Duration::from_millis(300),
        "leader again {elected:?} after Redis was back"
    );
    rt.shutdown().await;
}
