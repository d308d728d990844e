//! leader runtime (stub)
pub use leader_macros::leader_only;

#[doc(hidden)]
/// Not public API: the contract between `#[leader_only]` expansions and the runtime.
pub mod __private {
    use std::future::Future;

    /// One per gated call site (a `static`): the group and a cached handle.
    pub struct CallSite {
        group: &'static str,
    }

    impl CallSite {
        /// A call site gating on `group` (already validated by the macro).
        pub const fn new(group: &'static str) -> Self {
            Self { group }
        }
    }

    /// Run `body` when this instance leads the call site's group.
    pub async fn gate_async<T, F>(site: &'static CallSite, cancel_on_loss: bool, body: F) -> Option<T>
    where
        F: Future<Output = T>,
    {
        let _ = (site.group, cancel_on_loss);
        Some(body.await)
    }

    /// Run `body` when this instance leads the call site's group.
    pub fn gate_sync<T, F>(site: &'static CallSite, body: F) -> Option<T>
    where
        F: FnOnce() -> T,
    {
        let _ = site.group;
        Some(body())
    }
}
