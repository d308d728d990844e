//! The maintenance-drain recipe of DEPLOYING.md, step by step, on the
//! in-memory backend with paused time: take one instance out of every
//! election (its gated runs in flight finish first, then each lease goes to
//! another instance), see that it holds nothing and takes nothing, and put
//! back the groups it took out (a group out of the race before the drain
//! stays out).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leader_runtime::{Config, Event, MemoryBackend, Runtime};
use tokio::sync::{broadcast, oneshot};
use tokio::time::{sleep, timeout, Instant};

const TTL: Duration = Duration::from_secs(3);
const GROUPS: [&str; 3] = ["billing", "cleanup", "reports"];
/// Out of the race on `a` before the drain (an operator's earlier choice).
const OUT_BEFORE: &str = "audit";

fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .memory(mem.clone())
            .ttl(TTL)
            .renew_interval(Duration::from_secs(1))
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// Until `rt`'s events say it was elected in every one of `groups` (bounded:
/// the paused clock runs to the deadline if an election never comes).
async fn elected_in_all(events: &mut broadcast::Receiver<Event>, groups: &[&str]) {
    let mut missing: BTreeSet<&str> = groups.iter().copied().collect();
    timeout(TTL, async {
        while !missing.is_empty() {
            if let Event::Elected { group, .. } = events.recv().await.unwrap() {
                missing.remove(group.as_str());
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not elected within one ttl in {missing:?}"));
}

#[tokio::test(start_paused = true)]
async fn the_maintenance_drain_recipe_takes_an_instance_out_of_every_election_and_back() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    for g in GROUPS {
        assert!(
            a.run_if_leader(g, || async {}).await.is_some(),
            "a leads {g}"
        );
        assert!(
            b.run_if_leader(g, || async {}).await.is_none(),
            "b follows {g}"
        );
    }
    a.set_eligible(OUT_BEFORE, false).await.unwrap();
    assert!(b.run_if_leader(OUT_BEFORE, || async {}).await.is_some());
    let mut a_events = a.subscribe();
    let mut b_events = b.subscribe();
    // A gated run of a's is in flight when the drain starts.
    let finished = Arc::new(AtomicBool::new(false));
    let (started, is_started) = oneshot::channel();
    let run = tokio::spawn({
        let (a, finished) = (a.clone(), finished.clone());
        async move {
            a.run_if_leader("reports", || async move {
                started.send(()).unwrap();
                sleep(Duration::from_secs(2)).await;
                finished.store(true, Ordering::SeqCst);
            })
            .await
        }
    });
    is_started.await.unwrap();

    // Step 1: out of every election this instance takes part in, keeping
    // the list of the groups taken out.
    let start = Instant::now();
    let drained: Vec<String> = a
        .status()
        .into_iter()
        .filter(|g| g.eligible)
        .map(|g| g.group)
        .collect();
    assert_eq!(drained.len(), GROUPS.len(), "{drained:?}");
    assert!(!drained.iter().any(|g| g == OUT_BEFORE));
    for group in &drained {
        a.set_eligible(group, false).await.unwrap();
        if group == "reports" {
            // Drain before release: the run in flight finished first.
            assert!(finished.load(Ordering::SeqCst));
            assert_eq!(start.elapsed(), Duration::from_secs(2));
        }
    }
    assert_eq!(run.await.unwrap(), Some(()));

    // Step 2: it holds nothing, and is out of every race (status() is local) …
    let status = a.status();
    assert_eq!(status.len(), GROUPS.len() + 1);
    assert!(
        status
            .iter()
            .all(|g| !g.is_leader && !g.eligible && g.token.is_none()),
        "{status:?}"
    );
    // … and the backend agrees: another instance took each lease at once.
    let handed_over = Instant::now();
    elected_in_all(&mut b_events, &GROUPS).await;
    assert!(
        handed_over.elapsed() < TTL / 2,
        "{:?}",
        handed_over.elapsed()
    );
    for g in GROUPS {
        assert_eq!(a.leader_id(g).await.unwrap().as_deref(), Some("b"), "{g}");
        assert!(b.is_leader(g));
    }
    // It takes nothing either, even with nobody else left.
    b.shutdown().await;
    sleep(TTL * 3).await;
    for g in GROUPS.iter().chain([&OUT_BEFORE]) {
        assert_eq!(a.leader_id(g).await.unwrap(), None, "{g}");
        assert!(!a.is_leader(g));
    }

    // Step 3: back in the race, the groups taken out in step 1 only.
    for group in &drained {
        a.set_eligible(group, true).await.unwrap();
    }
    elected_in_all(&mut a_events, &GROUPS).await;
    for g in GROUPS {
        assert!(a.is_leader(g), "{g}");
    }
    // The group out of the race before the drain stays out.
    sleep(TTL * 3).await;
    let status = a.status();
    assert!(
        status.iter().all(|g| g.eligible == (g.group != OUT_BEFORE)),
        "{status:?}"
    );
    assert!(!a.is_leader(OUT_BEFORE));
    assert_eq!(a.leader_id(OUT_BEFORE).await.unwrap(), None);
    a.shutdown().await;
}
