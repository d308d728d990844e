//! The count of leases a runtime holds (`phases.rs`: how many renew phases
//! its leases spread over) through real elections on a real
//! `redis-server`: up with each win, down when a lease is lost, forgotten,
//! or the runtime shuts down.

use std::time::Duration;

use leader_testkit::RedisServer;
use tokio::time::{sleep, timeout};

use crate::backend::Backend;
use crate::{Config, Runtime};

/// The count of `rt`'s leases.
fn count(rt: &Runtime) -> usize {
    let Backend::Redis(redis) = &rt.ctx().backend else {
        panic!("not on Redis")
    };
    redis.renewals.as_ref().expect("renews").leading_count()
}

/// Wait until `rt` counts `n` leases (a few seconds at most).
async fn counts(rt: &Runtime, n: usize, server: &RedisServer) {
    let reached = timeout(Duration::from_secs(5), async {
        while count(rt) != n {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "{} leases counted, not {n}\n{}",
        count(rt),
        server.report()
    );
}

#[tokio::test]
async fn the_count_follows_wins_losses_forgets_and_shutdown() {
    let server = RedisServer::start().await.unwrap();
    let config = Config::builder()
        .redis_url(server.url())
        .instance_id("a")
        .ttl(Duration::from_millis(1_500))
        .renew_interval(Duration::from_millis(300))
        .build()
        .unwrap();
    let rt = Runtime::new(config).unwrap();
    assert_eq!(count(&rt), 0);
    for g in ["a", "b", "c"] {
        rt.is_leader(g);
    }
    counts(&rt, 3, &server).await;
    rt.forget("a").await.unwrap();
    counts(&rt, 2, &server).await;
    // Another instance's lease in `b`'s place: the next renewal finds it
    // gone (lost), and the group is followed, not led.
    server
        .cmd(&["SET", "leader:{b}:lease", "other", "PX", "60000"])
        .await
        .unwrap();
    counts(&rt, 1, &server).await;
    rt.shutdown().await;
    assert_eq!(count(&rt), 0);
}
