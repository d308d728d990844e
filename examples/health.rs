//! Health and readiness endpoints for an instance that runs leader-only work:
//! a small HTTP/1.1 server on tokio's `TcpListener`, no web framework.
//!
//! - `GET /health`: `200` while the leader runtime runs (`503` once it shut
//!   down), with every group's [`leader_runtime::status`] as JSON — whether
//!   this instance leads, who does, the fencing token, how long the view has
//!   left, the last backend error;
//! - `GET /ready`: `200` only while this instance leads one of the groups it
//!   was started with, `503` otherwise — for a load balancer that should send
//!   traffic to the leader only (most services do not want this: every
//!   replica is ready, only the leader-only work is gated).
//!
//! ```text
//! cargo run --example health                      # in-memory backend
//! LEADER_REDIS_URL=redis://127.0.0.1:6379 cargo run --example health
//! curl -i localhost:8080/health ; curl -i localhost:8080/ready
//! ```
//!
//! `HEALTH_ADDR` sets the listening address (default `127.0.0.1:8080`).
//! `e2e/tests/health.rs` runs this server in-process and asks it over HTTP.

use std::fmt::Write as _;
use std::time::Duration;

use leader_runtime::{Config, GroupStatus, MemoryBackend, Runtime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The group this example leads; `/ready` follows it.
const GROUP: &str = "reports";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = match std::env::var("LEADER_REDIS_URL") {
        Ok(url) => Config::builder().redis_url(url),
        Err(_) => {
            tracing::info!("LEADER_REDIS_URL not set: using an in-memory backend");
            Config::builder().memory(MemoryBackend::new())
        }
    };
    let runtime = Runtime::new(config.build()?)?;
    // The leader-only work: here, a tick every second.
    tokio::spawn({
        let runtime = runtime.clone();
        async move {
            loop {
                runtime
                    .run_if_leader(GROUP, || async { tracing::info!("working") })
                    .await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let addr = std::env::var("HEALTH_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    tracing::info!(%addr, "serving /health and /ready");
    tokio::select! {
        served = serve(listener, runtime.clone(), vec![GROUP.to_owned()]) => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    runtime.shutdown().await;
    Ok(())
}

/// Answer `/health` and `/ready` for `runtime` on every connection of
/// `listener`, one task per connection, until the listener fails.
/// `/ready` is 200 while `runtime` leads one of `ready_groups`.
pub async fn serve(
    listener: TcpListener,
    runtime: Runtime,
    ready_groups: Vec<String>,
) -> std::io::Result<()> {
    let ready_groups: std::sync::Arc<[String]> = ready_groups.into();
    loop {
        let (stream, _) = listener.accept().await?;
        let (runtime, ready_groups) = (runtime.clone(), ready_groups.clone());
        tokio::spawn(async move {
            if let Err(e) = handle(stream, &runtime, &ready_groups).await {
                tracing::debug!(error = %e, "health connection failed");
            }
        });
    }
}

/// One request, one response, then close.
async fn handle(
    mut stream: TcpStream,
    runtime: &Runtime,
    ready_groups: &[String],
) -> std::io::Result<()> {
    let head = match tokio::time::timeout(Duration::from_secs(5), read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => return Ok(()), // a client that never finished its request
    };
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (code, body) = match (method, path) {
        ("GET" | "HEAD", "/health") => health(runtime),
        ("GET" | "HEAD", "/ready") => ready(runtime, ready_groups),
        (_, "/health" | "/ready") => (405, r#"{"error":"method not allowed"}"#.to_owned()),
        _ => (404, r#"{"error":"not found"}"#.to_owned()),
    };
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let mut response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The request line and headers (the body of a GET is ignored), at most 8 KiB.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// 200 while the runtime runs, with every group's status.
fn health(runtime: &Runtime) -> (u16, String) {
    let running = runtime.is_running();
    let groups: Vec<String> = runtime.status().iter().map(group_json).collect();
    let body = format!(
        r#"{{"status":"{}","instance_id":{},"groups":[{}]}}"#,
        if running { "ok" } else { "shut down" },
        json_str(runtime.instance_id()),
        groups.join(",")
    );
    (if running { 200 } else { 503 }, body)
}

/// 200 while this instance leads one of `ready_groups`.
fn ready(runtime: &Runtime, ready_groups: &[String]) -> (u16, String) {
    let leading: Vec<String> = ready_groups
        .iter()
        .filter(|g| runtime.is_leader(g))
        .map(|g| json_str(g))
        .collect();
    let ready = !leading.is_empty() && runtime.is_running();
    let body = format!(r#"{{"ready":{ready},"leading":[{}]}}"#, leading.join(","));
    (if ready { 200 } else { 503 }, body)
}

fn group_json(s: &GroupStatus) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
    format!(
        r#"{{"group":{},"is_leader":{},"leader_id":{},"token":{},"valid_for_ms":{},"eligible":{},"failing":{},"last_error":{}}}"#,
        json_str(&s.group),
        s.is_leader,
        opt(s.leader_id.as_deref().map(json_str)),
        opt(s.token.map(|t| t.to_string())),
        opt(s.valid_for.map(|d| d.as_millis().to_string())),
        s.eligible,
        s.failing,
        opt(s.last_error.as_deref().map(json_str)),
    )
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
