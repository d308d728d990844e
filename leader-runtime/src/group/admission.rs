//! Admission of gated runs, and the scope a gated body runs in: what
//! [`current_lease`](crate::current_lease) answers.
//!
//! [`admit`] is the gate's hot path: it counts a run in and checks the
//! group's view, and the [`Admitted`] it returns counts the run out when
//! dropped (a drain waits for that).
//!
//! A gated body runs inside the scope of its admission: while it is polled,
//! called, or dropped. The gate's hot path admits through a call site's
//! cached group, a `&'static Group`: that admission fits in a `Copy`
//! thread-local, which the scope sets and restores in a few instructions (a
//! tokio task-local keeps a `RefCell<Option<T>>` with a destructor, several
//! times the cost, for a gate whose whole budget is a few nanoseconds). An admission
//! through a shared group handle (the first call of a site, another runtime
//! than the cached one, `Runtime::run_if_leader`) lives in a tokio
//! task-local; the thread-local then says to look there. Either way the
//! innermost scope decides, as nested gated calls expect.
//!
//! The admission is dropped (and the run stops counting as in flight, which
//! a drain waits for before it releases the lease) only after the body: a
//! body cancelled mid-run has run its destructors, inside its scope, before
//! the lease can go.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::group::lease::Lease;
use crate::group::Group;

/// Admit one gated run if this instance leads `group`, the view is valid now
/// and the group is not draining. The gate's hot path: on a follower one
/// atomic load; on a leader a count in and out on drop (a plain store each
/// to this thread's slot: see [`in_flight`](crate::group::in_flight)), a few loads
/// and one read of the monotonic clock (the kernel's coarse one, the precise
/// one near the view's end: see [`clock`]). No lock, no allocation, and with
/// a call site's `&'static Group` no reference count.
#[inline]
pub(crate) fn admit<G: Deref<Target = Group>>(group: G) -> Option<Admitted<G>> {
    if !group.view.is_open() {
        return None; // not leader: no clock read
    }
    // A drain under way refuses at once: a call refused here neither counts
    // in and out (the drain's sum) nor wakes the drain. Only a hint: the
    // check after counting in decides.
    if !group.runs.admitting_hint() {
        return None;
    }
    // Count first, then check: a drain that stopped admitting before our
    // check waits for us; one that stopped it after sees us.
    group.runs.enter();
    let mut admitted = Admitted { group, token: 0 };
    // Dropping `admitted` undoes the count.
    let group = &*admitted.group;
    if !group.runs.admitting() {
        return None;
    }
    if !group.view.holds() {
        return None;
    }
    // Stored before the view (and its fast deadline), so at least as new
    // as the view just read.
    admitted.token = group.view.token();
    Some(admitted)
}

/// A gated run in flight in `group` (a call site's `&'static Group` or an
/// `Arc<Group>`), admitted under the leadership with `token`. The body runs
/// in its scope (how `current_lease` finds its lease: see the module
/// docs), and dropping it lets a drain proceed.
pub(crate) struct Admitted<G: Deref<Target = Group>> {
    pub(crate) group: G,
    pub(crate) token: u64,
}

impl<G: Deref<Target = Group>> Drop for Admitted<G> {
    #[inline]
    fn drop(&mut self) {
        self.group.runs.leave();
    }
}

/// Run an async gated body under `admitted`: `None` when `cancel_on_loss`
/// and the leadership ended before the body finished. The body enters its
/// scope here, before anything is returned, so that the admission is never
/// held apart from it: dropped unpolled or not, the body goes first.
pub(crate) fn run_admitted<G: GroupRef, F: Future>(
    admitted: Admitted<G>,
    cancel_on_loss: bool,
    body: F,
) -> impl Future<Output = Option<F::Output>> {
    let lease = cancel_on_loss.then(|| admitted.group.lease(admitted.token));
    let body = G::scope(admitted, body);
    async move {
        let lease = match lease {
            None => return Some(body.await),
            Some(lease) => lease?,
        };
        tokio::select! {
            biased;
            out = body => Some(out),
            _ = lease.lost() => {
                tracing::warn!(group = lease.group(), token = lease.token(), "leadership ended mid-run; gated body cancelled");
                None
            }
        }
    }
}

/// Run an async gated body through a shared group handle: `None` when not
/// leader, or when `cancel_on_loss` and the leadership ended before the body
/// finished.
pub(crate) async fn run<F: Future>(
    group: &Arc<Group>,
    cancel_on_loss: bool,
    body: F,
) -> Option<F::Output> {
    run_admitted(admit(group.clone())?, cancel_on_loss, body).await
}

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
    /// The groups of the gated bodies around the current one on this thread
    /// (outermost first), by address: [`inside`] asks about each. Changed
    /// only when a scope is entered inside another (rare), so the common
    /// path pays one comparison.
    static ENCLOSING: RefCell<Vec<*const Group>> = const { RefCell::new(Vec::new()) };
}

tokio::task_local! {
    /// The group and token of a run admitted through a shared handle (the
    /// admission itself stays in its `Scoped`, which orders its drop).
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

/// Whether the running code is inside a gated body admitted through
/// `group` (this very group of this very runtime), directly or with gated
/// bodies of other groups nested in it: a step-down or shutdown called from
/// there cannot wait for the drain, which waits for that body.
pub(crate) fn inside(group: &Group) -> bool {
    let Some(innermost) = group_of(CURRENT.get()) else {
        return false;
    };
    std::ptr::eq(innermost, group)
        || ENCLOSING
            .try_with(|enclosing| enclosing.borrow().contains(&std::ptr::from_ref(group)))
            .unwrap_or(false)
}

/// The group of the gated run `current` (its address: compared, never read).
fn group_of(current: Current) -> Option<*const Group> {
    match current {
        Current::Outside => None,
        Current::Cached(group, _) => Some(std::ptr::from_ref(group)),
        Current::Shared => SHARED.try_with(|(group, _)| Arc::as_ptr(group)).ok(),
    }
}

/// `CURRENT` set for as long as this lives; the outer value comes back on
/// drop, also when the body panics. An outer gated run's group goes on
/// [`ENCLOSING`] meanwhile (its `Shared` task-local is still the outer
/// one's here: a body enters `CURRENT` before its own task-local scope).
struct Enter(Current);

impl Enter {
    #[inline]
    fn new(current: Current) -> Self {
        let outer = CURRENT.replace(current);
        if !matches!(outer, Current::Outside) {
            enclose(outer);
        }
        Self(outer)
    }
}

impl Drop for Enter {
    #[inline]
    fn drop(&mut self) {
        if !matches!(self.0, Current::Outside) {
            unclose();
        }
        CURRENT.set(self.0);
    }
}

/// A scope entered inside another: push the outer run's group. (The
/// thread-local is gone only while the thread exits; then `inside` answers
/// for the innermost run alone.)
#[cold]
fn enclose(outer: Current) {
    let group = group_of(outer).unwrap_or(std::ptr::null());
    let _ = ENCLOSING.try_with(|enclosing| enclosing.borrow_mut().push(group));
}

/// The inner scope's end: pop what [`enclose`] pushed.
#[cold]
fn unclose() {
    let _ = ENCLOSING.try_with(|enclosing| enclosing.borrow_mut().pop());
}

/// A reference to a group that an admission can hold (a call site's
/// `&'static Group` or a shared `Arc<Group>`), and how a body enters its scope.
pub(crate) trait GroupRef: Deref<Target = Group> + Sized {
    /// What `current_lease` finds in the scope of `admitted`.
    fn current(admitted: &Admitted<Self>) -> Current;

    /// The async body `body`, in the scope of `admitted`.
    fn scope<F: Future>(admitted: Admitted<Self>, body: F) -> impl Future<Output = F::Output>;

    /// Call the sync body `body` in the scope of `admitted`.
    fn scope_sync<T>(admitted: Admitted<Self>, body: impl FnOnce() -> T) -> T;
}

/// A call site's cached group: the scope is the thread-local alone.
impl GroupRef for &'static Group {
    #[inline]
    fn current(admitted: &Admitted<Self>) -> Current {
        Current::Cached(admitted.group, admitted.token)
    }

    #[inline]
    fn scope<F: Future>(admitted: Admitted<Self>, body: F) -> impl Future<Output = F::Output> {
        Scoped {
            body,
            admitted,
            finished: false,
            exit: None,
        }
    }

    #[inline]
    fn scope_sync<T>(admitted: Admitted<Self>, body: impl FnOnce() -> T) -> T {
        // Dropped before `admitted`, a parameter.
        let _enter = Enter::new(Self::current(&admitted));
        body()
    }
}

/// A shared handle: the thread-local points to the task-local, which holds
/// a clone of the handle (the slow path: one reference count more).
impl GroupRef for Arc<Group> {
    fn current(_: &Admitted<Self>) -> Current {
        Current::Shared
    }

    fn scope<F: Future>(admitted: Admitted<Self>, body: F) -> impl Future<Output = F::Output> {
        let shared = (admitted.group.clone(), admitted.token);
        Scoped {
            body: SHARED.scope(shared, body),
            admitted,
            finished: false,
            exit: None,
        }
    }

    fn scope_sync<T>(admitted: Admitted<Self>, body: impl FnOnce() -> T) -> T {
        // Dropped before `admitted`, a parameter.
        let _enter = Enter::new(Self::current(&admitted));
        SHARED.sync_scope((admitted.group.clone(), admitted.token), body)
    }
}

pin_project! {
    /// An async gated body in the scope of its admission: polled with the
    /// scope entered, and if dropped before it finished, dropped inside it;
    /// `admitted` goes after the body (fields drop in this order).
    #[project = ScopedProj]
    struct Scoped<F, G: GroupRef> {
        #[pin]
        body: F,
        admitted: Admitted<G>,
        // The body returned. What a finished future still holds (nothing,
        // for an async block) is dropped outside the scope, still before
        // the admission.
        finished: bool,
        // Set by `drop` when it enters the scope; leaves it last.
        exit: Option<Enter>,
    }

    impl<F, G: GroupRef> PinnedDrop for Scoped<F, G> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // A finished body (an async block) has nothing left to drop: no
            // scope to enter (the common case).
            if !*this.finished && mem::needs_drop::<F>() {
                *this.exit = Some(Enter::new(G::current(this.admitted)));
            }
        }
    }
}

impl<F: Future, G: GroupRef> Future for Scoped<F, G> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _enter = Enter::new(G::current(this.admitted));
        let out = this.body.poll(cx);
        *this.finished = out.is_ready();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{Arc, Mutex};

    use futures_util::FutureExt;

    use crate::__private::{gate_async, gate_sync, CallSite};
    use crate::group::Group;
    use crate::test_support::instance;
    use crate::{current_lease, MemoryBackend};

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
        let rt = instance(&MemoryBackend::new(), "a");
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

    /// `inside` (what a step-down or shutdown from a body asks) sees every
    /// gated body around the running code, not only the innermost, on
    /// every path: cached sites and shared handles, async and sync, nested
    /// every way; and none once they returned.
    #[tokio::test(start_paused = true)]
    async fn inside_sees_every_enclosing_body_on_every_path() {
        static A: CallSite = CallSite::new("a");
        static B: CallSite = CallSite::new("b");
        static B_SYNC: CallSite = CallSite::new("b");
        let rt = instance(&MemoryBackend::new(), "a");
        let rt2 = rt.clone();
        rt.scope(async move {
            // The first calls look the groups up and fill the caches.
            assert!(gate_async(&A, false, async {}).await.is_some());
            assert!(gate_async(&B, false, async {}).await.is_some());
            assert!(gate_sync(&B_SYNC, || ()).is_some());
            let (a, b) = (rt2.registered("a").unwrap(), rt2.registered("b").unwrap());
            let inside = || (super::inside(&a), super::inside(&b));
            let (neither, outer, both) = ((false, false), (true, false), (true, true));

            let seen = gate_async(&A, false, async {
                let mut seen = vec![inside()];
                let cached = gate_async(&B, false, async {
                    tokio::task::yield_now().await;
                    inside()
                });
                seen.push(cached.await.unwrap());
                seen.push(gate_sync(&B_SYNC, inside).unwrap());
                seen.push(rt2.run_if_leader("b", || async { inside() }).await.unwrap());
                seen.push(inside());
                seen
            })
            .await;
            assert_eq!(seen, Some(vec![outer, both, both, both, outer]));

            // A shared handle outside, a cached site and a shared one inside.
            let seen = rt2
                .run_if_leader("a", || async {
                    let cached = gate_async(&B, false, async { inside() }).await.unwrap();
                    let shared = rt2.run_if_leader("b", || async { inside() }).await.unwrap();
                    [cached, shared, inside()]
                })
                .await;
            assert_eq!(seen, Some([both, both, outer]));
            assert_eq!(inside(), neither);
        })
        .await;
        rt.shutdown().await;
    }

    /// An async body dropped mid-run (a timeout, a `select!`) runs its
    /// destructors inside its scope, still counted in flight (a drain waits
    /// for them before it releases the lease), on every path; only then does
    /// the admission go.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_body_is_dropped_in_its_scope_before_its_admission() {
        static SITE: CallSite = CallSite::new("d");
        static OUTER: CallSite = CallSite::new("o");

        /// In flight, and the current lease's group, as a dropped local saw them.
        type Seen = Arc<Mutex<Vec<(usize, Option<String>)>>>;
        /// A body's local that records what it sees when it is dropped.
        struct Witness(Arc<Group>, Seen);
        impl Drop for Witness {
            fn drop(&mut self) {
                let seen = (self.0.runs.in_flight(), current_group());
                self.1.lock().unwrap().push(seen);
            }
        }

        let rt = instance(&MemoryBackend::new(), "a");
        assert!(rt.run_if_leader("d", || async {}).await.is_some());
        let group = rt.group("d").unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cancelled = || {
            let witness = Witness(group.clone(), seen.clone());
            async move {
                let _witness = witness;
                std::future::pending::<()>().await
            }
        };
        rt.scope(async {
            assert!(gate_async(&OUTER, false, async {}).await.is_some());
            // The first call goes through a shared handle, the second is cached;
            // then both again inside another group's body.
            for _ in 0..2 {
                assert!(gate_async(&SITE, false, cancelled())
                    .now_or_never()
                    .is_none());
            }
            // `cancel_on_loss`, polled once; then dropped unpolled, both ways.
            assert!(gate_async(&SITE, true, cancelled())
                .now_or_never()
                .is_none());
            drop(gate_async(&SITE, true, cancelled()));
            drop(gate_async(&SITE, false, cancelled()));
            let inside = gate_async(&OUTER, false, async {
                assert!(gate_async(&SITE, false, cancelled())
                    .now_or_never()
                    .is_none());
                let shared = rt.run_if_leader("d", cancelled);
                assert!(shared.now_or_never().is_none());
                current_group()
            });
            assert_eq!(inside.await, Some(Some("o".into())));
        })
        .await;
        let d = (1, Some("d".to_owned()));
        assert_eq!(*seen.lock().unwrap(), vec![d; 7]);
        assert_eq!(group.runs.in_flight(), 0);
        rt.shutdown().await;
    }

    /// A body that panics leaves no admission behind: it is not current any
    /// more, and it no longer counts as in flight. Sync bodies unwind through
    /// the caller; async ones through their task.
    #[tokio::test(start_paused = true)]
    async fn a_panicking_body_leaves_no_admission_behind() {
        static SITE: CallSite = CallSite::new("p");
        static SITE_ASYNC: CallSite = CallSite::new("p");
        let rt = instance(&MemoryBackend::new(), "a");
        assert!(rt.run_if_leader("p", || async {}).await.is_some());
        let group = rt.group("p").unwrap();
        // The first call of each site through a shared handle, the second cached.
        for call in ["shared", "cached"] {
            let panicked = rt
                .scope(async {
                    catch_unwind(AssertUnwindSafe(|| {
                        gate_sync(&SITE, || {
                            assert_eq!(current_group().as_deref(), Some("p"));
                            assert_eq!(group.runs.in_flight(), 1);
                            panic!("the body panics");
                        })
                    }))
                })
                .await;
            assert!(panicked.is_err(), "sync, {call}");
            assert_eq!(current_group(), None, "sync, {call}");
            assert_eq!(group.runs.in_flight(), 0, "sync, {call}");

            let (rt2, group2) = (rt.clone(), group.clone());
            let task = tokio::spawn(async move {
                let body = async move {
                    assert_eq!(current_group().as_deref(), Some("p"));
                    assert_eq!(group2.runs.in_flight(), 1);
                    panic!("the body panics");
                };
                // The site is called inside the scope, so it can be cached.
                rt2.scope(async move { gate_async(&SITE_ASYNC, false, body).await })
                    .await
            });
            assert!(task.await.unwrap_err().is_panic(), "async, {call}");
            assert_eq!(current_group(), None, "async, {call}");
            assert_eq!(group.runs.in_flight(), 0, "async, {call}");
        }
        rt.shutdown().await;
    }
}
