//! `filesystem.Filesystem` messages (envd's `filesystem/filesystem.proto`) in canonical protobuf JSON:
//! the unary calls, the `WatchDir` stream and the polling watcher calls (`CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`). Plus the two value formats envd uses inside them: Go's
//! `FileMode.String()` for `permissions` ([`permissions_string`]) and RFC 3339 for `modifiedTime`
//! ([`rfc3339`]).

use crate::json;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The Connect service name.
pub const SERVICE: &str = "filesystem.Filesystem";

/// URL path of a `filesystem.Filesystem` method.
pub fn path(method: &str) -> String {
    format!("/{SERVICE}/{method}")
}

/// The `filesystem.FileType` enum, by name on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileType {
    #[default]
    #[serde(rename = "FILE_TYPE_UNSPECIFIED", alias = "0")]
    Unspecified,
    #[serde(rename = "FILE_TYPE_FILE")]
    File,
    #[serde(rename = "FILE_TYPE_DIRECTORY")]
    Directory,
    #[serde(rename = "FILE_TYPE_SYMLINK")]
    Symlink,
}

/// What envd reports about one filesystem entry. A symlink is described by its own name, size and
/// `permissions` (`L...`) but its target's `type` and `mode`, with `symlinkTarget` the resolved path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EntryInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    pub path: String,
    #[serde(with = "json::i64_str")]
    pub size: i64,
    #[serde(deserialize_with = "json::num::deserialize")]
    pub mode: u32,
    pub permissions: String,
    pub owner: String,
    pub group: String,
    #[serde(alias = "modified_time", skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    #[serde(alias = "symlink_target", skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub metadata: HashMap<String, String>,
    #[serde(alias = "is_symlink", skip_serializing_if = "std::ops::Not::not")]
    pub is_symlink: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatRequest {
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatResponse {
    pub entry: EntryInfo,
}

/// `depth` 0 means 1 (the directory's own entries).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListDirRequest {
    pub path: String,
    #[serde(deserialize_with = "json::num::deserialize")]
    pub depth: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListDirResponse {
    pub entries: Vec<EntryInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MakeDirRequest {
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MakeDirResponse {
    pub entry: EntryInfo,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    pub source: String,
    pub destination: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveResponse {
    pub entry: EntryInfo,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveRequest {
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveResponse {}

/// `filesystem.Filesystem/WatchDir` request (and, as [`CreateWatcherRequest`], `CreateWatcher`'s).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchDirRequest {
    pub path: String,
    pub recursive: bool,
    /// Attach the entry's [`EntryInfo`] to each event when it can still be stat-ed.
    #[serde(alias = "include_entry", skip_serializing_if = "std::ops::Not::not")]
    pub include_entry: bool,
    /// Allow watching a directory on NFS, CIFS/SMB or FUSE (refused otherwise).
    #[serde(
        alias = "allow_network_mounts",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub allow_network_mounts: bool,
}

/// `filesystem.Filesystem/CreateWatcher` request.
pub type CreateWatcherRequest = WatchDirRequest;

/// The `filesystem.EventType` enum, by name on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[default]
    #[serde(rename = "EVENT_TYPE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "EVENT_TYPE_CREATE")]
    Create,
    #[serde(rename = "EVENT_TYPE_WRITE")]
    Write,
    #[serde(rename = "EVENT_TYPE_REMOVE")]
    Remove,
    #[serde(rename = "EVENT_TYPE_RENAME")]
    Rename,
    #[serde(rename = "EVENT_TYPE_CHMOD")]
    Chmod,
}

/// One change under a watched directory; `name` is relative to it (`sub/file.txt`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemEvent {
    pub name: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// One message of a `WatchDir` stream. The message is nothing but its `event` oneof, whose member
/// protobuf JSON puts at the top level: `{"filesystem":{"name":"a","type":"EVENT_TYPE_CREATE"}}`.
pub type WatchDirResponse = WatchEvent;

/// The `WatchDirResponse.event` oneof: `start` once the watch is in place, then `filesystem` events
/// and `keepalive`s.
// A transient wire message, built and consumed one at a time: boxing the big variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchEvent {
    Start(Empty),
    Filesystem(FilesystemEvent),
    Keepalive(Empty),
}

/// An empty message (`WatchDirResponse.StartEvent`, `.KeepAlive`, the watcher calls' answers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GetWatcherEventsRequest {
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GetWatcherEventsResponse {
    pub events: Vec<FilesystemEvent>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RemoveWatcherRequest {
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveWatcherResponse {}

/// Go's `os.FileMode.String()` of a Linux `st_mode`, as envd reports it: type letters (`d`, `L`, `D`,
/// `p`, `S`, `u`, `g`, `c`, `t`, `?`) then `rwxrwxrwx`, e.g. `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`.
pub fn permissions_string(st_mode: u32) -> String {
    const S_IFMT: u32 = 0o170000;
    let fmt = st_mode & S_IFMT;
    // Go's letters in Go's order: d a l T L D p S u g c t ?; Linux has no a/l/T.
    let flags = [
        (fmt == 0o040000, 'd'),
        (fmt == 0o120000, 'L'),
        (fmt == 0o060000 || fmt == 0o020000, 'D'),
        (fmt == 0o010000, 'p'),
        (fmt == 0o140000, 'S'),
        (st_mode & 0o4000 != 0, 'u'),
        (st_mode & 0o2000 != 0, 'g'),
        (fmt == 0o020000, 'c'),
        (st_mode & 0o1000 != 0, 't'),
        (
            fmt != 0o100000
                && !matches!(
                    fmt,
                    0o040000 | 0o120000 | 0o060000 | 0o020000 | 0o010000 | 0o140000
                ),
            '?',
        ),
    ];
    let mut out = String::with_capacity(12);
    for (set, c) in flags {
        if set {
            out.push(c);
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    const RWX: &[u8; 9] = b"rwxrwxrwx";
    for (i, c) in RWX.iter().enumerate() {
        let bit = 1 << (8 - i);
        out.push(if st_mode & bit != 0 { *c as char } else { '-' });
    }
    out
}

/// A UTC timestamp as protobuf JSON writes `google.protobuf.Timestamp`: `1970-01-01T00:00:00Z`, with 3, 6
/// or 9 fractional digits when `nanos` is not zero.
pub fn rfc3339(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    );
    let nanos = nanos % 1_000_000_000;
    if nanos != 0 {
        if (nanos / 1_000_000) * 1_000_000 == nanos {
            s.push_str(&format!(".{:03}", nanos / 1_000_000));
        } else if (nanos / 1_000) * 1_000 == nanos {
            s.push_str(&format!(".{:06}", nanos / 1_000));
        } else {
            s.push_str(&format!(".{nanos:09}"));
        }
    }
    s.push('Z');
    s
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_match_go_file_mode_string() {
        assert_eq!(permissions_string(0o100644), "-rw-r--r--");
        assert_eq!(permissions_string(0o040755), "drwxr-xr-x");
        assert_eq!(permissions_string(0o120777), "Lrwxrwxrwx");
        assert_eq!(permissions_string(0o041777), "dtrwxrwxrwx");
        assert_eq!(permissions_string(0o104755), "urwxr-xr-x");
        assert_eq!(permissions_string(0o010600), "prw-------");
        assert_eq!(permissions_string(0o020666), "Dcrw-rw-rw-");
        assert_eq!(permissions_string(0o140755), "Srwxr-xr-x");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339(1_700_000_000, 5_000_000),
            "2023-11-14T22:13:20.005Z"
        );
        assert_eq!(rfc3339(1_700_000_000, 1), "2023-11-14T22:13:20.000000001Z");
        assert_eq!(rfc3339(-1, 0), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn entry_info_serializes_like_envd() {
        let e = EntryInfo {
            name: "a".into(),
            file_type: FileType::File,
            path: "/home/user/a".into(),
            size: 5,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_time: Some("2023-11-14T22:13:20Z".into()),
            ..Default::default()
        };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(
            json,
            r#"{"name":"a","type":"FILE_TYPE_FILE","path":"/home/user/a","size":"5","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2023-11-14T22:13:20Z"}"#
        );
        let back: EntryInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn watch_messages_use_sdk_shapes() {
        let req: WatchDirRequest = serde_json::from_str(
            r#"{"path":"/tmp","recursive":true,"includeEntry":true,"allow_network_mounts":true}"#,
        )
        .unwrap();
        assert!(req.recursive && req.include_entry && req.allow_network_mounts);
        let ev: WatchDirResponse = WatchEvent::Filesystem(FilesystemEvent {
            name: "sub/a.txt".into(),
            event_type: EventType::Create,
            entry: None,
        });
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"filesystem":{"name":"sub/a.txt","type":"EVENT_TYPE_CREATE"}}"#
        );
        let start: WatchDirResponse = WatchEvent::Start(Empty {});
        assert_eq!(serde_json::to_string(&start).unwrap(), r#"{"start":{}}"#);
        let created = CreateWatcherResponse {
            watcher_id: "w1".into(),
        };
        assert_eq!(
            serde_json::to_string(&created).unwrap(),
            r#"{"watcherId":"w1"}"#
        );
        let get: GetWatcherEventsRequest = serde_json::from_str(r#"{"watcher_id":"w1"}"#).unwrap();
        assert_eq!(get.watcher_id, "w1");
    }
}
