// A group passed through `macro_rules!` (`$g:literal`, `$g:expr`) arrives in
// an invisible group, and is read through it.
use leader_runtime::leader_only;

macro_rules! literal_job {
    ($name:ident, $group:literal) => {
        #[leader_only(group = $group)]
        fn $name() -> u32 {
            1
        }
    };
}

macro_rules! expr_job {
    ($name:ident, $group:expr) => {
        #[leader_only(group = $group, default = 0)]
        async fn $name() -> u32 {
            2
        }
    };
}

literal_job!(tick, "cleanup");
expr_job!(tock, "reaper");

fn main() {
    let _: Option<u32> = tick();
    drop(tock());
}
