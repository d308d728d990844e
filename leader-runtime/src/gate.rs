//! Gated calls: what `#[leader_only]` expands to calls into.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use futures_util::future::{ready, Either, FutureExt};

use crate::global;
use crate::group::{run_admitted, run_sync_admitted, scope, Group, GroupRef};

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
    fn cached(&'static self) -> Option<&'static Group> {
        let (runtime_id, group) = self.cache.get()?;
        (global::current_id()? == *runtime_id).then_some(&**group)
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
        let admitted = GroupRef::Shared(self.lookup().await?).admit()?;
        run_admitted(admitted, cancel_on_loss, body).await
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
/// task-local scope, nothing more; the first call of a site (or a call from
/// another runtime than the cached one) and `cancel_on_loss` bodies run in a
/// boxed future, so that their larger state does not weigh on the common path.
pub fn gate_async<T, F>(
    site: &'static CallSite,
    cancel_on_loss: bool,
    body: F,
) -> impl Future<Output = Option<T>>
where
    F: Future<Output = T>,
{
    match site.cached().map(|group| GroupRef::Static(group).admit()) {
        Some(Some(admitted)) if !cancel_on_loss => {
            Either::Left(Either::Left(scope(admitted, body).map(Some)))
        }
        Some(None) => Either::Left(Either::Right(ready(None))),
        Some(Some(admitted)) => {
            Either::Right(Either::Left(Box::pin(run_admitted(admitted, true, body))))
        }
        None => Either::Right(Either::Right(Box::pin(
            site.lookup_and_run(cancel_on_loss, body),
        ))),
    }
}

/// Run a sync body if this instance leads the call site's group. The first
/// call naming a group starts its election and cannot wait for it (it is not
/// async), so it returns `None`.
pub fn gate_sync<T, F>(site: &'static CallSite, body: F) -> Option<T>
where
    F: FnOnce() -> T,
{
    let admitted = match site.cached() {
        Some(group) => GroupRef::Static(group).admit()?,
        None => GroupRef::Shared(site.lookup_sync()?).admit()?,
    };
    Some(run_sync_admitted(admitted, body))
}
