// A return type naming `impl Trait` keeps its coercions in a sync body:
// `Box::new(e)` to `Box<dyn Error>`, `?` into it.
use leader_runtime::leader_only;
use std::error::Error;
use std::fmt;

#[derive(Debug)]
struct Empty;

impl fmt::Display for Empty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("empty")
    }
}

impl Error for Empty {}

#[leader_only(group = "ids")]
fn ids(raw: &str) -> Result<impl Iterator<Item = usize> + '_, Box<dyn Error>> {
    if raw.is_empty() {
        return Err(Box::new(Empty));
    }
    let _: u32 = "1".parse()?;
    Ok(raw.split(',').map(str::len))
}

fn main() {
    let _ = || -> Option<usize> { Some(ids("a,b")?.ok()?.count()) };
}
