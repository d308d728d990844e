use leader_runtime::leader_only;

#[leader_only(group = "cleanup", group = "reaper")]
fn tick() {}

fn main() {}
