//! The objects on disk, under the store's root:
//!
//! - `objects/<sha256 of the key>`: an object's bytes, and `….json` beside it, its [`ObjectMeta`];
//! - `uploads/<upload id>/`: a multipart upload (`upload.json`, its key), its parts
//!   (`part-<n>-<etag>`), and once completed `done.json`, what the completion answered, so that a
//!   retried completion answers the same;
//! - `tmp/`: bodies being received, emptied at open.
//!
//! Contract: a body is written to `tmp/` while it is hashed and counted ([`Incoming`]), and only
//! a finished, verified body is renamed into place; the rename of an object and of its metadata
//! happen under one lock, which readers take too, so a reader sees one object or the other, whole.

use crate::{ObjectError, MAX_OBJECT_BYTES, STALE_UPLOAD};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What is known of an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    /// Its entity tag, unquoted.
    pub etag: String,
    /// When it was written, Unix milliseconds.
    pub modified_ms: u64,
}

impl ObjectMeta {
    /// When it was written.
    pub fn modified(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_millis(self.modified_ms)
    }
}

#[derive(Serialize, Deserialize)]
struct Upload {
    key: String,
}

#[derive(Serialize, Deserialize)]
struct Done {
    parts: Vec<(u32, String)>,
    meta: ObjectMeta,
}

/// The objects of a store.
pub struct Blobs {
    root: PathBuf,
    commit: tokio::sync::Mutex<()>,
    /// The largest object, and the most an unfinished upload's parts hold together.
    max_object: u64,
}

/// A file in `tmp/`, removed when dropped unless renamed away first.
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A body being received into `tmp/`.
pub struct Incoming {
    path: TempPath,
    file: tokio::fs::File,
    hash: Sha256,
    size: u64,
    limit: u64,
}

/// A body received whole.
pub struct Received {
    path: TempPath,
    /// Its length.
    pub size: u64,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
}

impl Received {
    fn etag(&self) -> String {
        self.sha256[..32].to_string()
    }
}

impl Incoming {
    /// Appends `bytes`; refused past the object limit.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), ObjectError> {
        self.size += bytes.len() as u64;
        if self.size > self.limit {
            return Err(ObjectError::EntityTooLarge { max: self.limit });
        }
        self.hash.update(bytes);
        self.file
            .write_all(bytes)
            .await
            .map_err(ObjectError::io("writing a received body"))
    }

    /// The whole body.
    pub async fn finish(mut self) -> Result<Received, ObjectError> {
        self.file
            .flush()
            .await
            .map_err(ObjectError::io("writing a received body"))?;
        Ok(Received {
            path: self.path,
            size: self.size,
            sha256: hex::encode(self.hash.finalize()),
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn random_name() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Upload ids are this store's own: 32 lowercase hex digits.
fn check_upload_id(id: &str) -> Result<(), ObjectError> {
    if id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(ObjectError::NoSuchUpload(id.to_string()))
    }
}

/// Keys are 1 to 1024 bytes of UTF-8 without control characters.
pub fn check_key(key: &str) -> Result<(), ObjectError> {
    if key.is_empty() || key.len() > 1024 || key.chars().any(char::is_control) {
        return Err(ObjectError::InvalidRequest(format!(
            "invalid key {key:?}: 1 to 1024 bytes without control characters"
        )));
    }
    Ok(())
}

async fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = tokio::fs::read(path).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

impl Blobs {
    /// Opens (or makes) the objects under `root`.
    pub fn open(root: &Path) -> Result<Blobs, ObjectError> {
        for dir in ["objects", "uploads", "tmp"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path)
                .map_err(ObjectError::io(format!("making {}", path.display())))?;
        }
        let blobs = Blobs {
            root: root.to_path_buf(),
            commit: tokio::sync::Mutex::new(()),
            max_object: MAX_OBJECT_BYTES,
        };
        if let Ok(entries) = std::fs::read_dir(root.join("tmp")) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        blobs.remove_stale_uploads(SystemTime::now());
        Ok(blobs)
    }

    fn remove_stale_uploads(&self, now: SystemTime) {
        let Ok(entries) = std::fs::read_dir(self.root.join("uploads")) else {
            return;
        };
        for entry in entries.flatten() {
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > STALE_UPLOAD));
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    fn object_path(&self, key: &str) -> PathBuf {
        let name = hex::encode(Sha256::digest(key.as_bytes()));
        self.root.join("objects").join(name)
    }

    fn meta_path(&self, key: &str) -> PathBuf {
        self.object_path(key).with_extension("json")
    }

    fn upload_dir(&self, id: &str) -> Result<PathBuf, ObjectError> {
        check_upload_id(id)?;
        Ok(self.root.join("uploads").join(id))
    }

    /// A new body to receive, of at most [`MAX_OBJECT_BYTES`].
    pub async fn incoming(&self) -> Result<Incoming, ObjectError> {
        let path = self.root.join("tmp").join(random_name());
        let file = tokio::fs::File::create(&path)
            .await
            .map_err(ObjectError::io("making a file for a received body"))?;
        Ok(Incoming {
            path: TempPath(path),
            file,
            hash: Sha256::new(),
            size: 0,
            limit: self.max_object,
        })
    }

    /// Object `key`'s metadata.
    pub async fn head(&self, key: &str) -> Result<ObjectMeta, ObjectError> {
        let _held = self.commit.lock().await;
        self.meta_unlocked(key).await
    }

    async fn meta_unlocked(&self, key: &str) -> Result<ObjectMeta, ObjectError> {
        read_json::<ObjectMeta>(&self.meta_path(key))
            .await
            .filter(|m| m.key == key)
            .ok_or_else(|| ObjectError::NoSuchKey(key.to_string()))
    }

    /// Object `key`, open for reading.
    pub async fn open_object(
        &self,
        key: &str,
    ) -> Result<(ObjectMeta, tokio::fs::File), ObjectError> {
        let _held = self.commit.lock().await;
        let meta = self.meta_unlocked(key).await?;
        let file = tokio::fs::File::open(self.object_path(key))
            .await
            .map_err(ObjectError::io(format!("opening object {key:?}")))?;
        Ok((meta, file))
    }

    /// Object `key`'s bytes.
    pub async fn read(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        let (meta, mut file) = self.open_object(key).await?;
        let mut bytes = Vec::with_capacity(meta.size as usize);
        file.read_to_end(&mut bytes)
            .await
            .map_err(ObjectError::io(format!("reading object {key:?}")))?;
        Ok(bytes)
    }

    /// Makes `body` object `key` (replacing the one there is).
    pub async fn put(&self, key: &str, body: Received) -> Result<ObjectMeta, ObjectError> {
        let etag = body.etag();
        self.install(key, body, etag).await
    }

    async fn install(
        &self,
        key: &str,
        body: Received,
        etag: String,
    ) -> Result<ObjectMeta, ObjectError> {
        check_key(key)?;
        let meta = ObjectMeta {
            key: key.to_string(),
            size: body.size,
            etag,
            modified_ms: now_ms(),
        };
        let meta_tmp = self.root.join("tmp").join(random_name());
        let json = serde_json::to_vec(&meta).expect("metadata serialises");
        tokio::fs::write(&meta_tmp, json)
            .await
            .map_err(ObjectError::io("writing an object's metadata"))?;
        let _held = self.commit.lock().await;
        let installed = async {
            tokio::fs::rename(&body.path.0, self.object_path(key)).await?;
            tokio::fs::rename(&meta_tmp, self.meta_path(key)).await
        }
        .await;
        if installed.is_err() {
            let _ = tokio::fs::remove_file(&meta_tmp).await;
        }
        installed.map_err(ObjectError::io(format!("installing object {key:?}")))?;
        Ok(meta)
    }

    /// Deletes object `key` (none: nothing to do, as S3 answers).
    pub async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let _held = self.commit.lock().await;
        if self.meta_unlocked(key).await.is_err() {
            return Ok(());
        }
        for path in [self.meta_path(key), self.object_path(key)] {
            match tokio::fs::remove_file(&path).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ObjectError::io(format!("deleting object {key:?}"))(e)),
            }
        }
        Ok(())
    }

    /// The objects whose keys begin with `prefix`, by key, at most `max`; and whether more match.
    pub async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<ObjectMeta>, bool), ObjectError> {
        let dir = self.root.join("objects");
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(ObjectError::io("listing objects"))?;
        let mut found = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(ObjectError::io("listing objects"))?
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                if let Some(meta) = read_json::<ObjectMeta>(&path).await {
                    let later = after.is_none_or(|a| meta.key.as_str() > a);
                    if meta.key.starts_with(prefix) && later {
                        found.push(meta);
                    }
                }
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        let more = found.len() > max;
        found.truncate(max);
        Ok((found, more))
    }

    /// Begins a multipart upload of `key`: its id.
    pub async fn create_upload(&self, key: &str) -> Result<String, ObjectError> {
        check_key(key)?;
        let id = random_name();
        let dir = self.upload_dir(&id)?;
        tokio::fs::create_dir(&dir)
            .await
            .map_err(ObjectError::io("making a multipart upload"))?;
        let json = serde_json::to_vec(&Upload { key: key.into() }).expect("serialises");
        tokio::fs::write(dir.join("upload.json"), json)
            .await
            .map_err(ObjectError::io("making a multipart upload"))?;
        Ok(id)
    }

    /// Upload `id` of `key`'s directory, when there is such an upload.
    async fn upload(&self, id: &str, key: &str) -> Result<PathBuf, ObjectError> {
        let dir = self.upload_dir(id)?;
        match read_json::<Upload>(&dir.join("upload.json")).await {
            Some(upload) if upload.key == key => Ok(dir),
            _ => Err(ObjectError::NoSuchUpload(id.to_string())),
        }
    }

    /// Part `number` (1 to 10000) of upload `id`: its etag.
    pub async fn put_part(
        &self,
        id: &str,
        key: &str,
        number: u32,
        body: Received,
    ) -> Result<String, ObjectError> {
        if !(1..=10_000).contains(&number) {
            return Err(ObjectError::InvalidRequest(format!(
                "part number {number}: parts are numbered 1 to 10000"
            )));
        }
        let dir = self.upload(id, key).await?;
        if dir.join("done.json").exists() {
            return Err(ObjectError::NoSuchUpload(id.to_string()));
        }
        let etag = body.etag();
        let name = format!("part-{number}-{etag}");
        // A part uploaded again replaces the one before (as S3 does); the parts together stay
        // within one object's size.
        let mut held = body.size;
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(ObjectError::io("reading a multipart upload"))?;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = file.strip_prefix("part-") else {
                continue;
            };
            if rest.split('-').next() == Some(number.to_string().as_str()) {
                if file != name {
                    let _ = tokio::fs::remove_file(entry.path()).await;
                }
            } else {
                held += entry.metadata().await.map(|m| m.len()).unwrap_or(0);
            }
        }
        if held > self.max_object {
            return Err(ObjectError::EntityTooLarge {
                max: self.max_object,
            });
        }
        tokio::fs::rename(&body.path.0, dir.join(name))
            .await
            .map_err(ObjectError::io("keeping an uploaded part"))?;
        Ok(etag)
    }

    /// Completes upload `id` of `key` from `parts` (number, etag), ascending: the object. A
    /// repeated completion with the same parts answers the same object.
    pub async fn complete(
        &self,
        id: &str,
        key: &str,
        parts: Vec<(u32, String)>,
    ) -> Result<ObjectMeta, ObjectError> {
        let dir = self.upload(id, key).await?;
        if let Some(done) = read_json::<Done>(&dir.join("done.json")).await {
            return if done.parts == parts {
                Ok(done.meta)
            } else {
                Err(ObjectError::NoSuchUpload(id.to_string()))
            };
        }
        if parts.is_empty() {
            return Err(ObjectError::InvalidRequest(
                "a completion names at least one part".into(),
            ));
        }
        if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(ObjectError::InvalidRequest(
                "the parts must be listed in ascending order (InvalidPartOrder)".into(),
            ));
        }
        let mut whole = self.incoming().await?;
        let mut tags = Sha256::new();
        for (number, etag) in &parts {
            let path = dir.join(format!("part-{number}-{etag}"));
            let bytes = tokio::fs::read(&path).await.map_err(|_| {
                ObjectError::InvalidPart(format!(
                    "part {number} with ETag {etag:?} was not uploaded"
                ))
            })?;
            whole.write(&bytes).await?;
            tags.update(etag.as_bytes());
        }
        let body = whole.finish().await?;
        let etag = format!("{}-{}", &hex::encode(tags.finalize())[..32], parts.len());
        let meta = self.install(key, body, etag).await?;
        let done = serde_json::to_vec(&Done {
            parts,
            meta: meta.clone(),
        })
        .expect("serialises");
        tokio::fs::write(dir.join("done.json"), done)
            .await
            .map_err(ObjectError::io("recording a completed upload"))?;
        self.remove_parts(&dir).await;
        Ok(meta)
    }

    async fn remove_parts(&self, dir: &Path) {
        if let Ok(mut entries) = tokio::fs::read_dir(dir).await {
            while let Ok(Some(entry)) = entries.next_entry().await {
                if entry.file_name().to_string_lossy().starts_with("part-") {
                    let _ = tokio::fs::remove_file(entry.path()).await;
                }
            }
        }
    }

    /// Abandons upload `id` of `key` and its parts.
    pub async fn abort(&self, id: &str, key: &str) -> Result<(), ObjectError> {
        let dir = self.upload(id, key).await?;
        tokio::fs::remove_dir_all(&dir)
            .await
            .map_err(ObjectError::io("removing a multipart upload"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(blobs: &Blobs, bytes: &[u8]) -> Received {
        let mut incoming = blobs.incoming().await.unwrap();
        incoming.write(bytes).await.unwrap();
        incoming.finish().await.unwrap()
    }

    #[tokio::test]
    async fn objects_are_put_read_listed_and_deleted_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        assert!(matches!(
            blobs.head("a/b").await,
            Err(ObjectError::NoSuchKey(_))
        ));
        let meta = blobs.put("a/b", body(&blobs, b"one").await).await.unwrap();
        assert_eq!(
            (meta.size, blobs.read("a/b").await.unwrap()),
            (3, b"one".to_vec())
        );
        blobs.put("a/c", body(&blobs, b"two!").await).await.unwrap();
        blobs.put("z", body(&blobs, b"").await).await.unwrap();
        // A hostile key names no path: it is only ever hashed.
        blobs
            .put("../../etc/passwd", body(&blobs, b"x").await)
            .await
            .unwrap();
        for entry in std::fs::read_dir(dir.path().join("objects")).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let stem = name.trim_end_matches(".json");
            assert!(
                stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit()),
                "{name}"
            );
        }
        let (listed, more) = blobs.list("a/", None, 10).await.unwrap();
        let keys: Vec<_> = listed.iter().map(|m| m.key.as_str()).collect();
        assert_eq!((keys, more), (vec!["a/b", "a/c"], false));
        let (listed, more) = blobs.list("", None, 1).await.unwrap();
        assert_eq!((listed[0].key.as_str(), more), ("../../etc/passwd", true));
        let (listed, _) = blobs.list("a/", Some("a/b"), 10).await.unwrap();
        assert_eq!(listed.len(), 1);
        blobs.delete("a/b").await.unwrap();
        blobs.delete("a/b").await.unwrap();
        assert!(blobs.head("a/b").await.is_err());
        // Nothing is left in tmp/ once bodies are in place.
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }

    #[tokio::test]
    async fn a_multipart_upload_shows_nothing_until_it_completes_and_completes_once() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let id = blobs.create_upload("ctx.tar").await.unwrap();
        let e1 = blobs
            .put_part(&id, "ctx.tar", 1, body(&blobs, b"hello ").await)
            .await
            .unwrap();
        let e2 = blobs
            .put_part(&id, "ctx.tar", 2, body(&blobs, b"world").await)
            .await
            .unwrap();
        assert!(blobs.head("ctx.tar").await.is_err());
        // Another key, a wrong ETag, a wrong order: refused.
        assert!(blobs
            .put_part(&id, "other", 3, body(&blobs, b"x").await)
            .await
            .is_err());
        let wrong = vec![(1, e1.clone()), (2, "nope".to_string())];
        assert!(matches!(
            blobs.complete(&id, "ctx.tar", wrong).await,
            Err(ObjectError::InvalidPart(_))
        ));
        let backwards = vec![(2, e2.clone()), (1, e1.clone())];
        assert!(blobs.complete(&id, "ctx.tar", backwards).await.is_err());
        let parts = vec![(1, e1), (2, e2)];
        let meta = blobs.complete(&id, "ctx.tar", parts.clone()).await.unwrap();
        assert_eq!(blobs.read("ctx.tar").await.unwrap(), b"hello world");
        assert!(meta.etag.ends_with("-2"));
        // The retried completion answers the same object; the upload takes no more parts.
        assert_eq!(blobs.complete(&id, "ctx.tar", parts).await.unwrap(), meta);
        assert!(blobs
            .put_part(&id, "ctx.tar", 3, body(&blobs, b"x").await)
            .await
            .is_err());
        let aborted = blobs.create_upload("gone").await.unwrap();
        blobs.abort(&aborted, "gone").await.unwrap();
        assert!(blobs.abort(&aborted, "gone").await.is_err());
        assert!(blobs.abort("../../x", "gone").await.is_err());
    }

    #[tokio::test]
    async fn a_part_replaces_its_number_and_the_parts_together_stay_within_an_object() {
        let dir = tempfile::tempdir().unwrap();
        let mut blobs = Blobs::open(dir.path()).unwrap();
        blobs.max_object = 8;
        let id = blobs.create_upload("k").await.unwrap();
        blobs
            .put_part(&id, "k", 1, body(&blobs, b"aaaa").await)
            .await
            .unwrap();
        let again = blobs
            .put_part(&id, "k", 1, body(&blobs, b"bbbb").await)
            .await
            .unwrap();
        let second = blobs
            .put_part(&id, "k", 2, body(&blobs, b"cccc").await)
            .await
            .unwrap();
        assert!(matches!(
            blobs.put_part(&id, "k", 3, body(&blobs, b"d").await).await,
            Err(ObjectError::EntityTooLarge { .. })
        ));
        let meta = blobs
            .complete(&id, "k", vec![(1, again), (2, second)])
            .await
            .unwrap();
        assert_eq!(meta.size, 8);
        assert_eq!(blobs.read("k").await.unwrap(), b"bbbbcccc");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let mut incoming = blobs.incoming().await.unwrap();
        incoming.limit = 4;
        incoming.write(b"1234").await.unwrap();
        assert!(matches!(
            incoming.write(b"5").await,
            Err(ObjectError::EntityTooLarge { .. })
        ));
        drop(incoming);
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }
}
