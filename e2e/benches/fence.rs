//! What a fenced write costs: `Fence::set` (one `EVALSHA` of the check and
//! the write) against a plain `SET` and against an `EVALSHA` of a script that
//! only does the `SET`, each one request at a time (the latency a job sees)
//! on a multiplexed connection to a local `redis-server` this harness starts.
//!
//! ```text
//! cargo bench -p leader-e2e --bench fence -- [--ops 2000] [--rounds 10]
//! ```
//!
//! The kinds of write alternate round by round, so a change in the machine's
//! load hits them alike. Prints min / median / p99 / mean per write in µs.

use std::time::{Duration, Instant};

use leader_runtime::{Config, Fenced, Runtime};
use leader_testkit::RedisServer;

mod common;
use common::machine;

fn flag(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn summary(name: &str, samples: &mut [f64]) -> String {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let at = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    let mean = samples.iter().sum::<f64>() / n as f64;
    format!(
        "| {name} | {n} | {:.1} | {:.1} | {:.1} | {:.1} |",
        samples[0],
        at(0.5),
        at(0.99),
        mean
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (ops, rounds) = (flag("--ops", 2000), flag("--rounds", 10));
    let server = RedisServer::start().await.expect("redis-server");
    let runtime = Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .ttl(Duration::from_secs(30))
            .renew_interval(Duration::from_secs(10))
            .build()
            .expect("config"),
    )
    .expect("runtime");
    // The first election waits one ttl (no record yet): write one.
    server
        .cmd(&["HSET", "leader:{bench}:token", "token", "1"])
        .await
        .expect("record");
    let lease = loop {
        let lease = runtime
            .run_if_leader("bench", || async { leader_runtime::current_lease() })
            .await
            .flatten();
        if let Some(lease) = lease {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let fence = lease.fence();
    let key = fence.key("state");
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let set_script = redis::Script::new("return redis.call('SET', KEYS[1], ARGV[1])");

    let (mut plain, mut script, mut fenced) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let warmup = round == 0;
        for kind in 0..3 {
            for i in 0..ops {
                let value = i.to_string();
                let start = Instant::now();
                match kind {
                    0 => {
                        let () = redis::cmd("SET")
                            .arg(&key)
                            .arg(&value)
                            .query_async(&mut conn)
                            .await
                            .expect("SET");
                    }
                    1 => {
                        let _: redis::Value = set_script
                            .key(&key)
                            .arg(&value)
                            .invoke_async(&mut conn)
                            .await
                            .expect("EVALSHA");
                    }
                    _ => {
                        let done = fence.set(&key, &value).await.expect("fenced set");
                        assert_eq!(done, Fenced::Applied(()));
                    }
                }
                let us = start.elapsed().as_secs_f64() * 1e6;
                if !warmup {
                    [&mut plain, &mut script, &mut fenced][kind].push(us);
                }
            }
        }
    }
    println!("fenced writes, {ops} writes × {rounds} rounds each, one at a time");
    println!("machine: {}", machine());
    println!(
        "| write (µs) | n | min | median | p99 | mean |\n| --- | --- | --- | --- | --- | --- |"
    );
    println!("{}", summary("plain SET", &mut plain));
    println!("{}", summary("EVALSHA of a SET script", &mut script));
    println!("{}", summary("Fence::set (check + SET)", &mut fenced));
    runtime.shutdown().await;
}
