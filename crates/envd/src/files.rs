//! The plain-HTTP `/files` surface of envd: download with `GET /files?path=&username=`, upload with
//! `POST /files?path=&username=` (multipart, one file per `file` part named by the part's filename, or
//! `application/octet-stream`), answered by a JSON array of [`WriteInfo`]; failures carry a JSON
//! [`FilesError`] with the HTTP status. Bodies may be gzip (`Content-Encoding` on uploads,
//! `Accept-Encoding` on downloads). `X-Metadata-<key>: <value>` headers on an upload attach metadata to
//! every file written ([`METADATA_HEADER_PREFIX`]); it comes back in `EntryInfo.metadata`.
//!
//! A caller without the access token may instead present a signature ([`signature`]) made from the
//! token, exactly as the E2B SDK mints signed URLs.

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// URL path of the files endpoint.
pub const PATH: &str = "/files";
/// URL path of the health endpoint.
pub const HEALTH_PATH: &str = "/health";
/// `POST`: gives a booted agent the environment of the sandbox that takes it (envd's `/init`): a
/// JSON [`InitRequest`], answered 204. A warm pool's sandbox is booted before any create names its
/// environment.
pub const INIT_PATH: &str = "/init";

/// The body of [`INIT_PATH`].
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InitRequest {
    /// The environment every later command starts with, replacing the one the agent had.
    #[serde(default)]
    pub env_vars: std::collections::HashMap<String, String>,
}
/// `POST`: changes a running agent's environment for every later command: a JSON [`EnvChange`],
/// answered 204. Processes already running keep theirs.
pub const ENV_PATH: &str = "/env";

/// The body of [`ENV_PATH`], and the one change the daemon applies to every copy of a sandbox's
/// environment ([`EnvChange::applied`]).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EnvChange {
    /// Variables set, replacing what they held.
    #[serde(default)]
    pub set: std::collections::BTreeMap<String, String>,
    /// Variables removed first.
    #[serde(default)]
    pub unset: Vec<String>,
    /// Removes first every variable whose value starts with this and which `set` does not name
    /// (how a sandbox's secrets are replaced whole without knowing which variables held them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unset_value_prefix: Option<String>,
}

impl EnvChange {
    /// `env` with the change applied: the removals, then `set`.
    pub fn applied<C>(&self, env: C) -> C
    where
        C: IntoIterator<Item = (String, String)> + FromIterator<(String, String)>,
    {
        let prefix = self.unset_value_prefix.as_deref().filter(|p| !p.is_empty());
        env.into_iter()
            .filter(|(name, value)| {
                !self.set.contains_key(name)
                    && !self.unset.contains(name)
                    && !prefix.is_some_and(|p| value.starts_with(p))
            })
            .chain(self.set.clone())
            .collect()
    }
}

/// Prefix of upload headers carrying file metadata (`X-Metadata-Author: mish` sets `author`), matched
/// case-insensitively; keys are lowercased.
pub const METADATA_HEADER_PREFIX: &str = "x-metadata-";

/// Query parameters of `/files`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_expiration: Option<i64>,
}

/// What kind of entry an upload produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteType {
    File,
    Dir,
}

/// One written file in the answer to an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: WriteType,
    pub path: String,
    /// The metadata the upload attached (from `X-Metadata-*` headers).
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub metadata: HashMap<String, String>,
}

/// The JSON body of a failed `/files` or `/health` call (`message` is what the SDK shows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesError {
    #[serde(default)]
    pub code: u16,
    #[serde(default)]
    pub message: String,
}

/// Which way a signed URL may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
        }
    }
}

/// The v1 signature of a `/files` URL: `v1_` + unpadded base64 of
/// sha256(`{path}:{operation}:{user}:{token}[:{expiration}]`), `user` empty for the default user.
pub fn signature(
    path: &str,
    operation: Operation,
    user: &str,
    token: &str,
    expiration: Option<i64>,
) -> String {
    let raw = match expiration {
        Some(exp) => format!("{path}:{}:{user}:{token}:{exp}", operation.as_str()),
        None => format!("{path}:{}:{user}:{token}", operation.as_str()),
    };
    format!(
        "v1_{}",
        STANDARD_NO_PAD.encode(Sha256::digest(raw.as_bytes()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_change_removes_then_sets() {
        let env: std::collections::HashMap<String, String> = [
            ("KEEP", "1"),
            ("GONE", "2"),
            ("OLD_KEY", "${sandboxd.secrets.a}"),
            ("NEW_KEY", "${sandboxd.secrets.b}"),
            ("E2B_KEY", "${e2b.secrets.c}"),
            ("SET", "before"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let change = EnvChange {
            set: [("NEW_KEY", "${sandboxd.secrets.d}"), ("SET", "after")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            unset: vec!["GONE".into()],
            unset_value_prefix: Some("${sandboxd.secrets.".into()),
        };
        let mut after: Vec<(String, String)> = change.applied(env).into_iter().collect();
        after.sort();
        let expected: Vec<(String, String)> = [
            ("E2B_KEY", "${e2b.secrets.c}"),
            ("KEEP", "1"),
            ("NEW_KEY", "${sandboxd.secrets.d}"),
            ("SET", "after"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        assert_eq!(after, expected);
        let wire = serde_json::to_value(&change).unwrap();
        assert_eq!(wire["unsetValuePrefix"], "${sandboxd.secrets.");
        let parsed: EnvChange = serde_json::from_str(r#"{"set": {"A": "1"}}"#).unwrap();
        assert_eq!(parsed.applied(Vec::new()), vec![("A".into(), "1".into())]);
    }

    #[test]
    fn signature_matches_sdk_algorithm() {
        // Computed with the E2B SDK's get_signature("/a.txt", "read", None, "tok").
        assert_eq!(
            signature("/a.txt", Operation::Read, "", "tok", None),
            "v1_EV/DvoS4mUiocl2RlxlZEymBC6EMYhkDL6kq8QBzt6g"
        );
        assert_ne!(
            signature("/a.txt", Operation::Read, "", "tok", Some(5)),
            signature("/a.txt", Operation::Write, "", "tok", Some(5))
        );
    }

    #[test]
    fn write_info_shape() {
        let mut w = WriteInfo {
            name: "a".into(),
            kind: WriteType::File,
            path: "/a".into(),
            metadata: HashMap::new(),
        };
        assert_eq!(
            serde_json::to_string(&w).unwrap(),
            r#"{"name":"a","type":"file","path":"/a"}"#
        );
        w.metadata.insert("author".into(), "mish".into());
        assert_eq!(
            serde_json::to_string(&w).unwrap(),
            r#"{"name":"a","type":"file","path":"/a","metadata":{"author":"mish"}}"#
        );
    }
}
