//! Hard to forget the shutdown, against a real `redis-server`: dropping the
//! guard, or SIGTERM with `shutdown_on_signal`, releases the lease, so the
//! other instance takes over in a round trip instead of after the ttl.

use std::time::Duration;

use leader_runtime::{Config, Event, Runtime};
use leader_testkit::{signal, RedisServer, Signal};
use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

const G: &str = "jobs";
/// Long: a takeover well within it comes from the release, not the expiry.
const TTL: Duration = Duration::from_secs(4);

fn instance(server: &RedisServer, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .ttl(TTL)
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// `a` leads `G`, `b` follows; `b`'s events from now on.
async fn a_leads_b_follows(server: &RedisServer) -> (Runtime, Runtime, broadcast::Receiver<Event>) {
    let (a, b) = (instance(server, "a"), instance(server, "b"));
    let mut a_events = a.subscribe();
    a.ready_for([G], TTL).await.unwrap();
    // The group's first election waits one ttl (safe start) before leading.
    timeout(TTL * 2, async {
        while !matches!(a_events.recv().await.unwrap(), Event::Elected { .. }) {}
    })
    .await
    .expect("a not elected");
    let events = b.subscribe();
    b.ready_for([G], TTL).await.unwrap();
    (a, b, events)
}

/// `b` is elected within a second of now.
async fn b_takes_over(server: &RedisServer, events: &mut broadcast::Receiver<Event>) {
    let start = Instant::now();
    let elected = timeout(Duration::from_secs(1), async {
        while !matches!(events.recv().await.unwrap(), Event::Elected { .. }) {}
    })
    .await;
    server.check(
        elected.is_ok(),
        format!("b not elected {:?} after a stopped", start.elapsed()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_hands_the_lease_over() {
    let server = RedisServer::start().await.unwrap();
    let (a, b, mut events) = a_leads_b_follows(&server).await;
    let guard = a.shutdown_guard();
    drop(guard);
    // Released before the drop returned.
    assert_ne!(b.leader_id(G).await.unwrap().as_deref(), Some("a"));
    b_takes_over(&server, &mut events).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_lease_over() {
    let server = RedisServer::start().await.unwrap();
    let (a, b, mut events) = a_leads_b_follows(&server).await;
    let stopped = a.shutdown_on_signal(); // handlers installed here
    signal(std::process::id(), Signal::SIGTERM).unwrap();
    timeout(Duration::from_secs(5), stopped)
        .await
        .expect("shutdown_on_signal did not complete");
    assert!(!a.is_running());
    assert_ne!(b.leader_id(G).await.unwrap().as_deref(), Some("a"));
    b_takes_over(&server, &mut events).await;
    b.shutdown().await;
}
