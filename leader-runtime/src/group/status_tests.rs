//! `status()` with paused time: what is live, what is cached, and errors.

use std::time::Duration;

use tokio::time::sleep;

use crate::test_support::{instance, MARGIN, TTL};
use crate::MemoryBackend;

#[tokio::test(start_paused = true)]
async fn leader_and_follower_views() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.status().is_empty(), "no group used yet");
    let lease = a
        .run_if_leader("g", || async { crate::current_lease().unwrap() })
        .await
        .unwrap();
    b.run_if_leader("g", || async {}).await;

    let s = &a.status()[0];
    assert_eq!(s.group, "g");
    assert!(s.is_leader && s.eligible && !s.failing);
    assert_eq!(s.leader_id.as_deref(), Some("a"));
    assert_eq!(s.token, Some(lease.token()));
    assert_eq!(s.valid_for, Some(TTL - MARGIN));
    assert_eq!(s.last_error, None);
    sleep(Duration::from_millis(300)).await;
    assert_eq!(
        a.status()[0].valid_for,
        Some(TTL - MARGIN - Duration::from_millis(300)),
        "live: counts down between renewals"
    );

    let s = &b.status()[0];
    assert!(!s.is_leader);
    assert_eq!(
        s.leader_id.as_deref(),
        Some("a"),
        "from b's last acquire reply"
    );
    assert_eq!((s.token, s.valid_for), (None, None));
}

#[tokio::test(start_paused = true)]
async fn sorted_by_group() {
    let a = instance(&MemoryBackend::new(), "a");
    for g in ["zeta", "alpha", "mid"] {
        a.run_if_leader(g, || async {}).await;
    }
    let groups: Vec<_> = a.status().into_iter().map(|s| s.group).collect();
    assert_eq!(groups, ["alpha", "mid", "zeta"]);
}

#[tokio::test(start_paused = true)]
async fn backend_errors_show_until_recovery_and_stay_as_last_error() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    a.run_if_leader("g", || async {}).await;
    mem.set_available(false);
    sleep(Duration::from_millis(1500)).await;
    let s = &a.status()[0];
    assert!(s.is_leader, "the view still holds");
    assert!(s.failing);
    let err = s.last_error.as_deref().unwrap();
    assert!(err.contains("unavailable"), "{err}");
    // The view ends; nobody is known to lead.
    sleep(TTL).await;
    let s = &a.status()[0];
    assert!(!s.is_leader && s.failing);
    assert_eq!((s.leader_id.as_deref(), s.token), (None, None));
    // Recovery: failing clears, the last error stays for the record.
    mem.set_available(true);
    sleep(Duration::from_secs(1)).await;
    let s = &a.status()[0];
    assert!(s.is_leader && !s.failing);
    assert!(s.last_error.is_some());
}
