//! The registry client: manifests and blobs over the OCI distribution protocol.
//!
//! Contract:
//! - A pull talks to the registry a reference names, or to its mirror ([`RegistryConfig::mirrors`],
//!   Docker's `registry-mirrors`), and falls back to the origin when the mirror fails. Anonymous,
//!   basic and bearer-token auth (the `WWW-Authenticate` flow Docker Hub, GHCR and Quay use) are the
//!   `oci-client` crate's; manifest lists resolve to this host's platform.
//! - Plain HTTP only to loopback registries and to hosts named in [`RegistryConfig::insecure`];
//!   anything else is HTTPS with verified certificates.
//! - Every blob handed on was verified against its digest ([`Session::blob`] fails otherwise, after
//!   the caller's writer saw the bytes: the caller must treat what it wrote as unverified until then).
//! - Credentials ([`Credentials`]) live only as long as the [`Session`]; they are never logged (their
//!   `Debug` is redacted) and nothing here writes them anywhere.
//! - Failures are classified for the API: [`RegistryError::NotFound`], [`RegistryError::AuthFailed`],
//!   [`RegistryError::Unavailable`], [`RegistryError::Invalid`], each carrying the registry's words.

use crate::reference::{is_loopback_host, ImageRef};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::Client;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;
use tokio::io::AsyncWrite;

/// Where pulls go.
#[derive(Debug, Clone, Default)]
pub struct RegistryConfig {
    /// Registry host (as references name it, e.g. `docker.io`) → the mirror tried first.
    pub mirrors: BTreeMap<String, Mirror>,
    /// Registry hosts (`host[:port]`) that may be reached over plain HTTP besides loopback ones.
    pub insecure: BTreeSet<String>,
}

/// A pull-through mirror of one registry, parsed from `HOST=URL` (`docker.io=http://127.0.0.1:5000`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// The mirror's `host[:port]`.
    pub host: String,
    /// Whether the URL said `http://`.
    pub plain_http: bool,
}

/// A `--registry-mirror` or `--insecure-registry` value that is not one.
#[derive(Debug, thiserror::Error)]
#[error("invalid registry setting {0:?}: expected HOST=http(s)://HOST[:PORT] or HOST[:PORT]")]
pub struct SettingError(pub String);

impl RegistryConfig {
    /// Adds a mirror from its flag form `REGISTRY=URL`.
    pub fn add_mirror(&mut self, flag: &str) -> Result<(), SettingError> {
        let bad = || SettingError(flag.to_string());
        let (registry, url) = flag.split_once('=').ok_or_else(bad)?;
        let (plain_http, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (false, rest)
        } else {
            return Err(bad());
        };
        let host = rest.trim_end_matches('/');
        if !valid_host(registry) || !valid_host(host) {
            return Err(bad());
        }
        self.mirrors.insert(
            registry.to_string(),
            Mirror {
                host: host.to_string(),
                plain_http,
            },
        );
        Ok(())
    }

    /// Allows plain HTTP to `host` (`--insecure-registry`).
    pub fn add_insecure(&mut self, host: &str) -> Result<(), SettingError> {
        if !valid_host(host) {
            return Err(SettingError(host.to_string()));
        }
        self.insecure.insert(host.to_string());
        Ok(())
    }

    fn plain_http(&self, host: &str) -> bool {
        is_loopback_host(host)
            || self.insecure.contains(host)
            || self
                .mirrors
                .values()
                .any(|m| m.host == host && m.plain_http)
    }
}

fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b))
}

/// Credentials for one pull. Never logged: `Debug` shows the user name only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name (for token registries often a fixed word such as `oauth2accesstoken`).
    pub username: String,
    /// Password or access token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// One layer as the manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDescriptor {
    /// `sha256:<hex>` of the compressed blob.
    pub digest: String,
    /// The blob's media type (it says how the tar is compressed).
    pub media_type: String,
    /// The blob's size in bytes, as the manifest states it.
    pub size: u64,
}

/// An image manifest resolved for this host's platform.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The platform manifest's digest: the image's identity.
    pub digest: String,
    /// The config blob's descriptor.
    pub config: LayerDescriptor,
    /// The layers, lowest first.
    pub layers: Vec<LayerDescriptor>,
}

/// What a registry did not give.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// image {reference} not found: {message}
    #[error("image {reference} not found: {message}")]
    NotFound {
        /// The reference asked for.
        reference: String,
        /// The registry's words.
        message: String,
    },
    /// the registry refused access to the image
    #[error("registry {registry} refused access to {reference}: {message}")]
    AuthFailed {
        /// The registry host.
        registry: String,
        /// The reference asked for.
        reference: String,
        /// The registry's words.
        message: String,
    },
    /// the registry could not be reached or failed
    #[error("registry {registry} is unavailable")]
    Unavailable {
        /// The registry host.
        registry: String,
        /// What went wrong on the way.
        #[source]
        source: OciDistributionError,
    },
    /// the registry sent something unusable
    #[error("registry {registry} sent an unusable image {reference}")]
    Invalid {
        /// The registry host.
        registry: String,
        /// The reference asked for.
        reference: String,
        /// What was wrong with it.
        #[source]
        source: OciDistributionError,
    },
    /// A digest that does not name a sha256 blob.
    #[error("unsupported digest {0:?}: only sha256 is supported")]
    Digest(String),
}

impl RegistryError {
    /// Whether this says "no such image" rather than "could not ask".
    fn is_definite(&self) -> bool {
        !matches!(self, RegistryError::Unavailable { .. })
    }
}

/// Pulls images for the daemon.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    config: RegistryConfig,
}

/// A resolved pull in progress: the client that authenticated, for fetching the image's blobs.
pub struct Session {
    client: Client,
    auth: RegistryAuth,
    /// The reference pinned to the resolved digest, with the mirror set when it came from one.
    pinned: oci_client::Reference,
    registry: String,
    reference: String,
}

impl Registry {
    /// A client with `config`.
    pub fn new(config: RegistryConfig) -> Self {
        Self { config }
    }

    /// The settings.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    fn client(&self, host: &str) -> Client {
        let protocol = if self.config.plain_http(host) {
            ClientProtocol::HttpsExcept(vec![host.to_string()])
        } else {
            ClientProtocol::Https
        };
        Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("sandboxd/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        })
    }

    /// Resolves `reference` to its platform manifest (through the mirror first, if one is set for its
    /// registry), authenticating with `credentials` or anonymously.
    pub async fn resolve(
        &self,
        reference: &ImageRef,
        credentials: Option<&Credentials>,
    ) -> Result<(Session, Resolved), RegistryError> {
        let auth = match credentials {
            Some(c) => RegistryAuth::Basic(c.username.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        let mut via_mirror = None;
        if let Some(mirror) = self.config.mirrors.get(reference.registry()) {
            let mut oci = reference.as_oci().clone();
            oci.set_mirror_registry(mirror.host.clone());
            match self.resolve_at(reference, oci, &mirror.host, &auth).await {
                Ok(found) => return Ok(found),
                Err(e) => {
                    tracing::info!(reference = %reference, mirror = %mirror.host, error = %e, "mirror failed; trying the registry itself");
                    via_mirror = Some(e);
                }
            }
        }
        let origin = reference.as_oci().resolve_registry().to_string();
        match self
            .resolve_at(reference, reference.as_oci().clone(), &origin, &auth)
            .await
        {
            Ok(found) => Ok(found),
            // The origin could not be asked: what the mirror said is the better answer.
            Err(e) if !e.is_definite() => Err(via_mirror.filter(|m| m.is_definite()).unwrap_or(e)),
            Err(e) => Err(e),
        }
    }

    async fn resolve_at(
        &self,
        reference: &ImageRef,
        oci: oci_client::Reference,
        host: &str,
        auth: &RegistryAuth,
    ) -> Result<(Session, Resolved), RegistryError> {
        let client = self.client(host);
        let text = reference.canonical();
        let classify = |e| classify(e, host, &text);
        let (manifest, digest) = client
            .pull_image_manifest(&oci, auth)
            .await
            .map_err(classify)?;
        let resolved = resolved(digest, &manifest)?;
        let mut pinned = oci_client::Reference::with_digest(
            oci.registry().to_string(),
            oci.repository().to_string(),
            resolved.digest.clone(),
        );
        if pinned.resolve_registry() != host {
            pinned.set_mirror_registry(host.to_string());
        }
        let session = Session {
            client,
            auth: auth.clone(),
            pinned,
            registry: host.to_string(),
            reference: text,
        };
        Ok((session, resolved))
    }
}

fn resolved(digest: String, manifest: &OciImageManifest) -> Result<Resolved, RegistryError> {
    let descriptor = |d: &OciDescriptor| -> Result<LayerDescriptor, RegistryError> {
        crate::digest_hex(&d.digest).ok_or_else(|| RegistryError::Digest(d.digest.clone()))?;
        Ok(LayerDescriptor {
            digest: d.digest.clone(),
            media_type: d.media_type.clone(),
            size: u64::try_from(d.size).unwrap_or(0),
        })
    };
    crate::digest_hex(&digest).ok_or_else(|| RegistryError::Digest(digest.clone()))?;
    Ok(Resolved {
        config: descriptor(&manifest.config)?,
        layers: manifest
            .layers
            .iter()
            .map(descriptor)
            .collect::<Result<_, _>>()?,
        digest,
    })
}

impl Session {
    /// Fetches the blob `layer` into `out`; fails unless its bytes match its digest. `out` is dropped
    /// (closed) when this returns.
    pub async fn blob<W: AsyncWrite + Send>(
        &self,
        layer: &LayerDescriptor,
        out: W,
    ) -> Result<(), RegistryError> {
        self.client
            .store_auth_if_needed(self.pinned.resolve_registry(), &self.auth)
            .await;
        let descriptor = OciDescriptor {
            media_type: layer.media_type.clone(),
            digest: layer.digest.clone(),
            size: i64::try_from(layer.size).unwrap_or(i64::MAX),
            ..Default::default()
        };
        self.client
            .pull_blob(&self.pinned, &descriptor, out)
            .await
            .map_err(|e| classify(e, &self.registry, &self.reference))
    }

    /// Fetches a small blob (the image config) into memory, verified.
    pub async fn small_blob(&self, layer: &LayerDescriptor) -> Result<Vec<u8>, RegistryError> {
        let mut out = Vec::new();
        self.blob(layer, &mut out).await?;
        Ok(out)
    }

    /// The registry this session talks to (the mirror, when the image came from one).
    pub fn registry(&self) -> &str {
        &self.registry
    }
}

/// Sorts a client error into what the API tells apart.
fn classify(e: OciDistributionError, registry: &str, reference: &str) -> RegistryError {
    let not_found = |message: String| RegistryError::NotFound {
        reference: reference.to_string(),
        message,
    };
    let auth = |message: String| RegistryError::AuthFailed {
        registry: registry.to_string(),
        reference: reference.to_string(),
        message,
    };
    match &e {
        OciDistributionError::ImageManifestNotFoundError(m) => not_found(m.clone()),
        OciDistributionError::AuthenticationFailure(m) => auth(m.clone()),
        OciDistributionError::UnauthorizedError { url } => auth(format!("not authorized: {url}")),
        OciDistributionError::RegistryError { envelope, .. } => {
            let message = envelope
                .errors
                .iter()
                .map(|e| e.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                not_found(message)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                auth(message)
            } else {
                invalid(e, registry, reference)
            }
        }
        OciDistributionError::ServerError { code, message, .. } => match code {
            404 => not_found(message.clone()),
            401 | 403 => auth(message.clone()),
            _ if *code >= 500 || *code == 429 => unavailable(e, registry),
            _ => invalid(e, registry, reference),
        },
        OciDistributionError::RequestError(_) | OciDistributionError::IoError(_) => {
            unavailable(e, registry)
        }
        _ => invalid(e, registry, reference),
    }
}

fn unavailable(source: OciDistributionError, registry: &str) -> RegistryError {
    RegistryError::Unavailable {
        registry: registry.to_string(),
        source,
    }
}

fn invalid(source: OciDistributionError, registry: &str, reference: &str) -> RegistryError {
    RegistryError::Invalid {
        registry: registry.to_string(),
        reference: reference.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_and_insecure_hosts_parse_from_their_flags() {
        let mut c = RegistryConfig::default();
        c.add_mirror("docker.io=http://127.0.0.1:5000/").unwrap();
        c.add_mirror("ghcr.io=https://mirror.example:8443").unwrap();
        assert_eq!(
            c.mirrors["docker.io"],
            Mirror {
                host: "127.0.0.1:5000".into(),
                plain_http: true
            }
        );
        assert!(!c.mirrors["ghcr.io"].plain_http);
        for bad in [
            "docker.io",
            "docker.io=127.0.0.1:5000",
            "=http://x",
            "a b=http://x",
            "d=ftp://x",
        ] {
            assert!(c.add_mirror(bad).is_err(), "{bad}");
        }
        c.add_insecure("registry.lan:5000").unwrap();
        assert!(c.add_insecure("").is_err());
        assert!(c.add_insecure("a/b").is_err());
    }

    /// Plain HTTP goes only to loopback, to insecure hosts and to mirrors configured with http://.
    #[test]
    fn plain_http_only_where_allowed() {
        let mut c = RegistryConfig::default();
        c.add_mirror("docker.io=http://mirror.lan:5000").unwrap();
        c.add_insecure("registry.lan:5000").unwrap();
        assert!(c.plain_http("127.0.0.1:5000"));
        assert!(c.plain_http("localhost:5000"));
        assert!(c.plain_http("mirror.lan:5000"));
        assert!(c.plain_http("registry.lan:5000"));
        assert!(!c.plain_http("registry.lan:5001"));
        assert!(!c.plain_http("docker.io"));
        assert!(!c.plain_http("index.docker.io"));
    }

    #[test]
    fn credentials_never_show_their_password() {
        let c = Credentials {
            username: "me".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("me") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn registry_answers_are_classified_for_the_api() {
        let server = |code| OciDistributionError::ServerError {
            code,
            url: "u".into(),
            message: "m".into(),
        };
        assert!(matches!(
            classify(server(404), "r", "x"),
            RegistryError::NotFound { .. }
        ));
        assert!(matches!(
            classify(server(401), "r", "x"),
            RegistryError::AuthFailed { .. }
        ));
        assert!(matches!(
            classify(server(403), "r", "x"),
            RegistryError::AuthFailed { .. }
        ));
        assert!(matches!(
            classify(server(503), "r", "x"),
            RegistryError::Unavailable { .. }
        ));
        assert!(matches!(
            classify(server(400), "r", "x"),
            RegistryError::Invalid { .. }
        ));
        let unauthorized = OciDistributionError::UnauthorizedError { url: "u".into() };
        assert!(matches!(
            classify(unauthorized, "r", "x"),
            RegistryError::AuthFailed { .. }
        ));
        let missing = OciDistributionError::ImageManifestNotFoundError("no tag".into());
        let e = classify(missing, "r", "docker.io/library/x:1");
        assert_eq!(
            e.to_string(),
            "image docker.io/library/x:1 not found: no tag"
        );
    }
}
