// A mistake in the arguments only: the function is still gated (with a
// placeholder group), so its correct callers report nothing more.
use leader_runtime::leader_only;

#[leader_only(grop = "cleanup")]
fn tick() -> u32 {
    1
}

#[leader_only(group = "")]
async fn tock() -> u32 {
    2
}

#[leader_only(group = "reaper", cancel_on_loss)]
fn reap() -> u32 {
    3
}

async fn cron() -> Option<u32> {
    let a: Option<u32> = tick();
    let b: Option<u32> = tock().await;
    let c: Option<u32> = reap();
    Some(a? + b? + c?)
}

fn main() {
    drop(cron());
}
