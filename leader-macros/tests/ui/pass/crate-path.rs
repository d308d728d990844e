// `crate = "..."` names the runtime for a crate that renamed the dependency
// or re-exports it. The stand-in runtime below never runs the body and
// returns `None`, so the asserts prove the expansion called it and not
// `::leader_runtime`.
use leader_runtime::leader_only;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

mod stand_in {
    pub mod __private {
        use std::future::Future;

        pub use std::option::Option;

        pub struct CallSite(pub &'static str);

        impl CallSite {
            pub const fn new(group: &'static str) -> Self {
                Self(group)
            }
        }

        pub async fn gate_async<T, F>(
            site: &'static CallSite,
            cancel_on_loss: bool,
            body: F,
        ) -> Option<T>
        where
            F: Future<Output = T>,
        {
            assert_eq!((site.0, cancel_on_loss), ("stand-in", true));
            drop(body);
            None
        }

        pub fn gate_sync<T, F>(site: &'static CallSite, body: F) -> Option<T>
        where
            F: FnOnce() -> T,
        {
            assert_eq!(site.0, "stand-in");
            drop(body);
            None
        }
    }
}

#[leader_only(group = "stand-in", crate = "crate::stand_in")]
fn sync_tick() -> u32 {
    unreachable!("the stand-in runtime does not run the body")
}

#[leader_only(group = "stand-in", cancel_on_loss, crate = "crate::stand_in")]
async fn async_tick() -> u32 {
    unreachable!("the stand-in runtime does not run the body")
}

mod renamed {
    // As if the dependency were renamed: `rt = { package = "leader-runtime" }`.
    use ::leader_runtime as rt;

    #[rt::leader_only(crate = "rt")]
    pub(crate) fn tick() -> u32 {
        1
    }
}

fn main() {
    assert_eq!(sync_tick(), None);
    let mut fut = pin!(async_tick());
    let ready = fut.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(matches!(ready, Poll::Ready(None)));
    let _: fn() -> Option<u32> = renamed::tick;
}
