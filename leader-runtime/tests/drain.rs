//! The maintenance-drain recipe of DEPLOYING.md, step by step, on the
//! in-memory backend with paused time: take one instance out of every
//! election (its gated runs in flight finish first, then each lease goes to
//! another instance), see that it holds nothing and takes nothing, and put
//! it back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leader_runtime::{Config, MemoryBackend, Runtime};
use tokio::time::{sleep, Instant};

const TTL: Duration = Duration::from_secs(3);
const GROUPS: [&str; 3] = ["billing", "cleanup", "reports"];

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
    // A gated run of a's is in flight when the drain starts.
    let finished = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn({
        let (a, finished) = (a.clone(), finished.clone());
        async move {
            a.run_if_leader("reports", || async move {
                sleep(Duration::from_secs(2)).await;
                finished.store(true, Ordering::SeqCst);
            })
            .await
        }
    });
    tokio::task::yield_now().await;

    // Step 1: out of every election this instance takes part in.
    let start = Instant::now();
    for group in a.status() {
        a.set_eligible(&group.group, false).await.unwrap();
        if group.group == "reports" {
            // Drain before release: the run in flight finished first.
            assert!(finished.load(Ordering::SeqCst));
            assert_eq!(start.elapsed(), Duration::from_secs(2));
        }
    }
    assert_eq!(run.await.unwrap(), Some(()));

    // Step 2: it holds nothing, and is out of every race (status() is local) …
    let status = a.status();
    assert_eq!(status.len(), GROUPS.len());
    assert!(
        status
            .iter()
            .all(|g| !g.is_leader && !g.eligible && g.token.is_none()),
        "{status:?}"
    );
    // … and the backend agrees: another instance took each lease at once.
    sleep(Duration::from_millis(1)).await;
    for g in GROUPS {
        assert_eq!(a.leader_id(g).await.unwrap().as_deref(), Some("b"), "{g}");
        assert!(b.is_leader(g));
    }
    // It takes nothing either, even with nobody else left.
    b.shutdown().await;
    sleep(TTL * 3).await;
    for g in GROUPS {
        assert_eq!(a.leader_id(g).await.unwrap(), None, "{g}");
        assert!(!a.is_leader(g));
    }

    // Step 3: back in the race.
    for group in a.status() {
        a.set_eligible(&group.group, true).await.unwrap();
    }
    sleep(Duration::from_millis(1)).await;
    for g in GROUPS {
        assert!(a.is_leader(g), "{g}");
    }
    assert!(a.status().iter().all(|g| g.eligible));
    a.shutdown().await;
}
