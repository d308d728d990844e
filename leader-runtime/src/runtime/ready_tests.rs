//! `Runtime::ready` on the in-memory backend, with paused time.

use std::time::Duration;

use tokio::time::Instant;

use crate::test_support::{instance, G};
use crate::{Error, MemoryBackend};

#[tokio::test(start_paused = true)]
async fn ready_once_the_backend_answered_and_each_group_had_a_round() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let start = Instant::now();
    a.ready_for([G, "other"], Duration::from_secs(5))
        .await
        .unwrap();
    b.ready_for([G], Duration::from_secs(5)).await.unwrap();
    assert!(start.elapsed() < Duration::from_millis(100));
    // Ready means "knows who leads", not "leads".
    let seen_by_b = &b.status()[0];
    assert!(!seen_by_b.is_leader);
    assert_eq!(seen_by_b.leader_id.as_deref(), Some("a"));
    assert_eq!(a.status().len(), 2);
    // `ready` waits for the groups used so far: both, here.
    a.ready(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_backend_is_not_ready_within_the_timeout() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    mem.set_available(false);
    let start = Instant::now();
    let err = a.ready_for([G], Duration::from_secs(2)).await.unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2100),
        "{took:?}"
    );
    assert!(!err.is_config(), "{err:?}");
    match &err {
        Error::NotReady { after, source } => {
            assert_eq!(*after, Duration::from_secs(2));
            assert!(source.to_string().contains("unavailable"), "{source}");
        }
        other => panic!("expected NotReady, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with("not ready within 2s: "),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn ready_as_soon_as_the_backend_comes_back() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    mem.set_available(false);
    let back = mem.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        back.set_available(true);
    });
    let start = Instant::now();
    a.ready_for([G], Duration::from_secs(30)).await.unwrap();
    let took = start.elapsed();
    // Within one retry pace (the `instance`'s 500 ms) of the backend's return.
    assert!(
        took >= Duration::from_secs(3) && took <= Duration::from_millis(3600),
        "{took:?}"
    );
    assert!(a.status()[0].leader_id.is_some());
}

#[tokio::test(start_paused = true)]
async fn an_invalid_group_or_a_stopped_runtime_fail_at_once() {
    let a = instance(&MemoryBackend::new(), "a");
    let err = a
        .ready_for(["no spaces"], Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidGroup { .. }) && err.is_config(),
        "{err:?}"
    );
    a.shutdown().await;
    let start = Instant::now();
    let err = a.ready(Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(err, Error::ShutDown), "{err:?}");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// `Duration::MAX` means "wait for good", not a panic (before: an overflow
/// adding it to the clock).
#[tokio::test(start_paused = true)]
async fn a_timeout_of_duration_max_waits_as_long_as_needed() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    a.ready_for([G], Duration::MAX).await.unwrap();
    a.ready(Duration::MAX).await.unwrap();
}
