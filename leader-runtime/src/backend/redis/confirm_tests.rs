//! `min_replicas` on a real primary with one real replica: an acquisition
//! that no `WAIT` confirmed — because the `WAIT` failed, or because the
//! call gave no reply at all — makes the group's next win wait one ttl,
//! for a lone acquire and a batched one alike.

use std::time::Duration;

use leader_testkit::{FaultProxy, RedisServer};

use super::acquire_many_tests::{answers, TTL};
use crate::backend::{Acquire, Backend, SafeStart};
use crate::names::GroupKeys;
use crate::{Config, Runtime};

/// Long enough for `WAIT` (given half of it) to hear the replica on a busy
/// host.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The rules the docs of `ConfigBuilder::redis_url` list, without the
/// `+wait` that `min_replicas` needs.
const RULES: &str = "~leader:* &leader:released &leader:control +evalsha +eval \
    +script|load +get +set +pexpire +pttl +del +time +info +type +exists +hmget +hset \
    +publish +subscribe +ping";

/// A runtime of instance "me" on `url` with `min_replicas(1)`, and
/// [`CALL_TIMEOUT`].
fn runtime(url: String) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(url)
            .instance_id("me")
            .call_timeout(CALL_TIMEOUT)
            .min_replicas(1)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// `me` re-claims each of `calls`' groups (its lease is still there), now
/// with the replica acknowledging: each win waits one full ttl, for the
/// unconfirmed acquisition before it (a re-claim alone would wait for
/// less: the time its own first acquisition left, as `Early`).
async fn next_wins_wait_one_ttl(server: &RedisServer, backend: &Backend, calls: &[&[&str]]) {
    for groups in calls {
        for (group, got) in groups.iter().zip(answers(backend, groups).await) {
            match got {
                Ok(Acquire::Won { wait, why, .. }) => assert!(
                    wait == TTL && why == SafeStart::Unvouched,
                    "{group}: the next win waits {wait:?} ({why:?}), not one ttl\n{}",
                    server.report()
                ),
                other => panic!("{group}: {other:?}\n{}", server.report()),
            }
        }
    }
}

/// A `WAIT` refused (the ACL user lacks `+wait`) confirms nothing: the
/// acquisitions before it (each group's first: a safe start) are marked as
/// if too few replicas had acknowledged them. Fails on the old code: the
/// error returned before the group was marked, and the next win was an
/// `Early` re-claim.
#[tokio::test]
async fn a_refused_wait_marks_the_safe_starts_it_followed() {
    let (server, _replica) = RedisServer::builder()
        .acl_user("app", "app-pw", RULES)
        .start_with_replica()
        .await
        .unwrap();
    let rt = runtime(format!("redis://app:app-pw@127.0.0.1:{}", server.port()));
    let backend = &rt.ctx().backend;
    let calls: [&[&str]; 2] = [&["lone"], &["b1", "b2", "b3"]];
    for groups in calls {
        for (group, got) in groups.iter().zip(answers(backend, groups).await) {
            let e = got.expect_err("won without a WAIT");
            assert!(e.contains("permissions to run the 'wait'"), "{group}: {e}");
            let key = format!("leader:{{{group}}}:lease");
            assert_eq!(server.cmd(&["GET", &key]).await.unwrap(), "me", "{group}");
        }
    }
    server
        .cmd(&["ACL", "SETUSER", "app", "+wait"])
        .await
        .unwrap();
    next_wins_wait_one_ttl(&server, backend, &calls).await;
}

/// An acquire + `WAIT` pipeline with no reply (here: the replies arrive
/// after the call timeout) may have run the script, and a win in it may
/// have been a safe start: every group of the call is marked. Fails on the
/// old code: no group was, and the next win was an `Early` re-claim.
#[tokio::test]
async fn an_acquire_with_no_reply_marks_every_group_of_the_call() {
    let (server, _replica) = RedisServer::builder().start_with_replica().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let rt = runtime(proxy.url());
    let backend = &rt.ctx().backend;
    // Both scripts loaded (a `NOSCRIPT` reply that comes too late would
    // load nothing), on other groups.
    for groups in [&["x"][..], &["y1", "y2"]] {
        for got in answers(backend, groups).await {
            assert!(matches!(got, Ok(Acquire::Won { .. })), "{got:?}");
        }
    }
    // Each request reaches Redis after 1.2 s, its reply arrives after
    // another 1.2 s: past the call timeout (2 s). (Both calls at once: a
    // connection made again after the first timed out would not get
    // through.)
    proxy.delay(Duration::from_millis(1200));
    let calls: [&[&str]; 2] = [&["lone"], &["b1", "b2", "b3"]];
    let (lone, batch) = tokio::join!(answers(backend, calls[0]), answers(backend, calls[1]));
    for (group, got) in calls.concat().iter().zip(lone.into_iter().chain(batch)) {
        assert!(got.is_err(), "{group}: {got:?}");
    }
    proxy.pass();
    // The scripts ran: each group's first election, a safe start.
    for group in calls.concat() {
        let key = format!("leader:{{{group}}}:lease");
        assert_eq!(server.cmd(&["GET", &key]).await.unwrap(), "me", "{group}");
    }
    next_wins_wait_one_ttl(&server, backend, &calls).await;
}

/// The marks are dropped once they no longer matter: a runtime that
/// names many groups, each marked (no replica acknowledges: every first
/// win is an unconfirmed safe start) and then never named again, does not
/// keep an entry per group for good. The next judged acquisition after the
/// marks expired (ttl + the call timeout) sweeps them. Fails on the old
/// code: the set only grew.
#[tokio::test]
async fn marks_of_groups_never_named_again_are_dropped() {
    const SHORT_TTL: Duration = Duration::from_millis(300);
    const SHORT_CALL: Duration = Duration::from_millis(400);
    // No replica: `WAIT` answers 0 after its timeout (half the call's).
    let server = RedisServer::start().await.unwrap();
    let rt = Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .instance_id("me")
            .call_timeout(SHORT_CALL)
            .min_replicas(1)
            .build()
            .unwrap(),
    )
    .unwrap();
    let backend = &rt.ctx().backend;
    let Backend::Redis(redis) = backend else {
        panic!("a Redis backend")
    };
    let acquire = |names: Vec<String>| async move {
        let keys: Vec<GroupKeys> = names.iter().map(|g| GroupKeys::new("leader", g)).collect();
        let pairs: Vec<(&str, &GroupKeys)> = names.iter().map(String::as_str).zip(&keys).collect();
        for got in backend.acquire_many("me", SHORT_TTL, &pairs).await {
            let e = got.expect_err("won with no replica");
            assert!(e.to_string().contains("min_replicas"), "{e}");
        }
    };
    for round in 0..3 {
        // A new server marker: new groups start safe (record.lua).
        server.cmd(&["DEL", "leader:server"]).await.unwrap();
        acquire((0..200).map(|i| format!("g{round}-{i}")).collect()).await;
    }
    assert_eq!(redis.unconfirmed_len(), 600, "every safe start marked");
    // Every mark has stopped mattering; the next judged acquisition sweeps.
    tokio::time::sleep(SHORT_TTL + SHORT_CALL + Duration::from_millis(50)).await;
    server.cmd(&["DEL", "leader:server"]).await.unwrap();
    acquire(vec!["late".to_owned()]).await;
    assert_eq!(redis.unconfirmed_len(), 1, "only the latest mark is left");
}
