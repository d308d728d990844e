use leader_runtime::leader_only;

#[leader_only(group = "reports", default(0))]
fn count() -> u32 {
    1
}

fn main() {}
