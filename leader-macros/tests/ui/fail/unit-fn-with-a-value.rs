// A function without a return type whose body ends in a value (a missing
// `;`): rustc's own error, at the value, as without the attribute.
use leader_runtime::leader_only;

#[leader_only]
fn tick() {
    1u32
}

#[leader_only]
async fn tock() {
    2u32
}

fn main() {}
