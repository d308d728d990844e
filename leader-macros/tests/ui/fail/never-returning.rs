use leader_runtime::leader_only;

#[leader_only]
fn serve() -> ! {
    loop {}
}

fn main() {}
