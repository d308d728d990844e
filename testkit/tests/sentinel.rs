//! The Sentinel harness against real processes.

use std::time::{Duration, Instant};

use leader_testkit::{RedisSentinel, Reply};

#[tokio::test]
async fn failover_promotes_a_replica_that_missed_writes_while_cut() {
    let deployment = RedisSentinel::start().await.unwrap();
    assert_eq!(deployment.master().await.unwrap(), 0);
    assert_eq!(deployment.sentinel_urls().len(), 3);
    let primary = deployment.node(0);
    let replica = deployment.node(1);
    primary.cmd(&["SET", "before", "1"]).await.unwrap();
    deployment
        .wait_in_sync(0, 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        replica.cmd(&["GET", "before"]).await.unwrap().as_str(),
        Some("1")
    );

    deployment.cut_replication().await;
    primary.cmd(&["SET", "during", "1"]).await.unwrap();
    let started = Instant::now();
    let promoted = deployment.failover().await.unwrap();
    let took = started.elapsed();
    deployment.heal_replication();
    assert_eq!(promoted, 1);
    assert_eq!(deployment.master().await.unwrap(), 1);
    let missed = replica.cmd(&["GET", "during"]).await.unwrap();
    deployment.check(
        missed.is_nil(),
        format!("the cut replica has the write: {missed:?}"),
    );
    let kept = replica.cmd(&["GET", "before"]).await.unwrap();
    deployment.check(kept.as_str() == Some("1"), format!("{kept:?}"));
    eprintln!("SENTINEL FAILOVER: node 1 named master by every sentinel after {took:?}");
}

#[tokio::test]
async fn killing_the_master_promotes_the_replica() {
    let mut deployment = RedisSentinel::start().await.unwrap();
    let started = Instant::now();
    let promoted = deployment.kill_master().await.unwrap();
    let took = started.elapsed();
    assert_eq!(promoted, 1);
    let role = deployment.node(1).cmd(&["ROLE"]).await.unwrap();
    let Reply::Array(items) = &role else {
        panic!("{role:?}")
    };
    assert_eq!(items[0].as_str(), Some("master"));
    // Restarted, the old primary becomes a replica of the master. (On a
    // loaded machine the sentinels may have moved the master once more
    // meanwhile: whichever node is master, the other one syncs from it.)
    deployment.node_mut(0).start_again().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let master = deployment.master().await.unwrap();
        if deployment
            .wait_in_sync(master, 1 - master, Duration::from_secs(1))
            .await
            .is_ok()
        {
            break;
        }
        deployment.check(
            std::time::Instant::now() < deadline,
            "the restarted node did not become an in-sync replica",
        );
    }
    eprintln!("kill -9 of the master: node 1 named master by every sentinel after {took:?} (down-after 1 s)");
}

#[tokio::test]
async fn passwords_acl_users_and_sentinel_passwords() {
    let deployment = RedisSentinel::builder()
        .password("nodepw")
        .acl_user("app", "apppw", "~* &* +@all")
        .sentinel_password("sentinelpw")
        .start()
        .await
        .unwrap();
    assert_eq!(deployment.master().await.unwrap(), 0);
    let mut conn = leader_testkit::RespConn::connect(deployment.node(0).addr())
        .await
        .unwrap();
    assert!(conn.cmd(&["AUTH", "app", "apppw"]).await.unwrap().as_str() == Some("OK"));
    let mut sentinel = leader_testkit::RespConn::connect(deployment.sentinels()[0].addr())
        .await
        .unwrap();
    let refused = sentinel.cmd(&["SENTINEL", "MASTERS"]).await.unwrap();
    assert!(refused.is_error(), "{refused:?}");
}
