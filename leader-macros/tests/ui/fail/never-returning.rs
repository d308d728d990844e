use leader_runtime::leader_only;

#[leader_only]
fn serve() -> ! {
    loop {}
}

// The same through `macro_rules!`, where `$ret:ty` arrives in an invisible group: the same
// refusal, not rustc's "the `!` type is experimental" on the `Option<!>` it would become.
macro_rules! job {
    ($name:ident, $ret:ty) => {
        #[leader_only(group = "jobs")]
        fn $name() -> $ret {
            loop {}
        }
    };
}

job!(tick, !);

fn main() {}
