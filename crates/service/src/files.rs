//! File-system operations beyond reading and writing ([`crate::exec`] has those), as the Daytona
//! toolbox needs them: stat, recursive listing, folders with a mode, delete with or without
//! recursion, move without overwriting, permissions and ownership, and the searches of [`search`].
//!
//! Everything happens inside the sandbox: the agent's filesystem calls (`Stat`, `ListDir`,
//! `MakeDir`, `Move`, `Remove`, `GET|POST /files`) acting as the sandbox's `user`, and, for what the
//! agent has no call for (`chmod`, `chown`), a command run through [`Service::exec`] as root (a caller
//! who may exec as root gains nothing by it). Paths must be absolute, without `..` or NUL; callers
//! resolve relative paths first.
//!
//! Errors are [`FileError`]s: what went wrong with the path (missing, invalid, taken, denied) apart
//! from what went wrong with the sandbox ([`FileError::Service`]: unknown sandbox, agent down, …), so
//! a surface can tell "no such file" from "no such sandbox".

pub mod search;

use crate::exec::agent_error;
use crate::{validate, Service, ServiceError};
use bytes::Bytes;
use futures::Stream;
use sandboxd_api_types as api;
use sandboxd_envd::filesystem::{EntryInfo, FileType};
use sandboxd_envd::Code;

/// What a file operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path (or one it needs) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The path itself is unusable: relative, `..`, NUL, empty.
    #[error("{0}")]
    InvalidPath(String),
    /// The request cannot be done to this path (a directory where a file is needed, a bad mode, …).
    #[error("{0}")]
    Invalid(String),
    /// Something is already there.
    #[error("{0}")]
    Conflict(String),
    /// The sandbox's user may not do this.
    #[error("permission denied: {0}")]
    Denied(String),
    /// The sandbox, not the path: unknown, not running, its agent failing.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// An agent failure on a path, as a [`FileError`].
pub fn path_error(e: sandboxd_envd::Error) -> FileError {
    use sandboxd_envd::Error as E;
    let denied = match &e {
        E::Rpc(c) if c.code == Code::PermissionDenied => Some(c.message.clone()),
        E::Status {
            status: 403,
            message,
        } => Some(message.clone()),
        _ => None,
    };
    if let Some(message) = denied {
        return FileError::Denied(message);
    }
    match agent_error(e) {
        ServiceError::NotFound(m) => FileError::NotFound(m),
        ServiceError::InvalidRequest(m) => FileError::Invalid(m),
        ServiceError::Conflict(m) => FileError::Conflict(m),
        other => FileError::Service(other),
    }
}

/// `path` made absolute: relative to the home of the sandbox's user ([`crate::pty::USER_HOME`]);
/// `""` and `.` are the home itself.
pub fn absolute(path: &str) -> String {
    let home = crate::pty::USER_HOME;
    let path = path.trim();
    if path.starts_with('/') {
        return path.to_string();
    }
    let rest = path.trim_start_matches("./");
    if rest.is_empty() || rest == "." {
        home.to_string()
    } else {
        format!("{home}/{rest}")
    }
}

/// `path` is absolute, without `..` or NUL.
pub fn checked(path: &str) -> Result<(), FileError> {
    if path.is_empty() {
        return Err(FileError::InvalidPath("path is required".into()));
    }
    validate::sandbox_path(path).map_err(|e| FileError::InvalidPath(e.to_string()))
}

/// A permission mode: one to four octal digits (`755`, `0644`, `1777`).
pub fn parse_mode(mode: &str) -> Result<u32, FileError> {
    let ok =
        !mode.is_empty() && mode.len() <= 4 && mode.bytes().all(|b| (b'0'..=b'7').contains(&b));
    if !ok {
        return Err(FileError::Invalid(format!(
            "invalid mode {mode:?}: give octal digits, e.g. 755 or 0644"
        )));
    }
    u32::from_str_radix(mode, 8).map_err(|e| FileError::Invalid(format!("invalid mode: {e}")))
}

/// A user or group: a name (`[A-Za-z0-9_][A-Za-z0-9_.-]*`, at most 32) or a numeric id.
pub fn check_principal(what: &str, name: &str) -> Result<(), FileError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with(['-', '.'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(FileError::Invalid(format!("invalid {what} {name:?}")))
    }
}

/// Whether an entry is a directory (a symlink to one counts, as `stat` would say).
pub fn is_dir(entry: &EntryInfo) -> bool {
    entry.file_type == FileType::Directory
}

impl Service {
    /// What is at `path`.
    pub async fn file_info(&self, key: &str, path: &str) -> Result<EntryInfo, FileError> {
        checked(path)?;
        let (_, client) = self.agent(key, None).await?;
        client.stat(path).await.map_err(path_error)
    }

    /// The entries under directory `path`, `depth` levels down (1: its own entries), by path.
    pub async fn list_tree(
        &self,
        key: &str,
        path: &str,
        depth: u32,
    ) -> Result<Vec<EntryInfo>, FileError> {
        checked(path)?;
        if depth == 0 {
            return Err(FileError::Invalid("depth must be at least 1".into()));
        }
        let (_, client) = self.agent(key, None).await?;
        let mut entries = client.list_dir(path, depth).await.map_err(path_error)?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    /// Creates directory `path` and its parents (an existing directory is fine), then gives it
    /// `mode` when that is not the agent's 0755.
    pub async fn create_dir(
        &self,
        key: &str,
        path: &str,
        mode: Option<u32>,
    ) -> Result<(), FileError> {
        checked(path)?;
        let (_, client) = self.agent(key, None).await?;
        match client.make_dir(path).await.map_err(path_error) {
            Ok(_) => {}
            Err(FileError::Conflict(_)) => {
                let there = client.stat(path).await.map_err(path_error)?;
                if !is_dir(&there) {
                    return Err(FileError::Conflict(format!(
                        "{path} exists and is not a directory"
                    )));
                }
            }
            Err(e) => return Err(e),
        }
        match mode {
            Some(mode) if mode != 0o755 => self.chmod(key, path, mode).await,
            _ => Ok(()),
        }
    }

    /// Deletes `path`; a directory that is not empty only when `recursive`.
    pub async fn remove_path(
        &self,
        key: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), FileError> {
        checked(path)?;
        if path.trim_end_matches('/').is_empty() {
            return Err(FileError::Invalid(
                "the root directory cannot be deleted".into(),
            ));
        }
        let (_, client) = self.agent(key, None).await?;
        let entry = client.stat(path).await.map_err(path_error)?;
        if is_dir(&entry) && !entry.is_symlink && !recursive {
            let inside = client.list_dir(path, 1).await.map_err(path_error)?;
            if !inside.is_empty() {
                return Err(FileError::Invalid(format!(
                    "directory {path} is not empty: delete it recursively"
                )));
            }
        }
        client.remove(path).await.map_err(path_error)
    }

    /// Moves (renames) `source` to `destination`, which must not exist.
    pub async fn move_path(
        &self,
        key: &str,
        source: &str,
        destination: &str,
    ) -> Result<EntryInfo, FileError> {
        checked(source)?;
        checked(destination)?;
        let (_, client) = self.agent(key, None).await?;
        client.stat(source).await.map_err(path_error)?;
        match client.stat(destination).await.map_err(path_error) {
            Ok(_) => {
                return Err(FileError::Conflict(format!(
                    "destination {destination} already exists"
                )))
            }
            Err(FileError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        client.move_(source, destination).await.map_err(path_error)
    }

    /// Sets the mode (octal string), owner and group of `path`, each when given.
    pub async fn set_permissions(
        &self,
        key: &str,
        path: &str,
        mode: Option<&str>,
        owner: Option<&str>,
        group: Option<&str>,
    ) -> Result<(), FileError> {
        checked(path)?;
        let mode = mode.map(parse_mode).transpose()?;
        if let Some(owner) = owner {
            check_principal("owner", owner)?;
        }
        if let Some(group) = group {
            check_principal("group", group)?;
        }
        self.file_info(key, path).await?;
        if let Some(mode) = mode {
            self.chmod(key, path, mode).await?;
        }
        let ownership = match (owner, group) {
            (Some(o), Some(g)) => Some(("chown", format!("{o}:{g}"))),
            (Some(o), None) => Some(("chown", o.to_string())),
            (None, Some(g)) => Some(("chgrp", g.to_string())),
            (None, None) => None,
        };
        if let Some((tool, who)) = ownership {
            self.run_as_root(key, &[tool, &who, "--", path]).await?;
        }
        Ok(())
    }

    /// Streams the file at `path` out of the sandbox (read as its `user`).
    pub async fn open_file(
        &self,
        key: &str,
        path: &str,
    ) -> Result<impl Stream<Item = Result<Bytes, sandboxd_envd::Error>> + Send + 'static, FileError>
    {
        checked(path)?;
        let (_, client) = self.agent(key, None).await?;
        client
            .read_file_stream(path, Some("user"))
            .await
            .map_err(path_error)
    }

    /// Writes the file at `path` from a stream (as the sandbox's `user`), creating its parents.
    pub async fn save_file<S>(&self, key: &str, path: &str, data: S) -> Result<(), FileError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        checked(path)?;
        if path.ends_with('/') {
            return Err(FileError::InvalidPath(format!(
                "{path} names a directory, not a file"
            )));
        }
        let (_, client) = self.agent(key, None).await?;
        client
            .write_file_stream(path, Some("user"), data)
            .await
            .map_err(path_error)?;
        Ok(())
    }

    async fn chmod(&self, key: &str, path: &str, mode: u32) -> Result<(), FileError> {
        self.run_as_root(key, &["chmod", &format!("{mode:04o}"), "--", path])
            .await
    }

    /// Runs a file tool as root; a failure is the caller's, classified by what the tool said.
    async fn run_as_root(&self, key: &str, cmd: &[&str]) -> Result<(), FileError> {
        let result = self
            .exec(
                key,
                api::ExecRequest {
                    cmd: cmd.iter().map(|s| s.to_string()).collect(),
                    user: Some("root".into()),
                    ..Default::default()
                },
            )
            .await?;
        if result.exit_code == 0 {
            return Ok(());
        }
        Err(tool_error(cmd[0], result.stderr.trim()))
    }
}

/// A file tool's complaint as a [`FileError`].
fn tool_error(tool: &str, said: &str) -> FileError {
    let message = if said.is_empty() {
        format!("{tool} failed")
    } else {
        said.to_string()
    };
    if said.contains("No such file") {
        FileError::NotFound(message)
    } else if said.contains("Operation not permitted") || said.contains("Permission denied") {
        FileError::Denied(message)
    } else {
        FileError::Invalid(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        assert_eq!(parse_mode("1777").unwrap(), 0o1777);
        for bad in ["", "8", "rwx", "07777", "-1"] {
            assert!(
                matches!(parse_mode(bad), Err(FileError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn principals_are_names_or_ids() {
        for good in ["user", "root", "1000", "www-data", "a.b"] {
            check_principal("owner", good).unwrap();
        }
        for bad in ["", "-rf", "a b", "a:b", "x;y", &"u".repeat(33)] {
            assert!(check_principal("owner", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn relative_paths_start_at_home() {
        assert_eq!(absolute("/etc/x"), "/etc/x");
        assert_eq!(absolute("a/b"), "/home/user/a/b");
        assert_eq!(absolute("./a"), "/home/user/a");
        assert_eq!(absolute(""), "/home/user");
        assert_eq!(absolute("."), "/home/user");
    }

    #[test]
    fn paths_must_be_absolute_and_plain() {
        checked("/home/user/a").unwrap();
        for bad in ["", "a", "/a/../b", "/a\0"] {
            assert!(
                matches!(checked(bad), Err(FileError::InvalidPath(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tool_complaints_are_classified() {
        assert!(matches!(
            tool_error(
                "chmod",
                "chmod: cannot access '/x': No such file or directory"
            ),
            FileError::NotFound(_)
        ));
        assert!(matches!(
            tool_error("chown", "chown: invalid user: 'nobody2'"),
            FileError::Invalid(_)
        ));
        assert!(matches!(
            tool_error(
                "chown",
                "chown: changing ownership: Operation not permitted"
            ),
            FileError::Denied(_)
        ));
    }
}
