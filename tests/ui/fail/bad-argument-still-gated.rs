// On a mistake the function is still emitted as written, so its callers
// report nothing more than the one error.
use leader_runtime::leader_only;

#[leader_only(grop = "cleanup")]
fn tick() -> u32 {
    1
}

#[leader_only(group = "")]
async fn tock() {}

fn main() {
    let n: u32 = tick();
    drop((n, tock()));
}
