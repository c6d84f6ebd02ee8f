//! The scripted upstream of the workspace's tests, examples and benchmarks: a real server on a
//! loopback TCP socket that records exactly the bytes it received and answers each request
//! with the steps a [`Script`] gives for it. A step writes bytes, pauses, waits for the test,
//! breaks the connection off or never answers, so a malformed or cut reply is written as
//! easily as a well-formed one, and nothing mocks the client between the two.
//!
//! [`provider`] scripts a provider that answers at once (OpenAI Chat Completions and Anthropic
//! Messages, whole or streamed): the benchmark's upstream. `scripts/agents/upstream.py` is
//! the same for the scripts that run real agents.
//!
//! ```
//! use cacheline_upstream::{Step, Upstream, always, whole};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! let up = Upstream::start(always(whole("200 OK", &[], b"hello"))).await?;
//! let mut s = tokio::net::TcpStream::connect(up.addr()).await?;
//! s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
//! let mut reply = vec![0; 64];
//! let n = s.read(&mut reply).await?;
//! assert!(reply[..n].ends_with(b"hello"));
//! assert_eq!(up.received(), [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()]);
//! # let _ = Step::Close;
//! # Ok(()) }
//! ```

pub mod provider;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The most bytes of one request (head and body) the upstream reads: a longer one is
/// answered `413` and its connection closed.
pub const MAX_REQUEST_BYTES: usize = 16 << 20;

/// One step of a scripted reply.
#[derive(Clone)]
pub enum Step {
    /// Write these bytes (and flush).
    Send(Vec<u8>),
    /// Pause this long.
    Sleep(Duration),
    /// Wait until notified, watching the client: a client that closes ends the reply.
    Wait(Arc<Notify>),
    /// Close the connection at once, with a reset (linger zero): the reply breaks off.
    Close,
    /// Never answer (until the client drops the connection).
    Hang,
}

/// The reply to the `n`th request (from 0, across connections), given its raw bytes.
pub type Script = Arc<dyn Fn(usize, &[u8]) -> Vec<Step> + Send + Sync>;

/// The same reply to every request.
pub fn always(reply: Vec<u8>) -> Script {
    Arc::new(move |_, _| vec![Step::Send(reply.clone())])
}

/// A scripted upstream on `127.0.0.1`, serving until its runtime ends. Connections are kept
/// alive: a client may send one request after another on one connection.
pub struct Upstream {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    client_gone: Arc<Notify>,
}

impl Upstream {
    /// Starts serving `script` on a free port, on the current tokio runtime.
    pub async fn start(script: Script) -> io::Result<Upstream> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let upstream = Upstream {
            addr: listener.local_addr()?,
            received: Arc::default(),
            client_gone: Arc::default(),
        };
        let (received, client_gone) = (upstream.received.clone(), upstream.client_gone.clone());
        tokio::spawn(serve_connections(
            listener,
            script,
            Some(received),
            client_gone,
        ));
        Ok(upstream)
    }

    /// Starts serving `script` on a thread of its own, for a test without a runtime; it serves
    /// until the process ends.
    pub fn start_on_thread(script: Script) -> io::Result<Upstream> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let upstream = runtime.block_on(Upstream::start(script))?;
        std::thread::Builder::new()
            .name("scripted-upstream".to_owned())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(upstream)
    }

    /// Serves `script` on `listener` until accepting fails: what a program that owns its
    /// listener (the benchmark) runs; it records nothing.
    pub async fn serve(listener: TcpListener, script: Script) -> io::Result<()> {
        serve_connections(listener, script, None, Arc::default()).await
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, byte for byte, in order.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Notified when a write to a client failed, or a client closed while a reply waited.
    pub fn client_gone(&self) -> &Notify {
        &self.client_gone
    }
}

/// Accepts connections until accepting fails, each answered by a task of its own; records
/// the requests when given where.
async fn serve_connections(
    listener: TcpListener,
    script: Script,
    received: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
    client_gone: Arc<Notify>,
) -> io::Result<()> {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (stream, _) = listener.accept().await?;
        // Small writes are the point of a stream: no Nagle delay.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            script: script.clone(),
            received: received.clone(),
            count: count.clone(),
            client_gone: client_gone.clone(),
        };
        tokio::spawn(connection.answer(stream));
    }
}

/// What one connection's task shares with the server.
struct Connection {
    script: Script,
    received: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
    count: Arc<std::sync::atomic::AtomicUsize>,
    client_gone: Arc<Notify>,
}

impl Connection {
    /// Answers each request of the connection with its script, until either side ends it.
    async fn answer(self, mut s: TcpStream) {
        let mut buf = Vec::new();
        loop {
            let request = match read_request(&mut s, &mut buf).await {
                Ok(Some(request)) => request,
                Ok(None) => return,
                Err(TooLarge) => {
                    let reply = whole("413 Payload Too Large", &[], b"request over 16 MiB");
                    let _ = s.write_all(&reply).await;
                    return;
                }
            };
            let n = match &self.received {
                Some(received) => {
                    let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
                    received.push(request.clone());
                    received.len() - 1
                }
                None => self
                    .count
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            };
            for step in (self.script)(n, &request) {
                if !self.step(&mut s, step).await {
                    return;
                }
            }
        }
    }

    /// One step; whether the connection goes on.
    async fn step(&self, s: &mut TcpStream, step: Step) -> bool {
        match step {
            Step::Send(bytes) => {
                if s.write_all(&bytes).await.is_err() || s.flush().await.is_err() {
                    self.client_gone.notify_one();
                    return false;
                }
            }
            Step::Sleep(pause) => tokio::time::sleep(pause).await,
            Step::Wait(go) => {
                let mut probe = [0u8; 1];
                tokio::select! {
                    _ = go.notified() => {}
                    read = s.read(&mut probe) => {
                        if matches!(read, Ok(0) | Err(_)) {
                            self.client_gone.notify_one();
                            return false;
                        }
                    }
                }
            }
            Step::Close => {
                // A reset, not a clean end: the reply breaks off as a dropped upstream's does.
                #[allow(deprecated)]
                let _ = s.set_linger(Some(Duration::ZERO));
                return false;
            }
            Step::Hang => {
                let mut probe = [0u8; 1];
                let _ = s.read(&mut probe).await;
                return false;
            }
        }
        true
    }
}

/// A request over [`MAX_REQUEST_BYTES`].
struct TooLarge;

/// Reads one raw request (head and body, chunked or sized) from `buf` and then the stream;
/// `None` when the client closes first.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, TooLarge> {
    let total = loop {
        if let Some(total) = request_len(buf) {
            break total;
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return Err(TooLarge);
        }
        if !fill(s, buf).await {
            return Ok(None);
        }
    };
    if total > MAX_REQUEST_BYTES {
        return Err(TooLarge);
    }
    while buf.len() < total {
        if !fill(s, buf).await {
            return Ok(None);
        }
    }
    Ok(Some(buf.drain(..total).collect()))
}

/// Reads what the stream has into `buf`; whether anything came.
async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut tmp = [0u8; 65536];
    match s.read(&mut tmp).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            true
        }
    }
}

/// The length of the first request in `b`, once it is known: its head, then a sized body, or
/// a chunked body once it is complete.
fn request_len(b: &[u8]) -> Option<usize> {
    let end = find(b, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&b[..end]);
    let body_start = end + 4;
    if let Some(n) = header(&head, "content-length") {
        // A length that does not parse reads as too long: the request is refused.
        return Some(body_start.saturating_add(n.parse().unwrap_or(usize::MAX)));
    }
    if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        return chunked_len(&b[body_start..]).map(|n| body_start + n);
    }
    Some(body_start)
}

/// Where `needle` first stands in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The value of header `name` (any case) in a request or reply head.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// The length of a complete chunked body at the start of `b`, if complete.
fn chunked_len(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        let line = find(&b[i..], b"\r\n")?;
        let size = std::str::from_utf8(&b[i..i + line])
            .ok()?
            .split(';')
            .next()?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        i += line + 2;
        if size == 0 {
            // The last chunk's line, its trailer fields if any, and the empty line.
            if b[i..].starts_with(b"\r\n") {
                return Some(i + 2);
            }
            return find(&b[i..], b"\r\n\r\n").map(|end| i + end + 4);
        }
        if b.len() < i + size + 2 {
            return None;
        }
        i += size + 2;
    }
}

/// The chunks of a chunked body and whether it ended with its last chunk.
pub fn dechunk(b: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut chunks = Vec::new();
    let mut i = 0;
    loop {
        let Some(line) = find(&b[i..], b"\r\n") else {
            return (chunks, false);
        };
        let Ok(size) = usize::from_str_radix(
            std::str::from_utf8(&b[i..i + line]).unwrap_or("x").trim(),
            16,
        ) else {
            return (chunks, false);
        };
        i += line + 2;
        if size == 0 {
            return (chunks, true);
        }
        if b.len() < i + size {
            chunks.push(b[i..].to_vec());
            return (chunks, false);
        }
        chunks.push(b[i..i + size].to_vec());
        i += size + 2;
    }
}

/// A request's head (as text) and its body (dechunked when it was sent chunked).
pub fn split_request(request: &[u8]) -> (String, Vec<u8>) {
    let Some(end) = find(request, b"\r\n\r\n") else {
        return (String::from_utf8_lossy(request).into_owned(), Vec::new());
    };
    let head = String::from_utf8_lossy(&request[..end]).into_owned();
    let body = &request[end + 4..];
    let body = if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(body).0.concat()
    } else {
        body.to_vec()
    };
    (head, body)
}

/// A whole reply with a `Content-Length`: `status` is the status line's rest (`200 OK`).
pub fn whole(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

/// The head of a chunked reply; its body follows as [`chunk`]s and [`LAST_CHUNK`].
pub fn chunked(status: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("Transfer-Encoding: chunked\r\n\r\n");
    r.into_bytes()
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", data.len()).into_bytes();
    c.extend_from_slice(data);
    c.extend_from_slice(b"\r\n");
    c
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_known_whole_once_its_body_is() {
        assert_eq!(request_len(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(request_len(b"GET / HTTP/1.1\r\n\r\nnext"), Some(18));
        let sized = b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(request_len(sized), Some(sized.len()));
        let chunked = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        assert_eq!(request_len(chunked), Some(chunked.len()));
        assert_eq!(request_len(&chunked[..chunked.len() - 2]), None);
        let trailed =
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nx-sum: 1\r\n\r\n";
        assert_eq!(request_len(trailed), Some(trailed.len()));
        assert_eq!(request_len(&trailed[..trailed.len() - 2]), None);
        let bad = b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n";
        assert!(request_len(bad).is_some_and(|n| n > MAX_REQUEST_BYTES));
        let (head, body) = split_request(chunked);
        assert!(head.ends_with("chunked"));
        assert_eq!(body, b"{}");
    }

    #[test]
    fn a_chunked_body_reads_back_as_its_chunks() {
        let body = [chunk(b"ab"), chunk(b"c"), LAST_CHUNK.to_vec()].concat();
        assert_eq!(dechunk(&body), (vec![b"ab".to_vec(), b"c".to_vec()], true));
        assert_eq!(dechunk(&body[..4]), (vec![b"a".to_vec()], false));
    }
}
