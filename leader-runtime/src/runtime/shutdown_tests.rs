//! The shutdown guard on each kind of tokio runtime, on the in-memory
//! backend: the lease is released when the guard is dropped, so another
//! instance takes over at once rather than after the ttl.

use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

use crate::test_support::{builder, settle, start, G};
use crate::{Event, MemoryBackend, Runtime};

/// Long: a takeover within it comes from the release, not the expiry.
const LONG_TTL: Duration = Duration::from_secs(30);

fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    start(
        builder(mem, id)
            .ttl(LONG_TTL)
            .renew_interval(Duration::from_secs(10)),
    )
}

/// `a` leads `G`, `b` follows; `b`'s events from now on.
async fn a_leads_b_follows(mem: &MemoryBackend) -> (Runtime, Runtime, broadcast::Receiver<Event>) {
    let (a, b) = (instance(mem, "a"), instance(mem, "b"));
    a.ready_for([G], Duration::from_secs(5)).await.unwrap();
    let events = b.subscribe();
    b.ready_for([G], Duration::from_secs(5)).await.unwrap();
    assert_eq!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    (a, b, events)
}

/// `b` is elected within a second (the release woke it), long before the ttl.
async fn b_takes_over(events: &mut broadcast::Receiver<Event>) {
    let start = Instant::now();
    let elected = timeout(Duration::from_secs(1), async {
        loop {
            if let Event::Elected { .. } = events.recv().await.unwrap() {
                return;
            }
        }
    })
    .await;
    assert!(elected.is_ok(), "b not elected after {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_multi_thread_runtime_the_drop_returns_once_released() {
    let mem = MemoryBackend::new();
    let (a, _b, mut events) = a_leads_b_follows(&mem).await;
    let guard = a.shutdown_guard();
    assert!(a.is_running(), "the guard alone changes nothing");
    drop(guard);
    assert!(!a.is_running());
    // Released before the drop returned.
    assert_ne!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    b_takes_over(&mut events).await;
}

#[test]
fn outside_any_runtime_the_drop_returns_once_released() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mem = MemoryBackend::new();
    let (a, b, mut events) = tokio.block_on(a_leads_b_follows(&mem));
    let guard = a.shutdown_guard();
    drop(guard); // on this plain thread
    tokio.block_on(async {
        assert_ne!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
        b_takes_over(&mut events).await;
        b.shutdown().await;
    });
}

#[tokio::test(start_paused = true)]
async fn on_a_current_thread_runtime_the_drop_starts_the_release() {
    let mem = MemoryBackend::new();
    let (a, _b, mut events) = a_leads_b_follows(&mem).await;
    drop(a.shutdown_guard()); // must not block this runtime's only thread
    assert!(!a.is_running());
    settle().await; // the election hands over in its own task
    assert_ne!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    b_takes_over(&mut events).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_through_the_guard_waits_for_the_release() {
    let mem = MemoryBackend::new();
    let (a, _b, mut events) = a_leads_b_follows(&mem).await;
    a.shutdown_guard().shutdown().await;
    assert_ne!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    b_takes_over(&mut events).await;
}

#[tokio::test(start_paused = true)]
async fn without_the_guard_the_lease_lasts_until_the_ttl() {
    // The contrast: an instance that stops its elections without releasing
    // (a crash) keeps the lease until it expires.
    let mem = MemoryBackend::new();
    let (a, _b, mut events) = a_leads_b_follows(&mem).await;
    mem.set_available(false);
    a.begin_shutdown();
    settle().await;
    mem.set_available(true);
    assert_eq!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    let start = Instant::now();
    loop {
        if let Event::Elected { .. } = events.recv().await.unwrap() {
            break;
        }
    }
    assert!(start.elapsed() >= LONG_TTL / 2, "{:?}", start.elapsed());
}
