//! Versioned schema migrations.
//!
//! Contract: [`MIGRATIONS`] is an append-only list numbered 1, 2, 3, … Each migration runs in its own
//! `BEGIN IMMEDIATE` transaction together with the `schema_version` row that records it, so a migration is
//! either fully applied and recorded or not at all. Opening a database whose recorded version is newer than
//! the newest migration this build knows is refused ([`StoreError::SchemaTooNew`]): an old binary must not
//! write into a schema it does not understand. Never edit a released migration; add a new one.
//!
//! The invariants of the store live in migration 1 (see the crate docs for the list and the tests that
//! prove each one).

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Result, StoreError};

/// One numbered schema change.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration this build knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial schema",
        sql: SCHEMA_V1,
    },
    Migration {
        version: 2,
        name: "webhook registrations and delivery attempts",
        sql: SCHEMA_V2,
    },
    Migration {
        version: 3,
        name: "sandbox endpoints as observed by the runtime",
        sql: SCHEMA_V3,
    },
    Migration {
        version: 4,
        name: "sandboxes by agent token",
        sql: SCHEMA_V4,
    },
    Migration {
        version: 5,
        name: "what a sandbox's deadline does: delete, or pause (and resume on demand)",
        sql: SCHEMA_V5,
    },
    Migration {
        version: 6,
        name: "images, their layers and tags; the image a sandbox's root is made of",
        sql: SCHEMA_V6,
    },
    Migration {
        version: 7,
        name: "API keys: a scope, a non-secret prefix, and which token is the configured one",
        sql: SCHEMA_V7,
    },
    Migration {
        version: 8,
        name: "the key each sandbox was created with, for per-key limits",
        sql: SCHEMA_V8,
    },
    Migration {
        version: 9,
        name: "network slots the host holds for someone else, set aside for a while",
        sql: "ALTER TABLE network_slots ADD COLUMN set_aside_until INTEGER;",
    },
    Migration {
        version: 10,
        name: "signed preview links to sandbox ports",
        sql: SCHEMA_V10,
    },
    Migration {
        version: 11,
        name: "what a sandbox's inactivity does: stop it, delete it once stopped",
        sql: SCHEMA_V11,
    },
    Migration {
        version: 12,
        name: "the keys that sign sandboxes' file URLs",
        sql: "CREATE TABLE file_keys (
                  sandbox_id TEXT PRIMARY KEY NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
                  key        TEXT NOT NULL
              );",
    },
    Migration {
        version: 13,
        name: "the isolation tier each sandbox runs in",
        sql: SCHEMA_V13,
    },
    Migration {
        version: 14,
        name: "auto-pauses that keep only the files",
        sql: SCHEMA_V14,
    },
    Migration {
        version: 15,
        name: "the isolation tier a template's sandboxes run in",
        sql: SCHEMA_V15,
    },
    Migration {
        version: 16,
        name: "volumes and the sandboxes that mount them",
        sql: SCHEMA_V16,
    },
    Migration {
        version: 17,
        name: "secrets, their values sealed; sandboxes found by address (the egress gateway)",
        sql: SCHEMA_V17,
    },
    Migration {
        version: 18,
        name: "warm pools: sandboxes booted ahead, each claimed once",
        sql: SCHEMA_V18,
    },
    Migration {
        version: 19,
        name: "idle policies pause a sandbox (Daytona's auto-pause)",
        sql: SCHEMA_V19,
    },
];

/// An idle policy may pause a running sandbox, its memory kept (`idle`): after `pause_after_ms`
/// idle, 0 never (every policy until now).
const SCHEMA_V19: &str = "
ALTER TABLE idle_policies ADD COLUMN pause_after_ms INTEGER NOT NULL DEFAULT 0;
";

/// Warm pools (`warm_pool`): sandboxes booted ahead of any create, each `warming` until its agent
/// calls home, then `ready`. A create claims one by deleting its row (so it is claimed once), and
/// the entry's network slot moves to the sandbox in the same transaction. A slot is held by a
/// sandbox or by a pool entry, never both (`network_slots.pool_id`, unique where set). The sizes
/// asked for, per template, are `warm_pool_sizes`.
const SCHEMA_V18: &str = r#"
CREATE TABLE warm_pool (
    id          TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 63),
    template    TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('warming', 'ready')),
    agent_token TEXT NOT NULL CHECK (length(agent_token) > 0),
    cpu_millis  INTEGER NOT NULL,
    memory_mb   INTEGER NOT NULL,
    disk_mb     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX idx_warm_pool_ready ON warm_pool(template, created_at) WHERE state = 'ready';
ALTER TABLE network_slots ADD COLUMN pool_id TEXT REFERENCES warm_pool(id) ON DELETE SET NULL;
CREATE UNIQUE INDEX idx_network_slots_pool ON network_slots(pool_id) WHERE pool_id IS NOT NULL;
CREATE TABLE warm_pool_sizes (
    template TEXT PRIMARY KEY NOT NULL,
    size     INTEGER NOT NULL CHECK (size >= 0)
);
"#;

/// Secrets (`secrets`): a unique name, the value sealed under the daemon's secrets key (a format
/// byte, a 12-byte nonce and a 16-byte tag at least: never a value in clear), the hosts it may be
/// sent to, and a version that grows with each new value.
const SCHEMA_V17: &str = r#"
CREATE TABLE secrets (
    id          TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 63),
    name        TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
    sealed      BLOB NOT NULL CHECK (typeof(sealed) = 'blob' AND length(sealed) >= 29),
    hosts       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(hosts) AND json_type(hosts) = 'array'),
    description TEXT NOT NULL DEFAULT '' CHECK (length(description) <= 1024),
    metadata    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata) AND json_type(metadata) = 'object'),
    version     INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX idx_sandbox_endpoints_address ON sandbox_endpoints(address);
"#;

/// Volumes (`volumes`): named storage that outlives sandboxes, each with the token its file API
/// takes (E2B's volume content API). A name is unique among volumes; a
/// mount names an existing sandbox and an existing volume, one mount per path of a sandbox, and a
/// volume cannot be deleted while a mount names it (`ON DELETE RESTRICT`); mounts go with their
/// sandbox (`ON DELETE CASCADE`).
const SCHEMA_V16: &str = r#"
CREATE TABLE volumes (
    id         TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 63),
    name       TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 63),
    size_mb    INTEGER NOT NULL DEFAULT 0 CHECK (size_mb >= 0),
    labels     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(labels) AND json_type(labels) = 'object'),
    token      TEXT NOT NULL CHECK (length(token) >= 32),
    created_at INTEGER NOT NULL
);
CREATE TABLE volume_mounts (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    volume_id  TEXT NOT NULL REFERENCES volumes(id) ON DELETE RESTRICT,
    path       TEXT NOT NULL CHECK (substr(path, 1, 1) = '/' AND length(path) BETWEEN 2 AND 4096),
    subpath    TEXT NOT NULL DEFAULT '',
    read_only  INTEGER NOT NULL DEFAULT 0 CHECK (read_only IN (0, 1)),
    PRIMARY KEY (sandbox_id, path)
);
CREATE INDEX idx_volume_mounts_volume ON volume_mounts(volume_id);
"#;

/// Idle policies (`idle`): a sandbox's auto-stop, auto-delete and auto-archive intervals and its
/// last recorded activity.
const SCHEMA_V11: &str = r#"
CREATE TABLE idle_policies (
    sandbox_id       TEXT PRIMARY KEY NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    stop_after_ms    INTEGER NOT NULL CHECK (stop_after_ms >= 0),
    delete_after_ms  INTEGER NOT NULL,
    archive_after_ms INTEGER NOT NULL CHECK (archive_after_ms >= 0),
    active_at        INTEGER NOT NULL
);
"#;

/// Signed preview links (`previews`): a token opens one port of one sandbox until its time.
const SCHEMA_V10: &str = r#"
CREATE TABLE preview_links (
    token      TEXT PRIMARY KEY NOT NULL,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    expires_at INTEGER NOT NULL
);
CREATE INDEX idx_preview_links_sandbox ON preview_links(sandbox_id, expires_at);
"#;

/// The newest schema version this build knows.
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

const SCHEMA_V1: &str = r#"
CREATE TABLE sandboxes (
    id             TEXT PRIMARY KEY NOT NULL,
    name           TEXT NOT NULL DEFAULT '',
    state          TEXT NOT NULL CHECK (state IN ('creating','starting','running','stopping','stopped',
                                                   'paused','deleting','failed','lost')),
    template       TEXT NOT NULL DEFAULT '',
    cpu_millis     INTEGER NOT NULL DEFAULT 0 CHECK (cpu_millis >= 0),
    memory_mb      INTEGER NOT NULL DEFAULT 0 CHECK (memory_mb >= 0),
    metadata       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata) AND json_type(metadata) = 'object'),
    env            TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(env) AND json_type(env) = 'object'),
    network        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(network)),
    agent_token    TEXT NOT NULL DEFAULT '',
    net_slot       INTEGER,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER,
    updated_at     INTEGER NOT NULL,
    failure_reason TEXT,
    generation     INTEGER NOT NULL DEFAULT 0
);
-- Names: empty (unnamed) many times, any non-empty name at most once.
CREATE UNIQUE INDEX idx_sandboxes_name ON sandboxes(name) WHERE name <> '';
CREATE INDEX idx_sandboxes_created ON sandboxes(created_at, id);
CREATE INDEX idx_sandboxes_expires ON sandboxes(expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE network_slots (
    slot       INTEGER PRIMARY KEY NOT NULL CHECK (slot >= 0),
    sandbox_id TEXT REFERENCES sandboxes(id) ON DELETE SET NULL,
    leased_at  INTEGER
);
-- Slots: at most one leased slot per sandbox; free slots (NULL) coexist freely.
CREATE UNIQUE INDEX idx_network_slots_sandbox ON network_slots(sandbox_id) WHERE sandbox_id IS NOT NULL;

CREATE TABLE exposed_ports (
    sandbox_id  TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    port        INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    protocol    TEXT NOT NULL CHECK (protocol IN ('http','tcp','udp')),
    host_port   INTEGER NOT NULL DEFAULT 0 CHECK (host_port BETWEEN 0 AND 65535),
    public_url  TEXT NOT NULL DEFAULT '',
    state       TEXT NOT NULL DEFAULT 'exposing' CHECK (state IN ('exposing','active')),
    reservation TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, port)
);
-- Host ports: a bound host port belongs to at most one exposure; 0 ("no host port") many times.
CREATE UNIQUE INDEX idx_exposed_ports_host_port ON exposed_ports(host_port) WHERE host_port > 0;

CREATE TABLE custom_domains (
    hostname   TEXT PRIMARY KEY NOT NULL COLLATE NOCASE,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    created_at INTEGER NOT NULL
);
CREATE INDEX idx_custom_domains_sandbox ON custom_domains(sandbox_id);

CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY NOT NULL,
    name         TEXT NOT NULL DEFAULT '',
    token_hash   TEXT UNIQUE NOT NULL CHECK (length(token_hash) = 64),
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER
);

CREATE TABLE request_idempotency (
    scope           TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','ready')),
    target_id       TEXT NOT NULL DEFAULT '',
    locked_until    INTEGER NOT NULL,
    replay_until    INTEGER,
    response_status INTEGER,
    response_body   BLOB,
    request_hash    TEXT NOT NULL DEFAULT '',
    generation      INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (scope, fingerprint),
    CHECK (state = 'pending' OR replay_until IS NOT NULL)
);

CREATE TABLE deliveries (
    delivery_id TEXT PRIMARY KEY NOT NULL,
    kind        TEXT NOT NULL,
    sandbox_id  TEXT,
    received_at INTEGER NOT NULL
);
CREATE INDEX idx_deliveries_received ON deliveries(received_at);

CREATE TABLE webhook_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT UNIQUE NOT NULL,
    kind            TEXT NOT NULL,
    sandbox_id      TEXT,
    payload         TEXT NOT NULL CHECK (json_valid(payload)),
    created_at      INTEGER NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT
);
CREATE INDEX idx_webhook_outbox_due ON webhook_outbox(next_attempt_at) WHERE state = 'pending';
"#;

/// Webhook registrations; each outbox row goes to one registration; every delivery attempt is logged.
const SCHEMA_V2: &str = r#"
CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL CHECK (json_valid(events) AND json_type(events) = 'array'),
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

ALTER TABLE webhook_outbox ADD COLUMN webhook_id TEXT;
CREATE INDEX idx_webhook_outbox_webhook ON webhook_outbox(webhook_id, id);

-- One row per attempt of an outbox row: attempt numbers are unique per row.
CREATE TABLE webhook_attempts (
    outbox_id INTEGER NOT NULL REFERENCES webhook_outbox(id) ON DELETE CASCADE,
    attempt   INTEGER NOT NULL CHECK (attempt >= 1),
    at        INTEGER NOT NULL,
    status    INTEGER,
    error     TEXT,
    PRIMARY KEY (outbox_id, attempt)
);
"#;

/// Where a sandbox's services are, as its authority (the runtime) reported it: written by the create
/// flow after start and by read-repair on a miss, both with an upsert so racing writers converge.
const SCHEMA_V3: &str = r#"
CREATE TABLE sandbox_endpoints (
    sandbox_id   TEXT PRIMARY KEY NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    address      TEXT NOT NULL,
    agent_socket TEXT NOT NULL,
    observed_at  INTEGER NOT NULL
);
"#;

/// Envd calls that carry nothing but a sandbox's access token are routed by it.
const SCHEMA_V4: &str = r#"
CREATE INDEX idx_sandboxes_agent_token ON sandboxes(agent_token) WHERE agent_token <> '';
"#;

/// A sandbox's lifecycle: at its deadline it is deleted (`auto_pause = 0`) or paused, and a paused one
/// may be resumed by the next request for it (`auto_resume`, only with `auto_pause`: the schema refuses
/// the combination that would never come into play). `timeout_ms` is what a resume gives it again.
const SCHEMA_V5: &str = r#"
ALTER TABLE sandboxes ADD COLUMN auto_pause INTEGER NOT NULL DEFAULT 0 CHECK (auto_pause IN (0, 1));
ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0
    CHECK (auto_resume IN (0, 1) AND auto_resume <= auto_pause);
ALTER TABLE sandboxes ADD COLUMN timeout_ms INTEGER NOT NULL DEFAULT 0 CHECK (timeout_ms >= 0);
"#;

/// Images (by manifest digest), the layers they stack (by blob digest) and the tags that name them.
/// Who uses what is a foreign key, so nothing in use can be deleted: a sandbox names its image
/// (`ON DELETE RESTRICT`), an image its layers (`RESTRICT`); an image's tags and layer list go with it
/// (`CASCADE`). An image row is `pulling` while its pull runs (the claim `('image.pull', digest)` in
/// `request_idempotency` says which attempt owns it) and `ready` once every layer is unpacked.
/// A sandbox's `disk_mb` is the limit of its writable layer (0: none). A template names an image
/// (`RESTRICT`: an image a template names is not deleted); it is `building` while its build runs,
/// `ready` only with an image (a CHECK), `failed` with the reason; its build log lines are numbered
/// per template. The build cache maps a step's key (its parent, instruction and inputs) to the layer
/// it made, and goes with the layer.
const SCHEMA_V6: &str = r#"
CREATE TABLE layers (
    digest         TEXT PRIMARY KEY NOT NULL CHECK (length(digest) = 71 AND substr(digest, 1, 7) = 'sha256:'),
    media_type     TEXT NOT NULL,
    size           INTEGER NOT NULL CHECK (size >= 0),
    unpacked_bytes INTEGER NOT NULL DEFAULT 0 CHECK (unpacked_bytes >= 0),
    created_at     INTEGER NOT NULL
);
CREATE TABLE images (
    digest       TEXT PRIMARY KEY NOT NULL CHECK (length(digest) = 71 AND substr(digest, 1, 7) = 'sha256:'),
    state        TEXT NOT NULL CHECK (state IN ('pulling', 'ready')),
    reference    TEXT NOT NULL,
    config       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(config) AND json_type(config) = 'object'),
    size         INTEGER NOT NULL DEFAULT 0 CHECK (size >= 0),
    pulled_bytes INTEGER NOT NULL DEFAULT 0 CHECK (pulled_bytes >= 0),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL
);
CREATE TABLE image_layers (
    image_digest TEXT NOT NULL REFERENCES images(digest) ON DELETE CASCADE,
    position     INTEGER NOT NULL CHECK (position >= 0),
    layer_digest TEXT NOT NULL REFERENCES layers(digest) ON DELETE RESTRICT,
    PRIMARY KEY (image_digest, position)
);
CREATE INDEX idx_image_layers_layer ON image_layers(layer_digest);
CREATE TABLE image_tags (
    reference    TEXT PRIMARY KEY NOT NULL,
    image_digest TEXT NOT NULL REFERENCES images(digest) ON DELETE CASCADE,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX idx_image_tags_image ON image_tags(image_digest);
ALTER TABLE sandboxes ADD COLUMN image_digest TEXT REFERENCES images(digest) ON DELETE RESTRICT;
CREATE INDEX idx_sandboxes_image ON sandboxes(image_digest) WHERE image_digest IS NOT NULL;
ALTER TABLE sandboxes ADD COLUMN disk_mb INTEGER NOT NULL DEFAULT 0 CHECK (disk_mb >= 0);
CREATE TABLE templates (
    name         TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    state        TEXT NOT NULL CHECK (state IN ('building', 'ready', 'failed')),
    image_digest TEXT REFERENCES images(digest) ON DELETE RESTRICT,
    source       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(source) AND json_type(source) = 'object'),
    error        TEXT,
    start_cmd    TEXT,
    ready_cmd    TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    CHECK (state <> 'ready' OR image_digest IS NOT NULL)
);
CREATE TABLE template_logs (
    template TEXT NOT NULL REFERENCES templates(name) ON DELETE CASCADE,
    seq      INTEGER NOT NULL CHECK (seq >= 0),
    line     TEXT NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (template, seq)
);
CREATE TABLE build_cache (
    key          TEXT PRIMARY KEY NOT NULL,
    layer_digest TEXT NOT NULL REFERENCES layers(digest) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL
);
"#;

/// API keys ([`crate::tokens`]): what a key may do (`scope`: `admin` manages keys and webhooks,
/// `user` does not), the first characters of a minted key to tell keys apart by (`prefix`, empty for
/// a configured token), and where it came from (`origin`: `minted` by `POST /v1/api-keys`, or
/// `configured`, the daemon's admin token). Every token stored before this migration was the
/// configured admin token, so the defaults describe them.
const SCHEMA_V7: &str = r#"
ALTER TABLE api_tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin' CHECK (scope IN ('admin', 'user'));
ALTER TABLE api_tokens ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN origin TEXT NOT NULL DEFAULT 'configured'
    CHECK (origin IN ('configured', 'minted') AND (origin = 'minted' OR scope = 'admin'));
"#;

const SCHEMA_V8: &str = r#"
ALTER TABLE sandboxes ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX idx_sandboxes_owner ON sandboxes(owner, state) WHERE owner <> '';
"#;

/// The isolation tier of each sandbox (`namespace` or `gvisor`); every sandbox made before tiers
/// existed is a namespace one.
const SCHEMA_V13: &str = r#"
ALTER TABLE sandboxes ADD COLUMN isolation TEXT NOT NULL DEFAULT 'namespace'
    CHECK (isolation IN ('namespace', 'gvisor'));
"#;

/// Whether a sandbox's auto-pause keeps only its files (a stop; E2B's `mode: "filesystem"`). Only
/// with `auto_pause`, and never with `auto_resume`: a request cannot wait for a cold boot.
const SCHEMA_V14: &str = r#"
ALTER TABLE sandboxes ADD COLUMN pause_files_only INTEGER NOT NULL DEFAULT 0
    CHECK (pause_files_only IN (0, 1) AND pause_files_only <= auto_pause
           AND (pause_files_only = 0 OR auto_resume = 0));
"#;

/// The isolation tier sandboxes made from a template run in when their create names none (a
/// snapshot of a gVisor sandbox makes gVisor sandboxes); `NULL` leaves it to the daemon's default.
const SCHEMA_V15: &str = r#"
ALTER TABLE templates ADD COLUMN isolation TEXT
    CHECK (isolation IS NULL OR isolation IN ('namespace', 'gvisor'));
"#;

/// Brings the schema on `conn` up to the newest of `migrations`, one transaction per migration.
/// Returns the version the database is at afterwards.
pub(crate) fn migrate(conn: &Connection, migrations: &[Migration], now_ms: i64) -> Result<u32> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version    INTEGER PRIMARY KEY NOT NULL,
             name       TEXT NOT NULL,
             applied_at INTEGER NOT NULL
         )",
    )?;
    let known = migrations.last().map_or(0, |m| m.version);
    let found = current_version(conn)?;
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    let mut current = found;
    for m in migrations.iter().filter(|m| m.version > found) {
        apply_one(conn, m, now_ms).map_err(|source| {
            // The transaction may still be open if the failure was inside it.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            StoreError::Migration {
                version: m.version,
                source,
            }
        })?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied schema migration"
        );
        current = m.version;
    }
    Ok(current)
}

fn apply_one(conn: &Connection, m: &Migration, now_ms: i64) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    conn.execute_batch(m.sql)?;
    conn.execute(
        "INSERT INTO schema_version (version, name, applied_at) VALUES (?1, ?2, ?3)",
        params![m.version, m.name, now_ms],
    )?;
    conn.execute_batch("COMMIT")
}

/// The highest recorded schema version (0 for a fresh database).
pub(crate) fn current_version(conn: &Connection) -> Result<u32> {
    let v: Option<u32> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(v.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.pragma_update(None, "foreign_keys", true).unwrap();
        c
    }

    #[test]
    fn migrations_are_numbered_one_to_n_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(
                m.version as usize,
                i + 1,
                "migration {} is out of order",
                m.name
            );
        }
        assert_eq!(latest_version() as usize, MIGRATIONS.len());
    }

    #[test]
    fn migrating_twice_applies_each_migration_once() {
        let c = mem();
        assert_eq!(migrate(&c, MIGRATIONS, 1).unwrap(), latest_version());
        assert_eq!(migrate(&c, MIGRATIONS, 2).unwrap(), latest_version());
        let rows: i64 = c
            .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows as usize, MIGRATIONS.len());
    }

    #[test]
    fn newer_schema_than_known_is_refused() {
        let c = mem();
        migrate(&c, MIGRATIONS, 1).unwrap();
        c.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (?1, 'future', 0)",
            [latest_version() + 1],
        )
        .unwrap();
        let err = migrate(&c, MIGRATIONS, 2).unwrap_err();
        assert!(
            matches!(err, StoreError::SchemaTooNew { found, known } if found == latest_version() + 1 && known == latest_version()),
            "{err:?}"
        );
    }

    #[test]
    fn failing_migration_is_rolled_back_and_not_recorded() {
        let c = mem();
        let list = [
            Migration {
                version: 1,
                name: "ok",
                sql: "CREATE TABLE a (x INTEGER);",
            },
            Migration {
                version: 2,
                name: "half then broken",
                sql: "CREATE TABLE b (x INTEGER); THIS IS NOT SQL;",
            },
        ];
        let err = migrate(&c, &list, 1).unwrap_err();
        assert!(
            matches!(err, StoreError::Migration { version: 2, .. }),
            "{err:?}"
        );
        assert_eq!(current_version(&c).unwrap(), 1);
        let b_exists: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'b'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            b_exists, 0,
            "the failed migration's first statement must be rolled back"
        );
        assert!(c.is_autocommit());
    }
}
