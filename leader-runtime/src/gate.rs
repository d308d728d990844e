//! Gated calls: what `#[leader_only]` expands to calls into.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::global;
use crate::group::Group;

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
pub async fn gate_async<T, F>(site: &'static CallSite, cancel_on_loss: bool, body: F) -> Option<T>
where
    F: Future<Output = T>,
{
    if let Some(group) = site.cached() {
        return group.run(cancel_on_loss, body).await;
    }
    let group = site.lookup().await?;
    group.run(cancel_on_loss, body).await
}

/// Run a sync body if this instance leads the call site's group. The first
/// call naming a group starts its election and cannot wait for it (it is not
/// async), so it returns `None`.
pub fn gate_sync<T, F>(site: &'static CallSite, body: F) -> Option<T>
where
    F: FnOnce() -> T,
{
    if let Some(group) = site.cached() {
        return group.run_sync(body);
    }
    site.lookup_sync()?.run_sync(body)
}
