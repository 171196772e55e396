//! The optional TLS listener (`--tls-listen`): the same router as the plain listener, over rustls (ring
//! provider), with the certificate chosen by SNI.
//!
//! Contract:
//! - The certificate of SNI name `h` is `<data-dir>/certs/<h>.crt` (PEM chain, leaf first) with its key
//!   `<h>.key` (PEM, PKCS#8, PKCS#1 or SEC1); when there is none, `*.<parent of h>.crt`/`.key` is tried.
//!   No SNI, a name that is not a plain hostname, or no certificate files: the handshake fails.
//! - Files are read on first use and cached with their modification times; a handshake whose files
//!   changed (or appeared, or vanished) re-reads them, so certificates can be replaced without a restart.
//! - Each connection is served by hyper-util's auto builder (HTTP/1.1 with upgrades, or HTTP/2 by ALPN).
//!   A handshake that fails or takes longer than [`HANDSHAKE_TIMEOUT`] closes the connection, nothing
//!   else.

use anyhow::Context;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Longest a client may take to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Modification times of a `.crt` and its `.key` (`None`: missing).
type Stamp = (Option<SystemTime>, Option<SystemTime>);
/// A loaded (or known-unusable) certificate and the file times it was loaded at.
type Cached = (Stamp, Option<Arc<CertifiedKey>>);

/// Picks the certificate of a handshake by SNI from a directory of `<hostname>.crt` / `.key` files.
#[derive(Debug)]
pub struct SniCertificates {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl SniCertificates {
    /// Certificates from `dir`, keys loaded with `provider`.
    pub fn new(dir: PathBuf, provider: Arc<CryptoProvider>) -> Self {
        Self {
            dir,
            provider,
            cache: Mutex::default(),
        }
    }

    /// The certificate for SNI name `name` (exact file, else the wildcard of its parent).
    pub fn lookup(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        let plain = !name.is_empty()
            && name.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            });
        if !plain {
            return None;
        }
        self.load(&name).or_else(|| {
            let (_, parent) = name.split_once('.')?;
            parent
                .contains('.')
                .then(|| self.load(&format!("*.{parent}")))
                .flatten()
        })
    }

    /// `<file>.crt` + `<file>.key`, from the cache while their modification times are unchanged.
    fn load(&self, file: &str) -> Option<Arc<CertifiedKey>> {
        let crt = self.dir.join(format!("{file}.crt"));
        let key = self.dir.join(format!("{file}.key"));
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let stamp = (mtime(&crt), mtime(&key));
        if let Some((cached, ck)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(file)
        {
            if *cached == stamp {
                return ck.clone();
            }
        }
        let loaded = match stamp {
            (Some(_), Some(_)) => match self.read(&crt, &key) {
                Ok(ck) => Some(Arc::new(ck)),
                Err(e) => {
                    tracing::warn!(certificate = %crt.display(), error = %format!("{e:#}"), "unusable TLS certificate");
                    None
                }
            },
            _ => None,
        };
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(file.to_string(), (stamp, loaded.clone()));
        loaded
    }

    fn read(&self, crt: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
        let chain = CertificateDer::pem_file_iter(crt)
            .with_context(|| format!("reading {}", crt.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("parsing {}", crt.display()))?;
        anyhow::ensure!(!chain.is_empty(), "{} holds no certificate", crt.display());
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("reading the private key {}", key.display()))?;
        CertifiedKey::from_der(chain, key, &self.provider).context("certificate and key")
    }
}

impl ResolvesServerCert for SniCertificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?;
        let found = self.lookup(name);
        if found.is_none() {
            tracing::debug!(sni = name, "no TLS certificate for this name");
        }
        found
    }
}

/// The rustls server configuration: SNI certificates from `certs_dir`, ALPN h2 and http/1.1.
pub fn server_config(certs_dir: PathBuf) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniCertificates::new(certs_dir, provider)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Binds `addr`; the returned future serves `app` over TLS there until it is dropped.
pub async fn listen(
    addr: SocketAddr,
    certs_dir: PathBuf,
    app: axum::Router,
) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(certs_dir)?));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening for TLS on {addr}"))?;
    Ok(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "TLS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let served = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(
                        TokioIo::new(tls),
                        TowerToHyperService::new(app),
                    )
                    .await;
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "TLS connection ended with an error");
                }
            });
        }
    })
}
