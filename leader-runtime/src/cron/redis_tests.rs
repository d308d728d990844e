//! The scenarios of `scenarios.rs` on a real `redis-server` (each test its
//! own, on a free port).

use std::time::Duration;

use leader_testkit::RedisServer;

use super::scenarios::{self, G};
use super::Overlap;
use crate::{Config, Runtime};

fn instance(server: &RedisServer, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .ttl(Duration::from_millis(1500))
            .renew_interval(Duration::from_millis(500))
            .retry_interval(Duration::from_millis(100))
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// A server on which a leader came and went cleanly: the next leader's view
/// begins at once (no safe start, which would bound the look-back of the
/// scenarios' simulated clocks).
async fn warm_server() -> RedisServer {
    let server = RedisServer::start().await.unwrap();
    let warm = instance(&server, "warm");
    until_leader(&warm).await;
    warm.shutdown().await;
    server
}

async fn until_leader(rt: &Runtime) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !rt.is_leader(G) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never led",
            rt.instance_id()
        );
        rt.run_if_leader(G, || async {}).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn missed_run_policies_on_redis() {
    let server = warm_server().await;
    let rt = instance(&server, "a");
    until_leader(&rt).await;
    scenarios::missed_policies(&rt).await;
}

#[tokio::test]
async fn claim_rules_on_redis() {
    let server = warm_server().await;
    let rt = instance(&server, "a");
    until_leader(&rt).await;
    scenarios::claim_rules(&rt).await;
}

#[tokio::test]
async fn a_lost_job_key_on_redis() {
    let server = warm_server().await;
    let rt = instance(&server, "a");
    until_leader(&rt).await;
    let server = &server;
    scenarios::a_lost_job_key(&rt, |key| async move {
        server.cmd(&["DEL", &key]).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn dst_on_redis() {
    let server = warm_server().await;
    let rt = instance(&server, "a");
    until_leader(&rt).await;
    scenarios::dst(&rt).await;
}

async fn overlap(overlap: Overlap) {
    let server = warm_server().await;
    let (a, b) = (instance(&server, "a"), instance(&server, "b"));
    until_leader(&a).await;
    b.run_if_leader(G, || async {}).await;
    scenarios::overlap_across_handover(
        &a,
        &b,
        overlap,
        async {
            server
                .cmd(&["DEL", &format!("leader:{{{G}}}:lease")])
                .await
                .unwrap();
            // Out of the race, so b takes over (this waits for a's run to
            // drain, bounded by the view: not awaited here).
            let a = a.clone();
            tokio::spawn(async move { a.set_eligible(G, false).await });
        },
        until_leader(&b),
    )
    .await;
}

#[tokio::test]
async fn overlap_skip_on_redis() {
    overlap(Overlap::Skip).await;
}

#[tokio::test]
async fn overlap_allow_on_redis() {
    overlap(Overlap::Allow).await;
}

/// `scenarios::a_claim_that_never_started`: `a`'s lease deleted (as when
/// it died), `a` out of the race, `b` leads.
#[tokio::test]
async fn a_claim_that_never_started_is_decided_again_on_redis() {
    let server = warm_server().await;
    let (a, b) = (instance(&server, "a"), instance(&server, "b"));
    until_leader(&a).await;
    b.run_if_leader(G, || async {}).await;
    scenarios::a_claim_that_never_started(
        &a,
        &b,
        async {
            server
                .cmd(&["DEL", &format!("leader:{{{G}}}:lease")])
                .await
                .unwrap();
            a.set_eligible(G, false).await.unwrap();
        },
        until_leader(&b),
    )
    .await;
}
