// `#[tracing::instrument]` in both orders. Above `#[leader_only]` it expands
// first and instruments the body: a span only where the body runs, and
// `ret`/`err` see `T`. Below, it instruments the gated call: a span on every
// instance, and `ret` sees `Option<T>` (`err` needs a `Result`, so
// `default` to keep it).
use leader_runtime::leader_only;
use tracing::instrument;

#[instrument(err, ret)]
#[leader_only(group = "traced")]
async fn above(n: u64) -> Result<u64, String> {
    if n == 0 {
        return Err("zero".into());
    }
    Ok(n)
}

#[instrument(ret)]
#[leader_only(group = "traced")]
fn above_sync(n: u64) -> u64 {
    n
}

#[leader_only(group = "traced")]
#[instrument(ret)]
async fn below(n: u64) -> u64 {
    n
}

#[leader_only(group = "traced", default = Ok(0))]
#[instrument(err)]
async fn below_err(n: u64) -> Result<u64, String> {
    if n == 0 {
        return Err("zero".into());
    }
    Ok(n)
}

#[leader_only(group = "traced")]
#[instrument]
fn below_sync(n: u64) -> u64 {
    n
}

fn main() {
    let _ = async {
        let _: Option<Result<u64, String>> = above(1).await;
        let _: Option<u64> = below(1).await;
        let _: Result<u64, String> = below_err(1).await;
    };
    let _: fn(u64) -> Option<u64> = above_sync;
    let _: fn(u64) -> Option<u64> = below_sync;
}
