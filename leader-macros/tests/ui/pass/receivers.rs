// `self` by `Box`, `Arc` and `Pin`, on sync and async methods.
use leader_runtime::leader_only;
use std::pin::Pin;
use std::sync::Arc;

pub struct Job {
    runs: u32,
}

impl Job {
    #[leader_only(group = "jobs")]
    fn boxed(self: Box<Self>) -> u32 {
        self.runs
    }

    #[leader_only(group = "jobs")]
    async fn boxed_async(self: Box<Self>) -> u32 {
        self.runs
    }

    #[leader_only(group = "jobs")]
    fn shared(self: Arc<Self>) -> u32 {
        self.runs
    }

    #[leader_only(group = "jobs", cancel_on_loss)]
    async fn shared_async(self: Arc<Self>) -> u32 {
        self.runs
    }

    #[leader_only(group = "jobs")]
    fn pinned(self: Pin<&mut Self>) -> u32 {
        self.get_mut().runs += 1;
        1
    }

    #[leader_only(group = "jobs", default)]
    async fn pinned_async(mut self: Pin<&mut Self>) -> u32 {
        self.runs += 1;
        self.runs
    }
}

fn main() {
    let _ = || -> Option<u32> { Box::new(Job { runs: 0 }).boxed() };
    let _ = || -> Option<u32> { Arc::new(Job { runs: 0 }).shared() };
    let _ = || -> Option<u32> { Box::pin(Job { runs: 0 }).as_mut().pinned() };
    let _ = async {
        let a: Option<u32> = Box::new(Job { runs: 0 }).boxed_async().await;
        let b: Option<u32> = Arc::new(Job { runs: 0 }).shared_async().await;
        let c: u32 = Box::pin(Job { runs: 0 }).as_mut().pinned_async().await;
        (a, b, c)
    };
}
