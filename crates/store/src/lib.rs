//! `sandboxd-store`: the daemon's single-writer SQLite store.
//!
//! What was promised lives here (sandboxes, exposed ports, network slots, custom domains, API tokens,
//! idempotency claims, the delivery ledger, observed sandbox endpoints, webhook registrations and the
//! webhook outbox with its attempt log); what actually runs is the runtime's business. The store
//! guarantees:
//!
//! - **One writer.** Exactly one connection writes, owned by the writer thread ([`writer`]); handlers send
//!   it closures through [`StoreWriter::write`]. Readers use read-only connections ([`reader`]); a
//!   [`ReadTx`] has no write methods and no raw connection, so writing through a read handle does not
//!   compile.
//! - **Group commit.** Concurrent writes share one transaction and one fsync; each runs in its own
//!   savepoint, and a reply is sent only after the batch committed.
//! - **The schema does the rejection.** Each invariant is enforced by the schema (migration 1, in
//!   [`migrations`]) and observed by one function; the test that proves it sits beside that function:
//!   - sandbox names unique when non-empty: `idx_sandboxes_name` → [`StoreError::NameConflict`]
//!     (`sandboxes::tests::concurrent_same_name_inserts_yield_one_winner`);
//!   - one network slot per sandbox: `idx_network_slots_sandbox`
//!     (`slots::tests::lease_is_idempotent_per_sandbox`);
//!   - a host port belongs to one exposure: `idx_exposed_ports_host_port`
//!     (`ports::tests::racing_sandboxes_get_distinct_host_ports`);
//!   - a signed preview link names one sandbox port: `preview_links` primary key (migration 10)
//!     (`previews::tests::a_link_opens_its_port_until_its_time_its_expiry_or_its_sandbox_ends`);
//!   - one idle policy per sandbox, its clock only moving forward: `idle_policies` primary key
//!     (migration 11) (`idle::tests::a_policy_is_one_per_sandbox_and_its_clock_only_moves_forward`);
//!   - one file-URL signing key per sandbox: `file_keys` primary key (migration 12)
//!     (`file_keys::tests::a_sandbox_keeps_one_key_until_it_is_rotated`);
//!   - one binding per hostname: `custom_domains` primary key
//!     (`domains::tests::hostname_owned_by_another_sandbox_conflicts`);
//!   - request dedupe with the four claim cases: `request_idempotency` primary key
//!     (`idempotency::tests`);
//!   - an event is applied once: `deliveries` primary key
//!     (`deliveries::tests::a_delivery_is_recorded_once`);
//!   - one observed endpoint per sandbox, racing writers converge: `sandbox_endpoints` primary key and
//!     an upsert (`endpoints::tests::racing_upserts_converge_on_one_row`).
//!   - an API key is stored only as its SHA-256, unique: `api_tokens.token_hash`; its scope is `admin`
//!     or `user` and the configured token is an admin one (migration 7's CHECKs)
//!     (`tokens::tests::only_the_hash_is_stored_and_verify_finds_it_with_its_scope`,
//!     `tokens::tests::the_schema_refuses_unknown_scopes_and_configured_user_keys`).
//!   - volume names unique, and no volume deleted while a sandbox mounts it: `volumes.name` and
//!     `volume_mounts`' `ON DELETE RESTRICT` (migration 16)
//!     (`volumes::tests::racing_creates_of_one_name_yield_one_volume`,
//!     `volumes::tests::a_mounted_volume_cannot_be_deleted_until_its_sandboxes_are_gone`).
//!   - secret names unique, values only ever sealed: `secrets.name` and `secrets.sealed`'s CHECK
//!     (migration 17) (`secrets::tests::racing_creates_of_one_name_yield_one_secret`,
//!     `secrets::tests::the_schema_refuses_what_cannot_be_a_sealed_value`).
//!
//! Time is always passed in (`now`, Unix milliseconds), so tests control the clock.
//!
//! ```no_run
//! use sandboxd_store::{unix_millis_now, Store, StoreConfig};
//!
//! # async fn f() -> Result<(), sandboxd_store::StoreError> {
//! let (store, writer_thread) = Store::open("/var/lib/sandboxd/store.db", StoreConfig::default())?;
//! let now = unix_millis_now();
//! // Writes run on the writer thread, grouped with concurrent writes into one transaction.
//! let lease = store.writer().write(move |tx| tx.lease_slot("sbx-1", 256, now)).await?;
//! // Reads run on a read-only connection.
//! let sandbox = store.reader().read(|tx| tx.get_sandbox("sbx-1")).await?;
//! # let _ = (lease, sandbox, writer_thread);
//! # Ok(())
//! # }
//! ```

pub mod backup;
pub mod deliveries;
pub mod domains;
pub mod endpoints;
mod error;
pub mod file_keys;
pub mod idempotency;
pub mod idle;
pub mod images;
pub mod migrations;
mod open;
pub mod outbox;
pub mod per_key;
pub mod ports;
pub mod previews;
pub mod reader;
pub mod sandboxes;
pub mod secrets;
pub mod slots;
pub mod templates;
pub mod tokens;
pub mod volumes;
pub mod warm_pool;
pub mod webhooks;
pub mod writer;

pub use deliveries::Delivery;
pub use domains::{normalize_hostname, BindOutcome, DomainBinding};
pub use endpoints::StoredEndpoint;
pub use error::{Result, StoreError};
pub use idempotency::{AbandonedClaim, ClaimOutcome, ClaimRecord, ClaimState, StoredResponse};
pub use idle::{IdlePolicy, IdleSandbox};
pub use images::{ImageRecord, ImageState, LayerRecord};
pub use open::{Store, StoreConfig, Synchronous};
pub use outbox::{NewWebhook, OutboxEntry, OutboxState};
pub use per_key::KeyUsage;
pub use ports::{ExposedPort, HostPorts, PortState, Protocol, ReserveOutcome};
pub use reader::{ReadTx, StoreReader};
pub use sandboxes::{Lifecycle, NewSandbox, Sandbox, SandboxFilter, SandboxState, CURSOR_PATTERN};
pub use secrets::{SecretChange, SecretRecord};
pub use slots::SlotLease;
pub use templates::{LogLine, TemplateRecord, TemplateState};
pub use tokens::{hash_token, ApiToken, CreatedToken, KeyScope, Revoked, TokenId, VerifiedToken};
pub use volumes::{VolumeMountRecord, VolumeRecord};
pub use warm_pool::{PoolEntry, PoolState};
pub use webhooks::{DeliveryAttempt, Webhook};
pub use writer::{StoreWriter, WriteTx, WriterStats, WriterThread};

/// Unix time in milliseconds, the store's only time unit.
pub type UnixMillis = i64;

/// The current wall-clock time in Unix milliseconds.
pub fn unix_millis_now() -> UnixMillis {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Adds a duration to a timestamp, saturating instead of overflowing.
pub(crate) fn add_ms(now: UnixMillis, d: std::time::Duration) -> UnixMillis {
    now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
pub(crate) mod test_util {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use crate::{NewSandbox, SandboxState, Store, StoreConfig, StoreWriter, WriterThread};

    /// A fresh store in a temporary directory (kept alive by the returned guard).
    pub fn open_temp() -> (tempfile::TempDir, Store, WriterThread) {
        let dir = tempfile::tempdir().unwrap();
        let (store, thread) =
            Store::open(dir.path().join("store.db"), StoreConfig::default()).unwrap();
        (dir, store, thread)
    }

    /// Polls until the writer's queue depth is `n` (fails the test after 10 s).
    pub async fn wait_for_depth(w: &StoreWriter, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while w.queue_depth() != n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "queue depth stuck at {} (want {n})",
                w.queue_depth()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A request parked inside the writer; everything sent meanwhile queues up behind it.
    pub struct Gate {
        open: std::sync::mpsc::Sender<()>,
        handle: tokio::task::JoinHandle<crate::Result<()>>,
    }

    /// Parks the writer inside a request and returns once it is parked.
    pub async fn hold_writer(w: &StoreWriter) -> Gate {
        let (entered_tx, entered_rx) = oneshot::channel::<()>();
        let (open, open_rx) = std::sync::mpsc::channel::<()>();
        let w = w.clone();
        let handle = tokio::spawn(async move {
            w.write(move |_tx| {
                let _ = entered_tx.send(());
                let _ = open_rx.recv();
                Ok(())
            })
            .await
        });
        entered_rx.await.unwrap();
        Gate { open, handle }
    }

    impl Gate {
        pub async fn release(self) {
            self.open.send(()).unwrap();
            self.handle.await.unwrap().unwrap();
        }
    }

    /// A minimal sandbox row for tests.
    pub fn new_sandbox(id: &str, name: &str, created_at: i64) -> NewSandbox {
        NewSandbox {
            id: id.to_owned(),
            name: name.to_owned(),
            state: SandboxState::Creating,
            template: "base".to_owned(),
            cpu_millis: 1000,
            memory_mb: 512,
            metadata: Default::default(),
            env: Default::default(),
            network: serde_json::json!({}),
            agent_token: format!("tok-{id}"),
            created_at,
            expires_at: None,
            lifecycle: Default::default(),
            image: None,
            disk_mb: 0,
            owner: String::new(),
            isolation: "namespace".to_owned(),
        }
    }

    /// Inserts sandboxes with the given ids.
    pub async fn seed_sandboxes(store: &Store, ids: &[&str]) {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        store
            .writer()
            .write(move |tx| {
                for id in &ids {
                    tx.insert_sandbox(new_sandbox(id, "", 1))?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
}
