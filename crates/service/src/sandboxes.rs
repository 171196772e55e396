//! Sandbox lifecycle flows: create, get, list (delete is [`crate::delete`]).
//!
//! Create writes the row (state `creating`) and leases its network slot in one transaction — the name's
//! uniqueness is the schema's, so racing creates get exactly one winner — then asks the runtime to create
//! the sandbox, moves the row to `starting` and has the runtime boot it. The sandbox becomes `running`
//! only when its agent calls home ([`crate::readiness`]); the create waits for that, up to
//! [`crate::ServiceConfig::ready_deadline`]. A failure before the boot finished undoes exactly what this
//! call made: the runtime's sandbox, then the row (which frees the slot); a sandbox that booted but never
//! became ready stays `failed` with the reason. A crash in between leaves the row `creating`/`starting`
//! (or a delete's `deleting`) for the reconcilers ([`crate::reconcile`]); the failpoints
//! `create.after-insert`, `create.after-runtime` and `delete.after-mark` hold a flow in those windows
//! for the crash tests.

use crate::events::{emit, sandbox_data, SANDBOX_CREATED, SANDBOX_FAILED};
use crate::network::{self, EgressPolicy};
use crate::timestamps::rfc3339;
use crate::timing::step;
use crate::{validate, Service, ServiceError};
use rand::Rng;
use sandboxd_api_types as api;
use sandboxd_runtime::Isolation;
use sandboxd_store::{
    unix_millis_now, Lifecycle, NewSandbox, Sandbox, SandboxFilter, SandboxState, StoreError,
    StoredEndpoint, UnixMillis, WriteTx,
};
use std::collections::BTreeMap;

mod prepare;
pub(crate) use prepare::Prepared;

/// How long a network slot found held by someone else on the host is not leased again.
const SLOT_SET_ASIDE: std::time::Duration = std::time::Duration::from_secs(600);
/// How many busy slots one create sets aside before it answers 503.
const BUSY_SLOT_RETRIES: usize = 64;

/// Template every create without one gets.
pub const DEFAULT_TEMPLATE: &str = "base";
const DEFAULT_MEMORY_MB: u64 = 512;
const DEFAULT_CPU: f64 = 1.0;
/// The smallest memory limit a create may ask for, MiB.
pub const MIN_MEMORY_MB: u64 = 32;
/// Default of [`crate::ServiceConfig::default_disk_mb`].
pub const DEFAULT_DISK_MB: u64 = 10 * 1024;
/// The smallest disk limit a create may ask for, MiB.
pub const MIN_DISK_MB: u64 = 16;

/// A validated create request.
#[derive(Debug, Clone)]
pub struct CreatePlan {
    /// Name ("" when unnamed).
    pub name: String,
    /// Template (for an image: the image's reference, once resolved).
    pub template: String,
    /// The image reference to make the root of, instead of the template.
    pub image: Option<String>,
    /// Credentials for pulling `image` (used for that pull only).
    pub registry_auth: Option<sandboxd_images::Credentials>,
    /// An image already resolved by the daemon itself (a build step's), used as it is.
    pub(crate) resolved: Option<sandboxd_store::ImageRecord>,
    /// CPU in thousandths.
    pub cpu_millis: u32,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Limit of the writable layer in MiB (0: none, on a host that cannot limit disk).
    pub disk_mb: u64,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Labels.
    pub metadata: BTreeMap<String, String>,
    /// Lifetime in seconds (0 = never expires).
    pub timeout_sec: u64,
    /// Egress default and allow and deny lists, checked ([`crate::network`]).
    pub network: EgressPolicy,
    /// What the timeout does.
    pub lifecycle: api::Lifecycle,
    /// The id of the API key creating it, whose limits apply ([`crate::per_key`]); `""` for none.
    pub owner: String,
    /// The isolation tier it runs in (one the runtime offers); `None`: its template's, else the
    /// daemon's default.
    pub isolation: Option<Isolation>,
    /// Volumes to mount, checked ([`crate::volumes::plan_mounts`]).
    pub volumes: Vec<crate::volumes::PlannedMount>,
}

/// Random lowercase alphanumeric id of `len` characters.
pub fn random_id(prefix: &str, len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let body: String = (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{body}")
}

impl Service {
    /// Checks a sandbox's resources against the limits, filling in defaults: CPU in thousandths,
    /// memory and disk in MiB (disk 0 on a host that cannot limit it).
    pub(crate) fn check_resources(
        &self,
        cpu: Option<f64>,
        memory_mb: Option<u64>,
        disk_mb: Option<u64>,
    ) -> Result<(u32, u64, u64), ServiceError> {
        let cfg = self.config();
        let cpu = cpu.unwrap_or(DEFAULT_CPU);
        if !cpu.is_finite() || cpu < 0.01 || cpu > cfg.max_cpus {
            return Err(ServiceError::InvalidRequest(format!(
                "cpu must be between 0.01 and {}",
                cfg.max_cpus
            )));
        }
        let memory_mb = memory_mb.unwrap_or(DEFAULT_MEMORY_MB);
        if !(MIN_MEMORY_MB..=cfg.max_memory_mb).contains(&memory_mb) {
            return Err(ServiceError::InvalidRequest(format!(
                "memoryMB must be between {MIN_MEMORY_MB} and {}",
                cfg.max_memory_mb
            )));
        }
        let disk_mb = match (disk_mb, cfg.disk_quota) {
            (None, false) => 0,
            (Some(_), false) => return Err(ServiceError::InvalidRequest(
                "diskMB cannot be enforced on this host (no disk quota backend: `sandboxd doctor` says why; docs/disk.md)"
                    .into(),
            )),
            (asked, true) => {
                let disk_mb = asked.unwrap_or(cfg.default_disk_mb);
                if !(MIN_DISK_MB..=cfg.max_disk_mb).contains(&disk_mb) {
                    return Err(ServiceError::InvalidRequest(format!(
                        "diskMB must be between {MIN_DISK_MB} and {}",
                        cfg.max_disk_mb
                    )));
                }
                disk_mb
            }
        };
        Ok(((cpu * 1000.0).round() as u32, memory_mb, disk_mb))
    }

    /// Checks a create request against the limits, filling in defaults.
    pub fn plan_create(&self, req: api::CreateSandbox) -> Result<CreatePlan, ServiceError> {
        let cfg = self.config();
        let name = req.name.unwrap_or_default();
        if !name.is_empty() {
            validate::name(&name)?;
        }
        let image = req.image.filter(|i| !i.is_empty());
        if image.is_some() && req.template.is_some() {
            return Err(ServiceError::InvalidRequest(
                "give either template or image, not both".into(),
            ));
        }
        let template = req.template.unwrap_or_else(|| DEFAULT_TEMPLATE.into());
        if template != DEFAULT_TEMPLATE {
            crate::templates::validate_name(&template)
                .map_err(|_| ServiceError::NotFound(format!("template {template:?} not found")))?;
        }
        if let Some(image) = &image {
            image
                .parse::<sandboxd_images::ImageRef>()
                .map_err(sandboxd_images::ImageError::from)?;
        }
        let registry_auth = req.registry_auth.map(|a| sandboxd_images::Credentials {
            username: a.username,
            password: a.password,
        });
        if registry_auth.is_some() && image.is_none() {
            return Err(ServiceError::InvalidRequest(
                "registryAuth is only for creates from an image".into(),
            ));
        }
        let (cpu_millis, memory_mb, disk_mb) =
            self.check_resources(req.cpu, req.memory_mb, req.disk_mb)?;
        // Checked now; a create that names none takes its template's tier once that is resolved.
        let isolation = req
            .isolation
            .as_deref()
            .map(|tier| self.check_isolation(Some(tier)))
            .transpose()?;
        let timeout_sec = req.timeout_sec.unwrap_or(cfg.default_timeout.as_secs());
        if timeout_sec > cfg.max_timeout.as_secs() {
            return Err(ServiceError::InvalidRequest(format!(
                "timeoutSec must be at most {}",
                cfg.max_timeout.as_secs()
            )));
        }
        let env = req.env.unwrap_or_default();
        validate::env(&env)?;
        let metadata = req.metadata.unwrap_or_default();
        validate::metadata(&metadata)?;
        let network = network::policy(req.network.as_ref())?;
        let volumes = crate::volumes::plan_mounts(&req.volumes.unwrap_or_default())?;
        let lifecycle = req.lifecycle.unwrap_or_default();
        if lifecycle.auto_resume && lifecycle.on_timeout != api::OnTimeout::Pause {
            return Err(ServiceError::InvalidRequest(
                "lifecycle.autoResume needs lifecycle.onTimeout \"pause\"".into(),
            ));
        }
        if lifecycle.pause_mode == api::PauseMode::Filesystem {
            if lifecycle.on_timeout != api::OnTimeout::Pause {
                return Err(ServiceError::InvalidRequest(
                    "lifecycle.pauseMode needs lifecycle.onTimeout \"pause\"".into(),
                ));
            }
            if lifecycle.auto_resume {
                return Err(ServiceError::InvalidRequest(
                    "lifecycle.pauseMode \"filesystem\" cannot be combined with autoResume: a \
                     sandbox paused to its files boots again, which no request should wait for"
                        .into(),
                ));
            }
        }
        Ok(CreatePlan {
            name,
            template,
            image,
            registry_auth,
            resolved: None,
            cpu_millis,
            memory_mb,
            disk_mb,
            env,
            metadata,
            timeout_sec,
            network,
            lifecycle,
            owner: String::new(),
            isolation,
            volumes,
        })
    }

    /// The isolation tiers this daemon's runtime offers.
    pub fn offered_tiers(&self) -> Vec<Isolation> {
        Isolation::ALL
            .into_iter()
            .filter(|tier| self.runtime().offers(*tier).is_ok())
            .collect()
    }

    /// The tier `asked` names (the daemon's default when none), if the runtime offers it: an
    /// unknown name or a tier this host lacks is the client's 400, saying why.
    pub(crate) fn check_isolation(&self, asked: Option<&str>) -> Result<Isolation, ServiceError> {
        let tier = match asked {
            Some(name) => name
                .parse::<Isolation>()
                .map_err(|e| ServiceError::InvalidRequest(e.to_string()))?,
            None => self.config().default_isolation,
        };
        self.runtime().offers(tier)?;
        Ok(tier)
    }

    /// Creates and starts a sandbox with id `id`: from its template's warm pool when one is ready
    /// and the create asks nothing a pooled sandbox cannot take ([`crate::warm_pool`]), else cold.
    pub async fn create_with_id(
        &self,
        id: String,
        plan: CreatePlan,
    ) -> Result<Sandbox, ServiceError> {
        if self.name_held_pending(&plan.name, &id) {
            return Err(ServiceError::NameConflict(plan.name));
        }
        let prepared = step("prepare", self.prepare(&id, &plan)).await?;
        let pool = self.pool_for(&plan, &prepared);
        let limits = self.config().key_limits;
        let template = prepared.template.clone();
        let image = prepared.image.clone();
        let mounts = prepared.mounts.clone();
        let now = unix_millis_now();
        let token = random_id("", 40);
        let expires_at = (plan.timeout_sec > 0)
            .then(|| now.saturating_add((plan.timeout_sec as i64).saturating_mul(1000)));
        let new = NewSandbox {
            id: id.clone(),
            name: plan.name.clone(),
            state: SandboxState::Creating,
            template: template.clone(),
            cpu_millis: plan.cpu_millis,
            memory_mb: plan.memory_mb as u32,
            metadata: plan.metadata.clone(),
            env: plan.env.clone(),
            network: plan.network.to_json(),
            agent_token: token.clone(),
            created_at: now,
            expires_at,
            lifecycle: Lifecycle {
                auto_pause: plan.lifecycle.on_timeout == api::OnTimeout::Pause,
                auto_resume: plan.lifecycle.auto_resume,
                timeout_ms: (plan.timeout_sec as i64).saturating_mul(1000),
                pause_files_only: plan.lifecycle.pause_mode == api::PauseMode::Filesystem,
            },
            image: image.as_ref().map(|i| i.digest.clone()),
            disk_mb: plan.disk_mb as u32,
            owner: plan.owner.clone(),
            isolation: prepared.isolation.as_str().to_string(),
        };
        // Cluster mode: the name is the log's to give first (`crate::cluster`).
        self.reserve_placement(&new).await?;
        if let Some(template) = &pool {
            match self
                .create_pooled(template, new.clone(), &plan, &prepared)
                .await
            {
                Ok(Some(sandbox)) => {
                    self.commit_placement(&id).await;
                    return Ok(sandbox);
                }
                // None of its pool's is free: made cold.
                Ok(None) => {}
                Err(e) => {
                    self.release_placement(&id).await;
                    return Err(e);
                }
            }
        }
        let slots = self.config().net_slots;
        let admitted = step(
            "admit",
            self.writer().write(move |tx| {
                let id = new.id.clone();
                if let Err(refused) = insert_admitted(tx, limits, new, now)? {
                    return Ok(Err(refused));
                }
                for mount in &mounts {
                    tx.insert_mount(mount)?;
                }
                let slot = tx.lease_slot(&id, slots, now)?.slot;
                let data = tx.get_sandbox_by_id(&id)?.map(|s| sandbox_data(&s));
                let created = emit(tx, SANDBOX_CREATED, Some(&id), data.unwrap_or_default())?;
                Ok(Ok((slot, created)))
            }),
        )
        .await
        .map_err(ServiceError::from)
        .and_then(|admitted| admitted);
        let (slot, created) = match admitted {
            Ok(admitted) => admitted,
            Err(e) => {
                self.release_placement(&id).await;
                return Err(e);
            }
        };
        self.publish([created]);
        if pool.is_some() {
            self.count_pool_claim(&template, false);
        }
        crate::failpoints::hold("create.after-insert").await;
        let slot = match step("slot", self.free_slot(&id, slot)).await {
            Ok(slot) => slot,
            Err(e) => return Err(self.undo_create(&id, e).await),
        };
        let spec = self.spec(&id, &plan, &prepared, slot, &token);
        let started = async {
            let made = step("runtime-create", self.runtime().create(&spec)).await?;
            // `starting` is queued before the boot, for the agent may call home as soon as it
            // serves: the writer applies it before the call-home's write, which comes later. Its
            // commit overlaps the boot. Where the sandbox will be is the runtime's answer already;
            // it is stored in the same write.
            let moved = self
                .queue_move_with_endpoint(&id, SandboxState::Starting, &made)
                .await?;
            let (moved, booted) = tokio::join!(
                step("starting", moved),
                step("start", self.runtime().start(&spec.id))
            );
            if !moved? {
                return Err(ServiceError::StartFailed {
                    id: id.clone(),
                    reason: "it was deleted while being created".into(),
                });
            }
            booted?;
            Ok(())
        }
        .await;
        if let Err(e) = started {
            return Err(self.undo_create(&id, e).await);
        }
        self.commit_placement(&id).await;
        crate::failpoints::hold("create.after-runtime").await;
        // Its own task: the deadline holds even if this caller goes away.
        let svc = self.clone();
        let rid = id.clone();
        let deadline = tokio::time::Instant::now() + self.config().ready_deadline;
        let ready = step(
            "ready",
            tokio::spawn(async move { svc.await_ready(&rid, deadline).await }),
        )
        .await
        .map_err(|e| ServiceError::StartFailed {
            id: id.clone(),
            reason: format!("its readiness waiter died: {e}"),
        })??;
        let commands = prepared.commands;
        if commands == crate::templates::StartCommands::default() {
            return Ok(ready);
        }
        // The template's start command, then its ready command: the create answers once the
        // sandbox's own service is up, or fails (and the sandbox goes) when it never is.
        if let Err(e) = step("start-commands", self.run_start_commands(&id, &commands)).await {
            let reason = crate::error::chain(&e);
            if let Err(d) = self.delete(&id).await {
                tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&d), "could not delete a sandbox whose start command failed");
            }
            return Err(ServiceError::StartFailed { id, reason });
        }
        Ok(ready)
    }

    /// Moves `creating` sandbox `id` to `to` and stores where the runtime put it (`made`), in one
    /// write; false when it is no longer `creating` (deleted meanwhile).
    pub(crate) async fn move_with_endpoint(
        &self,
        id: &str,
        to: SandboxState,
        made: &sandboxd_runtime::SandboxInfo,
    ) -> Result<bool, ServiceError> {
        self.queue_move_with_endpoint(id, to, made).await?.await
    }

    /// [`Service::move_with_endpoint`], returning once the write is queued, with the wait for its
    /// commit (see [`sandboxd_store::StoreWriter::queue`]).
    pub(crate) async fn queue_move_with_endpoint(
        &self,
        id: &str,
        to: SandboxState,
        made: &sandboxd_runtime::SandboxInfo,
    ) -> Result<impl std::future::Future<Output = Result<bool, ServiceError>>, ServiceError> {
        let rid = id.to_string();
        let endpoint = crate::ports::observed_endpoint(made);
        let moved = self
            .writer()
            .queue(move |tx| {
                let now = unix_millis_now();
                let moved = tx.set_state(&rid, &[SandboxState::Creating], to, None, now)?;
                if moved {
                    tx.upsert_endpoint(&endpoint)?;
                }
                Ok(moved)
            })
            .await?;
        Ok(async move { Ok(moved.await?) })
    }

    /// The slot `id` leased, or — when the host holds that one for someone else (another daemon's
    /// sandbox, or one of this daemon's before its data dir was wiped) — another: the busy slot is
    /// set aside for [`SLOT_SET_ASIDE`] and the next free one leased, up to [`BUSY_SLOT_RETRIES`]
    /// times. Nothing of the other holder's is touched.
    pub(crate) async fn free_slot(&self, id: &str, mut slot: u32) -> Result<u32, ServiceError> {
        let base = self.config().net_slot_base;
        for _ in 0..BUSY_SLOT_RETRIES {
            if self.runtime().slot_free(base + slot).await? {
                return Ok(slot);
            }
            tracing::info!(
                slot = base + slot,
                "network slot held by someone else on the host; setting it aside"
            );
            let (rid, slots) = (id.to_string(), self.config().net_slots);
            let until = unix_millis_now() + SLOT_SET_ASIDE.as_millis() as i64;
            slot = self
                .writer()
                .write(move |tx| {
                    tx.set_slot_aside(&rid, slot, until)?;
                    Ok(tx.lease_slot(&rid, slots, unix_millis_now())?.slot)
                })
                .await?;
        }
        Err(ServiceError::Exhausted(format!(
            "{BUSY_SLOT_RETRIES} network slots in a row are held by others on the host"
        )))
    }

    /// Undoes a create that failed before its sandbox booted: the runtime's sandbox, then the row
    /// (which frees the slot), announcing the failure. Returns the error to answer with.
    pub(crate) async fn undo_create(&self, id: &str, e: ServiceError) -> ServiceError {
        let e = self.undo_row(id, e).await;
        self.release_placement(id).await;
        e
    }

    /// [`Service::undo_create`] but for its placement in the cluster, which the caller releases.
    pub(crate) async fn undo_row(&self, id: &str, e: ServiceError) -> ServiceError {
        tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "create failed; rolling back");
        let _ = self.runtime().destroy(id).await;
        let rid = id.to_string();
        let reason = crate::error::chain(&e);
        let failed = self
            .writer()
            .write(move |tx| {
                if !tx.delete_sandbox(&rid)? {
                    return Ok(None);
                }
                let data = serde_json::json!({ "id": rid, "failureReason": reason });
                emit(tx, SANDBOX_FAILED, Some(&rid), data).map(Some)
            })
            .await;
        if let Ok(failed) = failed {
            self.publish(failed);
        }
        e
    }

    /// Creates and starts a sandbox.
    pub async fn create(&self, req: api::CreateSandbox) -> Result<Sandbox, ServiceError> {
        self.create_as("", req).await
    }

    /// [`Service::create`] for API key `owner`, within its limits ([`crate::per_key`]).
    pub async fn create_as(
        &self,
        owner: &str,
        req: api::CreateSandbox,
    ) -> Result<Sandbox, ServiceError> {
        let mut plan = self.plan_create(req)?;
        plan.owner = owner.to_string();
        self.create_with_id(random_id("sb", 14), plan).await
    }

    /// A sandbox by id or name. One being deleted is gone already ([`ServiceError::NotFound`]).
    pub async fn get(&self, key: &str) -> Result<Sandbox, ServiceError> {
        let k = key.to_string();
        self.reader()
            .read_by_key(move |tx| tx.get_sandbox(&k))
            .await?
            .filter(|s| s.state != SandboxState::Deleting)
            .ok_or_else(|| ServiceError::NotFound(self.not_found(key)))
    }

    /// [`Service::get`], with where the store says its services are, in one read.
    pub(crate) async fn get_with_endpoint(
        &self,
        key: &str,
    ) -> Result<(Sandbox, Option<StoredEndpoint>), ServiceError> {
        let k = key.to_string();
        self.reader()
            .read_by_key(move |tx| {
                let Some(sandbox) = tx.get_sandbox(&k)? else {
                    return Ok(None);
                };
                let endpoint = tx.get_endpoint(&sandbox.id)?;
                Ok(Some((sandbox, endpoint)))
            })
            .await?
            .filter(|(s, _)| s.state != SandboxState::Deleting)
            .ok_or_else(|| ServiceError::NotFound(self.not_found(key)))
    }

    /// Replaces sandbox `key`'s metadata (checked as a create's is); the sandbox as it is then.
    pub async fn set_metadata(
        &self,
        key: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Sandbox, ServiceError> {
        validate::metadata(&metadata)?;
        let sandbox = self.get(key).await?;
        let id = sandbox.id.clone();
        self.writer()
            .write(move |tx| tx.set_metadata(&id, &metadata, unix_millis_now()))
            .await?;
        self.get(&sandbox.id).await
    }

    /// A page of sandboxes; those being deleted are left out unless `filter` asks for them, and a
    /// cursor no listing returned is [`ServiceError::InvalidCursor`].
    pub async fn list(
        &self,
        mut filter: SandboxFilter,
    ) -> Result<(Vec<Sandbox>, Option<String>), ServiceError> {
        if filter.states.is_empty() {
            filter.states = SandboxState::ALL
                .into_iter()
                .filter(|s| *s != SandboxState::Deleting)
                .collect();
        }
        let cursor = filter.cursor.clone();
        match self
            .reader()
            .read(move |tx| tx.list_sandboxes(&filter))
            .await
        {
            Err(StoreError::InvalidCursor) => {
                Err(ServiceError::InvalidCursor(cursor.unwrap_or_default()))
            }
            page => Ok(page?),
        }
    }
}

/// The API's view of a stored sandbox.
pub fn to_api(s: &Sandbox) -> api::Sandbox {
    api::Sandbox {
        id: s.id.clone(),
        name: s.name.clone(),
        state: s.state.as_str().to_string(),
        template: s.template.clone(),
        image: s.image.clone(),
        cpu: f64::from(s.cpu_millis) / 1000.0,
        memory_mb: u64::from(s.memory_mb),
        disk_mb: u64::from(s.disk_mb),
        isolation: s.isolation.clone(),
        created_at: rfc3339(s.created_at),
        expires_at: s.expires_at.map(rfc3339),
        metadata: s.metadata.clone(),
        failure_reason: s.failure_reason.clone(),
        // The store keeps what `network::EgressPolicy::to_json` wrote, which is this shape.
        network: serde_json::from_value(s.network.clone()).unwrap_or_default(),
        lifecycle: lifecycle_to_api(&s.lifecycle),
        // The gVisor tier pauses into a checkpoint; the namespace tier freezes in place.
        volumes: Vec::new(),
        paused_memory: (s.state == SandboxState::Paused).then_some(match s.isolation.as_str() {
            "gvisor" => api::PausedMemory::Disk,
            _ => api::PausedMemory::Ram,
        }),
    }
}

/// The API's view of a stored lifecycle.
pub fn lifecycle_to_api(l: &Lifecycle) -> api::Lifecycle {
    api::Lifecycle {
        on_timeout: if l.auto_pause {
            api::OnTimeout::Pause
        } else {
            api::OnTimeout::Kill
        },
        auto_resume: l.auto_resume,
        pause_mode: match l.pause_files_only {
            true => api::PauseMode::Filesystem,
            false => api::PauseMode::Memory,
        },
    }
}

/// In a create's write: sandbox `new` refused (the inner `Err`, nothing written) when its key holds
/// its limit ([`crate::per_key`]), else its row inserted and its image marked used at `now`.
pub(crate) fn insert_admitted(
    tx: &mut WriteTx<'_>,
    limits: crate::per_key::KeyLimits,
    new: NewSandbox,
    now: UnixMillis,
) -> Result<Result<(), ServiceError>, StoreError> {
    if limits.apply_to(&new.owner) {
        if let Err(refused) = limits.admit(tx.key_usage(&new.owner)?) {
            return Ok(Err(refused));
        }
    }
    if let Some(image) = &new.image {
        tx.touch_image(image, now)?;
    }
    tx.insert_sandbox(new)?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cursor no listing returned is the caller's mistake, named as such (the API answers 400
    /// `invalid_cursor`), never a store failure.
    #[tokio::test]
    async fn a_cursor_this_daemon_did_not_issue_is_an_invalid_cursor() {
        use crate::test_support::{InMemoryRuntimeForTests, TestService};
        let t = TestService::new(
            crate::ServiceConfig::default(),
            InMemoryRuntimeForTests::default(),
        );
        for bad in ["", "J#", "12", "x:sb1"] {
            let filter = SandboxFilter {
                cursor: Some(bad.into()),
                ..Default::default()
            };
            match t.svc.list(filter).await {
                Err(ServiceError::InvalidCursor(c)) => assert_eq!(c, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    /// The tier is the create's own, else the daemon's default; a name that is no tier, or a tier
    /// the runtime does not offer, is the client's 400 saying why, and nothing is recorded.
    #[tokio::test]
    async fn a_create_names_its_tier_and_an_unoffered_one_is_refused() {
        use crate::test_support::{InMemoryRuntimeForTests, TestService};
        let t = TestService::new(
            crate::ServiceConfig::default(),
            InMemoryRuntimeForTests::default(),
        );
        let plan = |isolation: Option<&str>| {
            t.svc.plan_create(api::CreateSandbox {
                isolation: isolation.map(str::to_string),
                ..Default::default()
            })
        };
        assert_eq!(plan(None).unwrap().isolation, None, "left to the template");
        assert_eq!(
            plan(Some("namespace")).unwrap().isolation,
            Some(Isolation::Namespace)
        );
        match plan(Some("vm")) {
            Err(ServiceError::InvalidRequest(why)) => assert!(why.contains("\"gvisor\""), "{why}"),
            other => panic!("an unknown tier: {other:?}"),
        }
        // The test runtime, like a host without runsc, offers the namespace tier alone.
        match plan(Some("gvisor")) {
            Err(ServiceError::InvalidRequest(why)) => assert!(why.contains("gvisor"), "{why}"),
            other => panic!("an unoffered tier: {other:?}"),
        }
        let made = t.svc.create(api::CreateSandbox::default()).await.unwrap();
        assert_eq!(to_api(&made).isolation, "namespace");
        let refused = t
            .svc
            .create(api::CreateSandbox {
                isolation: Some("gvisor".into()),
                ..Default::default()
            })
            .await;
        assert!(refused.is_err());
        let rows = t.svc.list(SandboxFilter::default()).await.unwrap();
        assert_eq!(rows.0.len(), 1, "the refused create recorded nothing");
    }

    #[test]
    fn random_ids_are_valid_sandbox_ids() {
        let id = random_id("sb", 14);
        assert_eq!(id.len(), 16);
        assert!(sandboxd_runtime::validate_id(&id).is_ok());
        assert_ne!(id, random_id("sb", 14));
    }
}
