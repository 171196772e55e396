//! `sbx login` / `sbx logout`, and the saved login later commands fall back to.
//!
//! Contract:
//! - The login is a JSON file `{apiUrl, token}` at `--config` / `SBX_CONFIG`, else
//!   `$XDG_CONFIG_HOME/sbx/config.json`, else `$HOME/.config/sbx/config.json`. It is written whole
//!   (a temporary file renamed over it) with mode 0600, in a directory created with mode 0700, so
//!   no other user can read the key at any moment.
//! - `login` checks the key against the daemon (one `GET /v1/sandboxes?limit=1`) before saving it;
//!   a key the daemon refuses is not saved.
//! - A command's daemon is `--api-url` / `SB_API_URL`, else the saved one, else the default; its key
//!   is `--token` / `SB_PAT_TOKEN`, else the saved key — only when the command talks to the daemon the
//!   key was saved for, so a saved key is never sent anywhere else.

use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::{Client, ListQuery, DEFAULT_API_URL};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `sbx login` saves.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    /// The daemon the key is for.
    pub api_url: String,
    /// The key.
    pub token: String,
}

/// Where the login is saved when `--config` / `SBX_CONFIG` names no file.
pub fn default_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".config"),
    };
    Some(base.join("sbx").join("config.json"))
}

fn local(path: &Path) -> impl FnOnce(std::io::Error) -> SbxError + '_ {
    move |source| SbxError::Local {
        path: path.display().to_string(),
        source,
    }
}

/// The saved login at `path`, if there is one.
pub fn load(path: &Path) -> Result<Option<Saved>, SbxError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(local(path)(e)),
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|source| SbxError::Config {
            path: path.display().to_string(),
            source,
        })
}

/// Writes `saved` to `path` with mode 0600 (replacing what was there at once).
pub fn save(path: &Path, saved: &Saved) -> Result<(), SbxError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(local(dir))?;
    let name = path.file_name().map_or_else(
        || "config.json".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let text = serde_json::to_vec_pretty(saved).map_err(std::io::Error::other)?;
        file.write_all(&text)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(local(path))
}

fn same_daemon(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The daemon and key of a command: flags and environment first, then the saved login (read only
/// when it is needed).
pub fn resolve(
    api_url: Option<String>,
    token: Option<String>,
    config: Option<&Path>,
) -> Result<(String, String), SbxError> {
    let token = token.filter(|t| !t.is_empty());
    if let (Some(url), Some(token)) = (&api_url, &token) {
        return Ok((url.clone(), token.clone()));
    }
    let saved = match config {
        Some(path) => load(path)?,
        None => None,
    };
    let url = api_url
        .or_else(|| saved.as_ref().map(|s| s.api_url.clone()))
        .unwrap_or_else(|| DEFAULT_API_URL.to_string());
    let token = token
        .or_else(|| {
            saved
                .filter(|s| same_daemon(&s.api_url, &url))
                .map(|s| s.token)
        })
        .filter(|t| !t.is_empty())
        .ok_or(SbxError::MissingToken)?;
    Ok((url, token))
}

/// `sbx login`: checks the key (from `token`, else the first line of stdin) and saves it.
pub async fn login(
    out: Output,
    api_url: Option<String>,
    token: Option<String>,
    config: Option<&Path>,
) -> Result<ExitCode, SbxError> {
    let path = config.ok_or(SbxError::NoConfigPath)?;
    let url = match api_url {
        Some(url) => url,
        // A login again keeps the daemon of the last one (a broken file is replaced).
        None => load(path)
            .ok()
            .flatten()
            .map(|s| s.api_url)
            .unwrap_or_else(|| DEFAULT_API_URL.to_string()),
    };
    let token = match token.filter(|t| !t.is_empty()) {
        Some(token) => token,
        None => {
            if std::io::stdin().is_terminal() {
                out.note("API key (or pipe it in), then Enter:");
            }
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(local(Path::new("<stdin>")))?;
            line.trim().to_string()
        }
    };
    if token.is_empty() {
        return Err(SbxError::MissingToken);
    }
    let client = Client::new(&url, token.clone())?;
    client
        .list(&ListQuery {
            limit: Some(1),
            ..ListQuery::default()
        })
        .await?;
    save(
        path,
        &Saved {
            api_url: url.clone(),
            token,
        },
    )?;
    if out.json {
        out.json(&serde_json::json!({"apiUrl": url, "config": path}))?;
    } else {
        out.line(&format!(
            "logged in to {url}; key saved to {}",
            path.display()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `sbx logout`: removes the saved login (nothing to remove is not an error).
pub fn logout(out: Output, config: Option<&Path>) -> Result<ExitCode, SbxError> {
    let path = config.ok_or(SbxError::NoConfigPath)?;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(local(path)(e)),
    }
    if !out.json {
        out.line(&format!("removed {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn save_writes_mode_0600_and_load_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/sbx/config.json");
        let saved = Saved {
            api_url: "http://h:1".into(),
            token: "e2b_secret".into(),
        };
        save(&path, &saved).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(load(&path).unwrap(), Some(saved.clone()));
        // Saving again replaces it, still 0600, and leaves no temporary file.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        save(&path, &saved).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn flags_win_and_a_saved_key_goes_only_to_its_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        assert!(matches!(
            resolve(None, None, Some(&path)),
            Err(SbxError::MissingToken)
        ));
        save(
            &path,
            &Saved {
                api_url: "http://h:1/".into(),
                token: "saved".into(),
            },
        )
        .unwrap();
        let got = |url: Option<&str>, token: Option<&str>| {
            resolve(
                url.map(str::to_string),
                token.map(str::to_string),
                Some(&path),
            )
            .ok()
        };
        assert_eq!(
            got(None, None),
            Some(("http://h:1/".into(), "saved".into()))
        );
        assert_eq!(
            got(Some("http://h:1"), None),
            Some(("http://h:1".into(), "saved".into()))
        );
        assert_eq!(got(Some("http://other:1"), None), None);
        assert_eq!(
            got(Some("http://other:1"), Some("flag")),
            Some(("http://other:1".into(), "flag".into()))
        );
        assert_eq!(
            got(None, Some("flag")),
            Some(("http://h:1/".into(), "flag".into()))
        );
        std::fs::write(&path, "not json").unwrap();
        assert!(matches!(
            resolve(None, None, Some(&path)),
            Err(SbxError::Config { .. })
        ));
    }
}
