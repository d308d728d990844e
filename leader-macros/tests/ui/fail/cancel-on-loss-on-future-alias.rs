// A future behind a type alias is not recognised as one (the expansion can't see its
// `Output`): with `cancel_on_loss`, the error says so, at the alias, rather than that a sync
// body can't be stopped.
use leader_runtime::leader_only;
use std::future::Future;
use std::pin::Pin;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[leader_only(group = "jobs", cancel_on_loss)]
fn job() -> BoxFuture<'static, u32> {
    Box::pin(async { 1 })
}

fn main() {}
