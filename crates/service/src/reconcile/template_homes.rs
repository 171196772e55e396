//! The template-homes reconciler (cluster mode): the log's record of where each template is ready
//! ([`sandboxd_cluster::ClusterState::templates`]) brought to agree with this node's templates.
//!
//! Intent is this node's `ready` templates; observed is the log's homes naming this node. Each pass
//! records a ready template the log does not place here (a build finished before the cluster formed,
//! or whose proposal was lost) and takes this node off a template it no longer has. Placement sends
//! creates of a template only to its homes, so a home that is not one would fail them.
//!
//! Without a cluster it examines nothing.

use super::{ReconcileReport, Reconciler};
use crate::{Service, ServiceError};
use sandboxd_cluster::Command;
use sandboxd_store::TemplateState;
use std::collections::BTreeSet;

/// Sweeps the log's template homes of this node against its templates.
pub struct TemplateHomeReconciler;

#[async_trait::async_trait]
impl Reconciler for TemplateHomeReconciler {
    fn name(&self) -> &'static str {
        "template-homes"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let mut report = ReconcileReport::default();
        let Some(cluster) = svc.cluster() else {
            return Ok(report);
        };
        let me = cluster.id();
        let recorded: BTreeSet<String> = cluster.read(|s| {
            s.templates
                .iter()
                .filter(|(_, homes)| homes.contains(&me))
                .map(|(name, _)| name.clone())
                .collect()
        });
        let ready: BTreeSet<String> = svc
            .list_templates()
            .await?
            .into_iter()
            .filter(|t| t.state == TemplateState::Ready)
            .map(|t| t.name)
            .collect();
        report.examined = recorded.len() + ready.len();
        let changes = ready
            .difference(&recorded)
            .map(|name| (name, true))
            .chain(recorded.difference(&ready).map(|name| (name, false)));
        for (name, present) in changes {
            let command = Command::TemplateHome {
                name: name.clone(),
                node: me,
                present,
            };
            match cluster.propose(command).await {
                Ok(_) => report.act(if present { "recorded" } else { "removed" }),
                Err(_) => report.errors += 1,
            }
        }
        Ok(report)
    }
}
