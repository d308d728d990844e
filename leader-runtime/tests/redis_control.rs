//! Operators' requests on a real Redis: a pause is checked by the lease
//! scripts themselves (so a leader that missed the notice still hands over
//! at its next renewal, also inside a batched renewal), it survives restarts
//! of the instances, and a step-down request moves leadership.

use std::time::Duration;

use leader_runtime::admin::{Admin, Notice};
use leader_runtime::{Config, Event, LostReason, Runtime};
use leader_testkit::RedisServer;
use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

const G: &str = "jobs";
const TTL: Duration = Duration::from_millis(1500);
const RENEW: Duration = Duration::from_millis(500);
const RETRY: Duration = Duration::from_millis(200);

fn config(server: &RedisServer, id: &str) -> Config {
    Config::builder()
        .redis_url(server.url())
        .ttl(TTL)
        .renew_interval(RENEW)
        .retry_interval(RETRY)
        .instance_id(id)
        .build()
        .unwrap()
}

fn instance(server: &RedisServer, id: &str) -> Runtime {
    Runtime::new(config(server, id)).unwrap()
}

/// Waits until `rt` leads `group` (the first election of a group waits one ttl).
async fn until_leader(rt: &Runtime, group: &str) {
    let deadline = Instant::now() + TTL * 4;
    while !rt.is_leader(group) {
        assert!(
            Instant::now() < deadline,
            "{} never led {group}",
            rt.instance_id()
        );
        rt.run_if_leader(group, || async {}).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The next `Lost` of `group`, within `within`.
async fn lost(
    events: &mut broadcast::Receiver<Event>,
    group: &str,
    within: Duration,
) -> LostReason {
    timeout(within, async {
        loop {
            if let Ok(Event::Lost {
                group: g, reason, ..
            }) = events.recv().await
            {
                if g == group {
                    return reason;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{group} not handed over within {within:?}"))
}

#[tokio::test]
async fn a_renewal_sees_a_pause_without_any_notice() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(&server, "a");
    // Two groups: their renewals go in one batched call (renew_many.lua).
    until_leader(&a, G).await;
    until_leader(&a, "other").await;
    let mut events = a.subscribe();
    // The key alone, as if the request's notice was lost.
    server
        .cmd(&[
            "HSET",
            "leader:{jobs}:paused",
            "by",
            "test",
            "at",
            "0",
            "reason",
            "",
        ])
        .await
        .unwrap();
    let paused_at = Instant::now();
    assert_eq!(
        lost(&mut events, G, RENEW * 4).await,
        LostReason::SteppedDown
    );
    let took = paused_at.elapsed();
    assert!(took <= RENEW + Duration::from_millis(300), "{took:?}");
    // The view ended (the event); the release follows in one round trip.
    let released = timeout(Duration::from_millis(500), async {
        while !server
            .cmd(&["GET", "leader:{jobs}:lease"])
            .await
            .unwrap()
            .is_nil()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    server.check(released.await.is_ok(), "the lease was not released");
    // The other group's renewals go on.
    tokio::time::sleep(TTL * 2).await;
    assert!(a.is_leader("other") && !a.is_leader(G));
    assert_eq!(a.stats("other").unwrap().lost(), 0);
    assert!(a.status().iter().any(|s| s.group == G && s.paused));
    a.shutdown().await;
}

#[tokio::test]
async fn a_pause_survives_restarting_the_instances() {
    let server = RedisServer::start().await.unwrap();
    let admin = Admin::new(&config(&server, "admin")).unwrap();
    let a = instance(&server, "a");
    let b = instance(&server, "b");
    until_leader(&a, G).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut notices = admin.notices();
    let mut a_events = a.subscribe();
    let asked = Instant::now();
    assert!(admin.pause(G, "ops", Some("maintenance")).await.unwrap());
    assert_eq!(
        lost(&mut a_events, G, RENEW * 4).await,
        LostReason::SteppedDown
    );
    assert!(
        asked.elapsed() < RENEW,
        "the request woke the leader: {:?}",
        asked.elapsed()
    );
    let seen = timeout(TTL, notices.recv()).await.unwrap();
    assert_eq!(seen, Some(Notice::Paused { group: G.into() }));
    tokio::time::sleep(TTL * 2).await;
    assert!(!a.is_leader(G) && !b.is_leader(G));
    a.shutdown().await;
    b.shutdown().await;

    // New processes of the fleet: still paused.
    let (a, b) = (instance(&server, "a"), instance(&server, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_none());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    tokio::time::sleep(TTL * 2).await;
    assert!(!a.is_leader(G) && !b.is_leader(G));
    let info = admin.group(G).await.unwrap();
    assert_eq!(info.holder, None);
    assert_eq!(info.paused.unwrap().reason.as_deref(), Some("maintenance"));

    assert!(admin.resume(G).await.unwrap());
    let resumed = Instant::now();
    timeout(TTL, async {
        while !a.is_leader(G) && !b.is_leader(G) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("nobody led after the resume");
    // The notice woke a follower: well before its next retry.
    assert!(resumed.elapsed() < RETRY, "{:?}", resumed.elapsed());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_step_down_request_moves_leadership() {
    let server = RedisServer::start().await.unwrap();
    let admin = Admin::new(&config(&server, "admin")).unwrap();
    let a = instance(&server, "a");
    let b = instance(&server, "b");
    until_leader(&a, G).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut a_events = a.subscribe();
    let asked = Instant::now();
    assert_eq!(admin.step_down(G).await.unwrap().as_deref(), Some("a"));
    assert_eq!(lost(&mut a_events, G, TTL).await, LostReason::SteppedDown);
    timeout(TTL, async {
        while !b.is_leader(G) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("b did not take over");
    assert!(asked.elapsed() < RENEW, "{:?}", asked.elapsed());
    let info = admin.group(G).await.unwrap();
    assert_eq!(info.holder.as_deref(), Some("b"));
    let groups = admin.groups().await.unwrap();
    assert_eq!(
        groups.iter().map(|g| g.group.as_str()).collect::<Vec<_>>(),
        [G]
    );
    a.shutdown().await;
    b.shutdown().await;
}
