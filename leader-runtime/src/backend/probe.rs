//! Is the server at a Redis URL a Redis at all? Asked once a first `PING`
//! failed, so that a URL pointing at PostgreSQL's port or an HTTP server
//! fails [`ready`](crate::Runtime::ready) at once with "not a Redis server
//! at host:port" instead of retrying until its timeout.
//!
//! One plain TCP connection per URL, one `PING` in RESP, the first bytes of
//! the answer: any RESP reply (`+PONG`, `-NOAUTH …`, `-DENIED …`) is a
//! Redis, whatever it says; bytes that are no RESP (`HTTP/1.1 400`, `AMQP`)
//! or a close with no answer at all (PostgreSQL reads the `PING` as a bad
//! start-up packet and hangs up; so does a Redis port that expects TLS) are
//! not. No answer in time, or no connection, says nothing: the usual retry
//! and its error stand. `rediss://` and Unix sockets are not probed.

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Error;

/// `PING`, as a client library sends it.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// The first byte of every RESP2 and RESP3 reply type.
const RESP_TYPES: &[u8] = b"+-:$*_,#!=(%~>|";

/// At most this much of a foreign answer is shown.
const SHOWN: usize = 32;

/// [`Error::Misconfigured`] naming the first of `urls` whose server answered
/// a `PING` with something that is not Redis, probed within `within`;
/// `None` when each is a Redis, or cannot tell.
pub(crate) async fn not_redis(urls: &[String], within: Duration) -> Option<Error> {
    for url in urls {
        let Ok(info) = url.as_str().into_connection_info() else {
            continue;
        };
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            continue;
        };
        let address = format!("{host}:{port}");
        let Ok(Some(answer)) = tokio::time::timeout(within, answer_to_ping(&address)).await else {
            continue;
        };
        let said = match answer.first() {
            Some(b) if RESP_TYPES.contains(b) => continue,
            Some(_) => format!("it answered {}", shown(&answer)),
            None => "it closed the connection without answering".to_owned(),
        };
        return Some(Error::Misconfigured {
            group: None,
            message: format!("not a Redis server at {address}: {said}"),
            hint: "check the host and port in the Redis URL (Redis listens on 6379 by \
                   default; 5432 is PostgreSQL's); a Redis that expects TLS needs rediss://",
            source: None,
        });
    }
    None
}

/// The first bytes the server at `address` sends back to a `PING` (empty:
/// it closed the connection); `None` when it could not be asked.
async fn answer_to_ping(address: &str) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect(address).await.ok()?;
    stream.write_all(PING).await.ok()?;
    let mut buf = vec![0; SHOWN];
    match stream.read(&mut buf).await {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        // A reset right after the request: as a close.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some(Vec::new()),
        Err(_) => None,
    }
}

/// `bytes` as readable text: `"HTTP/1.0 400 Bad…"`.
fn shown(bytes: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{:?}…", text.trim_end())
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    /// A server on a free port that answers every connection with `reply`
    /// (and then closes it).
    async fn server(reply: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0; 64];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(reply).await;
            }
        });
        format!("redis://127.0.0.1:{port}")
    }

    async fn probe(reply: &'static [u8]) -> Option<String> {
        let url = server(reply).await;
        not_redis(&[url], Duration::from_secs(5))
            .await
            .map(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_server_that_speaks_no_resp_is_named() {
        let said = probe(b"HTTP/1.0 400 Bad Request\r\n\r\n").await.unwrap();
        assert!(said.contains("not a Redis server at 127.0.0.1:"), "{said}");
        assert!(
            said.contains("it answered \"HTTP/1.0 400 Bad Request"),
            "{said}"
        );
        let said = probe(b"").await.unwrap();
        assert!(
            said.contains("closed the connection without answering"),
            "{said}"
        );
    }

    #[tokio::test]
    async fn any_resp_reply_is_a_redis() {
        for reply in [
            &b"+PONG\r\n"[..],
            b"-NOAUTH Authentication required.\r\n",
            b"-DENIED Redis is running in protected mode\r\n",
        ] {
            assert_eq!(
                probe(reply).await,
                None,
                "{:?}",
                String::from_utf8_lossy(reply)
            );
        }
    }

    #[tokio::test]
    async fn nothing_listening_and_tls_urls_say_nothing() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let urls = [
            format!("redis://127.0.0.1:{port}"),
            format!("rediss://127.0.0.1:{port}"),
        ];
        assert!(not_redis(&urls, Duration::from_secs(5)).await.is_none());
    }
}
