// A return type passed through `macro_rules!` (`$ret:ty`) arrives in an invisible group, and
// is read through it: `()` is still "returns nothing" (no `#[must_use]` on the `Option<()>`),
// `impl Trait` is still inferred from the body.
#![deny(warnings)]
use leader_runtime::leader_only;

macro_rules! job {
    ($name:ident, $ret:ty) => {
        #[leader_only(group = "jobs")]
        fn $name() -> $ret {}
    };
}

macro_rules! async_job {
    ($name:ident, $ret:ty, $body:expr) => {
        #[leader_only(group = "jobs")]
        async fn $name() -> $ret {
            $body
        }
    };
}

job!(tick, ());
async_job!(tock, (), ());
async_job!(numbers, impl Iterator<Item = u32>, 0..3);

async fn cron() {
    tock().await;
    let _ = numbers().await;
}

fn main() {
    tick();
    drop(cron());
}
