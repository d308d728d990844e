use leader_runtime::leader_only;

#[leader_only]
const fn tick() -> u32 {
    1
}

fn main() {}
