//! Balanced leadership on the in-memory backend with paused time: shares of
//! ⌊G/N⌋ or ⌈G/N⌉ once membership settles, a joiner takes its share, a
//! clean leaver's groups move at once — and never two leaders of a group.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::test_support::{builder, start, RETRY, TTL};
use crate::{MemoryBackend, Runtime};

const GROUPS: usize = 10;

fn names() -> Vec<String> {
    (0..GROUPS).map(|i| format!("g{i}")).collect()
}

fn balanced(mem: &MemoryBackend, id: &str) -> Runtime {
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
    // c's release notices: its groups move within the share grace.
    run_checked(&[&a, &b], Duration::from_millis(100)).await;
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
