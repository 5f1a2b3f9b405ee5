//! Where events go: a small trait, and the HTTP destination.
//!
//! The HTTP destination POSTs the original raw body with its original content type,
//! signed by hookhost per the Standard Webhooks scheme with the destination's own
//! secret, so the user's service verifies one scheme whatever the provider.
//!
//! `http://` and `https://` share one path: only how a connection is opened differs
//! (TLS in `super::tls`); the keep-alive pool holds hyper senders, whatever is under them.

use super::reach::{Reach, public_addresses};
use super::tls::Tls;
use crate::config::DestinationConfig;
use crate::store::Leased;
use crate::verify::{Key, decode_key};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use hookhost_plugin_sdk::KeyFormat;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use sha2::{Digest, Sha256};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite};

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx.
    Delivered(u16),
    /// Worth trying again: 429, 5xx, timeouts, connection errors.
    Retry {
        status: Option<u16>,
        error: String,
        /// The destination's `Retry-After`, when it sent one in seconds.
        retry_after: Option<Duration>,
    },
    /// Will never succeed as sent: other 4xx, redirects.
    Permanent { status: u16, error: String },
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A place events are delivered to. Brokers can sit beside HTTP behind this.
pub trait Destination: Send + Sync + fmt::Debug {
    /// `endpoint` and `provider` name where the event came from.
    fn deliver<'a>(
        &'a self,
        endpoint: &'a str,
        provider: &'a str,
        event: &'a Leased,
    ) -> BoxFuture<'a, Answer>;
}

/// Response bodies are drained (to keep the connection clean) up to this, then dropped.
const RESPONSE_DRAIN_CAP: usize = 64 * 1024;

/// How long a response's body may take after its status, which is the answer: a body
/// slower than this only costs its connection.
const RESPONSE_DRAIN_WITHIN: Duration = Duration::from_secs(1);

pub struct HttpDestination {
    uri: hyper::Uri,
    /// `host:port` to connect to.
    address: String,
    /// Which addresses it may connect to.
    reach: Reach,
    /// Set for `https://`.
    tls: Option<Tls>,
    key: Vec<u8>,
    connect_timeout: Duration,
    timeout: Duration,
    /// Idle keep-alive connections, each with when it was last used, newest last:
    /// reused before a new one is opened.
    idle: Arc<std::sync::Mutex<Vec<Idle>>>,
    /// How long a connection may idle and still be reused ([`IDLE_FOR`]).
    idle_for: Duration,
}

/// An idle connection, with when it was last used.
type Idle = (Instant, SendRequest<Full<Bytes>>);

/// Idle connections kept per destination; more are closed when returned.
const IDLE_CONNECTIONS: usize = 32;

/// A connection idle longer than this is closed, not reused. A middlebox (a NAT, a
/// load balancer) may drop an idle connection without a word; a request sent on it
/// would wait out the attempt's whole timeout. 90 s, as common HTTP clients keep them.
const IDLE_FOR: Duration = Duration::from_secs(90);

impl fmt::Debug for HttpDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpDestination")
            .field("uri", &self.uri)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl HttpDestination {
    pub fn new(config: &DestinationConfig) -> Result<HttpDestination, String> {
        let uri: hyper::Uri = config
            .url
            .parse()
            .map_err(|e| format!("destination url: {e}"))?;
        let host = uri.host().ok_or("destination url: no host")?.to_string();
        // A user name or password in the URL would travel in the Host header, not as
        // credentials: the destination authenticates hookhost by the signature.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(
                "destination url: a user name or password in the url is not sent as \
                        credentials (the destination checks hookhost's signature)"
                    .into(),
            );
        }
        if config.connect_timeout.is_zero() || config.timeout.is_zero() {
            return Err(
                "destination: connect_timeout_ms and timeout_ms must be greater than 0".into(),
            );
        }
        let (tls, default_port) = match uri.scheme_str() {
            Some("http") => (None, 80),
            Some("https") => (Some(Tls::new(&host, config.ca.as_ref())?), 443),
            _ => return Err("destination url: must start with http:// or https://".into()),
        };
        let port = uri.port_u16().unwrap_or(default_port);
        let key = match decode_key(
            &config.secret,
            &[KeyFormat::Base64AfterPrefix("whsec_".into())],
        ) {
            Ok(Key::Hmac(key)) => key,
            Ok(Key::Ed25519(_) | Key::EcdsaP256(_)) => {
                return Err("destination secret: not an HMAC key".into());
            }
            Err(e) => {
                return Err(format!(
                    "destination secret: {e} (expected whsec_ + base64)"
                ));
            }
        };
        Ok(HttpDestination {
            uri,
            address: format!("{host}:{port}"),
            reach: config.reach,
            tls,
            key,
            connect_timeout: config.connect_timeout,
            timeout: config.timeout,
            idle: Arc::default(),
            idle_for: IDLE_FOR,
        })
    }

    fn request(
        &self,
        endpoint: &str,
        provider: &str,
        event: &Leased,
    ) -> Result<hyper::Request<Full<Bytes>>, String> {
        let timestamp = crate::clock::now_ms() / 1000;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).map_err(|e| e.to_string())?;
        mac.update(format!("{}.{timestamp}.", event.event_id).as_bytes());
        mac.update(&event.body);
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let content_type = event
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map_or("application/octet-stream", |(_, value)| value.as_str());
        let mut request = hyper::Request::post(origin_form(&self.uri))
            .header(
                "host",
                self.uri
                    .authority()
                    .map_or(self.address.as_str(), |a| a.as_str()),
            )
            .header("content-type", content_type)
            .header("webhook-id", &event.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", format!("v1,{signature}"))
            .header(
                "idempotency-key",
                idempotency_key(endpoint, &event.event_id),
            )
            .header("hookhost-endpoint", endpoint)
            .header("hookhost-provider", provider)
            .header("hookhost-event-type", &event.event_type);
        if let (Some(kind), Some(id)) = (&event.resource_kind, &event.resource_id) {
            request = request.header("hookhost-resource", format!("{kind}/{id}"));
        }
        if let Some(version) = event.resource_version {
            request = request.header("hookhost-resource-version", version.to_string());
        }
        request
            .body(Full::new(Bytes::from(event.body.clone())))
            .map_err(|e| format!("cannot build the request: {e}"))
    }

    /// A ready connection: an idle one when `reuse` and there is one (then `true`),
    /// else a new one.
    async fn connection(&self, reuse: bool) -> Result<(SendRequest<Full<Bytes>>, bool), String> {
        if reuse {
            // Skip idle connections the destination has closed meanwhile, and close
            // those idle too long (dropping the sender closes its connection).
            while let Some((since, mut sender)) =
                self.idle.lock().ok().and_then(|mut idle| idle.pop())
            {
                if since.elapsed() < self.idle_for && sender.ready().await.is_ok() {
                    return Ok((sender, true));
                }
            }
        }
        // The connect timeout covers the TLS handshake too: both are setting up.
        match tokio::time::timeout(self.connect_timeout, self.open()).await {
            Ok(sender) => Ok((sender?, false)),
            Err(_) => Err(format!("connect {}: timed out", self.address)),
        }
    }

    /// A new connection, through TLS for `https://`; to a public address only when
    /// that is its reach (the one checked: the name is not resolved again).
    async fn open(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        // An untrusted certificate or a failed handshake, or a name that resolves to
        // no address it may reach, is a connection error like any other: retried on
        // the schedule, its reason in the attempt.
        match self.reach {
            Reach::Any => connect(&self.address, self.tls.as_ref()).await,
            Reach::Public => {
                let addresses = public_addresses(&self.address).await?;
                let stream = tokio::net::TcpStream::connect(&addresses[..])
                    .await
                    .map_err(|e| format!("connect {}: {e}", self.address))?;
                over(stream, &self.address, self.tls.as_ref()).await
            }
        }
    }

    async fn send(&self, request: hyper::Request<Full<Bytes>>, reuse: bool) -> Sent {
        let (mut sender, reused) = match self.connection(reuse).await {
            Ok(connection) => connection,
            Err(error) => return Sent::Answered(retry(error)),
        };
        match sender.send_request(request).await {
            Ok(response) => Sent::Responded(response, sender),
            // The destination closed an idle connection as it was reused: not an
            // answer, so not an attempt; the caller sends again on a new one.
            Err(e) if reused => Sent::StaleConnection(format!("request: {e}")),
            Err(e) => Sent::Answered(retry(format!("request: {e}"))),
        }
    }

    /// Read what is left of a response in the background, within
    /// [`RESPONSE_DRAIN_WITHIN`]: one read in full leaves its connection reusable. The
    /// status is the answer already, and a slow body does not hold it back (the
    /// attempt's own limit would then cut a 2xx received in time).
    fn drain(&self, body: Incoming, sender: SendRequest<Full<Bytes>>) {
        let (idle, idle_for) = (self.idle.clone(), self.idle_for);
        tokio::spawn(async move {
            let drained = tokio::time::timeout(
                RESPONSE_DRAIN_WITHIN,
                Limited::new(body, RESPONSE_DRAIN_CAP).collect(),
            )
            .await;
            if matches!(drained, Ok(Ok(_)))
                && let Ok(mut idle) = idle.lock()
            {
                // The oldest, beneath the others, are closed here once idle too long.
                idle.retain(|(since, _)| since.elapsed() < idle_for);
                if idle.len() < IDLE_CONNECTIONS {
                    idle.push((Instant::now(), sender));
                }
            }
        });
    }
}

/// A `Retry-After`, in seconds or as an HTTP date (RFC 9110 §10.2.3), as a delay from
/// now; a date already past is no delay. Anything else is not one: the schedule applies.
pub(crate) fn retry_after(headers: &hyper::HeaderMap) -> Option<Duration> {
    retry_after_at(headers, SystemTime::now())
}

fn retry_after_at(headers: &hyper::HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A new HTTP/1.1 connection to `address` (`host:port`), through `tls` when given.
pub(crate) async fn connect(
    address: &str,
    tls: Option<&Tls>,
) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect {address}: {e}"))?;
    over(stream, address, tls).await
}

/// HTTP/1.1 on a connected stream to `address`, through `tls` when given.
async fn over(
    stream: tokio::net::TcpStream,
    address: &str,
    tls: Option<&Tls>,
) -> Result<SendRequest<Full<Bytes>>, String> {
    match tls {
        None => handshake(stream).await,
        Some(tls) => {
            let stream = tls
                .connector
                .connect(tls.name.clone(), stream)
                .await
                .map_err(|e| format!("tls {address}: {e}"))?;
            handshake(stream).await
        }
    }
}

/// HTTP/1.1 over any stream; the connection task runs until either side closes it.
async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>, String>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

enum Sent {
    Answered(Answer),
    /// The status and headers arrived (the answer); the body is read after.
    Responded(hyper::Response<Incoming>, SendRequest<Full<Bytes>>),
    StaleConnection(String),
}

fn retry(error: String) -> Answer {
    Answer::Retry {
        status: None,
        error,
        retry_after: None,
    }
}

impl Destination for HttpDestination {
    fn deliver<'a>(
        &'a self,
        endpoint: &'a str,
        provider: &'a str,
        event: &'a Leased,
    ) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let attempt = async {
                let mut reuse = true;
                loop {
                    let request = match self.request(endpoint, provider, event) {
                        Ok(request) => request,
                        Err(error) => return Err(Answer::Permanent { status: 0, error }),
                    };
                    match self.send(request, reuse).await {
                        Sent::Responded(response, sender) => return Ok((response, sender)),
                        Sent::Answered(answer) => return Err(answer),
                        Sent::StaleConnection(_) if reuse => reuse = false,
                        Sent::StaleConnection(error) => return Err(retry(error)),
                    }
                }
            };
            // The timeout is until the status: a status in time is the answer,
            // whatever its body then does.
            let (response, sender) = match tokio::time::timeout(self.timeout, attempt).await {
                Ok(Ok(responded)) => responded,
                Ok(Err(answer)) => return answer,
                Err(_) => {
                    return Answer::Retry {
                        status: None,
                        error: format!("no answer within {:?}", self.timeout),
                        retry_after: None,
                    };
                }
            };
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            self.drain(response.into_body(), sender);
            classify(status, retry_after)
        })
    }
}

/// The status-code contract with the destination. 408 (the request took too long to
/// arrive, often from a proxy under load) and 425 (too early) say the same request may
/// be sent again: retried, like 429 and 5xx.
pub fn classify(status: u16, retry_after: Option<Duration>) -> Answer {
    match status {
        200..=299 => Answer::Delivered(status),
        408 | 425 | 429 | 500..=599 => Answer::Retry {
            status: Some(status),
            error: format!("HTTP {status}"),
            retry_after,
        },
        _ => Answer::Permanent {
            status,
            error: format!("HTTP {status}"),
        },
    }
}

/// Stable per event: the same endpoint and provider event id always give the same key,
/// across retries, replays and restarts.
pub fn idempotency_key(endpoint: &str, event_id: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(endpoint.as_bytes());
    hash.update([0]);
    hash.update(event_id.as_bytes());
    hex::encode(hash.finalize())
}

/// The target a request to `uri` is sent with on its connection (origin form): the
/// path, `/` when the URL has none, and the query. A URL's raw `?token=abc` (written
/// `https://host?token=abc`) is not a request target: sent as it is, no request could
/// be built.
pub fn origin_form(uri: &hyper::Uri) -> String {
    match uri.query() {
        Some(query) => format!("{}?{query}", uri.path()),
        None => uri.path().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_retry_permanent_or_delivered() {
        assert_eq!(classify(204, None), Answer::Delivered(204));
        for status in [408, 425, 429, 500, 502, 503, 504] {
            assert!(
                matches!(classify(status, None), Answer::Retry { .. }),
                "{status}"
            );
        }
        for status in [301, 400, 401, 403, 404, 409, 410, 422] {
            assert!(
                matches!(classify(status, None), Answer::Permanent { .. }),
                "{status}"
            );
        }
        let with_after = classify(429, Some(Duration::from_secs(3)));
        assert!(
            matches!(with_after, Answer::Retry { retry_after: Some(d), .. } if d == Duration::from_secs(3))
        );
    }

    #[test]
    fn retry_after_is_read_in_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let after = |value: &str| {
            let mut headers = hyper::HeaderMap::new();
            headers.insert(
                "retry-after",
                hyper::header::HeaderValue::from_str(value).expect("a header value"),
            );
            retry_after_at(&headers, now)
        };
        assert_eq!(after("120"), Some(Duration::from_secs(120)));
        assert_eq!(after(" 7 "), Some(Duration::from_secs(7)));
        // 2015-10-21 07:28:00 GMT is `now`: 90 s later, and a minute earlier.
        assert_eq!(
            after("Wed, 21 Oct 2015 07:29:30 GMT"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(after("Wed, 21 Oct 2015 07:27:00 GMT"), Some(Duration::ZERO));
        assert_eq!(after("soon"), None);
        assert_eq!(after("-5"), None);
        assert_eq!(retry_after_at(&hyper::HeaderMap::new(), now), None);
    }

    #[test]
    fn urls_with_credentials_and_zero_timeouts_are_refused() {
        let config = |url: &str, connect_ms: u64, timeout_ms: u64| DestinationConfig {
            url: url.into(),
            ca: None,
            secret: crate::verify::Secret::new("whsec_a2V5"),
            connect_timeout: Duration::from_millis(connect_ms),
            timeout: Duration::from_millis(timeout_ms),
            reach: Reach::Any,
        };
        let refused = |c: &DestinationConfig| HttpDestination::new(c).err().unwrap_or_default();
        assert!(HttpDestination::new(&config("http://127.0.0.1:9/in", 1, 1)).is_ok());
        for url in [
            "http://u:p@127.0.0.1:9/in",
            "https://user@hooks.internal/in",
        ] {
            let reason = refused(&config(url, 1, 1));
            assert!(
                reason.starts_with("destination url: a user name"),
                "{url}: {reason}"
            );
            assert!(
                !reason.contains("u:p") && !reason.contains("user@"),
                "{reason}"
            );
        }
        for (connect, total) in [(0, 1), (1, 0)] {
            assert_eq!(
                refused(&config("http://127.0.0.1:9/in", connect, total)),
                "destination: connect_timeout_ms and timeout_ms must be greater than 0"
            );
        }
    }

    /// A destination at `url` on loopback, with a 5 s timeout.
    fn to(url: String) -> HttpDestination {
        HttpDestination::new(&DestinationConfig {
            url,
            ca: None,
            secret: crate::verify::Secret::new("whsec_a2V5"),
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(5),
            reach: Reach::Any,
        })
        .expect("destination")
    }

    fn leased() -> Leased {
        Leased {
            endpoint: "e".into(),
            event_id: "evt_1".into(),
            body: b"{}".to_vec(),
            headers: vec![("content-type".into(), "application/json".into())],
            event_type: "t".into(),
            plugin: "stripe".into(),
            resource_kind: None,
            resource_id: None,
            resource_version: None,
            attempts: 0,
            signed_at: None,
            lease_expires_at_ms: 0,
        }
    }

    /// A destination URL with a query and no path is delivered to at `/?query`.
    #[tokio::test]
    async fn a_url_with_a_query_and_no_path_is_delivered_to() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}?token=abc", listener.local_addr().expect("addr"));
        let read = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut request = vec![0u8; 4096];
            let n = socket.read(&mut request).await.expect("read");
            let head = "HTTP/1.1 204 No Content\r\n\r\n";
            socket.write_all(head.as_bytes()).await.expect("write");
            String::from_utf8_lossy(&request[..n]).into_owned()
        });
        let answer = to(url).deliver("e", "stripe", &leased()).await;
        assert_eq!(answer, Answer::Delivered(204));
        let request = read.await.expect("request");
        assert!(
            request.starts_with("POST /?token=abc HTTP/1.1\r\n"),
            "{request}"
        );
        for (url, target) in [
            ("https://h.example/in?a=1", "/in?a=1"),
            ("https://h.example/in", "/in"),
            ("https://h.example", "/"),
        ] {
            let uri: hyper::Uri = url.parse().expect("uri");
            assert_eq!(origin_form(&uri), target, "{url}");
        }
    }

    /// A kept-alive connection is reused while it has idled less than `idle_for`, and
    /// closed, a new one opened, once it has idled longer.
    #[tokio::test]
    async fn a_connection_idle_too_long_is_closed_not_reused() {
        use axum::extract::{ConnectInfo, State};
        type Peers = std::sync::Arc<std::sync::Mutex<Vec<std::net::SocketAddr>>>;
        let peers = Peers::default();
        let seen = |State(peers): State<Peers>, ConnectInfo(peer)| async move {
            peers.lock().expect("peers").push(peer);
            hyper::StatusCode::NO_CONTENT
        };
        let app = axum::Router::new()
            .route("/in", axum::routing::post(seen))
            .with_state(peers.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/in", listener.local_addr().expect("addr"));
        let service = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, service).await });

        let mut destination = to(url);
        destination.idle_for = Duration::from_millis(300);
        let event = leased();
        for pause in [0, 0, 600] {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let answer = destination.deliver("e", "stripe", &event).await;
            assert_eq!(answer, Answer::Delivered(204));
            // The connection goes back to the idle ones once its answer's body is read,
            // in the background: the next attempt waits for that.
            let deadline = Instant::now() + Duration::from_secs(10);
            while destination.idle.lock().map_or(0, |idle| idle.len()) == 0 {
                assert!(Instant::now() < deadline, "the connection never went idle");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let peers = peers.lock().expect("peers").clone();
        assert_eq!(peers.len(), 3, "{peers:?}");
        assert_eq!(
            peers[0], peers[1],
            "the second attempt reuses the connection"
        );
        assert_ne!(peers[1], peers[2], "the idle connection is not reused");
    }

    /// The status is the answer: a 2xx whose body then trickles is delivered at once,
    /// not after the body (up to [`RESPONSE_DRAIN_WITHIN`]), so the attempt's limit
    /// cannot cut an answer received in time.
    #[tokio::test]
    async fn a_status_is_the_answer_before_its_body_is_read() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/in", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nstarted";
            socket.write_all(head.as_bytes()).await.expect("write");
            // The rest of the body never comes while the attempt is judged.
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let destination = to(url);
        let event = leased();
        // Half the time the body may take: the answer comes well before.
        let within = RESPONSE_DRAIN_WITHIN / 2;
        let answer = tokio::time::timeout(within, destination.deliver("e", "stripe", &event))
            .await
            .expect("the status answers without waiting for the body");
        assert_eq!(answer, Answer::Delivered(200));
    }

    #[test]
    fn idempotency_keys_are_stable_and_distinct() {
        assert_eq!(idempotency_key("a", "e1"), idempotency_key("a", "e1"));
        assert_ne!(idempotency_key("a", "e1"), idempotency_key("b", "e1"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(idempotency_key("ab", "c"), idempotency_key("a", "bc"));
    }
}
