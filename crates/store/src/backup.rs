//! Copies of the store for backups, taken while the daemon serves.
//!
//! Contract: [`snapshot`] writes, with `VACUUM INTO` on a read-only connection of its own, one
//! transaction-consistent copy of the database as of one moment: every commit the writer
//! acknowledged before it began is in it, none after; the writer is never blocked (WAL readers do
//! not block writers). [`inspect`] opens a copy read-only and says whether this build can open it
//! (its schema version is not newer than [`crate::migrations::latest_version`]) and whether SQLite
//! finds it whole.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Result, StoreError};
use crate::migrations::{current_version, latest_version};
use crate::open::lifecycle_lock;

/// Writes a consistent copy of the database at `db` to `to` (which must not exist).
pub fn snapshot(db: &Path, to: &Path) -> Result<()> {
    let conn = {
        let _lock = lifecycle_lock();
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?
    };
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let target = to
        .to_str()
        .ok_or_else(|| StoreError::InvalidArgument(format!("{} is not UTF-8", to.display())))?;
    let done = conn.execute("VACUUM INTO ?1", [target]).map(drop);
    let _lock = lifecycle_lock();
    drop(conn);
    Ok(done?)
}

/// The schema version of the copy at `db` after checking it is whole and not newer than this build.
pub fn inspect(db: &Path) -> Result<u32> {
    let conn = {
        let _lock = lifecycle_lock();
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?
    };
    let checked = (|| {
        let verdict: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if verdict != "ok" {
            return Err(StoreError::InvalidArgument(format!(
                "{} is damaged: {verdict}",
                db.display()
            )));
        }
        let found = current_version(&conn)?;
        if found > latest_version() {
            return Err(StoreError::SchemaTooNew {
                found,
                known: latest_version(),
            });
        }
        Ok(found)
    })();
    let _lock = lifecycle_lock();
    drop(conn);
    checked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::open_temp;

    #[tokio::test]
    async fn a_snapshot_taken_while_the_writer_commits_is_whole_and_opens() {
        let (dir, store, _thread) = open_temp();
        let db = dir.path().join("store.db");
        let writer = store.writer().clone();
        let add = move |n: u32| {
            let writer = writer.clone();
            async move {
                let name = format!("v{n}");
                writer
                    .write(move |tx| {
                        tx.insert_volume(&crate::VolumeRecord {
                            id: format!("id{name}"),
                            name,
                            size_mb: 0,
                            labels: Default::default(),
                            token: "t".repeat(32),
                            created_at: 1,
                        })
                    })
                    .await
                    .unwrap();
            }
        };
        for n in 0..10 {
            add(n).await;
        }
        // Writes go on while the copy is made.
        let busy = tokio::spawn(async move {
            for n in 10..210 {
                add(n).await;
            }
        });
        let copy = dir.path().join("copy.db");
        let db2 = db.clone();
        let copy2 = copy.clone();
        tokio::task::spawn_blocking(move || snapshot(&db2, &copy2))
            .await
            .unwrap()
            .unwrap();
        busy.await.unwrap();
        assert_eq!(inspect(&copy).unwrap(), latest_version());
        let (copied, _t) = crate::Store::open(copy, Default::default()).unwrap();
        let n = copied
            .reader()
            .read(|tx| tx.list_volumes())
            .await
            .unwrap()
            .len();
        assert!(
            (10..=210).contains(&n),
            "every write acknowledged before the copy: {n}"
        );
        assert!(
            snapshot(&db, &dir.path().join("copy.db")).is_err(),
            "an existing copy is never overwritten"
        );
        std::fs::write(dir.path().join("junk.db"), b"not a database").unwrap();
        assert!(inspect(&dir.path().join("junk.db")).is_err());
    }
}
