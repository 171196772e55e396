//! `docker save` archives: their `manifest.json` entries, the config named by its digest, the layers
//! checked against the config's `diff_ids`, and the manifest synthesized for them (see the module
//! contract in [`super`]).

use super::*;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct DockerEntry {
    pub(super) config: String,
    #[serde(default)]
    pub(super) repo_tags: Option<Vec<String>>,
    #[serde(default)]
    pub(super) layers: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct DiffIds {
    #[serde(default)]
    pub(super) rootfs: Option<RootFs>,
}

#[derive(Deserialize)]
pub(super) struct RootFs {
    #[serde(default)]
    pub(super) diff_ids: Vec<String>,
}

/// The synthesized manifest: field order and names are the digest's, do not change them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SynthesizedManifest<'a> {
    pub(super) schema_version: u32,
    pub(super) media_type: &'a str,
    pub(super) config: SynthesizedDescriptor<'a>,
    pub(super) layers: Vec<SynthesizedDescriptor<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SynthesizedDescriptor<'a> {
    pub(super) media_type: &'a str,
    pub(super) size: u64,
    pub(super) digest: &'a str,
}

pub(super) fn docker(archive: &Archive, name: Option<&str>) -> Result<Plan, ImageError> {
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
pub(super) fn same_docker_name(a: &str, b: &str) -> bool {
    pub(super) fn short(n: &str) -> &str {
        let n = n.strip_prefix("docker.io/").unwrap_or(n);
        n.strip_prefix("library/").unwrap_or(n)
    }
    a == b || short(a) == short(b)
}

/// The digest a member's name carries: `<hex>`, `<hex>.json` or `<hex>.tar` as its last component.
pub(super) fn digest_in_name(member: &str) -> Option<String> {
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
pub(super) fn is_blob_path(member: &str) -> bool {
    let normal = normalise(member);
    normal
        .strip_prefix("blobs/sha256/")
        .is_some_and(|hex| crate::digest_hex(&format!("sha256:{hex}")).is_some())
}
