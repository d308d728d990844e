// `return` and `?` in the body, and coercions to the declared return type,
// work as in an ungated function. Async bodies need the macro's typed
// `return` for these to infer: each case here failed to compile without it.
use leader_runtime::leader_only;
use std::error::Error;
use std::fmt::Display;

#[derive(Debug)]
struct Oops;

impl Display for Oops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("oops")
    }
}

impl Error for Oops {}

#[leader_only(group = "cleanup")]
async fn purge(n: u64) -> Result<u64, Box<dyn Error + Send + Sync>> {
    let parsed: u64 = "12".parse()?; // `?` converts ParseIntError
    if n == 0 {
        return Err("zero".into()); // `.into()` needs the target type
    }
    if n == 1 {
        return Err(Box::new(Oops)); // Box<Oops> coerces to Box<dyn Error>
    }
    Ok(parsed + n)
}

#[leader_only]
async fn boxed(flag: bool) -> Box<dyn Display> {
    if flag {
        return Box::new(1);
    }
    Box::new("tail")
}

#[leader_only]
async fn slice(flag: bool) -> &'static [u8] {
    if flag {
        return &[1, 2, 3]; // &[u8; 3] coerces to &[u8]
    }
    b"tail"
}

#[leader_only]
async fn early_unit(flag: bool) {
    if flag {
        return;
    }
}

#[leader_only(group = "cleanup")]
fn sync_purge(n: u64) -> Result<u64, Box<dyn Error>> {
    let parsed: u64 = "12".parse()?;
    if n == 0 {
        return Err("zero".into());
    }
    if n == 1 {
        return Err(Box::new(Oops));
    }
    Ok(parsed + n)
}

#[leader_only]
fn sync_boxed(flag: bool) -> Box<dyn Display> {
    if flag {
        return Box::new(1);
    }
    Box::new("tail")
}

#[leader_only]
fn sync_option(v: Option<u32>) -> Option<u32> {
    let v = v?; // `?` on Option inside: the body's own Option, not the gate's
    Some(v + 1)
}

fn main() {
    let _: fn(u64) -> Option<Result<u64, Box<dyn Error>>> = sync_purge;
    let _: fn(bool) -> Option<Box<dyn Display>> = sync_boxed;
    let _: fn(Option<u32>) -> Option<Option<u32>> = sync_option;
    drop((purge(1), boxed(true), slice(true), early_unit(true)));
}
