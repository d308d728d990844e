//! The server marker (`record.lua`) on a real `redis-server`: a group never
//! named before leads after one round trip on a server that lost nothing
//! since the fleet first used it, and waits one ttl wherever a record may
//! have gone missing (FLUSHALL, a restart from disk, an eviction); a replica
//! attaching or leaving changes the primary's replication id but not its
//! data, so every leader keeps its lease, while a fail-back (the old
//! primary promoted again after a resync) still counts as a new history.

use std::time::Duration;

use leader_runtime::{Event, Runtime};
use leader_testkit::{Persisted, RedisServer};
use tokio::time::{sleep, Instant};

mod support;
use support::{instance, lead, next_event, G, RENEW, TTL};

/// A server the fleet has used for longer than a ttl: its marker vouches.
async fn healthy() -> (RedisServer, Runtime) {
    let server = RedisServer::start().await.unwrap();
    let a = instance(server.url(), "a");
    // The fleet's first group on this server waits one ttl: the marker is new.
    let started = Instant::now();
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    lead(&a, G, TTL * 3).await;
    assert!(started.elapsed() >= TTL, "{:?}", started.elapsed());
    (server, a)
}

/// Whether `rt`'s first call naming `group` runs the body: the group led
/// after the first acquisition round.
async fn leads_at_once(rt: &Runtime, group: &str) -> bool {
    rt.run_if_leader(group, || async {}).await.is_some()
}

#[tokio::test]
async fn a_new_group_on_a_healthy_server_leads_at_once() {
    let (server, a) = healthy().await;
    assert!(leads_at_once(&a, "reports").await);
    let b = instance(server.url(), "b");
    assert!(leads_at_once(&b, "cleanup").await);
    // A group some instance leads is not taken, of course.
    assert!(!leads_at_once(&b, "reports").await);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_new_group_waits_one_ttl_after_the_data_may_have_gone() {
    let (mut server, a) = healthy().await;
    // FLUSHALL: the marker is gone with the records.
    server.cmd(&["FLUSHALL"]).await.unwrap();
    assert!(!leads_at_once(&a, "after-flush").await);

    // A restart from an RDB file: another process, a new epoch.
    sleep(TTL).await;
    assert!(leads_at_once(&a, "before-restart").await);
    server.cmd(&["SAVE"]).await.unwrap();
    server.restart_from(Persisted::Rdb).await.unwrap();
    let b = instance(server.url(), "b");
    assert!(!leads_at_once(&b, "after-restart").await);

    // An eviction (of any key): a record may have been evicted.
    sleep(TTL).await;
    assert!(leads_at_once(&b, "before-eviction").await);
    evict_a_key(&server).await;
    assert!(!leads_at_once(&b, "after-eviction").await);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn statistics_reset_after_an_eviction_do_not_hide_it() {
    let (server, a) = healthy().await;
    // No lease script between the eviction and CONFIG RESETSTAT (which sets
    // evicted_keys back to 0, as the marker last saw it): the fleet is
    // stopped for less than a ttl.
    a.shutdown().await;
    evict_a_key(&server).await;
    server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let b = instance(server.url(), "b");
    assert!(!leads_at_once(&b, "after-eviction").await);
    b.shutdown().await;
}

#[tokio::test]
async fn an_older_marker_put_back_in_place_is_not_trusted() {
    let (server, a) = healthy().await;
    // A backup of the marker, put back in place (RESTORE) more than a ttl
    // later: the process and its ids are the same, and records created
    // since may have gone with the rest of the data.
    let dump = dump(&server, "leader:server").await;
    sleep(TTL + TTL / 2).await;
    restore(&server, "leader:server", &dump).await;
    assert!(!leads_at_once(&a, "after-restore").await);
    a.shutdown().await;
}

/// `DUMP key` as raw bytes.
async fn dump(server: &RedisServer, key: &str) -> Vec<u8> {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("DUMP")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// `RESTORE key 0 dump REPLACE`.
async fn restore(server: &RedisServer, key: &str, dump: &[u8]) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let () = redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(dump)
        .arg("REPLACE")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// Make the server evict at least one key (keys with an expiry only: the
/// marker and the records have none).
async fn evict_a_key(server: &RedisServer) {
    let evicted = || async { server.info_field("stats", "evicted_keys").await.unwrap() };
    let before = evicted().await;
    let used: u64 = server
        .info_field("memory", "used_memory")
        .await
        .unwrap()
        .and_then(|u| u.parse().ok())
        .unwrap();
    server
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"])
        .await
        .unwrap();
    let limit = (used + 512 * 1024).to_string();
    server
        .cmd(&["CONFIG", "SET", "maxmemory", &limit])
        .await
        .unwrap();
    let filler = "x".repeat(16 * 1024);
    for i in 0..200 {
        let key = format!("filler:{i}");
        let _ = server.cmd(&["SET", &key, &filler, "EX", "600"]).await;
        if evicted().await != before {
            break;
        }
    }
    assert_ne!(evicted().await, before, "nothing was evicted");
    server
        .cmd(&["CONFIG", "SET", "maxmemory", "0"])
        .await
        .unwrap();
}

/// The primary's replication id.
async fn replid(server: &RedisServer) -> String {
    let replid = server.info_field("replication", "master_replid").await;
    replid.unwrap().unwrap()
}

/// Whether `rt` lost `G` within `limit`.
async fn lost_within(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    limit: Duration,
) -> bool {
    next_event(
        events,
        limit,
        |e| matches!(e, Event::Lost { group, .. } if group == G),
    )
    .await
    .is_some()
}

#[tokio::test]
async fn a_replica_attaching_and_leaving_keeps_every_leader() {
    let (primary, a) = healthy().await;
    let mut events = a.subscribe();
    // The first replica of a primary without a backlog: a new replication id.
    let before = replid(&primary).await;
    let port = primary.port().to_string();
    let mut replica = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &port])
        .start()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while replid(&primary).await == before {
        assert!(
            Instant::now() < deadline,
            "the replication id did not change"
        );
        sleep(Duration::from_millis(20)).await;
    }
    // Renewals go on across it (before: the record was no longer vouched
    // for, the leader lost its lease and waited one ttl to lead again).
    assert!(!lost_within(&mut events, RENEW * 4).await, "lost on attach");
    assert!(a.is_leader(G));
    assert!(leads_at_once(&a, "after-attach").await);

    // The replica leaves; the backlog is freed repl-backlog-ttl later, with
    // a new replication id again.
    primary
        .cmd(&["CONFIG", "SET", "repl-backlog-ttl", "1"])
        .await
        .unwrap();
    let attached = replid(&primary).await;
    replica.kill().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while replid(&primary).await == attached {
        assert!(Instant::now() < deadline, "the backlog was not freed");
        sleep(Duration::from_millis(50)).await;
    }
    assert!(!lost_within(&mut events, RENEW * 4).await, "lost on detach");
    assert!(a.is_leader(G));
    assert!(leads_at_once(&a, "after-detach").await);
    a.shutdown().await;
}

#[tokio::test]
async fn a_primary_promoted_again_after_a_resync_starts_a_new_history() {
    let (primary, replica) = RedisServer::builder().start_with_replica().await.unwrap();
    let a = instance(primary.url(), "a");
    lead(&a, G, TTL * 3).await;
    let mut events = a.subscribe();
    // Fail-over and fail-back by hand: the replica promoted, the primary
    // made its replica (it resyncs from it), then promoted again. The same
    // process, whose data came from another server meanwhile.
    let (p_port, r_port) = (primary.port().to_string(), replica.port().to_string());
    replica.cmd(&["REPLICAOF", "NO", "ONE"]).await.unwrap();
    primary
        .cmd(&["REPLICAOF", "127.0.0.1", &r_port])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let link = primary
            .info_field("replication", "master_link_status")
            .await;
        if link.unwrap().as_deref() == Some("up") {
            break;
        }
        assert!(Instant::now() < deadline, "no resync");
        sleep(Duration::from_millis(20)).await;
    }
    primary.cmd(&["REPLICAOF", "NO", "ONE"]).await.unwrap();
    replica
        .cmd(&["REPLICAOF", "127.0.0.1", &p_port])
        .await
        .unwrap();
    let back = Instant::now();
    // The record is not vouched for: the leader's view ends, and it leads
    // again only after a safe start of one ttl.
    assert!(lost_within(&mut events, TTL * 3).await, "kept its lease");
    support::elected(&mut events, TTL * 4).await;
    assert!(back.elapsed() >= TTL, "{:?}", back.elapsed());
    a.shutdown().await;
}
