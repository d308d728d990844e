//! Partial data loss on the in-memory backend, with paused time: the lease
//! key lost while its record stays (eviction, `DEL`), an older state restored
//! (a snapshot, a promoted replica). A new leader's view must not begin
//! before every earlier holder's view has certainly ended.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::{sleep, Instant};

use crate::test_support::{instance, next_transition, settle, G, RENEW, TTL};
use crate::{Event, MemoryBackend, Runtime};

/// One instance's views of `G`, as its events tell them: `(start, end)`,
/// `end` being the earlier of its `Lost` and the last `valid_until` it
/// reported (a view ends by itself then, whatever the election does).
#[derive(Clone, Default)]
struct Views(Arc<Mutex<Vec<(Instant, Instant)>>>);

impl Views {
    fn watch(rt: &Runtime) -> Self {
        let views = Views::default();
        let out = views.clone();
        let mut rx = rt.subscribe();
        tokio::spawn(async move {
            while let Ok(event) = rx.recv().await {
                let now = Instant::now();
                let mut v = out.0.lock().unwrap();
                match event {
                    Event::Elected { valid_until, .. } => v.push((now, valid_until)),
                    Event::Renewed { valid_until, .. } => {
                        if let Some(last) = v.last_mut() {
                            last.1 = valid_until;
                        }
                    }
                    Event::Lost { .. } => {
                        if let Some(last) = v.last_mut() {
                            last.1 = last.1.min(now);
                        }
                    }
                    _ => {}
                }
            }
        });
        views
    }

    fn get(&self) -> Vec<(Instant, Instant)> {
        self.0.lock().unwrap().clone()
    }
}

/// No two views of different instances overlap.
fn assert_disjoint(all: &[(&str, &Views)]) {
    for (i, (a, va)) in all.iter().enumerate() {
        for (b, vb) in &all[i + 1..] {
            for &(s1, e1) in &va.get() {
                for &(s2, e2) in &vb.get() {
                    assert!(
                        e1 <= s2 || e2 <= s1,
                        "{a}'s view {s1:?}..{e1:?} overlaps {b}'s {s2:?}..{e2:?}"
                    );
                }
            }
        }
    }
}

/// Elect `a`, then run until just after one of its renewals; returns the
/// end of its view then.
async fn lead_and_renew(a: &Runtime) -> Instant {
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    sleep(RENEW + Duration::from_millis(1)).await;
    settle().await;
    a.status()
        .into_iter()
        .find(|s| s.group == G)
        .and_then(|s| s.valid_for)
        .map(|left| Instant::now() + left)
        .unwrap()
}

/// Instance `id` on `mem`, its views watched.
fn watched(mem: &MemoryBackend, id: &str) -> (Runtime, Views) {
    let rt = instance(mem, id);
    let views = Views::watch(&rt);
    (rt, views)
}

/// Instance `id` joining on `mem`: watched, its events subscribed, its
/// election started, and not leading at once.
async fn newcomer(mem: &MemoryBackend, id: &str) -> (Runtime, Views, broadcast::Receiver<Event>) {
    let (rt, views) = watched(mem, id);
    let events = rt.subscribe();
    assert_eq!(rt.run_if_leader(G, || async {}).await, None);
    (rt, views, events)
}

/// The next transition of `events` is an `Elected`.
async fn elected(events: &mut broadcast::Receiver<Event>) {
    let Event::Elected { .. } = next_transition(events).await else {
        panic!("expected Elected")
    };
}

/// The token of `op`'s acquire on `backend` (panics unless it won).
async fn won(backend: &crate::backend::Backend, op: &crate::backend::Op<'_>) -> u64 {
    match backend.acquire(op, TTL).await.unwrap() {
        crate::backend::Acquire::Won { token, .. } => token,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_key_delays_a_newcomer_until_the_last_view_ended() {
    let mem = MemoryBackend::new();
    let (a, va) = watched(&mem, "a");
    let a_view_end = lead_and_renew(&a).await;
    // Evicted (or DEL'd) while a leads; an instance starting right now (a
    // rolling deploy) takes the lease at once...
    mem.lose_lease("leader", G);
    let (c, vc, mut c_events) = newcomer(&mem, "c").await;
    assert_eq!(c.leader_id(G).await.unwrap().as_deref(), Some("c"));
    // ...but its view begins only once a's has certainly ended.
    elected(&mut c_events).await;
    assert!(
        Instant::now() >= a_view_end,
        "c leads {:?} before a's view ends",
        a_view_end - Instant::now()
    );
    assert!(c.is_leader(G) && !a.is_leader(G));
    assert_disjoint(&[("a", &va), ("c", &vc)]);
}

#[tokio::test(start_paused = true)]
async fn a_restored_snapshot_makes_the_next_view_wait_one_ttl() {
    let mem = MemoryBackend::new();
    let (a, va) = watched(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let snapshot = mem.snapshot();
    // a renews for longer than a ttl after the snapshot: the snapshot's lease
    // has expired, but a still leads on the server it renews on.
    sleep(TTL + RENEW / 2).await;
    settle().await;
    assert!(a.is_leader(G));
    mem.restore(&snapshot);
    let restored_at = Instant::now();
    let (_c, vc, mut c_events) = newcomer(&mem, "c").await;
    elected(&mut c_events).await;
    // The restored record vouches for nothing: one full ttl.
    assert!(Instant::now() >= restored_at + TTL);
    assert_disjoint(&[("a", &va), ("c", &vc)]);
}

#[tokio::test(start_paused = true)]
async fn a_release_during_a_safe_start_still_waits_for_the_holder_before() {
    let mem = MemoryBackend::new();
    let (a, va) = watched(&mem, "a");
    let a_view_end = lead_and_renew(&a).await;
    mem.lose_lease("leader", G);
    // c takes the lease while a's view may still run, and steps down before
    // its own view began: the release must not clear the wait for a's.
    let (c, vc, _) = newcomer(&mem, "c").await;
    let mut a_events = a.subscribe();
    c.step_down(G).await.unwrap();
    let (_d, vd, mut d_events) = newcomer(&mem, "d").await;
    // The next view, a's (it renews on c's release notice, finds the lease
    // gone and campaigns again) or d's, begins only after a's last one ended.
    loop {
        let event = tokio::select! {
            e = next_transition(&mut a_events) => e,
            e = next_transition(&mut d_events) => e,
        };
        if let Event::Elected { .. } = event {
            break;
        }
    }
    assert!(Instant::now() >= a_view_end);
    assert_disjoint(&[("a", &va), ("c", &vc), ("d", &vd)]);
}

#[tokio::test(start_paused = true)]
async fn a_clean_handover_waits_for_nothing() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    lead_and_renew(&a).await;
    assert_eq!(b.run_if_leader(G, || async {}).await, None);
    let mut b_events = b.subscribe();
    let stepped = Instant::now();
    a.step_down(G).await.unwrap();
    elected(&mut b_events).await;
    assert_eq!(
        Instant::now(),
        stepped,
        "the release notice hands over at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_renew_on_a_restored_record_fails_and_the_holder_starts_safe() {
    let mem = MemoryBackend::new();
    let (a, va) = watched(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut a_events = a.subscribe();
    // A copy taken while a leads, served by a new process right away: a's
    // key is in it, alive. A renew still in flight from before the copy was
    // taken could extend a's view past a later holder's start, so no renew
    // succeeds on a record the server cannot vouch for.
    let snapshot = mem.snapshot();
    mem.restore(&snapshot);
    let restored_at = Instant::now();
    let Event::Lost { .. } = next_transition(&mut a_events).await else {
        panic!("expected Lost")
    };
    assert!(Instant::now() - restored_at <= RENEW);
    // a re-claims its own key, with a one-ttl safe start.
    elected(&mut a_events).await;
    assert!(Instant::now() >= restored_at + TTL);
    assert_eq!(va.get().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_release_of_an_older_leadership_leaves_the_newer_one() {
    use crate::backend::{Backend, Op};
    use crate::names::GroupKeys;
    let mem = MemoryBackend::new();
    let backend = Backend::Memory(mem.clone());
    let keys = GroupKeys::new("leader", G);
    let op = Op {
        group: G,
        keys: &keys,
        id: "a",
    };
    let first = won(&backend, &op).await;
    // A re-claim (say, after the first leadership's renew timed out): a new
    // leadership of the same instance.
    let second = won(&backend, &op).await;
    assert!(second > first);
    // The first leadership's release, delayed on an old connection.
    assert!(!backend.release(&op, "ch", first).await.unwrap());
    assert_eq!(
        backend.holder(G, &keys).await.unwrap().as_deref(),
        Some("a")
    );
    assert!(backend.release(&op, "ch", second).await.unwrap());
    assert_eq!(backend.holder(G, &keys).await.unwrap(), None);
}

/// A renewal names the leadership it extends: once our own acquire, sent
/// earlier and run late, re-created a lost lease key under a newer token,
/// a renewal under the older token is refused and extends nothing.
#[tokio::test(start_paused = true)]
async fn a_renewal_of_an_older_leadership_extends_nothing() {
    use crate::backend::{Backend, Op, Renew};
    use crate::names::GroupKeys;
    let mem = MemoryBackend::new();
    let backend = Backend::Memory(mem.clone());
    let keys = GroupKeys::new("leader", G);
    let op = Op {
        group: G,
        keys: &keys,
        id: "a",
    };
    let first = won(&backend, &op).await;
    assert_eq!(
        backend.renew(&op, first, TTL).await.unwrap(),
        Renew::Renewed
    );
    // The key is evicted, and a's earlier acquire runs late: a new
    // leadership of a, which a's election never heard of.
    mem.lose_lease("leader", G);
    let second = won(&backend, &op).await;
    assert!(second > first);
    assert_eq!(backend.renew(&op, first, TTL).await.unwrap(), Renew::Other);
    assert_eq!(
        backend.renew(&op, second, TTL).await.unwrap(),
        Renew::Renewed
    );
}

/// A leader whose own late acquire re-claimed its lease under a newer token
/// (its fenced writes, cron claims and release would be refused for the rest
/// of the leadership) ends its view at its next renewal, as superseded, and
/// campaigns again.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_token_was_replaced_by_its_own_late_acquire_steps_back() {
    use crate::backend::{Backend, Op};
    use crate::names::GroupKeys;
    let mem = MemoryBackend::new();
    let (a, _va) = watched(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let mut a_events = a.subscribe();
    let backend = Backend::Memory(mem.clone());
    let keys = GroupKeys::new("leader", G);
    let op = Op {
        group: G,
        keys: &keys,
        id: "a",
    };
    let late = backend.acquire(&op, TTL).await.unwrap();
    assert!(
        matches!(late, crate::backend::Acquire::Won { .. }),
        "{late:?}"
    );
    let replaced_at = Instant::now();
    let lost = tokio::time::timeout(TTL * 2, next_transition(&mut a_events)).await;
    let Ok(Event::Lost { reason, .. }) = lost else {
        panic!("expected Lost, got {lost:?}")
    };
    assert_eq!(reason, crate::LostReason::Superseded);
    assert!(Instant::now() - replaced_at <= RENEW);
    assert!(!a.is_leader(G));
}

/// fence.lua's rule on memory: a record restored from an older snapshot is
/// not vouched for, so no fenced write applies on it — not one carrying the
/// restored mark, not one above it (both deposed by a later election).
#[tokio::test(start_paused = true)]
async fn no_fenced_write_applies_on_a_restored_record() {
    use crate::backend::fence::{Call, Outcome, Write};
    use crate::backend::{Backend, Op};
    use crate::names::GroupKeys;
    let mem = MemoryBackend::new();
    let backend = Backend::Memory(mem.clone());
    let keys = GroupKeys::new("leader", G);
    let op = |id| Op {
        group: G,
        keys: &keys,
        id,
    };
    let write = |token| Call {
        group: G,
        record: &keys.record,
        token,
        write: Write::Set {
            key: "leader:{jobs}:state",
            value: b"x",
        },
    };
    let first = won(&backend, &op("a")).await;
    let snapshot = mem.snapshot();
    assert!(backend.release(&op("a"), "ch", first).await.unwrap());
    let second = won(&backend, &op("b")).await;
    assert!(backend.release(&op("b"), "ch", second).await.unwrap());
    let third = won(&backend, &op("c")).await;
    assert!(matches!(
        backend.fenced(&write(third)).await.unwrap(),
        Outcome::Applied(_)
    ));
    mem.restore(&snapshot);
    for deposed in [first, second] {
        assert_eq!(
            backend.fenced(&write(deposed)).await.unwrap(),
            Outcome::Stale(None),
            "token {deposed}"
        );
    }
}
