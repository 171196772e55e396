//! The content-addressed layer store on disk.
//!
//! Layout under the store's root: `layers/<hex>` holds the unpacked layer whose compressed blob is
//! `sha256:<hex>`, in overlayfs lower-dir form (whiteouts as 0:0 devices, opaque dirs by xattr), owned
//! by ids shifted into the sandboxes' range; `staging/` holds layers being unpacked.
//!
//! Contract:
//! - **Only complete, verified layers are visible.** A layer is unpacked into a fresh staging dir while
//!   its blob is hashed; only when the blob ended, its digest matched and the unpacker accepted every
//!   member is the staging dir renamed to `layers/<hex>` (one atomic rename). A failure or a crash
//!   leaves at most a staging dir, which [`LayerStore::clear_staging`] removes (at start-up, before any
//!   install runs).
//! - **Installs are idempotent.** Installing a layer that is present does nothing; two installs of one
//!   layer racing each other both succeed and one tree stays.
//! - The store knows nothing of who uses a layer: the daemon's database does, and only it removes one.

use crate::registry::LayerDescriptor;
use crate::unpack::{unpack_layer, Compression, UnpackLimits};
use crate::ImageError;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The layer store.
#[derive(Debug, Clone)]
pub struct LayerStore {
    root: PathBuf,
    id_shift: u32,
    limits: UnpackLimits,
}

impl LayerStore {
    /// The store under `root` (created if missing), whose layers' owners are shifted by `id_shift`
    /// (the sandboxes' root maps to that host id).
    pub fn open(root: impl Into<PathBuf>, id_shift: u32) -> Result<Self, ImageError> {
        let root = root.into();
        for dir in [root.join("layers"), root.join("staging")] {
            std::fs::create_dir_all(&dir).map_err(ImageError::io("create", &dir))?;
        }
        Ok(Self {
            root,
            id_shift,
            limits: UnpackLimits::default(),
        })
    }

    /// The host id a sandbox's root maps to, which owns the layers' root-owned files.
    pub fn id_shift(&self) -> u32 {
        self.id_shift
    }

    /// Where the layer `digest` is (or would be) unpacked; `None` for a digest that is not sha256.
    pub fn path(&self, digest: &str) -> Option<PathBuf> {
        crate::digest_hex(digest).map(|hex| self.root.join("layers").join(hex))
    }

    /// Whether layer `digest` is installed.
    pub fn contains(&self, digest: &str) -> bool {
        self.path(digest).is_some_and(|p| p.is_dir())
    }

    /// Unpacks the blob `layer` read from `blob` and installs it; returns the bytes its files take.
    /// Blocking: run it off the async threads.
    pub fn install(&self, layer: &LayerDescriptor, blob: impl Read) -> Result<u64, ImageError> {
        let target = self
            .path(&layer.digest)
            .ok_or_else(|| ImageError::UnsupportedDigest(layer.digest.clone()))?;
        let compression = Compression::from_media_type(&layer.media_type).ok_or_else(|| {
            ImageError::MediaType {
                digest: layer.digest.clone(),
                media_type: layer.media_type.clone(),
            }
        })?;
        let staging = self.root.join("staging").join(format!(
            "{}-{}-{}",
            crate::digest_hex(&layer.digest).unwrap_or("layer"),
            std::process::id(),
            unique()
        ));
        std::fs::create_dir(&staging).map_err(ImageError::io("create", &staging))?;
        let outcome = (|| {
            let mut hashed = Hashing::new(blob);
            let stats = unpack_layer(
                &mut hashed,
                compression,
                &staging,
                self.id_shift,
                &self.limits,
            )
            .map_err(|source| ImageError::Unpack {
                digest: layer.digest.clone(),
                source,
            })?;
            // The tar may end before the blob does (padding, a compressor's trailer): the digest
            // covers every byte.
            std::io::copy(&mut hashed, &mut std::io::sink()).map_err(|source| {
                ImageError::Read {
                    digest: layer.digest.clone(),
                    source,
                }
            })?;
            let actual = hashed.digest();
            if actual != layer.digest {
                return Err(ImageError::DigestMismatch {
                    digest: layer.digest.clone(),
                    actual,
                });
            }
            Ok(stats.bytes)
        })();
        let bytes = match outcome {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        match std::fs::rename(&staging, &target) {
            Ok(()) => Ok(bytes),
            // A racing install of the same layer got there first; its tree is the same.
            Err(_) if target.is_dir() => {
                let _ = std::fs::remove_dir_all(&staging);
                Ok(bytes)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                Err(ImageError::io("install", &target)(e))
            }
        }
    }

    /// Removes layer `digest` from disk (the caller has made sure nothing uses it). Removing an
    /// absent layer succeeds.
    pub fn remove(&self, digest: &str) -> Result<(), ImageError> {
        let Some(path) = self.path(digest) else {
            return Ok(());
        };
        // Out of `layers/` first, so a half-removed tree is never taken for a complete layer.
        let doomed =
            self.root
                .join("staging")
                .join(format!("removed-{}-{}", std::process::id(), unique()));
        match std::fs::rename(&path, &doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(ImageError::io("remove", &path)(e)),
        }
        std::fs::remove_dir_all(&doomed).map_err(ImageError::io("remove", &doomed))
    }

    /// Removes everything in `staging/` (what failed or crashed installs and removals left); returns
    /// how many entries went. Call it only when no install runs.
    pub fn clear_staging(&self) -> Result<usize, ImageError> {
        let staging = self.root.join("staging");
        let entries = std::fs::read_dir(&staging).map_err(ImageError::io("list", &staging))?;
        let mut removed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let gone = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            gone.map_err(ImageError::io("remove", &path))?;
            removed += 1;
        }
        Ok(removed)
    }

    /// The digests of every installed layer.
    pub fn installed(&self) -> Result<Vec<String>, ImageError> {
        let dir = self.root.join("layers");
        let entries = std::fs::read_dir(&dir).map_err(ImageError::io("list", &dir))?;
        let mut out: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(|n| format!("sha256:{n}")))
            .filter(|d| crate::digest_hex(d).is_some())
            .collect();
        out.sort();
        Ok(out)
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A reader that hashes what passes through it.
pub(crate) struct Hashing<R> {
    pub(crate) inner: R,
    hasher: Sha256,
}

impl<R> Hashing<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
        }
    }

    /// `sha256:<hex>` of everything read so far.
    pub(crate) fn digest(self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.finalize()))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer_tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h.set_cksum();
            b.append_data(&mut h, path, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn descriptor(blob: &[u8]) -> LayerDescriptor {
        LayerDescriptor {
            digest: format!("sha256:{}", hex::encode(Sha256::digest(blob))),
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size: blob.len() as u64,
        }
    }

    fn store() -> (tempfile::TempDir, LayerStore) {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let store = LayerStore::open(dir.path().join("images"), uid).unwrap();
        (dir, store)
    }

    #[test]
    fn a_verified_layer_is_installed_once_and_found_by_digest() {
        let (_dir, store) = store();
        let blob = layer_tar(&[("hello.txt", b"hi\n")]);
        let layer = descriptor(&blob);
        assert!(!store.contains(&layer.digest));
        store.install(&layer, &blob[..]).unwrap();
        let path = store.path(&layer.digest).unwrap();
        assert_eq!(std::fs::read(path.join("hello.txt")).unwrap(), b"hi\n");
        // Again: nothing changes, nothing fails.
        store.install(&layer, &blob[..]).unwrap();
        assert_eq!(store.installed().unwrap(), vec![layer.digest.clone()]);
        assert_eq!(store.clear_staging().unwrap(), 0);
        store.remove(&layer.digest).unwrap();
        assert!(!store.contains(&layer.digest));
        store.remove(&layer.digest).unwrap();
    }

    /// A blob whose bytes do not match its digest installs nothing, and leaves nothing behind.
    #[test]
    fn a_blob_that_does_not_match_its_digest_leaves_no_layer() {
        let (_dir, store) = store();
        let blob = layer_tar(&[("a", b"1")]);
        let mut layer = descriptor(&blob);
        let other = layer_tar(&[("a", b"2")]);
        layer.digest = descriptor(&other).digest;
        let err = store.install(&layer, &blob[..]).unwrap_err();
        assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
        assert!(!store.contains(&layer.digest));
        assert!(store.installed().unwrap().is_empty());
        assert_eq!(
            std::fs::read_dir(store.root().join("staging"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn unknown_media_types_and_digests_are_refused() {
        let (_dir, store) = store();
        let blob = layer_tar(&[("a", b"1")]);
        let mut layer = descriptor(&blob);
        layer.media_type = "application/vnd.example.weird".into();
        assert!(matches!(
            store.install(&layer, &blob[..]),
            Err(ImageError::MediaType { .. })
        ));
        layer.digest = "sha512:abcd".into();
        assert!(store.path(&layer.digest).is_none());
        assert!(matches!(
            store.install(&layer, &blob[..]),
            Err(ImageError::UnsupportedDigest(_))
        ));
    }
}
