//! The daemon's id: what its host resources are named after, so two daemons on one host, or one
//! started again on a wiped data dir while the old one's sandboxes still run, never meet.
//!
//! Contract: the id is made once, at the first start on a data dir, and kept in `<data-dir>/daemon-id`:
//! four lowercase letters. The host ends of the daemon's veth pairs are `sbh<id><slot>`
//! ([`sandboxd_runtime::namespace::ifname_prefix`]). A data dir made before ids existed (it has a
//! store but no id file) keeps the empty id, whose names are the old `sbh<slot>`, so the sandboxes it
//! already runs stay its own.

use anyhow::Context;
use rand::Rng;
use std::path::Path;

/// The file in a data dir that holds its daemon's id.
pub const FILE: &str = "daemon-id";
const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";

/// The id of the daemon on `data_dir` (call before the store is first opened there).
pub fn daemon_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) => {
            let id = id.trim().to_string();
            anyhow::ensure!(
                id.bytes().all(|b| b.is_ascii_lowercase()) && id.len() <= 8,
                "{} holds {id:?}, not a daemon id (lowercase letters)",
                path.display()
            );
            return Ok(id);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let legacy = data_dir.join("sandboxd.db").exists();
    let id = if legacy {
        String::new()
    } else {
        let mut rng = rand::rng();
        (0..4)
            .map(|_| LETTERS[rng.random_range(0..LETTERS.len())] as char)
            .collect()
    };
    std::fs::write(&path, format!("{id}\n"))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_made_once_and_an_old_data_dir_keeps_the_empty_one() {
        let fresh = tempfile::tempdir().unwrap();
        let id = daemon_id(fresh.path()).unwrap();
        assert_eq!(id.len(), 4);
        assert!(id.bytes().all(|b| b.is_ascii_lowercase()), "{id}");
        assert_eq!(daemon_id(fresh.path()).unwrap(), id, "kept across starts");

        let old = tempfile::tempdir().unwrap();
        std::fs::write(old.path().join("sandboxd.db"), b"").unwrap();
        assert_eq!(daemon_id(old.path()).unwrap(), "");
        assert_eq!(daemon_id(old.path()).unwrap(), "");

        std::fs::write(fresh.path().join(FILE), "../x\n").unwrap();
        assert!(daemon_id(fresh.path()).is_err());
    }
}
