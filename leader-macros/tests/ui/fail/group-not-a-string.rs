use leader_runtime::leader_only;

#[leader_only(group = cleanup)]
fn tick() {}

fn main() {}
