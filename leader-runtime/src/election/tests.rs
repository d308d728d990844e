//! The state machine on the in-memory backend with paused time: every
//! transition and timing bound, exactly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::{advance, sleep, Instant};

use crate::backend::{ATTEMPT_SPREAD, ATTEMPT_STEP};
use crate::{Config, Event, LostReason, MemoryBackend, Runtime};

use crate::test_support::{
    instance, next_transition, paused_current_thread, settle, Captured, G, MARGIN, RENEW, TTL,
};

#[tokio::test(start_paused = true)]
async fn first_call_waits_for_the_first_round_and_wins() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let mut events = a.subscribe();
    assert_eq!(a.run_if_leader(G, || async { 7 }).await, Some(7));
    assert!(a.is_leader(G));
    let Event::Elected {
        token, instance_id, ..
    } = next_transition(&mut events).await
    else {
        panic!("expected Elected")
    };
    assert_eq!(instance_id, "a");
    assert!(token > 0);
    assert_eq!(a.stats(G).unwrap().elected, 1);
    assert_eq!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn only_one_of_two_leads() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert_eq!(a.run_if_leader(G, || async { 1 }).await, Some(1));
    assert_eq!(b.run_if_leader(G, || async { 2 }).await, None);
    assert!(!b.is_leader(G));
    assert_eq!(b.leader_id(G).await.unwrap().as_deref(), Some("a"));
    // Hours later the leader is still the same one, and b never led.
    sleep(Duration::from_secs(3600)).await;
    assert!(a.is_leader(G) && !b.is_leader(G));
    assert_eq!(b.stats(G).unwrap().elected, 0);
    // A follower costs about one acquire per (ttl - renew): the lease has
    // ~2-3 s left whenever b looks, so b asks at most every 2 s.
    let attempts = b.stats(G).unwrap().acquire_attempts;
    assert!((1200..=1900).contains(&attempts), "{attempts}");
}

#[tokio::test(start_paused = true)]
async fn renewal_extends_the_view_to_sent_plus_ttl_minus_margin() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let start = Instant::now();
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let lease = a
        .run_if_leader(G, || async { crate::current_lease() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.valid_until(), start + TTL - MARGIN);
    let mut events = a.subscribe();
    let Event::Renewed { valid_until, .. } = events.recv().await.unwrap() else {
        panic!()
    };
    assert_eq!(Instant::now(), start + RENEW);
    assert_eq!(valid_until, start + RENEW + TTL - MARGIN);
    assert_eq!(lease.valid_until(), valid_until);
    assert_eq!(a.stats(G).unwrap().renewals, 1);
}

#[tokio::test(start_paused = true)]
async fn renew_failure_then_recovery_keeps_leadership() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let start = Instant::now();
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    mem.set_available(false);
    // The renew at 1 s fails; quick retries follow; the view still holds.
    sleep(Duration::from_millis(2500)).await;
    assert!(a.is_leader(G));
    assert!(a.stats(G).unwrap().renew_failures >= 5);
    mem.set_available(true);
    sleep(Duration::from_millis(400)).await;
    assert!(a.is_leader(G), "recovered before the view ended");
    assert!(a.current_lease().is_none(), "no gated body here");
    let lease = a
        .run_if_leader(G, || async { crate::current_lease().unwrap() })
        .await
        .unwrap();
    // Retries run every renew/10 = 100 ms: the first after recovery lands by 2.6 s.
    let renewed_at = lease.valid_until() - (TTL - MARGIN);
    assert!(
        renewed_at >= start + Duration::from_millis(2500),
        "{:?}",
        renewed_at - start
    );
    assert!(
        renewed_at <= start + Duration::from_millis(2600),
        "{:?}",
        renewed_at - start
    );
    assert_eq!(a.stats(G).unwrap().lost(), 0);
}

#[tokio::test(start_paused = true)]
async fn view_expires_exactly_at_valid_until_then_another_takes_over() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let start = Instant::now();
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut a_events = a.subscribe();
    let mut b_events = b.subscribe();
    mem.set_available(false);
    let valid_until = start + TTL - MARGIN;
    sleep(valid_until - Instant::now() - Duration::from_millis(1)).await;
    assert!(a.is_leader(G), "1 ms before valid_until");
    sleep(Duration::from_millis(1)).await;
    assert!(
        !a.is_leader(G),
        "at valid_until the view is over, stuck task or not"
    );
    let Event::Lost { reason, .. } = next_transition(&mut a_events).await else {
        panic!()
    };
    assert_eq!(reason, LostReason::Expired);
    assert_eq!(Instant::now(), valid_until);
    // a's first attempt (its lease is still there: it would re-claim it)
    // fails in the outage; it retries after retry_interval.
    settle().await;
    mem.set_available(true);
    // b retries right when the lease expires on the server (onto the
    // attempt grid: + < 15 ms); its error-free retries were paced by the
    // lease's pttl.
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!()
    };
    let elapsed = Instant::now() - start;
    assert!(
        elapsed >= TTL && elapsed < TTL + ATTEMPT_STEP + ATTEMPT_SPREAD,
        "{elapsed:?}"
    );
    assert!(!a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().lost_expired, 1);
}

#[tokio::test(start_paused = true)]
async fn superseded_at_once_when_someone_else_holds_the_key() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let start = Instant::now();
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut events = a.subscribe();
    mem.overwrite("leader", G, "intruder", Duration::from_secs(60));
    let Event::Lost { reason, .. } = next_transition(&mut events).await else {
        panic!()
    };
    assert_eq!(reason, LostReason::Superseded);
    assert_eq!(Instant::now(), start + RENEW, "noticed at the next renew");
    assert!(!a.is_leader(G));
    assert_eq!(a.leader_id(G).await.unwrap().as_deref(), Some("intruder"));
}

#[tokio::test(start_paused = true)]
async fn step_down_hands_over_in_one_round_and_cools_down() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut b_events = b.subscribe();
    let before = Instant::now();
    a.step_down(G).await.unwrap();
    assert!(!a.is_leader(G));
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!()
    };
    assert_eq!(
        Instant::now(),
        before,
        "the release notice woke b: no time passed"
    );
    assert_eq!(a.stats(G).unwrap().lost_stepped_down, 1);
    // b now steps down too: a is still cooling down, so b takes it back after a ttl... unless
    // a's cooldown ended by b's release notice: a has been released to by b.
    sleep(TTL * 2).await;
    assert!(b.is_leader(G) && !a.is_leader(G));
}

/// The next two transitions are a step-down and a new leadership.
async fn stepped_down_then_elected(events: &mut broadcast::Receiver<Event>) {
    let lost = next_transition(events).await;
    assert!(
        matches!(
            lost,
            Event::Lost {
                reason: LostReason::SteppedDown,
                ..
            }
        ),
        "{lost:?}"
    );
    let elected = next_transition(events).await;
    assert!(matches!(elected, Event::Elected { .. }), "{elected:?}");
}

#[tokio::test(start_paused = true)]
async fn step_down_alone_takes_the_lease_back_after_one_ttl() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut events = a.subscribe();
    let before = Instant::now();
    a.step_down(G).await.unwrap();
    stepped_down_then_elected(&mut events).await;
    assert_eq!(Instant::now() - before, TTL);
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_stored_while_leading_does_not_cut_the_cooldown_short() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut events = a.subscribe();
    let before = Instant::now();
    // The step-down is queued, and a reconnect notice wakes the leader in
    // the same instant: the election takes the command first.
    let step_down = a.step_down(G);
    tokio::pin!(step_down);
    assert!(futures_util::FutureExt::now_or_never(step_down.as_mut()).is_none());
    a.group(G).unwrap().control.released.notify_one();
    step_down.await.unwrap();
    stepped_down_then_elected(&mut events).await;
    assert_eq!(Instant::now() - before, TTL, "the cooldown ran its course");
}

#[tokio::test(start_paused = true)]
async fn step_down_drains_running_bodies_before_release() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let a2 = a.clone();
    let body = tokio::spawn(async move {
        a2.run_if_leader(G, || async {
            sleep(Duration::from_millis(300)).await;
            Instant::now()
        })
        .await
    });
    settle().await;
    let mut b_events = b.subscribe();
    a.step_down(G).await.unwrap();
    let finished = body.await.unwrap().expect("body was admitted");
    assert!(
        a.run_if_leader(G, || async {}).await.is_none(),
        "no new run while stepping down"
    );
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!()
    };
    assert!(
        Instant::now() >= finished,
        "b led only after a's body finished"
    );
}

/// A drain that cannot tell that every body finished (here: its fence
/// failed) waits out the view and does not release: the next leader starts
/// when the lease expires, never while a body here may still run.
#[tokio::test(start_paused = true)]
async fn a_hand_over_whose_drain_fails_lets_the_lease_expire() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    a.group(G).unwrap().runs.fail_fence();
    let mut b_events = b.subscribe();
    a.step_down(G).await.unwrap();
    assert!(!a.is_leader(G));
    // The drain waited out a's view; the lease key is still a's (a release
    // would have deleted it, and b would lead at once).
    assert_eq!(a.leader_id(G).await.unwrap().as_deref(), Some("a"));
    assert!(!b.is_leader(G));
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!()
    };
    assert!(b.is_leader(G));
}

#[tokio::test(start_paused = true)]
async fn campaigns_again_after_a_loss() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut events = a.subscribe();
    mem.set_available(false);
    let Event::Lost {
        reason: LostReason::Expired,
        ..
    } = next_transition(&mut events).await
    else {
        panic!()
    };
    mem.set_available(true);
    let Event::Elected { .. } = next_transition(&mut events).await else {
        panic!()
    };
    assert!(a.is_leader(G));
    assert_eq!(a.stats(G).unwrap().elected, 2);
}

#[tokio::test(start_paused = true)]
async fn release_notice_wakes_a_follower_waiting_on_a_long_pttl() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    sleep(Duration::from_millis(100)).await;
    let mut b_events = b.subscribe();
    let before = Instant::now();
    a.shutdown().await;
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!()
    };
    assert_eq!(Instant::now(), before);
    assert_eq!(a.stats(G).unwrap().lost_shutdown, 1);
}

#[tokio::test(start_paused = true)]
async fn safe_start_after_data_loss_waits_one_ttl() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut a_events = a.subscribe();
    let mut b_events = b.subscribe();
    let first_token = a
        .run_if_leader(G, || async { crate::current_lease().unwrap().token() })
        .await
        .unwrap();
    mem.flush();
    let lost_at = Instant::now();
    // a's next renew finds the lease gone; whoever acquires next waits a ttl.
    let Event::Lost {
        reason: LostReason::Expired,
        ..
    } = next_transition(&mut a_events).await
    else {
        panic!()
    };
    let elected = tokio::select! {
        e = next_transition(&mut a_events) => e,
        e = next_transition(&mut b_events) => e,
    };
    let Event::Elected { token, .. } = elected else {
        panic!()
    };
    assert!(token > first_token, "tokens grow across data loss");
    assert!(
        Instant::now() - lost_at >= TTL,
        "{:?}",
        Instant::now() - lost_at
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_and_ends_everything() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    for g in ["g1", "g2", "g3"] {
        assert!(a.run_if_leader(g, || async {}).await.is_some());
    }
    a.shutdown().await;
    let b = instance(&mem, "b");
    for g in ["g1", "g2", "g3"] {
        assert!(!a.is_leader(g));
        assert_eq!(b.leader_id(g).await.unwrap(), None, "released");
    }
    assert!(a.run_if_leader("g4", || async {}).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_runtime_releases() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    drop(a);
    settle().await;
    let b = instance(&mem, "b");
    assert_eq!(b.leader_id(G).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn lease_lost_completes_when_the_view_ends_even_without_the_election() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let start = Instant::now();
    let lease = a
        .run_if_leader(G, || async { crate::current_lease().unwrap() })
        .await
        .unwrap();
    mem.set_available(false);
    lease.lost().await;
    assert_eq!(Instant::now(), start + TTL - MARGIN);
    assert!(!lease.is_valid());
}

#[tokio::test(start_paused = true)]
async fn callbacks_fire_once_per_transition_and_never_for_a_follower() {
    let mem = MemoryBackend::new();
    let logs = [
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    ];
    let make = |id: &str, log: &Arc<Mutex<Vec<String>>>| {
        let (l1, l2) = (log.clone(), log.clone());
        let id1 = id.to_owned();
        let id2 = id.to_owned();
        Runtime::new(
            Config::builder()
                .memory(mem.clone())
                .ttl(TTL)
                .renew_interval(RENEW)
                .instance_id(id)
                .on_elected(move |g, lease| {
                    l1.lock()
                        .unwrap()
                        .push(format!("{id1} elected {g} {}", lease.token() > 0))
                })
                .on_lost(move |g, r| {
                    // A blocking callback must not hold up the election.
                    std::thread::sleep(Duration::from_millis(50));
                    l2.lock().unwrap().push(format!("{id2} lost {g} {r}"))
                })
                .build()
                .unwrap(),
        )
        .unwrap()
    };
    let (a, b) = (make("a", &logs[0]), make("b", &logs[1]));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let mut b_events = b.subscribe();
    a.step_down(G).await.unwrap();
    let Event::Elected { .. } = next_transition(&mut b_events).await else {
        panic!()
    };
    a.shutdown().await; // a follower: no callback
    b.shutdown().await;
    drop((a, b));
    // Callback threads run on real time; wait for them to drain.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while logs.iter().any(|l| l.lock().unwrap().len() < 2) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        *logs[0].lock().unwrap(),
        ["a elected jobs true", "a lost jobs stepped_down"]
    );
    assert_eq!(
        *logs[1].lock().unwrap(),
        ["b elected jobs true", "b lost jobs shutdown"]
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_group_names_fail_closed_and_touch_nothing() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    for bad in ["", "a b", "{x}", "x\n", "ü"] {
        assert!(!a.is_leader(bad));
        assert!(a.run_if_leader(bad, || async {}).await.is_none());
        assert!(matches!(
            a.leader_id(bad).await,
            Err(crate::Error::InvalidGroup { .. })
        ));
        assert!(matches!(
            a.step_down(bad).await,
            Err(crate::Error::InvalidGroup { .. })
        ));
        assert!(a.stats(bad).is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_on_loss_stops_the_body() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let group = a.group(G).unwrap();
    mem.set_available(false);
    let out = crate::group::admission::run(&group, true, async {
        sleep(Duration::from_secs(60)).await;
        1
    })
    .await;
    assert_eq!(out, None);
    advance(Duration::from_millis(1)).await;
    assert!(!a.is_leader(G));
}

#[test]
fn is_leader_on_an_invalid_name_logs_one_error_then_debug() {
    let captured = Captured::default();
    let subscriber = captured.debug_subscriber();
    tracing::subscriber::with_default(subscriber, || {
        let tokio = paused_current_thread();
        tokio.block_on(async {
            let a = instance(&MemoryBackend::new(), "a");
            for _ in 0..3 {
                assert!(!a.is_leader("a b"));
            }
        });
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let count = |level: &str| {
        text.lines()
            .filter(|l| l.contains(level) && l.contains("is_leader"))
            .count()
    };
    // At most one error in the process (another test may have had it).
    assert!(count("ERROR") <= 1, "{text}");
    assert_eq!(count("ERROR") + count("DEBUG"), 3, "{text}");
}
