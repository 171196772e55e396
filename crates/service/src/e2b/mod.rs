//! The E2B facade's flows: create with duplicate-body dedupe, timeouts, connect.
//!
//! **Create dedupe** (the seed's `request_idempotency` primitive, scope [`CREATE_SCOPE`]). The E2B SDK
//! retries a create by re-sending the same body; a retry must get the sandbox the first attempt made,
//! not a second one. The request's dedupe key is [`E2bCreate::fingerprint`]: SHA-256 over the template,
//! the sorted env vars, the sorted metadata, the timeout, autoPause, autoResume, secure and the network
//! posture (`allow_internet_access`, `network`, and the allow and deny lists taken from it) — never
//! a client request id or a timestamp, so every retry of one body hashes the same.
//! [`Service::e2b_create`] claims `(scope, fingerprint)`:
//! - *Acquired*: this caller creates the sandbox, with an id derived from the claim
//!   ([`sandbox_id_for`]), then completes the claim with that id and a [`REPLAY_WINDOW`] replay window.
//!   On any failure the claim is deleted before the error is returned, so a retry starts at once.
//! - *Replay*: the sandbox the completed attempt made is returned.
//! - *In flight*: the caller polls the claim every [`POLL_EVERY`] until it is ready (and returns its
//!   sandbox), or gone or stale (and claims again) — except when the attempt it joined made a sandbox
//!   that never became ready: then it answers with that failure, as the attempt's own caller did.
//!
//! Guarantee: every create with one fingerprint inside the replay window of a successful create — or
//! while it is still running — returns the same sandbox; after the window, or after a failed attempt, a
//! new sandbox is created. The pending lock ([`PENDING_TTL`]) bounds how long a crashed attempt blocks
//! its retries. If the replayed sandbox is no longer running or paused (deleted, being deleted,
//! failed), the caller waits for the window to close and creates a new one, rather than answering with
//! a sandbox that is gone or reusing its id. Proved by
//! `tests::concurrent_duplicates_share_the_in_flight_create` and
//! `tests::a_failed_create_deletes_its_claim_so_a_retry_starts_at_once`, and against the real daemon by
//! `concurrent_identical_creates_make_one_sandbox_until_the_window_closes` in
//! `crates/sandboxd/tests/e2b_api.rs`.
//!
//! **Network.** `allow_internet_access` (default true, as in E2B) becomes the sandbox's egress default;
//! `network.allowOut` and `network.denyOut` become its allow and deny lists, checked like `/v1`'s
//! ([`crate::network`]: IPv4 addresses, CIDR blocks, domain names such as the SDK's
//! `api.openai.com`, and `*.` patterns) and enforced by the runtime's firewall: an allowed
//! destination is reachable even when denied or without internet access, a denied one is not; a
//! name's destinations are the addresses the sandbox's own DNS forwarder resolved for it. An entry
//! that is none of these (IPv6 included) is refused here, with nothing claimed or created; the HTTP
//! layer refuses the other `network` options that cannot be honoured (rules, an egress proxy, host
//! masking, HTTPS ports, `allowPublicTraffic: false`) before this flow runs. `dnsServers` is
//! accepted and has no effect: names are resolved through the daemon's upstream resolvers (the
//! host's, or `--dns-upstream`), the same for every sandbox.
//!
//! **Lifecycle.** `autoPause` makes the timeout pause the sandbox instead of deleting it, and
//! `autoResume.enabled` (only with `autoPause`, else 400) makes the next request for a paused sandbox
//! resume it (see [`crate::pause`]). A pause always keeps memory and processes, so `autoPauseMemory:
//! false` (a filesystem-only snapshot elsewhere) gets the stronger pause too.

use crate::sandboxes::DEFAULT_TEMPLATE;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_store::{
    unix_millis_now, ClaimOutcome, ClaimRecord, ClaimState, Sandbox, SandboxState, StoredResponse,
    UnixMillis,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;

/// Idempotency scope of the E2B create's body dedupe.
pub const CREATE_SCOPE: &str = "e2b.create";
/// Idempotency scope of the E2B create's `Idempotency-Key` header.
pub const CREATE_KEY_SCOPE: &str = "e2b.create.key";
/// How long a create attempt may run before a duplicate may take over.
pub const PENDING_TTL: Duration = Duration::from_secs(120);
/// How long a completed create is replayed to duplicates.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(10);
/// Cluster mode: how long E2B creates with one fingerprint all go to the node the first went to — as
/// long as that node's own claim may be pending and then replayed ([`crate::cluster`]).
pub const ROUTE_WINDOW: Duration =
    Duration::from_secs(PENDING_TTL.as_secs() + REPLAY_WINDOW.as_secs());
/// How often a duplicate polls an in-flight create.
pub const POLL_EVERY: Duration = Duration::from_millis(50);
/// Length of the ids of sandboxes the E2B create makes.
pub const SANDBOX_ID_LEN: usize = 20;

/// An E2B create request, as far as it decides which sandbox the caller gets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct E2bCreate {
    /// `templateID`; empty means the default template.
    pub template_id: String,
    /// `timeout`, seconds; `None` means the daemon's default.
    pub timeout_sec: Option<u64>,
    /// `envVars`.
    pub env_vars: BTreeMap<String, String>,
    /// `metadata`.
    pub metadata: BTreeMap<String, String>,
    /// `autoPause`.
    pub auto_pause: bool,
    /// `autoResume.enabled`.
    pub auto_resume: bool,
    /// `autoPauseMemory: false`: the auto-pause keeps only the files (a stop).
    pub pause_files_only: bool,
    /// `secure` (older SDKs send it; it changes nothing here).
    pub secure: Option<bool>,
    /// `allow_internet_access`.
    pub allow_internet_access: Option<bool>,
    /// `network`, as sent.
    pub network: Option<serde_json::Value>,
    /// `network.allowOut`: always reachable (checked by [`Service::e2b_create`]).
    pub allow_out: Vec<String>,
    /// `network.denyOut`: unreachable unless allowed (checked by [`Service::e2b_create`]).
    pub deny_out: Vec<String>,
    /// `network.rules`: the egress gateway's per-host headers (checked by [`Service::e2b_create`]).
    pub rules: std::collections::BTreeMap<String, Vec<api::NetworkRule>>,
    /// `network.allowPublicTraffic: false`: only requests carrying its traffic token reach its ports
    /// ([`crate::previews`]).
    pub private: bool,
    /// The id of the API key creating it, whose limits apply ([`crate::per_key`]); not part of the
    /// fingerprint.
    pub owner: String,
    /// `volumeMounts`: volumes by name, and where each appears.
    pub volume_mounts: Vec<api::VolumeMount>,
}

impl E2bCreate {
    /// The request with its defaults filled in, so that leaving a field out and sending its default
    /// dedupe alike.
    pub fn normalized(mut self, default_timeout: Duration) -> Self {
        if self.template_id.is_empty() {
            self.template_id = DEFAULT_TEMPLATE.to_string();
        }
        self.timeout_sec.get_or_insert(default_timeout.as_secs());
        if self.network.as_ref().is_some_and(|n| n.is_null()) {
            self.network = None;
        }
        self
    }

    /// The dedupe key: hex SHA-256 over every field, each length-prefixed (maps sorted by key, JSON
    /// with sorted keys), so no two different requests share an encoding.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        let mut put = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        let flag = |b: Option<bool>| match b {
            None => "unset",
            Some(true) => "true",
            Some(false) => "false",
        };
        put(b"e2b.create/1");
        put(self.template_id.as_bytes());
        put(self
            .timeout_sec
            .map_or("unset".to_string(), |t| t.to_string())
            .as_bytes());
        for map in [&self.env_vars, &self.metadata] {
            put(map.len().to_string().as_bytes());
            for (k, v) in map {
                put(k.as_bytes());
                put(v.as_bytes());
            }
        }
        put(flag(Some(self.auto_pause)).as_bytes());
        put(flag(Some(self.auto_resume)).as_bytes());
        // Only when set, so every fingerprint made before the field existed stays the same.
        if self.pause_files_only {
            put(b"pause-files-only");
        }
        if !self.volume_mounts.is_empty() {
            put(b"volume-mounts");
            put(self.volume_mounts.len().to_string().as_bytes());
            for m in &self.volume_mounts {
                put(m.name.as_bytes());
                put(m.path.as_bytes());
            }
        }
        put(flag(self.secure).as_bytes());
        put(flag(self.allow_internet_access).as_bytes());
        put(self
            .network
            .as_ref()
            .map_or("unset".to_string(), canonical_json)
            .as_bytes());
        for list in [&self.allow_out, &self.deny_out] {
            put(list.len().to_string().as_bytes());
            for entry in list {
                put(entry.as_bytes());
            }
        }
        hex::encode(h.finalize())
    }
}

/// JSON text with every object's keys sorted, whatever order they arrived in.
fn canonical_json(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let body: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        Value::Array(items) => {
            let body: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", body.join(","))
        }
        other => other.to_string(),
    }
}

/// The id of the sandbox the attempt `generation` of claim `fingerprint`, acquired at `claimed_at`,
/// creates: the first [`SANDBOX_ID_LEN`] hex digits of SHA-256 over the three.
///
/// The acquisition time is part of it because the expiry sweep forgets claims whose replay window has
/// passed: the next claim of the same body starts again at generation 0, and (fingerprint, generation)
/// alone would name the earlier sandbox again.
pub fn sandbox_id_for(fingerprint: &str, generation: i64, claimed_at: UnixMillis) -> String {
    let mut h = Sha256::new();
    h.update(fingerprint.as_bytes());
    h.update(generation.to_be_bytes());
    h.update(claimed_at.to_be_bytes());
    let mut id = hex::encode(h.finalize());
    id.truncate(SANDBOX_ID_LEN);
    id
}

/// What polling an in-flight create found.
enum Awaited {
    /// The attempt completed and made this sandbox.
    Ready(String),
    /// The attempt's sandbox never became ready: the same answer for every request that joined it.
    Failed { id: String, reason: String },
    /// The attempt failed otherwise, or went stale: claim again.
    Reclaim,
}

/// Attempts whose sandbox never became ready, by fingerprint: `(generation, sandbox id, reason, when)`.
/// Duplicates that joined such an attempt answer with its failure instead of claiming again, so a
/// burst of identical creates against an agent that never reports waits out one deadline, not one per
/// request. Kept briefly, in memory: the waiters are in this process.
#[derive(Default)]
pub(crate) struct FailedAttempts(
    std::sync::Mutex<std::collections::HashMap<String, (i64, String, String, std::time::Instant)>>,
);

impl FailedAttempts {
    fn record(&self, fingerprint: &str, generation: i64, id: &str, reason: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (.., at)| at.elapsed() < REPLAY_WINDOW * 6);
        map.insert(
            fingerprint.to_string(),
            (
                generation,
                id.to_string(),
                reason.to_string(),
                std::time::Instant::now(),
            ),
        );
    }

    fn of(&self, fingerprint: &str, generation: i64) -> Option<(String, String)> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(fingerprint)
            .filter(|(g, ..)| *g == generation)
            .map(|(_, id, reason, _)| (id.clone(), reason.clone()))
    }
}

impl Service {
    /// Creates a sandbox for an E2B create, deduplicating identical requests (see the module docs).
    pub async fn e2b_create(&self, req: E2bCreate) -> Result<Sandbox, ServiceError> {
        if req.auto_resume && !req.auto_pause {
            return Err(ServiceError::InvalidRequest(
                "autoResume needs autoPause: only a sandbox paused at its timeout is resumed"
                    .into(),
            ));
        }
        let req = req.normalized(self.config().default_timeout);
        // Validate (unknown template, limits) before claiming: a refused request leaves nothing behind.
        let plan = self.plan_create(api::CreateSandbox {
            template: Some(req.template_id.clone()),
            timeout_sec: req.timeout_sec,
            env: Some(req.env_vars.clone()),
            metadata: Some(req.metadata.clone()),
            // E2B sandboxes reach the internet unless told otherwise.
            network: Some(api::NetworkPolicy {
                egress: req.allow_internet_access.unwrap_or(true),
                allow_out: req.allow_out.clone(),
                deny_out: req.deny_out.clone(),
                allow_public_traffic: Some(!req.private),
                rules: req.rules.clone(),
            }),
            lifecycle: Some(api::Lifecycle {
                on_timeout: if req.auto_pause {
                    api::OnTimeout::Pause
                } else {
                    api::OnTimeout::Kill
                },
                auto_resume: req.auto_resume,
                pause_mode: match req.pause_files_only {
                    true => api::PauseMode::Filesystem,
                    false => api::PauseMode::Memory,
                },
            }),
            volumes: Some(req.volume_mounts.clone()),
            ..Default::default()
        })?;
        let plan = crate::sandboxes::CreatePlan {
            owner: req.owner.clone(),
            ..plan
        };
        // An unknown or unready template is refused before claiming, too.
        if plan.template != crate::sandboxes::DEFAULT_TEMPLATE {
            self.template_image(&plan.template).await?;
        }
        let fingerprint = req.fingerprint();
        let deadline = tokio::time::Instant::now() + PENDING_TTL + REPLAY_WINDOW * 2;
        while tokio::time::Instant::now() < deadline {
            let fp = fingerprint.clone();
            let now = unix_millis_now();
            let outcome = self
                .writer()
                .write(move |tx| tx.claim(CREATE_SCOPE, &fp, &fp, now, PENDING_TTL))
                .await?;
            match outcome {
                ClaimOutcome::Acquired { generation } => {
                    return self
                        .create_claimed(&fingerprint, generation, now, plan)
                        .await
                }
                ClaimOutcome::Replay { target_id, .. } => {
                    if let Some(sandbox) = self.live_target(&target_id).await? {
                        return Ok(sandbox);
                    }
                    self.await_replay_window(&fingerprint).await?;
                }
                ClaimOutcome::InFlight { .. } => match self.await_claim(&fingerprint).await? {
                    Awaited::Ready(target_id) => {
                        if let Some(sandbox) = self.live_target(&target_id).await? {
                            return Ok(sandbox);
                        }
                        self.await_replay_window(&fingerprint).await?;
                    }
                    Awaited::Failed { id, reason } => {
                        return Err(ServiceError::StartFailed { id, reason })
                    }
                    Awaited::Reclaim => {}
                },
                ClaimOutcome::Mismatch => {
                    // The request hash is the fingerprint itself, so a live row always matches.
                    return Err(ServiceError::Conflict(
                        "an identical create is being processed; retry".into(),
                    ));
                }
            }
        }
        Err(ServiceError::InFlight {
            retry_after_secs: 1,
        })
    }

    /// The attempt this caller acquired: create, then record the outcome (or drop the claim on failure).
    async fn create_claimed(
        &self,
        fingerprint: &str,
        generation: i64,
        claimed_at: UnixMillis,
        plan: crate::sandboxes::CreatePlan,
    ) -> Result<Sandbox, ServiceError> {
        let id = sandbox_id_for(fingerprint, generation, claimed_at);
        let fp = fingerprint.to_string();
        let created = self.create_with_id(id.clone(), plan).await;
        let recorded = match &created {
            Ok(_) => {
                let target_id = id.clone();
                self.writer()
                    .write(move |tx| {
                        let outcome = StoredResponse {
                            target_id,
                            status: None,
                            body: None,
                        };
                        tx.complete_claim(
                            CREATE_SCOPE,
                            &fp,
                            generation,
                            &outcome,
                            unix_millis_now(),
                            REPLAY_WINDOW,
                        )
                    })
                    .await
            }
            Err(e) => {
                if let ServiceError::StartFailed { id, reason } = e {
                    self.inner.e2b_failures.record(&fp, generation, id, reason);
                }
                self.writer()
                    .write(move |tx| tx.delete_claim(CREATE_SCOPE, &fp, generation))
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = recorded {
            tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e),
                "could not record the create's outcome; duplicates wait for its lock to expire");
        }
        created
    }

    /// Polls claim `fingerprint` until its attempt is ready, or gone or stale.
    async fn await_claim(&self, fingerprint: &str) -> Result<Awaited, ServiceError> {
        let mut joined = None;
        loop {
            let record = self.create_claim(fingerprint).await?;
            let now = unix_millis_now();
            let gone = record.as_ref().is_none_or(|r| Some(r.generation) != joined);
            if let (true, Some(generation)) = (gone, joined) {
                if let Some((id, reason)) = self.inner.e2b_failures.of(fingerprint, generation) {
                    return Ok(Awaited::Failed { id, reason });
                }
            }
            if let Some(r) = record.as_ref().filter(|r| r.state == ClaimState::Pending) {
                joined.get_or_insert(r.generation);
            }
            match record {
                None => return Ok(Awaited::Reclaim),
                Some(r) if r.state == ClaimState::Ready => {
                    return Ok(if r.replay_until.is_some_and(|t| now < t) {
                        Awaited::Ready(r.response.target_id)
                    } else {
                        Awaited::Reclaim
                    });
                }
                Some(r) if r.locked_until <= now => return Ok(Awaited::Reclaim),
                Some(_) => tokio::time::sleep(POLL_EVERY).await,
            }
        }
    }

    /// The create claim of `fingerprint`, as stored now.
    async fn create_claim(&self, fingerprint: &str) -> Result<Option<ClaimRecord>, ServiceError> {
        let fp = fingerprint.to_string();
        Ok(self
            .reader()
            .read_by_key(move |tx| tx.get_claim(CREATE_SCOPE, &fp))
            .await?)
    }

    /// Sleeps until the replay window of claim `fingerprint` has closed.
    async fn await_replay_window(&self, fingerprint: &str) -> Result<(), ServiceError> {
        let record = self.create_claim(fingerprint).await?;
        let until = record.and_then(|r| r.replay_until).unwrap_or(0);
        let wait = until.saturating_sub(unix_millis_now()).max(0) as u64;
        tokio::time::sleep(Duration::from_millis(wait) + POLL_EVERY).await;
        Ok(())
    }

    /// The sandbox a completed create made, if it still is running or paused: a sandbox being deleted,
    /// failed or gone is never handed to a duplicate.
    async fn live_target(&self, id: &str) -> Result<Option<Sandbox>, ServiceError> {
        let id = id.to_string();
        let sandbox = self
            .reader()
            .read_by_key(move |tx| tx.get_sandbox_by_id(&id))
            .await?;
        Ok(sandbox.filter(|s| matches!(s.state, SandboxState::Running | SandboxState::Paused)))
    }

    pub(crate) fn check_timeout(&self, timeout: Duration) -> Result<(), ServiceError> {
        let max = self.config().max_timeout;
        if timeout > max {
            return Err(ServiceError::InvalidRequest(format!(
                "timeout must be at most {} seconds",
                max.as_secs()
            )));
        }
        Ok(())
    }

    /// Moves the deadline of sandbox `key` to `timeout` from now (earlier or later). With `extend_only`
    /// a deadline already further away (or none) is kept.
    pub async fn set_timeout(
        &self,
        key: &str,
        timeout: Duration,
        extend_only: bool,
    ) -> Result<Sandbox, ServiceError> {
        self.check_timeout(timeout)?;
        let id = self.get(key).await?.id;
        let rid = id.clone();
        self.writer()
            .write(move |tx| {
                let Some(current) = tx.get_sandbox_by_id(&rid)? else {
                    return Ok(None);
                };
                let now = unix_millis_now();
                let at = now.saturating_add(timeout.as_millis().min(i64::MAX as u128) as i64);
                let keep = extend_only && current.expires_at.is_none_or(|e| e >= at);
                if !keep {
                    tx.set_expires_at(&rid, Some(at), now)?;
                }
                tx.get_sandbox_by_id(&rid)
            })
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("sandbox {id} not found")))
    }

    /// E2B connect: resumes sandbox `key` if it is paused (starts it if it was paused to its files)
    /// and gives it `timeout` from now (a running sandbox's deadline is only ever extended). Returns
    /// the sandbox and whether it was resumed.
    pub async fn e2b_connect(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<(Sandbox, bool), ServiceError> {
        self.check_timeout(timeout)?;
        // Paused with memory: a resume; paused to its files (stopped): a start.
        let (sandbox, resumed) = self.start(key).await?;
        let sandbox = self.set_timeout(&sandbox.id, timeout, !resumed).await?;
        Ok((sandbox, resumed))
    }
}

#[cfg(test)]
mod tests;
