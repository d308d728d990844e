//! The same API against a real 3-master Redis Cluster (started per test):
//! elections on every master, fencing tokens, `leader_id`, handover by
//! release notice, and notices that survive the loss of the node they were
//! subscribed on.

use std::time::Duration;

use leader_runtime::Runtime;
use leader_testkit::RedisCluster;
use tokio::time::Instant;

mod support;
use support::{config, elected_in, lead, run_id, runtime, ACL_RULES, BALANCE_RULES};

const TTL: Duration = Duration::from_millis(2000);
const RENEW: Duration = Duration::from_millis(600);

fn instance(cluster: &RedisCluster, id: &str) -> Runtime {
    let urls = cluster.urls();
    runtime(
        config(id)
            .redis_cluster_urls(urls)
            .ttl(TTL)
            .renew_interval(RENEW),
    )
}

fn lease_key(group: &str) -> String {
    format!("leader:{{{group}}}:lease")
}

fn token_key(group: &str) -> String {
    format!("leader:{{{group}}}:token")
}

/// One group name per master, `groups[i]` served by node `i`.
/// Store a record for `group` on `node` as if this server process had
/// written it: last token `token`, nobody else may still lead (so the next
/// election skips the one-ttl safe start).
async fn seed_record(node: &leader_testkit::RedisServer, group: &str, token: &str) {
    let run = run_id(node).await;
    node.cmd(&[
        "HSET",
        &token_key(group),
        "token",
        token,
        "until",
        "0",
        "prior",
        "0",
        "run",
        &run,
    ])
    .await
    .unwrap()
    .ok()
    .unwrap();
}

async fn group_per_node(cluster: &RedisCluster) -> Vec<String> {
    let mut groups: Vec<Option<String>> = vec![None; cluster.nodes().len()];
    for n in 0.. {
        let group = format!("job-{n}");
        let owner = cluster.master_of(&lease_key(&group)).await.unwrap();
        if groups[owner].is_none() {
            groups[owner] = Some(group);
        }
        if groups.iter().all(Option::is_some) {
            break;
        }
    }
    groups.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn elects_on_every_master_with_tokens_and_leader_id_and_hands_over_by_notice() {
    let cluster = RedisCluster::start().await.unwrap();
    let groups = group_per_node(&cluster).await;
    // Groups on nodes 1 and 2 have been elected before (a token exists), so
    // they skip the one-ttl safe start; the group on node 0 takes it.
    for (i, group) in groups.iter().enumerate().skip(1) {
        seed_record(cluster.node(i), group, "1000").await;
    }
    let a = instance(&cluster, "a");
    let b = instance(&cluster, "b");
    for group in &groups {
        assert_eq!(a.leader_id(group).await.unwrap(), None);
    }

    let start = Instant::now();
    let fresh_token = lead(&a, &groups[0], TTL * 3).await;
    let waited = start.elapsed();
    assert!(waited >= TTL, "fresh start must wait one ttl: {waited:?}");
    let mut tokens = vec![fresh_token];
    for group in &groups[1..] {
        let start = Instant::now();
        let token = lead(&a, group, TTL * 3).await;
        assert!(start.elapsed() < TTL / 2, "{group}: {:?}", start.elapsed());
        assert!(
            token > 1000,
            "{group}: token {token} must exceed the stored 1000"
        );
        tokens.push(token);
    }

    for (i, group) in groups.iter().enumerate() {
        assert!(a.is_leader(group), "{group}");
        assert!(b.run_if_leader(group, || async {}).await.is_none());
        assert!(!b.is_leader(group));
        assert_eq!(b.leader_id(group).await.unwrap().as_deref(), Some("a"));
        // Both keys live on the master that serves the group's slot.
        let owner = cluster.node(i);
        assert_eq!(owner.cmd(&["GET", &lease_key(group)]).await.unwrap(), "a");
        let stored = owner
            .cmd(&["HGET", &token_key(group), "token"])
            .await
            .unwrap();
        let stored: u64 = stored.as_str().unwrap().parse().unwrap();
        assert_eq!(stored, tokens[i], "{group}");
        let pttl = owner.cmd(&["PTTL", &lease_key(group)]).await.unwrap();
        let pttl = pttl.as_int().unwrap();
        cluster.check(pttl > 0 && pttl <= 2000, format!("{group}: pttl {pttl}"));
    }

    // Handover of each group: b is woken by the release notice (published on
    // the group's master, forwarded by the cluster to the node b listens on),
    // far sooner than the lease's remaining life.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for (i, group) in groups.iter().enumerate() {
        let mut b_events = b.subscribe();
        let start = Instant::now();
        a.step_down(group).await.unwrap();
        let token = elected_in(&mut b_events, group, TTL).await;
        let handover = start.elapsed();
        cluster.check(
            handover < Duration::from_millis(500),
            format!("{group}: handover took {handover:?}"),
        );
        assert!(token > tokens[i], "{group}: {token} > {}", tokens[i]);
        assert_eq!(a.leader_id(group).await.unwrap().as_deref(), Some("b"));
        assert!(!a.is_leader(group) && b.is_leader(group));
    }

    b.shutdown().await;
    a.shutdown().await;
    for (i, group) in groups.iter().enumerate() {
        assert!(cluster
            .node(i)
            .cmd(&["GET", &lease_key(group)])
            .await
            .unwrap()
            .is_nil());
    }
}

#[tokio::test]
async fn notices_move_to_another_node_when_the_subscribed_one_dies() {
    // Without full coverage, the masters that are up keep serving their
    // slots while node 0 (the first seed, where notices are subscribed) is down.
    let mut cluster = RedisCluster::builder()
        .args(["--cluster-require-full-coverage", "no"])
        .start()
        .await
        .unwrap();
    let groups = group_per_node(&cluster).await;
    let group = &groups[1];
    seed_record(cluster.node(1), group, "1").await;
    // A long ttl: without a notice, b would wait for most of it.
    let instance = |id: &str| {
        let config = config(id).redis_cluster_urls(cluster.urls());
        runtime(
            config
                .ttl(Duration::from_secs(6))
                .renew_interval(Duration::from_secs(1)),
        )
    };
    let (a, b) = (instance("a"), instance("b"));
    lead(&a, group, TTL * 3).await;
    assert!(b.run_if_leader(group, || async {}).await.is_none());

    cluster.node_mut(0).kill().await.unwrap();
    // b's notice connection fails over to the next seed.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(a.is_leader(group), "the group's own master is still up");

    let mut b_events = b.subscribe();
    let start = Instant::now();
    a.step_down(group).await.unwrap();
    elected_in(&mut b_events, group, Duration::from_secs(7)).await;
    let handover = start.elapsed();
    cluster.check(
        handover < Duration::from_millis(800),
        format!("handover after losing the subscribed node took {handover:?}"),
    );
    assert_eq!(a.leader_id(group).await.unwrap().as_deref(), Some("b"));
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test]
async fn an_acl_user_with_the_documented_rules_elects_on_a_cluster() {
    // The rules of `ConfigBuilder::redis_url`, plus `+cluster|slots` as
    // `redis_cluster_urls` documents.
    let rules = format!("{ACL_RULES} +cluster|slots");
    let mut args = vec!["--user", "app", "on", ">app-pw"];
    args.extend(rules.split_whitespace());
    let cluster = RedisCluster::builder().args(args).start().await.unwrap();
    let groups = group_per_node(&cluster).await;
    for (i, group) in groups.iter().enumerate() {
        seed_record(cluster.node(i), group, "1").await;
    }
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("redis://app:app-pw@127.0.0.1:{}", n.port()))
        .collect();
    let instance = |id: &str| {
        let config = config(id).redis_cluster_urls(urls.clone());
        runtime(config.ttl(TTL).renew_interval(RENEW))
    };
    let (a, b) = (instance("a"), instance("b"));
    for group in &groups {
        lead(&a, group, TTL * 3).await;
        assert!(b.run_if_leader(group, || async {}).await.is_none());
        assert_eq!(b.leader_id(group).await.unwrap().as_deref(), Some("a"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut b_events = b.subscribe();
    a.step_down(&groups[2]).await.unwrap();
    elected_in(&mut b_events, &groups[2], Duration::from_millis(500)).await;
    for node in cluster.nodes() {
        let denials = node.cmd(&["ACL", "LOG"]).await.unwrap();
        cluster.check(
            matches!(&denials, leader_testkit::Reply::Array(v) if v.is_empty()),
            format!("ACL denials on port {}: {denials:?}", node.port()),
        );
    }
    b.shutdown().await;
    a.shutdown().await;
}

/// Balanced leadership on a cluster, as the documented ACL user (the rules
/// of `redis_url`, `+cluster|slots`, and the balance's `+hdel +hgetall`):
/// the membership hash `leader:balance` is one key, so one slot; `a` leads
/// 6 groups alone, `b` joins and takes 3, and nothing is denied.
#[tokio::test]
async fn balanced_instances_share_on_a_cluster_as_the_documented_acl_user() {
    let rules = format!("{ACL_RULES} +cluster|slots{BALANCE_RULES}");
    let mut args = vec!["--user", "app", "on", ">app-pw"];
    args.extend(rules.split_whitespace());
    let cluster = RedisCluster::builder().args(args).start().await.unwrap();
    let groups: Vec<String> = (0..6).map(|i| format!("g{i}")).collect();
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("redis://app:app-pw@127.0.0.1:{}", n.port()))
        .collect();
    let instance = |id: &str| {
        let config = config(id)
            .redis_cluster_urls(urls.clone())
            .ttl(TTL)
            .renew_interval(RENEW)
            .balance_leadership(true);
        runtime(config)
    };
    let led = |rt: &Runtime| groups.iter().filter(|g| rt.is_leader(g)).count();
    let a = instance("a");
    // Start every election at once: each first one waits one ttl (safe start).
    for group in &groups {
        a.is_leader(group);
    }
    for group in &groups {
        lead(&a, group, TTL * 3).await;
    }
    let b = instance("b");
    let end = Instant::now() + TTL * 5;
    loop {
        for g in &groups {
            assert!(!(a.is_leader(g) && b.is_leader(g)), "{g} has two leaders");
        }
        if (led(&a), led(&b)) == (3, 3) {
            break;
        }
        cluster.check(
            Instant::now() < end,
            format!("shares ({}, {}), expected (3, 3)", led(&a), led(&b)),
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let owner = cluster.master_of("leader:balance").await.unwrap();
    let members = cluster
        .node(owner)
        .cmd(&["HLEN", "leader:balance"])
        .await
        .unwrap();
    assert_eq!(members, leader_testkit::Reply::Integer(2));
    for node in cluster.nodes() {
        let denials = node.cmd(&["ACL", "LOG"]).await.unwrap();
        cluster.check(
            matches!(&denials, leader_testkit::Reply::Array(v) if v.is_empty()),
            format!("ACL denials on port {}: {denials:?}", node.port()),
        );
    }
    b.shutdown().await;
    a.shutdown().await;
}
