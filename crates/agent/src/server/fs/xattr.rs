//! File metadata as extended attributes: key `k` is the user xattr [`PREFIX`]`k` (the namespace the
//! E2B SDK documents), set from an upload's `X-Metadata-*` headers and reported in
//! `EntryInfo.metadata`.
//!
//! Reading never fails: a filesystem without user xattrs, or an entry that cannot be read, simply has
//! no metadata. Writing goes through the open file descriptor of the upload, so it needs no path
//! permission beyond the one that opened the file.

use super::super::error::ServerError;
use axum::http::HeaderMap;
use sandboxd_envd::files::METADATA_HEADER_PREFIX;
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The xattr namespace of file metadata.
pub const PREFIX: &str = "user.e2b.";
/// Linux's limit on an xattr name.
const MAX_NAME: usize = 255;

/// The metadata of the upload `headers` carry: `X-Metadata-<key>: <value>`, keys lowercased, the first
/// value of a repeated header winning.
pub fn from_headers(headers: &HeaderMap) -> Result<HashMap<String, String>, ServerError> {
    let mut metadata = HashMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER_PREFIX) else {
            continue;
        };
        if key.is_empty() || metadata.contains_key(key) {
            continue;
        }
        if PREFIX.len() + key.len() > MAX_NAME {
            return Err(ServerError::InvalidArgument(format!(
                "metadata key '{key}' is too long"
            )));
        }
        let value = value.to_str().map_err(|_| {
            ServerError::InvalidArgument(format!(
                "metadata value of '{key}' must be printable US-ASCII"
            ))
        })?;
        metadata.insert(key.to_owned(), value.to_owned());
    }
    Ok(metadata)
}

/// Sets `metadata` on the open `file` (other keys it already has are kept).
pub fn write(
    file: &File,
    path: &Path,
    metadata: &HashMap<String, String>,
) -> Result<(), ServerError> {
    for (key, value) in metadata {
        let name = CString::new(format!("{PREFIX}{key}"))
            .map_err(|_| ServerError::InvalidArgument(format!("invalid metadata key '{key}'")))?;
        // SAFETY: a NUL-terminated name and a valid value slice, on an fd we hold open.
        let rc = unsafe {
            libc::fsetxattr(
                file.as_raw_fd(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ENOTSUP) => ServerError::FailedPrecondition(format!(
                    "the filesystem of {} does not support file metadata",
                    path.display()
                )),
                _ => ServerError::io("set metadata on", path.display())(err),
            });
        }
    }
    Ok(())
}

/// The metadata of the entry at `path` (following a symlink to its target).
pub fn read(path: &Path) -> HashMap<String, String> {
    let mut metadata = HashMap::new();
    let Ok(cpath) = CString::new(path.as_os_str().as_bytes()) else {
        return metadata;
    };
    for name in list(&cpath) {
        let Some(key) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if let Some(value) = get(&cpath, &name) {
            metadata.insert(key.to_owned(), String::from_utf8_lossy(&value).into_owned());
        }
    }
    metadata
}

fn list(path: &CString) -> Vec<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: a NUL-terminated path and a buffer of `buf.len()` writable bytes.
        let n = unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            return buf
                .split(|b| *b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect();
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE)
            || buf.len() >= 1 << 20
        {
            return Vec::new();
        }
        let len = buf.len() * 4;
        buf.resize(len, 0);
    }
}

fn get(path: &CString, name: &str) -> Option<Vec<u8>> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: NUL-terminated path and name, a buffer of `buf.len()` writable bytes.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            buf.truncate(n as usize);
            return Some(buf);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE)
            || buf.len() >= 1 << 20
        {
            return None;
        }
        let len = buf.len() * 4;
        buf.resize(len, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn headers_become_lowercase_keys_first_value_wins() {
        let mut h = HeaderMap::new();
        h.append("X-Metadata-Author", HeaderValue::from_static("first"));
        h.append("x-metadata-author", HeaderValue::from_static("second"));
        h.insert("X-Metadata-Purpose", HeaderValue::from_static("upload"));
        h.insert("X-Metadata-", HeaderValue::from_static("ignored"));
        h.insert("Content-Type", HeaderValue::from_static("x"));
        let m = from_headers(&h).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m["author"], "first");
        assert_eq!(m["purpose"], "upload");
        let mut long = HeaderMap::new();
        let name = format!("x-metadata-{}", "k".repeat(300));
        long.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_static("v"),
        );
        assert!(from_headers(&long).is_err());
    }

    #[test]
    fn metadata_round_trips_through_xattrs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        let m = HashMap::from([("author".to_string(), "mish".to_string())]);
        match write(&file, &path, &m) {
            Ok(()) => assert_eq!(read(&path), m),
            Err(ServerError::FailedPrecondition(_)) => eprintln!("skipping: no user xattrs here"),
            Err(e) => panic!("{e}"),
        }
        assert!(read(&dir.path().join("missing")).is_empty());
    }
}
