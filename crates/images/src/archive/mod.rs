//! An image archive — a `docker save` tarball (`docker-archive:`) or an OCI image layout in a tar
//! (`oci-archive:`) — read into the layer store.
//!
//! Contract:
//! - **No layer is installed unless every blob checked out.** [`import`] first indexes the tar (one
//!   pass over its headers, no member data read), then finds the image, reads and verifies its
//!   manifest and config, and hashes every layer member the store lacks; only when every one of them
//!   matched its digest does it install the missing layers, lowest first, each through
//!   [`LayerStore::install`] (the hardened unpacker, which verifies the digest again as it goes). A
//!   layer tar the unpacker refuses fails the import and leaves the layers installed before it in
//!   the store, as a failed pull does: they are complete and verified, and not removed here because a
//!   concurrent import or pull may be using them. Archive members are never written to disk as
//!   themselves, so a member's name (`..`, absolute) is only a name.
//! - **What is verified.** OCI: the manifest (and any nested index) against the digest that names
//!   it, the config and every layer against their descriptors' digests and sizes. Docker: the config
//!   against the digest its name carries (`<hex>.json`, `blobs/sha256/<hex>`), and every layer against
//!   the config's `rootfs.diff_ids` (the sha256 of the uncompressed tar; a gzip or zstd layer is
//!   decompressed to check it), and against its name's digest when it is stored as
//!   `blobs/sha256/<hex>`. A docker config without one diff id per layer is refused.
//! - **The image's digest.** OCI: the sha256 of the manifest blob, as a registry would name it.
//!   Docker archives carry no manifest, so one is synthesized — a Docker schema 2 manifest
//!   (`application/vnd.docker.distribution.manifest.v2+json`) with the config's descriptor and each
//!   layer's descriptor (digest and size of the layer's bytes as stored in the archive; media type
//!   from their magic bytes: `application/vnd.docker.image.rootfs.diff.tar`, `...tar.gzip`, or
//!   `application/vnd.oci.image.layer.v1.tar+zstd`, Docker having no zstd type), serialized by
//!   `serde_json` in a fixed field order without whitespace — and the digest is that manifest's
//!   sha256 ([`Imported::manifest`] holds its bytes). It is the same on every import of the same
//!   archive (and of any archive with the same config and layer bytes), but it is not the digest the
//!   image has in a registry, whose layers are usually compressed.
//! - **Which image.** A nested OCI index resolves to this host's platform (`linux/amd64` on x86-64).
//!   When the archive holds several images (several `manifest.json` entries, or `index.json`
//!   entries with different `org.opencontainers.image.ref.name`s), `name` picks the one carrying that
//!   name; without `name` the error lists the names. [`Imported::names`] are the archive's names
//!   for the image as written (Docker's `RepoTags`, OCI ref-name annotations, which are often a bare
//!   tag): canonicalizing them is the caller's.
//! - **Which format.** An archive with `manifest.json` is a docker archive, even when it is also an
//!   OCI layout (docker 25 and later write both, the layers as `blobs/sha256/<hex>`): its
//!   `manifest.json` has the full names. Otherwise `oci-layout` and `index.json` make an OCI layout.
//! - **Hostile archives.** Member names are normalised before lookup (`./blobs//sha256/x` is
//!   `blobs/sha256/x`; `..` goes up, never above the archive's top). When a name occurs more than
//!   once the last member wins, as `tar -x` would leave it. Only regular members supply data; a
//!   symbolic or hard link member is an alias resolved inside the archive's own index (never on any
//!   filesystem), at most [`LINK_HOPS`] deep — `docker save` and skopeo write `<id>/layer.tar` as a
//!   link to the layer stored once. The manifest, index and config JSON are refused above
//!   [`JSON_LIMIT`] bytes before they are read; the tar may have at most [`MEMBER_LIMIT`] members;
//!   a member the archive ends inside is refused. Nothing an archive holds makes this panic.
//! - **Errors** in the archive's content are [`ArchiveError`]s (the client's mistake); failures to
//!   read the file are [`ImageError::Io`]; the layers' own refusals come from the layer store as they
//!   do for a pull ([`ImageError::Unpack`], [`ImageError::DigestMismatch`]).
//!
//! Assumes `path` names a regular file that nobody changes while it is read (a change shows as a
//! digest mismatch or a read error, never as a layer unverified).

use crate::config::{ConfigError, RunConfig};
use crate::layers::{Hashing, LayerStore};
use crate::registry::LayerDescriptor;
use crate::unpack::Compression;
use crate::ImageError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Largest manifest, index or config JSON member read (4 MiB).
pub const JSON_LIMIT: u64 = 4 << 20;
/// Most members an archive may have (an image archive has a few per layer).
pub const MEMBER_LIMIT: usize = 100_000;
/// Most links followed to find one member's data.
pub const LINK_HOPS: usize = 8;
/// Most image indexes nested below `index.json`.
const INDEX_DEPTH: usize = 4;

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar";
const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// What an import produced, for the caller to record.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The manifest's digest (`sha256:...`): the image's identity (synthesized for a docker archive;
    /// see the module doc).
    pub digest: String,
    /// The manifest's bytes, whose sha256 is `digest`.
    pub manifest: Vec<u8>,
    /// The run settings from the config blob.
    pub config: RunConfig,
    /// The layers, lowest first, each with the bytes its files take unpacked (0 for a layer that was
    /// already in the store).
    pub layers: Vec<(LayerDescriptor, u64)>,
    /// The archive's names for the image, as written in it (may be empty).
    pub names: Vec<String>,
}

/// An archive that is not a usable image archive: the client's mistake, never the daemon's.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The file is not a tar this reader can parse.
    #[error("the archive is not a readable tar")]
    Tar(#[source] std::io::Error),
    /// The tar has neither format's top-level files.
    #[error(
        "not an image archive: it has neither manifest.json (docker save) nor oci-layout and \
         index.json (an OCI image layout)"
    )]
    Unrecognized,
    /// The tar has too many members.
    #[error("the archive has more than {0} members")]
    TooManyMembers(usize),
    /// A member the image needs is not in the archive.
    #[error("archive member {member:?} is missing")]
    Missing {
        /// The member's name, as referred to.
        member: String,
    },
    /// A member is unusable.
    #[error("archive member {member:?}: {reason}")]
    Invalid {
        /// The member's name.
        member: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A member's bytes do not match the digest that names it.
    #[error(
        "archive member {member:?} does not match its digest {digest} (its bytes hash to {actual})"
    )]
    DigestMismatch {
        /// The member's name.
        member: String,
        /// The digest it should have.
        digest: String,
        /// What its bytes (uncompressed, for a diff id) hash to.
        actual: String,
    },
    /// A JSON member does not parse as what it should be.
    #[error("archive member {member:?} is not a valid {what}")]
    Json {
        /// The member's name.
        member: String,
        /// What it should be.
        what: &'static str,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The config blob is unusable.
    #[error("archive member {member:?} is not a valid image config")]
    Config {
        /// The member's name.
        member: String,
        /// What is wrong with it.
        #[source]
        source: ConfigError,
    },
    /// The archive holds several images and none was named.
    #[error("the archive holds several images ({}); name the one to import", names.join(", "))]
    Ambiguous {
        /// The names it has.
        names: Vec<String>,
    },
    /// No image in the archive carries the name asked for.
    #[error("the archive has no image named {name:?} (it has: {})", names.join(", "))]
    NoSuchImage {
        /// The name asked for.
        name: String,
        /// The names it has.
        names: Vec<String>,
    },
    /// An index has no manifest for this host's platform.
    #[error("archive member {member:?} has no image for {platform} (it has: {})", available.join(", "))]
    NoPlatform {
        /// The index's member name.
        member: String,
        /// This host's platform.
        platform: String,
        /// The platforms it has.
        available: Vec<String>,
    },
}

/// Reads the archive at `path` (a regular file; seekable), picks its image (the one named `name`
/// when it holds several), verifies every blob it uses against its digest, and installs each layer
/// `layers` lacks. Blocking: run it off the async threads.
pub fn import(
    path: &Path,
    name: Option<&str>,
    layers: &LayerStore,
) -> Result<Imported, ImageError> {
    let archive = Archive::open(path)?;
    let plan = if archive.has("manifest.json") {
        docker(&archive, name)?
    } else if archive.has("index.json") && archive.has("oci-layout") {
        oci(&archive, name, layers)?
    } else {
        return Err(ArchiveError::Unrecognized.into());
    };
    let mut installed = Vec::with_capacity(plan.layers.len());
    for (layer, data) in plan.layers {
        let bytes = if layers.contains(&layer.digest) {
            0
        } else {
            layers.install(&layer, archive.reader(data))?
        };
        installed.push((layer, bytes));
    }
    tracing::info!(
        archive = %path.display(),
        digest = %plan.digest,
        layers = installed.len(),
        unpacked_bytes = installed.iter().map(|(_, bytes)| bytes).sum::<u64>(),
        "imported an image archive"
    );
    Ok(Imported {
        digest: plan.digest,
        manifest: plan.manifest,
        config: plan.config,
        layers: installed,
        names: plan.names,
    })
}

/// What [`import`] found and verified before installing anything.
struct Plan {
    digest: String,
    manifest: Vec<u8>,
    config: RunConfig,
    /// Each layer with where its data is.
    layers: Vec<(LayerDescriptor, Data)>,
    names: Vec<String>,
}

mod docker;
mod members;
mod oci;

use docker::*;
use members::*;
use oci::*;

#[cfg(test)]
mod tests;
