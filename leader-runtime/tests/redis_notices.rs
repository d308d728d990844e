//! The release-notice connection is health-checked: a half-open connection
//! (the peer gone silent, nothing reset) is found by its `PING` going
//! unanswered, replaced, and meanwhile followers pace themselves by
//! `retry_interval` instead of waiting for notices that never come.
//!
//! Follower `b` reaches Redis through a fault proxy. Its runtime opens the
//! notice connection at start, before any command, so the proxy's first
//! connection is that one, and only it is black-holed.

use std::time::Duration;

use leader_runtime::{Event, Runtime};
use leader_testkit::{FaultProxy, Mode, RedisServer};
use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

mod support;
use support::{config, next_event, runtime, G};

const TTL: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_millis(300);
const RETRY: Duration = Duration::from_millis(300);

fn instance(url: String, id: &str) -> Runtime {
    let config = config(id).redis_url(url).ttl(TTL);
    runtime(config.renew_interval(RENEW).retry_interval(RETRY))
}

async fn elected(events: &mut broadcast::Receiver<Event>, within: Duration) -> bool {
    let elected = |e: &Event| matches!(e, Event::Elected { .. });
    next_event(events, within, elected).await.is_some()
}

/// `a` leads (directly on `server`), `b` follows through `proxy`; returns
/// them with the id of b's notice connection on the proxy.
async fn leader_and_follower(server: &RedisServer, proxy: &FaultProxy) -> (Runtime, Runtime, u64) {
    let b = instance(proxy.url(), "b");
    proxy
        .wait_connections(1, Duration::from_secs(5))
        .await
        .unwrap();
    let notice = proxy.connection_ids()[0];
    let a = instance(server.url(), "a");
    let mut a_events = a.subscribe();
    a.is_leader(G);
    // The first election ever is a safe start: one ttl.
    assert!(elected(&mut a_events, TTL * 3).await, "a not elected");
    assert!(!b.is_leader(G)); // b follows; its command connection opens
    proxy
        .wait_connections(2, Duration::from_secs(5))
        .await
        .unwrap();
    (a, b, notice)
}

/// Waits until b made another acquire attempt. The counter counts attempts
/// as they start; the reply (a local round trip) is awaited with a margin of
/// 50 ms, since nothing reports it: releasing while b's acquire is still in
/// flight would let b win without any notice.
async fn next_attempt(b: &Runtime) {
    let before = b.stats(G).unwrap().acquire_attempts;
    timeout(TTL * 2, async {
        while b.stats(G).unwrap().acquire_attempts == before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("b made no acquire attempt within 2 ttl");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn a_half_open_notice_connection_is_replaced() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let (a, b, notice) = leader_and_follower(&server, &proxy).await;
    let mut b_events = b.subscribe();

    assert!(proxy.set_connection_mode(notice, Some(Mode::Blackhole)));
    let cut = Instant::now();
    // Found by its PING (every retry_interval, answered within the call
    // timeout: 300 ms + 1.35 s) and replaced by a new connection.
    let accepted = proxy.accepted();
    let replaced = timeout(Duration::from_secs(5), async {
        while proxy.accepted() == accepted {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    server.check(
        replaced.is_ok(),
        "the black-holed notice connection was not replaced within 5 s",
    );
    let found = cut.elapsed();
    assert!(
        found <= RETRY + a_call_timeout() + Duration::from_millis(500),
        "replaced after {found:?}"
    );

    // A graceful release right after b's last attempt: b would otherwise
    // sleep until the lease's expiry (about ttl - renew_interval), so
    // taking over within a fraction of that means the notice arrived on
    // the new connection.
    next_attempt(&b).await;
    let released = Instant::now();
    a.step_down(G).await.unwrap();
    assert!(
        elected(&mut b_events, TTL).await,
        "b did not take over within ttl"
    );
    let handover = released.elapsed();
    server.check(
        handover < Duration::from_millis(800),
        format!("handover took {handover:?}: the release notice did not arrive"),
    );
    eprintln!("half-open notice connection replaced {found:?} after the cut; handover then took {handover:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// The default call timeout for these timings: the smaller of 2 s and
/// (ttl - renew_interval) / 2.
fn a_call_timeout() -> Duration {
    Duration::from_secs(2).min((TTL - RENEW) / 2)
}

#[tokio::test]
async fn followers_pace_by_retry_interval_while_notices_are_down() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let (a, b, notice) = leader_and_follower(&server, &proxy).await;

    // The notice connection goes silent and cannot be replaced (new
    // connections are refused); b's command connection still works.
    proxy.refuse(true);
    assert!(proxy.set_connection_mode(notice, Some(Mode::Blackhole)));
    // Detection (≤ retry + call timeout), then b's current wait for the
    // lease's expiry (≤ ttl) ends: from then on, retry pacing.
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    let window = Duration::from_secs(2);
    let before = b.stats(G).unwrap().acquire_attempts;
    tokio::time::sleep(window).await;
    let attempts = b.stats(G).unwrap().acquire_attempts - before;
    // About window / retry = 6.7; waiting for the expiry instead (notices
    // believed up) gives at most 1.
    server.check(
        attempts >= 4,
        format!("{attempts} acquire attempts in {window:?} with retry_interval {RETRY:?}"),
    );
    assert!(a.is_leader(G));
    a.shutdown().await;
    b.shutdown().await;
}
