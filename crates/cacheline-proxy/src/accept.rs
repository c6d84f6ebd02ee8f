//! The listener's side: the accept loop, one task per client connection, and what bounds
//! them: a header-read timeout, an idle keep-alive timeout, a limit on connections served at
//! once (idle ones shed first, before a new one waits), and a reset instead of a clean end
//! when an upstream's reply breaks off.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::conn::{ConnState, InFlight};
use crate::forward::Shared;

/// A response body that keeps its request in flight until it is done.
pub(crate) struct Tracked<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A client's socket, watched: bytes read start the header-read timeout, and a connection
/// whose reply broke off ends with a reset (`SO_LINGER` zero), never with the clean end that
/// would make a close-delimited reply (an HTTP/1.0 client's) look complete.
struct ConnIo {
    stream: TcpStream,
    conn: Arc<ConnState>,
}

impl ConnIo {
    fn reset(&self) {
        let _ = self.stream.set_zero_linger();
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.read_bytes();
        }
        polled
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.conn.aborted() {
            // No FIN: the socket is reset when dropped.
            self.reset();
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Drop for ConnIo {
    fn drop(&mut self) {
        if self.conn.aborted() {
            self.reset();
        }
    }
}

/// The client connections served at once, against their limit.
pub(crate) struct Connections {
    open: AtomicUsize,
    max: usize,
    /// While set, a connection that becomes idle closes.
    shedding: AtomicBool,
    /// Bumped to tell every idle connection to close now.
    shed: watch::Sender<u64>,
    /// Told when a connection closes.
    closed: Notify,
}

impl Connections {
    pub(crate) fn new(max: usize) -> Self {
        Connections {
            open: AtomicUsize::new(0),
            max: max.max(1),
            shedding: AtomicBool::new(false),
            shed: watch::channel(0).0,
            closed: Notify::new(),
        }
    }

    /// Closes every idle connection, and every one that becomes idle until
    /// [`Connections::calm`].
    fn shed(&self) {
        self.shedding.store(true, Ordering::Release);
        self.shed.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn calm(&self) {
        self.shedding.store(false, Ordering::Release);
    }

    fn shedding(&self) -> bool {
        self.shedding.load(Ordering::Acquire)
    }

    /// Client connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// A connection counted open until dropped.
struct Slot(Arc<Connections>);

impl Slot {
    fn new(conns: &Arc<Connections>) -> Self {
        conns.open.fetch_add(1, Ordering::AcqRel);
        Slot(conns.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify_one();
    }
}

/// Whether accepting failed for want of descriptors.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Accepts until stopped: past the connection limit, or out of descriptors, idle
/// connections (the clients' kept-alive ones, the upstreams' pooled ones) are closed first;
/// a new connection waits (in the listener's backlog) for a place.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    conns: Arc<Connections>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        while conns.open() >= conns.max {
            conns.shed();
            shared.drop_idle_upstreams();
            tokio::select! {
                _ = conns.closed.notified() => {}
                _ = stopped.changed() => return,
            }
        }
        conns.calm();
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                if out_of_descriptors(&e) {
                    conns.shed();
                    shared.drop_idle_upstreams();
                }
                // Or a reset before accept: wait a little, go on serving.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                    _ = conns.closed.notified() => {}
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let slot = Slot::new(&conns);
        tokio::spawn(serve(stream, shared.clone(), slot, stopped.clone()));
    }
}

/// Serves one client connection until it ends, times out, is shed or the proxy stops.
async fn serve(
    stream: TcpStream,
    shared: Arc<Shared>,
    slot: Slot,
    mut stopped: watch::Receiver<bool>,
) {
    let conn = Arc::new(ConnState::new());
    let io = ConnIo {
        stream,
        conn: conn.clone(),
    };
    let limits = shared.limits.clone();
    let service_conn = conn.clone();
    let local_stop = stopped.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let in_flight = service_conn.request_started();
        let shared = shared.clone();
        let conn = service_conn.clone();
        let stop = local_stop.clone();
        async move {
            let body = if crate::page::is_local(req.uri().path()) {
                crate::page::serve(shared, stop, req)
                    .await
                    .map(http_body_util::Either::Right)
            } else {
                match crate::forward::handle(shared, req, conn).await {
                    Ok(r) => r.map(http_body_util::Either::Left),
                    Err(never) => match never {},
                }
            };
            Ok::<_, std::convert::Infallible>(body.map(|inner| Tracked {
                inner,
                _in_flight: in_flight,
            }))
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .auto_date_header(false)
        .max_buf_size(crate::limits::CONNECTION_BUFFER_BYTES)
        .serve_connection(TokioIo::new(io), service);
    let mut served = std::pin::pin!(served);
    let mut shed = slot.0.shed.subscribe();
    loop {
        let deadline = conn.deadline(&limits);
        let timer = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = served.as_mut() => return,
            _ = timer => {
                if conn.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    // Nothing in flight: closing loses nothing.
                    return;
                }
            }
            _ = conn.changed.notified() => {}
            changed = shed.changed() => {
                if changed.is_ok() && conn.is_idle() {
                    return;
                }
            }
            _ = stopped.changed() => {
                served.as_mut().graceful_shutdown();
                let _ = served.await;
                return;
            }
        }
        if slot.0.shedding() && conn.is_idle() {
            return;
        }
    }
}
