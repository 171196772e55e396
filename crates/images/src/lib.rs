//! OCI images for sandboxes: what an image reference names, how its blobs are fetched and verified,
//! and how its layers become read-only directories a sandbox's overlay root stacks.
//!
//! Contract: every layer directory this crate hands out was unpacked completely from a blob whose
//! digest was verified, and nothing a layer's tar says can write or link outside that directory
//! ([`unpack`], [`layers`]). Which images and layers exist, and who uses them, is the store's to
//! record; this crate only knows the bytes on disk and the registries' protocol.
//!
//! Modules: [`reference`] (names, resolved as Docker does), [`registry`] (the distribution protocol,
//! mirrors, auth), [`config`] (an image's run settings), [`layers`] (the content-addressed store on
//! disk), [`unpack`] (one layer tar into its directory), [`pull`] (one pull, streaming).

pub mod archive;
pub mod config;
pub mod dockerfile;
pub mod layers;
pub mod pack;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod unpack;

pub use config::RunConfig;
pub use layers::LayerStore;
pub use reference::ImageRef;
pub use registry::{Credentials, LayerDescriptor, Registry, RegistryConfig, RegistryError};

use std::path::PathBuf;

/// What went wrong with an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The reference does not parse.
    #[error(transparent)]
    Reference(#[from] reference::ReferenceError),
    /// An image archive is unusable (the client's mistake; reading the file is [`ImageError::Io`]).
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    /// The registry did not give the image.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The image's config blob is unusable.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A layer's tar was refused or could not be written.
    #[error("unpacking layer {digest}")]
    Unpack {
        /// The layer's digest.
        digest: String,
        /// What the unpacker said.
        #[source]
        source: unpack::UnpackError,
    },
    /// A layer's blob could not be read to its end.
    #[error("reading layer {digest}")]
    Read {
        /// The layer's digest.
        digest: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A blob's bytes do not match its digest.
    #[error("layer {digest} does not match its digest (its bytes hash to {actual})")]
    DigestMismatch {
        /// The digest the manifest promised.
        digest: String,
        /// What the bytes hash to.
        actual: String,
    },
    /// A layer's media type is not a tar this daemon reads.
    #[error("layer {digest} has unsupported media type {media_type:?}")]
    MediaType {
        /// The layer's digest.
        digest: String,
        /// The media type.
        media_type: String,
    },
    /// A digest that is not `sha256:` and 64 hex digits.
    #[error("unsupported digest {0:?}: only sha256 is supported")]
    UnsupportedDigest(String),
    /// A filesystem operation on the layer store failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A directory could not be packed into a layer blob.
    #[error(transparent)]
    Pack(#[from] pack::PackError),
    /// A blocking task died.
    #[error("image task failed: {0}")]
    Task(String),
}

impl ImageError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ImageError::Io { what, path, source }
    }
}

/// The 64 hex digits of a `sha256:` digest, if `digest` is one (lowercase, as registries write them).
pub fn digest_hex(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_sha256_digests_name_blobs() {
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(
            super::digest_hex(&format!("sha256:{hex}")),
            Some(hex.as_str())
        );
        for bad in [
            "sha256:",
            "sha512:00",
            "sha256:../../etc",
            &format!("sha256:{}", hex.to_uppercase()),
        ] {
            assert_eq!(super::digest_hex(bad), None, "{bad}");
        }
    }
}
