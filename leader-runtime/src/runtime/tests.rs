//! `run_if_leader` and `try_run_if_leader`: what runs where, and names
//! they cannot use.

use crate::test_support::{instance, paused_current_thread, Captured, G};
use crate::{Error, MemoryBackend};
use std::sync::atomic::{AtomicBool, Ordering};

#[tokio::test(start_paused = true)]
async fn try_run_if_leader_tells_an_unusable_name_from_not_leading() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert_eq!(
        a.try_run_if_leader(G, || async { 1 }).await.unwrap(),
        Some(1)
    );
    assert_eq!(b.try_run_if_leader(G, || async { 2 }).await.unwrap(), None);
    let err = a
        .try_run_if_leader("no spaces allowed", || async { 3 })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidGroup { group, .. } if group == "no spaces allowed"),
        "{err:?}"
    );
    // The unchecked form fails closed, as before.
    assert_eq!(
        a.run_if_leader("no spaces allowed", || async { 3 }).await,
        None
    );
    a.shutdown().await;
    let err = a.try_run_if_leader(G, || async { 4 }).await.unwrap_err();
    assert!(matches!(err, Error::ShutDown), "{err:?}");
    assert_eq!(a.run_if_leader(G, || async { 4 }).await, None);
}

/// The closure is the body: a follower never calls it (its synchronous
/// part could start work: `|| tokio::spawn(job())`), and on the leader it
/// runs admitted, where `current_lease` answers.
#[tokio::test(start_paused = true)]
async fn run_if_leader_calls_the_closure_only_when_leading() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let called = AtomicBool::new(false);
    let ran = b
        .run_if_leader(G, || {
            called.store(true, Ordering::SeqCst);
            async {}
        })
        .await;
    assert_eq!(ran, None);
    assert!(
        !called.load(Ordering::SeqCst),
        "a follower called the closure"
    );
    let token = a
        .try_run_if_leader(G, || {
            let token = crate::current_lease().map(|l| l.token());
            async move { token }
        })
        .await
        .unwrap();
    assert!(matches!(token, Some(Some(_))), "{token:?}");
}

#[test]
fn an_invalid_name_is_logged_as_an_error_once_per_name() {
    let captured = Captured::default();
    let subscriber = captured.debug_subscriber();
    // Names no other test uses: the set of reported names is process-wide.
    let (one, two) = ("logged once #1", "logged once #2");
    tracing::subscriber::with_default(subscriber, || {
        let tokio = paused_current_thread();
        tokio.block_on(async {
            let a = instance(&MemoryBackend::new(), "a");
            for _ in 0..3 {
                assert_eq!(a.run_if_leader(one, || async {}).await, None);
                assert_eq!(a.run_if_leader(two, || async {}).await, None);
            }
            a.shutdown().await;
            assert_eq!(a.run_if_leader(G, || async {}).await, None);
        });
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let count = |level: &str, name: &str| {
        text.lines()
            .filter(|l| l.contains(level) && l.contains("run_if_leader") && l.contains(name))
            .count()
    };
    for name in [one, two] {
        assert_eq!(count("ERROR", name), 1, "{text}");
        assert_eq!(count("DEBUG", name), 2, "{text}");
    }
    // After shutdown: not an error.
    assert_eq!(count("ERROR", "shut down"), 0, "{text}");
    assert_eq!(count("DEBUG", "shut down"), 1, "{text}");
}
