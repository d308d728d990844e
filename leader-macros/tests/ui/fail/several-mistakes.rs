// Every mistake is reported at once, each at its own token.
use leader_runtime::leader_only;

#[leader_only(group = "a/b", retries = 3, cancel_on_loss)]
const fn tick() {}

fn main() {}
