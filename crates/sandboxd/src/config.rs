//! The daemon's one configuration: flags, each with an environment variable and a documented default.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// sandboxd: a self-hostable sandbox platform for AI agents.
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (API, proxy, sandboxes) in the foreground.
    Serve(Box<ServeConfig>),
    /// An MCP server on stdio (for desktop agents and IDEs) with the tools of a running daemon's
    /// `/mcp` endpoint: create_sandbox, run_command, run_code, read_file, write_file, list_files,
    /// expose_port, list_sandboxes, delete_sandbox.
    Mcp(McpConfig),
    /// The daemon's configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check this host for everything `serve` uses — kernel, cgroups and their controllers, user
    /// namespaces, overlayfs, idmapped mounts, the disk-quota backend it would pick and why,
    /// nftables, the agent, the data dir's space, the listen address, the gVisor tier, the limits on
    /// tasks and open files against `--net-slots` — each ok,
    /// degraded or missing with its fix. Takes `serve`'s flags and config file. Exit status 1 when
    /// sandboxes cannot run at all.
    Doctor(Box<DoctorConfig>),
    /// Write a backup of the data dir, while the daemon serves: the store as of one moment, the
    /// daemon's identity and admin token, certificates, the object store, every volume's files and
    /// the layers of images and templates (named, or carried with `--with-layers`), in one tar
    /// archive compressed by its name (`.tar.zst`, `.tar.gz`, `.tar`). Takes `serve`'s flags and
    /// config file (for the data dir).
    Backup(Box<BackupConfig>),
    /// Put a backup back into an empty data dir; the daemon started on it then adopts what it finds
    /// and cleans up what ran, as after a crash.
    Restore(Box<RestoreConfig>),
}

/// `sandboxd backup`.
#[derive(Debug, clap::Args)]
pub struct BackupConfig {
    /// The archive to write (it must not exist).
    #[arg(long)]
    pub to: PathBuf,
    /// Carry the layers of images and templates in the archive. Without it the archive names
    /// them (by reference) and is small: a restore then takes them from a data dir that holds
    /// them (`restore --layers-from`).
    #[arg(long)]
    pub with_layers: bool,
    #[command(flatten)]
    pub serve: ServeConfig,
}

/// `sandboxd restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreConfig {
    /// The archive `sandboxd backup` wrote.
    #[arg(long)]
    pub from: PathBuf,
    /// Where the layers of a backup made without `--with-layers` are taken from: a data dir that
    /// holds them (the one backed up, or one restored from a backup made `--with-layers`). Each is
    /// checked to be there before anything is written.
    #[arg(long, value_name = "DIR")]
    pub layers_from: Option<PathBuf>,
    #[command(flatten)]
    pub serve: ServeConfig,
}

/// `sandboxd doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorConfig {
    /// One JSON object instead: `{"checks": [{name, status, detail, fix}], "canRun", "summary"}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub serve: ServeConfig,
}

/// `sandboxd config`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the configuration `serve` would run with, given the same flags, environment and
    /// config file: every key with its value and where it came from (flag, environment, file,
    /// default), as TOML a config file could hold. Secrets are masked.
    Show(Box<ShowConfig>),
}

/// `sandboxd config show`.
#[derive(Debug, clap::Args)]
pub struct ShowConfig {
    /// One JSON object instead: `{"file": PATH|null, "settings": [{key, value, source}]}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub serve: ServeConfig,
}

/// `sandboxd mcp`.
#[derive(Debug, clap::Args)]
pub struct McpConfig {
    /// The daemon's URL.
    #[arg(long, env = "SB_API_URL", default_value = "http://127.0.0.1:21212")]
    pub api_url: String,
    /// An API key of the daemon (or its admin token).
    #[arg(long, env = "SB_PAT_TOKEN", hide_env_values = true)]
    pub token: String,
}

/// `sandboxd serve`.
#[derive(Debug, Clone, Parser)]
pub struct ServeConfig {
    /// The config file: every flag below is also a key of it, with `_` for `-` (`data_dir =
    /// "/var/lib/sandboxd"`); a flag or its environment variable wins over the file. Default:
    /// /etc/sandboxd/config.toml when it exists. `sandboxd config show` prints what applies.
    #[arg(long, env = "SB_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory: store, sandboxes' writable layers, admin token.
    #[arg(long, env = "SB_DATA_DIR", default_value = "./.sandboxd")]
    pub data_dir: PathBuf,
    /// Address of the API and the proxy.
    #[arg(long, env = "SB_LISTEN", default_value = "127.0.0.1:21212")]
    pub listen: SocketAddr,
    /// How the log is written to stderr: `text` for a terminal, `json` for journald and log
    /// shippers (one object a line; a line logged while serving a request lists the `request`
    /// span, with its `request_id` and `sandbox`, under `spans`). `SB_LOG` filters it (default:
    /// info).
    #[arg(long, env = "SB_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Export traces to this OpenTelemetry collector (its OTLP/HTTP base URL, e.g.
    /// `http://127.0.0.1:4318`; `/v1/traces` is added): each API request a span, each step of its
    /// flow (store writes, runtime work, agent calls) a child span. Batched every 5 s
    /// (`OTEL_BSP_SCHEDULE_DELAY`, milliseconds). Default: no traces.
    #[arg(long, env = "SB_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Domain of sandbox URLs: `http://{port}-{id}.{domain}:{port of --listen}`.
    #[arg(long, env = "SB_DOMAIN", default_value = "localhost")]
    pub domain: String,
    /// The static in-sandbox agent binary (default: next to this binary, or the build's static one).
    #[arg(long, env = "SB_AGENT_BIN")]
    pub agent_bin: Option<PathBuf>,
    /// Lifetime of sandboxes whose create names none, seconds.
    #[arg(long, env = "SB_DEFAULT_TIMEOUT", default_value_t = 300)]
    pub default_timeout: u64,
    /// Cgroup under which every sandbox gets its own.
    #[arg(long, env = "SB_CGROUP_PARENT", default_value = "sandboxd")]
    pub cgroup_parent: String,
    /// Network slots (one /30 each from 10.201.0.0/16; at most 16384).
    #[arg(long, env = "SB_NET_SLOTS", default_value_t = 8000)]
    pub net_slots: u32,
    /// First network slot this daemon uses (run several daemons on one host with disjoint ranges).
    #[arg(long, env = "SB_NET_SLOT_BASE", default_value_t = 0)]
    pub net_slot_base: u32,
    /// Host ports for `tcp` exposures, `FIRST-LAST`.
    #[arg(long, env = "SB_HOST_PORTS", default_value = "22000-23000")]
    pub host_ports: String,
    /// Sandboxes one API key may hold at once (deleting, failed and lost ones do not count); past it a
    /// create is 429 with Retry-After and makes nothing. 0: no limit.
    #[arg(long, env = "SB_MAX_SANDBOXES_PER_KEY", default_value_t = 0)]
    pub max_sandboxes_per_key: u32,
    /// Creates of one API key that may be in flight at once; past it 429 with Retry-After. 0: no
    /// limit.
    #[arg(long, env = "SB_MAX_CONCURRENT_CREATES_PER_KEY", default_value_t = 0)]
    pub max_concurrent_creates_per_key: u32,
    /// How long an Idempotency-Key attempt may run before a retry may take over, milliseconds.
    #[arg(long, env = "SB_IDEMPOTENCY_PENDING_TTL_MS", default_value_t = 120_000)]
    pub idempotency_pending_ttl_ms: u64,
    /// How long a completed Idempotency-Key request is replayed (and its key kept), seconds.
    #[arg(long, env = "SB_IDEMPOTENCY_REPLAY_TTL_SECS", default_value_t = 86_400)]
    pub idempotency_replay_ttl_secs: u64,
    /// How often expired sandboxes are swept, milliseconds.
    #[arg(long, env = "SB_SWEEP_INTERVAL_MS", default_value_t = 1000)]
    pub sweep_interval_ms: u64,
    /// How often the usage of sandboxes in use is sampled into their metrics history (E2B's
    /// `get_metrics`, Daytona's metric series), milliseconds; 0: no history, a sample taken at
    /// each request only. Sandboxes nobody uses are not sampled.
    #[arg(long, env = "SB_METRICS_INTERVAL_MS", default_value_t = 5000)]
    pub metrics_interval_ms: u64,
    /// How often the reconcilers sweep for records stuck in a transitional state, seconds (0: only at
    /// start-up and on `POST /v1/admin/reconcile`).
    #[arg(long, env = "SB_RECONCILE_INTERVAL_SECS", default_value_t = 30)]
    pub reconcile_interval_secs: u64,
    /// How long a create, delete or exposure may stay unfinished before a reconciler resolves it,
    /// seconds.
    #[arg(long, env = "SB_RECONCILE_DEADLINE_SECS", default_value_t = 60)]
    pub reconcile_deadline_secs: u64,
    /// How long a started sandbox's agent has to report ready before the sandbox is failed,
    /// milliseconds.
    #[arg(long, env = "SB_READY_TIMEOUT_MS", default_value_t = 30_000)]
    pub ready_timeout_ms: u64,
    /// Also serve the API and the proxy over TLS on this address (default: off). The certificate is
    /// chosen by SNI from `<data-dir>/certs/<hostname>.crt` and `.key` (PEM); an SNI name without one
    /// fails the handshake. The TLS listener also serves the object store Daytona's SDKs upload
    /// builds' local files to, at `/object-storage` (`<data-dir>/objects`).
    #[arg(long, env = "SB_TLS_LISTEN")]
    pub tls_listen: Option<SocketAddr>,
    /// How sandboxes' disk is limited: `auto` (XFS project quotas where the data dir has them, else
    /// btrfs — the data dir's own, or a sparse pool file `<data-dir>/runtime/disk.btrfs` loop-mounted
    /// by the daemon — else no limit), `project`, `btrfs` (fail to start without), or `off`.
    #[arg(long, env = "SB_DISK_BACKEND", default_value = "auto")]
    pub disk_backend: sandboxd_runtime::quota::DiskMode,
    /// Size of the sparse btrfs pool file when one has to be made, MiB (an existing one keeps its size).
    #[arg(long, env = "SB_DISK_POOL_MB", default_value_t = sandboxd_runtime::quota::DEFAULT_POOL_FILE_MB)]
    pub disk_pool_mb: u64,
    /// The `runsc` binary of the gVisor tier (isolation "gvisor"); by default the first `runsc` on
    /// PATH. Without a usable one (runsc from bookworm-backports, 2024 or later) the daemon offers
    /// the namespace tier alone and says so at start.
    #[arg(long, env = "SB_RUNSC")]
    pub runsc: Option<PathBuf>,
    /// The isolation tier of a create that names none: `namespace` (the host's kernel behind
    /// namespaces) or `gvisor` (gVisor's user-space kernel in between; needs runsc). The daemon
    /// refuses to start with a default it cannot offer.
    #[arg(long, env = "SB_DEFAULT_ISOLATION", default_value = "namespace", value_parser = parse_isolation)]
    pub default_isolation: sandboxd_runtime::Isolation,
    /// The port of the egress gateway, which the HTTP and HTTPS of sandboxes that use secrets or
    /// network rules go through (on every address; it answers only those sandboxes). Default: the
    /// port this data dir's gateway had, else a free one above the kernel's ephemeral ports and
    /// outside --host-ports (kept in the data dir).
    #[arg(long, env = "SB_EGRESS_GATEWAY_PORT")]
    pub egress_gateway_port: Option<u16>,
    /// A PEM file of roots the egress gateway trusts for upstream hosts, besides the host's system
    /// bundle (/etc/ssl/certs/ca-certificates.crt): a private CA your services use.
    #[arg(long, env = "SB_EGRESS_ROOTS")]
    pub egress_roots: Option<PathBuf>,
    /// The key secrets' values are sealed with at rest: a file of mode 0600 holding 64 hexadecimal
    /// characters (`openssl rand -hex 32`) or 32 bytes. Default: `<data-dir>/secrets.key`, made at
    /// the first start (and carried by `sandboxd backup`); a key given here must exist.
    #[arg(long, env = "SB_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Disk limit of a sandbox whose create names none (`diskMB`), MiB.
    #[arg(long, env = "SB_DEFAULT_DISK_MB", default_value_t = sandboxd_service::sandboxes::DEFAULT_DISK_MB)]
    pub default_disk_mb: u64,
    /// Largest disk limit a create may ask for, MiB.
    #[arg(long, env = "SB_MAX_DISK_MB", default_value_t = 100 * 1024)]
    pub max_disk_mb: u64,
    /// Size of unpacked image layers past which images no sandbox or template uses are evicted,
    /// least recently used first, MiB (0: no limit).
    #[arg(long, env = "SB_IMAGE_CACHE_MAX_MB", default_value_t = 50 * 1024)]
    pub image_cache_max_mb: u64,
    /// How long a create from a template waits for the template's ready command to succeed,
    /// seconds (then the create fails and the sandbox is deleted).
    #[arg(long, env = "SB_READY_CMD_TIMEOUT_SECS", default_value_t = 60)]
    pub ready_cmd_timeout_secs: u64,
    /// A pull-through mirror tried before a registry, `REGISTRY=URL` (repeatable, e.g.
    /// `docker.io=http://127.0.0.1:5000`); the registry itself is asked when the mirror fails.
    #[arg(
        long = "registry-mirror",
        env = "SB_REGISTRY_MIRRORS",
        value_delimiter = ','
    )]
    pub registry_mirrors: Vec<String>,
    /// A warm pool `TEMPLATE=N` (repeatable): keep N sandboxes of the template booted and idle, so a
    /// create that takes one answers without booting (creates that ask for a network policy, a
    /// disk limit, volumes or secrets of their own are made cold). Overrides the size the pool was
    /// given through `/v1/warm-pools`; `TEMPLATE=0` empties it. Default: no pools.
    #[arg(
        long = "warm-pool",
        env = "SB_WARM_POOLS",
        value_delimiter = ',',
        value_parser = parse_warm_pool
    )]
    pub warm_pools: Vec<(String, u32)>,
    /// A registry `HOST[:PORT]` that may be reached over plain HTTP (repeatable); loopback registries
    /// always may, every other one only over HTTPS.
    #[arg(
        long = "insecure-registry",
        env = "SB_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// A resolver `ADDR[:PORT]` (port 53 by default; repeatable, asked in order) that the DNS
    /// forwarders of sandboxes with domain names in `allowOut`/`denyOut` ask; default: the
    /// nameservers of the host's resolver configuration.
    #[arg(
        long = "dns-upstream",
        env = "SB_DNS_UPSTREAMS",
        value_delimiter = ',',
        value_parser = parse_dns_upstream
    )]
    pub dns_upstreams: Vec<std::net::SocketAddr>,
    /// Allow `*.` wildcard custom domains (default: off).
    #[arg(long, env = "SB_ALLOW_WILDCARD_DOMAINS")]
    pub allow_wildcard_domains: bool,
    /// How often the webhook sender looks for due deliveries besides right after each event,
    /// milliseconds.
    #[arg(long, env = "SB_WEBHOOK_POLL_MS", default_value_t = 1000)]
    pub webhook_poll_ms: u64,
    /// Timeout of one webhook HTTP attempt, seconds.
    #[arg(long, env = "SB_WEBHOOK_TIMEOUT_SECS", default_value_t = 10)]
    pub webhook_timeout_secs: u64,
    /// First delay of the slow tail after a webhook's 3 quick attempts failed (doubling, at most 10
    /// minutes), seconds.
    #[arg(long, env = "SB_WEBHOOK_TAIL_SECS", default_value_t = 30)]
    pub webhook_tail_secs: u64,
    /// How long after an event its webhook delivery is retried at all before it is marked failed,
    /// seconds.
    #[arg(long, env = "SB_WEBHOOK_MAX_TOTAL_SECS", default_value_t = 3600)]
    pub webhook_max_total_secs: u64,
    /// Cluster mode: the address this node's cluster RPC listens on (peers' Raft traffic, joins).
    /// Without it the daemon is a single node and every other cluster flag is refused.
    #[arg(long, env = "SB_CLUSTER_LISTEN")]
    pub cluster_listen: Option<SocketAddr>,
    /// Cluster mode: a file holding the secret every member shares (at least 16 characters); every
    /// RPC carries it and a call without it is refused and logged.
    #[arg(long, env = "SB_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Cluster mode: make this node a new cluster of one (the first node, once). A node that is a
    /// member already ignores it.
    #[arg(long, env = "SB_CLUSTER_INIT", conflicts_with = "join")]
    pub cluster_init: bool,
    /// Cluster mode: join the cluster through the member whose cluster listener is at this address
    /// (added as a learner, then as a voter). A node that is a member already ignores it.
    #[arg(long, env = "SB_JOIN")]
    pub join: Option<String>,
    /// Cluster mode: the `host:port` peers reach this node's cluster listener at (default: the
    /// address of --cluster-listen).
    #[arg(long, env = "SB_CLUSTER_ADVERTISE")]
    pub cluster_advertise: Option<String>,
    /// Cluster mode: the `host:port` other members forward API calls to (default: the address of
    /// --listen).
    #[arg(long, env = "SB_API_ADVERTISE")]
    pub api_advertise: Option<String>,
    /// Cluster mode: how long a node's lease holds, milliseconds (renewed every third of it).
    #[arg(long, env = "SB_CLUSTER_LEASE_MS", default_value_t = 3000)]
    pub cluster_lease_ms: u64,
    /// Cluster mode: how long past its lease a node is marked lost (its sandboxes `lost`, their names
    /// released), milliseconds.
    #[arg(long, env = "SB_CLUSTER_GRACE_MS", default_value_t = 5000)]
    pub cluster_grace_ms: u64,
    /// Cluster mode: how long a write waits for the log to commit before answering 503
    /// `cluster_unavailable`, milliseconds.
    #[arg(long, env = "SB_CLUSTER_WRITE_TIMEOUT_MS", default_value_t = 5000)]
    pub cluster_write_timeout_ms: u64,
}

/// `ADDR[:PORT]` of a resolver: an IPv4 or IPv6 address (`[v6]:PORT` with a port), port 53 unless
/// given.
fn parse_dns_upstream(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = text.parse::<std::net::SocketAddr>() {
        return Ok(addr);
    }
    text.parse::<std::net::IpAddr>()
        .map(|ip| std::net::SocketAddr::new(ip, 53))
        .map_err(|_| format!("{text:?} is not a resolver address (ADDR or ADDR:PORT, [V6]:PORT)"))
}

impl ServeConfig {
    /// The registry settings from `--registry-mirror` and `--insecure-registry`.
    pub fn registry(&self) -> anyhow::Result<sandboxd_images::RegistryConfig> {
        let mut registry = sandboxd_images::RegistryConfig::default();
        for mirror in &self.registry_mirrors {
            registry.add_mirror(mirror)?;
        }
        for host in &self.insecure_registries {
            registry.add_insecure(host)?;
        }
        Ok(registry)
    }

    /// The `--host-ports` range.
    pub fn host_ports(&self) -> anyhow::Result<std::ops::RangeInclusive<u16>> {
        let parsed = self.host_ports.split_once('-').and_then(|(a, b)| {
            Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
        });
        match parsed {
            Some((a, b)) if a > 0 && a <= b => Ok(a..=b),
            _ => anyhow::bail!(
                "--host-ports must be FIRST-LAST with 0 < FIRST <= LAST <= 65535, got {:?}",
                self.host_ports
            ),
        }
    }

    /// The agent binary to use: the flag, else the static build of a source checkout, else
    /// `sandboxd-agent` beside this executable, else where the Debian package puts it
    /// (`<prefix>/lib/sandboxd/sandboxd-agent` for `<prefix>/bin/sandboxd`).
    pub fn agent_binary(&self) -> Option<PathBuf> {
        if let Some(p) = &self.agent_bin {
            return Some(p.clone());
        }
        let exe = std::env::current_exe().ok()?;
        let dir = exe.parent()?;
        let up = dir.parent()?;
        let candidates = [
            // target/<profile>/sandboxd → target/x86_64-unknown-linux-gnu/release/sandboxd-agent
            // (the static build first: it works in any root filesystem).
            up.join("x86_64-unknown-linux-gnu/release/sandboxd-agent"),
            dir.join("sandboxd-agent"),
            up.join("lib/sandboxd/sandboxd-agent"),
        ];
        candidates.into_iter().find(|p| p.is_file())
    }
}

/// `TEMPLATE=N`.
fn parse_warm_pool(text: &str) -> Result<(String, u32), String> {
    let (template, size) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not TEMPLATE=N"))?;
    let size = size
        .parse::<u32>()
        .map_err(|e| format!("the size of warm pool {template:?}: {e}"))?;
    if template.is_empty() || size > sandboxd_service::warm_pool::MAX_POOL_SIZE {
        return Err(format!(
            "{text:?}: a warm pool names a template and holds at most {} sandboxes",
            sandboxd_service::warm_pool::MAX_POOL_SIZE
        ));
    }
    Ok((template.to_string(), size))
}

fn parse_isolation(text: &str) -> Result<sandboxd_runtime::Isolation, String> {
    text.parse()
        .map_err(|e: sandboxd_runtime::UnknownIsolation| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dns_upstream_is_an_address_with_port_53_unless_it_names_one() {
        for (text, addr) in [
            ("10.0.0.53", "10.0.0.53:53"),
            ("10.0.0.53:5353", "10.0.0.53:5353"),
            ("2001:db8::1", "[2001:db8::1]:53"),
            ("[2001:db8::1]:5353", "[2001:db8::1]:5353"),
        ] {
            assert_eq!(
                parse_dns_upstream(text),
                Ok(addr.parse().unwrap()),
                "{text}"
            );
        }
        for bad in [
            "",
            "dns.example.com",
            "10.0.0.53:",
            "10.0.0.53:99999",
            "[::1]",
        ] {
            assert!(parse_dns_upstream(bad).is_err(), "{bad:?}");
        }
    }
}
