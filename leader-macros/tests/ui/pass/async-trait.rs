// Inside an `#[async_trait]` impl (which expands first, into a sync fn
// returning `Pin<Box<dyn Future + Send>>`), `default` keeps the trait's
// signature and the returned future is gated for its whole life.
use async_trait::async_trait;
use leader_runtime::leader_only;

#[async_trait]
pub trait Job {
    async fn run(&self, n: u64) -> Result<u64, String>;
    async fn name(&self) -> String;
    async fn tick(&mut self);
}

pub struct Reaper {
    runs: u64,
}

#[async_trait]
impl Job for Reaper {
    #[leader_only(group = "reaper", default = Ok(0))]
    async fn run(&self, n: u64) -> Result<u64, String> {
        if n == 0 {
            return Err("zero".into());
        }
        Ok(self.runs + n)
    }

    #[leader_only(group = "reaper", default, cancel_on_loss)]
    async fn name(&self) -> String {
        tokio::task::yield_now().await;
        "reaper".into()
    }

    #[leader_only(group = "reaper", default)]
    async fn tick(&mut self) {
        self.runs += 1;
    }
}

#[async_trait(?Send)]
pub trait Local {
    async fn local(&self) -> u32;
}

#[async_trait(?Send)]
impl Local for Reaper {
    #[leader_only(group = "reaper", default = 7)]
    async fn local(&self) -> u32 {
        let rc = std::rc::Rc::new(1);
        tokio::task::yield_now().await;
        *rc
    }
}

fn spawnable<F: std::future::Future + Send + 'static>(_: F) {}

fn main() {
    spawnable(async {
        let mut reaper = Reaper { runs: 0 };
        reaper.tick().await;
        let _: Result<u64, String> = reaper.run(1).await;
        let _: String = reaper.name().await;
    });
    let boxed: Box<dyn Job + Send + Sync> = Box::new(Reaper { runs: 0 });
    drop(boxed);
}
