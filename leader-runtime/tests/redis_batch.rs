//! Renewals of many groups of one runtime go to Redis in batches: a few
//! script calls per renew tick, not one per group, also for groups won at
//! different instants; and one group's broken key does not fail the
//! renewals of the others in its batch.

use std::time::Duration;

use leader_runtime::{Config, Runtime};
use leader_testkit::RedisServer;
use tokio::time::{sleep, timeout};

mod support;
use support::{command_calls, runtime};

const TTL: Duration = Duration::from_millis(1500);
const RENEW: Duration = Duration::from_millis(300);
const GROUPS: usize = 200;

fn instance(server: &RedisServer) -> Runtime {
    let config = Config::builder().redis_url(server.url()).instance_id("a");
    runtime(config.ttl(TTL).renew_interval(RENEW))
}

fn names() -> Vec<String> {
    (0..GROUPS).map(|i| format!("g{i}")).collect()
}

/// Start every group's election and wait until this runtime leads them all.
async fn lead_all(rt: &Runtime, server: &RedisServer) {
    lead(rt, server, &names(), TTL).await;
}

/// Start the elections of `groups` and wait until `rt` leads them all (a
/// runtime whose ttl is `ttl`).
async fn lead(rt: &Runtime, server: &RedisServer, groups: &[String], ttl: Duration) {
    for g in groups {
        rt.is_leader(g);
    }
    // First election on a new server: each view turns true one ttl after its acquisition.
    let all = timeout(ttl * 4, async {
        while !groups.iter().all(|g| rt.is_leader(g)) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(all.is_ok(), "not every group led\n{}", server.report());
}

#[tokio::test]
async fn many_groups_renew_in_a_few_script_calls_per_tick() {
    let server = RedisServer::start().await.unwrap();
    let rt = instance(&server);
    lead_all(&rt, &server).await;
    let renewals =
        |rt: &Runtime| -> u64 { names().iter().map(|g| rt.stats(g).unwrap().renewals).sum() };
    // Two ticks to settle on the shared grid, then count over ~5 ticks.
    sleep(RENEW * 2).await;
    server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let before = renewals(&rt);
    sleep(RENEW * 5).await;
    let calls = command_calls(&server, "evalsha").await;
    let renewed = renewals(&rt) - before;
    assert!(
        renewed >= 4 * GROUPS as u64,
        "{renewed} renewals\n{}",
        server.report()
    );
    // One call per tick (200 keys fit one batch), plus a little slack for a tick
    // that straddles the window's ends or a group off the grid for one tick.
    assert!(
        calls <= 12,
        "{calls} script calls for {renewed} renewals\n{}",
        server.report()
    );
    assert!(names().iter().all(|g| rt.is_leader(g)));
    rt.shutdown().await;
}

#[tokio::test]
async fn groups_won_at_different_instants_renew_in_one_call_per_tick() {
    // Old code: groups renewed on a fleet-wide grid of RENEW / 2 steps, so
    // groups won a quarter of an interval apart stayed on two grid points,
    // two calls a tick (about 20 in the window below).
    let server = RedisServer::start().await.unwrap();
    let rt = instance(&server);
    let names = names();
    for wave in names.chunks(GROUPS / 4) {
        for g in wave {
            rt.is_leader(g);
        }
        // Not a synchronisation: the waves are won at different instants.
        sleep(RENEW / 4).await;
    }
    lead_all(&rt, &server).await;
    // Every group has renewed once (a group just won renews early, once).
    sleep(RENEW * 2).await;
    server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap();
    sleep(RENEW * 10).await;
    let calls = command_calls(&server, "evalsha").await;
    // One call per tick, and slack for a tick on the window's edge or a
    // batch split in two by a slow wake-up.
    assert!(calls <= 14, "{calls} script calls\n{}", server.report());
    assert!(names.iter().all(|g| rt.is_leader(g)));
    rt.shutdown().await;
}

#[tokio::test]
async fn a_broken_key_fails_only_its_own_group_in_a_batch() {
    let server = RedisServer::start().await.unwrap();
    let rt = instance(&server);
    lead_all(&rt, &server).await;
    server.cmd(&["DEL", "leader:{g7}:lease"]).await.unwrap();
    server
        .cmd(&["HSET", "leader:{g7}:lease", "f", "v"])
        .await
        .unwrap();
    // Past the end of g7's view: it has ended, the others were renewed all along.
    sleep(TTL + RENEW).await;
    assert!(!rt.is_leader("g7"));
    assert!(rt.stats("g7").unwrap().renew_failures > 0);
    for g in names().iter().filter(|g| g.as_str() != "g7") {
        assert!(rt.is_leader(g), "{g}\n{}", server.report());
        assert_eq!(rt.stats(g).unwrap().renew_failures, 0, "{g}");
    }
    rt.shutdown().await;
}

/// A runtime that leads more than 400 groups renews them at one phase per
/// 400 (at most one per two 250 ms steps), by a hash of their names (a
/// crash then frees them in waves): 500 groups with a renew interval of 1 s
/// renew at two instants of each second, 500 ms apart, so their leases'
/// remaining times fall in two clusters. Fails with one phase per runtime.
#[tokio::test]
async fn a_leader_of_many_groups_renews_them_at_a_few_phases() {
    let server = RedisServer::start().await.unwrap();
    let (ttl, renew) = (Duration::from_secs(3), Duration::from_secs(1));
    let config = Config::builder().redis_url(server.url()).instance_id("a");
    let rt = runtime(config.ttl(ttl).renew_interval(renew));
    let names: Vec<String> = (0..500).map(|i| format!("p{i}")).collect();
    lead(&rt, &server, &names, ttl).await;
    // Two renewals to settle on the phases.
    sleep(renew * 2).await;
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut pipe = redis::pipe();
    for g in &names {
        pipe.pttl(format!("leader:{{{g}}}:lease"));
    }
    let left: Vec<i64> = pipe.query_async(&mut conn).await.unwrap();
    // Each lease's place in the renew interval (a renewal during the read
    // moves its remaining time by one interval: the same place), and the
    // clusters of places: gaps of 200 ms or more on that circle (the two
    // phases are 500 ms apart; a renewal retried 100 ms later stays in its
    // cluster). Every lease is there.
    assert!(left.iter().all(|&ms| ms > 0), "{left:?}");
    let mut at: Vec<i64> = left.iter().map(|ms| ms.rem_euclid(1_000)).collect();
    at.sort_unstable();
    let gaps = at.windows(2).filter(|w| w[1] - w[0] >= 200).count()
        + usize::from(at[0] + 1_000 - at[at.len() - 1] >= 200);
    at.dedup();
    assert_eq!(
        gaps,
        2,
        "places in the interval (ms): {at:?}\n{}",
        server.report()
    );
    rt.shutdown().await;
}
