use leader_runtime::leader_only;

#[leader_only(group = "cleanup", cancel_on_loss = true)]
async fn tick() {}

fn main() {}
