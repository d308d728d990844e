//! Operators' requests (the admin API, `leader pause` / `resume` /
//! `step-down`) on the in-memory backend with paused time.

use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::{sleep, Instant};

use crate::admin::Admin;
use crate::backend::admin::PauseMark;
use crate::names::GroupKeys;
use crate::test_support::{builder, instance, next_transition, settle, G, RENEW, TTL};
use crate::{Event, LostReason, MemoryBackend};

fn admin(mem: &MemoryBackend) -> Admin {
    Admin::new(&builder(mem, "admin").build().unwrap()).unwrap()
}

/// Pause `G` the way a request whose notice got lost would: the key alone.
fn pause_silently(mem: &MemoryBackend) {
    let keys = GroupKeys::new("leader", G);
    let mark = PauseMark {
        by: "test".into(),
        at: 0,
        reason: String::new(),
    };
    mem.set_paused(G, &keys.paused, mark).unwrap();
}

/// The next transition, asserting it is a step-down (a hand-over) that
/// comes within a few ttls.
async fn stepped_down(events: &mut broadcast::Receiver<Event>) {
    loop {
        let next = tokio::time::timeout(TTL * 5, next_transition(events));
        match next.await.expect("no hand-over within 5 ttl") {
            Event::Lost { reason, .. } => {
                assert_eq!(reason, LostReason::SteppedDown);
                return;
            }
            Event::Paused { .. } | Event::StepDownRequested { .. } => continue,
            other => panic!("expected a step-down, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_paused_group_is_acquired_by_nobody() {
    let mem = MemoryBackend::new();
    let admin = admin(&mem);
    assert!(admin.pause(G, "ops", Some("incident")).await.unwrap());
    let a = instance(&mem, "a");
    let mut events = a.subscribe();
    assert_eq!(a.run_if_leader(G, || async { 1 }).await, None);
    assert!(matches!(events.recv().await.unwrap(), Event::Paused { .. }));
    sleep(TTL * 100).await;
    assert!(!a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().elected, 0);
    let status = a.status();
    assert!(status[0].paused, "{status:?}");
    let info = admin.group(G).await.unwrap();
    assert_eq!(info.holder, None);
    let pause = info.paused.unwrap();
    assert_eq!(
        (pause.by.as_str(), pause.reason.as_deref()),
        ("ops", Some("incident"))
    );
    assert!(
        !admin.pause(G, "ops", None).await.unwrap(),
        "already paused"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_request_makes_the_leader_hand_over_at_once() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let (mut a_events, mut b_events) = (a.subscribe(), b.subscribe());
    let before = Instant::now();
    admin(&mem).pause(G, "ops", None).await.unwrap();
    stepped_down(&mut a_events).await;
    assert_eq!(Instant::now(), before, "the request woke the leader");
    assert_eq!(admin(&mem).group(G).await.unwrap().holder, None, "released");
    assert!(matches!(
        next_transition(&mut b_events).await,
        Event::Paused { .. }
    ));
    sleep(TTL * 10).await;
    assert!(!a.is_leader(G) && !b.is_leader(G));
    assert!(a.status()[0].paused && b.status()[0].paused);
}

#[tokio::test(start_paused = true)]
async fn without_the_notice_the_leader_hands_over_at_its_next_renewal() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let elected = Instant::now();
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut a_events = a.subscribe();
    sleep(Duration::from_millis(100)).await;
    pause_silently(&mem);
    // A body in flight is drained before the release.
    let a2 = a.clone();
    let body = tokio::spawn(async move {
        a2.run_if_leader(G, || async {
            sleep(RENEW).await;
            Instant::now()
        })
        .await
    });
    settle().await;
    stepped_down(&mut a_events).await;
    let finished = body
        .await
        .unwrap()
        .expect("admitted before the pause was seen");
    // The renewal due one interval after the election found the pause; the
    // hand-over waited for the body alone.
    assert_eq!(finished, elected + Duration::from_millis(100) + RENEW);
    assert_eq!(Instant::now(), finished);
    assert_eq!(admin(&mem).group(G).await.unwrap().holder, None);
    assert!(
        a.run_if_leader(G, || async {}).await.is_none(),
        "no new run after the pause was seen"
    );
    sleep(TTL * 10).await;
    assert!(!a.is_leader(G) && !b.is_leader(G));
    assert_eq!(b.stats(G).unwrap().elected, 0);
}

#[tokio::test(start_paused = true)]
async fn a_pause_without_notice_ends_the_leadership_within_one_renew_interval() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let elected = Instant::now();
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut events = a.subscribe();
    pause_silently(&mem);
    stepped_down(&mut events).await;
    assert_eq!(Instant::now(), elected + RENEW);
    assert_eq!(admin(&mem).group(G).await.unwrap().holder, None);
}

#[tokio::test(start_paused = true)]
async fn resume_lets_an_instance_acquire_at_once() {
    let mem = MemoryBackend::new();
    let admin = admin(&mem);
    admin.pause(G, "ops", None).await.unwrap();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_none());
    let mut events = a.subscribe();
    sleep(TTL).await;
    let before = Instant::now();
    assert!(admin.resume(G).await.unwrap());
    assert!(matches!(
        next_transition(&mut events).await,
        Event::Resumed { .. }
    ));
    assert!(matches!(
        next_transition(&mut events).await,
        Event::Elected { .. }
    ));
    assert_eq!(
        Instant::now(),
        before,
        "the resume notice woke the follower"
    );
    assert!(!a.status()[0].paused);
    assert!(!admin.resume(G).await.unwrap(), "was not paused any more");
}

#[tokio::test(start_paused = true)]
async fn a_step_down_request_hands_over_to_another_instance() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let (mut a_events, mut b_events) = (a.subscribe(), b.subscribe());
    let before = Instant::now();
    let asked = admin(&mem).step_down(G).await.unwrap();
    assert_eq!(asked.as_deref(), Some("a"));
    assert!(matches!(
        next_transition(&mut a_events).await,
        Event::StepDownRequested { .. }
    ));
    stepped_down(&mut a_events).await;
    assert!(matches!(
        next_transition(&mut b_events).await,
        Event::Elected { .. }
    ));
    assert_eq!(Instant::now(), before, "one round, no wait");
    assert_eq!(a.stats(G).unwrap().lost_stepped_down, 1);
    assert_eq!(
        admin(&mem).group(G).await.unwrap().holder.as_deref(),
        Some("b")
    );
}

fn publish_step_down(mem: &MemoryBackend, token: u64, holder: &str) {
    let channel = crate::names::control_channel("leader");
    let request = crate::names::ControlRequest::StepDown {
        token,
        holder: holder.into(),
    };
    mem.publish(&channel, request.message(G));
}

#[tokio::test(start_paused = true)]
async fn a_step_down_request_is_for_the_holder_it_names() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let token = a
        .run_if_leader(G, || async { crate::current_lease().unwrap().token() })
        .await
        .unwrap();
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut a_events = a.subscribe();
    // Another holder named, or another leadership of this holder: nothing.
    publish_step_down(&mem, token, "b");
    publish_step_down(&mem, token + 1, "a");
    publish_step_down(&mem, token - 1, "a");
    settle().await;
    sleep(TTL * 3).await;
    assert!(a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().lost(), 0);
    // The request naming this leadership works.
    let before = Instant::now();
    publish_step_down(&mem, token, "a");
    stepped_down(&mut a_events).await;
    assert_eq!(Instant::now(), before);
    assert_eq!(a.stats(G).unwrap().lost_stepped_down, 1);
    // Nobody holds it: nothing to ask.
    a.shutdown().await;
    b.shutdown().await;
    assert_eq!(admin(&mem).step_down(G).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_late_step_down_request_does_not_end_a_later_leadership() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let first = a
        .run_if_leader(G, || async { crate::current_lease().unwrap().token() })
        .await
        .unwrap();
    a.step_down(G).await.unwrap();
    // Alone: it wins again after its cooldown.
    sleep(TTL * 2).await;
    let second = a
        .run_if_leader(G, || async { crate::current_lease().unwrap().token() })
        .await
        .expect("leads again");
    assert!(second > first);
    // The operator asked while the first leadership ran; it arrives now.
    publish_step_down(&mem, first, "a");
    settle().await;
    sleep(TTL * 3).await;
    assert!(a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().lost_stepped_down, 1, "the first alone");
}

#[tokio::test(start_paused = true)]
async fn a_step_down_request_that_comes_before_its_leadership_begins_is_taken() {
    let mem = MemoryBackend::new();
    let admin = admin(&mem);
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    admin.pause(G, "ops", None).await.unwrap();
    let mut events = a.subscribe();
    stepped_down(&mut events).await;
    // The next token is predictable once the last one is above the clock.
    let last = 9_000_000_000_000_000_000;
    mem.set_last_token(&GroupKeys::new("leader", G).record, last);
    // The request for the next leadership comes first (as when it arrives
    // between the acquire's reply and the start of the leadership).
    publish_step_down(&mem, last + 1, "a");
    settle().await;
    assert!(!a.is_leader(G));
    admin.resume(G).await.unwrap();
    loop {
        let next = tokio::time::timeout(TTL * 5, next_transition(&mut events));
        match next.await.expect("no step-down request taken within 5 ttl") {
            Event::Elected { token, .. } => assert_eq!(token, last + 1),
            Event::StepDownRequested { token, .. } => {
                assert_eq!(token, last + 1);
                break;
            }
            Event::Resumed { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    stepped_down(&mut events).await;
    assert_eq!(a.stats(G).unwrap().lost_stepped_down, 2);
}

#[tokio::test(start_paused = true)]
async fn requests_do_not_cut_a_step_down_cooldown_short() {
    let mem = MemoryBackend::new();
    let admin = admin(&mem);
    let a = instance(&mem, "a");
    let token = a
        .run_if_leader(G, || async { crate::current_lease().unwrap().token() })
        .await
        .unwrap();
    let mut events = a.subscribe();
    let before = Instant::now();
    assert_eq!(admin.step_down(G).await.unwrap().as_deref(), Some("a"));
    stepped_down(&mut events).await;
    // A repeated request, a pause and a resume, during the cooldown.
    publish_step_down(&mem, token, "a");
    admin.pause(G, "ops", None).await.unwrap();
    admin.resume(G).await.unwrap();
    loop {
        if let Event::Elected { .. } = next_transition(&mut events).await {
            break;
        }
    }
    assert!(
        Instant::now() >= before + TTL,
        "re-elected {:?} after stepping down, within the cooldown",
        Instant::now() - before
    );
}
