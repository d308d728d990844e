//! `min_replicas`: an acquisition counts only once enough replicas have it,
//! against a real primary with one real replica.

use std::time::Duration;

use leader_runtime::{Config, Event, Runtime};
use leader_testkit::RedisServer;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::broadcast::Receiver;
use tokio::time::{timeout, Instant};

mod support;
use support::{command_calls, config, runtime, ACL_RULES, RENEW, TTL};

fn instance(primary: &RedisServer, id: &str, min_replicas: u32) -> Runtime {
    runtime(
        config(id)
            .redis_url(primary.url())
            .min_replicas(min_replicas),
    )
}

async fn primary_with_replica() -> (RedisServer, RedisServer) {
    RedisServer::builder().start_with_replica().await.unwrap()
}

/// Waits, at most `limit`, until the status of each of `groups` on `rt`
/// reports a last error that contains `needle`; panics with the status
/// after that.
async fn reported(rt: &Runtime, groups: &[&str], needle: &str, limit: Duration) {
    let all = || {
        let status = rt.status();
        groups.iter().all(|g| {
            status.iter().any(|s| {
                s.group == *g && s.last_error.as_deref().is_some_and(|e| e.contains(needle))
            })
        })
    };
    timeout(limit, async {
        while !all() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{groups:?}: no error with {needle:?} reported: {:?}",
            rt.status()
        )
    });
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
    // Long enough that b's last lease key outlives the pause below.
    let ttl = Duration::from_secs(3);
    // Two replicas asked, one there: b's safe-start acquisitions go
    // unconfirmed, so b never serves their wait. A call timeout long enough
    // for `WAIT` to answer.
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
    reported(&b, &["two"], "only 1 of min_replicas 2", ttl * 2).await;
    // Paused (the key alone): the next acquire answers "paused" without
    // reading the lease.
    primary
        .cmd(&["HSET", "leader:{two}:paused", "by", "test"])
        .await
        .unwrap();
    timeout(ttl * 2, async {
        while !matches!(events.recv().await.unwrap(), Event::Paused { .. }) {}
    })
    .await
    .expect("b sees the pause");
    // A second replica now: b's next acquisition is confirmed.
    let _second = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
        .start()
        .await
        .unwrap();
    replicas_online(&primary, 2).await;
    // The unconfirmed acquisition's lease key is still there, so b's next
    // acquire re-claims it, which by itself waits for nobody.
    primary.check(
        primary.cmd(&["GET", "leader:{two}:lease"]).await.unwrap() == "b",
        "b's unconfirmed lease expired during the pause: the test needs a longer ttl",
    );
    primary.cmd(&["DEL", "leader:{two}:paused"]).await.unwrap();
    let resumed = Instant::now();
    timeout(ttl * 4, async {
        while !matches!(events.recv().await.unwrap(), Event::Elected { .. }) {}
    })
    .await
    .expect("b leads once two replicas acknowledge");
    // The safe start b never served still is: the win waits one ttl, the
    // "paused" replies in between notwithstanding.
    let took = resumed.elapsed();
    assert!(took >= ttl, "led {took:?} after the resume: no safe start");
    b.shutdown().await;
}

/// Waits until `rt` leads every one of `groups`.
async fn leads_all(rt: &Runtime, groups: &[String], within: Duration) -> bool {
    timeout(within, async {
        while !groups.iter().all(|g| rt.is_leader(g)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn a_batch_of_attempts_waits_for_the_replicas_once() {
    let (primary, replica) = primary_with_replica().await;
    let groups: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
    primary.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let a = instance(&primary, "a", 1);
    for g in &groups {
        a.is_leader(g);
    }
    // First elections on a new server: each view turns true one ttl after
    // its acquisition.
    assert!(
        leads_all(&a, &groups, TTL * 4).await,
        "not every group led\n{}",
        primary.report()
    );
    // Each acquire call is pipelined with one `WAIT` (renewals wait for
    // nothing): the 50 first attempts went in a few batched calls, not 50.
    // (Usually 1 to 3; on a loaded host the tasks that start the elections
    // are preempted and the attempts split over more batches: a bound of
    // 5 failed once while the whole suite ran.)
    let waits = command_calls(&primary, "wait").await;
    assert!(
        (1..=25).contains(&waits),
        "{waits} WAIT calls for 50 attempts\n{}",
        primary.report()
    );
    // Each group led once its lease was on the replica.
    for g in &groups {
        let key = format!("leader:{{{g}}}:lease");
        assert_eq!(replica.cmd(&["GET", &key]).await.unwrap(), "a", "{g}");
    }
    a.shutdown().await;
}

#[tokio::test]
async fn unconfirmed_wins_in_a_batch_make_each_next_win_wait_one_ttl() {
    let (primary, replica) = primary_with_replica().await;
    let ttl = Duration::from_secs(2);
    let groups: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
    // The replica hangs: every acquisition goes unconfirmed (the records
    // they wrote may be lost in a failover). A call timeout long enough for
    // `WAIT` to answer.
    replica.pause().unwrap();
    let b = Runtime::new(
        Config::builder()
            .redis_url(primary.url())
            .ttl(ttl)
            .renew_interval(RENEW)
            .retry_interval(Duration::from_millis(200))
            .call_timeout(Duration::from_millis(800))
            .instance_id("b")
            .min_replicas(1)
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut events = b.subscribe();
    for g in &groups {
        b.is_leader(g);
    }
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    reported(&b, &names, "only 0 of min_replicas 1", ttl * 3).await;
    // Paused (the keys alone): the next attempts answer "paused", which
    // must not forget the unconfirmed acquisitions.
    for g in &groups {
        let key = format!("leader:{{{g}}}:paused");
        primary.cmd(&["HSET", &key, "by", "test"]).await.unwrap();
    }
    timeout(ttl * 2, async {
        while !groups
            .iter()
            .all(|g| b.status().iter().any(|s| &s.group == g && s.paused))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("b sees every pause");
    // The replica is back, and b's last leases expire meanwhile.
    replica.resume().unwrap();
    timeout(ttl * 2, async {
        for g in &groups {
            let key = format!("leader:{{{g}}}:lease");
            while !primary.cmd(&["GET", &key]).await.unwrap().is_nil() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
    .await
    .expect("the unconfirmed leases expire");
    // (Lagged: older events dropped; keep draining.)
    while !matches!(
        events.try_recv(),
        Err(TryRecvError::Empty | TryRecvError::Closed)
    ) {}
    primary.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let keys: Vec<String> = groups
        .iter()
        .map(|g| format!("leader:{{{g}}}:paused"))
        .collect();
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    primary.cmd(&del).await.unwrap();
    let resumed = Instant::now();
    // The records of the unconfirmed acquisitions may not be on the
    // replica: each next win waits one ttl, the "paused" replies in between
    // notwithstanding (without the rule: no wait, the leases expired).
    let elected = first_elected(&mut events, groups.len(), resumed, ttl * 4)
        .await
        .expect("b leads every group again once the replica acknowledges");
    for (group, took) in &elected {
        assert!(
            *took >= ttl,
            "{group} led {took:?} after the resume: no safe start"
        );
    }
    // Those wins were batched: one `WAIT` per acquire call.
    let waits = command_calls(&primary, "wait").await;
    assert!(
        waits < groups.len() as u64 / 2,
        "{waits} WAIT calls for {} wins\n{}",
        groups.len(),
        primary.report()
    );
    b.shutdown().await;
}

/// Instance `id` on `url` with `min_replicas(1)`, `ttl`, and a call
/// timeout long enough for `WAIT` to answer.
fn confirming(url: String, id: &str, ttl: Duration) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(url)
            .ttl(ttl)
            .renew_interval(RENEW)
            .retry_interval(Duration::from_millis(200))
            .call_timeout(Duration::from_millis(800))
            .instance_id(id)
            .min_replicas(1)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// Sets or deletes the pause keys of `groups` on `server` (the keys alone:
/// the attempts answer "paused" without a notice).
async fn set_paused(server: &RedisServer, groups: &[String], paused: bool) {
    for g in groups {
        let key = format!("leader:{{{g}}}:paused");
        if paused {
            server.cmd(&["HSET", &key, "by", "test"]).await.unwrap();
        } else {
            server.cmd(&["DEL", &key]).await.unwrap();
        }
    }
}

/// Waits until no lease of `groups` is left on `server`.
async fn leases_expired(server: &RedisServer, groups: &[String], within: Duration) {
    timeout(within, async {
        for g in groups {
            let key = format!("leader:{{{g}}}:lease");
            while !server.cmd(&["GET", &key]).await.unwrap().is_nil() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the leases did not expire\n{}", server.report()));
}

/// How long after `from` `events` first reported each of `n` groups
/// elected; `None` if not all within `limit`.
async fn first_elected(
    events: &mut Receiver<Event>,
    n: usize,
    from: Instant,
    limit: Duration,
) -> Option<std::collections::HashMap<String, Duration>> {
    let mut elected = std::collections::HashMap::new();
    timeout(limit, async {
        while elected.len() < n {
            match events.recv().await {
                Ok(Event::Elected { group, .. }) => {
                    elected.entry(group).or_insert_with(|| from.elapsed());
                }
                Err(RecvError::Closed) => panic!("the runtime stopped"),
                _ => {}
            }
        }
    })
    .await
    .ok()?;
    Some(elected)
}

/// Resumes `groups` on `server` and returns how long after that `events`
/// reported each one elected.
async fn elected_after_resume(
    server: &RedisServer,
    groups: &[String],
    events: &mut Receiver<Event>,
    within: Duration,
) -> std::collections::HashMap<String, Duration> {
    // (Lagged: older events dropped; keep draining.)
    while !matches!(
        events.try_recv(),
        Err(TryRecvError::Empty | TryRecvError::Closed)
    ) {}
    set_paused(server, groups, false).await;
    let resumed = Instant::now();
    first_elected(events, groups.len(), resumed, within)
        .await
        .unwrap_or_else(|| panic!("not every group led again\n{}", server.report()))
}

/// A `WAIT` that fails (here: the ACL user may not run it) confirms
/// nothing, like one that too few replicas acknowledged: the safe start it
/// followed (the group's first election) may have written a record the
/// replicas lack, so the group's next win waits one ttl. Fails on the old
/// code: the error returned before the group was marked, and the next win,
/// once the lease had expired, began at once.
#[tokio::test]
async fn a_failed_wait_makes_the_next_win_wait_one_ttl() {
    let (primary, _replica) = RedisServer::builder()
        .acl_user("app", "app-pw", ACL_RULES) // no +wait
        .start_with_replica()
        .await
        .unwrap();
    let ttl = Duration::from_secs(2);
    let group = vec!["w".to_owned()];
    let url = format!("redis://app:app-pw@127.0.0.1:{}", primary.port());
    let b = confirming(url, "b", ttl);
    let mut events = b.subscribe();
    assert!(b.run_if_leader("w", || async {}).await.is_none());
    // The acquisitions ran (the first one a safe start: no record yet),
    // each `WAIT` after them was refused.
    reported(&b, &["w"], "permissions to run the 'wait'", ttl * 2).await;
    assert_eq!(
        primary.cmd(&["GET", "leader:{w}:lease"]).await.unwrap(),
        "b"
    );
    assert!(!b.is_leader("w"));
    // Paused: the next attempts write nothing, and b's last lease expires.
    // `WAIT` is allowed from now on.
    set_paused(&primary, &group, true).await;
    timeout(ttl * 2, async {
        while !matches!(events.recv().await.unwrap(), Event::Paused { .. }) {}
    })
    .await
    .expect("b sees the pause");
    primary
        .cmd(&["ACL", "SETUSER", "app", "+wait"])
        .await
        .unwrap();
    leases_expired(&primary, &group, ttl * 2).await;
    // Without the rule: no wait, the lease expired.
    let elected = elected_after_resume(&primary, &group, &mut events, ttl * 4).await;
    let took = elected["w"];
    assert!(took >= ttl, "led {took:?} after the resume: no safe start");
    b.shutdown().await;
}
