//! A loopback HTTP server that answers with scripted responses: an agent's tests, its
//! examples and this crate's own run the whole client offline.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most bytes of a request's head (request line and headers) the server reads.
pub const MAX_REQUEST_HEAD_BYTES: usize = 64 << 10;
/// The most bytes of a request's body the server reads.
pub const MAX_REQUEST_BODY_BYTES: usize = 16 << 20;
/// How long the server waits for a client to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One response of the script: a status, headers, a body sent in pieces (chunked, each
/// piece a chunk, apart by a pause), and optionally broken off before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedResponse {
    status: u16,
    headers: Vec<(String, String)>,
    pieces: Vec<Vec<u8>>,
    pause: Duration,
    cut: bool,
}

impl ScriptedResponse {
    /// `200` with `content-type: text/event-stream`: a streamed reply.
    pub fn sse(body: impl Into<Vec<u8>>) -> Self {
        Self::with_status(200, "text/event-stream", body)
    }

    /// `200` with `content-type: application/json`: a whole reply.
    pub fn json(body: impl Into<Vec<u8>>) -> Self {
        Self::with_status(200, "application/json", body)
    }

    /// `status` with a JSON body (an error).
    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self::with_status(status, "application/json", body)
    }

    fn with_status(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            pieces: vec![body.into()],
            pause: Duration::ZERO,
            cut: false,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sends the body in pieces of `size` bytes (at least 1), `pause` apart.
    pub fn in_pieces(mut self, size: usize, pause: Duration) -> Self {
        let body: Vec<u8> = self.pieces.concat();
        self.pieces = body.chunks(size.max(1)).map(<[u8]>::to_vec).collect();
        self.pause = pause;
        self
    }

    /// Closes the connection after the first `bytes` bytes of the body, without ending it:
    /// the client sees the body break off.
    pub fn cut_after(mut self, bytes: usize) -> Self {
        let body: Vec<u8> = self.pieces.concat();
        self.pieces = vec![body[..bytes.min(body.len())].to_vec()];
        self.cut = true;
        self
    }

    fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        write!(out, "HTTP/1.1 {} Scripted\r\n", self.status)?;
        for (name, value) in &self.headers {
            write!(out, "{name}: {value}\r\n")?;
        }
        write!(
            out,
            "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )?;
        out.flush()?;
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 && !self.pause.is_zero() {
                std::thread::sleep(self.pause);
            }
            if !piece.is_empty() {
                write!(out, "{:x}\r\n", piece.len())?;
                out.write_all(piece)?;
                write!(out, "\r\n")?;
                out.flush()?;
            }
        }
        if !self.cut {
            write!(out, "0\r\n\r\n")?;
            out.flush()?;
        }
        Ok(())
    }
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRequest {
    /// `POST`, ….
    pub method: String,
    /// The path and query.
    pub target: String,
    /// The headers, names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte.
    pub body: Vec<u8>,
}

impl ReceivedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A server on `127.0.0.1` that answers each connection with the next response of its
/// script, one request per connection, and stops when the script is done (a later request
/// finds no server: a connection error). Dropping it stops it.
#[derive(Debug)]
pub struct ScriptedServer {
    url: String,
    addr: SocketAddr,
    received: Arc<Mutex<Vec<ReceivedRequest>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ScriptedServer {
    /// Starts a server that answers with `script`, in order, on a free port.
    pub fn start(script: Vec<ScriptedResponse>) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (received, stop) = (received.clone(), stop.clone());
            std::thread::Builder::new()
                .name("scripted-server".to_owned())
                .spawn(move || serve(&listener, script, &received, &stop))?
        };
        Ok(Self {
            url: format!("http://{addr}"),
            addr,
            received,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes a server waiting in `accept`; it sees the flag and stops.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(
    listener: &TcpListener,
    script: Vec<ScriptedResponse>,
    received: &Mutex<Vec<ReceivedRequest>>,
    stop: &AtomicBool,
) {
    for response in script {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // A client that goes away mid-way (a dropped stream) is not the server's error.
        let _ = answer(stream, &response, received);
    }
}

fn answer(
    stream: TcpStream,
    response: &ScriptedResponse,
    received: &Mutex<Vec<ReceivedRequest>>,
) -> io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let request = read_request(&mut reader)?;
    received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(request);
    let mut out = stream;
    response.write_to(&mut out)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

fn read_request(reader: &mut impl BufRead) -> io::Result<ReceivedRequest> {
    let mut head = Vec::new();
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = reader
            .by_ref()
            .take((MAX_REQUEST_HEAD_BYTES - head.len().min(MAX_REQUEST_HEAD_BYTES)) as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 || !line.ends_with(b"\n") {
            return Err(invalid("the request's head is cut off or too long"));
        }
        head.extend_from_slice(&line);
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if text.is_empty() {
            break;
        }
        lines.push(text);
    }
    let mut lines = lines.into_iter();
    let start = lines.next().ok_or_else(|| invalid("no request line"))?;
    let mut parts = start.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| {
            v.parse::<usize>()
                .map_err(|_| invalid("bad content-length"))
        })
        .transpose()?
        .unwrap_or(0);
    if length > MAX_REQUEST_BODY_BYTES {
        return Err(invalid("the request's body is too long"));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(ReceivedRequest {
        method,
        target,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_over_the_head_or_body_limit_is_refused_unread() {
        let head = format!(
            "POST / HTTP/1.1\r\nx: {}\r\n\r\n",
            "a".repeat(MAX_REQUEST_HEAD_BYTES)
        );
        assert!(read_request(&mut head.as_bytes()).is_err());
        let body = format!(
            "POST / HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
            MAX_REQUEST_BODY_BYTES + 1
        );
        assert!(read_request(&mut body.as_bytes()).is_err());
        let cut = "POST /v1/x HTTP/1.1\r\ncontent-length: 9\r\n\r\n{}";
        assert!(read_request(&mut cut.as_bytes()).is_err());
        let ok = "POST /v1/x?a=b HTTP/1.1\r\nX-Key: v\r\ncontent-length: 2\r\n\r\n{}";
        let request = read_request(&mut ok.as_bytes()).unwrap();
        assert_eq!(
            (
                request.target.as_str(),
                request.header("x-key"),
                request.body.as_slice()
            ),
            ("/v1/x?a=b", Some("v"), &b"{}"[..])
        );
    }
}
