//! The part of an image's config blob that decides how its sandboxes run.
//!
//! An OCI image config (`application/vnd.oci.image.config.v1+json`, or Docker's
//! `application/vnd.docker.container.image.v1+json`, the same shape) carries far more than a sandbox
//! uses; [`RunConfig`] keeps what does: `Env`, `WorkingDir`, `User`, `Entrypoint`, `Cmd` and
//! `ExposedPorts`, plus the platform. Unknown fields are ignored; a field of the wrong type is an
//! error naming it, never a silent default.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How an image's sandboxes run, from its config blob.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunConfig {
    /// `KEY=VALUE` entries, in the image's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The directory commands start in, when the image sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// The image's user (`name`, `uid`, `uid:gid`), recorded; sandboxes run as `user` unless told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Recorded, not run at boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    /// Recorded, not run at boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cmd: Vec<String>,
    /// Ports the image declares (`8080/tcp`), recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed_ports: Vec<String>,
    /// `linux/amd64` and the like.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub platform: String,
    /// The image's layers stack on sandboxd's built-in `base` (a snapshot of a `base` sandbox, or a
    /// build `FROM base`) rather than standing alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_base: bool,
}

/// A config blob that is not one.
#[derive(Debug, thiserror::Error)]
#[error("invalid image config")]
pub struct ConfigError(#[source] serde_json::Error);

#[derive(Deserialize)]
struct Blob {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
    #[serde(default)]
    config: Option<Inner>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inner {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
}

impl RunConfig {
    /// Reads the config blob `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<RunConfig, ConfigError> {
        let blob: Blob = serde_json::from_slice(bytes).map_err(ConfigError)?;
        let inner = blob.config.unwrap_or(Inner {
            env: None,
            working_dir: None,
            user: None,
            entrypoint: None,
            cmd: None,
            exposed_ports: None,
        });
        let platform = match (blob.os.as_str(), blob.architecture.as_str()) {
            ("", "") => String::new(),
            (os, arch) => format!("{os}/{arch}"),
        };
        Ok(RunConfig {
            env: inner.env.unwrap_or_default(),
            working_dir: inner.working_dir.filter(|d| !d.is_empty()),
            user: inner.user.filter(|u| !u.is_empty()),
            entrypoint: inner.entrypoint.unwrap_or_default(),
            cmd: inner.cmd.unwrap_or_default(),
            exposed_ports: inner
                .exposed_ports
                .map(|p| p.into_keys().collect())
                .unwrap_or_default(),
            platform,
            on_base: false,
        })
    }

    /// The image's environment as pairs; an entry without `=` is a variable set to "" (as Docker
    /// reads it), later entries win.
    pub fn env_pairs(&self) -> BTreeMap<String, String> {
        self.env
            .iter()
            .filter_map(|e| {
                let (k, v) = e.split_once('=').unwrap_or((e.as_str(), ""));
                (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_settings_are_read_and_the_rest_ignored() {
        let blob = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},
            "config":{"Env":["PATH=/usr/local/bin:/usr/bin","LANG=C.UTF-8","EMPTY"],"WorkingDir":"/app",
            "User":"1000","Cmd":["python3"],"ExposedPorts":{"8080/tcp":{}},"Labels":{"a":"b"}},
            "history":[{"created_by":"x"}]}"#;
        let c = RunConfig::parse(blob).unwrap();
        assert_eq!(c.working_dir.as_deref(), Some("/app"));
        assert_eq!(c.user.as_deref(), Some("1000"));
        assert_eq!(c.cmd, vec!["python3"]);
        assert_eq!(c.exposed_ports, vec!["8080/tcp"]);
        assert_eq!(c.platform, "linux/amd64");
        let env = c.env_pairs();
        assert_eq!(env["PATH"], "/usr/local/bin:/usr/bin");
        assert_eq!(env["EMPTY"], "");
        // It survives the store's JSON round trip.
        let back: RunConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_config_without_settings_is_empty_and_a_wrong_type_is_an_error() {
        assert_eq!(RunConfig::parse(b"{}").unwrap(), RunConfig::default());
        assert_eq!(
            RunConfig::parse(br#"{"config":null}"#).unwrap(),
            RunConfig::default()
        );
        assert!(RunConfig::parse(br#"{"config":{"Env":"PATH=/bin"}}"#).is_err());
        assert!(RunConfig::parse(b"not json").is_err());
    }
}
