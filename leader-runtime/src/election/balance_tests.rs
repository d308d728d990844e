//! Balanced leadership on the in-memory backend with paused time: shares of
//! ⌊G/N⌋ or ⌈G/N⌉ once membership settles, a joiner takes its share, a
//! clean leaver's groups move at once, a crashed member causes no hand-over
//! churn while its entry waits for its expiry — and never two leaders of a
//! group.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::backend::{Backend, Counts};
use crate::election::balance::SHARE_GRACE;
use crate::names::members_key;
use crate::test_support::{builder, start, RETRY, TTL};
use crate::{Event, LostReason, MemoryBackend, Runtime};

/// How many groups the balance tests share out (also `balance_liveness_tests`).
pub(super) const GROUPS: usize = 10;

/// The names of the [`GROUPS`] groups.
pub(super) fn names() -> Vec<String> {
    (0..GROUPS).map(|i| format!("g{i}")).collect()
}

/// A balanced runtime on `mem` with the test timings.
pub(super) fn balanced(mem: &MemoryBackend, id: &str) -> Runtime {
    start(
        builder(mem, id)
            .retry_interval(RETRY)
            .balance_leadership(true),
    )
}

async fn join_all(rt: &Runtime) {
    for g in names() {
        let _ = rt.run_if_leader(&g, || async {}).await;
    }
}

fn led(rt: &Runtime) -> usize {
    names().iter().filter(|g| rt.is_leader(g)).count()
}

/// Let `span` pass in 10 ms steps, checking that no group ever has two
/// leaders among `fleet`.
async fn run_checked(fleet: &[&Runtime], span: Duration) {
    let end = Instant::now() + span;
    while Instant::now() < end {
        for g in names() {
            let leaders = fleet.iter().filter(|rt| rt.is_leader(&g)).count();
            assert!(leaders <= 1, "{g} has {leaders} leaders");
        }
        sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn each_instance_leads_its_share_and_a_joiner_takes_its_own() {
    let mem = MemoryBackend::new();
    let (a, b) = (balanced(&mem, "a"), balanced(&mem, "b"));
    join_all(&a).await;
    join_all(&b).await;
    assert_eq!(led(&a), GROUPS, "a campaigned first");
    run_checked(&[&a, &b], TTL * 4).await;
    assert_eq!((led(&a), led(&b)), (5, 5));
    // c joins: 10 over 3 is 4 (a, first by id), 3, 3.
    let c = balanced(&mem, "c");
    join_all(&c).await;
    run_checked(&[&a, &b, &c], TTL * 4).await;
    assert_eq!((led(&a), led(&b), led(&c)), (4, 3, 3));
    // Every group is led by someone.
    assert!(names()
        .iter()
        .all(|g| a.is_leader(g) || b.is_leader(g) || c.is_leader(g)));
}

#[tokio::test(start_paused = true)]
async fn a_clean_leavers_groups_move_at_once_and_the_shares_follow() {
    let mem = MemoryBackend::new();
    let (a, b, c) = (
        balanced(&mem, "a"),
        balanced(&mem, "b"),
        balanced(&mem, "c"),
    );
    for rt in [&a, &b, &c] {
        join_all(rt).await;
    }
    run_checked(&[&a, &b, &c], TTL * 4).await;
    assert_eq!((led(&a), led(&b), led(&c)), (4, 3, 3));
    let stopped = Instant::now();
    c.shutdown().await;
    // c left the membership before it released: on its release notices a
    // and b ask for a fresh round, find themselves below their shares (5,
    // 5) and take c's groups at once, not after the share grace.
    run_checked(&[&a, &b], Duration::from_millis(10)).await;
    assert!(Duration::from_millis(10) < SHARE_GRACE);
    assert_eq!(led(&a) + led(&b), GROUPS, "after {:?}", stopped.elapsed());
    run_checked(&[&a, &b], TTL * 4).await;
    assert_eq!((led(&a), led(&b)), (5, 5));
}

#[tokio::test(start_paused = true)]
async fn unbalanced_runtimes_keep_what_they_lead() {
    let mem = MemoryBackend::new();
    let a = start(builder(&mem, "a").retry_interval(RETRY));
    let b = start(builder(&mem, "b").retry_interval(RETRY));
    join_all(&a).await;
    join_all(&b).await;
    sleep(TTL * 4).await;
    assert_eq!((led(&a), led(&b)), (GROUPS, 0));
}

/// A crashed member (here: an entry that is never refreshed again, leading
/// nothing) counts for the shares only until it missed a refresh
/// (`renew_interval` + `call_timeout`), not until its entry expires (`ttl`):
/// the others hand over for its share once at most, not every round.
#[tokio::test(start_paused = true)]
async fn a_crashed_member_stops_counting_after_one_missed_refresh() {
    const LONG_TTL: Duration = Duration::from_secs(20);
    const EVERY: Duration = Duration::from_secs(1);
    let mem = MemoryBackend::new();
    let balanced_long = |id: &str| {
        start(
            builder(&mem, id)
                .ttl(LONG_TTL)
                .renew_interval(EVERY)
                .retry_interval(RETRY)
                .call_timeout(Duration::from_millis(200))
                .balance_leadership(true),
        )
    };
    let (a, b) = (balanced_long("a"), balanced_long("b"));
    join_all(&a).await;
    join_all(&b).await;
    run_checked(&[&a, &b], EVERY * 6).await;
    assert_eq!((led(&a), led(&b)), (5, 5));
    let mut events = (a.subscribe(), b.subscribe());
    // "0" (first by id: the largest share) joins, campaigning in every
    // group, and crashes at once; its entry stays for LONG_TTL.
    let counts = Counts {
        leading: 0,
        campaigns: GROUPS as u32,
    };
    Backend::Memory(mem.clone())
        .members(&members_key("leader"), "0", LONG_TTL, LONG_TTL, counts)
        .await
        .unwrap();
    run_checked(&[&a, &b], LONG_TTL + EVERY * 4).await;
    assert_eq!((led(&a), led(&b)), (5, 5), "back to the shares without it");
    let mut moves = 0;
    for rx in [&mut events.0, &mut events.1] {
        while let Ok(e) = rx.try_recv() {
            if let Event::Lost {
                reason: LostReason::SteppedDown,
                ..
            } = e
            {
                moves += 1;
            }
        }
    }
    // Its share (4 of 10 over 3) moves to it once and back: a and b shed to
    // 3 each (4 moves), the groups go round to each other at most once in
    // the round or two it counts, then they even out to 5 and 5.
    assert!(moves <= 12, "{moves} hand-overs for the crashed member");
}

/// A user's group whose name starts with `once:` is an ordinary group: the
/// kind is recorded when a group is registered, not read from its name, so
/// it is shared out like any other.
#[tokio::test(start_paused = true)]
async fn a_user_group_named_like_a_once_group_is_balanced() {
    let mem = MemoryBackend::new();
    let (a, b) = (balanced(&mem, "a"), balanced(&mem, "b"));
    let groups: Vec<String> = names().iter().map(|g| format!("once:{g}")).collect();
    for rt in [&a, &b] {
        for g in &groups {
            let _ = rt.run_if_leader(g, || async {}).await;
        }
    }
    let led = |rt: &Runtime| groups.iter().filter(|g| rt.is_leader(g)).count();
    assert_eq!(led(&a), GROUPS, "a campaigned first");
    sleep(TTL * 4).await;
    assert_eq!((led(&a), led(&b)), (5, 5));
}
