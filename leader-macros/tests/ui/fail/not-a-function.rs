use leader_runtime::leader_only;

#[leader_only(group = "cleanup")]
struct Cleanup {
    done: bool,
}

fn main() {}
