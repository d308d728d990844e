// A gated call's `Option` carries what the body returned, an error maybe: it
// is `#[must_use]` like the `Result` it wraps, so dropping it is a warning.
#![deny(unused_must_use)]
use leader_runtime::leader_only;
use std::io;

#[leader_only(group = "cleanup")]
async fn purge() -> Result<u64, io::Error> {
    Ok(1)
}

#[leader_only(group = "cleanup")]
fn count() -> usize {
    1
}

// The user's own `#[must_use]` is kept, message and all.
#[leader_only(group = "cleanup")]
#[must_use = "check the rotated keys"]
fn rotate() -> usize {
    1
}

// Nothing to use: no warning.
#[leader_only(group = "cleanup")]
fn tick() {}

async fn cron() {
    purge().await;
    count();
    rotate();
    tick();
}

fn main() {
    drop(cron());
}
