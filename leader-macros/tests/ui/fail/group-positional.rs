use leader_runtime::leader_only;

#[leader_only("cleanup")]
fn tick() {}

fn main() {}
