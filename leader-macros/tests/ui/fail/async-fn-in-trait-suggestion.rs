// rustc's suggestions about the body land on the body's own braces: here
// `async_fn_in_trait`'s rewrite of a gated default method.
#![deny(async_fn_in_trait)]
use leader_runtime::leader_only;

pub trait Jobs {
    #[leader_only(group = "jobs")]
    async fn purge(&self) -> u32 {
        1
    }
}

fn main() {}
