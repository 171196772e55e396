//! The daemon's egress certificate authority, and the leaf certificates it mints per host.
//!
//! Contract:
//! - The CA is a key (`egress-ca.key`, mode 0600) and a self-signed certificate (`egress-ca.pem`)
//!   in one directory, made together at the first [`EgressCa::load_or_create`] and read back after.
//!   Each file is written whole or not at all (renamed into place once synced), the key last, so a
//!   crash in between leaves no key and both are made again
//!   (`tests::a_certificate_without_its_key_is_made_again_with_one`). The
//!   certificate is what a sandbox's trust store adds ([`EgressCa::cert_pem`]).
//! - A leaf for a host (a DNS name or an IP address, as the client's SNI or the request names it)
//!   is signed by the CA on first use and cached; [`EgressCa::server_config`] serves the leaf of
//!   whatever name the client asks for, over TLS 1.2 or 1.3 with HTTP/1.1.
//! - The CA's certificate is made again from its key at each load, with the same name; leaves it
//!   signs therefore chain to the certificate sandboxes trust, whichever load made them.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The certificate's file in the CA's directory.
pub const CERT_FILE: &str = "egress-ca.pem";
/// The key's file in the CA's directory.
pub const KEY_FILE: &str = "egress-ca.key";
/// The CA's common name.
const NAME: &str = "sandboxd egress gateway CA";
/// Leaves kept at most; past it the cache starts again.
const CACHE: usize = 4096;

/// The CA cannot be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// cannot read or write the egress CA's file {path}
    #[error("cannot read or write the egress CA's file {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// the egress CA's key or a certificate cannot be made or read
    #[error("the egress CA's key or a certificate cannot be made or read")]
    Certificate(#[from] rcgen::Error),
    /// a minted certificate's key is not one TLS can sign with
    #[error("a minted certificate's key is not one TLS can sign with")]
    Key(#[from] rustls::Error),
}

/// The daemon's egress CA.
pub struct EgressCa {
    key: KeyPair,
    cert: rcgen::Certificate,
    cert_pem: String,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for EgressCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EgressCa(..)")
    }
}

fn params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, NAME);
    dn.push(DnType::OrganizationName, "sandboxd");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::File {
        path: path.to_path_buf(),
        source,
    }
}

impl EgressCa {
    /// The CA kept in `dir`, made there first when it has none.
    pub fn load_or_create(dir: &Path) -> Result<Self, CaError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        match std::fs::read_to_string(&key_path) {
            Ok(key_pem) => {
                let cert_pem =
                    std::fs::read_to_string(&cert_path).map_err(file_error(&cert_path))?;
                let key = KeyPair::from_pem(&key_pem)?;
                let cert = params()?.self_signed(&key)?;
                return Ok(Self::of(key, cert, cert_pem));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(file_error(&key_path)(e)),
        }
        let key = KeyPair::generate()?;
        let cert = params()?.self_signed(&key)?;
        let cert_pem = cert.pem();
        write_synced(&cert_path, cert_pem.as_bytes(), 0o644)?;
        write_synced(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        Ok(Self::of(key, cert, cert_pem))
    }

    /// A CA kept nowhere (for tests).
    pub fn ephemeral() -> Result<Self, CaError> {
        let key = KeyPair::generate()?;
        let cert = params()?.self_signed(&key)?;
        let pem = cert.pem();
        Ok(Self::of(key, cert, pem))
    }

    fn of(key: KeyPair, cert: rcgen::Certificate, cert_pem: String) -> Self {
        Self {
            key,
            cert,
            cert_pem,
            leaves: Mutex::new(HashMap::new()),
        }
    }

    /// The CA's certificate, PEM: what a sandbox's trust store adds.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The leaf for `host` (lowercase DNS name or IP address), minted on first use.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(leaf) = leaves.get(&host) {
            return Ok(leaf.clone());
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.clone()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, host.clone());
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&der)?;
        let chain = vec![
            cert.der().clone(),
            CertificateDer::from(self.cert.der().to_vec()),
        ];
        let leaf = Arc::new(CertifiedKey::new(chain, signer));
        if leaves.len() >= CACHE {
            leaves.clear();
        }
        leaves.insert(host, leaf.clone());
        Ok(leaf)
    }

    /// A TLS server configuration that answers each client with the leaf of the name it asks for
    /// (`fallback` when it names none), over HTTP/1.1.
    pub fn server_config(self: &Arc<Self>, fallback: &str) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring offers the default versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver {
                ca: self.clone(),
                fallback: fallback.to_string(),
            }));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

#[derive(Debug)]
struct Resolver {
    ca: Arc<EgressCa>,
    fallback: String,
}

impl rustls::server::ResolvesServerCert for Resolver {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().unwrap_or(&self.fallback);
        self.ca.leaf(name).ok()
    }
}

/// Writes `bytes` to `path` whole or not at all: to a name of its own, synced, then renamed.
fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    let mut staged = path.as_os_str().to_owned();
    staged.push(".new");
    let staged = PathBuf::from(staged);
    // One a crash left behind goes first: a new file takes `mode`, an old one would keep its own.
    let _ = std::fs::remove_file(&staged);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&staged)
        .map_err(file_error(&staged))?;
    file.write_all(bytes).map_err(file_error(&staged))?;
    file.sync_all().map_err(file_error(&staged))?;
    std::fs::rename(&staged, path).map_err(file_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn verifier(ca_pem: &str) -> Arc<dyn rustls::client::danger::ServerCertVerifier> {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap()
    }

    fn verifies(ca_pem: &str, leaf: &CertifiedKey, host: &str) -> bool {
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
        verifier(ca_pem)
            .verify_server_cert(
                &leaf.cert[0],
                &leaf.cert[1..],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .is_ok()
    }

    #[test]
    fn a_certificate_without_its_key_is_made_again_with_one() {
        let dir = tempfile::tempdir().unwrap();
        let first = EgressCa::load_or_create(dir.path()).unwrap();
        // A crash after the certificate was written, before the key was.
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        let again = EgressCa::load_or_create(dir.path()).unwrap();
        assert_ne!(first.cert_pem(), again.cert_pem(), "a new pair");
        let kept = std::fs::read_to_string(dir.path().join(CERT_FILE)).unwrap();
        assert_eq!(kept, again.cert_pem());
        let leaf = again.leaf("api.example.com").unwrap();
        assert!(verifies(&kept, &leaf, "api.example.com"));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "nothing staged is left: {names:?}");
    }

    #[test]
    fn leaves_chain_to_the_kept_certificate_across_loads_and_only_for_their_host() {
        let dir = tempfile::tempdir().unwrap();
        let first = EgressCa::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = EgressCa::load_or_create(dir.path()).unwrap();
        assert_eq!(first.cert_pem(), again.cert_pem());
        // A leaf the second load mints chains to the certificate the first one wrote.
        let leaf = again.leaf("API.example.com").unwrap();
        assert!(verifies(first.cert_pem(), &leaf, "api.example.com"));
        assert!(!verifies(first.cert_pem(), &leaf, "other.example.com"));
        let ip = again.leaf("10.0.0.7").unwrap();
        assert!(verifies(first.cert_pem(), &ip, "10.0.0.7"));
        // Cached: the same leaf twice.
        assert!(Arc::ptr_eq(&leaf, &again.leaf("api.example.com").unwrap()));
        // Another CA's leaves do not verify.
        let stranger = EgressCa::ephemeral().unwrap();
        assert!(!verifies(
            first.cert_pem(),
            &stranger.leaf("api.example.com").unwrap(),
            "api.example.com"
        ));
    }
}
