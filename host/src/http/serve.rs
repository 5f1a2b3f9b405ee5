//! Serving connections: a router on hyper's HTTP/1 server, with its read buffer capped.
//!
//! hyper reads a connection ahead of its handler, as much as its read buffer holds
//! (408 KiB by default, reached after a few large bodies), and `axum::serve` offers no
//! way to change that. A request that waits for room in the body budget
//! ([`super::bodies`]) would hold that much of its body outside the budget, on every
//! connection: at 256 connections sending 1 MiB bodies, about 100 MiB. Capped at
//! [`READ_BUFFER`], it is at most 16 MiB there.
//!
//! A connection also has `read_timeout` (`[limits] read_timeout_seconds`) to deliver
//! each request head, idle keep-alive included: past it hyper closes the connection
//! (without an answer), so a sender trickling a head, or holding a connection open and
//! silent, cannot keep a task and its buffer forever. The body's own deadline, and its
//! 408, are the ingest handler's.
//!
//! At most `max_connections` (`[limits] max_connections`) are served at once. At the
//! cap one more connection is accepted and waits for a place, and the rest wait in the
//! kernel's backlog (past it, they are refused), holding neither a task nor a buffer,
//! so that many open connections cannot take the memory the cap above bounds for each.
//! A connection waiting for a place closes every connection kept alive after a request
//! (an idle one at once, a busy one once it has answered), so that senders keeping
//! connections open between requests cannot keep the others waiting: they connect
//! again, in turn. A connection yet to carry a request is left alone (its sender's
//! first request may be on its way), to its head's `read_timeout`.

use axum::Router;
use axum::serve::Listener;
use hyper::rt::{Read, Write};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, TryAcquireError, watch};

/// The most a connection reads ahead of its handler. It also bounds the request head:
/// hyper answers 431 once it holds this much without the head's end, so a head is
/// always read up to 64 KiB and always refused past twice that.
pub const READ_BUFFER: usize = 64 * 1024;

/// Serve `router` on `listener` until `shutdown` resolves; then stop accepting, let
/// the requests in flight finish, and return once every connection has closed. Each
/// request head must arrive within `read_timeout` of the connection waiting for it; at
/// most `max_connections` are open at once.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    read_timeout: Duration,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let max = u32::try_from(max_connections.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
    let room = Arc::new(Semaphore::new(max as usize));
    let crowded = Arc::new(Notify::new());
    let (stop, stopping) = watch::channel(false);
    loop {
        // axum's `accept` (not the inherent one) waits out errors such as running out
        // of file descriptors.
        let (stream, _) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let place = match Arc::clone(&room).try_acquire_owned() {
            Ok(place) => place,
            Err(TryAcquireError::Closed) => break,
            Err(TryAcquireError::NoPermits) => {
                crowded.notify_waiters();
                tokio::select! {
                    place = Arc::clone(&room).acquire_owned() => match place {
                        Ok(place) => place,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        let served = Arc::new(AtomicBool::new(false));
        let connection = connection(
            TokioIo::new(stream),
            router.clone(),
            read_timeout,
            Arc::clone(&served),
        );
        let (crowded, mut stopping) = (Arc::clone(&crowded), stopping.clone());
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let mut closing = false;
            let ended = loop {
                tokio::select! {
                    ended = connection.as_mut() => break ended,
                    () = crowded.notified(), if !closing => {
                        if !served.load(Ordering::Relaxed) {
                            continue;
                        }
                    }
                    _ = stopping.changed(), if !closing => {}
                }
                // No further request on it: closed now if idle, else once answered.
                closing = true;
                connection.as_mut().graceful_shutdown();
            };
            if let Err(error) = ended {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(place);
        });
    }
    drop(listener);
    // Every connection finishes its request in flight and closes; each gives its
    // place back as it ends.
    let _ = stop.send(true);
    let _ = room.acquire_many(max).await;
}

/// One connection: HTTP/1.1 with keep-alive, reading at most [`READ_BUFFER`] ahead,
/// each head within `read_timeout`; `served` is set once it is given a request.
fn connection<I>(
    io: I,
    router: Router,
    read_timeout: Duration,
    served: Arc<AtomicBool>,
) -> http1::Connection<I, Marking>
where
    I: Read + Write + Unpin + Send + 'static,
{
    let service = Marking {
        inner: TowerToHyperService::new(router),
        served,
    };
    http1::Builder::new()
        .max_buf_size(READ_BUFFER)
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .serve_connection(io, service)
}

/// The router's service, marking its connection as one that has carried a request.
struct Marking {
    inner: TowerToHyperService<Router>,
    served: Arc<AtomicBool>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Marking {
    type Response = <TowerToHyperService<Router> as hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
    >>::Response;
    type Error = <TowerToHyperService<Router> as hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
    >>::Error;
    type Future = <TowerToHyperService<Router> as hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
    >>::Future;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        self.served.store(true, Ordering::Relaxed);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::post;
    use http_body_util::BodyExt as _;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};
    use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
    use tokio::sync::Notify;

    /// The server's end of a connection, counting the bytes it has read.
    struct Counted {
        inner: tokio::io::DuplexStream,
        read: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
            let read = buf.filled().len() - before;
            self.read.fetch_add(read, Ordering::SeqCst);
            polled
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A read timeout no test here reaches.
    const LONG: Duration = Duration::from_secs(300);

    fn request(path: &str, body: &[u8]) -> Vec<u8> {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nhost: hookhost\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        request
    }

    /// A connection that has carried large bodies reads at most [`READ_BUFFER`] of the
    /// next request's body while its handler has not asked for it (hyper's default
    /// would read 408 KiB).
    #[tokio::test]
    async fn a_waiting_request_holds_at_most_the_read_buffer_of_its_body() {
        const BODY: usize = 1024 * 1024;
        let entered = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let router = Router::new()
            .route(
                "/read",
                post(|body: Body| async move {
                    let bytes = body.collect().await.map(|b| b.to_bytes().len());
                    format!("{}", bytes.unwrap_or(0))
                }),
            )
            .route(
                "/hold",
                post({
                    let (entered, release) = (entered.clone(), release.clone());
                    // The handler keeps the body, unread: a dropped body would be
                    // read through and discarded, to keep the connection alive.
                    move |body: Body| async move {
                        entered.notify_one();
                        release.notified().await;
                        drop(body);
                        "held"
                    }
                }),
            );
        // The pipe holds every byte the client sends, so only the server limits
        // what it reads.
        let (mut client, server) = tokio::io::duplex(4 * BODY);
        let read = Arc::new(AtomicUsize::new(0));
        let io = Counted {
            inner: server,
            read: read.clone(),
        };
        let served = tokio::spawn(connection(TokioIo::new(io), router, LONG, Arc::default()));

        // Three large bodies read through: the read buffer grows to its largest.
        let body = vec![b'x'; BODY];
        let mut answer = vec![0u8; 4096];
        for _ in 0..3 {
            client
                .write_all(&request("/read", &body))
                .await
                .expect("send");
            let n = client.read(&mut answer).await.expect("answer");
            let answer = String::from_utf8_lossy(&answer[..n]);
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(answer.ends_with(&BODY.to_string()), "{answer}");
        }
        let before = read.load(Ordering::SeqCst);

        // The next request's handler does not read its body.
        client
            .write_all(&request("/hold", &body))
            .await
            .expect("send");
        entered.notified().await;
        tokio::task::yield_now().await;
        let ahead = read.load(Ordering::SeqCst) - before;
        assert!(
            ahead <= READ_BUFFER,
            "read {ahead} bytes of a body nobody asked for (cap {READ_BUFFER})"
        );
        release.notify_one();
        let n = client.read(&mut answer).await.expect("answer");
        assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
        drop(client);
        let _ = served.await;
    }

    /// A request head past twice the read buffer is refused, not read without end.
    #[tokio::test]
    async fn a_head_past_twice_the_read_buffer_is_431() {
        let router = Router::new().route("/read", post(|| async { "ok" }));
        let (mut client, server) = tokio::io::duplex(4 * READ_BUFFER);
        let served = tokio::spawn(connection(
            TokioIo::new(server),
            router,
            LONG,
            Arc::default(),
        ));
        let long = "a".repeat(2 * READ_BUFFER);
        let head = format!(
            "POST /read HTTP/1.1\r\nhost: hookhost\r\nx-long: {long}\r\ncontent-length: 0\r\n\r\n"
        );
        client.write_all(head.as_bytes()).await.expect("send");
        let mut answer = vec![0u8; 1024];
        let n = client.read(&mut answer).await.expect("answer");
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        drop(client);
        let _ = served.await;
    }

    /// A head of at most 100 fields is read; one more is 431, and a head that is not
    /// HTTP (a control byte in a value, a folded line, two different lengths) is 400,
    /// both answered by hyper without a body, as the README's table says.
    #[tokio::test]
    async fn a_head_of_101_fields_is_431_and_a_malformed_one_400() {
        let router = Router::new().route("/read", post(|| async { "ok" }));
        let fields =
            |n: usize| -> String { (0..n).map(|i| format!("x-field-{i}: {i}\r\n")).collect() };
        for (head, expected) in [
            // With `host` and `content-length`: 100, then 101 fields.
            (fields(98), "HTTP/1.1 200"),
            (fields(99), "HTTP/1.1 431"),
            ("x-control: a\x01b\r\n".to_string(), "HTTP/1.1 400"),
            ("x-folded: a\r\n b\r\n".to_string(), "HTTP/1.1 400"),
            ("content-length: 5\r\n".to_string(), "HTTP/1.1 400"),
        ] {
            let (mut client, server) = tokio::io::duplex(4 * READ_BUFFER);
            let served = tokio::spawn(connection(
                TokioIo::new(server),
                router.clone(),
                LONG,
                Arc::default(),
            ));
            let request =
                format!("POST /read HTTP/1.1\r\nhost: hookhost\r\n{head}content-length: 0\r\n\r\n");
            client.write_all(request.as_bytes()).await.expect("send");
            let mut answer = vec![0u8; 1024];
            let n = client.read(&mut answer).await.expect("answer");
            let answer = String::from_utf8_lossy(&answer[..n]);
            assert!(answer.starts_with(expected), "{expected}: {answer}");
            drop(client);
            let _ = served.await;
        }
    }

    /// A connection whose head stops arriving is closed once the read timeout passes;
    /// so is a kept-alive connection that sends nothing after its last answer.
    #[tokio::test]
    async fn a_head_not_sent_within_the_read_timeout_closes_the_connection() {
        const TIMEOUT: Duration = Duration::from_millis(200);
        let router = Router::new().route("/read", post(|| async { "ok" }));

        // Half a head, then silence.
        let (mut client, server) = tokio::io::duplex(READ_BUFFER);
        let served = tokio::spawn(connection(
            TokioIo::new(server),
            router.clone(),
            TIMEOUT,
            Arc::default(),
        ));
        client
            .write_all(b"POST /read HTTP/1.1\r\nhost: hook")
            .await
            .expect("send");
        assert_eq!(until_closed(&mut client).await, "");
        let _ = served.await;

        // One request answered, then an idle keep-alive connection.
        let (mut client, server) = tokio::io::duplex(READ_BUFFER);
        let served = tokio::spawn(connection(
            TokioIo::new(server),
            router,
            TIMEOUT,
            Arc::default(),
        ));
        client
            .write_all(&request("/read", b""))
            .await
            .expect("send");
        let mut answer = vec![0u8; 1024];
        let n = client.read(&mut answer).await.expect("answer");
        assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
        assert_eq!(until_closed(&mut client).await, "");
        let _ = served.await;
    }

    /// Everything the server sends until it closes; fails (not hangs) if it never does.
    async fn until_closed(client: &mut tokio::io::DuplexStream) -> String {
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
            .await
            .expect("the server closes the connection")
            .expect("read");
        String::from_utf8_lossy(&answer).into_owned()
    }
}
