// Gated futures are `Send` when the body is: on the first call of a site
// (which looks the group up) as on later ones (one type for both), with and
// without `cancel_on_loss`, and for a sync fn's gated future.
use leader_runtime::leader_only;
use std::future::Future;

#[leader_only(group = "send")]
async fn plain(n: u64) -> u64 {
    tokio::task::yield_now().await;
    n
}

#[leader_only(group = "send", cancel_on_loss)]
async fn cancellable(v: Vec<String>) -> usize {
    tokio::task::yield_now().await;
    v.len()
}

#[leader_only(group = "send", cancel_on_loss)]
fn returned(n: u64) -> impl Future<Output = u64> {
    async move {
        tokio::task::yield_now().await;
        n
    }
}

fn assert_send<F: Future + Send>(f: F) -> F {
    f
}

fn main() {
    // What a multi-thread runtime's `spawn` needs.
    drop(assert_send(plain(1)));
    drop(assert_send(plain(2)));
    drop(assert_send(cancellable(vec![])));
    drop(assert_send(returned(1)));
    drop(assert_send(async { plain(3).await }));
}
