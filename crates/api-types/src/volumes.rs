//! Volumes: named storage that outlives sandboxes (`/v1/volumes`), and mounting them on create.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /v1/volumes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateVolume {
    /// Unique name: 1 to 63 letters, digits, `-`, `_` or `.`, starting with a letter or digit.
    pub name: String,
    /// Size limit in MiB, enforced by the host's disk quota like a sandbox's disk; absent: no
    /// limit. Refused on a host without a disk quota backend.
    #[serde(default, rename = "sizeMB", skip_serializing_if = "Option::is_none")]
    pub size_mb: Option<u64>,
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// A volume.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// Id, unique forever.
    pub id: String,
    /// Name, unique among volumes.
    pub name: String,
    /// Size limit in MiB; 0: none.
    #[serde(rename = "sizeMB")]
    pub size_mb: u64,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Bytes it holds, where the host can measure it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// The sandboxes that mount it (only in a single volume's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<VolumeUser>>,
}

/// A sandbox that mounts a volume.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeUser {
    pub sandbox_id: String,
    pub path: String,
    pub read_only: bool,
}

/// `GET /v1/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct VolumeList {
    pub volumes: Vec<Volume>,
}

/// A volume to mount in a sandbox being created (`volumes` of `POST /v1/sandboxes`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeMount {
    /// The volume's name (or id).
    pub name: String,
    /// Where it appears in the sandbox: an absolute path that hides no system directory
    /// (`/data`, `/mnt/cache`, `/home/user/work`).
    pub path: String,
    /// Mount it read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// A directory of the volume to mount instead of its root (made if missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subpath: Option<String>,
}

/// One entry of a volume (`GET /v1/volumes/{name}/files`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeEntry {
    pub name: String,
    /// Path inside the volume, from `/`.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// Permission bits, e.g. 420 (0644).
    pub mode: u32,
    /// Owner and group as a sandbox sees them.
    pub uid: u32,
    pub gid: u32,
    /// Last modification, RFC 3339.
    pub modified_at: String,
    /// Where a symbolic link points (the volume API never follows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// `GET /v1/volumes/{name}/files?path=&depth=`: a directory's entries.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct VolumeEntries {
    pub entries: Vec<VolumeEntry>,
}
