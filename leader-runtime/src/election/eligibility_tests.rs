//! `set_eligible` on the in-memory backend with paused time: out of the race
//! without stopping, drain before release, back in at once.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::test_support::{instance, next_transition, settle, G, TTL};
use crate::{Error, Event, LostReason, MemoryBackend, Runtime};

fn attempts(rt: &Runtime) -> u64 {
    rt.stats(G).unwrap().acquire_attempts
}

#[tokio::test(start_paused = true)]
async fn ineligible_leader_drains_releases_and_stays_out_until_eligible() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut a_events = a.subscribe();

    // A gated body in flight: the hand-over waits for it.
    let body = tokio::spawn({
        let a = a.clone();
        async move {
            a.run_if_leader(G, || sleep(Duration::from_millis(500)))
                .await
        }
    });
    settle().await;
    let start = Instant::now();
    a.set_eligible(G, false).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(500), "drained first");
    assert!(body.await.unwrap().is_some(), "the body ran to its end");
    assert!(!a.is_leader(G));
    let Event::Lost { reason, .. } = next_transition(&mut a_events).await else {
        panic!("expected Lost")
    };
    assert_eq!(reason, LostReason::SteppedDown);
    assert_eq!(a.run_if_leader(G, || async {}).await, None);

    // The release notice hands the lease to b at once.
    settle().await;
    assert!(b.is_leader(G));
    assert_eq!(start.elapsed(), Duration::from_millis(500));

    // An hour out of the race: not a single acquire attempt.
    let before = attempts(&a);
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(attempts(&a), before);
    assert!(b.is_leader(G) && !a.is_leader(G));

    // Not even when the lease is free.
    b.shutdown().await;
    sleep(TTL * 2).await;
    assert!(!a.is_leader(G));
    assert_eq!(attempts(&a), before);
    let status = &a.status()[0];
    assert!(!status.eligible && !status.is_leader);

    // Eligible again: campaigns right away and wins the free lease.
    let back = Instant::now();
    a.set_eligible(G, true).await.unwrap();
    settle().await;
    assert!(a.is_leader(G));
    assert_eq!(back.elapsed(), Duration::ZERO);
    assert_eq!(attempts(&a), before + 1);
    assert!(a.status()[0].eligible);
    let Event::Elected { .. } = next_transition(&mut a_events).await else {
        panic!("expected Elected")
    };
}

#[tokio::test(start_paused = true)]
async fn ineligible_follower_stops_campaigning() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    b.set_eligible(G, false).await.unwrap();
    let before = attempts(&b);
    sleep(Duration::from_secs(60)).await;
    assert_eq!(attempts(&b), before);
    // The leader steps down: nobody else is in the race, so a takes the lease
    // back after its cooldown.
    a.step_down(G).await.unwrap();
    sleep(TTL + Duration::from_millis(100)).await;
    assert!(a.is_leader(G) && !b.is_leader(G));
    assert_eq!(attempts(&b), before);
    assert_eq!(b.stats(G).unwrap().elected, 0);
    // b back in: a follower again, it sees a's lease and waits.
    b.set_eligible(G, true).await.unwrap();
    settle().await;
    assert_eq!(attempts(&b), before + 1);
    assert!(a.is_leader(G) && !b.is_leader(G));
    assert_eq!(b.status()[0].leader_id.as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn ineligible_before_first_use_never_campaigns() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    a.set_eligible(G, false).await.unwrap();
    let start = Instant::now();
    // The first gated call does not wait for a first round that never comes.
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    assert_eq!(start.elapsed(), Duration::ZERO);
    sleep(Duration::from_secs(60)).await;
    assert_eq!(attempts(&a), 0);
    assert_eq!(a.leader_id(G).await.unwrap(), None);
    a.set_eligible(G, true).await.unwrap();
    // Back in the race: its first attempt goes out with the next batch.
    settle().await;
    assert_eq!(a.run_if_leader(G, || async { 1 }).await, Some(1));
}

#[tokio::test(start_paused = true)]
async fn eligible_again_ends_a_step_down_cooldown() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    a.step_down(G).await.unwrap();
    settle().await;
    assert!(!a.is_leader(G), "cooling down");
    a.set_eligible(G, false).await.unwrap();
    a.set_eligible(G, true).await.unwrap();
    settle().await;
    assert!(a.is_leader(G), "back at once, not after one ttl");
}

#[tokio::test(start_paused = true)]
async fn eligible_on_an_unused_group_changes_nothing() {
    let a = instance(&MemoryBackend::new(), "a");
    a.set_eligible(G, true).await.unwrap();
    assert!(a.status().is_empty());
    assert!(a.stats(G).is_none());
    assert!(matches!(
        a.set_eligible("no spaces", false).await,
        Err(Error::InvalidGroup { .. })
    ));
    a.shutdown().await;
    assert!(matches!(
        a.set_eligible(G, false).await,
        Err(Error::ShutDown)
    ));
}

#[tokio::test(start_paused = true)]
async fn repeated_calls_are_harmless() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    a.set_eligible(G, true).await.unwrap();
    assert!(a.is_leader(G), "true while leading changes nothing");
    a.set_eligible(G, false).await.unwrap();
    a.set_eligible(G, false).await.unwrap();
    assert!(!a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().lost_stepped_down, 1);
    a.set_eligible(G, true).await.unwrap();
    a.set_eligible(G, true).await.unwrap();
    settle().await;
    assert!(a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().elected, 2);
}
