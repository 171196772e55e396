//! Images, their layers and their tags.
//!
//! Contract (schema in migration 6):
//! - An image is its platform manifest's digest. It is `pulling` from the moment a pull claims it
//!   until [`WriteTx::complete_image`] records its config and layer list and marks it `ready` in one
//!   write; only `ready` images are ever used for a sandbox.
//! - **Nothing in use can be deleted, by foreign key, not by check:** a sandbox references its image
//!   and an image its layers with `ON DELETE RESTRICT`, so [`WriteTx::delete_image`] of an image a
//!   sandbox uses, or the removal of a layer an image stacks, fails with [`StoreError::InUse`]
//!   (`tests::an_image_in_use_cannot_be_deleted`, `tests::a_layer_in_use_is_never_pruned`).
//! - A tag (a canonical reference) names one image at a time; re-tagging moves it (an upsert).

use rusqlite::{params, OptionalExtension, Row};

use crate::error::{is_restricted_delete, Result, StoreError};
use crate::{ReadTx, UnixMillis, WriteTx};

/// Where an image is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageState {
    /// A pull is fetching its layers.
    Pulling,
    /// Every layer is unpacked; sandboxes may use it.
    Ready,
}

impl ImageState {
    /// The state's name in the schema and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageState::Pulling => "pulling",
            ImageState::Ready => "ready",
        }
    }

    fn parse(text: &str) -> rusqlite::Result<Self> {
        match text {
            "pulling" => Ok(ImageState::Pulling),
            "ready" => Ok(ImageState::Ready),
            other => Err(rusqlite::Error::FromSqlConversionFailure(
                1,
                rusqlite::types::Type::Text,
                format!("unknown image state {other:?}").into(),
            )),
        }
    }
}

/// An image as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRecord {
    /// Manifest digest.
    pub digest: String,
    pub state: ImageState,
    /// The canonical reference it was first pulled as.
    pub reference: String,
    /// Its run settings (JSON object, opaque to the store).
    pub config: serde_json::Value,
    /// Compressed bytes of its layers.
    pub size: u64,
    /// While pulling: compressed bytes fetched so far.
    pub pulled_bytes: u64,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub last_used_at: UnixMillis,
    /// Its layers' digests, lowest first (empty while pulling).
    pub layers: Vec<String>,
    /// The references that name it now.
    pub tags: Vec<String>,
}

/// A layer as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerRecord {
    /// Digest of its compressed blob.
    pub digest: String,
    pub media_type: String,
    /// Compressed size.
    pub size: u64,
    /// What its files take on disk, unpacked.
    pub unpacked_bytes: u64,
}

const IMAGE_COLUMNS: &str =
    "digest, state, reference, config, size, pulled_bytes, created_at, updated_at, last_used_at";

fn image_row(row: &Row<'_>) -> rusqlite::Result<ImageRecord> {
    let state: String = row.get(1)?;
    let config: String = row.get(3)?;
    Ok(ImageRecord {
        digest: row.get(0)?,
        state: ImageState::parse(&state)?,
        reference: row.get(2)?,
        config: serde_json::from_str(&config).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, Box::new(e))
        })?,
        size: row.get::<_, i64>(4)?.max(0) as u64,
        pulled_bytes: row.get::<_, i64>(5)?.max(0) as u64,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        last_used_at: row.get(8)?,
        layers: Vec::new(),
        tags: Vec::new(),
    })
}

fn fill(conn: &rusqlite::Connection, mut image: ImageRecord) -> Result<ImageRecord> {
    image.layers = conn
        .prepare_cached(
            "SELECT layer_digest FROM image_layers WHERE image_digest = ?1 ORDER BY position",
        )?
        .query_map([&image.digest], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    image.tags = conn
        .prepare_cached(
            "SELECT reference FROM image_tags WHERE image_digest = ?1 ORDER BY reference",
        )?
        .query_map([&image.digest], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(image)
}

fn get_image(conn: &rusqlite::Connection, digest: &str) -> Result<Option<ImageRecord>> {
    let sql = format!("SELECT {IMAGE_COLUMNS} FROM images WHERE digest = ?1");
    let found = conn
        .prepare_cached(&sql)?
        .query_row([digest], image_row)
        .optional()?;
    found.map(|i| fill(conn, i)).transpose()
}

fn image_by_tag(conn: &rusqlite::Connection, reference: &str) -> Result<Option<ImageRecord>> {
    let digest: Option<String> = conn
        .prepare_cached("SELECT image_digest FROM image_tags WHERE reference = ?1")?
        .query_row([reference], |r| r.get(0))
        .optional()?;
    match digest {
        Some(d) => get_image(conn, &d),
        None => Ok(None),
    }
}

impl ReadTx<'_> {
    /// The image with manifest digest `digest`.
    pub fn get_image(&self, digest: &str) -> Result<Option<ImageRecord>> {
        get_image(self.conn(), digest)
    }

    /// The image the tag `reference` (canonical) names.
    pub fn image_by_tag(&self, reference: &str) -> Result<Option<ImageRecord>> {
        image_by_tag(self.conn(), reference)
    }

    /// Every image, newest first.
    pub fn list_images(&self) -> Result<Vec<ImageRecord>> {
        let sql = format!("SELECT {IMAGE_COLUMNS} FROM images ORDER BY created_at DESC, digest");
        let rows: Vec<ImageRecord> = self
            .conn()
            .prepare_cached(&sql)?
            .query_map([], image_row)?
            .collect::<rusqlite::Result<_>>()?;
        rows.into_iter().map(|i| fill(self.conn(), i)).collect()
    }

    /// Every layer, with what it takes on disk.
    pub fn list_layers(&self) -> Result<Vec<LayerRecord>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT digest, media_type, size, unpacked_bytes FROM layers ORDER BY digest",
            )?
            .query_map([], layer_row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Ready images no sandbox and no template uses, least recently used first: what a cache
    /// past its size may drop.
    pub fn evictable_images(&self) -> Result<Vec<String>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT digest FROM images i
                 WHERE state = 'ready'
                   AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.image_digest = i.digest)
                   AND NOT EXISTS (SELECT 1 FROM templates t WHERE t.image_digest = i.digest)
                 ORDER BY last_used_at, digest",
            )?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// How many sandboxes use image `digest`.
    pub fn image_users(&self, digest: &str) -> Result<u64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT count(*) FROM sandboxes WHERE image_digest = ?1")?
            .query_row([digest], |r| r.get::<_, i64>(0))?
            .max(0) as u64)
    }
}

fn layer_row(r: &Row<'_>) -> rusqlite::Result<LayerRecord> {
    Ok(LayerRecord {
        digest: r.get(0)?,
        media_type: r.get(1)?,
        size: r.get::<_, i64>(2)?.max(0) as u64,
        unpacked_bytes: r.get::<_, i64>(3)?.max(0) as u64,
    })
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl WriteTx<'_> {
    /// The image with manifest digest `digest`, read inside this write.
    pub fn get_image(&self, digest: &str) -> Result<Option<ImageRecord>> {
        get_image(self.conn(), digest)
    }

    /// Records that a pull of `digest` (as `reference`) began: a `pulling` row unless the image is
    /// there already. Returns the row as it is now.
    pub fn begin_image_pull(
        &mut self,
        digest: &str,
        reference: &str,
        size: u64,
        now: UnixMillis,
    ) -> Result<ImageRecord> {
        self.conn()
            .prepare_cached(
                "INSERT INTO images (digest, state, reference, size, created_at, updated_at, last_used_at)
                 VALUES (?1, 'pulling', ?2, ?3, ?4, ?4, ?4)
                 ON CONFLICT (digest) DO NOTHING",
            )?
            .execute(params![digest, reference, clamp(size), now])?;
        get_image(self.conn(), digest)?.ok_or_else(|| StoreError::NotFound {
            kind: "image",
            key: digest.to_string(),
        })
    }

    /// Records a pulling image's progress (which also shows its pull is alive).
    pub fn set_image_progress(
        &mut self,
        digest: &str,
        pulled_bytes: u64,
        now: UnixMillis,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE images SET pulled_bytes = ?2, updated_at = ?3
                 WHERE digest = ?1 AND state = 'pulling'",
            )?
            .execute(params![digest, clamp(pulled_bytes), now])?;
        Ok(n == 1)
    }

    /// Completes a pull: records `layers` (lowest first; already known ones are kept), the image's
    /// config and layer list, marks it `ready` and points `tag` at it. The image's row must exist.
    pub fn complete_image(
        &mut self,
        digest: &str,
        config: &serde_json::Value,
        layers: &[LayerRecord],
        tag: Option<&str>,
        now: UnixMillis,
    ) -> Result<()> {
        for layer in layers {
            self.conn()
                .prepare_cached(
                    "INSERT INTO layers (digest, media_type, size, unpacked_bytes, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (digest) DO UPDATE SET unpacked_bytes = max(unpacked_bytes, excluded.unpacked_bytes)",
                )?
                .execute(params![
                    layer.digest,
                    layer.media_type,
                    clamp(layer.size),
                    clamp(layer.unpacked_bytes),
                    now
                ])?;
        }
        self.conn()
            .prepare_cached("DELETE FROM image_layers WHERE image_digest = ?1")?
            .execute([digest])?;
        for (position, layer) in layers.iter().enumerate() {
            self.conn()
                .prepare_cached(
                    "INSERT INTO image_layers (image_digest, position, layer_digest) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![digest, position as i64, layer.digest])?;
        }
        let size: u64 = layers.iter().map(|l| l.size).sum();
        let updated = self
            .conn()
            .prepare_cached(
                "UPDATE images SET state = 'ready', config = ?2, size = ?3, pulled_bytes = ?3,
                                   updated_at = ?4, last_used_at = ?4
                 WHERE digest = ?1",
            )?
            .execute(params![digest, config.to_string(), clamp(size), now])?;
        if updated == 0 {
            return Err(StoreError::NotFound {
                kind: "image",
                key: digest.to_string(),
            });
        }
        if let Some(tag) = tag {
            self.tag_image(tag, digest, now)?;
        }
        Ok(())
    }

    /// Points the tag `reference` at image `digest` (moving it from another image).
    pub fn tag_image(&mut self, reference: &str, digest: &str, now: UnixMillis) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO image_tags (reference, image_digest, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (reference) DO UPDATE SET image_digest = excluded.image_digest,
                                                       updated_at = excluded.updated_at",
            )?
            .execute(params![reference, digest, now])?;
        Ok(())
    }

    /// Marks image `digest` used now (the layer cache evicts the least recently used first).
    pub fn touch_image(&mut self, digest: &str, now: UnixMillis) -> Result<()> {
        self.conn()
            .prepare_cached("UPDATE images SET last_used_at = ?2 WHERE digest = ?1")?
            .execute(params![digest, now])?;
        Ok(())
    }

    /// The records of `digests`, in that order (a digest the store does not know is an error).
    pub fn list_layer_records(&self, digests: &[String]) -> Result<Vec<LayerRecord>> {
        digests
            .iter()
            .map(|d| {
                self.conn()
                    .prepare_cached(
                        "SELECT digest, media_type, size, unpacked_bytes FROM layers WHERE digest = ?1",
                    )?
                    .query_row([d], layer_row)
                    .optional()?
                    .ok_or_else(|| StoreError::NotFound {
                        kind: "layer",
                        key: d.clone(),
                    })
            })
            .collect()
    }

    /// Deletes image `digest` with its tags and layer list (its layers stay, for [`Self::prune_layers`]).
    /// `false` if there was none; [`StoreError::InUse`] while a sandbox uses it.
    pub fn delete_image(&mut self, digest: &str) -> Result<bool> {
        let deleted = self
            .conn()
            .prepare_cached("DELETE FROM images WHERE digest = ?1")?
            .execute([digest]);
        match deleted {
            Ok(n) => Ok(n == 1),
            Err(e) if is_restricted_delete(&e) => Err(StoreError::InUse {
                kind: "image",
                key: digest.to_string(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a `pulling` row (a pull that failed or was abandoned); a `ready` image stays.
    pub fn abandon_image_pull(&mut self, digest: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM images WHERE digest = ?1 AND state = 'pulling'")?
            .execute([digest])?;
        Ok(n == 1)
    }

    /// Deletes the layer rows no image stacks and returns them: their directories may go. A layer an
    /// image uses is never returned (the foreign key refuses its deletion).
    pub fn prune_layers(&mut self) -> Result<Vec<LayerRecord>> {
        let unused: Vec<LayerRecord> = self
            .conn()
            .prepare_cached(
                "SELECT digest, media_type, size, unpacked_bytes FROM layers l
                 WHERE NOT EXISTS (SELECT 1 FROM image_layers il WHERE il.layer_digest = l.digest)
                 ORDER BY digest",
            )?
            .query_map([], layer_row)?
            .collect::<rusqlite::Result<_>>()?;
        for layer in &unused {
            self.delete_layer(&layer.digest)?;
        }
        Ok(unused)
    }

    /// Deletes the row of layer `digest`; [`StoreError::InUse`] while an image stacks it.
    pub fn delete_layer(&mut self, digest: &str) -> Result<bool> {
        let deleted = self
            .conn()
            .prepare_cached("DELETE FROM layers WHERE digest = ?1")?
            .execute([digest]);
        match deleted {
            Ok(n) => Ok(n == 1),
            Err(e) if is_restricted_delete(&e) => Err(StoreError::InUse {
                kind: "layer",
                key: digest.to_string(),
            }),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{new_sandbox, open_temp};
    use crate::Store;

    struct TestStore {
        _dir: tempfile::TempDir,
        store: Store,
        _thread: crate::WriterThread,
    }

    impl TestStore {
        async fn new() -> Self {
            let (_dir, store, _thread) = open_temp();
            Self {
                _dir,
                store,
                _thread,
            }
        }
    }

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn layer(c: char) -> LayerRecord {
        LayerRecord {
            digest: digest(c),
            media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            size: 10,
            unpacked_bytes: 30,
        }
    }

    async fn ready_image(t: &TestStore, image: char, layers: Vec<LayerRecord>, tag: &str) {
        let tag = tag.to_string();
        t.store
            .writer()
            .write(move |tx| {
                let d = digest(image);
                let row = tx.begin_image_pull(&d, &tag, 20, 1)?;
                assert_eq!(row.state, ImageState::Pulling);
                tx.complete_image(
                    &d,
                    &serde_json::json!({"env": ["A=1"]}),
                    &layers,
                    Some(&tag),
                    2,
                )
            })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_pull_becomes_a_ready_image_with_its_layers_and_tag() {
        let t = TestStore::new().await;
        ready_image(
            &t,
            'a',
            vec![layer('1'), layer('2')],
            "docker.io/library/x:1",
        )
        .await;
        let got = t
            .store
            .reader()
            .read(|tx| tx.image_by_tag("docker.io/library/x:1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.state, ImageState::Ready);
        assert_eq!(got.layers, vec![digest('1'), digest('2')]);
        assert_eq!(got.tags, vec!["docker.io/library/x:1".to_string()]);
        assert_eq!(got.size, 20);
        assert_eq!(got.config["env"][0], "A=1");
        // A second begin of a ready image changes nothing.
        let again = t
            .store
            .writer()
            .write(|tx| tx.begin_image_pull(&digest('a'), "other", 0, 5))
            .await
            .unwrap();
        assert_eq!(again.state, ImageState::Ready);
        assert_eq!(again.reference, "docker.io/library/x:1");
    }

    /// Invariant: an image a sandbox runs on cannot be deleted (`sandboxes.image_digest` → `images`,
    /// `ON DELETE RESTRICT`); once the sandbox is gone it can.
    #[tokio::test]
    async fn an_image_in_use_cannot_be_deleted() {
        let t = TestStore::new().await;
        ready_image(&t, 'a', vec![layer('1')], "r:1").await;
        t.store
            .writer()
            .write(|tx| {
                let mut s = new_sandbox("sb1", "", 1);
                s.image = Some(digest('a'));
                tx.insert_sandbox(s)
            })
            .await
            .unwrap();
        let refused = t
            .store
            .writer()
            .write(|tx| tx.delete_image(&digest('a')))
            .await;
        assert!(
            matches!(refused, Err(StoreError::InUse { kind: "image", .. })),
            "{refused:?}"
        );
        let deleted = t
            .store
            .writer()
            .write(|tx| {
                tx.delete_sandbox("sb1")?;
                tx.delete_image(&digest('a'))
            })
            .await
            .unwrap();
        assert!(deleted);
        let tags = t
            .store
            .reader()
            .read(|tx| tx.image_by_tag("r:1"))
            .await
            .unwrap();
        assert!(tags.is_none(), "the image's tags go with it");
    }

    /// Invariant: a layer an image stacks is never pruned (`image_layers.layer_digest` → `layers`,
    /// `ON DELETE RESTRICT`); a layer two images share stays until both are gone.
    #[tokio::test]
    async fn a_layer_in_use_is_never_pruned() {
        let t = TestStore::new().await;
        ready_image(&t, 'a', vec![layer('1'), layer('2')], "r:a").await;
        ready_image(&t, 'b', vec![layer('2'), layer('3')], "r:b").await;
        let w = t.store.writer();
        let refused = w.write(|tx| tx.delete_layer(&digest('2'))).await;
        assert!(
            matches!(refused, Err(StoreError::InUse { kind: "layer", .. })),
            "{refused:?}"
        );
        let pruned = w
            .write(|tx| {
                tx.delete_image(&digest('a'))?;
                tx.prune_layers()
            })
            .await
            .unwrap();
        assert_eq!(
            pruned.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
            vec![digest('1')]
        );
        let left = t.store.reader().read(|tx| tx.list_layers()).await.unwrap();
        assert_eq!(left.len(), 2);
    }

    #[tokio::test]
    async fn an_abandoned_pull_goes_and_a_ready_image_stays() {
        let t = TestStore::new().await;
        let w = t.store.writer();
        w.write(|tx| tx.begin_image_pull(&digest('p'), "r:p", 5, 1).map(|_| ()))
            .await
            .unwrap();
        assert!(w
            .write(|tx| tx.set_image_progress(&digest('p'), 3, 2))
            .await
            .unwrap());
        assert!(w
            .write(|tx| tx.abandon_image_pull(&digest('p')))
            .await
            .unwrap());
        ready_image(&t, 'r', vec![layer('1')], "r:r").await;
        assert!(!w
            .write(|tx| tx.abandon_image_pull(&digest('r')))
            .await
            .unwrap());
        assert!(!w
            .write(|tx| tx.set_image_progress(&digest('r'), 3, 2))
            .await
            .unwrap());
        let all = t.store.reader().read(|tx| tx.list_images()).await.unwrap();
        assert_eq!(all.len(), 1);
    }
}
