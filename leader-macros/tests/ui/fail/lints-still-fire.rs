// The expansion adds no `#[allow]` to the function: the user's lints fire
// in the gated body as they do anywhere else.
#![deny(unused_variables, unused_mut)]
use leader_runtime::leader_only;

#[leader_only]
fn tick(unused: u32) -> u32 {
    let mut n = 1;
    n
}

#[leader_only]
async fn tock(unused: u32) -> u32 {
    let mut n = 1;
    n
}

fn main() {}
