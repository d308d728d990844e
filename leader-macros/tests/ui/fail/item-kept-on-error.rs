// A function that can't be gated (here a `const fn`) is emitted as written,
// so its callers report nothing more than the one error.
use leader_runtime::leader_only;

#[leader_only(group = "cleanup")]
const fn tick() -> u32 {
    1
}

fn main() {
    let n: u32 = tick();
    drop(n);
}
