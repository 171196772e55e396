//! PTY sessions: named terminals that outlive their connections — Daytona's PTY sessions.
//!
//! Everything is in the sandbox, as for shell sessions ([`crate::sessions`]); the daemon holds
//! none of it. The terminal is an agent process tagged `pty:<id>`, opened on the terminal flow
//! ([`crate::terminal`]); its description (size, working directory, environment, creation time) is
//! `/tmp/.sandboxd-pty/<id>.json`, written when it is made and at each resize, so a restarted daemon
//! reports what the sandbox has.
//!
//! Contract:
//! - Ids are sessions' ([`crate::sessions::validate_id`]); making one whose id is described already
//!   (running, ended, or not started yet) is a conflict. It is looked at, not guarded: two makes of
//!   one id at the same instant can both pass, as for shell sessions (the agent keeps no lock).
//! - A session made with `lazy_start` is described at once and starts at its first connect.
//! - A connection's end does nothing to the process: it runs until it exits or is killed, and
//!   [`Service::connect_pty`] attaches again (its output from then on).
//! - A session is listed while it is described, `active` while its process runs; killing it ends
//!   the process and removes the description. An ended session cannot be resized
//!   ([`PtyResize::Ended`]) nor connected to.

use crate::exec::agent_error;
use crate::sessions::validate_id;
use crate::terminal::{Terminal, TerminalRequest};
use crate::{Service, ServiceError};
use sandboxd_envd::process::{ProcessSelector, Signal};
use sandboxd_envd::EnvdClient;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The home of a sandbox's default user, `user`.
pub const USER_HOME: &str = "/home/user";

/// Where the sessions' descriptions are, in the sandbox.
pub const PTY_DIR: &str = "/tmp/.sandboxd-pty";

/// What a PTY session is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PtyRequest {
    pub id: String,
    /// The working directory; the sandbox's when `None`.
    pub cwd: Option<String>,
    pub envs: HashMap<String, String>,
    pub cols: u16,
    pub rows: u16,
    /// Start at the first connect rather than now.
    pub lazy_start: bool,
}

/// A PTY session as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PtyInfo {
    pub id: String,
    pub cwd: String,
    pub envs: BTreeMap<String, String>,
    pub cols: u16,
    pub rows: u16,
    /// RFC 3339.
    pub created_at: String,
    /// Made with `lazy_start` and not connected to yet.
    pub lazy_start: bool,
    /// Its process runs (never set in the description itself).
    #[serde(default, skip_serializing)]
    pub active: bool,
}

/// The outcome of [`Service::resize_pty`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyResize {
    Resized(PtyInfo),
    /// Its process ended: there is no terminal to resize.
    Ended(PtyInfo),
}

fn tag(id: &str) -> String {
    format!("pty:{id}")
}

fn description(id: &str) -> String {
    format!("{PTY_DIR}/{id}.json")
}

impl Service {
    /// Makes PTY session `req.id` in sandbox `key` and, unless it starts lazily, opens its terminal.
    pub async fn create_pty(
        &self,
        key: &str,
        req: PtyRequest,
    ) -> Result<(PtyInfo, Option<Terminal>), ServiceError> {
        validate_id("PTY session", &req.id)?;
        let (_, client) = self.agent(key, None).await?;
        if read_description(&client, &req.id).await?.is_some()
            || running(&client).await?.contains(&req.id)
        {
            return Err(ServiceError::Conflict(format!(
                "PTY session {:?} already exists",
                req.id
            )));
        }
        let cwd = match &req.cwd {
            Some(cwd) => cwd.clone(),
            None => self.work_dir(key).await?,
        };
        let mut info = PtyInfo {
            id: req.id.clone(),
            cwd,
            envs: req
                .envs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cols: req.cols,
            rows: req.rows,
            created_at: crate::timestamps::rfc3339(sandboxd_store::unix_millis_now()),
            lazy_start: req.lazy_start,
            active: false,
        };
        if req.lazy_start {
            // Checked as the terminal would check it, so a bad size is refused now, not at connect.
            crate::terminal::window(req.cols, req.rows)?;
            write_description(&client, &info).await?;
            return Ok((info, None));
        }
        write_description(&client, &info).await?;
        match self.open_pty(key, &info).await {
            Ok(terminal) => {
                info.active = true;
                Ok((info, Some(terminal)))
            }
            Err(e) => {
                let _ = client.remove(&description(&info.id)).await;
                Err(e)
            }
        }
    }

    /// Attaches to PTY session `id` of sandbox `key`, starting it if it was made to start lazily.
    pub async fn connect_pty(&self, key: &str, id: &str) -> Result<Terminal, ServiceError> {
        validate_id("PTY session", id)?;
        let (_, client) = self.agent(key, None).await?;
        let Some(mut info) = read_description(&client, id).await? else {
            return Err(not_found(id));
        };
        if running(&client).await?.contains(id) {
            return self.connect_terminal(key, &tag(id)).await;
        }
        if !info.lazy_start {
            return Err(ServiceError::NotFound(format!(
                "PTY session {id:?} has ended"
            )));
        }
        info.lazy_start = false;
        write_description(&client, &info).await?;
        self.open_pty(key, &info).await
    }

    /// The PTY sessions of sandbox `key`, by id.
    pub async fn list_ptys(&self, key: &str) -> Result<Vec<PtyInfo>, ServiceError> {
        let (_, client) = self.agent(key, None).await?;
        let entries = match client.list_dir(PTY_DIR, 1).await {
            Ok(entries) => entries,
            Err(e) => match agent_error(e) {
                ServiceError::NotFound(_) => return Ok(Vec::new()),
                other => return Err(other),
            },
        };
        let live = running(&client).await?;
        let mut out = Vec::new();
        for entry in entries {
            let Some(id) = entry.name.strip_suffix(".json") else {
                continue;
            };
            if let Some(mut info) = read_description(&client, id).await? {
                info.active = live.contains(id);
                out.push(info);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// PTY session `id` of sandbox `key`.
    pub async fn pty_info(&self, key: &str, id: &str) -> Result<PtyInfo, ServiceError> {
        validate_id("PTY session", id)?;
        let (_, client) = self.agent(key, None).await?;
        let mut info = read_description(&client, id)
            .await?
            .ok_or_else(|| not_found(id))?;
        info.active = running(&client).await?.contains(id);
        Ok(info)
    }

    /// Gives PTY session `id`'s terminal a new window size (its process gets SIGWINCH).
    pub async fn resize_pty(
        &self,
        key: &str,
        id: &str,
        cols: u16,
        rows: u16,
    ) -> Result<PtyResize, ServiceError> {
        let size = crate::terminal::window(cols, rows)?;
        let mut info = self.pty_info(key, id).await?;
        let (_, client) = self.agent(key, None).await?;
        if info.active {
            match client.resize_pty(ProcessSelector::Tag(tag(id)), size).await {
                Ok(()) => {}
                Err(e) => match agent_error(e) {
                    // Ended between the look and the resize.
                    ServiceError::NotFound(_) => info.active = false,
                    other => return Err(other),
                },
            }
        }
        if !info.active && !info.lazy_start {
            return Ok(PtyResize::Ended(info));
        }
        (info.cols, info.rows) = (cols, rows);
        write_description(&client, &info).await?;
        Ok(PtyResize::Resized(info))
    }

    /// Ends PTY session `id` of sandbox `key`: kills its process and removes its description.
    pub async fn kill_pty(&self, key: &str, id: &str) -> Result<(), ServiceError> {
        validate_id("PTY session", id)?;
        let (_, client) = self.agent(key, None).await?;
        let described = read_description(&client, id).await?.is_some();
        let killed = match client
            .send_signal(ProcessSelector::Tag(tag(id)), Signal::Sigkill)
            .await
        {
            Ok(()) => true,
            Err(e) => match agent_error(e) {
                ServiceError::NotFound(_) => false,
                other => return Err(other),
            },
        };
        if !described && !killed {
            return Err(not_found(id));
        }
        match client.remove(&description(id)).await {
            Ok(()) => Ok(()),
            Err(e) => match agent_error(e) {
                ServiceError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn open_pty(&self, key: &str, info: &PtyInfo) -> Result<Terminal, ServiceError> {
        self.open_terminal(
            key,
            TerminalRequest {
                cols: info.cols,
                rows: info.rows,
                cwd: Some(info.cwd.clone()),
                envs: info.envs.clone().into_iter().collect(),
                tag: Some(tag(&info.id)),
                ..Default::default()
            },
        )
        .await
    }

    /// The directory commands of sandbox `key` start in: its image's working directory, or the
    /// default user's home ([`USER_HOME`], also when it reports none).
    pub async fn work_dir(&self, key: &str) -> Result<String, ServiceError> {
        let out = self
            .exec(
                key,
                sandboxd_api_types::ExecRequest {
                    cmd: vec!["/bin/sh".into(), "-c".into(), "pwd".into()],
                    ..Default::default()
                },
            )
            .await?;
        Ok(match out.stdout.trim() {
            "" => USER_HOME.to_string(),
            dir => dir.to_string(),
        })
    }
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound(format!("PTY session {id:?} not found"))
}

/// The ids of the PTY sessions whose process runs.
async fn running(client: &EnvdClient) -> Result<HashSet<String>, ServiceError> {
    Ok(client
        .list()
        .await
        .map_err(agent_error)?
        .into_iter()
        .filter_map(|p| p.tag?.strip_prefix("pty:").map(str::to_string))
        .collect())
}

async fn read_description(client: &EnvdClient, id: &str) -> Result<Option<PtyInfo>, ServiceError> {
    let bytes = match client.read_file(&description(id), None).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return match agent_error(e) {
                ServiceError::NotFound(_) => Ok(None),
                other => Err(other),
            }
        }
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        ServiceError::InvalidRequest(format!(
            "the description of PTY session {id:?} in the sandbox is not one: {e}"
        ))
    })
}

async fn write_description(client: &EnvdClient, info: &PtyInfo) -> Result<(), ServiceError> {
    let json = serde_json::to_vec(info).map_err(|e| {
        ServiceError::InvalidRequest(format!("describing PTY session {:?}: {e}", info.id))
    })?;
    client
        .write_file(&description(&info.id), None, json)
        .await
        .map_err(agent_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_round_trips_without_its_liveness() {
        let info = PtyInfo {
            id: "dev".into(),
            cwd: "/home/user".into(),
            envs: [("A".to_string(), "1".to_string())].into(),
            cols: 120,
            rows: 30,
            created_at: "2026-12-01T18:00:00.000Z".into(),
            lazy_start: true,
            active: true,
        };
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["lazyStart"], true);
        assert_eq!(json["createdAt"], "2026-12-01T18:00:00.000Z");
        assert!(json.get("active").is_none(), "{json}");
        let back: PtyInfo = serde_json::from_value(json).unwrap();
        assert_eq!(
            back,
            PtyInfo {
                active: false,
                ..info
            }
        );
    }

    #[test]
    fn a_session_is_its_tag_and_its_file() {
        assert_eq!(tag("dev"), "pty:dev");
        assert_eq!(description("dev"), "/tmp/.sandboxd-pty/dev.json");
    }
}
