// A sync fn that returns a future (`impl Future`, `Pin<Box<dyn Future>>`, as
// `#[async_trait]` writes it) is gated for the future's whole life: the
// future's output becomes `Option<T>` (or stays `T` with `default`), and
// `cancel_on_loss` can stop it. The futures stay `Send`.
use leader_runtime::leader_only;
use std::future::Future;
use std::pin::Pin;

pub struct Db;

impl Db {
    #[leader_only(group = "jobs")]
    fn purge(&self) -> impl Future<Output = u64> + Send + '_ {
        async move { self.count() }
    }

    #[leader_only(group = "jobs", cancel_on_loss)]
    fn reap<'a>(&'a self, n: u64) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        Box::pin(async move { self.count() + n })
    }

    #[leader_only(group = "jobs", default = 0)]
    fn reap_or_zero(&self) -> Pin<Box<dyn Future<Output = u64> + Send + '_>> {
        Box::pin(async move { self.count() })
    }

    #[leader_only(group = "jobs", default)]
    fn purge_or_zero(&self) -> impl Future<Output = u64> + '_ {
        async move { self.count() }
    }

    fn count(&self) -> u64 {
        1
    }
}

// The body's sync part may build what the future needs. Like an `async fn`'s
// body it runs at the first poll, so the future holds the parameters: `'_`.
#[leader_only(group = "jobs", cancel_on_loss)]
fn job(name: &str) -> impl Future<Output = Result<usize, String>> + '_ {
    let name = name.to_owned();
    async move {
        if name.is_empty() {
            return Err("no name".into());
        }
        Ok(name.len())
    }
}

fn output<T>(_: impl Future<Output = T> + Send) {}

fn main() {
    let db = Db;
    output::<Option<u64>>(db.purge());
    output::<Option<u64>>(db.reap(1));
    output::<u64>(db.reap_or_zero());
    let _: Pin<Box<dyn Future<Output = Option<u64>> + Send + '_>> = db.reap(1);
    drop(db.purge_or_zero());
    output::<Option<Result<usize, String>>>(job("a"));
}
