//! Daytona's toolbox file system (`/api/toolbox/{id}/files…`), on the service's file flows
//! ([`sandboxd_service::files`]); transfers are in [`super::transfer`].
//!
//! - `GET /files?path=&depth=` → `[FileInfo]` (depth 1, the default: the directory's own entries);
//!   `GET /files/info?path=` → `FileInfo`. A FileInfo is `{name, path, isDir, size, mode,
//!   permissions, owner, group, modTime, modifiedAt}` ([`file_info`]).
//! - `POST /files/folder?path=&mode=` → 201 (parents made; an existing directory is fine);
//!   `DELETE /files?path=&recursive=` → 204 (a non-empty directory only with `recursive=true`);
//!   `POST /files/move?source=&destination=` → 200 (the destination must not exist);
//!   `POST /files/permissions?path=&mode=&owner=&group=` → 200.
//! - `GET /files/find?path=&pattern=` → `[{file, line, content}]` (lines containing the text);
//!   `GET /files/search?path=&pattern=` → `{files}` (glob on paths relative to `path`);
//!   `POST /files/replace {files, pattern, newValue}` → `[{file, success, error?}]`.
//!
//! A relative path is relative to the sandbox user's home ([`HOME`]). Errors are
//! [`ToolboxError`]s: a missing path is a 404 `FILE_NOT_FOUND`, a bad one a 400.

use super::toolbox_error::ToolboxError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_envd::filesystem::{permissions_string, EntryInfo, FileType};
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Where relative paths start: the home of the sandbox's user.
pub const HOME: &str = sandboxd_service::pty::USER_HOME;

/// `path` made absolute: relative to [`HOME`]; `""` and `.` are [`HOME`] itself.
pub use sandboxd_service::files::absolute;

type Params = Query<BTreeMap<String, String>>;

/// A required query parameter.
fn required<'a>(q: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, ToolboxError> {
    q.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ToolboxError::bad_request(format!("{name} is required")))
}

/// An optional query parameter, empty counting as absent.
fn optional<'a>(q: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    q.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

fn flag(q: &BTreeMap<String, String>, name: &str) -> Result<bool, ToolboxError> {
    match optional(q, name) {
        None => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(other) => Err(ToolboxError::bad_request(format!(
            "{name} must be true or false, not {other:?}"
        ))),
    }
}

/// Go's `time.Time.String()` of an RFC 3339 UTC time (`2024-05-06T07:08:09.5Z` →
/// `2024-05-06 07:08:09.5 +0000 UTC`), the layout of Daytona's deprecated `modTime`; another
/// string is returned as it is.
pub fn go_time(rfc3339: &str) -> String {
    let Some(utc) = rfc3339.strip_suffix('Z') else {
        return rfc3339.to_string();
    };
    let Some((date, time)) = utc.split_once('T') else {
        return rfc3339.to_string();
    };
    let time = match time.split_once('.') {
        Some((secs, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                secs.to_string()
            } else {
                format!("{secs}.{frac}")
            }
        }
        None => time.to_string(),
    };
    format!("{date} {time} +0000 UTC")
}

/// An entry as Daytona's `FileInfo` describes it: `mode` is Go's `FileMode.String()` of what the
/// path leads to (a symlink is described by its target, as `stat` does), `permissions` the octal
/// permission bits (`0644`), `owner` and `group` names.
pub fn file_info(e: &EntryInfo) -> Value {
    let kind = match e.file_type {
        FileType::Directory => Some(0o040000),
        FileType::File => Some(0o100000),
        _ => None,
    };
    let mode = match kind {
        Some(bits) => permissions_string(bits | (e.mode & 0o7777)),
        None => e.permissions.clone(),
    };
    let modified = e.modified_time.clone().unwrap_or_default();
    json!({
        "name": e.name,
        "path": e.path,
        "isDir": e.file_type == FileType::Directory,
        "size": e.size.max(0),
        "mode": mode,
        "permissions": format!("{:04o}", e.mode & 0o7777),
        "owner": e.owner,
        "group": e.group,
        "modTime": go_time(&modified),
        "modifiedAt": modified,
    })
}

/// `GET /files`.
pub async fn list(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<Json<Vec<Value>>, ToolboxError> {
    let path = absolute(optional(&q, "path").unwrap_or(""));
    let depth =
        match optional(&q, "depth") {
            None => 1,
            Some(d) => d.parse::<u32>().ok().filter(|d| *d >= 1).ok_or_else(|| {
                ToolboxError::bad_request("depth must be a whole number, at least 1")
            })?,
        };
    let entries = service.list_tree(&id, &path, depth).await?;
    Ok(Json(entries.iter().map(file_info).collect()))
}

/// `GET /files/info`.
pub async fn info(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<Json<Value>, ToolboxError> {
    let path = absolute(required(&q, "path")?);
    let mut entry = service.file_info(&id, &path).await?;
    if entry.path.is_empty() {
        entry.path = path;
    }
    Ok(Json(file_info(&entry)))
}

/// `POST /files/folder` → 201.
pub async fn create_folder(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<StatusCode, ToolboxError> {
    let path = absolute(required(&q, "path")?);
    let mode = optional(&q, "mode")
        .map(sandboxd_service::files::parse_mode)
        .transpose()?;
    service.create_dir(&id, &path, mode).await?;
    Ok(StatusCode::CREATED)
}

/// `DELETE /files` → 204.
pub async fn delete(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<StatusCode, ToolboxError> {
    let path = absolute(required(&q, "path")?);
    service
        .remove_path(&id, &path, flag(&q, "recursive")?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /files/move`.
pub async fn move_file(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<StatusCode, ToolboxError> {
    let source = absolute(required(&q, "source")?);
    let destination = absolute(required(&q, "destination")?);
    service.move_path(&id, &source, &destination).await?;
    Ok(StatusCode::OK)
}

/// `POST /files/permissions`.
pub async fn set_permissions(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<StatusCode, ToolboxError> {
    let path = absolute(required(&q, "path")?);
    service
        .set_permissions(
            &id,
            &path,
            optional(&q, "mode"),
            optional(&q, "owner"),
            optional(&q, "group"),
        )
        .await?;
    Ok(StatusCode::OK)
}

/// `GET /files/find`.
pub async fn find(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<Json<Vec<Value>>, ToolboxError> {
    let path = absolute(required(&q, "path")?);
    let pattern = required(&q, "pattern")?;
    let matches = service.find_in_files(&id, &path, pattern).await?;
    Ok(Json(
        matches
            .into_iter()
            .map(|m| json!({ "file": m.file, "line": m.line, "content": m.content }))
            .collect(),
    ))
}

/// `GET /files/search`.
pub async fn search(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<Json<Value>, ToolboxError> {
    let path = absolute(required(&q, "path")?);
    let pattern = required(&q, "pattern")?;
    let files = service.search_files(&id, &path, pattern).await?;
    Ok(Json(json!({ "files": files })))
}

/// `POST /files/replace`'s body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplaceRequest {
    files: Vec<String>,
    pattern: String,
    new_value: String,
}

/// `POST /files/replace`.
pub async fn replace(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Vec<Value>>, ToolboxError> {
    let req: ReplaceRequest = serde_json::from_slice(&body)
        .map_err(|e| ToolboxError::bad_request(format!("invalid JSON body: {e}")))?;
    let files: Vec<String> = req.files.iter().map(|f| absolute(f)).collect();
    let outcomes = service
        .replace_in_files(&id, &files, &req.pattern, &req.new_value)
        .await?;
    Ok(Json(
        outcomes
            .into_iter()
            .map(|o| match o.error {
                None => json!({ "file": o.file, "success": true }),
                Some(error) => json!({ "file": o.file, "success": false, "error": error }),
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mod_times_read_as_go_prints_them() {
        assert_eq!(
            go_time("2024-05-06T07:08:09.500Z"),
            "2024-05-06 07:08:09.5 +0000 UTC"
        );
        assert_eq!(
            go_time("2024-05-06T07:08:09Z"),
            "2024-05-06 07:08:09 +0000 UTC"
        );
        assert_eq!(go_time(""), "");
    }

    #[test]
    fn entries_become_file_infos() {
        let entry = EntryInfo {
            name: "a.txt".into(),
            file_type: FileType::File,
            path: "/home/user/a.txt".into(),
            size: 12,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_time: Some("2024-05-06T07:08:09Z".into()),
            ..Default::default()
        };
        let info = file_info(&entry);
        assert_eq!(
            info,
            json!({
                "name": "a.txt", "path": "/home/user/a.txt", "isDir": false, "size": 12,
                "mode": "-rw-r--r--", "permissions": "0644", "owner": "user", "group": "user",
                "modTime": "2024-05-06 07:08:09 +0000 UTC", "modifiedAt": "2024-05-06T07:08:09Z",
            })
        );
        // A symlink to a directory is described by the directory, as stat does.
        let link = EntryInfo {
            file_type: FileType::Directory,
            mode: 0o755,
            permissions: "Lrwxrwxrwx".into(),
            is_symlink: true,
            ..entry
        };
        let info = file_info(&link);
        assert_eq!(info["mode"], "drwxr-xr-x");
        assert_eq!(info["isDir"], true);
        assert_eq!(info["permissions"], "0755");
    }
}
