//! Image references, resolved as Docker resolves them.
//!
//! `python:3.12-slim` names `docker.io/library/python:3.12-slim`, `ubuntu` names
//! `docker.io/library/ubuntu:latest`, `127.0.0.1:5000/team/app@sha256:…` names exactly that. The
//! canonical text ([`ImageRef::canonical`]) is what the store keys tags by, so every spelling of one
//! image finds the same record. Parsing is the distribution spec's grammar (the `oci-client` crate's
//! [`Reference`]); this module adds the bounds a control plane needs (length, no whitespace) and the
//! error a client reads.

use oci_client::Reference;
use std::fmt;
use std::str::FromStr;

/// Longest reference text accepted (the distribution spec caps a repository name at 255).
const MAX_LEN: usize = 512;

/// A parsed, normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    inner: Reference,
}

/// A reference that is not one.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The reference is empty, too long or contains whitespace or control characters.
    #[error("invalid image reference {0:?}: expected [registry/]repository[:tag][@digest]")]
    Shape(String),
    /// The distribution grammar refuses the reference.
    #[error("invalid image reference {text:?}")]
    Grammar {
        /// The reference as given.
        text: String,
        /// What the grammar objected to.
        #[source]
        source: oci_client::ParseError,
    },
}

impl ImageRef {
    /// The registry host (and port) the reference names, e.g. `docker.io` or `127.0.0.1:5000`.
    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    /// The repository inside the registry, e.g. `library/python`.
    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    /// The tag, if the reference names one.
    pub fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    /// The manifest digest, if the reference pins one.
    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// The fully qualified text, e.g. `docker.io/library/python:3.12-slim`.
    pub fn canonical(&self) -> String {
        self.inner.whole()
    }

    /// The same repository pinned to `digest` (used to fetch blobs once the manifest is known).
    pub fn with_digest(&self, digest: &str) -> ImageRef {
        ImageRef {
            inner: Reference::with_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                digest.to_string(),
            ),
        }
    }

    /// The reference as the registry client takes it.
    pub(crate) fn as_oci(&self) -> &Reference {
        &self.inner
    }
}

impl FromStr for ImageRef {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, ReferenceError> {
        if text.is_empty()
            || text.len() > MAX_LEN
            || text.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ReferenceError::Shape(text.chars().take(MAX_LEN).collect()));
        }
        let inner = Reference::from_str(text).map_err(|source| ReferenceError::Grammar {
            text: text.to_string(),
            source,
        })?;
        Ok(ImageRef { inner })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

/// Whether `host` (a registry's `host[:port]`) is on this machine's loopback, where plain HTTP
/// carries nothing off the host.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        text.parse::<ImageRef>().unwrap().canonical()
    }

    #[test]
    fn short_names_resolve_as_docker_resolves_them() {
        assert_eq!(
            canonical("python:3.12-slim"),
            "docker.io/library/python:3.12-slim"
        );
        assert_eq!(canonical("ubuntu"), "docker.io/library/ubuntu:latest");
        assert_eq!(canonical("team/app:1"), "docker.io/team/app:1");
        assert_eq!(
            canonical("docker.io/library/python:3.12-slim"),
            "docker.io/library/python:3.12-slim"
        );
        assert_eq!(
            canonical("127.0.0.1:5000/team/app:v2"),
            "127.0.0.1:5000/team/app:v2"
        );
        let pinned = format!("ghcr.io/o/r@sha256:{}", "a".repeat(64));
        let r: ImageRef = pinned.parse().unwrap();
        assert_eq!(r.registry(), "ghcr.io");
        assert_eq!(r.repository(), "o/r");
        assert_eq!(
            r.digest(),
            Some(format!("sha256:{}", "a".repeat(64)).as_str())
        );
        assert_eq!(r.tag(), None);
    }

    #[test]
    fn malformed_references_are_refused_with_the_text() {
        for bad in [
            "",
            " ",
            "Python:3",
            "a b",
            "repo:",
            "repo@sha256:zz",
            "x\n",
            &"a".repeat(600),
        ] {
            let err = bad.parse::<ImageRef>().unwrap_err();
            assert!(
                err.to_string().starts_with("invalid image reference"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn loopback_hosts_are_told_apart_from_others() {
        for host in [
            "127.0.0.1:5000",
            "localhost:5000",
            "localhost",
            "[::1]:5000",
            "127.1.2.3",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "docker.io",
            "10.0.0.1:5000",
            "registry.local:5000",
            "[2001:db8::1]:443",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
