// Generics, lifetimes, const generics, where clauses, `impl Trait` arguments.
use leader_runtime::leader_only;
use std::fmt::Debug;

#[leader_only(group = "generic")]
fn first<T: Clone, const N: usize>(items: [T; N]) -> T
where
    T: Debug,
{
    items[0].clone()
}

#[leader_only(group = "generic")]
fn longest<'a, 'b: 'a>(a: &'a str, b: &'b str) -> &'a str {
    if a.len() >= b.len() {
        a
    } else {
        b
    }
}

#[leader_only(group = "generic")]
fn sum(items: impl IntoIterator<Item = u32>) -> u32 {
    items.into_iter().sum()
}

#[leader_only(group = "generic")]
async fn convert<T, U>(value: T) -> Result<U, U::Error>
where
    U: TryFrom<T>,
{
    let converted = U::try_from(value)?;
    Ok(converted)
}

#[leader_only(group = "generic")]
async fn describe(value: &(impl Debug + ?Sized)) -> String {
    format!("{value:?}")
}

struct Wrapper<T>(T);

impl<T: Clone + Send> Wrapper<T> {
    #[leader_only(group = "generic")]
    fn get(&self) -> T {
        self.0.clone()
    }

    #[leader_only(group = "generic")]
    async fn map<U, F>(self, f: F) -> Wrapper<U>
    where
        F: FnOnce(T) -> U,
    {
        Wrapper(f(self.0))
    }
}

fn main() {
    let _: fn([u8; 2]) -> Option<u8> = first::<u8, 2>;
    let _: fn(&'static str, &'static str) -> Option<&'static str> = longest;
    let _: fn(Vec<u32>) -> Option<u32> = |v| sum(v);
    let _: fn(&Wrapper<u8>) -> Option<u8> = Wrapper::get;
    drop(convert::<u64, u8>(1));
    drop(describe("x"));
    drop(Wrapper(1u8).map(|v| v + 1));
}
