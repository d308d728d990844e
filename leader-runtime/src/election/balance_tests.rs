//! Balanced leadership on the in-memory backend with paused time: shares of
//! ⌊G/N⌋ or ⌈G/N⌉ once membership settles, a joiner takes its share, a
//! clean leaver's groups move at once, a crashed member causes no hand-over
//! churn while its entry waits for its expiry — and never two leaders of a
//! group.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::backend::{Backend, Counts};
use crate::balance::SHARE_GRACE;
use crate::names::members_key;
use crate::test_support::{builder, start, RENEW, RETRY, TTL};
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

/// A leader that crashed: each of its groups goes at the expiry to the
/// survivor that ranks first for it (`Balance::backup_delay`), so they
/// spread over the survivors at once; the others ask a little later. "z"
/// took every group and is gone (no membership entry, no renewals): when
/// its leases run out, every group's first new leader is the one of a, b
/// and c the group ranks highest. Here the leases end exactly on a point of
/// the early grid, so every follower's early attempt comes at the expiry
/// (as on Redis, where a crashed leader's lease ends a few ms past the
/// point its followers ask on). Fails when the others' early attempt takes
/// instead of peeking: the first to ask wins every group (all 30 went to
/// one survivor, which would then hand 20 over).
#[tokio::test(start_paused = true)]
async fn a_crashed_leaders_groups_go_each_to_the_survivor_it_ranks_first() {
    let mem = MemoryBackend::new();
    let backend = Backend::Memory(mem.clone());
    let names = (0..30).map(|i| format!("c{i}")).collect::<Vec<_>>();
    for g in &names {
        let keys = crate::names::GroupKeys::new("leader", g);
        let won = backend
            .acquire_many("z", TTL, &[(g, &keys, crate::backend::Ask::Take)])
            .await;
        assert!(matches!(won[..], [Ok(crate::backend::Acquire::Won { .. })]));
    }
    let fleet = [
        balanced(&mem, "a"),
        balanced(&mem, "b"),
        balanced(&mem, "c"),
    ];
    // A follower ranks the members of the round it knows when it schedules
    // its attempt at the expiry: let each see the others first.
    sleep(RENEW).await;
    for rt in &fleet {
        for g in &names {
            let _ = rt.run_if_leader(g, || async {}).await;
        }
    }
    let mut first: std::collections::HashMap<&str, &str> = Default::default();
    let end = Instant::now() + TTL * 2;
    while Instant::now() < end && first.len() < names.len() {
        for g in &names {
            let leaders: Vec<&str> = fleet
                .iter()
                .filter(|rt| rt.is_leader(g))
                .map(|rt| rt.config().instance_id())
                .collect();
            assert!(leaders.len() <= 1, "{g}: {leaders:?}");
            if let [leader] = leaders[..] {
                first.entry(g).or_insert(leader);
            }
        }
        sleep(Duration::from_millis(5)).await;
    }
    let mut taken = std::collections::HashMap::new();
    for g in &names {
        let ranked_first = ["a", "b", "c"]
            .into_iter()
            .max_by_key(|m| (crate::balance::rank(g, m), *m))
            .unwrap();
        assert_eq!(first.get(g.as_str()), Some(&ranked_first), "{g}: {first:?}");
        *taken.entry(ranked_first).or_insert(0) += 1;
    }
    // Spread over all three (10 each would be the share).
    assert_eq!(taken.len(), 3, "{taken:?}");
}

/// A group name that `first` ranks above `other` (`Balance::backup_delay`'s
/// rendezvous hashing).
fn ranked_first_by(first: &str, other: &str) -> String {
    (0..)
        .map(|i| format!("r{i}"))
        .find(|g| crate::balance::rank(g, first) > crate::balance::rank(g, other))
        .unwrap_or_default()
}

/// Polls (1 ms steps of paused time) until `rt` leads `group`; when.
async fn led_at(rt: &Runtime, group: &str, limit: Duration) -> Instant {
    let end = Instant::now() + limit;
    while !rt.is_leader(group) {
        assert!(Instant::now() < end, "{group} not led within {limit:?}");
        sleep(Duration::from_millis(1)).await;
    }
    Instant::now()
}

/// The follower a group ranks first is a live member but never campaigns
/// in that group: when the holder crashes, a backup takes it its delay
/// after the expiry — within 45 ms, not one `retry_interval` or a ttl.
#[tokio::test(start_paused = true)]
async fn a_backup_takes_a_group_its_first_follower_does_not_campaign_in() {
    let mem = MemoryBackend::new();
    let backend = Backend::Memory(mem.clone());
    let g = ranked_first_by("a", "b");
    let keys = crate::names::GroupKeys::new("leader", &g);
    let won = backend
        .acquire_many("z", TTL, &[(&g, &keys, crate::backend::Ask::Take)])
        .await;
    assert!(matches!(won[..], [Ok(crate::backend::Acquire::Won { .. })]));
    let expiry = Instant::now() + TTL;
    let (a, b) = (balanced(&mem, "a"), balanced(&mem, "b"));
    // `a` campaigns (in another group), so it ranks; it never asks for `g`.
    let _ = a.run_if_leader("other", || async {}).await;
    let _ = b.run_if_leader(&g, || async {}).await;
    let at = led_at(&b, &g, TTL * 2).await;
    assert!(at >= expiry, "{:?} before the expiry", expiry - at);
    assert!(
        at <= expiry + Duration::from_millis(45),
        "{:?} after the expiry",
        at - expiry
    );
}

/// A follower that the group does not rank first, woken by the holder's
/// release notice, takes the group at once: only an early attempt that
/// comes at its scheduled time is a peek. `b` is below its share (it
/// campaigns in two groups, `a` in one), so it does not yield the released
/// group either. Fails when
/// the attempt after a notice is a peek (the group then waits 20 ms more).
#[tokio::test(start_paused = true)]
async fn a_backup_woken_by_a_release_notice_takes_at_once() {
    let mem = MemoryBackend::new();
    let g = ranked_first_by("a", "b");
    let z = start(builder(&mem, "z"));
    for group in [&g, "g2"] {
        let _ = z.run_if_leader(group, || async {}).await;
        led_at(&z, group, TTL * 2).await;
    }
    let (a, b) = (balanced(&mem, "a"), balanced(&mem, "b"));
    let _ = a.run_if_leader("other", || async {}).await;
    for group in [&g, "g2"] {
        let _ = b.run_if_leader(group, || async {}).await;
    }
    // Past a few of b's early attempts (peeks) and membership rounds.
    sleep(TTL * 2).await;
    assert!(z.is_leader(&g) && !b.is_leader(&g));
    z.step_down(&g).await.unwrap();
    let released = Instant::now();
    let at = led_at(&b, &g, TTL).await;
    assert!(
        at - released <= Duration::from_millis(10),
        "taken {:?} after the release",
        at - released
    );
}
