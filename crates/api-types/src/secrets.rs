//! Secrets (`/v1/secrets`): values that never enter a sandbox. A sandbox holds a secret's
//! placeholder; the value is written once and never read back on any surface.

use crate::Secret;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /v1/secrets`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSecret {
    /// Unique name: 1 to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`.
    pub name: String,
    /// The value (1 byte to 64 KiB). Write-only: no answer ever shows it.
    #[schema(value_type = String)]
    pub value: Secret,
    /// Hosts the value may be sent to: names (`api.example.com`), `*.` wildcards of a name's
    /// subdomains (`*.example.com`) or IP addresses. Absent or empty: the value is sent only where
    /// a sandbox's network rule for a host puts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// What it is for (1 KiB at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `PATCH /v1/secrets/{name}`: each field given replaces the stored one; a new value is a new
/// version.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateSecret {
    /// A new value (write-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub value: Option<Secret>,
    /// New hosts (an empty list: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// A new description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// New labels, replacing the old ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A secret, without its value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretInfo {
    /// Id, unique forever.
    pub id: String,
    /// Name, unique among secrets.
    pub name: String,
    /// What a sandbox holds in its place: `${sandboxd.secrets.<name>}` (E2B's
    /// `${e2b.secrets.<name>}` names it too).
    pub placeholder: String,
    /// Hosts the value may be sent to, in their normal form.
    pub hosts: Vec<String>,
    pub description: String,
    pub metadata: BTreeMap<String, String>,
    /// 1 for the first value, one more for each later one.
    pub version: u32,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// `GET /v1/secrets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// One request the egress gateway rewrote (`GET /v1/sandboxes/{id}/egress`): names, never values.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EgressEntry {
    /// The host the request went to.
    pub host: String,
    pub method: String,
    /// Its path, without the query.
    pub path: String,
    /// The answer's status (502 when the gateway answered itself).
    pub status: u16,
    /// The host pattern of the rule set applied, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The secrets whose values went into the request.
    pub secrets: Vec<String>,
    /// Bytes of the request's body sent to the host.
    pub sent: u64,
    /// Bytes of the answer's body passed back to the sandbox.
    pub received: u64,
    /// From the request's head to the end of its answer's body, milliseconds.
    pub millis: u64,
}

/// `GET /v1/sandboxes/{id}/egress`: the last requests the egress gateway rewrote, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct EgressLog {
    pub requests: Vec<EgressEntry>,
}
