// A gated future is not `Unpin`: the bound is refused where it is written, and the function is
// still gated without it, so its callers see the `Option` they expect.
use leader_runtime::leader_only;
use std::future::Future;
use std::pin::Pin;

#[leader_only(group = "jobs")]
fn ready() -> impl Future<Output = u32> + Unpin {
    std::future::ready(1)
}

#[leader_only(group = "jobs")]
fn boxed() -> Pin<Box<dyn Future<Output = u32> + Send + Unpin>> {
    Box::pin(std::future::ready(1))
}

async fn caller() {
    let _: Option<u32> = ready().await;
    let _: Option<u32> = boxed().await;
}

fn main() {
    drop(caller());
}
