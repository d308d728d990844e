use leader_runtime::leader_only;

#[leader_only(group = "nightly cleanup")]
fn tick() {}

fn main() {}
