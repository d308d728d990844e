// Free sync and async functions, with and without arguments and return types.
use leader_runtime::leader_only;

#[leader_only]
fn default_group() {}

#[leader_only(group = "cleanup")]
fn sync_value(n: u32) -> u32 {
    n * 2
}

#[leader_only(group = "cleanup")]
#[allow(clippy::unused_unit)]
fn explicit_unit() -> () {}

#[leader_only(group = "jobs:reaper.v2-eu_1")]
async fn async_value(n: u32) -> u32 {
    n * 2
}

#[leader_only(group = "x", cancel_on_loss)]
async fn cancellable() {}

#[leader_only(crate = "::leader_runtime", group = "all", cancel_on_loss)]
async fn all_arguments() -> &'static str {
    "done"
}

fn is_send<T: Send>(_: &T) {}

fn main() {
    // The signatures: `T` became `Option<T>`.
    let _: fn() -> Option<()> = default_group;
    let _: fn(u32) -> Option<u32> = sync_value;
    let _: fn() -> Option<()> = explicit_unit;
    let fut = async_value(1);
    is_send(&fut);
    let _: &dyn std::future::Future<Output = Option<u32>> = &fut;
    let _: &dyn std::future::Future<Output = Option<()>> = &cancellable();
    let _: &dyn std::future::Future<Output = Option<&str>> = &all_arguments();
}
