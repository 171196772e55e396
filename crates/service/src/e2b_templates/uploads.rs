//! Uploads of `Template.build`'s files: URLs this daemon signed, content-addressed files written
//! whole or not at all, each checked to be a tar or a tar.gz (see the module contract in
//! [`super`]).

use super::*;

impl Service {
    pub(super) fn e2b_root(&self) -> Result<PathBuf, FileError> {
        self.config()
            .images
            .as_ref()
            .map(|s| s.layers.root().to_path_buf())
            .ok_or(FileError::NoStore)
    }

    pub(super) fn e2b_files_dir(&self) -> Result<PathBuf, FileError> {
        let dir = self.e2b_root()?.join(FILES_DIR);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(dir)
    }

    /// The per-daemon secret upload URLs and build ids are signed with (made on first use).
    pub(super) fn e2b_secret(&self) -> Result<Vec<u8>, FileError> {
        let path = self.e2b_root()?.join(SECRET_FILE);
        if let Ok(secret) = std::fs::read(&path) {
            if secret.len() >= 32 {
                return Ok(secret);
            }
        }
        let secret: [u8; 32] = rand::random();
        use std::os::unix::fs::OpenOptionsExt;
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        match created {
            Ok(mut file) => {
                file.write_all(&secret)
                    .map_err(io(format!("writing {}", path.display())))?;
                Ok(secret.to_vec())
            }
            // Another request made it first.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::read(&path).map_err(io(format!("reading {}", path.display())))
            }
            Err(e) => Err(io(format!("creating {}", path.display()))(e)),
        }
    }

    pub(super) fn e2b_mac(&self, message: &str) -> Result<Vec<u8>, FileError> {
        let secret = self.e2b_secret()?;
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&secret).map_err(|_| FileError::BadSignature)?;
        mac.update(message.as_bytes());
        Ok(mac.finalize().into_bytes().to_vec())
    }

    pub(super) fn e2b_upload_signature(
        &self,
        hash: &str,
        expires: i64,
    ) -> Result<String, FileError> {
        let mac = self.e2b_mac(&format!("e2b-files-v1:{hash}:{expires}"))?;
        Ok(format!("v1_{}", URL_SAFE_NO_PAD.encode(mac)))
    }

    /// Whether a file of `hash` was uploaded.
    pub fn e2b_file_present(&self, hash: &str) -> Result<bool, FileError> {
        if !valid_hash(hash) {
            return Err(FileError::BadHash(hash.into()));
        }
        Ok(self.e2b_files_dir()?.join(hash).is_file())
    }

    /// The path and query of the URL the SDK uploads `hash`'s files to (valid for
    /// [`UPLOAD_URL_TTL_SECS`]).
    pub fn e2b_upload_path(&self, hash: &str) -> Result<String, FileError> {
        if !valid_hash(hash) {
            return Err(FileError::BadHash(hash.into()));
        }
        let expires = now_secs() + UPLOAD_URL_TTL_SECS;
        let signature = self.e2b_upload_signature(hash, expires)?;
        Ok(format!(
            "/e2b/files/{hash}?expires={expires}&signature={signature}"
        ))
    }

    /// Stores an upload of `hash`'s files if `signature` is this daemon's for it and `expires`
    /// has not passed; the file is present only once all of `body` arrived and it is a tar(.gz).
    pub async fn e2b_store_file<S, E>(
        &self,
        hash: &str,
        expires: i64,
        signature: &str,
        body: S,
    ) -> Result<(), FileError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        if !valid_hash(hash) {
            return Err(FileError::BadHash(hash.into()));
        }
        let expected = self.e2b_upload_signature(hash, expires)?;
        if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
            return Err(FileError::BadSignature);
        }
        if expires < now_secs() {
            return Err(FileError::Expired);
        }
        let dir = self.e2b_files_dir()?;
        let tmp = dir.join(format!(".{hash}.{}", crate::sandboxes::random_id("", 8)));
        let written = async {
            let mut file = tokio::fs::File::create(&tmp)
                .await
                .map_err(io(format!("creating {}", tmp.display())))?;
            let mut size = 0u64;
            let mut body = std::pin::pin!(body);
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| FileError::Incomplete(e.to_string()))?;
                size += chunk.len() as u64;
                if size > MAX_UPLOAD_BYTES {
                    return Err(FileError::TooLarge);
                }
                tokio::io::AsyncWriteExt::write_all(&mut file, &chunk)
                    .await
                    .map_err(io(format!("writing {}", tmp.display())))?;
            }
            tokio::io::AsyncWriteExt::flush(&mut file)
                .await
                .map_err(io(format!("writing {}", tmp.display())))?;
            let check = tmp.clone();
            tokio::task::spawn_blocking(move || check_archive(&check))
                .await
                .map_err(|e| FileError::NotATar(e.to_string()))??;
            tokio::fs::rename(&tmp, dir.join(hash))
                .await
                .map_err(io(format!("storing {}", tmp.display())))
        }
        .await;
        if written.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        written
    }
}

/// Checks that the file at `path` is a tar, plain or gzip-compressed (every header readable).
pub(super) fn check_archive(path: &Path) -> Result<(), FileError> {
    let mut archive = open_archive(path)?;
    let entries = archive
        .entries()
        .map_err(|e| FileError::NotATar(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| FileError::NotATar(e.to_string()))?;
        std::io::copy(&mut entry, &mut std::io::sink())
            .map_err(|e| FileError::NotATar(e.to_string()))?;
    }
    Ok(())
}

pub(super) fn open_archive(path: &Path) -> Result<tar::Archive<Box<dyn Read>>, FileError> {
    let mut file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut magic = [0u8; 2];
    let n = file
        .read(&mut magic)
        .map_err(io(format!("reading {}", path.display())))?;
    let file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let reader: Box<dyn Read> = if n == 2 && magic == [0x1f, 0x8b] {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(tar::Archive::new(reader))
}
