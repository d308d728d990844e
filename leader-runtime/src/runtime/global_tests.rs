use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;

use super::{scoped, scoped_id};
use crate::test_support::instance;
use crate::{MemoryBackend, Runtime};

/// The runtime ids the gate's scope lookup and `scoped()` (the free
/// functions') see.
type Seen = (Option<u64>, Option<u64>);

/// What is seen here, now.
fn seen() -> Seen {
    (scoped_id(), scoped().map(|rt| rt.id()))
}

/// What both see inside `rt`'s scope.
fn ids(rt: &Runtime) -> Seen {
    (Some(rt.id()), Some(rt.id()))
}

/// The gate's cheap lookup of the scoped runtime agrees with `scoped()`
/// at every step: the innermost scope decides, the outer one comes back when
/// it returns (also across suspensions), nothing is seen outside or in a
/// task spawned inside.
#[tokio::test(start_paused = true)]
async fn the_gate_sees_the_innermost_scope_and_the_outer_one_after_it() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (ida, idb) = (ids(&a), ids(&b));
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
    assert_eq!(steps, [ida, idb, idb, ida, (None, None), ida]);
    assert_eq!(seen(), (None, None));
    a.shutdown().await;
    b.shutdown().await;
}

/// Records what the scope lookup saw when it was dropped.
struct Witness(Arc<Mutex<Vec<Seen>>>);

impl Drop for Witness {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(seen());
    }
}

/// A future in `rt`'s scope that never finishes and holds `witness`.
fn pending_in(rt: &Runtime, witness: Witness) -> impl Future<Output = ()> + Send {
    rt.scope(async move {
        let _witness = witness;
        std::future::pending::<()>().await
    })
}

/// A scoped future dropped before it finished is dropped inside its scope
/// (its destructors' gated calls go where the body's went), also inside
/// another scope, which comes
/// back after it; a panic inside leaves no scope behind.
#[tokio::test(start_paused = true)]
async fn a_scoped_future_is_dropped_in_its_scope_and_a_panic_leaves_none() {
    let rt = instance(&MemoryBackend::new(), "a");
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let witness = Witness(dropped.clone());
    let mut pending = Box::pin(pending_in(&rt, witness));
    assert!(pending.as_mut().now_or_never().is_none());
    assert_eq!(seen(), (None, None));
    drop(pending);
    assert_eq!(*dropped.lock().unwrap(), [ids(&rt)]);

    let other = instance(&MemoryBackend::new(), "b");
    let (witness, rt2) = (Witness(dropped.clone()), rt.clone());
    let after = other
        .scope(async move {
            let mut inner = Box::pin(pending_in(&rt2, witness));
            assert!(inner.as_mut().now_or_never().is_none());
            drop(inner);
            seen()
        })
        .await;
    assert_eq!(after, ids(&other));
    assert_eq!(dropped.lock().unwrap()[1], ids(&rt));

    let panicked = catch_unwind(AssertUnwindSafe(|| {
        rt.scope(async { panic!("the scoped future panics") })
            .now_or_never()
    }));
    assert!(panicked.is_err());
    assert_eq!(seen(), (None, None));
    rt.shutdown().await;
    other.shutdown().await;
}

/// An unfinished scoped future dropped while its thread's thread-locals are
/// torn down (it lives in one of them) is still dropped in its scope, for
/// the gate and the free functions alike. (With tokio's task-local, which
/// cannot be set there, the free functions saw no scope: a corner found by
/// a review, gone since the scope is a plain thread-local.)
#[tokio::test(start_paused = true)]
async fn a_scope_dropped_in_thread_local_teardown_is_seen_by_both_lookups() {
    use std::cell::RefCell;
    use std::pin::Pin;

    type Held = RefCell<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>;
    thread_local! {
        static HOLD: Held = const { RefCell::new(None) };
    }
    let rt = instance(&MemoryBackend::new(), "a");
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let witness = Witness(dropped.clone());
    let rt2 = rt.clone();
    std::thread::spawn(move || {
        // Registered before tokio's thread-locals, so torn down after them.
        HOLD.with(|_| ());
        let mut fut: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(pending_in(&rt2, witness));
        assert!(fut.as_mut().now_or_never().is_none());
        HOLD.with(|held| *held.borrow_mut() = Some(fut));
    })
    .join()
    .unwrap();
    assert_eq!(*dropped.lock().unwrap(), [ids(&rt)]);
    rt.shutdown().await;
}

/// The registry the free functions look the scoped runtime up in holds no
/// runtime alive, and forgets one when its last handle goes (processes that
/// start and stop runtimes, as tests do, do not grow it).
#[tokio::test(start_paused = true)]
async fn a_dropped_runtime_leaves_the_registry() {
    let rt = instance(&MemoryBackend::new(), "a");
    let (id, weak) = (rt.id(), rt.downgrade());
    let registered = || super::LIVE.read().unwrap().contains_key(&id);
    assert!(registered());
    drop(rt);
    assert!(
        weak.upgrade().is_none(),
        "the registry kept the runtime alive"
    );
    assert!(!registered());
}

/// A future that is ready at once and keeps `witness` until it is dropped.
struct ReadyHolding {
    _witness: Witness,
}

impl Future for ReadyHolding {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        std::task::Poll::Ready(())
    }
}

/// A scoped future that finished is dropped at once, in its scope, not
/// whenever the caller drops the scope's future (what a finished gated
/// future still holds, its admission, must not outlive it: a drain waits
/// for it). Found by a review: the first version without the task-local
/// kept it until then.
#[tokio::test(start_paused = true)]
async fn a_finished_scoped_future_is_dropped_at_once_in_its_scope() {
    let rt = instance(&MemoryBackend::new(), "a");
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let mut scoped = Box::pin(rt.scope(ReadyHolding {
        _witness: Witness(dropped.clone()),
    }));
    assert_eq!(scoped.as_mut().now_or_never(), Some(()));
    assert_eq!(*dropped.lock().unwrap(), [ids(&rt)]);
    // Polled again (a broken contract): pending for good, no panic.
    assert_eq!(scoped.as_mut().now_or_never(), None);
    drop(scoped);
    assert_eq!(dropped.lock().unwrap().len(), 1);
    rt.shutdown().await;
}
