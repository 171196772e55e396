//! The E2B control API's JSON bodies, named and shaped as the SDKs' generated clients read them
//! (`e2b/api/client/models/` in Python, the OpenAPI types in JS): `templateID`, `sandboxID`,
//! `memoryMB`, … and `allow_internet_access` in snake case, as E2B spells it.
//!
//! Requests accept unknown fields (newer SDKs add some); fields this daemon cannot honour are refused
//! by name rather than ignored. Inside a create's `network` nothing unknown is accepted: an option
//! there may restrict the sandbox, and a restriction must be enforced or refused, never dropped (see
//! [`network_lists`]).

use super::error::E2bError;
use sandboxd_service::e2b::E2bCreate;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::ServiceConfig;
use sandboxd_store::{Sandbox, SandboxState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What every sandbox reports as `envdVersion`: the envd version the sandbox's agent implements
/// ([`sandboxd_envd::version`]). SDKs refuse anything below 0.1.0 and switch features on by version
/// (stdin control at 0.3.0, default user at 0.4.0, octet-stream uploads at 0.5.7, …).
pub const ENVD_VERSION: &str = sandboxd_envd::version::ENVD_VERSION;
/// `clientID` of every sandbox (E2B's node id; one node here).
pub const CLIENT_ID: &str = "sandboxd";
/// `endAt` of a sandbox without a deadline (E2B has no way to say "never").
const NEVER_MS: i64 = 253_402_300_799_000; // 9999-12-31T23:59:59Z

/// `autoResume` of a create.
#[derive(Debug, Default, Deserialize)]
pub struct AutoResume {
    /// Whether traffic resumes a paused sandbox.
    #[serde(default)]
    pub enabled: bool,
}

/// `POST /sandboxes` (NewSandbox, older SDKs) and `POST /v2/sandboxes` (NewSandboxV2).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID", default)]
    pub template_id: Option<String>,
    #[serde(default)]
    pub timeout: Option<u64>,
    #[serde(default)]
    pub auto_pause: Option<bool>,
    /// With autoPause: `false` makes the auto-pause keep only the files (a stop; `connect` boots the
    /// sandbox again); anything else keeps memory.
    #[serde(default)]
    pub auto_pause_memory: Option<bool>,
    #[serde(default)]
    pub auto_resume: Option<AutoResume>,
    #[serde(default)]
    pub secure: Option<bool>,
    #[serde(rename = "allow_internet_access", default)]
    pub allow_internet_access: Option<bool>,
    #[serde(default)]
    pub network: Option<serde_json::Value>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub mcp: Option<serde_json::Value>,
    #[serde(default)]
    pub iam: Option<serde_json::Value>,
    #[serde(default)]
    pub volume_mounts: Option<Vec<VolumeMountBody>>,
}

/// One of `volumeMounts`: a volume by name, and where it appears in the sandbox.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VolumeMountBody {
    pub name: String,
    pub path: String,
}

impl NewSandbox {
    /// The service's view of the request; options this daemon cannot provide are a 400.
    pub fn into_create(self) -> Result<E2bCreate, E2bError> {
        let present = |v: &Option<serde_json::Value>| {
            v.as_ref().is_some_and(|v| match v {
                serde_json::Value::Null => false,
                serde_json::Value::Object(m) => !m.is_empty(),
                _ => true,
            })
        };
        if present(&self.mcp) {
            return Err(E2bError::bad_request("mcp servers are not supported"));
        }
        if present(&self.iam) {
            return Err(E2bError::bad_request(
                "workload identity (iam) is not supported",
            ));
        }
        let E2bNetwork {
            allow_out,
            deny_out,
            public,
            rules,
        } = network_lists(self.network.as_ref())?;
        Ok(E2bCreate {
            template_id: self.template_id.unwrap_or_default(),
            timeout_sec: self.timeout,
            env_vars: self.env_vars.unwrap_or_default(),
            metadata: self.metadata.unwrap_or_default(),
            auto_pause: self.auto_pause.unwrap_or(false),
            auto_resume: self.auto_resume.is_some_and(|a| a.enabled),
            // Only an auto-pause has a mode; without one, the field means nothing.
            pause_files_only: self.auto_pause == Some(true)
                && self.auto_pause_memory == Some(false),
            secure: self.secure,
            allow_internet_access: self.allow_internet_access,
            network: self.network,
            allow_out,
            deny_out,
            rules,
            private: !public,
            owner: String::new(),
            volume_mounts: self
                .volume_mounts
                .unwrap_or_default()
                .into_iter()
                .map(|m| sandboxd_api_types::VolumeMount {
                    name: m.name,
                    path: m.path,
                    read_only: false,
                    subpath: None,
                })
                .collect(),
        })
    }
}

/// What sandboxd takes of E2B's `network`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bNetwork {
    pub allow_out: Vec<String>,
    pub deny_out: Vec<String>,
    /// `allowPublicTraffic` (absent: true).
    pub public: bool,
    /// `rules`: the egress gateway's per-host headers, as sent (the service checks them).
    pub rules: std::collections::BTreeMap<String, Vec<sandboxd_api_types::NetworkRule>>,
}

/// `network.allowOut` and `network.denyOut` of a create, as sent (the service checks the entries:
/// IPv4 addresses, CIDR blocks, domain names and `*.` patterns), and `allowPublicTraffic` (a bool
/// or null; `false` makes the sandbox's ports answer only requests carrying its
/// `trafficAccessToken`), and `rules` (`{host: [{transform: {headers}}]}`, for the egress gateway).
/// The other options of E2B's `network` are refused unless they ask for nothing: `egressProxy`,
/// `maskRequestHost` (null or empty), `httpsPorts` (null or empty). `dnsServers` is accepted (a list of strings) and has no effect: a sandbox's names are
/// resolved through the daemon's upstream resolvers, the same for every sandbox. Any other key is
/// refused.
pub fn network_lists(network: Option<&serde_json::Value>) -> Result<E2bNetwork, E2bError> {
    use serde_json::Value;
    let mut out = E2bNetwork {
        allow_out: Vec::new(),
        deny_out: Vec::new(),
        public: true,
        rules: Default::default(),
    };
    let object = match network {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Object(object)) => object,
        Some(_) => return Err(E2bError::bad_request("network must be an object")),
    };
    let strings = |key: &str, value: &Value| -> Result<Vec<String>, E2bError> {
        let wrong = || E2bError::bad_request(format!("network.{key} must be a list of strings"));
        match value {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string).ok_or_else(wrong))
                .collect(),
            _ => Err(wrong()),
        }
    };
    let empty = |value: &Value| match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    };
    for (key, value) in object {
        let refused = match key.as_str() {
            "allowOut" => {
                out.allow_out = strings(key, value)?;
                false
            }
            "denyOut" => {
                out.deny_out = strings(key, value)?;
                false
            }
            "dnsServers" => {
                strings(key, value)?;
                false
            }
            "rules" => {
                if !value.is_null() {
                    out.rules = serde_json::from_value(value.clone()).map_err(|e| {
                        E2bError::bad_request(format!(
                            "network.rules must map hosts to lists of {{transform: {{headers}}}}: {e}"
                        ))
                    })?;
                }
                false
            }
            "egressProxy" | "maskRequestHost" | "httpsPorts" => !empty(value),
            "allowPublicTraffic" => match value {
                Value::Null => false,
                Value::Bool(public) => {
                    out.public = *public;
                    false
                }
                _ => {
                    return Err(E2bError::bad_request(
                        "network.allowPublicTraffic must be a boolean",
                    ))
                }
            },
            _ => true,
        };
        if refused {
            return Err(E2bError::bad_request(format!(
                "network.{key} is not supported"
            )));
        }
    }
    Ok(out)
}

/// `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Deserialize)]
pub struct TimeoutRequest {
    /// Seconds from now.
    pub timeout: u64,
}

/// `POST /sandboxes/{id}/connect` (timeout required), `POST /v2/sandboxes/{id}/connect` (default 300)
/// and `POST /sandboxes/{id}/resume` (older SDKs).
#[derive(Debug, Default, Deserialize)]
pub struct ConnectRequest {
    /// Seconds from now.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// `false` cold-boots a paused sandbox from its files, dropping the memory it was paused with.
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/pause`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    /// `false` keeps only the filesystem: the sandbox is stopped, and `connect` boots it again.
    #[serde(default)]
    pub memory: Option<bool>,
    /// The agent is not asked before a freeze; accepted.
    #[serde(default)]
    pub require_healthy_guest: Option<bool>,
}

/// A sandbox as E2B answers it: `Sandbox` (create, connect), `SandboxDetail` (get) and
/// `ListedSandbox` (list) are views of this one body.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxBody {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    pub envd_version: &'static str,
    /// The sandbox's agent token; the SDK sends it to envd as `X-Access-Token`. Not in listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Where the sandbox's ports are: `{port}-{sandboxID}.{domain}`. Not in listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// What a request to a port of a sandbox made with `allowPublicTraffic: false` carries in
    /// `e2b-traffic-access-token`. Only in the full view of such a sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_access_token: Option<String>,
    pub alias: String,
    pub started_at: String,
    pub end_at: String,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub state: &'static str,
    pub metadata: BTreeMap<String, String>,
    /// The sandbox's egress default (`network.allowOut`/`denyOut` exceptions are not reported here).
    /// Not in listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_internet_access: Option<bool>,
    /// For a paused sandbox: `full` (processes and memory kept) or `filesystem` (files only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_mode: Option<&'static str>,
    /// What the timeout does (`onTimeout`, `autoResume`). Not in listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<sandboxd_api_types::Lifecycle>,
    /// Its isolation tier, `namespace` or `gvisor` (sandboxd's own field; E2B's SDKs keep it among
    /// the fields they do not know).
    pub isolation: String,
    /// The volumes it mounts, `{name, path}` (only in a single sandbox's detail).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMountBody>,
}

/// The E2B state of a stored sandbox: E2B knows `running` and `paused` — paused with its memory
/// (`paused`), or to its files (`stopped`, what E2B's `memory: false` pause makes); a sandbox in any
/// other state (being created or deleted, failed, lost) does not exist for E2B clients.
pub fn e2b_state(state: SandboxState) -> Option<&'static str> {
    match state {
        SandboxState::Running => Some("running"),
        SandboxState::Paused | SandboxState::Stopped => Some("paused"),
        _ => None,
    }
}

/// What a paused sandbox kept: `full` (processes and memory) or `filesystem` (its files: stopped).
fn pause_mode(state: SandboxState) -> Option<&'static str> {
    match state {
        SandboxState::Paused => Some("full"),
        SandboxState::Stopped => Some("filesystem"),
        _ => None,
    }
}

impl SandboxBody {
    /// The listing view (no access token, no domain).
    pub fn listed(s: &Sandbox) -> Self {
        let state = e2b_state(s.state).unwrap_or("running");
        Self {
            template_id: s.template.clone(),
            sandbox_id: s.id.clone(),
            client_id: CLIENT_ID,
            envd_version: ENVD_VERSION,
            envd_access_token: None,
            domain: None,
            traffic_access_token: None,
            alias: s.template.clone(),
            started_at: rfc3339(s.created_at),
            end_at: rfc3339(s.expires_at.unwrap_or(NEVER_MS)),
            cpu_count: s.cpu_millis.div_ceil(1000).max(1),
            memory_mb: s.memory_mb,
            disk_size_mb: 0,
            state,
            metadata: s.metadata.clone(),
            allow_internet_access: None,
            lifecycle: None,
            pause_mode: pause_mode(s.state),
            isolation: s.isolation.clone(),
            volume_mounts: Vec::new(),
        }
    }

    /// The full view: create, connect, get.
    pub fn detail(s: &Sandbox, config: &ServiceConfig) -> Self {
        Self {
            envd_access_token: Some(s.agent_token.clone()),
            domain: Some(format!("{}:{}", config.domain, config.public_port)),
            traffic_access_token: (!sandboxd_service::previews::is_public(&s.network))
                .then(|| sandboxd_service::previews::traffic_token(&s.agent_token)),
            allow_internet_access: Some(s.network["egress"].as_bool().unwrap_or(false)),
            lifecycle: Some(sandboxd_service::sandboxes::lifecycle_to_api(&s.lifecycle)),
            ..Self::listed(s)
        }
    }
}

/// One sample of `GET /sandboxes/{id}/metrics`.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    pub timestamp: String,
    pub timestamp_unix: i64,
    #[serde(flatten)]
    pub sample: sandboxd_service::pause::UsageSample,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(state: SandboxState, expires_at: Option<i64>) -> Sandbox {
        Sandbox {
            id: "abc".into(),
            name: String::new(),
            state,
            template: "base".into(),
            cpu_millis: 1500,
            memory_mb: 512,
            metadata: BTreeMap::from([("k".into(), "v".into())]),
            env: BTreeMap::new(),
            network: serde_json::json!({}),
            agent_token: "tok".into(),
            net_slot: Some(1),
            created_at: 1_000,
            expires_at,
            updated_at: 1_000,
            failure_reason: None,
            generation: 0,
            lifecycle: Default::default(),
            image: None,
            disk_mb: 0,
            isolation: "namespace".into(),
        }
    }

    /// The field names and required fields of the SDKs' `Sandbox`, `SandboxDetail` and `ListedSandbox`.
    #[test]
    fn bodies_carry_the_sdk_field_names() {
        let config = ServiceConfig::default();
        let detail = serde_json::to_value(SandboxBody::detail(
            &sandbox(SandboxState::Paused, Some(301_000)),
            &config,
        ))
        .unwrap();
        for field in [
            "templateID",
            "sandboxID",
            "clientID",
            "envdVersion",
            "envdAccessToken",
            "domain",
            "startedAt",
            "endAt",
            "cpuCount",
            "memoryMB",
            "diskSizeMB",
            "state",
            "metadata",
        ] {
            assert!(detail.get(field).is_some(), "{field} missing from {detail}");
        }
        assert_eq!(detail["state"], "paused");
        assert_eq!(detail["pauseMode"], "full");
        assert_eq!(detail["cpuCount"], 2);
        assert_eq!(detail["endAt"], "1970-01-01T00:05:01.000Z");
        assert_eq!(detail["domain"], "localhost:21212");
        let listed =
            serde_json::to_value(SandboxBody::listed(&sandbox(SandboxState::Running, None)))
                .unwrap();
        assert!(listed.get("envdAccessToken").is_none());
        assert_eq!(listed["endAt"], "9999-12-31T23:59:59.000Z");
    }

    #[test]
    fn creates_parse_both_sdk_generations_and_refuse_what_cannot_be_honoured() {
        let v2: NewSandbox = serde_json::from_str(
            r#"{"templateID":"base","timeout":300,"autoPause":false,"autoPauseMemory":true,
                "allow_internet_access":true,"metadata":{"a":"b"},"envVars":{"X":"1"},"future":1}"#,
        )
        .unwrap();
        let create = v2.into_create().unwrap();
        assert_eq!(create.allow_internet_access, Some(true));
        assert_eq!(create.env_vars["X"], "1");
        let mounted: NewSandbox =
            serde_json::from_str(r#"{"volumeMounts":[{"name":"v","path":"/data"}]}"#).unwrap();
        assert_eq!(
            mounted.into_create().unwrap().volume_mounts[0].path,
            "/data"
        );
        let old: NewSandbox =
            serde_json::from_str(r#"{"templateID":"base","secure":true,"mcp":null}"#).unwrap();
        assert_eq!(old.into_create().unwrap().secure, Some(true));
        for refused in [r#"{"mcp":{"x":{}}}"#, r#"{"iam":{"tokens":{"a":{}}}}"#] {
            let req: NewSandbox = serde_json::from_str(refused).unwrap();
            assert!(req.into_create().is_err(), "{refused}");
        }
    }

    fn create_with_network(network: &str) -> Result<E2bCreate, E2bError> {
        let body = format!(r#"{{"templateID":"base","network":{network}}}"#);
        serde_json::from_str::<NewSandbox>(&body)
            .unwrap()
            .into_create()
    }

    #[test]
    fn network_lists_are_taken_and_options_asking_for_nothing_accepted() {
        let create = create_with_network(
            r#"{"allowOut":["1.1.1.1","8.8.8.0/24"],"denyOut":["0.0.0.0/0"],
                "dnsServers":["8.8.8.8"],"egressProxy":null,"maskRequestHost":"","rules":{},
                "httpsPorts":[],"allowPublicTraffic":true}"#,
        )
        .unwrap();
        assert_eq!(create.allow_out, ["1.1.1.1", "8.8.8.0/24"]);
        assert_eq!(create.deny_out, ["0.0.0.0/0"]);
        assert!(!create.private);
        assert!(
            create_with_network(r#"{"allowPublicTraffic":false}"#)
                .unwrap()
                .private
        );
        assert!(
            create.network.is_some(),
            "kept as sent, for the fingerprint"
        );
        for absent in ["null", "{}", r#"{"allowOut":null,"denyOut":[]}"#] {
            let create = create_with_network(absent).unwrap();
            assert!(
                create.allow_out.is_empty() && create.deny_out.is_empty(),
                "{absent}"
            );
        }
    }

    #[test]
    fn network_options_that_cannot_be_honoured_are_refused_by_name() {
        for (network, named) in [
            (
                r#"{"egressProxy":{"url":"http://proxy:3128"}}"#,
                "network.egressProxy",
            ),
            (
                r#"{"maskRequestHost":"${PORT}-x.example.com"}"#,
                "network.maskRequestHost",
            ),
            (r#"{"rules":[{"x":1}]}"#, "network.rules"),
            (
                r#"{"rules":{"example.com":[{"transform":{"body":"x"}}]}}"#,
                "network.rules",
            ),
            (r#"{"httpsPorts":[443]}"#, "network.httpsPorts"),
            (
                r#"{"allowPublicTraffic":"no"}"#,
                "network.allowPublicTraffic must be a boolean",
            ),
            (r#"{"blockEverything":true}"#, "network.blockEverything"),
            (
                r#"{"allowOut":"1.1.1.1"}"#,
                "network.allowOut must be a list",
            ),
            (r#"{"denyOut":[1]}"#, "network.denyOut must be a list"),
            (r#"["1.1.1.1"]"#, "network must be an object"),
        ] {
            let err = create_with_network(network).unwrap_err();
            assert_eq!(err.status, 400, "{network}");
            assert!(err.message.contains(named), "{network}: {}", err.message);
        }
    }
}
