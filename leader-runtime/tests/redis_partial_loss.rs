//! Partial data loss on a real `redis-server`: the lease key gone while its
//! record stays (a `DEL`, an eviction), a record another server process
//! wrote (a restart from disk, a promoted replica), and records that cannot
//! be trusted to issue a greater token. (Eviction under `maxmemory`, restarts
//! from RDB and AOF files and replica promotion run as processes in the chaos
//! suite, `tests/chaos.rs` at the root.)

use std::time::Duration;

use leader_runtime::{Event, Runtime};
use leader_testkit::RedisServer;
use tokio::time::{timeout, Instant};

mod support;
use support::{elected, instance, lead, G, RENEW, TTL};

const LEASE_KEY: &str = "leader:{jobs}:lease";
const RECORD_KEY: &str = "leader:{jobs}:token";

/// When `rt`'s view of `G` ends, as things stand.
fn view_end(rt: &Runtime) -> Instant {
    let left = rt
        .status()
        .into_iter()
        .find(|s| s.group == G)
        .and_then(|s| s.valid_for)
        .expect("leading");
    Instant::now() + left
}

#[tokio::test]
async fn a_deleted_lease_key_delays_a_newcomer_until_the_last_view_ended() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let first = lead(&a, G, TTL * 3).await;
    // A renewal moved the view on from the acquisition.
    let mut a_events = a.subscribe();
    timeout(TTL, async {
        while !matches!(a_events.recv().await, Ok(Event::Renewed { .. })) {}
    })
    .await
    .unwrap();
    let a_end = view_end(&a);
    server.cmd(&["DEL", LEASE_KEY]).await.unwrap();
    // A newcomer (a rolling deploy) takes the lease at once...
    let c = instance(server.url(), "c");
    let mut c_events = c.subscribe();
    assert_eq!(c.run_if_leader(G, || async {}).await, None);
    assert_eq!(c.leader_id(G).await.unwrap().as_deref(), Some("c"));
    // ...and its view begins only when a's has certainly ended.
    let token = elected(&mut c_events, TTL * 2).await;
    let now = Instant::now();
    server.check(
        now >= a_end,
        format!("c leads {:?} before a's view ends", a_end - now),
    );
    server.check(
        now < a_end + TTL / 2,
        format!("c waited {:?} past a's view", now - a_end),
    );
    assert!(token > first);
    assert!(!a.is_leader(G));
    a.shutdown().await;
    c.shutdown().await;
}

#[tokio::test]
async fn a_record_another_server_process_wrote_makes_the_first_view_wait_one_ttl() {
    let server = RedisServer::start().await.unwrap();
    // As restored from a file, or promoted from a replica: it says nobody
    // leads, but it cannot know of renewals made on the process it came from.
    server
        .cmd(&[
            "HSET", RECORD_KEY, "token", "5", "until", "0", "prior", "0", "run", "f00d",
        ])
        .await
        .unwrap();
    let a = instance(server.url(), "a");
    let start = Instant::now();
    let token = lead(&a, G, TTL * 3).await;
    assert!(start.elapsed() >= TTL, "{:?}", start.elapsed());
    assert!(token > 5);
    a.shutdown().await;
}

#[tokio::test]
async fn tokens_stay_exact_above_two_to_the_53() {
    let server = RedisServer::start().await.unwrap();
    // The record of the first format (the token alone), near the largest
    // integer a double holds exactly.
    server
        .cmd(&["SET", RECORD_KEY, "9007199254740993"])
        .await
        .unwrap();
    let a = instance(server.url(), "a");
    assert_eq!(lead(&a, G, TTL * 3).await, 9_007_199_254_740_994);
    let stored = server.cmd(&["HGET", RECORD_KEY, "token"]).await.unwrap();
    assert_eq!(stored, "9007199254740994");
    a.shutdown().await;
}

#[tokio::test]
async fn a_record_that_cannot_issue_a_greater_token_writes_nothing() {
    let server = RedisServer::start().await.unwrap();
    for bad in [
        "inf",
        "nan",
        "1e300",
        "-1",
        "12abc",
        "",
        "9223372036854775808",
    ] {
        server.cmd(&["DEL", RECORD_KEY]).await.unwrap();
        server.cmd(&["SET", RECORD_KEY, bad]).await.unwrap();
        let a = instance(server.url(), "a");
        let mut events = a.subscribe();
        assert_eq!(a.run_if_leader(G, || async {}).await, None, "{bad:?}");
        let error = timeout(TTL, async {
            loop {
                if let Ok(Event::BackendError { message, .. }) = events.recv().await {
                    return message;
                }
            }
        })
        .await
        .expect("a backend error");
        assert!(error.contains("no valid token"), "{bad:?}: {error}");
        assert!(!a.is_leader(G));
        let lease = server.cmd(&["EXISTS", LEASE_KEY]).await.unwrap();
        server.check(
            lease.as_int() == Some(0),
            format!("{bad:?} wrote the lease"),
        );
        assert_eq!(server.cmd(&["GET", RECORD_KEY]).await.unwrap(), bad);
        a.shutdown().await;
    }
    // The last token there is: an error, nothing written.
    server.cmd(&["DEL", RECORD_KEY]).await.unwrap();
    server
        .cmd(&["HSET", RECORD_KEY, "token", "9223372036854775807"])
        .await
        .unwrap();
    let a = instance(server.url(), "a");
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    let lease = server.cmd(&["EXISTS", LEASE_KEY]).await.unwrap();
    server.check(
        lease.as_int() == Some(0),
        "exhausted tokens wrote the lease",
    );
    a.shutdown().await;
}

#[tokio::test]
async fn a_renew_on_a_record_another_server_wrote_ends_the_view() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    lead(&a, G, TTL * 3).await;
    let mut events = a.subscribe();
    // As if Redis had restarted from a file (or a replica been promoted)
    // with a's key still alive in it: the server vouches for no record.
    server
        .cmd(&["HSET", RECORD_KEY, "run", "f00d"])
        .await
        .unwrap();
    let changed = Instant::now();
    let lost = timeout(RENEW * 2, async {
        loop {
            if let Ok(Event::Lost { .. }) = events.recv().await {
                return Instant::now();
            }
        }
    })
    .await
    .expect("the view ends at the next renew");
    assert!(lost - changed <= RENEW + Duration::from_millis(100));
    // a takes its own key back, after a one-ttl safe start.
    elected(&mut events, TTL * 3).await;
    assert!(changed.elapsed() >= TTL);
    a.shutdown().await;
}

#[tokio::test]
async fn a_release_names_the_leadership_it_ends() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let token = lead(&a, G, TTL * 3).await;
    // A newer leadership of a's id (a re-claim elsewhere, say): a's release
    // of its own, older one must leave the lease alone.
    server
        .cmd(&["HSET", RECORD_KEY, "token", &(token + 1).to_string()])
        .await
        .unwrap();
    a.step_down(G).await.unwrap();
    assert_eq!(server.cmd(&["GET", LEASE_KEY]).await.unwrap(), "a");
    a.shutdown().await;
}
