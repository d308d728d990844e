//! Balanced leadership on a real Redis: membership in `{prefix}:members`,
//! each instance leads its share, a clean leaver's groups move, and no group
//! ever has two leaders among the instances.

use std::time::Duration;

use leader_runtime::{Config, Runtime};
use leader_testkit::{RedisServer, Reply};
use tokio::time::{sleep, Instant};

const TTL: Duration = Duration::from_millis(1500);
const RENEW: Duration = Duration::from_millis(300);
const GROUPS: usize = 30;

fn balanced(server: &RedisServer, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .ttl(TTL)
            .renew_interval(RENEW)
            .instance_id(id)
            .balance_leadership(true)
            .build()
            .unwrap(),
    )
    .unwrap()
}

fn names() -> Vec<String> {
    (0..GROUPS).map(|i| format!("g{i}")).collect()
}

fn led(rt: &Runtime) -> usize {
    names().iter().filter(|g| rt.is_leader(g)).count()
}

/// Wait until `fleet` leads `shares` (checking every 5 ms that no group has
/// two leaders), at most `limit`.
async fn settle(fleet: &[&Runtime], shares: &[usize], limit: Duration, server: &RedisServer) {
    let end = Instant::now() + limit;
    loop {
        for g in names() {
            let leaders = fleet.iter().filter(|rt| rt.is_leader(&g)).count();
            assert!(leaders <= 1, "{g} has {leaders} leaders");
        }
        let now: Vec<usize> = fleet.iter().map(|rt| led(rt)).collect();
        if now == shares {
            return;
        }
        assert!(
            Instant::now() < end,
            "shares {now:?}, expected {shares:?}\n{}",
            server.report()
        );
        sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn instances_lead_their_shares_and_a_leavers_groups_move() {
    let server = RedisServer::start().await.unwrap();
    let (a, b, c) = (
        balanced(&server, "a"),
        balanced(&server, "b"),
        balanced(&server, "c"),
    );
    for rt in [&a, &b, &c] {
        for g in names() {
            rt.is_leader(&g);
        }
    }
    // First elections wait one ttl; then the shares settle within a few
    // membership rounds.
    settle(&[&a, &b, &c], &[10, 10, 10], TTL * 8, &server).await;
    let members = server.cmd(&["ZCARD", "leader:members"]).await.unwrap();
    assert_eq!(members, Reply::Integer(3));
    c.shutdown().await;
    // 30 over 2: 15 each, after c's release notices and the next rounds.
    settle(&[&a, &b], &[15, 15], TTL * 8, &server).await;
    let members = server.cmd(&["ZCARD", "leader:members"]).await.unwrap();
    assert_eq!(members, Reply::Integer(2));
    a.shutdown().await;
    b.shutdown().await;
}

/// A member that stopped refreshing (crashed) but whose entry has not
/// expired yet does not count: `members.lua` lists only the members that
/// refreshed within `renew_interval` + `call_timeout` (here 300 + 600 ms).
#[tokio::test]
async fn a_member_that_missed_its_refresh_does_not_count() {
    let server = RedisServer::start().await.unwrap();
    // "0" (first by id) refreshed 1.3 s ago by its score, again and again:
    // an entry that is there but stale.
    let mut conn = server.connect().await.unwrap();
    let stale = {
        tokio::spawn(async move {
            loop {
                let now = match conn.cmd(&["TIME"]).await {
                    Ok(Reply::Array(t)) => match &t[..] {
                        [Reply::Bulk(s), Reply::Bulk(us)] => {
                            s.parse::<u64>().unwrap() * 1000 + us.parse::<u64>().unwrap() / 1000
                        }
                        other => panic!("TIME: {other:?}"),
                    },
                    other => panic!("TIME: {other:?}"),
                };
                let score = (now + 200).to_string();
                conn.cmd(&["ZADD", "leader:members", &score, "0"])
                    .await
                    .unwrap();
                sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (a, b) = (balanced(&server, "a"), balanced(&server, "b"));
    for rt in [&a, &b] {
        for g in names() {
            rt.is_leader(&g);
        }
    }
    // Counted, it would take a third of the groups (10, 10, 10).
    settle(&[&a, &b], &[15, 15], TTL * 8, &server).await;
    let entry = server
        .cmd(&["ZSCORE", "leader:members", "0"])
        .await
        .unwrap();
    assert!(matches!(entry, Reply::Bulk(_)), "{entry:?}");
    stale.abort();
    a.shutdown().await;
    b.shutdown().await;
}
