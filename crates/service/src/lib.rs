//! The daemon's flows, between the HTTP surfaces and the store and runtime.
//!
//! Where a request goes: `api` parses and authenticates, then calls one method of [`Service`]:
//! [`sandboxes`] (create, get, list, delete), [`exec`] (commands and files, translated onto the
//! sandbox's agent), [`ports`] (exposure, and the proxy's [`sandboxd_proxy::Resolver`]), [`lifecycle`]
//! (adoption at start-up, expiry), [`readiness`] (the agent's call-home and the creates waiting for
//! it), [`reconcile`] (the sweeps that resolve records stuck in a
//! transitional state), [`pause`] (freezing and thawing in place, usage), [`e2b`] (the E2B facade's
//! create dedupe, timeouts and connect), [`api_keys`] (the keys every surface accepts), [`git`] (git
//! in a sandbox, for every surface that offers it).
//!
//! Authority: the store says what was promised (which sandboxes exist, their names, slots and ports);
//! the runtime says what runs. Every write goes through the store's single writer.

pub mod api_keys;
pub mod builds;
pub mod builtin;
pub mod cluster;
pub mod code;
pub mod contexts;
mod delete;
pub mod domains;
pub mod e2b;
pub mod e2b_templates;
pub mod egress;
pub mod env;
pub mod error;
pub mod events;
pub mod exec;
pub mod failpoints;
pub mod file_urls;
pub mod files;
pub mod fork;
pub mod forwarders;
pub mod git;
pub mod idempotency;
pub mod idle;
pub mod images;
mod in_flight;
pub mod lifecycle;
mod listen_probes;
pub mod lsp;
pub mod network;
pub mod network_update;
mod orphan_terminals;
pub mod pause;
pub mod pending;
pub mod per_key;
pub mod ports;
pub mod previews;
pub mod pty;
pub mod readiness;
pub mod reconcile;
pub mod resize;
pub mod sandboxes;
pub mod script;
pub mod secrets;
pub mod sessions;
mod settle;
pub mod snapshots;
pub mod stop;
pub mod templates;
pub mod terminal;
#[cfg(test)]
mod test_support;
pub mod timestamps;
pub mod timing;
pub mod usage_history;
mod validate;
pub mod volumes;
pub mod warm_pool;
pub mod webhooks;

pub use error::ServiceError;

use sandboxd_runtime::Runtime;
use sandboxd_store::{StoreReader, StoreWriter};
use std::sync::Arc;
use std::time::Duration;

/// Settings of the flows.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Domain of public URLs: `http://{port}-{id}.{domain}:{public_port}`.
    pub domain: String,
    /// Port of public URLs (the daemon's listen port).
    pub public_port: u16,
    /// Lifetime of a sandbox whose create names none.
    pub default_timeout: Duration,
    /// Longest lifetime a create may ask for.
    pub max_timeout: Duration,
    /// Network slots available to sandboxes.
    pub net_slots: u32,
    /// Runtime slot of the store's slot 0 (so several daemons on one host use disjoint slots).
    pub net_slot_base: u32,
    /// CPUs a sandbox may ask for at most.
    pub max_cpus: f64,
    /// Memory a sandbox may ask for at most, MiB.
    pub max_memory_mb: u64,
    /// Host ports TCP exposures are allocated from.
    pub host_ports: std::ops::RangeInclusive<u16>,
    /// Address TCP forwarders listen on.
    pub forward_ip: std::net::IpAddr,
    /// How long an Idempotency-Key attempt may run before a retry may take over.
    pub idempotency_pending_ttl: Duration,
    /// How long a completed Idempotency-Key attempt is replayed (and its key kept).
    pub idempotency_replay_ttl: Duration,
    /// Whether custom domains may be `*.` wildcards (see [`domains`]).
    pub allow_wildcard_domains: bool,
    /// How long a record may sit in a transitional state before a reconciler resolves it (see
    /// [`reconcile`]).
    pub reconcile_deadline: Duration,
    /// How long a started sandbox's agent has to report ready before the sandbox is failed (see
    /// [`readiness`]).
    pub ready_deadline: Duration,
    /// Where images come from and live; `None`: creates from images are refused.
    pub images: Option<images::ImageSettings>,
    /// Whether the runtime can limit a sandbox's disk; without, every sandbox's disk is unlimited and
    /// a create asking for a limit is refused.
    pub disk_quota: bool,
    /// Disk limit of a sandbox whose create names none, MiB.
    pub default_disk_mb: u64,
    /// Disk limit a create may ask for at most, MiB.
    pub max_disk_mb: u64,
    /// Size of unpacked layers past which the image reconciler evicts images nothing uses, MiB (0:
    /// no limit).
    pub image_cache_max_mb: u64,
    /// How long a create from a template waits for the template's ready command to succeed.
    pub ready_cmd_timeout: Duration,
    /// Limits on what one API key may create ([`per_key`]).
    pub key_limits: per_key::KeyLimits,
    /// The isolation tier of a create that names none.
    pub default_isolation: sandboxd_runtime::Isolation,
    /// The store build contexts are uploaded to ([`contexts`]); `None`: no TLS listener serves
    /// it, and builds from uploaded contexts are refused.
    pub objects: Option<contexts::ObjectStorage>,
    /// The key secrets' values are sealed with ([`secrets`]); `None`: secrets are refused.
    pub secrets_key: Option<sandboxd_secrets::SecretKey>,
    /// The egress gateway ([`egress`]); `None`: creates that use secrets or rules are refused.
    pub egress_gateway: Option<egress::GatewaySettings>,
    /// How often awake sandboxes' usage is sampled into their history ([`usage_history`]).
    pub usage_sample_every: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            domain: "localhost".into(),
            public_port: 21212,
            default_timeout: Duration::from_secs(300),
            max_timeout: Duration::from_secs(24 * 3600),
            net_slots: 8000,
            net_slot_base: 0,
            max_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
            max_memory_mb: 64 * 1024,
            host_ports: 22000..=23000,
            forward_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            idempotency_pending_ttl: idempotency::PENDING_TTL,
            idempotency_replay_ttl: idempotency::REPLAY_TTL,
            allow_wildcard_domains: false,
            reconcile_deadline: reconcile::DEADLINE,
            ready_deadline: readiness::READY_DEADLINE,
            images: None,
            objects: None,
            secrets_key: None,
            egress_gateway: None,
            disk_quota: false,
            default_disk_mb: sandboxes::DEFAULT_DISK_MB,
            max_disk_mb: 100 * 1024,
            image_cache_max_mb: 0,
            ready_cmd_timeout: templates::READY_CMD_TIMEOUT,
            key_limits: Default::default(),
            default_isolation: sandboxd_runtime::Isolation::Namespace,
            usage_sample_every: usage_history::SAMPLE_EVERY,
        }
    }
}

/// The flows. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServiceConfig,
    writer: StoreWriter,
    reader: StoreReader,
    runtime: Arc<dyn Runtime>,
    endpoints: ports::EndpointCache,
    /// Connections to agents kept between calls ([`Service::envd_client`]).
    agent_connections: sandboxd_envd::client::AgentConnections,
    forwarders: forwarders::Forwarders,
    sandbox_locks: pause::KeyedLocks,
    in_flight: in_flight::InFlight,
    listen_probes: listen_probes::ListenProbes,
    pulls: images::PullState,
    builds: templates::Builds,
    reconcile: reconcile::ReconcileState,
    events: events::EventBus,
    readiness: readiness::Waiters,
    agent_events: readiness::Tally,
    e2b_failures: e2b::FailedAttempts,
    cluster: std::sync::OnceLock<sandboxd_cluster::Cluster>,
    activity: idle::Activity,
    pending: pending::Pending,
    egress_audit: egress::AuditLog,
    warm_pools: warm_pool::WarmPools,
    usage_history: usage_history::UsageHistory,
}

impl Service {
    /// Flows over `store` and `runtime`.
    pub fn new(
        config: ServiceConfig,
        writer: StoreWriter,
        reader: StoreReader,
        runtime: Arc<dyn Runtime>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                writer,
                reader,
                runtime,
                endpoints: Default::default(),
                agent_connections: Default::default(),
                forwarders: Default::default(),
                sandbox_locks: Default::default(),
                in_flight: Default::default(),
                listen_probes: Default::default(),
                pulls: Default::default(),
                builds: Default::default(),
                reconcile: Default::default(),
                events: Default::default(),
                readiness: Default::default(),
                agent_events: Default::default(),
                e2b_failures: Default::default(),
                cluster: Default::default(),
                activity: Default::default(),
                pending: Default::default(),
                egress_audit: Default::default(),
                warm_pools: Default::default(),
                usage_history: Default::default(),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ServiceConfig {
        &self.inner.config
    }

    /// The store's write handle.
    pub fn writer(&self) -> &StoreWriter {
        &self.inner.writer
    }

    /// The store's read handle.
    pub fn reader(&self) -> &StoreReader {
        &self.inner.reader
    }

    fn runtime(&self) -> &dyn Runtime {
        self.inner.runtime.as_ref()
    }
}
