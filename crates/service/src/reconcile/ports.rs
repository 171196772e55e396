//! The port reconciler: exposures stuck in `exposing`.
//!
//! An exposure is reserved (`exposing`), then its route is installed and it turns `active`. A flow that
//! died in between leaves the reservation. Past the deadline, by the state of its sandbox:
//! - `running`: the route is installed (a TCP forwarder through `Service::install_forwarder`; an
//!   HTTP route needs nothing, the proxy resolves it per request) and the row marked `active`;
//! - `paused`: kept as is — a paused sandbox keeps its exposures and the next pass after its resume
//!   installs the route;
//! - anything else (or a UDP exposure, which this daemon cannot forward): the reservation is deleted
//!   (exactly that reservation, see [`sandboxd_store::WriteTx::delete_exposed_port`]), freeing its host
//!   port.
//!
//! And every exposure, in any state, of a `failed` or `lost` sandbox: its host port is released (the
//! row deleted, announced, its forwarder stopped). Settling a sandbox does this in the same write; the
//! sweep catches rows settled before that, or by an older build.

use super::{ReconcileReport, Reconciler};
use crate::settle::withdraw_in;
use crate::{Service, ServiceError};
use sandboxd_proxy::Upstream;
use sandboxd_store::{unix_millis_now, ExposedPort, PortState, Protocol, SandboxState};
use std::net::SocketAddr;

/// Sweeps exposures in `exposing` ([`super::TransitionalState::PortExposing`]).
pub struct PortReconciler;

#[async_trait::async_trait]
impl Reconciler for PortReconciler {
    fn name(&self) -> &'static str {
        "ports"
    }

    async fn reconcile(&self, svc: &Service) -> Result<ReconcileReport, ServiceError> {
        let now = unix_millis_now();
        let rows = svc
            .reader()
            .read(|tx| tx.exposed_ports_in_state(PortState::Exposing))
            .await?;
        let settled = svc
            .reader()
            .read(|tx| {
                tx.exposed_ports_of_sandboxes_in(&[SandboxState::Failed, SandboxState::Lost])
            })
            .await?;
        let mut report = ReconcileReport {
            examined: rows.len() + settled.len(),
            ..Default::default()
        };
        for row in &settled {
            svc.inner.forwarders.remove(&row.sandbox_id, row.port);
            let mine = row.clone();
            let withdrawn = svc.writer().write(move |tx| withdraw_in(tx, &mine)).await?;
            if let Some(event) = withdrawn {
                svc.publish([event]);
                report.act("released");
            }
        }
        for row in rows.into_iter().filter(|r| svc.is_stuck(r.created_at, now)) {
            if settled
                .iter()
                .any(|s| s.sandbox_id == row.sandbox_id && s.port == row.port)
            {
                continue; // released above
            }
            match resolve(svc, &row).await {
                Ok(Some(kind)) => report.act(kind),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(sandbox_id = %row.sandbox_id, port = row.port, error = %crate::error::chain(&e), "cannot reconcile exposure");
                    report.errors += 1;
                }
            }
        }
        Ok(report)
    }
}

async fn resolve(svc: &Service, row: &ExposedPort) -> Result<Option<&'static str>, ServiceError> {
    let id = row.sandbox_id.clone();
    let state = svc
        .reader()
        .read(move |tx| tx.get_sandbox_by_id(&id))
        .await?
        .map(|s| s.state);
    match (state, row.protocol) {
        (Some(SandboxState::Running), Protocol::Http) => {
            let mine = row.clone();
            let marked = svc
                .writer()
                .write(move |tx| tx.mark_port_active(&mine))
                .await?;
            Ok(marked.then_some("activated"))
        }
        (Some(SandboxState::Running), Protocol::Tcp) => {
            let endpoint = svc.endpoint(&row.sandbox_id).await?;
            let upstream = Upstream::Tcp(SocketAddr::from((endpoint.address, row.port)));
            // `reused`: a failed install keeps the row (the next pass retries).
            svc.install_forwarder(row, upstream, true).await?;
            Ok(Some("activated"))
        }
        (Some(SandboxState::Paused), _) => Ok(None),
        _ => {
            svc.inner.forwarders.remove(&row.sandbox_id, row.port);
            let mine = row.clone();
            let deleted = svc
                .writer()
                .write(move |tx| tx.delete_exposed_port(&mine))
                .await?;
            Ok(deleted.then_some("deleted"))
        }
    }
}
