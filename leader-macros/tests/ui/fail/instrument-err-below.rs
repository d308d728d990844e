// `#[instrument(err)]` below `#[leader_only]` sees the gated `Option<T>`,
// which is no `Result`: put it above, or keep the signature with `default`.
use leader_runtime::leader_only;
use tracing::instrument;

#[leader_only(group = "traced")]
#[instrument(err)]
async fn below(n: u64) -> Result<u64, String> {
    Ok(n)
}

fn main() {}
