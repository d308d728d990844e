//! Which gated run the running code belongs to: what
//! [`current_lease`](crate::current_lease) answers.
//!
//! A gated body runs inside the scope of its admission. The gate's hot path
//! admits through a call site's cached group, a `&'static Group`: that
//! admission fits in a `Copy` thread-local, which each poll of the body sets
//! and restores in a few instructions (a tokio task-local keeps a
//! `RefCell<Option<T>>` with a destructor, several times the cost, and the
//! gate's whole budget is 25 ns). An admission through a shared group handle
//! (the first call of a site, another runtime than the cached one,
//! `Runtime::run_if_leader`) keeps its `Arc<Group>` in a tokio task-local;
//! the thread-local then says to look there. Either way the innermost scope
//! decides, as nested gated calls expect.

use std::cell::Cell;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::group::{Admitted, Group};
use crate::lease::Lease;

/// The gated run on this thread, as far as `current_lease` needs it.
#[derive(Clone, Copy)]
pub(crate) enum Current {
    /// None.
    Outside,
    /// Admitted through a call site's cached group, under the leadership
    /// with this token.
    Cached(&'static Group, u64),
    /// Admitted through a shared handle: see [`SHARED`].
    Shared,
}

thread_local! {
    static CURRENT: Cell<Current> = const { Cell::new(Current::Outside) };
}

tokio::task_local! {
    /// The group and token of a run admitted through a shared handle.
    static SHARED: (Arc<Group>, u64);
}

/// The lease of the gated body running here, if any.
pub(crate) fn current_lease() -> Option<Lease> {
    match CURRENT.get() {
        Current::Outside => None,
        Current::Cached(group, token) => group.lease(token),
        Current::Shared => SHARED
            .try_with(|(group, token)| group.lease(*token))
            .ok()
            .flatten(),
    }
}

/// `CURRENT` set for as long as this lives; the outer value comes back on
/// drop, also when the body panics.
struct Enter(Current);

impl Enter {
    #[inline]
    fn new(current: Current) -> Self {
        Self(CURRENT.replace(current))
    }
}

impl Drop for Enter {
    #[inline]
    fn drop(&mut self) {
        CURRENT.set(self.0);
    }
}

/// A group handle an admission can hold, and how a body enters its scope.
pub(crate) trait Handle: Deref<Target = Group> + Sized {
    /// What `current_lease` finds inside the scope of `admitted`.
    fn current(admitted: &Admitted<Self>) -> Current;

    /// The async body `body`, in the scope of `admitted`.
    fn scope<F: Future>(admitted: Admitted<Self>, body: F) -> impl Future<Output = F::Output>;

    /// Call the sync body `body` in the scope of `admitted`.
    fn scope_sync<T>(admitted: Admitted<Self>, body: impl FnOnce() -> T) -> T;
}

/// A call site's cached group: the scope is the thread-local alone.
impl Handle for &'static Group {
    #[inline]
    fn current(admitted: &Admitted<Self>) -> Current {
        Current::Cached(admitted.group, admitted.token)
    }

    #[inline]
    fn scope<F: Future>(admitted: Admitted<Self>, body: F) -> impl Future<Output = F::Output> {
        Scoped { admitted, body }
    }

    #[inline]
    fn scope_sync<T>(admitted: Admitted<Self>, body: impl FnOnce() -> T) -> T {
        let out = {
            let _enter = Enter::new(Self::current(&admitted));
            body()
        };
        drop(admitted);
        out
    }
}

/// A shared handle: the thread-local points to the task-local, which holds
/// the handle.
impl Handle for Arc<Group> {
    fn current(_: &Admitted<Self>) -> Current {
        Current::Shared
    }

    fn scope<F: Future>(admitted: Admitted<Self>, body: F) -> impl Future<Output = F::Output> {
        let shared = (admitted.group.clone(), admitted.token);
        Scoped {
            admitted,
            body: SHARED.scope(shared, body),
        }
    }

    fn scope_sync<T>(admitted: Admitted<Self>, body: impl FnOnce() -> T) -> T {
        let out = {
            let _enter = Enter::new(Self::current(&admitted));
            SHARED.sync_scope((admitted.group.clone(), admitted.token), body)
        };
        drop(admitted);
        out
    }
}

pin_project! {
    /// An async gated body in the scope of its admission, which it holds
    /// (and so keeps counted in flight) until it is dropped.
    struct Scoped<G: Handle, F> {
        admitted: Admitted<G>,
        #[pin]
        body: F,
    }
}

impl<G: Handle, F: Future> Future for Scoped<G, F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _enter = Enter::new(G::current(this.admitted));
        this.body.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::time::Duration;

    use crate::__private::{gate_async, gate_sync, CallSite};
    use crate::{current_lease, Config, MemoryBackend, Runtime};

    fn runtime() -> Runtime {
        Runtime::new(
            Config::builder()
                .memory(MemoryBackend::new())
                .ttl(Duration::from_secs(30))
                .renew_interval(Duration::from_secs(10))
                .instance_id("a")
                .build()
                .unwrap(),
        )
        .unwrap()
    }

    /// The group of the lease `current_lease` finds here.
    fn current_group() -> Option<String> {
        current_lease().map(|lease| lease.group().to_owned())
    }

    /// Cached call sites (a `&'static Group` in a thread-local) and shared
    /// handles (a task-local), nested every way: the innermost body's lease
    /// is current, the outer one's comes back when it returns, and nothing
    /// leaks out to other tasks or past the outermost body.
    #[tokio::test(start_paused = true)]
    async fn the_innermost_gated_body_is_current_on_every_path() {
        static A: CallSite = CallSite::new("a");
        static B: CallSite = CallSite::new("b");
        static B_SYNC: CallSite = CallSite::new("b");
        let rt = runtime();
        let rt2 = rt.clone();
        rt.scope(async move {
            // The first calls look the groups up (a shared handle) and fill the caches.
            let first = gate_async(&A, false, async { current_group() }).await;
            assert_eq!(first, Some(Some("a".into())));
            assert!(gate_async(&B, false, async {}).await.is_some());
            assert!(gate_sync(&B_SYNC, || ()).is_some());

            let outer = gate_async(&A, false, async {
                let mut seen = vec![current_group()];
                let shared = rt2.run_if_leader("b", || async { current_group() }).await;
                seen.extend([shared.flatten(), current_group()]);
                let cached = gate_async(&B, false, async {
                    tokio::task::yield_now().await;
                    current_group()
                });
                seen.extend([cached.await.flatten(), current_group()]);
                seen.extend([gate_sync(&B_SYNC, current_group).flatten(), current_group()]);
                // Another task polled while this body waits sees no gated body.
                let other = tokio::spawn(async { current_group() });
                tokio::task::yield_now().await;
                seen.extend([other.await.unwrap(), current_group()]);
                seen
            })
            .await;
            let a = || Some("a".to_owned());
            let b = || Some("b".to_owned());
            assert_eq!(
                outer,
                Some(vec![a(), b(), a(), b(), a(), b(), a(), None, a()])
            );

            // A shared handle outside, a cached site inside.
            let outer = rt2
                .run_if_leader("a", || async {
                    let inner = gate_async(&B, false, async { current_group() }).await;
                    [inner.flatten(), current_group()]
                })
                .await;
            assert_eq!(outer, Some([b(), a()]));
            assert_eq!(current_group(), None);
        })
        .await;
        rt.shutdown().await;
    }

    /// A sync body that panics leaves no admission behind: it is not
    /// current any more, and it no longer counts as in flight.
    #[tokio::test(start_paused = true)]
    async fn a_panicking_sync_body_leaves_no_admission_behind() {
        static SITE: CallSite = CallSite::new("p");
        let rt = runtime();
        assert!(rt.run_if_leader("p", || async {}).await.is_some());
        let group = rt.group("p").unwrap();
        rt.scope(async {
            // The first call through a shared handle, the second cached.
            for call in ["shared", "cached"] {
                let panicked = catch_unwind(AssertUnwindSafe(|| {
                    gate_sync(&SITE, || {
                        assert_eq!(current_group().as_deref(), Some("p"));
                        assert_eq!(group.in_flight(), 1);
                        panic!("the body panics");
                    })
                }));
                assert!(panicked.is_err(), "{call}");
                assert_eq!(current_group(), None, "{call}");
                assert_eq!(group.in_flight(), 0, "{call}");
            }
        })
        .await;
        rt.shutdown().await;
    }
}
