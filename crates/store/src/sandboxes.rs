//! Sandboxes: the rows that record what was promised to a caller.
//!
//! Contract:
//! - A non-empty name belongs to at most one sandbox (`idx_sandboxes_name`, partial on `name <> ''`);
//!   unnamed sandboxes (`''`) coexist freely. [`WriteTx::insert_sandbox`] maps exactly that index's
//!   failure to [`StoreError::NameConflict`] (and the primary key's to [`StoreError::SandboxExists`]); every
//!   other failure stays a [`StoreError::Sqlite`].
//! - State changes are conditional ([`WriteTx::set_state`]): the UPDATE names the states it may leave, so
//!   two actors racing on one sandbox cannot both move it; each applied change bumps `generation`.
//! - Listing is keyset-paged on `(created_at, id)`: a page never repeats or skips a row that existed for the
//!   whole walk, whatever is inserted meanwhile.
//! - Deleting a sandbox cascades to its exposed ports and custom domains and frees its network slot.

use std::collections::BTreeMap;
use std::fmt;

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{params, OptionalExtension, Row, ToSql};
use serde::{Deserialize, Serialize};

use crate::error::{is_unique_violation_on, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// Lifecycle state of a sandbox (the `CHECK` on `sandboxes.state` lists exactly these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Creating,
    Starting,
    Running,
    Stopping,
    Stopped,
    Paused,
    Deleting,
    Failed,
    Lost,
}

impl SandboxState {
    /// Every state, e.g. as the `from` of an unconditional [`WriteTx::set_state`].
    pub const ALL: [SandboxState; 9] = [
        SandboxState::Creating,
        SandboxState::Starting,
        SandboxState::Running,
        SandboxState::Stopping,
        SandboxState::Stopped,
        SandboxState::Paused,
        SandboxState::Deleting,
        SandboxState::Failed,
        SandboxState::Lost,
    ];

    /// The states a reconciler must sweep: the sandbox is between two stable states.
    pub const TRANSITIONAL: [SandboxState; 4] = [
        SandboxState::Creating,
        SandboxState::Starting,
        SandboxState::Stopping,
        SandboxState::Deleting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Starting => "starting",
            SandboxState::Running => "running",
            SandboxState::Stopping => "stopping",
            SandboxState::Stopped => "stopped",
            SandboxState::Paused => "paused",
            SandboxState::Deleting => "deleting",
            SandboxState::Failed => "failed",
            SandboxState::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        SandboxState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToSql for SandboxState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for SandboxState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let s = value.as_str()?;
        SandboxState::parse(s)
            .ok_or_else(|| FromSqlError::Other(format!("unknown sandbox state {s:?}").into()))
    }
}

/// A stored sandbox.
#[derive(Clone, PartialEq)]
pub struct Sandbox {
    pub id: String,
    /// `""` when unnamed.
    pub name: String,
    pub state: SandboxState,
    pub template: String,
    pub cpu_millis: u32,
    pub memory_mb: u32,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    /// Network policy, opaque to the store.
    pub network: serde_json::Value,
    /// The per-sandbox secret the daemon presents to the in-sandbox agent (redacted in `Debug`).
    pub agent_token: String,
    /// Copy of the sandbox's lease in `network_slots`, kept in step by `lease_slot` / `release_slot`.
    pub net_slot: Option<u32>,
    pub created_at: UnixMillis,
    pub expires_at: Option<UnixMillis>,
    pub updated_at: UnixMillis,
    pub failure_reason: Option<String>,
    /// Bumped on every applied state change; a fencing token for actors acting on one sandbox.
    pub generation: i64,
    /// What its deadline does.
    pub lifecycle: Lifecycle,
    /// The manifest digest of the image its root is made of; `None` for the built-in `base`.
    pub image: Option<String>,
    /// Limit of its writable layer, MiB (0: none).
    pub disk_mb: u32,
    /// Its isolation tier (`namespace` or `gvisor`, the runtime's names).
    pub isolation: String,
}

/// What a sandbox's deadline does (E2B's `autoPause` / `autoResume`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// Paused at its deadline, not deleted; a paused one has no deadline.
    pub auto_pause: bool,
    /// A paused sandbox is resumed by the next request for it. Only with `auto_pause` (the schema
    /// refuses it alone).
    pub auto_resume: bool,
    /// How long a resume gives the sandbox, ms (its create's timeout; 0 for none).
    pub timeout_ms: i64,
    /// The auto-pause keeps only the files: the sandbox is stopped at its deadline. Only with
    /// `auto_pause` and without `auto_resume` (the schema refuses the rest).
    pub pause_files_only: bool,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("state", &self.state)
            .field("template", &self.template)
            .field("cpu_millis", &self.cpu_millis)
            .field("memory_mb", &self.memory_mb)
            .field("metadata", &self.metadata)
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("network", &self.network)
            .field("agent_token", &"<redacted>")
            .field("net_slot", &self.net_slot)
            .field("created_at", &self.created_at)
            .field("expires_at", &self.expires_at)
            .field("updated_at", &self.updated_at)
            .field("failure_reason", &self.failure_reason)
            .field("generation", &self.generation)
            .field("lifecycle", &self.lifecycle)
            .field("image", &self.image)
            .field("disk_mb", &self.disk_mb)
            .finish()
    }
}

/// What a create flow inserts.
#[derive(Debug, Clone)]
pub struct NewSandbox {
    pub id: String,
    /// `""` for an unnamed sandbox.
    pub name: String,
    pub state: SandboxState,
    pub template: String,
    pub cpu_millis: u32,
    pub memory_mb: u32,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub network: serde_json::Value,
    pub agent_token: String,
    /// Also the initial `updated_at`.
    pub created_at: UnixMillis,
    pub expires_at: Option<UnixMillis>,
    pub lifecycle: Lifecycle,
    /// The manifest digest of its image (a `ready` row of `images`); `None` for `base`.
    pub image: Option<String>,
    /// Limit of its writable layer, MiB (0: none).
    pub disk_mb: u32,
    /// The id of the API key that created it (`""`: none known); see [`crate::per_key`].
    pub owner: String,
    /// Its isolation tier (`namespace` or `gvisor`; the schema refuses anything else).
    pub isolation: String,
}

/// Which sandboxes [`ReadTx::list_sandboxes`] returns.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Every pair must be present in the sandbox's metadata.
    pub metadata: Vec<(String, String)>,
    /// Any of these states; empty means any state.
    pub states: Vec<SandboxState>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size; 0 means 100, capped at 1000.
    pub limit: usize,
}

const COLUMNS: &str = "id, name, state, template, cpu_millis, memory_mb, metadata, env, network, \
     agent_token, net_slot, created_at, expires_at, updated_at, failure_reason, generation, \
     auto_pause, auto_resume, timeout_ms, image_digest, disk_mb, isolation, pause_files_only";

fn json_column<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<Sandbox> {
    Ok(Sandbox {
        id: row.get(0)?,
        name: row.get(1)?,
        state: row.get(2)?,
        template: row.get(3)?,
        cpu_millis: row.get(4)?,
        memory_mb: row.get(5)?,
        metadata: json_column(row, 6)?,
        env: json_column(row, 7)?,
        network: json_column(row, 8)?,
        agent_token: row.get(9)?,
        net_slot: row.get(10)?,
        created_at: row.get(11)?,
        expires_at: row.get(12)?,
        updated_at: row.get(13)?,
        failure_reason: row.get(14)?,
        generation: row.get(15)?,
        lifecycle: Lifecycle {
            auto_pause: row.get(16)?,
            auto_resume: row.get(17)?,
            timeout_ms: row.get(18)?,
            pause_files_only: row.get(22)?,
        },
        image: row.get(19)?,
        disk_mb: row.get(20)?,
        isolation: row.get(21)?,
    })
}

pub(crate) fn states_json(states: &[SandboxState]) -> String {
    serde_json::to_string(&states.iter().map(|s| s.as_str()).collect::<Vec<_>>())
        .expect("a list of strings serializes")
}

fn encode_cursor(s: &Sandbox) -> String {
    format!("{}:{}", s.created_at, s.id)
}

/// The shape of every cursor [`encode_cursor`] writes, as a regular expression for API documents: a
/// creation time in milliseconds (a canonical non-negative integer of at most 18 digits, so it always
/// fits an `i64`), `:`, a sandbox id. [`decode_cursor`] accepts exactly these.
pub const CURSOR_PATTERN: &str = "^(0|[1-9][0-9]{0,17}):[a-z0-9_-]+$";

fn decode_cursor(c: &str) -> Result<(i64, String)> {
    let (at, id) = c.split_once(':').ok_or(StoreError::InvalidCursor)?;
    let canonical = at.len() <= 18
        && at.bytes().all(|b| b.is_ascii_digit())
        && (at == "0" || !at.starts_with('0'));
    let valid_id = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !canonical || !valid_id {
        return Err(StoreError::InvalidCursor);
    }
    let at = at.parse().map_err(|_| StoreError::InvalidCursor)?;
    Ok((at, id.to_owned()))
}

/// Lookup conditions (SQL after `WHERE`, the key as `?1`). Those on `name` and `agent_token` repeat their
/// partial index's `<> ''`, which is what lets SQLite use that index.
const BY_KEY: &str = "id = ?1 OR (name = ?1 AND name <> '') ORDER BY id = ?1 DESC LIMIT 1";
const BY_NAME: &str = "name = ?1 AND name <> ''";
const BY_AGENT_TOKEN: &str = "agent_token = ?1 AND agent_token <> ''";

impl ReadTx<'_> {
    /// The sandbox whose id is `key`, or else whose (non-empty) name is `key`.
    pub fn get_sandbox(&self, key: &str) -> Result<Option<Sandbox>> {
        self.one_sandbox(BY_KEY, key)
    }

    /// The sandbox whose agent token is `token` (`None` for an empty token).
    pub fn get_sandbox_by_agent_token(&self, token: &str) -> Result<Option<Sandbox>> {
        self.one_sandbox(BY_AGENT_TOKEN, token)
    }

    /// The sandbox with this id.
    pub fn get_sandbox_by_id(&self, id: &str) -> Result<Option<Sandbox>> {
        self.one_sandbox("id = ?1", id)
    }

    /// The sandbox with this (non-empty) name.
    pub fn get_sandbox_by_name(&self, name: &str) -> Result<Option<Sandbox>> {
        self.one_sandbox(BY_NAME, name)
    }

    /// The first sandbox matching `condition` (SQL after `WHERE`, with `key` as `?1`).
    fn one_sandbox(&self, condition: &str, key: &str) -> Result<Option<Sandbox>> {
        let sql = format!("SELECT {COLUMNS} FROM sandboxes WHERE {condition}");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_row([key], from_row)
            .optional()?)
    }

    /// One page of sandboxes in `(created_at, id)` order, and the cursor of the next page (`None` on the
    /// last page).
    pub fn list_sandboxes(&self, filter: &SandboxFilter) -> Result<(Vec<Sandbox>, Option<String>)> {
        let limit = match filter.limit {
            0 => 100,
            n => n.min(1000),
        };
        let (after_at, after_id) = match &filter.cursor {
            Some(c) => decode_cursor(c)?,
            None => (i64::MIN, String::new()),
        };
        let states = (!filter.states.is_empty()).then(|| states_json(&filter.states));
        let wanted: serde_json::Map<String, serde_json::Value> = filter
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let wanted = serde_json::Value::Object(wanted).to_string();
        let sql = format!(
            "SELECT {COLUMNS} FROM sandboxes s
             WHERE (s.created_at, s.id) > (?1, ?2)
               AND (?3 IS NULL OR s.state IN (SELECT value FROM json_each(?3)))
               AND NOT EXISTS (
                   SELECT 1 FROM json_each(?4) f
                   WHERE NOT EXISTS (
                       SELECT 1 FROM json_each(s.metadata) m WHERE m.key = f.key AND m.value = f.value))
             ORDER BY s.created_at, s.id
             LIMIT ?5"
        );
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let mut page = stmt
            .query_map(
                params![after_at, after_id, states, wanted, (limit + 1) as i64],
                from_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last().map(encode_cursor)
        } else {
            None
        };
        Ok((page, next))
    }

    /// Sandboxes whose `expires_at` is at or before `now` and that are not already being deleted, oldest
    /// deadline first. The caller decides what expiry means for each state.
    pub fn expired_sandboxes(&self, now: UnixMillis) -> Result<Vec<Sandbox>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM sandboxes
             WHERE expires_at IS NOT NULL AND expires_at <= ?1 AND state <> 'deleting'
             ORDER BY expires_at, id"
        );
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map([now], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Sandboxes in any of `states` (e.g. [`SandboxState::TRANSITIONAL`] for a reconciler), oldest first.
    pub fn sandboxes_in_states(&self, states: &[SandboxState]) -> Result<Vec<Sandbox>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM sandboxes WHERE state IN (SELECT value FROM json_each(?1))
             ORDER BY created_at, id"
        );
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt
            .query_map([states_json(states)], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl WriteTx<'_> {
    /// Inserts a sandbox. A taken non-empty name is [`StoreError::NameConflict`]; a taken id is
    /// [`StoreError::SandboxExists`].
    pub fn insert_sandbox(&mut self, new: NewSandbox) -> Result<Sandbox> {
        let metadata = serde_json::to_string(&new.metadata).expect("a string map serializes");
        let env = serde_json::to_string(&new.env).expect("a string map serializes");
        let sql = format!(
            "INSERT INTO sandboxes (id, name, state, template, cpu_millis, memory_mb, metadata, env, network,
                                    agent_token, created_at, expires_at, updated_at, generation,
                                    auto_pause, auto_resume, timeout_ms, image_digest, disk_mb, owner,
                                    isolation, pause_files_only)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?11, 0, ?13, ?14, ?15, ?16, ?17, ?18,
                     ?19, ?20)
             RETURNING {COLUMNS}"
        );
        let inserted = self.conn().prepare_cached(&sql)?.query_row(
            params![
                new.id,
                new.name,
                new.state,
                new.template,
                new.cpu_millis,
                new.memory_mb,
                metadata,
                env,
                new.network.to_string(),
                new.agent_token,
                new.created_at,
                new.expires_at,
                new.lifecycle.auto_pause,
                new.lifecycle.auto_resume,
                new.lifecycle.timeout_ms,
                new.image,
                new.disk_mb,
                new.owner,
                new.isolation,
                new.lifecycle.pause_files_only,
            ],
            from_row,
        );
        inserted.map_err(|e| {
            if is_unique_violation_on(&e, "sandboxes.name") {
                StoreError::NameConflict { name: new.name }
            } else if is_unique_violation_on(&e, "sandboxes.id") {
                StoreError::SandboxExists { id: new.id }
            } else {
                StoreError::Sqlite(e)
            }
        })
    }

    /// Moves sandbox `id` to `to` if it is currently in one of `from` (an empty `from` never applies), sets
    /// `failure_reason` to `reason` and bumps `generation`. Returns whether the change applied.
    pub fn set_state(
        &mut self,
        id: &str,
        from: &[SandboxState],
        to: SandboxState,
        reason: Option<&str>,
        now: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE sandboxes
             SET state = ?3, failure_reason = ?4, updated_at = ?5, generation = generation + 1
             WHERE id = ?1 AND state IN (SELECT value FROM json_each(?2))",
            )?
            .execute(params![id, states_json(from), to, reason, now])?;
        Ok(n == 1)
    }

    /// Sets (or clears) the deadline of sandbox `id`. Returns whether the sandbox exists.
    pub fn set_expires_at(
        &mut self,
        id: &str,
        expires_at: Option<UnixMillis>,
        now: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("UPDATE sandboxes SET expires_at = ?2, updated_at = ?3 WHERE id = ?1")?
            .execute(params![id, expires_at, now])?;
        Ok(n == 1)
    }

    /// Records sandbox `id`'s new size (CPU thousandths, memory and disk MiB); whether it exists.
    pub fn set_resources(
        &mut self,
        id: &str,
        cpu_millis: u32,
        memory_mb: u32,
        disk_mb: u32,
        now: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE sandboxes SET cpu_millis = ?2, memory_mb = ?3, disk_mb = ?4, updated_at = ?5
                 WHERE id = ?1",
            )?
            .execute(params![id, cpu_millis, memory_mb, disk_mb, now])?;
        Ok(n == 1)
    }

    /// Drops the deadline of auto-pausing sandbox `id` if it is paused (or stopped: paused to its
    /// files) and its deadline is still at or before `now` (a deadline moved meanwhile stands).
    /// Returns whether it was dropped.
    pub fn drop_paused_deadline(&mut self, id: &str, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE sandboxes SET expires_at = NULL, updated_at = ?2
                 WHERE id = ?1 AND auto_pause = 1 AND state IN ('paused', 'stopped')
                   AND expires_at <= ?2",
            )?
            .execute(params![id, now])?;
        Ok(n == 1)
    }

    /// Frees the name of sandbox `id` (sets it to `""`, unnamed) so a new sandbox may take it; for
    /// sandboxes that will never run again (`failed`, `lost`), whose row stays for diagnosis. Returns
    /// whether a name was freed.
    pub fn release_name(&mut self, id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("UPDATE sandboxes SET name = '' WHERE id = ?1 AND name <> ''")?
            .execute([id])?;
        Ok(n == 1)
    }

    /// Replaces sandbox `id`'s metadata; whether it exists.
    pub fn set_metadata(
        &mut self,
        id: &str,
        metadata: &BTreeMap<String, String>,
        now: UnixMillis,
    ) -> Result<bool> {
        let json = serde_json::to_string(metadata).expect("a string map serializes");
        let n = self
            .conn()
            .prepare_cached("UPDATE sandboxes SET metadata = ?2, updated_at = ?3 WHERE id = ?1")?
            .execute(params![id, json, now])?;
        Ok(n == 1)
    }

    /// Replaces sandbox `id`'s environment (as its create gave it, changed since); whether it exists.
    pub fn set_env(
        &mut self,
        id: &str,
        env: &BTreeMap<String, String>,
        now: UnixMillis,
    ) -> Result<bool> {
        let json = serde_json::to_string(env).expect("a string map serializes");
        let n = self
            .conn()
            .prepare_cached("UPDATE sandboxes SET env = ?2, updated_at = ?3 WHERE id = ?1")?
            .execute(params![id, json, now])?;
        Ok(n == 1)
    }

    /// Replaces sandbox `id`'s network posture. Returns whether it exists.
    pub fn set_network(
        &mut self,
        id: &str,
        network: &serde_json::Value,
        now: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("UPDATE sandboxes SET network = ?2, updated_at = ?3 WHERE id = ?1")?
            .execute(params![id, network.to_string(), now])?;
        Ok(n == 1)
    }

    /// Deletes sandbox `id` (cascading to its ports and domains, freeing its slot). Returns whether it
    /// existed.
    pub fn delete_sandbox(&mut self, id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM sandboxes WHERE id = ?1")?
            .execute([id])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests;
