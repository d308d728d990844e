//! A fake Redis that speaks RESP2 but answers the lease scripts with
//! whatever a test tells it to — for "a Redis that answers with unexpected
//! types". Connection set-up commands and SUBSCRIBE get normal answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Which lease operation a script call is, by the script's first line
/// (`-- acquire: …`; acquire and renew have the same shape, three keys and
/// two arguments, so the shape cannot tell them apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Acquire,
    /// `renew.lua` and `renew_many.lua`, and any other script.
    Renew,
    Release,
}

impl Op {
    fn of_script(text: &str) -> Op {
        if text.contains("\n-- acquire:") {
            Op::Acquire
        } else if text.contains("\n-- release:") {
            Op::Release
        } else {
            Op::Renew
        }
    }
}

/// The scripts loaded so far, by their SHA1 (the client sends `EVALSHA`
/// first; an unknown SHA gets `NOSCRIPT`, and the client loads the text).
type Loaded = Arc<Mutex<HashMap<String, Op>>>;

/// Raw RESP replies for one operation, used in turn (cycling).
pub type Replies = Arc<dyn Fn(Op, u64) -> Vec<u8> + Send + Sync>;

pub struct FakeRedis {
    addr: SocketAddr,
    calls: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Drop for FakeRedis {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeRedis {
    /// Start on a free port; `replies(op, n)` gives the raw reply to the
    /// `n`th script call (counting all operations).
    pub async fn start(replies: Replies) -> std::io::Result<FakeRedis> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (counter, calls) = watch::channel(0u64);
        let counter = Arc::new(counter);
        let loaded = Loaded::default();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(
                    stream,
                    replies.clone(),
                    counter.clone(),
                    loaded.clone(),
                ));
            }
        });
        Ok(FakeRedis { addr, calls, task })
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Script calls answered so far.
    pub fn calls(&self) -> u64 {
        *self.calls.borrow()
    }

    /// Waits until at least `n` script calls were answered.
    pub async fn wait_calls(&self, n: u64, timeout: Duration) -> Result<(), String> {
        let mut rx = self.calls.clone();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|c| *c >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        if reached {
            Ok(())
        } else {
            Err(format!(
                "{} script calls within {timeout:?}, wanted {n}",
                self.calls()
            ))
        }
    }
}

/// Reads one RESP array of bulk strings (what clients send).
async fn read_command(rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Vec<String>> {
    let mut line = String::new();
    rd.read_line(&mut line).await.ok()?;
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        rd.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        rd.read_exact(&mut buf).await.ok()?;
        buf.truncate(len);
        args.push(String::from_utf8_lossy(&buf).into_owned());
    }
    Some(args)
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

async fn serve(
    stream: TcpStream,
    replies: Replies,
    calls: Arc<watch::Sender<u64>>,
    loaded: Loaded,
) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    while let Some(args) = read_command(&mut rd).await {
        let name = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let reply: Vec<u8> = match name.as_str() {
            "EVALSHA" | "EVAL" => {
                let script = args.get(1).cloned().unwrap_or_default();
                let op = if name == "EVAL" {
                    Op::of_script(&script)
                } else {
                    let known = loaded.lock().unwrap().get(&script).copied();
                    match known {
                        Some(op) => op,
                        None => {
                            let reply = b"-NOSCRIPT No matching script. Please use EVAL.\r\n";
                            if wr.write_all(reply).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    }
                };
                let mut n = 0;
                calls.send_modify(|c| {
                    n = *c;
                    *c += 1;
                });
                replies(op, n)
            }
            "SCRIPT" => {
                // SCRIPT LOAD <text>
                let text = args.get(2).cloned().unwrap_or_default();
                let sha = sha1_smol::Sha1::from(&text).digest().to_string();
                loaded
                    .lock()
                    .unwrap()
                    .insert(sha.clone(), Op::of_script(&text));
                bulk(&sha).into_bytes()
            }
            "SUBSCRIBE" => {
                let channel = args.get(1).cloned().unwrap_or_default();
                format!("*3\r\n{}{}:1\r\n", bulk("subscribe"), bulk(&channel)).into_bytes()
            }
            "PING" => b"+PONG\r\n".to_vec(),
            "GET" => b"$-1\r\n".to_vec(),
            _ => b"+OK\r\n".to_vec(),
        };
        if wr.write_all(&reply).await.is_err() {
            return;
        }
    }
}
