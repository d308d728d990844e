//! Fenced writes against a real `redis-server` and a real 3-master Redis
//! Cluster (each test starts its own): applied with the current token,
//! refused with the mark once a successor was elected (before it wrote
//! anything), exact above 2^53, fail closed without a record or on one
//! restored from an older snapshot, keys outside
//! the group's slot refused before anything is sent, user scripts.
//! (A paused and a partitioned leader writing through the fence, as
//! processes: `tests/fence_chaos.rs` at the root.)

use std::time::Duration;

use leader_runtime::fence::{FencedScript, Reply};
use leader_runtime::{Error, Event, Fenced, Lease, Runtime};
use leader_testkit::{Persisted, RedisCluster, RedisServer};
use tokio::time::timeout;

mod support;
use support::{runtime, TTL};

/// The tests' timings, retrying every 100 ms, as instance `id`.
fn config(id: &str) -> leader_runtime::ConfigBuilder {
    support::config(id).retry_interval(Duration::from_millis(100))
}

/// Instance `id` on the Redis at `url`.
fn instance(url: String, id: &str) -> Runtime {
    runtime(config(id).redis_url(url))
}

fn record_key(group: &str) -> String {
    format!("leader:{{{group}}}:token")
}

/// `rt` leads `group` (waiting for its election if need be): the lease.
async fn lead(rt: &Runtime, group: &str) -> Lease {
    lead_within(rt, group, TTL * 4).await
}

/// `rt` leads `group`, elected within `within`: the lease.
async fn lead_within(rt: &Runtime, group: &str, within: Duration) -> Lease {
    let mut events = rt.subscribe();
    let lease = || async {
        rt.run_if_leader(group, || async { leader_runtime::current_lease() })
            .await
            .flatten()
    };
    if let Some(lease) = lease().await {
        return lease;
    }
    timeout(within, async {
        loop {
            if let Event::Elected { group: g, .. } = events.recv().await.unwrap() {
                if g == group {
                    if let Some(lease) = lease().await {
                        return lease;
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{group}: not elected"))
}

fn stale<T>(fenced: Fenced<T>) -> (u64, Option<u64>) {
    match fenced {
        Fenced::Stale { token, mark, .. } => (token, mark),
        Fenced::Applied(_) => panic!("a stale write was applied"),
    }
}

async fn get(server: &RedisServer, key: &str) -> Option<String> {
    server
        .cmd(&["GET", key])
        .await
        .unwrap()
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn writes_apply_for_the_leader_and_are_refused_once_a_successor_is_elected() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let b = instance(server.url(), "b");
    let fence = lead(&a, "jobs").await.fence();
    let (key, hash, n) = (fence.key("state"), fence.key("h"), fence.key("n"));
    assert_eq!(key, "leader:{jobs}:state");

    assert_eq!(fence.set(&key, "a").await.unwrap(), Fenced::Applied(()));
    assert_eq!(
        fence.hset(&hash, "f", "1").await.unwrap(),
        Fenced::Applied(true)
    );
    assert_eq!(fence.incr(&n, 40).await.unwrap(), Fenced::Applied(40));
    assert_eq!(
        fence.incr(&n, i64::MAX - 40).await.unwrap(),
        Fenced::Applied(i64::MAX)
    );
    assert!(
        matches!(fence.incr(&hash, 1).await, Err(Error::Backend { .. })),
        "WRONGTYPE"
    );
    let gone = fence.key("gone");
    assert_eq!(fence.set(&gone, "x").await.unwrap(), Fenced::Applied(()));
    assert_eq!(
        fence.expire(&gone, Duration::from_secs(60)).await.unwrap(),
        Fenced::Applied(true)
    );
    let pttl = server
        .cmd(&["PTTL", &gone])
        .await
        .unwrap()
        .as_int()
        .unwrap();
    assert!(pttl > 50_000 && pttl <= 60_000, "{pttl}");
    assert_eq!(fence.delete(&gone).await.unwrap(), Fenced::Applied(true));
    assert_eq!(fence.delete(&gone).await.unwrap(), Fenced::Applied(false));
    let script = FencedScript::new(
        "redis.call('RPUSH', KEYS[1], ARGV[1], ARGV[2]) return redis.call('LRANGE', KEYS[1], 0, -1)",
    );
    let list = fence.key("list");
    assert_eq!(
        fence.eval(&script, &[&list], &["x", "y"]).await.unwrap(),
        Fenced::Applied(Reply::Array(vec![
            Reply::Data(b"x".to_vec()),
            Reply::Data(b"y".to_vec())
        ]))
    );
    let nil = FencedScript::new("redis.call('SET', KEYS[1], ARGV[1])");
    assert_eq!(
        fence.eval(&nil, &[&key], &["a"]).await.unwrap(),
        Fenced::Applied(Reply::Nil)
    );

    // b is elected: from then on a is refused, before b wrote anything.
    a.shutdown().await;
    let new = lead(&b, "jobs").await;
    assert!(new.token() > fence.token());
    let mark = Some(new.token());
    let me = fence.token();
    assert_eq!(stale(fence.set(&key, "late").await.unwrap()), (me, mark));
    assert_eq!(
        stale(fence.hset(&hash, "f", "late").await.unwrap()),
        (me, mark)
    );
    assert_eq!(stale(fence.incr(&n, -1).await.unwrap()), (me, mark));
    assert_eq!(
        stale(fence.expire(&key, Duration::from_millis(1)).await.unwrap()),
        (me, mark)
    );
    assert_eq!(stale(fence.delete(&hash).await.unwrap()), (me, mark));
    assert_eq!(
        stale(fence.eval(&script, &[&list], &["z", "z"]).await.unwrap()),
        (me, mark)
    );
    assert_eq!(get(&server, &key).await.as_deref(), Some("a"));
    assert_eq!(server.cmd(&["HGET", &hash, "f"]).await.unwrap(), "1");
    assert_eq!(get(&server, &n).await.unwrap(), i64::MAX.to_string());
    assert_eq!(
        server.cmd(&["PTTL", &key]).await.unwrap().as_int(),
        Some(-1)
    );
    assert_eq!(
        server.cmd(&["LLEN", &list]).await.unwrap().as_int(),
        Some(2)
    );
    // A plain SET with the same connection settings is not fenced: it lands.
    server.cmd(&["SET", &key, "unfenced"]).await.unwrap();
    assert_eq!(get(&server, &key).await.as_deref(), Some("unfenced"));

    let fence = new.fence();
    assert_eq!(fence.set(&key, "b").await.unwrap(), Fenced::Applied(()));
    assert_eq!(get(&server, &key).await.as_deref(), Some("b"));
    b.shutdown().await;
}

#[tokio::test]
async fn tokens_compare_exactly_above_2_pow_53_and_a_missing_record_fails_closed() {
    let server = RedisServer::start().await.unwrap();
    let record = record_key("jobs");
    // A record from an earlier election, just above 2^53 (written by the
    // acquire script of another run: the next leader waits one ttl).
    server
        .cmd(&[
            "HSET",
            &record,
            "token",
            "9007199254740994",
            "until",
            "0",
            "prior",
            "0",
            "run",
            "x",
        ])
        .await
        .unwrap();
    let a = instance(server.url(), "a");
    let fence = lead(&a, "jobs").await.fence();
    assert_eq!(fence.token(), 9_007_199_254_740_995);
    let key = fence.key("state");
    assert_eq!(fence.set(&key, "1").await.unwrap(), Fenced::Applied(()));

    // One above our token: as doubles, 2^53+3 and 2^53+4 are the same number.
    server
        .cmd(&["HSET", &record, "token", "9007199254740996"])
        .await
        .unwrap();
    assert_eq!(
        stale(fence.set(&key, "2").await.unwrap()),
        (9_007_199_254_740_995, Some(9_007_199_254_740_996))
    );
    // Below our token on a record this server vouches for (a token issued
    // where the record does not show it): the write applies and raises the
    // mark to our token.
    server
        .cmd(&["HSET", &record, "token", "9007199254740994"])
        .await
        .unwrap();
    assert_eq!(fence.set(&key, "3").await.unwrap(), Fenced::Applied(()));
    assert_eq!(
        server.cmd(&["HGET", &record, "token"]).await.unwrap(),
        "9007199254740995"
    );

    // No record (the server lost its data): refused, no mark.
    server.cmd(&["DEL", &record]).await.unwrap();
    assert_eq!(
        stale(fence.set(&key, "4").await.unwrap()),
        (fence.token(), None)
    );
    // A malformed record: an error, nothing written.
    server
        .cmd(&["HSET", &record, "token", "1e30"])
        .await
        .unwrap();
    assert!(matches!(
        fence.set(&key, "5").await,
        Err(Error::Backend { .. })
    ));
    assert_eq!(get(&server, &key).await.as_deref(), Some("3"));
    assert_eq!(
        server.cmd(&["EXISTS", &record]).await.unwrap().as_int(),
        Some(1)
    );
    a.shutdown().await;
}

/// How long an election of the slow instances below may take: a new
/// group's first one waits their ttl.
const SLOW_WITHIN: Duration = Duration::from_secs(8);

/// Restarted from an older snapshot, the server holds a record whose mark
/// was superseded since: it does not vouch for it, so no deposed leader's
/// write applies there — not one carrying the restored mark itself, not
/// one above it (before, both applied, and the second raised the mark) —
/// until the current leader has acquired again with a safe start.
#[tokio::test]
async fn after_a_restart_from_an_older_snapshot_no_deposed_leader_writes() {
    let mut server = RedisServer::start().await.unwrap();
    // Renewals 1.5 s apart: the leader's renewal, which finds the restored
    // record and leads to a new election (a new mark), comes well after
    // the deposed writes.
    let url = server.url();
    let slow = |id: &str| {
        runtime(
            config(id)
                .redis_url(url.clone())
                .ttl(Duration::from_secs(4))
                .renew_interval(Duration::from_millis(1500)),
        )
    };
    let a = slow("a");
    let first = lead_within(&a, "jobs", SLOW_WITHIN).await.fence();
    let key = first.key("state");
    // The snapshot's mark: a's first token.
    server.cmd(&["SAVE"]).await.unwrap();
    let b = slow("b");
    assert_eq!(b.run_if_leader("jobs", || async {}).await, None);
    a.step_down("jobs").await.unwrap();
    let second = lead_within(&b, "jobs", SLOW_WITHIN).await.fence();
    assert!(second.token() > first.token());
    b.step_down("jobs").await.unwrap();
    let third = lead_within(&a, "jobs", SLOW_WITHIN).await.fence();
    assert!(third.token() > second.token());
    assert_eq!(
        third.set(&key, "a again").await.unwrap(),
        Fenced::Applied(())
    );

    server.restart_from(Persisted::Rdb).await.unwrap();
    let mark = server.cmd(&["HGET", &record_key("jobs"), "token"]).await;
    assert_eq!(mark.unwrap(), first.token().to_string().as_str());
    for (deposed, value) in [(&first, "a, deposed"), (&second, "b, deposed")] {
        // The first call after the restart may find the old connection broken.
        let mut written = deposed.set(&key, value).await;
        for _ in 0..20 {
            if written.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            written = deposed.set(&key, value).await;
        }
        // Refused: no mark on the restored record, or a greater one once
        // the leader acquired again (its renewal found that record).
        let (token, mark) = stale(written.unwrap());
        assert_eq!(token, deposed.token(), "{value}");
        assert!(mark.is_none_or(|m| m > third.token()), "{value}: {mark:?}");
    }
    // The snapshot predates a's write: nothing was written since.
    assert_eq!(get(&server, &key).await, None);
    // Nor was the mark raised to a deposed token: it is the restored one,
    // or a new election's.
    let mark = server.cmd(&["HGET", &record_key("jobs"), "token"]).await;
    let mark: u64 = mark.unwrap().as_str().unwrap().parse().unwrap();
    assert!(mark == first.token() || mark > third.token(), "{mark}");

    // The leader acquires again (its renewal fails on that record), with a
    // token above every earlier one, and writes.
    let fourth = timeout(Duration::from_secs(12), async {
        loop {
            let fence = lead_within(&a, "jobs", SLOW_WITHIN).await.fence();
            if fence.token() != third.token() {
                return fence;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leads again under a new token");
    assert!(fourth.token() > third.token());
    assert_eq!(
        fourth.set(&key, "a, new").await.unwrap(),
        Fenced::Applied(())
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn fenced_writes_on_a_three_master_cluster() {
    let cluster = RedisCluster::start().await.unwrap();
    let instance = |id: &str| runtime(config(id).redis_cluster_urls(cluster.urls()));
    let (a, b) = (instance("a"), instance("b"));
    // One group per master.
    let mut groups: Vec<Option<String>> = vec![None; cluster.nodes().len()];
    for n in 0.. {
        let group = format!("job-{n}");
        let owner = cluster.master_of(&record_key(&group)).await.unwrap();
        groups[owner].get_or_insert(group);
        if groups.iter().all(Option::is_some) {
            break;
        }
    }
    for (i, group) in groups.into_iter().map(Option::unwrap).enumerate() {
        let fence = lead(&a, &group).await.fence();
        let key = fence.key("state");
        assert_eq!(fence.set(&key, "a").await.unwrap(), Fenced::Applied(()));
        assert_eq!(
            fence.incr(fence.key("n"), 2).await.unwrap(),
            Fenced::Applied(2)
        );
        let node = cluster.node(i);
        assert_eq!(node.cmd(&["GET", &key]).await.unwrap(), "a", "{group}");
        // A key of another slot: refused here, not by the cluster.
        for bad in [
            "{leader}:{cleanup}:state".to_owned(),
            format!("{group}:state"),
        ] {
            match fence.set(&bad, "x").await {
                Err(Error::KeySlot { key, .. }) => assert_eq!(key, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let script = FencedScript::new("return redis.call('GET', KEYS[1])");
        assert_eq!(
            fence.eval(&script, &[&key], &[]).await.unwrap(),
            Fenced::Applied(Reply::Data(b"a".to_vec()))
        );

        // b takes over this group: a's next write is refused.
        a.step_down(&group).await.unwrap();
        let new = lead(&b, &group).await;
        assert_eq!(
            stale(fence.set(&key, "late").await.unwrap()),
            (fence.token(), Some(new.token()))
        );
        assert_eq!(node.cmd(&["GET", &key]).await.unwrap(), "a", "{group}");
        assert_eq!(
            new.fence().set(&key, "b").await.unwrap(),
            Fenced::Applied(())
        );
        assert_eq!(node.cmd(&["GET", &key]).await.unwrap(), "b", "{group}");
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_token_is_checked_by_the_server_not_by_the_local_view() {
    // The local view ends when the lease is lost, but a write is refused
    // only once a successor was elected: after a clean step-down with nobody
    // else campaigning, the old token is still the mark.
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    let lease = lead(&a, "solo").await;
    a.set_eligible("solo", false).await.unwrap();
    assert!(!lease.is_valid());
    let fence = lease.fence();
    assert_eq!(
        fence.set(fence.key("k"), "v").await.unwrap(),
        Fenced::Applied(())
    );
    a.shutdown().await;
}
