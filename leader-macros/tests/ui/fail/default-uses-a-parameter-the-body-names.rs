// `default = expr` can't use a parameter the body names unless it is `Copy`: the body's `move`
// closure (or `async move` block) takes it, even where the body only borrows it. What the
// attribute's docs say, and rustc's own error.
use leader_runtime::leader_only;

#[leader_only(group = "jobs", default = items.len())]
fn count(items: Vec<u32>) -> usize {
    items.iter().filter(|i| **i > 1).count()
}

#[leader_only(group = "jobs", default = name.clone())]
async fn greet(name: String) -> String {
    format!("hello {}", name.as_str())
}

fn main() {}
