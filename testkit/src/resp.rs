//! A tiny RESP client: send a command, read one reply.
//!
//! Enough for tests to `SET`, `GET`, `INFO` or `SCRIPT EXISTS` against a
//! [`RedisServer`](crate::RedisServer) (directly or through a
//! [`FaultProxy`](crate::FaultProxy)) without depending on a Redis client
//! crate — and without sharing code with the client under test.

use std::fmt;
use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, ToSocketAddrs};

/// One reply of a Redis server.
///
/// RESP2 types map one to one; the few RESP3 types (after `HELLO 3`) are
/// folded into the nearest RESP2 variant: null → [`Reply::Nil`], boolean →
/// [`Reply::Integer`] (0/1), double and big number → [`Reply::Simple`], map,
/// set and push → [`Reply::Array`] (maps as key, value, key, value …),
/// verbatim string → [`Reply::Bulk`].
///
/// Bulk strings are decoded as UTF-8, lossily: tests store text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// A simple string, e.g. `+OK` → `Simple("OK")`.
    Simple(String),
    /// An error reply, e.g. `-NOAUTH Authentication required.`.
    Error(String),
    /// An integer reply.
    Integer(i64),
    /// A bulk string.
    Bulk(String),
    /// A null bulk string or null array (a missing key).
    Nil,
    /// An array of replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a simple or bulk string; `None` for every other variant.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Simple(s) | Reply::Bulk(s) => Some(s),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// Whether this is [`Reply::Nil`].
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Turns an error reply into an `io::Error` (kind `Other`, message = the
    /// server's error text) so that `?` can be used on it.
    ///
    /// # Errors
    ///
    /// If the reply is [`Reply::Error`].
    pub fn ok(self) -> io::Result<Reply> {
        match self {
            Reply::Error(e) => Err(io::Error::other(format!("redis error reply: {e}"))),
            other => Ok(other),
        }
    }
}

impl PartialEq<&str> for Reply {
    /// A simple or bulk string equal to `other`.
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

impl PartialEq<i64> for Reply {
    /// An integer reply equal to `other`.
    fn eq(&self, other: &i64) -> bool {
        self.as_int() == Some(*other)
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Simple(s) => write!(f, "{s}"),
            Reply::Error(e) => write!(f, "(error) {e}"),
            Reply::Integer(i) => write!(f, "(integer) {i}"),
            Reply::Bulk(s) => write!(f, "{s:?}"),
            Reply::Nil => write!(f, "(nil)"),
            Reply::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// One raw RESP connection.
///
/// Commands are sent as RESP arrays of bulk strings; replies are read one at
/// a time, in order. There is no timeout inside: wrap calls in
/// [`tokio::time::timeout`] when the other side may not answer (a paused
/// server, a black-holed proxy).
///
/// # Examples
///
/// ```no_run
/// # async fn f(server: &leader_testkit::RedisServer) -> std::io::Result<()> {
/// use leader_testkit::RespConn;
///
/// let mut conn = RespConn::connect(server.addr()).await?;
/// assert_eq!(conn.cmd(&["SET", "k", "v"]).await?, "OK");
/// assert_eq!(conn.cmd(&["GET", "k"]).await?, "v");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RespConn {
    stream: BufReader<TcpStream>,
}

impl RespConn {
    /// Connects (TCP, `TCP_NODELAY`) to `addr`.
    ///
    /// # Errors
    ///
    /// If the connection cannot be established.
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<RespConn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RespConn {
            stream: BufReader::new(stream),
        })
    }

    /// Sends one command without waiting for its reply (for pipelining, or to
    /// observe a reply that is held back).
    ///
    /// # Errors
    ///
    /// If writing to the socket fails.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may have written part of the command.
    pub async fn send(&mut self, args: &[&str]) -> io::Result<()> {
        self.stream.get_mut().write_all(&encode(args)).await
    }

    /// Reads the next reply.
    ///
    /// # Errors
    ///
    /// On a socket error, on end of stream (`UnexpectedEof`) and on bytes
    /// that are not RESP (`InvalidData`). An error *reply* is `Ok(Reply::Error)`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe once part of a reply was read: after a cancelled call
    /// (e.g. a timeout), only drop the connection. A timeout that elapses
    /// before any byte arrived leaves the connection usable in practice, which
    /// tests of a black-holed proxy rely on.
    pub async fn read_reply(&mut self) -> io::Result<Reply> {
        read_reply(&mut self.stream).await
    }

    /// Sends one command and reads its reply.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send) and [`read_reply`](Self::read_reply).
    pub async fn cmd(&mut self, args: &[&str]) -> io::Result<Reply> {
        self.send(args).await?;
        self.read_reply().await
    }

    /// Writes raw bytes, e.g. part of a command, to test framing.
    ///
    /// # Errors
    ///
    /// If writing to the socket fails.
    pub async fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.get_mut().write_all(bytes).await
    }

    /// Reads whatever arrives next into `buf` (0 = end of stream), bypassing
    /// RESP parsing; for tests that want to see a reset or an EOF.
    ///
    /// # Errors
    ///
    /// On a socket error (e.g. `ConnectionReset`).
    pub async fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf).await
    }

    /// The underlying socket, e.g. for its `local_addr`.
    pub fn stream(&self) -> &TcpStream {
        self.stream.get_ref()
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<String> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("truncated RESP line: {:?}", String::from_utf8_lossy(&line)),
        ));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|e| invalid(format!("RESP line is not UTF-8: {e}")))
}

fn parse_len(s: &str) -> io::Result<i64> {
    s.parse::<i64>()
        .map_err(|_| invalid(format!("bad RESP length {s:?}")))
}

async fn read_bulk<R: AsyncBufRead + Unpin>(r: &mut R, len: usize) -> io::Result<String> {
    let mut buf = vec![0; len + 2];
    r.read_exact(&mut buf).await?;
    if !buf.ends_with(b"\r\n") {
        return Err(invalid("bulk string not terminated by CRLF".into()));
    }
    buf.truncate(len);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Reads one (possibly nested) reply. Iterative, so no boxed recursion.
pub(crate) async fn read_reply<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Reply> {
    // Open aggregates: (number of items expected, items so far).
    let mut open: Vec<(usize, Vec<Reply>)> = Vec::new();
    loop {
        let line = read_line(r).await?;
        let Some(&kind) = line.as_bytes().first() else {
            return Err(invalid("empty RESP line".into()));
        };
        // `None` when the first character is not ASCII: caught as unknown type.
        let rest = line.get(1..).unwrap_or("");
        let mut value = match kind {
            b'+' | b',' | b'(' => Reply::Simple(rest.to_owned()),
            b'-' => Reply::Error(rest.to_owned()),
            b':' => Reply::Integer(parse_len(rest)?),
            b'#' => Reply::Integer(i64::from(rest == "t")),
            b'_' => Reply::Nil,
            b'$' | b'=' => match parse_len(rest)? {
                -1 => Reply::Nil,
                n if n >= 0 => {
                    let s = read_bulk(r, n as usize).await?;
                    match (kind, s.get(..4)) {
                        // Verbatim string: "txt:" or "mkd:" prefix.
                        (b'=', Some(_)) => Reply::Bulk(s[4..].to_owned()),
                        _ => Reply::Bulk(s),
                    }
                }
                n => return Err(invalid(format!("bad bulk length {n}"))),
            },
            b'*' | b'~' | b'>' | b'%' => match parse_len(rest)? {
                -1 => Reply::Nil,
                n if n >= 0 => {
                    let n = n as usize * if kind == b'%' { 2 } else { 1 };
                    if n == 0 {
                        Reply::Array(Vec::new())
                    } else {
                        open.push((n, Vec::with_capacity(n.min(1024))));
                        continue;
                    }
                }
                n => return Err(invalid(format!("bad aggregate length {n}"))),
            },
            other => {
                return Err(invalid(format!(
                    "unknown RESP type byte {:?} in line {line:?}",
                    other as char
                )))
            }
        };
        // Fold the finished value into the open aggregates.
        loop {
            match open.last_mut() {
                None => return Ok(value),
                Some((expected, items)) => {
                    items.push(value);
                    if items.len() < *expected {
                        break;
                    }
                    let (_, items) = open.pop().expect("just matched Some");
                    value = Reply::Array(items);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(bytes: &[u8]) -> io::Result<Reply> {
        let mut r = bytes;
        read_reply(&mut r).await
    }

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        assert_eq!(encode(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        assert_eq!(encode(&["SET", ""]), b"*2\r\n$3\r\nSET\r\n$0\r\n\r\n");
    }

    #[tokio::test]
    async fn parses_scalars() {
        assert_eq!(parse(b"+OK\r\n").await.unwrap(), Reply::Simple("OK".into()));
        assert_eq!(
            parse(b"-ERR nope\r\n").await.unwrap(),
            Reply::Error("ERR nope".into())
        );
        assert_eq!(parse(b":-42\r\n").await.unwrap(), Reply::Integer(-42));
        assert_eq!(parse(b"$-1\r\n").await.unwrap(), Reply::Nil);
        assert_eq!(
            parse(b"$0\r\n\r\n").await.unwrap(),
            Reply::Bulk(String::new())
        );
        assert_eq!(
            parse(b"$5\r\na\r\nbc\r\n").await.unwrap(),
            Reply::Bulk("a\r\nbc".into())
        );
        assert_eq!(parse(b"_\r\n").await.unwrap(), Reply::Nil);
        assert_eq!(parse(b"#t\r\n").await.unwrap(), Reply::Integer(1));
        assert_eq!(
            parse(b"=8\r\ntxt:abcd\r\n").await.unwrap(),
            Reply::Bulk("abcd".into())
        );
    }

    #[tokio::test]
    async fn parses_nested_arrays_and_maps() {
        let reply = parse(b"*3\r\n:1\r\n*2\r\n+a\r\n$-1\r\n*0\r\n")
            .await
            .unwrap();
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![Reply::Simple("a".into()), Reply::Nil]),
                Reply::Array(vec![]),
            ])
        );
        let map = parse(b"%1\r\n+k\r\n:2\r\n").await.unwrap();
        assert_eq!(
            map,
            Reply::Array(vec![Reply::Simple("k".into()), Reply::Integer(2)])
        );
    }

    #[tokio::test]
    async fn reads_consecutive_replies_in_order() {
        let mut r: &[u8] = b"+A\r\n*1\r\n:7\r\n$1\r\nz\r\n";
        assert_eq!(read_reply(&mut r).await.unwrap(), "A");
        assert_eq!(
            read_reply(&mut r).await.unwrap(),
            Reply::Array(vec![Reply::Integer(7)])
        );
        assert_eq!(read_reply(&mut r).await.unwrap(), "z");
        let eof = read_reply(&mut r).await.unwrap_err();
        assert_eq!(eof.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn rejects_garbage_and_truncation() {
        assert_eq!(
            parse(b"?what\r\n").await.unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            parse(b":12x\r\n").await.unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            parse(b"+OK").await.unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            parse(b"$5\r\nab").await.unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            parse(b"*2\r\n:1\r\n").await.unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn reply_helpers() {
        assert_eq!(Reply::Bulk("x".into()), "x");
        assert_ne!(Reply::Error("x".into()), "x");
        assert_eq!(Reply::Integer(3), 3);
        assert!(Reply::Nil.is_nil());
        assert!(Reply::Error("ERR".into()).ok().is_err());
        assert_eq!(Reply::Simple("OK".into()).ok().unwrap(), "OK");
        assert_eq!(
            Reply::Array(vec![Reply::Integer(1), Reply::Nil]).to_string(),
            "[(integer) 1, (nil)]"
        );
    }
}
