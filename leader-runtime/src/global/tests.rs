use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;

use super::{scoped, scoped_id};
use crate::test_support::instance;
use crate::MemoryBackend;

/// The runtime ids the scope lookup (the gate's) and the task-local
/// (`scoped()`, the free functions') see.
type Seen = (Option<u64>, Option<u64>);

/// What is seen here, now.
fn seen() -> Seen {
    (scoped_id(), scoped().map(|rt| rt.id()))
}

/// The gate's cheap lookup of the scoped runtime agrees with the task-local
/// at every step: the innermost scope decides, the outer one comes back when
/// it returns (also across suspensions), nothing is seen outside or in a
/// task spawned inside.
#[tokio::test(start_paused = true)]
async fn the_gate_sees_the_innermost_scope_and_the_outer_one_after_it() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (ida, idb) = (Some(a.id()), Some(b.id()));
    assert_eq!(seen(), (None, None));
    let b2 = b.clone();
    let steps = a
        .scope(async move {
            let mut steps = vec![seen()];
            let inner = b2.scope(async {
                let before = seen();
                tokio::task::yield_now().await;
                [before, seen()]
            });
            steps.extend(inner.await);
            steps.push(seen());
            steps.push(tokio::spawn(async { seen() }).await.unwrap());
            tokio::task::yield_now().await;
            steps.push(seen());
            steps
        })
        .await;
    assert_eq!(
        steps,
        [
            (ida, ida),
            (idb, idb),
            (idb, idb),
            (ida, ida),
            (None, None),
            (ida, ida)
        ]
    );
    assert_eq!(seen(), (None, None));
    a.shutdown().await;
    b.shutdown().await;
}

/// A scoped future dropped before it finished is dropped inside its scope
/// (as the task-local does it), and a panic inside leaves no scope behind.
#[tokio::test(start_paused = true)]
async fn a_scoped_future_is_dropped_in_its_scope_and_a_panic_leaves_none() {
    /// Records what the scope lookup saw when it was dropped.
    struct Witness(Arc<Mutex<Vec<Seen>>>);
    impl Drop for Witness {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(seen());
        }
    }
    let rt = instance(&MemoryBackend::new(), "a");
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let witness = Witness(dropped.clone());
    let pending = rt.scope(async move {
        let _witness = witness;
        std::future::pending::<()>().await
    });
    let mut pending = Box::pin(pending);
    assert!(pending.as_mut().now_or_never().is_none());
    assert_eq!(seen(), (None, None));
    drop(pending);
    assert_eq!(*dropped.lock().unwrap(), [(Some(rt.id()), Some(rt.id()))]);

    let panicked = catch_unwind(AssertUnwindSafe(|| {
        rt.scope(async { panic!("the scoped future panics") })
            .now_or_never()
    }));
    assert!(panicked.is_err());
    assert_eq!(seen(), (None, None));
    rt.shutdown().await;
}
