//! A Redis URL that points at something else (PostgreSQL's port, an HTTP
//! server) fails `ready_for` at once, naming the address.

use std::time::{Duration, Instant};

use leader_runtime::Runtime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

mod support;
use support::config;

/// Much longer than a probe takes: a failure "at once" is well within it.
const PATIENCE: Duration = Duration::from_secs(20);

fn runtime_at(url: &str) -> Runtime {
    Runtime::new(config("a").redis_url(url).build().unwrap()).unwrap()
}

/// `ready_for` fails with a configuration error naming `address` as no
/// Redis, long before its timeout.
async fn refused_at_once(url: &str, address: &str) {
    let rt = runtime_at(url);
    let started = Instant::now();
    let err = rt.ready_for(["jobs"], PATIENCE).await.unwrap_err();
    let took = started.elapsed();
    let said = err.to_string();
    assert!(err.is_config(), "{said}");
    assert!(
        said.contains(&format!("not a Redis server at {address}")),
        "{said}"
    );
    assert!(took < PATIENCE / 4, "took {took:?}: {said}");
    rt.shutdown().await;
}

#[tokio::test]
async fn postgresql_s_port_is_not_a_redis() {
    // The machines this runs on have PostgreSQL on 5432 (.ci/run starts one).
    if tokio::net::TcpStream::connect("127.0.0.1:5432")
        .await
        .is_err()
    {
        panic!("this test needs PostgreSQL on 127.0.0.1:5432 (see .ci/run); none answers");
    }
    refused_at_once("redis://127.0.0.1:5432", "127.0.0.1:5432").await;
}

#[tokio::test]
async fn an_http_server_is_not_a_redis() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0; 256];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    refused_at_once(&format!("redis://{address}"), &address).await;
}
