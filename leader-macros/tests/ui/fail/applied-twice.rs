use leader_runtime::leader_only;

#[leader_only(group = "a")]
#[leader_only(group = "b")]
fn tick() {}

fn main() {}
