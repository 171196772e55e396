//! The store's one error type.
//!
//! Each variant describes only the store's layer; the cause (a SQLite error, a panic message) is chained
//! with `#[source]` rather than repeated. The HTTP surfaces map these to status codes in one place each:
//! [`StoreError::NameConflict`] and [`StoreError::HostnameConflict`] are the typed 409s,
//! [`StoreError::PoolExhausted`] is a 503-ish capacity error, [`StoreError::NotFound`] a 404.

use std::sync::Arc;

/// Everything that can go wrong inside `sandboxd-store`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A non-empty sandbox name is already used by another sandbox (`idx_sandboxes_name`).
    #[error("sandbox name {name:?} is already taken")]
    NameConflict { name: String },

    /// A sandbox with this id already exists (primary key of `sandboxes`).
    #[error("sandbox id {id:?} already exists")]
    SandboxExists { id: String },

    /// The referenced row does not exist.
    #[error("{kind} {key:?} not found")]
    NotFound { kind: &'static str, key: String },

    /// Every value of an allocator pool is taken.
    #[error("the {pool} pool is exhausted")]
    PoolExhausted { pool: &'static str },

    /// The hostname is bound to a different sandbox (`custom_domains` primary key).
    #[error("hostname {hostname:?} is bound to another sandbox")]
    HostnameConflict { hostname: String, owner: String },

    /// The container port is already exposed with a different protocol.
    #[error("port {port} of sandbox {sandbox_id:?} is already exposed as {existing}")]
    PortConflict {
        sandbox_id: String,
        port: u16,
        existing: crate::ports::Protocol,
    },

    /// The idempotency claim this caller holds was reset by a later claimer (or deleted); the caller must
    /// not publish its outcome.
    #[error(
        "idempotency claim ({scope}, {fingerprint}) generation {generation} is no longer current"
    )]
    ClaimLost {
        scope: String,
        fingerprint: String,
        generation: i64,
    },

    /// A template of this name is building or ready (`templates` primary key).
    #[error("template {name:?} already exists")]
    TemplateExists { name: String },

    /// A volume of this name exists (`volumes.name` is unique).
    #[error("volume {name:?} already exists")]
    VolumeExists { name: String },

    /// A secret of this name exists (`secrets.name` is unique).
    #[error("secret {name:?} already exists")]
    SecretExists { name: String },

    /// The row is still used by another (a foreign key with `ON DELETE RESTRICT`: an image a sandbox
    /// runs on, a layer an image stacks).
    #[error("{kind} {key:?} is in use")]
    InUse { kind: &'static str, key: String },

    /// A list cursor that this store did not produce.
    #[error("invalid list cursor")]
    InvalidCursor,

    /// An argument the store refuses before touching the database.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A statement failed.
    #[error("database operation failed")]
    Sqlite(#[from] rusqlite::Error),

    /// The group-commit transaction this request ran in could not be committed (or was aborted by SQLite);
    /// nothing the request wrote is durable.
    #[error("the batch transaction failed; the request was not committed")]
    Batch(#[source] Arc<rusqlite::Error>),

    /// The writer thread is gone (the store was shut down or the thread died).
    #[error("the store writer is not running")]
    WriterGone,

    /// A reader task did not finish (it panicked or was cancelled).
    #[error("a store reader task did not complete")]
    ReaderGone,

    /// A request closure panicked; its savepoint was rolled back and its neighbours were unaffected.
    #[error("a store request panicked: {0}")]
    Panicked(String),

    /// A schema migration failed; it was rolled back and not recorded.
    #[error("schema migration {version} failed")]
    Migration {
        version: u32,
        #[source]
        source: rusqlite::Error,
    },

    /// The database was written by a newer build than this one.
    #[error("database schema version {found} is newer than the newest this build knows ({known})")]
    SchemaTooNew { found: u32, known: u32 },

    /// SQLite refused WAL mode (e.g. the path is on a filesystem without shared memory support).
    #[error("the database could not be switched to WAL mode (journal_mode is {0:?})")]
    NotWal(String),

    /// The writer thread could not be started.
    #[error("the store writer thread could not be started")]
    Spawn(#[source] std::io::Error),
}

/// Result alias used across the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Extended result code of a SQLite failure, if `err` is one.
pub(crate) fn extended_code(err: &rusqlite::Error) -> Option<i32> {
    match err {
        rusqlite::Error::SqliteFailure(e, _) => Some(e.extended_code),
        _ => None,
    }
}

/// True when `err` is a UNIQUE / PRIMARY KEY failure naming exactly `table.column` (the message SQLite
/// produces for a single-column unique index, partial or not, is `UNIQUE constraint failed: t.c`).
pub(crate) fn is_unique_violation_on(err: &rusqlite::Error, table_column: &str) -> bool {
    match err {
        rusqlite::Error::SqliteFailure(e, Some(msg))
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
        {
            msg.strip_prefix("UNIQUE constraint failed: ") == Some(table_column)
        }
        _ => false,
    }
}

/// True when `err` is an (immediate) foreign key failure.
pub(crate) fn is_foreign_key_violation(err: &rusqlite::Error) -> bool {
    extended_code(err) == Some(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

/// Maps a write's error: a foreign-key violation is [`StoreError::NotFound`] of the sandbox `id`
/// it named, anything else the SQLite error.
pub(crate) fn unknown_sandbox(id: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |e| {
        if is_foreign_key_violation(&e) {
            StoreError::NotFound {
                kind: "sandbox",
                key: id.to_string(),
            }
        } else {
            StoreError::Sqlite(e)
        }
    }
}

/// True when `err` is a delete an `ON DELETE RESTRICT` foreign key refused (SQLite reports those as a
/// trigger constraint with the foreign key's message).
pub(crate) fn is_restricted_delete(err: &rusqlite::Error) -> bool {
    match err {
        rusqlite::Error::SqliteFailure(e, Some(msg)) => {
            (e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_TRIGGER
                || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
                && msg == "FOREIGN KEY constraint failed"
        }
        _ => false,
    }
}
