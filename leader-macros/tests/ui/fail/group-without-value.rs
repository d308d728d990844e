use leader_runtime::leader_only;

#[leader_only(group)]
fn tick() {}

fn main() {}
