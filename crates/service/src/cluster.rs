//! Cluster mode in the flows: what a create, a delete and the reconcilers tell the replicated log.
//!
//! Contract (the seed's "Hazard 2", held across nodes):
//! - **Reserve before the row.** A create on this node first reserves its id, owner (this node) and
//!   name in the log ([`sandboxd_cluster::Command::Reserve`]); the first committed reservation of a name
//!   wins cluster-wide and every other create of it answers [`ServiceError::NameConflict`] before it
//!   wrote anything. Then the local row is written (its own partial unique index still applies); a
//!   create that fails after the reservation releases it ([`Service::release_placement`]), and one that
//!   booted commits it.
//! - **Release after the claim.** A delete releases the placement once its claim moved the row to
//!   `deleting`, so the name is free cluster-wide as it is locally.
//! - **Without a quorum, no write.** A reservation that cannot commit answers
//!   [`ServiceError::ClusterUnavailable`] (503, `Retry-After`) and creates nothing; reads of local
//!   sandboxes do not touch the log.
//! - **Duplicates meet on one node.** Every E2B create with one fingerprint
//!   ([`crate::e2b::E2bCreate::fingerprint`]), whichever node it arrives at, is routed to the node the
//!   first was routed to, for [`crate::e2b::ROUTE_WINDOW`] ([`Service::route_fingerprint`]); that
//!   node's own claim then dedupes them exactly as on a single node, so 200 identical creates over
//!   every node get one sandbox.
//! - **Hostnames are the log's too.** A custom hostname is bound in the log before the local row
//!   ([`Service::bind_hostname_in_log`]): the first committed binding wins cluster-wide.
//! - **Templates are placed where they are.** A template that becomes ready here, or is deleted
//!   here, is recorded in the log ([`Service::template_home`]); creates of it are placed only on
//!   its homes.
//! - Whatever a crash or a lost answer leaves half done is found by the placements reconciler
//!   ([`crate::reconcile::placements`]).
//!
//! Without a cluster attached ([`Service::attach_cluster`]) every function here does nothing: the
//! daemon is a single node.

use crate::timestamps::rfc3339;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_cluster::state::Placement;
use sandboxd_cluster::{Cluster, ClusterError, Command, Outcome, SandboxSummary};
use sandboxd_store::NewSandbox;

/// The `/v1` view of lost placement `p` of `id`.
fn lost_view(id: &str, p: &Placement) -> api::Sandbox {
    let SandboxSummary {
        template,
        image,
        cpu_millis,
        memory_mb,
        disk_mb,
        metadata,
    } = p.summary.clone();
    api::Sandbox {
        id: id.to_string(),
        name: p.name.clone(),
        state: "lost".into(),
        template,
        image,
        cpu: f64::from(cpu_millis) / 1000.0,
        memory_mb: u64::from(memory_mb),
        disk_mb: u64::from(disk_mb),
        isolation: "namespace".into(),
        created_at: rfc3339(p.reserved_at_ms),
        expires_at: None,
        metadata,
        failure_reason: Some(format!(
            "node {} that ran it stopped renewing its cluster lease and was marked lost; its name is free, and the sandbox is destroyed when that node returns",
            p.owner
        )),
        network: Default::default(),
        lifecycle: Default::default(),
        volumes: Vec::new(),
        paused_memory: None,
    }
}

impl From<ClusterError> for ServiceError {
    fn from(e: ClusterError) -> Self {
        ServiceError::ClusterUnavailable(crate::error::chain(&e))
    }
}

impl Service {
    /// Runs this daemon as a member of `cluster` from now on. Once: a second call is ignored.
    pub fn attach_cluster(&self, cluster: Cluster) {
        let _ = self.inner.cluster.set(cluster);
    }

    /// The cluster this daemon is a member of, if any.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.inner.cluster.get()
    }

    /// Reserves sandbox `new` on this node in the log, with its name, its envd access token's digest
    /// and what it is created as (see the module doc).
    pub(crate) async fn reserve_placement(&self, new: &NewSandbox) -> Result<(), ServiceError> {
        let Some(cluster) = self.cluster() else {
            return Ok(());
        };
        let name = &new.name;
        let reserve = Command::Reserve {
            id: new.id.clone(),
            owner: cluster.id(),
            name: name.clone(),
            token_digest: sandboxd_cluster::state::token_digest(&new.agent_token),
            summary: SandboxSummary {
                template: new.template.clone(),
                image: new.image.clone(),
                cpu_millis: new.cpu_millis,
                memory_mb: new.memory_mb,
                disk_mb: new.disk_mb,
                metadata: new.metadata.clone(),
            },
            at_ms: sandboxd_cluster::node::now_ms(),
        };
        let mut outcome = crate::timing::step("place", cluster.propose(reserve.clone())).await?;
        // A node that answers before its first lease is applied waits for it (bounded), then asks
        // once more; one marked lost is refused below at once.
        if outcome == Outcome::OwnerUnavailable
            && cluster
                .await_own_lease(cluster.config().propose_timeout)
                .await
        {
            outcome = crate::timing::step("place", cluster.propose(reserve)).await?;
        }
        match outcome {
            // `Unchanged`: a retry of this very reservation committed before.
            Outcome::Applied | Outcome::Unchanged => Ok(()),
            Outcome::NameTaken { .. } => Err(ServiceError::NameConflict(name.to_string())),
            Outcome::OwnerUnavailable => Err(ServiceError::ClusterUnavailable(
                "this node holds no lease in the cluster yet, or is marked lost: it takes no sandbox until it has one".into(),
            )),
            other => Err(ServiceError::ClusterUnavailable(format!(
                "the cluster answered a reservation with {other:?}"
            ))),
        }
    }

    /// Sandbox `key` (id or name) as the log shows it when it was lost with its node: state `lost`,
    /// with what it was created as. `None` when it is not lost (or there is no cluster).
    pub fn lost_sandbox(&self, key: &str) -> Option<api::Sandbox> {
        let cluster = self.cluster()?;
        cluster.read(|s| {
            let (id, p) = s.lost_sandbox(key)?;
            Some(lost_view(id, p))
        })
    }

    /// Every sandbox the log shows lost with its node ([`Service::lost_sandbox`]), any order.
    pub fn lost_sandboxes(&self) -> Vec<api::Sandbox> {
        let Some(cluster) = self.cluster() else {
            return Vec::new();
        };
        cluster.read(|s| {
            s.placements
                .iter()
                .filter(|(_, p)| p.state == sandboxd_cluster::state::PlacementState::Lost)
                .map(|(id, p)| lost_view(id, p))
                .collect()
        })
    }

    /// What a lookup of `key` that found no sandbox here says: that it is lost, when the log says so.
    pub(crate) fn not_found(&self, key: &str) -> String {
        match self.lost_sandbox(key) {
            Some(lost) => format!(
                "sandbox {key} is lost: {}",
                lost.failure_reason.unwrap_or_default()
            ),
            None => format!("sandbox {key} not found"),
        }
    }

    /// The node an E2B create with `fingerprint` is served on: the one its first duplicate was routed
    /// to inside the window, else `chosen` (the placement's pick).
    pub async fn route_fingerprint(
        &self,
        fingerprint: &str,
        chosen: sandboxd_cluster::NodeId,
    ) -> Result<sandboxd_cluster::NodeId, ServiceError> {
        let Some(cluster) = self.cluster() else {
            return Ok(chosen);
        };
        let route = Command::RouteFingerprint {
            fingerprint: fingerprint.to_string(),
            owner: chosen,
            replay_ms: crate::e2b::ROUTE_WINDOW.as_millis() as i64,
            at_ms: sandboxd_cluster::node::now_ms(),
        };
        let mut outcome = cluster.propose(route.clone()).await?;
        // This node, chosen before its first lease is applied, waits for it as a reservation does.
        if outcome == Outcome::OwnerUnavailable
            && chosen == cluster.id()
            && cluster
                .await_own_lease(cluster.config().propose_timeout)
                .await
        {
            outcome = cluster.propose(route).await?;
        }
        match outcome {
            Outcome::Routed { owner } => Ok(owner),
            other => Err(ServiceError::ClusterUnavailable(format!(
                "the cluster answered a create's routing with {other:?}"
            ))),
        }
    }

    /// Binds `hostname` to `id` in the log; [`ServiceError::HostnameConflict`] when another live
    /// sandbox holds it. Answers whether this call made the binding (`false`: it was `id`'s already,
    /// or there is no cluster), so a caller undoing a failure undoes only what it made — the seed's
    /// "reused" flag, here for the log.
    pub(crate) async fn bind_hostname_in_log(
        &self,
        hostname: &str,
        id: &str,
    ) -> Result<bool, ServiceError> {
        let Some(cluster) = self.cluster() else {
            return Ok(false);
        };
        let outcome = cluster
            .propose(Command::BindHostname {
                hostname: hostname.to_string(),
                id: id.to_string(),
            })
            .await?;
        match outcome {
            Outcome::Applied => Ok(true),
            Outcome::Unchanged => Ok(false),
            Outcome::HostnameTaken { .. } => {
                Err(ServiceError::HostnameConflict(hostname.to_string()))
            }
            Outcome::UnknownSandbox => Err(ServiceError::NotFound(format!(
                "sandbox {id} is not placed in the cluster"
            ))),
            other => Err(ServiceError::ClusterUnavailable(format!(
                "the cluster answered a hostname binding with {other:?}"
            ))),
        }
    }

    /// Records in the log that template `name` is ready here (`present`) or gone from here, so
    /// creates of it are placed here or no longer. Best effort: the template-homes reconciler
    /// records what a lost proposal missed.
    pub(crate) async fn template_home(&self, name: &str, present: bool) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let command = Command::TemplateHome {
            name: name.to_string(),
            node: cluster.id(),
            present,
        };
        if let Err(e) = cluster.propose(command).await {
            tracing::warn!(template = %name, error = %crate::error::chain(&e), "template home not recorded; the reconciler will");
        }
    }

    /// Claims volume name `name` for volume `id` on this node in the log: names are unique across
    /// the cluster, and creates that mount it are placed here. [`ServiceError::Conflict`] when
    /// another volume holds the name; nothing to do without a cluster.
    pub(crate) async fn claim_volume_name(&self, name: &str, id: &str) -> Result<(), ServiceError> {
        let Some(cluster) = self.cluster() else {
            return Ok(());
        };
        let outcome = cluster
            .propose(Command::VolumeHome {
                name: name.to_string(),
                id: id.to_string(),
                node: cluster.id(),
                present: true,
            })
            .await?;
        match outcome {
            Outcome::Applied | Outcome::Unchanged => Ok(()),
            Outcome::NameTaken { .. } => Err(ServiceError::Conflict(format!(
                "volume {name:?} already exists in the cluster"
            ))),
            other => Err(ServiceError::ClusterUnavailable(format!(
                "the cluster answered a volume claim with {other:?}"
            ))),
        }
    }

    /// Frees volume name `name` of volume `id` in the log. Best effort: a failure is logged.
    pub(crate) async fn release_volume_name(&self, name: &str, id: &str) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let command = Command::VolumeHome {
            name: name.to_string(),
            id: id.to_string(),
            node: cluster.id(),
            present: false,
        };
        if let Err(e) = cluster.propose(command).await {
            tracing::warn!(volume = %name, error = %crate::error::chain(&e), "volume name not released in the cluster");
        }
    }

    /// Unbinds `hostname` from `id` in the log. Best effort: a release of the sandbox frees it too.
    pub(crate) async fn unbind_hostname_in_log(&self, hostname: &str, id: &str) {
        let command = Command::UnbindHostname {
            hostname: hostname.to_string(),
            id: id.to_string(),
        };
        self.propose_best_effort(id, command, "hostname not unbound in the cluster")
            .await;
    }

    /// Marks `id` created in the log. Best effort: a placement left `reserved` still routes and holds
    /// its name.
    pub(crate) async fn commit_placement(&self, id: &str) {
        let command = Command::Commit { id: id.to_string() };
        self.propose_best_effort(id, command, "placement not committed; it stays reserved")
            .await;
    }

    /// Frees `id`'s name and placement in the log. Best effort: what is not released here the
    /// placements reconciler releases.
    pub(crate) async fn release_placement(&self, id: &str) {
        let command = Command::Release { id: id.to_string() };
        self.propose_best_effort(id, command, "placement not released; the reconciler will")
            .await;
    }

    /// Proposes `command` for sandbox `id` when clustered; a failure is logged with `failed`, not
    /// answered.
    async fn propose_best_effort(&self, id: &str, command: Command, failed: &'static str) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        if let Err(e) = cluster.propose(command).await {
            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "{failed}");
        }
    }
}
