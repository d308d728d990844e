//! What `#[leader_only]` expansions use besides the gate itself: a sync fn
//! that returns a future (`impl Future`, or `#[async_trait]`'s
//! `Pin<Box<dyn Future>>`), gated for the future's whole life, and the
//! standard items an expansion names, so that it never writes `::core` or
//! `::std` (paths in the user's crate in edition 2015).

use std::future::Future;

use crate::gate::{gate_async, CallSite};

pub use std::boxed::Box;
pub use std::default::Default;
pub use std::option::Option;

/// Gate the future that `make` returns, as [`gate_async`] gates an async
/// body: admitted when first polled (the first call of a site waits for the
/// group's first round), `make` called in the admission's scope, and the
/// future run in it to its end, so `current_lease()` answers inside it and
/// a drain waits for it.
pub async fn gate_future<F, M>(
    site: &'static CallSite,
    cancel_on_loss: bool,
    make: M,
) -> Option<F::Output>
where
    M: FnOnce() -> F,
    F: Future,
{
    gate_async(site, cancel_on_loss, async move { make().await }).await
}
