//! `Runtime::forget`: groups named at run time are dropped on request, after
//! a hand-over.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::test_support::{instance, next_transition, G, TTL};
use crate::{Event, MemoryBackend};

#[tokio::test(start_paused = true)]
async fn forgetting_a_group_hands_over_and_ends_its_election() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert_eq!(b.run_if_leader(G, || async {}).await, None);
    let mut b_events = b.subscribe();
    let group = a.registered(G).unwrap();
    let forgotten_at = Instant::now();
    a.forget(G).await.unwrap();
    assert!(a.status().is_empty() && a.stats(G).is_none());
    // Handed over in one round trip.
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!("expected Elected")
    };
    assert_eq!(Instant::now(), forgotten_at);
    // a's election ended: nothing holds the group but us; no acquire
    // attempts any more.
    sleep(TTL * 10).await;
    assert_eq!(std::sync::Arc::strong_count(&group), 1);
    assert_eq!(group.counters.snapshot().acquire_attempts, 1);
    // Named again, it campaigns again.
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    b.shutdown().await;
    sleep(Duration::from_millis(10)).await;
    assert!(a.is_leader(G));
}
