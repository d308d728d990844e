//! The heir rule in `acquire.lua` and `acquire_many.lua` on a real
//! `redis-server` (see `heir.rs`): a lease with less than `suspect_below`
//! left names the first follower that sees it the group's heir, which is
//! answered the true PTTL, every other follower that PTTL plus the grace.

use std::time::Duration;

use leader_testkit::RedisServer;
use redis::AsyncCommands;

use super::acquire_many_tests::answers_of as answers;
use crate::backend::heir::{Heir, HEIR_GRACE};
use crate::backend::{Acquire, Backend};
use crate::{Config, Runtime};

/// A runtime of `id` on `server` with the default timings (ttl 15 s, renew
/// 5 s: the rule is on, `suspect_below` 8.75 s) or, `heir` false, a renew
/// interval too short for it.
fn runtime(server: &RedisServer, id: &str, heir: bool) -> Runtime {
    let mut config = Config::builder().redis_url(server.url()).instance_id(id);
    if !heir {
        config = config
            .ttl(Duration::from_secs(15))
            .renew_interval(Duration::from_millis(500));
    }
    Runtime::new(config.build().unwrap()).unwrap()
}

/// Each answer's PTTL (panics on anything but a lease held by `holder`).
fn pttls(got: &[Result<Acquire, String>], holder: &str) -> Vec<Duration> {
    got.iter()
        .map(|a| match a {
            Ok(Acquire::Held {
                holder: h,
                pttl: Some(p),
            }) if h == holder => *p,
            other => panic!("{other:?} in {got:?}"),
        })
        .collect()
}

/// `id`'s answers: the batched call for all `groups`, and each alone.
async fn asked(backend: &Backend, id: &str, groups: &[&str]) -> Vec<Result<Acquire, String>> {
    let mut all = answers(backend, id, groups).await;
    for g in groups {
        all.extend(answers(backend, id, &[g]).await);
    }
    all
}

#[tokio::test]
async fn a_lease_that_missed_a_renewal_names_one_heir_and_delays_the_others() {
    let heir = Heir::for_timings(Duration::from_secs(15), Duration::from_secs(5)).unwrap();
    let server = RedisServer::start().await.unwrap();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // `a` and `b` missed a renewal (3 s left, under 8.75 s); `c` did not.
    for (g, ms) in [("a", 3_000), ("b", 3_000), ("c", 12_000)] {
        let () = conn
            .pset_ex(format!("leader:{{{g}}}:lease"), "gone", ms)
            .await
            .unwrap();
    }
    assert!(Duration::from_secs(3) < heir.suspect_below);
    assert!(Duration::from_secs(12) > heir.suspect_below);
    // The first follower to ask: `a` in a batch, `b` alone.
    let first = runtime(&server, "me", true);
    let got = answers(&first.ctx().backend, "me", &["a", "c"]).await;
    let alone = answers(&first.ctx().backend, "me", &["b"]).await;
    let p = pttls(&got, "gone");
    assert!(p[0] <= Duration::from_secs(3), "{got:?}");
    assert!(p[1] > Duration::from_secs(11), "{got:?}");
    assert!(
        pttls(&alone, "gone")[0] <= Duration::from_secs(3),
        "{alone:?}"
    );
    for g in ["a", "b"] {
        let named: Option<String> = conn.get(format!("leader:{{{g}}}:heir")).await.unwrap();
        assert_eq!(named.as_deref(), Some("me"), "{g}");
    }
    let named: Option<String> = conn.get("leader:{c}:heir").await.unwrap();
    assert_eq!(named, None, "a lease with 12 s left names no heir");

    // Another follower, in a batch and alone: the grace on top, for both.
    let other = runtime(&server, "other", true);
    let got = asked(&other.ctx().backend, "other", &["a", "b"]).await;
    for p in pttls(&got, "gone") {
        assert!(
            p > Duration::from_secs(3) && p <= Duration::from_secs(3) + HEIR_GRACE,
            "{got:?}"
        );
    }
    // The heir still gets the true PTTL, and stays the heir.
    let got = asked(&first.ctx().backend, "me", &["a", "b"]).await;
    for p in pttls(&got, "gone") {
        assert!(p <= Duration::from_secs(3), "{got:?}");
    }
    // The name outlives the lease by the grace and a second, no more.
    let left: i64 = conn.pttl("leader:{a}:heir").await.unwrap();
    assert!(
        (3_000..=3_000 + 200 + 1_000).contains(&left),
        "heir key pttl {left}"
    );
    first.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn without_the_rule_or_with_a_heir_key_it_cannot_read_the_ttl_is_the_true_one() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for g in ["a", "b"] {
        let () = conn
            .pset_ex(format!("leader:{{{g}}}:lease"), "gone", 3_000)
            .await
            .unwrap();
    }
    // A renew interval of 500 ms: no heir rule, nothing named.
    let off = runtime(&server, "off", false);
    let got = asked(&off.ctx().backend, "off", &["a", "b"]).await;
    for p in pttls(&got, "gone") {
        assert!(p <= Duration::from_secs(3), "{got:?}");
    }
    let named: Option<String> = conn.get("leader:{a}:heir").await.unwrap();
    assert_eq!(named, None);
    // The heir key of `b` is of another type (GET fails): the rule is left
    // out for that group, the call still answers every group.
    let () = conn.hset("leader:{b}:heir", "x", "y").await.unwrap();
    let on = runtime(&server, "on", true);
    let got = asked(&on.ctx().backend, "on", &["a", "b"]).await;
    for p in pttls(&got, "gone") {
        assert!(p <= Duration::from_secs(3), "{got:?}");
    }
    let named: Option<String> = conn.get("leader:{a}:heir").await.unwrap();
    assert_eq!(named.as_deref(), Some("on"));
    off.shutdown().await;
    on.shutdown().await;
}
