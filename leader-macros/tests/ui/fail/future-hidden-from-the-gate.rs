// A sync function whose future the attribute can't see (an alias, a `Box` without `Pin`,
// `impl IntoFuture`) is refused, with or without
// `cancel_on_loss`: gated as a sync function, only the future's construction would be, not its
// run (the body would run on every instance).
use leader_runtime::leader_only;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[leader_only(group = "jobs")]
fn aliased() -> BoxFuture<'static, u32> {
    Box::pin(async { 1 })
}

#[leader_only(group = "jobs")]
fn boxed() -> Box<dyn Future<Output = u32> + Unpin> {
    Box::new(std::future::ready(1))
}

#[leader_only(group = "jobs")]
fn into_future() -> impl IntoFuture<Output = u32> {
    std::future::ready(1)
}

fn main() {
    let _ = aliased();
    let _ = boxed();
    let _ = into_future();
}
