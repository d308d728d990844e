use leader_runtime::leader_only;

#[leader_only(group = "cleanup", cancel_on_loss)]
fn tick() {}

fn main() {}
