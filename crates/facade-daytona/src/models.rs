//! Daytona's wire types, as its generated clients (`daytona_api_client`,
//! `daytona_toolbox_api_client`) parse them: every field they require is present and of the exact
//! type (integers are integers, never null), and what they do not know is not sent.

use sandboxd_store::{IdlePolicy, Sandbox, SandboxState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The organization every sandbox belongs to (sandboxd has one).
pub const ORGANIZATION: &str = "sandboxd";
/// The label Daytona's SDKs keep a sandbox's code language in.
pub const LANGUAGE_LABEL: &str = "code-toolbox-language";

/// A sandbox as Daytona describes one.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DaytonaSandbox {
    pub id: String,
    pub organization_id: &'static str,
    pub name: String,
    pub snapshot: String,
    pub user: &'static str,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub public: bool,
    pub network_block_all: bool,
    /// Its `allowOut` addresses and blocks, comma-separated; absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_allow_list: Option<String>,
    /// Its `allowOut` domain names, comma-separated; absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain_allow_list: Option<String>,
    pub kvm: bool,
    pub target: &'static str,
    /// Whole CPUs (rounded up).
    pub cpu: u64,
    pub gpu: u64,
    /// GiB (rounded up).
    pub memory: u64,
    /// GiB (rounded up).
    pub disk: u64,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub toolbox_proxy_url: String,
    /// Minutes; absent for a sandbox with no idle policy (made outside the Daytona API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_stop_interval: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_pause_interval: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_archive_interval: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_delete_interval: Option<i64>,
    /// When its time to live ends (`set_ttl`) and it is deleted, whatever its state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_destroy_at: Option<String>,
    /// Its isolation tier, `namespace` or `gvisor` (sandboxd's own field; Daytona's SDKs ignore
    /// fields they do not know); absent while its snapshot is still being built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
}

/// Whether an `allowOut` entry is a domain name (or pattern) rather than an address or block.
pub fn is_domain(entry: &str) -> bool {
    !entry
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == '/')
}

/// The `allowOut` entries of a stored posture that are domains (or addresses, `domains` false),
/// comma-separated as Daytona lists them; `None` when there are none.
pub fn allow_list(network: &serde_json::Value, domains: bool) -> Option<String> {
    let entries: Vec<&str> = network["allowOut"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e.as_str()).collect())
        .unwrap_or_default();
    let picked: Vec<&str> = entries
        .into_iter()
        .filter(|e| is_domain(e) == domains)
        .collect();
    (!picked.is_empty()).then(|| picked.join(","))
}

/// Daytona's name for a sandbox state.
pub fn state_name(state: SandboxState) -> &'static str {
    match state {
        SandboxState::Creating | SandboxState::Starting => "starting",
        SandboxState::Running => "started",
        SandboxState::Stopping => "stopping",
        SandboxState::Stopped => "stopped",
        SandboxState::Paused => "paused",
        SandboxState::Deleting => "destroying",
        SandboxState::Failed | SandboxState::Lost => "error",
    }
}

fn gib(mb: u64) -> u64 {
    mb.div_ceil(1024)
}

impl DaytonaSandbox {
    /// `s` as Daytona describes it; its toolbox is served under `toolbox_url`.
    pub fn of(s: &Sandbox, toolbox_url: &str) -> DaytonaSandbox {
        let egress = s.network["egress"].as_bool().unwrap_or(false);
        DaytonaSandbox {
            id: s.id.clone(),
            organization_id: ORGANIZATION,
            name: if s.name.is_empty() {
                s.id.clone()
            } else {
                s.name.clone()
            },
            snapshot: s.template.clone(),
            user: "user",
            env: s.env.clone(),
            labels: s.metadata.clone(),
            public: sandboxd_service::previews::is_public(&s.network),
            network_block_all: !egress,
            network_allow_list: allow_list(&s.network, false),
            domain_allow_list: allow_list(&s.network, true),
            kvm: false,
            target: "local",
            cpu: u64::from(s.cpu_millis).div_ceil(1000).max(1),
            gpu: 0,
            memory: gib(u64::from(s.memory_mb)),
            disk: gib(u64::from(s.disk_mb)),
            state: state_name(s.state),
            error_reason: s.failure_reason.clone(),
            created_at: sandboxd_service::timestamps::rfc3339(s.created_at),
            updated_at: sandboxd_service::timestamps::rfc3339(s.updated_at),
            toolbox_proxy_url: toolbox_url.to_string(),
            auto_stop_interval: None,
            auto_pause_interval: None,
            auto_archive_interval: None,
            auto_delete_interval: None,
            auto_destroy_at: s.expires_at.map(sandboxd_service::timestamps::rfc3339),
            isolation: Some(s.isolation.clone()),
        }
    }

    /// With the intervals of `policy` (minutes).
    pub fn with_idle(mut self, policy: Option<IdlePolicy>) -> DaytonaSandbox {
        if let Some(p) = policy {
            self.auto_stop_interval = Some(minutes(p.stop_after_ms));
            self.auto_pause_interval = Some(minutes(p.pause_after_ms));
            self.auto_archive_interval = Some(minutes(p.archive_after_ms));
            self.auto_delete_interval = Some(minutes(p.delete_after_ms));
        }
        self
    }
}

/// One of Daytona's interval minutes, in milliseconds.
pub const MINUTE_MS: i64 = 60_000;

/// An idle-policy interval in Daytona's minutes (a negative one, "never", is -1).
pub fn minutes(ms: i64) -> i64 {
    if ms < 0 {
        -1
    } else {
        ms / MINUTE_MS
    }
}

/// `POST /api/sandbox`: what sandboxd honours of Daytona's create body; other fields are accepted
/// and have no effect unless [`CreateSandbox::refusal`] names them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandbox {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub snapshot: Option<String>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub public: Option<bool>,
    #[serde(default)]
    pub network_block_all: Option<bool>,
    /// Comma-separated IPv4 addresses or CIDR blocks the sandbox may always reach.
    #[serde(default)]
    pub network_allow_list: Option<String>,
    /// Comma-separated domain names (or `*.` patterns) the sandbox may always reach.
    #[serde(default)]
    pub domain_allow_list: Option<String>,
    #[serde(default)]
    pub cpu: Option<u64>,
    #[serde(default)]
    pub gpu: Option<u64>,
    #[serde(default)]
    pub memory: Option<u64>,
    #[serde(default)]
    pub disk: Option<u64>,
    /// Minutes idle before a stop (0: never; default 15, or 0 for a sandbox that pauses).
    #[serde(default)]
    pub auto_stop_interval: Option<i64>,
    /// Minutes idle before a pause that keeps its memory (0: never, the default).
    #[serde(default)]
    pub auto_pause_interval: Option<i64>,
    /// Minutes stopped before a delete (negative: never, the default; 0: at the stop).
    #[serde(default)]
    pub auto_delete_interval: Option<i64>,
    /// Minutes stopped before an archive (0: the longest; default 7 days). Kept and reported.
    #[serde(default)]
    pub auto_archive_interval: Option<i64>,
    #[serde(default)]
    pub build_info: Option<BuildInfo>,
    #[serde(default)]
    pub volumes: Option<Vec<SandboxVolume>>,
    #[serde(default)]
    pub kvm: Option<bool>,
    /// Secrets to put in the environment: `[{ENV_VAR: secret name}]`, each variable holding the
    /// secret's placeholder.
    #[serde(default)]
    pub secrets: Option<Vec<BTreeMap<String, String>>>,
}

/// One of a create's `volumes`: a volume by id or name, where, and which of its directories.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxVolume {
    pub volume_id: String,
    pub mount_path: String,
    #[serde(default)]
    pub subpath: Option<String>,
}

impl CreateSandbox {
    /// Why this create cannot be honoured, if it cannot.
    pub fn refusal(&self) -> Option<String> {
        if self.gpu.unwrap_or(0) > 0 {
            return Some("GPUs are not available on sandboxd".into());
        }
        if self.kvm == Some(true) {
            return Some("KVM inside sandboxes is not available on sandboxd".into());
        }
        None
    }
}

/// A create's build: a Dockerfile (the SDK sends `FROM <image>` alone for a plain image).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    #[serde(default)]
    pub dockerfile_content: Option<String>,
    #[serde(default)]
    pub context_hashes: Option<Vec<String>>,
}

/// `GET /api/sandbox`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPage {
    pub items: Vec<DaytonaSandbox>,
    pub next_cursor: Option<String>,
}

/// `POST /process/execute`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteRequest {
    pub command: String,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub envs: Option<BTreeMap<String, String>>,
    /// Seconds.
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// `POST /process/code-run`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeRunRequest {
    pub code: String,
    #[serde(default)]
    pub language: Option<String>,
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    #[serde(default)]
    pub envs: Option<BTreeMap<String, String>>,
    /// Seconds.
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// `POST /process/interpreter/context`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateContext {
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub language: Option<String>,
}

/// The first frame of the interpreter's WebSocket.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterExecute {
    pub code: String,
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub envs: Option<BTreeMap<String, String>>,
    /// Seconds; 0 or absent: Daytona's default of 10 minutes.
    #[serde(default)]
    pub timeout: Option<u64>,
}
