//! Images, templates and snapshots (`/v1/images`, `/v1/templates`, a sandbox's snapshot), and the
//! registry credentials a create or a pull may carry.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Credentials for a registry (basic auth, or a token as the password).
#[derive(Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryAuth {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `POST /v1/images`: pull an image onto this node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullImage {
    /// The image reference, resolved as Docker does (`python:3.12-slim` is
    /// `docker.io/library/python:3.12-slim`).
    pub reference: String,
    /// Credentials for this pull; never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_auth: Option<RegistryAuth>,
}

/// An image on this node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Manifest digest (`sha256:…`), its identity.
    pub digest: String,
    /// `pulling` or `ready`.
    pub state: String,
    /// The reference it was first pulled as.
    pub reference: String,
    /// The references that name it now.
    pub tags: Vec<String>,
    /// Compressed size of its layers, bytes.
    pub size: u64,
    /// While pulling: bytes fetched so far.
    pub pulled_bytes: u64,
    /// Its layers' digests, lowest first.
    pub layers: Vec<String>,
    /// Environment its sandboxes start with.
    pub env: Vec<String>,
    /// Where commands start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// The image's own user (sandboxes run as `user` unless told otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Recorded, not run at boot.
    pub entrypoint: Vec<String>,
    /// Recorded, not run at boot.
    pub cmd: Vec<String>,
    /// When it was pulled, RFC 3339.
    pub created_at: String,
    /// When a sandbox last used it, RFC 3339.
    pub last_used_at: String,
}

/// `GET /v1/images`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ImageList {
    /// Every image on this node, newest first.
    pub images: Vec<Image>,
}

/// `POST /v1/images/prune`: what was freed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PruneImages {
    /// Layers removed.
    pub layers: u64,
    /// Bytes their files took.
    pub bytes: u64,
}

/// `POST /v1/templates`: a template from an image reference, or built from a Dockerfile.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTemplate {
    /// Its name: 1–128 of `[a-z0-9._/-]` and an optional `:tag`, starting with a letter or digit.
    pub name: String,
    /// An image reference to pull as the template (instead of `dockerfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A Dockerfile to build (instead of `image`): FROM (an image, a template or `base`), RUN,
    /// COPY/ADD (from `context`), ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, ENTRYPOINT, CMD, SHELL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dockerfile: Option<String>,
    /// The build context: a tar of the files COPY and ADD read, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Build arguments for the Dockerfile's ARGs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_args: Option<BTreeMap<String, String>>,
    /// Credentials for the pulls of this build; never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_auth: Option<RegistryAuth>,
    /// A shell command every sandbox made from the template starts in the background once it is up
    /// (as `user`, in the image's working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    /// A shell command polled until it exits 0 before a create from the template answers
    /// (`--ready-cmd-timeout-secs` at most, else the create fails and the sandbox goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
    /// The isolation tier sandboxes made from it run in when their create names none: `namespace`
    /// or `gvisor` (one this daemon offers). Default: the daemon's `--default-isolation` at each
    /// create. The build itself always runs on the namespace tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
}

/// A template.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// Its name.
    pub name: String,
    /// `building`, `ready` or `failed`.
    pub state: String,
    /// The image's digest, once ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// What it is made from (`{image}`, `{dockerfile, contextBytes, buildArgs}` or `{snapshotOf}`).
    #[schema(value_type = Object)]
    pub source: serde_json::Value,
    /// Why its build failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What sandboxes made from it start once up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    /// What a create from it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
    /// The tier its sandboxes run in when their create names none; absent: the daemon's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// When it was created, RFC 3339.
    pub created_at: String,
    /// When it last changed (a log line, its end), RFC 3339.
    pub updated_at: String,
}

/// `GET /v1/templates`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct TemplateList {
    /// Every template, by name (`base` is built in and not listed).
    pub templates: Vec<Template>,
}

/// One line of a template's build log (`GET /v1/templates/{name}/logs`, NDJSON).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Its number, from 0; pass the next one as `offset` to continue.
    pub seq: u64,
    /// The text.
    pub line: String,
    /// When it was written, RFC 3339.
    pub at: String,
}

/// `POST /v1/sandboxes/{id}/snapshot`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSnapshot {
    /// The template's name.
    pub name: String,
}
