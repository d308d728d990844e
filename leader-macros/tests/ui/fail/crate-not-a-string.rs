use leader_runtime::leader_only;

#[leader_only(crate = leader_runtime)]
fn tick() {}

fn main() {}
