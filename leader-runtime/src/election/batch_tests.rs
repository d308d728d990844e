//! Batched follower attempts on the in-memory backend with paused time: the
//! attempts of groups due together share one backend call, and every group
//! keeps its own rules (safe-start waits, release notices, eligibility).

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::backend::{ATTEMPT_SPREAD, ATTEMPT_STEP};
use crate::test_support::{instance, settle, G, TTL};
use crate::{MemoryBackend, Runtime};

const GROUPS: usize = 50;

fn names() -> Vec<String> {
    (0..GROUPS).map(|i| format!("g{i}")).collect()
}

/// `a` leads every group (elected at one instant), `b` follows them all.
async fn a_leads_b_follows(mem: &MemoryBackend) -> (Runtime, Runtime) {
    let (a, b) = (instance(mem, "a"), instance(mem, "b"));
    for g in names() {
        assert!(a.run_if_leader(&g, || async {}).await.is_some(), "{g}");
    }
    for g in names() {
        assert!(b.run_if_leader(&g, || async {}).await.is_none(), "{g}");
    }
    (a, b)
}

fn attempts(rt: &Runtime, group: &str) -> u64 {
    rt.stats(group).unwrap().acquire_attempts
}

#[tokio::test(start_paused = true)]
async fn a_follower_of_many_groups_makes_one_call_per_expiry() {
    let mem = MemoryBackend::new();
    let (a, b) = a_leads_b_follows(&mem).await;
    let calls_before = mem.acquire_calls();
    let attempts_before: u64 = names().iter().map(|g| attempts(&b, g)).sum();
    sleep(Duration::from_secs(600)).await;
    let calls = mem.acquire_calls() - calls_before;
    let attempted: u64 = names().iter().map(|g| attempts(&b, g)).sum::<u64>() - attempts_before;
    // Every group still attempts about once per (ttl - renew) ... ttl.
    let per_group = attempted / GROUPS as u64;
    assert!((150..=320).contains(&per_group), "{per_group}");
    // ... but all of b's groups go in one call: their leases were renewed
    // together, so they expire together (a's own calls: none, it leads).
    assert_eq!(calls, per_group, "{calls} calls for {attempted} attempts");
    assert!(names().iter().all(|g| a.is_leader(g) && !b.is_leader(g)));
}

#[tokio::test(start_paused = true)]
async fn release_notices_hand_every_group_over_at_once_in_a_few_calls() {
    let mem = MemoryBackend::new();
    let (a, b) = a_leads_b_follows(&mem).await;
    let calls_before = mem.acquire_calls();
    let stopped_at = Instant::now();
    a.shutdown().await;
    settle().await;
    // One round trip: no time passed, every group is b's.
    assert_eq!(Instant::now(), stopped_at);
    for g in names() {
        assert!(b.is_leader(&g), "{g}");
    }
    // The notices came in one burst: far fewer calls than groups.
    let calls = mem.acquire_calls() - calls_before;
    assert!(calls <= 5, "{calls} calls for {GROUPS} handovers");
}

#[tokio::test(start_paused = true)]
async fn a_safe_start_wait_holds_for_every_group_of_a_batch() {
    let mem = MemoryBackend::new();
    let (a, b) = a_leads_b_follows(&mem).await;
    // Redis lost its data: every lease and record is gone. The next leader
    // of each group must wait one ttl before its view begins.
    mem.flush();
    let flushed_at = Instant::now();
    // Until one ttl after the flush, nobody's view may be true.
    let deadline = flushed_at + TTL - Duration::from_millis(1);
    while Instant::now() < deadline {
        for g in names() {
            assert!(!b.is_leader(&g), "{g} at {:?}", Instant::now() - flushed_at);
            // a's view of the earlier lease ends at its valid_until (before
            // the flush + ttl); a new view of a waits too.
            let _ = a.is_leader(&g);
        }
        sleep(Duration::from_millis(100)).await;
    }
    // Then every group has exactly one leader again.
    sleep(TTL * 2).await;
    for g in names() {
        assert!(a.is_leader(&g) ^ b.is_leader(&g), "{g}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_ineligible_group_stays_out_of_the_batches_of_the_others() {
    let mem = MemoryBackend::new();
    let (a, b) = a_leads_b_follows(&mem).await;
    b.set_eligible("g0", false).await.unwrap();
    let (g0, g1) = (attempts(&b, "g0"), attempts(&b, "g1"));
    sleep(Duration::from_secs(60)).await;
    assert_eq!(attempts(&b, "g0"), g0, "no attempts out of the race");
    assert!(attempts(&b, "g1") >= g1 + 15);
    // Back in the race; a hands over: b takes g0 too.
    b.set_eligible("g0", true).await.unwrap();
    a.shutdown().await;
    settle().await;
    assert!(b.is_leader("g0") && b.is_leader("g1"));
}

#[test]
fn the_attempt_grid_adds_at_most_one_step_and_the_spread() {
    assert_eq!(ATTEMPT_STEP + ATTEMPT_SPREAD, Duration::from_millis(15));
}

/// A follower whose answers arrive late still takes a lease when it
/// expires: its pttl counts from when the call went out (`Expiry`), not
/// from the answer's arrival, which would make it ask that much later.
#[tokio::test(start_paused = true)]
async fn a_late_answer_does_not_delay_the_take_over() {
    let mem = MemoryBackend::new();
    let late = Duration::from_millis(60);
    let ttl = Duration::from_millis(100);
    mem.delay_acquire_replies(Some(("b", late)));
    // An instance that will never renew holds the group for 100 ms.
    mem.overwrite("leader", G, "x", ttl);
    let expiry = Instant::now() + ttl;
    let b = instance(&mem, "b");
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    while b.leader_id(G).await.unwrap().as_deref() != Some("b") {
        assert!(Instant::now() < expiry + TTL, "never taken");
        sleep(Duration::from_millis(1)).await;
    }
    // Asked at the first grid point after the expiry (plus the spread),
    // not `late` after it.
    let after = Instant::now() - expiry;
    assert!(
        after <= ATTEMPT_STEP + ATTEMPT_SPREAD + Duration::from_millis(1),
        "taken {after:?} after the expiry"
    );
}

/// A close attempt goes at the earliest the lease can expire, counted from
/// when the last call went out; when that call waited in a busy server's
/// queue, the lease outlives that guess by the wait, and the attempt comes
/// too early. The batcher asks again right after the pttl it was answered
/// (one call, part of the same attempt), not on the attempt grid.
#[tokio::test(start_paused = true)]
async fn an_attempt_made_just_before_the_expiry_is_made_again_right_after_it() {
    let mem = MemoryBackend::new();
    // An instance that will never renew holds the group until 203 ms from
    // now: between two points of the attempt grid.
    let ttl = Duration::from_millis(203);
    mem.overwrite("leader", G, "x", ttl);
    let expiry = Instant::now() + ttl;
    // b's first attempt waits 40 ms to be served: it learns a pttl that
    // counts from then, and its next attempt comes about 40 ms early.
    mem.delay_acquire_runs(Some(("b", Duration::from_millis(40))));
    let b = instance(&mem, "b");
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    mem.delay_acquire_runs(None);
    let attempted = attempts(&b, G);
    while b.leader_id(G).await.unwrap().as_deref() != Some("b") {
        assert!(Instant::now() < expiry + TTL, "never taken");
        sleep(Duration::from_millis(1)).await;
    }
    // Within a few ms of the expiry; on the grid it took the next point
    // (210 ms) plus the spread.
    let after = Instant::now() - expiry;
    assert!(
        after <= Duration::from_millis(3),
        "taken {after:?} after the expiry"
    );
    assert_eq!(attempts(&b, G), attempted + 1, "one attempt, asked twice");
}
