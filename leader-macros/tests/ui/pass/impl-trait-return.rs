// `impl Trait` in return position, alone and nested in other types.
use leader_runtime::leader_only;
use std::fmt::Display;

#[leader_only]
fn display() -> impl Display {
    5
}

#[leader_only]
fn counter(limit: u32) -> impl Iterator<Item = u32> {
    0..limit
}

#[leader_only]
fn adder(n: u32) -> Box<impl Fn(u32) -> u32> {
    Box::new(move |x| x + n)
}

#[leader_only]
async fn async_display() -> impl Display {
    "five"
}

#[leader_only]
async fn async_nested(flag: bool) -> Result<impl Display, String> {
    if flag {
        return Err("no".to_owned());
    }
    Ok(5)
}

#[leader_only(group = "x", cancel_on_loss)]
async fn async_iter() -> Vec<impl Display> {
    vec![1, 2]
}

fn main() {
    // Type-checked, never called: a call would need a configured runtime.
    let _ = || -> Option<String> { display().map(|d| d.to_string()) };
    let _ = || -> Option<usize> { counter(3).map(Iterator::count) };
    let _ = || -> Option<u32> { adder(1).map(|f| f(1)) };
    drop((async_display(), async_nested(true), async_iter()));
}
