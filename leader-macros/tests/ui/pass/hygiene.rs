// The expansion names everything by absolute path: local items called
// `core`, `std`, `Option`, `Some`, `None`, `Future` or `leader_runtime`, and
// modules without the prelude, don't change what it means.
#![allow(dead_code, non_camel_case_types)]

mod core {}

mod shadowed {
    #[allow(unused_imports)] // unused exactly when the expansion is right
    use std as leader_runtime; // not the runtime
    mod core {}
    mod std {}
    struct Option;
    struct Some;
    struct None;
    trait Future {}
    struct CallSite;
    fn gate_sync() {}
    fn gate_async() {}

    #[::leader_runtime::leader_only(group = "hygiene")]
    fn tick() -> u32 {
        1
    }

    #[::leader_runtime::leader_only(group = "hygiene", cancel_on_loss)]
    async fn tock() -> u32 {
        1
    }

    // An explicit absolute `crate` path is not confused by the local name either.
    #[::leader_runtime::leader_only(crate = "::leader_runtime")]
    fn explicit() -> u32 {
        1
    }
}

#[no_implicit_prelude]
mod no_prelude {
    #[::leader_runtime::leader_only]
    fn tick(n: u32) -> u32 {
        n
    }

    #[::leader_runtime::leader_only]
    async fn tock(s: &'static str) -> &'static str {
        s
    }
}

fn main() {}
