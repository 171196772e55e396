//! Images: pulling on demand, listing, removing, pruning — the store's records over the layer store.
//!
//! Guarantees:
//! - **One download per image, however many ask.** [`Service::ensure_image`] resolves the reference
//!   (a cached tag needs no registry at all), then serializes on the manifest digest: in this process
//!   with a per-digest lock, across attempts with the seed's claim `('image.pull', digest)` in
//!   `request_idempotency`. The first caller pulls; everyone waiting behind it finds the image
//!   `ready` and downloads nothing (`tests/images.rs` counts the registry's blob GETs).
//! - **A pull is a retried operation.** Its row is `pulling` while it runs (with its progress, which
//!   also shows it is alive); success records the layers, the config and the tag and marks it `ready`
//!   in one write, and deletes the claim. A failed pull deletes both, and its partial layer is only
//!   ever a staging directory (see `sandboxd_images::layers`). A crash leaves a `pulling` row and a
//!   pending claim: the image reconciler ([`crate::reconcile::images`]) deletes both once stuck, and
//!   the daemon clears staging at start-up, so the next caller redoes the pull from a clean state.
//! - **Nothing in use is removed.** Removal and pruning go through the store, whose foreign keys
//!   refuse an image a sandbox uses and a layer an image stacks; a layer's directory goes only after
//!   its row did, and pruning excludes pulls (a write lock pulls take for reading), so a pull never
//!   counts on a directory a prune is about to delete.
//! - Credentials given for a pull are used for it and dropped; nothing here stores or logs them.
//!
//! Failpoint `image.pull-after-layer`: a pull that fetched a layer holds there (the crash test kills
//! the daemon in that window).

use crate::{Service, ServiceError};
use sandboxd_images::pull::{self, Progress};
use sandboxd_images::{Credentials, ImageError, ImageRef, LayerStore, Registry, RunConfig};
use sandboxd_store::{unix_millis_now, ClaimOutcome, ImageRecord, ImageState, LayerRecord};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The claim scope of pulls.
pub const PULL_SCOPE: &str = "image.pull";
/// How long a pull's claim holds off other attempts (a daemon restart releases it sooner: the image
/// reconciler sweeps claims of pulls no process runs).
const PULL_LOCK: Duration = Duration::from_secs(3600);
/// How often a running pull records its progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// What the daemon pulls with and where layers live.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    /// Registries, mirrors, plain-HTTP hosts.
    pub registry: Registry,
    /// The layer store.
    pub layers: LayerStore,
}

/// In-process coordination of pulls and prunes.
#[derive(Default)]
pub(crate) struct PullState {
    /// One pull per manifest digest at a time.
    locks: crate::pause::KeyedLocks,
    /// Pulls hold it shared, a prune exclusively.
    gc: tokio::sync::RwLock<()>,
    /// Digests whose pull runs in this process (the reconciler leaves them alone).
    running: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl PullState {
    /// Whether this process runs a pull of `digest` now.
    pub(crate) fn is_running(&self, digest: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(digest)
    }
}

/// Marks a digest's pull as running in this process while alive.
struct Running<'a> {
    state: &'a PullState,
    digest: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.state
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.digest);
    }
}

impl Service {
    pub(crate) fn image_settings(&self) -> Result<&ImageSettings, ServiceError> {
        self.config().images.as_ref().ok_or_else(|| {
            ServiceError::InvalidRequest("this daemon has no image store configured".into())
        })
    }

    /// The `ready` image `reference` names, pulled first if this node lacks it. A tag already pulled
    /// is used as it is (no registry is asked, as `docker run` does); `credentials` are used for this
    /// pull only.
    pub async fn ensure_image(
        &self,
        reference: &str,
        credentials: Option<Credentials>,
    ) -> Result<ImageRecord, ServiceError> {
        let settings = self.image_settings()?;
        let parsed: ImageRef = reference.parse().map_err(ImageError::from)?;
        if let Some(found) = self.cached_image(&parsed).await? {
            return Ok(found);
        }
        let _no_prune = self.inner.pulls.gc.read().await;
        let (session, resolved) =
            pull::resolve(&settings.registry, &parsed, credentials.as_ref()).await?;
        let digest = resolved.digest.clone();
        let _one_pull = self.inner.pulls.locks.lock(&digest).await;
        let canonical = parsed.canonical();
        if let Some(found) = self.ready_image(&digest).await? {
            return self.tagged(found, parsed.tag().map(|_| canonical)).await;
        }
        let now = unix_millis_now();
        let d = digest.clone();
        let claimed = self
            .writer()
            .write(move |tx| tx.claim(PULL_SCOPE, &d, "pull", now, PULL_LOCK))
            .await?;
        let generation = match claimed {
            ClaimOutcome::Acquired { generation } => generation,
            // Every attempt of this process runs under the lock above and deletes its claim when it
            // ends, so a live claim is one a crashed process left: the image reconciler frees it.
            ClaimOutcome::InFlight { .. }
            | ClaimOutcome::Replay { .. }
            | ClaimOutcome::Mismatch => {
                return Err(ServiceError::InFlight {
                    retry_after_secs: 5,
                })
            }
        };
        let _running = {
            self.inner
                .pulls
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(digest.clone());
            Running {
                state: &self.inner.pulls,
                digest: digest.clone(),
            }
        };
        let tag = parsed.tag().map(|_| canonical.clone());
        let outcome = self
            .pull_claimed(settings, &session, resolved, &canonical, tag)
            .await;
        let d = digest.clone();
        let failed = outcome.is_err();
        let released = self
            .writer()
            .write(move |tx| {
                if failed {
                    tx.abandon_image_pull(&d)?;
                }
                tx.delete_claim(PULL_SCOPE, &d, generation)
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(image = %digest, error = %crate::error::chain(&e), "could not release a pull's claim");
        }
        outcome
    }

    /// Runs the pull this caller claimed: the `pulling` row, the layers, then the `ready` row.
    async fn pull_claimed(
        &self,
        settings: &ImageSettings,
        session: &sandboxd_images::registry::Session,
        resolved: sandboxd_images::registry::Resolved,
        canonical: &str,
        tag: Option<String>,
    ) -> Result<ImageRecord, ServiceError> {
        let digest = resolved.digest.clone();
        let size: u64 = resolved.layers.iter().map(|l| l.size).sum();
        let (d, r) = (digest.clone(), canonical.to_string());
        self.writer()
            .write(move |tx| tx.begin_image_pull(&d, &r, size, unix_millis_now()))
            .await?;
        tracing::info!(image = %canonical, %digest, layers = resolved.layers.len(), bytes = size, "pulling");
        let progress = Arc::new(Progress::default());
        let reporter = self.report_progress(digest.clone(), progress.clone());
        let pulled = pull::pull(session, resolved, &settings.layers, progress).await;
        reporter.abort();
        let pulled = pulled?;
        crate::failpoints::hold("image.pull-after-layer").await;
        let layers: Vec<LayerRecord> = pulled
            .resolved
            .layers
            .iter()
            .zip(&pulled.unpacked)
            .map(|(l, unpacked)| layer_record(l, *unpacked))
            .collect();
        let config = serde_json::to_value(&pulled.config).unwrap_or_default();
        let d = digest.clone();
        let image = self
            .writer()
            .write(move |tx| {
                tx.complete_image(&d, &config, &layers, tag.as_deref(), unix_millis_now())?;
                tx.get_image(&d)
            })
            .await?;
        tracing::info!(image = %canonical, %digest, "pulled");
        image.ok_or_else(|| ServiceError::NotFound(format!("image {digest} vanished")))
    }

    /// Records `progress` on the image's row every [`PROGRESS_EVERY`] until aborted.
    fn report_progress(
        &self,
        digest: String,
        progress: Arc<Progress>,
    ) -> tokio::task::JoinHandle<()> {
        let svc = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROGRESS_EVERY).await;
                let done = progress.done.load(Ordering::Relaxed);
                let d = digest.clone();
                let _ = svc
                    .writer()
                    .write(move |tx| tx.set_image_progress(&d, done, unix_millis_now()))
                    .await;
            }
        })
    }

    /// The ready image a tag or digest reference names on this node, if any (no registry asked).
    async fn cached_image(&self, parsed: &ImageRef) -> Result<Option<ImageRecord>, ServiceError> {
        if let Some(digest) = parsed.digest() {
            return self.ready_image(digest).await;
        }
        let canonical = parsed.canonical();
        let found = self
            .reader()
            .read(move |tx| tx.image_by_tag(&canonical))
            .await?;
        Ok(found.filter(|i| i.state == ImageState::Ready))
    }

    async fn ready_image(&self, digest: &str) -> Result<Option<ImageRecord>, ServiceError> {
        let d = digest.to_string();
        let found = self
            .reader()
            .read_by_key(move |tx| tx.get_image(&d))
            .await?;
        Ok(found.filter(|i| i.state == ImageState::Ready))
    }

    async fn tagged(
        &self,
        image: ImageRecord,
        tag: Option<String>,
    ) -> Result<ImageRecord, ServiceError> {
        let Some(tag) = tag else { return Ok(image) };
        if image.tags.contains(&tag) {
            return Ok(image);
        }
        let d = image.digest.clone();
        let found = self
            .writer()
            .write(move |tx| {
                tx.tag_image(&tag, &d, unix_millis_now())?;
                tx.get_image(&d)
            })
            .await?;
        Ok(found.unwrap_or(image))
    }

    /// Imports the image archive (`docker save` tarball or OCI layout tar) `body` streams: it is
    /// spooled to the layer store's staging directory, verified, its missing layers installed, and
    /// the image recorded `ready` under the archive's names (those that are references) and `tag`.
    /// `name` picks one image of an archive holding several.
    pub async fn import_image<S>(
        &self,
        body: S,
        name: Option<String>,
        tag: Option<String>,
    ) -> Result<ImageRecord, ServiceError>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + Unpin,
    {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let settings = self.image_settings()?;
        let tag = match tag {
            Some(t) => Some(t.parse::<ImageRef>().map_err(ImageError::from)?.canonical()),
            None => None,
        };
        let _no_prune = self.inner.pulls.gc.read().await;
        let spool = settings.layers.root().join("staging").join(format!(
            "import-{}.tar",
            crate::sandboxes::random_id("", 16)
        ));
        let spooled = async {
            let mut file = tokio::fs::File::create(&spool).await?;
            let mut body = body;
            while let Some(chunk) = body.next().await {
                file.write_all(&chunk?).await?;
            }
            file.flush().await
        }
        .await;
        let imported = match spooled {
            Ok(()) => {
                let (layers, path) = (settings.layers.clone(), spool.clone());
                tokio::task::spawn_blocking(move || {
                    sandboxd_images::archive::import(&path, name.as_deref(), &layers)
                })
                .await
                .map_err(|e| ImageError::Task(e.to_string()))
                .and_then(|r| r)
            }
            Err(e) => Err(ImageError::Read {
                digest: "the uploaded archive".into(),
                source: e,
            }),
        };
        let _ = tokio::fs::remove_file(&spool).await;
        let imported = imported?;
        let _one = self.inner.pulls.locks.lock(&imported.digest).await;
        let mut tags: Vec<String> = imported
            .names
            .iter()
            .filter_map(|n| n.parse::<ImageRef>().ok())
            .filter(|r| r.tag().is_some())
            .map(|r| r.canonical())
            .collect();
        tags.extend(tag);
        tags.sort();
        tags.dedup();
        let reference = tags
            .first()
            .cloned()
            .unwrap_or_else(|| imported.digest.clone());
        let layers: Vec<LayerRecord> = imported
            .layers
            .iter()
            .map(|(l, unpacked)| layer_record(l, *unpacked))
            .collect();
        let size = layers.iter().map(|l| l.size).sum();
        let config = serde_json::to_value(&imported.config).unwrap_or_default();
        let digest = imported.digest.clone();
        let image = self
            .writer()
            .write(move |tx| {
                let now = unix_millis_now();
                let row = tx.begin_image_pull(&digest, &reference, size, now)?;
                if row.state != ImageState::Ready {
                    tx.complete_image(&digest, &config, &layers, None, now)?;
                }
                for tag in &tags {
                    tx.tag_image(tag, &digest, now)?;
                }
                tx.get_image(&digest)
            })
            .await?;
        tracing::info!(image = %imported.digest, "imported");
        image.ok_or_else(|| ServiceError::NotFound(format!("image {} vanished", imported.digest)))
    }

    /// Every image on this node.
    pub async fn list_images(&self) -> Result<Vec<ImageRecord>, ServiceError> {
        Ok(self.reader().read(|tx| tx.list_images()).await?)
    }

    /// The image a reference or digest names on this node.
    pub async fn get_image(&self, key: &str) -> Result<ImageRecord, ServiceError> {
        let found = match sandboxd_images::digest_hex(key) {
            Some(_) => {
                let d = key.to_string();
                self.reader()
                    .read_by_key(move |tx| tx.get_image(&d))
                    .await?
            }
            None => {
                let parsed: ImageRef = key.parse().map_err(ImageError::from)?;
                let canonical = parsed.canonical();
                self.reader()
                    .read(move |tx| tx.image_by_tag(&canonical))
                    .await?
            }
        };
        found.ok_or_else(|| ServiceError::NotFound(format!("image {key} not found")))
    }

    /// Removes the image a reference or digest names (its tags with it; its layers stay for
    /// [`Service::prune_images`]). A conflict while a sandbox uses it.
    pub async fn remove_image(&self, key: &str) -> Result<ImageRecord, ServiceError> {
        let image = self.get_image(key).await?;
        if image.state == ImageState::Pulling {
            return Err(ServiceError::Conflict(format!(
                "image {key} is being pulled"
            )));
        }
        let d = image.digest.clone();
        self.await_teardowns(&format!("image {key}"), move |s| {
            s.image.as_deref() == Some(d.as_str())
        })
        .await?;
        let d = image.digest.clone();
        let removed = self.writer().write(move |tx| tx.delete_image(&d)).await;
        match removed {
            Ok(_) => Ok(image),
            Err(sandboxd_store::StoreError::InUse { .. }) => Err(ServiceError::Conflict(format!(
                "image {key} is used by a sandbox"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes every layer no image stacks, and whatever the layer store holds that the store does
    /// not know (what a crash between unpacking and recording left); returns the bytes freed.
    pub async fn prune_images(&self) -> Result<PruneReport, ServiceError> {
        let settings = self.image_settings()?;
        let _exclusive = self.inner.pulls.gc.write().await;
        let pruned = self.writer().write(|tx| tx.prune_layers()).await?;
        let known: std::collections::HashSet<String> = self
            .reader()
            .read(|tx| tx.list_layers())
            .await?
            .into_iter()
            .map(|l| l.digest)
            .collect();
        let layers = settings.layers.clone();
        let mut report = PruneReport {
            layers: pruned.len(),
            bytes: pruned.iter().map(|l| l.unpacked_bytes).sum(),
        };
        let removed = tokio::task::spawn_blocking(move || -> Result<usize, ImageError> {
            let mut removed = 0;
            for digest in layers.installed()? {
                if !known.contains(&digest) {
                    layers.remove(&digest)?;
                    removed += 1;
                }
            }
            Ok(removed)
        })
        .await
        .map_err(|e| ServiceError::Image(ImageError::Task(e.to_string())))??;
        report.layers = report.layers.max(removed);
        Ok(report)
    }

    /// Keeps the layer cache within [`crate::ServiceConfig::image_cache_max_mb`]: while the layers'
    /// unpacked size is over it, the least recently used image no sandbox or template uses is
    /// removed and unused layers pruned. Returns how many images went. Nothing in use is touched
    /// (the store's foreign keys would refuse it anyway).
    pub async fn enforce_image_cache(&self) -> Result<usize, ServiceError> {
        let cap = self.config().image_cache_max_mb.saturating_mul(1024 * 1024);
        if cap == 0 || self.config().images.is_none() {
            return Ok(0);
        }
        let used = |layers: &[sandboxd_store::LayerRecord]| -> u64 {
            layers.iter().map(|l| l.unpacked_bytes).sum()
        };
        let mut size = used(&self.reader().read(|tx| tx.list_layers()).await?);
        if size <= cap {
            return Ok(0);
        }
        let mut evicted = 0;
        for digest in self.reader().read(|tx| tx.evictable_images()).await? {
            if size <= cap {
                break;
            }
            let d = digest.clone();
            match self.writer().write(move |tx| tx.delete_image(&d)).await {
                Ok(true) => evicted += 1,
                Ok(false) | Err(sandboxd_store::StoreError::InUse { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            self.prune_images().await?;
            size = used(&self.reader().read(|tx| tx.list_layers()).await?);
            tracing::info!(image = %digest, cache_bytes = size, "evicted from the image cache");
        }
        if size > cap {
            self.prune_images().await?;
        }
        Ok(evicted)
    }

    /// The run settings a ready image's record carries.
    pub fn run_config(image: &ImageRecord) -> RunConfig {
        serde_json::from_value(image.config.clone()).unwrap_or_default()
    }

    /// The layer directories of `image`, lowest first.
    pub fn layer_dirs(&self, image: &ImageRecord) -> Result<Vec<std::path::PathBuf>, ServiceError> {
        let settings = self.image_settings()?;
        image
            .layers
            .iter()
            .map(|d| {
                settings
                    .layers
                    .path(d)
                    .ok_or_else(|| ServiceError::Image(ImageError::UnsupportedDigest(d.clone())))
            })
            .collect()
    }
}

/// The store's record of the layer `descriptor` names, whose files take `unpacked` bytes.
pub(crate) fn layer_record(
    descriptor: &sandboxd_images::LayerDescriptor,
    unpacked: u64,
) -> LayerRecord {
    LayerRecord {
        digest: descriptor.digest.clone(),
        media_type: descriptor.media_type.clone(),
        size: descriptor.size,
        unpacked_bytes: unpacked,
    }
}

/// What a prune freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Layers removed.
    pub layers: usize,
    /// Bytes their files took.
    pub bytes: u64,
}
