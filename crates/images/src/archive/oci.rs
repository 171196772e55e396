//! OCI image layouts in a tar: `index.json`, nested indexes resolved to this host's platform, the
//! manifest, config and layers checked against their descriptors (see the module contract in
//! [`super`]).

use super::*;

#[derive(Deserialize)]
pub(super) struct Index {
    #[serde(default)]
    pub(super) manifests: Vec<Descriptor>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(super) struct Descriptor {
    #[serde(default)]
    pub(super) media_type: String,
    pub(super) digest: String,
    pub(super) size: u64,
    #[serde(default)]
    pub(super) annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) platform: Option<Platform>,
}

#[derive(Deserialize, Clone)]
pub(super) struct Platform {
    #[serde(default)]
    pub(super) os: String,
    #[serde(default)]
    pub(super) architecture: String,
    #[serde(default)]
    pub(super) variant: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Manifest {
    #[serde(default)]
    pub(super) media_type: String,
    pub(super) config: Option<Descriptor>,
    #[serde(default)]
    pub(super) layers: Vec<Descriptor>,
    #[serde(default)]
    pub(super) manifests: Option<Vec<Descriptor>>,
}

impl Descriptor {
    pub(super) fn ref_name(&self) -> Option<&str> {
        self.annotations.get(REF_NAME).map(String::as_str)
    }

    /// The blob's member name, or an error naming `referrer` for a digest that is not sha256.
    pub(super) fn member(&self, referrer: &str) -> Result<String, ArchiveError> {
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

pub(super) fn oci(
    archive: &Archive,
    name: Option<&str>,
    store: &LayerStore,
) -> Result<Plan, ImageError> {
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
pub(super) fn oci_image(
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
pub(super) fn choose(member: &str, entries: &[Descriptor]) -> Result<Descriptor, ArchiveError> {
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
pub(super) fn host_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    ("linux", arch)
}

pub(super) fn check_size(
    member: &str,
    descriptor: &Descriptor,
    data: Data,
) -> Result<(), ArchiveError> {
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
