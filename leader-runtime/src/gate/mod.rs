//! Gated calls: what `#[leader_only]` expands to calls into.

pub(crate) mod future;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::group::admission::{admit, run_admitted, GroupRef};
use crate::group::Group;
use crate::runtime::global;

/// One per gated call site (a `static`): the group and its cached handle.
pub struct CallSite {
    group: &'static str,
    /// The group handle of the first runtime that used this site. Other
    /// runtimes (several in one process) fall back to a registry lookup.
    cache: OnceLock<(u64, Arc<Group>)>,
}

impl CallSite {
    /// A call site gating on `group` (validated by the macro).
    pub const fn new(group: &'static str) -> Self {
        Self {
            group,
            cache: OnceLock::new(),
        }
    }

    /// The cached group when the current runtime is the cached one.
    #[inline]
    fn cached(&'static self) -> Option<&'static Arc<Group>> {
        let (runtime_id, group) = self.cache.get()?;
        (global::current_id()? == *runtime_id).then_some(group)
    }

    /// Look the group up in the current runtime (registering it and waiting
    /// for its first round the first time), and cache it if nothing is yet.
    async fn lookup(&'static self) -> Option<Arc<Group>> {
        let runtime = global::current()?;
        match runtime.ready_group(self.group).await {
            Ok(group) => {
                let _ = self.cache.set((runtime.id(), group.clone()));
                Some(group)
            }
            Err(e) => {
                tracing::error!(error = %e, group = self.group, "gated call not run");
                None
            }
        }
    }

    /// The slow path of [`gate_async`]: look the group up, then admit.
    async fn lookup_and_run<F: Future>(
        &'static self,
        cancel_on_loss: bool,
        body: F,
    ) -> Option<F::Output> {
        run_admitted(admit(self.lookup().await?)?, cancel_on_loss, body).await
    }

    fn lookup_sync(&'static self) -> Option<Arc<Group>> {
        let runtime = global::current()?;
        match runtime.group(self.group) {
            Ok(group) => {
                let _ = self.cache.set((runtime.id(), group.clone()));
                Some(group)
            }
            Err(e) => {
                tracing::error!(error = %e, group = self.group, "gated call not run");
                None
            }
        }
    }
}

/// Run an async body if this instance leads the call site's group.
///
/// The admission is decided when this is called (the expansion awaits it at
/// once). On the cached path the returned future is the body in its
/// admission's scope, nothing more; the first call of a site (or a call from
/// another runtime than the cached one) and `cancel_on_loss` bodies run in a
/// boxed future, so that their larger state does not weigh on the common path.
// Always inlined into the gated function: out of line, the returned future
// goes through memory and is dropped by a separate call, a large share of the
// gate's budget (the gate bench, BENCHMARKS.md).
#[inline(always)]
pub fn gate_async<T, F>(
    site: &'static CallSite,
    cancel_on_loss: bool,
    body: F,
) -> impl Future<Output = Option<T>>
where
    F: Future<Output = T>,
{
    let Some(group) = site.cached() else {
        return Gated::Lookup {
            body: Box::pin(site.lookup_and_run(cancel_on_loss, body)),
        };
    };
    match admit(&**group) {
        // A forgotten group: look it up again (it may be registered anew).
        None if group.control.is_forgotten() => Gated::Lookup {
            body: Box::pin(site.lookup_and_run(cancel_on_loss, body)),
        },
        None => Gated::NotLeader,
        Some(admitted) if !cancel_on_loss => Gated::Run {
            body: GroupRef::scope(admitted, body),
        },
        Some(admitted) => Gated::CancelOnLoss {
            body: Box::pin(run_admitted(admitted, true, body)),
        },
    }
}

pin_project! {
    /// What [`gate_async`] returns: one flat future, so that a poll on the
    /// common path is one match and the body's own poll.
    #[project = GatedProj]
    enum Gated<R, C, L> {
        /// Admitted on the cached path: the body in its scope.
        Run { #[pin] body: R },
        /// Not admitted.
        NotLeader,
        /// Admitted, and cancelled if the leadership ends first.
        CancelOnLoss { body: Pin<Box<C>> },
        /// The first call of the site, or from another runtime.
        Lookup { body: Pin<Box<L>> },
    }
}

impl<T, R, C, L> Future for Gated<R, C, L>
where
    R: Future<Output = T>,
    C: Future<Output = Option<T>>,
    L: Future<Output = Option<T>>,
{
    type Output = Option<T>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match self.project() {
            GatedProj::Run { body } => body.poll(cx).map(Some),
            GatedProj::NotLeader => Poll::Ready(None),
            GatedProj::CancelOnLoss { body } => body.as_mut().poll(cx),
            GatedProj::Lookup { body } => body.as_mut().poll(cx),
        }
    }
}

/// Run a sync body if this instance leads the call site's group. The first
/// call naming a group starts its election and cannot wait for it (it is not
/// async), so it returns `None`.
pub fn gate_sync<T, F>(site: &'static CallSite, body: F) -> Option<T>
where
    F: FnOnce() -> T,
{
    match site.cached() {
        Some(group) if !group.control.is_forgotten() => {
            Some(GroupRef::scope_sync(admit(&**group)?, body))
        }
        _ => Some(GroupRef::scope_sync(admit(site.lookup_sync()?)?, body)),
    }
}
