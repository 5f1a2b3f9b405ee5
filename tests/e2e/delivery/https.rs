//! `https://` destinations against a real TLS downstream on loopback, with a CA and a
//! certificate for `localhost` made at test time: trusted through `ca_file`, refused
//! (and retried) without it, refused for the wrong name, and a bad `ca_file` refused at
//! start.

use super::*;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A test CA, and the downstream's TLS settings with a certificate it issued.
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

/// A CA, and a server certificate from it for `names` (DNS names or IP addresses).
fn pki(names: &[&str]) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "hookhost test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key"))
        .expect("CA certificate");

    let key = KeyPair::generate().expect("server key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut leaf = CertificateParams::new(names.clone()).expect("server params");
    leaf.distinguished_name.push(DnType::CommonName, &names[0]);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf.signed_by(&key, &ca).expect("server certificate");

    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .expect("server TLS config");
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Pki {
        ca_pem: ca.pem(),
        server: Arc::new(server),
    }
}

/// Accepts TCP, then TLS; connections whose handshake fails are dropped and not counted.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: Arc<AtomicUsize>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            // A client that refuses the certificate aborts its handshake: next one.
            let handshake = self.acceptor.accept(tcp);
            if let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(5), handshake).await {
                self.handshakes.fetch_add(1, Ordering::SeqCst);
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The scripted downstream of `super`, behind TLS; also counts completed handshakes.
async fn tls_downstream(pki: &Pki) -> (Downstream, u16, Arc<AtomicUsize>) {
    let downstream = Downstream::default();
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = tcp.local_addr().expect("addr").port();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(pki.server.clone()),
        handshakes: handshakes.clone(),
    };
    let app = downstream.router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (downstream, port, handshakes)
}

/// hookhost delivering to `https://{host}:{port}/hook`, with `ca.pem` (the test CA)
/// written beside its configuration; `extra` adds destination keys (`ca_file`).
async fn start_https(pki: &Pki, host: &str, port: u16, schedule: &str, extra: &str) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("ca.pem"), &pki.ca_pem).expect("write ca.pem");
    let url = format!("https://{host}:{port}/hook");
    Server::start_in(dir, &config(&url, schedule, extra))
        .await
        .expect("server starts")
}

/// Poll until the event has had `n` attempts (20 s at most).
async fn attempted(server: &Server, id: &str, n: i64) -> ReceiptRow {
    let within = Duration::from_secs(20);
    server
        .receipt_once("stripe", id, within, |row| row.attempts >= n)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_delivery_with_a_ca_file_is_signed_and_keeps_its_connection_alive() {
    let pki = pki(&["localhost", "127.0.0.1"]);
    let (downstream, port, handshakes) = tls_downstream(&pki).await;
    let server = start_https(&pki, "localhost", port, "[0, 0]", "ca_file = \"ca.pem\"\n").await;

    let body = accept(&server, "evt_tls_1").await;
    let row = settled(&server, "evt_tls_1", "delivered").await;
    assert_eq!((row.attempts, row.last_error), (1, None));
    let seen = downstream.received("evt_tls_1");
    assert_eq!(seen.len(), 1);
    let h = &seen[0].headers;
    assert_eq!(seen[0].body, body.as_bytes(), "the original raw body");
    assert_eq!(h.get("host").expect("host"), &format!("localhost:{port}"));
    assert_eq!(h.get("hookhost-endpoint").expect("endpoint"), "stripe");
    assert!(h.get("idempotency-key").is_some());
    let ts = h
        .get("webhook-timestamp")
        .and_then(|v| v.to_str().ok())
        .expect("timestamp");
    let expected = b64(&hmac_sha256(
        DESTINATION_KEY,
        &[format!("evt_tls_1.{ts}.").as_bytes(), &seen[0].body],
    ));
    assert_eq!(
        h.get("webhook-signature").expect("signature"),
        &format!("v1,{expected}")
    );

    // The next delivery reuses the kept-alive TLS connection: no second handshake.
    accept(&server, "evt_tls_2").await;
    settled(&server, "evt_tls_2", "delivered").await;
    assert_eq!(downstream.received("evt_tls_2").len(), 1);
    assert_eq!(handshakes.load(Ordering::SeqCst), 1);

    // An IP address in the URL is verified against the certificate's IP SAN.
    let by_address = start_https(&pki, "127.0.0.1", port, "[0]", "ca_file = \"ca.pem\"\n").await;
    accept(&by_address, "evt_tls_ip").await;
    settled(&by_address, "evt_tls_ip", "delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_https_certificate_is_a_recorded_connection_error_and_retried() {
    let pki = pki(&["localhost", "127.0.0.1"]);
    let (downstream, port, handshakes) = tls_downstream(&pki).await;
    // No ca_file: the test CA is in no root program.
    let server = start_https(&pki, "localhost", port, "[0, 3600]", "").await;

    accept(&server, "evt_untrusted").await;
    let row = attempted(&server, "evt_untrusted", 1).await;
    assert_eq!(row.state, "pending", "retried on the schedule: {row:?}");
    let error = row.last_error.expect("the attempt's error");
    assert!(
        error.starts_with("tls localhost:")
            && error.contains("invalid peer certificate: UnknownIssuer"),
        "{error}"
    );
    let attempts = server
        .app
        .store
        .attempts("stripe", "evt_untrusted")
        .await
        .expect("attempts");
    assert_eq!(attempts, vec![(1, None, Some(error))]);
    // Nothing was sent: the request never left the refused handshake.
    assert!(downstream.received("evt_untrusted").is_empty());
    assert_eq!(handshakes.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_certificate_for_another_name_is_refused() {
    let pki = pki(&["elsewhere.example"]);
    let (downstream, port, _) = tls_downstream(&pki).await;
    let server = start_https(
        &pki,
        "localhost",
        port,
        "[0, 3600]",
        "ca_file = \"ca.pem\"\n",
    )
    .await;
    accept(&server, "evt_wrong_name").await;
    let row = attempted(&server, "evt_wrong_name", 1).await;
    assert_eq!(row.state, "pending");
    let error = row.last_error.expect("the attempt's error");
    assert!(
        error.contains("certificate not valid for name \"localhost\""),
        "{error}"
    );
    assert!(downstream.received("evt_wrong_name").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_that_is_not_pem_stops_the_start_naming_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("ca.pem"), "not a certificate\n").expect("write");
    let config = config("https://localhost:9/hook", "[0]", "ca_file = \"ca.pem\"\n");
    let error = Server::start_in(dir, &config)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        error.contains("hookhost.toml: endpoint[0] (id \"stripe\").destination.ca_file: ")
            && error.contains("ca.pem: no PEM certificate"),
        "{error}"
    );
}
