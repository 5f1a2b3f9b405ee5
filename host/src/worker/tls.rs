//! TLS for `https://` destinations: rustls on its `ring` provider.
//!
//! Trust is Mozilla's root program as compiled into `webpki-roots`, plus the
//! certificates of the destination's optional `ca_file` (added to those roots, never
//! replacing them). The certificate must name the URL's host; there is no way to turn
//! verification off.

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The certificates of a destination's `ca_file`, checked when the configuration is
/// read, so a bad file stops the start with the key named rather than failing every
/// delivery later.
#[derive(Clone)]
pub struct CaFile {
    pub path: PathBuf,
    pub certificates: Vec<CertificateDer<'static>>,
}

impl fmt::Debug for CaFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

impl CaFile {
    /// Read a PEM file of one or more `CERTIFICATE` sections (other sections are
    /// skipped); each must be usable as a trust anchor.
    pub fn read(path: &Path) -> Result<CaFile, String> {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let certificates = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: not valid PEM: {e}", path.display()))?;
        if certificates.is_empty() {
            return Err(format!(
                "{}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                path.display()
            ));
        }
        let mut roots = RootCertStore::empty();
        for (i, certificate) in certificates.iter().enumerate() {
            roots
                .add(certificate.clone())
                .map_err(|e| format!("{}: certificate {}: {e}", path.display(), i + 1))?;
        }
        Ok(CaFile {
            path: path.to_path_buf(),
            certificates,
        })
    }
}

/// What an `https://` destination connects with.
#[derive(Clone)]
pub struct Tls {
    pub connector: tokio_rustls::TlsConnector,
    /// SNI, and the name the certificate is verified against: the URL's host.
    pub name: ServerName<'static>,
}

impl Tls {
    /// `host` as the URL spells it (an IPv6 address in brackets).
    pub fn new(host: &str, ca: Option<&CaFile>) -> Result<Tls, String> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(bare.to_string())
            .map_err(|e| format!("destination url: {host:?} is not a TLS server name: {e}"))?;
        Ok(Tls {
            connector: tokio_rustls::TlsConnector::from(client_config(ca)?),
            name,
        })
    }
}

/// One client configuration per destination: its own roots, and its own session cache.
fn client_config(ca: Option<&CaFile>) -> Result<Arc<ClientConfig>, String> {
    // webpki-roots rather than rustls-native-certs: the same roots on every machine,
    // including minimal container images that ship no CA bundle, and nothing read from
    // the file system at start. An internal CA goes in `ca_file`; a root-program change
    // arrives with a rebuild.
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for certificate in ca.map_or(&[][..], |ca| &ca.certificates) {
        roots
            .add(certificate.clone())
            .map_err(|e| format!("destination ca_file: {e}"))?;
    }
    // The provider is named here rather than installed process-wide, so nothing else in
    // the process can change which one this uses.
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    // Deliveries speak HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write");
        path
    }

    #[test]
    fn a_ca_file_must_hold_at_least_one_usable_certificate() {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = rcgen::KeyPair::generate().expect("key");
        let ca = rcgen::CertificateParams::new(Vec::<String>::new())
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        let good = write(
            dir.path(),
            "ca.pem",
            format!("# our CA\n{}{}", ca.pem(), key.serialize_pem()).as_bytes(),
        );
        let read = CaFile::read(&good).expect("a PEM certificate");
        assert_eq!(read.certificates.len(), 1, "the key section is skipped");
        assert!(Tls::new("localhost", Some(&read)).is_ok());

        let not_pem = write(dir.path(), "not.pem", b"just some text\n");
        let e = CaFile::read(&not_pem).expect_err("no certificate");
        assert!(e.contains("no PEM certificate"), "{e}");
        let key_only = write(dir.path(), "key.pem", key.serialize_pem().as_bytes());
        assert!(CaFile::read(&key_only).is_err());
        let bad_base64 = write(
            dir.path(),
            "bad.pem",
            b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        );
        let e = CaFile::read(&bad_base64).expect_err("not base64");
        assert!(e.contains("not valid PEM"), "{e}");
        let not_der = write(
            dir.path(),
            "junk.pem",
            b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        );
        let e = CaFile::read(&not_der).expect_err("not a certificate");
        assert!(e.contains("certificate 1"), "{e}");
        let e = CaFile::read(&dir.path().join("missing.pem")).expect_err("missing");
        assert!(e.starts_with("cannot read "), "{e}");
    }

    #[test]
    fn server_names_are_dns_names_or_ip_addresses() {
        for host in ["localhost", "hooks.example.com", "127.0.0.1", "[::1]"] {
            assert!(Tls::new(host, None).is_ok(), "{host}");
        }
        let Ok(tls) = Tls::new("[::1]", None) else {
            panic!("an IPv6 literal")
        };
        assert!(matches!(tls.name, ServerName::IpAddress(_)));
    }
}
