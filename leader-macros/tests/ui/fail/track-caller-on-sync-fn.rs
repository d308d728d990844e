// `#[track_caller]` would not reach the body, which runs in a closure: a
// panic there would name the body's line, silently. Rejected.
use leader_runtime::leader_only;

#[leader_only]
#[track_caller]
fn check(n: u32) -> u32 {
    assert!(n > 0);
    n
}

fn main() {
    let _: Option<u32> = check(1);
}
