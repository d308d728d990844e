//! `min_replicas`: an acquisition counts only once enough replicas have it,
//! against a real primary with one real replica.

use std::time::Duration;

use leader_runtime::{Config, Event, Runtime};
use leader_testkit::RedisServer;
use tokio::time::{timeout, Instant};

mod support;
use support::{config, runtime, RENEW, TTL};

fn instance(primary: &RedisServer, id: &str, min_replicas: u32) -> Runtime {
    runtime(
        config(id)
            .redis_url(primary.url())
            .min_replicas(min_replicas),
    )
}

async fn primary_with_replica() -> (RedisServer, RedisServer) {
    // Diskless sync without its default 5 s wait for more replicas.
    let primary = RedisServer::builder()
        .args(["--repl-diskless-sync-delay", "0"])
        .start()
        .await
        .unwrap();
    let replica = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
        .start()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = primary.cmd(&["INFO", "replication"]).await.unwrap();
        let info = info.as_str().unwrap_or_default().to_owned();
        if info.contains("connected_slaves:1") && info.contains("state=online") {
            break;
        }
        primary.check(
            Instant::now() < deadline,
            format!("replica not online:\n{info}"),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (primary, replica)
}

#[tokio::test]
async fn leads_once_the_replica_has_the_lease_and_not_without_enough_replicas() {
    let (primary, replica) = primary_with_replica().await;

    let a = instance(&primary, "a", 1);
    let mut a_events = a.subscribe();
    assert!(a.run_if_leader("one", || async {}).await.is_none());
    let elected = timeout(TTL * 3, async {
        loop {
            if let Event::Elected { group, .. } = a_events.recv().await.unwrap() {
                return group;
            }
        }
    })
    .await
    .expect("a leads with one replica acknowledging");
    assert_eq!(elected, "one");
    assert!(a.is_leader("one"));
    // The replica had the lease before a started leading.
    assert_eq!(
        replica.cmd(&["GET", "leader:{one}:lease"]).await.unwrap(),
        "a"
    );

    // Asking for two replicas when there is one: never leads, says why.
    let b = instance(&primary, "b", 2);
    let mut b_events = b.subscribe();
    assert!(b.run_if_leader("two", || async {}).await.is_none());
    let deadline = Instant::now() + TTL * 2;
    let mut why = None;
    while let Ok(Ok(event)) = timeout(deadline - Instant::now(), b_events.recv()).await {
        match event {
            Event::Elected { .. } => panic!("b led without two replicas"),
            Event::BackendError { message, .. } => why = Some(message),
            _ => {}
        }
    }
    assert!(!b.is_leader("two"));
    let why = why.expect("the failed confirmation is reported");
    assert!(
        why.contains("only 1 of min_replicas 2"),
        "unexpected message: {why}"
    );
    // The lease stays b's on the primary (each round re-claims it), so no one
    // else takes it meanwhile.
    assert_eq!(
        primary.cmd(&["GET", "leader:{two}:lease"]).await.unwrap(),
        "b"
    );

    b.shutdown().await;
    a.shutdown().await;
}

/// Waits until `primary` has `n` replicas online.
async fn replicas_online(primary: &RedisServer, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = primary.cmd(&["INFO", "replication"]).await.unwrap();
        let info = info.as_str().unwrap_or_default().to_owned();
        if info.contains(&format!("connected_slaves:{n}"))
            && info.matches("state=online").count() == n
        {
            return;
        }
        primary.check(
            Instant::now() < deadline,
            format!("replicas not online:\n{info}"),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_paused_reply_does_not_forget_an_unconfirmed_acquisition() {
    let (primary, _replica) = primary_with_replica().await;
    let ttl = Duration::from_secs(2);
    // Two replicas asked, one there: b's safe-start acquisitions go
    // unconfirmed (the record they wrote may be lost in a failover). A call
    // timeout long enough for `WAIT` to answer.
    let b = Runtime::new(
        Config::builder()
            .redis_url(primary.url())
            .ttl(ttl)
            .renew_interval(RENEW)
            .retry_interval(Duration::from_millis(200))
            .call_timeout(Duration::from_millis(800))
            .instance_id("b")
            .min_replicas(2)
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut events = b.subscribe();
    assert!(b.run_if_leader("two", || async {}).await.is_none());
    // (The process's first call may time out instead: it loads the script
    // and waits for the replicas twice.)
    let unconfirmed = |b: &Runtime| {
        b.status().iter().any(|s| {
            s.group == "two"
                && s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("only 1 of min_replicas 2"))
        })
    };
    timeout(ttl * 2, async {
        while !unconfirmed(&b) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the unconfirmed acquisition is reported");
    // Paused (the key alone): the next acquire answers "paused".
    primary
        .cmd(&["HSET", "leader:{two}:paused", "by", "test"])
        .await
        .unwrap();
    timeout(ttl * 2, async {
        while !matches!(events.recv().await.unwrap(), Event::Paused { .. }) {}
    })
    .await
    .expect("b sees the pause");
    // A second replica now, and b's last lease expires meanwhile.
    let _second = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
        .start()
        .await
        .unwrap();
    replicas_online(&primary, 2).await;
    tokio::time::sleep(ttl).await;
    assert!(primary
        .cmd(&["GET", "leader:{two}:lease"])
        .await
        .unwrap()
        .is_nil());
    primary.cmd(&["DEL", "leader:{two}:paused"]).await.unwrap();
    let resumed = Instant::now();
    timeout(ttl * 4, async {
        while !matches!(events.recv().await.unwrap(), Event::Elected { .. }) {}
    })
    .await
    .expect("b leads once two replicas acknowledge");
    // The record of the unconfirmed acquisition may not be on the replicas:
    // the win still waits one ttl, the "paused" replies in between
    // notwithstanding.
    let took = resumed.elapsed();
    assert!(took >= ttl, "led {took:?} after the resume: no safe start");
    b.shutdown().await;
}
