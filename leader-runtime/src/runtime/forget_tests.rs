//! `Runtime::forget`: groups named at run time are dropped on request, after
//! a hand-over.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use crate::test_support::{instance, next_transition, settle, G, TTL};
use crate::{Event, MemoryBackend, Runtime};

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

/// A group forgotten while one of its bodies runs, then named again: the
/// new election waits for the old one's hand-over, so the instance never
/// runs two bodies of the group at once (it used to re-claim its own lease
/// at once under a new token).
#[tokio::test(start_paused = true)]
async fn a_group_named_again_waits_for_its_forgotten_leadership_to_hand_over() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let (finish, body) = body_until_finished(&a).await;
    let forgetting = forget_meanwhile(&a).await;
    assert!(a.status().is_empty(), "forgotten at once");
    // Named again while the old body runs: not leader.
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    sleep(TTL / 2).await;
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    assert!(!a.is_leader(G));
    // The body returns: the old leadership hands over, the new one wins.
    finish.send(()).unwrap();
    forgetting.await.unwrap().unwrap();
    assert_eq!(body.await.unwrap(), Some(()));
    sleep(Duration::from_millis(10)).await;
    assert_eq!(a.run_if_leader(G, || async {}).await, Some(()));
}

/// Forgotten while a body of it runs, and one of its successors forgotten
/// too before that body returned: the next one still waits for the first.
#[tokio::test(start_paused = true)]
async fn a_successor_forgotten_while_it_waits_passes_the_wait_on() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let (finish, body) = body_until_finished(&a).await;
    let forgetting = forget_meanwhile(&a).await;
    // The second election waits; forgotten, it answers when the first
    // has ended.
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    let forgetting_again = forget_meanwhile(&a).await;
    // The third waits for the first too.
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    sleep(TTL / 2).await;
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    assert!(!forgetting_again.is_finished());
    finish.send(()).unwrap();
    forgetting.await.unwrap().unwrap();
    forgetting_again.await.unwrap().unwrap();
    assert_eq!(body.await.unwrap(), Some(()));
    sleep(Duration::from_millis(10)).await;
    assert_eq!(a.run_if_leader(G, || async {}).await, Some(()));
}

/// `a` leads G and runs a body of it until `finish` is sent (or dropped):
/// returns that sender and the body's task, once the body runs.
async fn body_until_finished(a: &Runtime) -> (oneshot::Sender<()>, JoinHandle<Option<()>>) {
    let (finish, finished) = oneshot::channel::<()>();
    let (started, running) = oneshot::channel();
    let body = tokio::spawn({
        let a = a.clone();
        async move {
            a.run_if_leader(G, || async move {
                let _ = started.send(());
                let _ = finished.await;
            })
            .await
        }
    });
    running.await.unwrap();
    (finish, body)
}

/// `a.forget(G)` on a task of its own, after every ready task has run.
async fn forget_meanwhile(a: &Runtime) -> JoinHandle<crate::Result<()>> {
    let forgetting = tokio::spawn({
        let a = a.clone();
        async move { a.forget(G).await }
    });
    settle().await;
    forgetting
}

/// `a` leads G; a body of it runs on, and G is forgotten: the hand-over
/// waits out the view, then leaves the lease to expire. Returns what keeps
/// the body running, and its task.
async fn forget_under_a_body_that_outlives_the_view(
    a: &Runtime,
) -> (oneshot::Sender<()>, JoinHandle<Option<()>>) {
    let (finish, body) = body_until_finished(a).await;
    a.forget(G).await.unwrap();
    (finish, body)
}

/// Forgotten while a body of it runs past the view: the group named again
/// sits out a ttl rather than re-claim the lease at once under the body
/// still running.
#[tokio::test(start_paused = true)]
async fn a_group_named_again_after_its_body_outlived_the_view_sits_out_a_ttl() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let (_running_on, body) = forget_under_a_body_that_outlives_the_view(&a).await;
    let handed_over = Instant::now();
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    sleep(TTL - Duration::from_millis(100)).await;
    assert_eq!(a.run_if_leader(G, || async {}).await, None);
    assert!(!a.is_leader(G));
    sleep(Duration::from_millis(200)).await;
    assert!(
        a.is_leader(G),
        "{:?} after the hand-over",
        handed_over.elapsed()
    );
    body.abort();
}

/// That sit-out holds when the group leaves the race and comes back (which
/// ends a step-down's cooldown).
#[tokio::test(start_paused = true)]
async fn the_sit_out_after_a_body_outlived_the_view_holds_through_eligibility() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let (_running_on, body) = forget_under_a_body_that_outlives_the_view(&a).await;
    a.set_eligible(G, false).await.unwrap();
    settle().await;
    a.set_eligible(G, true).await.unwrap();
    sleep(Duration::from_millis(10)).await;
    assert!(!a.is_leader(G));
    sleep(TTL - Duration::from_millis(200)).await;
    assert!(!a.is_leader(G));
    sleep(Duration::from_millis(300)).await;
    assert!(a.is_leader(G));
    body.abort();
}
