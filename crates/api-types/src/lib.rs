//! Bodies of the native `/v1` API, in JSON (camelCase).
//!
//! This crate is the contract between the daemon (`api`), the Rust client and the `sbx` CLI: a field
//! changes here or nowhere. Requests reject unknown fields, so a typo is a 400, never silently ignored.
//! The OpenAPI document served at `/v1/openapi.json` is generated from these types.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

mod git;
mod images;
mod memory;
mod network;
mod secrets;
mod terminal;
mod volumes;
mod warm_pools;
pub use git::{
    GitAdd, GitBranches, GitCheckout, GitClone, GitCloned, GitCommit, GitCommitted,
    GitCreateBranch, GitFileStatus, GitStatus, GitSync, Secret,
};
pub use images::{
    CreateSnapshot, CreateTemplate, Image, ImageList, LogLine, PruneImages, PullImage,
    RegistryAuth, Template, TemplateList,
};
pub use memory::{ForkRequest, ForkResult, ForkResults, PauseMode, PauseRequest, PausedMemory};
pub use network::{NetworkPolicy, NetworkRule, NetworkTransform};
pub use secrets::{CreateSecret, EgressEntry, EgressLog, SecretInfo, SecretList, UpdateSecret};
pub use terminal::{TerminalControl, TerminalNotice};
pub use volumes::{
    CreateVolume, Volume, VolumeEntries, VolumeEntry, VolumeList, VolumeMount, VolumeUser,
};
pub use warm_pools::{SetWarmPool, WarmPool, WarmPoolList};

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandbox {
    /// Unique name on this node: 1–63 of `[a-z0-9-]`, not starting or ending with '-'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Template; default `base`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// An OCI image to make the root of (`python:3.12-slim`, `127.0.0.1:5000/team/app@sha256:…`),
    /// pulled first if this node lacks it; instead of `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The wall between the sandbox and the host: `namespace` (Linux namespaces around the host's
    /// kernel; milliseconds to start) or `gvisor` (gVisor's user-space kernel in between; pause
    /// keeps memory on disk, fork copies a running sandbox). Default: the daemon's
    /// `--default-isolation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "gvisor")]
    pub isolation: Option<String>,
    /// Credentials for pulling `image`: used for that pull and never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_auth: Option<RegistryAuth>,
    /// CPUs (may be fractional, e.g. 0.5); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Memory limit in MiB; default 512.
    #[serde(default, rename = "memoryMB", skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Limit of the sandbox's writable layer (everything it writes to its filesystem) in MiB; the
    /// daemon's `--default-disk-mb` by default, at most `--max-disk-mb`.
    #[serde(default, rename = "diskMB", skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// Environment of every command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Free-form labels, filterable in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Seconds until the daemon destroys (or, with `lifecycle.onTimeout: "pause"`, pauses) the
    /// sandbox; default 300, 0 = never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_sec: Option<u64>,
    /// What the timeout does; default: it deletes the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Network posture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
    /// Volumes to mount ([`VolumeMount`]); several sandboxes may mount one volume at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<VolumeMount>>,
}

fn namespace() -> String {
    "namespace".into()
}

/// A sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// Id, unique forever.
    pub id: String,
    /// Name ("" when unnamed).
    pub name: String,
    /// Lifecycle state: creating, starting, running, stopping, stopped, paused, deleting, failed, lost.
    pub state: String,
    /// Template it was made from (for an image, the image's reference).
    pub template: String,
    /// The manifest digest of the image its root is made of; absent for `base`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// CPUs.
    pub cpu: f64,
    /// Memory limit in MiB.
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    /// Limit of its writable layer in MiB; 0 when this host cannot limit disk.
    #[serde(rename = "diskMB", default)]
    pub disk_mb: u64,
    /// Its isolation tier: `namespace` or `gvisor`.
    #[serde(default = "namespace")]
    pub isolation: String,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// When the daemon will destroy it, RFC 3339; absent when never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Labels.
    pub metadata: BTreeMap<String, String>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Its network posture as enforced: egress, and the allow and deny lists in canonical form
    /// (`a.b.c.d/n`, sorted, without duplicates or blocks inside another).
    #[serde(default)]
    pub network: NetworkPolicy,
    /// What its timeout does.
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// Where a paused sandbox's memory is; absent unless it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_memory: Option<PausedMemory>,
    /// The volumes it mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
}

/// What a sandbox's timeout does.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lifecycle {
    /// `kill` (default): the sandbox is deleted. `pause`: it is paused in place (processes and memory
    /// kept) and stays until deleted or resumed; a paused sandbox has no deadline.
    #[serde(default)]
    pub on_timeout: OnTimeout,
    /// With `onTimeout: "pause"` only: the next request that needs the sandbox (a command, a file, a
    /// port, traffic through the proxy) resumes it first, and it gets its timeout again.
    #[serde(default)]
    pub auto_resume: bool,
    /// With `onTimeout: "pause"` only: what the pause keeps — `memory` (default) or `filesystem`
    /// (the sandbox is stopped at its deadline; not with `autoResume`, a request cannot wait for a
    /// boot).
    #[serde(default, skip_serializing_if = "PauseMode::is_memory")]
    pub pause_mode: PauseMode,
}

/// What a timeout does.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// Delete the sandbox.
    #[default]
    Kill,
    /// Pause it in place.
    Pause,
}

/// A page of sandboxes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxList {
    /// This page.
    pub sandboxes: Vec<Sandbox>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/sandboxes/{id}/code`: code for the sandbox's code interpreter (a sandbox of the
/// `code-interpreter-v1` template runs one).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCode {
    /// The code.
    pub code: String,
    /// The context to run it in (its state is kept between calls); not with `language`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// `python` (the default) or `bash`: runs in that language's default context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Environment variables for this execution only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envs: Option<BTreeMap<String, String>>,
}

/// `POST /v1/sandboxes/{id}/exec` (and `/exec/stream`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// Program and arguments (no shell unless you run one).
    pub cmd: Vec<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory; default the user's home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// `user` (default) or `root`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Kill the command after this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Result of a finished command.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// Exit code (128 + signal when killed by one).
    pub exit_code: i32,
    /// Standard output (UTF-8, invalid sequences replaced).
    pub stdout: String,
    /// Standard error (UTF-8, invalid sequences replaced).
    pub stderr: String,
}

/// One line of the NDJSON stream of `POST /v1/sandboxes/{id}/exec/stream`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ExecEvent {
    /// The command started.
    Start {
        /// Its pid inside the sandbox.
        pid: u32,
    },
    /// Bytes on standard output, base64.
    Stdout {
        /// base64 data.
        data: String,
    },
    /// Bytes on standard error, base64.
    Stderr {
        /// base64 data.
        data: String,
    },
    /// The command ended; always the last event of a successful stream.
    Exit {
        /// Exit code (128 + signal when killed by one).
        #[serde(rename = "exitCode")]
        exit_code: i32,
    },
    /// The stream broke; the command's fate is unknown.
    Error {
        /// What happened.
        message: String,
    },
}

/// An entry of a directory listing.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    /// Base name.
    pub name: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    /// `file`, `dir` or `symlink`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission string, e.g. `-rw-r--r--`.
    pub permissions: String,
    /// Last modification, RFC 3339.
    pub modified_at: String,
}

/// `GET /v1/sandboxes/{id}/files/list`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileList {
    /// Entries, sorted by name.
    pub entries: Vec<FileEntry>,
}

/// `POST /v1/sandboxes/{id}/ports`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExposePort {
    /// Port inside the sandbox (1–65535).
    pub port: u16,
    /// `http` (default: reached through the proxy by hostname) or `tcp` (a host port forwarded to it).
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Expose even if nothing listens on the port yet (default false: answer 409 `port_not_listening`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_listen_check: bool,
}

fn default_protocol() -> String {
    "http".into()
}

/// An exposed port.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExposedPort {
    /// Port inside the sandbox.
    pub port: u16,
    /// `http` or `tcp`.
    pub protocol: String,
    /// Where to reach it: `http://{port}-{id}.{domain}:{port}` or `tcp://{host}:{hostPort}`.
    pub public_url: String,
    /// The host port forwarded to it (`tcp` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<u16>,
}

/// The one error shape of the native API.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ApiError {
    /// Stable machine-readable code, e.g. `not_found`, `name_conflict`, `invalid_request`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_rejected() {
        let err = serde_json::from_str::<CreateSandbox>(r#"{"nmae":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"));
    }

    #[test]
    fn create_uses_the_documented_field_names() {
        let c: CreateSandbox =
            serde_json::from_str(r#"{"memoryMB":256,"timeoutSec":10,"cpu":0.5}"#).unwrap();
        assert_eq!(c.memory_mb, Some(256));
        assert_eq!(c.timeout_sec, Some(10));
        let e: ExecEvent = serde_json::from_str(r#"{"type":"exit","exitCode":3}"#).unwrap();
        assert_eq!(e, ExecEvent::Exit { exit_code: 3 });
    }
}

/// `POST /v1/sandboxes/{id}/domains`: route a hostname to a port of the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindDomain {
    /// RFC 1123 hostname (case-insensitive, stored lowercase); `*.` wildcards only when the daemon
    /// runs with `--allow-wildcard-domains`; never an IP literal or a name under the daemon's `--domain`.
    pub hostname: String,
    /// Port inside the sandbox (1–65535).
    pub port: u16,
}

/// A hostname bound to a sandbox port.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    /// The hostname, lowercase, without a trailing dot.
    pub hostname: String,
    /// Port inside the sandbox it routes to.
    pub port: u16,
    /// `http://{hostname}:{listen port}`.
    pub url: String,
}

/// `POST /v1/webhooks`: subscribe a URL to events.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateWebhook {
    /// Absolute `http` or `https` URL the events are POSTed to.
    pub url: String,
    /// Event kinds: `sandbox.created`, `sandbox.running`, `sandbox.failed`, `sandbox.lost`,
    /// `sandbox.paused`, `sandbox.resumed`, `sandbox.deleted`, `port.exposed`, `port.unexposed`.
    pub events: Vec<String>,
    /// Signing secret (at least 16 characters; `whsec_` + base64 is decoded, as Standard Webhooks says).
    pub secret: String,
}

/// A webhook registration (its secret is never returned).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// Id (`wh_…`).
    pub id: String,
    /// Where events are POSTed.
    pub url: String,
    /// Event kinds it receives.
    pub events: Vec<String>,
    /// Registration time, RFC 3339.
    pub created_at: String,
}

/// Every webhook registration.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WebhookList {
    /// Oldest first.
    pub webhooks: Vec<Webhook>,
}

/// One attempt to deliver an event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAttempt {
    /// 1, 2, … per delivery.
    pub attempt: u32,
    /// When it was made, RFC 3339.
    pub at: String,
    /// The receiver's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why it did not count as delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One event queued for one webhook, with its attempts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// Delivery id (`msg_…`): the `webhook-id` header of every attempt.
    pub id: String,
    /// Event kind.
    #[serde(rename = "type")]
    pub kind: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// The body POSTed: `{type, timestamp, data}`.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// When the event was queued, RFC 3339.
    pub created_at: String,
    /// When a pending delivery is next attempted, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
    /// The last attempt's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Every attempt, oldest first.
    pub attempts: Vec<WebhookAttempt>,
}

/// The deliveries of a webhook, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDeliveryList {
    /// Newest first.
    pub deliveries: Vec<WebhookDelivery>,
}

/// One event a sandbox's agent reported and the daemon applied (its delivery ledger entry).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentEventRecord {
    /// The agent's delivery id (the same on every retry of one event).
    pub delivery_id: String,
    /// `environment-ready` or `environment-failed`.
    pub event: String,
    /// When it was first received, RFC 3339.
    pub received_at: String,
}

/// The events a sandbox's agent reported, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentEventList {
    /// Oldest first; each delivery once, however often it arrived.
    pub events: Vec<AgentEventRecord>,
}

/// What an API key may do.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum KeyScope {
    /// Everything, including managing API keys and webhooks.
    Admin,
    /// Everything but managing API keys and webhooks (those answer 403 `forbidden`).
    #[default]
    User,
}

/// `POST /v1/api-keys`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateApiKey {
    /// What the key is for: 1–64 characters, no control characters (need not be unique).
    pub name: String,
    /// `admin` or `user`; default `user`.
    #[serde(default)]
    pub scope: KeyScope,
}

/// An API key, without its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiKey {
    /// Id (what `DELETE /v1/api-keys/{id}` takes).
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it may do.
    pub scope: KeyScope,
    /// The key's first characters (`e2b_` and 6 hex digits), to tell keys apart; absent for the
    /// configured admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Whether this is the daemon's configured admin token (`SB_PAT_TOKEN` or
    /// `<data-dir>/admin-token`), which is changed there and cannot be deleted through the API.
    pub configured: bool,
    /// Creation time, RFC 3339.
    pub created_at: String,
}

/// A freshly created API key: the only answer that carries its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CreatedApiKey {
    /// The key as listed.
    #[serde(flatten)]
    pub api_key: ApiKey,
    /// The secret (`e2b_` + 40 hex digits): send it as `Authorization: Bearer` or `X-API-KEY`. It
    /// is not stored and cannot be shown again.
    pub key: String,
}

/// Every API key.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyList {
    /// Oldest first.
    pub api_keys: Vec<ApiKey>,
}

/// `GET /v1/cluster`: the cluster as the answering node sees it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The node that answered.
    pub node_id: String,
    /// The leader, when one is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<String>,
    /// The Raft term.
    pub term: u64,
    /// The last log index this node applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_index: Option<u64>,
    /// Members in id order.
    pub members: Vec<ClusterMember>,
    /// Live sandboxes placed cluster-wide.
    pub placements: u64,
}

/// One member of the cluster.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMember {
    /// Its node id.
    pub id: String,
    /// Its cluster RPC address (`--cluster-listen`).
    pub cluster_addr: String,
    /// Its API address (`--listen`).
    pub api_addr: String,
    /// `voter` or `learner`.
    pub role: String,
    /// Whether it leads.
    pub leader: bool,
    /// `healthy` (lease held), `stale` (lease lapsed, inside the grace), `unreachable` (past the
    /// grace, not marked yet), `lost` (marked lost) or `joining` (no lease yet).
    pub health: String,
    /// CPU not promised to sandboxes, thousandths.
    pub cpu_millis_free: u64,
    /// Memory available, MiB.
    pub memory_mb_free: u64,
    /// Disk free under its data dir, MiB.
    pub disk_mb_free: u64,
    /// Network slots free.
    pub slots_free: u64,
    /// How many times it was marked lost.
    pub epoch: u64,
}
