// `default` and `default = expr` keep the signature: trait impls (sync and
// async methods), fn pointers. The expression is any expression of type `T`.
use leader_runtime::leader_only;

pub trait Reaper {
    fn reap(&self, n: u32) -> u32;
    fn name(&self) -> String;
    #[allow(async_fn_in_trait)]
    async fn purge(&self) -> Result<u64, String>;
}

pub struct Db {
    fallback: u32,
}

impl Reaper for Db {
    #[leader_only(group = "reaper", default)]
    fn reap(&self, n: u32) -> u32 {
        n
    }

    #[leader_only(group = "reaper", default = format!("follower {}", self.fallback))]
    fn name(&self) -> String {
        "leader".into()
    }

    #[leader_only(group = "reaper", default = Ok(0), cancel_on_loss)]
    async fn purge(&self) -> Result<u64, String> {
        if self.fallback == 0 {
            return Err("nothing to purge".into());
        }
        Ok(u64::from(self.fallback))
    }
}

#[leader_only(group = "reaper", default)]
fn tick(n: u32) -> u32 {
    n
}

#[leader_only(group = "reaper", default = Vec::new())]
fn ids() -> Vec<impl std::fmt::Display> {
    vec![1, 2]
}

// The expression may use a `Copy` parameter that the body names too (here a `&[T]` and a
// number): the body's closure takes a copy.
#[leader_only(group = "reaper", default = items.len() + extra)]
fn count(items: &[u32], extra: usize) -> usize {
    items.iter().filter(|i| **i > 1).count() + extra
}

// A unit function keeps `()`.
#[leader_only(group = "reaper", default)]
async fn beat() {}

fn main() {
    let f: fn(u32) -> u32 = tick;
    let _ = f;
    let db: &dyn Fn(&Db) -> String = &|db| db.name();
    let _ = db;
    let _ = || ids().len();
    let _: usize = count(&[1, 2], 1);
    let _ = async {
        let _: () = beat().await;
        let _: Result<u64, String> = Db { fallback: 1 }.purge().await;
    };
}
