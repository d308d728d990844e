use leader_runtime::leader_only;

#[leader_only(group = "cleanup", timeout = 5)]
fn tick() {}

fn main() {}
