//! The reconciler of image pulls no process runs any more.
//!
//! A pull that dies (the daemon is killed mid-download) leaves its image row `pulling` and its claim
//! `('image.pull', digest)` pending, and maybe a half-unpacked layer in the layer store's staging
//! directory (never in `layers/`, see `sandboxd_images::layers`; the daemon clears staging at
//! start-up). Once such a row is stuck ([`Service::is_stuck`]: last touched before this process
//! started, or no progress recorded within the deadline) and no pull of this process holds it, the
//! row and the claim are deleted, so the next create or pull of the image starts over.
//!
//! The same sweep keeps the layer cache under `--image-cache-max-mb`
//! ([`Service::enforce_image_cache`]).

use super::{ReconcileReport, Reconciler};
use crate::{images::PULL_SCOPE, Service, ServiceError};
use sandboxd_store::{unix_millis_now, ImageState};

/// Sweeps `pulling` images ([`super::TransitionalState::ImagePulling`]).
pub struct ImageReconciler;

#[async_trait::async_trait]
impl Reconciler for ImageReconciler {
    fn name(&self) -> &'static str {
        "images"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let now = unix_millis_now();
        let mut report = ReconcileReport::default();
        for image in svc.list_images().await? {
            if image.state != ImageState::Pulling {
                continue;
            }
            report.examined += 1;
            if svc.inner.pulls.is_running(&image.digest) || !svc.is_stuck(image.updated_at, now) {
                continue;
            }
            let digest = image.digest.clone();
            let abandoned = svc
                .writer()
                .write(move |tx| {
                    if let Some(claim) = tx.get_claim(PULL_SCOPE, &digest)? {
                        tx.delete_claim(PULL_SCOPE, &digest, claim.generation)?;
                    }
                    tx.abandon_image_pull(&digest)
                })
                .await?;
            if abandoned {
                tracing::info!(image = %image.digest, reference = %image.reference, "abandoned pull cleared");
                report.act("pulls_abandoned");
            }
        }
        let evicted = svc.enforce_image_cache().await?;
        for _ in 0..evicted {
            report.act("images_evicted");
        }
        Ok(report)
    }
}
