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

mod support;
use support::command_calls;

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

/// The next `Renewed` of `group`.
async fn renewed(events: &mut broadcast::Receiver<Event>, group: &str) {
    timeout(TTL, async {
        loop {
            if let Ok(Event::Renewed { group: g, .. }) = events.recv().await {
                if g == group {
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{group} not renewed within {TTL:?}"));
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
    // Check that they do: fewer script calls than renewals (renew.lua
    // would take one call per renewal). Nothing else runs a script now.
    let renewals = || a.stats(G).unwrap().renewals + a.stats("other").unwrap().renewals;
    let (calls, before) = (command_calls(&server, "evalsha").await, renewals());
    tokio::time::sleep(RENEW * 4).await;
    let (calls, count) = (
        command_calls(&server, "evalsha").await - calls,
        renewals() - before,
    );
    assert!(count >= 4, "{count} renewals in 4 intervals");
    assert!(
        calls * 3 <= count * 2,
        "{calls} script calls for {count} renewals: not batched"
    );
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
    // Within one renew interval, with margin for a busy machine (still
    // short of the lease's expiry, which would end it as `Expired`).
    let took = paused_at.elapsed();
    assert!(took <= RENEW + Duration::from_millis(900), "{took:?}");
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
    // Ask right after a renewal: a renewal finds the pause only one renew
    // interval later, the request at once.
    renewed(&mut a_events, G).await;
    let asked = Instant::now();
    assert!(admin.pause(G, "ops", Some("maintenance")).await.unwrap());
    assert_eq!(
        lost(&mut a_events, G, RENEW * 4).await,
        LostReason::SteppedDown
    );
    assert!(
        asked.elapsed() < RENEW * 4 / 5,
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
    // Without the request a would have gone on leading: a generous bound.
    assert!(asked.elapsed() < TTL, "{:?}", asked.elapsed());
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

#[tokio::test]
async fn a_stray_key_at_a_pause_name_pauses_and_is_listed_without_failing_the_rest() {
    let server = RedisServer::start().await.unwrap();
    let admin = Admin::new(&config(&server, "admin")).unwrap();
    let a = instance(&server, "a");
    until_leader(&a, G).await;
    // A fenced write to a name the runtime keeps is refused.
    let refused = a
        .run_if_leader(G, || async {
            let fence = leader_runtime::current_lease().unwrap().fence();
            fence.set(fence.key("paused"), "oops").await
        })
        .await
        .expect("leads");
    assert!(
        matches!(refused, Err(leader_runtime::Error::ReservedKey { .. })),
        "{refused:?}"
    );
    assert!(server
        .cmd(&["GET", "leader:{jobs}:paused"])
        .await
        .unwrap()
        .is_nil());
    // Written some other way, a string there pauses the group all the same
    // (fail closed), and shows in the list, beside the other groups.
    server
        .cmd(&["SET", "leader:{other}:paused", "oops"])
        .await
        .unwrap();
    let groups = admin.groups().await.unwrap();
    let names: Vec<&str> = groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, [G, "other"]);
    let other = &groups[1];
    assert_eq!(other.error, None);
    let pause = other.paused.as_ref().expect("paused");
    assert!(
        pause
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("string"),
        "{pause:?}"
    );
    assert!(a.run_if_leader("other", || async {}).await.is_none());
    tokio::time::sleep(TTL * 2).await;
    assert!(!a.is_leader("other"));
    // A group whose keys cannot be read is listed with its error.
    server
        .cmd(&["SET", "leader:{broken}:token", "x"])
        .await
        .unwrap();
    server
        .cmd(&["SADD", "leader:{broken}:lease", "x"])
        .await
        .unwrap();
    let groups = admin.groups().await.unwrap();
    let broken = groups.iter().find(|g| g.group == "broken").expect("listed");
    assert!(broken.error.is_some(), "{broken:?}");
    assert!(groups
        .iter()
        .any(|g| g.group == G && g.holder.as_deref() == Some("a")));
    // A key whose name is not UTF-8 is no group's: left out, not a failure
    // of the whole list (`leader status` exited 1 on it).
    server
        .cmd(&[
            "EVAL",
            "return redis.call('SET', 'leader:{bin\\255}:lease', 'x')",
            "0",
        ])
        .await
        .unwrap();
    let groups = admin.groups().await.unwrap();
    assert!(groups.iter().any(|g| g.group == G), "{groups:?}");
    assert!(
        !groups.iter().any(|g| g.group.starts_with("bin")),
        "{groups:?}"
    );
    // `resume` deletes the stray key: the group runs again.
    assert!(admin.resume("other").await.unwrap());
    until_leader(&a, "other").await;
    a.shutdown().await;
}
