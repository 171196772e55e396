//! Templates (named images), their build logs, and the build cache.
//!
//! Contract (schema in migration 6):
//! - A template's name is its primary key: [`WriteTx::begin_template`] of a name that exists is
//!   [`StoreError::TemplateExists`] unless the existing one `failed` (a failed build may be redone
//!   under its name).
//! - A template is `ready` only with an image (a CHECK), and the image it names cannot be deleted
//!   (`ON DELETE RESTRICT`): `tests::a_ready_template_keeps_its_image`.
//! - Log lines are numbered per template from 0, in the order they were appended; a reader asks for
//!   the lines after the last one it has (`offset`), so following a log never skips or repeats one.
//! - The build cache maps a step key to the layer the step made; it goes with the layer (`CASCADE`).

use rusqlite::{params, OptionalExtension, Row};

use crate::error::{is_unique_violation_on, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// Where a template is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateState {
    /// Its image is being pulled or built.
    Building,
    /// It names a ready image.
    Ready,
    /// Its build failed (`error` says why).
    Failed,
}

impl TemplateState {
    /// The state's name in the schema and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateState::Building => "building",
            TemplateState::Ready => "ready",
            TemplateState::Failed => "failed",
        }
    }

    fn parse(text: &str) -> rusqlite::Result<Self> {
        match text {
            "building" => Ok(TemplateState::Building),
            "ready" => Ok(TemplateState::Ready),
            "failed" => Ok(TemplateState::Failed),
            other => Err(rusqlite::Error::FromSqlConversionFailure(
                1,
                rusqlite::types::Type::Text,
                format!("unknown template state {other:?}").into(),
            )),
        }
    }
}

/// A template as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRecord {
    pub name: String,
    pub state: TemplateState,
    /// The image it names (set once ready).
    pub image: Option<String>,
    /// What it is made from (JSON object, opaque to the store).
    pub source: serde_json::Value,
    /// Why its build failed.
    pub error: Option<String>,
    /// Run in the background in every sandbox made from it, once it is up.
    pub start_cmd: Option<String>,
    /// Polled until it exits 0 before a create from it answers.
    pub ready_cmd: Option<String>,
    /// The isolation tier its sandboxes run in when their create names none (`namespace` or
    /// `gvisor`); `None` leaves it to the daemon's default.
    pub isolation: Option<String>,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

/// One line of a build log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its number, from 0.
    pub seq: u64,
    pub line: String,
    pub at: UnixMillis,
}

const COLUMNS: &str =
    "name, state, image_digest, source, error, created_at, updated_at, start_cmd, ready_cmd, \
     isolation";

fn row(r: &Row<'_>) -> rusqlite::Result<TemplateRecord> {
    let state: String = r.get(1)?;
    let source: String = r.get(3)?;
    Ok(TemplateRecord {
        name: r.get(0)?,
        state: TemplateState::parse(&state)?,
        image: r.get(2)?,
        source: serde_json::from_str(&source).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, Box::new(e))
        })?,
        error: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
        start_cmd: r.get(7)?,
        ready_cmd: r.get(8)?,
        isolation: r.get(9)?,
    })
}

fn get(conn: &rusqlite::Connection, name: &str) -> Result<Option<TemplateRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM templates WHERE name = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([name], row)
        .optional()?)
}

impl ReadTx<'_> {
    /// The template named `name`.
    pub fn get_template(&self, name: &str) -> Result<Option<TemplateRecord>> {
        get(self.conn(), name)
    }

    /// Every template, by name.
    pub fn list_templates(&self) -> Result<Vec<TemplateRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM templates ORDER BY name");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_map([], row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Templates in `state`.
    pub fn templates_in(&self, state: TemplateState) -> Result<Vec<TemplateRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM templates WHERE state = ?1 ORDER BY name");
        Ok(self
            .conn()
            .prepare_cached(&sql)?
            .query_map([state.as_str()], row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Up to `limit` log lines of `template` from line `offset` on.
    pub fn template_log(&self, template: &str, offset: u64, limit: usize) -> Result<Vec<LogLine>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT seq, line, at FROM template_logs WHERE template = ?1 AND seq >= ?2
                 ORDER BY seq LIMIT ?3",
            )?
            .query_map(
                params![
                    template,
                    i64::try_from(offset).unwrap_or(i64::MAX),
                    limit as i64
                ],
                |r| {
                    Ok(LogLine {
                        seq: r.get::<_, i64>(0)?.max(0) as u64,
                        line: r.get(1)?,
                        at: r.get(2)?,
                    })
                },
            )?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// How many sandboxes that still exist were made from template `name`.
    pub fn template_users(&self, name: &str) -> Result<u64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT count(*) FROM sandboxes WHERE template = ?1")?
            .query_row([name], |r| r.get::<_, i64>(0))?
            .max(0) as u64)
    }

    /// The layer the build cache holds for step key `key`.
    pub fn cached_layer(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT layer_digest FROM build_cache WHERE key = ?1")?
            .query_row([key], |r| r.get(0))
            .optional()?)
    }
}

impl WriteTx<'_> {
    /// Records template `name` as `building` from `source`, its sandboxes running in tier
    /// `isolation` (`None`: the daemon's default), replacing a `failed` one of that name (and its
    /// log). [`StoreError::TemplateExists`] if one is building or ready.
    pub fn begin_template(
        &mut self,
        name: &str,
        source: &serde_json::Value,
        isolation: Option<&str>,
        now: UnixMillis,
    ) -> Result<TemplateRecord> {
        let replaced = self
            .conn()
            .prepare_cached("DELETE FROM templates WHERE name = ?1 AND state = 'failed'")?
            .execute([name])?;
        if replaced > 0 {
            self.conn()
                .prepare_cached("DELETE FROM template_logs WHERE template = ?1")?
                .execute([name])?;
        }
        let inserted = self
            .conn()
            .prepare_cached(
                "INSERT INTO templates (name, state, source, created_at, updated_at, isolation)
                 VALUES (?1, 'building', ?2, ?3, ?3, ?4)",
            )?
            .execute(params![name, source.to_string(), now, isolation]);
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation_on(&e, "templates.name") => {
                return Err(StoreError::TemplateExists {
                    name: name.to_string(),
                })
            }
            Err(e) => return Err(e.into()),
        }
        get(self.conn(), name)?.ok_or_else(|| StoreError::NotFound {
            kind: "template",
            key: name.to_string(),
        })
    }

    /// Sets the start and ready commands of template `name`.
    pub fn set_template_commands(
        &mut self,
        name: &str,
        start_cmd: Option<&str>,
        ready_cmd: Option<&str>,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("UPDATE templates SET start_cmd = ?2, ready_cmd = ?3 WHERE name = ?1")?
            .execute(params![name, start_cmd, ready_cmd])?;
        Ok(n == 1)
    }

    /// Marks building template `name` ready with `image`. `false` if it is not building any more.
    pub fn template_ready(&mut self, name: &str, image: &str, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE templates SET state = 'ready', image_digest = ?2, error = NULL, updated_at = ?3
                 WHERE name = ?1 AND state = 'building'",
            )?
            .execute(params![name, image, now])?;
        Ok(n == 1)
    }

    /// Marks building template `name` failed with `error`. `false` if it is not building any more.
    pub fn template_failed(&mut self, name: &str, error: &str, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE templates SET state = 'failed', error = ?2, updated_at = ?3
                 WHERE name = ?1 AND state = 'building'",
            )?
            .execute(params![name, error, now])?;
        Ok(n == 1)
    }

    /// Appends `lines` to template `name`'s log; returns the next line's number.
    pub fn append_template_log(
        &mut self,
        name: &str,
        lines: &[String],
        now: UnixMillis,
    ) -> Result<u64> {
        let mut next: i64 = self
            .conn()
            .prepare_cached(
                "SELECT coalesce(max(seq) + 1, 0) FROM template_logs WHERE template = ?1",
            )?
            .query_row([name], |r| r.get(0))?;
        for line in lines {
            self.conn()
                .prepare_cached(
                    "INSERT INTO template_logs (template, seq, line, at) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![name, next, line, now])?;
            next += 1;
        }
        self.conn()
            .prepare_cached("UPDATE templates SET updated_at = ?2 WHERE name = ?1")?
            .execute(params![name, now])?;
        Ok(next.max(0) as u64)
    }

    /// Deletes template `name` with its log; `false` if there was none.
    pub fn delete_template(&mut self, name: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM templates WHERE name = ?1")?
            .execute([name])?;
        Ok(n == 1)
    }

    /// Records that step key `key` made layer `layer` (the layer's row must exist).
    pub fn cache_layer(&mut self, key: &str, layer: &str, now: UnixMillis) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO build_cache (key, layer_digest, created_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (key) DO UPDATE SET layer_digest = excluded.layer_digest",
            )?
            .execute(params![key, layer, now])?;
        Ok(())
    }

    /// Records layer `layer` (an unpacked layer the layer store holds) if it is not known yet.
    pub fn record_layer(&mut self, layer: &crate::LayerRecord, now: UnixMillis) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO layers (digest, media_type, size, unpacked_bytes, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (digest) DO NOTHING",
            )?
            .execute(params![
                layer.digest,
                layer.media_type,
                i64::try_from(layer.size).unwrap_or(i64::MAX),
                i64::try_from(layer.unpacked_bytes).unwrap_or(i64::MAX),
                now
            ])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;
    use crate::LayerRecord;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    /// Invariant: a template is ready only with an image, and the image a template names cannot be
    /// deleted while the template exists.
    #[tokio::test]
    async fn a_ready_template_keeps_its_image() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        w.write(|tx| {
            tx.begin_image_pull(&digest('a'), "r:a", 1, 1)?;
            let layer = LayerRecord {
                digest: digest('1'),
                media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                size: 1,
                unpacked_bytes: 1,
            };
            tx.complete_image(&digest('a'), &serde_json::json!({}), &[layer], None, 2)?;
            tx.begin_template("py", &serde_json::json!({"image": "r:a"}), None, 3)?;
            assert!(tx.template_ready("py", &digest('a'), 4)?);
            Ok(())
        })
        .await
        .unwrap();
        let refused = w.write(|tx| tx.delete_image(&digest('a'))).await;
        assert!(
            matches!(refused, Err(StoreError::InUse { .. })),
            "{refused:?}"
        );
        // The schema refuses a ready template without an image.
        let no_image = w
            .write(|tx| {
                tx.begin_template("bad", &serde_json::json!({}), None, 5)?;
                tx.conn().execute(
                    "UPDATE templates SET state = 'ready' WHERE name = 'bad'",
                    [],
                )?;
                Ok(())
            })
            .await;
        assert!(
            no_image.is_err(),
            "a ready template without an image was stored"
        );
        w.write(|tx| {
            tx.delete_template("py")?;
            tx.delete_image(&digest('a'))
        })
        .await
        .unwrap();
    }

    /// Invariant: one template per name, across racing creates; a failed one may be built again.
    #[tokio::test]
    async fn one_template_per_name_and_a_failed_one_is_replaced() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        let attempts = (0..50).map(|_| {
            let w = w.clone();
            async move {
                w.write(|tx| {
                    tx.begin_template("t", &serde_json::json!({}), None, 1)
                        .map(|_| ())
                })
                .await
            }
        });
        let results = futures::future::join_all(attempts).await;
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "{results:?}");
        assert!(results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, StoreError::TemplateExists { .. })));
        w.write(|tx| {
            tx.append_template_log("t", &["step 1".into(), "step 2".into()], 2)?;
            tx.template_failed("t", "RUN exited 1", 3)
        })
        .await
        .unwrap();
        let again = w
            .write(|tx| tx.begin_template("t", &serde_json::json!({"again": true}), None, 4))
            .await
            .unwrap();
        assert_eq!(again.state, TemplateState::Building);
        let log = store
            .reader()
            .read(|tx| tx.template_log("t", 0, 10))
            .await
            .unwrap();
        assert!(log.is_empty(), "the failed build's log went with it");
    }

    #[tokio::test]
    async fn log_lines_are_numbered_and_read_from_an_offset() {
        let (_dir, store, _t) = open_temp();
        let w = store.writer();
        w.write(|tx| {
            tx.begin_template("t", &serde_json::json!({}), None, 1)?;
            tx.append_template_log("t", &["a".into(), "b".into()], 2)?;
            tx.append_template_log("t", &["c".into()], 3)
        })
        .await
        .unwrap();
        let r = store.reader();
        let all = r.read(|tx| tx.template_log("t", 0, 100)).await.unwrap();
        assert_eq!(
            all.iter()
                .map(|l| (l.seq, l.line.as_str()))
                .collect::<Vec<_>>(),
            vec![(0, "a"), (1, "b"), (2, "c")]
        );
        let tail = r.read(|tx| tx.template_log("t", 2, 100)).await.unwrap();
        assert_eq!(tail.len(), 1);
    }
}
