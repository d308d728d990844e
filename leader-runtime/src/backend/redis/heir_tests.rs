//! The heir rule in `acquire.lua` and `acquire_many.lua` on a real
//! `redis-server` (see `heir.rs`): a lease with less than `suspect_below`
//! left names the first follower that sees it the group's heir, which is
//! answered the true PTTL, every other follower that PTTL plus the grace.

use std::time::Duration;

use leader_testkit::{RedisCluster, RedisServer, Reply};
use redis::AsyncCommands;

use super::acquire_many_tests::answers_of as answers;
use crate::backend::heir::{Heir, HEIR_GRACE};
use crate::backend::{Acquire, Backend};
use crate::{Config, ConfigBuilder, Runtime};

/// A runtime of `id` on `server` with the default timings (ttl 15 s, renew
/// 5 s: the rule is on, `suspect_below` 8.75 s) or, `heir` false, a renew
/// interval too short for it.
fn runtime(server: &RedisServer, id: &str, heir: bool) -> Runtime {
    runtime_on(Config::builder().redis_url(server.url()), id, heir)
}

/// [`runtime`] on the server(s) `config` names.
fn runtime_on(config: ConfigBuilder, id: &str, heir: bool) -> Runtime {
    let mut config = config.instance_id(id);
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
    // The answers for a, b (batched), then a, b (alone).
    let left = [
        lease_left(&server, "a").await,
        lease_left(&server, "b").await,
    ];
    for (i, p) in pttls(&got, "gone").into_iter().enumerate() {
        assert!(delayed(p, left[i % 2]), "{got:?}, {left:?} left");
    }
    // The heir still gets the true PTTL, and stays the heir.
    let got = asked(&first.ctx().backend, "me", &["a", "b"]).await;
    for p in pttls(&got, "gone") {
        assert!(p <= Duration::from_secs(3), "{got:?}");
    }
    // The name outlives the lease by the grace and a second (both count
    // down together; 50 ms of slack for the two reads).
    let (heir_ms, lease_ms): (i64, i64) = redis::pipe()
        .pttl("leader:{a}:heir")
        .pttl("leader:{a}:lease")
        .query_async(&mut conn)
        .await
        .unwrap();
    let outlives = heir_ms - lease_ms;
    let expected = (HEIR_GRACE + Duration::from_secs(1)).as_millis() as i64;
    assert!(
        (expected - 50..=expected + 50).contains(&outlives),
        "heir key pttl {heir_ms}, lease {lease_ms}"
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

/// Sets `key` to `gone` for `ms` on `server`.
async fn pset(server: &RedisServer, key: &str, ms: u64) {
    let reply = server
        .cmd(&["SET", key, "gone", "PX", &ms.to_string()])
        .await
        .unwrap();
    assert_eq!(reply, Reply::Simple("OK".into()));
}

/// What `group`'s lease on `server` has left now.
async fn lease_left(server: &RedisServer, group: &str) -> Duration {
    let key = format!("leader:{{{group}}}:lease");
    let ms = server.cmd(&["PTTL", &key]).await.unwrap().as_int().unwrap();
    Duration::from_millis(u64::try_from(ms).unwrap_or_default())
}

/// A follower that is not the heir is answered the grace on top of what
/// the lease had left: at least what it has left now, plus the grace
/// (whenever the answer came), and at most the whole 3 s plus it.
fn delayed(p: Duration, left_now: Duration) -> bool {
    p >= left_now + HEIR_GRACE && p <= Duration::from_secs(3) + HEIR_GRACE
}

/// `first` (instance id "first") asks for `group`, whose lease on
/// `server` missed a renewal, then `second` ("second"): the first is named
/// the heir and answered the true PTTL, the second the grace on top.
async fn heir_then_other(server: &RedisServer, first: &Runtime, second: &Runtime, group: &str) {
    let heir = answers(&first.ctx().backend, "first", &[group]).await;
    let other = answers(&second.ctx().backend, "second", &[group]).await;
    assert!(
        pttls(&heir, "gone")[0] <= Duration::from_secs(3),
        "{heir:?}"
    );
    let left = lease_left(server, group).await;
    assert!(
        delayed(pttls(&other, "gone")[0], left),
        "{other:?}, {left:?}"
    );
}

/// The heir named for `group` on `server`, if any.
async fn heir_of(server: &RedisServer, group: &str) -> Option<String> {
    let key = format!("leader:{{{group}}}:heir");
    let reply = server.cmd(&["GET", &key]).await.unwrap();
    reply.as_str().map(str::to_owned)
}

/// Under an ACL user whose key rules name each suffix, the heir key needs
/// its own rule (DEPLOYING.md): without it the refused `GET` leaves the
/// rule out (every follower is answered the true PTTL, no error); with it
/// the rule works as under `~leader:*`.
#[tokio::test]
async fn an_acl_user_without_the_heir_key_leaves_the_rule_out() {
    const COMMANDS: &str = "&leader:released &leader:control +evalsha +eval +script|load \
        +get +set +pexpire +pttl +del +time +info +type +exists +hmget +hset +publish \
        +subscribe +ping";
    let per_suffix =
        "~leader:{*}:lease ~leader:{*}:token ~leader:{*}:paused ~leader:server ~leader:{*}:server";
    let narrow = format!("{per_suffix} {COMMANDS}");
    let wide = format!("{per_suffix} ~leader:{{*}}:heir {COMMANDS}");
    let server = RedisServer::builder()
        .password("admin-pw")
        .acl_user("narrow", "pw", &narrow)
        .acl_user("wide", "pw", &wide)
        .start()
        .await
        .unwrap();
    let url = |user: &str| format!("redis://{user}:pw@127.0.0.1:{}", server.port());
    for g in ["a", "b"] {
        pset(&server, &format!("leader:{{{g}}}:lease"), 3_000).await;
    }
    let on = |user: &str, id: &str| runtime_on(Config::builder().redis_url(url(user)), id, true);

    let (first, second) = (on("narrow", "first"), on("narrow", "second"));
    for (rt, id) in [(&first, "first"), (&second, "second")] {
        let got = answers(&rt.ctx().backend, id, &["a"]).await;
        for p in pttls(&got, "gone") {
            assert!(p <= Duration::from_secs(3), "{id}: {got:?}");
        }
    }
    assert_eq!(heir_of(&server, "a").await, None);
    // The refused GET is logged, naming the heir key.
    let denials = server.cmd(&["ACL", "LOG"]).await.unwrap();
    assert!(
        format!("{denials:?}").contains("leader:{a}:heir"),
        "{denials:?}"
    );

    let (first_w, second_w) = (on("wide", "first"), on("wide", "second"));
    heir_then_other(&server, &first_w, &second_w, "b").await;
    assert_eq!(heir_of(&server, "b").await.as_deref(), Some("first"));
    for rt in [first, second, first_w, second_w] {
        rt.shutdown().await;
    }
}

/// On a cluster the heir key lives beside the lease (same slot, same
/// master), for groups on several masters.
#[tokio::test]
async fn on_a_cluster_the_heir_is_named_on_the_lease_master() {
    let cluster = RedisCluster::start().await.unwrap();
    let groups = ["a", "b", "c", "d", "e", "f"];
    let mut masters = Vec::new();
    for g in groups {
        let lease = format!("leader:{{{g}}}:lease");
        let master = cluster.master_of(&lease).await.unwrap();
        pset(cluster.node(master), &lease, 3_000).await;
        masters.push(master);
    }
    masters.sort();
    masters.dedup();
    assert!(masters.len() > 1, "the groups span one master only");
    let on = |id: &str| {
        runtime_on(
            Config::builder().redis_cluster_urls(cluster.urls()),
            id,
            true,
        )
    };
    let (first, second) = (on("first"), on("second"));
    // One call per group: the batcher splits its calls by slot, not
    // `acquire_many`.
    let (mut heir, mut other) = (Vec::new(), Vec::new());
    for g in groups {
        heir.extend(answers(&first.ctx().backend, "first", &[g]).await);
        other.extend(answers(&second.ctx().backend, "second", &[g]).await);
    }
    for p in pttls(&heir, "gone") {
        assert!(p <= Duration::from_secs(3), "{heir:?}");
    }
    for (g, p) in groups.iter().zip(pttls(&other, "gone")) {
        let master = cluster
            .master_of(&format!("leader:{{{g}}}:lease"))
            .await
            .unwrap();
        let left = lease_left(cluster.node(master), g).await;
        assert!(delayed(p, left), "{g}: {other:?}, {left:?} left");
    }
    for g in groups {
        let master = cluster
            .master_of(&format!("leader:{{{g}}}:lease"))
            .await
            .unwrap();
        assert_eq!(
            heir_of(cluster.node(master), g).await.as_deref(),
            Some("first"),
            "{g}"
        );
    }
    first.shutdown().await;
    second.shutdown().await;
}

/// With `min_replicas` (the acquire script and `WAIT` pipelined), refused
/// attempts still name one heir, and the name reaches the replica.
#[tokio::test]
async fn with_min_replicas_the_heir_is_named_and_replicated() {
    let (primary, replica) = RedisServer::builder().start_with_replica().await.unwrap();
    pset(&primary, "leader:{a}:lease", 3_000).await;
    let on = |id: &str| {
        let config = Config::builder()
            .redis_url(primary.url())
            .call_timeout(Duration::from_secs(2))
            .min_replicas(1);
        runtime_on(config, id, true)
    };
    let (first, second) = (on("first"), on("second"));
    heir_then_other(&primary, &first, &second, "a").await;
    // The first call's WAIT covered its write: the name is on the replica.
    assert_eq!(heir_of(&replica, "a").await.as_deref(), Some("first"));
    first.shutdown().await;
    second.shutdown().await;
}
