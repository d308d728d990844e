use leader_runtime::leader_only;

trait Job {
    #[leader_only]
    fn run(&self) -> u32;
}

fn main() {}
