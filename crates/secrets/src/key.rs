//! The daemon's secrets key: 32 bytes every secret value is sealed with at rest.
//!
//! Contract: the key lives in one file, mode 0600, owned by the daemon's user: 64 hexadecimal
//! characters (a trailing newline allowed), or 32 raw bytes. [`SecretKey::load_or_create`] makes
//! it from the system's random source when it is missing (written whole and synced under a name of
//! its own, then linked into place only if the name is free, so two daemons starting at once end
//! with one key and no reader sees half of one: `tests::daemons_starting_at_once_end_with_one_key`);
//! [`SecretKey::load`] reads a key the operator provides. A key file others may read, of the
//! wrong size or of anything but hex or raw bytes is refused, never used. The key's bytes are
//! wiped from memory when the last handle goes, and `Debug` shows none of them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// Length of the key in bytes.
pub const KEY_BYTES: usize = 32;

/// A secrets key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// cannot read the secrets key file {path}
    #[error("cannot read the secrets key file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// cannot create the secrets key file {path}
    #[error("cannot create the secrets key file {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// the secrets key file {path} may be read by others (mode {mode:o}); `chmod 600` it
    #[error("the secrets key file {path} may be read by others (mode {mode:o}); `chmod 600` it")]
    Exposed { path: PathBuf, mode: u32 },
    /// the secrets key file {path} holds neither 64 hexadecimal characters nor 32 bytes
    #[error("the secrets key file {path} holds neither 64 hexadecimal characters nor 32 bytes")]
    Malformed { path: PathBuf },
    /// the system's random source failed
    #[error("the system's random source failed")]
    Random,
}

/// The daemon's secrets key.
#[derive(Clone)]
pub struct SecretKey {
    bytes: std::sync::Arc<Zeroizing<[u8; KEY_BYTES]>>,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// The key in `path`, made there first when the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyError> {
        match Self::load(path) {
            Err(KeyError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            }
            loaded => return loaded,
        }
        let key = Self::random()?;
        let create = |source| KeyError::Create {
            path: path.to_path_buf(),
            source,
        };
        // Written whole under a name of its own, then linked into place, which fails when the
        // name is taken: a reader never sees a half-written key, and of daemons starting at once
        // exactly one key wins.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let staged = path.with_extension(format!("new.{}.{nanos}", std::process::id()));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&staged)?;
            file.write_all(Zeroizing::new(to_hex(&key.bytes[..])).as_bytes())?;
            file.sync_all()
        })();
        let linked = written.and_then(|()| std::fs::hard_link(&staged, path));
        let _ = std::fs::remove_file(&staged);
        match linked {
            Ok(()) => {}
            // Another daemon made it first: its key is the key.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Self::load(path),
            Err(e) => return Err(create(e)),
        }
        if let Some(dir) = path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(create)?;
        }
        Ok(key)
    }

    /// The key in `path`, which must exist.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let read = |source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(read)?;
        let mode = file.metadata().map_err(read)?.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        let mut content = Zeroizing::new(Vec::new());
        file.take(4096).read_to_end(&mut content).map_err(read)?;
        Self::parse(&content).ok_or_else(|| KeyError::Malformed {
            path: path.to_path_buf(),
        })
    }

    /// A key from the system's random source, kept nowhere (for tests and one-off use).
    pub fn random() -> Result<Self, KeyError> {
        use ring::rand::SecureRandom;
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        ring::rand::SystemRandom::new()
            .fill(&mut bytes[..])
            .map_err(|_| KeyError::Random)?;
        Ok(Self {
            bytes: std::sync::Arc::new(bytes),
        })
    }

    fn parse(content: &[u8]) -> Option<Self> {
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        let text = content.strip_suffix(b"\n").unwrap_or(content);
        if text.len() == 2 * KEY_BYTES {
            for (i, pair) in text.chunks(2).enumerate() {
                bytes[i] = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
            }
        } else if content.len() == KEY_BYTES {
            bytes.copy_from_slice(content);
        } else {
            return None;
        }
        Some(Self {
            bytes: std::sync::Arc::new(bytes),
        })
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.bytes
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + 1);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_missing_key_is_made_once_private_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        let made = SecretKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SecretKey::load_or_create(&path).unwrap();
        assert_eq!(made.bytes(), again.bytes());
        assert_eq!(SecretKey::load(&path).unwrap().bytes(), made.bytes());
    }

    #[test]
    fn daemons_starting_at_once_end_with_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        let start = std::sync::Arc::new(std::sync::Barrier::new(16));
        let keys: Vec<[u8; KEY_BYTES]> = (0..16)
            .map(|_| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    *SecretKey::load_or_create(&path).unwrap().bytes()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(keys.iter().all(|k| k == &keys[0]), "two keys were made");
        assert_eq!(SecretKey::load(&path).unwrap().bytes(), &keys[0]);
    }

    #[test]
    fn a_key_others_may_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "00".repeat(32)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            SecretKey::load(&path),
            Err(KeyError::Exposed { mode: 0o640, .. })
        ));
    }

    #[test]
    fn hex_and_raw_keys_are_read_and_anything_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let write = |content: &[u8]| {
            std::fs::write(&path, content).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        write(format!("{}\n", "Ab".repeat(32)).as_bytes());
        assert_eq!(SecretKey::load(&path).unwrap().bytes(), &[0xab; 32]);
        write(&[7u8; 32]);
        assert_eq!(SecretKey::load(&path).unwrap().bytes(), &[7; 32]);
        for bad in [
            &b"short"[..],
            &"zz".repeat(32).into_bytes()[..],
            &[1u8; 33][..],
        ] {
            write(bad);
            assert!(matches!(
                SecretKey::load(&path),
                Err(KeyError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn debug_shows_no_key_material() {
        let key = SecretKey::random().unwrap();
        assert_eq!(format!("{key:?}"), "SecretKey(..)");
    }
}
