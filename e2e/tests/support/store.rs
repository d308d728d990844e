//! A tiny downstream store with fencing: it accepts a write only if its
//! token is at least as large as the largest it has seen.
//!
//! Protocol (one line each way): `W <token> <instance> <start_ns>` →
//! `OK` or `STALE <last>`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use leader_testkit::monotonic_now_ns;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One write as the store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreWrite {
    pub instance: String,
    pub token: u64,
    /// When the instance started the write (its own clock reading).
    pub start_ns: u64,
    /// When the store received it.
    pub received_ns: u64,
    pub accepted: bool,
    /// The largest token seen before this write.
    pub last_before: u64,
}

#[derive(Debug, Default)]
struct State {
    last: u64,
    writes: Vec<StoreWrite>,
}

pub struct FencedStore {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for FencedStore {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FencedStore {
    pub async fn start() -> std::io::Result<FencedStore> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let (rd, mut wr) = stream.into_split();
                    let mut lines = BufReader::new(rd).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let reply = handle(&state, &line);
                        if wr.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(FencedStore { addr, state, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn writes(&self) -> Vec<StoreWrite> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .writes
            .clone()
    }
}

fn handle(state: &Mutex<State>, line: &str) -> String {
    let received_ns = monotonic_now_ns();
    let mut words = line.split(' ');
    let parsed = (|| {
        if words.next()? != "W" {
            return None;
        }
        let token = words.next()?.parse().ok()?;
        let instance = words.next()?.to_owned();
        let start_ns = words.next()?.parse().ok()?;
        Some((token, instance, start_ns))
    })();
    let Some((token, instance, start_ns)) = parsed else {
        return "ERR bad request\n".to_owned();
    };
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let last_before = state.last;
    let accepted = token >= last_before;
    if accepted {
        state.last = token;
    }
    state.writes.push(StoreWrite {
        instance,
        token,
        start_ns,
        received_ns,
        accepted,
        last_before,
    });
    if accepted {
        "OK\n".to_owned()
    } else {
        format!("STALE {last_before}\n")
    }
}
