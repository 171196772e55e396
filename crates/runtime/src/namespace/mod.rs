//! The namespace runtime: the embedded default isolation tier.
//!
//! A sandbox is one process tree: its init (the agent, `sandboxd-agent boot`) is cloned into new mount,
//! pid, net, uts and ipc namespaces, builds its overlay root and pivots into it, then unshares a user
//! namespace whose root maps to an unprivileged host id (see [`NamespaceConfig::id_map_base`]). The
//! runtime drives the boot handshake (`sandboxd_envd::boot`) and meanwhile puts the init in its cgroup
//! ([`crate::cgroup`]) and wires its veth pair ([`net`]); only then does the init run anything. Its
//! cgroup (on v1) and its network namespace are usually spares made ahead of need
//! ([`NamespaceConfig::spares`]): the group renamed, the namespace entered right after the clone.
//!
//! The agent listens on a unix socket the runtime created in the sandbox's host directory and passed
//! down as a descriptor: the daemon always reaches it, with or without network, and no other sandbox can.
//!
//! The other way round, the agent calls home (`sandboxd_envd::callback`): with
//! [`NamespaceConfig::callback_dir`] set, that host directory is bound read-only into every sandbox at
//! `/.sandboxd/callback` (`sandboxd_envd::callback::SANDBOX_DIR`) and the agent is told the socket path
//! inside it. The directory is bound, not the socket, so a restarted daemon's re-created socket is
//! visible to sandboxes that were already running. It sits under `/.sandboxd` (beside the agent binary)
//! because the agent mounts a fresh tmpfs on `/run` after the binds, which would hide it there. The
//! socket file must be writable by the sandbox's mapped root (mode 0666): connecting to a unix socket
//! needs write permission on it, and the directory must be searchable (0755).
//!
//! Every sandbox's writable layer (`upper` and `work`) lives in its own quota'd place under
//! `<state_dir>/layers/<id>/` when the runtime has a disk backend ([`crate::quota`], chosen at
//! [`NamespaceRuntime::new`] from [`NamespaceConfig::disk`]); the sandbox's directory then holds
//! symbolic links to it, so [`state::SandboxPaths`] stays the one place naming upper and work, and a
//! sandbox made without a quota (by an older daemon, or with the backend off) keeps plain
//! directories there and is found, started and destroyed the same way. A spec with
//! [`crate::ResourceLimits::disk_mb`] set is refused when there is no backend to enforce it.
//!
//! Sandboxes outlive the process that made them; [`state`] records enough for a fresh process to find and
//! adopt them ([`crate::Runtime::list`], [`crate::Runtime::inspect`]).

pub(crate) mod boot;
pub mod dns;
pub mod egress;
mod halt;
pub mod ids;
pub mod image_root;
pub mod net;
mod netns;
pub mod process;
pub mod rootfs;
pub mod state;

use crate::cgroup::{CgroupManager, Limits};
use crate::quota::{DiskBackend, DiskConfig, DiskQuota, DiskUsage};
use crate::{
    validate_id, AgentEndpoint, EgressLists, Isolation, Runtime, RuntimeError, RuntimeState,
    SandboxInfo, SandboxSpec, WritableLayer,
};
use net::Network;
use state::{Persisted, SandboxPaths};
use std::net::Ipv4Addr;
use std::os::unix::fs::{lchown, symlink, DirBuilderExt};
use std::path::{Path, PathBuf};

/// How the namespace runtime is set up on this host.
#[derive(Debug, Clone)]
pub struct NamespaceConfig {
    /// Directory for templates and per-sandbox state (created if missing).
    pub state_dir: PathBuf,
    /// The static `sandboxd-agent` binary, bound read-only into every sandbox.
    pub agent_binary: PathBuf,
    /// Name of the cgroup under which every sandbox gets its own.
    pub cgroup_parent: String,
    /// First address of the sandbox subnet (4 addresses per slot).
    pub subnet_base: Ipv4Addr,
    /// Number of network slots.
    pub slots: u32,
    /// Host uid/gid the shared layers' root is stored as, and the root of a sandbox without an id
    /// range of its own; a sandbox with range `r` is rooted at `id_map_base + 65536 · (r + 1)`
    /// ([`ids`]).
    pub id_map_base: u32,
    /// Host directory holding the daemon's call-home socket (`daemon.sock`), bound read-only into every
    /// sandbox; `None` (the default): sandboxes are not told where to call home and report nothing.
    pub callback_dir: Option<PathBuf>,
    /// The disk quota of sandboxes' writable layers; [`DiskConfig::default`] (auto: project quotas,
    /// else btrfs, else none) by default.
    pub disk: DiskConfig,
    /// What the host ends of this runtime's veth pairs are named after: slot `n`'s is
    /// `<ifname_prefix><n>`. Every name starts with `sbh` (the firewall's rules match `sbh*`); a
    /// daemon makes its own from its id ([`ifname_prefix`]) so no two daemons' names meet. Default
    /// `sbh`.
    pub ifname_prefix: String,
    /// The resolvers the DNS forwarders of sandboxes with domain names in their lists ask, in
    /// order ([`dns`]); empty (the default): the nameservers of the host's resolver configuration
    /// as each forwarder starts ([`dns::host_upstreams`]).
    pub dns_upstreams: Vec<std::net::SocketAddr>,
    /// How many of each kernel object a boot needs are kept made ahead of need: empty cgroups,
    /// which a boot renames instead of making its own (on cgroup v1; v2 cannot rename a group),
    /// and network namespaces, which its init enters instead of having `clone` make one. Default
    /// 2; 0: every boot makes its own.
    pub spares: usize,
}

/// The host-interface prefix of daemon `id`: `sbh` followed by the id's letters. Ids are letters and
/// slot numbers digits, so two daemons' names never meet, nor those of the id-less prefix `sbh`.
pub fn ifname_prefix(id: &str) -> String {
    format!("sbh{id}")
}

impl NamespaceConfig {
    /// Defaults for a state directory and an agent binary.
    pub fn new(state_dir: impl Into<PathBuf>, agent_binary: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            agent_binary: agent_binary.into(),
            cgroup_parent: "sandboxd".into(),
            subnet_base: Ipv4Addr::new(10, 201, 0, 0),
            slots: 16384,
            id_map_base: 100_000,
            callback_dir: None,
            disk: DiskConfig::default(),
            ifname_prefix: "sbh".into(),
            dns_upstreams: Vec::new(),
            spares: 2,
        }
    }
}

/// The namespace runtime.
pub struct NamespaceRuntime {
    pub(crate) config: NamespaceConfig,
    pub(crate) cgroups: CgroupManager,
    pub(crate) net: Network,
    pub(crate) template: rootfs::Template,
    quota: std::sync::Arc<DiskQuota>,
    volumes: std::sync::Arc<crate::volumes::VolumeStore>,
    ids: ids::IdRanges,
    pub(crate) forwarders: dns::Forwarders,
    /// Network namespaces made ahead of need ([`netns`]); `None` with `spares` 0.
    pub(crate) netns_spares: Option<crate::spares::Spares<std::os::fd::OwnedFd>>,
    /// The mounts of halted sandboxes, held until their destroy ([`halt`]).
    held_mounts: halt::HeldMounts,
}

impl NamespaceRuntime {
    /// Checks the host (root, cgroups, agent binary), builds the `base` template if needed, chooses
    /// and prepares the disk quota backend ([`crate::quota`]), opens the host's netlink connection and puts the host-side firewall in place (sandboxes are kept off the
    /// host's own services from the first one on). Must be called inside a tokio runtime.
    pub async fn new(config: NamespaceConfig) -> Result<Self, RuntimeError> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err(RuntimeError::Host(
                "the namespace runtime must run as root".into(),
            ));
        }
        if !config.agent_binary.is_file() {
            return Err(RuntimeError::Host(format!(
                "agent binary {} not found",
                config.agent_binary.display()
            )));
        }
        let cgroups = CgroupManager::detect(&config.cgroup_parent)?.with_spares(config.spares);
        let netns_spares = match config.spares {
            0 => None,
            n => netns::spares(n)
                .inspect_err(|e| tracing::warn!(error = %e, "no spare network namespaces; each boot makes its own"))
                .ok(),
        };
        for dir in [config.state_dir.clone(), config.state_dir.join("sandboxes")] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(RuntimeError::io("create", &dir))?;
        }
        let templates = config.state_dir.join("templates");
        let id_base = config.id_map_base;
        let template =
            tokio::task::spawn_blocking(move || rootfs::ensure_base(&templates, id_base))
                .await
                .map_err(|e| RuntimeError::Host(format!("template build panicked: {e}")))??;
        let (state_dir, disk) = (config.state_dir.clone(), config.disk);
        let quota = tokio::task::spawn_blocking(move || DiskQuota::open(&state_dir, &disk))
            .await
            .map_err(|e| RuntimeError::Host(format!("disk quota setup panicked: {e}")))??;
        let net = Network::new(config.subnet_base, config.slots, &config.ifname_prefix)?;
        egress::guard_host().await?;
        let ids = ids::IdRanges::probe(config.id_map_base, &template.lower);
        let quota = std::sync::Arc::new(quota);
        let volumes = std::sync::Arc::new(crate::volumes::VolumeStore::new(
            quota.clone(),
            config.id_map_base,
            config.state_dir.join(crate::volumes::RESTORED_DIR),
        ));
        let runtime = Self {
            config,
            cgroups,
            net,
            template,
            quota,
            volumes,
            ids,
            forwarders: dns::Forwarders::default(),
            netns_spares,
            held_mounts: Default::default(),
        };
        runtime.restart_forwarders().await;
        Ok(runtime)
    }

    /// The cgroup manager (for stats, freezing).
    pub fn cgroups(&self) -> &CgroupManager {
        &self.cgroups
    }

    /// Removes the host interfaces named by this runtime's prefix whose slot no sandbox of its own runs
    /// on (left by a sandbox whose record went while it ran, or a boot cut short), with their egress
    /// rules; returns their slots. Call at start, before any create. Interfaces of other daemons are
    /// never touched: their names are not of this prefix. An id-less runtime (prefix `sbh`, a data
    /// dir from before daemon ids) cannot tell its own from those of other id-less runtimes on the
    /// host, so it removes nothing.
    pub async fn reclaim_orphans(&self) -> Result<Vec<u32>, RuntimeError> {
        if self.config.ifname_prefix == ifname_prefix("") {
            return Ok(Vec::new());
        }
        let running: std::collections::HashSet<u32> = self
            .list()
            .await?
            .into_iter()
            .filter(|s| s.state == RuntimeState::Running)
            .map(|s| s.spec.net_slot)
            .collect();
        let mut reclaimed = Vec::new();
        for slot in self.net.interfaces().await? {
            if running.contains(&slot) {
                continue;
            }
            if let Ok(addrs) = self.net.addrs(slot) {
                egress::revoke(addrs.sandbox).await;
            }
            self.net.detach(slot).await?;
            reclaimed.push(slot);
        }
        Ok(reclaimed)
    }

    /// Whether sandboxes with an id range get host ids of their own on this host ([`ids`]).
    pub fn id_ranges_supported(&self) -> bool {
        self.ids.supported()
    }

    /// The disk quota backend chosen at start.
    pub fn disk_backend(&self) -> DiskBackend {
        self.quota.backend()
    }

    /// Where sandbox `id`'s quota'd writable layer lives (or would) when there is a disk backend.
    pub fn layer_dir(&self, id: &str) -> PathBuf {
        self.quota.layer(id)
    }

    /// The resolver `spec`'s sandbox is given: its own DNS forwarder, on the host end of its pair,
    /// when its lists name domains; else `None` (the host's resolvers).
    fn nameserver(&self, spec: &SandboxSpec) -> Result<Option<Ipv4Addr>, RuntimeError> {
        Ok(if spec.has_names() {
            Some(self.net.addrs(spec.net_slot)?.host)
        } else {
            None
        })
    }

    /// Replaces the egress default and lists of running sandbox `p` (network namespace `netns`)
    /// with `lists` and saves its record (see [`Runtime::set_egress_lists`]). Its forwarder is set
    /// first, so the resolver it may be given answers; then its rules, in one `nft` transaction
    /// (a failure there puts the forwarder back and changes nothing else); then its route and
    /// resolver. A tier that reads its network and its resolver once, at boot (`live` false:
    /// gVisor's netstack and cached root), refuses what would need them changed: a change of
    /// whether the lists name domains (its resolver), and a sandbox that could send nothing out
    /// being let out (its default route).
    pub(crate) async fn change_egress(
        &self,
        paths: &SandboxPaths,
        p: &mut Persisted,
        netns: &Path,
        lists: EgressLists,
        live: bool,
    ) -> Result<(), RuntimeError> {
        let id = p.spec.id.clone();
        let old = p.spec.clone();
        let new = old.with_egress(lists);
        if new == old {
            return Ok(());
        }
        if !live && new.has_names() != old.has_names() {
            return Err(RuntimeError::Unsupported(format!(
                "whether sandbox {id}'s lists name domains is fixed in the {} tier (it decides \
                 its resolver): change addresses only, or names only",
                old.isolation
            )));
        }
        if !live && new.may_send_out() && !old.may_send_out() {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {id} was made unable to send anything out, which is fixed in the {} \
                 tier (it has no route): create it with egress or an allow list",
                old.isolation
            )));
        }
        let slot = new.net_slot;
        let addrs = self.net.addrs(slot)?;
        let had_forwarder = self.forwarders.has(&id);
        if new.has_names()
            && !self.forwarders.set_names(
                &id,
                new.egress_allow_names.clone(),
                new.egress_deny_names.clone(),
            )
        {
            self.start_forwarder(&new).await?;
        }
        let rules = if new.needs_egress_rules() {
            egress::allow(&addrs, &new).await
        } else {
            egress::revoke(addrs.sandbox).await;
            Ok(())
        };
        if let Err(e) = rules {
            if had_forwarder {
                let (allow, deny) = (
                    old.egress_allow_names.clone(),
                    old.egress_deny_names.clone(),
                );
                self.forwarders.set_names(&id, allow, deny);
            } else {
                self.forwarders.stop(&id);
            }
            return Err(e);
        }
        if new.may_send_out() != old.may_send_out() {
            self.net
                .set_default_route(slot, netns, new.may_send_out())
                .await?;
        }
        if new.has_names() != old.has_names() {
            let base = p.id_base.unwrap_or(self.config.id_map_base);
            rootfs::write_resolver(&paths.upper(), base, self.nameserver(&new)?)?;
        }
        if !new.has_names() {
            self.forwarders.stop(&id);
        }
        p.spec = new;
        paths.save(p)
    }

    pub(crate) fn paths(&self, id: &str) -> SandboxPaths {
        SandboxPaths::new(&self.config.state_dir.join("sandboxes"), id)
    }

    /// Where sandbox `id`'s memory checkpoint lies while it is paused with memory (gVisor tier):
    /// `<state_dir>/checkpoints/<id>/`, whole or absent.
    pub fn checkpoint_dir(&self, id: &str) -> PathBuf {
        self.config.state_dir.join("checkpoints").join(id)
    }

    pub(crate) fn info(&self, p: &Persisted) -> Result<SandboxInfo, RuntimeError> {
        let paths = self.paths(&p.spec.id);
        let state = match p.observed_state() {
            RuntimeState::Stopped if self.checkpoint_dir(&p.spec.id).is_dir() => {
                RuntimeState::Suspended
            }
            state => state,
        };
        Ok(SandboxInfo {
            state,
            pid: (state == RuntimeState::Running).then_some(p.pid).flatten(),
            net: self.net.addrs(p.spec.net_slot)?,
            agent: AgentEndpoint {
                socket: paths.agent_socket(p.spec.isolation),
                token: p.spec.agent_token.clone(),
            },
            spec: p.spec.clone(),
        })
    }

    pub(crate) fn load(&self, id: &str) -> Result<(SandboxPaths, Persisted), RuntimeError> {
        validate_id(id)?;
        let paths = self.paths(id);
        match paths.load()? {
            Some(p) => Ok((paths, p)),
            None => Err(RuntimeError::NotFound(id.to_string())),
        }
    }
}

impl NamespaceRuntime {
    /// [`Runtime::adopt`], on this thread: renames sandbox `from` to `to` and gives it its new name
    /// inside.
    fn adopt_now(&self, from: &str, to: &str) -> Result<SandboxInfo, RuntimeError> {
        validate_id(to)?;
        let (source, p) = self.load(from)?;
        if p.spec.isolation != Isolation::Namespace {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {from} runs in the {} tier, whose sandboxes cannot be adopted",
                p.spec.isolation
            )));
        }
        let target = self.paths(to);
        // Making the directory is the claim on the new id, as in a create; the rename then replaces
        // the empty directory in one step, and a record read before the rewrite below already
        // names `to` ([`SandboxPaths::load`]).
        match std::fs::create_dir(&target.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(RuntimeError::AlreadyExists(to.to_string()))
            }
            Err(e) => return Err(RuntimeError::io("create", &target.dir)(e)),
        }
        if let Err(e) = std::fs::rename(&source.dir, &target.dir) {
            let _ = std::fs::remove_dir(&target.dir);
            return Err(RuntimeError::io("rename", &source.dir)(e));
        }
        // The record is not rewritten: read under its new directory it already names `to`, its
        // host resources under the name it was made with (a write and an fsync less per claim).
        let (paths, p) = self.load(to)?;
        self.forwarders.rename(from, to);
        // Its name inside, as a create gives it: the files that name it and its UTS namespace's
        // hostname. Its resolver is its slot's, unchanged.
        let base = p.id_base.unwrap_or(self.config.id_map_base);
        rootfs::write_names(&paths.upper(), to, base)?;
        if let Some(pid) = p.live_pid() {
            process::set_hostname(pid, to)?;
        }
        self.info(&p)
    }

    /// The cgroup of sandbox `id`, whose init must be alive ([`RuntimeError::NotFound`] otherwise).
    fn running_cgroup(&self, id: &str) -> Result<crate::cgroup::SandboxCgroup, RuntimeError> {
        let (_, p) = self.load(id)?;
        if p.live_pid().is_none() {
            return Err(RuntimeError::NotFound(id.to_string()));
        }
        Ok(self.cgroups.open(p.key()))
    }
}

/// Runs blocking cgroup file I/O off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::cgroup::CgroupError> + Send + 'static,
) -> Result<T, RuntimeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RuntimeError::Host(format!("cgroup task panicked: {e}")))?
        .map_err(RuntimeError::Cgroup)
}

pub(crate) fn limits(spec: &SandboxSpec) -> Limits {
    Limits {
        memory_bytes: Some(spec.limits.memory_mb.saturating_mul(1024 * 1024)),
        cpu_millis: Some(spec.limits.cpu_millis),
        pids_max: Some(spec.limits.pids_max),
    }
}

/// The disk limit of `spec` in bytes; `None` for none (`disk_mb` 0).
fn disk_limit(spec: &SandboxSpec) -> Option<u64> {
    (spec.limits.disk_mb > 0).then(|| spec.limits.disk_mb.saturating_mul(1024 * 1024))
}

pub(crate) fn mkdir_owned(path: &Path, mode: u32, owner: Option<u32>) -> Result<(), RuntimeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(RuntimeError::io("create", path))?;
    if let Some(owner) = owner {
        lchown(path, Some(owner), Some(owner)).map_err(RuntimeError::io("chown", path))?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl Runtime for NamespaceRuntime {
    fn volumes(&self) -> Result<std::sync::Arc<crate::volumes::VolumeStore>, RuntimeError> {
        Ok(self.volumes.clone())
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<SandboxInfo, RuntimeError> {
        validate_id(&spec.id)?;
        if spec.image.is_none() && spec.template != "base" {
            return Err(RuntimeError::UnknownTemplate(spec.template.clone()));
        }
        self.net.addrs(spec.net_slot)?;
        let limit = disk_limit(spec);
        if limit.is_some() && self.quota.backend() == DiskBackend::Off {
            return Err(RuntimeError::Unsupported(format!(
                "a disk limit of {} MiB: this host has no disk quota backend",
                spec.limits.disk_mb
            )));
        }
        let paths = self.paths(&spec.id);
        // Creating the directory is the claim on the id: exactly one caller succeeds.
        match std::fs::DirBuilder::new().mode(0o700).create(&paths.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(RuntimeError::AlreadyExists(spec.id.clone()))
            }
            Err(e) => return Err(RuntimeError::io("create", &paths.dir)(e)),
        }
        let storage = self.config.id_map_base;
        // Set once this call made the layer: only then is it ours to remove on failure.
        let mut layer_made = false;
        let prepared = (|| {
            // A gVisor sandbox's files are the storage range's ids: runsc maps its root to one
            // range for the root and the shared layers alike ([`crate::gvisor`]).
            let range = spec
                .id_range
                .filter(|_| spec.isolation == Isolation::Namespace);
            let base = self.ids.base_of(range)?;
            if let Some(image) = spec.image.as_ref().filter(|i| !i.on_base) {
                image_root::ensure_top(&self.config.state_dir.join("image-tops"), image, storage)?;
            }
            match self.quota.create(&spec.id, limit)? {
                Some(layer) => {
                    layer_made = true;
                    let (upper, work) = (layer.join("upper"), layer.join("work"));
                    mkdir_owned(&upper, 0o755, Some(base))?;
                    mkdir_owned(&work, 0o700, None)?;
                    symlink(&upper, paths.upper())
                        .map_err(RuntimeError::io("link", paths.upper()))?;
                    symlink(&work, paths.work()).map_err(RuntimeError::io("link", paths.work()))?;
                }
                None => {
                    mkdir_owned(&paths.upper(), 0o755, Some(base))?;
                    mkdir_owned(&paths.work(), 0o700, None)?;
                }
            }
            mkdir_owned(&paths.rootfs(), 0o755, None)?;
            rootfs::personalise(&paths.upper(), &spec.id, base, self.nameserver(spec)?)?;
            let p = Persisted {
                spec: spec.clone(),
                pid: None,
                start_time: None,
                started: false,
                id_base: Some(base),
                generation: 0,
                key: None,
            };
            paths.save(&p)?;
            self.info(&p)
        })();
        if prepared.is_err() {
            if layer_made {
                let _ = self.quota.remove(&spec.id);
            }
            let _ = std::fs::remove_dir_all(&paths.dir);
        }
        prepared
    }

    async fn start(&self, id: &str) -> Result<SandboxInfo, RuntimeError> {
        let (paths, mut p) = self.load(id)?;
        if p.live_pid().is_some() {
            return self.info(&p);
        }
        if p.spec.isolation != Isolation::Namespace {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {id} runs in the {} tier, not in namespaces",
                p.spec.isolation
            )));
        }
        let pid = self
            .boot(
                &paths,
                &p.spec,
                p.id_base.unwrap_or(self.config.id_map_base),
            )
            .await?;
        p.pid = Some(pid);
        p.start_time = process::start_time(pid);
        p.started = true;
        if let Err(e) = paths.save_init(pid, p.start_time) {
            let _ = self.kill(&p).await;
            return Err(e);
        }
        process::reap_when_exited(pid);
        self.info(&p)
    }

    async fn stop(&self, id: &str) -> Result<(), RuntimeError> {
        let (_, p) = self.load(id)?;
        self.kill(&p).await
    }

    async fn slot_free(&self, slot: u32) -> Result<bool, RuntimeError> {
        self.net.slot_free(slot).await
    }

    async fn halt(&self, id: &str) -> Result<(), RuntimeError> {
        validate_id(id)?;
        match self.paths(id).load()? {
            Some(p) => self.halt_recorded(&p).await,
            None => Ok(()),
        }
    }

    async fn destroy(&self, id: &str) -> Result<(), RuntimeError> {
        validate_id(id)?;
        let paths = self.paths(id);
        let key = if let Some(p) = paths.load()? {
            self.kill(&p).await?;
            p.key().to_string()
        } else {
            // A half-created sandbox may have a cgroup but no record.
            let cgroup = self.cgroups.open(id);
            cgroup.kill_all()?;
            cgroup.remove()?;
            id.to_string()
        };
        // The layer first: the directory (with the links to it) is what makes the sandbox known, so
        // a destroy failing here leaves it findable for the retry.
        self.quota.remove(&key)?;
        match tokio::fs::remove_dir_all(&paths.dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RuntimeError::io("remove", &paths.dir)(e)),
        }
    }

    async fn inspect(&self, id: &str) -> Result<Option<SandboxInfo>, RuntimeError> {
        match self.load(id) {
            Ok((_, p)) => self.info(&p).map(Some),
            Err(RuntimeError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn writable_layer(&self, id: &str) -> Result<WritableLayer, RuntimeError> {
        let (paths, p) = self.load(id)?;
        // A quota'd layer is linked from the sandbox's directory; the layer itself is what counts.
        let path = std::fs::canonicalize(paths.upper())
            .map_err(RuntimeError::io("resolve", paths.upper()))?;
        Ok(WritableLayer {
            path,
            id_base: p.id_base.unwrap_or(self.config.id_map_base),
        })
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        let cgroup = self.running_cgroup(id)?;
        blocking(move || cgroup.freeze()).await
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        let cgroup = self.running_cgroup(id)?;
        blocking(move || cgroup.thaw()).await
    }

    async fn disk_usage(&self, id: &str) -> Result<DiskUsage, RuntimeError> {
        let (_, p) = self.load(id)?;
        self.quota.usage(p.key())?.ok_or_else(|| {
            RuntimeError::Unsupported(format!(
                "sandbox {id} has no quota'd writable layer (disk backend {:?})",
                self.quota.backend()
            ))
        })
    }

    async fn resize(&self, id: &str, limits: &crate::ResourceLimits) -> Result<(), RuntimeError> {
        let (paths, mut p) = self.load(id)?;
        let mut wanted = p.spec.clone();
        wanted.limits = *limits;
        if limits.disk_mb != p.spec.limits.disk_mb {
            let bytes = disk_limit(&wanted).ok_or_else(|| {
                RuntimeError::Unsupported(format!("sandbox {id}'s disk limit cannot be removed"))
            })?;
            if !self.quota.relimit(p.key(), bytes)? {
                return Err(RuntimeError::Unsupported(format!(
                    "sandbox {id}'s disk cannot be limited (no disk quota backend)"
                )));
            }
        }
        if p.live_pid().is_some() {
            let cgroup = self.cgroups.open(p.key());
            let new = self::limits(&wanted);
            blocking(move || cgroup.set_limits(&new)).await?;
        }
        p.spec = wanted;
        paths.save(&p)
    }

    async fn stats(&self, id: &str) -> Result<crate::cgroup::CgroupStats, RuntimeError> {
        let cgroup = self.running_cgroup(id)?;
        blocking(move || cgroup.stats()).await
    }

    async fn connect_from(
        &self,
        id: &str,
        dst: std::net::SocketAddr,
    ) -> Result<tokio::net::TcpStream, RuntimeError> {
        let pid = self
            .inspect(id)
            .await?
            .and_then(|info| info.pid)
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))?;
        let netns = PathBuf::from(format!("/proc/{pid}/ns/net"));
        net::connect_in_netns(&netns, dst).await
    }

    async fn adopt(&self, from: &str, to: &str) -> Result<SandboxInfo, RuntimeError> {
        // Blocking file and namespace work, off the async worker where the runtime allows it: the
        // worker's other tasks (the adopting create's call to the agent, say) go on meanwhile.
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.adopt_now(from, to))
            }
            _ => self.adopt_now(from, to),
        }
    }

    async fn set_envs(
        &self,
        id: &str,
        envs: std::collections::HashMap<String, String>,
    ) -> Result<(), RuntimeError> {
        let (paths, mut p) = self.load(id)?;
        p.spec.envs = envs;
        paths.save(&p)
    }

    async fn set_egress_lists(&self, id: &str, lists: EgressLists) -> Result<(), RuntimeError> {
        let (paths, mut p) = self.load(id)?;
        let Some(pid) = p.live_pid() else {
            return Err(RuntimeError::NotFound(id.to_string()));
        };
        let netns = PathBuf::from(format!("/proc/{pid}/ns/net"));
        self.change_egress(&paths, &mut p, &netns, lists, true)
            .await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        let dir = self.config.state_dir.join("sandboxes");
        let entries = std::fs::read_dir(&dir).map_err(RuntimeError::io("list", &dir))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if validate_id(&id).is_err() {
                continue;
            }
            if let Some(p) = SandboxPaths::new(&dir, &id).load()? {
                out.push(self.info(&p)?);
            }
        }
        out.sort_by(|a, b| a.spec.id.cmp(&b.spec.id));
        Ok(out)
    }
}
