//! The gVisor tier: the same sandboxes behind a second wall, gVisor's user-space kernel (`runsc`).
//!
//! A gVisor sandbox is everything a namespace sandbox is on the host — its record, its quota'd
//! writable layer over the same image layers, its network slot, veth pair, egress rules and DNS
//! forwarder, its cgroup — made by the same code ([`NamespaceRuntime`], which this runtime shares);
//! only the process differs. Instead of our agent cloned into namespaces of the host's kernel,
//! `runsc run` starts a gVisor sandbox from an OCI bundle ([`bundle`]) whose PID 1 is our agent
//! (`sandboxd-agent init`, configured on standard input: `sandboxd_envd::init`), so every system call
//! of the sandbox is served by gVisor's kernel and only gVisor's own narrow set reaches the host's.
//!
//! - The root is the overlay of the image layers and the writable layer, mounted by the launcher in
//!   runsc's private mount namespace ([`launch`]); runsc writes through to it (`--overlay2=none`).
//! - The network is the sandbox's veth end in a namespace bound on a file ([`netns`]), which runsc
//!   takes into its own network stack; the host side (addresses, NAT, egress rules, forwarder) is
//!   the namespace tier's.
//! - The agent listens on a unix socket it makes in the sandbox's `shared/` directory, bound at
//!   [`SHARED_DIR`] (runsc's `--host-uds`); the daemon reaches it there, with or without network.
//! - Ids: the sandbox's `0..65536` are the storage range on the host (the shared layers' owners), so
//!   the gofer serving its files and the sandbox process run unprivileged; gVisor sandboxes share that
//!   range (runsc maps one range for the root and the layers alike).
//! - The recorded pid is the runsc sandbox process: it is alive exactly while the sandbox is, so
//!   adoption, liveness and the kill are the namespace tier's; pause and resume freeze its cgroup.
//!
//! Whether the tier is offered is decided once, at start, by [`probe`]: a `runsc` recent enough
//! (the systrap platform, working checkpoints) must be installed.

pub(crate) mod bundle;
pub mod launch;
pub mod netns;
mod probe;
mod steps;

pub use probe::{probe, GvisorConfig, INSTALL_HINT};

use crate::namespace::state::{Persisted, SandboxPaths};
use crate::namespace::{limits, mkdir_owned, NamespaceRuntime};
use crate::{
    cgroup, quota, Isolation, ResourceLimits, Runtime, RuntimeError, SandboxInfo, SandboxSpec,
    WritableLayer,
};
use futures::StreamExt;
use launch::Runsc;
use sandboxd_envd::init::{Identity, InitConfig, RESUME_MARKER, SUSPENDED_MARKER, SUSPEND_SIGNAL};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use steps::{
    answers, copy_layer, discard_image, remove_dir, remove_file, run_to_end, sync_dir, touch,
    wait_for_agent, SPENT,
};

/// Where a gVisor sandbox sees its `shared/` directory (its agent's socket is made there).
pub const SHARED_DIR: &str = "/.sandboxd/shared";
/// The agent's socket's name in the shared directory.
pub const AGENT_SOCKET: &str = "agent.sock";
/// How long `runsc run` and the agent's first listen may take together.
const BOOT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the agent may take to close its host sockets before a checkpoint.
const SUSPEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing a checkpoint may take.
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(120);
/// How many forks of one call are restored at once.
const FORK_PARALLELISM: usize = 4;
/// A boot from a checkpoint.
#[derive(Clone, Copy)]
struct Restore<'a> {
    /// The checkpoint's directory.
    image: &'a Path,
    /// A fork's new identity; `None`: the checkpointed one.
    identity: Option<&'a Identity>,
}

/// The gVisor runtime.
pub struct GvisorRuntime {
    host: Arc<NamespaceRuntime>,
    runsc: Runsc,
}

impl GvisorRuntime {
    /// The tier on `host`'s machinery, running sandboxes with `runsc` (see [`probe`]); makes the
    /// empty directory every sandbox's private stage is mounted on ([`launch::STAGE`]).
    pub fn new(host: Arc<NamespaceRuntime>, runsc: Runsc) -> Result<Self, RuntimeError> {
        mkdir_owned(Path::new(launch::STAGE), 0o755, None)?;
        let runtime = Self { host, runsc };
        runtime.clear_unfinished_images()?;
        Ok(runtime)
    }

    /// Removes the checkpoint images a killed daemon left half-written (`<id>.partial`, a pause's),
    /// unfinished (`<id>.fork-<pid>`, a fork's) or spent and not yet removed (`…`[`SPENT`]`…`):
    /// nothing was recorded from them, and a whole checkpoint (`<id>`) is never touched.
    fn clear_unfinished_images(&self) -> Result<(), RuntimeError> {
        let dir = self.host.config.state_dir.join("checkpoints");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(RuntimeError::io("list", &dir)(e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".partial") || name.contains(".fork-") || name.contains(SPENT) {
                tracing::info!(image = %name, "removing an unfinished checkpoint image");
                remove_dir(&entry.path())?;
            }
        }
        Ok(())
    }

    fn load_gvisor(&self, id: &str) -> Result<(SandboxPaths, Persisted), RuntimeError> {
        let (paths, p) = self.host.load(id)?;
        if p.spec.isolation != Isolation::Gvisor {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {id} runs in the {} tier, not in gVisor",
                p.spec.isolation
            )));
        }
        Ok((paths, p))
    }

    /// Ends the sandbox (the namespace tier's kill: process, cgroup, network) and removes what only
    /// a gVisor boot makes: the bound network namespace and runsc's state.
    async fn kill(&self, paths: &SandboxPaths, p: &Persisted) -> Result<(), RuntimeError> {
        self.host.kill(p).await?;
        self.clear_boot(paths)
    }

    fn clear_boot(&self, paths: &SandboxPaths) -> Result<(), RuntimeError> {
        netns::remove(&paths.netns())?;
        for dir in [paths.runsc_root(), paths.bundle()] {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(RuntimeError::io("remove", &dir)(e)),
            }
        }
        let socket = paths.agent_socket(Isolation::Gvisor);
        match std::fs::remove_file(&socket) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RuntimeError::io("remove", &socket)(e)),
        }
    }

    /// Boots `spec`'s sandbox, afresh or (`restore`) from the checkpoint in that directory; returns
    /// the pid of its runsc sandbox process once its agent listens. When it fails, everything this
    /// call made is gone again (a checkpoint is never touched).
    async fn boot(
        &self,
        paths: &SandboxPaths,
        spec: &SandboxSpec,
        restore: Option<Restore<'_>>,
    ) -> Result<i32, RuntimeError> {
        self.clear_boot(paths)?;
        let storage = self.host.config.id_map_base;
        mkdir_owned(&paths.shared(), 0o700, Some(storage))?;
        mkdir_owned(&paths.runsc_root(), 0o700, None)?;
        mkdir_owned(&paths.bundle(), 0o700, None)?;
        let root = self.host.root_plan(spec)?;
        let oci = bundle::spec(spec, &root, paths, storage)?;
        oci.save(paths.bundle().join("config.json"))
            .map_err(RuntimeError::Bundle)?;
        let cgroup = self.host.cgroups.create(&spec.id, &limits(spec))?;
        let mut attached = false;
        let booted = tokio::time::timeout(
            BOOT_TIMEOUT,
            self.launch(paths, spec, &root, &cgroup, restore, &mut attached),
        )
        .await
        .unwrap_or_else(|_| {
            Err(RuntimeError::Boot {
                stage: "timeout".into(),
                message: format!("the agent did not listen within {BOOT_TIMEOUT:?}"),
            })
        });
        self.host.replenish_spares();
        if let Err(e) = booted {
            let _ = cgroup.kill_all();
            let _ = cgroup.remove();
            if attached {
                self.host.unwire(spec).await;
            }
            let _ = self.clear_boot(paths);
            return Err(crate::namespace::boot::with_log(e, &paths.log()));
        }
        booted
    }

    fn checkpoint_dir(&self, id: &str) -> PathBuf {
        self.host.checkpoint_dir(id)
    }

    /// Checkpoints the running sandbox `p` and stops it. The image is written under a temporary
    /// name, synced and renamed: a checkpoint directory is always whole. When it fails, the
    /// sandbox keeps running (its agent listens again) and no partial image stays.
    async fn checkpoint(&self, paths: &SandboxPaths, p: &Persisted) -> Result<(), RuntimeError> {
        let id = &p.spec.id;
        let final_dir = self.checkpoint_dir(id);
        let partial = final_dir.with_extension("partial");
        self.save(paths, id, &partial, false).await?;
        remove_dir(&final_dir)?;
        std::fs::rename(&partial, &final_dir).map_err(RuntimeError::io("rename", &final_dir))?;
        if let Some(parent) = final_dir.parent() {
            sync_dir(parent)?;
        }
        // runsc ended the sandbox once its image was written: the host side goes now.
        self.kill(paths, p).await
    }

    /// Closes the agent's door and writes a checkpoint of running sandbox `id` into `image` (made
    /// afresh), synced. `leave_running`: the sandbox goes on and its door reopens; else runsc ends
    /// it. On failure the sandbox keeps running, its door reopened, and `image` is gone.
    async fn save(
        &self,
        paths: &SandboxPaths,
        id: &str,
        image: &Path,
        leave_running: bool,
    ) -> Result<(), RuntimeError> {
        let (suspended, resume) = (
            paths.shared().join(SUSPENDED_MARKER),
            paths.shared().join(RESUME_MARKER),
        );
        for marker in [&suspended, &resume] {
            remove_file(marker)?;
        }
        remove_dir(image)?;
        mkdir_owned(image, 0o700, None)?;
        let saved = async {
            self.runsc_quick(paths, &["kill", id, SUSPEND_SIGNAL])
                .await?;
            wait_for_agent("suspend", "close its sockets", || async {
                suspended.exists()
            })
            .await?;
            let path = format!("--image-path={}", image.display());
            let mut cmd = self.runsc.command(&paths.runsc_root());
            // Uncompressed, without the zero pages: a pause and its resume are bound by how
            // fast memory reaches the disk and comes back, not by the disk's size.
            cmd.args([
                "checkpoint",
                &path,
                "--compression=none",
                "--exclude-committed-zero-pages",
            ]);
            if leave_running {
                cmd.arg("--leave-running");
            }
            cmd.arg(id);
            run_to_end(cmd, CHECKPOINT_TIMEOUT, "runsc checkpoint").await?;
            let dir = image.to_path_buf();
            tokio::task::spawn_blocking(move || sync_dir(&dir))
                .await
                .map_err(|e| RuntimeError::Host(format!("sync task panicked: {e}")))?
        }
        .await;
        if saved.is_err() || leave_running {
            // The sandbox still runs: its agent opens its door again.
            touch(&resume)?;
        }
        if saved.is_err() {
            let _ = remove_dir(image);
        }
        saved
    }

    /// Copies running sandbox `p` into one new sandbox per spec of `clones` from one live
    /// checkpoint; see [`Runtime::fork`].
    async fn fork_from(
        &self,
        paths: &SandboxPaths,
        p: &Persisted,
        clones: &[SandboxSpec],
    ) -> Result<Vec<Result<SandboxInfo, RuntimeError>>, RuntimeError> {
        let id = &p.spec.id;
        let image = self
            .checkpoint_dir(id)
            .with_extension(format!("fork-{}", std::process::id()));
        self.save(paths, id, &image, true).await?;
        let source = self.host.writable_layer(id).await?;
        // The restores overlap (each waits on runsc for much of its time); answers keep their order.
        // The futures are made up front: a lazily mapping stream would not be `Send` here.
        let forks: Vec<_> = clones
            .iter()
            .map(|spec| self.clone_or_undo(p, spec, &image, &source.path))
            .collect();
        let made = futures::stream::iter(forks)
            .buffered(FORK_PARALLELISM)
            .collect::<Vec<_>>()
            .await;
        discard_image(&image)?;
        Ok(made)
    }

    /// [`Self::clone_from`], destroying what it made when it fails.
    async fn clone_or_undo(
        &self,
        source: &Persisted,
        spec: &SandboxSpec,
        image: &Path,
        layer: &Path,
    ) -> Result<SandboxInfo, RuntimeError> {
        let clone = self.clone_from(source, spec, image, layer).await;
        if clone.is_err() {
            let _ = self.destroy(&spec.id).await;
        }
        clone
    }

    /// One fork: `spec`'s sandbox made with a copy of the source's writable layer `layer` and
    /// restored from `image` under its own identity.
    async fn clone_from(
        &self,
        source: &Persisted,
        spec: &SandboxSpec,
        image: &Path,
        layer: &Path,
    ) -> Result<SandboxInfo, RuntimeError> {
        if spec.isolation != Isolation::Gvisor {
            return Err(RuntimeError::Unsupported(format!(
                "a fork of gVisor sandbox {} must be a gVisor sandbox too",
                source.spec.id
            )));
        }
        self.host.create(spec).await?;
        let (paths, mut p) = self.load_gvisor(&spec.id)?;
        let upper = self.host.writable_layer(&spec.id).await?.path;
        copy_layer(layer, &upper).await?;
        p.generation = source.generation + 1;
        let identity = Identity {
            sandbox_id: spec.id.clone(),
            token: spec.agent_token.clone(),
            generation: p.generation,
        };
        let restore = Restore {
            image,
            identity: Some(&identity),
        };
        let pid = self.boot(&paths, spec, Some(restore)).await?;
        p.pid = Some(pid);
        p.start_time = crate::namespace::process::start_time(pid);
        p.started = true;
        paths.save(&p)?;
        self.host.info(&p)
    }

    /// Has the agent of running sandbox `paths` open its door again if it closed it for a checkpoint
    /// that never finished (the daemon that asked died meanwhile), and waits until it answers.
    async fn reopen_door(&self, paths: &SandboxPaths) -> Result<(), RuntimeError> {
        let suspended = paths.shared().join(SUSPENDED_MARKER);
        if !suspended.exists() {
            return Ok(());
        }
        touch(&paths.shared().join(RESUME_MARKER))?;
        let socket = paths.agent_socket(Isolation::Gvisor);
        // Init takes both markers away, then listens again.
        wait_for_agent("resume", "open its door again", || async {
            !suspended.exists() && answers(&socket).await
        })
        .await
    }

    /// Runs a short runsc command on sandbox `paths`' state; its output is the error when it fails.
    async fn runsc_quick(&self, paths: &SandboxPaths, args: &[&str]) -> Result<(), RuntimeError> {
        let mut cmd = self.runsc.command(&paths.runsc_root());
        cmd.args(args);
        run_to_end(cmd, Duration::from_secs(10), "runsc").await
    }

    async fn launch(
        &self,
        paths: &SandboxPaths,
        spec: &SandboxSpec,
        root: &crate::namespace::boot::RootPlan,
        cgroup: &cgroup::SandboxCgroup,
        restore: Option<Restore<'_>>,
        attached: &mut bool,
    ) -> Result<i32, RuntimeError> {
        netns::create(&paths.netns())?;
        *attached = true;
        let addrs = self
            .host
            .net
            .attach_at(spec.net_slot, &paths.netns(), spec.may_send_out())
            .await?;
        if spec.needs_egress_rules() {
            crate::namespace::egress::allow(&addrs, spec).await?;
        }
        if spec.has_names() {
            self.host.start_forwarder(spec).await?;
        }
        let layers: Vec<PathBuf> = std::iter::once(root.lower.clone())
            .chain(root.below.iter().cloned())
            .collect();
        let overlay = launch::overlay_options(&layers, &paths.upper(), &paths.work());
        let pid_file = paths.runsc_root().join("sandbox.pid");
        let mut cmd = self.runsc.command(&paths.runsc_root());
        match &restore {
            None => cmd.arg("run"),
            Some(from) => cmd
                .arg("restore")
                .arg(format!("--image-path={}", from.image.display())),
        };
        cmd.arg("--detach")
            .arg(format!("--bundle={}", paths.bundle().display()))
            .arg(format!("--pid-file={}", pid_file.display()))
            .arg(&spec.id);
        let log_path = paths.log();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(RuntimeError::io("open", &log_path))?;
        let volumes = root
            .volumes
            .iter()
            .map(open_volume)
            .collect::<Result<Vec<_>, _>>()?;
        let plan = launch::StagePlan {
            overlay: &overlay,
            shared: &paths.shared(),
            callback: self.host.config.callback_dir.as_deref(),
            agent: &self.host.config.agent_binary,
            volumes: &volumes,
        };
        if let Some(from) = &restore {
            // The word to reopen the door, left before the restore begins so the restored init
            // finds it on its first look; a fork's carries its new identity.
            let word = from
                .identity
                .map(|id| serde_json::to_vec(id).unwrap_or_default())
                .unwrap_or_default();
            // Whole or absent: init acts on the marker as soon as it exists, and a word read half
            // written would reopen a fork's door under its source's token.
            let marker = paths.shared().join(RESUME_MARKER);
            let written = marker.with_extension("new");
            std::fs::write(&written, word).map_err(RuntimeError::io("write", &written))?;
            std::fs::rename(&written, &marker).map_err(RuntimeError::io("rename", &marker))?;
        }
        let mut child = launch::spawn(cmd, &cgroup.self_join_files()?, &plan, log)?;
        let config = InitConfig {
            sandbox_id: spec.id.clone(),
            socket: Path::new(SHARED_DIR).join(AGENT_SOCKET),
            token: spec.agent_token.clone(),
            default_user: "user".into(),
            envs: root.envs.clone(),
            workdir: root.workdir.clone(),
            callback_socket: root.callback_socket.clone(),
        };
        if let Some(mut stdin) = child.stdin.take() {
            // A restored agent is configured already: it only waits for its door to be reopened.
            if restore.is_none() {
                // A failed write shows as the agent's own failure in the log.
                let _ = stdin.write_all(&config.to_line());
            }
        }
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .map_err(|e| RuntimeError::Host(format!("runsc waiter panicked: {e}")))?
            .map_err(RuntimeError::Spawn)?;
        if !status.success() {
            return Err(RuntimeError::Boot {
                stage: "runsc run".into(),
                message: format!("runsc exited with {status}"),
            });
        }
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .map_err(RuntimeError::io("read", &pid_file))?
            .trim()
            .parse()
            .map_err(|_| RuntimeError::Boot {
                stage: "runsc run".into(),
                message: format!("{} holds no pid", pid_file.display()),
            })?;
        let socket = paths.agent_socket(Isolation::Gvisor);
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        // The socket file appears at bind, a moment before the agent listens: wait for an answer.
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if !proc_dir.exists() {
                return Err(RuntimeError::Boot {
                    stage: "agent".into(),
                    message: "the sandbox ended before its agent listened".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(pid)
    }
}

#[async_trait::async_trait]
impl Runtime for GvisorRuntime {
    fn offers(&self, tier: Isolation) -> Result<(), RuntimeError> {
        match tier {
            Isolation::Gvisor => Ok(()),
            other => Err(RuntimeError::Unsupported(format!(
                "the gVisor runtime does not run {other} sandboxes"
            ))),
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<SandboxInfo, RuntimeError> {
        self.offers(spec.isolation)?;
        self.host.create(spec).await
    }

    async fn start(&self, id: &str) -> Result<SandboxInfo, RuntimeError> {
        let (paths, mut p) = self.load_gvisor(id)?;
        if p.live_pid().is_some() {
            return self.host.info(&p);
        }
        if p.started {
            // It ended on its own (an out-of-memory kill, say): its network namespace, bound on
            // a file, outlived it with the veth pair, egress rules and cgroup; they go first.
            self.kill(&paths, &p).await?;
        }
        let checkpoint = self.checkpoint_dir(id);
        let restore = checkpoint.is_dir().then_some(Restore {
            image: &checkpoint,
            identity: None,
        });
        let restored = restore.is_some();
        let pid = self.boot(&paths, &p.spec, restore).await?;
        p.pid = Some(pid);
        p.start_time = crate::namespace::process::start_time(pid);
        p.started = true;
        if let Err(e) = paths.save(&p) {
            let _ = self.kill(&paths, &p).await;
            return Err(e);
        }
        if restored {
            // The running sandbox owns its memory now; an older image must never be restored.
            discard_image(&checkpoint)?;
        }
        self.host.info(&p)
    }

    async fn stop(&self, id: &str) -> Result<(), RuntimeError> {
        let (paths, p) = self.load_gvisor(id)?;
        self.kill(&paths, &p).await?;
        // A stop keeps the files and drops the memory.
        remove_dir(&self.checkpoint_dir(id))
    }

    async fn halt(&self, id: &str) -> Result<(), RuntimeError> {
        self.host.halt(id).await
    }

    async fn destroy(&self, id: &str) -> Result<(), RuntimeError> {
        crate::validate_id(id)?;
        let paths = self.host.paths(id);
        if let Some(p) = paths.load()? {
            self.kill(&paths, &p).await?;
        } else {
            self.clear_boot(&paths)?;
        }
        let checkpoint = self.checkpoint_dir(id);
        remove_dir(&checkpoint)?;
        remove_dir(&checkpoint.with_extension("partial"))?;
        self.host.destroy(id).await
    }

    async fn slot_free(&self, slot: u32) -> Result<bool, RuntimeError> {
        self.host.slot_free(slot).await
    }

    async fn fork(
        &self,
        id: &str,
        clones: &[SandboxSpec],
    ) -> Result<Vec<Result<SandboxInfo, RuntimeError>>, RuntimeError> {
        let (paths, p) = self.load_gvisor(id)?;
        if p.live_pid().is_none() {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {id} is not running: only a running sandbox can be forked"
            )));
        }
        self.fork_from(&paths, &p, clones).await
    }

    async fn inspect(&self, id: &str) -> Result<Option<SandboxInfo>, RuntimeError> {
        self.host.inspect(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        self.host.list().await
    }

    /// Pause with memory: the sandbox's processes and memory go to a checkpoint on disk and the
    /// sandbox stops, freeing its memory; it survives a daemon restart and a host reboot.
    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        let (paths, p) = self.load_gvisor(id)?;
        if p.live_pid().is_none() {
            return match self.checkpoint_dir(id).is_dir() {
                true => Ok(()),
                false => Err(RuntimeError::NotFound(id.to_string())),
            };
        }
        self.checkpoint(&paths, &p).await
    }

    /// Restores a sandbox paused with memory under the same identity; thaws one frozen in place,
    /// and opens the door of one whose checkpoint was cut short (a daemon killed mid-pause).
    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        let (paths, p) = self.load_gvisor(id)?;
        if p.live_pid().is_some() {
            self.reopen_door(&paths).await?;
            return self.host.resume(id).await;
        }
        if !self.checkpoint_dir(id).is_dir() {
            return Err(RuntimeError::NotFound(id.to_string()));
        }
        self.start(id).await.map(|_| ())
    }

    async fn connect_from(
        &self,
        id: &str,
        dst: std::net::SocketAddr,
    ) -> Result<tokio::net::TcpStream, RuntimeError> {
        // gVisor's stack owns the sandbox's address: the connection is the host's, marked so the
        // sandbox's own lists apply to it (`namespace::egress`). Only for a sandbox behind the
        // gateway, whose mark the rules know.
        let (_, p) = self.load_gvisor(id)?;
        if p.live_pid().is_none() {
            return Err(RuntimeError::NotFound(id.to_string()));
        }
        if p.spec.egress_gateway.is_none() {
            return Err(RuntimeError::Unsupported(format!(
                "sandbox {id} is not behind the egress gateway"
            )));
        }
        let addrs = self.host.net.addrs(p.spec.net_slot)?;
        let mark = crate::namespace::egress::gateway_mark(addrs.sandbox);
        crate::namespace::net::connect_marked(mark, dst).await
    }

    async fn set_egress_lists(
        &self,
        id: &str,
        lists: crate::EgressLists,
    ) -> Result<(), RuntimeError> {
        let (paths, mut p) = self.load_gvisor(id)?;
        if p.live_pid().is_none() {
            return Err(RuntimeError::NotFound(id.to_string()));
        }
        // gVisor's netstack takes the routes once, at boot, and its gofer caches the root's files.
        self.host
            .change_egress(&paths, &mut p, &paths.netns(), lists, false)
            .await
    }

    async fn set_envs(
        &self,
        id: &str,
        envs: std::collections::HashMap<String, String>,
    ) -> Result<(), RuntimeError> {
        // A boot from scratch starts the agent with these; a restore from a checkpoint brings back
        // the agent as it was told last (the service tells the running one).
        let (paths, mut p) = self.load_gvisor(id)?;
        p.spec.envs = envs;
        paths.save(&p)
    }

    async fn disk_usage(&self, id: &str) -> Result<quota::DiskUsage, RuntimeError> {
        self.host.disk_usage(id).await
    }

    async fn writable_layer(&self, id: &str) -> Result<WritableLayer, RuntimeError> {
        self.host.writable_layer(id).await
    }

    async fn resize(&self, id: &str, limits: &ResourceLimits) -> Result<(), RuntimeError> {
        self.host.resize(id, limits).await
    }

    async fn stats(&self, id: &str) -> Result<cgroup::CgroupStats, RuntimeError> {
        self.host.stats(id).await
    }
}

/// The directory of `volume` the sandbox mounts, opened beneath the volume's root without following
/// any link (a link a sandbox planted in a shared volume never redirects a mount), as a detached
/// mount its stage takes ([`launch::StagePlan::volumes`]).
fn open_volume(
    volume: &sandboxd_envd::boot::VolumeMount,
) -> Result<std::os::fd::OwnedFd, RuntimeError> {
    use sandboxd_volumes::beneath;
    use std::os::fd::AsFd;
    let subpath =
        sandboxd_volumes::RelPath::parse(&volume.subpath).map_err(|e| RuntimeError::Boot {
            stage: "volume subpath".into(),
            message: e.to_string(),
        })?;
    beneath::open_root(&volume.root)
        .and_then(|root| beneath::open_dir(&root, &subpath, true))
        .and_then(|dir| sandboxd_idmap::detached_clone(dir.as_fd()))
        .map_err(|e| RuntimeError::Boot {
            stage: "open volume".into(),
            message: format!("{}{}: {e}", volume.root.display(), subpath.display()),
        })
}
