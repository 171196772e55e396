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

// ---- docker save ----

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    #[serde(default)]
    layers: Vec<String>,
}

#[derive(Deserialize)]
struct DiffIds {
    #[serde(default)]
    rootfs: Option<RootFs>,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// The synthesized manifest: field order and names are the digest's, do not change them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SynthesizedManifest<'a> {
    schema_version: u32,
    media_type: &'a str,
    config: SynthesizedDescriptor<'a>,
    layers: Vec<SynthesizedDescriptor<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SynthesizedDescriptor<'a> {
    media_type: &'a str,
    size: u64,
    digest: &'a str,
}

fn docker(archive: &Archive, name: Option<&str>) -> Result<Plan, ImageError> {
    const MANIFEST: &str = "manifest.json";
    let bytes = archive.read_json(MANIFEST)?;
    let entries: Vec<DockerEntry> = parse_json(MANIFEST, "docker manifest.json", &bytes)?;
    let tags = |e: &DockerEntry| e.repo_tags.clone().unwrap_or_default();
    let all_names = || -> Vec<String> {
        entries
            .iter()
            .map(|e| match e.repo_tags.as_deref() {
                Some(t) if !t.is_empty() => t.join(" "),
                _ => format!("untagged {}", e.config),
            })
            .collect()
    };
    let entry = match name {
        Some(wanted) => entries
            .iter()
            .find(|e| tags(e).iter().any(|t| same_docker_name(t, wanted)))
            .ok_or_else(|| ArchiveError::NoSuchImage {
                name: wanted.to_string(),
                names: all_names(),
            })?,
        None => match entries.as_slice() {
            [only] => only,
            [] => {
                return Err(ArchiveError::Invalid {
                    member: MANIFEST.into(),
                    reason: "it lists no image".into(),
                }
                .into())
            }
            _ => return Err(ArchiveError::Ambiguous { names: all_names() }.into()),
        },
    };

    let config_bytes = archive.read_json(&entry.config)?;
    let config_digest = sha256(&config_bytes);
    if let Some(named) = digest_in_name(&entry.config) {
        if named != config_digest {
            return Err(ArchiveError::DigestMismatch {
                member: entry.config.clone(),
                digest: named,
                actual: config_digest,
            }
            .into());
        }
    }
    let config = RunConfig::parse(&config_bytes).map_err(|source| ArchiveError::Config {
        member: entry.config.clone(),
        source,
    })?;
    let diff_ids: DiffIds = parse_json(&entry.config, "image config", &config_bytes)?;
    let diff_ids = diff_ids.rootfs.map(|r| r.diff_ids).unwrap_or_default();
    if diff_ids.len() != entry.layers.len() {
        return Err(ArchiveError::Invalid {
            member: entry.config.clone(),
            reason: format!(
                "it lists {} rootfs.diff_ids for the {} layers manifest.json names",
                diff_ids.len(),
                entry.layers.len()
            ),
        }
        .into());
    }

    let mut layers = Vec::with_capacity(entry.layers.len());
    for (member, diff_id) in entry.layers.iter().zip(&diff_ids) {
        let data = archive.find(member)?;
        let hashed = archive.hash_layer(member, data)?;
        if &hashed.diff_id != diff_id {
            return Err(ArchiveError::DigestMismatch {
                member: member.clone(),
                digest: diff_id.clone(),
                actual: hashed.diff_id,
            }
            .into());
        }
        if let Some(named) = digest_in_name(member).filter(|_| is_blob_path(member)) {
            if named != hashed.digest {
                return Err(ArchiveError::DigestMismatch {
                    member: member.clone(),
                    digest: named,
                    actual: hashed.digest,
                }
                .into());
            }
        }
        let media_type = match hashed.compression {
            Compression::None => DOCKER_LAYER,
            Compression::Gzip => DOCKER_LAYER_GZIP,
            Compression::Zstd => OCI_LAYER_ZSTD,
        };
        layers.push((
            LayerDescriptor {
                digest: hashed.digest,
                media_type: media_type.to_string(),
                size: data.size,
            },
            data,
        ));
    }

    let manifest = SynthesizedManifest {
        schema_version: 2,
        media_type: DOCKER_MANIFEST,
        config: SynthesizedDescriptor {
            media_type: DOCKER_CONFIG,
            size: config_bytes.len() as u64,
            digest: &config_digest,
        },
        layers: layers
            .iter()
            .map(|(l, _)| SynthesizedDescriptor {
                media_type: &l.media_type,
                size: l.size,
                digest: &l.digest,
            })
            .collect(),
    };
    let manifest = serde_json::to_vec(&manifest).map_err(|source| ArchiveError::Json {
        member: MANIFEST.into(),
        what: "manifest to synthesize",
        source,
    })?;
    Ok(Plan {
        digest: sha256(&manifest),
        manifest,
        config,
        layers,
        names: tags(entry),
    })
}

/// Whether two docker names are the same, `docker.io/` and `docker.io/library/` being implied.
fn same_docker_name(a: &str, b: &str) -> bool {
    fn short(n: &str) -> &str {
        let n = n.strip_prefix("docker.io/").unwrap_or(n);
        n.strip_prefix("library/").unwrap_or(n)
    }
    a == b || short(a) == short(b)
}

/// The digest a member's name carries: `<hex>`, `<hex>.json` or `<hex>.tar` as its last component.
fn digest_in_name(member: &str) -> Option<String> {
    let normal = normalise(member);
    let last = normal.rsplit('/').next().unwrap_or_default();
    let stem = last
        .strip_suffix(".json")
        .or_else(|| last.strip_suffix(".tar"))
        .unwrap_or(last);
    let digest = format!("sha256:{stem}");
    crate::digest_hex(&digest).is_some().then_some(digest)
}

/// Whether a member is named `blobs/sha256/<hex>` (OCI-layout style, as docker 25 writes layers).
fn is_blob_path(member: &str) -> bool {
    let normal = normalise(member);
    normal
        .strip_prefix("blobs/sha256/")
        .is_some_and(|hex| crate::digest_hex(&format!("sha256:{hex}")).is_some())
}

// ---- OCI image layout ----

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize, Clone)]
struct Platform {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: String,
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

impl Descriptor {
    fn ref_name(&self) -> Option<&str> {
        self.annotations.get(REF_NAME).map(String::as_str)
    }

    /// The blob's member name, or an error naming `referrer` for a digest that is not sha256.
    fn member(&self, referrer: &str) -> Result<String, ArchiveError> {
        let hex = crate::digest_hex(&self.digest).ok_or_else(|| ArchiveError::Invalid {
            member: referrer.to_string(),
            reason: format!(
                "unsupported digest {:?}: only sha256 is supported",
                self.digest
            ),
        })?;
        Ok(format!("blobs/sha256/{hex}"))
    }
}

fn oci(archive: &Archive, name: Option<&str>, store: &LayerStore) -> Result<Plan, ImageError> {
    const INDEX: &str = "index.json";
    let bytes = archive.read_json(INDEX)?;
    let index: Index = parse_json(INDEX, "OCI image index", &bytes)?;
    let mut names: Vec<String> = index
        .manifests
        .iter()
        .filter_map(|d| d.ref_name().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    let candidates: Vec<Descriptor> = match name {
        Some(wanted) => {
            let named: Vec<Descriptor> = index
                .manifests
                .iter()
                .filter(|d| d.ref_name() == Some(wanted))
                .cloned()
                .collect();
            if named.is_empty() {
                return Err(ArchiveError::NoSuchImage {
                    name: wanted.to_string(),
                    names,
                }
                .into());
            }
            named
        }
        None if names.len() > 1 => return Err(ArchiveError::Ambiguous { names }.into()),
        None => index.manifests.clone(),
    };
    let top = choose(INDEX, &candidates)?;
    // Every entry naming the same manifest is one of its names (one image, several tags).
    let mut image_names: Vec<String> = index
        .manifests
        .iter()
        .filter(|d| d.digest == top.digest)
        .filter_map(|d| d.ref_name().map(str::to_string))
        .collect();
    image_names.sort();
    image_names.dedup();

    let mut descriptor = top;
    let mut referrer = INDEX.to_string();
    for _ in 0..=INDEX_DEPTH {
        let member = descriptor.member(&referrer)?;
        let blob = archive.read_verified(&member, &descriptor)?;
        let manifest: Manifest = parse_json(&member, "OCI manifest or index", &blob)?;
        let is_index = INDEX_TYPES.contains(&descriptor.media_type.as_str())
            || INDEX_TYPES.contains(&manifest.media_type.as_str())
            || (manifest.config.is_none() && manifest.manifests.is_some());
        if is_index {
            let entries = manifest.manifests.unwrap_or_default();
            descriptor = choose(&member, &entries)?;
            referrer = member;
            continue;
        }
        return oci_image(
            archive,
            store,
            descriptor.digest,
            member,
            blob,
            manifest,
            image_names,
        );
    }
    Err(ArchiveError::Invalid {
        member: referrer,
        reason: format!("image indexes nest more than {INDEX_DEPTH} deep"),
    }
    .into())
}

/// Verifies the config and layers of the manifest `blob` (member `member`, digest `digest`).
fn oci_image(
    archive: &Archive,
    store: &LayerStore,
    digest: String,
    member: String,
    blob: Vec<u8>,
    manifest: Manifest,
    names: Vec<String>,
) -> Result<Plan, ImageError> {
    let config_descriptor = manifest.config.ok_or_else(|| ArchiveError::Invalid {
        member: member.clone(),
        reason: "the manifest has no config".into(),
    })?;
    let config_member = config_descriptor.member(&member)?;
    let config_bytes = archive.read_verified(&config_member, &config_descriptor)?;
    let config = RunConfig::parse(&config_bytes).map_err(|source| ArchiveError::Config {
        member: config_member.clone(),
        source,
    })?;
    let mut layers = Vec::with_capacity(manifest.layers.len());
    for layer in &manifest.layers {
        let layer_member = layer.member(&member)?;
        if Compression::from_media_type(&layer.media_type).is_none() {
            return Err(ArchiveError::Invalid {
                member: member.clone(),
                reason: format!(
                    "layer {} has unsupported media type {:?}",
                    layer.digest, layer.media_type
                ),
            }
            .into());
        }
        let data = archive.find(&layer_member)?;
        check_size(&layer_member, layer, data)?;
        layers.push((
            LayerDescriptor {
                digest: layer.digest.clone(),
                media_type: layer.media_type.clone(),
                size: layer.size,
            },
            data,
            layer_member,
        ));
    }
    // Every layer the store will read is checked before any is installed. (Layers it has are not
    // read: their trees were verified when they were installed.)
    for (layer, data, layer_member) in &layers {
        if !store.contains(&layer.digest) {
            let actual = archive.hash(*data)?;
            if actual != layer.digest {
                return Err(ArchiveError::DigestMismatch {
                    member: layer_member.clone(),
                    digest: layer.digest.clone(),
                    actual,
                }
                .into());
            }
        }
    }
    Ok(Plan {
        digest,
        manifest: blob,
        config,
        layers: layers.into_iter().map(|(l, d, _)| (l, d)).collect(),
        names,
    })
}

/// The entry of `entries` (from member `member`) to import: the only one, or the one for this host's
/// platform.
fn choose(member: &str, entries: &[Descriptor]) -> Result<Descriptor, ArchiveError> {
    let host = host_platform();
    let matches = |d: &Descriptor| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == host.0 && p.architecture == host.1)
    };
    if let [only] = entries {
        if only.platform.is_none() || matches(only) {
            return Ok(only.clone());
        }
    }
    if let Some(found) = entries.iter().find(|d| matches(d)) {
        return Ok(found.clone());
    }
    if entries.is_empty() {
        return Err(ArchiveError::Invalid {
            member: member.to_string(),
            reason: "it lists no manifest".into(),
        });
    }
    Err(ArchiveError::NoPlatform {
        member: member.to_string(),
        platform: format!("{}/{}", host.0, host.1),
        available: entries
            .iter()
            .map(|d| match &d.platform {
                Some(p) => match &p.variant {
                    Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
                    None => format!("{}/{}", p.os, p.architecture),
                },
                None => format!("{} (no platform)", d.digest),
            })
            .collect(),
    })
}

/// This host's platform in OCI's words (`linux`, `amd64`).
fn host_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    ("linux", arch)
}

fn check_size(member: &str, descriptor: &Descriptor, data: Data) -> Result<(), ArchiveError> {
    if descriptor.size != data.size {
        return Err(ArchiveError::Invalid {
            member: member.to_string(),
            reason: format!(
                "it has {} bytes where its descriptor says {}",
                data.size, descriptor.size
            ),
        });
    }
    Ok(())
}

// ---- the tar's index ----

/// Where a regular member's data is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Data {
    offset: u64,
    size: u64,
}

#[derive(Debug, Clone)]
enum Member {
    Regular(Data),
    /// A symbolic or hard link, by the normalised name of what it points to.
    Link(String),
}

/// The archive file and the index of its members, by normalised name.
struct Archive {
    file: File,
    path: PathBuf,
    members: HashMap<String, Member>,
}

/// What hashing a docker layer found.
struct HashedLayer {
    compression: Compression,
    /// Of the bytes as stored.
    digest: String,
    /// Of the uncompressed tar.
    diff_id: String,
}

impl Archive {
    /// Opens `path` and indexes its members (headers only).
    fn open(path: &Path) -> Result<Archive, ImageError> {
        let file = File::open(path).map_err(ImageError::io("open", path))?;
        let len = file
            .metadata()
            .map_err(ImageError::io("inspect", path))?
            .len();
        let mut tracked = Tracked {
            file: &file,
            failed: false,
        };
        let mut members = HashMap::new();
        let indexed = index_members(&mut tracked, len, &mut members);
        match indexed {
            Ok(()) => {}
            // The tar crate reports its parse errors and the file's read errors alike.
            Err(Indexing::Tar(e)) if tracked.failed => {
                return Err(ImageError::io("read", path)(e));
            }
            Err(Indexing::Tar(e)) => return Err(ArchiveError::Tar(e).into()),
            Err(Indexing::Archive(e)) => return Err(e.into()),
        }
        Ok(Archive {
            file,
            path: path.to_path_buf(),
            members,
        })
    }

    /// Whether a regular member (or a link to one) is named `name`.
    fn has(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// The data of member `name`, following links inside the archive.
    fn find(&self, name: &str) -> Result<Data, ArchiveError> {
        let mut current = normalise(name);
        for _ in 0..=LINK_HOPS {
            match self.members.get(&current) {
                Some(Member::Regular(data)) => return Ok(*data),
                Some(Member::Link(target)) => current = target.clone(),
                None => {
                    return Err(ArchiveError::Missing {
                        member: name.to_string(),
                    })
                }
            }
        }
        Err(ArchiveError::Invalid {
            member: name.to_string(),
            reason: format!("it is a link more than {LINK_HOPS} links away from any data"),
        })
    }

    fn reader(&self, data: Data) -> MemberReader<'_> {
        MemberReader {
            file: &self.file,
            pos: data.offset,
            end: data.offset + data.size,
            failed: false,
        }
    }

    /// Reads a JSON member, refusing one above [`JSON_LIMIT`] before reading it.
    fn read_json(&self, name: &str) -> Result<Vec<u8>, ImageError> {
        let data = self.find(name)?;
        if data.size > JSON_LIMIT {
            return Err(too_large(name).into());
        }
        let mut out = Vec::with_capacity(data.size as usize);
        self.reader(data)
            .read_to_end(&mut out)
            .map_err(ImageError::io("read", &self.path))?;
        Ok(out)
    }

    /// Reads the JSON blob `name` that `descriptor` describes, verified against its size and digest.
    fn read_verified(&self, name: &str, descriptor: &Descriptor) -> Result<Vec<u8>, ImageError> {
        check_size(name, descriptor, self.find(name)?)?;
        let bytes = self.read_json(name)?;
        let actual = sha256(&bytes);
        if actual != descriptor.digest {
            return Err(ArchiveError::DigestMismatch {
                member: name.to_string(),
                digest: descriptor.digest.clone(),
                actual,
            }
            .into());
        }
        Ok(bytes)
    }

    /// The sha256 digest of a member's bytes.
    fn hash(&self, data: Data) -> Result<String, ImageError> {
        let mut hashed = Hashing::new(self.reader(data));
        std::io::copy(&mut hashed, &mut std::io::sink())
            .map_err(ImageError::io("read", &self.path))?;
        Ok(hashed.digest())
    }

    /// Hashes a docker layer member as stored and uncompressed (gzip and zstd known by their magic
    /// bytes).
    fn hash_layer(&self, name: &str, data: Data) -> Result<HashedLayer, ImageError> {
        let mut magic = [0u8; 4];
        let n = magic
            .len()
            .min(usize::try_from(data.size).unwrap_or(usize::MAX));
        self.file
            .read_exact_at(&mut magic[..n], data.offset)
            .map_err(ImageError::io("read", &self.path))?;
        let compression = match magic[..n] {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd] => Compression::Zstd,
            _ => Compression::None,
        };
        let mut stored = Hashing::new(self.reader(data));
        let decoded = (|| -> std::io::Result<Option<String>> {
            let decoder: Box<dyn Read + '_> = match compression {
                Compression::None => return Ok(None),
                Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut stored)),
                Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(&mut stored)?),
            };
            let mut tar = Hashing::new(decoder);
            std::io::copy(&mut tar, &mut std::io::sink())?;
            Ok(Some(tar.digest()))
        })();
        let decoded = match decoded {
            Ok(d) => d,
            Err(e) if stored.inner.failed => return Err(ImageError::io("read", &self.path)(e)),
            Err(e) => {
                return Err(ArchiveError::Invalid {
                    member: name.to_string(),
                    reason: format!("its compressed data does not decompress: {e}"),
                }
                .into())
            }
        };
        // What follows the compressed stream counts for the digest too.
        std::io::copy(&mut stored, &mut std::io::sink())
            .map_err(ImageError::io("read", &self.path))?;
        let digest = stored.digest();
        Ok(HashedLayer {
            compression,
            diff_id: decoded.unwrap_or_else(|| digest.clone()),
            digest,
        })
    }
}

enum Indexing {
    Tar(std::io::Error),
    Archive(ArchiveError),
}

/// Records every member's name and kind in one pass over the headers (data is seeked over).
fn index_members(
    reader: &mut Tracked<'_>,
    len: u64,
    members: &mut HashMap<String, Member>,
) -> Result<(), Indexing> {
    let mut tar = tar::Archive::new(reader);
    let mut count = 0usize;
    for entry in tar.entries_with_seek().map_err(Indexing::Tar)? {
        let entry = entry.map_err(Indexing::Tar)?;
        count += 1;
        if count > MEMBER_LIMIT {
            return Err(Indexing::Archive(ArchiveError::TooManyMembers(
                MEMBER_LIMIT,
            )));
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = normalise(&raw);
        let link_target = || {
            entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
        };
        let member = match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let data = Data {
                    offset: entry.raw_file_position(),
                    size: entry.size(),
                };
                if data
                    .offset
                    .checked_add(data.size)
                    .is_none_or(|end| end > len)
                {
                    return Err(Indexing::Archive(ArchiveError::Invalid {
                        member: raw,
                        reason: "the archive ends inside it".into(),
                    }));
                }
                Some(Member::Regular(data))
            }
            // A symbolic link's target is relative to its own directory (or to the archive's top).
            tar::EntryType::Symlink => link_target().map(|t| {
                let dir = match name.rsplit_once('/') {
                    Some((dir, _)) if !t.starts_with('/') => dir,
                    _ => "",
                };
                Member::Link(normalise(&format!("{dir}/{t}")))
            }),
            // A hard link's target is another member's name.
            tar::EntryType::Link => link_target().map(|t| Member::Link(normalise(&t))),
            _ => None,
        };
        // The last member of a name wins, whatever its kind (a later directory hides a file).
        match member {
            Some(m) => members.insert(name, m),
            None => members.remove(&name),
        };
    }
    Ok(())
}

/// A member name as a lookup key: no leading `/` or `./`, no empty or `.` components, `..` taking
/// one component off (never above the top).
fn normalise(name: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

fn parse_json<'a, T: Deserialize<'a>>(
    member: &str,
    what: &'static str,
    bytes: &'a [u8],
) -> Result<T, ArchiveError> {
    serde_json::from_slice(bytes).map_err(|source| ArchiveError::Json {
        member: member.to_string(),
        what,
        source,
    })
}

fn too_large(member: &str) -> ArchiveError {
    ArchiveError::Invalid {
        member: member.to_string(),
        reason: format!("it is larger than the {JSON_LIMIT} bytes a JSON member may have"),
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The archive file for the tar crate, remembering whether reading the file itself failed.
struct Tracked<'a> {
    file: &'a File,
    failed: bool,
}

impl Read for Tracked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read(buf).inspect_err(|_| self.failed = true)
    }
}

impl Seek for Tracked<'_> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos).inspect_err(|_| self.failed = true)
    }
}

/// One member's data, read with `pread` (no shared file position), remembering whether reading the
/// file failed.
struct MemberReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
    failed: bool,
}

impl Read for MemberReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        match self.file.read_at(&mut buf[..want], self.pos) {
            Ok(0) => {
                self.failed = true;
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the archive file ended early (was it changed while read?)",
                ))
            }
            Ok(n) => {
                self.pos += n as u64;
                Ok(n)
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    self.failed = true;
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
