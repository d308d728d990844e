// The call site the expansion declares is out of the user's namespace: a
// parameter, a `let` or an item of any name in the body means what it says.
#![allow(non_upper_case_globals, non_snake_case)]
use leader_runtime::leader_only;

const __LEADER_SITE: u32 = 7;

#[leader_only]
fn reads_the_const() -> u32 {
    __LEADER_SITE + 1
}

mod params {
    use leader_runtime::leader_only;

    #[leader_only]
    pub fn param(__LEADER_SITE: u32) -> u32 {
        __LEADER_SITE * 2
    }

    #[leader_only]
    pub async fn local() -> u32 {
        let __LEADER_SITE = 3;
        __LEADER_SITE + 1
    }
}

fn main() {
    let _: Option<u32> = reads_the_const();
    let _: Option<u32> = params::param(1);
    drop(params::local());
}
