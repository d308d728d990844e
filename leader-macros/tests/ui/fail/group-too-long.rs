use leader_runtime::leader_only;

#[leader_only(
    group = "a-group-name-that-goes-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on-and-on"
)]
fn tick() {}

fn main() {}
