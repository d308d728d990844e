use leader_runtime::leader_only;

#[leader_only(crate = "leader runtime")]
fn tick() {}

fn main() {}
