//! The reconciler of template builds no process runs any more.
//!
//! A build runs on a task of the daemon that started it; a daemon that dies mid-build leaves the
//! template `building` for ever. Once such a template is stuck ([`Service::is_stuck`]: last touched
//! — its last log line — before this process started, or longer ago than the deadline) and no build
//! of this process runs it, it is marked `failed`, so its name can be built again, and the sandboxes
//! its steps were running (labelled `sandboxd.build=<name>`; they outlive the daemon, as every
//! sandbox does) are deleted.

use super::{ReconcileReport, Reconciler};
use crate::builds::BUILD_LABEL;
use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, SandboxFilter, TemplateState};

/// Sweeps `building` templates ([`super::TransitionalState::TemplateBuilding`]).
pub struct TemplateReconciler;

/// Why a swept build failed, as its template says.
pub const ABANDONED: &str =
    "the build was interrupted (the daemon stopped); create the template again";

#[async_trait::async_trait]
impl Reconciler for TemplateReconciler {
    fn name(&self) -> &'static str {
        "templates"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let now = unix_millis_now();
        let mut report = ReconcileReport::default();
        let building = svc
            .reader()
            .read(|tx| tx.templates_in(TemplateState::Building))
            .await?;
        for template in building {
            report.examined += 1;
            if svc.inner.builds.is_running(&template.name)
                || !svc.is_stuck(template.updated_at, now)
            {
                continue;
            }
            let name = template.name.clone();
            let failed = svc
                .writer()
                .write(move |tx| tx.template_failed(&name, ABANDONED, unix_millis_now()))
                .await?;
            if failed {
                tracing::info!(template = %template.name, "abandoned build marked failed");
                report.act("builds_abandoned");
            }
            // Its step's sandbox outlived the daemon (sandboxes do); nobody will commit it now.
            let filter = SandboxFilter {
                metadata: vec![(BUILD_LABEL.to_string(), template.name.clone())],
                limit: 1000,
                ..Default::default()
            };
            for sandbox in svc.list(filter).await?.0 {
                match svc.delete(&sandbox.id).await {
                    Ok(()) => report.act("build_sandboxes_deleted"),
                    Err(ServiceError::NotFound(_)) => {}
                    Err(e) => {
                        tracing::warn!(sandbox_id = %sandbox.id, error = %crate::error::chain(&e), "could not delete an abandoned build's sandbox");
                        report.errors += 1;
                    }
                }
            }
        }
        Ok(report)
    }
}
