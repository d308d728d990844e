// An item declared in the body is in scope in the whole body, and not in the signature: an
// async body may declare a type of the same name as one its signature names (the expansion's
// never-taken typed `return` stays outside the body's block). `return` and `?` in such a body
// still end it with their value, which the call returns in `Some`: checked by running it.
#![deny(warnings)]
use leader_runtime::{leader_only, Config, MemoryBackend, Runtime};

pub struct Report(u32);

#[leader_only(group = "jobs")]
async fn report() -> Report {
    struct Report;
    let _local = Report;
    crate::Report(1)
}

pub type Error = String;

#[leader_only(group = "jobs")]
async fn parse(s: &str) -> Result<u32, Error> {
    #[derive(Debug)]
    struct Error;
    fn check(s: &str) -> Result<(), Error> {
        if s.is_empty() {
            Err(Error)
        } else {
            Ok(())
        }
    }
    if check(s).is_err() {
        return Err(format!("{:?}", Error));
    }
    let n = s.parse::<u32>().map_err(|e| e.to_string())?;
    Ok(n + 1)
}

// A one-line body: no `unused_braces` on the block the body keeps.
#[leader_only(group = "jobs")]
async fn one() -> u32 { 1 }

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let leader = Runtime::new(
            Config::builder()
                .memory(MemoryBackend::new())
                .instance_id("a")
                .build()
                .unwrap(),
        )
        .unwrap();
        leader
            .scope(async {
                // The first call waits for the group's first round, which this lone instance wins.
                assert_eq!(report().await.map(|r| r.0), Some(1));
                assert_eq!(parse("41").await, Some(Ok(42)));
                assert_eq!(parse("").await, Some(Err("Error".to_owned())));
                assert!(matches!(parse("x").await, Some(Err(e)) if e.contains("invalid digit")));
                assert_eq!(one().await, Some(1));
            })
            .await;
        leader.shutdown().await;
    });
}
