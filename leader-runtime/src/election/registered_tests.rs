//! A follower's attempt at a lease about to expire is registered with the
//! batcher for its instant: made there without waking the election, and
//! withdrawn when something wakes the election first (a release notice, a
//! command, the stop), as a wait for that instant would have ended.
//! In-memory backend, paused time.

use std::time::Duration;

use tokio::time::{sleep, sleep_until, Instant};

use crate::admin::Admin;
use crate::backend::{ATTEMPT_SPREAD, ATTEMPT_STEP};
use crate::names::release_channel;
use crate::test_support::{builder, instance, settle, G};
use crate::{MemoryBackend, Runtime};

/// The ghost's lease: it ends between two points of the 250 ms grid (counted
/// from b's start), so b's early attempt, on the grid point before, finds
/// it still there with 125 ms left and registers the attempt after it.
const GHOST_TTL: Duration = Duration::from_millis(2_125);

/// How late after an expiry the attempt at it comes, at most.
const LATE: Duration =
    Duration::from_millis(ATTEMPT_STEP.as_millis() as u64 + ATTEMPT_SPREAD.as_millis() as u64);

/// Who holds `G`'s lease now, as Redis (here: memory) says.
async fn holder(mem: &MemoryBackend) -> Option<String> {
    let admin = Admin::new(&builder(mem, "admin").build().unwrap()).unwrap();
    admin.group(G).await.unwrap().holder
}

fn attempts(rt: &Runtime) -> u64 {
    rt.stats(G).unwrap().acquire_attempts
}

/// `b` follows `G`, held by a "ghost" that never renews; returns b and the
/// lease's expiry, with b waiting for its registered attempt (50 ms
/// before the expiry).
async fn waiting_for_a_ghosts_expiry(mem: &MemoryBackend) -> (Runtime, Instant) {
    mem.overwrite("leader", G, "ghost", GHOST_TTL);
    let expiry = Instant::now() + GHOST_TTL;
    let b = instance(mem, "b");
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    assert_eq!(attempts(&b), 1);
    sleep_until(expiry - Duration::from_millis(50)).await;
    settle().await;
    assert_eq!(attempts(&b), 2, "the early attempt found the ghost's lease");
    (b, expiry)
}

#[tokio::test(start_paused = true)]
async fn the_registered_attempt_takes_the_lease_just_after_it_expires() {
    let mem = MemoryBackend::new();
    let (b, expiry) = waiting_for_a_ghosts_expiry(&mem).await;
    let mut events = b.subscribe();
    while !b.is_leader(G) {
        let _ = events.recv().await;
    }
    let at = Instant::now();
    assert!(at > expiry && at < expiry + LATE, "{:?}", at - expiry);
    assert_eq!(attempts(&b), 3);
}

#[tokio::test(start_paused = true)]
async fn a_release_notice_wakes_the_follower_at_once() {
    let mem = MemoryBackend::new();
    let (b, expiry) = waiting_for_a_ghosts_expiry(&mem).await;
    // As if the ghost had released (it still holds the lease here): b asks
    // at once, not at the expiry, and registers for the expiry again.
    mem.publish(&release_channel("leader"), format!("{G} ghost"));
    settle().await;
    assert_eq!(attempts(&b), 3, "asked at once");
    assert!(!b.is_leader(G));
    sleep_until(expiry + LATE).await;
    settle().await;
    assert!(b.is_leader(G));
    assert_eq!(attempts(&b), 4);
}

#[tokio::test(start_paused = true)]
async fn leaving_the_race_withdraws_the_registered_attempt() {
    let mem = MemoryBackend::new();
    let (b, expiry) = waiting_for_a_ghosts_expiry(&mem).await;
    b.set_eligible(G, false).await.unwrap();
    sleep_until(expiry + LATE * 2).await;
    settle().await;
    assert_eq!(attempts(&b), 2, "no attempt out of the race");
    assert!(!b.is_leader(G));
    assert_eq!(holder(&mem).await, None, "nobody took the lease");
    // Back in the race: b asks at once and takes it.
    b.set_eligible(G, true).await.unwrap();
    settle().await;
    assert!(b.is_leader(G));
}

#[tokio::test(start_paused = true)]
async fn the_stop_withdraws_the_registered_attempt() {
    let mem = MemoryBackend::new();
    let (b, expiry) = waiting_for_a_ghosts_expiry(&mem).await;
    b.shutdown().await;
    sleep_until(expiry + LATE * 2).await;
    settle().await;
    assert_eq!(attempts(&b), 2);
    assert_eq!(
        holder(&mem).await,
        None,
        "no lease taken for an election that stopped"
    );
}

/// The batcher's side: what is due goes out in one call at its instant
/// (each answer says when it was sent); a withdrawn attempt never goes out,
/// and one that went out cannot be withdrawn.
#[tokio::test(start_paused = true)]
async fn registered_attempts_go_out_together_and_withdrawn_ones_never() {
    use crate::backend::{Acquire, AttemptBatcher, Backend};
    use crate::names::GroupKeys;

    let mem = MemoryBackend::new();
    let batcher = AttemptBatcher::new(Backend::Memory(mem.clone()), true, Duration::from_secs(1));
    let ttl = Duration::from_secs(3);
    let at = Instant::now() + Duration::from_millis(100);
    let register = |g: &str| {
        batcher
            .register(g, &GroupKeys::new("leader", g), "b", ttl, at)
            .unwrap()
    };
    let (mut x, withdrawn, mut y) = (register("x"), register("w"), register("y"));
    assert!(withdrawn.withdraw());
    let calls = mem.acquire_calls();
    sleep_until(at - Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(mem.acquire_calls(), calls, "nothing before its instant");
    let (answer, sent) = x.answer("x").await;
    assert!(matches!(answer, Ok(Acquire::Won { .. })), "{answer:?}");
    assert_eq!(sent, at);
    assert!(!x.withdraw(), "out already");
    assert!(matches!(y.answer("y").await.0, Ok(Acquire::Won { .. })));
    assert_eq!(mem.acquire_calls(), calls + 1, "one call for both");
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        mem.acquire_calls(),
        calls + 1,
        "the withdrawn one never went out"
    );
    drop(withdrawn);
    // Its lease is free for another instance.
    let keys = GroupKeys::new("leader", "w");
    let other = batcher.acquire("w", &keys, "c", ttl).await;
    assert!(matches!(other, Ok(Acquire::Won { .. })), "{other:?}");
}
