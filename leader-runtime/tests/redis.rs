//! The lease protocol against a real `redis-server` (one per test, on a free
//! port): the three scripts, re-claim, fencing tokens across leaderships and
//! restarts, NOSCRIPT recovery, release-notice handover, `leader_id`.

use std::time::Duration;

use leader_runtime::{Event, LostReason};
use leader_testkit::RedisServer;
use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

mod support;
use support::{elected_token, instance, lead, run_id, transition, G, TTL};

const LEASE_KEY: &str = "leader:{jobs}:lease";
const TOKEN_KEY: &str = "leader:{jobs}:token";

/// The next transition of `rx`, within `limit`, is `Lost` with reason `Expired`.
async fn lost_expired(rx: &mut broadcast::Receiver<Event>, limit: Duration) {
    let lost = transition(rx, limit).await;
    let expired = matches!(
        lost,
        Event::Lost {
            reason: LostReason::Expired,
            ..
        }
    );
    assert!(expired, "{lost:?}");
}

#[tokio::test]
async fn first_election_on_a_new_server_waits_one_ttl_then_holds_the_key() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let b = instance(server.url(), "b");
    assert_eq!(a.leader_id(G).await.unwrap(), None);
    let start = Instant::now();
    let token = lead(&a, G, TTL * 3).await;
    // No token counter: first election ever (or data loss) — safe start.
    assert!(start.elapsed() >= TTL, "{:?}", start.elapsed());
    assert!(start.elapsed() < TTL * 2, "{:?}", start.elapsed());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    assert!(a.is_leader(G) && !b.is_leader(G));
    assert_eq!(b.leader_id(G).await.unwrap().as_deref(), Some("a"));
    assert_eq!(server.cmd(&["GET", LEASE_KEY]).await.unwrap(), "a");
    let pttl = server
        .cmd(&["PTTL", LEASE_KEY])
        .await
        .unwrap()
        .as_int()
        .unwrap();
    server.check(pttl > 0 && pttl <= 1000, format!("pttl {pttl}"));
    let stored = server.cmd(&["HGET", TOKEN_KEY, "token"]).await.unwrap();
    assert_eq!(stored.as_str().unwrap().parse::<u64>().unwrap(), token);
    b.shutdown().await; // a follower: nothing to release
    assert_eq!(server.cmd(&["GET", LEASE_KEY]).await.unwrap(), "a");
    a.shutdown().await;
    // Release deleted the key.
    assert!(server.cmd(&["GET", LEASE_KEY]).await.unwrap().is_nil());
}

#[tokio::test]
async fn reclaims_its_own_lease_at_once_after_a_restart_of_the_election() {
    let server = RedisServer::start().await.unwrap();
    // A previous run of instance "a" holds the lease for 30 s more, on this
    // very server process (its record vouched for), nobody before it.
    let run = run_id(&server).await;
    server
        .cmd(&[
            "HSET", TOKEN_KEY, "token", "1000", "until", "0", "prior", "0", "run", &run,
        ])
        .await
        .unwrap();
    server
        .cmd(&["SET", LEASE_KEY, "a", "PX", "30000"])
        .await
        .unwrap();
    let a = instance(server.url(), "a");
    let start = Instant::now();
    let token = a
        .run_if_leader(G, || async {
            leader_runtime::current_lease().unwrap().token()
        })
        .await;
    let token = token.expect("re-claimed on the first round");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    assert!(
        token > 1000,
        "a re-claim is an acquisition: new, larger token"
    );
    // ... and the lease now has our ttl, not the old 30 s.
    let pttl = server
        .cmd(&["PTTL", LEASE_KEY])
        .await
        .unwrap()
        .as_int()
        .unwrap();
    server.check(pttl <= 1000, format!("pttl {pttl}"));
    a.shutdown().await;
}

#[tokio::test]
async fn tokens_grow_across_leaderships_and_across_a_server_restart() {
    let mut server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let b = instance(server.url(), "b");
    let t1 = lead(&a, G, TTL * 3).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut b_events = b.subscribe();
    a.step_down(G).await.unwrap();
    let t2 = elected_token(transition(&mut b_events, TTL).await);
    assert!(t2 > t1, "{t2} > {t1}");

    // Restart without persistence: lease, token counter and script cache gone.
    let mut a_events = a.subscribe();
    server.kill().await.unwrap();
    server.start_again().await.unwrap();
    // b's renew finds the lease gone (or errors, then expires).
    lost_expired(&mut b_events, TTL * 3).await;
    // Whoever wins next runs the scripts again (NOSCRIPT is reloaded) and,
    // with the counter gone, waits one ttl (safe start); its token is still larger.
    let t3 = tokio::select! {
        e = transition(&mut a_events, TTL * 4) => elected_token(e),
        e = transition(&mut b_events, TTL * 4) => elected_token(e),
    };
    assert!(t3 > t2, "{t3} > {t2}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn script_flush_while_leading_is_recovered_without_a_loss() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    lead(&a, G, TTL * 3).await;
    server.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    let mut events = a.subscribe();
    // Two renewals after the flush succeed.
    for _ in 0..2 {
        let renewed = timeout(TTL, async {
            loop {
                if let Event::Renewed { .. } = events.recv().await.unwrap() {
                    return;
                }
            }
        })
        .await;
        assert!(
            renewed.is_ok(),
            "no renewal after SCRIPT FLUSH\n{}",
            server.report()
        );
    }
    assert!(a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().lost(), 0);
    a.shutdown().await;
}

#[tokio::test]
async fn release_notice_hands_over_in_one_round_trip() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let b = instance(server.url(), "b");
    lead(&a, G, TTL * 3).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    // Let b settle into waiting for the lease's expiry (~1 s away).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut b_events = b.subscribe();
    let start = Instant::now();
    a.shutdown().await;
    elected_token(transition(&mut b_events, TTL).await);
    let handover = start.elapsed();
    // Far sooner than the ~900 ms the lease had left: the notice woke b.
    assert!(handover < Duration::from_millis(300), "{handover:?}");
    b.shutdown().await;
}

#[tokio::test]
async fn someone_overwriting_the_lease_supersedes_the_leader() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    lead(&a, G, TTL * 3).await;
    let mut events = a.subscribe();
    server
        .cmd(&["SET", LEASE_KEY, "intruder", "PX", "60000"])
        .await
        .unwrap();
    let lost = transition(&mut events, TTL).await;
    assert!(
        matches!(
            lost,
            Event::Lost {
                reason: LostReason::Superseded,
                ..
            }
        ),
        "{lost:?}"
    );
    assert!(!a.is_leader(G));
    a.shutdown().await;
}

#[tokio::test]
async fn a_wrong_type_under_the_lease_key_ends_the_view_without_a_panic() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    lead(&a, G, TTL * 3).await;
    let mut events = a.subscribe();
    server.cmd(&["DEL", LEASE_KEY]).await.unwrap();
    server.cmd(&["HSET", LEASE_KEY, "f", "v"]).await.unwrap();
    lost_expired(&mut events, TTL * 2).await;
    assert!(!a.is_leader(G));
    assert!(a.stats(G).unwrap().renew_failures > 0);
    // leader_id reports the protocol problem instead of guessing.
    assert!(a.leader_id(G).await.is_err());
    a.shutdown().await;
}
