//! `examples/health.rs` over real HTTP: its server runs in-process on a free
//! port, for runtimes on a shared in-memory backend, and a plain TCP client
//! asks it.

#[path = "../../examples/health.rs"]
#[allow(dead_code)] // the example's `main`
mod health;

use std::time::Duration;

use leader_runtime::{Config, MemoryBackend, Runtime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .memory(mem.clone())
            .ttl(Duration::from_secs(3))
            .renew_interval(Duration::from_secs(1))
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// Serve `rt`'s endpoints on a free port; `/ready` follows `group`.
async fn serve(rt: &Runtime, group: &str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(health::serve(listener, rt.clone(), vec![group.to_owned()]));
    addr
}

/// One request; the status code and the body (checked against Content-Length).
async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .expect("a response, then the connection closes")
        .unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.lines();
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let code: u16 = status_line[9..12].parse().unwrap();
    let length: usize = lines
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    if method != "HEAD" {
        assert_eq!(body.len(), length, "{response}");
    }
    assert!(head.contains("Content-Type: application/json"), "{head}");
    (code, body.to_owned())
}

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    request(addr, "GET", path).await
}

#[tokio::test]
async fn health_and_ready_follow_the_runtime_and_leadership() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (at_a, at_b) = (serve(&a, "jobs").await, serve(&b, "jobs").await);

    // Before any group is used: healthy, not ready, no groups.
    assert_eq!(
        get(at_a, "/health").await,
        (
            200,
            r#"{"status":"ok","instance_id":"a","groups":[]}"#.to_owned()
        )
    );
    // `/ready` starts the group's election: a wins it, b follows.
    let (code, _) = get(at_a, "/ready").await;
    assert!(code == 200 || code == 503);
    assert!(a.run_if_leader("jobs", || async {}).await.is_some());
    assert!(b.run_if_leader("jobs", || async {}).await.is_none());

    let (code, body) = get(at_a, "/ready").await;
    assert_eq!(
        (code, body.as_str()),
        (200, r#"{"ready":true,"leading":["jobs"]}"#)
    );
    let (code, body) = get(at_b, "/ready").await;
    assert_eq!(
        (code, body.as_str()),
        (503, r#"{"ready":false,"leading":[]}"#)
    );

    let (code, body) = get(at_a, "/health").await;
    assert_eq!(code, 200);
    for part in [
        r#""group":"jobs""#,
        r#""is_leader":true"#,
        r#""leader_id":"a""#,
        r#""eligible":true"#,
        r#""failing":false"#,
        r#""last_error":null"#,
    ] {
        assert!(body.contains(part), "{part} in {body}");
    }
    assert!(!body.contains(r#""token":null"#), "{body}");
    let (code, body) = get(at_b, "/health").await;
    assert_eq!(code, 200);
    assert!(
        body.contains(r#""is_leader":false,"leader_id":"a","token":null,"valid_for_ms":null"#),
        "{body}"
    );

    // Draining a: not ready any more, still healthy; b takes over and is ready.
    a.set_eligible("jobs", false).await.unwrap();
    let (code, body) = get(at_a, "/ready").await;
    assert_eq!(code, 503, "{body}");
    let (code, body) = get(at_a, "/health").await;
    assert_eq!(code, 200);
    assert!(
        body.contains(r#""is_leader":false"#) && body.contains(r#""eligible":false"#),
        "{body}"
    );
    tokio::time::timeout(Duration::from_secs(2), async {
        while get(at_b, "/ready").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("b ready after the hand-over");

    // Wrong paths and methods; HEAD has no body.
    assert_eq!(get(at_a, "/nope").await.0, 404);
    assert_eq!(request(at_a, "POST", "/health").await.0, 405);
    assert_eq!(request(at_a, "HEAD", "/health").await, (200, String::new()));
    assert_eq!(get(at_a, "/health?verbose=1").await.0, 200);

    // A backend outage shows in b's status; b stays healthy while its view holds.
    mem.set_available(false);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (code, body) = get(at_b, "/health").await;
    assert_eq!(code, 200);
    assert!(body.contains(r#""failing":true"#), "{body}");
    assert!(body.contains("simulated outage"), "{body}");
    mem.set_available(true);

    // Shut down: unhealthy, not ready.
    b.shutdown().await;
    let (code, body) = get(at_b, "/health").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with(r#"{"status":"shut down""#), "{body}");
    assert_eq!(get(at_b, "/ready").await.0, 503);
    a.shutdown().await;
}
