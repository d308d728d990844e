use leader_runtime::leader_only;

#[leader_only]
extern "C" fn tick() -> u32 {
    1
}

fn main() {}
